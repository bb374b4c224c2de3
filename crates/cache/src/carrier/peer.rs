//! Peer messages between cache nodes and the transport that carries them.
//!
//! The data path talks to other nodes only through [`PeerTransport`], so the transport can
//! change (engine plans, RDMA) without touching the agent's logic. On TCP every message is
//! framed as a little-endian u32 length and the body, on the event loops' links to the other
//! nodes (`carrier::links`); a thread other than a loop calls through them
//! (`carrier::calls::LoopTransport`), and requests to different nodes of one call go out
//! before any reply is read, so a write's chunks travel in parallel.

use std::io::{self, Read, Write};
use std::time::Duration;

use proto::StoreMode;
use thiserror::Error;

/// Largest peer message: a 1 MiB-item replica plus headers, with room for `-I` up to 128 MiB.
pub const MESSAGE_MAX_BYTES: usize = 256 << 20;

/// What the agent of a stripe is asked to do (forwarded by the node a client talks to).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum AgentOp {
    /// Read a value; `touch` sets a new exptime (gat); `degrade` forces a degraded read of
    /// that chunk position.
    Get {
        key: Vec<u8>,
        touch: Option<i64>,
        degrade: Option<u8>,
    },
    /// Storage commands; `compare_cas` for cas and meta sets with `C`. On the wire the mode is
    /// one byte (see [`store_mode_byte`]).
    Store {
        mode: StoreMode,
        key: Vec<u8>,
        flags: u32,
        exptime: i64,
        compare_cas: Option<u64>,
        value: Vec<u8>,
        once: Once,
    },
    Delete {
        key: Vec<u8>,
        compare_cas: Option<u64>,
    },
    Touch {
        key: Vec<u8>,
        exptime: i64,
    },
    Arith {
        incr: bool,
        key: Vec<u8>,
        delta: u64,
        once: Once,
        /// `ma`'s condition, creation and TTL (none for `incr`/`decr`).
        meta: ArithMeta,
    },
    /// Test-only: flip one bit of the data of chunk `position`'s record.
    Flip {
        key: Vec<u8>,
        position: u8,
        bit: u64,
    },
    /// Recovery: the keys and versions of the stripe.
    Keys {
        stripe: u32,
    },
    /// A recovered node `to` is about to lead `stripe`: the acting agent stops leading it and
    /// finishes the operations it has under way before answering.
    Handover {
        stripe: u32,
        to: u32,
    },
    /// Recovery: rebuild the record of `position` for `key` at `version`.
    Repair {
        key: Vec<u8>,
        version: u64,
        position: u8,
    },
}

/// What `ma` adds to an `incr`/`decr` ([`AgentOp::Arith`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ArithMeta {
    /// `C`: only if the item's CAS value is this one (otherwise [`AgentResult::Exists`]).
    pub compare_cas: Option<u64>,
    /// `N` and `J`: on a miss, create the item with this exptime (as sent) holding this number
    /// (answered as the number, not counted).
    pub vivify: Option<(i64, u64)>,
    /// `T`: the item's new exptime (as sent), also of an item `N` creates.
    pub ttl: Option<i64>,
}

/// A write's request id, given by the node the client sent it to, and which try of it this is:
/// the agent stores the id in the records of the version the write makes (`record::Trail`), so
/// that a try after one whose fate is unknown is answered from what the first did instead of
/// being applied twice (`agent::once`). Id 0: none (the write is never tried again).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Once {
    pub id: u64,
    pub attempt: Attempt,
}

/// Which try of a write a message carries.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Attempt {
    /// The first: applied as memcached would.
    #[default]
    First,
    /// After a try whose fate is unknown: answered from the key's records if they show the id,
    /// otherwise refused as in doubt (the first try may have been applied and replaced since).
    Retry,
    /// A write given up on this node's event loop after its records left, run again by a worker:
    /// written anew if the stripe's index is still the one of `epoch` (nobody else can have
    /// led the stripe and adopted its records), otherwise as a [`Attempt::Retry`]. Sent to
    /// another node, it is a retry.
    Rerun { epoch: u64 },
}

impl Once {
    /// A first try of the write with this id.
    pub fn first(id: u64) -> Once {
        Once {
            id,
            attempt: Attempt::First,
        }
    }
}

impl AgentOp {
    /// The write's request id and try, for the writes that carry one.
    pub fn once(&self) -> Option<Once> {
        match self {
            AgentOp::Store { once, .. } | AgentOp::Arith { once, .. } if once.id != 0 => {
                Some(*once)
            }
            _ => None,
        }
    }

    /// The same write as a later try, if it carries an id: it can then be sent again after a try
    /// whose fate is unknown.
    pub fn retried(&self) -> Option<AgentOp> {
        let mut op = self.clone();
        match &mut op {
            AgentOp::Store { once, .. } | AgentOp::Arith { once, .. } if once.id != 0 => {
                once.attempt = Attempt::Retry;
            }
            _ => return None,
        }
        Some(op)
    }

    /// Safe to send again after a try whose fate is unknown: it reads, or sets what it sets
    /// to the same thing whenever it runs. A store, delete or arithmetic sent twice could act
    /// twice, the second time after other writes.
    pub fn repeatable(&self) -> bool {
        matches!(
            self,
            AgentOp::Get { .. }
                | AgentOp::Touch { .. }
                | AgentOp::Keys { .. }
                | AgentOp::Repair { .. }
        )
    }
}

/// The agent's answer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum AgentResult {
    Value {
        flags: u32,
        cas: u64,
        exptime: i64,
        value: Vec<u8>,
    },
    Miss,
    Stored {
        cas: u64,
    },
    NotStored,
    Exists,
    NotFound,
    Deleted,
    Touched,
    Number {
        number: u64,
        cas: u64,
        /// The item's exptime after it (absolute, 0: never), for `ma`'s `t`.
        exptime: i64,
    },
    NonNumeric,
    /// Done (flip, …).
    Ok,
    /// `SERVER_ERROR <reason>`.
    Error(String),
    /// The receiver is not the agent of the stripe in its view: ask again shortly.
    NotAgent,
    Keys(Vec<(Vec<u8>, u64)>),
    Record(Vec<u8>),
}

