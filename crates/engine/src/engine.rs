//! The engine thread, its work queue and its completion queue. See `docs/engine.md`.

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, PoisonError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::part::{Outgoing, PartRun};
use crate::pool::BufferPool;
use crate::transport::{Event, NodeId, Payload, Transport, Waker};
use crate::wire::{Header, Kind};
use crate::EngineError;
use graph::part::ChunkRef;

/// Frames that arrive for an operation before it is posted wait here, up to this many bytes
/// in all; beyond it the operation's frames are dropped and the operation fails when posted.
const EARLY_LIMIT_BYTES: usize = 512 << 20;
/// Held frames of an operation that is not posted within this time are dropped (a runner
/// that died between sending `start` to some nodes and to others, or a late duplicate).
const EARLY_TIMEOUT: Duration = Duration::from_secs(60);
/// Abort reasons longer than this are cut (they travel in one frame).
const MAX_REASON_BYTES: usize = 4096;
/// Operations remembered as finished, so that late frames for them are dropped.
const FINISHED_MEMORY: usize = 4096;
/// Above this many bytes queued in one turn the engine writes to the sockets before it
/// continues, so computing the next slice overlaps sending the last.
const FLUSH_BYTES: usize = 32 << 10;

/// How a primitive is driven (docs/engine.md, "Coherent mode" and "Incoherent mode").
#[derive(
    Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize, serde::Deserialize,
)]
pub enum Mode {
    /// The whole chain is posted once; the engine thread triggers every step.
    Coherent,
    /// The application thread triggers every step and waits for each.
    Incoherent,
}

impl Mode {
    pub fn name(self) -> &'static str {
        match self {
            Mode::Coherent => "coherent",
            Mode::Incoherent => "incoherent",
        }
    }
}

/// Work requests, posted by the application to the engine thread.
#[derive(Debug)]
pub enum WorkRequest {
    /// Coherent: the chains of all of this node's vertices of operation `op`. Each is a
    /// [`PartRun`]: per slice, `WAIT`(incoming edges' completions, count) → `CALC` → `SEND`.
    Chain {
        op: u64,
        parts: Vec<PartRun>,
        deadline: Instant,
    },
    /// Incoherent `RECV`: every data slice of `op` completes as a [`Completion::Recv`].
    /// `peers` are the nodes the operation exchanges data with (their loss fails it).
    Recv {
        op: u64,
        peers: Vec<NodeId>,
        deadline: Instant,
    },
    /// `SEND` one frame; completes with [`Completion::SendDone`] when the transport has it.
    Send {
        op: u64,
        peer: NodeId,
        header: Header,
        payload: Payload,
        signal: bool,
    },
    /// The operation is finished on this node (incoherent); late frames are dropped.
    Release { op: u64 },
    /// Fail `op` on this node: abort its peers and complete with [`Completion::Failed`].
    Fail { op: u64, error: EngineError },
    /// Open the connection to a peer.
    Connect { peer: NodeId, addr: String },
    /// Start attachments of operation `op` (post it before the operation): the first data
    /// frame of `op` to each listed peer goes out as a [`Kind::Start`] frame carrying that
    /// peer's `start` control payload, so that the frame starts the run there.
    Attach {
        op: u64,
        starts: Vec<(NodeId, Vec<u8>)>,
    },
    /// Stop the engine thread.
    Shutdown,
}

/// Completions, delivered to the application.
#[derive(Debug)]
pub enum Completion {
    /// Coherent: every chain of `op` on this node is complete; the stored outputs.
    ChainDone {
        op: u64,
        results: Vec<(ChunkRef, Arc<Vec<u8>>)>,
    },
    /// `op` failed on this node.
    Failed {
        op: u64,
        error: EngineError,
    },
    /// Incoherent: one data slice of `op`.
    Recv {
        op: u64,
        from: NodeId,
        edge: u32,
        slice: u32,
        payload: Vec<u8>,
    },
    /// A signalled `SEND` is in the transport's hands (or failed).
    SendDone {
        op: u64,
        result: Result<(), EngineError>,
    },
    /// A control frame.
    Control {
        from: NodeId,
        op: u64,
        payload: Vec<u8>,
    },
    PeerLost {
        peer: NodeId,
        reason: String,
    },
    /// A connect request failed.
    ConnectFailed {
        peer: NodeId,
        reason: String,
    },
    /// The engine thread stopped.
    Stopped {
        reason: String,
    },
    /// Pushed by the application itself (a host's `Launcher`) to wake the host loop.
    Wake,
}

