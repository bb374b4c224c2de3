//! Every kernel this CPU supports (and the 256-bit GFNI form) against the reference, for every
//! length up to four vectors plus 63 bytes, odd start offsets, and buffers that end exactly at
//! the end of their allocation (so a read or write past the end is an out-of-bounds access that
//! tools like ASan or valgrind report).

use gf::{field, Kernel, KernelError, KernelKind, Matrix};
use proptest::prelude::*;
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

/// The largest vector of any kernel.
const MAX_VECTOR_BYTES: usize = 64;
/// Every length in `0..LENGTHS`.
const LENGTHS: usize = 4 * MAX_VECTOR_BYTES + 63;
const OFFSETS: [usize; 4] = [0, 1, 2, 3];

/// The kernels under test: every implementation but the reference, which is the oracle.
fn kernels() -> Vec<Kernel> {
    let forms: Vec<Kernel> = Kernel::forms()
        .into_iter()
        .filter(|k| k.kind() != KernelKind::Reference)
        .collect();
    eprintln!(
        "kernels under test: {:?}",
        forms.iter().map(|k| k.name()).collect::<Vec<_>>()
    );
    forms
}

/// A buffer of `len` bytes starting at `offset` in its allocation and ending at its end.
struct Buf {
    alloc: Box<[u8]>,
    offset: usize,
}

impl Buf {
    fn random(rng: &mut SmallRng, offset: usize, len: usize) -> Buf {
        let mut alloc = vec![0u8; offset + len].into_boxed_slice();
        rng.fill(&mut alloc[..]);
        Buf { alloc, offset }
    }
    fn get(&self) -> &[u8] {
        &self.alloc[self.offset..]
    }
    fn get_mut(&mut self) -> &mut [u8] {
        &mut self.alloc[self.offset..]
    }
}

/// A coefficient that is 0 or 1 often enough to exercise their paths.
fn coefficient(rng: &mut SmallRng) -> u8 {
    match rng.gen_range(0..10) {
        0 | 1 => 0,
        2 | 3 => 1,
        _ => rng.gen(),
    }
}

fn random_matrix(rng: &mut SmallRng, rows: usize, cols: usize) -> Matrix {
    let coeffs: Vec<u8> = (0..rows * cols).map(|_| coefficient(rng)).collect();
    Matrix::new(rows, cols, &coeffs)
}

/// `outputs (^)= m · inputs` by `kernel` and by the reference, from the same random starting
/// outputs, compared.
fn check_dot(kernel: Kernel, m: &Matrix, len: usize, offset: usize, add: bool, seed: u64) {
    let mut rng = SmallRng::seed_from_u64(seed);
    // Stagger the offsets so that inputs and outputs are misaligned differently.
    let inputs: Vec<Buf> = (0..m.cols())
        .map(|j| Buf::random(&mut rng, (offset + j) % 4, len))
        .collect();
    let mut outputs: Vec<Buf> = (0..m.rows())
        .map(|i| Buf::random(&mut rng, (offset + 3 * i) % 5, len))
        .collect();
    let mut expected: Vec<Vec<u8>> = outputs.iter().map(|o| o.get().to_vec()).collect();
    let ins: Vec<&[u8]> = inputs.iter().map(|b| b.get()).collect();
    {
        let mut outs: Vec<&mut [u8]> = expected.iter_mut().map(|v| &mut v[..]).collect();
        if add {
            Kernel::reference().dot_prod_add(m, &ins, &mut outs);
        } else {
            Kernel::reference().dot_prod(m, &ins, &mut outs);
        }
    }
    let mut outs: Vec<&mut [u8]> = outputs.iter_mut().map(|b| b.get_mut()).collect();
    if add {
        kernel.dot_prod_add(m, &ins, &mut outs);
    } else {
        kernel.dot_prod(m, &ins, &mut outs);
    }
    for (i, (got, want)) in outs.iter().zip(&expected).enumerate() {
        assert_eq!(
            &got[..],
            &want[..],
            "{} {} {}x{} len {len} offset {offset}: output {i} differs\n{m:?}",
            kernel.name(),
            if add { "dot_prod_add" } else { "dot_prod" },
            m.rows(),
            m.cols(),
        );
    }
}

