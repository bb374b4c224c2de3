//! A one-member etcd for a local cache (`inec cache up --coordinator local`): Debian's
//! `etcd-server`, its data in the cache's directory, on loopback, or in its own network
//! namespace on the cluster's bridge with `--netns` (`netns::add_coordinator`).

use std::fs;
use std::net::{SocketAddr, TcpStream};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::process::{command_in, free_port, pid_alive, sigkill, spawn_logged};
use crate::{netns, Error};

/// The program `--coordinator local` runs.
pub const ETCD: &str = "etcd";

/// A started etcd.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LocalEtcd {
    pub pid: u32,
    /// The address its clients connect to.
    pub client: SocketAddr,
}

impl LocalEtcd {
    /// `--coordinator` for the nodes: `etcd://HOST:PORT`.
    pub fn url(&self) -> String {
        format!("etcd://{}", self.client)
    }
}

/// Whether `etcd` can be run here.
pub fn installed() -> bool {
    Command::new(ETCD)
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// Starts etcd with its data in `dir/etcd` (emptied first) and its log in `dir/etcd.log`, in
/// namespace `netns::COORDINATOR_NS` when `in_netns`; waits until it accepts connections.
pub fn start(dir: &Path, in_netns: bool) -> Result<LocalEtcd, Error> {
    if !installed() {
        return Err(Error::Usage(
            "--coordinator local runs etcd, which is not installed (Debian package \
             etcd-server: apt-get install etcd-server)"
                .into(),
        ));
    }
    let data = dir.join("etcd");
    let _ = fs::remove_dir_all(&data);
    let (client, peer) = if in_netns {
        let ip = netns::COORDINATOR_ADDR;
        (
            SocketAddr::new(ip.parse().expect("an address"), 2379),
            "127.0.0.1:2380".to_string(),
        )
    } else {
        let mut held = Vec::new();
        let (c, p) = (free_port(&mut held)?, free_port(&mut held)?);
        drop(held);
        (
            SocketAddr::from(([127, 0, 0, 1], c)),
            format!("127.0.0.1:{p}"),
        )
    };
    let mut cmd = command_in(in_netns.then_some(netns::COORDINATOR_NS), ETCD);
    let client_url = format!("http://{client}");
    let peer_url = format!("http://{peer}");
    cmd.arg("--name")
        .arg("inec")
        .arg("--data-dir")
        .arg(&data)
        .args(["--listen-client-urls", &client_url])
        .args(["--advertise-client-urls", &client_url])
        .args(["--listen-peer-urls", &peer_url])
        .args(["--initial-advertise-peer-urls", &peer_url])
        .args(["--initial-cluster", &format!("inec={peer_url}")])
        .args(["--initial-cluster-state", "new"])
        .args(["--log-level", "warn"]);
    let pid = spawn_logged(&mut cmd, &dir.join("etcd.log"), "etcd")?;
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        if TcpStream::connect_timeout(&client, Duration::from_millis(200)).is_ok() {
            return Ok(LocalEtcd { pid, client });
        }
        if !pid_alive(pid) || Instant::now() >= deadline {
            sigkill(pid);
            let tail = fs::read_to_string(dir.join("etcd.log")).unwrap_or_default();
            let tail: String = tail.lines().rev().take(10).collect::<Vec<_>>().join("\n");
            return Err(Error::Failed {
                what: format!("etcd on {client}"),
                detail: format!("it did not accept connections; the end of its log:\n{tail}"),
            });
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}
