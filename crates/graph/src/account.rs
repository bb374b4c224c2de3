//! Accounting: what a plan moves and how long its critical path is, independent of any
//! network's constants.

use std::collections::{BTreeMap, BTreeSet};

use serde::Serialize;

use crate::plan::Plan;
use crate::sim::{simulate_time, NetConfig};

/// Bytes, steps and fan-in of a plan.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Accounting {
    /// Sequential steps: the completion time of the plan on a unit network (one slice moves
    /// over a link per step, no latency, free computation, the simulator's NIC model). For an
    /// unsliced plan these are whole-chunk steps; for a sliced plan, slice steps.
    pub steps: usize,
    /// The most distinct vertices any vertex receives from.
    pub max_fan_in: usize,
    /// Network bytes into each node (edges within a node are not counted).
    pub bytes_in: BTreeMap<usize, u64>,
    /// Network bytes out of each node.
    pub bytes_out: BTreeMap<usize, u64>,
    /// Network bytes per directed node pair.
    pub link_bytes: BTreeMap<(usize, usize), u64>,
    /// Network bytes in all.
    pub total_bytes: u64,
    /// Longest path, in edges.
    pub depth: usize,
}

/// Counts a plan.
pub fn account(plan: &Plan) -> Accounting {
    let mut bytes_in = BTreeMap::new();
    let mut bytes_out = BTreeMap::new();
    let mut link_bytes = BTreeMap::new();
    let mut total_bytes = 0;
    for e in &plan.edges {
        let (from, to) = (plan.vertices[e.from].node, plan.vertices[e.to].node);
        if from == to {
            continue;
        }
        *bytes_out.entry(from).or_insert(0) += e.bytes as u64;
        *bytes_in.entry(to).or_insert(0) += e.bytes as u64;
        *link_bytes.entry((from, to)).or_insert(0) += e.bytes as u64;
        total_bytes += e.bytes as u64;
    }
    let max_fan_in = plan
        .vertices
        .iter()
        .map(|v| {
            v.inputs
                .iter()
                .map(|&e| plan.edges[e].from)
                .collect::<BTreeSet<_>>()
                .len()
        })
        .max()
        .unwrap_or(0);
    let mut depth = vec![0usize; plan.vertices.len()];
    for e in &plan.edges {
        depth[e.to] = depth[e.to].max(depth[e.from] + 1);
    }
    let unit = NetConfig::ideal(plan.slice_bytes as f64, 0.0);
    let t = simulate_time(plan, &unit);
    Accounting {
        steps: (t - 1e-9).ceil().max(0.0) as usize,
        max_fan_in,
        bytes_in,
        bytes_out,
        link_bytes,
        total_bytes,
        depth: depth.into_iter().max().unwrap_or(0),
    }
}
