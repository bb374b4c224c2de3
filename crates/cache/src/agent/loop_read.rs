//! Reads run to completion on the client event loop.
//!
//! A `get` of one key at the stripe's agent, with every data position up, needs nothing a
//! worker thread gives: the index says which version to read, this node's own chunks are read
//! from its store, and the other data members are asked for theirs with one `Get` each. The
//! client loop sends those requests itself, on connections it owns, and the replies resume the
//! read there ([`Node::loop_read_chunk`], [`Node::loop_read_finish`]). Anything out of the
//! ordinary — the index being rebuilt, the key's lock held by a write, an expired entry, a
//! member down, a chunk of another version or failing its CRC, a reply that does not come,
//! the lease lost meanwhile — hands the request to a worker, which runs the full read
//! (degraded if needed) under the key's lock. So the loop path never answers what the worker
//! path would not.
//!
//! A degraded read of a coded value (a data member down, or a position forced lost by the
//! benchmarks' `mg ... Oinec-degrade-<p>`) also runs on the loop when the scheme's repair plan
//! for that loss is installed: the loop launches the plan on the node's engine host
//! (`PlanExec::repair_start`) beside its `Get`s of the data chunks still up, and the run's end,
//! posted to the loop by the host, resumes the read ([`Node::loop_read_planned`]). A plan whose
//! template is not installed yet (a worker installs it), a chunk that fails, or a run that
//! fails or outlasts the loop's patience goes to a worker, as above.

use std::sync::atomic::Ordering;

use crate::agent::index::Entry;
use crate::agent::whole::WholeRepair;
use crate::carrier::peer::{Request, Response};
use crate::carrier::plans::RepairAt;
use crate::cluster::stripe;
use crate::member::whole::{self, Piece};
use crate::node::{bump, lock, Node};
use crate::record::{self, Kind};
use crate::time;

/// What the client loop can do with a read.
#[derive(Debug)]
pub enum LoopRead {
    /// Run it on a worker (the full path).
    Worker,
    /// The key is not in the cache.
    Miss,
    /// Every chunk it needs was on this node.
    Value(LoopValue),
    /// Its reply is in the output buffer given ([`Node::loop_read_into`]), or written to the
    /// socket given with what the socket did not take in that buffer
    /// ([`Node::loop_read_send`]): a value whole at this node, read from its slot.
    Composed,
    /// Chunks to ask other members for: [`LoopPending::remote`].
    Fetch(LoopPending),
    /// Another node leads the key's stripe: send it the request.
    Forward(usize),
}

/// Where the reply to a client's `get` of one key goes when the value lies whole at this node
/// ([`Node::loop_read_into`], [`Node::loop_read_send`]).
pub struct ReplySink<'a> {
    /// The connection's output.
    pub out: &'a mut Vec<u8>,
    /// `gets`: the cas on the `VALUE` line.
    pub with_cas: bool,
    /// The client's socket, when nothing waits in `out`: the reply is written to it.
    pub socket: Option<&'a mut dyn std::io::Write>,
    /// The bytes written to `socket`.
    pub sent: usize,
}

/// The `END` after a `get`'s one value (the `\r\n` that ends its data first).
const DATA_END: &[u8] = b"\r\nEND\r\n";

/// Writes a `get` reply — the `VALUE` line in `out`, `data` from where it lies, [`DATA_END`] —
/// to `socket` in one vectored write; leaves in `out` what the socket did not take (all of it
/// when the write fails or would block). Returns the bytes written.
fn send_reply(socket: &mut dyn std::io::Write, data: &[u8], out: &mut Vec<u8>) -> usize {
    use std::io::IoSlice;
    let sent = loop {
        let parts = [
            IoSlice::new(out),
            IoSlice::new(data),
            IoSlice::new(DATA_END),
        ];
        match socket.write_vectored(&parts) {
            Ok(n) => break n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(_) => break 0,
        }
    };
    let line = out.len();
    out.drain(..sent.min(line));
    let mut skip = sent.saturating_sub(line);
    for part in [data, DATA_END] {
        let from = skip.min(part.len());
        out.extend_from_slice(&part[from..]);
        skip -= from;
    }
    sent
}

