//! [`PartRun`]: the running state of one [`VertexPart`] (a vertex of a plan, lowered by
//! `graph`'s [`graph::Plan::parts`]) for one operation, the per-slice state machine that
//! executes it.
//!
//! A `PartRun` is the compiled form of a primitive's chain. For every slice `s` it holds what
//! the paper's work requests hold: a `WAIT` count (incoming edges still missing for `s`), the
//! `CALC` (the vertex's coefficients, applied as each input slice arrives, accumulating into
//! the output slice) and the `SEND`s (one per outgoing edge, issued the moment the count reaches
//! zero). The same code runs in both modes: the engine thread calls it in coherent mode, the
//! application thread in incoherent mode.

use std::ops::Range;
use std::sync::Arc;

use gf::{Kernel, Matrix};
use graph::part::{ChunkRef, VertexPart};

use crate::pool::BufferPool;
use crate::transport::{NodeId, Payload};
use crate::EngineError;

/// One frame a `PartRun` wants sent.
#[derive(Debug)]
pub struct Outgoing {
    pub to: NodeId,
    pub edge: u32,
    pub slice: u32,
    pub payload: Payload,
}

#[derive(Debug)]
enum OutBuf {
    /// An output kept as a chunk: computed in place, slice by slice.
    Whole(Vec<u8>),
    /// A kept output of one slice that was also sent: shared with the transport, no copy.
    Shared(Arc<Vec<u8>>),
    /// An output only sent: one pool buffer per slice, handed to the transport when complete.
    Sliced(Vec<Option<Vec<u8>>>),
    /// An unchanged local chunk: sent straight from the store.
    Plain(usize),
}

/// The running state of one [`VertexPart`] for one operation.
#[derive(Debug)]
pub struct PartRun {
    op: u64,
    part: Arc<VertexPart>,
    locals: Vec<Arc<Vec<u8>>>,
    kernel: Kernel,
    pool: BufferPool,
    /// Coefficients of the locals, one 1 × locals row per output (None for plain outputs).
    local_rows: Vec<Option<Matrix>>,
    /// Per slice: incoming edges still missing (the WAIT count).
    waiting: Vec<u32>,
    /// Per slice: no contribution written yet, so the first one overwrites instead of adding.
    fresh: Vec<bool>,
    started: Vec<bool>,
    /// Per incoming edge and slice: already received (duplicates are an error).
    seen: Vec<bool>,
    outs: Vec<OutBuf>,
    slices_done: usize,
}

impl PartRun {
    /// Prepares `part` for operation `op`; `locals` are the bytes of `part.local`, in order.
    pub fn new(
        op: u64,
        part: Arc<VertexPart>,
        locals: Vec<Arc<Vec<u8>>>,
        kernel: Kernel,
        pool: BufferPool,
    ) -> Result<PartRun, EngineError> {
        part.validate().map_err(|e| EngineError::BadPart {
            vertex: part.vertex,
            reason: e.to_string(),
        })?;
        if locals.len() != part.local.len() {
            return Err(EngineError::BadPart {
                vertex: part.vertex,
                reason: format!(
                    "{} local chunks given, {} expected",
                    locals.len(),
                    part.local.len()
                ),
            });
        }
        for (c, r) in locals.iter().zip(&part.local) {
            if c.len() != part.chunk_bytes {
                return Err(EngineError::BadPart {
                    vertex: part.vertex,
                    reason: format!(
                        "local chunk {}/{} has {} bytes, expected {}",
                        r.stripe,
                        r.index,
                        c.len(),
                        part.chunk_bytes
                    ),
                });
            }
        }
        let n = part.input_count();
        let nl = part.local.len();
        let slices = part.slice_count();
        let mut local_rows = Vec::new();
        let mut outs = Vec::new();
        for (o, spec) in part.outputs.iter().enumerate() {
            if let Some(j) = part.plain_local(o) {
                local_rows.push(None);
                outs.push(OutBuf::Plain(j));
                continue;
            }
            local_rows.push(if nl > 0 {
                Some(Matrix::new(1, nl, &part.coeffs[o * n..o * n + nl]))
            } else {
                None
            });
            outs.push(if spec.store.is_some() {
                OutBuf::Whole(pool.take(part.chunk_bytes))
            } else {
                OutBuf::Sliced((0..slices).map(|_| None).collect())
            });
        }
        Ok(PartRun {
            op,
            waiting: vec![part.inputs.len() as u32; slices],
            fresh: vec![true; slices],
            started: vec![false; slices],
            seen: vec![false; slices * part.inputs.len()],
            part,
            locals,
            kernel,
            pool,
            local_rows,
            outs,
            slices_done: 0,
        })
    }

