//! Nodes and coordinators: the control protocol that installs plan parts on nodes and runs
//! them, the node's application loop ([`serve`]), and the [`Coordinator`] client.
//!
//! A control message is one `Control` frame whose `op` field is a request id (the reply carries
//! the same id) and whose payload is `json_bytes: u32 LE`, then the JSON of a [`Request`] or
//! [`Reply`], then binary data (a chunk's bytes for `store` and `fetch`).

use std::collections::{HashMap, VecDeque};
use std::net::SocketAddr;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use crate::driver::{Handled, OpDriver};
use crate::engine::{Completion, Engine, Mode, WorkRequest};
use crate::part::{ChunkRef, PartRun, VertexPart};
use crate::pool::BufferPool;
use crate::transport::{MemHub, NodeId, Payload, TcpTransport};
use crate::wire::{Header, Kind};
use crate::EngineError;

/// A coordinator's request to a node.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Request {
    /// The cluster's nodes and addresses; the node connects to every peer with a smaller id.
    Peers {
        peers: Vec<(NodeId, String)>,
    },
    /// Keep the binary data as `chunk`.
    Store {
        chunk: ChunkRef,
    },
    /// Remember this node's vertices of a plan under `template`.
    Install {
        template: u64,
        parts: Vec<VertexPart>,
    },
    /// Run the installed template as operation `op`; replied to with `Done` when this node's
    /// part is finished.
    Run {
        op: u64,
        template: u64,
        mode: Mode,
        timeout_ms: u64,
    },
    /// Send back a stored chunk.
    Fetch {
        chunk: ChunkRef,
    },
    /// Forget stored chunks (missing ones are ignored).
    Delete {
        chunks: Vec<ChunkRef>,
    },
    Ping,
    Shutdown,
}

/// A node's reply.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Reply {
    Ok,
    Done {
        op: u64,
        error: Option<String>,
    },
    /// The chunk's bytes follow as binary data.
    Chunk {
        chunk: ChunkRef,
    },
    Error {
        message: String,
    },
}

/// Most JSON a control message may carry.
const MAX_CONTROL_JSON_BYTES: usize = 16 << 20;

fn encode_control<T: Serialize>(msg: &T, binary: &[u8], pool: &BufferPool) -> Vec<u8> {
    let json = serde_json::to_vec(msg).expect("control messages serialize");
    let mut v = pool.take(4 + json.len() + binary.len());
    v[..4].copy_from_slice(&(json.len() as u32).to_le_bytes());
    v[4..4 + json.len()].copy_from_slice(&json);
    v[4 + json.len()..].copy_from_slice(binary);
    v
}

fn decode_control<T: for<'de> Deserialize<'de>>(payload: &[u8]) -> Result<(T, &[u8]), String> {
    if payload.len() < 4 {
        return Err(format!(
            "control frame of {} bytes is too short",
            payload.len()
        ));
    }
    let n = u32::from_le_bytes(payload[..4].try_into().unwrap()) as usize;
    if n > MAX_CONTROL_JSON_BYTES || 4 + n > payload.len() {
        return Err(format!(
            "control json of {n} bytes does not fit the frame ({} bytes, limit {MAX_CONTROL_JSON_BYTES})",
            payload.len()
        ));
    }
    let msg =
        serde_json::from_slice(&payload[4..4 + n]).map_err(|e| format!("bad control json: {e}"))?;
    Ok((msg, &payload[4 + n..]))
}

/// The most binary data (a chunk's bytes) one control message carries: a frame's payload
/// less room for the JSON. Larger chunks are refused by `store` and `fetch` with an error.
pub const MAX_CONTROL_BINARY_BYTES: usize = crate::wire::MAX_PAYLOAD_BYTES - (64 << 10);

