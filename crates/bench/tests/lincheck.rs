//! The linearizability checker (porcupine, our Go program in `peers/porcupine/`) on histories
//! written by hand: it passes a linearizable one and refuses a stale read, an increment counted
//! twice and a lost acknowledged write, naming the operation no order explains. Needs `go`;
//! without it a test skips, saying so (`harness::skip`), or fails under CI.

use bench::nemesis::{build_checker, check, Verdict};
use load::history::{History, Op, Outcome};

fn op(client: usize, kind: &str, value: &str, call: i64, ret: i64, out: &str) -> Op {
    Op {
        client,
        key: "k".into(),
        op: kind.into(),
        value: value.into(),
        expect: String::new(),
        call,
        ret,
        outcome: Outcome::Ok,
        out: out.into(),
    }
}

fn verdict(name: &str, ops: Vec<Op>) -> Verdict {
    let checker = build_checker("go").expect("building the checker");
    let dir = std::env::temp_dir().join(format!("inec-lincheck-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join(format!("{name}.json"));
    std::fs::write(&path, serde_json::to_vec(&History { ops }).unwrap()).unwrap();
    let v = check(&checker, &path).expect("the checker runs");
    let _ = std::fs::remove_file(&path);
    v
}

#[test]
fn the_checker_passes_a_linearizable_history_and_names_what_breaks_one() {
    if !bench::peers::go_available("go") {
        harness::skip::skip_or_fail("`go` on the PATH", bench::peers::GO_PACKAGE);
        return;
    }
    let mut unknown_incr = op(1, "incr", "", 40, 45, "timed out");
    unknown_incr.outcome = Outcome::Unknown;
    let good = vec![
        op(0, "set", "a", 0, 10, "STORED"),
        op(1, "get", "", 5, 12, "hit:a"),
        op(0, "set", "7", 20, 30, "STORED"),
        op(2, "get", "", 25, 28, "hit:a"),
        unknown_incr,
        op(2, "incr", "", 50, 60, "9"),
        op(0, "get", "", 70, 80, "hit:9"),
    ];
    let v = verdict("good", good.clone());
    assert_eq!(v.result, "ok", "{v:?}");
    assert!(v.counterexample.is_none());

    // A read after the increment acknowledged returns the value before it.
    let mut stale = good.clone();
    stale.push(op(1, "get", "", 90, 95, "hit:7"));
    let v = verdict("stale", stale);
    assert_eq!(v.result, "illegal");
    let ce = v.counterexample.expect("a counterexample");
    assert_eq!(ce["culprit"]["out"], "hit:7");
    assert_eq!(ce["culprit"]["call"], 90);

    // The unknown increment and the acknowledged one both counted, and a third time.
    let mut twice = good.clone();
    twice[6].out = "hit:10".into();
    assert_eq!(verdict("twice", twice).result, "illegal");

    // An acknowledged write lost: the final read misses it.
    let mut lost = good;
    lost.push(op(3, "get", "", 100, 110, "miss"));
    let v = verdict("lost", lost);
    assert_eq!(v.result, "illegal");
    assert_eq!(v.counterexample.unwrap()["culprit"]["out"], "miss");
}
