//! The per-node form of a plan, what the engine installs and runs: one [`VertexPart`] per
//! vertex, with its chunks as [`ChunkRef`]s, its incoming and outgoing edges resolved to the
//! nodes at their other ends, and one coefficient row per buffer it sends or keeps.
//! [`Plan::parts`] is the one lowering from a plan to parts; [`VertexPart::validate`] the one
//! check of a part's shape and sizes (the engine calls it again on parts it is sent).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::plan::{Buffer, CalcKind, EdgeId, NodeId, Plan, Primitive, Source, VertexId};
use crate::PlanError;

/// The largest slice a part may have: one slice travels in one engine frame, whose payload is
/// at most 64 MiB. Larger slices are refused by [`VertexPart::validate`].
pub const MAX_SLICE_BYTES: usize = 64 << 20;

/// A chunk held by a node: stripe id and chunk index within the stripe.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct ChunkRef {
    pub stripe: u64,
    pub index: u32,
}

/// An edge into a vertex, from a vertex on node `from`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct InEdge {
    pub edge: EdgeId,
    pub from: NodeId,
}

/// An edge out of a vertex, to a vertex on node `to`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct OutEdge {
    pub edge: EdgeId,
    pub to: NodeId,
}

/// One buffer a vertex computes: sent on `sends` and/or kept as chunk `store`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct OutputSpec {
    pub sends: Vec<OutEdge>,
    pub store: Option<ChunkRef>,
}

/// A vertex of a plan as one node executes it. Every edge carries a buffer of `chunk_bytes`
/// cut into slices of `slice_bytes` (the last one shorter).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct VertexPart {
    pub vertex: VertexId,
    pub node: NodeId,
    pub chunk_bytes: usize,
    pub slice_bytes: usize,
    /// Chunks read from the node's store, the first sources.
    pub local: Vec<ChunkRef>,
    /// Incoming edges, the sources after `local`.
    pub inputs: Vec<InEdge>,
    /// `outputs.len()` rows × `local.len() + inputs.len()` columns, row-major: output o =
    /// Σ coeffs[o][j] · source j.
    pub coeffs: Vec<u8>,
    pub outputs: Vec<OutputSpec>,
}

impl VertexPart {
    pub fn input_count(&self) -> usize {
        self.local.len() + self.inputs.len()
    }

    pub fn slice_count(&self) -> usize {
        self.chunk_bytes.div_ceil(self.slice_bytes.max(1))
    }

    /// The primitive this vertex runs, by the lowering rules of [`Primitive::lower`]: a
    /// part whose every output is an unchanged copy of one source computes nothing.
    pub fn primitive(&self) -> Primitive {
        let copies = (0..self.outputs.len()).all(|o| self.copied_source(o).is_some());
        let kind = if copies {
            None
        } else if self.coeffs.iter().all(|&c| c <= 1) {
            Some(CalcKind::Xor)
        } else {
            Some(CalcKind::Ec)
        };
        let sends = self.outputs.iter().any(|o| !o.sends.is_empty());
        Primitive::lower(!self.inputs.is_empty(), sends, kind)
    }

    /// The source that output `o` is an unchanged copy of, if it is one.
    fn copied_source(&self, o: usize) -> Option<usize> {
        let n = self.input_count();
        let row = self.coeffs.get(o * n..(o + 1) * n)?;
        let mut nonzero = row.iter().enumerate().filter(|(_, &c)| c != 0);
        match (nonzero.next(), nonzero.next()) {
            (Some((j, &1)), None) => Some(j),
            _ => None,
        }
    }

    /// The local chunk that output `o` sends unchanged (no inputs, nothing kept), if it does:
    /// the engine sends such an output straight from the store.
    pub fn plain_local(&self, o: usize) -> Option<usize> {
        if !self.inputs.is_empty() || self.outputs[o].store.is_some() {
            return None;
        }
        self.copied_source(o)
    }

    /// Every peer this vertex receives from or sends to.
    pub fn peers(&self) -> Vec<NodeId> {
        let mut p: Vec<NodeId> = self
            .inputs
            .iter()
            .map(|e| e.from)
            .chain(
                self.outputs
                    .iter()
                    .flat_map(|o| o.sends.iter().map(|s| s.to)),
            )
            .collect();
        p.sort_unstable();
        p.dedup();
        p
    }

    /// Checks the shape and the sizes; the error names what is wrong.
    pub fn validate(&self) -> Result<(), PlanError> {
        let bad = |reason: String| PlanError::BadPart {
            vertex: self.vertex,
            reason,
        };
        if self.chunk_bytes == 0 || self.slice_bytes == 0 {
            return Err(bad("chunk_bytes and slice_bytes must be positive".into()));
        }
        let frame_bytes = self.slice_bytes.min(self.chunk_bytes);
        if frame_bytes > MAX_SLICE_BYTES {
            return Err(bad(format!(
                "slices of {frame_bytes} bytes exceed the wire limit of {MAX_SLICE_BYTES} bytes \
                 per frame; use a smaller slice_bytes"
            )));
        }
        if self.slice_count() > u32::MAX as usize {
            return Err(bad(format!("{} slices is too many", self.slice_count())));
        }
        let edges = self.inputs.iter().map(|e| e.edge).chain(
            self.outputs
                .iter()
                .flat_map(|o| o.sends.iter().map(|s| s.edge)),
        );
        for e in edges {
            if e > u32::MAX as usize {
                return Err(bad(format!("edge id {e} does not fit a frame header")));
            }
        }
        if self.coeffs.len() != self.outputs.len() * self.input_count() {
            return Err(bad(format!(
                "{} coefficients for {} outputs × {} inputs",
                self.coeffs.len(),
                self.outputs.len(),
                self.input_count()
            )));
        }
        Ok(())
    }
}

