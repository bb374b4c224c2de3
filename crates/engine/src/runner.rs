//! The plan runner: installs plan templates on the hosts of a cluster and starts runs of them,
//! waiting for every node's `Done` ([`crate::control`]). It talks through a
//! [`Channel`] with an engine of its own (id at or above [`RUNNER_BASE`]) connected to every
//! node. A cache's agent uses one to run its plans; `inec cluster` and the benchmarks too.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use crate::channel::{self, Channel, Port};
use crate::control::{Reply, Request};
use crate::engine::{Engine, Mode};
use crate::pool::BufferPool;
use crate::transport::{MemHub, NodeId, TcpTransport, RUNNER_BASE};
use crate::EngineError;
use graph::part::VertexPart;

/// A runner id for this process: [`RUNNER_BASE`] plus 28 random bits (the process id, the time
/// and the standard library's per-process random hash keys), so that runners started at the
/// same time on one machine do not collide.
pub fn runner_id() -> NodeId {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u32(std::process::id());
    h.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos()),
    );
    RUNNER_BASE + (h.finish() & 0x0FFF_FFFF) as NodeId
}

/// Statistics of [`PlanRunner::run_many`].
#[derive(Clone, Copy, Debug)]
pub struct RunStats {
    /// From the first request to the last reply.
    pub elapsed: Duration,
    pub ops: usize,
}

/// One run of an installed template: which template, on which nodes, how, and the application
/// payload every node's `Start` carries.
#[derive(Clone, Debug)]
pub struct RunSpec<'a> {
    pub template: u64,
    pub nodes: &'a [NodeId],
    pub mode: Mode,
    /// Each node gives up on its part after this long.
    pub timeout: Duration,
    pub payload: &'a [u8],
}

/// Fails on an error reply of a host.
fn check_reply(r: &channel::Reply) -> Result<(), EngineError> {
    if r.port != Port::Engine {
        return Err(EngineError::BadMessage {
            from: Some(r.from),
            reason: "an application reply to an engine request".into(),
        });
    }
    match r.json::<Reply>()?.0 {
        Reply::Error { message }
        | Reply::Done {
            error: Some(message),
            ..
        } => Err(EngineError::Remote {
            node: r.from,
            message,
        }),
        _ => Ok(()),
    }
}

/// Reads a host's reply to `Start`: the run's tag when the node's part finished, the node's
/// error when it failed.
pub fn done_of(r: &channel::Reply) -> Result<u64, EngineError> {
    if r.port != Port::Engine {
        return Err(EngineError::BadMessage {
            from: Some(r.from),
            reason: "an application reply to start".into(),
        });
    }
    match r.json::<Reply>()?.0 {
        Reply::Done { op, error: None } => Ok(op),
        Reply::Error { message }
        | Reply::Done {
            error: Some(message),
            ..
        } => Err(EngineError::Remote {
            node: r.from,
            message,
        }),
        other => Err(EngineError::BadMessage {
            from: Some(r.from),
            reason: format!("unexpected reply {other:?} to start"),
        }),
    }
}

/// Sets up hosts and runs plans on them.
#[derive(Debug)]
pub struct PlanRunner {
    channel: Channel,
    next_op: u64,
}

impl PlanRunner {
    /// A runner on an in-memory hub.
    pub fn mem(hub: &MemHub, id: NodeId) -> PlanRunner {
        let pool = BufferPool::new();
        PlanRunner::with_engine(Engine::start(hub.attach(id, pool.clone()), pool))
    }

    /// A runner connected over TCP to every node in `nodes`.
    pub fn tcp(id: NodeId, nodes: &[(NodeId, String)]) -> Result<PlanRunner, EngineError> {
        PlanRunner::tcp_with_preamble(id, nodes, &[])
    }

    /// A runner connected over TCP to every node in `nodes`, writing `preamble` first on each
    /// connection (nodes whose engine shares a port with another protocol:
    /// [`TcpTransport::set_preamble`]).
    pub fn tcp_with_preamble(
        id: NodeId,
        nodes: &[(NodeId, String)],
        preamble: &[u8],
    ) -> Result<PlanRunner, EngineError> {
        let pool = BufferPool::new();
        let mut t = TcpTransport::unbound(id, pool.clone()).map_err(|e| EngineError::Io {
            what: "runner transport",
            reason: e.to_string(),
        })?;
        t.set_preamble(preamble);
        for (peer, addr) in nodes {
            crate::transport::Transport::connect(&mut t, *peer, addr)?;
        }
        Ok(PlanRunner::with_engine(Engine::start(t, pool)))
    }

