//! The member side of the node, served by the client loop: connections accepted on the peer
//! port carry other nodes' requests (chunk operations from their loops and workers, forwarded
//! agent operations, heartbeats). The loop answers at once what needs no wait
//! ([`Node::handle_peer_now`]: every chunk operation, most heartbeats), so a member's part of a
//! get or set costs no thread hand-off; what may wait (an agent operation, a heartbeat that
//! must first drain the key locks) goes to a peer worker, and the connection reads nothing more
//! until its reply is back, so replies leave in the order of the requests. Replies to the
//! requests read in one pass leave in one write.

use std::io::{self, Read, Write};
use std::sync::atomic::Ordering;

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
    /// Nothing answered yet: the first bytes may be the engine's preamble.
    fresh: bool,
}

/// What a peer connection is after a pass of [`PeerConn::service`].
#[derive(Debug, PartialEq, Eq)]
pub enum Served {
    /// Still open.
    Open,
    /// Done: closed by the peer, broken, or a frame this node cannot trust.
    Closed,
    /// An engine connection (it began with [`crate::carrier::ENGINE_PREAMBLE`]): the bytes
    /// that came after the preamble, for the node's engine, which takes the connection over.
    Engine(Vec<u8>),
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
            fresh: true,
        }
    }

    /// The connection's socket, for the engine taking it over.
    pub fn into_stream(self) -> TcpStream {
        self.stream
    }

    pub fn stream(&mut self) -> &mut TcpStream {
        &mut self.stream
    }

    /// A peer worker's framed reply: it leaves, and the requests behind it run.
    pub fn resume(&mut self, framed: &[u8]) {
        self.out.extend_from_slice(framed);
        self.busy = false;
    }

    /// Reads what came, answers what it can, writes; says whether the connection is still
    /// open, done, or the engine's.
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
                Ok(n) if self.fresh => {
                    self.inbuf.extend_from_slice(&scratch[..n]);
                    let p = crate::carrier::ENGINE_PREAMBLE.len();
                    if self.inbuf.len() >= p {
                        self.fresh = false;
                        if self.inbuf[..p] == crate::carrier::ENGINE_PREAMBLE {
                            return Served::Engine(self.inbuf.split_off(p));
                        }
                    }
                    if n < scratch.len() {
                        break;
                    }
                }
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
        if self.fresh && !self.eof {
            // Too few bytes yet to tell the engine's preamble.
            return Served::Open;
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

    /// Answers the whole frames at the start of `bytes` until one must wait (`busy`): how
    /// many bytes they took, or `None` for a frame this node cannot trust.
    fn answer(
        &mut self,
        node: &Node,
        bytes: &[u8],
        wait: &mut dyn FnMut(Request) -> Option<Vec<u8>>,
    ) -> Option<usize> {
        let mut at = 0;
        while !self.busy && bytes.len() - at >= 4 {
            let len = u32::from_le_bytes(bytes[at..at + 4].try_into().expect("4 bytes")) as usize;
            if len > MESSAGE_MAX_BYTES {
                return None;
            }
            if bytes.len() - at - 4 < len {
                break;
            }
            let req = peer::decode_request(&bytes[at + 4..at + 4 + len])?;
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
    use crate::carrier::ENGINE_PREAMBLE;
    use std::time::Duration;

    /// A connection to a listener of this process: (the side a node accepted, the peer's).
    fn pair() -> (TcpStream, std::net::TcpStream) {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let peer = std::net::TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let (accepted, _) = l.accept().unwrap();
        accepted.set_nonblocking(true).unwrap();
        (TcpStream::from_std(accepted), peer)
    }

    /// Serves `conn` until it is not open or `done` says the pass's result is the one awaited
    /// (the bytes the peer wrote may come in more than one read).
    fn serve_until(conn: &mut PeerConn, node: &Node, done: impl Fn(&Served) -> bool) -> Served {
        let mut scratch = vec![0u8; 64 << 10];
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        loop {
            let r = conn.service(node, &mut scratch, &mut |_| panic!("nothing waits"));
            if done(&r) || r != Served::Open || std::time::Instant::now() > deadline {
                return r;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    /// A connection that begins with the engine's preamble is handed over with the bytes after
    /// it, even when the preamble comes in pieces; one of peer messages is answered as ever.
    #[test]
    fn the_engine_preamble_hands_a_connection_to_the_engine() {
        use std::io::Write as _;
        let node = crate::node::tests::leading_node(&[]);
        // The preamble in two pieces, then engine bytes.
        let (s, mut peer) = pair();
        let mut conn = PeerConn::new(s);
        peer.write_all(&ENGINE_PREAMBLE[..2]).unwrap();
        assert_eq!(
            serve_until(&mut conn, &node, |_| true),
            Served::Open,
            "two bytes cannot tell"
        );
        peer.write_all(&ENGINE_PREAMBLE[2..]).unwrap();
        peer.write_all(b"IE\x01frame").unwrap();
        let got = serve_until(
            &mut conn,
            &node,
            |r| matches!(r, Served::Engine(b) if b.len() == 8),
        );
        assert_eq!(got, Served::Engine(b"IE\x01frame".to_vec()));
        // Peer messages: a chunk read is answered, and the connection stays open.
        let (s, mut peer) = pair();
        let mut conn = PeerConn::new(s);
        let get = peer::encode_request(&Request::Get {
            stripe: 0,
            position: 1,
            key: b"k".to_vec(),
            version: 1,
        });
        peer::write_frame(&mut peer, &get).unwrap();
        // Served until the reply is on its way back.
        peer.set_nonblocking(true).unwrap();
        let r = serve_until(&mut conn, &node, |_| peer.peek(&mut [0u8; 1]).is_ok());
        assert_eq!(r, Served::Open);
        peer.set_nonblocking(false).unwrap();
        peer.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        let reply = peer::read_frame(&mut peer).unwrap();
        assert!(
            matches!(peer::decode_response(&reply), Some(Response::Record(None))),
            "{reply:?}"
        );
    }
}
