//! Nodes in one process, with peers played by a transport that answers from a script.

use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::{ExecMode, Node, NodeConfig};
use crate::agent::{LoopWriteStart, StoreIf};
use crate::carrier::peer::{
    AgentOp, AgentResult, ArithMeta, Attempt, Once, PeerError, PeerTransport, Request, Response,
};
use crate::member::store::ChunkStore;

/// Peers that grant every heartbeat and store the records they are sent (a chunk store each,
/// answering `Put`, `Get`, `Delete` and `List` as a member does); those in `silent` send no
/// reply to a `List` (cut off since their heartbeats were answered), those in `unheard` answer
/// it with something else (left out of the rebuild, though nothing marks them down).
#[derive(Debug)]
pub(crate) struct Granting {
    pub silent: Vec<usize>,
    pub unheard: Vec<usize>,
    pub stores: Mutex<HashMap<usize, ChunkStore>>,
    /// Per node, the (incarnation, up for ms) its heartbeat answers give, if not (1, an hour).
    pub beats: Mutex<HashMap<usize, (u64, u64)>>,
}

impl PeerTransport for Granting {
    fn call_many(&self, calls: Vec<(usize, Request)>) -> Vec<Result<Response, PeerError>> {
        calls
            .into_iter()
            .map(|(node, r)| match r {
                Request::Heartbeat { .. } => {
                    let beats = self.beats.lock().unwrap();
                    let (incarnation, up_for_ms) =
                        beats.get(&node).copied().unwrap_or((1, 3_600_000));
                    Ok(Response::Heartbeat {
                        incarnation,
                        ready: true,
                        grant: true,
                        up_for_ms,
                        exempt: Vec::new(),
                    })
                }
                Request::List { .. } if self.silent.contains(&node) => Err(PeerError::NoReply {
                    node,
                    source: std::io::ErrorKind::TimedOut.into(),
                }),
                Request::List { .. } if self.unheard.contains(&node) => Ok(Response::Ack),
                r => {
                    let mut stores = self.stores.lock().unwrap();
                    Ok(crate::member::handler::answer_chunk(
                        stores.entry(node).or_default(),
                        r,
                    ))
                }
            })
            .collect()
    }

    fn data_messages(&self) -> (u64, u64) {
        (0, 0)
    }
}

/// Node 0 of three (rs:2,1: one position per node), leading stripe 0: every peer granted it
/// (a lease term is 10 s), and it started long enough ago to vote for itself.
pub(crate) fn leading_node(silent: &[usize]) -> Node {
    leading_node_with(silent, &[])
}

/// [`leading_node`] whose members `unheard` answer a `List` with something else.
pub(crate) fn leading_node_with(silent: &[usize], unheard: &[usize]) -> Node {
    leading_node_and_peers(silent, unheard).0
}

/// [`leading_node_with`], with the transport that plays its peers.
fn leading_node_and_peers(silent: &[usize], unheard: &[usize]) -> (Node, Arc<Granting>) {
    let term = TERM;
    let cfg = config(0);
    let peers = Arc::new(Granting {
        silent: silent.to_vec(),
        unheard: unheard.to_vec(),
        stores: Mutex::new(HashMap::new()),
        beats: Mutex::new(HashMap::new()),
    });
    let mut node = Node::new(cfg, peers.clone(), peers.clone());
    node.started = Instant::now()
        .checked_sub(2 * term)
        .expect("the clock has run for 20 s");
    node.heartbeat_round();
    (node, peers)
}

/// Member `m` answers that it has seen `node` up only since now: it saw it down before, and
/// may have voted for another leader meanwhile.
pub(crate) fn lapse_lease(node: &Node, m: usize) {
    super::lock(&node.peers).leases[m].sees_us_up_since = Some(Instant::now());
}

/// The lease term (down-after time) of the test nodes.
pub(crate) const TERM: Duration = Duration::from_secs(10);

/// Node `id` of three, rs:2,1 (one position per node; values under 16 bytes replicated on two
/// positions), with a lease term of [`TERM`].
pub(crate) fn config(id: usize) -> NodeConfig {
    NodeConfig {
        id,
        node_count: 3,
        code: "rs:2,1".parse().expect("code"),
        scheme: graph::Scheme::Rs,
        mode: ExecMode::Coherent,
        memory_bytes: 64 << 20,
        replicate_below_bytes: 16,
        heartbeat: Duration::from_millis(100),
        down_after: TERM,
        recover: false,
        recovery_bytes_per_s: 1 << 20,
        debug_commands: false,
        item_size_max_bytes: 1 << 20,
        layout: crate::agent::whole::Layout::Split,
        whole_below_bytes: 65536,
        page_bytes: 1 << 20,
        slab_growth: crate::member::whole::GROWTH,
        whole_repair: crate::agent::whole::WholeRepair::Direct,
    }
}

