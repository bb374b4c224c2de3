//! `inec bench primitives`: the INEC paper's encode/decode suite (§IV-A, Figures 6–8) run by
//! the engine on a cluster of nodes, coherent and incoherent alternating, with the α-β model's
//! prediction beside every measurement.
//!
//! What is measured, per (scheme, operation, code, chunk size, mode):
//! - **latency**: one operation at a time, from the plan runner's `start` requests to the last
//!   node's `done` (p50 over `--reps`); before each run the output chunks are deleted, after it
//!   they are fetched and compared with the original stripe (every decoded chunk is checked).
//! - **bandwidth**, window-based as in the paper: `--window` operations in flight; encode
//!   counts m·chunk_bytes per operation (the parity generated, = m·size/(k·time) for a file of
//!   k chunks), decode chunk_bytes per operation (the chunk rebuilt). Reported in MB/s
//!   (10^6 bytes per second), as the paper's figures are.
//! - **model**: the `graph` crate's α-β prediction with constants the benchmark measures first
//!   on the same cluster (per-hop latency, link bandwidth, kernel rates), plus the measured cost
//!   of one runner round trip (every measured latency includes one).

mod svg;

use std::collections::BTreeMap;
use std::fs;
use std::io::Write;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use crate::stats::median;
use crate::{BenchError, Result};
use codes::{Code, Codec};
use engine::{
    runner_id, BufferPool, ChunkRef, InEdge, LocalNode, Mode, NodeId, OutEdge, OutputSpec,
    PlanRunner, VertexPart,
};
use graph::{account, build, model, sim, Plan, PlanSpec, Request, Scheme, Target};
use serde::Serialize;

#[derive(clap::Args, Debug, Clone)]
pub struct PrimitivesArgs {
    /// Use the cluster started by `inec cluster up` with this state directory; without it the
    /// benchmark starts its own `inec node` processes on loopback (threads of this process
    /// only when it does not run from the `inec` binary).
    #[arg(long)]
    pub dir: Option<PathBuf>,
    /// The nodes of `--dir`'s cluster, filled in by the `inec` binary, which owns the state file.
    #[arg(skip)]
    pub cluster: Option<ClusterAddrs>,
    /// A small subset: RS(3,2), RS(6,3), LRC(6,2,2); 128 B, 4, 16, 64 KiB and 1 MiB; 5 reps.
    #[arg(long)]
    pub quick: bool,
    /// A code to run, rs:K,M or lrc:K,L,R (repeat the flag for several: `--code rs:6,3 --code
    /// lrc:6,2,2`); default the paper's six. A code needing more nodes (n + 1) than `--dir`'s
    /// cluster has is skipped, and the run says so.
    #[arg(long = "code", value_name = "CODE")]
    pub codes: Vec<String>,
    /// A chunk size (repeat the flag for several), e.g. 4KiB; default 128 B to 16 MiB, powers
    /// of two.
    #[arg(long = "chunk-bytes", value_name = "SIZE", value_delimiter = ',',
          value_parser = codes::size::parse_size)]
    pub chunk_bytes: Vec<usize>,
    /// Latency repetitions per mode.
    #[arg(long)]
    pub reps: Option<usize>,
    /// Operations in flight in the bandwidth benchmark.
    #[arg(long, default_value_t = 8)]
    pub window: usize,
    /// ECPipe slice size (the paper fixes 32 KiB).
    #[arg(long, value_name = "SIZE", default_value = "32KiB", value_parser = codes::size::parse_size)]
    pub ecpipe_slice_bytes: usize,
    /// Slice size for every other scheme (default: the whole chunk, one slice per edge, as
    /// the schemes are defined). Both modes always use the same slices.
    #[arg(long, value_name = "SIZE", value_parser = codes::size::parse_size)]
    pub slice_bytes: Option<usize>,
    /// Print JSON lines instead of the table.
    #[arg(long)]
    pub json: bool,
    /// Also measure the raw transport: plain sends of 1 MiB buffers between two node processes
    /// (nodes 1 and 2 of `--dir`'s cluster, or two `inec node` processes started for it)
    /// against `iperf3 -l 1M` single-stream on loopback, in the same run.
    #[arg(long)]
    pub raw: bool,
    /// Only the raw transport measurement.
    #[arg(long)]
    pub raw_only: bool,
    /// Where the table, JSON lines and SVG plots go.
    #[arg(long, default_value = "reports/primitives")]
    pub out: PathBuf,
    /// The `inec` executable for the node processes it starts (the caller passes its own
    /// path; not a flag).
    #[arg(skip)]
    pub exe: Option<PathBuf>,
    /// Per-operation timeout, seconds.
    #[arg(long, default_value_t = 60)]
    pub timeout_s: u64,
}

