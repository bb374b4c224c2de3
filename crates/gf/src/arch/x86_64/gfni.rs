//! GFNI kernels: `vgf2p8affineqb` multiplies every byte of a register by a constant, given as
//! an 8×8 bit matrix ([`crate::field::affine_matrix`]) broadcast to each 64-bit lane — one
//! instruction per product, against four for the nibble tables.
//!
//! Two forms: [`Gfni512`] (EVEX, 64-byte registers, `vpternlogq` adding two products to an
//! accumulator at once, masked tails) and [`Gfni256`] (VEX, 32-byte registers, for CPUs with
//! GFNI but without AVX-512, such as Alder Lake; tails as in [`super::avx2`]).
//!
//! Coefficients 0 and 1 are not special-cased inside a block: their matrices (zero and the
//! identity) give the right products, and a branch per coefficient would cost more than the
//! one instruction it saves. The driver skips inputs whose coefficients in a block are all 0.

use std::arch::x86_64::*;
use std::sync::OnceLock;

use super::avx2::{self, xor_avx2};
use super::avx512::{self, aligned_head, head_mask, load_masked, store_masked, xor3, xor_avx512};
use super::{
    dispatch_block, prefetch, prefetch_dir, walk_back, Blocking, Blockings, Simd, PREFETCH_MIN_LEN,
    STREAM_MIN_BYTES,
};
use crate::{field, Matrix};

/// Proof that the CPU has GFNI, AVX-512F and AVX-512BW.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Gfni512(());

impl Gfni512 {
    /// The token, if this CPU has GFNI, AVX-512F and AVX-512BW.
    pub(crate) fn new() -> Option<Gfni512> {
        if is_x86_feature_detected!("gfni")
            && is_x86_feature_detected!("avx512f")
            && is_x86_feature_detected!("avx512bw")
        {
            Some(Gfni512(()))
        } else {
            None
        }
    }
}

/// Proof that the CPU has GFNI and AVX2 (and so AVX).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Gfni256(());

impl Gfni256 {
    /// The token, if this CPU has GFNI and AVX2.
    pub(crate) fn new() -> Option<Gfni256> {
        if is_x86_feature_detected!("gfni") && is_x86_feature_detected!("avx2") {
            Some(Gfni256(()))
        } else {
            None
        }
    }
}

impl Simd for Gfni512 {
    const VECTOR_BYTES: usize = 64;
    // Two vectors per step: 16 accumulators, 4 inputs and 2 matrices fit the 32 registers.
    const MAX_BLOCK: usize = 8;
    const XOR_ROWS_IN_BLOCKS: bool = false;
    const ANY_LENGTH: bool = true;

    /// The coefficient's affine bit matrix.
    type Coef = u64;

    fn coef(m: &Matrix, row: usize, col: usize) -> u64 {
        m.affine(row, col)
    }

    fn coef_of(c: u8) -> u64 {
        field::affine_matrix(c)
    }

    fn blocking(blockings: &Blockings) -> &OnceLock<Blocking<u64>> {
        &blockings.gfni512
    }

    unsafe fn dot(
        self,
        add: bool,
        coef: &[u64],
        _xmask: &[u8],
        srcs: &[*const u8],
        dsts: &[*mut u8],
        xdsts: usize,
        len: usize,
    ) {
        assert_eq!(xdsts, 0, "GFNI blocks carry no XOR rows");
        // SAFETY: the token proves GFNI, AVX-512F and AVX-512BW; the caller upholds
        // `Simd::dot`'s contract, which (with no XOR rows) is `dot_gfni512`'s.
        unsafe {
            dispatch_block!(dot_gfni512, dsts.len(), add, (coef, srcs, dsts, len), [1 2 3 4 5 6 7 8])
        }
    }

