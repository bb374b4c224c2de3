//! `inec node` and `inec cluster up|down|status`.

use std::io::Write;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::{anyhow, bail, Context, Result};
use clap::{Args, Subcommand};
use engine::{BufferPool, Engine, NodeId, TcpTransport};
use harness::cluster::{ClusterState, UpConfig};

#[derive(Args, Debug)]
pub struct NodeArgs {
    /// This node's id (0, 1, …; unique in the cluster).
    #[arg(long)]
    pub id: NodeId,
    /// Address of the peer port (port 0 picks a free port).
    #[arg(long, default_value = "127.0.0.1:0")]
    pub listen: SocketAddr,
}

/// Runs a node until a plan runner asks it to shut down. Prints one readiness line
/// (`inec node <id> ready on <addr>`) once it accepts connections.
pub fn node(a: NodeArgs) -> Result<()> {
    let pool = BufferPool::new();
    let t = TcpTransport::bind(a.id, a.listen, pool.clone())
        .with_context(|| format!("binding the peer port {}", a.listen))?;
    let addr = t
        .local_addr()
        .ok_or_else(|| anyhow!("listener has no address"))?;
    let engine = Engine::start(t, pool);
    {
        let mut out = crate::stdout::Stdout::lock();
        writeln!(
            out,
            "inec node {} ready on {addr} (kernel {})",
            a.id,
            gf::kernel_name()
        )?;
        out.flush()?;
    }
    let reason = engine::serve(engine);
    eprintln!("inec node {}: stopped: {reason}", a.id);
    Ok(())
}

#[derive(Subcommand, Debug)]
pub enum ClusterCommand {
    /// Start N nodes on this machine and connect them to each other.
    Up(UpArgs),
    /// Shut the cluster's nodes down and remove its state file and node logs (and the
    /// directory, when nothing else is left in it).
    Down(DownArgs),
    /// Show whether each node is alive and answering.
    Status(DirArgs),
}

#[derive(Args, Debug)]
pub struct DirArgs {
    /// Directory holding the cluster's state (node addresses, pids, logs).
    #[arg(long, default_value = ".inec-cluster")]
    pub dir: PathBuf,
}

#[derive(Args, Debug)]
pub struct DownArgs {
    #[command(flatten)]
    pub dir: DirArgs,
    /// Keep the node logs (node-N.log) in the directory.
    #[arg(long)]
    pub keep_logs: bool,
}

#[derive(Args, Debug)]
pub struct UpArgs {
    /// Number of nodes (the paper's largest configuration needs 17: an agent + 16 chunks).
    #[arg(long, default_value_t = 17)]
    pub nodes: usize,
    #[command(flatten)]
    pub dir: DirArgs,
    /// Put each node in its own network namespace behind a veth pair on a bridge (root).
    #[arg(long)]
    pub netns: bool,
    /// With --netns: `tc tbf` rate of every node's link, each direction (e.g. 1gbit, 500mbit).
    #[arg(long, requires = "netns")]
    pub link_rate: Option<String>,
    /// Seconds to wait for every node to become ready.
    #[arg(long, default_value_t = 20)]
    pub ready_timeout_s: u64,
}

pub fn run(cmd: ClusterCommand) -> Result<()> {
    match cmd {
        ClusterCommand::Up(a) => up(a),
        ClusterCommand::Down(a) => {
            let state = harness::cluster::down(&a.dir.dir, a.keep_logs)?;
            let kept = match a.keep_logs {
                true => format!("; node logs kept in {}", a.dir.dir.display()),
                false => String::new(),
            };
            outln!("cluster down: {} nodes stopped{kept}", state.nodes.len())?;
            Ok(())
        }
        ClusterCommand::Status(a) => status(a),
    }
}

fn up(a: UpArgs) -> Result<()> {
    let state = harness::cluster::up(&UpConfig {
        exe: std::env::current_exe()?,
        dir: a.dir.dir.clone(),
        nodes: a.nodes,
        netns: a.netns,
        link_rate: a.link_rate.clone(),
        ready_timeout: Duration::from_secs(a.ready_timeout_s),
    })?;
    outln!(
        "cluster up: {} nodes{} (state in {})",
        state.nodes.len(),
        match (&a.netns, &a.link_rate) {
            (true, Some(r)) => format!(", network namespaces, links {r}"),
            (true, None) => ", network namespaces".to_string(),
            _ => ", loopback".to_string(),
        },
        a.dir.dir.display()
    )?;
    for n in &state.nodes {
        outln!("  node {:>3}  {:<22} pid {}", n.id, n.addr, n.pid)?;
    }
    Ok(())
}

fn status(a: DirArgs) -> Result<()> {
    let state = ClusterState::load(&a.dir)?;
    let mut up = 0;
    for (n, (alive, ok)) in state.nodes.iter().zip(harness::cluster::answering(&state)) {
        let s = match (alive, ok) {
            (true, true) => {
                up += 1;
                "up"
            }
            (true, false) => "not answering",
            (false, _) => "dead",
        };
        let ns = n.netns.as_ref().map(|ns| format!("  (netns {ns})"));
        let ns = ns.unwrap_or_default();
        outln!("node {:>3}  {:<22} pid {:<8} {s}{ns}", n.id, n.addr, n.pid)?;
    }
    outln!("{up}/{} nodes up", state.nodes.len())?;
    if up != state.nodes.len() {
        bail!("{} nodes are not up", state.nodes.len() - up);
    }
    Ok(())
}

#[cfg(feature = "bench")]
/// `inec bench primitives --dir D`: the benchmark gets the nodes of the cluster in `D`.
pub fn give_to_bench(a: &mut bench::primitives::PrimitivesArgs) -> Result<()> {
    if let Some(dir) = &a.dir {
        let state = ClusterState::load(dir)?;
        a.cluster = Some(bench::primitives::ClusterAddrs {
            nodes: state.addrs(),
            transport: state.transport(),
        });
    }
    Ok(())
}
