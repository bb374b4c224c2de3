//! Through the real binary: where `inec decode` writes (standard output, a FIFO or
//! device in place, never one of its inputs, an existing file only with --force), the exit
//! status of `inec verify`, and the messages that name what is wrong.

use std::fs;
use std::io::Read;
use std::os::unix::fs::FileTypeExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

fn inec() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_inec"));
    c.env_remove("INEC_NO_PROGRESS");
    c
}

fn run(args: &[&str]) -> Output {
    inec().args(args).output().expect("run inec")
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
fn exits(args: &[&str], code: i32) -> Output {
    let o = run(args);
    assert_eq!(o.status.code(), Some(code), "inec {args:?}: {}", text(&o));
    o
}

fn p(path: &Path) -> &str {
    path.to_str().unwrap()
}

fn data(len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| (i * 7 % 251) as u8 ^ (i >> 9) as u8)
        .collect()
}

/// A temporary directory with `input` (of `len` bytes) encoded into `chunks/` with RS(4,2).
struct Case {
    tmp: tempfile::TempDir,
    data: Vec<u8>,
}

impl Case {
    fn new(len: usize) -> Case {
        let tmp = tempfile::tempdir().unwrap();
        let data = data(len);
        fs::write(tmp.path().join("input"), &data).unwrap();
        let c = Case { tmp, data };
        exits(
            &[
                "encode",
                p(&c.path("input")),
                "-o",
                p(&c.dir()),
                "--code",
                "rs:4,2",
                "--chunk-bytes",
                "1KiB",
            ],
            0,
        );
        c
    }
    fn path(&self, name: &str) -> PathBuf {
        self.tmp.path().join(name)
    }
    fn dir(&self) -> PathBuf {
        self.path("chunks")
    }
    fn chunk(&self, i: usize) -> PathBuf {
        self.dir().join(format!("chunk-{i:03}"))
    }
}

#[test]
fn decode_writes_standard_output_without_o_or_with_dash() {
    let c = Case::new(50_000);
    let o = exits(&["decode", p(&c.dir())], 0);
    assert!(
        o.stdout == c.data,
        "stdout is not the file: {}",
        o.stdout.len()
    );
    assert!(String::from_utf8_lossy(&o.stderr).contains("into standard output"));
    let o = inec()
        .current_dir(c.tmp.path())
        .args(["decode", "chunks", "-o", "-"])
        .output()
        .unwrap();
    assert!(o.status.success() && o.stdout == c.data, "{}", text(&o));
    assert!(!c.path("-").exists(), "a file named - was written");
}

#[test]
fn decode_writes_into_a_fifo_in_place() {
    let c = Case::new(300_000);
    let fifo = c.path("fifo");
    assert!(Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .unwrap()
        .success());
    let reader = {
        let fifo = fifo.clone();
        std::thread::spawn(move || {
            let mut got = Vec::new();
            fs::File::open(&fifo)
                .unwrap()
                .read_to_end(&mut got)
                .unwrap();
            got
        })
    };
    exits(&["decode", p(&c.dir()), "-o", p(&fifo)], 0);
    assert!(
        reader.join().unwrap() == c.data,
        "the FIFO's reader got other bytes"
    );
    assert!(
        fs::metadata(&fifo).unwrap().file_type().is_fifo(),
        "the FIFO was replaced"
    );
}

#[test]
fn decode_writes_into_a_device_in_place() {
    let c = Case::new(20_000);
    let dev = c.path("null");
    // A copy of /dev/null (needs CAP_MKNOD: root, as the tests run in CI, where a refusal
    // fails the test).
    let made = Command::new("mknod")
        .args([p(&dev), "c", "1", "3"])
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !made {
        harness::skip::skip_or_fail(
            "permission to make a device node (mknod)",
            "root or CAP_MKNOD, and coreutils' mknod",
        );
        return;
    }
    exits(&["decode", p(&c.dir()), "-o", p(&dev)], 0);
    let meta = fs::metadata(&dev).unwrap();
    assert!(
        meta.file_type().is_char_device(),
        "the device became {meta:?}"
    );
}