    unsafe fn xor(self, add: bool, srcs: &[*const u8], dst: *mut u8, len: usize) {
        // SAFETY: the token proves AVX-512F and AVX-512BW; the caller upholds `Simd::xor`'s
        // contract, which is `xor_avx512`'s.
        unsafe {
            if add {
                xor_avx512::<true>(srcs, dst, len)
            } else {
                xor_avx512::<false>(srcs, dst, len)
            }
        }
    }
}

impl Simd for Gfni256 {
    const VECTOR_BYTES: usize = 32;
    // Steps of V vectors: B·V accumulators, the B matrices of a source (or, for five
    // outputs, one at a time), an input and a product fit the 16 registers (see `dot`).
    const MAX_BLOCK: usize = 5;
    const XOR_ROWS_IN_BLOCKS: bool = false;
    const ANY_LENGTH: bool = false;

    /// The coefficient's affine bit matrix.
    type Coef = u64;

    fn coef(m: &Matrix, row: usize, col: usize) -> u64 {
        m.affine(row, col)
    }

    fn coef_of(c: u8) -> u64 {
        field::affine_matrix(c)
    }

    fn blocking(blockings: &Blockings) -> &OnceLock<Blocking<u64>> {
        &blockings.gfni256
    }

    unsafe fn dot(
        self,
        add: bool,
        coef: &[u64],
        _xmask: &[u8],
        srcs: &[*const u8],
        dsts: &[*mut u8],
        xdsts: usize,
        len: usize,
    ) {
        assert_eq!(xdsts, 0, "GFNI blocks carry no XOR rows");
        // SAFETY: the token proves GFNI and AVX2; the caller upholds `Simd::dot`'s contract,
        // which (with no XOR rows) is `dot_gfni256`'s.
        unsafe {
            // Vectors per step by block size: one output 8 (256 bytes, the loop's own
            // instructions paid once per eight products), two 4, three 3, four and five 2.
            match (dsts.len(), add) {
                (1, false) => dot_gfni256::<1, 8, false>(coef, srcs, dsts, len),
                (1, true) => dot_gfni256::<1, 8, true>(coef, srcs, dsts, len),
                (2, false) => dot_gfni256::<2, 4, false>(coef, srcs, dsts, len),
                (2, true) => dot_gfni256::<2, 4, true>(coef, srcs, dsts, len),
                (3, false) => dot_gfni256::<3, 3, false>(coef, srcs, dsts, len),
                (3, true) => dot_gfni256::<3, 3, true>(coef, srcs, dsts, len),
                (4, false) => dot_gfni256::<4, 2, false>(coef, srcs, dsts, len),
                (4, true) => dot_gfni256::<4, 2, true>(coef, srcs, dsts, len),
                (5, false) => dot_gfni256::<5, 2, false>(coef, srcs, dsts, len),
                (5, true) => dot_gfni256::<5, 2, true>(coef, srcs, dsts, len),
                (b, _) => unreachable!("block of {b} outputs"),
            }
        }
    }

    unsafe fn xor(self, add: bool, srcs: &[*const u8], dst: *mut u8, len: usize) {
        // SAFETY: the token proves AVX2; the caller upholds `Simd::xor`'s contract, which is
        // `xor_avx2`'s.
        unsafe {
            if add {
                xor_avx2::<true>(srcs, dst, len)
            } else {
                xor_avx2::<false>(srcs, dst, len)
            }
        }
    }
}

/// The product of every byte of `x` with the constant whose bit matrix is `m`.
#[inline]
#[target_feature(enable = "gfni,avx512f")]
fn affine512(x: __m512i, m: u64) -> __m512i {
    _mm512_gf2p8affine_epi64_epi8::<0>(x, _mm512_set1_epi64(m as i64))
}

