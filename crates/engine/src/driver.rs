//! The application side of operations: starts a node's parts of an operation in either mode
//! and turns completions into "operation finished" results.

use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant};

use crate::engine::{Completion, Engine, Mode, WorkRequest};
use crate::part::{ChunkRef, Outgoing, PartRun};
use crate::transport::NodeId;
use crate::wire::{Header, Kind};
use crate::EngineError;

/// The outcome of one operation on this node: the chunks it stored, or why it failed.
pub type OpResult = Result<Vec<(ChunkRef, Vec<u8>)>, EngineError>;

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
/// the baseline needs: for every received slice it runs the calculation itself and posts the
/// sends, and it finishes an operation when every send has completed.
#[derive(Debug)]
pub struct OpDriver {
    engine: Engine,
    coherent: HashSet<u64>,
    incoherent: HashMap<u64, Incoherent>,
    wrs: Vec<WorkRequest>,
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
                let mut out = Vec::new();
                for p in &mut st.parts {
                    p.start(&mut |o| out.push(o));
                }
                st.sends_outstanding += out.len();
                self.push_sends(op, out);
                self.incoherent.insert(op, st);
                self.flush();
                match self.try_finish(op) {
                    Handled::Finished(op, r) => Some((op, r)),
                    _ => None,
                }
            }
        }
    }

    fn push_sends(&mut self, op: u64, out: Vec<Outgoing>) {
        for o in out {
            let header = Header::new(Kind::Data, op, o.edge, o.slice, o.payload.len());
            self.wrs.push(WorkRequest::Send {
                op,
                peer: o.to,
                header,
                payload: o.payload,
                signal: true,
            });
        }
    }

    fn flush(&mut self) {
        if !self.wrs.is_empty() {
            self.engine.post_all(self.wrs.drain(..));
        }
    }

    fn fail(&mut self, op: u64, error: EngineError) {
        self.wrs.push(WorkRequest::Fail { op, error });
        self.flush();
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
        self.flush();
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
                if self.coherent.remove(&op) || self.incoherent.remove(&op).is_some() {
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
                let mut out = Vec::new();
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
                st.sends_outstanding += out.len();
                self.push_sends(op, out);
                self.flush();
                match r {
                    Ok(()) => self.try_finish(op),
                    Err(e) => {
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
