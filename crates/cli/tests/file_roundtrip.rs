//! `inec encode` / `decode` / `verify` run as the real binary on real files: sizes from empty
//! to 256 MiB (under an address-space limit), chunk files deleted, truncated, bit-flipped and
//! rewritten with valid checksums, crafted headers, RS (both matrices) and LRC.

use std::fs::{self, File, OpenOptions};
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use codes::Code;
use file::chunk_file::{stripe_crc32c, ChunkHeader, MAX_FILE_BYTES};

use rand::rngs::SmallRng;
use rand::{RngCore, SeedableRng};

const HEADER_BYTES: u64 = 64;

fn inec() -> Command {
    Command::new(env!("CARGO_BIN_EXE_inec"))
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
fn ok(args: &[&str]) -> Output {
    let o = run(args);
    assert!(o.status.success(), "inec {args:?} failed: {}", text(&o));
    o
}

/// Runs `inec verify DIR` and checks its exit status (0 intact, 1 degraded, 3 lost).
#[track_caller]
fn verify_exits(dir: &Path, code: i32) -> Output {
    let o = run(&["verify", p(dir)]);
    assert_eq!(o.status.code(), Some(code), "inec verify: {}", text(&o));
    o
}

#[track_caller]
fn fails(args: &[&str]) -> Output {
    let o = run(args);
    assert!(
        !o.status.success(),
        "inec {args:?} should fail: {}",
        text(&o)
    );
    o
}

fn random_bytes(len: usize, seed: u64) -> Vec<u8> {
    let mut v = vec![0u8; len];
    SmallRng::seed_from_u64(seed).fill_bytes(&mut v);
    v
}

fn p(path: &Path) -> &str {
    path.to_str().unwrap()
}

fn chunk(dir: &Path, i: usize) -> PathBuf {
    dir.join(format!("chunk-{i:03}"))
}

/// Flips one bit at `offset` of a file.
fn flip_bit(path: &Path, offset: u64) {
    let mut f = OpenOptions::new()
        .read(true)
        .write(true)
        .open(path)
        .unwrap();
    let mut b = [0u8];
    f.seek(SeekFrom::Start(offset)).unwrap();
    f.read_exact(&mut b).unwrap();
    b[0] ^= 0x08;
    f.seek(SeekFrom::Start(offset)).unwrap();
    f.write_all(&b).unwrap();
}

/// Offset of a byte inside the payload of `stripe` in a chunk file with full-stripe chunk
/// size `chunk_bytes` (docs/chunk-format.md).
fn payload_offset(chunk_bytes: u64, stripe: u64) -> u64 {
    HEADER_BYTES + stripe * (chunk_bytes + 4) + 1
}

/// Leftover temporary files (names starting with '.') in a directory.
fn hidden_files(dir: &Path) -> Vec<String> {
    fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with('.'))
        .collect()
}

struct Case {
    tmp: tempfile::TempDir,
}

impl Case {
    fn new() -> Case {
        Case {
            tmp: tempfile::tempdir().unwrap(),
        }
    }
    fn path(&self, name: &str) -> PathBuf {
        self.tmp.path().join(name)
    }
    /// Writes `data` as the input file and encodes it with `code_args` into `chunks/`.
    fn encode(&self, data: &[u8], code_args: &[&str]) -> PathBuf {
        let input = self.path("input");
        fs::write(&input, data).unwrap();
        let dir = self.path("chunks");
        let mut args = vec!["encode", p(&input), "-o", p(&dir)];
        args.extend_from_slice(code_args);
        ok(&args);
        dir
    }
    /// Decodes `chunks/` and asserts the output equals `data`.
    #[track_caller]
    fn decode_equals(&self, data: &[u8]) -> Output {
        let out = self.path("output");
        let _ = fs::remove_file(&out);
        let o = ok(&["decode", p(&self.path("chunks")), "-o", p(&out), "--force"]);
        let got = fs::read(&out).unwrap();
        assert_eq!(got.len(), data.len(), "decoded length");
        assert!(got == data, "decoded bytes differ");
        assert!(hidden_files(self.tmp.path()).is_empty());
        o
    }
}

