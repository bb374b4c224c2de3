//! The load generator: many memcached text-protocol connections driven by a few threads, each
//! thread one `mio` event loop (no thread per connection), every reply parsed with
//! [`proto::parse_reply`] and every value read checked ([`crate::check`]).
//!
//! - **Keys** belong to threads (key id `i` to thread `i % threads`), so a key's write history
//!   ([`KeyState`]) lives in one thread and needs no lock. At most one write per key is in
//!   flight; a write drawn for a key being written becomes a read of it.
//! - **Routing**: [`Route::Hash`] sends a key to address `fnv1a_64(key) % addresses` (as a stock
//!   client with several servers does); [`Route::Spread`] spreads the connections over the
//!   addresses and sends any key on any connection (for servers where any node accepts any key).
//! - **Loops**: without a target rate, closed loop — one request per connection, latency from
//!   the moment it is written to the socket. With a rate, open loop — request `i` of a thread is
//!   due at `start + i / rate`; it waits in a queue when no connection is free, and its latency
//!   is counted from when it was due, so a slow server's queueing shows in the percentiles
//!   (no coordinated omission).
//! - **Failures**: a connection that breaks or a request that times out is counted as an error
//!   with its reason, the connection is opened again, and the run goes on.

use std::collections::{BTreeMap, VecDeque};
use std::io::{ErrorKind, Read, Write};
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use cache::cluster::placement::fnv1a_64;
use hdrhistogram::Histogram;
use mio::net::TcpStream;
use mio::{Events, Interest, Poll, Token};
use proto::{parse_reply, ReplyParse, ServerReply};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

use crate::check::{self, KeyState, ReadOutcome};

/// Kinds of requests.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum OpKind {
    /// `get` of one key.
    Get,
    /// `set` of an existing key.
    Set,
    /// `set` of a new key (YCSB insert).
    Insert,
    /// `get` then `set` of the same key on the same connection (YCSB read-modify-write).
    ReadModifyWrite,
    /// A `get` forced to take the degraded path (see [`DegradedForm`]).
    DegradedGet,
}

impl OpKind {
    pub const ALL: [OpKind; 5] = [
        OpKind::Get,
        OpKind::Set,
        OpKind::Insert,
        OpKind::ReadModifyWrite,
        OpKind::DegradedGet,
    ];

    pub fn name(self) -> &'static str {
        match self {
            OpKind::Get => "get",
            OpKind::Set => "set",
            OpKind::Insert => "insert",
            OpKind::ReadModifyWrite => "rmw",
            OpKind::DegradedGet => "degraded_get",
        }
    }

    fn writes(self) -> bool {
        matches!(self, OpKind::Set | OpKind::Insert | OpKind::ReadModifyWrite)
    }
}

/// How keys are named.
#[derive(Clone, Debug)]
pub enum KeyNames {
    /// `<prefix><id>`.
    Prefix(String),
    /// As YCSB's CoreWorkload names them: `user` and the decimal FNV-64 hash of the insert
    /// sequence number (YCSB's `Utils.fnvhash64`, absolute value).
    Ycsb,
}

/// YCSB's `Utils.fnvhash64`: FNV-1a, 64 bits (the hash that places keys,
/// [`cache::cluster::placement::fnv1a_64`]) over the eight little-end-first bytes of the number, then
/// `Math.abs`.
pub fn ycsb_fnvhash64(val: u64) -> i64 {
    // Java's Math.abs leaves Long.MIN_VALUE as it is.
    (fnv1a_64(&val.to_le_bytes()) as i64).wrapping_abs()
}

impl KeyNames {
    pub fn append(&self, out: &mut Vec<u8>, id: u64) {
        match self {
            KeyNames::Prefix(p) => {
                out.extend_from_slice(p.as_bytes());
                let _ = write!(out, "{id}");
            }
            KeyNames::Ycsb => {
                let _ = write!(out, "user{}", ycsb_fnvhash64(id));
            }
        }
    }

    pub fn name(&self, id: u64) -> Vec<u8> {
        let mut v = Vec::new();
        self.append(&mut v, id);
        v
    }
}

/// How requests find a server.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Route {
    /// A key goes to `addrs[fnv1a_64(key) % addrs.len()]`.
    Hash,
    /// Connections are spread over the addresses; any key goes on any connection.
    Spread,
    /// As [`Route::Hash`], but while the key's address is down (its connections fail) the
    /// request goes to the next address in order, and a request whose connection broke is sent
    /// again there: for servers where any node accepts any key (inec's cache forwards it to the
    /// stripe's agent), so a killed node is routed around.
    HashFailover,
    /// Client-side replication over `r` addresses: the key's replicas are the addresses
    /// `h, h+1, …, h+r-1` (mod the count; `h = fnv1a_64(key) % addresses`). A write goes to
    /// every replica and is acknowledged when at least one stored it (a replica's failure is
    /// counted under `replica: …` in the errors, not as a failed request); a read goes to the
    /// first replica not known to be down and, on a miss or an error, to the next one.
    Replicated(usize),
}

impl Route {
    /// How many addresses a key may be sent to, in order (first: its own).
    fn fanout(self, addrs: usize) -> usize {
        match self {
            Route::Hash | Route::Spread => 1,
            Route::HashFailover => addrs,
            Route::Replicated(r) => r.clamp(1, addrs),
        }
    }
}

/// How a degraded get is asked for: the request line is `<prefix><key><suffix>\r\n`, and
/// the reply is read as a `get` reply (`VALUE … END`) when `meta` is false, or as a meta reply
/// (`VA <size> …` then the data, or `EN`) when true.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DegradedForm {
    pub prefix: String,
    pub suffix: String,
    pub meta: bool,
}

/// What the generator connects to and how.
#[derive(Clone, Debug)]
pub struct Target {
    pub addrs: Vec<SocketAddr>,
    pub route: Route,
    /// Connections in all (at least one per thread and address with [`Route::Hash`]).
    pub connections: usize,
    pub threads: usize,
    pub value_bytes: usize,
    pub keys: KeyNames,
    /// A request without a reply after this long is an error (`timeout`).
    pub timeout: Duration,
    pub degraded: Option<DegradedForm>,
}

