//! Byte compatibility with ISA-L 2.31 (the real library, built by `isal-sys`): our Cauchy
//! parity equals `gf_gen_cauchy1_matrix` + `ec_encode_data` parity, our `rs-vand` parity equals
//! `gf_gen_rs_matrix` parity wherever we accept the code, and our LRC parity equals
//! `ec_encode_data` run with our LRC generator. Run with `--features isal`.
#![cfg(feature = "isal")]

use bench::isal;
use codes::{Code, Codec, MatrixKind};

/// Data chunk j, byte b: a seeded stream that differs per (k, length, j).
fn data(k: usize, len: usize, seed: u64) -> Vec<Vec<u8>> {
    (0..k)
        .map(|j| {
            let mut c = vec![0u8; len];
            bench::codec::data::fill(seed, len as u64, j as u64, &mut c);
            c
        })
        .collect()
}

fn isal_parity(generator: &[u8], k: usize, m: usize, data: &[Vec<u8>]) -> Vec<Vec<u8>> {
    let len = data[0].len();
    let tables = isal::Tables::new(k, m, &generator[k * k..]);
    let mut parity = vec![vec![0u8; len]; m];
    let ins: Vec<&[u8]> = data.iter().map(|d| &d[..]).collect();
    let mut outs: Vec<&mut [u8]> = parity.iter_mut().map(|p| &mut p[..]).collect();
    tables.encode(&ins, &mut outs);
    parity
}

