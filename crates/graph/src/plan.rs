//! The plan type (a Dynamic EC Graph): vertices, edges, the linear combination every buffer
//! holds, lowering to primitives, and the text and DOT renderings.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::{self, Write as _};
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use crate::PlanError;

/// Index of a vertex in [`Plan::vertices`].
pub type VertexId = usize;
/// Index of an edge in [`Plan::edges`].
pub type EdgeId = usize;
/// A node of a cluster: the same number in a plan (`Vertex::node`, the placement) and in the
/// engine that runs it. Plan runners use ids from `engine::RUNNER_BASE` (`0xF000_0000`) up;
/// ids travel as u32 in frame headers.
pub type NodeId = usize;

/// Which scheme decides the shape of the plan.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Scheme {
    /// Conventional Reed-Solomon: the agent encodes, k helpers send to the requester.
    Rs,
    /// Azure LRC: local parities by XOR, group-local repair where possible.
    Lrc,
    /// Partial Parallel Repair: a binomial reduction tree of helpers.
    Ppr,
    /// Repair pipelining: a chain of helpers, the chunk cut into slices.
    Ecpipe,
    /// Tripartite graph: the calculation is split over three layers of nodes.
    Triec,
}

impl Scheme {
    pub const ALL: [Scheme; 5] = [
        Scheme::Rs,
        Scheme::Lrc,
        Scheme::Ppr,
        Scheme::Ecpipe,
        Scheme::Triec,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Scheme::Rs => "rs",
            Scheme::Lrc => "lrc",
            Scheme::Ppr => "ppr",
            Scheme::Ecpipe => "ecpipe",
            Scheme::Triec => "triec",
        }
    }
}

impl fmt::Display for Scheme {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.pad(self.name())
    }
}

impl FromStr for Scheme {
    type Err = PlanError;
    fn from_str(s: &str) -> Result<Scheme, PlanError> {
        Scheme::ALL
            .into_iter()
            .find(|k| k.name() == s)
            .ok_or_else(|| PlanError::UnknownScheme {
                name: s.to_string(),
            })
    }
}

/// The operation a plan performs.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Operation {
    /// Write one stripe: the agent holds the k data chunks; afterwards every chunk is stored
    /// on its node.
    Encode,
    /// Rebuild the lost chunks; `lost[i]` ends up stored on node `at[i]`.
    Repair { lost: Vec<usize>, at: Vec<usize> },
}

/// The INEC primitive a vertex runs (INEC §III-A), plus the plain network operations.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Primitive {
    /// Send local chunks as they are.
    Send,
    /// Compute from local chunks with the `Ec` calculator, send the results.
    EcSend,
    /// Compute from local chunks with the `Xor` calculator, send the results.
    XorSend,
    /// Wait for the inputs, compute (`Ec`), send the results on.
    RecvEcSend,
    /// Wait for the inputs, compute (`Xor`), send the results on.
    RecvXorSend,
    /// Wait for the inputs and compute (`Ec`); the results stay on the node.
    RecvEc,
    /// Wait for the inputs and compute (`Xor`); the results stay on the node.
    RecvXor,
    /// Receive and store, no computation (the sinks of an encode).
    Recv,
    /// Receive and forward unchanged, no computation.
    RecvSend,
}

impl Primitive {
    pub fn name(self) -> &'static str {
        match self {
            Primitive::Send => "send",
            Primitive::EcSend => "ec-send",
            Primitive::XorSend => "xor-send",
            Primitive::RecvEcSend => "recv-ec-send",
            Primitive::RecvXorSend => "recv-xor-send",
            Primitive::RecvEc => "recv-ec",
            Primitive::RecvXor => "recv-xor",
            Primitive::Recv => "recv",
            Primitive::RecvSend => "recv-send",
        }
    }

    /// The lowering rules of INEC §III-D: no inputs → (ec/xor-)send; no sends → recv(-ec/xor);
    /// otherwise recv-(ec/xor-)send. The calculator kind picks ec or xor; `None` means the
    /// vertex computes nothing.
    pub fn lower(has_inputs: bool, has_sends: bool, calc: Option<CalcKind>) -> Primitive {
        match (has_inputs, has_sends, calc) {
            (false, _, None) => Primitive::Send,
            (false, _, Some(CalcKind::Ec)) => Primitive::EcSend,
            (false, _, Some(CalcKind::Xor)) => Primitive::XorSend,
            (true, false, None) => Primitive::Recv,
            (true, false, Some(CalcKind::Ec)) => Primitive::RecvEc,
            (true, false, Some(CalcKind::Xor)) => Primitive::RecvXor,
            (true, true, None) => Primitive::RecvSend,
            (true, true, Some(CalcKind::Ec)) => Primitive::RecvEcSend,
            (true, true, Some(CalcKind::Xor)) => Primitive::RecvXorSend,
        }
    }
}

