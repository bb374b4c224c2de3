//! YCSB's core workloads on the cache load generator ([`crate`]), as a library:
//! the definitions ([`Workload`], [`WorkloadSpec`]), the request chooser ([`YcsbChooser`]) and a
//! driver that runs a load phase then run phases against memcached-protocol servers
//! ([`Ycsb`], [`run`]). `inec bench ycsb` is built on it.
//!
//! What follows YCSB's CoreWorkload (`recordcount`, `operationcount`, `readproportion`,
//! `updateproportion`, `insertproportion`, `readmodifywriteproportion`, `requestdistribution`):
//!
//! | workload | read | update | insert | read-modify-write | distribution |
//! |---|---:|---:|---:|---:|---|
//! | A | 0.50 | 0.50 | | | zipfian |
//! | B | 0.95 | 0.05 | | | zipfian |
//! | C | 1.00 | | | | zipfian |
//! | D | 0.95 | | 0.05 | | latest |
//! | F | 0.50 | | | 0.50 | zipfian |
//!
//! - `zipfian` is YCSB's scrambled zipfian (θ = 0.99 over 10^10 items, FNV-64-hashed onto the
//!   records, [`dist::ScrambledZipfian`]) over `recordcount` plus twice the inserts expected
//!   (`operationcount × insertproportion × 2`), redrawn while it names a key whose insert has not
//!   completed; `latest` is [`dist::Latest`] over the inserted keys; `uniform` is over the
//!   `recordcount` loaded records only (as YCSB's).
//! - Keys are named as YCSB names them (`user` + the FNV-64 hash of the insert sequence
//!   number, [`KeyNames::Ycsb`]); inserts continue the insert sequence (`recordcount`,
//!   `recordcount + 1`, …).
//! - A record is one value of `value_bytes` (YCSB's `fieldcount × fieldlength`), self-describing
//!   so that every read is checked ([`crate::check`]); an update and the write of a
//!   read-modify-write rewrite the whole value (YCSB's `writeallfields=true`).
//! - With `threads` client threads, key ids are partitioned (id `i` to thread `i % threads`,
//!   so a key's write history needs no lock) and each thread draws from the distribution over
//!   its own share: with one thread (the default) the draws are exactly YCSB's; with T threads
//!   the popularity profile is YCSB's over each share, so the whole key space has T equally hot
//!   keys at each rank.
//! - Degraded reads ([`DegradedReads`]): a fraction of the reads, their arrivals Weibull
//!   ([`dist::DegradedArrivals`]), sent in the form the system understands (inec:
//!   `mg <key> v Oinec-degrade-<pos>`).

pub mod dist;

use std::net::SocketAddr;
use std::time::Duration;

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use serde::Serialize;

use crate::{
    keys_of_thread, Choice, Chooser, DegradedForm, KeyNames, LoadAll, LoadError, OpKind, Phase,
    PhaseStats, Route, Session, Target,
};
use dist::{DegradedArrivals, Latest, ScrambledZipfian};

/// YCSB's core workloads this benchmark runs (E, scans, has no memcached counterpart).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
pub enum Workload {
    A,
    B,
    C,
    D,
    F,
}

/// `requestdistribution`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub enum RequestDistribution {
    Zipfian,
    Latest,
    Uniform,
}

/// The operation mix and key distribution of a workload.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct WorkloadSpec {
    pub read: f64,
    pub update: f64,
    pub insert: f64,
    pub read_modify_write: f64,
    pub distribution: RequestDistribution,
}

impl Workload {
    pub const ALL: [Workload; 5] = [
        Workload::A,
        Workload::B,
        Workload::C,
        Workload::D,
        Workload::F,
    ];

    /// YCSB's `workloads/workload{a,b,c,d,f}`.
    pub fn spec(self) -> WorkloadSpec {
        let (read, update, insert, rmw, distribution) = match self {
            Workload::A => (0.5, 0.5, 0.0, 0.0, RequestDistribution::Zipfian),
            Workload::B => (0.95, 0.05, 0.0, 0.0, RequestDistribution::Zipfian),
            Workload::C => (1.0, 0.0, 0.0, 0.0, RequestDistribution::Zipfian),
            Workload::D => (0.95, 0.0, 0.05, 0.0, RequestDistribution::Latest),
            Workload::F => (0.5, 0.0, 0.0, 0.5, RequestDistribution::Zipfian),
        };
        WorkloadSpec {
            read,
            update,
            insert,
            read_modify_write: rmw,
            distribution,
        }
    }

