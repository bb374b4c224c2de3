//! `inec nemesis`: a local cache in network namespaces (`inec cache up --netns`), clients on
//! every side recording a history of `get`, `set`, `cas`, `incr` and `delete` on a few hot keys
//! (`load::history`), and a schedule of faults aimed at one stripe's agent — silent partitions
//! (the agent from its successor, one way, from every node, from a majority; a minority of
//! members from the rest; the agent from its clients), a pause (SIGSTOP) and a kill (SIGKILL,
//! then a restart) — each held for a few lease times and healed. Then every key is read back
//! through every node, the history is checked for linearizability by porcupine (a Go program in
//! `peers/porcupine/`) and for stale reads, and each fault's unavailability is measured from
//! the history. docs/nemesis.md says what each number counts.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use codes::Code;
use harness::cache::{InecCache, InecOptions};
use load::history::{History, HistoryConfig, Op, Outcome, Recorder};
use serde::{Deserialize, Serialize};

use crate::{BenchError, Context, Result};

/// One fault of the schedule, aimed at the agent `a` of the chosen stripe (its successor `b`).
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Fault {
    /// `a` and `b` cannot hear each other; every other link is up.
    AgentSuccessor,
    /// `a`'s frames to `b` are dropped; `b`'s reach `a`.
    AgentOneWay,
    /// `a` is cut from every other node (its clients still reach it).
    AgentAll,
    /// `a` is cut from a majority of the nodes (it keeps a minority, itself included).
    Majority,
    /// As many nodes as the code tolerates losing (its parity count), at most a minority, `b`
    /// first, are cut from the rest (the agent among the majority): the stripes go on with
    /// those positions down.
    Minority,
    /// A minority of the nodes, `b` first, is cut from the rest: with N = n, more than the code
    /// tolerates, so every stripe must refuse rather than answer from too few members.
    MinorityOverTolerance,
    /// `a` is cut from the clients only (this machine's side of the bridge).
    Clients,
    /// `a` is stopped (SIGSTOP), then continued.
    Pause,
    /// `a` is killed (SIGKILL), then restarted empty.
    Kill,
    /// `a` is cut from the coordinator (`--coordinator` only): it loses its lease there.
    Coordinator,
}

impl Fault {
    /// Its name as `--faults` spells it (clap's, which serde's kebab-case matches).
    fn name(self) -> String {
        clap::ValueEnum::to_possible_value(&self)
            .expect("every fault has a name")
            .get_name()
            .to_string()
    }
}

