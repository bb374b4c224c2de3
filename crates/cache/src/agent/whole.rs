//! The whole layout at the agent (`member::whole` has the pages and the rule of a consistent
//! cut): a value kept whole at its home, the stripe's designated agent, in a slab slot whose
//! delta every parity position of the slot's page applies; read with one exchange (none when
//! the request reached the home), and rebuilt, while the home is down or its slot is damaged,
//! from the same byte range of the other pages of the page's stripe.
//!
//! The home is the node that orders the key's writes: a write made while another node stands
//! in for it is stored in the split layout (`Node::whole_ok`), and so is one while the home
//! rebuilds its pages after a restart. While members of the stripe are down (at most m) whose
//! processes are gone (their connections refused), the home goes on writing whole: the deltas
//! of the parity positions that are down wait in a queue and are sent once they are up
//! ([`Node::redeliver_deltas`]; a restarted node rebuilds its pages and applies those its
//! rebuild does not already hold); past [`PENDING_MAX_BYTES`] of them, writes go split until
//! the queue drains. A member down but not refused (stalled, or cut off) may come back with
//! its pages and without the deltas it missed should the home die meanwhile: writes go split
//! then, their holes known to the stripe's records. The next write at the home brings a split
//! value back whole.

use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use crate::agent::index::Entry;
use crate::carrier::peer::{Request, Response};
use crate::member::whole::{self, Piece, SlotWrite};
use crate::node::{bump, lock, Commits, Node};
use crate::record::{self, Kind, WholeAt};

/// Test-only: switches off the check of what a repair plan rebuilt of a whole value
/// (`INEC_TEST_WHOLE_PLAN_UNCHECKED=1`, honoured with `--debug-commands` only), so that a test
/// can show the check is what keeps a torn rebuild from being served.
pub const PLAN_UNCHECKED_ENV: &str = "INEC_TEST_WHOLE_PLAN_UNCHECKED";

fn whole_plan_check_off() -> bool {
    static OFF: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *OFF.get_or_init(|| std::env::var(PLAN_UNCHECKED_ENV).is_ok_and(|v| v == "1"))
}

/// How a whole value is rebuilt while its home is down or its slot damaged (`--whole-repair`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WholeRepair {
    /// The scheme's repair plan on the engine, its chunk the value's byte range; what it
    /// rebuilt is checked and, if it fails, read again as `Direct` does.
    Plan,
    /// The agent reads the range of every other position of the page's stripe (on its event
    /// loop when it can) and decodes a consistent cut of k.
    Direct,
}

/// How many values a restarted home links to its rebuilt slots per hold of its store's lock.
const LINK_BATCH: usize = 4096;

impl std::str::FromStr for WholeRepair {
    type Err = String;
    fn from_str(s: &str) -> Result<WholeRepair, String> {
        match s {
            "plan" => Ok(WholeRepair::Plan),
            "direct" => Ok(WholeRepair::Direct),
            _ => Err(format!("unknown whole repair {s:?} (plan or direct)")),
        }
    }
}

/// Which layout new values get (`--layout`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Layout {
    /// The paper's: each value cut into k chunks plus parity (small ones replicated).
    Split,
    /// Every value kept whole at its home, parity across values.
    Whole,
    /// Whole below a value size (`NodeConfig::whole_below_bytes`), split at or above it.
    Auto,
}

impl std::str::FromStr for Layout {
    type Err = String;

    fn from_str(s: &str) -> Result<Layout, String> {
        match s {
            "split" => Ok(Layout::Split),
            "whole" => Ok(Layout::Whole),
            "auto" => Ok(Layout::Auto),
            other => Err(format!(
                "unknown layout {other:?}: expected split, whole or auto"
            )),
        }
    }
}

impl std::fmt::Display for Layout {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Layout::Split => "split",
            Layout::Whole => "whole",
            Layout::Auto => "auto",
        })
    }
}

/// Test-only (honoured with `--debug-commands`): a home writing a whole value whose bytes start
/// with this variable's value sends its delta to one parity position only and exits once that
/// one applied it, as a home killed between its delta sends would leave its page's parity.
pub const TEAR_ENV: &str = "INEC_TEST_TEAR_VALUE_PREFIX";

/// Ends this process as a kill between delta sends would (`TEAR_ENV`): the one delta sent went
/// to node `to`.
pub(crate) fn die_torn(id: usize, to: usize) -> ! {
    log::warn!("node {id}: exiting with a delta sent to node {to} only (test)");
    std::process::exit(9)
}

/// The write a queued delta belongs to: (page, data position, seq).
fn write_of(req: &Request) -> Option<(u32, u8, u64)> {
    match req {
        Request::Delta {
            page, data, seq, ..
        } => Some((*page, *data, *seq)),
        _ => None,
    }
}

/// A piece rebuilt from a cut: its bytes, the seqs it agrees with, and the pieces of the read
/// it came from.
type RebuiltPiece = (Vec<u8>, Vec<u64>, Vec<Piece>);

/// How a whole write failed.
#[derive(Debug)]
pub(crate) enum WholeFail {
    /// The slot could not be written, or a member refused its delta (a malformed one, or
    /// fenced out): the value is written in the split layout instead.
    Refused(String),
    /// Some member did not apply its delta: the write may or may not have taken effect.
    InDoubt(String),
}

/// How long a parity page may miss a delta before it is rebuilt
/// ([`Node::heal_gapped_pages`]): longer than a home takes to send a delta again.
pub const HEAL_AFTER: Duration = Duration::from_secs(5);

/// Parity pages rebuilt per round at most (a round a second).
const HEAL_PER_ROUND: usize = 4;

/// How often a repair reads the page ranges again while the parity pages disagree with the
/// data pages (deltas in flight), and how long it waits between reads.
const CUT_TRIES: usize = 50;
const CUT_WAIT: Duration = Duration::from_millis(2);
/// How often a page rebuild after a restart tries a page again (100 ms apart) when one read of
/// it found no consistent cut.
const PAGE_TRIES: usize = 50;
/// How long after a kept delta arrived its home must still answer heartbeats (as the same
/// process) before the delta is dropped by time (`Node::release_kept_deltas`). Deltas go when
/// their home says every position applied them (within about a second); this bounds what a
/// position keeps when that word never comes (a delta one position still misses is in its
/// home's queue meanwhile).
const KEPT_FOR: Duration = Duration::from_secs(30);
/// Bytes of deltas a home keeps queued for parity positions that are down: past them, it
/// writes split while a member of the stripe is down (a node down for long must not make the
/// queue grow without bound; a split write leaves holes, filled from the stripe).
pub const PENDING_MAX_BYTES: u64 = 64 << 20;

/// A queued delta older than its node's incarnation (the start of its process) by more than
/// this is dropped: the restarted node rebuilds its pages from the data pages after it starts
/// (and its recovery restores the location records), so that rebuild holds the delta. The
/// margin allows for the two nodes' clocks to differ by up to 1 s.
const SUPERSEDED_MARGIN_US: u64 = 1_000_000;
/// A delta queued for a node that is still refused (its process gone) this long after it was
/// queued is dropped at once: the node's next process starts later still, past
/// [`SUPERSEDED_MARGIN_US`], so its page rebuild will hold the delta. (Should it have started
/// unseen this long ago, the page it missed the delta for has a gap, which it heals.) So a
/// node down for long does not fill the queue and make every write split.
const SUPERSEDED_WHILE_REFUSED_US: u64 = 5_000_000;
/// How many queued deltas go to the nodes in one exchange: a restarted node is not flooded.
const REDELIVER_BATCH: usize = 256;

