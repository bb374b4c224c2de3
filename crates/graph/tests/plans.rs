//! Every scheme, every code of the papers, every loss pattern: the plans rebuild exactly the
//! lost chunks (or the codec's parity), move the bytes the theory says, and take the time the
//! closed forms say.

use std::collections::BTreeMap;

use codes::{Code, Codec};
use graph::sim::{simulate_and_check, NetConfig};
use graph::{account, build, Operation, PlanError, PlanSpec, Request, Scheme, Target};

const CODES: [&str; 6] = [
    "rs:3,2",
    "rs:6,3",
    "rs:12,4",
    "lrc:4,2,2",
    "lrc:6,2,2",
    "lrc:12,2,2",
];

fn code(s: &str) -> Code {
    s.parse().unwrap()
}

fn schemes(code: Code) -> Vec<Scheme> {
    let own = match code {
        Code::Rs { .. } => Scheme::Rs,
        Code::Lrc { .. } => Scheme::Lrc,
    };
    vec![own, Scheme::Ppr, Scheme::Ecpipe, Scheme::Triec]
}

fn repair(scheme: Scheme, code: Code, lost: &[usize], chunk_bytes: usize) -> PlanSpec {
    let request = Request::Repair {
        lost: lost.to_vec(),
        target: Target::Node(0),
    };
    PlanSpec::new(scheme, code, request, chunk_bytes)
}

/// Rank of the surviving chunks' generator rows, computed here (not by the codec).
fn survivors_have_full_rank(code: Code, lost: &[usize]) -> bool {
    let (k, n) = (code.k(), code.n());
    let g = code.generator();
    let mut rows: Vec<Vec<u8>> = (0..n)
        .filter(|i| !lost.contains(i))
        .map(|i| g[i * k..(i + 1) * k].to_vec())
        .collect();
    let mut rank = 0;
    for col in 0..k {
        let Some(p) = (rank..rows.len()).find(|&r| rows[r][col] != 0) else {
            continue;
        };
        rows.swap(rank, p);
        let inv = gf::field::inv(rows[rank][col]);
        let pivot: Vec<u8> = rows[rank].iter().map(|&x| gf::field::mul(x, inv)).collect();
        for (r, row) in rows.iter_mut().enumerate() {
            if r != rank && row[col] != 0 {
                let f = row[col];
                for (x, &p) in row.iter_mut().zip(&pivot) {
                    *x ^= gf::field::mul(f, p);
                }
            }
        }
        rows[rank] = pivot;
        rank += 1;
    }
    rank == k
}

#[test]
fn every_loss_pattern_of_every_scheme_rebuilds_the_lost_chunks() {
    let net = NetConfig::ideal(1e9, 1e-6);
    let mut checked = 0usize;
    for name in CODES {
        let code = code(name);
        let n = code.n();
        let codec = Codec::new(code);
        let generator = code.generator();
        let mut recoverable_by_size = vec![0usize; n + 1];
        for mask in 1u32..(1 << n) {
            let lost: Vec<usize> = (0..n).filter(|i| mask & (1 << i) != 0).collect();
            let ok = survivors_have_full_rank(code, &lost);
            if let Code::Rs { m, .. } = code {
                assert_eq!(ok, lost.len() <= m, "{name} {lost:?}");
            }
            recoverable_by_size[lost.len()] += ok as usize;
            for scheme in schemes(code) {
                let spec = repair(scheme, code, &lost, 8);
                match build(&spec) {
                    Ok(plan) => {
                        assert!(
                            ok,
                            "{scheme} {name} built a plan for unrecoverable {lost:?}"
                        );
                        plan.check(&generator)
                            .unwrap_or_else(|e| panic!("{scheme} {name} {lost:?}: {e}"));
                        simulate_and_check(&plan, &codec, &net, mask as u64)
                            .unwrap_or_else(|e| panic!("{scheme} {name} {lost:?}: {e}"));
                        checked += 1;
                    }
                    Err(PlanError::Unrecoverable { lost: l, .. }) => {
                        assert!(!ok, "{scheme} {name} refused recoverable {lost:?}");
                        assert_eq!(l, lost);
                    }
                    Err(e) => panic!("{scheme} {name} {lost:?}: unexpected error {e}"),
                }
            }
        }
        if name == "lrc:12,2,2" {
            // DESIGN.md §4: every pattern of up to 3 losses and 1568 of the 1820 of 4.
            assert_eq!(&recoverable_by_size[..6], &[0, 16, 120, 560, 1568, 0]);
        }
        for scheme in schemes(code) {
            let plan = build(&PlanSpec::new(scheme, code, Request::Encode, 8)).unwrap();
            plan.check(&generator).unwrap();
            let result = simulate_and_check(&plan, &codec, &net, 99).unwrap();
            assert_eq!(
                result.outputs.len(),
                n,
                "{scheme} {name}: every chunk stored"
            );
        }
    }
    assert!(checked > 20_000, "only {checked} plans were checked");
}