fn send_control<T: Serialize>(
    engine: &Engine,
    to: NodeId,
    req: u64,
    msg: &T,
    binary: &[u8],
) -> Result<(), EngineError> {
    let json_bytes = serde_json::to_vec(msg).map_or(0, |j| j.len());
    let header = Header::new(Kind::Control, req, 0, 0, 4 + json_bytes + binary.len())?;
    let v = encode_control(msg, binary, engine.pool());
    engine.post(WorkRequest::Send {
        op: req,
        peer: to,
        header,
        payload: Payload::Owned(v),
        signal: false,
    });
    Ok(())
}

/// Sends a node's reply; a reply too large for a frame becomes an error reply.
fn send_reply(engine: &Engine, to: NodeId, req: u64, reply: &Reply, binary: &[u8]) {
    if let Err(e) = send_control(engine, to, req, reply, binary) {
        let message = format!("node {}: reply too large: {e}", engine.node());
        let _ = send_control(engine, to, req, &Reply::Error { message }, &[]);
    }
}

/// Keeps `bytes` as `chunk`; the buffer it replaces goes back to the pool when nothing else
/// uses it, so that repeated operations reuse their output buffers.
fn keep(
    store: &mut HashMap<ChunkRef, Arc<Vec<u8>>>,
    pool: &BufferPool,
    chunk: ChunkRef,
    bytes: Arc<Vec<u8>>,
) {
    if let Some(old) = store.insert(chunk, bytes) {
        Payload::Shared(old, 0..0).recycle(pool);
    }
}

/// A coordinator id for this process: [`crate::COORDINATOR_BASE`] plus 28 random bits (the
/// process id, the time and the standard library's per-process random hash keys), so that
/// coordinators started at the same time on one machine do not collide.
pub fn coordinator_id() -> NodeId {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u32(std::process::id());
    h.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos()),
    );
    crate::COORDINATOR_BASE + (h.finish() as u32 & 0x0FFF_FFFF)
}

/// A node's application loop: answers control requests and runs plan parts with `engine`
/// until a `Shutdown` request or until the engine stops. Returns why it stopped.
pub fn serve(engine: Engine) -> String {
    let kernel = gf::kernel();
    let mut driver = OpDriver::new(engine.clone());
    let mut store: HashMap<ChunkRef, Arc<Vec<u8>>> = HashMap::new();
    let mut templates: HashMap<u64, Vec<Arc<VertexPart>>> = HashMap::new();
    // Running operations: op → (coordinator, request id).
    let mut running: HashMap<u64, (NodeId, u64)> = HashMap::new();
    let mut batch = Vec::new();
    loop {
        // Every send produced while handling this batch is posted with one wake-up.
        driver.flush();
        engine.cq().wait_all(&mut batch, Duration::from_secs(3600));
        for c in batch.drain(..) {
            let c = match driver.handle(c) {
                Handled::Consumed => continue,
                Handled::Finished(op, result) => {
                    finish_op(&engine, &mut store, &mut running, op, result);
                    continue;
                }
                Handled::Other(c) => c,
            };
            match c {
                Completion::Control {
                    from,
                    op: req,
                    payload,
                } => {
                    let reply = match decode_control::<Request>(&payload) {
                        Err(message) => Some((Reply::Error { message }, Vec::new())),
                        Ok((Request::Shutdown, _)) => {
                            driver.flush();
                            send_reply(&engine, from, req, &Reply::Ok, &[]);
                            engine.shutdown();
                            return "shutdown requested".into();
                        }
                        Ok((request, binary)) => handle_request(
                            request,
                            binary,
                            from,
                            req,
                            &engine,
                            kernel,
                            &mut driver,
                            &mut store,
                            &mut templates,
                            &mut running,
                        ),
                    };
                    engine.pool().put(payload);
                    if let Some((reply, binary)) = reply {
                        send_reply(&engine, from, req, &reply, &binary);
                    }
                }
                Completion::Stopped { reason } => return reason,
                _ => {}
            }
        }
    }
}

