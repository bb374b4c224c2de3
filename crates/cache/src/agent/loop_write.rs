//! Writes run to completion on the client event loop.
//!
//! A `set`, `add`, `replace` or `cas` at the stripe's agent (the condition decided on the
//! agent's index under the key's lock: a refusal is answered at once, with no message), and an
//! `incr`, `decr`, `append` or `prepend` of a value the agent holds whole (read from its own
//! store under the key's lock), with every member up (or a value written whole while the
//! members down are all refused: their deltas queued to be sent once they are back, as a
//! worker queues them) and room in the stripe's share (no eviction), needs no worker either:
//! under the key's lock, which the loop holds across the replies (a [`KeyGuard`]), the
//! agent reserves the bytes, takes a version, encodes the records, stores its own and sends
//! each other member its record (`Put`); the acks resume the write on the loop, which commits
//! the index entry and answers. The message count is the write's (one record to and one ack
//! from each other member). TriEC writes stay on the engine (its tripartite encode is the
//! point of the scheme). On anything else — another member down, a nack, a reply that does
//! not come, the lease lost — the reservation is undone exactly as a failed write undoes it.
//! Before any record has left, or if this node has led the stripe without a break since the
//! write began, the request goes to a worker, which writes it the full way under a new
//! version. Otherwise the write is in doubt and answered so, never run
//! again: a member may have stored its record, and a node that led the stripe meanwhile (this
//! one cut off, its lease run out) may have adopted it when it rebuilt the index; the write,
//! run again later, would then take effect twice, the second time over the writes made in
//! between.

use crate::agent::keylock::KeyGuard;

use crate::agent::index::Entry;
use crate::agent::loop_read::LoopPending;
use crate::carrier::peer::{ArithMeta, Attempt, Once, Request, Response};
use crate::node::{bump, lock, Node};
use crate::record::{self, Kind};
use crate::semantics::{self, Decision};
use crate::time;
use graph::Scheme;
use proto::StoreMode;

/// What a storage command asks of the key's present value: its mode and, for `cas`, the CAS
/// value the client holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StoreIf {
    pub mode: StoreMode,
    pub compare_cas: Option<u64>,
}

impl StoreIf {
    /// A plain `set`.
    pub const SET: StoreIf = StoreIf {
        mode: StoreMode::Set,
        compare_cas: None,
    };

    /// Whether [`Node::loop_write_start`] can run the command: `set`, `add`, `replace` and
    /// `cas` (`append` and `prepend` change the present value: [`Node::loop_modify_start`]).
    pub fn on_loop(self) -> bool {
        matches!(
            self.mode,
            StoreMode::Set | StoreMode::Add | StoreMode::Replace | StoreMode::Cas
        )
    }
}

/// A change of a key's present value the loop can make: `incr`/`decr` by `delta`, or
/// `append`/`prepend` of `data`.
#[derive(Clone, Copy, Debug)]
pub enum Modify<'a> {
    /// `meta`: what `ma` adds (compare the CAS value, create on a miss, set the TTL).
    Arith {
        incr: bool,
        delta: u64,
        meta: ArithMeta,
    },
    Concat {
        prepend: bool,
        data: &'a [u8],
    },
}

/// What the client loop can do with a [`Modify`].
#[derive(Debug)]
pub enum LoopModifyStart {
    /// Run it on a worker (the full path).
    Worker,
    /// Another node leads the key's stripe: send it the request.
    Forward(usize),
    /// No live value under the key: `NOT_FOUND` (incr/decr), `NOT_STORED` (append/prepend).
    Missing,
    /// `ma` with `C`: the key's CAS value is another.
    Exists,
    /// `incr`/`decr` of a value that is not a decimal number.
    NonNumeric,
    /// The new value's write, as a `set`'s ([`LoopWrite::number`]: incr/decr's number).
    Send(Box<LoopWrite>),
    /// A coded value: its data chunks to read first ([`LoopModify::read`]), the key's lock
    /// held; [`Node::loop_modify_resume`] then makes the new value's write.
    Fetch(Box<LoopModify>),
    /// Stored: every record was this node's own. The CAS value, incr/decr's number and the
    /// item's exptime.
    Stored {
        cas: u64,
        number: Option<(bool, u64)>,
        exptime: i64,
    },
}

