//! A discrete-event network simulator that executes a plan with real bytes.
//!
//! The model of the network, stated once:
//! - every node has one NIC, full duplex: a transmit side and a receive side, each with the
//!   node's bandwidth (`NetConfig::bandwidth_bytes_s`, overridable per node; a link between two
//!   nodes can be made slower still);
//! - a message (one slice of one edge) occupies the sender's transmit side and the receiver's
//!   receive side for `bytes / rate + message_overhead` and arrives `latency` later;
//! - the NICs are work-conserving: whenever a side frees, every waiting message whose sender
//!   and receiver are both free starts, earliest-ready first; a message to a busy receiver
//!   does not hold up its sender's later messages to free receivers (no preemption);
//! - an edge between two vertices on the same node costs nothing and moves no network bytes;
//! - every node has one calculator that runs one computation at a time; computing a slice
//!   costs `slice / xor_rate` per coefficient 1 and `slice / mul_add_rate` per other non-zero
//!   coefficient;
//! - a vertex computes slice s once slice s of every input has arrived, and sends slice s of
//!   its outputs as soon as it is computed (coherent, pipelined execution).
//!
//! The bytes are real: the simulator runs the `gf` kernels on the chunks given to it, so its
//! outputs can be compared with the codec's. [`simulate_timing`] runs the same schedule
//! without bytes, and [`simulate_many`] runs several plans at once on one cluster, sharing
//! every NIC and calculator.

use std::cmp::Ordering;
use std::collections::{BTreeMap, BinaryHeap, VecDeque};

use crate::plan::{Buffer, CalcKind, Plan, Source};
use crate::PlanError;

/// The simulated cluster.
#[derive(Clone, Debug, PartialEq)]
pub struct NetConfig {
    /// Every NIC's bandwidth, each direction, in bytes per second.
    pub bandwidth_bytes_s: f64,
    /// One-way latency of a message, in seconds.
    pub latency_s: f64,
    /// Time a message occupies the NIC besides its bytes (per-message software cost).
    pub message_overhead_s: f64,
    /// XOR throughput of a node's calculator, bytes of source per second (`INFINITY`: free).
    pub xor_bytes_s: f64,
    /// GF(2^8) multiply-accumulate throughput, bytes of source per second (`INFINITY`: free).
    pub mul_add_bytes_s: f64,
    /// Nodes whose NIC is slower (or faster) than `bandwidth_bytes_s`.
    pub node_bandwidth_bytes_s: BTreeMap<usize, f64>,
    /// Directed links (from node, to node) slower than the NICs at their ends.
    pub link_bandwidth_bytes_s: BTreeMap<(usize, usize), f64>,
}

impl NetConfig {
    /// A network with the given bandwidth and latency, free computation and no per-message
    /// cost.
    pub fn ideal(bandwidth_bytes_s: f64, latency_s: f64) -> NetConfig {
        NetConfig {
            bandwidth_bytes_s,
            latency_s,
            message_overhead_s: 0.0,
            xor_bytes_s: f64::INFINITY,
            mul_add_bytes_s: f64::INFINITY,
            node_bandwidth_bytes_s: BTreeMap::new(),
            link_bandwidth_bytes_s: BTreeMap::new(),
        }
    }

    /// The rate of a message from `from` to `to`.
    pub fn link_rate(&self, from: usize, to: usize) -> f64 {
        let node = |n: usize| {
            *self
                .node_bandwidth_bytes_s
                .get(&n)
                .unwrap_or(&self.bandwidth_bytes_s)
        };
        let mut rate = node(from).min(node(to));
        if let Some(&r) = self.link_bandwidth_bytes_s.get(&(from, to)) {
            rate = rate.min(r);
        }
        rate
    }

    /// Seconds per byte of one coefficient's work.
    pub fn coeff_s_per_byte(&self, coeff: u8) -> f64 {
        match coeff {
            0 => 0.0,
            1 => 1.0 / self.xor_bytes_s,
            _ => 1.0 / self.mul_add_bytes_s,
        }
    }
}

/// What a simulation produced.
#[derive(Clone, Debug, PartialEq)]
pub struct SimResult {
    /// Every chunk stored by the plan, keyed by (node, chunk index).
    pub outputs: BTreeMap<(usize, usize), Vec<u8>>,
    /// Simulated completion time: when the last computation or message finished.
    pub time_s: f64,
    /// Network bytes received per node.
    pub bytes_in: BTreeMap<usize, u64>,
    /// Network bytes sent per node.
    pub bytes_out: BTreeMap<usize, u64>,
    /// Network messages (slices) sent.
    pub messages: usize,
}

