//! The load generator of `inec bench cache` against real and deliberately broken servers: the
//! checker must count every wrong value a broken server returns, and none from memcached.

use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use harness::Memcached;
use load::{
    CheckCounts, KeyNames, LoadAll, OpKind, Phase, PhaseStats, Route, Session, Target, UniformMix,
};
use proto::compose::{self, Reply};
use proto::{Command, GetKind, Limits, Parse, Parser, StoreMode};

/// How the fake server misbehaves.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Fault {
    None,
    /// Keeps only the first value written to a key (acknowledges the rest).
    Stale,
    /// Flips one byte of every third value it returns.
    Flip,
    /// Returns the value of another key (when it has one).
    OtherKey,
    /// Answers every get with a miss.
    Forget,
    /// Never answers every fifth get.
    Silent,
}

/// A memcached-protocol server of a few commands (set, get), one thread per connection.
fn fake_server(fault: Fault) -> SocketAddr {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    let store: Arc<Mutex<HashMap<Vec<u8>, Vec<u8>>>> = Arc::default();
    let gets = Arc::new(AtomicU64::new(0));
    std::thread::spawn(move || {
        for s in l.incoming() {
            let Ok(mut s) = s else { return };
            let store = store.clone();
            let gets = gets.clone();
            std::thread::spawn(move || {
                let mut parser = Parser::new(Limits::default());
                let mut buf = Vec::new();
                let mut tmp = vec![0u8; 65536];
                loop {
                    let n = match s.read(&mut tmp) {
                        Ok(0) | Err(_) => return,
                        Ok(n) => n,
                    };
                    buf.extend_from_slice(&tmp[..n]);
                    let mut out = Vec::new();
                    loop {
                        match parser.parse(&buf) {
                            Parse::Incomplete => break,
                            Parse::Command { command, consumed } => {
                                match command {
                                    Command::Store(st) if st.mode == StoreMode::Set => {
                                        let mut m = store.lock().unwrap();
                                        if fault != Fault::Stale || !m.contains_key(st.key) {
                                            m.insert(st.key.to_vec(), st.data.to_vec());
                                        }
                                        compose::reply(&mut out, Reply::Stored);
                                    }
                                    Command::Get(g) if g.kind == GetKind::Get => {
                                        let nth = gets.fetch_add(1, Ordering::Relaxed);
                                        if fault == Fault::Silent && nth % 5 == 4 {
                                            buf.drain(..consumed);
                                            continue;
                                        }
                                        let m = store.lock().unwrap();
                                        for k in &g.keys {
                                            let v = match fault {
                                                Fault::Forget => None,
                                                Fault::OtherKey => m
                                                    .iter()
                                                    .find(|(kk, _)| kk.as_slice() != *k)
                                                    .map(|(_, v)| v.clone())
                                                    .or_else(|| m.get(*k).cloned()),
                                                _ => m.get(*k).cloned(),
                                            };
                                            if let Some(mut v) = v {
                                                if fault == Fault::Flip && nth.is_multiple_of(3) {
                                                    let i = v.len() / 2;
                                                    v[i] ^= 1;
                                                }
                                                compose::value(&mut out, k, 0, &v, None);
                                            }
                                        }
                                        compose::reply(&mut out, Reply::End);
                                    }
                                    _ => compose::reply(&mut out, Reply::Error),
                                }
                                buf.drain(..consumed);
                            }
                            Parse::Error {
                                error, consumed, ..
                            } => {
                                out.extend_from_slice(error.reply());
                                buf.drain(..consumed);
                            }
                            Parse::Swallowed { consumed } => {
                                buf.drain(..consumed);
                            }
                        }
                    }
                    if s.write_all(&out).is_err() {
                        return;
                    }
                }
            });
        }
    });
    addr
}

fn target(addrs: Vec<SocketAddr>, route: Route, connections: usize, threads: usize) -> Target {
    Target {
        addrs,
        route,
        connections,
        threads,
        value_bytes: 1000,
        keys: KeyNames::Prefix("t:".into()),
        timeout: Duration::from_millis(500),
        degraded: None,
    }
}

