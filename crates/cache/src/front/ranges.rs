//! The node's peer port and its ranges thread.
//!
//! A repair read of the whole layout (a degraded read, a page rebuilt) asks every member of a
//! page stripe for one byte range of its page (`Request::Range`) and waits for k of them. Served
//! by the members' event loops, each range waits until its member's loop is scheduled and has
//! served the client connections ahead of it in its pass: on a machine whose cores the loops
//! keep busy, the k-th member of a stripe to run answers several scheduler turns after the
//! first. So a node serves ranges on a thread of its own, which sleeps until one comes: it reads
//! the range under the store's lock and answers at once, without waiting for the loop's turn.
//!
//! The thread also owns the node's peer listener. A link opens its [`Lane::Ranges`]
//! connection with [`RANGES_HELLO`], four bytes no frame starts with (as a frame's length they
//! are over [`MESSAGE_MAX_BYTES`]): such a connection stays with this thread; any other goes, as
//! it came, to an event loop in turn (memcached's dispatch), which serves it as before.
//!
//! [`Lane::Ranges`]: crate::carrier::links::Lane::Ranges

use std::collections::HashMap;
use std::io::{self, Read, Write};
use std::sync::Arc;

use mio::net::{TcpListener, TcpStream};
use mio::{Events, Interest, Poll, Token};

use super::{Mail, Mailbox};
use crate::carrier::links::RANGES_HELLO;
use crate::carrier::peer::{self, Request, Response, MESSAGE_MAX_BYTES};
use crate::member::conn::push_reply;
use crate::node::Node;

const LISTENER: Token = Token(0);
const FIRST_CONN: usize = 1;

/// A connection the thread accepted: not yet known (its first four bytes not in), or a
/// ranges connection it serves.
struct Conn {
    stream: TcpStream,
    ranges: bool,
    inbuf: Vec<u8>,
    out: Vec<u8>,
    out_pos: usize,
}

/// Why a request on a ranges connection is not answered there.
const NOT_HERE: &str = "only range reads are answered on a ranges connection";

/// The thread's work: accepts on `listener` until its poll fails; deals every connection that is
/// not a ranges connection to `loops` in turn.
pub(super) fn run(
    node: &Node,
    mut listener: TcpListener,
    loops: &[Arc<Mailbox>],
) -> io::Result<()> {
    let mut poll = Poll::new()?;
    poll.registry()
        .register(&mut listener, LISTENER, Interest::READABLE)?;
    let mut conns: HashMap<Token, Conn> = HashMap::new();
    let mut next_token = FIRST_CONN;
    let mut next_loop = 0usize;
    let mut events = Events::with_capacity(256);
    let mut scratch = vec![0u8; 64 * 1024];
    loop {
        match poll.poll(&mut events, None) {
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            r => r?,
        }
        let mut touched: Vec<Token> = Vec::new();
        for ev in events.iter() {
            if ev.token() != LISTENER {
                touched.push(ev.token());
                continue;
            }
            loop {
                match listener.accept() {
                    Ok((mut stream, _)) => {
                        let _ = stream.set_nodelay(true);
                        let token = Token(next_token);
                        next_token += 1;
                        let interest = Interest::READABLE | Interest::WRITABLE;
                        if poll
                            .registry()
                            .register(&mut stream, token, interest)
                            .is_ok()
                        {
                            conns.insert(token, Conn::new(stream));
                            touched.push(token);
                        }
                    }
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                    // WouldBlock: all taken; another error (out of descriptors, a connection
                    // reset before it was taken): the next connection brings another event.
                    Err(_) => break,
                }
            }
        }
        touched.sort_unstable();
        touched.dedup();
        for token in touched {
            let Some(c) = conns.get_mut(&token) else {
                continue;
            };
            let keep = if c.ranges {
                c.serve(node, &mut scratch)
            } else {
                match c.sort() {
                    Sorted::Ranges => c.serve(node, &mut scratch),
                    Sorted::Wait => true,
                    Sorted::Other => {
                        let Some(mut c) = conns.remove(&token) else {
                            continue;
                        };
                        let _ = poll.registry().deregister(&mut c.stream);
                        // Dealt to the loops in turn; a loop that is gone passes it on.
                        let mut mail = Mail::Peer(c.stream);
                        for _ in 0..loops.len() {
                            let to = &loops[next_loop % loops.len()];
                            next_loop = next_loop.wrapping_add(1);
                            match to.post_back(mail) {
                                Ok(()) => break,
                                Err(m) => mail = m,
                            }
                        }
                        continue;
                    }
                    Sorted::Closed => false,
                }
            };
            if !keep {
                if let Some(mut c) = conns.remove(&token) {
                    let _ = poll.registry().deregister(&mut c.stream);
                }
            }
        }
    }
}

