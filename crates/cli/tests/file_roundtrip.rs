//! `inec encode` / `decode` / `verify` run as the real binary on real files: sizes from empty
//! to 256 MiB, chunk files deleted, truncated and bit-flipped, RS (both matrices) and LRC.

use std::fs::{self, File, OpenOptions};
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

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
        let o = ok(&["decode", p(&self.path("chunks")), "-o", p(&out)]);
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
    let v = ok(&["verify", p(&dir)]);
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
    ok(&["verify", p(&dir)]);
    for i in [0, 4, 7] {
        fs::remove_file(chunk(&dir, i)).unwrap();
    }
    let o = c.decode_equals(&data);
    assert!(text(&o).contains("rebuilt"), "{}", text(&o));
    let v = ok(&["verify", p(&dir)]);
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
    assert!(o.contains("chunk-002: 1 corrupt stripe"), "{o}");
    assert!(o.contains("crc32c mismatch"), "{o}");
    let v = ok(&["verify", p(&dir)]);
    let v = text(&v);
    assert!(v.contains("chunk-000  corrupt: 2 of 50"), "{v}");
    assert!(v.contains("degraded but recoverable"), "{v}");
    // One more flip makes stripe 7 lose three chunks: not recoverable, and no output.
    flip_bit(&chunk(&dir, 0), payload_offset(1000, 7) + 3);
    let v = fails(&["verify", p(&dir)]);
    assert!(text(&v).contains("not recoverable"), "{}", text(&v));
    let out = c.path("output");
    fs::write(&out, b"previous contents").unwrap();
    let d = fails(&["decode", p(&dir), "-o", p(&out)]);
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
    let v = ok(&["verify", p(&dir)]);
    let v = text(&v);
    assert!(v.contains("chunk-001  corrupt header"), "{v}");
    assert!(v.contains("header checksum mismatch"), "{v}");
    assert!(v.contains("chunk-003: truncated"), "{v}");
    c.decode_equals(&data);
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
    let v = fails(&["verify", p(&dir)]);
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
    ok(&["verify", p(&dir)]);

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
    fails(&["verify", p(&dir)]);
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
        text(&o).contains("chunk-002: belongs to another encoded file"),
        "{}",
        text(&o)
    );
}

#[test]
fn bad_arguments_are_refused() {
    let c = Case::new();
    let input = c.path("input");
    fs::write(&input, b"x").unwrap();
    let dir = c.path("chunks");
    let d = p(&dir);
    let i = p(&input);
    fails(&["encode", i, "-o", d]);
    fails(&["encode", i, "-o", d, "--k", "4"]);
    fails(&[
        "encode", i, "-o", d, "--k", "4", "--m", "2", "--lrc", "4,2,2",
    ]);
    fails(&["encode", i, "-o", d, "--lrc", "6,2"]);
    fails(&[
        "encode",
        i,
        "-o",
        d,
        "--k",
        "4",
        "--m",
        "2",
        "--chunk-bytes",
        "0",
    ]);
    fails(&[
        "encode",
        i,
        "-o",
        d,
        "--k",
        "4",
        "--m",
        "2",
        "--chunk-bytes",
        "3XB",
    ]);
    // gf_gen_rs_matrix is not MDS for m = 4 beyond k = 21.
    fails(&[
        "encode",
        i,
        "-o",
        d,
        "--k",
        "30",
        "--m",
        "4",
        "--matrix",
        "vandermonde",
    ]);
    fails(&[
        "encode",
        p(&c.path("absent")),
        "-o",
        d,
        "--k",
        "2",
        "--m",
        "1",
    ]);
    assert!(!chunk(&dir, 0).exists());
}

/// Runs the binary, polling its peak resident set (VmHWM of /proc/<pid>/status) until it
/// exits. VmHWM only grows, so the last reading is the peak up to that moment.
fn run_measuring_peak_rss(args: &[&str]) -> (Output, u64, Duration) {
    let start = Instant::now();
    let mut child = inec()
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let status_path = format!("/proc/{}/status", child.id());
    let mut peak_kib = 0u64;
    loop {
        if let Ok(s) = fs::read_to_string(&status_path) {
            if let Some(line) = s.lines().find(|l| l.starts_with("VmHWM:")) {
                let kib: u64 = line
                    .split_whitespace()
                    .nth(1)
                    .and_then(|x| x.parse().ok())
                    .unwrap_or(0);
                peak_kib = peak_kib.max(kib);
            }
        }
        if child.try_wait().unwrap().is_some() {
            break;
        }
        std::thread::sleep(Duration::from_millis(2));
    }
    let out = child.wait_with_output().unwrap();
    (out, peak_kib * 1024, start.elapsed())
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
    const PEAK_LIMIT_BYTES: u64 = 64 << 20;
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
    let (o, encode_peak, encode_time) =
        run_measuring_peak_rss(&["encode", p(&input), "-o", p(&dir), "--k", "6", "--m", "3"]);
    assert!(o.status.success(), "{}", text(&o));
    // Damage: one data and one parity chunk file gone, one bit flipped in another data chunk.
    fs::remove_file(chunk(&dir, 2)).unwrap();
    fs::remove_file(chunk(&dir, 7)).unwrap();
    flip_bit(&chunk(&dir, 4), payload_offset(1 << 20, 20) + 999);
    let out = c.path("output");
    let (o, decode_peak, decode_time) = run_measuring_peak_rss(&["decode", p(&dir), "-o", p(&out)]);
    assert!(o.status.success(), "{}", text(&o));
    assert!(files_equal(&input, &out), "decoded 256 MiB file differs");
    eprintln!(
        "256 MiB, rs:6,3, 1 MiB chunks: encode {encode_time:.2?} peak RSS {} KiB; decode (2 lost, 1 flipped) {decode_time:.2?} peak RSS {} KiB",
        encode_peak >> 10,
        decode_peak >> 10
    );
    assert!(encode_peak > 0 && decode_peak > 0, "no VmHWM reading");
    assert!(
        encode_peak < PEAK_LIMIT_BYTES,
        "encode peak RSS {encode_peak} bytes"
    );
    assert!(
        decode_peak < PEAK_LIMIT_BYTES,
        "decode peak RSS {decode_peak} bytes"
    );
}
