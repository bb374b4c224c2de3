//! The streaming encode, decode and verify over in-memory streams, and the chunk directory on
//! disk: round trips, losses, damaged records, a chunk altered with a valid record checksum,
//! foreign chunk files, inputs that change length.

use std::io::{Cursor, Write};

use codes::Code;
use file::chunk_file::{stripe_crc32c, HEADER_BYTES, RECORD_TRAILER_BYTES};
use file::{
    decode_stream, encode_stream, verify, Candidate, ChunkDir, ChunkSet, ChunkState, DecodeMode,
    FileError, Status,
};
use rand::rngs::SmallRng;
use rand::{RngCore, SeedableRng};

fn bytes(len: usize, seed: u64) -> Vec<u8> {
    let mut v = vec![0u8; len];
    SmallRng::seed_from_u64(seed).fill_bytes(&mut v);
    v
}

/// Encodes `data` into n in-memory chunk files.
fn encode(code: Code, chunk_bytes: usize, data: &[u8]) -> Vec<Vec<u8>> {
    let mut outs: Vec<Cursor<Vec<u8>>> = (0..code.n()).map(|_| Cursor::new(Vec::new())).collect();
    let mut seen = Vec::new();
    let summary = encode_stream(
        code,
        chunk_bytes,
        data.len() as u64,
        &mut &data[..],
        &mut outs,
        &mut |done| seen.push(done),
    )
    .unwrap();
    assert_eq!(summary.file_bytes, data.len() as u64);
    assert_eq!(
        seen.len() as u64,
        summary.stripes,
        "one progress call per stripe"
    );
    assert_eq!(seen.last().copied().unwrap_or(0), data.len() as u64);
    let files: Vec<Vec<u8>> = outs.into_iter().map(Cursor::into_inner).collect();
    for f in &files {
        assert_eq!(f.len() as u64, summary.chunk_file_bytes);
    }
    files
}

/// A chunk set from the files `keep` says to keep (by index).
fn set_of(files: &[Vec<u8>], keep: impl Fn(usize) -> bool) -> ChunkSet<Cursor<Vec<u8>>> {
    let candidates = files
        .iter()
        .enumerate()
        .filter(|(i, _)| keep(*i))
        .map(|(i, f)| Candidate {
            name_index: i,
            source: Ok((Cursor::new(f.clone()), f.len() as u64)),
        })
        .collect();
    ChunkSet::scan(std::path::Path::new("memory"), candidates).unwrap()
}

fn decode(set: &mut ChunkSet<Cursor<Vec<u8>>>, mode: DecodeMode) -> Result<Vec<u8>, FileError> {
    let mut out = Vec::new();
    decode_stream(set, &mut out, mode, &mut |_| {})?;
    Ok(out)
}

/// Rewrites the payload byte `at` of stripe `s` of a chunk file with chunk size `c` (every
/// stripe full) and reseals its record checksum: damage no record check can see.
fn alter_resealed(file: &mut [u8], index: usize, c: usize, s: usize, at: usize) {
    let start = HEADER_BYTES + s * (c + RECORD_TRAILER_BYTES);
    file[start + at] ^= 0x5a;
    let crc = stripe_crc32c(index, s as u64, &file[start..start + c]);
    file[start + c..start + c + 4].copy_from_slice(&crc.to_le_bytes());
}

#[test]
fn round_trips_rs_and_lrc_of_many_sizes() {
    for code in [
        Code::rs(4, 2).unwrap(),
        Code::rs(1, 1).unwrap(),
        Code::lrc(6, 2, 2).unwrap(),
    ] {
        for len in [0usize, 1, 5, 4095, 4096, 10_000, 65_537] {
            let data = bytes(len, len as u64);
            let files = encode(code, 1000, &data);
            let mut set = set_of(&files, |_| true);
            assert_eq!(
                decode(&mut set, DecodeMode::Fast).unwrap(),
                data,
                "{code} {len}"
            );
            let mut set = set_of(&files, |_| true);
            assert_eq!(decode(&mut set, DecodeMode::Checked).unwrap(), data);
            let mut set = set_of(&files, |_| true);
            let report = verify(&mut set, &mut |_| {}).unwrap();
            assert_eq!(report.status(), Status::Intact, "{code} {len}");
        }
    }
}