/// A queue of completions the application waits on (a host thread), or takes without waiting
/// (a host stepped by the loop that drives the engine: [`crate::SteppedHost`]).
#[derive(Debug, Default)]
pub struct CompletionQueue {
    q: Mutex<Queued>,
    cv: Condvar,
}

/// The completions, and how many threads wait for one: a push wakes a waiter only when there
/// is one (a wake-up is a system call even with no one to wake).
#[derive(Debug, Default)]
struct Queued {
    items: VecDeque<Completion>,
    waiters: usize,
}

impl CompletionQueue {
    fn lock(&self) -> std::sync::MutexGuard<'_, Queued> {
        self.q.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Pushes one completion from outside the engine thread (a host's own requests).
    pub(crate) fn push(&self, c: Completion) {
        let mut q = self.lock();
        q.items.push_back(c);
        let wake = q.waiters > 0;
        drop(q);
        if wake {
            self.cv.notify_one();
        }
    }

    fn push_all(&self, cs: &mut Vec<Completion>) {
        if cs.is_empty() {
            return;
        }
        let mut q = self.lock();
        q.items.extend(cs.drain(..));
        let wake = q.waiters > 0;
        drop(q);
        if wake {
            self.cv.notify_one();
        }
    }

    /// The next completion, waiting up to `timeout`.
    pub fn wait(&self, timeout: Duration) -> Option<Completion> {
        let deadline = Instant::now() + timeout;
        let mut q = self.lock();
        loop {
            if let Some(c) = q.items.pop_front() {
                return Some(c);
            }
            let now = Instant::now();
            if now >= deadline {
                return None;
            }
            q.waiters += 1;
            q = self
                .cv
                .wait_timeout(q, deadline - now)
                .unwrap_or_else(PoisonError::into_inner)
                .0;
            q.waiters -= 1;
        }
    }

    /// Moves every completion into `out`, waiting up to `timeout` for the first.
    pub fn wait_all(&self, out: &mut Vec<Completion>, timeout: Duration) {
        if let Some(c) = self.wait(timeout) {
            out.push(c);
            self.take_all(out);
        }
    }

    /// Whether a completion is queued.
    pub fn has_any(&self) -> bool {
        !self.lock().items.is_empty()
    }

    /// Moves every completion queued now into `out`, without waiting.
    pub fn take_all(&self, out: &mut Vec<Completion>) {
        out.extend(self.lock().items.drain(..));
    }
}

struct Shared {
    wq: Mutex<Vec<WorkRequest>>,
    cq: CompletionQueue,
    waker: Arc<dyn Waker>,
    /// Frames sent to and received from other nodes (Hello and frames to this node itself
    /// excluded).
    frames_sent: AtomicU64,
    frames_received: AtomicU64,
}

/// The handle to one node's engine thread. Cheap to clone.
#[derive(Clone)]
pub struct Engine {
    shared: Arc<Shared>,
    node: NodeId,
    pool: BufferPool,
    thread: Arc<Mutex<Option<JoinHandle<()>>>>,
}

impl std::fmt::Debug for Engine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Engine(node {})", self.node)
    }
}

impl Engine {
    /// The handle and the loop of an engine over `transport`, not started.
    fn new_loop<T: Transport>(transport: T, pool: BufferPool) -> (Engine, Loop<T>) {
        let node = transport.local();
        let shared = Arc::new(Shared {
            wq: Mutex::new(Vec::new()),
            cq: CompletionQueue::default(),
            waker: transport.waker(),
            frames_sent: AtomicU64::new(0),
            frames_received: AtomicU64::new(0),
        });
        let lp = Loop {
            t: transport,
            shared: shared.clone(),
            pool: pool.clone(),
            chains: HashMap::new(),
            recvs: HashMap::new(),
            early: HashMap::new(),
            early_bytes: 0,
            attach: HashMap::new(),
            finished: HashSet::new(),
            finished_order: VecDeque::new(),
            lost_peers: HashMap::new(),
            events: Vec::new(),
            done: Vec::new(),
            unflushed: 0,
        };
        let engine = Engine {
            shared,
            node,
            pool,
            thread: Arc::new(Mutex::new(None)),
        };
        (engine, lp)
    }

