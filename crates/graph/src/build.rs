//! Builders: the plan of every scheme for encode and for repair.
//!
//! A builder describes each vertex's outputs as rows over *source buffers* (its local chunks
//! and the buffers it receives); `Builder::finish` then simplifies (an output that is just
//! one source with coefficient 1 is not computed: the source is sent as it is), numbers the
//! calculator columns, derives every buffer's stripe combination and lowers every vertex to
//! its primitive.

use std::collections::{BTreeMap, BTreeSet};

use codes::{Code, Codec};

use crate::plan::{
    Buffer, Calc, CalcKind, Edge, EdgeId, Operation, Output, Plan, Primitive, Role, Scheme, Vertex,
    VertexId,
};
use crate::PlanError;

/// Where the chunks of a stripe live.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Placement {
    /// `nodes[i]` holds chunk i.
    pub nodes: Vec<usize>,
    /// The agent: holds the data chunks of a stripe being written and is the default
    /// requester of a repair.
    pub agent: usize,
}

impl Placement {
    /// Chunk i on node i + 1, the agent on node 0.
    pub fn standard(n: usize) -> Placement {
        Placement {
            nodes: (1..=n).collect(),
            agent: 0,
        }
    }
}

/// Where the rebuilt chunks go.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Target {
    /// Every lost chunk is rebuilt on this node (a degraded read at a requester).
    Node(usize),
    /// Every lost chunk is rebuilt on the node that held it (recovery onto a replacement).
    InPlace,
    /// Lost chunk `lost[i]` is rebuilt on node `nodes[i]`.
    Each(Vec<usize>),
}

/// What to build.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Request {
    Encode,
    Repair { lost: Vec<usize>, target: Target },
}

/// Everything a plan is built from.
#[derive(Clone, Debug)]
pub struct PlanSpec {
    pub scheme: Scheme,
    pub code: Code,
    pub request: Request,
    pub placement: Placement,
    pub chunk_bytes: usize,
    /// `None`: unsliced (`chunk_bytes`), except ECPipe repair, which defaults to
    /// [`ECPIPE_DEFAULT_SLICES`] slices (ECPipe encode is RS encode, unsliced unless told).
    pub slice_bytes: Option<usize>,
    /// TriEC repair: the number p of layer-2 aggregation vertices (default
    /// [`default_aggregators`]).
    pub aggregators: Option<usize>,
}

/// Largest chunk the builders accept (1 GiB).
pub const MAX_CHUNK_BYTES: usize = 1 << 30;

/// ECPipe repair cuts a chunk into this many slices unless told otherwise.
pub const ECPIPE_DEFAULT_SLICES: usize = 8;

/// The TriEC repair default: p = round(√helpers), which balances layer 2's fan-in (≈ helpers/p)
/// against layer 3's (p).
pub fn default_aggregators(helpers: usize) -> usize {
    ((helpers as f64).sqrt().round() as usize).clamp(1, helpers.max(1))
}

impl PlanSpec {
    /// A spec with the standard placement and default slicing.
    pub fn new(scheme: Scheme, code: Code, request: Request, chunk_bytes: usize) -> PlanSpec {
        PlanSpec {
            scheme,
            code,
            request,
            placement: Placement::standard(code.n()),
            chunk_bytes,
            slice_bytes: None,
            aggregators: None,
        }
    }
}

