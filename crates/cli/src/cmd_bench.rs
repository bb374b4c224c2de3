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
}

pub fn run(cmd: BenchCommand) -> Result<()> {
    match cmd {
        BenchCommand::Codec(a) => bench::codec::run(a)?,
        BenchCommand::Primitives(a) => bench::primitives::run(a)?,
    }
    Ok(())
}
