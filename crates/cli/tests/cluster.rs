//! Real `inec node` processes on port 0 (readiness line on stdout, never a fixed sleep):
//! every scheme's plans executed over TCP equal the simulator's bytes in both modes; a relay
//! killed mid-plan makes the plan fail quickly with a clear error; `inec cluster up|status|down`
//! (and a failed `up` leaves nothing running).

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use engine::testing::check_code;
use engine::PlanRunner;
use engine::{ChunkRef, InEdge, Mode, NodeId, OutEdge, OutputSpec, VertexPart, RUNNER_BASE};
use graph::paper::PAPER_CODES;

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

fn cluster(n: usize) -> (Vec<Node>, PlanRunner) {
    let nodes: Vec<Node> = (0..n).map(|i| start_node(i as NodeId)).collect();
    let addrs: Vec<(NodeId, String)> = nodes
        .iter()
        .enumerate()
        .map(|(i, n)| (i as NodeId, n.addr.clone()))
        .collect();
    let mut runner = PlanRunner::tcp(RUNNER_BASE, &addrs).unwrap();
    runner.introduce(&addrs).unwrap();
    (nodes, runner)
}

fn shutdown(nodes: Vec<Node>, runner: &mut PlanRunner) {
    let ids: Vec<NodeId> = (0..nodes.len() as NodeId).collect();
    runner.shutdown_nodes(&ids).unwrap();
    for mut n in nodes {
        let status = n.child.wait().unwrap();
        assert!(status.success(), "node exited with {status}");
    }
}

/// Every scheme's encode and every recoverable loss pattern of the paper's configurations.
#[test]
fn plans_over_tcp_between_node_processes_match_the_simulator() {
    let (nodes, mut runner) = cluster(17);
    let mut runs = 0;
    for (i, code) in PAPER_CODES.iter().enumerate() {
        let code: codes::Code = code.parse().unwrap();
        let count = check_code(&mut runner, code, 100, usize::MAX, 10 * i as u64)
            .unwrap_or_else(|e| panic!("{e}"));
        eprintln!(
            "{code}: {} plans, {} runs over TCP",
            count.plans, count.runs
        );
        runs += count.runs;
    }
    assert!(runs > 40_000);
    shutdown(nodes, &mut runner);
}

/// An ECPipe-like chain 0 → 1 → 2 → 3 in slices of 32 KiB: nodes 1 and 2 each add their
/// chunk to what they receive and pass it on, node 3 keeps the result. With `blocker`, node 3
/// also waits for an edge from node 4, which is never asked to run, so the plan cannot
/// finish on its own.
fn relay_chain(chunk_bytes: usize, blocker: bool) -> Vec<VertexPart> {
    let c = |i| ChunkRef {
        stripe: 5,
        index: i,
    };
    let base = |vertex: usize, node: NodeId| VertexPart {
        vertex,
        node,
        chunk_bytes,
        slice_bytes: 32 << 10,
        local: vec![],
        inputs: vec![],
        coeffs: vec![],
        outputs: vec![],
    };
    let send = |edge: usize, to: NodeId| OutputSpec {
        sends: vec![OutEdge { edge, to }],
        store: None,
    };
    let mut parts = vec![
        VertexPart {
            local: vec![c(0)],
            coeffs: vec![1],
            outputs: vec![send(0, 1)],
            ..base(0, 0)
        },
        VertexPart {
            local: vec![c(1)],
            inputs: vec![InEdge { edge: 0, from: 0 }],
            coeffs: vec![1, 1],
            outputs: vec![send(1, 2)],
            ..base(1, 1)
        },
        VertexPart {
            local: vec![c(2)],
            inputs: vec![InEdge { edge: 1, from: 1 }],
            coeffs: vec![1, 1],
            outputs: vec![send(2, 3)],
            ..base(2, 2)
        },
        VertexPart {
            inputs: vec![InEdge { edge: 2, from: 2 }],
            coeffs: vec![1],
            outputs: vec![OutputSpec {
                sends: vec![],
                store: Some(c(9)),
            }],
            ..base(3, 3)
        },
    ];
    if blocker {
        parts[3].inputs.push(InEdge { edge: 3, from: 4 });
        parts[3].coeffs.push(1);
        parts.push(VertexPart {
            local: vec![c(4)],
            coeffs: vec![1],
            outputs: vec![send(3, 3)],
            ..base(4, 4)
        });
    }
    parts
}

