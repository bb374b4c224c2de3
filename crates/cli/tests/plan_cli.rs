//! Runs the real `inec plan` and `inec model` and checks what they print.

use std::process::{Command, Output};

fn inec(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_inec"))
        .args(args)
        .output()
        .expect("the inec binary runs")
}

fn json(args: &[&str]) -> serde_json::Value {
    let out = inec(args);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("valid JSON")
}

#[test]
fn plan_json_reports_the_accounting_and_both_times() {
    let c = 65536u64;
    let v = json(&[
        "plan",
        "--scheme",
        "ppr",
        "--code",
        "rs:6,3",
        "--lost",
        "0",
        "--chunk-bytes",
        "65536",
        "--json",
    ]);
    assert_eq!(v["steps"], 3);
    assert_eq!(v["max_fan_in"], 2);
    assert_eq!(v["bytes_in"]["0"], 2 * c);
    // Six helpers on nodes 2..=7 each send one chunk.
    for node in 2..=7 {
        assert_eq!(v["bytes_out"][node.to_string()], c, "node {node}");
    }
    let sim = v["sim_time_s"].as_f64().unwrap();
    let model = v["model_time_s"].as_f64().unwrap();
    // Three whole-chunk steps at 10 Gb/s are the floor.
    let floor = 3.0 * c as f64 / 1.25e9;
    assert!(sim > floor && sim < 1.5 * floor, "sim {sim}");
    assert!((model - sim).abs() / sim < 0.1, "model {model} sim {sim}");
    assert_eq!(v["verified"], true);
    assert_eq!(v["plan"]["vertices"].as_array().unwrap().len(), 7);
    assert_eq!(v["calibration"]["bandwidth_gbit_s"], 10.0);
}

#[test]
fn plan_json_for_every_scheme_and_flag_overrides() {
    let c = 4096u64;
    // Bytes into the requester (node 0) when chunks 0 and 1 are lost, from each scheme's
    // definition: RS and LRC (0 and 1 share a group, so a global decode) read 12 chunks; PPR
    // over 12 helpers has popcount(12) = 2 tree roots, each sending 2 partials; ECPipe runs 2
    // chains; TriEC has round(sqrt(12)) = 3 aggregators, each sending 2 partials.
    for (scheme, code, into_requester) in [
        ("rs", "rs:12,4", 12 * c),
        ("lrc", "lrc:12,2,2", 12 * c),
        ("ppr", "rs:12,4", 4 * c),
        ("ecpipe", "rs:12,4", 2 * c),
        ("triec", "rs:12,4", 6 * c),
    ] {
        let v = json(&[
            "plan",
            "--scheme",
            scheme,
            "--code",
            code,
            "--lost",
            "0,1",
            "--chunk-bytes",
            "4096",
            "--json",
            "--bandwidth-gbps",
            "100",
            "--latency-us",
            "1",
            "--xor-gbyte-s",
            "20",
            "--mul-add-gbyte-s",
            "10",
        ]);
        assert_eq!(v["bytes_in"]["0"], into_requester, "{scheme}");
        // The simulator, counting the messages it sent, agrees with the accounting.
        assert_eq!(v["sim_bytes_in"], v["bytes_in"], "{scheme}");
        assert_eq!(v["sim_bytes_out"], v["bytes_out"], "{scheme}");
        assert_eq!(v["calibration"]["bandwidth_gbit_s"], 100.0);
        assert_eq!(v["calibration"]["xor_gbyte_s"], 20.0);
        assert_eq!(v["calibration"]["mul_add_gbyte_s"], 10.0);
        let (sim, model) = (
            v["sim_time_s"].as_f64().unwrap(),
            v["model_time_s"].as_f64().unwrap(),
        );
        // The receiver's NIC bounds the simulation from below.
        assert!(sim >= into_requester as f64 / 12.5e9, "{scheme}: {sim}");
        let limit = if scheme == "ecpipe" { 0.25 } else { 0.15 };
        assert!(
            (model - sim).abs() / sim < limit,
            "{scheme}: model {model} sim {sim}"
        );
        // The model's per-vertex terms: one entry per vertex, the requester's network alpha
        // is what it receives over the bandwidth.
        let vertices = v["model_vertices"].as_array().unwrap();
        assert_eq!(
            vertices.len(),
            v["plan"]["vertices"].as_array().unwrap().len()
        );
        let requester_alpha: f64 = vertices
            .iter()
            .filter(|x| x["node"] == 0)
            .map(|x| x["network_alpha_s_per_byte"].as_f64().unwrap())
            .sum();
        let want = (into_requester / c) as f64 / 12.5e9;
        assert!(
            (requester_alpha - want).abs() < 1e-15,
            "{scheme}: {requester_alpha}"
        );
        assert!(vertices.iter().any(|x| x["critical"] == true));

        let enc = json(&[
            "plan",
            "--scheme",
            scheme,
            "--code",
            code,
            "--encode",
            "--chunk-bytes",
            "4096",
            "--json",
        ]);
        // Every scheme's encode starts with the agent (node 0) sending the k data chunks or
        // more; none is sliced unless asked.
        assert!(
            enc["bytes_out"]["0"].as_u64().unwrap() >= 12 * 4096,
            "{scheme}: agent sends data"
        );
        assert_eq!(enc["slice_bytes"], 4096, "{scheme}");
    }
    let v = json(&[
        "plan",
        "--scheme",
        "ecpipe",
        "--code",
        "rs:6,3",
        "--lost",
        "3",
        "--chunk-bytes",
        "8192",
        "--slice-bytes",
        "1024",
        "--json",
    ]);
    assert_eq!(v["steps"], 8 + 6 - 1);
    assert_eq!(v["max_fan_in"], 1);
}

