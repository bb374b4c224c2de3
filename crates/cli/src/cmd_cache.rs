//! `inec serve` (one cache node) and `inec cache up|down|status|restart` (a local cluster).

use std::fs;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context, Result};
use cache::node::{ExecMode, Node, NodeConfig, REPLICATE_BELOW_BYTES};
use cache::peer::TcpTransport;
use cache::placement::Placement;
use cache::plans::{CacheApp, PlanExec};
use cache::server::{self, ServerConfig};
use clap::{Args, Subcommand};
use codes::Code;
use engine::{BufferPool, LocalNode};
use graph::Scheme;
use serde::{Deserialize, Serialize};

fn parse_size(s: &str) -> Result<usize> {
    let lower = s.to_ascii_lowercase();
    let (digits, mult) = match lower.chars().last() {
        Some('k') => (&lower[..lower.len() - 1], 1usize << 10),
        Some('m') => (&lower[..lower.len() - 1], 1 << 20),
        Some('g') => (&lower[..lower.len() - 1], 1 << 30),
        _ => (&lower[..], 1),
    };
    let n: usize = digits
        .parse()
        .map_err(|_| anyhow!("bad size {s:?} (bytes, or a number with k, m or g)"))?;
    Ok(n * mult)
}

/// Settings shared by `inec serve` and `inec cache up`.
#[derive(Args, Debug, Clone, Serialize, Deserialize)]
pub struct CacheOptions {
    /// Memory for chunk records per node, in MiB (memcached's -m).
    #[arg(short = 'm', long = "memory-mib", default_value_t = 64)]
    pub memory_mib: u64,
    /// Max simultaneous client connections (memcached's -c).
    #[arg(short = 'c', long = "max-conns", default_value_t = 1024)]
    pub max_conns: usize,
    /// Item size limit, e.g. 1m (memcached's -I).
    #[arg(short = 'I', long = "max-item-size", default_value = "1m")]
    pub max_item_size: String,
    /// Worker threads running requests.
    #[arg(short = 't', long, default_value_t = 8)]
    pub threads: usize,
    /// The code: rs:K,M or lrc:K,L,R.
    #[arg(long, default_value = "rs:6,3")]
    pub code: String,
    /// Repair scheme: rs, lrc, ppr, ecpipe or triec.
    #[arg(long, default_value = "rs")]
    pub scheme: String,
    /// Engine mode: coherent or incoherent.
    #[arg(long, default_value = "coherent")]
    pub mode: String,
    /// Values shorter than this many bytes are stored as m+1 replicas instead of coded.
    #[arg(long, default_value_t = REPLICATE_BELOW_BYTES)]
    pub replicate_below: usize,
    /// Heartbeat period in ms.
    #[arg(long, default_value_t = 100)]
    pub heartbeat_ms: u64,
    /// A peer is down after its heartbeats fail for this long (ms); refused connections mark
    /// it down at once.
    #[arg(long, default_value_t = 1000)]
    pub down_after_ms: u64,
    /// Recovery rate limit in MB/s of rebuilt records.
    #[arg(long, default_value_t = 50)]
    pub recovery_mbps: u64,
    /// Accept the test-only `inec_flip <key> <position> <bit>` command.
    #[arg(long)]
    pub debug_commands: bool,
}

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

/// One node of a cluster file.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Member {
    pub id: usize,
    pub client: SocketAddr,
    pub peer: SocketAddr,
    /// The node's engine host (degraded reads run their repair plans there); optional.
    #[serde(default)]
    pub engine: Option<SocketAddr>,
}

