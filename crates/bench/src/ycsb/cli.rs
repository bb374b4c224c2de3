//! `inec bench ycsb`: YCSB workloads against inec caches (coherent and incoherent), memcached
//! as one node and memcached as N nodes with client-side 3-way replication, with the same
//! driver in one run; forced-degraded reads and node processes killed on a Weibull schedule.

use std::collections::BTreeMap;
use std::fs;
use std::io::Write;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::{BenchError, Context, Result};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use serde::Serialize;

use crate::host::load_average;
use harness::cache::{InecCache, InecOptions, NodeHealth};
use harness::{Memcached, MemcachedOptions};
use load::cpu::{self, CpuPerOp, ServerMeter};
use load::ycsb::dist::Weibull;
use load::ycsb::{inec_degraded_form, summary, DegradedReads, Summary, Workload, Ycsb, YcsbConfig};
use load::{OpKind, PhaseStats, Route};
use report::{CdfPlot, CdfSeries, Event, Series, Timeline, TimelineBand, TimelinePanel};

#[derive(clap::Args, Debug, Clone)]
pub struct YcsbArgs {
    /// Workloads to run, e.g. `a` or `a,b,c` (A, B, C, D, F).
    #[arg(long, short = 'w', value_delimiter = ',', default_value = "a")]
    pub workload: Vec<String>,
    /// Systems, in the order they run: `inec-coherent`, `inec-incoherent`, `inec-coherent-etcd`
    /// (coherent, stripe leadership from a local etcd: `--coordinator local`, the `etcd`
    /// build), all three with the paper's layout (`--layout split`: each value cut into k
    /// chunks), `inec-whole` (coherent, `--layout whole`: each value whole at its home, parity
    /// across values; degraded reads decode direct range reads), `inec-whole-plan` (the same
    /// with `--whole-repair plan`: degraded reads on the scheme's repair plan), `memcached` (one node, no redundancy), `memcached-x3` (`--memcached-nodes`
    /// nodes, each key written to 3 of them by the client).
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "inec-coherent,inec-incoherent,memcached,memcached-x3"
    )]
    pub systems: Vec<String>,
    /// `recordcount`: records loaded before the run phase.
    #[arg(long, default_value_t = 10_000)]
    pub records: u64,
    /// `operationcount`: requests of the run phase (default: as many as `--duration-s` allows).
    #[arg(long)]
    pub operations: Option<u64>,
    /// Bytes per value (one value per record).
    #[arg(long, default_value_t = 8192)]
    pub value_bytes: usize,
    /// `requestdistribution` instead of the workload's: zipfian, latest or uniform.
    #[arg(long)]
    pub distribution: Option<String>,
    /// Client connections in all.
    #[arg(long, default_value_t = 64)]
    pub connections: usize,
    /// Client threads (each one `mio` event loop over its share of the connections).
    #[arg(long, default_value_t = 1)]
    pub threads: usize,
    /// Target rate, requests/s (open loop: latency from each request's intended start).
    /// Without it, closed loop.
    #[arg(long)]
    pub rate: Option<f64>,
    /// Seconds of the run phase.
    #[arg(long, default_value_t = 10.0)]
    pub duration_s: f64,
    /// Seconds at the start of the run phase checked but not recorded.
    #[arg(long, default_value_t = 1.0)]
    pub warmup_s: f64,
    /// Fraction of the reads sent as forced-degraded reads (inec only).
    #[arg(long, default_value_t = 0.01)]
    pub degraded_ratio: f64,
    /// Weibull shape of the degraded reads' arrivals.
    #[arg(long, default_value_t = 0.75)]
    pub degraded_shape: f64,
    /// The chunk position a forced-degraded read treats as lost.
    #[arg(long, default_value_t = 0)]
    pub degraded_pos: usize,
    /// The inec caches' code.
    #[arg(long, default_value = "rs:6,3")]
    pub code: String,
    /// The inec caches' repair scheme: rs, lrc, ppr, ecpipe, triec.
    #[arg(long, default_value = "rs")]
    pub scheme: String,
    /// Nodes of each inec cache (default: the code's chunk count).
    #[arg(long)]
    pub inec_nodes: Option<usize>,
    /// Event loops per inec node (`inec serve -t`; default: the machine's cores shared among
    /// the nodes, at least 1 each).
    #[arg(long)]
    pub inec_loops: Option<usize>,
    /// How the client picks an inec node for a key: `agent` sends it to its stripe's agent
    /// (node `fnv1a_64(key) mod N`, the next node while that one is down), as memcached clients
    /// hash keys to servers; `any` spreads the connections over every node, which forwards each
    /// key to its agent.
    #[arg(long, default_value = "agent", value_parser = ["agent", "any"])]
    pub route: String,
    /// Nodes of `memcached-x3` (default: as many as the inec cache has).
    #[arg(long)]
    pub memcached_nodes: Option<usize>,
    /// Replicas per key of `memcached-x3`.
    #[arg(long, default_value_t = 3)]
    pub replicas: usize,
    /// memcached worker threads (`-t`) per node.
    #[arg(long, default_value_t = 4)]
    pub memcached_threads: usize,
    /// Kill node processes (SIGKILL) during the run phase, a Weibull process with this mean
    /// gap in seconds; each killed node is restarted (`inec cache restart`, or a fresh memcached
    /// on its port) `--down-s` later and recovers. At most `--max-down` at a time. Systems
    /// without redundancy (`memcached`) are not killed.
    #[arg(long)]
    pub kill_mean_s: Option<f64>,
    /// Weibull shape of the kills' arrivals.
    #[arg(long, default_value_t = 0.75)]
    pub kill_shape: f64,
    /// Seconds a killed node stays down before it is restarted.
    #[arg(long, default_value_t = 2.0)]
    pub down_s: f64,
    /// Most nodes down at once (default: as many as the system survives: the code's m, or
    /// replicas − 1).
    #[arg(long)]
    pub max_down: Option<usize>,
    /// inec nodes killed after the load phase and down for the whole run phase (repeatable),
    /// restarted and recovered afterwards: reads lose these chunks besides the forced one
    /// (e.g. the paper's TriEC(3,2) case with two lost chunks).
    #[arg(long = "dead-node")]
    pub dead_nodes: Vec<usize>,
    /// Run the paper's study instead (docs/ycsb.md): `fig14` (five schemes × workloads A, B,
    /// C, 8 KiB, all reads degraded, coherent vs incoherent), `cases` (Figures 9–13's
    /// configurations), `goals` (PPR and ECPipe degraded p99 against normal p99) or `all`.
    #[arg(long)]
    pub study: Option<String>,
    /// Seconds without a reply before a request counts as a timeout.
    #[arg(long, default_value_t = 5.0)]
    pub timeout_s: f64,
    #[arg(long, default_value_t = 0x5EED_0C5B)]
    pub seed: u64,
    /// Print JSON lines on stdout (the table goes to stderr).
    #[arg(long)]
    pub json: bool,
    /// Where results.jsonl, table.md and the SVG plots go.
    #[arg(long, default_value = "reports/ycsb")]
    pub out: PathBuf,
    /// The `inec` executable the nodes of inec caches run (the caller passes its own path;
    /// not a flag).
    #[arg(skip)]
    pub exe: Option<PathBuf>,
}

