//! The per-node engine of inec: work queues and completion queues, the three INEC primitives
//! (`ec/xor-send`, `recv-ec/xor-send`, `recv-ec/xor`) executed coherently or incoherently,
//! and the transports that carry slices between nodes (in-memory and TCP).
//!
//! A node runs one [`Engine`] thread that owns its transport. The application posts
//! [`WorkRequest`]s and waits on the engine's [`CompletionQueue`]. A vertex of a plan is a
//! [`VertexPart`] (`graph`'s lowering, [`graph::Plan::parts`]); running it for one operation
//! is a [`PartRun`], the compiled chain of `WAIT → CALC → SEND` per slice. In [`Mode::Coherent`] the whole chain is posted once and the
//! engine thread runs every step as slices arrive; in [`Mode::Incoherent`] the application
//! thread (through [`OpDriver`]) is woken for every received slice, computes, and posts each
//! send. `docs/engine.md` describes the threads and locks, `docs/wire.md` the frames.
//!
//! ```
//! use std::sync::Arc;
//! use std::time::Duration;
//! use engine::{BufferPool, ChunkRef, Engine, InEdge, MemHub, Mode, OpDriver, Handled,
//!              OutEdge, OutputSpec, PartRun, VertexPart};
//!
//! // Node 0 xor-sends its two chunks to node 1, which keeps the result.
//! let hub = MemHub::new();
//! let pool = BufferPool::new();
//! let (e0, e1) = (Engine::start(hub.attach(0, pool.clone()), pool.clone()),
//!                 Engine::start(hub.attach(1, pool.clone()), pool.clone()));
//! let sender = Arc::new(VertexPart {
//!     vertex: 0, node: 0, chunk_bytes: 8, slice_bytes: 4,
//!     local: vec![ChunkRef { stripe: 0, index: 0 }, ChunkRef { stripe: 0, index: 1 }],
//!     inputs: vec![], coeffs: vec![1, 1],
//!     outputs: vec![OutputSpec { sends: vec![OutEdge { edge: 0, to: 1 }], store: None }],
//! });
//! let receiver = Arc::new(VertexPart {
//!     vertex: 1, node: 1, chunk_bytes: 8, slice_bytes: 4, local: vec![],
//!     inputs: vec![InEdge { edge: 0, from: 0 }], coeffs: vec![1],
//!     outputs: vec![OutputSpec { sends: vec![], store: Some(ChunkRef { stripe: 0, index: 9 }) }],
//! });
//! let k = gf::kernel();
//! let a = Arc::new(vec![1u8; 8]);
//! let b = Arc::new(vec![2u8; 8]);
//! let (mut d0, mut d1) = (OpDriver::new(e0.clone()), OpDriver::new(e1.clone()));
//! d1.start(7, vec![PartRun::new(7, receiver, vec![], k, pool.clone()).unwrap()],
//!          Mode::Coherent, Duration::from_secs(5));
//! d0.start(7, vec![PartRun::new(7, sender, vec![a, b], k, pool.clone()).unwrap()],
//!          Mode::Coherent, Duration::from_secs(5));
//! let result = loop {
//!     let c = e1.cq().wait(Duration::from_secs(5)).expect("completion");
//!     if let Handled::Finished(_, r) = d1.handle(c) { break r.unwrap(); }
//! };
//! assert_eq!(*result[0].1, vec![3u8; 8]);
//! e0.shutdown();
//! e1.shutdown();
//! ```
#![forbid(unsafe_code)]

pub mod channel;
pub mod control;
mod driver;
mod engine;
pub mod host;
mod part;
mod pool;
pub mod runner;
pub mod stdout;
pub mod store;
#[cfg(feature = "test-support")]
pub mod testing;
pub mod transport;
pub mod wire;

pub use driver::{Handled, OpDriver, OpResult};
pub use engine::{Completion, CompletionQueue, Driven, Engine, Mode, WorkRequest};
pub use graph::part::{ChunkRef, InEdge, OutEdge, OutputSpec, VertexPart};
pub use graph::Primitive;
pub use host::{
    serve, serve_with, AppError, Application, HostCtx, Launch, Launcher, LocalNode, Replier,
    RunError, RunInfo, SteppedHost,
};
pub use part::{Outgoing, PartRun};
pub use pool::BufferPool;
pub use runner::{done_of, runner_id, PlanRunner, RunSpec, RunStats};
pub use store::{ChunkStore, StoreReply, StoreRequest};
pub use transport::{
    MemHub, MemTransport, NodeId, Payload, TcpTransport, Transport, TransportError, RUNNER_BASE,
};

/// Errors of the engine. Each says whether a peer or this node is at fault.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EngineError {
    #[error("transport: {0}")]
    Transport(#[from] TransportError),
    #[error("wire: {0}")]
    Wire(#[from] wire::WireError),
    #[error("peer {peer} lost: {reason}")]
    PeerLost { peer: NodeId, reason: String },
    #[error("peer {peer} aborted the operation: {reason}")]
    PeerAborted { peer: NodeId, reason: String },
    #[error("operation {op} timed out on this node")]
    Timeout { op: u64 },
    #[error("unexpected slice {slice} of edge {edge} in operation {op}: {reason}")]
    UnexpectedSlice {
        op: u64,
        edge: u32,
        slice: u32,
        reason: String,
    },
    #[error("bad plan part for vertex {vertex}: {reason}")]
    BadPart { vertex: usize, reason: String },
    #[error("engine stopped: {reason}")]
    Stopped { reason: String },
    #[error("node {node}: {message}")]
    Remote { node: NodeId, message: String },
    #[error("no reply from nodes {nodes:?} within {timeout:?}")]
    NoReply {
        nodes: Vec<NodeId>,
        timeout: std::time::Duration,
    },
    #[error("bad control message{}: {reason}", from.map(|n| format!(" from node {n}")).unwrap_or_default())]
    BadMessage {
        from: Option<NodeId>,
        reason: String,
    },
    #[error("{what} of {bytes} bytes: more than one control message carries ({limit} bytes)")]
    ControlTooLarge {
        what: &'static str,
        bytes: usize,
        limit: usize,
    },
    #[error("{what}: {reason}")]
    Io { what: &'static str, reason: String },
}