/// Executes the plan with real bytes. `chunks` holds the content of the chunks the plan reads
/// (for encode the data chunks; for repair at least the helpers'), each `plan.chunk_bytes`
/// long.
pub fn simulate(
    plan: &Plan,
    chunks: &BTreeMap<usize, Vec<u8>>,
    net: &NetConfig,
) -> Result<SimResult, PlanError> {
    for v in &plan.vertices {
        for &c in &v.local {
            match chunks.get(&c) {
                None => {
                    return Err(PlanError::MissingChunk {
                        chunk: c,
                        vertex: v.id,
                    })
                }
                Some(b) if b.len() != plan.chunk_bytes => {
                    return Err(PlanError::BadSize {
                        what: "input chunk length",
                        value: b.len(),
                        limit: plan.chunk_bytes,
                    })
                }
                Some(_) => {}
            }
        }
    }
    Ok(run(&[plan], Some(chunks), net).into_single())
}

/// The completion time alone (no bytes are computed).
pub fn simulate_time(plan: &Plan, net: &NetConfig) -> f64 {
    simulate_timing(plan, net).time_s
}

/// The simulation without bytes: time, bytes per node and messages (`outputs` is empty).
/// Memory is proportional to vertices × slices, not to the chunk size.
pub fn simulate_timing(plan: &Plan, net: &NetConfig) -> SimResult {
    run(&[plan], None, net).into_single()
}

/// What a simulation of several plans sharing one cluster produced (no bytes computed).
#[derive(Clone, Debug, PartialEq)]
pub struct ManyResult {
    /// When the last plan finished.
    pub time_s: f64,
    /// When each plan finished (its last computation or message), in the order given.
    pub finish_s: Vec<f64>,
    /// Network bytes received per node, over all plans.
    pub bytes_in: BTreeMap<usize, u64>,
    /// Network bytes sent per node, over all plans.
    pub bytes_out: BTreeMap<usize, u64>,
    /// Network messages (slices) sent.
    pub messages: usize,
}

/// Runs several plans at once on one cluster: they start together and share every node's NIC
/// (both directions) and calculator, which serve messages and computations of all plans in
/// the order they become ready. Times only, no bytes.
pub fn simulate_many(plans: &[Plan], net: &NetConfig) -> ManyResult {
    let refs: Vec<&Plan> = plans.iter().collect();
    let out = run(&refs, None, net);
    ManyResult {
        time_s: out.result.time_s,
        finish_s: out.finish_s,
        bytes_in: out.result.bytes_in,
        bytes_out: out.result.bytes_out,
        messages: out.result.messages,
    }
}

#[derive(Clone, Copy, Debug, PartialEq)]
enum Event {
    /// Every input of slice `slice` has reached vertex `v` of plan `p`.
    Ready { p: usize, v: usize, slice: usize },
    /// Vertex `v` of plan `p` has computed slice `slice`.
    Computed { p: usize, v: usize, slice: usize },
    /// Slice `slice` of edge `e` of plan `p` has arrived.
    Arrive { p: usize, e: usize, slice: usize },
    /// A message has left a NIC: its transmit and receive sides are free again.
    NicFree,
}

/// A message waiting for its sender's transmit side and its receiver's receive side.
#[derive(Clone, Copy, Debug)]
struct Message {
    seq: u64,
    p: usize,
    e: usize,
    slice: usize,
    to: usize,
    seconds: f64,
}

struct Queued {
    time: f64,
    seq: u64,
    event: Event,
}

impl PartialEq for Queued {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}
impl Eq for Queued {}
impl PartialOrd for Queued {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Queued {
    /// Reversed, so the `BinaryHeap` pops the earliest event (then the first queued).
    fn cmp(&self, other: &Self) -> Ordering {
        other
            .time
            .total_cmp(&self.time)
            .then(other.seq.cmp(&self.seq))
    }
}

/// One plan's state in a simulation.
struct State<'a> {
    plan: &'a Plan,
    matrices: Vec<Option<gf::Matrix>>,
    /// `pending[v][s]`: inputs of slice s vertex v still waits for.
    pending: Vec<Vec<usize>>,
    /// Computed outputs, per vertex, per output row (empty without data).
    vbufs: Vec<Vec<Vec<u8>>>,
    /// What each edge delivered (empty without data).
    ebufs: Vec<Vec<u8>>,
    finish: f64,
}