#[test]
fn empty_file_round_trips() {
    let c = Case::new();
    let dir = c.encode(&[], &["--k", "4", "--m", "2"]);
    for i in 0..6 {
        assert_eq!(fs::metadata(chunk(&dir, i)).unwrap().len(), HEADER_BYTES);
    }
    assert!(!chunk(&dir, 6).exists());
    assert!(hidden_files(&dir).is_empty());
    c.decode_equals(&[]);
    fs::remove_file(chunk(&dir, 0)).unwrap();
    fs::remove_file(chunk(&dir, 5)).unwrap();
    c.decode_equals(&[]);
    let v = verify_exits(&dir, 1);
    assert!(
        text(&v).contains("degraded but recoverable"),
        "{}",
        text(&v)
    );
}

#[test]
fn one_byte_file_rs_and_lrc() {
    for code in [
        &["--k", "6", "--m", "3"][..],
        &["--lrc", "6,2,2"][..],
        &["--k", "1", "--m", "1"][..],
    ] {
        let c = Case::new();
        let dir = c.encode(&[0xa5], code);
        // One stripe of one-byte chunks: header, 1 byte, crc32c.
        assert_eq!(
            fs::metadata(chunk(&dir, 0)).unwrap().len(),
            HEADER_BYTES + 5
        );
        c.decode_equals(&[0xa5]);
        fs::remove_file(chunk(&dir, 0)).unwrap();
        c.decode_equals(&[0xa5]);
    }
}

#[test]
fn odd_size_many_stripes_with_deleted_chunks() {
    let data = random_bytes(1_000_003, 1);
    let c = Case::new();
    let dir = c.encode(&data, &["--k", "6", "--m", "3", "--chunk-bytes", "4096"]);
    // 40 full stripes of 6 × 4096 bytes, then 16 963 bytes in chunks of 2828.
    let expected = HEADER_BYTES + 40 * (4096 + 4) + 2828 + 4;
    for i in 0..9 {
        assert_eq!(fs::metadata(chunk(&dir, i)).unwrap().len(), expected);
    }
    // The data chunks hold the input in order: chunk 1 of stripe 0 is bytes 4096..8192.
    let c1 = fs::read(chunk(&dir, 1)).unwrap();
    assert_eq!(&c1[64..64 + 4096], &data[4096..8192]);
    c.decode_equals(&data);
    verify_exits(&dir, 0);
    for i in [0, 4, 7] {
        fs::remove_file(chunk(&dir, i)).unwrap();
    }
    let o = c.decode_equals(&data);
    assert!(text(&o).contains("rebuilt"), "{}", text(&o));
    let v = verify_exits(&dir, 1);
    let v = text(&v);
    assert!(v.contains("chunk-004  missing"), "{v}");
    assert!(v.contains("degraded but recoverable"), "{v}");
}

#[test]
fn every_data_chunk_lost_vandermonde() {
    let data = random_bytes(300_001, 2);
    let c = Case::new();
    let dir = c.encode(
        &data,
        &[
            "--k",
            "10",
            "--m",
            "4",
            "--matrix",
            "vandermonde",
            "--chunk-bytes",
            "1KiB",
        ],
    );
    c.decode_equals(&data);
    for i in [0, 3, 6, 9] {
        fs::remove_file(chunk(&dir, i)).unwrap();
    }
    c.decode_equals(&data);
}

#[test]
fn cauchy_rs_loses_all_parity_or_all_tolerated_data() {
    let data = random_bytes(123_457, 3);
    for lost in [[0, 1, 2], [3, 4, 5], [0, 2, 5]] {
        let c = Case::new();
        let dir = c.encode(&data, &["--k", "3", "--m", "3", "--chunk-bytes", "777"]);
        for i in lost {
            fs::remove_file(chunk(&dir, i)).unwrap();
        }
        c.decode_equals(&data);
    }
}

