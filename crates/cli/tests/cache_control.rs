//! `harness::cache::InecCache` controls a real local cache: kill a node (SIGKILL),
//! read its state through `stats inec`, restart it empty and wait until it has recovered.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use harness::cache::{InecCache, InecOptions, NodeHealth};
use harness::pid_alive;

fn set(addr: SocketAddr, key: &str, value: &[u8]) {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    write!(s, "set {key} 0 0 {}\r\n", value.len()).unwrap();
    s.write_all(value).unwrap();
    s.write_all(b"\r\n").unwrap();
    let mut line = String::new();
    BufReader::new(s).read_line(&mut line).unwrap();
    assert_eq!(line, "STORED\r\n", "set {key}");
}

fn get(addr: SocketAddr, key: &str) -> Option<Vec<u8>> {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    write!(s, "get {key}\r\n").unwrap();
    let mut r = BufReader::new(s);
    let mut line = String::new();
    r.read_line(&mut line).unwrap();
    if line == "END\r\n" {
        return None;
    }
    let len: usize = line
        .trim_end()
        .rsplit(' ')
        .next()
        .and_then(|l| l.parse().ok())
        .unwrap_or_else(|| panic!("get {key}: {line:?}"));
    let mut data = vec![0; len + 2];
    r.read_exact(&mut data).unwrap();
    data.truncate(len);
    Some(data)
}

/// Held by each test of this file for its whole run: the tests start caches on free ports
/// chosen at random, and one test's `cache up`s (36 nodes at once) could otherwise choose a
/// port of the other's node while it is down between a kill and its restart.
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

/// A local RS(3,2) cache of five nodes in `dir`, nodes declared down after 500 ms.
fn rs32_cache(dir: &std::path::Path) -> InecCache {
    let mut o = InecOptions::new(env!("CARGO_BIN_EXE_inec"), "rs:3,2", "rs", "coherent", 16);
    o.options.down_after_ms = 500;
    InecCache::start_in(&o, dir).expect("inec cache up")
}

fn value(i: usize) -> Vec<u8> {
    (0..3000).map(|j| (i * 31 + j * 7) as u8).collect()
}