#[derive(clap::Args, Debug, Clone)]
pub struct NemesisArgs {
    /// The faults, in order, each once per round.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "agent-successor,agent-one-way,agent-all,majority,minority,minority-over-tolerance,clients,pause,kill"
    )]
    pub faults: Vec<Fault>,
    /// How many times the schedule runs.
    #[arg(long, default_value_t = 1)]
    pub rounds: usize,
    /// The code: rs:K,M or lrc:K,L,R.
    #[arg(long, default_value = "rs:6,3")]
    pub code: Code,
    /// Repair scheme of degraded reads.
    #[arg(long, default_value = "rs")]
    pub scheme: String,
    /// Nodes (default: the chunks per stripe of the code).
    #[arg(long)]
    pub nodes: Option<usize>,
    /// The stripe whose agent the faults aim at (its agent is node STRIPE).
    #[arg(long, default_value_t = 0)]
    pub stripe: usize,
    /// The lease time (each node's --down-after-ms).
    #[arg(long, default_value_t = 1000)]
    pub lease_ms: u64,
    /// How long each fault lasts, in lease times.
    #[arg(long, default_value_t = 3.0)]
    pub hold: f64,
    /// Seconds of quiet before the first fault and after each heal (then the next fault waits
    /// until the cache is whole again, up to a minute).
    #[arg(long, default_value_t = 3.0)]
    pub settle_s: f64,
    /// Client threads, each with one connection: client i talks to node (STRIPE + i) mod N.
    #[arg(long, default_value_t = 8)]
    pub clients: usize,
    /// Bytes per value of the register keys (8 KiB: coded; the counters are short, replicated).
    #[arg(long, default_value = "8KiB", value_parser = codes::size::parse_size)]
    pub value_bytes: usize,
    /// Each client's pause between operations, in ms (keeps the history checkable).
    #[arg(long, default_value_t = 5)]
    pub think_ms: u64,
    /// A reply not complete after this many ms: the operation's outcome is unknown.
    #[arg(long, default_value_t = 1000)]
    pub timeout_ms: u64,
    /// Directory of the history (history.json) and the results (nemesis.json).
    #[arg(long, default_value = "target/inec-nemesis")]
    pub out: PathBuf,
    /// The Go toolchain that builds the checker.
    #[arg(long, default_value = "go")]
    pub go: String,
    /// Seed of the clients' choices.
    #[arg(long, default_value_t = 0x5EED)]
    pub seed: u64,
    /// The `inec` executable the nodes run (default: this one), e.g. an older build's.
    #[arg(long)]
    pub nodes_exe: Option<PathBuf>,
    /// Leadership from a coordinator: `local` starts a one-member etcd in a namespace of its
    /// own on the bridge (`inec cache up --coordinator local`). Default: the majority lease.
    #[arg(long, value_name = "local|etcd://HOST:PORT")]
    pub coordinator: Option<String>,
    /// The cache's value layout (`inec serve --layout`): split, whole or auto.
    #[arg(long, default_value = "auto", value_parser = ["split", "whole", "auto"])]
    pub layout: String,
    /// How whole values are rebuilt (`inec serve --whole-repair`): direct or plan.
    #[arg(long, default_value = "direct", value_parser = ["direct", "plan"])]
    pub whole_repair: String,
    /// Values shorter than this are replicated, the rest coded (`inec serve
    /// --replicate-below`, the split layout): 1 codes the counters too.
    #[arg(long, default_value_t = 1024)]
    pub replicate_below: usize,
}

/// One fault as it ran, on the history's clock (ns).
#[derive(Clone, Debug, Serialize)]
pub struct Window {
    pub round: usize,
    pub fault: Fault,
    pub start_ns: i64,
    pub heal_ns: i64,
    pub end_ns: i64,
    /// Operations on the stripe's keys invoked in [start, end): ok, failed, unknown.
    pub ok: usize,
    pub failed: usize,
    pub unknown: usize,
    /// The longest time in [start, end) in which no operation on the stripe's keys succeeded.
    pub longest_gap_s: f64,
    /// How long after the heal operations on the stripe's keys still failed (0: none did).
    pub failing_after_heal_s: f64,
}

/// The checker's verdict (peers/porcupine/main.go).
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct Verdict {
    /// ok, illegal or unknown (the checker timed out).
    pub result: String,
    #[serde(default)]
    pub keys: Vec<serde_json::Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub counterexample: Option<serde_json::Value>,
}

/// What a run found.
#[derive(Clone, Debug, Serialize)]
pub struct NemesisResult {
    /// `majority` or the coordinator (`--coordinator`).
    pub coordinator: String,
    pub nodes: usize,
    pub stripe: usize,
    pub lease_ms: u64,
    pub windows: Vec<Window>,
    pub ops: usize,
    pub ok: usize,
    pub failed: usize,
    pub unknown: usize,
    pub stale_reads: usize,
    /// Acknowledged increments.
    pub incr_acked: usize,
    pub verdict: Verdict,
    /// Each node's counters at the end that say how leadership went (`stats inec`).
    pub node_stats: Vec<std::collections::BTreeMap<String, String>>,
}

/// The `stats inec` counters a nemesis report keeps per node.
const NODE_STATS: &[&str] = &[
    "index_rebuilds",
    "lease_lapses",
    "lease_lost_ops",
    "writes_in_doubt",
    "retries_answered",
    "retries_in_doubt",
    "holes_filled",
    "degraded_plan_runs",
    "degraded_plan_fallbacks",
    "whole_rebuilds",
    "whole_plan_rejected",
    "fenced_out",
];

/// Builds the checker (`peers/porcupine`) with `go`; returns its path.
pub fn build_checker(go: &str) -> Result<PathBuf> {
    crate::peers::go_build(go, "porcupine", "porcupine-check", "porcupine checker")
}