/// A message from one node to another.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Request {
    /// From node `from`: answered with the sender's view of it (the agent's lease, `lease.rs`).
    Heartbeat {
        from: u32,
    },
    /// Store a chunk record (the record names key, version and position).
    Put {
        stripe: u32,
        watermark: u64,
        record: Vec<u8>,
    },
    /// The record of `key` at `position`, of exactly `version`.
    Get {
        stripe: u32,
        position: u8,
        key: Vec<u8>,
        version: u64,
    },
    Delete {
        stripe: u32,
        key: Vec<u8>,
        version: u64,
    },
    Touch {
        stripe: u32,
        key: Vec<u8>,
        version: u64,
        exptime: i64,
    },
    /// Headers of every record of the stripe (index rebuild).
    List {
        stripe: u32,
    },
    Flip {
        stripe: u32,
        position: u8,
        key: Vec<u8>,
        bit: u64,
    },
    /// `flush_all`: items stored at or before this time (µs) are gone once it has passed.
    Flush {
        oldest_live_us: u64,
    },
    Agent(AgentOp),
    /// A chunk request of a leader's term, with its fencing token (`cluster::coord`): the
    /// member refuses it if it has seen a newer term of the stripe.
    Fenced {
        token: u64,
        req: Box<Request>,
    },
    /// The whole layout (`member::whole`): a home wrote a record of `stripe` into a slot of
    /// page `page` of page stripe `page_stripe`, at data position `data`; the receiver, parity
    /// position `position` of that page stripe, adds `coef · delta` at `offset` of its parity
    /// page (once per `seq`) and stores `record` (the value's location) as its record of the
    /// key.
    Delta {
        stripe: u32,
        watermark: u64,
        record: Vec<u8>,
        page_stripe: u32,
        position: u8,
        page: u32,
        data: u8,
        seq: u64,
        /// The home's deltas of the page up to this seq were applied at every parity
        /// position: the receiver drops those it keeps (`member::store`, retained deltas).
        committed: u64,
        /// The same for other pages the receiver keeps parity of (as in [`Request::Commit`]).
        commits: Vec<PageCommit>,
        offset: u32,
        /// Shared by the deltas of one write to its parity positions.
        delta: std::sync::Arc<[u8]>,
    },
    /// A byte range of page `page` of page stripe `page_stripe` as the receiver holds it at
    /// `position` (its slab page for a data position, its parity page otherwise), for the
    /// repair of a value of `stripe`: answered with [`Response::Range`].
    Range {
        stripe: u32,
        page_stripe: u32,
        position: u8,
        page: u32,
        offset: u32,
        len: u32,
    },
    /// How many pages of page stripe `page_stripe` the receiver holds at `position`: answered
    /// with a [`Response::Range`] of one seq, the count, and no bytes (a node rebuilding its
    /// pages after a restart).
    Pages {
        stripe: u32,
        page_stripe: u32,
        position: u8,
    },
    /// The whole layout: home `stripe`, rebuilt after a restart, found page `page` of page
    /// stripe `page_stripe` torn by the deltas it sent before it died (some parity positions
    /// applied them, others not). The receiver, parity position `position`, adds `bytes` (parity
    /// bytes, scaled) at `offset` of its page and moves its count for data position `data`
    /// from `from` to `to`, so the page agrees with the home's rebuilt page; only if its count
    /// is still `from` (a [`Response::Nack`] otherwise). A page moved back gives up the location
    /// records of the deltas it undoes.
    Realign {
        stripe: u32,
        page_stripe: u32,
        position: u8,
        page: u32,
        data: u8,
        from: u64,
        to: u64,
        offset: u32,
        bytes: Vec<u8>,
    },
    /// The whole layout: the deltas of data position `data` the receiver keeps for its parity
    /// page `page` of page stripe `page_stripe` (at `position`) with a seq above `above`
    /// (`member::store`, kept deltas): answered with [`Response::Kept`]. A node rebuilding a
    /// page whose parity pieces disagree on a dead home's seq sends them to the positions that
    /// miss them (`Node::complete_torn`).
    Kept {
        page_stripe: u32,
        position: u8,
        page: u32,
        data: u8,
        above: u64,
    },
    /// The whole layout: a home tells a parity position, for pages it wrote, how many of its
    /// deltas every parity position applied ((page stripe, parity position, page, data
    /// position, committed) each): the receiver drops the deltas it keeps up to those counts.
    /// Sent once a second for the pages whose count moved, so that the last deltas of a page
    /// not written again are not kept long.
    Commit(Vec<PageCommit>),
}

/// For a page a home wrote: (page stripe, the receiver's position in it, page, the home's data
/// position, how many of its deltas every parity position applied).
pub type PageCommit = (u32, u8, u32, u8, u64);

/// A home's delta a parity position keeps while another parity position of its page may miss
/// it (its seq above the `committed` the home last sent for the page).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KeptDelta {
    pub seq: u64,
    pub offset: u32,
    pub delta: std::sync::Arc<[u8]>,
    /// The Mem Stripe of the key written (its home's) and the location record that came with
    /// the delta, as the keeping position stored it.
    pub stripe: u32,
    pub record: Vec<u8>,
}

impl KeptDelta {
    /// The bytes it keeps (its delta and its record), as `whole_deltas_kept_bytes` counts them.
    pub fn bytes(&self) -> u64 {
        (self.delta.len() + self.record.len()) as u64
    }
}

/// `req` with fencing token `token` (`req` itself when the token is 0: no coordinator).
pub fn fenced(token: u64, req: Request) -> Request {
    if token == 0 {
        req
    } else {
        Request::Fenced {
            token,
            req: Box::new(req),
        }
    }
}

/// The reason a member gives for refusing a request of an older term.
pub fn fenced_out(stripe: u32, token: u64, seen: u64) -> String {
    format!("stripe {stripe}: term {token} is fenced out by term {seen}")
}

/// A reply.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Response {
    Ack,
    Nack(String),
    Heartbeat {
        incarnation: u64,
        ready: bool,
        /// The answering node sees the asking node up: a grant of the asking node's lease.
        grant: bool,
        /// With a grant: for how long (ms) it has seen the asking node up without a break.
        up_for_ms: u64,
        /// With a grant: the nodes the answering node exempts (it sees them down with their
        /// lease from it run out, or recovering: `lease.rs`).
        exempt: Vec<u32>,
    },
    Record(Option<Vec<u8>>),
    /// Headers, each encoded as a record without data, and the stripe's tombstones (a deleted
    /// key and its delete's version).
    Headers(Vec<Vec<u8>>, Vec<(Vec<u8>, u64)>),
    Agent(AgentResult),
    /// A page range with its seqs: one (the data page's) or k (a parity page's, per data
    /// position; `member::whole::GAPPED` while a delta is missing).
    Range {
        seqs: Vec<u64>,
        bytes: Vec<u8>,
    },
    /// The deltas a parity position keeps ([`Request::Kept`]), by seq.
    Kept(Vec<KeptDelta>),
}

impl Request {
    /// The stripe a chunk request is about.
    pub fn stripe(&self) -> Option<u32> {
        match self {
            Request::Put { stripe, .. }
            | Request::Get { stripe, .. }
            | Request::Delete { stripe, .. }
            | Request::Touch { stripe, .. }
            | Request::List { stripe }
            | Request::Flip { stripe, .. }
            | Request::Delta { stripe, .. } => Some(*stripe),
            Request::Fenced { req, .. } => req.stripe(),
            // Page reads are not fenced: a repair reads the value's location first (a fenced
            // `Get`), and a node rebuilding its pages after a restart holds no term.
            Request::Heartbeat { .. }
            | Request::Flush { .. }
            | Request::Agent(_)
            | Request::Range { .. }
            | Request::Pages { .. }
            | Request::Realign { .. }
            | Request::Kept { .. }
            | Request::Commit(_) => None,
        }
    }