#[test]
fn reference_dot_prod_is_the_sum_of_products() {
    let mut rng = SmallRng::seed_from_u64(1);
    let m = random_matrix(&mut rng, 3, 5);
    let inputs: Vec<Vec<u8>> = (0..5)
        .map(|_| (0..37).map(|_| rng.gen()).collect())
        .collect();
    let ins: Vec<&[u8]> = inputs.iter().map(|v| &v[..]).collect();
    let mut outputs = vec![vec![0xAAu8; 37]; 3];
    let mut outs: Vec<&mut [u8]> = outputs.iter_mut().map(|v| &mut v[..]).collect();
    Kernel::reference().dot_prod(&m, &ins, &mut outs);
    for (i, out) in outputs.iter().enumerate() {
        for (b, &got) in out.iter().enumerate() {
            let want = (0..5).fold(0, |acc, j| acc ^ field::mul_slow(m.get(i, j), inputs[j][b]));
            assert_eq!(got, want);
        }
    }
}

#[test]
fn dot_prod_every_length_and_offset() {
    let kernels = kernels();
    let mut rng = SmallRng::seed_from_u64(2);
    // Shapes: single product, the RS encode shapes, and an odd block split (7 outputs).
    let shapes = [(1, 1), (3, 6), (4, 10), (7, 3)];
    for &(rows, cols) in &shapes {
        let m = random_matrix(&mut rng, rows, cols);
        for &kernel in &kernels {
            for len in 0..LENGTHS {
                for &offset in &OFFSETS {
                    let seed = rng.gen();
                    check_dot(kernel, &m, len, offset, len % 2 == 1, seed);
                }
            }
        }
    }
}

#[test]
fn dot_prod_add_every_length() {
    let kernels = kernels();
    let mut rng = SmallRng::seed_from_u64(3);
    let m = random_matrix(&mut rng, 4, 12);
    for &kernel in &kernels {
        for len in 0..LENGTHS {
            let seed = rng.gen();
            check_dot(kernel, &m, len, 1, true, seed);
            check_dot(kernel, &m, len, 3, false, seed);
        }
    }
}

#[test]
fn dot_prod_shapes_up_to_20_inputs_and_10_outputs() {
    let kernels = kernels();
    let mut rng = SmallRng::seed_from_u64(4);
    // Lengths around the vector and step boundaries of every kernel.
    let lengths = [
        0, 1, 31, 32, 33, 63, 64, 65, 127, 128, 129, 191, 255, 256, 300, 319,
    ];
    for rows in 1..=10 {
        for cols in 1..=20 {
            let m = random_matrix(&mut rng, rows, cols);
            for &kernel in &kernels {
                for &len in &lengths {
                    let seed = rng.gen();
                    check_dot(kernel, &m, len, (rows + cols) % 4, seed % 2 == 0, seed);
                }
            }
        }
    }
}

#[test]
fn dot_prod_more_inputs_than_a_tile() {
    // More than 32 inputs: later tiles accumulate into the outputs.
    let kernels = kernels();
    let mut rng = SmallRng::seed_from_u64(5);
    for (rows, cols) in [(2, 40), (9, 33), (12, 70)] {
        let m = random_matrix(&mut rng, rows, cols);
        for &kernel in &kernels {
            for len in [1, 64, 200, 4096 + 17] {
                for add in [false, true] {
                    let seed = rng.gen();
                    check_dot(kernel, &m, len, 1, add, seed);
                }
            }
        }
    }
}

#[test]
fn dot_prod_special_matrices() {
    let kernels = kernels();
    let mut rng = SmallRng::seed_from_u64(6);
    let mut cases = vec![
        // Only 0s and 1s: plain XOR passes on every kernel.
        Matrix::new(2, 5, &[1, 1, 1, 1, 1, 1, 0, 1, 0, 0]),
        // A zero row, an all-ones row and general rows.
        Matrix::new(4, 3, &[0, 0, 0, 1, 1, 1, 2, 3, 4, 0, 0, 9]),
        // An all-zero column in every block.
        Matrix::new(3, 4, &[5, 0, 6, 7, 8, 0, 9, 10, 11, 0, 12, 13]),
        // The zero matrix.
        Matrix::new(3, 3, &[0; 9]),
        // The identity.
        Matrix::new(3, 3, &[1, 0, 0, 0, 1, 0, 0, 0, 1]),
    ];
    // A local-parity-like matrix: two global rows, two group XOR rows.
    let mut lrc = vec![0u8; 4 * 12];
    for j in 0..12 {
        lrc[j] = rng.gen_range(2..=255);
        lrc[12 + j] = rng.gen_range(2..=255);
        lrc[if j < 6 { 24 + j } else { 36 + j }] = 1;
    }
    cases.push(Matrix::new(4, 12, &lrc));
    for m in &cases {
        for &kernel in &kernels {
            for len in [0, 1, 17, 64, 100, 128, 129, 319] {
                for add in [false, true] {
                    let seed = rng.gen();
                    check_dot(kernel, m, len, 2, add, seed);
                }
            }
        }
    }
}

