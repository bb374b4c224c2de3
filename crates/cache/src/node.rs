//! One cache node: the member that stores chunk records, the agent of the stripes it leads,
//! the front that routes any key to its agent, liveness and recovery.
//!
//! Locks: `key_locks` (by key hash, held for a whole agent operation, so operations on one key
//! run one at a time in version order) → a stripe's index (held briefly, or for an index
//! rebuild) → the chunk store (held briefly). No lock is held while waiting for this node's
//! own locks from a peer call, so forwarding cannot deadlock.

use std::collections::{BTreeSet, HashMap};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use codes::{Code, Codec};
use graph::Scheme;
use proto::StoreMode;

use crate::index::{self, Entry, Gone, StripeIndex};
use crate::lease::{self, PeerLease};
use crate::member::ChunkStore;
use crate::peer::{self, AgentOp, AgentResult, PeerError, PeerTransport, Request, Response};
use crate::placement::{fnv1a_64, Placement};
use crate::plans::{PlanExec, WriteMeta};
use crate::record::{self, Header, Kind};
use crate::semantics::{self, Decision};
use crate::stripe;
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
/// The reason of a write refused for its size (`SERVER_ERROR object too large for cache`).
const TOO_LARGE: &str = "object too large for cache";

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
}

#[derive(Clone, Debug)]
struct PeerState {
    up: bool,
    ready: bool,
    incarnation: u64,
    last_ok: Instant,
    /// Since when this node has seen it up without a break.
    up_since: Instant,
}

