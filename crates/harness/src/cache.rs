//! Local inec caches: the node processes of `inec cache up|down|restart|status` (each an
//! `inec serve` of one cluster file, its state in a directory), and [`InecCache`], such a cache
//! started by a program that crashes, restarts and watches its nodes (the demo, the
//! benchmarks, the tests).

use std::collections::BTreeMap;
use std::fs;
use std::io::{Read, Seek};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use crate::memcached::{ask, parse_stats};
use crate::process::{free_port, pid_alive, pids_naming, sigkill, sigterm, wait_gone};
use crate::{netns, Error};

/// The state file inside a cache's directory.
pub const STATE_FILE: &str = "cache.json";
/// The cluster file every node reads (`inec serve --cluster`).
pub const CLUSTER_FILE: &str = "cluster.txt";

/// The settings of every node of a cache, as `inec serve` and `inec cache up` spell them.
#[derive(clap::Args, Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
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
    /// Event loops per node (memcached's -t): each serves the client and peer connections
    /// dealt to it and runs most of their requests to completion (gets, sets, add, replace,
    /// cas, delete, touch, gat, meta gets, sets and deletes, incr/decr/append/prepend and meta
    /// arithmetic).
    /// Default: the machine's cores for `inec serve`; for a cache on one machine (`inec cache
    /// up`), its cores shared among the nodes (at least 1 each).
    #[arg(short = 't', long)]
    pub threads: Option<usize>,
    /// Worker threads per node for the requests a loop hands over (a gat of several keys,
    /// meta sets and deletes with I, the first requests of a stripe whose new
    /// agent has no index yet, anything out of the ordinary; a request for a key locked by a
    /// write in flight waits on its loop), and as many for peers' requests that may wait;
    /// each started when a request finds none free, ended after 10 s without one.
    #[arg(long, default_value_t = 8)]
    pub workers: usize,
    /// The code: rs:K,M or lrc:K,L,R.
    #[arg(long, default_value = "rs:6,3")]
    pub code: String,
    /// Repair scheme: rs, lrc, ppr, ecpipe or triec.
    #[arg(long, default_value = "rs")]
    pub scheme: String,
    /// Engine mode: coherent or incoherent.
    #[arg(long, default_value = "coherent")]
    pub mode: String,
    /// Values shorter than this many bytes are stored as m+1 replicas instead of coded (the
    /// split layout).
    #[arg(long, default_value_t = 1024)]
    pub replicate_below: usize,
    /// How values are laid out: split (the paper's: k chunks plus parity per value), whole
    /// (each value whole at its home, parity across values: docs/cache.md, "The whole
    /// layout"), or auto (whole below --whole-below bytes, split at or above).
    #[arg(long, default_value = "auto", value_parser = ["split", "whole", "auto"])]
    #[serde(default = "default_layout")]
    pub layout: String,
    /// With --layout auto: values shorter than this many bytes are whole (docs/cache.md, "The
    /// layout threshold, measured").
    #[arg(long, default_value_t = 32768)]
    #[serde(default = "default_whole_below")]
    pub whole_below: usize,
    /// Slab page size of the whole layout, in KiB (memcached's is 1024; smaller pages leave
    /// less of the last page of each page stripe unused, and its parity with it).
    #[arg(long, default_value_t = 256)]
    #[serde(default = "default_page_kib")]
    pub page_kib: usize,
    /// How much each slab size class of the whole layout grows over the one below it
    /// (memcached's -f): smaller wastes less of each slot, larger keeps fewer partly filled
    /// pages when values have many sizes.
    #[arg(long, default_value = "1.04")]
    #[serde(default = "default_slab_growth")]
    pub slab_growth_factor: String,
    /// How a whole value is rebuilt while its home is down or its slot damaged: direct (the
    /// agent reads that range of every other page of the page's stripe and decodes a
    /// consistent cut; on the event loop at the home) or plan (the scheme's repair plan on the
    /// engine, its chunk the value's byte range, checked by the record's CRC and read again
    /// directly if the check fails). docs/cache.md, "Degraded reads of whole values".
    #[arg(long, default_value = "direct", value_parser = ["direct", "plan"])]
    #[serde(default = "default_whole_repair")]
    pub whole_repair: String,
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
    /// Leadership from etcd, for clusters that span hosts: `etcd://HOST:PORT[,HOST:PORT...]`
    /// with an optional `/PREFIX` for the keys (default /inec); `local` (`inec cache up`
    /// only): start a one-member etcd for the cluster. Without it, each stripe's leader holds
    /// a majority lease on the heartbeats (docs/cache.md, "Leadership").
    #[arg(long, value_name = "etcd://HOST:PORT[,...]|local")]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub coordinator: Option<String>,
}

/// The layout of a cache whose state file predates layouts: split.
fn default_layout() -> String {
    "split".into()
}

fn default_whole_below() -> usize {
    32768
}

fn default_page_kib() -> usize {
    256
}

fn default_whole_repair() -> String {
    "direct".into()
}

