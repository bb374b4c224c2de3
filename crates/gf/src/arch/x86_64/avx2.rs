//! AVX2 kernels: products by nibble tables looked up with `vpshufb`, 32 bytes per register.
//!
//! `c·x = T_lo[x & 15] ^ T_hi[x >> 4]` where `T_lo`, `T_hi` are the 16-entry tables of
//! [`crate::field::nibble_tables`]; `vpshufb` does 32 lookups per instruction (each 128-bit
//! lane looks up its own copy of the table, so the 16 bytes are broadcast to both lanes).
//! A region whose length is not a multiple of 32 ends with one vector that overlaps the previous
//! one; only its new bytes are changed.

use std::arch::x86_64::*;
use std::sync::OnceLock;

use super::{
    dispatch_block, prefetch_dir, walk_back, Blocking, Blockings, Simd, STREAM_MIN_BYTES,
    TAIL_MASK, TILE,
};
use crate::{field, Matrix};

/// Proof that the CPU has AVX2.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Avx2(());

impl Avx2 {
    /// The token, if this CPU has AVX2.
    pub(crate) fn new() -> Option<Avx2> {
        if is_x86_feature_detected!("avx2") {
            Some(Avx2(()))
        } else {
            None
        }
    }
}

impl Simd for Avx2 {
    const VECTOR_BYTES: usize = 32;
    // Up to four outputs take two vectors (64 bytes) per step: eight accumulators, four index
    // registers, the nibble mask and two tables fill the 16 ymm registers; five and six
    // outputs take one vector per step.
    const MAX_BLOCK: usize = 6;
    const XOR_ROWS_IN_BLOCKS: bool = true;
    const ANY_LENGTH: bool = false;

    /// The coefficient's nibble tables, each repeated in both 128-bit lanes.
    type Coef = Tables;

    fn coef(m: &Matrix, row: usize, col: usize) -> Tables {
        Tables::new(m.nibble_tables(row, col))
    }

    fn coef_of(c: u8) -> Tables {
        Tables::new(&field::nibble_tables(c))
    }

    fn blocking(blockings: &Blockings) -> &OnceLock<Blocking<Tables>> {
        &blockings.avx2
    }

