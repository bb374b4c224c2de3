//! AVX-512BW kernels: the nibble-table method of [`super::avx2`] on 64-byte registers, two
//! registers per step, `vpternlogd` merging both lookups into the accumulator in one
//! instruction, and masked loads and stores for the last partial vector.

use std::arch::x86_64::*;
use std::sync::OnceLock;

use super::{dispatch_block, prefetch, Blocking, Blockings, Simd, STREAM_MIN_BYTES};
use crate::{field, Matrix};

/// Proof that the CPU has AVX-512F and AVX-512BW.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Avx512(());

impl Avx512 {
    /// The token, if this CPU has AVX-512F and AVX-512BW.
    pub(crate) fn new() -> Option<Avx512> {
        if is_x86_feature_detected!("avx512f") && is_x86_feature_detected!("avx512bw") {
            Some(Avx512(()))
        } else {
            None
        }
    }
}

impl Simd for Avx512 {
    const VECTOR_BYTES: usize = 64;
    // Two vectors per step: 16 accumulators, 4 index registers, the mask and two tables fit
    // the 32 zmm registers.
    const MAX_BLOCK: usize = 8;
    const XOR_ROWS_IN_BLOCKS: bool = true;
    const ANY_LENGTH: bool = true;

    /// The coefficient's nibble tables (`lo` then `hi`).
    type Coef = [u8; 32];

    fn coef(m: &Matrix, row: usize, col: usize) -> [u8; 32] {
        *m.nibble_tables(row, col)
    }

    fn coef_of(c: u8) -> [u8; 32] {
        field::nibble_tables(c)
    }

    fn blocking(blockings: &Blockings) -> &OnceLock<Blocking<[u8; 32]>> {
        &blockings.avx512
    }