/// The bytes a queued request holds (a delta's bytes and its record).
fn queued_bytes(req: &Request) -> u64 {
    match req {
        Request::Delta { record, delta, .. } => (record.len() + delta.len()) as u64,
        _ => 0,
    }
}

impl Node {
    /// Whether a value of `value_bytes` under `key` is written whole now: the layout wants it
    /// whole ([`Node::whole_rule`]: its size, and the record fitting a slab page), this node
    /// is the stripe's home (its designated agent) and has its pages (not rebuilding them
    /// after a restart), and every member of the stripe is up or, with at most m down and all
    /// of them refused (not running: they come back as restarted processes, which rebuild
    /// their pages), the deltas queued for down parity positions are below
    /// [`PENDING_MAX_BYTES`].
    pub(crate) fn whole_ok(&self, stripe: usize, key: &[u8], value_bytes: usize) -> bool {
        if !self.whole_rule().wants(key.len(), value_bytes as u64) {
            return false;
        }
        self.placement.node_of(stripe, 0) == self.cfg.id
            && !self.pages_lost.load(Ordering::Relaxed)
            && match self.down_positions(stripe) {
                0 => true,
                down => {
                    down <= self.parity()
                        && self.whole_pending_bytes.load(Ordering::Relaxed) < PENDING_MAX_BYTES
                        && (0..self.n())
                            .map(|p| self.placement.node_of(stripe, p))
                            .filter(|&node| !self.is_up(node))
                            .all(|node| self.is_refused(node))
                }
            }
    }

    /// The values this node, as an agent, wants whole at their home (its indexes count those
    /// stored split: `agent::rewhole`): those [`Node::whole_wanted`] accepts whose record a
    /// slab page holds. (With fewer nodes than positions a node holds several positions of
    /// a page stripe; the layout works the same, with less to survive.)
    pub(crate) fn whole_rule(&self) -> crate::agent::index::WholeRule {
        let below_bytes = match self.cfg.layout {
            Layout::Split => 0,
            Layout::Whole => u64::MAX,
            Layout::Auto => self.cfg.whole_below_bytes as u64,
        };
        crate::agent::index::WholeRule {
            below_bytes,
            record_max_bytes: self.cfg.page_bytes,
        }
    }

    /// Whether the layout asks for a value of `value_bytes` to be whole (its size alone;
    /// [`Node::whole_rule`] also asks that its record fit a slab page).
    pub(crate) fn whole_wanted(&self, value_bytes: usize) -> bool {
        (value_bytes as u64) < self.whole_rule().below_bytes
    }

    /// Counts a write the layout wanted whole that goes split (`whole_fallbacks`): called
    /// once the write is under way, so a write handed from the loop to a worker counts once.
    pub(crate) fn count_split_fallback(&self, kind: Kind, value_bytes: usize) {
        if kind != Kind::Whole && self.whole_wanted(value_bytes) {
            bump(&self.counters.whole_fallbacks);
        }
    }

    /// The whole layout's memory here: slab pages, bytes of the slots in use, parity pages,
    /// and the page size.
    pub fn whole_memory(&self) -> (u64, u64, u64, u64) {
        let store = lock(&self.store);
        (
            store.slab.pages() as u64,
            store.slab.used_bytes,
            store.parity.len() as u64,
            store.slab.page_bytes() as u64,
        )
    }

    /// Whether this write is to be torn ([`TEAR_ENV`]; tests only).
    pub(crate) fn tears(&self, value: &[u8]) -> bool {
        if !self.cfg.debug_commands {
            return false;
        }
        static PREFIX: std::sync::OnceLock<Option<Vec<u8>>> = std::sync::OnceLock::new();
        let prefix = PREFIX.get_or_init(|| {
            std::env::var(TEAR_ENV)
                .ok()
                .filter(|p| !p.is_empty())
                .map(String::into_bytes)
        });
        prefix.as_ref().is_some_and(|p| value.starts_with(p))
    }

    /// Writes a whole value's record into this node's slab and sends each parity position of
    /// its page the delta with the value's location: its location once every one applied it.
    pub(crate) fn write_whole(
        &self,
        stripe: usize,
        key: &[u8],
        e: &Entry,
        value: &[u8],
        watermark: u64,
    ) -> Result<WholeAt, WholeFail> {
        let header = self.header(key, e, 0);
        let written = match lock(&self.store).put_whole(stripe as u32, header, value, watermark) {
            Ok(Some(w)) => w,
            Ok(None) => {
                return Err(WholeFail::Refused(
                    "a newer record of the key is held".into(),
                ))
            }
            Err(why) => return Err(WholeFail::Refused(why)),
        };
        // Parity positions known down are not asked: their deltas wait in the queue.
        let (calls, down): (Vec<_>, Vec<_>) = self
            .whole_deltas(stripe, key, e, &written, watermark)
            .into_iter()
            .map(|(node, _, req)| (node, req))
            .partition(|(node, _)| self.is_up(*node));
        let tear = self.tears(value);
        let calls = if tear {
            calls.into_iter().take(1).collect()
        } else {
            calls
        };
        let asked: Vec<usize> = calls.iter().map(|(node, _)| *node).collect();
        let first = asked.first().copied().unwrap_or(usize::MAX);
        let mut refused = None;
        let mut missed: Vec<usize> = down.into_iter().map(|(node, _)| node).collect();
        for (node, r) in asked.into_iter().zip(self.call(calls)) {
            match r {
                Ok(Response::Ack) => {}
                Ok(Response::Nack(why)) => {
                    refused = Some(format!("node {node} refused a delta: {why}"));
                }
                Ok(other) => refused = Some(format!("node {node} answered {other:?}")),
                Err(_) => missed.push(node),
            }
        }
        if tear {
            die_torn(self.cfg.id, first);
        }
        bump(&self.counters.whole_writes);
        if missed.iter().all(|&node| self.is_refused(node)) && refused.is_none() {
            // Every parity position applied it, or will hold it once it is back (a node whose
            // process is gone rebuilds its pages from the others): they need not keep it.
            lock(&self.store)
                .slab
                .mark_done(written.at.page, written.seq);
        }
        if !missed.is_empty() {
            // Sent again once their nodes are up; the value is stored as a split write with
            // holes is, while at most m positions of the stripe are down.
            self.queue_deltas(stripe, key, e, &written, watermark, |node| {
                missed.contains(&node)
            });
        }
        if let Some(why) = refused {
            return Err(WholeFail::Refused(why));
        }
        if !missed.is_empty() && self.down_positions(stripe) > self.parity() {
            return Err(WholeFail::InDoubt(format!(
                "nodes {missed:?} did not answer their deltas and {} positions of stripe \
                 {stripe} are down",
                self.down_positions(stripe)
            )));
        }
        Ok(written.at)
    }

    /// Queues the deltas of a written slot for the parity nodes `which` picks, to be sent
    /// again once they are up ([`Node::redeliver_deltas`]; one already applied is ignored).
    pub(crate) fn queue_deltas(
        &self,
        stripe: usize,
        key: &[u8],
        e: &Entry,
        written: &SlotWrite,
        watermark: u64,
        which: impl Fn(usize) -> bool,
    ) {
        // Half full: the deltas of nodes still refused long after they were queued go first
        // (the background round that drops them may be busy, filling holes).
        let prune = self.whole_pending_bytes.load(Ordering::Relaxed) > PENDING_MAX_BYTES / 2;
        let refused = if prune {
            self.refused_down()
        } else {
            Vec::new()
        };
        let mut pending = lock(&self.whole_pending);
        if prune {
            self.drop_superseded_while_refused(&mut pending, &refused);
        }
        for (node, _, req) in self.whole_deltas(stripe, key, e, written, watermark) {
            if which(node) {
                self.whole_pending_bytes
                    .fetch_add(queued_bytes(&req), Ordering::Relaxed);
                pending.push((node, crate::time::now_micros(), req));
                bump(&self.counters.whole_deltas_queued);
            }
        }
    }

