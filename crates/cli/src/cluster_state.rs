//! The state file of a cluster started by `inec cluster up` (`<dir>/cluster.json`): every
//! node's id, address, process id and network namespace, and the `tc` rate of its link.
//! `inec cluster down|status` and `inec bench primitives --dir` read it.

use std::fs;
use std::path::Path;

use anyhow::{Context, Result};
use engine::NodeId;
use serde::{Deserialize, Serialize};

/// The file name inside the cluster's directory.
pub const STATE_FILE: &str = "cluster.json";

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
    pub fn load(dir: &Path) -> Result<ClusterState> {
        let path = dir.join(STATE_FILE);
        let text = fs::read_to_string(&path).with_context(|| {
            format!("no cluster state at {} (is a cluster up?)", path.display())
        })?;
        serde_json::from_str(&text).with_context(|| format!("bad cluster state {}", path.display()))
    }

    /// Writes `<dir>/cluster.json`.
    pub fn save(&self, dir: &Path) -> Result<()> {
        let path = dir.join(STATE_FILE);
        fs::write(&path, serde_json::to_string_pretty(self)?)
            .with_context(|| format!("writing {}", path.display()))
    }

    /// `(id, address)` of every node.
    pub fn addrs(&self) -> Vec<(NodeId, String)> {
        self.nodes.iter().map(|n| (n.id, n.addr.clone())).collect()
    }

    /// How the benchmarks name this cluster's transport.
    #[cfg_attr(not(feature = "bench"), allow(dead_code))]
    pub fn transport(&self) -> String {
        match &self.link_rate {
            Some(r) => format!("tcp-netns-{r}"),
            None if self.nodes.iter().any(|n| n.netns.is_some()) => "tcp-netns".into(),
            None => "tcp-loopback-processes".into(),
        }
    }
}

#[cfg(feature = "bench")]
/// `inec bench primitives --dir D`: the benchmark gets the nodes of the cluster in `D` (the
/// state file is read here, where it is written).
pub fn give_to_bench(a: &mut bench::primitives::PrimitivesArgs) -> Result<()> {
    if let Some(dir) = &a.dir {
        let state = ClusterState::load(dir)?;
        a.cluster = Some(bench::primitives::ClusterAddrs {
            nodes: state.addrs(),
            transport: state.transport(),
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_state_file_round_trips_and_names_its_transport() {
        let dir = tempfile::tempdir().unwrap();
        let mut s = ClusterState {
            nodes: vec![ClusterNode {
                id: 0,
                addr: "127.0.0.1:7000".into(),
                pid: 42,
                netns: None,
            }],
            link_rate: None,
        };
        s.save(dir.path()).unwrap();
        assert_eq!(ClusterState::load(dir.path()).unwrap(), s);
        assert_eq!(s.addrs(), vec![(0, "127.0.0.1:7000".to_string())]);
        assert_eq!(s.transport(), "tcp-loopback-processes");
        s.nodes[0].netns = Some("inec-ns0".into());
        assert_eq!(s.transport(), "tcp-netns");
        s.link_rate = Some("1gbit".into());
        assert_eq!(s.transport(), "tcp-netns-1gbit");
        let err = ClusterState::load(&dir.path().join("missing")).unwrap_err();
        assert!(format!("{err:#}").contains("is a cluster up?"), "{err:#}");
    }
}
