//! A host with an application of its own, as a cache will run it: a plan installed once, then
//! started many times by one `Start` per node whose application payload (a key) decides which
//! bytes are read and where the results go; application messages travel on the same channel.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use engine::channel::{self, Port};
use engine::{
    Application, BufferPool, ChunkRef, HostCtx, InEdge, LocalNode, MemHub, Mode, NodeId, OutEdge,
    OutputSpec, PlanRunner, RunInfo, RunSpec, VertexPart, RUNNER_BASE,
};

/// Chunk bytes by `(key, chunk index)`.
type ByKey = HashMap<(Vec<u8>, u32), Arc<Vec<u8>>>;
/// Finished runs: key and error.
type Finished = Vec<(Vec<u8>, Option<String>)>;

/// Chunks kept per key (the run's payload).
#[derive(Clone, Default)]
struct Keyed {
    chunks: Arc<Mutex<ByKey>>,
    finished: Arc<Mutex<Finished>>,
}

impl Application for Keyed {
    fn input(
        &mut self,
        _ctx: &HostCtx,
        run: &RunInfo,
        chunk: ChunkRef,
    ) -> Result<Arc<Vec<u8>>, String> {
        self.chunks
            .lock()
            .unwrap()
            .get(&(run.payload.clone(), chunk.index))
            .cloned()
            .ok_or_else(|| format!("no chunk {} for this key", chunk.index))
    }

    fn output(&mut self, _ctx: &HostCtx, run: &RunInfo, chunk: ChunkRef, bytes: Arc<Vec<u8>>) {
        self.chunks
            .lock()
            .unwrap()
            .insert((run.payload.clone(), chunk.index), bytes);
    }

    fn finished(&mut self, _ctx: &HostCtx, run: &RunInfo, error: Option<&str>) {
        self.finished
            .lock()
            .unwrap()
            .push((run.payload.clone(), error.map(str::to_string)));
    }

    /// Echoes the body reversed: a message type the engine knows nothing about.
    fn message(&mut self, ctx: &HostCtx, from: NodeId, req: u64, body: &[u8]) {
        let mut v = body.to_vec();
        v.reverse();
        ctx.reply(from, req, &v);
    }
}

/// Node 0 xors its chunks 0 and 1 and sends the result to node 1, which keeps it as chunk 2.
fn xor_plan() -> Vec<VertexPart> {
    let c = |index| ChunkRef { stripe: 0, index };
    vec![
        VertexPart {
            vertex: 0,
            node: 0,
            chunk_bytes: 10,
            slice_bytes: 4,
            local: vec![c(0), c(1)],
            inputs: vec![],
            coeffs: vec![1, 1],
            outputs: vec![OutputSpec {
                sends: vec![OutEdge { edge: 0, to: 1 }],
                store: None,
            }],
        },
        VertexPart {
            vertex: 1,
            node: 1,
            chunk_bytes: 10,
            slice_bytes: 4,
            local: vec![],
            inputs: vec![InEdge { edge: 0, from: 0 }],
            coeffs: vec![1],
            outputs: vec![OutputSpec {
                sends: vec![],
                store: Some(c(2)),
            }],
        },
    ]
}

