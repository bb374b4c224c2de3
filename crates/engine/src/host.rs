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
//!
//! A host can also **launch** a run itself ([`Launcher`], for an application that is a
//! participant of its own runs, as a cache's agent): its own parts start without a message,
//! every other participant that one of its source parts feeds gets its `start` on the first
//! data frame it is sent ([`crate::wire::Kind::Start`]), the others one `start` message;
//! participants named in [`Launch::acks`] answer `Done`, the others (`quiet`) only if they
//! fail. So a run that sends each participant one chunk costs that chunk and its `Done`, and
//! a run that collects one chunk from each costs a `start` and the chunk.

use std::collections::{HashMap, HashSet, VecDeque};
use std::net::SocketAddr;
use std::sync::mpsc;
use std::sync::{Arc, Mutex, PoisonError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use serde::Serialize;

use crate::channel::{self, Port};
use crate::control::{Reply, Request};
use crate::driver::{Handled, OpDriver, OpResult};
use crate::engine::{Completion, Engine, Mode, WorkRequest};
use crate::part::PartRun;
use crate::pool::BufferPool;
use crate::store::ChunkStore;
use crate::transport::{MemHub, NodeId, TcpTransport};
use crate::EngineError;
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
    /// An opaque reply body; a body too large for a frame is dropped with a warning (the `log` facade)
    /// (the requester then times out): applications keep replies under
    /// [`channel::MAX_CONTROL_BINARY_BYTES`].
    pub fn reply(&self, to: NodeId, req: u64, body: &[u8]) {
        let sent = channel::encode_raw(Port::App, body, self.engine.pool())
            .and_then(|p| channel::post(&self.engine, to, req, p));
        if let Err(e) = sent {
            log::warn!("node {}: reply to {to} dropped: {e}", self.engine.node());
        }
    }

    /// A JSON reply with binary data.
    pub fn reply_json<T: Serialize>(&self, to: NodeId, req: u64, msg: &T, binary: &[u8]) {
        let sent = channel::encode_json(Port::App, msg, binary, self.engine.pool())
            .and_then(|p| channel::post(&self.engine, to, req, p));
        if let Err(e) = sent {
            log::warn!("node {}: reply to {to} dropped: {e}", self.engine.node());
        }
    }
}

/// Why an [`Application`] could not give or keep a chunk: any error of the application's own,
/// kept whole (its message and its source chain).
#[derive(Debug)]
pub struct AppError(Box<dyn std::error::Error + Send + Sync + 'static>);

impl AppError {
    /// Wraps an error of the application (or a message, `AppError::new(format!(..))`).
    pub fn new(error: impl Into<Box<dyn std::error::Error + Send + Sync + 'static>>) -> AppError {
        AppError(error.into())
    }

    /// The application's error, to downcast to its own type.
    pub fn get_ref(&self) -> &(dyn std::error::Error + Send + Sync + 'static) {
        &*self.0
    }
}

impl From<String> for AppError {
    fn from(message: String) -> AppError {
        AppError::new(message)
    }
}

impl From<&str> for AppError {
    fn from(message: &str) -> AppError {
        AppError::new(message)
    }
}

impl std::fmt::Display for AppError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.fmt(f)
    }
}

impl std::error::Error for AppError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.0.source()
    }
}

