//! The engine executes random plan-shaped DAGs (sources with local chunks, inner vertices that
//! combine received buffers with their own chunks, sinks that keep results) and yields exactly
//! the bytes a direct evaluation gives, in both modes, over the in-memory transport and TCP.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use engine::{
    BufferPool, ChunkRef, InEdge, MemHub, Mode, NodeId, OutEdge, OutputSpec, VertexPart,
    RUNNER_BASE,
};
use engine::{LocalNode, PlanRunner};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

struct Dag {
    parts: Vec<VertexPart>,
    locals: Vec<(NodeId, ChunkRef, Vec<u8>)>,
    expected: Vec<(NodeId, ChunkRef, Vec<u8>)>,
}

fn coeff(rng: &mut SmallRng) -> u8 {
    match rng.gen_range(0..4) {
        0 => 1,
        1 => 0,
        _ => rng.gen(),
    }
}

/// A random layered DAG, one vertex per node, evaluated directly with the reference field.
fn random_dag(seed: u64, nodes: usize, chunk_bytes: usize, slice_bytes: usize) -> Dag {
    let mut rng = SmallRng::seed_from_u64(seed);
    let mut parts: Vec<VertexPart> = Vec::new();
    let mut locals = Vec::new();
    // values[v][o] = bytes of output o of vertex v.
    let mut values: Vec<Vec<Vec<u8>>> = Vec::new();
    let mut edge_id = 0usize;
    let sources = rng.gen_range(1..=nodes.clamp(1, 4));
    for v in 0..nodes {
        let node = v as NodeId;
        let mut part = VertexPart {
            vertex: v,
            node,
            chunk_bytes,
            slice_bytes,
            local: vec![],
            inputs: vec![],
            coeffs: vec![],
            outputs: vec![],
        };
        let mut inputs: Vec<Vec<u8>> = Vec::new();
        let nl = if v < sources {
            rng.gen_range(1..=3)
        } else {
            rng.gen_range(0..=2)
        };
        for j in 0..nl {
            let c = ChunkRef {
                stripe: seed,
                index: (v * 8 + j) as u32,
            };
            let bytes: Vec<u8> = (0..chunk_bytes).map(|_| rng.gen()).collect();
            part.local.push(c);
            locals.push((node, c, bytes.clone()));
            inputs.push(bytes);
        }
        if v >= sources {
            let fan_in = rng.gen_range(1..=3.min(v));
            let mut from: Vec<usize> = (0..v).collect();
            for _ in 0..fan_in {
                let u = from.swap_remove(rng.gen_range(0..from.len()));
                let o = rng.gen_range(0..parts[u].outputs.len());
                parts[u].outputs[o].sends.push(OutEdge {
                    edge: edge_id,
                    to: node,
                });
                part.inputs.push(InEdge {
                    edge: edge_id,
                    from: u as NodeId,
                });
                inputs.push(values[u][o].clone());
                edge_id += 1;
            }
        }
        let outs = rng.gen_range(1..=2);
        let n = inputs.len();
        let mut vals = Vec::new();
        for _ in 0..outs {
            let row: Vec<u8> = (0..n).map(|_| coeff(&mut rng)).collect();
            let mut val = vec![0u8; chunk_bytes];
            for (c, input) in row.iter().zip(&inputs) {
                for (d, s) in val.iter_mut().zip(input) {
                    *d ^= gf::field::mul(*c, *s);
                }
            }
            part.coeffs.extend(row);
            part.outputs.push(OutputSpec {
                sends: vec![],
                store: None,
            });
            vals.push(val);
        }
        // Row-major coefficients were pushed output by output.
        parts.push(part);
        values.push(vals);
    }
    // Outputs nobody receives are kept as results.
    let mut expected = Vec::new();
    for (v, part) in parts.iter_mut().enumerate() {
        for (o, out) in part.outputs.iter_mut().enumerate() {
            if out.sends.is_empty() || (v + o) % 5 == 0 {
                let c = ChunkRef {
                    stripe: seed,
                    index: 1000 + (v * 8 + o) as u32,
                };
                out.store = Some(c);
                expected.push((v as NodeId, c, values[v][o].clone()));
            }
        }
    }
    Dag {
        parts,
        locals,
        expected,
    }
}