    /// Heartbeats are not data messages (they are left out of per-operation counts).
    pub fn is_data(&self) -> bool {
        !matches!(self, Request::Heartbeat { .. })
    }
}

/// Why a call to a peer failed: the peer is unreachable or broke the protocol.
#[derive(Debug, Error)]
pub enum PeerError {
    /// The request was not sent (no connection, or the write failed).
    #[error("node {node} unreachable: {source}")]
    Io { node: usize, source: io::Error },
    /// The request was sent and no reply came: the node may or may not have acted on it.
    #[error("node {node} sent no reply: {source}")]
    NoReply { node: usize, source: io::Error },
    #[error("node {node} sent a malformed message: {reason}")]
    Malformed { node: usize, reason: String },
    #[error("node {node} is not in the cluster")]
    UnknownNode { node: usize },
}

/// The data path to other nodes.
pub trait PeerTransport: Send + Sync + std::fmt::Debug {
    /// Sends each request to its node and returns the replies in the same order. Requests to
    /// different nodes proceed in parallel.
    fn call_many(&self, calls: Vec<(usize, Request)>) -> Vec<Result<Response, PeerError>>;

    /// [`PeerTransport::call_many`], also handing each reply that comes to `early` (with the
    /// index of its request) as soon as it is in, before the slowest: the heartbeats take each
    /// peer's grant when it arrives, not when a silent peer's deadline has passed. By default,
    /// at the end.
    fn call_many_early(
        &self,
        calls: Vec<(usize, Request)>,
        early: &mut dyn FnMut(usize, &Response),
    ) -> Vec<Result<Response, PeerError>> {
        let replies = self.call_many(calls);
        for (i, r) in replies.iter().enumerate() {
            if let Ok(r) = r {
                early(i, r);
            }
        }
        replies
    }

    /// Data messages sent and received so far (heartbeats excluded).
    fn data_messages(&self) -> (u64, u64);
}

// ---- encoding ----

/// An encoder: the bytes, and (for a frame sent from where its delta lies, `Some`) the length
/// of the delta left out of them ([`push_request_frame_leaving_delta`]).
struct W(Vec<u8>, Option<usize>);

impl W {
    fn u8(&mut self, v: u8) -> &mut Self {
        self.0.push(v);
        self
    }
    fn u32(&mut self, v: u32) -> &mut Self {
        self.0.extend_from_slice(&v.to_le_bytes());
        self
    }
    fn u64(&mut self, v: u64) -> &mut Self {
        self.0.extend_from_slice(&v.to_le_bytes());
        self
    }
    fn i64(&mut self, v: i64) -> &mut Self {
        self.u64(v as u64)
    }
    fn bytes(&mut self, v: &[u8]) -> &mut Self {
        self.u32(v.len() as u32);
        self.0.extend_from_slice(v);
        self
    }
    /// A delta, the last field of its frame: left out when the frame is sent from where the
    /// delta lies.
    fn delta(&mut self, v: &[u8]) -> &mut Self {
        match &mut self.1 {
            Some(left) => {
                *left += v.len();
                self.u32(v.len() as u32)
            }
            None => self.bytes(v),
        }
    }
    fn opt_u64(&mut self, v: Option<u64>) -> &mut Self {
        match v {
            Some(x) => self.u8(1).u64(x),
            None => self.u8(0),
        }
    }
}

struct R<'a>(&'a [u8]);

#[derive(Debug)]
struct Short;

impl<'a> R<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], Short> {
        if self.0.len() < n {
            return Err(Short);
        }
        let (a, b) = self.0.split_at(n);
        self.0 = b;
        Ok(a)
    }
    fn u8(&mut self) -> Result<u8, Short> {
        Ok(self.take(1)?[0])
    }
    fn u32(&mut self) -> Result<u32, Short> {
        Ok(u32::from_le_bytes(self.take(4)?.try_into().expect("4")))
    }
    fn u64(&mut self) -> Result<u64, Short> {
        Ok(u64::from_le_bytes(self.take(8)?.try_into().expect("8")))
    }
    fn i64(&mut self) -> Result<i64, Short> {
        Ok(self.u64()? as i64)
    }
    fn bytes(&mut self) -> Result<Vec<u8>, Short> {
        Ok(self.slice()?.to_vec())
    }
    /// A length-prefixed byte string, in place.
    fn slice(&mut self) -> Result<&'a [u8], Short> {
        let n = self.u32()? as usize;
        self.take(n)
    }
    fn opt_u64(&mut self) -> Result<Option<u64>, Short> {
        Ok(match self.u8()? {
            0 => None,
            _ => Some(self.u64()?),
        })
    }
}

fn encode_op(w: &mut W, op: &AgentOp) {
    match op {
        AgentOp::Get {
            key,
            touch,
            degrade,
        } => {
            w.u8(1).bytes(key).opt_u64(touch.map(|t| t as u64));
            w.u8(degrade.map_or(255, |d| d));
        }
        AgentOp::Store {
            mode,
            key,
            flags,
            exptime,
            compare_cas,
            value,
            once,
        } => {
            w.u8(2)
                .u8(store_mode_byte(*mode))
                .bytes(key)
                .u32(*flags)
                .i64(*exptime);
            w.opt_u64(*compare_cas).bytes(value);
            encode_once(w, once);
        }
        AgentOp::Delete { key, compare_cas } => {
            w.u8(3).bytes(key).opt_u64(*compare_cas);
        }
        AgentOp::Touch { key, exptime } => {
            w.u8(4).bytes(key).i64(*exptime);
        }
        AgentOp::Arith {
            incr,
            key,
            delta,
            once,
            meta,
        } => {
            w.u8(5).u8(u8::from(*incr)).bytes(key).u64(*delta);
            w.opt_u64(meta.compare_cas);
            match meta.vivify {
                Some((exptime, initial)) => w.u8(1).i64(exptime).u64(initial),
                None => w.u8(0),
            };
            match meta.ttl {
                Some(ttl) => w.u8(1).i64(ttl),
                None => w.u8(0),
            };
            encode_once(w, once);
        }
        AgentOp::Flip { key, position, bit } => {
            w.u8(6).bytes(key).u8(*position).u64(*bit);
        }
        AgentOp::Keys { stripe } => {
            w.u8(7).u32(*stripe);
        }
        AgentOp::Handover { stripe, to } => {
            w.u8(9).u32(*stripe).u32(*to);
        }
        AgentOp::Repair {
            key,
            version,
            position,
        } => {
            w.u8(8).bytes(key).u64(*version).u8(*position);
        }
    }
}