    /// Drops the queued deltas of the nodes `refused` (down, their process gone) queued more
    /// than [`SUPERSEDED_WHILE_REFUSED_US`] ago.
    fn drop_superseded_while_refused(
        &self,
        pending: &mut Vec<(usize, u64, Request)>,
        refused: &[bool],
    ) {
        let now = crate::time::now_micros();
        pending.retain(|(node, at, req)| {
            let superseded = refused[*node] && at + SUPERSEDED_WHILE_REFUSED_US < now;
            if superseded {
                self.whole_pending_bytes
                    .fetch_sub(queued_bytes(req), Ordering::Relaxed);
                bump(&self.counters.whole_deltas_superseded);
            }
            !superseded
        });
    }

    /// Per node, whether it is down and its connection was refused (its process gone).
    fn refused_down(&self) -> Vec<bool> {
        (0..self.cfg.node_count)
            .map(|node| !self.is_up(node) && self.is_refused(node))
            .collect()
    }

    /// Deltas waiting to be sent again.
    pub fn whole_deltas_pending(&self) -> usize {
        lock(&self.whole_pending).len()
    }

    /// Sends the queued deltas to the nodes that are up again; keeps those still unanswered.
    /// Those made before their node's process started (by [`SUPERSEDED_MARGIN_US`]) are
    /// dropped: its page rebuild holds them; so are those of a node still refused
    /// [`SUPERSEDED_WHILE_REFUSED_US`] after they were queued. The rest go in batches of
    /// [`REDELIVER_BATCH`], each sent once the one before is answered.
    pub fn redeliver_deltas(&self) {
        let refused = self.refused_down();
        let (todo, queued) = {
            let mut pending = lock(&self.whole_pending);
            let queued: std::collections::HashSet<(u32, u8, u64)> =
                pending.iter().filter_map(|(_, _, r)| write_of(r)).collect();
            self.drop_superseded_while_refused(&mut pending, &refused);
            (std::mem::take(&mut *pending), queued)
        };
        let incarnations: Vec<u64> = lock(&self.peers)
            .list
            .iter()
            .map(|p| p.incarnation)
            .collect();
        let mut again = Vec::new();
        let mut send = Vec::new();
        for (node, at, req) in todo {
            if !self.is_up(node) {
                again.push((node, at, req));
            } else if at + SUPERSEDED_MARGIN_US < incarnations[node] {
                bump(&self.counters.whole_deltas_superseded);
            } else {
                send.push((node, at, req));
            }
        }
        while !send.is_empty() {
            let batch: Vec<(usize, u64, Request)> =
                send.drain(..send.len().min(REDELIVER_BATCH)).collect();
            let calls = batch.iter().map(|(n, _, req)| (*n, req.clone())).collect();
            for ((node, at, req), r) in batch.into_iter().zip(self.call(calls)) {
                match r {
                    Ok(Response::Ack) => bump(&self.counters.whole_deltas_redelivered),
                    Ok(other) => log::warn!(
                        "node {}: a delta for node {node} sent again was refused: {other:?}",
                        self.cfg.id
                    ),
                    Err(_) => again.push((node, at, req)),
                }
            }
        }
        let mut pending = lock(&self.whole_pending);
        pending.extend(again);
        let bytes = pending.iter().map(|(_, _, req)| queued_bytes(req)).sum();
        self.whole_pending_bytes.store(bytes, Ordering::Relaxed);
        // A write none of whose deltas is queued any more (applied when sent again, or held by
        // the page rebuild of the node that missed it) is applied everywhere: the parity
        // positions may drop their copies once they hear so (`committed`).
        let left: std::collections::HashSet<(u32, u8, u64)> =
            pending.iter().filter_map(|(_, _, r)| write_of(r)).collect();
        drop(pending);
        let k = self.k();
        let mut store = lock(&self.store);
        for &(q, d, seq) in queued.difference(&left) {
            store
                .slab
                .mark_done(whole::home_page(d as usize, q, k), seq);
        }
    }

    /// The deltas of a slot written at this node (the home), one per parity position of its
    /// page's stripe: (node, parity position in the page stripe, request). Each carries the
    /// value's location as the receiver's record of the key (at its position in `stripe`).
    pub(crate) fn whole_deltas(
        &self,
        stripe: usize,
        key: &[u8],
        e: &Entry,
        written: &SlotWrite,
        watermark: u64,
    ) -> Vec<(usize, usize, Request)> {
        let (k, n, nodes) = (self.k(), self.n(), self.cfg.node_count);
        let (t, d, q) = whole::page_of(self.cfg.id, written.at.page, k, nodes);
        let at = written.at.to_bytes();
        self.collect_commits();
        let mut commits = lock(&self.whole_commits);
        let mut header = self.header(key, e, 0);
        (k..n)
            .map(|i| {
                // Parity position i of page stripe t is position i − d of this stripe.
                header.chunk_index = (i - d) as u8;
                let meta = record::encode(&header, &at);
                let node = (t + i) % nodes;
                // What it has not been told of this home's pages applied everywhere.
                let commits = commits.get_mut(&node).map_or_else(Vec::new, |pages| {
                    pages
                        .drain()
                        .map(|((t, i, q, d), c)| (t, i, q, d, c))
                        .collect()
                });
                (
                    node,
                    i,
                    Request::Delta {
                        stripe: stripe as u32,
                        watermark,
                        record: meta,
                        page_stripe: t as u32,
                        position: i as u8,
                        page: q,
                        data: d as u8,
                        seq: written.seq,
                        committed: written.committed,
                        commits,
                        offset: written.at.offset,
                        delta: written.delta.clone(),
                    },
                )
            })
            .collect()
    }

    /// Reads a whole value: the home's record, or (home down, record damaged, or
    /// `degrade == Some(0)`) the record rebuilt from its page's stripe.
    pub(crate) fn read_whole(
        &self,
        stripe: usize,
        key: &[u8],
        e: &Entry,
        degrade: Option<u8>,
    ) -> Result<Vec<u8>, String> {
        let home = self.placement.node_of(stripe, 0);
        let mut damaged = false;
        if degrade != Some(0) && self.is_up(home) {
            let get = Request::Get {
                stripe: stripe as u32,
                position: 0,
                key: key.to_vec(),
                version: e.version,
            };
            if let Some(Ok(Response::Record(Some(bytes)))) = self.call(vec![(home, get)]).pop() {
                match record::parse(&bytes) {
                    Ok((h, data)) if h.version == e.version && h.key == key => {
                        return Ok(data.to_vec())
                    }
                    Ok(_) => bump(&self.counters.version_mismatches),
                    Err(_) => {
                        bump(&self.counters.crc_errors);
                        damaged = true;
                    }
                }
            }
        }
        bump(&self.counters.degraded_reads);
        let at = match e.whole_at {
            Some(at) => at,
            None => self.whole_location(stripe, key, e)?,
        };
        let rec = match self.plan_rebuild_whole(home, at, key, e.version) {
            Some(rec) => rec,
            None => self.rebuild_whole(home, at, key, e.version)?,
        };
        match record::parse(&rec) {
            Ok((h, data)) if h.version == e.version && h.key == key => {
                // A damaged slot at this node is mended in place (a slot left damaged would
                // also spoil the delta of the next record written there).
                if damaged
                    && home == self.cfg.id
                    && lock(&self.store).mend_whole(stripe as u32, key, e.version, &rec)
                {
                    bump(&self.counters.chunks_written_back);
                }
                Ok(data.to_vec())
            }
            Ok((h, _)) => Err(format!(
                "the slot of {} v{} rebuilt from its page's stripe holds v{} of {}",
                String::from_utf8_lossy(key),
                e.version,
                h.version,
                String::from_utf8_lossy(&h.key)
            )),
            Err(err) => Err(format!("the slot rebuilt from its page's stripe: {err}")),
        }
    }