fn default_slab_growth() -> String {
    "1.04".into()
}

/// The machine's cores (`-t`'s default), 1 when they cannot be read.
pub fn machine_cores() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

impl Default for CacheOptions {
    /// The flags' defaults.
    fn default() -> Self {
        use clap::{FromArgMatches, Parser};
        #[derive(Parser)]
        struct Only {
            #[command(flatten)]
            o: CacheOptions,
        }
        let m = <Only as clap::CommandFactory>::command().get_matches_from(["x"]);
        Only::from_arg_matches(&m).expect("the defaults parse").o
    }
}

impl CacheOptions {
    /// The flags of `inec serve` that set these options.
    pub fn to_args(&self) -> Vec<String> {
        let mut v: Vec<String> = [
            ("-m", self.memory_mib.to_string()),
            ("-c", self.max_conns.to_string()),
            ("-I", self.max_item_size.clone()),
            ("--workers", self.workers.to_string()),
            ("--code", self.code.clone()),
            ("--scheme", self.scheme.clone()),
            ("--mode", self.mode.clone()),
            ("--replicate-below", self.replicate_below.to_string()),
            ("--layout", self.layout.clone()),
            ("--whole-below", self.whole_below.to_string()),
            ("--page-kib", self.page_kib.to_string()),
            ("--slab-growth-factor", self.slab_growth_factor.clone()),
            ("--whole-repair", self.whole_repair.clone()),
            ("--heartbeat-ms", self.heartbeat_ms.to_string()),
            ("--down-after-ms", self.down_after_ms.to_string()),
            ("--recovery-mbps", self.recovery_mbps.to_string()),
        ]
        .into_iter()
        .flat_map(|(f, v)| [f.to_string(), v])
        .collect();
        if let Some(t) = self.threads {
            v.extend(["-t".to_string(), t.to_string()]);
        }
        if self.debug_commands {
            v.push("--debug-commands".into());
        }
        if let Some(c) = &self.coordinator {
            v.extend(["--coordinator".to_string(), c.clone()]);
        }
        v
    }

    /// The event loops of a node, `threads` or its default, when `nodes` nodes share this
    /// machine.
    pub fn loops_sharing(&self, nodes: usize) -> usize {
        self.threads
            .unwrap_or_else(|| (machine_cores() / nodes.max(1)).max(1))
    }
}

/// One node of a cluster file.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Member {
    pub id: usize,
    pub client: SocketAddr,
    /// Where the other nodes connect: their requests, heartbeats and plan frames.
    pub peer: SocketAddr,
}

/// Parses a cluster file: `node <id> <client addr> <peer addr>` per line, ids 0..N in order;
/// `#` starts a comment.
pub fn parse_cluster(text: &str) -> Result<Vec<Member>, Error> {
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let line = line.split('#').next().unwrap_or("").trim();
        if line.is_empty() {
            continue;
        }
        let bad = |what: &str| Error::Usage(format!("cluster file line {}: {what}", i + 1));
        let t: Vec<&str> = line.split_whitespace().collect();
        if t.len() == 5 && t[0] == "node" {
            return Err(bad(&format!(
                "{line:?} names an engine address ({}): a node's plan frames now travel on \
                 its peer port, so the cluster file has no engine column; remove it",
                t[4]
            )));
        }
        if t.len() != 4 || t[0] != "node" {
            return Err(bad(&format!(
                "expected `node <id> <client addr> <peer addr>`, got {line:?}"
            )));
        }
        let id: usize = t[1].parse().map_err(|_| bad("bad node id"))?;
        if id != out.len() {
            return Err(bad(&format!(
                "node ids must be 0, 1, 2, ... in order (got {id})"
            )));
        }
        let addr = |s: &str, what: &str| s.parse().map_err(|_| bad(&format!("bad {what} address")));
        out.push(Member {
            id,
            client: addr(t[2], "client")?,
            peer: addr(t[3], "peer")?,
        });
    }
    if out.is_empty() {
        return Err(Error::Usage("cluster file lists no node".into()));
    }
    Ok(out)
}

/// The text of a cluster file, as [`parse_cluster`] reads it.
pub fn cluster_text(members: &[Member]) -> String {
    let mut s = String::from("# inec cache cluster: node <id> <client addr> <peer addr>\n");
    for m in members {
        s.push_str(&format!("node {} {} {}\n", m.id, m.client, m.peer));
    }
    s
}

/// A cache's state file: its options, nodes and their pids.
#[derive(Debug, Serialize, Deserialize)]
pub struct CacheState {
    pub opts: CacheOptions,
    pub members: Vec<Member>,
    pub pids: Vec<u32>,
    /// The network namespace of each node (`--netns`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub netns: Option<Vec<String>>,
    /// The etcd `--coordinator local` started (its pid), stopped with the cache.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub etcd_pid: Option<u32>,
}