    /// An engine whose loop turns inside the caller's event loop instead of on a thread of
    /// its own: the caller polls the transport's sockets with its own, hands their events to
    /// [`Driven::turn`] and turns it again whenever the transport's waker fires (a work
    /// request was posted) or [`Driven::next_deadline`] passes. The engine's semantics do not
    /// change: in coherent mode each arriving slice is computed and sent on in the turn that
    /// received it, by the caller's thread.
    pub fn driven<T: Transport>(transport: T, pool: BufferPool) -> (Engine, Driven<T>) {
        let (engine, lp) = Engine::new_loop(transport, pool);
        (engine, Driven { lp, stopped: None })
    }

    /// Starts the engine thread over `transport`.
    pub fn start<T: Transport>(transport: T, pool: BufferPool) -> Engine {
        let (engine, mut lp) = Engine::new_loop(transport, pool);
        let (shared, node) = (engine.shared.clone(), engine.node);
        let guard = StopGuard(shared.clone());
        let thread = std::thread::Builder::new()
            .name(format!("engine-{node}"))
            .spawn(move || {
                let _guard = guard;
                lp.run()
            })
            .expect("spawn engine thread");
        *engine.thread.lock().unwrap_or_else(PoisonError::into_inner) = Some(thread);
        engine
    }

    pub fn node(&self) -> NodeId {
        self.node
    }

    pub fn pool(&self) -> &BufferPool {
        &self.pool
    }

    /// Posts one work request.
    pub fn post(&self, wr: WorkRequest) {
        self.shared
            .wq
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(wr);
        self.shared.waker.wake();
    }

    /// Posts several work requests with one wake-up of the engine thread.
    pub fn post_all(&self, wrs: impl IntoIterator<Item = WorkRequest>) {
        let mut q = self
            .shared
            .wq
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let before = q.len();
        q.extend(wrs);
        let any = q.len() > before;
        drop(q);
        if any {
            self.shared.waker.wake();
        }
    }

    pub fn cq(&self) -> &CompletionQueue {
        &self.shared.cq
    }

    /// Whether work requests were posted since the engine last took them: a driven engine
    /// must turn again ([`Driven::turn`]).
    pub fn has_work(&self) -> bool {
        !self
            .shared
            .wq
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .is_empty()
    }

    /// Wakes whoever turns the engine (its thread, or the loop that drives it).
    pub(crate) fn wake(&self) {
        self.shared.waker.wake();
    }

    /// Frames this engine sent to and received from other nodes so far (every kind but
    /// Hello; frames between vertices of this node are not counted).
    pub fn frame_counts(&self) -> (u64, u64) {
        (
            self.shared.frames_sent.load(Ordering::Relaxed),
            self.shared.frames_received.load(Ordering::Relaxed),
        )
    }

    /// Stops the engine thread and waits for it (a driven engine stops at its next turn).
    pub fn shutdown(&self) {
        self.post(WorkRequest::Shutdown);
        if let Some(t) = self
            .thread
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take()
        {
            let _ = t.join();
        }
    }
}

/// The loop of an engine driven by its caller's event loop ([`Engine::driven`]). Dropping it
/// stops the engine: its operations fail and the application sees `Stopped`.
pub struct Driven<T: Transport> {
    lp: Loop<T>,
    stopped: Option<String>,
}

impl<T: Transport> std::fmt::Debug for Driven<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Driven(node {})", self.lp.t.local())
    }
}

impl<T: Transport> Driven<T> {
    /// The transport, for the caller to hand it the readiness of its sockets.
    pub fn transport(&mut self) -> &mut T {
        &mut self.lp.t
    }