enum Sorted {
    Ranges,
    Other,
    Wait,
    Closed,
}

impl Conn {
    fn new(stream: TcpStream) -> Conn {
        Conn {
            stream,
            ranges: false,
            inbuf: Vec::new(),
            out: Vec::new(),
            out_pos: 0,
        }
    }

    /// Looks at the connection's first four bytes, without taking any but the hello.
    fn sort(&mut self) -> Sorted {
        let mut first = [0u8; 4];
        loop {
            return match self.stream.peek(&mut first) {
                Ok(0) => Sorted::Closed,
                Ok(n) if n < first.len() => {
                    // The rest brings another event; what came stays for whoever reads it.
                    if first[..n] == RANGES_HELLO[..n] {
                        Sorted::Wait
                    } else {
                        Sorted::Other
                    }
                }
                Ok(_) if first == RANGES_HELLO => {
                    let mut hello = [0u8; 4];
                    match self.stream.read_exact(&mut hello) {
                        Ok(()) => {
                            self.ranges = true;
                            Sorted::Ranges
                        }
                        Err(_) => Sorted::Closed,
                    }
                }
                Ok(_) => Sorted::Other,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => Sorted::Wait,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(_) => Sorted::Closed,
            };
        }
    }

    /// Reads what came, answers every whole request in order, writes what it can: false once
    /// the connection is done (closed by the peer, broken, or a frame that cannot be trusted).
    fn serve(&mut self, node: &Node, scratch: &mut [u8]) -> bool {
        let mut eof = false;
        loop {
            match self.stream.read(scratch) {
                Ok(0) => {
                    eof = true;
                    break;
                }
                Ok(n) => {
                    self.inbuf.extend_from_slice(&scratch[..n]);
                    if n < scratch.len() {
                        break;
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(_) => return false,
            }
        }
        let Some(used) = answer(node, &self.inbuf, &mut self.out) else {
            return false;
        };
        self.inbuf.drain(..used);
        crate::carrier::shrink_idle(&mut self.inbuf);
        while self.out_pos < self.out.len() {
            match self.stream.write(&self.out[self.out_pos..]) {
                Ok(0) => return false,
                Ok(n) => self.out_pos += n,
                // The writable event resumes it.
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(_) => return false,
            }
        }
        if self.out_pos == self.out.len() {
            self.out.clear();
            self.out_pos = 0;
            crate::carrier::shrink_idle(&mut self.out);
        }
        !(eof && self.out.is_empty())
    }
}

/// Answers the whole frames at the start of `bytes` into `out`: how many bytes they took, or
/// `None` for a frame that cannot be trusted (too long, or not a request).
fn answer(node: &Node, bytes: &[u8], out: &mut Vec<u8>) -> Option<usize> {
    let mut at = 0;
    while bytes.len() - at >= 4 {
        let len = u32::from_le_bytes(bytes[at..at + 4].try_into().expect("4 bytes")) as usize;
        if len > MESSAGE_MAX_BYTES {
            return None;
        }
        if bytes.len() - at - 4 < len {
            break;
        }
        let req = peer::decode_request(&bytes[at + 4..at + 4 + len])?;
        at += 4 + len;
        // Range reads are never fenced (`Request::stripe`).
        let res = if matches!(req, Request::Range { .. }) {
            node.handle_peer(req)
        } else {
            Response::Nack(NOT_HERE.to_string())
        };
        push_reply(out, node, &res);
    }
    Some(at)
}

#[cfg(test)]
mod tests {
    use std::io::{Read, Write};
    use std::net::{SocketAddr, TcpListener, TcpStream};
    use std::time::Duration;

    use crate::carrier::links::RANGES_HELLO;
    use crate::carrier::peer::{self, Request, Response};
    use crate::start::{Config, Server};

    /// Node 0 of three (the others never start), serving; its peer address.
    fn node() -> SocketAddr {
        let free = || {
            let l = TcpListener::bind("127.0.0.1:0").expect("bind");
            l.local_addr().expect("address")
        };
        let peers: Vec<SocketAddr> = (0..3).map(|_| free()).collect();
        let mut node = crate::node::tests::config(0);
        node.layout = crate::agent::whole::Layout::Whole;
        let config = Config {
            node,
            client: "127.0.0.1:0".parse().expect("address"),
            peers: peers.clone(),
            plans: false,
            max_connections: 64,
            loops: 1,
            workers: 1,
            coordinator: None,
        };
        let server = Server::start(config).expect("start");
        std::thread::spawn(move || server.run());
        peers[0]
    }

    fn connect(addr: SocketAddr) -> TcpStream {
        let s = TcpStream::connect(addr).expect("connect");
        s.set_read_timeout(Some(Duration::from_secs(10)))
            .expect("timeout");
        s
    }

    fn ask(s: &mut TcpStream, req: &Request) -> Response {
        let mut out = Vec::new();
        peer::push_request_frame(&mut out, req);
        s.write_all(&out).expect("send");
        let body = peer::read_frame(s).expect("a reply");
        peer::decode_response(&body).expect("a response")
    }

    fn range(len: u32) -> Request {
        Request::Range {
            stripe: 0,
            page_stripe: 0,
            position: 1,
            page: 0,
            offset: 16,
            len,
        }
    }

    fn heartbeat() -> Request {
        Request::Heartbeat { from: 1 }
    }

    /// A connection that starts with the hello, even one that sends it a byte at a time, is
    /// served by the ranges thread: range reads are answered, in order, and any
    /// other request is refused there. A connection without it goes to an event loop, which
    /// answers a heartbeat, and a range read as before.
    #[test]
    fn the_hello_sorts_a_connection_to_the_ranges_thread_and_others_to_a_loop() {
        let addr = node();
        let mut ranges = connect(addr);
        for b in RANGES_HELLO {
            ranges.write_all(&[b]).expect("send");
            ranges.flush().expect("flush");
            std::thread::sleep(Duration::from_millis(20));
        }
        for len in [0, 1, 100, 4096] {
            match ask(&mut ranges, &range(len)) {
                Response::Range { bytes, .. } => assert_eq!(bytes, vec![0; len as usize]),
                other => panic!("a range read answered {other:?}"),
            }
        }
        match ask(&mut ranges, &heartbeat()) {
            Response::Nack(why) => assert_eq!(why, super::NOT_HERE),
            other => panic!("a heartbeat on a ranges connection answered {other:?}"),
        }
        // Several requests in one write are answered in order.
        let mut out = Vec::new();
        for len in [3, 5, 7] {
            peer::push_request_frame(&mut out, &range(len));
        }
        ranges.write_all(&out).expect("send");
        for len in [3, 5, 7] {
            let body = peer::read_frame(&mut ranges).expect("a reply");
            match peer::decode_response(&body) {
                Some(Response::Range { bytes, .. }) => assert_eq!(bytes.len(), len),
                other => panic!("a range read answered {other:?}"),
            }
        }
        let mut other = connect(addr);
        assert!(matches!(
            ask(&mut other, &heartbeat()),
            Response::Heartbeat { .. }
        ));
        assert!(matches!(ask(&mut other, &range(4)), Response::Range { .. }));
        // A frame too long to trust ends the ranges connection.
        ranges.write_all(&u32::MAX.to_le_bytes()).expect("send");
        let mut rest = Vec::new();
        assert_eq!(ranges.read_to_end(&mut rest).expect("closed"), 0);
    }
}
