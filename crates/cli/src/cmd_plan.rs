//! `inec plan`, `inec model`.

use std::path::PathBuf;

use anyhow::{bail, Context, Result};
use clap::Args;
use codes::Code;
use graph::model::Calibration;
use graph::sim::NetConfig;
use graph::{build, PlanSpec, Request, Scheme, Target};

/// The calibration file in the source tree, used unless `--calibration` names another.
const DEFAULT_CALIBRATION: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../graph/calibration/default.json"
);

/// Network and compute constants: a calibration file, then flags over it.
#[derive(Args, Debug)]
pub struct CalibrationArgs {
    /// Calibration file (JSON; see docs/plans.md).
    #[arg(long, default_value = DEFAULT_CALIBRATION)]
    calibration: PathBuf,
    /// Override the NIC bandwidth, Gb/s.
    #[arg(long)]
    bandwidth_gbps: Option<f64>,
    /// Override the one-way latency, microseconds.
    #[arg(long)]
    latency_us: Option<f64>,
    /// Override the per-message cost, microseconds.
    #[arg(long)]
    overhead_us: Option<f64>,
}

impl CalibrationArgs {
    fn load(&self) -> Result<Calibration> {
        let mut c = Calibration::load(&self.calibration)?;
        if let Some(b) = self.bandwidth_gbps {
            c.bandwidth_gbit_s = b;
        }
        if let Some(l) = self.latency_us {
            c.latency_us = l;
        }
        if let Some(o) = self.overhead_us {
            c.message_overhead_us = o;
        }
        c.validate()
            .map_err(|reason| anyhow::anyhow!("bad calibration override: {reason}"))?;
        Ok(c)
    }

    fn describe(&self, c: &Calibration) -> String {
        format!(
            "calibration: {} ({} Gb/s, latency {} us, {} us per message, xor {} GB/s, \
             mul-add {} GB/s, kernel {})",
            self.calibration.display(),
            c.bandwidth_gbit_s,
            c.latency_us,
            c.message_overhead_us,
            c.xor_gbyte_s,
            c.mul_add_gbyte_s,
            c.kernel
        )
    }
}

#[derive(Args, Debug)]
pub struct PlanArgs {
    /// rs, lrc, ppr, ecpipe or triec.
    #[arg(long)]
    scheme: Scheme,
    /// The code: rs:6,3, lrc:12,2,2, ...
    #[arg(long)]
    code: Code,
    /// Plan the write of one stripe.
    #[arg(long, conflicts_with = "lost")]
    encode: bool,
    /// Plan the repair of these chunks (comma-separated chunk indices).
    #[arg(long, value_delimiter = ',', required_unless_present = "encode")]
    lost: Vec<usize>,
    /// Rebuild the lost chunks on this node (default: the agent, node 0).
    #[arg(long, conflicts_with = "in_place")]
    at: Option<usize>,
    /// Rebuild each lost chunk on the node that held it.
    #[arg(long)]
    in_place: bool,
    /// Chunk size in bytes.
    #[arg(long)]
    chunk_bytes: usize,
    /// Slice size in bytes (default: unsliced; ECPipe: 8 slices).
    #[arg(long)]
    slice_bytes: Option<usize>,
    /// TriEC repair: number of layer-2 aggregation vertices (default round(sqrt(helpers))).
    #[arg(long)]
    aggregators: Option<usize>,
    /// Print the plan as Graphviz DOT only.
    #[arg(long, conflicts_with = "json")]
    dot: bool,
    /// Print JSON: steps, max_fan_in, bytes_in, bytes_out, sim_time_s, model_time_s, the plan.
    #[arg(long)]
    json: bool,
    /// Seed of the random stripe the simulator runs the plan on.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    #[command(flatten)]
    calibration: CalibrationArgs,
}

pub fn plan(a: PlanArgs) -> Result<()> {
    let cal = a.calibration.load()?;
    let request = if a.encode {
        Request::Encode
    } else {
        let target = match (a.at, a.in_place) {
            (_, true) => Target::InPlace,
            (Some(node), false) => Target::Node(node),
            (None, false) => Target::Node(0),
        };
        Request::Repair {
            lost: a.lost.clone(),
            target,
        }
    };
    let mut spec = PlanSpec::new(a.scheme, a.code, request, a.chunk_bytes);
    spec.slice_bytes = a.slice_bytes;
    spec.aggregators = a.aggregators;
    if a.dot {
        print!("{}", build(&spec)?.to_dot());
        return Ok(());
    }
    let report = graph::report::report(&spec, &cal.net(), a.seed)?;
    if a.json {
        let mut v = report.json();
        v["calibration"] = serde_json::to_value(&cal)?;
        println!("{}", serde_json::to_string_pretty(&v)?);
    } else {
        println!("{}", a.calibration.describe(&cal));
        print!("{}", report.text());
    }
    Ok(())
}

