//! A member's answers to peer requests: chunk records stored, read and deleted, index
//! listings, heartbeats and forwarded agent operations handed to the agent.

use std::sync::atomic::Ordering;

use crate::carrier::peer::{self, Request, Response};
use crate::member::store::ChunkStore;
use crate::node::{lock, Node};
use crate::record;

/// A member's answer to a chunk request (`Put`, `Get`, `Delete`, `Touch`, `List`, `Flip`) from
/// its store; any other request is a `Nack`.
pub(crate) fn answer_chunk(store: &mut ChunkStore, req: Request) -> Response {
    match req {
        Request::Put {
            stripe,
            watermark,
            record,
        } => match store.put(stripe, record, watermark) {
            Ok(_) => Response::Ack,
            Err(e) => Response::Nack(e.to_string()),
        },
        Request::Get {
            stripe,
            position,
            key,
            version,
        } => Response::Record(
            store
                .get(stripe, position, &key, version)
                .map(<[u8]>::to_vec),
        ),
        Request::Delete {
            stripe,
            key,
            version,
        } => {
            store.delete(stripe, &key, version);
            Response::Ack
        }
        Request::Touch {
            stripe,
            key,
            version,
            exptime,
        } => {
            store.touch(stripe, &key, version, exptime);
            Response::Ack
        }
        Request::List { stripe } => Response::Headers(
            store
                .list(stripe)
                .iter()
                .map(|h| record::encode(h, &[]))
                .collect(),
            store.tombstones(stripe),
        ),
        Request::Flip {
            stripe,
            position,
            key,
            bit,
        } => {
            if store.flip_bit(stripe, position, &key, bit) {
                Response::Ack
            } else {
                Response::Nack("no such record or bit".into())
            }
        }
        other => Response::Nack(format!("not a chunk request: {other:?}")),
    }
}

impl Node {
    /// Handles a message from a peer (or from this node to itself).
    /// Answers a peer's request at once when that needs no wait on a key lock or another
    /// node (every chunk operation, most heartbeats); gives it back otherwise (an agent
    /// operation, a heartbeat that resumes granting), for a thread that may wait.
    pub fn handle_peer_now(&self, req: Request) -> Result<Response, Request> {
        match req {
            Request::Agent(_) => Err(req),
            Request::Heartbeat { from } => self.heartbeat(from as usize, false).ok_or(req),
            req => Ok(self.handle_peer(req)),
        }
    }

    pub fn handle_peer(&self, req: Request) -> Response {
        match req {
            Request::Heartbeat { from } => self
                .heartbeat(from as usize, true)
                .expect("a heartbeat that may wait is answered"),
            Request::Flush { oldest_live_us } => {
                self.oldest_live_us.store(oldest_live_us, Ordering::Relaxed);
                Response::Ack
            }
            Request::Agent(op) => Response::Agent(self.agent(op)),
            req => answer_chunk(&mut lock(&self.store), req),
        }
    }

    /// Stores a record that arrived through an engine plan (a write's chunk), as a peer
    /// `Put` would.
    pub fn put_record(
        &self,
        stripe: u32,
        record: Vec<u8>,
        watermark: u64,
    ) -> Result<(), crate::record::RecordError> {
        lock(&self.store).put(stripe, record, watermark).map(|_| ())
    }

    /// Appends the framed reply to a `Get` of (stripe, position, key, version) to `out`.
    pub fn push_record_frame(
        &self,
        out: &mut Vec<u8>,
        stripe: u32,
        position: u8,
        key: &[u8],
        version: u64,
    ) {
        peer::push_record_frame(out, lock(&self.store).get(stripe, position, key, version));
    }

    /// The record this node holds for (stripe, position, key, version).
    pub fn record(&self, stripe: u32, position: u8, key: &[u8], version: u64) -> Option<Vec<u8>> {
        lock(&self.store)
            .get(stripe, position, key, version)
            .map(|r| r.to_vec())
    }

    /// Bytes of records this node holds.
    pub fn stored_bytes(&self) -> u64 {
        lock(&self.store).bytes()
    }
}
