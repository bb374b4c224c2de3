//! The α-β model (INEC §III-B, Table I): every primitive costs α·c + β, and a plan costs the
//! critical path of its primitives. The model is computed from the plan and the constants
//! alone; it does not run the simulator (the two are compared in the tests and printed side
//! by side by `inec plan` and `inec model`).
//!
//! Constants come from a calibration file (`calibration/default.json` is built in, see
//! [`Calibration::builtin`]), a measurement of the compute rates in this process
//! ([`measure_compute`]), or flags; never from constants baked into the code.
//!
//! # One primitive (Table I, as far as it applies to TCP)
//!
//! A vertex v with `in_v` network inputs, `out_v` network sends, `m_v` messages (slices) in
//! and out, and a calculator whose coefficients cost `γ_v` seconds per byte of chunk (Σ over
//! the non-zero coefficients of 1/xor-rate for a 1 and 1/mul-add-rate otherwise) costs, on its
//! own, with chunk size c:
//!
//! ```text
//! α_v = γ_v                       Operations: compute, from the calibrated kernel rates
//!     + in_v/B + out_v/B          Communication: n·c/B for the chunks it receives and sends
//! β_v = L·[in_v > 0] + o·m_v      Communication: latency; per-message software cost
//! ```
//!
//! Left out: the Gains metrics of Table I (in-network states, CPU involvement, DMA traffic)
//! describe work a SmartNIC takes off the host; on TCP the host does everything, so their
//! cost is folded into the per-message cost o and the compute rates.
//!
//! # A plan
//!
//! The plan's time is the critical path through the DAG, with the vertices' terms as the
//! edge and vertex weights and each node's NIC and calculator serving one thing at a time.
//! With s slices per chunk and slice size σ = c/s:
//!
//! 1. **One slice through the DAG** (`T₁`). Vertices in topological order: a vertex is ready
//!    when its last input has arrived and no earlier than its first input's start (or the end
//!    of what its node received for earlier vertices) plus the time its node's receive side
//!    needs for all of them (Σ σ/B + o, then L); it computes for γ_v·σ once
//!    its node's calculator is free; each send then holds the node's transmit side for
//!    σ/B + o and arrives L later. Edges inside a node are free.
//! 2. **The other s − 1 slices** follow at the pace of the slowest stage: the busiest transmit
//!    side, receive side or calculator of any node, per slice (`b`).
//!
//! ```text
//! time = T₁(σ) + (s − 1)·b(σ)          for an unsliced plan (s = 1): time = T₁(c)
//! β    = time with every byte term zero (latency and per-message cost along the path)
//! α    = (time − β) / c
//! ```
//!
//! What it ignores and the simulator models: the order in which a NIC serves messages that
//! become ready at different times (the model's receive bound assumes back-to-back arrival),
//! slices of different edges interleaving on a NIC, and a shorter last slice.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Instant;

use serde::{Deserialize, Serialize};

use crate::account::Accounting;
use crate::plan::Plan;
use crate::sim::NetConfig;
use crate::PlanError;

/// The calibration file in the source tree, built into the binary.
pub const BUILTIN_CALIBRATION_PATH: &str = "crates/graph/calibration/default.json";
const BUILTIN_CALIBRATION: &str = include_str!("../calibration/default.json");

/// Measured constants of a cluster and of the codec kernel in use.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Calibration {
    /// Where the numbers come from (machine, command).
    pub description: String,
    /// The `gf` kernel the compute rates were measured with.
    pub kernel: String,
    /// NIC bandwidth, each direction, in gigabits per second.
    pub bandwidth_gbit_s: f64,
    /// One-way message latency in microseconds.
    pub latency_us: f64,
    /// Per-message cost in microseconds.
    pub message_overhead_us: f64,
    /// XOR rate, gigabytes of source per second.
    pub xor_gbyte_s: f64,
    /// GF(2^8) multiply-accumulate rate, gigabytes of source per second.
    pub mul_add_gbyte_s: f64,
}

/// A calibration constant out of range: `positive` ones must be > 0, the others >= 0, all
/// finite.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error(
    "{name} is {value}, expected a finite number {}",
    if *positive { "> 0" } else { ">= 0" }
)]
pub struct BadConstant {
    pub name: &'static str,
    pub value: f64,
    pub positive: bool,
}

impl Calibration {
    /// Reads and checks a calibration file.
    pub fn load(path: &Path) -> Result<Calibration, PlanError> {
        let text = std::fs::read_to_string(path).map_err(|e| PlanError::BadCalibration {
            path: path.display().to_string(),
            reason: e.to_string(),
        })?;
        Calibration::parse(&text, &path.display().to_string())
    }