    unsafe fn dot(
        self,
        add: bool,
        coef: &[Self::Coef],
        xmask: &[u8],
        srcs: &[*const u8],
        dsts: &[*mut u8],
        xdsts: usize,
        len: usize,
    ) {
        // SAFETY: the token proves AVX-512F and AVX-512BW; the caller upholds `Simd::dot`'s
        // contract, which is `dot_avx512`'s (the listed shapes are every B ≥ 1, X ≤ 2 with
        // B + X ≤ 8).
        unsafe {
            dispatch_block!(
                dot_avx512,
                dsts.len() - xdsts,
                xdsts,
                add,
                (coef, xmask, srcs, dsts, len),
                [
                    (1, 0)(2, 0)(3, 0)(4, 0)(5, 0)(6, 0)(7, 0)(8, 0)(1, 1)(2, 1)(3, 1)(4, 1)(5, 1)(
                        6, 1
                    )(7, 1)(1, 2)(2, 2)(3, 2)(4, 2)(5, 2)(6, 2)
                ]
            )
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

/// Loads the 64 bytes at `p`.
///
/// # Safety
///
/// 64 bytes at `p` are readable; the CPU has AVX-512F.
#[inline]
#[target_feature(enable = "avx512f")]
pub(crate) unsafe fn load(p: *const u8) -> __m512i {
    // SAFETY: the caller guarantees 64 readable bytes; the load is unaligned.
    unsafe { _mm512_loadu_si512(p.cast()) }
}

/// Stores 64 bytes at `p`.
///
/// # Safety
///
/// 64 bytes at `p` are writable; the CPU has AVX-512F.
#[inline]
#[target_feature(enable = "avx512f")]
pub(crate) unsafe fn store(p: *mut u8, v: __m512i) {
    // SAFETY: the caller guarantees 64 writable bytes; the store is unaligned.
    unsafe { _mm512_storeu_si512(p.cast(), v) }
}

/// Loads the bytes of `p .. p + 64` selected by `mask`, zero elsewhere.
///
/// # Safety
///
/// The selected bytes are readable (the others are not touched: masked-off elements of a
/// masked load do not fault); the CPU has AVX-512BW.
#[inline]
#[target_feature(enable = "avx512f,avx512bw")]
pub(crate) unsafe fn load_masked(p: *const u8, mask: __mmask64) -> __m512i {
    // SAFETY: the caller guarantees the selected bytes are readable.
    unsafe { _mm512_maskz_loadu_epi8(mask, p.cast()) }
}

/// Stores the bytes of `v` selected by `mask` at `p .. p + 64`.
///
/// # Safety
///
/// The selected bytes are writable; the CPU has AVX-512BW.
#[inline]
#[target_feature(enable = "avx512f,avx512bw")]
pub(crate) unsafe fn store_masked(p: *mut u8, mask: __mmask64, v: __m512i) {
    // SAFETY: the caller guarantees the selected bytes are writable.
    unsafe { _mm512_mask_storeu_epi8(p.cast(), mask, v) }
}

/// The mask of the first `min(r, 64)` bytes.
#[inline]
pub(crate) fn head_mask(r: usize) -> __mmask64 {
    if r >= 64 {
        !0
    } else {
        (1u64 << r) - 1
    }
}

/// Regions at least this long start with a masked step to the alignment most of their
/// buffers share (see [`aligned_head`]); shorter ones are not worth the extra step.
pub(crate) const ALIGN_MIN_LEN: usize = 256;

/// How many bytes (< 64, ≤ `len`) to process first, masked, so that as many buffers as
/// possible are 64-byte aligned from then on; destinations count twice, as a store that
/// crosses a cache line costs more than a load.
///
/// A 64-byte access that crosses a cache line costs two, and buffers of one call usually
/// share their misalignment: `malloc` puts a large block 16 bytes past a page boundary, so
/// without this every load and store of the main loop would cross a line (on Zen 4 that
/// costs a third of the speed at 128 KiB).
#[inline]
pub(crate) fn aligned_head(srcs: &[*const u8], dsts: &[*mut u8], len: usize) -> usize {
    if len < ALIGN_MIN_LEN {
        return 0;
    }
    // The usual case first: every buffer at the same offset in its line (aligned buffers, or
    // malloc's blocks alike), decided without the vote.
    let first = match (dsts.first(), srcs.first()) {
        (Some(&d), _) => d as usize % 64,
        (None, Some(&s)) => s as usize % 64,
        (None, None) => return 0,
    };
    if srcs.iter().all(|&s| s as usize % 64 == first)
        && dsts.iter().all(|&d| d as usize % 64 == first)
    {
        return (64 - first) % 64;
    }
    // votes[r] = weight of buffers at address ≡ r (mod 64)
    let mut votes = [0u16; 64];
    for &s in srcs {
        votes[s as usize % 64] += 1;
    }
    for &d in dsts {
        votes[d as usize % 64] += 2;
    }
    let mut best = 0;
    for r in 1..64 {
        if votes[r] > votes[best] {
            best = r;
        }
    }
    (64 - best) % 64
}

/// `a ^ b ^ c` in one instruction.
#[inline]
#[target_feature(enable = "avx512f")]
pub(crate) fn xor3(a: __m512i, b: __m512i, c: __m512i) -> __m512i {
    _mm512_ternarylogic_epi64::<0x96>(a, b, c)
}

/// The nibble tables `t`, each broadcast to the four 128-bit lanes.
#[inline]
#[target_feature(enable = "avx512f")]
fn tables(t: &[u8; 32]) -> (__m512i, __m512i) {
    let p = t.as_ptr();
    // SAFETY: `t` is 32 readable bytes: two 16-byte loads at offsets 0 and 16.
    unsafe {
        (
            _mm512_broadcast_i32x4(_mm_loadu_si128(p.cast())),
            _mm512_broadcast_i32x4(_mm_loadu_si128(p.add(16).cast())),
        )
    }
}

/// `x & 15` and `x >> 4` of every byte.
#[inline]
#[target_feature(enable = "avx512f,avx512bw")]
fn nibbles(x: __m512i) -> (__m512i, __m512i) {
    let nibble = _mm512_set1_epi8(0x0f);
    (
        _mm512_and_si512(x, nibble),
        _mm512_and_si512(_mm512_srli_epi16::<4>(x), nibble),
    )
}

/// One step of `V` vectors at offset `p` (the last one loaded under `last`): the
/// accumulators of the `B` product rows and of the `X` XOR rows.
///
/// # Safety
///
/// Every source has `64·(V-1)` readable bytes at `p` and then the bytes `last` selects;
/// `xmask.len() == srcs.len()`.
#[inline]
#[target_feature(enable = "avx512f,avx512bw")]
unsafe fn step<const B: usize, const X: usize, const V: usize>(
    coef: &[[[u8; 32]; B]],
    xmask: &[u8],
    srcs: &[*const u8],
    p: usize,
    last: __mmask64,
) -> ([[__m512i; V]; B], [[__m512i; V]; X]) {
    let mut acc = [[_mm512_setzero_si512(); V]; B];
    let mut xacc = [[_mm512_setzero_si512(); V]; X];
    // for each source s with tables T[·][s] and XOR-row bits m:
    //     x = s[p .. p + 64·V]; for each XOR row r with bit r of m: xacc[r] ^= x
    //     for each product row i: acc[i] = acc[i] ^ pshufb(T_lo[i][s], lo) ^ pshufb(T_hi[i][s], hi)
    for ((c, &m), &s) in coef.iter().zip(xmask).zip(srcs) {
        let mut x = [_mm512_setzero_si512(); V];
        for (v, xv) in x.iter_mut().enumerate() {
            // SAFETY: the caller guarantees the bytes (a full vector, or those of `last`).
            *xv = unsafe {
                if v + 1 < V || last == !0 {
                    load(s.add(p + 64 * v))
                } else {
                    load_masked(s.add(p + 64 * v), last)
                }
            };
        }
        if last == !0 {
            // Full steps of the main loop: one prefetch per line (see `PREFETCH_AHEAD`).
            for v in 0..V {
                prefetch(s, p + 64 * v);
            }
        }
        for (r, xa) in xacc.iter_mut().enumerate() {
            if m & (1 << r) != 0 {
                for (a, &xv) in xa.iter_mut().zip(&x) {
                    *a = _mm512_xor_si512(*a, xv);
                }
            }
        }
        let mut lo = [_mm512_setzero_si512(); V];
        let mut hi = [_mm512_setzero_si512(); V];
        for v in 0..V {
            (lo[v], hi[v]) = nibbles(x[v]);
        }
        for (a, t) in acc.iter_mut().zip(c) {
            let (t_lo, t_hi) = tables(t);
            for v in 0..V {
                a[v] = xor3(
                    a[v],
                    _mm512_shuffle_epi8(t_lo, lo[v]),
                    _mm512_shuffle_epi8(t_hi, hi[v]),
                );
            }
        }
    }
    (acc, xacc)
}

/// `dst[p .. p + 64·V] (^)= a`, the last vector under `last`.
///
/// # Safety
///
/// The bytes are readable and writable, as for [`step`].
#[inline]
#[target_feature(enable = "avx512f,avx512bw")]
unsafe fn put<const V: usize, const ADD: bool>(
    dst: *mut u8,
    p: usize,
    a: &[__m512i; V],
    last: __mmask64,
) {
    for (v, &a) in a.iter().enumerate() {
        // SAFETY: the caller guarantees the bytes.
        unsafe {
            let at = dst.add(p + 64 * v);
            if v + 1 < V || last == !0 {
                store(
                    at,
                    if ADD {
                        _mm512_xor_si512(a, load(at))
                    } else {
                        a
                    },
                );
            } else {
                let a = if ADD {
                    _mm512_xor_si512(a, load_masked(at, last))
                } else {
                    a
                };
                store_masked(at, last, a);
            }
        }
    }
}

/// The block kernel of [`Simd::dot`] for `B` product rows and `X` XOR rows (`dsts` holds
/// them in that order), any length.
///
/// # Safety
///
/// The CPU has AVX-512F and AVX-512BW; `coef.len() == srcs.len() * B`,
/// `xmask.len() == srcs.len()`, `dsts.len() == B + X`; every source is readable and every
/// destination readable and writable for `len` bytes; the destinations overlap nothing else.
#[target_feature(enable = "avx512f,avx512bw")]
unsafe fn dot_avx512<const B: usize, const X: usize, const ADD: bool>(
    coef: &[[u8; 32]],
    xmask: &[u8],
    srcs: &[*const u8],
    dsts: &[*mut u8],
    len: usize,
) {
    let (coef, rest) = coef.as_chunks::<B>();
    assert!(
        rest.is_empty()
            && coef.len() == srcs.len()
            && xmask.len() == srcs.len()
            && dsts.len() == B + X
    );
    let (pdsts, xdsts) = dsts.split_at(B);
    // Steps of 128 bytes (two vectors); then single vectors, the last one masked. (Unlike
    // the GFNI kernel, this one does not first align its buffers: it is bound by its
    // shuffles, and the extra masked step measured slower at 4 KiB and no faster at 128 KiB
    // on an Intel Xeon with AVX-512.)
    let mut p = 0;
    // Outputs set (not added to), of a mebibyte or more, 64-byte aligned: non-temporal
    // stores (see `STREAM_MIN_BYTES`; on an Intel Xeon, one thread, 1 MiB chunks cold,
    // 0.72–0.88× of the XOR pass against 0.50–0.62× without).
    let stream =
        !ADD && len >= STREAM_MIN_BYTES && dsts.iter().all(|&d| (d as usize).is_multiple_of(64));
    while p + 128 <= len {
        // SAFETY: `p + 128 ≤ len`; the caller's guarantees.
        unsafe {
            let (acc, xacc) = step::<B, X, 2>(coef, xmask, srcs, p, !0);
            for (&d, a) in pdsts.iter().zip(&acc).chain(xdsts.iter().zip(&xacc)) {
                if stream {
                    // `d + p` is 64-byte aligned: `d` is, and `p` is a multiple of 128.
                    _mm512_stream_si512(d.add(p).cast(), a[0]);
                    _mm512_stream_si512(d.add(p + 64).cast(), a[1]);
                } else {
                    put::<2, ADD>(d, p, a, !0);
                }
            }
        }
        p += 128;
    }
    if stream {
        // Order the stream stores before anything the caller does next.
        _mm_sfence();
    }
    while p < len {
        let mask = head_mask(len - p);
        // SAFETY: `mask` selects only bytes below `len`.
        unsafe {
            let (acc, xacc) = step::<B, X, 1>(coef, xmask, srcs, p, mask);
            for (&d, a) in pdsts.iter().zip(&acc).chain(xdsts.iter().zip(&xacc)) {
                put::<1, ADD>(d, p, a, mask);
            }
        }
        p += 64;
    }
}

/// `dst (^)= Σ srcs`, any length.
///
/// # Safety
///
/// The CPU has AVX-512F and AVX-512BW; every source is readable and `dst` readable and
/// writable for `len` bytes; `dst` overlaps no source.
#[target_feature(enable = "avx512f,avx512bw")]
pub(crate) unsafe fn xor_avx512<const ADD: bool>(srcs: &[*const u8], dst: *mut u8, len: usize) {
    // First the head bytes that bring most buffers to a 64-byte boundary, masked.
    let head = aligned_head(srcs, &[dst], len);
    if head > 0 {
        // SAFETY: `head ≤ len`; the caller's guarantees.
        unsafe { xor_masked::<ADD>(srcs, dst, 0, head) };
    }
    // for p in steps of 256 bytes: acc[0..4] = ADD ? dst[p..] : 0
    //     for sources s, t in pairs: acc = acc ^ s[p..] ^ t[p..]   (one vpternlog)
    //     dst[p..] = acc
    let mut p = head;
    while p + 256 <= len {
        let mut acc = [_mm512_setzero_si512(); 4];
        if ADD {
            for (v, a) in acc.iter_mut().enumerate() {
                // SAFETY: `p + 256 ≤ len`.
                *a = unsafe { load(dst.add(p + 64 * v)) };
            }
        }
        let mut pairs = srcs.chunks_exact(2);
        for pair in &mut pairs {
            for (v, a) in acc.iter_mut().enumerate() {
                // SAFETY: `p + 256 ≤ len`.
                let (x, y) =
                    unsafe { (load(pair[0].add(p + 64 * v)), load(pair[1].add(p + 64 * v))) };
                *a = xor3(*a, x, y);
            }
        }
        for &s in pairs.remainder() {
            for (v, a) in acc.iter_mut().enumerate() {
                // SAFETY: `p + 256 ≤ len`.
                *a = _mm512_xor_si512(*a, unsafe { load(s.add(p + 64 * v)) });
            }
        }
        for (v, a) in acc.into_iter().enumerate() {
            // SAFETY: `p + 256 ≤ len`.
            unsafe { store(dst.add(p + 64 * v), a) };
        }
        p += 256;
    }
    // The rest, one vector at a time; the last one masked to the bytes left.
    while p < len {
        let n = (len - p).min(64);
        // SAFETY: `p + n ≤ len`; the caller's guarantees.
        unsafe { xor_masked::<ADD>(srcs, dst, p, n) };
        p += n;
    }
}

/// One masked vector of [`xor_avx512`]: bytes `p .. p + n` (`n ≤ 64`).
///
/// # Safety
///
/// As for [`xor_avx512`], with `p + n ≤ len`.
#[inline]
#[target_feature(enable = "avx512f,avx512bw")]
unsafe fn xor_masked<const ADD: bool>(srcs: &[*const u8], dst: *mut u8, p: usize, n: usize) {
    // dst[p..p+n] = (ADD ? dst[p..p+n] : 0) ^ Σ_s s[p..p+n]
    let mask = head_mask(n);
    let mut acc = if ADD {
        // SAFETY: `mask` selects only the bytes `p .. p + n`, which the caller guarantees.
        unsafe { load_masked(dst.add(p), mask) }
    } else {
        _mm512_setzero_si512()
    };
    for &s in srcs {
        // SAFETY: as above.
        acc = _mm512_xor_si512(acc, unsafe { load_masked(s.add(p), mask) });
    }
    // SAFETY: as above.
    unsafe { store_masked(dst.add(p), mask, acc) };
}

#[cfg(test)]
mod tests {
    use super::{aligned_head, ALIGN_MIN_LEN};

    fn at(addr: usize) -> *const u8 {
        std::ptr::without_provenance(addr)
    }

    #[test]
    fn aligned_head_follows_the_weighted_majority() {
        let len = ALIGN_MIN_LEN;
        // All at 16 past a line: 48 bytes bring every buffer to the next line.
        let srcs = [at(0x1010), at(0x2010), at(0x3010)];
        assert_eq!(aligned_head(&srcs, &[at(0x4010).cast_mut()], len), 48);
        // Two sources at 0x10 against one source and the (double) destination at 0x30.
        let srcs = [at(0x1010), at(0x2010), at(0x3030)];
        assert_eq!(aligned_head(&srcs, &[at(0x4030).cast_mut()], len), 16);
        // Aligned already, or too short to bother: nothing.
        assert_eq!(
            aligned_head(&[at(0x1000)], &[at(0x2000).cast_mut()], len),
            0
        );
        assert_eq!(aligned_head(&srcs, &[at(0x4030).cast_mut()], len - 1), 0);
    }
}
