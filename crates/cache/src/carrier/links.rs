//! The event loop's own connections to the other nodes' peer ports, for the requests it runs
//! to completion (`crate::node::LoopRead`, `LoopWrite`, forwards). Per peer and loop, one
//! connection for each [`Lane`], requests pipelined: the peer answers one connection's requests
//! in order, so each connection keeps the (op, position) of its requests in order and matches
//! each reply to the oldest. Frames queued for one connection during a pass of the loop leave in
//! one write ([`Links::flush`]).

use std::collections::VecDeque;
use std::io::{self, Read, Write};
use std::net::SocketAddr;

use mio::net::TcpStream;
use mio::{Interest, Registry, Token};

use crate::carrier::peer::{self, Response, MESSAGE_MAX_BYTES};

/// Tokens of the loop's peer connections: `LINK_BASE + node * LANES + lane`.
pub const LINK_BASE: usize = 1 << 40;

/// The lanes of the loop's connections to one node, each its own connection: chunk operations
/// (`Get`, `Put`), which the member's loop answers at once, and forwarded requests, which the
/// agent runs to their end before it answers. Apart, a chunk operation never waits behind a
/// forward on the member's side; on one connection, two loops forwarding to each other would
/// each hold the other's chunk operations behind a forward that waits for them, until their
/// patience ran out.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Lane {
    Chunks = 0,
    Forwards = 1,
}

/// Lanes per node.
pub const LANES: usize = 2;

/// A request sent on a link: the read it belongs to and the chunk position it asks for.
pub type Asked = (u64, usize);

/// Replies to requests, `None` where the connection failed before the reply came.
pub type Answers = Vec<(Asked, Option<Response>)>;

struct Link {
    stream: TcpStream,
    out: Vec<u8>,
    out_pos: usize,
    inbuf: Vec<u8>,
    asked: VecDeque<Asked>,
}

pub struct Links {
    addrs: Vec<SocketAddr>,
    links: Vec<Option<Link>>,
    dirty: Vec<usize>,
    /// Where reads land before they join a link's input (allocated once).
    scratch: Vec<u8>,
    /// Frames sent and received, for the node's message counters.
    pub sent: u64,
    pub received: u64,
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
        }
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
    /// next [`Links::flush`]. An error means the connection could not even be started.
    pub fn queue(
        &mut self,
        registry: &Registry,
        node: usize,
        lane: Lane,
        asked: Asked,
        request: &peer::Request,
    ) -> io::Result<()> {
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
                inbuf: Vec::new(),
                asked: VecDeque::new(),
            });
        }
        let link = self.links[at].as_mut().expect("connected above");
        peer::push_request_frame(&mut link.out, request);
        link.asked.push_back(asked);
        self.sent += 1;
        if !self.dirty.contains(&at) {
            self.dirty.push(at);
        }
        Ok(())
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
        let mut broken = false;
        while link.out_pos < link.out.len() {
            match link.stream.write(&link.out[link.out_pos..]) {
                Ok(0) => {
                    broken = true;
                    break;
                }
                Ok(n) => link.out_pos += n,
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
                Err(_) => {
                    broken = true;
                    break;
                }
            }
        }
        if broken {
            return self.drop_link(registry, at);
        }
        if link.out_pos == link.out.len() {
            link.out.clear();
            link.out_pos = 0;
            super::shrink_idle(&mut link.out);
        }
        Vec::new()
    }

    /// Reads what the link has: the replies that came, in order, and when the connection
    /// failed, every request still unanswered (with `None`).
    pub fn readable(&mut self, registry: &Registry, at: usize) -> Answers {
        let Some(link) = self.links.get_mut(at).and_then(|l| l.as_mut()) else {
            return Vec::new();
        };
        let mut answers = Vec::new();
        let buf = &mut self.scratch;
        let (mut broken, mut untrusted) = (false, false);
        loop {
            match link.stream.read(buf) {
                Ok(0) => {
                    broken = true;
                    break;
                }
                Ok(n) => {
                    if link.inbuf.is_empty() {
                        // The replies are decoded from the read's buffer: only a reply cut by
                        // the read's end is kept.
                        let used = take_replies(&mut link.asked, &buf[..n], &mut answers);
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
                Err(_) => {
                    broken = true;
                    break;
                }
            }
        }
        // What came before the link failed is answered all the same.
        if !untrusted {
            match take_replies(&mut link.asked, &link.inbuf, &mut answers) {
                Some(used) => {
                    link.inbuf.drain(..used);
                }
                None => untrusted = true,
            }
        }
        let broken = broken || untrusted;
        self.received += answers.len() as u64;
        super::shrink_idle(&mut link.inbuf);
        if broken {
            answers.extend(self.drop_link(registry, at));
        }
        answers
    }

    fn drop_link(&mut self, registry: &Registry, at: usize) -> Answers {
        let Some(mut link) = self.links[at].take() else {
            return Vec::new();
        };
        let _ = registry.deregister(&mut link.stream);
        // Its requests fail now: none of them may reach the node later.
        crate::carrier::peer::abort(&link.stream);
        link.asked.into_iter().map(|a| (a, None)).collect()
    }
}

/// Decodes the whole replies at the start of `bytes`, each the answer to the oldest request
/// still `asked`: how many bytes they took, or `None` when the link cannot be trusted (a
/// frame too large, a reply to nothing).
fn take_replies(asked: &mut VecDeque<Asked>, bytes: &[u8], answers: &mut Answers) -> Option<usize> {
    let mut pos = 0;
    while bytes.len() - pos >= 4 {
        let len = u32::from_le_bytes(bytes[pos..pos + 4].try_into().expect("4 bytes")) as usize;
        if len > MESSAGE_MAX_BYTES {
            return None;
        }
        if bytes.len() - pos - 4 < len {
            break;
        }
        let a = asked.pop_front()?;
        answers.push((a, peer::decode_response(&bytes[pos + 4..pos + 4 + len])));
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
            .queue(registry, 0, Lane::Chunks, (1, 0), &hb(1))
            .unwrap();
        links
            .queue(registry, 0, Lane::Forwards, (2, 0), &hb(2))
            .unwrap();
        links
            .queue(registry, 0, Lane::Forwards, (3, 0), &hb(2))
            .unwrap();
        assert!(links.flush(registry).is_empty());
        // Which accepted socket is which lane: the sender of its first request says.
        let mut accepted = Vec::new();
        for _ in 0..2 {
            let (mut s, _) = listener.accept().unwrap();
            let mut head = [0u8; 4];
            s.read_exact(&mut head).unwrap();
            let mut body = vec![0; u32::from_le_bytes(head) as usize];
            s.read_exact(&mut body).unwrap();
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
        assert_eq!(answers, vec![((2, 0), Some(Response::Ack)), ((3, 0), None)]);
        // The chunks lane is still there with its request: a reply on it is matched.
        chunks.write_all(&frame(&ack)).unwrap();
        let answers = read_until(&mut links, registry, Lane::Chunks as usize, 1);
        assert_eq!(answers, vec![((1, 0), Some(Response::Ack))]);
    }
}
