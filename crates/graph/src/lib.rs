//! Dynamic EC Graphs: the plans of every encode and repair, for the RS, LRC, PPR, ECPipe and
//! TriEC schemes, lowered to the INEC primitives; their accounting; the α-β model; and a
//! discrete-event network simulator that executes a plan with real bytes and is the oracle
//! the engine is tested against.
//!
//! A plan is pure data ([`Plan`]): vertices (a node's part, with its local chunks, its
//! calculator, its outputs and the primitive it runs) and edges (one buffer moved from one
//! vertex to another). Every computed buffer records the linear combination of the stripe's
//! chunks it holds, so a plan can be checked algebraically ([`Plan::check`]) as well as by
//! running it ([`sim::simulate`]).
//!
//! ```no_run
//! use graph::{build, PlanSpec, Request, Scheme, sim, account};
//! let code: codes::Code = "rs:6,3".parse().unwrap();
//! let spec = PlanSpec::new(Scheme::Ppr, code, Request::Repair {
//!     lost: vec![0], target: graph::Target::Node(0) }, 4096);
//! let plan = build(&spec).unwrap();
//! assert_eq!(account(&plan).steps, 3);
//! let net = sim::NetConfig::ideal(1.25e9, 2e-6);
//! let codec = codes::Codec::new(code);
//! let result = sim::simulate_and_check(&plan, &codec, &net, 7).unwrap();
//! println!("{} s", result.time_s);
//! ```
#![forbid(unsafe_code)]

pub mod account;
pub mod build;
pub mod cluster;
pub mod model;
pub mod paper;
pub mod part;
pub mod plan;
pub mod report;
pub mod sim;
pub mod tables;

pub use account::{account, Accounting};
pub use build::{build, Placement, PlanSpec, Request, Target};
pub use part::{ChunkRef, InEdge, OutEdge, OutputSpec, VertexPart};
pub use plan::{
    Buffer, Calc, CalcKind, Edge, EdgeId, NodeId, Operation, Output, Plan, Primitive, Role, Scheme,
    Source, Vertex, VertexId,
};

/// Errors of this crate. Messages are lowercase and name the value and the limit.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum PlanError {
    #[error("unknown scheme {name:?}: expected one of rs, lrc, ppr, ecpipe, triec")]
    UnknownScheme { name: String },
    #[error(
        "scheme {scheme} does not apply to code {code} (rs needs an rs code, lrc an lrc code)"
    )]
    SchemeCodeMismatch { scheme: plan::Scheme, code: String },
    #[error("lost chunks {lost:?} are not recoverable by {code}")]
    Unrecoverable { code: String, lost: Vec<usize> },
    #[error("nothing to repair: the list of lost chunks is empty")]
    NothingLost,
    #[error("chunk index {index} out of range for {code} ({n} chunks)")]
    BadChunk {
        index: usize,
        n: usize,
        code: String,
    },
    #[error("chunk {index} is listed as lost twice")]
    DuplicateChunk { index: usize },
    #[error("bad {what}: {value} (must be between 1 and {limit})")]
    BadSize {
        what: &'static str,
        value: usize,
        limit: usize,
    },
    #[error("bad placement: {reason}")]
    BadPlacement { reason: String },
    #[error("bad number of aggregation vertices {p}: must be between 1 and the {helpers} helpers")]
    BadAggregators { p: usize, helpers: usize },
    #[error("the simulation needs chunk {chunk} (read by vertex {vertex}) but it was not given")]
    MissingChunk { chunk: usize, vertex: usize },
    #[error("the simulation stored a wrong chunk {chunk} on node {node}")]
    WrongOutput { node: usize, chunk: usize },
    #[error("the simulation did not store chunk {chunk} on node {node}, which the plan must")]
    MissingOutput { node: usize, chunk: usize },
    #[error("bad plan part for vertex {vertex}: {reason}")]
    BadPart { vertex: VertexId, reason: String },
    #[error("invalid plan: {reason}")]
    Invalid { reason: String },
    #[error("bad calibration file {path}: {reason}")]
    BadCalibration { path: String, reason: String },
    #[error(transparent)]
    Code(#[from] codes::CodeError),
}