/// The next request a thread wants.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Choice {
    pub op: OpKind,
    /// Index into the thread's keys; for [`OpKind::Insert`] it is ignored (a new key is made).
    pub local: usize,
}

/// Chooses requests for one thread.
pub trait Chooser: Send {
    /// The next request, or `None` when this thread's budget of requests is spent. `keys` is
    /// the number of keys this thread has (inserts add to it).
    fn next(&mut self, rng: &mut SmallRng, keys: usize) -> Option<Choice>;

    /// As [`Chooser::next`], also given `readable`: how many of the thread's first keys have
    /// had their first write completed (acknowledged or failed), in order, as YCSB's
    /// acknowledged insert counter. The driver calls this one; the default ignores it.
    fn next_with(&mut self, rng: &mut SmallRng, keys: usize, readable: usize) -> Option<Choice> {
        let _ = readable;
        self.next(rng, keys)
    }

    /// The last choice was drawn but not used (the driver redraws a write of a key whose write
    /// is in flight): a chooser with a budget of requests takes it back. Default: nothing.
    fn discard(&mut self) {}
}

/// Uniform keys, `get_fraction` gets (of which `degraded_fraction` forced degraded), the rest
/// sets.
#[derive(Debug)]
pub struct UniformMix {
    pub get_fraction: f64,
    pub degraded_fraction: f64,
}

impl Chooser for UniformMix {
    fn next(&mut self, rng: &mut SmallRng, keys: usize) -> Option<Choice> {
        if keys == 0 {
            return None;
        }
        let local = rng.gen_range(0..keys);
        let op = if rng.gen::<f64>() < self.get_fraction {
            if self.degraded_fraction > 0.0 && rng.gen::<f64>() < self.degraded_fraction {
                OpKind::DegradedGet
            } else {
                OpKind::Get
            }
        } else {
            OpKind::Set
        };
        Some(Choice { op, local })
    }
}

/// Key ids of thread `t` of `threads`: `t, t + threads, t + 2·threads, …`.
pub fn key_id(local: usize, thread: usize, threads: usize) -> u64 {
    (local * threads + thread) as u64
}

/// How many of `keys` key ids belong to thread `t`.
pub fn keys_of_thread(keys: u64, thread: usize, threads: usize) -> usize {
    let (keys, t, n) = (keys as usize, thread, threads);
    if keys <= t {
        0
    } else {
        (keys - t).div_ceil(n)
    }
}

/// Every key of the thread once, in order, as sets (the load phase).
#[derive(Debug)]
pub struct LoadAll {
    next: usize,
    end: usize,
}

impl LoadAll {
    pub fn new(keys: usize) -> LoadAll {
        LoadAll { next: 0, end: keys }
    }
}

impl Chooser for LoadAll {
    fn next(&mut self, _rng: &mut SmallRng, _keys: usize) -> Option<Choice> {
        (self.next < self.end).then(|| {
            self.next += 1;
            Choice {
                op: OpKind::Set,
                local: self.next - 1,
            }
        })
    }
}

/// When a phase stops issuing requests.
#[derive(Clone, Debug)]
pub struct Phase {
    /// Stop issuing after this long.
    pub duration: Option<Duration>,
    /// Requests per second over all threads (open loop); `None`: closed loop.
    pub rate: Option<f64>,
    /// Requests due before this much time into the phase are checked but not recorded.
    pub warmup: Duration,
    /// After issuing stops, how long to wait for the requests still out.
    pub drain: Duration,
}

/// Width of a [`PhaseStats::timeline`] interval.
pub const TIMELINE_STEP: Duration = Duration::from_secs(1);

/// One interval of a phase's timeline: what completed in it.
#[derive(Clone, Debug)]
pub struct Interval {
    /// Requests that succeeded (recorded or not: the warm-up is in the timeline too).
    pub ok: u64,
    /// Of them, forced-degraded reads.
    pub degraded_ok: u64,
    /// Requests that failed.
    pub errors: u64,
    /// Latency of the successful requests of every kind, ns (2 significant digits).
    pub hist: Histogram<u64>,
}

impl Default for Interval {
    fn default() -> Self {
        Interval {
            ok: 0,
            degraded_ok: 0,
            errors: 0,
            hist: Histogram::new_with_bounds(1_000, 600_000_000_000, 2).expect("valid bounds"),
        }
    }
}

/// Latencies and counts of one kind of request.
#[derive(Clone, Debug)]
pub struct OpStats {
    /// Nanoseconds, of the recorded requests that succeeded.
    pub hist: Histogram<u64>,
    /// Recorded requests that succeeded.
    pub ok: u64,
    /// Requests that failed (error reply, timeout, broken connection), recorded or not.
    pub errors: u64,
}

impl Default for OpStats {
    fn default() -> Self {
        OpStats {
            hist: Histogram::new_with_bounds(1, 600_000_000_000, 3).expect("valid bounds"),
            ok: 0,
            errors: 0,
        }
    }
}

/// What the checker saw. `wrong` counts everything that must never happen.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct CheckCounts {
    /// Reads whose value was the last acknowledged one or one being written.
    pub ok: u64,
    /// Misses of keys never written.
    pub miss_never_written: u64,
    /// Misses of keys written (and acknowledged) before the read was sent.
    pub missing: u64,
    pub stale: u64,
    pub unknown_counter: u64,
    pub wrong_key: u64,
    pub bad_length: u64,
    pub torn: u64,
}

impl CheckCounts {
    fn add(&mut self, o: ReadOutcome) {
        match o {
            ReadOutcome::Ok => self.ok += 1,
            ReadOutcome::MissNeverWritten => self.miss_never_written += 1,
            ReadOutcome::Missing => self.missing += 1,
            ReadOutcome::Stale => self.stale += 1,
            ReadOutcome::Unknown => self.unknown_counter += 1,
            ReadOutcome::WrongKey => self.wrong_key += 1,
            ReadOutcome::BadLength => self.bad_length += 1,
            ReadOutcome::Torn => self.torn += 1,
        }
    }