/// A key of stripe 0.
pub(crate) fn key_of_stripe_0(node: &Node) -> Vec<u8> {
    (0..)
        .map(|i| format!("k{i}").into_bytes())
        .find(|k| node.placement.stripe_of(k) == 0)
        .expect("a key of stripe 0")
}

pub(crate) fn get(node: &Node, key: &[u8]) -> AgentResult {
    node.agent(AgentOp::Get {
        key: key.to_vec(),
        touch: None,
        degrade: None,
    })
}

#[test]
fn a_node_with_every_member_answering_builds_its_index_and_serves() {
    let node = leading_node(&[]);
    let key = key_of_stripe_0(&node);
    assert_eq!(get(&node, &key), AgentResult::Miss);
    assert!(node.stripes[0].lock().unwrap().is_some());
}

/// The members seen up when the operation began, two of them (more than m = 1 positions) do not
/// answer the rebuild's `List`: an index built from the rest would miss every coded value with
/// fewer than k chunks there, and answer misses for values that exist (`inec nemesis` found a
/// value acknowledged before a partition of four nodes answered as a miss once it healed: the
/// index was rebuilt, mid-operation, from the five nodes on the agent's side). The operation
/// answers that the stripe is unavailable, and no index is kept.
#[test]
fn an_index_rebuilt_without_enough_members_is_not_kept() {
    let node = leading_node(&[1, 2]);
    let key = key_of_stripe_0(&node);
    match get(&node, &key) {
        AgentResult::Error(e) => assert!(e.contains("unavailable"), "{e}"),
        other => panic!("answered {other:?} from an index missing two members' records"),
    }
    assert!(node.stripes[0].lock().unwrap().is_none(), "no index kept");
    assert_eq!(node.counters.index_rebuilds.load(Ordering::Relaxed), 1);
    // The rebuild was timed (rounded up to a microsecond), and it was the only one, so the
    // last, the longest and the total are the same.
    let us = |c: &std::sync::atomic::AtomicU64| c.load(Ordering::Relaxed);
    let c = &node.counters;
    assert!(us(&c.index_rebuild_us_last) > 0, "the rebuild was timed");
    assert_eq!(us(&c.index_rebuild_us_max), us(&c.index_rebuild_us_last));
    assert_eq!(us(&c.index_rebuild_us_total), us(&c.index_rebuild_us_last));
}

/// Two members (more than m = 1) are left out of the rebuild though this node sees them up when
/// it checks (in a cluster: they were down when the `List`s went out and came back up while the
/// others answered). The index lacks what only they could complete and must not be kept: `inec
/// nemesis` found an index rebuilt from the five nodes on the agent's side of a cut of four kept
/// once one of the four came back, and a value acknowledged before the cut answered as a miss.
#[test]
fn an_index_rebuilt_without_enough_members_heard_is_not_kept_even_if_they_are_up_now() {
    let node = leading_node_with(&[], &[1, 2]);
    let key = key_of_stripe_0(&node);
    assert!(node.is_up(1) && node.is_up(2));
    assert_ne!(get(&node, &key), AgentResult::Miss);
    assert!(node.stripes[0].lock().unwrap().is_none(), "no index kept");
    // One left out is within the code's tolerance: the index is kept.
    let node = leading_node_with(&[], &[2]);
    assert_eq!(get(&node, &key), AgentResult::Miss);
    assert!(node.stripes[0].lock().unwrap().is_some());
}

fn set(node: &Node, key: &[u8], value: &[u8], once: Once) -> AgentResult {
    node.agent(AgentOp::Store {
        mode: proto::StoreMode::Set,
        key: key.to_vec(),
        flags: 0,
        exptime: 0,
        compare_cas: None,
        value: value.to_vec(),
        once,
    })
}

fn incr(node: &Node, key: &[u8], delta: u64, once: Once) -> AgentResult {
    node.agent(AgentOp::Arith {
        incr: true,
        key: key.to_vec(),
        delta,
        once,
        meta: ArithMeta::default(),
    })
}