/// Builds the plan a spec describes.
pub fn build(spec: &PlanSpec) -> Result<Plan, PlanError> {
    let code = spec.code;
    let (k, n) = (code.k(), code.n());
    match (spec.scheme, code) {
        (Scheme::Rs, Code::Lrc { .. }) | (Scheme::Lrc, Code::Rs { .. }) => {
            return Err(PlanError::SchemeCodeMismatch {
                scheme: spec.scheme,
                code: code.to_string(),
            })
        }
        _ => {}
    }
    if spec.chunk_bytes == 0 || spec.chunk_bytes > MAX_CHUNK_BYTES {
        return Err(PlanError::BadSize {
            what: "chunk_bytes",
            value: spec.chunk_bytes,
            limit: MAX_CHUNK_BYTES,
        });
    }
    let slice_bytes = match (spec.slice_bytes, spec.scheme, &spec.request) {
        (Some(s), _, _) => s,
        (None, Scheme::Ecpipe, Request::Repair { .. }) => {
            spec.chunk_bytes.div_ceil(ECPIPE_DEFAULT_SLICES)
        }
        (None, _, _) => spec.chunk_bytes,
    };
    if slice_bytes == 0 || slice_bytes > spec.chunk_bytes {
        return Err(PlanError::BadSize {
            what: "slice_bytes",
            value: slice_bytes,
            limit: spec.chunk_bytes,
        });
    }
    if spec.placement.nodes.len() != n {
        return Err(PlanError::BadPlacement {
            reason: format!(
                "placement names {} nodes, the code has {n} chunks",
                spec.placement.nodes.len()
            ),
        });
    }
    let mut b = Builder {
        n,
        k,
        vertices: Vec::new(),
        edges: Vec::new(),
        next_partial: 0,
    };
    let codec = Codec::new(code);
    let operation = match &spec.request {
        Request::Encode => {
            let generator = code.generator();
            if spec.scheme == Scheme::Triec {
                triec_encode(&mut b, &generator, &spec.placement);
            } else {
                conventional_encode(&mut b, code, &generator, &spec.placement);
            }
            Operation::Encode
        }
        Request::Repair { lost, target } => {
            let at = validate_repair(code, lost, target, &spec.placement)?;
            if !codec.is_recoverable(lost) {
                return Err(PlanError::Unrecoverable {
                    code: code.to_string(),
                    lost: lost.clone(),
                });
            }
            let dest: BTreeMap<usize, usize> =
                lost.iter().copied().zip(at.iter().copied()).collect();
            for job in repair_jobs(&codec, lost)? {
                match spec.scheme {
                    Scheme::Rs | Scheme::Lrc => star_repair(&mut b, &job, &dest, &spec.placement),
                    Scheme::Ppr => ppr_repair(&mut b, &job, &dest, &spec.placement),
                    Scheme::Ecpipe => ecpipe_repair(&mut b, &job, &dest, &spec.placement),
                    Scheme::Triec => {
                        let p = spec
                            .aggregators
                            .unwrap_or_else(|| default_aggregators(job.helpers.len()));
                        if p == 0 || p > job.helpers.len() {
                            return Err(PlanError::BadAggregators {
                                p,
                                helpers: job.helpers.len(),
                            });
                        }
                        triec_repair(&mut b, &job, &dest, &spec.placement, p)
                    }
                }
            }
            Operation::Repair {
                lost: lost.clone(),
                at,
            }
        }
    };
    let (vertices, edges) = b.finish(spec.chunk_bytes);
    Ok(Plan {
        scheme: spec.scheme,
        code: code.to_string(),
        k,
        n,
        operation,
        placement: spec.placement.nodes.clone(),
        agent: spec.placement.agent,
        chunk_bytes: spec.chunk_bytes,
        slice_bytes,
        vertices,
        edges,
    })
}

fn validate_repair(
    code: Code,
    lost: &[usize],
    target: &Target,
    placement: &Placement,
) -> Result<Vec<usize>, PlanError> {
    let n = code.n();
    if lost.is_empty() {
        return Err(PlanError::NothingLost);
    }
    let mut seen = BTreeSet::new();
    for &c in lost {
        if c >= n {
            return Err(PlanError::BadChunk {
                index: c,
                n,
                code: code.to_string(),
            });
        }
        if !seen.insert(c) {
            return Err(PlanError::DuplicateChunk { index: c });
        }
    }
    match target {
        Target::Node(node) => Ok(vec![*node; lost.len()]),
        Target::InPlace => Ok(lost.iter().map(|&c| placement.nodes[c]).collect()),
        Target::Each(nodes) if nodes.len() == lost.len() => Ok(nodes.clone()),
        Target::Each(nodes) => Err(PlanError::BadPlacement {
            reason: format!(
                "{} target nodes for {} lost chunks",
                nodes.len(),
                lost.len()
            ),
        }),
    }
}