#[test]
fn decode_refuses_an_output_that_is_one_of_its_inputs() {
    let c = Case::new(20_000);
    let before = fs::read(c.chunk(0)).unwrap();
    let o = exits(&["decode", p(&c.dir()), "-o", p(&c.chunk(0))], 1);
    assert!(
        text(&o).contains("one of the chunk files being decoded"),
        "{}",
        text(&o)
    );
    // Also with --force, through a symlink, and as a chunk name not yet taken.
    exits(&["decode", p(&c.dir()), "-o", p(&c.chunk(1)), "--force"], 1);
    let link = c.path("link");
    std::os::unix::fs::symlink(c.chunk(2), &link).unwrap();
    let o = exits(&["decode", p(&c.dir()), "-o", p(&link), "--force"], 1);
    assert!(text(&o).contains("chunk-002"), "{}", text(&o));
    let o = exits(&["decode", p(&c.dir()), "-o", p(&c.chunk(9))], 1);
    assert!(
        text(&o).contains("would be chunk file chunk-009 of the directory being decoded"),
        "{}",
        text(&o)
    );
    assert!(!c.chunk(9).exists());
    assert_eq!(fs::read(c.chunk(0)).unwrap(), before);
    exits(&["verify", p(&c.dir())], 0);
}

#[test]
fn an_existing_file_is_replaced_only_with_force() {
    let c = Case::new(20_000);
    let out = c.path("out");
    fs::write(&out, b"keep me").unwrap();
    let o = exits(&["decode", p(&c.dir()), "-o", p(&out)], 1);
    assert!(
        text(&o).contains("exists; pass --force to replace it"),
        "{}",
        text(&o)
    );
    assert_eq!(fs::read(&out).unwrap(), b"keep me");
    exits(&["decode", p(&c.dir()), "-o", p(&out), "--force"], 0);
    assert_eq!(fs::read(&out).unwrap(), c.data);
    // A new file needs no --force.
    exits(&["decode", p(&c.dir()), "-o", p(&c.path("new"))], 0);
    assert_eq!(fs::read(c.path("new")).unwrap(), c.data);
}

#[test]
fn an_output_in_a_missing_directory_says_so() {
    let c = Case::new(1_000);
    let out = c.path("no/such/dir/out");
    let o = exits(&["decode", p(&c.dir()), "-o", p(&out)], 1);
    let t = text(&o);
    assert!(t.contains("does not exist"), "{t}");
    assert!(t.contains("no/such/dir"), "{t}");
    assert!(!t.contains("cannot list"), "{t}");
}

#[test]
fn verify_exit_status_tells_intact_degraded_lost_and_usage() {
    let c = Case::new(20_000);
    let o = exits(&["verify", p(&c.dir())], 0);
    assert!(text(&o).contains("status: ok"), "{}", text(&o));
    fs::remove_file(c.chunk(1)).unwrap();
    let o = exits(&["verify", p(&c.dir())], 1);
    assert!(
        text(&o).contains("status: degraded but recoverable"),
        "{}",
        text(&o)
    );
    fs::remove_file(c.chunk(5)).unwrap();
    exits(&["verify", p(&c.dir())], 1);
    fs::remove_file(c.chunk(3)).unwrap();
    let o = exits(&["verify", p(&c.dir())], 3);
    assert!(text(&o).contains("status: lost"), "{}", text(&o));
    // Usage errors and nothing to check.
    exits(&["verify"], 2);
    exits(&["verify", p(&c.dir()), "--no-such-flag"], 2);
    let o = exits(&["verify", p(&c.path("absent"))], 2);
    assert!(text(&o).contains("does not exist"), "{}", text(&o));
    fs::create_dir(c.path("empty")).unwrap();
    exits(&["verify", p(&c.path("empty"))], 2);
    // Every header unreadable: lost.
    for i in [0, 2, 4] {
        fs::write(c.chunk(i), b"not a chunk file").unwrap();
    }
    exits(&["verify", p(&c.dir())], 3);
    // The codes are documented.
    for args in [&["verify", "--help"][..], &["--help"][..]] {
        let h = String::from_utf8(exits(args, 0).stdout).unwrap();
        for s in ["0 intact", "1 degraded but", "3 lost", "2 usage error"] {
            assert!(h.contains(s), "{args:?}: no {s:?} in\n{h}");
        }
    }
}

