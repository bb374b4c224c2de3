//! The per-node engine of inec.
#![forbid(unsafe_code)]