/// A value read by the loop.
#[derive(Debug, PartialEq, Eq)]
pub struct LoopValue {
    pub key: Vec<u8>,
    pub flags: u32,
    pub cas: u64,
    /// Absolute (memcached's `exptime` as stored), for a front that asked for it.
    pub exptime: i64,
    pub value: Vec<u8>,
}

/// A read waiting for chunks from other members.
#[derive(Debug)]
pub struct LoopPending {
    stripe: usize,
    /// The fencing token of the term the read began in (`cluster::coord`; 0: none).
    fence: u64,
    key: Vec<u8>,
    entry: Entry,
    /// Data chunks by position (`0..k`): each member's record as it came, and where its data
    /// lies in it (not copied out).
    have: Vec<Option<(Vec<u8>, std::ops::Range<usize>)>>,
    /// (node, position) of every chunk still to be fetched, in position order.
    pub remote: Vec<(usize, usize)>,
    /// A forced-degraded read of a whole value: the range it rebuilds (its positions are
    /// those of the page's stripe).
    range: Option<Box<RangeRead>>,
    /// A degraded read of a coded value: the repair run that rebuilds its missing data
    /// chunks ([`PLAN_STEP`] in `remote`).
    plan: Option<Box<PlanRead>>,
}

/// The node of the step in [`LoopPending::remote`] that is a repair run on the engine rather
/// than a request to a member: the loop launches it ([`Node::loop_read_launch`]) and the run's
/// end answers it ([`Node::loop_read_planned`]).
pub const PLAN_STEP: usize = usize::MAX;

/// A coded value's missing data chunks, rebuilt by the scheme's repair plan.
#[derive(Debug)]
struct PlanRead {
    /// Every position counted lost (down, or forced), and the data positions among them.
    lost: Vec<usize>,
    missing: Vec<usize>,
    /// The position a request forced lost.
    degrade: Option<u8>,
    chunk_bytes: usize,
    /// The run, once launched and until it is finished or given up.
    nonce: Option<u64>,
}

/// A whole value's record rebuilt on the loop: the same byte range of the other positions of
/// its page's stripe, combined over a consistent cut (`Node::combine_range`).
#[derive(Debug)]
struct RangeRead {
    /// Page stripe, the lost position (the home's), page in the stripe, and the range.
    t: usize,
    target: usize,
    q: u32,
    offset: u32,
    len: u32,
    pieces: Vec<Piece>,
    /// The range's bytes by position, as they came.
    bytes: Vec<Option<Vec<u8>>>,
    /// Every position of the page's stripe that is up but this node: asked again, all of
    /// them, when the first answers held no consistent cut (`Node::loop_read_again`).
    all: Vec<(usize, usize)>,
    asked_again: bool,
}

impl LoopPending {
    /// The request for the chunk at `position` (one of [`LoopPending::remote`]).
    pub fn request(&self, position: usize) -> Request {
        if let Some(r) = &self.range {
            return Request::Range {
                stripe: r.t as u32,
                page_stripe: r.t as u32,
                position: position as u8,
                page: r.q,
                offset: r.offset,
                len: r.len,
            };
        }
        let get = Request::Get {
            stripe: self.stripe as u32,
            position: position as u8,
            key: self.key.clone(),
            version: self.entry.version,
        };
        crate::carrier::peer::fenced(self.fence, get)
    }
}

impl Node {
    /// Starts a plain read of `key` (no touch, no forced degradation) on the client loop.
    pub fn loop_read_start(&self, key: &[u8]) -> LoopRead {
        self.loop_read_begin(key, None, None)
    }

