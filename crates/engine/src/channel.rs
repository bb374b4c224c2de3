//! The control channel: request/reply messages between a client (a [`crate::PlanRunner`], a
//! cache's agent) and the hosts, each one `Control` frame whose `op` field is the request id
//! (the reply carries the same id).
//!
//! The channel carries opaque payloads. A payload starts with one **port** byte that says who
//! reads it on the host: [`Port::Engine`] (the engine's own control messages,
//! [`crate::control`]) or [`Port::App`] (the host's [`crate::Application`], which brings its
//! own message type). After the port byte comes the body; [`encode_json`]/[`decode_json`] give
//! the body layout both ports use today: `json_bytes: u32 LE`, the JSON of the message, then
//! binary data (a chunk's bytes, an application payload).
//!
//! [`Channel`] is the client side: it sends requests and waits for their replies with one
//! loop, [`Channel::next_reply`] (the next reply to an outstanding request until a deadline).

use std::collections::HashMap;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use crate::engine::{Completion, Engine, WorkRequest};
use crate::pool::BufferPool;
use crate::transport::{NodeId, Payload};
use crate::wire::{Header, Kind, MAX_PAYLOAD_BYTES};
use crate::EngineError;

/// Who reads a control payload on the host.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum Port {
    /// The engine's control messages ([`crate::control::Request`], [`crate::control::Reply`]).
    Engine = 0,
    /// The host's application (the chunk store, a cache).
    App = 1,
}

impl Port {
    fn from_u8(b: u8) -> Option<Port> {
        match b {
            0 => Some(Port::Engine),
            1 => Some(Port::App),
            _ => None,
        }
    }
}

/// Most JSON a control message may carry.
pub const MAX_CONTROL_JSON_BYTES: usize = 16 << 20;

/// The most binary data (a chunk's bytes) one control message carries: a frame's payload
/// less room for the port byte and the JSON. Larger data is refused with an error.
pub const MAX_CONTROL_BINARY_BYTES: usize = MAX_PAYLOAD_BYTES - (64 << 10);

/// A control payload: `port`, then `json_bytes: u32 LE`, the JSON of `msg`, then `binary`, in
/// one pool buffer. Refuses `binary` over [`MAX_CONTROL_BINARY_BYTES`].
pub fn encode_json<T: Serialize>(
    port: Port,
    msg: &T,
    binary: &[u8],
    pool: &BufferPool,
) -> Result<Vec<u8>, EngineError> {
    let json = serde_json::to_vec(msg).map_err(|e| EngineError::BadMessage {
        from: None,
        reason: format!("cannot serialize: {e}"),
    })?;
    if json.len() > MAX_CONTROL_JSON_BYTES || binary.len() > MAX_CONTROL_BINARY_BYTES {
        return Err(EngineError::ControlTooLarge {
            what: "data",
            bytes: binary.len().max(json.len()),
            limit: MAX_CONTROL_BINARY_BYTES,
        });
    }
    let mut v = pool.take(5 + json.len() + binary.len());
    v[0] = port as u8;
    v[1..5].copy_from_slice(&(json.len() as u32).to_le_bytes());
    v[5..5 + json.len()].copy_from_slice(&json);
    v[5 + json.len()..].copy_from_slice(binary);
    Ok(v)
}

/// A control payload of `port` with an opaque `body` (copied once into a pool buffer).
pub fn encode_raw(port: Port, body: &[u8], pool: &BufferPool) -> Result<Vec<u8>, EngineError> {
    if 1 + body.len() > MAX_PAYLOAD_BYTES {
        return Err(EngineError::ControlTooLarge {
            what: "message body",
            bytes: body.len(),
            limit: MAX_PAYLOAD_BYTES - 1,
        });
    }
    let mut v = pool.take(1 + body.len());
    v[0] = port as u8;
    v[1..].copy_from_slice(body);
    Ok(v)
}

/// Why a control payload could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ControlError {
    #[error("empty control frame")]
    Empty,
    #[error("unknown control port {port}")]
    UnknownPort { port: u8 },
    #[error("control body of {bytes} bytes is too short")]
    ShortBody { bytes: usize },
    #[error(
        "control json of {json_bytes} bytes does not fit the frame ({bytes} bytes, limit \
         {MAX_CONTROL_JSON_BYTES})"
    )]
    JsonTooLarge { json_bytes: usize, bytes: usize },
    /// The JSON did not parse as the expected message (serde_json's words).
    #[error("bad control json: {reason}")]
    BadJson { reason: String },
}