    /// Parses and checks the text of a calibration file; `origin` names it in errors.
    pub fn parse(text: &str, origin: &str) -> Result<Calibration, PlanError> {
        let bad = |reason: String| PlanError::BadCalibration {
            path: origin.to_string(),
            reason,
        };
        let c: Calibration = serde_json::from_str(text).map_err(|e| bad(e.to_string()))?;
        c.validate().map_err(|e| bad(e.to_string()))?;
        Ok(c)
    }

    /// The default calibration: `crates/graph/calibration/default.json`
    /// ([`BUILTIN_CALIBRATION_PATH`]) as it was when this crate was built.
    pub fn builtin() -> Calibration {
        Calibration::parse(BUILTIN_CALIBRATION, BUILTIN_CALIBRATION_PATH)
            .expect("the built-in calibration file is valid (checked by a test)")
    }

    /// A warning when the compute rates were measured with another kernel than the one this
    /// process uses (`gf::kernel_name()`), `None` when they agree.
    pub fn kernel_mismatch(&self) -> Option<String> {
        let running = gf::kernel_name();
        (self.kernel != running).then(|| {
            format!(
                "warning: the calibration's compute rates were measured with kernel {}, \
                 this process uses {running}; predictions may be off (use --calibrate or \
                 --xor-gbyte-s/--mul-add-gbyte-s)",
                self.kernel
            )
        })
    }

    /// Every rate positive, every time non-negative, all finite.
    pub fn validate(&self) -> Result<(), BadConstant> {
        for (name, v, positive) in [
            ("bandwidth_gbit_s", self.bandwidth_gbit_s, true),
            ("latency_us", self.latency_us, false),
            ("message_overhead_us", self.message_overhead_us, false),
            ("xor_gbyte_s", self.xor_gbyte_s, true),
            ("mul_add_gbyte_s", self.mul_add_gbyte_s, true),
        ] {
            if !v.is_finite() || v < 0.0 || (positive && v == 0.0) {
                return Err(BadConstant {
                    name,
                    value: v,
                    positive,
                });
            }
        }
        Ok(())
    }

    /// The simulator's view of these constants (uniform NICs).
    pub fn net(&self) -> NetConfig {
        NetConfig {
            bandwidth_bytes_s: self.bandwidth_gbit_s * 1e9 / 8.0,
            latency_s: self.latency_us * 1e-6,
            message_overhead_s: self.message_overhead_us * 1e-6,
            xor_bytes_s: self.xor_gbyte_s * 1e9,
            mul_add_bytes_s: self.mul_add_gbyte_s * 1e9,
            node_bandwidth_bytes_s: Default::default(),
            link_bandwidth_bytes_s: Default::default(),
        }
    }
}

/// Compute rates measured in this process.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ComputeRates {
    /// The kernel measured (`gf::kernel_name()`).
    pub kernel: String,
    pub xor_gbyte_s: f64,
    pub mul_add_gbyte_s: f64,
    /// What was timed.
    pub method: String,
}

/// Times the process-wide `gf` kernel's XOR and multiply-accumulate: the best of `runs` runs
/// of `passes` passes over a `buffer_bytes` buffer each (warm cache, one thread). This is the
/// one function of the crate that reads a clock; `inec plan|model --calibrate` uses
/// `measure_compute(256 << 10, 16, 5)` (about 40 MiB of work per operation, milliseconds) and
/// the `calibrate` example a longer run.
pub fn measure_compute(buffer_bytes: usize, passes: usize, runs: usize) -> ComputeRates {
    let (buffer_bytes, passes, runs) = (buffer_bytes.max(64), passes.max(1), runs.max(1));
    let kernel = gf::kernel();
    let src: Vec<u8> = (0..buffer_bytes)
        .map(|i| (i as u32).wrapping_mul(7).wrapping_add(3) as u8)
        .collect();
    let mut dst = vec![0u8; buffer_bytes];
    let mut rate = |op: &mut dyn FnMut(&[u8], &mut [u8])| {
        let mut best = f64::INFINITY;
        for _ in 0..runs {
            let start = Instant::now();
            for _ in 0..passes {
                op(&src, &mut dst);
            }
            best = best.min(start.elapsed().as_secs_f64());
        }
        let gbyte_s = (passes * buffer_bytes) as f64 / best.max(1e-9) / 1e9;
        (gbyte_s * 10.0).round() / 10.0
    };
    let xor = rate(&mut |s, d| kernel.xor(s, d));
    let mul_add = rate(&mut |s, d| kernel.mul_add(0x8e, s, d));
    ComputeRates {
        kernel: kernel.name().to_string(),
        xor_gbyte_s: xor.max(0.1),
        mul_add_gbyte_s: mul_add.max(0.1),
        method: format!(
            "best of {runs} runs of {passes} passes over {buffer_bytes} B, kernel {}",
            kernel.name()
        ),
    }
}