    /// One turn of the engine: the work requests posted since the last, then `events` (what
    /// the caller's poll found on the transport's sockets; drained), then the frames this node
    /// sent itself (an edge between two of its vertices), then the sockets written, the deadlines checked and the completions pushed
    /// to the application. `Err` once the engine stopped (a `Shutdown` was posted), with why.
    pub fn turn(&mut self, events: &mut Vec<Event>) -> Result<(), String> {
        if let Some(reason) = &self.stopped {
            events.clear();
            return Err(reason.clone());
        }
        let lp = &mut self.lp;
        if lp.drain_work() {
            events.clear();
            let reason = "shutdown".to_string();
            lp.stop(reason.clone());
            self.stopped = Some(reason.clone());
            return Err(reason);
        }
        for ev in events.drain(..) {
            lp.event(ev);
        }
        // Until none is left: a plan is acyclic, so its frames to this node come to an end.
        loop {
            let mut local = std::mem::take(&mut lp.events);
            if let Err(e) = lp.t.poll(&mut local, Some(Duration::ZERO)) {
                let reason = e.to_string();
                lp.stop(reason.clone());
                self.stopped = Some(reason.clone());
                return Err(reason);
            }
            let empty = local.is_empty();
            for ev in local.drain(..) {
                lp.event(ev);
            }
            lp.events = local;
            if empty {
                break;
            }
        }
        lp.t.flush();
        lp.unflushed = 0;
        lp.expire(Instant::now());
        lp.shared.cq.push_all(&mut lp.done);
        Ok(())
    }

    /// When the engine must turn next without an event: the nearest deadline of its
    /// operations and held frames.
    pub fn next_deadline(&self) -> Option<Instant> {
        if self.stopped.is_some() {
            return None;
        }
        self.lp.next_deadline()
    }
}

impl<T: Transport> Drop for Driven<T> {
    fn drop(&mut self) {
        if self.stopped.is_none() {
            self.lp
                .stop("the loop driving the engine ended".to_string());
        }
    }
}

/// Tells the application that the engine thread is gone if it dies by a panic, so that no
/// one waits forever on the completion queue.
struct StopGuard(Arc<Shared>);

impl Drop for StopGuard {
    fn drop(&mut self) {
        if std::thread::panicking() {
            self.0.cq.push_all(&mut vec![Completion::Stopped {
                reason: "the engine thread panicked".into(),
            }]);
        }
    }
}

struct ChainState {
    parts: Vec<PartRun>,
    peers: Vec<NodeId>,
    deadline: Instant,
}

struct RecvState {
    peers: Vec<NodeId>,
    deadline: Instant,
}

enum Early {
    Data {
        from: NodeId,
        edge: u32,
        slice: u32,
        payload: Vec<u8>,
    },
    Abort {
        from: NodeId,
        reason: String,
    },
}

/// Frames of one operation that is not posted yet.
struct EarlyOp {
    /// When the first frame arrived; the frames are dropped `EARLY_TIMEOUT` later.
    since: Instant,
    frames: Vec<Early>,
    /// Set when the memory limit was hit: later data frames are dropped, and the operation
    /// fails with this reason when it is posted.
    refused: Option<String>,
}

impl EarlyOp {
    fn new(now: Instant) -> EarlyOp {
        EarlyOp {
            since: now,
            frames: Vec::new(),
            refused: None,
        }
    }
}

struct Loop<T: Transport> {
    t: T,
    shared: Arc<Shared>,
    pool: BufferPool,
    chains: HashMap<u64, ChainState>,
    recvs: HashMap<u64, RecvState>,
    /// Frames of operations not posted yet.
    early: HashMap<u64, EarlyOp>,
    early_bytes: usize,
    /// Start attachments not sent yet, by operation and peer.
    attach: HashMap<u64, HashMap<NodeId, Vec<u8>>>,
    finished: HashSet<u64>,
    finished_order: VecDeque<u64>,
    /// Peers whose connection was lost (and not heard from since): an operation posted later
    /// that needs one of them fails at once instead of waiting for its deadline.
    lost_peers: HashMap<NodeId, String>,
    events: Vec<Event>,
    /// Completions of this turn, pushed to the CQ together.
    done: Vec<Completion>,
    unflushed: usize,
}

