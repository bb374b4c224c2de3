//! x86_64 SIMD kernels and the driver that splits a matrix into register-sized blocks.
//!
//! Each implementation is a zero-sized token ([`avx2::Avx2`], [`avx512::Avx512`],
//! [`gfni::Gfni512`], [`gfni::Gfni256`]) made only by a `new()` that checks the CPU, so holding
//! one proves its instructions can run. The tokens implement [`Simd`]: a `dot` over one block
//! of at most `MAX_BLOCK` outputs and at most [`TILE`] inputs, and an `xor` of several inputs
//! into one output. The driver here, shared by all of them, does the rest:
//!
//! - outputs are grouped into blocks of nearly equal size, each computed in one pass over the
//!   inputs with its accumulators in registers (10 outputs on a 8-output kernel: 5 + 5);
//! - inputs are taken [`TILE`] at a time (one pass for any k ≤ 32; beyond, later tiles
//!   accumulate into the outputs);
//! - an input whose coefficients in a block are all 0 is skipped;
//! - rows of only 0s and 1s ("XOR rows", such as an LRC's local parities) cost a product
//!   where a product is one instruction (GFNI), so they stay ordinary rows there. On the
//!   nibble-table kernels, where a product costs four, up to [`MAX_XOR_ROWS`] of them ride
//!   along in a block of other rows: the input loaded for the products is XORed into them
//!   (one instruction), so an LRC encode is one pass over the data. XOR rows that find no
//!   block (a matrix of only 0s and 1s, or more of them than the blocks take) are plain XOR
//!   passes;
//! - buffers shorter than one vector go through small stack buffers on the 256-bit kernels (the
//!   512-bit ones use masked loads and stores).
//!
//! How a matrix is split and its coefficients laid out for a kernel (a [`Blocking`]) is
//! worked out on the kernel's first use of the matrix and kept in it, so a call only gathers
//! input pointers onto the stack: nothing on the hot path allocates or builds tables.

pub(crate) mod avx2;
pub(crate) mod avx512;
pub(crate) mod gfni;

use std::ops::Range;
use std::sync::OnceLock;

use super::Imp;
use crate::Matrix;

/// Inputs per call of a kernel's `dot` (and the size of the stack buffers of pointers).
pub(crate) const TILE: usize = 32;
/// The largest `MAX_BLOCK` of any kernel.
pub(crate) const MAX_BLOCK: usize = 8;
/// The most XOR rows a block carries.
pub(crate) const MAX_XOR_ROWS: usize = 2;
/// Outputs of at least this many bytes are written around the caches, with non-temporal
/// stores, by the kernels that measured faster so (when they set their outputs rather than add
/// to them, and the outputs are aligned for it): outputs that large would only evict the
/// inputs, and a normal store first reads the line it writes, a third of the memory traffic
/// of an encode out of cache.
pub(crate) const STREAM_MIN_BYTES: usize = 1 << 20;
/// How far ahead of the current step (bytes) the kernels prefetch each source into L1. Their
/// loop over the sources reads every source through the same load instructions, so the
/// CPU's per-instruction stride prefetcher cannot follow the sources (a loop unrolled over
/// the sources, as generated kernels are, has one load instruction per source, each with a
/// constant stride). Measured on an Intel Xeon (AVX-512 + GFNI), chunks of 128 KiB from L2,
/// one thread: AVX2 5–30% faster with it, at no cost from L1 (4 KiB).
pub(crate) const PREFETCH_AHEAD: usize = 1024;

/// Regions shorter than this are not prefetched by the GFNI kernels: their loops have the
/// fewest instructions per byte, so the prefetches cost them most, and such regions (a few
/// chunks of at most 16 KiB) are in L1 already when a call is repeated (measured there: 4 KiB
/// decode1 6–16% slower with prefetches on GFNI-512, 5–10% on GFNI-256).
pub(crate) const PREFETCH_MIN_LEN: usize = 16 << 10;