/// Node failures a system survives without losing data, from its code or replication.
pub fn tolerated_failures(system: &str, code: &str, replicas: usize) -> Result<usize> {
    Ok(match system {
        "memcached" => 0,
        "memcached-x3" => replicas.saturating_sub(1),
        _ => match parse_code(code)? {
            codes::Code::Rs { m, .. } => m,
            // Azure's LRC(k, l, r) decodes any r + 1 losses (and some patterns of more).
            codes::Code::Lrc { r, .. } => r + 1,
        },
    })
}

/// Failure events to mark on a timeline: (seconds from the run's start, label).
type Marks = Vec<(f64, String)>;

/// A running system under test.
enum Running {
    Inec(InecCache),
    Memcached(Vec<Option<Memcached>>, MemcachedOptions, Vec<u16>),
}

impl Running {
    fn pids(&self) -> Vec<u32> {
        match self {
            Running::Inec(c) => c.pids().to_vec(),
            Running::Memcached(ms, _, _) => ms.iter().flatten().map(|m| m.pid()).collect(),
        }
    }

    /// The pid of node `node`'s process (`None`: a memcached killed and not restarted yet).
    fn pid_of(&self, node: usize) -> Option<u32> {
        match self {
            Running::Inec(c) => c.pids().get(node).copied(),
            Running::Memcached(ms, _, _) => ms.get(node)?.as_ref().map(|m| m.pid()),
        }
    }

    fn nodes(&self) -> usize {
        match self {
            Running::Inec(c) => c.addrs().len(),
            Running::Memcached(ms, _, _) => ms.len(),
        }
    }

    fn kill(&mut self, node: usize) -> Result<()> {
        match self {
            Running::Inec(c) => c.kill(node)?,
            // Dropping a benchmark-started memcached kills it (SIGKILL) and reaps it.
            Running::Memcached(ms, _, _) => drop(ms[node].take()),
        }
        Ok(())
    }

    /// Whether a restarted node holds its data again: an inec node once its recovery is done
    /// (`ready` in `stats inec`); a memcached never (it restarts empty and nothing refills it).
    fn recovered(&self, nodes: &[usize]) -> Vec<usize> {
        match self {
            Running::Inec(c) => {
                let st = c.status();
                nodes
                    .iter()
                    .copied()
                    .filter(|&n| st.nodes.get(n).is_some_and(|x| x.health == NodeHealth::Up))
                    .collect()
            }
            Running::Memcached(..) => Vec::new(),
        }
    }

    fn restart(&mut self, node: usize) -> Result<()> {
        match self {
            Running::Inec(c) => c.restart(node)?,
            Running::Memcached(ms, o, ports) => {
                ms[node] = Some(Memcached::start_on(o, ports[node])?);
            }
        }
        Ok(())
    }
}

/// A kill or a restart, seconds from the start of the run phase.
#[derive(Clone, Debug, Serialize)]
pub struct FailureEvent {
    pub t_s: f64,
    pub node: usize,
    pub what: String,
}