    pub fn letter(self) -> char {
        match self {
            Workload::A => 'A',
            Workload::B => 'B',
            Workload::C => 'C',
            Workload::D => 'D',
            Workload::F => 'F',
        }
    }

    /// `a`, `B`, `workloada`, … .
    pub fn parse(s: &str) -> Option<Workload> {
        let s = s.trim().to_ascii_lowercase();
        let s = s.strip_prefix("workload").unwrap_or(&s);
        Some(match s {
            "a" => Workload::A,
            "b" => Workload::B,
            "c" => Workload::C,
            "d" => Workload::D,
            "f" => Workload::F,
            _ => return None,
        })
    }
}

impl WorkloadSpec {
    /// The same mix with another request distribution.
    pub fn with_distribution(self, distribution: RequestDistribution) -> WorkloadSpec {
        WorkloadSpec {
            distribution,
            ..self
        }
    }
}

/// Degraded reads: `ratio` of the reads, arrivals Weibull of shape `shape`, asked as `form`.
#[derive(Clone, Debug, PartialEq)]
pub struct DegradedReads {
    pub ratio: f64,
    pub shape: f64,
    pub form: DegradedForm,
}

/// inec's forced degraded read of chunk position `pos` (docs/cache.md).
pub fn inec_degraded_form(pos: usize) -> DegradedForm {
    DegradedForm {
        prefix: "mg ".into(),
        suffix: format!(" v Oinec-degrade-{pos}"),
        meta: true,
    }
}

enum Keys {
    Zipfian(ScrambledZipfian),
    Latest(Latest),
    Uniform(u64),
}

/// Chooses YCSB requests for one client thread.
pub struct YcsbChooser {
    spec: WorkloadSpec,
    keys: Keys,
    /// Requests left (`None`: until the phase's duration ends).
    budget: Option<u64>,
    degraded: Option<DegradedArrivals>,
}

impl std::fmt::Debug for YcsbChooser {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("YcsbChooser")
            .field("spec", &self.spec)
            .field("budget", &self.budget)
            .finish_non_exhaustive()
    }
}

impl YcsbChooser {
    /// For a thread with `records` loaded keys, expecting `operations` requests (`None`: not
    /// known; used to size the zipfian's room for inserts, as YCSB does).
    pub fn new(
        spec: WorkloadSpec,
        records: u64,
        operations: Option<u64>,
        degraded: Option<(f64, f64)>,
        rng: &mut SmallRng,
    ) -> YcsbChooser {
        let keys = match spec.distribution {
            RequestDistribution::Zipfian => {
                let expected_new =
                    operations.map_or(records as f64, |o| o as f64) * spec.insert * 2.0;
                Keys::Zipfian(ScrambledZipfian::new(
                    (records + expected_new as u64).max(1),
                ))
            }
            RequestDistribution::Latest => Keys::Latest(Latest::new(records.saturating_sub(1))),
            RequestDistribution::Uniform => Keys::Uniform(records.max(1)),
        };
        YcsbChooser {
            spec,
            keys,
            budget: operations,
            degraded: degraded
                .filter(|&(r, _)| r > 0.0)
                .map(|(ratio, shape)| DegradedArrivals::new(ratio, shape, rng)),
        }
    }

    /// A key among the first `readable` (whose insert completed).
    fn key(&mut self, rng: &mut SmallRng, readable: usize) -> usize {
        let readable = readable as u64;
        for _ in 0..1000 {
            let k = match &mut self.keys {
                Keys::Zipfian(z) => z.next(rng),
                Keys::Latest(l) => l.next(rng, readable - 1),
                Keys::Uniform(n) => rng.gen_range(0..*n),
            };
            if k < readable {
                return k as usize;
            }
        }
        rng.gen_range(0..readable) as usize
    }
}

impl Chooser for YcsbChooser {
    fn next(&mut self, rng: &mut SmallRng, keys: usize) -> Option<Choice> {
        self.next_with(rng, keys, keys)
    }

    fn discard(&mut self) {
        if let Some(b) = &mut self.budget {
            *b += 1;
        }
    }