/// An owned [`Modify`], kept while a coded value's chunks are read.
#[derive(Clone, Debug)]
enum ModifyOwned {
    Arith {
        incr: bool,
        delta: u64,
        meta: ArithMeta,
    },
    Concat {
        prepend: bool,
        data: Vec<u8>,
    },
}

impl ModifyOwned {
    fn of(m: Modify<'_>) -> ModifyOwned {
        match m {
            Modify::Arith { incr, delta, meta } => ModifyOwned::Arith { incr, delta, meta },
            Modify::Concat { prepend, data } => ModifyOwned::Concat {
                prepend,
                data: data.to_vec(),
            },
        }
    }

    fn as_modify(&self) -> Modify<'_> {
        match self {
            ModifyOwned::Arith { incr, delta, meta } => Modify::Arith {
                incr: *incr,
                delta: *delta,
                meta: *meta,
            },
            ModifyOwned::Concat { prepend, data } => Modify::Concat {
                prepend: *prepend,
                data,
            },
        }
    }
}

/// A change of a coded value run on the loop: its present value read first (the data chunks,
/// from their members), under the key's lock, which it keeps until the new value's write
/// ends.
pub struct LoopModify {
    /// The read of the present value (its requests: [`LoopPending::remote`]).
    pub read: LoopPending,
    key_guard: KeyGuard,
    stripe: usize,
    key: Vec<u8>,
    modify: ModifyOwned,
    flags: u32,
    /// The new value's exptime (absolute).
    exptime: i64,
    id: u64,
}

impl std::fmt::Debug for LoopModify {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LoopModify")
            .field("stripe", &self.stripe)
            .field("remote", &self.read.remote)
            .finish_non_exhaustive()
    }
}

/// What the client loop can do with a `set`.
#[derive(Debug)]
pub enum LoopWriteStart {
    /// Run it on a worker (the full path).
    Worker,
    /// Stored: every record was this node's own. The CAS value.
    Stored(u64),
    /// Records to send: [`LoopWrite::remote`].
    Send(Box<LoopWrite>),
    /// The condition refused the write (`NOT_STORED`, `EXISTS`, `NOT_FOUND`): nothing stored,
    /// no message sent.
    Refused(Decision),
    /// Another node leads the key's stripe: send it the request.
    Forward(usize),
    /// An `append` or `prepend` of a coded value: its chunks read first (from
    /// [`LoopModifyStart::Fetch`]; a `set` never gives it).
    Fetch(Box<LoopModify>),
}

/// A write waiting for the acks of other members.
pub struct LoopWrite {
    stripe: usize,
    /// The fencing token of the term the write began in (`cluster::coord`; 0: none).
    fence: u64,
    key: Vec<u8>,
    entry: Entry,
    old: Option<Entry>,
    watermark: u64,
    /// The record of each position (taken when its request is built); for a whole value,
    /// only the home's, taken when its slot was written.
    records: Vec<Option<Vec<u8>>>,
    /// A whole value's delta for each parity position of its page's stripe (taken when sent).
    deltas: Vec<Option<Request>>,
    /// A whole value's slot as written: its deltas are queued to be sent again if the write
    /// does not finish here (a parity page missing one would agree with no data page).
    pub(crate) written: Option<crate::member::whole::SlotWrite>,
    /// (node, position) of every record to send.
    pub remote: Vec<(usize, usize)>,
    /// When the write began: led without a break since then, the node may write it again.
    started: std::time::Instant,
    /// Test-only ([`crate::agent::whole::TEAR_ENV`]): the process exits once the one delta
    /// sent is acknowledged (a delta torn by a kill).
    tear: bool,
    /// The write's request id (`agent::once`).
    id: u64,
    /// The command's mode (a `cas` counts its hits when stored).
    mode: StoreMode,
    /// An `incr` (true) or `decr` and the number it stored, answered instead of `STORED`.
    number: Option<(bool, u64)>,
    /// The index the write reserved its version in (`StripeIndex::epoch`).
    epoch: u64,
    _key_guard: KeyGuard,
}

impl std::fmt::Debug for LoopWrite {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LoopWrite")
            .field("stripe", &self.stripe)
            .field("version", &self.entry.version)
            .field("remote", &self.remote)
            .finish_non_exhaustive()
    }
}