    /// A plain read as [`Node::loop_read_start`], whose reply to a client's `get` (`VALUE`
    /// line with the cas when `with_cas`, the data, `END`) is appended to `out` when the value
    /// lies whole at this node ([`LoopRead::Composed`]): the data goes from the store into the
    /// reply with no copy in between. Any other outcome leaves `out` as it was.
    pub fn loop_read_into(&self, key: &[u8], out: &mut Vec<u8>, with_cas: bool) -> LoopRead {
        let mut sink = ReplySink {
            out,
            with_cas,
            socket: None,
            sent: 0,
        };
        self.loop_read_begin(key, None, Some(&mut sink))
    }

    /// [`Node::loop_read_into`] for a client connection with nothing waiting to be written
    /// (`out` empty): a value whole at this node goes from the store to `socket` in one
    /// vectored write, with no copy, if the lease this node remembers still stands then
    /// (checked before the write, as no lock but the store's may be held there); the part the
    /// socket does not take (all of it on an error, which the connection's own write meets
    /// next) is put in `out`. Returns the outcome and the bytes written to `socket`.
    pub fn loop_read_send(
        &self,
        key: &[u8],
        out: &mut Vec<u8>,
        with_cas: bool,
        socket: &mut dyn std::io::Write,
    ) -> (LoopRead, usize) {
        debug_assert!(out.is_empty(), "a reply written ahead of one waiting");
        let mut sink = ReplySink {
            out,
            with_cas,
            socket: Some(socket),
            sent: 0,
        };
        let read = self.loop_read_begin(key, None, Some(&mut sink));
        (read, sink.sent)
    }

    /// Starts a forced-degraded read (`mg <key> v Oinec-degrade-<position>`) on the client
    /// loop. Only that of a whole value at this node, its home, with position 0 forced lost:
    /// its record is rebuilt from the same range of its page's stripe, asked of the other
    /// positions by the loop (`Range`, one each); any other goes to a worker, as does one
    /// whose pieces hold no consistent cut (deltas in flight: the worker reads again).
    pub fn loop_read_start_degraded(&self, key: &[u8], position: u8) -> LoopRead {
        self.loop_read_begin(key, Some(position), None)
    }

    /// Runs `f` on the data of this node's own record of `e` at position `p` (a whole value at
    /// its home, or a replica), under the store's lock: `None` when the record is not here as
    /// the index says (missing, another version, refused by the store's fence, or failing its
    /// CRC, which is counted), for the worker's path to rebuild.
    pub(crate) fn with_own_record<R>(
        &self,
        stripe: usize,
        key: &[u8],
        e: &Entry,
        p: usize,
        f: impl FnOnce(&[u8]) -> R,
    ) -> Option<R> {
        let fence = self.fence(stripe);
        let mut store = lock(&self.store);
        store.admit(stripe as u32, fence).ok()?;
        // A whole value's record is read where the index says it lies (no lookup in the slot
        // table) when it is there; else as any record.
        let at_home = e.whole_at.filter(|_| e.kind == Kind::Whole);
        let found = at_home
            .and_then(|at| store.whole_slot(at))
            .map(record::check)
            .filter(|c| {
                c.as_ref()
                    .is_ok_and(|c| c.key == key && c.version == e.version)
            })
            .or_else(|| {
                store
                    .get(stripe as u32, p as u8, key, e.version)
                    .map(record::check)
            });
        match found {
            Some(Ok(c))
                if c.key == key && c.chunk_index as usize == p && c.version == e.version =>
            {
                Some(f(c.data))
            }
            Some(Err(_)) => {
                bump(&self.counters.crc_errors);
                None
            }
            _ => None,
        }
    }

