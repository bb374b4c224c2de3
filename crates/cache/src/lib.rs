//! INEC-Cache: an erasure-coded cache cluster that speaks the memcached text protocol.
//!
//! The crate is laid out by where a request goes (docs/design.md, "The cache crate's rooms"):
//! [`front`] (event loops, connections, dispatch, stats), [`agent`] (a stripe's index, reads
//! and writes under memcached's rules ([`semantics`], [`time`])), [`member`] (the chunk store
//! of self-describing [`record`]s and its answers), [`cluster`] (placement, heartbeats, the
//! lease, recovery) and [`carrier`] (peer messages, the loops' links, the engine's plans), all
//! sharing one [`node::Node`]. `docs/cache.md` describes the request flows and failure rules.
//!
//! ```
//! use cache::cluster::placement::Placement;
//! use cache::record::{self, Header, Kind};
//!
//! // RS(6,3) on 9 nodes: a key's stripe, and the node of each of its 9 chunks.
//! let p = Placement::new(9, 9);
//! let s = p.stripe_of(b"user:42");
//! assert_eq!(p.members(s)[0], s); // the agent holds position 0
//!
//! let h = Header { kind: Kind::Coded, chunk_index: 2, written_around: false,
//!                  key: b"user:42".to_vec(), version: 7, value_bytes: 12, flags: 0, exptime: 0,
//!                  trail: [31, 30, 0] };
//! let bytes = record::encode(&h, b"ab");
//! assert_eq!(record::parse(&bytes).unwrap(), (h, &b"ab"[..]));
//! ```
#![forbid(unsafe_code)]

pub mod agent;
pub mod carrier;
pub mod check;
pub mod cluster;
pub mod front;
pub mod member;
pub mod node;
pub mod record;
pub mod semantics;
pub mod start;
pub mod time;
