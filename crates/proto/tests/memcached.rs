//! Every byte table entry against the real memcached 1.6 (`/usr/bin/memcached`, installed by
//! `scripts/test-all`): its reply must be the bytes the composers give (or, for a documented
//! deviation, the bytes recorded as memcached's).

mod common;

use std::io::{ErrorKind, Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use common::{cases, show};
use harness::Memcached;

/// Sent after each request; its reply (a miss that echoes the key and the opaque token) marks
/// the end of the request's reply.
const SENTINEL: &[u8] = b"mg __end__ k Oend\r\n";
const SENTINEL_REPLY: &[u8] = b"EN k__end__ Oend\r\n";

/// Reads until the received bytes end with `end` (or EOF when `end` is empty).
fn read_until(s: &mut TcpStream, end: &[u8]) -> Vec<u8> {
    let mut got = Vec::new();
    let mut buf = vec![0u8; 65536];
    loop {
        if !end.is_empty() && got.ends_with(end) {
            return got;
        }
        match s.read(&mut buf) {
            Ok(0) => return got,
            Ok(n) => got.extend_from_slice(&buf[..n]),
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(e) => panic!("read from memcached: {e} after {}", show(&got)),
        }
    }
}

/// CAS values differ from run to run: replace them with `#` on both sides.
fn mask_cas(reply: &[u8]) -> Vec<u8> {
    let text = String::from_utf8_lossy(reply);
    let mut out = String::new();
    for line in text.split_inclusive("\r\n") {
        let body = line.trim_end_matches("\r\n");
        let tokens: Vec<&str> = body.split(' ').collect();
        let masked: Vec<String> = if tokens[0] == "VALUE" && tokens.len() == 5 {
            let mut t: Vec<String> = tokens.iter().map(|s| s.to_string()).collect();
            t[4] = "#".into();
            t
        } else if matches!(tokens[0], "VA" | "HD" | "EN" | "NS" | "EX" | "NF") {
            tokens
                .iter()
                .map(|t| {
                    if t.len() > 1
                        && t.starts_with('c')
                        && t[1..].bytes().all(|b| b.is_ascii_digit())
                    {
                        "c#".to_string()
                    } else {
                        t.to_string()
                    }
                })
                .collect()
        } else {
            tokens.iter().map(|s| s.to_string()).collect()
        };
        out.push_str(&masked.join(" "));
        out.push_str(&line[body.len()..]);
    }
    out.into_bytes()
}

#[test]
fn every_table_entry_matches_real_memcached() {
    let Some(m) = Memcached::for_test() else {
        return;
    };
    let mut failures = Vec::new();
    for c in cases() {
        let mut s = TcpStream::connect(m.addr()).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
        s.write_all(&[b"flush_all\r\n", &c.setup[..], SENTINEL].concat())
            .unwrap();
        read_until(&mut s, SENTINEL_REPLY);
        let got = if c.closes {
            s.write_all(&c.request).unwrap();
            read_until(&mut s, b"")
        } else {
            s.write_all(&[&c.request[..], SENTINEL].concat()).unwrap();
            let mut g = read_until(&mut s, SENTINEL_REPLY);
            g.truncate(g.len().saturating_sub(SENTINEL_REPLY.len()));
            g
        };
        let want = c.memcached_reply.as_ref().unwrap_or(&c.reply);
        if mask_cas(&got) != mask_cas(want) {
            failures.push(format!(
                "{}: memcached replied {} but the table says {}",
                c.name,
                show(&got),
                show(want)
            ));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
