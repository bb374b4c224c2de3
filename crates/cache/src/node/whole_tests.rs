//! The whole layout in one process: five nodes of an rs:2,2 cache over `carrier::mem`, pages of
//! 4 KiB so that values share pages and pages spread over several page stripes.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::Node;
use crate::agent::whole::Layout;
use crate::carrier::mem::MemHub;
use crate::carrier::peer::{AgentOp, AgentResult, Once};
use crate::member::whole;
use crate::node::lock;

const NODES: usize = 5;
const PAGE: usize = 4096;

/// Held by the tests that switch the rule of a consistent cut off (`whole::RULE_OFF`, a static)
/// and by those that count on it, so that neither runs while the other does.
static RULE: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn cluster(layout: Layout) -> (Arc<MemHub>, Vec<Arc<Node>>) {
    super::cluster_tests::mem_cluster(NODES, |id| {
        let mut cfg = super::tests::config(id);
        cfg.node_count = NODES;
        cfg.code = "rs:2,2".parse().expect("code");
        cfg.layout = layout;
        cfg.page_bytes = PAGE;
        cfg.whole_below_bytes = 1000;
        cfg
    })
}

use super::cluster_tests::rounds;

fn set(node: &Node, key: &[u8], value: &[u8]) -> AgentResult {
    node.route_key(
        AgentOp::Store {
            mode: proto::StoreMode::Set,
            key: key.to_vec(),
            flags: 3,
            exptime: 0,
            compare_cas: None,
            value: value.to_vec(),
            once: Once::first(node.next_request_id()),
        },
        key,
    )
}

/// Fails unless a write answered `Stored`.
fn stored(res: AgentResult) {
    assert!(matches!(res, AgentResult::Stored { .. }), "{res:?}");
}

fn get(node: &Node, key: &[u8]) -> AgentResult {
    node.route_key(
        AgentOp::Get {
            key: key.to_vec(),
            touch: None,
            degrade: None,
        },
        key,
    )
}

/// `n` keys of stripe `stripe` (home: node `stripe`), named `prefix` and a number.
fn keys_of(nodes: &[Arc<Node>], stripe: usize, prefix: &str, n: usize) -> Vec<Vec<u8>> {
    (0..)
        .map(|i| format!("{prefix}{i}").into_bytes())
        .filter(|k| nodes[0].placement.stripe_of(k) == stripe)
        .take(n)
        .collect()
}

fn value_of(key: usize, round: usize) -> Vec<u8> {
    let len = (key * 97 + round * 13) % 1500;
    (0..len).map(|i| (i * 7 + key * 3 + round) as u8).collect()
}

fn expect_value(res: AgentResult, want: &[u8], what: &str) {
    match res {
        AgentResult::Value { value, flags, .. } => {
            assert_eq!(flags, 3, "{what}");
            assert!(
                value == want,
                "{what}: wrong bytes ({} vs {} bytes)",
                value.len(),
                want.len()
            );
        }
        other => panic!("{what}: {other:?}"),
    }
}

/// Every parity page of every page stripe equals the code's parity of the data pages its data
/// positions' nodes hold, and agrees with their seqs.
fn check_parity(nodes: &[Arc<Node>]) {
    let codec = codes::Codec::new("rs:2,2".parse().expect("code"));
    let (k, n) = (2, 4);
    let mut checked = 0;
    for t in 0..NODES {
        for q in 0..64u32 {
            let data: Vec<(Vec<u64>, Vec<u8>)> = (0..k)
                .map(|d| {
                    lock(&nodes[(t + d) % NODES].store)
                        .range((t as u32, d as u8, q), 0, PAGE as u32)
                        .expect("a data range")
                })
                .collect();
            let refs: Vec<&[u8]> = data.iter().map(|(_, b)| &b[..]).collect();
            let mut want = vec![vec![0u8; PAGE]; n - k];
            let mut outs: Vec<&mut [u8]> = want.iter_mut().map(|w| &mut w[..]).collect();
            codec.encode(&refs, &mut outs).expect("encode");
            for i in k..n {
                let (seqs, got) = lock(&nodes[(t + i) % NODES].store)
                    .range((t as u32, i as u8, q), 0, PAGE as u32)
                    .expect("a parity range");
                assert!(
                    got == want[i - k],
                    "parity {i} of page {q} of page stripe {t}"
                );
                let data_seqs: Vec<u64> = data.iter().map(|(s, _)| s[0]).collect();
                assert_eq!(
                    seqs, data_seqs,
                    "seqs of parity {i} of page {q} of stripe {t}"
                );
                if data_seqs.iter().any(|&s| s > 0) {
                    checked += 1;
                }
            }
        }
    }
    assert!(checked > 0, "some parity page was written");
}

/// Values of 0 to 1.5 KB written through every node (each forwarding to the key's home) and
/// overwritten, read back through every node; the home answers from its slab with no other
/// node, and every parity page stays the parity of its stripe's data pages.
/// Replaces node `id` with a new, empty process of it (`--recover`) attached to the hub, its
/// lease term already run; its incarnation (process start) `later_us` after now.
fn restart_empty(hub: &Arc<MemHub>, nodes: &mut [Arc<Node>], id: usize, later_us: u64) {
    let mut cfg = nodes[id].cfg.clone();
    cfg.recover = true;
    let link = hub.link(id);
    let mut restarted = Node::new(cfg, link.clone(), link);
    restarted.incarnation += later_us;
    restarted.started = Instant::now()
        .checked_sub(2 * super::tests::TERM)
        .expect("the clock has run for 20 s");
    nodes[id] = Arc::new(restarted);
    hub.attach(Arc::clone(&nodes[id]));
    rounds(nodes);
}

/// Runs `f` while heartbeat rounds go on every 50 ms (the stand-in agents' leases need them).
fn with_heartbeats<T>(nodes: &[Arc<Node>], f: impl FnOnce() -> T) -> T {
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let beats = {
        let (nodes, stop) = (nodes.to_vec(), Arc::clone(&stop));
        std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                rounds(&nodes);
                std::thread::sleep(std::time::Duration::from_millis(50));
            }
        })
    };
    let out = f();
    stop.store(true, Ordering::Relaxed);
    beats.join().expect("heartbeats");
    out
}

#[test]
fn whole_values_are_written_and_read_through_every_node() {
    let (hub, nodes) = cluster(Layout::Whole);
    let keys: Vec<Vec<u8>> = (0..60).map(|i| format!("w{i}").into_bytes()).collect();
    for round in 0..2 {
        for (i, key) in keys.iter().enumerate() {
            let res = set(&nodes[(i + round) % NODES], key, &value_of(i, round));
            assert!(
                matches!(res, AgentResult::Stored { .. }),
                "set {i}: {res:?}"
            );
        }
    }
    for (i, key) in keys.iter().enumerate() {
        for node in &nodes {
            expect_value(get(node, key), &value_of(i, 1), "read back");
        }
    }
    let whole: u64 = nodes
        .iter()
        .map(|n| n.counters.whole_writes.load(Ordering::Relaxed))
        .sum();
    assert_eq!(whole, 120, "every write whole");
    let pages: usize = nodes.iter().map(|n| lock(&n.store).slab.pages()).sum();
    assert!(pages >= NODES, "values spread over pages: {pages}");
    check_parity(&nodes);
    let degraded: u64 = nodes
        .iter()
        .map(|n| n.counters.degraded_reads.load(Ordering::Relaxed))
        .sum();
    assert_eq!(degraded, 0);
    hub.clear();
}