/// Hands one computed slice to the transport at once (so the first slice leaves while the
/// next is computed) and writes to the sockets whenever `FLUSH_BYTES` have been queued. After
/// the first error, further frames are only recycled.
#[allow(clippy::too_many_arguments)]
fn emit<T: Transport>(
    t: &mut T,
    pool: &BufferPool,
    unflushed: &mut usize,
    attach: &mut HashMap<u64, HashMap<NodeId, Vec<u8>>>,
    sent: &AtomicU64,
    op: u64,
    o: Outgoing,
    err: &mut Option<EngineError>,
) {
    if err.is_some() {
        o.payload.recycle(pool);
        return;
    }
    let len = o.payload.len();
    let header = match Header::new(Kind::Data, op, o.edge, o.slice, len) {
        Ok(h) => h,
        Err(e) => {
            o.payload.recycle(pool);
            *err = Some(EngineError::Wire(e));
            return;
        }
    };
    let (header, payload) = match with_start(attach, pool, o.to, header, o.payload) {
        Ok(f) => f,
        Err(e) => {
            *err = Some(EngineError::Wire(e));
            return;
        }
    };
    if let Err(e) = t.send(o.to, header, payload) {
        *err = Some(EngineError::Transport(e));
        return;
    }
    if o.to != t.local() {
        sent.fetch_add(1, Ordering::Relaxed);
    }
    *unflushed += len;
    if *unflushed >= FLUSH_BYTES {
        t.flush();
        *unflushed = 0;
    }
}

/// Turns the first Data frame of an operation to a peer with a start attachment into a
/// [`Kind::Start`] frame: the slice, the start control payload, its length (one copy of the
/// slice). Other frames pass unchanged.
fn with_start(
    attach: &mut HashMap<u64, HashMap<NodeId, Vec<u8>>>,
    pool: &BufferPool,
    to: NodeId,
    header: Header,
    payload: Payload,
) -> Result<(Header, Payload), crate::wire::WireError> {
    if header.kind != Kind::Data {
        return Ok((header, payload));
    }
    let Some(peers) = attach.get_mut(&header.op) else {
        return Ok((header, payload));
    };
    let Some(start) = peers.remove(&to) else {
        return Ok((header, payload));
    };
    if peers.is_empty() {
        attach.remove(&header.op);
    }
    let slice = payload.as_slice();
    let total = slice.len() + start.len() + 4;
    let h = match Header::new(Kind::Start, header.op, header.edge, header.slice, total) {
        Ok(h) => h,
        Err(e) => {
            payload.recycle(pool);
            return Err(e);
        }
    };
    let mut v = pool.take(total);
    v[..slice.len()].copy_from_slice(slice);
    v[slice.len()..total - 4].copy_from_slice(&start);
    v[total - 4..].copy_from_slice(&(start.len() as u32).to_le_bytes());
    payload.recycle(pool);
    Ok((h, Payload::Owned(v)))
}

impl<T: Transport> Loop<T> {
    fn run(&mut self) {
        let reason = loop {
            if self.drain_work() {
                break "shutdown".to_string();
            }
            self.t.flush();
            self.unflushed = 0;
            let now = Instant::now();
            self.expire(now);
            self.shared.cq.push_all(&mut self.done);
            let timeout = self
                .next_deadline()
                .map(|d| d.saturating_duration_since(now));
            let mut events = std::mem::take(&mut self.events);
            if let Err(e) = self.t.poll(&mut events, timeout) {
                break e.to_string();
            }
            for ev in events.drain(..) {
                self.event(ev);
            }
            self.events = events;
            self.shared.cq.push_all(&mut self.done);
        };
        self.stop(reason);
    }

    /// Runs the posted work requests; true if one of them was `Shutdown`.
    fn drain_work(&mut self) -> bool {
        let wrs = std::mem::take(
            &mut *self
                .shared
                .wq
                .lock()
                .unwrap_or_else(PoisonError::into_inner),
        );
        for wr in wrs {
            if let WorkRequest::Shutdown = wr {
                return true;
            }
            self.work(wr);
        }
        false
    }

    /// Fails every operation under way and tells the application the engine stopped.
    fn stop(&mut self, reason: String) {
        self.t.flush();
        let ops: Vec<u64> = self
            .chains
            .keys()
            .chain(self.recvs.keys())
            .copied()
            .collect();
        for op in ops {
            self.fail(
                op,
                EngineError::Stopped {
                    reason: reason.clone(),
                },
            );
        }
        self.done.push(Completion::Stopped { reason });
        self.shared.cq.push_all(&mut self.done);
    }

    fn next_deadline(&self) -> Option<Instant> {
        self.chains
            .values()
            .map(|c| c.deadline)
            .chain(self.recvs.values().map(|r| r.deadline))
            .chain(self.early.values().map(|e| e.since + EARLY_TIMEOUT))
            .min()
    }

