//! A client's request for a key whose lock is held waits on its event loop, unread, and runs
//! once the lock is freed: three nodes in this process, on loopback sockets.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::node::{key_lock_index, Node};
use crate::start::{Config, Server};

/// Three nodes (rs:2,1, one loop each, peer messages), started and serving; their client
/// addresses and nodes.
fn cluster() -> Vec<(SocketAddr, Arc<Node>)> {
    let free = || {
        let l = TcpListener::bind("127.0.0.1:0").expect("bind");
        l.local_addr().expect("address")
    };
    let peers: Vec<SocketAddr> = (0..3).map(|_| free()).collect();
    (0..3)
        .map(|id| {
            let mut node = crate::node::tests::config(id);
            node.down_after = Duration::from_millis(600);
            let config = Config {
                node,
                client: "127.0.0.1:0".parse().expect("address"),
                peers: peers.clone(),
                plans: false,
                max_connections: 64,
                loops: 1,
                workers: 2,
                coordinator: None,
            };
            let server = Server::start(config).expect("start");
            let at = (server.client_addr().expect("address"), server.node());
            std::thread::spawn(move || server.run());
            at
        })
        .collect()
}

fn connect(addr: SocketAddr) -> BufReader<TcpStream> {
    let s = TcpStream::connect(addr).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(10)))
        .expect("timeout");
    BufReader::new(s)
}

fn line(c: &mut BufReader<TcpStream>) -> String {
    let mut l = String::new();
    c.read_line(&mut l).expect("a reply line");
    l
}

fn send(c: &mut BufReader<TcpStream>, bytes: &[u8]) {
    c.get_mut().write_all(bytes).expect("send");
}

/// Sets `key` through `addr` until the cluster takes writes (leases settle after start).
fn set_when_ready(addr: SocketAddr, key: &str, value: &str) {
    let end = Instant::now() + Duration::from_secs(20);
    loop {
        let mut c = connect(addr);
        send(
            &mut c,
            format!("set {key} 0 0 {}\r\n{value}\r\n", value.len()).as_bytes(),
        );
        if line(&mut c) == "STORED\r\n" {
            return;
        }
        assert!(Instant::now() < end, "the cluster never took a write");
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn requests_for_a_locked_key_wait_on_the_loop_and_run_in_order_once_it_is_freed() {
    let nodes = cluster();
    let (addr, node) = (nodes[0].0, Arc::clone(&nodes[0].1));
    // A key whose stripe node 0 leads, its value coded (longer than replicate-below).
    let key = String::from_utf8(crate::node::tests::key_of_stripe_0(&node)).expect("utf-8");
    let old = "o".repeat(100);
    set_when_ready(addr, &key, &old);
    let c = &node.counters;
    let (workers_before, waits_before) = (
        c.worker_jobs.load(Ordering::Relaxed),
        c.key_lock_waits.load(Ordering::Relaxed),
    );

    // The key's lock held (as a write of the key in flight holds it): a get, then a set and
    // a get pipelined on another connection, wait.
    let guard = node.key_locks.lock(key_lock_index(key.as_bytes()));
    let mut a = connect(addr);
    send(&mut a, format!("get {key}\r\n").as_bytes());
    let new = "n".repeat(200);
    let mut b = connect(addr);
    let piped = format!("set {key} 5 0 {}\r\n{new}\r\nget {key}\r\n", new.len());
    send(&mut b, piped.as_bytes());
    // Another key is served meanwhile, by the same loop.
    let other = (0..)
        .map(|i| format!("x{i}"))
        .find(|k| key_lock_index(k.as_bytes()) != key_lock_index(key.as_bytes()))
        .expect("a key under another lock");
    set_when_ready(addr, &other, "free");
    // Nothing came back on the waiting connections.
    for conn in [&mut a, &mut b] {
        conn.get_mut()
            .set_read_timeout(Some(Duration::from_millis(300)))
            .expect("timeout");
        let mut byte = [0u8; 1];
        let r = conn.get_mut().read(&mut byte);
        assert!(
            matches!(&r, Err(e) if matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut)),
            "a reply while the key's lock was held: {r:?}"
        );
        conn.get_mut()
            .set_read_timeout(Some(Duration::from_secs(10)))
            .expect("timeout");
    }
    assert_eq!(c.key_lock_waits.load(Ordering::Relaxed) - waits_before, 2);

    drop(guard);
    assert_eq!(line(&mut a), format!("VALUE {key} 0 {}\r\n", old.len()));
    assert_eq!(line(&mut a), format!("{old}\r\n"));
    assert_eq!(line(&mut a), "END\r\n");
    assert_eq!(line(&mut b), "STORED\r\n");
    assert_eq!(line(&mut b), format!("VALUE {key} 5 {}\r\n", new.len()));
    assert_eq!(line(&mut b), format!("{new}\r\n"));
    assert_eq!(line(&mut b), "END\r\n");
    // No worker ran any of them.
    assert_eq!(c.worker_jobs.load(Ordering::Relaxed), workers_before);
}
