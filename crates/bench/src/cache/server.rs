//! Server processes the benchmark starts and stops itself: memcached 1.6, the baseline, and
//! inec local caches ([`InecCache`]), which can also be crashed, restarted and watched while
//! they recover (for `inec demo` and failure runs).

use std::collections::BTreeMap;
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Where the Debian package puts memcached.
pub const MEMCACHED: &str = "/usr/bin/memcached";

/// Errors of starting a server.
#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    #[error("{0} is missing (Debian package memcached; scripts/test-all installs it)")]
    Missing(String),
    #[error("starting {what}: {source}")]
    Spawn {
        what: String,
        source: std::io::Error,
    },
    #[error("{what} did not accept connections within {secs} s")]
    NotReady { what: String, secs: u64 },
    #[error("reading {what}'s version: {detail}")]
    Version { what: String, detail: String },
}

/// Settings of a memcached the benchmark starts.
#[derive(Clone, Debug)]
pub struct MemcachedOptions {
    /// `-m`: memory for items, MiB.
    pub memory_mib: usize,
    /// `-t`: worker threads.
    pub threads: usize,
    /// `-c`: maximum simultaneous connections.
    pub max_connections: usize,
    /// `-I`: item size limit, bytes.
    pub item_size_max_bytes: usize,
}

impl Default for MemcachedOptions {
    fn default() -> Self {
        MemcachedOptions {
            memory_mib: 64,
            threads: 4,
            max_connections: 1024,
            item_size_max_bytes: 1 << 20,
        }
    }
}

/// A memcached on a free loopback port, killed (by its pid) and reaped when dropped.
#[derive(Debug)]
pub struct Memcached {
    child: Child,
    addr: SocketAddr,
    options: MemcachedOptions,
}

impl Drop for Memcached {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn is_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .map(|o| o.stdout.trim_ascii() == b"0")
        .unwrap_or(false)
}