/// `dsts[i] (^)= Σ_j coef[j][i] · srcs[j]` for a block of `B` outputs, any length.
///
/// # Safety
///
/// The CPU has GFNI, AVX-512F and AVX-512BW; `coef.len() == srcs.len() * B`,
/// `dsts.len() == B`; every source is readable and every destination readable and writable for
/// `len` bytes; the destinations overlap nothing else.
#[target_feature(enable = "gfni,avx512f,avx512bw")]
unsafe fn dot_gfni512<const B: usize, const ADD: bool>(
    coef: &[u64],
    srcs: &[*const u8],
    dsts: &[*mut u8],
    len: usize,
) {
    let (coef, rest) = coef.as_chunks::<B>();
    assert!(rest.is_empty() && coef.len() == srcs.len());
    let dsts: [*mut u8; B] = dsts.try_into().expect("block size");
    // First the head bytes that bring most buffers to a 64-byte boundary (none if they are
    // aligned already), masked; then the main loop, aligned for those buffers.
    let head = aligned_head(srcs, &dsts, len);
    if head > 0 {
        // SAFETY: `head ≤ len`; the caller's guarantees.
        unsafe { masked_step::<B, ADD>(coef, srcs, &dsts, 0, head) };
    }
    // for p in steps of 128 bytes (two vectors, a and b):
    //     acc_a[·] = acc_b[·] = 0
    //     for sources s, t in pairs, with matrices M[i][s], M[i][t]:
    //         for each output i: acc[i] = acc[i] ^ affine(s[p..], M[i][s]) ^ affine(t[p..], M[i][t])
    //     for a last unpaired source s: acc[i] ^= affine(s[p..], M[i][s])
    //     dst[i][p..p+128] (^)= acc[i]
    let mut p = head;
    // Outputs far larger than the caches are written with non-temporal stores: they would
    // only evict the inputs, and a normal store first reads the line it writes (the stream
    // store does not), which is a third of the memory traffic of an encode out of cache.
    let stream = !ADD
        && len >= STREAM_MIN_BYTES
        && dsts.iter().all(|&d| (d as usize + head).is_multiple_of(64));
    let far = len >= PREFETCH_MIN_LEN;
    while p + 128 <= len {
        let mut acc_a = [_mm512_setzero_si512(); B];
        let mut acc_b = [_mm512_setzero_si512(); B];
        let mut c_pairs = coef.chunks_exact(2);
        let mut s_pairs = srcs.chunks_exact(2);
        for (c, s) in (&mut c_pairs).zip(&mut s_pairs) {
            // SAFETY: `p + 128 ≤ len` bytes of every source are readable.
            let (sa, sb, ta, tb) = unsafe {
                (
                    avx512::load(s[0].add(p)),
                    avx512::load(s[0].add(p + 64)),
                    avx512::load(s[1].add(p)),
                    avx512::load(s[1].add(p + 64)),
                )
            };
            // One prefetch per line (see `PREFETCH_AHEAD`), for regions long enough not to
            // be in L1 already.
            if far {
                for q in [p, p + 64] {
                    prefetch(s[0], q);
                    prefetch(s[1], q);
                }
            }
            for i in 0..B {
                let (ms, mt) = (
                    _mm512_set1_epi64(c[0][i] as i64),
                    _mm512_set1_epi64(c[1][i] as i64),
                );
                acc_a[i] = xor3(
                    acc_a[i],
                    _mm512_gf2p8affine_epi64_epi8::<0>(sa, ms),
                    _mm512_gf2p8affine_epi64_epi8::<0>(ta, mt),
                );
                acc_b[i] = xor3(
                    acc_b[i],
                    _mm512_gf2p8affine_epi64_epi8::<0>(sb, ms),
                    _mm512_gf2p8affine_epi64_epi8::<0>(tb, mt),
                );
            }
        }
        if let (Some(c), Some(&s)) = (c_pairs.remainder().first(), s_pairs.remainder().first()) {
            // SAFETY: `p + 128 ≤ len` bytes of every source are readable.
            let (sa, sb) = unsafe { (avx512::load(s.add(p)), avx512::load(s.add(p + 64))) };
            if far {
                prefetch(s, p);
                prefetch(s, p + 64);
            }
            for i in 0..B {
                let ms = _mm512_set1_epi64(c[i] as i64);
                acc_a[i] = _mm512_xor_si512(acc_a[i], _mm512_gf2p8affine_epi64_epi8::<0>(sa, ms));
                acc_b[i] = _mm512_xor_si512(acc_b[i], _mm512_gf2p8affine_epi64_epi8::<0>(sb, ms));
            }
        }
        for i in 0..B {
            let d = dsts[i];
            // SAFETY: `p + 128 ≤ len` bytes of every destination are readable and writable.
            unsafe {
                if ADD {
                    acc_a[i] = _mm512_xor_si512(acc_a[i], avx512::load(d.add(p)));
                    acc_b[i] = _mm512_xor_si512(acc_b[i], avx512::load(d.add(p + 64)));
                }
                if stream {
                    // `d + p` is 64-byte aligned: `stream` checked `d + head`, and `p - head`
                    // is a multiple of 128.
                    _mm512_stream_si512(d.add(p).cast(), acc_a[i]);
                    _mm512_stream_si512(d.add(p + 64).cast(), acc_b[i]);
                } else {
                    avx512::store(d.add(p), acc_a[i]);
                    avx512::store(d.add(p + 64), acc_b[i]);
                }
            }
        }
        p += 128;
    }
    if stream {
        // Order the stream stores before anything the caller does next.
        _mm_sfence();
    }
    // The rest (< 128 bytes), one vector at a time, the last one masked to the bytes left.
    while p < len {
        let n = (len - p).min(64);
        // SAFETY: `p + n ≤ len`; the caller's guarantees.
        unsafe { masked_step::<B, ADD>(coef, srcs, &dsts, p, n) };
        p += n;
    }
}

