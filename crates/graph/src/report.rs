//! Everything `inec plan` prints for one plan: the plan, its accounting, the model's
//! prediction and the simulated time, as stable text or JSON.

use std::fmt::Write as _;

use codes::Codec;
use serde_json::json;

use crate::account::{account, Accounting};
use crate::build::{build, PlanSpec};
use crate::model::{predict, Prediction};
use crate::plan::Plan;
use crate::sim::{simulate_and_check, NetConfig, SimResult};
use crate::PlanError;

/// A built, checked and simulated plan.
#[derive(Clone, Debug)]
pub struct Report {
    pub plan: Plan,
    pub accounting: Accounting,
    pub prediction: Prediction,
    /// The simulation on seeded random data; its stored chunks were checked against the codec.
    pub sim: SimResult,
}

/// Builds the plan, checks its algebra against the generator matrix, predicts its time and
/// runs it in the simulator on random data (checking the output).
pub fn report(spec: &PlanSpec, net: &NetConfig, seed: u64) -> Result<Report, PlanError> {
    let plan = build(spec)?;
    plan.check(&spec.code.generator())?;
    let accounting = account(&plan);
    let prediction = predict(&plan, &accounting, net);
    let codec = Codec::new(spec.code);
    let sim = simulate_and_check(&plan, &codec, net, seed)?;
    Ok(Report {
        plan,
        accounting,
        prediction,
        sim,
    })
}

/// Seconds as microseconds with three decimals.
pub fn us(t: f64) -> String {
    format!("{:.3} us", t * 1e6)
}

impl Report {
    /// The plan's text, then accounting, model and simulation.
    pub fn text(&self) -> String {
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
        let p = &self.prediction;
        let _ = writeln!(
            s,
            "model: alpha={:.4e} s/B beta={} time={}",
            p.alpha_s_per_byte,
            us(p.beta_s),
            us(p.time_s)
        );
        let _ = writeln!(
            s,
            "simulated: time={} messages={} (stored chunks checked against the codec)",
            us(self.sim.time_s),
            self.sim.messages
        );
        s
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
            "sim_time_s": self.sim.time_s,
            "sim_messages": self.sim.messages,
            "verified": true,
            "plan": self.plan,
        })
    }
}
