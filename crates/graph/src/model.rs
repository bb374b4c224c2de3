//! The α-β model (INEC §III-B, Table I): every primitive costs α·c + β, and so does a plan.
//!
//! Constants come from a calibration file (see `calibration/default.json` and
//! `docs/plans.md`), loaded explicitly; flags may override them.
//!
//! For one vertex v with `in_v` received and `out_v` sent buffers, `γ_v` seconds of
//! computation per byte (Σ over its non-zero coefficients of 1/xor-rate or 1/mul-add-rate)
//! and chunk size c:
//!
//! ```text
//! α_v = max(in_v, out_v) / B + γ_v          β_v = L·[in_v > 0] + (in_v + out_v)·o
//! ```
//!
//! For a plan with s slices per chunk, `steps` and `depth` from the accounting:
//!
//! ```text
//! time = steps·(c/s)/B                            network: the busiest chain of links
//!      + (Σ_{v on the path} γ_v + (s−1)·max_v γ_v)·c/s   computation along the longest path,
//!                                                         pipelined over the slices
//!      + depth·L + steps·o                         latency per hop, overhead per message
//!      = α·c + β
//! ```
//!
//! It deliberately ignores contention between computation and transfer on the same node and
//! the order in which a NIC serves its messages; the simulator models both.

use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::account::Accounting;
use crate::plan::Plan;
use crate::sim::NetConfig;
use crate::PlanError;

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

impl Calibration {
    /// Reads and checks a calibration file.
    pub fn load(path: &Path) -> Result<Calibration, PlanError> {
        let bad = |reason: String| PlanError::BadCalibration {
            path: path.display().to_string(),
            reason,
        };
        let text = std::fs::read_to_string(path).map_err(|e| bad(e.to_string()))?;
        let c: Calibration = serde_json::from_str(&text).map_err(|e| bad(e.to_string()))?;
        c.validate().map_err(bad)?;
        Ok(c)
    }

    /// Every rate positive, every time non-negative, all finite.
    pub fn validate(&self) -> Result<(), String> {
        for (name, v, positive) in [
            ("bandwidth_gbit_s", self.bandwidth_gbit_s, true),
            ("latency_us", self.latency_us, false),
            ("message_overhead_us", self.message_overhead_us, false),
            ("xor_gbyte_s", self.xor_gbyte_s, true),
            ("mul_add_gbyte_s", self.mul_add_gbyte_s, true),
        ] {
            if !v.is_finite() || v < 0.0 || (positive && v == 0.0) {
                return Err(format!(
                    "{name} is {v}, expected a finite number {}",
                    if positive { "> 0" } else { ">= 0" }
                ));
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

/// One vertex's primitive cost.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct VertexCost {
    pub vertex: usize,
    pub primitive: String,
    /// Seconds per byte of chunk.
    pub alpha_s_per_byte: f64,
    pub beta_s: f64,
}

/// The model's prediction for a plan.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Prediction {
    pub alpha_s_per_byte: f64,
    pub beta_s: f64,
    /// α·c + β for the plan's chunk size.
    pub time_s: f64,
    pub vertices: Vec<VertexCost>,
}

/// Seconds of computation per byte of chunk for vertex `v` (γ_v).
fn gamma(plan: &Plan, v: usize, net: &NetConfig) -> f64 {
    plan.vertices[v]
        .calc
        .as_ref()
        .map(|c| c.coeffs.iter().map(|&a| net.coeff_s_per_byte(a)).sum())
        .unwrap_or(0.0)
}

/// Predicts a plan's time.
pub fn predict(plan: &Plan, acct: &Accounting, net: &NetConfig) -> Prediction {
    let (b, l, o) = (net.bandwidth_bytes_s, net.latency_s, net.message_overhead_s);
    let c = plan.chunk_bytes as f64;
    let s = plan.slice_count() as f64;
    let gammas: Vec<f64> = (0..plan.vertices.len())
        .map(|v| gamma(plan, v, net))
        .collect();
    // Longest path by computation.
    let mut path = gammas.clone();
    for e in &plan.edges {
        path[e.to] = path[e.to].max(path[e.from] + gammas[e.to]);
    }
    let on_path = path.iter().copied().fold(0.0, f64::max);
    let widest = gammas.iter().copied().fold(0.0, f64::max);
    let alpha = acct.steps as f64 / (s * b) + (on_path + (s - 1.0) * widest) / s;
    let beta = acct.depth as f64 * l + acct.steps as f64 * o;
    let vertices = plan
        .vertices
        .iter()
        .map(|v| {
            let (i, x) = (v.inputs.len() as f64, v.sends.len() as f64);
            VertexCost {
                vertex: v.id,
                primitive: v.primitive.to_string(),
                alpha_s_per_byte: i.max(x) / b + gammas[v.id],
                beta_s: if v.inputs.is_empty() { 0.0 } else { l } + (i + x) * o,
            }
        })
        .collect();
    Prediction {
        alpha_s_per_byte: alpha,
        beta_s: beta,
        time_s: alpha * c + beta,
        vertices,
    }
}
