//! One cache node: the member that stores chunk records, the agent of the stripes it leads,
//! the front that routes any key to its agent, liveness and recovery.
//!
//! Locks: `key_locks` (by key hash, held for a whole agent operation, so operations on one key
//! run one at a time in version order) → a stripe's index (held briefly, or for an index
//! rebuild) → the chunk store (held briefly). No lock is held while waiting for this node's
//! own locks from a peer call, so forwarding cannot deadlock.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use codes::{Code, Codec};
use graph::Scheme;

use crate::agent::index::StripeIndex;
use crate::agent::keylock::KeyLocks;
use crate::agent::whole::{Layout, WholeRepair};
use crate::carrier::calls::CallPost;
use crate::carrier::peer::{PeerError, PeerTransport, Request, Response};
use crate::carrier::plans::PlanExec;
use crate::cluster::coord::{Coordinator, Leadership};
use crate::cluster::lease::{self, PeerLease};
use crate::cluster::placement::Placement;
use crate::member::store::ChunkStore;
use crate::time;

/// Execution mode of the data path (docs/engine.md, "Coherent mode" and "Incoherent mode"). On the cache's own peer messages:
/// coherent posts the messages of every member of an operation before waiting for any reply;
/// incoherent sends one, waits for its reply, then sends the next.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ExecMode {
    Coherent,
    Incoherent,
}

impl ExecMode {
    pub fn name(self) -> &'static str {
        match self {
            ExecMode::Coherent => "coherent",
            ExecMode::Incoherent => "incoherent",
        }
    }
}

/// A mode name that is neither `coherent` nor `incoherent`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown mode {0:?} (coherent or incoherent)")]
pub struct UnknownMode(pub String);

impl std::str::FromStr for ExecMode {
    type Err = UnknownMode;
    fn from_str(s: &str) -> Result<ExecMode, UnknownMode> {
        match s {
            "coherent" => Ok(ExecMode::Coherent),
            "incoherent" => Ok(ExecMode::Incoherent),
            _ => Err(UnknownMode(s.to_string())),
        }
    }
}

/// Default small-value threshold: values shorter than this are replicated (see docs/cache.md
/// for the measurement).
pub const REPLICATE_BELOW_BYTES: usize = 1024;
/// How long a yes of `Node::leads` is reused: well under a heartbeat's interval, so a change
/// of this node's view stops its operations about as soon as before.
pub(crate) const LEADS_REUSE: Duration = Duration::from_millis(1);

/// The reason of a write refused for its size (`SERVER_ERROR object too large for cache`).
pub(crate) const TOO_LARGE: &str = "object too large for cache";

/// A node's settings.
#[derive(Clone, Debug)]
pub struct NodeConfig {
    pub id: usize,
    pub node_count: usize,
    pub code: Code,
    pub scheme: Scheme,
    pub mode: ExecMode,
    /// `-m`: memory for records, shared equally among the (stripe, position) slots the node
    /// holds.
    pub memory_bytes: u64,
    pub replicate_below_bytes: usize,
    pub heartbeat: Duration,
    /// A peer whose heartbeats fail for this long (or whose connection fails) is down.
    pub down_after: Duration,
    /// Start empty and rebuild every record this node must hold from the survivors.
    pub recover: bool,
    /// Recovery rate limit in bytes of rebuilt records per second.
    pub recovery_bytes_per_s: u64,
    /// Accept the test-only `inec_flip` command.
    pub debug_commands: bool,
    /// The largest value (`-I`): an append or prepend whose result would be larger is refused
    /// with `SERVER_ERROR object too large for cache` and removes the key's value.
    pub item_size_max_bytes: usize,
    /// `--layout`: how new values are stored (`agent::whole`).
    pub layout: Layout,
    /// With `--layout auto`: values below this size are whole, others split.
    pub whole_below_bytes: usize,
    /// Bytes of a slab page of the whole layout.
    pub page_bytes: usize,
    /// How much each slab size class grows over the one below it (`--slab-growth-factor`).
    pub slab_growth: f64,
    /// `--whole-repair`: how a whole value is rebuilt (`agent::whole`).
    pub whole_repair: WholeRepair,
}