/// Splits a control payload into its port and body.
pub fn split(payload: &[u8]) -> Result<(Port, &[u8]), ControlError> {
    match payload.split_first() {
        None => Err(ControlError::Empty),
        Some((&p, body)) => Port::from_u8(p)
            .map(|port| (port, body))
            .ok_or(ControlError::UnknownPort { port: p }),
    }
}

/// Reads a body written by [`encode_json`] (after the port byte): the message and the binary
/// data that follows it.
pub fn decode_json<T: for<'de> Deserialize<'de>>(body: &[u8]) -> Result<(T, &[u8]), ControlError> {
    if body.len() < 4 {
        return Err(ControlError::ShortBody { bytes: body.len() });
    }
    let n = u32::from_le_bytes(body[..4].try_into().unwrap()) as usize;
    if n > MAX_CONTROL_JSON_BYTES || 4 + n > body.len() {
        return Err(ControlError::JsonTooLarge {
            json_bytes: n,
            bytes: body.len(),
        });
    }
    let msg = serde_json::from_slice(&body[4..4 + n]).map_err(|e| ControlError::BadJson {
        reason: e.to_string(),
    })?;
    Ok((msg, &body[4 + n..]))
}

/// Posts a control payload to `to` as request (or reply) `req`.
pub fn post(engine: &Engine, to: NodeId, req: u64, payload: Vec<u8>) -> Result<(), EngineError> {
    let header = Header::new(Kind::Control, req, 0, 0, payload.len())?;
    engine.post(WorkRequest::Send {
        op: req,
        peer: to,
        header,
        payload: Payload::Owned(payload),
        signal: false,
    });
    Ok(())
}

/// A reply received by a [`Channel`].
#[derive(Debug)]
pub struct Reply {
    pub from: NodeId,
    pub req: u64,
    pub port: Port,
    payload: Vec<u8>,
}

impl Reply {
    /// The bytes after the port byte.
    pub fn body(&self) -> &[u8] {
        &self.payload[1..]
    }

    /// Decodes a JSON body (see [`decode_json`]); the error names the node.
    pub fn json<T: for<'de> Deserialize<'de>>(&self) -> Result<(T, &[u8]), EngineError> {
        decode_json(self.body()).map_err(|e| EngineError::BadMessage {
            from: Some(self.from),
            reason: e.to_string(),
        })
    }

    /// Gives the payload buffer back to `pool`.
    pub fn recycle(self, pool: &BufferPool) {
        pool.put(self.payload);
    }
}

/// The client side of the control channel, over an engine of its own (id at or above
/// [`crate::RUNNER_BASE`]) connected to every host it talks to.
#[derive(Debug)]
pub struct Channel {
    engine: Engine,
    next_req: u64,
    /// Outstanding requests: request id → node asked.
    pending: HashMap<u64, NodeId>,
    /// Nodes whose connection was lost, with the reason.
    lost: HashMap<NodeId, String>,
}

impl Channel {
    /// A channel over `engine`. Request ids start from the engine's id, so that clients
    /// sharing hosts do not reuse each other's ids (2^36 ids each).
    pub fn new(engine: Engine) -> Channel {
        Channel {
            next_req: seed(engine.node()),
            engine,
            pending: HashMap::new(),
            lost: HashMap::new(),
        }
    }

    pub fn engine(&self) -> &Engine {
        &self.engine
    }

    /// Why `node`'s connection was lost, if it was.
    pub fn lost(&self, node: NodeId) -> Option<&str> {
        self.lost.get(&node).map(String::as_str)
    }

    /// Sends `payload` (made by [`encode_json`] or [`encode_raw`]) to `to` as a new request;
    /// returns its id. Refused at once if `to` was lost.
    pub fn send(&mut self, to: NodeId, payload: Vec<u8>) -> Result<u64, EngineError> {
        if let Some(reason) = self.lost.get(&to) {
            self.engine.pool().put(payload);
            return Err(EngineError::PeerLost {
                peer: to,
                reason: reason.clone(),
            });
        }
        self.next_req += 1;
        let req = self.next_req;
        post(&self.engine, to, req, payload)?;
        self.pending.insert(req, to);
        Ok(req)
    }