/// A [`Once`] on the wire: the id, then 0 for a first try or 1 for any later one (a rerun is a
/// retry to any node it is sent to).
fn encode_once(w: &mut W, once: &Once) {
    w.u64(once.id).u8(match once.attempt {
        Attempt::First => 0,
        Attempt::Retry | Attempt::Rerun { .. } => 1,
    });
}

fn decode_once(r: &mut R) -> Result<Once, Short> {
    let id = r.u64()?;
    let attempt = match r.u8()? {
        0 => Attempt::First,
        1 => Attempt::Retry,
        _ => return Err(Short),
    };
    Ok(Once { id, attempt })
}

/// The byte of a store mode in an [`AgentOp::Store`] message.
pub fn store_mode_byte(mode: StoreMode) -> u8 {
    match mode {
        StoreMode::Set => 0,
        StoreMode::Add => 1,
        StoreMode::Replace => 2,
        StoreMode::Append => 3,
        StoreMode::Prepend => 4,
        StoreMode::Cas => 5,
    }
}

/// The store mode of a byte of an [`AgentOp::Store`] message; no other byte is one.
pub fn store_mode_of_byte(b: u8) -> Option<StoreMode> {
    Some(match b {
        0 => StoreMode::Set,
        1 => StoreMode::Add,
        2 => StoreMode::Replace,
        3 => StoreMode::Append,
        4 => StoreMode::Prepend,
        5 => StoreMode::Cas,
        _ => return None,
    })
}

fn decode_op(r: &mut R) -> Result<AgentOp, Short> {
    Ok(match r.u8()? {
        1 => {
            let key = r.bytes()?;
            let touch = r.opt_u64()?.map(|t| t as i64);
            let d = r.u8()?;
            AgentOp::Get {
                key,
                touch,
                degrade: (d != 255).then_some(d),
            }
        }
        2 => AgentOp::Store {
            mode: store_mode_of_byte(r.u8()?).ok_or(Short)?,
            key: r.bytes()?,
            flags: r.u32()?,
            exptime: r.i64()?,
            compare_cas: r.opt_u64()?,
            value: r.bytes()?,
            once: decode_once(r)?,
        },
        3 => AgentOp::Delete {
            key: r.bytes()?,
            compare_cas: r.opt_u64()?,
        },
        4 => AgentOp::Touch {
            key: r.bytes()?,
            exptime: r.i64()?,
        },
        5 => {
            let (incr, key, delta) = (r.u8()? != 0, r.bytes()?, r.u64()?);
            let compare_cas = r.opt_u64()?;
            let vivify = match r.u8()? {
                0 => None,
                1 => Some((r.i64()?, r.u64()?)),
                _ => return Err(Short),
            };
            let ttl = match r.u8()? {
                0 => None,
                1 => Some(r.i64()?),
                _ => return Err(Short),
            };
            AgentOp::Arith {
                incr,
                key,
                delta,
                once: decode_once(r)?,
                meta: ArithMeta {
                    compare_cas,
                    vivify,
                    ttl,
                },
            }
        }
        6 => AgentOp::Flip {
            key: r.bytes()?,
            position: r.u8()?,
            bit: r.u64()?,
        },
        7 => AgentOp::Keys { stripe: r.u32()? },
        9 => AgentOp::Handover {
            stripe: r.u32()?,
            to: r.u32()?,
        },
        8 => AgentOp::Repair {
            key: r.bytes()?,
            version: r.u64()?,
            position: r.u8()?,
        },
        _ => return Err(Short),
    })
}

fn encode_result(w: &mut W, res: &AgentResult) {
    match res {
        AgentResult::Value {
            flags,
            cas,
            exptime,
            value,
        } => {
            w.u8(1).u32(*flags).u64(*cas).i64(*exptime).bytes(value);
        }
        AgentResult::Miss => {
            w.u8(2);
        }
        AgentResult::Stored { cas } => {
            w.u8(3).u64(*cas);
        }
        AgentResult::NotStored => {
            w.u8(4);
        }
        AgentResult::Exists => {
            w.u8(5);
        }
        AgentResult::NotFound => {
            w.u8(6);
        }
        AgentResult::Deleted => {
            w.u8(7);
        }
        AgentResult::Touched => {
            w.u8(8);
        }
        AgentResult::Number {
            number,
            cas,
            exptime,
        } => {
            w.u8(9).u64(*number).u64(*cas).i64(*exptime);
        }
        AgentResult::NonNumeric => {
            w.u8(10);
        }
        AgentResult::Ok => {
            w.u8(11);
        }
        AgentResult::Error(s) => {
            w.u8(12).bytes(s.as_bytes());
        }
        AgentResult::NotAgent => {
            w.u8(13);
        }
        AgentResult::Keys(keys) => {
            w.u8(14).u32(keys.len() as u32);
            for (k, v) in keys {
                w.bytes(k).u64(*v);
            }
        }
        AgentResult::Record(r) => {
            w.u8(15).bytes(r);
        }
    }
}

fn decode_result(r: &mut R) -> Result<AgentResult, Short> {
    Ok(match r.u8()? {
        1 => AgentResult::Value {
            flags: r.u32()?,
            cas: r.u64()?,
            exptime: r.i64()?,
            value: r.bytes()?,
        },
        2 => AgentResult::Miss,
        3 => AgentResult::Stored { cas: r.u64()? },
        4 => AgentResult::NotStored,
        5 => AgentResult::Exists,
        6 => AgentResult::NotFound,
        7 => AgentResult::Deleted,
        8 => AgentResult::Touched,
        9 => AgentResult::Number {
            number: r.u64()?,
            cas: r.u64()?,
            exptime: r.i64()?,
        },
        10 => AgentResult::NonNumeric,
        11 => AgentResult::Ok,
        12 => AgentResult::Error(String::from_utf8_lossy(&r.bytes()?).into_owned()),
        13 => AgentResult::NotAgent,
        14 => {
            let n = r.u32()? as usize;
            let mut keys = Vec::with_capacity(n.min(1 << 16));
            for _ in 0..n {
                keys.push((r.bytes()?, r.u64()?));
            }
            AgentResult::Keys(keys)
        }
        15 => AgentResult::Record(r.bytes()?),
        _ => return Err(Short),
    })
}

/// The body of a request message.
pub fn encode_request(req: &Request) -> Vec<u8> {
    let mut w = W(Vec::new(), None);
    encode_request_to(&mut w, req);
    w.0
}

/// Appends `req` to `out` as a frame (length, then the body of [`encode_request`]), encoded in
/// place: a loop queues its requests straight into a link's output.
pub fn push_request_frame(out: &mut Vec<u8>, req: &Request) {
    push_frame_with(out, |w| encode_request_to(w, req));
}