    /// A runner over an engine already started (its id at or above [`RUNNER_BASE`]).
    pub fn with_engine(engine: Engine) -> PlanRunner {
        PlanRunner {
            next_op: channel::seed(engine.node()),
            channel: Channel::new(engine),
        }
    }

    pub fn engine(&self) -> &Engine {
        self.channel.engine()
    }

    /// The control channel, for application messages ([`Port::App`]).
    pub fn channel(&mut self) -> &mut Channel {
        &mut self.channel
    }

    /// A fresh operation id (a run's tag).
    pub fn new_op(&mut self) -> u64 {
        self.next_op += 1;
        self.next_op
    }

    /// Sends every engine request and waits for every reply (in the order of `reqs`). Fails on
    /// the first error reply, on the loss of a node asked, or at the timeout.
    pub fn request_all(
        &mut self,
        reqs: Vec<(NodeId, Request)>,
        timeout: Duration,
    ) -> Result<Vec<Reply>, EngineError> {
        let pool = self.engine().pool().clone();
        let msgs = reqs
            .into_iter()
            .map(|(node, req)| Ok((node, channel::encode_json(Port::Engine, &req, &[], &pool)?)))
            .collect::<Result<Vec<_>, EngineError>>()?;
        let replies = self.channel.exchange(msgs, timeout, &mut check_reply)?;
        replies
            .into_iter()
            .map(|r| {
                let reply = r.json::<Reply>()?.0;
                r.recycle(&pool);
                Ok(reply)
            })
            .collect()
    }

    /// One engine request to one node.
    pub fn request(
        &mut self,
        node: NodeId,
        req: Request,
        timeout: Duration,
    ) -> Result<Reply, EngineError> {
        Ok(self
            .request_all(vec![(node, req)], timeout)?
            .pop()
            .expect("one reply"))
    }

    /// Tells every node the cluster's addresses, so that nodes connect to each other.
    pub fn introduce(&mut self, nodes: &[(NodeId, String)]) -> Result<(), EngineError> {
        let reqs = nodes
            .iter()
            .map(|(id, _)| {
                (
                    *id,
                    Request::Peers {
                        peers: nodes.to_vec(),
                    },
                )
            })
            .collect();
        self.request_all(reqs, Duration::from_secs(10)).map(|_| ())
    }

    /// Installs `parts` (any order) under `template` on their nodes.
    pub fn install(&mut self, template: u64, parts: &[VertexPart]) -> Result<(), EngineError> {
        let mut by_node: HashMap<NodeId, Vec<VertexPart>> = HashMap::new();
        for p in parts {
            by_node.entry(p.node).or_default().push(p.clone());
        }
        let reqs = by_node
            .into_iter()
            .map(|(node, parts)| (node, Request::Install { template, parts }))
            .collect();
        self.request_all(reqs, Duration::from_secs(10)).map(|_| ())
    }

    /// Runs `template` once on `nodes`; returns the time from the first request to the last
    /// `Done`.
    pub fn run(
        &mut self,
        template: u64,
        nodes: &[NodeId],
        mode: Mode,
        timeout: Duration,
    ) -> Result<Duration, EngineError> {
        Ok(self.run_many(template, nodes, mode, 1, 1, timeout)?.elapsed)
    }

    /// Runs `template` `ops` times on `nodes` with up to `window` operations in flight (the
    /// window-based bandwidth benchmark).
    pub fn run_many(
        &mut self,
        template: u64,
        nodes: &[NodeId],
        mode: Mode,
        ops: usize,
        window: usize,
        timeout: Duration,
    ) -> Result<RunStats, EngineError> {
        let spec = RunSpec {
            template,
            nodes,
            mode,
            timeout,
            payload: &[],
        };
        self.run_spec(&spec, ops, window, &mut |_| {})
    }