#[test]
fn bit_flips_are_detected_and_repaired_per_stripe() {
    let data = random_bytes(200_000, 4);
    let c = Case::new();
    // RS(4,2), 1000-byte chunks: 50 stripes, all full.
    let dir = c.encode(&data, &["--k", "4", "--m", "2", "--chunk-bytes", "1000"]);
    // Every chunk file gets damaged somewhere, but no stripe loses more than 2 chunks.
    for (i, stripe) in [(0, 0), (1, 0), (2, 7), (3, 7), (4, 49), (5, 49), (0, 30)] {
        flip_bit(&chunk(&dir, i), payload_offset(1000, stripe) + 17);
    }
    let o = c.decode_equals(&data);
    let o = text(&o);
    assert!(
        o.contains("chunk-002: 1 damaged stripe(s); stripe 7: crc32c mismatch"),
        "{o}"
    );
    // Decode reads parity only where a data chunk is bad: chunks 4 and 5 (damaged in stripe
    // 49 only) are not read at all.
    assert!(
        o.contains("(4 chunk file(s) with damaged stripes, 5 data chunk(s) rebuilt from parity)"),
        "{o}"
    );
    assert!(!o.contains("unusable"), "{o}");
    let v = verify_exits(&dir, 1);
    let v = text(&v);
    assert!(v.contains("chunk-000  corrupt: 2 of 50"), "{v}");
    // Each stripe is named once, not again inside the reason.
    assert!(v.contains("; stripe 30: crc32c mismatch (stored"), "{v}");
    assert!(!v.contains("of chunk"), "{v}");
    assert!(v.contains("degraded but recoverable"), "{v}");
    assert!(v.contains("the data decodes and matches its crc32c"), "{v}");
    // One more flip makes stripe 7 lose three chunks: not recoverable, and no output.
    flip_bit(&chunk(&dir, 0), payload_offset(1000, 7) + 3);
    let v = verify_exits(&dir, 3);
    assert!(text(&v).contains("not recoverable"), "{}", text(&v));
    let out = c.path("output");
    fs::write(&out, b"previous contents").unwrap();
    let d = fails(&["decode", p(&dir), "-o", p(&out), "--force"]);
    let d = text(&d);
    assert!(d.contains("stripe 7"), "{d}");
    assert!(d.contains("chunk-000"), "{d}");
    assert_eq!(fs::read(&out).unwrap(), b"previous contents");
    assert!(hidden_files(c.tmp.path()).is_empty());
}

#[test]
fn corrupt_header_and_truncated_file_count_as_lost() {
    let data = random_bytes(50_000, 5);
    let c = Case::new();
    let dir = c.encode(&data, &["--k", "5", "--m", "2", "--chunk-bytes", "2000"]);
    // A flipped header bit loses chunk 1 entirely; chunk 3 is cut in the middle of stripe 2.
    flip_bit(&chunk(&dir, 1), 33);
    let f = OpenOptions::new().write(true).open(chunk(&dir, 3)).unwrap();
    f.set_len(HEADER_BYTES + 2 * 2004 + 100).unwrap();
    let v = verify_exits(&dir, 1);
    let v = text(&v);
    assert!(v.contains("chunk-001  corrupt header"), "{v}");
    assert!(v.contains("header checksum mismatch"), "{v}");
    assert!(v.contains("chunk-003: truncated"), "{v}");
    let d = text(&c.decode_equals(&data));
    assert!(
        d.contains("(1 chunk file(s) unusable, 1 chunk file(s) with damaged stripes, "),
        "{d}"
    );
    // Losing one more chunk file leaves stripes 0 and 1 recoverable but not stripe 2.
    fs::remove_file(chunk(&dir, 6)).unwrap();
    let out = c.path("output");
    let _ = fs::remove_file(&out);
    let d = fails(&["decode", p(&dir), "-o", p(&out)]);
    assert!(text(&d).contains("stripe 2"), "{}", text(&d));
    assert!(!out.exists());
    assert!(hidden_files(c.tmp.path()).is_empty());
}

#[test]
fn too_many_missing_is_a_clean_error() {
    let data = random_bytes(10_000, 6);
    let c = Case::new();
    let dir = c.encode(&data, &["--k", "4", "--m", "2", "--chunk-bytes", "512"]);
    for i in [0, 2, 5] {
        fs::remove_file(chunk(&dir, i)).unwrap();
    }
    let out = c.path("output");
    let d = fails(&["decode", p(&dir), "-o", p(&out)]);
    let d = text(&d);
    assert!(d.contains("3 of 6 chunk files"), "{d}");
    assert!(d.contains("chunk-002: missing"), "{d}");
    assert!(!out.exists());
    assert!(hidden_files(c.tmp.path()).is_empty());
    let v = verify_exits(&dir, 3);
    assert!(text(&v).contains("not recoverable"), "{}", text(&v));
    // Nothing at all to decode from.
    let empty = c.path("empty");
    fs::create_dir(&empty).unwrap();
    let d = fails(&["decode", p(&empty), "-o", p(&out)]);
    assert!(text(&d).contains("no chunk files"), "{}", text(&d));
}

