//! Benchmarks of inec: the codec against peer libraries; later the primitives and YCSB.
#![forbid(unsafe_code)]

pub mod codec;
pub mod primitives;
