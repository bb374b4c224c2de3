//! The member side of the node, served by the client loop: connections accepted on the peer
//! port carry other nodes' requests (chunk operations from their loops and workers, forwarded
//! agent operations, heartbeats). The loop answers at once what needs no wait
//! ([`Node::handle_peer_now`]: every chunk operation, most heartbeats), so a member's part of a
//! get or set costs no thread hand-off; what may wait (an agent operation, a heartbeat that
//! must first drain the key locks) goes to a peer worker, and the connection reads nothing more
//! until its reply is back, so replies leave in the order of the requests. Replies to the
//! requests read in one pass leave in one write. The frames of the sender's engine come on the
//! same connections ([`peer::PLAN_FRAME`]): they have no reply, and are taken for this node's
//! engine even while a request waits.

use std::io::{self, Read, Write};
use std::sync::atomic::Ordering;

use engine::transport::Event;
use mio::net::TcpStream;
use mio::Token;

use crate::agent::MAY_HAVE_APPLIED;
use crate::carrier::peer::{self, AgentResult, Attempt, Request, Response, MESSAGE_MAX_BYTES};
use crate::node::Node;

/// A connection from another node to this one's peer port.
pub struct PeerConn {
    stream: TcpStream,
    inbuf: Vec<u8>,
    out: Vec<u8>,
    out_pos: usize,
    /// A request is with a peer worker: nothing further is answered until its reply is in.
    busy: bool,
    eof: bool,
    /// The node whose engine frames this connection carried (its sender's first loop).
    pub plan_from: Option<u32>,
    /// The engine frames read and not yet taken by the loop, for this node's engine.
    pub plans: Vec<Event>,
}

/// What a peer connection is after a pass of [`PeerConn::service`].
#[derive(Debug, PartialEq, Eq)]
pub enum Served {
    /// Still open.
    Open,
    /// Done: closed by the peer, broken, or a frame this node cannot trust.
    Closed,
}

/// A request of a peer connection for a peer worker.
pub struct PeerJob {
    pub token: Token,
    pub request: Request,
    /// This node's event loop tried the request first and gave it up: a later try it made of
    /// a write ([`Attempt::Retry`] or [`Attempt::Rerun`]) must not be answered "not agent",
    /// which tells the front nothing was applied (it would send the write to the next agent as
    /// a first try, and the records of the try here may have been adopted there).
    pub tried_here: bool,
}

impl PeerConn {
    pub fn new(stream: TcpStream) -> PeerConn {
        PeerConn {
            stream,
            inbuf: Vec::new(),
            out: Vec::new(),
            out_pos: 0,
            busy: false,
            eof: false,
            plan_from: None,
            plans: Vec::new(),
        }
    }

    pub fn stream(&mut self) -> &mut TcpStream {
        &mut self.stream
    }

    /// A peer worker's framed reply: it leaves, and the requests behind it run.
    pub fn resume(&mut self, framed: &[u8]) {
        self.out.extend_from_slice(framed);
        self.busy = false;
    }