/// The time at 1 GiB comes from the simulation without bytes; the bytes are verified on a
/// 64 KiB copy (simulating 12 GiB of real bytes would not fit in memory).
#[test]
fn plan_at_one_gib_verifies_a_small_copy() {
    let v = json(&[
        "plan",
        "--scheme",
        "rs",
        "--code",
        "rs:12,4",
        "--lost",
        "0",
        "--chunk-bytes",
        "1073741824",
        "--json",
    ]);
    assert_eq!(v["verified_chunk_bytes"], 65536);
    assert_eq!(v["bytes_in"]["0"], 12u64 << 30);
    let sim = v["sim_time_s"].as_f64().unwrap();
    let closed = 12.0 * (1u64 << 30) as f64 / 1.25e9;
    // k·c/B, plus the decode at the calibrated mul-add rate (about 3%).
    assert!(sim > closed && (sim - closed) / closed < 0.05, "{sim}");
}

#[test]
fn plan_text_dot_and_errors() {
    let out = inec(&[
        "plan",
        "--scheme",
        "rs",
        "--code",
        "rs:6,3",
        "--lost",
        "0",
        "--chunk-bytes",
        "1024",
    ]);
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(
        text.starts_with("calibration: default (crates/graph/calibration/default.json)"),
        "{text}"
    );
    assert!(text.contains("recv-ec"));
    assert!(text.contains("accounting: steps=6 max_fan_in=6"));
    assert!(text.contains("model: alpha=") && text.contains("simulated: time="));
    // The model's per-primitive lines: six helpers' sends and the requester's recv-ec.
    let per_vertex: Vec<&str> = text
        .lines()
        .filter(|l| l.starts_with("  v") && l.contains(" ns/B beta="))
        .collect();
    assert_eq!(per_vertex.len(), 7, "{text}");
    assert!(per_vertex[6].contains("recv-ec") && per_vertex[6].contains("in=6 out=0"));

    // Flags that mean nothing for the request are refused, not ignored.
    for args in [
        &["--scheme", "rs", "--encode", "--at", "3"][..],
        &["--scheme", "rs", "--encode", "--in-place"][..],
        &["--scheme", "ppr", "--lost", "0", "--aggregators", "2"][..],
        &["--scheme", "triec", "--encode", "--aggregators", "2"][..],
    ] {
        let mut all = vec!["plan", "--code", "rs:6,3", "--chunk-bytes", "64"];
        all.extend_from_slice(args);
        let out = inec(&all);
        assert!(!out.status.success(), "{args:?} was accepted");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            err.contains("cannot be used with") || err.contains("--aggregators applies to triec"),
            "{args:?}: {err}"
        );
    }

    // --dot needs no calibration, even a broken one.
    let out = inec(&[
        "plan",
        "--scheme",
        "ppr",
        "--code",
        "rs:6,3",
        "--lost",
        "0",
        "--chunk-bytes",
        "64",
        "--dot",
        "--calibration",
        "/nonexistent/calibration.json",
    ]);
    assert!(out.status.success());
    assert!(String::from_utf8_lossy(&out.stdout).starts_with("digraph plan {"));

    // Compute rates measured now, in this process, with this process's kernel.
    let out = inec(&[
        "plan",
        "--scheme",
        "ppr",
        "--code",
        "rs:6,3",
        "--lost",
        "0",
        "--chunk-bytes",
        "4096",
        "--calibrate",
    ]);
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(
        text.lines()
            .next()
            .unwrap()
            .contains("compute rates measured now"),
        "{text}"
    );

    // A calibration measured with another kernel is used, with a warning.
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("cal.json");
    std::fs::write(
        &path,
        r#"{"description": "test", "kernel": "some-other-kernel", "bandwidth_gbit_s": 25.0,
            "latency_us": 5.0, "message_overhead_us": 1.0, "xor_gbyte_s": 8.0,
            "mul_add_gbyte_s": 4.0}"#,
    )
    .unwrap();
    let out = inec(&[
        "plan",
        "--scheme",
        "rs",
        "--code",
        "rs:6,3",
        "--lost",
        "0",
        "--chunk-bytes",
        "4096",
        "--calibration",
        path.to_str().unwrap(),
    ]);
    assert!(out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("measured with kernel some-other-kernel"),
        "{err}"
    );
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(
        text.starts_with(&format!("calibration: {} (25 Gb/s", path.display())),
        "{text}"
    );

    let out = inec(&[
        "plan",
        "--scheme",
        "triec",
        "--code",
        "rs:3,2",
        "--encode",
        "--chunk-bytes",
        "64",
        "--dot",
    ]);
    let dot = String::from_utf8(out.stdout).unwrap();
    assert!(dot.starts_with("digraph plan {"));
    assert_eq!(dot.matches(" -> ").count(), 9);

    let out = inec(&[
        "plan",
        "--scheme",
        "ppr",
        "--code",
        "rs:6,3",
        "--lost",
        "0,1,2,3",
        "--chunk-bytes",
        "64",
    ]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("lost chunks [0, 1, 2, 3] are not recoverable by rs:6,3"),
        "{err}"
    );

    let out = inec(&[
        "plan",
        "--scheme",
        "lrc",
        "--code",
        "rs:6,3",
        "--lost",
        "0",
        "--chunk-bytes",
        "64",
    ]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("does not apply"));

    let out = inec(&[
        "plan",
        "--scheme",
        "rs",
        "--code",
        "rs:6,3",
        "--lost",
        "0",
        "--chunk-bytes",
        "64",
        "--calibration",
        "/nonexistent/calibration.json",
    ]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("bad calibration file"));
}

