//! Every byte table entry against the real memcached 1.6 (`/usr/bin/memcached`, installed by
//! `scripts/test-all`): its reply must be the bytes the composers give (or, for a documented
//! deviation, the bytes recorded as memcached's).

mod common;

use std::io::{ErrorKind, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::{cases, show};

const MEMCACHED: &str = "/usr/bin/memcached";

/// A memcached on a free loopback port, killed and reaped when dropped.
struct Memcached {
    child: Child,
    port: u16,
}

impl Drop for Memcached {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn is_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .map(|o| o.stdout.trim_ascii() == b"0")
        .unwrap_or(false)
}

fn start_memcached() -> Memcached {
    assert!(
        std::path::Path::new(MEMCACHED).exists(),
        "{MEMCACHED} is missing: install the memcached package (scripts/test-all does)"
    );
    for _attempt in 0..5 {
        let port = TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let mut cmd = Command::new(MEMCACHED);
        cmd.args([
            "-l",
            "127.0.0.1",
            "-p",
            &port.to_string(),
            "-U",
            "0",
            "-m",
            "64",
        ]);
        if is_root() {
            cmd.args(["-u", "root"]);
        }
        let child = cmd
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let mut m = Memcached { child, port };
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if TcpStream::connect(("127.0.0.1", port)).is_ok() {
                return m;
            }
            if m.child.try_wait().unwrap().is_some() {
                break; // the port was taken meanwhile; try another
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }
    panic!("memcached did not start");
}

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
    let m = start_memcached();
    let mut failures = Vec::new();
    for c in cases() {
        let mut s = TcpStream::connect(("127.0.0.1", m.port)).unwrap();
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