/// What a node knows of the others: how it sees each, and each one's lease (`lease.rs`), under
/// one lock so that a vote reads a consistent view.
#[derive(Debug)]
struct Peers {
    list: Vec<PeerState>,
    leases: Vec<PeerLease>,
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
fn sight(list: &[PeerState], me: usize, me_ready: bool, i: usize) -> lease::Sight {
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
    pub forced_degraded_reads: AtomicU64,
    pub chunks_repaired: AtomicU64,
    pub chunks_written_back: AtomicU64,
    pub crc_errors: AtomicU64,
    pub version_mismatches: AtomicU64,
    pub forwarded: AtomicU64,
    /// Replies this node's peer server sent to data requests (heartbeats excluded).
    pub peer_replies_sent: AtomicU64,
    pub index_rebuilds: AtomicU64,
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
    /// `set`s the client loop ran to completion itself (`node::loop_write`).
    pub loop_writes: AtomicU64,
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
}

fn bump(c: &AtomicU64) {
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

const KEY_LOCKS: usize = 1024;

/// Which of the agent's key locks `key` takes: operations on keys that share one run one at
/// a time.
pub fn key_lock_index(key: &[u8]) -> usize {
    (fnv1a_64(key) >> 20) as usize % KEY_LOCKS
}

/// Records fetched for a read: the good ones' (position, data), and the failed positions with
/// whether the failure was a bad CRC.
type Fetched = (Vec<(usize, Vec<u8>)>, Vec<(usize, bool)>);

/// A cache node.
mod loop_read;
mod loop_write;
#[cfg(test)]
pub(crate) mod tests;
pub use loop_read::{LoopPending, LoopRead, LoopValue};
pub use loop_write::{LoopWrite, LoopWriteStart};

#[derive(Debug)]
pub struct Node {
    pub cfg: NodeConfig,
    pub placement: Placement,
    codec: Codec,
    transport: Arc<dyn PeerTransport>,
    heartbeat_transport: Arc<dyn PeerTransport>,
    pub incarnation: u64,
    pub started: Instant,
    store: Mutex<ChunkStore>,
    stripes: Vec<Mutex<Option<StripeIndex>>>,
    /// Per stripe, the recovered node this node handed the stripe to: while that node is up,
    /// this node does not lead the stripe even if its view says so.
    yielded: Vec<Mutex<Option<usize>>>,
    /// Shared so that a client loop can hold one across a write's replies (`loop_write`).
    key_locks: Vec<Arc<parking_lot::Mutex<()>>>,
    peers: Mutex<Peers>,
    /// Per stripe, its distinct member nodes in position order (the lease's electorate; the
    /// placement is static).
    lease_members: Vec<Vec<usize>>,
    ready: AtomicBool,
    recovery: Mutex<RecoveryState>,
    oldest_live_us: AtomicU64,
    pub counters: Counters,
    local_messages: AtomicU64,
    /// Peer messages the client loop sent and received (its reads).
    loop_messages: (AtomicU64, AtomicU64),
    /// The engine path of degraded reads (absent: every degraded read is repaired at the
    /// agent from the peer messages).
    plans: std::sync::OnceLock<Arc<PlanExec>>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Node {
    pub fn new(
        cfg: NodeConfig,
        transport: Arc<dyn PeerTransport>,
        heartbeat_transport: Arc<dyn PeerTransport>,
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
            })
            .collect();
        let peers = Peers {
            list: peers,
            leases: vec![PeerLease::default(); cfg.node_count],
        };
        let recover = cfg.recover;
        let lease_members = (0..cfg.node_count)
            .map(|s| lease::member_nodes((0..n).map(|p| placement.node_of(s, p))))
            .collect();
        Node {
            lease_members,
            codec: Codec::new(cfg.code),
            placement,
            transport,
            heartbeat_transport,
            incarnation: time::now_micros(),
            started: now,
            store: Mutex::new(ChunkStore::new()),
            stripes,
            yielded: (0..cfg.node_count).map(|_| Mutex::new(None)).collect(),
            key_locks: (0..KEY_LOCKS)
                .map(|_| Arc::new(parking_lot::Mutex::new(())))
                .collect(),
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
            loop_messages: (AtomicU64::new(0), AtomicU64::new(0)),
            plans: std::sync::OnceLock::new(),
            cfg,
        }
    }

    /// Enables degraded reads on engine plans (once, at start-up).
    pub fn set_plan_exec(&self, x: Arc<PlanExec>) {
        let _ = self.plans.set(x);
    }

    pub fn plan_exec(&self) -> Option<&Arc<PlanExec>> {
        self.plans.get()
    }

    /// Stores a record that arrived through an engine plan (a write's chunk), as a peer
    /// `Put` would.
    pub fn put_record(
        &self,
        stripe: u32,
        record: Vec<u8>,
        watermark: u64,
    ) -> Result<(), crate::record::RecordError> {
        lock(&self.store).put(stripe, record, watermark).map(|_| ())
    }

    /// The engine path for a write or normal read of a coded value of `stripe`, when this node
    /// is the stripe's designated agent and every node `needed` holds is up.
    fn plan_path(&self, stripe: usize, needed: usize) -> Option<&Arc<PlanExec>> {
        let x = self.plans.get()?;
        if self.placement.node_of(stripe, 0) != self.cfg.id {
            return None;
        }
        (0..needed)
            .all(|p| self.is_up(self.placement.node_of(stripe, p)))
            .then_some(x)
    }

    /// Appends the framed reply to a `Get` of (stripe, position, key, version) to `out`.
    pub fn push_record_frame(
        &self,
        out: &mut Vec<u8>,
        stripe: u32,
        position: u8,
        key: &[u8],
        version: u64,
    ) {
        peer::push_record_frame(out, lock(&self.store).get(stripe, position, key, version));
    }

    /// The record this node holds for (stripe, position, key, version).
    pub fn record(&self, stripe: u32, position: u8, key: &[u8], version: u64) -> Option<Vec<u8>> {
        lock(&self.store)
            .get(stripe, position, key, version)
            .map(|r| r.to_vec())
    }

    fn k(&self) -> usize {
        self.cfg.code.k()
    }

    fn n(&self) -> usize {
        self.cfg.code.n()
    }

    fn parity(&self) -> usize {
        self.cfg.code.parity_count()
    }

    /// The share of memory of one (stripe, position) slot on this node.
    pub fn share_bytes(&self) -> u64 {
        self.cfg.memory_bytes / self.placement.slots_of(self.cfg.id).max(1) as u64
    }

    pub fn is_ready(&self) -> bool {
        self.ready.load(Ordering::Relaxed)
    }

    pub fn recovery_state(&self) -> RecoveryState {
        *lock(&self.recovery)
    }

    // ---- liveness ----

    pub fn is_up(&self, node: usize) -> bool {
        node == self.cfg.id || lock(&self.peers)[node].up
    }

    /// (up, ready) of every node in this node's view.
    pub fn view(&self) -> Vec<(bool, bool)> {
        let peers = lock(&self.peers);
        (0..self.cfg.node_count)
            .map(|i| {
                if i == self.cfg.id {
                    (true, self.is_ready())
                } else {
                    (peers[i].up, peers[i].ready)
                }
            })
            .collect()
    }

    fn mark_down(&self, node: usize) {
        if node != self.cfg.id {
            lock(&self.peers)[node].up = false;
        }
    }

    /// The agent of a stripe in this node's view.
    pub fn agent_of(&self, stripe: usize) -> Option<usize> {
        let view = self.view();
        self.placement.agent_of(stripe, |n| view[n].0 && view[n].1)
    }

    /// Whether this node leads `stripe` now: it is the agent in its view and has not handed
    /// the stripe to a recovered node.
    fn leads(&self, stripe: usize) -> bool {
        self.agent_of(stripe) == Some(self.cfg.id)
            && lock(&self.yielded[stripe]).is_none()
            && self.lease_holds(stripe)
    }

    /// The lease rules of `lease.rs` for `stripe` at this node: a majority of the stripe's
    /// member nodes vote for it.
    fn lease_holds(&self, stripe: usize) -> bool {
        let members = &self.lease_members[stripe];
        let me = self.cfg.id;
        let ready = self.is_ready();
        let mut peers = lock(&self.peers);
        let Peers { list, leases } = &mut *peers;
        lease::holds(
            members,
            me,
            |i| sight(list, me, ready, i),
            leases,
            Instant::now(),
            self.cfg.down_after,
            self.started,
        )
    }

    /// The votes for this node in `stripe` now, of its member nodes: (votes, members).
    pub fn lease_votes(&self, stripe: usize) -> (usize, usize) {
        let members = &self.lease_members[stripe];
        let me = self.cfg.id;
        let ready = self.is_ready();
        let peers = lock(&self.peers);
        let view = |i| sight(&peers.list, me, ready, i);
        let now = Instant::now();
        let term = self.cfg.down_after;
        let v = lease::votes(members, me, view, &peers.leases, now, term, self.started)
            .map_or(0, |(others, own)| others + usize::from(own));
        (v, members.len())
    }

    /// Drops this node's index of `stripe` if its lease lapsed after the index was built: a
    /// member voting for it now saw it down since, so the stripe may have been led by another
    /// node meanwhile.
    fn drop_stale_index(&self, stripe: usize) {
        let Some(built) = lock(&self.stripes[stripe]).as_ref().map(|ix| ix.built_at) else {
            return;
        };
        if self.lease_lapsed_since(stripe, built) {
            let mut ix = lock(&self.stripes[stripe]);
            if ix.as_ref().is_some_and(|ix| ix.built_at == built) {
                bump(&self.counters.lease_lapses);
                *ix = None;
                log::debug!("stripe {stripe}: index dropped (the lease lapsed since it was built)");
            }
        }
    }

    /// Whether a member voting for this node in `stripe` now saw it down since `since`: the
    /// stripe may have been led by another node meanwhile (leading needs a majority, which
    /// shares a member with the one voting for this node now).
    fn lease_lapsed_since(&self, stripe: usize, since: Instant) -> bool {
        let now = Instant::now();
        let peers = lock(&self.peers);
        self.lease_members[stripe].iter().any(|&m| {
            let l = &peers.leases[m];
            m != self.cfg.id
                && l.grant_holds(now, self.cfg.down_after)
                && l.may_have_led_since(since)
        })
    }

    /// Whether this node leads `stripe` now and has without a break since `since`.
    pub(crate) fn led_throughout(&self, stripe: usize, since: Instant) -> bool {
        self.leads(stripe) && !self.lease_lapsed_since(stripe, since)
    }

    /// One round of heartbeats; drops the index of stripes this node no longer leads.
    pub fn heartbeat_round(&self) {
        let others: Vec<usize> = (0..self.cfg.node_count)
            .filter(|&i| i != self.cfg.id)
            .collect();
        let from = self.cfg.id as u32;
        let calls = others
            .iter()
            .map(|&i| (i, Request::Heartbeat { from }))
            .collect();
        let sent = Instant::now();
        let replies = self.heartbeat_transport.call_many(calls);
        let now = Instant::now();
        {
            let mut peers = lock(&self.peers);
            let Peers { list, leases } = &mut *peers;
            for (&i, r) in others.iter().zip(replies) {
                let p = &mut list[i];
                match r {
                    Ok(Response::Heartbeat {
                        incarnation,
                        ready,
                        grant,
                        up_for_ms,
                        exempt,
                    }) => {
                        // A peer's engine is connected to on its first answer (its engine
                        // host listens before its peer port answers), and again when it
                        // restarted or came back.
                        if !p.up || p.incarnation != incarnation {
                            if let Some(x) = self.plans.get() {
                                x.connect(i);
                            }
                        }
                        if !p.up {
                            p.up_since = now;
                        }
                        p.up = true;
                        p.ready = ready;
                        p.incarnation = incarnation;
                        p.last_ok = now;
                        leases[i].refused = false;
                        if grant {
                            let exempt = exempt.into_iter().map(|n| n as usize).collect();
                            let up_for = Duration::from_millis(up_for_ms);
                            leases[i].on_grant(sent, now, up_for, exempt);
                        }
                    }
                    Err(PeerError::Io { ref source, .. })
                        if source.kind() == std::io::ErrorKind::ConnectionRefused =>
                    {
                        p.up = false;
                        leases[i].refused = true;
                    }
                    _ => {
                        if now.duration_since(p.last_ok) >= self.cfg.down_after {
                            p.up = false;
                        }
                    }
                }
            }
        }
        for s in 0..self.cfg.node_count {
            let mut y = lock(&self.yielded[s]);
            if y.is_some_and(|to| !self.is_up(to)) {
                *y = None;
            }
        }
        for s in 0..self.cfg.node_count {
            if !self.leads(s) {
                let mut ix = lock(&self.stripes[s]);
                if ix.is_some() {
                    *ix = None;
                    log::debug!("stripe {s}: index dropped (not leading)");
                }
            }
        }
    }

    /// Runs heartbeats, expiry sweeps and (with `--recover`) recovery in background threads.
    pub fn start_background(self: &Arc<Self>) {
        let me = Arc::clone(self);
        std::thread::Builder::new()
            .name("heartbeat".into())
            .spawn(move || loop {
                me.heartbeat_round();
                std::thread::sleep(me.cfg.heartbeat);
            })
            .expect("spawn heartbeat thread");
        let me = Arc::clone(self);
        std::thread::Builder::new()
            .name("expiry".into())
            .spawn(move || loop {
                std::thread::sleep(Duration::from_secs(1));
                me.sweep();
                me.fill_holes(me.cfg.recovery_bytes_per_s.max(1));
            })
            .expect("spawn expiry thread");
        if self.cfg.recover {
            let me = Arc::clone(self);
            std::thread::Builder::new()
                .name("recovery".into())
                .spawn(move || me.recover())
                .expect("spawn recovery thread");
        }
    }

    // ---- calls ----

    /// Sends requests, handling those to this node locally; a node that fails is marked down.
    fn call(&self, calls: Vec<(usize, Request)>) -> Vec<Result<Response, PeerError>> {
        let mut out: Vec<Option<Result<Response, PeerError>>> = Vec::with_capacity(calls.len());
        let mut remote = Vec::new();
        let mut remote_at = Vec::new();
        for (i, (node, req)) in calls.into_iter().enumerate() {
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
                        lock(&self.peers).leases[node].refused = true;
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

    /// Handles a message from a peer (or from this node to itself).
    /// Answers a peer's request at once when that needs no wait on a key lock or another
    /// node (every chunk operation, most heartbeats); gives it back otherwise (an agent
    /// operation, a heartbeat that resumes granting), for a thread that may wait.
    pub fn handle_peer_now(&self, req: Request) -> Result<Response, Request> {
        match req {
            Request::Agent(_) => Err(req),
            Request::Heartbeat { from } => self.heartbeat(from as usize, false).ok_or(req),
            req => Ok(self.handle_peer(req)),
        }
    }

    /// The answer to a heartbeat from `from`; `None` when answering must wait for the key
    /// locks and `may_wait` is false.
    fn heartbeat(&self, from: usize, may_wait: bool) -> Option<Response> {
        let me = self.cfg.id;
        let term = self.cfg.down_after;
        let ready = self.is_ready();
        let resumes = from < self.cfg.node_count && {
            let peers = lock(&self.peers);
            let view = |i| sight(&peers.list, me, ready, i);
            let now = Instant::now();
            lease::grants(view, &peers.leases, me, from, now, term, self.started)
                && !peers.leases[from].granting
        };
        if resumes {
            if !may_wait {
                return None;
            }
            // This node may have stood in for `from` while it saw it down: the operations
            // under way here finish before `from` may lead again (each checks `leads` under
            // its key lock, and `from` is up in this view now).
            for l in &self.key_locks {
                drop(l.lock());
            }
        }
        let now = Instant::now();
        let mut peers = lock(&self.peers);
        let Peers { list, leases } = &mut *peers;
        let (grant, exempt, _) = lease::answer(
            |i| sight(list, me, ready, i),
            leases,
            me,
            from,
            now,
            term,
            self.started,
        );
        let up_for_ms = if grant {
            now.saturating_duration_since(list[from].up_since)
                .as_millis() as u64
        } else {
            0
        };
        Some(Response::Heartbeat {
            incarnation: self.incarnation,
            ready,
            grant,
            up_for_ms,
            exempt: exempt.into_iter().map(|n| n as u32).collect(),
        })
    }

    pub fn handle_peer(&self, req: Request) -> Response {
        match req {
            Request::Heartbeat { from } => self
                .heartbeat(from as usize, true)
                .expect("a heartbeat that may wait is answered"),
            Request::Put {
                stripe,
                watermark,
                record,
            } => match lock(&self.store).put(stripe, record, watermark) {
                Ok(_) => Response::Ack,
                Err(e) => Response::Nack(e.to_string()),
            },
            Request::Get {
                stripe,
                position,
                key,
                version,
            } => Response::Record(
                lock(&self.store)
                    .get(stripe, position, &key, version)
                    .map(|r| r.to_vec()),
            ),
            Request::Delete {
                stripe,
                key,
                version,
            } => {
                lock(&self.store).delete(stripe, &key, version);
                Response::Ack
            }
            Request::Touch {
                stripe,
                key,
                version,
                exptime,
            } => {
                lock(&self.store).touch(stripe, &key, version, exptime);
                Response::Ack
            }
            Request::List { stripe } => {
                let store = lock(&self.store);
                Response::Headers(
                    store
                        .list(stripe)
                        .iter()
                        .map(|h| record::encode(h, &[]))
                        .collect(),
                    store.tombstones(stripe),
                )
            }
            Request::Flip {
                stripe,
                position,
                key,
                bit,
            } => {
                if lock(&self.store).flip_bit(stripe, position, &key, bit) {
                    Response::Ack
                } else {
                    Response::Nack("no such record or bit".into())
                }
            }
            Request::Flush { oldest_live_us } => {
                self.oldest_live_us.store(oldest_live_us, Ordering::Relaxed);
                Response::Ack
            }
            Request::Agent(op) => Response::Agent(self.agent(op)),
        }
    }

    /// Bytes of records this node holds.
    pub fn stored_bytes(&self) -> u64 {
        lock(&self.store).bytes()
    }

    // ---- front ----

    /// Runs an operation at the agent of the key's stripe, wherever it is: locally, or
    /// forwarded over the peer connection. Retries while the cluster's views settle.
    pub fn route(&self, stripe: usize, op: AgentOp) -> AgentResult {
        let deadline = Instant::now() + self.cfg.down_after * 2 + Duration::from_millis(500);
        loop {
            let Some(agent) = self.agent_of(stripe) else {
                return self.unavailable(stripe);
            };
            let res = if agent == self.cfg.id {
                self.agent(op.clone())
            } else {
                bump(&self.counters.forwarded);
                match self.call(vec![(agent, Request::Agent(op.clone()))]).pop() {
                    Some(Ok(Response::Agent(r))) => r,
                    Some(Ok(other)) => AgentResult::Error(format!(
                        "node {agent} answered an agent request with {other:?}"
                    )),
                    // Sent, and no reply: the agent may have applied it. A write is not sent
                    // again (it could act twice, the second time over later writes).
                    Some(Err(e @ PeerError::NoReply { .. })) if !op.repeatable() => {
                        bump(&self.counters.writes_in_doubt);
                        return AgentResult::Error(format!(
                            "{e}: the request may or may not have been applied"
                        ));
                    }
                    Some(Err(_)) | None => AgentResult::NotAgent,
                }
            };
            if res != AgentResult::NotAgent {
                return res;
            }
            if Instant::now() >= deadline {
                return AgentResult::Error(format!(
                    "no agent of stripe {stripe} answers (views of the cluster disagree)"
                ));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Routes a key's operation.
    pub fn route_key(&self, op: AgentOp, key: &[u8]) -> AgentResult {
        self.route(self.placement.stripe_of(key), op)
    }

    fn down_members(&self, stripe: usize) -> Vec<usize> {
        let mut down: Vec<usize> = (0..self.n())
            .map(|p| self.placement.node_of(stripe, p))
            .filter(|&n| !self.is_up(n))
            .collect();
        down.dedup();
        down
    }

    fn down_positions(&self, stripe: usize) -> usize {
        (0..self.n())
            .filter(|&p| !self.is_up(self.placement.node_of(stripe, p)))
            .count()
    }

    fn unavailable(&self, stripe: usize) -> AgentResult {
        bump(&self.counters.server_errors);
        AgentResult::Error(format!(
            "stripe {stripe} unavailable: {} of {} chunk positions down (nodes {:?}), {} tolerates {}",
            self.down_positions(stripe),
            self.n(),
            self.down_members(stripe),
            self.cfg.code,
            self.parity()
        ))
    }

    /// `flush_all`: every node forgets items stored up to the flush time once it has passed.
    pub fn flush_all(&self, delay_secs: i64) {
        bump(&self.counters.cmd_flush);
        let now = time::now_micros();
        let at = if delay_secs > 0 {
            now + delay_secs as u64 * 1_000_000
        } else {
            now
        };
        let calls = (0..self.cfg.node_count)
            .map(|i| (i, Request::Flush { oldest_live_us: at }))
            .collect();
        self.call(calls);
    }

    // ---- agent ----

    fn key_lock(&self, key: &[u8]) -> parking_lot::MutexGuard<'_, ()> {
        self.key_locks[key_lock_index(key)].lock()
    }

    /// Runs `f` on this node's index of `stripe`, rebuilding it from the members' records when
    /// there is none (this node just became the agent, or its index was dropped).
    ///
    /// The rebuild asks the members for their records without holding the stripe's lock: no
    /// lock that the event loop takes is held over a wait on another node, whose own loop may
    /// be waiting for this node's loop to answer. Two threads may rebuild at once; the first
    /// index in is kept. A rebuilt index is kept only if this node led the stripe before and
    /// after the rebuild and heard enough members ([`Node::index_keepable`]); otherwise (an
    /// operation under way whose index was dropped meanwhile) `f` runs on it and it is dropped.
    fn with_index<T>(&self, stripe: usize, f: impl FnOnce(&mut StripeIndex) -> T) -> T {
        if let Some(ix) = lock(&self.stripes[stripe]).as_mut() {
            return f(ix);
        }
        let leading = self.leads(stripe);
        let mut built = self.rebuild_index(stripe);
        if !(leading && self.index_keepable(stripe)) {
            log::debug!("stripe {stripe}: rebuilt index not kept (leading before: {leading})");
            return f(&mut built);
        }
        f(lock(&self.stripes[stripe]).get_or_insert(built))
    }

    /// Whether an index of `stripe` just rebuilt may be kept: this node leads the stripe, and
    /// at most m of its positions are down (a member that did not answer the rebuild's `List`
    /// is down now). With more, values with fewer than k chunks among the members heard would
    /// be missing from it, and the index would answer misses for them.
    fn index_keepable(&self, stripe: usize) -> bool {
        self.leads(stripe) && self.down_positions(stripe) <= self.parity()
    }

    /// Makes sure the index of `stripe` exists before an operation starts on it: `None` when it
    /// does, or the answer when it could not be built and kept (more than m positions down, or
    /// the lease lost meanwhile).
    fn ensure_index(&self, stripe: usize) -> Option<AgentResult> {
        let unavailable = || self.down_positions(stripe) > self.parity();
        if lock(&self.stripes[stripe]).is_some() {
            return None;
        }
        if !unavailable() {
            self.with_index(stripe, |_| ());
            if lock(&self.stripes[stripe]).is_some() {
                return None;
            }
        }
        Some(if unavailable() {
            self.unavailable(stripe)
        } else {
            AgentResult::NotAgent
        })
    }

    fn rebuild_index(&self, stripe: usize) -> StripeIndex {
        bump(&self.counters.index_rebuilds);
        let mut ix = StripeIndex::new(self.n(), self.share_bytes());
        let mut nodes: Vec<usize> = self.placement.members(stripe);
        nodes.sort_unstable();
        nodes.dedup();
        let calls: Vec<(usize, Request)> = nodes
            .into_iter()
            .filter(|&n| self.is_up(n))
            .map(|n| {
                (
                    n,
                    Request::List {
                        stripe: stripe as u32,
                    },
                )
            })
            .collect();
        let mut headers: Vec<Header> = Vec::new();
        let mut deleted: HashMap<Vec<u8>, u64> = HashMap::new();
        let asked: Vec<usize> = calls.iter().map(|(n, _)| *n).collect();
        let replies = self.call(calls);
        log::debug!(
            "stripe {stripe}: index rebuilt from {asked:?}, {} of them answered",
            replies
                .iter()
                .filter(|r| matches!(r, Ok(Response::Headers(..))))
                .count()
        );
        for r in replies {
            if let Ok(Response::Headers(hs, tombs)) = r {
                headers.extend(
                    hs.iter()
                        .filter_map(|h| record::parse(h).ok().map(|(h, _)| h)),
                );
                for (key, version) in tombs {
                    ix.observe_version(version);
                    let at = deleted.entry(key).or_insert(0);
                    *at = (*at).max(version);
                }
            }
        }
        for h in &headers {
            ix.observe_version(h.version);
        }
        let now = time::now_secs();
        let replicas = self.replicas();
        for (key, a) in stripe::adopt(&headers, self.k()) {
            // Deleted after this version was written: a member that missed the delete (cut
            // off, stopped) still holds it, and it must not come back.
            if time::is_expired(a.exptime, now) || deleted.get(&key).is_some_and(|&d| d > a.version)
            {
                continue;
            }
            let (positions, charge) = index::charge(
                a.kind,
                key.len(),
                a.value_bytes,
                self.k(),
                self.n(),
                replicas,
            );
            let mut entry = Entry::new(
                a.version,
                a.value_bytes,
                a.flags,
                a.exptime,
                a.kind,
                a.version,
                positions,
                charge,
            );
            // Positions without this version's record (their node is down, missed the write
            // or holds another version) are filled in the background once their node is up.
            entry.holes = index::position_mask(positions) & !a.held;
            ix.adopt(&key, entry);
        }
        ix
    }

    fn replicas(&self) -> usize {
        (self.parity() + 1).min(self.n())
    }

    /// Runs an operation as the agent of its key's stripe.
    pub fn agent(&self, op: AgentOp) -> AgentResult {
        let key = match &op {
            AgentOp::Get { key, .. }
            | AgentOp::Store { key, .. }
            | AgentOp::Delete { key, .. }
            | AgentOp::Touch { key, .. }
            | AgentOp::Arith { key, .. }
            | AgentOp::Flip { key, .. }
            | AgentOp::Repair { key, .. } => key.clone(),
            AgentOp::Handover { stripe, to } => {
                let (s, to) = (*stripe as usize, *to as usize);
                if s >= self.cfg.node_count || to >= self.cfg.node_count {
                    return AgentResult::Error("bad handover".into());
                }
                *lock(&self.yielded[s]) = Some(to);
                *lock(&self.stripes[s]) = None;
                // Every operation of the stripe checks `leads` again under its key lock: once
                // each key lock has been free once, none of them is still under way.
                for l in &self.key_locks {
                    drop(l.lock());
                }
                return AgentResult::Ok;
            }
            AgentOp::Keys { stripe } => {
                let s = *stripe as usize;
                if s >= self.cfg.node_count || !self.leads(s) {
                    return AgentResult::NotAgent;
                }
                if let Some(refused) = self.ensure_index(s) {
                    return refused;
                }
                return self.with_index(s, |ix| {
                    AgentResult::Keys(ix.entries().map(|(k, e)| (k.clone(), e.version)).collect())
                });
            }
        };
        let stripe = self.placement.stripe_of(&key);
        if !self.leads(stripe) {
            return AgentResult::NotAgent;
        }
        let _key_guard = self.key_lock(&key);
        if !self.leads(stripe) {
            return AgentResult::NotAgent;
        }
        self.drop_stale_index(stripe);
        if let Some(refused) = self.ensure_index(stripe) {
            return refused;
        }
        let repeatable = op.repeatable();
        let res = self.agent_op(stripe, op);
        // The lease must still hold once the operation is done: otherwise another node may
        // have led the stripe meanwhile. A read is retried there by the front; a write may
        // have been applied (and adopted by that node), so it is in doubt, not run again.
        if !self.leads(stripe) {
            bump(&self.counters.lease_lost_ops);
            if repeatable {
                return AgentResult::NotAgent;
            }
            bump(&self.counters.writes_in_doubt);
            return AgentResult::Error(format!(
                "the lease of stripe {stripe} ran out during the write: it may or may not \
                 have been applied"
            ));
        }
        res
    }

    /// The operation of [`Node::agent`] once the stripe's lead and key lock are held.
    fn agent_op(&self, stripe: usize, op: AgentOp) -> AgentResult {
        // More than m positions down: the stripe's values may be unreadable and an index rebuilt
        // now may miss keys, so every operation fails with the reason (never a wrong miss).
        if self.down_positions(stripe) > self.parity() {
            return self.unavailable(stripe);
        }
        match op {
            AgentOp::Get {
                key,
                touch,
                degrade,
            } => self.op_get(stripe, &key, touch, degrade),
            AgentOp::Store {
                mode,
                key,
                flags,
                exptime,
                compare_cas,
                value,
            } => self.op_store(stripe, &key, mode, flags, exptime, compare_cas, value),
            AgentOp::Delete { key, compare_cas } => self.op_delete(stripe, &key, compare_cas),
            AgentOp::Touch { key, exptime } => {
                let Some(e) = self.lookup(stripe, &key) else {
                    return AgentResult::NotFound;
                };
                self.touch_entry(stripe, &key, &e, exptime);
                AgentResult::Touched
            }
            AgentOp::Arith { incr, key, delta } => self.op_arith(stripe, &key, incr, delta),
            AgentOp::Flip { key, position, bit } => {
                let Some(e) = self.lookup(stripe, &key) else {
                    return AgentResult::NotFound;
                };
                if position as usize >= e.positions {
                    return AgentResult::Error(format!(
                        "key has no chunk at position {position} (positions 0..{})",
                        e.positions
                    ));
                }
                let node = self.placement.node_of(stripe, position as usize);
                match self
                    .call(vec![(
                        node,
                        Request::Flip {
                            stripe: stripe as u32,
                            position,
                            key,
                            bit,
                        },
                    )])
                    .pop()
                {
                    Some(Ok(Response::Ack)) => AgentResult::Ok,
                    Some(Ok(Response::Nack(r))) => AgentResult::Error(r),
                    _ => AgentResult::Error(format!("node {node} unreachable")),
                }
            }
            AgentOp::Repair {
                key,
                version,
                position,
            } => {
                let Some(e) = self.lookup(stripe, &key) else {
                    return AgentResult::NotFound;
                };
                if e.version != version {
                    return AgentResult::Exists;
                }
                if position as usize >= e.positions {
                    return AgentResult::NotFound;
                }
                match self.repair_chunk(stripe, &key, &e, position as usize) {
                    Ok(data) => {
                        // The recovering node stores it.
                        self.with_index(stripe, |ix| {
                            ix.clear_holes(&key, e.version, index::bit(position as usize))
                        });
                        AgentResult::Record(record::encode(
                            &self.header(&key, &e, position as usize),
                            &data,
                        ))
                    }
                    Err(err) => AgentResult::Error(err),
                }
            }
            AgentOp::Keys { .. } | AgentOp::Handover { .. } => unreachable!("handled above"),
        }
    }

    /// The live entry of a key; an expired or flushed one is deleted on the members.
    fn lookup(&self, stripe: usize, key: &[u8]) -> Option<Entry> {
        let oldest = self.oldest_live_us.load(Ordering::Relaxed);
        let r = self.with_index(stripe, |ix| {
            ix.lookup(key, time::now_secs(), time::now_micros(), oldest)
        });
        match r {
            Ok(e) => e,
            Err((gone, e)) => {
                match gone {
                    Gone::Expired => bump(&self.counters.get_expired),
                    Gone::Flushed => bump(&self.counters.get_flushed),
                }
                self.delete_records(stripe, key, e.version + 1);
                None
            }
        }
    }

    fn member_nodes(&self, stripe: usize, positions: usize) -> Vec<usize> {
        let mut nodes: Vec<usize> = (0..positions)
            .map(|p| self.placement.node_of(stripe, p))
            .collect();
        nodes.sort_unstable();
        nodes.dedup();
        nodes
    }

    fn delete_records(&self, stripe: usize, key: &[u8], version: u64) {
        let calls = self
            .member_nodes(stripe, self.n())
            .into_iter()
            .filter(|&n| self.is_up(n))
            .map(|n| {
                (
                    n,
                    Request::Delete {
                        stripe: stripe as u32,
                        key: key.to_vec(),
                        version,
                    },
                )
            })
            .collect();
        self.call(calls);
    }

    fn touch_entry(&self, stripe: usize, key: &[u8], e: &Entry, exptime: i64) {
        let abs = time::absolute_exptime(exptime, time::now_secs());
        self.with_index(stripe, |ix| ix.set_exptime(key, abs));
        let calls = self
            .member_nodes(stripe, e.positions)
            .into_iter()
            .filter(|&n| self.is_up(n))
            .map(|n| {
                (
                    n,
                    Request::Touch {
                        stripe: stripe as u32,
                        key: key.to_vec(),
                        version: e.version,
                        exptime: abs,
                    },
                )
            })
            .collect();
        self.call(calls);
    }

    fn op_get(
        &self,
        stripe: usize,
        key: &[u8],
        touch: Option<i64>,
        degrade: Option<u8>,
    ) -> AgentResult {
        let Some(mut e) = self.lookup(stripe, key) else {
            return AgentResult::Miss;
        };
        match self.read_value(stripe, key, &e, degrade) {
            Ok(value) => {
                if let Some(t) = touch {
                    self.touch_entry(stripe, key, &e, t);
                    e.exptime = time::absolute_exptime(t, time::now_secs());
                }
                AgentResult::Value {
                    flags: e.flags,
                    cas: e.version,
                    exptime: e.exptime,
                    value,
                }
            }
            Err(reason) => {
                bump(&self.counters.server_errors);
                AgentResult::Error(reason)
            }
        }
    }

    /// Fetches records of `e.version` at `positions` and checks them: the good ones' data, and
    /// the positions that are missing, unreachable, of another version or corrupt (the latter
    /// flagged `true`).
    fn fetch(&self, stripe: usize, key: &[u8], e: &Entry, positions: &[usize]) -> Fetched {
        let calls = positions
            .iter()
            .map(|&p| {
                (
                    self.placement.node_of(stripe, p),
                    Request::Get {
                        stripe: stripe as u32,
                        position: p as u8,
                        key: key.to_vec(),
                        version: e.version,
                    },
                )
            })
            .collect();
        let mut good = Vec::new();
        let mut bad = Vec::new();
        for (&p, r) in positions.iter().zip(self.call(calls)) {
            match r {
                Ok(Response::Record(Some(bytes))) => match record::parse(&bytes) {
                    Ok((h, data))
                        if h.version == e.version
                            && h.key == key
                            && h.chunk_index as usize == p =>
                    {
                        good.push((p, data.to_vec()))
                    }
                    Ok(_) => {
                        bump(&self.counters.version_mismatches);
                        bad.push((p, false));
                    }
                    Err(_) => {
                        bump(&self.counters.crc_errors);
                        bad.push((p, true));
                    }
                },
                _ => bad.push((p, false)),
            }
        }
        // A member without this version's record (or unreachable) is a hole to fill once it is
        // up; a corrupt one is rewritten by the read itself.
        let holes = bad
            .iter()
            .filter(|(_, corrupt)| !corrupt)
            .fold(0u64, |m, (p, _)| m | index::bit(*p));
        if holes != 0 {
            self.with_index(stripe, |ix| ix.mark_holes(key, e.version, holes));
        }
        (good, bad)
    }

    /// Reads a value: the data chunks of one version, or a degraded read through a repair
    /// when some are missing (`degrade` forces that position to be treated as missing).
    fn read_value(
        &self,
        stripe: usize,
        key: &[u8],
        e: &Entry,
        degrade: Option<u8>,
    ) -> Result<Vec<u8>, String> {
        if let Some(p) = degrade {
            if p as usize >= e.positions {
                return Err(format!(
                    "cannot force a degraded read of position {p}: the value has positions 0..{}",
                    e.positions
                ));
            }
            bump(&self.counters.forced_degraded_reads);
        }
        let usable =
            |p: usize| Some(p as u8) != degrade && self.is_up(self.placement.node_of(stripe, p));
        match e.kind {
            Kind::Replica => {
                // This node's replica first, then the others in position order.
                let mut order: Vec<usize> = (0..e.positions).filter(|&p| usable(p)).collect();
                order.sort_by_key(|&p| self.placement.node_of(stripe, p) != self.cfg.id);
                let mut corrupt = Vec::new();
                for p in order {
                    let (good, bad) = self.fetch(stripe, key, e, &[p]);
                    if let Some((_, data)) = good.into_iter().next() {
                        if degrade.is_some() || !corrupt.is_empty() {
                            bump(&self.counters.degraded_reads);
                        }
                        for c in corrupt {
                            self.write_back(stripe, key, e, c, &data);
                        }
                        return Ok(data);
                    }
                    if bad.first().is_some_and(|b| b.1) {
                        corrupt.push(p);
                    }
                }
                Err(format!(
                    "no replica of the value is readable: {} of {} members of stripe {stripe} down (nodes {:?})",
                    self.down_positions(stripe),
                    self.n(),
                    self.down_members(stripe)
                ))
            }
            Kind::Coded => {
                let k = self.k();
                let wanted: Vec<usize> = (0..k).collect();
                let mut first: Vec<usize> = wanted.iter().copied().filter(|&p| usable(p)).collect();
                // The normal read on the engine: the stripe's read template brings the data
                // chunks other nodes hold; this node's own are read locally.
                let mut planned = Vec::new();
                let plan = match self.plan_path(stripe, k) {
                    Some(x) if first.len() == k => Some(x),
                    _ => None,
                };
                if let Some(x) = plan {
                    let chunk_bytes = (e.value_bytes as usize).div_ceil(k);
                    match x.read(
                        self.cfg.code,
                        self.cfg.mode,
                        &self.placement,
                        stripe,
                        key,
                        e.version,
                        chunk_bytes,
                        &|n| self.is_up(n),
                    ) {
                        Ok(chunks) => {
                            x.counters.read_plan_runs.fetch_add(1, Ordering::Relaxed);
                            planned = chunks;
                            first.retain(|&p| self.placement.node_of(stripe, p) == self.cfg.id);
                        }
                        Err(reason) => {
                            x.counters
                                .read_plan_fallbacks
                                .fetch_add(1, Ordering::Relaxed);
                            log::warn!(
                                "node {}: read of stripe {stripe} over peer messages instead \
                                 of its plan: {reason}",
                                self.cfg.id
                            );
                            // A member marked down meanwhile (the run was given up for it) is
                            // not asked again: the read goes degraded without it.
                            first.retain(|&p| usable(p));
                        }
                    }
                } else if let (Some(x), None) = (self.plans.get(), degrade) {
                    x.counters
                        .read_plan_fallbacks
                        .fetch_add(1, Ordering::Relaxed);
                }
                let (mut good, bad) = self.fetch(stripe, key, e, &first);
                good.extend(planned);
                let mut have: Vec<Option<Vec<u8>>> = vec![None; self.n()];
                for (p, d) in good {
                    have[p] = Some(d);
                }
                let mut failed: BTreeSet<usize> = (0..self.n()).filter(|&p| !usable(p)).collect();
                let mut corrupt: Vec<usize> = Vec::new();
                for (p, c) in bad {
                    failed.insert(p);
                    if c {
                        corrupt.push(p);
                    }
                }
                let missing: Vec<usize> = wanted
                    .iter()
                    .copied()
                    .filter(|&p| have[p].is_none())
                    .collect();
                if missing.is_empty() {
                    let data: Vec<&[u8]> = have[..k]
                        .iter()
                        .map(|c| c.as_deref().expect("have"))
                        .collect();
                    return Ok(stripe::join(&data, e.value_bytes as usize));
                }
                bump(&self.counters.degraded_reads);
                if let Some(value) = self.plan_read(
                    stripe,
                    key,
                    e,
                    degrade,
                    &failed,
                    &missing,
                    &corrupt,
                    have.clone(),
                ) {
                    return Ok(value);
                }
                // The agent-side repair: the scheme's minimal read set among the positions
                // left, widened each time a helper fails too.
                loop {
                    let available: Vec<usize> =
                        (0..self.n()).filter(|p| !failed.contains(p)).collect();
                    let set = self.codec.repair_set(&available, &missing).map_err(|err| {
                        format!(
                            "value of stripe {stripe} unreadable ({err}): {} of {} members down (nodes {:?}), {} tolerates {}",
                            self.down_positions(stripe),
                            self.n(),
                            self.down_members(stripe),
                            self.cfg.code,
                            self.parity()
                        )
                    })?;
                    let need: Vec<usize> =
                        set.iter().copied().filter(|&p| have[p].is_none()).collect();
                    if need.is_empty() {
                        let chunk_bytes = (e.value_bytes as usize).div_ceil(k);
                        let chunks: Vec<Option<&[u8]>> = (0..self.n())
                            .map(|p| {
                                if set.contains(&p) {
                                    have[p].as_deref()
                                } else {
                                    None
                                }
                            })
                            .collect();
                        let mut outs = vec![vec![0u8; chunk_bytes]; missing.len()];
                        if chunk_bytes > 0 {
                            let mut refs: Vec<&mut [u8]> =
                                outs.iter_mut().map(|o| o.as_mut_slice()).collect();
                            self.codec
                                .reconstruct(&chunks, &missing, &mut refs)
                                .map_err(|err| format!("repair failed: {err}"))?;
                        }
                        return Ok(self.accept_repaired(
                            stripe, key, e, degrade, &missing, &corrupt, outs, &mut have,
                        ));
                    }
                    let (good, bad) = self.fetch(stripe, key, e, &need);
                    for (p, d) in good {
                        have[p] = Some(d);
                    }
                    for (p, c) in bad {
                        failed.insert(p);
                        if c {
                            corrupt.push(p);
                        }
                    }
                }
            }
        }
    }

    /// A degraded read through the scheme's repair plan on the engine: `None` (with the reason
    /// logged) when there is no engine path or the plan cannot run, and the caller repairs at
    /// the agent.
    #[allow(clippy::too_many_arguments)]
    fn plan_read(
        &self,
        stripe: usize,
        key: &[u8],
        e: &Entry,
        degrade: Option<u8>,
        failed: &BTreeSet<usize>,
        missing: &[usize],
        corrupt: &[usize],
        mut have: Vec<Option<Vec<u8>>>,
    ) -> Option<Vec<u8>> {
        let x = self.plans.get()?;
        let k = self.k();
        let chunk_bytes = (e.value_bytes as usize).div_ceil(k);
        let lost: Vec<usize> = failed.iter().copied().collect();
        let members: Vec<usize> = (0..self.n())
            .map(|p| self.placement.node_of(stripe, p))
            .collect();
        let outs = match x.repair(
            self.cfg.code,
            self.cfg.scheme,
            self.cfg.mode,
            &members,
            self.cfg.id,
            stripe,
            &lost,
            missing,
            key,
            e.version,
            chunk_bytes,
            &|n| self.is_up(n),
        ) {
            Ok(o) => o,
            Err(reason) => {
                x.counters
                    .degraded_plan_fallbacks
                    .fetch_add(1, Ordering::Relaxed);
                log::warn!(
                    "node {}: degraded read of stripe {stripe} repaired at the agent instead of \
                     on the engine: {reason}",
                    self.cfg.id
                );
                return None;
            }
        };
        x.counters
            .degraded_plan_runs
            .fetch_add(1, Ordering::Relaxed);
        Some(self.accept_repaired(stripe, key, e, degrade, missing, corrupt, outs, &mut have))
    }

    /// Takes the repaired chunks of a degraded read (from the agent's repair or the engine's
    /// plan): counts them, writes back those the rules say — TriEC every repaired chunk
    /// (in-band recovery) but the one a request forced missing, every scheme a chunk that
    /// failed its CRC — and joins the value from the data chunks.
    #[allow(clippy::too_many_arguments)]
    fn accept_repaired(
        &self,
        stripe: usize,
        key: &[u8],
        e: &Entry,
        degrade: Option<u8>,
        missing: &[usize],
        corrupt: &[usize],
        outs: Vec<Vec<u8>>,
        have: &mut [Option<Vec<u8>>],
    ) -> Vec<u8> {
        self.counters
            .chunks_repaired
            .fetch_add(missing.len() as u64, Ordering::Relaxed);
        for (p, c) in missing.iter().zip(outs) {
            let back = corrupt.contains(p)
                || (self.cfg.scheme == Scheme::Triec && degrade != Some(*p as u8));
            if back && self.is_up(self.placement.node_of(stripe, *p)) {
                self.write_back(stripe, key, e, *p, &c);
            }
            have[*p] = Some(c);
        }
        let data: Vec<&[u8]> = have[..self.k()]
            .iter()
            .map(|c| c.as_deref().expect("have"))
            .collect();
        stripe::join(&data, e.value_bytes as usize)
    }

    /// Rebuilds the data of one position of a value (recovery) from the code's minimal read
    /// set among the other positions (LRC: the position's local group when it is whole),
    /// widened each time a helper fails; a replica is copied from another replica.
    fn repair_chunk(
        &self,
        stripe: usize,
        key: &[u8],
        e: &Entry,
        target: usize,
    ) -> Result<Vec<u8>, String> {
        let usable = |p: usize| p != target && self.is_up(self.placement.node_of(stripe, p));
        if e.kind == Kind::Replica {
            for p in (0..e.positions).filter(|&p| usable(p)) {
                if let Some((_, data)) = self.fetch(stripe, key, e, &[p]).0.into_iter().next() {
                    return Ok(data);
                }
            }
            return Err(format!(
                "no other replica of the value is readable in stripe {stripe}"
            ));
        }
        let n = self.n();
        let mut failed: BTreeSet<usize> = (0..n).filter(|&p| !usable(p)).collect();
        let mut have: Vec<Option<Vec<u8>>> = vec![None; n];
        loop {
            let available: Vec<usize> = (0..n).filter(|p| !failed.contains(p)).collect();
            let set = self
                .codec
                .repair_set(&available, &[target])
                .map_err(|err| {
                    format!("position {target} of stripe {stripe} cannot be rebuilt: {err}")
                })?;
            let need: Vec<usize> = set.iter().copied().filter(|&p| have[p].is_none()).collect();
            if need.is_empty() {
                let chunk_bytes = (e.value_bytes as usize).div_ceil(self.k());
                let mut out = vec![0u8; chunk_bytes];
                if chunk_bytes > 0 {
                    let chunks: Vec<Option<&[u8]>> = (0..n)
                        .map(|p| {
                            if set.contains(&p) {
                                have[p].as_deref()
                            } else {
                                None
                            }
                        })
                        .collect();
                    self.codec
                        .reconstruct(&chunks, &[target], &mut [out.as_mut_slice()])
                        .map_err(|err| format!("repair failed: {err}"))?;
                }
                bump(&self.counters.chunks_repaired);
                return Ok(out);
            }
            let (good, bad) = self.fetch(stripe, key, e, &need);
            for (p, d) in good {
                have[p] = Some(d);
            }
            for (p, _) in bad {
                failed.insert(p);
            }
        }
    }

    fn header(&self, key: &[u8], e: &Entry, position: usize) -> Header {
        Header {
            kind: e.kind,
            chunk_index: position as u8,
            key: key.to_vec(),
            version: e.version,
            value_bytes: e.value_bytes,
            flags: e.flags,
            exptime: e.exptime,
        }
    }

    fn write_back(
        &self,
        stripe: usize,
        key: &[u8],
        e: &Entry,
        position: usize,
        data: &[u8],
    ) -> bool {
        let rec = record::encode(&self.header(key, e, position), data);
        let watermark = self.with_index(stripe, |ix| ix.watermark());
        let node = self.placement.node_of(stripe, position);
        if let Some(Ok(Response::Ack)) = self
            .call(vec![(
                node,
                Request::Put {
                    stripe: stripe as u32,
                    watermark,
                    record: rec,
                },
            )])
            .pop()
        {
            bump(&self.counters.chunks_written_back);
            return true;
        }
        false
    }

    /// The records of a value at every position that holds it.
    fn records_of(&self, key: &[u8], e: &Entry, value: &[u8]) -> Result<Vec<Vec<u8>>, String> {
        match e.kind {
            Kind::Replica => Ok((0..e.positions)
                .map(|p| record::encode(&self.header(key, e, p), value))
                .collect()),
            Kind::Coded => {
                let chunks = stripe::encode(&self.codec, value)
                    .map_err(|err| format!("encode failed: {err}"))?;
                Ok(chunks
                    .iter()
                    .enumerate()
                    .map(|(p, c)| record::encode(&self.header(key, e, p), c))
                    .collect())
            }
        }
    }

    /// How a value is stored: coded or replicated (by its size), on how many positions, and
    /// the bytes it charges at each.
    fn layout_of(&self, key: &[u8], value: &[u8]) -> (Kind, usize, u64) {
        let kind = if value.len() < self.cfg.replicate_below_bytes {
            Kind::Replica
        } else {
            Kind::Coded
        };
        let (positions, charge) = index::charge(
            kind,
            key.len(),
            value.len() as u64,
            self.k(),
            self.n(),
            self.replicas(),
        );
        (kind, positions, charge)
    }

    /// Writes a value as a new version: evicts LRU values if the stripe's share is full, sends
    /// every live member its record and commits once every live member acked.
    fn write(
        &self,
        stripe: usize,
        key: &[u8],
        value: &[u8],
        flags: u32,
        exptime_abs: i64,
    ) -> Result<u64, String> {
        let down = self.down_positions(stripe);
        if down > self.parity() {
            bump(&self.counters.server_errors);
            return Err(match self.unavailable(stripe) {
                AgentResult::Error(r) => r,
                _ => unreachable!(),
            });
        }
        let (kind, positions, charge) = self.layout_of(key, value);
        let now_us = time::now_micros();
        let reserved = self.with_index(stripe, |ix| {
            let old = ix.remove(key);
            match ix.reserve(positions, charge) {
                Ok(victims) => {
                    let version = ix.next_version(now_us);
                    Ok((old, victims, version, ix.watermark()))
                }
                Err(e) => {
                    if let Some(o) = old {
                        ix.adopt(key, o);
                    }
                    Err(e)
                }
            }
        });
        let (old, victims, version, watermark) = match reserved {
            Ok(r) => r,
            Err(err) => return Err(format!("out of memory storing object: {err}")),
        };
        for (vkey, v) in &victims {
            self.delete_records(stripe, vkey, v.version + 1);
        }
        let mut entry = Entry::new(
            version,
            value.len() as u64,
            flags,
            exptime_abs,
            kind,
            now_us,
            positions,
            charge,
        );
        // The write on the engine: the stripe's write template, when this node is its
        // designated agent and every member is up; otherwise (or if the run fails) the
        // records go out as peer messages.
        let mut planned = false;
        if kind == Kind::Coded {
            match self.plan_path(stripe, self.n()) {
                Some(x) => {
                    let meta = WriteMeta {
                        value_bytes: value.len() as u64,
                        flags,
                        exptime: exptime_abs,
                        watermark,
                    };
                    match x.write(
                        self.cfg.code,
                        self.cfg.mode,
                        &self.placement,
                        stripe,
                        key,
                        version,
                        value,
                        meta,
                        &|n| self.is_up(n),
                    ) {
                        Ok(()) => {
                            x.counters.write_plan_runs.fetch_add(1, Ordering::Relaxed);
                            planned = true;
                        }
                        Err(reason) => {
                            x.counters
                                .write_plan_fallbacks
                                .fetch_add(1, Ordering::Relaxed);
                            log::warn!(
                                "node {}: write of stripe {stripe} over peer messages instead \
                                 of its plan: {reason}",
                                self.cfg.id
                            );
                        }
                    }
                }
                None => {
                    if let Some(x) = self.plans.get() {
                        x.counters
                            .write_plan_fallbacks
                            .fetch_add(1, Ordering::Relaxed);
                    }
                }
            }
        }
        let recs = if planned {
            Vec::new()
        } else {
            match self.records_of(key, &entry, value) {
                Ok(r) => r,
                Err(err) => {
                    self.with_index(stripe, |ix| {
                        ix.release(positions, charge);
                        ix.finish(version);
                        if let Some(o) = old {
                            ix.adopt(key, o);
                        }
                    });
                    return Err(err);
                }
            }
        };
        let (sent, calls): (Vec<usize>, Vec<(usize, Request)>) = recs
            .into_iter()
            .enumerate()
            .filter(|(p, _)| self.is_up(self.placement.node_of(stripe, *p)))
            .map(|(p, rec)| {
                (
                    p,
                    (
                        self.placement.node_of(stripe, p),
                        Request::Put {
                            stripe: stripe as u32,
                            watermark,
                            record: rec,
                        },
                    ),
                )
            })
            .unzip();
        // A planned write was acked by every member; a peer write by those that answered.
        let mut stored = if planned {
            index::position_mask(positions)
        } else {
            0
        };
        let mut nacks = Vec::new();
        for (p, r) in sent.into_iter().zip(self.call(calls)) {
            match r {
                Ok(Response::Ack) => stored |= index::bit(p),
                Ok(Response::Nack(why)) => nacks.push(why),
                Ok(other) => nacks.push(format!("unexpected reply {other:?}")),
                Err(_) => {} // marked down: counted below
            }
        }
        let down = self.down_positions(stripe);
        if down > self.parity() || !nacks.is_empty() {
            self.with_index(stripe, |ix| {
                ix.release(positions, charge);
                ix.finish(version);
                if let Some(o) = old {
                    ix.adopt(key, o);
                }
            });
            bump(&self.counters.server_errors);
            return Err(if nacks.is_empty() {
                match self.unavailable(stripe) {
                    AgentResult::Error(r) => format!("write not stored: {r}"),
                    _ => unreachable!(),
                }
            } else {
                format!("write not stored: a member refused its chunk: {}", nacks[0])
            });
        }
        entry.holes = index::position_mask(positions) & !stored;
        if entry.holes != 0 {
            bump(&self.counters.writes_with_holes);
        }
        self.with_index(stripe, |ix| {
            ix.commit(key, entry);
            ix.finish(version);
        });
        // A value that now uses fewer positions (coded -> replicated) leaves older records at
        // the others: delete them (records of the new version are kept).
        if old.as_ref().is_some_and(|o| o.positions > positions) {
            let calls = (positions..self.n())
                .map(|p| self.placement.node_of(stripe, p))
                .filter(|&n| self.is_up(n))
                .map(|n| {
                    (
                        n,
                        Request::Delete {
                            stripe: stripe as u32,
                            key: key.to_vec(),
                            version,
                        },
                    )
                })
                .collect();
            self.call(calls);
        }
        bump(&self.counters.total_items);
        Ok(version)
    }

    #[allow(clippy::too_many_arguments)]
    fn op_store(
        &self,
        stripe: usize,
        key: &[u8],
        mode: StoreMode,
        flags: u32,
        exptime: i64,
        compare_cas: Option<u64>,
        value: Vec<u8>,
    ) -> AgentResult {
        let current = self.lookup(stripe, key);
        let compare = if mode == StoreMode::Cas {
            compare_cas.or(Some(0))
        } else {
            compare_cas
        };
        match semantics::decide(mode, current.as_ref(), compare) {
            Decision::NotStored => return AgentResult::NotStored,
            Decision::Exists => return AgentResult::Exists,
            Decision::NotFound => return AgentResult::NotFound,
            Decision::Proceed => {}
        }
        let (value, flags, exptime_abs) = match (mode, &current) {
            (StoreMode::Append | StoreMode::Prepend, Some(e)) => {
                let cur = match self.read_value(stripe, key, e, None) {
                    Ok(v) => v,
                    Err(r) => return AgentResult::Error(r),
                };
                if cur.len() + value.len() > self.cfg.item_size_max_bytes {
                    // As a `set` refused for its size: the value the write meant to change
                    // is not left behind (memcached 1.6.18 keeps it and answers NOT_STORED).
                    return match self.op_delete(stripe, key, None) {
                        AgentResult::Deleted | AgentResult::NotFound => {
                            AgentResult::Error(TOO_LARGE.into())
                        }
                        other => other,
                    };
                }
                (semantics::combine(mode, &cur, &value), e.flags, e.exptime)
            }
            _ => (
                value,
                flags,
                time::absolute_exptime(exptime, time::now_secs()),
            ),
        };
        if time::is_expired(exptime_abs, time::now_secs()) {
            // memcached stores it and it is gone at once: the old value is replaced by nothing.
            if let Some(e) = current {
                self.with_index(stripe, |ix| ix.remove(key));
                self.delete_records(stripe, key, e.version + 1);
            }
            return AgentResult::Stored { cas: 0 };
        }
        match self.write(stripe, key, &value, flags, exptime_abs) {
            Ok(cas) => AgentResult::Stored { cas },
            Err(r) => AgentResult::Error(r),
        }
    }

    fn op_delete(&self, stripe: usize, key: &[u8], compare_cas: Option<u64>) -> AgentResult {
        let Some(e) = self.lookup(stripe, key) else {
            return AgentResult::NotFound;
        };
        if compare_cas.is_some_and(|c| c != e.version) {
            return AgentResult::Exists;
        }
        let version = self.with_index(stripe, |ix| {
            ix.remove(key);
            let v = ix.next_version(time::now_micros());
            ix.finish(v);
            v
        });
        self.delete_records(stripe, key, version);
        AgentResult::Deleted
    }

    fn op_arith(&self, stripe: usize, key: &[u8], incr: bool, delta: u64) -> AgentResult {
        let Some(e) = self.lookup(stripe, key) else {
            return AgentResult::NotFound;
        };
        let cur = match self.read_value(stripe, key, &e, None) {
            Ok(v) => v,
            Err(r) => return AgentResult::Error(r),
        };
        let op = if incr {
            proto::ArithOp::Incr
        } else {
            proto::ArithOp::Decr
        };
        let Ok(r) = proto::incr_decr(&cur, op, delta) else {
            return AgentResult::NonNumeric;
        };
        match self.write(stripe, key, &r.value, e.flags, e.exptime) {
            Ok(cas) => AgentResult::Number {
                number: r.number,
                cas,
            },
            Err(reason) => AgentResult::Error(reason),
        }
    }

    /// Deletes expired and flushed values of the stripes this node leads (periodic expiry).
    pub fn sweep(&self) {
        let oldest = self.oldest_live_us.load(Ordering::Relaxed);
        for s in 0..self.cfg.node_count {
            let dead = {
                let mut g = lock(&self.stripes[s]);
                match g.as_mut() {
                    Some(ix) => ix.sweep(time::now_secs(), time::now_micros(), oldest),
                    None => continue,
                }
            };
            for (key, e) in dead {
                bump(&self.counters.expired_unfetched);
                let _g = self.key_lock(&key);
                self.delete_records(s, &key, e.version + 1);
            }
        }
    }

    /// Fills holes of the stripes this node leads (records a member lacks because it was down
    /// or stalled during a write, or answered a read with another version) at members that
    /// are up and ready (a recovering node rebuilds its own), rebuilt from the other positions
    /// and stored there; at most `budget_bytes` of records per call (the recovery rate over
    /// one sweep period). Returns the bytes stored.
    pub fn fill_holes(&self, budget_bytes: u64) -> u64 {
        let mut done = 0u64;
        for s in 0..self.cfg.node_count {
            if !self.leads(s) {
                continue;
            }
            let view = self.view();
            let wanted = (0..self.n())
                .filter(|&p| {
                    let node = self.placement.node_of(s, p);
                    view[node].0 && view[node].1
                })
                .fold(0u64, |m, p| m | index::bit(p));
            let todo = {
                let g = lock(&self.stripes[s]);
                match g.as_ref() {
                    Some(ix) => ix.holes(wanted, 256),
                    None => continue,
                }
            };
            for (key, version, holes) in todo {
                if done >= budget_bytes {
                    return done;
                }
                let _g = self.key_lock(&key);
                if !self.leads(s) {
                    break;
                }
                let Some(e) = self.lookup(s, &key).filter(|e| e.version == version) else {
                    continue;
                };
                for p in (0..e.positions).filter(|&p| holes & e.holes & index::bit(p) != 0) {
                    let Ok(data) = self.repair_chunk(s, &key, &e, p) else {
                        continue;
                    };
                    if self.write_back(s, &key, &e, p, &data) {
                        self.with_index(s, |ix| ix.clear_holes(&key, version, index::bit(p)));
                        bump(&self.counters.holes_filled);
                        done += data.len() as u64;
                    }
                }
            }
        }
        done
    }

    /// Holes of the stripes this node leads, waiting to be filled.
    pub fn holes_pending(&self) -> u64 {
        self.stripes
            .iter()
            .map(|g| lock(g).as_ref().map_or(0, |ix| ix.hole_count()))
            .sum()
    }

    // ---- recovery ----

    /// Rebuilds every record this node must hold, stripe by stripe, from the acting agents,
    /// rate-limited; then the node is ready (it may lead its stripe again).
    fn recover(&self) {
        std::thread::sleep(self.cfg.heartbeat * 3);
        let me = self.cfg.id;
        let started = Instant::now();
        let mut bytes_done: u64 = 0;
        for s in self.placement.stripes_of(me) {
            let positions = self.placement.positions_of(s, me);
            let keys = loop {
                match self.route(s, AgentOp::Keys { stripe: s as u32 }) {
                    AgentResult::Keys(keys) => break keys,
                    _ => std::thread::sleep(Duration::from_millis(200)),
                }
            };
            self.counters
                .recovery_keys_total
                .fetch_add(keys.len() as u64, Ordering::Relaxed);
            for (key, version) in keys {
                for &p in &positions {
                    let held = lock(&self.store)
                        .get_latest(s as u32, p as u8, &key)
                        .and_then(|r| record::parse_header(r).ok())
                        .is_some_and(|(h, _)| h.version >= version);
                    if held {
                        continue;
                    }
                    if let AgentResult::Record(rec) = self.route(
                        s,
                        AgentOp::Repair {
                            key: key.clone(),
                            version,
                            position: p as u8,
                        },
                    ) {
                        bytes_done += rec.len() as u64;
                        self.counters
                            .recovery_bytes
                            .fetch_add(rec.len() as u64, Ordering::Relaxed);
                        let _ = lock(&self.store).put(s as u32, rec, 0);
                    }
                }
                bump(&self.counters.recovery_keys_done);
                // Rate limit: stay under recovery_bytes_per_s on average.
                let rate = self.cfg.recovery_bytes_per_s.max(1);
                let due = Duration::from_secs_f64(bytes_done as f64 / rate as f64);
                let spent = started.elapsed();
                if due > spent {
                    std::thread::sleep(due - spent);
                }
            }
        }
        // Take back the stripes this node will lead once ready from their acting agents.
        for s in 0..self.cfg.node_count {
            let view = self.view();
            let will_lead = self
                .placement
                .agent_of(s, |n| n == me || (view[n].0 && view[n].1))
                == Some(me);
            if !will_lead {
                continue;
            }
            while let Some(acting) = self.agent_of(s) {
                let handed = self.call(vec![(
                    acting,
                    Request::Agent(AgentOp::Handover {
                        stripe: s as u32,
                        to: me as u32,
                    }),
                )]);
                if matches!(handed.first(), Some(Ok(Response::Agent(AgentResult::Ok)))) {
                    break;
                }
                std::thread::sleep(Duration::from_millis(50));
            }
        }
        self.ready.store(true, Ordering::Relaxed);
        *lock(&self.recovery) = RecoveryState::Done;
    }

    // ---- reporting ----

    /// Items and value bytes of the stripes this node leads; evictions; footprint
    /// (value bytes coded, replicated; record bytes coded, replicated).
    pub fn agent_totals(&self) -> (u64, u64, u64, [u64; 4]) {
        let (mut items, mut bytes, mut evictions) = (0, 0, 0);
        let mut fp = [0u64; 4];
        for s in &self.stripes {
            if let Some(ix) = lock(s).as_ref() {
                items += ix.len() as u64;
                evictions += ix.evictions;
                let f = ix.footprint();
                bytes += f[0] + f[1];
                for i in 0..4 {
                    fp[i] += f[i];
                }
            }
        }
        (items, bytes, evictions, fp)
    }

    /// The state of a stripe in this node's view: `whole`, `recovering` (a member is
    /// rebuilding), `degraded` (≤ m positions down) or `unavailable`.
    pub fn stripe_state(&self, stripe: usize) -> &'static str {
        let view = self.view();
        let down = (0..self.n())
            .filter(|&p| !view[self.placement.node_of(stripe, p)].0)
            .count();
        let recovering = (0..self.n()).any(|p| {
            let v = view[self.placement.node_of(stripe, p)];
            v.0 && !v.1
        });
        crate::placement::stripe_state(down, self.parity(), recovering)
    }
}