    fn loop_read_begin(
        &self,
        key: &[u8],
        degrade: Option<u8>,
        sink: Option<&mut ReplySink<'_>>,
    ) -> LoopRead {
        let stripe = self.placement.stripe_of(key);
        if !self.leads(stripe) {
            return match self.agent_of(stripe) {
                Some(agent) if agent != self.cfg.id => LoopRead::Forward(agent),
                _ => LoopRead::Worker,
            };
        }
        // A write of the key under way holds its lock: the worker waits for it. (The front
        // holds a request for a locked key back before it gets here; this is a lock taken
        // since it looked.)
        let Some(_key_guard) = self.key_locks.try_lock(crate::node::key_lock_index(key)) else {
            return LoopRead::Worker;
        };
        self.drop_stale_index(stripe);
        if self.down_positions(stripe) > self.parity() {
            return LoopRead::Worker;
        }
        let oldest = self.oldest_live_us.load(Ordering::Relaxed);
        let found = {
            let mut guard = lock(&self.stripes[stripe]);
            // No index (this node just became the agent): the worker rebuilds it.
            let Some(ix) = guard.as_mut() else {
                return LoopRead::Worker;
            };
            let now_us = time::now_micros();
            ix.lookup_live(key, time::secs_of(now_us), now_us, oldest)
        };
        let e = match found {
            Ok(Some(e)) => e,
            Ok(None) => return LoopRead::Miss,
            // Expired or flushed: the worker deletes its records.
            Err(_) => return LoopRead::Worker,
        };
        if e.kind == Kind::Coded {
            let forced = degrade.filter(|&p| (p as usize) < self.k());
            let down = (0..self.k()).any(|p| !self.is_up(self.placement.node_of(stripe, p)));
            if forced.is_some() || down {
                return self.loop_plan_read(stripe, key, e, forced);
            }
        }
        if let Some(position) = degrade {
            return self.loop_range_read(stripe, key, e, position);
        }
        // The one position read for a value kept whole: this node's own replica, when it holds
        // one; a whole value at its home, which is this node when it leads its own stripe (a
        // record it does not hold, lost in a restart, is rebuilt by the worker).
        let single = match e.kind {
            Kind::Replica => {
                match (0..e.positions).find(|&p| self.placement.node_of(stripe, p) == self.cfg.id) {
                    Some(p) => Some(p),
                    None => return LoopRead::Worker,
                }
            }
            Kind::Coded => None,
            Kind::Whole => {
                if self.placement.node_of(stripe, 0) != self.cfg.id {
                    return LoopRead::Worker;
                }
                Some(0)
            }
        };
        // A value whole at this node: read from the store under its lock, checked and copied
        // out once.
        if let Some(p) = single {
            if self.placement.node_of(stripe, p) == self.cfg.id {
                self.local_messages.fetch_add(1, Ordering::Relaxed);
                // With a sink, the reply is composed from the store's bytes (`mark`: where it
                // starts, to take it back should the lease have lapsed meanwhile), or written
                // from them to the client's socket once the lease is seen to stand (`sent`).
                let mut sink = sink;
                let mut mark = None;
                let mut sent = false;
                let read = self.with_own_record(stripe, key, &e, p, |data| match sink.as_mut() {
                    Some(s) => {
                        let cas = s.with_cas.then_some(e.cas());
                        let remembered = s.socket.is_some()
                            && self.leads_remembered(stripe, std::time::Instant::now());
                        if let Some(socket) = s.socket.as_mut().filter(|_| remembered) {
                            proto::compose::value_line(s.out, key, e.flags, data.len(), cas);
                            s.sent = send_reply(&mut **socket, data, s.out);
                            sent = true;
                        } else {
                            mark = Some(s.out.len());
                            proto::compose::value(s.out, key, e.flags, data, cas);
                            proto::compose::reply(s.out, proto::Reply::End);
                        }
                        Vec::new()
                    }
                    None => data.to_vec(),
                });
                let Some(value) = read else {
                    return LoopRead::Worker;
                };
                if sent {
                    return LoopRead::Composed;
                }
                if !self.leads(stripe) {
                    if let (Some(s), Some(mark)) = (sink.as_mut(), mark) {
                        s.out.truncate(mark);
                    }
                    bump(&self.counters.lease_lost_ops);
                    return LoopRead::Worker;
                }
                if mark.is_some() {
                    return LoopRead::Composed;
                }
                return LoopRead::Value(LoopValue {
                    key: key.to_vec(),
                    flags: e.flags,
                    cas: e.cas(),
                    exptime: e.exptime,
                    value,
                });
            }
        }
        let positions: Vec<usize> = match single {
            Some(p) => vec![p],
            None => (0..self.k()).collect(),
        };
        if positions
            .iter()
            .any(|&p| !self.is_up(self.placement.node_of(stripe, p)))
        {
            return LoopRead::Worker;
        }
        let Some(pending) = self.loop_read_pending(stripe, key, e, positions) else {
            return LoopRead::Worker;
        };
        if pending.remote.is_empty() {
            return match self.loop_read_finish(pending) {
                Some(v) => LoopRead::Value(v),
                None => LoopRead::Worker,
            };
        }
        LoopRead::Fetch(pending)
    }

