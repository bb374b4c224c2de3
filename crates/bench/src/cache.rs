//! `inec bench cache`: set/get of fixed-size values against memcached-protocol servers, many
//! connections from a few `mio` event loops (the `load` crate), every read checked (`load::check`),
//! latencies in HDR histograms. memcached 1.6 is started and stopped by the benchmark as the
//! baseline; other systems are given by address (`--system LABEL=ADDR[,ADDR...]`). Systems
//! alternate within every round, so drift and other load on a shared machine hit them alike;
//! the table gives the median over rounds and the ratio to memcached.

use std::collections::BTreeMap;
use std::fs;
use std::io::Write;
use std::net::{SocketAddr, ToSocketAddrs};
use std::path::PathBuf;
use std::time::Duration;

use crate::{Context, Result};
use serde::Serialize;

use harness::cache::{InecCache, InecOptions};
use harness::{Memcached, MemcachedOptions};
use load::{KeyNames, LoadAll, Phase, PhaseStats, Route, Session, Target, UniformMix};

#[derive(clap::Args, Debug, Clone)]
pub struct CacheArgs {
    /// Keys (each loaded once before the timed phase).
    #[arg(long, default_value_t = 20_000)]
    pub keys: u64,
    /// Bytes per value.
    #[arg(long, default_value_t = 8192)]
    pub value_bytes: usize,
    /// get:set ratio of the requests, e.g. `90:10`, `50:50`, `100:0`.
    #[arg(long, default_value = "90:10")]
    pub mix: String,
    /// Client connections in all.
    #[arg(long, default_value_t = 32)]
    pub connections: usize,
    /// Client threads (each one event loop over its share of the connections).
    #[arg(long, default_value_t = 1)]
    pub threads: usize,
    /// Seconds of the timed phase per system and round (the warm-up included).
    #[arg(long, default_value_t = 5.0)]
    pub duration_s: f64,
    /// Seconds at the start of the timed phase that are checked but not recorded.
    #[arg(long, default_value_t = 1.0)]
    pub warmup_s: f64,
    /// Target rate, requests per second over all connections (open loop: latency counted from
    /// each request's intended start). Without it, closed loop: one request per connection.
    #[arg(long)]
    pub rate: Option<f64>,
    /// Rounds; every round runs every system once, in a rotating order.
    #[arg(long, default_value_t = 3)]
    pub rounds: usize,
    /// A system to measure: `LABEL=ADDR[,ADDR...]` (repeatable). With several addresses, keys
    /// are spread over them by the client (`--route hash`) or connections are (`--route spread`,
    /// for servers where any node accepts any key).
    #[arg(long = "system")]
    pub systems: Vec<String>,
    /// `hash`: a key goes to one address chosen by FNV-1a of the key; `spread`: connections
    /// spread over the addresses, any key on any connection.
    #[arg(long, default_value = "hash")]
    pub route: String,
    /// Leave out the memcached baseline.
    #[arg(long)]
    pub no_memcached: bool,
    /// memcached worker threads (`-t`).
    #[arg(long, default_value_t = 4)]
    pub memcached_threads: usize,
    /// memcached item memory in MiB (`-m`); default: enough for every key with room to spare.
    #[arg(long)]
    pub memcached_memory_mib: Option<usize>,
    /// Fraction of gets sent as forced-degraded reads (systems that support it; see
    /// `--degraded-form`).
    #[arg(long, default_value_t = 0.0)]
    pub degraded_ratio: f64,
    /// The request line of a forced-degraded get, `{key}` standing for the key. A form
    /// starting with `mg ` is read as a meta reply. Default for the inec caches the benchmark
    /// starts: `mg {key} v Oinec-degrade-0` (data chunk 0 treated as lost, docs/cache.md);
    /// systems given by address get degraded reads only with this flag; memcached never.
    #[arg(long)]
    pub degraded_form: Option<String>,
    /// Also start an inec local cache (`inec cache up`, run from this `inec` binary) in each
    /// of these modes, e.g. `--inec coherent,incoherent,whole`: `coherent` and `incoherent`
    /// with the paper's layout (`--layout split`), `whole` coherent with every value whole at
    /// its home (`--layout whole`); keys go straight to their stripe's agent (`--route hash`
    /// is the cache's own placement hash).
    #[arg(long = "inec", value_delimiter = ',')]
    pub inec_modes: Vec<String>,
    /// The code of the inec caches.
    #[arg(long, default_value = "rs:6,3")]
    pub inec_code: String,
    /// The scheme of the inec caches.
    #[arg(long, default_value = "rs")]
    pub inec_scheme: String,
    /// Nodes of each inec cache (default: the code's chunk count).
    #[arg(long)]
    pub inec_nodes: Option<usize>,
    /// Event loops per inec node (`inec serve -t`; default: the machine's cores shared among
    /// the nodes, at least 1 each).
    #[arg(long)]
    pub inec_loops: Option<usize>,
    /// `-m` per inec node, MiB (default: enough for every key's chunks with room to spare).
    #[arg(long)]
    pub inec_memory_mib: Option<usize>,
    /// Seconds without a reply before a request counts as a timeout.
    #[arg(long, default_value_t = 5.0)]
    pub timeout_s: f64,
    #[arg(long, default_value_t = 0x1EC0_CAC4E)]
    pub seed: u64,
    /// Print JSON lines on stdout (the table goes to stderr).
    #[arg(long)]
    pub json: bool,
    /// Where `results.jsonl` and `table.md` go.
    #[arg(long, default_value = "reports/cache")]
    pub out: PathBuf,
    /// The `inec` executable the nodes of inec caches run (the caller passes its own path;
    /// not a flag).
    #[arg(skip)]
    pub exe: Option<PathBuf>,
}

