//! Benchmarks of inec: the codec against peer libraries; later the primitives and YCSB.
// Unsafe code is denied everywhere except the ISA-L FFI module (feature `isal`), which allows
// it for its FFI calls only, each behind a safe wrapper.
#![deny(unsafe_code)]

pub mod cache;
pub mod clients;
pub mod codec;
#[cfg(feature = "isal")]
pub mod isal;
pub mod primitives;
pub mod stats;