    fn next_with(&mut self, rng: &mut SmallRng, keys: usize, readable: usize) -> Option<Choice> {
        if let Some(b) = &mut self.budget {
            if *b == 0 {
                return None;
            }
            *b -= 1;
        }
        let s = &self.spec;
        let u: f64 = rng.gen::<f64>() * (s.read + s.update + s.insert + s.read_modify_write);
        let mut op = if u < s.read {
            OpKind::Get
        } else if u < s.read + s.update {
            OpKind::Set
        } else if u < s.read + s.update + s.insert {
            OpKind::Insert
        } else {
            OpKind::ReadModifyWrite
        };
        if op == OpKind::Insert {
            return Some(Choice { op, local: keys });
        }
        if readable == 0 {
            // Nothing inserted yet: YCSB would block; insert instead.
            return Some(Choice {
                op: OpKind::Insert,
                local: keys,
            });
        }
        let local = self.key(rng, readable);
        if op == OpKind::Get {
            if let Some(d) = &mut self.degraded {
                if d.on_read(rng) {
                    op = OpKind::DegradedGet;
                }
            }
        }
        Some(Choice { op, local })
    }
}

/// Everything a YCSB run needs.
#[derive(Clone, Debug)]
pub struct YcsbConfig {
    /// Server addresses (node-id order for inec: node s is the agent of Mem Stripe s).
    pub addrs: Vec<SocketAddr>,
    /// How keys find a server: [`Route::Hash`] is inec's placement (each key to its stripe's
    /// agent), [`Route::HashFailover`] the same around dead nodes, [`Route::Replicated`]
    /// client-side replication (memcached ×3).
    pub route: Route,
    pub workload: Workload,
    /// The mix and distribution (default: the workload's; change the distribution with
    /// [`WorkloadSpec::with_distribution`]).
    pub spec: WorkloadSpec,
    /// `recordcount`: keys loaded in the load phase.
    pub records: u64,
    /// `operationcount`: requests of the run phase (`None`: as many as `duration` allows).
    pub operations: Option<u64>,
    /// Bytes per value (at least the 24-byte checked header).
    pub value_bytes: usize,
    /// Client connections in all.
    pub connections: usize,
    /// Client threads (one `mio` event loop each).
    pub threads: usize,
    /// Target rate of the run phase, requests/s (open loop, latency from each request's
    /// intended start); `None`: closed loop.
    pub rate: Option<f64>,
    /// Longest run phase.
    pub duration: Duration,
    /// Start of the run phase checked but not recorded in the histograms.
    pub warmup: Duration,
    pub seed: u64,
    /// A request without a reply after this long is an error.
    pub timeout: Duration,
    pub degraded: Option<DegradedReads>,
    pub key_names: KeyNames,
}

impl YcsbConfig {
    /// Defaults: 10 000 records of 8 KiB, closed loop, 32 connections, one thread, 10 s run
    /// phase with 1 s warm-up, 5 s timeout, no degraded reads, YCSB key names.
    pub fn new(addrs: Vec<SocketAddr>, route: Route, workload: Workload) -> YcsbConfig {
        YcsbConfig {
            addrs,
            route,
            workload,
            spec: workload.spec(),
            records: 10_000,
            operations: None,
            value_bytes: 8192,
            connections: 32,
            threads: 1,
            rate: None,
            duration: Duration::from_secs(10),
            warmup: Duration::from_secs(1),
            seed: 0x5EED_0C5B,
            timeout: Duration::from_secs(5),
            degraded: None,
            key_names: KeyNames::Ycsb,
        }
    }
}

/// A load phase and a run phase.
#[derive(Clone, Debug)]
pub struct YcsbResult {
    pub load: PhaseStats,
    pub run: PhaseStats,
}

/// A YCSB client: its keys and their write histories across phases.
#[derive(Debug)]
pub struct Ycsb {
    pub config: YcsbConfig,
    session: Session,
    rng: SmallRng,
}

impl Ycsb {
    pub fn new(config: YcsbConfig) -> Result<Ycsb, LoadError> {
        let target = Target {
            addrs: config.addrs.clone(),
            route: config.route,
            connections: config.connections.max(1),
            threads: config.threads.max(1),
            value_bytes: config.value_bytes,
            keys: config.key_names.clone(),
            timeout: config.timeout,
            degraded: config.degraded.as_ref().map(|d| d.form.clone()),
        };
        let session = Session::new(target, config.records, config.seed)?;
        let rng = SmallRng::seed_from_u64(config.seed ^ 0xD1B5_4A32_D192_ED03);
        Ok(Ycsb {
            config,
            session,
            rng,
        })
    }