#[test]
fn lrc_local_and_global_repair() {
    let data = random_bytes(777_777, 7);
    // LRC(6,2,2): groups {0,1,2}+6 and {3,4,5}+7, global parities 8 and 9.
    let c = Case::new();
    let dir = c.encode(&data, &["--lrc", "6,2,2", "--chunk-bytes", "10000"]);
    c.decode_equals(&data);
    fs::remove_file(chunk(&dir, 1)).unwrap();
    c.decode_equals(&data);
    for i in [3, 8, 9] {
        fs::remove_file(chunk(&dir, i)).unwrap();
    }
    c.decode_equals(&data);
    verify_exits(&dir, 1);

    // A whole group and its local parity: four losses the code cannot recover.
    let c = Case::new();
    let dir = c.encode(&data, &["--lrc", "6,2,2", "--chunk-bytes", "10000"]);
    for i in [0, 1, 2, 6] {
        fs::remove_file(chunk(&dir, i)).unwrap();
    }
    let out = c.path("output");
    let d = fails(&["decode", p(&dir), "-o", p(&out)]);
    assert!(text(&d).contains("cannot decode"), "{}", text(&d));
    assert!(!out.exists());
    verify_exits(&dir, 3);
}

#[test]
fn lrc_12_2_2_three_losses_and_flips() {
    let data = random_bytes(1_000_003, 8);
    let c = Case::new();
    let dir = c.encode(&data, &["--lrc", "12,2,2", "--chunk-bytes", "4096"]);
    for i in [0, 7, 15] {
        fs::remove_file(chunk(&dir, i)).unwrap();
    }
    flip_bit(&chunk(&dir, 5), payload_offset(4096, 3));
    c.decode_equals(&data);
}

#[test]
fn refuses_to_overwrite_without_force() {
    let data = random_bytes(5000, 9);
    let c = Case::new();
    let dir = c.encode(&data, &["--k", "8", "--m", "4", "--chunk-bytes", "100"]);
    let input = c.path("input");
    let e = fails(&["encode", p(&input), "-o", p(&dir), "--k", "4", "--m", "2"]);
    assert!(text(&e).contains("--force"), "{}", text(&e));
    ok(&[
        "encode",
        p(&input),
        "-o",
        p(&dir),
        "--k",
        "4",
        "--m",
        "2",
        "--force",
    ]);
    // The wider encode's chunk-006.. are gone.
    assert!(chunk(&dir, 5).exists() && !chunk(&dir, 6).exists());
    c.decode_equals(&data);
}

#[test]
fn chunk_file_of_another_encode_is_ignored() {
    let a = random_bytes(40_000, 10);
    let b = random_bytes(40_000, 11);
    let c = Case::new();
    let dir = c.encode(&a, &["--k", "4", "--m", "2", "--chunk-bytes", "1000"]);
    let other = Case::new();
    let other_dir = other.encode(&b, &["--k", "4", "--m", "2", "--chunk-bytes", "1000"]);
    fs::copy(chunk(&other_dir, 2), chunk(&dir, 2)).unwrap();
    let o = c.decode_equals(&a);
    assert!(
        text(&o).contains("chunk-002: a chunk file of another encoded file (rs:4,2, 40000 bytes"),
        "{}",
        text(&o)
    );
}

/// Runs `args` expecting failure and a message holding every one of `expect`.
#[track_caller]
fn fails_with(args: &[&str], expect: &[&str]) {
    let o = fails(args);
    let t = text(&o);
    for e in expect {
        assert!(t.contains(e), "inec {args:?}: no {e:?} in\n{t}");
    }
}

