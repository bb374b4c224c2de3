//! The node process: `-t` mio event loops, each owning the client and peer connections dealt to
//! it, which run a get or set at the key's agent to completion themselves (their own peer
//! connections, `carrier/links.rs`) and serve the peer port (`member/conn.rs`); worker
//! threads shared by the loops that run every other request (which may wait on peers), given
//! as the command the loop parsed, and peer workers for the peers' requests that may wait.
//!
//! Each client connection has bounded buffers: the input holds at most one request
//! (`Limits::request_max_bytes`), and while more than [`OUTPUT_MAX_BYTES`] of replies wait to be
//! written no further request is read. Requests of one connection run one at a time, in order.

use std::collections::HashMap;
use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpListener};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc;
use std::sync::Arc;
use std::time::{Duration, Instant};

use mio::net::TcpStream;
use mio::{Events, Interest, Poll, Registry, Token, Waker};
use proto::{
    compose, Command, Limits, Meta, MetaReturn, MetaStatus, OwnedCommand, Parse, Parser, Reply,
    StoreMode,
};

mod pool;

use crate::agent::{
    LoopGatFetch, LoopGatStart, LoopModify, LoopModifyStart, LoopNotice, LoopNoticeStart,
    LoopPending, LoopRead, LoopWrite, LoopWriteStart, Modify, StoreIf, PLAN_STEP,
};
use crate::carrier::peer::{self, AgentOp, AgentResult, ArithMeta, Attempt, Once};
use crate::node::{ExecMode, Node, RecoveryState};
use crate::semantics::Decision;
use crate::time;
use pool::Pool;

use crate::carrier::calls::{self, Call, CallPost, Replies};
use crate::carrier::lane::LaneTransport;
use crate::carrier::links::{Answer, Answers, Asked, Failure, Lane, Links, PlanLink, LINK_BASE};
use crate::member::conn::{PeerConn, PeerJob, Served};

/// Replies waiting to be written beyond which a connection's requests are not read.
pub const OUTPUT_MAX_BYTES: usize = 4 << 20;
/// Largest reply of one multi-key get (memcached: `SERVER_ERROR out of memory writing get
/// response` past its limit).
pub const GET_REPLY_MAX_BYTES: usize = 64 << 20;
/// The opaque token prefix of `mg` that forces a degraded read of a chunk position:
/// `mg <key> v Oinec-degrade-<position>`.
pub const DEGRADE_OPAQUE_PREFIX: &[u8] = b"inec-degrade-";
/// The test-only command (with `--debug-commands`): `inec_flip <key> <position> <bit>`.
pub const FLIP_COMMAND: &[u8] = b"inec_flip ";

/// Server settings besides the node's.
#[derive(Clone, Debug)]
pub struct ServerConfig {
    pub limits: Limits,
    pub max_connections: usize,
    /// Client workers, and as many peer workers, for the requests a loop hands over.
    pub workers: usize,
    /// Every node's peer address (`[i]` is node i's), for the requests the client loop runs to
    /// completion itself; empty: every request runs on a worker.
    pub peer_addrs: Vec<SocketAddr>,
}

#[derive(Debug, Default)]
struct ConnCounts {
    curr: AtomicU64,
    total: AtomicU64,
    bytes_read: AtomicU64,
    bytes_written: AtomicU64,
    /// Event loops serving connections (memcached's `threads`).
    threads: AtomicU64,
}

struct Conn {
    stream: TcpStream,
    inbuf: Vec<u8>,
    out: Vec<u8>,
    out_pos: usize,
    parser: Parser,
    busy: bool,
    closing: bool,
    eof: bool,
    /// The socket may hold bytes not read yet: set by a readable event (and at first), cleared
    /// by a read that left it empty. Edge-triggered polling brings a new event when more bytes
    /// come, so a connection served for another reason (its reply came) is not read in vain.
    unread: bool,
    /// The key lock the request at the head of `inbuf` waits for (left unread until it is
    /// freed; `busy` meanwhile).
    parked: Option<usize>,
}

struct Job {
    token: Token,
    work: Work,
    /// The loop whose connection the reply goes to.
    home: Arc<Mailbox>,
}

/// What a loop receives from other threads (its mailbox wakes its poll).
enum Mail {
    /// A worker's reply for one of the loop's connections (client or peer), closing a client's
    /// connection after it if `close`.
    Reply {
        token: Token,
        out: Vec<u8>,
        close: bool,
    },
    /// A client connection accepted by the first loop for this one.
    Client(TcpStream),
    /// A peer connection accepted by the first loop for this one.
    Peer(TcpStream),
    /// Requests of another thread of the node for other nodes (`carrier::calls`).
    Call(Call),
    /// Engine frames another loop read, for the first loop's engine.
    Plans(PlanMail),
    /// The repair run that step `position` of loop op `id` launched ended (`ok`: it
    /// succeeded); posted by the engine host.
    PlanDone { id: u64, position: usize, ok: bool },
}

/// What a peer connection brought the node's engine: the frames it read from node `from`, and
/// whether it closed (frames from `from` may then have been lost).
#[derive(Debug)]
struct PlanMail {
    /// The connection: its loop and token.
    conn: (usize, Token),
    from: u32,
    frames: Vec<engine::transport::Event>,
    closed: bool,
}

/// The node's engine as the first loop drives it (`engine::Engine::driven`): its frames travel
/// on that loop's links to the other nodes (`carrier::lane`).
pub type EngineLoop = engine::Driven<LaneTransport>;

/// The node's engine host, stepped by the first loop after each turn of the engine: a run is
/// launched, started and ended on that loop, with no thread of its own.
pub type EngineHost = engine::SteppedHost<crate::carrier::plans::CacheApp>;

/// Wakes the first loop when a work request is posted to the engine it drives, or a launch to
/// its host. From the first loop itself, nothing: it steps the host and turns the engine until
/// neither has work before it waits.
struct LoopWaker(Arc<Mailbox>);

impl engine::transport::Waker for LoopWaker {
    fn wake(&self) {
        if THIS_LOOP.with(|l| l.get()) != Some(self.0.id) {
            let _ = self.0.waker.wake();
        }
    }
}

