//! The load that inec's cache benchmarks and `inec demo` put on memcached-protocol servers:
//! the driver (many connections on a few `mio` event loops, every reply parsed, latencies in
//! HDR histograms; its items are at this crate's root), self-describing values so that every
//! read is checked ([`check`]), YCSB's core workloads and request distributions ([`ycsb`]),
//! where the CPU time goes while it runs ([`cpu`]), and histories of operations on a few hot
//! keys for a linearizability check ([`history`]).
//!
//! Nothing here starts a server or prints: the benchmarks (`bench`) start the systems, run
//! the load and write the reports.
// Unsafe code is denied except in `cpu::{self_usage, clock_ticks_per_second}` (one `getrusage`,
// one `sysconf` call, each behind a safe function).
#![deny(unsafe_code)]

pub mod check;
pub mod cpu;
mod driver;
pub mod history;
pub mod ycsb;

pub use driver::*;
