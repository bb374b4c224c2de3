//! The host: the application loop of one node. It answers the engine's control messages
//! ([`crate::control`]): keeps installed plan templates, starts them as runs when a runner
//! sends `Start`, and replies `Done` when the node's part of a run has finished. Everything
//! else is the [`Application`]'s: it provides the local inputs of a run, receives its outputs,
//! and answers its own messages ([`Port::App`]). [`crate::ChunkStore`] is the plain node's
//! application; a cache brings its own storage and message type.
//!
//! ```text
//! runner ──Install(template, parts)──▶ host      once per node and plan
//! runner ──Start(template, op, mode, payload)──▶ host ── Application::input(run, chunk) …
//!                                                 engine runs the parts (frames between hosts)
//! runner ◀──Done(op)── host ◀── Application::output(run, chunk, bytes), finished(run)
//! ```

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use serde::Serialize;

use crate::channel::{self, Port};
use crate::control::{Reply, Request};
use crate::driver::{Handled, OpDriver, OpResult};
use crate::engine::{Completion, Engine, Mode, WorkRequest};
use crate::part::PartRun;
use crate::pool::BufferPool;
use crate::store::ChunkStore;
use crate::transport::{MemHub, NodeId, TcpTransport};
use graph::part::{ChunkRef, VertexPart};

/// One run of an installed template on this node, as the application sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RunInfo {
    pub template: u64,
    /// The run's tag: the operation id its frames carry.
    pub op: u64,
    pub mode: Mode,
    /// The runner that started it.
    pub runner: NodeId,
    /// The application payload of the `Start` message (empty for the chunk store).
    pub payload: Vec<u8>,
}

/// What an application can do with the host while it handles a call: reply to messages (now,
/// or later through a [`Replier`]), and reach the engine and its buffer pool.
#[derive(Debug)]
pub struct HostCtx {
    engine: Engine,
}

impl HostCtx {
    pub fn node(&self) -> NodeId {
        self.engine.node()
    }

    pub fn pool(&self) -> &BufferPool {
        self.engine.pool()
    }

    pub fn engine(&self) -> &Engine {
        &self.engine
    }

    /// A handle for replying later, from this or another thread.
    pub fn replier(&self) -> Replier {
        Replier {
            engine: self.engine.clone(),
        }
    }

    /// Replies to application message `req` from `to` with an opaque body.
    pub fn reply(&self, to: NodeId, req: u64, body: &[u8]) {
        self.replier().reply(to, req, body);
    }

    /// Replies with a JSON body and binary data (see [`channel::encode_json`]).
    pub fn reply_json<T: Serialize>(&self, to: NodeId, req: u64, msg: &T, binary: &[u8]) {
        self.replier().reply_json(to, req, msg, binary);
    }
}

/// Sends application replies ([`Port::App`]); cheap to clone and `Send`.
#[derive(Clone, Debug)]
pub struct Replier {
    engine: Engine,
}

impl Replier {
    /// An opaque reply body; a body too large for a frame is dropped with a message on stderr
    /// (the requester then times out): applications keep replies under
    /// [`channel::MAX_CONTROL_BINARY_BYTES`].
    pub fn reply(&self, to: NodeId, req: u64, body: &[u8]) {
        let sent = channel::encode_raw(Port::App, body, self.engine.pool())
            .and_then(|p| channel::post(&self.engine, to, req, p));
        if let Err(e) = sent {
            eprintln!("node {}: reply to {to} dropped: {e}", self.engine.node());
        }
    }

    /// A JSON reply with binary data.
    pub fn reply_json<T: Serialize>(&self, to: NodeId, req: u64, msg: &T, binary: &[u8]) {
        let sent = channel::encode_json(Port::App, msg, binary, self.engine.pool())
            .and_then(|p| channel::post(&self.engine, to, req, p));
        if let Err(e) = sent {
            eprintln!("node {}: reply to {to} dropped: {e}", self.engine.node());
        }
    }
}

/// What a node does besides running plans: its storage and its own messages. The host calls
/// it from its one application thread.
pub trait Application {
    /// The bytes of local chunk `chunk` of a part of `run` (one call per local chunk of each
    /// of this node's parts, when the run starts). The error fails the run on this node.
    fn input(
        &mut self,
        ctx: &HostCtx,
        run: &RunInfo,
        chunk: ChunkRef,
    ) -> Result<Arc<Vec<u8>>, String>;

    /// A chunk `run` computed or received and keeps on this node (a `store` output).
    fn output(&mut self, ctx: &HostCtx, run: &RunInfo, chunk: ChunkRef, bytes: Arc<Vec<u8>>);

