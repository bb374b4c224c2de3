//! `inec demo`: the erasure-coded cache surviving a crash, start to finish, in about two
//! minutes. A local cluster (`inec cache up`), a YCSB-A load, one node killed with SIGKILL
//! while the load runs, reads served degraded and writes acknowledged while it is down, the
//! node restarted empty and recovered in the background, every value read back and checked,
//! a summary table and an HTML report with plots; every node stopped at the end, on an error
//! and on Ctrl-C (SIGINT, SIGTERM, SIGHUP).

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{mpsc, Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use crate::{BenchError, Context, Result};
use clap::Args;
use codes::Code;
use harness::cache::{CacheStatus, InecCache, InecOptions};

use load::ycsb::{ReadAll, Workload, YcsbChooser};
use load::{
    key_id, keys_of_thread, Choice, Chooser, DegradedForm, KeyNames, LoadAll, OpKind, Phase,
    PhaseStats, Route, Session, Target, TIMELINE_STEP,
};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use report::{
    BarChart, CdfPlot, CdfSeries, Event, Page, Series, Table, Timeline, TimelineBand, TimelinePanel,
};

#[derive(Args, Debug)]
pub struct DemoArgs {
    /// A short run (a few hundred records, phases of 2 s): what the tests run.
    #[arg(long)]
    pub quick: bool,
    /// The code: rs:K,M or lrc:K,L,R.
    #[arg(long, default_value = "rs:6,3")]
    pub code: Code,
    /// Repair scheme of degraded reads: rs, lrc, ppr, ecpipe or triec.
    #[arg(long, default_value = "ppr")]
    pub scheme: String,
    /// Engine mode: coherent or incoherent.
    #[arg(long, default_value = "coherent")]
    pub mode: String,
    /// Value layout: auto (whole below 32 KiB, split above), whole or split (docs/cache.md).
    #[arg(long, default_value = "auto", value_parser = ["auto", "whole", "split"])]
    pub layout: String,
    /// Nodes (default: the chunks per stripe of the code, 9 for rs:6,3).
    #[arg(long)]
    pub nodes: Option<usize>,
    /// Records loaded (default 40000; --quick 600).
    #[arg(long)]
    pub records: Option<u64>,
    /// Bytes per value.
    #[arg(long, default_value = "8KiB", value_parser = codes::size::parse_size)]
    pub value_bytes: usize,
    /// Seconds of YCSB-A before the kill and while the node is down (the phase after
    /// recovery runs half as long). Default 20; --quick 2.
    #[arg(long)]
    pub seconds: Option<f64>,
    /// Client connections (one client thread, a mio event loop).
    #[arg(long, default_value_t = 32)]
    pub connections: usize,
    /// The node to kill (default 3, or the last node of a smaller cluster).
    #[arg(long)]
    pub kill_node: Option<usize>,
    /// Directory of the report (index.html, SVG plots, summary.md, results.json).
    #[arg(long, default_value = "target/inec-demo")]
    pub out: PathBuf,
    /// Give up when the restarted node has not recovered after this many seconds.
    #[arg(long, default_value_t = 300)]
    pub recovery_timeout_s: u64,
    /// Seed of the request choices.
    #[arg(long, default_value_t = 0x1DEC)]
    pub seed: u64,
}

/// What the demo prints, on a terminal with progress bars and otherwise as plain lines.
struct Out {
    tty: bool,
}

impl Out {
    fn step(&self, n: usize, total: usize, text: &str) -> std::io::Result<()> {
        outln!("[{n}/{total}] {text}")
    }
}

/// Reads of keys whose stripe lacks a data chunk (a member down or recovering) are sent as
/// [`OpKind::DegradedGet`] with a plain `get` form, so that their latency is kept apart;
/// everything else is YCSB-A's own choice.
struct Classify {
    inner: YcsbChooser,
    thread: usize,
    threads: usize,
    nodes: u64,
    k: u64,
    missing: Arc<AtomicU64>,
    names: KeyNames,
    buf: Vec<u8>,
}

impl Chooser for Classify {
    fn next(&mut self, rng: &mut SmallRng, keys: usize) -> Option<Choice> {
        let mut c = self.inner.next(rng, keys)?;
        let missing = self.missing.load(Ordering::Relaxed);
        if c.op == OpKind::Get && missing != 0 {
            self.buf.clear();
            self.names
                .append(&mut self.buf, key_id(c.local, self.thread, self.threads));
            let stripe = cache::cluster::placement::fnv1a_64(&self.buf) % self.nodes;
            // Position p of stripe s is on node (s + p) mod N; positions 0..k hold data.
            if (0..self.k).any(|p| missing & (1 << ((stripe + p) % self.nodes)) != 0) {
                c.op = OpKind::DegradedGet;
            }
        }
        Some(c)
    }
}

/// One phase of the run: its stats and when it ran.
struct PhaseRun {
    name: &'static str,
    stats: PhaseStats,
    start: Instant,
    end: Instant,
    /// Degraded reads the nodes counted (`degraded_reads` of `stats inec`) during the phase.
    server_degraded: u64,
}

/// The controller thread's commands and what it saw.
enum Cmd {
    Kill { after: Duration },
    Restart,
    Stop,
}

#[derive(Default)]
struct Seen {
    killed: Option<Instant>,
    restarted: Option<Instant>,
    /// Every node up and every stripe whole in every view.
    stripes_whole: Option<Instant>,
    /// Values stored split since then, waiting to be written whole again by their homes
    /// (the most any poll counted).
    split_then: u64,
    /// Recovered: every stripe whole and every value in its layout again (no value the layout
    /// wants whole left split), or [`LAYOUT_WAIT`] after the stripes were whole.
    recovered: Option<Instant>,
    /// Values still split when the demo stopped waiting for them.
    split_left: u64,
    /// What the controller could not do (stop the demo): a kill or restart that failed, or
    /// its line that standard output no longer took.
    failure: Option<BenchError>,
    /// (time, status) every poll.
    statuses: Vec<(Instant, CacheStatus)>,
    /// Sum over nodes of the increases of their `degraded_reads` counters so far.
    degraded_total: u64,
}

/// How long, once every stripe is whole again, the demo waits for the homes to write whole the
/// values written split while the node was down before it measures the phase after recovery.
const LAYOUT_WAIT: Duration = Duration::from_secs(30);
/// A few of the nodes' background rounds (a second each), which count the values still split.
const COUNT_ROUND: Duration = Duration::from_secs(3);

/// What the controller and the phases have seen, taken back from a thread that panicked holding
/// it (docs/design.md, "A poisoned lock is taken back"): every field is set whole.
fn lock(seen: &Mutex<Seen>) -> MutexGuard<'_, Seen> {
    seen.lock().unwrap_or_else(PoisonError::into_inner)
}

