//! The TCP transport: one persistent connection per peer pair, non-blocking sockets driven by
//! the engine thread through `mio` (epoll, edge-triggered), `TCP_NODELAY` on every socket.
//!
//! Writes: frames queue per connection as (header, payload) pairs and are written with
//! `writev` straight from the payload buffers at the end of each event-loop turn, so small
//! frames of one turn share a system call and no payload is copied in user space.
//!
//! Reads: each connection reads into a staging buffer and cuts frames out of it. A payload of
//! less than `DIRECT_BYTES` is copied once from the staging buffer into its pool buffer (one
//! read system call then picks up many small frames). A larger payload is read straight into
//! its pool buffer: only the bytes that arrived together with its header (at most
//! `SMALL_READ_BYTES`, because the read after a large frame is kept that short) are copied.
//!
//! Connects are non-blocking: frames queue on the connection until it is established, and a
//! failed connect reports the peer lost.

use std::collections::{HashMap, HashSet, VecDeque};
use std::io::{self, IoSlice, Read, Write};
use std::net::{SocketAddr, ToSocketAddrs};
use std::sync::Arc;
use std::time::Duration;

use mio::net::{TcpListener, TcpStream};
use mio::{Events, Interest, Poll, Registry, Token};

use super::{Event, NodeId, Payload, Transport, TransportError, Waker};
use crate::pool::BufferPool;
use crate::wire::{Header, Kind, HEADER_BYTES};

const WAKER: Token = Token(0);
const LISTENER: Token = Token(1);
const FIRST_CONN: usize = 2;
const READ_BUF_BYTES: usize = 256 << 10;
/// Payloads of at least this many bytes are read straight into their pool buffer.
const DIRECT_BYTES: usize = 16 << 10;
/// After a large payload, the next read into the staging buffer asks for at most this many
/// bytes, so that little of a following large payload is read into the staging buffer.
const SMALL_READ_BYTES: usize = 4 << 10;
/// At most this many frames go into one `writev`.
const MAX_IOVECS: usize = 64;

struct OutItem {
    header: [u8; HEADER_BYTES],
    payload: Payload,
}

impl OutItem {
    fn total(&self) -> usize {
        HEADER_BYTES + self.payload.len()
    }
}

struct Conn {
    stream: TcpStream,
    /// Known once the peer's `Hello` arrived (accepted connections) or from the start
    /// (connections this side opened).
    peer: Option<NodeId>,
    out: VecDeque<OutItem>,
    /// Bytes of `out.front()` already written.
    out_pos: usize,
    rbuf: Vec<u8>,
    rstart: usize,
    rend: usize,
    /// A frame whose payload is still arriving: header, its pool buffer, bytes filled.
    partial: Option<(Header, Vec<u8>, usize)>,
    /// How many bytes the next read into `rbuf` asks for.
    read_cap: usize,
    /// A non-blocking connect not yet established: nothing is written until it is.
    connecting: Option<String>,
    /// Bytes written before the first frame (the transport's preamble, on connections it
    /// opens), and how many of them are written.
    preamble: Vec<u8>,
    preamble_pos: usize,
}

/// See the module documentation.
pub struct TcpTransport {
    id: NodeId,
    /// Its own poll, or `None` when the sockets are polled by the caller's event loop
    /// ([`TcpTransport::driven`]).
    poll: Option<Poll>,
    registry: Registry,
    /// The token of the first connection; connection `i` has token `first_conn + i`.
    first_conn: usize,
    mio_events: Events,
    waker: Arc<dyn Waker>,
    /// Written first on every connection this transport opens ([`TcpTransport::set_preamble`]).
    preamble: Vec<u8>,
    listener: Option<TcpListener>,
    /// Connections by token index − `FIRST_CONN`; `None` marks a closed slot.
    conns: Vec<Option<Conn>>,
    by_peer: HashMap<NodeId, usize>,
    /// Frames for peers whose connection is not up yet (they connect to us).
    pending: HashMap<NodeId, VecDeque<OutItem>>,
    /// Peers whose connection failed; sends to them fail until they connect again.
    lost: HashSet<NodeId>,
    /// Connections with queued output, flushed at the end of the turn.
    dirty: Vec<usize>,
    /// Events produced outside `poll` (a write that failed), reported by the next `poll`.
    deferred: Vec<Event>,
    pool: BufferPool,
}

impl std::fmt::Debug for TcpTransport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "TcpTransport(node {}, {} peers)",
            self.id,
            self.by_peer.len()
        )
    }
}

struct MioWaker(Arc<mio::Waker>);

impl Waker for MioWaker {
    fn wake(&self) {
        let _ = self.0.wake();
    }
}

