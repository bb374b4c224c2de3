//! `inec demo --quick` runs the whole story (cluster, load, kill, restart, recovery, verify,
//! report) and leaves no process behind, also when it is interrupted with SIGINT.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use harness::{pid_alive, pids_naming};

fn inec() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_inec"));
    c.env("INEC_NO_PROGRESS", "1");
    c
}

/// The cluster directory and node pids from the demo's "cluster directory D …, node pids
/// [a, b, …]" line.
fn cluster_line(line: &str) -> Option<(String, Vec<u32>)> {
    let rest = line.trim().strip_prefix("cluster directory ")?;
    let (dir, pids) = rest.split_once(" (node logs), node pids ")?;
    let pids = pids
        .trim_matches(|c| c == '[' || c == ']')
        .split(',')
        .map(|p| p.trim().parse().ok())
        .collect::<Option<Vec<u32>>>()?;
    Some((dir.to_string(), pids))
}

fn assert_svg(path: &Path) {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let doc = roxmltree::Document::parse(&text)
        .unwrap_or_else(|e| panic!("{} is not well-formed: {e}", path.display()));
    assert_eq!(doc.root_element().tag_name().name(), "svg");
    // Every plot has at least one line or bar.
    assert!(
        doc.descendants()
            .any(|n| matches!(n.attribute("class"), Some("series") | Some("bar"))),
        "{} has nothing plotted",
        path.display()
    );
}

#[test]
fn quick_demo_completes_with_no_wrong_value_and_a_report() {
    let out = tempfile::tempdir().unwrap();
    let o = inec()
        .args(["demo", "--quick", "--out"])
        .arg(out.path())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&o.stdout);
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "demo failed:\n{stdout}\n{stderr}");
    assert!(stdout.lines().any(|l| l.trim() == "wrong 0"), "{stdout}");
    for step in 1..=8 {
        assert!(
            stdout.contains(&format!("[{step}/8]")),
            "step {step}:\n{stdout}"
        );
    }
    assert!(stdout.contains("| node down "), "{stdout}");
    assert!(stdout.contains("values verified at the end"), "{stdout}");
    assert!(stdout.contains("600 of 600"), "{stdout}");
    // Every node stopped.
    let (dir, pids) = stdout
        .lines()
        .find_map(cluster_line)
        .unwrap_or_else(|| panic!("no cluster line:\n{stdout}"));
    assert_eq!(pids.len(), 9);
    for p in &pids {
        assert!(!pid_alive(*p), "node pid {p} still runs");
    }
    assert!(pids_naming(&Path::new(&dir).join("cluster.txt")).is_empty());
    assert!(!Path::new(&dir).exists());
    // The report: an HTML page embedding the plots, and the plots as files.
    let report_line = stdout
        .lines()
        .find_map(|l| l.strip_prefix("report: "))
        .expect("report path printed");
    let index = Path::new(report_line.trim());
    assert_eq!(
        std::fs::canonicalize(index).unwrap(),
        std::fs::canonicalize(out.path().join("index.html")).unwrap()
    );
    let html = std::fs::read_to_string(index).unwrap();
    assert!(html.starts_with("<!DOCTYPE html>"));
    assert_eq!(html.matches("<svg").count(), 4, "four plots embedded");
    for name in ["node 3 killed", "node 3 restarted", "recovered"] {
        assert!(html.contains(name), "timeline event {name}");
    }
    for svg in [
        "timeline.svg",
        "cdf-reads.svg",
        "cdf-writes.svg",
        "p99-per-phase.svg",
    ] {
        assert_svg(&out.path().join(svg));
    }
    // Each embedded SVG is well-formed too.
    let mut rest = html.as_str();
    while let Some(i) = rest.find("<svg") {
        let end = rest[i..].find("</svg>").unwrap() + i + "</svg>".len();
        roxmltree::Document::parse(&rest[i..end]).expect("embedded SVG well-formed");
        rest = &rest[end..];
    }
    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.path().join("results.json")).unwrap())
            .unwrap();
    assert_eq!(json["verify"]["wrong"], 0);
    let names: Vec<&str> = json["phases"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["before", "node down", "recovering", "after"]);
    // The phase after recovery began with every value back in its layout: the values written
    // split while node 3 was down were written whole again first.
    assert!(json["split_values_after_recovery"].is_u64(), "{json}");
    assert_eq!(json["split_values_left"], 0, "{json}");
    let secs = |k: &str| json[k].as_f64().unwrap_or_else(|| panic!("{k}: {json}"));
    assert!(secs("layout_back_s") >= secs("recovery_s"), "{json}");
    for p in json["phases"].as_array().unwrap() {
        assert_eq!(p["summary"]["wrong"], 0, "{p}");
    }
    // While the node was down, reads were served and writes acknowledged.
    let down = &json["phases"][1]["summary"]["ops"];
    let served = |k: &str| down[k]["ok"].as_u64().unwrap_or(0);
    assert!(served("read") + served("degraded_read") > 0, "{down}");
    assert!(served("update") > 0, "{down}");
    assert!(
        served("degraded_read") > 0,
        "reads of stripes missing a chunk: {down}"
    );
    assert!(
        json["phases"][1]["degraded_reads_counted_by_nodes"]
            .as_u64()
            .unwrap()
            > 0
    );
}

#[test]
fn sigint_stops_every_node() {
    let out = tempfile::tempdir().unwrap();
    let mut child = inec()
        .args(["demo", "--quick", "--seconds", "30", "--out"])
        .arg(out.path())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let mut seen = String::new();
    let (dir, pids) = loop {
        let line = lines
            .next()
            .unwrap_or_else(|| panic!("demo ended before its cluster line:\n{seen}"))
            .unwrap();
        seen.push_str(&line);
        seen.push('\n');
        if let Some(c) = cluster_line(&line) {
            break c;
        }
    };
    // Wait until the YCSB phase runs (nodes busy), then interrupt.
    for line in lines.by_ref() {
        let line = line.unwrap();
        seen.push_str(&line);
        seen.push('\n');
        if line.starts_with("[3/8]") {
            break;
        }
    }
    assert!(pids.iter().all(|&p| pid_alive(p)), "{seen}");
    std::thread::sleep(Duration::from_millis(500));
    let pid = child.id().to_string();
    assert!(Command::new("kill")
        .args(["-INT", &pid])
        .status()
        .unwrap()
        .success());
    let deadline = Instant::now() + Duration::from_secs(30);
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        assert!(Instant::now() < deadline, "the demo did not exit on SIGINT");
        std::thread::sleep(Duration::from_millis(50));
    };
    assert_eq!(status.code(), Some(130), "{seen}");
    for p in &pids {
        assert!(!pid_alive(*p), "node pid {p} survived SIGINT");
    }
    assert!(pids_naming(&Path::new(&dir).join("cluster.txt")).is_empty());
    assert!(!Path::new(&dir).exists());
}
