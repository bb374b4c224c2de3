//! `bench::codec::execute` on a tiny configuration writes well-formed JSON lines with the
//! fields the reports rely on, and a table. (Not timed: nothing here asserts a speed.)

use bench::codec::{execute, CodecArgs};
use serde_json::Value;
use std::collections::BTreeSet;

#[test]
fn tiny_run_writes_json_lines_with_the_required_fields() {
    let args = CodecArgs {
        codes: vec![
            "rs:3,2".parse().unwrap(),
            "rs-xor:3,2".parse().unwrap(),
            "lrc:4,2,1".parse().unwrap(),
        ],
        chunk_bytes: vec![4096],
        threads: vec![1, 2],
        rounds: Some(1),
        round_ms: Some(1),
        cold_bytes: Some(256 << 10),
        go: "go".into(),
        seed: 5,
        ..CodecArgs::default()
    };
    let mut json = Vec::new();
    let mut table = Vec::new();
    let rows = execute(&args, Some(&mut json), &mut table).expect("bench runs and verifies");
    let text = String::from_utf8(json).unwrap();
    let lines: Vec<Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).expect("each line is one JSON object"))
        .collect();
    assert_eq!(lines.len(), rows.len());
    assert!(!lines.is_empty());
    let mut libraries = BTreeSet::new();
    let mut cells = BTreeSet::new();
    for v in &lines {
        for field in [
            "library",
            "kernel",
            "code",
            "k",
            "chunk_bytes",
            "op",
            "pattern",
            "cache",
            "threads",
            "gbps",
            "cpu",
        ] {
            assert!(v.get(field).is_some(), "missing {field} in {v}");
        }
        let code = v["code"].as_str().unwrap();
        match code {
            "rs" | "rs-xor" => assert_eq!(v["m"], 2),
            "lrc" => {
                assert_eq!(v["l"], 2);
                assert_eq!(v["r"], 1);
                assert!(v.get("m").is_none());
            }
            other => panic!("code {other}"),
        }
        assert_eq!(v["chunk_bytes"], 4096);
        assert!(["encode", "decode1", "decodem"].contains(&v["op"].as_str().unwrap()));
        assert!(["fresh", "cached"].contains(&v["pattern"].as_str().unwrap()));
        assert!(["hot", "cold"].contains(&v["cache"].as_str().unwrap()));
        assert!(v["gbps"].as_f64().unwrap() > 0.0);
        let library = v["library"].as_str().unwrap().to_string();
        if code == "lrc" {
            assert!(
                ["inec", "isal", "xor-roofline"].contains(&library.as_str()),
                "{library} ran an LRC"
            );
        }
        if code == "rs-xor" {
            assert!(
                !library.starts_with("reed-solomon-"),
                "{library} ran rs-xor with its own matrix"
            );
        }
        if library != "inec" {
            assert!(v["inec_ratio"].as_f64().unwrap() > 0.0);
        }
        libraries.insert(library);
        cells.insert((
            code.to_string(),
            v["op"].to_string(),
            v["pattern"].to_string(),
            v["cache"].to_string(),
            v["threads"].to_string(),
        ));
    }
    // 3 codes × (encode + 2 decodes × 2 patterns) × hot/cold × 1, 2 threads.
    assert_eq!(cells.len(), 3 * 5 * 2 * 2);
    for lib in [
        "inec",
        "xor-roofline",
        "reed-solomon-simd",
        "reed-solomon-erasure",
    ] {
        assert!(libraries.contains(lib), "no rows of {lib}");
    }
    if cfg!(feature = "isal") {
        assert!(libraries.contains("isal"));
    }
    let table = String::from_utf8(table).unwrap();
    assert!(
        table.contains("rs:3,2") && table.contains("lrc:4,2,1"),
        "{table}"
    );
    assert!(!table.contains("rs(3,2)"), "{table}");
}

#[test]
fn the_cpu_clock_runs_one_thread_and_refuses_more() {
    let base = CodecArgs {
        codes: vec!["rs:3,2".parse().unwrap()],
        chunk_bytes: vec![4096],
        rounds: Some(1),
        round_ms: Some(1),
        cache: vec![bench::codec::CacheState::Hot],
        libraries: vec![bench::codec::LibraryName::Inec],
        clock: bench::codec::Clock::Cpu,
        go: "go".into(),
        ..CodecArgs::default()
    };
    let two = CodecArgs {
        threads: vec![1, 2],
        ..base.clone()
    };
    let err = execute(&two, None, &mut Vec::new()).expect_err("two threads under --clock cpu");
    assert!(err.to_string().contains("--threads 1"), "{err}");
    let one = CodecArgs {
        threads: vec![1],
        ..base
    };
    let mut table = Vec::new();
    let rows = execute(&one, None, &mut table).expect("one thread under --clock cpu runs");
    assert!(!rows.is_empty() && rows.iter().all(|r| r.gbps > 0.0));
    assert!(String::from_utf8(table).unwrap().contains("# clock: cpu"));
}