    /// The load phase: every record written once (closed loop, all connections).
    pub fn load(&mut self) -> Result<PhaseStats, LoadError> {
        let phase = Phase {
            duration: None,
            rate: None,
            warmup: Duration::ZERO,
            drain: self.config.timeout + Duration::from_secs(1),
        };
        self.session.run(&phase, &|_, n| Box::new(LoadAll::new(n)))
    }

    /// A run phase of the configured workload, `operations` requests in all (`None`: until
    /// `duration`).
    pub fn run_phase(
        &mut self,
        duration: Duration,
        operations: Option<u64>,
    ) -> Result<PhaseStats, LoadError> {
        let cfg = &self.config;
        let threads = self.session.target.threads;
        let phase = Phase {
            duration: Some(duration),
            rate: cfg.rate,
            warmup: cfg.warmup.min(duration / 2),
            drain: cfg.timeout + Duration::from_secs(1),
        };
        let seeds: Vec<u64> = (0..threads).map(|_| self.rng.gen()).collect();
        let spec = cfg.spec;
        let records = cfg.records;
        let degraded = cfg.degraded.as_ref().map(|d| (d.ratio, d.shape));
        let make = move |t: usize, _keys: usize| -> Box<dyn Chooser> {
            let mut rng = SmallRng::seed_from_u64(seeds[t]);
            let share =
                operations.map(|o| o / threads as u64 + u64::from((t as u64) < o % threads as u64));
            Box::new(YcsbChooser::new(
                spec,
                keys_of_thread(records, t, threads) as u64,
                share,
                degraded,
                &mut rng,
            ))
        };
        self.session.run(&phase, &make)
    }

    /// The run phase as configured.
    pub fn run(&mut self) -> Result<PhaseStats, LoadError> {
        self.run_phase(self.config.duration, self.config.operations)
    }

    /// Reads every key written so far once (closed loop), each read checked: after a run with
    /// failures, this verifies every value.
    pub fn verify(&mut self) -> Result<PhaseStats, LoadError> {
        let phase = Phase {
            duration: None,
            rate: None,
            warmup: Duration::ZERO,
            drain: self.config.timeout + Duration::from_secs(1),
        };
        self.session.run(&phase, &|_, n| Box::new(ReadAll::new(n)))
    }

    /// Keys written so far (records and inserts).
    pub fn keys(&self) -> u64 {
        self.session.keys.iter().map(|k| k.len() as u64).sum()
    }
}

/// Every key of the thread once, as gets (a verification pass).
#[derive(Debug)]
pub struct ReadAll {
    next: usize,
    end: usize,
}

impl ReadAll {
    /// The first `keys` keys of the thread.
    pub fn new(keys: usize) -> ReadAll {
        ReadAll { next: 0, end: keys }
    }
}

impl Chooser for ReadAll {
    fn next(&mut self, _rng: &mut SmallRng, _keys: usize) -> Option<Choice> {
        (self.next < self.end).then(|| {
            self.next += 1;
            Choice {
                op: OpKind::Get,
                local: self.next - 1,
            }
        })
    }
}

/// Load phase then run phase.
pub fn run(config: YcsbConfig) -> Result<YcsbResult, LoadError> {
    let mut y = Ycsb::new(config)?;
    let load = y.load()?;
    let run = y.run()?;
    Ok(YcsbResult { load, run })
}

/// Percentiles of one kind of request, µs.
#[derive(Clone, Copy, Debug, Serialize)]
pub struct OpSummary {
    pub ok: u64,
    pub errors: u64,
    pub ops_s: f64,
    pub p50_us: f64,
    pub p95_us: f64,
    pub p99_us: f64,
    pub p999_us: f64,
    pub max_us: f64,
}

/// One [`crate::TIMELINE_STEP`] of a phase.
#[derive(Clone, Copy, Debug, Serialize)]
pub struct TimelinePoint {
    /// Seconds from the phase's start to the interval's start.
    pub t_s: f64,
    pub ops_s: f64,
    pub degraded_ops_s: f64,
    pub errors: u64,
    pub p50_us: f64,
    pub p99_us: f64,
}