/// Keeps an operation's results and tells its coordinator.
fn finish_op(
    engine: &Engine,
    store: &mut HashMap<ChunkRef, Arc<Vec<u8>>>,
    running: &mut HashMap<u64, (NodeId, u64)>,
    op: u64,
    result: crate::OpResult,
) {
    let Some((to, req)) = running.remove(&op) else {
        return;
    };
    let error = match result {
        Ok(results) => {
            for (chunk, bytes) in results {
                keep(store, engine.pool(), chunk, bytes);
            }
            None
        }
        Err(e) => Some(format!("node {}: {e}", engine.node())),
    };
    send_reply(engine, to, req, &Reply::Done { op, error }, &[]);
}

#[allow(clippy::too_many_arguments)]
fn handle_request(
    request: Request,
    binary: &[u8],
    from: NodeId,
    req: u64,
    engine: &Engine,
    kernel: gf::Kernel,
    driver: &mut OpDriver,
    store: &mut HashMap<ChunkRef, Arc<Vec<u8>>>,
    templates: &mut HashMap<u64, Vec<Arc<VertexPart>>>,
    running: &mut HashMap<u64, (NodeId, u64)>,
) -> Option<(Reply, Vec<u8>)> {
    let node = engine.node();
    Some(match request {
        Request::Peers { peers } => {
            let wrs = peers
                .into_iter()
                .filter(|(id, _)| *id < node)
                .map(|(peer, addr)| WorkRequest::Connect { peer, addr });
            engine.post_all(wrs);
            (Reply::Ok, Vec::new())
        }
        Request::Store { chunk } => {
            let mut v = engine.pool().take(binary.len());
            v.copy_from_slice(binary);
            keep(store, engine.pool(), chunk, Arc::new(v));
            (Reply::Ok, Vec::new())
        }
        Request::Install { template, parts } => {
            for p in &parts {
                if let Err(e) = p.validate() {
                    return Some((
                        Reply::Error {
                            message: e.to_string(),
                        },
                        Vec::new(),
                    ));
                }
            }
            templates.insert(template, parts.into_iter().map(Arc::new).collect());
            (Reply::Ok, Vec::new())
        }
        Request::Run {
            op,
            template,
            mode,
            timeout_ms,
        } => {
            let Some(parts) = templates.get(&template) else {
                let error = Some(format!("node {node}: template {template} is not installed"));
                return Some((Reply::Done { op, error }, Vec::new()));
            };
            let mut runs = Vec::with_capacity(parts.len());
            for p in parts {
                let locals: Result<Vec<Arc<Vec<u8>>>, String> = p
                    .locals
                    .iter()
                    .map(|c| {
                        store.get(c).cloned().ok_or_else(|| {
                            format!(
                                "node {node}: chunk {}/{} is not stored here",
                                c.stripe, c.index
                            )
                        })
                    })
                    .collect();
                let run = locals.and_then(|l| {
                    PartRun::new(op, p.clone(), l, kernel, engine.pool().clone())
                        .map_err(|e| format!("node {node}: {e}"))
                });
                match run {
                    Ok(r) => runs.push(r),
                    Err(error) => {
                        return Some((
                            Reply::Done {
                                op,
                                error: Some(error),
                            },
                            Vec::new(),
                        ))
                    }
                }
            }
            running.insert(op, (from, req));
            if let Some((op, result)) =
                driver.start(op, runs, mode, Duration::from_millis(timeout_ms))
            {
                finish_op(engine, store, running, op, result);
            }
            return None;
        }
        Request::Fetch { chunk } => match store.get(&chunk) {
            Some(bytes) if bytes.len() > MAX_CONTROL_BINARY_BYTES => (
                Reply::Error {
                    message: format!(
                        "node {node}: chunk {}/{} has {} bytes, more than one control message \
                         carries ({MAX_CONTROL_BINARY_BYTES})",
                        chunk.stripe,
                        chunk.index,
                        bytes.len()
                    ),
                },
                Vec::new(),
            ),
            Some(bytes) => (Reply::Chunk { chunk }, bytes.to_vec()),
            None => (
                Reply::Error {
                    message: format!(
                        "node {node}: chunk {}/{} is not stored here",
                        chunk.stripe, chunk.index
                    ),
                },
                Vec::new(),
            ),
        },
        Request::Delete { chunks } => {
            for c in chunks {
                if let Some(old) = store.remove(&c) {
                    Payload::Shared(old, 0..0).recycle(engine.pool());
                }
            }
            (Reply::Ok, Vec::new())
        }
        Request::Ping => (Reply::Ok, Vec::new()),
        Request::Shutdown => unreachable!("handled by the loop"),
    })
}

