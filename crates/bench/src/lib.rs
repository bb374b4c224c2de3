//! The benchmarks of inec: the codec against peer libraries ([`codec`]), the primitives and
//! plans ([`primitives`]), the cache ([`cache`]) and YCSB ([`ycsb`]) on the load generator of
//! the `load` crate, and `inec demo` ([`demo`]).
// Unsafe code is denied everywhere except the ISA-L FFI module (feature `isal`), which allows
// it for its FFI calls only, each behind a safe wrapper, and `codec::timing::thread_cpu_time`
// (one `clock_gettime` call).
#![deny(unsafe_code)]
// Standard output is written through `stdout` (`outln!`, `stdout::Stdout`), which returns EPIPE
// as an error instead of panicking.
#![deny(clippy::print_stdout)]

#[macro_use]
pub mod stdout;
#[macro_use]
mod error;

pub mod cache;
pub mod codec;
pub mod demo;
pub mod host;
pub mod nemesis;
pub mod peers;
pub use error::{BenchError, Context, Result};
#[cfg(feature = "isal")]
pub mod isal;
pub mod primitives;
pub mod stats;
pub mod ycsb;
