//! Dynamic EC Graphs.
#![forbid(unsafe_code)]