    /// [`PlanRunner::run_many`], calling `on_done(node)` whenever a node reports its part of
    /// an operation finished (tests use it to act at a known point of a plan).
    #[allow(clippy::too_many_arguments)]
    pub fn run_observed(
        &mut self,
        template: u64,
        nodes: &[NodeId],
        mode: Mode,
        ops: usize,
        window: usize,
        timeout: Duration,
        on_done: &mut dyn FnMut(NodeId),
    ) -> Result<RunStats, EngineError> {
        let spec = RunSpec {
            template,
            nodes,
            mode,
            timeout,
            payload: &[],
        };
        self.run_spec(&spec, ops, window, on_done)
    }

    /// Starts one run of `spec` without waiting: one `Start` to each node. Returns the run's
    /// tag (`op`) and the request id of each node's `Start`, in the order of `spec.nodes`;
    /// each node's `Done` comes back on [`PlanRunner::channel`] as the reply to its request
    /// ([`done_of`] reads it). For callers that keep several runs in flight among other
    /// requests (a cache's agent); [`PlanRunner::run_spec`] is the waiting form.
    pub fn start(&mut self, spec: &RunSpec<'_>) -> Result<(u64, Vec<u64>), EngineError> {
        let op = self.new_op();
        let req = Request::Start {
            template: spec.template,
            op,
            mode: spec.mode,
            timeout_ms: spec.timeout.as_millis() as u64,
            chunk_bytes: None,
            quiet: false,
        };
        let pool = self.engine().pool().clone();
        let mut reqs = Vec::with_capacity(spec.nodes.len());
        for &node in spec.nodes {
            let p = channel::encode_json(Port::Engine, &req, spec.payload, &pool)?;
            match self.channel.send(node, p) {
                Ok(r) => reqs.push(r),
                Err(e) => {
                    reqs.iter().for_each(|r| self.channel.forget(*r));
                    return Err(e);
                }
            }
        }
        Ok((op, reqs))
    }

    /// Runs `spec` `ops` times with up to `window` runs in flight: one `Start` to each node per
    /// run, one `Done` back. Fails on the first error, on the loss of a node of the run, or two
    /// seconds after the nodes' own deadline.
    pub fn run_spec(
        &mut self,
        spec: &RunSpec<'_>,
        ops: usize,
        window: usize,
        on_done: &mut dyn FnMut(NodeId),
    ) -> Result<RunStats, EngineError> {
        let start = Instant::now();
        // Nodes give up at `timeout` and say why; wait a little longer to hear it.
        let deadline = start + spec.timeout + Duration::from_secs(2);
        let pool = self.engine().pool().clone();
        // Request id → run index; run index → replies outstanding.
        let mut waiting: HashMap<u64, usize> = HashMap::new();
        let mut left: Vec<usize> = Vec::new();
        let mut issued = 0;
        let mut finished = 0;
        let result = (|| {
            while finished < ops {
                while issued < ops && issued - finished < window.max(1) {
                    left.push(spec.nodes.len());
                    for req in self.start(spec)?.1 {
                        waiting.insert(req, issued);
                    }
                    issued += 1;
                }
                let Some(r) = self.channel.next_reply(deadline)? else {
                    return Err(EngineError::NoReply {
                        nodes: self.channel.waiting_for(),
                        timeout: spec.timeout,
                    });
                };
                let Some(i) = waiting.remove(&r.req) else {
                    r.recycle(&pool);
                    continue;
                };
                done_of(&r)?;
                on_done(r.from);
                left[i] -= 1;
                if left[i] == 0 {
                    finished += 1;
                }
                r.recycle(&pool);
            }
            Ok(())
        })();
        if let Err(e) = result {
            for req in waiting.keys() {
                self.channel.forget(*req);
            }
            return Err(e);
        }
        Ok(RunStats {
            elapsed: start.elapsed(),
            ops,
        })
    }

    /// Asks every node in `nodes` to shut down.
    pub fn shutdown_nodes(&mut self, nodes: &[NodeId]) -> Result<(), EngineError> {
        let reqs = nodes.iter().map(|&n| (n, Request::Shutdown)).collect();
        self.request_all(reqs, Duration::from_secs(10)).map(|_| ())
    }
}
