//! The in-memory transport: engines in one process joined by channels. Used by tests and
//! simulations; a node can be killed to test failure handling.

use std::collections::HashMap;
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use super::{Event, NodeId, Payload, Transport, TransportError, Waker};
use crate::pool::BufferPool;
use crate::wire::Header;

enum Msg {
    Frame {
        from: NodeId,
        header: Header,
        payload: Vec<u8>,
    },
    PeerLost {
        peer: NodeId,
    },
    Wake,
    Killed,
}

/// The switch every in-memory transport is plugged into.
#[derive(Clone, Default)]
pub struct MemHub {
    ports: Arc<Mutex<HashMap<NodeId, Sender<Msg>>>>,
}

impl std::fmt::Debug for MemHub {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let ids: Vec<NodeId> = self
            .ports
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .keys()
            .copied()
            .collect();
        write!(f, "MemHub({ids:?})")
    }
}

impl MemHub {
    pub fn new() -> MemHub {
        MemHub::default()
    }

    /// Plugs in a new node. Panics if `id` is taken.
    pub fn attach(&self, id: NodeId, pool: BufferPool) -> MemTransport {
        let (tx, rx) = mpsc::channel();
        let prev = self
            .ports
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(id, tx.clone());
        assert!(prev.is_none(), "node id {id} attached twice");
        MemTransport {
            id,
            hub: self.clone(),
            rx,
            self_tx: tx,
            pool,
        }
    }

    /// Cuts `id` off as if its process died: every other node sees `PeerLost`, and the dead
    /// node's own engine stops.
    pub fn kill(&self, id: NodeId) {
        let mut ports = self.ports.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(tx) = ports.remove(&id) {
            let _ = tx.send(Msg::Killed);
        }
        for tx in ports.values() {
            let _ = tx.send(Msg::PeerLost { peer: id });
        }
    }
}

/// One node's port on a [`MemHub`]. A send copies the payload once, into a pool buffer of
/// the receiver, as a network would.
pub struct MemTransport {
    id: NodeId,
    hub: MemHub,
    rx: Receiver<Msg>,
    self_tx: Sender<Msg>,
    pool: BufferPool,
}

impl std::fmt::Debug for MemTransport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "MemTransport({})", self.id)
    }
}

struct MemWaker(Mutex<Sender<Msg>>);

impl Waker for MemWaker {
    fn wake(&self) {
        let _ = self
            .0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .send(Msg::Wake);
    }
}

impl MemTransport {
    fn deliver(&self, msg: Msg, events: &mut Vec<Event>) -> Result<(), TransportError> {
        match msg {
            Msg::Frame {
                from,
                header,
                payload,
            } => events.push(Event::Frame {
                from,
                header,
                payload,
            }),
            Msg::PeerLost { peer } => events.push(Event::PeerLost {
                peer,
                reason: "peer killed".into(),
            }),
            Msg::Wake => {}
            Msg::Killed => {
                return Err(TransportError::Closed {
                    reason: format!("node {} was killed", self.id),
                })
            }
        }
        Ok(())
    }
}

impl Transport for MemTransport {
    fn local(&self) -> NodeId {
        self.id
    }

    fn send(
        &mut self,
        peer: NodeId,
        header: Header,
        payload: Payload,
    ) -> Result<(), TransportError> {
        let tx = self
            .hub
            .ports
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(&peer)
            .cloned();
        let Some(tx) = tx else {
            return Err(TransportError::PeerLost {
                peer,
                reason: "no such node on the hub (killed or never attached)".into(),
            });
        };
        let mut copy = self.pool.take(payload.len());
        copy.copy_from_slice(payload.as_slice());
        payload.recycle(&self.pool);
        tx.send(Msg::Frame {
            from: self.id,
            header,
            payload: copy,
        })
        .map_err(|_| TransportError::PeerLost {
            peer,
            reason: "receiver gone".into(),
        })
    }

    fn flush(&mut self) {}

    fn poll(
        &mut self,
        events: &mut Vec<Event>,
        timeout: Option<Duration>,
    ) -> Result<(), TransportError> {
        let first = match timeout {
            None => self.rx.recv().map_err(|_| RecvTimeoutError::Disconnected),
            Some(t) => self.rx.recv_timeout(t),
        };
        match first {
            Ok(msg) => self.deliver(msg, events)?,
            Err(RecvTimeoutError::Timeout) => return Ok(()),
            Err(RecvTimeoutError::Disconnected) => {
                return Err(TransportError::Closed {
                    reason: "hub dropped".into(),
                })
            }
        }
        while let Ok(msg) = self.rx.try_recv() {
            self.deliver(msg, events)?;
        }
        Ok(())
    }

    fn waker(&self) -> Arc<dyn Waker> {
        Arc::new(MemWaker(Mutex::new(self.self_tx.clone())))
    }

    fn connect(&mut self, _peer: NodeId, _addr: &str) -> Result<(), TransportError> {
        Ok(())
    }
}
