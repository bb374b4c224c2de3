//! Many stripes on one cluster: the repairs of `stripes` stripes placed over `nodes` nodes
//! with rotated placement, simulated together so that they share every NIC and calculator
//! ([`crate::sim::simulate_many`]). This is how the simulator explores clusters larger than
//! our machines (`inec model --nodes 100 --stripes 100 --bandwidth-gbps 100`).
//!
//! Placement: chunk i of stripe t lives on node (t + i) mod N. Requesters: stripe t is
//! repaired at requester t mod r, and requester j is node (j + n) mod N — with r = S = N every
//! stripe has its own requester, the node just after its chunks; with r = 1 every repair goes
//! to node n.

use std::collections::BTreeMap;

use codes::Code;
use serde::Serialize;

use crate::account::account;
use crate::build::{build, Placement, PlanSpec, Request, Target};
use crate::plan::{Plan, Scheme};
use crate::sim::{simulate_many, simulate_time, ManyResult, NetConfig};
use crate::PlanError;

/// Repairs of many stripes over one cluster.
#[derive(Clone, Debug)]
pub struct ClusterSpec {
    pub scheme: Scheme,
    pub code: Code,
    /// N, the cluster's nodes (at least the code's n).
    pub nodes: usize,
    /// S, the stripes repaired at once.
    pub stripes: usize,
    /// r, the distinct requesters (1 ≤ r ≤ min(S, N)).
    pub requesters: usize,
    /// The chunks lost in every stripe.
    pub lost: Vec<usize>,
    pub chunk_bytes: usize,
    pub slice_bytes: Option<usize>,
    pub aggregators: Option<usize>,
}

/// The rotated placement of stripe `stripe` of a code with `n` chunks over `nodes` nodes, the
/// agent on node (stripe + n) mod nodes.
pub fn rotated(n: usize, nodes: usize, stripe: usize) -> Placement {
    Placement {
        nodes: (0..n).map(|i| (stripe + i) % nodes).collect(),
        agent: (stripe + n) % nodes,
    }
}

/// The plans and the shared simulation.
#[derive(Clone, Debug)]
pub struct ClusterRun {
    pub plans: Vec<Plan>,
    pub sim: ManyResult,
    /// Bytes rebuilt: stripes × lost × chunk.
    pub repaired_bytes: u64,
    /// `repaired_bytes / sim.time_s`.
    pub throughput_bytes_s: f64,
    /// The simulated time of stripe 0's repair alone on the same network.
    pub one_stripe_s: f64,
    /// Network bytes in and out of every node, summed over the plans' accounting.
    pub accounted_in: BTreeMap<usize, u64>,
    pub accounted_out: BTreeMap<usize, u64>,
}

/// A one-line summary of a run, for tables and JSON.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ClusterSummary {
    pub scheme: Scheme,
    pub code: String,
    pub nodes: usize,
    pub stripes: usize,
    pub requesters: usize,
    pub chunk_bytes: usize,
    pub sim_time_s: f64,
    pub one_stripe_s: f64,
    pub throughput_gbyte_s: f64,
    pub max_nic_in_bytes: u64,
    pub max_nic_out_bytes: u64,
}

impl ClusterRun {
    pub fn summary(&self, spec: &ClusterSpec) -> ClusterSummary {
        ClusterSummary {
            scheme: spec.scheme,
            code: spec.code.to_string(),
            nodes: spec.nodes,
            stripes: spec.stripes,
            requesters: spec.requesters,
            chunk_bytes: spec.chunk_bytes,
            sim_time_s: self.sim.time_s,
            one_stripe_s: self.one_stripe_s,
            throughput_gbyte_s: self.throughput_bytes_s / 1e9,
            max_nic_in_bytes: self.sim.bytes_in.values().copied().max().unwrap_or(0),
            max_nic_out_bytes: self.sim.bytes_out.values().copied().max().unwrap_or(0),
        }
    }
}

/// Builds every stripe's repair plan.
pub fn plans(spec: &ClusterSpec) -> Result<Vec<Plan>, PlanError> {
    let n = spec.code.n();
    if spec.nodes < n {
        return Err(PlanError::BadPlacement {
            reason: format!(
                "{} nodes cannot hold the {n} chunks of a {} stripe",
                spec.nodes, spec.code
            ),
        });
    }
    if spec.stripes == 0 {
        return Err(PlanError::BadSize {
            what: "number of stripes",
            value: 0,
            limit: usize::MAX,
        });
    }
    let most = spec.stripes.min(spec.nodes);
    if spec.requesters == 0 || spec.requesters > most {
        return Err(PlanError::BadSize {
            what: "number of requesters",
            value: spec.requesters,
            limit: most,
        });
    }
    (0..spec.stripes)
        .map(|t| {
            let placement = rotated(n, spec.nodes, t);
            let requester = (t % spec.requesters + n) % spec.nodes;
            let mut ps = PlanSpec::new(
                spec.scheme,
                spec.code,
                Request::Repair {
                    lost: spec.lost.clone(),
                    target: Target::Node(requester),
                },
                spec.chunk_bytes,
            );
            ps.placement = placement;
            ps.slice_bytes = spec.slice_bytes;
            ps.aggregators = spec.aggregators;
            build(&ps)
        })
        .collect()
}

/// Builds and simulates the repairs of every stripe together.
pub fn run(spec: &ClusterSpec, net: &NetConfig) -> Result<ClusterRun, PlanError> {
    let plans = plans(spec)?;
    let sim = simulate_many(&plans, net);
    let one_stripe_s = simulate_time(&plans[0], net);
    let mut accounted_in = BTreeMap::new();
    let mut accounted_out = BTreeMap::new();
    for p in &plans {
        let a = account(p);
        for (&node, &b) in &a.bytes_in {
            *accounted_in.entry(node).or_insert(0) += b;
        }
        for (&node, &b) in &a.bytes_out {
            *accounted_out.entry(node).or_insert(0) += b;
        }
    }
    let repaired_bytes = (spec.stripes * spec.lost.len() * spec.chunk_bytes) as u64;
    Ok(ClusterRun {
        throughput_bytes_s: repaired_bytes as f64 / sim.time_s,
        plans,
        sim,
        repaired_bytes,
        one_stripe_s,
        accounted_in,
        accounted_out,
    })
}