    /// This node's part of `run` has finished (after every `output`), or failed with `error`.
    /// Called just before the host replies `Done`.
    fn finished(&mut self, _ctx: &HostCtx, _run: &RunInfo, _error: Option<&str>) {}

    /// An application message ([`Port::App`]) `req` from `from`. Reply with
    /// [`HostCtx::reply`] (now) or a [`Replier`] (later); a message may also go unanswered.
    fn message(&mut self, ctx: &HostCtx, from: NodeId, req: u64, body: &[u8]);
}

/// A run in progress: who to tell when it finishes.
struct Running {
    req: u64,
    info: RunInfo,
}

/// The host's state: installed templates and runs in progress.
struct Host<'a, A: Application> {
    ctx: HostCtx,
    kernel: gf::Kernel,
    driver: OpDriver,
    templates: HashMap<u64, Vec<Arc<VertexPart>>>,
    running: HashMap<u64, Running>,
    app: &'a mut A,
}

/// Runs the host loop of `engine`'s node with `app` until a `Shutdown` request or until the
/// engine stops. Returns why it stopped.
pub fn serve_with<A: Application>(engine: Engine, app: &mut A) -> String {
    let mut host = Host {
        ctx: HostCtx {
            engine: engine.clone(),
        },
        kernel: gf::kernel(),
        driver: OpDriver::new(engine.clone()),
        templates: HashMap::new(),
        running: HashMap::new(),
        app,
    };
    host.run()
}

/// The plain node: [`serve_with`] a [`ChunkStore`].
pub fn serve(engine: Engine) -> String {
    serve_with(engine, &mut ChunkStore::default())
}

impl<A: Application> Host<'_, A> {
    fn run(&mut self) -> String {
        let engine = self.ctx.engine.clone();
        let mut batch = Vec::new();
        loop {
            // Every send produced while handling this batch is posted with one wake-up.
            self.driver.flush();
            engine.cq().wait_all(&mut batch, Duration::from_secs(3600));
            for c in batch.drain(..) {
                let c = match self.driver.handle(c) {
                    Handled::Consumed => continue,
                    Handled::Finished(op, result) => {
                        self.finish(op, result);
                        continue;
                    }
                    Handled::Other(c) => c,
                };
                match c {
                    Completion::Control { from, op, payload } => {
                        let stop = self.control(from, op, &payload);
                        engine.pool().put(payload);
                        if stop {
                            engine.shutdown();
                            return "shutdown requested".into();
                        }
                    }
                    Completion::Stopped { reason } => return reason,
                    _ => {}
                }
            }
        }
    }

    /// Handles one control payload; true when the host must stop.
    fn control(&mut self, from: NodeId, req: u64, payload: &[u8]) -> bool {
        let body = match channel::split(payload) {
            Ok((Port::App, body)) => {
                self.app.message(&self.ctx, from, req, body);
                return false;
            }
            Ok((Port::Engine, body)) => body,
            Err(message) => {
                self.reply(from, req, &Reply::Error { message });
                return false;
            }
        };
        let node = self.ctx.node();
        let reply = match channel::decode_json::<Request>(body) {
            Err(message) => Reply::Error { message },
            Ok((Request::Shutdown, _)) => {
                self.driver.flush();
                self.reply(from, req, &Reply::Ok);
                return true;
            }
            Ok((Request::Peers { peers }, _)) => {
                let wrs = peers
                    .into_iter()
                    .filter(|(id, _)| *id < node)
                    .map(|(peer, addr)| WorkRequest::Connect { peer, addr });
                self.ctx.engine.post_all(wrs);
                Reply::Ok
            }
            Ok((Request::Install { template, parts }, _)) => {
                match parts.iter().try_for_each(VertexPart::validate) {
                    Err(e) => Reply::Error {
                        message: e.to_string(),
                    },
                    Ok(()) => {
                        self.templates
                            .insert(template, parts.into_iter().map(Arc::new).collect());
                        Reply::Ok
                    }
                }
            }
            Ok((Request::Uninstall { template }, _)) => {
                self.templates.remove(&template);
                Reply::Ok
            }
            Ok((
                Request::Start {
                    template,
                    op,
                    mode,
                    timeout_ms,
                },
                app_payload,
            )) => {
                let info = RunInfo {
                    template,
                    op,
                    mode,
                    runner: from,
                    payload: app_payload.to_vec(),
                };
                match self.start(&info, req, timeout_ms) {
                    Ok(()) => return false,
                    Err(error) => {
                        self.app.finished(&self.ctx, &info, Some(&error));
                        Reply::Done {
                            op,
                            error: Some(error),
                        }
                    }
                }
            }
            Ok((Request::Ping, _)) => Reply::Ok,
        };
        self.reply(from, req, &reply);
        false
    }

    /// Starts this node's parts of a run; the `Done` reply follows when they finish.
    fn start(&mut self, info: &RunInfo, req: u64, timeout_ms: u64) -> Result<(), String> {
        let node = self.ctx.node();
        let Some(parts) = self.templates.get(&info.template) else {
            return Err(format!(
                "node {node}: template {} is not installed",
                info.template
            ));
        };
        let mut runs = Vec::with_capacity(parts.len());
        for p in parts {
            let locals = p
                .local
                .iter()
                .map(|&c| self.app.input(&self.ctx, info, c))
                .collect::<Result<Vec<_>, String>>()?;
            let run = PartRun::new(
                info.op,
                p.clone(),
                locals,
                self.kernel,
                self.ctx.pool().clone(),
            )
            .map_err(|e| format!("node {node}: {e}"))?;
            runs.push(run);
        }
        self.running.insert(
            info.op,
            Running {
                req,
                info: info.clone(),
            },
        );
        if let Some((op, result)) =
            self.driver
                .start(info.op, runs, info.mode, Duration::from_millis(timeout_ms))
        {
            self.finish(op, result);
        }
        Ok(())
    }

    /// Hands a finished run's outputs to the application and tells its runner.
    fn finish(&mut self, op: u64, result: OpResult) {
        let Some(r) = self.running.remove(&op) else {
            return;
        };
        let error = match result {
            Ok(results) => {
                for (chunk, bytes) in results {
                    self.app.output(&self.ctx, &r.info, chunk, bytes);
                }
                None
            }
            Err(e) => Some(format!("node {}: {e}", self.ctx.node())),
        };
        self.app.finished(&self.ctx, &r.info, error.as_deref());
        self.reply(r.info.runner, r.req, &Reply::Done { op, error });
    }

    /// Sends an engine reply; one too large for a frame becomes an error reply.
    fn reply(&self, to: NodeId, req: u64, reply: &Reply) {
        let engine = &self.ctx.engine;
        let sent = channel::encode_json(Port::Engine, reply, &[], engine.pool())
            .and_then(|p| channel::post(engine, to, req, p));
        if let Err(e) = sent {
            let message = format!("node {}: reply too large: {e}", engine.node());
            if let Ok(p) =
                channel::encode_json(Port::Engine, &Reply::Error { message }, &[], engine.pool())
            {
                let _ = channel::post(engine, to, req, p);
            }
        }
    }
}

