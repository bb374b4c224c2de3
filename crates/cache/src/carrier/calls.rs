//! The calls a node's other threads make to other nodes (workers, heartbeats, recovery, the
//! background jobs), carried by its event loops: a call is posted to a loop's mailbox, the
//! loop sends its requests on the links it already keeps to those nodes (`carrier::links`), and
//! posts the replies back once all are in or the call's deadline has passed. A node so opens
//! one set of connections to each other node's peer port, its loops' links, whatever its
//! threads and calls.
//!
//! What the caller learns is what it learnt over a connection of its own: a request that never
//! left (the connection refused, or broken before the request was written whole) is
//! [`PeerError::Io`]; one that left and got no reply is [`PeerError::NoReply`], and the loop
//! has then closed the link it went on, abortively, so that the request cannot reach the node
//! later (after a partition heals).

use std::io;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

use crate::carrier::links::Failure;
use crate::carrier::peer::{PeerError, PeerTransport, Request, Response};

/// The replies to a call's requests, in their order.
pub type Replies = Vec<Result<Response, PeerError>>;

/// Where a caller takes each reply early, with its request's index.
type Early<'a> = &'a mut dyn FnMut(usize, &Response);

/// Requests for other nodes, posted to an event loop.
#[derive(Debug)]
pub struct Call {
    /// (node, request), answered in this order.
    pub requests: Vec<(usize, Request)>,
    /// When the loop gives up on the requests still unanswered.
    pub deadline: Instant,
    /// Where the loop posts the replies, once.
    pub reply: mpsc::Sender<Replies>,
    /// Where the loop also posts a copy of each reply as it comes, with its request's index,
    /// if the caller wants them early ([`PeerTransport::call_many_early`]). Dropped with the
    /// call, once it is answered.
    pub early: Option<mpsc::Sender<(usize, Response)>>,
}

/// An event loop that takes calls.
pub trait CallPost: Send + Sync + std::fmt::Debug {
    /// Posts `call` and wakes the loop; gives the call back if the loop has ended.
    fn post(&self, call: Call) -> Result<(), Call>;
    /// Wakes the loop with nothing posted (a key lock it waits for was freed).
    fn wake(&self);
}

