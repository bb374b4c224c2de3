//! The agent's writes: a value cut into records (coded or replicated), stored on every live
//! member, memcached's storage rules, deletes and incr/decr.

use std::sync::atomic::Ordering;

use proto::StoreMode;

use crate::agent::index::{self, Entry};
use crate::agent::whole::WholeFail;
use crate::carrier::peer::{AgentResult, ArithMeta, Once, Request, Response};
use crate::carrier::plans::WriteMeta;
use crate::cluster::stripe;
use crate::node::{bump, Node, TOO_LARGE};
use crate::record::{self, Kind};
use crate::semantics::{self, Decision};
use crate::time;

impl Node {
    /// The records of a value at every position that holds it.
    pub(crate) fn records_of(
        &self,
        key: &[u8],
        e: &Entry,
        value: &[u8],
    ) -> Result<Vec<Vec<u8>>, String> {
        match e.kind {
            Kind::Whole => Err("a whole value is written by `write_whole`".into()),
            Kind::Replica => Ok((0..e.positions)
                .map(|p| record::encode(&self.header(key, e, p), value))
                .collect()),
            Kind::Coded => {
                let chunks = stripe::encode(&self.codec, value)
                    .map_err(|err| format!("encode failed: {err}"))?;
                Ok(chunks
                    .iter()
                    .enumerate()
                    .map(|(p, c)| record::encode(&self.header(key, e, p), c))
                    .collect())
            }
        }
    }

    /// How a value is stored: whole (`Node::whole_ok`), or coded or replicated (by its size),
    /// on how many positions, and the bytes it charges at each.
    pub(crate) fn layout_of(&self, stripe: usize, key: &[u8], value: &[u8]) -> (Kind, usize, u64) {
        if self.whole_ok(stripe, key, value.len()) {
            let (positions, charge) = index::charge(
                Kind::Whole,
                key.len(),
                value.len() as u64,
                self.k(),
                self.n(),
                self.replicas(),
            );
            return (Kind::Whole, positions, charge);
        }
        self.split_layout_of(key, value)
    }

    /// The split layout of a value: coded or replicated, by its size.
    pub(crate) fn split_layout_of(&self, key: &[u8], value: &[u8]) -> (Kind, usize, u64) {
        let kind = if value.len() < self.cfg.replicate_below_bytes {
            Kind::Replica
        } else {
            Kind::Coded
        };
        let (positions, charge) = index::charge(
            kind,
            key.len(),
            value.len() as u64,
            self.k(),
            self.n(),
            self.replicas(),
        );
        (kind, positions, charge)
    }

    /// The positions a replicated value of `replicas` copies is written to: the first ones of
    /// the stripe, and past them as many more as the first have members down, so that the
    /// value has that many copies on members that are up (the down ones are holes). An index
    /// rebuilt later hears every position but at most m (`Node::index_keepable`), fewer than
    /// the copies, so it finds the value; were the copies the agent's alone (three of four
    /// replica positions down), a rebuild by another node while the agent stalls would find
    /// only the value this write replaced, and serve it.
    pub(crate) fn replica_span(&self, stripe: usize, replicas: usize) -> usize {
        let mut up = 0;
        let mut span = 0;
        while span < self.n() && up < replicas {
            if self.is_up(self.placement.node_of(stripe, span)) {
                up += 1;
            }
            span += 1;
        }
        span.max(replicas)
    }

    /// Writes a value as a new version: evicts LRU values if the stripe's share is full, sends
    /// every live member its record and commits once every live member acked. `id`: the
    /// request id of the write (`agent::once`), which the records carry.
    pub(crate) fn write(
        &self,
        stripe: usize,
        key: &[u8],
        value: &[u8],
        flags: u32,
        exptime_abs: i64,
        id: u64,
    ) -> Result<u64, String> {
        self.write_as(stripe, key, value, flags, exptime_abs, id, true)
    }

