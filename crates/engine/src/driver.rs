//! The application side of operations: starts a node's parts of an operation in either mode
//! and turns completions into "operation finished" results.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::engine::{Completion, Engine, Mode, WorkRequest};
use crate::part::{Outgoing, PartRun};
use crate::transport::NodeId;
use crate::wire::{Header, Kind};
use crate::EngineError;
use graph::part::ChunkRef;

/// The outcome of one operation on this node: the chunks it stored, or why it failed.
pub type OpResult = Result<Vec<(ChunkRef, Arc<Vec<u8>>)>, EngineError>;

/// While computing, the sends queued so far are posted once this many bytes are waiting, so
/// that an incoherent source also sends its first slices while it computes the rest (the same
/// threshold the engine uses to flush in coherent mode).
const POST_BYTES: usize = 32 << 10;

/// What [`OpDriver::handle`] made of a completion.
#[derive(Debug)]
pub enum Handled {
    /// Consumed; nothing finished.
    Consumed,
    /// Operation `op` finished on this node.
    Finished(u64, OpResult),
    /// Not an operation's completion (control frames, peer events): for the caller.
    Other(Completion),
}

struct Incoherent {
    parts: Vec<PartRun>,
    sends_outstanding: usize,
}

/// Drives operations for one application thread. In coherent mode it posts each operation's
/// chains once and waits for one completion. In incoherent mode it is the application loop
/// the baseline needs: for every received slice it runs the calculation itself and queues the
/// sends, and it finishes an operation when every send has completed.
///
/// Work requests produced by [`OpDriver::handle`] are queued, not posted: call
/// [`OpDriver::flush`] after handling each batch of completions drained from the queue, so
/// that one wake-up of the engine carries every send of the batch (as an application using a
/// socket API would write everything it has before waiting again).
#[derive(Debug)]
pub struct OpDriver {
    engine: Engine,
    coherent: HashSet<u64>,
    incoherent: HashMap<u64, Incoherent>,
    wrs: Vec<WorkRequest>,
    /// Reused for the sends one slice produces.
    out: Vec<Outgoing>,
}

impl std::fmt::Debug for Incoherent {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "Incoherent({} sends outstanding)",
            self.sends_outstanding
        )
    }
}

impl OpDriver {
    pub fn new(engine: Engine) -> OpDriver {
        OpDriver {
            engine,
            coherent: HashSet::new(),
            incoherent: HashMap::new(),
            wrs: Vec::new(),
            out: Vec::new(),
        }
    }

    pub fn engine(&self) -> &Engine {
        &self.engine
    }

    /// Operations in flight.
    pub fn active(&self) -> usize {
        self.coherent.len() + self.incoherent.len()
    }

    /// Starts this node's `parts` of operation `op`. Returns the result at once if the
    /// operation needed nothing from the network (incoherent mode, nothing to send or receive).
    pub fn start(
        &mut self,
        op: u64,
        parts: Vec<PartRun>,
        mode: Mode,
        timeout: Duration,
    ) -> Option<(u64, OpResult)> {
        let deadline = Instant::now() + timeout;
        match mode {
            Mode::Coherent => {
                self.coherent.insert(op);
                self.engine.post(WorkRequest::Chain {
                    op,
                    parts,
                    deadline,
                });
                None
            }
            Mode::Incoherent => {
                let mut peers: Vec<NodeId> = parts.iter().flat_map(|p| p.part().peers()).collect();
                peers.sort_unstable();
                peers.dedup();
                self.wrs.push(WorkRequest::Recv {
                    op,
                    peers,
                    deadline,
                });
                let mut st = Incoherent {
                    parts,
                    sends_outstanding: 0,
                };
                // Compute slice by slice, posting the sends whenever enough are queued.
                let mut pending = 0usize;
                let mut err = None;
                for p in &mut st.parts {
                    p.start(&mut |o| {
                        st.sends_outstanding += 1;
                        let len = o.payload.len();
                        if let Err(e) = push_send(&mut self.wrs, op, o, self.engine.pool()) {
                            st.sends_outstanding -= 1;
                            err.get_or_insert(e);
                        }
                        pending += len;
                        if pending >= POST_BYTES {
                            self.engine.post_all(self.wrs.drain(..));
                            pending = 0;
                        }
                    });
                }
                self.incoherent.insert(op, st);
                self.flush();
                if let Some(e) = err {
                    // Completes as `Failed` through the engine.
                    self.fail(op, e);
                    return None;
                }
                match self.try_finish(op) {
                    Handled::Finished(op, r) => {
                        self.flush();
                        Some((op, r))
                    }
                    _ => None,
                }
            }
        }
    }

