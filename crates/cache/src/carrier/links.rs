//! The event loop's connections to the other nodes' peer ports: the only connections a node
//! opens to another's peer port. They carry the requests the loop runs to completion
//! (`crate::node::LoopRead`, `LoopWrite`, forwards) and the calls other threads of the node
//! (workers, heartbeats, background jobs) post to the loop (`crate::carrier::calls`). Per peer
//! and loop, one connection for each [`Lane`], requests pipelined: the peer answers one
//! connection's requests in order, so each connection keeps the (op, position) of its requests
//! in order and matches each reply to the oldest. Frames queued for one connection during a pass
//! of the loop leave in one write ([`Links::flush`]).

use std::collections::VecDeque;
use std::io::{self, Read, Write};
use std::net::SocketAddr;

use mio::net::TcpStream;
use mio::{Interest, Registry, Token};

use crate::carrier::peer::{self, Response, MESSAGE_MAX_BYTES};

/// Tokens of the loop's peer connections: `LINK_BASE + node * LANES + lane`.
pub const LINK_BASE: usize = 1 << 40;

/// The lanes of the loop's connections to one node, each its own connection: chunk operations
/// (`Get`, `Put`), which the member's loop answers at once; requests the receiver runs to their
/// end before it answers (forwarded agent operations, recovery's); and heartbeats. Apart, a
/// chunk operation never waits behind a forward on the member's side (on one connection, two
/// loops forwarding to each other would each hold the other's chunk operations behind a forward
/// that waits for them, until their patience ran out), and a heartbeat, whose timing the lease
/// depends on, never waits behind a large frame or a forward.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Lane {
    Chunks = 0,
    Forwards = 1,
    Heartbeats = 2,
}

impl Lane {
    /// The lane a request travels on.
    pub fn of(request: &peer::Request) -> Lane {
        match request {
            peer::Request::Agent(_) => Lane::Forwards,
            peer::Request::Heartbeat { .. } => Lane::Heartbeats,
            _ => Lane::Chunks,
        }
    }
}

/// Lanes per node.
pub const LANES: usize = 3;

/// A request sent on a link: the read it belongs to and the chunk position it asks for.
pub type Asked = (u64, usize);

/// Why a request got no reply.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Failure {
    /// The connection failed before the whole request was written: the node cannot act on it
    /// (a cut frame is never read, and an aborted connection's unsent bytes are dropped).
    NotSent(io::ErrorKind),
    /// The request was written and no reply came: the node may or may not have acted on it.
    NoReply(io::ErrorKind),
    /// The reply could not be decoded.
    Malformed,
}

/// A request's reply, or why it has none.
pub type Answer = Result<Response, Failure>;

/// Replies to requests, in the order they came.
pub type Answers = Vec<(Asked, Answer)>;

/// The most pieces a link gives one vectored write (its output's runs and the deltas between).
const WRITE_PARTS: usize = 32;

impl Link {
    /// The next bytes to write, in order, as pieces of `parts`: how many. A run of `out` that
    /// a delta not among them comes before is left for the next write.
    fn parts<'a>(&'a self, parts: &mut [io::IoSlice<'a>; WRITE_PARTS]) -> usize {
        let mut count = 0;
        let mut pos = self.out_pos;
        for (i, (at, bytes)) in self.spans.iter().enumerate() {
            if count + 2 > WRITE_PARTS {
                return count;
            }
            if *at > pos {
                parts[count] = io::IoSlice::new(&self.out[pos..*at]);
                count += 1;
                pos = *at;
            }
            let from = if i == 0 { self.span_pos } else { 0 };
            parts[count] = io::IoSlice::new(&bytes[from..]);
            count += 1;
        }
        if pos < self.out.len() && count < WRITE_PARTS {
            parts[count] = io::IoSlice::new(&self.out[pos..]);
            count += 1;
        }
        count
    }