/// One masked vector of [`dot_gfni512`]: bytes `p .. p + n` (`n ≤ 64`).
///
/// # Safety
///
/// As for [`dot_gfni512`], with `p + n ≤ len`.
#[inline]
#[target_feature(enable = "gfni,avx512f,avx512bw")]
unsafe fn masked_step<const B: usize, const ADD: bool>(
    coef: &[[u64; B]],
    srcs: &[*const u8],
    dsts: &[*mut u8; B],
    p: usize,
    n: usize,
) {
    // acc[i] = Σ_s affine(s[p..p+n], M[i][s]); dst[i][p..p+n] (^)= acc[i]
    let mask = head_mask(n);
    let mut acc = [_mm512_setzero_si512(); B];
    for (c, &s) in coef.iter().zip(srcs) {
        // SAFETY: `mask` selects only the bytes `p .. p + n`, which the caller guarantees.
        let x = unsafe { load_masked(s.add(p), mask) };
        for i in 0..B {
            acc[i] = _mm512_xor_si512(acc[i], affine512(x, c[i]));
        }
    }
    for i in 0..B {
        let d = dsts[i];
        // SAFETY: `mask` selects only the bytes `p .. p + n`, which the caller guarantees.
        unsafe {
            if ADD {
                acc[i] = _mm512_xor_si512(acc[i], load_masked(d.add(p), mask));
            }
            store_masked(d.add(p), mask, acc[i]);
        }
    }
}