/// One system on one workload.
#[derive(Clone, Debug, Serialize)]
pub struct SystemRun {
    pub system: String,
    pub workload: char,
    pub load_throughput_ops_s: f64,
    pub run: Summary,
    /// Every key read once after the run (and after any recovery), each checked.
    pub verify: Summary,
    pub failures: Vec<FailureEvent>,
    /// Most nodes down at once during the run.
    pub max_down_observed: usize,
    /// Node failures the system survives without losing data (from its code or replication).
    pub tolerates: usize,
    /// Resident memory of every server process after the run, summed.
    pub rss_bytes: u64,
    /// Bytes of the live values (keys × value bytes).
    pub value_bytes: u64,
    pub rss_per_value_byte: f64,
    /// Resident memory of the server processes right after they started (before the load).
    pub rss_idle_bytes: u64,
    /// (RSS after the run − RSS at the start) ÷ bytes of values: what the values cost.
    pub rss_added_per_value_byte: f64,
    pub recovery_s: Option<f64>,
    /// inec: degraded reads run as engine plans, summed over the nodes (`stats inec`).
    pub degraded_plan_runs: Option<u64>,
    /// inec: degraded reads whose plan failed and were repaired at the agent instead.
    pub degraded_plan_fallbacks: Option<u64>,
    /// Where the run phase's CPU went: servers and client, per operation (`None` where
    /// `/proc` is missing). See [`load::cpu`] for what is counted.
    pub cpu: Option<CpuPerOp>,
}

#[derive(Clone, Debug, Serialize)]
struct RunInfo {
    bench: &'static str,
    cpu: String,
    cores: usize,
    load_average: String,
    memcached_version: Option<String>,
    records: u64,
    operations: Option<u64>,
    value_bytes: usize,
    connections: usize,
    threads: usize,
    rate: Option<f64>,
    duration_s: f64,
    warmup_s: f64,
    degraded_ratio: f64,
    degraded_shape: f64,
    code: String,
    scheme: String,
    /// inec's route: `agent` or `any` (`--route`).
    route: String,
    kill_mean_s: Option<f64>,
    kill_shape: f64,
    down_s: f64,
}