fn run_dag(runner: &mut PlanRunner, dag: &Dag, template: u64, mode: Mode) {
    runner.store(dag.locals.clone()).unwrap();
    runner.install(template, &dag.parts).unwrap();
    // Outputs of an earlier run must not pass for this run's.
    let outputs = dag.expected.iter().map(|(n, c, _)| (*n, *c)).collect();
    runner.delete(outputs).unwrap();
    let nodes: Vec<NodeId> = dag.parts.iter().map(|p| p.node).collect();
    runner
        .run(template, &nodes, mode, Duration::from_secs(20))
        .unwrap();
    for (node, c, want) in &dag.expected {
        let got = runner.fetch(*node, *c).unwrap();
        assert!(
            got == *want,
            "mode {mode:?}: result {c:?} on node {node} differs"
        );
    }
}

const SHAPES: [(usize, usize, usize); 6] = [
    (2, 1, 1),
    (3, 64, 64),
    (5, 1000, 128),
    (7, 4096, 1000),
    (9, 333, 7),
    (12, 70_000, 16_384),
];

#[test]
fn random_dags_over_memory_equal_direct_evaluation() {
    for seed in 0..12u64 {
        let (n, chunk, slice) = SHAPES[seed as usize % SHAPES.len()];
        let hub = MemHub::new();
        let pool = BufferPool::new();
        let nodes: Vec<LocalNode> = (0..n)
            .map(|i| LocalNode::mem(&hub, i as NodeId, pool.clone()))
            .collect();
        let mut runner = PlanRunner::mem(&hub, RUNNER_BASE);
        let dag = random_dag(seed, n, chunk, slice);
        for (t, mode) in [Mode::Coherent, Mode::Incoherent].into_iter().enumerate() {
            run_dag(&mut runner, &dag, t as u64, mode);
        }
        let ids: Vec<NodeId> = (0..n as NodeId).collect();
        runner.shutdown_nodes(&ids).unwrap();
        for node in nodes {
            node.join();
        }
    }
}

fn tcp_cluster(n: usize) -> (Vec<LocalNode>, PlanRunner) {
    let pool = BufferPool::new();
    let any: SocketAddr = "127.0.0.1:0".parse().unwrap();
    let nodes: Vec<LocalNode> = (0..n)
        .map(|i| LocalNode::tcp(i as NodeId, any, pool.clone()).unwrap())
        .collect();
    let addrs: Vec<(NodeId, String)> = nodes
        .iter()
        .enumerate()
        .map(|(i, n)| (i as NodeId, n.addr.unwrap().to_string()))
        .collect();
    let mut runner = PlanRunner::tcp(RUNNER_BASE, &addrs).unwrap();
    runner.introduce(&addrs).unwrap();
    (nodes, runner)
}

#[test]
fn random_dags_over_tcp_equal_direct_evaluation() {
    let (nodes, mut runner) = tcp_cluster(12);
    for seed in 100..112u64 {
        let (n, chunk, slice) = SHAPES[seed as usize % SHAPES.len()];
        let dag = random_dag(seed, n, chunk, slice);
        for (t, mode) in [Mode::Coherent, Mode::Incoherent].into_iter().enumerate() {
            run_dag(&mut runner, &dag, seed * 2 + t as u64, mode);
        }
    }
    // Many operations in flight at once.
    let dag = random_dag(7, 12, 50_000, 4096);
    runner.store(dag.locals.clone()).unwrap();
    runner.install(999, &dag.parts).unwrap();
    let ids: Vec<NodeId> = (0..12).collect();
    for mode in [Mode::Coherent, Mode::Incoherent] {
        let st = runner
            .run_many(999, &ids, mode, 40, 8, Duration::from_secs(30))
            .unwrap();
        assert_eq!(st.ops, 40);
    }
    for (node, c, want) in &dag.expected {
        assert_eq!(runner.fetch(*node, *c).unwrap(), *want);
    }
    runner.shutdown_nodes(&ids).unwrap();
    for node in nodes {
        assert_eq!(node.join(), "shutdown requested");
    }
}