fn encode_request_to(w: &mut W, req: &Request) {
    match req {
        Request::Heartbeat { from } => {
            w.u8(1).u32(*from);
        }
        Request::Put {
            stripe,
            watermark,
            record,
        } => {
            w.u8(2).u32(*stripe).u64(*watermark).bytes(record);
        }
        Request::Get {
            stripe,
            position,
            key,
            version,
        } => {
            w.u8(3).u32(*stripe).u8(*position).bytes(key).u64(*version);
        }
        Request::Delete {
            stripe,
            key,
            version,
        } => {
            w.u8(4).u32(*stripe).bytes(key).u64(*version);
        }
        Request::Touch {
            stripe,
            key,
            version,
            exptime,
        } => {
            w.u8(5).u32(*stripe).bytes(key).u64(*version).i64(*exptime);
        }
        Request::List { stripe } => {
            w.u8(6).u32(*stripe);
        }
        Request::Flip {
            stripe,
            position,
            key,
            bit,
        } => {
            w.u8(7).u32(*stripe).u8(*position).bytes(key).u64(*bit);
        }
        Request::Flush { oldest_live_us } => {
            w.u8(8).u64(*oldest_live_us);
        }
        Request::Agent(op) => {
            w.u8(9);
            encode_op(w, op);
        }
        Request::Fenced { token, req } => {
            w.u8(10).u64(*token);
            encode_request_to(w, req);
        }
        Request::Delta {
            stripe,
            watermark,
            record,
            page_stripe,
            position,
            page,
            data,
            seq,
            committed,
            commits,
            offset,
            delta,
        } => {
            w.u8(11).u32(*stripe).u64(*watermark).bytes(record);
            w.u32(*page_stripe).u8(*position).u32(*page).u8(*data);
            w.u64(*seq).u64(*committed).u32(commits.len() as u32);
            for &(t, position, page, data, committed) in commits {
                w.u32(t).u8(position).u32(page).u8(data).u64(committed);
            }
            w.u32(*offset).delta(delta);
        }
        Request::Range {
            stripe,
            page_stripe,
            position,
            page,
            offset,
            len,
        } => {
            w.u8(12).u32(*stripe).u32(*page_stripe).u8(*position);
            w.u32(*page).u32(*offset).u32(*len);
        }
        Request::Pages {
            stripe,
            page_stripe,
            position,
        } => {
            w.u8(13).u32(*stripe).u32(*page_stripe).u8(*position);
        }
        Request::Realign {
            stripe,
            page_stripe,
            position,
            page,
            data,
            from,
            to,
            offset,
            bytes,
        } => {
            w.u8(15)
                .u32(*stripe)
                .u32(*page_stripe)
                .u8(*position)
                .u32(*page);
            w.u8(*data).u64(*from).u64(*to).u32(*offset).bytes(bytes);
        }
        Request::Kept {
            page_stripe,
            position,
            page,
            data,
            above,
        } => {
            w.u8(16).u32(*page_stripe).u8(*position).u32(*page);
            w.u8(*data).u64(*above);
        }
        Request::Commit(pages) => {
            w.u8(17).u32(pages.len() as u32);
            for &(t, position, page, data, committed) in pages {
                w.u32(t).u8(position).u32(page).u8(data).u64(committed);
            }
        }
    }
}

/// The first byte of a peer message that carries one frame of the node's engine (a plan's
/// slice, abort or control message) instead of a [`Request`]: `[14][sender's id u32][the
/// engine's 24-byte header][payload]`. It travels on the chunks lane of the sender's first
/// event loop and has no reply (docs/peer-messages.md, "Plan frames").
pub const PLAN_FRAME: u8 = 14;

/// Appends one engine frame from node `from` to `out`, framed as a peer message.
pub fn push_plan_frame(
    out: &mut Vec<u8>,
    from: u32,
    header: &engine::wire::Header,
    payload: &[u8],
) {
    let body = 1 + 4 + engine::wire::HEADER_BYTES + payload.len();
    out.reserve(4 + body);
    out.extend_from_slice(&(body as u32).to_le_bytes());
    out.push(PLAN_FRAME);
    out.extend_from_slice(&from.to_le_bytes());
    out.extend_from_slice(&header.encode());
    out.extend_from_slice(payload);
}

/// Whether a message body is an engine frame ([`PLAN_FRAME`]).
pub fn is_plan_frame(body: &[u8]) -> bool {
    body.first() == Some(&PLAN_FRAME)
}

/// Parses the body of a plan frame: the sender, the engine's header and the payload, which
/// must be exactly as long as the header says. `None` for anything else (the connection that
/// sent it is not trusted further, as for any message that does not decode).
pub fn decode_plan_frame(body: &[u8]) -> Option<(u32, engine::wire::Header, &[u8])> {
    let rest = body.strip_prefix(&[PLAN_FRAME])?;
    let (from, rest) = rest.split_first_chunk::<4>()?;
    let (header, payload) = rest.split_first_chunk::<{ engine::wire::HEADER_BYTES }>()?;
    let header = engine::wire::Header::decode(header).ok()?;
    (header.payload_bytes as usize == payload.len()).then_some((
        u32::from_le_bytes(*from),
        header,
        payload,
    ))
}

/// Parses a request body.
pub fn decode_request(body: &[u8]) -> Option<Request> {
    let mut r = R(body);
    let req = decode_request_from(&mut r).ok()?;
    r.0.is_empty().then_some(req)
}

/// A list of (page stripe, position, page, data position, committed), count first.
fn commits(r: &mut R<'_>) -> Result<Vec<PageCommit>, Short> {
    let n = r.u32()? as usize;
    let mut pages = Vec::with_capacity(n.min(4096));
    for _ in 0..n {
        pages.push((r.u32()?, r.u8()?, r.u32()?, r.u8()?, r.u64()?));
    }
    Ok(pages)
}

