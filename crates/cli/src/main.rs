//! The `inec` command-line tool: thin wiring of the crates. One FFI function (`mallopt`, in
//! `cmd_cache::malloc_settings`) is called, where that is allowed; no other unsafe code.
#![deny(unsafe_code)]
// Standard output is written through `stdout` (`out!`, `outln!`), which returns EPIPE as an
// error instead of panicking.
#![deny(clippy::print_stdout)]

use std::process::ExitCode;

use clap::{CommandFactory, Parser, Subcommand};

#[macro_use]
mod stdout;

mod args;
#[cfg(feature = "bench")]
mod cmd_bench;
mod cmd_cache;
mod cmd_cluster;
mod cmd_file;
mod cmd_plan;

#[derive(Parser, Debug)]
#[command(
    name = "inec",
    version,
    about = "Erasure coding for distributed storage",
    after_help = "Flags are spelled alike in every subcommand: a code is --code rs:K,M, \
rs-xor:K,M, rs-vand:K,M or lrc:K,L,R; a size takes a unit (4096, 64KiB, 1MiB); a list is given by \
repeating its flag (--code rs:6,3 --code lrc:6,2,2).\n\n\
Exit status: 0 success; 1 failure; 2 usage error. `inec verify`: 0 intact, 1 degraded but \
recoverable, 3 lost, 2 usage error or nothing to check. Every command: 141 (128 + SIGPIPE, as \
coreutils end under `| head`), without an error message, when the reader of its standard \
output goes away; SIGPIPE itself stays ignored, so that a closed connection is an error of that \
connection, never the end of a server."
)]
struct Cli {
    /// Log more on stderr: -v information, -vv debugging detail (warnings and errors are always
    /// shown; RUST_LOG, when set, decides instead: `info`, `cache=debug,engine=info`).
    #[arg(short, long, action = clap::ArgAction::Count, global = true)]
    verbose: u8,
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
    #[command(
        after_help = "Exit status: 0 intact (every chunk file whole and consistent); \
1 degraded but recoverable (some chunk files missing, damaged or inconsistent, the data \
decodes and matches its checksum); 3 lost (some stripe cannot be decoded, or the data fails \
its checksum); 2 usage error or nothing to check (bad flags, no such directory, no chunk \
files)."
    )]
    Verify(cmd_file::VerifyArgs),
    /// Benchmarks (absent from a server build, made without the `bench` feature).
    #[cfg(feature = "bench")]
    #[command(subcommand)]
    Bench(cmd_bench::BenchCommand),
    /// The cache through a crash, start to finish (about two minutes): a local cluster under
    /// YCSB-A, a node killed and restarted, recovery, every value verified, a report with plots.
    #[cfg(feature = "bench")]
    Demo(bench::demo::DemoArgs),
    /// The cache under partitions, pauses and kills aimed at one stripe's agent (network
    /// namespaces, root): clients on every side record a history, checked for linearizability
    /// (porcupine, built with Go) and stale reads; unavailability per fault. Exit status 1 when
    /// the history is not linearizable.
    #[cfg(feature = "bench")]
    Nemesis(bench::nemesis::NemesisArgs),
    /// Print the plan (Dynamic EC Graph) of one encode or repair.
    Plan(cmd_plan::PlanArgs),
    /// Print the alpha-beta model's predictions beside the simulator's times.
    Model(cmd_plan::ModelArgs),
    /// Run a node: accept plan parts from a plan runner and execute them with the engine.
    Node(cmd_cluster::NodeArgs),
    /// Start, stop or inspect a cluster of nodes on this machine.
    #[command(subcommand)]
    Cluster(cmd_cluster::ClusterCommand),
    /// Run one cache node (memcached text protocol, erasure-coded across the cluster).
    Serve(cmd_cache::ServeArgs),
    /// Start, stop, inspect or restart nodes of a local cache cluster.
    #[command(subcommand)]
    Cache(cmd_cache::CacheCommand),
}

/// Prints a usage error for `subcommand` the way clap does (with its usage line) and exits
/// with status 2.
pub fn usage_error(subcommand: &str, message: &str) -> ! {
    let mut cmd = Cli::command();
    cmd.build();
    let sub = cmd
        .find_subcommand_mut(subcommand)
        .expect("a known subcommand")
        .clone();
    sub.bin_name(format!("inec {subcommand}"))
        .error(clap::error::ErrorKind::MissingRequiredArgument, message)
        .exit()
}

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        // Help, version or a usage error, printed once as `Cli::parse` would, but a help
        // whose reader went away ends as any other output does.
        Err(e) => match e.print() {
            Err(io) if io.kind() == std::io::ErrorKind::BrokenPipe && !e.use_stderr() => {
                return ExitCode::from(stdout::EXIT_STATUS);
            }
            _ => std::process::exit(e.exit_code()),
        },
    };
    harness::logger::init(cli.verbose);
    // Refuse a forced kernel the CPU lacks before anything runs.
    if let Err(e) = gf::try_kernel() {
        eprintln!("Error: {e}");
        return ExitCode::from(2);
    }
    let result = match cli.command {
        Command::Encode(a) => cmd_file::encode(a),
        Command::Decode(a) => cmd_file::decode(a),
        Command::Verify(a) => {
            return match cmd_file::verify(a) {
                Ok(status) => ExitCode::from(cmd_file::verify_exit_code(status)),
                Err(e) if stdout::is_closed(&e) => ExitCode::from(stdout::EXIT_STATUS),
                Err(e) => {
                    eprintln!("Error: {e:?}");
                    // Every chunk file present but none readable: the file is lost. Anything
                    // else (no such directory, no chunk files) leaves nothing to check.
                    let lost = matches!(
                        e.downcast_ref::<file::FileError>(),
                        Some(file::FileError::NoReadableChunkFile { .. })
                    );
                    ExitCode::from(if lost { 3 } else { 2 })
                }
            };
        }
        #[cfg(feature = "bench")]
        Command::Bench(mut b) => (|| {
            if let cmd_bench::BenchCommand::Primitives(a) = &mut b {
                cmd_cluster::give_to_bench(a)?;
            }
            cmd_bench::run(b)
        })(),
        #[cfg(feature = "bench")]
        Command::Demo(a) => {
            (|| -> anyhow::Result<()> { Ok(bench::demo::run(a, &std::env::current_exe()?)?) })()
        }
        #[cfg(feature = "bench")]
        Command::Nemesis(a) => (|| -> anyhow::Result<()> {
            bench::nemesis::run(a, &std::env::current_exe()?)?;
            Ok(())
        })(),
        Command::Plan(a) => cmd_plan::plan(a),
        Command::Model(a) => cmd_plan::model(a),
        Command::Node(a) => cmd_cluster::node(a),
        Command::Cluster(c) => cmd_cluster::run(c),
        Command::Serve(a) => cmd_cache::serve(a),
        Command::Cache(c) => cmd_cache::run(c),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) if stdout::is_closed(&e) => ExitCode::from(stdout::EXIT_STATUS),
        Err(e) => {
            eprintln!("Error: {e:?}");
            ExitCode::FAILURE
        }
    }
}