impl LoopWrite {
    /// Whether a record has left (each is taken when its request is built, its own included).
    fn sent(&self) -> bool {
        self.records.iter().any(Option::is_none)
    }

    /// The write's request id (0: none).
    pub fn id(&self) -> u64 {
        self.id
    }

    /// The storage command's mode.
    pub fn mode(&self) -> StoreMode {
        self.mode
    }

    /// The item's exptime as written (absolute, 0: never).
    pub fn exptime(&self) -> i64 {
        self.entry.exptime
    }

    /// For an `incr` (true) or `decr`: the number it stores.
    pub fn number(&self) -> Option<(bool, u64)> {
        self.number
    }

    /// The version the write stores (its CAS value).
    pub fn version(&self) -> u64 {
        self.entry.version
    }

    /// How a worker runs the write again once the loop gives it up: as a first try if no record
    /// left, otherwise as a rerun, written anew only in the index it was given up in.
    pub fn rerun_once(&self) -> Once {
        let sent = self.sent();
        Once {
            id: self.id,
            attempt: if sent {
                Attempt::Rerun { epoch: self.epoch }
            } else {
                Attempt::First
            },
        }
    }

    /// The `Put` of the record at `position` (one of [`LoopWrite::remote`], asked once).
    pub fn request(&mut self, position: usize) -> Request {
        let req = match self.deltas.get_mut(position).and_then(Option::take) {
            Some(delta) => delta,
            None => Request::Put {
                stripe: self.stripe as u32,
                watermark: self.watermark,
                record: self.records[position].take().unwrap_or_default(),
            },
        };
        crate::carrier::peer::fenced(self.fence, req)
    }
}

impl Node {
    /// Starts `set key flags exptime value` (or `add`, `replace`, `cas` as `cond` says) on the
    /// client loop, a first try of the request `id`.
    pub fn loop_write_start(
        &self,
        key: &[u8],
        cond: StoreIf,
        flags: u32,
        exptime: i64,
        value: &[u8],
        id: u64,
    ) -> LoopWriteStart {
        let stripe = self.placement.stripe_of(key);
        if !self.leads(stripe) {
            return match self.agent_of(stripe) {
                Some(agent) if agent != self.cfg.id => LoopWriteStart::Forward(agent),
                _ => LoopWriteStart::Worker,
            };
        }
        if self.cfg.scheme == Scheme::Triec || !cond.on_loop() {
            return LoopWriteStart::Worker;
        }
        let Some(guard) = self.key_locks.try_lock(crate::node::key_lock_index(key)) else {
            return LoopWriteStart::Worker;
        };
        let exptime_abs = time::absolute_exptime(exptime, time::now_secs());
        self.loop_write_locked(guard, stripe, key, cond, flags, exptime_abs, value, id)
    }

