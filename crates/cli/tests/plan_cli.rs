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
    for (scheme, code) in [
        ("rs", "rs:12,4"),
        ("lrc", "lrc:12,2,2"),
        ("ppr", "lrc:12,2,2"),
        ("ecpipe", "rs:12,4"),
        ("triec", "rs:12,4"),
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
        ]);
        assert!(v["steps"].as_u64().unwrap() >= 1, "{scheme}");
        assert!(v["sim_time_s"].as_f64().unwrap() > 0.0);
        assert_eq!(v["calibration"]["bandwidth_gbit_s"], 100.0);
        let into: u64 = v["bytes_in"]
            .as_object()
            .unwrap()
            .values()
            .map(|b| b.as_u64().unwrap())
            .sum();
        let out: u64 = v["bytes_out"]
            .as_object()
            .unwrap()
            .values()
            .map(|b| b.as_u64().unwrap())
            .sum();
        assert_eq!(into, out, "{scheme}: every byte sent is received");
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
        assert!(
            enc["bytes_out"]["0"].as_u64().unwrap() >= 12 * 4096,
            "{scheme}: agent sends data"
        );
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
    assert!(text.starts_with("calibration: "));
    assert!(text.contains("recv-ec"));
    assert!(text.contains("accounting: steps=6 max_fan_in=6"));
    assert!(text.contains("model: ") && text.contains("simulated: "));

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
    let out = inec(&["model", "--chunk-bytes", "4096"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).unwrap();
    let rows: Vec<&str> = text.lines().filter(|l| l.contains(" 4096 ")).collect();
    // 6 codes × 4 schemes × (encode, repair).
    assert_eq!(rows.len(), 48, "{text}");
    for code in [
        "rs:3,2",
        "rs:6,3",
        "rs:12,4",
        "lrc:4,2,2",
        "lrc:6,2,2",
        "lrc:12,2,2",
    ] {
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
