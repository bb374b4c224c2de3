//! Benchmarks of inec.
#![forbid(unsafe_code)]