    /// [`Node::write`], whole only if `whole` allows it (a whole write a member refused is
    /// written again split).
    #[allow(clippy::too_many_arguments)]
    fn write_as(
        &self,
        stripe: usize,
        key: &[u8],
        value: &[u8],
        flags: u32,
        exptime_abs: i64,
        id: u64,
        whole: bool,
    ) -> Result<u64, String> {
        let down = self.down_positions(stripe);
        if down > self.parity() {
            bump(&self.counters.server_errors);
            return Err(match self.unavailable(stripe) {
                AgentResult::Error(r) => r,
                _ => unreachable!(),
            });
        }
        let (kind, positions, charge) = if whole {
            self.layout_of(stripe, key, value)
        } else {
            self.split_layout_of(key, value)
        };
        if whole {
            self.count_split_fallback(kind, value.len());
        }
        let positions = match kind {
            Kind::Replica => self.replica_span(stripe, positions),
            Kind::Coded | Kind::Whole => positions,
        };
        let now_us = time::now_micros();
        let reserved = self.with_index(stripe, |ix| {
            let old = ix.remove(key);
            match ix.reserve(positions, charge) {
                Ok(victims) => {
                    for (vkey, _) in &victims {
                        ix.release_held(vkey);
                    }
                    let version = ix.next_version(now_us);
                    Ok((old, victims, version, ix.watermark()))
                }
                Err(e) => {
                    if let Some(o) = old {
                        ix.adopt(key, o);
                    }
                    Err(e)
                }
            }
        });
        let (old, victims, version, watermark) = match reserved {
            Ok(r) => r,
            Err(err) => return Err(format!("out of memory storing object: {err}")),
        };
        for (vkey, v) in &victims {
            self.delete_records(stripe, vkey, v.version + 1);
        }
        let mut entry = Entry::new(
            version,
            value.len() as u64,
            flags,
            exptime_abs,
            kind,
            now_us,
            positions,
            charge,
        );
        entry.trail =
            record::trail_after(&old.as_ref().map_or([0; record::TRAIL], |o| o.trail), id);
        // The positions whose members are down now are left out, and its records say so
        // (`Header::written_around`); the holes are known once the members have answered.
        entry.holes = (0..positions)
            .filter(|&p| !self.is_up(self.placement.node_of(stripe, p)))
            .fold(0, |m, p| m | index::bit(p));
        if kind == Kind::Whole {
            entry.holes = 0;
            match self.write_whole(stripe, key, &entry, value, watermark) {
                Ok(at) => {
                    entry.whole_at = Some(at);
                    log::debug!(
                        "stripe {stripe}: {} v{version} written whole (request {id:x})",
                        String::from_utf8_lossy(key)
                    );
                    self.with_index(stripe, |ix| {
                        ix.commit(key, entry);
                        ix.finish(version);
                    });
                    if old.as_ref().is_some_and(|o| o.positions > positions) {
                        let nodes =
                            (positions..self.n()).map(|p| self.placement.node_of(stripe, p));
                        self.delete_records_at(stripe, key, version, nodes);
                    }
                    bump(&self.counters.total_items);
                    return Ok(version);
                }
                Err(fail) => {
                    // Some parity positions may hold the version's location: it stays in
                    // flight until the key is written again, as a failed split write's.
                    self.with_index(stripe, |ix| {
                        ix.release(positions, charge);
                        ix.hold_open(key, version);
                        if let Some(o) = old {
                            ix.adopt(key, o);
                        }
                    });
                    return match fail {
                        WholeFail::Refused(why) => {
                            bump(&self.counters.whole_fallbacks);
                            log::info!(
                                "stripe {stripe}: {} written split, not whole: {why}",
                                String::from_utf8_lossy(key)
                            );
                            self.write_as(stripe, key, value, flags, exptime_abs, id, false)
                        }
                        WholeFail::InDoubt(why) => {
                            bump(&self.counters.server_errors);
                            Err(format!(
                                "the write may or may not have been applied: a parity position \
                                 did not answer its delta ({why})"
                            ))
                        }
                    };
                }
            }
        }
        // The write on the engine: the stripe's write template, when this node is its
        // designated agent and every member is up; otherwise (or if the run fails) the
        // records go out as peer messages.
        let mut planned = false;
        if kind == Kind::Coded {
            match self.plan_path(stripe, self.n()) {
                Some(x) => {
                    let meta = WriteMeta {
                        value_bytes: value.len() as u64,
                        flags,
                        exptime: exptime_abs,
                        watermark,
                        trail: entry.trail,
                    };
                    match x.write(
                        self.cfg.code,
                        self.cfg.mode,
                        &self.placement,
                        stripe,
                        key,
                        version,
                        value,
                        meta,
                        &|n| self.is_up(n),
                    ) {
                        Ok(()) => {
                            x.counters.write_plan_runs.fetch_add(1, Ordering::Relaxed);
                            planned = true;
                        }
                        Err(reason) => {
                            x.counters
                                .write_plan_fallbacks
                                .fetch_add(1, Ordering::Relaxed);
                            log::warn!(
                                "node {}: write of stripe {stripe} over peer messages instead \
                                 of its plan: {reason}",
                                self.cfg.id
                            );
                        }
                    }
                }
                None => {
                    if let Some(x) = self.plans.as_ref() {
                        x.counters
                            .write_plan_fallbacks
                            .fetch_add(1, Ordering::Relaxed);
                    }
                }
            }
        }
        let recs = if planned {
            Vec::new()
        } else {
            match self.records_of(key, &entry, value) {
                Ok(r) => r,
                Err(err) => {
                    self.with_index(stripe, |ix| {
                        ix.release(positions, charge);
                        ix.finish(version);
                        if let Some(o) = old {
                            ix.adopt(key, o);
                        }
                    });
                    return Err(err);
                }
            }
        };
        let (sent, calls): (Vec<usize>, Vec<(usize, Request)>) = recs
            .into_iter()
            .enumerate()
            .filter(|(p, _)| self.is_up(self.placement.node_of(stripe, *p)))
            .map(|(p, rec)| {
                (
                    p,
                    (
                        self.placement.node_of(stripe, p),
                        Request::Put {
                            stripe: stripe as u32,
                            watermark,
                            record: rec,
                        },
                    ),
                )
            })
            .unzip();
        // A planned write was acked by every member; a peer write by those that answered.
        let mut stored = if planned {
            index::position_mask(positions)
        } else {
            0
        };
        let mut nacks = Vec::new();
        for (p, r) in sent.into_iter().zip(self.call(calls)) {
            match r {
                Ok(Response::Ack) => stored |= index::bit(p),
                Ok(Response::Nack(why)) => nacks.push(why),
                Ok(other) => nacks.push(format!("unexpected reply {other:?}")),
                Err(_) => {} // marked down: counted below
            }
        }
        let down = self.down_positions(stripe);
        if down > self.parity() || !nacks.is_empty() {
            log::debug!(
                "stripe {stripe}: {} v{version} not written ({} down, nacks {nacks:?})",
                String::from_utf8_lossy(key),
                down
            );
            // Some members may have stored the version (on the plan or from a `Put`): it stays
            // in flight until the key is written again, so that they keep the record it
            // replaced, which the index serves again.
            self.with_index(stripe, |ix| {
                ix.release(positions, charge);
                ix.hold_open(key, version);
                if let Some(o) = old {
                    ix.adopt(key, o);
                }
            });
            bump(&self.counters.server_errors);
            return Err(if nacks.is_empty() {
                match self.unavailable(stripe) {
                    AgentResult::Error(r) => format!(
                        "the write may or may not have been applied: it failed once its records \
                         were sent ({r})"
                    ),
                    _ => unreachable!(),
                }
            } else {
                format!(
                    "the write may or may not have been applied: a member refused its chunk ({})",
                    nacks[0]
                )
            });
        }
        entry.holes = index::position_mask(positions) & !stored;
        log::debug!(
            "stripe {stripe}: {} v{version} written ({kind:?}, holes {:#b}, request {:x})",
            String::from_utf8_lossy(key),
            entry.holes,
            id
        );
        if entry.holes != 0 {
            bump(&self.counters.writes_with_holes);
        }
        self.with_index(stripe, |ix| {
            ix.commit(key, entry);
            ix.finish(version);
        });
        // A value that now uses fewer positions (coded -> replicated) leaves older records at
        // the others: delete them (records of the new version are kept).
        if old.as_ref().is_some_and(|o| o.positions > positions) {
            let nodes = (positions..self.n()).map(|p| self.placement.node_of(stripe, p));
            self.delete_records_at(stripe, key, version, nodes);
        }
        bump(&self.counters.total_items);
        Ok(version)
    }