    fn merge(&mut self, o: &CheckCounts) {
        self.ok += o.ok;
        self.miss_never_written += o.miss_never_written;
        self.missing += o.missing;
        self.stale += o.stale;
        self.unknown_counter += o.unknown_counter;
        self.wrong_key += o.wrong_key;
        self.bad_length += o.bad_length;
        self.torn += o.torn;
    }

    /// Values that must never be returned: stale, unknown, of another key, cut, torn.
    pub fn wrong(&self) -> u64 {
        self.stale + self.unknown_counter + self.wrong_key + self.bad_length + self.torn
    }
}

/// The result of a phase over all threads.
#[derive(Clone, Debug, Default)]
pub struct PhaseStats {
    pub ops: BTreeMap<OpKind, OpStats>,
    pub check: CheckCounts,
    /// Error reasons (the server's line, `timeout`, `connection …`) and how often.
    pub errors: BTreeMap<String, u64>,
    /// Requests issued but neither answered nor failed when the drain time ran out.
    pub unfinished: u64,
    pub reconnects: u64,
    /// From the end of the warm-up to the last recorded completion.
    pub recorded_secs: f64,
    /// Connections actually open at the start.
    pub connections: usize,
    /// Per [`TIMELINE_STEP`] from [`PhaseStats::started`], by completion time.
    pub timeline: Vec<Interval>,
    /// When the phase started issuing requests.
    pub started: Option<Instant>,
}

impl PhaseStats {
    fn op(&mut self, k: OpKind) -> &mut OpStats {
        self.ops.entry(k).or_default()
    }

    /// Adds the counts, histograms and timeline of `o`, another thread's share of the same
    /// phase (the recorded time is the longer of the two).
    pub fn merge(&mut self, o: PhaseStats) {
        for (k, s) in o.ops {
            let mine = self.op(k);
            mine.hist.add(&s.hist).expect("same bounds");
            mine.ok += s.ok;
            mine.errors += s.errors;
        }
        self.check.merge(&o.check);
        for (r, n) in o.errors {
            *self.errors.entry(r).or_default() += n;
        }
        self.unfinished += o.unfinished;
        self.reconnects += o.reconnects;
        self.recorded_secs = self.recorded_secs.max(o.recorded_secs);
        self.connections += o.connections;
        if self.timeline.len() < o.timeline.len() {
            self.timeline
                .resize_with(o.timeline.len(), Interval::default);
        }
        for (mine, x) in self.timeline.iter_mut().zip(o.timeline) {
            mine.ok += x.ok;
            mine.degraded_ok += x.degraded_ok;
            mine.errors += x.errors;
            mine.hist.add(&x.hist).expect("same bounds");
        }
        self.started = match (self.started, o.started) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
    }

    /// Recorded successful requests of every kind per second.
    pub fn throughput(&self) -> f64 {
        let ok: u64 = self.ops.values().map(|s| s.ok).sum();
        if self.recorded_secs > 0.0 {
            ok as f64 / self.recorded_secs
        } else {
            0.0
        }
    }

    pub fn total_errors(&self) -> u64 {
        self.ops.values().map(|s| s.errors).sum()
    }
}

/// Errors of the generator itself (not of the server, which are counted).
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    #[error("no address to connect to")]
    NoAddress,
    #[error("connecting to {addr}: {source}")]
    Connect {
        addr: SocketAddr,
        source: std::io::Error,
    },
    #[error("event loop: {0}")]
    Poll(std::io::Error),
    #[error("a degraded get was chosen but no degraded form is configured")]
    NoDegradedForm,
    #[error("load thread panicked")]
    Panicked,
}

/// The keys and their histories, kept across phases (load, then run).
#[derive(Debug)]
pub struct Session {
    pub target: Target,
    /// Per thread, its keys' states.
    pub keys: Vec<Vec<KeyState>>,
    seed: u64,
}

impl Session {
    /// A session over `keys` keys, none written yet.
    pub fn new(target: Target, keys: u64, seed: u64) -> Result<Session, LoadError> {
        if target.addrs.is_empty() {
            return Err(LoadError::NoAddress);
        }
        let threads = target.threads.max(1);
        let keys = (0..threads)
            .map(|t| vec![KeyState::default(); keys_of_thread(keys, t, threads)])
            .collect();
        Ok(Session {
            target: Target { threads, ..target },
            keys,
            seed,
        })
    }

    /// Runs a phase: each thread asks its chooser (`make(thread, keys of the thread)`) for
    /// requests until the chooser or the phase's duration ends, then waits for the replies.
    pub fn run(
        &mut self,
        phase: &Phase,
        make: &(dyn Fn(usize, usize) -> Box<dyn Chooser> + Sync),
    ) -> Result<PhaseStats, LoadError> {
        self.seed = self.seed.wrapping_add(0x9E37_79B9);
        let threads = self.target.threads;
        let target = &self.target;
        let seed = self.seed;
        let start = Instant::now() + Duration::from_millis(20);
        let results: Vec<Result<PhaseStats, LoadError>> = std::thread::scope(|s| {
            let handles: Vec<_> = self
                .keys
                .iter_mut()
                .enumerate()
                .map(|(t, keys)| {
                    let chooser = make(t, keys.len());
                    s.spawn(move || {
                        let mut w = Worker::new(target, t, keys, chooser, phase, start, seed)?;
                        w.run()?;
                        Ok(w.stats)
                    })
                })
                .collect();
            handles
                .into_iter()
                .map(|h| h.join().unwrap_or(Err(LoadError::Panicked)))
                .collect()
        });
        let _ = threads;
        let mut total = PhaseStats::default();
        for r in results {
            total.merge(r?);
        }
        total.started = Some(start);
        Ok(total)
    }
}

/// One request.
#[derive(Clone, Copy, Debug)]
struct Req {
    op: OpKind,
    local: usize,
    /// When it was due (open loop) or generated (closed loop).
    due: Instant,
    /// Counter of the write (sets, inserts, the write of a read-modify-write).
    counter: u64,
    /// The last acknowledged counter when the read was sent.
    floor: u64,
    sent: Instant,
    /// Read-modify-write: the read is done, the write is out.
    second: bool,
    /// Which of the key's addresses in route order it goes to ([`Route::fanout`]).
    attempt: u8,
    /// A replica's part of a replicated write: the index of its [`Multi`].
    multi: Option<u32>,
}

