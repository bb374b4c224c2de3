//! The TCP transport's framing, driven from a plain socket: frames cut into many writes and
//! frames coalesced into one write come out whole and in order, for payloads below and above
//! the direct-read threshold; a header over the size limit, a bad magic and a frame before
//! `Hello` close the connection with a reason; a peer lost and connected again is reported back.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use engine::transport::Event;
use engine::wire::{Header, Kind, HEADER_BYTES, MAX_PAYLOAD_BYTES};
use engine::{BufferPool, NodeId, TcpTransport, Transport};

fn listener() -> (TcpTransport, SocketAddr) {
    let any: SocketAddr = "127.0.0.1:0".parse().unwrap();
    let t = TcpTransport::bind(0, any, BufferPool::new()).unwrap();
    let addr = t.local_addr().unwrap();
    (t, addr)
}

fn frame(kind: Kind, op: u64, edge: u32, slice: u32, payload: &[u8]) -> Vec<u8> {
    let mut v = Header::new(kind, op, edge, slice, payload.len())
        .unwrap()
        .encode()
        .to_vec();
    v.extend_from_slice(payload);
    v
}

fn hello(id: NodeId) -> Vec<u8> {
    frame(Kind::Hello, 0, id as u32, 0, &[])
}

/// Polls until `n` events arrived (or 10 s passed).
fn events(t: &mut TcpTransport, n: usize) -> Vec<Event> {
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut out = Vec::new();
    while out.len() < n && Instant::now() < deadline {
        t.poll(&mut out, Some(Duration::from_millis(50))).unwrap();
    }
    out
}

/// A payload whose bytes depend on `seed` and the position.
fn payload(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect()
}

fn expect_frame(ev: &Event, op: u64, edge: u32, slice: u32, want: &[u8]) {
    match ev {
        Event::Frame {
            from,
            header,
            payload,
        } => {
            assert_eq!(*from, 7);
            assert_eq!(
                (header.kind, header.op, header.edge, header.slice),
                (Kind::Data, op, edge, slice)
            );
            assert_eq!(payload.len(), want.len(), "op {op}");
            assert!(payload == want, "payload of op {op} differs");
        }
        other => panic!("expected a frame, got {other:?}"),
    }
}

#[test]
fn frames_split_over_many_writes_arrive_whole() {
    let (mut t, addr) = listener();
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_nodelay(true).unwrap();
    let sizes = [0usize, 1, 100, 16 << 10, 100 << 10, 300 << 10];
    let mut bytes = hello(7);
    for (i, &n) in sizes.iter().enumerate() {
        bytes.extend(frame(
            Kind::Data,
            i as u64,
            3,
            i as u32,
            &payload(n, i as u8),
        ));
    }
    // Pieces of odd sizes: the header itself arrives in parts, and so does every payload;
    // the transport reads between the writes, so it sees frames cut mid-way.
    let mut got = Vec::new();
    let mut pos = 0;
    let mut step = 1;
    while pos < bytes.len() {
        let end = (pos + step).min(bytes.len());
        s.write_all(&bytes[pos..end]).unwrap();
        s.flush().unwrap();
        pos = end;
        step = step * 3 % 40_009 + 1;
        t.poll(&mut got, Some(Duration::from_millis(1))).unwrap();
    }
    let missing = sizes.len() - got.len();
    got.extend(events(&mut t, missing));
    assert_eq!(got.len(), sizes.len());
    for (i, (ev, &n)) in got.iter().zip(&sizes).enumerate() {
        expect_frame(ev, i as u64, 3, i as u32, &payload(n, i as u8));
    }
}

#[test]
fn frames_coalesced_into_one_write_arrive_in_order() {
    let (mut t, addr) = listener();
    let mut s = TcpStream::connect(addr).unwrap();
    // Many small frames and a few large ones back to back, in one write.
    let sizes: Vec<usize> = (0..300)
        .map(|i| match i % 50 {
            0 => 20 << 10,
            25 => 70 << 10,
            _ => i % 17,
        })
        .collect();
    let mut bytes = hello(7);
    for (i, &n) in sizes.iter().enumerate() {
        bytes.extend(frame(Kind::Data, i as u64, 1, 0, &payload(n, i as u8)));
    }
    s.write_all(&bytes).unwrap();
    let got = events(&mut t, sizes.len());
    assert_eq!(got.len(), sizes.len());
    for (i, (ev, &n)) in got.iter().zip(&sizes).enumerate() {
        expect_frame(ev, i as u64, 1, 0, &payload(n, i as u8));
    }
}