    /// [`Node::loop_write_start`] once the key's lock is held (`guard`), its expiry absolute.
    #[allow(clippy::too_many_arguments)]
    fn loop_write_locked(
        &self,
        guard: KeyGuard,
        stripe: usize,
        key: &[u8],
        cond: StoreIf,
        flags: u32,
        exptime_abs: i64,
        value: &[u8],
        id: u64,
    ) -> LoopWriteStart {
        self.drop_stale_index(stripe);
        let (kind, positions, charge) = self.layout_of(stripe, key, value);
        // Every member up, or a whole value, which `Node::whole_ok` writes whole only while
        // the members down are all refused (their deltas queued, as a worker queues them): a
        // write that would leave holes goes the full way.
        if self.down_positions(stripe) > 0 && kind != Kind::Whole {
            return LoopWriteStart::Worker;
        }
        let now_secs = time::now_secs();
        if time::is_expired(exptime_abs, now_secs) {
            return LoopWriteStart::Worker;
        }
        let now_us = time::now_micros();
        let reserved = {
            let mut g = lock(&self.stripes[stripe]);
            let Some(ix) = g.as_mut() else {
                return LoopWriteStart::Worker;
            };
            if cond != StoreIf::SET {
                // memcached's condition on the live entry; an expired or flushed one is
                // deleted by the worker's path first.
                let oldest = self
                    .oldest_live_us
                    .load(std::sync::atomic::Ordering::Relaxed);
                let Ok(current) = ix.lookup_live(key, now_secs, now_us, oldest) else {
                    return LoopWriteStart::Worker;
                };
                let compare = match cond.mode {
                    StoreMode::Cas => cond.compare_cas.or(Some(0)),
                    _ => cond.compare_cas,
                };
                match semantics::decide(cond.mode, current.as_ref(), compare) {
                    Decision::Proceed => {}
                    refused => return LoopWriteStart::Refused(refused),
                }
            }
            let old = ix.remove(key);
            // Evictions and a value shrinking to fewer positions delete records elsewhere:
            // the worker's path does that.
            let shrinks = old.as_ref().is_some_and(|o| o.positions > positions);
            if shrinks || !ix.fits(positions, charge) {
                if let Some(o) = old {
                    ix.adopt(key, o);
                }
                None
            } else {
                let victims = ix.reserve(positions, charge);
                debug_assert!(victims.as_ref().is_ok_and(|v| v.is_empty()));
                let version = ix.next_version(now_us);
                Some((old, version, ix.watermark(), ix.epoch))
            }
        };
        let Some((old, version, watermark, epoch)) = reserved else {
            return LoopWriteStart::Worker;
        };
        self.count_split_fallback(kind, value.len());
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
        let mut w = LoopWrite {
            stripe,
            fence: self.fence(stripe),
            key: key.to_vec(),
            entry,
            old,
            watermark,
            records: Vec::new(),
            deltas: Vec::new(),
            written: None,
            remote: Vec::new(),
            started: std::time::Instant::now(),
            tear: false,
            id,
            mode: cond.mode,
            number: None,
            epoch,
            _key_guard: guard,
        };
        if kind == Kind::Whole {
            // The home's slot written here, then a delta to each parity position of its page.
            let header = self.header(key, &w.entry, 0);
            self.local_messages
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            let written = lock(&self.store).put_whole(stripe as u32, header, value, watermark);
            let Ok(Some(written)) = written else {
                self.loop_write_abandon(w);
                return LoopWriteStart::Worker;
            };
            bump(&self.counters.whole_writes);
            w.records = vec![None];
            w.deltas = (0..self.n()).map(|_| None).collect();
            let mut down = Vec::new();
            for (node, i, delta) in self.whole_deltas(stripe, key, &w.entry, &written, watermark) {
                if self.is_up(node) {
                    w.deltas[i] = Some(delta);
                    w.remote.push((node, i));
                } else {
                    down.push(node);
                }
            }
            if self.tears(value) {
                w.remote.truncate(1);
                w.tear = true;
            }
            if !down.is_empty() {
                // Sent again once their nodes are up (`Node::redeliver_deltas`).
                let (e, at) = (&w.entry, &written);
                self.queue_deltas(stripe, key, e, at, watermark, |n| down.contains(&n));
            }
            w.entry.whole_at = Some(written.at);
            w.written = Some(written);
            return LoopWriteStart::Send(Box::new(w));
        }
        match self.records_of(key, &w.entry, value) {
            Ok(r) => w.records = r.into_iter().map(Some).collect(),
            Err(_) => {
                self.loop_write_abandon(w);
                return LoopWriteStart::Worker;
            }
        }
        for p in 0..positions {
            let node = self.placement.node_of(stripe, p);
            if node == self.cfg.id {
                self.local_messages
                    .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                let res = self.handle_peer(w.request(p));
                if !matches!(res, Response::Ack) {
                    self.loop_write_abandon(w);
                    return LoopWriteStart::Worker;
                }
            } else {
                w.remote.push((node, p));
            }
        }
        if w.remote.is_empty() {
            // Every position is this node's (a one-node cluster): no other node can lead the
            // stripe, so a write not committed here was applied nowhere else either.
            return match self.loop_write_finish(w) {
                Some(cas) => LoopWriteStart::Stored(cas),
                None => LoopWriteStart::Worker,
            };
        }
        LoopWriteStart::Send(Box::new(w))
    }