#[test]
fn an_installed_plan_runs_many_times_with_the_payload_choosing_the_bytes() {
    let hub = MemHub::new();
    let pool = BufferPool::new();
    let apps = [Keyed::default(), Keyed::default()];
    let nodes: Vec<LocalNode> = (0..2)
        .map(|i| LocalNode::mem_with(&hub, i, pool.clone(), apps[i].clone()))
        .collect();
    let mut runner = PlanRunner::mem(&hub, RUNNER_BASE);
    for key in [b"a", b"b", b"c"] {
        let mut m = apps[0].chunks.lock().unwrap();
        m.insert((key.to_vec(), 0), Arc::new(vec![key[0]; 10]));
        m.insert((key.to_vec(), 1), Arc::new(vec![0x0f; 10]));
    }
    runner.install(7, &xor_plan()).unwrap();
    for (i, key) in [b"a", b"b", b"c"].iter().enumerate() {
        let mode = [Mode::Coherent, Mode::Incoherent][i % 2];
        let spec = RunSpec {
            template: 7,
            nodes: &[0, 1],
            mode,
            timeout: Duration::from_secs(10),
            payload: *key,
        };
        runner.run_spec(&spec, 1, 1, &mut |_| {}).unwrap();
    }
    {
        let out = apps[1].chunks.lock().unwrap();
        for key in [b"a", b"b", b"c"] {
            assert_eq!(
                **out
                    .get(&(key.to_vec(), 2))
                    .expect("output kept under its key"),
                vec![key[0] ^ 0x0f; 10]
            );
        }
    }
    // A run whose key has no inputs fails on the node that reads them, and says why.
    let spec = RunSpec {
        template: 7,
        nodes: &[0, 1],
        mode: Mode::Coherent,
        timeout: Duration::from_secs(2),
        payload: b"missing",
    };
    let err = runner.run_spec(&spec, 1, 1, &mut |_| {}).unwrap_err();
    assert!(err.to_string().contains("no chunk 0 for this key"), "{err}");
    let f0 = apps[0].finished.lock().unwrap().clone();
    assert_eq!(f0.len(), 4);
    assert_eq!(f0[0], (b"a".to_vec(), None));
    assert!(f0[3].1.as_deref().unwrap().contains("no chunk 0"));
    // Two runs in flight at once, started without waiting, and an application message between
    // them: every reply is told apart by its request id.
    let spec = |payload: &'static [u8]| RunSpec {
        template: 7,
        nodes: &[0, 1],
        mode: Mode::Coherent,
        timeout: Duration::from_secs(10),
        payload,
    };
    let (op_a, reqs_a) = runner.start(&spec(b"a")).unwrap();
    let msg = runner
        .channel()
        .send(1, channel::encode_raw(Port::App, b"xy", &pool).unwrap())
        .unwrap();
    let (op_b, reqs_b) = runner.start(&spec(b"b")).unwrap();
    assert_ne!(op_a, op_b);
    let mut left: Vec<u64> = reqs_a.iter().chain(&reqs_b).copied().collect();
    left.push(msg);
    let deadline = Instant::now() + Duration::from_secs(10);
    while !left.is_empty() {
        let r = runner
            .channel()
            .next_reply(deadline)
            .unwrap()
            .expect("a reply");
        left.retain(|&q| q != r.req);
        if r.req == msg {
            assert_eq!(r.body(), b"yx");
        } else {
            let op = engine::done_of(&r).unwrap();
            assert_eq!(op, if reqs_a.contains(&r.req) { op_a } else { op_b });
        }
    }
    // Application messages: opaque bytes both ways.
    let p = channel::encode_raw(Port::App, b"abc", &pool).unwrap();
    let r = runner
        .channel()
        .exchange(vec![(1, p)], Duration::from_secs(5), &mut |_| Ok(()))
        .unwrap();
    assert_eq!((r[0].port, r[0].body()), (Port::App, &b"cba"[..]));
    // Nodes 1 is still waiting for the failed run's data until its own deadline; shut down.
    let t = Instant::now();
    runner.shutdown_nodes(&[0, 1]).unwrap();
    assert!(t.elapsed() < Duration::from_secs(5));
    for n in nodes {
        assert_eq!(n.join(), "shutdown requested");
    }
}

#[test]
fn starting_a_template_that_is_not_installed_is_an_error() {
    let hub = MemHub::new();
    let pool = BufferPool::new();
    let node = LocalNode::mem(&hub, 0, pool);
    let mut runner = PlanRunner::mem(&hub, RUNNER_BASE);
    let err = runner
        .run(42, &[0], Mode::Coherent, Duration::from_secs(2))
        .unwrap_err();
    assert!(
        err.to_string().contains("template 42 is not installed"),
        "{err}"
    );
    runner.shutdown_nodes(&[0]).unwrap();
    node.join();
}