/// Sends `bytes` after a valid Hello and returns the reason the transport gives for closing.
fn refused(bytes: &[u8]) -> String {
    let (mut t, addr) = listener();
    let mut s = TcpStream::connect(addr).unwrap();
    s.write_all(&hello(7)).unwrap();
    s.write_all(bytes).unwrap();
    let got = events(&mut t, 1);
    match got.first() {
        Some(Event::PeerLost { peer, reason }) => {
            assert_eq!(*peer, 7);
            reason.clone()
        }
        other => panic!("expected the connection closed, got {other:?}"),
    }
}

#[test]
fn a_header_over_the_size_limit_closes_the_connection() {
    let mut h = Header::new(Kind::Data, 1, 0, 0, 0).unwrap().encode();
    h[4..8].copy_from_slice(&(MAX_PAYLOAD_BYTES as u32 + 1).to_le_bytes());
    let reason = refused(&h);
    assert!(reason.contains("exceeds the limit"), "{reason}");
    // The largest allowed header is accepted: the transport waits for its payload.
    let (mut t, addr) = listener();
    let mut s = TcpStream::connect(addr).unwrap();
    s.write_all(&hello(7)).unwrap();
    let h = Header::new(Kind::Data, 1, 0, 0, MAX_PAYLOAD_BYTES)
        .unwrap()
        .encode();
    s.write_all(&h).unwrap();
    s.write_all(&[5u8; 1000]).unwrap();
    let mut got = Vec::new();
    t.poll(&mut got, Some(Duration::from_millis(200))).unwrap();
    assert!(got.is_empty(), "{got:?}");
}

#[test]
fn a_bad_header_or_a_frame_before_hello_closes_the_connection() {
    let mut bad = frame(Kind::Data, 1, 0, 0, b"x");
    bad[0] = b'X';
    let reason = refused(&bad);
    assert!(reason.contains("magic"), "{reason}");
    // Before Hello the peer is unknown, so no one is told: the connection is just closed.
    let (mut t, addr) = listener();
    let mut s = TcpStream::connect(addr).unwrap();
    s.write_all(&frame(Kind::Data, 1, 0, 0, b"x")).unwrap();
    let mut got = Vec::new();
    t.poll(&mut got, Some(Duration::from_millis(200))).unwrap();
    t.poll(&mut got, Some(Duration::from_millis(50))).unwrap();
    assert!(got.is_empty(), "{got:?}");
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let mut b = [0u8; HEADER_BYTES];
    match s.read(&mut b) {
        Ok(0) => {}
        Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => {}
        other => panic!("expected the connection closed, got {other:?}"),
    }
}

/// A peer lost and connected again is reported back once its `Hello` comes on the new
/// connection (a restarted node connects to the nodes with smaller ids and may send no frame
/// for a while); its first connection is not reported.
#[test]
fn a_peer_that_connects_again_after_it_was_lost_is_reported_back() {
    let (mut t, addr) = listener();
    let mut first = TcpStream::connect(addr).unwrap();
    first.write_all(&hello(7)).unwrap();
    let mut got = Vec::new();
    t.poll(&mut got, Some(Duration::from_millis(200))).unwrap();
    assert!(got.is_empty(), "a first connection is not news: {got:?}");
    drop(first);
    match events(&mut t, 1).first() {
        Some(Event::PeerLost { peer: 7, .. }) => {}
        other => panic!("expected peer 7 lost, got {other:?}"),
    }
    let mut again = TcpStream::connect(addr).unwrap();
    again.write_all(&hello(7)).unwrap();
    match events(&mut t, 1).first() {
        Some(Event::PeerBack { peer: 7 }) => {}
        other => panic!("expected peer 7 back, got {other:?}"),
    }
    // Frames for it are taken again.
    let h = Header::new(Kind::Data, 5, 1, 0, 3).unwrap();
    t.send(7, h, engine::transport::Payload::Owned(b"abc".to_vec()))
        .unwrap();
    t.flush();
    again
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    let mut b = vec![0u8; HEADER_BYTES + 3];
    again.read_exact(&mut b).unwrap();
    assert_eq!(&b[HEADER_BYTES..], b"abc");
}
