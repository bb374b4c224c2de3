//! From a plan (a Dynamic EC Graph of the `graph` crate) to the parts each node executes.

use std::collections::BTreeMap;

use graph::{Buffer, Plan, Source};

use crate::part::{ChunkRef, InEdge, OutEdge, OutputSpec, VertexPart};
use crate::transport::NodeId;
use crate::EngineError;

/// One [`VertexPart`] per vertex of `plan`, for the chunks of stripe `stripe`. Plan node `i`
/// is engine node `i`. Every buffer a vertex sends or keeps becomes one output whose
/// coefficient row is the calculator's row (a computed buffer), or a unit row (a local chunk
/// sent as it is, or an input forwarded).
pub fn parts_of(plan: &Plan, stripe: u64) -> Result<Vec<VertexPart>, EngineError> {
    let bad = |vertex: usize, reason: String| EngineError::BadPart {
        vertex: vertex as u32,
        reason,
    };
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
                edge: e as u32,
                to: plan.vertices[edge.to].node as NodeId,
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
        parts.push(VertexPart {
            vertex: v.id as u32,
            node: v.node as NodeId,
            chunk_bytes: plan.chunk_bytes,
            slice_bytes: plan.slice_bytes.min(plan.chunk_bytes).max(1),
            locals: v.local.iter().map(|&c| chunk(c)).collect(),
            in_edges: v
                .inputs
                .iter()
                .map(|&e| InEdge {
                    edge: e as u32,
                    from: plan.vertices[plan.edges[e].from].node as NodeId,
                })
                .collect(),
            coeffs,
            outputs: specs,
        });
    }
    Ok(parts)
}

/// The nodes a plan runs on, ascending.
pub fn plan_nodes(plan: &Plan) -> Vec<NodeId> {
    let mut n: Vec<NodeId> = plan.vertices.iter().map(|v| v.node as NodeId).collect();
    n.sort_unstable();
    n.dedup();
    n
}

/// The chunks a plan reads, with the node that must hold each: `(node, chunk index)`.
pub fn plan_inputs(plan: &Plan) -> Vec<(NodeId, usize)> {
    let mut v: Vec<(NodeId, usize)> = plan
        .vertices
        .iter()
        .flat_map(|v| v.local.iter().map(move |&c| (v.node as NodeId, c)))
        .collect();
    v.sort_unstable();
    v.dedup();
    v
}
