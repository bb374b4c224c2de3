//! `inec serve` (one cache node) and `inec cache up|down|status|restart` (a local cluster).

use std::io::Write;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::{anyhow, Context, Result};
use cache::cluster::placement::Placement;
use cache::node::{ExecMode, NodeConfig};
use clap::{Args, Subcommand};
use codes::Code;
use graph::Scheme;
use harness::cache::{CacheOptions, CacheState, CacheStatus, Member, NodeHealth, UpConfig};

#[derive(Args, Debug)]
pub struct ServeArgs {
    /// Client listen address (memcached's -l).
    #[arg(short = 'l', long = "listen", default_value = "127.0.0.1")]
    pub listen: String,
    /// Client port (memcached's -p).
    #[arg(short = 'p', long = "port", default_value_t = 11211)]
    pub port: u16,
    /// Peer port (on the listen address).
    #[arg(long, default_value_t = 11311)]
    pub peer_port: u16,
    /// Cluster file: lines `node <id> <client addr> <peer addr>`; with it, --id picks this
    /// node and its addresses come from the file.
    #[arg(long)]
    pub cluster: Option<PathBuf>,
    /// This node's id in the cluster file.
    #[arg(long, default_value_t = 0)]
    pub id: usize,
    /// Start empty and rebuild this node's records from the survivors in the background.
    #[arg(long)]
    pub recover: bool,
    #[command(flatten)]
    pub opts: CacheOptions,
}

/// The code, scheme and mode of the options, checked.
fn parsed(o: &CacheOptions) -> Result<(Code, Scheme, ExecMode)> {
    let code: Code = o.code.parse().map_err(|e| anyhow!("bad --code: {e}"))?;
    let scheme: Scheme = o.scheme.parse().map_err(|e| anyhow!("bad --scheme: {e}"))?;
    let mode: ExecMode =
        (o.mode.parse()).map_err(|e: cache::node::UnknownMode| anyhow!("bad --mode: {e}"))?;
    Ok((code, scheme, mode))
}

/// A node's allocations come from at most two malloc arenas. glibc gives each thread that
/// allocates its own arena (up to 8 per core), and a node's workers, peer and heartbeat threads
/// each keep the pages their arena touched: with 20,000 values of 8 KiB on 9 nodes that was
/// 2 % of the memory the nodes added (`inec bench ycsb`), for contention a node of one or two
/// event loops does not have. Fastbins are off: after a restart at 2,000,000 values the
/// consolidation of the millions of small chunks the recovery freed held the node's heartbeat
/// thread 1.5 s under its arena's lock (docs/bench-ycsb.md).
#[allow(unsafe_code)] // One FFI function; see the crate root.
fn malloc_settings() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: mallopt only sets an allocator parameter; called before the node's threads start.
    unsafe {
        libc::mallopt(libc::M_ARENA_MAX, 2);
        libc::mallopt(libc::M_MXFAST, 0);
    }
}

