//! Server processes the benchmark starts and stops itself: memcached 1.6, the baseline.

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
        if !Self::available() {
            return Err(ServerError::Missing(MEMCACHED.into()));
        }
        let mut last = None;
        for _attempt in 0..5 {
            let port = free_port().map_err(|source| ServerError::Spawn {
                what: "a free port".into(),
                source,
            })?;
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
            // The port was taken meanwhile, or it is slow: try another.
            last = Some(m);
        }
        drop(last);
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
    pub fn start(o: &InecOptions) -> Result<InecCache, ServerError> {
        static SEQ: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let dir = std::env::temp_dir().join(format!(
            "inec-bench-cache-{}-{}",
            std::process::id(),
            SEQ.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
        ));
        let _ = std::fs::remove_dir_all(&dir);
        let what = format!("inec cache up ({} {} {})", o.code, o.scheme, o.mode);
        let mut cmd = Command::new(&o.exe);
        cmd.args(["cache", "up", "--dir"])
            .arg(&dir)
            .args(["--code", &o.code, "--scheme", &o.scheme, "--mode", &o.mode])
            .args(["-m", &o.memory_mib.to_string()]);
        if let Some(n) = o.nodes {
            cmd.args(["--nodes", &n.to_string()]);
        }
        let out = cmd
            .stdin(Stdio::null())
            .output()
            .map_err(|source| ServerError::Spawn {
                what: what.clone(),
                source,
            })?;
        // From here on the directory may hold a running cluster: stop it on any error.
        let mut cache = InecCache {
            exe: o.exe.clone(),
            dir: dir.clone(),
            addrs: Vec::new(),
            pids: Vec::new(),
        };
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
        let state = std::fs::read_to_string(dir.join("cache.json")).unwrap_or_default();
        cache.pids = serde_json::from_str::<serde_json::Value>(&state)
            .ok()
            .and_then(|v| {
                v.get("pids")?
                    .as_array()?
                    .iter()
                    .map(|p| p.as_u64().map(|p| p as u32))
                    .collect()
            })
            .unwrap_or_default();
        Ok(cache)
    }

    /// Client addresses in node-id order.
    pub fn addrs(&self) -> &[SocketAddr] {
        &self.addrs
    }

    pub fn pids(&self) -> &[u32] {
        &self.pids
    }
}

impl Drop for InecCache {
    fn drop(&mut self) {
        let _ = Command::new(&self.exe)
            .args(["cache", "down", "--dir"])
            .arg(&self.dir)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