/// A node running in this process (engine thread + application thread).
#[derive(Debug)]
pub struct LocalNode {
    pub engine: Engine,
    pub addr: Option<SocketAddr>,
    app: Option<JoinHandle<String>>,
}

impl LocalNode {
    /// A node on an in-memory hub.
    pub fn mem(hub: &MemHub, id: NodeId, pool: BufferPool) -> LocalNode {
        let engine = Engine::start(hub.attach(id, pool.clone()), pool);
        LocalNode::with_engine(engine, None)
    }

    /// A node listening on `addr` (port 0: any free port; see `addr`).
    pub fn tcp(id: NodeId, addr: SocketAddr, pool: BufferPool) -> std::io::Result<LocalNode> {
        let t = TcpTransport::bind(id, addr, pool.clone())?;
        let bound = t.local_addr();
        Ok(LocalNode::with_engine(Engine::start(t, pool), bound))
    }

    fn with_engine(engine: Engine, addr: Option<SocketAddr>) -> LocalNode {
        let e = engine.clone();
        let app = std::thread::Builder::new()
            .name(format!("node-{}", engine.node()))
            .spawn(move || serve(e))
            .expect("spawn node thread");
        LocalNode {
            engine,
            addr,
            app: Some(app),
        }
    }

    /// Waits for the node's application loop to end (after a `Shutdown` request or a kill).
    pub fn join(mut self) -> String {
        self.app
            .take()
            .map(|h| h.join().unwrap_or_else(|_| "panicked".into()))
            .unwrap_or_default()
    }
}

/// Statistics of [`Coordinator::run_many`].
#[derive(Clone, Copy, Debug)]
pub struct RunStats {
    /// From the first request to the last reply.
    pub elapsed: Duration,
    pub ops: usize,
}

/// The client that sets up nodes and runs plans on them. It has an engine of its own (id at
/// or above [`crate::COORDINATOR_BASE`]) connected to every node.
#[derive(Debug)]
pub struct Coordinator {
    engine: Engine,
    next_req: u64,
    next_op: u64,
    /// Completions read while waiting for something else.
    stash: VecDeque<Completion>,
    /// Nodes whose connection was lost, with the reason.
    lost: HashMap<NodeId, String>,
}

impl Coordinator {
    /// A coordinator on an in-memory hub.
    pub fn mem(hub: &MemHub, id: NodeId) -> Coordinator {
        let pool = BufferPool::new();
        Coordinator::with_engine(Engine::start(hub.attach(id, pool.clone()), pool))
    }

    /// A coordinator connected over TCP to every node in `nodes`.
    pub fn tcp(id: NodeId, nodes: &[(NodeId, String)]) -> Result<Coordinator, EngineError> {
        let pool = BufferPool::new();
        let mut t = TcpTransport::unbound(id, pool.clone())
            .map_err(|e| EngineError::Node(format!("coordinator transport: {e}")))?;
        for (peer, addr) in nodes {
            crate::transport::Transport::connect(&mut t, *peer, addr)?;
        }
        Ok(Coordinator::with_engine(Engine::start(t, pool)))
    }