#[test]
fn dot_prod_xor_rows_beside_product_rows() {
    // Rows of 0s and 1s (an LRC's local parities, an `rs-xor` first parity) mixed with
    // general rows in every
    // proportion: the nibble kernels carry up to two of them in a block of product rows and
    // compute the rest as XOR passes; the GFNI kernels compute them as products.
    let kernels = kernels();
    let mut rng = SmallRng::seed_from_u64(9);
    let lengths = [1, 31, 32, 33, 63, 64, 65, 127, 128, 129, 200, 319];
    for general in 0..=8 {
        for xors in 0..=4 {
            if general + xors == 0 {
                continue;
            }
            // The XOR rows of random 0s and 1s, or all ones (an `rs-xor` parity: the kernels
            // skip the per-source test then).
            for (cols, ones) in [1, 5, 12, 33]
                .into_iter()
                .flat_map(|c| [(c, false), (c, true)])
            {
                let mut coeffs = Vec::new();
                for r in 0..general + xors {
                    for _ in 0..cols {
                        coeffs.push(if r < general {
                            coefficient(&mut rng)
                        } else if ones {
                            1
                        } else {
                            rng.gen_range(0..=1)
                        });
                    }
                }
                // Shuffle the rows so that XOR rows are not always last.
                let rows = general + xors;
                let mut order: Vec<usize> = (0..rows).collect();
                for i in (1..rows).rev() {
                    order.swap(i, rng.gen_range(0..=i));
                }
                let shuffled: Vec<u8> = order
                    .iter()
                    .flat_map(|&r| coeffs[r * cols..(r + 1) * cols].to_vec())
                    .collect();
                let m = Matrix::new(rows, cols, &shuffled);
                for &kernel in &kernels {
                    for &len in &lengths {
                        let seed = rng.gen();
                        check_dot(kernel, &m, len, len % 3, seed % 2 == 0, seed);
                    }
                }
            }
        }
    }
}

#[test]
fn dot_prod_with_no_inputs() {
    for kernel in Kernel::forms() {
        let m = Matrix::new(2, 0, &[]);
        let (mut a, mut b) = (vec![7u8; 70], vec![9u8; 70]);
        kernel.dot_prod_add(&m, &[], &mut [&mut a, &mut b]);
        assert!(a.iter().all(|&x| x == 7) && b.iter().all(|&x| x == 9));
        kernel.dot_prod(&m, &[], &mut [&mut a, &mut b]);
        assert!(a.iter().chain(&b).all(|&x| x == 0), "{}", kernel.name());
    }
}

#[test]
fn mul_mul_add_and_xor_every_length_and_offset() {
    let kernels = kernels();
    let mut rng = SmallRng::seed_from_u64(7);
    for &kernel in &kernels {
        for len in 0..LENGTHS {
            for &offset in &OFFSETS {
                let c = match len % 4 {
                    0 => 0,
                    1 => 1,
                    2 => 2,
                    _ => rng.gen(),
                };
                let src = Buf::random(&mut rng, offset, len);
                let dst0 = Buf::random(&mut rng, (offset + 1) % 4, len);
                let what = format!("{} len {len} offset {offset} c {c}", kernel.name());

                let mut got = Buf::random(&mut rng, (offset + 1) % 4, len);
                got.get_mut().copy_from_slice(dst0.get());
                kernel.mul(c, src.get(), got.get_mut());
                let want: Vec<u8> = src.get().iter().map(|&x| field::mul(c, x)).collect();
                assert_eq!(got.get(), &want[..], "mul {what}");

                got.get_mut().copy_from_slice(dst0.get());
                kernel.mul_add(c, src.get(), got.get_mut());
                let want: Vec<u8> = src
                    .get()
                    .iter()
                    .zip(dst0.get())
                    .map(|(&x, &d)| d ^ field::mul(c, x))
                    .collect();
                assert_eq!(got.get(), &want[..], "mul_add {what}");

                got.get_mut().copy_from_slice(dst0.get());
                kernel.xor(src.get(), got.get_mut());
                let want: Vec<u8> = src
                    .get()
                    .iter()
                    .zip(dst0.get())
                    .map(|(&x, &d)| d ^ x)
                    .collect();
                assert_eq!(got.get(), &want[..], "xor {what}");
            }
        }
    }
}