/// A system under test.
#[derive(Clone, Debug)]
pub struct SystemSpec {
    pub label: String,
    pub kind: SystemKind,
}

#[derive(Clone, Debug)]
pub enum SystemKind {
    /// memcached started by the benchmark for every round.
    Memcached(MemcachedOptions),
    /// Servers already running at these addresses.
    External(Vec<SocketAddr>),
    /// An inec local cache started by the benchmark for every round.
    Inec(Box<InecOptions>),
}

/// Parses `LABEL=ADDR[,ADDR...]`.
pub fn parse_system(s: &str) -> Result<SystemSpec> {
    let (label, addrs) = s
        .split_once('=')
        .ok_or_else(|| settings!("--system {s:?}: expected LABEL=ADDR[,ADDR...]"))?;
    if label.is_empty() {
        bail!("--system {s:?}: empty label");
    }
    let mut out = Vec::new();
    for a in addrs.split(',') {
        let a = a.trim();
        let addr = a
            .to_socket_addrs()
            .with_context(|| format!("--system {label}: address {a:?}"))?
            .next()
            .ok_or_else(|| settings!("--system {label}: {a:?} resolves to nothing"))?;
        out.push(addr);
    }
    Ok(SystemSpec {
        label: label.to_string(),
        kind: SystemKind::External(out),
    })
}

/// Parses `G:S` into the fraction of gets.
pub fn parse_mix(s: &str) -> Result<f64> {
    let (g, w) = s
        .split_once(':')
        .ok_or_else(|| settings!("--mix {s:?}: expected GET:SET, e.g. 90:10"))?;
    let g: f64 = g.trim().parse().with_context(|| format!("--mix {s:?}"))?;
    let w: f64 = w.trim().parse().with_context(|| format!("--mix {s:?}"))?;
    if !(g >= 0.0 && w >= 0.0 && g + w > 0.0) {
        bail!("--mix {s:?}: parts must be ≥ 0 and not both 0");
    }
    Ok(g / (g + w))
}

/// Parses a degraded form (`{key}` where the key goes).
pub fn parse_degraded_form(s: &str) -> Result<load::DegradedForm> {
    let (prefix, suffix) = s
        .split_once("{key}")
        .ok_or_else(|| settings!("--degraded-form {s:?}: must contain {{key}}"))?;
    if s.contains(['\r', '\n']) {
        bail!("--degraded-form {s:?}: no line breaks");
    }
    Ok(load::DegradedForm {
        prefix: prefix.to_string(),
        suffix: suffix.to_string(),
        meta: prefix.starts_with("mg "),
    })
}

/// One system, one round.
#[derive(Clone, Debug, Serialize)]
pub struct RoundResult {
    pub round: usize,
    pub throughput_ops_s: f64,
    pub load_throughput_ops_s: f64,
    pub ops: BTreeMap<String, OpFigures>,
    pub check: load::CheckCounts,
    pub errors: BTreeMap<String, u64>,
    pub unfinished: u64,
    pub reconnects: u64,
    pub connections: usize,
    /// Resident memory of the servers the benchmark started, after the run.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub server_rss_bytes: Option<u64>,
}

