//! What carries a request between nodes: the peer messages and their TCP transport
//! ([`peer`]), the event loop's pipelined links to the other nodes' peer ports (`links`), and
//! the engine's plans bound to the cache ([`plans`]: the application that feeds a plan the
//! node's chunk records and takes its outputs), and nodes in one process for tests ([`mem`]).

pub(crate) mod links;
pub mod mem;
pub mod peer;
pub mod plans;