#[test]
fn bad_arguments_are_refused() {
    let c = Case::new();
    let input = c.path("input");
    fs::write(&input, b"x").unwrap();
    let dir = c.path("chunks");
    let d = p(&dir);
    let i = p(&input);
    let enc = |extra: &[&'static str]| -> Vec<&str> {
        let mut v = vec!["encode", i, "-o", d];
        v.extend_from_slice(extra);
        v
    };
    fails_with(
        &enc(&[]),
        &["no code given: pass --code rs:K,M", "lrc:K,L,R"],
    );
    fails_with(&enc(&["--k", "4"]), &["--m <M>"]);
    fails_with(
        &enc(&["--k", "4", "--m", "2", "--lrc", "4,2,2"]),
        &["cannot be used with"],
    );
    fails_with(&enc(&["--lrc", "6,2"]), &["expected K,L,R (three numbers)"]);
    fails_with(
        &enc(&["--k", "4", "--m", "2", "--chunk-bytes", "0"]),
        &["chunk size 0 out of range 1..=1073741824 bytes"],
    );
    fails_with(
        &enc(&["--k", "4", "--m", "2", "--chunk-bytes", "3XB"]),
        &["unknown unit \"XB\""],
    );
    fails_with(
        &enc(&["--k", "0", "--m", "2"]),
        &[
            "invalid --k 0 --m 2",
            "k = 0: a stripe needs at least 1 data chunk",
        ],
    );
    fails_with(
        &enc(&["--k", "4", "--m", "300"]),
        &[
            "invalid --k 4 --m 300",
            "304 chunks per stripe, at most 256",
        ],
    );
    fails_with(
        &enc(&["--lrc", "5,2,2"]),
        &["invalid --lrc 5,2,2", "l = 2 does not divide k = 5"],
    );
    // gf_gen_rs_matrix is not MDS for m = 4 beyond k = 21.
    fails_with(
        &enc(&["--k", "30", "--m", "4", "--matrix", "vandermonde"]),
        &["not mds for k = 30, m = 4", "mds only up to k = 21"],
    );
    // n · chunk_bytes over the 4 GiB buffer limit: refused before anything is allocated.
    fails_with(
        &enc(&["--k", "200", "--m", "50", "--chunk-bytes", "1GiB"]),
        &[
            "needs stripe buffers of 268435456000 bytes",
            "over the limit of 4294967296 bytes",
        ],
    );
    fails_with(
        &[
            "encode",
            p(&c.path("absent")),
            "-o",
            d,
            "--k",
            "2",
            "--m",
            "1",
        ],
        &["cannot open", "absent"],
    );
    // An output "directory" that is a regular file.
    let plain = c.path("plain");
    fs::write(&plain, b"not a directory").unwrap();
    fails_with(
        &["encode", i, "-o", p(&plain), "--k", "2", "--m", "1"],
        &["exists and is not a directory"],
    );
    assert!(!chunk(&dir, 0).exists());
    assert!(!dir.exists() || hidden_files(&dir).is_empty());

    // decode -o <dir>
    let good = c.encode(b"some bytes", &["--k", "2", "--m", "1"]);
    let out_dir = c.path("outdir");
    fs::create_dir(&out_dir).unwrap();
    fails_with(
        &["decode", p(&good), "-o", p(&out_dir)],
        &["is a directory; give the path of the file to write"],
    );
    assert_eq!(fs::read_dir(&out_dir).unwrap().count(), 0);
}

/// An encode killed before it finished leaves `.chunk-NNN.<pid>.partial` files; the next one
/// removes them (and the pid-less names of older builds) but not those of a running encode.
#[test]
fn stale_partial_files_are_removed_by_the_next_run() {
    let data = random_bytes(9_000, 13);
    let c = Case::new();
    let dir = c.path("chunks");
    fs::create_dir(&dir).unwrap();
    // No process has this pid: pids stay below 2^22 on Linux.
    let dead = ".chunk-003.999999999.partial";
    let old_style = ".chunk-001.partial";
    let live = format!(".chunk-002.{}.partial", std::process::id());
    for name in [dead, old_style, live.as_str(), ".unrelated.partial"] {
        fs::write(dir.join(name), b"junk").unwrap();
    }
    let input = c.path("input");
    fs::write(&input, &data).unwrap();
    let o = ok(&["encode", p(&input), "-o", p(&dir), "--k", "3", "--m", "2"]);
    let t = text(&o);
    assert!(
        t.contains("removed 2 temporary file(s) of an interrupted encode"),
        "{t}"
    );
    let mut left = hidden_files(&dir);
    left.sort();
    assert_eq!(left, vec![live.clone(), ".unrelated.partial".to_string()]);
    c.decode_equals(&data);

    // The same for decode's temporary output.
    let out = c.path("output");
    let stale_out = c.path(".output.999999999.partial");
    fs::write(&stale_out, b"junk").unwrap();
    ok(&["decode", p(&dir), "-o", p(&out), "--force"]);
    assert!(!stale_out.exists());
    assert_eq!(fs::read(&out).unwrap(), data);
}