/// Loads `keys` keys, then runs `ops_s` of 50:50 get:set for `secs`.
fn drive(t: Target, keys: u64, secs: f64, rate: Option<f64>) -> (PhaseStats, PhaseStats) {
    let mut s = Session::new(t, keys, 7).unwrap();
    let load = s
        .run(
            &Phase {
                duration: None,
                rate: None,
                warmup: Duration::ZERO,
                drain: Duration::from_secs(5),
            },
            &|_, n| Box::new(LoadAll::new(n)),
        )
        .unwrap();
    let run = s
        .run(
            &Phase {
                duration: Some(Duration::from_secs_f64(secs)),
                rate,
                warmup: Duration::ZERO,
                drain: Duration::from_secs(5),
            },
            &|_, _| {
                Box::new(UniformMix {
                    get_fraction: 0.5,
                    degraded_fraction: 0.0,
                })
            },
        )
        .unwrap();
    (load, run)
}

fn ok(st: &PhaseStats, op: OpKind) -> u64 {
    st.ops.get(&op).map_or(0, |s| s.ok)
}

#[test]
fn honest_fake_server_has_no_wrong_values() {
    let a = fake_server(Fault::None);
    let (load, run) = drive(target(vec![a], Route::Hash, 8, 2), 200, 0.3, None);
    assert_eq!(ok(&load, OpKind::Set), 200);
    assert_eq!(load.total_errors(), 0);
    assert!(ok(&run, OpKind::Get) > 50 && ok(&run, OpKind::Set) > 50);
    assert_eq!(run.check.wrong(), 0, "{:?}", run.check);
    assert_eq!(run.check.missing, 0);
    assert_eq!(run.check.ok, ok(&run, OpKind::Get));
    assert_eq!(run.total_errors(), 0, "{:?}", run.errors);
}

#[test]
fn every_kind_of_wrong_value_is_counted() {
    type Count = fn(&CheckCounts) -> u64;
    let cases: [(Fault, Count); 4] = [
        (Fault::Stale, |c| c.stale),
        (Fault::Flip, |c| c.torn),
        (Fault::OtherKey, |c| c.wrong_key),
        (Fault::Forget, |c| c.missing),
    ];
    for (fault, count) in cases {
        let a = fake_server(fault);
        let (_, run) = drive(target(vec![a], Route::Hash, 4, 1), 50, 0.3, None);
        let gets = ok(&run, OpKind::Get);
        assert!(gets > 20, "{fault:?}: {gets} gets");
        assert!(count(&run.check) > 0, "{fault:?}: {:?}", run.check);
        // Every get is judged exactly once.
        let c = run.check;
        let judged = c.ok + c.miss_never_written + c.missing + c.wrong();
        assert_eq!(judged, gets, "{fault:?}: {c:?}");
        if fault == Fault::Forget {
            assert_eq!(c.missing, gets);
        }
    }
}

#[test]
fn a_silent_server_gives_timeouts_and_the_run_goes_on() {
    let a = fake_server(Fault::Silent);
    let (_, run) = drive(target(vec![a], Route::Hash, 4, 1), 50, 1.2, None);
    assert!(
        run.errors.get("timeout").copied().unwrap_or(0) > 0,
        "{:?}",
        run.errors
    );
    assert!(run.reconnects > 0);
    assert!(ok(&run, OpKind::Get) > 20);
    assert_eq!(run.check.wrong(), 0, "{:?}", run.check);
}

#[test]
fn keys_hashed_over_two_servers_and_open_loop_rate() {
    let a = fake_server(Fault::None);
    let b = fake_server(Fault::None);
    let (load, run) = drive(target(vec![a, b], Route::Hash, 4, 2), 300, 1.0, Some(400.0));
    assert_eq!(ok(&load, OpKind::Set), 300);
    let done = ok(&run, OpKind::Get) + ok(&run, OpKind::Set);
    // 400 requests per second for one second, open loop: about 400, never many more.
    assert!((300..=410).contains(&done), "{done}");
    assert_eq!(run.check.wrong() + run.check.missing, 0, "{:?}", run.check);
    // Two threads, each one connection per server.
    assert_eq!(run.connections, 4);
}

#[test]
fn memcached_returns_only_right_values() {
    let Some(m) = Memcached::for_test() else {
        return;
    };
    for (route, threads) in [(Route::Hash, 1), (Route::Spread, 2)] {
        let (load, run) = drive(target(vec![m.addr()], route, 16, threads), 2000, 0.5, None);
        assert_eq!(ok(&load, OpKind::Set), 2000);
        assert!(ok(&run, OpKind::Get) > 100);
        assert_eq!(run.check.wrong() + run.check.missing, 0, "{:?}", run.check);
        assert_eq!(run.total_errors(), 0, "{:?}", run.errors);
        assert_eq!(run.unfinished, 0);
    }
}