    pub fn op(&self) -> u64 {
        self.op
    }

    pub fn part(&self) -> &VertexPart {
        &self.part
    }

    /// Whether this part receives on `edge`.
    pub fn has_in_edge(&self, edge: u32) -> bool {
        self.part.inputs.iter().any(|e| e.edge == edge as usize)
    }

    pub fn is_complete(&self) -> bool {
        self.slices_done == self.waiting.len()
    }

    fn range(&self, s: usize) -> Range<usize> {
        let a = s * self.part.slice_bytes;
        a..(a + self.part.slice_bytes).min(self.part.chunk_bytes)
    }

    /// Starts the part. A vertex without incoming edges computes and sends every slice now.
    pub fn start(&mut self, out: &mut dyn FnMut(Outgoing)) {
        if self.part.inputs.is_empty() {
            for s in 0..self.waiting.len() {
                self.start_slice(s);
                self.finish_slice(s, out);
            }
        }
    }

    /// The local contribution of slice `s` (CALC over the locals), written into fresh output
    /// buffers.
    fn start_slice(&mut self, s: usize) {
        self.started[s] = true;
        let r = self.range(s);
        let len = r.len();
        for o in 0..self.outs.len() {
            if let OutBuf::Sliced(v) = &mut self.outs[o] {
                v[s] = Some(self.pool.take(len));
            }
        }
        if self.part.local.is_empty() {
            return;
        }
        // The locals' slices, without an allocation for the usual handful of them.
        const INLINE: usize = 32;
        let mut inline: [&[u8]; INLINE] = [&[]; INLINE];
        let heap: Vec<&[u8]>;
        let inputs: &[&[u8]] = if self.locals.len() <= INLINE {
            for (d, c) in inline.iter_mut().zip(&self.locals) {
                *d = &c[r.clone()];
            }
            &inline[..self.locals.len()]
        } else {
            heap = self.locals.iter().map(|c| &c[r.clone()]).collect();
            &heap
        };
        for (o, buf) in self.outs.iter_mut().enumerate() {
            let Some(row) = &self.local_rows[o] else {
                continue;
            };
            let target: &mut [u8] = match buf {
                OutBuf::Whole(w) => &mut w[r.clone()],
                OutBuf::Sliced(v) => v[s].as_mut().expect("slice buffer taken above"),
                OutBuf::Plain(_) | OutBuf::Shared(_) => continue,
            };
            self.kernel.dot_prod(row, inputs, &mut [target]);
        }
        self.fresh[s] = false;
    }