/// A write sent to several replicas ([`Route::Replicated`]): done when every part is.
#[derive(Clone, Debug)]
struct Multi {
    parent: Req,
    remaining: usize,
    stored: usize,
    error: Option<String>,
}

struct Conn {
    stream: Option<TcpStream>,
    addr: SocketAddr,
    group: usize,
    out: Vec<u8>,
    out_pos: usize,
    /// Bytes read and not yet parsed are `inbuf[in_start..in_end]`; the buffer's length is
    /// only what was ever zeroed (it grows, it is not cleared), so a read zeroes nothing.
    inbuf: Vec<u8>,
    in_start: usize,
    in_end: usize,
    current: Option<Req>,
    /// A get's value seen, waiting for `END`.
    seen: Option<ReadOutcome>,
    /// Reconnect not before this time (after a failed connect).
    retry_at: Option<Instant>,
}

struct Group {
    free: Vec<usize>,
    queue: VecDeque<Req>,
    /// Its connections failed: avoided by routes with failover until this time, then probed.
    down_until: Option<Instant>,
}

struct Worker<'a> {
    target: &'a Target,
    thread: usize,
    keys: &'a mut Vec<KeyState>,
    chooser: Box<dyn Chooser>,
    phase: &'a Phase,
    poll: Poll,
    conns: Vec<Conn>,
    groups: Vec<Group>,
    rng: SmallRng,
    stats: PhaseStats,
    start: Instant,
    record_from: Instant,
    last_recorded: Option<Instant>,
    outstanding: usize,
    issued: u64,
    exhausted: bool,
    line: Vec<u8>,
    multis: Vec<Option<Multi>>,
    free_multis: Vec<u32>,
    /// Keys `0..readable` have had their first write completed.
    readable: usize,
}

const READ_CHUNK: usize = 64 << 10;
/// How long a group whose connections failed is avoided before it is tried again.
const DOWN_PROBE: Duration = Duration::from_millis(200);

