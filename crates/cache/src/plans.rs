//! Degraded reads on the engine: every cache node runs an engine host ([`CacheApp`]) next to
//! its peer port, and the agent of a stripe runs the configured scheme's repair plan
//! (`graph::build`) on those hosts through a [`engine::PlanRunner`] of its own.
//!
//! A plan is built and installed once per (stripe, lost positions, chunk size class) and then
//! started per read with one `Start` per participant carrying the application payload
//! [`RunPayload`]: the key and version whose chunks the members read from their stores (the
//! record's CRC, key, version and position are checked there), and the agent's host receives
//! the rebuilt chunks. Chunk sizes are rounded up to a power of two (at least
//! [`MIN_CLASS_BYTES`]): chunks are zero-padded to the class on input and the output is cut
//! back, which is exact because the codes are linear byte by byte (zero columns encode to
//! zero), so a handful of templates serve every value size.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use codes::Code;
use engine::{Application, ChunkRef, HostCtx, Mode, PlanRunner, RunInfo, RunSpec};
use graph::{PlanSpec, Scheme, Target};

use crate::node::{ExecMode, Node};
use crate::record;

/// The smallest chunk size class of a repair template.
pub const MIN_CLASS_BYTES: usize = 64;

/// How long a participant may take for its part of a degraded read.
pub const RUN_TIMEOUT: Duration = Duration::from_secs(5);

/// The template chunk size for chunks of `bytes`.
pub fn class_bytes(bytes: usize) -> usize {
    bytes.max(MIN_CLASS_BYTES).next_power_of_two()
}

/// What a degraded read's `Start` carries to every participant.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RunPayload {
    /// Chosen by the agent, unique per read: the rebuilt chunks are filed under it.
    pub nonce: u64,
    pub stripe: u32,
    pub version: u64,
    /// The template's chunk size: inputs are zero-padded to it.
    pub class_bytes: u32,
    pub key: Vec<u8>,
}

impl RunPayload {
    pub fn encode(&self) -> Vec<u8> {
        let mut b = Vec::with_capacity(24 + self.key.len());
        b.extend_from_slice(&self.nonce.to_le_bytes());
        b.extend_from_slice(&self.stripe.to_le_bytes());
        b.extend_from_slice(&self.version.to_le_bytes());
        b.extend_from_slice(&self.class_bytes.to_le_bytes());
        b.extend_from_slice(&self.key);
        b
    }

    pub fn decode(b: &[u8]) -> Result<RunPayload, String> {
        if b.len() < 24 || b.len() > 24 + 250 {
            return Err(format!("bad degraded-read payload of {} bytes", b.len()));
        }
        let u64_at = |i: usize| u64::from_le_bytes(b[i..i + 8].try_into().expect("8 bytes"));
        let u32_at = |i: usize| u32::from_le_bytes(b[i..i + 4].try_into().expect("4 bytes"));
        Ok(RunPayload {
            nonce: u64_at(0),
            stripe: u32_at(8),
            version: u64_at(12),
            class_bytes: u32_at(20),
            key: b[24..].to_vec(),
        })
    }
}

/// Counters of the engine path, in `stats inec`.
#[derive(Debug, Default)]
pub struct PlanCounters {
    /// Degraded reads this node (as agent) served through an engine plan.
    pub degraded_plan_runs: AtomicU64,
    /// Degraded reads that fell back to the agent-side repair (the reason is logged).
    pub degraded_plan_fallbacks: AtomicU64,
    /// Repair templates this node installed (as agent).
    pub plan_templates_installed: AtomicU64,
    /// `Start` messages this node's host handled (one `Done` answered each).
    pub plan_starts: AtomicU64,
    /// Local chunks this node's host supplied to runs.
    pub plan_inputs: AtomicU64,
}

/// Rebuilt chunks delivered to this node's host for one read: (position, bytes).
type Delivered = Vec<(u32, Arc<Vec<u8>>)>;

/// A repair template: (stripe, lost positions, chunk size class).
type TemplateKey = (usize, Vec<usize>, usize);

/// The engine side of a node: the engine addresses of the cluster, the agent's runner and
/// installed templates, and the rebuilt chunks delivered to this node's host.
#[derive(Debug)]
pub struct PlanExec {
    /// Engine address of every node, by id.
    pub addrs: Vec<SocketAddr>,
    runner: Mutex<Option<Runner>>,
    outputs: Mutex<HashMap<u64, Delivered>>,
    next_nonce: AtomicU64,
    /// This node's engine (set once its host runs), for connecting to peers' engines.
    engine: std::sync::OnceLock<engine::Engine>,
    pub counters: PlanCounters,
}