impl fmt::Display for Primitive {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.pad(self.name())
    }
}

/// Which calculator a vertex uses.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum CalcKind {
    /// A GF(2^8) matrix times the sources.
    Ec,
    /// Every non-zero coefficient is 1: the outputs are XORs of sources.
    Xor,
}

/// What a vertex computes: `outputs = coeffs · sources`, where the sources are the vertex's
/// local chunks (in order) followed by the buffers of its input edges (in order).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Calc {
    pub kind: CalcKind,
    /// One row per computed output.
    pub rows: usize,
    /// One column per source (`local.len() + inputs.len()`).
    pub cols: usize,
    /// Row-major, `rows × cols`. For `Xor` every entry is 0 or 1.
    pub coeffs: Vec<u8>,
}

impl Calc {
    pub fn coeff(&self, row: usize, col: usize) -> u8 {
        self.coeffs[row * self.cols + col]
    }
}

/// What an edge carries.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Buffer {
    /// The full content of chunk i of the stripe (read from a store, or computed).
    Chunk(usize),
    /// A partial result, numbered uniquely within the plan; its content is the linear
    /// combination recorded at the vertex that computes it.
    Partial(usize),
}

impl fmt::Display for Buffer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Buffer::Chunk(i) => write!(f, "c{i}"),
            Buffer::Partial(i) => write!(f, "p{i}"),
        }
    }
}

/// One buffer a vertex computes.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Output {
    pub buffer: Buffer,
    /// The buffer's content as a combination of the stripe's chunks: `Σ_i combination[i] ·
    /// chunk_i`, one coefficient per chunk of the stripe (length n). For encode the support is
    /// the data chunks; for repair it is the surviving helpers' chunks.
    pub combination: Vec<u8>,
}

/// What role a vertex plays in its scheme (for reading the plan; the primitive is what runs).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    /// Holds the data chunks of a stripe being written.
    Agent,
    /// Stores a chunk it receives (encode).
    Store,
    /// A surviving chunk's node taking part in a repair.
    Helper,
    /// A TriEC layer-2 vertex: data node during encode, aggregation vertex during repair.
    Layer2,
    /// Receives or rebuilds the lost chunks (a requester or a recovering node).
    Requester,
}

impl Role {
    pub fn name(self) -> &'static str {
        match self {
            Role::Agent => "agent",
            Role::Store => "store",
            Role::Helper => "helper",
            Role::Layer2 => "layer2",
            Role::Requester => "requester",
        }
    }
}

/// One vertex: a node's part of the plan, run by one primitive.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Vertex {
    pub id: VertexId,
    pub node: NodeId,
    pub role: Role,
    pub primitive: Primitive,
    /// Chunks read from the node's own store, the first sources of the calculator.
    pub local: Vec<usize>,
    /// Input edges, in calculator column order after `local`.
    pub inputs: Vec<EdgeId>,
    /// The calculator; `None` when the vertex only moves buffers.
    pub calc: Option<Calc>,
    /// The computed buffers, one per calculator row.
    pub outputs: Vec<Output>,
    /// Output edges. Each carries a computed output, a local chunk or an input's buffer.
    pub sends: Vec<EdgeId>,
    /// Chunks this vertex leaves in its node's store at the end (computed or received).
    pub stores: Vec<usize>,
}

/// One transfer of one buffer between two vertices.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Edge {
    pub id: EdgeId,
    pub from: VertexId,
    pub to: VertexId,
    pub buffer: Buffer,
    /// The buffer's size; the edge moves it in `ceil(bytes / Plan::slice_bytes)` messages.
    pub bytes: usize,
}

/// Where the sending vertex finds the buffer of an edge.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Source {
    /// `local[pos]`.
    Local(usize),
    /// The buffer of input edge `inputs[pos]`.
    Input(usize),
    /// `outputs[pos]`.
    Output(usize),
}

