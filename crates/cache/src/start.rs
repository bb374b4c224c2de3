//! Starting one cache node: its listeners, the node, its engine host with the plans of its
//! stripes and the background jobs; then [`Server::run`] serves its clients and peers.
//! `inec serve` is this with flags.

use std::net::{SocketAddr, TcpListener};
use std::sync::{Arc, Mutex};

use codes::Code;
use engine::{BufferPool, Engine, SteppedHost};
use graph::Scheme;

use crate::carrier::calls::LoopTransport;
use crate::carrier::lane::LaneTransport;
use crate::carrier::plans::{CacheApp, PlanExec};
use crate::cluster::placement::Placement;
use crate::front::{self, ServerConfig};
use crate::member::store::ChunkStore;
use crate::node::{Node, NodeConfig, NodeParts};

/// Everything a node needs to start.
#[derive(Clone, Debug)]
pub struct Config {
    /// The node's own settings; `node.id` indexes `peers`.
    pub node: NodeConfig,
    /// Where clients connect (memcached's `-l`, `-p`).
    pub client: SocketAddr,
    /// Every node's peer address, in node-id order.
    pub peers: Vec<SocketAddr>,
    /// Whether writes, reads and degraded reads run as plans on the node's engine (their
    /// frames on connections to the peer ports, polled by the first event loop); without,
    /// they go over peer messages.
    pub plans: bool,
    /// memcached's `-c`.
    pub max_connections: usize,
    /// Event loops serving the client and peer connections (`-t`, memcached's threads).
    pub loops: usize,
    /// Worker threads running the requests the loops hand over (and as many for peers').
    pub workers: usize,
    /// `--coordinator etcd://HOST:PORT[,…][/PREFIX]`: leadership from etcd
    /// (`cluster::coord`); `None`: the heartbeats' majority lease.
    pub coordinator: Option<String>,
}

/// Why a node could not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error("node {id} is not in the cluster of {nodes} nodes")]
    NotInCluster { id: usize, nodes: usize },
    #[error("the lrc scheme needs an LRC code (lrc:K,L,R), got {0}")]
    LrcSchemeNeedsLrc(Code),
    #[error("--coordinator: {0}")]
    Coordinator(String),
    #[error("making the event loops' polls: {0}")]
    Loops(std::io::Error),
    #[error("binding {what} address {addr}: {source}")]
    Bind {
        what: &'static str,
        addr: SocketAddr,
        source: std::io::Error,
    },
}

/// The coordinator `url` names (`etcd://…`), in a build with its client.
fn coordinator(url: &str) -> Result<Box<dyn crate::cluster::coord::Coordinator>, String> {
    #[cfg(feature = "etcd")]
    {
        crate::cluster::etcd::EtcdCoordinator::new(url)
            .map(|c| Box::new(c) as Box<dyn crate::cluster::coord::Coordinator>)
            .map_err(|e| e.to_string())
    }
    #[cfg(not(feature = "etcd"))]
    {
        Err(format!(
            "{url:?}: this build has no etcd client; build with `--features inec-cli/etcd` \
             (its build needs protoc: apt-get install protobuf-compiler)"
        ))
    }
}

/// A started node, not yet serving (peers that connect wait in the backlog).
#[derive(Debug)]
pub struct Server {
    node: Arc<Node>,
    client: TcpListener,
    peer: TcpListener,
    peers: Vec<SocketAddr>,
    limits: proto::Limits,
    max_connections: usize,
    workers: usize,
    /// Its event loops, made before the node (its calls to other nodes go through them); the
    /// first drives the engine and steps its host.
    loops: front::Loops,
    /// Why the write and read plans of its stripes were not installed (they then go over peer
    /// messages), if they were not.
    pub plans_not_installed: Option<String>,
}