    /// The read of `e`'s chunks at `positions`: this node's own read now, the others' to be
    /// asked for. `None` if one of its own cannot be used (the worker reads).
    pub(crate) fn loop_read_pending(
        &self,
        stripe: usize,
        key: &[u8],
        e: Entry,
        positions: Vec<usize>,
    ) -> Option<LoopPending> {
        let mut pending = LoopPending {
            stripe,
            fence: self.fence(stripe),
            key: key.to_vec(),
            have: vec![None; positions.iter().max().map_or(0, |&p| p + 1)],
            remote: Vec::new(),
            entry: e,
            range: None,
            plan: None,
        };
        self.loop_read_chunks(&mut pending, positions)
            .then_some(pending)
    }

    /// A degraded read of coded value `e` (a data member down, or data position `forced`
    /// forced lost): the data chunks still up from their members, the missing ones from the
    /// repair plan of the loss (see the module documentation).
    fn loop_plan_read(&self, stripe: usize, key: &[u8], e: Entry, forced: Option<u8>) -> LoopRead {
        let Some(x) = self.plans.as_ref() else {
            return LoopRead::Worker;
        };
        let (k, n) = (self.k(), self.n());
        let lost: Vec<usize> = (0..n)
            .filter(|&p| forced == Some(p as u8) || !self.is_up(self.placement.node_of(stripe, p)))
            .collect();
        if lost.len() > self.parity() {
            return LoopRead::Worker;
        }
        let missing: Vec<usize> = lost.iter().copied().filter(|&p| p < k).collect();
        let chunk_bytes = (e.value_bytes as usize).div_ceil(k);
        let members = self.stripe_members(stripe);
        if chunk_bytes == 0
            || !x.repair_ready(&self.repair_at(stripe, &members, &lost), chunk_bytes)
        {
            return LoopRead::Worker;
        }
        let up: Vec<usize> = (0..k).filter(|p| !missing.contains(p)).collect();
        let mut pending = LoopPending {
            stripe,
            fence: self.fence(stripe),
            key: key.to_vec(),
            have: vec![None; k],
            remote: vec![(PLAN_STEP, 0)],
            entry: e,
            range: None,
            plan: Some(Box::new(PlanRead {
                lost,
                missing,
                degrade: forced,
                chunk_bytes,
                nonce: None,
            })),
        };
        if !self.loop_read_chunks(&mut pending, up) {
            return LoopRead::Worker;
        }
        LoopRead::Fetch(pending)
    }

    /// The chunks of `positions`: this node's own read at once, the others' added to the
    /// requests to send. False if one of its own cannot be used (the worker reads).
    fn loop_read_chunks(&self, pending: &mut LoopPending, positions: Vec<usize>) -> bool {
        for p in positions {
            let node = self.placement.node_of(pending.stripe, p);
            if node == self.cfg.id {
                self.local_messages.fetch_add(1, Ordering::Relaxed);
                let res = self.handle_peer(pending.request(p));
                if !self.loop_read_chunk(pending, p, Some(res)) {
                    return false;
                }
            } else {
                pending.remote.push((node, p));
            }
        }
        true
    }