struct Sim<'a> {
    states: Vec<State<'a>>,
    net: &'a NetConfig,
    /// The chunks of plan 0, when the simulation computes bytes (one plan only).
    data: Option<&'a BTreeMap<usize, Vec<u8>>>,
    kernel: gf::Kernel,
    heap: BinaryHeap<Queued>,
    seq: u64,
    /// When each node's transmit / receive side is free again.
    tx_free: BTreeMap<usize, f64>,
    rx_free: BTreeMap<usize, f64>,
    cpu_free: BTreeMap<usize, f64>,
    /// Messages waiting, per sending node, in the order they became ready.
    queues: BTreeMap<usize, VecDeque<Message>>,
    result: SimResult,
}

struct RunOutput {
    result: SimResult,
    finish_s: Vec<f64>,
}

impl RunOutput {
    fn into_single(self) -> SimResult {
        self.result
    }
}

fn run(plans: &[&Plan], data: Option<&BTreeMap<usize, Vec<u8>>>, net: &NetConfig) -> RunOutput {
    assert!(
        data.is_none() || plans.len() == 1,
        "bytes are simulated for one plan at a time"
    );
    let real = data.is_some();
    let states = plans
        .iter()
        .map(|&plan| {
            let c = if real { plan.chunk_bytes } else { 0 };
            State {
                plan,
                matrices: plan
                    .vertices
                    .iter()
                    .map(|v| {
                        v.calc
                            .as_ref()
                            .filter(|_| real)
                            .map(|k| gf::Matrix::new(k.rows, k.cols, &k.coeffs))
                    })
                    .collect(),
                pending: plan
                    .vertices
                    .iter()
                    .map(|v| vec![v.inputs.len(); plan.slice_count()])
                    .collect(),
                vbufs: plan
                    .vertices
                    .iter()
                    .map(|v| vec![vec![0u8; c]; v.outputs.len()])
                    .collect(),
                ebufs: vec![vec![0u8; c]; plan.edges.len()],
                finish: 0.0,
            }
        })
        .collect();
    let mut sim = Sim {
        states,
        net,
        data,
        kernel: gf::kernel(),
        heap: BinaryHeap::new(),
        seq: 0,
        tx_free: BTreeMap::new(),
        rx_free: BTreeMap::new(),
        cpu_free: BTreeMap::new(),
        queues: BTreeMap::new(),
        result: SimResult {
            outputs: BTreeMap::new(),
            time_s: 0.0,
            bytes_in: BTreeMap::new(),
            bytes_out: BTreeMap::new(),
            messages: 0,
        },
    };
    // Slice by slice across the plans, so that plans starting together interleave fairly.
    let max_slices = plans.iter().map(|p| p.slice_count()).max().unwrap_or(0);
    for s in 0..max_slices {
        for (p, plan) in plans.iter().enumerate() {
            if s >= plan.slice_count() {
                continue;
            }
            for v in &plan.vertices {
                if v.inputs.is_empty() {
                    sim.push(
                        0.0,
                        Event::Ready {
                            p,
                            v: v.id,
                            slice: s,
                        },
                    );
                }
            }
        }
    }
    while let Some(q) = sim.heap.pop() {
        sim.result.time_s = sim.result.time_s.max(q.time);
        match q.event {
            Event::Ready { p, v, slice } => sim.compute(q.time, p, v, slice),
            Event::Computed { p, v, slice } => sim.send(q.time, p, v, slice),
            Event::Arrive { p, e, slice } => {
                let st = &mut sim.states[p];
                st.finish = st.finish.max(q.time);
                let to = st.plan.edges[e].to;
                st.pending[to][slice] -= 1;
                if st.pending[to][slice] == 0 {
                    sim.push(q.time, Event::Ready { p, v: to, slice });
                }
            }
            Event::NicFree => sim.dispatch(q.time),
        }
    }
    if real {
        let st = &sim.states[0];
        let plan = st.plan;
        for v in &plan.vertices {
            for &chunk in &v.stores {
                let bytes = if let Some(p) = v
                    .outputs
                    .iter()
                    .position(|o| o.buffer == Buffer::Chunk(chunk))
                {
                    st.vbufs[v.id][p].clone()
                } else {
                    let e = v
                        .inputs
                        .iter()
                        .copied()
                        .find(|&e| plan.edges[e].buffer == Buffer::Chunk(chunk))
                        .expect("plan invariant: a stored chunk is computed or received");
                    st.ebufs[e].clone()
                };
                sim.result.outputs.insert((v.node, chunk), bytes);
            }
        }
    }
    RunOutput {
        finish_s: sim.states.iter().map(|s| s.finish).collect(),
        result: sim.result,
    }
}