/// Checks the history in `path` with the checker at `checker`.
pub fn check(checker: &Path, path: &Path) -> Result<Verdict> {
    let out = Command::new(checker)
        .arg(path)
        .stderr(Stdio::inherit())
        .output()
        .map_err(BenchError::io("running the linearizability checker"))?;
    if !out.status.success() {
        return Err(BenchError::library(
            "porcupine checker",
            format!("it failed on {}: {}", path.display(), out.status),
        ));
    }
    serde_json::from_slice(&out.stdout)
        .map_err(|e| BenchError::library("porcupine checker", format!("unreadable verdict: {e}")))
}

/// The nodes each fault cuts, as (from, to) one-way pairs among `n` nodes; `a` the agent,
/// `tolerated` the positions a stripe may lose (the code's parity count).
fn cuts(fault: Fault, a: usize, n: usize, tolerated: usize) -> Vec<(usize, usize)> {
    let b = (a + 1) % n;
    let both = |x: usize, y: usize| [(x, y), (y, x)];
    match fault {
        Fault::AgentSuccessor => both(a, b).to_vec(),
        Fault::AgentOneWay => vec![(a, b)],
        Fault::AgentAll => (1..n).flat_map(|d| both(a, (a + d) % n)).collect(),
        // The agent keeps n/2 nodes with itself (a minority: n/2 < n/2 + 1), losing the rest.
        Fault::Majority => (1..n - n / 2 + 1)
            .flat_map(|d| both(a, (a + d) % n))
            .collect(),
        Fault::Minority | Fault::MinorityOverTolerance => {
            let size = match fault {
                Fault::Minority => tolerated.min((n - 1) / 2),
                _ => (n - 1) / 2,
            };
            let side: Vec<usize> = (0..size).map(|d| (b + d) % n).collect();
            let rest: Vec<usize> = (0..n).filter(|x| !side.contains(x)).collect();
            side.iter()
                .flat_map(|&x| rest.iter().flat_map(move |&y| both(x, y)))
                .collect()
        }
        Fault::Coordinator => both(a, harness::netns::COORDINATOR).to_vec(),
        Fault::Clients | Fault::Pause | Fault::Kill => Vec::new(),
    }
}

/// Keys whose stripe is `stripe`, `count` of them, named `prefix` and a number.
fn keys_of(n: usize, stripe: usize, prefix: &str, count: usize) -> Vec<String> {
    let p = cache::cluster::placement::Placement::new(n, n);
    (0..)
        .map(|i| format!("{prefix}{i}"))
        .filter(|k| p.stripe_of(k.as_bytes()) == stripe)
        .take(count)
        .collect()
}

/// Runs the nemesis: see the module's documentation.
pub fn run(a: NemesisArgs, this_exe: &Path) -> Result<NemesisResult> {
    let n = a.nodes.unwrap_or(a.code.n());
    if a.stripe >= n {
        bail!("--stripe {} but the cache has {n} nodes", a.stripe);
    }
    if a.faults.is_empty() || a.rounds == 0 || a.clients == 0 {
        bail!("nothing to run: --faults, --rounds and --clients must not be empty or 0");
    }
    if a.faults.contains(&Fault::Coordinator) && a.coordinator.is_none() {
        bail!("the coordinator fault needs --coordinator");
    }
    let checker = build_checker(&a.go)?;
    // One namespace cluster per machine: wait for any other user of the bridge (a test).
    let _slot = harness::netns::slot().context("the namespace-cluster lock")?;
    std::fs::create_dir_all(&a.out)
        .map_err(BenchError::io(format!("creating {}", a.out.display())))?;
    let exe = a
        .nodes_exe
        .clone()
        .unwrap_or_else(|| this_exe.to_path_buf());
    let mut opts = InecOptions {
        nodes: Some(n),
        ..InecOptions::new(exe, &a.code.to_string(), &a.scheme, "coherent", 64)
    };
    opts.options.down_after_ms = a.lease_ms;
    opts.options.coordinator.clone_from(&a.coordinator);
    opts.options.layout.clone_from(&a.layout);
    opts.options.whole_repair.clone_from(&a.whole_repair);
    opts.options.replicate_below = a.replicate_below;
    let dir = std::env::temp_dir().join(format!("inec-nemesis-{}", std::process::id()));
    outln!(
        "starting {n} nodes in network namespaces ({}, {}, leadership: {})",
        a.code,
        a.scheme,
        a.coordinator
            .as_deref()
            .map_or("majority lease".into(), |c| format!("coordinator {c}"))
    )?;
    let mut cache = InecCache::start_netns_in(&opts, &dir).context("starting the cache")?;
    let result = schedule(&a, n, &mut cache, &checker);
    let bad = result
        .as_ref()
        .map_or(true, |r| r.verdict.result != "ok" || r.stale_reads > 0);
    if bad {
        let kept = a.out.join("node-logs");
        let _ = std::fs::create_dir_all(&kept);
        for i in 0..n {
            let log = format!("node-{i}.log");
            let _ = std::fs::copy(cache.dir().join(&log), kept.join(&log));
        }
    }
    drop(cache);
    let r = result?;
    if r.verdict.result != "ok" || r.stale_reads > 0 {
        return Err(failure!(
            "the history is {} with {} stale reads (counterexample in {})",
            if r.verdict.result == "ok" {
                "linearizable"
            } else {
                &r.verdict.result
            },
            r.stale_reads,
            a.out.join("nemesis.json").display()
        ));
    }
    Ok(r)
}