fn retry(id: u64) -> Once {
    Once {
        id,
        attempt: Attempt::Retry,
    }
}

fn value_of(node: &Node, key: &[u8]) -> (Vec<u8>, u64) {
    match get(node, key) {
        AgentResult::Value { value, cas, .. } => (value, cas),
        other => panic!("read {other:?}"),
    }
}

/// `ma`'s additions to an arithmetic at the agent: a miss created with `N` (answered with its
/// initial number, not counted), `C` compared, `T` setting the TTL of a hit and of an item `N`
/// creates; and a retry of a decrement that left a padded value (`99 `) answered its number.
#[test]
fn a_meta_arithmetic_creates_compares_and_sets_the_ttl() {
    let node = leading_node(&[]);
    let key = key_of_stripe_0(&node);
    let ma = |incr, delta, once, meta| {
        node.agent(AgentOp::Arith {
            incr,
            key: key.clone(),
            delta,
            once,
            meta,
        })
    };
    let none = ArithMeta::default();
    assert_eq!(ma(true, 1, Once::first(1), none), AgentResult::NotFound);
    let vivify = ArithMeta {
        vivify: Some((0, 100)),
        ..none
    };
    let AgentResult::Number {
        number: 100,
        cas,
        exptime: 0,
    } = ma(true, 1, Once::first(2), vivify)
    else {
        panic!("not created holding 100");
    };
    assert_eq!(value_of(&node, &key), (b"100".to_vec(), cas));
    let compare = |c| ArithMeta {
        compare_cas: Some(c),
        ..none
    };
    assert_eq!(
        ma(true, 1, Once::first(3), compare(cas + 1)),
        AgentResult::Exists
    );
    assert_eq!(value_of(&node, &key).0, b"100");
    let AgentResult::Number { number: 99, .. } = ma(false, 1, Once::first(4), compare(cas)) else {
        panic!("decr of 100 with its cas");
    };
    let (value, cas) = value_of(&node, &key);
    assert_eq!(value, b"99 ");
    assert_eq!(
        ma(false, 1, retry(4), none),
        AgentResult::Number {
            number: 99,
            cas,
            exptime: 0
        },
        "a retry answers the padded number it left"
    );
    let ttl = ArithMeta {
        ttl: Some(1000),
        ..none
    };
    let AgentResult::Number {
        number: 100,
        exptime,
        ..
    } = ma(true, 1, Once::first(5), ttl)
    else {
        panic!("incr with a TTL");
    };
    let now = crate::time::now_secs();
    assert!(
        (now + 999..=now + 1000).contains(&exptime),
        "{exptime} at {now}"
    );
    // A TTL already past: answered, and the key is gone.
    let past = ArithMeta {
        ttl: Some(-1),
        ..none
    };
    let AgentResult::Number { number: 101, .. } = ma(true, 1, Once::first(6), past) else {
        panic!("incr with a past TTL");
    };
    assert_eq!(get(&node, &key), AgentResult::Miss);
}

/// A write tried again after a try whose fate is unknown (`agent::once`): answered from what
/// the first try did while the key's trail shows its id, refused while it does not, never
/// applied a second time.
#[test]
fn a_retried_write_is_answered_from_what_it_did_and_never_applied_twice() {
    let node = leading_node(&[]);
    let key = key_of_stripe_0(&node);
    assert!(matches!(
        set(&node, &key, b"10", Once::first(1)),
        AgentResult::Stored { .. }
    ));
    let AgentResult::Number {
        number: 15, cas, ..
    } = incr(&node, &key, 5, Once::first(100))
    else {
        panic!("incr of 10 by 5");
    };
    // The retry answers the number the first try left, with its version: counted once.
    assert_eq!(
        incr(&node, &key, 5, retry(100)),
        AgentResult::Number {
            number: 15,
            cas,
            exptime: 0
        }
    );
    assert_eq!(value_of(&node, &key), (b"15".to_vec(), cas));
    // A retry of a write the records do not show is refused as in doubt, and changes nothing.
    match set(&node, &key, b"x", retry(200)) {
        AgentResult::Error(e) => assert!(e.contains("may or may not have been applied"), "{e}"),
        other => panic!("an unknown retry answered {other:?}"),
    }
    assert_eq!(value_of(&node, &key), (b"15".to_vec(), cas));
    // Replaced by later writes: a store's retry is answered stored, an incr's result is gone.
    assert!(matches!(
        set(&node, &key, b"a", Once::first(101)),
        AgentResult::Stored { .. }
    ));
    assert!(matches!(
        set(&node, &key, b"b", Once::first(102)),
        AgentResult::Stored { .. }
    ));
    assert_eq!(
        set(&node, &key, b"a", retry(101)),
        AgentResult::Stored { cas: 0 }
    );
    match incr(&node, &key, 5, retry(100)) {
        AgentResult::Error(e) => assert!(e.contains("no longer known"), "{e}"),
        other => panic!("a replaced incr's retry answered {other:?}"),
    }
    assert_eq!(value_of(&node, &key).0, b"b");
    let c = &node.counters;
    assert_eq!(c.retries_answered.load(Ordering::Relaxed), 3);
    assert_eq!(c.retries_in_doubt.load(Ordering::Relaxed), 1);
    // A rerun is written anew in the index it was given up in, and refused in any other.
    let epoch = node.stripes[0].lock().unwrap().as_ref().unwrap().epoch;
    let rerun = |id, epoch| Once {
        id,
        attempt: Attempt::Rerun { epoch },
    };
    assert!(matches!(
        set(&node, &key, b"c", rerun(103, epoch + 1000)),
        AgentResult::Error(_)
    ));
    assert_eq!(value_of(&node, &key).0, b"b");
    assert!(matches!(
        set(&node, &key, b"c", rerun(103, epoch)),
        AgentResult::Stored { .. }
    ));
    assert_eq!(value_of(&node, &key).0, b"c");
}