    fn with_engine(engine: Engine) -> Coordinator {
        // Request and operation ids start from the coordinator's id, so that coordinators
        // sharing nodes do not reuse each other's ids (2^36 ids each).
        let seed = (u64::from(engine.node()) & 0x0FFF_FFFF) << 36;
        Coordinator {
            engine,
            next_req: seed,
            next_op: seed,
            stash: VecDeque::new(),
            lost: HashMap::new(),
        }
    }

    pub fn engine(&self) -> &Engine {
        &self.engine
    }

    /// A fresh operation id.
    pub fn new_op(&mut self) -> u64 {
        self.next_op += 1;
        self.next_op
    }

    fn next_completion(&mut self, deadline: Instant) -> Option<Completion> {
        if let Some(c) = self.stash.pop_front() {
            return Some(c);
        }
        let now = Instant::now();
        if now >= deadline {
            return None;
        }
        self.engine.cq().wait(deadline - now)
    }

    /// Sends every request and waits for every reply (in the order of `reqs`). Fails on the
    /// first error reply, on the loss of a node asked, or at the timeout.
    pub fn request_all(
        &mut self,
        reqs: Vec<(NodeId, Request, Vec<u8>)>,
        timeout: Duration,
    ) -> Result<Vec<(Reply, Vec<u8>)>, EngineError> {
        let deadline = Instant::now() + timeout;
        let mut waiting: HashMap<u64, (usize, NodeId)> = HashMap::new();
        let n = reqs.len();
        for (i, (node, req, bin)) in reqs.into_iter().enumerate() {
            if let Some(reason) = self.lost.get(&node) {
                return Err(EngineError::PeerLost {
                    peer: node,
                    reason: reason.clone(),
                });
            }
            self.next_req += 1;
            if bin.len() > MAX_CONTROL_BINARY_BYTES {
                return Err(EngineError::Node(format!(
                    "{} bytes of data for node {node}: more than one control message carries \
                     ({MAX_CONTROL_BINARY_BYTES})",
                    bin.len()
                )));
            }
            waiting.insert(self.next_req, (i, node));
            send_control(&self.engine, node, self.next_req, &req, &bin)?;
        }
        let mut replies: Vec<Option<(Reply, Vec<u8>)>> = (0..n).map(|_| None).collect();
        while !waiting.is_empty() {
            let Some(c) = self.next_completion(deadline) else {
                let nodes: Vec<NodeId> = waiting.values().map(|(_, n)| *n).collect();
                return Err(EngineError::Node(format!(
                    "no reply from nodes {nodes:?} within {timeout:?}"
                )));
            };
            match c {
                Completion::Control {
                    op: req,
                    payload,
                    from,
                } => {
                    let Some((i, _)) = waiting.remove(&req) else {
                        continue;
                    };
                    let (reply, bin) = decode_control::<Reply>(&payload)
                        .map_err(|e| EngineError::Node(format!("node {from}: {e}")))?;
                    match &reply {
                        Reply::Error { message } => return Err(EngineError::Node(message.clone())),
                        Reply::Done {
                            error: Some(message),
                            ..
                        } => return Err(EngineError::Node(message.clone())),
                        _ => {}
                    }
                    replies[i] = Some((reply, bin.to_vec()));
                }
                Completion::PeerLost { peer, reason } => {
                    self.lost.insert(peer, reason.clone());
                    if waiting.values().any(|(_, n)| *n == peer) {
                        return Err(EngineError::PeerLost { peer, reason });
                    }
                }
                Completion::ConnectFailed { peer, reason } => {
                    return Err(EngineError::PeerLost { peer, reason })
                }
                Completion::Stopped { reason } => return Err(EngineError::Stopped { reason }),
                _ => {}
            }
        }
        Ok(replies
            .into_iter()
            .map(|r| r.expect("every reply arrived"))
            .collect())
    }

    /// One request to one node.
    pub fn request(
        &mut self,
        node: NodeId,
        req: Request,
        binary: Vec<u8>,
        timeout: Duration,
    ) -> Result<(Reply, Vec<u8>), EngineError> {
        Ok(self
            .request_all(vec![(node, req, binary)], timeout)?
            .pop()
            .expect("one reply"))
    }