impl TcpTransport {
    /// A transport that listens on `addr` (port 0 picks a free port; see [`Self::local_addr`]).
    pub fn bind(id: NodeId, addr: SocketAddr, pool: BufferPool) -> io::Result<TcpTransport> {
        let mut t = TcpTransport::unbound(id, pool)?;
        let mut listener = TcpListener::bind(addr)?;
        t.registry
            .register(&mut listener, LISTENER, Interest::READABLE)?;
        t.listener = Some(listener);
        Ok(t)
    }

    /// A transport that only connects out (a plan runner).
    pub fn unbound(id: NodeId, pool: BufferPool) -> io::Result<TcpTransport> {
        let poll = Poll::new()?;
        let waker = Arc::new(mio::Waker::new(poll.registry(), WAKER)?);
        let registry = poll.registry().try_clone()?;
        TcpTransport::new(
            id,
            Some(poll),
            registry,
            FIRST_CONN,
            Arc::new(MioWaker(waker)),
            pool,
        )
    }

    /// A transport whose sockets another event loop polls: they are registered with
    /// `registry` under tokens from `first_token` up, and the loop hands each of their events
    /// to [`TcpTransport::ready`]; `poll` then only returns the events produced in between
    /// (frames to this node itself, failed writes) and never waits. `waker` wakes that loop.
    /// It has no listener: the loop accepts connections and gives them over with
    /// [`TcpTransport::adopt`]. For an engine driven by that loop ([`crate::Engine::driven`]).
    pub fn driven(
        id: NodeId,
        registry: &Registry,
        first_token: usize,
        waker: Arc<dyn Waker>,
        pool: BufferPool,
    ) -> io::Result<TcpTransport> {
        TcpTransport::new(id, None, registry.try_clone()?, first_token, waker, pool)
    }

