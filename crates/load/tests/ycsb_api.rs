//! The YCSB library against real memcached processes: loads, runs and checks every read;
//! inserts land under YCSB's key names; client-side replication survives a killed replica.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

use harness::Memcached;
use load::ycsb::{self, Workload, Ycsb, YcsbConfig};
use load::{ycsb_fnvhash64, OpKind, Route};

/// The value of `key` on a memcached (None: a miss).
fn get(addr: SocketAddr, key: &str) -> Option<Vec<u8>> {
    let mut s = TcpStream::connect(addr).unwrap();
    write!(s, "get {key}\r\n").unwrap();
    let mut r = BufReader::new(s);
    let mut line = String::new();
    r.read_line(&mut line).unwrap();
    if line.starts_with("END") {
        return None;
    }
    let len: usize = line.split_whitespace().nth(3).unwrap().parse().unwrap();
    let mut v = vec![0u8; len + 2];
    r.read_exact(&mut v).unwrap();
    v.truncate(len);
    Some(v)
}

fn small(addrs: Vec<SocketAddr>, route: Route, w: Workload) -> YcsbConfig {
    let mut c = YcsbConfig::new(addrs, route, w);
    c.records = 500;
    c.operations = Some(3000);
    c.value_bytes = 1024;
    c.connections = 8;
    c.duration = Duration::from_secs(30);
    c.warmup = Duration::ZERO;
    c
}

#[test]
fn every_workload_on_memcached_checks_clean() {
    let Some(m) = Memcached::for_test() else {
        return;
    };
    for w in Workload::ALL {
        let r = ycsb::run(small(vec![m.addr()], Route::Hash, w)).unwrap();
        assert_eq!(r.load.total_errors(), 0, "{w:?}");
        assert_eq!(r.load.ops[&OpKind::Set].ok, 500, "{w:?}");
        let s = ycsb::summary(&r.run);
        assert_eq!(s.wrong, 0, "{w:?}: {:?}", s.check);
        assert_eq!(r.run.total_errors(), 0, "{w:?}: {:?}", r.run.errors);
        let done: u64 = r.run.ops.values().map(|o| o.ok).sum();
        assert_eq!(done, 3000, "{w:?}: operationcount");
        // Every read was judged: its value checked, or a miss of a key never written.
        let reads: u64 = [OpKind::Get, OpKind::ReadModifyWrite]
            .iter()
            .filter_map(|k| r.run.ops.get(k))
            .map(|o| o.ok)
            .sum();
        assert_eq!(s.check.ok + s.check.miss_never_written, reads, "{w:?}");
    }
}

#[test]
fn inserts_continue_the_insert_sequence_under_ycsb_names() {
    let Some(m) = Memcached::for_test() else {
        return;
    };
    let mut y = Ycsb::new(small(vec![m.addr()], Route::Hash, Workload::D)).unwrap();
    y.load().unwrap();
    let run = y.run().unwrap();
    let inserts = run.ops[&OpKind::Insert].ok;
    assert!(inserts > 50, "{inserts}");
    assert_eq!(y.keys(), 500 + inserts);
    // Record 499, the first insert (500) and the last are stored under YCSB's names, and
    // their values carry their key ids.
    for id in [0u64, 499, 500, 500 + inserts - 1] {
        let v = get(m.addr(), &format!("user{}", ycsb_fnvhash64(id)))
            .unwrap_or_else(|| panic!("key {id} missing"));
        assert_eq!(u64::from_le_bytes(v[..8].try_into().unwrap()), id);
    }
    assert!(get(m.addr(), &format!("user{}", ycsb_fnvhash64(500 + inserts))).is_none());
    let v = y.verify().unwrap();
    assert_eq!(v.check.ok, 500 + inserts);
    assert_eq!(v.check.wrong() + v.check.missing, 0);
}

#[test]
fn replicated_route_survives_a_killed_replica() {
    let Some(a) = Memcached::for_test() else {
        return;
    };
    let b = Memcached::for_test().unwrap();
    let c = Memcached::for_test().unwrap();
    let addrs = vec![a.addr(), b.addr(), c.addr()];
    let mut y = Ycsb::new(small(addrs.clone(), Route::Replicated(3), Workload::A)).unwrap();
    let load = y.load().unwrap();
    assert_eq!(load.total_errors(), 0);
    // Every record is on every replica.
    let v = get(b.addr(), &format!("user{}", ycsb_fnvhash64(7))).unwrap();
    assert_eq!(u64::from_le_bytes(v[..8].try_into().unwrap()), 7);
    // Two of the three replicas die: every value is still read back right.
    drop(a);
    drop(c);
    let run = y.run().unwrap();
    let s = ycsb::summary(&run);
    assert_eq!(s.wrong, 0, "{:?}", s.check);
    assert_eq!(run.total_errors(), 0, "{:?}", run.errors);
    assert!(
        run.errors.keys().all(|k| k.starts_with("replica: ")),
        "{:?}",
        run.errors
    );
    let v = y.verify().unwrap();
    assert_eq!(v.check.ok, 500);
    drop(b);
}