/// One independent part of a repair: rebuild `wanted` from `helpers` with
/// `coeffs[w][h]` (wanted w, helper h).
#[derive(Clone, Debug)]
struct Job {
    helpers: Vec<usize>,
    wanted: Vec<usize>,
    coeffs: Vec<Vec<u8>>,
}

/// Splits a repair into jobs. LRC: when every lost chunk is a data chunk or local parity and
/// no group lost two, each is rebuilt from its own group (one job per lost chunk, disjoint
/// helpers, coefficients 1); otherwise one job rebuilds everything from the minimal global
/// repair set.
fn repair_jobs(codec: &Codec, lost: &[usize]) -> Result<Vec<Job>, PlanError> {
    let code = codec.code();
    let available: Vec<usize> = (0..code.n()).filter(|c| !lost.contains(c)).collect();
    let job = |wanted: &[usize]| -> Result<Job, PlanError> {
        let helpers = codec.repair_set(&available, wanted)?;
        let dec = codec.decoder(&helpers, wanted)?;
        let coeffs = (0..wanted.len())
            .map(|w| (0..helpers.len()).map(|h| dec.coeff(w, h)).collect())
            .collect();
        Ok(Job {
            helpers,
            wanted: wanted.to_vec(),
            coeffs,
        })
    };
    if let Code::Lrc { .. } = code {
        let groups: Vec<Option<usize>> = lost.iter().map(|&c| code.group_of(c)).collect();
        let distinct: BTreeSet<usize> = groups.iter().flatten().copied().collect();
        if groups.iter().all(|g| g.is_some()) && distinct.len() == lost.len() {
            return lost.iter().map(|&c| job(&[c])).collect();
        }
    }
    Ok(vec![job(lost)?])
}

/// Output row: (source buffer, coefficient) pairs.
type Row = Vec<(Buffer, u8)>;

#[derive(Clone, Debug)]
struct VSpec {
    node: usize,
    role: Role,
    local: Vec<usize>,
    outputs: Vec<(Buffer, Row)>,
    stores: Vec<usize>,
}

#[derive(Clone, Copy, Debug)]
struct ESpec {
    from: usize,
    to: usize,
    buffer: Buffer,
}

struct Builder {
    n: usize,
    k: usize,
    vertices: Vec<VSpec>,
    edges: Vec<ESpec>,
    next_partial: usize,
}

impl Builder {
    fn vertex(&mut self, node: usize, role: Role, local: Vec<usize>) -> usize {
        self.vertices.push(VSpec {
            node,
            role,
            local,
            outputs: Vec::new(),
            stores: Vec::new(),
        });
        self.vertices.len() - 1
    }

    fn partial(&mut self) -> Buffer {
        self.next_partial += 1;
        Buffer::Partial(self.next_partial - 1)
    }

    fn output(&mut self, v: usize, buffer: Buffer, row: Row) {
        let row: Row = row.into_iter().filter(|&(_, a)| a != 0).collect();
        self.vertices[v].outputs.push((buffer, row));
    }

    fn edge(&mut self, from: usize, to: usize, buffer: Buffer) {
        self.edges.push(ESpec { from, to, buffer });
    }

    /// Simplifies, numbers and lowers (see the module comment), in named steps.
    fn finish(mut self, chunk_bytes: usize) -> (Vec<Vertex>, Vec<Edge>) {
        let rename = self.simplify_outputs();
        let edges = self.resolve_edges(&rename);
        let (busy, new_id) = self.busy_vertices(&edges);
        let edges = number_edges(&edges, &busy, &new_id, chunk_bytes);
        let vertices: Vec<Vertex> = self
            .vertices
            .iter()
            .enumerate()
            .filter(|&(old, _)| busy[old])
            .map(|(old, spec)| lower_vertex(spec, new_id[old], &edges))
            .collect();
        let mut plan = Plan {
            scheme: Scheme::Rs,
            code: String::new(),
            k: self.k,
            n: self.n,
            operation: Operation::Encode,
            placement: Vec::new(),
            agent: 0,
            chunk_bytes,
            slice_bytes: chunk_bytes,
            vertices,
            edges,
        };
        renumber_partials(&mut plan);
        record_combinations(&mut plan);
        (plan.vertices, plan.edges)
    }