/// A member that restarted forgot what it saw of the agent: its grant says it has seen the
/// agent up only since it started. The agent's own run of its lease (`lease::Run`) answers for
/// that time, so its index stays, unless the run broke since the index was built. A member that
/// did not restart and saw it down still makes it rebuild; a break in the run alone, with every
/// member vouching, does not (no member saw it down, so none voted for another leader).
#[test]
fn a_member_that_restarted_leaves_the_index_unless_the_run_broke() {
    let (node, peers) = leading_node_and_peers(&[], &[]);
    let key = key_of_stripe_0(&node);
    assert!(matches!(
        set(&node, &key, b"v1", Once::first(1)),
        AgentResult::Stored { .. }
    ));
    let rebuilds = || node.counters.index_rebuilds.load(Ordering::Relaxed);
    // The grants the agent counted run out before it checks again, then come back.
    let break_the_run = || {
        {
            let mut p = super::lock(&node.peers);
            for m in [1, 2] {
                p.leases[m].grant_from = Instant::now().checked_sub(2 * TERM);
            }
        }
        // (Checked in full: a yes reused from before would not outlive those grants, whose
        // times this test moves back.)
        assert!(!node.leads_checked(0, Instant::now()), "the grants ran out");
        node.heartbeat_round();
        assert!(node.leads(0));
    };
    let before = rebuilds();
    // Member 1 restarted: a new incarnation, up for nothing yet.
    peers.beats.lock().unwrap().insert(1, (2, 0));
    node.heartbeat_round();
    assert!(node.leads(0));
    assert_eq!(value_of(&node, &key).0, b"v1");
    assert_eq!(rebuilds(), before, "a restarted member left the index");
    // Member 2, the same process as before, saw the agent down since the index was built.
    peers.beats.lock().unwrap().insert(2, (1, 0));
    node.heartbeat_round();
    assert_eq!(value_of(&node, &key).0, b"v1");
    assert_eq!(rebuilds(), before + 1, "a member that saw it down");
    // A break in the run, every member vouching (member 1's incarnation as before).
    peers.beats.lock().unwrap().clear();
    peers.beats.lock().unwrap().insert(1, (2, 3_600_000));
    node.heartbeat_round();
    break_the_run();
    assert_eq!(value_of(&node, &key).0, b"v1");
    assert_eq!(rebuilds(), before + 1, "a break alone");
    // Member 1 restarts again and the run breaks: nothing answers for the time between.
    peers.beats.lock().unwrap().insert(1, (3, 0));
    node.heartbeat_round();
    break_the_run();
    assert_eq!(value_of(&node, &key).0, b"v1");
    assert_eq!(rebuilds(), before + 2, "a restart across a break");
}