/// Parses a cluster file: `node <id> <client addr> <peer addr> [<engine addr>]` per line, ids
/// 0..N in order; `#` starts a comment.
pub fn parse_cluster(text: &str) -> Result<Vec<Member>> {
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let line = line.split('#').next().unwrap_or("").trim();
        if line.is_empty() {
            continue;
        }
        let t: Vec<&str> = line.split_whitespace().collect();
        if !(4..=5).contains(&t.len()) || t[0] != "node" {
            bail!("cluster file line {}: expected `node <id> <client addr> <peer addr> [<engine addr>]`, got {line:?}", i + 1);
        }
        let id: usize = t[1]
            .parse()
            .with_context(|| format!("line {}: bad node id", i + 1))?;
        if id != out.len() {
            bail!(
                "cluster file line {}: node ids must be 0, 1, 2, ... in order (got {id})",
                i + 1
            );
        }
        out.push(Member {
            id,
            client: t[2]
                .parse()
                .with_context(|| format!("line {}: bad client address", i + 1))?,
            peer: t[3]
                .parse()
                .with_context(|| format!("line {}: bad peer address", i + 1))?,
            engine: match t.get(4) {
                Some(a) => Some(
                    a.parse()
                        .with_context(|| format!("line {}: bad engine address", i + 1))?,
                ),
                None => None,
            },
        });
    }
    if out.is_empty() {
        bail!("cluster file lists no node");
    }
    Ok(out)
}

fn cluster_text(members: &[Member]) -> String {
    let mut s =
        String::from("# inec cache cluster: node <id> <client addr> <peer addr> [<engine addr>]\n");
    for m in members {
        s.push_str(&format!("node {} {} {}", m.id, m.client, m.peer));
        if let Some(e) = m.engine {
            s.push_str(&format!(" {e}"));
        }
        s.push('\n');
    }
    s
}

pub fn serve(a: ServeArgs) -> Result<()> {
    let code: Code = a
        .opts
        .code
        .parse()
        .map_err(|e| anyhow!("bad --code: {e}"))?;
    let scheme: Scheme = a
        .opts
        .scheme
        .parse()
        .map_err(|e| anyhow!("bad --scheme: {e}"))?;
    let mode: ExecMode = a
        .opts
        .mode
        .parse()
        .map_err(|e: cache::node::UnknownMode| anyhow!("bad --mode: {e}"))?;
    if scheme == Scheme::Lrc && !matches!(code, Code::Lrc { .. }) {
        bail!("--scheme lrc needs an LRC code (--code lrc:K,L,R), got {code}");
    }
    let item = parse_size(&a.opts.max_item_size)?;
    let members = match &a.cluster {
        Some(path) => {
            let text =
                fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
            parse_cluster(&text)?
        }
        None => {
            let ip: std::net::IpAddr = a
                .listen
                .parse()
                .with_context(|| format!("bad -l address {:?}", a.listen))?;
            vec![Member {
                id: 0,
                client: SocketAddr::new(ip, a.port),
                peer: SocketAddr::new(ip, a.peer_port),
                engine: None,
            }]
        }
    };
    let me = members
        .get(a.id)
        .ok_or_else(|| {
            anyhow!(
                "--id {} is not in the cluster of {} nodes",
                a.id,
                members.len()
            )
        })?
        .clone();
    let client = TcpListener::bind(me.client)
        .with_context(|| format!("binding client address {}", me.client))?;
    let peer =
        TcpListener::bind(me.peer).with_context(|| format!("binding peer address {}", me.peer))?;
    let cfg = NodeConfig {
        id: a.id,
        node_count: members.len(),
        code,
        scheme,
        mode,
        memory_bytes: a.opts.memory_mib << 20,
        replicate_below_bytes: a.opts.replicate_below,
        heartbeat: Duration::from_millis(a.opts.heartbeat_ms),
        down_after: Duration::from_millis(a.opts.down_after_ms),
        recover: a.recover,
        recovery_bytes_per_s: a.opts.recovery_mbps.max(1) * 1_000_000,
        debug_commands: a.opts.debug_commands,
        item_size_max_bytes: item,
    };
    let addrs: Vec<SocketAddr> = members.iter().map(|m| m.peer).collect();
    let transport = Arc::new(TcpTransport::new(addrs.clone(), server::PEER_TIMEOUT));
    let hb_timeout = Duration::from_millis(a.opts.down_after_ms.max(2) / 2);
    let heartbeats = Arc::new(TcpTransport::new(addrs, hb_timeout));
    let node = Arc::new(Node::new(cfg, transport, heartbeats));
    // Degraded reads run their repair plans on the engine hosts when every node has one.
    let engines: Option<Vec<SocketAddr>> = members.iter().map(|m| m.engine).collect();
    let _engine_host = match (engines, me.engine) {
        (Some(addrs), Some(mine)) => {
            let exec = Arc::new(PlanExec::new(addrs, node.incarnation));
            node.set_plan_exec(Arc::clone(&exec));
            let app = CacheApp::new(Arc::downgrade(&node), a.opts.debug_commands);
            let host = LocalNode::tcp_with(a.id as engine::NodeId, mine, BufferPool::new(), app)
                .with_context(|| format!("binding engine address {mine}"))?;
            // Engines connect on the peers' first heartbeat answers.
            exec.set_engine(host.engine.clone());
            // This node's parts of the write and read templates of its stripes, installed
            // locally before it serves (no message; the others do the same).
            if let Err(e) =
                exec.install_startup(host.launcher(), a.id, code, scheme, &node.placement)
            {
                eprintln!(
                    "inec serve: node {}: write and read plans not installed, they go over \
                     peer messages: {e}",
                    a.id
                );
            }
            Some(host)
        }
        _ => None,
    };
    node.start_background();
    outln!(
        "inec serve: node {} of {} ready on {} peer {} code {} scheme {} mode {}{}",
        a.id,
        members.len(),
        client.local_addr()?,
        me.peer,
        code,
        scheme.name(),
        mode.name(),
        if a.recover { " (recovering)" } else { "" }
    )?;
    let _ = std::io::stdout().flush();
    let limits = proto::Limits {
        item_size_max_bytes: item,
        ..proto::Limits::default()
    };
    // One event loop serves the clients and the peer port (bound above, so peers that connect
    // before it runs wait in the backlog).
    server::serve(
        node,
        client,
        peer,
        ServerConfig {
            limits,
            max_connections: a.opts.max_conns,
            workers: a.opts.threads,
            peer_addrs: members.iter().map(|m| m.peer).collect(),
        },
    )?;
    Ok(())
}