    /// Stops waiting for request `req` (a late reply to it is dropped).
    pub fn forget(&mut self, req: u64) {
        self.pending.remove(&req);
    }

    /// The nodes with outstanding requests, ascending.
    pub fn waiting_for(&self) -> Vec<NodeId> {
        let mut v: Vec<NodeId> = self.pending.values().copied().collect();
        v.sort_unstable();
        v.dedup();
        v
    }

    /// The next reply to an outstanding request, waiting until `deadline`; `Ok(None)` when the
    /// deadline passes first. Fails when a node with an outstanding request is lost (or could
    /// not be connected) and when this channel's engine stops. Replies to forgotten or unknown
    /// requests are dropped.
    pub fn next_reply(&mut self, deadline: Instant) -> Result<Option<Reply>, EngineError> {
        loop {
            let now = Instant::now();
            if now >= deadline {
                return Ok(None);
            }
            let Some(c) = self.engine.cq().wait(deadline - now) else {
                return Ok(None);
            };
            match c {
                Completion::Control { from, op, payload } => {
                    if self.pending.remove(&op).is_none() {
                        self.engine.pool().put(payload);
                        continue;
                    }
                    let port = match split(&payload) {
                        Ok((port, _)) => port,
                        Err(e) => {
                            return Err(EngineError::BadMessage {
                                from: Some(from),
                                reason: e.to_string(),
                            })
                        }
                    };
                    return Ok(Some(Reply {
                        from,
                        req: op,
                        port,
                        payload,
                    }));
                }
                Completion::PeerLost { peer, reason } => {
                    self.lost.insert(peer, reason.clone());
                    if self.pending.values().any(|&n| n == peer) {
                        self.pending.retain(|_, n| *n != peer);
                        return Err(EngineError::PeerLost { peer, reason });
                    }
                }
                Completion::ConnectFailed { peer, reason } => {
                    self.lost.insert(peer, reason.clone());
                    self.pending.retain(|_, n| *n != peer);
                    return Err(EngineError::PeerLost { peer, reason });
                }
                Completion::Stopped { reason } => return Err(EngineError::Stopped { reason }),
                _ => {}
            }
        }
    }

    /// Sends every payload and waits for every reply, returned in the order of `msgs`.
    /// `check` looks at each reply as it arrives (an error reply fails the whole exchange at
    /// once). Fails on the loss of a node asked, or when `timeout` passes.
    pub fn exchange(
        &mut self,
        msgs: Vec<(NodeId, Vec<u8>)>,
        timeout: Duration,
        check: &mut dyn FnMut(&Reply) -> Result<(), EngineError>,
    ) -> Result<Vec<Reply>, EngineError> {
        let deadline = Instant::now() + timeout;
        let n = msgs.len();
        let mut order: HashMap<u64, usize> = HashMap::with_capacity(n);
        let result = (|| {
            for (i, (node, payload)) in msgs.into_iter().enumerate() {
                order.insert(self.send(node, payload)?, i);
            }
            let mut replies: Vec<Option<Reply>> = (0..n).map(|_| None).collect();
            let mut left = n;
            while left > 0 {
                let Some(r) = self.next_reply(deadline)? else {
                    let nodes: Vec<NodeId> = order
                        .keys()
                        .filter_map(|req| self.pending.get(req).copied())
                        .collect();
                    return Err(EngineError::NoReply { nodes, timeout });
                };
                let Some(&i) = order.get(&r.req) else {
                    // A reply to another exchange of this channel's user: not ours.
                    r.recycle(self.engine.pool());
                    continue;
                };
                check(&r)?;
                replies[i] = Some(r);
                left -= 1;
            }
            Ok(replies
                .into_iter()
                .map(|r| r.expect("every reply arrived"))
                .collect())
        })();
        if result.is_err() {
            for req in order.keys() {
                self.pending.remove(req);
            }
        }
        result
    }
}

impl Drop for Channel {
    fn drop(&mut self) {
        self.engine.shutdown();
    }
}