thread_local! {
    /// Whether this thread is an event loop: a loop never waits on another node.
    static ON_LOOP: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Marks the calling thread as an event loop: a call it made would wait for itself.
pub fn mark_loop_thread() {
    ON_LOOP.with(|l| l.set(true));
}

/// Whether the calling thread is an event loop, which must never wait on another node (the
/// first loop also drives the node's engine: a loop waiting for a plan would wait for itself).
pub fn on_loop() -> bool {
    ON_LOOP.with(|l| l.get())
}

/// How much longer than a call's deadline its caller waits for the loop's answer before it
/// takes the loop for stuck: a loop answers at its deadline, at the latest in the pass after.
const LOOP_MARGIN: Duration = Duration::from_secs(1);

/// The transport of a node's threads other than its loops: each call goes to one of the loops
/// in turn, and waits at most `timeout` for its replies.
#[derive(Debug)]
pub struct LoopTransport {
    loops: Vec<Arc<dyn CallPost>>,
    next: AtomicUsize,
    timeout: Duration,
    sent: AtomicU64,
    received: AtomicU64,
}

impl LoopTransport {
    pub fn new(loops: Vec<Arc<dyn CallPost>>, timeout: Duration) -> LoopTransport {
        LoopTransport {
            loops,
            next: AtomicUsize::new(0),
            timeout,
            sent: AtomicU64::new(0),
            received: AtomicU64::new(0),
        }
    }
}

/// The caller's view of a link's failure to answer a request to `node`.
pub fn peer_error(node: usize, failure: Failure) -> PeerError {
    match failure {
        Failure::NotSent(kind) => PeerError::Io {
            node,
            source: io::Error::from(kind),
        },
        Failure::NoReply(kind) => PeerError::NoReply {
            node,
            source: io::Error::from(kind),
        },
        Failure::Malformed => PeerError::Malformed {
            node,
            reason: "undecodable response".into(),
        },
    }
}

impl PeerTransport for LoopTransport {
    fn call_many(&self, calls: Vec<(usize, Request)>) -> Replies {
        self.call(calls, None)
    }

    fn call_many_early(
        &self,
        calls: Vec<(usize, Request)>,
        early: &mut dyn FnMut(usize, &Response),
    ) -> Replies {
        self.call(calls, Some(early))
    }

    fn data_messages(&self) -> (u64, u64) {
        (
            self.sent.load(Ordering::Relaxed),
            self.received.load(Ordering::Relaxed),
        )
    }
}

impl LoopTransport {
    /// Posts `calls` to a loop and waits for their replies, taking each one early as it comes
    /// if asked to.
    fn call(&self, calls: Vec<(usize, Request)>, early: Option<Early<'_>>) -> Replies {
        if calls.is_empty() {
            return Vec::new();
        }
        assert!(
            !on_loop(),
            "an event loop called other nodes and would wait for itself: {calls:?}"
        );
        let nodes: Vec<(usize, bool)> = calls.iter().map(|(n, r)| (*n, r.is_data())).collect();
        let all = |e: &dyn Fn(usize) -> PeerError| nodes.iter().map(|&(n, _)| Err(e(n))).collect();
        if self.loops.is_empty() {
            return all(&|node| PeerError::UnknownNode { node });
        }
        let (tx, rx) = mpsc::channel();
        let (early_tx, early_rx) = match early {
            Some(_) => {
                let (t, r) = mpsc::channel();
                (Some(t), Some(r))
            }
            None => (None, None),
        };
        let given_up = Instant::now() + self.timeout + LOOP_MARGIN;
        let call = Call {
            requests: calls,
            deadline: Instant::now() + self.timeout,
            reply: tx,
            early: early_tx,
        };
        let at = self.next.fetch_add(1, Ordering::Relaxed) % self.loops.len();
        if self.loops[at].post(call).is_err() {
            return all(&|node| PeerError::Io {
                node,
                source: io::Error::other("the node's event loop has ended"),
            });
        }
        // The early copies until the call is answered (the loop drops their sender with it).
        if let (Some(early), Some(early_rx)) = (early, early_rx) {
            while let Ok((i, r)) =
                early_rx.recv_timeout(given_up.saturating_duration_since(Instant::now()))
            {
                early(i, &r);
            }
        }
        let replies = match rx.recv_timeout(given_up.saturating_duration_since(Instant::now())) {
            Ok(replies) if replies.len() == nodes.len() => replies,
            // The loop ended (or panicked) with the call, or is stuck: what it sent may have
            // arrived.
            _ => {
                return all(&|node| PeerError::NoReply {
                    node,
                    source: io::Error::other("the node's event loop did not answer the call"),
                })
            }
        };
        for (r, &(_, data)) in replies.iter().zip(&nodes) {
            if !data {
                continue;
            }
            let (sent, received) = match r {
                Ok(_) | Err(PeerError::Malformed { .. }) => (1, 1),
                Err(PeerError::NoReply { .. }) => (1, 0),
                Err(_) => (0, 0),
            };
            self.sent.fetch_add(sent, Ordering::Relaxed);
            self.received.fetch_add(received, Ordering::Relaxed);
        }
        replies
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Mutex;

    /// How a scripted loop answers a request to a node.
    type Script = fn(usize, &Request) -> Result<Response, PeerError>;

    /// A loop that answers every call with what the test gives it, or never.
    #[derive(Debug)]
    struct Scripted {
        answer: Option<Script>,
        kept: Mutex<Vec<Call>>,
    }

    impl CallPost for Scripted {
        fn post(&self, call: Call) -> Result<(), Call> {
            match self.answer {
                Some(f) => {
                    let replies = call.requests.iter().map(|(n, r)| f(*n, r)).collect();
                    let _ = call.reply.send(replies);
                }
                None => self.kept.lock().unwrap().push(call),
            }
            Ok(())
        }
        fn wake(&self) {}
    }

    fn transport(answer: Option<Script>) -> LoopTransport {
        let post = Arc::new(Scripted {
            answer,
            kept: Mutex::new(Vec::new()),
        });
        LoopTransport::new(vec![post], Duration::from_millis(20))
    }

    /// Replies come back in the order of the requests, and only data requests are counted:
    /// a reply or a request sent with none as sent, one never sent not at all.
    #[test]
    fn replies_keep_their_order_and_only_data_is_counted() {
        let t = transport(Some(|node, req| match (node, req) {
            (1, _) => Ok(Response::Ack),
            (2, _) => Err(peer_error(2, Failure::NoReply(io::ErrorKind::TimedOut))),
            _ => Err(peer_error(
                node,
                Failure::NotSent(io::ErrorKind::ConnectionRefused),
            )),
        }));
        let list = |s| Request::List { stripe: s };
        let replies = t.call_many(vec![
            (1, list(0)),
            (2, list(1)),
            (3, list(2)),
            (1, Request::Heartbeat { from: 0 }),
        ]);
        assert!(matches!(replies[0], Ok(Response::Ack)));
        assert!(matches!(
            replies[1],
            Err(PeerError::NoReply { node: 2, .. })
        ));
        match &replies[2] {
            Err(PeerError::Io { node: 3, source }) => {
                assert_eq!(source.kind(), io::ErrorKind::ConnectionRefused)
            }
            other => panic!("{other:?}"),
        }
        assert!(matches!(replies[3], Ok(Response::Ack)));
        assert_eq!(t.data_messages(), (2, 1));
    }

    /// A loop that never answers: the caller gives up a margin past the call's deadline and
    /// takes every request as sent without a reply.
    #[test]
    fn a_loop_that_never_answers_leaves_the_requests_unanswered() {
        let t = transport(None);
        let start = Instant::now();
        let replies = t.call_many(vec![(4, Request::List { stripe: 0 })]);
        assert!(start.elapsed() >= Duration::from_millis(20));
        assert!(matches!(
            replies[..],
            [Err(PeerError::NoReply { node: 4, .. })]
        ));
    }
}