impl NodeConfig {
    /// How long a heartbeat waits for its answer: half the down-after time, so a round with a
    /// silent peer in it still ends well within the lease it renews.
    pub fn heartbeat_timeout(&self) -> Duration {
        (self.down_after / 2).max(Duration::from_millis(1))
    }
}

/// Per parity node, (page stripe, its position, page, data position) → deltas applied
/// everywhere, not told yet (`Node::whole_commits`).
pub(crate) type Commits = hashbrown::HashMap<usize, hashbrown::HashMap<(u32, u8, u32, u8), u64>>;

#[derive(Clone, Debug)]
pub(crate) struct PeerState {
    pub(crate) up: bool,
    pub(crate) ready: bool,
    pub(crate) incarnation: u64,
    pub(crate) last_ok: Instant,
    /// Since when this node has seen it up without a break.
    pub(crate) up_since: Instant,
    /// Since when this node has seen it up and ready without a break (as far as heartbeats
    /// tell).
    pub(crate) serving_since: Instant,
    /// Since when this node has seen it up as the process it is now (its incarnation).
    pub(crate) incarnation_since: Instant,
    /// When this node first heard the process it is now (a new incarnation: it restarted, or
    /// it was first heard then).
    pub(crate) restarted_at: Option<Instant>,
}

/// What a node knows of the others: how it sees each, and each one's lease (`lease.rs`), under
/// one lock so that a vote reads a consistent view.
#[derive(Debug)]
pub(crate) struct Peers {
    pub(crate) list: Vec<PeerState>,
    pub(crate) leases: Vec<PeerLease>,
    /// Per stripe, this node's current run of its lease (`lease::Run`), as its checks of the
    /// lease found it.
    pub(crate) runs: Vec<Option<lease::Run>>,
}

impl std::ops::Deref for Peers {
    type Target = [PeerState];
    fn deref(&self) -> &[PeerState] {
        &self.list
    }
}

impl std::ops::DerefMut for Peers {
    fn deref_mut(&mut self) -> &mut [PeerState] {
        &mut self.list
    }
}

/// How a node (`me`, ready or not) sees node `i`: (up, ready).
pub(crate) fn sight(list: &[PeerState], me: usize, me_ready: bool, i: usize) -> lease::Sight {
    if i == me {
        (true, me_ready)
    } else {
        (list[i].up, list[i].ready)
    }
}