fn us(h: &hdrhistogram::Histogram<u64>, q: f64) -> f64 {
    h.value_at_quantile(q) as f64 / 1e3
}

fn fmt_int(v: f64) -> String {
    let n = v.round() as i64;
    let s = n.abs().to_string();
    let mut out = String::new();
    for (i, ch) in s.chars().enumerate() {
        let left = s.len() - i;
        if i > 0 && left / 3 * 3 == left {
            out.push(',');
        }
        out.push(ch);
    }
    if n < 0 {
        format!("-{out}")
    } else {
        out
    }
}

fn pct(h: Option<&load::OpStats>) -> String {
    match h {
        Some(s) if s.ok > 0 => format!(
            "{} / {}",
            fmt_int(us(&s.hist, 0.5)),
            fmt_int(us(&s.hist, 0.99))
        ),
        _ => "–".into(),
    }
}

/// Error reasons a client of a node that is killed sees on its connection to that node (the
/// load generator's failover route sends such a request again to the next node), and the
/// `SERVER_ERROR` of a write whose fate is unknown while a stripe changes hands (its agent's
/// lease ran out under it, or the agent did not answer: docs/cache.md, "Writes in doubt"; the
/// checker accepts either value afterwards). Both are expected only around the kill and the
/// handover back.
fn documented(reason: &str) -> bool {
    reason.starts_with("connection") || reason.contains("may or may not")
}

/// Runs the demo; its cache nodes run `exe` (the `inec` executable).
pub fn run(a: DemoArgs, exe: &Path) -> Result<()> {
    let code = a.code;
    let _: graph::Scheme = a
        .scheme
        .parse()
        .map_err(|e| settings!("bad --scheme: {e}"))?;
    if !matches!(a.mode.as_str(), "coherent" | "incoherent") {
        bail!("bad --mode {:?} (coherent or incoherent)", a.mode);
    }
    let nodes = a.nodes.unwrap_or(code.n());
    if nodes < code.n() {
        bail!(
            "--nodes {nodes}: the demo needs at least {} nodes for {code} so that a killed node \
             costs each stripe one chunk",
            code.n()
        );
    }
    if nodes > 64 {
        bail!("--nodes {nodes}: at most 64");
    }
    let kill = a.kill_node.unwrap_or(3.min(nodes - 1));
    if kill >= nodes {
        bail!("--kill-node {kill}: the cluster has nodes 0..{nodes}");
    }
    let records = a.records.unwrap_or(if a.quick { 600 } else { 40_000 });
    if records == 0 {
        bail!("--records must be at least 1");
    }
    let secs = a.seconds.unwrap_or(if a.quick { 2.0 } else { 20.0 });
    if !(secs > 0.0 && secs <= 3600.0) {
        bail!("--seconds must be in (0, 3600]");
    }
    let phase_len = Duration::from_secs_f64(secs);
    let value_bytes = a.value_bytes.max(load::check::HEADER_BYTES);
    let out = Out {
        tty: harness::progress::shown(),
    };
    let dir = std::env::temp_dir().join(format!("inec-demo-{}", std::process::id()));

    // Ctrl-C, SIGTERM, SIGHUP: stop every node of this demo's cluster, then exit.
    {
        use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM};
        let mut signals = signal_hook::iterator::Signals::new([SIGINT, SIGTERM, SIGHUP])
            .context("installing signal handlers")?;
        let dir = dir.clone();
        std::thread::spawn(move || {
            if let Some(sig) = signals.forever().next() {
                log::warn!("inec demo: interrupted (signal {sig}); stopping the cache nodes");
                harness::cache::teardown_dir(&dir);
                log::warn!("inec demo: every node stopped");
                std::process::exit(130);
            }
        });
    }

    let total_steps = 8;
    let started = Instant::now();
    // ---- 1. the cluster ----
    let need_mib = records as f64 * (value_bytes as f64 + 256.0) * code.n() as f64
        / code.k() as f64
        / nodes as f64
        / (1u64 << 20) as f64;
    let memory_mib = (need_mib * 2.0) as usize + 16;
    out.step(
        1,
        total_steps,
        &format!(
            "starting a local cache: {nodes} nodes, {code}, scheme {}, {}, layout {} (inec cache \
             up)",
            a.scheme, a.mode, a.layout
        ),
    )?;
    let mut opts = InecOptions {
        nodes: Some(nodes),
        ..InecOptions::new(
            exe,
            &code.to_string(),
            &a.scheme,
            &a.mode,
            memory_mib as u64,
        )
    };
    opts.options.layout.clone_from(&a.layout);
    let mut cache = InecCache::start_in(&opts, &dir).context("starting the cache")?;
    outln!(
        "      cluster directory {} (node logs), node pids {:?}",
        dir.display(),
        cache.pids()
    )?;
    let result = demo(
        &a,
        &out,
        &mut cache,
        records,
        value_bytes,
        phase_len,
        kill,
        nodes,
    );
    // Resident memory before the cluster goes.
    let rss: u64 = cache
        .pids()
        .iter()
        .filter_map(|&p| harness::resident_bytes(p))
        .sum();
    // Kept when the run failed or its verdict will (a value wrong or missing, an error
    // the demo does not document): the nodes' side of what went wrong.
    let logs_kept = match &result {
        Ok(r) if !r.flawed(records) => None,
        _ => keep_logs(cache.dir(), &a.out),
    };
    drop(cache);
    let mut report = result?;
    report.rss = rss;
    report.elapsed = started.elapsed();
    let verdict = finish(&a, &report, &code, &opts, nodes, records, value_bytes, kill);
    if let Some(p) = logs_kept {
        outln!("node logs kept in {}", p.display())?;
    }
    outln!(
        "every node stopped; the demo took {:.0} s",
        started.elapsed().as_secs_f64()
    )?;
    verdict
}