impl Server {
    /// Binds the client and peer ports (and the engine host's), builds the node, installs its
    /// parts of its stripes' write and read plans, starts the background jobs.
    pub fn start(config: Config) -> Result<Server, StartError> {
        let cfg = config.node;
        let nodes = config.peers.len();
        let (id, code, scheme) = (cfg.id, cfg.code, cfg.scheme);
        if id >= nodes {
            return Err(StartError::NotInCluster { id, nodes });
        }
        if scheme == Scheme::Lrc && !matches!(code, Code::Lrc { .. }) {
            return Err(StartError::LrcSchemeNeedsLrc(code));
        }
        let coordinator = match config.coordinator.as_deref() {
            None => None,
            Some(url) => Some(coordinator(url).map_err(StartError::Coordinator)?),
        };
        let bind = |what, addr| {
            TcpListener::bind(addr).map_err(|source| StartError::Bind { what, addr, source })
        };
        let client = bind("client", config.client)?;
        let peer = bind("peer", config.peers[id])?;
        let limits = proto::Limits {
            item_size_max_bytes: cfg.item_size_max_bytes,
            ..proto::Limits::default()
        };
        let debug_commands = cfg.debug_commands;
        let hb_timeout = cfg.heartbeat_timeout();
        // Every call the node's other threads make to other nodes is carried by its event
        // loops, on the links they keep to each node: one set of connections per pair of nodes.
        let mut loops = front::Loops::new(config.loops).map_err(StartError::Loops)?;
        let transport = Arc::new(LoopTransport::new(loops.posts(), front::PEER_TIMEOUT));
        let heartbeats = Arc::new(LoopTransport::new(loops.posts(), hb_timeout));
        let incarnation = crate::time::now_micros();
        let store = Arc::new(Mutex::new(ChunkStore::new()));
        // Writes, normal and degraded reads run as plans on the engine hosts when every node
        // has one. The host's application shares the node's store and plan state, built first.
        let mut plans_not_installed = None;
        let plans = match config.plans {
            true if nodes > 1 => {
                // The engine is driven by the first event loop, which steps its host too: its
                // frames travel on that loop's links to the other nodes, beside the cache's
                // messages, and a run is launched, started and ended on that loop.
                let pool = BufferPool::new();
                let t = LaneTransport::new(
                    id as engine::NodeId,
                    nodes,
                    loops.engine_waker(),
                    pool.clone(),
                );
                let (engine, driven) = Engine::driven(t, pool);
                let exec = Arc::new(PlanExec::new(config.peers.clone(), incarnation));
                let app = CacheApp::new(id, Arc::clone(&store), Arc::clone(&exec), debug_commands);
                let mut host = SteppedHost::new(engine.clone(), app);
                // Engines connect on the peers' first heartbeat answers.
                exec.set_engine(engine);
                // This node's parts of the write and read templates of its stripes, installed
                // before it serves (no message; the others do the same).
                let placement = Placement::new(cfg.node_count, code.n());
                let launcher = host.launcher();
                let mut install = |template, parts| host.install(template, parts);
                if let Err(e) =
                    exec.install_startup(&mut install, launcher, id, code, scheme, &placement)
                {
                    plans_not_installed = Some(e.to_string());
                }
                loops.drive(driven, host);
                Some(exec)
            }
            _ => None,
        };
        let node = Arc::new(Node::with_store(
            cfg,
            transport,
            heartbeats,
            NodeParts {
                incarnation,
                store,
                plans,
                coordinator,
                loops: loops.posts(),
            },
        ));
        node.start_background();
        Ok(Server {
            node,
            client,
            peer,
            peers: config.peers,
            limits,
            max_connections: config.max_connections,
            loops,
            workers: config.workers,
            plans_not_installed,
        })
    }

    /// The node it serves (for tests in this crate that look inside it).
    #[cfg(test)]
    pub(crate) fn node(&self) -> Arc<Node> {
        Arc::clone(&self.node)
    }

    /// The address clients connect to.
    pub fn client_addr(&self) -> std::io::Result<SocketAddr> {
        self.client.local_addr()
    }

    /// Serves clients and peers on its event loops until one of them fails.
    pub fn run(self) -> std::io::Result<()> {
        front::serve(
            self.node,
            self.client,
            self.peer,
            ServerConfig {
                limits: self.limits,
                max_connections: self.max_connections,
                workers: self.workers,
                peer_addrs: self.peers,
            },
            self.loops,
        )
    }
}