/// Prefetches the line `PREFETCH_AHEAD` bytes past `s + p` into L1. A prefetch never faults,
/// so the address may lie past the end of the buffer (it is computed with wrapping
/// arithmetic, never dereferenced).
#[inline(always)]
pub(crate) fn prefetch(s: *const u8, p: usize) {
    // SAFETY: `prefetcht0` only hints the cache: it reads nothing into the program and cannot
    // fault; SSE, which it needs, is part of x86_64.
    unsafe {
        std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(
            s.wrapping_add(p + PREFETCH_AHEAD).cast(),
        )
    }
}

/// Prefetches the line `PREFETCH_AHEAD` bytes ahead of `s + p` in the direction of the walk:
/// past it, or before it if `back` (see [`walk_back`]). Never faults, as [`prefetch`].
#[inline(always)]
pub(crate) fn prefetch_dir(s: *const u8, p: usize, back: bool) {
    let at = if back {
        s.wrapping_add(p).wrapping_sub(PREFETCH_AHEAD)
    } else {
        s.wrapping_add(p + PREFETCH_AHEAD)
    };
    // SAFETY: as in `prefetch`: a hint, which cannot fault.
    unsafe { std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(at.cast()) }
}

/// How far (bytes, in the direction of the walk) a load may run ahead of a store still in
/// the CPU's store buffer and be mistaken for depending on it (see [`walk_back`]).
const ALIAS_WINDOW: usize = 2048;

/// Whether a kernel pass should walk its region from the end to the start rather than from
/// the start to the end, to keep its loads clear of "4K aliasing".
///
/// A load whose address has the same low 12 bits as an earlier store still in the store
/// buffer (to another address) waits as if it depended on it. A pass stores the outputs at
/// offset p and goes on to load the inputs at p + step, p + 2·step, … (and the outputs too
/// when it adds to them); if an output lies a little after an input modulo 4096 (δ = (dst −
/// src) mod 4096 small and positive), those loads have the low bits of the stores just made,
/// at every step of the pass. That is where `malloc` puts buffers allocated one after another
/// from its heap (back to back, 16 bytes of header between them: δ = 16, 32, … for later
/// buffers), and where the benchmark's 64-byte-aligned heap chunks lie (64–128 bytes apart
/// modulo 4096): on a shared Intel Xeon (AVX-512 + GFNI), `inec bench codec --quick` RS(10,4)
/// 128 KiB encode with GFNI-256 ran 1.10× faster with this choice than walking forwards
/// (medians of three runs). Walking backwards, the loads run ahead to lower
/// addresses, which alias only outputs a little *before* an input (δ near 4096).
///
/// So each (input, output) pair costs `ALIAS_WINDOW − d` in the direction in which the
/// output lies d < `ALIAS_WINDOW` bytes ahead of the input modulo 4096, the nearest costing
/// most; the pass walks backwards if that costs less in total. Buffers at the same address
/// modulo 4096 (δ = 0: page-aligned, or Go's 128 KiB buffers) cost nothing either way and
/// walk forwards.
#[inline]
pub(crate) fn walk_back(add: bool, srcs: &[*const u8], dsts: &[*mut u8]) -> bool {
    const MOD: usize = 4096;
    let cost = |d: usize| ALIAS_WINDOW.saturating_sub(d);
    let (mut fwd, mut back) = (0, 0);
    let mut pair = |s: usize, d: usize| {
        let delta = d.wrapping_sub(s) % MOD;
        if delta != 0 {
            fwd += cost(delta);
            back += cost(MOD - delta);
        }
    };
    for &d in dsts {
        for &s in srcs {
            pair(s as usize, d as usize);
        }
        if add {
            for &o in dsts {
                pair(o as usize, d as usize);
            }
        }
    }
    back < fwd
}

/// Bytes of the stack buffers for short regions; the `VECTOR_BYTES` of every kernel that
/// needs them.
const SHORT_BYTES: usize = 32;

/// A SIMD implementation of the block kernels.
pub(crate) trait Simd: Copy {
    /// Bytes per register.
    const VECTOR_BYTES: usize;
    /// The most outputs one `dot` pass holds in registers (≤ [`MAX_BLOCK`]), XOR rows
    /// included.
    const MAX_BLOCK: usize;
    /// Whether blocks carry XOR rows (rows of 0s and 1s) beside their product rows; if not,
    /// such rows are product rows, except in a matrix of only 0s and 1s.
    const XOR_ROWS_IN_BLOCKS: bool;
    /// Whether `dot` and `xor` accept regions shorter than `VECTOR_BYTES`.
    const ANY_LENGTH: bool;