fn keep_logs(dir: &Path, out: &Path) -> Option<PathBuf> {
    let to = out.join("node-logs");
    std::fs::create_dir_all(&to).ok()?;
    for e in std::fs::read_dir(dir).ok()?.flatten() {
        let name = e.file_name();
        if name.to_string_lossy().ends_with(".log") {
            let _ = std::fs::copy(e.path(), to.join(&name));
        }
    }
    Some(to)
}

/// What the demo's verdict counts.
struct Tally {
    all_errors: std::collections::BTreeMap<String, u64>,
    wrong: u64,
    missing: u64,
    undocumented: u64,
    documented_n: u64,
}

impl Report {
    fn tally(&self) -> Tally {
        let mut all_errors: std::collections::BTreeMap<String, u64> = Default::default();
        let phases = self.phases.iter().map(|p| &p.stats);
        for stats in phases.chain([&self.load, &self.verify]) {
            for (k, v) in &stats.errors {
                *all_errors.entry(k.clone()).or_default() += v;
            }
        }
        let wrong = self
            .phases
            .iter()
            .map(|p| p.stats.check.wrong())
            .sum::<u64>()
            + self.verify.check.wrong();
        let missing = self
            .phases
            .iter()
            .map(|p| p.stats.check.missing)
            .sum::<u64>()
            + self.verify.check.missing
            + self.verify.check.miss_never_written;
        let count = |doc: bool| -> u64 {
            all_errors
                .iter()
                .filter(|(k, _)| documented(k) == doc)
                .map(|(_, v)| v)
                .sum()
        };
        let (undocumented, documented_n) = (count(false), count(true));
        Tally {
            all_errors,
            wrong,
            missing,
            undocumented,
            documented_n,
        }
    }

    /// Whether the verdict will fail: the node logs are worth keeping.
    fn flawed(&self, records: u64) -> bool {
        let t = self.tally();
        t.wrong > 0 || t.missing > 0 || t.undocumented > 0 || self.verify.check.ok != records
    }
}

/// Everything the summary and the report need.
struct Report {
    load: PhaseStats,
    load_secs: f64,
    phases: Vec<PhaseRun>,
    verify: PhaseStats,
    verify_secs: f64,
    t0: Instant,
    killed: Instant,
    restarted: Instant,
    stripes_whole: Instant,
    split_then: u64,
    recovered: Instant,
    split_left: u64,
    statuses: Vec<(Instant, CacheStatus)>,
    recovery_bytes: u64,
    rss: u64,
    elapsed: Duration,
}

