//! Everything `inec plan` prints for one plan: the plan, its accounting, the model's
//! prediction (with every primitive's α-β terms) and the simulated time, as stable text or
//! JSON.
//!
//! The simulation runs twice: without bytes at the requested chunk size (the time; memory
//! proportional to vertices × slices), and with real bytes on a copy of the plan with a small
//! chunk ([`verify_chunk_bytes`], same slice count, same shape) whose stored chunks are checked
//! against the codec. Times do not depend on the bytes, so nothing is lost, and a 1 GiB chunk
//! costs no memory.

use std::fmt::Write as _;

use codes::Codec;
use serde_json::json;

use crate::account::{account, Accounting};
use crate::build::{build, PlanSpec};
use crate::model::{predict_plan, Prediction};
use crate::plan::Plan;
use crate::sim::{simulate_and_check, simulate_timing, NetConfig, SimResult};
use crate::PlanError;

/// The largest chunk the report simulates with real bytes.
pub const VERIFY_MAX_CHUNK_BYTES: usize = 64 << 10;

/// The most slices per chunk the report simulates (events and memory grow with slices).
pub const MAX_SIM_SLICES: usize = 1 << 16;

/// A built, checked and simulated plan.
#[derive(Clone, Debug)]
pub struct Report {
    pub plan: Plan,
    pub accounting: Accounting,
    pub prediction: Prediction,
    /// The simulation without bytes at the plan's chunk size (`outputs` is empty).
    pub sim: SimResult,
    /// The plan's copy with a small chunk that ran on seeded random bytes; every chunk it
    /// stored was checked against the codec, and every chunk it must store was stored.
    pub verified_chunk_bytes: usize,
    pub verified_slice_bytes: usize,
}

/// The (chunk, slice) sizes the bytes of a plan are verified with: the plan's own when its
/// chunk is at most [`VERIFY_MAX_CHUNK_BYTES`], else the largest chunk ≤ that limit cut into
/// the same number of equal slices.
pub fn verify_chunk_bytes(plan: &Plan) -> (usize, usize) {
    if plan.chunk_bytes <= VERIFY_MAX_CHUNK_BYTES {
        return (plan.chunk_bytes, plan.slice_bytes);
    }
    let s = plan.slice_count();
    let slice = (VERIFY_MAX_CHUNK_BYTES / s).max(1);
    (slice * s, slice)
}

/// Builds the plan, checks its algebra against the generator matrix, predicts its time,
/// simulates its time, and runs its small copy on random data (checking the output).
pub fn report(spec: &PlanSpec, net: &NetConfig, seed: u64) -> Result<Report, PlanError> {
    let plan = build(spec)?;
    plan.check(&spec.code.generator())?;
    let slices = plan.slice_count();
    if slices > MAX_SIM_SLICES {
        return Err(PlanError::BadSize {
            what: "slices per chunk for the simulation",
            value: slices,
            limit: MAX_SIM_SLICES,
        });
    }
    let (small_chunk, small_slice) = verify_chunk_bytes(&plan);
    let mut small = spec.clone();
    small.chunk_bytes = small_chunk;
    small.slice_bytes = Some(small_slice);
    let small_plan = build(&small)?;
    let same_shape = small_plan.slice_count() == slices
        && small_plan.vertices == plan.vertices
        && small_plan.edges.len() == plan.edges.len()
        && small_plan
            .edges
            .iter()
            .zip(&plan.edges)
            .all(|(a, b)| (a.from, a.to, a.buffer) == (b.from, b.to, b.buffer));
    if !same_shape {
        return Err(PlanError::Invalid {
            reason: format!(
                "the {small_chunk} B copy used to verify the bytes differs in shape from the plan"
            ),
        });
    }
    simulate_and_check(&small_plan, &Codec::new(spec.code), net, seed)?;
    let accounting = account(&plan);
    let prediction = predict_plan(&plan, net);
    let sim = simulate_timing(&plan, net);
    Ok(Report {
        plan,
        accounting,
        prediction,
        sim,
        verified_chunk_bytes: small_chunk,
        verified_slice_bytes: small_slice,
    })
}

/// Seconds as microseconds with three decimals.
pub fn us(t: f64) -> String {
    format!("{:.3} us", t * 1e6)
}

