//! Decode properties: any k of n chunks rebuild an RS stripe; LRC decodes exactly the
//! patterns its rank allows; repair sets are minimal; only the wanted chunks are computed.

use codes::{Code, CodeError, Codec, Kernel, MatrixKind};
use rand::rngs::SmallRng;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};

/// A stripe of random data with its parity, `chunk_bytes` per chunk.
fn stripe(codec: &Codec, chunk_bytes: usize, rng: &mut SmallRng) -> Vec<Vec<u8>> {
    let code = codec.code();
    let mut chunks: Vec<Vec<u8>> = (0..code.n())
        .map(|_| (0..chunk_bytes).map(|_| rng.gen()).collect())
        .collect();
    let (data, parity) = chunks.split_at_mut(code.k());
    let data: Vec<&[u8]> = data.iter().map(|d| d.as_slice()).collect();
    let mut parity: Vec<&mut [u8]> = parity.iter_mut().map(|p| p.as_mut_slice()).collect();
    codec.encode(&data, &mut parity).unwrap();
    chunks
}

/// Rebuilds `erased` from the other chunks of `chunks`.
fn rebuild(codec: &Codec, chunks: &[Vec<u8>], erased: &[usize]) -> Result<Vec<Vec<u8>>, CodeError> {
    let view: Vec<Option<&[u8]>> = (0..chunks.len())
        .map(|i| (!erased.contains(&i)).then_some(chunks[i].as_slice()))
        .collect();
    let mut out = vec![vec![0u8; chunks[0].len()]; erased.len()];
    let mut refs: Vec<&mut [u8]> = out.iter_mut().map(|o| o.as_mut_slice()).collect();
    codec.reconstruct(&view, erased, &mut refs)?;
    Ok(out)
}

fn assert_rebuilds(codec: &Codec, chunks: &[Vec<u8>], erased: &[usize]) {
    let out = rebuild(codec, chunks, erased)
        .unwrap_or_else(|e| panic!("{}: {erased:?}: {e}", codec.code()));
    for (o, &e) in out.iter().zip(erased) {
        assert_eq!(o, &chunks[e], "{}: chunk {e} of {erased:?}", codec.code());
    }
}

/// Every subset of `0..n` of size `size`.
fn subsets(n: usize, size: usize) -> Vec<Vec<usize>> {
    let mut all = Vec::new();
    let mut c: Vec<usize> = (0..size).collect();
    if size > n {
        return all;
    }
    loop {
        all.push(c.clone());
        let Some(i) = (0..size).rev().find(|&i| c[i] < n - size + i) else {
            return all;
        };
        c[i] += 1;
        for j in i + 1..size {
            c[j] = c[j - 1] + 1;
        }
    }
}

#[test]
fn rs_any_k_of_n_rebuild_the_stripe() {
    let mut rng = SmallRng::seed_from_u64(1);
    let exhaustive = [(3, 2), (6, 3), (10, 4), (12, 4)];
    for (k, m) in exhaustive {
        for matrix in [
            MatrixKind::Cauchy,
            MatrixKind::CauchyXor,
            MatrixKind::Vandermonde,
        ] {
            let codec = Codec::new(Code::rs_with(k, m, matrix).unwrap());
            let chunks = stripe(&codec, 13, &mut rng);
            for lost in 1..=m {
                for erased in subsets(k + m, lost) {
                    assert_rebuilds(&codec, &chunks, &erased);
                    assert!(codec.is_recoverable(&erased));
                }
            }
            for erased in subsets(k + m, m + 1).iter().take(50) {
                assert!(!codec.is_recoverable(erased));
                assert_eq!(
                    rebuild(&codec, &chunks, erased).unwrap_err(),
                    CodeError::TooFewChunks {
                        have: k - 1,
                        need: k
                    }
                );
            }
        }
    }
    // Larger codes: seeded random patterns of up to m losses.
    for (k, m, matrix) in [
        (20, 8, MatrixKind::Cauchy),
        (32, 16, MatrixKind::Cauchy),
        (200, 56, MatrixKind::Cauchy),
        (32, 16, MatrixKind::CauchyXor),
        (200, 56, MatrixKind::CauchyXor),
    ] {
        let codec = Codec::new(Code::rs_with(k, m, matrix).unwrap());
        let chunks = stripe(&codec, 7, &mut rng);
        let mut all: Vec<usize> = (0..k + m).collect();
        for _ in 0..200 {
            all.shuffle(&mut rng);
            let lost = rng.gen_range(1..=m);
            let mut erased = all[..lost].to_vec();
            erased.sort_unstable();
            assert_rebuilds(&codec, &chunks, &erased);
        }
    }
}

