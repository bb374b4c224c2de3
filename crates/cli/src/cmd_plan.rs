//! `inec plan`, `inec model`.

use std::path::PathBuf;

use anyhow::{bail, Result};
use clap::Args;
use codes::Code;
use graph::tables::Loaded;
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

impl CalibrationArgs {
    /// The constants in use, a warning about them printed.
    fn load(&self) -> Result<Loaded> {
        let loaded = graph::tables::CalibrationSource {
            file: self.calibration.clone(),
            measure: self.calibrate,
            bandwidth_gbps: self.bandwidth_gbps,
            latency_us: self.latency_us,
            overhead_us: self.overhead_us,
            xor_gbyte_s: self.xor_gbyte_s,
            mul_add_gbyte_s: self.mul_add_gbyte_s,
        }
        .load()?;
        if let Some(warning) = &loaded.warning {
            eprintln!("{warning}");
        }
        Ok(loaded)
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

pub fn model(a: ModelArgs) -> Result<()> {
    let loaded = a.calibration.load()?;
    let query = graph::tables::ModelQuery {
        chunk_bytes: a.chunk_bytes,
        codes: a.codes,
        grid: a.grid,
        nodes: a.nodes,
        stripes: a.stripes,
        requesters: a.requesters,
        lost: a.lost,
        json: a.json,
    };
    out!("{}", graph::tables::model(&query, &loaded)?)?;
    Ok(())
}