thread_local! {
    /// The loop the calling thread runs, if it is one.
    static THIS_LOOP: std::cell::Cell<Option<usize>> = const { std::cell::Cell::new(None) };
    /// Mail the loop posted to itself since it last took its mail (a run it launched ended
    /// while it stepped the engine's host): its next poll does not wait.
    static MAIL_TO_SELF: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// A loop's mailbox: a channel and the waker of its poll.
#[derive(Debug)]
pub struct Mailbox {
    /// The loop's index.
    id: usize,
    tx: mpsc::Sender<Mail>,
    waker: Waker,
}

impl Mailbox {
    /// Posts and wakes the loop; false when the loop is gone.
    fn post(&self, mail: Mail) -> bool {
        if self.tx.send(mail).is_err() {
            return false;
        }
        self.ring();
        true
    }

    /// Wakes the loop after a post; a loop posting to itself is not woken (no system call)
    /// but polls without waiting next.
    fn ring(&self) {
        if THIS_LOOP.with(|l| l.get()) == Some(self.id) {
            MAIL_TO_SELF.with(|m| m.set(true));
        } else {
            let _ = self.waker.wake();
        }
    }
}

impl CallPost for Mailbox {
    fn post(&self, call: Call) -> Result<(), Call> {
        match self.tx.send(Mail::Call(call)) {
            Ok(()) => {
                self.ring();
                Ok(())
            }
            Err(mpsc::SendError(Mail::Call(call))) => Err(call),
            Err(_) => unreachable!("the mail sent was a call"),
        }
    }

    fn wake(&self) {
        self.ring();
    }
}

/// A node's event loops before they run: each one's poll and mailbox. Made before the node, so
/// that the node's calls to other nodes go through its loops ([`calls::LoopTransport`]).
#[derive(Debug)]
pub struct Loops {
    polls: Vec<(Poll, mpsc::Receiver<Mail>)>,
    homes: Vec<Arc<Mailbox>>,
    /// The node's engine and its host, for the first loop to drive ([`Loops::drive`]).
    engine: Option<(EngineLoop, EngineHost)>,
}

impl Loops {
    /// `count` loops (at least one).
    pub fn new(count: usize) -> io::Result<Loops> {
        let mut polls = Vec::new();
        let mut homes = Vec::new();
        for id in 0..count.max(1) {
            let poll = Poll::new()?;
            let waker = Waker::new(poll.registry(), WAKER)?;
            let (tx, rx) = mpsc::channel::<Mail>();
            homes.push(Arc::new(Mailbox { id, tx, waker }));
            polls.push((poll, rx));
        }
        Ok(Loops {
            polls,
            homes,
            engine: None,
        })
    }

    /// What wakes the first loop: the engine's waker.
    pub fn engine_waker(&self) -> Arc<dyn engine::transport::Waker> {
        Arc::new(LoopWaker(Arc::clone(&self.homes[0])))
    }

    /// Gives the node's engine (made over a [`LaneTransport`] with [`Loops::engine_waker`]) and
    /// its host to the first loop, which turns the one and steps the other in every pass and
    /// carries the engine's frames on its links.
    pub fn drive(&mut self, engine: EngineLoop, host: EngineHost) {
        self.engine = Some((engine, host));
    }

    /// Where other threads post their calls, one per loop.
    pub fn posts(&self) -> Vec<Arc<dyn CallPost>> {
        self.homes
            .iter()
            .map(|h| Arc::clone(h) as Arc<dyn CallPost>)
            .collect()
    }
}

/// How a loop hands a request it cannot run itself to the node's workers (shared by the loops):
/// the reply comes back to the loop's own mailbox.
struct Handoff {
    jobs: Arc<Pool<Job>>,
    peer_jobs: Arc<Pool<(PeerJob, Arc<Mailbox>)>>,
    /// The stripes' listings for index rebuilds (`List`), on a thread of their own: the peer
    /// workers may all be held by agent operations waiting for a rebuild, which waits for
    /// listings, this node's and other nodes'.
    listings: Arc<Pool<(PeerJob, Arc<Mailbox>)>>,
    home: Arc<Mailbox>,
    /// Counts the requests handed over (`worker_jobs`, `peer_worker_jobs`).
    node: Arc<Node>,
}

impl Handoff {
    /// A client's request (or an unlink) for a client worker.
    fn client(&self, token: Token, work: Work) {
        bump(&self.node.counters.worker_jobs);
        let home = Arc::clone(&self.home);
        self.jobs.submit(Job { token, work, home });
    }

    /// A peer's request that may wait, for a peer worker.
    fn peer(&self, token: Token, request: peer::Request, tried_here: bool) {
        bump(&self.node.counters.peer_worker_jobs);
        let pool = match request {
            peer::Request::List { .. } => &self.listings,
            _ => &self.peer_jobs,
        };
        let job = PeerJob {
            token,
            request,
            tried_here,
        };
        pool.submit((job, Arc::clone(&self.home)));
    }
}

enum Work {
    /// A request as the loop parsed it, run by [`execute`] (not parsed again), with its write's
    /// request id and try (id 0: the worker gives it one).
    Command(OwnedCommand, Once),
    /// The test-only `inec_flip` line (with `--debug-commands`), run by [`flip`].
    Flip(Vec<u8>),
    /// A write refused as too large that must not leave the value it meant to overwrite (see
    /// `proto::Parse::Error::unlink`): the key's value is removed, then `reply` is sent.
    Unlink { key: Vec<u8>, reply: Vec<u8> },
}

/// The reply to a write whose fate is unknown (it may have been applied: it is not run again).
const IN_DOUBT: &str =
    "the key's agent lost its lease during the write: it may or may not have been applied";
/// A write run on the loop whose records left and that did not finish while the lease lapsed
/// (`LoopOp::in_doubt`).
const UNFINISHED: &str = "the write did not finish and the key's agent may have lost its lease \
     meanwhile: it may or may not have been applied";

/// What a [`LoopOp::ReadThen`] reads a coded value for.
enum ReadFirst {
    /// `incr`, `decr`, `append`, `prepend` or `ma` (`Node::loop_modify_start`): then the new
    /// value's write, a [`LoopOp::Write`] (`Node::loop_modify_resume`).
    Modify(Box<LoopModify>),
    /// `gat`, `gats` or a meta get with `T` (`Node::loop_gat_start`): then the touch, a
    /// [`LoopOp::Notice`] with the value (`Node::loop_gat_resume`).
    Gat(Box<LoopGatFetch>),
}

impl ReadFirst {
    fn read(&self) -> &LoopPending {
        match self {
            ReadFirst::Modify(m) => &m.read,
            ReadFirst::Gat(g) => &g.read,
        }
    }

    fn read_mut(&mut self) -> &mut LoopPending {
        match self {
            ReadFirst::Modify(m) => &mut m.read,
            ReadFirst::Gat(g) => &mut g.read,
        }
    }
}

/// What comes of a [`LoopOp::ReadThen`] once its chunks are in.
enum Then {
    /// The next op: the change's write, or the gat's touch.
    Op(Box<LoopOp>),
    /// Answered now: a change stored on this node alone, which a read that needed other
    /// nodes' chunks all but rules out (every data position but this node's is elsewhere), but
    /// a stored change is answered, never run again.
    Reply(Vec<u8>),
    /// A worker runs the request (nothing was written).
    Worker,
}

/// The op that follows a coded value's read: the change's write
/// (`Node::loop_modify_resume`), or the gat's touch (`Node::loop_gat_resume`).
fn read_then(node: &Node, first: ReadFirst, to: ReplyTo, retry: &Retry) -> Then {
    let c = &node.counters;
    match first {
        ReadFirst::Gat(g) => match node.loop_gat_resume(g) {
            LoopGatStart::Send(notice, value) => {
                let value = Some(value);
                Then::Op(Box::new(LoopOp::Notice { notice, to, value }))
            }
            _ => {
                bump(&c.loop_read_fallbacks);
                Then::Worker
            }
        },
        ReadFirst::Modify(m) => match node.loop_modify_resume(m) {
            LoopModifyStart::Send(write) => Then::Op(Box::new(LoopOp::Write { write, to })),
            LoopModifyStart::Stored {
                cas,
                number,
                exptime,
            } => {
                bump(&c.loop_writes);
                let mode = if number.is_some() {
                    StoreMode::Set
                } else {
                    StoreMode::Append
                };
                Then::Reply(write_reply(node, to, retry, mode, number, cas, exptime))
            }
            _ => {
                bump(&c.loop_write_fallbacks);
                Then::Worker
            }
        },
    }
}

/// A request the event loop runs to completion, waiting for other nodes.
struct PendingOp {
    /// The connection the reply goes to: a client's, or a peer's (a forwarded request).
    conn: Token,
    op: LoopOp,
    /// The request, for a worker if the loop cannot finish it.
    retry: Retry,
    /// Requests sent and not answered yet.
    outstanding: usize,
    /// The next of the op's remote steps to send (incoherent mode sends one at a time).
    next: usize,
    failed: bool,
    deadline: Instant,
}

/// What a client's command needs once the loop has looked at it.
enum Next {
    /// Answered (the reply is in the connection's buffer).
    Done,
    /// A worker runs it, as the try `Once` of its write.
    Worker(Once),
    /// The loop runs it to completion, waiting for other nodes.
    Loop(LoopOp, Once),
    /// As `Loop`, its requests written at once rather than at the end of the pass (a
    /// forced-degraded read).
    LoopNow(LoopOp),
}

/// A request the loop gives to a worker: a client's parsed command (a client worker runs it), or
/// a peer's request (a peer worker answers it).
enum Retry {
    Client(OwnedCommand, Once),
    Peer(peer::Request),
}

impl Retry {
    /// The request run as the try `once` of its write.
    fn with_once(self, once: Once) -> Retry {
        match self {
            Retry::Client(command, _) => Retry::Client(command, once),
            Retry::Peer(mut request) => {
                if let peer::Request::Agent(
                    AgentOp::Store { once: o, .. } | AgentOp::Arith { once: o, .. },
                ) = &mut request
                {
                    *o = once;
                }
                Retry::Peer(request)
            }
        }
    }
}

/// Who reads the reply of a loop op.
#[derive(Clone, Copy)]
enum ReplyTo {
    /// A memcached client: `with_cas` (`gets`) for a read, `noreply` for a write.
    Client { with_cas: bool, noreply: bool },
    /// The node that forwarded the request: a framed `Response::Agent`.
    Peer,
    /// A memcached client's meta set or delete: the reply composed from the command's flags,
    /// which the op keeps for a worker anyway ([`meta_result`]).
    Meta,
}

enum LoopOp {
    /// `get`/`gets` of one key (`Node::loop_read_start`), or a client's forced-degraded
    /// `mg` (`Node::loop_read_start_degraded`: `meta` is the command, its reply composed from
    /// its flags).
    Read {
        read: LoopPending,
        to: ReplyTo,
        meta: Option<Box<OwnedCommand>>,
    },
    /// `set`, `add`, `replace` or `cas` (`Node::loop_write_start`), or the new value of an
    /// `incr`, `decr`, `append` or `prepend` (`Node::loop_modify_start`).
    Write { write: Box<LoopWrite>, to: ReplyTo },
    /// A coded value's data chunks read under the key's lock, then what the request does
    /// with the value, as the op that [`LoopOps::settle`] turns this one into: see
    /// [`ReadFirst`].
    ReadThen { first: ReadFirst, to: ReplyTo },
    /// `delete` or `touch` (`Node::loop_delete_start`, `Node::loop_touch_start`): the index
    /// is changed before any message leaves, so a member that fails to answer does not fail it
    /// ([`LoopOp::tolerant`]).
    Notice {
        notice: Box<LoopNotice>,
        to: ReplyTo,
        /// A `gat` (`Node::loop_gat_start`): the value read, the reply once the touch is done.
        value: Option<Box<crate::agent::LoopValue>>,
    },
    /// A client's `get` or `gets` of several keys: each key a read or a forward of its own,
    /// their steps sent together, the reply composed in the keys' order once all are in. Any
    /// key the loop cannot finish and a worker runs the whole command.
    MultiGet(Box<MultiGet>),
    /// A request the loop runs at the agent (above) sent to the key's agent, another node: one
    /// step, whose answer is the reply (a get: a value or a miss; a store: stored, not stored,
    /// exists or not found; a delete: deleted or not found; an incr: the number, not found or
    /// not a number; a touch: touched or not found). Any other answer, or none, and a worker
    /// runs the request the full way (which retries while views settle).
    Forward {
        /// `[(agent, 0)]`.
        remote: [(usize, usize); 1],
        /// Taken when sent.
        op: Option<AgentOp>,
        /// A write, not sent again once sent (see `in_doubt`).
        write: bool,
        /// The agent answered that it does not lead the key's stripe (it applied nothing).
        refused: bool,
        /// What the request is, for its reply and counters here, where its client is (a `cas`
        /// counts its hits, misses and bad values; a `delete`, `touch`, `incr`, `decr` its hits
        /// and misses).
        what: Forwarded,
        /// The write's request id (`agent::once`; 0 for a read).
        once: Once,
        key: Vec<u8>,
        to: ReplyTo,
        result: Option<AgentResult>,
    },
}

impl LoopOp {
    fn forward(agent: usize, key: &[u8], op: AgentOp, to: ReplyTo) -> LoopOp {
        LoopOp::Forward {
            remote: [(agent, 0)],
            what: match &op {
                AgentOp::Store {
                    mode: StoreMode::Cas,
                    ..
                } => Forwarded::Cas,
                AgentOp::Delete { .. } => Forwarded::Delete,
                AgentOp::Arith { incr, .. } => Forwarded::Arith { incr: *incr },
                AgentOp::Touch { .. } => Forwarded::Touch,
                AgentOp::Get { touch: Some(_), .. } => Forwarded::Gat,
                _ => Forwarded::Other,
            },
            write: !op.repeatable(),
            once: op.once().unwrap_or_default(),
            op: Some(op),
            refused: false,
            key: key.to_vec(),
            to,
            result: None,
        }
    }

    /// A meta get's read on the loop: its reply composed from the command's flags.
    fn meta_read(read: LoopPending, command: &Command<'_>) -> LoopOp {
        LoopOp::Read {
            read,
            to: ReplyTo::Client {
                with_cas: false,
                noreply: false,
            },
            meta: Some(Box::new(command.to_owned_command())),
        }
    }

    fn remote(&self) -> &[(usize, usize)] {
        match self {
            LoopOp::Read { read, .. } => &read.remote,
            LoopOp::ReadThen { first, .. } => &first.read().remote,
            LoopOp::Write { write, .. } => &write.remote,
            LoopOp::Notice { notice, .. } => &notice.remote,
            LoopOp::MultiGet(m) => &m.remote,
            LoopOp::Forward { remote, .. } => remote,
        }
    }

    fn request(&mut self, position: usize) -> peer::Request {
        match self {
            LoopOp::Read { read, .. } => read.request(position),
            LoopOp::ReadThen { first, .. } => first.read().request(position),
            LoopOp::Write { write, .. } => write.request(position),
            LoopOp::Notice { notice, .. } => notice.request(),
            LoopOp::MultiGet(m) => {
                let (op, position) = m.step(position);
                op.request(position)
            }
            LoopOp::Forward { op, .. } => peer::Request::Agent(op.take().expect("sent once")),
        }
    }

    /// Launches the repair run of step `position` (a [`PLAN_STEP`]); false if it could not.
    fn launch(
        &mut self,
        node: &Node,
        position: usize,
        done: impl FnOnce(bool) + Send + 'static,
    ) -> bool {
        match self {
            LoopOp::Read { read, .. } => node.loop_read_launch(read, done),
            LoopOp::MultiGet(m) => {
                let (op, position) = m.step(position);
                op.launch(node, position, done)
            }
            _ => false,
        }
    }

    /// Takes the end of the repair run of step `position`: false if the op cannot finish on
    /// the loop.
    fn plan_ran(&mut self, node: &Node, position: usize, ok: bool) -> bool {
        match self {
            LoopOp::Read { read, .. } => node.loop_read_planned(read, ok),
            LoopOp::MultiGet(m) => {
                let (op, position) = m.step(position);
                op.plan_ran(node, position, ok)
            }
            _ => false,
        }
    }

    /// Whether the op may finish before every step is answered (a range read holding a
    /// consistent cut).
    fn enough(&self, node: &Node) -> bool {
        match self {
            LoopOp::Read { read, .. } => node.loop_read_enough(read),
            _ => false,
        }
    }

    /// Whether the op ends as it would have with every step answered when a step fails or is
    /// not answered in time (a delete or touch: see [`LoopOp::Notice`]).
    fn tolerant(&self) -> bool {
        matches!(self, LoopOp::Notice { .. })
    }

    /// Takes the reply to the step for `position`: false if the op cannot finish on the loop.
    fn take(&mut self, node: &Node, position: usize, reply: Answer) -> bool {
        if let LoopOp::MultiGet(m) = self {
            let (op, position) = m.step(position);
            return op.take(node, position, reply);
        }
        let reply = reply.ok();
        match self {
            LoopOp::Read { read, .. } => node.loop_read_chunk(read, position, reply),
            LoopOp::ReadThen { first, .. } => {
                node.loop_read_chunk(first.read_mut(), position, reply)
            }
            LoopOp::Write { .. } => node.loop_write_acked(reply),
            LoopOp::Notice { .. } => true,
            LoopOp::MultiGet(_) => unreachable!("taken above"),
            LoopOp::Forward {
                result, refused, ..
            } => match reply {
                // The agent's error is its answer: it says whether anything was applied.
                Some(peer::Response::Agent(
                    r @ (AgentResult::Value { .. }
                    | AgentResult::Miss
                    | AgentResult::Stored { .. }
                    | AgentResult::NotStored
                    | AgentResult::Exists
                    | AgentResult::NotFound
                    | AgentResult::Deleted
                    | AgentResult::Number { .. }
                    | AgentResult::NonNumeric
                    | AgentResult::Touched
                    | AgentResult::Error(_)),
                )) => {
                    *result = Some(r);
                    true
                }
                Some(peer::Response::Agent(AgentResult::NotAgent)) => {
                    *refused = true;
                    false
                }
                _ => false,
            },
        }
    }

    /// The reply once every step is done, or `None` for a worker to run the request again
    /// (counted as a fallback). `retry` is the request as a worker would run it (a meta
    /// command's reply is composed from its flags).
    fn finish(self, node: &Node, retry: &Retry) -> Option<Vec<u8>> {
        let c = &node.counters;
        let mut out = Vec::new();
        match self {
            LoopOp::Read { read, to, meta } => {
                let Some(v) = node.loop_read_finish(read) else {
                    bump(&c.loop_read_fallbacks);
                    return None;
                };
                bump(&c.loop_reads);
                if let Some(Command::MetaGet(m)) = meta.as_deref().map(OwnedCommand::as_command) {
                    bump(&c.cmd_get);
                    bump(&c.get_hits);
                    meta_hit(&mut out, &m, v.flags, v.cas, v.exptime, &v.value);
                    return Some(out);
                }
                match to {
                    ReplyTo::Client { .. } | ReplyTo::Meta => {
                        bump(&c.cmd_get);
                        bump(&c.get_hits);
                        let with_cas = matches!(to, ReplyTo::Client { with_cas: true, .. });
                        let cas = with_cas.then_some(v.cas);
                        compose::value(&mut out, &v.key, v.flags, &v.value, cas);
                        compose::reply(&mut out, Reply::End);
                    }
                    ReplyTo::Peer => {
                        out = crate::member::conn::frame_reply(
                            node,
                            &peer::Response::Agent(value_result(v)),
                        )
                    }
                }
            }
            LoopOp::Write { write, to } => {
                let (id, mode, number) = (write.id(), write.mode(), write.number());
                let exptime = write.exptime();
                let Some(cas) = node.loop_write_finish(*write) else {
                    // Stored on every member, then the lease ran out: tried again as a retry
                    // (answered from the records a rebuilt index adopts, never applied twice),
                    // or, without a request id, in doubt (see `loop_write_finish`), answered as
                    // such rather than written again.
                    if id != 0 {
                        bump(&c.loop_write_fallbacks);
                        return None;
                    }
                    bump(&c.writes_in_doubt);
                    return Some(in_doubt_reply(node, to));
                };
                bump(&c.loop_writes);
                out = write_reply(node, to, retry, mode, number, cas, exptime);
            }
            LoopOp::ReadThen { .. } => unreachable!("`settle` turns it into its next op"),
            LoopOp::MultiGet(m) => return m.finish(node),
            LoopOp::Notice { notice, to, value } => {
                let touch = notice.is_touch();
                if !node.loop_notice_finish(*notice) {
                    // A touch may be applied again: a worker runs it.
                    if touch {
                        bump(&c.loop_write_fallbacks);
                        return None;
                    }
                    return Some(in_doubt_reply(node, to));
                }
                if let Some(v) = value {
                    bump(&c.loop_touches);
                    bump(&c.loop_reads);
                    match to {
                        ReplyTo::Client { with_cas, .. } => {
                            bump(&c.cmd_get);
                            bump(&c.get_hits);
                            bump(&c.cmd_touch);
                            bump(&c.touch_hits);
                            let cas = with_cas.then_some(v.cas);
                            compose::value(&mut out, &v.key, v.flags, &v.value, cas);
                            compose::reply(&mut out, Reply::End);
                        }
                        ReplyTo::Meta => meta_result(node, retry, &value_result(*v), &mut out),
                        ReplyTo::Peer => {
                            let r = peer::Response::Agent(value_result(*v));
                            out = crate::member::conn::frame_reply(node, &r);
                        }
                    }
                    return Some(out);
                }
                let r = if touch {
                    bump(&c.loop_touches);
                    AgentResult::Touched
                } else {
                    bump(&c.loop_deletes);
                    AgentResult::Deleted
                };
                match to {
                    ReplyTo::Client { noreply, .. } if touch => {
                        touch_reply(node, &r, noreply, &mut out);
                    }
                    ReplyTo::Client { noreply, .. } => delete_reply(node, &r, noreply, &mut out),
                    ReplyTo::Meta => meta_result(node, retry, &r, &mut out),
                    ReplyTo::Peer => {
                        out = crate::member::conn::frame_reply(node, &peer::Response::Agent(r));
                    }
                }
            }
            LoopOp::Forward {
                to,
                result,
                key,
                what,
                ..
            } => {
                bump(&c.forwarded);
                bump(&c.loop_forwards);
                if let ReplyTo::Meta = to {
                    meta_result(node, retry, &result.expect("answered"), &mut out);
                    return Some(out);
                }
                let ReplyTo::Client { with_cas, noreply } = to else {
                    unreachable!("a forwarded request is not forwarded again");
                };
                match result.expect("answered") {
                    AgentResult::Value {
                        flags, cas, value, ..
                    } => {
                        bump(&c.cmd_get);
                        bump(&c.get_hits);
                        if what == Forwarded::Gat {
                            bump(&c.cmd_touch);
                            bump(&c.touch_hits);
                        }
                        compose::value(&mut out, &key, flags, &value, with_cas.then_some(cas));
                        compose::reply(&mut out, Reply::End);
                    }
                    AgentResult::Miss => {
                        bump(&c.cmd_get);
                        bump(&c.get_misses);
                        if what == Forwarded::Gat {
                            bump(&c.cmd_touch);
                            bump(&c.touch_misses);
                        }
                        compose::reply(&mut out, Reply::End);
                    }
                    AgentResult::Error(e) => {
                        if !noreply {
                            server_error(&mut out, &e);
                        }
                    }
                    r @ (AgentResult::Number { .. }
                    | AgentResult::NotFound
                    | AgentResult::NonNumeric) => match what {
                        Forwarded::Arith { incr } => arith_reply(node, incr, &r, noreply, &mut out),
                        Forwarded::Delete => delete_reply(node, &r, noreply, &mut out),
                        Forwarded::Touch => touch_reply(node, &r, noreply, &mut out),
                        _ => store_reply(node, what == Forwarded::Cas, &r, noreply, &mut out),
                    },
                    AgentResult::Touched => {
                        touch_reply(node, &AgentResult::Touched, noreply, &mut out)
                    }
                    r @ (AgentResult::Deleted | AgentResult::Exists)
                        if what == Forwarded::Delete =>
                    {
                        delete_reply(node, &r, noreply, &mut out)
                    }
                    r @ (AgentResult::Stored { .. }
                    | AgentResult::NotStored
                    | AgentResult::Exists) => {
                        let cas = what == Forwarded::Cas;
                        store_reply(node, cas, &r, noreply, &mut out)
                    }
                    _ => unreachable!("take accepts only these"),
                }
            }
        }
        Some(out)
    }

    /// A write forwarded to its agent with no answer that says whether it was applied (none
    /// came, or an error): running it again could apply it twice, the second time over later
    /// writes (a partition that heals delivers what was queued), so the client is told
    /// `SERVER_ERROR` instead, as when memcached's connection drops mid-request.
    ///
    /// So is a write run here whose records have left for the members
    /// (`Node::loop_write_sent`) unless this node led the stripe throughout
    /// (`Node::loop_write_may_rerun`): another leader may have adopted them.
    ///
    /// Neither is, if it has a request id: a worker tries it again as a retry
    /// ([`LoopOp::rerun`]), which the agent answers from the key's records or refuses, never
    /// applying it twice (`agent::once`).
    fn in_doubt(&self, node: &Node) -> bool {
        match self {
            LoopOp::Forward {
                write: true,
                op: None,
                refused: false,
                result: None,
                once,
                ..
            } => once.id == 0,
            LoopOp::Write { write, .. } => {
                write.id() == 0 && node.loop_write_sent(write) && !node.loop_write_may_rerun(write)
            }
            _ => false,
        }
    }

    /// The reply to an op [`LoopOp::in_doubt`], what it reserved released.
    fn doubt(self, node: &Node) -> Vec<u8> {
        let mut out = Vec::new();
        match self {
            LoopOp::Forward {
                remote: [(agent, _)],
                to: ReplyTo::Client { noreply: false, .. } | ReplyTo::Meta,
                ..
            } => compose::server_error(
                &mut out,
                &format!(
                    "node {agent} (the key's agent) sent no reply: the write may or may not \
                     have been applied"
                ),
            ),
            LoopOp::Write { write, to } => {
                node.loop_write_doubt(*write);
                match to {
                    ReplyTo::Client { noreply: true, .. } => {}
                    ReplyTo::Client { .. } | ReplyTo::Meta => {
                        compose::server_error(&mut out, UNFINISHED)
                    }
                    ReplyTo::Peer => {
                        let res = peer::Response::Agent(AgentResult::Error(UNFINISHED.into()));
                        out = crate::member::conn::frame_reply(node, &res);
                    }
                }
            }
            _ => {}
        }
        out
    }

    /// How a worker tries a write given up on the loop again (`None`: as it was): a write run
    /// here as a first try if none of its records left, as a rerun if they did and this node
    /// led the stripe throughout (`LoopWrite::rerun_once`), otherwise as a retry; a forwarded
    /// one as a first try if it was not sent or the agent refused it, otherwise as a retry.
    fn rerun(&self, node: &Node) -> Option<Once> {
        match self {
            LoopOp::Write { write, .. }
                if write.id() != 0
                    && node.loop_write_sent(write)
                    && !node.loop_write_may_rerun(write) =>
            {
                Some(Once {
                    id: write.id(),
                    attempt: Attempt::Retry,
                })
            }
            LoopOp::Write { write, .. } => Some(write.rerun_once()),
            LoopOp::Forward {
                write: true,
                once,
                op,
                refused,
                ..
            } if once.id != 0 => Some(if op.is_some() || *refused {
                Once::first(once.id)
            } else {
                Once {
                    id: once.id,
                    attempt: Attempt::Retry,
                }
            }),
            _ => None,
        }
    }

    /// Gives the op up (a worker runs the request again).
    fn abandon(self, node: &Node) {
        let c = &node.counters;
        match self {
            LoopOp::Read { mut read, .. } => {
                bump(&c.loop_read_fallbacks);
                node.loop_read_abandon(&mut read);
            }
            LoopOp::Write { write, .. } => {
                bump(&c.loop_write_fallbacks);
                node.loop_write_abandon(*write);
            }
            LoopOp::Forward { .. } => bump(&c.loop_forward_fallbacks),
            // Nothing written: the key's lock is freed with it.
            LoopOp::ReadThen { .. } => bump(&c.loop_read_fallbacks),
            LoopOp::Notice { .. } => unreachable!("a delete or touch is not given up (`tolerant`)"),
            LoopOp::MultiGet(m) => {
                for part in m.parts {
                    if let GetPart::Waiting(op) = part {
                        op.abandon(node);
                    }
                }
            }
        }
    }
}

/// One key of a [`MultiGet`].
enum GetPart {
    /// Answered when the command began: its reply lines (`VALUE`, the data), none for a miss.
    Ready { lines: Vec<u8>, hit: bool },
    /// Waiting for other nodes: a [`LoopOp::Read`] or a [`LoopOp::Forward`].
    Waiting(Box<LoopOp>),
}

/// The keys of a multi-key get and the steps of those that wait.
struct MultiGet {
    parts: Vec<GetPart>,
    with_cas: bool,
    /// (node, step) of every waiting part's steps, in the parts' order.
    remote: Vec<(usize, usize)>,
    /// The part and the part's own position of each step.
    steps: Vec<(usize, usize)>,
}

impl MultiGet {
    /// Starts `get`/`gets` of `keys` on the loop: `None` if a key needs a worker (nothing was
    /// sent; the worker runs the command).
    fn start(node: &Node, keys: &[&[u8]], with_cas: bool) -> Option<MultiGet> {
        let mut m = MultiGet {
            parts: Vec::with_capacity(keys.len()),
            with_cas,
            remote: Vec::new(),
            steps: Vec::new(),
        };
        let to = ReplyTo::Client {
            with_cas,
            noreply: false,
        };
        for key in keys {
            let mut lines = Vec::new();
            let part = match node.loop_read_into(key, &mut lines, with_cas) {
                LoopRead::Worker => return None,
                LoopRead::Composed => {
                    // The composed reply ends as a one-key get's does: its `END` goes.
                    let body = lines.len() - b"END\r\n".len();
                    debug_assert_eq!(&lines[body..], b"END\r\n");
                    lines.truncate(body);
                    GetPart::Ready { lines, hit: true }
                }
                LoopRead::Miss => GetPart::Ready { lines, hit: false },
                LoopRead::Value(v) => {
                    let cas = with_cas.then_some(v.cas);
                    compose::value(&mut lines, &v.key, v.flags, &v.value, cas);
                    GetPart::Ready { lines, hit: true }
                }
                LoopRead::Fetch(read) => GetPart::Waiting(Box::new(LoopOp::Read {
                    read,
                    to,
                    meta: None,
                })),
                LoopRead::Forward(agent) => {
                    let get = AgentOp::Get {
                        key: key.to_vec(),
                        touch: None,
                        degrade: None,
                    };
                    GetPart::Waiting(Box::new(LoopOp::forward(agent, key, get, to)))
                }
            };
            if let GetPart::Waiting(op) = &part {
                for &(member, position) in op.remote() {
                    m.remote.push((member, m.steps.len()));
                    m.steps.push((m.parts.len(), position));
                }
            }
            m.parts.push(part);
        }
        Some(m)
    }

    /// The waiting op of step `step` and the step's position in it.
    fn step(&mut self, step: usize) -> (&mut LoopOp, usize) {
        let (part, position) = self.steps[step];
        match &mut self.parts[part] {
            GetPart::Waiting(op) => (op, position),
            GetPart::Ready { .. } => unreachable!("a ready part has no steps"),
        }
    }

    /// The reply once every step is in (counted as memcached counts a get of each key), or
    /// `None` if a key did not come whole: a worker runs the command again.
    fn finish(self, node: &Node) -> Option<Vec<u8>> {
        let c = &node.counters;
        let mut out = Vec::new();
        let mut hits = 0;
        let keys = self.parts.len() as u64;
        for part in self.parts {
            match part {
                GetPart::Ready { lines, hit } => {
                    out.extend_from_slice(&lines);
                    hits += u64::from(hit);
                }
                GetPart::Waiting(op) => match *op {
                    LoopOp::Read { read, .. } => {
                        let Some(v) = node.loop_read_finish(read) else {
                            bump(&c.loop_read_fallbacks);
                            return None;
                        };
                        let cas = self.with_cas.then_some(v.cas);
                        compose::value(&mut out, &v.key, v.flags, &v.value, cas);
                        hits += 1;
                    }
                    LoopOp::Forward { result, key, .. } => match result {
                        Some(AgentResult::Value {
                            flags, cas, value, ..
                        }) => {
                            let cas = self.with_cas.then_some(cas);
                            compose::value(&mut out, &key, flags, &value, cas);
                            hits += 1;
                        }
                        Some(AgentResult::Miss) => {}
                        _ => {
                            bump(&c.loop_forward_fallbacks);
                            return None;
                        }
                    },
                    _ => unreachable!("a part is a read or a forward"),
                },
            }
        }
        compose::reply(&mut out, Reply::End);
        c.cmd_get.fetch_add(keys, Ordering::Relaxed);
        c.get_hits.fetch_add(hits, Ordering::Relaxed);
        c.get_misses.fetch_add(keys - hits, Ordering::Relaxed);
        bump(&c.loop_multi_gets);
        Some(out)
    }
}

/// What a forwarded request is, for the counters of the node its client reached.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Forwarded {
    Cas,
    Delete,
    Touch,
    /// A get that touches (`gat`, `gats`).
    Gat,
    Arith {
        incr: bool,
    },
    Other,
}
/// Another thread's call the loop carries (`carrier::calls`).
struct CallOp {
    /// Node and lane of each request.
    sent: Vec<(usize, Lane)>,
    /// Each request, kept for one more try while it has had none: a request whose link failed
    /// before it was written whole (a connection the peer's restart broke, which this loop had
    /// not seen closed yet) goes again once on a fresh connection. Not sent, it cannot have
    /// been acted on.
    again: Vec<Option<peer::Request>>,
    replies: Vec<Option<Result<peer::Response, peer::PeerError>>>,
    outstanding: usize,
    deadline: Instant,
    reply: mpsc::Sender<Replies>,
    /// A copy of each reply as it comes, for a caller that takes them early.
    early: Option<mpsc::Sender<(usize, peer::Response)>>,
}