impl CacheState {
    /// Reads the state of the cache in `dir`.
    pub fn load(dir: &Path) -> Result<CacheState, Error> {
        let path = dir.join(STATE_FILE);
        let text = fs::read_to_string(&path).map_err(|_| {
            Error::Usage(format!(
                "no cache cluster state at {} (is a cache up?)",
                path.display()
            ))
        })?;
        serde_json::from_str(&text)
            .map_err(|e| Error::Other(format!("bad cache state {}: {e}", path.display())))
    }

    fn save(&self, dir: &Path) -> Result<(), Error> {
        let text = serde_json::to_string_pretty(self).expect("the state serializes");
        fs::write(dir.join(STATE_FILE), text).map_err(Error::io("writing the cache state"))
    }

    /// Client addresses in node-id order.
    pub fn addrs(&self) -> Vec<SocketAddr> {
        self.members.iter().map(|m| m.client).collect()
    }
}

/// What `inec cache up` starts.
#[derive(Clone, Debug)]
pub struct UpConfig {
    /// The `inec` executable each node runs (`inec serve`).
    pub exe: PathBuf,
    /// The directory of the state file, the cluster file and the node logs.
    pub dir: PathBuf,
    /// Nodes (`None`: as many as the code has chunks).
    pub nodes: Option<usize>,
    /// Client ports base+i, peer ports base+1000+i (`None`: free ports).
    pub base_port: Option<u16>,
    /// How long every node has to answer.
    pub ready_timeout: Duration,
    /// Each node in its own network namespace (root).
    pub netns: bool,
    /// With `netns`: the `tc tbf` rate of every link.
    pub link_rate: Option<String>,
    pub options: CacheOptions,
}

/// Starts the nodes of a cache and waits until each answers and sees every other one up;
/// returns its state. On failure every node started is stopped again.
pub fn up(cfg: &UpConfig) -> Result<CacheState, Error> {
    let dir = &cfg.dir;
    if dir.join(STATE_FILE).exists() {
        return Err(Error::Usage(format!(
            "a cache is already up in {} (run `inec cache down` first)",
            dir.display()
        )));
    }
    let n = match cfg.nodes {
        Some(n) => n,
        None => {
            let code: codes::Code =
                (cfg.options.code.parse()).map_err(|e| Error::Usage(format!("bad --code: {e}")))?;
            code.n()
        }
    };
    if n == 0 {
        return Err(Error::Usage("--nodes must be at least 1".into()));
    }
    fs::create_dir_all(dir).map_err(Error::io(format!("creating {}", dir.display())))?;
    let mut made = if cfg.netns {
        Some(netns::setup(n, cfg.link_rate.as_deref())?)
    } else {
        None
    };
    // `--coordinator local`: a one-member etcd for this cluster, in a namespace of its own on
    // the bridge with `--netns`.
    let mut cfg = cfg.clone();
    let mut etcd = None;
    if cfg.options.coordinator.as_deref() == Some("local") {
        let started = match made.as_mut() {
            Some(m) => netns::add_coordinator(m).and_then(|()| crate::etcd::start(dir, true)),
            None => crate::etcd::start(dir, false),
        };
        match started {
            Ok(e) => {
                cfg.options.coordinator = Some(e.url());
                etcd = Some(e);
            }
            Err(e) => {
                if let Some(m) = &made {
                    m.remove();
                }
                return Err(e);
            }
        }
    }
    let cfg = &cfg;
    // Ports chosen here are free when chosen but released before the nodes bind them: if a
    // program other than a `cache up` (those take turns, below) takes one meanwhile, the nodes
    // are stopped and other ports chosen.
    let mut attempts = 0;
    let result = loop {
        attempts += 1;
        let r = start(cfg, n);
        match &r {
            Err(e)
                if !cfg.netns
                    && cfg.base_port.is_none()
                    && attempts < 3
                    && e.mentions("Address already in use") =>
            {
                log::warn!(
                    "cache up: a chosen port was taken before its node bound it; choosing others"
                );
            }
            _ => break r,
        }
    };
    if result.is_err() {
        if let Some(e) = &etcd {
            sigkill(e.pid);
        }
    }
    if let (Err(_), Some(made)) = (&result, &made) {
        made.remove();
    }
    let mut st = result?;
    if let Some(e) = &etcd {
        st.etcd_pid = Some(e.pid);
        st.save(dir)?;
    }
    Ok(st)
}

