//! `inec bench ycsb` ([`cli`]) and the INEC paper's YCSB study (`--study`, [`study`]), on the
//! YCSB workloads of the load generator (`load::ycsb`).

pub mod cli;
pub mod study;

pub use cli::{run as run_cli, YcsbArgs};