    /// Step 1: simplifies every vertex's outputs in order. A partial that is zero is dropped,
    /// one that is a single source with coefficient 1 is that source, a computed chunk that is
    /// one received partial names that partial, and two equal partials of one vertex are one.
    /// Returns what each dropped partial became (another buffer, or `None` for zero).
    fn simplify_outputs(&mut self) -> Renames {
        let mut rename = Renames::default();
        for vi in 0..self.vertices.len() {
            let outputs = std::mem::take(&mut self.vertices[vi].outputs);
            let mut kept = Vec::new();
            for (buffer, row) in outputs {
                // Rename the sources, merging any that became the same buffer.
                let mut merged: Vec<(Buffer, u8)> = Vec::new();
                for (src, a) in row {
                    let Some(src) = rename.resolve(src) else {
                        continue;
                    };
                    match merged.iter_mut().find(|(b, _)| *b == src) {
                        Some((_, acc)) => *acc ^= a,
                        None => merged.push((src, a)),
                    }
                }
                merged.retain(|&(_, a)| a != 0);
                match (buffer, merged.as_slice()) {
                    (Buffer::Partial(p), []) => {
                        rename.0.insert(p, None);
                    }
                    (Buffer::Partial(p), [(src, 1)]) => {
                        rename.0.insert(p, Some(*src));
                    }
                    (Buffer::Chunk(c), [(Buffer::Partial(src), 1)]) => {
                        // The received partial already is the whole chunk: name it so at the
                        // vertex that computes it, and just store it here.
                        rename.0.insert(*src, Some(Buffer::Chunk(c)));
                        for v in self.vertices.iter_mut() {
                            for (b, _) in v.outputs.iter_mut() {
                                if *b == Buffer::Partial(*src) {
                                    *b = Buffer::Chunk(c);
                                }
                            }
                        }
                    }
                    (Buffer::Partial(p), _) => {
                        // Two partials of one vertex with the same row (several lost chunks
                        // with equal coefficients) are computed and sent once.
                        let mut key = merged.clone();
                        key.sort_unstable();
                        let twin = kept.iter().find(|(b, row): &&(Buffer, Row)| {
                            let mut r = row.clone();
                            r.sort_unstable();
                            matches!(b, Buffer::Partial(_)) && r == key
                        });
                        match twin {
                            Some(&(b, _)) => {
                                rename.0.insert(p, Some(b));
                            }
                            None => kept.push((buffer, merged)),
                        }
                    }
                    _ => kept.push((buffer, merged)),
                }
            }
            self.vertices[vi].outputs = kept;
        }
        rename
    }

    /// Step 2: the edges with their buffers renamed; edges of zero buffers and duplicates
    /// (same ends, same buffer) dropped.
    fn resolve_edges(&self, rename: &Renames) -> Vec<ESpec> {
        let mut edges: Vec<ESpec> = Vec::new();
        for e in &self.edges {
            let Some(buffer) = rename.resolve(e.buffer) else {
                continue;
            };
            let e = ESpec { buffer, ..*e };
            if !edges
                .iter()
                .any(|x| x.from == e.from && x.to == e.to && x.buffer == e.buffer)
            {
                edges.push(e);
            }
        }
        edges
    }

    /// Step 3: which vertices do something (send or store), and their new ids, in order.
    fn busy_vertices(&self, edges: &[ESpec]) -> (Vec<bool>, Vec<VertexId>) {
        let busy: Vec<bool> = (0..self.vertices.len())
            .map(|v| !self.vertices[v].stores.is_empty() || edges.iter().any(|e| e.from == v))
            .collect();
        let mut new_id = vec![usize::MAX; self.vertices.len()];
        let mut next = 0;
        for (v, &b) in busy.iter().enumerate() {
            if b {
                new_id[v] = next;
                next += 1;
            }
        }
        (busy, new_id)
    }
}