/// `rs-xor`: one lost data chunk is read back from the other data chunks and the first
/// parity, by an XOR calculator (no products).
#[test]
fn rs_xor_repairs_one_data_chunk_by_xor() {
    let mut rng = SmallRng::seed_from_u64(3);
    for (k, m) in [(6, 3), (10, 4), (12, 4)] {
        let codec = Codec::new(Code::rs_with(k, m, MatrixKind::CauchyXor).unwrap());
        let chunks = stripe(&codec, 100, &mut rng);
        for lost in 0..k {
            let available: Vec<usize> = (0..k + m).filter(|&i| i != lost).collect();
            let reads = codec.repair_set(&available, &[lost]).unwrap();
            let expect: Vec<usize> = (0..=k).filter(|&i| i != lost).collect();
            assert_eq!(reads, expect, "rs-xor:{k},{m} lost {lost}");
            assert!(codec.decoder(&reads, &[lost]).unwrap().is_xor());
            assert_rebuilds(&codec, &chunks, &[lost]);
        }
        // Under plain Cauchy the same repair takes products.
        let plain = Codec::new(Code::rs(k, m).unwrap());
        let reads: Vec<usize> = (1..=k).collect();
        assert!(!plain.decoder(&reads, &[0]).unwrap().is_xor());
    }
}

#[test]
fn rs_decode_works_with_every_kernel() {
    let mut rng = SmallRng::seed_from_u64(2);
    for kernel in Kernel::available() {
        let codec = Codec::with_kernel(Code::rs(10, 4).unwrap(), kernel);
        let chunks = stripe(&codec, 1000, &mut rng);
        for erased in [vec![0], vec![0, 1, 2, 3], vec![3, 9, 10, 13], vec![11, 12]] {
            assert_rebuilds(&codec, &chunks, &erased);
        }
    }
}

/// (code, recoverable four-loss patterns, all four-loss patterns) — docs/chunk-format.md, "The algebra of the parity chunks".
const LRC_FOUR_LOSS: [((usize, usize, usize), usize, usize); 3] = [
    ((4, 2, 2), 60, 70),
    ((6, 2, 2), 180, 210),
    ((12, 2, 2), 1568, 1820),
];

#[test]
fn lrc_is_maximally_recoverable() {
    let mut rng = SmallRng::seed_from_u64(3);
    for ((k, l, r), expect_ok, expect_all) in LRC_FOUR_LOSS {
        let codec = Codec::new(Code::lrc(k, l, r).unwrap());
        let n = codec.code().n();
        let chunks = stripe(&codec, 5, &mut rng);
        for lost in 1..=3 {
            for erased in subsets(n, lost) {
                assert!(codec.is_recoverable(&erased), "lrc {k},{l},{r}: {erased:?}");
                assert_rebuilds(&codec, &chunks, &erased);
            }
        }
        let four = subsets(n, 4);
        assert_eq!(four.len(), expect_all);
        let mut ok = 0;
        for erased in &four {
            if codec.is_recoverable(erased) {
                ok += 1;
                assert_rebuilds(&codec, &chunks, erased);
            } else {
                let err = rebuild(&codec, &chunks, erased).unwrap_err();
                assert_eq!(
                    err,
                    CodeError::Unrecoverable {
                        code: format!("lrc:{k},{l},{r}"),
                        erased: erased.clone()
                    }
                );
            }
        }
        assert_eq!(ok, expect_ok, "lrc {k},{l},{r}");
    }
}

#[test]
fn lrc_single_loss_reads_only_its_group() {
    let mut rng = SmallRng::seed_from_u64(4);
    for (k, l, r) in [(4, 2, 2), (6, 2, 2), (12, 2, 2), (12, 3, 2), (6, 3, 0)] {
        let code = Code::lrc(k, l, r).unwrap();
        let codec = Codec::new(code);
        let n = code.n();
        let chunks = stripe(&codec, 9, &mut rng);
        for lost in 0..k + l {
            let available: Vec<usize> = (0..n).filter(|&i| i != lost).collect();
            let reads = codec.repair_set(&available, &[lost]).unwrap();
            let group = code.local_group(code.group_of(lost).unwrap()).unwrap();
            let expect: Vec<usize> = group.into_iter().filter(|&i| i != lost).collect();
            assert_eq!(reads, expect, "{code}: loss of {lost}");
            assert_eq!(reads.len(), k / l);
            let calc = codec.decoder(&reads, &[lost]).unwrap();
            assert!(calc.is_xor(), "local repair is plain xor");
            assert_rebuilds(&codec, &chunks, &[lost]);
        }
        // A global parity needs every data chunk.
        for lost in k + l..n {
            let available: Vec<usize> = (0..n).filter(|&i| i != lost).collect();
            let reads = codec.repair_set(&available, &[lost]).unwrap();
            assert_eq!(reads, (0..k).collect::<Vec<_>>());
        }
    }
}

