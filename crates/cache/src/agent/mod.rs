//! The agent of a stripe: routes each key's operation to its agent, keeps the stripe's index
//! (rebuilt from the members when it leads anew) and runs memcached's operations under the
//! key's lock: reads ([`read`]), writes ([`write`](mod@write)) and, on the event loop, the gets and sets
//! run to completion (`loop_read`, `loop_write`).

use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use crate::carrier::peer::{AgentOp, AgentResult, Attempt, PeerError, Request, Response};
use crate::cluster::stripe;
use crate::node::{bump, key_lock_index, lock, Node};
use crate::record::{self, Header, Kind};
use crate::time;
use index::{Entry, Gone, StripeIndex};

/// What an error answered to a write says when the write may have been applied (its fate is
/// unknown to the node answering); every answer to a later try of a write that refuses it
/// says so too.
pub const MAY_HAVE_APPLIED: &str = "may or may not have been applied";

pub mod index;
pub(crate) mod keylock;
mod loop_notice;
mod loop_read;
mod loop_write;
pub(crate) mod once;
pub mod read;
mod rewhole;
pub mod whole;
pub mod write;
pub use loop_notice::{LoopGatFetch, LoopGatStart, LoopNotice, LoopNoticeStart};
pub use loop_read::{LoopPending, LoopRead, LoopValue, PLAN_STEP};
pub use loop_write::{LoopModify, LoopModifyStart, LoopWrite, LoopWriteStart, Modify, StoreIf};