impl<'a> Worker<'a> {
    fn new(
        target: &'a Target,
        thread: usize,
        keys: &'a mut Vec<KeyState>,
        chooser: Box<dyn Chooser>,
        phase: &'a Phase,
        start: Instant,
        seed: u64,
    ) -> Result<Worker<'a>, LoadError> {
        let poll = Poll::new().map_err(LoadError::Poll)?;
        let n_addr = target.addrs.len();
        let per_thread = (target.connections / target.threads).max(1);
        let (n_groups, conns_per_group) = match target.route {
            Route::Hash | Route::HashFailover | Route::Replicated(_) => {
                (n_addr, (per_thread / n_addr).max(1))
            }
            Route::Spread => (1, per_thread),
        };
        let readable = keys
            .iter()
            .take_while(|k| k.issued > 0 && (k.acked > 0 || !k.writing))
            .count();
        let mut w = Worker {
            target,
            thread,
            keys,
            chooser,
            phase,
            poll,
            conns: Vec::new(),
            groups: (0..n_groups)
                .map(|_| Group {
                    free: Vec::new(),
                    queue: VecDeque::new(),
                    down_until: None,
                })
                .collect(),
            rng: SmallRng::seed_from_u64(seed ^ (thread as u64).wrapping_mul(0x2545_F491)),
            stats: PhaseStats::default(),
            start,
            record_from: start + phase.warmup,
            last_recorded: None,
            outstanding: 0,
            issued: 0,
            exhausted: false,
            line: Vec::new(),
            multis: Vec::new(),
            free_multis: Vec::new(),
            readable,
        };
        for g in 0..n_groups {
            for c in 0..conns_per_group {
                let addr = match target.route {
                    Route::Hash | Route::HashFailover | Route::Replicated(_) => target.addrs[g],
                    // Offset by thread so that one connection per thread still covers them all.
                    Route::Spread => target.addrs[(c + thread) % n_addr],
                };
                let i = w.conns.len();
                let connected = std::net::TcpStream::connect(addr).and_then(|s| {
                    s.set_nodelay(true)?;
                    s.set_nonblocking(true)?;
                    Ok(s)
                });
                let stream = match connected {
                    Ok(s) => {
                        let mut stream = TcpStream::from_std(s);
                        w.poll
                            .registry()
                            .register(
                                &mut stream,
                                Token(i),
                                Interest::READABLE | Interest::WRITABLE,
                            )
                            .map_err(LoadError::Poll)?;
                        Some(stream)
                    }
                    // With failover a node may be down when the phase starts: route around it.
                    Err(_) if target.route.fanout(n_addr) > 1 => {
                        w.groups[g].down_until = Some(Instant::now() + DOWN_PROBE);
                        None
                    }
                    Err(source) => return Err(LoadError::Connect { addr, source }),
                };
                w.conns.push(Conn {
                    stream,
                    addr,
                    group: g,
                    out: Vec::with_capacity(target.value_bytes + 512),
                    out_pos: 0,
                    inbuf: Vec::with_capacity(target.value_bytes + READ_CHUNK),
                    in_start: 0,
                    in_end: 0,
                    current: None,
                    seen: None,
                    retry_at: None,
                });
                w.groups[g].free.push(i);
            }
        }
        w.stats.connections = w.conns.len();
        Ok(w)
    }

    fn key_id(&self, local: usize) -> u64 {
        key_id(local, self.thread, self.target.threads)
    }

    /// The key's own group (its first address in route order).
    fn home_group(&self, local: usize) -> usize {
        match self.target.route {
            Route::Spread => 0,
            Route::Hash | Route::HashFailover | Route::Replicated(_) => {
                let mut name = Vec::with_capacity(32);
                self.target.keys.append(&mut name, self.key_id(local));
                (fnv1a_64(&name) % self.groups.len() as u64) as usize
            }
        }
    }

    /// The group of a request: its key's address number `attempt` in route order.
    fn group_of(&self, req: &Req) -> usize {
        (self.home_group(req.local) + req.attempt as usize) % self.groups.len()
    }

    fn is_down(&self, g: usize) -> bool {
        self.groups[g].down_until.is_some()
    }

    /// The first attempt at or after `from` whose group is not down (`None`: none left).
    fn next_live_attempt(&self, local: usize, from: usize) -> Option<u8> {
        let fan = self.target.route.fanout(self.groups.len());
        let home = self.home_group(local);
        (from..fan)
            .find(|&a| !self.is_down((home + a) % self.groups.len()))
            .map(|a| a as u8)
    }

    /// Queues a request (its group from its attempt).
    fn enqueue(&mut self, req: Req) {
        let g = self.group_of(&req);
        self.groups[g].queue.push_back(req);
    }

    /// Queues a write: one part per replica with [`Route::Replicated`], else the write itself.
    fn enqueue_write(&mut self, req: Req) {
        let Route::Replicated(_) = self.target.route else {
            self.enqueue(req);
            return;
        };
        let fan = self.target.route.fanout(self.groups.len());
        let m = Multi {
            parent: req,
            remaining: fan,
            stored: 0,
            error: None,
        };
        let idx = match self.free_multis.pop() {
            Some(i) => {
                self.multis[i as usize] = Some(m);
                i
            }
            None => {
                self.multis.push(Some(m));
                (self.multis.len() - 1) as u32
            }
        };
        for a in 0..fan {
            self.enqueue(Req {
                attempt: a as u8,
                multi: Some(idx),
                ..req
            });
        }
    }

    /// A replica's part of a replicated write ended.
    fn part_done(&mut self, req: Req, now: Instant, error: Option<String>) {
        let idx = req.multi.expect("a part") as usize;
        let m = self.multis[idx].as_mut().expect("live multi");
        m.remaining -= 1;
        match error {
            None => m.stored += 1,
            Some(e) => {
                *self
                    .stats
                    .errors
                    .entry(format!("replica: {e}"))
                    .or_default() += 1;
                m.error.get_or_insert(e);
            }
        }
        if m.remaining > 0 {
            return;
        }
        let m = self.multis[idx].take().expect("live multi");
        self.free_multis.push(idx as u32);
        let ok = m.stored > 0;
        self.keys[m.parent.local].end_write(m.parent.counter, ok);
        let error = (!ok).then(|| m.error.unwrap_or_else(|| "no replica".into()));
        self.finish(m.parent, now, error);
    }

    /// Whether a failed or missed request goes to its key's next address instead of ending;
    /// if so it is queued there.
    fn retry_elsewhere(&mut self, req: Req, reason: Option<&str>) -> bool {
        if req.multi.is_some() {
            return false;
        }
        let reading = match req.op {
            OpKind::Get | OpKind::DegradedGet => true,
            OpKind::ReadModifyWrite => !req.second,
            _ => false,
        };
        let retry = match self.target.route {
            // Any error or a miss of a read: the next replica may have it.
            Route::Replicated(_) => reading,
            // Only a broken connection (the node is gone): not a timeout, not an error reply.
            Route::HashFailover => reason.is_some_and(|r| r.starts_with("connection")),
            Route::Hash | Route::Spread => false,
        };
        if !retry {
            return false;
        }
        let Some(a) = self.next_live_attempt(req.local, req.attempt as usize + 1) else {
            return false;
        };
        self.enqueue(Req { attempt: a, ..req });
        true
    }

    fn run(&mut self) -> Result<(), LoadError> {
        let mut events = Events::with_capacity(1024);
        let stop_issuing = self.phase.duration.map(|d| self.start + d);
        let per_thread_rate = self
            .phase
            .rate
            .map(|r| (r / self.target.threads as f64).max(1e-9));
        let mut drain_deadline: Option<Instant> = None;
        let mut last_timeout_scan = Instant::now();
        // Wait for the common start.
        let now = Instant::now();
        if self.start > now {
            std::thread::sleep(self.start - now);
        }
        loop {
            let now = Instant::now();
            let issuing = !self.exhausted && stop_issuing.is_none_or(|s| now < s);
            if issuing {
                match per_thread_rate {
                    Some(rate) => {
                        // Open loop: every request due by now.
                        loop {
                            let due =
                                self.start + Duration::from_secs_f64(self.issued as f64 / rate);
                            if due > now || stop_issuing.is_some_and(|s| due >= s) {
                                break;
                            }
                            if !self.generate(due)? {
                                break;
                            }
                        }
                    }
                    None => {
                        while self.outstanding < self.conns.len() {
                            if !self.generate(now)? {
                                break;
                            }
                        }
                    }
                }
            } else if self.outstanding == 0 {
                break;
            } else {
                let d = *drain_deadline.get_or_insert(now + self.phase.drain);
                if now >= d {
                    self.stats.unfinished += self.outstanding as u64;
                    break;
                }
            }
            self.dispatch()?;
            // Sleep until the next due request (open loop), an event, or a 10 ms tick.
            let mut wait = Duration::from_millis(10);
            if let (Some(rate), true) = (per_thread_rate, issuing) {
                let next_due = self.start + Duration::from_secs_f64(self.issued as f64 / rate);
                wait = wait.min(next_due.saturating_duration_since(Instant::now()));
            }
            self.poll
                .poll(&mut events, Some(wait))
                .or_else(|e| {
                    if e.kind() == ErrorKind::Interrupted {
                        Ok(())
                    } else {
                        Err(e)
                    }
                })
                .map_err(LoadError::Poll)?;
            for ev in events.iter() {
                let i = ev.token().0;
                if ev.is_writable() {
                    self.flush(i);
                }
                if ev.is_readable() || ev.is_read_closed() || ev.is_error() {
                    self.read(i)?;
                }
            }
            let now = Instant::now();
            if now.duration_since(last_timeout_scan) >= Duration::from_millis(10) {
                last_timeout_scan = now;
                self.scan_timeouts(now)?;
                self.probe_down(now);
            }
        }
        if let Some(l) = self.last_recorded {
            self.stats.recorded_secs = l.saturating_duration_since(self.record_from).as_secs_f64();
        }
        // Close everything: a half-written request on a closed connection is the server's
        // problem to drop, and the next phase opens fresh connections.
        for c in &mut self.conns {
            if let Some(mut s) = c.stream.take() {
                let _ = self.poll.registry().deregister(&mut s);
            }
        }
        Ok(())
    }

    /// Draws the next request and queues it; false when the chooser is done.
    fn generate(&mut self, due: Instant) -> Result<bool, LoadError> {
        while self.readable < self.keys.len() {
            let k = &self.keys[self.readable];
            if k.issued > 0 && (k.acked > 0 || !k.writing) {
                self.readable += 1;
            } else {
                break;
            }
        }
        let Some(mut choice) =
            self.chooser
                .next_with(&mut self.rng, self.keys.len(), self.readable)
        else {
            self.exhausted = true;
            return Ok(false);
        };
        if choice.op == OpKind::Insert {
            self.keys.push(KeyState::default());
            choice.local = self.keys.len() - 1;
        }
        if choice.op.writes() && self.keys[choice.local].writing {
            // Never two writes of one key in flight: try other keys, else read this one.
            let mut found = false;
            for _ in 0..8 {
                let Some(c) = self
                    .chooser
                    .next_with(&mut self.rng, self.keys.len(), self.readable)
                else {
                    break;
                };
                // Either this draw or the first one is not used.
                self.chooser.discard();
                if c.op == choice.op && !self.keys[c.local].writing {
                    choice = c;
                    found = true;
                    break;
                }
            }
            if !found {
                choice.op = OpKind::Get;
            }
        }
        if choice.op == OpKind::DegradedGet && self.target.degraded.is_none() {
            return Err(LoadError::NoDegradedForm);
        }
        let counter = match choice.op {
            OpKind::Set | OpKind::Insert => self.keys[choice.local].begin_write(),
            OpKind::ReadModifyWrite => {
                // Reserve the key for the write that follows the read.
                self.keys[choice.local].writing = true;
                0
            }
            _ => 0,
        };
        let req = Req {
            op: choice.op,
            local: choice.local,
            due,
            counter,
            floor: 0,
            sent: due,
            second: false,
            attempt: 0,
            multi: None,
        };
        self.outstanding += 1;
        if choice.op.writes() && choice.op != OpKind::ReadModifyWrite {
            self.enqueue_write(req);
        } else {
            let attempt = self.next_live_attempt(req.local, 0).unwrap_or(0);
            self.enqueue(Req { attempt, ..req });
        }
        self.issued += 1;
        Ok(true)
    }

    /// Gives queued requests to free connections.
    fn dispatch(&mut self) -> Result<(), LoadError> {
        for g in 0..self.groups.len() {
            while !self.groups[g].queue.is_empty() {
                let Some(i) = self.groups[g].free.pop() else {
                    break;
                };
                if self.conns[i].stream.is_none() && !self.reconnect(i) {
                    // Still down; another free connection may work. Put it back at the front
                    // so that it is retried after the others.
                    self.groups[g].free.insert(0, i);
                    if self.groups[g]
                        .free
                        .iter()
                        .all(|&j| self.conns[j].stream.is_none())
                    {
                        self.group_failed(g);
                        break;
                    }
                    continue;
                }
                let req = self.groups[g].queue.pop_front().expect("not empty");
                self.send(i, req);
            }
        }
        Ok(())
    }

    /// Group `g` cannot connect: with failover, it is marked down and what waits for it goes
    /// to each request's next address.
    fn group_failed(&mut self, g: usize) {
        if self.target.route.fanout(self.groups.len()) <= 1 {
            return;
        }
        if self.groups[g].down_until.is_none() {
            self.groups[g].down_until = Some(Instant::now() + DOWN_PROBE);
        }
        let waiting: Vec<Req> = self.groups[g].queue.drain(..).collect();
        for req in waiting {
            match self.next_live_attempt(req.local, req.attempt as usize + 1) {
                Some(a) if req.multi.is_none() => self.enqueue(Req { attempt: a, ..req }),
                _ if req.multi.is_some() => {
                    self.part_done(req, Instant::now(), Some("connection: refused".into()))
                }
                // Nowhere else to go: keep waiting here.
                _ => self.groups[g].queue.push_back(req),
            }
        }
    }

    /// Tries again groups marked down whose probe time has come.
    fn probe_down(&mut self, now: Instant) {
        for g in 0..self.groups.len() {
            if self.groups[g].down_until.is_none_or(|t| now < t) {
                continue;
            }
            let candidate = self.groups[g]
                .free
                .iter()
                .position(|&i| self.conns[i].stream.is_none());
            let up = match candidate {
                Some(p) => {
                    let i = self.groups[g].free[p];
                    self.conns[i].retry_at = None;
                    self.reconnect(i)
                }
                // Every free connection is connected: it is up.
                None => true,
            };
            self.groups[g].down_until = if up { None } else { Some(now + DOWN_PROBE) };
        }
    }

    fn reconnect(&mut self, i: usize) -> bool {
        let now = Instant::now();
        if self.conns[i].retry_at.is_some_and(|t| now < t) {
            return false;
        }
        let addr = self.conns[i].addr;
        match std::net::TcpStream::connect_timeout(&addr, Duration::from_millis(200)) {
            Ok(s) => {
                let _ = s.set_nodelay(true);
                let _ = s.set_nonblocking(true);
                let mut s = TcpStream::from_std(s);
                if self
                    .poll
                    .registry()
                    .register(&mut s, Token(i), Interest::READABLE | Interest::WRITABLE)
                    .is_err()
                {
                    self.conns[i].retry_at = Some(now + Duration::from_millis(100));
                    return false;
                }
                let c = &mut self.conns[i];
                c.stream = Some(s);
                c.retry_at = None;
                c.out.clear();
                c.out_pos = 0;
                c.in_start = 0;
                c.in_end = 0;
                c.seen = None;
                self.stats.reconnects += 1;
                true
            }
            Err(_) => {
                self.conns[i].retry_at = Some(now + Duration::from_millis(100));
                false
            }
        }
    }

    /// Writes the request on connection `i` (free, connected).
    fn send(&mut self, i: usize, mut req: Req) {
        let id = self.key_id(req.local);
        let c = &mut self.conns[i];
        c.out.clear();
        c.out_pos = 0;
        c.seen = None;
        let names = &self.target.keys;
        let write = match req.op {
            OpKind::Set | OpKind::Insert => true,
            OpKind::ReadModifyWrite => req.second,
            _ => false,
        };
        if write {
            let len = self.target.value_bytes.max(check::HEADER_BYTES);
            c.out.extend_from_slice(b"set ");
            names.append(&mut c.out, id);
            let _ = write!(c.out, " 0 0 {len}\r\n");
            check::encode(&mut c.out, id, req.counter, len);
            c.out.extend_from_slice(b"\r\n");
        } else if req.op == OpKind::DegradedGet {
            let d = self
                .target
                .degraded
                .as_ref()
                .expect("checked when generated");
            c.out.extend_from_slice(d.prefix.as_bytes());
            names.append(&mut c.out, id);
            c.out.extend_from_slice(d.suffix.as_bytes());
            c.out.extend_from_slice(b"\r\n");
            req.floor = self.keys[req.local].acked;
        } else {
            c.out.extend_from_slice(b"get ");
            names.append(&mut c.out, id);
            c.out.extend_from_slice(b"\r\n");
            req.floor = self.keys[req.local].acked;
        }
        req.sent = Instant::now();
        c.current = Some(req);
        self.flush(i);
    }

    fn flush(&mut self, i: usize) {
        let c = &mut self.conns[i];
        let Some(s) = c.stream.as_mut() else { return };
        while c.out_pos < c.out.len() {
            match s.write(&c.out[c.out_pos..]) {
                Ok(0) => break,
                Ok(n) => c.out_pos += n,
                Err(e) if e.kind() == ErrorKind::WouldBlock => return,
                Err(e) if e.kind() == ErrorKind::Interrupted => continue,
                Err(e) => {
                    let reason = format!("connection: write: {}", e.kind());
                    // Failing here is handled at the next read event or timeout scan; mark it.
                    self.fail_conn(i, &reason);
                    return;
                }
            }
        }
    }

    fn read(&mut self, i: usize) -> Result<(), LoadError> {
        loop {
            let c = &mut self.conns[i];
            let Some(s) = c.stream.as_mut() else {
                return Ok(());
            };
            if c.in_end + READ_CHUNK > c.inbuf.len() && c.in_start > 0 {
                c.inbuf.copy_within(c.in_start..c.in_end, 0);
                c.in_end -= c.in_start;
                c.in_start = 0;
            }
            let at = c.in_end;
            if at + READ_CHUNK > c.inbuf.len() {
                c.inbuf.resize(at + READ_CHUNK, 0);
            }
            match s.read(&mut c.inbuf[at..at + READ_CHUNK]) {
                Ok(0) => {
                    self.fail_conn(i, "connection: closed by the server");
                    return Ok(());
                }
                Ok(n) => {
                    c.in_end = at + n;
                    self.consume(i);
                    // Shorter than asked: the socket is empty, and the next bytes bring an
                    // event (the poll is edge-triggered), so it is not read again to see it
                    // would block.
                    if n < READ_CHUNK {
                        return Ok(());
                    }
                }
                Err(e) => match e.kind() {
                    ErrorKind::WouldBlock => return Ok(()),
                    ErrorKind::Interrupted => continue,
                    k => {
                        self.fail_conn(i, &format!("connection: read: {k}"));
                        return Ok(());
                    }
                },
            }
        }
    }

    /// Parses what connection `i` has received.
    fn consume(&mut self, i: usize) {
        loop {
            let c = &mut self.conns[i];
            let buf = &c.inbuf[c.in_start..c.in_end];
            if buf.is_empty() {
                return;
            }
            let Some(req) = c.current else {
                self.fail_conn(i, "protocol: bytes with no request out");
                return;
            };
            match parse_reply(buf) {
                ReplyParse::Incomplete => return,
                ReplyParse::Malformed { line } => {
                    let reason = format!(
                        "protocol: malformed reply {}",
                        String::from_utf8_lossy(&line[..line.len().min(60)])
                    );
                    self.fail_conn(i, &reason);
                    return;
                }
                ReplyParse::Reply { reply, consumed } => {
                    let reading = match req.op {
                        OpKind::Get | OpKind::DegradedGet => true,
                        OpKind::ReadModifyWrite => !req.second,
                        _ => false,
                    };
                    let meta = req.op == OpKind::DegradedGet
                        && self.target.degraded.as_ref().is_some_and(|d| d.meta);
                    let id = key_id(req.local, self.thread, self.target.threads);
                    let mut done: Option<Result<(), String>> = None;
                    let ks = self.keys[req.local];
                    match reply {
                        ServerReply::Value { data, .. } if reading && !meta => {
                            let o = ks.judge(req.floor, id, Some(data));
                            c.seen = Some(o);
                        }
                        ServerReply::MetaValue { data, .. } if reading && meta => {
                            let o = ks.judge(req.floor, id, Some(data));
                            c.seen = Some(o);
                            done = Some(Ok(()));
                        }
                        ServerReply::Line(b"END") if reading && !meta => done = Some(Ok(())),
                        ServerReply::Line(l) if reading && meta && l.starts_with(b"EN") => {
                            done = Some(Ok(()))
                        }
                        ServerReply::Line(b"STORED") if !reading => done = Some(Ok(())),
                        ServerReply::Line(l) => {
                            self.line.clear();
                            // Long enough to keep what an error says of a write's fate.
                            self.line.extend_from_slice(&l[..l.len().min(160)]);
                            done = Some(Err(String::from_utf8_lossy(&self.line).into_owned()));
                        }
                        ServerReply::Value { .. } | ServerReply::MetaValue { .. } => {
                            done = Some(Err("protocol: unexpected value".into()))
                        }
                    }
                    c.in_start += consumed;
                    if c.in_start == c.in_end {
                        c.in_start = 0;
                        c.in_end = 0;
                    }
                    if let Some(r) = done {
                        let seen = c.seen.take();
                        self.complete(i, r, seen);
                    }
                }
            }
        }
    }

    /// The request on connection `i` got its whole reply (`Ok`) or an error reply.
    fn complete(&mut self, i: usize, result: Result<(), String>, seen: Option<ReadOutcome>) {
        let Some(req) = self.conns[i].current.take() else {
            return;
        };
        let now = Instant::now();
        let g = self.conns[i].group;
        let reading = match req.op {
            OpKind::Get | OpKind::DegradedGet => true,
            OpKind::ReadModifyWrite => !req.second,
            _ => false,
        };
        if req.multi.is_some() {
            self.part_done(req, now, result.err());
            self.groups[g].free.push(i);
            return;
        }
        // A miss or an error of a replicated read: ask the next replica.
        if reading && (result.is_err() || seen.is_none()) {
            let reason = result.as_ref().err().map(String::as_str);
            if self.retry_elsewhere(req, reason) {
                self.groups[g].free.push(i);
                return;
            }
        }
        if result.is_ok() && reading {
            let id = self.key_id(req.local);
            let o = seen.unwrap_or_else(|| self.keys[req.local].judge(req.floor, id, None));
            self.stats.check.add(o);
        }
        if req.op == OpKind::ReadModifyWrite && !req.second {
            if result.is_ok() && matches!(self.target.route, Route::Replicated(_)) {
                // The write half, to every replica.
                let counter = {
                    let k = &mut self.keys[req.local];
                    k.writing = false;
                    k.begin_write()
                };
                self.enqueue_write(Req {
                    counter,
                    second: true,
                    ..req
                });
                self.groups[g].free.push(i);
                return;
            }
            if result.is_ok() {
                // The write half, on the same connection.
                let counter = {
                    let k = &mut self.keys[req.local];
                    k.writing = false;
                    k.begin_write()
                };
                let next = Req {
                    counter,
                    second: true,
                    ..req
                };
                let sent = req.sent;
                self.send(i, next);
                if let Some(r) = self.conns[i].current.as_mut() {
                    r.sent = sent;
                }
                return;
            }
            self.keys[req.local].writing = false;
        } else if !reading {
            self.keys[req.local].end_write(req.counter, result.is_ok());
        }
        self.finish(req, now, result.err());
        self.groups[g].free.push(i);
    }

    /// Counts a finished request.
    fn finish(&mut self, req: Req, now: Instant, error: Option<String>) {
        self.outstanding -= 1;
        let recorded = req.due >= self.record_from;
        let open = self.phase.rate.is_some();
        let step = (now.saturating_duration_since(self.start).as_nanos() / TIMELINE_STEP.as_nanos())
            as usize;
        if self.stats.timeline.len() <= step {
            self.stats.timeline.resize_with(step + 1, Interval::default);
        }
        let s = self.stats.ops.entry(req.op).or_default();
        let slot = &mut self.stats.timeline[step];
        match error {
            None => {
                let from = if open { req.due } else { req.sent };
                let ns = now.saturating_duration_since(from).as_nanos() as u64;
                slot.ok += 1;
                if req.op == OpKind::DegradedGet {
                    slot.degraded_ok += 1;
                }
                slot.hist.saturating_record(ns.max(1_000));
                if recorded {
                    s.hist.saturating_record(ns.max(1));
                    s.ok += 1;
                    self.last_recorded = Some(now);
                }
            }
            Some(reason) => {
                slot.errors += 1;
                s.errors += 1;
                *self.stats.errors.entry(reason).or_default() += 1;
            }
        }
    }

    /// Connection `i` broke: its request fails, the connection is closed and opened again
    /// when next needed.
    fn fail_conn(&mut self, i: usize, reason: &str) {
        let c = &mut self.conns[i];
        if let Some(mut s) = c.stream.take() {
            let _ = self.poll.registry().deregister(&mut s);
        }
        c.out.clear();
        c.out_pos = 0;
        c.in_start = 0;
        c.in_end = 0;
        c.seen = None;
        let g = c.group;
        let broken = reason.starts_with("connection");
        if broken
            && self.target.route.fanout(self.groups.len()) > 1
            && self.groups[g].down_until.is_none()
        {
            self.groups[g].down_until = Some(Instant::now() + DOWN_PROBE);
        }
        if let Some(req) = c.current.take() {
            if req.multi.is_some() {
                self.part_done(req, Instant::now(), Some(reason.to_string()));
                self.groups[g].free.push(i);
                return;
            }
            if self.retry_elsewhere(req, Some(reason)) {
                self.groups[g].free.push(i);
                return;
            }
            match req.op {
                OpKind::Set | OpKind::Insert => self.keys[req.local].end_write(req.counter, false),
                OpKind::ReadModifyWrite if req.second => {
                    self.keys[req.local].end_write(req.counter, false)
                }
                OpKind::ReadModifyWrite => self.keys[req.local].writing = false,
                _ => {}
            }
            self.finish(req, Instant::now(), Some(reason.to_string()));
            self.groups[g].free.push(i);
        }
    }

    fn scan_timeouts(&mut self, now: Instant) -> Result<(), LoadError> {
        for i in 0..self.conns.len() {
            if let Some(r) = self.conns[i].current {
                if now.saturating_duration_since(r.sent) > self.target.timeout {
                    self.fail_conn(i, "timeout");
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ycsb_key_names() {
        // YCSB's Utils.fnvhash64 of 0, 1 and 7 (its definition worked by hand: offset basis
        // 0xCBF29CE484222325, prime 1099511628211, xor then multiply per octet, Math.abs).
        assert_eq!(ycsb_fnvhash64(0), 6_284_781_860_667_377_211);
        assert_eq!(ycsb_fnvhash64(1), 8_517_097_267_634_966_620);
        assert_eq!(ycsb_fnvhash64(7), 5_465_015_992_139_406_178);
        assert_eq!(KeyNames::Ycsb.name(0), b"user6284781860667377211");
        assert_eq!(KeyNames::Prefix("k:".into()).name(12), b"k:12");
    }

    #[test]
    fn key_partition() {
        for keys in [0u64, 1, 2, 7, 100] {
            for threads in 1..5 {
                let mut seen = Vec::new();
                for t in 0..threads {
                    for l in 0..keys_of_thread(keys, t, threads) {
                        seen.push(key_id(l, t, threads));
                    }
                }
                seen.sort_unstable();
                assert_eq!(seen, (0..keys).collect::<Vec<_>>(), "{keys} {threads}");
            }
        }
    }
}