#[derive(Clone, Copy, Debug, Serialize)]
pub struct OpFigures {
    pub ok: u64,
    pub errors: u64,
    pub ops_s: f64,
    pub p50_us: f64,
    pub p99_us: f64,
    pub p999_us: f64,
    pub max_us: f64,
}

fn figures(st: &PhaseStats) -> BTreeMap<String, OpFigures> {
    st.ops
        .iter()
        .map(|(k, s)| {
            let q = |p: f64| s.hist.value_at_quantile(p) as f64 / 1e3;
            let ops_s = if st.recorded_secs > 0.0 {
                s.ok as f64 / st.recorded_secs
            } else {
                0.0
            };
            (
                k.name().to_string(),
                OpFigures {
                    ok: s.ok,
                    errors: s.errors,
                    ops_s,
                    p50_us: q(0.5),
                    p99_us: q(0.99),
                    p999_us: q(0.999),
                    max_us: s.hist.max() as f64 / 1e3,
                },
            )
        })
        .collect()
}

/// One line of the table (medians over rounds) and of the JSON.
#[derive(Clone, Debug, Serialize)]
pub struct Row {
    pub system: String,
    pub op: String,
    pub ops_s: f64,
    pub p50_us: f64,
    pub p99_us: f64,
    pub p999_us: f64,
    /// This system's figure ÷ memcached's (throughput: higher is better; latency: lower).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ops_s_vs_memcached: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub p50_vs_memcached: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub p99_vs_memcached: Option<f64>,
    pub errors: u64,
    /// Values that must never be returned (stale, torn, wrong key, …), over all rounds.
    pub wrong: u64,
    pub rounds: usize,
}

/// Everything about a run, the first JSON line.
#[derive(Clone, Debug, Serialize)]
pub struct RunInfo {
    pub bench: &'static str,
    pub cpu: String,
    pub cores: usize,
    pub load_average: String,
    pub memcached_version: Option<String>,
    pub keys: u64,
    pub value_bytes: usize,
    pub get_fraction: f64,
    pub degraded_ratio: f64,
    pub connections: usize,
    pub client_threads: usize,
    pub duration_s: f64,
    pub warmup_s: f64,
    pub rate: Option<f64>,
    pub rounds: usize,
    pub route: String,
}

/// All rounds of one system.
#[derive(Clone, Debug, Serialize)]
pub struct SystemResult {
    pub system: String,
    pub addrs: Vec<String>,
    pub rounds: Vec<RoundResult>,
}

/// The median over rounds ([`crate::stats::median`]); NaN (null in JSON) for no round.
fn median(v: Vec<f64>) -> f64 {
    if v.is_empty() {
        return f64::NAN;
    }
    crate::stats::median(&v)
}

/// Runs one system for one round: start (if the benchmark manages it), load every key, the
/// timed phase, stop.
fn run_round(
    a: &CacheArgs,
    sys: &SystemSpec,
    round: usize,
    get_fraction: f64,
    route: Route,
    degraded: Option<&load::DegradedForm>,
) -> Result<(Vec<SocketAddr>, RoundResult)> {
    let mut _server = None;
    let mut _inec = None;
    let mut pids = Vec::new();
    let mut degraded = degraded.cloned();
    let addrs = match &sys.kind {
        SystemKind::Memcached(o) => {
            let m = Memcached::start(o)?;
            let addr = m.addr();
            pids.push(m.pid());
            _server = Some(m);
            degraded = None;
            vec![addr]
        }
        SystemKind::External(addrs) => addrs.clone(),
        SystemKind::Inec(o) => {
            let c = InecCache::start(o)?;
            let addrs = c.addrs().to_vec();
            pids.extend_from_slice(c.pids());
            _inec = Some(c);
            if degraded.is_none() {
                degraded = Some(parse_degraded_form(INEC_DEGRADED_FORM)?);
            }
            addrs
        }
    };
    let degraded = degraded.as_ref();
    // A fresh key prefix per round and system: nothing of an earlier round can be read back.
    let nonce = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0)
        % 1_000_000_007;
    let target = Target {
        addrs: addrs.clone(),
        route,
        connections: a.connections,
        threads: a.threads,
        value_bytes: a.value_bytes,
        keys: KeyNames::Prefix(format!("b{nonce}:")),
        timeout: Duration::from_secs_f64(a.timeout_s),
        degraded: degraded.cloned(),
    };
    let mut session = Session::new(target, a.keys, a.seed ^ round as u64)?;
    let load_phase = Phase {
        duration: None,
        rate: None,
        warmup: Duration::ZERO,
        drain: Duration::from_secs_f64(a.timeout_s + 1.0),
    };
    let loaded = session.run(&load_phase, &|_, n| Box::new(LoadAll::new(n)))?;
    if loaded.total_errors() > 0 {
        return Err(failure!(
            "{}: loading the keys failed: {:?}",
            sys.label,
            loaded.errors
        ));
    }
    let run_phase = Phase {
        duration: Some(Duration::from_secs_f64(a.duration_s)),
        rate: a.rate,
        warmup: Duration::from_secs_f64(a.warmup_s.min(a.duration_s * 0.5)),
        drain: Duration::from_secs_f64(a.timeout_s + 1.0),
    };
    let degraded_fraction = if degraded.is_some() {
        a.degraded_ratio
    } else {
        0.0
    };
    let st = session.run(&run_phase, &|_, _| {
        Box::new(UniformMix {
            get_fraction,
            degraded_fraction,
        })
    })?;
    let server_rss_bytes = (!pids.is_empty()).then(|| {
        pids.iter()
            .filter_map(|&p| harness::resident_bytes(p))
            .sum()
    });
    let mut errors = loaded.errors.clone();
    for (r, n) in &st.errors {
        *errors.entry(r.clone()).or_default() += n;
    }
    Ok((
        addrs,
        RoundResult {
            round,
            throughput_ops_s: st.throughput(),
            load_throughput_ops_s: loaded.throughput(),
            ops: figures(&st),
            check: st.check,
            errors,
            unfinished: st.unfinished,
            reconnects: st.reconnects,
            connections: st.connections,
            server_rss_bytes,
        },
    ))
}