impl Node {
    /// Runs an operation at the agent of the key's stripe, wherever it is: locally, or
    /// forwarded over the peer connection. Retries while the cluster's views settle. A write
    /// sent to an agent that sent no reply is tried again as a retry if it has a request id
    /// (answered from the key's records or refused, never applied twice: `once`), and is in
    /// doubt otherwise.
    pub fn route(&self, stripe: usize, mut op: AgentOp) -> AgentResult {
        let settle = self.cfg.down_after * 2 + Duration::from_millis(500);
        let mut deadline = Instant::now() + settle;
        // Some try of the write went unanswered (or this is a later try): a final refusal must
        // say it may have applied.
        let mut tried_unanswered = op.once().is_some_and(|o| o.attempt != Attempt::First);
        // Tries that went unanswered: each waits out the peer timeout, so a few are enough.
        let mut unanswered = 0;
        loop {
            let Some(agent) = self.agent_of(stripe) else {
                return match self.unavailable(stripe) {
                    AgentResult::Error(e) if tried_unanswered => {
                        bump(&self.counters.writes_in_doubt);
                        AgentResult::Error(format!(
                            "the request {MAY_HAVE_APPLIED} (a try went unanswered): {e}"
                        ))
                    }
                    other => other,
                };
            };
            let res =
                if agent == self.cfg.id {
                    self.agent(op.clone())
                } else {
                    bump(&self.counters.forwarded);
                    match self.call(vec![(agent, Request::Agent(op.clone()))]).pop() {
                        Some(Ok(Response::Agent(r))) => r,
                        Some(Ok(other)) => AgentResult::Error(format!(
                            "node {agent} answered an agent request with {other:?}{}",
                            if op.repeatable() {
                                ""
                            } else {
                                ": the request may or may not have been applied"
                            }
                        )),
                        // Sent, and no reply (or one that could not be read): the agent may have
                        // applied it. A write is not sent again blind (it could act twice, the
                        // second time over later writes); one with a request id is tried again
                        // as a retry, once the views settle.
                        Some(Err(
                            e @ (PeerError::NoReply { .. } | PeerError::Malformed { .. }),
                        )) if !op.repeatable() => match op.retried() {
                            Some(retry) if unanswered < 3 => {
                                unanswered += 1;
                                log::debug!("{e}: the write is tried again as a retry");
                                op = retry;
                                tried_unanswered = true;
                                deadline = deadline.max(Instant::now() + settle);
                                AgentResult::NotAgent
                            }
                            _ => {
                                bump(&self.counters.writes_in_doubt);
                                return AgentResult::Error(format!(
                                    "{e}: the request may or may not have been applied"
                                ));
                            }
                        },
                        Some(Err(_)) | None => AgentResult::NotAgent,
                    }
                };
            if res != AgentResult::NotAgent {
                return res;
            }
            if Instant::now() >= deadline {
                if tried_unanswered {
                    bump(&self.counters.writes_in_doubt);
                }
                return AgentResult::Error(format!(
                    "{}no agent of stripe {stripe} answers (views of the cluster disagree)",
                    if tried_unanswered {
                        "the request may or may not have been applied (a try went unanswered): "
                    } else {
                        ""
                    }
                ));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Routes a key's operation.
    pub fn route_key(&self, op: AgentOp, key: &[u8]) -> AgentResult {
        self.route(self.placement.stripe_of(key), op)
    }

    pub(crate) fn down_members(&self, stripe: usize) -> Vec<usize> {
        let mut down: Vec<usize> = (0..self.n())
            .map(|p| self.placement.node_of(stripe, p))
            .filter(|&n| !self.is_up(n))
            .collect();
        down.dedup();
        down
    }

    pub(crate) fn down_positions(&self, stripe: usize) -> usize {
        let peers = lock(&self.peers);
        (0..self.n())
            .map(|p| self.placement.node_of(stripe, p))
            .filter(|&node| node != self.cfg.id && !peers[node].up)
            .count()
    }

    pub(crate) fn unavailable(&self, stripe: usize) -> AgentResult {
        bump(&self.counters.server_errors);
        AgentResult::Error(format!(
            "stripe {stripe} unavailable: {} of {} chunk positions down (nodes {:?}), {} tolerates {}",
            self.down_positions(stripe),
            self.n(),
            self.down_members(stripe),
            self.cfg.code,
            self.parity()
        ))
    }

    /// `flush_all`: every node forgets items stored up to the flush time once it has passed.
    pub fn flush_all(&self, delay_secs: i64) {
        bump(&self.counters.cmd_flush);
        let now = time::now_micros();
        let at = if delay_secs > 0 {
            now + delay_secs as u64 * 1_000_000
        } else {
            now
        };
        let calls = (0..self.cfg.node_count)
            .map(|i| (i, Request::Flush { oldest_live_us: at }))
            .collect();
        self.call(calls);
    }

    pub(crate) fn key_lock(&self, key: &[u8]) -> keylock::KeyGuard {
        self.key_locks.lock(key_lock_index(key))
    }

    /// Runs `f` on this node's index of `stripe`, rebuilding it from the members' records when
    /// there is none (this node just became the agent, or its index was dropped).
    ///
    /// The rebuild asks the members for their records without holding the stripe's lock: no
    /// lock that the event loop takes is held over a wait on another node, whose own loop may
    /// be waiting for this node's loop to answer. One thread rebuilds a stripe's index at a
    /// time (`Node::rebuilding`); one that wants it meanwhile waits and takes the index that
    /// rebuild kept. (Before, each thread rebuilt its own and the first in was kept: at
    /// 200,000 keys a stripe a takeover then ran two or three rebuilds of a second each side by
    /// side, the expiry thread's and the operations'.) A rebuilt index is kept only if this
    /// node led the stripe before and after the rebuild and heard enough members
    /// ([`Node::index_keepable`]); otherwise (an operation under way whose index was dropped
    /// meanwhile) `f` runs on it and it is dropped.
    pub(crate) fn with_index<T>(&self, stripe: usize, f: impl FnOnce(&mut StripeIndex) -> T) -> T {
        if let Some(ix) = lock(&self.stripes[stripe]).as_mut() {
            return f(ix);
        }
        let rebuilding = lock(&self.rebuilding[stripe]);
        {
            let mut ix = lock(&self.stripes[stripe]);
            if let Some(ix) = ix.as_mut() {
                drop(rebuilding);
                return f(ix);
            }
        }
        let leading = self.leads(stripe);
        let mut built = self.rebuild_index(stripe);
        if !(leading && self.index_keepable(stripe, &built)) {
            drop(rebuilding);
            log::debug!(
                "stripe {stripe}: rebuilt index not kept (leading before: {leading}, {} \
                 positions unheard)",
                built.unheard
            );
            return f(&mut built);
        }
        let mut ix = lock(&self.stripes[stripe]);
        drop(rebuilding);
        f(ix.get_or_insert(built))
    }

    /// Whether `built`, an index of `stripe` just rebuilt, may be kept: this node leads the
    /// stripe, and at most m of its positions are down now and at most m went unheard by the
    /// rebuild (their members were down when it asked, or did not answer). With more, values
    /// with fewer than k chunks among the members heard would be missing from it, and the
    /// index would answer misses for them. (Counting only the positions down once the members
    /// have answered is not enough: `inec nemesis` found an index rebuilt from the five nodes
    /// on the agent's side of a cut of four kept because one of the four came back up while
    /// the others answered, and a value acknowledged before the cut answered as a miss.)
    pub(crate) fn index_keepable(&self, stripe: usize, built: &StripeIndex) -> bool {
        self.leads(stripe)
            && built.unheard <= self.parity()
            && self.down_positions(stripe) <= self.parity()
    }

    /// Makes sure the index of `stripe` exists before an operation starts on it: `None` when it
    /// does, or the answer when it could not be built and kept (more than m positions down, or
    /// the lease lost meanwhile).
    pub(crate) fn ensure_index(&self, stripe: usize) -> Option<AgentResult> {
        let unavailable = || self.down_positions(stripe) > self.parity();
        if lock(&self.stripes[stripe]).is_some() {
            return None;
        }
        if !unavailable() {
            self.with_index(stripe, |_| ());
            if lock(&self.stripes[stripe]).is_some() {
                return None;
            }
        }
        Some(if unavailable() {
            self.unavailable(stripe)
        } else {
            AgentResult::NotAgent
        })
    }

    pub(crate) fn rebuild_index(&self, stripe: usize) -> StripeIndex {
        bump(&self.counters.index_rebuilds);
        let started = Instant::now();
        let mut ix =
            StripeIndex::new(self.n(), self.share_bytes()).with_whole_rule(self.whole_rule());
        let mut nodes: Vec<usize> = self.placement.members(stripe);
        nodes.sort_unstable();
        nodes.dedup();
        let calls: Vec<(usize, Request)> = nodes
            .into_iter()
            .filter(|&n| self.is_up(n))
            .map(|n| {
                (
                    n,
                    Request::List {
                        stripe: stripe as u32,
                    },
                )
            })
            .collect();
        let mut headers: Vec<Header> = Vec::new();
        let mut deleted: HashMap<Vec<u8>, u64> = HashMap::new();
        let asked: Vec<usize> = calls.iter().map(|(n, _)| *n).collect();
        let replies = self.call(calls);
        let heard: Vec<usize> = asked
            .iter()
            .zip(&replies)
            .filter(|(_, r)| matches!(r, Ok(Response::Headers(..))))
            .map(|(&n, _)| n)
            .collect();
        let unheard = (0..self.n())
            .filter(|&p| !heard.contains(&self.placement.node_of(stripe, p)))
            .count();
        log::debug!("stripe {stripe}: index rebuilt from {asked:?}, {heard:?} answered");
        ix.unheard = unheard;
        // Whole values' locations, from the location records the answers carry whole: the
        // header each came with, and where.
        let mut located: Vec<(usize, record::WholeAt)> = Vec::new();
        for r in replies {
            if let Ok(Response::Headers(hs, tombs)) = r {
                headers.reserve(hs.len());
                for (h, data) in hs.iter().filter_map(|h| record::parse(h).ok()) {
                    if h.kind == Kind::Whole && h.chunk_index != 0 {
                        if let Some(at) = record::WholeAt::from_bytes(data) {
                            located.push((headers.len(), at));
                        }
                    }
                    headers.push(h);
                }
                for (key, version) in tombs {
                    ix.observe_version(version);
                    let at = deleted.entry(key).or_insert(0);
                    *at = (*at).max(version);
                }
            }
        }
        for h in &headers {
            ix.observe_version(h.version);
        }
        let locations: hashbrown::HashMap<(&[u8], u64), record::WholeAt> = located
            .into_iter()
            .map(|(i, at)| ((headers[i].key.as_slice(), headers[i].version), at))
            .collect();
        let now = time::now_secs();
        let replicas = self.replicas();
        for (key, a) in stripe::adopt(&headers, self.k(), unheard) {
            // Deleted after this version was written: a member that missed the delete (cut
            // off, stopped) still holds it, and it must not come back.
            if time::is_expired(a.exptime, now) || deleted.get(&key).is_some_and(|&d| d > a.version)
            {
                continue;
            }
            let (positions, charge) = index::charge(
                a.kind,
                key.len(),
                a.value_bytes,
                self.k(),
                self.n(),
                replicas,
            );
            // A replicated value written around members that were down has replicas past
            // the first `replicas` positions (`Node::replica_span`).
            let held_span = (u64::BITS - a.held.leading_zeros()) as usize;
            let positions = if a.kind == Kind::Replica {
                positions.max(held_span.min(self.n()))
            } else {
                positions
            };
            let mut entry = Entry::new(
                a.version,
                a.value_bytes,
                a.flags,
                a.exptime,
                a.kind,
                a.version,
                positions,
                charge,
            );
            // Positions without this version's record (their node is down, missed the write
            // or holds another version) are filled in the background once their node is up.
            // A whole value has no holes to fill (its home's slot is rebuilt from its page's
            // stripe when read).
            entry.holes = if a.kind == Kind::Whole {
                0
            } else {
                index::position_mask(positions) & !a.held
            };
            entry.trail = a.trail;
            entry.whole_at = locations.get(&(key.as_slice(), a.version)).copied();
            log::debug!(
                "stripe {stripe}: {} v{} adopted (held {:#b})",
                String::from_utf8_lossy(&key),
                a.version,
                a.held
            );
            ix.adopt(&key, entry);
        }
        // What a takeover waits for before the stripe's first request: the members' listings
        // and the adoption of every key.
        // (Rounded up: a rebuild that ran counts one microsecond at least.)
        let took_us = (started.elapsed().as_nanos() as u64).div_ceil(1000);
        let c = &self.counters;
        c.index_rebuild_us_last.store(took_us, Ordering::Relaxed);
        c.index_rebuild_us_max.fetch_max(took_us, Ordering::Relaxed);
        c.index_rebuild_us_total
            .fetch_add(took_us, Ordering::Relaxed);
        log::info!(
            "stripe {stripe}: index rebuilt in {:.1} ms, {} keys from {} records",
            took_us as f64 / 1000.0,
            ix.len(),
            headers.len()
        );
        ix
    }

    /// Runs an operation as the agent of its key's stripe.
    pub fn agent(&self, op: AgentOp) -> AgentResult {
        // A later try of a write may follow one that was applied (or left records a rebuild
        // may still adopt): whatever refuses it must not say that nothing was applied.
        let retry = op.once().is_some_and(|o| o.attempt != Attempt::First);
        match self.agent_try(op) {
            AgentResult::Error(e) if retry && !e.contains(MAY_HAVE_APPLIED) => AgentResult::Error(
                format!("the request {MAY_HAVE_APPLIED} (an earlier try of it may have been): {e}"),
            ),
            res => res,
        }
    }

    /// [`Node::agent`] for one try.
    fn agent_try(&self, op: AgentOp) -> AgentResult {
        let key = match &op {
            AgentOp::Get { key, .. }
            | AgentOp::Store { key, .. }
            | AgentOp::Delete { key, .. }
            | AgentOp::Touch { key, .. }
            | AgentOp::Arith { key, .. }
            | AgentOp::Flip { key, .. }
            | AgentOp::Repair { key, .. } => key.clone(),
            AgentOp::Handover { stripe, to } => {
                let (s, to) = (*stripe as usize, *to as usize);
                if s >= self.cfg.node_count || to >= self.cfg.node_count {
                    return AgentResult::Error("bad handover".into());
                }
                self.yield_stripe(s, to);
                *lock(&self.stripes[s]) = None;
                // Every operation of the stripe checks `leads` again under its key lock: once
                // each key lock has been free once, none of them is still under way.
                self.key_locks.each_freed_once();
                return AgentResult::Ok;
            }
            AgentOp::Keys { stripe } => {
                let s = *stripe as usize;
                if s >= self.cfg.node_count || !self.leads(s) {
                    return AgentResult::NotAgent;
                }
                if let Some(refused) = self.ensure_index(s) {
                    return refused;
                }
                return self.with_index(s, |ix| {
                    AgentResult::Keys(ix.entries().map(|(k, e)| (k.to_vec(), e.version)).collect())
                });
            }
        };
        let stripe = self.placement.stripe_of(&key);
        if !self.leads(stripe) {
            return AgentResult::NotAgent;
        }
        let _key_guard = self.key_lock(&key);
        if !self.leads(stripe) {
            return AgentResult::NotAgent;
        }
        self.drop_stale_index(stripe);
        if let Some(refused) = self.ensure_index(stripe) {
            return refused;
        }
        let repeatable = op.repeatable();
        let res = self.agent_op(stripe, op);
        // The lease must still hold once the operation is done: otherwise another node may
        // have led the stripe meanwhile. A read is retried there by the front; a write may
        // have been applied (and adopted by that node), so it is in doubt, not run again.
        if !self.leads(stripe) {
            bump(&self.counters.lease_lost_ops);
            if repeatable {
                return AgentResult::NotAgent;
            }
            bump(&self.counters.writes_in_doubt);
            return AgentResult::Error(format!(
                "the lease of stripe {stripe} ran out during the write: it may or may not \
                 have been applied"
            ));
        }
        res
    }

    /// The operation of [`Node::agent`] once the stripe's lead and key lock are held.
    pub(crate) fn agent_op(&self, stripe: usize, op: AgentOp) -> AgentResult {
        // More than m positions down: the stripe's values may be unreadable and an index rebuilt
        // now may miss keys, so every operation fails with the reason (never a wrong miss).
        if self.down_positions(stripe) > self.parity() {
            return self.unavailable(stripe);
        }
        match op {
            AgentOp::Get {
                key,
                touch,
                degrade,
            } => self.op_get(stripe, &key, touch, degrade),
            AgentOp::Store {
                mode,
                key,
                flags,
                exptime,
                compare_cas,
                value,
                once,
            } => self.op_store(stripe, &key, mode, flags, exptime, compare_cas, value, once),
            AgentOp::Delete { key, compare_cas } => self.op_delete(stripe, &key, compare_cas),
            AgentOp::Touch { key, exptime } => {
                let Some(e) = self.lookup(stripe, &key) else {
                    return AgentResult::NotFound;
                };
                self.touch_entry(stripe, &key, &e, exptime);
                AgentResult::Touched
            }
            AgentOp::Arith {
                incr,
                key,
                delta,
                once,
                meta,
            } => self.op_arith(stripe, &key, incr, delta, once, meta),
            AgentOp::Flip { key, position, bit } => {
                let Some(e) = self.lookup(stripe, &key) else {
                    return AgentResult::NotFound;
                };
                if position as usize >= e.positions {
                    return AgentResult::Error(format!(
                        "key has no chunk at position {position} (positions 0..{})",
                        e.positions
                    ));
                }
                let node = self.placement.node_of(stripe, position as usize);
                match self
                    .call(vec![(
                        node,
                        Request::Flip {
                            stripe: stripe as u32,
                            position,
                            key,
                            bit,
                        },
                    )])
                    .pop()
                {
                    Some(Ok(Response::Ack)) => AgentResult::Ok,
                    Some(Ok(Response::Nack(r))) => AgentResult::Error(r),
                    _ => AgentResult::Error(format!("node {node} unreachable")),
                }
            }
            AgentOp::Repair {
                key,
                version,
                position,
            } => {
                let Some(e) = self.lookup(stripe, &key) else {
                    return AgentResult::NotFound;
                };
                if e.version != version {
                    return AgentResult::Exists;
                }
                if e.kind == Kind::Whole && position != 0 {
                    // A location record, at the parity positions of the value's page.
                    return match self.whole_location_record(stripe, &key, &e, position as usize) {
                        Some(rec) => AgentResult::Record(rec),
                        None => AgentResult::NotFound,
                    };
                }
                if position as usize >= e.positions {
                    return AgentResult::NotFound;
                }
                match self.repair_chunk(stripe, &key, &e, position as usize) {
                    Ok(data) => {
                        // The recovering node stores it.
                        self.with_index(stripe, |ix| {
                            ix.clear_holes(&key, e.version, index::bit(position as usize))
                        });
                        AgentResult::Record(record::encode(
                            &self.header(&key, &e, position as usize),
                            &data,
                        ))
                    }
                    Err(err) => AgentResult::Error(err),
                }
            }
            AgentOp::Keys { .. } | AgentOp::Handover { .. } => unreachable!("handled above"),
        }
    }

    pub(crate) fn replicas(&self) -> usize {
        (self.parity() + 1).min(self.n())
    }

    /// The live entry of a key; an expired or flushed one is deleted on the members.
    pub(crate) fn lookup(&self, stripe: usize, key: &[u8]) -> Option<Entry> {
        let oldest = self.oldest_live_us.load(Ordering::Relaxed);
        let r = self.with_index(stripe, |ix| {
            ix.lookup(key, time::now_secs(), time::now_micros(), oldest)
        });
        match r {
            Ok(e) => e,
            Err((gone, e)) => {
                match gone {
                    Gone::Expired => bump(&self.counters.get_expired),
                    Gone::Flushed => bump(&self.counters.get_flushed),
                }
                self.delete_records(stripe, key, e.version + 1);
                None
            }
        }
    }

    pub(crate) fn member_nodes(&self, stripe: usize, positions: usize) -> Vec<usize> {
        let mut nodes: Vec<usize> = (0..positions)
            .map(|p| self.placement.node_of(stripe, p))
            .collect();
        nodes.sort_unstable();
        nodes.dedup();
        nodes
    }

    pub(crate) fn delete_records(&self, stripe: usize, key: &[u8], version: u64) {
        self.delete_records_at(stripe, key, version, self.member_nodes(stripe, self.n()));
    }

    /// Deletes the key's records older than `version` at those of `nodes` that are up.
    pub(crate) fn delete_records_at(
        &self,
        stripe: usize,
        key: &[u8],
        version: u64,
        nodes: impl IntoIterator<Item = usize>,
    ) {
        let calls = nodes
            .into_iter()
            .filter(|&n| self.is_up(n))
            .map(|n| {
                (
                    n,
                    Request::Delete {
                        stripe: stripe as u32,
                        key: key.to_vec(),
                        version,
                    },
                )
            })
            .collect();
        self.call(calls);
    }

    pub(crate) fn touch_entry(&self, stripe: usize, key: &[u8], e: &Entry, exptime: i64) {
        let abs = time::absolute_exptime(exptime, time::now_secs());
        let missed = self.touch_misses(stripe, e);
        self.with_index(stripe, |ix| {
            ix.set_exptime(key, abs);
            ix.mark_holes(key, e.version, missed);
        });
        let calls = self
            .member_nodes(stripe, self.touch_reach(e))
            .into_iter()
            .filter(|&n| self.is_up(n))
            .map(|n| {
                (
                    n,
                    Request::Touch {
                        stripe: stripe as u32,
                        key: key.to_vec(),
                        version: e.version,
                        exptime: abs,
                    },
                )
            })
            .collect();
        self.call(calls);
    }

    /// The positions of `e` whose node is down, and so misses a touch of it: marked as holes
    /// of the entry, they are written again with the new expiry once their node is back (hole
    /// filling), so an index rebuilt from the records later does not take the old expiry
    /// from one of them. For a value stored split, its coded chunks or replicas; for a whole
    /// value, the other positions of the stripe (those that are parity positions of its page
    /// keep its location record, which carries the expiry; its home keeps the record's bytes
    /// through a touch).
    pub(crate) fn touch_misses(&self, stripe: usize, e: &Entry) -> u64 {
        let (first, reach) = if e.kind == Kind::Whole {
            (1, self.n())
        } else {
            (0, e.positions)
        };
        (first..reach)
            .filter(|&p| !self.is_up(self.placement.node_of(stripe, p)))
            .fold(0, |mask, p| mask | index::bit(p))
    }

    /// Items and value bytes of the stripes this node leads; evictions; footprint
    /// (`StripeIndex::footprint`).
    pub fn agent_totals(&self) -> (u64, u64, u64, [u64; 6]) {
        let (mut items, mut bytes, mut evictions) = (0, 0, 0);
        let mut fp = [0u64; 6];
        for s in &self.stripes {
            if let Some(ix) = lock(s).as_ref() {
                items += ix.len() as u64;
                evictions += ix.evictions;
                let f = ix.footprint();
                bytes += f[0] + f[1] + f[4];
                for i in 0..6 {
                    fp[i] += f[i];
                }
            }
        }
        (items, bytes, evictions, fp)
    }
}
