//! `inec bench …`.

use anyhow::Result;
use clap::Subcommand;

#[derive(Subcommand, Debug)]
pub enum BenchCommand {
    /// The codec benchmark, with peer libraries side by side.
    Codec(bench::codec::CodecArgs),
    /// The INEC primitive suite: encode/decode latency and bandwidth per scheme, coherent vs
    /// incoherent, on a cluster.
    Primitives(bench::primitives::PrimitivesArgs),
    /// memcached-protocol servers under set/get load (memcached 1.6 as the baseline), every
    /// read checked; p50/p99/p99.9 per operation and throughput.
    Cache(bench::cache::CacheArgs),
    /// YCSB workloads A, B, C, D, F on inec caches (coherent, incoherent), memcached and
    /// memcached with client-side 3-way replication: forced-degraded reads with Weibull
    /// arrivals, node kills, every read checked; table, JSON lines and SVG plots.
    Ycsb(Box<bench::ycsb::YcsbArgs>),
}

/// Runs a benchmark; those that start node processes run this executable.
pub fn run(cmd: BenchCommand) -> Result<()> {
    let exe = Some(std::env::current_exe()?);
    match cmd {
        BenchCommand::Codec(a) => bench::codec::run(a)?,
        BenchCommand::Primitives(a) => {
            bench::primitives::run(bench::primitives::PrimitivesArgs { exe, ..a })?
        }
        BenchCommand::Cache(a) => bench::cache::run(bench::cache::CacheArgs { exe, ..a })?,
        BenchCommand::Ycsb(a) => bench::ycsb::run_cli(bench::ycsb::YcsbArgs { exe, ..*a })?,
    }
    Ok(())
}