    /// What a block kernel needs of one coefficient: its bit matrix or its nibble tables.
    type Coef: Copy + Send + Sync + 'static;

    /// The prepared form of coefficient (`row`, `col`) of `m`.
    fn coef(m: &Matrix, row: usize, col: usize) -> Self::Coef;

    /// The prepared form of the constant `c`.
    fn coef_of(c: u8) -> Self::Coef;

    /// This implementation's cached blocking in a matrix.
    fn blocking(blockings: &Blockings) -> &OnceLock<Blocking<Self::Coef>>;

    /// For a block of `B = dsts.len() - X` product rows followed by `X = xdsts` XOR rows,
    /// with `dsts` holding the product rows first: for each product row `i`,
    /// `dsts[i] (^)= Σ_j coef[j·B + i] · srcs[j]`, and for each XOR row `x`,
    /// `dsts[B + x] (^)= Σ_{j : bit x of xmask[j]} srcs[j]`, over `len` bytes; `=` or `^=` as
    /// `add` says.
    ///
    /// # Safety
    ///
    /// `1 ≤ B`, `B + X ≤ MAX_BLOCK`, `X ≤ MAX_XOR_ROWS` and `X = 0` unless
    /// `XOR_ROWS_IN_BLOCKS`; `coef.len() == srcs.len() * B`, `xmask.len() == srcs.len()`;
    /// every `srcs[j]` is valid for reading and every `dsts[i]` for reading and writing `len`
    /// bytes; the destinations overlap neither each other nor any source; if `!ANY_LENGTH`,
    /// `len ≥ VECTOR_BYTES`.
    #[allow(clippy::too_many_arguments)]
    unsafe fn dot(
        self,
        add: bool,
        coef: &[Self::Coef],
        xmask: &[u8],
        srcs: &[*const u8],
        dsts: &[*mut u8],
        xdsts: usize,
        len: usize,
    );

    /// `dst (^)= Σ_j srcs[j]` over `len` bytes; `=` or `^=` as `add` says.
    ///
    /// # Safety
    ///
    /// Every source is valid for reading and `dst` for reading and writing `len` bytes; `dst`
    /// overlaps no source; if `!ANY_LENGTH`, `len ≥ VECTOR_BYTES`.
    unsafe fn xor(self, add: bool, srcs: &[*const u8], dst: *mut u8, len: usize);
}

/// How one implementation computes one matrix (its blocking): worked out on first use and
/// kept in the matrix, so that a call does no more than gather input pointers.
#[derive(Clone, Debug)]
pub(crate) struct Blocking<C> {
    /// Output rows of 0s and 1s computed as XOR passes: the row, and its columns holding 1
    /// (a range of `cols`).
    xor_rows: Vec<(usize, Range<usize>)>,
    /// Blocks of other rows, each computed in passes over tiles of at most [`TILE`] inputs.
    blocks: Vec<Block>,
    /// Column indices used by `xor_rows` and by the tiles.
    cols: Vec<usize>,
    /// Per entry of `cols` used by a tile: bit `x` set if the column feeds the block's XOR
    /// row `x`.
    xmask: Vec<u8>,
    /// Prepared coefficients of the tiles: for tile columns `j` of a block of `b` product
    /// rows, `coef[start + j·b + i]` is the coefficient of row `rows[i]`.
    coef: Vec<C>,
}

#[derive(Clone, Debug)]
struct Block {
    /// The product rows, then the XOR rows.
    rows: [usize; MAX_BLOCK],
    /// Product rows.
    len: usize,
    /// XOR rows (after the product rows in `rows`).
    xlen: usize,
    /// Per tile: its columns (a range of `Blocking::cols`) and the start of its coefficients.
    tiles: Vec<(Range<usize>, usize)>,
}