fn decode_request_from(r: &mut R<'_>) -> Result<Request, Short> {
    {
        Ok(match r.u8()? {
            1 => Request::Heartbeat { from: r.u32()? },
            2 => Request::Put {
                stripe: r.u32()?,
                watermark: r.u64()?,
                record: r.bytes()?,
            },
            3 => Request::Get {
                stripe: r.u32()?,
                position: r.u8()?,
                key: r.bytes()?,
                version: r.u64()?,
            },
            4 => Request::Delete {
                stripe: r.u32()?,
                key: r.bytes()?,
                version: r.u64()?,
            },
            5 => Request::Touch {
                stripe: r.u32()?,
                key: r.bytes()?,
                version: r.u64()?,
                exptime: r.i64()?,
            },
            6 => Request::List { stripe: r.u32()? },
            7 => Request::Flip {
                stripe: r.u32()?,
                position: r.u8()?,
                key: r.bytes()?,
                bit: r.u64()?,
            },
            8 => Request::Flush {
                oldest_live_us: r.u64()?,
            },
            9 => Request::Agent(decode_op(r)?),
            10 => {
                let token = r.u64()?;
                let inner = decode_request_from(r)?;
                // A token fences a chunk request, once.
                if inner.stripe().is_none() || matches!(inner, Request::Fenced { .. }) {
                    return Err(Short);
                }
                Request::Fenced {
                    token,
                    req: Box::new(inner),
                }
            }
            11 => Request::Delta {
                stripe: r.u32()?,
                watermark: r.u64()?,
                record: r.bytes()?,
                page_stripe: r.u32()?,
                position: r.u8()?,
                page: r.u32()?,
                data: r.u8()?,
                seq: r.u64()?,
                committed: r.u64()?,
                commits: commits(r)?,
                offset: r.u32()?,
                delta: r.slice()?.into(),
            },
            12 => Request::Range {
                stripe: r.u32()?,
                page_stripe: r.u32()?,
                position: r.u8()?,
                page: r.u32()?,
                offset: r.u32()?,
                len: r.u32()?,
            },
            13 => Request::Pages {
                stripe: r.u32()?,
                page_stripe: r.u32()?,
                position: r.u8()?,
            },
            15 => Request::Realign {
                stripe: r.u32()?,
                page_stripe: r.u32()?,
                position: r.u8()?,
                page: r.u32()?,
                data: r.u8()?,
                from: r.u64()?,
                to: r.u64()?,
                offset: r.u32()?,
                bytes: r.bytes()?,
            },
            16 => Request::Kept {
                page_stripe: r.u32()?,
                position: r.u8()?,
                page: r.u32()?,
                data: r.u8()?,
                above: r.u64()?,
            },
            17 => Request::Commit(commits(r)?),
            _ => return Err(Short),
        })
    }
}

/// The body of a response message.
pub fn encode_response(res: &Response) -> Vec<u8> {
    let mut w = W(Vec::new(), None);
    encode_response_to(&mut w, res);
    w.0
}

/// Appends `res` to `out` as a frame (length, then the body of [`encode_response`]).
pub fn push_response_frame(out: &mut Vec<u8>, res: &Response) {
    push_frame_with(out, |w| encode_response_to(w, res));
}

/// Appends the frame of `Response::Record(record)` to `out`, the record copied once (a member
/// answering a `Get` from its store).
pub fn push_record_frame(out: &mut Vec<u8>, record: Option<&[u8]>) {
    push_frame_with(out, |w| {
        match record {
            Some(r) => w.u8(4).u8(1).bytes(r),
            None => w.u8(4).u8(0),
        };
    });
}

fn push_frame_with(out: &mut Vec<u8>, body: impl FnOnce(&mut W)) {
    push_frame_leaving(out, false, body);
}

/// [`push_frame_with`]; with `leave`, a delta the body ends with is left out of `out` (the
/// frame's length counts it): the length left out.
fn push_frame_leaving(out: &mut Vec<u8>, leave: bool, body: impl FnOnce(&mut W)) -> usize {
    let at = out.len();
    let mut w = W(std::mem::take(out), leave.then_some(0));
    w.u32(0);
    body(&mut w);
    *out = w.0;
    let left = w.1.unwrap_or(0);
    let len = (out.len() - at - 4 + left) as u32;
    out[at..at + 4].copy_from_slice(&len.to_le_bytes());
    left
}

/// A delta at least this long is sent from where it lies rather than copied into a link's
/// output ([`push_request_frame_leaving_delta`]).
const DELTA_LEFT_MIN: usize = 1024;

/// [`push_request_frame`] for a link that sends a long delta from where it lies: the frame of a
/// `Delta` of at least [`DELTA_LEFT_MIN`] bytes (fenced or not) is appended without the delta's
/// bytes, its last field, which are given back to follow `out`'s bytes on the wire.
pub fn push_request_frame_leaving_delta(
    out: &mut Vec<u8>,
    req: &Request,
) -> Option<std::sync::Arc<[u8]>> {
    let delta = match req {
        Request::Delta { delta, .. } => Some(delta),
        Request::Fenced { req, .. } => match &**req {
            Request::Delta { delta, .. } => Some(delta),
            _ => None,
        },
        _ => None,
    };
    let Some(delta) = delta.filter(|d| d.len() >= DELTA_LEFT_MIN) else {
        push_request_frame(out, req);
        return None;
    };
    let left = push_frame_leaving(out, true, |w| encode_request_to(w, req));
    debug_assert_eq!(left, delta.len());
    Some(std::sync::Arc::clone(delta))
}

fn encode_response_to(w: &mut W, res: &Response) {
    match res {
        Response::Ack => {
            w.u8(1);
        }
        Response::Nack(s) => {
            w.u8(2).bytes(s.as_bytes());
        }
        Response::Heartbeat {
            incarnation,
            ready,
            grant,
            up_for_ms,
            exempt,
        } => {
            w.u8(3)
                .u64(*incarnation)
                .u8(u8::from(*ready))
                .u8(u8::from(*grant))
                .u64(*up_for_ms)
                .u32(exempt.len() as u32);
            for n in exempt {
                w.u32(*n);
            }
        }
        Response::Record(r) => {
            match r {
                Some(r) => w.u8(4).u8(1).bytes(r),
                None => w.u8(4).u8(0),
            };
        }
        Response::Headers(hs, tombs) => {
            w.u8(5).u32(hs.len() as u32);
            for h in hs {
                w.bytes(h);
            }
            w.u32(tombs.len() as u32);
            for (key, version) in tombs {
                w.bytes(key).u64(*version);
            }
        }
        Response::Agent(res) => {
            w.u8(6);
            encode_result(w, res);
        }
        Response::Range { seqs, bytes } => {
            w.u8(7).u32(seqs.len() as u32);
            for s in seqs {
                w.u64(*s);
            }
            w.bytes(bytes);
        }
        Response::Kept(deltas) => {
            w.u8(8).u32(deltas.len() as u32);
            for d in deltas {
                w.u64(d.seq).u32(d.offset).bytes(&d.delta);
                w.u32(d.stripe).bytes(&d.record);
            }
        }
    }
}

/// Parses a response body.
pub fn decode_response(body: &[u8]) -> Option<Response> {
    let mut r = R(body);
    let res = (|| -> Result<Response, Short> {
        Ok(match r.u8()? {
            1 => Response::Ack,
            2 => Response::Nack(String::from_utf8_lossy(&r.bytes()?).into_owned()),
            3 => Response::Heartbeat {
                incarnation: r.u64()?,
                ready: r.u8()? != 0,
                grant: r.u8()? != 0,
                up_for_ms: r.u64()?,
                exempt: {
                    let n = r.u32()? as usize;
                    let mut v = Vec::with_capacity(n.min(1 << 12));
                    for _ in 0..n {
                        v.push(r.u32()?);
                    }
                    v
                },
            },
            4 => Response::Record(match r.u8()? {
                0 => None,
                _ => Some(r.bytes()?),
            }),
            5 => {
                let n = r.u32()? as usize;
                let mut hs = Vec::with_capacity(n.min(1 << 16));
                for _ in 0..n {
                    hs.push(r.bytes()?);
                }
                let n = r.u32()? as usize;
                let mut tombs = Vec::with_capacity(n.min(1 << 16));
                for _ in 0..n {
                    tombs.push((r.bytes()?, r.u64()?));
                }
                Response::Headers(hs, tombs)
            }
            6 => Response::Agent(decode_result(&mut r)?),
            7 => {
                let n = r.u32()? as usize;
                let mut seqs = Vec::with_capacity(n.min(256));
                for _ in 0..n {
                    seqs.push(r.u64()?);
                }
                Response::Range {
                    seqs,
                    bytes: r.bytes()?,
                }
            }
            8 => {
                let n = r.u32()? as usize;
                let mut deltas = Vec::with_capacity(n.min(256));
                for _ in 0..n {
                    deltas.push(KeptDelta {
                        seq: r.u64()?,
                        offset: r.u32()?,
                        delta: r.slice()?.into(),
                        stripe: r.u32()?,
                        record: r.bytes()?,
                    });
                }
                Response::Kept(deltas)
            }
            _ => return Err(Short),
        })
    })()
    .ok()?;
    r.0.is_empty().then_some(res)
}