impl CallOp {
    /// Posts the replies to the caller (every request answered or failed).
    fn answer(self) {
        let replies = self
            .replies
            .into_iter()
            .map(|r| r.expect("every request answered"))
            .collect();
        let _ = self.reply.send(replies);
    }
}

/// The requests the loop runs to completion itself, the calls it carries for other threads,
/// and its connections to the other nodes.
struct LoopOps {
    links: Links,
    pending: HashMap<u64, PendingOp>,
    calls: HashMap<u64, CallOp>,
    next_id: u64,
    /// How long a request waits for a member before a worker takes it over.
    patience: Duration,
    /// Requests of links that failed when written before the end of a pass
    /// ([`LoopOps::flush_now`]), for the pass's end to take as unanswered.
    early_failures: Answers,
    /// This loop's mailbox: where the end of a repair run an op launched is posted.
    home: Arc<Mailbox>,
    /// Peers' forwarded requests waiting for a key lock: the peer connection, the request
    /// and the lock (`agent::keylock`).
    parked_peer: Vec<(Token, peer::Request, usize)>,
}

/// The end of a loop request: a reply for the connection, or the request handed to a worker.
enum Done {
    Reply(Token, Vec<u8>),
    Worker(Token, Retry),
}

impl LoopOps {
    /// Sends what the request may send now: all its messages (coherent), or the next one once
    /// the one before is answered (incoherent, the baseline).
    fn pump(&mut self, node: &Node, registry: &Registry, id: u64) {
        let coherent = node.cfg.mode == ExecMode::Coherent;
        let Some(pr) = self.pending.get_mut(&id) else {
            return;
        };
        while !pr.failed && pr.next < pr.op.remote().len() && (coherent || pr.outstanding == 0) {
            let (member, position) = pr.op.remote()[pr.next];
            pr.next += 1;
            if member == PLAN_STEP {
                let home = Arc::clone(&self.home);
                let done = move |ok| {
                    home.post(Mail::PlanDone { id, position, ok });
                };
                if !pr.op.launch(node, position, done) {
                    pr.failed = true;
                    break;
                }
                pr.outstanding += 1;
                continue;
            }
            // A tolerant op goes on without the member (a delete: as a worker's does).
            let tolerant = pr.op.tolerant();
            if !self.links.reaches(member) || !node.is_up(member) {
                if tolerant {
                    continue;
                }
                pr.failed = true;
                break;
            }
            let request = pr.op.request(position);
            let lane = Lane::of(&request);
            match self
                .links
                .queue(registry, member, lane, (id, position), &request, true)
            {
                Ok(()) => pr.outstanding += 1,
                Err(_) => pr.failed = !tolerant,
            }
        }
    }

    /// The request's end, if it has come: every reply in, or a failure.
    fn settle(&mut self, node: &Node, registry: &Registry, id: u64) -> Option<Done> {
        let pr = self.pending.get_mut(&id)?;
        let all_in = pr.outstanding == 0 && pr.next == pr.op.remote().len();
        let complete = all_in || pr.op.enough(node);
        if !pr.failed && !complete {
            return None;
        }
        // A range read with every answer in and no consistent cut asks again, once (none of
        // its first requests is still on its way: their answers are not taken for the new ones).
        if let (false, true, LoopOp::Read { read, .. }) = (pr.failed, all_in, &mut pr.op) {
            if node.loop_read_again(read) {
                pr.next = 0;
                self.pump(node, registry, id);
                return self.settle(node, registry, id);
            }
        }
        let pr = self.pending.remove(&id).expect("present");
        let failed = pr.failed && !pr.op.tolerant();
        if failed && pr.op.in_doubt(node) {
            bump(&node.counters.writes_in_doubt);
            return Some(Done::Reply(pr.conn, pr.op.doubt(node)));
        }
        if failed {
            let rerun = pr.op.rerun(node);
            if let Some(once) = rerun {
                log::debug!("a write given up on the loop goes to a worker as {once:x?}");
            }
            pr.op.abandon(node);
            let retry = match rerun {
                Some(once) => pr.retry.with_once(once),
                None => pr.retry,
            };
            return Some(Done::Worker(pr.conn, retry));
        }
        // A coded value's chunks in: the change's write, or the gat's touch, goes on as an op
        // of its own (a new id: replies to the read still on their way are not the next op's).
        let pr = match pr.op {
            LoopOp::ReadThen { first, to } => {
                let PendingOp { conn, retry, .. } = pr;
                return match read_then(node, first, to, &retry) {
                    Then::Op(op) => start_loop_op(self, node, registry, conn, *op, retry),
                    Then::Reply(out) => Some(Done::Reply(conn, out)),
                    Then::Worker => Some(Done::Worker(conn, retry)),
                };
            }
            op => PendingOp { op, ..pr },
        };
        // A write stored everywhere that could not be committed is tried again as a retry.
        let unfinished = match &pr.op {
            LoopOp::Write { write, .. } if write.id() != 0 => Some(Once {
                id: write.id(),
                attempt: Attempt::Retry,
            }),
            _ => None,
        };
        match pr.op.finish(node, &pr.retry) {
            Some(out) => Some(Done::Reply(pr.conn, out)),
            // `finish` undid what it had to and counted the fallback.
            None => Some(Done::Worker(
                pr.conn,
                match unfinished {
                    Some(once) => {
                        log::debug!(
                            "a write not committed on the loop goes to a worker as {once:x?}"
                        );
                        pr.retry.with_once(once)
                    }
                    None => pr.retry,
                },
            )),
        }
    }

    /// Writes what the links hold now rather than at the end of the pass: a degraded read's
    /// requests leave before the pass serves its other connections.
    fn flush_now(&mut self, registry: &Registry) {
        let failed = self.links.flush(registry);
        self.early_failures.extend(failed);
    }

    /// Queues the requests of another thread's call; answers it at once if none could leave.
    fn start_call(&mut self, registry: &Registry, call: Call) {
        let id = self.next_id;
        self.next_id += 1;
        let mut op = CallOp {
            sent: Vec::with_capacity(call.requests.len()),
            again: Vec::with_capacity(call.requests.len()),
            replies: Vec::with_capacity(call.requests.len()),
            outstanding: 0,
            deadline: call.deadline,
            reply: call.reply,
            early: call.early,
        };
        for (i, (to, request)) in call.requests.into_iter().enumerate() {
            let lane = Lane::of(&request);
            op.sent.push((to, lane));
            if !self.links.reaches(to) {
                op.replies
                    .push(Some(Err(peer::PeerError::UnknownNode { node: to })));
                op.again.push(None);
                continue;
            }
            match self
                .links
                .queue(registry, to, lane, (id, i), &request, false)
            {
                Ok(()) => {
                    op.outstanding += 1;
                    op.replies.push(None);
                    op.again.push(Some(request));
                }
                Err(source) => {
                    op.replies
                        .push(Some(Err(peer::PeerError::Io { node: to, source })));
                    op.again.push(None);
                }
            }
        }
        if op.outstanding == 0 {
            op.answer();
        } else {
            self.calls.insert(id, op);
        }
    }

    /// Takes a reply (or failure) of a call's request: the call is answered once all are in.
    /// A request not sent goes again once, on a fresh connection, while its deadline lasts.
    fn call_answered(&mut self, registry: &Registry, id: u64, at: usize, reply: Answer) {
        let Some(op) = self.calls.get_mut(&id) else {
            return; // a request given up meanwhile
        };
        if op.replies.get(at).is_none_or(|r| r.is_some()) {
            return;
        }
        let (to, lane) = op.sent[at];
        if matches!(reply, Err(Failure::NotSent(_))) && Instant::now() < op.deadline {
            if let Some(request) = op.again[at].take() {
                if self
                    .links
                    .queue(registry, to, lane, (id, at), &request, false)
                    .is_ok()
                {
                    return;
                }
            }
        }
        op.again[at] = None;
        if let (Some(early), Ok(r)) = (&op.early, &reply) {
            let _ = early.send((at, r.clone()));
        }
        let slot = &mut op.replies[at];
        *slot = Some(reply.map_err(|f| calls::peer_error(to, f)));
        op.outstanding -= 1;
        if op.outstanding == 0 {
            self.calls.remove(&id).expect("present").answer();
        }
    }

    /// Takes the end of the repair run of step `position` of op `id` (none if the op ended
    /// meanwhile: it gave the run up).
    fn plan_done(
        &mut self,
        node: &Node,
        registry: &Registry,
        id: u64,
        position: usize,
        ok: bool,
    ) -> Option<Done> {
        let pr = self.pending.get_mut(&id)?;
        pr.outstanding -= 1;
        if !pr.op.plan_ran(node, position, ok) {
            pr.failed = true;
        }
        self.pump(node, registry, id);
        self.settle(node, registry, id)
    }

    /// Takes replies (or failures) of the loop's peer connections.
    fn answered(&mut self, node: &Node, registry: &Registry, answers: Answers) -> Vec<Done> {
        let mut done = Vec::new();
        self.answered_into(node, registry, answers, &mut done);
        done
    }

    /// [`LoopOps::answered`], what ended added to `done`.
    fn answered_into(
        &mut self,
        node: &Node,
        registry: &Registry,
        answers: impl IntoIterator<Item = (Asked, Answer)>,
        done: &mut Vec<Done>,
    ) {
        for ((id, position), reply) in answers {
            let Some(pr) = self.pending.get_mut(&id) else {
                // Another thread's call, or a request given up or handed to a worker meanwhile.
                self.call_answered(registry, id, position, reply);
                continue;
            };
            pr.outstanding -= 1;
            if !pr.op.take(node, position, reply) {
                pr.failed = true;
            }
            self.pump(node, registry, id);
            done.extend(self.settle(node, registry, id));
        }
    }

    /// Hands the requests that waited too long to workers, and answers the calls past their
    /// deadline: what they still wait for fails, and the links it went on are closed (it must
    /// not reach its node later), failing what else they carried.
    fn expire(&mut self, node: &Node, registry: &Registry, now: Instant) -> Vec<Done> {
        let late_calls: Vec<u64> = self
            .calls
            .iter()
            .filter(|(_, c)| c.deadline <= now)
            .map(|(&id, _)| id)
            .collect();
        let mut aborted = Vec::new();
        for id in late_calls {
            let mut op = self.calls.remove(&id).expect("present");
            for (r, &(to, lane)) in op.replies.iter_mut().zip(&op.sent) {
                if r.is_none() {
                    *r = Some(Err(calls::peer_error(
                        to,
                        crate::carrier::links::Failure::NoReply(io::ErrorKind::TimedOut),
                    )));
                    aborted.extend(self.links.abort(registry, to, lane));
                }
            }
            op.answer();
        }
        let late: Vec<u64> = self
            .pending
            .iter()
            .filter(|(_, pr)| pr.deadline <= now)
            .map(|(&id, _)| id)
            .collect();
        let mut done = Vec::new();
        for id in late {
            if let Some(pr) = self.pending.get_mut(&id) {
                pr.failed = true;
            }
            done.extend(self.settle(node, registry, id));
        }
        done.extend(self.answered(node, registry, aborted));
        done
    }

    fn next_deadline(&self) -> Option<Instant> {
        let ops = self.pending.values().map(|pr| pr.deadline);
        ops.chain(self.calls.values().map(|c| c.deadline)).min()
    }
}

fn bump(c: &AtomicU64) {
    c.fetch_add(1, Ordering::Relaxed);
}

/// Registers an op the loop runs to completion for connection `token` and sends its first
/// steps: its end, if that came at once (otherwise the connection waits for it).
fn start_loop_op(
    ops: &mut LoopOps,
    node: &Node,
    registry: &Registry,
    token: Token,
    op: LoopOp,
    retry: Retry,
) -> Option<Done> {
    let id = ops.next_id;
    ops.next_id += 1;
    // A forward waits for the agent as long as the agent may take: its own patience with a
    // slow member, then its worker's exchanges. Given up, a forwarded write is in doubt.
    let patience = match op {
        LoopOp::Forward { .. } => ops.patience + PEER_TIMEOUT,
        _ => ops.patience,
    };
    ops.pending.insert(
        id,
        PendingOp {
            conn: token,
            op,
            retry,
            outstanding: 0,
            next: 0,
            failed: false,
            deadline: Instant::now() + patience,
        },
    );
    ops.pump(node, registry, id);
    ops.settle(node, registry, id)
}

/// [`start_loop_op`] for a client connection, busy until the op ends.
#[allow(clippy::too_many_arguments)]
fn start_client_op(
    c: &mut Conn,
    token: Token,
    node: &Node,
    hand: &Handoff,
    ops: &mut LoopOps,
    registry: &Registry,
    op: LoopOp,
    request: OwnedCommand,
    once: Once,
) {
    c.busy = true;
    match start_loop_op(ops, node, registry, token, op, Retry::Client(request, once)) {
        None => {}
        Some(Done::Worker(_, Retry::Client(request, once))) => {
            hand.client(token, Work::Command(request, once));
        }
        Some(Done::Worker(_, Retry::Peer(_))) => unreachable!("a client's op"),
        Some(Done::Reply(_, out)) => {
            c.out.extend_from_slice(&out);
            c.busy = false;
        }
    }
}

/// A peer's request that may wait: a forwarded plain `get` or `set` of a key this node leads
/// starts on the loop as a client's would; anything else goes to a peer worker. `Some`: the
/// framed reply, ready now; `None`: the connection waits for it.
fn start_peer_request(
    request: peer::Request,
    token: Token,
    node: &Node,
    ops: &mut LoopOps,
    registry: &Registry,
    hand: &Handoff,
) -> Option<Vec<u8>> {
    let c = &node.counters;
    // A key whose lock is held: the request waits on the loop, as a client's does.
    if let (false, peer::Request::Agent(op)) = (ops.links.is_empty(), &request) {
        let index = agent_op_key(op).map(crate::node::key_lock_index);
        if let Some(index) = index.filter(|&i| node.key_locks.is_locked(i)) {
            if node.key_locks.wait(index, ops.home.id) {
                bump(&c.key_lock_waits);
                ops.parked_peer.push((token, request, index));
                return None;
            }
        }
    }
    let op = match &request {
        _ if ops.links.is_empty() => None,
        peer::Request::Agent(AgentOp::Get {
            key,
            touch: None,
            degrade: Some(position),
        }) => match node.loop_read_start_degraded(key, *position) {
            LoopRead::Fetch(read) => Some(LoopOp::Read {
                read,
                to: ReplyTo::Peer,
                meta: None,
            }),
            _ => None,
        },
        peer::Request::Agent(AgentOp::Get {
            key,
            touch: None,
            degrade: None,
        }) => match node.loop_read_start(key) {
            LoopRead::Miss => {
                let res = peer::Response::Agent(AgentResult::Miss);
                return Some(crate::member::conn::frame_reply(node, &res));
            }
            LoopRead::Value(v) => {
                bump(&c.loop_reads);
                let res = peer::Response::Agent(value_result(v));
                return Some(crate::member::conn::frame_reply(node, &res));
            }
            LoopRead::Fetch(read) => Some(LoopOp::Read {
                read,
                to: ReplyTo::Peer,
                meta: None,
            }),
            // Only `loop_read_into` composes.
            LoopRead::Worker | LoopRead::Forward(_) | LoopRead::Composed => None,
        },
        peer::Request::Agent(AgentOp::Arith {
            incr,
            key,
            delta,
            once,
            meta,
        }) if once.attempt == Attempt::First => {
            let m = Modify::Arith {
                incr: *incr,
                delta: *delta,
                meta: *meta,
            };
            // A request forwarded here is not forwarded again: a worker runs it.
            let start = node.loop_modify_start(key, m, once.id);
            match arith_next(node, start, key, ReplyTo::Peer, || None) {
                ArithNext::Answer(r) => {
                    let res = peer::Response::Agent(r);
                    return Some(crate::member::conn::frame_reply(node, &res));
                }
                ArithNext::Loop(op) => Some(op),
                ArithNext::Worker => None,
            }
        }
        peer::Request::Agent(AgentOp::Store {
            mode,
            key,
            flags,
            exptime,
            compare_cas,
            value,
            once,
        }) if once.attempt == Attempt::First => {
            let cond = StoreIf {
                mode: *mode,
                compare_cas: *compare_cas,
            };
            let start = match mode {
                StoreMode::Append | StoreMode::Prepend => {
                    let m = Modify::Concat {
                        prepend: *mode == StoreMode::Prepend,
                        data: value,
                    };
                    concat_start(node.loop_modify_start(key, m, once.id))
                }
                _ => node.loop_write_start(key, cond, *flags, *exptime, value, once.id),
            };
            match start {
                LoopWriteStart::Stored(cas) => {
                    bump(&c.loop_writes);
                    let res = peer::Response::Agent(AgentResult::Stored { cas });
                    return Some(crate::member::conn::frame_reply(node, &res));
                }
                LoopWriteStart::Refused(d) => {
                    bump(&c.loop_writes_refused);
                    let res = peer::Response::Agent(refusal(d));
                    return Some(crate::member::conn::frame_reply(node, &res));
                }
                LoopWriteStart::Send(write) => Some(LoopOp::Write {
                    write,
                    to: ReplyTo::Peer,
                }),
                LoopWriteStart::Fetch(m) => Some(LoopOp::ReadThen {
                    first: ReadFirst::Modify(m),
                    to: ReplyTo::Peer,
                }),
                LoopWriteStart::Worker | LoopWriteStart::Forward(_) => None,
            }
        }
        peer::Request::Agent(AgentOp::Get {
            key,
            touch: Some(exptime),
            degrade: None,
        }) => match node.loop_gat_start(key, *exptime) {
            LoopGatStart::Miss => {
                let res = peer::Response::Agent(AgentResult::Miss);
                return Some(crate::member::conn::frame_reply(node, &res));
            }
            LoopGatStart::Send(notice, value) => Some(LoopOp::Notice {
                notice,
                to: ReplyTo::Peer,
                value: Some(value),
            }),
            LoopGatStart::Fetch(g) => Some(LoopOp::ReadThen {
                first: ReadFirst::Gat(g),
                to: ReplyTo::Peer,
            }),
            LoopGatStart::Worker | LoopGatStart::Forward(_) => None,
        },
        peer::Request::Agent(AgentOp::Touch { key, exptime }) => {
            match node.loop_touch_start(key, *exptime) {
                LoopNoticeStart::NotFound => {
                    let res = peer::Response::Agent(AgentResult::NotFound);
                    return Some(crate::member::conn::frame_reply(node, &res));
                }
                LoopNoticeStart::Send(notice) => Some(LoopOp::Notice {
                    notice,
                    to: ReplyTo::Peer,
                    value: None,
                }),
                _ => None,
            }
        }
        peer::Request::Agent(AgentOp::Delete { key, compare_cas }) => {
            let answer = |r: AgentResult| {
                let res = peer::Response::Agent(r);
                Some(crate::member::conn::frame_reply(node, &res))
            };
            match node.loop_delete_start(key, *compare_cas) {
                LoopNoticeStart::NotFound => return answer(AgentResult::NotFound),
                LoopNoticeStart::Exists => return answer(AgentResult::Exists),
                LoopNoticeStart::Send(notice) => Some(LoopOp::Notice {
                    notice,
                    to: ReplyTo::Peer,
                    value: None,
                }),
                LoopNoticeStart::Worker | LoopNoticeStart::Forward(_) => None,
            }
        }
        _ => None,
    };
    let Some(op) = op else {
        hand.peer(token, request, false);
        return None;
    };
    match start_loop_op(ops, node, registry, token, op, Retry::Peer(request)) {
        None => None,
        Some(Done::Reply(_, out)) => Some(out),
        Some(Done::Worker(_, retry)) => {
            if let Retry::Peer(request) = retry {
                hand.peer(token, request, true);
            }
            None
        }
    }
}