    /// `n` more bytes written.
    fn advance(&mut self, mut n: usize) {
        while n > 0 {
            let next = self.spans.front().map_or(self.out.len(), |s| s.0);
            if self.out_pos < next {
                let take = (next - self.out_pos).min(n);
                self.out_pos += take;
                n -= take;
                continue;
            }
            let Some((_, bytes)) = self.spans.front() else {
                debug_assert!(false, "more bytes written than queued");
                return;
            };
            let take = (bytes.len() - self.span_pos).min(n);
            self.span_pos += take;
            n -= take;
            if self.span_pos == bytes.len() {
                self.spans.pop_front();
                self.span_pos = 0;
            }
        }
    }
}

/// A request a link sent and has no reply to yet.
struct Sent {
    asked: Asked,
    /// Where the request's frame ends in the link's byte stream.
    end: u64,
    /// Counted in [`Links::sent`] and its reply in [`Links::received`].
    counted: bool,
}

struct Link {
    stream: TcpStream,
    /// What to write, but the deltas sent from where they lie (`spans`).
    out: Vec<u8>,
    out_pos: usize,
    /// Deltas to write from where they lie, each before `out`'s byte at its index (in order),
    /// and how much of the first was written.
    spans: VecDeque<(usize, std::sync::Arc<[u8]>)>,
    span_pos: usize,
    /// Bytes of the stream queued and written since the link was opened.
    queued: u64,
    written: u64,
    inbuf: Vec<u8>,
    asked: VecDeque<Sent>,
    /// It carried frames of the node's engine ([`Links::queue_plan`]): when it drops, the
    /// engine hears that it lost the node ([`PlanLink::Lost`]).
    plans: bool,
}

/// What the engine's frames learn of a chunks link to a node (the first loop's, which carries
/// them), in the order it happened: a link that carried plan frames dropped (frames may have
/// been lost), or a new connection to the node opened (plans may use the node again).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PlanLink {
    Lost(usize),
    Opened(usize),
}

pub struct Links {
    addrs: Vec<SocketAddr>,
    links: Vec<Option<Link>>,
    dirty: Vec<usize>,
    /// Where reads land before they join a link's input (allocated once).
    scratch: Vec<u8>,
    /// Frames sent and received, for the node's message counters (those queued `counted`).
    pub sent: u64,
    pub received: u64,
    /// Whether these links carry the engine's frames (the first loop's), and what happened to
    /// their chunks links since [`Links::take_plan_links`].
    carries_plans: bool,
    plan_links: Vec<PlanLink>,
}

impl Links {
    /// `addrs[i]` is node i's peer address.
    pub fn new(addrs: Vec<SocketAddr>) -> Links {
        let links = (0..addrs.len() * LANES).map(|_| None).collect();
        Links {
            addrs,
            links,
            dirty: Vec::new(),
            scratch: vec![0; 64 * 1024],
            sent: 0,
            received: 0,
            carries_plans: false,
            plan_links: Vec::new(),
        }
    }

    /// These links carry the node's engine frames (the loop drives the engine).
    pub fn carry_plans(&mut self) {
        self.carries_plans = true;
    }

    /// What happened to the chunks links since the last call, for the engine (empty unless
    /// [`Links::carry_plans`]).
    pub fn take_plan_links(&mut self) -> Vec<PlanLink> {
        std::mem::take(&mut self.plan_links)
    }

    /// Whether something happened to the chunks links the engine has not heard yet.
    pub fn plan_links_pending(&self) -> bool {
        !self.plan_links.is_empty()
    }

    /// Whether the loop knows no peer (a one-node cache, or a caller that gave no addresses).
    pub fn is_empty(&self) -> bool {
        self.addrs.is_empty()
    }

    /// Whether the loop knows `node`'s peer address.
    pub fn reaches(&self, node: usize) -> bool {
        node < self.addrs.len()
    }

