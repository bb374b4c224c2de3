//! `inec bench …`.

use anyhow::Result;
use clap::Subcommand;

#[derive(Subcommand, Debug)]
pub enum BenchCommand {
    /// The codec benchmark, with peer libraries side by side.
    Codec(bench::codec::CodecArgs),
}

pub fn run(cmd: BenchCommand) -> Result<()> {
    match cmd {
        BenchCommand::Codec(a) => bench::codec::run(a),
    }
}
