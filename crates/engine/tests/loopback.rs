//! A TCP transport delivers a frame sent to its own node id (a plan edge between two vertices
//! on one node, as a cache agent that is also a helper of its repair) on the next poll.

use std::sync::Arc;
use std::time::Duration;

use engine::transport::{Event, Payload, TcpTransport, Transport};
use engine::wire::{Header, Kind};
use engine::BufferPool;

#[test]
fn tcp_frame_to_self_arrives_once_with_its_bytes() {
    let pool = BufferPool::new();
    let mut t = TcpTransport::bind(7, "127.0.0.1:0".parse().unwrap(), pool).unwrap();
    let shared = Arc::new((0u8..100).collect::<Vec<u8>>());
    for (slice, payload) in [
        (0, Payload::Owned(vec![9u8; 33])),
        (1, Payload::Shared(shared.clone(), 10..20)),
    ] {
        let h = Header::new(Kind::Data, 42, 3, slice, payload.len()).unwrap();
        t.send(7, h, payload).unwrap();
    }
    let mut events = Vec::new();
    t.poll(&mut events, Some(Duration::from_secs(5))).unwrap();
    assert_eq!(events.len(), 2, "{events:?}");
    let got: Vec<(u32, Vec<u8>)> = events
        .into_iter()
        .map(|e| match e {
            Event::Frame {
                from,
                header,
                payload,
            } => {
                assert_eq!((from, header.op, header.edge), (7, 42, 3));
                (header.slice, payload)
            }
            other => panic!("unexpected {other:?}"),
        })
        .collect();
    assert_eq!(got[0], (0, vec![9u8; 33]));
    assert_eq!(got[1], (1, (10u8..20).collect::<Vec<u8>>()));
    // Nothing more: the frames are not delivered twice.
    let mut more = Vec::new();
    t.poll(&mut more, Some(Duration::from_millis(20))).unwrap();
    assert!(more.is_empty(), "{more:?}");
}