    /// Tells every node the cluster's addresses, so that nodes connect to each other.
    pub fn introduce(&mut self, nodes: &[(NodeId, String)]) -> Result<(), EngineError> {
        let reqs = nodes
            .iter()
            .map(|(id, _)| {
                (
                    *id,
                    Request::Peers {
                        peers: nodes.to_vec(),
                    },
                    Vec::new(),
                )
            })
            .collect();
        self.request_all(reqs, Duration::from_secs(10)).map(|_| ())
    }

    /// Installs `parts` (any order) under `template` on their nodes.
    pub fn install(&mut self, template: u64, parts: &[VertexPart]) -> Result<(), EngineError> {
        let mut by_node: HashMap<NodeId, Vec<VertexPart>> = HashMap::new();
        for p in parts {
            by_node.entry(p.node).or_default().push(p.clone());
        }
        let reqs = by_node
            .into_iter()
            .map(|(node, parts)| (node, Request::Install { template, parts }, Vec::new()))
            .collect();
        self.request_all(reqs, Duration::from_secs(10)).map(|_| ())
    }

    /// Stores chunks on nodes.
    pub fn store(&mut self, chunks: Vec<(NodeId, ChunkRef, Vec<u8>)>) -> Result<(), EngineError> {
        let reqs = chunks
            .into_iter()
            .map(|(node, chunk, bytes)| (node, Request::Store { chunk }, bytes))
            .collect();
        self.request_all(reqs, Duration::from_secs(60)).map(|_| ())
    }

    /// Forgets chunks on nodes.
    pub fn delete(&mut self, chunks: Vec<(NodeId, ChunkRef)>) -> Result<(), EngineError> {
        let mut by_node: HashMap<NodeId, Vec<ChunkRef>> = HashMap::new();
        for (n, c) in chunks {
            by_node.entry(n).or_default().push(c);
        }
        let reqs = by_node
            .into_iter()
            .map(|(node, chunks)| (node, Request::Delete { chunks }, Vec::new()))
            .collect();
        self.request_all(reqs, Duration::from_secs(10)).map(|_| ())
    }

    /// Reads a chunk back.
    pub fn fetch(&mut self, node: NodeId, chunk: ChunkRef) -> Result<Vec<u8>, EngineError> {
        let (_, bytes) = self.request(
            node,
            Request::Fetch { chunk },
            Vec::new(),
            Duration::from_secs(60),
        )?;
        Ok(bytes)
    }

    /// Runs `template` once on `nodes`; returns the time from the first request to the last
    /// `Done`.
    pub fn run(
        &mut self,
        template: u64,
        nodes: &[NodeId],
        mode: Mode,
        timeout: Duration,
    ) -> Result<Duration, EngineError> {
        Ok(self.run_many(template, nodes, mode, 1, 1, timeout)?.elapsed)
    }

    /// Runs `template` `ops` times on `nodes` with up to `window` operations in flight (the
    /// window-based bandwidth benchmark).
    pub fn run_many(
        &mut self,
        template: u64,
        nodes: &[NodeId],
        mode: Mode,
        ops: usize,
        window: usize,
        timeout: Duration,
    ) -> Result<RunStats, EngineError> {
        self.run_observed(template, nodes, mode, ops, window, timeout, &mut |_| {})
    }