#[test]
fn lrc_multi_loss_uses_local_groups_where_they_suffice() {
    let codec = Codec::new(Code::lrc(12, 2, 2).unwrap());
    let all =
        |erased: &[usize]| -> Vec<usize> { (0..16).filter(|i| !erased.contains(i)).collect() };
    // One loss in each group: two local repairs, no global parity read.
    let reads = codec.repair_set(&all(&[0, 7]), &[0, 7]).unwrap();
    let mut expect: Vec<usize> = (1..6).chain(6..7).chain(8..12).collect();
    expect.extend([12, 13]);
    assert_eq!(reads, expect);
    // Group 0 needs a global repair, but chunk 7 alone is still local.
    let reads = codec.repair_set(&all(&[0, 1, 7]), &[7]).unwrap();
    assert_eq!(reads, vec![6, 8, 9, 10, 11, 13]);
    // Two losses in group 0: k reads, data first, then the local and one global parity.
    let reads = codec.repair_set(&all(&[0, 1]), &[0]).unwrap();
    assert_eq!(reads, vec![2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 14]);
    // Four losses that the rank cannot resolve.
    assert!(matches!(
        codec.repair_set(&all(&[0, 1, 2, 12]), &[0]),
        Err(CodeError::Unrecoverable { .. })
    ));
}

#[test]
fn rs_repair_set_prefers_data_then_low_indices() {
    let codec = Codec::new(Code::rs(6, 3).unwrap());
    assert_eq!(
        codec.repair_set(&[8, 7, 6, 5, 4, 3, 2, 1], &[0]).unwrap(),
        vec![1, 2, 3, 4, 5, 6]
    );
    assert_eq!(
        codec.repair_set(&[0, 1, 2, 3, 4, 5, 7], &[6, 8]).unwrap(),
        vec![0, 1, 2, 3, 4, 5]
    );
    // Nothing missing: read just what is wanted.
    assert_eq!(
        codec.repair_set(&[0, 1, 2, 3, 4, 5], &[4, 2]).unwrap(),
        vec![2, 4]
    );
    assert_eq!(
        codec.repair_set(&[0, 1, 2, 3, 4], &[5]).unwrap_err(),
        CodeError::TooFewChunks { have: 5, need: 6 }
    );
    assert!(matches!(
        codec.repair_set(&[0, 1, 9], &[5]),
        Err(CodeError::BadIndex { index: 9, n: 9, .. })
    ));
}

#[test]
fn decode_computes_only_the_wanted_chunks() {
    let mut rng = SmallRng::seed_from_u64(5);
    let codec = Codec::new(Code::rs(6, 3).unwrap());
    let chunks = stripe(&codec, 33, &mut rng);
    // Lose 0, 1 and 6; want only 1.
    let reads = codec.repair_set(&[2, 3, 4, 5, 7, 8], &[1]).unwrap();
    let calc = codec.decoder(&reads, &[1]).unwrap();
    assert_eq!(calc.outputs(), &[1]);
    assert_eq!(calc.inputs(), reads.as_slice());
    assert_eq!((calc.matrix().rows(), calc.matrix().cols()), (1, 6));
    let view: Vec<Option<&[u8]>> = (0..9)
        .map(|i| (![0, 1, 6].contains(&i)).then_some(chunks[i].as_slice()))
        .collect();
    let mut out = vec![0u8; 33];
    codec.reconstruct(&view, &[1], &mut [&mut out]).unwrap();
    assert_eq!(out, chunks[1]);
}

#[test]
fn decoder_accepts_any_sufficient_input_order() {
    let mut rng = SmallRng::seed_from_u64(6);
    for code in [Code::rs(6, 3).unwrap(), Code::lrc(6, 2, 2).unwrap()] {
        let codec = Codec::new(code);
        let chunks = stripe(&codec, 17, &mut rng);
        // More inputs than k, parity first, dependent rows included (LRC: 0, 1, 2 and 6).
        let inputs: Vec<usize> = (1..code.n()).rev().collect();
        let wanted = [0, code.n() - 1, 3];
        let calc = codec.decoder(&inputs, &wanted).unwrap();
        let ins: Vec<&[u8]> = inputs.iter().map(|&i| chunks[i].as_slice()).collect();
        let mut out = vec![vec![0u8; 17]; 3];
        let mut refs: Vec<&mut [u8]> = out.iter_mut().map(|o| o.as_mut_slice()).collect();
        calc.compute(&ins, &mut refs).unwrap();
        for (o, &w) in out.iter().zip(&wanted) {
            assert_eq!(o, &chunks[w], "{code}: chunk {w}");
        }
        // A wanted chunk that is read is copied.
        let pos = inputs.iter().position(|&i| i == 3).unwrap();
        assert_eq!(calc.coeff(2, pos), 1);
        assert!((0..inputs.len()).all(|p| p == pos || calc.coeff(2, p) == 0));
    }
    let codec = Codec::new(Code::rs(6, 3).unwrap());
    let chunks = stripe(&codec, 17, &mut rng);
    // Repeated inputs: the first copy is used, the others get coefficient 0.
    let inputs = [7, 1, 1, 7, 2, 3, 4, 5];
    let calc = codec.decoder(&inputs, &[0]).unwrap();
    let ins: Vec<&[u8]> = inputs.iter().map(|&i| chunks[i].as_slice()).collect();
    let mut out = vec![0u8; 17];
    calc.compute(&ins, &mut [&mut out]).unwrap();
    assert_eq!(out, chunks[0]);
    assert_eq!((calc.coeff(0, 2), calc.coeff(0, 3)), (0, 0));
    assert_eq!(
        codec.decoder(&[1, 2, 3], &[0]).unwrap_err(),
        CodeError::TooFewChunks { have: 3, need: 6 }
    );
}