impl<C: Copy> Blocking<C> {
    fn new<K: Simd<Coef = C>>(m: &Matrix) -> Blocking<C> {
        let mut blocking = Blocking {
            xor_rows: Vec::new(),
            blocks: Vec::new(),
            cols: Vec::new(),
            xmask: Vec::new(),
            coef: Vec::new(),
        };
        let is_01 = |r: usize| m.row(r).iter().all(|&c| c <= 1);
        let all_01 = m.coeffs().iter().all(|&c| c <= 1);
        let (mut general, mut xors) = (Vec::new(), Vec::new());
        for r in 0..m.rows() {
            if (K::XOR_ROWS_IN_BLOCKS || all_01) && is_01(r) {
                xors.push(r);
            } else {
                general.push(r);
            }
        }
        // Blocks of nearly equal size: ⌈g / blocks⌉ or ⌊g / blocks⌋ product rows each; then
        // each block takes XOR rows while it has room.
        let blocks = general.len().div_ceil(K::MAX_BLOCK);
        let mut rest = &general[..];
        let mut xrest = &xors[..];
        for b in 0..blocks {
            let size = general.len() / blocks + usize::from(b < general.len() % blocks);
            let (rows, tail) = rest.split_at(size);
            rest = tail;
            let room = if K::XOR_ROWS_IN_BLOCKS {
                (K::MAX_BLOCK - size).min(MAX_XOR_ROWS)
            } else {
                0
            };
            let (xrows, xtail) = xrest.split_at(room.min(xrest.len()));
            xrest = xtail;
            let mut block = Block {
                rows: [0; MAX_BLOCK],
                len: size,
                xlen: xrows.len(),
                tiles: Vec::new(),
            };
            block.rows[..size].copy_from_slice(rows);
            block.rows[size..size + xrows.len()].copy_from_slice(xrows);
            // Columns whose coefficients in the block are all 0 are left out.
            let live: Vec<usize> = (0..m.cols())
                .filter(|&c| rows.iter().chain(xrows).any(|&r| m.get(r, c) != 0))
                .collect();
            for tile in live.chunks(TILE) {
                let (start, coef_start) = (blocking.cols.len(), blocking.coef.len());
                blocking.cols.extend_from_slice(tile);
                for &c in tile {
                    blocking.coef.extend(rows.iter().map(|&r| K::coef(m, r, c)));
                    let mut bits = 0u8;
                    for (x, &r) in xrows.iter().enumerate() {
                        if m.get(r, c) == 1 {
                            bits |= 1 << x;
                        }
                    }
                    blocking.xmask.push(bits);
                }
                block.tiles.push((start..blocking.cols.len(), coef_start));
            }
            blocking.blocks.push(block);
        }
        // XOR rows no block took: XOR passes.
        for &r in xrest {
            let start = blocking.cols.len();
            blocking
                .cols
                .extend((0..m.cols()).filter(|&c| m.get(r, c) == 1));
            blocking.xmask.resize(blocking.cols.len(), 0);
            blocking.xor_rows.push((r, start..blocking.cols.len()));
        }
        blocking
    }
}

/// The blockings of every x86_64 implementation for one matrix, each made on first use.
#[derive(Clone, Debug, Default)]
pub(crate) struct Blockings {
    avx2: OnceLock<Blocking<avx2::Tables>>,
    avx512: OnceLock<Blocking<[u8; 32]>>,
    gfni512: OnceLock<Blocking<u64>>,
    gfni256: OnceLock<Blocking<u64>>,
}

/// One checked x86_64 implementation.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Token {
    Avx2(avx2::Avx2),
    Avx512(avx512::Avx512),
    Gfni512(gfni::Gfni512),
    Gfni256(gfni::Gfni256),
}