#[test]
fn kill_restart_and_recover_a_node() {
    let _serial = serial();
    let dir = std::env::temp_dir().join(format!("inec-cache-control-{}", std::process::id()));
    let mut c = rs32_cache(&dir);
    assert_eq!(c.dir(), dir);
    assert_eq!(c.addrs().len(), 5);
    // `cache up` returns once every node sees every other one up; on a loaded machine a
    // node's view of the stripes may need another heartbeat or two to be whole.
    c.wait_recovered(Duration::from_secs(10))
        .unwrap_or_else(|e| panic!("{e}"));
    let st = c.status();
    assert!(st.recovered(), "{}", st.summary());
    assert!(st.nodes.iter().all(|n| n.health == NodeHealth::Up));
    assert_eq!(st.stripe_counts(), vec![("whole".to_string(), 5)]);
    assert_eq!(
        st.stripes.iter().map(|s| s.agent).collect::<Vec<_>>(),
        (0..5).map(Some).collect::<Vec<_>>()
    );

    let keys = 40;
    for i in 0..keys {
        set(c.addrs()[i % 5], &format!("k{i}"), &value(i));
    }

    // A crash: the node's process is gone, the others see it down and serve degraded.
    let old = c.pids()[2];
    c.kill(2).unwrap();
    assert!(!pid_alive(old));
    let deadline = Instant::now() + Duration::from_secs(10);
    let st = loop {
        let st = c.status();
        if st.stripes.iter().all(|s| s.state == "degraded") || Instant::now() > deadline {
            break st;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    assert_eq!(st.nodes[2].health, NodeHealth::Down, "{}", st.summary());
    // Node 2 holds a position of every stripe of a 5-node RS(3,2).
    assert_eq!(st.stripe_counts(), vec![("degraded".to_string(), 5)]);
    // Stripe 2's agent moved to its next member.
    assert_eq!(st.stripes[2].agent, Some(3));
    assert!(!st.recovered());
    for i in 0..keys {
        assert_eq!(get(c.addrs()[0], &format!("k{i}")), Some(value(i)), "k{i}");
    }
    assert!(c.status().degraded_reads() > 0);
    // Writes are acknowledged while it is down.
    set(c.addrs()[1], "written-while-down", &value(99));

    // Restarted empty, it recovers every key it holds a position of.
    c.restart(2).unwrap();
    assert_ne!(c.pids()[2], old);
    assert!(pid_alive(c.pids()[2]));
    let mut seen = Vec::new();
    let waited = c
        .wait_recovered_with(Duration::from_secs(120), Duration::from_millis(50), |s| {
            seen.push(s.clone())
        })
        .expect("recovered");
    assert!(waited < Duration::from_secs(120));
    let last = seen.last().unwrap();
    assert!(last.recovered());
    let n2 = &last.nodes[2];
    assert_eq!(n2.health, NodeHealth::Up);
    assert_eq!(n2.recovery, "done");
    assert_eq!(n2.recovery_keys_total, keys as u64 + 1);
    assert_eq!(n2.recovery_keys_done, n2.recovery_keys_total);
    assert_eq!(last.recovery_progress(), (keys as u64 + 1, keys as u64 + 1));
    assert!(n2.recovery_bytes > 0);
    assert_eq!(last.stripe_counts(), vec![("whole".to_string(), 5)]);

    // Its records are whole again: kill two others and every value still reads.
    c.kill(0).unwrap();
    c.kill(4).unwrap();
    std::thread::sleep(Duration::from_millis(300));
    for i in 0..keys {
        assert_eq!(get(c.addrs()[2], &format!("k{i}")), Some(value(i)), "k{i}");
    }
    assert_eq!(get(c.addrs()[2], "written-while-down"), Some(value(99)));

    assert!(c.kill(7).is_err());
    drop(c);
    assert!(!dir.exists(), "the drop removes the directory");
    assert!(harness::pids_naming(&dir.join("cluster.txt")).is_empty());
}

/// Several `inec cache up` at once on one host (parallel tests, a benchmark beside a test):
/// each chooses free ports and releases them for its nodes to bind, so without taking turns
/// two could pick the same port in between and one would fail with "Address already in use".
#[test]
fn concurrent_cache_ups_do_not_take_each_others_ports() {
    let _serial = serial();
    let inec = env!("CARGO_BIN_EXE_inec");
    let dirs: Vec<tempfile::TempDir> = (0..4).map(|_| tempfile::tempdir().unwrap()).collect();
    let children: Vec<_> = dirs
        .iter()
        .map(|d| {
            std::process::Command::new(inec)
                .args(["cache", "up", "--nodes", "9", "--dir"])
                .arg(d.path())
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    let outs: Vec<_> = children
        .into_iter()
        .map(|c| c.wait_with_output().unwrap())
        .collect();
    for d in &dirs {
        let _ = std::process::Command::new(inec)
            .args(["cache", "down", "--dir"])
            .arg(d.path())
            .output();
    }
    for (i, o) in outs.iter().enumerate() {
        assert!(
            o.status.success(),
            "cache up {i}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        assert!(!String::from_utf8_lossy(&o.stderr).contains("choosing others"));
    }
}

/// A restarted node whose port is refused for a moment (a dead node's connections still
/// closing, or another `cache up` probing for free ports: the first made
/// `kill_restart_and_recover_a_node` fail once in a full run) is started again until it
/// binds, instead of the restart failing.
#[test]
fn restart_waits_out_a_port_taken_for_a_moment() {
    let _serial = serial();
    let dir = std::env::temp_dir().join(format!("inec-cache-retake-{}", std::process::id()));
    let mut c = rs32_cache(&dir);
    set(c.addrs()[0], "before", &value(1));
    // Node 1's peer address, from the cluster file: `node <id> <client> <peer>`.
    let cluster = std::fs::read_to_string(dir.join("cluster.txt")).unwrap();
    let port: SocketAddr = cluster
        .lines()
        .find_map(|l| l.strip_prefix("node 1 "))
        .and_then(|rest| rest.split(' ').nth(1))
        .expect("node 1's peer address")
        .parse()
        .unwrap();
    c.kill(1).unwrap();
    // Hold the port until the restarted node has failed on it (its log says so), then let
    // it go.
    // (Right after a kill the port can still be refused for a moment, while the dead node's
    // connections close: the case the restart's retries are for. Take it once it is free.)
    let bind_deadline = Instant::now() + Duration::from_secs(20);
    let held = loop {
        match std::net::TcpListener::bind(port) {
            Ok(l) => break l,
            Err(_) if Instant::now() < bind_deadline => {
                std::thread::sleep(Duration::from_millis(10));
            }
            Err(e) => panic!("binding {port}: {e}"),
        }
    };
    let log_path = dir.join("node-1.log");
    let release = std::thread::spawn(move || {
        let deadline = Instant::now() + Duration::from_secs(20);
        while Instant::now() < deadline
            && !std::fs::read_to_string(&log_path)
                .is_ok_and(|l| l.contains("Address already in use"))
        {
            std::thread::sleep(Duration::from_millis(10));
        }
        drop(held);
    });
    c.restart(1).expect("restart once the port is free again");
    release.join().unwrap();
    let log = std::fs::read_to_string(dir.join("node-1.log")).unwrap();
    assert!(
        log.contains("Address already in use"),
        "the first start found the port taken:\n{log}"
    );
    assert_eq!(get(c.addrs()[1], "before"), Some(value(1)));
}