#[test]
fn calculator_checks_counts_and_lengths() {
    let codec = Codec::new(Code::rs(4, 2).unwrap());
    let d = vec![vec![1u8; 8]; 4];
    let short = vec![1u8; 7];
    let mut p = vec![vec![0u8; 8]; 2];
    let mut refs: Vec<&mut [u8]> = p.iter_mut().map(|x| x.as_mut_slice()).collect();
    let too_few: Vec<&[u8]> = d[..3].iter().map(|x| x.as_slice()).collect();
    assert_eq!(
        codec.encode(&too_few, &mut refs).unwrap_err(),
        CodeError::TooFewChunks { have: 3, need: 4 }
    );
    let uneven: Vec<&[u8]> = vec![&d[0], &d[1], &short, &d[3]];
    assert_eq!(
        codec.encode(&uneven, &mut refs).unwrap_err(),
        CodeError::UnequalLengths {
            index: 2,
            len: 7,
            expected: 8
        }
    );
    let mut short_out = vec![0u8; 7];
    let good: Vec<&[u8]> = d.iter().map(|x| x.as_slice()).collect();
    let mut p0 = vec![0u8; 8];
    assert_eq!(
        codec
            .encode(&good, &mut [&mut p0, &mut short_out])
            .unwrap_err(),
        CodeError::UnequalLengths {
            index: 5,
            len: 7,
            expected: 8
        }
    );
    assert_eq!(
        codec.encode(&good, &mut [&mut p0]).unwrap_err(),
        CodeError::CountMismatch {
            what: "output chunks",
            have: 1,
            expected: 2
        }
    );
    let five: Vec<&[u8]> = vec![&d[0], &d[1], &d[2], &d[3], &d[0]];
    assert!(matches!(
        codec.encode(&five, &mut refs),
        Err(CodeError::CountMismatch {
            what: "input chunks",
            have: 5,
            expected: 4
        })
    ));
    // compute_add accumulates: encoding twice into the same parity cancels out.
    codec.encode(&good, &mut refs).unwrap();
    assert!(refs.iter().any(|r| r.iter().any(|&x| x != 0)));
    codec.encoder().compute_add(&good, &mut refs).unwrap();
    assert!(refs.iter().all(|r| r.iter().all(|&x| x == 0)));
    // Zero-length chunks are fine.
    let empty: Vec<&[u8]> = vec![&[]; 4];
    codec.encode(&empty, &mut [&mut [], &mut []]).unwrap();
}

#[test]
fn reconstruct_checks_its_arguments() {
    let codec = Codec::new(Code::rs(4, 2).unwrap());
    let c = vec![vec![3u8; 8]; 6];
    let short = [3u8; 5];
    let mut out = vec![0u8; 8];
    let view: Vec<Option<&[u8]>> = c.iter().map(|x| Some(x.as_slice())).collect();
    assert!(matches!(
        codec.reconstruct(&view[..5], &[0], &mut [&mut out]),
        Err(CodeError::CountMismatch {
            what: "chunk slots",
            have: 5,
            expected: 6
        })
    ));
    let mut uneven = view.clone();
    uneven[0] = None;
    uneven[3] = Some(&short);
    assert_eq!(
        codec
            .reconstruct(&uneven, &[0], &mut [&mut out])
            .unwrap_err(),
        CodeError::UnequalLengths {
            index: 3,
            len: 5,
            expected: 8
        }
    );
    let mut sparse = view.clone();
    for slot in sparse.iter_mut().take(3) {
        *slot = None;
    }
    assert_eq!(
        codec
            .reconstruct(&sparse, &[0], &mut [&mut out])
            .unwrap_err(),
        CodeError::TooFewChunks { have: 3, need: 4 }
    );
    assert!(matches!(
        codec.reconstruct(&view, &[6], &mut [&mut out]),
        Err(CodeError::BadIndex { index: 6, n: 6, .. })
    ));
    assert!(!codec.is_recoverable(&[6]));
}