#[test]
fn every_coefficient_multiplies_correctly() {
    let mut rng = SmallRng::seed_from_u64(8);
    let src: Vec<u8> = (0..=255u8).chain((0..200).map(|_| rng.gen())).collect();
    for kernel in Kernel::forms() {
        for c in 0..=255u8 {
            let mut dst = vec![0u8; src.len()];
            kernel.mul(c, &src, &mut dst);
            for (&x, &y) in src.iter().zip(&dst) {
                assert_eq!(y, field::mul_slow(c, x), "{} c {c} x {x}", kernel.name());
            }
        }
    }
}

#[cfg(not(target_arch = "x86_64"))]
#[test]
fn only_the_reference_kernel_off_x86_64() {
    assert_eq!(Kernel::forms(), vec![Kernel::reference()]);
    assert_eq!(Kernel::best(), Kernel::reference());
}

#[test]
fn kernels_are_named_and_forcible() {
    for kernel in Kernel::forms() {
        assert_eq!(Kernel::try_from_name(kernel.name()), Ok(kernel));
        assert!(kernel.kind().is_available());
    }
    assert_eq!(Kernel::best(), *Kernel::available().last().unwrap());
    assert!(matches!(
        Kernel::try_from_name("sse9"),
        Err(KernelError::UnknownKernel { .. })
    ));
    // Every kind this CPU lacks is refused, naming the missing feature.
    for kind in KernelKind::ALL {
        match Kernel::try_new(kind) {
            Ok(k) => assert_eq!(k.kind(), kind),
            Err(e) => assert!(
                matches!(e, KernelError::Unsupported { kind: k, missing } if k == kind && !missing.is_empty()),
                "{e}"
            ),
        }
    }
}

#[cfg(target_arch = "x86_64")]
#[test]
fn gfni_has_both_forms_on_avx512_gfni_cpus() {
    let Ok(gfni) = Kernel::try_new(KernelKind::Gfni) else {
        return;
    };
    if std::arch::is_x86_feature_detected!("avx512bw") {
        assert_eq!(gfni.vector_bytes(), 64);
        let narrow = Kernel::try_gfni256().expect("GFNI and AVX-512 imply AVX2");
        assert_eq!(
            (narrow.kind(), narrow.name(), narrow.vector_bytes()),
            (KernelKind::Gfni, "gfni256", 32)
        );
        assert!(Kernel::forms().contains(&narrow) && Kernel::forms().contains(&gfni));
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 400, ..ProptestConfig::default() })]

    #[test]
    fn any_kernel_any_matrix_matches_the_reference(
        rows in 1usize..=12,
        cols in 1usize..=24,
        len in 0usize..600,
        offset in 0usize..8,
        add in any::<bool>(),
        kernel_index in 0usize..8,
        seed in any::<u64>(),
    ) {
        let kernels = Kernel::forms();
        let kernel = kernels[kernel_index % kernels.len()];
        let mut rng = SmallRng::seed_from_u64(seed);
        let m = random_matrix(&mut rng, rows, cols);
        check_dot(kernel, &m, len, offset, add, seed);
    }
}

/// A buffer of `len` bytes starting `shift` bytes past a 64-byte boundary.
fn placed(rng: &mut SmallRng, shift: usize, len: usize) -> (Vec<u8>, usize) {
    let mut v: Vec<u8> = (0..len + 128).map(|_| rng.gen()).collect();
    let start = (64 - v.as_ptr() as usize % 64) % 64 + shift;
    v.truncate(start + len);
    (v, start)
}