#[test]
fn repairs_at_the_nodes_that_lost_the_chunks() {
    let net = NetConfig::ideal(1e9, 1e-6);
    for name in CODES {
        let code = code(name);
        let codec = Codec::new(code);
        let lost = vec![0, code.k()];
        for scheme in schemes(code) {
            let mut spec = repair(scheme, code, &lost, 24);
            if let Request::Repair { target, .. } = &mut spec.request {
                *target = Target::InPlace;
            }
            let plan = build(&spec).unwrap();
            plan.check(&code.generator()).unwrap();
            let r = simulate_and_check(&plan, &codec, &net, 5).unwrap();
            let stored: Vec<(usize, usize)> = r.outputs.keys().copied().collect();
            assert_eq!(
                stored,
                vec![(1, 0), (code.k() + 1, code.k())],
                "{scheme} {name}"
            );
        }
    }
}

#[test]
fn custom_placement_and_slicing_still_rebuild() {
    let net = NetConfig::ideal(1e9, 1e-6);
    let code = code("rs:6,3");
    let codec = Codec::new(code);
    for scheme in schemes(code) {
        let mut spec = repair(scheme, code, &[2, 7], 100);
        spec.placement = graph::Placement {
            nodes: (0..9).map(|i| 40 + 3 * i).collect(),
            agent: 7,
        };
        spec.slice_bytes = Some(30);
        let plan = build(&spec).unwrap();
        assert_eq!(plan.slice_count(), 4);
        simulate_and_check(&plan, &codec, &net, 11).unwrap();
        let mut enc = PlanSpec::new(scheme, code, Request::Encode, 100);
        enc.placement = spec.placement.clone();
        enc.slice_bytes = Some(7);
        simulate_and_check(&build(&enc).unwrap(), &codec, &net, 12).unwrap();
    }
}

#[test]
fn rs_repair_puts_k_chunks_into_the_requester() {
    for name in ["rs:3,2", "rs:6,3", "rs:12,4"] {
        let code = code(name);
        let (k, c) = (code.k(), 1000u64);
        for lost in [vec![0], vec![k], vec![0, 1]] {
            let plan = build(&repair(Scheme::Rs, code, &lost, c as usize)).unwrap();
            let a = account(&plan);
            assert_eq!(a.bytes_in[&0], k as u64 * c, "{name} {lost:?}");
            assert_eq!(a.total_bytes, k as u64 * c);
            assert_eq!(a.steps, k);
            assert_eq!(a.max_fan_in, k);
        }
    }
}