    fn expire(&mut self, now: Instant) {
        let late: Vec<u64> = self
            .chains
            .iter()
            .filter(|(_, c)| c.deadline <= now)
            .map(|(&op, _)| op)
            .chain(
                self.recvs
                    .iter()
                    .filter(|(_, r)| r.deadline <= now)
                    .map(|(&op, _)| op),
            )
            .collect();
        for op in late {
            self.fail(op, EngineError::Timeout { op });
        }
        if self.early.is_empty() {
            return;
        }
        let stale: Vec<u64> = self
            .early
            .iter()
            .filter(|(_, e)| e.since + EARLY_TIMEOUT <= now)
            .map(|(&op, _)| op)
            .collect();
        for op in stale {
            // Never posted: forget it, and drop whatever still comes for it.
            self.mark_finished(op);
        }
    }

    /// Drops the held frames of `op`, returning their buffers.
    fn drop_early(&mut self, op: u64) -> Option<EarlyOp> {
        let mut e = self.early.remove(&op)?;
        for f in e.frames.iter_mut() {
            if let Early::Data { payload, .. } = f {
                self.early_bytes -= payload.len();
                self.pool.put(std::mem::take(payload));
            }
        }
        Some(e)
    }

    fn mark_finished(&mut self, op: u64) {
        if self.finished.insert(op) {
            self.finished_order.push_back(op);
            if self.finished_order.len() > FINISHED_MEMORY {
                if let Some(old) = self.finished_order.pop_front() {
                    self.finished.remove(&old);
                }
            }
        }
        self.drop_early(op);
        self.attach.remove(&op);
    }

    /// Fails `op` on this node and tells every peer of it, so that nobody waits for this
    /// node's part.
    fn fail(&mut self, op: u64, error: EngineError) {
        let peers = if let Some(c) = self.chains.remove(&op) {
            c.parts.into_iter().for_each(PartRun::recycle);
            c.peers
        } else if let Some(r) = self.recvs.remove(&op) {
            r.peers
        } else {
            return;
        };
        let mut reason = error.to_string();
        // Cut at a character boundary so that the reason stays valid UTF-8.
        let mut cut = reason.len().min(MAX_REASON_BYTES);
        while !reason.is_char_boundary(cut) {
            cut -= 1;
        }
        reason.truncate(cut);
        let reason = reason.into_bytes();
        for p in peers {
            // Abort frames carry no edge or slice (both 0): they concern the whole operation.
            let h = Header::new(Kind::Abort, op, 0, 0, reason.len()).expect("short reason");
            if self.t.send(p, h, Payload::Owned(reason.clone())).is_ok() && p != self.t.local() {
                self.shared.frames_sent.fetch_add(1, Ordering::Relaxed);
            }
        }
        self.mark_finished(op);
        self.done.push(Completion::Failed { op, error });
    }

    /// Replays the frames that arrived before `op` was posted.
    fn replay_early(&mut self, op: u64) {
        let Some(e) = self.early.remove(&op) else {
            return;
        };
        if let Some(reason) = e.refused {
            for f in e.frames {
                if let Early::Data { payload, .. } = f {
                    self.early_bytes -= payload.len();
                    self.pool.put(payload);
                }
            }
            let peer = self.t.local();
            self.fail(op, EngineError::PeerAborted { peer, reason });
            return;
        }
        for f in e.frames {
            match f {
                Early::Data {
                    from,
                    edge,
                    slice,
                    payload,
                } => {
                    self.early_bytes -= payload.len();
                    self.data(op, from, edge, slice, payload);
                }
                Early::Abort { from, reason } => {
                    self.fail(op, EngineError::PeerAborted { peer: from, reason })
                }
            }
        }
    }