/// The nodes of a running cluster and how its transport is named in the results.
#[derive(Clone, Debug, Default)]
pub struct ClusterAddrs {
    pub nodes: Vec<(NodeId, String)>,
    pub transport: String,
}

const QUICK_CODES: [&str; 3] = ["rs:3,2", "rs:6,3", "lrc:6,2,2"];
const QUICK_SIZES: [usize; 5] = [128, 4 << 10, 16 << 10, 64 << 10, 1 << 20];

/// One line of results.
#[derive(Clone, Debug, Serialize)]
pub struct Row {
    pub scheme: String,
    pub op: String,
    pub code: String,
    pub k: usize,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub m: Option<usize>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub l: Option<usize>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub r: Option<usize>,
    pub chunk_bytes: usize,
    pub slice_bytes: usize,
    pub mode: String,
    pub latency_us_p50: f64,
    /// MB/s — megabytes (10^6 bytes) per second, not megabits — of parity generated (encode)
    /// or chunks rebuilt (decode). The field name is the one the suite's consumers expect;
    /// `bandwidth_mbytes_per_s` carries the same value under an unambiguous name.
    pub bandwidth_mbps: f64,
    pub bandwidth_mbytes_per_s: f64,
    /// Operations in flight in the bandwidth run.
    pub window: usize,
    /// The α-β model's latency; the same for both modes (see docs/engine.md: the model has no
    /// per-mode β term, the bench measures the modes' difference instead of predicting it).
    pub model_us: f64,
    /// This mode's latency divided by the coherent latency (1 for coherent).
    pub latency_ratio_vs_coherent: f64,
    /// The coherent bandwidth divided by this mode's (1 for coherent).
    pub bandwidth_ratio_coherent_over_this: f64,
    pub kernel: String,
    pub nodes: usize,
    pub transport: String,
}

/// Measured constants for the model.
#[derive(Clone, Debug, Serialize)]
pub struct Calibration {
    pub control_round_trip_us: f64,
    pub hop_latency_us: f64,
    pub link_gbit_s: f64,
    pub xor_gbyte_s: f64,
    pub mul_add_gbyte_s: f64,
}

struct Cluster {
    coord: PlanRunner,
    ids: Vec<NodeId>,
    _local: Vec<LocalNode>,
    /// Node processes this benchmark started (killed when dropped if still running).
    _procs: NodeProcs,
    transport: String,
}

/// `inec node` processes started by the benchmark.
#[derive(Default)]
struct NodeProcs(Vec<std::process::Child>);