    /// Queues a request for `node` on `lane` (connecting first if needed); it leaves at the
    /// next [`Links::flush`]. An error means the connection could not even be started. A
    /// request `counted` is counted in [`Links::sent`], its reply in [`Links::received`].
    pub fn queue(
        &mut self,
        registry: &Registry,
        node: usize,
        lane: Lane,
        asked: Asked,
        request: &peer::Request,
        counted: bool,
    ) -> io::Result<()> {
        let at = self.open(registry, node, lane)?;
        let link = self.links[at].as_mut().expect("opened");
        let before = link.out.len();
        let mut added = 0;
        if let Some(delta) = peer::push_request_frame_leaving_delta(&mut link.out, request) {
            added = delta.len();
            link.spans.push_back((link.out.len(), delta));
        }
        link.queued += (link.out.len() - before + added) as u64;
        link.asked.push_back(Sent {
            asked,
            end: link.queued,
            counted,
        });
        if counted {
            self.sent += 1;
        }
        if !self.dirty.contains(&at) {
            self.dirty.push(at);
        }
        Ok(())
    }

    /// Queues one frame of the node's engine for `node` (sent by node `from`), on the chunks
    /// lane: it has no reply. It leaves at the next [`Links::flush`].
    pub fn queue_plan(
        &mut self,
        registry: &Registry,
        node: usize,
        from: u32,
        header: &engine::wire::Header,
        payload: &[u8],
    ) -> io::Result<()> {
        let at = self.open(registry, node, Lane::Chunks)?;
        let link = self.links[at].as_mut().expect("opened");
        let before = link.out.len();
        peer::push_plan_frame(&mut link.out, from, header, payload);
        link.queued += (link.out.len() - before) as u64;
        link.plans = true;
        if !self.dirty.contains(&at) {
            self.dirty.push(at);
        }
        Ok(())
    }

    /// The link to `node` on `lane`, connected first if there is none: its slot.
    fn open(&mut self, registry: &Registry, node: usize, lane: Lane) -> io::Result<usize> {
        let at = node * LANES + lane as usize;
        if self.links[at].is_none() {
            let mut stream = TcpStream::connect(self.addrs[node])?;
            stream.set_nodelay(true)?;
            registry.register(
                &mut stream,
                Token(LINK_BASE + at),
                Interest::READABLE | Interest::WRITABLE,
            )?;
            self.links[at] = Some(Link {
                stream,
                out: Vec::new(),
                out_pos: 0,
                spans: VecDeque::new(),
                span_pos: 0,
                queued: 0,
                written: 0,
                inbuf: Vec::new(),
                asked: VecDeque::new(),
                plans: false,
            });
            if self.carries_plans && lane == Lane::Chunks {
                self.plan_links.push(PlanLink::Opened(node));
            }
        }
        Ok(at)
    }

    /// Writes what was queued this pass, one write per link; the requests of links that
    /// failed, unanswered.
    pub fn flush(&mut self, registry: &Registry) -> Answers {
        let mut failed = Vec::new();
        for at in std::mem::take(&mut self.dirty) {
            failed.extend(self.write(registry, at));
        }
        failed
    }

    /// The socket of link `at` (its token less [`LINK_BASE`]) can take more bytes.
    pub fn writable(&mut self, registry: &Registry, at: usize) -> Answers {
        self.write(registry, at)
    }