/// Takes a loop op's end to its connection: the reply, or the request for a worker of its
/// kind. The connection to service next, if a reply came.
fn deliver(
    done: Done,
    conns: &mut HashMap<Token, Conn>,
    peer_conns: &mut HashMap<Token, PeerConn>,
    hand: &Handoff,
) -> Option<Token> {
    match done {
        Done::Reply(token, out) => {
            if let Some(c) = conns.get_mut(&token) {
                c.take_reply(out);
                c.busy = false;
            } else if let Some(pc) = peer_conns.get_mut(&token) {
                pc.resume(&out);
            } else {
                return None;
            }
            Some(token)
        }
        Done::Worker(token, Retry::Client(request, once)) => {
            if conns.contains_key(&token) {
                hand.client(token, Work::Command(request, once));
            }
            None
        }
        Done::Worker(token, Retry::Peer(request)) => {
            if peer_conns.contains_key(&token) {
                hand.peer(token, request, true);
            }
            None
        }
    }
}

/// A value read by the loop, as the agent's answer to a forwarded get.
fn value_result(v: crate::agent::LoopValue) -> AgentResult {
    AgentResult::Value {
        flags: v.flags,
        cas: v.cas,
        exptime: v.exptime,
        value: v.value,
    }
}

/// Token of a loop's mailbox waker.
const WAKER: Token = Token(1);
/// Tokens of the listeners (the first loop only).
const LISTENER: Token = Token(0);
const PEER_LISTENER: Token = Token(2);
/// The first token of a connection.
const FIRST_CONN: usize = 3;

/// The listeners, held by the first loop, which deals the connections it accepts to the loops
/// in turn (memcached's dispatch): a connection then belongs to one loop for its life.
struct Acceptor {
    client: mio::net::TcpListener,
    peer: mio::net::TcpListener,
    loops: Vec<Arc<Mailbox>>,
    next: usize,
}

impl Acceptor {
    /// The loop the next connection goes to.
    fn deal(&mut self) -> usize {
        let i = self.next % self.loops.len();
        self.next = self.next.wrapping_add(1);
        i
    }
}

/// One event loop: its poll, mailbox, connections and links to the other nodes.
struct EventLoop {
    id: usize,
    poll: Poll,
    mail: mpsc::Receiver<Mail>,
    hand: Handoff,
    acceptor: Option<Acceptor>,
    /// The node's engine and its host, driven and stepped by the first loop.
    engine: Option<(EngineLoop, EngineHost)>,
    /// The first loop's mailbox: where engine frames read by another loop go.
    engine_home: Arc<Mailbox>,
    /// With the engine: the last connection that brought frames from each node. Only its close
    /// tells the engine that frames from the node may have been lost (an older connection's
    /// close, seen late, says nothing of the frames on the new one).
    plan_conns: HashMap<u32, (usize, Token)>,
}

/// Runs the node's event loops (`prepared`, `-t` of them) (client connections, the peer port, the requests
/// they run to completion) until one fails, with up to `cfg.workers` client workers and as
/// many peer workers shared by the loops for the requests that may wait (started when a request
/// finds none free, ended after [`pool::IDLE_FOR`] without one). The threads are the loops,
/// the workers running now, and the caller's (which waits here): none per connection or peer.
pub fn serve(
    node: Arc<Node>,
    listener: TcpListener,
    peers: TcpListener,
    cfg: ServerConfig,
    prepared: Loops,
) -> io::Result<()> {
    let Loops {
        polls,
        homes,
        mut engine,
    } = prepared;
    let engine_home = Arc::clone(&homes[0]);
    let loops = polls.len();
    let workers = cfg.workers.max(1);
    let counts = Arc::new(ConnCounts::default());
    counts.threads.store(loops as u64, Ordering::Relaxed);
    let jobs = {
        let (node, counts, limits) = (Arc::clone(&node), Arc::clone(&counts), cfg.limits);
        Pool::new("worker", workers, move |job: Job| {
            let mut out = Vec::new();
            let close = match job.work {
                Work::Command(command, once) => execute(
                    &node,
                    &counts,
                    &limits,
                    command.as_command(),
                    once,
                    &mut out,
                ),
                Work::Flip(line) => {
                    flip(&node, &line, &mut out);
                    false
                }
                Work::Unlink { key, reply } => {
                    unlink(&node, &key, reply, &mut out);
                    false
                }
            };
            let token = job.token;
            job.home.post(Mail::Reply { token, out, close });
        })
    };
    let peer_pool = |name: &'static str, max: usize| {
        let node = Arc::clone(&node);
        Pool::new(name, max, move |(job, home): (PeerJob, Arc<Mailbox>)| {
            let token = job.token;
            let out = crate::member::conn::run_job(&node, job);
            home.post(Mail::Reply {
                token,
                out,
                close: false,
            });
        })
    };
    let peer_jobs = peer_pool("peer-worker", workers);
    let listings = peer_pool("lister", 1);
    listener.set_nonblocking(true)?;
    peers.set_nonblocking(true)?;
    let mut acceptor = Some(Acceptor {
        client: mio::net::TcpListener::from_std(listener),
        peer: mio::net::TcpListener::from_std(peers),
        loops: homes.clone(),
        next: 0,
    });
    let (end_tx, end_rx) = mpsc::channel::<io::Result<()>>();
    for (id, ((poll, mail), home)) in polls.into_iter().zip(homes).enumerate() {
        let mut l = EventLoop {
            id,
            poll,
            mail,
            hand: Handoff {
                jobs: Arc::clone(&jobs),
                peer_jobs: Arc::clone(&peer_jobs),
                listings: Arc::clone(&listings),
                home,
                node: Arc::clone(&node),
            },
            acceptor: acceptor.take(),
            engine: engine.take(),
            engine_home: Arc::clone(&engine_home),
            plan_conns: HashMap::new(),
        };
        if let Some(a) = &mut l.acceptor {
            let registry = l.poll.registry();
            registry.register(&mut a.client, LISTENER, Interest::READABLE)?;
            registry.register(&mut a.peer, PEER_LISTENER, Interest::READABLE)?;
        }
        let (node, cfg, counts, end) = (
            Arc::clone(&node),
            cfg.clone(),
            Arc::clone(&counts),
            end_tx.clone(),
        );
        std::thread::Builder::new()
            .name(format!("loop-{id}"))
            .spawn(move || {
                calls::mark_loop_thread();
                THIS_LOOP.with(|l| l.set(Some(id)));
                // A loop that panics ends the node as a failed loop does (its connections
                // would otherwise hang, unserved, while the others run).
                let mut report = PanicReport {
                    id,
                    end,
                    ended: false,
                };
                let end = l.run(&node, &cfg, &counts);
                report.ended = true;
                let _ = report.end.send(end);
            })?;
    }
    drop(end_tx);
    end_rx.recv().unwrap_or(Ok(()))
}

/// Sends a loop's end as an error if the loop's thread unwinds before the loop ended.
struct PanicReport {
    id: usize,
    end: mpsc::Sender<io::Result<()>>,
    ended: bool,
}

impl Drop for PanicReport {
    fn drop(&mut self) {
        if self.ended {
            return;
        }
        let id = self.id;
        let _ = self
            .end
            .send(Err(io::Error::other(format!("event loop {id} panicked"))));
    }
}

/// A client connection's state when it is accepted.
impl Conn {
    /// Queues a reply: one that finds nothing waiting and is larger than the output's room
    /// becomes the output without a copy; a smaller one is copied, so that the output keeps
    /// the room a value's reply grew it to (else the next read's reply allocates it again).
    fn take_reply(&mut self, out: Vec<u8>) {
        if self.out.is_empty() && out.len() > self.out.capacity() {
            self.out = out;
            self.out_pos = 0;
        } else {
            self.out.extend_from_slice(&out);
        }
    }
}

fn new_conn(stream: TcpStream, limits: Limits) -> Conn {
    Conn {
        stream,
        inbuf: Vec::new(),
        out: Vec::new(),
        out_pos: 0,
        parser: Parser::new(limits),
        busy: false,
        closing: false,
        eof: false,
        unread: true,
        parked: None,
    }
}

impl EventLoop {
    /// Registers a connection dealt to this loop; false if the poll refused it.
    fn adopt(&self, stream: &mut TcpStream, token: Token) -> bool {
        let interest = Interest::READABLE | Interest::WRITABLE;
        self.poll
            .registry()
            .register(stream, token, interest)
            .is_ok()
    }

    /// Serves this loop's connections until its poll fails.
    fn run(mut self, node: &Arc<Node>, cfg: &ServerConfig, counts: &ConnCounts) -> io::Result<()> {
        let mut conns: HashMap<Token, Conn> = HashMap::new();
        let mut peer_conns: HashMap<Token, PeerConn> = HashMap::new();
        let mut scratch = vec![0u8; 64 * 1024];
        let mut next_token = FIRST_CONN;
        let mut events = Events::with_capacity(1024);
        // What this pass's events brought the engine (first loop only).
        let mut frames: Vec<engine::transport::Event> = Vec::new();
        let mut ops = LoopOps {
            links: Links::new(cfg.peer_addrs.clone()),
            pending: HashMap::new(),
            calls: HashMap::new(),
            next_id: 0,
            patience: (node.cfg.down_after * 2).clamp(Duration::from_millis(200), PEER_TIMEOUT),
            early_failures: Vec::new(),
            home: Arc::clone(&self.hand.home),
            parked_peer: Vec::new(),
        };
        if self.engine.is_some() {
            ops.links.carry_plans();
        }
        // Ends that came after this pass's connections were served (a failed flush): the next
        // pass delivers them and serves their connections, without waiting.
        let mut carried: Vec<Done> = Vec::new();
        // Client connections whose next request waits for a key lock (`Conn::parked`).
        let mut parked: Vec<Token> = Vec::new();
        // This pass's connections to serve, its loop requests that ended, the connections it
        // accepted (with the loop each goes to), the answers of a link: kept from pass to
        // pass, as their memory is.
        let mut touched: Vec<Token> = Vec::new();
        let mut done: Vec<Done> = Vec::new();
        let mut accepted: Vec<(usize, Mail)> = Vec::new();
        let mut answers: Answers = Vec::new();
        loop {
            // Wait for events, or for the first loop request to run out of patience.
            // The engine has events to take (frames read, a link of its frames lost).
            // Or for work of its own: the engine's or its host's, mail it posted itself.
            let engine_due = self.engine.as_ref().is_some_and(|(_, host)| {
                !frames.is_empty() || ops.links.plan_links_pending() || host.pending()
            });
            let own_mail = MAIL_TO_SELF.with(|m| m.get());
            let timeout = if carried.is_empty()
                && ops.early_failures.is_empty()
                && !engine_due
                && !own_mail
            {
                let engine = self.engine.as_ref().and_then(|(e, host)| {
                    [e.next_deadline(), host.next_deadline()]
                        .into_iter()
                        .flatten()
                        .min()
                });
                [ops.next_deadline(), engine]
                    .into_iter()
                    .flatten()
                    .min()
                    .map(|d| d.saturating_duration_since(Instant::now()))
            } else {
                Some(Duration::ZERO)
            };
            // A signal (SIGCONT after a stop, SIGWINCH, ...) interrupts the wait: wait again.
            match self.poll.poll(&mut events, timeout) {
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                r => r?,
            }
            touched.clear();
            done.clear();
            done.append(&mut carried);
            accepted.clear();
            for ev in events.iter() {
                match ev.token() {
                    t if t.0 >= LINK_BASE => {
                        let link = t.0 - LINK_BASE;
                        let registry = self.poll.registry();
                        if ev.is_writable() {
                            answers.extend(ops.links.writable(registry, link));
                        }
                        if ev.is_readable() || ev.is_read_closed() || ev.is_error() {
                            ops.links.readable_into(registry, link, &mut answers);
                        }
                        ops.answered_into(node, registry, answers.drain(..), &mut done);
                    }
                    LISTENER => {
                        let Some(a) = &mut self.acceptor else {
                            continue;
                        };
                        loop {
                            match a.client.accept() {
                                Ok((mut stream, _)) => {
                                    let curr = counts.curr.load(Ordering::Relaxed);
                                    if curr as usize >= cfg.max_connections {
                                        let _ =
                                            stream.write(b"ERROR Too many open connections\r\n");
                                        continue;
                                    }
                                    let _ = stream.set_nodelay(true);
                                    counts.curr.fetch_add(1, Ordering::Relaxed);
                                    counts.total.fetch_add(1, Ordering::Relaxed);
                                    accepted.push((a.deal(), Mail::Client(stream)));
                                }
                                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                                Err(_) => break,
                            }
                        }
                    }
                    PEER_LISTENER => {
                        let Some(a) = &mut self.acceptor else {
                            continue;
                        };
                        while let Ok((stream, _)) = a.peer.accept() {
                            let _ = stream.set_nodelay(true);
                            accepted.push((a.deal(), Mail::Peer(stream)));
                        }
                    }
                    WAKER => {}
                    t => {
                        if ev.is_readable() || ev.is_read_closed() || ev.is_error() {
                            if let Some(c) = conns.get_mut(&t) {
                                c.unread = true;
                            }
                        }
                        touched.push(t)
                    }
                }
            }
            // What waited past its deadline fails now, after the answers this pass read: a
            // loop that was held up (a lock held long, a starved CPU) takes the answers that
            // came meanwhile rather than failing them unread.
            done.extend(ops.expire(node, self.poll.registry(), Instant::now()));
            // Connections for other loops go to them; this loop's are served below with the
            // mail that came for it.
            let mut mail: Vec<Mail> = Vec::new();
            for (to, m) in accepted.drain(..) {
                match &self.acceptor {
                    Some(a) if to != self.id => {
                        if let Err(mpsc::SendError(m)) = a.loops[to].tx.send(m) {
                            mail.push(m); // that loop is gone: keep the connection here
                        } else {
                            let _ = a.loops[to].waker.wake();
                        }
                    }
                    _ => mail.push(m),
                }
            }
            MAIL_TO_SELF.with(|m| m.set(false));
            mail.extend(self.mail.try_iter());
            for m in mail {
                let token = Token(next_token);
                match m {
                    Mail::Reply { token, out, close } => {
                        if let Some(c) = conns.get_mut(&token) {
                            c.take_reply(out);
                            c.busy = false;
                            c.closing |= close;
                            touched.push(token);
                        } else if let Some(pc) = peer_conns.get_mut(&token) {
                            pc.resume(&out);
                            touched.push(token);
                        }
                    }
                    Mail::Client(mut stream) => {
                        next_token += 1;
                        if !self.adopt(&mut stream, token) {
                            counts.curr.fetch_sub(1, Ordering::Relaxed);
                            continue;
                        }
                        conns.insert(token, new_conn(stream, cfg.limits));
                        touched.push(token);
                    }
                    Mail::Peer(mut stream) => {
                        next_token += 1;
                        if self.adopt(&mut stream, token) {
                            peer_conns.insert(token, PeerConn::new(stream));
                            touched.push(token);
                        }
                    }
                    Mail::Call(call) => ops.start_call(self.poll.registry(), call),
                    Mail::Plans(m) => self.plan_mail(m, &mut frames),
                    Mail::PlanDone { id, position, ok } => {
                        let registry = self.poll.registry();
                        done.extend(ops.plan_done(node, registry, id, position, ok));
                    }
                }
            }
            // Loop requests that ended: their replies, or their requests for a worker.
            for d in done.drain(..) {
                touched.extend(deliver(d, &mut conns, &mut peer_conns, &self.hand));
            }
            // Connections whose request waits for a key lock: served if it was freed, or
            // waiting again (the wake that came may have been for another lock, or the lock
            // taken again since).
            parked.retain(|&t| {
                let Some(c) = conns.get_mut(&t) else {
                    return false;
                };
                if let Some(index) = c.parked {
                    if node.key_locks.wait(index, self.id) {
                        return true;
                    }
                }
                c.parked = None;
                c.busy = false;
                touched.push(t);
                false
            });
            for (t, request, index) in std::mem::take(&mut ops.parked_peer) {
                if node.key_locks.wait(index, self.id) {
                    ops.parked_peer.push((t, request, index));
                    continue;
                }
                if !peer_conns.contains_key(&t) {
                    continue;
                }
                let registry = self.poll.registry();
                let hand = &self.hand;
                if let Some(framed) = start_peer_request(request, t, node, &mut ops, registry, hand)
                {
                    if let Some(pc) = peer_conns.get_mut(&t) {
                        pc.resume(&framed);
                        touched.push(t);
                    }
                }
            }
            touched.sort_unstable();
            touched.dedup();
            for &token in &touched {
                if let Some(pc) = peer_conns.get_mut(&token) {
                    let registry = self.poll.registry();
                    let hand = &self.hand;
                    let mut wait = |request| {
                        start_peer_request(request, token, node, &mut ops, registry, hand)
                    };
                    let closed = pc.service(node, &mut scratch, &mut wait) == Served::Closed;
                    if let Some(from) = pc.plan_from {
                        if closed || !pc.plans.is_empty() {
                            let m = PlanMail {
                                conn: (self.id, token),
                                from,
                                frames: std::mem::take(&mut pc.plans),
                                closed,
                            };
                            self.plan_mail(m, &mut frames);
                        }
                    }
                    if closed {
                        if let Some(mut pc) = peer_conns.remove(&token) {
                            let _ = self.poll.registry().deregister(pc.stream());
                        }
                    }
                    continue;
                }
                let Some(c) = conns.get_mut(&token) else {
                    continue;
                };
                let was_parked = c.parked.is_some();
                let keep = service(
                    c,
                    token,
                    node,
                    counts,
                    &self.hand,
                    &mut ops,
                    self.poll.registry(),
                    &mut scratch,
                );
                if !was_parked && c.parked.is_some() {
                    parked.push(token);
                }
                if !keep {
                    if let Some(mut c) = conns.remove(&token) {
                        let _ = self.poll.registry().deregister(&mut c.stream);
                        counts.curr.fetch_sub(1, Ordering::Relaxed);
                    }
                }
            }
            // The engine's turn: the work its host posted, the frames this pass read, what
            // happened to the links of its frames; then its frames go on the links.
            self.turn_engine(node, &mut ops.links, &mut frames);
            // This pass's requests to each member leave in one write per member.
            let mut failed = ops.links.flush(self.poll.registry());
            failed.append(&mut ops.early_failures);
            // Only failures come of a failed write: those requests go to a worker, but a
            // forwarded write that may have left is answered as in doubt, and its connection
            // served next pass.
            carried.extend(ops.answered(node, self.poll.registry(), failed));
            // Requests queued while taking those failures (a call's request sent again on a
            // fresh connection) leave now; their own failures are taken next pass.
            ops.flush_now(self.poll.registry());
            node.count_loop_messages(
                std::mem::take(&mut ops.links.sent),
                std::mem::take(&mut ops.links.received),
            );
        }
    }