/// Writes one framed message, length and body in one write (two would be two segments on a
/// connection without Nagle's delay).
pub fn write_frame(w: &mut impl Write, body: &[u8]) -> io::Result<()> {
    let mut frame = Vec::with_capacity(4 + body.len());
    frame.extend_from_slice(&(body.len() as u32).to_le_bytes());
    frame.extend_from_slice(body);
    w.write_all(&frame)
}

/// Reads one framed message (errors on a length over [`MESSAGE_MAX_BYTES`]).
pub fn read_frame(r: &mut impl Read) -> io::Result<Vec<u8>> {
    let mut len = [0u8; 4];
    r.read_exact(&mut len)?;
    let len = u32::from_le_bytes(len) as usize;
    if len > MESSAGE_MAX_BYTES {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("peer message of {len} bytes is over the limit of {MESSAGE_MAX_BYTES}"),
        ));
    }
    let mut body = vec![0u8; len];
    r.read_exact(&mut body)?;
    Ok(body)
}

/// Makes the close of `s` abortive: the bytes still queued for the peer are dropped and a reset
/// is sent, instead of TCP delivering them whenever the peer can be reached again.
pub fn abort(s: &impl std::os::fd::AsFd) {
    let _ = rustix::net::sockopt::set_socket_linger(s, Some(Duration::ZERO));
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A plan frame reads back as it was pushed; one cut short, one whose payload is not the
    /// length its header says, and one with a bad engine header are refused, and none of them
    /// decodes as a request.
    #[test]
    fn plan_frames_round_trip_and_refuse_what_does_not_add_up() {
        use engine::wire::{Header, Kind};
        let header = Header::new(Kind::Data, 77, 3, 1, 5).unwrap();
        let mut out = Vec::new();
        push_plan_frame(&mut out, 6, &header, b"slice");
        let len = u32::from_le_bytes(out[..4].try_into().unwrap()) as usize;
        let body = &out[4..];
        assert_eq!(len, body.len());
        assert!(is_plan_frame(body));
        assert_eq!(decode_plan_frame(body), Some((6, header, &b"slice"[..])));
        assert_eq!(decode_request(body), None);
        assert_eq!(decode_plan_frame(&body[..body.len() - 1]), None);
        let mut longer = body.to_vec();
        longer.push(0);
        assert_eq!(decode_plan_frame(&longer), None);
        let mut bad = body.to_vec();
        bad[5] ^= 0xFF; // the engine header's magic
        assert_eq!(decode_plan_frame(&bad), None);
        // A request is not a plan frame.
        let hb = encode_request(&Request::Heartbeat { from: 1 });
        assert!(!is_plan_frame(&hb));
        assert_eq!(decode_plan_frame(&hb), None);
    }

    /// A rerun leaves a node as a retry (the index it may be written anew in is the sender's),
    /// and an attempt byte other than 0 or 1 is refused.
    #[test]
    fn a_rerun_is_a_retry_on_the_wire_and_unknown_attempts_are_refused() {
        let op = |attempt| {
            Request::Agent(AgentOp::Arith {
                incr: false,
                key: b"n".to_vec(),
                delta: 1,
                once: Once { id: 9, attempt },
                meta: ArithMeta::default(),
            })
        };
        let bytes = encode_request(&op(Attempt::Rerun { epoch: 4 }));
        assert_eq!(decode_request(&bytes), Some(op(Attempt::Retry)));
        let mut bad = bytes.clone();
        *bad.last_mut().unwrap() = 2;
        assert_eq!(decode_request(&bad), None);
        let AgentOp::Arith { once, .. } = AgentOp::Arith {
            incr: true,
            key: b"n".to_vec(),
            delta: 1,
            once: Once::first(3),
            meta: ArithMeta::default(),
        }
        .retried()
        .unwrap() else {
            unreachable!()
        };
        assert_eq!(once.attempt, Attempt::Retry);
        let unnamed = AgentOp::Arith {
            incr: true,
            key: b"n".to_vec(),
            delta: 1,
            once: Once::first(0),
            meta: ArithMeta::default(),
        };
        assert_eq!((unnamed.retried(), unnamed.once()), (None, None));
    }

    /// A token fences one chunk request: never a heartbeat, an agent operation or another
    /// fenced request; token 0 is no fence at all.
    #[test]
    fn a_fence_wraps_one_chunk_request_only() {
        let list = Request::List { stripe: 1 };
        assert_eq!(fenced(0, list.clone()), list);
        assert_eq!(fenced(3, list.clone()).stripe(), Some(1));
        let wrap = |inner: &Request| {
            let mut b = vec![10];
            b.extend_from_slice(&5u64.to_le_bytes());
            b.extend_from_slice(&encode_request(inner));
            b
        };
        assert!(decode_request(&wrap(&list)).is_some());
        for inner in [
            Request::Heartbeat { from: 1 },
            Request::Flush { oldest_live_us: 2 },
            Request::Agent(AgentOp::Keys { stripe: 1 }),
            fenced(4, list.clone()),
        ] {
            assert_eq!(decode_request(&wrap(&inner)), None, "{inner:?}");
        }
    }

    /// The six store modes have the bytes 0–5 and no other byte decodes to one.
    #[test]
    fn store_mode_bytes_are_the_six_and_only_them() {
        for b in 0..=255u8 {
            let mode = store_mode_of_byte(b);
            assert_eq!(mode.is_some(), b <= 5, "byte {b}");
            if let Some(m) = mode {
                assert_eq!(store_mode_byte(m), b);
            }
        }
    }

    #[test]
    fn requests_and_responses_round_trip() {
        let reqs = vec![
            Request::Heartbeat { from: 7 },
            Request::Put {
                stripe: 3,
                watermark: 9,
                record: vec![1, 2, 3],
            },
            Request::Get {
                stripe: 1,
                position: 4,
                key: b"k".to_vec(),
                version: 77,
            },
            Request::Delete {
                stripe: 0,
                key: b"x".to_vec(),
                version: 5,
            },
            Request::Touch {
                stripe: 0,
                key: b"x".to_vec(),
                version: 5,
                exptime: -3,
            },
            Request::List { stripe: 8 },
            Request::Flip {
                stripe: 2,
                position: 1,
                key: b"y".to_vec(),
                bit: 13,
            },
            Request::Flush { oldest_live_us: 42 },
            Request::Agent(AgentOp::Get {
                key: b"k".to_vec(),
                touch: Some(-1),
                degrade: Some(2),
            }),
            Request::Agent(AgentOp::Get {
                key: b"k".to_vec(),
                touch: None,
                degrade: None,
            }),
            Request::Agent(AgentOp::Store {
                mode: StoreMode::Cas,
                key: b"k".to_vec(),
                flags: 7,
                exptime: 100,
                compare_cas: Some(12),
                value: vec![0; 10],
                once: Once {
                    id: 0x1234_5678_9abc_def0,
                    attempt: Attempt::Retry,
                },
            }),
            Request::Agent(AgentOp::Delete {
                key: b"k".to_vec(),
                compare_cas: None,
            }),
            Request::Agent(AgentOp::Touch {
                key: b"k".to_vec(),
                exptime: 1,
            }),
            Request::Agent(AgentOp::Arith {
                incr: true,
                key: b"n".to_vec(),
                delta: u64::MAX,
                once: Once::first(7),
                meta: ArithMeta::default(),
            }),
            Request::Agent(AgentOp::Arith {
                incr: false,
                key: b"n".to_vec(),
                delta: 3,
                once: Once::first(8),
                meta: ArithMeta {
                    compare_cas: Some(u64::MAX),
                    vivify: Some((-1, 10)),
                    ttl: Some(30),
                },
            }),
            Request::Agent(AgentOp::Flip {
                key: b"k".to_vec(),
                position: 3,
                bit: 1,
            }),
            Request::Agent(AgentOp::Keys { stripe: 4 }),
            Request::Agent(AgentOp::Handover { stripe: 4, to: 2 }),
            Request::Agent(AgentOp::Repair {
                key: b"k".to_vec(),
                version: 3,
                position: 8,
            }),
            fenced(
                17,
                Request::Get {
                    stripe: 2,
                    position: 1,
                    key: b"k".to_vec(),
                    version: 5,
                },
            ),
            fenced(9, Request::List { stripe: 4 }),
            fenced(
                3,
                Request::Delta {
                    stripe: 5,
                    watermark: 11,
                    record: vec![9; 20],
                    page_stripe: 3,
                    position: 7,
                    page: 1 << 20,
                    data: 2,
                    seq: u64::MAX - 1,
                    committed: 7,
                    commits: vec![(2, 5, 9, 1, 4)],
                    offset: 96,
                    delta: vec![0xa5; 33].into(),
                },
            ),
            Request::Range {
                stripe: 5,
                page_stripe: 4,
                position: 1,
                page: 6,
                offset: 12,
                len: 700,
            },
            Request::Pages {
                stripe: 2,
                page_stripe: 2,
                position: 8,
            },
            Request::Realign {
                stripe: 3,
                page_stripe: 1,
                position: 4,
                page: 9,
                data: 2,
                from: 17,
                to: 15,
                offset: 4096,
                bytes: vec![0x3c; 77],
            },
            Request::Kept {
                page_stripe: 2,
                position: 3,
                page: 11,
                data: 1,
                above: 40,
            },
            Request::Commit(vec![]),
            Request::Commit(vec![(1, 7, 3, 2, 99), (0, 6, u32::MAX, 0, u64::MAX)]),
        ];
        let mut frames = vec![0xee];
        for r in reqs {
            assert_eq!(decode_request(&encode_request(&r)), Some(r.clone()));
            // No request's tag is the plan frames' (the links tell them apart by it).
            assert!(!is_plan_frame(&encode_request(&r)), "{r:?}");
            // Framed in place after what the output held: the length, then the same body.
            let at = frames.len();
            push_request_frame(&mut frames, &r);
            assert_eq!(read_frame(&mut &frames[at..]).unwrap(), encode_request(&r));
            let mut body = encode_request(&r);
            body.push(0);
            assert_eq!(decode_request(&body), None, "trailing byte");
            body.truncate(body.len() - 2);
            assert_ne!(decode_request(&body), Some(r));
        }
        let results = vec![
            AgentResult::Value {
                flags: 1,
                cas: 2,
                exptime: 3,
                value: b"v".to_vec(),
            },
            AgentResult::Miss,
            AgentResult::Stored { cas: 5 },
            AgentResult::NotStored,
            AgentResult::Exists,
            AgentResult::NotFound,
            AgentResult::Deleted,
            AgentResult::Touched,
            AgentResult::Number {
                number: 9,
                cas: 1,
                exptime: -5,
            },
            AgentResult::NonNumeric,
            AgentResult::Ok,
            AgentResult::Error("x".into()),
            AgentResult::NotAgent,
            AgentResult::Keys(vec![(b"a".to_vec(), 1)]),
            AgentResult::Record(vec![9]),
        ];
        let mut responses: Vec<Response> = results.into_iter().map(Response::Agent).collect();
        responses.extend([
            Response::Ack,
            Response::Nack("bad".into()),
            Response::Heartbeat {
                incarnation: 5,
                ready: true,
                grant: true,
                up_for_ms: 12_345,
                exempt: vec![2, 7],
            },
            Response::Record(None),
            Response::Record(Some(vec![1])),
            Response::Range {
                seqs: vec![3, u64::MAX, 0],
                bytes: vec![7; 40],
            },
            Response::Range {
                seqs: vec![],
                bytes: vec![],
            },
            Response::Headers(vec![vec![1], vec![]], vec![]),
            Response::Headers(vec![], vec![(b"k".to_vec(), 7), (vec![], u64::MAX)]),
            Response::Kept(vec![]),
            Response::Kept(vec![
                KeptDelta {
                    seq: 9,
                    offset: 300,
                    delta: vec![5; 17].into(),
                    stripe: 4,
                    record: vec![1, 2, 3],
                },
                KeptDelta {
                    seq: u64::MAX,
                    offset: 0,
                    delta: vec![].into(),
                    stripe: 0,
                    record: vec![],
                },
            ]),
        ]);
        for r in responses {
            assert_eq!(decode_response(&encode_response(&r)), Some(r));
        }
    }

    #[test]
    fn frames_refuse_oversized_lengths() {
        let mut buf = Vec::new();
        write_frame(&mut buf, b"abc").unwrap();
        assert_eq!(read_frame(&mut &buf[..]).unwrap(), b"abc");
        let huge = ((MESSAGE_MAX_BYTES + 1) as u32).to_le_bytes();
        assert!(read_frame(&mut &huge[..]).is_err());
    }
}