    /// The location record of a whole value at `position` of its stripe, if that position is
    /// one of the parity positions of the value's page (recovery of a restarted member).
    pub(crate) fn whole_location_record(
        &self,
        stripe: usize,
        key: &[u8],
        e: &Entry,
        position: usize,
    ) -> Option<Vec<u8>> {
        let at = match e.whole_at {
            Some(at) => at,
            None => self.whole_location(stripe, key, e).ok()?,
        };
        let home = self.placement.node_of(stripe, 0);
        let (_, d, _) = whole::page_of(home, at.page, self.k(), self.cfg.node_count);
        ((self.k() - d..self.n() - d).contains(&position))
            .then(|| record::encode(&self.header(key, e, position), &at.to_bytes()))
    }

    /// Where the home's record of a whole value lies, from a parity position's record of it.
    fn whole_location(&self, stripe: usize, key: &[u8], e: &Entry) -> Result<WholeAt, String> {
        let calls: Vec<(usize, Request)> = (1..self.n())
            .map(|p| (p, self.placement.node_of(stripe, p)))
            .filter(|&(_, node)| self.is_up(node))
            .map(|(p, node)| {
                (
                    node,
                    Request::Get {
                        stripe: stripe as u32,
                        position: p as u8,
                        key: key.to_vec(),
                        version: e.version,
                    },
                )
            })
            .collect();
        for r in self.call(calls) {
            if let Ok(Response::Record(Some(bytes))) = r {
                if let Ok((h, data)) = record::parse(&bytes) {
                    if h.kind == Kind::Whole && h.version == e.version && h.key == key {
                        if let Some(at) = WholeAt::from_bytes(data) {
                            return Ok(at);
                        }
                    }
                }
            }
        }
        Err(format!(
            "no member of stripe {stripe} knows where {} v{} lies (its home and every parity \
             position holding its location are down)",
            String::from_utf8_lossy(key),
            e.version
        ))
    }

    /// The record of `key` v`version` in slot `at` of node `home`, rebuilt at this node by
    /// the scheme's repair plan on the engine: the plan's chunk is the slot's byte range, each
    /// helper reads that range of its page of the page stripe. The helpers' pages are not
    /// compared (a plan combines what it reads), so the result is taken only if it parses as
    /// that record: its CRC32C covers the whole slot, so bytes combined across a delta in
    /// flight (a data page with it, a parity page without) fail it. `None` (counted, the
    /// reason logged) when there is no engine path, the plan cannot run, or the result fails
    /// the check: the caller then reads a consistent cut directly ([`Node::rebuild_whole`]).
    fn plan_rebuild_whole(
        &self,
        home: usize,
        at: WholeAt,
        key: &[u8],
        version: u64,
    ) -> Option<Vec<u8>> {
        if self.cfg.whole_repair != WholeRepair::Plan {
            return None;
        }
        let x = self.plans.as_ref()?;
        let (t, target, q) = whole::page_of(home, at.page, self.k(), self.cfg.node_count);
        let members = self.placement.members(t);
        // A helper that is down, or up but not ready (it may be rebuilding its pages after a
        // restart), is treated as lost.
        let view = self.view();
        let lost: Vec<usize> = (0..self.n())
            .filter(|&p| p == target || !view[members[p]].0 || !view[members[p]].1)
            .collect();
        let plan_at = crate::carrier::plans::RepairAt {
            code: self.cfg.code,
            scheme: self.cfg.scheme,
            mode: self.cfg.mode,
            members: &members,
            agent: self.cfg.id,
            stripe: t,
            lost: &lost,
        };
        let range = crate::carrier::plans::PageRange {
            page: q,
            offset: at.offset,
            len: at.len,
        };
        let fallback = |reason: String| {
            x.counters
                .degraded_plan_fallbacks
                .fetch_add(1, Ordering::Relaxed);
            log::warn!(
                "node {}: whole value {} rebuilt from a direct cut instead of on the engine: \
                 {reason}",
                self.cfg.id,
                String::from_utf8_lossy(key)
            );
            None
        };
        let rec = match x.repair_range(&plan_at, target, range, &|n| self.is_up(n)) {
            Ok(rec) => rec,
            Err(e) => return fallback(e.to_string()),
        };
        if !(self.cfg.debug_commands && whole_plan_check_off()) {
            match record::parse(&rec) {
                Ok((h, _)) if h.version == version && h.key == key => {}
                _ => {
                    bump(&self.counters.whole_plan_rejected);
                    return fallback(format!(
                        "what the plan rebuilt of page {q} of page stripe {t} is not the record \
                         (a delta in flight between the pages it read)"
                    ));
                }
            }
        }
        x.counters
            .degraded_plan_runs
            .fetch_add(1, Ordering::Relaxed);
        bump(&self.counters.whole_rebuilds);
        Some(rec)
    }

    /// The record of `key` v`version` in slot `at` of node `home`, rebuilt from the same range
    /// of the other pages of its page's stripe: over the consistent cut the read shows, or,
    /// when what that gives fails the record's check, over the next cut of k
    /// (`member::whole::cuts_of_k`; a delta torn by its home's death leaves the write in one
    /// group of parity pages and not in the other). Read again while the pieces show no cut of
    /// k; what the last cut gave when none passes (the caller reports the failed check).
    pub(crate) fn rebuild_whole(
        &self,
        home: usize,
        at: WholeAt,
        key: &[u8],
        version: u64,
    ) -> Result<Vec<u8>, String> {
        let k = self.k();
        let (t, lost, q) = whole::page_of(home, at.page, k, self.cfg.node_count);
        let is_it = |rec: &[u8]| matches!(record::parse(rec), Ok((h, _)) if h.version == version && h.key == key);
        let mut last = None;
        for tries in 0..CUT_TRIES {
            let (pieces, bytes) = self.read_pieces(t, lost, q, at.offset, at.len);
            let cuts = whole::cuts_of_k(&pieces, k);
            for keep in &cuts {
                if let Ok((rec, _)) = self.combine_cut(lost, at.len, &pieces, &bytes, keep) {
                    if is_it(&rec) {
                        bump(&self.counters.whole_rebuilds);
                        return Ok(rec);
                    }
                    last = Some(rec);
                }
            }
            if !cuts.is_empty() {
                break;
            }
            if tries == CUT_TRIES / 2 {
                // Half the tries without a cut of k: a torn delta, perhaps (`complete_torn`).
                self.complete_torn(t, q);
            }
            bump(&self.counters.whole_cut_retries);
            std::thread::sleep(CUT_WAIT);
        }
        last.ok_or_else(|| {
            format!(
                "page {q} of page stripe {t} has no consistent cut to rebuild position {lost} \
                 from"
            )
        })
    }

    /// A byte range of position `target` of page `q` of page stripe `t`, rebuilt from the
    /// same range at the other positions over a consistent cut
    /// (`member::whole::consistent`), read again while the parity pages disagree with the data
    /// pages (deltas in flight). With the seqs the rebuilt piece agrees with: for a data
    /// position its page's seq, for a parity position one per data position.
    pub(crate) fn rebuild_piece(
        &self,
        t: usize,
        target: usize,
        q: u32,
        offset: u32,
        len: u32,
    ) -> Result<(Vec<u8>, Vec<u64>), String> {
        let choose = |pieces: &[Piece]| whole::consistent(pieces, self.k());
        self.rebuild_piece_by(t, target, q, (offset, len), choose)
            .map(|(bytes, seqs, _)| (bytes, seqs))
    }