#[test]
fn missing_and_damaged_chunks_are_rebuilt_and_reported() {
    let code = Code::rs(4, 2).unwrap();
    let data = bytes(20_000, 1);
    let mut files = encode(code, 1000, &data);
    // Chunk 1 missing, chunk 3 with one damaged record (stripe 2).
    files[3][HEADER_BYTES + 2 * 1004 + 10] ^= 1;
    let mut set = set_of(&files, |i| i != 1);
    let mut out = Vec::new();
    let report = decode_stream(&mut set, &mut out, DecodeMode::Fast, &mut |_| {}).unwrap();
    assert_eq!(out, data);
    assert_eq!(report.unusable, vec![1]);
    assert_eq!(report.damage[3].count, 1);
    assert!(report.damage[3]
        .describe()
        .contains("stripe 2: crc32c mismatch"));

    let mut set = set_of(&files, |i| i != 1);
    let v = verify(&mut set, &mut |_| {}).unwrap();
    assert_eq!(v.status(), Status::Degraded);
    assert_eq!(v.unusable(), vec![1, 3]);
    assert_eq!(v.chunks[1], ChunkState::Absent("missing (no file)".into()));
}

#[test]
fn too_many_losses_are_lost_and_every_missing_chunk_is_named() {
    let code = Code::rs(4, 2).unwrap();
    let data = bytes(20_000, 2);
    let mut files = encode(code, 1000, &data);
    // Chunk 5 missing, chunk 0 and 4 damaged in stripe 3: stripe 3 has three losses.
    files[0][HEADER_BYTES + 3 * 1004] ^= 1;
    files[4][HEADER_BYTES + 3 * 1004] ^= 1;
    let mut set = set_of(&files, |i| i != 5);
    let err = decode(&mut set, DecodeMode::Fast).unwrap_err();
    let msg = err.to_string();
    assert!(
        matches!(err, FileError::StripeUnrecoverable { stripe: 3, .. }),
        "{msg}"
    );
    for name in ["chunk-000", "chunk-004", "chunk-005: missing (no file)"] {
        assert!(msg.contains(name), "{name} not in {msg}");
    }
    let mut set = set_of(&files, |i| i != 5);
    let v = verify(&mut set, &mut |_| {}).unwrap();
    assert_eq!(v.status(), Status::Lost);
    assert_eq!(v.lost_stripes, 1);
    assert!(
        v.why_lost()
            .contains("stripe 3 with chunk-000, chunk-004, chunk-005"),
        "{}",
        v.why_lost()
    );

    // A pattern lost before reading anything.
    let mut set = set_of(&files, |i| i < 3);
    assert!(matches!(
        set.check_recoverable(),
        Err(FileError::Unrecoverable { unusable: 3, .. })
    ));
    assert!(decode(&mut set, DecodeMode::Fast).is_err());
}

#[test]
fn one_chunk_altered_with_a_valid_checksum_is_named_and_left_out() {
    let code = Code::rs(4, 3).unwrap();
    let data = bytes(40_000, 3);
    for culprit in [1usize, 5] {
        let mut files = encode(code, 1000, &data);
        alter_resealed(&mut files[culprit], culprit, 1000, 4, 17);
        alter_resealed(&mut files[culprit], culprit, 1000, 7, 3);
        let mut set = set_of(&files, |_| true);
        let v = verify(&mut set, &mut |_| {}).unwrap();
        assert_eq!(v.status(), Status::Degraded, "culprit {culprit}");
        assert_eq!(v.unusable(), vec![culprit]);
        match &v.chunks[culprit] {
            ChunkState::Present {
                inconsistent: Some((2, 4)),
                ..
            } => {}
            other => panic!("chunk {culprit}: {other:?}"),
        }
        // The fast path reads the altered data chunk and fails the end-to-end check; the
        // checked path leaves it out.
        let mut set = set_of(&files, |_| true);
        if culprit < code.k() {
            assert!(matches!(
                decode(&mut set, DecodeMode::Fast),
                Err(FileError::ContentMismatch { .. })
            ));
        } else {
            assert_eq!(decode(&mut set, DecodeMode::Fast).unwrap(), data);
        }
        let mut set = set_of(&files, |_| true);
        let mut out = Vec::new();
        let r = decode_stream(&mut set, &mut out, DecodeMode::Checked, &mut |_| {}).unwrap();
        assert_eq!(out, data);
        assert_eq!(r.inconsistent, vec![(culprit, 2)]);
    }
}

#[test]
fn two_altered_chunks_in_one_stripe_are_not_blamed_on_one() {
    let code = Code::rs(4, 3).unwrap();
    let data = bytes(40_000, 4);
    let mut files = encode(code, 1000, &data);
    alter_resealed(&mut files[0], 0, 1000, 2, 1);
    alter_resealed(&mut files[2], 2, 1000, 2, 9);
    let mut set = set_of(&files, |_| true);
    let v = verify(&mut set, &mut |_| {}).unwrap();
    assert_eq!(v.status(), Status::Lost);
    assert_eq!(v.unresolved_stripes, 1);
    assert!(v.why_lost().contains("no single chunk explains it"));
    let mut set = set_of(&files, |_| true);
    assert!(matches!(
        decode(&mut set, DecodeMode::Checked),
        Err(FileError::StripeInconsistent { stripe: 2, .. })
    ));
}

