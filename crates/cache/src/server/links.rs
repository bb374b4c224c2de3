//! The client loop's own connections to the other nodes' peer ports, for the reads it runs to
//! completion (`crate::node::LoopRead`). One connection per peer and loop, requests pipelined:
//! the peer server answers one connection's requests in order, so each connection keeps the
//! (read, position) of its requests in order and matches each reply to the oldest. Frames queued
//! for one peer during a pass of the loop leave in one write ([`Links::flush`]).

use std::collections::VecDeque;
use std::io::{self, Read, Write};
use std::net::SocketAddr;

use mio::net::TcpStream;
use mio::{Interest, Registry, Token};

use crate::peer::{self, Response, MESSAGE_MAX_BYTES};

/// Tokens of the loop's peer connections: `LINK_BASE + node`.
pub const LINK_BASE: usize = 1 << 40;

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
        let links = addrs.iter().map(|_| None).collect();
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

    /// Queues a request for `node` (connecting first if needed); it leaves at the next
    /// [`Links::flush`]. An error means the connection could not even be started.
    pub fn queue(
        &mut self,
        registry: &Registry,
        node: usize,
        asked: Asked,
        body: &[u8],
    ) -> io::Result<()> {
        if self.links[node].is_none() {
            let mut stream = TcpStream::connect(self.addrs[node])?;
            stream.set_nodelay(true)?;
            registry.register(
                &mut stream,
                Token(LINK_BASE + node),
                Interest::READABLE | Interest::WRITABLE,
            )?;
            self.links[node] = Some(Link {
                stream,
                out: Vec::new(),
                out_pos: 0,
                inbuf: Vec::new(),
                asked: VecDeque::new(),
            });
        }
        let link = self.links[node].as_mut().expect("connected above");
        link.out
            .extend_from_slice(&(body.len() as u32).to_le_bytes());
        link.out.extend_from_slice(body);
        link.asked.push_back(asked);
        self.sent += 1;
        if !self.dirty.contains(&node) {
            self.dirty.push(node);
        }
        Ok(())
    }

    /// Writes what was queued this pass, one write per link; the requests of links that
    /// failed, unanswered.
    pub fn flush(&mut self, registry: &Registry) -> Answers {
        let mut failed = Vec::new();
        for node in std::mem::take(&mut self.dirty) {
            failed.extend(self.write(registry, node));
        }
        failed
    }

    /// The link's socket can take more bytes.
    pub fn writable(&mut self, registry: &Registry, node: usize) -> Answers {
        self.write(registry, node)
    }

    fn write(&mut self, registry: &Registry, node: usize) -> Answers {
        let Some(link) = self.links.get_mut(node).and_then(|l| l.as_mut()) else {
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
            return self.drop_link(registry, node);
        }
        if link.out_pos == link.out.len() {
            link.out.clear();
            link.out_pos = 0;
        }
        Vec::new()
    }

    /// Reads what the link has: the replies that came, in order, and when the connection
    /// failed, every request still unanswered (with `None`).
    pub fn readable(&mut self, registry: &Registry, node: usize) -> Answers {
        let Some(link) = self.links.get_mut(node).and_then(|l| l.as_mut()) else {
            return Vec::new();
        };
        let mut answers = Vec::new();
        let buf = &mut self.scratch;
        let mut broken = false;
        loop {
            match link.stream.read(buf) {
                Ok(0) => {
                    broken = true;
                    break;
                }
                Ok(n) => {
                    link.inbuf.extend_from_slice(&buf[..n]);
                    // Shorter than asked: the socket is empty, the next bytes bring an event.
                    if n < buf.len() {
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
        let mut at = 0;
        while link.inbuf.len() - at >= 4 {
            let len =
                u32::from_le_bytes(link.inbuf[at..at + 4].try_into().expect("4 bytes")) as usize;
            if len > MESSAGE_MAX_BYTES {
                broken = true;
                break;
            }
            if link.inbuf.len() - at - 4 < len {
                break;
            }
            let Some(asked) = link.asked.pop_front() else {
                // A reply to nothing: the connection cannot be trusted.
                broken = true;
                break;
            };
            let body = &link.inbuf[at + 4..at + 4 + len];
            answers.push((asked, peer::decode_response(body)));
            self.received += 1;
            at += 4 + len;
        }
        link.inbuf.drain(..at);
        if broken {
            answers.extend(self.drop_link(registry, node));
        }
        answers
    }

    fn drop_link(&mut self, registry: &Registry, node: usize) -> Answers {
        let Some(mut link) = self.links[node].take() else {
            return Vec::new();
        };
        let _ = registry.deregister(&mut link.stream);
        link.asked.into_iter().map(|a| (a, None)).collect()
    }
}