    /// One slice of one incoming edge has arrived: apply its coefficients (CALC), count it
    /// against the slice's WAIT, and once nothing is missing, SEND the slice's outputs.
    pub fn on_input(
        &mut self,
        edge: u32,
        slice: u32,
        data: &[u8],
        out: &mut dyn FnMut(Outgoing),
    ) -> Result<(), EngineError> {
        let vertex = self.part.vertex;
        let pos = self
            .part
            .inputs
            .iter()
            .position(|e| e.edge == edge as usize)
            .ok_or(EngineError::UnexpectedSlice {
                op: self.op,
                edge,
                slice,
                reason: format!("vertex {vertex} has no such incoming edge"),
            })?;
        let s = slice as usize;
        if s >= self.waiting.len() {
            return Err(EngineError::UnexpectedSlice {
                op: self.op,
                edge,
                slice,
                reason: format!("the edge has only {} slices", self.waiting.len()),
            });
        }
        let r = self.range(s);
        if data.len() != r.len() {
            return Err(EngineError::UnexpectedSlice {
                op: self.op,
                edge,
                slice,
                reason: format!("{} bytes, expected {}", data.len(), r.len()),
            });
        }
        let seen = &mut self.seen[pos * self.waiting.len() + s];
        if *seen {
            return Err(EngineError::UnexpectedSlice {
                op: self.op,
                edge,
                slice,
                reason: "received twice".into(),
            });
        }
        *seen = true;
        if !self.started[s] {
            self.start_slice(s);
        }
        let n = self.part.input_count();
        let col = self.part.local.len() + pos;
        let fresh = self.fresh[s];
        for (o, buf) in self.outs.iter_mut().enumerate() {
            let c = self.part.coeffs[o * n + col];
            let target: &mut [u8] = match buf {
                OutBuf::Whole(w) => &mut w[r.clone()],
                OutBuf::Sliced(v) => v[s].as_mut().expect("slice started"),
                OutBuf::Plain(_) | OutBuf::Shared(_) => continue,
            };
            if fresh {
                self.kernel.mul(c, data, target);
            } else {
                self.kernel.mul_add(c, data, target);
            }
        }
        self.fresh[s] = false;
        self.waiting[s] -= 1;
        if self.waiting[s] == 0 {
            self.finish_slice(s, out);
        }
        Ok(())
    }

    fn finish_slice(&mut self, s: usize, out: &mut dyn FnMut(Outgoing)) {
        let r = self.range(s);
        let single = self.waiting.len() == 1;
        let part = self.part.clone();
        for (o, spec) in part.outputs.iter().enumerate() {
            if spec.sends.is_empty() {
                continue;
            }
            let payload = match &mut self.outs[o] {
                OutBuf::Plain(j) => Payload::Shared(self.locals[*j].clone(), r.clone()),
                OutBuf::Whole(w) if single => {
                    // Kept and sent, one slice: the transport and the result share the buffer.
                    let a = Arc::new(std::mem::take(w));
                    self.outs[o] = OutBuf::Shared(a.clone());
                    Payload::Shared(a, r.clone())
                }
                OutBuf::Whole(w) => {
                    // Kept and sent, several slices: the chunk is still being computed in
                    // place, so the finished slice is copied out for the transport.
                    let mut v = self.pool.take(r.len());
                    v.copy_from_slice(&w[r.clone()]);
                    Payload::Owned(v)
                }
                OutBuf::Shared(a) => Payload::Shared(a.clone(), r.clone()),
                OutBuf::Sliced(v) => Payload::Owned(v[s].take().expect("slice computed")),
            };
            if let [e] = spec.sends.as_slice() {
                out(Outgoing {
                    to: e.to,
                    edge: e.edge as u32,
                    slice: s as u32,
                    payload,
                });
                continue;
            }
            // One result to several peers: share the buffer instead of copying it; the
            // transport returns it to the pool when the last copy is written.
            let (buf, rr) = match payload {
                Payload::Owned(v) => {
                    let len = v.len();
                    (Arc::new(v), 0..len)
                }
                Payload::Shared(a, rr) => (a, rr),
                Payload::Empty => (Arc::new(Vec::new()), 0..0),
            };
            for e in &spec.sends {
                out(Outgoing {
                    to: e.to,
                    edge: e.edge as u32,
                    slice: s as u32,
                    payload: Payload::Shared(buf.clone(), rr.clone()),
                });
            }
        }
        self.slices_done += 1;
    }

    /// The chunks this part keeps (`store` outputs). Call when complete.
    pub fn into_results(self) -> Vec<(ChunkRef, Arc<Vec<u8>>)> {
        let mut res = Vec::new();
        for (spec, buf) in self.part.outputs.iter().zip(self.outs) {
            match (spec.store, buf) {
                (Some(c), OutBuf::Whole(w)) => res.push((c, Arc::new(w))),
                (Some(c), OutBuf::Shared(a)) => res.push((c, a)),
                _ => {}
            }
        }
        res
    }

