//! Test support (feature `test-support`, enabled by the tests that need it): runs plans on a
//! cluster through a [`PlanRunner`] and compares every stored chunk with the bytes the `graph`
//! simulator produces for the same plan and stripe. Used by the tests of the engine (in-memory
//! transport) and of `inec node` (real processes over TCP).

use std::collections::BTreeMap;
use std::time::Duration;

use codes::{Code, Codec};
use graph::paper::schemes_for;
use graph::{build, sim, Operation, Plan, PlanSpec, Request, Target};

use crate::{ChunkRef, Mode, NodeId, PlanRunner, VertexPart};

/// Every recoverable erasure pattern of up to `parity_count` chunks, smallest first.
pub fn recoverable_patterns(codec: &Codec, max_lost: usize) -> Vec<Vec<usize>> {
    let n = codec.code().n();
    let mut out = Vec::new();
    for size in 1..=max_lost.min(codec.code().parity_count()) {
        let mut comb: Vec<usize> = (0..size).collect();
        loop {
            if codec.is_recoverable(&comb) {
                out.push(comb.clone());
            }
            // Next combination in lexicographic order.
            let mut i = size;
            while i > 0 && comb[i - 1] == n - size + i - 1 {
                i -= 1;
            }
            if i == 0 {
                break;
            }
            comb[i - 1] += 1;
            for j in i..size {
                comb[j] = comb[j - 1] + 1;
            }
        }
    }
    out
}

/// A check that failed, or could not run: what was wrong, in words (these helpers serve
/// tests, which print it).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct CheckFailed(pub String);

impl From<String> for CheckFailed {
    fn from(message: String) -> CheckFailed {
        CheckFailed(message)
    }
}

/// Stores a seeded random stripe of `code` (every chunk on its standard-placement node, chunk
/// i on node i + 1, the data chunks also on the agent, node 0) as stripe `stripe`. Returns the
/// stripe's chunks.
pub fn store_stripe(
    runner: &mut PlanRunner,
    codec: &Codec,
    stripe: u64,
    chunk_bytes: usize,
    seed: u64,
) -> Result<Vec<Vec<u8>>, CheckFailed> {
    let chunks = sim::random_stripe(codec, chunk_bytes, seed).map_err(|e| e.to_string())?;
    runner
        .store_stripe(stripe, &chunks, codec.code().k())
        .map_err(|e| e.to_string())?;
    Ok(chunks)
}

/// Runs `plan` on the cluster in `mode` (inputs read from stripe `stripe`, results written
/// as stripe `out_stripe`) and checks every chunk the plan stores against the simulator's
/// bytes and against the original stripe.
#[allow(clippy::too_many_arguments)]
pub fn run_and_check(
    runner: &mut PlanRunner,
    plan: &Plan,
    chunks: &[Vec<u8>],
    stripe: u64,
    out_stripe: u64,
    template: u64,
    mode: Mode,
    timeout: Duration,
) -> Result<(), CheckFailed> {
    let given: BTreeMap<usize, Vec<u8>> = match &plan.operation {
        Operation::Encode => (0..plan.k).map(|i| (i, chunks[i].clone())).collect(),
        Operation::Repair { lost, .. } => (0..plan.n)
            .filter(|i| !lost.contains(i))
            .map(|i| (i, chunks[i].clone()))
            .collect(),
    };
    let net = sim::NetConfig::ideal(1.25e9, 1e-6);
    let simulated = sim::simulate(plan, &given, &net).map_err(|e| format!("simulator: {e}"))?;
    let mut parts = plan.parts(stripe).map_err(|e| e.to_string())?;
    for p in &mut parts {
        for o in &mut p.outputs {
            if let Some(c) = &mut o.store {
                c.stripe = out_stripe;
            }
        }
    }
    if simulated.outputs.is_empty() {
        return Err(CheckFailed("the simulator stored nothing".into()));
    }
    // Install the parts and forget the outputs of an earlier run (so that a run that stores
    // nothing fails).
    let mut by_node: BTreeMap<NodeId, (Vec<VertexPart>, Vec<ChunkRef>)> = BTreeMap::new();
    for p in parts {
        by_node.entry(p.node).or_default().0.push(p);
    }
    for &(node, index) in simulated.outputs.keys() {
        by_node.entry(node as NodeId).or_default().1.push(ChunkRef {
            stripe: out_stripe,
            index: index as u32,
        });
    }
    let mut installs = Vec::new();
    let mut deletes = Vec::new();
    for (node, (parts, chunks)) in by_node {
        if !parts.is_empty() {
            installs.push((node, crate::control::Request::Install { template, parts }));
        }
        if !chunks.is_empty() {
            deletes.push((node, crate::StoreRequest::Delete { chunks }, Vec::new()));
        }
    }
    runner
        .request_all(installs, timeout)
        .map_err(|e| format!("install: {e}"))?;
    runner
        .store_requests(deletes, timeout)
        .map_err(|e| format!("delete: {e}"))?;
    let nodes = plan.nodes();
    runner
        .run(template, &nodes, mode, timeout)
        .map_err(|e| format!("run: {e}"))?;
    for (&(node, index), want) in &simulated.outputs {
        let got = runner
            .fetch(
                node as NodeId,
                ChunkRef {
                    stripe: out_stripe,
                    index: index as u32,
                },
            )
            .map_err(|e| format!("fetch chunk {index} from node {node}: {e}"))?;
        if got != *want {
            return Err(CheckFailed(format!(
                "chunk {index} on node {node} differs from the simulator's"
            )));
        }
        if got != chunks[index] {
            return Err(CheckFailed(format!(
                "chunk {index} on node {node} differs from the stripe"
            )));
        }
    }
    Ok(())
}

/// What [`check_code`] did.
#[derive(Clone, Debug, Default)]
pub struct CheckCount {
    pub plans: usize,
    pub runs: usize,
}

/// Every scheme's encode and every recoverable repair (up to `max_lost` chunks, rebuilt at the
/// agent) of `code`, run in both modes and checked. Needs nodes `0..=n` (agent + n chunks).
pub fn check_code(
    runner: &mut PlanRunner,
    code: Code,
    chunk_bytes: usize,
    max_lost: usize,
    stripe: u64,
) -> Result<CheckCount, CheckFailed> {
    let codec = Codec::new(code);
    let chunks = store_stripe(runner, &codec, stripe, chunk_bytes, stripe)?;
    let mut requests = vec![Request::Encode];
    for lost in recoverable_patterns(&codec, max_lost) {
        requests.push(Request::Repair {
            lost,
            target: Target::Node(0),
        });
    }
    let mut count = CheckCount::default();
    for scheme in schemes_for(code) {
        for req in &requests {
            let spec = PlanSpec::new(scheme, code, req.clone(), chunk_bytes);
            let plan =
                build(&spec).map_err(|e| format!("{scheme:?} {code} {req:?}: build: {e}"))?;
            count.plans += 1;
            for mode in [Mode::Coherent, Mode::Incoherent] {
                run_and_check(
                    runner,
                    &plan,
                    &chunks,
                    stripe,
                    stripe + 1,
                    stripe,
                    mode,
                    Duration::from_secs(20),
                )
                .map_err(|e| format!("{scheme:?} {code} {req:?} {mode:?}: {e}"))?;
                count.runs += 1;
            }
        }
    }
    Ok(count)
}