#[derive(Args, Debug)]
pub struct ModelArgs {
    /// Chunk sizes in bytes (comma-separated; default 128 B to 16 MiB).
    #[arg(long, value_delimiter = ',')]
    chunk_bytes: Vec<usize>,
    /// Codes (space-separated, e.g. `--codes rs:6,3 lrc:12,2,2`; default the papers' RS(3,2),
    /// (6,3), (12,4), LRC(4,2,2), (6,2,2), (12,2,2)).
    #[arg(long, num_args = 1..)]
    codes: Vec<Code>,
    /// Print JSON rows instead of a table.
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    calibration: CalibrationArgs,
}

/// The chunk sizes of the papers' figures: 128 B to 16 MiB.
const MODEL_CHUNK_BYTES: [usize; 8] = [
    128,
    1 << 10,
    8 << 10,
    64 << 10,
    256 << 10,
    1 << 20,
    4 << 20,
    16 << 20,
];

const MODEL_CODES: [&str; 6] = [
    "rs:3,2",
    "rs:6,3",
    "rs:12,4",
    "lrc:4,2,2",
    "lrc:6,2,2",
    "lrc:12,2,2",
];

pub fn model(a: ModelArgs) -> Result<()> {
    let cal = a.calibration.load()?;
    let net: NetConfig = cal.net();
    let sizes = if a.chunk_bytes.is_empty() {
        MODEL_CHUNK_BYTES.to_vec()
    } else {
        a.chunk_bytes.clone()
    };
    let codes: Vec<Code> = if a.codes.is_empty() {
        MODEL_CODES
            .iter()
            .map(|s| s.parse())
            .collect::<Result<_, _>>()?
    } else {
        a.codes.clone()
    };
    if sizes.contains(&0) {
        bail!("chunk sizes must be at least 1 byte");
    }
    let mut rows = Vec::new();
    if !a.json {
        println!("{}", a.calibration.describe(&cal));
        println!(
            "# encode: one stripe from the agent; repair: chunk 0 lost, rebuilt at node 0. \
             Times in microseconds; the simulator's time is data-independent and computed \
             without bytes here (the tests run every plan on real bytes)."
        );
        println!(
            "{:<11} {:<7} {:<7} {:>10} {:>6} {:>8} {:>14} {:>14} {:>7}",
            "code", "scheme", "op", "chunk_B", "steps", "fan_in", "model_us", "sim_us", "model/sim"
        );
    }
    for &code in &codes {
        let own = match code {
            Code::Rs { .. } => Scheme::Rs,
            Code::Lrc { .. } => Scheme::Lrc,
        };
        for scheme in [own, Scheme::Ppr, Scheme::Ecpipe, Scheme::Triec] {
            for (op, request) in [
                ("encode", Request::Encode),
                (
                    "repair",
                    Request::Repair {
                        lost: vec![0],
                        target: Target::Node(0),
                    },
                ),
            ] {
                for &c in &sizes {
                    let spec = PlanSpec::new(scheme, code, request.clone(), c);
                    let plan = build(&spec).with_context(|| format!("{scheme} {code} {op}"))?;
                    let acct = graph::account(&plan);
                    let model = graph::model::predict(&plan, &acct, &net).time_s;
                    let sim = graph::sim::simulate_time(&plan, &net);
                    if a.json {
                        rows.push(serde_json::json!({
                            "code": code.to_string(), "scheme": scheme, "op": op,
                            "chunk_bytes": c, "steps": acct.steps, "max_fan_in": acct.max_fan_in,
                            "model_time_s": model, "sim_time_s": sim,
                        }));
                    } else {
                        println!(
                            "{:<11} {:<7} {:<7} {:>10} {:>6} {:>8} {:>14.3} {:>14.3} {:>7.3}",
                            code.to_string(),
                            scheme.to_string(),
                            op,
                            c,
                            acct.steps,
                            acct.max_fan_in,
                            model * 1e6,
                            sim * 1e6,
                            model / sim
                        );
                    }
                }
            }
        }
    }
    if a.json {
        println!("{}", serde_json::to_string_pretty(&rows)?);
    }
    Ok(())
}