/// A yes of `leads` is reused for a moment (`LEADS_REUSE`), never past the promises its full
/// check counted, and not at all after a handover.
#[test]
fn a_reused_lead_ends_with_its_promises_and_at_a_handover() {
    let node = leading_node(&[]);
    let now = Instant::now();
    // Both members' promises end 300 µs after `now`, well within `LEADS_REUSE`.
    let end = now + Duration::from_micros(300);
    {
        let mut p = super::lock(&node.peers);
        for m in [1, 2] {
            p.leases[m].grant_from = end.checked_sub(TERM);
        }
    }
    assert!(node.leads_checked(0, now));
    let reused_until = node.leads_until[0].load(Ordering::Acquire);
    let end_ns = end.duration_since(node.started).as_nanos() as u64;
    assert_eq!(reused_until, end_ns, "reused until the promises end");
    std::thread::sleep(Duration::from_micros(400));
    assert!(!node.leads(0), "the promises it counted ended");
    // Granted again; a yes just checked, then the stripe handed to node 1.
    node.heartbeat_round();
    assert!(node.leads(0));
    assert!(
        node.leads_until[0].load(Ordering::Acquire) > 0,
        "a yes to reuse"
    );
    assert_eq!(
        node.agent(AgentOp::Handover { stripe: 0, to: 1 }),
        AgentResult::Ok
    );
    assert!(!node.leads(0), "handed over");
}

/// The ids travel in the records: an index rebuilt from them (here after a lease lapse, as a
/// new agent would after a takeover) answers a retry from what the first try did.
#[test]
fn an_index_rebuilt_from_the_records_answers_a_retry_from_them() {
    let node = leading_node(&[]);
    let key = key_of_stripe_0(&node);
    assert!(matches!(
        set(&node, &key, b"41", Once::first(1)),
        AgentResult::Stored { .. }
    ));
    let AgentResult::Number {
        number: 42, cas, ..
    } = incr(&node, &key, 1, Once::first(7))
    else {
        panic!("incr of 41");
    };
    let rebuilds = node.counters.index_rebuilds.load(Ordering::Relaxed);
    lapse_lease(&node, 1);
    assert_eq!(
        incr(&node, &key, 1, retry(7)),
        AgentResult::Number {
            number: 42,
            cas,
            exptime: 0
        }
    );
    assert_eq!(
        node.counters.index_rebuilds.load(Ordering::Relaxed),
        rebuilds + 1,
        "the retry ran on a rebuilt index"
    );
    assert_eq!(value_of(&node, &key), (b"42".to_vec(), cas));
}

/// Sends a write the loop began its records, as the loop does, and checks every member
/// stored its own.
fn send_records(node: &Node, write: &mut crate::agent::LoopWrite) {
    let puts = write
        .remote
        .clone()
        .iter()
        .map(|&(member, p)| (member, write.request(p)))
        .collect();
    assert!(node
        .call(puts)
        .iter()
        .all(|r| matches!(r, Ok(Response::Ack))));
}

/// The `set` that `inec nemesis` found applied as two versions: run on the event loop, its
/// records reached the members, the loop gave it up (a member's ack late) and handed it to a
/// worker to write again (the agent had led throughout); before the worker ran, the lease
/// lapsed and the rebuilt index adopted the given-up version. The worker's rerun must answer
/// from that version, not write a second one.
#[test]
fn a_loop_write_given_up_and_adopted_by_a_rebuild_is_not_written_again() {
    let node = leading_node(&[]);
    let key = key_of_stripe_0(&node);
    assert_eq!(get(&node, &key), AgentResult::Miss);
    let value = vec![9u8; 100];
    let LoopWriteStart::Send(mut write) =
        node.loop_write_start(&key, StoreIf::SET, 0, 0, &value, 500)
    else {
        panic!("a coded set of a leading node with every member up runs on the loop");
    };
    let version = write.version();
    send_records(&node, &mut write);
    // No ack reached the loop in time: given up, to be run again by a worker.
    assert!(node.loop_write_may_rerun(&write));
    let once = write.rerun_once();
    assert!(matches!(once.attempt, Attempt::Rerun { .. }));
    node.loop_write_abandon(*write);
    lapse_lease(&node, 1);
    assert_eq!(
        set(&node, &key, &value, once),
        AgentResult::Stored { cas: version }
    );
    assert_eq!(value_of(&node, &key), (value, version), "one version");
    assert_eq!(node.counters.retries_answered.load(Ordering::Relaxed), 1);
}