#[test]
fn dot_prod_outputs_over_a_mebibyte_aligned_alike() {
    // Outputs of ≥ 1 MiB that share their offset in a cache line take the non-temporal store
    // paths (GFNI-512, GFNI-256 and AVX-512 always, AVX2 on Intel for blocks of up to four outputs,
    // XOR rows included); check them against the reference, with a tail after the last whole
    // step.
    let mut rng = SmallRng::seed_from_u64(11);
    // Two global rows and two local XOR rows over six inputs, as an LRC(6,2,2) encode.
    let mut lrc = vec![0u8; 4 * 6];
    for j in 0..6 {
        lrc[j] = rng.gen_range(2..=255);
        lrc[6 + j] = rng.gen_range(2..=255);
        lrc[if j < 3 { 12 + j } else { 18 + j }] = 1;
    }
    let mut matrices = vec![Matrix::new(4, 6, &lrc)];
    for (rows, cols) in [(1, 6), (4, 10), (6, 6)] {
        matrices.push(random_matrix(&mut rng, rows, cols));
    }
    for m in &matrices {
        let (rows, cols) = (m.rows(), m.cols());
        for shift in [0, 16] {
            for len in [(1 << 20) + 77, (1 << 20) + 384] {
                let inputs: Vec<(Vec<u8>, usize)> =
                    (0..cols).map(|_| placed(&mut rng, shift, len)).collect();
                let ins: Vec<&[u8]> = inputs.iter().map(|(v, s)| &v[*s..]).collect();
                let mut want = vec![vec![0u8; len]; rows];
                let mut w: Vec<&mut [u8]> = want.iter_mut().map(|v| &mut v[..]).collect();
                Kernel::reference().dot_prod(m, &ins, &mut w);
                for kernel in kernels() {
                    let mut outputs: Vec<(Vec<u8>, usize)> =
                        (0..rows).map(|_| placed(&mut rng, shift, len)).collect();
                    let mut outs: Vec<&mut [u8]> =
                        outputs.iter_mut().map(|(v, s)| &mut v[*s..]).collect();
                    kernel.dot_prod(m, &ins, &mut outs);
                    for (i, (got, want)) in outs.iter().zip(&want).enumerate() {
                        assert!(
                            got[..] == want[..],
                            "{} {rows}x{cols} len {len} shift {shift}: output {i} differs",
                            kernel.name()
                        );
                    }
                }
            }
        }
    }
}

/// The kernels walk a region backwards when the outputs lie a little after the inputs modulo
/// 4096 (as `malloc` places blocks allocated one after another), forwards otherwise: both
/// orders, with chunks back to back in one allocation 16 bytes apart, outputs after the
/// inputs and before them, every block size, set and added to.
#[test]
fn dot_prod_walks_either_way() {
    let kernels = kernels();
    let mut rng = SmallRng::seed_from_u64(9);
    for &(rows, cols) in &[(1, 5), (2, 3), (3, 6), (4, 10), (6, 4), (8, 3)] {
        let m = random_matrix(&mut rng, rows, cols);
        for len in [32, 100, 255, 1000, 4096 + 37, 3 * 4096] {
            let stride = len + 16;
            for outputs_first in [false, true] {
                for add in [false, true] {
                    let mut region = vec![0u8; (rows + cols) * stride];
                    rng.fill(&mut region[..]);
                    let mut chunks: Vec<&mut [u8]> =
                        region.chunks_mut(stride).map(|c| &mut c[..len]).collect();
                    let (ins, outs) = if outputs_first {
                        let (o, i) = chunks.split_at_mut(rows);
                        (i, o)
                    } else {
                        chunks.split_at_mut(cols)
                    };
                    let ins: Vec<&[u8]> = ins.iter().map(|c| &c[..]).collect();
                    let mut expected: Vec<Vec<u8>> = outs.iter().map(|o| o.to_vec()).collect();
                    {
                        let mut e: Vec<&mut [u8]> =
                            expected.iter_mut().map(|v| &mut v[..]).collect();
                        if add {
                            Kernel::reference().dot_prod_add(&m, &ins, &mut e);
                        } else {
                            Kernel::reference().dot_prod(&m, &ins, &mut e);
                        }
                    }
                    for &kernel in &kernels {
                        let start: Vec<Vec<u8>> = outs.iter().map(|o| o.to_vec()).collect();
                        let mut o: Vec<&mut [u8]> = outs.iter_mut().map(|c| &mut c[..]).collect();
                        if add {
                            kernel.dot_prod_add(&m, &ins, &mut o);
                        } else {
                            kernel.dot_prod(&m, &ins, &mut o);
                        }
                        for (s, (o, e)) in start.iter().zip(o.iter_mut().zip(&expected)) {
                            assert_eq!(
                                &o[..],
                                &e[..],
                                "{} {rows}x{cols} len {len} outputs first {outputs_first} add {add}",
                                kernel.name()
                            );
                            // Back to the starting contents for the next kernel.
                            o.copy_from_slice(s);
                        }
                    }
                }
            }
        }
    }
}