    fn work(&mut self, wr: WorkRequest) {
        match wr {
            WorkRequest::Chain {
                op,
                mut parts,
                deadline,
            } => {
                let mut peers: Vec<NodeId> = parts.iter().flat_map(|p| p.part().peers()).collect();
                peers.sort_unstable();
                peers.dedup();
                if let Some(error) = self.lost_peer_of(&peers) {
                    self.chains.insert(
                        op,
                        ChainState {
                            parts,
                            peers,
                            deadline,
                        },
                    );
                    self.fail(op, error);
                    return;
                }
                // Source vertices compute and send slice by slice: each slice goes to the
                // transport as soon as it is computed.
                let mut err = None;
                {
                    let Loop {
                        t,
                        pool,
                        unflushed,
                        attach,
                        shared,
                        ..
                    } = self;
                    let sent = &shared.frames_sent;
                    for p in &mut parts {
                        p.start(&mut |o| emit(t, pool, unflushed, attach, sent, op, o, &mut err));
                    }
                }
                self.chains.insert(
                    op,
                    ChainState {
                        parts,
                        peers,
                        deadline,
                    },
                );
                if let Some(e) = err {
                    self.fail(op, e);
                    return;
                }
                self.replay_early(op);
                self.maybe_complete(op);
            }
            WorkRequest::Recv {
                op,
                peers,
                deadline,
            } => {
                let lost = self.lost_peer_of(&peers);
                self.recvs.insert(op, RecvState { peers, deadline });
                if let Some(error) = lost {
                    self.fail(op, error);
                    return;
                }
                self.replay_early(op);
            }
            WorkRequest::Send {
                op,
                peer,
                header,
                payload,
                signal,
            } => {
                let len = payload.len();
                let r = match with_start(&mut self.attach, &self.pool, peer, header, payload) {
                    Ok((header, payload)) => self
                        .t
                        .send(peer, header, payload)
                        .map_err(EngineError::Transport),
                    Err(e) => Err(EngineError::Wire(e)),
                };
                if r.is_ok() && peer != self.t.local() {
                    self.shared.frames_sent.fetch_add(1, Ordering::Relaxed);
                }
                self.unflushed += len;
                if self.unflushed >= FLUSH_BYTES {
                    self.t.flush();
                    self.unflushed = 0;
                }
                if signal {
                    self.done.push(Completion::SendDone { op, result: r });
                }
            }
            WorkRequest::Release { op } => {
                self.recvs.remove(&op);
                self.mark_finished(op);
            }
            WorkRequest::Fail { op, error } => {
                if self.chains.contains_key(&op) || self.recvs.contains_key(&op) {
                    self.fail(op, error);
                } else {
                    self.mark_finished(op);
                    self.done.push(Completion::Failed { op, error });
                }
            }
            WorkRequest::Connect { peer, addr } => {
                // A fresh connection: operations may use the peer again.
                self.lost_peers.remove(&peer);
                if let Err(e) = self.t.connect(peer, &addr) {
                    self.done.push(Completion::ConnectFailed {
                        peer,
                        reason: e.to_string(),
                    });
                }
            }
            WorkRequest::Attach { op, starts } => {
                if !self.finished.contains(&op) {
                    self.attach.entry(op).or_default().extend(starts);
                }
            }
            WorkRequest::Shutdown => unreachable!("handled by the loop"),
        }
    }

    fn lost_peer_of(&self, peers: &[NodeId]) -> Option<EngineError> {
        peers.iter().find_map(|p| {
            self.lost_peers.get(p).map(|reason| EngineError::PeerLost {
                peer: *p,
                reason: reason.clone(),
            })
        })
    }

    fn maybe_complete(&mut self, op: u64) {
        let complete = self
            .chains
            .get(&op)
            .is_some_and(|c| c.parts.iter().all(|p| p.is_complete()));
        if complete {
            let c = self.chains.remove(&op).expect("present");
            let results = c.parts.into_iter().flat_map(|p| p.into_results()).collect();
            self.mark_finished(op);
            self.done.push(Completion::ChainDone { op, results });
        }
    }