/// Why a run, a launch or an install failed, as the host reports it to the application that
/// asked. Failures of other nodes arrive as the text of their `Done` reply.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    #[error("node {node}: template {template} is not installed")]
    NotInstalled { node: NodeId, template: u64 },
    /// The host thread did not answer a [`Launcher`] in time (`what` it did not do).
    #[error("the host did not {what}")]
    HostSilent { what: &'static str },
    #[error(transparent)]
    Engine(#[from] EngineError),
    /// A template part that does not validate.
    #[error("{0}")]
    BadPart(#[from] graph::PlanError),
    /// The application refused an input of this node's part.
    #[error(transparent)]
    App(#[from] AppError),
    /// The application could not keep an output of this node's part.
    #[error("node {node}: {source}")]
    Output { node: NodeId, source: AppError },
    /// This node's part was refused or failed in the engine.
    #[error("node {node}: {source}")]
    Part { node: NodeId, source: EngineError },
    /// A template part resized for a run's chunk size does not validate.
    #[error("node {node}: {source}")]
    Resized {
        node: NodeId,
        source: graph::PlanError,
    },
    /// A failure as reported in words: another node's `Done`, a node lost, a timeout.
    #[error("{0}")]
    Failed(String),
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
    ) -> Result<Arc<Vec<u8>>, AppError>;

    /// A chunk `run` computed or received and keeps on this node (a `store` output). An error
    /// (the application could not keep it) fails the node's part of the run.
    fn output(
        &mut self,
        ctx: &HostCtx,
        run: &RunInfo,
        chunk: ChunkRef,
        bytes: Arc<Vec<u8>>,
    ) -> Result<(), AppError>;

    /// `run` starts on this node (before its inputs are asked for).
    fn started(&mut self, _ctx: &HostCtx, _run: &RunInfo) {}

    /// This node's part of `run` has finished (after every `output`), or failed with `error`.
    /// Called just before the host replies `Done`.
    fn finished(&mut self, _ctx: &HostCtx, _run: &RunInfo, _error: Option<&RunError>) {}

    /// An application message ([`Port::App`]) `req` from `from`. Reply with
    /// [`HostCtx::reply`] (now) or a [`Replier`] (later); a message may also go unanswered.
    fn message(&mut self, ctx: &HostCtx, from: NodeId, req: u64, body: &[u8]);
}

/// An application lent to a host ([`serve_with`]).
impl<A: Application + ?Sized> Application for &mut A {
    fn input(
        &mut self,
        ctx: &HostCtx,
        run: &RunInfo,
        chunk: ChunkRef,
    ) -> Result<Arc<Vec<u8>>, AppError> {
        (**self).input(ctx, run, chunk)
    }

    fn output(
        &mut self,
        ctx: &HostCtx,
        run: &RunInfo,
        chunk: ChunkRef,
        bytes: Arc<Vec<u8>>,
    ) -> Result<(), AppError> {
        (**self).output(ctx, run, chunk, bytes)
    }

    fn started(&mut self, ctx: &HostCtx, run: &RunInfo) {
        (**self).started(ctx, run)
    }

    fn finished(&mut self, ctx: &HostCtx, run: &RunInfo, error: Option<&RunError>) {
        (**self).finished(ctx, run, error)
    }

    fn message(&mut self, ctx: &HostCtx, from: NodeId, req: u64, body: &[u8]) {
        (**self).message(ctx, from, req, body)
    }
}

/// A run this node launches ([`Launcher::launch`]).
#[derive(Clone, Debug)]
pub struct Launch {
    /// An installed template of which this node has parts.
    pub template: u64,
    /// The other nodes that take part.
    pub nodes: Vec<NodeId>,
    /// The nodes whose `Done` the launch waits for; the others answer only if they fail.
    pub acks: Vec<NodeId>,
    pub mode: Mode,
    /// Every node gives up on its part after this long; so does the launch.
    pub timeout: Duration,
    /// This run's chunk size, when it differs from the template's.
    pub chunk_bytes: Option<usize>,
    /// The application payload every participant's `start` carries.
    pub payload: Vec<u8>,
}

/// Who hears how a launch ended: a waiting thread, or a call the host makes (which must not
/// block: it runs on the host's thread, or on the loop that steps it).
enum Finish {
    Channel(mpsc::Sender<Result<(), RunError>>),
    Call(Box<dyn FnOnce(Result<(), RunError>) + Send>),
}

impl Finish {
    fn send(self, result: Result<(), RunError>) {
        match self {
            Finish::Channel(tx) => {
                let _ = tx.send(result);
            }
            Finish::Call(f) => f(result),
        }
    }
}

/// What a [`Launcher`] asks its host.
enum LocalRequest {
    Launch(Launch, Finish),
    Install {
        template: u64,
        parts: Vec<VertexPart>,
        done: mpsc::Sender<Result<(), RunError>>,
    },
    InstallEverywhere {
        template: u64,
        parts: Vec<VertexPart>,
        timeout: Duration,
        done: mpsc::Sender<Result<(), RunError>>,
    },
}

/// Asks this node's host, from any thread, to install templates locally (no message) and to
/// launch runs of them. Cheap to clone.
#[derive(Clone)]
pub struct Launcher {
    engine: Engine,
    queue: Arc<Mutex<VecDeque<LocalRequest>>>,
    /// The host is stepped by the loop that drives the engine ([`SteppedHost`]): a request
    /// wakes that loop, not a host thread.
    stepped: bool,
}

impl std::fmt::Debug for Launcher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Launcher(node {})", self.engine.node())
    }
}