#[test]
fn lrc_single_loss_reads_its_group_only() {
    for name in ["lrc:4,2,2", "lrc:6,2,2", "lrc:12,2,2"] {
        let code = code(name);
        let Code::Lrc { k, l, .. } = code else {
            unreachable!()
        };
        let c = 512u64;
        for lost in (0..k + l).map(|i| vec![i]) {
            let plan = build(&repair(Scheme::Lrc, code, &lost, c as usize)).unwrap();
            let a = account(&plan);
            assert_eq!(a.bytes_in[&0], (k / l) as u64 * c, "{name} {lost:?}");
            assert_eq!(a.total_bytes, (k / l) as u64 * c, "{name} {lost:?}");
            let group = code.group_of(lost[0]).unwrap();
            for &(from, _) in a.link_bytes.keys() {
                let chunk = plan.placement.iter().position(|&n| n == from).unwrap();
                assert_eq!(
                    code.group_of(chunk),
                    Some(group),
                    "{name} reads chunk {chunk}"
                );
            }
            let requester = plan.vertices.last().unwrap();
            assert_eq!(requester.primitive, graph::Primitive::RecvXor);
        }
        // A lost global parity needs k chunks.
        let plan = build(&repair(Scheme::Lrc, code, &[k + l], c as usize)).unwrap();
        assert_eq!(account(&plan).bytes_in[&0], k as u64 * c);
    }
}

#[test]
fn ppr_tree_depth_and_fan_in() {
    for (name, steps, fan_in) in [("rs:3,2", 2, 2), ("rs:6,3", 3, 2), ("rs:12,4", 4, 3)] {
        let code = code(name);
        let k = code.k();
        assert_eq!(steps, (k as f64 + 1.0).log2().ceil() as usize);
        for lost in 0..code.n() {
            let plan = build(&repair(Scheme::Ppr, code, &[lost], 64)).unwrap();
            let a = account(&plan);
            assert_eq!(a.steps, steps, "{name} lost {lost}");
            assert!(
                a.max_fan_in <= fan_in,
                "{name} lost {lost}: fan-in {}",
                a.max_fan_in
            );
            assert!(a.max_fan_in <= (k as f64 + 1.0).log2().floor() as usize);
            // Every helper sends exactly one chunk; the requester receives the tree's roots.
            assert!(a.bytes_out.values().all(|&b| b == 64));
            assert_eq!(a.total_bytes, k as u64 * 64);
        }
    }
    // The parents of the binomial tree (DESIGN.md §5).
    let parents: Vec<Option<usize>> = (0..6).map(|i| graph::build::ppr_parent(i, 6)).collect();
    assert_eq!(parents, [Some(1), Some(3), Some(3), None, Some(5), None]);
}

#[test]
fn ecpipe_moves_one_chunk_per_link_in_s_plus_k_minus_1_slice_steps() {
    for name in ["rs:3,2", "rs:6,3", "rs:12,4", "lrc:12,2,2"] {
        let code = code(name);
        for s in [1usize, 2, 4, 8, 32] {
            let c = 64 * 32;
            let mut spec = repair(Scheme::Ecpipe, code, &[1], c);
            spec.slice_bytes = Some(c / s);
            let plan = build(&spec).unwrap();
            let a = account(&plan);
            let helpers = plan.vertices.len() - 1;
            assert!(
                a.link_bytes.values().all(|&b| b == c as u64),
                "{name} s={s}"
            );
            assert_eq!(a.link_bytes.len(), helpers);
            assert_eq!(a.steps, s + helpers - 1, "{name} s={s}");
            let expect_helpers = match code {
                Code::Lrc { k, l, .. } => k / l,
                Code::Rs { k, .. } => k,
            };
            assert_eq!(helpers, expect_helpers);
        }
    }
}