/// `inec nemesis` found a `set` applied twice: the agent's event loop ran a forwarded `set`,
/// its records were stored, the agent stalled; the stand-in adopted the records; when the
/// agent resumed, it had lost the stripe and its peer worker answered the later try of the
/// write "not agent", which tells the front that nothing was applied, and the front sent the
/// `set` to the stand-in as a first try, which applied it again over later writes. A later
/// try of a write that this node's loop tried first is answered as in doubt instead.
#[test]
fn a_write_tried_on_the_loop_is_never_answered_not_agent_by_its_later_try() {
    let node = leading_node(&[]);
    // A key of a stripe node 0 does not lead (node 1 is up: it leads stripe 1).
    let key = (0..)
        .map(|i| format!("k{i}").into_bytes())
        .find(|k| node.placement.stripe_of(k) == 1)
        .expect("a key of stripe 1");
    let request = |attempt| {
        Request::Agent(AgentOp::Store {
            mode: proto::StoreMode::Set,
            key: key.clone(),
            flags: 0,
            exptime: 0,
            compare_cas: None,
            value: b"v".to_vec(),
            once: Once { id: 5, attempt },
        })
    };
    let answer = |attempt, tried_here| {
        let out = crate::member::conn::run_job(
            &node,
            crate::member::conn::PeerJob {
                token: mio::Token(0),
                request: request(attempt),
                tried_here,
            },
        );
        crate::carrier::peer::decode_response(&out[4..]).expect("a framed reply")
    };
    let rerun = Attempt::Rerun { epoch: 1 };
    match answer(rerun, true) {
        Response::Agent(AgentResult::Error(e)) => {
            assert!(e.contains("may or may not have been applied"), "{e}")
        }
        other => panic!("a later try after one on the loop answered {other:?}"),
    }
    match answer(Attempt::Retry, true) {
        Response::Agent(AgentResult::Error(e)) => {
            assert!(e.contains("may or may not have been applied"), "{e}")
        }
        other => panic!("a later try after one on the loop answered {other:?}"),
    }
    // Not tried here, or a first try: "not agent" is true (nothing was applied here), and the
    // front may try the next agent.
    assert_eq!(
        answer(Attempt::Retry, false),
        Response::Agent(AgentResult::NotAgent)
    );
    assert_eq!(
        answer(Attempt::First, true),
        Response::Agent(AgentResult::NotAgent)
    );
}

/// `add`, `replace` and `cas` run on the loop as a `set` does, their condition decided on the
/// agent's index: a refusal is answered at once with nothing stored, a write
/// that proceeds stores its records like a `set`; `append` and `prepend` go to a worker.
#[test]
fn conditional_writes_are_decided_on_the_loop() {
    use crate::semantics::Decision;
    use proto::StoreMode::{Add, Append, Cas, Prepend, Replace};
    let node = leading_node(&[]);
    let key = key_of_stripe_0(&node);
    assert_eq!(get(&node, &key), AgentResult::Miss);
    let cond = |mode, compare_cas| StoreIf { mode, compare_cas };
    // Runs a write the loop began to its end, as the loop does with the members' acks.
    let finish = |start: LoopWriteStart| -> u64 {
        let LoopWriteStart::Send(mut write) = start else {
            panic!("the write proceeds on the loop: {start:?}");
        };
        assert!(
            !write.remote.is_empty(),
            "its records go to the other members"
        );
        send_records(&node, &mut write);
        node.loop_write_finish(*write).expect("still the agent")
    };
    let start = |c: StoreIf, value: &[u8], id: u64| node.loop_write_start(&key, c, 0, 0, value, id);
    let refused = |s: LoopWriteStart| match s {
        LoopWriteStart::Refused(d) => d,
        other => panic!("refused on the loop, not {other:?}"),
    };
    // A missing key: replace and cas refused, add stored.
    assert_eq!(
        refused(start(cond(Replace, None), b"r", 1)),
        Decision::NotStored
    );
    assert_eq!(
        refused(start(cond(Cas, Some(1)), b"c", 2)),
        Decision::NotFound
    );
    assert_eq!(get(&node, &key), AgentResult::Miss);
    let added = finish(start(cond(Add, None), b"added", 3));
    assert_eq!(value_of(&node, &key), (b"added".to_vec(), added));
    // A present key: add refused, cas with another value refused, replace and cas stored.
    assert_eq!(
        refused(start(cond(Add, None), b"a", 4)),
        Decision::NotStored
    );
    assert_eq!(
        refused(start(cond(Cas, Some(added + 1)), b"c", 5)),
        Decision::Exists
    );
    assert_eq!(
        value_of(&node, &key),
        (b"added".to_vec(), added),
        "unchanged"
    );
    let replaced = finish(start(cond(Replace, None), b"replaced", 6));
    assert!(replaced > added);
    let swapped = finish(start(cond(Cas, Some(replaced)), b"swapped", 7));
    assert_eq!(value_of(&node, &key), (b"swapped".to_vec(), swapped));
    // The CAS value the client held before the last write no longer matches.
    assert_eq!(
        refused(start(cond(Cas, Some(replaced)), b"late", 8)),
        Decision::Exists
    );
    for mode in [Append, Prepend] {
        assert!(matches!(
            start(cond(mode, None), b"+", 9),
            LoopWriteStart::Worker
        ));
    }
    assert_eq!(value_of(&node, &key), (b"swapped".to_vec(), swapped));
}