#[derive(Debug)]
struct Runner {
    runner: PlanRunner,
    /// Installed templates → (template id, participants).
    templates: HashMap<TemplateKey, (u64, Vec<usize>)>,
    next_template: u64,
}

impl PlanExec {
    pub fn new(addrs: Vec<SocketAddr>, seed: u64) -> PlanExec {
        PlanExec {
            addrs,
            runner: Mutex::new(None),
            outputs: Mutex::new(HashMap::new()),
            next_nonce: AtomicU64::new(seed << 20),
            engine: std::sync::OnceLock::new(),
            counters: PlanCounters::default(),
        }
    }

    /// Rebuilds positions `wanted` of a coded value of stripe `stripe` at node `agent`, with
    /// the repair plan of `scheme` for the loss of `lost` (every position not usable; it
    /// contains `wanted`). `chunk_bytes` is the value's chunk size. Returns the rebuilt chunks
    /// in the order of `wanted`.
    #[allow(clippy::too_many_arguments)]
    pub fn repair(
        &self,
        code: Code,
        scheme: Scheme,
        mode: ExecMode,
        members: &[usize],
        agent: usize,
        stripe: usize,
        lost: &[usize],
        wanted: &[usize],
        key: &[u8],
        version: u64,
        chunk_bytes: usize,
    ) -> Result<Vec<Vec<u8>>, String> {
        let class = class_bytes(chunk_bytes);
        let mut guard = self.runner.lock().unwrap_or_else(|p| p.into_inner());
        if guard.is_none() {
            let nodes: Vec<(engine::NodeId, String)> = self
                .addrs
                .iter()
                .enumerate()
                .map(|(i, a)| (i as engine::NodeId, a.to_string()))
                .collect();
            let runner = PlanRunner::tcp(engine::runner_id(), &nodes)
                .map_err(|e| format!("cannot start the plan runner: {e}"))?;
            *guard = Some(Runner {
                runner,
                templates: HashMap::new(),
                next_template: 1,
            });
        }
        let r = guard.as_mut().expect("runner");
        let tkey = (stripe, lost.to_vec(), class);
        let result = (|| -> Result<Vec<Vec<u8>>, String> {
            if !r.templates.contains_key(&tkey) {
                let mut spec = PlanSpec::new(
                    scheme,
                    code,
                    graph::Request::Repair {
                        lost: lost.to_vec(),
                        target: Target::Node(agent),
                    },
                    class,
                );
                spec.placement = graph::Placement {
                    nodes: members.to_vec(),
                    agent,
                };
                let plan = graph::build(&spec).map_err(|e| format!("no repair plan: {e}"))?;
                let parts = plan
                    .parts(stripe as u64)
                    .map_err(|e| format!("plan lowering failed: {e}"))?;
                let id = r.next_template;
                r.next_template += 1;
                r.runner
                    .install(id, &parts)
                    .map_err(|e| format!("installing the repair plan failed: {e}"))?;
                self.counters
                    .plan_templates_installed
                    .fetch_add(1, Ordering::Relaxed);
                r.templates.insert(tkey.clone(), (id, plan.nodes()));
            }
            let (template, nodes) = r.templates[&tkey].clone();
            let nonce = self.next_nonce.fetch_add(1, Ordering::Relaxed);
            let payload = RunPayload {
                nonce,
                stripe: stripe as u32,
                version,
                class_bytes: class as u32,
                key: key.to_vec(),
            }
            .encode();
            let nodes: Vec<engine::NodeId> = nodes.iter().map(|&n| n as engine::NodeId).collect();
            let spec = RunSpec {
                template,
                nodes: &nodes,
                mode: match mode {
                    ExecMode::Coherent => Mode::Coherent,
                    ExecMode::Incoherent => Mode::Incoherent,
                },
                timeout: RUN_TIMEOUT,
                payload: &payload,
            };
            let ran = r.runner.run_spec(&spec, 1, 1, &mut |_| {});
            // The agent's host filed its outputs before answering `Done`.
            let outs = self
                .outputs
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .remove(&nonce)
                .unwrap_or_default();
            ran.map_err(|e| format!("repair plan failed: {e}"))?;
            wanted
                .iter()
                .map(|&p| {
                    outs.iter()
                        .find(|(i, _)| *i as usize == p)
                        .map(|(_, b)| b[..chunk_bytes.min(b.len())].to_vec())
                        .filter(|b| b.len() == chunk_bytes)
                        .ok_or_else(|| format!("the repair plan did not deliver position {p}"))
                })
                .collect()
        })();
        if result.is_err() {
            // A node may have restarted: start over with a fresh runner next time.
            *guard = None;
        }
        result
    }