/// Applies `fault` (true) or heals it (false).
fn apply(
    fault: Fault,
    agent: usize,
    (n, tolerated): (usize, usize),
    cache: &mut InecCache,
    on: bool,
) -> Result<()> {
    let pid = cache.pids()[agent];
    match fault {
        Fault::Clients if on => harness::netns::cut_clients(agent)?,
        Fault::Clients => harness::netns::heal_clients(agent)?,
        Fault::Pause if on => harness::process::sigstop(pid),
        Fault::Pause => harness::process::sigcont(pid),
        Fault::Kill if on => cache.kill(agent)?,
        Fault::Kill => cache.restart(agent)?,
        _ => {
            for (from, to) in cuts(fault, agent, n, tolerated) {
                if on {
                    harness::netns::cut(from, to)?;
                } else {
                    harness::netns::heal(from, to)?;
                }
            }
        }
    }
    Ok(())
}

fn schedule(
    a: &NemesisArgs,
    n: usize,
    cache: &mut InecCache,
    checker: &Path,
) -> Result<NemesisResult> {
    let agent = a.stripe;
    let tolerated = a.code.parity_count();
    let mut registers = keys_of(n, agent, "reg", 3);
    registers.extend(keys_of(n, (agent + n / 2) % n, "other", 1));
    let counters = keys_of(n, agent, "ctr", 2);
    let stripe_keys: BTreeSet<String> = keys_of(n, agent, "reg", 3)
        .into_iter()
        .chain(counters.iter().cloned())
        .collect();
    let addrs: Vec<_> = (0..n).map(|i| cache.addrs()[(agent + i) % n]).collect();
    let cfg = HistoryConfig {
        addrs,
        clients: a.clients,
        registers: registers.clone(),
        counters: counters.clone(),
        value_len: a.value_bytes,
        timeout: Duration::from_millis(a.timeout_ms),
        think: Duration::from_millis(a.think_ms),
        seed: a.seed,
    };
    let hold = Duration::from_secs_f64(a.hold * a.lease_ms as f64 / 1000.0);
    let settle = Duration::from_secs_f64(a.settle_s);
    let rec = Recorder::start(&cfg);
    std::thread::sleep(settle);
    let mut windows = Vec::new();
    let total = a.rounds * a.faults.len();
    for round in 0..a.rounds {
        for &fault in &a.faults {
            outln!(
                "[{}/{total}] round {round}: {} on node {agent} for {:.1} s",
                windows.len() + 1,
                fault.name(),
                hold.as_secs_f64()
            )?;
            let start_ns = rec.now_ns();
            let applied = apply(fault, agent, (n, tolerated), cache, true);
            std::thread::sleep(hold);
            // Heal even when applying failed half-way (a cut made before the error).
            let healed = apply(fault, agent, (n, tolerated), cache, false);
            applied?;
            healed?;
            let heal_ns = rec.now_ns();
            std::thread::sleep(settle);
            if let Err(e) = cache.wait_recovered(Duration::from_secs(60)) {
                log::warn!("nemesis: the cache is not whole before the next fault: {e}");
            }
            windows.push((round, fault, start_ns, heal_ns, rec.now_ns()));
        }
    }
    let started = rec.started();
    let mut history = rec.finish();
    let all_keys: Vec<String> = registers.iter().chain(&counters).cloned().collect();
    for node in 0..n {
        load::history::read_all(
            &mut history,
            a.clients + node,
            cache.addrs()[node],
            &all_keys,
            a.value_bytes,
            Duration::from_millis(a.timeout_ms),
            started,
        );
    }
    let node_stats = cache
        .addrs()
        .iter()
        .map(|&addr| {
            let all = harness::ask(addr, "stats inec\r\n", Duration::from_secs(2))
                .map(|t| harness::parse_stats(&t))
                .unwrap_or_default();
            all.into_iter()
                .filter(|(k, _)| NODE_STATS.contains(&k.as_str()))
                .collect()
        })
        .collect();
    let path = a.out.join("history.json");
    std::fs::write(
        &path,
        serde_json::to_vec(&history).expect("a history serializes"),
    )
    .map_err(BenchError::io(format!("writing {}", path.display())))?;
    outln!(
        "checking {} operations for linearizability (porcupine)",
        history.ops.len()
    )?;
    let verdict = check(checker, &path)?;
    let windows: Vec<Window> = windows
        .into_iter()
        .map(|(round, fault, start, heal, end)| {
            measure(&history, &stripe_keys, round, fault, start, heal, end)
        })
        .collect();
    let count = |o: Outcome| history.ops.iter().filter(|op| op.outcome == o).count();
    let r = NemesisResult {
        coordinator: a.coordinator.clone().unwrap_or_else(|| "majority".into()),
        nodes: n,
        stripe: agent,
        lease_ms: a.lease_ms,
        ops: history.ops.len(),
        ok: count(Outcome::Ok),
        failed: count(Outcome::Fail),
        unknown: count(Outcome::Unknown),
        stale_reads: history.stale_reads(),
        incr_acked: history
            .ops
            .iter()
            .filter(|o| o.op == "incr" && o.outcome == Outcome::Ok && o.out != "NOT_FOUND")
            .count(),
        windows,
        verdict,
        node_stats,
    };
    let json = a.out.join("nemesis.json");
    std::fs::write(&json, serde_json::to_vec_pretty(&r).expect("serializes"))
        .map_err(BenchError::io(format!("writing {}", json.display())))?;
    print_table(&r)?;
    Ok(r)
}