/// What each partial dropped by [`Builder::simplify_outputs`] became: another buffer, or
/// `None` if it is zero.
#[derive(Default)]
struct Renames(BTreeMap<usize, Option<Buffer>>);

impl Renames {
    /// Follows renames to the buffer that remains (`None`: zero).
    fn resolve(&self, b: Buffer) -> Option<Buffer> {
        let mut b = b;
        while let Buffer::Partial(p) = b {
            match self.0.get(&p) {
                None => return Some(b),
                Some(None) => return None,
                Some(Some(next)) => b = *next,
            }
        }
        Some(b)
    }
}

/// Step 4: the edges between busy vertices, with their new ends, sorted by sender, receiver
/// and buffer (so every vertex's input edges have a stable order), and numbered.
fn number_edges(
    edges: &[ESpec],
    busy: &[bool],
    new_id: &[VertexId],
    chunk_bytes: usize,
) -> Vec<Edge> {
    let mut out: Vec<Edge> = edges
        .iter()
        .filter(|e| busy[e.to])
        .map(|e| Edge {
            id: 0,
            from: new_id[e.from],
            to: new_id[e.to],
            buffer: e.buffer,
            bytes: chunk_bytes,
        })
        .collect();
    out.sort_by_key(|e| (e.from, e.to, e.buffer));
    for (i, e) in out.iter_mut().enumerate() {
        e.id = i;
    }
    out
}

/// Step 5: one vertex lowered: its edges, the local chunks it reads (those nobody reads are
/// dropped), its calculator (columns: locals, then inputs) and its primitive.
fn lower_vertex(spec: &VSpec, id: VertexId, edges: &[Edge]) -> Vertex {
    let inputs: Vec<EdgeId> = edges.iter().filter(|e| e.to == id).map(|e| e.id).collect();
    let sends: Vec<EdgeId> = edges
        .iter()
        .filter(|e| e.from == id)
        .map(|e| e.id)
        .collect();
    let used = |c: usize| {
        spec.outputs
            .iter()
            .any(|(_, row)| row.iter().any(|(b, _)| *b == Buffer::Chunk(c)))
            || sends.iter().any(|&e| {
                edges[e].buffer == Buffer::Chunk(c)
                    && !spec.outputs.iter().any(|(b, _)| *b == Buffer::Chunk(c))
                    && !inputs.iter().any(|&i| edges[i].buffer == Buffer::Chunk(c))
            })
    };
    let local: Vec<usize> = spec.local.iter().copied().filter(|&c| used(c)).collect();
    let mut columns: Vec<Buffer> = local.iter().map(|&c| Buffer::Chunk(c)).collect();
    columns.extend(inputs.iter().map(|&e| edges[e].buffer));
    let calc = if spec.outputs.is_empty() {
        None
    } else {
        let cols = columns.len();
        let mut coeffs = vec![0u8; spec.outputs.len() * cols];
        for (r, (_, row)) in spec.outputs.iter().enumerate() {
            for &(b, a) in row {
                let col = columns
                    .iter()
                    .position(|&x| x == b)
                    .expect("builder invariant: every source is local or received");
                coeffs[r * cols + col] ^= a;
            }
        }
        let kind = if coeffs.iter().all(|&a| a <= 1) {
            CalcKind::Xor
        } else {
            CalcKind::Ec
        };
        Some(Calc {
            kind,
            rows: spec.outputs.len(),
            cols,
            coeffs,
        })
    };
    let primitive = Primitive::lower(
        !inputs.is_empty(),
        !sends.is_empty(),
        calc.as_ref().map(|c| c.kind),
    );
    Vertex {
        id,
        node: spec.node,
        role: spec.role,
        primitive,
        local,
        inputs,
        calc,
        outputs: spec
            .outputs
            .iter()
            .map(|(b, _)| Output {
                buffer: *b,
                combination: Vec::new(),
            })
            .collect(),
        sends,
        stores: spec.stores.clone(),
    }
}

