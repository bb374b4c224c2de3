//! Nodes in one process, for tests: a transport that hands each request to the addressed
//! node's handler on the caller's thread, through the peer messages' encoding (so the decoders
//! run as over TCP), with kills (a call is refused, as by a port nothing listens on) and silent
//! cuts (a call gets no reply) decided by the test. Heartbeat rounds run when the test calls
//! them, so a takeover happens at a step the test chooses, in milliseconds. The shipped path is
//! the event loops' links (`carrier::links`, `carrier::calls`); this one never leaves the
//! process.

use std::collections::{HashMap, HashSet};
use std::io;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use crate::carrier::peer::{self, PeerError, PeerTransport, Request, Response};
use crate::node::Node;

/// The nodes of an in-process cluster and the state of the links between them.
#[derive(Debug, Default)]
pub struct MemHub {
    nodes: Mutex<Vec<Option<Arc<Node>>>>,
    /// (from, to): calls from `from` to `to` get no reply.
    cut: Mutex<HashSet<(usize, usize)>>,
    /// (from, to) → how many of the next data calls from `from` to `to` are delivered and
    /// handled, and their replies lost.
    lost: Mutex<HashMap<(usize, usize), usize>>,
    sent: AtomicU64,
    received: AtomicU64,
    /// How long each whole-layout delta waits before it is handled (a delta in flight).
    delta_delay: Mutex<std::time::Duration>,
}

impl MemHub {
    pub fn new(count: usize) -> Arc<MemHub> {
        Arc::new(MemHub {
            nodes: Mutex::new(vec![None; count]),
            ..MemHub::default()
        })
    }

    /// The transport of node `from`.
    pub fn link(self: &Arc<MemHub>, from: usize) -> Arc<MemLink> {
        Arc::new(MemLink {
            hub: Arc::clone(self),
            from,
        })
    }

    /// Puts `node` at its id (a start, or a restart).
    pub fn attach(&self, node: Arc<Node>) {
        let id = node.cfg.id;
        self.nodes.lock().unwrap_or_else(PoisonError::into_inner)[id] = Some(node);
    }

    /// Node `id`'s process is gone: calls to it are refused.
    pub fn kill(&self, id: usize) {
        self.nodes.lock().unwrap_or_else(PoisonError::into_inner)[id] = None;
    }

    /// `a` and `b` cannot hear each other (both directions), silently.
    pub fn cut(&self, a: usize, b: usize) {
        let mut cut = self.cut.lock().unwrap_or_else(PoisonError::into_inner);
        cut.insert((a, b));
        cut.insert((b, a));
    }

    /// The next `count` data calls from `from` to `to` reach `to` and are handled there, and
    /// their replies are lost (the caller sees no reply, as when a link fails after the request
    /// went out).
    pub fn lose_replies(&self, from: usize, to: usize, count: usize) {
        self.lost
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert((from, to), count);
    }

    /// Each whole-layout delta (`Request::Delta`) waits this long before it is applied: a
    /// home's page is ahead of its parity pages for that long.
    pub fn delay_deltas(&self, delay: std::time::Duration) {
        *self
            .delta_delay
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = delay;
    }

    /// Every cut heals.
    pub fn heal(&self) {
        self.cut
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clear();
    }

    /// Drops every node (they hold this hub through their transports).
    pub fn clear(&self) {
        for n in self
            .nodes
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .iter_mut()
        {
            *n = None;
        }
    }

    fn call(&self, from: usize, to: usize, req: &Request) -> Result<Response, PeerError> {
        if self
            .cut
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .contains(&(from, to))
        {
            return Err(PeerError::NoReply {
                node: to,
                source: io::ErrorKind::TimedOut.into(),
            });
        }
        let node = {
            let nodes = self.nodes.lock().unwrap_or_else(PoisonError::into_inner);
            match nodes.get(to) {
                None => return Err(PeerError::UnknownNode { node: to }),
                Some(n) => n.clone(),
            }
        };
        let Some(node) = node else {
            return Err(PeerError::Io {
                node: to,
                source: io::ErrorKind::ConnectionRefused.into(),
            });
        };
        let malformed = |reason: &str| PeerError::Malformed {
            node: to,
            reason: reason.into(),
        };
        let req = peer::decode_request(&peer::encode_request(req))
            .ok_or_else(|| malformed("request did not decode"))?;
        let data = req.is_data();
        let delta = match &req {
            Request::Delta { .. } => true,
            Request::Fenced { req, .. } => matches!(**req, Request::Delta { .. }),
            _ => false,
        };
        if delta {
            let delay = *self
                .delta_delay
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            std::thread::sleep(delay);
        }
        let res = node.handle_peer(req);
        if data {
            self.sent.fetch_add(1, Ordering::Relaxed);
            let mut lost = self.lost.lock().unwrap_or_else(PoisonError::into_inner);
            if let Some(left) = lost.get_mut(&(from, to)).filter(|left| **left > 0) {
                *left -= 1;
                return Err(PeerError::NoReply {
                    node: to,
                    source: io::ErrorKind::TimedOut.into(),
                });
            }
            self.received.fetch_add(1, Ordering::Relaxed);
        }
        peer::decode_response(&peer::encode_response(&res))
            .ok_or_else(|| malformed("response did not decode"))
    }
}

/// One node's transport in a [`MemHub`].
#[derive(Debug)]
pub struct MemLink {
    hub: Arc<MemHub>,
    from: usize,
}

impl PeerTransport for MemLink {
    fn call_many(&self, calls: Vec<(usize, Request)>) -> Vec<Result<Response, PeerError>> {
        calls
            .iter()
            .map(|(to, req)| self.hub.call(self.from, *to, req))
            .collect()
    }

    fn data_messages(&self) -> (u64, u64) {
        (
            self.hub.sent.load(Ordering::Relaxed),
            self.hub.received.load(Ordering::Relaxed),
        )
    }
}