impl Launcher {
    fn new(engine: Engine, stepped: bool) -> Launcher {
        Launcher {
            engine,
            queue: Arc::new(Mutex::new(VecDeque::new())),
            stepped,
        }
    }

    fn submit(&self, r: LocalRequest) {
        self.queue
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push_back(r);
        if self.stepped {
            self.engine.wake();
        } else {
            self.engine.cq().push(Completion::Wake);
        }
    }

    /// Whether requests wait for the host.
    fn pending(&self) -> bool {
        !self
            .queue
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .is_empty()
    }

    /// Installs this node's `parts` of a template without a message (every node builds its
    /// own parts of the plans it knows it takes part in); waits for the host. Never from the
    /// loop that steps a [`SteppedHost`] (use [`SteppedHost::install`]).
    pub fn install(&self, template: u64, parts: Vec<VertexPart>) -> Result<(), RunError> {
        let (tx, rx) = mpsc::channel();
        self.submit(LocalRequest::Install {
            template,
            parts,
            done: tx,
        });
        rx.recv_timeout(Duration::from_secs(30))
            .map_err(|_| RunError::HostSilent {
                what: "answer the install",
            })?
    }

    /// Installs a template on every node that has parts of it: this node's parts locally,
    /// every other node's with one `install` message from this node's engine, on the
    /// connections its runs use; waits until each has answered (or one failed, a node was
    /// lost, or `timeout` passed).
    pub fn install_everywhere(
        &self,
        template: u64,
        parts: Vec<VertexPart>,
        timeout: Duration,
    ) -> Result<(), RunError> {
        let (tx, rx) = mpsc::channel();
        self.submit(LocalRequest::InstallEverywhere {
            template,
            parts,
            timeout,
            done: tx,
        });
        rx.recv_timeout(timeout + Duration::from_secs(2))
            .map_err(|_| RunError::HostSilent {
                what: "answer the install",
            })?
    }

    /// Launches a run; the receiver gets its result once this node's parts have finished and
    /// every node in `acks` answered `Done` (or at the first failure, or at the timeout).
    pub fn launch(&self, l: Launch) -> mpsc::Receiver<Result<(), RunError>> {
        let (tx, rx) = mpsc::channel();
        self.submit(LocalRequest::Launch(l, Finish::Channel(tx)));
        rx
    }

    /// [`Launcher::launch`] without a thread that waits: the host calls `done` with the
    /// result, on its own thread, at the moment it would have sent it (an event loop posts it
    /// to itself). `done` must not block.
    pub fn launch_then(&self, l: Launch, done: impl FnOnce(Result<(), RunError>) + Send + 'static) {
        self.submit(LocalRequest::Launch(l, Finish::Call(Box::new(done))));
    }

    /// [`Launcher::launch`] and wait.
    pub fn run(&self, l: Launch) -> Result<(), RunError> {
        let wait = l.timeout + Duration::from_secs(2);
        self.launch(l)
            .recv_timeout(wait)
            .map_err(|_| RunError::HostSilent {
                what: "finish the launch",
            })?
    }
}

/// A run in progress: who to tell when it finishes.
struct Running {
    req: u64,
    info: RunInfo,
    /// Launched here: the result goes to the launch, not to a runner.
    launched: bool,
    /// Answer only a failure.
    quiet: bool,
}

/// A launch waiting for its parts and acknowledgements.
struct LaunchState {
    acks: HashSet<NodeId>,
    own_done: bool,
    deadline: Instant,
    tx: Finish,
}