// ---- local clusters ----

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
    /// First client port; node i uses base+i for clients, base+1000+i for peers and
    /// base+2000+i for engine hosts
    /// (default: free ports chosen by the system).
    #[arg(long)]
    pub base_port: Option<u16>,
    /// Seconds to wait for every node to answer.
    #[arg(long, default_value_t = 20)]
    pub ready_timeout_s: u64,
    /// Put each node in its own network namespace behind a veth pair on a bridge, as
    /// `inec cluster up --netns` does (root; one namespace cluster per machine at a time).
    /// Node i listens on 10.77.x.y ports 11211 (clients), 11311 (peers), 11411 (engine).
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

const STATE_FILE: &str = "cache.json";
const CLUSTER_FILE: &str = "cluster.txt";

#[derive(Debug, Serialize, Deserialize)]
struct State {
    opts: CacheOptions,
    members: Vec<Member>,
    pids: Vec<u32>,
    /// The network namespace of each node (`--netns`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    netns: Option<Vec<String>>,
}

pub fn run(cmd: CacheCommand) -> Result<()> {
    match cmd {
        CacheCommand::Up(a) => up(*a),
        CacheCommand::Down(a) => down(&a.dir),
        CacheCommand::Status(a) => status(&a.dir),
        CacheCommand::Restart(a) => restart(&a.dir.dir, a.id),
    }
}

/// A free port below the kernel's ephemeral range (32768 and up on Linux), so that a node
/// restarted on its port does not find it taken as the local port of some outgoing connection.
/// The listener is held until every port is chosen, so no port is picked twice.
fn free_port(held: &mut Vec<TcpListener>) -> Result<u16> {
    const LOW: u32 = 20_000;
    const SPAN: u32 = 12_000;
    let seed = std::process::id()
        ^ std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.subsec_nanos());
    for i in 0..SPAN {
        let port = (LOW + (seed.wrapping_mul(2_654_435_761) % SPAN + i) % SPAN) as u16;
        if let Ok(l) = TcpListener::bind(("127.0.0.1", port)) {
            held.push(l);
            return Ok(port);
        }
    }
    bail!("no free port in {LOW}..{}", LOW + SPAN)
}

