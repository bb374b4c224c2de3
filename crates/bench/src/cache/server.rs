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