impl Token {
    /// The token of a SIMD implementation (`None` for the reference). The CPU check is
    /// repeated here (it is a cached load): a `Kernel` holding `imp` was only made after the
    /// same check, so the panic is unreachable, and no path can run an instruction the CPU
    /// lacks.
    pub(crate) fn for_imp(imp: Imp) -> Option<Token> {
        let token = match imp {
            Imp::Reference => return None,
            Imp::Avx2 => avx2::Avx2::new().map(Token::Avx2),
            Imp::Avx512 => avx512::Avx512::new().map(Token::Avx512),
            Imp::Gfni512 => gfni::Gfni512::new().map(Token::Gfni512),
            Imp::Gfni256 => gfni::Gfni256::new().map(Token::Gfni256),
        };
        match token {
            Some(t) => Some(t),
            None => panic!("kernel {} was chosen on a CPU that lacks it", imp.name()),
        }
    }

    pub(crate) fn xor(self, src: &[u8], dst: &mut [u8]) {
        match self {
            Token::Avx2(t) => xor(t, src, dst),
            Token::Avx512(t) => xor(t, src, dst),
            Token::Gfni512(t) => xor(t, src, dst),
            Token::Gfni256(t) => xor(t, src, dst),
        }
    }

    pub(crate) fn mul(self, c: u8, src: &[u8], dst: &mut [u8], add: bool) {
        match self {
            Token::Avx2(t) => mul(t, c, src, dst, add),
            Token::Avx512(t) => mul(t, c, src, dst, add),
            Token::Gfni512(t) => mul(t, c, src, dst, add),
            Token::Gfni256(t) => mul(t, c, src, dst, add),
        }
    }

    pub(crate) fn dot_prod(
        self,
        m: &Matrix,
        inputs: &[&[u8]],
        outputs: &mut [&mut [u8]],
        add: bool,
    ) {
        match self {
            Token::Avx2(t) => dot_prod(t, m, inputs, outputs, add),
            Token::Avx512(t) => dot_prod(t, m, inputs, outputs, add),
            Token::Gfni512(t) => dot_prod(t, m, inputs, outputs, add),
            Token::Gfni256(t) => dot_prod(t, m, inputs, outputs, add),
        }
    }
}

/// `dst ^= src`.
fn xor<K: Simd>(k: K, src: &[u8], dst: &mut [u8]) {
    assert_eq!(src.len(), dst.len(), "xor: lengths differ");
    if dst.is_empty() {
        return;
    }
    // SAFETY: one source of `dst.len()` readable bytes; `dst` is a distinct `&mut` of that
    // length, so it overlaps no source.
    unsafe { run_xor(k, true, &[src.as_ptr()], dst.as_mut_ptr(), dst.len()) }
}

/// `dst (^)= c · src`.
fn mul<K: Simd>(k: K, c: u8, src: &[u8], dst: &mut [u8], add: bool) {
    assert_eq!(src.len(), dst.len(), "mul: lengths differ");
    if dst.is_empty() {
        return;
    }
    let coef = K::coef_of(c);
    // SAFETY: one block of one output and one input, both `dst.len()` bytes and distinct (`&`
    // and `&mut`).
    unsafe {
        run_dot(
            k,
            add,
            &[coef],
            &[0],
            &[src.as_ptr()],
            &[dst.as_mut_ptr()],
            0,
            dst.len(),
        )
    }
}