/// A Dynamic EC Graph: the whole of one encode or repair.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Plan {
    pub scheme: Scheme,
    /// The code, as `Code`'s display form (`rs:6,3`, `lrc:12,2,2`).
    pub code: String,
    pub k: usize,
    pub n: usize,
    pub operation: Operation,
    /// Node of each chunk, `placement[i]` for chunk i.
    pub placement: Vec<usize>,
    /// The agent's node (holds the data during encode; the default requester of a repair).
    pub agent: usize,
    pub chunk_bytes: usize,
    /// Equal to `chunk_bytes` when the plan is not sliced.
    pub slice_bytes: usize,
    /// Vertices in a topological order (every edge goes from a lower to a higher id).
    pub vertices: Vec<Vertex>,
    pub edges: Vec<Edge>,
}

impl Plan {
    /// Slices per chunk.
    pub fn slice_count(&self) -> usize {
        self.chunk_bytes.div_ceil(self.slice_bytes).max(1)
    }

    /// Where vertex `e.from` finds the buffer edge `e` carries.
    pub fn edge_source(&self, e: EdgeId) -> Source {
        let edge = &self.edges[e];
        let v = &self.vertices[edge.from];
        if let Some(pos) = v.outputs.iter().position(|o| o.buffer == edge.buffer) {
            return Source::Output(pos);
        }
        if let Buffer::Chunk(c) = edge.buffer {
            if let Some(pos) = v.local.iter().position(|&l| l == c) {
                return Source::Local(pos);
            }
        }
        let pos = v
            .inputs
            .iter()
            .position(|&i| self.edges[i].buffer == edge.buffer)
            .expect("plan invariant: every sent buffer is an output, a local chunk or an input");
        Source::Input(pos)
    }

    /// The stripe combination of every edge's buffer, derived from the calculators (not from
    /// the recorded `combination`s). Used by [`Plan::check`].
    pub fn derived_combinations(&self) -> Vec<Vec<u8>> {
        self.derive().0
    }

    /// The stripe combination of every vertex's outputs (`[vertex][output]`), derived from
    /// the calculators; what the builder records as each output's `combination`.
    pub fn derived_output_combinations(&self) -> Vec<Vec<Vec<u8>>> {
        self.derive().1
    }

    /// One pass over the vertices in topological order: the combination of every edge and of
    /// every vertex output.
    fn derive(&self) -> (Vec<Vec<u8>>, Vec<Vec<Vec<u8>>>) {
        let mut edge_combo: Vec<Option<Vec<u8>>> = vec![None; self.edges.len()];
        let mut output_combos = Vec::with_capacity(self.vertices.len());
        let unit = |i: usize| {
            let mut v = vec![0u8; self.n];
            v[i] = 1;
            v
        };
        for v in &self.vertices {
            let mut sources: Vec<Vec<u8>> = v.local.iter().map(|&c| unit(c)).collect();
            for &e in &v.inputs {
                sources.push(
                    edge_combo[e]
                        .clone()
                        .expect("plan invariant: vertices are in topological order"),
                );
            }
            let outputs: Vec<Vec<u8>> = match &v.calc {
                None => Vec::new(),
                Some(c) => (0..c.rows)
                    .map(|r| {
                        let mut acc = vec![0u8; self.n];
                        for (col, src) in sources.iter().enumerate() {
                            let a = c.coeff(r, col);
                            for (x, &s) in acc.iter_mut().zip(src) {
                                *x ^= gf::field::mul(a, s);
                            }
                        }
                        acc
                    })
                    .collect(),
            };
            for &e in &v.sends {
                let combo = match self.edge_source(e) {
                    Source::Local(p) => sources[p].clone(),
                    Source::Input(p) => sources[v.local.len() + p].clone(),
                    Source::Output(p) => outputs[p].clone(),
                };
                edge_combo[e] = Some(combo);
            }
            output_combos.push(outputs);
        }
        let edges = edge_combo
            .into_iter()
            .map(|c| c.unwrap_or_default())
            .collect();
        (edges, output_combos)
    }