/// `incr`, `decr`, `append` and `prepend` of a value this node holds whole (here a replica)
/// run on the loop: read from its own store under the key's lock, changed, and written as a
/// `set` is; a missing key, a value that is not a number, and a value this node does not hold
/// whole (coded) are told apart.
#[test]
fn modifications_of_a_value_held_here_run_on_the_loop() {
    use crate::agent::{LoopModifyStart, Modify};
    let node = leading_node(&[]);
    let key = key_of_stripe_0(&node);
    // Runs a write the loop began to its end, as the loop does with the members' acks.
    let finish = |start: LoopModifyStart| -> (Option<(bool, u64)>, u64) {
        let LoopModifyStart::Send(mut write) = start else {
            panic!("the change is written on the loop: {start:?}");
        };
        let number = write.number();
        send_records(&node, &mut write);
        (
            number,
            node.loop_write_finish(*write).expect("still the agent"),
        )
    };
    let start = |m: Modify<'_>, id: u64| node.loop_modify_start(&key, m, id);
    let meta = ArithMeta::default();
    let incr = |delta| Modify::Arith {
        incr: true,
        delta,
        meta,
    };
    let decr = |delta| Modify::Arith {
        incr: false,
        delta,
        meta,
    };
    let append = |data| Modify::Concat {
        prepend: false,
        data,
    };
    let prepend = |data| Modify::Concat {
        prepend: true,
        data,
    };
    assert_eq!(get(&node, &key), AgentResult::Miss, "the index is built");
    assert!(matches!(start(incr(1), 1), LoopModifyStart::Missing));
    assert!(matches!(start(append(b"x"), 2), LoopModifyStart::Missing));
    assert!(matches!(
        set(&node, &key, b"41", Once::first(3)),
        AgentResult::Stored { .. }
    ));
    let (number, cas) = finish(start(incr(1), 4));
    assert_eq!(number, Some((true, 42)));
    assert_eq!(value_of(&node, &key), (b"42".to_vec(), cas));
    let (number, _) = finish(start(decr(50), 5));
    // memcached's decr stops at 0 and keeps the value's length (space-padded).
    assert_eq!(number, Some((false, 0)));
    assert_eq!(value_of(&node, &key).0, b"0 ");
    let (number, cas) = finish(start(append(b"7"), 6));
    assert_eq!(number, None);
    assert_eq!(value_of(&node, &key), (b"0 7".to_vec(), cas));
    let (_, cas) = finish(start(prepend(b"x"), 7));
    assert_eq!(value_of(&node, &key), (b"x0 7".to_vec(), cas));
    assert!(matches!(start(incr(1), 8), LoopModifyStart::NonNumeric));
    assert_eq!(value_of(&node, &key), (b"x0 7".to_vec(), cas), "unchanged");
    // A coded value (16 bytes and more) is not held whole here: the loop reads its other data
    // chunk first (position 1's member), the key's lock held meanwhile, and freed if the
    // change is dropped.
    assert!(matches!(
        set(&node, &key, &[b'1'; 20], Once::first(9)),
        AgentResult::Stored { .. }
    ));
    let LoopModifyStart::Fetch(fetch) = start(incr(1), 10) else {
        panic!("a coded value's change starts with its chunks read");
    };
    assert_eq!(fetch.read.remote, vec![(node.placement.node_of(0, 1), 1)]);
    assert!(
        matches!(start(incr(1), 11), LoopModifyStart::Worker),
        "the lock is held"
    );
    drop(fetch);
    assert!(matches!(start(incr(1), 12), LoopModifyStart::Fetch(_)));
}