#[allow(clippy::too_many_arguments)]
fn demo(
    a: &DemoArgs,
    out: &Out,
    cache: &mut InecCache,
    records: u64,
    value_bytes: usize,
    phase_len: Duration,
    kill: usize,
    nodes: usize,
) -> Result<Report> {
    let total_steps = 8;
    let target = Target {
        addrs: cache.addrs().to_vec(),
        // Each key to its stripe's agent (the cache's own placement), around a dead node.
        route: Route::HashFailover,
        connections: a.connections.max(nodes),
        threads: 1,
        value_bytes,
        keys: KeyNames::Ycsb,
        timeout: Duration::from_secs(5),
        degraded: Some(DegradedForm {
            prefix: "get ".into(),
            suffix: String::new(),
            meta: false,
        }),
    };
    let mut session = Session::new(target, records, a.seed)?;
    let drain = Duration::from_secs(6);

    // ---- 2. load ----
    out.step(
        2,
        total_steps,
        &format!("loading {records} records of {value_bytes} B (YCSB key names)"),
    )?;
    let bar = harness::progress::bar(records, "load", false);
    let t = Instant::now();
    let load = {
        let done = AtomicBool::new(false);
        std::thread::scope(|s| {
            s.spawn(|| {
                while !done.load(Ordering::Relaxed) {
                    let items: u64 = cache
                        .addrs()
                        .iter()
                        .filter_map(|&c| harness::ask(c, "stats\r\n", Duration::from_secs(1)).ok())
                        .map(|t| {
                            harness::parse_stats(&t)
                                .get("curr_items")
                                .and_then(|v| v.parse::<u64>().ok())
                                .unwrap_or(0)
                        })
                        .sum();
                    bar.set_position(items.min(records));
                    std::thread::sleep(Duration::from_millis(250));
                }
            });
            let phase = Phase {
                duration: None,
                rate: None,
                warmup: Duration::ZERO,
                drain,
            };
            let r = session.run(&phase, &|_, n| Box::new(LoadAll::new(n)));
            done.store(true, Ordering::Relaxed);
            r
        })?
    };
    bar.finish_and_clear();
    let load_secs = t.elapsed().as_secs_f64();
    let loaded = load.ops.get(&OpKind::Set).map_or(0, |s| s.ok);
    outln!(
        "      {loaded} records stored in {load_secs:.1} s ({} sets/s), errors {}",
        fmt_int(loaded as f64 / load_secs),
        load.total_errors()
    )?;
    if loaded != records {
        return Err(failure!(
            "the load stored {loaded} of {records} records (errors: {:?})",
            load.errors
        ));
    }

    // ---- 3..6. YCSB-A with a crash ----
    let missing = Arc::new(AtomicU64::new(0));
    let seen = Arc::new(Mutex::new(Seen::default()));
    let (tx, rx) = mpsc::channel::<Cmd>();
    let k = a.code.k() as u64;
    let mut rng = SmallRng::seed_from_u64(a.seed ^ 0xA11CE);
    let t0 = Instant::now();
    let recovery_timeout = Duration::from_secs(a.recovery_timeout_s);
    let phases: Result<Vec<PhaseRun>> = std::thread::scope(|s| {
        let cache_ref = &mut *cache;
        let seen_c = Arc::clone(&seen);
        let missing_c = Arc::clone(&missing);
        let tty = out.tty;
        let controller =
            s.spawn(move || controller(cache_ref, rx, seen_c, missing_c, kill, records, tty));
        let mut run_phase =
            |name: &'static str, dur: Duration, session: &mut Session| -> Result<PhaseRun> {
                let before = lock(&seen).degraded_total;
                let spec = Workload::A.spec();
                let threads = session.target.threads;
                let seeds: Vec<u64> = (0..threads).map(|_| rng.gen()).collect();
                let missing = Arc::clone(&missing);
                let make = move |t: usize, _keys: usize| -> Box<dyn Chooser> {
                    let mut r = SmallRng::seed_from_u64(seeds[t]);
                    Box::new(Classify {
                        inner: YcsbChooser::new(
                            spec,
                            keys_of_thread(records, t, threads) as u64,
                            None,
                            None,
                            &mut r,
                        ),
                        thread: t,
                        threads,
                        nodes: nodes as u64,
                        k,
                        missing: Arc::clone(&missing),
                        names: KeyNames::Ycsb,
                        buf: Vec::new(),
                    })
                };
                let phase = Phase {
                    duration: Some(dur),
                    rate: None,
                    warmup: Duration::ZERO,
                    drain,
                };
                let start = Instant::now();
                let stats = session.run(&phase, &make)?;
                let end = Instant::now();
                let after = lock(&seen).degraded_total;
                Ok(PhaseRun {
                    name,
                    start: stats.started.unwrap_or(start),
                    stats,
                    end,
                    server_degraded: after.saturating_sub(before),
                })
            };
        let result = (|| -> Result<Vec<PhaseRun>> {
            let mut phases = Vec::new();
            let timed = |n: usize, text: &str| out.step(n, total_steps, text);
            let report = |p: &PhaseRun| -> std::io::Result<()> {
                let reads = p.stats.ops.get(&OpKind::Get).map_or(0, |s| s.ok);
                let deg = p.stats.ops.get(&OpKind::DegradedGet).map_or(0, |s| s.ok);
                let writes = p.stats.ops.get(&OpKind::Set).map_or(0, |s| s.ok);
                outln!(
                    "      {:.1} s: {} ops/s; reads {} (of them on a stripe missing a chunk {}), \
                     writes acknowledged {}, degraded reads counted by the nodes {}, errors {}, \
                     wrong values {}",
                    (p.end - p.start).as_secs_f64(),
                    fmt_int(p.stats.throughput()),
                    reads + deg,
                    deg,
                    writes,
                    p.server_degraded,
                    p.stats.total_errors(),
                    p.stats.check.wrong()
                )
            };
            timed(
                3,
                &format!(
                    "YCSB-A (50% reads, 50% updates, zipfian) for {:.0} s, all nodes up",
                    phase_len.as_secs_f64()
                ),
            )?;
            let p = with_clock("YCSB-A, all up", phase_len, || {
                run_phase("before", phase_len, &mut session)
            })?;
            report(&p)?;
            phases.push(p);

            timed(
                4,
                &format!(
                    "killing node {kill} (SIGKILL) 0.5 s into {:.0} s more of YCSB-A",
                    phase_len.as_secs_f64()
                ),
            )?;
            let _ = tx.send(Cmd::Kill {
                after: Duration::from_millis(500),
            });
            let p = with_clock("YCSB-A, node down", phase_len, || {
                run_phase("node down", phase_len, &mut session)
            })?;
            if let Some(f) = lock(&seen).failure.take() {
                return Err(f);
            }
            report(&p)?;
            phases.push(p);

            timed(
                5,
                &format!("restarting node {kill} empty (inec cache restart); YCSB-A goes on while it recovers"),
            )?;
            let _ = tx.send(Cmd::Restart);
            let since = Instant::now();
            let mut recovering: Option<PhaseRun> = None;
            loop {
                let p = run_phase("recovering", TIMELINE_STEP, &mut session)?;
                recovering = Some(match recovering {
                    None => p,
                    Some(mut acc) => {
                        merge_after(&mut acc.stats, p.stats, p.start - acc.start);
                        acc.end = p.end;
                        acc.server_degraded += p.server_degraded;
                        acc
                    }
                });
                let mut g = lock(&seen);
                if let Some(f) = g.failure.take() {
                    return Err(f);
                }
                if g.recovered.is_some() {
                    break;
                }
                drop(g);
                if since.elapsed() > recovery_timeout {
                    return Err(failure!(
                        "node {kill} did not recover within {} s",
                        recovery_timeout.as_secs()
                    ));
                }
            }
            let p = recovering.expect("at least one slice");
            {
                let g = lock(&seen);
                let since = |t: Option<Instant>| {
                    t.zip(g.restarted)
                        .map_or(0.0, |(t, s)| (t - s).as_secs_f64())
                };
                let secs = since(g.stripes_whole);
                outln!("      node {kill} recovered {secs:.1} s after its restart")?;
                if g.split_then > 0 {
                    outln!(
                        "      {} values written split while it was down were written whole \
                         again by {:.1} s ({} left)",
                        g.split_then,
                        since(g.recovered),
                        g.split_left
                    )?;
                }
            }
            report(&p)?;
            phases.push(p);

            let after = phase_len / 2;
            timed(
                6,
                &format!("YCSB-A for {:.0} s after recovery", after.as_secs_f64()),
            )?;
            let p = with_clock("YCSB-A, recovered", after, || {
                run_phase("after", after, &mut session)
            })?;
            report(&p)?;
            phases.push(p);
            Ok(phases)
        })();
        let _ = tx.send(Cmd::Stop);
        let _ = controller.join();
        result
    });
    let phases = phases?;
    let (killed, restarted, stripes_whole, recovered, statuses, recovery_bytes, split) = {
        let mut g = lock(&seen);
        let rb = g.statuses.last().map_or(0, |(_, s)| {
            s.nodes.get(kill).map_or(0, |n| n.recovery_bytes)
        });
        (
            g.killed
                .ok_or_else(|| failure!("the kill did not happen"))?,
            g.restarted
                .ok_or_else(|| failure!("the restart did not happen"))?,
            g.stripes_whole
                .ok_or_else(|| failure!("recovery was not seen"))?,
            g.recovered
                .ok_or_else(|| failure!("recovery was not seen"))?,
            std::mem::take(&mut g.statuses),
            rb,
            (g.split_then, g.split_left),
        )
    };
    let (split_then, split_left) = split;

    // ---- 7. verify ----
    out.step(
        7,
        total_steps,
        &format!("reading every one of the {records} records back, each value checked"),
    )?;
    let bar = harness::progress::spinner("verify");
    let t = Instant::now();
    let verify = session.run(
        &Phase {
            duration: None,
            rate: None,
            warmup: Duration::ZERO,
            drain,
        },
        &|_, n| Box::new(ReadAll::new(n)),
    )?;
    bar.finish_and_clear();
    let verify_secs = t.elapsed().as_secs_f64();
    outln!(
        "      {} reads in {verify_secs:.1} s: ok {}, wrong {}, missing {}, errors {}",
        verify.check.ok
            + verify.check.wrong()
            + verify.check.missing
            + verify.check.miss_never_written,
        verify.check.ok,
        verify.check.wrong(),
        verify.check.missing + verify.check.miss_never_written,
        verify.total_errors()
    )?;
    Ok(Report {
        load,
        load_secs,
        phases,
        verify,
        verify_secs,
        t0,
        killed,
        restarted,
        stripes_whole,
        split_then,
        recovered,
        split_left,
        statuses,
        recovery_bytes,
        rss: 0,
        elapsed: Duration::ZERO,
    })
}