fn our_parity(codec: &Codec, data: &[Vec<u8>]) -> Vec<Vec<u8>> {
    let len = data[0].len();
    let mut parity = vec![vec![0u8; len]; codec.code().parity_count()];
    let ins: Vec<&[u8]> = data.iter().map(|d| &d[..]).collect();
    let mut outs: Vec<&mut [u8]> = parity.iter_mut().map(|p| &mut p[..]).collect();
    codec.encode(&ins, &mut outs).expect("encode");
    parity
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

const CAUCHY_SHAPES: [(usize, usize); 12] = [
    (1, 1),
    (2, 1),
    (3, 2),
    (4, 3),
    (6, 3),
    (10, 4),
    (12, 4),
    (17, 5),
    (32, 8),
    (100, 20),
    (200, 55),
    (128, 127),
];

#[test]
fn cauchy_parity_equals_isal_for_many_shapes_and_lengths() {
    for (k, m) in CAUCHY_SHAPES {
        let g = isal::gen_cauchy1_matrix(k, m);
        let code = Code::rs(k, m).unwrap();
        assert_eq!(code.generator(), g, "generator of rs({k},{m})");
        // Every kernel this CPU runs, so a SIMD path cannot hide behind another.
        for kernel in gf::Kernel::available() {
            let codec = Codec::with_kernel(code, kernel);
            for len in [1, 15, 64, 333, 4096 + 7] {
                let d = data(k, len, 11);
                assert_eq!(
                    our_parity(&codec, &d),
                    isal_parity(&g, k, m, &d),
                    "rs({k},{m}) len {len} kernel {}",
                    kernel.name()
                );
            }
        }
    }
}

#[test]
fn fixed_vectors_match_isal_and_ours() {
    // Data chunk j byte b = (31·j + 7·b + 1) mod 256, 16-byte chunks.
    let pattern = |k: usize| -> Vec<Vec<u8>> {
        (0..k)
            .map(|j| (0..16).map(|b| (31 * j + 7 * b + 1) as u8).collect())
            .collect()
    };
    let d = pattern(4);
    let ours = our_parity(&Codec::new(Code::rs(4, 3).unwrap()), &d);
    let theirs = isal_parity(&isal::gen_cauchy1_matrix(4, 3), 4, 3, &d);
    assert_eq!(ours, theirs);
    assert_eq!(hex(&ours[0]), "56f4b05fed4e08311bf7d1048c2d4f23");
    assert_eq!(hex(&ours[2]), "d65d1883c53486ee0887b41569bc0cfc");

    let d = pattern(10);
    let code = Code::rs_with(10, 4, MatrixKind::Vandermonde).unwrap();
    let ours = our_parity(&Codec::new(code), &d);
    let theirs = isal_parity(&isal::gen_rs_matrix(10, 4), 10, 4, &d);
    assert_eq!(ours, theirs);
    assert_eq!(hex(&ours[3]), "68d2a72d1728d96a64074d4dd9f631f5");
}

#[test]
fn vandermonde_parity_equals_isal_where_we_accept_it() {
    let mut accepted = 0;
    for k in [1, 2, 3, 5, 8, 10, 16, 21, 22, 30, 64, 100] {
        for m in 1..=5 {
            if k + m > 256 {
                continue;
            }
            let Ok(code) = Code::rs_with(k, m, MatrixKind::Vandermonde) else {
                continue;
            };
            accepted += 1;
            let g = isal::gen_rs_matrix(k, m);
            assert_eq!(code.generator(), g, "generator of rs-vand({k},{m})");
            let codec = Codec::new(code);
            for len in [1, 100, 1031] {
                let d = data(k, len, 23);
                assert_eq!(
                    our_parity(&codec, &d),
                    isal_parity(&g, k, m, &d),
                    "rs-vand({k},{m}) len {len}"
                );
            }
        }
    }
    // m ≤ 3 is accepted for any k, and m = 4 up to k = 21 (docs/chunk-format.md, kind 2).
    assert!(
        accepted >= 40,
        "only {accepted} Vandermonde shapes accepted"
    );
}

#[test]
fn lrc_parity_equals_isal_with_our_generator() {
    for (k, l, r) in [
        (4, 2, 2),
        (6, 2, 2),
        (12, 2, 2),
        (12, 3, 2),
        (8, 4, 1),
        (20, 4, 4),
    ] {
        let code = Code::lrc(k, l, r).unwrap();
        let codec = Codec::new(code);
        let g = code.generator();
        for len in [1, 77, 4096] {
            let d = data(k, len, 5);
            assert_eq!(
                our_parity(&codec, &d),
                isal_parity(&g, k, l + r, &d),
                "lrc({k},{l},{r}) len {len}"
            );
        }
    }
}

#[test]
fn decode_by_isal_inversion_equals_our_reconstruct() {
    // RS(10,4) with data chunks 0..4 lost: ISA-L's recipe (invert the survivors' rows,
    // ec_encode_data with the inverse's rows) and our reconstruct both give the data back.
    let (k, m, len) = (10, 4, 1000);
    let code = Code::rs(k, m).unwrap();
    let codec = Codec::new(code);
    let d = data(k, len, 3);
    let parity = our_parity(&codec, &d);
    let stripe: Vec<&[u8]> = d.iter().chain(&parity).map(|c| &c[..]).collect();
    let lost = [0, 1, 2, 3];
    let survivors: Vec<usize> = (4..k + m).collect();
    let g = isal::gen_cauchy1_matrix(k, m);
    let sub: Vec<u8> = survivors
        .iter()
        .flat_map(|&r| g[r * k..(r + 1) * k].to_vec())
        .collect();
    let inv = isal::invert_matrix(&sub, k).expect("survivors invertible");
    let rows: Vec<u8> = lost
        .iter()
        .flat_map(|&w| inv[w * k..(w + 1) * k].to_vec())
        .collect();
    let mut theirs = vec![vec![0u8; len]; lost.len()];
    let ins: Vec<&[u8]> = survivors.iter().map(|&i| stripe[i]).collect();
    let mut outs: Vec<&mut [u8]> = theirs.iter_mut().map(|p| &mut p[..]).collect();
    isal::Tables::new(k, lost.len(), &rows).encode(&ins, &mut outs);
    let chunks: Vec<Option<&[u8]>> = (0..k + m)
        .map(|i| (!lost.contains(&i)).then_some(stripe[i]))
        .collect();
    let mut ours = vec![vec![0u8; len]; lost.len()];
    let mut outs: Vec<&mut [u8]> = ours.iter_mut().map(|p| &mut p[..]).collect();
    codec.reconstruct(&chunks, &lost, &mut outs).unwrap();
    for (i, &w) in lost.iter().enumerate() {
        assert_eq!(theirs[i], d[w], "isal chunk {w}");
        assert_eq!(ours[i], d[w], "our chunk {w}");
    }
}