/// The home of stripe 0 dies: the node standing in rebuilds its index from the parity
/// positions' records and reads every value of stripe 0 from the same byte range of its page's
/// stripe; a value written meanwhile is stored split, and reads back after a second failure.
#[test]
fn a_dead_home_is_read_through_its_pages_stripes() {
    let (hub, nodes) = cluster(Layout::Whole);
    let keys = keys_of(&nodes, 0, "d", 25);
    for (i, key) in keys.iter().enumerate() {
        stored(set(&nodes[1], key, &value_of(i, 0)));
    }
    // Other stripes' values share the page stripes of node 0's pages.
    for i in 0..40 {
        let key = format!("o{i}").into_bytes();
        stored(set(&nodes[2], &key, &value_of(i, 1)));
    }
    hub.kill(0);
    rounds(&nodes[1..]);
    assert_eq!(nodes[1].agent_of(0), Some(1), "node 1 took stripe 0 over");
    for (i, key) in keys.iter().enumerate() {
        for node in &nodes[1..] {
            expect_value(get(node, key), &value_of(i, 0), "degraded read");
        }
    }
    assert!(nodes[1].counters.whole_rebuilds.load(Ordering::Relaxed) >= keys.len() as u64);
    // Written while the home is down: split (coded), readable after one more failure.
    let late = &keys[0];
    stored(set(&nodes[3], late, b"written while the home is down"));
    assert!(nodes[1].counters.whole_fallbacks.load(Ordering::Relaxed) >= 1);
    hub.kill(4);
    rounds(&nodes[1..4]);
    expect_value(
        get(&nodes[2], late),
        b"written while the home is down",
        "after a second failure",
    );
    expect_value(
        get(&nodes[2], &keys[1]),
        &value_of(1, 0),
        "whole, two nodes down",
    );
    hub.clear();
}

/// A bit flipped in a home's slot (behind its parity's back) is caught by the record's CRC, the
/// value rebuilt from its page's stripe and the slot mended in place.
#[test]
fn a_damaged_slot_is_rebuilt_from_its_pages_stripe() {
    let (hub, nodes) = cluster(Layout::Whole);
    let key = keys_of(&nodes, 0, "f", 1).remove(0);
    let value = vec![0x3c; 700];
    stored(set(&nodes[0], &key, &value));
    assert!(lock(&nodes[0].store).flip_bit(0, 0, &key, 100));
    expect_value(get(&nodes[2], &key), &value, "read of a damaged slot");
    let c = &nodes[0].counters;
    assert_eq!(c.crc_errors.load(Ordering::Relaxed), 1);
    assert_eq!(c.whole_rebuilds.load(Ordering::Relaxed), 1);
    // Mended in place: the next read is not degraded, and the parity still matches the pages
    // (so the next record written into that slot sends a right delta).
    assert_eq!(c.chunks_written_back.load(Ordering::Relaxed), 1);
    expect_value(get(&nodes[3], &key), &value, "read after the mend");
    assert_eq!(c.crc_errors.load(Ordering::Relaxed), 1);
    check_parity(&nodes);
    stored(set(&nodes[0], &key, &[7; 650]));
    check_parity(&nodes);
    hub.clear();
}

/// `--layout split` writes nothing whole; `auto` writes values below its threshold whole and
/// larger ones split.
#[test]
fn the_layout_picks_whole_or_split_by_value_size() {
    let (hub, nodes) = cluster(Layout::Split);
    stored(set(&nodes[0], b"s", &[1; 100]));
    assert_eq!(
        nodes
            .iter()
            .map(|n| n.counters.whole_writes.load(Ordering::Relaxed))
            .sum::<u64>(),
        0
    );
    hub.clear();
    let (hub, nodes) = cluster(Layout::Auto);
    let below = nodes[0].cfg.whole_below_bytes;
    assert!(below > 0 && below < PAGE);
    stored(set(&nodes[0], b"a", &vec![1; below - 1]));
    stored(set(&nodes[0], b"b", &vec![2; below]));
    assert_eq!(
        nodes
            .iter()
            .map(|n| n.counters.whole_writes.load(Ordering::Relaxed))
            .sum::<u64>(),
        1
    );
    expect_value(get(&nodes[3], b"a"), &vec![1; below - 1], "whole");
    expect_value(get(&nodes[3], b"b"), &vec![2; below], "split");
    hub.clear();
}

/// A client socket that takes at most `takes` bytes per write (`Some(0)`: it would block;
/// `None`: it fails).
struct Takes {
    takes: Option<usize>,
    got: Vec<u8>,
}