    /// Starts `m` (`incr`, `decr`, `append`, `prepend`) on the client loop, a first try of the
    /// request `id`: the present value read from this node's own store (a whole value at its
    /// home, or a replica here; otherwise a worker reads it), changed, and written as a `set`
    /// would write it, the key's lock held from the read to the last ack.
    pub fn loop_modify_start(&self, key: &[u8], m: Modify<'_>, id: u64) -> LoopModifyStart {
        let stripe = self.placement.stripe_of(key);
        if !self.leads(stripe) {
            return match self.agent_of(stripe) {
                Some(agent) if agent != self.cfg.id => LoopModifyStart::Forward(agent),
                _ => LoopModifyStart::Worker,
            };
        }
        if self.cfg.scheme == Scheme::Triec {
            return LoopModifyStart::Worker;
        }
        let Some(guard) = self.key_locks.try_lock(crate::node::key_lock_index(key)) else {
            return LoopModifyStart::Worker;
        };
        self.drop_stale_index(stripe);
        // A member down: `loop_write_locked` decides (a whole value's write may go on).
        if self.down_positions(stripe) > self.parity() {
            return LoopModifyStart::Worker;
        }
        let oldest = self
            .oldest_live_us
            .load(std::sync::atomic::Ordering::Relaxed);
        let current = {
            let mut g = lock(&self.stripes[stripe]);
            let Some(ix) = g.as_mut() else {
                return LoopModifyStart::Worker;
            };
            let now_us = time::now_micros();
            match ix.lookup_live(key, time::secs_of(now_us), now_us, oldest) {
                Ok(c) => c,
                // Expired or flushed: the worker deletes its records first.
                Err(_) => return LoopModifyStart::Worker,
            }
        };
        let now = time::now_secs();
        let (vivify, ttl) = match m {
            Modify::Arith { meta, .. } => (
                meta.vivify,
                meta.ttl.map(|t| time::absolute_exptime(t, now)),
            ),
            Modify::Concat { .. } => (None, None),
        };
        let Some(e) = current else {
            let (Some((exptime, initial)), Modify::Arith { incr, .. }) = (vivify, m) else {
                return LoopModifyStart::Missing;
            };
            // `ma` with `N`: created holding the initial number, which is the answer.
            let exptime = ttl.unwrap_or_else(|| time::absolute_exptime(exptime, now));
            let digits = initial.to_string().into_bytes();
            let set = StoreIf::SET;
            let start = self.loop_write_locked(guard, stripe, key, set, 0, exptime, &digits, id);
            return modify_started(start, Some((incr, initial)), StoreMode::Set, exptime);
        };
        if let Modify::Arith { meta, .. } = m {
            if meta.compare_cas.is_some_and(|c| c != e.cas()) {
                return LoopModifyStart::Exists;
            }
        }
        let exptime = ttl.unwrap_or(e.exptime);
        let present = match self.own_position(stripe, &e) {
            Some(p) => self.with_own_record(stripe, key, &e, p, <[u8]>::to_vec),
            // A coded value: its chunks read first, the key's lock kept.
            None if e.kind == Kind::Coded => {
                return self.loop_modify_fetch(guard, stripe, key, e, m, exptime, id);
            }
            None => None,
        };
        let Some(present) = present else {
            return LoopModifyStart::Worker;
        };
        self.local_messages
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let flags = e.flags;
        self.modify_with(guard, stripe, key, m, flags, exptime, &present, id)
    }

    /// Starts the read of coded value `e`'s data chunks for `m` (every data member up; any
    /// other read goes to a worker), or, with every chunk this node's own, makes the change.
    #[allow(clippy::too_many_arguments)]
    fn loop_modify_fetch(
        &self,
        guard: KeyGuard,
        stripe: usize,
        key: &[u8],
        e: Entry,
        m: Modify<'_>,
        exptime: i64,
        id: u64,
    ) -> LoopModifyStart {
        let k = self.k();
        if (0..k).any(|p| !self.is_up(self.placement.node_of(stripe, p))) {
            return LoopModifyStart::Worker;
        }
        let flags = e.flags;
        let Some(read) = self.loop_read_pending(stripe, key, e, (0..k).collect()) else {
            return LoopModifyStart::Worker;
        };
        let fetch = Box::new(LoopModify {
            read,
            key_guard: guard,
            stripe,
            key: key.to_vec(),
            modify: ModifyOwned::of(m),
            flags,
            exptime,
            id,
        });
        if fetch.read.remote.is_empty() {
            return self.loop_modify_resume(fetch);
        }
        LoopModifyStart::Fetch(fetch)
    }