    fn new(
        id: NodeId,
        poll: Option<Poll>,
        registry: Registry,
        first_conn: usize,
        waker: Arc<dyn Waker>,
        pool: BufferPool,
    ) -> io::Result<TcpTransport> {
        if u32::try_from(id).is_err() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("node id {id} does not fit the 32 bits of a Hello frame"),
            ));
        }
        let events = if poll.is_some() { 256 } else { 0 };
        Ok(TcpTransport {
            id,
            poll,
            registry,
            first_conn,
            mio_events: Events::with_capacity(events),
            waker,
            preamble: Vec::new(),
            listener: None,
            conns: Vec::new(),
            by_peer: HashMap::new(),
            pending: HashMap::new(),
            lost: HashSet::new(),
            dirty: Vec::new(),
            deferred: Vec::new(),
            pool,
        })
    }

    /// Bytes written first on every connection this transport opens from now on, before its
    /// `Hello`: what a port shared with another protocol tells engine connections by.
    pub fn set_preamble(&mut self, bytes: &[u8]) {
        self.preamble = bytes.to_vec();
    }

    /// Takes over a connection accepted elsewhere, of which `read` was already read (past
    /// any preamble): the frames among those bytes are appended to `events` at once, the
    /// rest as they come.
    pub fn adopt(
        &mut self,
        stream: TcpStream,
        read: &[u8],
        events: &mut Vec<Event>,
    ) -> io::Result<()> {
        let idx = self.add_conn(stream, None)?;
        let conn = self.conns[idx].as_mut().expect("just added");
        if read.len() > conn.rbuf.len() {
            conn.rbuf.resize(read.len(), 0);
        }
        conn.rbuf[..read.len()].copy_from_slice(read);
        conn.rend = read.len();
        self.read_in(idx, events);
        Ok(())
    }

    /// One readiness event of the caller's poll for a socket of this transport (a driven
    /// one): reads what came (appending its frames to `events`) and writes what waits; a
    /// connection lost is reported by the next `poll`, as every event made outside one.
    /// Events of tokens it does not own are ignored.
    pub fn ready(&mut self, ev: &mio::event::Event, events: &mut Vec<Event>) {
        let Some(idx) = ev.token().0.checked_sub(self.first_conn) else {
            return;
        };
        self.conn_event(idx, ev, events);
    }

    fn conn_event(&mut self, idx: usize, ev: &mio::event::Event, events: &mut Vec<Event>) {
        let connecting = self
            .conns
            .get(idx)
            .and_then(|c| c.as_ref())
            .is_some_and(|c| c.connecting.is_some());
        if connecting {
            // Finish (or fail) the connect first, for a clear reason.
            self.write_out(idx);
        }
        if ev.is_readable() || ev.is_read_closed() || ev.is_error() {
            self.read_in(idx, events);
        }
        if ev.is_writable() {
            self.write_out(idx);
        }
    }

    /// The address the listener is bound to.
    pub fn local_addr(&self) -> Option<SocketAddr> {
        self.listener.as_ref().and_then(|l| l.local_addr().ok())
    }

    fn add_conn(&mut self, mut stream: TcpStream, peer: Option<NodeId>) -> io::Result<usize> {
        stream.set_nodelay(true)?;
        let idx = match self.conns.iter().position(|c| c.is_none()) {
            Some(i) => i,
            None => {
                self.conns.push(None);
                self.conns.len() - 1
            }
        };
        self.registry.register(
            &mut stream,
            Token(idx + self.first_conn),
            Interest::READABLE | Interest::WRITABLE,
        )?;
        self.conns[idx] = Some(Conn {
            stream,
            peer,
            out: VecDeque::new(),
            out_pos: 0,
            rbuf: vec![0u8; READ_BUF_BYTES],
            rstart: 0,
            rend: 0,
            partial: None,
            read_cap: READ_BUF_BYTES,
            connecting: None,
            preamble: Vec::new(),
            preamble_pos: 0,
        });
        Ok(idx)
    }

    /// Makes `idx` the connection of `peer` and moves frames waiting for it onto it.
    /// Binds connection `idx` to `peer`; true if the peer was lost before.
    fn bind_peer(&mut self, idx: usize, peer: NodeId) -> bool {
        if let Some(old) = self.by_peer.insert(peer, idx) {
            if old != idx {
                self.close(
                    old,
                    "replaced by a new connection from the same peer",
                    false,
                );
            }
        }
        let back = self.lost.remove(&peer);
        let conn = self.conns[idx].as_mut().expect("live connection");
        conn.peer = Some(peer);
        if let Some(q) = self.pending.remove(&peer) {
            conn.out.extend(q);
            self.dirty.push(idx);
        }
        back
    }

    fn close(&mut self, idx: usize, reason: &str, report: bool) {
        let Some(mut conn) = self.conns[idx].take() else {
            return;
        };
        let _ = self.registry.deregister(&mut conn.stream);
        for item in conn.out.drain(..) {
            item.payload.recycle(&self.pool);
        }
        if let Some((_, buf, _)) = conn.partial.take() {
            self.pool.put(buf);
        }
        if let Some(peer) = conn.peer {
            if self.by_peer.get(&peer) == Some(&idx) {
                self.by_peer.remove(&peer);
                self.lost.insert(peer);
                if report {
                    self.deferred.push(Event::PeerLost {
                        peer,
                        reason: reason.to_string(),
                    });
                }
            }
        }
    }

    /// Writes as much of `idx`'s queue as the socket takes.
    fn write_out(&mut self, idx: usize) {
        let Some(conn) = self.conns[idx].as_mut() else {
            return;
        };
        if let Some(addr) = &conn.connecting {
            // Established once writable with no error and a peer address.
            match conn.stream.take_error() {
                Ok(None) => {}
                Ok(Some(e)) | Err(e) => {
                    let reason = format!("connect to {addr} failed: {e}");
                    self.close(idx, &reason, true);
                    return;
                }
            }
            match conn.stream.peer_addr() {
                Ok(_) => conn.connecting = None,
                Err(e) if e.kind() == io::ErrorKind::NotConnected => return,
                Err(e) => {
                    let reason = format!("connect to {addr} failed: {e}");
                    self.close(idx, &reason, true);
                    return;
                }
            }
        }
        let result = write_preamble(conn).and_then(|()| {
            if conn.preamble_pos < conn.preamble.len() {
                Ok(())
            } else {
                write_queue(conn, &self.pool)
            }
        });
        if let Err(e) = result {
            let reason = format!("write failed: {e}");
            self.close(idx, &reason, true);
        }
    }

    fn read_in(&mut self, idx: usize, events: &mut Vec<Event>) {
        let mut hellos = Vec::new();
        let result = {
            let Some(conn) = self.conns[idx].as_mut() else {
                return;
            };
            read_frames(conn, &self.pool, events, &mut hellos)
        };
        for peer in hellos {
            if self.bind_peer(idx, peer) {
                events.push(Event::PeerBack { peer });
            }
        }
        if let Err(reason) = result {
            self.close(idx, &reason, true);
        }
    }

    fn accept_all(&mut self) {
        loop {
            let Some(listener) = self.listener.as_ref() else {
                return;
            };
            match listener.accept() {
                Ok((stream, _)) => {
                    let _ = self.add_conn(stream, None);
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
                Err(_) => return,
            }
        }
    }
}