/// Encoding needs no memory beyond its stripe buffers: a failed allocation is reported as an
/// error and leaves nothing behind (it used to abort and leave n partial files).
#[test]
fn allocation_failure_is_an_error_and_leaves_no_files() {
    let c = Case::new();
    let input = c.path("input");
    // A sparse 64 MiB file: the first stripe uses full 16 MiB chunks, 9 · 16 MiB of buffers.
    File::create(&input).unwrap().set_len(64 << 20).unwrap();
    let dir = c.path("chunks");
    let o = run_with_address_space_limit(
        &[
            "encode",
            p(&input),
            "-o",
            p(&dir),
            "--k",
            "6",
            "--m",
            "3",
            "--chunk-bytes",
            "16MiB",
        ],
        ADDRESS_SPACE_LIMIT_BYTES,
    );
    assert!(!o.status.success(), "{}", text(&o));
    assert!(text(&o).contains("cannot allocate"), "{}", text(&o));
    assert_eq!(
        fs::read_dir(&dir).unwrap().count(),
        0,
        "files left in {dir:?}"
    );
}

/// Writes the chunk files of `code` for a crafted header claiming `file_bytes` bytes in
/// 1-byte chunks, holding only the first `records` stripes (with valid checksums).
fn write_crafted(dir: &Path, code: Code, file_bytes: u64, records: u64) {
    fs::create_dir_all(dir).unwrap();
    for i in 0..code.n() {
        let mut bytes = ChunkHeader::new(code, i, 1, file_bytes, 0)
            .unwrap()
            .to_bytes()
            .to_vec();
        for s in 0..records {
            let payload = [s as u8];
            bytes.extend_from_slice(&payload);
            bytes.extend_from_slice(&stripe_crc32c(i, s, &payload).to_le_bytes());
        }
        fs::write(chunk(dir, i), bytes).unwrap();
    }
}

/// A header with a valid checksum claiming 2^63 bytes (k = 1, m = 1, 1-byte chunks) used to
/// overflow in debug builds and make verify walk 2^63 stripes in release builds. Now such a
/// header is refused, and the largest allowed one (2^60 stripes) over short files is judged
/// at once: the stripes past the end of every file are counted in one step.
#[test]
fn crafted_huge_file_bytes_header_is_refused_or_judged_in_one_step() {
    let c = Case::new();
    let code = Code::rs(1, 1).unwrap();
    let dir = c.path("huge");
    write_crafted(&dir, code, MAX_FILE_BYTES, 2);
    // Beyond the limit: rewrite file_bytes and stripe_count, reseal the header checksum.
    let beyond = c.path("beyond");
    write_crafted(&beyond, code, MAX_FILE_BYTES, 2);
    for i in 0..2 {
        let path = chunk(&beyond, i);
        let mut b = fs::read(&path).unwrap();
        b[32..40].copy_from_slice(&(1u64 << 63).to_le_bytes());
        b[40..48].copy_from_slice(&(1u64 << 63).to_le_bytes());
        let crc = crc32c::crc32c(&b[..60]);
        b[60..64].copy_from_slice(&crc.to_le_bytes());
        fs::write(&path, b).unwrap();
    }
    let started = Instant::now();
    fails_with(
        &["verify", p(&beyond)],
        &["file_bytes 9223372036854775808 exceeds the limit of 1152921504606846976"],
    );
    fails_with(
        &["decode", p(&beyond), "-o", p(&c.path("out"))],
        &["exceeds the limit"],
    );
    let lost = (MAX_FILE_BYTES - 2).to_string();
    fails_with(
        &["verify", p(&dir)],
        &[
            "not recoverable",
            &format!("{lost} stripe(s) lost, the first is stripe 2"),
            &format!("chunk-000  corrupt: {lost} of {MAX_FILE_BYTES} stripe(s) fail; stripes 2..{MAX_FILE_BYTES}: file ends before this stripe"),
        ],
    );
    fails_with(
        &["decode", p(&dir), "-o", p(&c.path("out"))],
        &["cannot decode stripe 2 of 1152921504606846976"],
    );
    assert!(started.elapsed() < Duration::from_secs(60));
    assert!(hidden_files(c.tmp.path()).is_empty());
}