    /// One data slice: coherent chains compute and forward it here, in this turn.
    fn data(&mut self, op: u64, from: NodeId, edge: u32, slice: u32, payload: Vec<u8>) {
        if self.chains.contains_key(&op) {
            let mut err = None;
            let r = {
                let Loop {
                    t,
                    pool,
                    unflushed,
                    chains,
                    attach,
                    shared,
                    ..
                } = self;
                let sent = &shared.frames_sent;
                let chain = chains.get_mut(&op).expect("checked");
                match chain.parts.iter_mut().find(|p| p.has_in_edge(edge)) {
                    Some(part) => part.on_input(edge, slice, &payload, &mut |o| {
                        emit(t, pool, unflushed, attach, sent, op, o, &mut err)
                    }),
                    None => Err(EngineError::UnexpectedSlice {
                        op,
                        edge,
                        slice,
                        reason: format!("no vertex on this node receives edge {edge}"),
                    }),
                }
            };
            self.pool.put(payload);
            match r.and_then(|()| err.map_or(Ok(()), Err)) {
                Ok(()) => self.maybe_complete(op),
                Err(e) => self.fail(op, e),
            }
        } else if self.recvs.contains_key(&op) {
            self.done.push(Completion::Recv {
                op,
                from,
                edge,
                slice,
                payload,
            });
        } else if self.finished.contains(&op) {
            self.pool.put(payload);
        } else {
            let now = Instant::now();
            let len = payload.len();
            let e = self.early.entry(op).or_insert_with(|| EarlyOp::new(now));
            if e.refused.is_some() {
                self.pool.put(payload);
                return;
            }
            if self.early_bytes + len > EARLY_LIMIT_BYTES {
                // Refuse to hold more: drop this operation's frames; it fails when posted
                // (or its record expires).
                let reason = format!(
                    "more than {EARLY_LIMIT_BYTES} bytes arrived for operations this node had not started"
                );
                self.pool.put(payload);
                let since = e.since;
                self.drop_early(op);
                let mut e = EarlyOp::new(since);
                e.refused = Some(reason);
                self.early.insert(op, e);
                return;
            }
            self.early_bytes += len;
            e.frames.push(Early::Data {
                from,
                edge,
                slice,
                payload,
            });
        }
    }

    fn frame(&mut self, from: NodeId, header: Header, payload: Vec<u8>) {
        match header.kind {
            Kind::Data => self.data(header.op, from, header.edge, header.slice, payload),
            Kind::Abort => {
                let reason = String::from_utf8_lossy(&payload).into_owned();
                self.pool.put(payload);
                let op = header.op;
                if self.chains.contains_key(&op) || self.recvs.contains_key(&op) {
                    self.fail(op, EngineError::PeerAborted { peer: from, reason });
                } else if !self.finished.contains(&op) {
                    let now = Instant::now();
                    self.early
                        .entry(op)
                        .or_insert_with(|| EarlyOp::new(now))
                        .frames
                        .push(Early::Abort { from, reason });
                }
            }
            Kind::Control => self.done.push(Completion::Control {
                from,
                op: header.op,
                payload,
            }),
            Kind::Start => match crate::wire::split_start(&payload) {
                Ok((slice_bytes, start)) => {
                    // The host starts the run from the control payload; the slice waits for
                    // it among the early frames.
                    let mut control = self.pool.take(start.len());
                    control.copy_from_slice(&payload[start]);
                    self.done.push(Completion::Control {
                        from,
                        op: header.op,
                        payload: control,
                    });
                    let mut payload = payload;
                    payload.truncate(slice_bytes);
                    self.data(header.op, from, header.edge, header.slice, payload);
                }
                Err(reason) => {
                    self.pool.put(payload);
                    log::warn!(
                        "node {}: start frame from {from} dropped: {reason}",
                        self.t.local()
                    );
                }
            },
            Kind::Hello => {}
        }
    }

    fn event(&mut self, ev: Event) {
        match ev {
            Event::Frame {
                from,
                header,
                payload,
            } => {
                // A frame from a peer means it is back (it reconnected).
                if !self.lost_peers.is_empty() {
                    self.lost_peers.remove(&from);
                }
                if header.kind != Kind::Hello && from != self.t.local() {
                    self.shared.frames_received.fetch_add(1, Ordering::Relaxed);
                }
                self.frame(from, header, payload);
            }
            // A peer that restarted connects to the nodes with smaller ids: from then on,
            // operations may use it again (not only after its first frame).
            Event::PeerBack { peer } => {
                self.lost_peers.remove(&peer);
            }
            Event::PeerLost { peer, reason } => {
                self.lost_peers.insert(peer, reason.clone());
                let hit: Vec<u64> = self
                    .chains
                    .iter()
                    .filter(|(_, c)| c.peers.contains(&peer))
                    .map(|(&op, _)| op)
                    .chain(
                        self.recvs
                            .iter()
                            .filter(|(_, r)| r.peers.contains(&peer))
                            .map(|(&op, _)| op),
                    )
                    .collect();
                for op in hit {
                    self.fail(
                        op,
                        EngineError::PeerLost {
                            peer,
                            reason: reason.clone(),
                        },
                    );
                }
                self.done.push(Completion::PeerLost { peer, reason });
            }
        }
    }
}