    /// Checks the plan's structure and its algebra against the generator matrix (`n × k`,
    /// row-major, identity on top): every recorded combination is what the calculators
    /// compute, every stored chunk equals its generator row, and a repair reads no lost chunk.
    pub fn check(&self, generator: &[u8]) -> Result<(), PlanError> {
        let bad = |reason: String| Err(PlanError::Invalid { reason });
        let (k, n) = (self.k, self.n);
        if generator.len() != n * k {
            return bad(format!(
                "generator has {} entries, expected {}",
                generator.len(),
                n * k
            ));
        }
        for (i, e) in self.edges.iter().enumerate() {
            if e.id != i || e.from >= e.to || e.to >= self.vertices.len() {
                return bad(format!("edge {i} is out of order or dangling"));
            }
        }
        for (i, v) in self.vertices.iter().enumerate() {
            if v.id != i {
                return bad(format!("vertex {i} has id {}", v.id));
            }
            let cols = v.local.len() + v.inputs.len();
            if let Some(c) = &v.calc {
                if c.cols != cols || c.rows != v.outputs.len() || c.coeffs.len() != c.rows * c.cols
                {
                    return bad(format!("vertex {i}: calculator shape does not match"));
                }
                if c.kind == CalcKind::Xor && c.coeffs.iter().any(|&a| a > 1) {
                    return bad(format!("vertex {i}: xor calculator with a coefficient > 1"));
                }
            } else if !v.outputs.is_empty() {
                return bad(format!("vertex {i}: outputs without a calculator"));
            }
            let kind = v.calc.as_ref().map(|c| c.kind);
            let want = Primitive::lower(!v.inputs.is_empty(), !v.sends.is_empty(), kind);
            if v.primitive != want {
                return bad(format!(
                    "vertex {i}: runs {} but lowers to {want}",
                    v.primitive
                ));
            }
            if v.inputs.iter().any(|&e| self.edges[e].to != i)
                || v.sends.iter().any(|&e| self.edges[e].from != i)
            {
                return bad(format!("vertex {i}: edge lists disagree with the edges"));
            }
        }
        let lost: BTreeSet<usize> = match &self.operation {
            Operation::Encode => (k..n).collect(),
            Operation::Repair { lost, .. } => lost.iter().copied().collect(),
        };
        for v in &self.vertices {
            if let Some(&c) = v.local.iter().find(|c| lost.contains(c)) {
                return bad(format!(
                    "vertex {} reads chunk {c}, which is not available",
                    v.id
                ));
            }
        }
        let edge_combo = self.derived_combinations();
        // Combination over the stripe → combination over the data (via the generator).
        let to_data = |combo: &[u8]| -> Vec<u8> {
            let mut acc = vec![0u8; k];
            for (i, &a) in combo.iter().enumerate() {
                for (j, x) in acc.iter_mut().enumerate() {
                    *x ^= gf::field::mul(a, generator[i * k + j]);
                }
            }
            acc
        };
        let mut stored: BTreeMap<(usize, usize), ()> = BTreeMap::new();
        for v in &self.vertices {
            for &c in &v.stores {
                let combo = if let Some(o) = v.outputs.iter().find(|o| o.buffer == Buffer::Chunk(c))
                {
                    o.combination.clone()
                } else if let Some(&e) = v
                    .inputs
                    .iter()
                    .find(|&&e| self.edges[e].buffer == Buffer::Chunk(c))
                {
                    edge_combo[e].clone()
                } else {
                    return bad(format!(
                        "vertex {} stores chunk {c} it neither computes nor receives",
                        v.id
                    ));
                };
                if to_data(&combo) != generator[c * k..(c + 1) * k] {
                    return bad(format!("vertex {} stores a wrong chunk {c}", v.id));
                }
                stored.insert((v.node, c), ());
            }
            for &e in &v.sends {
                if let Source::Output(p) = self.edge_source(e) {
                    if v.outputs[p].combination != edge_combo[e] {
                        return bad(format!(
                            "vertex {} output {p}: recorded combination differs",
                            v.id
                        ));
                    }
                }
            }
        }
        let wanted: Vec<(usize, usize)> = match &self.operation {
            Operation::Encode => (0..n).map(|c| (self.placement[c], c)).collect(),
            Operation::Repair { lost, at } => {
                at.iter().copied().zip(lost.iter().copied()).collect()
            }
        };
        for w in wanted {
            if !stored.contains_key(&w) {
                return bad(format!("chunk {} is not stored on node {}", w.1, w.0));
            }
        }
        Ok(())
    }