    /// [`Coordinator::run_many`], calling `on_done(node)` whenever a node reports its part of
    /// an operation finished (tests use it to act at a known point of a plan).
    #[allow(clippy::too_many_arguments)]
    pub fn run_observed(
        &mut self,
        template: u64,
        nodes: &[NodeId],
        mode: Mode,
        ops: usize,
        window: usize,
        timeout: Duration,
        on_done: &mut dyn FnMut(NodeId),
    ) -> Result<RunStats, EngineError> {
        let start = Instant::now();
        // Nodes give up at `timeout` and say why; wait a little longer to hear it.
        let deadline = start + timeout + Duration::from_secs(2);
        let timeout_ms = timeout.as_millis() as u64;
        // Request id → op index; op index → replies outstanding.
        let mut waiting: HashMap<u64, (usize, NodeId)> = HashMap::new();
        let mut left: Vec<usize> = Vec::new();
        let mut issued = 0;
        let mut finished = 0;
        while finished < ops {
            while issued < ops && issued - finished < window.max(1) {
                let op = self.new_op();
                left.push(nodes.len());
                for &node in nodes {
                    if let Some(reason) = self.lost.get(&node) {
                        return Err(EngineError::PeerLost {
                            peer: node,
                            reason: reason.clone(),
                        });
                    }
                    self.next_req += 1;
                    waiting.insert(self.next_req, (issued, node));
                    let req = Request::Run {
                        op,
                        template,
                        mode,
                        timeout_ms,
                    };
                    send_control(&self.engine, node, self.next_req, &req, &[])?;
                }
                issued += 1;
            }
            let Some(c) = self.next_completion(deadline) else {
                let nodes: Vec<NodeId> = waiting.values().map(|(_, n)| *n).collect();
                return Err(EngineError::Node(format!(
                    "operations not finished within {timeout:?}; waiting for nodes {nodes:?}"
                )));
            };
            match c {
                Completion::Control {
                    op: req,
                    payload,
                    from,
                } => {
                    let Some((i, _)) = waiting.remove(&req) else {
                        continue;
                    };
                    let (reply, _) = decode_control::<Reply>(&payload)
                        .map_err(|e| EngineError::Node(format!("node {from}: {e}")))?;
                    match reply {
                        Reply::Done { error: None, .. } => {
                            on_done(from);
                            left[i] -= 1;
                            if left[i] == 0 {
                                finished += 1;
                            }
                        }
                        Reply::Done {
                            error: Some(message),
                            ..
                        }
                        | Reply::Error { message } => return Err(EngineError::Node(message)),
                        other => {
                            return Err(EngineError::Node(format!(
                                "node {from}: unexpected reply {other:?}"
                            )))
                        }
                    }
                }
                Completion::PeerLost { peer, reason } => {
                    self.lost.insert(peer, reason.clone());
                    if waiting.values().any(|(_, n)| *n == peer) {
                        return Err(EngineError::PeerLost { peer, reason });
                    }
                }
                Completion::Stopped { reason } => return Err(EngineError::Stopped { reason }),
                _ => {}
            }
        }
        Ok(RunStats {
            elapsed: start.elapsed(),
            ops,
        })
    }

    /// Asks every node in `nodes` to shut down, then stops this coordinator's engine.
    pub fn shutdown_nodes(&mut self, nodes: &[NodeId]) -> Result<(), EngineError> {
        let reqs = nodes
            .iter()
            .map(|&n| (n, Request::Shutdown, Vec::new()))
            .collect();
        self.request_all(reqs, Duration::from_secs(10)).map(|_| ())
    }
}

impl Drop for Coordinator {
    fn drop(&mut self) {
        self.engine.shutdown();
    }
}

/// One node of a cluster started by `inec cluster up`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClusterNode {
    pub id: NodeId,
    /// The peer port's address.
    pub addr: String,
    pub pid: u32,
    /// The network namespace the node runs in, if any.
    pub netns: Option<String>,
}

/// The state file of a cluster (`<dir>/cluster.json`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClusterState {
    pub nodes: Vec<ClusterNode>,
    /// The `tc tbf` rate of every node's link, if limited.
    pub link_rate: Option<String>,
}

impl ClusterState {
    /// `(id, address)` of every node.
    pub fn addrs(&self) -> Vec<(NodeId, String)> {
        self.nodes.iter().map(|n| (n.id, n.addr.clone())).collect()
    }
}