    /// The node of each position of `stripe`.
    fn stripe_members(&self, stripe: usize) -> Vec<usize> {
        (0..self.n())
            .map(|p| self.placement.node_of(stripe, p))
            .collect()
    }

    /// Where a repair of `stripe`'s positions `lost` runs: this node, the stripe's agent.
    fn repair_at<'a>(
        &self,
        stripe: usize,
        members: &'a [usize],
        lost: &'a [usize],
    ) -> RepairAt<'a> {
        RepairAt {
            code: self.cfg.code,
            scheme: self.cfg.scheme,
            mode: self.cfg.mode,
            members,
            agent: self.cfg.id,
            stripe,
            lost,
        }
    }

    /// Launches the repair run of a degraded read (its [`PLAN_STEP`]): `done` is called, on the
    /// loop that steps the engine host (the first), when it ends. False if it could not be
    /// launched.
    pub fn loop_read_launch(
        &self,
        pending: &mut LoopPending,
        done: impl FnOnce(bool) + Send + 'static,
    ) -> bool {
        let (Some(x), Some(plan)) = (self.plans.as_ref(), pending.plan.as_mut()) else {
            return false;
        };
        let members = self.stripe_members(pending.stripe);
        let at = self.repair_at(pending.stripe, &members, &plan.lost);
        let version = pending.entry.version;
        plan.nonce = x.repair_start(&at, &pending.key, version, plan.chunk_bytes, done);
        plan.nonce.is_some()
    }

    /// Takes the end of a degraded read's repair run (`ran`: it succeeded): its chunks join the
    /// others. False if the read cannot finish on the loop.
    pub fn loop_read_planned(&self, pending: &mut LoopPending, ran: bool) -> bool {
        let (Some(x), Some(plan)) = (self.plans.as_ref(), pending.plan.as_mut()) else {
            return false;
        };
        let Some(nonce) = plan.nonce.take() else {
            return false;
        };
        match x.repair_finish(nonce, &plan.missing, plan.chunk_bytes, ran) {
            Ok(chunks) => {
                for (&p, c) in plan.missing.iter().zip(chunks) {
                    let len = c.len();
                    pending.have[p] = Some((c, 0..len));
                }
                true
            }
            Err(reason) => {
                log::debug!(
                    "node {}: a degraded read's repair run failed on the loop: {reason}",
                    self.cfg.id
                );
                false
            }
        }
    }

    /// A read handed to a worker before its repair run ended: the run's chunks are dropped.
    pub fn loop_read_abandon(&self, pending: &mut LoopPending) {
        if let (Some(x), Some(nonce)) = (
            self.plans.as_ref(),
            pending.plan.as_mut().and_then(|p| p.nonce.take()),
        ) {
            x.repair_give_up(nonce);
        }
    }

    /// A forced-degraded read of position `degrade` of `e` (see
    /// [`Node::loop_read_start_degraded`]).
    fn loop_range_read(&self, stripe: usize, key: &[u8], e: Entry, degrade: u8) -> LoopRead {
        let home = self.placement.node_of(stripe, 0);
        let (Kind::Whole, 0, Some(at)) = (e.kind, degrade, e.whole_at) else {
            return LoopRead::Worker;
        };
        // With repairs on the engine's plans the worker runs the plan (it waits for it).
        let planned = self.cfg.whole_repair == WholeRepair::Plan && self.plans.is_some();
        if home != self.cfg.id || planned {
            return LoopRead::Worker;
        }
        let (k, n, nodes) = (self.k(), self.n(), self.cfg.node_count);
        let (t, target, q) = whole::page_of(home, at.page, k, nodes);
        let remote: Vec<(usize, usize)> = (0..n)
            .filter(|&p| p != target)
            .map(|p| ((t + p) % nodes, p))
            .filter(|&(node, _)| node != self.cfg.id && self.is_up(node))
            .collect();
        if remote.len() < k {
            return LoopRead::Worker;
        }
        // Any k positions of an RS code rebuild the value; an LRC's may not, so it asks them all.
        let mds = matches!(self.cfg.code, codes::Code::Rs { .. });
        let all = remote.clone();
        let remote = if mds {
            spare_one(remote, k, key)
        } else {
            remote
        };
        LoopRead::Fetch(LoopPending {
            stripe,
            fence: self.fence(stripe),
            key: key.to_vec(),
            entry: e,
            have: Vec::new(),
            remote,
            plan: None,
            range: Some(Box::new(RangeRead {
                t,
                target,
                q,
                offset: at.offset,
                len: at.len,
                pieces: Vec::new(),
                bytes: vec![None; n],
                all,
                asked_again: false,
            })),
        })
    }

    /// Takes the reply to the request for `position` (`None`: the member did not answer):
    /// false when the read cannot finish on the loop (a missing or bad chunk). A range read
    /// keeps every piece that came whole and decides when all are in.
    pub fn loop_read_chunk(
        &self,
        pending: &mut LoopPending,
        position: usize,
        reply: Option<Response>,
    ) -> bool {
        if let Some(r) = pending.range.as_mut() {
            if let Some(Response::Range { seqs, bytes }) = reply {
                if bytes.len() == r.len as usize && position < r.bytes.len() {
                    r.pieces.push(Piece { position, seqs });
                    r.bytes[position] = Some(bytes);
                }
            }
            return true;
        }
        let Some(Response::Record(Some(bytes))) = reply else {
            return false;
        };
        match record::parse(&bytes) {
            Ok((h, data))
                if h.version == pending.entry.version
                    && h.key == pending.key
                    && h.chunk_index as usize == position =>
            {
                let start = data.as_ptr() as usize - bytes.as_ptr() as usize;
                let range = start..start + data.len();
                pending.have[position] = Some((bytes, range));
                true
            }
            Ok(_) => {
                bump(&self.counters.version_mismatches);
                false
            }
            Err(_) => {
                bump(&self.counters.crc_errors);
                false
            }
        }
    }

    /// A range read whose answers are all in and hold no consistent cut of k (a delta still
    /// on its way to the parity positions when they answered, which a write of another value
    /// of the page makes likely under a write-heavy load): it asks every position again, once,
    /// on the loop, rather than go to a worker (which asks them all and waits 2 ms between
    /// tries). True if it did: its answers so far are dropped and `remote` is every position.
    /// Counted in `loop_range_reasks`.
    pub fn loop_read_again(&self, pending: &mut LoopPending) -> bool {
        let Some(r) = pending.range.as_mut() else {
            return false;
        };
        if r.asked_again || whole::consistent(&r.pieces, self.k()).len() >= self.k() {
            return false;
        }
        r.asked_again = true;
        r.pieces.clear();
        r.bytes.iter_mut().for_each(|b| *b = None);
        pending.remote = r.all.clone();
        bump(&self.counters.loop_range_reasks);
        true
    }

    /// Whether a range read already holds a consistent cut of k pieces: it finishes then,
    /// without waiting for the slowest positions (their replies, when they come, are dropped).
    pub fn loop_read_enough(&self, pending: &LoopPending) -> bool {
        pending
            .range
            .as_ref()
            .is_some_and(|r| whole::consistent(&r.pieces, self.k()).len() >= self.k())
    }

    /// The value once every chunk is in, if this node still leads the stripe (otherwise
    /// another node may have led it meanwhile, and the worker's path decides).
    pub fn loop_read_finish(&self, mut pending: LoopPending) -> Option<LoopValue> {
        if !self.leads(pending.stripe) {
            bump(&self.counters.lease_lost_ops);
            return None;
        }
        let e = &pending.entry;
        if let Some(r) = pending.range.take() {
            let (rec, _) = self
                .combine_range(r.target, r.len, &r.pieces, &r.bytes)
                .ok()?;
            let value = match record::parse(&rec) {
                Ok((h, data)) if h.version == e.version && h.key == pending.key => data.to_vec(),
                _ => return None,
            };
            bump(&self.counters.forced_degraded_reads);
            bump(&self.counters.degraded_reads);
            bump(&self.counters.whole_rebuilds);
            return Some(LoopValue {
                flags: e.flags,
                cas: e.cas(),
                exptime: e.exptime,
                value,
                key: pending.key,
            });
        }
        fn chunk(c: &Option<(Vec<u8>, std::ops::Range<usize>)>) -> Option<&[u8]> {
            c.as_ref().map(|(record, data)| &record[data.clone()])
        }
        let value = match e.kind {
            Kind::Replica | Kind::Whole => pending.have.iter().find_map(chunk)?.to_vec(),
            Kind::Coded => {
                let data: Vec<&[u8]> = pending.have.iter().map(chunk).collect::<Option<_>>()?;
                stripe::join(&data, e.value_bytes as usize)
            }
        };
        if let Some(plan) = &pending.plan {
            // As the worker's degraded read counts it; no chunk is written back (those rebuilt
            // are forced lost or on nodes down).
            let c = &self.counters;
            if plan.degrade.is_some() {
                bump(&c.forced_degraded_reads);
            }
            bump(&c.degraded_reads);
            bump(&c.loop_degraded_reads);
            c.chunks_repaired
                .fetch_add(plan.missing.len() as u64, Ordering::Relaxed);
            if let Some(x) = self.plans.as_ref() {
                x.counters
                    .degraded_plan_runs
                    .fetch_add(1, Ordering::Relaxed);
            }
        }
        Some(LoopValue {
            flags: e.flags,
            cas: e.cas(),
            exptime: e.exptime,
            value,
            key: pending.key,
        })
    }
}

