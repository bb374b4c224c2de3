//! A host with an application of its own, as a cache will run it: a plan installed once, then
//! started many times by one `Start` per node whose application payload (a key) decides which
//! bytes are read and where the results go; application messages travel on the same channel.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use engine::channel::{self, Port};
use engine::{
    AppError, Application, BufferPool, ChunkRef, HostCtx, InEdge, LocalNode, MemHub, Mode, NodeId,
    OutEdge, OutputSpec, PlanRunner, RunError, RunInfo, RunSpec, VertexPart, RUNNER_BASE,
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

impl Keyed {
    /// Holds `bytes` as chunk `index` of `key`.
    fn give(&self, key: &[u8], index: u32, bytes: Vec<u8>) {
        self.chunks
            .lock()
            .unwrap()
            .insert((key.to_vec(), index), Arc::new(bytes));
    }
}

impl Application for Keyed {
    fn input(
        &mut self,
        _ctx: &HostCtx,
        run: &RunInfo,
        chunk: ChunkRef,
    ) -> Result<Arc<Vec<u8>>, AppError> {
        self.chunks
            .lock()
            .unwrap()
            .get(&(run.payload.clone(), chunk.index))
            .cloned()
            .ok_or_else(|| AppError::new(format!("no chunk {} for this key", chunk.index)))
    }

    fn output(
        &mut self,
        _ctx: &HostCtx,
        run: &RunInfo,
        chunk: ChunkRef,
        bytes: Arc<Vec<u8>>,
    ) -> Result<(), AppError> {
        self.chunks
            .lock()
            .unwrap()
            .insert((run.payload.clone(), chunk.index), bytes);
        Ok(())
    }

    fn finished(&mut self, _ctx: &HostCtx, run: &RunInfo, error: Option<&RunError>) {
        self.finished
            .lock()
            .unwrap()
            .push((run.payload.clone(), error.map(RunError::to_string)));
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

/// Node 0 sends its chunk 0 to nodes 1 and 2, which keep it as chunk 5 (a write); nodes 1 and
/// 2 send their chunk 1 to node 0, which keeps them as chunks 11 and 12 (a read).
fn fan_plans() -> (Vec<VertexPart>, Vec<VertexPart>) {
    let c = |index| ChunkRef { stripe: 0, index };
    let mut write = vec![VertexPart {
        vertex: 0,
        node: 0,
        chunk_bytes: 8,
        slice_bytes: 8,
        local: vec![c(0)],
        inputs: vec![],
        coeffs: vec![1],
        outputs: vec![OutputSpec {
            sends: vec![OutEdge { edge: 0, to: 1 }, OutEdge { edge: 1, to: 2 }],
            store: None,
        }],
    }];
    let mut read = Vec::new();
    for n in 1..3u32 {
        write.push(VertexPart {
            vertex: n as usize,
            node: n as usize,
            chunk_bytes: 8,
            slice_bytes: 8,
            local: vec![],
            inputs: vec![InEdge {
                edge: n as usize - 1,
                from: 0,
            }],
            coeffs: vec![1],
            outputs: vec![OutputSpec {
                sends: vec![],
                store: Some(c(5)),
            }],
        });
        read.push(VertexPart {
            vertex: 2 * n as usize,
            node: n as usize,
            chunk_bytes: 8,
            slice_bytes: 8,
            local: vec![c(1)],
            inputs: vec![],
            coeffs: vec![1],
            outputs: vec![OutputSpec {
                sends: vec![OutEdge {
                    edge: n as usize,
                    to: 0,
                }],
                store: None,
            }],
        });
        read.push(VertexPart {
            vertex: 2 * n as usize + 1,
            node: 0,
            chunk_bytes: 8,
            slice_bytes: 8,
            local: vec![],
            inputs: vec![InEdge {
                edge: n as usize,
                from: n as usize,
            }],
            coeffs: vec![1],
            outputs: vec![OutputSpec {
                sends: vec![],
                store: Some(c(10 + n)),
            }],
        });
    }
    (write, read)
}

/// A launch of `fan_plans`' template `template` from node 0 to nodes 1 and 2 with 12-byte
/// chunks, waiting for the `done` of `acks`.
fn fan_launch(template: u64, acks: Vec<NodeId>, mode: Mode, key: &[u8]) -> engine::Launch {
    engine::Launch {
        template,
        nodes: vec![1, 2],
        acks,
        mode,
        timeout: Duration::from_secs(5),
        chunk_bytes: Some(12),
        payload: key.to_vec(),
    }
}

/// Frames each node's engine sent and received so far.
fn frame_counts(nodes: &[LocalNode]) -> Vec<(u64, u64)> {
    nodes.iter().map(|n| n.engine.frame_counts()).collect()
}

/// Node 0 launches the fan write (template 1: its chunk 0 to nodes 1 and 2, kept there as
/// chunk 5) and the fan read (template 2: chunk 1 of nodes 1 and 2 to node 0, kept as 11 and
/// 12) in `mode`: the bytes land, and each costs node 0 two frames out and two in (`settled`:
/// frame counts per node once they stop changing).
fn fan_out_and_in(
    launcher: &engine::Launcher,
    apps: &[Keyed],
    key: &[u8],
    mode: Mode,
    settled: &dyn Fn() -> Vec<(u64, u64)>,
) {
    let key = key.to_vec();
    let before = settled();
    launcher.run(fan_launch(1, vec![1, 2], mode, &key)).unwrap();
    for app in &apps[1..] {
        let got = app.chunks.lock().unwrap()[&(key.clone(), 5)].clone();
        assert_eq!(*got, (1..=12).collect::<Vec<u8>>(), "{mode:?}");
    }
    let after = settled();
    assert_eq!(after[0].0 - before[0].0, 2, "{mode:?}");
    assert_eq!(after[0].1 - before[0].1, 2, "{mode:?}");
    let before = after;
    launcher.run(fan_launch(2, vec![], mode, &key)).unwrap();
    for n in 1..3u32 {
        let got = apps[0].chunks.lock().unwrap()[&(key.clone(), 10 + n)].clone();
        assert_eq!(*got, vec![n as u8; 12], "{mode:?}");
    }
    let after = settled();
    assert_eq!((after[0].0 - before[0].0, after[0].1 - before[0].1), (2, 2));
}

/// [`frame_counts`] once they have stopped moving (at most 2 s): a sender counts a frame once
/// its send returned, which can be after the receiver acted on it (and the launch finished).
fn settled_counts(nodes: &[LocalNode]) -> Vec<(u64, u64)> {
    let deadline = Instant::now() + Duration::from_secs(2);
    let mut last = frame_counts(nodes);
    loop {
        std::thread::sleep(Duration::from_millis(50));
        let now = frame_counts(nodes);
        if now == last || Instant::now() > deadline {
            return now;
        }
        last = now;
    }
}

#[test]
fn a_launched_run_costs_each_participant_its_chunk_and_one_answer() {
    let hub = MemHub::new();
    let pool = BufferPool::new();
    let apps = [Keyed::default(), Keyed::default(), Keyed::default()];
    let nodes: Vec<LocalNode> = (0..3)
        .map(|i| LocalNode::mem_with(&hub, i as NodeId, pool.clone(), apps[i].clone()))
        .collect();
    let (write, read) = fan_plans();
    // Every node installs its own parts locally: no message.
    for (i, n) in nodes.iter().enumerate() {
        let mine = |parts: &[VertexPart]| -> Vec<VertexPart> {
            parts.iter().filter(|p| p.node == i).cloned().collect()
        };
        n.launcher().install(1, mine(&write)).unwrap();
        n.launcher().install(2, mine(&read)).unwrap();
    }
    let counts = || frame_counts(&nodes);
    let settled = || settled_counts(&nodes);
    assert_eq!(counts(), vec![(0, 0); 3]);
    let key = b"k".to_vec();
    // The run's chunk size (12) differs from the template's (8).
    apps[0].give(&key, 0, (1..=12).collect());
    for (i, mode) in [Mode::Coherent, Mode::Incoherent].into_iter().enumerate() {
        let before = counts();
        let launch = fan_launch(1, vec![1, 2], mode, &key);
        nodes[0].launcher().run(launch).unwrap();
        for app in &apps[1..] {
            let got = app.chunks.lock().unwrap()[&(key.clone(), 5)].clone();
            assert_eq!(*got, (1..=12).collect::<Vec<u8>>(), "mode {i}");
        }
        // One frame out to each member (its chunk, carrying the start) and one back (done).
        let after = settled();
        assert_eq!(after[0].0 - before[0].0, 2);
        assert_eq!(after[0].1 - before[0].1, 2);
        for n in 1..3 {
            assert_eq!(after[n].0 - before[n].0, 1);
            assert_eq!(after[n].1 - before[n].1, 1);
        }
    }
    // The read: one start to each member, one chunk back, no done.
    for (n, app) in apps.iter().enumerate().skip(1) {
        app.give(&key, 1, vec![n as u8; 12]);
    }
    let before = counts();
    let launch = engine::Launch {
        template: 2,
        nodes: vec![1, 2],
        acks: vec![],
        mode: Mode::Coherent,
        timeout: Duration::from_secs(5),
        chunk_bytes: Some(12),
        payload: key.clone(),
    };
    nodes[0].launcher().run(launch.clone()).unwrap();
    for n in 1..3u32 {
        let got = apps[0].chunks.lock().unwrap()[&(key.clone(), 10 + n)].clone();
        assert_eq!(*got, vec![n as u8; 12]);
    }
    let after = settled();
    assert_eq!((after[0].0 - before[0].0, after[0].1 - before[0].1), (2, 2));
    // A member without the chunk answers (quiet runs report failures) and the launch fails.
    let err = nodes[0]
        .launcher()
        .run(engine::Launch {
            payload: b"other".to_vec(),
            ..launch.clone()
        })
        .unwrap_err()
        .to_string();
    assert!(err.contains("no chunk 1 for this key"), "{err}");
    // Several launches in flight at once.
    let rx: Vec<_> = (0..8)
        .map(|_| nodes[0].launcher().launch(launch.clone()))
        .collect();
    for r in rx {
        r.recv_timeout(Duration::from_secs(10)).unwrap().unwrap();
    }
    // Without a waiting thread: the host calls back with each launch's result, the failure's
    // too, and the chunks are in when it does.
    let (tx, rx) = std::sync::mpsc::channel();
    for payload in [key.clone(), b"other".to_vec()] {
        let tx = tx.clone();
        let l = engine::Launch {
            payload: payload.clone(),
            ..launch.clone()
        };
        nodes[0]
            .launcher()
            .launch_then(l, move |r| tx.send((payload, r)).unwrap());
    }
    let mut results: Vec<_> = (0..2)
        .map(|_| rx.recv_timeout(Duration::from_secs(10)).unwrap())
        .collect();
    results.sort_by(|a, b| a.0.cmp(&b.0));
    assert!(results[0].1.is_ok(), "{:?}", results[0]);
    let err = results[1].1.as_ref().unwrap_err().to_string();
    assert!(err.contains("no chunk 1 for this key"), "{err}");
    let mut runner = PlanRunner::mem(&hub, RUNNER_BASE);
    runner.shutdown_nodes(&[0, 1, 2]).unwrap();
    for n in nodes {
        assert_eq!(n.join(), "shutdown requested");
    }
}

/// What engine connections to a driven node's shared port write first.
const PREAMBLE: &[u8] = b"ENG\xff";

/// Wakes a test loop's poll.
struct PollWaker(Arc<mio::Waker>);

impl engine::transport::Waker for PollWaker {
    fn wake(&self) {
        let _ = self.0.wake();
    }
}

/// Node 0 with its engine driven by an event loop of the test's own, as a cache node runs
/// it: one listening port shared by engine connections (they write [`PREAMBLE`] first) and a
/// protocol of the loop's (every byte it reads is answered with the byte plus one). Returns
/// the node, the port and the loop's thread, which ends when the engine stops.
fn driven_node(app: Keyed) -> (LocalNode, std::net::SocketAddr, std::thread::JoinHandle<()>) {
    use engine::transport::TcpTransport;
    use mio::{Events, Interest, Poll, Token};
    use std::io::{Read, Write};
    const LISTENER: Token = Token(0);
    const WAKE: Token = Token(1);
    const ENGINE_BASE: usize = 1000;
    let pool = BufferPool::new();
    let poll = Poll::new().unwrap();
    let mut listener = mio::net::TcpListener::bind("127.0.0.1:0".parse().unwrap()).unwrap();
    let addr = listener.local_addr().unwrap();
    poll.registry()
        .register(&mut listener, LISTENER, Interest::READABLE)
        .unwrap();
    let waker = Arc::new(mio::Waker::new(poll.registry(), WAKE).unwrap());
    let t = TcpTransport::driven(
        0,
        poll.registry(),
        ENGINE_BASE,
        Arc::new(PollWaker(waker)),
        pool.clone(),
    )
    .unwrap();
    let (engine, mut driven) = engine::Engine::driven(t, pool);
    let node = LocalNode::with_engine(engine, app);
    let thread = std::thread::spawn(move || {
        let mut poll = poll;
        let mut events = Events::with_capacity(64);
        // Connections not known to be the engine's yet, and the loop's own.
        let mut conns: HashMap<Token, (mio::net::TcpStream, Vec<u8>, bool)> = HashMap::new();
        let mut next = 10;
        let mut frames = Vec::new();
        loop {
            let timeout = driven
                .next_deadline()
                .map(|d| d.saturating_duration_since(Instant::now()));
            poll.poll(&mut events, timeout).unwrap();
            for ev in events.iter() {
                match ev.token() {
                    LISTENER => {
                        while let Ok((mut s, _)) = listener.accept() {
                            let token = Token(next);
                            next += 1;
                            poll.registry()
                                .register(&mut s, token, Interest::READABLE)
                                .unwrap();
                            conns.insert(token, (s, Vec::new(), false));
                        }
                    }
                    WAKE => {}
                    t if t.0 >= ENGINE_BASE => driven.transport().ready(ev, &mut frames),
                    t => {
                        let Some((s, buf, known)) = conns.get_mut(&t) else {
                            continue;
                        };
                        let mut chunk = [0u8; 4096];
                        loop {
                            match s.read(&mut chunk) {
                                Ok(0) => break,
                                Ok(n) => buf.extend_from_slice(&chunk[..n]),
                                Err(_) => break,
                            }
                        }
                        if !*known && buf.len() >= PREAMBLE.len() {
                            if buf.starts_with(PREAMBLE) {
                                let (mut s, buf, _) = conns.remove(&t).unwrap();
                                poll.registry().deregister(&mut s).unwrap();
                                driven
                                    .transport()
                                    .adopt(s, &buf[PREAMBLE.len()..], &mut frames)
                                    .unwrap();
                                continue;
                            }
                            *known = true;
                        }
                        if *known {
                            let reply: Vec<u8> = buf.drain(..).map(|b| b.wrapping_add(1)).collect();
                            s.write_all(&reply).unwrap();
                        }
                    }
                }
            }
            if driven.turn(&mut frames).is_err() {
                return;
            }
        }
    });
    (node, addr, thread)
}

/// An engine driven by another event loop runs launched writes and reads in both modes with
/// the same bytes and frame counts as an engine on its own thread, while that loop serves a
/// protocol of its own on the same port; it stops when asked.
#[test]
fn a_driven_engine_shares_its_loop_and_port() {
    use engine::transport::{TcpTransport, Transport};
    let apps = [Keyed::default(), Keyed::default(), Keyed::default()];
    let (node0, addr, driver) = driven_node(apps[0].clone());
    let mut nodes = vec![node0];
    for (i, app) in apps.iter().enumerate().skip(1) {
        let pool = BufferPool::new();
        let mut t =
            TcpTransport::bind(i as NodeId, "127.0.0.1:0".parse().unwrap(), pool.clone()).unwrap();
        t.set_preamble(PREAMBLE);
        t.connect(0, &addr.to_string()).unwrap();
        nodes.push(LocalNode::with_engine(
            engine::Engine::start(t, pool),
            app.clone(),
        ));
    }
    // The loop's own protocol on the shared port.
    let echo = || {
        use std::io::{Read, Write};
        let mut s = std::net::TcpStream::connect(addr).unwrap();
        s.write_all(b"abcd").unwrap();
        let mut got = [0u8; 4];
        s.read_exact(&mut got).unwrap();
        assert_eq!(&got, b"bcde");
    };
    echo();
    let (write, read) = fan_plans();
    // Each node installs its own parts of the write; node 0 installs the read everywhere.
    for (i, n) in nodes.iter().enumerate() {
        let mine: Vec<VertexPart> = write.iter().filter(|p| p.node == i).cloned().collect();
        n.launcher().install(1, mine).unwrap();
    }
    nodes[0]
        .launcher()
        .install_everywhere(2, read.clone(), Duration::from_secs(5))
        .unwrap();
    let key = b"k".to_vec();
    apps[0].give(&key, 0, (1..=12).collect());
    for (n, app) in apps.iter().enumerate().skip(1) {
        app.give(&key, 1, vec![n as u8; 12]);
    }
    let settled = || settled_counts(&nodes);
    // The install cost node 0 one message to each other node and one answer from each.
    assert_eq!(settled()[0], (2, 2));
    // A node that never answers (7 never connects) fails the install at its timeout.
    let mut lone = read[0].clone();
    lone.node = 7;
    let err = nodes[0]
        .launcher()
        .install_everywhere(3, vec![lone], Duration::from_millis(300))
        .unwrap_err()
        .to_string();
    assert!(err.contains("timed out waiting for nodes [7]"), "{err}");
    for mode in [Mode::Coherent, Mode::Incoherent] {
        fan_out_and_in(&nodes[0].launcher(), &apps, &key, mode, &settled);
        echo();
    }
    for n in &nodes {
        n.engine.shutdown();
    }
    driver.join().unwrap();
    for n in nodes {
        assert_eq!(n.join(), "shutdown");
    }
}

/// A host with no thread of its own: node 0's engine is driven by a loop of the test's, which
/// steps the host after each turn. Its own parts are installed before the loop runs; runs
/// launched from another thread (waiting, or with a call) write and read the same bytes with
/// the same frames as a threaded host's, in both modes; the application and the calls run on
/// the loop's thread; a failure is reported; a `Shutdown` ends the host and its loop.
#[test]
fn a_stepped_host_runs_on_the_loop_that_drives_its_engine() {
    let hub = MemHub::new();
    let pool = BufferPool::new();
    let apps = [Keyed::default(), Keyed::default(), Keyed::default()];
    let (write, read) = fan_plans();
    let mine = |parts: &[VertexPart], i: usize| -> Vec<VertexPart> {
        parts.iter().filter(|p| p.node == i).cloned().collect()
    };
    let (engine0, mut driven) = engine::Engine::driven(hub.attach(0, pool.clone()), pool.clone());
    let mut host = engine::SteppedHost::new(engine0.clone(), apps[0].clone());
    host.install(1, mine(&write, 0)).unwrap();
    host.install(2, mine(&read, 0)).unwrap();
    let launcher = host.launcher();
    let others: Vec<LocalNode> = (1..3)
        .map(|i| LocalNode::mem_with(&hub, i as NodeId, pool.clone(), apps[i].clone()))
        .collect();
    for (i, n) in others.iter().enumerate() {
        n.launcher().install(1, mine(&write, i + 1)).unwrap();
        n.launcher().install(2, mine(&read, i + 1)).unwrap();
    }
    let looper = std::thread::Builder::new()
        .name("test-loop".into())
        .spawn(move || {
            let mut frames = Vec::new();
            loop {
                let stopped = host.step().and_then(|()| {
                    let _ = driven.turn(&mut frames);
                    host.step()
                });
                if let Err(why) = stopped {
                    // Its last replies and the engine's stop are work requests: one more turn.
                    let _ = driven.turn(&mut frames);
                    return why;
                }
                if !host.pending() {
                    // The hub's frames wait in its queue: look again shortly.
                    std::thread::sleep(Duration::from_millis(1));
                }
            }
        })
        .unwrap();
    let counts = || {
        let mut c = vec![engine0.frame_counts()];
        c.extend(others.iter().map(|n| n.engine.frame_counts()));
        c
    };
    let settled = || {
        let mut last = counts();
        loop {
            std::thread::sleep(Duration::from_millis(50));
            let now = counts();
            if now == last {
                return now;
            }
            last = now;
        }
    };
    let key = b"k".to_vec();
    apps[0].give(&key, 0, (1..=12).collect());
    for (n, app) in apps.iter().enumerate().skip(1) {
        app.give(&key, 1, vec![n as u8; 12]);
    }
    for mode in [Mode::Coherent, Mode::Incoherent] {
        fan_out_and_in(&launcher, &apps, &key, mode, &settled);
    }
    // Without a waiting thread: the call comes on the loop's thread, a failure's too.
    let (tx, rx) = std::sync::mpsc::channel();
    for payload in [key.clone(), b"other".to_vec()] {
        let tx = tx.clone();
        let l = engine::Launch {
            payload: payload.clone(),
            ..fan_launch(2, vec![], Mode::Coherent, &key)
        };
        launcher.launch_then(l, move |r| {
            let thread = std::thread::current().name().map(str::to_string);
            tx.send((payload, r.map_err(|e| e.to_string()), thread))
                .unwrap();
        });
    }
    let mut results: Vec<_> = (0..2)
        .map(|_| rx.recv_timeout(Duration::from_secs(10)).unwrap())
        .collect();
    results.sort_by(|a, b| a.0.cmp(&b.0));
    assert!(results[0].1.is_ok(), "{:?}", results[0]);
    let err = results[1].1.as_ref().unwrap_err();
    assert!(err.contains("no chunk 1 for this key"), "{err}");
    for r in &results {
        assert_eq!(r.2.as_deref(), Some("test-loop"));
    }
    // Its application hears every run of node 0 end (the failed one's parts are stopped
    // after the call).
    let deadline = Instant::now() + Duration::from_secs(5);
    while apps[0].finished.lock().unwrap().len() < 6 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(10));
    }
    let finished = apps[0].finished.lock().unwrap().clone();
    assert_eq!(finished.len(), 6, "{finished:?}");
    assert_eq!(finished.iter().filter(|f| f.1.is_some()).count(), 1);
    let mut runner = PlanRunner::mem(&hub, RUNNER_BASE);
    runner.shutdown_nodes(&[0, 1, 2]).unwrap();
    assert_eq!(looper.join().unwrap(), "shutdown requested");
    for n in others {
        assert_eq!(n.join(), "shutdown requested");
    }
}
