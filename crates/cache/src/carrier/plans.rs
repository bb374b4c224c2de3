//! The cache's plans on the engine: every cache node runs an engine host ([`CacheApp`]); its
//! engine is driven by the node's first event loop and its frames travel on that loop's links
//! to the other nodes' peer ports (`front::EngineLoop`, `carrier::lane`).
//!
//! - **Writes and normal reads** of coded values run templates every node installs for its own
//!   parts at start-up, locally (no message): for each stripe it is a member of, the scheme's
//!   encode plan (`graph::build`, RS/LRC/PPR/ECPipe: the agent's `ec-send`) and the normal-read
//!   plan (each remote data member `send`s its chunk to the agent; TriEC: its tripartite encode,
//!   whose parity members get a start of their own). The agent *launches* a run
//!   from its own host ([`engine::Launcher`]): a write's chunk frames carry each member's start
//!   and the member's `Done` is its ack; a read sends each data member one quiet `start` and
//!   gets its chunk back. The run's chunk size travels in the start, so one template per
//!   stripe and kind serves every value size.
//! - **Degraded reads** run the configured scheme's repair plan, launched from the agent's
//!   host like the others: one quiet `start` per other participant, then the plan's data
//!   edges. The repair of one lost data chunk at the designated agent is a start-up template
//!   too (every scheme but ECPipe, whose sliced plan depends on the chunk size); other loss
//!   patterns are built and installed by the agent's host
//!   ([`engine::Launcher::install_everywhere`]: its own parts locally, one `install` message to
//!   each other participant) once per (stripe, lost positions, chunk size class).
//!
//! Every run's `start` carries [`RunPayload`]: the key and version whose chunks the members
//! read from their stores (CRC, key, version and position checked there) or, for a write, the
//! record header fields the members store their chunk under. Repair chunk sizes are rounded
//! up to a power of two (at least [`MIN_CLASS_BYTES`]): chunks are zero-padded to the class on
//! input and the output is cut back, which is exact because the codes are linear byte by byte
//! (zero columns encode to zero).

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{mpsc, Arc, Mutex, PoisonError};
use std::time::Duration;

use codes::Code;
use engine::{
    AppError, Application, ChunkRef, HostCtx, InEdge, Launch, Launcher, Mode, OutEdge, OutputSpec,
    RunError, RunInfo, VertexPart,
};
use graph::{PlanSpec, Scheme, Target};

use crate::cluster::placement::Placement;
use crate::member::store::ChunkStore;
use crate::node::ExecMode;
use crate::record::{self, Header, Kind};

/// The smallest chunk size class of a repair template.
pub const MIN_CLASS_BYTES: usize = 64;

/// How long a participant may take for its part of a run.
pub const RUN_TIMEOUT: Duration = Duration::from_secs(5);

/// How often a waiting run checks whether a participant went down.
const DOWN_CHECK: Duration = Duration::from_millis(50);

/// The template chunk size for chunks of `bytes`.
pub fn class_bytes(bytes: usize) -> usize {
    bytes.max(MIN_CLASS_BYTES).next_power_of_two()
}

/// The chunk size a range run of `len` bytes runs with: `len` rounded up to a multiple of an
/// eighth of the power of two at or below it (at least 64 bytes), so that at most 12.5 % is
/// padding and the engine's buffers, pooled by exact length, serve the next runs of nearby
/// lengths (slots hold records of every length; a pool of exact lengths would keep one set of
/// buffers per length).
pub fn range_class(len: usize) -> usize {
    let len = len.max(1);
    // The power of two at or below `len`, an eighth of it.
    let floor = 1usize << (usize::BITS - 1 - len.leading_zeros());
    len.next_multiple_of((floor / 8).max(64))
}

/// What a run is for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RunKind {
    /// A normal or degraded read: members supply their records' data, the agent receives.
    Read = 0,
    /// A write: the agent supplies the data chunks, members store their chunk as a record.
    Write = 1,
    /// A degraded read of a whole value: members supply one byte range of a page of the
    /// payload's page stripe ([`PageRange`]), the agent receives the lost position's range.
    Range = 2,
}

/// The byte range of a page a [`RunKind::Range`] run reads at every position of the page
/// stripe (`RunPayload::stripe`): page `page`, bytes `offset..offset + len`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PageRange {
    pub page: u32,
    pub offset: u32,
    pub len: u32,
}

/// The record fields a write's members store their chunks under.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WriteMeta {
    pub value_bytes: u64,
    pub flags: u32,
    pub exptime: i64,
    /// The stripe's watermark (see `member.rs`).
    pub watermark: u64,
    /// The request ids of the key's last writes, this one's first (`record::Trail`).
    pub trail: record::Trail,
}

/// What every participant's `start` of a run carries.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RunPayload {
    pub kind: RunKind,
    /// Chosen by the agent, unique per run: chunks delivered to the agent are filed under it.
    pub nonce: u64,
    pub stripe: u32,
    pub version: u64,
    /// The run's chunk size (repairs: the size class; inputs are zero-padded to it).
    pub class_bytes: u32,
    pub key: Vec<u8>,
    /// Writes only.
    pub write: Option<WriteMeta>,
    /// Range runs only.
    pub range: Option<PageRange>,
    /// The fencing token of the agent's term (`cluster::coord`; 0 without a coordinator): a
    /// member that has seen a newer term of the stripe refuses its part.
    pub fence: u64,
}