/// The members a forced-degraded read of an MDS code asks: k of them make a cut, one more
/// spares the read the slowest of them. Which ones are left out turns with the key, so every
/// member answers its share. In position order, as [`LoopPending::remote`] is.
fn spare_one(mut remote: Vec<(usize, usize)>, k: usize, key: &[u8]) -> Vec<(usize, usize)> {
    let ask = k + 1;
    if remote.len() <= ask {
        return remote;
    }
    let turn = key
        .iter()
        .fold(0usize, |h, &b| h.wrapping_mul(31).wrapping_add(b as usize));
    let len = remote.len();
    remote.rotate_left(turn % len);
    remote.truncate(ask);
    remote.sort_unstable_by_key(|&(_, p)| p);
    remote
}

#[cfg(test)]
mod tests {
    use super::spare_one;

    #[test]
    fn a_degraded_read_asks_k_plus_one_members_turning_with_the_key() {
        // RS(6,3) at the home (position 0): the 8 other positions, on nodes 1..=8.
        let all: Vec<(usize, usize)> = (1..9).map(|p| (p, p)).collect();
        let mut left_out = [0usize; 9];
        for i in 0..900u32 {
            let key = format!("user{i}");
            let asked = spare_one(all.clone(), 6, key.as_bytes());
            assert_eq!(asked.len(), 7, "{key}");
            assert!(
                asked.windows(2).all(|w| w[0].1 < w[1].1),
                "in position order"
            );
            assert!(asked.iter().all(|a| all.contains(a)));
            let out: Vec<_> = all.iter().filter(|a| !asked.contains(a)).collect();
            assert_eq!(out.len(), 1);
            left_out[out[0].1] += 1;
            // The same key always leaves out the same member.
            assert_eq!(asked, spare_one(all.clone(), 6, key.as_bytes()));
        }
        // Every member is left out for some keys, none for most.
        assert!(
            left_out[1..].iter().all(|&c| (50..200).contains(&c)),
            "{left_out:?}"
        );
        // With no more than k + 1 up, every one is asked.
        assert_eq!(spare_one(all[..7].to_vec(), 6, b"k"), all[..7].to_vec());
        assert_eq!(spare_one(all[..6].to_vec(), 6, b"k"), all[..6].to_vec());
    }
}