impl Plan {
    /// One [`VertexPart`] per vertex, for the chunks of stripe `stripe`: the plan's lowering
    /// to what each node runs. Every buffer a vertex sends or keeps becomes one output whose
    /// coefficient row is the calculator's row (a computed buffer), or a unit row (a local
    /// chunk sent as it is, or an input forwarded). Every part is validated.
    pub fn parts(&self, stripe: u64) -> Result<Vec<VertexPart>, PlanError> {
        parts_of(self, stripe)
    }

    /// The nodes the plan runs on, ascending.
    pub fn nodes(&self) -> Vec<NodeId> {
        let mut n: Vec<NodeId> = self.vertices.iter().map(|v| v.node).collect();
        n.sort_unstable();
        n.dedup();
        n
    }

    /// The chunks the plan reads, with the node that must hold each: `(node, chunk index)`.
    pub fn local_inputs(&self) -> Vec<(NodeId, usize)> {
        let mut v: Vec<(NodeId, usize)> = self
            .vertices
            .iter()
            .flat_map(|v| v.local.iter().map(move |&c| (v.node, c)))
            .collect();
        v.sort_unstable();
        v.dedup();
        v
    }
}

fn parts_of(plan: &Plan, stripe: u64) -> Result<Vec<VertexPart>, PlanError> {
    let bad = |vertex: VertexId, reason: String| PlanError::BadPart { vertex, reason };
    let chunk = |index: usize| ChunkRef {
        stripe,
        index: index as u32,
    };
    let mut parts = Vec::with_capacity(plan.vertices.len());
    for v in &plan.vertices {
        let nl = v.local.len();
        let cols = nl + v.inputs.len();
        for &e in &v.inputs {
            let edge = &plan.edges[e];
            if edge.bytes != plan.chunk_bytes {
                return Err(bad(
                    v.id,
                    format!(
                        "edge {e} carries {} bytes; the engine moves chunk-sized buffers of {}",
                        edge.bytes, plan.chunk_bytes
                    ),
                ));
            }
        }
        if let Some(calc) = &v.calc {
            if calc.cols != cols || calc.rows != v.outputs.len() {
                return Err(bad(
                    v.id,
                    format!(
                        "calculator is {}×{}, vertex has {} outputs and {cols} sources",
                        calc.rows,
                        calc.cols,
                        v.outputs.len()
                    ),
                ));
            }
        }
        // Outputs keyed by where the buffer comes from, so that one buffer sent on several
        // edges (and maybe stored) is computed once.
        let mut outputs: BTreeMap<(u8, usize), (Vec<u8>, OutputSpec)> = BTreeMap::new();
        let unit = |col: usize| {
            let mut r = vec![0u8; cols];
            r[col] = 1;
            r
        };
        let row_of = |src: Source| -> (u8, usize, Vec<u8>) {
            match src {
                Source::Output(pos) => {
                    let calc = v
                        .calc
                        .as_ref()
                        .expect("a vertex with outputs has a calculator");
                    (0, pos, calc.coeffs[pos * cols..(pos + 1) * cols].to_vec())
                }
                Source::Local(pos) => (1, pos, unit(pos)),
                Source::Input(pos) => (2, pos, unit(nl + pos)),
            }
        };
        for &e in &v.sends {
            let edge = &plan.edges[e];
            let (kind, pos, row) = row_of(plan.edge_source(e));
            let entry = outputs.entry((kind, pos)).or_insert_with(|| {
                (
                    row,
                    OutputSpec {
                        sends: vec![],
                        store: None,
                    },
                )
            });
            entry.1.sends.push(OutEdge {
                edge: e,
                to: plan.vertices[edge.to].node,
            });
        }
        for &c in &v.stores {
            let src = if let Some(pos) = v.outputs.iter().position(|o| o.buffer == Buffer::Chunk(c))
            {
                Source::Output(pos)
            } else if let Some(pos) = v
                .inputs
                .iter()
                .position(|&i| plan.edges[i].buffer == Buffer::Chunk(c))
            {
                Source::Input(pos)
            } else if v.local.contains(&c) {
                // Already in the node's store.
                continue;
            } else {
                return Err(bad(
                    v.id,
                    format!("stores chunk {c}, which it neither computes nor receives"),
                ));
            };
            let (kind, pos, row) = row_of(src);
            let entry = outputs.entry((kind, pos)).or_insert_with(|| {
                (
                    row,
                    OutputSpec {
                        sends: vec![],
                        store: None,
                    },
                )
            });
            entry.1.store = Some(chunk(c));
        }
        let mut coeffs = Vec::new();
        let mut specs = Vec::new();
        for (_, (row, spec)) in outputs {
            coeffs.extend(row);
            specs.push(spec);
        }
        let part = VertexPart {
            vertex: v.id,
            node: v.node,
            chunk_bytes: plan.chunk_bytes,
            slice_bytes: plan.slice_bytes,
            local: v.local.iter().map(|&c| chunk(c)).collect(),
            inputs: v
                .inputs
                .iter()
                .map(|&e| InEdge {
                    edge: e,
                    from: plan.vertices[plan.edges[e].from].node,
                })
                .collect(),
            coeffs,
            outputs: specs,
        };
        part.validate()?;
        parts.push(part);
    }
    Ok(parts)
}
