//! The engine's transport on a cache node: its frames travel as peer messages
//! ([`super::peer::PLAN_FRAME`]) on the chunks lane of the first event loop's links, the loop
//! that drives the engine (`front::Loops::drive`). The node keeps one set of connections per
//! pair of nodes for everything: cache messages, plan frames and heartbeats.
//!
//! The transport itself owns no socket. What the engine sends waits in [`LaneTransport::out`]
//! until the loop, after the engine's turn, queues it on its links; what the loop read of plan
//! frames, and what it saw of the links ([`super::links::PlanLink`]), it hands to the turn as
//! events. A frame to the node itself (an edge between two of its vertices) comes back by the
//! next `poll`, as from a peer.

use std::sync::Arc;
use std::time::Duration;

use engine::transport::{Event, NodeId, Payload, Transport, TransportError, Waker};
use engine::wire::Header;
use engine::BufferPool;

/// See the module documentation.
pub struct LaneTransport {
    id: NodeId,
    nodes: usize,
    waker: Arc<dyn Waker>,
    pool: BufferPool,
    /// Frames for other nodes, in the order the engine sent them: the loop takes them.
    pub out: Vec<(NodeId, Header, Payload)>,
    /// Frames to this node itself, for the next `poll`.
    own: Vec<Event>,
}

impl std::fmt::Debug for LaneTransport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "LaneTransport(node {} of {})", self.id, self.nodes)
    }
}

impl LaneTransport {
    /// Node `id` of a cluster of `nodes`; `waker` wakes the loop that drives the engine.
    pub fn new(id: NodeId, nodes: usize, waker: Arc<dyn Waker>, pool: BufferPool) -> Self {
        LaneTransport {
            id,
            nodes,
            waker,
            pool,
            out: Vec::new(),
            own: Vec::new(),
        }
    }

    /// The engine's buffer pool: a received frame's payload is copied into one of its buffers,
    /// which the engine gives back when done with it.
    pub fn pool(&self) -> &BufferPool {
        &self.pool
    }
}

impl Transport for LaneTransport {
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
            self.own.push(Event::Frame {
                from: self.id,
                header,
                payload: payload.into_owned(&self.pool),
            });
            return Ok(());
        }
        if peer >= self.nodes {
            return Err(TransportError::UnknownPeer { peer });
        }
        self.out.push((peer, header, payload));
        Ok(())
    }

    /// Nothing to write here: the loop puts [`LaneTransport::out`] on its links after the turn.
    fn flush(&mut self) {}

    /// Never waits: the loop polls the sockets.
    fn poll(
        &mut self,
        events: &mut Vec<Event>,
        _timeout: Option<Duration>,
    ) -> Result<(), TransportError> {
        events.append(&mut self.own);
        Ok(())
    }

    fn waker(&self) -> Arc<dyn Waker> {
        Arc::clone(&self.waker)
    }

    /// Nothing to open: the links connect when a frame is queued. (The engine forgets that it
    /// lost `peer` when it is asked to connect, which is what the node wants of a peer that came
    /// back.)
    fn connect(&mut self, peer: NodeId, _addr: &str) -> Result<(), TransportError> {
        if peer >= self.nodes {
            return Err(TransportError::UnknownPeer { peer });
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use engine::wire::Kind;

    struct NoWake;
    impl Waker for NoWake {
        fn wake(&self) {}
    }

    fn transport() -> LaneTransport {
        LaneTransport::new(1, 3, Arc::new(NoWake), BufferPool::new())
    }

    /// Frames to other nodes wait for the loop, in order; a frame to the node itself comes back
    /// by the next poll as from itself (a shared payload copied); an unknown node is refused.
    #[test]
    fn frames_wait_for_the_loop_and_the_node_hears_its_own() {
        let mut t = transport();
        let h = |op| Header::new(Kind::Data, op, 0, 0, 3).unwrap();
        t.send(2, h(1), Payload::Owned(b"two".to_vec())).unwrap();
        t.send(0, h(2), Payload::Owned(b"one".to_vec())).unwrap();
        let shared = Arc::new(b"xownx".to_vec());
        t.send(1, h(3), Payload::Shared(shared, 1..4)).unwrap();
        assert!(matches!(
            t.send(3, h(4), Payload::Empty),
            Err(TransportError::UnknownPeer { peer: 3 })
        ));
        let order: Vec<(NodeId, u64)> = t.out.iter().map(|(p, h, _)| (*p, h.op)).collect();
        assert_eq!(order, vec![(2, 1), (0, 2)]);
        let mut events = Vec::new();
        t.poll(&mut events, None).unwrap();
        assert_eq!(events.len(), 1);
        let Event::Frame {
            from,
            header,
            payload,
        } = &events[0]
        else {
            panic!("{events:?}")
        };
        assert_eq!((*from, header.op, &payload[..]), (1, 3, &b"own"[..]));
        events.clear();
        t.poll(&mut events, Some(Duration::from_secs(60))).unwrap();
        assert!(events.is_empty(), "a poll never waits nor repeats");
        assert!(t.connect(2, "ignored").is_ok());
        assert!(t.connect(9, "ignored").is_err());
    }
}
