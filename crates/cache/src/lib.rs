//! INEC-Cache: an erasure-coded cache cluster that speaks the memcached text protocol.
//!
//! Every value is one stripe spread over a Mem Stripe of nodes ([`placement`]); each member
//! holds self-describing chunk records ([`record`], [`member`]); the agent of a stripe keeps
//! its index with versions, LRU and memory shares ([`index`]) and applies memcached's rules
//! ([`semantics`], [`time`]). `docs/cache.md` describes the request flows and failure rules.
//!
//! ```
//! use cache::placement::Placement;
//! use cache::record::{self, Header, Kind};
//!
//! // RS(6,3) on 9 nodes: a key's stripe, and the node of each of its 9 chunks.
//! let p = Placement::new(9, 9);
//! let s = p.stripe_of(b"user:42");
//! assert_eq!(p.members(s)[0], s); // the agent holds position 0
//!
//! let h = Header { kind: Kind::Coded, chunk_index: 2, key: b"user:42".to_vec(), version: 7,
//!                  value_bytes: 12, flags: 0, exptime: 0 };
//! let bytes = record::encode(&h, b"ab");
//! assert_eq!(record::parse(&bytes).unwrap(), (h, &b"ab"[..]));
//! ```
#![forbid(unsafe_code)]

pub mod check;
pub mod index;
pub mod lease;
pub mod member;
pub mod node;
pub mod peer;
pub mod placement;
pub mod plans;
pub mod record;
pub mod semantics;
pub mod server;
pub mod start;
pub mod stripe;
pub mod time;