/// `outputs (^)= m · inputs`.
fn dot_prod<K: Simd>(k: K, m: &Matrix, inputs: &[&[u8]], outputs: &mut [&mut [u8]], add: bool) {
    assert_eq!(m.rows(), outputs.len(), "dot_prod: matrix rows ≠ outputs");
    assert_eq!(m.cols(), inputs.len(), "dot_prod: matrix columns ≠ inputs");
    let Some(len) = outputs.first().map(|o| o.len()) else {
        return;
    };
    // The kernels read and write `len` bytes through every pointer: these checks are what
    // makes that sound.
    assert!(
        inputs.iter().all(|i| i.len() == len) && outputs.iter().all(|o| o.len() == len),
        "dot_prod: buffers of unequal length"
    );
    if len == 0 {
        return;
    }
    let blocking = K::blocking(m.blockings().x86()).get_or_init(|| Blocking::new::<K>(m));
    let mut srcs = [std::ptr::null(); TILE];

    for (r, cols) in &blocking.xor_rows {
        let dst = outputs[*r].as_mut_ptr();
        let mut written = false;
        for tile in blocking.cols[cols.clone()].chunks(TILE) {
            for (s, &c) in srcs.iter_mut().zip(tile) {
                *s = inputs[c].as_ptr();
            }
            // SAFETY: every input and output has `len` bytes (checked above); `dst` comes from
            // a `&mut` output, distinct from the `&` inputs.
            unsafe { run_xor(k, add || written, &srcs[..tile.len()], dst, len) };
            written = true;
        }
        if !written && !add {
            outputs[*r].fill(0);
        }
    }

    for block in &blocking.blocks {
        let rows = &block.rows[..block.len + block.xlen];
        let mut dsts = [std::ptr::null_mut(); MAX_BLOCK];
        for (d, &r) in dsts.iter_mut().zip(rows) {
            *d = outputs[r].as_mut_ptr();
        }
        let mut written = false;
        for (cols, coef_start) in &block.tiles {
            let tile = &blocking.cols[cols.clone()];
            for (s, &c) in srcs.iter_mut().zip(tile) {
                *s = inputs[c].as_ptr();
            }
            let coef = &blocking.coef[*coef_start..*coef_start + tile.len() * block.len];
            // SAFETY: every input and output has `len` bytes (checked above); the
            // destinations are distinct rows of `outputs` (`&mut`, so distinct from each other
            // and from the `&` inputs); the blocking made `1 ≤ block.len`,
            // `rows.len() ≤ K::MAX_BLOCK`, `block.xlen ≤ MAX_XOR_ROWS` (0 unless the kernel
            // takes XOR rows), `coef.len() = tile.len() · block.len` and one mask per column.
            unsafe {
                run_dot(
                    k,
                    add || written,
                    coef,
                    &blocking.xmask[cols.clone()],
                    &srcs[..tile.len()],
                    &dsts[..rows.len()],
                    block.xlen,
                    len,
                )
            };
            written = true;
        }
        if !written && !add {
            for &r in rows {
                outputs[r].fill(0);
            }
        }
    }
}

/// `K::dot`, through stack buffers when the region is shorter than the kernel accepts.
///
/// # Safety
///
/// As for [`Simd::dot`], without the length requirement.
#[allow(clippy::too_many_arguments)]
unsafe fn run_dot<K: Simd>(
    k: K,
    add: bool,
    coef: &[K::Coef],
    xmask: &[u8],
    srcs: &[*const u8],
    dsts: &[*mut u8],
    xdsts: usize,
    len: usize,
) {
    if K::ANY_LENGTH || len >= K::VECTOR_BYTES {
        // SAFETY: the caller's guarantees, and the length is acceptable.
        return unsafe { k.dot(add, coef, xmask, srcs, dsts, xdsts, len) };
    }
    assert!(K::VECTOR_BYTES <= SHORT_BYTES && dsts.len() <= MAX_BLOCK && srcs.len() <= TILE);
    let mut src_buf = [[0u8; SHORT_BYTES]; TILE];
    let mut dst_buf = [[0u8; SHORT_BYTES]; MAX_BLOCK];
    let mut src_ptrs = [std::ptr::null(); TILE];
    let mut dst_ptrs = [std::ptr::null_mut(); MAX_BLOCK];
    for ((buf, ptr), &src) in src_buf.iter_mut().zip(&mut src_ptrs).zip(srcs) {
        // SAFETY: the caller guarantees `len` readable bytes at `src`; `len < SHORT_BYTES`.
        buf[..len].copy_from_slice(unsafe { std::slice::from_raw_parts(src, len) });
        *ptr = buf.as_ptr();
    }
    for ((buf, ptr), &dst) in dst_buf.iter_mut().zip(&mut dst_ptrs).zip(dsts) {
        // SAFETY: the caller guarantees `len` readable bytes at `dst`; `len < SHORT_BYTES`.
        buf[..len].copy_from_slice(unsafe { std::slice::from_raw_parts(dst, len) });
        *ptr = buf.as_mut_ptr();
    }
    let (srcs_short, dsts_short) = (&src_ptrs[..srcs.len()], &dst_ptrs[..dsts.len()]);
    // SAFETY: the stack buffers hold `SHORT_BYTES ≥ VECTOR_BYTES` bytes each and are distinct;
    // block and tile sizes and coefficients are the caller's.
    unsafe { k.dot(add, coef, xmask, srcs_short, dsts_short, xdsts, SHORT_BYTES) };
    for (buf, &dst) in dst_buf.iter().zip(dsts) {
        // SAFETY: the caller guarantees `len` writable bytes at `dst`, overlapping no buffer.
        unsafe { std::ptr::copy_nonoverlapping(buf.as_ptr(), dst, len) };
    }
}

