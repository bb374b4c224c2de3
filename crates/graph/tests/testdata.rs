//! Data-driven plan tests: every `testdata/*.txt` file holds commands and the output they
//! must print (see `testdata/README.md`). `UPDATE_TESTDATA=1` rewrites the expected outputs.
//!
//! `plan …` cases pin shapes: the plan and its accounting, which depend on no constants.
//! `times …` cases pin the model's per-primitive terms and the simulated time for network and
//! compute constants given in the command itself, so recalibrating changes nothing here.

use std::path::{Path, PathBuf};

use graph::model::Calibration;
use graph::sim::NetConfig;
use graph::{build, PlanSpec, Request, Target};

fn manifest() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// Runs one `plan …` (shape) or `times …` (model and simulation) command line.
fn run(line: &str) -> String {
    let words: Vec<&str> = line.split_whitespace().collect();
    let times = match words.first() {
        Some(&"plan") => false,
        Some(&"times") => true,
        _ => panic!("{line}: commands start with `plan` or `times`"),
    };
    let mut cal = Calibration {
        description: String::new(),
        kernel: String::new(),
        bandwidth_gbit_s: f64::NAN,
        latency_us: f64::NAN,
        message_overhead_us: f64::NAN,
        xor_gbyte_s: f64::NAN,
        mul_add_gbyte_s: f64::NAN,
    };
    let (mut scheme, mut code, mut lost, mut chunk_bytes) = (None, None, None, None);
    let (mut slice_bytes, mut aggregators, mut target) = (None, None, Target::Node(0));
    let (mut encode, mut dot) = (false, false);
    let mut it = words[1..].iter();
    while let Some(&flag) = it.next() {
        let mut value = || {
            *it.next()
                .unwrap_or_else(|| panic!("{line}: {flag} needs a value"))
        };
        match flag {
            "--scheme" => scheme = Some(value().parse().unwrap()),
            "--code" => code = Some(value().parse::<codes::Code>().unwrap()),
            "--lost" => lost = Some(value().split(',').map(|x| x.parse().unwrap()).collect()),
            "--at" => target = Target::Node(value().parse().unwrap()),
            "--in-place" => target = Target::InPlace,
            "--chunk-bytes" => chunk_bytes = Some(value().parse().unwrap()),
            "--slice-bytes" => slice_bytes = Some(value().parse().unwrap()),
            "--aggregators" => aggregators = Some(value().parse().unwrap()),
            "--encode" => encode = true,
            "--dot" => dot = true,
            "--bandwidth-gbps" => cal.bandwidth_gbit_s = value().parse().unwrap(),
            "--latency-us" => cal.latency_us = value().parse().unwrap(),
            "--overhead-us" => cal.message_overhead_us = value().parse().unwrap(),
            "--xor-gbyte-s" => cal.xor_gbyte_s = value().parse().unwrap(),
            "--mul-add-gbyte-s" => cal.mul_add_gbyte_s = value().parse().unwrap(),
            _ => panic!("{line}: unknown flag {flag}"),
        }
    }
    let request = match (encode, lost) {
        (true, None) => Request::Encode,
        (false, Some(lost)) => Request::Repair { lost, target },
        _ => panic!("{line}: give exactly one of --encode and --lost"),
    };
    let mut spec = PlanSpec::new(
        scheme.expect("--scheme"),
        code.expect("--code"),
        request,
        chunk_bytes.expect("--chunk-bytes"),
    );
    spec.slice_bytes = slice_bytes;
    spec.aggregators = aggregators;
    if dot {
        return match build(&spec) {
            Ok(plan) => plan.to_dot(),
            Err(e) => format!("error: {e}\n"),
        };
    }
    let net = if times {
        cal.validate()
            .unwrap_or_else(|e| panic!("{line}: `times` needs every constant: {e}"));
        cal.net()
    } else {
        NetConfig::ideal(1.25e9, 0.0)
    };
    match graph::report::report(&spec, &net, 1) {
        Ok(r) if times => r.timing_text(),
        Ok(r) => r.shape_text(),
        Err(e) => format!("error: {e}\n"),
    }
}

/// Splits a file into (command, expected output) pairs. A case is a `plan …` or `times …` line, a line
/// `----`, and the expected output up to the next blank line. Lines starting with `#` between
/// cases are comments.
fn cases(text: &str) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let mut lines = text.lines().peekable();
    while let Some(line) = lines.next() {
        if line.trim().is_empty() || line.starts_with('#') {
            continue;
        }
        assert_eq!(lines.next(), Some("----"), "after {line:?}");
        let mut expected = String::new();
        while let Some(l) = lines.next_if(|l| !l.is_empty()) {
            expected.push_str(l);
            expected.push('\n');
        }
        out.push((line.to_string(), expected));
    }
    out
}

fn check_file(path: &Path, update: bool) -> Vec<String> {
    let text = std::fs::read_to_string(path).unwrap();
    let mut failures = Vec::new();
    let mut rewritten = String::new();
    // Keep the comment header of the file.
    for l in text.lines().take_while(|l| l.starts_with('#')) {
        rewritten.push_str(l);
        rewritten.push('\n');
    }
    for (cmd, expected) in cases(&text) {
        let got = run(&cmd);
        if got != expected {
            failures.push(format!(
                "{}: {cmd}\n--- expected\n{expected}--- got\n{got}",
                path.display()
            ));
        }
        rewritten.push_str(&format!("\n{cmd}\n----\n{got}"));
    }
    if update {
        std::fs::write(path, rewritten.trim_start_matches('\n')).unwrap();
        return Vec::new();
    }
    failures
}

#[test]
fn printed_plans_match_testdata() {
    let update = std::env::var_os("UPDATE_TESTDATA").is_some_and(|v| v == "1");
    let mut files: Vec<PathBuf> = std::fs::read_dir(manifest().join("testdata"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "txt"))
        .collect();
    files.sort();
    assert!(files.len() >= 5, "testdata files are missing");
    let failures: Vec<String> = files.iter().flat_map(|f| check_file(f, update)).collect();
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
