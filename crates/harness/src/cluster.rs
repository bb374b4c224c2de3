//! Clusters of engine nodes (`inec node` processes) on this machine, on loopback or in
//! network namespaces: `inec cluster up|down|status`, and the cluster `inec bench primitives
//! --dir` runs on. The state file `<dir>/cluster.json` holds every node's id, address, process
//! id and network namespace, and the `tc` rate of its link.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use engine::control::Request;
use engine::{runner_id, NodeId, PlanRunner};
use serde::{Deserialize, Serialize};

use crate::process::{pid_alive, sigkill, wait_gone};
use crate::{netns, Error};

/// The file name inside the cluster's directory.
pub const STATE_FILE: &str = "cluster.json";

/// The port every node listens on inside its namespace.
const NETNS_PORT: u16 = 7100;

/// One node of a cluster.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClusterNode {
    pub id: NodeId,
    /// The peer port's address.
    pub addr: String,
    pub pid: u32,
    /// The network namespace the node runs in, if any.
    pub netns: Option<String>,
}

/// The state of a cluster.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClusterState {
    pub nodes: Vec<ClusterNode>,
    /// The `tc tbf` rate of every node's link, if limited.
    pub link_rate: Option<String>,
}

impl ClusterState {
    /// Reads `<dir>/cluster.json`.
    pub fn load(dir: &Path) -> Result<ClusterState, Error> {
        let path = dir.join(STATE_FILE);
        let text = fs::read_to_string(&path).map_err(|source| {
            Error::io(format!(
                "no cluster state at {} (is a cluster up?)",
                path.display()
            ))(source)
        })?;
        serde_json::from_str(&text)
            .map_err(|e| Error::Other(format!("bad cluster state {}: {e}", path.display())))
    }

    /// Writes `<dir>/cluster.json`.
    pub fn save(&self, dir: &Path) -> Result<(), Error> {
        let path = dir.join(STATE_FILE);
        let text = serde_json::to_string_pretty(self).expect("the state serializes");
        fs::write(&path, text).map_err(Error::io(format!("writing {}", path.display())))
    }

    /// `(id, address)` of every node.
    pub fn addrs(&self) -> Vec<(NodeId, String)> {
        self.nodes.iter().map(|n| (n.id, n.addr.clone())).collect()
    }

    /// `(id, address)` of every node whose process runs.
    pub fn live_addrs(&self) -> Vec<(NodeId, String)> {
        let live = self.nodes.iter().filter(|n| pid_alive(n.pid));
        live.map(|n| (n.id, n.addr.clone())).collect()
    }

    /// How the benchmarks name this cluster's transport.
    pub fn transport(&self) -> String {
        match &self.link_rate {
            Some(r) => format!("tcp-netns-{r}"),
            None if self.nodes.iter().any(|n| n.netns.is_some()) => "tcp-netns".into(),
            None => "tcp-loopback-processes".into(),
        }
    }
}

/// What `inec cluster up` starts.
#[derive(Clone, Debug)]
pub struct UpConfig {
    /// The `inec` executable each node runs (`inec node`).
    pub exe: PathBuf,
    pub dir: PathBuf,
    pub nodes: usize,
    /// Each node in its own network namespace behind a veth pair (root).
    pub netns: bool,
    /// With `netns`: the `tc tbf` rate of every link.
    pub link_rate: Option<String>,
    pub ready_timeout: Duration,
}

/// Starts the nodes, waits until each is ready, writes the state file, connects the nodes to
/// each other and pings each. On failure every node started and every namespace made is
/// removed.
pub fn up(a: &UpConfig) -> Result<ClusterState, Error> {
    let dir = &a.dir;
    if dir.join(STATE_FILE).exists() {
        return Err(Error::Usage(format!(
            "a cluster is already up in {} (run `inec cluster down` first)",
            dir.display()
        )));
    }
    if a.nodes == 0 || a.nodes > 200 {
        return Err(Error::Usage(format!(
            "bad --nodes {}: must be between 1 and 200",
            a.nodes
        )));
    }
    fs::create_dir_all(dir).map_err(Error::io(format!("creating {}", dir.display())))?;
    let made = if a.netns {
        Some(netns::setup(a.nodes, a.link_rate.as_deref())?)
    } else {
        None
    };
    let mut children: Vec<Child> = Vec::new();
    start_nodes(a, &mut children).map_err(|e| {
        // Leave nothing behind: the nodes started so far and the namespaces.
        let pids: Vec<u32> = children.iter().map(|c| c.id()).collect();
        for c in &mut children {
            let _ = c.kill();
            let _ = c.wait();
        }
        if let Some(made) = &made {
            made.remove();
        }
        let _ = fs::remove_file(dir.join(STATE_FILE));
        e.context(format!(
            "cluster up failed; stopped the nodes it had started (pids {pids:?}){}",
            if made.is_some() {
                " and removed its network namespaces"
            } else {
                ""
            }
        ))
    })
}