/// Rewrites the payload byte at `at` of stripe `stripe` in chunk file `index` and reseals
/// its record checksum, so only a check beyond the records can notice.
fn rewrite_resealed(dir: &Path, index: usize, chunk_bytes: u64, stripe: u64, at: u64) {
    let path = chunk(dir, index);
    let mut b = fs::read(&path).unwrap();
    let start = (HEADER_BYTES + stripe * (chunk_bytes + 4)) as usize;
    let end = start + chunk_bytes as usize;
    b[start + at as usize] ^= 0x40;
    let crc = stripe_crc32c(index, stripe, &b[start..end]);
    b[end..end + 4].copy_from_slice(&crc.to_le_bytes());
    fs::write(&path, b).unwrap();
}

#[test]
fn verify_decodes_and_checks_parity_and_content() {
    let data = random_bytes(60_000, 14);
    let args = ["--k", "4", "--m", "2", "--chunk-bytes", "1000"];
    let c = Case::new();
    let dir = c.encode(&data, &args);
    let v = text(&verify_exits(&dir, 0));
    assert!(
        v.contains("checked: the header and every stripe record's crc32c"),
        "{v}"
    );
    assert!(
        v.contains("status: ok: all 6 chunk files intact, parity consistent, content crc32c"),
        "{v}"
    );

    // A parity record rewritten with a valid checksum: the records all pass, the parity
    // check does not, and leaving each chunk out finds the one that disagrees.
    rewrite_resealed(&dir, 5, 1000, 3, 10);
    let v = text(&verify_exits(&dir, 1));
    assert!(
        v.contains("chunk-005  inconsistent: its records pass their crc32c but it disagrees with the other chunks in 1 of 15 stripe(s), the first is stripe 3"),
        "{v}"
    );
    assert!(!v.contains("chunk-004  inconsistent"), "{v}");
    assert!(v.contains("degraded but recoverable"), "{v}");
    // Decode reads only data chunks here and still rebuilds the file.
    c.decode_equals(&data);

    // A data record rewritten with a valid checksum: it is named (not the parity chunks that
    // disagree with it), and decode, after its end-to-end check fails, decodes again leaving
    // it out.
    let c = Case::new();
    let dir = c.encode(&data, &args);
    rewrite_resealed(&dir, 2, 1000, 7, 0);
    let v = text(&verify_exits(&dir, 1));
    assert!(v.contains("chunk-002  inconsistent"), "{v}");
    assert!(
        v.contains("chunk-004  ok") && v.contains("chunk-005  ok"),
        "{v}"
    );
    let d = text(&c.decode_equals(&data));
    assert!(d.contains("decoding again with every chunk read"), "{d}");
    assert!(d.contains("chunk-002: left out in 1 stripe(s)"), "{d}");

    // Two chunks altered in one stripe: no single chunk explains it, the file is lost.
    rewrite_resealed(&dir, 4, 1000, 7, 5);
    fails_with(
        &["verify", p(&dir)],
        &["no single chunk explains it", "the first is stripe 7"],
    );
    fails_with(
        &["decode", p(&dir), "-o", p(&c.path("output2"))],
        &["stripe 7 of 15", "no single chunk explains it"],
    );
    assert!(!c.path("output2").exists());

    // With a data chunk file gone, verify rebuilds it to check the content.
    let c = Case::new();
    let dir = c.encode(&data, &args);
    fs::remove_file(chunk(&dir, 1)).unwrap();
    let v = text(&verify_exits(&dir, 1));
    assert!(v.contains("the data decodes and matches its crc32c"), "{v}");
}

/// Address-space limit for the streaming test: far below the 256 MiB file, and above what
/// the binary maps at rest (about 15 MiB) plus its stripe buffers (9 MiB for rs:6,3 with
/// 1 MiB chunks).
const ADDRESS_SPACE_LIMIT_BYTES: u64 = 64 << 20;