    fn write(&mut self, registry: &Registry, at: usize) -> Answers {
        let Some(link) = self.links.get_mut(at).and_then(|l| l.as_mut()) else {
            return Vec::new();
        };
        let mut broken = None;
        while link.out_pos < link.out.len() || !link.spans.is_empty() {
            let mut parts = [io::IoSlice::new(&[]); WRITE_PARTS];
            let count = link.parts(&mut parts);
            match (&link.stream).write_vectored(&parts[..count]) {
                Ok(0) => {
                    broken = Some(io::ErrorKind::WriteZero);
                    break;
                }
                Ok(n) => {
                    link.advance(n);
                    link.written += n as u64;
                }
                // Still connecting, or the socket is full: the writable event resumes it.
                Err(e)
                    if matches!(
                        e.kind(),
                        io::ErrorKind::WouldBlock | io::ErrorKind::NotConnected
                    ) =>
                {
                    break
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => {
                    broken = Some(e.kind());
                    break;
                }
            }
        }
        if let Some(kind) = broken {
            return self.drop_link(registry, at, kind);
        }
        if link.out_pos == link.out.len() && link.spans.is_empty() {
            link.out.clear();
            link.out_pos = 0;
            super::shrink_idle(&mut link.out);
        }
        Vec::new()
    }

    /// Reads what the link has: the replies that came, in order, and when the connection
    /// failed, every request still unanswered (with `None`).
    #[cfg(test)]
    pub fn readable(&mut self, registry: &Registry, at: usize) -> Answers {
        let mut answers = Vec::new();
        self.readable_into(registry, at, &mut answers);
        answers
    }

    /// [`Links::readable`], its answers added to `answers` (a loop's buffer, kept from pass
    /// to pass).
    pub fn readable_into(&mut self, registry: &Registry, at: usize, answers: &mut Answers) {
        let Some(link) = self.links.get_mut(at).and_then(|l| l.as_mut()) else {
            return;
        };
        let mut counted = 0;
        let buf = &mut self.scratch;
        let (mut broken, mut untrusted) = (None, false);
        loop {
            match link.stream.read(buf) {
                Ok(0) => {
                    broken = Some(io::ErrorKind::UnexpectedEof);
                    break;
                }
                Ok(n) => {
                    if link.inbuf.is_empty() {
                        // The replies are decoded from the read's buffer: only a reply cut by
                        // the read's end is kept.
                        let used = take_replies(&mut link.asked, &buf[..n], answers, &mut counted);
                        match used {
                            Some(used) => link.inbuf.extend_from_slice(&buf[used..n]),
                            None => untrusted = true,
                        }
                    } else {
                        link.inbuf.extend_from_slice(&buf[..n]);
                    }
                    // Shorter than asked: the socket is empty, the next bytes bring an event.
                    if untrusted || n < buf.len() {
                        break;
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => {
                    broken = Some(e.kind());
                    break;
                }
            }
        }
        // What came before the link failed is answered all the same.
        if !untrusted {
            match take_replies(&mut link.asked, &link.inbuf, answers, &mut counted) {
                Some(used) => {
                    link.inbuf.drain(..used);
                }
                None => untrusted = true,
            }
        }
        let broken = match (broken, untrusted) {
            (_, true) => Some(io::ErrorKind::InvalidData),
            (b, false) => b,
        };
        self.received += counted;
        super::shrink_idle(&mut link.inbuf);
        if let Some(kind) = broken {
            answers.extend(self.drop_link(registry, at, kind));
        }
    }

    /// Closes the link to `node` on `lane` at once, abortively (a caller gave up on one of its
    /// requests, which must not reach the node later): every request still on it fails.
    pub fn abort(&mut self, registry: &Registry, node: usize, lane: Lane) -> Answers {
        self.drop_link(
            registry,
            node * LANES + lane as usize,
            io::ErrorKind::TimedOut,
        )
    }

    fn drop_link(&mut self, registry: &Registry, at: usize, kind: io::ErrorKind) -> Answers {
        let Some(mut link) = self.links[at].take() else {
            return Vec::new();
        };
        let _ = registry.deregister(&mut link.stream);
        // Its requests fail now: none of them may reach the node later.
        crate::carrier::peer::abort(&link.stream);
        if link.plans {
            self.plan_links.push(PlanLink::Lost(at / LANES));
        }
        let written = link.written;
        link.asked
            .into_iter()
            .map(|s| {
                let failure = if written < s.end {
                    Failure::NotSent(kind)
                } else {
                    Failure::NoReply(kind)
                };
                (s.asked, Err(failure))
            })
            .collect()
    }
}

/// Decodes the whole replies at the start of `bytes`, each the answer to the oldest request
/// still `asked`: how many bytes they took, or `None` when the link cannot be trusted (a
/// frame too large, a reply to nothing). `counted` grows by the replies to counted requests.
fn take_replies(
    asked: &mut VecDeque<Sent>,
    bytes: &[u8],
    answers: &mut Answers,
    counted: &mut u64,
) -> Option<usize> {
    let mut pos = 0;
    while bytes.len() - pos >= 4 {
        let len = u32::from_le_bytes(bytes[pos..pos + 4].try_into().expect("4 bytes")) as usize;
        if len > MESSAGE_MAX_BYTES {
            return None;
        }
        if bytes.len() - pos - 4 < len {
            break;
        }
        let s = asked.pop_front()?;
        *counted += u64::from(s.counted);
        let reply = peer::decode_response(&bytes[pos + 4..pos + 4 + len]).ok_or(Failure::Malformed);
        answers.push((s.asked, reply));
        pos += 4 + len;
    }
    Some(pos)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, Instant};

    fn frame(body: &[u8]) -> Vec<u8> {
        let mut f = (body.len() as u32).to_le_bytes().to_vec();
        f.extend_from_slice(body);
        f
    }

    /// Reads link `slot` until `want` answers came (or five seconds passed).
    fn read_until(links: &mut Links, registry: &Registry, slot: usize, want: usize) -> Answers {
        let start = Instant::now();
        let mut answers = Vec::new();
        while answers.len() < want && start.elapsed() < Duration::from_secs(5) {
            answers.extend(links.readable(registry, slot));
            std::thread::sleep(Duration::from_millis(5));
        }
        answers
    }

    /// A peer that answers one request of two and then closes: the first comes back with its
    /// reply, the second fails, and only the lane that broke is dropped (the other lane to the
    /// same node, and its unanswered request, stay).
    #[test]
    fn a_broken_lane_fails_its_own_requests_and_no_other() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let poll = mio::Poll::new().unwrap();
        let registry = poll.registry();
        let mut links = Links::new(vec![addr]);
        let hb = |from| peer::Request::Heartbeat { from };
        links
            .queue(registry, 0, Lane::Chunks, (1, 0), &hb(1), true)
            .unwrap();
        links
            .queue(registry, 0, Lane::Forwards, (2, 0), &hb(2), true)
            .unwrap();
        links
            .queue(registry, 0, Lane::Forwards, (3, 0), &hb(2), false)
            .unwrap();
        assert!(links.flush(registry).is_empty());
        // Which accepted socket is which lane: the sender of its first request says.
        let mut accepted = Vec::new();
        for _ in 0..2 {
            let (mut s, _) = listener.accept().unwrap();
            let body = peer::read_frame(&mut s).unwrap();
            let Some(peer::Request::Heartbeat { from }) = peer::decode_request(&body) else {
                panic!("not the heartbeat sent");
            };
            accepted.push((from, s));
        }
        accepted.sort_by_key(|(from, _)| *from);
        let (_, mut forwards) = accepted.pop().unwrap();
        let (_, mut chunks) = accepted.pop().unwrap();
        // The forwards lane: answer its first request, then close.
        let ack = peer::encode_response(&Response::Ack);
        forwards.write_all(&frame(&ack)).unwrap();
        drop(forwards);
        let slot = Lane::Forwards as usize; // node 0: slots 0 and 1
        let answers = read_until(&mut links, registry, slot, 2);
        assert_eq!(answers.len(), 2);
        assert_eq!(answers[0], ((2, 0), Ok(Response::Ack)));
        // The second request was written whole before the peer closed: it may have been read.
        assert!(
            matches!(answers[1], ((3, 0), Err(Failure::NoReply(_)))),
            "{:?}",
            answers[1]
        );
        // Three requests left, two counted; one counted reply came.
        assert_eq!((links.sent, links.received), (2, 1));
        // The chunks lane is still there with its request: a reply on it is matched.
        chunks.write_all(&frame(&ack)).unwrap();
        let answers = read_until(&mut links, registry, Lane::Chunks as usize, 1);
        assert_eq!(answers, vec![((1, 0), Ok(Response::Ack))]);
        assert_eq!(links.received, 2);
    }

    /// The engine's frames ride the chunks lane with no reply: a reply on that lane answers the
    /// request queued after them. Links that carry plans report the chunks link they open and
    /// the one that drops after carrying plan frames (not the other lanes).
    #[test]
    fn plan_frames_need_no_reply_and_their_link_is_watched() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let poll = mio::Poll::new().unwrap();
        let registry = poll.registry();
        let mut links = Links::new(vec![addr]);
        links.carry_plans();
        let header = engine::wire::Header::new(engine::wire::Kind::Data, 9, 0, 0, 4).unwrap();
        links.queue_plan(registry, 0, 3, &header, b"data").unwrap();
        let hb = peer::Request::Heartbeat { from: 3 };
        links
            .queue(registry, 0, Lane::Chunks, (1, 0), &hb, true)
            .unwrap();
        links
            .queue(registry, 0, Lane::Heartbeats, (2, 0), &hb, false)
            .unwrap();
        assert_eq!(links.take_plan_links(), vec![PlanLink::Opened(0)]);
        assert!(links.flush(registry).is_empty());
        // The chunks lane's connection: the plan frame, then the request.
        let mut accepted = Vec::new();
        for _ in 0..2 {
            let (mut s, _) = listener.accept().unwrap();
            let body = peer::read_frame(&mut s).unwrap();
            accepted.push((body, s));
        }
        let at = accepted
            .iter()
            .position(|(b, _)| peer::is_plan_frame(b))
            .expect("the plan frame came");
        let (body, mut chunks) = accepted.remove(at);
        assert_eq!(
            peer::decode_plan_frame(&body),
            Some((3, header, &b"data"[..]))
        );
        let body = peer::read_frame(&mut chunks).unwrap();
        assert_eq!(peer::decode_request(&body), Some(hb));
        let ack = peer::encode_response(&Response::Ack);
        chunks.write_all(&frame(&ack)).unwrap();
        let answers = read_until(&mut links, registry, Lane::Chunks as usize, 1);
        assert_eq!(answers, vec![((1, 0), Ok(Response::Ack))]);
        // The heartbeat lane drops: nothing for the engine. The chunks lane drops: its node is
        // lost to the engine.
        drop(accepted);
        let answers = read_until(&mut links, registry, Lane::Heartbeats as usize, 1);
        assert_eq!(answers.len(), 1);
        assert!(links.take_plan_links().is_empty());
        drop(chunks);
        let start = Instant::now();
        while !links.plan_links_pending() && start.elapsed() < Duration::from_secs(5) {
            assert!(links.readable(registry, Lane::Chunks as usize).is_empty());
            std::thread::sleep(Duration::from_millis(5));
        }
        assert_eq!(links.take_plan_links(), vec![PlanLink::Lost(0)]);
    }