/// Kills nodes on a Weibull schedule during `duration`, each restarted `down` later, at
/// most `max_down` failed at once — a node counts as failed from its kill until it has
/// recovered its data (inec: recovery done; memcached: never, it comes back empty) — then
/// restarts any still down. Each process is sampled by `meter` just before its kill. Returns
/// the events (kills, restarts, recoveries), the most nodes failed at once and any problem met.
#[allow(clippy::too_many_arguments)]
fn inject_failures(
    sys: &mut Running,
    meter: &mut ServerMeter,
    t0: Instant,
    duration: Duration,
    gaps: Weibull,
    down: Duration,
    max_down: usize,
    seed: u64,
) -> (Vec<(Instant, usize, String)>, usize, Vec<String>) {
    let mut rng = SmallRng::seed_from_u64(seed);
    let nodes = sys.nodes();
    let mut next_kill = t0 + Duration::from_secs_f64(gaps.sample(&mut rng));
    let mut down_nodes: Vec<(usize, Instant)> = Vec::new();
    let mut recovering: Vec<usize> = Vec::new();
    let mut events = Vec::new();
    let mut problems = Vec::new();
    let mut most = 0;
    let mut last_poll = t0;
    let end = t0 + duration;
    loop {
        let now = Instant::now();
        // Restarts due.
        while let Some(p) = down_nodes.iter().position(|&(_, at)| at <= now) {
            let (node, _) = down_nodes.remove(p);
            match sys.restart(node) {
                Ok(()) => {
                    events.push((Instant::now(), node, format!("node {node} restarted")));
                    recovering.push(node);
                }
                Err(e) => problems.push(format!("restarting node {node}: {e:#}")),
            }
        }
        if !recovering.is_empty() && now.duration_since(last_poll) >= Duration::from_millis(200) {
            last_poll = now;
            for node in sys.recovered(&recovering) {
                events.push((Instant::now(), node, format!("node {node} recovered")));
                recovering.retain(|&n| n != node);
            }
        }
        if now >= end {
            break;
        }
        if now >= next_kill {
            let failed = down_nodes.len() + recovering.len();
            if failed < max_down && failed < nodes {
                let live: Vec<usize> = (0..nodes)
                    .filter(|n| !down_nodes.iter().any(|d| d.0 == *n) && !recovering.contains(n))
                    .collect();
                let node = live[rng.gen_range(0..live.len())];
                if let Some(pid) = sys.pid_of(node) {
                    meter.retire(pid);
                }
                match sys.kill(node) {
                    Ok(()) => {
                        let at = Instant::now();
                        events.push((at, node, format!("node {node} killed")));
                        down_nodes.push((node, at + down));
                        most = most.max(failed + 1);
                    }
                    Err(e) => problems.push(format!("killing node {node}: {e:#}")),
                }
            }
            next_kill += Duration::from_secs_f64(gaps.sample(&mut rng));
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    for (node, _) in down_nodes {
        match sys.restart(node) {
            Ok(()) => events.push((Instant::now(), node, format!("node {node} restarted"))),
            Err(e) => problems.push(format!("restarting node {node}: {e:#}")),
        }
    }
    (events, most, problems)
}

fn start_system(a: &YcsbArgs, name: &str, n_inec: usize, k: usize) -> Result<(Running, Route)> {
    let records = a.records + a.operations.unwrap_or(0) / 10 + a.records / 5;
    match name {
        "inec-coherent" | "inec-incoherent" | "inec-coherent-etcd" | "inec-whole"
        | "inec-whole-plan" => {
            let exe = a.exe.clone().ok_or_else(|| {
                settings!("inec systems need the `inec` executable (their nodes run `inec serve`)")
            })?;
            let nodes = a.inec_nodes.unwrap_or(n_inec);
            let n = parse_code(&a.code)?.n();
            let per_slot = (records as usize).div_ceil(nodes) * (a.value_bytes.div_ceil(k) + 256);
            let need_mib = (per_slot * n).div_ceil(1 << 20);
            let mode = match name {
                "inec-incoherent" => "incoherent",
                _ => "coherent",
            };
            let mut o = InecOptions {
                nodes: a.inec_nodes,
                ..InecOptions::new(exe, &a.code, &a.scheme, mode, (need_mib * 2 + 16) as u64)
            };
            if let Some(loops) = a.inec_loops {
                o.options.threads = Some(loops);
            }
            if name.ends_with("-etcd") {
                o.options.coordinator = Some("local".into());
            }
            // The paper's systems keep its layout; `inec-whole*` every value whole.
            let whole = name.starts_with("inec-whole");
            o.options.layout = if whole { "whole" } else { "split" }.into();
            if name == "inec-whole-plan" {
                o.options.whole_repair = "plan".into();
            }
            let c = InecCache::start(&o)?;
            // `agent`: without failures the same as Route::Hash (each key to its stripe's agent).
            let route = match a.route.as_str() {
                "any" => Route::Spread,
                _ => Route::HashFailover,
            };
            Ok((Running::Inec(c), route))
        }
        "memcached" | "memcached-x3" => {
            let (nodes, per_node) = if name == "memcached" {
                (1, records as usize)
            } else {
                let nodes = a.memcached_nodes.unwrap_or(n_inec).max(a.replicas);
                (nodes, (records as usize * a.replicas).div_ceil(nodes))
            };
            let need_mib = (per_node * (a.value_bytes + 200)).div_ceil(1 << 20);
            let o = MemcachedOptions {
                memory_mib: need_mib + need_mib / 2 + 64,
                threads: a.memcached_threads,
                max_connections: (a.connections + 64).max(1024),
                item_size_max_bytes: (a.value_bytes + 1024).max(1 << 20),
            };
            let ms: Vec<Memcached> = (0..nodes)
                .map(|_| Memcached::start(&o))
                .collect::<Result<_, _>>()?;
            let ports = ms.iter().map(|m| m.addr().port()).collect();
            let route = if name == "memcached" {
                Route::Hash
            } else {
                Route::Replicated(a.replicas)
            };
            Ok((
                Running::Memcached(ms.into_iter().map(Some).collect(), o, ports),
                route,
            ))
        }
        s => bail!(
            "--systems {s:?}: expected inec-coherent, inec-incoherent, inec-coherent-etcd, \
             inec-whole, inec-whole-plan, memcached or memcached-x3"
        ),
    }
}

fn addrs_of(r: &Running) -> Vec<SocketAddr> {
    match r {
        Running::Inec(c) => c.addrs().to_vec(),
        Running::Memcached(ms, _, _) => ms.iter().flatten().map(|m| m.addr()).collect(),
    }
}

/// Runs one system on one workload.
pub(crate) fn run_system(
    a: &YcsbArgs,
    name: &str,
    w: Workload,
    n_inec: usize,
    k: usize,
    log: &mut dyn Write,
) -> Result<(SystemRun, PhaseStats, Marks)> {
    let (mut sys, route) = start_system(a, name, n_inec, k)?;
    let tolerates = tolerated_failures(name, &a.code, a.replicas)?;
    let mut cfg = YcsbConfig::new(addrs_of(&sys), route, w);
    if let Some(d) = &a.distribution {
        cfg.spec = cfg.spec.with_distribution(match d.as_str() {
            "zipfian" => load::ycsb::RequestDistribution::Zipfian,
            "latest" => load::ycsb::RequestDistribution::Latest,
            "uniform" => load::ycsb::RequestDistribution::Uniform,
            d => bail!("--distribution {d:?}: expected zipfian, latest or uniform"),
        });
    }
    cfg.records = a.records;
    cfg.operations = a.operations;
    cfg.value_bytes = a.value_bytes;
    cfg.connections = a.connections;
    cfg.threads = a.threads;
    cfg.rate = a.rate;
    cfg.duration = Duration::from_secs_f64(a.duration_s);
    cfg.warmup = Duration::from_secs_f64(a.warmup_s);
    cfg.seed = a.seed;
    cfg.timeout = Duration::from_secs_f64(a.timeout_s);
    if name.starts_with("inec") && a.degraded_ratio > 0.0 {
        cfg.degraded = Some(DegradedReads {
            ratio: a.degraded_ratio,
            shape: a.degraded_shape,
            form: inec_degraded_form(a.degraded_pos),
        });
    }
    let rss_idle_bytes: u64 = sys
        .pids()
        .iter()
        .filter_map(|&p| harness::resident_bytes(p))
        .sum();
    let mut y = Ycsb::new(cfg)?;
    let loaded = y.load()?;
    if loaded.total_errors() > 0 {
        return Err(failure!(
            "{name}: loading the records failed: {:?}",
            loaded.errors
        ));
    }
    // A forced-degraded read treats one more chunk as lost: with them, one failure fewer.
    let budget = if name.starts_with("inec") && a.degraded_ratio > 0.0 {
        tolerates.saturating_sub(1)
    } else {
        tolerates
    };
    let mut dead_events = Vec::new();
    if let Running::Inec(c) = &mut sys {
        for &node in &a.dead_nodes {
            c.kill(node)
                .with_context(|| format!("{name}: killing node {node}"))?;
            dead_events.push((Instant::now(), node, format!("node {node} killed")));
        }
    }
    let budget = budget.saturating_sub(dead_events.len());
    let kills = a.kill_mean_s.filter(|_| budget > 0);
    let max_down = a.max_down.unwrap_or(budget).min(budget);
    // The CPU window: the run phase (warm-up and drain included) and the failure injector's
    // final restarts, not the restarts of `--dead-node`s after it.
    let mut meter = ServerMeter::start(&sys.pids());
    let client_before = cpu::self_usage();
    let t_start = Instant::now();
    let (run, events, most, problems) = match kills {
        None => (y.run()?, Vec::new(), 0, Vec::new()),
        Some(mean) => {
            let gaps = Weibull::with_mean(a.kill_shape, mean);
            let duration = Duration::from_secs_f64(a.duration_s);
            let down = Duration::from_secs_f64(a.down_s);
            let seed = a.seed ^ 0xF417;
            std::thread::scope(|s| {
                let killer = s.spawn(|| {
                    inject_failures(
                        &mut sys, &mut meter, t_start, duration, gaps, down, max_down, seed,
                    )
                });
                let run = y.run();
                let (events, most, problems) = killer
                    .join()
                    .map_err(|_| failure!("the failure injector panicked"))?;
                Ok::<_, BenchError>((run?, events, most, problems))
            })?
        }
    };
    let window = t_start.elapsed();
    let server_usage = meter.finish(&sys.pids());
    let cpu = client_before.zip(cpu::self_usage()).map(|client| {
        CpuPerOp::new(
            &server_usage,
            client,
            run.timeline.iter().map(|iv| iv.ok).sum(),
            window,
            std::thread::available_parallelism().map_or(1, |n| n.get()),
            cpu::clock_ticks_per_second(),
        )
    });
    for p in &problems {
        writeln!(log, "# {name}: {p}")?;
    }
    let mut events = events;
    if let Running::Inec(c) = &mut sys {
        for &node in &a.dead_nodes {
            c.restart(node)
                .with_context(|| format!("{name}: restarting node {node}"))?;
            dead_events.push((Instant::now(), node, format!("node {node} restarted")));
        }
    }
    dead_events.append(&mut events);
    let events = dead_events;
    // Recovery of restarted inec nodes, then every value read back.
    let mut recovery_s = None;
    if let (Running::Inec(c), false) = (&sys, events.is_empty()) {
        let t = c
            .wait_recovered(Duration::from_secs(120))
            .with_context(|| format!("{name}: waiting for recovery"))?;
        recovery_s = Some(t.as_secs_f64());
    }
    if let Running::Memcached(..) = &sys {
        // memcached-x3's client must see restarted nodes up again before it reads.
        std::thread::sleep(Duration::from_millis(300));
    }
    let verify = y.verify()?;
    // Where inec's degraded reads went: plan runs on the engine, or fallbacks at the agent.
    let plan_counts = match &sys {
        Running::Inec(c) => {
            let st = c.status();
            let sum = |k: &str| -> u64 {
                st.nodes
                    .iter()
                    .filter_map(|n| n.stats.get(k)?.parse::<u64>().ok())
                    .sum()
            };
            Some((sum("degraded_plan_runs"), sum("degraded_plan_fallbacks")))
        }
        Running::Memcached(..) => None,
    };
    let pids = sys.pids();
    let rss_bytes: u64 = pids
        .iter()
        .filter_map(|&p| harness::resident_bytes(p))
        .sum();
    let value_bytes = y.keys() * a.value_bytes as u64;
    let origin = run.started.unwrap_or(t_start);
    let t = |at: Instant| {
        if at >= origin {
            at.duration_since(origin).as_secs_f64()
        } else {
            -origin.duration_since(at).as_secs_f64()
        }
    };
    let failures: Vec<FailureEvent> = events
        .iter()
        .map(|(at, node, what)| FailureEvent {
            t_s: t(*at),
            node: *node,
            what: what.clone(),
        })
        .collect();
    let marks = failures.iter().map(|f| (f.t_s, f.what.clone())).collect();
    Ok((
        SystemRun {
            system: name.to_string(),
            workload: w.letter(),
            load_throughput_ops_s: loaded.throughput(),
            run: summary(&run),
            verify: summary(&verify),
            failures,
            max_down_observed: most,
            tolerates,
            rss_bytes,
            value_bytes,
            rss_per_value_byte: rss_bytes as f64 / value_bytes.max(1) as f64,
            rss_idle_bytes,
            rss_added_per_value_byte: rss_bytes.saturating_sub(rss_idle_bytes) as f64
                / value_bytes.max(1) as f64,
            recovery_s,
            degraded_plan_runs: plan_counts.map(|p| p.0),
            degraded_plan_fallbacks: plan_counts.map(|p| p.1),
            cpu,
        },
        run,
        marks,
    ))
}

/// The Markdown table: one row per (workload, system, op).
pub fn table(runs: &[SystemRun]) -> String {
    let mut s = String::from(
        "| workload | system | op | ops/s | p50 µs | p95 µs | p99 µs | p99.9 µs | errors | wrong values |\n\
         |---|---|---|---:|---:|---:|---:|---:|---:|---:|\n",
    );
    for r in runs {
        for (op, o) in &r.run.ops {
            s.push_str(&format!(
                "| {} | {} | {} | {:.0} | {:.0} | {:.0} | {:.0} | {:.0} | {} | |\n",
                r.workload,
                r.system,
                op,
                o.ops_s,
                o.p50_us,
                o.p95_us,
                o.p99_us,
                o.p999_us,
                o.errors
            ));
        }
        s.push_str(&format!(
            "| {} | {} | **all** | {:.0} | | | | | {} | {} |\n",
            r.workload,
            r.system,
            r.run.throughput_ops_s,
            r.run.ops.values().map(|o| o.errors).sum::<u64>(),
            r.run.wrong + r.verify.wrong
        ));
    }
    s
}

/// The per-system table: memory, failures survived, what was killed, wrong values.
pub fn systems_table(runs: &[SystemRun]) -> String {
    let mut s = String::from(
        "| workload | system | ops/s | RSS MiB | RSS ÷ value bytes | (RSS − idle RSS) ÷ value bytes | survives failures | killed (most at once) | recovery s | wrong values (run + verify) | verified keys |\n\
         |---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n",
    );
    for r in runs {
        let kills = r
            .failures
            .iter()
            .filter(|f| f.what.ends_with("killed"))
            .count();
        s.push_str(&format!(
            "| {} | {} | {:.0} | {:.0} | {:.2} | {:.2} | {} | {} ({}) | {} | {} | {} |\n",
            r.workload,
            r.system,
            r.run.throughput_ops_s,
            r.rss_bytes as f64 / (1 << 20) as f64,
            r.rss_per_value_byte,
            r.rss_added_per_value_byte,
            r.tolerates,
            kills,
            r.max_down_observed,
            r.recovery_s.map_or("–".into(), |x| format!("{x:.1}")),
            r.run.wrong + r.verify.wrong,
            r.verify.check.ok
        ));
    }
    s
}

/// Where the time goes: CPU µs per operation of the run phase, servers (user/system) and the
/// client, the throughput that CPU cost allows on the machine's cores, and context switches.
pub fn cpu_table(runs: &[SystemRun]) -> String {
    let mut s = String::from(
        "| workload | system | ops/s | server user µs/op | server sys µs/op | client user µs/op | client sys µs/op | total CPU µs/op | cores busy (server + client) | CPU bound ops/s | server threads | server ctx switches/op (vol + invol) | client ctx switches/op | server µs/op by thread |\n\
         |---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|\n",
    );
    for r in runs {
        let Some(c) = &r.cpu else { continue };
        let threads = if c.server_threads_start == c.server_threads_end {
            c.server_threads_end.to_string()
        } else {
            format!("{} → {}", c.server_threads_start, c.server_threads_end)
        };
        let mut by: Vec<(&String, &f64)> = c.server_us_per_op_by_thread.iter().collect();
        by.sort_by(|a, b| b.1.total_cmp(a.1));
        let by: Vec<String> = by
            .iter()
            .filter(|(_, &us)| us >= 0.5)
            .take(5)
            .map(|(n, us)| format!("{n} {us:.0}"))
            .collect();
        s.push_str(&format!(
            "| {} | {} | {:.0} | {:.1} | {:.1} | {:.1} | {:.1} | {:.1} | {:.2} + {:.2} | {:.0} | {} | {:.2} + {:.2} | {:.2} | {} |\n",
            r.workload,
            r.system,
            r.run.throughput_ops_s,
            c.server_user_us_per_op,
            c.server_system_us_per_op,
            c.client_user_us_per_op,
            c.client_system_us_per_op,
            c.total_us_per_op,
            c.server_cores,
            c.client_cores,
            c.cpu_bound_ops_s,
            threads,
            c.server_voluntary_switches_per_op,
            c.server_involuntary_switches_per_op,
            c.client_voluntary_switches_per_op + c.client_involuntary_switches_per_op,
            by.join(", "),
        ));
    }
    s
}

fn write_plots(
    out: &Path,
    w: Workload,
    runs: &[(String, PhaseStats, Marks)],
    files: &mut Vec<PathBuf>,
) -> Result<()> {
    for op in [
        OpKind::Get,
        OpKind::Set,
        OpKind::Insert,
        OpKind::ReadModifyWrite,
        OpKind::DegradedGet,
    ] {
        let series: Vec<CdfSeries> = runs
            .iter()
            .filter_map(|(name, st, _)| {
                let h = &st.ops.get(&op)?.hist;
                (!h.is_empty()).then(|| CdfSeries::from_histogram_ns(name.clone(), h))
            })
            .collect();
        if series.is_empty() {
            continue;
        }
        let plot = CdfPlot::new(
            format!(
                "YCSB-{} {} latency CDF",
                w.letter(),
                load::ycsb::op_name(op)
            ),
            series,
        );
        let p = out.join(format!(
            "cdf-{}-{}.svg",
            w.letter(),
            load::ycsb::op_name(op)
        ));
        fs::write(&p, plot.to_svg())?;
        files.push(p);
    }
    for (name, st, marks) in runs {
        let s = summary(st);
        let pts = |f: &dyn Fn(&load::ycsb::TimelinePoint) -> f64| -> Vec<(f64, f64)> {
            s.timeline.iter().map(|p| (p.t_s, f(p))).collect()
        };
        let mut tl = Timeline::new(
            format!("YCSB-{} on {name}: per second", w.letter()),
            vec![
                TimelinePanel {
                    y_label: "ops/s".into(),
                    series: vec![
                        Series::new("ops/s", pts(&|p| p.ops_s)),
                        Series::new("degraded reads/s", pts(&|p| p.degraded_ops_s)),
                        Series::new("errors/s", pts(&|p| p.errors as f64)),
                    ],
                },
                TimelinePanel {
                    y_label: "latency µs".into(),
                    series: vec![
                        Series::new("p50", pts(&|p| p.p50_us)),
                        Series::new("p99", pts(&|p| p.p99_us)),
                    ],
                },
            ],
        );
        tl.events = marks
            .iter()
            .map(|(t, l)| Event {
                t: *t,
                label: l.clone(),
            })
            .collect();
        // Shade each node's downtime.
        let mut open: BTreeMap<String, f64> = BTreeMap::new();
        for (t, l) in marks {
            if let Some(n) = l.strip_suffix(" killed") {
                open.insert(n.to_string(), *t);
            } else if let Some(n) = l.strip_suffix(" restarted") {
                if let Some(from) = open.remove(n) {
                    tl.bands.push(TimelineBand {
                        from,
                        to: *t,
                        label: format!("{n} down"),
                    });
                }
            }
        }
        let p = out.join(format!("timeline-{}-{name}.svg", w.letter()));
        fs::write(&p, tl.to_svg())?;
        files.push(p);
    }
    Ok(())
}

/// Runs `inec bench ycsb`.
pub fn run(a: YcsbArgs) -> Result<()> {
    let workloads: Vec<Workload> = a
        .workload
        .iter()
        .map(|s| {
            Workload::parse(s)
                .ok_or_else(|| settings!("--workload {s:?}: expected A, B, C, D or F"))
        })
        .collect::<Result<_>>()?;
    if a.records == 0 || a.connections == 0 || a.duration_s <= 0.0 {
        bail!("--records, --connections and --duration-s must be positive");
    }
    if a.value_bytes < load::check::HEADER_BYTES {
        bail!(
            "--value-bytes must be at least {} (the checked header)",
            load::check::HEADER_BYTES
        );
    }
    if !(0.0..=1.0).contains(&a.degraded_ratio) || a.degraded_shape <= 0.0 || a.kill_shape <= 0.0 {
        bail!("--degraded-ratio must be within 0..=1 and the Weibull shapes positive");
    }
    if a.kill_mean_s.is_some_and(|m| m <= 0.0) {
        bail!("--kill-mean-s must be positive");
    }
    let code = parse_code(&a.code)?;
    let (k, n) = (code.k(), code.n());
    if a.systems.iter().any(|s| s.starts_with("memcached")) && !Memcached::available() {
        bail!(
            "{} is missing: install the memcached package, or leave memcached out of --systems",
            harness::memcached::MEMCACHED
        );
    }
    if let Some(which) = &a.study {
        return super::study::run(&a, which);
    }
    for s in &a.systems {
        tolerated_failures(s, &a.code, a.replicas)?;
        if !matches!(
            s.as_str(),
            "inec-coherent"
                | "inec-incoherent"
                | "inec-coherent-etcd"
                | "inec-whole"
                | "inec-whole-plan"
                | "memcached"
                | "memcached-x3"
        ) {
            bail!(
                "--systems {s:?}: expected inec-coherent, inec-incoherent, inec-coherent-etcd, \
                 inec-whole, inec-whole-plan, memcached or memcached-x3"
            );
        }
    }
    let info = RunInfo {
        bench: "ycsb",
        cpu: crate::host::cpu_model(),
        cores: std::thread::available_parallelism().map_or(1, |n| n.get()),
        load_average: load_average(),
        memcached_version: Memcached::version().ok(),
        records: a.records,
        operations: a.operations,
        value_bytes: a.value_bytes,
        connections: a.connections,
        threads: a.threads,
        rate: a.rate,
        duration_s: a.duration_s,
        warmup_s: a.warmup_s,
        degraded_ratio: a.degraded_ratio,
        degraded_shape: a.degraded_shape,
        code: a.code.clone(),
        scheme: a.scheme.clone(),
        route: a.route.clone(),
        kill_mean_s: a.kill_mean_s,
        kill_shape: a.kill_shape,
        down_s: a.down_s,
    };
    fs::create_dir_all(&a.out).with_context(|| format!("creating {}", a.out.display()))?;
    let mut jsonl = fs::File::create(a.out.join("results.jsonl"))?;
    writeln!(jsonl, "{}", serde_json::to_string(&info)?)?;
    let mut log: Box<dyn Write> = if a.json {
        Box::new(std::io::stderr())
    } else {
        Box::new(crate::stdout::Stdout::unlocked())
    };
    writeln!(
        log,
        "# cpu: {} ({} cores; shared machine: compare within this run); load average {}",
        info.cpu, info.cores, info.load_average
    )?;
    writeln!(
        log,
        "# {} records × {} B, {} connections over {} client thread(s), run phase {} s ({} s \
         warm-up), {}; inec {} scheme {}, {} event loop(s) per node, route {}, {:.1}% degraded reads (Weibull shape {}){}",
        a.records,
        a.value_bytes,
        a.connections,
        a.threads,
        a.duration_s,
        a.warmup_s,
        match a.rate {
            Some(r) => format!("open loop at {r} req/s"),
            None => "closed loop".into(),
        },
        a.code,
        a.scheme,
        harness::cache::CacheOptions {
            threads: a.inec_loops,
            ..Default::default()
        }
        .loops_sharing(
            a.inec_nodes
                .unwrap_or_else(|| parse_code(&a.code).map_or(1, |c| c.n()))
        ),
        if a.route == "any" {
            "any node (forwarded to the agent)"
        } else {
            "to the key's agent"
        },
        a.degraded_ratio * 100.0,
        a.degraded_shape,
        match a.kill_mean_s {
            Some(m) => format!(
                "; nodes killed every {m} s on average (Weibull shape {}), down {} s",
                a.kill_shape, a.down_s
            ),
            None => String::new(),
        }
    )?;
    let mut runs = Vec::new();
    let mut files = Vec::new();
    for &w in &workloads {
        let mut for_plots = Vec::new();
        for name in &a.systems {
            let (r, st, marks) = run_system(&a, name, w, n, k, &mut *log)
                .with_context(|| format!("{name} on workload {}", w.letter()))?;
            writeln!(
                log,
                "# YCSB-{} {name}: {:.0} ops/s, {} errors, {} wrong values, {} keys verified{}{}",
                w.letter(),
                r.run.throughput_ops_s,
                r.run.ops.values().map(|o| o.errors).sum::<u64>(),
                r.run.wrong + r.verify.wrong,
                r.verify.check.ok,
                match &r.cpu {
                    Some(c) => format!(
                        "; CPU {:.0} µs/op (servers {:.0}, client {:.0}), {:.1} server context \
                         switches/op",
                        c.total_us_per_op,
                        c.server_us_per_op,
                        c.client_us_per_op,
                        c.server_voluntary_switches_per_op + c.server_involuntary_switches_per_op
                    ),
                    None => String::new(),
                },
                if r.failures.is_empty() {
                    String::new()
                } else {
                    format!(
                        ", {} kills (at most {} at once)",
                        r.failures
                            .iter()
                            .filter(|f| f.what.ends_with("killed"))
                            .count(),
                        r.max_down_observed
                    )
                }
            )?;
            writeln!(jsonl, "{}", serde_json::to_string(&r)?)?;
            if a.json {
                outln!("{}", serde_json::to_string(&r)?)?;
            }
            for_plots.push((name.clone(), st, marks));
            runs.push(r);
        }
        write_plots(&a.out, w, &for_plots, &mut files)?;
    }
    let t = table(&runs);
    let st = systems_table(&runs);
    let ct = cpu_table(&runs);
    write!(log, "{t}\n{st}\n{ct}")?;
    fs::write(a.out.join("table.md"), format!("{t}\n{st}\n{ct}"))?;
    for r in &runs {
        if !r.run.errors.is_empty() {
            writeln!(
                log,
                "# {} YCSB-{} errors: {:?}",
                r.system, r.workload, r.run.errors
            )?;
        }
        if r.run.wrong + r.verify.wrong > 0 {
            writeln!(
                log,
                "# {} YCSB-{} WRONG VALUES: run {:?}, verify {:?}",
                r.system, r.workload, r.run.check, r.verify.check
            )?;
        }
    }
    writeln!(
        log,
        "# written: {} and {} plots",
        a.out.join("results.jsonl").display(),
        files.len()
    )?;
    let wrong: u64 = runs.iter().map(|r| r.run.wrong + r.verify.wrong).sum();
    if wrong > 0 {
        return Err(failure!(
            "{wrong} reads returned a wrong or missing value (see above)"
        ));
    }
    Ok(())
}

/// `--code`, parsed.
pub(crate) fn parse_code(code: &str) -> Result<codes::Code> {
    code.parse().map_err(|e| settings!("--code {code:?}: {e}"))
}