/// Runs the binary under `prlimit --as=<limit_bytes>` (util-linux): every mapping the process
/// makes counts against the limit, so exceeding it fails the run (an allocation error) rather
/// than depending on when memory is sampled. Backtraces are off so that an error path does not
/// need memory of its own to symbolize one.
fn run_with_address_space_limit(args: &[&str], limit_bytes: u64) -> Output {
    Command::new("prlimit")
        .arg(format!("--as={limit_bytes}"))
        .arg(env!("CARGO_BIN_EXE_inec"))
        .args(args)
        .env_remove("RUST_BACKTRACE")
        .env_remove("RUST_LIB_BACKTRACE")
        .output()
        .expect("run prlimit (util-linux)")
}

fn files_equal(a: &Path, b: &Path) -> bool {
    let (mut fa, mut fb) = (File::open(a).unwrap(), File::open(b).unwrap());
    if fa.metadata().unwrap().len() != fb.metadata().unwrap().len() {
        return false;
    }
    let (mut ba, mut bb) = (vec![0u8; 1 << 20], vec![0u8; 1 << 20]);
    loop {
        let n = fa.read(&mut ba).unwrap();
        if n == 0 {
            return true;
        }
        fb.read_exact(&mut bb[..n]).unwrap();
        if ba[..n] != bb[..n] {
            return false;
        }
    }
}

#[test]
fn large_file_streams_in_bounded_memory() {
    const FILE_BYTES: usize = 256 << 20;
    let c = Case::new();
    let input = c.path("input");
    {
        let mut f = File::create(&input).unwrap();
        let mut rng = SmallRng::seed_from_u64(12);
        let mut block = vec![0u8; 1 << 20];
        // A short tail makes the last stripe a short one.
        for _ in 0..FILE_BYTES >> 20 {
            rng.fill_bytes(&mut block);
            f.write_all(&block).unwrap();
        }
        f.write_all(&block[..12_345]).unwrap();
    }
    let dir = c.path("chunks");
    let started = Instant::now();
    let o = run_with_address_space_limit(
        &["encode", p(&input), "-o", p(&dir), "--k", "6", "--m", "3"],
        ADDRESS_SPACE_LIMIT_BYTES,
    );
    let encode_time = started.elapsed();
    assert!(
        o.status.success(),
        "encode within {ADDRESS_SPACE_LIMIT_BYTES} bytes of address space: {}",
        text(&o)
    );
    // Damage: one data and one parity chunk file gone, one bit flipped in another data chunk.
    fs::remove_file(chunk(&dir, 2)).unwrap();
    fs::remove_file(chunk(&dir, 7)).unwrap();
    flip_bit(&chunk(&dir, 4), payload_offset(1 << 20, 20) + 999);
    let out = c.path("output");
    let started = Instant::now();
    let o = run_with_address_space_limit(
        &["decode", p(&dir), "-o", p(&out)],
        ADDRESS_SPACE_LIMIT_BYTES,
    );
    let decode_time = started.elapsed();
    assert!(
        o.status.success(),
        "decode within {ADDRESS_SPACE_LIMIT_BYTES} bytes of address space: {}",
        text(&o)
    );
    assert!(files_equal(&input, &out), "decoded 256 MiB file differs");
    let o = run_with_address_space_limit(&["verify", p(&dir)], ADDRESS_SPACE_LIMIT_BYTES);
    assert!(
        o.status.code() == Some(1),
        "verify within {ADDRESS_SPACE_LIMIT_BYTES} bytes of address space: {}",
        text(&o)
    );
    eprintln!(
        "256 MiB, rs:6,3, 1 MiB chunks, address space limited to {} MiB: encode {encode_time:.2?}; decode (2 lost, 1 flipped) {decode_time:.2?}",
        ADDRESS_SPACE_LIMIT_BYTES >> 20
    );
    // The limit binds: the same encode with 16 MiB chunks (144 MiB of buffers) fails.
    let o = run_with_address_space_limit(
        &[
            "encode",
            p(&input),
            "-o",
            p(&c.path("wide")),
            "--k",
            "6",
            "--m",
            "3",
            "--chunk-bytes",
            "16MiB",
        ],
        ADDRESS_SPACE_LIMIT_BYTES,
    );
    assert!(
        !o.status.success() && text(&o).contains("cannot allocate"),
        "{}",
        text(&o)
    );
}