/// Heartbeat peers for short lease terms: those in `answering` grant at once, and their
/// answers are handed over early; the others are silent, and their requests fail only once
/// the round's `hold` has passed (a call waiting for its deadline).
#[derive(Debug)]
struct Held {
    answering: Vec<usize>,
    hold: Duration,
}

impl PeerTransport for Held {
    fn call_many(&self, calls: Vec<(usize, Request)>) -> Vec<Result<Response, PeerError>> {
        self.call_many_early(calls, &mut |_, _| {})
    }

    fn call_many_early(
        &self,
        calls: Vec<(usize, Request)>,
        early: &mut dyn FnMut(usize, &Response),
    ) -> Vec<Result<Response, PeerError>> {
        let replies: Vec<_> = calls
            .iter()
            .map(|&(node, _)| match self.answering.contains(&node) {
                true => Ok(Response::Heartbeat {
                    incarnation: 1,
                    ready: true,
                    grant: true,
                    up_for_ms: 3_600_000,
                    exempt: Vec::new(),
                }),
                false => Err(PeerError::NoReply {
                    node,
                    source: std::io::ErrorKind::TimedOut.into(),
                }),
            })
            .collect();
        for (i, r) in replies.iter().enumerate() {
            if let Ok(r) = r {
                early(i, r);
            }
        }
        std::thread::sleep(self.hold);
        replies
    }

    fn data_messages(&self) -> (u64, u64) {
        (0, 0)
    }
}

/// Node 0 of three with a lease term of `term`, its heartbeats answered by `held`.
fn node_heard_by(term: Duration, held: Held) -> Node {
    let mut cfg = config(0);
    cfg.down_after = term;
    let held = Arc::new(held);
    let mut node = Node::new(cfg, held.clone(), held);
    node.started = Instant::now()
        .checked_sub(2 * term)
        .expect("the clock has run for 2 s");
    node
}

/// One peer silent: each round waits half a term for it, and the other peer's grant, taken
/// as it comes, carries the lease run on. (Taken at the round's end, each grant came after
/// the last one's term had run out, a new run began every round, and a member that had
/// restarted made the agent drop its index as one built before a lapse.)
#[test]
fn a_silent_peer_holding_the_rounds_up_leaves_no_gap_in_the_lease_run() {
    let term = Duration::from_secs(1);
    let node = node_heard_by(
        term,
        Held {
            answering: vec![1],
            hold: term / 2,
        },
    );
    node.heartbeat_round();
    assert!(node.leads(0));
    let run = || super::lock(&node.peers).runs[0].map(|r| r.since);
    let since = run().expect("a run of the lease");
    for round in 0..4 {
        std::thread::sleep(Duration::from_millis(100));
        node.heartbeat_round();
        assert!(node.leads_checked(0, Instant::now()), "round {round}");
        assert_eq!(run(), Some(since), "round {round}: the run went on");
    }
}

/// A round that comes back well after its deadline (this node held up) marks no peer down,
/// unless the peer has been unheard for `HEARD_OF_LATE` terms; a round on time does.
#[test]
fn a_round_held_up_past_its_deadline_marks_no_peer_down() {
    let term = Duration::from_millis(400);
    let unheard_for = |node: &Node, ago: Duration| {
        let mut p = super::lock(&node.peers);
        for i in [1, 2] {
            p.list[i].up = true;
            p.list[i].last_ok = Instant::now().checked_sub(ago).expect("clock");
        }
    };
    let up = |node: &Node| {
        let p = super::lock(&node.peers);
        [p.list[1].up, p.list[2].up]
    };
    // Back after a whole term, though its deadline is half a term.
    let late = node_heard_by(
        term,
        Held {
            answering: vec![],
            hold: term,
        },
    );
    // Unheard for a term before the round, two when it ends.
    unheard_for(&late, term);
    late.heartbeat_round();
    assert_eq!(
        up(&late),
        [true, true],
        "a late round says nothing of its peers"
    );
    unheard_for(&late, term * crate::cluster::view::HEARD_OF_LATE);
    late.heartbeat_round();
    assert_eq!(
        up(&late),
        [false, false],
        "unheard for too long, late or not"
    );
    // On time: unheard for a term is down.
    let on_time = node_heard_by(
        term,
        Held {
            answering: vec![],
            hold: Duration::ZERO,
        },
    );
    unheard_for(&on_time, 2 * term);
    on_time.heartbeat_round();
    assert_eq!(up(&on_time), [false, false]);
}