pub fn serve(a: ServeArgs) -> Result<()> {
    malloc_settings();
    let (code, scheme, mode) = parsed(&a.opts)?;
    let item = crate::args::size(&a.opts.max_item_size).map_err(|e| anyhow!("bad -I: {e}"))?;
    let members = match &a.cluster {
        Some(path) => {
            let text = std::fs::read_to_string(path)
                .with_context(|| format!("reading {}", path.display()))?;
            harness::cache::parse_cluster(&text)?
        }
        None => {
            let ip: std::net::IpAddr =
                (a.listen.parse()).with_context(|| format!("bad -l address {:?}", a.listen))?;
            let (client, peer) = (
                SocketAddr::new(ip, a.port),
                SocketAddr::new(ip, a.peer_port),
            );
            vec![Member {
                id: 0,
                client,
                peer,
            }]
        }
    };
    let me = members.get(a.id).ok_or_else(|| {
        anyhow!(
            "--id {} is not in the cluster of {} nodes",
            a.id,
            members.len()
        )
    })?;
    let o = &a.opts;
    if o.coordinator.as_deref() == Some("local") {
        return Err(anyhow!(
            "--coordinator local starts an etcd for a local cluster (`inec cache up`); a node \
             takes etcd://HOST:PORT[,HOST:PORT...]"
        ));
    }
    let server = cache::start::Server::start(cache::start::Config {
        node: NodeConfig {
            id: a.id,
            node_count: members.len(),
            code,
            scheme,
            mode,
            memory_bytes: o.memory_mib << 20,
            replicate_below_bytes: o.replicate_below,
            heartbeat: Duration::from_millis(o.heartbeat_ms),
            down_after: Duration::from_millis(o.down_after_ms),
            recover: a.recover,
            recovery_bytes_per_s: o.recovery_mbps.max(1) * 1_000_000,
            debug_commands: o.debug_commands,
            item_size_max_bytes: item,
            layout: o.layout.parse().map_err(|e: String| anyhow!(e))?,
            whole_below_bytes: o.whole_below,
            page_bytes: o.page_kib.max(1) << 10,
            whole_repair: o.whole_repair.parse().map_err(|e: String| anyhow!(e))?,
            slab_growth: match o.slab_growth_factor.parse::<f64>() {
                Ok(f) if f > 1.0 && f <= 2.0 => f,
                _ => {
                    return Err(anyhow!(
                        "--slab-growth-factor {:?}: expected a number above 1 and at most 2",
                        o.slab_growth_factor
                    ))
                }
            },
        },
        client: me.client,
        peers: members.iter().map(|m| m.peer).collect(),
        plans: true,
        max_connections: o.max_conns,
        loops: o.threads.unwrap_or_else(harness::cache::machine_cores),
        workers: o.workers,
        coordinator: o.coordinator.clone(),
    })?;
    if let Some(e) = &server.plans_not_installed {
        eprintln!(
            "inec serve: node {}: write and read plans not installed, they go over peer \
             messages: {e}",
            a.id
        );
    }
    outln!(
        "inec serve: node {} of {} ready on {} peer {} code {code} scheme {} mode {}{}",
        a.id,
        members.len(),
        server.client_addr()?,
        me.peer,
        scheme.name(),
        mode.name(),
        if a.recover { " (recovering)" } else { "" }
    )?;
    let _ = std::io::stdout().flush();
    server.run()?;
    Ok(())
}

#[derive(Subcommand, Debug)]
pub enum CacheCommand {
    /// Start a cache cluster on this machine (loopback, or network namespaces with --netns)
    /// and print its nodes.
    Up(Box<UpArgs>),
    /// Stop the cluster's node processes.
    Down(DirArg),
    /// Show each node (client address, peer address, pid, health) and each Mem Stripe.
    Status(DirArg),
    /// Restart one node empty (killing it first if it runs); it recovers from the others.
    Restart(RestartArgs),
}

#[derive(Args, Debug)]
pub struct DirArg {
    /// Directory holding the cluster's state (addresses, pids, logs).
    #[arg(long, default_value = ".inec-cache")]
    pub dir: PathBuf,
}

#[derive(Args, Debug)]
pub struct UpArgs {
    #[command(flatten)]
    pub dir: DirArg,
    /// Number of nodes (default: the chunks per stripe of the code, e.g. 9 for rs:6,3).
    #[arg(long)]
    pub nodes: Option<usize>,
    /// First client port; node i uses base+i for clients and base+1000+i for peers (their
    /// requests, heartbeats and plan frames) (default: free ports chosen by the system).
    #[arg(long)]
    pub base_port: Option<u16>,
    /// Seconds to wait for every node to answer.
    #[arg(long, default_value_t = 20)]
    pub ready_timeout_s: u64,
    /// Put each node in its own network namespace behind a veth pair on a bridge, as
    /// `inec cluster up --netns` does (root; one namespace cluster per machine at a time).
    /// Node i listens on 10.77.x.y ports 11211 (clients) and 11311 (peers).
    #[arg(long, conflicts_with = "base_port")]
    pub netns: bool,
    /// With --netns: `tc tbf` rate of every node's link, each direction (e.g. 1gbit).
    #[arg(long, requires = "netns")]
    pub link_rate: Option<String>,
    #[command(flatten)]
    pub opts: CacheOptions,
}

#[derive(Args, Debug)]
pub struct RestartArgs {
    #[command(flatten)]
    pub dir: DirArg,
    /// The node to restart.
    pub id: usize,
}