/// Step 6: numbers the partials that remain 0, 1, 2… in the order they are computed.
fn renumber_partials(plan: &mut Plan) {
    let mut numbering: BTreeMap<usize, usize> = BTreeMap::new();
    for v in &plan.vertices {
        for o in &v.outputs {
            if let Buffer::Partial(p) = o.buffer {
                let next = numbering.len();
                numbering.entry(p).or_insert(next);
            }
        }
    }
    let renumber = |b: &mut Buffer| {
        if let Buffer::Partial(p) = b {
            *p = numbering[p];
        }
    };
    for v in plan.vertices.iter_mut() {
        v.outputs.iter_mut().for_each(|o| renumber(&mut o.buffer));
    }
    plan.edges.iter_mut().for_each(|e| renumber(&mut e.buffer));
}

/// Step 7: records every output's stripe combination, as the calculators derive it.
fn record_combinations(plan: &mut Plan) {
    let combos = plan.derived_output_combinations();
    for (v, combos) in plan.vertices.iter_mut().zip(combos) {
        for (out, combo) in v.outputs.iter_mut().zip(combos) {
            out.combination = combo;
        }
    }
}

/// RS/LRC/PPR/ECPipe encode: the agent computes the parities and sends every chunk to its
/// node. RS: one `ec-send`. LRC: an `xor-send` vertex (data chunks and local parities) and an
/// `ec-send` vertex (global parities) on the agent's node.
fn conventional_encode(b: &mut Builder, code: Code, generator: &[u8], placement: &Placement) {
    let (k, n) = (b.k, b.n);
    let data: Vec<usize> = (0..k).collect();
    let row = |p: usize| -> Row {
        (0..k)
            .map(|j| (Buffer::Chunk(j), generator[p * k + j]))
            .collect()
    };
    let (xor_parities, ec_parities): (Vec<usize>, Vec<usize>) = match code {
        Code::Lrc { l, .. } => ((k..k + l).collect(), (k + l..n).collect()),
        Code::Rs { .. } => (Vec::new(), (k..n).collect()),
    };
    let first = b.vertex(placement.agent, Role::Agent, data.clone());
    let second = if xor_parities.is_empty() || ec_parities.is_empty() {
        first
    } else {
        b.vertex(placement.agent, Role::Agent, data.clone())
    };
    for &p in &xor_parities {
        b.output(first, Buffer::Chunk(p), row(p));
    }
    for &p in &ec_parities {
        b.output(second, Buffer::Chunk(p), row(p));
    }
    for c in 0..n {
        let sink = b.vertex(placement.nodes[c], Role::Store, Vec::new());
        b.vertices[sink].stores.push(c);
        let from = if ec_parities.contains(&c) {
            second
        } else {
            first
        };
        b.edge(from, sink, Buffer::Chunk(c));
    }
}

/// TriEC encode: layer 1 (agent) sends data chunk i to its node; layer 2 (data node i) stores
/// it and sends G[p][i]·C_i to every parity node p with a non-zero coefficient; layer 3
/// (parity node p) XORs what it receives.
fn triec_encode(b: &mut Builder, generator: &[u8], placement: &Placement) {
    let (k, n) = (b.k, b.n);
    let agent = b.vertex(placement.agent, Role::Agent, (0..k).collect());
    let layer2: Vec<usize> = (0..k)
        .map(|i| {
            let v = b.vertex(placement.nodes[i], Role::Layer2, Vec::new());
            b.vertices[v].stores.push(i);
            b.edge(agent, v, Buffer::Chunk(i));
            v
        })
        .collect();
    let layer3: Vec<usize> = (k..n)
        .map(|p| {
            let v = b.vertex(placement.nodes[p], Role::Store, Vec::new());
            b.vertices[v].stores.push(p);
            v
        })
        .collect();
    let mut parts: Vec<Row> = vec![Vec::new(); n - k];
    for (i, &v) in layer2.iter().enumerate() {
        for p in k..n {
            let a = generator[p * k + i];
            if a == 0 {
                continue;
            }
            let part = b.partial();
            b.output(v, part, vec![(Buffer::Chunk(i), a)]);
            b.edge(v, layer3[p - k], part);
            parts[p - k].push((part, 1));
        }
    }
    for (p, row) in parts.into_iter().enumerate() {
        b.output(layer3[p], Buffer::Chunk(k + p), row);
    }
}