#[test]
fn triec_encode_moves_what_the_formula_says() {
    // k·c from the agent to the data nodes, then one chunk per non-zero coefficient of the
    // parity rows of the generator: RS k(m+1)·c, LRC k(r+2)·c.
    for name in CODES {
        let code = code(name);
        let (k, c) = (code.k(), 256u64);
        let plan = build(&PlanSpec::new(
            Scheme::Triec,
            code,
            Request::Encode,
            c as usize,
        ))
        .unwrap();
        let a = account(&plan);
        let expect = match code {
            Code::Rs { m, .. } => k * (m + 1),
            Code::Lrc { r, .. } => k * (r + 2),
        } as u64
            * c;
        assert_eq!(a.total_bytes, expect, "{name}");
        assert_eq!(a.bytes_out[&0], k as u64 * c);
        for i in 0..k {
            let node = plan.placement[i];
            assert_eq!(a.bytes_in[&node], c);
            let out = match code {
                Code::Rs { m, .. } => m,
                Code::Lrc { r, .. } => r + 1,
            } as u64;
            assert_eq!(a.bytes_out[&node], out * c, "{name} data node {i}");
        }
        let primitives: Vec<&str> = plan.vertices.iter().map(|v| v.primitive.name()).collect();
        assert_eq!(primitives[0], "send");
        assert!(primitives[1..=k].iter().all(|p| *p == "recv-ec-send"));
        assert!(primitives[k + 1..].iter().all(|p| *p == "recv-xor"));
    }
}

#[test]
fn triec_repair_aggregators_trade_fan_in() {
    let code = code("rs:12,4");
    for p in 1..=12 {
        let mut spec = repair(Scheme::Triec, code, &[0], 64);
        spec.aggregators = Some(p);
        let plan = build(&spec).unwrap();
        let a = account(&plan);
        let requester = plan.vertices.last().unwrap();
        assert_eq!(requester.inputs.len(), p);
        assert_eq!(a.max_fan_in, p.max(12_usize.div_ceil(p) - 1));
    }
    let mut spec = repair(Scheme::Triec, code, &[0], 64);
    spec.aggregators = Some(13);
    assert!(matches!(
        build(&spec),
        Err(PlanError::BadAggregators { p: 13, helpers: 12 })
    ));
}

#[test]
fn lowering_follows_the_rules() {
    let code = code("rs:6,3");
    let plan = build(&repair(Scheme::Ppr, code, &[0], 64)).unwrap();
    for v in &plan.vertices {
        let kind = v.calc.as_ref().map(|c| c.kind);
        assert_eq!(
            v.primitive,
            graph::Primitive::lower(!v.inputs.is_empty(), !v.sends.is_empty(), kind)
        );
    }
    let names: Vec<&str> = plan.vertices.iter().map(|v| v.primitive.name()).collect();
    assert_eq!(
        names,
        [
            "ec-send",
            "recv-ec-send",
            "ec-send",
            "recv-ec-send",
            "ec-send",
            "recv-ec-send",
            "recv-xor"
        ]
    );
    let lrc = build(&PlanSpec::new(
        Scheme::Lrc,
        self::code("lrc:6,2,2"),
        Request::Encode,
        64,
    ))
    .unwrap();
    assert_eq!(lrc.vertices[0].primitive, graph::Primitive::XorSend);
    assert_eq!(lrc.vertices[1].primitive, graph::Primitive::EcSend);
}

#[test]
fn unusable_requests_are_refused_clearly() {
    let rs = code("rs:6,3");
    let lrc = code("lrc:6,2,2");
    let err = |spec: PlanSpec| build(&spec).unwrap_err();
    assert!(matches!(
        err(repair(Scheme::Lrc, rs, &[0], 8)),
        PlanError::SchemeCodeMismatch { .. }
    ));
    assert!(matches!(
        err(repair(Scheme::Rs, lrc, &[0], 8)),
        PlanError::SchemeCodeMismatch { .. }
    ));
    assert_eq!(err(repair(Scheme::Ppr, rs, &[], 8)), PlanError::NothingLost);
    assert!(matches!(
        err(repair(Scheme::Ppr, rs, &[9], 8)),
        PlanError::BadChunk { index: 9, n: 9, .. }
    ));
    assert_eq!(
        err(repair(Scheme::Ppr, rs, &[1, 1], 8)),
        PlanError::DuplicateChunk { index: 1 }
    );
    let e = err(repair(Scheme::Ecpipe, rs, &[0, 1, 2, 3], 8));
    assert_eq!(
        e.to_string(),
        "lost chunks [0, 1, 2, 3] are not recoverable by rs:6,3"
    );
    assert!(matches!(
        err(repair(Scheme::Rs, rs, &[0], 0)),
        PlanError::BadSize { .. }
    ));
    let mut s = repair(Scheme::Rs, rs, &[0], 8);
    s.slice_bytes = Some(9);
    assert!(matches!(
        err(s),
        PlanError::BadSize {
            what: "slice_bytes",
            value: 9,
            limit: 8
        }
    ));
}

