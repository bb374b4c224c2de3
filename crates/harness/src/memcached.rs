//! memcached 1.6, the baseline of the benchmarks and the reference of the tests, started on a
//! loopback port and killed when dropped; and the two requests every supervisor sends a
//! memcached-protocol server: [`ask`] and [`parse_stats`].

use std::collections::BTreeMap;
use std::net::{SocketAddr, TcpStream};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::Error;

/// Where the Debian package puts memcached.
pub const MEMCACHED: &str = "/usr/bin/memcached";

/// Settings of a memcached to start.
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

/// A memcached on a loopback port, killed (by its pid) and reaped when dropped.
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
    rustix::process::geteuid().is_root()
}

/// Waits until the memcached `child` answers on `addr` (true), or exits, or the deadline
/// passes. The answer must be its own: `stats` gives its pid. (A process that lost the race
/// for the port exits, but another listener on that port, such as another test's memcached
/// started on it again, would accept the connection.)
pub fn wait_ready(addr: SocketAddr, child: &mut Child, deadline: Instant) -> bool {
    while Instant::now() < deadline {
        if serves_pid(addr) == Some(child.id()) {
            return true;
        }
        if matches!(child.try_wait(), Ok(Some(_))) {
            return false;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    false
}

/// The pid a memcached on `addr` reports in `stats`, if one answers.
fn serves_pid(addr: SocketAddr) -> Option<u32> {
    use std::io::{BufRead, BufReader, Write};
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_millis(200)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(1))).ok()?;
    s.write_all(b"stats\r\n").ok()?;
    let mut pid = None;
    for line in BufReader::new(s).lines() {
        let line = line.ok()?;
        if line == "END" {
            return pid;
        }
        if let Some(p) = line.strip_prefix("STAT pid ") {
            pid = p.trim().parse().ok();
        }
    }
    None
}

impl Memcached {
    /// Whether the memcached binary is installed.
    pub fn available() -> bool {
        Path::new(MEMCACHED).exists()
    }

    /// For a test: a memcached with the default options, or `None` when it is not installed
    /// and this machine may skip the test ([`crate::skip::skip_or_fail`]; the test returns).
    #[track_caller]
    pub fn for_test() -> Option<Memcached> {
        if !Self::available() {
            crate::skip::skip_or_fail(MEMCACHED, "Debian package memcached");
            return None;
        }
        Some(Self::start(&MemcachedOptions::default()).expect("start memcached"))
    }

    /// Starts memcached on a free loopback port (TCP only, `-U 0`).
    pub fn start(options: &MemcachedOptions) -> Result<Memcached, Error> {
        for _attempt in 0..5 {
            let port = crate::process::free_port(&mut Vec::new())?;
            match Self::start_on(options, port) {
                // The port was taken meanwhile, or it is slow: try another.
                Err(Error::NotReady { .. }) => continue,
                r => return r,
            }
        }
        Err(Error::NotReady {
            what: MEMCACHED.into(),
            secs: 10,
        })
    }

    /// Starts memcached on loopback port `port` (TCP only, `-U 0`), e.g. again on the port
    /// of one that was killed.
    pub fn start_on(options: &MemcachedOptions, port: u16) -> Result<Memcached, Error> {
        if !Self::available() {
            return Err(Error::Missing(MEMCACHED.into()));
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
            .map_err(|source| Error::Io {
                what: format!("starting {MEMCACHED}"),
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
        Err(Error::NotReady {
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
    pub fn version() -> Result<String, Error> {
        let out = Command::new(MEMCACHED)
            .arg("-V")
            .output()
            .map_err(|source| Error::Io {
                what: format!("running {MEMCACHED} -V"),
                source,
            })?;
        let s = String::from_utf8_lossy(&out.stdout);
        s.split_whitespace()
            .nth(1)
            .map(str::to_string)
            .ok_or_else(|| Error::Failed {
                what: format!("reading {MEMCACHED}'s version"),
                detail: s.trim().to_string(),
            })
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
