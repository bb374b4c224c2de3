//! `inec plan`, `inec model`.

use std::path::PathBuf;

use anyhow::{bail, Context, Result};
use clap::Args;
use codes::Code;
use graph::cluster::{ClusterSpec, ClusterSummary};
use graph::model::{Calibration, BUILTIN_CALIBRATION_PATH};
use graph::paper::{schemes_for, PAPER_CODES};
use graph::sim::NetConfig;
use graph::{build, PlanSpec, Request, Scheme, Target};

/// Network and compute constants: a calibration file (default: the one built in), or compute
/// rates measured now, then flags over them.
#[derive(Args, Debug)]
pub struct CalibrationArgs {
    /// Calibration file (JSON; see docs/plans.md). Default: the built-in
    /// crates/graph/calibration/default.json.
    #[arg(long)]
    calibration: Option<PathBuf>,
    /// Measure the XOR and multiply-accumulate rates now, in this process, with the gf kernel
    /// in use (a few milliseconds), instead of taking them from the calibration file.
    #[arg(long)]
    calibrate: bool,
    /// Override the NIC bandwidth, Gb/s.
    #[arg(long)]
    bandwidth_gbps: Option<f64>,
    /// Override the one-way latency, microseconds.
    #[arg(long)]
    latency_us: Option<f64>,
    /// Override the per-message cost, microseconds.
    #[arg(long)]
    overhead_us: Option<f64>,
    /// Override the XOR rate, GB/s of source.
    #[arg(long, conflicts_with = "calibrate")]
    xor_gbyte_s: Option<f64>,
    /// Override the GF(2^8) multiply-accumulate rate, GB/s of source.
    #[arg(long, conflicts_with = "calibrate")]
    mul_add_gbyte_s: Option<f64>,
}

/// The constants in use and a line saying where they come from.
struct Loaded {
    cal: Calibration,
    line: String,
}

impl CalibrationArgs {
    fn load(&self) -> Result<Loaded> {
        let (mut c, origin) = match &self.calibration {
            Some(path) => (Calibration::load(path)?, path.display().to_string()),
            None => (
                Calibration::builtin(),
                format!("default ({BUILTIN_CALIBRATION_PATH})"),
            ),
        };
        let mut notes = Vec::new();
        if self.calibrate {
            let rates = graph::model::measure_compute(256 << 10, 16, 5);
            c.xor_gbyte_s = rates.xor_gbyte_s;
            c.mul_add_gbyte_s = rates.mul_add_gbyte_s;
            c.kernel = rates.kernel;
            c.description = format!(
                "{}; compute rates measured now: {}",
                c.description, rates.method
            );
            notes.push(format!("compute rates measured now ({})", rates.method));
        } else if self.xor_gbyte_s.is_none() || self.mul_add_gbyte_s.is_none() {
            // Some compute rate still comes from the file: it must describe this kernel.
            if let Some(warning) = c.kernel_mismatch() {
                eprintln!("{warning}");
            }
        }
        for (flag, value, field) in [
            (
                "--bandwidth-gbps",
                self.bandwidth_gbps,
                &mut c.bandwidth_gbit_s,
            ),
            ("--latency-us", self.latency_us, &mut c.latency_us),
            (
                "--overhead-us",
                self.overhead_us,
                &mut c.message_overhead_us,
            ),
            ("--xor-gbyte-s", self.xor_gbyte_s, &mut c.xor_gbyte_s),
            (
                "--mul-add-gbyte-s",
                self.mul_add_gbyte_s,
                &mut c.mul_add_gbyte_s,
            ),
        ] {
            if let Some(v) = value {
                *field = v;
                notes.push(format!("{flag} {v}"));
            }
        }
        c.validate()
            .map_err(|reason| anyhow::anyhow!("bad calibration override: {reason}"))?;
        let with = if notes.is_empty() {
            String::new()
        } else {
            format!(" with {}", notes.join(", "))
        };
        let line = format!(
            "calibration: {origin}{with} ({} Gb/s, latency {} us, {} us per message, xor {} GB/s, \
             mul-add {} GB/s, kernel {})",
            c.bandwidth_gbit_s,
            c.latency_us,
            c.message_overhead_us,
            c.xor_gbyte_s,
            c.mul_add_gbyte_s,
            c.kernel
        );
        Ok(Loaded { cal: c, line })
    }
}

