//! AVX2 kernels: products by nibble tables looked up with `vpshufb`, 32 bytes per register.
//!
//! `c·x = T_lo[x & 15] ^ T_hi[x >> 4]` where `T_lo`, `T_hi` are the 16-entry tables of
//! [`crate::field::nibble_tables`]; `vpshufb` does 32 lookups per instruction (each 128-bit
//! lane looks up its own copy of the table, so the 16 bytes are broadcast to both lanes).
//! A region whose length is not a multiple of 32 ends with one vector that overlaps the previous
//! one; only its new bytes are changed.

use std::arch::x86_64::*;
use std::sync::OnceLock;

use super::{dispatch_block, Plan, Plans, Simd, TAIL_MASK};
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
    // Six accumulators, two index registers, the nibble mask, two tables and temporaries fit
    // the 16 ymm registers without spilling.
    const MAX_BLOCK: usize = 6;
    const SPLIT_XOR_ROWS: bool = true;
    const ANY_LENGTH: bool = false;

    /// The coefficient's nibble tables (`lo` then `hi`).
    type Coef = [u8; 32];

    fn coef(m: &Matrix, row: usize, col: usize) -> [u8; 32] {
        *m.nibble_tables(row, col)
    }

    fn coef_of(c: u8) -> [u8; 32] {
        field::nibble_tables(c)
    }

    fn plan(plans: &Plans) -> &OnceLock<Plan<[u8; 32]>> {
        &plans.avx2
    }

    unsafe fn dot(
        self,
        add: bool,
        coef: &[Self::Coef],
        srcs: &[*const u8],
        dsts: &[*mut u8],
        len: usize,
    ) {
        // SAFETY: the token proves AVX2; the caller upholds `Simd::dot`'s contract, which is
        // `dot_avx2`'s.
        unsafe {
            dispatch_block!(dot_avx2, dsts.len(), add, (coef, srcs, dsts, len), [1 2 3 4 5 6])
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

/// The nibble tables `t`, each broadcast to both 128-bit lanes.
#[inline]
#[target_feature(enable = "avx2")]
fn tables(t: &[u8; 32]) -> (__m256i, __m256i) {
    let p = t.as_ptr();
    // SAFETY: `t` is 32 readable bytes: two 16-byte loads at offsets 0 and 16.
    unsafe {
        (
            _mm256_broadcastsi128_si256(_mm_loadu_si128(p.cast())),
            _mm256_broadcastsi128_si256(_mm_loadu_si128(p.add(16).cast())),
        )
    }
}

/// The products of the 32 bytes at offset `p` of every source with a block of `B` outputs.
///
/// # Safety
///
/// Every source has 32 readable bytes at `p`.
#[inline]
#[target_feature(enable = "avx2")]
unsafe fn products<const B: usize>(
    coef: &[[[u8; 32]; B]],
    srcs: &[*const u8],
    p: usize,
) -> [__m256i; B] {
    let nibble = _mm256_set1_epi8(0x0f);
    let mut acc = [_mm256_setzero_si256(); B];
    // for each source s with tables T[·][s]:
    //     x = s[p .. p+32]; lo = x & 15; hi = (x >> 4) & 15
    //     for each output i: acc[i] ^= pshufb(T_lo[i][s], lo) ^ pshufb(T_hi[i][s], hi)
    for (c, &s) in coef.iter().zip(srcs) {
        // SAFETY: the caller guarantees 32 readable bytes at `s + p`.
        let x = unsafe { load(s.add(p)) };
        let lo = _mm256_and_si256(x, nibble);
        let hi = _mm256_and_si256(_mm256_srli_epi16::<4>(x), nibble);
        for (a, t) in acc.iter_mut().zip(c) {
            let (t_lo, t_hi) = tables(t);
            let prod =
                _mm256_xor_si256(_mm256_shuffle_epi8(t_lo, lo), _mm256_shuffle_epi8(t_hi, hi));
            *a = _mm256_xor_si256(*a, prod);
        }
    }
    acc
}

/// `dsts[i] (^)= Σ_j coef[j][i] · srcs[j]` for a block of `B` outputs.
///
/// # Safety
///
/// The CPU has AVX2; `len ≥ 32`; `coef.len() == srcs.len() * B`, `dsts.len() == B`; every
/// source is readable and every destination readable and writable for `len` bytes; the
/// destinations overlap nothing else.
#[target_feature(enable = "avx2")]
unsafe fn dot_avx2<const B: usize, const ADD: bool>(
    coef: &[[u8; 32]],
    srcs: &[*const u8],
    dsts: &[*mut u8],
    len: usize,
) {
    let (coef, rest) = coef.as_chunks::<B>();
    assert!(rest.is_empty() && coef.len() == srcs.len() && len >= 32);
    let dsts: [*mut u8; B] = dsts.try_into().expect("block size");
    // for p in 0, 32, ... while p + 32 ≤ len:
    //     acc = products(p); dst[i][p .. p+32] (^)= acc[i]
    let mut p = 0;
    while p + 32 <= len {
        // SAFETY: `p + 32 ≤ len`; the caller's guarantees.
        let acc = unsafe { products::<B>(coef, srcs, p) };
        for (&d, a) in dsts.iter().zip(acc) {
            // SAFETY: `p + 32 ≤ len` bytes of `d` are readable and writable.
            unsafe {
                let v = if ADD {
                    _mm256_xor_si256(a, load(d.add(p)))
                } else {
                    a
                };
                store(d.add(p), v);
            }
        }
        p += 32;
    }
    // The last r < 32 bytes: the vector at len - 32, changing only its last r bytes.
    if p < len {
        let q = len - 32;
        let mask = tail_mask(len - p);
        // SAFETY: `q + 32 = len`; the caller's guarantees.
        let acc = unsafe { products::<B>(coef, srcs, q) };
        for (&d, a) in dsts.iter().zip(acc) {
            // SAFETY: `q + 32 = len` bytes of `d` are readable and writable.
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