    /// [`Node::rebuild_piece`] over the cut `choose` picks from the pieces read; with the
    /// pieces of the read it used.
    fn rebuild_piece_by(
        &self,
        t: usize,
        target: usize,
        q: u32,
        (offset, len): (u32, u32),
        choose: impl Fn(&[Piece]) -> Vec<usize>,
    ) -> Result<RebuiltPiece, String> {
        let mut last = String::new();
        for _ in 0..CUT_TRIES {
            let (pieces, bytes) = self.read_pieces(t, target, q, offset, len);
            let keep = choose(&pieces);
            match self.combine_cut(target, len, &pieces, &bytes, &keep) {
                Ok((out, seqs)) => return Ok((out, seqs, pieces)),
                Err(err) => last = err,
            }
            bump(&self.counters.whole_cut_retries);
            std::thread::sleep(CUT_WAIT);
        }
        Err(format!(
            "page {q} of page stripe {t} has no consistent cut to rebuild position {target} \
             from: {last}"
        ))
    }

    /// After this node, a home restarted, rebuilt its page `q` of page stripe `t` (data
    /// position `i`) as `page` at `seq`: brings each parity page of that page stripe whose
    /// count for position `i` is another seq to agree with it. Such a page is **torn**: the
    /// deltas this node sent before it died reached some parity positions and not the others,
    /// and no later delta from it shows that (docs/cache.md, "A delta torn by a kill"). Left
    /// so, a page ahead of the rebuilt one would drop this node's next delta as one it
    /// applied already and hold other bytes than the code's parity under the same seqs; a
    /// page behind it would be left out of every repair until healed.
    ///
    /// The correction is the difference between the parity page read and the parity the cut
    /// that keeps the rebuilt page gives for that position, taken from a read in which the
    /// page agrees with that cut for every other data position (the other homes' deltas cancel
    /// out); the page adds it and moves its count only if the count is still the one read
    /// (`Request::Realign`). Returns the pages realigned.
    fn realign_torn(&self, t: usize, i: usize, q: u32, seq: u64, page: &[u8]) -> usize {
        let (k, nodes) = (self.k(), self.cfg.node_count);
        let len = page.len() as u32;
        let mut realigned = 0;
        for _ in 0..CUT_TRIES {
            let (mut pieces, mut bytes) = self.read_pieces(t, i, q, 0, len);
            let differs =
                |x: &Piece| x.position >= k && x.seqs[i] != seq && x.seqs[i] != whole::GAPPED;
            let torn: Vec<Piece> = pieces
                .iter()
                .filter(|x| x.seqs.len() == k && differs(x))
                .cloned()
                .collect();
            if torn.is_empty() {
                return realigned;
            }
            pieces.push(Piece {
                position: i,
                seqs: vec![seq],
            });
            bytes[i] = Some(page.to_vec());
            let keep = whole::consistent_with(&pieces, k, i);
            let mut calls = Vec::new();
            for x in torn.iter().filter(|_| keep.len() >= k) {
                let p = x.position;
                // The page as the cut gives it, with the seqs of that cut.
                let Ok((mut fix, agreed)) = self.combine_cut(p, len, &pieces, &bytes, &keep) else {
                    continue;
                };
                if (0..k).any(|d| d != i && x.seqs[d] != agreed[d]) {
                    continue;
                }
                let read = bytes[p].as_deref().unwrap_or_default();
                for (f, b) in fix.iter_mut().zip(read) {
                    *f ^= b;
                }
                let lo = fix.iter().position(|&b| b != 0).unwrap_or(0);
                let hi = fix.iter().rposition(|&b| b != 0).map_or(lo, |h| h + 1);
                let req = Request::Realign {
                    stripe: self.cfg.id as u32,
                    page_stripe: t as u32,
                    position: p as u8,
                    page: q,
                    data: i as u8,
                    from: x.seqs[i],
                    to: seq,
                    offset: lo as u32,
                    bytes: fix[lo..hi].to_vec(),
                };
                calls.push(((t + p) % nodes, req));
            }
            for r in self.call(calls) {
                if matches!(r, Ok(Response::Ack)) {
                    realigned += 1;
                    bump(&self.counters.whole_pages_realigned);
                }
            }
            std::thread::sleep(CUT_WAIT);
        }
        log::warn!(
            "node {}: page {q} of page stripe {t} is torn (parity pages disagree on this \
             node's seq {seq}) and could not be realigned yet",
            self.cfg.id
        );
        realigned
    }

    /// [`Node::read_ranges`] as a repair combines them: the pieces read (positions and seqs)
    /// and their bytes by position.
    fn read_pieces(
        &self,
        t: usize,
        target: usize,
        q: u32,
        offset: u32,
        len: u32,
    ) -> (Vec<Piece>, Vec<Option<Vec<u8>>>) {
        let mut pieces = Vec::new();
        let mut bytes: Vec<Option<Vec<u8>>> = vec![None; self.n()];
        for (p, seqs, b) in self.read_ranges(t, target, q, offset, len) {
            pieces.push(Piece { position: p, seqs });
            bytes[p] = Some(b);
        }
        (pieces, bytes)
    }

    /// The same range of page `q` at every position of page stripe `t` but `target` whose node
    /// is up, as those that answered it whole give it: (position, seqs, bytes).
    fn read_ranges(
        &self,
        t: usize,
        target: usize,
        q: u32,
        offset: u32,
        len: u32,
    ) -> Vec<(usize, Vec<u64>, Vec<u8>)> {
        let (n, nodes) = (self.n(), self.cfg.node_count);
        let calls: Vec<(usize, Request)> = (0..n)
            .filter(|&p| p != target && self.is_up((t + p) % nodes))
            .map(|p| {
                let req = Request::Range {
                    stripe: t as u32,
                    page_stripe: t as u32,
                    position: p as u8,
                    page: q,
                    offset,
                    len,
                };
                ((t + p) % nodes, req)
            })
            .collect();
        let positions: Vec<usize> = calls
            .iter()
            .map(|(node, _)| (node + nodes - t) % nodes)
            .collect();
        let mut pieces = Vec::new();
        for (p, r) in positions.into_iter().zip(self.call(calls)) {
            if let Ok(Response::Range { seqs, bytes }) = r {
                if bytes.len() == len as usize {
                    pieces.push((p, seqs, bytes));
                }
            }
        }
        pieces
    }

    /// Position `target`'s bytes of one range of a page stripe, from the same range read at
    /// other positions (`bytes`, by position; `pieces`, their seqs), combined over a consistent
    /// cut (`member::whole::consistent`); with the seqs the result agrees with (for a data
    /// position its page's seq, for a parity position one per data position). An error when
    /// the pieces hold no consistent cut of k (deltas in flight, or too few answered).
    pub(crate) fn combine_range(
        &self,
        target: usize,
        len: u32,
        pieces: &[Piece],
        bytes: &[Option<Vec<u8>>],
    ) -> Result<(Vec<u8>, Vec<u64>), String> {
        let keep = whole::consistent(pieces, self.k());
        self.combine_cut(target, len, pieces, bytes, &keep)
    }