    /// Posts every queued work request with one wake-up of the engine.
    pub fn flush(&mut self) {
        if !self.wrs.is_empty() {
            self.engine.post_all(self.wrs.drain(..));
        }
    }

    fn fail(&mut self, op: u64, error: EngineError) {
        self.wrs.push(WorkRequest::Fail { op, error });
        self.flush();
    }

    /// Queues `self.out`'s sends of operation `op`; returns how many were queued and the
    /// first error.
    fn queue_out(&mut self, op: u64) -> (usize, Option<EngineError>) {
        let mut n = 0;
        let mut err = None;
        for o in self.out.drain(..) {
            match push_send(&mut self.wrs, op, o, self.engine.pool()) {
                Ok(()) => n += 1,
                Err(e) => {
                    err.get_or_insert(e);
                }
            }
        }
        (n, err)
    }

    fn try_finish(&mut self, op: u64) -> Handled {
        let done = self.incoherent.get(&op).is_some_and(|st| {
            st.sends_outstanding == 0 && st.parts.iter().all(|p| p.is_complete())
        });
        if !done {
            return Handled::Consumed;
        }
        let st = self.incoherent.remove(&op).expect("present");
        self.wrs.push(WorkRequest::Release { op });
        let results = st
            .parts
            .into_iter()
            .flat_map(|p| p.into_results())
            .collect();
        Handled::Finished(op, Ok(results))
    }

    /// Handles one completion from the engine's queue.
    pub fn handle(&mut self, c: Completion) -> Handled {
        match c {
            Completion::ChainDone { op, results } if self.coherent.remove(&op) => {
                Handled::Finished(op, Ok(results))
            }
            Completion::Failed { op, error } => {
                let incoherent = self.incoherent.remove(&op);
                let known = incoherent.is_some();
                if let Some(st) = incoherent {
                    st.parts.into_iter().for_each(PartRun::recycle);
                }
                if self.coherent.remove(&op) || known {
                    Handled::Finished(op, Err(error))
                } else {
                    Handled::Consumed
                }
            }
            Completion::Recv {
                op,
                edge,
                slice,
                payload,
                ..
            } => {
                let Some(st) = self.incoherent.get_mut(&op) else {
                    self.engine.pool().put(payload);
                    return Handled::Consumed;
                };
                let out = &mut self.out;
                let r = match st.parts.iter_mut().find(|p| p.has_in_edge(edge)) {
                    Some(p) => p.on_input(edge, slice, &payload, &mut |o| out.push(o)),
                    None => Err(EngineError::UnexpectedSlice {
                        op,
                        edge,
                        slice,
                        reason: format!("no vertex on this node receives edge {edge}"),
                    }),
                };
                self.engine.pool().put(payload);
                let err = match r {
                    Ok(()) => {
                        let (n, err) = self.queue_out(op);
                        if let Some(st) = self.incoherent.get_mut(&op) {
                            st.sends_outstanding += n;
                        }
                        err
                    }
                    Err(e) => {
                        for o in self.out.drain(..) {
                            o.payload.recycle(self.engine.pool());
                        }
                        Some(e)
                    }
                };
                match err {
                    None => self.try_finish(op),
                    Some(e) => {
                        // The engine fails the operation and completes it as `Failed`.
                        self.fail(op, e);
                        Handled::Consumed
                    }
                }
            }
            Completion::SendDone { op, result } => {
                let Some(st) = self.incoherent.get_mut(&op) else {
                    return Handled::Consumed;
                };
                st.sends_outstanding -= 1;
                match result {
                    Ok(()) => self.try_finish(op),
                    Err(e) => {
                        self.fail(op, e);
                        Handled::Consumed
                    }
                }
            }
            other => Handled::Other(other),
        }
    }
}

/// Queues the `SEND` of one computed slice.
fn push_send(
    wrs: &mut Vec<WorkRequest>,
    op: u64,
    o: Outgoing,
    pool: &crate::BufferPool,
) -> Result<(), EngineError> {
    let header = match Header::new(Kind::Data, op, o.edge, o.slice, o.payload.len()) {
        Ok(h) => h,
        Err(e) => {
            o.payload.recycle(pool);
            return Err(EngineError::Wire(e));
        }
    };
    wrs.push(WorkRequest::Send {
        op,
        peer: o.to,
        header,
        payload: o.payload,
        signal: true,
    });
    Ok(())
}