/// `K::xor`, through stack buffers when the region is shorter than the kernel accepts.
///
/// # Safety
///
/// As for [`Simd::xor`], without the length requirement.
unsafe fn run_xor<K: Simd>(k: K, add: bool, srcs: &[*const u8], dst: *mut u8, len: usize) {
    if K::ANY_LENGTH || len >= K::VECTOR_BYTES {
        // SAFETY: the caller's guarantees, and the length is acceptable.
        return unsafe { k.xor(add, srcs, dst, len) };
    }
    assert!(K::VECTOR_BYTES <= SHORT_BYTES && srcs.len() <= TILE);
    let mut src_buf = [[0u8; SHORT_BYTES]; TILE];
    let mut src_ptrs = [std::ptr::null(); TILE];
    for ((buf, ptr), &src) in src_buf.iter_mut().zip(&mut src_ptrs).zip(srcs) {
        // SAFETY: the caller guarantees `len` readable bytes at `src`; `len < SHORT_BYTES`.
        buf[..len].copy_from_slice(unsafe { std::slice::from_raw_parts(src, len) });
        *ptr = buf.as_ptr();
    }
    let mut dst_buf = [0u8; SHORT_BYTES];
    // SAFETY: the caller guarantees `len` readable bytes at `dst`; `len < SHORT_BYTES`.
    dst_buf[..len].copy_from_slice(unsafe { std::slice::from_raw_parts(dst, len) });
    // SAFETY: stack buffers of `SHORT_BYTES ≥ VECTOR_BYTES` bytes, all distinct.
    unsafe {
        k.xor(
            add,
            &src_ptrs[..srcs.len()],
            dst_buf.as_mut_ptr(),
            SHORT_BYTES,
        )
    };
    // SAFETY: the caller guarantees `len` writable bytes at `dst`, overlapping no buffer.
    unsafe { std::ptr::copy_nonoverlapping(dst_buf.as_ptr(), dst, len) };
}

/// Calls `$f::<B, X, ADD>($args)` (or `$f::<B, X, V, ADD>`, V vectors per step) for the
/// runtime block shape `($b, $x)` and flag `$add`, among the listed shapes; or, in the second
/// form, `$f::<B, ADD>($args)` for a block of `$b` outputs.
macro_rules! dispatch_block {
    ($f:ident, $b:expr, $x:expr, $add:expr, $args:tt, [$(($n:literal, $nx:literal $(, $v:literal)?))*]) => {
        match ($b, $x, $add) {
            $(
                ($n, $nx, false) => $f::<$n, $nx, $($v,)? false> $args,
                ($n, $nx, true) => $f::<$n, $nx, $($v,)? true> $args,
            )*
            (b, x, _) => unreachable!("block of {b} product and {x} XOR rows"),
        }
    };
    // Kernels without XOR rows: `$f::<B, ADD>`.
    ($f:ident, $b:expr, $add:expr, $args:tt, [$($n:literal)*]) => {
        match ($b, $add) {
            $(
                ($n, false) => $f::<$n, false> $args,
                ($n, true) => $f::<$n, true> $args,
            )*
            (b, _) => unreachable!("block of {b} outputs"),
        }
    };
}
pub(crate) use dispatch_block;

/// `0x00` in the first 32 bytes, `0xFF` in the last 32: loading 32 bytes at offset `r` gives
/// a mask of the last `r` bytes of a vector.
pub(crate) static TAIL_MASK: [u8; 64] = {
    let mut t = [0u8; 64];
    let mut i = 32;
    while i < 64 {
        t[i] = 0xFF;
        i += 1;
    }
    t
};