    unsafe fn dot(
        self,
        add: bool,
        coef: &[Tables],
        xmask: &[u8],
        srcs: &[*const u8],
        dsts: &[*mut u8],
        xdsts: usize,
        len: usize,
    ) {
        // SAFETY: the token proves AVX2; the caller upholds `Simd::dot`'s contract, which is
        // `dot_avx2`'s (the listed shapes are every B ≥ 1, X ≤ 2 with B + X ≤ 6).
        unsafe {
            dispatch_block!(
                dot_avx2,
                dsts.len() - xdsts,
                xdsts,
                add,
                (coef, xmask, srcs, dsts, len),
                [(1, 0, 4)(2, 0, 2)(3, 0, 2)(4, 0, 2)(5, 0, 1)(6, 0, 1)(
                    1, 1, 2
                )(2, 1, 2)(3, 1, 2)(4, 1, 1)(5, 1, 1)(
                    1, 2, 2
                )(2, 2, 2)(3, 2, 1)(4, 2, 1)]
            )
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

/// The nibble tables of one coefficient as the kernel loads them: `lo` in both 128-bit lanes
/// of the first 32 bytes, `hi` in both lanes of the last 32 (two aligned loads, no
/// broadcast).
#[derive(Clone, Copy, Debug)]
#[repr(C, align(32))]
pub(crate) struct Tables([u8; 64]);

impl Tables {
    fn new(t: &[u8; 32]) -> Tables {
        let mut b = [0u8; 64];
        for (lane, half) in b.chunks_exact_mut(16).zip([0, 0, 16, 16]) {
            lane.copy_from_slice(&t[half..half + 16]);
        }
        Tables(b)
    }
}

/// Loads the 32 bytes at `p`.
///
/// # Safety
///
/// 32 bytes at `p` are readable; the CPU has AVX2.
#[inline]
#[target_feature(enable = "avx2")]
pub(crate) unsafe fn load(p: *const u8) -> __m256i {
    // SAFETY: the caller guarantees 32 readable bytes; the load is unaligned.
    unsafe { _mm256_loadu_si256(p.cast()) }
}

/// Stores 32 bytes at `p`.
///
/// # Safety
///
/// 32 bytes at `p` are writable; the CPU has AVX2.
#[inline]
#[target_feature(enable = "avx2")]
pub(crate) unsafe fn store(p: *mut u8, v: __m256i) {
    // SAFETY: the caller guarantees 32 writable bytes; the store is unaligned.
    unsafe { _mm256_storeu_si256(p.cast(), v) }
}

/// The mask of the last `r` bytes of a vector, `1 ≤ r ≤ 31`.
#[inline]
#[target_feature(enable = "avx2")]
pub(crate) fn tail_mask(r: usize) -> __m256i {
    let at = &TAIL_MASK[r..r + 32];
    // SAFETY: `at` is 32 readable bytes.
    unsafe { load(at.as_ptr()) }
}

/// The tables of one coefficient: `lo` and `hi`.
#[inline]
#[target_feature(enable = "avx2")]
fn tables(t: &Tables) -> (__m256i, __m256i) {
    let p = t.0.as_ptr();
    // SAFETY: `t` is 64 readable bytes, 32-byte aligned: two aligned loads at 0 and 32.
    unsafe {
        (
            _mm256_load_si256(p.cast()),
            _mm256_load_si256(p.add(32).cast()),
        )
    }
}

/// One step of `$v` vectors at offset `$p`: evaluates to the accumulators of the `B` product
/// rows and the `X` XOR rows (`B`, `X` are the caller's const parameters), as
/// `([[__m256i; $v]; B], [[__m256i; $v]; X])`.
///
/// The sources come in runs of equal XOR-row bits (`$runs`: start, end, bits; see
/// [`xor_runs`]), and each run's loop is written for its bits as a constant, so that no source
/// tests its bits: the test in the loop made the compiler select between the input and zero
/// with branches and spill accumulators (an LRC(12,2,2) encode, two product and two XOR rows,
/// ran 0.65–1.0× as fast as an RS(12,4) encode's four product rows on an Intel Xeon, and
/// 1.28–1.36× with the runs; an `rs-xor:6,3` encode 0.88× as fast as `rs:6,3`'s). The first
/// source sets the accumulators (no zeroing, no XOR into zeros); the others are taken two per
/// loop iteration (see [`run`]). A macro, not a function, so that the step is always part of
/// the kernel's loop: as a function, the compiler stopped inlining it once it held the
/// unrolled copies, and the accumulators went through memory.
///
/// Safety (of the caller): every source has `32·$v` readable bytes at `$p`;
/// `$coef.len() == $srcs.len()`, the runs cover `0..$srcs.len()` in order and `$srcs` is not
/// empty; AVX2.
macro_rules! step {
    ($v:expr, $back:expr; $coef:expr, $runs:expr, $srcs:expr, $p:expr) => {{
        let (coef, runs, srcs, p, back): (
            &[[Tables; B]],
            &[(usize, usize, u8)],
            &[*const u8],
            usize,
            bool,
        ) = ($coef, $runs, $srcs, $p, $back);
        let mut acc = [[_mm256_setzero_si256(); $v]; B];
        let mut xacc = [[_mm256_setzero_si256(); $v]; X];
        if !RUNS {
            // Every source with every XOR-row bit (no XOR rows, or all-ones rows): one run,
            // one loop (the runs' dispatch below cost RS(6,3) encodes 10–15 % and
            // `rs-xor:6,3` encodes about 10 % on an Intel Xeon).
            run!($v, (1u8 << X) - 1, true; coef, srcs, p, back, acc, xacc);
        } else {
            let (start, end, bits) = runs[0];
            by_bits!($v, bits, true; &coef[start..end], &srcs[start..end], p, back, acc, xacc);
            for &(start, end, bits) in &runs[1..] {
                by_bits!($v, bits, false; &coef[start..end], &srcs[start..end], p, back, acc, xacc);
            }
        }
        (acc, xacc)
    }};
}

/// [`run`] with the XOR-row bits `$bits` (a variable) made a constant in each arm. Bits
/// beyond the block's X ≤ 2 XOR rows do not occur.
macro_rules! by_bits {
    ($v:expr, $bits:expr, $first:expr; $c:expr, $s:expr, $p:expr, $back:expr, $acc:ident, $xacc:ident) => {{
        match $bits {
            0 => run!($v, 0, $first; $c, $s, $p, $back, $acc, $xacc),
            1 => run!($v, 1, $first; $c, $s, $p, $back, $acc, $xacc),
            2 => run!($v, 2, $first; $c, $s, $p, $back, $acc, $xacc),
            _ => run!($v, 3, $first; $c, $s, $p, $back, $acc, $xacc),
        }
    }};
}

/// The sources `$s` (tables `$c`) of one run, every one with the XOR-row bits `$bits` (a
/// constant): the first sets the accumulators if `$first`, the others are taken two per loop
/// iteration, so that the loop's own instructions (index, pointer and coefficient updates,
/// the branch), which compete with the vector instructions for the same ports, are paid once
/// per two sources.
macro_rules! run {
    ($v:expr, $bits:expr, $first:expr; $c:expr, $s:expr, $p:expr, $back:expr, $acc:ident, $xacc:ident) => {{
        let (mut c, mut s): (&[[Tables; B]], &[*const u8]) = ($c, $s);
        if $first {
            source!($v, true, $bits; &c[0], s[0], $p, $back, $acc, $xacc);
            (c, s) = (&c[1..], &s[1..]);
        }
        let (c2, s2) = (c.chunks_exact(2), s.chunks_exact(2));
        let (c1, s1) = (c2.remainder(), s2.remainder());
        for (c, s) in c2.zip(s2) {
            source!($v, false, $bits; &c[0], s[0], $p, $back, $acc, $xacc);
            source!($v, false, $bits; &c[1], s[1], $p, $back, $acc, $xacc);
        }
        for (c, &s) in c1.iter().zip(s1) {
            source!($v, false, $bits; c, s, $p, $back, $acc, $xacc);
        }
    }};
}

/// The contribution of one source `$s` with tables `$c` and XOR-row bits `$bits` (a
/// constant) at offset `$p`: `$acc[i] (^)= $c[i] · $s[$p ..]` (`=` for the first source), and
/// `$xacc[r] ^= $s[$p ..]` for each XOR row `r` with bit `r` of `$bits`; `$v` vectors.
///
/// Safety (of the caller): `$s` has `32·$v` readable bytes at `$p`; AVX2.
macro_rules! source {
    ($v:expr, $first:expr, $bits:expr; $c:expr, $s:expr, $p:expr, $back:expr, $acc:ident, $xacc:ident) => {{
        let (c, s, p, back): (&[Tables; B], *const u8, usize, bool) = ($c, $s, $p, $back);
        let nibble = _mm256_set1_epi8(0x0f);
        // x = s[p .. p + 32·V]
        // for each XOR row r with bit r of bits: xacc[r] ^= x
        // lo = x & 15; hi = (x >> 4) & 15
        // for each product row i: acc[i] (^)= pshufb(T_lo[i], lo) ^ pshufb(T_hi[i], hi)
        let mut x = [_mm256_setzero_si256(); $v];
        for (v, xv) in x.iter_mut().enumerate() {
            // SAFETY: the caller guarantees 32·V readable bytes at `s + p`.
            *xv = unsafe { load(s.add(p + 32 * v)) };
        }
        // One prefetch per line of the step (see `PREFETCH_AHEAD`; one per step for a
        // 32-byte step: each line is prefetched twice, which costs a load slot, of which
        // there are spare).
        for l in 0..($v as usize).div_ceil(2) {
            prefetch_dir(s, p + 64 * l, back);
        }
        for (r, xa) in $xacc.iter_mut().enumerate() {
            if ($bits as u8) & (1 << r) != 0 {
                for (a, &xv) in xa.iter_mut().zip(&x) {
                    *a = _mm256_xor_si256(*a, xv);
                }
            }
        }
        let mut lo = [_mm256_setzero_si256(); $v];
        let mut hi = [_mm256_setzero_si256(); $v];
        for v in 0..$v {
            lo[v] = _mm256_and_si256(x[v], nibble);
            hi[v] = _mm256_and_si256(_mm256_srli_epi16::<4>(x[v]), nibble);
        }
        for (a, t) in $acc.iter_mut().zip(c) {
            let (t_lo, t_hi) = tables(t);
            for v in 0..$v {
                let prod = _mm256_xor_si256(
                    _mm256_shuffle_epi8(t_lo, lo[v]),
                    _mm256_shuffle_epi8(t_hi, hi[v]),
                );
                a[v] = if $first {
                    prod
                } else {
                    _mm256_xor_si256(a[v], prod)
                };
            }
        }
    }};
}

/// The runs of equal XOR-row bits of `xmask` (at most [`TILE`] sources): `(start, end, bits)`
/// in order, in the first `n` entries of the array, `n` returned beside it.
fn xor_runs(xmask: &[u8]) -> ([(usize, usize, u8); TILE], usize) {
    assert!(xmask.len() <= TILE, "a tile has at most {TILE} sources");
    let mut runs = [(0, 0, 0); TILE];
    let mut n = 0;
    for (i, &bits) in xmask.iter().enumerate() {
        if n > 0 && runs[n - 1].2 == bits {
            runs[n - 1].1 = i + 1;
        } else {
            runs[n] = (i, i + 1, bits);
            n += 1;
        }
    }
    (runs, n)
}

/// `dst[p .. p + 32·V] (^)= a`.
///
/// # Safety
///
/// `32·V` bytes at `dst + p` are readable and writable.
#[inline]
#[target_feature(enable = "avx2")]
unsafe fn put<const V: usize, const ADD: bool>(dst: *mut u8, p: usize, a: &[__m256i; V]) {
    for (v, &a) in a.iter().enumerate() {
        // SAFETY: the caller guarantees the bytes.
        unsafe {
            let at = dst.add(p + 32 * v);
            store(
                at,
                if ADD {
                    _mm256_xor_si256(a, load(at))
                } else {
                    a
                },
            );
        }
    }
}

/// The block kernel of [`Simd::dot`] for `B` product rows and `X` XOR rows (`dsts` holds
/// them in that order), `V` vectors per step of the main loop.
///
/// # Safety
///
/// The CPU has AVX2; `len ≥ 32`; `coef.len() == srcs.len() * B`,
/// `xmask.len() == srcs.len()`, `dsts.len() == B + X`; every source is readable and every
/// destination readable and writable for `len` bytes; the destinations overlap nothing else.
#[target_feature(enable = "avx2")]
unsafe fn dot_avx2<const B: usize, const X: usize, const V: usize, const ADD: bool>(
    coef: &[Tables],
    xmask: &[u8],
    srcs: &[*const u8],
    dsts: &[*mut u8],
    len: usize,
) {
    assert_eq!(xmask.len(), srcs.len());
    let (runs, nruns) = xor_runs(xmask);
    let runs = &runs[..nruns];
    // Whether the sources differ in their XOR-row bits (X ≤ 2): if not, one plain loop.
    let many = !matches!(runs, [(_, _, bits)] if *bits == (1u8 << X) - 1);
    // SAFETY: the caller's guarantees, which are `dot_avx2_dir`'s.
    unsafe {
        match (walk_back(ADD, srcs, dsts), many) {
            (true, true) => dot_avx2_dir::<B, X, V, ADD, true, true>(coef, runs, srcs, dsts, len),
            (true, false) => dot_avx2_dir::<B, X, V, ADD, true, false>(coef, runs, srcs, dsts, len),
            (false, true) => dot_avx2_dir::<B, X, V, ADD, false, true>(coef, runs, srcs, dsts, len),
            (false, false) => {
                dot_avx2_dir::<B, X, V, ADD, false, false>(coef, runs, srcs, dsts, len)
            }
        }
    }
}

/// [`dot_avx2`] with the steps of the main loop taken backwards (from the end of the region
/// to its start) if `BACK`, forwards if not (see [`walk_back`]). `runs` are the sources' runs
/// of equal XOR-row bits ([`xor_runs`]); `RUNS` if there is more than one or its bits are not
/// all X (if not, every source has all X of them and the step is one plain loop).
///
/// # Safety
///
/// As [`dot_avx2`].
#[target_feature(enable = "avx2")]
unsafe fn dot_avx2_dir<
    const B: usize,
    const X: usize,
    const V: usize,
    const ADD: bool,
    const BACK: bool,
    const RUNS: bool,
>(
    coef: &[Tables],
    runs: &[(usize, usize, u8)],
    srcs: &[*const u8],
    dsts: &[*mut u8],
    len: usize,
) {
    let (coef, rest) = coef.as_chunks::<B>();
    assert!(
        rest.is_empty()
            && !srcs.is_empty()
            && coef.len() == srcs.len()
            && runs.last().is_some_and(|r| r.1 == srcs.len())
            && dsts.len() == B + X
            && len >= 32
    );
    let (pdsts, xdsts) = dsts.split_at(B);
    // Outputs set (not added to), of a mebibyte or more, 64-byte aligned, written a whole
    // line per step: non-temporal stores (see `STREAM_MIN_BYTES`).
    let stream = !ADD
        && V.is_multiple_of(2)
        && len >= STREAM_MIN_BYTES
        && dsts.iter().all(|&d| (d as usize).is_multiple_of(64))
        && nt_enabled();
    // for p in steps of 32·V bytes, forwards or backwards (see `walk_back`):
    //     (acc, xacc) = step(p); dst[·][p ..] (^)= acc, xacc
    let steps = len / (32 * V);
    for i in 0..steps {
        let p = 32 * V * if BACK { steps - 1 - i } else { i };
        // Safety of the step: `p + 32·V ≤ len`; the caller's guarantees.
        let (acc, xacc) = step!(V, BACK; coef, runs, srcs, p);
        // SAFETY: `p + 32·V ≤ len`; the caller's guarantees.
        unsafe {
            for (&d, a) in pdsts.iter().zip(&acc).chain(xdsts.iter().zip(&xacc)) {
                if stream {
                    for (v, &a) in a.iter().enumerate() {
                        // `d + p + 32·v` is 32-byte aligned: `d` is 64-byte aligned and
                        // `p` a multiple of 64.
                        _mm256_stream_si256(d.add(p + 32 * v).cast(), a);
                    }
                } else {
                    put::<V, ADD>(d, p, a);
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
            (len - 32, tail_mask(len - p))
        };
        // SAFETY: `q + 32 ≤ len`; the caller's guarantees.
        let (acc, xacc) = step!(1, false; coef, runs, srcs, q);
        for (&d, [a]) in pdsts.iter().zip(acc).chain(xdsts.iter().zip(xacc)) {
            // SAFETY: `q + 32 ≤ len` bytes of `d` are readable and writable.
            unsafe {
                let old = load(d.add(q));
                let v = if ADD {
                    _mm256_xor_si256(old, _mm256_and_si256(a, mask))
                } else {
                    _mm256_blendv_epi8(old, a, mask)
                };
                store(d.add(q), v);
            }
        }
        p += 32;
    }
}

/// `dst (^)= Σ srcs`.
///
/// # Safety
///
/// The CPU has AVX2; `len ≥ 32`; every source is readable and `dst` readable and writable for
/// `len` bytes; `dst` overlaps no source.
#[target_feature(enable = "avx2")]
pub(crate) unsafe fn xor_avx2<const ADD: bool>(srcs: &[*const u8], dst: *mut u8, len: usize) {
    assert!(len >= 32);
    // for p in steps of 128 bytes: acc[0..4] = ADD ? dst[p..] : 0; acc ^= s[p..] for each s;
    //     dst[p..] = acc
    let mut p = 0;
    while p + 128 <= len {
        let mut acc = [_mm256_setzero_si256(); 4];
        if ADD {
            for (v, a) in acc.iter_mut().enumerate() {
                // SAFETY: `p + 128 ≤ len`.
                *a = unsafe { load(dst.add(p + 32 * v)) };
            }
        }
        for &s in srcs {
            for (v, a) in acc.iter_mut().enumerate() {
                // SAFETY: `p + 128 ≤ len`.
                *a = _mm256_xor_si256(*a, unsafe { load(s.add(p + 32 * v)) });
            }
        }
        for (v, a) in acc.into_iter().enumerate() {
            // SAFETY: `p + 128 ≤ len`.
            unsafe { store(dst.add(p + 32 * v), a) };
        }
        p += 128;
    }
    // The same, one vector at a time, then one overlapping vector for the last r < 32 bytes.
    while p < len {
        let (q, mask) = if p + 32 <= len {
            (p, _mm256_set1_epi8(-1))
        } else {
            (len - 32, tail_mask(len - p))
        };
        // SAFETY: `q + 32 ≤ len`.
        let old = unsafe { load(dst.add(q)) };
        let mut acc = _mm256_setzero_si256();
        for &s in srcs {
            // SAFETY: `q + 32 ≤ len`.
            acc = _mm256_xor_si256(acc, unsafe { load(s.add(q)) });
        }
        let v = if ADD {
            _mm256_xor_si256(old, _mm256_and_si256(acc, mask))
        } else {
            _mm256_blendv_epi8(old, acc, mask)
        };
        // SAFETY: `q + 32 ≤ len`.
        unsafe { store(dst.add(q), v) };
        p += 32;
    }
}

/// Whether the AVX2 kernel streams large outputs: on Intel CPUs, where it measured faster
/// (an Intel Xeon with AVX-512, one thread, 1 MiB chunks cold: 0.65–0.88× of the XOR pass
/// against 0.49–0.68× without), not on AMD ones, where an earlier measurement on Zen 3 found
/// the streamed AVX2 encode half as fast.
fn nt_enabled() -> bool {
    static INTEL: OnceLock<bool> = OnceLock::new();
    *INTEL.get_or_init(|| {
        // CPUID leaf 0: the vendor string in EBX, EDX, ECX.
        let id = __cpuid(0);
        let mut vendor = [0u8; 12];
        vendor[..4].copy_from_slice(&id.ebx.to_le_bytes());
        vendor[4..8].copy_from_slice(&id.edx.to_le_bytes());
        vendor[8..].copy_from_slice(&id.ecx.to_le_bytes());
        &vendor == b"GenuineIntel"
    })
}