fn pid_alive(pid: u32) -> bool {
    match fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(s) => !s
            .rsplit(')')
            .next()
            .is_some_and(|rest| rest.trim_start().starts_with('Z')),
        Err(_) => false,
    }
}

fn signal(pid: u32, sig: &str) {
    let _ = Command::new("kill")
        .args([sig, &pid.to_string()])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status();
}

fn load(dir: &Path) -> Result<State> {
    let path = dir.join(STATE_FILE);
    let text = fs::read_to_string(&path).with_context(|| {
        format!(
            "no cache cluster state at {} (is a cache up?)",
            path.display()
        )
    })?;
    serde_json::from_str(&text).with_context(|| format!("bad cache state {}", path.display()))
}

fn save(dir: &Path, st: &State) -> Result<()> {
    fs::write(dir.join(STATE_FILE), serde_json::to_string_pretty(st)?)?;
    Ok(())
}

fn opts_args(o: &CacheOptions) -> Vec<String> {
    let mut v = vec![
        "-m".into(),
        o.memory_mib.to_string(),
        "-c".into(),
        o.max_conns.to_string(),
        "-I".into(),
        o.max_item_size.clone(),
        "-t".into(),
        o.threads.to_string(),
        "--code".into(),
        o.code.clone(),
        "--scheme".into(),
        o.scheme.clone(),
        "--mode".into(),
        o.mode.clone(),
        "--replicate-below".into(),
        o.replicate_below.to_string(),
        "--heartbeat-ms".into(),
        o.heartbeat_ms.to_string(),
        "--down-after-ms".into(),
        o.down_after_ms.to_string(),
        "--recovery-mbps".into(),
        o.recovery_mbps.to_string(),
    ];
    if o.debug_commands {
        v.push("--debug-commands".into());
    }
    v
}

fn spawn_node(dir: &Path, st: &State, id: usize, recover: bool) -> Result<u32> {
    let exe = std::env::current_exe()?;
    let log = fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(dir.join(format!("node-{id}.log")))?;
    let mut cmd = match st.netns.as_ref().and_then(|ns| ns.get(id)) {
        Some(ns) => {
            let mut c = Command::new("ip");
            c.args(["netns", "exec", ns]).arg(exe);
            c
        }
        None => Command::new(exe),
    };
    cmd.arg("serve")
        .arg("--cluster")
        .arg(dir.join(CLUSTER_FILE))
        .args(["--id", &id.to_string()])
        .args(opts_args(&st.opts));
    if recover {
        cmd.arg("--recover");
    }
    use std::os::unix::process::CommandExt;
    let child = cmd
        .process_group(0)
        .stdin(Stdio::null())
        .stdout(log.try_clone()?)
        .stderr(log)
        .spawn()
        .context("starting a cache node")?;
    Ok(child.id())
}

/// Sends one request line to a node and reads the reply up to `END\r\n` (or one line).
fn ask(addr: SocketAddr, request: &str, timeout: Duration) -> Result<String> {
    let mut s = TcpStream::connect_timeout(&addr, timeout)?;
    s.set_read_timeout(Some(timeout))?;
    s.write_all(request.as_bytes())?;
    let mut r = BufReader::new(s);
    let mut out = String::new();
    loop {
        let mut line = String::new();
        if r.read_line(&mut line)? == 0 {
            break;
        }
        let done = !line.starts_with("STAT ");
        out.push_str(&line);
        if done {
            break;
        }
    }
    Ok(out)
}