/// A relay of a large sliced plan is killed while the plan is under way: the plan fails with
/// an error naming the lost node, within a bounded time, in both modes.
#[test]
fn killing_a_relay_mid_plan_fails_the_plan_quickly() {
    let bytes = 16 << 20;
    for mode in [Mode::Coherent, Mode::Incoherent] {
        let (mut nodes, mut runner) = cluster(5);
        let stored = (0..5u32)
            .map(|i| {
                (
                    i as NodeId,
                    ChunkRef {
                        stripe: 5,
                        index: i,
                    },
                    vec![1u8 << i; bytes],
                )
            })
            .collect();
        runner.store(stored).unwrap();
        runner.install(1, &relay_chain(bytes, false)).unwrap();
        runner.install(2, &relay_chain(bytes, true)).unwrap();
        // The chain streams end to end while every node is alive.
        runner
            .run(1, &[0, 1, 2, 3], mode, Duration::from_secs(60))
            .unwrap();
        let got = runner
            .fetch(
                3,
                ChunkRef {
                    stripe: 5,
                    index: 9,
                },
            )
            .unwrap();
        assert_eq!(got, vec![1 ^ 2 ^ 4; bytes]);
        // Run the blocked plan; once the source has handed every slice over, the plan is
        // under way and cannot finish: kill relay 2 then.
        let pid = nodes[2].child.id();
        let mut killed_at = None;
        let err = runner
            .run_observed(
                2,
                &[0, 1, 2, 3],
                mode,
                1,
                1,
                Duration::from_secs(120),
                &mut |node| {
                    if node == 0 && killed_at.is_none() {
                        let _ = Command::new("kill")
                            .args(["-KILL", &pid.to_string()])
                            .status();
                        killed_at = Some(Instant::now());
                    }
                },
            )
            .unwrap_err();
        let killed_at = killed_at.expect("the source finished its part before the failure");
        let took = killed_at.elapsed();
        assert!(
            took < Duration::from_secs(10),
            "{mode:?}: failing took {took:?}"
        );
        let msg = err.to_string();
        assert!(
            // The relay's loss reaches the runner as the engine's "peer 2 lost", an abort, or
            // (when the next hop's send sees it first) the transport's "peer 2 is unreachable".
            msg.contains("peer 2 lost")
                || msg.contains("aborted")
                || msg.contains("peer 2 is unreachable"),
            "{mode:?}: unclear error: {msg}"
        );
        let _ = nodes[2].child.wait();
        nodes.remove(2);
        runner.shutdown_nodes(&[0, 1, 3, 4]).unwrap();
    }
}

/// `cluster up` that fails part-way stops the nodes it started and leaves no state behind.
#[test]
fn a_failed_cluster_up_leaves_no_nodes() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().to_str().unwrap();
    // Node 2's log cannot be created (a directory has its name): up fails after starting
    // nodes 0 and 1.
    std::fs::create_dir(dir.path().join("node-2.log")).unwrap();
    let out = Command::new(INEC)
        .args(["cluster", "up", "--nodes", "4", "--dir", d])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("stopped the nodes it had started"), "{err}");
    let pids: Vec<u32> = err
        .split("pids [")
        .nth(1)
        .and_then(|r| r.split(']').next())
        .unwrap_or_else(|| panic!("no pids in {err}"))
        .split(", ")
        .map(|p| p.trim().parse().unwrap())
        .collect();
    assert_eq!(pids.len(), 2, "{err}");
    for pid in pids {
        assert!(
            !std::path::Path::new(&format!("/proc/{pid}")).exists(),
            "node pid {pid} still exists"
        );
    }
    assert!(!dir.path().join("cluster.json").exists());
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
    assert!(dir.path().join("node-3.log").exists());
    let out = Command::new(INEC)
        .args(["cluster", "down", "--dir", d])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // Its help says it removes the state and the logs, and it does.
    assert!(
        !dir.path().exists(),
        "left behind: {:?}",
        std::fs::read_dir(dir.path())
            .map(|r| r.map(|e| e.unwrap().file_name()).collect::<Vec<_>>())
    );
    let help = Command::new(INEC)
        .args(["cluster", "down", "--help"])
        .output()
        .unwrap();
    let help = String::from_utf8_lossy(&help.stdout);
    assert!(
        help.contains("node logs") && help.contains("--keep-logs"),
        "{help}"
    );
    let out = Command::new(INEC)
        .args(["cluster", "status", "--dir", d])
        .output()
        .unwrap();
    assert!(!out.status.success(), "no cluster after down");

    // With --keep-logs the logs stay.
    std::fs::create_dir(dir.path()).unwrap();
    let out = Command::new(INEC)
        .args(["cluster", "up", "--nodes", "2", "--dir", d])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = Command::new(INEC)
        .args(["cluster", "down", "--dir", d, "--keep-logs"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("node logs kept"));
    assert!(dir.path().join("node-0.log").exists() && dir.path().join("node-1.log").exists());
    assert!(!dir.path().join("cluster.json").exists());
}