/// The first request (and operation) id of a client: its id's low 28 bits, shifted left by 36.
pub(crate) fn seed(node: NodeId) -> u64 {
    (node as u64 & 0x0FFF_FFFF) << 36
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::transport::MemHub;

    #[test]
    fn json_bodies_round_trip_with_their_binary_data() {
        let pool = BufferPool::new();
        let p = encode_json(Port::App, &("key", 7u32), b"bytes", &pool).unwrap();
        let (port, body) = split(&p).unwrap();
        assert_eq!(port, Port::App);
        let ((k, v), bin): ((String, u32), &[u8]) = decode_json(body).unwrap();
        assert_eq!((k.as_str(), v, bin), ("key", 7, &b"bytes"[..]));
        assert_eq!(
            split(&[9]).unwrap_err(),
            ControlError::UnknownPort { port: 9 }
        );
        assert!(split(&[]).is_err());
        assert!(decode_json::<u32>(&[1, 0]).is_err());
        // A JSON length beyond the body is refused, not read past.
        assert!(decode_json::<u32>(&[200, 0, 0, 0, b'1']).is_err());
    }

    #[test]
    fn a_reply_is_matched_to_its_request_and_a_silent_node_times_out() {
        let hub = MemHub::new();
        let pool = BufferPool::new();
        let host = Engine::start(hub.attach(0, pool.clone()), pool.clone());
        let mut ch = Channel::new(Engine::start(
            hub.attach(crate::RUNNER_BASE, pool.clone()),
            pool.clone(),
        ));
        let req = ch
            .send(0, encode_raw(Port::App, b"ping", &pool).unwrap())
            .unwrap();
        // The host answers a stale request id first, then the real one.
        let c = host.cq().wait(Duration::from_secs(5)).expect("request");
        let Completion::Control { from, op, payload } = c else {
            panic!("{c:?}")
        };
        assert_eq!((from, op), (crate::RUNNER_BASE, req));
        assert_eq!(split(&payload).unwrap(), (Port::App, &b"ping"[..]));
        post(
            &host,
            from,
            op + 100,
            encode_raw(Port::App, b"x", &pool).unwrap(),
        )
        .unwrap();
        post(
            &host,
            from,
            op,
            encode_raw(Port::App, b"pong", &pool).unwrap(),
        )
        .unwrap();
        let deadline = Instant::now() + Duration::from_secs(5);
        let r = ch.next_reply(deadline).unwrap().expect("a reply");
        assert_eq!(
            (r.from, r.req, r.port, r.body()),
            (0, req, Port::App, &b"pong"[..])
        );
        // Nothing outstanding: the wait ends at the deadline with no reply.
        let t = Instant::now();
        let none = ch.next_reply(t + Duration::from_millis(50)).unwrap();
        assert!(none.is_none());
        assert!(t.elapsed() >= Duration::from_millis(50));
        // An exchange with a host that never answers fails with the nodes it waited for.
        let err = ch
            .exchange(
                vec![(0, encode_raw(Port::App, b"?", &pool).unwrap())],
                Duration::from_millis(50),
                &mut |_| Ok(()),
            )
            .unwrap_err();
        assert!(
            matches!(&err, EngineError::NoReply { nodes, .. } if nodes == &vec![0]),
            "{err}"
        );
        assert!(ch.waiting_for().is_empty());
        host.shutdown();
    }

    #[test]
    fn losing_a_node_with_an_outstanding_request_fails_the_wait() {
        let hub = MemHub::new();
        let pool = BufferPool::new();
        let host = Engine::start(hub.attach(0, pool.clone()), pool.clone());
        let mut ch = Channel::new(Engine::start(
            hub.attach(crate::RUNNER_BASE, pool.clone()),
            pool.clone(),
        ));
        ch.send(0, encode_raw(Port::App, b"?", &pool).unwrap())
            .unwrap();
        hub.kill(0);
        let err = ch
            .next_reply(Instant::now() + Duration::from_secs(5))
            .unwrap_err();
        assert!(
            matches!(err, EngineError::PeerLost { peer: 0, .. }),
            "{err}"
        );
        // Later requests to the lost node are refused at once.
        let err = ch
            .send(0, encode_raw(Port::App, b"?", &pool).unwrap())
            .unwrap_err();
        assert!(matches!(err, EngineError::PeerLost { peer: 0, .. }));
        host.shutdown();
    }
}
