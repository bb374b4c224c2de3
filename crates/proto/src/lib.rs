//! The memcached text protocol as memcached 1.6 speaks it: a streaming request parser that
//! enforces limits, and composers for every reply, byte for byte as memcached sends them. No
//! I/O and no storage: the cache feeds bytes in and writes the composed bytes out.
//!
//! [`Parser::parse`] looks at the front of a connection's buffer and returns
//! [`Parse::Incomplete`] (read more; not an error), a [`Command`] borrowing from the buffer and
//! the bytes it used, a [`ProtocolError`] with memcached's reply and the bytes to drop, or
//! [`Parse::Swallowed`] while the data block of a refused storage command is being dropped (it
//! is never read as commands, even when it arrives in pieces). `docs/protocol.md` lists what is
//! supported, the limits and the deviations from memcached.
//!
//! ```
//! use proto::{compose, Command, Limits, Parse, Parser, Reply};
//!
//! let mut parser = Parser::new(Limits::default());
//! let mut buf = b"set k 0 0 5\r\nhel".to_vec();
//! assert_eq!(parser.parse(&buf), Parse::Incomplete);
//! buf.extend_from_slice(b"lo\r\nget k\r\n");
//! let Parse::Command { command: Command::Store(s), consumed } = parser.parse(&buf) else {
//!     panic!()
//! };
//! assert_eq!((s.key, s.data, consumed), (&b"k"[..], &b"hello"[..], 20));
//! let mut out = Vec::new();
//! compose::reply(&mut out, Reply::Stored);
//! compose::value(&mut out, b"k", 0, b"hello", None);
//! compose::reply(&mut out, Reply::End);
//! assert_eq!(out, b"STORED\r\nVALUE k 0 5\r\nhello\r\nEND\r\n");
//!
//! // A value over the item size limit: the error, then its data block is dropped.
//! let mut parser = Parser::new(Limits { item_size_max_bytes: 4, ..Limits::default() });
//! let Parse::Error { error, consumed, .. } = parser.parse(b"set k 0 0 5\r\nhe") else { panic!() };
//! assert_eq!(error.reply(), b"SERVER_ERROR object too large for cache\r\n");
//! assert_eq!(consumed, 15);
//! assert_eq!(parser.parse(b"llo\r\nversion\r\n"), Parse::Swallowed { consumed: 5 });
//! assert!(matches!(parser.parse(b"version\r\n"), Parse::Command { command: Command::Version, .. }));
//! ```
#![forbid(unsafe_code)]

pub mod base64;
pub mod check;
mod command;
pub mod compose;
mod number;
mod parse;
pub mod reply;

pub use command::{
    ArithOp, Command, CommandOf, Get, GetKind, GetOf, Meta, MetaFlag, MetaFlagOf, MetaFlags,
    MetaFlagsOf, MetaKind, MetaMode, MetaOf, MetaSet, MetaSetOf, OwnedCommand, Store, StoreMode,
    StoreOf,
};
pub use compose::{incr_decr, IncrDecr, MetaReturn, MetaStatus, NonNumeric, Reply};
pub use parse::{
    Limits, Parse, Parser, ProtocolError, GET_LINE_MAX_BYTES, ITEM_SIZE_MAX_BYTES, KEY_MAX_BYTES,
    LINE_MAX_BYTES, OPAQUE_MAX_BYTES,
};
pub use reply::{parse_reply, ReplyParse, ServerReply};