impl Drop for NodeProcs {
    fn drop(&mut self) {
        for c in &mut self.0 {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// Starts `inec node` processes with ids `0..n` on loopback; returns them and their
/// addresses (read from each node's readiness line, no fixed sleep).
fn spawn_nodes(exe: &std::path::Path, n: usize) -> Result<(NodeProcs, Vec<(NodeId, String)>)> {
    use std::io::{BufRead, BufReader};
    let mut procs = NodeProcs::default();
    let mut addrs = Vec::new();
    for i in 0..n {
        let mut child = std::process::Command::new(exe)
            .args(["node", "--id", &i.to_string(), "--listen", "127.0.0.1:0"])
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::null())
            .spawn()
            .map_err(BenchError::io("starting inec node"))?;
        let stdout = child.stdout.take().expect("piped");
        procs.0.push(child);
        let mut line = String::new();
        BufReader::new(stdout).read_line(&mut line)?;
        let addr = line
            .split(" ready on ")
            .nth(1)
            .and_then(|r| r.split_whitespace().next())
            .ok_or_else(|| BenchError::Cluster(format!("node {i}: bad readiness line {line:?}")))?;
        addrs.push((i as NodeId, addr.to_string()));
    }
    Ok((procs, addrs))
}

fn connect(args: &PrimitivesArgs, need: usize) -> Result<Cluster> {
    if let Some(dir) = &args.dir {
        let state = args.cluster.as_ref().ok_or_else(|| {
            BenchError::Cluster(format!(
                "--dir {}: the cluster's nodes are read by the inec binary",
                dir.display()
            ))
        })?;
        if state.nodes.len() < need {
            return Err(BenchError::Cluster(format!(
                "the cluster has {} nodes; this suite needs {need} (an agent + n chunks)",
                state.nodes.len()
            )));
        }
        let addrs = state.nodes.clone();
        let coord = PlanRunner::tcp(runner_id(), &addrs)?;
        let transport = state.transport.clone();
        return Ok(Cluster {
            coord,
            ids: addrs.iter().map(|(i, _)| *i).collect(),
            _local: Vec::new(),
            _procs: NodeProcs::default(),
            transport,
        });
    }
    if let Some(exe) = &args.exe {
        let (procs, addrs) = spawn_nodes(exe, need)?;
        let mut coord = PlanRunner::tcp(runner_id(), &addrs)?;
        coord.introduce(&addrs)?;
        return Ok(Cluster {
            coord,
            ids: addrs.iter().map(|(i, _)| *i).collect(),
            _local: Vec::new(),
            _procs: procs,
            transport: "tcp-loopback-processes".into(),
        });
    }
    let pool = BufferPool::new();
    let any: SocketAddr = "127.0.0.1:0".parse().unwrap();
    let local: Vec<LocalNode> = (0..need)
        .map(|i| LocalNode::tcp(i as NodeId, any, pool.clone()))
        .collect::<std::io::Result<_>>()?;
    let addrs: Vec<(NodeId, String)> = local
        .iter()
        .enumerate()
        .map(|(i, n)| (i as NodeId, n.addr.unwrap().to_string()))
        .collect();
    let mut coord = PlanRunner::tcp(runner_id(), &addrs)?;
    coord.introduce(&addrs)?;
    Ok(Cluster {
        coord,
        ids: addrs.iter().map(|(i, _)| *i).collect(),
        _local: local,
        _procs: NodeProcs::default(),
        transport: "tcp-loopback-threads".into(),
    })
}

/// Times `template` `reps` times; returns microseconds.
fn time_runs(
    c: &mut Cluster,
    template: u64,
    nodes: &[NodeId],
    reps: usize,
    timeout: Duration,
) -> Result<f64> {
    let mut t = Vec::new();
    for _ in 0..reps {
        let d = c.coord.run(template, nodes, Mode::Coherent, timeout)?;
        t.push(d.as_secs_f64() * 1e6);
    }
    Ok(median(&t))
}

fn simple_part(vertex: usize, node: NodeId, chunk_bytes: usize, slice_bytes: usize) -> VertexPart {
    VertexPart {
        vertex,
        node,
        chunk_bytes,
        slice_bytes,
        local: vec![],
        inputs: vec![],
        coeffs: vec![],
        outputs: vec![],
    }
}

/// One hop 1 → 2 of a chunk of `bytes`, sliced at `slice_bytes`.
fn hop_parts(stripe: u64, bytes: usize, slice_bytes: usize) -> Vec<VertexPart> {
    let c = |i| ChunkRef { stripe, index: i };
    vec![
        VertexPart {
            local: vec![c(0)],
            coeffs: vec![1],
            outputs: vec![OutputSpec {
                sends: vec![OutEdge { edge: 0, to: 2 }],
                store: None,
            }],
            ..simple_part(0, 1, bytes, slice_bytes)
        },
        VertexPart {
            inputs: vec![InEdge { edge: 0, from: 1 }],
            coeffs: vec![1],
            outputs: vec![OutputSpec {
                sends: vec![],
                store: Some(c(1)),
            }],
            ..simple_part(1, 2, bytes, slice_bytes)
        },
    ]
}

fn kernel_rate(f: impl Fn(&[u8], &mut [u8])) -> f64 {
    let src = vec![0x5au8; 1 << 20];
    let mut dst = vec![0xa5u8; 1 << 20];
    let t0 = Instant::now();
    let mut bytes = 0usize;
    while t0.elapsed() < Duration::from_millis(100) {
        f(&src, &mut dst);
        bytes += src.len();
    }
    bytes as f64 / t0.elapsed().as_secs_f64()
}

fn calibrate(c: &mut Cluster, timeout: Duration) -> Result<Calibration> {
    let stripe = 900_000;
    let k = gf::kernel();
    let xor = kernel_rate(|s, d| k.xor(s, d));
    let mul_add = kernel_rate(|s, d| k.mul_add(0x57, s, d));
    // The plan runner's round trip: one node computing a 128-byte copy for itself.
    c.coord.store(vec![
        (1, ChunkRef { stripe, index: 0 }, vec![7u8; 128]),
        (
            1,
            ChunkRef {
                stripe: stripe + 1,
                index: 0,
            },
            vec![7u8; 16 << 20],
        ),
    ])?;
    let local = vec![VertexPart {
        local: vec![ChunkRef { stripe, index: 0 }],
        coeffs: vec![1],
        outputs: vec![OutputSpec {
            sends: vec![],
            store: Some(ChunkRef { stripe, index: 2 }),
        }],
        ..simple_part(0, 1, 128, 128)
    }];
    c.coord.install(stripe, &local)?;
    let ctl = time_runs(c, stripe, &[1], 30, timeout)?;
    c.coord.install(stripe + 1, &hop_parts(stripe, 128, 128))?;
    let small = time_runs(c, stripe + 1, &[1, 2], 30, timeout)?;
    let hop = (small - ctl).max(1.0);
    c.coord
        .install(stripe + 2, &hop_parts(stripe + 1, 16 << 20, 1 << 20))?;
    let big = time_runs(c, stripe + 2, &[1, 2], 7, timeout)?;
    let link = (16u64 << 20) as f64 / ((big - ctl - hop).max(1.0) * 1e-6);
    Ok(Calibration {
        control_round_trip_us: ctl,
        hop_latency_us: hop,
        link_gbit_s: link * 8.0 / 1e9,
        xor_gbyte_s: xor / 1e9,
        mul_add_gbyte_s: mul_add / 1e9,
    })
}

fn net_of(cal: &Calibration) -> sim::NetConfig {
    let mut net = sim::NetConfig::ideal(cal.link_gbit_s * 1e9 / 8.0, cal.hop_latency_us * 1e-6);
    net.message_overhead_s = 0.0;
    net.xor_bytes_s = cal.xor_gbyte_s * 1e9;
    net.mul_add_bytes_s = cal.mul_add_gbyte_s * 1e9;
    net
}

/// The (scheme, operation) pairs of the paper's figures for a code.
fn cases(code: Code) -> Vec<(Scheme, bool)> {
    let base = match code {
        Code::Rs { .. } => Scheme::Rs,
        Code::Lrc { .. } => Scheme::Lrc,
    };
    vec![
        (base, true),
        (Scheme::Triec, true),
        (base, false),
        (Scheme::Ppr, false),
        (Scheme::Ecpipe, false),
        (Scheme::Triec, false),
    ]
}

/// The chunks a plan leaves, as (node, chunk index).
fn plan_stores(plan: &Plan) -> Vec<(NodeId, usize)> {
    plan.vertices
        .iter()
        .flat_map(|v| v.stores.iter().map(move |&c| (v.node as NodeId, c)))
        .filter(|(node, c)| {
            // Chunks the vertex already held are not outputs.
            !plan
                .vertices
                .iter()
                .any(|v| v.node as NodeId == *node && v.local.contains(c))
        })
        .collect()
}

#[allow(clippy::too_many_arguments)]
fn measure_case(
    c: &mut Cluster,
    args: &PrimitivesArgs,
    cal: &Calibration,
    code: Code,
    scheme: Scheme,
    encode: bool,
    chunk_bytes: usize,
    stripe: u64,
    chunks: &[Vec<u8>],
    reps: usize,
) -> Result<Vec<Row>> {
    let request = if encode {
        Request::Encode
    } else {
        Request::Repair {
            lost: vec![0],
            target: Target::Node(0),
        }
    };
    let mut spec = PlanSpec::new(scheme, code, request, chunk_bytes);
    if scheme == Scheme::Ecpipe {
        spec.slice_bytes = Some(args.ecpipe_slice_bytes.min(chunk_bytes));
    } else if let Some(s) = args.slice_bytes {
        spec.slice_bytes = Some(s.min(chunk_bytes));
    }
    let plan = build(&spec)?;
    let out_stripe = stripe + 1;
    let mut parts = plan.parts(stripe)?;
    for p in &mut parts {
        for o in &mut p.outputs {
            if let Some(ch) = &mut o.store {
                ch.stripe = out_stripe;
            }
        }
    }
    let template = stripe + 7;
    c.coord.install(template, &parts)?;
    let nodes = plan.nodes();
    let stores = plan_stores(&plan);
    if stores.is_empty() {
        return Err(BenchError::Cluster(format!(
            "{scheme} {code}: the plan stores nothing"
        )));
    }
    let out_refs: Vec<(NodeId, ChunkRef)> = stores
        .iter()
        .map(|&(n, ch)| {
            (
                n,
                ChunkRef {
                    stripe: out_stripe,
                    index: ch as u32,
                },
            )
        })
        .collect();
    let timeout = Duration::from_secs(args.timeout_s);
    let modes = [Mode::Coherent, Mode::Incoherent];
    let mut lat: BTreeMap<Mode, Vec<f64>> = BTreeMap::new();
    for rep in 0..reps {
        // Alternate which mode goes first, so drift hits both alike.
        let order = if rep % 2 == 0 {
            modes
        } else {
            [modes[1], modes[0]]
        };
        for mode in order {
            c.coord.delete(out_refs.clone())?;
            let d = c.coord.run(template, &nodes, mode, timeout)?;
            lat.entry(mode).or_default().push(d.as_secs_f64() * 1e6);
            for (&(node, index), r) in stores.iter().zip(&out_refs) {
                let got = c.coord.fetch(node, r.1)?;
                if got != chunks[index] {
                    return Err(BenchError::Check(format!(
                        "{scheme} {code} {} {chunk_bytes} B {mode:?}: chunk {index} on node {node} is wrong",
                        if encode { "encode" } else { "decode" }
                    )));
                }
            }
        }
    }
    // Window-based bandwidth, alternating modes in two halves. Each half runs at least four
    // windows; the window shrinks for large chunks so that one half moves at most ~512 MiB.
    let per_op_bytes = if encode {
        chunk_bytes * code.parity_count()
    } else {
        chunk_bytes
    };
    let window = args
        .window
        .min(((512usize << 20) / (4 * per_op_bytes.max(1))).max(1))
        .max(1);
    let half_ops = ((64usize << 20) / per_op_bytes.max(1)).clamp(4 * window, 256.max(4 * window));
    let mut bw: BTreeMap<Mode, f64> = BTreeMap::new();
    for round in 0..2 {
        for mode in if round == 0 {
            modes
        } else {
            [modes[1], modes[0]]
        } {
            c.coord.delete(out_refs.clone())?;
            let st = c
                .coord
                .run_many(template, &nodes, mode, half_ops, window, timeout * 4)?;
            let mbytes_s = (per_op_bytes * st.ops) as f64 / st.elapsed.as_secs_f64() / 1e6;
            *bw.entry(mode).or_insert(0.0) += mbytes_s / 2.0;
            // Every operation wrote the same outputs; the last ones must be right.
            for (&(node, index), r) in stores.iter().zip(&out_refs) {
                let got = c.coord.fetch(node, r.1)?;
                if got != chunks[index] {
                    return Err(BenchError::Check(format!(
                        "{scheme} {code} {} {chunk_bytes} B {mode:?} bandwidth run: chunk {index} on node {node} is wrong",
                        if encode { "encode" } else { "decode" }
                    )));
                }
            }
        }
    }
    let net = net_of(cal);
    let pred = model::predict(&plan, &account(&plan), &net);
    let model_us = pred.time_s * 1e6 + cal.control_round_trip_us;
    let (k, m, l, r) = match code {
        Code::Rs { k, m, .. } => (k, Some(m), None, None),
        Code::Lrc { k, l, r } => (k, None, Some(l), Some(r)),
    };
    let coh_lat = median(&lat[&Mode::Coherent]);
    let coh_bw = bw[&Mode::Coherent];
    let mut rows = Vec::new();
    for mode in modes {
        let l50 = median(&lat[&mode]);
        rows.push(Row {
            scheme: scheme.name().to_string(),
            op: if encode { "encode" } else { "decode" }.into(),
            code: code.to_string(),
            k,
            m,
            l,
            r,
            chunk_bytes,
            slice_bytes: plan.slice_bytes,
            mode: mode.name().into(),
            latency_us_p50: l50,
            bandwidth_mbps: bw[&mode],
            bandwidth_mbytes_per_s: bw[&mode],
            window,
            model_us,
            latency_ratio_vs_coherent: l50 / coh_lat,
            bandwidth_ratio_coherent_over_this: coh_bw / bw[&mode],
            kernel: gf::kernel_name().into(),
            nodes: c.ids.len(),
            transport: c.transport.clone(),
        });
    }
    Ok(rows)
}

/// The chunk the raw measurement sends per operation, in 1 MiB slices (one frame each).
const RAW_CHUNK_BYTES: usize = 32 << 20;
const RAW_SLICE_BYTES: usize = 1 << 20;

/// Two node processes for the raw measurement and the ids of sender and receiver: nodes 1
/// and 2 of `--dir`'s cluster, or two `inec node` processes started for it.
fn raw_cluster(args: &PrimitivesArgs) -> Result<(Cluster, NodeId, NodeId)> {
    if args.dir.is_some() {
        return Ok((connect(args, 3)?, 1, 2));
    }
    let exe = args.exe.as_ref().ok_or_else(|| {
        BenchError::Settings(
            "--raw needs node processes: run it as `inec bench primitives` or give --dir".into(),
        )
    })?;
    let (procs, addrs) = spawn_nodes(exe, 2)?;
    let mut coord = PlanRunner::tcp(runner_id(), &addrs)?;
    coord.introduce(&addrs)?;
    Ok((
        Cluster {
            coord,
            ids: vec![0, 1],
            _local: Vec::new(),
            _procs: procs,
            transport: "tcp-loopback-processes".into(),
        },
        0,
        1,
    ))
}

/// Installs the raw plan: `from` sends a stored chunk unchanged (straight from its store, in
/// 1 MiB frames) to `to`, which receives every frame and keeps nothing.
fn raw_setup(c: &mut Cluster, from: NodeId, to: NodeId, template: u64) -> Result<()> {
    let chunk = ChunkRef {
        stripe: template,
        index: 0,
    };
    c.coord
        .store(vec![(from, chunk, vec![0x3cu8; RAW_CHUNK_BYTES])])?;
    let parts = vec![
        VertexPart {
            local: vec![chunk],
            coeffs: vec![1],
            outputs: vec![OutputSpec {
                sends: vec![OutEdge { edge: 0, to }],
                store: None,
            }],
            ..simple_part(0, from, RAW_CHUNK_BYTES, RAW_SLICE_BYTES)
        },
        VertexPart {
            inputs: vec![InEdge { edge: 0, from }],
            ..simple_part(1, to, RAW_CHUNK_BYTES, RAW_SLICE_BYTES)
        },
    ];
    c.coord.install(template, &parts)?;
    Ok(())
}

/// Engine throughput of the raw plan, Gbit/s, over `total_bytes` (two operations in flight).
fn engine_raw_gbps(
    c: &mut Cluster,
    from: NodeId,
    to: NodeId,
    template: u64,
    total_bytes: usize,
    timeout: Duration,
) -> Result<f64> {
    let ops = (total_bytes / RAW_CHUNK_BYTES).max(2);
    let st = c
        .coord
        .run_many(template, &[from, to], Mode::Coherent, ops, 2, timeout)?;
    Ok((ops * RAW_CHUNK_BYTES) as f64 * 8.0 / st.elapsed.as_secs_f64() / 1e9)
}

/// `iperf3` single stream over loopback, Gbit/s received.
fn iperf3_gbps(seconds: u32) -> Result<f64> {
    let port = harness::process::free_port(&mut Vec::new())?;
    let mut server = std::process::Command::new("iperf3")
        .args([
            "-s",
            "-1",
            "--forceflush",
            "-B",
            "127.0.0.1",
            "-p",
            &port.to_string(),
        ])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .map_err(BenchError::io(
            "starting iperf3 (install it: apt-get install iperf3)",
        ))?;
    // Readiness: the server's "Server listening" line (one client only: it is one-off).
    let ready = {
        use std::io::{BufRead, BufReader};
        let stdout = server.stdout.take().expect("piped");
        let mut lines = BufReader::new(stdout).lines();
        let ok = lines.any(|l| l.is_ok_and(|l| l.contains("Server listening")));
        // Keep draining the server's output so that it never blocks on a full pipe.
        std::thread::spawn(move || lines.for_each(drop));
        ok
    };
    let out = if ready {
        std::process::Command::new("iperf3")
            .args([
                "-c",
                "127.0.0.1",
                "-p",
                &port.to_string(),
                "-t",
                &seconds.to_string(),
                "-l",
                "1M",
                "-J",
            ])
            .output()
    } else {
        Err(std::io::Error::other(
            "the iperf3 server exited before listening",
        ))
    };
    let _ = server.kill();
    let _ = server.wait();
    let out = out.map_err(BenchError::io("running the iperf3 client"))?;
    if !out.status.success() {
        return Err(BenchError::Iperf(format!(
            "failed: {}",
            String::from_utf8_lossy(&out.stdout)
        )));
    }
    let v: serde_json::Value = serde_json::from_slice(&out.stdout)?;
    v["end"]["sum_received"]["bits_per_second"]
        .as_f64()
        .map(|b| b / 1e9)
        .ok_or_else(|| {
            BenchError::Iperf("its output has no end.sum_received.bits_per_second".into())
        })
}

#[derive(Serialize)]
struct RawRow {
    raw: bool,
    /// Medians over the rounds.
    iperf3_gbps: f64,
    engine_gbps: f64,
    ratio: f64,
    buffer_bytes: usize,
    iperf3_gbps_rounds: Vec<f64>,
    engine_gbps_rounds: Vec<f64>,
    transport: String,
    /// /proc/loadavg before the measurement (the machine may be shared).
    load_average: String,
}

/// Rounds of the raw measurement, engine and iperf3 alternating.
const RAW_ROUNDS: usize = 5;

pub fn run(args: PrimitivesArgs) -> Result<()> {
    fs::create_dir_all(&args.out)?;
    let mut jsonl = fs::File::create(args.out.join("results.jsonl"))?;
    if args.raw || args.raw_only {
        let load = crate::host::load_average();
        let (mut rc, from, to) = raw_cluster(&args)?;
        let template = 950_000;
        let timeout = Duration::from_secs(args.timeout_s);
        raw_setup(&mut rc, from, to, template)?;
        // Warm up (connections, pools, socket buffers); size the rounds to about 1.5 s each
        // at the warm-up's rate (128 MiB to 2 GiB), so a rate-limited cluster is not slow.
        let warm = engine_raw_gbps(&mut rc, from, to, template, 128 << 20, timeout)?;
        let round_bytes = ((warm * 1e9 / 8.0 * 1.5) as usize).clamp(128 << 20, 2 << 30);
        // Alternate which goes first, so that drift and other load hit both alike.
        let mut e = Vec::new();
        let mut p = Vec::new();
        for round in 0..RAW_ROUNDS {
            if round % 2 == 1 {
                p.push(iperf3_gbps(2)?);
            }
            e.push(engine_raw_gbps(
                &mut rc,
                from,
                to,
                template,
                round_bytes,
                timeout,
            )?);
            if round % 2 == 0 {
                p.push(iperf3_gbps(2)?);
            }
        }
        rc.coord.delete(vec![(
            from,
            ChunkRef {
                stripe: template,
                index: 0,
            },
        )])?;
        if args.dir.is_none() {
            let ids = rc.ids.clone();
            rc.coord.shutdown_nodes(&ids)?;
        }
        let (eg, ig) = (median(&e), median(&p));
        let row = RawRow {
            raw: true,
            iperf3_gbps: ig,
            engine_gbps: eg,
            ratio: eg / ig,
            buffer_bytes: RAW_SLICE_BYTES,
            iperf3_gbps_rounds: p,
            engine_gbps_rounds: e,
            transport: rc.transport.clone(),
            load_average: load,
        };
        let line = serde_json::to_string(&row)?;
        writeln!(jsonl, "{line}")?;
        if args.json {
            outln!("{line}")?;
        } else {
            outln!(
                "raw transport ({}), one stream, medians of {RAW_ROUNDS} alternating rounds: engine {eg:.1} Gbit/s (1 MiB frames between two node processes), iperf3 -l 1M {ig:.1} Gbit/s: {:.0}% (load average before: {})",
                rc.transport,
                100.0 * eg / ig,
                row.load_average
            )?;
        }
        if rc.transport != "tcp-loopback-processes" {
            log::warn!(
                "note: the nodes talk over {}, while iperf3 ran on this host's loopback; the \
                 ratio compares the two",
                rc.transport
            );
        }
        drop(rc);
        if args.raw_only {
            return Ok(());
        }
    }
    let code_names: Vec<String> = if !args.codes.is_empty() {
        args.codes.clone()
    } else if args.quick {
        QUICK_CODES.iter().map(|s| s.to_string()).collect()
    } else {
        graph::paper::PAPER_CODES
            .iter()
            .map(|s| s.to_string())
            .collect()
    };
    let mut codes: Vec<Code> = code_names
        .iter()
        .map(|s| s.parse().map_err(BenchError::Code))
        .collect::<Result<_>>()?;
    // On a given cluster, run the codes that fit (an agent + n chunk nodes) and say which
    // were skipped.
    if let Some(cluster) = &args.cluster {
        let have = cluster.nodes.len();
        let (fit, skipped): (Vec<Code>, Vec<Code>) = codes.into_iter().partition(|c| c.n() < have);
        for c in &skipped {
            log::warn!(
                "note: skipped {c}: it needs {} nodes (an agent + {} chunks), the cluster has {have}; \
                 `inec cluster up --nodes {}` runs it",
                c.n() + 1,
                c.n(),
                c.n() + 1
            );
        }
        if fit.is_empty() {
            return Err(BenchError::Cluster(format!(
                "no code fits the cluster's {have} nodes (each needs an agent + n chunk nodes); \
                 start more with `inec cluster up --nodes N`"
            )));
        }
        codes = fit;
    }
    let sizes: Vec<usize> = if !args.chunk_bytes.is_empty() {
        args.chunk_bytes.clone()
    } else if args.quick {
        QUICK_SIZES.to_vec()
    } else {
        (7..=24).map(|p| 1usize << p).collect()
    };
    let reps = args.reps.unwrap_or(if args.quick { 5 } else { 9 });
    let need = codes.iter().map(|c| c.n() + 1).max().unwrap_or(1).max(3);
    let mut c = connect(&args, need)?;
    let cal = calibrate(&mut c, Duration::from_secs(args.timeout_s))?;
    let cal_line = serde_json::to_string(&cal)?;
    writeln!(jsonl, "{{\"calibration\":{cal_line}}}")?;
    if args.json {
        outln!("{{\"calibration\":{cal_line}}}")?;
    } else {
        outln!(
            "# inec bench primitives — kernel {}, {} nodes ({}), {} CPUs",
            gf::kernel_name(),
            c.ids.len(),
            c.transport,
            std::thread::available_parallelism().map_or(0, |n| n.get())
        )?;
        outln!(
            "# calibration: runner round trip {:.0} us, hop {:.0} us, link {:.2} Gbit/s, xor {:.1} GB/s, mul_add {:.1} GB/s",
            cal.control_round_trip_us,
            cal.hop_latency_us,
            cal.link_gbit_s,
            cal.xor_gbyte_s,
            cal.mul_add_gbyte_s
        )?;
        outln!(
            "# bandwidth: MB/s (10^6 bytes/s) of parity generated (encode) or chunk rebuilt (decode), window {} (smaller for large chunks); model_us is the same for both modes",
            args.window
        )?;
        outln!(
            "{:<7} {:<6} {:<11} {:>9} {:<10} {:>11} {:>10} {:>10} {:>9} {:>9}",
            "scheme",
            "op",
            "code",
            "chunk",
            "mode",
            "lat_us_p50",
            "model_us",
            "MB/s(1e6B)",
            "lat×",
            "bw×"
        )?;
    }
    let mut rows = Vec::new();
    for (ci, &code) in codes.iter().enumerate() {
        let codec = Codec::new(code);
        for (si, &size) in sizes.iter().enumerate() {
            let stripe = 1_000_000 * (ci as u64 + 1) + 1000 * si as u64;
            let chunks = sim::random_stripe(&codec, size, stripe)?;
            c.coord.store_stripe(stripe, &chunks, code.k())?;
            for (scheme, encode) in cases(code) {
                let rs = measure_case(
                    &mut c, &args, &cal, code, scheme, encode, size, stripe, &chunks, reps,
                )?;
                for r in &rs {
                    let line = serde_json::to_string(r)?;
                    writeln!(jsonl, "{line}")?;
                    if args.json {
                        outln!("{line}")?;
                    } else {
                        outln!(
                            "{:<7} {:<6} {:<11} {:>9} {:<10} {:>11.1} {:>10.1} {:>10.1} {:>9.2} {:>9.2}",
                            r.scheme,
                            r.op,
                            r.code,
                            r.chunk_bytes,
                            r.mode,
                            r.latency_us_p50,
                            r.model_us,
                            r.bandwidth_mbps,
                            r.latency_ratio_vs_coherent,
                            r.bandwidth_ratio_coherent_over_this
                        )?;
                    }
                }
                rows.extend(rs);
            }
            // Free the stripe's chunks on the nodes.
            let mut del = Vec::new();
            for i in 0..code.n() {
                let ch = |s| ChunkRef {
                    stripe: s,
                    index: i as u32,
                };
                del.push(((i + 1) as NodeId, ch(stripe)));
                del.push((0, ch(stripe)));
                del.push((0, ch(stripe + 1)));
                del.push(((i + 1) as NodeId, ch(stripe + 1)));
            }
            c.coord.delete(del)?;
        }
    }
    write_markdown(&args, &cal, &rows)?;
    svg::write_figures(&args.out, &rows)?;
    if !args.json {
        outln!(
            "# wrote {}/results.jsonl, table.md and SVG figures",
            args.out.display()
        )?;
    }
    if args.dir.is_none() {
        let ids = c.ids.clone();
        c.coord.shutdown_nodes(&ids)?;
    }
    Ok(())
}

fn write_markdown(args: &PrimitivesArgs, cal: &Calibration, rows: &[Row]) -> Result<()> {
    let mut s = String::new();
    s.push_str("# Primitive benchmark\n\n");
    s.push_str(&format!(
        "Kernel {}; {} CPUs; transport {}; calibration: runner round trip {:.0} µs, hop {:.0} µs, link {:.2} Gbit/s, xor {:.1} GB/s, mul_add {:.1} GB/s. Bandwidth counts parity generated (encode) or chunks rebuilt (decode), in MB/s (10^6 bytes per second), window {} (smaller for large chunks). The model's latency has no per-mode term: it is the same for both modes.\n\n",
        gf::kernel_name(),
        std::thread::available_parallelism().map_or(0, |n| n.get()),
        rows.first().map_or("-", |r| r.transport.as_str()),
        cal.control_round_trip_us,
        cal.hop_latency_us,
        cal.link_gbit_s,
        cal.xor_gbyte_s,
        cal.mul_add_gbyte_s,
        args.window
    ));
    s.push_str("| scheme | op | code | chunk bytes | coherent µs | incoherent µs | latency × | coherent MB/s (10^6 B/s) | incoherent MB/s (10^6 B/s) | bandwidth × | model µs |\n");
    s.push_str("| --- | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n");
    for pair in rows.chunks(2) {
        let (co, inc) = (&pair[0], &pair[1]);
        s.push_str(&format!(
            "| {} | {} | {} | {} | {:.1} | {:.1} | {:.2} | {:.1} | {:.1} | {:.2} | {:.1} |\n",
            co.scheme,
            co.op,
            co.code,
            co.chunk_bytes,
            co.latency_us_p50,
            inc.latency_us_p50,
            inc.latency_us_p50 / co.latency_us_p50,
            co.bandwidth_mbps,
            inc.bandwidth_mbps,
            co.bandwidth_mbps / inc.bandwidth_mbps,
            co.model_us
        ));
    }
    fs::write(args.out.join("table.md"), s)?;
    Ok(())
}