/// Runs `f` with a progress bar of the phase's seconds (on a terminal).
fn with_clock<T>(msg: &str, len: Duration, f: impl FnOnce() -> T) -> T {
    let bar = harness::progress::clock(len.as_millis() as u64, msg);
    let done = AtomicBool::new(false);
    let r = std::thread::scope(|s| {
        s.spawn(|| {
            let t = Instant::now();
            while !done.load(Ordering::Relaxed) {
                bar.set_position(t.elapsed().as_millis() as u64);
                std::thread::sleep(Duration::from_millis(100));
            }
        });
        let r = f();
        done.store(true, Ordering::Relaxed);
        r
    });
    bar.finish_and_clear();
    r
}

/// Kills and restarts the node when told, and watches the cache (every 200 ms) until it has
/// recovered, moving the recovery progress bar.
fn controller(
    cache: &mut InecCache,
    rx: mpsc::Receiver<Cmd>,
    seen: Arc<Mutex<Seen>>,
    missing: Arc<AtomicU64>,
    kill: usize,
    records: u64,
    tty: bool,
) {
    let mut last_counts: Vec<u64> = vec![0; cache.addrs().len()];
    let mut restarting = false;
    // Since when every poll found no value left split (once every stripe is whole).
    let mut zero_since: Option<Instant> = None;
    let mut bar: Option<indicatif::ProgressBar> = None;
    let mut last_line = Instant::now();
    let poll = |cache: &InecCache, seen: &Mutex<Seen>, last: &mut Vec<u64>| {
        let st = cache.status();
        let mut g = lock(seen);
        for (i, n) in st.nodes.iter().enumerate() {
            if n.stats.is_empty() {
                continue;
            }
            // A restarted node counts from 0 again.
            if n.degraded_reads < last[i] {
                last[i] = 0;
            }
            g.degraded_total += n.degraded_reads - last[i];
            last[i] = n.degraded_reads;
        }
        g.statuses.push((Instant::now(), st.clone()));
        st
    };
    loop {
        let cmd = match rx.recv_timeout(Duration::from_millis(200)) {
            Ok(c) => Some(c),
            Err(mpsc::RecvTimeoutError::Timeout) => None,
            Err(mpsc::RecvTimeoutError::Disconnected) => Some(Cmd::Stop),
        };
        match cmd {
            Some(Cmd::Stop) => break,
            Some(Cmd::Kill { after }) => {
                std::thread::sleep(after);
                let r = cache.kill(kill);
                let mut g = lock(&seen);
                g.killed = Some(Instant::now());
                missing.fetch_or(1 << kill, Ordering::Relaxed);
                if let Err(e) = r {
                    g.failure = Some(failure!("killing node {kill}: {e}"));
                }
            }
            Some(Cmd::Restart) => {
                let r = cache.restart(kill);
                let mut g = lock(&seen);
                g.restarted = Some(Instant::now());
                if let Err(e) = r {
                    g.failure = Some(failure!("restarting node {kill}: {e}"));
                }
                restarting = true;
                if tty {
                    let b = harness::progress::bar(records, "recovery (keys rebuilt)", false);
                    bar = Some(b);
                }
            }
            None => {}
        }
        let st = poll(cache, &seen, &mut last_counts);
        if restarting {
            let (done, total) = st.recovery_progress();
            if let Some(b) = &bar {
                b.set_length(total.max(records));
                b.set_position(done);
            } else if last_line.elapsed() >= Duration::from_secs(5) {
                last_line = Instant::now();
                let line = outln!(
                    "      recovery: {done}/{} keys rebuilt; {}",
                    total.max(records),
                    st.summary()
                );
                if let Err(e) = line {
                    lock(&seen).failure.get_or_insert_with(|| e.into());
                }
            }
            if st.recovered() {
                let mut g = lock(&seen);
                let now = Instant::now();
                let waiting = st.split_values_waiting();
                if g.stripes_whole.is_none() {
                    g.stripes_whole = Some(now);
                }
                let whole = g.stripes_whole.unwrap_or(now);
                g.split_then = g.split_then.max(waiting);
                // Then the values written split while the node was down, written whole again
                // by their homes (the after phase measures the layout back as before). The
                // stripes' agents count them once a second, and a stripe whose lease just
                // moved back to its home reads 0 until the home's next count: none left is
                // a count of 0 held for longer than that.
                if waiting > 0 {
                    zero_since = None;
                }
                let zero = *zero_since.get_or_insert(now);
                if (waiting > 0 || now - zero < COUNT_ROUND) && now - whole < LAYOUT_WAIT {
                    continue;
                }
                g.split_left = waiting;
                g.recovered = Some(now);
                missing.store(0, Ordering::Relaxed);
                restarting = false;
                if let Some(b) = bar.take() {
                    b.finish_and_clear();
                }
            }
        }
    }
    if let Some(b) = bar.take() {
        b.finish_and_clear();
    }
}