    /// Reads what came, answers what it can (engine frames go to [`PeerConn::plans`]), writes;
    /// says whether the connection is still open.
    ///
    /// A request that cannot be answered at once goes to `wait`, which gives its framed reply
    /// if it has one already, or takes it (the loop or a peer worker) and gives `None`: the
    /// connection then waits for [`PeerConn::resume`].
    pub fn service(
        &mut self,
        node: &Node,
        scratch: &mut [u8],
        wait: &mut dyn FnMut(Request) -> Option<Vec<u8>>,
    ) -> Served {
        while !self.eof {
            match self.stream.read(scratch) {
                Ok(0) => self.eof = true,
                Ok(n) => {
                    if self.inbuf.is_empty() {
                        // The frames are answered from the read's buffer: only what they leave
                        // (a frame cut by the read's end, those behind a wait) is kept.
                        let Some(used) = self.answer(node, &scratch[..n], wait) else {
                            return Served::Closed;
                        };
                        self.inbuf.extend_from_slice(&scratch[used..n]);
                    } else {
                        self.inbuf.extend_from_slice(&scratch[..n]);
                    }
                    // Shorter than asked: the socket is empty, the next bytes bring an event.
                    if n < scratch.len() {
                        break;
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(_) => return Served::Closed,
            }
        }
        let mut inbuf = std::mem::take(&mut self.inbuf);
        let Some(used) = self.answer(node, &inbuf, wait) else {
            return Served::Closed;
        };
        inbuf.drain(..used);
        self.inbuf = inbuf;
        crate::carrier::shrink_idle(&mut self.inbuf);
        while self.out_pos < self.out.len() {
            match self.stream.write(&self.out[self.out_pos..]) {
                Ok(0) => return Served::Closed,
                Ok(n) => self.out_pos += n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(_) => return Served::Closed,
            }
        }
        if self.out_pos == self.out.len() {
            self.out.clear();
            self.out_pos = 0;
            crate::carrier::shrink_idle(&mut self.out);
        }
        // The peer closed its side: done once nothing is under way or left to send.
        if self.eof && !self.busy && self.out.is_empty() {
            Served::Closed
        } else {
            Served::Open
        }
    }

    /// Answers the whole frames at the start of `bytes` until one must wait (`busy`; engine
    /// frames right behind it are still taken): how many bytes they took, or `None` for a frame
    /// this node cannot trust.
    fn answer(
        &mut self,
        node: &Node,
        bytes: &[u8],
        wait: &mut dyn FnMut(Request) -> Option<Vec<u8>>,
    ) -> Option<usize> {
        let mut at = 0;
        while bytes.len() - at >= 4 {
            let len = u32::from_le_bytes(bytes[at..at + 4].try_into().expect("4 bytes")) as usize;
            if len > MESSAGE_MAX_BYTES {
                return None;
            }
            if bytes.len() - at - 4 < len {
                break;
            }
            let body = &bytes[at + 4..at + 4 + len];
            if peer::is_plan_frame(body) {
                let (from, header, payload) = peer::decode_plan_frame(body)?;
                at += 4 + len;
                self.plan_from = Some(from);
                // Into a buffer of the engine's pool, which takes it back when done.
                let mut buf = match node.plan_pool() {
                    Some(pool) => pool.take(payload.len()),
                    None => vec![0; payload.len()],
                };
                buf.copy_from_slice(payload);
                self.plans.push(Event::Frame {
                    from: from as engine::NodeId,
                    header,
                    payload: buf,
                });
                continue;
            }
            if self.busy {
                break;
            }
            let req = peer::decode_request(body)?;
            at += 4 + len;
            // A `Get`, fenced or not, is answered here, its term admitted under the same lock
            // of the store.
            let (token, req) = match req {
                Request::Fenced { token, req: inner } if matches!(*inner, Request::Get { .. }) => {
                    (token, *inner)
                }
                req => (0, req),
            };
            if let Request::Get {
                stripe,
                position,
                key,
                version,
            } = &req
            {
                // The chunk goes from the store to the reply with one copy.
                count_reply(node);
                if let Err(seen) =
                    node.push_record_frame(&mut self.out, token, *stripe, *position, key, *version)
                {
                    let why = peer::fenced_out(*stripe, token, seen);
                    peer::push_response_frame(&mut self.out, &Response::Nack(why));
                }
                continue;
            }
            match node.handle_peer_now(req) {
                Ok(res) => push_reply(&mut self.out, node, &res),
                Err(request) => match wait(request) {
                    Some(framed) => self.out.extend_from_slice(&framed),
                    None => self.busy = true,
                },
            }
        }
        Some(at)
    }
}

/// Runs a request a peer connection handed over (on a peer worker) and frames its reply.
pub fn run_job(node: &Node, job: PeerJob) -> Vec<u8> {
    let later_try = match &job.request {
        Request::Agent(op) => op.once().is_some_and(|o| o.attempt != Attempt::First),
        _ => false,
    };
    if matches!(job.request, Request::Delta { .. }) {
        // Zero but in tests (`member::handler::DELTA_DELAY_ENV`).
        std::thread::sleep(node.delta_delay());
    }
    let res = match node.handle_peer(job.request) {
        Response::Agent(AgentResult::NotAgent) if job.tried_here && later_try => {
            Response::Agent(AgentResult::Error(format!(
                "the request {MAY_HAVE_APPLIED}: the key's agent lost the stripe while it wrote it"
            )))
        }
        res => res,
    };
    frame_reply(node, &res)
}

/// A reply framed for its connection ([`push_reply`]).
pub fn frame_reply(node: &Node, res: &Response) -> Vec<u8> {
    let mut out = Vec::new();
    push_reply(&mut out, node, res);
    out
}

/// Appends a reply's frame to `out`. A reply other than a heartbeat's is counted before it
/// leaves, so that the count is whole once the caller has it.
pub fn push_reply(out: &mut Vec<u8>, node: &Node, res: &Response) {
    if !matches!(res, Response::Heartbeat { .. }) {
        count_reply(node);
    }
    peer::push_response_frame(out, res);
}

fn count_reply(node: &Node) {
    node.counters
        .peer_replies_sent
        .fetch_add(1, Ordering::Relaxed);
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    /// A connection to a listener of this process: (the side a node accepted, the peer's).
    fn pair() -> (TcpStream, std::net::TcpStream) {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let peer = std::net::TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let (accepted, _) = l.accept().unwrap();
        accepted.set_nonblocking(true).unwrap();
        (TcpStream::from_std(accepted), peer)
    }

    fn plan_frame(from: u32, op: u64, payload: &[u8]) -> Vec<u8> {
        let h = engine::wire::Header::new(engine::wire::Kind::Data, op, 0, 0, payload.len());
        let mut out = Vec::new();
        peer::push_plan_frame(&mut out, from, &h.unwrap(), payload);
        out
    }

    fn framed(req: &Request) -> Vec<u8> {
        let mut out = Vec::new();
        peer::push_request_frame(&mut out, req);
        out
    }

    /// The frames of the sender's engine travel among its requests: each is taken for this
    /// node's engine, in order and with no reply, also right behind a request that waits (the
    /// request behind them still waits); requests are answered in order as ever.
    #[test]
    fn plan_frames_are_taken_beside_requests_and_past_a_wait() {
        use std::io::Write as _;
        let node = crate::node::tests::leading_node(&[]);
        let (s, mut peer) = pair();
        let mut conn = PeerConn::new(s);
        let get = Request::Get {
            stripe: 0,
            position: 1,
            key: b"k".to_vec(),
            version: 1,
        };
        let waits = Request::Agent(peer::AgentOp::Keys { stripe: 0 });
        let mut bytes = plan_frame(4, 1, b"first");
        bytes.extend(framed(&get));
        bytes.extend(plan_frame(4, 2, b""));
        bytes.extend(framed(&waits));
        bytes.extend(plan_frame(4, 3, b"behind the wait"));
        bytes.extend(framed(&get));
        peer.write_all(&bytes).unwrap();
        let mut scratch = vec![0u8; 64 << 10];
        let mut waited = Vec::new();
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        while conn.plans.len() < 3 && std::time::Instant::now() < deadline {
            let mut wait = |r: Request| {
                waited.push(r);
                None
            };
            assert_eq!(conn.service(&node, &mut scratch, &mut wait), Served::Open);
            std::thread::sleep(Duration::from_millis(5));
        }
        assert_eq!(conn.plan_from, Some(4));
        let got: Vec<(u64, Vec<u8>)> = conn
            .plans
            .iter()
            .map(|e| match e {
                Event::Frame {
                    from: 4,
                    header,
                    payload,
                } => (header.op, payload.clone()),
                other => panic!("{other:?}"),
            })
            .collect();
        assert_eq!(
            got,
            vec![
                (1, b"first".to_vec()),
                (2, Vec::new()),
                (3, b"behind the wait".to_vec())
            ]
        );
        assert_eq!(waited, vec![waits]);
        // One reply so far (the first get's); the second get waits for the resume.
        peer.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        let reply = peer::read_frame(&mut peer).unwrap();
        assert!(matches!(
            peer::decode_response(&reply),
            Some(Response::Record(None))
        ));
        let ack = frame_reply(&node, &Response::Ack);
        conn.resume(&ack);
        let mut nothing = |_: Request| panic!("nothing else waits");
        assert_eq!(
            conn.service(&node, &mut scratch, &mut nothing),
            Served::Open
        );
        let reply = peer::read_frame(&mut peer).unwrap();
        assert_eq!(peer::decode_response(&reply), Some(Response::Ack));
        let reply = peer::read_frame(&mut peer).unwrap();
        assert!(matches!(
            peer::decode_response(&reply),
            Some(Response::Record(None))
        ));
        // A plan frame that does not add up closes the connection.
        let mut bad = plan_frame(4, 5, b"x");
        bad[9] ^= 0xFF;
        peer.write_all(&bad).unwrap();
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        let mut r = Served::Open;
        while r == Served::Open && std::time::Instant::now() < deadline {
            r = conn.service(&node, &mut scratch, &mut nothing);
            std::thread::sleep(Duration::from_millis(5));
        }
        assert_eq!(r, Served::Closed);
    }
}