impl Report {
    /// The plan's text and its accounting: the shape, independent of any constants.
    pub fn shape_text(&self) -> String {
        let mut s = self.plan.to_text();
        let a = &self.accounting;
        let _ = writeln!(
            s,
            "accounting: steps={} max_fan_in={} depth={} network_bytes={}",
            a.steps, a.max_fan_in, a.depth, a.total_bytes
        );
        let mut nodes: Vec<usize> = a
            .bytes_in
            .keys()
            .chain(a.bytes_out.keys())
            .copied()
            .collect();
        nodes.sort_unstable();
        nodes.dedup();
        for node in nodes {
            let _ = writeln!(
                s,
                "  node {node}: in={} out={}",
                a.bytes_in.get(&node).unwrap_or(&0),
                a.bytes_out.get(&node).unwrap_or(&0)
            );
        }
        s
    }

    /// The model (every primitive's terms, then the plan's α, β and time) and the simulation.
    pub fn timing_text(&self) -> String {
        let mut s = String::new();
        let p = &self.prediction;
        let _ = writeln!(
            s,
            "model: per primitive alpha = compute + network, beta = latency + overhead x \
             messages; cost = alpha*c + beta on its own; ready/finish on the plan's \
             critical-path schedule{}; * = critical path",
            if p.slices > 1 { " (first slice)" } else { "" }
        );
        for v in &p.vertices {
            let _ = writeln!(
                s,
                "  v{:<3} node={:<3} {:<13} in={} out={} alpha={:.4}+{:.4} ns/B beta={} \
                 cost={} ready={} finish={}{}",
                v.vertex,
                v.node,
                v.primitive,
                v.net_inputs,
                v.net_sends,
                v.compute_alpha_s_per_byte * 1e9,
                v.network_alpha_s_per_byte * 1e9,
                us(v.beta_s),
                us(v.cost_s),
                us(v.ready_s),
                us(v.finish_s),
                if v.critical { " *" } else { "" }
            );
        }
        if p.slices > 1 {
            let _ = writeln!(
                s,
                "model: slices={} first_slice={} slowest_stage={} per slice",
                p.slices,
                us(p.first_slice_s),
                us(p.stage_s)
            );
        }
        let _ = writeln!(
            s,
            "model: alpha={:.4} ns/B beta={} time={}",
            p.alpha_s_per_byte * 1e9,
            us(p.beta_s),
            us(p.time_s)
        );
        let _ = writeln!(
            s,
            "simulated: time={} messages={} model/sim={:.3}",
            us(self.sim.time_s),
            self.sim.messages,
            p.time_s / self.sim.time_s
        );
        let _ = writeln!(
            s,
            "verified: bytes of a {} B copy (slice {} B, same shape) checked against the codec",
            self.verified_chunk_bytes, self.verified_slice_bytes
        );
        s
    }

    /// The plan's text, then accounting, model and simulation.
    pub fn text(&self) -> String {
        self.shape_text() + &self.timing_text()
    }

    /// The JSON `inec plan --json` prints.
    pub fn json(&self) -> serde_json::Value {
        let a = &self.accounting;
        json!({
            "scheme": self.plan.scheme,
            "code": self.plan.code,
            "operation": self.plan.operation,
            "chunk_bytes": self.plan.chunk_bytes,
            "slice_bytes": self.plan.slice_bytes,
            "steps": a.steps,
            "max_fan_in": a.max_fan_in,
            "depth": a.depth,
            "bytes_in": a.bytes_in,
            "bytes_out": a.bytes_out,
            "network_bytes": a.total_bytes,
            "model_time_s": self.prediction.time_s,
            "model_alpha_s_per_byte": self.prediction.alpha_s_per_byte,
            "model_beta_s": self.prediction.beta_s,
            "model_first_slice_s": self.prediction.first_slice_s,
            "model_stage_s": self.prediction.stage_s,
            "model_vertices": self.prediction.vertices,
            "sim_time_s": self.sim.time_s,
            "sim_messages": self.sim.messages,
            "sim_bytes_in": self.sim.bytes_in,
            "sim_bytes_out": self.sim.bytes_out,
            "verified": true,
            "verified_chunk_bytes": self.verified_chunk_bytes,
            "verified_slice_bytes": self.verified_slice_bytes,
            "plan": self.plan,
        })
    }
}