#[test]
fn messages_name_what_is_wrong() {
    // A chunk file of another encode is named as such, not as missing.
    let a = Case::new(20_000);
    let b = Case::new(30_000);
    fs::copy(b.chunk(3), a.chunk(3)).unwrap();
    let o = exits(&["verify", p(&a.dir())], 1);
    let t = text(&o);
    assert!(
        t.contains("chunk-003  a chunk file of another encoded file (rs:4,2, 30000 bytes"),
        "{t}"
    );
    assert!(!t.contains("chunk-003  missing"), "{t}");
    // A stripe that cannot be decoded lists every chunk missing from it.
    fs::remove_file(a.chunk(5)).unwrap();
    let mut bytes = fs::read(a.chunk(0)).unwrap();
    bytes[64 + 2 * 1028] ^= 1;
    fs::write(a.chunk(0), bytes).unwrap();
    let o = exits(&["decode", p(&a.dir()), "-o", p(&a.path("out"))], 1);
    let t = text(&o);
    for s in [
        "cannot decode stripe 2 of 5",
        "chunk-000: crc32c mismatch",
        "chunk-003: a chunk file of another encoded file",
        "chunk-005: missing (no file)",
    ] {
        assert!(t.contains(s), "no {s:?} in {t}");
    }
    assert!(!a.path("out").exists());
    // A missing code names the spelling and its kinds.
    let o = exits(&["encode", p(&a.path("input")), "-o", p(&a.path("x"))], 2);
    let t = text(&o);
    assert!(
        t.contains("--code rs:K,M") && t.contains("lrc:K,L,R"),
        "{t}"
    );
}

/// The write end of a pipe whose read end is already closed: every write to it fails with
/// EPIPE, whenever the writer gets to it. (The read end is the standard input of an `inec
/// --version`, which never reads it and has exited.)
fn pipe_without_reader() -> Stdio {
    let mut reader = inec()
        .arg("--version")
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .spawn()
        .expect("run inec --version");
    let write_end = reader.stdin.take().expect("its stdin");
    assert!(reader.wait().unwrap().success());
    Stdio::from(write_end)
}

/// Exit status 141 (128 + SIGPIPE) and no error message: `inec` ended as `head` makes a
/// coreutils program end.
#[track_caller]
fn ended_by_closed_stdout(args: &[&str], o: &Output) {
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        !err.contains("panicked") && !err.contains("Error") && !err.contains("Broken pipe"),
        "inec {args:?}: {}",
        text(o)
    );
    assert_eq!(o.status.code(), Some(141), "inec {args:?}: {}", text(o));
}

/// `inec … | head -1`: every command that prints ends quietly, with status 141, when the
/// reader of its standard output has gone, whether before it wrote anything or after one line.
#[test]
fn a_closed_standard_output_ends_a_command_quietly_with_141() {
    let c = Case::new(20_000);
    let dir = c.dir();
    let plan = [
        "plan",
        "--scheme",
        "triec",
        "--code",
        "rs:6,3",
        "--lost",
        "0",
        "--chunk-bytes",
        "1MiB",
    ];
    let mut commands: Vec<Vec<&str>> = vec![
        vec!["--help"],
        vec!["--version"],
        vec!["plan", "--help"],
        vec!["model"],
        vec!["model", "--grid"],
        vec!["model", "--json"],
        vec!["model", "--nodes", "20", "--code", "rs:6,3"],
        plan.to_vec(),
        [&plan[..], &["--dot"]].concat(),
        [&plan[..], &["--json"]].concat(),
        vec!["verify", p(&dir)],
        vec!["decode", p(&dir)],
    ];
    let bench = [
        "bench",
        "codec",
        "--code",
        "rs:3,2",
        "--chunk-bytes",
        "1KiB",
        "--ops",
        "encode",
        "--cache",
        "hot",
        "--threads",
        "1",
        "--libraries",
        "inec",
        "--rounds",
        "1",
        "--round-ms",
        "1",
    ];
    if cfg!(feature = "bench") {
        commands.push(bench.to_vec());
        commands.push([&bench[..], &["--json"]].concat());
    }
    for args in &commands {
        let o = inec()
            .args(args)
            .stdout(pipe_without_reader())
            .output()
            .unwrap();
        ended_by_closed_stdout(args, &o);
    }
    // The first bytes read, then the pipe closed, with more to come than a pipe holds (64 KiB;
    // 1 MiB with 64 KiB pages).
    let big = Case::new(4 << 20);
    let big_dir = big.dir();
    {
        let args = ["decode", p(&big_dir)];
        let mut child = inec()
            .args(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut first = [0u8; 64];
        child.stdout.take().unwrap().read_exact(&mut first).unwrap();
        let o = child.wait_with_output().unwrap();
        ended_by_closed_stdout(&args, &o);
    }
}