/// Adds a later slice's stats to `acc`; its timeline continues `acc`'s at `offset`, its
/// recorded time adds to `acc`'s.
fn merge_after(acc: &mut PhaseStats, mut o: PhaseStats, offset: Duration) {
    let at = (offset.as_secs_f64() / TIMELINE_STEP.as_secs_f64()).round() as usize;
    let mut timeline = std::mem::take(&mut acc.timeline);
    timeline.resize_with(at, Default::default);
    timeline.append(&mut o.timeline);
    let recorded = acc.recorded_secs + o.recorded_secs;
    let connections = acc.connections;
    acc.merge(o);
    (acc.timeline, acc.recorded_secs, acc.connections) = (timeline, recorded, connections);
}

/// Prints the summary, writes the report, and says whether the run passed.
#[allow(clippy::too_many_arguments)]
fn finish(
    a: &DemoArgs,
    r: &Report,
    code: &Code,
    opts: &InecOptions,
    nodes: usize,
    records: u64,
    value_bytes: usize,
    kill: usize,
) -> Result<()> {
    let mut table = Table::new([
        "phase",
        "seconds",
        "ops/s",
        "read p50 / p99 µs",
        "write p50 / p99 µs",
        "degraded read p50 / p99 µs",
        "degraded reads (nodes)",
        "errors",
        "wrong values",
    ]);
    let load_set = r.load.ops.get(&OpKind::Set);
    table.row([
        "load".to_string(),
        format!("{:.1}", r.load_secs),
        fmt_int(load_set.map_or(0, |s| s.ok) as f64 / r.load_secs),
        "–".into(),
        pct(load_set),
        "–".into(),
        "–".into(),
        r.load.total_errors().to_string(),
        "–".into(),
    ]);
    for p in &r.phases {
        table.row([
            p.name.to_string(),
            format!("{:.1}", (p.end - p.start).as_secs_f64()),
            fmt_int(p.stats.throughput()),
            pct(p.stats.ops.get(&OpKind::Get)),
            pct(p.stats.ops.get(&OpKind::Set)),
            pct(p.stats.ops.get(&OpKind::DegradedGet)),
            fmt_int(p.server_degraded as f64),
            p.stats.total_errors().to_string(),
            p.stats.check.wrong().to_string(),
        ]);
    }
    table.row([
        "verify".to_string(),
        format!("{:.1}", r.verify_secs),
        fmt_int(r.verify.check.ok as f64 / r.verify_secs.max(1e-9)),
        pct(r.verify.ops.get(&OpKind::Get)),
        "–".into(),
        "–".into(),
        "–".into(),
        r.verify.total_errors().to_string(),
        r.verify.check.wrong().to_string(),
    ]);
    let Tally {
        all_errors,
        wrong,
        missing,
        undocumented,
        documented_n,
    } = r.tally();
    let recovery_s = (r.stripes_whole - r.restarted).as_secs_f64();
    let layout_s = (r.recovered - r.restarted).as_secs_f64();
    let down_s = (r.restarted - r.killed).as_secs_f64();
    let live = records as f64 * value_bytes as f64;
    let per_byte = r.rss as f64 / live;
    let verified = r.verify.check.ok;
    let writes_down = r
        .phases
        .iter()
        .find(|p| p.name == "node down")
        .and_then(|p| p.stats.ops.get(&OpKind::Set))
        .map_or(0, |s| s.ok);
    let reads_down = r
        .phases
        .iter()
        .find(|p| p.name == "node down")
        .map_or(0, |p| {
            p.stats.ops.get(&OpKind::Get).map_or(0, |s| s.ok)
                + p.stats.ops.get(&OpKind::DegradedGet).map_or(0, |s| s.ok)
        });

    let mut facts = Table::new(["what", "value"]);
    facts
        .row([
            "cluster".to_string(),
            format!(
                "{nodes} nodes, {code}, scheme {}, {}, layout {}",
                opts.options.scheme, opts.options.mode, opts.options.layout
            ),
        ])
        .row([
            "data".to_string(),
            format!(
                "{records} records × {value_bytes} B (YCSB-A: 50% reads, 50% updates, zipfian)"
            ),
        ])
        .row([
            format!("node {kill} down (SIGKILL → restart)"),
            format!("{down_s:.1} s"),
        ])
        .row([
            "reads served while it was down".to_string(),
            fmt_int(reads_down as f64),
        ])
        .row([
            "writes acknowledged while it was down".to_string(),
            fmt_int(writes_down as f64),
        ])
        .row([
            "recovery (restart → every stripe whole)".to_string(),
            format!(
                "{recovery_s:.1} s, {} MB of records rebuilt",
                format_args!("{:.1}", r.recovery_bytes as f64 / 1e6)
            ),
        ])
        .row([
            "values written split meanwhile, written whole again (restart → none left)".to_string(),
            match (r.split_then, r.split_left) {
                (0, _) => "none split".to_string(),
                (n, 0) => format!("{layout_s:.1} s, {n} values"),
                (n, left) => format!(
                    "{left} of {n} still split {} s after recovery",
                    LAYOUT_WAIT.as_secs()
                ),
            },
        ])
        .row([
            "values verified at the end".to_string(),
            format!("{verified} of {records}"),
        ])
        .row([
            "wrong values (stale, torn, …)".to_string(),
            wrong.to_string(),
        ])
        .row(["missing values".to_string(), missing.to_string()])
        .row([
            "client errors: documented / other".to_string(),
            format!("{documented_n} / {undocumented}"),
        ])
        .row([
            "resident memory of the nodes ÷ live value bytes".to_string(),
            format!(
                "{per_byte:.2} ({:.0} MiB for {:.0} MiB of values)",
                r.rss as f64 / (1 << 20) as f64,
                live / (1 << 20) as f64
            ),
        ])
        .row([
            "demo run time".to_string(),
            format!("{:.0} s", r.elapsed.as_secs_f64()),
        ]);

    // ---- 8. summary and report ----
    outln!("[8/8] summary")?;
    outln!()?;
    crate::stdout::print(format_args!("{}", table.to_markdown()))?;
    outln!()?;
    crate::stdout::print(format_args!("{}", facts.to_markdown()))?;
    outln!()?;
    if !all_errors.is_empty() {
        outln!("client errors by reason: {all_errors:?}")?;
        outln!(
            "(documented: a request on a connection to the node that was killed fails with \
             `connection …` and the client sends it again to the next node; a write in doubt \
             while a stripe changes hands is answered `SERVER_ERROR … may or may not have been \
             applied`)"
        )?;
    }
    outln!("wrong {wrong}")?;
    let path = write_report(a, r, &table, &facts, kill).context("writing the report")?;
    outln!("report: {}", path.display())?;
    if wrong > 0 || missing > 0 || undocumented > 0 || verified != records {
        return Err(failure!(
            "the demo saw {wrong} wrong values, {missing} missing values, {undocumented} \
             undocumented client errors and verified {verified} of {records} records"
        ));
    }
    Ok(())
}

