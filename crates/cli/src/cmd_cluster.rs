//! `inec node` and `inec cluster up|down|status`.

use std::fs;
use std::io::Write;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context, Result};
use clap::{Args, Subcommand};
use engine::control::Request;
use engine::{runner_id, BufferPool, Engine, NodeId, PlanRunner, TcpTransport};

use crate::cluster_state::{ClusterNode, ClusterState, STATE_FILE};

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

const BRIDGE: &str = "inec-br";
const NETNS_PORT: u16 = 7100;

pub(crate) fn ns_name(i: usize) -> String {
    format!("inec-ns{i}")
}

pub(crate) fn ns_addr(i: usize) -> String {
    format!("10.77.{}.{}", (i + 10) / 250, (i + 10) % 250 + 2)
}

fn sh(args: &[&str]) -> Result<()> {
    let out = Command::new(args[0])
        .args(&args[1..])
        .output()
        .with_context(|| format!("running {}", args.join(" ")))?;
    if !out.status.success() {
        bail!(
            "`{}` failed: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(())
}

/// Parses `1gbit`, `500mbit`, `100kbit` into bits per second.
fn parse_rate(s: &str) -> Result<u64> {
    let s = s.trim().to_ascii_lowercase();
    let (num, mult) = if let Some(n) = s.strip_suffix("gbit") {
        (n, 1_000_000_000)
    } else if let Some(n) = s.strip_suffix("mbit") {
        (n, 1_000_000)
    } else if let Some(n) = s.strip_suffix("kbit") {
        (n, 1_000)
    } else {
        bail!("bad link rate {s:?}: expected a number with gbit, mbit or kbit");
    };
    let v: f64 = num
        .parse()
        .with_context(|| format!("bad link rate {s:?}"))?;
    if v.is_nan() || v <= 0.0 {
        bail!("bad link rate {s:?}: must be positive");
    }
    Ok((v * mult as f64) as u64)
}

/// What `setup_netns` created, so that a failure (or `down`) removes exactly that.
#[derive(Default)]
pub(crate) struct NetnsCreated {
    pub(crate) bridge: bool,
    pub(crate) namespaces: Vec<String>,
    pub(crate) host_links: Vec<String>,
}

impl NetnsCreated {
    /// What `setup_netns(n, ..)` creates for nodes `0..n` (for tearing down a cluster whose
    /// state names its namespaces).
    pub(crate) fn of_nodes(n: usize) -> NetnsCreated {
        NetnsCreated {
            bridge: true,
            namespaces: (0..n)
                .map(ns_name)
                .filter(|ns| Path::new("/run/netns").join(ns).exists())
                .collect(),
            host_links: (0..n).map(|i| format!("inec-h{i}")).collect(),
        }
    }

    pub(crate) fn remove(&self) {
        for ns in &self.namespaces {
            let _ = sh(&["ip", "netns", "del", ns]);
        }
        for link in &self.host_links {
            let _ = Command::new("ip")
                .args(["link", "del", link])
                .stderr(Stdio::null())
                .status();
        }
        if self.bridge {
            let _ = Command::new("ip")
                .args(["link", "del", BRIDGE])
                .stderr(Stdio::null())
                .status();
        }
    }
}

fn link_exists(name: &str) -> bool {
    Command::new("ip")
        .args(["link", "show", name])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// Creates the bridge, one namespace per node and their veth links. Refuses to touch an
/// existing setup (the names are machine-wide: one namespace cluster at a time); on failure
/// removes what it created.
pub(crate) fn setup_netns(n: usize, rate: Option<&str>) -> Result<NetnsCreated> {
    if link_exists(BRIDGE) {
        bail!(
            "bridge {BRIDGE} exists: a namespace cluster is already up on this machine \
             (stop it with `inec cluster down --dir <its dir>`, or remove a stale one with \
             `ip link del {BRIDGE}` and `ip netns del inec-ns<i>`)"
        );
    }
    for i in 0..n {
        if Path::new("/run/netns").join(ns_name(i)).exists() {
            bail!(
                "network namespace {} exists (left by another cluster?); remove it with \
                 `ip netns del {}`",
                ns_name(i),
                ns_name(i)
            );
        }
    }
    let mut made = NetnsCreated::default();
    match build_netns(n, rate, &mut made) {
        Ok(()) => Ok(made),
        Err(e) => {
            made.remove();
            Err(e)
        }
    }
}

fn build_netns(n: usize, rate: Option<&str>, made: &mut NetnsCreated) -> Result<()> {
    let tbf = rate
        .map(|r| -> Result<(String, String)> {
            let bps = parse_rate(r)?;
            // One millisecond of traffic, at least 16 KiB, as the bucket.
            let burst = (bps / 8 / 1000).max(16 << 10);
            Ok((r.to_string(), format!("{burst}b")))
        })
        .transpose()?;
    sh(&["ip", "link", "add", BRIDGE, "type", "bridge"])?;
    made.bridge = true;
    sh(&["ip", "addr", "add", "10.77.0.1/16", "dev", BRIDGE])?;
    sh(&["ip", "link", "set", BRIDGE, "up"])?;
    for i in 0..n {
        let ns = ns_name(i);
        let (host, inner) = (format!("inec-h{i}"), format!("inec-n{i}"));
        sh(&["ip", "netns", "add", &ns])?;
        made.namespaces.push(ns.clone());
        sh(&[
            "ip", "link", "add", &host, "type", "veth", "peer", "name", &inner,
        ])?;
        made.host_links.push(host.clone());
        sh(&["ip", "link", "set", &inner, "netns", &ns])?;
        sh(&["ip", "link", "set", &host, "master", BRIDGE])?;
        sh(&["ip", "link", "set", &host, "up"])?;
        let cidr = format!("{}/16", ns_addr(i));
        sh(&["ip", "-n", &ns, "addr", "add", &cidr, "dev", &inner])?;
        sh(&["ip", "-n", &ns, "link", "set", &inner, "up"])?;
        sh(&["ip", "-n", &ns, "link", "set", "lo", "up"])?;
        if let Some((rate, burst)) = &tbf {
            // Upload: the node's side; download: the bridge's side of its veth. The download
            // queue must absorb incast — k helpers sending to one requester at once — as a
            // switch's buffer does: with a 5 ms queue (about 600 KB at 1 Gbit/s) six 4 MiB
            // senders lose packets and TCP backs off (RS(6,3) repair took 352 ms against
            // k·c/B = 201 ms); 50 ms (about 6 MB) keeps the link busy.
            for (dev, netns) in [(&inner, Some(&ns)), (&host, None)] {
                let mut args = vec!["tc"];
                if let Some(ns) = netns {
                    args.extend(["-n", ns.as_str()]);
                }
                args.extend([
                    "qdisc", "add", "dev", dev, "root", "tbf", "rate", rate, "burst", burst,
                    "latency", "50ms",
                ]);
                sh(&args)?;
            }
        }
    }
    Ok(())
}

/// Removes the namespaces of a cluster's nodes (and their host links) and the bridge.
fn teardown_netns(state: &ClusterState) {
    let mut made = NetnsCreated {
        bridge: true,
        ..NetnsCreated::default()
    };
    for (i, n) in state.nodes.iter().enumerate() {
        if let Some(ns) = &n.netns {
            if Path::new("/run/netns").join(ns).exists() {
                made.namespaces.push(ns.clone());
            }
            made.host_links.push(format!("inec-h{i}"));
        }
    }
    made.remove();
}

/// Waits until the log of a node shows its readiness line; returns the address it names.
fn wait_ready(log: &Path, pid: u32, deadline: Instant) -> Result<String> {
    loop {
        if let Ok(text) = fs::read_to_string(log) {
            if let Some(line) = text.lines().find(|l| l.contains(" ready on ")) {
                let addr = line
                    .split(" ready on ")
                    .nth(1)
                    .and_then(|r| r.split_whitespace().next())
                    .ok_or_else(|| anyhow!("bad readiness line {line:?}"))?;
                return Ok(addr.to_string());
            }
        }
        if !pid_alive(pid) {
            bail!(
                "node process {pid} exited before it was ready; see {}",
                log.display()
            );
        }
        if Instant::now() >= deadline {
            bail!(
                "node process {pid} not ready in time; see {}",
                log.display()
            );
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

fn pid_alive(pid: u32) -> bool {
    // A zombie still has a /proc entry; its state letter is Z.
    match fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(s) => !s
            .rsplit(')')
            .next()
            .is_some_and(|rest| rest.trim_start().starts_with('Z')),
        Err(_) => false,
    }
}

pub fn run(cmd: ClusterCommand) -> Result<()> {
    match cmd {
        ClusterCommand::Up(a) => up(a),
        ClusterCommand::Down(a) => down(a),
        ClusterCommand::Status(a) => status(a),
    }
}

fn up(a: UpArgs) -> Result<()> {
    let dir = &a.dir.dir;
    if dir.join(STATE_FILE).exists() {
        bail!(
            "a cluster is already up in {} (run `inec cluster down` first)",
            dir.display()
        );
    }
    if a.nodes == 0 || a.nodes > 200 {
        bail!("bad --nodes {}: must be between 1 and 200", a.nodes);
    }
    fs::create_dir_all(dir)?;
    let exe = std::env::current_exe()?;
    let netns = if a.netns {
        Some(setup_netns(a.nodes, a.link_rate.as_deref())?)
    } else {
        None
    };
    let mut children: Vec<Child> = Vec::new();
    let result = start_nodes(&a, &exe, &mut children);
    let state = match result {
        Ok(state) => state,
        Err(e) => {
            // Leave nothing behind: the nodes started so far and the namespaces.
            let pids: Vec<u32> = children.iter().map(|c| c.id()).collect();
            for c in &mut children {
                let _ = c.kill();
                let _ = c.wait();
            }
            if let Some(made) = &netns {
                made.remove();
            }
            let _ = fs::remove_file(dir.join(STATE_FILE));
            return Err(e.context(format!(
                "cluster up failed; stopped the nodes it had started (pids {pids:?}){}",
                if netns.is_some() {
                    " and removed its network namespaces"
                } else {
                    ""
                }
            )));
        }
    };
    outln!(
        "cluster up: {} nodes{} (state in {})",
        state.nodes.len(),
        match (&a.netns, &a.link_rate) {
            (true, Some(r)) => format!(", network namespaces, links {r}"),
            (true, None) => ", network namespaces".to_string(),
            _ => ", loopback".to_string(),
        },
        dir.display()
    )?;
    for n in &state.nodes {
        outln!("  node {:>3}  {:<22} pid {}", n.id, n.addr, n.pid)?;
    }
    Ok(())
}

/// Starts the node processes (recorded in `children` as they start), waits for each to be
/// ready, writes the state file, connects the nodes and pings each.
fn start_nodes(a: &UpArgs, exe: &Path, children: &mut Vec<Child>) -> Result<ClusterState> {
    let dir = &a.dir.dir;
    let deadline = Instant::now() + Duration::from_secs(a.ready_timeout_s);
    let mut nodes = Vec::new();
    for i in 0..a.nodes {
        let log_path = dir.join(format!("node-{i}.log"));
        let log = fs::File::create(&log_path)?;
        let mut cmd = if a.netns {
            let mut c = Command::new("ip");
            c.args(["netns", "exec", &ns_name(i)]).arg(exe);
            c.args([
                "node",
                "--id",
                &i.to_string(),
                "--listen",
                &format!("{}:{NETNS_PORT}", ns_addr(i)),
            ]);
            c
        } else {
            let mut c = Command::new(exe);
            c.args(["node", "--id", &i.to_string(), "--listen", "127.0.0.1:0"]);
            c
        };
        let child = cmd
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            .spawn()
            .context("starting a node")?;
        nodes.push(ClusterNode {
            id: i as NodeId,
            addr: String::new(),
            pid: child.id(),
            netns: a.netns.then(|| ns_name(i)),
        });
        children.push(child);
    }
    for (i, n) in nodes.iter_mut().enumerate() {
        n.addr = wait_ready(&dir.join(format!("node-{i}.log")), n.pid, deadline)?;
    }
    let state = ClusterState {
        nodes,
        link_rate: a.link_rate.clone(),
    };
    state.save(dir)?;
    // Connect the nodes to each other and check that each answers.
    let addrs = state.addrs();
    let mut runner = PlanRunner::tcp(runner_id(), &addrs)?;
    runner.introduce(&addrs)?;
    let pings = addrs.iter().map(|(id, _)| (*id, Request::Ping)).collect();
    runner.request_all(pings, Duration::from_secs(10))?;
    Ok(state)
}

fn down(args: DownArgs) -> Result<()> {
    let a = &args.dir;
    let state = ClusterState::load(&a.dir)?;
    let live: Vec<(NodeId, String)> = state
        .nodes
        .iter()
        .filter(|n| pid_alive(n.pid))
        .map(|n| (n.id, n.addr.clone()))
        .collect();
    if !live.is_empty() {
        match PlanRunner::tcp(runner_id(), &live) {
            Ok(mut runner) => {
                let ids: Vec<NodeId> = live.iter().map(|(id, _)| *id).collect();
                if let Err(e) = runner.shutdown_nodes(&ids) {
                    eprintln!("warning: not every node acknowledged the shutdown: {e}");
                }
            }
            Err(e) => eprintln!("warning: cannot reach the nodes: {e}"),
        }
    }
    let deadline = Instant::now() + Duration::from_secs(5);
    for n in &state.nodes {
        while pid_alive(n.pid) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(5));
        }
        if pid_alive(n.pid) {
            eprintln!("node {} (pid {}) did not exit; killing it", n.id, n.pid);
            let _ = Command::new("kill")
                .args(["-KILL", &n.pid.to_string()])
                .status();
        }
    }
    if state.nodes.iter().any(|n| n.netns.is_some()) {
        teardown_netns(&state);
    }
    fs::remove_file(a.dir.join(STATE_FILE))?;
    let mut kept = String::new();
    if args.keep_logs {
        kept = format!("; node logs kept in {}", a.dir.display());
    } else {
        for n in &state.nodes {
            let log = a.dir.join(format!("node-{}.log", n.id));
            if let Err(e) = fs::remove_file(&log) {
                if e.kind() != std::io::ErrorKind::NotFound {
                    eprintln!("warning: cannot remove {}: {e}", log.display());
                }
            }
        }
        // Only if empty: anything else in it is not ours to remove.
        let _ = fs::remove_dir(&a.dir);
    }
    outln!("cluster down: {} nodes stopped{kept}", state.nodes.len())?;
    Ok(())
}

fn status(a: DirArgs) -> Result<()> {
    let state = ClusterState::load(&a.dir)?;
    let mut answering = vec![false; state.nodes.len()];
    let live: Vec<(NodeId, String)> = state
        .nodes
        .iter()
        .filter(|n| pid_alive(n.pid))
        .map(|n| (n.id, n.addr.clone()))
        .collect();
    if let Ok(mut runner) = PlanRunner::tcp(runner_id(), &live) {
        for (id, _) in &live {
            let ok = runner
                .request(*id, Request::Ping, Duration::from_secs(2))
                .is_ok();
            if let Some(pos) = state.nodes.iter().position(|n| n.id == *id) {
                answering[pos] = ok;
            }
        }
    }
    let mut up = 0;
    for (n, ok) in state.nodes.iter().zip(&answering) {
        let s = match (pid_alive(n.pid), ok) {
            (true, true) => {
                up += 1;
                "up"
            }
            (true, false) => "not answering",
            (false, _) => "dead",
        };
        outln!(
            "node {:>3}  {:<22} pid {:<8} {}{}",
            n.id,
            n.addr,
            n.pid,
            s,
            n.netns
                .as_ref()
                .map(|ns| format!("  (netns {ns})"))
                .unwrap_or_default()
        )?;
    }
    outln!("{up}/{} nodes up", state.nodes.len())?;
    if up != state.nodes.len() {
        bail!("{} nodes are not up", state.nodes.len() - up);
    }
    Ok(())
}
