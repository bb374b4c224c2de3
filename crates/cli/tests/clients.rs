//! Stock clients against memcached-protocol servers: the pymemcache checks and libmemcached's
//! `memccapable` (text protocol). Against memcached 1.6 first, which proves the checks (every
//! one passes there), and against a server that answers `ERROR` to everything, which proves
//! that failures are seen and explained. A test skips, saying why, only when a tool is missing,
//! and fails instead under CI (`harness::skip`; `scripts/test-all` installs memcached,
//! libmemcached-tools and pymemcache).

#![cfg(feature = "bench")]

use std::io::{BufRead, BufReader, Write};
use std::net::{SocketAddr, TcpListener};

use clients::{self, CapableStatus, ClientsError};
use harness::cache::{InecCache, InecOptions};
use harness::Memcached;

/// A server that answers every line with `ERROR` (and reads data blocks as lines).
fn erroring_server() -> SocketAddr {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    std::thread::spawn(move || {
        for s in l.incoming() {
            let Ok(s) = s else { return };
            std::thread::spawn(move || {
                let mut w = s.try_clone().unwrap();
                for line in BufReader::new(s).split(b'\n') {
                    if line.is_err() || w.write_all(b"ERROR\r\n").is_err() {
                        return;
                    }
                }
            });
        }
    });
    addr
}

#[track_caller]
fn skip_missing<T>(r: Result<T, ClientsError>) -> Option<T> {
    match r {
        Err(ClientsError::Missing { tool, package }) => {
            harness::skip::skip_or_fail(tool, package);
            None
        }
        r => Some(r.expect("run the client")),
    }
}

#[test]
fn pymemcache_against_memcached() {
    let Some(m) = Memcached::for_test() else {
        return;
    };
    // One address, then the same server twice (the cross-address path of the script).
    for addrs in [vec![m.addr()], vec![m.addr(), m.addr()]] {
        let Some(r) = skip_missing(clients::pymemcache(&addrs)) else {
            return;
        };
        assert!(
            r.completed && r.failed.is_empty(),
            "pymemcache against memcached: {:?}\n{}",
            r.failed,
            r.output
        );
        assert!(r.passed.len() >= 19, "{:?}", r.passed);
    }
}

#[test]
fn pymemcache_failures_are_reported() {
    let a = erroring_server();
    let Some(r) = skip_missing(clients::pymemcache(&[a])) else {
        return;
    };
    assert!(!r.completed);
    assert!(r.failed.len() >= 15, "{:?}\n{}", r.failed, r.output);
    assert!(
        r.failed.iter().all(|(_, why)| !why.is_empty()),
        "{:?}",
        r.failed
    );
}

/// memccapable's text tests that memcached 1.6.18 itself fails when a test runs alone (`-T`):
/// `ascii quit` sends `quit foo bar` and expects an error line, memcached closes the connection
/// (it passes inside the whole suite run, where the tests share one process's state).
const MEMCACHED_FAILS_ALONE: [&str; 1] = ["ascii quit"];

#[test]
fn memccapable_against_memcached() {
    let Some(m) = Memcached::for_test() else {
        return;
    };
    let Some(results) = skip_missing(clients::memccapable(m.addr(), 5)) else {
        return;
    };
    assert_eq!(results.len(), clients::MEMCCAPABLE_ASCII_TESTS.len());
    let bad: Vec<_> = results
        .iter()
        .filter(|r| r.status != CapableStatus::Pass)
        .collect();
    assert!(bad.is_empty(), "memccapable against memcached: {bad:#?}");
    // Each test alone, on a fresh connection.
    let alone = clients::memccapable_each(m.addr(), &clients::MEMCCAPABLE_ASCII_TESTS, 5).unwrap();
    for r in &alone {
        let expect = if MEMCACHED_FAILS_ALONE.contains(&r.test.as_str()) {
            CapableStatus::Fail
        } else {
            CapableStatus::Pass
        };
        assert_eq!(r.status, expect, "{r:?}");
    }
}

#[test]
fn memccapable_failures_are_reported_with_reasons() {
    let a = erroring_server();
    let Some(results) = skip_missing(clients::memccapable_each(
        a,
        &["ascii version", "ascii set", "ascii get"],
        1,
    )) else {
        return;
    };
    for r in &results {
        assert_eq!(r.status, CapableStatus::Fail, "{r:?}");
        assert!(r.reason.contains("memcapable.cc"), "{r:?}");
    }
    let Some(suite) = skip_missing(clients::memccapable(a, 1)) else {
        return;
    };
    let failed = suite
        .iter()
        .filter(|r| r.status == CapableStatus::Fail)
        .count();
    assert!(failed >= 20, "{suite:#?}");
}

/// A local inec cache (RS(6,3) on 9 nodes, `inec cache up` of this build).
fn inec_cache() -> InecCache {
    InecCache::start(&InecOptions::new(
        env!("CARGO_BIN_EXE_inec"),
        "rs:6,3",
        "rs",
        "coherent",
        64,
    ))
    .expect("inec cache up")
}

#[test]
fn pymemcache_across_inec_nodes() {
    if !clients::have("python3") {
        harness::skip::skip_or_fail("python3", "Debian package python3");
        return;
    }
    if !clients::have_pymemcache() {
        harness::skip::skip_or_fail("pymemcache", "PyPI package pymemcache");
        return;
    }
    let c = inec_cache();
    // Every check writes through one node and reads through the next.
    let r = clients::pymemcache(c.addrs()).expect("run pymemcache");
    assert!(
        r.completed && r.failed.is_empty(),
        "pymemcache across inec nodes: {:?}\n{}",
        r.failed,
        r.output
    );
}

#[test]
fn memccapable_against_an_inec_node() {
    if !clients::have("memccapable") {
        harness::skip::skip_or_fail("memccapable", "Debian package libmemcached-tools");
        return;
    }
    let c = inec_cache();
    let results = clients::memccapable(c.addrs()[0], 5).unwrap();
    let bad: Vec<_> = results
        .iter()
        .filter(|r| r.status != CapableStatus::Pass)
        .collect();
    assert!(bad.is_empty(), "memccapable against an inec node: {bad:#?}");
    // Each test alone: the same as memcached (which fails `ascii quit` alone).
    let alone =
        clients::memccapable_each(c.addrs()[1], &clients::MEMCCAPABLE_ASCII_TESTS, 5).unwrap();
    for r in &alone {
        let expect = if MEMCACHED_FAILS_ALONE.contains(&r.test.as_str()) {
            CapableStatus::Fail
        } else {
            CapableStatus::Pass
        };
        assert_eq!(r.status, expect, "{r:?}");
    }
}