    /// Makes the change of a coded value once its chunks are in ([`LoopModifyStart::Fetch`]):
    /// the new value's write, under the lock the read kept. `Worker` if the value could not be
    /// read (the lease lost, a chunk of another version), is not a number for an `incr`, or
    /// grows too large: a worker runs the request (nothing was written).
    pub fn loop_modify_resume(&self, fetch: Box<LoopModify>) -> LoopModifyStart {
        let LoopModify {
            read,
            key_guard,
            stripe,
            key,
            modify,
            flags,
            exptime,
            id,
        } = *fetch;
        let Some(v) = self.loop_read_finish(read) else {
            return LoopModifyStart::Worker;
        };
        let m = modify.as_modify();
        match self.modify_with(key_guard, stripe, &key, m, flags, exptime, &v.value, id) {
            LoopModifyStart::NonNumeric => LoopModifyStart::Worker,
            other => other,
        }
    }

    /// The write of `present` changed by `m`, under the key's lock (`guard`).
    #[allow(clippy::too_many_arguments)]
    fn modify_with(
        &self,
        guard: KeyGuard,
        stripe: usize,
        key: &[u8],
        m: Modify<'_>,
        flags: u32,
        exptime: i64,
        present: &[u8],
        id: u64,
    ) -> LoopModifyStart {
        let (value, number, mode) = match m {
            Modify::Arith { incr, delta, .. } => {
                let op = if incr {
                    proto::ArithOp::Incr
                } else {
                    proto::ArithOp::Decr
                };
                match proto::incr_decr(present, op, delta) {
                    Ok(r) => (r.value, Some((incr, r.number)), StoreMode::Set),
                    Err(_) => return LoopModifyStart::NonNumeric,
                }
            }
            Modify::Concat { prepend, data } => {
                // Too large: the worker refuses it as memcached does (and removes the value).
                if present.len() + data.len() > self.cfg.item_size_max_bytes {
                    return LoopModifyStart::Worker;
                }
                let mode = if prepend {
                    StoreMode::Prepend
                } else {
                    StoreMode::Append
                };
                (semantics::combine(mode, present, data), None, mode)
            }
        };
        let set = StoreIf::SET;
        let start = self.loop_write_locked(guard, stripe, key, set, flags, exptime, &value, id);
        modify_started(start, number, mode, exptime)
    }

    /// Whether a record of the write has left for a member (this node's own store included):
    /// from then on another leader may adopt it, so a write that does not finish is in doubt
    /// and must not be run again.
    pub fn loop_write_sent(&self, w: &LoopWrite) -> bool {
        w.sent()
    }

    /// Whether a write that did not finish may be written again, by a worker of this node
    /// under a new version: this node has led the stripe without a break since the write
    /// began, so no other node led it meanwhile and none can have adopted its records (a new
    /// version supersedes them). Otherwise, once its records left, it is in doubt.
    pub fn loop_write_may_rerun(&self, w: &LoopWrite) -> bool {
        self.led_throughout(w.stripe, w.started)
    }

    /// Takes a member's reply to its record: false unless it stored it.
    pub fn loop_write_acked(&self, reply: Option<Response>) -> bool {
        matches!(reply, Some(Response::Ack))
    }

    /// Commits the write once every member acked: its CAS value, or `None` (undone) if this
    /// node no longer leads the stripe. Then the records were stored and another leader may
    /// have adopted them: the write is in doubt, and must not be run again.
    pub fn loop_write_finish(&self, w: LoopWrite) -> Option<u64> {
        if w.tear {
            let to = w.remote.first().map_or(usize::MAX, |&(node, _)| node);
            crate::agent::whole::die_torn(self.cfg.id, to);
        }
        if !self.leads(w.stripe) {
            bump(&self.counters.lease_lost_ops);
            self.loop_write_abandon(w);
            return None;
        }
        let version = w.entry.version;
        let mut g = lock(&self.stripes[w.stripe]);
        // The index was dropped meanwhile (a lease lapse): the worker writes the value again
        // once it is rebuilt, rather than the loop rebuilding it.
        let Some(ix) = g.as_mut() else {
            log::debug!(
                "stripe {}: {} v{version} not committed on the loop (no index)",
                w.stripe,
                String::from_utf8_lossy(&w.key)
            );
            return None;
        };
        log::debug!(
            "stripe {}: {} v{version} written on the loop (request {:x})",
            w.stripe,
            String::from_utf8_lossy(&w.key),
            w.id
        );
        ix.commit(&w.key, w.entry);
        ix.finish(version);
        drop(g);
        if let Some(written) = &w.written {
            // Every parity position applied its delta, or will hold it once it is back (a node
            // whose process is gone rebuilds its pages from the others).
            let (k, n, nodes) = (self.k(), self.n(), self.cfg.node_count);
            let (t, _, _) = crate::member::whole::page_of(self.cfg.id, written.at.page, k, nodes);
            let applied = (k..n)
                .map(|i| (t + i) % nodes)
                .all(|node| w.remote.iter().any(|&(r, _)| r == node) || self.is_refused(node));
            if applied {
                lock(&self.store)
                    .slab
                    .mark_done(written.at.page, written.seq);
            }
        }
        bump(&self.counters.total_items);
        Some(record::cas_of(version))
    }