/// One vertex's primitive: its Table I terms and where it sits on the plan's schedule.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct VertexCost {
    pub vertex: usize,
    pub primitive: String,
    /// α_v: compute plus network, seconds per byte of chunk.
    pub alpha_s_per_byte: f64,
    /// β_v: latency (if it receives) plus per-message cost.
    pub beta_s: f64,
    pub node: usize,
    /// Network inputs and sends (edges inside the node are free and not counted).
    pub net_inputs: usize,
    pub net_sends: usize,
    /// γ_v: seconds of computation per byte of chunk.
    pub compute_alpha_s_per_byte: f64,
    /// (in_v + out_v)/B, with each edge's link rate.
    pub network_alpha_s_per_byte: f64,
    /// α_v·c + β_v: the primitive on its own, unsliced, at the plan's chunk size.
    pub cost_s: f64,
    /// On the plan's schedule (first slice for a sliced plan): when its inputs were all there,
    /// and when its last send left.
    pub ready_s: f64,
    pub finish_s: f64,
    /// On the critical path.
    pub critical: bool,
}

/// The model's prediction for a plan.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Prediction {
    pub alpha_s_per_byte: f64,
    pub beta_s: f64,
    /// α·c + β for the plan's chunk size.
    pub time_s: f64,
    pub vertices: Vec<VertexCost>,
    /// T₁: one slice through the DAG (the whole time for an unsliced plan).
    pub first_slice_s: f64,
    /// b: the slowest stage per slice (NIC side or calculator of one node).
    pub stage_s: f64,
    pub slices: usize,
}

/// Seconds of computation per byte of chunk for vertex `v` (γ_v).
fn gamma(plan: &Plan, v: usize, net: &NetConfig) -> f64 {
    plan.vertices[v]
        .calc
        .as_ref()
        .map(|c| c.coeffs.iter().map(|&a| net.coeff_s_per_byte(a)).sum())
        .unwrap_or(0.0)
}

/// The critical-path schedule of one slice of `sigma` bytes (see the module comment), with
/// `bytes` = false to drop every byte term (for β).
struct Schedule {
    ready: Vec<f64>,
    finish: Vec<f64>,
    /// The vertex whose input arrived last (the critical predecessor).
    pred: Vec<Option<usize>>,
    total: f64,
    stage: f64,
}

fn schedule(plan: &Plan, net: &NetConfig, gammas: &[f64], sigma: f64) -> Schedule {
    let nv = plan.vertices.len();
    let (l, o) = (net.latency_s, net.message_overhead_s);
    let node = |v: usize| plan.vertices[v].node;
    let hop = |e: usize| {
        let edge = &plan.edges[e];
        sigma / net.link_rate(node(edge.from), node(edge.to)) + o
    };
    let mut arrive = vec![0.0f64; plan.edges.len()];
    let mut start = vec![0.0f64; plan.edges.len()];
    let mut tx_free: BTreeMap<usize, f64> = BTreeMap::new();
    let mut rx_free: BTreeMap<usize, f64> = BTreeMap::new();
    let mut cpu_free: BTreeMap<usize, f64> = BTreeMap::new();
    let (mut ready, mut finish) = (vec![0.0; nv], vec![0.0; nv]);
    let mut pred = vec![None; nv];
    let mut total = 0.0f64;
    for v in &plan.vertices {
        let mut r = 0.0f64;
        for &e in &v.inputs {
            if arrive[e] > r || pred[v.id].is_none() {
                pred[v.id] = Some(plan.edges[e].from);
            }
            r = r.max(arrive[e]);
        }
        let net_in: Vec<usize> = v
            .inputs
            .iter()
            .copied()
            .filter(|&e| node(plan.edges[e].from) != v.node)
            .collect();
        if !net_in.is_empty() {
            // The node's receive side takes the inputs back to back, after what it received
            // for earlier vertices.
            let first = net_in
                .iter()
                .map(|&e| start[e])
                .fold(f64::INFINITY, f64::min);
            let busy: f64 = net_in.iter().map(|&e| hop(e)).sum();
            let rx = rx_free.entry(v.node).or_insert(0.0);
            let end = first.max(*rx) + busy;
            *rx = end;
            r = r.max(end + l);
        }
        let cpu = cpu_free.entry(v.node).or_insert(0.0);
        let computed = r.max(*cpu) + gammas[v.id] * sigma;
        if v.calc.is_some() {
            *cpu = computed;
        }
        let mut f = computed;
        for &e in &v.sends {
            let to = node(plan.edges[e].to);
            if to == v.node {
                start[e] = computed;
                arrive[e] = computed;
                continue;
            }
            let tx = tx_free.entry(v.node).or_insert(0.0);
            start[e] = computed.max(*tx);
            *tx = start[e] + hop(e);
            arrive[e] = *tx + l;
            f = f.max(*tx);
        }
        ready[v.id] = r;
        finish[v.id] = f;
        total = total.max(f);
        for &e in &v.sends {
            total = total.max(arrive[e]);
        }
    }
    // The slowest stage per slice: a node's transmit side, receive side or calculator.
    let mut tx: BTreeMap<usize, f64> = BTreeMap::new();
    let mut rx: BTreeMap<usize, f64> = BTreeMap::new();
    let mut cpu: BTreeMap<usize, f64> = BTreeMap::new();
    for e in &plan.edges {
        let (a, b) = (node(e.from), node(e.to));
        if a != b {
            *tx.entry(a).or_insert(0.0) += hop(e.id);
            *rx.entry(b).or_insert(0.0) += hop(e.id);
        }
    }
    for v in &plan.vertices {
        *cpu.entry(v.node).or_insert(0.0) += gammas[v.id] * sigma;
    }
    let stage = tx
        .values()
        .chain(rx.values())
        .chain(cpu.values())
        .copied()
        .fold(0.0, f64::max);
    Schedule {
        ready,
        finish,
        pred,
        total,
        stage,
    }
}