fn wait_answering(addr: SocketAddr, pid: u32, deadline: Instant, log: &Path) -> Result<()> {
    loop {
        if ask(addr, "version\r\n", Duration::from_millis(500))
            .is_ok_and(|r| r.starts_with("VERSION"))
        {
            return Ok(());
        }
        if !pid_alive(pid) {
            let mut tail = String::new();
            let _ = fs::File::open(log).and_then(|mut f| f.read_to_string(&mut tail));
            bail!(
                "cache node (pid {pid}) exited before it answered; its log {}:\n{tail}",
                log.display()
            );
        }
        if Instant::now() >= deadline {
            bail!(
                "cache node (pid {pid}) did not answer on {addr} in time; see {}",
                log.display()
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Waits until every node answers `stats inec` ready and with no member down in its view.
fn wait_converged(st: &State, deadline: Instant) -> Result<()> {
    loop {
        let ok = st.members.iter().all(|m| {
            ask(m.client, "stats inec\r\n", Duration::from_secs(2)).is_ok_and(|t| {
                let s = stat_map(&t);
                let get = |k: &str| s.iter().find(|(n, _)| n == k).map(|(_, v)| v.as_str());
                get("ready") == Some("1") && get("members_down") == Some("0")
            })
        });
        if ok {
            return Ok(());
        }
        if Instant::now() >= deadline {
            bail!("the cache nodes do not all see each other up in time");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn up(a: UpArgs) -> Result<()> {
    let dir = &a.dir.dir;
    if dir.join(STATE_FILE).exists() {
        bail!(
            "a cache is already up in {} (run `inec cache down` first)",
            dir.display()
        );
    }
    let code: Code = a
        .opts
        .code
        .parse()
        .map_err(|e| anyhow!("bad --code: {e}"))?;
    let _: Scheme = a
        .opts
        .scheme
        .parse()
        .map_err(|e| anyhow!("bad --scheme: {e}"))?;
    let _: ExecMode = a
        .opts
        .mode
        .parse()
        .map_err(|e: cache::node::UnknownMode| anyhow!("bad --mode: {e}"))?;
    let n = a.nodes.unwrap_or(code.n());
    if n == 0 {
        bail!("--nodes must be at least 1");
    }
    fs::create_dir_all(dir)?;
    let netns = if a.netns {
        Some(crate::cmd_cluster::setup_netns(n, a.link_rate.as_deref())?)
    } else {
        None
    };
    // Ports chosen here are free when chosen but released before the nodes bind them: if a
    // program other than a `cache up` (those take turns, below) takes one meanwhile, the nodes
    // are stopped and other ports chosen.
    let mut attempts = 0;
    let result = loop {
        attempts += 1;
        let r = start(&a, dir, code, n, netns.is_some());
        match &r {
            Err(e)
                if netns.is_none()
                    && a.base_port.is_none()
                    && attempts < 3
                    && format!("{e:#}").contains("Address already in use") =>
            {
                eprintln!(
                    "cache up: a chosen port was taken before its node bound it; choosing others"
                );
            }
            _ => break r,
        }
    };
    if let (Err(_), Some(made)) = (&result, &netns) {
        made.remove();
    }
    result
}

/// Starts the nodes of `up` (in namespaces `inec-ns<i>` already made when `netns`).
fn start(a: &UpArgs, dir: &Path, code: Code, n: usize, netns: bool) -> Result<()> {
    // Ports are chosen free, then released for the nodes to bind: two `cache up`s at once (or
    // a benchmark's and a test's) could pick each other's ports in between. A lock file taken
    // from the choice until every node answers keeps them apart on this host.
    let _ports = if netns || a.base_port.is_some() {
        None
    } else {
        let path = std::env::temp_dir().join("inec-cache-ports.lock");
        let f = fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&path)
            .with_context(|| format!("opening {}", path.display()))?;
        f.lock()
            .with_context(|| format!("locking {}", path.display()))?;
        Some(f)
    };
    let mut members = Vec::new();
    // Free ports: every listener is held until all are chosen, so no port is picked twice.
    let mut held = Vec::new();
    for id in 0..n {
        if netns {
            let ip: std::net::IpAddr = crate::cmd_cluster::ns_addr(id).parse()?;
            members.push(Member {
                id,
                client: SocketAddr::new(ip, 11211),
                peer: SocketAddr::new(ip, 11311),
                engine: Some(SocketAddr::new(ip, 11411)),
            });
            continue;
        }
        let (cp, pp, ep) = match a.base_port {
            Some(b) => (b + id as u16, b + 1000 + id as u16, b + 2000 + id as u16),
            None => (
                free_port(&mut held)?,
                free_port(&mut held)?,
                free_port(&mut held)?,
            ),
        };
        members.push(Member {
            id,
            client: SocketAddr::from(([127, 0, 0, 1], cp)),
            peer: SocketAddr::from(([127, 0, 0, 1], pp)),
            engine: Some(SocketAddr::from(([127, 0, 0, 1], ep))),
        });
    }
    drop(held);
    fs::write(dir.join(CLUSTER_FILE), cluster_text(&members))?;
    let mut st = State {
        opts: a.opts.clone(),
        members,
        pids: Vec::new(),
        netns: netns.then(|| (0..n).map(crate::cmd_cluster::ns_name).collect()),
    };
    for id in 0..n {
        let _ = fs::remove_file(dir.join(format!("node-{id}.log")));
        match spawn_node(dir, &st, id, false) {
            Ok(pid) => st.pids.push(pid),
            Err(e) => {
                for &p in &st.pids {
                    signal(p, "-KILL");
                }
                return Err(e);
            }
        }
    }
    save(dir, &st)?;
    let deadline = Instant::now() + Duration::from_secs(a.ready_timeout_s);
    for (m, &pid) in st.members.iter().zip(&st.pids) {
        if let Err(e) = wait_answering(
            m.client,
            pid,
            deadline,
            &dir.join(format!("node-{}.log", m.id)),
        ) {
            for &p in &st.pids {
                signal(p, "-KILL");
            }
            let _ = fs::remove_file(dir.join(STATE_FILE));
            return Err(e.context("cache up failed; stopped every node it started"));
        }
    }
    // Nodes that started first found the others not listening yet: wait until every node
    // sees every other one up.
    if let Err(e) = wait_converged(&st, deadline) {
        for &p in &st.pids {
            signal(p, "-KILL");
        }
        let _ = fs::remove_file(dir.join(STATE_FILE));
        return Err(e.context("cache up failed; stopped every node it started"));
    }
    outln!(
        "cache up: {n} nodes, code {code}, scheme {}, mode {}{}",
        a.opts.scheme,
        a.opts.mode,
        match (netns, &a.link_rate) {
            (false, _) => String::new(),
            (true, None) => ", network namespaces".to_string(),
            (true, Some(r)) => format!(", network namespaces, links of {r}"),
        }
    )?;
    status(dir)
}

fn down(dir: &Path) -> Result<()> {
    let st = load(dir)?;
    for &p in &st.pids {
        if pid_alive(p) {
            signal(p, "-TERM");
        }
    }
    let deadline = Instant::now() + Duration::from_secs(5);
    for (i, &p) in st.pids.iter().enumerate() {
        while pid_alive(p) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(10));
        }
        if pid_alive(p) {
            eprintln!("node {i} (pid {p}) did not exit; killing it");
            signal(p, "-KILL");
        }
    }
    if let Some(ns) = &st.netns {
        crate::cmd_cluster::NetnsCreated::of_nodes(ns.len()).remove();
    }
    fs::remove_file(dir.join(STATE_FILE))?;
    outln!("cache down: {} nodes stopped", st.pids.len())?;
    Ok(())
}

fn restart(dir: &Path, id: usize) -> Result<()> {
    let mut st = load(dir)?;
    if id >= st.members.len() {
        bail!("no node {id} (the cache has {} nodes)", st.members.len());
    }
    let old = st.pids[id];
    if pid_alive(old) {
        signal(old, "-KILL");
        let deadline = Instant::now() + Duration::from_secs(5);
        while pid_alive(old) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(10));
        }
    }
    // The node binds the ports it had. One may be refused for a while: right after a kill the
    // dead node's connections on it are still closing (seen in tests: a bind refused at once,
    // accepted a moment later), and another `cache up` on this host probing for free ports
    // holds each candidate briefly. A node that exits on "Address already in use" is started
    // again, up to `RESTART_BIND_ATTEMPTS` times over about seven seconds.
    let log = dir.join(format!("node-{id}.log"));
    let mut attempt = 0;
    let pid = loop {
        attempt += 1;
        // Only this attempt's part of the log (it is appended to) tells why it failed.
        let logged = fs::metadata(&log).map_or(0, |m| m.len());
        let pid = spawn_node(dir, &st, id, true)?;
        st.pids[id] = pid;
        save(dir, &st)?;
        match wait_answering(
            st.members[id].client,
            pid,
            Instant::now() + Duration::from_secs(20),
            &log,
        ) {
            Ok(()) => break pid,
            Err(_)
                if attempt < RESTART_BIND_ATTEMPTS && log_since(&log, logged).contains(IN_USE) =>
            {
                eprintln!(
                    "cache restart: node {id} found one of its ports taken; starting it again"
                );
                std::thread::sleep(Duration::from_millis((250 * u64::from(attempt)).min(1000)));
            }
            Err(e) => return Err(e),
        }
    };
    outln!("node {id} restarted empty (pid {pid}); it recovers in the background")?;
    Ok(())
}

/// How many times `cache restart` starts a node whose port was taken (see [`restart`]).
const RESTART_BIND_ATTEMPTS: u32 = 10;

/// How a node's log says that a port was taken.
const IN_USE: &str = "Address already in use";

/// The text of the file at `path` from byte `from` on (empty if it cannot be read).
fn log_since(path: &Path, from: u64) -> String {
    let mut text = Vec::new();
    if let Ok(mut f) = fs::File::open(path) {
        use std::io::Seek;
        if f.seek(std::io::SeekFrom::Start(from)).is_ok() {
            let _ = f.read_to_end(&mut text);
        }
    }
    String::from_utf8_lossy(&text).into_owned()
}

fn stat_map(text: &str) -> Vec<(String, String)> {
    text.lines()
        .filter_map(|l| {
            let mut t = l.trim_end().splitn(3, ' ');
            (t.next()? == "STAT").then_some(())?;
            Some((t.next()?.to_string(), t.next().unwrap_or("").to_string()))
        })
        .collect()
}

fn status(dir: &Path) -> Result<()> {
    let st = load(dir)?;
    let code: Code = st
        .opts
        .code
        .parse()
        .map_err(|e| anyhow!("bad code in state: {e}"))?;
    let n = st.members.len();
    outln!(
        "{:<5} {:<22} {:<22} {:<8} {:<11} recovery",
        "node",
        "client",
        "peer",
        "pid",
        "health"
    )?;
    // health per node: down, recovering, up
    let mut health = Vec::new();
    for (m, &pid) in st.members.iter().zip(&st.pids) {
        let alive = pid_alive(pid);
        let stats = if alive {
            ask(m.client, "stats inec\r\n", Duration::from_secs(2)).ok()
        } else {
            None
        };
        let (h, rec) = match &stats {
            None if !alive => ("down", String::new()),
            None => ("unreachable", String::new()),
            Some(text) => {
                let s = stat_map(text);
                let get = |k: &str| {
                    s.iter()
                        .find(|(n, _)| n == k)
                        .map(|(_, v)| v.clone())
                        .unwrap_or_default()
                };
                let ready = get("ready") == "1";
                let rec = match get("recovery").as_str() {
                    "none" => String::new(),
                    r => format!(
                        "{r} {}/{} keys {} bytes",
                        get("recovery_keys_done"),
                        get("recovery_keys_total"),
                        get("recovery_bytes")
                    ),
                };
                (if ready { "up" } else { "recovering" }, rec)
            }
        };
        health.push(h);
        outln!(
            "{:<5} {:<22} {:<22} {:<8} {:<11} {}",
            m.id,
            m.client.to_string(),
            m.peer.to_string(),
            pid,
            h,
            rec
        )?;
    }
    let placement = Placement::new(n, code.n());
    outln!("{:<7} {:<6} {:<12} members", "stripe", "agent", "state")?;
    for s in 0..n {
        let members = placement.members(s);
        let down = members
            .iter()
            .filter(|&&i| health[i] == "down" || health[i] == "unreachable")
            .count();
        let recovering = members.iter().any(|&i| health[i] == "recovering");
        let state = cache::placement::stripe_state(down, code.parity_count(), recovering);
        let agent = placement
            .agent_of(s, |i| health[i] == "up")
            .map_or("none".to_string(), |a| a.to_string());
        let list: Vec<String> = members.iter().map(|i| i.to_string()).collect();
        outln!("{:<7} {:<6} {:<12} {}", s, agent, state, list.join(","))?;
    }
    Ok(())
}