/// Writes what is left of the connection's preamble, if any.
fn write_preamble(conn: &mut Conn) -> io::Result<()> {
    while conn.preamble_pos < conn.preamble.len() {
        match conn.stream.write(&conn.preamble[conn.preamble_pos..]) {
            Ok(0) => return Err(io::Error::new(io::ErrorKind::WriteZero, "wrote 0 bytes")),
            Ok(n) => conn.preamble_pos += n,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(()),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

fn write_queue(conn: &mut Conn, pool: &BufferPool) -> io::Result<()> {
    while !conn.out.is_empty() {
        let mut iov = [IoSlice::new(&[]); 2 * MAX_IOVECS];
        let mut used = 0;
        for (i, item) in conn.out.iter().take(MAX_IOVECS).enumerate() {
            let skip = if i == 0 { conn.out_pos } else { 0 };
            if skip < HEADER_BYTES {
                iov[used] = IoSlice::new(&item.header[skip..]);
                used += 1;
                if !item.payload.is_empty() {
                    iov[used] = IoSlice::new(item.payload.as_slice());
                    used += 1;
                }
            } else {
                iov[used] = IoSlice::new(&item.payload.as_slice()[skip - HEADER_BYTES..]);
                used += 1;
            }
        }
        let n = match conn.stream.write_vectored(&iov[..used]) {
            Ok(0) => return Err(io::Error::new(io::ErrorKind::WriteZero, "wrote 0 bytes")),
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(()),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        let mut left = n;
        while left > 0 {
            let front = conn
                .out
                .front()
                .expect("written bytes belong to queued frames");
            let rest = front.total() - conn.out_pos;
            if left >= rest {
                left -= rest;
                conn.out_pos = 0;
                if let Some(item) = conn.out.pop_front() {
                    item.payload.recycle(pool);
                }
            } else {
                conn.out_pos += left;
                left = 0;
            }
        }
    }
    Ok(())
}

/// Reads until the socket would block, appending complete frames to `events`. `Hello` frames
/// name the peer and are returned in `hellos` instead. An `Err` is the reason to close.
fn read_frames(
    conn: &mut Conn,
    pool: &BufferPool,
    events: &mut Vec<Event>,
    hellos: &mut Vec<NodeId>,
) -> Result<(), String> {
    let mut emit = |conn: &mut Conn, header: Header, payload: Vec<u8>| -> Result<(), String> {
        if header.kind == Kind::Hello {
            conn.peer = Some(header.edge as NodeId);
            hellos.push(header.edge as NodeId);
            return Ok(());
        }
        let Some(from) = conn.peer else {
            return Err("frame before hello".into());
        };
        events.push(Event::Frame {
            from,
            header,
            payload,
        });
        Ok(())
    };
    loop {
        if let Some((header, mut buf, mut filled)) = conn.partial.take() {
            match conn.stream.read(&mut buf[filled..]) {
                Ok(0) => {
                    pool.put(buf);
                    return Err("connection closed by peer".into());
                }
                Ok(n) => {
                    filled += n;
                    if filled == buf.len() {
                        emit(conn, header, buf)?;
                    } else {
                        conn.partial = Some((header, buf, filled));
                    }
                    continue;
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    conn.partial = Some((header, buf, filled));
                    return Ok(());
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {
                    conn.partial = Some((header, buf, filled));
                    continue;
                }
                Err(e) => {
                    pool.put(buf);
                    return Err(format!("read failed: {e}"));
                }
            }
        }
        // Cut whole frames out of the staging buffer.
        while conn.rend - conn.rstart >= HEADER_BYTES {
            let header = Header::decode(&conn.rbuf[conn.rstart..conn.rend])
                .map_err(|e| format!("protocol error: {e}"))?;
            let len = header.payload_bytes as usize;
            let avail = conn.rend - conn.rstart - HEADER_BYTES;
            if len < DIRECT_BYTES && avail < len {
                // A small frame not complete yet: wait for the rest in the staging buffer.
                break;
            }
            conn.rstart += HEADER_BYTES;
            let mut buf = pool.take(len);
            let have = avail.min(len);
            buf[..have].copy_from_slice(&conn.rbuf[conn.rstart..conn.rstart + have]);
            conn.rstart += have;
            conn.read_cap = if len >= DIRECT_BYTES {
                SMALL_READ_BYTES
            } else {
                READ_BUF_BYTES
            };
            if have == len {
                emit(conn, header, buf)?;
            } else {
                conn.partial = Some((header, buf, have));
                break;
            }
        }
        if conn.partial.is_some() {
            continue;
        }
        if conn.rstart == conn.rend {
            conn.rstart = 0;
            conn.rend = 0;
        } else if conn.rstart > 0 {
            conn.rbuf.copy_within(conn.rstart..conn.rend, 0);
            conn.rend -= conn.rstart;
            conn.rstart = 0;
        }
        let rend = conn.rend;
        let want = conn.read_cap.max(HEADER_BYTES);
        let end = (rend + want).min(conn.rbuf.len());
        match conn.stream.read(&mut conn.rbuf[rend..end]) {
            Ok(0) => return Err("connection closed by peer".into()),
            Ok(n) => {
                conn.rend += n;
                // A full short read: more is waiting, go back to large reads.
                if n == end - rend {
                    conn.read_cap = READ_BUF_BYTES;
                }
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(()),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(format!("read failed: {e}")),
        }
    }
}

impl Transport for TcpTransport {
    fn local(&self) -> NodeId {
        self.id
    }

    fn send(
        &mut self,
        peer: NodeId,
        header: Header,
        payload: Payload,
    ) -> Result<(), TransportError> {
        if peer == self.id {
            // A plan edge between two vertices of this node (a cache agent that is also a
            // helper): the frame is delivered by the next `poll`, as from a peer.
            self.deferred.push(Event::Frame {
                from: self.id,
                header,
                payload: payload.into_owned(&self.pool),
            });
            return Ok(());
        }
        let item = OutItem {
            header: header.encode(),
            payload,
        };
        if let Some(&idx) = self.by_peer.get(&peer) {
            let conn = self.conns[idx].as_mut().expect("mapped connection is live");
            if conn.out.is_empty() {
                self.dirty.push(idx);
            }
            conn.out.push_back(item);
            return Ok(());
        }
        if self.lost.contains(&peer) {
            return Err(TransportError::PeerLost {
                peer,
                reason: "connection lost".into(),
            });
        }
        self.pending.entry(peer).or_default().push_back(item);
        Ok(())
    }

    fn flush(&mut self) {
        let mut dirty = std::mem::take(&mut self.dirty);
        for &idx in &dirty {
            self.write_out(idx);
        }
        dirty.clear();
        if self.dirty.is_empty() {
            self.dirty = dirty;
        }
    }

    fn poll(
        &mut self,
        events: &mut Vec<Event>,
        timeout: Option<Duration>,
    ) -> Result<(), TransportError> {
        let Some(poll) = self.poll.as_mut() else {
            // Driven: the caller's loop polls the sockets.
            events.append(&mut self.deferred);
            return Ok(());
        };
        let timeout = if self.deferred.is_empty() {
            timeout
        } else {
            Some(Duration::ZERO)
        };
        let mut mio_events = std::mem::replace(&mut self.mio_events, Events::with_capacity(0));
        let r = poll.poll(&mut mio_events, timeout);
        if let Err(e) = r {
            self.mio_events = mio_events;
            if e.kind() == io::ErrorKind::Interrupted {
                return Ok(());
            }
            return Err(TransportError::Closed {
                reason: format!("poll failed: {e}"),
            });
        }
        for ev in mio_events.iter() {
            match ev.token() {
                WAKER => {}
                LISTENER => self.accept_all(),
                Token(t) => self.conn_event(t - self.first_conn, ev, events),
            }
        }
        self.mio_events = mio_events;
        events.append(&mut self.deferred);
        Ok(())
    }

    fn waker(&self) -> Arc<dyn Waker> {
        Arc::clone(&self.waker)
    }

    fn connect(&mut self, peer: NodeId, addr: &str) -> Result<(), TransportError> {
        let fail = |reason: String| TransportError::PeerLost { peer, reason };
        let sa = addr
            .to_socket_addrs()
            .map_err(|e| fail(format!("bad address {addr:?}: {e}")))?
            .next()
            .ok_or_else(|| fail(format!("address {addr:?} resolves to nothing")))?;
        // Non-blocking: the engine thread never waits for the handshake.
        let stream =
            TcpStream::connect(sa).map_err(|e| fail(format!("connect to {sa} failed: {e}")))?;
        let idx = self
            .add_conn(stream, Some(peer))
            .map_err(|e| fail(e.to_string()))?;
        let hello = OutItem {
            header: Header::new(Kind::Hello, 0, self.id as u32, 0, 0)
                .expect("empty payload")
                .encode(),
            payload: Payload::Empty,
        };
        let conn = self.conns[idx].as_mut().expect("just added");
        conn.connecting = Some(sa.to_string());
        conn.preamble = self.preamble.clone();
        conn.out.push_back(hello);
        self.bind_peer(idx, peer);
        self.dirty.push(idx);
        Ok(())
    }
}