/// Requester vertices of a job: one per destination node, holding the wanted chunks rebuilt
/// there. Returns (node, vertex, wanted positions).
fn requesters(
    b: &mut Builder,
    job: &Job,
    dest: &BTreeMap<usize, usize>,
) -> Vec<(usize, usize, Vec<usize>)> {
    let mut by_node: BTreeMap<usize, Vec<usize>> = BTreeMap::new();
    for (w, c) in job.wanted.iter().enumerate() {
        by_node.entry(dest[c]).or_default().push(w);
    }
    by_node
        .into_iter()
        .map(|(node, ws)| {
            let v = b.vertex(node, Role::Requester, Vec::new());
            b.vertices[v].stores = ws.iter().map(|&w| job.wanted[w]).collect();
            (node, v, ws)
        })
        .collect()
}

/// RS and LRC repair: every helper sends its chunk to each requester, which computes
/// (`recv-ec`, or `recv-xor` for an LRC group).
fn star_repair(b: &mut Builder, job: &Job, dest: &BTreeMap<usize, usize>, placement: &Placement) {
    let helpers: Vec<usize> = job
        .helpers
        .iter()
        .map(|&h| b.vertex(placement.nodes[h], Role::Helper, vec![h]))
        .collect();
    for (_, r, ws) in requesters(b, job, dest) {
        for (hi, &h) in job.helpers.iter().enumerate() {
            if ws.iter().any(|&w| job.coeffs[w][hi] != 0) {
                b.edge(helpers[hi], r, Buffer::Chunk(h));
            }
        }
        for &w in &ws {
            let row = job
                .helpers
                .iter()
                .enumerate()
                .map(|(hi, &h)| (Buffer::Chunk(h), job.coeffs[w][hi]))
                .collect();
            b.output(r, Buffer::Chunk(job.wanted[w]), row);
        }
    }
}

/// The PPR parent of helper position i among `count`: i + lowbit(i + 1), `None` (the
/// requester) when that is ≥ count.
pub fn ppr_parent(i: usize, count: usize) -> Option<usize> {
    let j = i + 1;
    let parent = i + (j & j.wrapping_neg());
    (parent < count).then_some(parent)
}

/// PPR repair: a binomial reduction tree over the helpers. Helper i computes, for each wanted
/// chunk, a·C_i plus what its children sent, and sends it to its parent; the top of the tree
/// sends to the requesters, which XOR.
fn ppr_repair(b: &mut Builder, job: &Job, dest: &BTreeMap<usize, usize>, placement: &Placement) {
    let count = job.helpers.len();
    let vs: Vec<usize> = job
        .helpers
        .iter()
        .map(|&h| b.vertex(placement.nodes[h], Role::Helper, vec![h]))
        .collect();
    // children[i][w]: partials helper i receives for wanted w.
    let mut received: Vec<Vec<Row>> = vec![vec![Vec::new(); job.wanted.len()]; count];
    let mut at_top: Vec<Row> = vec![Vec::new(); job.wanted.len()];
    let mut top_edges: Vec<(usize, usize, Buffer)> = Vec::new();
    for i in 0..count {
        for w in 0..job.wanted.len() {
            let part = b.partial();
            let mut row = vec![(Buffer::Chunk(job.helpers[i]), job.coeffs[w][i])];
            row.extend(received[i][w].iter().copied());
            b.output(vs[i], part, row);
            match ppr_parent(i, count) {
                Some(p) => {
                    b.edge(vs[i], vs[p], part);
                    received[p][w].push((part, 1));
                }
                None => {
                    at_top[w].push((part, 1));
                    top_edges.push((vs[i], w, part));
                }
            }
        }
    }
    for (_, r, ws) in requesters(b, job, dest) {
        for &(from, w, part) in &top_edges {
            if ws.contains(&w) {
                b.edge(from, r, part);
            }
        }
        for &w in &ws {
            b.output(r, Buffer::Chunk(job.wanted[w]), at_top[w].clone());
        }
    }
}