/// Predicts a plan's time from its primitives' α-β terms (the accounting is not needed: the
/// model works on the plan itself; the parameter stays for callers that have it at hand).
pub fn predict(plan: &Plan, _acct: &Accounting, net: &NetConfig) -> Prediction {
    predict_plan(plan, net)
}

/// Predicts a plan's time from its primitives' α-β terms.
pub fn predict_plan(plan: &Plan, net: &NetConfig) -> Prediction {
    let c = plan.chunk_bytes as f64;
    let s = plan.slice_count();
    let sigma = c / s as f64;
    let gammas: Vec<f64> = (0..plan.vertices.len())
        .map(|v| gamma(plan, v, net))
        .collect();
    let sched = schedule(plan, net, &gammas, sigma);
    let time = sched.total + (s - 1) as f64 * sched.stage;
    let zero = {
        let mut free = net.clone();
        free.bandwidth_bytes_s = f64::INFINITY;
        free.node_bandwidth_bytes_s.clear();
        free.link_bandwidth_bytes_s.clear();
        let g0 = vec![0.0; gammas.len()];
        let z = schedule(plan, &free, &g0, sigma);
        z.total + (s - 1) as f64 * z.stage
    };
    let beta = zero.min(time);
    let alpha = (time - beta) / c;
    // The critical path: back from the vertex that finishes last, through the inputs that
    // arrived last.
    let mut critical = vec![false; plan.vertices.len()];
    let mut at = (0..plan.vertices.len())
        .max_by(|&a, &b| sched.finish[a].total_cmp(&sched.finish[b]).then(b.cmp(&a)));
    while let Some(v) = at {
        critical[v] = true;
        at = sched.pred[v];
    }
    let node = |v: usize| plan.vertices[v].node;
    let vertices = plan
        .vertices
        .iter()
        .map(|v| {
            let net_in: Vec<usize> = v
                .inputs
                .iter()
                .copied()
                .filter(|&e| node(plan.edges[e].from) != v.node)
                .collect();
            let net_out: Vec<usize> = v
                .sends
                .iter()
                .copied()
                .filter(|&e| node(plan.edges[e].to) != v.node)
                .collect();
            let per_byte = |e: usize| {
                let edge = &plan.edges[e];
                1.0 / net.link_rate(node(edge.from), node(edge.to))
            };
            let network: f64 = net_in.iter().chain(&net_out).map(|&e| per_byte(e)).sum();
            let messages = ((net_in.len() + net_out.len()) * s) as f64;
            let beta_v = if net_in.is_empty() {
                0.0
            } else {
                net.latency_s
            } + messages * net.message_overhead_s;
            let alpha_v = gammas[v.id] + network;
            VertexCost {
                vertex: v.id,
                primitive: v.primitive.to_string(),
                alpha_s_per_byte: alpha_v,
                beta_s: beta_v,
                node: v.node,
                net_inputs: net_in.len(),
                net_sends: net_out.len(),
                compute_alpha_s_per_byte: gammas[v.id],
                network_alpha_s_per_byte: network,
                cost_s: alpha_v * c + beta_v,
                ready_s: sched.ready[v.id],
                finish_s: sched.finish[v.id],
                critical: critical[v.id],
            }
        })
        .collect();
    Prediction {
        alpha_s_per_byte: alpha,
        beta_s: beta,
        time_s: time,
        vertices,
        first_slice_s: sched.total,
        stage_s: sched.stage,
        slices: s,
    }
}
