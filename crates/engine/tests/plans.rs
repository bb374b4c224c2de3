//! Every scheme's encode and repair, for every recoverable loss pattern of the paper's
//! configurations, executed by engines over the in-memory transport in both modes, gives the
//! simulator's bytes.

use engine::testing::check_code;
use engine::{BufferPool, MemHub, NodeId, RUNNER_BASE};
use engine::{LocalNode, PlanRunner};
use graph::paper::PAPER_CODES;

#[test]
fn every_plan_of_the_paper_configurations_matches_the_simulator_in_memory() {
    let hub = MemHub::new();
    let pool = BufferPool::new();
    let nodes: Vec<LocalNode> = (0..17)
        .map(|i| LocalNode::mem(&hub, i, pool.clone()))
        .collect();
    let mut runner = PlanRunner::mem(&hub, RUNNER_BASE);
    let mut total = 0;
    for (i, code) in PAPER_CODES.iter().enumerate() {
        let code = code.parse().unwrap();
        // 100 bytes: not a multiple of ECPipe's slice count, so the last slice is short.
        let count = check_code(&mut runner, code, 100, usize::MAX, 10 * i as u64)
            .unwrap_or_else(|e| panic!("{e}"));
        eprintln!("{code}: {} plans, {} runs", count.plans, count.runs);
        assert!(count.plans > 4);
        total += count.runs;
    }
    assert!(total > 1000);
    let ids: Vec<NodeId> = (0..17).collect();
    runner.shutdown_nodes(&ids).unwrap();
    for n in nodes {
        n.join();
    }
}
