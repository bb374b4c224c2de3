//! The tables `inec plan` and `inec model` print: the calibration in use (a file, or rates
//! measured now, with overrides), and every scheme's predicted and simulated encode and repair
//! times, as a summary, a grid, JSON rows, or many stripes on one simulated cluster.

use std::fmt::Write;
use std::path::PathBuf;

use codes::Code;

use crate::cluster::{ClusterSpec, ClusterSummary};
use crate::model::{Calibration, BUILTIN_CALIBRATION_PATH};
use crate::paper::{schemes_for, PAPER_CODES};
use crate::sim::NetConfig;
use crate::{build, PlanError, PlanSpec, Request, Target};

/// Errors of building the tables.
#[derive(Debug, thiserror::Error)]
pub enum TablesError {
    #[error("{what}: {source}")]
    Plan {
        what: String,
        #[source]
        source: PlanError,
    },
    #[error("bad calibration override: {0}")]
    Override(String),
    #[error(transparent)]
    Calibration(#[from] PlanError),
    #[error("chunk sizes must be at least 1 byte")]
    ZeroChunk,
}

/// Where the network and compute constants come from.
#[derive(Clone, Debug, Default)]
pub struct CalibrationSource {
    /// A calibration file (default: the built-in one).
    pub file: Option<PathBuf>,
    /// Measure the XOR and multiply-accumulate rates now with the kernel in use.
    pub measure: bool,
    pub bandwidth_gbps: Option<f64>,
    pub latency_us: Option<f64>,
    pub overhead_us: Option<f64>,
    pub xor_gbyte_s: Option<f64>,
    pub mul_add_gbyte_s: Option<f64>,
}

/// The constants in use and a line saying where they come from.
#[derive(Clone, Debug)]
pub struct Loaded {
    pub cal: Calibration,
    /// `calibration: <origin> [with <overrides>] (<the numbers>)`.
    pub line: String,
    /// The file's compute rates were measured with another kernel than the one in use.
    pub warning: Option<String>,
}

impl CalibrationSource {
    /// Reads the file (or the built-in constants), measures or overrides what was asked.
    pub fn load(&self) -> Result<Loaded, TablesError> {
        let (mut c, origin) = match &self.file {
            Some(path) => (Calibration::load(path)?, path.display().to_string()),
            None => (
                Calibration::builtin(),
                format!("default ({BUILTIN_CALIBRATION_PATH})"),
            ),
        };
        let mut notes = Vec::new();
        let mut warning = None;
        if self.measure {
            let rates = crate::model::measure_compute(256 << 10, 16, 5);
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
            warning = c.kernel_mismatch();
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
            .map_err(|reason| TablesError::Override(reason.to_string()))?;
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
        Ok(Loaded {
            cal: c,
            line,
            warning,
        })
    }
}

/// What `inec model` shows.
#[derive(Clone, Debug, Default)]
pub struct ModelQuery {
    /// Chunk sizes (empty: 128 B to 16 MiB, or 1 MiB with `nodes`).
    pub chunk_bytes: Vec<usize>,
    /// Codes (empty: the papers').
    pub codes: Vec<Code>,
    /// Every code × scheme × operation × chunk size instead of the summary.
    pub grid: bool,
    /// Many stripes' repairs on a simulated cluster of this many nodes.
    pub nodes: Option<usize>,
    /// With `nodes`: the stripes repaired at once (default: as many as nodes).
    pub stripes: Option<usize>,
    /// With `nodes`: numbers of distinct requesters (default 1 and the number of stripes).
    pub requesters: Vec<usize>,
    /// With `nodes`: the chunks lost in every stripe (default 0).
    pub lost: Vec<usize>,
    /// JSON rows instead of a table.
    pub json: bool,
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

/// One row of the summary: code, scheme, operation, and (chunk size, model time, simulated
/// time) per chunk size.
type SummaryRow = (String, String, &'static str, Vec<(usize, f64, f64)>);

/// The text `inec model` prints for `q` with the constants `loaded`.
pub fn model(q: &ModelQuery, loaded: &Loaded) -> Result<String, TablesError> {
    let net: NetConfig = loaded.cal.net();
    let sizes = match (q.chunk_bytes.is_empty(), q.nodes.is_some()) {
        (false, _) => q.chunk_bytes.clone(),
        (true, false) => MODEL_CHUNK_BYTES.to_vec(),
        (true, true) => vec![1 << 20],
    };
    let codes: Vec<Code> = if q.codes.is_empty() {
        PAPER_CODES
            .iter()
            .map(|s| s.parse().expect("the papers' codes parse"))
            .collect()
    } else {
        q.codes.clone()
    };
    if sizes.contains(&0) {
        return Err(TablesError::ZeroChunk);
    }
    if let Some(nodes) = q.nodes {
        return cluster(q, loaded, &net, nodes, &sizes, &codes);
    }
    let mut rows = Vec::new();
    let mut cells: Vec<SummaryRow> = Vec::new();
    for &code in &codes {
        for scheme in schemes_for(code) {
            let repair = Request::Repair {
                lost: vec![0],
                target: Target::Node(0),
            };
            for (op, request) in [("encode", Request::Encode), ("repair", repair)] {
                let mut times = Vec::new();
                for &c in &sizes {
                    let spec = PlanSpec::new(scheme, code, request.clone(), c);
                    let plan = build(&spec).map_err(|source| TablesError::Plan {
                        what: format!("{scheme} {code} {op}"),
                        source,
                    })?;
                    let acct = crate::account(&plan);
                    let model = crate::model::predict_plan(&plan, &net).time_s;
                    let sim = crate::sim::simulate_time(&plan, &net);
                    times.push((c, model, sim));
                    rows.push(serde_json::json!({
                        "code": code.to_string(), "scheme": scheme, "op": op,
                        "chunk_bytes": c, "slice_bytes": plan.slice_bytes,
                        "steps": acct.steps, "max_fan_in": acct.max_fan_in,
                        "model_time_s": model, "sim_time_s": sim,
                    }));
                }
                cells.push((code.to_string(), scheme.to_string(), op, times));
            }
        }
    }
    if q.json {
        let text = serde_json::to_string_pretty(&rows).expect("rows serialize");
        return Ok(format!("{text}\n"));
    }
    let mut out = String::new();
    let o = &mut out;
    let _ = writeln!(o, "{}", loaded.line);
    let _ = writeln!(
        o,
        "# encode: one stripe from the agent; repair: chunk 0 lost, rebuilt at node 0. Times in \
         microseconds. model: the critical path of the primitives' alpha-beta terms; sim: the \
         discrete-event simulator (without bytes here; the tests run every plan on real bytes)."
    );
    if q.grid {
        let _ = writeln!(
            o,
            "{:<11} {:<7} {:<7} {:>10} {:>6} {:>8} {:>14} {:>14} {:>9}",
            "code", "scheme", "op", "chunk_B", "steps", "fan_in", "model_us", "sim_us", "model/sim"
        );
        for r in &rows {
            let (model, sim) = (
                r["model_time_s"].as_f64().unwrap_or(0.0),
                r["sim_time_s"].as_f64().unwrap_or(0.0),
            );
            let _ = writeln!(
                o,
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
            );
        }
        return Ok(out);
    }
    // The summary: the model's time at a few chunk sizes (those given, or 1 KiB, 64 KiB,
    // 1 MiB, 16 MiB), and how far the model strays from the simulator over every size.
    let shown: Vec<usize> = if q.chunk_bytes.is_empty() {
        vec![1 << 10, 64 << 10, 1 << 20, 16 << 20]
    } else {
        sizes.clone()
    };
    let mut header = format!("{:<11} {:<7} {:<7}", "code", "op", "scheme");
    for &c in &shown {
        let label = format!("{}_us", codes::size::format_bytes(c as u64));
        let _ = write!(header, " {label:>14}");
    }
    let _ = write!(header, " {:>16}", "model/sim range");
    let _ = writeln!(o, "{header}");
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
        let _ = writeln!(o, "{line}");
    }
    let _ = writeln!(
        o,
        "# {} rows of {} plans; `inec model --grid` prints every chunk size with steps and fan-in, \
         --json every row as JSON",
        cells.len(),
        rows.len()
    );
    Ok(out)
}

/// `inec model --nodes N`: many stripes' repairs on one simulated cluster.
fn cluster(
    q: &ModelQuery,
    loaded: &Loaded,
    net: &NetConfig,
    nodes: usize,
    sizes: &[usize],
    codes: &[Code],
) -> Result<String, TablesError> {
    let stripes = q.stripes.unwrap_or(nodes);
    let requesters = if q.requesters.is_empty() {
        let mut r = vec![1, stripes.min(nodes)];
        r.dedup();
        r
    } else {
        q.requesters.clone()
    };
    let lost = if q.lost.is_empty() {
        vec![0]
    } else {
        q.lost.clone()
    };
    let mut rows: Vec<ClusterSummary> = Vec::new();
    let mut out = String::new();
    let o = &mut out;
    if !q.json {
        let _ = writeln!(o, "{}", loaded.line);
        let _ = writeln!(
            o,
            "# {stripes} stripes over {nodes} nodes (chunk i of stripe t on node (t+i) mod \
             {nodes}), chunks {lost:?} of every stripe repaired at once; stripe t at requester \
             t mod r. All repairs share every NIC (simulated, without bytes). throughput: bytes \
             rebuilt per second; one_stripe: one repair alone."
        );
        let _ = writeln!(
            o,
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
        );
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
                    let run =
                        crate::cluster::run(&spec, net).map_err(|source| TablesError::Plan {
                            what: format!("{scheme} {code} {nodes} nodes"),
                            source,
                        })?;
                    let s = run.summary(&spec);
                    if !q.json {
                        let _ = writeln!(
                            o,
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
                        );
                    }
                    rows.push(s);
                }
            }
        }
    }
    if q.json {
        let text = serde_json::to_string_pretty(&rows).expect("rows serialize");
        let _ = writeln!(o, "{text}");
    }
    Ok(out)
}
