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
    wait_leading(&nodes);
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

/// Waits until node i leads stripe i, each of them (the leases settled after the start: no
/// heartbeat grants one anew meanwhile, which may hand the peer's heartbeat to a worker).
fn wait_leading(nodes: &[(SocketAddr, Arc<Node>)]) {
    let end = Instant::now() + Duration::from_secs(20);
    for (i, (_, node)) in nodes.iter().enumerate() {
        while !node.leads(i) {
            assert!(Instant::now() < end, "node {i} never led stripe {i}");
            std::thread::sleep(Duration::from_millis(50));
        }
    }
    // A heartbeat round after the last lease was granted.
    std::thread::sleep(Duration::from_millis(300));
}

fn value_of(c: &mut BufReader<TcpStream>, key: &str) -> Option<String> {
    send(c, format!("get {key}\r\n").as_bytes());
    let head = line(c);
    if head == "END\r\n" {
        return None;
    }
    let len: usize = head.trim_end().rsplit(' ').next().unwrap().parse().unwrap();
    let mut data = vec![0u8; len + 2];
    c.read_exact(&mut data).expect("data");
    assert_eq!(line(c), "END\r\n");
    Some(String::from_utf8(data[..len].to_vec()).expect("utf-8"))
}

#[test]
fn incr_append_ma_and_gat_of_coded_values_run_on_the_loop_one_at_a_time() {
    let nodes = cluster();
    let (addr, node) = (nodes[0].0, Arc::clone(&nodes[0].1));
    let key = String::from_utf8(crate::node::tests::key_of_stripe_0(&node)).expect("utf-8");
    // 19 digits: longer than replicate-below (16 bytes), so coded over the two data positions.
    let start: u64 = 1_000_000_000_000_000_000;
    set_when_ready(addr, &key, &start.to_string());
    wait_leading(&nodes);
    let c = &node.counters;
    let workers_before = c.worker_jobs.load(Ordering::Relaxed);
    let peer_workers_before: u64 = nodes
        .iter()
        .map(|(_, n)| n.counters.peer_worker_jobs.load(Ordering::Relaxed))
        .sum();

    // Four connections increment at once, two of them through node 1 (forwarded to node 0):
    // every answer a different number, the last the sum.
    let per = 50u64;
    let answers: Vec<u64> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..4)
            .map(|i| {
                let (key, at) = (key.clone(), nodes[i % 2].0);
                s.spawn(move || {
                    let mut conn = connect(at);
                    (0..per)
                        .map(|_| {
                            send(&mut conn, format!("incr {key} 1\r\n").as_bytes());
                            line(&mut conn).trim_end().parse::<u64>().expect("a number")
                        })
                        .collect::<Vec<u64>>()
                })
            })
            .collect();
        handles
            .into_iter()
            .flat_map(|h| h.join().expect("incrementer"))
            .collect()
    });
    let mut sorted = answers.clone();
    sorted.sort_unstable();
    sorted.dedup();
    assert_eq!(
        sorted.len(),
        answers.len(),
        "two increments answered the same number"
    );
    assert_eq!(*sorted.last().unwrap(), start + 4 * per);
    let mut conn = connect(addr);
    assert_eq!(
        value_of(&mut conn, &key),
        Some((start + 4 * per).to_string())
    );

    // decr, append, prepend and a meta arithmetic of the coded value.
    send(&mut conn, format!("decr {key} 100\r\n").as_bytes());
    assert_eq!(line(&mut conn), format!("{}\r\n", start + 4 * per - 100));
    let text = "t".repeat(40);
    send(
        &mut conn,
        format!("set {key} 3 0 {}\r\n{text}\r\n", text.len()).as_bytes(),
    );
    assert_eq!(line(&mut conn), "STORED\r\n");
    send(
        &mut conn,
        format!("append {key} 0 0 3\r\nxyz\r\n").as_bytes(),
    );
    assert_eq!(line(&mut conn), "STORED\r\n");
    send(
        &mut conn,
        format!("prepend {key} 0 0 3\r\nabc\r\n").as_bytes(),
    );
    assert_eq!(line(&mut conn), "STORED\r\n");
    assert_eq!(value_of(&mut conn, &key), Some(format!("abc{text}xyz")));
    let n = "5".repeat(18);
    send(&mut conn, format!("set {key} 0 0 18\r\n{n}\r\n").as_bytes());
    assert_eq!(line(&mut conn), "STORED\r\n");
    send(&mut conn, format!("ma {key} D5 v\r\n").as_bytes());
    let next = n.parse::<u64>().unwrap() + 5;
    assert_eq!(
        line(&mut conn),
        format!("VA {}\r\n", next.to_string().len())
    );
    assert_eq!(line(&mut conn), format!("{next}\r\n"));

    // A gat of the coded value: read, then touched, on the loop.
    send(&mut conn, format!("gat 100 {key}\r\n").as_bytes());
    assert_eq!(
        line(&mut conn),
        format!("VALUE {key} 0 {}\r\n", next.to_string().len())
    );
    assert_eq!(line(&mut conn), format!("{next}\r\n"));
    assert_eq!(line(&mut conn), "END\r\n");
    send(&mut conn, format!("mg {key} t\r\n").as_bytes());
    let ttl = line(&mut conn);
    let left: i64 = ttl
        .trim_end()
        .strip_prefix("HD t")
        .expect(&ttl)
        .parse()
        .unwrap();
    assert!((98..=100).contains(&left), "{ttl}");

    // None of it ran on a worker, here or at node 1.
    assert_eq!(c.worker_jobs.load(Ordering::Relaxed), workers_before);
    let peer_workers: u64 = nodes
        .iter()
        .map(|(_, n)| n.counters.peer_worker_jobs.load(Ordering::Relaxed))
        .sum();
    assert_eq!(peer_workers, peer_workers_before);

    // An incr of a coded value that is not a number: refused as memcached refuses it (the
    // loop gives it to a worker, which answers), the value unchanged.
    send(
        &mut conn,
        format!("set {key} 0 0 {}\r\n{text}\r\n", text.len()).as_bytes(),
    );
    assert_eq!(line(&mut conn), "STORED\r\n");
    send(&mut conn, format!("incr {key} 1\r\n").as_bytes());
    assert_eq!(
        line(&mut conn),
        "CLIENT_ERROR cannot increment or decrement non-numeric value\r\n"
    );
    assert_eq!(value_of(&mut conn, &key), Some(text));
}