impl Sim<'_> {
    fn push(&mut self, time: f64, event: Event) {
        self.seq += 1;
        self.heap.push(Queued {
            time,
            seq: self.seq,
            event,
        });
    }

    fn range(plan: &Plan, slice: usize) -> std::ops::Range<usize> {
        let s = plan.slice_bytes;
        slice * s..((slice + 1) * s).min(plan.chunk_bytes)
    }

    fn compute(&mut self, now: f64, p: usize, v: usize, slice: usize) {
        let plan = self.states[p].plan;
        let vertex = &plan.vertices[v];
        let Some(calc) = &vertex.calc else {
            self.push(now, Event::Computed { p, v, slice });
            return;
        };
        let range = Self::range(plan, slice);
        let len = range.len() as f64;
        let cost: f64 = calc
            .coeffs
            .iter()
            .map(|&a| len * self.net.coeff_s_per_byte(a))
            .sum();
        let cpu = self.cpu_free.entry(vertex.node).or_insert(0.0);
        let start = cpu.max(now);
        *cpu = start + cost;
        let st = &mut self.states[p];
        st.finish = st.finish.max(start + cost);
        self.push(start + cost, Event::Computed { p, v, slice });
        let Some(data) = self.data else { return };
        let st = &mut self.states[p];
        let mut sources: Vec<&[u8]> = vertex
            .local
            .iter()
            .map(|c| &data[c][range.clone()])
            .collect();
        sources.extend(vertex.inputs.iter().map(|&e| &st.ebufs[e][range.clone()]));
        let mut outs: Vec<&mut [u8]> = st.vbufs[v]
            .iter_mut()
            .map(|b| &mut b[range.clone()])
            .collect();
        match calc.kind {
            CalcKind::Ec => {
                let m = st.matrices[v]
                    .as_ref()
                    .expect("prepared for every calculator");
                self.kernel.dot_prod(m, &sources, &mut outs);
            }
            CalcKind::Xor => {
                for (r, out) in outs.iter_mut().enumerate() {
                    out.fill(0);
                    for (col, src) in sources.iter().enumerate() {
                        if calc.coeff(r, col) == 1 {
                            self.kernel.xor(src, out);
                        }
                    }
                }
            }
        }
    }

    fn send(&mut self, now: f64, p: usize, v: usize, slice: usize) {
        let plan = self.states[p].plan;
        let range = Self::range(plan, slice);
        let vertex = &plan.vertices[v];
        for &e in &vertex.sends {
            let edge = &plan.edges[e];
            if let Some(data) = self.data {
                let st = &mut self.states[p];
                let bytes: Vec<u8> = match plan.edge_source(e) {
                    Source::Local(i) => data[&vertex.local[i]][range.clone()].to_vec(),
                    Source::Input(i) => st.ebufs[vertex.inputs[i]][range.clone()].to_vec(),
                    Source::Output(i) => st.vbufs[v][i][range.clone()].to_vec(),
                };
                st.ebufs[e][range.clone()].copy_from_slice(&bytes);
            }
            let (from, to) = (vertex.node, plan.vertices[edge.to].node);
            if from == to {
                self.push(now, Event::Arrive { p, e, slice });
                continue;
            }
            let seconds =
                range.len() as f64 / self.net.link_rate(from, to) + self.net.message_overhead_s;
            *self.result.bytes_out.entry(from).or_insert(0) += range.len() as u64;
            *self.result.bytes_in.entry(to).or_insert(0) += range.len() as u64;
            self.result.messages += 1;
            self.seq += 1;
            let m = Message {
                seq: self.seq,
                p,
                e,
                slice,
                to,
                seconds,
            };
            self.queues.entry(from).or_default().push_back(m);
        }
        self.dispatch(now);
    }

    /// Starts every waiting message whose sender's transmit side and receiver's receive side
    /// are both free, earliest-ready first, until none can start (work-conserving: a message
    /// to a busy receiver does not hold up the sender's later messages to free ones).
    fn dispatch(&mut self, now: f64) {
        let free = |m: &BTreeMap<usize, f64>, n: usize| m.get(&n).is_none_or(|&t| t <= now);
        // Each free sender's first message to a free receiver, earliest-ready first; a sender
        // whose candidate lost its receiver to an earlier message looks again.
        let first = |queues: &BTreeMap<usize, VecDeque<Message>>,
                     rx_free: &BTreeMap<usize, f64>,
                     from: usize|
         -> Option<(u64, usize)> {
            queues.get(&from).and_then(|q| {
                q.iter()
                    .enumerate()
                    .find(|(_, m)| free(rx_free, m.to))
                    .map(|(i, m)| (m.seq, i))
            })
        };
        let mut heap: BinaryHeap<std::cmp::Reverse<(u64, usize, usize)>> = self
            .queues
            .keys()
            .filter(|&&from| free(&self.tx_free, from))
            .filter_map(|&from| {
                first(&self.queues, &self.rx_free, from)
                    .map(|(seq, i)| std::cmp::Reverse((seq, from, i)))
            })
            .collect();
        while let Some(std::cmp::Reverse((_, from, i))) = heap.pop() {
            let to = self.queues[&from][i].to;
            if !free(&self.rx_free, to) {
                if let Some((seq, i)) = first(&self.queues, &self.rx_free, from) {
                    heap.push(std::cmp::Reverse((seq, from, i)));
                }
                continue;
            }
            let q = self.queues.get_mut(&from).expect("chosen from the queues");
            let m = q.remove(i).expect("index found above");
            if q.is_empty() {
                self.queues.remove(&from);
            }
            let end = now + m.seconds;
            self.tx_free.insert(from, end);
            self.rx_free.insert(m.to, end);
            self.push(end, Event::NicFree);
            self.push(
                end + self.net.latency_s,
                Event::Arrive {
                    p: m.p,
                    e: m.e,
                    slice: m.slice,
                },
            );
        }
    }
}