/// A phase in numbers (serialisable).
#[derive(Clone, Debug, Serialize)]
pub struct Summary {
    pub throughput_ops_s: f64,
    /// By YCSB's names: `read`, `update`, `insert`, `rmw`, `degraded_read`.
    pub ops: std::collections::BTreeMap<String, OpSummary>,
    pub check: crate::CheckCounts,
    /// Wrong values (stale, unknown, wrong key, bad length, torn) plus missing ones.
    pub wrong: u64,
    pub errors: std::collections::BTreeMap<String, u64>,
    pub unfinished: u64,
    pub timeline: Vec<TimelinePoint>,
}

/// YCSB's name of a request kind.
pub fn op_name(k: OpKind) -> &'static str {
    match k {
        OpKind::Get => "read",
        OpKind::Set => "update",
        OpKind::Insert => "insert",
        OpKind::ReadModifyWrite => "rmw",
        OpKind::DegradedGet => "degraded_read",
    }
}

/// Sums up a phase.
pub fn summary(st: &PhaseStats) -> Summary {
    let ops = st
        .ops
        .iter()
        .map(|(k, s)| {
            let q = |p: f64| s.hist.value_at_quantile(p) as f64 / 1e3;
            let ops_s = if st.recorded_secs > 0.0 {
                s.ok as f64 / st.recorded_secs
            } else {
                0.0
            };
            (
                op_name(*k).to_string(),
                OpSummary {
                    ok: s.ok,
                    errors: s.errors,
                    ops_s,
                    p50_us: q(0.5),
                    p95_us: q(0.95),
                    p99_us: q(0.99),
                    p999_us: q(0.999),
                    max_us: s.hist.max() as f64 / 1e3,
                },
            )
        })
        .collect();
    let step = crate::TIMELINE_STEP.as_secs_f64();
    let timeline = st
        .timeline
        .iter()
        .enumerate()
        .map(|(i, iv)| TimelinePoint {
            t_s: i as f64 * step,
            ops_s: iv.ok as f64 / step,
            degraded_ops_s: iv.degraded_ok as f64 / step,
            errors: iv.errors,
            p50_us: iv.hist.value_at_quantile(0.5) as f64 / 1e3,
            p99_us: iv.hist.value_at_quantile(0.99) as f64 / 1e3,
        })
        .collect();
    Summary {
        throughput_ops_s: st.throughput(),
        ops,
        check: st.check,
        wrong: st.check.wrong() + st.check.missing,
        errors: st.errors.clone(),
        unfinished: st.unfinished,
        timeline,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn draw(spec: WorkloadSpec, records: u64, n: usize, seed: u64) -> Vec<Choice> {
        let mut rng = SmallRng::seed_from_u64(seed);
        let mut c = YcsbChooser::new(spec, records, Some(n as u64), Some((0.01, 0.75)), &mut rng);
        let mut keys = records as usize;
        let mut out = Vec::new();
        while let Some(ch) = c.next_with(&mut rng, keys, keys) {
            if ch.op == OpKind::Insert {
                assert_eq!(ch.local, keys, "inserts continue the sequence");
                keys += 1;
            }
            out.push(ch);
        }
        out
    }

    #[test]
    fn mixes_follow_the_definitions() {
        let n = 200_000;
        for w in Workload::ALL {
            let s = w.spec();
            let total = s.read + s.update + s.insert + s.read_modify_write;
            assert!((total - 1.0).abs() < 1e-12, "{w:?}");
            let ch = draw(s, 10_000, n, 7);
            assert_eq!(ch.len(), n, "operationcount is the budget");
            let frac = |f: &dyn Fn(OpKind) -> bool| {
                ch.iter().filter(|c| f(c.op)).count() as f64 / n as f64
            };
            let read = frac(&|o| matches!(o, OpKind::Get | OpKind::DegradedGet));
            let degraded = frac(&|o| o == OpKind::DegradedGet);
            for (name, got, want) in [
                ("read", read, s.read),
                ("update", frac(&|o| o == OpKind::Set), s.update),
                ("insert", frac(&|o| o == OpKind::Insert), s.insert),
                (
                    "rmw",
                    frac(&|o| o == OpKind::ReadModifyWrite),
                    s.read_modify_write,
                ),
            ] {
                assert!((got - want).abs() < 0.005, "{w:?} {name}: {got} vs {want}");
            }
            // 1% of the reads degraded (Weibull arrivals are bursty: a wider tolerance).
            assert!(
                (degraded / read.max(1e-9) - 0.01).abs() < 0.002 || s.read == 0.0,
                "{w:?} degraded share {}",
                degraded / read
            );
        }
        assert_eq!(Workload::parse("workloadA"), Some(Workload::A));
        assert_eq!(Workload::parse("f"), Some(Workload::F));
        assert_eq!(Workload::parse("e"), None);
    }

    #[test]
    fn zipfian_requests_are_skewed_and_scrambled() {
        let records = 1000;
        let ch = draw(Workload::C.spec(), records, 300_000, 8);
        let mut count = vec![0u64; records as usize];
        for c in &ch {
            count[c.local] += 1;
        }
        let mut order: Vec<usize> = (0..records as usize).collect();
        order.sort_by_key(|&i| std::cmp::Reverse(count[i]));
        // The hottest record gets at least item 0's share of the 10^10-item zipfian
        // (1/ζ ≈ 3.8%), far above uniform (0.1%).
        let top = count[order[0]] as f64 / ch.len() as f64;
        assert!(
            (1.0 / dist::SCRAMBLED_ZETAN - 0.002..0.08).contains(&top),
            "top share {top}"
        );
        // Scrambled: the ten hottest records are not neighbours.
        let mut hot: Vec<usize> = order[..10].to_vec();
        hot.sort_unstable();
        assert!(hot[9] - hot[0] > 100, "{hot:?}");
        // The hottest tenth of the records: the 100 most popular zipfian items' mass
        // (Σ_{i≤100} i^-0.99 / ζ ≈ 0.19) plus their uniform share of the scrambled tail, ≈ 0.27;
        // uniform draws would give about 0.11.
        let head: u64 = order[..100].iter().map(|&i| count[i]).sum();
        let head = head as f64 / ch.len() as f64;
        assert!((0.24..0.35).contains(&head), "{head}");
        // Deterministic.
        assert_eq!(draw(Workload::C.spec(), records, 1000, 8), ch[..1000]);
    }

    #[test]
    fn uniform_requests_are_flat() {
        let records = 100;
        let spec = Workload::C
            .spec()
            .with_distribution(RequestDistribution::Uniform);
        let n = 200_000;
        let ch = draw(spec, records, n, 9);
        let mut count = vec![0u64; records as usize];
        for c in &ch {
            count[c.local] += 1;
        }
        let want = n as f64 / records as f64;
        for (i, &c) in count.iter().enumerate() {
            assert!((c as f64 - want).abs() < 0.1 * want, "record {i}: {c}");
        }
    }

    #[test]
    fn latest_reads_the_newest_inserts() {
        // Workload D: reads go mostly to the latest inserted keys, never beyond them.
        let records = 1000;
        let ch = draw(Workload::D.spec(), records, 100_000, 10);
        let mut keys = records as usize;
        let mut recent = 0usize;
        let mut reads = 0usize;
        for c in &ch {
            match c.op {
                OpKind::Insert => keys += 1,
                _ => {
                    assert!(c.local < keys);
                    reads += 1;
                    if keys - c.local <= 10 {
                        recent += 1;
                    }
                }
            }
        }
        // P(rank < 10) of a zipfian over ~1000-6000 items: Σ_{i≤10} i^-0.99 / ζ ≈ 0.3.
        let share = recent as f64 / reads as f64;
        assert!((0.25..0.45).contains(&share), "{share}");
        assert!(
            keys > records as usize + 4000,
            "inserts: {}",
            keys - records as usize
        );
    }

    #[test]
    fn only_completed_inserts_are_read() {
        let mut rng = SmallRng::seed_from_u64(11);
        for w in [Workload::D, Workload::A] {
            let mut c = YcsbChooser::new(w.spec(), 100, None, None, &mut rng);
            for _ in 0..10_000 {
                let ch = c.next_with(&mut rng, 150, 100).unwrap();
                if ch.op != OpKind::Insert {
                    assert!(ch.local < 100, "{w:?}: {}", ch.local);
                }
            }
        }
    }
}
