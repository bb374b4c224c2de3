//! Three nodes in one process over `carrier::mem`: takeovers at the step a test chooses.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::{Node, NodeParts};
use crate::carrier::mem::MemHub;
use crate::carrier::peer::{AgentOp, AgentResult, ArithMeta, Attempt, Once};
use crate::cluster::coord::mem::{MemCoord, MemHandle};

/// Nodes 0..3 of an rs:2,1 cache (one position per node; values under 16 bytes replicated on
/// two positions), started long enough ago to vote, each having heard the others once.
fn cluster() -> (Arc<MemHub>, Vec<Arc<Node>>) {
    mem_cluster(3, super::tests::config)
}

/// `count` nodes over one `MemHub`, configured by `config`, started long enough ago to vote,
/// each having heard the others once.
pub(super) fn mem_cluster(
    count: usize,
    config: impl Fn(usize) -> super::NodeConfig,
) -> (Arc<MemHub>, Vec<Arc<Node>>) {
    let term = super::tests::TERM;
    let hub = MemHub::new(count);
    let nodes: Vec<Arc<Node>> = (0..count)
        .map(|id| {
            let link = hub.link(id);
            let mut node = Node::new(config(id), link.clone(), link);
            node.started = Instant::now()
                .checked_sub(2 * term)
                .expect("the clock has run for 20 s");
            Arc::new(node)
        })
        .collect();
    for n in &nodes {
        hub.attach(Arc::clone(n));
    }
    rounds(&nodes);
    (hub, nodes)
}

/// A heartbeat round at every node, twice (grants are counted from the round after).
pub(super) fn rounds(nodes: &[Arc<Node>]) {
    for _ in 0..2 {
        for n in nodes {
            n.heartbeat_round();
        }
    }
}

/// A key of stripe 0 (agent node 0, then node 1) whose value is `value`-sized.
fn key(node: &Node, prefix: &str) -> Vec<u8> {
    (0..)
        .map(|i| format!("{prefix}{i}").into_bytes())
        .find(|k| node.placement.stripe_of(k) == 0)
        .expect("a key of stripe 0")
}

fn set(key: &[u8], value: &[u8], once: Once) -> AgentOp {
    AgentOp::Store {
        mode: proto::StoreMode::Set,
        key: key.to_vec(),
        flags: 0,
        exptime: 0,
        compare_cas: None,
        value: value.to_vec(),
        once,
    }
}

fn incr(key: &[u8], once: Once) -> AgentOp {
    AgentOp::Arith {
        incr: true,
        key: key.to_vec(),
        delta: 1,
        once,
        meta: ArithMeta::default(),
    }
}

fn retry(id: u64) -> Once {
    Once {
        id,
        attempt: Attempt::Retry,
    }
}

fn read(node: &Node, key: &[u8]) -> AgentResult {
    node.route(
        0,
        AgentOp::Get {
            key: key.to_vec(),
            touch: None,
            degrade: None,
        },
    )
}

/// The agent applies an `incr` and a coded `set`, then dies before its replies leave (the
/// fronts' tries went unanswered); the successor takes the stripe over and rebuilds its index
/// from the records of the two members left. The fronts' retries are answered from what the
/// first tries did (the records carry their ids): the counter is counted once, the `set` is
/// not written a second time. A retry whose first try never reached the agent is refused as
/// in doubt, and applies nothing.
#[test]
fn a_write_applied_by_an_agent_that_dies_is_answered_by_its_successor_not_applied_again() {
    let (hub, nodes) = cluster();
    let (ctr, reg) = (key(&nodes[0], "ctr"), key(&nodes[0], "reg"));
    let big = vec![5u8; 100];
    assert!(matches!(
        nodes[0].route(0, set(&ctr, b"41", Once::first(1))),
        AgentResult::Stored { .. }
    ));
    let AgentResult::Number {
        number: 42, cas, ..
    } = nodes[0].route(0, incr(&ctr, Once::first(7)))
    else {
        panic!("incr of 41");
    };
    let AgentResult::Stored { cas: reg_cas } = nodes[0].route(0, set(&reg, &big, Once::first(8)))
    else {
        panic!("set of a coded value");
    };
    hub.kill(0);
    rounds(&nodes[1..]);
    assert_eq!(nodes[1].agent_of(0), Some(1), "node 1 took stripe 0 over");
    assert_eq!(
        nodes[1].route(0, incr(&ctr, retry(7))),
        AgentResult::Number {
            number: 42,
            cas,
            exptime: 0
        },
        "the retried incr is answered from its record, not counted twice"
    );
    assert_eq!(
        nodes[1].route(0, set(&reg, &big, retry(8))),
        AgentResult::Stored { cas: reg_cas }
    );
    match nodes[1].route(0, incr(&ctr, retry(9))) {
        AgentResult::Error(e) => assert!(e.contains("may or may not have been applied"), "{e}"),
        other => panic!("a retry no record shows answered {other:?}"),
    }
    // Nothing was applied twice: the counter moves on from 42, the set's version stands.
    assert!(matches!(
        nodes[1].route(0, incr(&ctr, Once::first(10))),
        AgentResult::Number { number: 43, .. }
    ));
    match read(&nodes[2], &reg) {
        AgentResult::Value { value, cas, .. } => assert_eq!((value, cas), (big, reg_cas)),
        other => panic!("read {other:?}"),
    }
    let c = &nodes[1].counters;
    assert_eq!(c.retries_answered.load(Ordering::Relaxed), 2);
    hub.clear();
}