    /// [`Node::combine_range`] over the cut `keep`.
    fn combine_cut(
        &self,
        target: usize,
        len: u32,
        pieces: &[Piece],
        bytes: &[Option<Vec<u8>>],
        keep: &[usize],
    ) -> Result<(Vec<u8>, Vec<u64>), String> {
        let (k, n) = (self.k(), self.n());
        let chunks: Vec<Option<&[u8]>> = (0..n)
            .map(|p| {
                if keep.contains(&p) {
                    bytes.get(p).and_then(|b| b.as_deref())
                } else {
                    None
                }
            })
            .collect();
        let mut out = vec![0u8; len as usize];
        self.codec
            .reconstruct(&chunks, &[target], &mut [out.as_mut_slice()])
            .map_err(|e| e.to_string())?;
        let kept = |p: usize| pieces.iter().find(|x| x.position == p && keep.contains(&p));
        let parity_seq = |d: usize| (k..n).find_map(|p| kept(p).map(|x| x.seqs[d])).unwrap_or(0);
        let seqs = if target < k {
            vec![parity_seq(target)]
        } else {
            (0..k)
                .map(|d| kept(d).map_or_else(|| parity_seq(d), |x| x.seqs[0]))
                .collect()
        };
        Ok((out, seqs))
    }

    /// Tells the parity positions of the pages this node (a home) wrote how many of their
    /// deltas every position applied, for the pages whose count moved since the last call:
    /// one `Commit` per parity node. A delta carries that count too, but only for its own
    /// page, so without this the last deltas of a page not written again would be kept until
    /// dropped by time (`release_kept_deltas`). What a position did not acknowledge (or a
    /// position down) is told again in the next round.
    pub fn announce_commits(&self) {
        self.collect_commits();
        let per_node = std::mem::take(&mut *lock(&self.whole_commits));
        let mut told = Vec::new();
        let mut calls = Vec::new();
        let mut back = Commits::new();
        for (node, pages) in per_node {
            if pages.is_empty() {
                continue;
            }
            // A position down is told once it is back (a new process keeps nothing: harmless).
            if !self.is_up(node) {
                back.insert(node, pages);
                continue;
            }
            let list = pages.iter().map(|(&(t, i, q, d), &c)| (t, i, q, d, c));
            calls.push((node, Request::Commit(list.collect())));
            told.push((node, pages));
        }
        self.counters
            .whole_commits_sent
            .fetch_add(calls.len() as u64, Ordering::Relaxed);
        let answers = self.call(calls);
        for ((node, pages), answer) in told.into_iter().zip(answers) {
            if !matches!(answer, Ok(Response::Ack)) {
                back.insert(node, pages);
            }
        }
        // Not told: told in the next round, with what moved meanwhile (the larger count wins).
        let mut commits = lock(&self.whole_commits);
        for (node, pages) in back {
            let now = commits.entry(node).or_default();
            for (page, committed) in pages {
                let c = now.entry(page).or_insert(committed);
                *c = (*c).max(committed);
            }
        }
    }

    /// Moves the pages whose deltas every position applied (`Slab::take_announced`) to the
    /// lists of their parity nodes, to be told with the next delta to each.
    fn collect_commits(&self) {
        let (k, n, nodes) = (self.k(), self.n(), self.cfg.node_count);
        let pages = lock(&self.store).slab.take_announced();
        if pages.is_empty() {
            return;
        }
        let mut per_node = lock(&self.whole_commits);
        for (j, committed) in pages {
            let (t, d, q) = whole::page_of(self.cfg.id, j, k, nodes);
            for i in k..n {
                let entry = (t as u32, i as u8, q, d as u8);
                per_node
                    .entry((t + i) % nodes)
                    .or_default()
                    .insert(entry, committed);
            }
        }
    }

    /// Drops the deltas this node keeps as a parity position ([`crate::member::store`]'s kept
    /// deltas) that no rebuild will need: those of a home now up as the process that sent
    /// them, heard from [`KEPT_FOR`] after they arrived (its sends of that write were done
    /// long before: what a position missed is in its queue), and those of an earlier process
    /// of a home whose new process is ready (it rebuilt its pages and realigned what they
    /// tore). Those of a home down stay.
    pub fn release_kept_deltas(&self) {
        let (k, nodes) = (self.k(), self.cfg.node_count);
        let peers: Vec<(bool, bool, Instant, Instant)> = lock(&self.peers)
            .list
            .iter()
            .map(|p| (p.up, p.ready, p.incarnation_since, p.last_ok))
            .collect();
        lock(&self.store).release_kept(|t, d, at| {
            let home = (t as usize + d as usize) % nodes;
            let Some(&(up, ready, since, last_ok)) = peers.get(home) else {
                return false;
            };
            if d as usize >= k || !up {
                return false;
            }
            if at < since {
                ready
            } else {
                last_ok >= at + KEPT_FOR
            }
        });
    }

    /// Brings the parity pieces of page `q` of page stripe `t` that miss deltas of a dead home
    /// (or of this node, rebuilding its own page after a restart) up to the others: a home
    /// killed between its sends of a delta left some parity positions without it (a torn
    /// delta), and with m homes of the page stripe lost no cut of k pieces exists. The parity
    /// positions that applied it keep it until the home says every position did (`committed`
    /// in later deltas), so the deltas one parity position keeps above another's seq for that
    /// home are sent to it, as the home would have, with their location records (the receiver
    /// applies each once). Only when the kept deltas cover every seq missing. Returns the
    /// deltas sent.
    pub(crate) fn complete_torn(&self, t: usize, q: u32) -> usize {
        let (k, nodes, me) = (self.k(), self.cfg.node_count, self.cfg.id);
        let parity: Vec<(usize, Vec<u64>)> = self
            .read_ranges(t, usize::MAX, q, 0, 1)
            .into_iter()
            .filter(|(p, seqs, _)| *p >= k && seqs.len() == k)
            .map(|(p, seqs, _)| (p, seqs))
            .collect();
        let mut sent = 0;
        for d in 0..k {
            let home = (t + d) % nodes;
            if home != me && self.is_up(home) {
                continue;
            }
            let seq_at = |s: &[u64]| Some(s[d]).filter(|&x| x != whole::GAPPED);
            let Some(hi) = parity.iter().filter_map(|(_, s)| seq_at(s)).max() else {
                continue;
            };
            let behind: Vec<(usize, u64)> = parity
                .iter()
                .filter_map(|(p, s)| seq_at(s).filter(|&x| x < hi).map(|x| (*p, x)))
                .collect();
            let Some(lo) = behind.iter().map(|&(_, x)| x).min() else {
                continue;
            };
            let Some(&(ahead, _)) = parity.iter().find(|(_, s)| seq_at(s) == Some(hi)) else {
                continue;
            };
            let ask = Request::Kept {
                page_stripe: t as u32,
                position: ahead as u8,
                page: q,
                data: d as u8,
                above: lo,
            };
            let kept = match self.call(vec![((t + ahead) % nodes, ask)]).pop() {
                Some(Ok(Response::Kept(kept))) => kept,
                _ => continue,
            };
            let mut calls = Vec::new();
            for &(p, from) in &behind {
                let missing: Vec<&crate::carrier::peer::KeptDelta> = kept
                    .iter()
                    .filter(|x| x.seq > from && x.seq <= hi)
                    .collect();
                if missing.len() as u64 != hi - from {
                    log::warn!(
                        "node {me}: parity page {q} of page stripe {t} at position {p} misses \
                         deltas {}..={hi} of data position {d}, and position {ahead} keeps \
                         {} of them",
                        from + 1,
                        missing.len()
                    );
                    continue;
                }
                for x in missing {
                    let Ok((mut header, data)) = record::parse(&x.record) else {
                        continue;
                    };
                    // The record at the receiver's position of the key's stripe.
                    header.chunk_index = (p - d) as u8;
                    let req = Request::Delta {
                        stripe: x.stripe,
                        watermark: 0,
                        record: record::encode(&header, data),
                        page_stripe: t as u32,
                        position: p as u8,
                        page: q,
                        data: d as u8,
                        seq: x.seq,
                        committed: 0,
                        commits: Vec::new(),
                        offset: x.offset,
                        delta: std::sync::Arc::clone(&x.delta),
                    };
                    calls.push(((t + p) % nodes, req));
                }
            }
            for r in self.call(calls) {
                if matches!(r, Ok(Response::Ack)) {
                    sent += 1;
                    bump(&self.counters.whole_deltas_completed);
                }
            }
        }
        if sent > 0 {
            log::warn!(
                "node {me}: page {q} of page stripe {t} was torn by a dead home's deltas: \
                 {sent} sent to the parity positions that missed them"
            );
        }
        sent
    }