#[test]
fn a_chunk_file_of_another_encode_is_named_as_such() {
    let code = Code::rs(4, 2).unwrap();
    let a = bytes(9_000, 5);
    let b = bytes(9_000, 6);
    let mut files = encode(code, 1000, &a);
    files[2] = encode(code, 1000, &b)[2].clone();
    let mut set = set_of(&files, |_| true);
    match &set.sources[2] {
        file::Source::Absent(why) => {
            assert!(
                why.starts_with("a chunk file of another encoded file (rs:4,2"),
                "{why}"
            )
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(decode(&mut set, DecodeMode::Fast).unwrap(), a);
}

#[test]
fn an_input_that_changes_length_is_an_error() {
    let code = Code::rs(2, 1).unwrap();
    let mut outs: Vec<Cursor<Vec<u8>>> = (0..3).map(|_| Cursor::new(Vec::new())).collect();
    let data = bytes(5000, 7);
    let e = encode_stream(code, 1000, 6000, &mut &data[..], &mut outs, &mut |_| {}).unwrap_err();
    assert!(
        matches!(
            e,
            FileError::InputShrank {
                expected: 6000,
                got: 5000
            }
        ),
        "{e}"
    );
    let mut outs: Vec<Cursor<Vec<u8>>> = (0..3).map(|_| Cursor::new(Vec::new())).collect();
    let e = encode_stream(code, 1000, 4000, &mut &data[..], &mut outs, &mut |_| {}).unwrap_err();
    assert!(matches!(e, FileError::InputGrew { expected: 4000 }), "{e}");
    let mut outs: Vec<Cursor<Vec<u8>>> = (0..3).map(|_| Cursor::new(Vec::new())).collect();
    let e = encode_stream(code, 0, 10, &mut &data[..], &mut outs, &mut |_| {}).unwrap_err();
    assert!(matches!(e, FileError::Format(_)), "{e}");
    let big = Code::rs(200, 50).unwrap();
    let e = file::check_params(big, 1 << 30, 10).unwrap_err();
    assert!(
        matches!(e, FileError::StripeBuffersTooLarge { n: 250, .. }),
        "{e}"
    );
}

#[test]
fn chunk_dir_encodes_atomically_and_refuses_to_overwrite() {
    let tmp = tempfile::tempdir().unwrap();
    let input = tmp.path().join("input");
    let data = bytes(33_333, 8);
    std::fs::write(&input, &data).unwrap();
    let dir = ChunkDir::new(tmp.path().join("chunks"));
    let code = Code::lrc(4, 2, 1).unwrap();
    let o = dir
        .encode_file(&input, code, 4096, false, &mut |_| {})
        .unwrap();
    assert_eq!(o.summary.stripes, 3);
    assert_eq!(dir.chunk_files().unwrap().len(), 7);
    let e = dir
        .encode_file(&input, code, 4096, false, &mut |_| {})
        .unwrap_err();
    assert!(matches!(e, FileError::ChunkFilesExist { .. }), "{e}");
    // Replacing with a narrower code removes the extra chunk files.
    let o = dir
        .encode_file(&input, Code::rs(2, 1).unwrap(), 4096, true, &mut |_| {})
        .unwrap();
    assert_eq!(o.extra_removed.len(), 4);
    let mut set = dir.open_set().unwrap();
    let target = tmp.path().join("out");
    std::fs::write(&target, b"old").unwrap();
    let mut out = file::AtomicFile::create(&target).unwrap();
    decode_stream(&mut set, &mut out, DecodeMode::Fast, &mut |_| {}).unwrap();
    assert_eq!(
        std::fs::read(&target).unwrap(),
        b"old",
        "not replaced before commit"
    );
    out.commit().unwrap();
    assert_eq!(std::fs::read(&target).unwrap(), data);
    // An uncommitted output leaves nothing behind.
    let mut out = file::AtomicFile::create(&tmp.path().join("other")).unwrap();
    out.write_all(b"partial").unwrap();
    drop(out);
    let names: Vec<String> = std::fs::read_dir(tmp.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert!(!names.iter().any(|n| n.contains("other")), "{names:?}");
    // Errors name what they are about.
    assert!(matches!(
        ChunkDir::new(tmp.path().join("absent")).open_set(),
        Err(FileError::NoSuchDirectory(_))
    ));
    assert!(matches!(
        ChunkDir::new(tmp.path()).open_set(),
        Err(FileError::NoChunkFiles(_))
    ));
    assert!(matches!(
        file::AtomicFile::create(&tmp.path().join("no/such/dir/out")),
        Err(FileError::NoSuchDirectory(_))
    ));
}