/// Medians over rounds, one row per (system, op) and one `all` row per system.
pub fn rows(results: &[SystemResult]) -> Vec<Row> {
    let mut rows = Vec::new();
    for r in results {
        let wrong: u64 = r.rounds.iter().map(|x| x.check.wrong()).sum();
        let mut ops: Vec<String> = r
            .rounds
            .iter()
            .flat_map(|x| x.ops.keys().cloned())
            .collect();
        ops.sort();
        ops.dedup();
        for op in ops {
            let pick = |f: &dyn Fn(&OpFigures) -> f64| {
                median(
                    r.rounds
                        .iter()
                        .filter_map(|x| x.ops.get(&op))
                        .map(f)
                        .collect(),
                )
            };
            rows.push(Row {
                system: r.system.clone(),
                op: op.clone(),
                ops_s: pick(&|f| f.ops_s),
                p50_us: pick(&|f| f.p50_us),
                p99_us: pick(&|f| f.p99_us),
                p999_us: pick(&|f| f.p999_us),
                ops_s_vs_memcached: None,
                p50_vs_memcached: None,
                p99_vs_memcached: None,
                errors: r
                    .rounds
                    .iter()
                    .filter_map(|x| x.ops.get(&op))
                    .map(|f| f.errors)
                    .sum(),
                wrong,
                rounds: r.rounds.len(),
            });
        }
        rows.push(Row {
            system: r.system.clone(),
            op: "all".into(),
            ops_s: median(r.rounds.iter().map(|x| x.throughput_ops_s).collect()),
            p50_us: f64::NAN,
            p99_us: f64::NAN,
            p999_us: f64::NAN,
            ops_s_vs_memcached: None,
            p50_vs_memcached: None,
            p99_vs_memcached: None,
            errors: r
                .rounds
                .iter()
                .flat_map(|x| x.ops.values())
                .map(|f| f.errors)
                .sum(),
            wrong,
            rounds: r.rounds.len(),
        });
    }
    // Ratios against memcached's row of the same op.
    let base: BTreeMap<String, (f64, f64, f64)> = rows
        .iter()
        .filter(|r| r.system == "memcached")
        .map(|r| (r.op.clone(), (r.ops_s, r.p50_us, r.p99_us)))
        .collect();
    for r in &mut rows {
        if let Some(&(t, p50, p99)) = base.get(&r.op) {
            let ratio = |x: f64, y: f64| (x.is_finite() && y > 0.0).then(|| x / y);
            r.ops_s_vs_memcached = ratio(r.ops_s, t);
            r.p50_vs_memcached = ratio(r.p50_us, p50);
            r.p99_vs_memcached = ratio(r.p99_us, p99);
        }
    }
    rows
}

fn fmt_us(x: f64) -> String {
    if x.is_finite() {
        format!("{x:.0}")
    } else {
        "–".into()
    }
}