/// Starts the nodes of `up` (in namespaces `inec-ns<i>` already made when `cfg.netns`).
fn start(cfg: &UpConfig, n: usize) -> Result<CacheState, Error> {
    let dir = &cfg.dir;
    // Ports are chosen free, then released for the nodes to bind: two `cache up`s at once (or
    // a benchmark's and a test's) could pick each other's ports in between. A lock file taken
    // from the choice until every node answers keeps them apart on this host.
    let _ports = if cfg.netns || cfg.base_port.is_some() {
        None
    } else {
        let path = std::env::temp_dir().join("inec-cache-ports.lock");
        let f = fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&path)
            .map_err(Error::io(format!("opening {}", path.display())))?;
        f.lock()
            .map_err(Error::io(format!("locking {}", path.display())))?;
        Some(f)
    };
    let mut members = Vec::new();
    // Free ports: every listener is held until all are chosen, so no port is picked twice.
    let mut held = Vec::new();
    for id in 0..n {
        if cfg.netns {
            let ip: std::net::IpAddr = netns::ns_addr(id).parse().expect("a namespace address");
            members.push(Member {
                id,
                client: SocketAddr::new(ip, 11211),
                peer: SocketAddr::new(ip, 11311),
            });
            continue;
        }
        let (cp, pp) = match cfg.base_port {
            Some(b) => (b + id as u16, b + 1000 + id as u16),
            None => (free_port(&mut held)?, free_port(&mut held)?),
        };
        let local = |port| SocketAddr::from(([127, 0, 0, 1], port));
        members.push(Member {
            id,
            client: local(cp),
            peer: local(pp),
        });
    }
    drop(held);
    fs::write(dir.join(CLUSTER_FILE), cluster_text(&members))
        .map_err(Error::io("writing the cluster file"))?;
    let mut opts = cfg.options.clone();
    opts.threads = Some(opts.loops_sharing(n));
    let mut st = CacheState {
        opts,
        members,
        pids: Vec::new(),
        netns: cfg.netns.then(|| (0..n).map(netns::ns_name).collect()),
        etcd_pid: None,
    };
    let fail = |st: &CacheState, e: Error| {
        st.pids.iter().for_each(|&p| sigkill(p));
        let _ = fs::remove_file(dir.join(STATE_FILE));
        e.context("cache up failed; stopped every node it started")
    };
    for id in 0..n {
        let _ = fs::remove_file(dir.join(format!("node-{id}.log")));
        match spawn_node(&cfg.exe, dir, &st, id, false) {
            Ok(pid) => st.pids.push(pid),
            Err(e) => return Err(fail(&st, e)),
        }
    }
    st.save(dir)?;
    let deadline = Instant::now() + cfg.ready_timeout;
    for (m, &pid) in st.members.iter().zip(&st.pids) {
        let log = dir.join(format!("node-{}.log", m.id));
        if let Err(e) = wait_answering(m.client, pid, deadline, &log) {
            return Err(fail(&st, e));
        }
    }
    // Nodes that started first found the others not listening yet: wait until every node
    // sees every other one up.
    if let Err(e) = wait_converged(&st, deadline) {
        return Err(fail(&st, e));
    }
    Ok(st)
}

fn spawn_node(
    exe: &Path,
    dir: &Path,
    st: &CacheState,
    id: usize,
    recover: bool,
) -> Result<u32, Error> {
    let ns = st
        .netns
        .as_ref()
        .and_then(|ns| ns.get(id))
        .map(String::as_str);
    let mut cmd = crate::process::command_in(ns, exe);
    cmd.arg("serve")
        .arg("--cluster")
        .arg(dir.join(CLUSTER_FILE))
        .args(["--id", &id.to_string()])
        .args(st.opts.to_args());
    if recover {
        cmd.arg("--recover");
    }
    crate::process::spawn_logged(
        &mut cmd,
        &dir.join(format!("node-{id}.log")),
        &format!("a cache node ({})", exe.display()),
    )
}