/// Why a plan of the cache could not be built, installed or run; the caller falls back to
/// peer messages (or the agent's own repair) and logs it.
#[derive(Debug, thiserror::Error)]
pub enum ExecError {
    #[error("bad run payload of {bytes} bytes")]
    BadPayload { bytes: usize },
    /// `graph` could not build the plan (`what`: encode, repair).
    #[error("no {what} plan: {source}")]
    NoPlan {
        what: &'static str,
        source: graph::PlanError,
    },
    #[error("{what} plan lowering failed: {source}")]
    Lowering {
        what: &'static str,
        source: graph::PlanError,
    },
    #[error("the engine host is not set up")]
    NotSetUp,
    #[error("an empty value")]
    EmptyValue,
    #[error("nothing to read from other nodes")]
    NothingToRead,
    #[error("node {node} went down during the run (given up)")]
    GivenUp { node: engine::NodeId },
    #[error(transparent)]
    Run(#[from] RunError),
    /// The run finished without this position's chunk (`what`: read, repair).
    #[error("the {what} plan did not deliver position {position}")]
    NotDelivered { what: &'static str, position: usize },
    #[error("repair plan failed: {0}")]
    RepairFailed(Box<ExecError>),
    #[error("installing the repair plan failed: {0}")]
    Install(RunError),
}

const PAYLOAD_HEAD: usize = 1 + 8 + 4 + 8 + 4 + 2 + 8;
const WRITE_META: usize = 8 + 4 + 8 + 8 + 8 * record::TRAIL;
const RANGE_META: usize = 4 + 4 + 4;

impl RunPayload {
    pub fn encode(&self) -> Vec<u8> {
        let mut b = Vec::with_capacity(PAYLOAD_HEAD + self.key.len() + WRITE_META);
        b.push(self.kind as u8);
        b.extend_from_slice(&self.nonce.to_le_bytes());
        b.extend_from_slice(&self.stripe.to_le_bytes());
        b.extend_from_slice(&self.version.to_le_bytes());
        b.extend_from_slice(&self.class_bytes.to_le_bytes());
        b.extend_from_slice(&(self.key.len() as u16).to_le_bytes());
        b.extend_from_slice(&self.fence.to_le_bytes());
        b.extend_from_slice(&self.key);
        if let Some(w) = &self.write {
            b.extend_from_slice(&w.value_bytes.to_le_bytes());
            b.extend_from_slice(&w.flags.to_le_bytes());
            b.extend_from_slice(&w.exptime.to_le_bytes());
            b.extend_from_slice(&w.watermark.to_le_bytes());
            for id in w.trail {
                b.extend_from_slice(&id.to_le_bytes());
            }
        }
        if let Some(r) = &self.range {
            b.extend_from_slice(&r.page.to_le_bytes());
            b.extend_from_slice(&r.offset.to_le_bytes());
            b.extend_from_slice(&r.len.to_le_bytes());
        }
        b
    }

    pub fn decode(b: &[u8]) -> Result<RunPayload, ExecError> {
        let bad = || ExecError::BadPayload { bytes: b.len() };
        if b.len() < PAYLOAD_HEAD {
            return Err(bad());
        }
        let u64_at = |i: usize| u64::from_le_bytes(b[i..i + 8].try_into().expect("8 bytes"));
        let u32_at = |i: usize| u32::from_le_bytes(b[i..i + 4].try_into().expect("4 bytes"));
        let kind = match b[0] {
            0 => RunKind::Read,
            1 => RunKind::Write,
            2 => RunKind::Range,
            _ => return Err(bad()),
        };
        let key_len = u16::from_le_bytes([b[25], b[26]]) as usize;
        if key_len > 250 {
            return Err(bad());
        }
        let rest = PAYLOAD_HEAD + key_len;
        let (write, range) = match (kind, b.len().checked_sub(rest)) {
            (RunKind::Read, Some(0)) => (None, None),
            (RunKind::Write, Some(WRITE_META)) => (
                Some(WriteMeta {
                    value_bytes: u64_at(rest),
                    flags: u32_at(rest + 8),
                    exptime: u64_at(rest + 12) as i64,
                    watermark: u64_at(rest + 20),
                    trail: std::array::from_fn(|i| u64_at(rest + 28 + 8 * i)),
                }),
                None,
            ),
            (RunKind::Range, Some(RANGE_META)) => (
                None,
                Some(PageRange {
                    page: u32_at(rest),
                    offset: u32_at(rest + 4),
                    len: u32_at(rest + 8),
                }),
            ),
            _ => return Err(bad()),
        };
        Ok(RunPayload {
            kind,
            nonce: u64_at(1),
            stripe: u32_at(9),
            version: u64_at(13),
            class_bytes: u32_at(21),
            key: b[PAYLOAD_HEAD..rest].to_vec(),
            write,
            range,
            fence: u64_at(27),
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
    /// Repair templates this node installed (as agent) on other nodes, after start-up.
    pub plan_templates_installed: AtomicU64,
    /// Write and read templates this node installed for its own parts at start-up.
    pub startup_templates: AtomicU64,
    /// Writes and normal reads this node (as agent) ran on engine plans.
    pub write_plan_runs: AtomicU64,
    pub read_plan_runs: AtomicU64,
    /// Writes and normal reads that went over peer messages instead (a member down, an
    /// acting agent, a replicated value, or a failed run: the reason is logged).
    pub write_plan_fallbacks: AtomicU64,
    pub read_plan_fallbacks: AtomicU64,
    /// Runs of other agents this node's host took part in (one start each, attached to a
    /// chunk or sent alone).
    pub plan_starts: AtomicU64,
    /// Local chunks this node's host supplied to runs.
    pub plan_inputs: AtomicU64,
    /// Chunks this node's host stored as records for writes.
    pub plan_records_stored: AtomicU64,
    /// Runs this node gave up because a participant went down before it finished.
    pub runs_given_up: AtomicU64,
    /// Degraded reads this node (as agent) has on the engine now, and the most at once.
    pub degraded_plan_runs_in_flight: AtomicU64,
    pub degraded_plan_runs_in_flight_max: AtomicU64,
}

/// Test-only (honoured with `--debug-commands`): each helper of a repair plan waits this
/// long before it reads its record, so that a test can hold runs in flight. The wait holds
/// up the loop that steps the node's engine host (its heartbeats too): a test that sets it
/// raises `--down-after-ms` well above it.
pub const INPUT_DELAY_ENV: &str = "INEC_TEST_REPAIR_INPUT_DELAY_MS";

/// Chunks delivered to this node's host for one run: (position, bytes).
type Delivered = Vec<(u32, Arc<Vec<u8>>)>;

/// A repair template: (stripe, lost positions, chunk size class).
type TemplateKey = (usize, Vec<usize>, usize);

/// Template ids of the start-up templates: above every repair template's.
const STARTUP_TEMPLATE_BASE: u64 = 1 << 62;

/// The id of the `seq`-th repair template the agent `agent` installs. Every agent installs its
/// repair templates on the same hosts, which key templates by id alone: the agent's node id
/// in the high bits keeps the agents' ids apart.
pub fn repair_template_id(agent: usize, seq: u64) -> u64 {
    debug_assert!(seq < 1 << 40 && (agent as u64) < (1 << 21));
    ((agent as u64 + 1) << 40) | (seq & ((1 << 40) - 1))
}

/// The start-up template of `kind` for `stripe`.
pub fn startup_template(kind: RunKind, stripe: usize) -> u64 {
    STARTUP_TEMPLATE_BASE | ((kind as u64) << 32) | stripe as u64
}

/// The start-up repair template of `stripe` for the loss of data position `position` alone.
pub fn startup_repair_template(stripe: usize, position: usize) -> u64 {
    debug_assert!(stripe < 1 << 24 && position < 1 << 8);
    STARTUP_TEMPLATE_BASE | (2 << 32) | ((position as u64) << 24) | stripe as u64
}

/// Whether a template is a repair's (installed at start-up or on first use).
pub fn is_repair_template(id: u64) -> bool {
    id < STARTUP_TEMPLATE_BASE || (id >> 32) & 0xff == 2
}

/// Whether `scheme`'s repair of one chunk is a plan of one slice, so that a template built
/// for one chunk size serves every size (runs resize it). ECPipe's pipeline cuts a chunk in a
/// fixed number of slices: its repair templates stay per size class, installed on first use.
pub fn repair_unsliced(scheme: Scheme) -> bool {
    scheme != Scheme::Ecpipe
}

/// The repair parts of `stripe` for the loss of `lost` (rebuilt at the designated agent).
pub fn repair_parts(
    code: Code,
    scheme: Scheme,
    placement: &Placement,
    stripe: usize,
    lost: &[usize],
) -> Result<(Vec<VertexPart>, Vec<usize>), ExecError> {
    let agent = placement.node_of(stripe, 0);
    let mut spec = PlanSpec::new(
        scheme,
        code,
        graph::Request::Repair {
            lost: lost.to_vec(),
            target: Target::Node(agent),
        },
        STARTUP_CHUNK_BYTES,
    );
    spec.placement = graph::Placement {
        nodes: placement.members(stripe),
        agent,
    };
    let plan = graph::build(&spec).map_err(|source| ExecError::NoPlan {
        what: "repair",
        source,
    })?;
    let parts = plan
        .parts(stripe as u64)
        .map_err(|source| ExecError::Lowering {
            what: "repair",
            source,
        })?;
    Ok((parts, plan.nodes()))
}

/// The template chunk size start-up plans are built with (runs give their own).
const STARTUP_CHUNK_BYTES: usize = 4096;

/// The engine side of a node: the engine addresses of the cluster, this node's launcher, the
/// repair runner and installed repair templates, the chunks delivered to this node's host and
/// the inputs of the writes it runs.
#[derive(Debug)]
pub struct PlanExec {
    /// Every node's peer address, by id (the engine's `Connect` names it; its frames travel
    /// on the first loop's links there).
    pub addrs: Vec<SocketAddr>,
    /// Repair templates installed on their participants on first use, by (stripe, lost
    /// positions, size class): (template id, participants). Forgotten after a failed run (a
    /// participant may have restarted without them), so that they are installed again.
    repair_templates: Mutex<HashMap<TemplateKey, (u64, Vec<usize>)>>,
    outputs: Mutex<HashMap<u64, Delivered>>,
    /// Data chunks of writes this node runs as agent, by nonce.
    inputs: Mutex<HashMap<u64, Vec<Arc<Vec<u8>>>>>,
    next_nonce: AtomicU64,
    /// Repair templates this node installed so far (never reset, so a rebuilt runner does
    /// not reuse an id the hosts still hold).
    next_template: AtomicU64,
    /// This node's engine (set once its host runs), for connecting to peers' engines.
    engine: std::sync::OnceLock<engine::Engine>,
    launcher: std::sync::OnceLock<Launcher>,
    /// Whether this node's start-up templates are installed: writes and reads of the stripes
    /// it leads as designated agent.
    startup: std::sync::OnceLock<bool>,
    /// Participants of the start-up repair templates of the stripes this node is the
    /// designated agent of, by (stripe, lost data position).
    startup_repairs: Mutex<HashMap<(usize, usize), Vec<usize>>>,
    /// By stripe, the fencing token of this node's term (`set_fence`).
    fences: Mutex<HashMap<usize, u64>>,
    /// Runs given up (a participant went down), by nonce, with when.
    abandoned: Mutex<HashMap<u64, std::time::Instant>>,
    pub counters: PlanCounters,
}

/// Where a repair plan runs: the code and scheme, the stripe's members by position, the node
/// the lost positions are rebuilt at, and every position not usable.
#[derive(Clone, Copy, Debug)]
pub struct RepairAt<'a> {
    pub code: Code,
    pub scheme: Scheme,
    pub mode: ExecMode,
    pub members: &'a [usize],
    pub agent: usize,
    pub stripe: usize,
    pub lost: &'a [usize],
}

/// The normal-read parts of `stripe`: each data position held by another node than the agent
/// sends its chunk to the agent, which keeps it (one vertex per position on each side).
pub fn read_parts(placement: &Placement, k: usize, stripe: usize) -> Vec<VertexPart> {
    let agent = placement.node_of(stripe, 0);
    let mut parts = Vec::new();
    let c = |p: usize| ChunkRef {
        stripe: stripe as u64,
        index: p as u32,
    };
    for p in 0..k {
        let node = placement.node_of(stripe, p);
        if node == agent {
            continue;
        }
        parts.push(VertexPart {
            vertex: 2 * p,
            node,
            chunk_bytes: STARTUP_CHUNK_BYTES,
            slice_bytes: STARTUP_CHUNK_BYTES,
            local: vec![c(p)],
            inputs: vec![],
            coeffs: vec![1],
            outputs: vec![OutputSpec {
                sends: vec![OutEdge { edge: p, to: agent }],
                store: None,
            }],
        });
        parts.push(VertexPart {
            vertex: 2 * p + 1,
            node: agent,
            chunk_bytes: STARTUP_CHUNK_BYTES,
            slice_bytes: STARTUP_CHUNK_BYTES,
            local: vec![],
            inputs: vec![InEdge {
                edge: p,
                from: node,
            }],
            coeffs: vec![1],
            outputs: vec![OutputSpec {
                sends: vec![],
                store: Some(c(p)),
            }],
        });
    }
    parts
}

/// The write parts of `stripe`: the scheme's encode plan with the stripe's placement (the
/// designated agent node `stripe` holds the data chunks). TriEC's is its tripartite encode:
/// the agent sends each data member its chunk, each data member stores it and sends its
/// products to the parity members, which add them up and store the parity.
pub fn write_parts(
    code: Code,
    scheme: Scheme,
    placement: &Placement,
    stripe: usize,
) -> Result<Option<Vec<VertexPart>>, ExecError> {
    let mut spec = PlanSpec::new(scheme, code, graph::Request::Encode, STARTUP_CHUNK_BYTES);
    spec.placement = graph::Placement {
        nodes: placement.members(stripe),
        agent: placement.node_of(stripe, 0),
    };
    let plan = graph::build(&spec).map_err(|source| ExecError::NoPlan {
        what: "encode",
        source,
    })?;
    plan.parts(stripe as u64)
        .map(Some)
        .map_err(|source| ExecError::Lowering {
            what: "encode",
            source,
        })
}

fn engine_mode(mode: ExecMode) -> Mode {
    match mode {
        ExecMode::Coherent => Mode::Coherent,
        ExecMode::Incoherent => Mode::Incoherent,
    }
}

/// The other nodes of `parts`, sorted, without `me`.
fn others(parts: impl IntoIterator<Item = usize>, me: usize) -> Vec<engine::NodeId> {
    let set: std::collections::BTreeSet<usize> = parts.into_iter().filter(|&n| n != me).collect();
    set.into_iter().map(|n| n as engine::NodeId).collect()
}

impl PlanExec {
    pub fn new(addrs: Vec<SocketAddr>, seed: u64) -> PlanExec {
        PlanExec {
            addrs,
            repair_templates: Mutex::new(HashMap::new()),
            outputs: Mutex::new(HashMap::new()),
            inputs: Mutex::new(HashMap::new()),
            next_nonce: AtomicU64::new(seed << 20),
            next_template: AtomicU64::new(1),
            engine: std::sync::OnceLock::new(),
            launcher: std::sync::OnceLock::new(),
            startup: std::sync::OnceLock::new(),
            startup_repairs: Mutex::new(HashMap::new()),
            abandoned: Mutex::new(HashMap::new()),
            counters: PlanCounters::default(),
            fences: Mutex::new(HashMap::new()),
        }
    }

    /// Sets the fencing token this node's runs of `stripe` carry (0: it holds no term).
    pub fn set_fence(&self, stripe: usize, token: u64) {
        let mut f = self.fences.lock().unwrap_or_else(PoisonError::into_inner);
        if token == 0 {
            f.remove(&stripe);
        } else {
            f.insert(stripe, token);
        }
    }

    fn fence(&self, stripe: usize) -> u64 {
        let f = self.fences.lock().unwrap_or_else(PoisonError::into_inner);
        f.get(&stripe).copied().unwrap_or(0)
    }

    /// Installs, on this node's host and without a message (`install`), this node's parts of
    /// the write and normal-read templates of every stripe it is a member of: 2 templates per
    /// stripe (n stripes when N ≥ n), whatever the value sizes; keeps `launcher` for the
    /// node's runs. Returns how many were installed.
    pub fn install_startup(
        &self,
        install: &mut dyn FnMut(u64, Vec<VertexPart>) -> Result<(), RunError>,
        launcher: Launcher,
        me: usize,
        code: Code,
        scheme: Scheme,
        placement: &Placement,
    ) -> Result<usize, ExecError> {
        let mut installed = 0;
        for stripe in 0..placement.node_count() {
            if !placement.members(stripe).contains(&me) {
                continue;
            }
            let mut templates = vec![(
                startup_template(RunKind::Read, stripe),
                read_parts(placement, code.k(), stripe),
            )];
            if let Some(parts) = write_parts(code, scheme, placement, stripe)? {
                templates.push((startup_template(RunKind::Write, stripe), parts));
            }
            // The repair of each data position alone (a degraded read of one chunk), for
            // the schemes whose template serves every chunk size.
            if repair_unsliced(scheme) {
                for p in 0..code.k() {
                    // A plan graph cannot build here is built (and fails) on first use instead,
                    // and the read falls back to the agent's repair: never a reason not to start.
                    let (parts, nodes) = match repair_parts(code, scheme, placement, stripe, &[p]) {
                        Ok(r) => r,
                        Err(e) => {
                            log::warn!(
                                "node {me}: no start-up repair template for stripe {stripe} \
                                 position {p}: {e}"
                            );
                            continue;
                        }
                    };
                    if placement.node_of(stripe, 0) == me {
                        self.startup_repairs
                            .lock()
                            .unwrap_or_else(PoisonError::into_inner)
                            .insert((stripe, p), nodes);
                    }
                    templates.push((startup_repair_template(stripe, p), parts));
                }
            }
            for (id, parts) in templates {
                let mine: Vec<VertexPart> = parts.into_iter().filter(|p| p.node == me).collect();
                if mine.is_empty() {
                    continue;
                }
                install(id, mine)?;
                installed += 1;
            }
        }
        self.counters
            .startup_templates
            .fetch_add(installed as u64, Ordering::Relaxed);
        let _ = self.launcher.set(launcher);
        let _ = self.startup.set(true);
        Ok(installed)
    }

    fn launcher(&self) -> Result<&Launcher, ExecError> {
        match (self.launcher.get(), self.startup.get()) {
            (Some(l), Some(true)) => Ok(l),
            _ => Err(ExecError::NotSetUp),
        }
    }

    /// Launches a run and waits for it; gives it up (an error) as soon as one of its other
    /// participants is down in this node's view (`up`), instead of waiting out its timeout for
    /// a node that stalled or died. A run given up still ends at its host (its timeout, or
    /// the loss of the node); the chunks it delivers meanwhile are dropped.
    fn run(
        &self,
        launcher: &Launcher,
        l: Launch,
        nonce: u64,
        up: &dyn Fn(usize) -> bool,
    ) -> Result<(), ExecError> {
        assert!(
            !super::calls::on_loop(),
            "an event loop would wait for the engine it drives"
        );
        let nodes = l.nodes.clone();
        let rx = launcher.launch(l);
        loop {
            match rx.recv_timeout(DOWN_CHECK) {
                Ok(r) => return Ok(r?),
                Err(mpsc::RecvTimeoutError::Disconnected) => {
                    return Err(ExecError::Run(RunError::HostSilent {
                        what: "finish the launch",
                    }))
                }
                Err(mpsc::RecvTimeoutError::Timeout) => {
                    if let Some(&n) = nodes.iter().find(|&&n| !up(n)) {
                        self.abandon(nonce);
                        self.counters.runs_given_up.fetch_add(1, Ordering::Relaxed);
                        return Err(ExecError::GivenUp { node: n });
                    }
                }
            }
        }
    }

    /// Drops the chunks a given-up run delivers from now on (forgotten after twice the run
    /// timeout, when its host has long ended it).
    fn abandon(&self, nonce: u64) {
        let now = std::time::Instant::now();
        let mut a = self
            .abandoned
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        a.retain(|_, at| now.duration_since(*at) < RUN_TIMEOUT * 2);
        a.insert(nonce, now);
        drop(a);
        self.take_outputs(nonce);
    }

    fn nonce(&self) -> u64 {
        self.next_nonce.fetch_add(1, Ordering::Relaxed)
    }

    fn take_outputs(&self, nonce: u64) -> Delivered {
        self.outputs
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(&nonce)
            .unwrap_or_default()
    }

    /// Writes a coded value of `stripe` (this node is its designated agent and every member
    /// is up) with the stripe's write template: the agent's encode part computes the parity
    /// and sends each member its chunk, carrying the member's start; each member stores its
    /// chunk as a record and its `Done` is the ack. Returns once every member acked.
    #[allow(clippy::too_many_arguments)]
    pub fn write(
        &self,
        code: Code,
        mode: ExecMode,
        placement: &Placement,
        stripe: usize,
        key: &[u8],
        version: u64,
        value: &[u8],
        meta: WriteMeta,
        up: &dyn Fn(usize) -> bool,
    ) -> Result<(), ExecError> {
        let launcher = self.launcher()?;
        let k = code.k();
        let chunk_bytes = value.len().div_ceil(k);
        if chunk_bytes == 0 {
            return Err(ExecError::EmptyValue);
        }
        let chunks: Vec<Arc<Vec<u8>>> = (0..k)
            .map(|i| {
                let a = (i * chunk_bytes).min(value.len());
                let b = ((i + 1) * chunk_bytes).min(value.len());
                let mut c = Vec::with_capacity(chunk_bytes);
                c.extend_from_slice(&value[a..b]);
                c.resize(chunk_bytes, 0);
                Arc::new(c)
            })
            .collect();
        let nonce = self.nonce();
        self.inputs
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(nonce, chunks);
        let payload = RunPayload {
            kind: RunKind::Write,
            nonce,
            stripe: stripe as u32,
            version,
            class_bytes: chunk_bytes as u32,
            key: key.to_vec(),
            write: Some(meta),
            range: None,
            fence: self.fence(stripe),
        }
        .encode();
        let agent = placement.node_of(stripe, 0);
        let members = others(placement.members(stripe), agent);
        let r = self.run(
            launcher,
            Launch {
                template: startup_template(RunKind::Write, stripe),
                nodes: members.clone(),
                acks: members,
                mode: engine_mode(mode),
                timeout: RUN_TIMEOUT,
                chunk_bytes: Some(chunk_bytes),
                payload,
            },
            nonce,
            up,
        );
        self.inputs
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(&nonce);
        self.take_outputs(nonce);
        r
    }

    /// Reads the data chunks of a coded value of `stripe` held by other nodes (this node is
    /// its designated agent) with the stripe's read template: one quiet start to each data
    /// member, one chunk back. Returns (position, chunk) for those positions.
    #[allow(clippy::too_many_arguments)]
    pub fn read(
        &self,
        code: Code,
        mode: ExecMode,
        placement: &Placement,
        stripe: usize,
        key: &[u8],
        version: u64,
        chunk_bytes: usize,
        up: &dyn Fn(usize) -> bool,
    ) -> Result<Vec<(usize, Vec<u8>)>, ExecError> {
        let launcher = self.launcher()?;
        let agent = placement.node_of(stripe, 0);
        let positions: Vec<usize> = (0..code.k())
            .filter(|&p| placement.node_of(stripe, p) != agent)
            .collect();
        let members = others(
            positions.iter().map(|&p| placement.node_of(stripe, p)),
            agent,
        );
        if members.is_empty() || chunk_bytes == 0 {
            return Err(ExecError::NothingToRead);
        }
        let nonce = self.nonce();
        let payload = RunPayload {
            kind: RunKind::Read,
            nonce,
            stripe: stripe as u32,
            version,
            class_bytes: chunk_bytes as u32,
            key: key.to_vec(),
            write: None,
            range: None,
            fence: self.fence(stripe),
        }
        .encode();
        let r = self.run(
            launcher,
            Launch {
                template: startup_template(RunKind::Read, stripe),
                nodes: members,
                acks: Vec::new(),
                mode: engine_mode(mode),
                timeout: RUN_TIMEOUT,
                chunk_bytes: Some(chunk_bytes),
                payload,
            },
            nonce,
            up,
        );
        let outs = self.take_outputs(nonce);
        r?;
        positions
            .iter()
            .map(|&p| {
                outs.iter()
                    .find(|(i, _)| *i as usize == p)
                    .map(|(_, b)| (p, b.to_vec()))
                    .filter(|(_, b)| b.len() == chunk_bytes)
                    .ok_or(ExecError::NotDelivered {
                        what: "read",
                        position: p,
                    })
            })
            .collect()
    }

    /// Rebuilds positions `wanted` of a coded value of stripe `at.stripe` at node `at.agent`,
    /// with the repair plan of the scheme for the loss of `at.lost` (every position not usable;
    /// it contains `wanted`). `chunk_bytes` is the value's chunk size. Returns the rebuilt
    /// chunks in the order of `wanted`. Installs the template on first use (the runner's lock
    /// is held for that only); runs are launched from this node's host, several at once.
    pub fn repair(
        &self,
        at: &RepairAt,
        wanted: &[usize],
        key: &[u8],
        version: u64,
        chunk_bytes: usize,
        up: &dyn Fn(usize) -> bool,
    ) -> Result<Vec<Vec<u8>>, ExecError> {
        let (stripe, fence) = (at.stripe, self.fence(at.stripe));
        self.run_repair(at, wanted, chunk_bytes, up, |nonce, class| RunPayload {
            kind: RunKind::Read,
            nonce,
            stripe: stripe as u32,
            version,
            class_bytes: class as u32,
            key: key.to_vec(),
            write: None,
            range: None,
            fence,
        })
    }

    /// Rebuilds byte range `range` of position `target` of page stripe `at.stripe` (a whole
    /// value's slot: its home's page) at node `at.agent`, with the repair plan of the scheme
    /// for the loss of `at.lost` (it contains `target`); each helper reads the same range of
    /// its page of the page stripe. What the helpers read is not checked against each other
    /// (a delta in flight can make the result wrong): the caller checks the rebuilt record
    /// (`agent::whole`).
    pub fn repair_range(
        &self,
        at: &RepairAt,
        target: usize,
        range: PageRange,
        up: &dyn Fn(usize) -> bool,
    ) -> Result<Vec<u8>, ExecError> {
        let t = at.stripe as u32;
        let len = range.len as usize;
        let mut out = self.run_repair(at, &[target], range_class(len), up, |nonce, class| {
            RunPayload {
                kind: RunKind::Range,
                nonce,
                stripe: t,
                version: 0,
                class_bytes: class as u32,
                key: Vec::new(),
                write: None,
                range: Some(range),
                // Pages are not a term's values: helpers read them for any agent, as they
                // answer the direct `Range` reads.
                fence: 0,
            }
        })?;
        let mut rebuilt = out.remove(0);
        rebuilt.truncate(len);
        Ok(rebuilt)
    }

    fn run_repair(
        &self,
        at: &RepairAt,
        wanted: &[usize],
        chunk_bytes: usize,
        up: &dyn Fn(usize) -> bool,
        payload: impl FnOnce(u64, usize) -> RunPayload,
    ) -> Result<Vec<Vec<u8>>, ExecError> {
        let launcher = self.launcher()?;
        let (class, run_bytes, (template, nodes)) = self
            .repair_run_template(at, chunk_bytes, true)?
            .expect("installed when missing");
        let nonce = self.nonce();
        let l = self.repair_launch(at, template, nodes, run_bytes, payload(nonce, class));
        self.count_repair_run();
        let ran = self.run(launcher, l, nonce, up);
        self.counters
            .degraded_plan_runs_in_flight
            .fetch_sub(1, Ordering::Relaxed);
        self.repair_outputs(nonce, wanted, chunk_bytes, ran)
    }

    /// The template a repair of `at` runs: (size class, the run's chunk size when it differs
    /// from the template's, (template id, participants)). One data chunk lost at the
    /// designated agent: the start-up template, resized to the run's chunk size. Otherwise a
    /// template per (loss pattern, size class), installed on first use when `install` (which
    /// waits for the participants), else `None` until it is (or while an install is under
    /// way: without `install` this never waits).
    #[allow(clippy::type_complexity)]
    fn repair_run_template(
        &self,
        at: &RepairAt,
        chunk_bytes: usize,
        install: bool,
    ) -> Result<Option<(usize, Option<usize>, (u64, Vec<usize>))>, ExecError> {
        let &RepairAt {
            code,
            scheme,
            members,
            agent,
            stripe,
            lost,
            ..
        } = at;
        let startup = match lost {
            [p] if members.first() == Some(&agent) => self
                .startup_repairs
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .get(&(stripe, *p))
                .map(|nodes| (startup_repair_template(stripe, *p), nodes.clone())),
            _ => None,
        };
        if let Some(t) = startup {
            return Ok(Some((chunk_bytes, Some(chunk_bytes), t)));
        }
        let class = class_bytes(chunk_bytes);
        let tkey = (stripe, lost.to_vec(), class);
        let t = if install {
            Some(self.repair_template(code, scheme, members, agent, &tkey)?)
        } else {
            // Never waits: an install holds the lock until its participants answer, and the
            // caller may be the event loop that drives the engine they answer through.
            match self.repair_templates.try_lock() {
                Ok(templates) => templates.get(&tkey).cloned(),
                Err(std::sync::TryLockError::Poisoned(p)) => p.into_inner().get(&tkey).cloned(),
                Err(std::sync::TryLockError::WouldBlock) => None,
            }
        };
        Ok(t.map(|t| (class, None, t)))
    }

    /// One more degraded read's run in flight (and the most at once).
    fn count_repair_run(&self) {
        let c = &self.counters;
        let now = c
            .degraded_plan_runs_in_flight
            .fetch_add(1, Ordering::Relaxed)
            + 1;
        c.degraded_plan_runs_in_flight_max
            .fetch_max(now, Ordering::Relaxed);
    }

    fn repair_launch(
        &self,
        at: &RepairAt,
        template: u64,
        nodes: Vec<usize>,
        run_bytes: Option<usize>,
        payload: RunPayload,
    ) -> Launch {
        Launch {
            template,
            nodes: others(nodes, at.agent),
            acks: Vec::new(),
            mode: engine_mode(at.mode),
            timeout: RUN_TIMEOUT,
            chunk_bytes: run_bytes,
            payload: payload.encode(),
        }
    }

    /// The chunks at positions `wanted` a repair run delivered, once it `ran`: on a failure,
    /// the templates are forgotten (a participant may have restarted without them: they are
    /// installed again next time).
    fn repair_outputs(
        &self,
        nonce: u64,
        wanted: &[usize],
        chunk_bytes: usize,
        ran: Result<(), ExecError>,
    ) -> Result<Vec<Vec<u8>>, ExecError> {
        // The agent's host filed its outputs before the launch finished.
        let outs = self.take_outputs(nonce);
        if let Err(e) = ran {
            match super::calls::on_loop() {
                true => self.forget_repair_templates_if_free(),
                false => self.forget_repair_templates(),
            }
            return Err(ExecError::RepairFailed(Box::new(e)));
        }
        wanted
            .iter()
            .map(|&p| {
                outs.iter()
                    .find(|(i, _)| *i as usize == p)
                    .map(|(_, b)| b[..chunk_bytes.min(b.len())].to_vec())
                    .filter(|b| b.len() == chunk_bytes)
                    .ok_or(ExecError::NotDelivered {
                        what: "repair",
                        position: p,
                    })
            })
            .collect()
    }

    /// Whether a repair of `at` with chunks of `chunk_bytes` can be launched without waiting
    /// (its template is installed: [`PlanExec::repair_start`]).
    pub fn repair_ready(&self, at: &RepairAt, chunk_bytes: usize) -> bool {
        self.launcher().is_ok()
            && matches!(
                self.repair_run_template(at, chunk_bytes, false),
                Ok(Some(_))
            )
    }

    /// Launches the repair of a degraded read as [`PlanExec::repair`] does, without waiting:
    /// `done` is called on the host's thread when the run ends (true: it succeeded), and
    /// [`PlanExec::repair_finish`] then gives its chunks. `None`, and nothing launched, when
    /// the run would first have to install its template (a worker does that) or the engine
    /// is not set up.
    #[allow(clippy::too_many_arguments)]
    pub fn repair_start(
        &self,
        at: &RepairAt,
        key: &[u8],
        version: u64,
        chunk_bytes: usize,
        done: impl FnOnce(bool) + Send + 'static,
    ) -> Option<u64> {
        let launcher = self.launcher().ok()?;
        let (class, run_bytes, (template, nodes)) =
            self.repair_run_template(at, chunk_bytes, false).ok()??;
        let nonce = self.nonce();
        let payload = RunPayload {
            kind: RunKind::Read,
            nonce,
            stripe: at.stripe as u32,
            version,
            class_bytes: class as u32,
            key: key.to_vec(),
            write: None,
            range: None,
            fence: self.fence(at.stripe),
        };
        let l = self.repair_launch(at, template, nodes, run_bytes, payload);
        self.count_repair_run();
        launcher.launch_then(l, move |r| done(r.is_ok()));
        Some(nonce)
    }

    /// The chunks at `wanted` of a run [`PlanExec::repair_start`] launched, once it ended
    /// (`ran`: it succeeded).
    pub fn repair_finish(
        &self,
        nonce: u64,
        wanted: &[usize],
        chunk_bytes: usize,
        ran: bool,
    ) -> Result<Vec<Vec<u8>>, ExecError> {
        self.counters
            .degraded_plan_runs_in_flight
            .fetch_sub(1, Ordering::Relaxed);
        let ran = match ran {
            true => Ok(()),
            false => Err(ExecError::Run(RunError::Failed(
                "the repair run failed".into(),
            ))),
        };
        self.repair_outputs(nonce, wanted, chunk_bytes, ran)
    }

    /// Gives up a run [`PlanExec::repair_start`] launched that will not be finished (its read
    /// went to a worker): the chunks it delivers are dropped.
    pub fn repair_give_up(&self, nonce: u64) {
        self.counters
            .degraded_plan_runs_in_flight
            .fetch_sub(1, Ordering::Relaxed);
        self.counters.runs_given_up.fetch_add(1, Ordering::Relaxed);
        self.abandon(nonce);
    }

    /// The repair template of `tkey`, built and installed on its participants on first use:
    /// this node's parts locally, the others' with one `install` message each from this
    /// node's engine (on the connections its runs use).
    fn repair_template(
        &self,
        code: Code,
        scheme: Scheme,
        members: &[usize],
        agent: usize,
        tkey: &TemplateKey,
    ) -> Result<(u64, Vec<usize>), ExecError> {
        assert!(
            !super::calls::on_loop(),
            "an event loop would wait for the engine it drives"
        );
        let launcher = self.launcher()?;
        // Held over the install: two reads needing one template install it once.
        let mut templates = self
            .repair_templates
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if let Some(t) = templates.get(tkey) {
            return Ok(t.clone());
        }
        let (stripe, lost, class) = tkey.clone();
        let mut spec = PlanSpec::new(
            scheme,
            code,
            graph::Request::Repair {
                lost,
                target: Target::Node(agent),
            },
            class,
        );
        spec.placement = graph::Placement {
            nodes: members.to_vec(),
            agent,
        };
        let plan = graph::build(&spec).map_err(|source| ExecError::NoPlan {
            what: "repair",
            source,
        })?;
        let parts = plan
            .parts(stripe as u64)
            .map_err(|source| ExecError::Lowering {
                what: "repair",
                source,
            })?;
        let id = repair_template_id(agent, self.next_template.fetch_add(1, Ordering::Relaxed));
        launcher
            .install_everywhere(id, parts, RUN_TIMEOUT)
            .map_err(ExecError::Install)?;
        self.counters
            .plan_templates_installed
            .fetch_add(1, Ordering::Relaxed);
        let t = (id, plan.nodes());
        templates.insert(tkey.clone(), t.clone());
        Ok(t)
    }

    fn forget_repair_templates(&self) {
        self.repair_templates
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clear();
    }

    /// [`PlanExec::forget_repair_templates`] from an event loop, which must not wait for an
    /// install under way (the loop may drive the engine it waits on): then the worker that the
    /// loop's read goes to forgets them when its own run fails.
    fn forget_repair_templates_if_free(&self) {
        match self.repair_templates.try_lock() {
            Ok(mut t) => t.clear(),
            Err(std::sync::TryLockError::Poisoned(p)) => p.into_inner().clear(),
            Err(std::sync::TryLockError::WouldBlock) => {}
        }
    }

    /// Engine frames this node sent and received (every kind but Hello; a node's frames to
    /// itself excluded).
    pub fn frame_counts(&self) -> (u64, u64) {
        self.engine.get().map_or((0, 0), |e| e.frame_counts())
    }

    /// Remembers this node's engine.
    pub fn set_engine(&self, e: engine::Engine) {
        let _ = self.engine.set(e);
    }

    /// The engine's buffer pool, once the engine is set.
    pub fn pool(&self) -> Option<&engine::BufferPool> {
        self.engine.get().map(|e| e.pool())
    }

    /// Tells this node's engine that `peer` answers again (its first heartbeat answer, or after
    /// it restarted or came back): plans may use it again. The frames travel on the loops'
    /// links, which connect when a frame is queued (`carrier::lane`).
    pub fn connect(&self, peer: usize) {
        if let (Some(e), Some(addr)) = (self.engine.get(), self.addrs.get(peer)) {
            e.post_all([engine::WorkRequest::Connect {
                peer: peer as engine::NodeId,
                addr: addr.to_string(),
            }]);
        }
    }

    fn deliver(&self, nonce: u64, index: u32, bytes: Arc<Vec<u8>>) {
        if self
            .abandoned
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .contains_key(&nonce)
        {
            return;
        }
        self.outputs
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .entry(nonce)
            .or_default()
            .push((index, bytes));
    }

    fn input_of(&self, nonce: u64, index: u32) -> Option<Arc<Vec<u8>>> {
        self.inputs
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(&nonce)
            .and_then(|c| c.get(index as usize).cloned())
    }
}

/// A run's input of `class` bytes: `data` zero-padded, in a buffer of the engine's pool. The
/// engine returns a run's buffers to its pool once sent: an input allocated elsewhere would
/// grow the pool by one buffer per run, up to its bound.
fn pooled_input(ctx: &HostCtx, data: &[u8], class: usize) -> Vec<u8> {
    let mut buf = ctx.pool().take(class);
    buf[..data.len()].copy_from_slice(data);
    buf[data.len()..].fill(0);
    buf
}

fn lock_store(s: &Mutex<ChunkStore>) -> std::sync::MutexGuard<'_, ChunkStore> {
    s.lock().unwrap_or_else(PoisonError::into_inner)
}

/// The engine host's application on a cache node: a read's local inputs are this node's chunk
/// records of the payload's key and version and its outputs go to the waiting agent; a
/// write's inputs are the agent's data chunks and its outputs are stored as records.
#[derive(Debug)]
pub struct CacheApp {
    /// This node's id, for messages.
    id: usize,
    /// The node's chunk store (the node holds the same).
    store: Arc<Mutex<ChunkStore>>,
    /// The node's engine path: write inputs, delivered outputs, counters.
    exec: Arc<PlanExec>,
    /// Test-only delay of a repair helper's input (see [`INPUT_DELAY_ENV`]).
    pub repair_input_delay: Duration,
}

impl CacheApp {
    pub fn new(
        id: usize,
        store: Arc<Mutex<ChunkStore>>,
        exec: Arc<PlanExec>,
        debug_commands: bool,
    ) -> CacheApp {
        let delay = std::env::var(INPUT_DELAY_ENV)
            .ok()
            .filter(|_| debug_commands)
            .and_then(|v| v.parse::<u64>().ok())
            .unwrap_or(0);
        CacheApp {
            id,
            store,
            exec,
            repair_input_delay: Duration::from_millis(delay),
        }
    }
}

impl Application for CacheApp {
    fn input(
        &mut self,
        ctx: &HostCtx,
        run: &RunInfo,
        chunk: ChunkRef,
    ) -> Result<Arc<Vec<u8>>, AppError> {
        let (x, id) = (&self.exec, self.id);
        let p = RunPayload::decode(&run.payload).map_err(AppError::new)?;
        x.counters.plan_inputs.fetch_add(1, Ordering::Relaxed);
        if p.kind == RunKind::Write {
            return x.input_of(p.nonce, chunk.index).ok_or_else(|| {
                AppError::new(format!(
                    "node {id}: no data chunk {} for this write",
                    chunk.index
                ))
            });
        }
        if !self.repair_input_delay.is_zero() && is_repair_template(run.template) {
            std::thread::sleep(self.repair_input_delay);
        }
        if let Some(r) = p.range {
            let class = p.class_bytes as usize;
            if r.len as usize > class {
                return Err(AppError::new(format!(
                    "node {id}: a range of {} bytes exceeds the plan's {class}",
                    r.len
                )));
            }
            let key = (p.stripe, chunk.index as u8, r.page);
            let got = lock_store(&self.store).range(key, r.offset, r.len);
            let (_, bytes) = got.map_err(|e| AppError::new(format!("node {id}: {e}")))?;
            return Ok(Arc::new(pooled_input(ctx, &bytes, class)));
        }
        let mut store = self.store.lock().unwrap_or_else(PoisonError::into_inner);
        if let Err(seen) = store.admit(p.stripe, p.fence) {
            return Err(AppError::new(format!(
                "node {id}: {}",
                crate::carrier::peer::fenced_out(p.stripe, p.fence, seen)
            )));
        }
        let rec = store
            .get(p.stripe, chunk.index as u8, &p.key, p.version)
            .ok_or_else(|| {
                AppError::new(format!(
                    "node {id}: no record of position {} version {}",
                    chunk.index, p.version
                ))
            })?;
        let (h, data) = record::parse(rec).map_err(|e| AppError::new(format!("node {id}: {e}")))?;
        if h.version != p.version || h.key != p.key || u32::from(h.chunk_index) != chunk.index {
            return Err(AppError::new(format!(
                "node {id}: record of another version"
            )));
        }
        let class = p.class_bytes as usize;
        if data.len() > class {
            return Err(AppError::new(format!(
                "node {id}: chunk of {} bytes exceeds the plan's {class}",
                data.len()
            )));
        }
        let buf = pooled_input(ctx, data, class);
        drop(store);
        Ok(Arc::new(buf))
    }

    fn output(
        &mut self,
        _ctx: &HostCtx,
        run: &RunInfo,
        chunk: ChunkRef,
        bytes: Arc<Vec<u8>>,
    ) -> Result<(), AppError> {
        let x = &self.exec;
        let p = RunPayload::decode(&run.payload).map_err(AppError::new)?;
        match p.write {
            None => {
                x.deliver(p.nonce, chunk.index, bytes);
                Ok(())
            }
            Some(w) => {
                let h = Header {
                    kind: Kind::Coded,
                    chunk_index: chunk.index as u8,
                    // A write runs on its plan only with every member up.
                    written_around: false,
                    key: p.key,
                    version: p.version,
                    value_bytes: w.value_bytes,
                    flags: w.flags,
                    exptime: w.exptime,
                    trail: w.trail,
                };
                let rec = record::encode(&h, &bytes);
                let mut store = self.store.lock().unwrap_or_else(PoisonError::into_inner);
                if let Err(seen) = store.admit(p.stripe, p.fence) {
                    return Err(AppError::new(crate::carrier::peer::fenced_out(
                        p.stripe, p.fence, seen,
                    )));
                }
                store
                    .put(p.stripe, rec, w.watermark)
                    .map_err(AppError::new)?;
                drop(store);
                x.counters
                    .plan_records_stored
                    .fetch_add(1, Ordering::Relaxed);
                Ok(())
            }
        }
    }

    fn started(&mut self, ctx: &HostCtx, run: &RunInfo) {
        // Counted when the run starts here, so that the count is whole once the agent has
        // its result (a quiet participant's part may finish after the agent's).
        if run.runner != ctx.node() {
            self.exec
                .counters
                .plan_starts
                .fetch_add(1, Ordering::Relaxed);
        }
    }

    fn message(&mut self, _ctx: &HostCtx, _from: engine::NodeId, _req: u64, _body: &[u8]) {}
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn startup_template_ids_never_meet() {
        let mut seen = std::collections::HashSet::new();
        for stripe in [0usize, 1, 8, 1000] {
            for id in [
                startup_template(RunKind::Read, stripe),
                startup_template(RunKind::Write, stripe),
            ] {
                assert!(!is_repair_template(id));
                assert!(seen.insert(id));
            }
            for p in [0usize, 1, 5, 11] {
                let id = startup_repair_template(stripe, p);
                assert!(is_repair_template(id) && id >= STARTUP_TEMPLATE_BASE);
                assert!(seen.insert(id), "stripe {stripe} position {p}");
            }
        }
        assert!(is_repair_template(repair_template_id(3, 7)));
    }

    #[test]
    fn repair_template_ids_of_agents_never_meet() {
        let mut seen = std::collections::HashSet::new();
        for agent in [0usize, 1, 2, 8, 1000] {
            for seq in [1u64, 2, 3, (1 << 40) - 1] {
                let id = repair_template_id(agent, seq);
                assert!(id < STARTUP_TEMPLATE_BASE);
                assert!(seen.insert(id), "agent {agent} seq {seq}: id {id} taken");
            }
        }
    }

    #[test]
    fn payload_round_trip_and_bad_lengths() {
        let mut p = RunPayload {
            kind: RunKind::Read,
            nonce: 7,
            stripe: 3,
            version: 99,
            class_bytes: 4096,
            key: b"user:1".to_vec(),
            write: None,
            range: None,
            fence: 41,
        };
        assert_eq!(RunPayload::decode(&p.encode()).unwrap(), p);
        p.kind = RunKind::Write;
        p.write = Some(WriteMeta {
            value_bytes: 8192,
            flags: 5,
            exptime: -1,
            watermark: 12,
            trail: [3, 2, 1],
        });
        let b = p.encode();
        assert_eq!(RunPayload::decode(&b).unwrap(), p);
        assert!(RunPayload::decode(&b[..b.len() - 1]).is_err());
        let range = RunPayload {
            kind: RunKind::Range,
            write: None,
            range: Some(PageRange {
                page: 9,
                offset: 8448,
                len: 8290,
            }),
            key: Vec::new(),
            ..p.clone()
        };
        let rb = range.encode();
        assert_eq!(RunPayload::decode(&rb).unwrap(), range);
        // A range run's tail is 12 bytes, a write's meta is not a range, nor the reverse.
        assert!(RunPayload::decode(&rb[..rb.len() - 1]).is_err());
        let mut as_write = rb.clone();
        as_write[0] = RunKind::Write as u8;
        assert!(RunPayload::decode(&as_write).is_err());
        let mut as_range = b.clone();
        as_range[0] = RunKind::Range as u8;
        assert!(RunPayload::decode(&as_range).is_err());
        assert!(RunPayload::decode(&[0; 10]).is_err());
        let mut long = vec![0u8; PAYLOAD_HEAD + 251];
        long[25..27].copy_from_slice(&251u16.to_le_bytes());
        // The fence sits after the key's length.
        let b = p.encode();
        assert_eq!(u64::from_le_bytes(b[27..35].try_into().unwrap()), 41);
        assert!(RunPayload::decode(&long).is_err());
    }

    #[test]
    fn read_parts_send_each_remote_data_chunk_to_the_agent() {
        let placement = Placement::new(9, 9);
        let parts = read_parts(&placement, 6, 4);
        // Positions 1..6 on nodes 5..9: a sender there and a receiver at node 4 each.
        assert_eq!(parts.len(), 10);
        for p in &parts {
            p.validate().unwrap();
        }
        assert!(parts
            .iter()
            .filter(|p| p.node == 4)
            .all(|p| p.inputs.len() == 1));
        let write = write_parts(Code::rs(6, 3).unwrap(), Scheme::Rs, &placement, 4)
            .unwrap()
            .unwrap();
        assert!(write
            .iter()
            .any(|p| p.node == 3 && p.outputs[0].store.is_some()));
        // TriEC: the agent feeds the data members, which feed the parity members (nodes 1..4
        // hold positions 6..9 of stripe 4) and store their chunks.
        let triec = write_parts(Code::rs(6, 3).unwrap(), Scheme::Triec, &placement, 4)
            .unwrap()
            .unwrap();
        for node in [1, 2, 3] {
            let parity = triec
                .iter()
                .find(|p| p.node == node && p.outputs.iter().any(|o| o.store.is_some()))
                .expect("a parity part");
            assert_eq!(
                parity.inputs.len(),
                6,
                "node {node}: one product per data member"
            );
        }
    }

    /// An event loop asks for an installed repair template without waiting: while an install
    /// holds the templates (a worker waiting for the participants, whose answers the loop's
    /// engine carries), the answer is "not now" instead of a wait, and a failed run on the
    /// loop leaves the templates to the worker; once free, the template is found.
    #[test]
    fn a_loop_never_waits_for_an_install_under_way() {
        let x = PlanExec::new(Vec::new(), 1);
        let members: Vec<usize> = (0..9).collect();
        let lost = [1, 2];
        let at = RepairAt {
            code: Code::rs(6, 3).unwrap(),
            scheme: Scheme::Rs,
            mode: ExecMode::Coherent,
            members: &members,
            agent: 0,
            stripe: 0,
            lost: &lost,
        };
        let class = class_bytes(1000);
        x.repair_templates
            .lock()
            .unwrap()
            .insert((0, lost.to_vec(), class), (77, members.clone()));
        let held = x.repair_templates.lock().unwrap();
        assert!(matches!(x.repair_run_template(&at, 1000, false), Ok(None)));
        x.forget_repair_templates_if_free();
        drop(held);
        assert_eq!(
            x.repair_run_template(&at, 1000, false).unwrap(),
            Some((class, None, (77, members.clone())))
        );
        // Another size class has no template yet.
        assert!(matches!(
            x.repair_run_template(&at, 100_000, false),
            Ok(None)
        ));
        x.forget_repair_templates_if_free();
        assert!(matches!(x.repair_run_template(&at, 1000, false), Ok(None)));
    }

    #[test]
    fn range_classes_pad_at_most_an_eighth() {
        assert_eq!(range_class(0), 64);
        assert_eq!(range_class(1), 64);
        assert_eq!(range_class(65), 128);
        assert_eq!(range_class(8290), 9216);
        assert_eq!(range_class(8192), 8192);
        let mut classes = std::collections::BTreeSet::new();
        for len in 1..=(1 << 20) {
            let c = range_class(len);
            assert!(c >= len && (c - len) * 8 <= len.max(64 * 8), "{len} → {c}");
            classes.insert(c);
        }
        // Few lengths for the engine's buffer pool: about 8 per power of two.
        assert!(classes.len() < 8 * 21, "{} classes", classes.len());
    }

    #[test]
    fn size_classes() {
        assert_eq!(class_bytes(1), 64);
        assert_eq!(class_bytes(64), 64);
        assert_eq!(class_bytes(65), 128);
        assert_eq!(class_bytes(171), 256);
    }
}