    /// Rebuilds, while the node runs, the parity pages that have missed a delta for
    /// [`HEAL_AFTER`] (a later delta of the same data page applied, so the home sent it and
    /// did not send it again: it died, or its queue was dropped). Such a page agrees with no
    /// data page and is left out of every repair, one position less of tolerance for its
    /// stripe; rebuilt from a consistent cut of the others at least as new as what it had
    /// applied, with the deltas that arrive meanwhile applied over it, it is whole again.
    /// At most [`HEAL_PER_ROUND`] pages a round. Returns the pages healed.
    pub fn heal_gapped_pages(&self) -> usize {
        self.heal_pages_gapped_for(HEAL_AFTER)
    }

    /// [`Node::heal_gapped_pages`] of the pages gapped for at least `after`.
    pub(crate) fn heal_pages_gapped_for(&self, after: Duration) -> usize {
        let page_bytes = self.cfg.page_bytes as u32;
        let gapped = lock(&self.store).gapped_parity(after);
        let mut healed = 0;
        for key @ (t, position, q) in gapped.into_iter().take(HEAL_PER_ROUND) {
            let highest = lock(&self.store).begin_heal(key);
            let rebuilt = self
                .rebuild_piece(t as usize, position as usize, q, 0, page_bytes)
                .and_then(|(bytes, seqs)| {
                    let fresh = seqs.len() == highest.len()
                        && seqs.iter().zip(&highest).all(|(s, h)| s >= h);
                    if fresh {
                        Ok((bytes, seqs))
                    } else {
                        Err(format!(
                            "the cut agrees with data pages at {seqs:?}, older than {highest:?}"
                        ))
                    }
                });
            let mut store = lock(&self.store);
            match rebuilt {
                Ok((bytes, seqs)) if store.finish_heal(key, &bytes, &seqs) => {
                    drop(store);
                    bump(&self.counters.whole_pages_healed);
                    healed += 1;
                    log::info!(
                        "node {}: parity page {q} of page stripe {t} (position {position}) \
                         missed a delta: rebuilt",
                        self.cfg.id
                    );
                }
                other => {
                    store.abort_heal(key);
                    drop(store);
                    if let Err(e) = other {
                        log::warn!(
                            "node {}: parity page {q} of page stripe {t} missed a delta and \
                             could not be rebuilt yet: {e}",
                            self.cfg.id
                        );
                    }
                }
            }
        }
        healed
    }

    /// Page `q` of position `target` of page stripe `t` when no read of the other positions
    /// showed a consistent cut for [`PAGE_TRIES`] tries: decoded from k of the pieces as they
    /// are (data pieces first, then parity pieces without a gap), with, per data position, the
    /// highest seq one of those k shows for it. Only pieces that hold still are salvaged: read twice,
    /// 20 ms apart, with the same seqs (a delta in flight would leave a range that agrees with
    /// neither side once it lands).
    ///
    /// This is for a delta torn by a kill (docs/cache.md, "A delta torn by a kill"): some parity positions
    /// applied a dead home's last delta and the others did not, and with m homes of the page
    /// stripe lost at once only k − 1 pieces agree. Outside the torn delta's byte range every
    /// piece agrees, so the decoded page is right there; inside it the bytes were lost with the
    /// m homes and what is decoded fails its records' checks (the slots are not taken, reads
    /// never serve them). The pages every lost position decodes from the same pieces form a
    /// codeword with them, so the page stripe is consistent again; the parity positions behind
    /// the seq installed see a gap at the home's next delta and are healed from a cut
    /// (`heal_gapped_pages`).
    fn salvage_page(&self, t: usize, target: usize, q: u32) -> Result<(Vec<u8>, Vec<u64>), String> {
        let (k, n) = (self.k(), self.n());
        let len = self.cfg.page_bytes as u32;
        let first = self.read_ranges(t, target, q, 0, len);
        std::thread::sleep(Duration::from_millis(20));
        let mut pieces = self.read_ranges(t, target, q, 0, len);
        let seqs_of = |pieces: &[(usize, Vec<u64>, Vec<u8>)]| {
            pieces
                .iter()
                .map(|(p, s, _)| (*p, s.clone()))
                .collect::<Vec<_>>()
        };
        if seqs_of(&first) != seqs_of(&pieces) {
            return Err("no salvage yet: its pieces are still changing".into());
        }
        if pieces.len() < k {
            return Err(format!(
                "no salvage either: {} of the other positions answered, {k} needed",
                pieces.len()
            ));
        }
        let gapped = |seqs: &[u64]| seqs.contains(&whole::GAPPED);
        pieces.sort_by_key(|(p, seqs, _)| (*p >= k, gapped(seqs), *p));
        let used = &pieces[..k];
        let mut chunks: Vec<Option<&[u8]>> = vec![None; n];
        for (p, _, bytes) in used {
            chunks[*p] = Some(bytes);
        }
        let mut out = vec![0u8; len as usize];
        self.codec
            .reconstruct(&chunks, &[target], &mut [out.as_mut_slice()])
            .map_err(|e| format!("no salvage either: {e}"))?;
        // Per data position, the highest seq a piece decoded from shows for it (gaps aside):
        // the page is one codeword with those pieces, whatever their seqs say.
        let seq_of = |d: usize| {
            used.iter()
                .filter_map(|(p, seqs, _)| match (*p < k, seqs.as_slice()) {
                    (true, [s]) if *p == d => Some(*s),
                    (false, s) if s.len() == k && s[d] != whole::GAPPED => Some(s[d]),
                    _ => None,
                })
                .max()
                .unwrap_or(0)
        };
        let seqs = if target < k {
            vec![seq_of(target)]
        } else {
            (0..k).map(seq_of).collect()
        };
        bump(&self.counters.whole_pages_salvaged);
        log::warn!(
            "node {}: page {q} of page stripe {t} showed no consistent cut (a delta torn by a \
             kill?): position {target} decoded from positions {:?} as they are; records in the \
             torn range fail their checks and are not taken",
            self.cfg.id,
            used.iter().map(|(p, _, _)| *p).collect::<Vec<_>>()
        );
        Ok((out, seqs))
    }