fn fmt_ratio(x: Option<f64>) -> String {
    x.map(|x| format!("{x:.2}×")).unwrap_or_else(|| "–".into())
}

/// The Markdown table.
pub fn table(rows: &[Row]) -> String {
    let mut s = String::from(
        "| system | op | ops/s | p50 µs | p99 µs | p99.9 µs | ops/s ÷ memcached | p50 ÷ mc | p99 ÷ mc | errors | wrong values |\n\
         |---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n",
    );
    for r in rows {
        s.push_str(&format!(
            "| {} | {} | {:.0} | {} | {} | {} | {} | {} | {} | {} | {} |\n",
            r.system,
            r.op,
            r.ops_s,
            fmt_us(r.p50_us),
            fmt_us(r.p99_us),
            fmt_us(r.p999_us),
            fmt_ratio(r.ops_s_vs_memcached),
            fmt_ratio(r.p50_vs_memcached),
            fmt_ratio(r.p99_vs_memcached),
            r.errors,
            r.wrong
        ));
    }
    s
}

/// The per-request forced-degraded read of inec's cache (docs/cache.md): data chunk 0 lost.
pub const INEC_DEGRADED_FORM: &str = "mg {key} v Oinec-degrade-0";

/// Runs `inec bench cache`.
pub fn run(a: CacheArgs) -> Result<()> {
    let get_fraction = parse_mix(&a.mix)?;
    let route = match a.route.as_str() {
        "hash" => Route::Hash,
        "spread" => Route::Spread,
        r => bail!("--route {r:?}: expected hash or spread"),
    };
    if !(0.0..=1.0).contains(&a.degraded_ratio) {
        bail!("--degraded-ratio must be within 0..=1");
    }
    if a.value_bytes < load::check::HEADER_BYTES {
        bail!(
            "--value-bytes must be at least {} (the checked header)",
            load::check::HEADER_BYTES
        );
    }
    if a.keys == 0 || a.connections == 0 || a.rounds == 0 || a.duration_s <= 0.0 {
        bail!("--keys, --connections, --rounds and --duration-s must be positive");
    }
    let degraded = a
        .degraded_form
        .as_deref()
        .map(parse_degraded_form)
        .transpose()?;
    if a.degraded_ratio > 0.0 && degraded.is_none() && a.inec_modes.is_empty() {
        bail!("--degraded-ratio needs --degraded-form (how the system is asked for one) or --inec");
    }
    let mut systems = Vec::new();
    let mut memcached_version = None;
    if !a.no_memcached {
        if !Memcached::available() {
            bail!(
                "{} is missing: install the memcached package, or pass --no-memcached",
                harness::memcached::MEMCACHED
            );
        }
        memcached_version = Memcached::version().ok();
        let need_mib = (a.keys as usize * (a.value_bytes + 200)).div_ceil(1 << 20);
        systems.push(SystemSpec {
            label: "memcached".into(),
            kind: SystemKind::Memcached(MemcachedOptions {
                memory_mib: a
                    .memcached_memory_mib
                    .unwrap_or(need_mib + need_mib / 2 + 64),
                threads: a.memcached_threads,
                max_connections: (a.connections + 64).max(1024),
                item_size_max_bytes: (a.value_bytes + 1024).max(1 << 20),
            }),
        });
    }
    for s in &a.systems {
        let sys = parse_system(s)?;
        if systems.iter().any(|x: &SystemSpec| x.label == sys.label) {
            bail!("--system {}: label used twice", sys.label);
        }
        systems.push(sys);
    }
    if !a.inec_modes.is_empty() {
        let exe = a.exe.clone().ok_or_else(|| {
            settings!("--inec needs the `inec` executable (its nodes run `inec serve`)")
        })?;
        let code: codes::Code =
            (a.inec_code.parse()).map_err(|e| settings!("--inec-code {:?}: {e}", a.inec_code))?;
        let (k, n) = (code.k(), code.n());
        let nodes = a.inec_nodes.unwrap_or(n);
        // Each node's -m is split over its n (stripe, position) slots; a slot holds about
        // keys/nodes values of value/k bytes each (plus record headers).
        let per_slot = (a.keys as usize).div_ceil(nodes) * (a.value_bytes.div_ceil(k) + 256);
        let need_mib = (per_slot * n).div_ceil(1 << 20);
        for mode in &a.inec_modes {
            if !["coherent", "incoherent", "whole"].contains(&mode.as_str()) {
                bail!("--inec {mode:?}: expected coherent, incoherent or whole");
            }
            let mut o = InecOptions {
                nodes: a.inec_nodes,
                ..InecOptions::new(
                    &exe,
                    &a.inec_code,
                    &a.inec_scheme,
                    if mode == "whole" { "coherent" } else { mode },
                    a.inec_memory_mib.unwrap_or(need_mib * 2 + 16) as u64,
                )
            };
            o.options.layout = if mode == "whole" { "whole" } else { "split" }.into();
            if let Some(loops) = a.inec_loops {
                o.options.threads = Some(loops);
            }
            systems.push(SystemSpec {
                label: format!("inec-{mode}"),
                kind: SystemKind::Inec(Box::new(o)),
            });
        }
    }
    if systems.is_empty() {
        bail!("nothing to measure: give --system LABEL=ADDR or leave memcached in");
    }

    let info = RunInfo {
        bench: "cache",
        cpu: crate::host::cpu_model(),
        cores: std::thread::available_parallelism().map_or(1, |n| n.get()),
        load_average: crate::host::load_average(),
        memcached_version,
        keys: a.keys,
        value_bytes: a.value_bytes,
        get_fraction,
        degraded_ratio: a.degraded_ratio,
        connections: a.connections,
        client_threads: a.threads,
        duration_s: a.duration_s,
        warmup_s: a.warmup_s,
        rate: a.rate,
        rounds: a.rounds,
        route: a.route.clone(),
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
        "# {} keys × {} B, get:set {}, {} connections over {} client thread(s), {} round(s) of \
         {} s ({} s warm-up), {}",
        a.keys,
        a.value_bytes,
        a.mix,
        a.connections,
        a.threads,
        a.rounds,
        a.duration_s,
        info.warmup_s.min(a.duration_s * 0.5),
        match a.rate {
            Some(r) => format!("open loop at {r} req/s (latency from the intended start)"),
            None => "closed loop (latency from the send)".into(),
        }
    )?;

    let mut results: Vec<SystemResult> = systems
        .iter()
        .map(|s| SystemResult {
            system: s.label.clone(),
            addrs: Vec::new(),
            rounds: Vec::new(),
        })
        .collect();
    for round in 0..a.rounds {
        for j in 0..systems.len() {
            let i = (j + round) % systems.len();
            let sys = &systems[i];
            let (addrs, rr) = run_round(&a, sys, round, get_fraction, route, degraded.as_ref())
                .with_context(|| format!("{} round {round}", sys.label))?;
            writeln!(
                log,
                "# round {round} {}: {:.0} ops/s, {} errors, {} wrong values",
                sys.label,
                rr.throughput_ops_s,
                rr.ops.values().map(|f| f.errors).sum::<u64>(),
                rr.check.wrong()
            )?;
            results[i].addrs = addrs.iter().map(|x| x.to_string()).collect();
            results[i].rounds.push(rr);
        }
    }
    for r in &results {
        writeln!(jsonl, "{}", serde_json::to_string(r)?)?;
    }
    let rows = rows(&results);
    for r in &rows {
        let line = serde_json::to_string(r)?;
        writeln!(jsonl, "{line}")?;
        if a.json {
            outln!("{line}")?;
        }
    }
    let t = table(&rows);
    write!(log, "{t}")?;
    fs::write(a.out.join("table.md"), &t)?;
    for r in &results {
        let wrong: u64 = r.rounds.iter().map(|x| x.check.wrong()).sum();
        let errs: BTreeMap<&String, u64> =
            r.rounds
                .iter()
                .flat_map(|x| x.errors.iter())
                .fold(BTreeMap::new(), |mut m, (k, v)| {
                    *m.entry(k).or_default() += v;
                    m
                });
        if !errs.is_empty() {
            writeln!(log, "# {} errors: {errs:?}", r.system)?;
        }
        if wrong > 0 {
            let c: Vec<_> = r.rounds.iter().map(|x| x.check).collect();
            writeln!(log, "# {} WRONG VALUES: {c:?}", r.system)?;
        }
    }
    writeln!(log, "# written: {}", a.out.join("results.jsonl").display())?;
    let wrong: u64 = results
        .iter()
        .flat_map(|r| r.rounds.iter())
        .map(|x| x.check.wrong() + x.check.missing)
        .sum();
    if wrong > 0 {
        return Err(failure!(
            "{wrong} reads returned a wrong or missing value (see above)"
        ));
    }
    Ok(())
}