/// One step of `$v` vectors at offset `$p` of [`dot_gfni256`]: evaluates to the accumulators
/// `[[__m256i; $v]; B]` of the block's `B` outputs (`B` is the caller's const parameter).
///
/// The first source sets the accumulators (no zeroing, no XOR into zeros); the others are
/// taken two per loop iteration, so that the loop's own instructions (pointer and coefficient
/// updates, the branch), which compete with the vector instructions for the same ports, are
/// paid once per two sources. A macro, not a function, so that the step stays part of the
/// kernel's loop with its accumulators in registers (as in [`super::avx2`]).
///
/// Safety (of the caller): every source has `32·$v` readable bytes at `$p`;
/// `$coef.len() == $srcs.len()` and `$srcs` is not empty; GFNI and AVX2.
macro_rules! step256 {
    ($v:expr, $far:expr, $back:expr; $coef:expr, $srcs:expr, $p:expr) => {{
        let (coef, srcs, p, far, back): (&[[u64; B]], &[*const u8], usize, bool, bool) =
            ($coef, $srcs, $p, $far, $back);
        let mut acc = [[_mm256_setzero_si256(); $v]; B];
        source256!($v, true; &coef[0], srcs[0], p, far, back, acc);
        let (c2, s2) = (coef[1..].chunks_exact(2), srcs[1..].chunks_exact(2));
        let (c1, s1) = (c2.remainder(), s2.remainder());
        for (c, s) in c2.zip(s2) {
            source256!($v, false; &c[0], s[0], p, far, back, acc);
            source256!($v, false; &c[1], s[1], p, far, back, acc);
        }
        for (c, &s) in c1.iter().zip(s1) {
            source256!($v, false; c, s, p, far, back, acc);
        }
        acc
    }};
}

/// The contribution of one source `$s` with matrices `$c` at offset `$p`, `$v` vectors:
/// `$acc[i][v] (^)= affine($s[$p + 32·v ..], $c[i])` (`=` for the first source); the source
/// prefetched (one prefetch per line of the step) if `$far`.
///
/// Safety (of the caller): `$s` has `32·$v` readable bytes at `$p`; GFNI and AVX2.
macro_rules! source256 {
    ($v:expr, $first:expr; $c:expr, $s:expr, $p:expr, $far:expr, $back:expr, $acc:ident) => {{
        let (c, s, p): (&[u64; B], *const u8, usize) = ($c, $s, $p);
        if $far {
            for l in 0..(32 * ($v as usize)).div_ceil(64) {
                prefetch_dir(s, p + 64 * l, $back);
            }
        }
        // for each vector v: x = s[p + 32·v ..]; for each output i: acc[i][v] (^)= affine(x, M[i])
        let mut m = [_mm256_setzero_si256(); B];
        for (mi, &ci) in m.iter_mut().zip(c) {
            *mi = _mm256_set1_epi64x(ci as i64);
        }
        for v in 0..$v {
            // SAFETY: the caller guarantees 32·V readable bytes at `s + p`.
            let x = unsafe { avx2::load(s.add(p + 32 * v)) };
            for (a, &mi) in $acc.iter_mut().zip(&m) {
                let prod = _mm256_gf2p8affine_epi64_epi8::<0>(x, mi);
                a[v] = if $first {
                    prod
                } else {
                    _mm256_xor_si256(a[v], prod)
                };
            }
        }
    }};
}

/// `dsts[i] (^)= Σ_j coef[j][i] · srcs[j]` for a block of `B` outputs, `V` vectors per step
/// of the main loop.
///
/// # Safety
///
/// The CPU has GFNI and AVX2; `len ≥ 32`; `coef.len() == srcs.len() * B`, `dsts.len() == B`,
/// `srcs` is not empty; every source is readable and every destination readable and writable
/// for `len` bytes; the destinations overlap nothing else.
#[target_feature(enable = "gfni,avx,avx2")]
unsafe fn dot_gfni256<const B: usize, const V: usize, const ADD: bool>(
    coef: &[u64],
    srcs: &[*const u8],
    dsts: &[*mut u8],
    len: usize,
) {
    // SAFETY: the caller's guarantees, which are `dot_gfni256_dir`'s.
    unsafe {
        match (walk_back(ADD, srcs, dsts), len >= PREFETCH_MIN_LEN) {
            (true, true) => dot_gfni256_dir::<B, V, ADD, true, true>(coef, srcs, dsts, len),
            (true, false) => dot_gfni256_dir::<B, V, ADD, true, false>(coef, srcs, dsts, len),
            (false, true) => dot_gfni256_dir::<B, V, ADD, false, true>(coef, srcs, dsts, len),
            (false, false) => dot_gfni256_dir::<B, V, ADD, false, false>(coef, srcs, dsts, len),
        }
    }
}

