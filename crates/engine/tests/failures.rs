//! Limits and failures end in clear errors, never in a panic or a hang: slices too large for a
//! frame are refused when a plan is installed, chunks too large for a control message are
//! refused by `store`, and an engine thread that dies by a panic still reports `Stopped`.

use std::sync::Arc;
use std::time::{Duration, Instant};

use engine::channel::MAX_CONTROL_BINARY_BYTES;
use engine::transport::{Event, Waker};
use engine::wire::{Header, MAX_PAYLOAD_BYTES};
use engine::{
    BufferPool, ChunkRef, Completion, Engine, InEdge, MemHub, NodeId, OutEdge, OutputSpec, Payload,
    Transport, TransportError, VertexPart, RUNNER_BASE,
};
use engine::{LocalNode, PlanRunner};

fn chunk(index: u32) -> ChunkRef {
    ChunkRef { stripe: 3, index }
}

#[test]
fn slices_larger_than_a_frame_are_refused_at_install() {
    let hub = MemHub::new();
    let pool = BufferPool::new();
    let nodes: Vec<LocalNode> = (0..2)
        .map(|i| LocalNode::mem(&hub, i, pool.clone()))
        .collect();
    let mut runner = PlanRunner::mem(&hub, RUNNER_BASE);
    // A 1 GiB chunk sent unsliced (slice = chunk) would need a frame of 1 GiB.
    let big = 1usize << 30;
    let parts = vec![
        VertexPart {
            vertex: 0,
            node: 0,
            chunk_bytes: big,
            slice_bytes: big,
            local: vec![chunk(0)],
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
            chunk_bytes: big,
            slice_bytes: big,
            local: vec![],
            inputs: vec![InEdge { edge: 0, from: 0 }],
            coeffs: vec![1],
            outputs: vec![OutputSpec {
                sends: vec![],
                store: Some(chunk(1)),
            }],
        },
    ];
    let err = runner.install(1, &parts).unwrap_err().to_string();
    assert!(err.contains("exceed the wire limit"), "{err}");
    // The same chunk in frame-sized slices is accepted.
    let mut sliced = parts.clone();
    for p in &mut sliced {
        p.slice_bytes = MAX_PAYLOAD_BYTES;
    }
    runner.install(2, &sliced).unwrap();
    // A chunk too large for one control message is refused by the runner, not sent.
    let t0 = Instant::now();
    let err = runner
        .store(vec![(0, chunk(0), vec![0u8; MAX_CONTROL_BINARY_BYTES + 1])])
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("more than one control message carries"),
        "{err}"
    );
    assert!(t0.elapsed() < Duration::from_secs(10));
    // The nodes still answer.
    runner.store(vec![(0, chunk(5), vec![1u8; 10])]).unwrap();
    assert_eq!(runner.fetch(0, chunk(5)).unwrap(), vec![1u8; 10]);
    runner.shutdown_nodes(&[0, 1]).unwrap();
    for n in nodes {
        assert_eq!(n.join(), "shutdown requested");
    }
}

/// A transport whose `poll` panics, as a bug in the engine thread would.
struct PanickingTransport;

struct NoWaker;

impl Waker for NoWaker {
    fn wake(&self) {}
}

impl Transport for PanickingTransport {
    fn local(&self) -> NodeId {
        0
    }
    fn send(&mut self, _: NodeId, _: Header, _: Payload) -> Result<(), TransportError> {
        Ok(())
    }
    fn flush(&mut self) {}
    fn poll(&mut self, _: &mut Vec<Event>, _: Option<Duration>) -> Result<(), TransportError> {
        panic!("injected failure in the engine thread");
    }
    fn waker(&self) -> Arc<dyn Waker> {
        Arc::new(NoWaker)
    }
    fn connect(&mut self, _: NodeId, _: &str) -> Result<(), TransportError> {
        Ok(())
    }
}

#[test]
fn a_panicking_engine_thread_reports_stopped() {
    let engine = Engine::start(PanickingTransport, BufferPool::new());
    match engine.cq().wait(Duration::from_secs(20)) {
        Some(Completion::Stopped { reason }) => assert!(reason.contains("panicked"), "{reason}"),
        other => panic!("expected Stopped, got {other:?}"),
    }
    // A node's application loop on that engine returns instead of waiting forever.
    let engine = Engine::start(PanickingTransport, BufferPool::new());
    let reason = engine::serve(engine);
    assert!(reason.contains("panicked"), "{reason}");
}