fn wait_answering(addr: SocketAddr, pid: u32, deadline: Instant, log: &Path) -> Result<(), Error> {
    loop {
        if ask(addr, "version\r\n", Duration::from_millis(500))
            .is_ok_and(|r| r.starts_with("VERSION"))
        {
            return Ok(());
        }
        if !pid_alive(pid) {
            let mut tail = String::new();
            let _ = fs::File::open(log).and_then(|mut f| f.read_to_string(&mut tail));
            return Err(Error::Other(format!(
                "cache node (pid {pid}) exited before it answered; its log {}:\n{tail}",
                log.display()
            )));
        }
        if Instant::now() >= deadline {
            return Err(Error::Other(format!(
                "cache node (pid {pid}) did not answer on {addr} in time; see {}",
                log.display()
            )));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Waits until every node answers `stats inec` ready and with no member down in its view.
fn wait_converged(st: &CacheState, deadline: Instant) -> Result<(), Error> {
    loop {
        // With a coordinator, leaders take their keys after the nodes see each other (a node
        // that registered first may hold another's stripe for a moment): wait until each node
        // leads its own stripe (the one it is the first member of) and no other.
        let coordinated = st.opts.coordinator.is_some();
        let ok = st.members.iter().all(|m| {
            ask(m.client, "stats inec\r\n", Duration::from_secs(2)).is_ok_and(|t| {
                let s = parse_stats(&t);
                let stat = |k: &str| s.get(k).map(String::as_str);
                let own_term = stat(&format!("stripe_{}_term", m.id));
                stat("ready") == Some("1")
                    && stat("members_down") == Some("0")
                    && (!coordinated
                        || (own_term.is_some_and(|t| t != "0") && stat("stripes_led") == Some("1")))
            })
        });
        if ok {
            return Ok(());
        }
        if Instant::now() >= deadline {
            return Err(Error::Other(
                "the cache nodes do not all see each other up (and, with a coordinator, lead \
                 their own stripes) in time"
                    .into(),
            ));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Stops every node of the cache in `dir` (SIGTERM, SIGKILL after 5 s), removes its network
/// namespaces and its state file; returns how many nodes it had.
pub fn down(dir: &Path) -> Result<usize, Error> {
    let st = CacheState::load(dir)?;
    for &p in &st.pids {
        if pid_alive(p) {
            sigterm(p);
        }
    }
    let deadline = Instant::now() + Duration::from_secs(5);
    for (i, &p) in st.pids.iter().enumerate() {
        if !wait_gone(p, deadline.saturating_duration_since(Instant::now())) {
            log::warn!("node {i} (pid {p}) did not exit; killing it");
            sigkill(p);
        }
    }
    if let Some(p) = st.etcd_pid {
        sigterm(p);
        if !wait_gone(p, Duration::from_secs(5)) {
            sigkill(p);
        }
    }
    if let Some(ns) = &st.netns {
        netns::NetnsCreated::of_nodes(ns.len()).remove();
    }
    fs::remove_file(dir.join(STATE_FILE)).map_err(Error::io("removing the cache state"))?;
    Ok(st.pids.len())
}

/// How many times [`restart`] starts a node whose port was taken.
const RESTART_BIND_ATTEMPTS: u32 = 10;

/// How a node's log says that a port was taken.
const IN_USE: &str = "Address already in use";

/// The text of the file at `path` from byte `from` on (empty if it cannot be read).
fn log_since(path: &Path, from: u64) -> String {
    let mut text = Vec::new();
    if let Ok(mut f) = fs::File::open(path) {
        if f.seek(std::io::SeekFrom::Start(from)).is_ok() {
            let _ = f.read_to_end(&mut text);
        }
    }
    String::from_utf8_lossy(&text).into_owned()
}

/// Restarts node `id` of the cache in `dir` empty (killing it first if it runs), with the
/// executable `exe`; returns its new pid once it answers. It recovers in the background.
pub fn restart(exe: &Path, dir: &Path, id: usize) -> Result<u32, Error> {
    let mut st = CacheState::load(dir)?;
    if id >= st.members.len() {
        return Err(Error::Usage(format!(
            "no node {id} (the cache has {} nodes)",
            st.members.len()
        )));
    }
    let old = st.pids[id];
    if pid_alive(old) {
        sigkill(old);
        wait_gone(old, Duration::from_secs(5));
    }
    // The node binds the ports it had. One may be refused for a while: right after a kill the
    // dead node's connections on it are still closing (seen in tests: a bind refused at once,
    // accepted a moment later), and another `cache up` on this host probing for free ports
    // holds each candidate briefly. A node that exits on "Address already in use" is started
    // again, up to `RESTART_BIND_ATTEMPTS` times over about seven seconds.
    let log = dir.join(format!("node-{id}.log"));
    let mut attempt = 0;
    loop {
        attempt += 1;
        // Only this attempt's part of the log (it is appended to) tells why it failed.
        let logged = fs::metadata(&log).map_or(0, |m| m.len());
        let pid = spawn_node(exe, dir, &st, id, true)?;
        st.pids[id] = pid;
        st.save(dir)?;
        let deadline = Instant::now() + Duration::from_secs(20);
        match wait_answering(st.members[id].client, pid, deadline, &log) {
            Ok(()) => return Ok(pid),
            Err(_)
                if attempt < RESTART_BIND_ATTEMPTS && log_since(&log, logged).contains(IN_USE) =>
            {
                log::warn!(
                    "cache restart: node {id} found one of its ports taken; starting it again"
                );
                std::thread::sleep(Duration::from_millis((250 * u64::from(attempt)).min(1000)));
            }
            Err(e) => return Err(e),
        }
    }
}

// ---- a cache a program controls ----

/// Settings of an inec local cache a program starts.
#[derive(Clone, Debug)]
pub struct InecOptions {
    /// The `inec` executable the nodes run.
    pub exe: PathBuf,
    /// Nodes (`None`: as many as the code has chunks).
    pub nodes: Option<usize>,
    pub options: CacheOptions,
}

impl InecOptions {
    /// A cache of `code` (`rs:6,3`, …), `scheme`, `mode` (`coherent` or `incoherent`) and
    /// `memory_mib` per node, the other options at their defaults.
    pub fn new(
        exe: impl Into<PathBuf>,
        code: &str,
        scheme: &str,
        mode: &str,
        memory_mib: u64,
    ) -> Self {
        InecOptions {
            exe: exe.into(),
            nodes: None,
            options: CacheOptions {
                code: code.into(),
                scheme: scheme.into(),
                mode: mode.into(),
                memory_mib,
                ..CacheOptions::default()
            },
        }
    }
}

/// An inec local cache started in a directory, stopped (and its directory removed) when
/// dropped.
#[derive(Debug)]
pub struct InecCache {
    exe: PathBuf,
    dir: PathBuf,
    /// Client addresses in node-id order (node s is the agent of Mem Stripe s).
    addrs: Vec<SocketAddr>,
    pids: Vec<u32>,
}

impl InecCache {
    /// Starts a cache in a fresh temporary directory.
    pub fn start(o: &InecOptions) -> Result<InecCache, Error> {
        static SEQ: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let dir = std::env::temp_dir().join(format!(
            "inec-bench-cache-{}-{}",
            std::process::id(),
            SEQ.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
        ));
        Self::start_in(o, &dir)
    }

    /// Starts a cache whose state (addresses, pids, logs) lives in `dir` (emptied first and
    /// removed on drop). Knowing `dir` before the start lets a signal handler stop the nodes
    /// with [`teardown_dir`] even while they start.
    pub fn start_in(o: &InecOptions, dir: &Path) -> Result<InecCache, Error> {
        Self::start_with(o, dir, false)
    }

    /// As [`Self::start_in`], each node in its own network namespace (`inec cache up
    /// --netns`: root, and no other namespace cluster up on this machine).
    pub fn start_netns_in(o: &InecOptions, dir: &Path) -> Result<InecCache, Error> {
        Self::start_with(o, dir, true)
    }

    fn start_with(o: &InecOptions, dir: &Path, netns: bool) -> Result<InecCache, Error> {
        let _ = fs::remove_dir_all(dir);
        let st = up(&UpConfig {
            exe: o.exe.clone(),
            dir: dir.to_path_buf(),
            nodes: o.nodes,
            base_port: None,
            ready_timeout: Duration::from_secs(20),
            netns,
            link_rate: None,
            options: o.options.clone(),
        })
        .map_err(|e| {
            let _ = fs::remove_dir_all(dir);
            let o = &o.options;
            e.context(format!(
                "inec cache up ({} {} {})",
                o.code, o.scheme, o.mode
            ))
        })?;
        Ok(InecCache {
            exe: o.exe.clone(),
            dir: dir.to_path_buf(),
            addrs: st.addrs(),
            pids: st.pids,
        })
    }

    /// Client addresses in node-id order.
    pub fn addrs(&self) -> &[SocketAddr] {
        &self.addrs
    }

    /// Node pids in node-id order (a killed node keeps its old pid until restarted).
    pub fn pids(&self) -> &[u32] {
        &self.pids
    }

    /// The directory holding the cluster's state and node logs.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    fn check_node(&self, node: usize) -> Result<(), Error> {
        if node >= self.pids.len() {
            return Err(Error::Usage(format!(
                "no node {node} (the cache has {} nodes)",
                self.pids.len()
            )));
        }
        Ok(())
    }

    /// Kills node `node` with SIGKILL (a crash: no goodbye to its peers) and waits until its
    /// process is gone.
    pub fn kill(&mut self, node: usize) -> Result<(), Error> {
        self.check_node(node)?;
        let pid = self.pids[node];
        sigkill(pid);
        if !wait_gone(pid, Duration::from_secs(5)) {
            return Err(Error::StillRunning { node, pid });
        }
        Ok(())
    }

    /// Restarts node `node` empty (killing it first if it runs): it recovers in the
    /// background. Returns when it answers; its new pid is in [`Self::pids`].
    pub fn restart(&mut self, node: usize) -> Result<(), Error> {
        self.check_node(node)?;
        let r = restart(&self.exe, &self.dir, node);
        if let Ok(st) = CacheState::load(&self.dir) {
            if st.pids.len() == self.pids.len() {
                self.pids = st.pids;
            }
        }
        r.map(|_| ())
            .map_err(|e| e.context(format!("inec cache restart {node}")))
    }

    /// Every node's health, recovery progress and view of the stripes, from `stats inec`
    /// (a node whose process is gone is `Down` without asking it).
    pub fn status(&self) -> CacheStatus {
        CacheStatus::of(&self.addrs, &self.pids)
    }

    /// Waits until [`CacheStatus::recovered`]: every node ready with no recovery running and
    /// every stripe whole in every node's view. Returns how long it waited.
    pub fn wait_recovered(&self, timeout: Duration) -> Result<Duration, Error> {
        self.wait_recovered_with(timeout, Duration::from_millis(100), |_| {})
    }

    /// As [`Self::wait_recovered`], calling `on_status` with every status read (every
    /// `poll`), e.g. to move a progress bar.
    pub fn wait_recovered_with(
        &self,
        timeout: Duration,
        poll: Duration,
        mut on_status: impl FnMut(&CacheStatus),
    ) -> Result<Duration, Error> {
        let start = Instant::now();
        loop {
            let st = self.status();
            on_status(&st);
            if st.recovered() {
                return Ok(start.elapsed());
            }
            if start.elapsed() >= timeout {
                return Err(Error::NotRecovered {
                    secs: timeout.as_secs(),
                    last: st.summary(),
                });
            }
            std::thread::sleep(poll);
        }
    }
}

impl Drop for InecCache {
    fn drop(&mut self) {
        teardown_dir(&self.dir);
    }
}

/// Stops every node of the local cache in `dir` for certain: SIGKILL to an `inec cache
/// up|restart --dir D` still running (so it starts no node after this), a [`down`], then
/// SIGKILL to any process still naming the directory's cluster file; then the directory is
/// removed. Safe to call from a signal-handling thread and more than once.
pub fn teardown_dir(dir: &Path) {
    for _ in 0..3 {
        let controllers = pids_naming(dir);
        if controllers.is_empty() {
            break;
        }
        controllers.iter().for_each(|&p| sigkill(p));
        std::thread::sleep(Duration::from_millis(20));
    }
    if dir.join(STATE_FILE).exists() {
        let _ = down(dir);
    }
    let cluster = dir.join(CLUSTER_FILE);
    for _ in 0..50 {
        let left = pids_naming(&cluster);
        if left.is_empty() {
            break;
        }
        left.iter().for_each(|&p| sigkill(p));
        std::thread::sleep(Duration::from_millis(20));
    }
    let _ = fs::remove_dir_all(dir);
}

// ---- what the nodes say ----

/// A node's health as `inec cache status` says it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub enum NodeHealth {
    /// Ready: answers and leads its stripe.
    Up,
    /// Answers, rebuilding its records (leads nothing yet).
    Recovering,
    /// Its process is gone.
    Down,
    /// Its process runs but `stats inec` got no answer.
    Unreachable,
}

impl NodeHealth {
    pub fn name(self) -> &'static str {
        match self {
            NodeHealth::Up => "up",
            NodeHealth::Recovering => "recovering",
            NodeHealth::Down => "down",
            NodeHealth::Unreachable => "unreachable",
        }
    }
}

/// One node: its process and, when it answered, its `stats inec`.
#[derive(Clone, Debug, Serialize)]
pub struct NodeStatus {
    pub id: usize,
    pub pid: u32,
    pub client: SocketAddr,
    pub health: NodeHealth,
    /// `none`, `running` or `done` (empty when the node did not answer).
    pub recovery: String,
    pub recovery_keys_done: u64,
    pub recovery_keys_total: u64,
    pub recovery_bytes: u64,
    /// Reads this node served degraded as an agent (`degraded_reads`).
    pub degraded_reads: u64,
    /// Each stripe's state in this node's view (`whole`, `recovering`, `degraded`,
    /// `unavailable`), stripe id order; empty when the node did not answer.
    pub stripe_view: Vec<String>,
    /// Every `stats inec` field.
    pub stats: BTreeMap<String, String>,
}

impl NodeStatus {
    /// Asks the node at `client` (process `pid`; 0: unknown) for its `stats inec`, in a cache
    /// of `nodes` nodes.
    pub fn of(id: usize, client: SocketAddr, pid: u32, nodes: usize) -> NodeStatus {
        let alive = pid != 0 && pid_alive(pid);
        let stats = alive
            .then(|| ask(client, "stats inec\r\n", Duration::from_secs(2)).ok())
            .flatten()
            .map(|t| parse_stats(&t))
            .filter(|s| s.contains_key("ready"))
            .unwrap_or_default();
        let num = |k: &str| stats.get(k).and_then(|v| v.parse().ok()).unwrap_or(0);
        let health = match stats.get("ready").map(String::as_str) {
            _ if !alive => NodeHealth::Down,
            None => NodeHealth::Unreachable,
            Some("1") => NodeHealth::Up,
            Some(_) => NodeHealth::Recovering,
        };
        NodeStatus {
            id,
            pid,
            client,
            health,
            recovery: stats.get("recovery").cloned().unwrap_or_default(),
            recovery_keys_done: num("recovery_keys_done"),
            recovery_keys_total: num("recovery_keys_total"),
            recovery_bytes: num("recovery_bytes"),
            degraded_reads: num("degraded_reads"),
            stripe_view: if stats.is_empty() {
                Vec::new()
            } else {
                (0..nodes)
                    .map(|i| {
                        let v = stats.get(&format!("stripe_{i}"));
                        v.and_then(|v| v.split(',').next())
                            .unwrap_or("")
                            .to_string()
                    })
                    .collect()
            },
            stats,
        }
    }
}

/// One Mem Stripe as the first ready node sees it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct StripeStatus {
    pub id: usize,
    /// `whole`, `recovering`, `degraded` or `unavailable`.
    pub state: String,
    /// The acting agent (`None`: no member can lead it).
    pub agent: Option<usize>,
}

/// The whole cache at one moment.
#[derive(Clone, Debug, Serialize)]
pub struct CacheStatus {
    pub nodes: Vec<NodeStatus>,
    pub stripes: Vec<StripeStatus>,
}

impl CacheStatus {
    /// Asks every node (client addresses and pids in node-id order).
    pub fn of(addrs: &[SocketAddr], pids: &[u32]) -> CacheStatus {
        let n = addrs.len();
        let nodes: Vec<NodeStatus> = addrs
            .iter()
            .enumerate()
            .map(|(id, &client)| NodeStatus::of(id, client, pids.get(id).copied().unwrap_or(0), n))
            .collect();
        // The stripes as the first ready node sees them (else any node that answered).
        let viewer = nodes
            .iter()
            .find(|n| n.health == NodeHealth::Up)
            .or_else(|| nodes.iter().find(|n| !n.stats.is_empty()));
        let stripes = (0..n)
            .map(|id| {
                let v = viewer.and_then(|n| n.stats.get(&format!("stripe_{id}")));
                let mut parts = v.map(|v| v.split(',')).into_iter().flatten();
                let state = parts.next().unwrap_or("unknown").to_string();
                let agent = parts
                    .find_map(|p| p.strip_prefix("agent="))
                    .and_then(|a| a.parse().ok());
                StripeStatus { id, state, agent }
            })
            .collect();
        CacheStatus { nodes, stripes }
    }

    /// Keys rebuilt and to rebuild, summed over the nodes that recover or recovered.
    pub fn recovery_progress(&self) -> (u64, u64) {
        self.nodes
            .iter()
            .filter(|n| n.recovery == "running" || n.recovery == "done")
            .fold((0, 0), |(d, t), n| {
                (d + n.recovery_keys_done, t + n.recovery_keys_total)
            })
    }

    /// Every node up (ready, no recovery running) and every stripe whole in every node's view.
    pub fn recovered(&self) -> bool {
        self.nodes.iter().all(|n| {
            n.health == NodeHealth::Up
                && n.recovery != "running"
                && !n.stripe_view.is_empty()
                && n.stripe_view.iter().all(|s| s == "whole")
        })
    }

    /// Values stored split that their homes will write whole again (`whole_split_values`,
    /// summed over the nodes that answered): with `--layout whole` or `auto`, writes made while
    /// a member of their stripe is down go split, and the homes rewrite them once it is back.
    pub fn split_values_waiting(&self) -> u64 {
        self.nodes
            .iter()
            .filter_map(|n| n.stats.get("whole_split_values"))
            .filter_map(|v| v.parse::<u64>().ok())
            .sum()
    }

    /// Stripes per state, e.g. `[("degraded", 3), ("whole", 6)]`.
    pub fn stripe_counts(&self) -> Vec<(String, usize)> {
        let mut m: BTreeMap<String, usize> = BTreeMap::new();
        for s in &self.stripes {
            *m.entry(s.state.clone()).or_default() += 1;
        }
        m.into_iter().collect()
    }

    /// Degraded reads served, summed over the nodes that answered.
    pub fn degraded_reads(&self) -> u64 {
        self.nodes.iter().map(|n| n.degraded_reads).sum()
    }

    /// One line: node healths, stripe states, recovery progress.
    pub fn summary(&self) -> String {
        let nodes: Vec<String> = self
            .nodes
            .iter()
            .map(|n| format!("{}:{}", n.id, n.health.name()))
            .collect();
        let stripes: Vec<String> = self
            .stripe_counts()
            .iter()
            .map(|(s, c)| format!("{c} {s}"))
            .collect();
        let (d, t) = self.recovery_progress();
        let split = match self.split_values_waiting() {
            0 => String::new(),
            n => format!("; {n} split values to write whole again"),
        };
        format!(
            "nodes {}; stripes {}; recovery {d}/{t} keys{split}",
            nodes.join(" "),
            stripes.join(", ")
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_and_flags_round_trip() {
        let o = CacheOptions::default();
        assert_eq!(
            (o.memory_mib, o.code.as_str(), o.threads, o.workers),
            (64, "rs:6,3", None, 8)
        );
        let mut args = vec!["serve".to_string()];
        args.extend(o.to_args());
        #[derive(clap::Parser)]
        struct Only {
            #[command(flatten)]
            o: CacheOptions,
        }
        let back = <Only as clap::Parser>::parse_from(args).o;
        assert_eq!(back, o);
    }

    #[test]
    fn cluster_files_round_trip() {
        let m = vec![Member {
            id: 0,
            client: "127.0.0.1:1".parse().unwrap(),
            peer: "127.0.0.1:2".parse().unwrap(),
        }];
        assert_eq!(parse_cluster(&cluster_text(&m)).unwrap(), m);
        assert!(parse_cluster("node 1 a b").is_err());
        // A file of the builds whose engines had ports of their own: told, not misread.
        let old = parse_cluster("node 0 127.0.0.1:1 127.0.0.1:2 127.0.0.1:3")
            .unwrap_err()
            .to_string();
        assert!(old.contains("no engine column"), "{old}");
    }
}