    /// Deltas sent from where they lie, among other frames: many (more pieces than one write
    /// takes), long (more bytes than the socket holds, so writes end part way into a delta or
    /// a run between), short (copied as before), fenced: the peer reads every frame whole and
    /// in order.
    #[test]
    fn deltas_sent_from_where_they_lie_arrive_whole_and_in_order() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let poll = mio::Poll::new().unwrap();
        let registry = poll.registry();
        let mut links = Links::new(vec![addr]);
        let delta = |i: usize, len: usize| peer::Request::Delta {
            stripe: i as u32,
            watermark: 7,
            record: vec![i as u8; 40],
            page_stripe: 1,
            position: 6,
            page: i as u32,
            data: 2,
            seq: i as u64,
            committed: 0,
            commits: vec![(1, 6, 3, 2, 9)],
            offset: 64,
            delta: (0..len)
                .map(|b| (b * 7 + i) as u8)
                .collect::<Vec<u8>>()
                .into(),
        };
        let mut sent = Vec::new();
        for i in 0..60 {
            let req = match i % 5 {
                0 => peer::Request::Heartbeat { from: i as u32 },
                1 => delta(i, 100),
                2 => peer::Request::Fenced {
                    token: i as u64,
                    req: Box::new(delta(i, 300_000 + i)),
                },
                _ => delta(i, 1024 + i * 4_997),
            };
            links
                .queue(registry, 0, Lane::Chunks, (i as u64, 0), &req, true)
                .unwrap();
            sent.push(req);
        }
        let count = sent.len();
        // The peer reads only once the first write filled what the sockets hold.
        let reader = std::thread::spawn(move || {
            let (mut s, _) = listener.accept().unwrap();
            std::thread::sleep(Duration::from_millis(100));
            (0..count)
                .map(|_| peer::decode_request(&peer::read_frame(&mut s).unwrap()).unwrap())
                .collect::<Vec<_>>()
        });
        assert!(links.flush(registry).is_empty());
        let slot = Lane::Chunks as usize;
        let link = links.links[slot].as_ref().unwrap();
        assert!(
            link.written < link.queued,
            "the first write took everything"
        );
        let start = Instant::now();
        while !reader.is_finished() && start.elapsed() < Duration::from_secs(10) {
            assert!(links.writable(registry, slot).is_empty());
            std::thread::sleep(Duration::from_millis(1));
        }
        assert_eq!(reader.join().unwrap(), sent);
        let link = links.links[slot].as_ref().unwrap();
        assert_eq!(link.written, link.queued);
        assert!(link.out.is_empty() && link.spans.is_empty());
    }

    /// A request to a port nothing listens on fails as not sent, and says the connection was
    /// refused (a node whose process is not running), whether the refusal comes at once or
    /// with the connection's first event.
    #[test]
    fn a_refused_connection_fails_its_requests_as_not_sent() {
        let addr = {
            let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            l.local_addr().unwrap()
        };
        let mut poll = mio::Poll::new().unwrap();
        let mut links = Links::new(vec![addr]);
        let hb = peer::Request::Heartbeat { from: 1 };
        let queued = links.queue(poll.registry(), 0, Lane::Heartbeats, (7, 0), &hb, false);
        if let Err(e) = queued {
            assert_eq!(e.kind(), io::ErrorKind::ConnectionRefused);
            return;
        }
        let mut answers = links.flush(poll.registry());
        let mut events = mio::Events::with_capacity(8);
        let start = Instant::now();
        while answers.is_empty() && start.elapsed() < Duration::from_secs(5) {
            poll.poll(&mut events, Some(Duration::from_millis(50)))
                .unwrap();
            let at = Lane::Heartbeats as usize;
            answers.extend(links.writable(poll.registry(), at));
            answers.extend(links.readable(poll.registry(), at));
        }
        assert_eq!(
            answers,
            vec![(
                (7, 0),
                Err(Failure::NotSent(io::ErrorKind::ConnectionRefused))
            )]
        );
    }

    /// A link given up on is closed: its requests fail as sent (they may have been read),
    /// and the next request opens a new connection.
    #[test]
    fn an_aborted_link_fails_what_it_carried_and_reconnects() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let poll = mio::Poll::new().unwrap();
        let registry = poll.registry();
        let mut links = Links::new(vec![addr]);
        let hb = peer::Request::Heartbeat { from: 1 };
        links
            .queue(registry, 0, Lane::Heartbeats, (1, 0), &hb, false)
            .unwrap();
        let (mut first, _) = listener.accept().unwrap();
        let start = Instant::now();
        while links.links[Lane::Heartbeats as usize]
            .as_ref()
            .is_some_and(|l| l.written < l.queued)
            && start.elapsed() < Duration::from_secs(5)
        {
            assert!(links.flush(registry).is_empty());
            std::thread::sleep(Duration::from_millis(5));
        }
        let failed = links.abort(registry, 0, Lane::Heartbeats);
        assert_eq!(
            failed,
            vec![((1, 0), Err(Failure::NoReply(io::ErrorKind::TimedOut)))]
        );
        // The peer sees the connection reset, not a clean end.
        let mut rest = Vec::new();
        first
            .set_read_timeout(Some(Duration::from_secs(5)))
            .unwrap();
        let end = first.read_to_end(&mut rest);
        assert_eq!(
            end.map_err(|e| e.kind()).err(),
            Some(io::ErrorKind::ConnectionReset),
            "the abort was a clean close"
        );
        links
            .queue(registry, 0, Lane::Heartbeats, (2, 0), &hb, false)
            .unwrap();
        assert!(links.flush(registry).is_empty());
        let (mut second, _) = listener.accept().unwrap();
        let body = peer::read_frame(&mut second).unwrap();
        assert_eq!(peer::decode_request(&body), Some(hb));
    }
}
