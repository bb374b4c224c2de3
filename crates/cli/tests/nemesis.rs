//! `inec nemesis`: silent cuts, a pause and a kill aimed at stripe 0's agent of a cache in
//! network namespaces, clients on every side; the history must be linearizable with no stale
//! read, and the cache must serve through every fault; with the majority lease, and (built
//! with `--features inec-cli/etcd`) with leadership from etcd, where the agent is also cut from
//! etcd. Needs root (namespaces), iproute2 and Go (the checker), and etcd-server for the
//! second; without them it skips, saying so, or fails under CI.
//!
//! Every fault runs once: the cuts of the agent from a majority or from every node and the
//! cut of a minority larger than the code tolerates joined the others once a loop write whose
//! records had left was no longer run again, and an index rebuilt from too few members no
//! longer kept (docs/nemesis.md, "Results").

use std::process::Command;

const GO_PACKAGE: &str = "the Go toolchain: Debian package golang-go, or go.dev/dl";

const FAULTS: &str =
    "agent-successor,agent-one-way,agent-all,majority,minority,minority-over-tolerance,clients,pause,kill";

#[test]
fn partitions_pauses_and_kills_leave_a_linearizable_history() {
    run_nemesis(&[], FAULTS, 9);
}

/// The same faults with leadership from etcd (`--coordinator local`), and the agent cut from
/// etcd itself.
#[cfg(feature = "etcd")]
#[test]
fn with_etcd_leadership_partitions_pauses_and_kills_leave_a_linearizable_history() {
    if !harness::etcd::installed() {
        harness::skip::skip_or_fail("etcd", "Debian package etcd-server");
        return;
    }
    run_nemesis(
        &["--coordinator", "local"],
        &format!("{FAULTS},coordinator"),
        10,
    );
}

/// Runs `inec nemesis` with `faults` (`count` of them) and `extra` arguments; checks the
/// history and the report.
fn run_nemesis(extra: &[&str], faults: &str, count: usize) {
    if let Some((tool, package)) = harness::netns::unavailable() {
        harness::skip::skip_or_fail(tool, package);
        return;
    }
    let go = Command::new("go").arg("version").output();
    if !go.is_ok_and(|o| o.status.success()) {
        harness::skip::skip_or_fail("`go` on the PATH", GO_PACKAGE);
        return;
    }
    let out = std::env::temp_dir().join(format!(
        "inec-nemesis-test-{}-{}",
        std::process::id(),
        extra.len()
    ));
    let run = Command::new(env!("CARGO_BIN_EXE_inec"))
        .args([
            "nemesis",
            "--faults",
            faults,
            "--settle-s",
            "1.5",
            "--clients",
            "6",
        ])
        .args(extra)
        .arg("--out")
        .arg(&out)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&run.stdout);
    assert!(
        run.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&run.stderr)
    );
    let r: serde_json::Value =
        serde_json::from_slice(&std::fs::read(out.join("nemesis.json")).unwrap()).unwrap();
    assert_eq!(r["verdict"]["result"], "ok", "{stdout}");
    assert_eq!(r["stale_reads"], 0);
    let windows = r["windows"].as_array().unwrap();
    assert_eq!(windows.len(), count);
    for w in windows {
        // Every fault leaves a majority that serves the stripe, during the fault or after it
        // (the cut of a minority larger than RS(6,3) tolerates leaves too few positions on
        // either side: after it).
        assert!(w["ok"].as_u64().unwrap() > 0, "{w}");
    }
    assert!(r["incr_acked"].as_u64().unwrap() > 0);
    // The history holds the clients' operations and the final reads through all 9 nodes.
    let h: serde_json::Value =
        serde_json::from_slice(&std::fs::read(out.join("history.json")).unwrap()).unwrap();
    let ops = h["ops"].as_array().unwrap();
    assert_eq!(r["ops"].as_u64().unwrap() as usize, ops.len());
    for node in 0..9 {
        assert_eq!(
            ops.iter().filter(|o| o["client"] == 6 + node).count(),
            6,
            "node {node}'s final reads"
        );
    }
    let _ = std::fs::remove_dir_all(&out);
}