#[derive(Args, Debug)]
#[command(group = clap::ArgGroup::new("what").args(["encode", "lost"]).required(true))]
pub struct PlanArgs {
    /// rs, lrc, ppr, ecpipe or triec.
    #[arg(long)]
    scheme: Scheme,
    /// The code: rs:6,3, lrc:12,2,2, ...
    #[arg(long)]
    code: Code,
    /// Plan the write of one stripe (or give --lost).
    #[arg(long, conflicts_with = "lost")]
    encode: bool,
    /// Plan the repair of this lost chunk index (repeat the flag for several: `--lost 0
    /// --lost 3`; or give --encode).
    #[arg(long, value_name = "INDEX", value_delimiter = ',')]
    lost: Vec<usize>,
    /// Rebuild the lost chunks on this node (default: the agent, node 0).
    #[arg(long, conflicts_with_all = ["in_place", "encode"])]
    at: Option<usize>,
    /// Rebuild each lost chunk on the node that held it.
    #[arg(long, conflicts_with = "encode")]
    in_place: bool,
    /// Chunk size, e.g. 4096 or 4MiB.
    #[arg(long, value_name = "SIZE", value_parser = crate::args::size)]
    chunk_bytes: usize,
    /// Slice size, e.g. 32KiB (default: unsliced; ECPipe repair: 8 slices).
    #[arg(long, value_name = "SIZE", value_parser = crate::args::size)]
    slice_bytes: Option<usize>,
    /// TriEC repair only: number of layer-2 aggregation vertices (default
    /// round(sqrt(helpers))).
    #[arg(long)]
    aggregators: Option<usize>,
    /// Print the plan as Graphviz DOT only (needs no calibration).
    #[arg(long, conflicts_with = "json")]
    dot: bool,
    /// Print JSON: steps, max_fan_in, bytes_in, bytes_out, sim_time_s, model_time_s, the
    /// model's terms per vertex, the plan.
    #[arg(long)]
    json: bool,
    /// Seed of the random stripe the simulator verifies the plan's bytes on.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    #[command(flatten)]
    calibration: CalibrationArgs,
}

/// `--aggregators` means something for TriEC repair only.
fn check_aggregators(aggregators: Option<usize>, scheme: Scheme, encode: bool) -> Result<()> {
    if aggregators.is_some() && (scheme != Scheme::Triec || encode) {
        bail!(
            "--aggregators applies to triec repair only (the number of layer-2 aggregation \
             vertices), not to {scheme} {}",
            if encode { "encode" } else { "repair" }
        );
    }
    Ok(())
}

pub fn plan(a: PlanArgs) -> Result<()> {
    check_aggregators(a.aggregators, a.scheme, a.encode)?;
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
        out!("{}", build(&spec)?.to_dot())?;
        return Ok(());
    }
    let loaded = a.calibration.load()?;
    let report = graph::report::report(&spec, &loaded.cal.net(), a.seed)?;
    if a.json {
        let mut v = report.json();
        v["calibration"] = serde_json::to_value(&loaded.cal)?;
        outln!("{}", serde_json::to_string_pretty(&v)?)?;
    } else {
        outln!("{}", loaded.line)?;
        out!("{}", report.text())?;
    }
    Ok(())
}