    /// Gives the part's unsent slice buffers back to the pool (a failed operation).
    pub fn recycle(self) {
        for buf in self.outs {
            match buf {
                OutBuf::Whole(w) => self.pool.put(w),
                OutBuf::Sliced(v) => v.into_iter().flatten().for_each(|b| self.pool.put(b)),
                OutBuf::Shared(_) | OutBuf::Plain(_) => {}
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use graph::part::{InEdge, OutEdge, OutputSpec};

    /// Node 1 computes `2·local + 3·input` (chunk of 10 bytes, slices of 4) and both keeps it
    /// and sends it to node 2.
    fn part() -> Arc<VertexPart> {
        Arc::new(VertexPart {
            vertex: 4,
            node: 1,
            chunk_bytes: 10,
            slice_bytes: 4,
            local: vec![ChunkRef {
                stripe: 0,
                index: 0,
            }],
            inputs: vec![InEdge { edge: 6, from: 0 }],
            coeffs: vec![2, 3],
            outputs: vec![OutputSpec {
                sends: vec![OutEdge { edge: 7, to: 2 }],
                store: Some(ChunkRef {
                    stripe: 0,
                    index: 9,
                }),
            }],
        })
    }

    fn run(local: &[u8]) -> PartRun {
        PartRun::new(
            1,
            part(),
            vec![Arc::new(local.to_vec())],
            gf::kernel(),
            BufferPool::new(),
        )
        .unwrap()
    }

    #[test]
    fn a_part_computes_each_slice_when_its_input_arrives_in_any_order() {
        let local: Vec<u8> = (0..10).collect();
        let input: Vec<u8> = (100..110).collect();
        let want: Vec<u8> = local
            .iter()
            .zip(&input)
            .map(|(&a, &b)| gf::field::mul(2, a) ^ gf::field::mul(3, b))
            .collect();
        let mut r = run(&local);
        let mut sent: Vec<(u32, Vec<u8>)> = Vec::new();
        r.start(&mut |o| sent.push((o.slice, o.payload.as_slice().to_vec())));
        assert!(sent.is_empty(), "a vertex with inputs waits for them");
        for s in [2u32, 0, 1] {
            let range = (s as usize * 4)..((s as usize + 1) * 4).min(10);
            r.on_input(6, s, &input[range.clone()], &mut |o| {
                assert_eq!((o.to, o.edge), (2, 7));
                sent.push((o.slice, o.payload.as_slice().to_vec()));
            })
            .unwrap();
            // The slice is sent the moment its input is in, before the others arrive.
            assert_eq!(sent.last().unwrap(), &(s, want[range].to_vec()));
            assert_eq!(r.is_complete(), s == 1);
        }
        let results = r.into_results();
        assert_eq!(results.len(), 1);
        assert_eq!(results[0].0.index, 9);
        assert_eq!(*results[0].1, want);
    }

    #[test]
    fn unexpected_slices_are_errors_that_name_the_slice() {
        let mut r = run(&[0; 10]);
        let mut out = |_: Outgoing| {};
        let err = |e: EngineError| e.to_string();
        assert!(err(r.on_input(5, 0, &[0; 4], &mut out).unwrap_err()).contains("no such incoming"));
        assert!(err(r.on_input(6, 3, &[0; 4], &mut out).unwrap_err()).contains("only 3 slices"));
        // The last slice is 2 bytes long.
        assert!(err(r.on_input(6, 2, &[0; 4], &mut out).unwrap_err()).contains("expected 2"));
        r.on_input(6, 0, &[0; 4], &mut out).unwrap();
        assert!(err(r.on_input(6, 0, &[0; 4], &mut out).unwrap_err()).contains("twice"));
        assert!(!r.is_complete());
        r.recycle();
    }

    #[test]
    fn wrong_local_chunks_are_refused_when_the_run_is_prepared() {
        let p = part();
        let k = gf::kernel();
        let e = PartRun::new(1, p.clone(), vec![], k, BufferPool::new()).unwrap_err();
        assert!(
            e.to_string().contains("0 local chunks given, 1 expected"),
            "{e}"
        );
        let e = PartRun::new(1, p, vec![Arc::new(vec![0; 9])], k, BufferPool::new()).unwrap_err();
        assert!(e.to_string().contains("has 9 bytes, expected 10"), "{e}");
    }
}
