//! `inec bench ycsb --study`: the INEC paper's YCSB study (§IV-B) on the local cache — Figure
//! 14 (five schemes × workloads A, B, C, 8 KiB values, every read degraded, coherent against
//! incoherent), the configurations of Figures 9–13, and its goals (degraded p99 against normal
//! p99 for PPR and ECPipe; `docs/ycsb.md`). Each configuration runs coherent then incoherent
//! with the same driver and settings; the improvement is coherent over incoherent.

use std::fs;
use std::io::Write;

use crate::Result;
use serde::Serialize;

use super::cli::{run_system, SystemRun, YcsbArgs};
use load::ycsb::{op_name, Workload};
use load::{OpKind, PhaseStats};
use report::{BarChart, CdfPlot, CdfSeries};

/// One configuration of the study.
#[derive(Clone, Debug)]
pub struct Case {
    pub label: String,
    pub figure: &'static str,
    pub code: &'static str,
    pub scheme: &'static str,
    pub workload: Workload,
    pub value_bytes: usize,
    pub degraded_ratio: f64,
    pub dead_nodes: Vec<usize>,
}

/// Figure 14: RS(6,3), LRC(6,2,2), PPR(6,3), ECPipe(6,3), TriEC(6,3) × A, B, C at 8 KiB, all
/// reads degraded.
pub fn figure14() -> Vec<Case> {
    let mut v = Vec::new();
    for w in [Workload::A, Workload::B, Workload::C] {
        for (name, code, scheme) in [
            ("RS(6,3)", "rs:6,3", "rs"),
            ("LRC(6,2,2)", "lrc:6,2,2", "lrc"),
            ("PPR(6,3)", "rs:6,3", "ppr"),
            ("ECPipe(6,3)", "rs:6,3", "ecpipe"),
            ("TriEC(6,3)", "rs:6,3", "triec"),
        ] {
            v.push(Case {
                label: format!("{name} {}", w.letter()),
                figure: "14",
                code,
                scheme,
                workload: w,
                value_bytes: 8192,
                degraded_ratio: 1.0,
                dead_nodes: Vec::new(),
            });
        }
    }
    v
}

/// Figures 9–13's configurations (every read degraded, so the decode side has samples).
pub fn figures9to13() -> Vec<Case> {
    let c = |label: &str, figure, code, scheme, workload, kib: usize, dead: Vec<usize>| Case {
        label: label.to_string(),
        figure,
        code,
        scheme,
        workload,
        value_bytes: kib << 10,
        degraded_ratio: 1.0,
        dead_nodes: dead,
    };
    vec![
        c(
            "RS(3,2) A 4 KiB",
            "9",
            "rs:3,2",
            "rs",
            Workload::A,
            4,
            vec![],
        ),
        c(
            "LRC(12,2,2) A 32 KiB",
            "10",
            "lrc:12,2,2",
            "lrc",
            Workload::A,
            32,
            vec![],
        ),
        c(
            "PPR(12,4) C 64 KiB",
            "11",
            "rs:12,4",
            "ppr",
            Workload::C,
            64,
            vec![],
        ),
        c(
            "ECPipe(6,3) B 16 KiB",
            "12",
            "rs:6,3",
            "ecpipe",
            Workload::B,
            16,
            vec![],
        ),
        // Two lost chunks: the forced position and a node down for the whole run.
        c(
            "TriEC(3,2) A 8 KiB, 2 lost",
            "13",
            "rs:3,2",
            "triec",
            Workload::A,
            8,
            vec![1],
        ),
    ]
}

/// The goal of degraded p99 ≤ 2× normal p99 with PPR and ECPipe at 8 KiB: workload C, 5% of
/// the reads degraded (enough samples for a p99), coherent.
pub fn goals() -> Vec<Case> {
    ["ppr", "ecpipe"]
        .into_iter()
        .map(|scheme| Case {
            label: format!("{} C 8 KiB, 5% degraded", scheme.to_uppercase()),
            figure: "goal",
            code: "rs:6,3",
            scheme,
            workload: Workload::C,
            value_bytes: 8192,
            degraded_ratio: 0.05,
            dead_nodes: Vec::new(),
        })
        .collect()
}

/// One configuration's result, both modes.
#[derive(Clone, Debug, Serialize)]
pub struct CaseResult {
    pub label: String,
    pub figure: String,
    pub coherent: SystemRun,
    pub incoherent: SystemRun,
    /// Coherent ÷ incoherent throughput − 1 (the paper's "improvement").
    pub throughput_gain: f64,
    /// 1 − coherent ÷ incoherent, p50 / p95 / p99 of the writes (update; rmw for F).
    pub write_latency_cut: [f64; 3],
    /// 1 − coherent ÷ incoherent, p50 / p95 / p99 of the degraded reads.
    pub degraded_latency_cut: [f64; 3],
}