/// [`dot_gfni256`] with the steps of the main loop taken backwards (from the end of the region
/// to its start) if `BACK`, forwards if not (see [`walk_back`]), and the sources prefetched
/// if `FAR` (regions of [`PREFETCH_MIN_LEN`] or more). `FAR` is a constant rather than a
/// variable because the compiler kept the variable's test in the loop, once per source: with
/// it, an Intel Xeon ran an RS(10,4) 4 KiB encode 1–6 % slower, RS(3,2) 5–9 % (three
/// alternated runs of `kernel_speed`).
///
/// # Safety
///
/// As [`dot_gfni256`].
#[target_feature(enable = "gfni,avx,avx2")]
unsafe fn dot_gfni256_dir<
    const B: usize,
    const V: usize,
    const ADD: bool,
    const BACK: bool,
    const FAR: bool,
>(
    coef: &[u64],
    srcs: &[*const u8],
    dsts: &[*mut u8],
    len: usize,
) {
    let (coef, rest) = coef.as_chunks::<B>();
    assert!(rest.is_empty() && coef.len() == srcs.len() && !srcs.is_empty() && len >= 32);
    let dsts: [*mut u8; B] = dsts.try_into().expect("block size");
    // for p in steps of 32·V bytes: acc = step(p); dst[i][p ..] (^)= acc[i]
    // Outputs set (not added to), of a mebibyte or more, 64-byte aligned, written a whole line
    // per step: non-temporal stores (see `STREAM_MIN_BYTES`).
    let stream = !ADD
        && V.is_multiple_of(2)
        && len >= STREAM_MIN_BYTES
        && dsts.iter().all(|&d| (d as usize).is_multiple_of(64));
    let steps = len / (32 * V);
    for i in 0..steps {
        let p = 32 * V * if BACK { steps - 1 - i } else { i };
        // Safety of the step: `p + 32·V ≤ len`; the caller's guarantees.
        let acc = step256!(V, FAR, BACK; coef, srcs, p);
        for (&d, a) in dsts.iter().zip(&acc) {
            for (v, &a) in a.iter().enumerate() {
                // SAFETY: `p + 32·V ≤ len` bytes of every destination are readable and
                // writable.
                unsafe {
                    let at = d.add(p + 32 * v);
                    if stream {
                        // `at` is 32-byte aligned: `d` is 64-byte aligned, `p` a multiple of
                        // 64 (V is even).
                        _mm256_stream_si256(at.cast(), a);
                    } else if ADD {
                        avx2::store(at, _mm256_xor_si256(a, avx2::load(at)));
                    } else {
                        avx2::store(at, a);
                    }
                }
            }
        }
    }
    if stream {
        // Order the stream stores before anything the caller does next.
        _mm_sfence();
    }
    // Then single vectors; the last r < 32 bytes through the vector at len - 32, changing
    // only its last r bytes.
    let mut p = 32 * V * steps;
    while p < len {
        let (q, mask) = if p + 32 <= len {
            (p, _mm256_set1_epi8(-1))
        } else {
            (len - 32, avx2::tail_mask(len - p))
        };
        // Safety of the step: `q + 32 ≤ len`; the caller's guarantees.
        let acc = step256!(1, false, false; coef, srcs, q);
        for (&d, [a]) in dsts.iter().zip(acc) {
            // SAFETY: `q + 32 ≤ len` bytes of `d` are readable and writable.
            unsafe {
                let old = avx2::load(d.add(q));
                let v = if ADD {
                    _mm256_xor_si256(old, _mm256_and_si256(a, mask))
                } else {
                    _mm256_blendv_epi8(old, a, mask)
                };
                avx2::store(d.add(q), v);
            }
        }
        p += 32;
    }
}