#[test]
fn plans_round_trip_through_json_and_print_stably() {
    let code = code("lrc:6,2,2");
    for scheme in schemes(code) {
        let plan = build(&repair(scheme, code, &[0, 4], 64)).unwrap();
        let json = serde_json::to_string(&plan).unwrap();
        let back: graph::Plan = serde_json::from_str(&json).unwrap();
        assert_eq!(back, plan);
        assert_eq!(
            plan.to_text(),
            build(&repair(scheme, code, &[0, 4], 64)).unwrap().to_text()
        );
        let dot = plan.to_dot();
        assert!(dot.starts_with("digraph plan {") && dot.ends_with("}\n"));
        assert_eq!(dot.matches(" -> ").count(), plan.edges.len());
        assert!(matches!(plan.operation, Operation::Repair { .. }));
    }
}

/// Simulated time against the closed forms, with large chunks, a fast network and free
/// computation; the model's prediction is printed beside.
#[test]
fn simulated_time_matches_the_closed_forms() {
    let c = 1 << 20;
    let bw = 1.25e9;
    let net = NetConfig {
        message_overhead_s: 0.0,
        ..NetConfig::ideal(bw, 2e-6)
    };
    let t = c as f64 / bw;
    for name in ["rs:3,2", "rs:6,3", "rs:12,4"] {
        let code = code(name);
        let codec = Codec::new(code);
        let k = code.k() as f64;
        let s = 64.0;
        let mut cases = vec![
            (Scheme::Rs, None, k * t),
            (Scheme::Ppr, None, (k + 1.0).log2().ceil() * t),
        ];
        cases.push((Scheme::Ecpipe, Some(c / 64), (1.0 + (k - 1.0) / s) * t));
        for (scheme, slice, closed) in cases {
            let mut spec = repair(scheme, code, &[0], c);
            spec.slice_bytes = slice;
            let plan = build(&spec).unwrap();
            let sim = simulate_and_check(&plan, &codec, &net, 3).unwrap().time_s;
            let model = graph::model::predict(&plan, &account(&plan), &net).time_s;
            println!(
                "{name} {scheme:>6}: closed form {:9.3} us  simulated {:9.3} us  model {:9.3} us",
                closed * 1e6,
                sim * 1e6,
                model * 1e6
            );
            assert!(
                (sim - closed).abs() / closed < 0.05,
                "{name} {scheme}: {sim} vs {closed}"
            );
            assert!(
                (model - closed).abs() / closed < 0.05,
                "{name} {scheme}: model {model}"
            );
        }
    }
}

#[test]
fn slower_links_and_nodes_slow_the_plan_down() {
    let code = code("rs:6,3");
    let plan = build(&repair(Scheme::Rs, code, &[0], 1 << 16)).unwrap();
    let net = NetConfig::ideal(1e9, 0.0);
    let fast = graph::sim::simulate_time(&plan, &net);
    let mut slow_link = net.clone();
    slow_link.link_bandwidth_bytes_s = BTreeMap::from([((2, 0), 1e8)]);
    let mut slow_node = net.clone();
    slow_node.node_bandwidth_bytes_s = BTreeMap::from([(0, 5e8)]);
    let t_link = graph::sim::simulate_time(&plan, &slow_link);
    let t_node = graph::sim::simulate_time(&plan, &slow_node);
    let c = (1 << 16) as f64;
    assert!((fast - 6.0 * c / 1e9).abs() < 1e-12);
    assert!(
        (t_link - (5.0 * c / 1e9 + c / 1e8)).abs() < 1e-9,
        "{t_link}"
    );
    assert!((t_node - 2.0 * fast).abs() < 1e-9, "{t_node}");
}