    /// Stable text: one line per vertex (with its outputs' combinations) and per edge.
    pub fn to_text(&self) -> String {
        let mut s = String::new();
        let op = match &self.operation {
            Operation::Encode => "encode".to_string(),
            Operation::Repair { lost, at } => format!("repair lost={} at={}", list(lost), list(at)),
        };
        let _ = writeln!(
            s,
            "plan {} {} {op} chunk_bytes={} slice_bytes={} slices={}",
            self.scheme,
            self.code,
            self.chunk_bytes,
            self.slice_bytes,
            self.slice_count()
        );
        for v in &self.vertices {
            let ins: Vec<String> = v.inputs.iter().map(|e| format!("e{e}")).collect();
            let _ = write!(
                s,
                "v{} node={} {} {} local=[{}] in=[{}]",
                v.id,
                v.node,
                v.role.name(),
                v.primitive,
                list(&v.local),
                ins.join(",")
            );
            if let Some(c) = &v.calc {
                let kind = match c.kind {
                    CalcKind::Ec => "ec",
                    CalcKind::Xor => "xor",
                };
                let rows: Vec<String> = (0..c.rows)
                    .map(|r| {
                        (0..c.cols)
                            .map(|col| format!("{:02x}", c.coeff(r, col)))
                            .collect::<Vec<_>>()
                            .join(" ")
                    })
                    .collect();
                let _ = write!(s, " calc={kind}[{}]", rows.join("; "));
            }
            if !v.stores.is_empty() {
                let _ = write!(s, " stores=[{}]", list(&v.stores));
            }
            s.push('\n');
            for o in &v.outputs {
                let _ = writeln!(s, "  {} = {}", o.buffer, combination_text(&o.combination));
            }
        }
        for e in &self.edges {
            let _ = writeln!(
                s,
                "e{} v{}->v{} node {}->{} {} bytes={}",
                e.id,
                e.from,
                e.to,
                self.vertices[e.from].node,
                self.vertices[e.to].node,
                e.buffer,
                e.bytes
            );
        }
        s
    }

    /// Graphviz DOT: one box per vertex (node, role, primitive), one arrow per edge.
    pub fn to_dot(&self) -> String {
        let mut s = String::new();
        let op = match &self.operation {
            Operation::Encode => "encode".to_string(),
            Operation::Repair { lost, .. } => format!("repair lost {}", list(lost)),
        };
        let _ = writeln!(s, "digraph plan {{");
        let _ = writeln!(s, "  rankdir=LR;");
        let _ = writeln!(
            s,
            "  label=\"{} {} {op}, chunk {} B, slice {} B\";",
            self.scheme, self.code, self.chunk_bytes, self.slice_bytes
        );
        let _ = writeln!(s, "  node [shape=box, fontname=\"monospace\"];");
        for v in &self.vertices {
            let mut label = format!(
                "v{} node {}\\n{}\\n{}",
                v.id,
                v.node,
                v.role.name(),
                v.primitive
            );
            if !v.local.is_empty() {
                let _ = write!(
                    label,
                    "\\nlocal c{}",
                    v.local
                        .iter()
                        .map(|c| c.to_string())
                        .collect::<Vec<_>>()
                        .join(",c")
                );
            }
            if !v.stores.is_empty() {
                let _ = write!(
                    label,
                    "\\nstores c{}",
                    v.stores
                        .iter()
                        .map(|c| c.to_string())
                        .collect::<Vec<_>>()
                        .join(",c")
                );
            }
            let _ = writeln!(s, "  v{} [label=\"{label}\"];", v.id);
        }
        for e in &self.edges {
            let _ = writeln!(s, "  v{} -> v{} [label=\"{}\"];", e.from, e.to, e.buffer);
        }
        s.push_str("}\n");
        s
    }
}

fn list(xs: &[usize]) -> String {
    xs.iter()
        .map(|x| x.to_string())
        .collect::<Vec<_>>()
        .join(",")
}

/// `8e·c1 + 5b·c2`; `0` for the zero combination.
pub fn combination_text(combo: &[u8]) -> String {
    let terms: Vec<String> = combo
        .iter()
        .enumerate()
        .filter(|(_, &a)| a != 0)
        .map(|(i, &a)| {
            if a == 1 {
                format!("c{i}")
            } else {
                format!("{a:02x}*c{i}")
            }
        })
        .collect();
    if terms.is_empty() {
        "0".to_string()
    } else {
        terms.join(" + ")
    }
}