    /// Frames and news of a peer connection for the engine: taken here by the first loop's
    /// engine, posted to it by another loop, dropped by a node without one.
    fn plan_mail(&mut self, m: PlanMail, frames: &mut Vec<engine::transport::Event>) {
        if self.engine.is_none() {
            if self.id != 0 {
                self.engine_home.post(Mail::Plans(m));
            }
            return;
        }
        if !m.frames.is_empty() {
            self.plan_conns.insert(m.from, m.conn);
            frames.extend(m.frames);
        }
        if m.closed && self.plan_conns.get(&m.from) == Some(&m.conn) {
            self.plan_conns.remove(&m.from);
            frames.push(engine::transport::Event::PeerLost {
                peer: m.from as engine::NodeId,
                reason: "the connection that carried its frames closed".into(),
            });
        }
    }

    /// The engine's turns and its host's steps (first loop), until neither has work left: the
    /// host takes the launches posted since the last pass, the engine the work the host posted
    /// and the frames this pass read, the host the completions of the turn, and so on. The
    /// engine's frames are queued on `links` after each turn, leaving with the pass's other
    /// requests. A frame that cannot be queued (no connection could be started) costs the
    /// engine the node, which the next turn hears.
    fn turn_engine(
        &mut self,
        node: &Node,
        links: &mut Links,
        frames: &mut Vec<engine::transport::Event>,
    ) {
        let Some((e, host)) = &mut self.engine else {
            return;
        };
        for l in links.take_plan_links() {
            frames.push(match l {
                PlanLink::Lost(peer) => engine::transport::Event::PeerLost {
                    peer: peer as engine::NodeId,
                    reason: "the link that carried its frames dropped".into(),
                },
                PlanLink::Opened(peer) => engine::transport::Event::PeerBack {
                    peer: peer as engine::NodeId,
                },
            });
        }
        loop {
            let stepped = host.step();
            // After the host stopped, one more turn: its last replies are work requests.
            let turned = e.turn(frames);
            let t = e.transport();
            let from = node.cfg.id as u32;
            let registry = self.poll.registry();
            for (peer, header, payload) in std::mem::take(&mut t.out) {
                let queued = links.queue_plan(registry, peer, from, &header, payload.as_slice());
                payload.recycle(t.pool());
                if let Err(err) = queued {
                    frames.push(engine::transport::Event::PeerLost {
                        peer,
                        reason: format!("no connection to it: {err}"),
                    });
                }
            }
            if let Err(reason) = stepped.and(turned) {
                // The launches still in flight hear that the engine stopped (their calls
                // resume the requests that wait on them), unless the host itself had stopped.
                let _ = host.step();
                log::warn!(
                    "node {}: its engine stopped ({reason}); plans no longer run",
                    node.cfg.id
                );
                self.engine = None;
                return;
            }
            if !host.pending() && frames.is_empty() {
                return;
            }
        }
    }
}

