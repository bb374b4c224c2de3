//! Real `inec node` processes on port 0 (readiness line on stdout, never a fixed sleep):
//! every scheme's plans executed over TCP equal the simulator's bytes in both modes; a node
//! killed mid-plan makes the plan fail quickly with a clear error; `inec cluster up|status|down`.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use engine::check::{check_code, PAPER_CODES};
use engine::node::Coordinator;
use engine::{ChunkRef, InEdge, Mode, NodeId, OutEdge, OutputSpec, VertexPart, COORDINATOR_BASE};

const INEC: &str = env!("CARGO_BIN_EXE_inec");

struct Node {
    child: Child,
    addr: String,
}

impl Drop for Node {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Starts `inec node --id id --listen 127.0.0.1:0` and waits for its readiness line.
fn start_node(id: NodeId) -> Node {
    let mut child = Command::new(INEC)
        .args(["node", "--id", &id.to_string(), "--listen", "127.0.0.1:0"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("start inec node");
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let addr = line
        .split(" ready on ")
        .nth(1)
        .and_then(|r| r.split_whitespace().next())
        .unwrap_or_else(|| panic!("bad readiness line {line:?}"))
        .to_string();
    Node { child, addr }
}

fn cluster(n: usize) -> (Vec<Node>, Coordinator) {
    let nodes: Vec<Node> = (0..n).map(|i| start_node(i as NodeId)).collect();
    let addrs: Vec<(NodeId, String)> = nodes
        .iter()
        .enumerate()
        .map(|(i, n)| (i as NodeId, n.addr.clone()))
        .collect();
    let mut coord = Coordinator::tcp(COORDINATOR_BASE, &addrs).unwrap();
    coord.introduce(&addrs).unwrap();
    (nodes, coord)
}

fn shutdown(nodes: Vec<Node>, coord: &mut Coordinator) {
    let ids: Vec<NodeId> = (0..nodes.len() as NodeId).collect();
    coord.shutdown_nodes(&ids).unwrap();
    for mut n in nodes {
        let status = n.child.wait().unwrap();
        assert!(status.success(), "node exited with {status}");
    }
}

/// Every scheme's encode and every recoverable loss pattern of the paper's configurations.
#[test]
fn plans_over_tcp_between_node_processes_match_the_simulator() {
    let (nodes, mut coord) = cluster(17);
    let mut runs = 0;
    for (i, code) in PAPER_CODES.iter().enumerate() {
        let code: codes::Code = code.parse().unwrap();
        let count = check_code(&mut coord, code, 100, usize::MAX, 10 * i as u64)
            .unwrap_or_else(|e| panic!("{e}"));
        eprintln!(
            "{code}: {} plans, {} runs over TCP",
            count.plans, count.runs
        );
        runs += count.runs;
    }
    assert!(runs > 40_000);
    shutdown(nodes, &mut coord);
}

/// A chain 0 → 1 → 2: node 1 adds its chunk to what node 0 sends, node 2 keeps the result.
fn chain(chunk_bytes: usize) -> Vec<VertexPart> {
    let c = |i| ChunkRef {
        stripe: 5,
        index: i,
    };
    let base = |vertex: u32, node: NodeId| VertexPart {
        vertex,
        node,
        chunk_bytes,
        slice_bytes: 64 << 10,
        locals: vec![],
        in_edges: vec![],
        coeffs: vec![],
        outputs: vec![],
    };
    vec![
        VertexPart {
            locals: vec![c(0)],
            coeffs: vec![1],
            outputs: vec![OutputSpec {
                sends: vec![OutEdge { edge: 0, to: 1 }],
                store: None,
            }],
            ..base(0, 0)
        },
        VertexPart {
            locals: vec![c(1)],
            in_edges: vec![InEdge { edge: 0, from: 0 }],
            coeffs: vec![1, 1],
            outputs: vec![OutputSpec {
                sends: vec![OutEdge { edge: 1, to: 2 }],
                store: None,
            }],
            ..base(1, 1)
        },
        VertexPart {
            in_edges: vec![InEdge { edge: 1, from: 1 }],
            coeffs: vec![1],
            outputs: vec![OutputSpec {
                sends: vec![],
                store: Some(c(9)),
            }],
            ..base(2, 2)
        },
    ]
}

#[test]
fn killing_a_node_mid_plan_fails_the_plan_quickly() {
    for mode in [Mode::Coherent, Mode::Incoherent] {
        let (mut nodes, mut coord) = cluster(3);
        let bytes = 1 << 20;
        coord
            .store(vec![
                (
                    0,
                    ChunkRef {
                        stripe: 5,
                        index: 0,
                    },
                    vec![1; bytes],
                ),
                (
                    1,
                    ChunkRef {
                        stripe: 5,
                        index: 1,
                    },
                    vec![2; bytes],
                ),
            ])
            .unwrap();
        coord.install(1, &chain(bytes)).unwrap();
        // It works while every node is alive.
        coord
            .run(1, &[0, 1, 2], mode, Duration::from_secs(20))
            .unwrap();
        let got = coord
            .fetch(
                2,
                ChunkRef {
                    stripe: 5,
                    index: 9,
                },
            )
            .unwrap();
        assert_eq!(got, vec![3u8; bytes]);
        // Nodes 1 and 2 start the plan and wait for node 0, which is killed instead of run.
        let pid = nodes[0].child.id();
        let killer = std::thread::spawn(move || {
            let _ = Command::new("kill")
                .args(["-KILL", &pid.to_string()])
                .status();
        });
        let t0 = Instant::now();
        let err = coord
            .run(1, &[1, 2], mode, Duration::from_secs(120))
            .unwrap_err();
        killer.join().unwrap();
        let took = t0.elapsed();
        assert!(
            took < Duration::from_secs(10),
            "{mode:?}: failing took {took:?}"
        );
        let msg = err.to_string();
        assert!(
            msg.contains("peer 0 lost") || msg.contains("aborted"),
            "{mode:?}: unclear error: {msg}"
        );
        let _ = nodes[0].child.wait();
        nodes.remove(0);
        coord.shutdown_nodes(&[1, 2]).unwrap();
    }
}

#[test]
fn cluster_up_status_down_on_loopback() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().to_str().unwrap();
    let out = Command::new(INEC)
        .args(["cluster", "up", "--nodes", "4", "--dir", d])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("cluster up: 4 nodes"));
    let out = Command::new(INEC)
        .args(["cluster", "status", "--dir", d])
        .output()
        .unwrap();
    assert!(out.status.success());
    assert!(String::from_utf8_lossy(&out.stdout).contains("4/4 nodes up"));
    let again = Command::new(INEC)
        .args(["cluster", "up", "--nodes", "4", "--dir", d])
        .output()
        .unwrap();
    assert!(
        !again.status.success(),
        "a second cluster in the same directory is refused"
    );
    let out = Command::new(INEC)
        .args(["cluster", "down", "--dir", d])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = Command::new(INEC)
        .args(["cluster", "status", "--dir", d])
        .output()
        .unwrap();
    assert!(!out.status.success(), "no cluster after down");
}