/// Counters reported by `stats` and `stats inec`.
#[derive(Debug, Default)]
pub struct Counters {
    pub cmd_get: AtomicU64,
    pub cmd_set: AtomicU64,
    pub cmd_touch: AtomicU64,
    pub cmd_flush: AtomicU64,
    pub get_hits: AtomicU64,
    pub get_misses: AtomicU64,
    pub get_expired: AtomicU64,
    pub get_flushed: AtomicU64,
    pub delete_hits: AtomicU64,
    pub delete_misses: AtomicU64,
    pub incr_hits: AtomicU64,
    pub incr_misses: AtomicU64,
    pub decr_hits: AtomicU64,
    pub decr_misses: AtomicU64,
    pub cas_hits: AtomicU64,
    pub cas_misses: AtomicU64,
    pub cas_badval: AtomicU64,
    pub touch_hits: AtomicU64,
    pub touch_misses: AtomicU64,
    pub total_items: AtomicU64,
    pub expired_unfetched: AtomicU64,
    pub degraded_reads: AtomicU64,
    /// Whole-layout writes (slot written, deltas sent), slots rebuilt from their page's
    /// stripe, and repair reads made again because the pages read were no consistent cut.
    pub whole_writes: AtomicU64,
    pub whole_rebuilds: AtomicU64,
    pub whole_cut_retries: AtomicU64,
    /// Whole values a repair plan rebuilt that failed their record's check (read again over a
    /// direct consistent cut).
    pub whole_plan_rejected: AtomicU64,
    /// Parity pages rebuilt while the node ran, after missing a delta.
    pub whole_pages_healed: AtomicU64,
    /// Pages a restarted node rebuilt from k pieces that showed no consistent cut
    /// (a delta torn by a kill; `agent::whole`, `salvage_page`).
    pub whole_pages_salvaged: AtomicU64,
    /// Parity pages a restarted home brought to agree with its rebuilt page (torn deltas).
    pub whole_pages_realigned: AtomicU64,
    /// Deltas of a dead home that a rebuild sent, from a parity position that kept them, to
    /// the parity positions that missed them (`agent::whole`, `complete_torn`).
    pub whole_deltas_completed: AtomicU64,
    /// `Commit` messages this node sent as a home (`Node::announce_commits`, once a second
    /// while its pages' deltas are being applied) and those it answered as a parity position.
    pub whole_commits_sent: AtomicU64,
    pub whole_commits_answered: AtomicU64,
    /// Values stored split that their home wrote whole again in the background
    /// (`agent::rewhole`).
    pub whole_rewritten: AtomicU64,
    /// A gauge, set by each background round: values of the stripes this node leads that the
    /// layout wants whole but are stored split, waiting for their home's rewrite
    /// (`agent::rewhole`).
    pub whole_split_values: AtomicU64,
    /// Requests an event loop handed to a worker: a client's (`worker_jobs`) and a peer's
    /// (`peer_worker_jobs`), as they may wait (docs/cache.md, "Operating it").
    pub worker_jobs: AtomicU64,
    pub peer_worker_jobs: AtomicU64,
    /// Requests (a client's, or one another node forwarded) an event loop held back, unread,
    /// until their key's lock was freed (a write of the key in flight), rather than hand them
    /// to a worker (`agent::keylock`).
    pub key_lock_waits: AtomicU64,
    /// Queued deltas dropped, not sent: their node restarted after they were made, and its
    /// page rebuild holds them.
    pub whole_deltas_superseded: AtomicU64,
    /// After a restart: pages (slab and parity) rebuilt so far, of how many.
    pub whole_pages_rebuilt: AtomicU64,
    pub whole_pages_to_rebuild: AtomicU64,
    /// Writes asked to be whole but stored split (a member down or without its pages, this
    /// node standing in for the home, a record larger than a page).
    pub whole_fallbacks: AtomicU64,
    /// Deltas queued for a parity position that did not acknowledge them, and sent again.
    pub whole_deltas_queued: AtomicU64,
    pub whole_deltas_redelivered: AtomicU64,
    pub forced_degraded_reads: AtomicU64,
    pub chunks_repaired: AtomicU64,
    pub chunks_written_back: AtomicU64,
    pub crc_errors: AtomicU64,
    pub version_mismatches: AtomicU64,
    pub forwarded: AtomicU64,
    /// Replies this node's peer server sent to data requests (heartbeats excluded).
    pub peer_replies_sent: AtomicU64,
    pub index_rebuilds: AtomicU64,
    /// Microseconds the last index rebuild took (listings asked to keys adopted), the longest
    /// and all of them.
    pub index_rebuild_us_last: AtomicU64,
    pub index_rebuild_us_max: AtomicU64,
    pub index_rebuild_us_total: AtomicU64,
    /// Writes acknowledged while some member did not store its record (it was down).
    pub writes_with_holes: AtomicU64,
    /// Records the agent rebuilt and stored at a member that lacked them (holes filled).
    pub holes_filled: AtomicU64,
    /// Indexes dropped because the agent's lease lapsed after they were built.
    pub lease_lapses: AtomicU64,
    /// Operations answered "not agent" because the lease ran out while they ran.
    pub lease_lost_ops: AtomicU64,
    pub server_errors: AtomicU64,
    pub recovery_keys_total: AtomicU64,
    pub recovery_keys_done: AtomicU64,
    pub recovery_bytes: AtomicU64,
    /// Reads the client loop ran to completion itself (`node::loop_read`).
    pub loop_reads: AtomicU64,
    /// Reads the client loop began and handed to a worker (a member down or slow, a chunk
    /// missing or bad, the lease lost meanwhile).
    pub loop_read_fallbacks: AtomicU64,
    /// Forced-degraded reads of whole values whose first answers held no consistent cut,
    /// asked again on the loop (`Node::loop_read_again`).
    pub loop_range_reasks: AtomicU64,
    /// Degraded reads of coded values the client loop ran to completion, their repair on the
    /// engine's plan (`agent::loop_read`).
    pub loop_degraded_reads: AtomicU64,
    /// `set`s, `add`s, `replace`s and `cas`es the client loop ran to completion itself
    /// (`agent::loop_write`).
    pub loop_writes: AtomicU64,
    /// Of those the loop began, the ones its condition refused (`NOT_STORED`, `EXISTS`,
    /// `NOT_FOUND`), answered with no message.
    pub loop_writes_refused: AtomicU64,
    /// `delete`s the client loop ran to completion itself (`agent::loop_notice`).
    pub loop_deletes: AtomicU64,
    /// `touch`es the client loop ran to completion itself (`agent::loop_notice`).
    pub loop_touches: AtomicU64,
    /// `get`s and `gets` of several keys the client loop ran to completion itself.
    pub loop_multi_gets: AtomicU64,
    /// `set`s the client loop began and handed to a worker (a member failed or was slow).
    pub loop_write_fallbacks: AtomicU64,
    /// Gets and sets the client loop forwarded to the key's agent over its own connections
    /// (this node is not the agent) and answered from the agent's reply.
    pub loop_forwards: AtomicU64,
    /// Forwards the loop gave to a worker (no agent's answer, or one the worker must handle).
    pub loop_forward_fallbacks: AtomicU64,
    /// Writes whose fate is unknown — forwarded to an agent that sent no reply, or stored while
    /// the agent's lease ran out — answered `SERVER_ERROR` (it may or may not have been
    /// applied), never run again: run twice, a write could act over later writes.
    pub writes_in_doubt: AtomicU64,
    /// Writes tried again (after a try whose fate is unknown) that the key's records showed
    /// applied, answered from them instead of applied twice (`agent::once`).
    pub retries_answered: AtomicU64,
    /// Writes tried again that no record of the key showed: refused as in doubt.
    pub retries_in_doubt: AtomicU64,
}