/// Reads, runs and writes what it can; false when the connection is done.
#[allow(clippy::too_many_arguments)]
fn service(
    c: &mut Conn,
    token: Token,
    node: &Arc<Node>,
    counts: &ConnCounts,
    hand: &Handoff,
    ops: &mut LoopOps,
    registry: &Registry,
    buf: &mut [u8],
) -> bool {
    let cap = c.parser.limits().request_max_bytes() + 2;
    loop {
        let mut progressed = false;
        // Read while there is room. A read shorter than asked emptied the socket: the next
        // bytes bring a new event, so it is not read again (to see it would block).
        while !c.eof && c.unread && c.inbuf.len() < cap {
            let room = (cap - c.inbuf.len()).min(buf.len());
            match c.stream.read(&mut buf[..room]) {
                Ok(0) => c.eof = true,
                Ok(n) => {
                    counts.bytes_read.fetch_add(n as u64, Ordering::Relaxed);
                    c.inbuf.extend_from_slice(&buf[..n]);
                    progressed = true;
                    c.unread = n == room;
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    c.unread = false;
                    break;
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(_) => return false,
            }
        }
        // Run requests while not waiting on one and replies are not piling up.
        while !c.busy && !c.closing && c.out.len() - c.out_pos < OUTPUT_MAX_BYTES {
            if node.cfg.debug_commands && c.inbuf.starts_with(FLIP_COMMAND) {
                if let Some(nl) = c.inbuf.iter().position(|&b| b == b'\n') {
                    let req: Vec<u8> = c.inbuf.drain(..=nl).collect();
                    c.busy = true;
                    hand.client(token, Work::Flip(req));
                    progressed = true;
                    continue;
                }
            }
            match c.parser.parse(&c.inbuf) {
                Parse::Incomplete => break,
                Parse::Swallowed { consumed } => {
                    c.inbuf.drain(..consumed);
                }
                Parse::Error {
                    error,
                    consumed,
                    noreply,
                    unlink,
                } => {
                    let reply = if noreply { &[][..] } else { error.reply() };
                    match unlink {
                        // The reply waits for the removal, so that a request after it never
                        // sees the old value.
                        Some(key) => {
                            c.busy = true;
                            let reply = reply.to_vec();
                            hand.client(token, Work::Unlink { key, reply });
                        }
                        None => c.out.extend_from_slice(reply),
                    }
                    c.inbuf.drain(..consumed);
                    if error.closes_connection() {
                        c.closing = true;
                    }
                }
                Parse::Command { command, consumed } => {
                    // A key whose lock is held (a write of it in flight): the request stays
                    // unread until the lock is freed, the loop going on with other connections.
                    if !ops.links.is_empty() {
                        if let Some(index) = held_key_lock(node, &command) {
                            if node.key_locks.wait(index, ops.home.id) {
                                bump(&node.counters.key_lock_waits);
                                c.parked = Some(index);
                                c.busy = true;
                                break;
                            }
                        }
                    }
                    let next = match &command {
                        Command::Version => {
                            compose::version(&mut c.out, version());
                            Next::Done
                        }
                        Command::Verbosity { noreply, .. } => {
                            if !noreply {
                                compose::reply(&mut c.out, Reply::Ok);
                            }
                            Next::Done
                        }
                        Command::MetaNoop => {
                            compose::meta_noop(&mut c.out);
                            Next::Done
                        }
                        Command::Stats { group, .. } => {
                            let limits = c.parser.limits();
                            stats(node, counts, limits, *group, &mut c.out);
                            Next::Done
                        }
                        Command::Quit => {
                            c.closing = true;
                            Next::Done
                        }
                        // A forced-degraded read of a whole value at its home: its range
                        // rebuilt on the loop (the benchmarks' degraded reads).
                        Command::MetaGet(m)
                            if m.flags.ttl.is_none()
                                && !ops.links.is_empty()
                                && degrade_of(m.flags.opaque).is_some() =>
                        {
                            let position = degrade_of(m.flags.opaque).expect("checked");
                            let key = m.key_bytes();
                            match node.loop_read_start_degraded(&key, position) {
                                LoopRead::Fetch(read) => {
                                    let op = LoopOp::meta_read(read, &command);
                                    Next::LoopNow(op)
                                }
                                // Another node leads the key: the read goes to it, forced
                                // degraded there.
                                LoopRead::Forward(agent) => {
                                    let get = AgentOp::Get {
                                        key: key.to_vec(),
                                        touch: None,
                                        degrade: Some(position),
                                    };
                                    let op = LoopOp::forward(agent, &key, get, ReplyTo::Meta);
                                    Next::Loop(op, Once::default())
                                }
                                _ => Next::Worker(Once::default()),
                            }
                        }
                        // A meta get (no touch) at the key's agent: read as a `get` is, its
                        // reply composed from its flags.
                        Command::MetaGet(m) if m.flags.ttl.is_none() && !ops.links.is_empty() => {
                            let key = m.key_bytes();
                            let counters = &node.counters;
                            match node.loop_read_start(&key) {
                                LoopRead::Value(v) => {
                                    bump(&counters.cmd_get);
                                    bump(&counters.get_hits);
                                    bump(&counters.loop_reads);
                                    meta_hit(&mut c.out, m, v.flags, v.cas, v.exptime, &v.value);
                                    Next::Done
                                }
                                LoopRead::Miss => {
                                    bump(&counters.cmd_get);
                                    bump(&counters.get_misses);
                                    meta_miss(&mut c.out, m);
                                    Next::Done
                                }
                                LoopRead::Fetch(read) => {
                                    let op = LoopOp::meta_read(read, &command);
                                    Next::Loop(op, Once::default())
                                }
                                LoopRead::Forward(agent) => {
                                    let get = AgentOp::Get {
                                        key: key.to_vec(),
                                        touch: None,
                                        degrade: None,
                                    };
                                    let op = LoopOp::forward(agent, &key, get, ReplyTo::Meta);
                                    Next::Loop(op, Once::default())
                                }
                                LoopRead::Worker | LoopRead::Composed => {
                                    Next::Worker(Once::default())
                                }
                            }
                        }
                        // `gat`/`gats` of one key, and a meta get that touches (`T`), at the
                        // key's agent: the value read from this node's own store (a whole
                        // value at its home, a replica) and the touch sent, as `touch` is.
                        Command::Get(g)
                            if g.keys.len() == 1
                                && g.exptime.is_some()
                                && !ops.links.is_empty() =>
                        {
                            let (key, exptime) = (g.keys[0], g.exptime.expect("checked"));
                            let to = ReplyTo::Client {
                                with_cas: g.kind.with_cas(),
                                noreply: false,
                            };
                            gat_next(node, key, exptime, to, || {
                                let counters = &node.counters;
                                bump(&counters.cmd_get);
                                bump(&counters.get_misses);
                                bump(&counters.cmd_touch);
                                bump(&counters.touch_misses);
                                compose::reply(&mut c.out, Reply::End);
                            })
                        }
                        Command::MetaGet(m)
                            if m.flags.ttl.is_some()
                                && !ops.links.is_empty()
                                && degrade_of(m.flags.opaque).is_none() =>
                        {
                            let key = m.key_bytes();
                            let exptime = m.flags.ttl.expect("checked");
                            gat_next(node, &key, exptime, ReplyTo::Meta, || {
                                bump(&node.counters.cmd_get);
                                meta_get_reply(node, m, &AgentResult::Miss, &mut c.out);
                            })
                        }
                        Command::Get(g)
                            if g.keys.len() == 1
                                && g.exptime.is_none()
                                && !ops.links.is_empty() =>
                        {
                            let with_cas = g.kind.with_cas();
                            let to = ReplyTo::Client {
                                with_cas,
                                noreply: false,
                            };
                            let key = g.keys[0];
                            // Nothing waits to be written and no request after it is read:
                            // the reply goes to the socket now, from the store's bytes.
                            let read = if c.out.is_empty() && consumed == c.inbuf.len() {
                                let (read, sent) =
                                    node.loop_read_send(key, &mut c.out, with_cas, &mut c.stream);
                                counts
                                    .bytes_written
                                    .fetch_add(sent as u64, Ordering::Relaxed);
                                read
                            } else {
                                node.loop_read_into(key, &mut c.out, with_cas)
                            };
                            match read {
                                LoopRead::Worker => Next::Worker(Once::default()),
                                LoopRead::Composed => {
                                    bump(&node.counters.cmd_get);
                                    bump(&node.counters.get_hits);
                                    bump(&node.counters.loop_reads);
                                    Next::Done
                                }
                                LoopRead::Miss => {
                                    bump(&node.counters.cmd_get);
                                    bump(&node.counters.get_misses);
                                    compose::reply(&mut c.out, Reply::End);
                                    Next::Done
                                }
                                LoopRead::Value(v) => {
                                    bump(&node.counters.cmd_get);
                                    bump(&node.counters.get_hits);
                                    bump(&node.counters.loop_reads);
                                    let cas = with_cas.then_some(v.cas);
                                    compose::value(&mut c.out, &v.key, v.flags, &v.value, cas);
                                    compose::reply(&mut c.out, Reply::End);
                                    Next::Done
                                }
                                LoopRead::Fetch(read) => {
                                    let op = LoopOp::Read {
                                        read,
                                        to,
                                        meta: None,
                                    };
                                    Next::Loop(op, Once::default())
                                }
                                LoopRead::Forward(agent) => {
                                    let get = AgentOp::Get {
                                        key: key.to_vec(),
                                        touch: None,
                                        degrade: None,
                                    };
                                    let op = LoopOp::forward(agent, key, get, to);
                                    Next::Loop(op, Once::default())
                                }
                            }
                        }
                        Command::Arith {
                            op,
                            key,
                            delta,
                            noreply,
                        } if !ops.links.is_empty() => {
                            let incr = *op == proto::ArithOp::Incr;
                            let m = Modify::Arith {
                                incr,
                                delta: *delta,
                                meta: ArithMeta::default(),
                            };
                            let to = ReplyTo::Client {
                                with_cas: false,
                                noreply: *noreply,
                            };
                            let id = node.next_request_id();
                            let once = Once::first(id);
                            let forward = || {
                                Some(AgentOp::Arith {
                                    incr,
                                    key: key.to_vec(),
                                    delta: *delta,
                                    once,
                                    meta: ArithMeta::default(),
                                })
                            };
                            let start = node.loop_modify_start(key, m, id);
                            match arith_next(node, start, key, to, forward) {
                                ArithNext::Answer(r) => {
                                    arith_reply(node, incr, &r, *noreply, &mut c.out);
                                    Next::Done
                                }
                                ArithNext::Loop(op) => Next::Loop(op, once),
                                ArithNext::Worker => Next::Worker(once),
                            }
                        }
                        Command::Store(st) if !ops.links.is_empty() => {
                            let to = ReplyTo::Client {
                                with_cas: false,
                                noreply: st.noreply,
                            };
                            let id = node.next_request_id();
                            let once = Once::first(id);
                            let cond = store_if(st);
                            let cas_mode = st.mode == StoreMode::Cas;
                            let start = match st.mode {
                                // They change the present value (`Node::loop_modify_start`).
                                StoreMode::Append | StoreMode::Prepend => {
                                    let m = Modify::Concat {
                                        prepend: st.mode == StoreMode::Prepend,
                                        data: st.data,
                                    };
                                    concat_start(node.loop_modify_start(st.key, m, id))
                                }
                                _ => node.loop_write_start(
                                    st.key, cond, st.flags, st.exptime, st.data, id,
                                ),
                            };
                            match start {
                                LoopWriteStart::Worker => Next::Worker(once),
                                LoopWriteStart::Stored(cas) => {
                                    bump(&node.counters.loop_writes);
                                    let r = AgentResult::Stored { cas };
                                    store_reply(node, cas_mode, &r, st.noreply, &mut c.out);
                                    Next::Done
                                }
                                LoopWriteStart::Refused(d) => {
                                    bump(&node.counters.loop_writes_refused);
                                    let r = refusal(d);
                                    store_reply(node, cas_mode, &r, st.noreply, &mut c.out);
                                    Next::Done
                                }
                                LoopWriteStart::Send(write) => {
                                    let op = LoopOp::Write { write, to };
                                    Next::Loop(op, once)
                                }
                                LoopWriteStart::Fetch(m) => {
                                    let first = ReadFirst::Modify(m);
                                    Next::Loop(LoopOp::ReadThen { first, to }, once)
                                }
                                LoopWriteStart::Forward(agent) => {
                                    let set = store_op(st, once);
                                    let op = LoopOp::forward(agent, st.key, set, to);
                                    Next::Loop(op, once)
                                }
                            }
                        }
                        Command::Get(g)
                            if g.keys.len() > 1 && g.exptime.is_none() && !ops.links.is_empty() =>
                        {
                            match MultiGet::start(node, &g.keys, g.kind.with_cas()) {
                                None => Next::Worker(Once::default()),
                                Some(m) => {
                                    let op = LoopOp::MultiGet(Box::new(m));
                                    Next::Loop(op, Once::default())
                                }
                            }
                        }
                        Command::Touch {
                            key,
                            exptime,
                            noreply,
                        } if !ops.links.is_empty() => {
                            let to = ReplyTo::Client {
                                with_cas: false,
                                noreply: *noreply,
                            };
                            match node.loop_touch_start(key, *exptime) {
                                LoopNoticeStart::NotFound => {
                                    let r = AgentResult::NotFound;
                                    touch_reply(node, &r, *noreply, &mut c.out);
                                    Next::Done
                                }
                                LoopNoticeStart::Send(notice) => {
                                    let op = LoopOp::Notice {
                                        notice,
                                        to,
                                        value: None,
                                    };
                                    Next::Loop(op, Once::default())
                                }
                                LoopNoticeStart::Forward(agent) => {
                                    let touch = AgentOp::Touch {
                                        key: key.to_vec(),
                                        exptime: *exptime,
                                    };
                                    let op = LoopOp::forward(agent, key, touch, to);
                                    Next::Loop(op, Once::default())
                                }
                                LoopNoticeStart::Worker | LoopNoticeStart::Exists => {
                                    Next::Worker(Once::default())
                                }
                            }
                        }
                        // A meta set and a meta delete run as a set (an append or prepend as
                        // `append` and `prepend` do) or a delete does, their replies composed
                        // from their flags (an `I`nvalidate, and an append or prepend that
                        // compares a CAS value, go to a worker, as does everything else).
                        Command::MetaSet(ms) if !ops.links.is_empty() && meta_set_on_loop(ms) => {
                            let f = &ms.meta.flags;
                            let key = ms.meta.key_bytes();
                            let id = node.next_request_id();
                            let once = Once::first(id);
                            let mode = meta_store_mode(f.mode);
                            let cond = StoreIf {
                                mode,
                                compare_cas: f.compare_cas,
                            };
                            let (flags, exptime) =
                                (f.client_flags.unwrap_or(0), f.ttl.unwrap_or(0));
                            let start = if concat_mode(mode) {
                                // As `append` and `prepend` (`Node::loop_modify_start`).
                                let m = Modify::Concat {
                                    prepend: mode == StoreMode::Prepend,
                                    data: ms.data,
                                };
                                concat_start(node.loop_modify_start(&key, m, id))
                            } else {
                                node.loop_write_start(&key, cond, flags, exptime, ms.data, id)
                            };
                            match start {
                                LoopWriteStart::Worker => Next::Worker(once),
                                LoopWriteStart::Stored(cas) => {
                                    bump(&node.counters.loop_writes);
                                    let r = AgentResult::Stored { cas };
                                    meta_set_reply(node, ms, &r, &mut c.out);
                                    Next::Done
                                }
                                LoopWriteStart::Refused(d) => {
                                    bump(&node.counters.loop_writes_refused);
                                    meta_set_reply(node, ms, &refusal(d), &mut c.out);
                                    Next::Done
                                }
                                LoopWriteStart::Send(write) => {
                                    let op = LoopOp::Write {
                                        write,
                                        to: ReplyTo::Meta,
                                    };
                                    Next::Loop(op, once)
                                }
                                LoopWriteStart::Fetch(m) => {
                                    let op = LoopOp::ReadThen {
                                        first: ReadFirst::Modify(m),
                                        to: ReplyTo::Meta,
                                    };
                                    Next::Loop(op, once)
                                }
                                LoopWriteStart::Forward(agent) => {
                                    let set = meta_store_op(ms, key.to_vec(), once);
                                    let op = LoopOp::forward(agent, &key, set, ReplyTo::Meta);
                                    Next::Loop(op, once)
                                }
                            }
                        }
                        // A meta arithmetic runs as `incr` and `decr` do (its `N`, `C` and `T`
                        // too), its reply composed from its flags.
                        Command::MetaArith(m) if !ops.links.is_empty() => {
                            let key = m.key_bytes();
                            let id = node.next_request_id();
                            let once = Once::first(id);
                            let (incr, delta, meta) = meta_arith_parts(m);
                            let modify = Modify::Arith { incr, delta, meta };
                            let start = node.loop_modify_start(&key, modify, id);
                            let forward = || Some(meta_arith_op(m, key.to_vec(), once));
                            match arith_next(node, start, &key, ReplyTo::Meta, forward) {
                                ArithNext::Answer(r) => {
                                    meta_arith_reply(node, m, &r, &mut c.out);
                                    Next::Done
                                }
                                ArithNext::Loop(op) => Next::Loop(op, once),
                                ArithNext::Worker => Next::Worker(once),
                            }
                        }
                        Command::MetaDelete(m) if !ops.links.is_empty() && !m.flags.invalidate => {
                            let key = m.key_bytes();
                            let compare_cas = m.flags.compare_cas;
                            let refused = |r: AgentResult, out: &mut Vec<u8>| {
                                meta_delete_reply(node, m, &r, out);
                                Next::Done
                            };
                            match node.loop_delete_start(&key, compare_cas) {
                                LoopNoticeStart::Worker => Next::Worker(Once::default()),
                                LoopNoticeStart::NotFound => {
                                    refused(AgentResult::NotFound, &mut c.out)
                                }
                                LoopNoticeStart::Exists => refused(AgentResult::Exists, &mut c.out),
                                LoopNoticeStart::Send(notice) => {
                                    let op = LoopOp::Notice {
                                        notice,
                                        to: ReplyTo::Meta,
                                        value: None,
                                    };
                                    Next::Loop(op, Once::default())
                                }
                                LoopNoticeStart::Forward(agent) => {
                                    let delete = AgentOp::Delete {
                                        key: key.to_vec(),
                                        compare_cas,
                                    };
                                    let op = LoopOp::forward(agent, &key, delete, ReplyTo::Meta);
                                    Next::Loop(op, Once::default())
                                }
                            }
                        }
                        Command::Delete { key, noreply } if !ops.links.is_empty() => {
                            let to = ReplyTo::Client {
                                with_cas: false,
                                noreply: *noreply,
                            };
                            let refused = |r: AgentResult, out: &mut Vec<u8>| {
                                delete_reply(node, &r, *noreply, out);
                                Next::Done
                            };
                            match node.loop_delete_start(key, None) {
                                LoopNoticeStart::Worker => Next::Worker(Once::default()),
                                LoopNoticeStart::NotFound => {
                                    refused(AgentResult::NotFound, &mut c.out)
                                }
                                LoopNoticeStart::Exists => refused(AgentResult::Exists, &mut c.out),
                                LoopNoticeStart::Send(notice) => {
                                    let op = LoopOp::Notice {
                                        notice,
                                        to,
                                        value: None,
                                    };
                                    Next::Loop(op, Once::default())
                                }
                                LoopNoticeStart::Forward(agent) => {
                                    let delete = AgentOp::Delete {
                                        key: key.to_vec(),
                                        compare_cas: None,
                                    };
                                    let op = LoopOp::forward(agent, key, delete, to);
                                    Next::Loop(op, Once::default())
                                }
                            }
                        }
                        _ => Next::Worker(Once::default()),
                    };
                    // Anything else goes to a worker, parsed (not to be parsed again).
                    match next {
                        Next::Done => {}
                        Next::Worker(once) => {
                            let request = command.to_owned_command();
                            c.busy = true;
                            hand.client(token, Work::Command(request, once));
                        }
                        Next::Loop(op, once) => {
                            let request = command.to_owned_command();
                            start_client_op(c, token, node, hand, ops, registry, op, request, once);
                        }
                        Next::LoopNow(op) => {
                            let request = command.to_owned_command();
                            let once = Once::default();
                            start_client_op(c, token, node, hand, ops, registry, op, request, once);
                            ops.flush_now(registry);
                        }
                    }
                    c.inbuf.drain(..consumed);
                }
            }
            progressed = true;
        }
        // Write.
        while c.out_pos < c.out.len() {
            match c.stream.write(&c.out[c.out_pos..]) {
                Ok(0) => return false,
                Ok(n) => {
                    counts.bytes_written.fetch_add(n as u64, Ordering::Relaxed);
                    c.out_pos += n;
                    progressed = true;
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(_) => return false,
            }
        }
        if c.out_pos == c.out.len() {
            c.out.clear();
            c.out_pos = 0;
            crate::carrier::shrink_idle(&mut c.out);
            crate::carrier::shrink_idle(&mut c.inbuf);
        } else if c.out_pos > (1 << 20) {
            c.out.drain(..c.out_pos);
            c.out_pos = 0;
        }
        let drained = c.out.is_empty();
        if c.closing && drained && !c.busy {
            return false;
        }
        if c.eof && !c.busy && drained && matches!(c.parser.parse(&c.inbuf), Parse::Incomplete) {
            return false;
        }
        if !progressed {
            return true;
        }
    }
}

/// The key of a forwarded agent operation that takes a key lock.
fn agent_op_key(op: &AgentOp) -> Option<&[u8]> {
    match op {
        AgentOp::Get { key, .. }
        | AgentOp::Store { key, .. }
        | AgentOp::Delete { key, .. }
        | AgentOp::Touch { key, .. }
        | AgentOp::Arith { key, .. } => Some(key),
        _ => None,
    }
}

/// A lock held of the keys `command` names (for a command with keys), by the key lock index.
fn held_key_lock(node: &Node, command: &Command<'_>) -> Option<usize> {
    let held = |key: &[u8]| {
        let index = crate::node::key_lock_index(key);
        node.key_locks.is_locked(index).then_some(index)
    };
    match command {
        Command::Get(g) => g.keys.iter().find_map(|k| held(k)),
        Command::Store(st) => held(st.key),
        Command::Arith { key, .. } | Command::Touch { key, .. } | Command::Delete { key, .. } => {
            held(key)
        }
        Command::MetaGet(m) | Command::MetaDelete(m) | Command::MetaArith(m) => {
            held(&m.key_bytes())
        }
        Command::MetaSet(ms) => held(&ms.meta.key_bytes()),
        _ => None,
    }
}

/// The `version` reply: memcached's version line with inec's own.
pub fn version() -> &'static str {
    concat!("1.6.0-inec-", env!("CARGO_PKG_VERSION"))
}

fn server_error(out: &mut Vec<u8>, reason: &str) {
    // A reply line must not contain line breaks.
    let clean: String = reason
        .chars()
        .map(|c| if c == '\r' || c == '\n' { ' ' } else { c })
        .collect();
    compose::server_error(out, &clean);
}

/// A get that touches (`gat`, `gats`, a meta get with `T`) of one key at this loop: its touch
/// and value (`Node::loop_gat_start`), its forward to the key's agent, or a worker; `miss`
/// answers a key with no value.
fn gat_next(node: &Node, key: &[u8], exptime: i64, to: ReplyTo, miss: impl FnOnce()) -> Next {
    match node.loop_gat_start(key, exptime) {
        LoopGatStart::Miss => {
            miss();
            Next::Done
        }
        LoopGatStart::Send(notice, value) => {
            let value = Some(value);
            Next::Loop(LoopOp::Notice { notice, to, value }, Once::default())
        }
        LoopGatStart::Fetch(g) => {
            let first = ReadFirst::Gat(g);
            Next::Loop(LoopOp::ReadThen { first, to }, Once::default())
        }
        LoopGatStart::Forward(agent) => {
            let gat = AgentOp::Get {
                key: key.to_vec(),
                touch: Some(exptime),
                degrade: None,
            };
            Next::Loop(LoopOp::forward(agent, key, gat, to), Once::default())
        }
        LoopGatStart::Worker => Next::Worker(Once::default()),
    }
}

/// Whether the loop runs a meta set: not an `I`nvalidate, nor an append or prepend that
/// compares a CAS value.
fn meta_set_on_loop(ms: &proto::MetaSet<'_>) -> bool {
    let f = &ms.meta.flags;
    let concat_with_cas = concat_mode(meta_store_mode(f.mode)) && f.compare_cas.is_some();
    !f.invalidate && !concat_with_cas
}

/// Whether a storage mode changes the present value (`append`, `prepend`).
fn concat_mode(mode: StoreMode) -> bool {
    matches!(mode, StoreMode::Append | StoreMode::Prepend)
}

/// What a loop does next with an arithmetic (`incr`, `decr`, `ma`) as it started.
enum ArithNext {
    /// Answered at once: stored on this node alone, or nothing to store.
    Answer(AgentResult),
    /// Its records are out, or it goes to the key's agent.
    Loop(LoopOp),
    /// A worker runs it.
    Worker,
}

/// The next step of an arithmetic from its start on the loop (`to`: whom its loop op answers);
/// `forward` makes the operation for the key's agent when another node leads the key (`None`:
/// a worker runs it).
fn arith_next(
    node: &Node,
    start: LoopModifyStart,
    key: &[u8],
    to: ReplyTo,
    forward: impl FnOnce() -> Option<AgentOp>,
) -> ArithNext {
    match start {
        LoopModifyStart::Worker => ArithNext::Worker,
        LoopModifyStart::Missing => ArithNext::Answer(AgentResult::NotFound),
        LoopModifyStart::Exists => ArithNext::Answer(AgentResult::Exists),
        LoopModifyStart::NonNumeric => ArithNext::Answer(AgentResult::NonNumeric),
        LoopModifyStart::Stored {
            cas,
            number,
            exptime,
        } => {
            bump(&node.counters.loop_writes);
            let number = number.map_or(0, |(_, n)| n);
            ArithNext::Answer(AgentResult::Number {
                number,
                cas,
                exptime,
            })
        }
        LoopModifyStart::Send(write) => ArithNext::Loop(LoopOp::Write { write, to }),
        LoopModifyStart::Fetch(m) => {
            let first = ReadFirst::Modify(m);
            ArithNext::Loop(LoopOp::ReadThen { first, to })
        }
        LoopModifyStart::Forward(agent) => match forward() {
            Some(op) => ArithNext::Loop(LoopOp::forward(agent, key, op, to)),
            None => ArithNext::Worker,
        },
    }
}

/// An `append`'s or `prepend`'s start on the loop as a storage command's: a missing value is
/// `NOT_STORED`, as memcached's.
fn concat_start(start: LoopModifyStart) -> LoopWriteStart {
    match start {
        LoopModifyStart::Worker | LoopModifyStart::NonNumeric | LoopModifyStart::Exists => {
            LoopWriteStart::Worker
        }
        LoopModifyStart::Missing => LoopWriteStart::Refused(Decision::NotStored),
        LoopModifyStart::Stored { cas, .. } => LoopWriteStart::Stored(cas),
        LoopModifyStart::Send(write) => LoopWriteStart::Send(write),
        LoopModifyStart::Fetch(m) => LoopWriteStart::Fetch(m),
        LoopModifyStart::Forward(agent) => LoopWriteStart::Forward(agent),
    }
}

/// The reply to a write stored as `cas` (`number`: an `incr` (true) or `decr` and the number
/// it stored; `mode`: the storage command's).
fn write_reply(
    node: &Node,
    to: ReplyTo,
    retry: &Retry,
    mode: StoreMode,
    number: Option<(bool, u64)>,
    cas: u64,
    exptime: i64,
) -> Vec<u8> {
    let mut out = Vec::new();
    let (r, incr) = match number {
        Some((incr, number)) => {
            let r = AgentResult::Number {
                number,
                cas,
                exptime,
            };
            (r, Some(incr))
        }
        None => (AgentResult::Stored { cas }, None),
    };
    match (to, incr) {
        (ReplyTo::Client { noreply, .. }, Some(incr)) => {
            arith_reply(node, incr, &r, noreply, &mut out);
        }
        (ReplyTo::Client { noreply, .. }, None) => {
            store_reply(node, mode == StoreMode::Cas, &r, noreply, &mut out);
        }
        (ReplyTo::Meta, _) => meta_result(node, retry, &r, &mut out),
        (ReplyTo::Peer, _) => {
            out = crate::member::conn::frame_reply(node, &peer::Response::Agent(r));
        }
    }
    out
}

/// The reply to a write found in doubt on the loop ([`IN_DOUBT`]), for its client or, framed,
/// for the node that forwarded it.
fn in_doubt_reply(node: &Node, to: ReplyTo) -> Vec<u8> {
    let mut out = Vec::new();
    match to {
        ReplyTo::Client { noreply: true, .. } => {}
        ReplyTo::Client { .. } | ReplyTo::Meta => compose::server_error(&mut out, IN_DOUBT),
        ReplyTo::Peer => {
            let res = peer::Response::Agent(AgentResult::Error(IN_DOUBT.into()));
            out = crate::member::conn::frame_reply(node, &res);
        }
    }
    out
}

/// A client's storage command as the agent's operation (run there, or forwarded to it).
fn store_op(st: &proto::Store<'_>, once: Once) -> AgentOp {
    AgentOp::Store {
        mode: st.mode,
        key: st.key.to_vec(),
        flags: st.flags,
        exptime: st.exptime,
        compare_cas: store_if(st).compare_cas,
        value: st.data.to_vec(),
        once,
    }
}

/// A storage command's mode and, for `cas`, the client's CAS value.
fn store_if(s: &proto::Store<'_>) -> StoreIf {
    StoreIf {
        mode: s.mode,
        compare_cas: (s.mode == StoreMode::Cas).then_some(s.cas_unique),
    }
}

/// A delete's answer at the node its client reached (`delete_hits`, `delete_misses`).
fn delete_reply(node: &Node, r: &AgentResult, noreply: bool, out: &mut Vec<u8>) {
    let c = &node.counters;
    let found = matches!(r, AgentResult::Deleted);
    hit_or_miss_reply(r, found, (&c.delete_hits, &c.delete_misses), noreply, out);
}

/// An `incr`'s (`incr`) or `decr`'s answer at the node its client reached (`incr_hits`,
/// `incr_misses`, `decr_…`).
fn arith_reply(node: &Node, incr: bool, r: &AgentResult, noreply: bool, out: &mut Vec<u8>) {
    let c = &node.counters;
    let counters = if incr {
        (&c.incr_hits, &c.incr_misses)
    } else {
        (&c.decr_hits, &c.decr_misses)
    };
    let found = matches!(r, AgentResult::Number { .. });
    hit_or_miss_reply(r, found, counters, noreply, out);
}

/// A touch's answer at the node its client reached (`cmd_touch`, `touch_hits`,
/// `touch_misses`).
fn touch_reply(node: &Node, r: &AgentResult, noreply: bool, out: &mut Vec<u8>) {
    let c = &node.counters;
    bump(&c.cmd_touch);
    let found = matches!(r, AgentResult::Touched);
    hit_or_miss_reply(r, found, (&c.touch_hits, &c.touch_misses), noreply, out);
}

/// The agent's answer to a condition that refused a write.
fn refusal(d: Decision) -> AgentResult {
    match d {
        Decision::NotStored => AgentResult::NotStored,
        Decision::Exists => AgentResult::Exists,
        Decision::NotFound => AgentResult::NotFound,
        Decision::Proceed => unreachable!("a write that proceeds is not refused"),
    }
}

/// A storage command's answer at the node its client reached: counted (`cmd_set`; a `cas`'s
/// hits, bad values and misses, as memcached counts them) and, unless `noreply`, its reply
/// line appended to `out`.
fn store_reply(node: &Node, cas: bool, r: &AgentResult, noreply: bool, out: &mut Vec<u8>) {
    let c = &node.counters;
    bump(&c.cmd_set);
    if cas {
        match r {
            AgentResult::Stored { .. } => bump(&c.cas_hits),
            AgentResult::Exists => bump(&c.cas_badval),
            AgentResult::NotFound => bump(&c.cas_misses),
            _ => {}
        }
    }
    if !noreply {
        answer_line(out, r);
    }
}

/// The reply line of the agent's answer to a client's write, delete, touch, incr or decr.
fn answer_line(out: &mut Vec<u8>, r: &AgentResult) {
    let reply = match r {
        AgentResult::Stored { .. } => Reply::Stored,
        AgentResult::NotStored => Reply::NotStored,
        AgentResult::Exists => Reply::Exists,
        AgentResult::NotFound => Reply::NotFound,
        AgentResult::Deleted => Reply::Deleted,
        AgentResult::Touched => Reply::Touched,
        AgentResult::Number { number, .. } => return compose::number(out, *number),
        AgentResult::NonNumeric => return out.extend_from_slice(proto::NonNumeric.reply()),
        AgentResult::Error(r) => return server_error(out, r),
        other => return server_error(out, &format!("unexpected {other:?}")),
    };
    compose::reply(out, reply);
}

/// Counts the answer `r` as a hit (`found`: its success) or a miss (`NOT_FOUND`), then appends
/// its reply line unless `noreply`: a delete's, touch's, incr's or decr's at the node its
/// client reached.
fn hit_or_miss_reply(
    r: &AgentResult,
    found: bool,
    (hits, misses): (&AtomicU64, &AtomicU64),
    noreply: bool,
    out: &mut Vec<u8>,
) {
    if found {
        bump(hits);
    } else if matches!(r, AgentResult::NotFound) {
        bump(misses);
    }
    if !noreply {
        answer_line(out, r);
    }
}

/// A meta get's reply to a hit: `VA` with the data (flag `v`) or `HD`, with what its flags ask
/// for (the size, client flags, remaining ttl, CAS value, key, opaque).
fn meta_hit(out: &mut Vec<u8>, m: &Meta<'_>, flags: u32, cas: u64, exptime: i64, value: &[u8]) {
    let ret = MetaReturn {
        size: Some(value.len() as u64),
        client_flags: Some(flags),
        ttl: Some(time::ttl(exptime, time::now_secs())),
        cas: Some(cas),
    };
    let status = if m.flags.return_value {
        MetaStatus::Va
    } else {
        MetaStatus::Hd
    };
    compose::meta(out, status, m, &ret, value);
}

/// A meta get's reply to a miss: `EN`, unless the get is quiet (flag `q`).
fn meta_miss(out: &mut Vec<u8>, m: &Meta<'_>) {
    if !MetaStatus::En.is_quiet_for(proto::MetaKind::Get) || !m.flags.quiet {
        compose::meta(out, MetaStatus::En, m, &MetaReturn::default(), &[]);
    }
}

/// A meta set as the agent's operation (run there, or forwarded to it).
fn meta_store_op(ms: &proto::MetaSet<'_>, key: Vec<u8>, once: Once) -> AgentOp {
    let f = &ms.meta.flags;
    AgentOp::Store {
        mode: meta_store_mode(f.mode),
        key,
        flags: f.client_flags.unwrap_or(0),
        exptime: f.ttl.unwrap_or(0),
        compare_cas: f.compare_cas,
        value: ms.data.to_vec(),
        once,
    }
}

/// A meta set's reply to its result (`cmd_set`), from a worker or a loop.
fn meta_set_reply(node: &Node, ms: &proto::MetaSet<'_>, r: &AgentResult, out: &mut Vec<u8>) {
    bump(&node.counters.cmd_set);
    let (status, cas) = match r {
        AgentResult::Stored { cas } => (MetaStatus::Hd, Some(*cas)),
        AgentResult::NotStored => (MetaStatus::Ns, None),
        AgentResult::Exists => (MetaStatus::Ex, None),
        AgentResult::NotFound => (MetaStatus::Nf, None),
        AgentResult::Error(e) => return server_error(out, e),
        other => return server_error(out, &format!("unexpected {other:?}")),
    };
    if !(ms.meta.flags.quiet && status.is_quiet_for(proto::MetaKind::Set)) {
        let ret = MetaReturn {
            cas,
            ..MetaReturn::default()
        };
        compose::meta(out, status, &ms.meta, &ret, &[]);
    }
}

/// A meta delete's reply to its result (`delete_hits`, `delete_misses`), from a worker or a
/// loop.
fn meta_delete_reply(node: &Node, m: &Meta<'_>, r: &AgentResult, out: &mut Vec<u8>) {
    let c = &node.counters;
    let status = match r {
        AgentResult::Deleted => {
            bump(&c.delete_hits);
            MetaStatus::Hd
        }
        AgentResult::NotFound => {
            bump(&c.delete_misses);
            MetaStatus::Nf
        }
        AgentResult::Exists => MetaStatus::Ex,
        AgentResult::Error(e) => return server_error(out, e),
        other => return server_error(out, &format!("unexpected {other:?}")),
    };
    if !(m.flags.quiet && status.is_quiet_for(proto::MetaKind::Delete)) {
        compose::meta(out, status, m, &MetaReturn::default(), &[]);
    }
}

/// A meta command's reply to the result of its loop op, composed from the command's flags
/// (the request the op keeps for a worker) as a worker composes it.
fn meta_result(node: &Node, retry: &Retry, r: &AgentResult, out: &mut Vec<u8>) {
    let Retry::Client(command, _) = retry else {
        unreachable!("a meta command is a client's");
    };
    match command.as_command() {
        Command::MetaSet(ms) => meta_set_reply(node, &ms, r, out),
        Command::MetaDelete(m) => meta_delete_reply(node, &m, r, out),
        Command::MetaArith(m) => meta_arith_reply(node, &m, r, out),
        // A meta get that touches (`T`), on the loop or forwarded.
        Command::MetaGet(m) => {
            bump(&node.counters.cmd_get);
            meta_get_reply(node, &m, r, out);
        }
        _ => unreachable!("only meta sets, deletes, arithmetic and gets reply as meta commands"),
    }
}

/// The reply to a meta get from the agent's answer (hits and misses counted; `cmd_get` is the
/// caller's).
fn meta_get_reply(node: &Node, m: &Meta<'_>, r: &AgentResult, out: &mut Vec<u8>) {
    match r {
        AgentResult::Value {
            flags,
            cas,
            exptime,
            value,
        } => {
            bump(&node.counters.get_hits);
            meta_hit(out, m, *flags, *cas, *exptime, value);
        }
        AgentResult::Miss => {
            bump(&node.counters.get_misses);
            meta_miss(out, m);
        }
        AgentResult::Error(e) => server_error(out, e),
        other => server_error(out, &format!("unexpected {other:?}")),
    }
}

/// A meta arithmetic's increment (true) or decrement, delta and what `ma` adds to them.
fn meta_arith_parts(m: &Meta<'_>) -> (bool, u64, ArithMeta) {
    let f = &m.flags;
    let meta = ArithMeta {
        compare_cas: f.compare_cas,
        vivify: f.vivify.map(|exptime| (exptime, f.initial.unwrap_or(0))),
        ttl: f.ttl,
    };
    let incr = f.arith != Some(proto::ArithOp::Decr);
    (incr, f.delta.unwrap_or(1), meta)
}

/// A meta arithmetic as the agent's operation (run there, or forwarded to it).
fn meta_arith_op(m: &Meta<'_>, key: Vec<u8>, once: Once) -> AgentOp {
    let (incr, delta, meta) = meta_arith_parts(m);
    AgentOp::Arith {
        incr,
        key,
        delta,
        once,
        meta,
    }
}

/// A meta arithmetic's reply to the agent's answer (counted as `incr`/`decr`): `HD`, or `VA`
/// with the number (flag `v`), with the TTL and CAS value if asked (hidden by `q`); `NF`,
/// `EX`, or the error line.
fn meta_arith_reply(node: &Node, m: &Meta<'_>, r: &AgentResult, out: &mut Vec<u8>) {
    let c = &node.counters;
    let (hits, misses) = if m.flags.arith == Some(proto::ArithOp::Decr) {
        (&c.decr_hits, &c.decr_misses)
    } else {
        (&c.incr_hits, &c.incr_misses)
    };
    let kind = proto::MetaKind::Arith;
    let (status, ret, number) = match r {
        AgentResult::Number {
            number,
            cas,
            exptime,
        } => {
            bump(hits);
            let status = if m.flags.return_value {
                MetaStatus::Va
            } else {
                MetaStatus::Hd
            };
            let ret = MetaReturn {
                ttl: Some(time::ttl(*exptime, time::now_secs())),
                cas: Some(*cas),
                ..MetaReturn::default()
            };
            (status, ret, number.to_string())
        }
        AgentResult::NotFound => {
            bump(misses);
            (MetaStatus::Nf, MetaReturn::default(), String::new())
        }
        AgentResult::Exists => (MetaStatus::Ex, MetaReturn::default(), String::new()),
        AgentResult::NonNumeric => return out.extend_from_slice(proto::NonNumeric.reply()),
        AgentResult::Error(e) => return server_error(out, e),
        other => return server_error(out, &format!("unexpected {other:?}")),
    };
    if !(m.flags.quiet && status.is_quiet_for(kind)) {
        compose::meta(out, status, m, &ret, number.as_bytes());
    }
}

fn meta_store_mode(m: Option<proto::MetaMode>) -> StoreMode {
    match m {
        None | Some(proto::MetaMode::Set) => StoreMode::Set,
        Some(proto::MetaMode::Add) => StoreMode::Add,
        Some(proto::MetaMode::Append) => StoreMode::Append,
        Some(proto::MetaMode::Prepend) => StoreMode::Prepend,
        Some(proto::MetaMode::Replace) => StoreMode::Replace,
    }
}

fn degrade_of(opaque: Option<&[u8]>) -> Option<u8> {
    let rest = opaque?.strip_prefix(DEGRADE_OPAQUE_PREFIX)?;
    std::str::from_utf8(rest).ok()?.parse().ok()
}

/// Removes `key`'s value after a write of it was refused as too large, then appends `reply`
/// (empty for `noreply`); a removal that fails is reported in its place.
fn unlink(node: &Node, key: &[u8], reply: Vec<u8>, out: &mut Vec<u8>) {
    let op = AgentOp::Delete {
        key: key.to_vec(),
        compare_cas: None,
    };
    match node.route_key(op, key) {
        AgentResult::Deleted | AgentResult::NotFound => out.extend_from_slice(&reply),
        AgentResult::Error(r) if !reply.is_empty() => server_error(
            out,
            &format!("object too large for cache, and its old value could not be removed: {r}"),
        ),
        AgentResult::Error(_) => {}
        other if !reply.is_empty() => server_error(out, &format!("unexpected {other:?}")),
        _ => {}
    }
}

/// Runs the test-only `inec_flip <key> <position> <bit>` line.
fn flip(node: &Node, request: &[u8], out: &mut Vec<u8>) {
    let line = String::from_utf8_lossy(request);
    let t: Vec<&str> = line.split_whitespace().collect();
    let parsed = (t.len() == 4)
        .then(|| {
            Some((
                t[1].as_bytes().to_vec(),
                t[2].parse::<u8>().ok()?,
                t[3].parse::<u64>().ok()?,
            ))
        })
        .flatten();
    match parsed {
        None => compose::client_error(out, "usage: inec_flip <key> <position> <bit>"),
        Some((key, position, bit)) => match node.route_key(
            AgentOp::Flip {
                key: key.clone(),
                position,
                bit,
            },
            &key,
        ) {
            AgentResult::Ok => compose::reply(out, Reply::Ok),
            AgentResult::NotFound => compose::reply(out, Reply::NotFound),
            AgentResult::Error(r) => server_error(out, &r),
            other => server_error(out, &format!("unexpected {other:?}")),
        },
    }
}

/// `stats` (`group`: none, `inec`, `settings` or `reset`): this node's own counters, read
/// without waiting on another node.
fn stats(
    node: &Node,
    counts: &ConnCounts,
    limits: &Limits,
    group: Option<&[u8]>,
    out: &mut Vec<u8>,
) {
    match group {
        None => general_stats(node, counts, out),
        Some(b"inec") => inec_stats(node, out),
        Some(b"settings") => {
            compose::stat(out, "maxbytes", node.cfg.memory_bytes);
            compose::stat(out, "item_size_max", limits.item_size_max_bytes);
            compose::stat(out, "tcpport", 0);
            compose::stat(out, "udpport", 0);
            compose::reply(out, Reply::End);
        }
        Some(b"reset") => compose::reply(out, Reply::Reset),
        Some(_) => compose::reply(out, Reply::Error),
    }
}

/// Runs one request and appends its reply; true when the connection must close.
fn execute(
    node: &Node,
    counts: &ConnCounts,
    limits: &Limits,
    command: Command<'_>,
    once: Once,
    out: &mut Vec<u8>,
) -> bool {
    let c = &node.counters;
    // A write's request id: the loop's, if it tried the write first, or a new one.
    let once = if once.id == 0 {
        Once::first(node.next_request_id())
    } else {
        once
    };
    let inc = |a: &AtomicU64| {
        a.fetch_add(1, Ordering::Relaxed);
    };
    match command {
        Command::Store(s) => {
            let op = store_op(&s, once);
            let r = node.route_key(op, s.key);
            store_reply(node, s.mode == StoreMode::Cas, &r, s.noreply, out);
        }
        Command::Get(g) => {
            let start = out.len();
            for key in &g.keys {
                inc(&c.cmd_get);
                if g.exptime.is_some() {
                    inc(&c.cmd_touch);
                }
                let op = AgentOp::Get {
                    key: key.to_vec(),
                    touch: g.exptime,
                    degrade: None,
                };
                match node.route_key(op, key) {
                    AgentResult::Value {
                        flags, cas, value, ..
                    } => {
                        inc(&c.get_hits);
                        if g.exptime.is_some() {
                            inc(&c.touch_hits);
                        }
                        compose::value(out, key, flags, &value, g.kind.with_cas().then_some(cas));
                        if out.len() - start > GET_REPLY_MAX_BYTES {
                            out.truncate(start);
                            server_error(out, "out of memory writing get response");
                            return false;
                        }
                    }
                    AgentResult::Miss => {
                        inc(&c.get_misses);
                        if g.exptime.is_some() {
                            inc(&c.touch_misses);
                        }
                    }
                    AgentResult::Error(r) => {
                        out.truncate(start);
                        server_error(out, &r);
                        return false;
                    }
                    other => {
                        out.truncate(start);
                        server_error(out, &format!("unexpected {other:?}"));
                        return false;
                    }
                }
            }
            compose::reply(out, Reply::End);
        }
        Command::Touch {
            key,
            exptime,
            noreply,
        } => {
            let mut reply = Vec::new();
            let touch = AgentOp::Touch {
                key: key.to_vec(),
                exptime,
            };
            touch_reply(node, &node.route_key(touch, key), false, &mut reply);
            if !noreply {
                out.extend_from_slice(&reply);
            }
        }
        Command::Delete { key, noreply } => {
            let op = AgentOp::Delete {
                key: key.to_vec(),
                compare_cas: None,
            };
            let r = node.route_key(op, key);
            delete_reply(node, &r, noreply, out);
        }
        Command::Arith {
            op,
            key,
            delta,
            noreply,
        } => {
            let incr = op == proto::ArithOp::Incr;
            let arith = AgentOp::Arith {
                incr,
                key: key.to_vec(),
                delta,
                once,
                meta: ArithMeta::default(),
            };
            let r = node.route_key(arith, key);
            arith_reply(node, incr, &r, noreply, out);
        }
        Command::FlushAll { delay, noreply } => {
            node.flush_all(delay.unwrap_or(0));
            if !noreply {
                compose::reply(out, Reply::Ok);
            }
        }
        Command::Stats { group, .. } => stats(node, counts, limits, group, out),
        Command::MetaGet(m) => {
            let key = m.key_bytes().into_owned();
            inc(&c.cmd_get);
            let degrade = degrade_of(m.flags.opaque);
            let op = AgentOp::Get {
                key: key.clone(),
                touch: m.flags.ttl,
                degrade,
            };
            meta_get_reply(node, &m, &node.route_key(op, &key), out);
        }
        Command::MetaSet(ms) => {
            let key = ms.meta.key_bytes().into_owned();
            let r = node.route_key(meta_store_op(&ms, key.clone(), once), &key);
            meta_set_reply(node, &ms, &r, out);
        }
        Command::MetaArith(m) => {
            let key = m.key_bytes().into_owned();
            let r = node.route_key(meta_arith_op(&m, key.clone(), once), &key);
            meta_arith_reply(node, &m, &r, out);
        }
        Command::MetaDelete(m) => {
            let key = m.key_bytes().into_owned();
            let delete = AgentOp::Delete {
                key: key.clone(),
                compare_cas: m.flags.compare_cas,
            };
            let r = node.route_key(delete, &key);
            meta_delete_reply(node, &m, &r, out);
        }
        Command::Version => compose::version(out, version()),
        Command::Verbosity { noreply, .. } => {
            if !noreply {
                compose::reply(out, Reply::Ok)
            }
        }
        Command::MetaNoop => compose::meta_noop(out),
        Command::Quit => return true,
    }
    false
}

fn cpu_seconds() -> (f64, f64) {
    // utime and stime are fields 14 and 15 of /proc/self/stat, in clock ticks (100 Hz).
    let Ok(stat) = std::fs::read_to_string("/proc/self/stat") else {
        return (0.0, 0.0);
    };
    let after = stat.rsplit(')').next().unwrap_or("");
    let f: Vec<&str> = after.split_whitespace().collect();
    let tick = |i: usize| f.get(i).and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0) / 100.0;
    (tick(11), tick(12))
}