    #[allow(clippy::too_many_arguments)]
    pub(crate) fn op_store(
        &self,
        stripe: usize,
        key: &[u8],
        mode: StoreMode,
        flags: u32,
        exptime: i64,
        compare_cas: Option<u64>,
        value: Vec<u8>,
        once: Once,
    ) -> AgentResult {
        let current = self.lookup(stripe, key);
        if let Some(answer) = self.once_answer(stripe, key, once, current.as_ref(), false) {
            return answer;
        }
        let compare = if mode == StoreMode::Cas {
            compare_cas.or(Some(0))
        } else {
            compare_cas
        };
        match semantics::decide(mode, current.as_ref(), compare) {
            Decision::NotStored => return AgentResult::NotStored,
            Decision::Exists => return AgentResult::Exists,
            Decision::NotFound => return AgentResult::NotFound,
            Decision::Proceed => {}
        }
        let (value, flags, exptime_abs) = match (mode, &current) {
            (StoreMode::Append | StoreMode::Prepend, Some(e)) => {
                let cur = match self.read_value(stripe, key, e, None) {
                    Ok(v) => v,
                    Err(r) => return AgentResult::Error(r),
                };
                if cur.len() + value.len() > self.cfg.item_size_max_bytes {
                    // As a `set` refused for its size: the value the write meant to change
                    // is not left behind (memcached 1.6.18 keeps it and answers NOT_STORED).
                    return match self.op_delete(stripe, key, None) {
                        AgentResult::Deleted | AgentResult::NotFound => {
                            AgentResult::Error(TOO_LARGE.into())
                        }
                        other => other,
                    };
                }
                (semantics::combine(mode, &cur, &value), e.flags, e.exptime)
            }
            _ => (
                value,
                flags,
                time::absolute_exptime(exptime, time::now_secs()),
            ),
        };
        if time::is_expired(exptime_abs, time::now_secs()) {
            // memcached stores it and it is gone at once: the old value is replaced by nothing.
            if let Some(e) = current {
                self.with_index(stripe, |ix| ix.remove(key));
                self.delete_records(stripe, key, e.version + 1);
            }
            return AgentResult::Stored { cas: 0 };
        }
        match self.write(stripe, key, &value, flags, exptime_abs, once.id) {
            Ok(version) => AgentResult::Stored {
                cas: record::cas_of(version),
            },
            Err(r) => AgentResult::Error(r),
        }
    }