impl std::io::Write for Takes {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.write_vectored(&[std::io::IoSlice::new(buf)])
    }

    fn write_vectored(&mut self, bufs: &[std::io::IoSlice<'_>]) -> std::io::Result<usize> {
        let Some(mut room) = self.takes else {
            return Err(std::io::ErrorKind::ConnectionReset.into());
        };
        if room == 0 {
            return Err(std::io::ErrorKind::WouldBlock.into());
        }
        let before = self.got.len();
        for b in bufs {
            let n = b.len().min(room);
            self.got.extend_from_slice(&b[..n]);
            room -= n;
        }
        Ok(self.got.len() - before)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// The home (the stripe's designated agent) answers a read of its value from its own slab:
/// no message to another node.
#[test]
fn a_read_at_the_home_sends_no_message() {
    let (hub, nodes) = cluster(Layout::Whole);
    let key = keys_of(&nodes, 0, "h", 1).remove(0);
    stored(set(&nodes[0], &key, &[9; 300]));
    let before = nodes[0].transport.data_messages();
    match nodes[0].loop_read_start(&key) {
        crate::agent::LoopRead::Value(v) => assert_eq!(v.value, vec![9; 300]),
        other => panic!("{other:?}"),
    }
    assert_eq!(nodes[0].transport.data_messages(), before);
    // A client's get composed straight into its reply, after what the buffer held: the same
    // bytes as the reply composed from the value, with and without the cas.
    for with_cas in [false, true] {
        let mut out = b"earlier".to_vec();
        assert!(matches!(
            nodes[0].loop_read_into(&key, &mut out, with_cas),
            crate::agent::LoopRead::Composed
        ));
        let v = match nodes[0].loop_read_start(&key) {
            crate::agent::LoopRead::Value(v) => v,
            other => panic!("{other:?}"),
        };
        let mut want = b"earlier".to_vec();
        proto::compose::value(
            &mut want,
            &key,
            v.flags,
            &v.value,
            with_cas.then_some(v.cas),
        );
        proto::compose::reply(&mut want, proto::Reply::End);
        assert_eq!(out, want);
    }
    // Sent from the store to the client's socket: what the socket took, then what is left in
    // the buffer, is the same reply, whether the socket takes it all, part of it (within the
    // line, the data or the end), none (it would block) or fails.
    let v = match nodes[0].loop_read_start(&key) {
        crate::agent::LoopRead::Value(v) => v,
        other => panic!("{other:?}"),
    };
    let mut want = Vec::new();
    proto::compose::value(&mut want, &key, v.flags, &v.value, Some(v.cas));
    proto::compose::reply(&mut want, proto::Reply::End);
    let line = want.len() - 300 - 7;
    for takes in [
        Some(usize::MAX),
        Some(5),
        Some(line),
        Some(line + 100),
        Some(want.len() - 3),
        Some(0),
        None,
    ] {
        let mut socket = Takes {
            takes,
            got: Vec::new(),
        };
        let mut out = Vec::new();
        let (read, sent) = nodes[0].loop_read_send(&key, &mut out, true, &mut socket);
        assert!(
            matches!(read, crate::agent::LoopRead::Composed),
            "{takes:?}"
        );
        assert_eq!(sent, socket.got.len(), "{takes:?}");
        assert_eq!(sent, takes.unwrap_or(0).min(want.len()), "{takes:?}");
        socket.got.extend_from_slice(&out);
        assert_eq!(socket.got, want, "{takes:?}");
    }
    assert_eq!(nodes[0].transport.data_messages(), before);
    // A key not at this node leaves the buffer alone.
    let other = keys_of(&nodes, 1, "o", 1).remove(0);
    let mut out = b"earlier".to_vec();
    assert!(!matches!(
        nodes[0].loop_read_into(&other, &mut out, false),
        crate::agent::LoopRead::Composed
    ));
    assert_eq!(out, b"earlier");
    assert_eq!(whole::page_of(0, 0, 2, NODES), (0, 0, 0));
    hub.clear();
}

/// A forced-degraded read on the loop whose answers hold no consistent cut (parity pages that
/// have not applied a delta the data pages have) asks every position again, once, rather than
/// give up to a worker; its second answers, consistent, rebuild the value.
#[test]
fn a_range_read_without_a_cut_asks_again_once_on_the_loop() {
    use crate::carrier::peer::{Request, Response};
    let _rule = lock(&RULE);
    let (_hub, nodes) = cluster(Layout::Whole);
    let key = keys_of(&nodes, 0, "again", 1).remove(0);
    let value: Vec<u8> = (0..700).map(|i| (i * 11) as u8).collect();
    stored(set(&nodes[0], &key, &value));
    let home = &nodes[0];
    let mut pending = match home.loop_read_start_degraded(&key, 0) {
        crate::agent::LoopRead::Fetch(p) => p,
        other => panic!("{other:?}"),
    };
    let asked = pending.remote.clone();
    assert_eq!(asked.len(), 3, "rs:2,2 asks the three other positions");
    // Answers that agree on nothing: each data page at a seq no parity page has applied, each
    // parity page at counts of its own.
    for &(_, position) in &asked {
        let Request::Range { len, .. } = pending.request(position) else {
            panic!("a range read asks ranges");
        };
        let seqs = if position < 2 {
            vec![90 + position as u64]
        } else {
            vec![position as u64, 10 * position as u64]
        };
        let reply = Response::Range {
            seqs,
            bytes: vec![0; len as usize],
        };
        assert!(home.loop_read_chunk(&mut pending, position, Some(reply)));
    }
    assert!(!home.loop_read_enough(&pending));
    assert!(home.loop_read_again(&mut pending));
    assert_eq!(pending.remote, asked);
    assert!(!home.loop_read_again(&mut pending), "asked again twice");
    assert_eq!(home.counters.loop_range_reasks.load(Ordering::Relaxed), 1);
    // The members' own answers this time.
    for &(node, position) in &asked {
        let reply = nodes[node].handle_peer(pending.request(position));
        assert!(matches!(reply, Response::Range { .. }), "{reply:?}");
        assert!(home.loop_read_chunk(&mut pending, position, Some(reply)));
    }
    assert!(home.loop_read_enough(&pending));
    let got = home.loop_read_finish(pending).expect("the value rebuilt");
    assert_eq!(got.value, value);
}

/// Overwrites race repairs of values that share their pages: node 0 (a home) is down, and
/// while nodes 1 and 4 — the other data positions of node 0's page stripes — overwrite their
/// values, node 1 rebuilds node 0's values from those same pages, whose parity is updated a
/// message at a time. Every read returns the value, none an error: a repair combines no data
/// page with a parity page missing its delta (or the reverse). With the rule switched off
/// (`whole::RULE_OFF`), repairs mix the halves of a delta and their reads fail (the record's
/// CRC catches the wrong bytes).
#[test]
fn overwrites_racing_repairs_of_values_on_the_same_pages_read_right() {
    let _rule = lock(&RULE);
    assert_eq!(racing_repairs(), (0, 0));
    // The same with the rule off (in this test: no other test races repairs with writes, and
    // those here that count on the rule wait for `RULE`, so the switch, a static, changes
    // nothing else that runs meanwhile).
    whole::RULE_OFF.store(true, Ordering::Relaxed);
    let (failed, wrong) = racing_repairs();
    whole::RULE_OFF.store(false, Ordering::Relaxed);
    eprintln!("rule off: {failed} reads failed, {wrong} wrong");
    assert!(
        failed + wrong > 0,
        "without the rule, some repair mixed a delta's halves"
    );
}

/// Reads that failed and that returned wrong bytes, with the rule on or off.
fn racing_repairs() -> (usize, usize) {
    let (hub, nodes) = cluster(Layout::Whole);
    let of = |s: usize, n: usize| keys_of(&nodes, s, &format!("r{s}-"), n);
    let victims = of(0, 30);
    let writers: Vec<Vec<u8>> = of(1, 30).into_iter().chain(of(4, 30)).collect();
    for (i, key) in victims.iter().chain(&writers).enumerate() {
        stored(set(&nodes[2], key, &value_of(i, 0)));
    }
    hub.kill(0);
    rounds(&nodes[1..]);
    assert_eq!(nodes[1].agent_of(0), Some(1));
    // Each delta takes 1 ms to be applied: a write's page is ahead of its parity pages for
    // 1-2 ms, and the repairs read such pages.
    hub.delay_deltas(std::time::Duration::from_millis(1));
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let done = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let writer = {
        let (nodes, stop, writers) = (nodes.clone(), Arc::clone(&stop), writers.clone());
        let done = Arc::clone(&done);
        std::thread::spawn(move || {
            let mut round = 1;
            while !stop.load(Ordering::Relaxed) {
                for (i, key) in writers.iter().enumerate() {
                    let value = value_of(30 + i, 0)
                        .iter()
                        .map(|b| b ^ round as u8)
                        .collect::<Vec<u8>>();
                    let _ = set(&nodes[2], key, &value);
                }
                done.fetch_add(1, Ordering::Relaxed);
                round += 1;
            }
        })
    };
    let (mut failed, mut wrong) = (0, 0);
    // Reads until the writer has overwritten every value three times.
    while done.load(Ordering::Relaxed) < 3 {
        for (i, key) in victims.iter().enumerate() {
            match get(&nodes[1], key) {
                AgentResult::Value { value, .. } if value == value_of(i, 0) => {}
                AgentResult::Value { .. } => wrong += 1,
                _ => failed += 1,
            }
        }
    }
    stop.store(true, Ordering::Relaxed);
    writer.join().unwrap();
    assert!(nodes[1].counters.whole_rebuilds.load(Ordering::Relaxed) > 0);
    eprintln!(
        "{} repair reads read again for a consistent cut; writes whole at 1: {}, at 4: {}, fallbacks {}",
        nodes[1].counters.whole_cut_retries.load(Ordering::Relaxed),
        nodes[1].counters.whole_writes.load(Ordering::Relaxed),
        nodes[4].counters.whole_writes.load(Ordering::Relaxed),
        nodes[1].counters.whole_fallbacks.load(Ordering::Relaxed),
    );
    hub.clear();
    (failed, wrong)
}

/// A `set` at the home on the event loop: the slot written, then one delta to each of the m
/// parity positions of its page's stripe, and committed once each acked (no other message).
#[test]
fn a_whole_set_on_the_loop_sends_one_delta_per_parity_position() {
    let (hub, nodes) = cluster(Layout::Whole);
    let key = keys_of(&nodes, 0, "l", 1).remove(0);
    // The first write of the stripe builds its index (on a worker).
    stored(set(&nodes[0], &key, &[1; 10]));
    let id = nodes[0].next_request_id();
    let crate::agent::LoopWriteStart::Send(mut w) =
        nodes[0].loop_write_start(&key, crate::agent::StoreIf::SET, 3, 0, &[5; 900], id)
    else {
        panic!("the loop writes a whole value");
    };
    assert_eq!(w.remote.len(), 2, "m = 2 deltas");
    for (node, position) in w.remote.clone() {
        let req = w.request(position);
        assert!(
            matches!(req, crate::carrier::peer::Request::Delta { .. }),
            "{req:?}"
        );
        let reply = nodes[node].handle_peer(req);
        assert!(nodes[0].loop_write_acked(Some(reply)));
    }
    let cas = nodes[0].loop_write_finish(*w).expect("committed");
    match get(&nodes[4], &key) {
        AgentResult::Value { value, cas: c, .. } => assert_eq!((value, c), (vec![5; 900], cas)),
        other => panic!("{other:?}"),
    }
    check_parity(&nodes);
    hub.clear();
}

/// While a parity position is down and refused (its process gone), the home's loop goes on
/// writing whole: the delta of the node down is queued, as a worker queues it (sent once the
/// node is back: `writes_stay_whole_while_a_killed_member_is_down_and_go_split_while_one_is_…`),
/// and the write finishes on the acks of the positions up.
#[test]
fn the_loop_writes_whole_while_a_killed_parity_position_is_down() {
    use crate::agent::{LoopWriteStart, StoreIf};
    let (hub, nodes) = cluster(Layout::Whole);
    let key = keys_of(&nodes, 0, "k", 1).remove(0);
    stored(set(&nodes[0], &key, &[1; 10]));
    hub.kill(2);
    rounds(&nodes);
    assert!(nodes[0].is_refused(2) && !nodes[0].is_up(2));
    // The first write since (a worker's) finds the stripe's index as the view changed.
    stored(set(&nodes[0], &key, &[2; 10]));
    let queued = nodes[0].whole_deltas_pending();
    assert!(queued > 0, "the worker queued node 2's delta");
    let id = nodes[0].next_request_id();
    let mut w = match nodes[0].loop_write_start(&key, StoreIf::SET, 3, 0, &[5; 900], id) {
        LoopWriteStart::Send(w) => w,
        other => panic!("the loop writes a whole value while a refused member is down: {other:?}"),
    };
    // Node 2 keeps parity of both of node 0's page residues.
    assert_eq!(w.remote.len(), 1, "one delta sent: {:?}", w.remote);
    assert!(w.remote.iter().all(|&(node, _)| node != 2));
    assert_eq!(
        nodes[0].whole_deltas_pending(),
        queued + 1,
        "node 2's delta queued"
    );
    for (node, position) in w.remote.clone() {
        let reply = nodes[node].handle_peer(w.request(position));
        assert!(nodes[0].loop_write_acked(Some(reply)));
    }
    let (page, seq) = w
        .written
        .as_ref()
        .map(|x| (x.at.page, x.seq))
        .expect("whole");
    let cas = nodes[0].loop_write_finish(*w).expect("committed");
    match get(&nodes[4], &key) {
        AgentResult::Value { value, cas: c, .. } => assert_eq!((value, c), (vec![5; 900], cas)),
        other => panic!("{other:?}"),
    }
    assert_eq!(
        nodes[0].counters.whole_fallbacks.load(Ordering::Relaxed),
        0,
        "written whole"
    );
    // Applied by every parity position but node 2, whose next process rebuilds its pages
    // from the others: the write counts as applied everywhere, and the parity position that
    // keeps its delta is told so (it need not keep it while node 2 is down).
    assert_eq!(
        lock(&nodes[0].store).slab.take_announced(),
        vec![(page, seq)],
        "the page's deltas up to this write applied everywhere"
    );
    // The queue keeps a refused node's deltas for a while (its process may have started
    // unseen), then drops them: its next process rebuilds its pages after it starts.
    let superseded = || {
        nodes[0]
            .counters
            .whole_deltas_superseded
            .load(Ordering::Relaxed)
    };
    let queued = nodes[0].whole_deltas_pending();
    nodes[0].redeliver_deltas();
    assert_eq!(
        (nodes[0].whole_deltas_pending(), superseded()),
        (queued, 0),
        "kept"
    );
    for (_, at, _) in lock(&nodes[0].whole_pending).iter_mut() {
        *at -= 6_000_000;
    }
    nodes[0].redeliver_deltas();
    assert_eq!(nodes[0].whole_deltas_pending(), 0);
    assert_eq!(nodes[0].whole_pending_bytes.load(Ordering::Relaxed), 0);
    assert_eq!(superseded() as usize, queued);
    hub.clear();
}

/// A `gat` at a whole value's home runs on the loop: the value read from the home's slab under
/// the key's lock, the new expiry in the index, and one `Touch` for each other position (each
/// keeps the value's location record); a miss and a key another node leads send nothing.
#[test]
fn a_gat_at_the_home_reads_its_slot_and_touches_every_position() {
    use crate::agent::LoopGatStart;
    let (hub, nodes) = cluster(Layout::Whole);
    let key = keys_of(&nodes, 0, "g", 1).remove(0);
    stored(set(&nodes[0], &key, &[7; 600]));
    let now = crate::time::now_secs();
    let LoopGatStart::Send(notice, value) = nodes[0].loop_gat_start(&key, 100) else {
        panic!("the home's loop runs the gat");
    };
    assert_eq!((value.value.as_slice(), value.flags), (&[7u8; 600][..], 3));
    assert!(
        (now + 100..=now + 101).contains(&value.exptime),
        "{}",
        value.exptime
    );
    let mut told: Vec<usize> = notice.remote.iter().map(|&(node, _)| node).collect();
    told.sort_unstable();
    assert_eq!(told, vec![1, 2, 3], "every other position of the stripe");
    for &(node, _) in &notice.remote {
        let req = notice.request();
        assert!(
            matches!(req, crate::carrier::peer::Request::Touch { exptime, .. } if exptime == value.exptime),
            "{req:?}"
        );
        nodes[node].handle_peer(req);
    }
    assert!(nodes[0].loop_notice_finish(*notice));
    match get(&nodes[4], &key) {
        AgentResult::Value { exptime, cas, .. } => {
            assert_eq!((exptime, cas), (value.exptime, value.cas));
        }
        other => panic!("{other:?}"),
    }
    let missing = keys_of(&nodes, 0, "g-missing", 1).remove(0);
    assert!(matches!(
        nodes[0].loop_gat_start(&missing, 100),
        LoopGatStart::Miss
    ));
    assert!(matches!(
        nodes[1].loop_gat_start(&key, 100),
        LoopGatStart::Forward(0)
    ));
    hub.clear();
}

/// A node restarts empty: its recovery rebuilds its slab pages and parity pages from their
/// page stripes (while other homes go on writing, their deltas kept until each page is
/// rebuilt) and finds its values' records in its rebuilt slab. Then every parity page is again
/// the parity of its stripe's data pages, its values' records are in its slab, and another
/// home's values are rebuilt through its parity pages.
#[test]
fn a_restarted_node_rebuilds_its_pages_from_their_stripes() {
    let (hub, mut nodes) = cluster(Layout::Whole);
    let keys: Vec<Vec<u8>> = (0..80).map(|i| format!("s{i}").into_bytes()).collect();
    for (i, key) in keys.iter().enumerate() {
        stored(set(&nodes[i % NODES], key, &value_of(i, 0)));
    }
    hub.kill(2);
    rounds(&nodes);
    // A new process of node 2, empty.
    restart_empty(&hub, &mut nodes, 2, 0);
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let writer = {
        let (nodes, stop, keys) = (nodes.clone(), Arc::clone(&stop), keys.clone());
        std::thread::spawn(move || {
            let mut writes = 0;
            while !stop.load(Ordering::Relaxed) {
                // Keys of homes other than node 2, written again with their first value.
                for (i, key) in keys.iter().enumerate() {
                    if nodes[0].placement.stripe_of(key) != 2 {
                        let _ = set(&nodes[(i + 1) % NODES], key, &value_of(i, 0));
                        writes += 1;
                    }
                }
            }
            writes
        })
    };
    with_heartbeats(&nodes, || nodes[2].recover());
    stop.store(true, Ordering::Relaxed);
    assert!(writer.join().unwrap() > 0);
    assert!(!lock(&nodes[2].store).whole_lost, "pages rebuilt");
    assert!(lock(&nodes[2].store).slab.pages() > 0);
    // Its progress counted every page it rebuilt, of as many as it set out to.
    let c = &nodes[2].counters;
    let (rebuilt, to_rebuild) = (
        c.whole_pages_rebuilt.load(Ordering::Relaxed),
        c.whole_pages_to_rebuild.load(Ordering::Relaxed),
    );
    assert!(to_rebuild > 0);
    assert_eq!(rebuilt, to_rebuild);
    check_parity(&nodes);
    // It may write whole again (it leads its stripe once its lease allows: the real-process
    // tests cover that, on a 1 s down-after time instead of this cluster's 10 s).
    assert!(!nodes[2].pages_lost.load(Ordering::Relaxed));
    // Node 2's values are in its rebuilt slab, served by the node itself.
    let mine: Vec<usize> = (0..keys.len())
        .filter(|&i| nodes[0].placement.stripe_of(&keys[i]) == 2)
        .collect();
    assert!(!mine.is_empty());
    for &i in &mine {
        let store = lock(&nodes[2].store);
        let rec = store
            .get_latest(2, 0, &keys[i])
            .expect("the home's record is held");
        let (h, value) = crate::record::parse(rec).expect("a record");
        assert_eq!(
            (h.key.as_slice(), value),
            (keys[i].as_slice(), value_of(i, 0).as_slice())
        );
    }
    // Node 0 dies: its values are rebuilt from page stripes 0 and 4, where node 2 keeps
    // parity pages it rebuilt.
    hub.kill(0);
    rounds(&nodes);
    let rebuilt = nodes[1].counters.whole_rebuilds.load(Ordering::Relaxed);
    for (i, key) in keys.iter().enumerate() {
        if nodes[0].placement.stripe_of(key) == 0 {
            expect_value(
                get(&nodes[4], key),
                &value_of(i, 0),
                "home 0 down, after the restart of 2",
            );
        }
    }
    assert!(nodes[1].counters.whole_rebuilds.load(Ordering::Relaxed) > rebuilt);
    hub.clear();
}

/// A key of stripe 0 written twice at its home (node 0), the second time while node 2 is cut
/// off from it: page 0 of node 0 is data position 0 of page stripe 0, with parity at nodes 2
/// and 3, so node 2's parity page misses the second write's delta (still cut off on return).
fn second_write_missed_by_node_2(hub: &MemHub, nodes: &[Arc<Node>], prefix: &str) -> Vec<u8> {
    let key = keys_of(nodes, 0, prefix, 1).remove(0);
    stored(set(&nodes[0], &key, &[1; 500]));
    hub.cut(0, 2);
    stored(set(&nodes[0], &key, &[2; 500]));
    key
}

/// A parity position that does not answer its delta (cut off from the home) is marked down,
/// the write is stored (at most m positions down), and the delta is sent again once the node
/// is back: its parity page then holds every delta again.
#[test]
fn a_delta_a_parity_position_missed_is_sent_again() {
    let (hub, nodes) = cluster(Layout::Whole);
    let key = second_write_missed_by_node_2(&hub, &nodes, "m");
    assert_eq!(nodes[0].whole_deltas_pending(), 1);
    let (seqs, _) = lock(&nodes[2].store)
        .range((0, 2, 0), 0, 1)
        .expect("a range");
    let (data_seqs, _) = lock(&nodes[0].store)
        .range((0, 0, 0), 0, 1)
        .expect("a range");
    assert_ne!(seqs[0], data_seqs[0], "node 2's parity page misses a delta");
    nodes[0].redeliver_deltas();
    assert_eq!(
        nodes[0].whole_deltas_pending(),
        1,
        "kept while node 2 is down"
    );
    hub.heal();
    rounds(&nodes);
    nodes[0].redeliver_deltas();
    assert_eq!(nodes[0].whole_deltas_pending(), 0);
    assert_eq!(
        nodes[0]
            .counters
            .whole_deltas_redelivered
            .load(Ordering::Relaxed),
        1
    );
    check_parity(&nodes);
    expect_value(get(&nodes[1], &key), &[2; 500], "read back");
    // Sent again, the write is applied everywhere: the next delta says so, and the parity
    // positions keep only that one.
    stored(set(&nodes[0], &key, &[3; 500]));
    for node in [2, 3] {
        let store = lock(&nodes[node].store);
        let kept = store.kept_deltas((0, node as u8, 0), 0, 0);
        assert_eq!(kept.len(), 1, "node {node} keeps only the last delta");
    }
    hub.clear();
}

/// A parity position keeps each delta until its home says every position applied it; a
/// `Commit` the position did not acknowledge (cut off from the home) is sent again in the next
/// round, so the position lets the delta go then, not only after `KEPT_FOR`.
#[test]
fn a_commit_a_parity_position_missed_is_told_again() {
    let (hub, nodes) = cluster(Layout::Whole);
    let key = keys_of(&nodes, 0, "c", 1).remove(0);
    stored(set(&nodes[0], &key, &[1; 500]));
    let kept = |node: usize| lock(&nodes[node].store).kept().0;
    assert_eq!(
        (kept(2), kept(3)),
        (1, 1),
        "both parity positions keep the delta"
    );
    hub.cut(0, 3);
    nodes[0].announce_commits();
    assert_eq!((kept(2), kept(3)), (0, 1), "node 3 was not told");
    hub.heal();
    rounds(&nodes);
    nodes[0].announce_commits();
    assert_eq!(kept(3), 0, "told in the next round");
    hub.clear();
}

/// A parity page that missed a delta its home never sent again (the home's queue lost, as when
/// it dies) and then applied a later one is gapped: it agrees with no data page and is left out
/// of repairs. The member rebuilds it while it runs, from a consistent cut of the others: it
/// is the parity of its data pages again, and repairs may use it.
#[test]
fn a_parity_page_that_missed_a_delta_for_good_is_rebuilt_while_the_node_runs() {
    let (hub, nodes) = cluster(Layout::Whole);
    let key = second_write_missed_by_node_2(&hub, &nodes, "g");
    // The home's queue of the delta node 2 missed is lost.
    lock(&nodes[0].whole_pending).clear();
    nodes[0].whole_pending_bytes.store(0, Ordering::Relaxed);
    hub.heal();
    rounds(&nodes);
    stored(set(&nodes[0], &key, &[3; 500]));
    let seqs = |node: usize| {
        lock(&nodes[node].store)
            .range((0, node as u8, 0), 0, 1)
            .expect("a range")
            .0
    };
    assert_eq!(seqs(2)[0], whole::GAPPED, "node 2's page misses a delta");
    // The pieces of page 0 of page stripe 0 a repair of position 0 has without node 3.
    let without_3 = || {
        vec![
            whole::Piece {
                position: 1,
                seqs: seqs(1),
            },
            whole::Piece {
                position: 2,
                seqs: seqs(2),
            },
        ]
    };
    assert_eq!(whole::consistent(&without_3(), 2), vec![1]);
    // Not yet gapped for long: nothing to heal.
    assert_eq!(nodes[2].heal_gapped_pages(), 0);
    assert_eq!(nodes[2].heal_pages_gapped_for(Duration::ZERO), 1);
    assert_eq!(
        nodes[2].counters.whole_pages_healed.load(Ordering::Relaxed),
        1
    );
    assert_eq!(seqs(2), seqs(3), "node 2's page agrees with node 3's");
    check_parity(&nodes);
    // Deltas after the heal apply as usual.
    stored(set(&nodes[0], &key, &[4; 500]));
    check_parity(&nodes);
    // Without the home and node 3, a repair combines node 1's data page with node 2's parity
    // page: they are a consistent cut (before the heal, node 2's page joined none).
    assert_eq!(whole::consistent(&without_3(), 2), vec![1, 2]);
    hub.clear();
}

/// While a member's process is gone (its connection refused), homes go on writing whole: the
/// deltas of its parity pages wait in their queues, and once it restarts and rebuilds its pages
/// they are sent again (applied, or dropped where its rebuild holds them); every parity page
/// then matches its data pages, and every value reads back. A member cut off (down, not
/// refused) may come back with its pages but without the deltas it missed: writes go split.
#[test]
fn writes_stay_whole_while_a_killed_member_is_down_and_go_split_while_one_is_cut_off() {
    let (hub, mut nodes) = cluster(Layout::Whole);
    let keys: Vec<Vec<u8>> = (0..60).map(|i| format!("w{i}").into_bytes()).collect();
    for (i, key) in keys.iter().enumerate() {
        stored(set(&nodes[i % NODES], key, &value_of(i, 0)));
    }
    hub.kill(2);
    rounds(&nodes);
    assert!(nodes[0].is_refused(2) && !nodes[0].is_up(2));
    let fallbacks = |nodes: &[Arc<Node>]| -> u64 {
        [0, 1, 3, 4]
            .iter()
            .map(|&i| nodes[i].counters.whole_fallbacks.load(Ordering::Relaxed))
            .sum()
    };
    let before = fallbacks(&nodes);
    let others: Vec<usize> = (0..keys.len())
        .filter(|&i| nodes[0].placement.stripe_of(&keys[i]) != 2)
        .collect();
    for &i in &others {
        let home = nodes[0].placement.stripe_of(&keys[i]);
        stored(set(&nodes[home], &keys[i], &value_of(i, 1)));
    }
    assert_eq!(
        fallbacks(&nodes),
        before,
        "written whole while node 2 is down"
    );
    let queued: usize = [0, 1, 3, 4]
        .iter()
        .map(|&i| nodes[i].whole_deltas_pending())
        .sum();
    assert!(queued > 0, "node 2 keeps parity pages of some of them");
    // Node 2 restarts empty and rebuilds its pages. Its process starts well after the deltas
    // were queued (its incarnation says so: 2 s on, past the 1 s margin for clocks), so the
    // homes drop them rather than send them: its rebuild holds them.
    restart_empty(&hub, &mut nodes, 2, 2_000_000);
    with_heartbeats(&nodes, || nodes[2].recover());
    rounds(&nodes);
    let mut superseded = 0;
    for node in &nodes {
        node.redeliver_deltas();
        assert_eq!(node.whole_deltas_pending(), 0);
        assert_eq!(node.whole_pending_bytes.load(Ordering::Relaxed), 0);
        superseded += node
            .counters
            .whole_deltas_superseded
            .load(Ordering::Relaxed);
        let redelivered = node
            .counters
            .whole_deltas_redelivered
            .load(Ordering::Relaxed);
        assert_eq!(redelivered, 0, "none sent: the rebuild holds them");
    }
    assert_eq!(superseded as usize, queued);
    check_parity(&nodes);
    // The values written while node 2 was down read back (node 2's own stripe waits for its
    // lease, a 10 s term here: its values are checked in its rebuilt slab).
    for &i in &others {
        let res = get(&nodes[(i + 2) % NODES], &keys[i]);
        expect_value(res, &value_of(i, 1), "written while node 2 was down");
    }
    for (i, key) in keys.iter().enumerate() {
        if others.contains(&i) {
            continue;
        }
        let store = lock(&nodes[2].store);
        let rec = store.get_latest(2, 0, key).expect("the home's record");
        let (h, value) = crate::record::parse(rec).expect("a record");
        assert_eq!(
            (h.key.as_slice(), value),
            (key.as_slice(), &value_of(i, 0)[..])
        );
    }
    // Node 2 cut off from node 0 (it keeps parity for both of node 0's page residues): the
    // first write misses its delta (queued), the next one sees node 2 down without a refusal
    // and goes split.
    let mine = keys_of(&nodes, 0, "cut", 2);
    hub.cut(0, 2);
    let before = nodes[0].counters.whole_fallbacks.load(Ordering::Relaxed);
    for key in &mine {
        stored(set(&nodes[0], key, &[7; 300]));
    }
    assert!(!nodes[0].is_up(2) && !nodes[0].is_refused(2));
    assert_eq!(
        nodes[0].counters.whole_fallbacks.load(Ordering::Relaxed),
        before + 1,
        "the second write, split"
    );
    hub.heal();
    rounds(&nodes);
    for key in &mine {
        expect_value(get(&nodes[1], key), &[7; 300], "after the cut");
    }
    hub.clear();
}

/// The kinds of `keys`' entries in stripe 0's index (node 0 leads it).
fn kinds_in_stripe_0(node: &Node, keys: &[Vec<u8>]) -> Vec<crate::record::Kind> {
    let g = lock(&node.stripes[0]);
    let ix = g.as_ref().expect("node 0 leads stripe 0");
    keys.iter()
        .map(|k| ix.get(k).expect("an entry").kind)
        .collect()
}

/// Values their home stored split (a member cut off) are written whole again in the
/// background once every member is back: the same bytes, flags and CAS value (a `cas` with
/// the value read before succeeds), read through every node; the split records are gone from
/// the other positions, and every parity page is its stripe's parity.
#[test]
fn split_values_are_written_whole_again_at_their_home_with_their_cas_value() {
    use crate::record::{self, Kind};
    let (hub, nodes) = cluster(Layout::Whole);
    let keys = keys_of(&nodes, 0, "rw", 6);
    hub.cut(0, 2);
    for (i, key) in keys.iter().enumerate() {
        stored(set(&nodes[0], key, &value_of(i + 1, 0)));
    }
    // Node 2 seen down, not refused: split (the first write may have gone whole, its delta
    // to node 2 queued).
    let kinds = kinds_in_stripe_0(&nodes[0], &keys);
    let split: Vec<usize> = (0..keys.len())
        .filter(|&i| kinds[i] != Kind::Whole)
        .collect();
    assert!(split.len() >= keys.len() - 1, "{kinds:?}");
    let cas_of = |node: &Node, i: usize| match get(node, &keys[i]) {
        AgentResult::Value { cas, .. } => cas,
        other => panic!("{other:?}"),
    };
    let cas: Vec<u64> = (0..keys.len()).map(|i| cas_of(&nodes[1], i)).collect();
    // Not while a member is down; counted as waiting all the same.
    assert_eq!(nodes[0].rewhole(u64::MAX), 0);
    let waiting = |node: &Node| node.counters.whole_split_values.load(Ordering::Relaxed);
    assert_eq!(waiting(&nodes[0]), split.len() as u64);
    hub.heal();
    rounds(&nodes);
    nodes[0].redeliver_deltas();
    let bytes = nodes[0].rewhole(u64::MAX);
    let want: u64 = split.iter().map(|&i| value_of(i + 1, 0).len() as u64).sum();
    assert_eq!(bytes, want);
    assert_eq!(
        nodes[0].counters.whole_rewritten.load(Ordering::Relaxed),
        split.len() as u64
    );
    assert!(kinds_in_stripe_0(&nodes[0], &keys)
        .iter()
        .all(|&k| k == Kind::Whole));
    // Nothing is left to do.
    assert_eq!(waiting(&nodes[0]), 0);
    assert_eq!(nodes[0].rewhole(u64::MAX), 0);
    assert_eq!(waiting(&nodes[0]), 0);
    for (i, key) in keys.iter().enumerate() {
        for reader in &nodes {
            expect_value(get(reader, key), &value_of(i + 1, 0), "written whole again");
        }
        assert_eq!(cas_of(&nodes[3], i), cas[i], "the CAS value is kept");
    }
    // At the home, the latest record is the rewrite. Past it, a split value's records are
    // gone: the other positions hold only the rewrite's location, one version later, at the
    // two parity positions of its slot's page (nodes 2 and 3, or 1 and 2, as the page is data
    // position 0 or 1 of its page stripe).
    for &i in &split {
        let store = lock(&nodes[0].store);
        let (h, _) = record::parse_header(store.get_latest(0, 0, &keys[i]).expect("the slot"))
            .expect("a record");
        assert_eq!((h.kind, h.version), (Kind::Whole, cas[i] + 1));
        drop(store);
        let mut locations = 0;
        for p in 1..4u8 {
            let store = lock(&nodes[p as usize].store);
            if let Some(r) = store.get_latest(0, p, &keys[i]) {
                let (h, _) = record::parse_header(r).expect("a record");
                assert_eq!(
                    (h.kind, h.version),
                    (Kind::Whole, cas[i] + 1),
                    "key {i} at {p}"
                );
                locations += 1;
            }
        }
        assert_eq!(locations, 2, "key {i}");
    }
    check_parity(&nodes);
    // The home dies: its stand-in rebuilds the index from the records (the rewrite's
    // locations) and the values from the pages' stripes, with the same CAS values.
    hub.kill(0);
    rounds(&nodes);
    for (i, key) in keys.iter().enumerate() {
        expect_value(get(&nodes[4], key), &value_of(i + 1, 0), "home down");
        assert_eq!(cas_of(&nodes[4], i), cas[i], "the CAS value, home down");
    }
    // A client that read a CAS value before the rewrite still may write with it.
    let res = nodes[2].route_key(
        AgentOp::Store {
            mode: proto::StoreMode::Cas,
            key: keys[split[0]].clone(),
            flags: 3,
            exptime: 0,
            compare_cas: Some(cas[split[0]]),
            value: b"swapped".to_vec(),
            once: Once::first(nodes[2].next_request_id()),
        },
        &keys[split[0]],
    );
    match res {
        AgentResult::Stored { cas: new } => assert!(new > cas[split[0]] + 1),
        other => panic!("cas after the rewrite: {other:?}"),
    }
    expect_value(get(&nodes[4], &keys[split[0]]), b"swapped", "swapped");
    hub.clear();
}

/// The values of the torn-delta tests: 300 bytes each, all on page 0 of node 0's slab.
fn first_value(i: usize) -> Vec<u8> {
    vec![i as u8 + 1; 300]
}

/// The overwrite that a kill of its home tears.
const TORN: [u8; 300] = [0xEE; 300];

/// `n` keys of stripe 0 written at their home, node 0 ([`first_value`]; page 0 of its slab is
/// data position 0 of page stripe 0, with parity at nodes 2 and 3), then the first overwritten
/// with [`TORN`] while node 0 is cut off from node 2: only node 3 applies that delta, and node
/// 2's waits in node 0's queue (lost when node 0 dies; node 0 writes the next values split
/// until it hears from node 2 again). Returns the keys.
fn torn_overwrite(hub: &MemHub, nodes: &[Arc<Node>], prefix: &str, n: usize) -> Vec<Vec<u8>> {
    let keys = keys_of(nodes, 0, prefix, n);
    for (i, key) in keys.iter().enumerate() {
        stored(set(&nodes[0], key, &first_value(i)));
    }
    hub.cut(0, 2);
    stored(set(&nodes[0], &keys[0], &TORN));
    let (behind, ahead) = (parity_seq(nodes, 2), parity_seq(nodes, 3));
    assert_eq!(ahead, behind + 1, "node 3 applied a delta node 2 missed");
    keys
}

/// Parity node `node`'s seq for data position 0 of page 0 of page stripe 0.
fn parity_seq(nodes: &[Arc<Node>], node: usize) -> u64 {
    lock(&nodes[node].store)
        .range((0, node as u8, 0), 0, 1)
        .expect("a range")
        .0[0]
}

/// A delta torn by a kill with m = 2 homes lost ([`torn_overwrite`]): node 0 dies with its
/// queue of node 2's delta, then node 1 (the other data position) dies too, and node 3 no longer
/// keeps the delta (as if released). The two parity pages left disagree and show no consistent
/// cut. The restarted node 0 rebuilds page 0 from them as they are: its pages are back, the
/// values its page held outside the torn range read back right from its store, the torn one
/// never with wrong bytes, and once node 1 is rebuilt too the page stripe is a codeword again.
#[test]
fn a_page_torn_by_a_kill_is_salvaged_when_m_homes_are_lost() {
    let (hub, mut nodes) = cluster(Layout::Whole);
    let keys = torn_overwrite(&hub, &nodes, "torn", 8);
    hub.kill(0);
    hub.kill(1);
    // Node 3 no longer keeps the delta node 2 missed (as if released: node 0 lived on long
    // enough), so no rebuild can send it on.
    lock(&nodes[3].store).release_kept(|_, _, _| true);
    rounds(&nodes);
    restart_empty(&hub, &mut nodes, 0, 0);
    hub.heal();
    rounds(&nodes);
    let rebuilt = with_heartbeats(&nodes, || nodes[0].rebuild_pages());
    assert!(rebuilt.is_ok(), "{rebuilt:?}");
    let c = &nodes[0].counters;
    assert_eq!(c.whole_pages_salvaged.load(Ordering::Relaxed), 1);
    assert_eq!(c.whole_deltas_completed.load(Ordering::Relaxed), 0);
    assert!(!lock(&nodes[0].store).whole_lost, "pages rebuilt");
    assert!(!nodes[0].pages_lost.load(Ordering::Relaxed));
    let store = lock(&nodes[0].store);
    for (i, key) in keys.iter().enumerate() {
        let got = store
            .get_latest(0, 0, key)
            .map(|rec| crate::record::parse(rec).map(|(h, v)| (h.key, v.to_vec())));
        match got {
            Some(Ok((k, v))) => {
                assert_eq!(&k, key);
                if i == 0 {
                    assert!(v == first_value(0) || v == TORN, "the torn key");
                } else {
                    assert_eq!(v, first_value(i), "key {i}, outside the torn range");
                }
            }
            // A torn slot's record fails its check: not taken.
            None if i == 0 => {}
            other => panic!("key {i}: {other:?}"),
        }
    }
    drop(store);
    // Node 1 restarts and rebuilds its page from node 0's salvaged page and the parity pages,
    // which node 0 realigned to it: every parity page is the code's parity of its stripe.
    restart_empty(&hub, &mut nodes, 1, 0);
    let rebuilt = with_heartbeats(&nodes, || nodes[1].rebuild_pages());
    assert!(rebuilt.is_ok(), "{rebuilt:?}");
    check_parity(&nodes);
    hub.clear();
}

/// Writes `value` as the next version of `key` (stripe 0) straight at its home, node 0, as
/// its agent would: the slot, then a delta to each parity position of its page.
fn write_at_home_0(nodes: &[Arc<Node>], key: &[u8], value: &[u8]) {
    let version = lock(&nodes[0].store)
        .get_latest(0, 0, key)
        .and_then(|rec| crate::record::parse_header(rec).ok())
        .map_or(1, |(h, _)| h.version + 1);
    let e = crate::agent::index::Entry::new(
        version,
        value.len() as u64,
        3,
        0,
        crate::record::Kind::Whole,
        crate::time::now_micros(),
        4,
        value.len() as u64,
    );
    let written = nodes[0].write_whole(0, key, &e, value, 0);
    assert!(written.is_ok(), "{key:?}: {:?}", written.err());
}

/// A home killed between its deltas to its two parity positions (node 3 applied an overwrite's,
/// node 2 missed it) leaves page 0 of page stripe 0 torn. With node 3's copy of it released
/// (`kept` false), node 0, restarted,
/// takes its page back at the newest seq a cut of k shows (`oldest`: the oldest, test-only)
/// and realigns the other parity page: the page stripe is one codeword again under equal seqs,
/// the values are whole in its slab (the torn write in, or out), its next writes apply at both
/// parity positions, and every value is rebuilt right once it dies again. Without the
/// realignment the page ahead would drop the home's next delta as one it applied already (its
/// bytes then differ from the code's parity under the same seqs) and the page behind would be
/// left out of every repair.
fn a_torn_page_comes_back_with_its_home(oldest: bool, kept: bool) {
    let (hub, mut nodes) = cluster(Layout::Whole);
    let keys = torn_overwrite(&hub, &nodes, "realign", 8);
    let (behind, ahead) = (parity_seq(&nodes, 2), parity_seq(&nodes, 3));
    if !kept {
        // As if node 3 had released the delta it keeps (node 0 lived on long enough).
        lock(&nodes[3].store).release_kept(|_, _, _| true);
    }
    hub.kill(0);
    rounds(&nodes);
    restart_empty(&hub, &mut nodes, 0, 0);
    hub.heal();
    rounds(&nodes);
    whole::OLDEST_FIRST.with(|o| o.set(oldest));
    let rebuilt = with_heartbeats(&nodes, || nodes[0].rebuild_pages());
    whole::OLDEST_FIRST.with(|o| o.set(false));
    assert!(rebuilt.is_ok(), "{rebuilt:?}");
    let c = &nodes[0].counters;
    // The kept delta sent on to node 2 (the page read again, whole at the newest seq), or,
    // with none kept, node 2's page realigned.
    let (realigned, completed) = (u64::from(!kept), u64::from(kept));
    assert_eq!(c.whole_pages_realigned.load(Ordering::Relaxed), realigned);
    assert_eq!(c.whole_deltas_completed.load(Ordering::Relaxed), completed);
    assert_eq!(c.whole_pages_salvaged.load(Ordering::Relaxed), 0);
    let oldest = oldest && !kept;
    let home_seq = lock(&nodes[0].store)
        .range((0, 0, 0), 0, 1)
        .expect("a range")
        .0[0];
    assert_eq!(home_seq, if oldest { behind } else { ahead });
    assert_eq!(parity_seq(&nodes, 2), home_seq);
    assert_eq!(parity_seq(&nodes, 3), home_seq);
    check_parity(&nodes);
    // The home's slab holds every value whole: the torn writes in (newest) or out (oldest).
    let now = |i: usize| match (i == 0, oldest) {
        (true, false) => TORN.to_vec(),
        _ => first_value(i),
    };
    for (i, key) in keys.iter().enumerate() {
        let store = lock(&nodes[0].store);
        let rec = store
            .get_latest(0, 0, key)
            .unwrap_or_else(|| panic!("key {i} linked in the slab"));
        let (h, value) = crate::record::parse(rec).expect("a record");
        assert_eq!(
            (h.key.as_slice(), value),
            (key.as_slice(), now(i).as_slice())
        );
    }
    // Rolled back, node 3's location records of the undone writes went back to those they
    // replaced: every parity position points at the slots the home linked.
    for (i, key) in keys.iter().enumerate() {
        let linked = lock(&nodes[0].store)
            .get_latest(0, 0, key)
            .and_then(|rec| crate::record::parse_header(rec).ok())
            .map(|(h, _)| h.version);
        for node in [2, 3] {
            let store = lock(&nodes[node].store);
            let at = (1..4u8)
                .find_map(|p| store.get_latest(0, p, key))
                .and_then(|rec| crate::record::parse_header(rec).ok())
                .map(|(h, _)| h.version);
            assert_eq!(at, linked, "key {i}: the location record at node {node}");
        }
    }
    // The home writes again: both parity positions apply its deltas.
    let second = |i: usize| vec![0x40 + i as u8; 300];
    for (i, key) in keys.iter().enumerate() {
        write_at_home_0(&nodes, key, &second(i));
    }
    check_parity(&nodes);
    // It dies again: every value is rebuilt right from its page's stripe.
    hub.kill(0);
    rounds(&nodes[1..]);
    assert_eq!(nodes[1].agent_of(0), Some(1), "node 1 took stripe 0 over");
    for (i, key) in keys.iter().enumerate() {
        expect_value(get(&nodes[1], key), &second(i), "home 0 down again");
    }
    hub.clear();
}

#[test]
fn a_torn_page_is_realigned_forward_when_its_home_comes_back() {
    a_torn_page_comes_back_with_its_home(false, false);
}

#[test]
fn a_torn_page_is_realigned_back_when_its_home_comes_back() {
    a_torn_page_comes_back_with_its_home(true, false);
}

/// With node 3's copy of the delta still kept, the restarted home sends it to node 2 before it
/// takes its page back, even when it would prefer the oldest page (test-only): nothing to undo.
#[test]
fn a_torn_page_is_completed_from_a_kept_delta_when_its_home_comes_back() {
    a_torn_page_comes_back_with_its_home(true, true);
}

/// While the home of a torn page is down, its stand-in serves the torn write's value: of the
/// cuts of k its read shows, the one whose bytes pass the record's check. Before, the largest
/// cut (the parity page without the write, on a tie the first) rebuilt bytes that failed the
/// check, and the key could not be read until its home came back.
#[test]
fn a_stand_in_reads_a_torn_write_from_the_cut_that_holds_it() {
    let (hub, nodes) = cluster(Layout::Whole);
    let keys = torn_overwrite(&hub, &nodes, "standin", 4);
    hub.kill(0);
    hub.heal();
    rounds(&nodes[1..]);
    assert_eq!(nodes[1].agent_of(0), Some(1), "node 1 took stripe 0 over");
    expect_value(get(&nodes[1], &keys[0]), &TORN, "the torn write");
    for (i, key) in keys.iter().enumerate().skip(1) {
        expect_value(
            get(&nodes[1], key),
            &first_value(i),
            "outside the torn range",
        );
    }
    hub.clear();
}

/// m = 2 homes of a page stripe lost at once, one of them killed between its deltas to the
/// page's two parity positions (node 3 applied an overwrite's delta, node 2 missed it): no cut
/// of k pieces exists. Node 3 keeps the delta until the home says every position applied it,
/// so the restarted node 0's rebuild sends it to node 2 with its location record, and the page
/// stripe is whole again: every value on the page is whole in node 0's slab, the torn write's
/// too (no page salvaged), and both parity pages are the code's parity of the data pages once
/// node 1 is rebuilt.
#[test]
fn a_torn_delta_kept_by_a_parity_position_completes_the_cut_when_m_homes_are_lost() {
    let (hub, mut nodes) = cluster(Layout::Whole);
    let keys = torn_overwrite(&hub, &nodes, "kept", 8);
    // Each parity position keeps the deltas not known applied everywhere: node 3 the torn
    // one (it came saying the write before it was), node 2 the one before it.
    let kept = |node: usize| -> Vec<u64> {
        let store = lock(&nodes[node].store);
        let seqs = store.kept_deltas((0, node as u8, 0), 0, 0);
        seqs.iter().map(|d| d.seq).collect()
    };
    let torn = kept(3);
    assert_eq!(torn.len(), 1, "node 3 keeps the delta node 2 missed");
    assert_eq!(kept(2), vec![torn[0] - 1]);
    hub.kill(0);
    hub.kill(1);
    rounds(&nodes);
    restart_empty(&hub, &mut nodes, 0, 0);
    hub.heal();
    rounds(&nodes);
    let rebuilt = with_heartbeats(&nodes, || nodes[0].rebuild_pages());
    assert!(rebuilt.is_ok(), "{rebuilt:?}");
    let c = &nodes[0].counters;
    assert_eq!(c.whole_deltas_completed.load(Ordering::Relaxed), 1);
    assert_eq!(c.whole_pages_salvaged.load(Ordering::Relaxed), 0);
    let want = |i: usize| {
        if i == 0 {
            TORN.to_vec()
        } else {
            first_value(i)
        }
    };
    for (i, key) in keys.iter().enumerate() {
        let store = lock(&nodes[0].store);
        let rec = store
            .get_latest(0, 0, key)
            .unwrap_or_else(|| panic!("key {i} linked in the slab"));
        let (h, value) = crate::record::parse(rec).expect("a record");
        assert_eq!(
            (h.key.as_slice(), value),
            (key.as_slice(), want(i).as_slice())
        );
    }
    // Node 2 took the torn write's location record with its delta.
    let version = |node: usize| {
        let store = lock(&nodes[node].store);
        (1..4u8)
            .find_map(|p| store.get_latest(0, p, &keys[0]))
            .and_then(|rec| crate::record::parse_header(rec).ok())
            .map(|(h, _)| h.version)
    };
    assert_eq!(version(2), version(3));
    restart_empty(&hub, &mut nodes, 1, 0);
    let rebuilt = with_heartbeats(&nodes, || nodes[1].rebuild_pages());
    assert!(rebuilt.is_ok(), "{rebuilt:?}");
    check_parity(&nodes);
    hub.clear();
}

/// A touch while a parity position of a whole value's page is cut off leaves that position's
/// location record with the old expiry: the agent marks the position a hole, and once the
/// node is back hole filling writes the record again with the new expiry. Before that, an
/// index rebuilt from the records takes the sooner expiry of the two (the value may lapse
/// early, never late); after it, the touched one.
#[test]
fn a_touch_a_parity_position_missed_is_written_there_once_it_is_back() {
    let (hub, nodes) = cluster(Layout::Whole);
    let key = keys_of(&nodes, 0, "t", 1).remove(0);
    let res = nodes[0].route_key(
        AgentOp::Store {
            mode: proto::StoreMode::Set,
            key: key.clone(),
            flags: 3,
            exptime: 500,
            compare_cas: None,
            value: vec![5; 600],
            once: Once::first(nodes[0].next_request_id()),
        },
        &key,
    );
    stored(res);
    let e = nodes[0].lookup(0, &key).expect("stored");
    assert_eq!(e.kind, crate::record::Kind::Whole);
    let at = e.whole_at.expect("whole at its home");
    let (k, n) = (nodes[0].k(), nodes[0].n());
    let (_, d, _) = whole::page_of(0, at.page, k, NODES);
    let parity: Vec<usize> = (k - d..n - d).collect();
    let p = parity[0];
    let member = nodes[0].placement.node_of(0, p);
    let expiry_at = |node: usize, p: usize| {
        let store = lock(&nodes[node].store);
        let bytes = store
            .get(0, p as u8, &key, e.version)
            .expect("a location record");
        crate::record::parse(bytes).expect("a record").0.exptime
    };
    assert_eq!(expiry_at(member, p), e.exptime);
    let touched = super::cluster_tests::touch_while_cut_off(&hub, &nodes, member, &key);
    assert!(touched.exptime > e.exptime + 400);
    assert_eq!(touched.holes, 1 << p, "the cut-off position is a hole");
    assert_eq!(expiry_at(member, p), e.exptime, "missed while cut off");
    for &q in &parity[1..] {
        let other = nodes[0].placement.node_of(0, q);
        assert_eq!(expiry_at(other, q), touched.exptime, "position {q}");
    }
    hub.heal();
    rounds(&nodes);
    let rebuilt = nodes[0].rebuild_index(0);
    assert_eq!(
        rebuilt.get(&key).map(|e| e.exptime),
        Some(e.exptime),
        "the sooner expiry while the records disagree"
    );
    assert!(nodes[0].fill_holes(u64::MAX) > 0);
    assert_eq!(expiry_at(member, p), touched.exptime);
    assert_eq!(nodes[0].lookup(0, &key).expect("there").holes, 0);
    let rebuilt = nodes[0].rebuild_index(0);
    assert_eq!(rebuilt.get(&key).map(|e| e.exptime), Some(touched.exptime));
    expect_value(get(&nodes[3], &key), &[5; 600], "read after the fill");
    hub.clear();
}