/// A node running in this process (engine thread + host thread).
#[derive(Debug)]
pub struct LocalNode {
    pub engine: Engine,
    pub addr: Option<SocketAddr>,
    app: Option<JoinHandle<String>>,
}

impl LocalNode {
    /// A chunk-store node on an in-memory hub.
    pub fn mem(hub: &MemHub, id: NodeId, pool: BufferPool) -> LocalNode {
        LocalNode::mem_with(hub, id, pool, ChunkStore::default())
    }

    /// A node running `app` on an in-memory hub.
    pub fn mem_with<A: Application + Send + 'static>(
        hub: &MemHub,
        id: NodeId,
        pool: BufferPool,
        app: A,
    ) -> LocalNode {
        let engine = Engine::start(hub.attach(id, pool.clone()), pool);
        LocalNode::spawn(engine, None, app)
    }

    /// A chunk-store node listening on `addr` (port 0: any free port; see `addr`).
    pub fn tcp(id: NodeId, addr: SocketAddr, pool: BufferPool) -> std::io::Result<LocalNode> {
        LocalNode::tcp_with(id, addr, pool, ChunkStore::default())
    }

    /// A node running `app`, listening on `addr`.
    pub fn tcp_with<A: Application + Send + 'static>(
        id: NodeId,
        addr: SocketAddr,
        pool: BufferPool,
        app: A,
    ) -> std::io::Result<LocalNode> {
        let t = TcpTransport::bind(id, addr, pool.clone())?;
        let bound = t.local_addr();
        Ok(LocalNode::spawn(Engine::start(t, pool), bound, app))
    }

    fn spawn<A: Application + Send + 'static>(
        engine: Engine,
        addr: Option<SocketAddr>,
        mut app: A,
    ) -> LocalNode {
        let e = engine.clone();
        let thread = std::thread::Builder::new()
            .name(format!("node-{}", engine.node()))
            .spawn(move || serve_with(e, &mut app))
            .expect("spawn node thread");
        LocalNode {
            engine,
            addr,
            app: Some(thread),
        }
    }

    /// Waits for the node's host loop to end (after a `Shutdown` request or a kill).
    pub fn join(mut self) -> String {
        self.app
            .take()
            .map(|h| h.join().unwrap_or_else(|_| "panicked".into()))
            .unwrap_or_default()
    }
}
