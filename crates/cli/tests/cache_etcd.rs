//! Leadership from etcd (`--coordinator`): a local cache with `inec cache up --coordinator
//! local` (Debian's etcd-server, started for the cache) leads each stripe through an etcd key,
//! fails over within a heartbeat or two of a SIGKILL (the refused connection revokes the dead
//! node's lease), takes over from a stopped agent only once its etcd lease has run out, and
//! gives each stripe back, in a newer term, to its preferred agent when it is ready again.
//! Built with `--features inec-cli/etcd` (scripts/test-all does); skips without etcd, or fails
//! under CI.
#![cfg(feature = "etcd")]

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use harness::cache::{InecCache, InecOptions};

fn set(addr: SocketAddr, key: &str, value: &[u8]) -> String {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    write!(s, "set {key} 0 0 {}\r\n", value.len()).unwrap();
    s.write_all(value).unwrap();
    s.write_all(b"\r\n").unwrap();
    let mut line = String::new();
    BufReader::new(s).read_line(&mut line).unwrap();
    line
}

fn get(addr: SocketAddr, key: &str) -> Result<Option<Vec<u8>>, String> {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    write!(s, "get {key}\r\n").unwrap();
    let mut r = BufReader::new(s);
    let mut line = String::new();
    r.read_line(&mut line).unwrap();
    if line == "END\r\n" {
        return Ok(None);
    }
    let Some(len) = line
        .strip_prefix("VALUE ")
        .and_then(|l| l.trim_end().rsplit(' ').next())
        .and_then(|l| l.parse::<usize>().ok())
    else {
        return Err(line);
    };
    let mut data = vec![0; len + 2];
    r.read_exact(&mut data).unwrap();
    data.truncate(len);
    Ok(Some(data))
}

fn stats(addr: SocketAddr) -> BTreeMap<String, String> {
    let text = harness::ask(addr, "stats inec\r\n", Duration::from_secs(5)).unwrap_or_default();
    harness::parse_stats(&text)
}

/// The term node `node` holds of `stripe` (0: none).
fn term(c: &InecCache, node: usize, stripe: usize) -> u64 {
    stats(c.addrs()[node])
        .get(&format!("stripe_{stripe}_term"))
        .and_then(|t| t.parse().ok())
        .unwrap_or(0)
}