fn secs_since(t0: Instant, t: Instant) -> f64 {
    t.saturating_duration_since(t0).as_secs_f64()
}

fn write_report(
    a: &DemoArgs,
    r: &Report,
    table: &Table,
    facts: &Table,
    kill: usize,
) -> Result<PathBuf> {
    let dir = &a.out;
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    // Latency CDFs per phase.
    let cdf = |title: &str, ops: &[OpKind]| {
        let mut series = Vec::new();
        for p in &r.phases {
            for &op in ops {
                if let Some(s) = p.stats.ops.get(&op).filter(|s| s.ok > 0) {
                    let what = match op {
                        OpKind::DegradedGet => "degraded read",
                        OpKind::Get => "read",
                        _ => "write",
                    };
                    series.push(CdfSeries::from_histogram_ns(
                        format!("{what}, {}", p.name),
                        &s.hist,
                    ));
                }
            }
        }
        CdfPlot::new(title, series).to_svg()
    };
    let reads_svg = cdf(
        "Reads: latency CDF per phase",
        &[OpKind::Get, OpKind::DegradedGet],
    );
    let writes_svg = cdf("Writes: latency CDF per phase", &[OpKind::Set]);
    // The timeline: every phase's per-second intervals on one clock.
    let mut tput = Vec::new();
    let mut deg = Vec::new();
    let mut p99 = Vec::new();
    let mut p50 = Vec::new();
    for p in &r.phases {
        let base = secs_since(r.t0, p.start);
        let end = secs_since(r.t0, p.end);
        let step = TIMELINE_STEP.as_secs_f64();
        for (i, iv) in p.stats.timeline.iter().enumerate() {
            let from = base + i as f64 * step;
            let width = (end - from).min(step);
            if width < 0.2 * step || iv.ok == 0 {
                continue;
            }
            let mid = from + width / 2.0;
            tput.push((mid, iv.ok as f64 / width));
            deg.push((mid, iv.degraded_ok as f64 / width));
            p99.push((mid, iv.hist.value_at_quantile(0.99) as f64 / 1e3));
            p50.push((mid, iv.hist.value_at_quantile(0.5) as f64 / 1e3));
        }
    }
    // Stripes not whole, from the cache's own status.
    let not_whole: Vec<(f64, f64)> = r
        .statuses
        .iter()
        .filter(|(t, _)| *t >= r.t0)
        .map(|(t, s)| {
            (
                secs_since(r.t0, *t),
                s.stripes.iter().filter(|x| x.state != "whole").count() as f64,
            )
        })
        .collect();
    let mut tl = Timeline::new(
        "YCSB-A through a crash: throughput, latency, stripes",
        vec![
            TimelinePanel {
                y_label: "ops/s".into(),
                series: vec![
                    Series::new("requests/s", tput),
                    Series::new("degraded reads/s", deg),
                ],
            },
            TimelinePanel {
                y_label: "latency (µs)".into(),
                series: vec![Series::new("p99", p99), Series::new("p50", p50)],
            },
            TimelinePanel {
                y_label: "stripes not whole".into(),
                series: vec![Series::new("stripes not whole", not_whole)],
            },
        ],
    );
    tl.events = vec![
        Event {
            t: secs_since(r.t0, r.killed),
            label: format!("node {kill} killed"),
        },
        Event {
            t: secs_since(r.t0, r.restarted),
            label: format!("node {kill} restarted"),
        },
        Event {
            t: secs_since(r.t0, r.stripes_whole),
            label: "recovered".into(),
        },
    ];
    if r.split_then > 0 {
        tl.events.push(Event {
            t: secs_since(r.t0, r.recovered),
            label: "values whole again".into(),
        });
    }
    tl.bands = vec![
        TimelineBand {
            from: secs_since(r.t0, r.killed),
            to: secs_since(r.t0, r.restarted),
            label: "down".into(),
        },
        TimelineBand {
            from: secs_since(r.t0, r.restarted),
            to: secs_since(r.t0, r.recovered),
            label: "recovering".into(),
        },
    ];
    let timeline_svg = tl.to_svg();
    // Throughput and p99 per phase as bars.
    let groups: Vec<String> = r.phases.iter().map(|p| p.name.to_string()).collect();
    let p99_of = |p: &PhaseRun, op: OpKind| {
        p.stats
            .ops
            .get(&op)
            .filter(|s| s.ok > 0)
            .map_or(f64::NAN, |s| us(&s.hist, 0.99))
    };
    let bars = BarChart::new(
        "p99 latency per phase",
        "p99 (µs)",
        vec!["read".into(), "degraded read".into(), "write".into()],
        groups.clone(),
        r.phases
            .iter()
            .map(|p| {
                vec![
                    p99_of(p, OpKind::Get),
                    p99_of(p, OpKind::DegradedGet),
                    p99_of(p, OpKind::Set),
                ]
            })
            .collect(),
    );
    let bars_svg = bars.to_svg();
    let files = [
        ("cdf-reads.svg", &reads_svg),
        ("cdf-writes.svg", &writes_svg),
        ("timeline.svg", &timeline_svg),
        ("p99-per-phase.svg", &bars_svg),
    ];
    for (name, svg) in files {
        std::fs::write(dir.join(name), svg)?;
    }
    let mut page = Page::new("inec demo");
    page.heading(1, "inec demo: an erasure-coded cache through a crash")
        .paragraph(format!(
            "A local cache cluster ran YCSB-A (50% reads, 50% updates, scrambled zipfian keys); \
             node {kill} was killed with SIGKILL while the load ran, restarted empty, and \
             rebuilt its records from the others in the background while the load went on. \
             Every read was checked (each value names its key and write), and at the end every \
             record was read back. Reads of keys whose Mem Stripe missed a data chunk (a \
             member down or recovering) are counted as degraded reads by the client; the \
             nodes' own count of reads they repaired is beside it."
        ))
        .table(facts.clone())
        .heading(2, "Phases")
        .table(table.clone())
        .heading(2, "Timeline")
        .svg(timeline_svg.clone())
        .heading(2, "Latency CDFs")
        .svg(reads_svg.clone())
        .svg(writes_svg.clone())
        .heading(2, "p99 per phase")
        .svg(bars_svg.clone())
        .paragraph(format!(
            "Command: inec demo{}{}. Machine: {} ({} CPUs).",
            if a.quick { " --quick" } else { "" },
            format_args!(" --code {} --scheme {} --mode {}", a.code, a.scheme, a.mode),
            crate::host::cpu_model(),
            std::thread::available_parallelism().map_or(0, |n| n.get())
        ));
    let index = dir.join("index.html");
    page.write(&index)?;
    std::fs::write(
        dir.join("summary.md"),
        format!("{}\n{}", facts.to_markdown(), table.to_markdown()),
    )?;
    let json = serde_json::json!({
        "phases": r.phases.iter().map(|p| serde_json::json!({
            "name": p.name,
            "seconds": (p.end - p.start).as_secs_f64(),
            "summary": load::ycsb::summary(&p.stats),
            "degraded_reads_counted_by_nodes": p.server_degraded,
        })).collect::<Vec<_>>(),
        "load": load::ycsb::summary(&r.load),
        "verify": load::ycsb::summary(&r.verify),
        "recovery_s": (r.stripes_whole - r.restarted).as_secs_f64(),
        "split_values_after_recovery": r.split_then,
        "split_values_left": r.split_left,
        "layout_back_s": (r.recovered - r.restarted).as_secs_f64(),
        "down_s": (r.restarted - r.killed).as_secs_f64(),
        "resident_bytes": r.rss,
    });
    std::fs::write(
        dir.join("results.json"),
        serde_json::to_string_pretty(&json)?,
    )?;
    Ok(std::fs::canonicalize(&index).unwrap_or(index))
}