    /// After a restart (`--recover`): rebuilds every page this node held — its slab pages as a
    /// home and its parity pages — from the other positions of their page stripes, then takes
    /// the slots of its whole values in the rebuilt slab as their records (found from the
    /// location records of its stripe's members). Deltas that arrive meanwhile are kept and
    /// applied to their page once it is rebuilt. Rate-limited like the rest of recovery; on
    /// success the node writes whole values again. Returns bytes rebuilt.
    pub(crate) fn rebuild_pages(&self) -> Result<u64, String> {
        let (k, n, nodes, me) = (self.k(), self.n(), self.cfg.node_count, self.cfg.id);
        let page_bytes = self.cfg.page_bytes;
        let started = std::time::Instant::now();
        let mut done = 0u64;
        // How many pages each position holds, first: the progress shown is of them all.
        let mut pages_at = Vec::with_capacity(n);
        for i in 0..n {
            let t = (me + nodes - i) % nodes;
            let calls: Vec<(usize, Request)> = (0..n)
                .filter(|&p| p != i)
                .map(|p| {
                    (
                        (t + p) % nodes,
                        Request::Pages {
                            stripe: t as u32,
                            page_stripe: t as u32,
                            position: p as u8,
                        },
                    )
                })
                .collect();
            let pages = self
                .call(calls)
                .into_iter()
                .filter_map(|r| match r {
                    Ok(Response::Range { seqs, .. }) => seqs.first().copied(),
                    _ => None,
                })
                .max()
                .unwrap_or(0) as u32;
            pages_at.push(pages);
        }
        self.counters.whole_pages_to_rebuild.store(
            pages_at.iter().map(|&p| u64::from(p)).sum(),
            Ordering::Relaxed,
        );
        for (i, &pages) in pages_at.iter().enumerate() {
            let t = (me + nodes - i) % nodes;
            for q in 0..pages {
                // A page under steady writes may show no consistent cut for a while: patience.
                let mut tries = 0;
                // A home takes its own page back at the newest seq a cut of k shows.
                let choose = |pieces: &[Piece]| match i < k {
                    true => whole::consistent_newest(pieces, k, i),
                    false => whole::consistent(pieces, k),
                };
                let mut completed = false;
                let (bytes, seqs, read) = loop {
                    let rebuilt = self.rebuild_piece_by(t, i, q, (0, page_bytes as u32), choose);
                    // This home's own last deltas torn (its parity pieces disagree on its seq):
                    // those kept are sent on first, and the page read again, so that it comes
                    // back with them rather than undoing them.
                    let own_torn = |(_, _, read): &RebuiltPiece| {
                        let mut seqs = read
                            .iter()
                            .filter(|p| p.position >= k && p.seqs.len() == k)
                            .map(|p| p.seqs[i]);
                        seqs.next()
                            .is_some_and(|first| seqs.any(|s| s != first && s != whole::GAPPED))
                    };
                    if i < k && !completed && rebuilt.as_ref().is_ok_and(own_torn) {
                        completed = true;
                        if self.complete_torn(t, q) > 0 {
                            continue;
                        }
                    }
                    if rebuilt.is_err() && tries % 10 == 0 {
                        // No cut of k: a dead home's last deltas may have reached only some
                        // parity positions, which keep them; sent to the others, the cut is
                        // whole again.
                        self.complete_torn(t, q);
                    }
                    match rebuilt {
                        Ok(piece) => break piece,
                        // Then salvaged, once its pieces hold still (as many tries again).
                        Err(e) if tries >= PAGE_TRIES => match self.salvage_page(t, i, q) {
                            Ok((bytes, seqs)) => break (bytes, seqs, Vec::new()),
                            Err(salvage) if tries >= 2 * PAGE_TRIES => {
                                return Err(format!("{e}; {salvage}"))
                            }
                            Err(_) => {
                                tries += 1;
                                std::thread::sleep(Duration::from_millis(100));
                            }
                        },
                        Err(_) => {
                            tries += 1;
                            std::thread::sleep(Duration::from_millis(100));
                        }
                    }
                };
                let mut store = lock(&self.store);
                if i < k {
                    store.install_page(whole::home_page(i, q, k), &bytes, seqs[0]);
                } else {
                    store.install_parity((t as u32, i as u8, q), &bytes, &seqs);
                }
                drop(store);
                // Parity pages that disagree on this home's seq: its last deltas were torn (a
                // salvaged page is checked too: its parity pieces may disagree).
                let torn = |p: &Piece| p.position >= k && p.seqs.get(i) != Some(&seqs[0]);
                if i < k && (read.is_empty() || read.iter().any(torn)) {
                    self.realign_torn(t, i, q, seqs[0], &bytes);
                }
                bump(&self.counters.whole_pages_rebuilt);
                done += page_bytes as u64;
                self.counters
                    .recovery_bytes
                    .fetch_add(page_bytes as u64, Ordering::Relaxed);
                let due = Duration::from_secs_f64(
                    done as f64 / self.cfg.recovery_bytes_per_s.max(1) as f64,
                );
                if let Some(wait) = due.checked_sub(started.elapsed()) {
                    std::thread::sleep(wait);
                }
            }
        }
        // The slots of this node's whole values, from its stripe's location records.
        let calls: Vec<(usize, Request)> = self
            .placement
            .members(me)
            .into_iter()
            .filter(|&node| node != me)
            .map(|node| (node, Request::List { stripe: me as u32 }))
            .collect();
        // Per key: the newest version's location (with its record), and the version each
        // parity position holds.
        type Newest = (u64, Option<(WholeAt, record::Header)>);
        let mut newest: HashMap<Vec<u8>, Newest> = HashMap::new();
        let mut held: HashMap<(Vec<u8>, u8), u64> = HashMap::new();
        for r in self.call(calls) {
            let Ok(Response::Headers(records, _)) = r else {
                continue;
            };
            for bytes in records {
                let Ok((h, data)) = record::parse(&bytes) else {
                    continue;
                };
                let at = (h.kind == Kind::Whole && h.chunk_index != 0)
                    .then(|| WholeAt::from_bytes(data))
                    .flatten();
                let v = held.entry((h.key.clone(), h.chunk_index)).or_insert(0);
                *v = (*v).max(h.version);
                let e = newest.entry(h.key.clone()).or_insert((0, None));
                if h.version > e.0 || (h.version == e.0 && e.1.is_none()) {
                    *e = (h.version, at.map(|at| (at, h)));
                }
            }
        }
        let mut store = lock(&self.store);
        let mut linked = 0;
        // A parity position of a linked value's page that holds an older location record of
        // it (its home died before its delta reached that position, and the page was
        // realigned forward) gets the newest: were the position that holds it lost too, a
        // stand-in would otherwise serve the older version.
        let mut behind = Vec::new();
        for (i, (key, (version, found))) in newest.into_iter().enumerate() {
            let Some((at, mut header)) = found else {
                continue;
            };
            // The store's lock is let go between batches: linked in one hold, 222,000 values
            // kept the event loop (and the heartbeats it answers) waiting about 1.8 s on a
            // loaded machine. Each link stands alone (it checks the slot and the key's newer
            // records under the lock), and the node writes nothing whole until
            // `finish_rebuild` below.
            if i % LINK_BATCH == LINK_BATCH - 1 {
                drop(store);
                // (A waiter woken by the unlock gets its turn before this thread takes the lock
                // again.)
                std::thread::yield_now();
                store = lock(&self.store);
            }
            if !store.link_whole(me as u32, &key, version, at) {
                continue;
            }
            linked += 1;
            let (_, d, _) = whole::page_of(me, at.page, k, nodes);
            for p in k - d..n - d {
                if held
                    .get(&(key.clone(), p as u8))
                    .is_some_and(|&v| v >= version)
                {
                    continue;
                }
                header.chunk_index = p as u8;
                let req = Request::Put {
                    stripe: me as u32,
                    watermark: 0,
                    record: record::encode(&header, &at.to_bytes()),
                };
                behind.push((self.placement.node_of(me, p), req));
            }
        }
        store.finish_rebuild();
        drop(store);
        let sent = behind.len();
        let restored = self
            .call(behind)
            .into_iter()
            .filter(|r| matches!(r, Ok(Response::Ack)))
            .count();
        self.pages_lost.store(false, Ordering::Relaxed);
        log::info!(
            "node {me}: pages rebuilt ({} MiB), {linked} whole values found in them; \
             {restored} of {sent} older location records brought up to date",
            done >> 20
        );
        Ok(done)
    }
}