/// A chain 0 → 1 → 2 whose source is never started: 1 and 2 wait for 0.
fn waiting_chain(chunk_bytes: usize) -> Vec<VertexPart> {
    let c = |i| ChunkRef {
        stripe: 5,
        index: i,
    };
    vec![
        VertexPart {
            vertex: 0,
            node: 0,
            chunk_bytes,
            slice_bytes: 1024,
            local: vec![c(0)],
            inputs: vec![],
            coeffs: vec![1],
            outputs: vec![OutputSpec {
                sends: vec![OutEdge { edge: 0, to: 1 }],
                store: None,
            }],
        },
        VertexPart {
            vertex: 1,
            node: 1,
            chunk_bytes,
            slice_bytes: 1024,
            local: vec![c(1)],
            inputs: vec![InEdge { edge: 0, from: 0 }],
            coeffs: vec![3, 1],
            outputs: vec![OutputSpec {
                sends: vec![OutEdge { edge: 1, to: 2 }],
                store: None,
            }],
        },
        VertexPart {
            vertex: 2,
            node: 2,
            chunk_bytes,
            slice_bytes: 1024,
            local: vec![],
            inputs: vec![InEdge { edge: 1, from: 1 }],
            coeffs: vec![1],
            outputs: vec![OutputSpec {
                sends: vec![],
                store: Some(c(9)),
            }],
        },
    ]
}

#[test]
fn killed_node_fails_the_plan_quickly_in_both_modes() {
    for mode in [Mode::Coherent, Mode::Incoherent] {
        let hub = MemHub::new();
        let pool = BufferPool::new();
        let nodes: Vec<LocalNode> = (0..3)
            .map(|i| LocalNode::mem(&hub, i, pool.clone()))
            .collect();
        let mut runner = PlanRunner::mem(&hub, RUNNER_BASE);
        runner
            .store(vec![
                (
                    0,
                    ChunkRef {
                        stripe: 5,
                        index: 0,
                    },
                    vec![1; 4096],
                ),
                (
                    1,
                    ChunkRef {
                        stripe: 5,
                        index: 1,
                    },
                    vec![2; 4096],
                ),
            ])
            .unwrap();
        runner.install(1, &waiting_chain(4096)).unwrap();
        let hub2 = hub.clone();
        let killer = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(100));
            hub2.kill(0);
        });
        let t0 = Instant::now();
        // Node 0 is not asked to run: nodes 1 and 2 wait for it until it dies.
        let err = runner
            .run(1, &[1, 2], mode, Duration::from_secs(60))
            .unwrap_err();
        assert!(
            t0.elapsed() < Duration::from_secs(10),
            "took {:?}",
            t0.elapsed()
        );
        let msg = err.to_string();
        assert!(
            msg.contains("peer 0 lost") || msg.contains("aborted"),
            "{msg}"
        );
        killer.join().unwrap();
        runner.shutdown_nodes(&[1, 2]).unwrap();
        for n in nodes {
            n.join();
        }
    }
}

#[test]
fn a_plan_waiting_for_a_silent_node_times_out() {
    let (nodes, mut runner) = tcp_cluster(3);
    runner
        .store(vec![
            (
                0,
                ChunkRef {
                    stripe: 5,
                    index: 0,
                },
                vec![1; 4096],
            ),
            (
                1,
                ChunkRef {
                    stripe: 5,
                    index: 1,
                },
                vec![2; 4096],
            ),
        ])
        .unwrap();
    runner.install(1, &waiting_chain(4096)).unwrap();
    for mode in [Mode::Coherent, Mode::Incoherent] {
        let t0 = Instant::now();
        let err = runner
            .run(1, &[1, 2], mode, Duration::from_millis(300))
            .unwrap_err();
        assert!(t0.elapsed() < Duration::from_secs(5));
        assert!(err.to_string().contains("timed out"), "{err}");
    }
    // The cluster still works afterwards.
    runner
        .run(1, &[0, 1, 2], Mode::Coherent, Duration::from_secs(10))
        .unwrap();
    let got = runner
        .fetch(
            2,
            ChunkRef {
                stripe: 5,
                index: 9,
            },
        )
        .unwrap();
    assert_eq!(got, vec![gf::field::mul(3, 2) ^ 1; 4096]);
    runner.shutdown_nodes(&[0, 1, 2]).unwrap();
    for n in nodes {
        n.join();
    }
}

#[test]
fn primitives_are_lowered_by_the_papers_rules() {
    let parts = waiting_chain(10);
    assert_eq!(parts[0].primitive(), engine::Primitive::Send);
    assert_eq!(parts[1].primitive(), engine::Primitive::RecvEcSend);
    // Receives and keeps the buffer unchanged: no calculation (graph's lowering rules).
    assert_eq!(parts[2].primitive(), engine::Primitive::Recv);
}