    pub(crate) fn op_delete(
        &self,
        stripe: usize,
        key: &[u8],
        compare_cas: Option<u64>,
    ) -> AgentResult {
        let Some(e) = self.lookup(stripe, key) else {
            return AgentResult::NotFound;
        };
        if compare_cas.is_some_and(|c| c != e.cas()) {
            return AgentResult::Exists;
        }
        let version = self.with_index(stripe, |ix| {
            ix.remove(key);
            ix.release_held(key);
            let v = ix.next_version(time::now_micros());
            ix.finish(v);
            v
        });
        self.delete_records(stripe, key, version);
        AgentResult::Deleted
    }

    /// `incr`/`decr`, and `ma` with its `meta` (compare the CAS value, create on a miss, set
    /// the TTL): the number, the new CAS value and the item's exptime.
    pub(crate) fn op_arith(
        &self,
        stripe: usize,
        key: &[u8],
        incr: bool,
        delta: u64,
        once: Once,
        meta: ArithMeta,
    ) -> AgentResult {
        let current = self.lookup(stripe, key);
        if let Some(answer) = self.once_answer(stripe, key, once, current.as_ref(), true) {
            return answer;
        }
        let now = time::now_secs();
        let ttl = meta.ttl.map(|t| time::absolute_exptime(t, now));
        let Some(e) = current else {
            let Some((exptime, initial)) = meta.vivify else {
                return AgentResult::NotFound;
            };
            // Created holding the initial number, which is the answer (not counted).
            let exptime = ttl.unwrap_or_else(|| time::absolute_exptime(exptime, now));
            return self.write_number(stripe, key, None, initial, 0, exptime, once);
        };
        if meta.compare_cas.is_some_and(|c| c != e.cas()) {
            return AgentResult::Exists;
        }
        let cur = match self.read_value(stripe, key, &e, None) {
            Ok(v) => v,
            Err(r) => return AgentResult::Error(r),
        };
        let op = if incr {
            proto::ArithOp::Incr
        } else {
            proto::ArithOp::Decr
        };
        let Ok(r) = proto::incr_decr(&cur, op, delta) else {
            return AgentResult::NonNumeric;
        };
        log::debug!(
            "stripe {stripe}: {} v{} read for incr/decr: {}",
            String::from_utf8_lossy(key),
            e.version,
            String::from_utf8_lossy(&cur)
        );
        let exptime = ttl.unwrap_or(e.exptime);
        self.write_number(
            stripe,
            key,
            Some((&e, r.value)),
            r.number,
            e.flags,
            exptime,
            once,
        )
    }

    /// Writes the value of an arithmetic's `number` (`value`: the bytes that hold it, with the
    /// key's entry; `None`: a new item, its digits), or removes the key if `exptime` has
    /// passed (as memcached: stored and gone at once).
    #[allow(clippy::too_many_arguments)]
    fn write_number(
        &self,
        stripe: usize,
        key: &[u8],
        value: Option<(&Entry, Vec<u8>)>,
        number: u64,
        flags: u32,
        exptime: i64,
        once: Once,
    ) -> AgentResult {
        if time::is_expired(exptime, time::now_secs()) {
            if let Some((e, _)) = value {
                self.with_index(stripe, |ix| ix.remove(key));
                self.delete_records(stripe, key, e.version + 1);
            }
            return AgentResult::Number {
                number,
                cas: 0,
                exptime,
            };
        }
        let bytes = match value {
            Some((_, v)) => v,
            None => number.to_string().into_bytes(),
        };
        match self.write(stripe, key, &bytes, flags, exptime, once.id) {
            Ok(version) => AgentResult::Number {
                number,
                cas: record::cas_of(version),
                exptime,
            },
            Err(reason) => AgentResult::Error(reason),
        }
    }
}