    /// Remembers this node's engine.
    pub fn set_engine(&self, e: engine::Engine) {
        let _ = self.engine.set(e);
    }

    /// Connects this node's engine to the engine of `peer` (again: after it restarted). Of
    /// each pair of nodes the one with the larger id connects, as the engine's `peers` rule.
    pub fn connect(&self, peer: usize) {
        if let (Some(e), Some(addr)) = (self.engine.get(), self.addrs.get(peer)) {
            if (peer as engine::NodeId) < e.node() {
                e.post_all([engine::WorkRequest::Connect {
                    peer: peer as engine::NodeId,
                    addr: addr.to_string(),
                }]);
            }
        }
    }

    fn deliver(&self, nonce: u64, index: u32, bytes: Arc<Vec<u8>>) {
        self.outputs
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .entry(nonce)
            .or_default()
            .push((index, bytes));
    }
}

/// The engine host's application on a cache node: a run's local inputs are this node's chunk
/// records of the payload's key and version, its outputs go to the waiting agent.
#[derive(Debug)]
pub struct CacheApp {
    pub node: Weak<Node>,
}

impl Application for CacheApp {
    fn input(
        &mut self,
        _ctx: &HostCtx,
        run: &RunInfo,
        chunk: ChunkRef,
    ) -> Result<Arc<Vec<u8>>, String> {
        let node = self.node.upgrade().ok_or("node is shutting down")?;
        let p = RunPayload::decode(&run.payload)?;
        if let Some(x) = node.plan_exec() {
            x.counters.plan_inputs.fetch_add(1, Ordering::Relaxed);
        }
        let rec = node
            .record(p.stripe, chunk.index as u8, &p.key, p.version)
            .ok_or_else(|| {
                format!(
                    "node {}: no record of position {} version {}",
                    node.cfg.id, chunk.index, p.version
                )
            })?;
        let (h, data) = record::parse(&rec).map_err(|e| format!("node {}: {e}", node.cfg.id))?;
        if h.version != p.version || h.key != p.key || u32::from(h.chunk_index) != chunk.index {
            return Err(format!("node {}: record of another version", node.cfg.id));
        }
        let class = p.class_bytes as usize;
        if data.len() > class {
            return Err(format!(
                "node {}: chunk of {} bytes exceeds the plan's {class}",
                node.cfg.id,
                data.len()
            ));
        }
        let mut buf = Vec::with_capacity(class);
        buf.extend_from_slice(data);
        buf.resize(class, 0);
        Ok(Arc::new(buf))
    }

    fn output(&mut self, _ctx: &HostCtx, run: &RunInfo, chunk: ChunkRef, bytes: Arc<Vec<u8>>) {
        let (Some(node), Ok(p)) = (self.node.upgrade(), RunPayload::decode(&run.payload)) else {
            return;
        };
        if let Some(x) = node.plan_exec() {
            x.deliver(p.nonce, chunk.index, bytes);
        }
    }

    fn finished(&mut self, _ctx: &HostCtx, _run: &RunInfo, _error: Option<&str>) {
        if let Some(x) = self.node.upgrade().and_then(|n| n.plan_exec().cloned()) {
            x.counters.plan_starts.fetch_add(1, Ordering::Relaxed);
        }
    }

    fn message(&mut self, _ctx: &HostCtx, _from: engine::NodeId, _req: u64, _body: &[u8]) {}
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn payload_round_trip_and_bad_lengths() {
        let p = RunPayload {
            nonce: 7,
            stripe: 3,
            version: 99,
            class_bytes: 4096,
            key: b"user:1".to_vec(),
        };
        assert_eq!(RunPayload::decode(&p.encode()).unwrap(), p);
        assert!(RunPayload::decode(&[0; 10]).is_err());
        assert!(RunPayload::decode(&vec![0; 24 + 251]).is_err());
    }

    #[test]
    fn size_classes() {
        assert_eq!(class_bytes(1), 64);
        assert_eq!(class_bytes(64), 64);
        assert_eq!(class_bytes(65), 128);
        assert_eq!(class_bytes(171), 256);
    }
}