/// The host's state: installed templates and runs in progress.
struct Host<A: Application> {
    ctx: HostCtx,
    kernel: gf::Kernel,
    driver: OpDriver,
    templates: HashMap<u64, Vec<Arc<VertexPart>>>,
    running: HashMap<u64, Running>,
    launches: HashMap<u64, LaunchState>,
    local: Arc<Mutex<VecDeque<LocalRequest>>>,
    next_op: u64,
    app: A,
}

/// Runs the host loop of `engine`'s node with `app` until a `Shutdown` request or until the
/// engine stops. Returns why it stopped.
pub fn serve_with<A: Application>(engine: Engine, app: &mut A) -> String {
    let launcher = Launcher::new(engine.clone(), false);
    Host::new(engine, app, &launcher).run()
}

/// [`serve_with`], taking local requests from `launcher` (made by [`LocalNode`]).
fn serve_launched<A: Application>(engine: Engine, app: &mut A, launcher: &Launcher) -> String {
    Host::new(engine, app, launcher).run()
}

/// The plain node: [`serve_with`] a [`ChunkStore`].
pub fn serve(engine: Engine) -> String {
    serve_with(engine, &mut ChunkStore::default())
}

impl<A: Application> Host<A> {
    /// The host of `engine`'s node, taking local requests from `launcher`.
    fn new(engine: Engine, app: A, launcher: &Launcher) -> Host<A> {
        // Operation ids of launches: this node's range, from a point that differs per start,
        // so that a restarted node does not reuse ids its peers remember as finished.
        let offset = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64)
            & 0x3_FFFF_FFFF;
        Host {
            ctx: HostCtx {
                engine: engine.clone(),
            },
            kernel: gf::kernel(),
            driver: OpDriver::new(engine.clone()),
            templates: HashMap::new(),
            running: HashMap::new(),
            launches: HashMap::new(),
            local: launcher.queue.clone(),
            next_op: channel::seed(engine.node()) + offset,
            app,
        }
    }

    /// The host loop on a thread of its own: waits on the completion queue.
    fn run(&mut self) -> String {
        let engine = self.ctx.engine.clone();
        let mut batch = Vec::new();
        loop {
            self.local_requests();
            self.expire_launches();
            // Every send produced while handling this batch is posted with one wake-up.
            self.driver.flush();
            let wait = self.next_deadline().map_or(Duration::from_secs(3600), |d| {
                d.saturating_duration_since(Instant::now())
            });
            engine.cq().wait_all(&mut batch, wait);
            for c in batch.drain(..) {
                if let Some(reason) = self.completion(c) {
                    return reason;
                }
            }
        }
    }

    /// The nearest deadline of its launches.
    fn next_deadline(&self) -> Option<Instant> {
        self.launches.values().map(|l| l.deadline).min()
    }

    /// Handles one completion; `Some(why)` when the host must stop.
    fn completion(&mut self, c: Completion) -> Option<String> {
        let engine = self.ctx.engine.clone();
        let c = match self.driver.handle(c) {
            Handled::Consumed => return None,
            Handled::Finished(op, result) => {
                self.finish(op, result);
                return None;
            }
            Handled::Other(c) => c,
        };
        match c {
            Completion::Control { from, op, payload } => {
                let stop = self.control(from, op, &payload);
                engine.pool().put(payload);
                if stop {
                    engine.shutdown();
                    return Some("shutdown requested".into());
                }
            }
            Completion::Stopped { reason } => {
                let ops: Vec<u64> = self.launches.keys().copied().collect();
                for op in ops {
                    self.launch_failed(
                        op,
                        RunError::Engine(EngineError::Stopped {
                            reason: reason.clone(),
                        }),
                    );
                }
                return Some(reason);
            }
            Completion::PeerLost { peer, reason } => {
                let ops: Vec<u64> = self
                    .launches
                    .iter()
                    .filter(|(_, l)| l.acks.contains(&peer))
                    .map(|(&op, _)| op)
                    .collect();
                for op in ops {
                    self.launch_failed(op, RunError::Failed(format!("node {peer} lost: {reason}")));
                }
            }
            _ => {}
        }
        None
    }

    /// Installs this node's `parts` of a template (a [`LocalRequest::Install`]).
    fn install_local(&mut self, template: u64, parts: Vec<VertexPart>) -> Result<(), RunError> {
        parts
            .iter()
            .try_for_each(VertexPart::validate)
            .map_err(RunError::BadPart)?;
        self.templates
            .insert(template, parts.into_iter().map(Arc::new).collect());
        Ok(())
    }

    /// Handles one control payload; true when the host must stop.
    fn control(&mut self, from: NodeId, req: u64, payload: &[u8]) -> bool {
        let body = match channel::split(payload) {
            Ok((Port::App, body)) => {
                self.app.message(&self.ctx, from, req, body);
                return false;
            }
            Ok((Port::Engine, body)) => body,
            Err(e) => {
                let message = e.to_string();
                self.reply(from, req, &Reply::Error { message });
                return false;
            }
        };
        let node = self.ctx.node();
        let reply = match channel::decode_json::<Request>(body) {
            Err(e) => {
                // A reply (a participant's `Done` to a launch) is never answered.
                if let Ok((reply, _)) = channel::decode_json::<Reply>(body) {
                    self.launch_reply(from, req, reply);
                    return false;
                }
                Reply::Error {
                    message: e.to_string(),
                }
            }
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
                    chunk_bytes,
                    quiet,
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
                let how = How {
                    timeout_ms,
                    chunk_bytes: chunk_bytes.map(|b| b as usize),
                    launched: false,
                    quiet,
                };
                match self.start(&info, req, how) {
                    Ok(()) => return false,
                    Err(error) => {
                        self.app.finished(&self.ctx, &info, Some(&error));
                        Reply::Done {
                            op,
                            error: Some(error.to_string()),
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
    fn start(&mut self, info: &RunInfo, req: u64, how: How) -> Result<(), RunError> {
        let node = self.ctx.node();
        self.app.started(&self.ctx, info);
        let Some(parts) = self.templates.get(&info.template) else {
            return Err(RunError::NotInstalled {
                node,
                template: info.template,
            });
        };
        let mut runs = Vec::with_capacity(parts.len());
        for p in parts {
            let p = match how.chunk_bytes {
                Some(bytes) if bytes != p.chunk_bytes => {
                    let mut q = VertexPart::clone(p);
                    if q.slice_bytes >= q.chunk_bytes {
                        q.slice_bytes = bytes;
                    }
                    q.chunk_bytes = bytes;
                    q.validate()
                        .map_err(|source| RunError::Resized { node, source })?;
                    Arc::new(q)
                }
                _ => p.clone(),
            };
            let locals = p
                .local
                .iter()
                .map(|&c| self.app.input(&self.ctx, info, c))
                .collect::<Result<Vec<_>, AppError>>()?;
            let run = PartRun::new(info.op, p, locals, self.kernel, self.ctx.pool().clone())
                .map_err(|source| RunError::Part { node, source })?;
            runs.push(run);
        }
        self.running.insert(
            info.op,
            Running {
                req,
                info: info.clone(),
                launched: how.launched,
                quiet: how.quiet,
            },
        );
        if let Some((op, result)) = self.driver.start(
            info.op,
            runs,
            info.mode,
            Duration::from_millis(how.timeout_ms),
        ) {
            self.finish(op, result);
        }
        Ok(())
    }

    /// Hands a finished run's outputs to the application and tells its runner.
    fn finish(&mut self, op: u64, result: OpResult) {
        let Some(r) = self.running.remove(&op) else {
            return;
        };
        let node = self.ctx.node();
        let error = match result {
            Ok(results) => {
                let mut error = None;
                for (chunk, bytes) in results {
                    if let Err(source) = self.app.output(&self.ctx, &r.info, chunk, bytes) {
                        error.get_or_insert(RunError::Output { node, source });
                    }
                }
                error
            }
            Err(source) => Some(RunError::Part { node, source }),
        };
        self.app.finished(&self.ctx, &r.info, error.as_ref());
        if r.launched {
            match error {
                Some(e) => self.launch_failed(op, e),
                None => {
                    if let Some(l) = self.launches.get_mut(&op) {
                        l.own_done = true;
                    }
                    self.launch_progress(op);
                }
            }
        } else if !(r.quiet && error.is_none()) {
            let error = error.map(|e| e.to_string());
            self.reply(r.info.runner, r.req, &Reply::Done { op, error });
        }
    }

    /// Handles the requests of this node's [`Launcher`]s.
    fn local_requests(&mut self) {
        loop {
            let Some(r) = self
                .local
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .pop_front()
            else {
                return;
            };
            match r {
                LocalRequest::Install {
                    template,
                    parts,
                    done,
                } => {
                    let _ = done.send(self.install_local(template, parts));
                }
                LocalRequest::Launch(l, tx) => self.launch(l, tx),
                LocalRequest::InstallEverywhere {
                    template,
                    parts,
                    timeout,
                    done,
                } => self.install_everywhere(template, parts, timeout, done),
            }
        }
    }

    /// Installs this node's parts of a template and sends every other node its own; the
    /// answers are counted as a launch's (`launch_reply`).
    fn install_everywhere(
        &mut self,
        template: u64,
        parts: Vec<VertexPart>,
        timeout: Duration,
        done: mpsc::Sender<Result<(), RunError>>,
    ) {
        if let Err(e) = parts.iter().try_for_each(VertexPart::validate) {
            let _ = done.send(Err(RunError::BadPart(e)));
            return;
        }
        let node = self.ctx.node();
        let mut by_node: HashMap<NodeId, Vec<VertexPart>> = HashMap::new();
        for p in parts {
            by_node.entry(p.node as NodeId).or_default().push(p);
        }
        if let Some(mine) = by_node.remove(&node) {
            self.templates
                .insert(template, mine.into_iter().map(Arc::new).collect());
        }
        self.next_op += 1;
        let op = self.next_op;
        let mut messages = Vec::new();
        for (p, parts) in by_node {
            let req = Request::Install { template, parts };
            match channel::encode_json(Port::Engine, &req, &[], self.ctx.pool()) {
                Ok(bytes) => messages.push((p, bytes)),
                Err(e) => {
                    let _ = done.send(Err(RunError::Engine(e)));
                    return;
                }
            }
        }
        self.launches.insert(
            op,
            LaunchState {
                acks: messages.iter().map(|(p, _)| *p).collect(),
                own_done: true,
                deadline: Instant::now() + timeout,
                tx: Finish::Channel(done),
            },
        );
        for (p, bytes) in messages {
            if let Err(e) = channel::post(&self.ctx.engine, p, op, bytes) {
                self.launch_failed(op, RunError::Engine(e));
                return;
            }
        }
        self.launch_progress(op);
    }

    /// Starts a launch: the participants' starts (attached to the first frame each is fed,
    /// else one message), then this node's parts.
    fn launch(&mut self, l: Launch, tx: Finish) {
        let node = self.ctx.node();
        self.next_op += 1;
        let op = self.next_op;
        let Some(parts) = self.templates.get(&l.template) else {
            tx.send(Err(RunError::NotInstalled {
                node,
                template: l.template,
            }));
            return;
        };
        // The nodes this node's source parts send to as soon as they start.
        let fed: HashSet<NodeId> = parts
            .iter()
            .filter(|p| p.inputs.is_empty())
            .flat_map(|p| p.outputs.iter().flat_map(|o| o.sends.iter().map(|s| s.to)))
            .collect();
        let timeout_ms = l.timeout.as_millis() as u64;
        let mut attach = Vec::new();
        let mut messages = Vec::new();
        let mut seen = HashSet::new();
        for &p in l.nodes.iter().filter(|&&p| p != node) {
            if !seen.insert(p) {
                continue;
            }
            let req = Request::Start {
                template: l.template,
                op,
                mode: l.mode,
                timeout_ms,
                chunk_bytes: l.chunk_bytes.map(|b| b as u64),
                quiet: !l.acks.contains(&p),
            };
            let bytes = match channel::encode_json(Port::Engine, &req, &l.payload, self.ctx.pool())
            {
                Ok(b) => b,
                Err(e) => {
                    tx.send(Err(RunError::Engine(e)));
                    return;
                }
            };
            if fed.contains(&p) {
                attach.push((p, bytes));
            } else {
                messages.push((p, bytes));
            }
        }
        self.launches.insert(
            op,
            LaunchState {
                acks: l.acks.iter().copied().filter(|&a| a != node).collect(),
                own_done: false,
                deadline: Instant::now() + l.timeout,
                tx,
            },
        );
        if !attach.is_empty() {
            self.ctx
                .engine
                .post(WorkRequest::Attach { op, starts: attach });
        }
        for (p, bytes) in messages {
            if let Err(e) = channel::post(&self.ctx.engine, p, op, bytes) {
                self.launch_failed(op, RunError::Engine(e));
                return;
            }
        }
        let info = RunInfo {
            template: l.template,
            op,
            mode: l.mode,
            runner: node,
            payload: l.payload,
        };
        let how = How {
            timeout_ms,
            chunk_bytes: l.chunk_bytes,
            launched: true,
            quiet: false,
        };
        if let Err(e) = self.start(&info, op, how) {
            self.app.finished(&self.ctx, &info, Some(&e));
            self.launch_failed(op, e);
        }
    }

    /// A participant's answer to a launch.
    fn launch_reply(&mut self, from: NodeId, op: u64, reply: Reply) {
        if !self.launches.contains_key(&op) {
            return;
        }
        match reply {
            // `Ok` answers an install sent by `install_everywhere`.
            Reply::Done { error: None, .. } | Reply::Ok => {
                if let Some(l) = self.launches.get_mut(&op) {
                    l.acks.remove(&from);
                }
                self.launch_progress(op);
            }
            Reply::Done {
                error: Some(message),
                ..
            }
            | Reply::Error { message } => self.launch_failed(op, RunError::Failed(message)),
        }
    }

    fn launch_progress(&mut self, op: u64) {
        if self
            .launches
            .get(&op)
            .is_some_and(|l| l.own_done && l.acks.is_empty())
        {
            let l = self.launches.remove(&op).expect("present");
            l.tx.send(Ok(()));
        }
    }

    /// Fails a launch: tells the caller and stops this node's parts (the engine aborts the
    /// peers they exchange data with).
    fn launch_failed(&mut self, op: u64, error: RunError) {
        let Some(l) = self.launches.remove(&op) else {
            return;
        };
        if self.running.contains_key(&op) {
            self.ctx.engine.post(WorkRequest::Fail {
                op,
                error: crate::EngineError::Stopped {
                    reason: error.to_string(),
                },
            });
        } else {
            // Nothing runs here: forget the run's start attachments and late frames.
            self.ctx.engine.post(WorkRequest::Release { op });
        }
        l.tx.send(Err(error));
    }

    fn expire_launches(&mut self) {
        let now = Instant::now();
        let late: Vec<u64> = self
            .launches
            .iter()
            .filter(|(_, l)| l.deadline <= now)
            .map(|(&op, _)| op)
            .collect();
        for op in late {
            let waiting: Vec<NodeId> = self.launches[&op].acks.iter().copied().collect();
            self.launch_failed(
                op,
                RunError::Failed(format!(
                    "launch timed out waiting for nodes {waiting:?} or this node's parts"
                )),
            );
        }
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

/// How a run is started on this node.
#[derive(Clone, Copy, Debug)]
struct How {
    timeout_ms: u64,
    chunk_bytes: Option<usize>,
    launched: bool,
    quiet: bool,
}

/// A node running in this process (engine thread + host thread).
#[derive(Debug)]
pub struct LocalNode {
    pub engine: Engine,
    pub addr: Option<SocketAddr>,
    launcher: Launcher,
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

    /// A node running `app` on the host thread over an engine made already: one driven by
    /// another event loop ([`Engine::driven`]), so that the node runs no engine thread.
    pub fn with_engine<A: Application + Send + 'static>(engine: Engine, app: A) -> LocalNode {
        LocalNode::spawn(engine, None, app)
    }

    fn spawn<A: Application + Send + 'static>(
        engine: Engine,
        addr: Option<SocketAddr>,
        mut app: A,
    ) -> LocalNode {
        let e = engine.clone();
        let launcher = Launcher::new(engine.clone(), false);
        let l = launcher.clone();
        let thread = std::thread::Builder::new()
            .name(format!("node-{}", engine.node()))
            .spawn(move || serve_launched(e, &mut app, &l))
            .expect("spawn node thread");
        LocalNode {
            engine,
            addr,
            launcher,
            app: Some(thread),
        }
    }

    /// Installs templates and launches runs on this node's host.
    pub fn launcher(&self) -> Launcher {
        self.launcher.clone()
    }

    /// Waits for the node's host loop to end (after a `Shutdown` request or a kill).
    pub fn join(mut self) -> String {
        self.app
            .take()
            .map(|h| h.join().unwrap_or_else(|_| "panicked".into()))
            .unwrap_or_default()
    }
}

/// A node's host without a thread of its own: the loop that drives the node's engine
/// ([`Engine::driven`]) steps it after each turn of the engine, so that a launch, a run's
/// start and its end are handled by the thread that moves the run's frames, with no hand-off
/// between threads. [`Launcher`]s made here wake that loop (the engine's waker) instead of a
/// host thread.
///
/// The loop's round: [`SteppedHost::step`] (requests of the launchers), [`Driven::turn`],
/// `step` again (the completions the turn pushed), and again while [`SteppedHost::pending`].
/// The application's calls run on that loop and must not block; nor may the loop wait on
/// one of the launchers (its [`Launcher::run`], [`Launcher::install`]): it is the host. Once
/// a step says the host stopped, the loop turns the engine once more: the host's last replies
/// and the engine's own stop are work requests.
///
/// [`Driven::turn`]: crate::Driven::turn
pub struct SteppedHost<A: Application> {
    host: Host<A>,
    launcher: Launcher,
    batch: Vec<Completion>,
    stopped: Option<String>,
}

impl<A: Application> std::fmt::Debug for SteppedHost<A> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "SteppedHost(node {})", self.host.ctx.node())
    }
}

impl<A: Application> SteppedHost<A> {
    /// The host of `engine`'s node running `app`; `engine` is driven by the caller's loop.
    pub fn new(engine: Engine, app: A) -> SteppedHost<A> {
        let launcher = Launcher::new(engine.clone(), true);
        SteppedHost {
            host: Host::new(engine, app, &launcher),
            launcher,
            batch: Vec::new(),
            stopped: None,
        }
    }

    /// Installs templates and launches runs on this host, from any thread.
    pub fn launcher(&self) -> Launcher {
        self.launcher.clone()
    }

    /// The engine whose completions this host takes.
    pub fn engine(&self) -> &Engine {
        &self.host.ctx.engine
    }

    /// Installs this node's `parts` of a template at once (before the loop runs, or on it).
    pub fn install(&mut self, template: u64, parts: Vec<VertexPart>) -> Result<(), RunError> {
        self.host.install_local(template, parts)
    }

    /// One step: the launchers' requests, then every completion queued, then the launches
    /// that timed out; the work requests all that produced are posted together. Never waits.
    /// `Err` once the host stopped (a `Shutdown` request, or the engine stopped), with why.
    pub fn step(&mut self) -> Result<(), String> {
        if let Some(reason) = &self.stopped {
            return Err(reason.clone());
        }
        let host = &mut self.host;
        host.local_requests();
        host.ctx.engine.cq().take_all(&mut self.batch);
        let mut stop = None;
        for c in self.batch.drain(..) {
            // After a stop, the rest is dropped: the host takes nothing more.
            if stop.is_none() {
                stop = host.completion(c);
            }
        }
        if let Some(reason) = stop {
            self.stopped = Some(reason.clone());
            return Err(reason);
        }
        host.expire_launches();
        host.driver.flush();
        Ok(())
    }

    /// Whether the engine must turn (work posted) or the host step again (requests of the
    /// launchers, completions) before the loop may wait.
    pub fn pending(&self) -> bool {
        self.stopped.is_none()
            && (self.host.ctx.engine.has_work()
                || self.launcher.pending()
                || self.host.ctx.engine.cq().has_any())
    }

    /// When the host must step next without an event: the nearest launch deadline.
    pub fn next_deadline(&self) -> Option<Instant> {
        match self.stopped {
            Some(_) => None,
            None => self.host.next_deadline(),
        }
    }
}
