//! The `inec` command-line tool: thin wiring of the crates.
#![forbid(unsafe_code)]

use anyhow::Result;
use clap::{Parser, Subcommand};

mod cluster_state;
#[cfg(feature = "bench")]
mod cmd_bench;
mod cmd_cluster;
mod cmd_file;
mod cmd_plan;

#[derive(Parser, Debug)]
#[command(
    name = "inec",
    version,
    about = "Erasure coding for distributed storage"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Split a file into erasure-coded chunk files.
    Encode(cmd_file::EncodeArgs),
    /// Rebuild a file from its chunk files, tolerating missing or corrupt ones.
    Decode(cmd_file::DecodeArgs),
    /// Check every chunk file of a directory and report what can be recovered.
    Verify(cmd_file::VerifyArgs),
    /// Benchmarks (absent from a server build, made without the `bench` feature).
    #[cfg(feature = "bench")]
    #[command(subcommand)]
    Bench(cmd_bench::BenchCommand),
    /// Print the plan (Dynamic EC Graph) of one encode or repair.
    Plan(cmd_plan::PlanArgs),
    /// Print the alpha-beta model's predictions beside the simulator's times.
    Model(cmd_plan::ModelArgs),
    /// Run a node: accept plan parts from a plan runner and execute them with the engine.
    Node(cmd_cluster::NodeArgs),
    /// Start, stop or inspect a cluster of nodes on this machine.
    #[command(subcommand)]
    Cluster(cmd_cluster::ClusterCommand),
}

fn main() -> Result<()> {
    let cli = Cli::parse();
    // Refuse a forced kernel the CPU lacks before anything runs.
    gf::try_kernel()?;
    match cli.command {
        Command::Encode(a) => cmd_file::encode(a),
        Command::Decode(a) => cmd_file::decode(a),
        Command::Verify(a) => cmd_file::verify(a),
        #[cfg(feature = "bench")]
        Command::Bench(mut b) => {
            if let cmd_bench::BenchCommand::Primitives(a) = &mut b {
                cluster_state::give_to_bench(a)?;
            }
            cmd_bench::run(b)
        }
        Command::Plan(a) => cmd_plan::plan(a),
        Command::Model(a) => cmd_plan::model(a),
        Command::Node(a) => cmd_cluster::node(a),
        Command::Cluster(c) => cmd_cluster::run(c),
    }
}