/// A stripe of seeded pseudo-random data and its parity, computed by the codec.
pub fn random_stripe(
    codec: &codes::Codec,
    chunk_bytes: usize,
    seed: u64,
) -> Result<Vec<Vec<u8>>, PlanError> {
    let code = codec.code();
    let mut state = seed ^ 0x9e37_79b9_7f4a_7c15;
    let mut next = move || {
        // splitmix64
        state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = state;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        (z ^ (z >> 31)) as u8
    };
    let data: Vec<Vec<u8>> = (0..code.k())
        .map(|_| (0..chunk_bytes).map(|_| next()).collect())
        .collect();
    let mut parity = vec![vec![0u8; chunk_bytes]; code.parity_count()];
    {
        let inputs: Vec<&[u8]> = data.iter().map(|d| d.as_slice()).collect();
        let mut outputs: Vec<&mut [u8]> = parity.iter_mut().map(|p| p.as_mut_slice()).collect();
        codec.encode(&inputs, &mut outputs)?;
    }
    Ok(data.into_iter().chain(parity).collect())
}

/// Every (node, chunk) the plan's operation must leave stored: each chunk on its node for an
/// encode, `lost[i]` on `at[i]` for a repair.
pub fn wanted(plan: &Plan) -> Vec<(usize, usize)> {
    match &plan.operation {
        crate::plan::Operation::Encode => (0..plan.n).map(|c| (plan.placement[c], c)).collect(),
        crate::plan::Operation::Repair { lost, at } => {
            at.iter().copied().zip(lost.iter().copied()).collect()
        }
    }
}

/// Runs the plan on a random stripe (seeded) and checks that every chunk it stores equals the
/// codec's and that every chunk the operation wants ([`wanted`]: the lost chunks at their
/// targets, or every chunk of an encode on its node) is among them. Encode starts from the
/// data chunks alone; a repair from every chunk that was not lost.
pub fn simulate_and_check(
    plan: &Plan,
    codec: &codes::Codec,
    net: &NetConfig,
    seed: u64,
) -> Result<SimResult, PlanError> {
    let stripe = random_stripe(codec, plan.chunk_bytes, seed)?;
    let given: BTreeMap<usize, Vec<u8>> = match &plan.operation {
        crate::plan::Operation::Encode => (0..plan.k).map(|i| (i, stripe[i].clone())).collect(),
        crate::plan::Operation::Repair { lost, .. } => (0..plan.n)
            .filter(|i| !lost.contains(i))
            .map(|i| (i, stripe[i].clone()))
            .collect(),
    };
    let result = simulate(plan, &given, net)?;
    for (&(node, chunk), bytes) in &result.outputs {
        if *bytes != stripe[chunk] {
            return Err(PlanError::WrongOutput { node, chunk });
        }
    }
    for (node, chunk) in wanted(plan) {
        if !result.outputs.contains_key(&(node, chunk)) {
            return Err(PlanError::MissingOutput { node, chunk });
        }
    }
    Ok(result)
}