/// ECPipe repair: one chain per wanted chunk, through every helper (chain t starts at helper
/// t, so parallel chains spread the load); each helper adds a·C_i to the running sum, the
/// last one completes the chunk and sends it to its requester.
fn ecpipe_repair(b: &mut Builder, job: &Job, dest: &BTreeMap<usize, usize>, placement: &Placement) {
    let count = job.helpers.len();
    for (w, &wanted) in job.wanted.iter().enumerate() {
        let mut prev: Option<(usize, Buffer)> = None;
        for step in 0..count {
            let hi = (w + step) % count;
            let h = job.helpers[hi];
            let v = b.vertex(placement.nodes[h], Role::Helper, vec![h]);
            let out = if step + 1 == count {
                Buffer::Chunk(wanted)
            } else {
                b.partial()
            };
            let mut row = vec![(Buffer::Chunk(h), job.coeffs[w][hi])];
            if let Some((pv, pb)) = prev {
                b.edge(pv, v, pb);
                row.push((pb, 1));
            }
            b.output(v, out, row);
            prev = Some((v, out));
        }
        let (last, buffer) = prev.expect("a repair job has at least one helper");
        let r = b.vertex(dest[&wanted], Role::Requester, Vec::new());
        b.vertices[r].stores.push(wanted);
        b.edge(last, r, buffer);
    }
}

/// TriEC repair: helpers are split into p contiguous groups; the first helper of each group is
/// a layer-2 aggregation vertex, the others send it their chunks (layer 1); each aggregator
/// sends one partial per wanted chunk to its requester (layer 3), which XORs p partials.
fn triec_repair(
    b: &mut Builder,
    job: &Job,
    dest: &BTreeMap<usize, usize>,
    placement: &Placement,
    p: usize,
) {
    let count = job.helpers.len();
    let groups: Vec<std::ops::Range<usize>> =
        (0..p).map(|g| g * count / p..(g + 1) * count / p).collect();
    let mut layer1: Vec<(usize, usize)> = Vec::new();
    for g in &groups {
        for hi in g.clone().skip(1) {
            let h = job.helpers[hi];
            layer1.push((hi, b.vertex(placement.nodes[h], Role::Helper, vec![h])));
        }
    }
    let mut parts: Vec<Row> = vec![Vec::new(); job.wanted.len()];
    let mut part_edges: Vec<(usize, usize, Buffer)> = Vec::new();
    for g in &groups {
        let head = job.helpers[g.start];
        let agg = b.vertex(placement.nodes[head], Role::Layer2, vec![head]);
        for &(hi, v) in layer1.iter().filter(|(hi, _)| g.contains(hi)) {
            b.edge(v, agg, Buffer::Chunk(job.helpers[hi]));
        }
        for (w, into) in parts.iter_mut().enumerate() {
            let part = b.partial();
            let row = g
                .clone()
                .map(|hi| (Buffer::Chunk(job.helpers[hi]), job.coeffs[w][hi]))
                .collect();
            b.output(agg, part, row);
            into.push((part, 1));
            part_edges.push((agg, w, part));
        }
    }
    for (_, r, ws) in requesters(b, job, dest) {
        for &(from, w, part) in &part_edges {
            if ws.contains(&w) {
                b.edge(from, r, part);
            }
        }
        for &w in &ws {
            b.output(r, Buffer::Chunk(job.wanted[w]), parts[w].clone());
        }
    }
}