/// Where a node's request ids start: a 64-bit mix of its id and incarnation (its start time in
/// µs), so that two nodes, or two runs of one node, count from far-apart points (two of nine
/// nodes each giving 10⁹ ids overlap with a probability near 10⁻⁹).
fn first_request_id(node: usize, incarnation: u64) -> u64 {
    let mut z = incarnation ^ (node as u64).rotate_left(40) ^ 0x9e37_79b9_7f4a_7c15;
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

pub(crate) fn bump(c: &AtomicU64) {
    c.fetch_add(1, Ordering::Relaxed);
}

/// Recovery progress, shown by `stats inec` and `inec cache status`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RecoveryState {
    /// Started without `--recover`.
    None,
    Running,
    Done,
}

pub use crate::agent::keylock::key_lock_index;

/// Records fetched for a read: the good ones' (position, data), and the failed positions with
/// whether the failure was a bad CRC.
pub(crate) type Fetched = (Vec<(usize, Vec<u8>)>, Vec<(usize, bool)>);

#[cfg(test)]
mod cluster_tests;
/// A cache node.
#[cfg(test)]
pub(crate) mod tests;
#[cfg(test)]
mod whole_tests;

/// What a node is built over (see [`Node::with_store`]).
#[derive(Debug)]
pub struct NodeParts {
    /// This run of the node (microseconds since the epoch at its start).
    pub incarnation: u64,
    pub store: Arc<Mutex<ChunkStore>>,
    pub plans: Option<Arc<PlanExec>>,
    /// Leadership from a coordinator (`--coordinator`) instead of the heartbeats' majority
    /// lease (`cluster::coord`).
    pub coordinator: Option<Box<dyn Coordinator>>,
    /// The node's event loops, woken when a key lock one of them waits for is freed (none
    /// for a node without loops).
    pub loops: Vec<Arc<dyn CallPost>>,
}