#[derive(Args, Debug)]
pub struct ModelArgs {
    /// A chunk size (repeat the flag for several), e.g. 4KiB; default 128 B to 16 MiB (the
    /// summary shows 1 KiB, 64 KiB, 1 MiB and 16 MiB), with --nodes 1 MiB.
    #[arg(long, value_name = "SIZE", value_delimiter = ',', value_parser = crate::args::size)]
    chunk_bytes: Vec<usize>,
    /// A code, rs:K,M or lrc:K,L,R (repeat the flag for several: `--code rs:6,3 --code
    /// lrc:12,2,2`); default the papers' rs:3,2, rs:6,3, rs:12,4, lrc:4,2,2, lrc:6,2,2,
    /// lrc:12,2,2.
    // `--codes rs:6,3 lrc:12,2,2`: the old spelling.
    #[arg(long = "code", alias = "codes", value_name = "CODE", num_args = 1..)]
    codes: Vec<Code>,
    /// Print every code × scheme × operation × chunk size (the full grid) instead of the
    /// summary.
    #[arg(long)]
    grid: bool,
    /// Simulate a cluster of this many nodes: the repairs of --stripes stripes at once,
    /// placed with rotated placement, sharing every NIC.
    #[arg(long)]
    nodes: Option<usize>,
    /// With --nodes: the stripes repaired at once (default: as many as nodes).
    #[arg(long, requires = "nodes")]
    stripes: Option<usize>,
    /// With --nodes: a number of distinct requesters to compare (repeat the flag for several;
    /// default 1 and the number of stripes).
    #[arg(long, value_delimiter = ',', requires = "nodes")]
    requesters: Vec<usize>,
    /// With --nodes: a chunk index lost in every stripe (repeat the flag for several; default
    /// 0).
    #[arg(long, value_delimiter = ',', requires = "nodes")]
    lost: Vec<usize>,
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

/// One row of `inec model`'s summary: code, scheme, operation, and (chunk size, model time,
/// simulated time) per chunk size.
type SummaryRow = (String, String, &'static str, Vec<(usize, f64, f64)>);

pub fn model(a: ModelArgs) -> Result<()> {
    let loaded = a.calibration.load()?;
    let net: NetConfig = loaded.cal.net();
    let sizes = match (a.chunk_bytes.is_empty(), a.nodes.is_some()) {
        (false, _) => a.chunk_bytes.clone(),
        (true, false) => MODEL_CHUNK_BYTES.to_vec(),
        (true, true) => vec![1 << 20],
    };
    let codes: Vec<Code> = if a.codes.is_empty() {
        PAPER_CODES
            .iter()
            .map(|s| s.parse())
            .collect::<Result<_, _>>()?
    } else {
        a.codes.clone()
    };
    if sizes.contains(&0) {
        bail!("chunk sizes must be at least 1 byte");
    }
    if let Some(nodes) = a.nodes {
        return cluster(&a, &loaded, &net, nodes, &sizes, &codes);
    }
    let mut rows = Vec::new();
    let mut cells: Vec<SummaryRow> = Vec::new();
    for &code in &codes {
        for scheme in schemes_for(code) {
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
                let mut times = Vec::new();
                for &c in &sizes {
                    let spec = PlanSpec::new(scheme, code, request.clone(), c);
                    let plan = build(&spec).with_context(|| format!("{scheme} {code} {op}"))?;
                    let acct = graph::account(&plan);
                    let model = graph::model::predict_plan(&plan, &net).time_s;
                    let sim = graph::sim::simulate_time(&plan, &net);
                    times.push((c, model, sim));
                    let row = serde_json::json!({
                        "code": code.to_string(), "scheme": scheme, "op": op,
                        "chunk_bytes": c, "slice_bytes": plan.slice_bytes,
                        "steps": acct.steps, "max_fan_in": acct.max_fan_in,
                        "model_time_s": model, "sim_time_s": sim,
                    });
                    rows.push(row);
                }
                cells.push((code.to_string(), scheme.to_string(), op, times));
            }
        }
    }
    if a.json {
        outln!("{}", serde_json::to_string_pretty(&rows)?)?;
        return Ok(());
    }
    outln!("{}", loaded.line)?;
    outln!(
        "# encode: one stripe from the agent; repair: chunk 0 lost, rebuilt at node 0. Times in \
         microseconds. model: the critical path of the primitives' alpha-beta terms; sim: the \
         discrete-event simulator (without bytes here; the tests run every plan on real bytes)."
    )?;
    if a.grid {
        outln!(
            "{:<11} {:<7} {:<7} {:>10} {:>6} {:>8} {:>14} {:>14} {:>9}",
            "code",
            "scheme",
            "op",
            "chunk_B",
            "steps",
            "fan_in",
            "model_us",
            "sim_us",
            "model/sim"
        )?;
        for r in &rows {
            let (model, sim) = (
                r["model_time_s"].as_f64().unwrap_or(0.0),
                r["sim_time_s"].as_f64().unwrap_or(0.0),
            );
            outln!(
                "{:<11} {:<7} {:<7} {:>10} {:>6} {:>8} {:>14.3} {:>14.3} {:>9.3}",
                r["code"].as_str().unwrap_or(""),
                r["scheme"].as_str().unwrap_or(""),
                r["op"].as_str().unwrap_or(""),
                r["chunk_bytes"],
                r["steps"],
                r["max_fan_in"],
                model * 1e6,
                sim * 1e6,
                model / sim
            )?;
        }
        return Ok(());
    }
    // The summary: the model's time at a few chunk sizes (those given, or 1 KiB, 64 KiB,
    // 1 MiB, 16 MiB), and how far the model strays from the simulator over every size.
    let shown: Vec<usize> = if a.chunk_bytes.is_empty() {
        vec![1 << 10, 64 << 10, 1 << 20, 16 << 20]
    } else {
        sizes.clone()
    };
    let mut header = format!("{:<11} {:<7} {:<7}", "code", "op", "scheme");
    for &c in &shown {
        header.push_str(&format!(
            " {:>14}",
            format!("{}_us", codes::size::format_bytes(c as u64))
        ));
    }
    header.push_str(&format!(" {:>16}", "model/sim range"));
    outln!("{header}")?;
    let mut order: Vec<usize> = (0..cells.len()).collect();
    order.sort_by_key(|&i| (cells[i].2 != "encode", i));
    for i in order {
        let (code, scheme, op, times) = &cells[i];
        let mut line = format!("{code:<11} {op:<7} {scheme:<7}");
        for &c in &shown {
            match times.iter().find(|t| t.0 == c) {
                Some(&(_, model, _)) => line.push_str(&format!(" {:>14.1}", model * 1e6)),
                None => line.push_str(&format!(" {:>14}", "-")),
            }
        }
        let ratios = times.iter().map(|&(_, m, s)| m / s);
        let lo = ratios.clone().fold(f64::INFINITY, f64::min);
        let hi = ratios.fold(0.0, f64::max);
        line.push_str(&format!(" {:>16}", format!("{lo:.2}–{hi:.2}")));
        outln!("{line}")?;
    }
    outln!(
        "# {} rows of {} plans; `inec model --grid` prints every chunk size with steps and fan-in, \
         --json every row as JSON",
        cells.len(),
        rows.len()
    )?;
    Ok(())
}

/// `inec model --nodes N`: many stripes' repairs on one simulated cluster.
fn cluster(
    a: &ModelArgs,
    loaded: &Loaded,
    net: &NetConfig,
    nodes: usize,
    sizes: &[usize],
    codes: &[Code],
) -> Result<()> {
    let stripes = a.stripes.unwrap_or(nodes);
    let requesters = if a.requesters.is_empty() {
        let mut r = vec![1, stripes.min(nodes)];
        r.dedup();
        r
    } else {
        a.requesters.clone()
    };
    let lost = if a.lost.is_empty() {
        vec![0]
    } else {
        a.lost.clone()
    };
    let mut rows: Vec<ClusterSummary> = Vec::new();
    if !a.json {
        outln!("{}", loaded.line)?;
        outln!(
            "# {stripes} stripes over {nodes} nodes (chunk i of stripe t on node (t+i) mod \
             {nodes}), chunks {lost:?} of every stripe repaired at once; stripe t at requester \
             t mod r. All repairs share every NIC (simulated, without bytes). throughput: bytes \
             rebuilt per second; one_stripe: one repair alone."
        )?;
        outln!(
            "{:<11} {:<7} {:>10} {:>10} {:>14} {:>14} {:>12} {:>14} {:>14}",
            "code",
            "scheme",
            "chunk_B",
            "requesters",
            "sim_us",
            "one_stripe_us",
            "GB/s",
            "max_nic_in_B",
            "max_nic_out_B"
        )?;
    }
    for &code in codes {
        for scheme in schemes_for(code) {
            for &c in sizes {
                for &r in &requesters {
                    let spec = ClusterSpec {
                        scheme,
                        code,
                        nodes,
                        stripes,
                        requesters: r,
                        lost: lost.clone(),
                        chunk_bytes: c,
                        slice_bytes: None,
                        aggregators: None,
                    };
                    let run = graph::cluster::run(&spec, net)
                        .with_context(|| format!("{scheme} {code} {nodes} nodes"))?;
                    let s = run.summary(&spec);
                    if !a.json {
                        outln!(
                            "{:<11} {:<7} {:>10} {:>10} {:>14.3} {:>14.3} {:>12.3} {:>14} {:>14}",
                            s.code,
                            s.scheme.to_string(),
                            s.chunk_bytes,
                            s.requesters,
                            s.sim_time_s * 1e6,
                            s.one_stripe_s * 1e6,
                            s.throughput_gbyte_s,
                            s.max_nic_in_bytes,
                            s.max_nic_out_bytes
                        )?;
                    }
                    rows.push(s);
                }
            }
        }
    }
    if a.json {
        outln!("{}", serde_json::to_string_pretty(&rows)?)?;
    }
    Ok(())
}