/// A fault window's numbers, from the operations on the stripe's keys.
fn measure(
    h: &History,
    keys: &BTreeSet<String>,
    round: usize,
    fault: Fault,
    start: i64,
    heal: i64,
    end: i64,
) -> Window {
    let ops: Vec<&Op> = h
        .ops
        .iter()
        .filter(|o| keys.contains(&o.key) && o.call >= start && o.call < end)
        .collect();
    let mut ok_at: Vec<i64> = ops
        .iter()
        .filter(|o| o.outcome == Outcome::Ok)
        .map(|o| o.ret.min(end))
        .collect();
    ok_at.sort_unstable();
    let mut gap = 0;
    let mut last = start;
    for &t in ok_at.iter().chain([end].iter()) {
        gap = gap.max(t - last);
        last = last.max(t);
    }
    let failing_after = ops
        .iter()
        .filter(|o| o.outcome != Outcome::Ok)
        .map(|o| o.ret - heal)
        .max()
        .unwrap_or(0)
        .max(0);
    Window {
        round,
        fault,
        start_ns: start,
        heal_ns: heal,
        end_ns: end,
        ok: ops.iter().filter(|o| o.outcome == Outcome::Ok).count(),
        failed: ops.iter().filter(|o| o.outcome == Outcome::Fail).count(),
        unknown: ops.iter().filter(|o| o.outcome == Outcome::Unknown).count(),
        longest_gap_s: gap as f64 / 1e9,
        failing_after_heal_s: failing_after as f64 / 1e9,
    }
}

