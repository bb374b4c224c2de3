//! The lowering of plans to the per-node parts the engine runs: every plan of the paper's
//! configurations lowers, each part runs the primitive its vertex was lowered to, and slice
//! sizes beyond one frame are refused in one place.

use graph::paper::{paper_codes, schemes_for};
use graph::part::MAX_SLICE_BYTES;
use graph::{build, PlanError, PlanSpec, Request, Scheme, Target};

#[test]
fn every_paper_plan_lowers_to_parts_that_run_the_vertex_primitive() {
    let mut checked = 0;
    for code in paper_codes() {
        let mut requests = vec![Request::Encode];
        requests.extend((0..code.n()).map(|c| Request::Repair {
            lost: vec![c],
            target: Target::Node(0),
        }));
        for scheme in schemes_for(code) {
            for req in &requests {
                let plan = build(&PlanSpec::new(scheme, code, req.clone(), 1000)).unwrap();
                let parts = plan.parts(3).unwrap();
                assert_eq!(parts.len(), plan.vertices.len());
                for (p, v) in parts.iter().zip(&plan.vertices) {
                    let what = format!("{scheme} {code} {req:?} vertex {}", v.id);
                    assert_eq!(p.vertex, v.id, "{what}");
                    assert_eq!(p.node, v.node, "{what}");
                    assert_eq!(p.primitive(), v.primitive, "{what}");
                    assert_eq!(p.slice_bytes, plan.slice_bytes, "{what}");
                    assert_eq!(p.local.len(), v.local.len(), "{what}");
                    assert!(p.local.iter().all(|c| c.stripe == 3), "{what}");
                    for (i, &e) in p.inputs.iter().zip(&v.inputs) {
                        assert_eq!(i.edge, e, "{what}");
                        assert_eq!(i.from, plan.vertices[plan.edges[e].from].node, "{what}");
                    }
                    let sends: usize = p.outputs.iter().map(|o| o.sends.len()).sum();
                    assert_eq!(sends, v.sends.len(), "{what}");
                    checked += 1;
                }
                assert_eq!(plan.nodes().len(), {
                    let mut n: Vec<usize> = plan.vertices.iter().map(|v| v.node).collect();
                    n.sort_unstable();
                    n.dedup();
                    n.len()
                });
            }
        }
    }
    assert!(checked > 500, "{checked}");
}

#[test]
fn slices_larger_than_a_frame_are_refused_by_the_lowering() {
    let code = "rs:3,2".parse().unwrap();
    let big = MAX_SLICE_BYTES + 1;
    let mut spec = PlanSpec::new(Scheme::Rs, code, Request::Encode, big);
    let plan = build(&spec).unwrap();
    let err = plan.parts(0).unwrap_err();
    assert!(
        matches!(&err, PlanError::BadPart { reason, .. } if reason.contains("wire limit")),
        "{err}"
    );
    spec.slice_bytes = Some(MAX_SLICE_BYTES);
    let parts = build(&spec).unwrap().parts(0).unwrap();
    assert!(parts.iter().all(|p| p.slice_count() == 2));
}

#[test]
fn a_part_with_a_wrong_coefficient_count_is_refused() {
    let code = "rs:3,2".parse().unwrap();
    let plan = build(&PlanSpec::new(Scheme::Rs, code, Request::Encode, 64)).unwrap();
    let mut p = plan.parts(0).unwrap().remove(0);
    p.coeffs.pop();
    let err = p.validate().unwrap_err().to_string();
    assert!(err.contains("coefficients for"), "{err}");
    p.slice_bytes = 0;
    assert!(p.validate().is_err());
}