#[test]
fn model_prints_every_scheme_and_code() {
    let out = inec(&["model", "--chunk-bytes", "4096", "--grid"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).unwrap();
    let rows: Vec<&str> = text.lines().filter(|l| l.contains(" 4096 ")).collect();
    // 6 codes × 4 schemes × (encode, repair).
    assert_eq!(rows.len(), 48, "{text}");
    for code in graph::paper::PAPER_CODES {
        for scheme in ["ppr", "ecpipe", "triec"] {
            assert!(
                rows.iter()
                    .any(|r| r.starts_with(code) && r.contains(scheme)),
                "{code} {scheme}"
            );
        }
    }

    let v = json(&[
        "model",
        "--json",
        "--chunk-bytes",
        "128,16777216",
        "--codes",
        "rs:6,3",
    ]);
    let rows = v.as_array().unwrap();
    assert_eq!(rows.len(), 4 * 2 * 2);
    for r in rows {
        let (m, s) = (
            r["model_time_s"].as_f64().unwrap(),
            r["sim_time_s"].as_f64().unwrap(),
        );
        assert!(m > 0.0 && s > 0.0);
        assert!((m - s).abs() / s < 0.15, "{r}");
    }
    // At 16 MiB PPR repairs RS(6,3) in about half the time of RS.
    let t = |scheme: &str| {
        rows.iter()
            .find(|r| r["scheme"] == scheme && r["op"] == "repair" && r["chunk_bytes"] == 16777216)
            .unwrap()["sim_time_s"]
            .as_f64()
            .unwrap()
    };
    assert!(t("ppr") < 0.6 * t("rs"));
    assert!(t("ecpipe") < t("ppr"));
}

#[test]
fn model_explores_a_hundred_node_cluster() {
    let v = json(&[
        "model",
        "--nodes",
        "100",
        "--stripes",
        "100",
        "--bandwidth-gbps",
        "100",
        "--codes",
        "rs:6,3",
        "--json",
    ]);
    let rows = v.as_array().unwrap();
    // 4 schemes × (1 requester, 100 requesters).
    assert_eq!(rows.len(), 8);
    let get = |scheme: &str, r: u64| {
        rows.iter()
            .find(|x| x["scheme"] == scheme && x["requesters"] == r)
            .unwrap_or_else(|| panic!("{scheme} {r}"))
    };
    for scheme in ["rs", "ppr", "ecpipe", "triec"] {
        let one = get(scheme, 1);
        let all = get(scheme, 100);
        assert_eq!(one["nodes"], 100);
        let (t1, t100) = (
            one["throughput_gbyte_s"].as_f64().unwrap(),
            all["throughput_gbyte_s"].as_f64().unwrap(),
        );
        assert!(t100 > 10.0 * t1, "{scheme}: {t1} vs {t100} GB/s");
        // One requester's NIC (12.5 GB/s) bounds the throughput of everything sent to it.
        let into = one["max_nic_in_bytes"].as_f64().unwrap();
        let time = one["sim_time_s"].as_f64().unwrap();
        assert!(time >= into / 12.5e9, "{scheme}");
    }
    let out = inec(&[
        "model",
        "--nodes",
        "20",
        "--codes",
        "rs:3,2",
        "--requesters",
        "1,5",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(text.contains("20 stripes over 20 nodes"), "{text}");
    assert_eq!(text.lines().filter(|l| l.starts_with("rs:3,2")).count(), 8);
}
