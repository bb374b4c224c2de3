//! Through the real binary: one vocabulary of flags (`--code`, sizes with units,
//! lists by repeating a flag, the old spellings still accepted but hidden), the defaults that
//! surprised (`inec model`'s summary, the record-overhead warning) and progress bars only on a
//! terminal.

use std::fs;
use std::path::Path;
use std::process::{Command, Output, Stdio};

const INEC: &str = env!("CARGO_BIN_EXE_inec");

fn run(args: &[&str]) -> Output {
    Command::new(INEC)
        .args(args)
        .env_remove("INEC_NO_PROGRESS")
        .output()
        .expect("run inec")
}

fn text(o: &Output) -> String {
    format!(
        "status {:?}\nstdout:\n{}\nstderr:\n{}",
        o.status,
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

#[track_caller]
fn ok(args: &[&str]) -> Output {
    let o = run(args);
    assert!(o.status.success(), "inec {args:?}: {}", text(&o));
    o
}

fn help(args: &[&str]) -> String {
    let mut a = args.to_vec();
    a.push("--help");
    String::from_utf8(ok(&a).stdout).unwrap()
}

fn p(path: &Path) -> &str {
    path.to_str().unwrap()
}

#[test]
fn every_help_uses_one_spelling() {
    let mut subcommands: Vec<Vec<&str>> = vec![
        vec!["encode"],
        vec!["decode"],
        vec!["verify"],
        vec!["plan"],
        vec!["model"],
        vec!["node"],
        vec!["cluster", "up"],
        vec!["cluster", "down"],
        vec!["cluster", "status"],
    ];
    if cfg!(feature = "bench") {
        subcommands.push(vec!["bench", "codec"]);
        subcommands.push(vec!["bench", "primitives"]);
    }
    for sub in &subcommands {
        let h = help(sub);
        for old in [
            "--codes",
            "--chunk-sizes",
            "--k <",
            "--m <",
            "--lrc",
            "--matrix",
        ] {
            assert!(!h.contains(old), "inec {sub:?} --help shows {old}:\n{h}");
        }
        if h.contains("--code <") {
            assert!(h.contains("--code <CODE>"), "{sub:?}:\n{h}");
        }
        for line in h.lines().filter(|l| l.contains("-bytes <")) {
            assert!(
                line.contains("<SIZE>"),
                "{sub:?}: a size flag without <SIZE>: {line}"
            );
        }
    }
    for sub in [&["encode"][..], &["plan"], &["model"]] {
        assert!(help(sub).contains("--chunk-bytes <SIZE>"), "{sub:?}");
    }
    if cfg!(feature = "bench") {
        for sub in [&["bench", "codec"][..], &["bench", "primitives"]] {
            let h = help(sub);
            assert!(
                h.contains("--chunk-bytes <SIZE>") && h.contains("--code <CODE>"),
                "{h}"
            );
            assert!(h.contains("repeat the flag"), "{h}");
        }
    }
    let top = help(&[]);
    assert!(
        top.contains("a list is given by repeating its flag"),
        "{top}"
    );
}

#[test]
fn sizes_take_units_everywhere_and_codes_are_one_flag() {
    // `plan --chunk-bytes 4MiB` once failed with "invalid digit".
    let a = ok(&[
        "plan",
        "--scheme",
        "ppr",
        "--code",
        "rs:6,3",
        "--lost",
        "0",
        "--chunk-bytes",
        "4MiB",
        "--json",
    ]);
    let b = ok(&[
        "plan",
        "--scheme",
        "ppr",
        "--code",
        "rs:6,3",
        "--lost",
        "0",
        "--chunk-bytes",
        "4194304",
        "--json",
    ]);
    let va: serde_json::Value = serde_json::from_slice(&a.stdout).unwrap();
    let vb: serde_json::Value = serde_json::from_slice(&b.stdout).unwrap();
    assert_eq!(va["bytes_in"], vb["bytes_in"]);
    assert_eq!(va["sim_time_s"], vb["sim_time_s"]);
    ok(&[
        "plan",
        "--scheme",
        "ecpipe",
        "--code",
        "rs:6,3",
        "--lost",
        "0",
        "--chunk-bytes",
        "1MiB",
        "--slice-bytes",
        "64KiB",
    ]);
    // Lists by repeating the flag; the old comma and space spellings still work.
    let new = ok(&[
        "model",
        "--code",
        "rs:6,3",
        "--code",
        "lrc:6,2,2",
        "--chunk-bytes",
        "4KiB",
        "--chunk-bytes",
        "1MiB",
        "--json",
    ]);
    let old = ok(&[
        "model",
        "--codes",
        "rs:6,3",
        "lrc:6,2,2",
        "--chunk-bytes",
        "4096,1048576",
        "--json",
    ]);
    assert_eq!(new.stdout, old.stdout);
    let rows: serde_json::Value = serde_json::from_slice(&new.stdout).unwrap();
    assert!(rows.as_array().unwrap().len() > 8);
    // A bad size names the unit problem; a bad code names the spelling.
    let o = run(&[
        "plan",
        "--scheme",
        "rs",
        "--code",
        "rs:6,3",
        "--encode",
        "--chunk-bytes",
        "4XB",
    ]);
    assert_eq!(o.status.code(), Some(2));
    assert!(text(&o).contains("unknown unit \"XB\""), "{}", text(&o));
    let o = run(&["model", "--code", "rs(6,3)"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(text(&o).contains("rs:K,M"), "{}", text(&o));
}

#[test]
fn a_bad_value_is_named_once_with_its_spelling() {
    for (args, want) in [
        (
            &["encode", "x", "-o", "y", "--code", "rs:0,3"][..],
            "invalid value 'rs:0,3' for '--code <CODE>': k = 0",
        ),
        (
            &["encode", "x", "-o", "y", "--code", "foo"][..],
            "(a code is rs:K,M, rs-xor:K,M, rs-vand:K,M or lrc:K,L,R, e.g. rs:6,3 or lrc:6,2,2)",
        ),
        (
            &["encode", "x", "-o", "y", "--chunk-bytes", "2GiB"][..],
            "chunk size 2GiB out of range 1..=1073741824 bytes",
        ),
        (
            &["encode", "x", "-o", "y", "--chunk-bytes", "12XB"][..],
            "unknown unit \"XB\" in \"12XB\"",
        ),
    ] {
        let o = run(args);
        assert_eq!(o.status.code(), Some(2), "inec {args:?}: {}", text(&o));
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(err.matches(want).count(), 1, "inec {args:?}: {}", text(&o));
        assert_eq!(
            err.matches("error:").count(),
            1,
            "inec {args:?}: {}",
            text(&o)
        );
    }
}

#[test]
fn missing_required_choices_name_the_alternatives() {
    let o = run(&[
        "plan",
        "--scheme",
        "rs",
        "--code",
        "rs:6,3",
        "--chunk-bytes",
        "4096",
    ]);
    assert_eq!(o.status.code(), Some(2));
    let t = text(&o);
    assert!(t.contains("--encode") && t.contains("--lost"), "{t}");
}

#[test]
fn encode_old_spellings_are_hidden_aliases() {
    let tmp = tempfile::tempdir().unwrap();
    let input = tmp.path().join("input");
    fs::write(&input, vec![7u8; 10_000]).unwrap();
    let new = tmp.path().join("new");
    let old = tmp.path().join("old");
    ok(&[
        "encode",
        p(&input),
        "-o",
        p(&new),
        "--code",
        "rs-vand:4,2",
        "--chunk-bytes",
        "1KiB",
    ]);
    ok(&[
        "encode",
        p(&input),
        "-o",
        p(&old),
        "--k",
        "4",
        "--m",
        "2",
        "--matrix",
        "vandermonde",
        "--chunk-bytes",
        "1024",
    ]);
    for i in 0..6 {
        let name = format!("chunk-{i:03}");
        assert_eq!(
            fs::read(new.join(&name)).unwrap(),
            fs::read(old.join(&name)).unwrap()
        );
    }
    let lrc = tmp.path().join("lrc");
    ok(&["encode", p(&input), "-o", p(&lrc), "--lrc", "4,2,1"]);
    let v = ok(&["verify", p(&lrc)]);
    assert!(text(&v).contains("lrc:4,2,1"), "{}", text(&v));
    let o = run(&[
        "encode",
        p(&input),
        "-o",
        p(&lrc),
        "--code",
        "rs:4,2",
        "--k",
        "4",
        "--m",
        "2",
    ]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
}

#[test]
fn model_prints_a_summary_and_the_grid_on_request() {
    let summary = String::from_utf8(ok(&["model"]).stdout).unwrap();
    let grid = String::from_utf8(ok(&["model", "--grid"]).stdout).unwrap();
    let (s, g) = (summary.lines().count(), grid.lines().count());
    assert!(s < 60, "the summary has {s} lines:\n{summary}");
    assert!(g > 5 * s, "the grid has {g} lines, the summary {s}");
    assert!(summary.contains("inec model --grid"), "{summary}");
    for col in [
        "1KiB_us",
        "64KiB_us",
        "1MiB_us",
        "16MiB_us",
        "model/sim range",
    ] {
        assert!(summary.contains(col), "{col}: {summary}");
    }
    // Every code, scheme and operation has its row in the summary.
    let rows = summary
        .lines()
        .filter(|l| l.starts_with("rs:") || l.starts_with("lrc:"))
        .count();
    let grid_rows = grid
        .lines()
        .filter(|l| l.starts_with("rs:") || l.starts_with("lrc:"))
        .count();
    assert_eq!(rows * 8, grid_rows, "8 chunk sizes per summary row");
}

#[test]
fn encode_warns_when_record_checksums_outweigh_the_data() {
    let tmp = tempfile::tempdir().unwrap();
    let input = tmp.path().join("input");
    fs::write(&input, vec![1u8; 30_000]).unwrap();
    let o = ok(&[
        "encode",
        p(&input),
        "-o",
        p(&tmp.path().join("a")),
        "--code",
        "rs:4,2",
        "--chunk-bytes",
        "3",
    ]);
    let t = String::from_utf8_lossy(&o.stderr);
    assert!(
        t.contains("warning: --chunk-bytes 3") && t.contains("133%"),
        "{t}"
    );
    let o = ok(&[
        "encode",
        p(&input),
        "-o",
        p(&tmp.path().join("b")),
        "--code",
        "rs:4,2",
        "--chunk-bytes",
        "4KiB",
    ]);
    assert!(
        !String::from_utf8_lossy(&o.stderr).contains("warning"),
        "{}",
        text(&o)
    );
    // A file smaller than one stripe is not warned about: the chunk size does not matter.
    fs::write(&input, b"tiny").unwrap();
    let o = ok(&[
        "encode",
        p(&input),
        "-o",
        p(&tmp.path().join("c")),
        "--code",
        "rs:4,2",
    ]);
    assert!(
        !String::from_utf8_lossy(&o.stderr).contains("warning"),
        "{}",
        text(&o)
    );
}

/// Runs `inec args` under a pseudo-terminal (util-linux `script`), returning what the terminal
/// showed, or `None` without `script` (the caller skips, or fails under CI).
fn on_a_terminal(args: &[&str]) -> Option<String> {
    let cmd = std::iter::once(INEC)
        .chain(args.iter().copied())
        .map(|a| format!("'{a}'"))
        .collect::<Vec<_>>()
        .join(" ");
    let o = Command::new("script")
        .args(["-q", "-e", "-c", &cmd, "/dev/null"])
        .env_remove("INEC_NO_PROGRESS")
        .stdin(Stdio::null())
        .output()
        .ok()?;
    assert!(o.status.success(), "script: {}", text(&o));
    Some(String::from_utf8_lossy(&o.stdout).into_owned())
}

#[test]
fn progress_bars_on_a_terminal_only() {
    let tmp = tempfile::tempdir().unwrap();
    let input = tmp.path().join("input");
    let data: Vec<u8> = (0..48u32 << 20).map(|i| (i % 251) as u8).collect();
    fs::write(&input, &data).unwrap();
    let dir = tmp.path().join("chunks");
    // Piped: nothing but the result lines.
    let o = ok(&[
        "encode",
        p(&input),
        "-o",
        p(&dir),
        "--code",
        "rs:6,3",
        "--chunk-bytes",
        "64KiB",
    ]);
    assert!(
        o.stderr.is_empty(),
        "piped encode wrote to stderr: {}",
        text(&o)
    );
    let o = ok(&["decode", p(&dir), "-o", p(&tmp.path().join("out"))]);
    assert!(o.stderr.is_empty(), "{}", text(&o));
    let o = ok(&["verify", p(&dir)]);
    assert!(
        !String::from_utf8_lossy(&o.stdout).contains('\r'),
        "{}",
        text(&o)
    );
    assert!(o.stderr.is_empty(), "{}", text(&o));
    // On a terminal: a bar (drawn with carriage returns) for each.
    let Some(shown) = on_a_terminal(&["decode", p(&dir), "-o", p(&tmp.path().join("out2"))]) else {
        harness::skip::skip_or_fail(
            "`script` (for the terminal half)",
            "Debian package bsdutils (util-linux)",
        );
        return;
    };
    assert!(
        shown.contains("decode [") && shown.contains('\r'),
        "{shown:?}"
    );
    let shown = on_a_terminal(&[
        "encode",
        p(&input),
        "-o",
        p(&dir),
        "--code",
        "rs:6,3",
        "--chunk-bytes",
        "64KiB",
        "--force",
    ])
    .unwrap();
    assert!(shown.contains("encode ["), "{shown:?}");
    assert!(fs::read(tmp.path().join("out2")).unwrap() == data);
}

#[cfg(feature = "bench")]
#[test]
fn bench_codec_takes_the_new_and_the_old_spellings() {
    let run_codes = |spelling: &[&str]| -> Vec<String> {
        let mut args = vec!["bench", "codec"];
        args.extend_from_slice(spelling);
        args.extend_from_slice(&[
            "--libraries",
            "inec",
            "--ops",
            "encode",
            "--cache",
            "hot",
            "--threads",
            "1",
            "--rounds",
            "1",
            "--round-ms",
            "1",
            "--json",
        ]);
        let o = ok(&args);
        let mut seen: Vec<String> = String::from_utf8(o.stdout)
            .unwrap()
            .lines()
            .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
            .map(|v| format!("{} {} {}", v["code"], v["k"], v["chunk_bytes"]))
            .collect();
        seen.sort();
        let table = String::from_utf8_lossy(&o.stderr).into_owned();
        assert!(
            table.contains("rs:3,2") && !table.contains("rs(3,2)"),
            "{table}"
        );
        seen
    };
    let new = run_codes(&[
        "--code",
        "rs:3,2",
        "--code",
        "lrc:4,2,1",
        "--chunk-bytes",
        "4KiB",
    ]);
    let old = run_codes(&["--codes", "rs:3,2;lrc:4,2,1", "--chunk-sizes", "4K"]);
    assert_eq!(new.len(), 2, "{new:?}");
    assert_eq!(new, old);
}

#[cfg(feature = "bench")]
#[test]
fn bench_primitives_runs_what_fits_the_cluster_and_says_what_it_skipped() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("cluster");
    ok(&["cluster", "up", "--nodes", "4", "--dir", p(&dir)]);
    let out = tmp.path().join("reports");
    let o = run(&[
        "bench",
        "primitives",
        "--dir",
        p(&dir),
        "--code",
        "rs:2,1",
        "--code",
        "rs:6,3",
        "--chunk-bytes",
        "4KiB",
        "--reps",
        "1",
        "--window",
        "2",
        "--out",
        p(&out),
        "--json",
    ]);
    let none_fit = run(&[
        "bench",
        "primitives",
        "--dir",
        p(&dir),
        "--code",
        "rs:6,3",
        "--chunk-bytes",
        "4KiB",
        "--reps",
        "1",
        "--out",
        p(&out),
    ]);
    ok(&["cluster", "down", "--dir", p(&dir)]);
    assert!(o.status.success(), "{}", text(&o));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("skipped rs:6,3: it needs 10 nodes (an agent + 9 chunks), the cluster has 4"),
        "{err}"
    );
    let rows = String::from_utf8_lossy(&o.stdout);
    assert!(
        rows.contains("\"rs:2,1\"") && !rows.contains("\"rs:6,3\""),
        "{rows}"
    );
    assert!(!none_fit.status.success());
    assert!(
        text(&none_fit).contains("no code fits the cluster's 4 nodes"),
        "{}",
        text(&none_fit)
    );
}