/// A loopback port nobody listens on right now.
pub fn free_port() -> std::io::Result<u16> {
    Ok(TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

/// Waits until `addr` accepts a connection, or `child` exits (false), or the deadline.
pub fn wait_ready(addr: SocketAddr, child: &mut Child, deadline: Instant) -> bool {
    while Instant::now() < deadline {
        if TcpStream::connect_timeout(&addr, Duration::from_millis(200)).is_ok() {
            return true;
        }
        if matches!(child.try_wait(), Ok(Some(_))) {
            return false;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    false
}

impl Memcached {
    /// Whether the memcached binary is installed.
    pub fn available() -> bool {
        Path::new(MEMCACHED).exists()
    }

    /// Starts memcached on a free loopback port (TCP only, `-U 0`).
    pub fn start(options: &MemcachedOptions) -> Result<Memcached, ServerError> {
        for _attempt in 0..5 {
            let port = free_port().map_err(|source| ServerError::Spawn {
                what: "a free port".into(),
                source,
            })?;
            match Self::start_on(options, port) {
                // The port was taken meanwhile, or it is slow: try another.
                Err(ServerError::NotReady { .. }) => continue,
                r => return r,
            }
        }
        Err(ServerError::NotReady {
            what: MEMCACHED.into(),
            secs: 10,
        })
    }

    /// Starts memcached on loopback port `port` (TCP only, `-U 0`), e.g. again on the port
    /// of one that was killed.
    pub fn start_on(options: &MemcachedOptions, port: u16) -> Result<Memcached, ServerError> {
        if !Self::available() {
            return Err(ServerError::Missing(MEMCACHED.into()));
        }
        let mut cmd = Command::new(MEMCACHED);
        cmd.args(["-l", "127.0.0.1", "-U", "0"])
            .args(["-p", &port.to_string()])
            .args(["-m", &options.memory_mib.to_string()])
            .args(["-t", &options.threads.to_string()])
            .args(["-c", &options.max_connections.to_string()])
            .args(["-I", &options.item_size_max_bytes.to_string()]);
        if is_root() {
            cmd.args(["-u", "root"]);
        }
        let child = cmd
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|source| ServerError::Spawn {
                what: MEMCACHED.into(),
                source,
            })?;
        let addr = SocketAddr::from(([127, 0, 0, 1], port));
        let mut m = Memcached {
            child,
            addr,
            options: options.clone(),
        };
        if wait_ready(addr, &mut m.child, Instant::now() + Duration::from_secs(10)) {
            return Ok(m);
        }
        Err(ServerError::NotReady {
            what: MEMCACHED.into(),
            secs: 10,
        })
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    pub fn options(&self) -> &MemcachedOptions {
        &self.options
    }

    /// The version line's version (`memcached -V`).
    pub fn version() -> Result<String, ServerError> {
        let out = Command::new(MEMCACHED)
            .arg("-V")
            .output()
            .map_err(|source| ServerError::Spawn {
                what: MEMCACHED.into(),
                source,
            })?;
        let s = String::from_utf8_lossy(&out.stdout);
        s.split_whitespace()
            .nth(1)
            .map(str::to_string)
            .ok_or_else(|| ServerError::Version {
                what: MEMCACHED.into(),
                detail: s.trim().to_string(),
            })
    }
}

/// Resident memory of a process, bytes (from `/proc/PID/status`).
pub fn resident_bytes(pid: u32) -> Option<u64> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = s.lines().find(|l| l.starts_with("VmRSS:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

/// Settings of an inec local cache the benchmark starts (`inec cache up`).
#[derive(Clone, Debug)]
pub struct InecOptions {
    /// The `inec` executable.
    pub exe: std::path::PathBuf,
    pub code: String,
    pub scheme: String,
    /// `coherent` or `incoherent`.
    pub mode: String,
    /// `-m` per node, MiB.
    pub memory_mib: usize,
    /// Nodes (`None`: as many as the code has chunks).
    pub nodes: Option<usize>,
}

/// An inec local cache started with `inec cache up` in a temporary directory, stopped with
/// `inec cache down` (and its directory removed) when dropped.
#[derive(Debug)]
pub struct InecCache {
    exe: std::path::PathBuf,
    dir: std::path::PathBuf,
    /// Client addresses in node-id order (node s is the agent of Mem Stripe s).
    addrs: Vec<SocketAddr>,
    pids: Vec<u32>,
}

impl InecCache {
    /// Starts a cache in a fresh temporary directory.
    pub fn start(o: &InecOptions) -> Result<InecCache, ServerError> {
        static SEQ: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let dir = std::env::temp_dir().join(format!(
            "inec-bench-cache-{}-{}",
            std::process::id(),
            SEQ.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
        ));
        Self::start_in(o, &dir, &[])
    }

    /// Starts a cache whose state (addresses, pids, logs) lives in `dir` (emptied first and
    /// removed on drop), passing `extra` to `inec cache up` (e.g. `--down-after-ms 500`).
    /// Knowing `dir` before the start lets a signal handler stop the nodes with
    /// [`teardown_dir`] even while `inec cache up` runs.
    pub fn start_in(
        o: &InecOptions,
        dir: &Path,
        extra: &[String],
    ) -> Result<InecCache, ServerError> {
        let dir = dir.to_path_buf();
        let _ = std::fs::remove_dir_all(&dir);
        let what = format!("inec cache up ({} {} {})", o.code, o.scheme, o.mode);
        let mut cmd = Command::new(&o.exe);
        cmd.args(["cache", "up", "--dir"])
            .arg(&dir)
            .args(["--code", &o.code, "--scheme", &o.scheme, "--mode", &o.mode])
            .args(["-m", &o.memory_mib.to_string()])
            .args(extra);
        if let Some(n) = o.nodes {
            cmd.args(["--nodes", &n.to_string()]);
        }
        // From here on the directory may hold a running cluster: the drop stops it on any
        // error.
        let mut cache = InecCache {
            exe: o.exe.clone(),
            dir: dir.clone(),
            addrs: Vec::new(),
            pids: Vec::new(),
        };
        let out = cmd
            .stdin(Stdio::null())
            .output()
            .map_err(|source| ServerError::Spawn {
                what: what.clone(),
                source,
            })?;
        if !out.status.success() {
            return Err(ServerError::Version {
                what,
                detail: String::from_utf8_lossy(&out.stderr).trim().to_string(),
            });
        }
        let text = std::fs::read_to_string(dir.join("cluster.txt")).unwrap_or_default();
        let mut nodes: Vec<(usize, SocketAddr)> = text
            .lines()
            .filter_map(|l| {
                let mut t = l.split_whitespace();
                (t.next()? == "node").then_some(())?;
                Some((t.next()?.parse().ok()?, t.next()?.parse().ok()?))
            })
            .collect();
        nodes.sort_unstable();
        cache.addrs = nodes.into_iter().map(|(_, a)| a).collect();
        if cache.addrs.is_empty() {
            return Err(ServerError::Version {
                what,
                detail: format!("no node in {}", dir.join("cluster.txt").display()),
            });
        }
        cache.pids = read_pids(&dir);
        Ok(cache)
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

    fn check_node(&self, node: usize) -> Result<(), ControlError> {
        if node >= self.pids.len() {
            return Err(ControlError::NoNode {
                node,
                nodes: self.pids.len(),
            });
        }
        Ok(())
    }

    /// Kills node `node` with SIGKILL (a crash: no goodbye to its peers) and waits until its
    /// process is gone.
    pub fn kill(&mut self, node: usize) -> Result<(), ControlError> {
        self.check_node(node)?;
        let pid = self.pids[node];
        sigkill(pid);
        let deadline = Instant::now() + Duration::from_secs(5);
        while pid_alive(pid) {
            if Instant::now() >= deadline {
                return Err(ControlError::StillRunning { node, pid });
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        Ok(())
    }

    /// Restarts node `node` with `inec cache restart` (killing it first if it runs): it starts
    /// empty and recovers in the background. Returns when it answers; its new pid is in
    /// [`Self::pids`].
    pub fn restart(&mut self, node: usize) -> Result<(), ControlError> {
        self.check_node(node)?;
        let what = format!("inec cache restart {node}");
        let out = Command::new(&self.exe)
            .args(["cache", "restart", "--dir"])
            .arg(&self.dir)
            .arg(node.to_string())
            .stdin(Stdio::null())
            .output()
            .map_err(|source| ControlError::Io {
                what: what.clone(),
                source,
            })?;
        let pids = read_pids(&self.dir);
        if pids.len() == self.pids.len() {
            self.pids = pids;
        }
        if !out.status.success() {
            return Err(ControlError::Command {
                what,
                detail: String::from_utf8_lossy(&out.stderr).trim().to_string(),
            });
        }
        Ok(())
    }

    /// Every node's health, recovery progress and view of the stripes, from `stats inec`
    /// (a node whose process is gone is `Down` without asking it).
    pub fn status(&self) -> CacheStatus {
        let timeout = Duration::from_secs(2);
        let nodes: Vec<NodeStatus> = self
            .addrs
            .iter()
            .enumerate()
            .map(|(id, &client)| {
                let pid = self.pids.get(id).copied().unwrap_or(0);
                let alive = pid != 0 && pid_alive(pid);
                let stats = if alive {
                    ask(client, "stats inec\r\n", timeout)
                        .ok()
                        .map(|t| parse_stats(&t))
                        .filter(|s| s.contains_key("ready"))
                } else {
                    None
                };
                let num = |s: &BTreeMap<String, String>, k: &str| {
                    s.get(k).and_then(|v| v.parse().ok()).unwrap_or(0)
                };
                match stats {
                    None => NodeStatus {
                        id,
                        pid,
                        client,
                        health: if alive {
                            NodeHealth::Unreachable
                        } else {
                            NodeHealth::Down
                        },
                        recovery: String::new(),
                        recovery_keys_done: 0,
                        recovery_keys_total: 0,
                        recovery_bytes: 0,
                        degraded_reads: 0,
                        stripe_view: Vec::new(),
                        stats: BTreeMap::new(),
                    },
                    Some(s) => NodeStatus {
                        id,
                        pid,
                        client,
                        health: if s.get("ready").map(String::as_str) == Some("1") {
                            NodeHealth::Up
                        } else {
                            NodeHealth::Recovering
                        },
                        recovery: s.get("recovery").cloned().unwrap_or_default(),
                        recovery_keys_done: num(&s, "recovery_keys_done"),
                        recovery_keys_total: num(&s, "recovery_keys_total"),
                        recovery_bytes: num(&s, "recovery_bytes"),
                        degraded_reads: num(&s, "degraded_reads"),
                        stripe_view: (0..self.addrs.len())
                            .map(|i| {
                                s.get(&format!("stripe_{i}"))
                                    .and_then(|v| v.split(',').next())
                                    .unwrap_or("")
                                    .to_string()
                            })
                            .collect(),
                        stats: s,
                    },
                }
            })
            .collect();
        // The stripes as the first ready node sees them (else any node that answered).
        let viewer = nodes
            .iter()
            .find(|n| n.health == NodeHealth::Up)
            .or_else(|| nodes.iter().find(|n| !n.stats.is_empty()));
        let stripes = (0..self.addrs.len())
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

    /// Waits until [`CacheStatus::recovered`]: every node ready with no recovery running and
    /// every stripe whole in every node's view. Returns how long it waited.
    pub fn wait_recovered(&self, timeout: Duration) -> Result<Duration, ControlError> {
        self.wait_recovered_with(timeout, Duration::from_millis(100), |_| {})
    }

    /// As [`Self::wait_recovered`], calling `on_status` with every status read (every
    /// `poll`), e.g. to move a progress bar.
    pub fn wait_recovered_with(
        &self,
        timeout: Duration,
        poll: Duration,
        mut on_status: impl FnMut(&CacheStatus),
    ) -> Result<Duration, ControlError> {
        let start = Instant::now();
        loop {
            let st = self.status();
            on_status(&st);
            if st.recovered() {
                return Ok(start.elapsed());
            }
            if start.elapsed() >= timeout {
                return Err(ControlError::NotRecovered {
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
        teardown_dir(&self.exe, &self.dir);
    }
}

// ---- controlling a running inec cache: kill, restart, status, recovery ----

/// Errors of controlling a running inec cache.
#[derive(Debug, thiserror::Error)]
pub enum ControlError {
    #[error("no node {node} (the cache has {nodes})")]
    NoNode { node: usize, nodes: usize },
    #[error("{what}: {source}")]
    Io {
        what: String,
        source: std::io::Error,
    },
    #[error("{what} failed: {detail}")]
    Command { what: String, detail: String },
    #[error("node {node} (pid {pid}) still runs after SIGKILL")]
    StillRunning { node: usize, pid: u32 },
    #[error("the cache did not recover within {secs} s (last status: {last})")]
    NotRecovered { secs: u64, last: String },
}

/// A node's health as `inec cache status` says it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
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
#[derive(Clone, Debug, serde::Serialize)]
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

/// One Mem Stripe as the first ready node sees it.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct StripeStatus {
    pub id: usize,
    /// `whole`, `recovering`, `degraded` or `unavailable`.
    pub state: String,
    /// The acting agent (`None`: no member can lead it).
    pub agent: Option<usize>,
}

/// The whole cache at one moment.
#[derive(Clone, Debug, serde::Serialize)]
pub struct CacheStatus {
    pub nodes: Vec<NodeStatus>,
    pub stripes: Vec<StripeStatus>,
}

impl CacheStatus {
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
        format!(
            "nodes {}; stripes {}; recovery {d}/{t} keys",
            nodes.join(" "),
            stripes.join(", ")
        )
    }
}

/// Whether a process runs (exists and is not a zombie).
pub fn pid_alive(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(s) => !s
            .rsplit(')')
            .next()
            .is_some_and(|rest| rest.trim_start().starts_with('Z')),
        Err(_) => false,
    }
}

/// Sends SIGKILL to `pid` (no error if it is gone already).
pub fn sigkill(pid: u32) {
    if let Some(p) = rustix::process::Pid::from_raw(pid as i32) {
        let _ = rustix::process::kill_process(p, rustix::process::Signal::KILL);
    }
}

/// Sends one request to a memcached-protocol server and reads the reply up to its first line
/// that is not `STAT …` (so `END` of `stats`, or a one-line reply).
pub fn ask(addr: SocketAddr, request: &str, timeout: Duration) -> std::io::Result<String> {
    use std::io::{BufRead, BufReader, Write};
    let mut s = TcpStream::connect_timeout(&addr, timeout)?;
    s.set_read_timeout(Some(timeout))?;
    s.set_write_timeout(Some(timeout))?;
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

/// The `STAT name value` lines of a `stats` reply.
pub fn parse_stats(text: &str) -> BTreeMap<String, String> {
    text.lines()
        .filter_map(|l| {
            let mut t = l.trim_end().splitn(3, ' ');
            (t.next()? == "STAT").then_some(())?;
            Some((t.next()?.to_string(), t.next().unwrap_or("").to_string()))
        })
        .collect()
}

/// Processes whose command line names `needle` (one argument equal to it): the nodes of one
/// cluster directory, found even when their pids were never recorded.
pub fn pids_naming(needle: &Path) -> Vec<u32> {
    let needle = needle.as_os_str().as_encoded_bytes();
    let me = std::process::id();
    let Ok(rd) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    rd.filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|&pid| pid != me)
        .filter(|pid| {
            std::fs::read(format!("/proc/{pid}/cmdline"))
                .is_ok_and(|c| c.split(|&b| b == 0).any(|arg| arg == needle))
        })
        .collect()
}

/// Stops every node of the local cache in `dir` for certain: SIGKILL to an `inec cache
/// up|restart --dir D` still running (so it starts no node after this), `inec cache down`, then
/// SIGKILL to any process still naming the directory's cluster file; then the directory is
/// removed. Safe to call from a signal-handling thread and more than once.
pub fn teardown_dir(exe: &Path, dir: &Path) {
    for _ in 0..3 {
        let controllers = pids_naming(dir);
        if controllers.is_empty() {
            break;
        }
        controllers.iter().for_each(|&p| sigkill(p));
        std::thread::sleep(Duration::from_millis(20));
    }
    if dir.join("cache.json").exists() {
        let _ = Command::new(exe)
            .args(["cache", "down", "--dir"])
            .arg(dir)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
    }
    let cluster = dir.join("cluster.txt");
    for _ in 0..50 {
        let left = pids_naming(&cluster);
        if left.is_empty() {
            break;
        }
        left.iter().for_each(|&p| sigkill(p));
        std::thread::sleep(Duration::from_millis(20));
    }
    let _ = std::fs::remove_dir_all(dir);
}

fn read_pids(dir: &Path) -> Vec<u32> {
    let state = std::fs::read_to_string(dir.join("cache.json")).unwrap_or_default();
    serde_json::from_str::<serde_json::Value>(&state)
        .ok()
        .and_then(|v| {
            v.get("pids")?
                .as_array()?
                .iter()
                .map(|p| p.as_u64().map(|p| p as u32))
                .collect()
        })
        .unwrap_or_default()
}