/// Heartbeat rounds at every node every 50 ms, as each node's heartbeat thread runs them, until
/// the returned flag is set.
fn beating(nodes: &[Arc<Node>]) -> (Arc<AtomicBool>, std::thread::JoinHandle<()>) {
    let stop = Arc::new(AtomicBool::new(false));
    let (nodes, flag) = (nodes.to_vec(), Arc::clone(&stop));
    let beats = std::thread::spawn(move || {
        while !flag.load(Ordering::Relaxed) {
            for n in &nodes {
                n.heartbeat_round();
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    });
    (stop, beats)
}

/// A front forwards an `incr` and a `set` to the key's agent, which applies them; their replies
/// are lost on the way back (the front marks the agent down, and the next heartbeat brings it
/// back). The front tries each again as a retry (`Node::route`), which the agent answers from
/// the key's records: the front's client sees the number the one increment left, and the
/// counter moved once.
#[test]
fn a_front_whose_reply_was_lost_retries_and_is_answered_without_a_second_apply() {
    let (hub, nodes) = cluster();
    let (stop, beats) = beating(&nodes);
    let ctr = key(&nodes[0], "ctr");
    assert!(matches!(
        nodes[2].route(0, set(&ctr, b"7", Once::first(1))),
        AgentResult::Stored { .. }
    ));
    hub.lose_replies(2, 0, 1);
    let AgentResult::Number { number: 8, cas, .. } = nodes[2].route(0, incr(&ctr, Once::first(2)))
    else {
        panic!("the retried incr of 7 answers 8");
    };
    hub.lose_replies(2, 0, 1);
    assert!(matches!(
        nodes[2].route(0, set(&ctr, b"100", Once::first(3))),
        AgentResult::Stored { .. }
    ));
    assert!(matches!(
        nodes[2].route(0, incr(&ctr, Once::first(4))),
        AgentResult::Number { number: 101, .. }
    ));
    assert!(cas > 0);
    let c = &nodes[0].counters;
    assert_eq!(c.retries_answered.load(Ordering::Relaxed), 2);
    stop.store(true, Ordering::Relaxed);
    beats.join().unwrap();
    hub.clear();
}

/// Two writes of one key fail in a row once their records are stored (node 2 is cut off and
/// node 1's acks are lost: more positions down than the code tolerates). Each is answered as
/// in doubt and the index serves the version before them again, so the members must still
/// hold that version after the second: a member keeps the record a write replaced only until
/// a newer one comes, and the second failed write came on top of the first. The key reads back
/// as one of its three versions, never as an error, with the nodes healed or not.
#[test]
fn two_failed_writes_in_a_row_keep_the_version_the_index_serves() {
    let (hub, nodes) = cluster();
    for (value, tag) in [(&b"v1"[..], "small"), (&[1u8; 100][..], "coded")] {
        let k = key(&nodes[0], tag);
        assert!(matches!(
            nodes[0].route(0, set(&k, value, Once::first(1))),
            AgentResult::Stored { .. }
        ));
        hub.cut(0, 2);
        for (i, second) in [b"v2", b"v3"].iter().enumerate() {
            nodes[0].mark_down(2);
            // The index still names the first version.
            match read(&nodes[0], &k) {
                AgentResult::Value { value: v, .. } => assert_eq!(v, value, "{tag}"),
                other => panic!("{tag} before write {}: {other:?}", i + 2),
            }
            hub.lose_replies(0, 1, 1);
            let mut other = second.to_vec();
            if value.len() > 16 {
                other.resize(100, b'x');
            }
            let AgentResult::Error(why) =
                nodes[0].route(0, set(&k, &other, Once::first(2 + i as u64)))
            else {
                panic!("write {} of {tag} with two positions down stored", i + 2);
            };
            assert!(
                why.contains("may or may not"),
                "write {} of {tag}: {why}",
                i + 2
            );
            // Node 1 is back at once, in node 0's view only: no heartbeat round runs between
            // the writes (one could take the lease away for a moment, and the index rebuilt
            // then would name the newest version instead).
            super::lock(&nodes[0].peers)[1].up = true;
        }
        nodes[0].mark_down(2);
        let readable = |when: &str| match read(&nodes[0], &k) {
            AgentResult::Value { value: v, .. } => assert!(
                v == value || v.starts_with(b"v2") || v.starts_with(b"v3"),
                "{tag} {when}: {v:?}"
            ),
            other => panic!("{tag} {when}: {other:?}"),
        };
        readable("with node 2 cut off");
        hub.heal();
        rounds(&nodes);
        readable("healed");
    }
    hub.clear();
}

/// The nodes of [`cluster`], led through an in-memory coordinator with etcd's semantics
/// (`cluster::coord`) instead of the majority lease; each node has taken its lease and its
/// own stripe.
fn coordinated() -> (Arc<MemHub>, Arc<MemCoord>, Vec<Arc<Node>>) {
    let hub = MemHub::new(3);
    let coord = Arc::new(MemCoord::default());
    let nodes: Vec<Arc<Node>> = (0..3)
        .map(|id| {
            let link = hub.link(id);
            let parts = NodeParts {
                incarnation: 1 + id as u64,
                store: Arc::new(std::sync::Mutex::new(
                    crate::member::store::ChunkStore::new(),
                )),
                plans: None,
                coordinator: Some(Box::new(MemHandle {
                    hub: Arc::clone(&coord),
                    node: id,
                })),
                loops: Vec::new(),
            };
            Arc::new(Node::with_store(
                super::tests::config(id),
                link.clone(),
                link,
                parts,
            ))
        })
        .collect();
    for n in &nodes {
        hub.attach(Arc::clone(n));
    }
    rounds(&nodes);
    for _ in 0..2 {
        for n in &nodes {
            n.coordinator_round();
        }
    }
    (hub, coord, nodes)
}

/// An agent that still believes it leads after its term ended (stalled past its lease, or a
/// clock that ran slow) cannot read or write behind its successor's back: the successor's new
/// term reached every member when it rebuilt its index, and every member, the old agent's own
/// store included, refuses the old term's chunk requests. Neither a coded nor a replicated
/// value is read stale through it, and its writes are refused, applying nothing.
#[test]
fn an_agent_whose_term_ended_is_fenced_out_by_every_member() {
    let (hub, coord, nodes) = coordinated();
    let (reg, small) = (key(&nodes[0], "reg"), key(&nodes[0], "small"));
    let (v1, v2, v3) = (vec![1u8; 100], vec![2u8; 100], vec![3u8; 100]);
    for (k, v, id) in [(&reg, &v1, 1), (&small, &b"s1".to_vec(), 2)] {
        let r = nodes[0].route(0, set(k, v, Once::first(id)));
        assert!(matches!(r, AgentResult::Stored { .. }), "{r:?}");
    }
    let old = nodes[0].fence(0);
    assert!(old > 0 && nodes[0].leads(0));
    // Node 0's lease ends at the coordinator while node 0, cut from it, hears nothing of it.
    coord.cut(0, true);
    coord.expire_node(0);
    for n in &nodes[1..] {
        n.coordinator_round();
    }
    assert!(nodes[1].leads(0), "node 1 took stripe 0");
    let new = nodes[1].fence(0);
    assert!(new > old, "term {new} after {old}");
    for (k, v, id) in [(&reg, &v2, 3), (&small, &b"s2".to_vec(), 4)] {
        let r = nodes[1].route(0, set(k, v, Once::first(id)));
        assert!(matches!(r, AgentResult::Stored { .. }), "{r:?}");
    }
    // Node 0 still counts its lease alive by its own clock.
    assert!(nodes[0].leads(0));
    for k in [&reg, &small] {
        match read(&nodes[0], k) {
            AgentResult::Value { value, .. } => {
                assert!(
                    value == v2 || value == b"s2",
                    "a stale value through the old agent"
                )
            }
            AgentResult::Error(_) | AgentResult::NotAgent => {}
            other => panic!("read {other:?}"),
        }
    }
    match nodes[0].route(0, set(&reg, &v3, Once::first(5))) {
        AgentResult::Error(e) => assert!(e.contains("fenced out"), "{e}"),
        other => panic!("the old agent's write answered {other:?}"),
    }
    for n in &nodes[1..] {
        match read(n, &reg) {
            AgentResult::Value { value, .. } => assert_eq!(value, v2),
            other => panic!("read {other:?}"),
        }
    }
    let fenced: u64 = nodes.iter().map(|n| n.fenced_out()).sum();
    assert!(fenced >= 3, "requests fenced out: {fenced}");
    hub.clear();
}

/// A stripe handed to a recovered node (`AgentOp::Handover`) is that node's once it holds the
/// stripe's key; when it is later cut from the coordinator alone (the heartbeats still see it
/// up), its lease ends there and the next member takes the stripe over. Before, the hand-over
/// lasted as long as the heartbeats saw the node up, and no one led the stripe.
#[test]
fn a_stripe_handed_back_is_taken_over_again_when_its_agent_loses_the_coordinator() {
    use crate::carrier::peer::{Request, Response};
    let (hub, coord, nodes) = coordinated();
    assert!(nodes[0].leads(0));
    let handed = nodes[1].handle_peer(Request::Agent(AgentOp::Handover { stripe: 0, to: 0 }));
    assert_eq!(handed, Response::Agent(AgentResult::Ok));
    for n in &nodes {
        n.coordinator_round();
    }
    coord.cut(0, true);
    coord.expire_node(0);
    for _ in 0..2 {
        for n in &nodes[1..] {
            n.coordinator_round();
        }
    }
    assert!(nodes[1].leads(0), "node 1 took stripe 0 over");
    let reg = key(&nodes[0], "reg");
    let r = nodes[2].route(0, set(&reg, &[7u8; 100], Once::first(1)));
    assert!(matches!(r, AgentResult::Stored { .. }), "{r:?}");
    hub.clear();
}

/// Node 0 (stripe 0's agent) touches `key` to 1000 s while `member` is cut off from it and
/// seen down; the entry after the touch.
pub(super) fn touch_while_cut_off(
    hub: &MemHub,
    nodes: &[Arc<Node>],
    member: usize,
    key: &[u8],
) -> crate::agent::index::Entry {
    assert_ne!(member, 0);
    hub.cut(0, member);
    nodes[0].mark_down(member);
    let touch = AgentOp::Touch {
        key: key.to_vec(),
        exptime: 1000,
    };
    assert!(matches!(nodes[0].route(0, touch), AgentResult::Touched));
    nodes[0].lookup(0, key).expect("still there")
}

/// A touch while a replica's node is cut off leaves that replica with the old expiry: the
/// agent marks it a hole, and once the node is back hole filling writes the replica again
/// with the new expiry, so an index rebuilt from the records (a takeover) reads the new
/// expiry whichever replica it hears first.
#[test]
fn a_touch_missed_by_a_member_is_written_there_once_it_is_back() {
    let (hub, nodes) = cluster();
    let k = key(&nodes[0], "touched");
    assert!(matches!(
        nodes[0].route(0, set(&k, b"v", Once::first(1))),
        AgentResult::Stored { .. }
    ));
    let e = nodes[0].lookup(0, &k).expect("stored");
    assert_eq!(
        (e.kind, e.positions, e.exptime),
        (crate::record::Kind::Replica, 2, 0)
    );
    let member = nodes[0].placement.node_of(0, 1);
    let touched = touch_while_cut_off(&hub, &nodes, member, &k);
    assert!(touched.exptime > crate::time::now_secs() + 900);
    assert_eq!(touched.holes, 0b10, "the cut-off replica is a hole");
    let expiry_at = |node: &Node| {
        let store = super::lock(&node.store);
        let bytes = store.get(0, 1, &k, e.version).expect("the replica");
        crate::record::parse(bytes).expect("a record").0.exptime
    };
    assert_eq!(expiry_at(&nodes[member]), 0, "missed while cut off");
    hub.heal();
    rounds(&nodes);
    assert!(nodes[0].fill_holes(u64::MAX) > 0);
    assert_eq!(expiry_at(&nodes[member]), touched.exptime);
    assert_eq!(nodes[0].lookup(0, &k).expect("there").holes, 0);
    let rebuilt = nodes[0].rebuild_index(0);
    assert_eq!(rebuilt.get(&k).map(|e| e.exptime), Some(touched.exptime));
    hub.clear();
}

/// A node that wants to grant a peer again after seeing it down first lets its operations
/// under way finish (each key lock free once), and answers the peer's heartbeats at once
/// meanwhile, refusing: an answer held for a lock made the peer see it down.
#[test]
fn a_grant_given_again_waits_for_the_key_locks_without_holding_the_heartbeat() {
    use crate::carrier::peer::Response;
    let (_hub, nodes) = cluster();
    let grant = |r: Response| match r {
        Response::Heartbeat { grant, .. } => grant,
        other => panic!("{other:?}"),
    };
    assert!(grant(nodes[1].heartbeat(0)), "node 1 grants node 0");
    // Node 1 sees node 0 down and refuses it; then sees it up again.
    nodes[1].mark_down(0);
    assert!(!grant(nodes[1].heartbeat(0)));
    nodes[1].heartbeat_round();
    assert!(nodes[1].view()[0].0, "node 1 sees node 0 up again");
    // An operation under way at node 1 (a key lock held, here by the test): node 0 is
    // refused, at once, as long as it is held.
    let held = nodes[1].key_locks.lock(7);
    for _ in 0..3 {
        assert!(
            !grant(nodes[1].heartbeat(0)),
            "granted with an operation under way"
        );
    }
    assert!(
        super::lock(&nodes[1].drains).running,
        "a wait for the locks is under way"
    );
    drop(held);
    let deadline = Instant::now() + Duration::from_secs(10);
    while super::lock(&nodes[1].drains).done_from.is_none() {
        assert!(
            Instant::now() < deadline,
            "the wait for the key locks never ended"
        );
        std::thread::sleep(Duration::from_millis(1));
    }
    assert!(
        grant(nodes[1].heartbeat(0)),
        "granted once every key lock was free"
    );
    // Seen down and up again before node 0 asks (a wait that ended before it was seen down
    // again covers nothing node 1 started meanwhile): refused while a lock is held again.
    nodes[1].mark_down(0);
    nodes[1].heartbeat_round();
    let held = nodes[1].key_locks.lock(9);
    assert!(
        !grant(nodes[1].heartbeat(0)),
        "granted on a wait from before it was down"
    );
    drop(held);
    let deadline = Instant::now() + Duration::from_secs(10);
    while !grant(nodes[1].heartbeat(0)) {
        assert!(Instant::now() < deadline, "never granted again");
        std::thread::sleep(Duration::from_millis(1));
    }
    assert_eq!(super::lock(&nodes[1].drains).wanted[0], None);
    // Seen down and up again with no operation under way: granted at once.
    nodes[1].mark_down(0);
    assert!(!grant(nodes[1].heartbeat(0)));
    nodes[1].heartbeat_round();
    assert!(grant(nodes[1].heartbeat(0)));
}

/// A thread that finds no index while another rebuilds it waits for that rebuild and takes
/// its index, instead of running a rebuild of its own beside it.
#[test]
fn a_thread_that_wants_an_index_being_rebuilt_waits_for_it() {
    let (_hub, nodes) = cluster();
    let n = &nodes[0];
    for i in 0..3 {
        let k = key(n, &format!("rebuilt-{i}-"));
        let r = n.route(0, set(&k, b"value", Once::first(i + 1)));
        assert!(matches!(r, AgentResult::Stored { .. }), "{r:?}");
    }
    *super::lock(&n.stripes[0]) = None;
    let rebuilds = || n.counters.index_rebuilds.load(Ordering::Relaxed);
    let before = rebuilds();
    // The test is the thread rebuilding: it holds the stripe's rebuild while another thread
    // wants the index.
    let rebuilding = super::lock(&n.rebuilding[0]);
    let waiter = {
        let n = Arc::clone(n);
        std::thread::spawn(move || n.with_index(0, |ix| ix.len()))
    };
    std::thread::sleep(Duration::from_millis(100));
    let built = n.rebuild_index(0);
    assert_eq!(built.len(), 3);
    *super::lock(&n.stripes[0]) = Some(built);
    drop(rebuilding);
    assert_eq!(waiter.join().expect("the waiter"), 3);
    assert_eq!(rebuilds() - before, 1, "one rebuild");
}

/// A node's loop hands a stripe's listing (long at scale) over, and answers heartbeats
/// itself.
#[test]
fn a_listing_is_handed_over_and_a_heartbeat_never_is() {
    use crate::carrier::peer::Request;
    let (_hub, nodes) = cluster();
    assert!(nodes[0]
        .handle_peer_now(Request::List { stripe: 0 })
        .is_err());
    assert!(nodes[0]
        .handle_peer_now(Request::Heartbeat { from: 1 })
        .is_ok());
}