fn print_table(r: &NemesisResult) -> Result<()> {
    outln!(
        "\n| round | fault | ok | failed | unknown | longest gap (s) | failing after heal (s) |"
    )?;
    outln!("| ---: | --- | ---: | ---: | ---: | ---: | ---: |")?;
    for w in &r.windows {
        outln!(
            "| {} | {} | {} | {} | {} | {:.2} | {:.2} |",
            w.round,
            w.fault.name(),
            w.ok,
            w.failed,
            w.unknown,
            w.longest_gap_s,
            w.failing_after_heal_s
        )?;
    }
    outln!(
        "\n{} operations: {} ok, {} failed, {} unknown; {} acknowledged increments; \
         stale reads {}; linearizable: {}",
        r.ops,
        r.ok,
        r.failed,
        r.unknown,
        r.incr_acked,
        r.stale_reads,
        r.verdict.result
    )?;
    if let Some(ce) = &r.verdict.counterexample {
        outln!("counterexample: {ce}")?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_partition_cuts_what_it_names() {
        let n = 9;
        let set = |f| cuts(f, 0, n, 3).into_iter().collect::<BTreeSet<_>>();
        assert_eq!(set(Fault::AgentSuccessor), [(0, 1), (1, 0)].into());
        assert_eq!(set(Fault::AgentOneWay), [(0, 1)].into());
        assert_eq!(set(Fault::AgentAll).len(), 2 * (n - 1));
        // The agent keeps itself and 3 others (4 of 9), losing 5.
        let maj = set(Fault::Majority);
        let lost: BTreeSet<usize> = maj.iter().map(|&(x, y)| x.max(y)).collect();
        assert_eq!(lost, (1..=5).collect());
        // RS(6,3): nodes 1..=3 (as many as it tolerates) cut from the other 6.
        let min = set(Fault::Minority);
        assert_eq!(min.len(), 2 * 3 * 6);
        assert!(min
            .iter()
            .all(|&(x, y)| (1..=3).contains(&x) != (1..=3).contains(&y)));
        // Never more than a minority, whatever the code tolerates.
        assert_eq!(cuts(Fault::Minority, 0, n, 6).len(), 2 * 4 * 5);
        // Nodes 1..=4 (a minority, more than RS(6,3) tolerates) cut from the other 5.
        let over = set(Fault::MinorityOverTolerance);
        assert_eq!(over.len(), 2 * 4 * 5);
        assert!(over
            .iter()
            .all(|&(x, y)| (1..=4).contains(&x) != (1..=4).contains(&y)));
        assert!(set(Fault::Pause).is_empty());
        // The report's names are the flag's and the JSON's.
        for f in [Fault::AgentOneWay, Fault::Kill] {
            assert_eq!(serde_json::to_value(f).unwrap(), f.name().as_str());
        }
        assert_eq!(Fault::AgentOneWay.name(), "agent-one-way");
        // Aimed at another agent, wrapping around.
        assert_eq!(cuts(Fault::AgentSuccessor, 8, n, 3), vec![(8, 0), (0, 8)]);
    }

    fn op(key: &str, call: i64, ret: i64, outcome: Outcome) -> Op {
        Op {
            client: 0,
            key: key.into(),
            op: "get".into(),
            value: String::new(),
            expect: String::new(),
            call,
            ret,
            outcome,
            out: "miss".into(),
        }
    }

    #[test]
    fn a_window_measures_its_longest_gap_and_its_failures_after_the_heal() {
        let h = History {
            ops: vec![
                op("k", 100, 110, Outcome::Ok),
                op("k", 120, 400, Outcome::Fail),
                op("k", 410, 650, Outcome::Unknown),
                op("k", 660, 700, Outcome::Ok),
                // Another key and ops outside the window count for nothing.
                op("j", 300, 310, Outcome::Ok),
                op("k", 1000, 1010, Outcome::Fail),
            ],
        };
        let keys = ["k".to_string()].into();
        let w = measure(&h, &keys, 0, Fault::AgentAll, 100, 500, 800);
        assert_eq!((w.ok, w.failed, w.unknown), (2, 1, 1));
        assert!(
            (w.longest_gap_s - 590e-9).abs() < 1e-12,
            "{}",
            w.longest_gap_s
        );
        assert!((w.failing_after_heal_s - 150e-9).abs() < 1e-12);
    }
}