#[derive(Debug)]
pub struct Node {
    pub cfg: NodeConfig,
    pub placement: Placement,
    pub(crate) codec: Codec,
    pub(crate) transport: Arc<dyn PeerTransport>,
    pub(crate) heartbeat_transport: Arc<dyn PeerTransport>,
    pub incarnation: u64,
    pub started: Instant,
    /// Shared with the engine host's application, which reads and stores records for plans.
    pub(crate) store: Arc<Mutex<ChunkStore>>,
    pub(crate) stripes: Vec<Mutex<Option<StripeIndex>>>,
    /// Per stripe, held over a rebuild of its index (`Node::with_index`): one rebuild at a
    /// time, the threads that also want one waiting for it.
    pub(crate) rebuilding: Vec<Mutex<()>>,
    /// Per stripe, the recovered node this node handed the stripe to: while that node is up,
    /// this node does not lead the stripe even if its view says so.
    pub(crate) yielded: Vec<Mutex<Option<usize>>>,
    /// Per stripe, until when (nanoseconds after `started`) `Node::leads` may answer yes from
    /// its last full check: never past the promises that check counted, never more than
    /// `LEADS_REUSE` after it (0: check in full). Set under the stripe's `yielded` lock.
    pub(crate) leads_until: Vec<AtomicU64>,
    /// A client loop holds one across a write's replies (`loop_write`), and waits for one
    /// without blocking (`agent::keylock`).
    pub(crate) key_locks: KeyLocks,
    /// The waits for every key lock to be free once that let this node grant a peer again
    /// (`Node::heartbeat`).
    pub(crate) drains: Arc<Mutex<Drains>>,
    pub(crate) peers: Mutex<Peers>,
    /// Per stripe, its distinct member nodes in position order (the lease's electorate; the
    /// placement is static).
    pub(crate) lease_members: Vec<Vec<usize>>,
    pub(crate) ready: AtomicBool,
    pub(crate) recovery: Mutex<RecoveryState>,
    pub(crate) oldest_live_us: AtomicU64,
    pub counters: Counters,
    pub(crate) local_messages: AtomicU64,
    /// This node lost its whole-layout pages in a restart and has not rebuilt them yet (from
    /// `--recover` until `Node::rebuild_pages` is done; the store's `whole_lost`, readable
    /// without its lock): it writes no value whole.
    pub(crate) pages_lost: AtomicBool,
    /// Deltas a parity position did not acknowledge (down, stalled, or a write given up on
    /// the loop), sent again once it is up: a parity page missing one agrees with no data
    /// page, and is left out of every repair, until it arrives (`Node::redeliver_deltas`).
    /// Each with its node and when it was queued (µs since the epoch).
    pub(crate) whole_pending: Mutex<Vec<(usize, u64, Request)>>,
    /// Bytes of the deltas in `whole_pending` (their deltas and records).
    pub(crate) whole_pending_bytes: AtomicU64,
    /// Per parity node, the pages of this home whose deltas every position applied that it
    /// has not been told of yet: (page stripe, its position, page, data position) → that
    /// count. Carried by the next delta to it (or a `Commit` once a second).
    pub(crate) whole_commits: Mutex<Commits>,
    /// Peer messages the client loop sent and received (its reads).
    pub(crate) loop_messages: (AtomicU64, AtomicU64),
    /// The next request id this node gives a client's write (`agent::once`).
    request_ids: AtomicU64,
    /// The engine path of writes, normal and degraded reads (absent: everything goes over
    /// peer messages).
    pub(crate) plans: Option<Arc<PlanExec>>,
    /// Leadership from a coordinator; `None`: the majority lease of the heartbeats.
    pub(crate) coord: Option<Leadership>,
}

/// The waits for the key locks behind grants given again (`Node::heartbeat`): a node that
/// wants to grant a peer again first lets every operation under way finish, each key lock
/// free once, and refuses the peer until then.
#[derive(Debug)]
pub(crate) struct Drains {
    /// Per peer, when this node first wanted to grant it again and could not yet, while it has
    /// seen it up and ready since.
    pub wanted: Vec<Option<Instant>>,
    /// When the latest finished wait began.
    pub done_from: Option<Instant>,
    /// A wait is under way (on a thread of its own).
    pub running: bool,
}

impl Drains {
    fn new(nodes: usize) -> Drains {
        Drains {
            wanted: vec![None; nodes],
            done_from: None,
            running: false,
        }
    }
}

pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Node {
    /// A node whose degraded reads, writes and normal reads all go over peer messages.
    pub fn new(
        cfg: NodeConfig,
        transport: Arc<dyn PeerTransport>,
        heartbeat_transport: Arc<dyn PeerTransport>,
    ) -> Node {
        Node::with_store(
            cfg,
            transport,
            heartbeat_transport,
            NodeParts {
                incarnation: time::now_micros(),
                store: Arc::new(Mutex::new(ChunkStore::new())),
                plans: None,
                coordinator: None,
                loops: Vec::new(),
            },
        )
    }

    /// A node over a chunk store and an engine path built before it (the engine host's
    /// application holds the same store and plan state: nothing refers back to the node).
    pub fn with_store(
        cfg: NodeConfig,
        transport: Arc<dyn PeerTransport>,
        heartbeat_transport: Arc<dyn PeerTransport>,
        parts: NodeParts,
    ) -> Node {
        let n = cfg.code.n();
        let placement = Placement::new(cfg.node_count, n);
        let stripes = (0..cfg.node_count).map(|_| Mutex::new(None)).collect();
        let now = Instant::now();
        let peers = (0..cfg.node_count)
            .map(|_| PeerState {
                up: true,
                ready: true,
                incarnation: 0,
                last_ok: now,
                up_since: now,
                serving_since: now,
                incarnation_since: now,
                restarted_at: None,
            })
            .collect();
        let peers = Peers {
            list: peers,
            leases: vec![PeerLease::default(); cfg.node_count],
            runs: vec![None; cfg.node_count],
        };
        let recover = cfg.recover;
        let codec = Codec::new(cfg.code);
        {
            let mut store = lock(&parts.store);
            store.set_code(codec.kernel(), cfg.code);
            store.set_slab(cfg.page_bytes, cfg.slab_growth);
            store.set_slab_start(cfg.id);
            store.whole_lost = recover;
        }

        let lease_members = (0..cfg.node_count)
            .map(|s| lease::member_nodes((0..n).map(|p| placement.node_of(s, p))))
            .collect();
        Node {
            lease_members,
            codec,
            placement,
            transport,
            heartbeat_transport,
            incarnation: parts.incarnation,
            started: now,
            store: parts.store,
            stripes,
            yielded: (0..cfg.node_count).map(|_| Mutex::new(None)).collect(),
            leads_until: (0..cfg.node_count).map(|_| AtomicU64::new(0)).collect(),
            rebuilding: (0..cfg.node_count).map(|_| Mutex::new(())).collect(),
            key_locks: KeyLocks::new(parts.loops),
            drains: Arc::new(Mutex::new(Drains::new(cfg.node_count))),
            peers: Mutex::new(peers),
            ready: AtomicBool::new(!recover),
            recovery: Mutex::new(if recover {
                RecoveryState::Running
            } else {
                RecoveryState::None
            }),
            oldest_live_us: AtomicU64::new(0),
            counters: Counters::default(),
            local_messages: AtomicU64::new(0),
            pages_lost: AtomicBool::new(recover),
            whole_pending: Mutex::new(Vec::new()),
            whole_pending_bytes: AtomicU64::new(0),
            whole_commits: Mutex::new(Commits::new()),
            loop_messages: (AtomicU64::new(0), AtomicU64::new(0)),
            request_ids: AtomicU64::new(first_request_id(cfg.id, parts.incarnation)),
            plans: parts.plans,
            coord: parts.coordinator.map(|c| {
                // The coordinator's time to live is whole seconds (etcd's): the down-after
                // time rounded up, at least 2 s (etcd's least with its default timings).
                let ttl = Duration::from_secs(cfg.down_after.as_secs_f64().ceil().max(2.0) as u64);
                Leadership::new(c, ttl, cfg.node_count)
            }),
            cfg,
        }
    }

    /// A new request id for a client's write (never 0).
    pub fn next_request_id(&self) -> u64 {
        loop {
            let id = self.request_ids.fetch_add(1, Ordering::Relaxed);
            if id != 0 {
                return id;
            }
        }
    }

    /// The engine path of writes, normal and degraded reads, if the node has one.
    pub fn plan_exec(&self) -> Option<&Arc<PlanExec>> {
        self.plans.as_ref()
    }

    /// The buffer pool of the node's engine, for the plan frames a loop reads (`None` without
    /// an engine: such frames are dropped).
    pub fn plan_pool(&self) -> Option<&engine::BufferPool> {
        self.plans.as_ref().and_then(|x| x.pool())
    }

    /// The engine path for a write or normal read of a coded value of `stripe`, when this node
    /// is the stripe's designated agent and every node `needed` holds is up.
    pub(crate) fn plan_path(&self, stripe: usize, needed: usize) -> Option<&Arc<PlanExec>> {
        let x = self.plans.as_ref()?;
        if self.placement.node_of(stripe, 0) != self.cfg.id {
            return None;
        }
        (0..needed)
            .all(|p| self.is_up(self.placement.node_of(stripe, p)))
            .then_some(x)
    }

    pub(crate) fn k(&self) -> usize {
        self.cfg.code.k()
    }

    pub(crate) fn n(&self) -> usize {
        self.cfg.code.n()
    }

    pub(crate) fn parity(&self) -> usize {
        self.cfg.code.parity_count()
    }

    /// The share of memory of one (stripe, position) slot on this node.
    pub fn share_bytes(&self) -> u64 {
        self.cfg.memory_bytes / self.placement.slots_per_node() as u64
    }

    // ---- liveness ----

    // ---- calls ----

    /// Sends requests, handling those to this node locally; a node that fails is marked down.
    pub(crate) fn call(&self, calls: Vec<(usize, Request)>) -> Vec<Result<Response, PeerError>> {
        let mut out: Vec<Option<Result<Response, PeerError>>> = Vec::with_capacity(calls.len());
        let mut remote = Vec::new();
        let mut remote_at = Vec::new();
        for (i, (node, req)) in calls.into_iter().enumerate() {
            // With a coordinator, a chunk request carries the fencing token of this node's
            // term of its stripe, and none is sent without one.
            let req = match req.stripe() {
                Some(s) if self.coord.is_some() && !matches!(req, Request::Fenced { .. }) => {
                    match self.fence(s as usize) {
                        0 => {
                            out.push(Some(Ok(Response::Nack(format!(
                                "stripe {s}: this node holds no term of it"
                            )))));
                            continue;
                        }
                        t => crate::carrier::peer::fenced(t, req),
                    }
                }
                _ => req,
            };
            if node == self.cfg.id {
                self.local_messages.fetch_add(1, Ordering::Relaxed);
                out.push(Some(Ok(self.handle_peer(req))));
            } else {
                out.push(None);
                remote.push((node, req));
                remote_at.push(i);
            }
        }
        if !remote.is_empty() {
            let nodes: Vec<usize> = remote.iter().map(|(n, _)| *n).collect();
            // Coherent: every message is posted before any reply is awaited. Incoherent (the
            // baseline): one message, wait for its reply, then the next.
            let replies = match self.cfg.mode {
                ExecMode::Coherent => self.transport.call_many(remote),
                ExecMode::Incoherent => remote
                    .into_iter()
                    .flat_map(|call| self.transport.call_many(vec![call]))
                    .collect(),
            };
            for ((i, node), r) in remote_at.into_iter().zip(nodes).zip(replies) {
                if let Err(PeerError::Io { source, .. } | PeerError::NoReply { source, .. }) = &r {
                    self.mark_down(node);
                    if source.kind() == std::io::ErrorKind::ConnectionRefused {
                        let l = &mut lock(&self.peers).leases[node];
                        l.refused = true;
                        l.refused_at = Some(Instant::now());
                    }
                }
                out[i] = Some(r);
            }
        }
        out.into_iter()
            .map(|r| r.expect("every call answered"))
            .collect()
    }

    /// Data messages sent and received over the transport (heartbeats excluded).
    pub fn data_messages(&self) -> (u64, u64) {
        let (sent, received) = self.transport.data_messages();
        (
            sent + self.loop_messages.0.load(Ordering::Relaxed),
            received + self.loop_messages.1.load(Ordering::Relaxed),
        )
    }

    /// Counts peer messages the client loop sent and received.
    pub fn count_loop_messages(&self, sent: u64, received: u64) {
        if sent > 0 {
            self.loop_messages.0.fetch_add(sent, Ordering::Relaxed);
        }
        if received > 0 {
            self.loop_messages.1.fetch_add(received, Ordering::Relaxed);
        }
    }

    // ---- member side ----

    // ---- front ----

    // ---- agent ----

    // ---- recovery ----

    // ---- reporting ----
}