fn general_stats(node: &Node, counts: &ConnCounts, out: &mut Vec<u8>) {
    let c = &node.counters;
    let g = |a: &AtomicU64| a.load(Ordering::Relaxed);
    let (items, bytes, evictions, _) = node.agent_totals();
    let (user, sys) = cpu_seconds();
    compose::stat(out, "pid", std::process::id());
    compose::stat(out, "uptime", node.started.elapsed().as_secs());
    compose::stat(out, "time", time::now_secs());
    compose::stat(out, "version", version());
    compose::stat(out, "pointer_size", usize::BITS);
    compose::stat(out, "rusage_user", format!("{user:.6}"));
    compose::stat(out, "rusage_system", format!("{sys:.6}"));
    compose::stat(out, "curr_connections", g(&counts.curr));
    compose::stat(out, "total_connections", g(&counts.total));
    compose::stat(out, "cmd_get", g(&c.cmd_get));
    compose::stat(out, "cmd_set", g(&c.cmd_set));
    compose::stat(out, "cmd_flush", g(&c.cmd_flush));
    compose::stat(out, "cmd_touch", g(&c.cmd_touch));
    compose::stat(out, "get_hits", g(&c.get_hits));
    compose::stat(out, "get_misses", g(&c.get_misses));
    compose::stat(out, "get_expired", g(&c.get_expired));
    compose::stat(out, "get_flushed", g(&c.get_flushed));
    compose::stat(out, "delete_misses", g(&c.delete_misses));
    compose::stat(out, "delete_hits", g(&c.delete_hits));
    compose::stat(out, "incr_misses", g(&c.incr_misses));
    compose::stat(out, "incr_hits", g(&c.incr_hits));
    compose::stat(out, "decr_misses", g(&c.decr_misses));
    compose::stat(out, "decr_hits", g(&c.decr_hits));
    compose::stat(out, "cas_misses", g(&c.cas_misses));
    compose::stat(out, "cas_hits", g(&c.cas_hits));
    compose::stat(out, "cas_badval", g(&c.cas_badval));
    compose::stat(out, "touch_hits", g(&c.touch_hits));
    compose::stat(out, "touch_misses", g(&c.touch_misses));
    compose::stat(out, "bytes_read", g(&counts.bytes_read));
    compose::stat(out, "bytes_written", g(&counts.bytes_written));
    compose::stat(out, "limit_maxbytes", node.cfg.memory_bytes);
    compose::stat(out, "threads", g(&counts.threads));
    compose::stat(out, "bytes", bytes);
    compose::stat(out, "curr_items", items);
    compose::stat(out, "total_items", g(&c.total_items));
    compose::stat(out, "expired_unfetched", g(&c.expired_unfetched));
    compose::stat(out, "evictions", evictions);
    compose::reply(out, Reply::End);
}

fn ratio(a: u64, b: u64) -> String {
    if b == 0 {
        "0".into()
    } else {
        format!("{:.3}", a as f64 / b as f64)
    }
}