fn start_nodes(a: &UpConfig, children: &mut Vec<Child>) -> Result<ClusterState, Error> {
    let dir = &a.dir;
    let deadline = Instant::now() + a.ready_timeout;
    let mut nodes = Vec::new();
    for i in 0..a.nodes {
        let log_path = dir.join(format!("node-{i}.log"));
        let log = fs::File::create(&log_path).map_err(Error::io("creating a node log"))?;
        let stdout = log.try_clone().map_err(Error::io("creating a node log"))?;
        let listen = if a.netns {
            format!("{}:{NETNS_PORT}", netns::ns_addr(i))
        } else {
            "127.0.0.1:0".into()
        };
        let mut cmd = if a.netns {
            let mut c = Command::new("ip");
            c.args(["netns", "exec", &netns::ns_name(i)]).arg(&a.exe);
            c
        } else {
            Command::new(&a.exe)
        };
        cmd.args(["node", "--id", &i.to_string(), "--listen", &listen]);
        let child = cmd
            .stdin(Stdio::null())
            .stdout(stdout)
            .stderr(log)
            .spawn()
            .map_err(Error::io("starting a node"))?;
        nodes.push(ClusterNode {
            id: i as NodeId,
            addr: String::new(),
            pid: child.id(),
            netns: a.netns.then(|| netns::ns_name(i)),
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
    let engine_err = |e: engine::EngineError| Error::Other(e.to_string());
    let addrs = state.addrs();
    let mut runner = PlanRunner::tcp(runner_id(), &addrs).map_err(engine_err)?;
    runner.introduce(&addrs).map_err(engine_err)?;
    let pings = addrs.iter().map(|(id, _)| (*id, Request::Ping)).collect();
    runner
        .request_all(pings, Duration::from_secs(10))
        .map_err(engine_err)?;
    Ok(state)
}

/// Waits until the log of a node shows its readiness line; returns the address it names.
fn wait_ready(log: &Path, pid: u32, deadline: Instant) -> Result<String, Error> {
    loop {
        if let Ok(text) = fs::read_to_string(log) {
            if let Some(line) = text.lines().find(|l| l.contains(" ready on ")) {
                let addr = line
                    .split(" ready on ")
                    .nth(1)
                    .and_then(|r| r.split_whitespace().next())
                    .ok_or_else(|| Error::Other(format!("bad readiness line {line:?}")))?;
                return Ok(addr.to_string());
            }
        }
        if !pid_alive(pid) {
            return Err(Error::Other(format!(
                "node process {pid} exited before it was ready; see {}",
                log.display()
            )));
        }
        if Instant::now() >= deadline {
            return Err(Error::Other(format!(
                "node process {pid} not ready in time; see {}",
                log.display()
            )));
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// Shuts the cluster's nodes down (SIGKILL to those that do not exit in 5 s), removes its
/// namespaces and its state file, and its node logs unless `keep_logs` (and the directory when
/// nothing else is left in it). Returns the stopped state.
pub fn down(dir: &Path, keep_logs: bool) -> Result<ClusterState, Error> {
    let state = ClusterState::load(dir)?;
    let live = state.live_addrs();
    if !live.is_empty() {
        match PlanRunner::tcp(runner_id(), &live) {
            Ok(mut runner) => {
                let ids: Vec<NodeId> = live.iter().map(|(id, _)| *id).collect();
                if let Err(e) = runner.shutdown_nodes(&ids) {
                    log::warn!("warning: not every node acknowledged the shutdown: {e}");
                }
            }
            Err(e) => log::warn!("warning: cannot reach the nodes: {e}"),
        }
    }
    let deadline = Instant::now() + Duration::from_secs(5);
    for n in &state.nodes {
        if !wait_gone(n.pid, deadline.saturating_duration_since(Instant::now())) {
            log::warn!("node {} (pid {}) did not exit; killing it", n.id, n.pid);
            sigkill(n.pid);
        }
    }
    if state.nodes.iter().any(|n| n.netns.is_some()) {
        let mut made = netns::NetnsCreated {
            bridge: true,
            ..Default::default()
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
    fs::remove_file(dir.join(STATE_FILE)).map_err(Error::io("removing the cluster state"))?;
    if !keep_logs {
        for n in &state.nodes {
            let log = dir.join(format!("node-{}.log", n.id));
            if let Err(e) = fs::remove_file(&log) {
                if e.kind() != std::io::ErrorKind::NotFound {
                    log::warn!("warning: cannot remove {}: {e}", log.display());
                }
            }
        }
        // Only if empty: anything else in it is not ours to remove.
        let _ = fs::remove_dir(dir);
    }
    Ok(state)
}

/// Whether each node of the state (in its order) runs and answers a ping.
pub fn answering(state: &ClusterState) -> Vec<(bool, bool)> {
    let live = state.live_addrs();
    let mut answering = vec![false; state.nodes.len()];
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
    let alive = state.nodes.iter().map(|n| pid_alive(n.pid));
    alive.zip(answering).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_state_file_round_trips_and_names_its_transport() {
        let dir = std::env::temp_dir().join(format!("inec-harness-state-{}", std::process::id()));
        fs::create_dir_all(&dir).unwrap();
        let mut s = ClusterState {
            nodes: vec![ClusterNode {
                id: 0,
                addr: "127.0.0.1:7000".into(),
                pid: 42,
                netns: None,
            }],
            link_rate: None,
        };
        s.save(&dir).unwrap();
        assert_eq!(ClusterState::load(&dir).unwrap(), s);
        assert_eq!(s.addrs(), vec![(0, "127.0.0.1:7000".to_string())]);
        assert_eq!(s.transport(), "tcp-loopback-processes");
        s.nodes[0].netns = Some("inec-ns0".into());
        assert_eq!(s.transport(), "tcp-netns");
        s.link_rate = Some("1gbit".into());
        assert_eq!(s.transport(), "tcp-netns-1gbit");
        let err = ClusterState::load(&dir.join("missing")).unwrap_err();
        assert!(err.to_string().contains("is a cluster up?"), "{err}");
        let _ = fs::remove_dir_all(&dir);
    }
}