pub fn run(cmd: CacheCommand) -> Result<()> {
    let exe = || std::env::current_exe().context("finding the inec executable");
    match cmd {
        CacheCommand::Up(a) => {
            let (code, _, _) = parsed(&a.opts)?;
            let st = harness::cache::up(&UpConfig {
                exe: exe()?,
                dir: a.dir.dir.clone(),
                nodes: a.nodes,
                base_port: a.base_port,
                ready_timeout: Duration::from_secs(a.ready_timeout_s),
                netns: a.netns,
                link_rate: a.link_rate.clone(),
                options: a.opts.clone(),
            })?;
            outln!(
                "cache up: {} nodes, code {code}, scheme {}, mode {}{}",
                st.members.len(),
                a.opts.scheme,
                a.opts.mode,
                match (a.netns, &a.link_rate) {
                    (false, _) => String::new(),
                    (true, None) => ", network namespaces".to_string(),
                    (true, Some(r)) => format!(", network namespaces, links of {r}"),
                }
            )?;
            status(&a.dir.dir)
        }
        CacheCommand::Down(a) => {
            let n = harness::cache::down(&a.dir)?;
            outln!("cache down: {n} nodes stopped")?;
            Ok(())
        }
        CacheCommand::Status(a) => status(&a.dir),
        CacheCommand::Restart(a) => {
            let pid = harness::cache::restart(&exe()?, &a.dir.dir, a.id)?;
            outln!(
                "node {} restarted empty (pid {pid}); it recovers in the background",
                a.id
            )?;
            Ok(())
        }
    }
}

fn status(dir: &std::path::Path) -> Result<()> {
    let st = CacheState::load(dir)?;
    let code: Code = (st.opts.code.parse()).map_err(|e| anyhow!("bad code in state: {e}"))?;
    let (node, client, peer, pid, health) = ("node", "client", "peer", "pid", "health");
    outln!("{node:<5} {client:<22} {peer:<22} {pid:<8} {health:<11} recovery")?;
    let nodes = CacheStatus::of(&st.addrs(), &st.pids).nodes;
    for (n, m) in nodes.iter().zip(&st.members) {
        let stat = |k: &str| n.stats.get(k).and_then(|v| v.parse::<u64>().ok());
        let pages = match (stat("whole_pages_rebuilt"), stat("whole_pages_to_rebuild")) {
            (Some(d), Some(t)) if t > 0 => format!(", {d}/{t} pages"),
            _ => String::new(),
        };
        let rec = match n.recovery.as_str() {
            "none" | "" => String::new(),
            r => format!(
                "{r} {}/{} keys {} bytes{pages}",
                n.recovery_keys_done, n.recovery_keys_total, n.recovery_bytes
            ),
        };
        // Values this node leads that wait to be written whole again by their home.
        let rec = match stat("whole_split_values") {
            Some(w) if w > 0 && rec.is_empty() => format!("{w} split values to write whole"),
            Some(w) if w > 0 => format!("{rec}; {w} split values to write whole"),
            _ => rec,
        };
        let (client, peer) = (m.client.to_string(), m.peer.to_string());
        let health = n.health.name();
        outln!(
            "{:<5} {client:<22} {peer:<22} {:<8} {health:<11} {rec}",
            m.id,
            n.pid
        )?;
    }
    let placement = Placement::new(nodes.len(), code.n());
    outln!("{:<7} {:<6} {:<12} members", "stripe", "agent", "state")?;
    let health = |i: usize| nodes[i].health;
    for s in 0..nodes.len() {
        let members = placement.members(s);
        let down = members
            .iter()
            .filter(|&&i| matches!(health(i), NodeHealth::Down | NodeHealth::Unreachable))
            .count();
        let recovering = members.iter().any(|&i| health(i) == NodeHealth::Recovering);
        let state = cache::cluster::placement::stripe_state(down, code.parity_count(), recovering);
        let agent = placement
            .agent_of(s, |i| health(i) == NodeHealth::Up)
            .map_or("none".to_string(), |a| a.to_string());
        let list: Vec<String> = members.iter().map(|i| i.to_string()).collect();
        outln!("{:<7} {:<6} {:<12} {}", s, agent, state, list.join(","))?;
    }
    Ok(())
}