fn inec_stats(node: &Node, out: &mut Vec<u8>) {
    let c = &node.counters;
    let g = |a: &AtomicU64| a.load(Ordering::Relaxed);
    let (_, _, _, fp) = node.agent_totals();
    let view = node.view();
    let (sent, received) = node.data_messages();
    compose::stat(out, "node_id", node.cfg.id);
    compose::stat(out, "node_count", node.cfg.node_count);
    compose::stat(out, "code", node.cfg.code);
    compose::stat(out, "scheme", node.cfg.scheme.name());
    compose::stat(out, "mode", node.cfg.mode.name());
    compose::stat(out, "incarnation", node.incarnation);
    compose::stat(out, "ready", u8::from(node.is_ready()));
    compose::stat(
        out,
        "recovery",
        match node.recovery_state() {
            RecoveryState::None => "none",
            RecoveryState::Running => "running",
            RecoveryState::Done => "done",
        },
    );
    compose::stat(out, "recovery_keys_done", g(&c.recovery_keys_done));
    compose::stat(out, "recovery_keys_total", g(&c.recovery_keys_total));
    compose::stat(out, "recovery_bytes", g(&c.recovery_bytes));
    compose::stat(out, "stripes", node.cfg.node_count);
    compose::stat(out, "members_down", view.iter().filter(|v| !v.0).count());
    for (i, (up, ready)) in view.iter().enumerate() {
        let h = match (up, ready) {
            (false, _) => "down",
            (true, false) => "recovering",
            (true, true) => "up",
        };
        compose::stat(out, &format!("node_{i}"), h);
    }
    for s in 0..node.cfg.node_count {
        let agent = node
            .agent_of(s)
            .map_or("none".to_string(), |a| a.to_string());
        compose::stat(
            out,
            &format!("stripe_{s}"),
            format!("{},agent={agent}", node.stripe_state(s)),
        );
        if node.coord.is_some() {
            // The fencing token of this node's term of the stripe (0: it does not lead it).
            let term = if node.leads(s) { node.fence(s) } else { 0 };
            compose::stat(out, &format!("stripe_{s}_term"), term);
        } else {
            let (votes, members) = node.lease_votes(s);
            compose::stat(
                out,
                &format!("stripe_{s}_votes"),
                format!("{votes}/{members}"),
            );
        }
    }
    let led = (0..node.cfg.node_count).filter(|&s| node.leads(s)).count();
    compose::stat(out, "stripes_led", led);
    compose::stat(
        out,
        "coordinator",
        if node.coord.is_some() {
            "etcd"
        } else {
            "majority"
        },
    );
    if let Some(e) = node.coord.as_ref().and_then(|c| c.last_error()) {
        compose::stat(out, "coordinator_last_error", e.replace(['\r', '\n'], " "));
    }
    compose::stat(out, "degraded_reads", g(&c.degraded_reads));
    compose::stat(out, "forced_degraded_reads", g(&c.forced_degraded_reads));
    let plan = |f: fn(&crate::carrier::plans::PlanCounters) -> &AtomicU64| {
        node.plan_exec().map_or(0, |x| g(f(&x.counters)))
    };
    compose::stat(out, "engine_plans", u8::from(node.plan_exec().is_some()));
    compose::stat(out, "degraded_plan_runs", plan(|c| &c.degraded_plan_runs));
    compose::stat(
        out,
        "degraded_plan_fallbacks",
        plan(|c| &c.degraded_plan_fallbacks),
    );
    compose::stat(
        out,
        "plan_templates_installed",
        plan(|c| &c.plan_templates_installed),
    );
    compose::stat(
        out,
        "degraded_plan_runs_in_flight_max",
        plan(|c| &c.degraded_plan_runs_in_flight_max),
    );
    compose::stat(out, "startup_templates", plan(|c| &c.startup_templates));
    compose::stat(out, "runs_given_up", plan(|c| &c.runs_given_up));
    compose::stat(out, "write_plan_runs", plan(|c| &c.write_plan_runs));
    compose::stat(
        out,
        "write_plan_fallbacks",
        plan(|c| &c.write_plan_fallbacks),
    );
    compose::stat(out, "read_plan_runs", plan(|c| &c.read_plan_runs));
    compose::stat(out, "read_plan_fallbacks", plan(|c| &c.read_plan_fallbacks));
    compose::stat(out, "plan_starts", plan(|c| &c.plan_starts));
    compose::stat(out, "plan_inputs", plan(|c| &c.plan_inputs));
    compose::stat(out, "plan_records_stored", plan(|c| &c.plan_records_stored));
    compose::stat(out, "chunks_repaired", g(&c.chunks_repaired));
    compose::stat(out, "chunks_written_back", g(&c.chunks_written_back));
    compose::stat(out, "crc_errors", g(&c.crc_errors));
    compose::stat(out, "version_mismatches", g(&c.version_mismatches));
    compose::stat(out, "forwarded", g(&c.forwarded));
    compose::stat(out, "loop_reads", g(&c.loop_reads));
    compose::stat(out, "loop_read_fallbacks", g(&c.loop_read_fallbacks));
    compose::stat(out, "loop_range_reasks", g(&c.loop_range_reasks));
    compose::stat(out, "loop_degraded_reads", g(&c.loop_degraded_reads));
    compose::stat(out, "loop_writes", g(&c.loop_writes));
    compose::stat(out, "loop_writes_refused", g(&c.loop_writes_refused));
    compose::stat(out, "loop_deletes", g(&c.loop_deletes));
    compose::stat(out, "loop_touches", g(&c.loop_touches));
    compose::stat(out, "loop_multi_gets", g(&c.loop_multi_gets));
    compose::stat(out, "loop_write_fallbacks", g(&c.loop_write_fallbacks));
    compose::stat(out, "loop_forwards", g(&c.loop_forwards));
    compose::stat(out, "loop_forward_fallbacks", g(&c.loop_forward_fallbacks));
    compose::stat(out, "worker_jobs", g(&c.worker_jobs));
    compose::stat(out, "peer_worker_jobs", g(&c.peer_worker_jobs));
    compose::stat(out, "key_lock_waits", g(&c.key_lock_waits));
    compose::stat(out, "writes_in_doubt", g(&c.writes_in_doubt));
    compose::stat(out, "retries_answered", g(&c.retries_answered));
    compose::stat(out, "retries_in_doubt", g(&c.retries_in_doubt));
    compose::stat(out, "index_rebuilds", g(&c.index_rebuilds));
    compose::stat(out, "index_rebuild_us_last", g(&c.index_rebuild_us_last));
    compose::stat(out, "index_rebuild_us_max", g(&c.index_rebuild_us_max));
    compose::stat(out, "index_rebuild_us_total", g(&c.index_rebuild_us_total));
    compose::stat(out, "writes_with_holes", g(&c.writes_with_holes));
    compose::stat(out, "holes_pending", node.holes_pending());
    compose::stat(out, "holes_filled", g(&c.holes_filled));
    compose::stat(out, "fenced_out", node.fenced_out());
    compose::stat(out, "lease_lapses", g(&c.lease_lapses));
    compose::stat(out, "lease_lost_ops", g(&c.lease_lost_ops));
    compose::stat(out, "server_errors", g(&c.server_errors));
    compose::stat(out, "peer_messages_sent", sent);
    compose::stat(out, "peer_messages_received", received);
    let (frames_sent, frames_received) = node.plan_exec().map_or((0, 0), |x| x.frame_counts());
    compose::stat(out, "engine_frames_sent", frames_sent);
    compose::stat(out, "engine_frames_received", frames_received);
    // Every message this node sent: peer requests and replies and engine frames (control and
    // data), heartbeats excluded; summed over the nodes, every message of the cluster.
    let replies = g(&c.peer_replies_sent);
    compose::stat(out, "peer_replies_sent", replies);
    compose::stat(out, "messages_sent", sent + replies + frames_sent);
    compose::stat(out, "record_bytes", node.stored_bytes());
    compose::stat(out, "share_bytes", node.share_bytes());
    compose::stat(out, "replicate_below_bytes", node.cfg.replicate_below_bytes);
    compose::stat(out, "value_bytes_coded", fp[0]);
    compose::stat(out, "value_bytes_replicated", fp[1]);
    compose::stat(out, "record_bytes_coded", fp[2]);
    compose::stat(out, "record_bytes_replicated", fp[3]);
    compose::stat(out, "bytes_per_value_byte_coded", ratio(fp[2], fp[0]));
    compose::stat(out, "bytes_per_value_byte_replicated", ratio(fp[3], fp[1]));
    // The whole layout: this node's values and their records in its slab, the slab's pages
    // and the parity pages it keeps for other homes' pages (about the cluster's ratio: every
    // node is a home and keeps m parity pages per k data pages).
    let (slab_pages, slot_bytes, parity_pages, page_bytes) = node.whole_memory();
    compose::stat(out, "layout", node.cfg.layout);
    compose::stat(out, "whole_below_bytes", node.cfg.whole_below_bytes);
    compose::stat(out, "value_bytes_whole", fp[4]);
    compose::stat(out, "record_bytes_whole", fp[5]);
    compose::stat(out, "whole_slot_bytes", slot_bytes);
    compose::stat(out, "whole_slab_pages", slab_pages);
    compose::stat(out, "whole_parity_pages", parity_pages);
    compose::stat(out, "whole_page_bytes", page_bytes);
    compose::stat(
        out,
        "bytes_per_value_byte_whole",
        ratio((slab_pages + parity_pages) * page_bytes, fp[4]),
    );
    compose::stat(out, "whole_writes", g(&c.whole_writes));
    compose::stat(out, "whole_fallbacks", g(&c.whole_fallbacks));
    compose::stat(out, "whole_rebuilds", g(&c.whole_rebuilds));
    compose::stat(out, "whole_cut_retries", g(&c.whole_cut_retries));
    compose::stat(out, "whole_plan_rejected", g(&c.whole_plan_rejected));
    compose::stat(out, "whole_pages_healed", g(&c.whole_pages_healed));
    compose::stat(out, "whole_pages_salvaged", g(&c.whole_pages_salvaged));
    compose::stat(out, "whole_pages_realigned", g(&c.whole_pages_realigned));
    compose::stat(out, "whole_deltas_completed", g(&c.whole_deltas_completed));
    compose::stat(out, "whole_commits_sent", g(&c.whole_commits_sent));
    compose::stat(out, "whole_commits_answered", g(&c.whole_commits_answered));
    compose::stat(out, "whole_rewritten", g(&c.whole_rewritten));
    compose::stat(out, "whole_split_values", g(&c.whole_split_values));
    compose::stat(out, "whole_pages_rebuilt", g(&c.whole_pages_rebuilt));
    compose::stat(
        out,
        "whole_deltas_superseded",
        g(&c.whole_deltas_superseded),
    );
    compose::stat(out, "whole_pages_to_rebuild", g(&c.whole_pages_to_rebuild));
    compose::stat(out, "whole_deltas_queued", g(&c.whole_deltas_queued));
    compose::stat(
        out,
        "whole_deltas_redelivered",
        g(&c.whole_deltas_redelivered),
    );
    compose::stat(out, "whole_deltas_pending", node.whole_deltas_pending());
    compose::stat(
        out,
        "whole_deltas_pending_bytes",
        node.whole_pending_bytes.load(Ordering::Relaxed),
    );
    let (kept, kept_bytes) = crate::node::lock(&node.store).kept();
    compose::stat(out, "whole_deltas_kept", kept);
    compose::stat(out, "whole_deltas_kept_bytes", kept_bytes);
    compose::reply(out, Reply::End);
}

/// How long a peer call may take before the peer counts as unreachable.
pub const PEER_TIMEOUT: Duration = Duration::from_secs(5);

#[cfg(test)]
mod lock_tests;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::node::tests::{get, key_of_stripe_0, lapse_lease, leading_node};

    /// A loop's ops with links to `addrs` and a mailbox of its own.
    pub(super) fn test_ops(addrs: Vec<SocketAddr>) -> LoopOps {
        LoopOps {
            links: Links::new(addrs),
            pending: HashMap::new(),
            calls: HashMap::new(),
            next_id: 0,
            patience: Duration::from_secs(1),
            early_failures: Vec::new(),
            home: Arc::clone(&Loops::new(1).unwrap().homes[0]),
            parked_peer: Vec::new(),
        }
    }

    /// Settles `op` of the client connection `Token(1)`, two of its steps sent and one failed
    /// (a member that did not answer in time), `once` its request's try.
    fn settle_failed(node: &Node, op: LoopOp, once: Once) -> Option<Done> {
        let mut ops = test_ops(Vec::new());
        let pending = PendingOp {
            conn: Token(1),
            op,
            retry: Retry::Client(proto::OwnedCommand::Version, once),
            outstanding: 2,
            next: 2,
            failed: true,
            deadline: Instant::now(),
        };
        ops.pending.insert(0, pending);
        let poll = Poll::new().expect("poll");
        ops.settle(node, poll.registry(), 0)
    }

    /// A delete on the loop whose members did not all answer in time is still answered
    /// `DELETED` (as a worker's delete, which does not wait on them either: the index entry
    /// went before any message left), and never handed to a worker, which would find no entry
    /// and answer `NOT_FOUND`; with the lease lapsed meanwhile, it is in doubt.
    #[test]
    fn a_loop_delete_a_member_did_not_answer_is_deleted_unless_the_lease_lapsed() {
        let node = leading_node(&[]);
        let key = key_of_stripe_0(&node);
        let key = key.as_slice();
        let settle = |lapsed: bool, to: ReplyTo| {
            assert!(matches!(
                node.agent(AgentOp::Store {
                    mode: StoreMode::Set,
                    key: key.to_vec(),
                    flags: 0,
                    exptime: 0,
                    compare_cas: None,
                    value: vec![3; 100],
                    once: Once::first(node.next_request_id()),
                }),
                AgentResult::Stored { .. }
            ));
            let LoopNoticeStart::Send(notice) = node.loop_delete_start(key, None) else {
                panic!("a delete of a present key at its agent runs on the loop");
            };
            assert_eq!(notice.remote.len(), 2, "the two other members");
            // (The delete holds the key's lock: the index is looked at directly.)
            let indexed = node.stripes[0]
                .lock()
                .unwrap()
                .as_ref()
                .unwrap()
                .get(key)
                .is_some();
            assert!(!indexed, "gone from the index before any message left");
            if lapsed {
                lapse_lease(&node, 1);
            }
            // A member's answer did not come in time.
            let op = LoopOp::Notice {
                notice,
                to,
                value: None,
            };
            match settle_failed(&node, op, Once::default()) {
                Some(Done::Reply(Token(1), out)) => out,
                Some(Done::Worker(..)) => panic!("a delete handed to a worker"),
                _ => panic!("no end"),
            }
        };
        let client = ReplyTo::Client {
            with_cas: false,
            noreply: false,
        };
        assert_eq!(settle(false, client), b"DELETED\r\n");
        let peer = settle(false, ReplyTo::Peer);
        assert_eq!(
            crate::member::conn::frame_reply(&node, &peer::Response::Agent(AgentResult::Deleted)),
            peer
        );
        let out = String::from_utf8(settle(true, client)).unwrap();
        assert!(out.contains("may or may not have been applied"), "{out}");
    }

    /// The loop's `set` stored its own record and sent the others', and a member did not
    /// answer. If a member voting for this node saw it down since the write began, another
    /// node may have led the stripe meanwhile and adopted its records: run again, by a worker
    /// or by the front at the next agent, the `set` would take effect twice, the second time
    /// over the writes made in between (`inec nemesis` found a value written during a
    /// partition come back after the heal). Its reservation is undone and it goes to a worker
    /// as a retry, which the agent answers from the records or refuses (`agent::once`); without
    /// a request id, it is answered as in doubt and never handed to a worker. Led without a
    /// break, the node's worker writes it again under a new version (a member that stalls does
    /// not fail the write), in the same index only.
    #[test]
    fn a_loop_write_whose_records_left_is_run_again_only_if_led_throughout() {
        let node = leading_node(&[]);
        let key = key_of_stripe_0(&node);
        let key = key.as_slice();
        assert_eq!(get(&node, key), AgentResult::Miss, "node 0 leads stripe 0");
        let settle = |lapsed: bool, to: ReplyTo, id: u64| {
            // An index built after any lapse before (a read rebuilds it).
            assert_eq!(get(&node, key), AgentResult::Miss);
            let LoopWriteStart::Send(write) =
                node.loop_write_start(key, StoreIf::SET, 0, 0, &[7; 100], id)
            else {
                panic!("a coded set of a leading node with every member up runs on the loop");
            };
            assert!(node.loop_write_sent(&write), "its own record is stored");
            if lapsed {
                lapse_lease(&node, 1);
            }
            // A member's reply did not come in time (or its connection broke).
            settle_failed(&node, LoopOp::Write { write, to }, Once::first(id))
        };
        let client = ReplyTo::Client {
            with_cas: false,
            noreply: false,
        };
        match settle(false, client, 41) {
            // Its records left: the worker writes it anew only in the index it was given up
            // in (`agent::once`).
            Some(Done::Worker(Token(1), Retry::Client(_, once))) => {
                let epoch = node.stripes[0].lock().unwrap().as_ref().unwrap().epoch;
                assert_eq!(
                    once,
                    Once {
                        id: 41,
                        attempt: Attempt::Rerun { epoch }
                    }
                );
            }
            _ => panic!("a write of a node that led throughout goes to a worker"),
        }
        assert_eq!(node.counters.writes_in_doubt.load(Ordering::Relaxed), 0);
        for to in [client, ReplyTo::Peer] {
            match settle(true, to, 42) {
                Some(Done::Worker(Token(1), Retry::Client(_, once))) => assert_eq!(
                    once,
                    Once {
                        id: 42,
                        attempt: Attempt::Retry
                    }
                ),
                _ => panic!("a write with a request id whose records left goes to a retry"),
            }
            match settle(true, to, 0) {
                Some(Done::Reply(Token(1), out)) => {
                    let out = String::from_utf8_lossy(&out).into_owned();
                    assert!(out.contains("may or may not have been applied"), "{out}");
                }
                Some(Done::Worker(..)) => panic!("a write whose records left was run again"),
                _ => panic!("no end"),
            }
        }
    }
}

#[cfg(test)]
mod call_tests {
    use super::tests::test_ops;
    use super::*;
    use crate::node::tests::leading_node;
    use std::cell::RefCell;

    /// Runs `ops` as its loop does (flush, poll the links, take their answers) until `done` or
    /// 5 s.
    fn drive(ops: &mut LoopOps, poll: &mut Poll, node: &Node, done: &dyn Fn() -> bool) {
        let mut events = Events::with_capacity(64);
        let deadline = Instant::now() + Duration::from_secs(5);
        while !done() && Instant::now() < deadline {
            let mut failed = ops.links.flush(poll.registry());
            failed.append(&mut ops.early_failures);
            ops.answered(node, poll.registry(), failed);
            ops.flush_now(poll.registry());
            poll.poll(&mut events, Some(Duration::from_millis(10)))
                .unwrap();
            for ev in events.iter() {
                let Some(link) = ev.token().0.checked_sub(LINK_BASE) else {
                    continue;
                };
                let registry = poll.registry();
                let mut answers = Vec::new();
                if ev.is_writable() {
                    answers.extend(ops.links.writable(registry, link));
                }
                if ev.is_readable() || ev.is_read_closed() || ev.is_error() {
                    answers.extend(ops.links.readable(registry, link));
                }
                ops.answered(node, registry, answers);
            }
        }
    }

    /// Reads one request from `s` and answers it `Ack`.
    fn answer_one(s: &mut std::net::TcpStream) -> peer::Request {
        let mut head = [0u8; 4];
        s.read_exact(&mut head).unwrap();
        let mut body = vec![0; u32::from_le_bytes(head) as usize];
        s.read_exact(&mut body).unwrap();
        peer::write_frame(s, &peer::encode_response(&peer::Response::Ack)).unwrap();
        peer::decode_request(&body).unwrap()
    }

    /// A call that wants its replies early gets each as it comes: the answer of a peer that
    /// answers, while another peer holds its request (silent) and the call waits for it.
    #[test]
    fn a_reply_comes_early_while_the_call_waits_for_a_silent_peer() {
        let node = leading_node(&[]);
        let (answering, silent) = (
            std::net::TcpListener::bind("127.0.0.1:0").unwrap(),
            std::net::TcpListener::bind("127.0.0.1:0").unwrap(),
        );
        let addrs = vec![
            answering.local_addr().unwrap(),
            silent.local_addr().unwrap(),
        ];
        let mut poll = Poll::new().unwrap();
        let mut ops = test_ops(addrs);
        let peer = std::thread::spawn(move || {
            let (mut s, _) = answering.accept().unwrap();
            answer_one(&mut s);
            s
        });
        let (tx, rx) = mpsc::channel();
        let (early_tx, early_rx) = mpsc::channel();
        ops.start_call(
            poll.registry(),
            Call {
                requests: vec![
                    (1, peer::Request::Heartbeat { from: 0 }),
                    (0, peer::Request::Heartbeat { from: 0 }),
                ],
                deadline: Instant::now() + Duration::from_secs(30),
                reply: tx,
                early: Some(early_tx),
            },
        );
        let early = RefCell::new(None);
        drive(&mut ops, &mut poll, &node, &|| {
            if early.borrow().is_none() {
                *early.borrow_mut() = early_rx.try_recv().ok();
            }
            early.borrow().is_some()
        });
        assert_eq!(early.into_inner(), Some((1, peer::Response::Ack)));
        assert!(
            matches!(rx.try_recv(), Err(mpsc::TryRecvError::Empty)),
            "the call still waits for the silent peer"
        );
        let _ = peer.join().unwrap();
        drop(silent);
    }

    /// A call made on a link the peer reset (it restarted), before the loop saw the reset, is
    /// not sent; it goes again on a fresh connection and is answered, instead of failing as an
    /// I/O error that would mark a live peer down until its next heartbeat.
    #[test]
    fn a_call_on_a_connection_the_peer_reset_goes_again_on_a_fresh_one() {
        let node = leading_node(&[]);
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let mut poll = Poll::new().unwrap();
        let mut ops = test_ops(vec![addr]);
        let call = |ops: &mut LoopOps, poll: &mut Poll| -> Replies {
            let (tx, rx) = mpsc::channel();
            ops.start_call(
                poll.registry(),
                Call {
                    requests: vec![(0, peer::Request::List { stripe: 0 })],
                    deadline: Instant::now() + Duration::from_secs(5),
                    reply: tx,
                    early: None,
                },
            );
            let got = RefCell::new(None);
            drive(ops, poll, &node, &|| {
                if got.borrow().is_none() {
                    *got.borrow_mut() = rx.try_recv().ok();
                }
                got.borrow().is_some()
            });
            got.into_inner().expect("the call was answered")
        };
        // The first call opens the link and is answered.
        let peer = std::thread::spawn(move || {
            let (mut s, _) = listener.accept().unwrap();
            answer_one(&mut s);
            (listener, s)
        });
        let first = call(&mut ops, &mut poll);
        assert!(matches!(first[..], [Ok(peer::Response::Ack)]), "{first:?}");
        let (listener, s) = peer.join().unwrap();
        // The peer goes away with a reset, unseen by the loop, and comes back.
        peer::abort(&s);
        drop(s);
        std::thread::sleep(Duration::from_millis(50));
        let peer = std::thread::spawn(move || {
            let (mut s, _) = listener.accept().unwrap();
            answer_one(&mut s)
        });
        let second = call(&mut ops, &mut poll);
        assert!(
            matches!(second[..], [Ok(peer::Response::Ack)]),
            "{second:?}"
        );
        assert_eq!(peer.join().unwrap(), peer::Request::List { stripe: 0 });
    }
}