    /// A whole write that does not finish on the loop: the deltas it sent go to the queue of
    /// those to send again (the parity positions that applied one ignore it; those of nodes
    /// down are queued already).
    fn loop_write_requeue(&self, w: &LoopWrite) {
        if let Some(written) = &w.written {
            let sent = |node: usize| w.remote.iter().any(|&(n, _)| n == node);
            self.queue_deltas(w.stripe, &w.key, &w.entry, written, w.watermark, sent);
        }
    }

    /// Undoes a write in doubt ([`Node::loop_write_sent`], then no ack): its bytes released and
    /// the key's previous entry back, its version held open until the key is written again
    /// (`StripeIndex::hold_open`). The members that stored its record then keep the one it
    /// replaced (the watermark stays below it), so the previous entry stays readable;
    /// finished, the version would let them drop it, and every read of the key would fail
    /// until it was written again. (A rebuilt index starts with nothing in flight.)
    pub fn loop_write_doubt(&self, w: LoopWrite) {
        self.loop_write_requeue(&w);
        log::debug!(
            "stripe {}: {} v{} in doubt on the loop",
            w.stripe,
            String::from_utf8_lossy(&w.key),
            w.entry.version
        );
        let mut g = lock(&self.stripes[w.stripe]);
        if let Some(ix) = g.as_mut() {
            ix.release(w.entry.positions, w.entry.charge_bytes);
            ix.hold_open(&w.key, w.entry.version);
            if let Some(o) = w.old {
                ix.adopt(&w.key, o);
            }
        }
    }

    /// Undoes a write that will not finish on the loop, as a failed write is undone: its bytes
    /// released, the key's previous entry back, its version finished, or held open if its
    /// records left (a worker writes it again under a later version, which releases it).
    pub fn loop_write_abandon(&self, w: LoopWrite) {
        self.loop_write_requeue(&w);
        let (positions, charge, version) =
            (w.entry.positions, w.entry.charge_bytes, w.entry.version);
        let sent = self.loop_write_sent(&w);
        log::debug!(
            "stripe {}: {} v{version} abandoned on the loop ({sent} sent)",
            w.stripe,
            String::from_utf8_lossy(&w.key)
        );
        let mut g = lock(&self.stripes[w.stripe]);
        if let Some(ix) = g.as_mut() {
            ix.release(positions, charge);
            if sent {
                ix.hold_open(&w.key, version);
            } else {
                ix.finish(version);
            }
            if let Some(o) = w.old {
                ix.adopt(&w.key, o);
            }
        }
    }
}

/// A [`Modify`]'s write as it started: its records to send (with the number an arithmetic
/// answers and the command's mode), stored on this node alone, or nothing stored (a worker
/// runs the request).
fn modify_started(
    start: LoopWriteStart,
    number: Option<(bool, u64)>,
    mode: StoreMode,
    exptime: i64,
) -> LoopModifyStart {
    match start {
        LoopWriteStart::Send(mut w) => {
            w.number = number;
            w.mode = mode;
            LoopModifyStart::Send(w)
        }
        LoopWriteStart::Stored(cas) => LoopModifyStart::Stored {
            cas,
            number,
            exptime,
        },
        LoopWriteStart::Worker
        | LoopWriteStart::Refused(_)
        | LoopWriteStart::Forward(_)
        | LoopWriteStart::Fetch(_) => LoopModifyStart::Worker,
    }
}