/// Waits until node `node` holds a term of `stripe`; returns it and how long it took.
fn wait_term(c: &InecCache, node: usize, stripe: usize, within: Duration) -> (u64, Duration) {
    let start = Instant::now();
    loop {
        let t = term(c, node, stripe);
        if t > 0 {
            return (t, start.elapsed());
        }
        assert!(
            start.elapsed() < within,
            "node {node} did not take stripe {stripe} within {within:?}: {:?}",
            stats(c.addrs()[node])
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Keys of `stripe` among `nodes` nodes.
fn keys_of(nodes: usize, chunks: usize, stripe: usize, count: usize) -> Vec<String> {
    let p = cache::cluster::placement::Placement::new(nodes, chunks);
    (0..)
        .map(|i| format!("k{i}"))
        .filter(|k| p.stripe_of(k.as_bytes()) == stripe)
        .take(count)
        .collect()
}

fn value(key: &str, round: u8) -> Vec<u8> {
    let seed = key
        .bytes()
        .fold(u32::from(round), |a, b| a * 31 + u32::from(b));
    (0..3000u32).map(|j| (seed + j * 7) as u8).collect()
}

/// A local RS(3,2) cache of five nodes led through a local etcd; `None` (the test skips or
/// fails) without etcd.
fn etcd_cache(dir: &std::path::Path) -> Option<InecCache> {
    if !harness::etcd::installed() {
        harness::skip::skip_or_fail("etcd", "Debian package etcd-server");
        return None;
    }
    let mut o = InecOptions::new(env!("CARGO_BIN_EXE_inec"), "rs:3,2", "rs", "coherent", 16);
    o.options.down_after_ms = 500;
    o.options.coordinator = Some("local".into());
    Some(InecCache::start_in(&o, dir).expect("inec cache up --coordinator local"))
}

static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

#[test]
fn a_killed_agent_is_replaced_at_once_and_takes_its_stripe_back_in_a_newer_term() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let dir = std::env::temp_dir().join(format!("inec-etcd-kill-{}", std::process::id()));
    let Some(mut c) = etcd_cache(&dir) else {
        return;
    };
    // Every node leads its own stripe, each in a term of its own.
    let first: Vec<u64> = (0..5).map(|s| term(&c, s, s)).collect();
    assert!(first.iter().all(|&t| t > 0), "{first:?}");
    let mut sorted = first.clone();
    sorted.dedup();
    assert_eq!(sorted.len(), 5, "{first:?}");
    let st = stats(c.addrs()[0]);
    assert_eq!(st["coordinator"], "etcd");
    assert_eq!(st["stripes_led"], "1");

    let keys = keys_of(5, 5, 2, 20);
    for k in &keys {
        assert_eq!(set(c.addrs()[0], k, &value(k, 1)), "STORED\r\n", "{k}");
    }
    // Node 2 dies: the refused connection revokes its etcd lease, and node 3 (next in
    // stripe 2's order) takes the stripe well before the lease's 2 s would run out.
    c.kill(2).unwrap();
    let (taken, after) = wait_term(&c, 3, 2, Duration::from_secs(10));
    assert!(taken > first[2], "term {taken} after {}", first[2]);
    assert!(after < Duration::from_secs(2), "took over after {after:?}");
    for k in &keys {
        assert_eq!(get(c.addrs()[1], k), Ok(Some(value(k, 1))), "{k}");
        assert_eq!(set(c.addrs()[4], k, &value(k, 2)), "STORED\r\n", "{k}");
    }
    // Restarted empty, node 2 recovers, then takes stripe 2 back in a newer term.
    c.restart(2).unwrap();
    c.wait_recovered(Duration::from_secs(60))
        .unwrap_or_else(|e| panic!("{e}"));
    let (back, _) = wait_term(&c, 2, 2, Duration::from_secs(10));
    assert!(back > taken, "term {back} after {taken}");
    let deadline = Instant::now() + Duration::from_secs(10);
    while term(&c, 3, 2) != 0 {
        assert!(Instant::now() < deadline, "node 3 still leads stripe 2");
        std::thread::sleep(Duration::from_millis(20));
    }
    for k in &keys {
        for node in 0..5 {
            assert_eq!(
                get(c.addrs()[node], k),
                Ok(Some(value(k, 2))),
                "{k} at {node}"
            );
        }
    }
    drop(c);
    assert!(!dir.exists());
}

#[test]
fn a_stopped_agent_is_replaced_only_after_its_lease_and_serves_nothing_stale_when_it_resumes() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let dir = std::env::temp_dir().join(format!("inec-etcd-pause-{}", std::process::id()));
    let Some(c) = etcd_cache(&dir) else {
        return;
    };
    let first = term(&c, 0, 0);
    assert!(first > 0);
    let keys = keys_of(5, 5, 0, 20);
    for k in &keys {
        assert_eq!(set(c.addrs()[1], k, &value(k, 1)), "STORED\r\n", "{k}");
    }
    // Node 0 stops (SIGSTOP): nothing refuses a connection, it just says nothing. Its etcd
    // lease (2 s) runs out, and only then does node 1 take stripe 0 over.
    let pid = c.pids()[0];
    let stopped = Instant::now();
    harness::process::sigstop(pid);
    let (taken, _) = wait_term(&c, 1, 0, Duration::from_secs(15));
    let after = stopped.elapsed();
    assert!(taken > first);
    assert!(
        after >= Duration::from_millis(1500),
        "node 1 took over {after:?} after the stop, before node 0's lease could run out"
    );
    for k in &keys {
        assert_eq!(set(c.addrs()[2], k, &value(k, 2)), "STORED\r\n", "{k}");
    }
    // A request waits in node 0's socket while it is stopped.
    let mut queued = TcpStream::connect(c.addrs()[0]).unwrap();
    queued
        .set_read_timeout(Some(Duration::from_secs(20)))
        .unwrap();
    write!(queued, "get {}\r\n", keys[0]).unwrap();
    harness::process::sigcont(pid);
    // Resumed, it answers from the newer values only: the stripe's index it held is of a term
    // that is over.
    let mut r = BufReader::new(queued);
    let mut line = String::new();
    r.read_line(&mut line).unwrap();
    if line.starts_with("VALUE") {
        let mut data = vec![0; 3002];
        r.read_exact(&mut data).unwrap();
        data.truncate(3000);
        assert_eq!(data, value(&keys[0], 2), "a stale value after the pause");
    } else {
        assert!(line.starts_with("SERVER_ERROR"), "{line:?}");
    }
    let until = Instant::now() + Duration::from_secs(4);
    while Instant::now() < until {
        for k in &keys {
            match get(c.addrs()[0], k) {
                Ok(v) => assert_eq!(v, Some(value(k, 2)), "{k}: a stale or lost value"),
                Err(line) => assert!(line.starts_with("SERVER_ERROR"), "{line:?}"),
            }
        }
    }
    // Node 0 takes stripe 0 back in a newer term.
    let (back, _) = wait_term(&c, 0, 0, Duration::from_secs(15));
    assert!(back > taken);
    for k in &keys {
        assert_eq!(get(c.addrs()[0], k), Ok(Some(value(k, 2))), "{k}");
    }
    drop(c);
}
