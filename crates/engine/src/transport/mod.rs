//! Transports: how frames move between engines. The engine owns one transport and calls it
//! only from its own thread; other threads interrupt its `poll` with a [`Waker`].

mod mem;
mod tcp;

pub use mem::{MemHub, MemTransport};
pub use tcp::TcpTransport;

use std::ops::Range;
use std::sync::Arc;
use std::time::Duration;

use crate::pool::BufferPool;
use crate::wire::Header;

/// A node's identity in a cluster: `graph`'s node number, the same in plans and engines.
/// Plan runners use ids from [`RUNNER_BASE`] up; ids travel as u32 (`Hello` frames), so
/// transports refuse larger ones.
pub use graph::NodeId;

/// Node ids at and above this belong to plan runners (and other clients), which hold no chunks.
pub const RUNNER_BASE: NodeId = 0xF000_0000;

/// The bytes of one outgoing frame. The transport owns them until they are written and then
/// gives owned buffers back to the pool, so the sender never copies a slice to send it.
#[derive(Debug)]
pub enum Payload {
    Empty,
    Owned(Vec<u8>),
    /// A range of a buffer shared with others (a stored chunk, or one result sent to several
    /// peers).
    Shared(Arc<Vec<u8>>, Range<usize>),
}

impl Payload {
    pub fn as_slice(&self) -> &[u8] {
        match self {
            Payload::Empty => &[],
            Payload::Owned(v) => v,
            Payload::Shared(v, r) => &v[r.clone()],
        }
    }
    pub fn len(&self) -> usize {
        self.as_slice().len()
    }
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The bytes as a buffer of their own: an owned one as it is, a shared range copied into a
    /// buffer of `pool` (and the shared one given back if this was its last reference).
    pub fn into_owned(self, pool: &BufferPool) -> Vec<u8> {
        match self {
            Payload::Owned(v) => v,
            other => {
                let mut copy = pool.take(other.len());
                copy.copy_from_slice(other.as_slice());
                other.recycle(pool);
                copy
            }
        }
    }

    /// Done with the bytes: an owned buffer goes back to `pool`, and so does a shared one
    /// whose last reference this was (a result sent to several peers).
    pub fn recycle(self, pool: &BufferPool) {
        match self {
            Payload::Empty => {}
            Payload::Owned(v) => pool.put(v),
            Payload::Shared(a, _) => {
                if let Ok(v) = Arc::try_unwrap(a) {
                    pool.put(v);
                }
            }
        }
    }
}

/// Something a transport observed.
#[derive(Debug)]
pub enum Event {
    /// A whole frame from `from`; `payload` is a pool buffer the receiver now owns.
    Frame {
        from: NodeId,
        header: Header,
        payload: Vec<u8>,
    },
    /// The connection to `peer` failed or closed; frames queued for it are dropped.
    PeerLost { peer: NodeId, reason: String },
    /// A peer reported lost has connected again (its `Hello` came on a new connection): frames
    /// for it may be sent again. Not reported for a peer's first connection.
    PeerBack { peer: NodeId },
}

/// Why a send could not be queued.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TransportError {
    #[error("peer {peer} is unreachable: {reason}")]
    PeerLost { peer: NodeId, reason: String },
    #[error("peer {peer} is unknown to this transport")]
    UnknownPeer { peer: NodeId },
    #[error("transport closed: {reason}")]
    Closed { reason: String },
}

/// Interrupts a transport's `poll` from another thread.
pub trait Waker: Send + Sync {
    fn wake(&self);
}

/// Moves frames between this node and its peers. All methods are called from the engine
/// thread only.
pub trait Transport: Send + 'static {
    /// This node's id.
    fn local(&self) -> NodeId;
    /// Queues one frame for `peer`. Frames to one peer arrive in the order they were queued.
    /// Queuing to a peer whose connection is not up yet is allowed; it is sent once it is.
    fn send(
        &mut self,
        peer: NodeId,
        header: Header,
        payload: Payload,
    ) -> Result<(), TransportError>;
    /// Writes what the socket accepts of the queued frames without blocking; called at the
    /// end of every event-loop turn.
    fn flush(&mut self);
    /// Waits up to `timeout` (forever if `None`) for at least one event or a wake-up, then
    /// appends every event that is ready to `events`.
    fn poll(
        &mut self,
        events: &mut Vec<Event>,
        timeout: Option<Duration>,
    ) -> Result<(), TransportError>;
    /// A handle that makes a blocked `poll` return.
    fn waker(&self) -> Arc<dyn Waker>;
    /// Opens the persistent connection to `peer` at `addr` (transports without addresses
    /// accept and ignore this). Only one side of each pair connects: by convention the one with
    /// the larger id, and every runner to every node.
    fn connect(&mut self, peer: NodeId, addr: &str) -> Result<(), TransportError>;
}