fn pcts(r: &SystemRun, op: &str) -> Option<[f64; 3]> {
    r.run.ops.get(op).map(|o| [o.p50_us, o.p95_us, o.p99_us])
}

fn cut(c: Option<[f64; 3]>, i: Option<[f64; 3]>) -> [f64; 3] {
    match (c, i) {
        (Some(c), Some(i)) => [0, 1, 2].map(|j| 1.0 - c[j] / i[j]),
        _ => [f64::NAN; 3],
    }
}

fn pct(x: f64) -> String {
    if x.is_finite() {
        format!("{:+.1}%", x * 100.0)
    } else {
        "–".into()
    }
}

/// A count read from the nodes, `?` when they did not give it.
fn count(c: Option<u64>) -> String {
    c.map_or_else(|| "?".into(), |c| c.to_string())
}

/// Runs the study: `fig14`, `cases`, `goals` or `all`.
pub fn run(base: &YcsbArgs, which: &str) -> Result<()> {
    let cases: Vec<Case> = match which {
        "fig14" => figure14(),
        "cases" => figures9to13(),
        "goals" => goals(),
        "all" => [figure14(), figures9to13(), goals()].concat(),
        w => bail!("--study {w:?}: expected fig14, cases, goals or all"),
    };
    fs::create_dir_all(&base.out)?;
    let mut jsonl = fs::File::create(base.out.join("study.jsonl"))?;
    let mut log = crate::stdout::Stdout::unlocked();
    writeln!(
        log,
        "# cpu: {} ({} cores, shared with other work: compare coherent and incoherent within \
         a configuration); {} records, {} connections, run phase {} s, {}",
        crate::host::cpu_model(),
        std::thread::available_parallelism().map_or(1, |n| n.get()),
        base.records,
        base.connections,
        base.duration_s,
        match base.rate {
            Some(r) => format!("open loop at {r} req/s"),
            None => "closed loop".into(),
        }
    )?;
    let mut results = Vec::new();
    for case in &cases {
        let mut a = base.clone();
        a.code = case.code.to_string();
        a.scheme = case.scheme.to_string();
        a.value_bytes = case.value_bytes;
        a.degraded_ratio = case.degraded_ratio;
        a.dead_nodes = case.dead_nodes.clone();
        a.kill_mean_s = None;
        a.inec_nodes = None;
        let code = super::cli::parse_code(&a.code)?;
        let (k, n) = (code.k(), code.n());
        let mut runs: Vec<(SystemRun, PhaseStats)> = Vec::new();
        for mode in ["inec-coherent", "inec-incoherent"] {
            let (r, st, _) = run_system(&a, mode, case.workload, n, k, &mut log)?;
            if r.run.wrong + r.verify.wrong > 0 {
                return Err(failure!(
                    "{} {mode}: wrong values {:?}",
                    case.label,
                    r.run.check
                ));
            }
            runs.push((r, st));
        }
        let (inc, inc_st) = runs.pop().expect("two runs");
        let (coh, coh_st) = runs.pop().expect("two runs");
        let write_op = if case.workload == Workload::F {
            "rmw"
        } else {
            "update"
        };
        let res = CaseResult {
            label: case.label.clone(),
            figure: case.figure.to_string(),
            throughput_gain: coh.run.throughput_ops_s / inc.run.throughput_ops_s - 1.0,
            write_latency_cut: cut(pcts(&coh, write_op), pcts(&inc, write_op)),
            degraded_latency_cut: cut(pcts(&coh, "degraded_read"), pcts(&inc, "degraded_read")),
            coherent: coh,
            incoherent: inc,
        };
        writeln!(
            log,
            "# {}: throughput {:.0} vs {:.0} ops/s ({}), write p99 cut {}, degraded p99 cut {}; \
             plan runs / fallbacks / timeouts: coherent {}/{}/{}, incoherent {}/{}/{}",
            res.label,
            res.coherent.run.throughput_ops_s,
            res.incoherent.run.throughput_ops_s,
            pct(res.throughput_gain),
            pct(res.write_latency_cut[2]),
            pct(res.degraded_latency_cut[2]),
            count(res.coherent.degraded_plan_runs),
            count(res.coherent.degraded_plan_fallbacks),
            res.coherent.run.errors.get("timeout").copied().unwrap_or(0),
            count(res.incoherent.degraded_plan_runs),
            count(res.incoherent.degraded_plan_fallbacks),
            res.incoherent
                .run
                .errors
                .get("timeout")
                .copied()
                .unwrap_or(0),
        )?;
        writeln!(jsonl, "{}", serde_json::to_string(&res)?)?;
        // CDFs of the figure's cases: coherent against incoherent, writes and degraded reads.
        if case.figure != "14" {
            for op in [OpKind::Set, OpKind::DegradedGet, OpKind::Get] {
                let series: Vec<CdfSeries> = [("coherent", &coh_st), ("incoherent", &inc_st)]
                    .iter()
                    .filter_map(|(m, st)| {
                        let h = &st.ops.get(&op)?.hist;
                        (!h.is_empty()).then(|| CdfSeries::from_histogram_ns(*m, h))
                    })
                    .collect();
                if series.len() < 2 {
                    continue;
                }
                let slug: String = case
                    .label
                    .chars()
                    .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
                    .collect();
                let plot = CdfPlot::new(format!("{}: {} latency", case.label, op_name(op)), series);
                fs::write(
                    base.out
                        .join(format!("study-{}-{}.svg", slug.to_lowercase(), op_name(op))),
                    plot.to_svg(),
                )?;
            }
        }
        results.push(res);
    }
    // The table and, for Figure 14, the paper's bar charts.
    let mut t = String::from(
        "| fig | configuration | coherent ops/s | incoherent ops/s | throughput | write p50 / p95 / p99 cut | degraded read p50 / p95 / p99 cut | coherent write p99 µs | coherent degraded p99 µs | coherent read p99 µs |\n\
         |---|---|---:|---:|---:|---|---|---:|---:|---:|\n",
    );
    for r in &results {
        let p99 = |op: &str| {
            r.coherent
                .run
                .ops
                .get(op)
                .map_or("–".into(), |o| format!("{:.0}", o.p99_us))
        };
        t.push_str(&format!(
            "| {} | {} | {:.0} | {:.0} | {} | {} / {} / {} | {} / {} / {} | {} | {} | {} |\n",
            r.figure,
            r.label,
            r.coherent.run.throughput_ops_s,
            r.incoherent.run.throughput_ops_s,
            pct(r.throughput_gain),
            pct(r.write_latency_cut[0]),
            pct(r.write_latency_cut[1]),
            pct(r.write_latency_cut[2]),
            pct(r.degraded_latency_cut[0]),
            pct(r.degraded_latency_cut[1]),
            pct(r.degraded_latency_cut[2]),
            p99("update"),
            p99("degraded_read"),
            p99("read"),
        ));
    }
    write!(log, "{t}")?;
    fs::write(base.out.join("study.md"), &t)?;
    let fig14: Vec<&CaseResult> = results.iter().filter(|r| r.figure == "14").collect();
    if !fig14.is_empty() {
        let schemes = [
            "RS(6,3)",
            "LRC(6,2,2)",
            "PPR(6,3)",
            "ECPipe(6,3)",
            "TriEC(6,3)",
        ];
        let groups = ["A", "B", "C"];
        for (file, title, f) in [
            (
                "study-fig14-throughput.svg",
                "Figure 14: throughput, coherent over incoherent (%)",
                (&|r: &CaseResult| r.throughput_gain) as &dyn Fn(&CaseResult) -> f64,
            ),
            (
                "study-fig14-write.svg",
                "Figure 14: write p50 latency cut, coherent vs incoherent (%)",
                &|r: &CaseResult| r.write_latency_cut[0],
            ),
            (
                "study-fig14-degraded.svg",
                "Figure 14: degraded read p50 latency cut, coherent vs incoherent (%)",
                &|r: &CaseResult| r.degraded_latency_cut[0],
            ),
        ] {
            let values: Vec<Vec<f64>> = groups
                .iter()
                .map(|g| {
                    schemes
                        .iter()
                        .map(|s| {
                            fig14
                                .iter()
                                .find(|r| r.label == format!("{s} {g}"))
                                .map_or(f64::NAN, |r| f(r) * 100.0)
                        })
                        .collect()
                })
                .collect();
            let chart = BarChart::new(
                title,
                "% (coherent over incoherent)",
                schemes.iter().map(|s| s.to_string()).collect(),
                groups.iter().map(|g| format!("workload {g}")).collect(),
                values,
            );
            fs::write(base.out.join(file), chart.to_svg())?;
        }
    }
    writeln!(log, "# written: {}", base.out.join("study.jsonl").display())?;
    Ok(())
}
