//! Safe wrappers over the erasure-code functions of ISA-L 2.31, built from source by the
//! `isal-sys` crate (feature `isal`).
//!
//! `isal-sys` generates bindings for igzip only, but the static `libisal.a` it builds and links
//! holds the whole library, so the five functions used here are declared below by hand, from
//! `include/erasure_code.h` of ISA-L 2.31. `ec_encode_data` and `ec_init_tables` dispatch at run
//! time (on this project's CPUs: the AVX-512 + GFNI kernels).
//!
//! # Safety
//!
//! This is the only module of the crate with `unsafe` code: FFI calls into ISA-L. Each call is
//! wrapped in a safe function that checks the shapes ISA-L relies on (matrix sizes, equal
//! buffer lengths, counts that fit in a C `int`) before passing pointers, so no safe caller can
//! make ISA-L read or write out of bounds.
#![allow(unsafe_code)]

use std::marker::PhantomData;
use std::os::raw::{c_int, c_uchar};

// The crate's link directive (`-l static=isal`) must reach the final link.
use isal_sys as _;

// SAFETY: these declarations match the prototypes in ISA-L 2.31 `include/erasure_code.h`:
// `void ec_init_tables(int k, int rows, unsigned char *a, unsigned char *gftbls)`,
// `void ec_encode_data(int len, int k, int rows, unsigned char *gftbls,
//                      unsigned char **data, unsigned char **coding)`,
// `void gf_gen_rs_matrix(unsigned char *a, int m, int k)`,
// `void gf_gen_cauchy1_matrix(unsigned char *a, int m, int k)`,
// `int gf_invert_matrix(unsigned char *in, unsigned char *out, const int n)`.
extern "C" {
    fn ec_init_tables(k: c_int, rows: c_int, a: *mut c_uchar, gftbls: *mut c_uchar);
    fn ec_encode_data(
        len: c_int,
        k: c_int,
        rows: c_int,
        gftbls: *mut c_uchar,
        data: *mut *mut c_uchar,
        coding: *mut *mut c_uchar,
    );
    fn gf_gen_rs_matrix(a: *mut c_uchar, m: c_int, k: c_int);
    fn gf_gen_cauchy1_matrix(a: *mut c_uchar, m: c_int, k: c_int);
    fn gf_invert_matrix(input: *mut c_uchar, output: *mut c_uchar, n: c_int) -> c_int;
    // The per-ISA forms `ec_encode_data` and `ec_init_tables` dispatch to (same prototypes;
    // global symbols of `libisal.a` 2.31, from `erasure_code/ec_highlevel_func.c` and
    // `ec_base.c`): the nibble-table kernels take `ec_init_tables_base` tables, the GFNI ones
    // `ec_init_tables_gfni` tables.
    fn ec_init_tables_base(k: c_int, rows: c_int, a: *mut c_uchar, gftbls: *mut c_uchar);
    fn ec_init_tables_gfni(k: c_int, rows: c_int, a: *mut c_uchar, gftbls: *mut c_uchar);
    fn ec_encode_data_avx2(
        len: c_int,
        k: c_int,
        rows: c_int,
        gftbls: *mut c_uchar,
        data: *mut *mut c_uchar,
        coding: *mut *mut c_uchar,
    );
    fn ec_encode_data_avx512(
        len: c_int,
        k: c_int,
        rows: c_int,
        gftbls: *mut c_uchar,
        data: *mut *mut c_uchar,
        coding: *mut *mut c_uchar,
    );
    fn ec_encode_data_avx2_gfni(
        len: c_int,
        k: c_int,
        rows: c_int,
        gftbls: *mut c_uchar,
        data: *mut *mut c_uchar,
        coding: *mut *mut c_uchar,
    );
    fn ec_encode_data_avx512_gfni(
        len: c_int,
        k: c_int,
        rows: c_int,
        gftbls: *mut c_uchar,
        data: *mut *mut c_uchar,
        coding: *mut *mut c_uchar,
    );
}

/// The instruction-set level ISA-L runs at: its run-time choice, or one forced (to compare
/// kernels of the same level on a CPU that has more).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Isa {
    /// `ec_encode_data`'s own dispatch (the best the CPU has).
    #[default]
    Native,
    /// `ec_encode_data_avx2`: nibble tables, 32-byte registers.
    Avx2,
    /// `ec_encode_data_avx512`: nibble tables, 64-byte registers.
    Avx512,
    /// `ec_encode_data_avx2_gfni`: GFNI, 32-byte registers.
    Avx2Gfni,
    /// `ec_encode_data_avx512_gfni`: GFNI, 64-byte registers.
    Avx512Gfni,
}

impl Isa {
    /// The CPU feature this level needs and the CPU lacks, if any (forcing a level the CPU
    /// cannot run would stop the process on an illegal instruction).
    pub fn missing_feature(self) -> Option<&'static str> {
        #[cfg(target_arch = "x86_64")]
        {
            use std::arch::is_x86_feature_detected as has;
            let need: &[(&str, bool)] = match self {
                Isa::Native => &[],
                Isa::Avx2 => &[("avx2", has!("avx2"))],
                Isa::Avx512 => &[
                    ("avx512f", has!("avx512f")),
                    ("avx512bw", has!("avx512bw")),
                    ("avx512vl", has!("avx512vl")),
                ],
                Isa::Avx2Gfni => &[("avx2", has!("avx2")), ("gfni", has!("gfni"))],
                Isa::Avx512Gfni => &[
                    ("avx512f", has!("avx512f")),
                    ("avx512bw", has!("avx512bw")),
                    ("avx512vl", has!("avx512vl")),
                    ("gfni", has!("gfni")),
                ],
            };
            need.iter().find(|(_, ok)| !ok).map(|(f, _)| *f)
        }
        #[cfg(not(target_arch = "x86_64"))]
        {
            (self != Isa::Native).then_some("x86_64")
        }
    }

    /// The kernel `ec_encode_data` runs at this level.
    pub fn kernel_name(self) -> &'static str {
        match self {
            Isa::Native => kernel_name(),
            Isa::Avx2 => "isal-avx2",
            Isa::Avx512 => "isal-avx512",
            Isa::Avx2Gfni => "isal-avx2-gfni",
            Isa::Avx512Gfni => "isal-avx512-gfni",
        }
    }
}

/// The largest stripe ISA-L's GF(2^8) matrices describe.
pub const MAX_CHUNKS: usize = 256;

fn check_km(k: usize, m: usize) {
    assert!(
        k >= 1 && m >= 1 && k + m <= MAX_CHUNKS,
        "isal: need k >= 1, m >= 1, k + m <= {MAX_CHUNKS}; have k={k} m={m}"
    );
}

/// `gf_gen_cauchy1_matrix`: the (k+m) × k generator, row-major, identity on top.
pub fn gen_cauchy1_matrix(k: usize, m: usize) -> Vec<u8> {
    check_km(k, m);
    let mut a = vec![0u8; (k + m) * k];
    // SAFETY: `a` holds (k+m)·k bytes, exactly what ISA-L writes for an (m'=k+m) × k matrix;
    // both counts are ≤ 256 so fit in c_int.
    unsafe { gf_gen_cauchy1_matrix(a.as_mut_ptr(), (k + m) as c_int, k as c_int) };
    a
}

/// `gf_gen_rs_matrix`: the (k+m) × k Vandermonde-style generator (not MDS for every k, m).
pub fn gen_rs_matrix(k: usize, m: usize) -> Vec<u8> {
    check_km(k, m);
    let mut a = vec![0u8; (k + m) * k];
    // SAFETY: as for `gen_cauchy1_matrix`: the buffer holds exactly (k+m)·k bytes.
    unsafe { gf_gen_rs_matrix(a.as_mut_ptr(), (k + m) as c_int, k as c_int) };
    a
}

/// `gf_invert_matrix` of an n × n row-major matrix; `None` if it is singular.
pub fn invert_matrix(a: &[u8], n: usize) -> Option<Vec<u8>> {
    assert!(
        n <= MAX_CHUNKS,
        "isal: matrix of {n} rows exceeds {MAX_CHUNKS}"
    );
    assert_eq!(
        a.len(),
        n * n,
        "isal: a {n}x{n} matrix needs {} bytes",
        n * n
    );
    // ISA-L destroys its input, so it works on a copy.
    let mut input = a.to_vec();
    let mut out = vec![0u8; n * n];
    // SAFETY: both buffers hold n·n bytes, which is what ISA-L reads and writes for size n.
    let rc = unsafe { gf_invert_matrix(input.as_mut_ptr(), out.as_mut_ptr(), n as c_int) };
    (rc == 0).then_some(out)
}

/// Prepared tables for a `rows × k` coefficient matrix (`ec_init_tables`).
#[derive(Clone)]
pub struct Tables {
    k: usize,
    rows: usize,
    /// The level the tables are prepared for and `Call::run` encodes at.
    isa: Isa,
    /// 32 bytes per coefficient, as ISA-L requires (its GFNI tables use 8 of them).
    tables: Vec<u8>,
}

impl std::fmt::Debug for Tables {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "isal::Tables({}x{})", self.rows, self.k)
    }
}

impl Tables {
    /// Prepares `coeffs` (`rows × k`, row-major).
    pub fn new(k: usize, rows: usize, coeffs: &[u8]) -> Tables {
        Tables::with_isa(k, rows, coeffs, Isa::Native)
    }

    /// Prepares `coeffs` for the kernels of `isa`. Panics if the CPU cannot run them (see
    /// [`Isa::missing_feature`]).
    pub fn with_isa(k: usize, rows: usize, coeffs: &[u8], isa: Isa) -> Tables {
        if let Some(f) = isa.missing_feature() {
            panic!("isal: {isa:?} kernels need {f}, which this CPU lacks");
        }
        let mut t = Tables {
            k,
            rows,
            isa,
            tables: Vec::new(),
        };
        t.reinit(k, rows, coeffs);
        t
    }

    /// Prepares new coefficients into the same allocation (the per-call work of a decode
    /// whose matrix is not cached).
    pub fn reinit(&mut self, k: usize, rows: usize, coeffs: &[u8]) {
        assert!(
            (1..=MAX_CHUNKS).contains(&k) && (1..=MAX_CHUNKS).contains(&rows),
            "isal: need 1..={MAX_CHUNKS} inputs and outputs; have {k} and {rows}"
        );
        assert_eq!(
            coeffs.len(),
            k * rows,
            "isal: {rows}x{k} coefficients expected"
        );
        self.k = k;
        self.rows = rows;
        self.tables.resize(32 * k * rows, 0);
        // ISA-L takes a mutable pointer but only reads the coefficients; pass a copy anyway.
        let mut a = coeffs.to_vec();
        let init = match self.isa {
            Isa::Native => ec_init_tables,
            Isa::Avx2 | Isa::Avx512 => ec_init_tables_base,
            Isa::Avx2Gfni | Isa::Avx512Gfni => ec_init_tables_gfni,
        };
        // SAFETY: `a` holds rows·k coefficients and `tables` 32·k·rows bytes, the sizes
        // ISA-L documents for these arguments (the GFNI form writes 8 bytes per coefficient).
        unsafe {
            init(
                k as c_int,
                rows as c_int,
                a.as_mut_ptr(),
                self.tables.as_mut_ptr(),
            )
        };
    }

    pub fn k(&self) -> usize {
        self.k
    }

    pub fn rows(&self) -> usize {
        self.rows
    }

    /// `outputs = matrix · inputs` with `ec_encode_data`.
    pub fn encode(&self, inputs: &[&[u8]], outputs: &mut [&mut [u8]]) {
        Call::new(inputs, outputs.iter_mut().map(|o| &mut **o).collect()).run(self);
    }
}

/// The buffers of one `ec_encode_data` call, with the pointer arrays ISA-L takes built once so
/// that a benchmark loop repeats only the ISA-L call. Holds the borrows of its buffers for its
/// whole life; the tables are passed to each run, so a caller may prepare new ones between
/// runs (a decode whose matrix is not cached).
pub struct Call<'a> {
    len: usize,
    inputs: Vec<*mut c_uchar>,
    outputs: Vec<*mut c_uchar>,
    _borrows: PhantomData<(&'a [u8], &'a mut [u8])>,
}

impl std::fmt::Debug for Call<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "isal::Call({} inputs, {} outputs, {} bytes)",
            self.inputs.len(),
            self.outputs.len(),
            self.len
        )
    }
}

// SAFETY: a `Call` is a set of borrows (`&'a [u8]` inputs, `&'a mut [u8]` outputs) stored as
// raw pointers; those borrow types are `Send`, and the run that uses them takes `&mut self`,
// so moving a `Call` to another thread is as sound as moving the borrows.
unsafe impl Send for Call<'_> {}

impl<'a> Call<'a> {
    /// Checks that all buffers have one length that fits a C `int`, and at most
    /// [`MAX_CHUNKS`] of each.
    pub fn new(inputs: &[&'a [u8]], outputs: Vec<&'a mut [u8]>) -> Call<'a> {
        let len = inputs.first().map_or(0, |i| i.len());
        assert!(
            inputs.iter().all(|i| i.len() == len) && outputs.iter().all(|o| o.len() == len),
            "isal: buffers of unequal length"
        );
        assert!(
            inputs.len() <= MAX_CHUNKS && outputs.len() <= MAX_CHUNKS,
            "isal: more than {MAX_CHUNKS} inputs or outputs"
        );
        assert!(
            len <= c_int::MAX as usize,
            "isal: {len} bytes exceed a C int"
        );
        Call {
            len,
            // ISA-L's prototype takes `unsigned char **` for the sources but never writes
            // through them.
            inputs: inputs.iter().map(|i| i.as_ptr().cast_mut()).collect(),
            outputs: outputs.into_iter().map(|o| o.as_mut_ptr()).collect(),
            _borrows: PhantomData,
        }
    }

    /// Runs `ec_encode_data` with `tables`. Panics if the tables are not for as many inputs
    /// and outputs as this call has.
    pub fn run(&mut self, tables: &Tables) {
        assert_eq!(self.inputs.len(), tables.k, "isal: inputs ≠ matrix columns");
        assert_eq!(
            self.outputs.len(),
            tables.rows,
            "isal: outputs ≠ matrix rows"
        );
        if self.len == 0 {
            return;
        }
        // The encode function of the level the tables were prepared for.
        let encode = match tables.isa {
            Isa::Native => ec_encode_data,
            Isa::Avx2 => ec_encode_data_avx2,
            Isa::Avx512 => ec_encode_data_avx512,
            Isa::Avx2Gfni => ec_encode_data_avx2_gfni,
            Isa::Avx512Gfni => ec_encode_data_avx512_gfni,
        };
        // SAFETY: there are `tables.k` input and `tables.rows` output pointers (checked
        // above), each to `len` bytes borrowed for 'a (outputs exclusively, and `&mut self`
        // keeps two runs from overlapping); `tables` holds 32·k·rows bytes prepared by
        // `ec_init_tables` for that shape, in the form `encode` reads (base tables for the
        // nibble kernels, GFNI tables for the GFNI ones), and `Tables::with_isa` checked that
        // the CPU runs `encode`. ISA-L reads the inputs and the tables and writes `len` bytes
        // to each output.
        unsafe {
            encode(
                self.len as c_int,
                tables.k as c_int,
                tables.rows as c_int,
                tables.tables.as_ptr().cast_mut(),
                self.inputs.as_mut_ptr(),
                self.outputs.as_mut_ptr(),
            )
        };
    }
}

/// The kernel ISA-L dispatches `ec_encode_data` to on this CPU (same CPUID tests as its
/// `ec_multibinary.asm`, reduced to the cases that matter here).
pub fn kernel_name() -> &'static str {
    #[cfg(target_arch = "x86_64")]
    {
        let avx512 = std::arch::is_x86_feature_detected!("avx512f")
            && std::arch::is_x86_feature_detected!("avx512bw")
            && std::arch::is_x86_feature_detected!("avx512vl");
        let gfni = std::arch::is_x86_feature_detected!("gfni");
        if avx512 && gfni {
            return "isal-avx512-gfni";
        }
        if std::arch::is_x86_feature_detected!("avx2") && gfni {
            return "isal-avx2-gfni";
        }
        if avx512 {
            return "isal-avx512";
        }
        if std::arch::is_x86_feature_detected!("avx2") {
            return "isal-avx2";
        }
    }
    "isal-base"
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cauchy_matrix_has_identity_on_top_and_inverse_rows() {
        let a = gen_cauchy1_matrix(4, 3);
        for i in 0..4 {
            for j in 0..4 {
                assert_eq!(a[i * 4 + j], u8::from(i == j));
            }
        }
        for i in 4..7 {
            for j in 0..4 {
                assert_eq!(a[i * 4 + j], gf::field::inv((i ^ j) as u8));
            }
        }
    }

    #[test]
    fn invert_matrix_detects_singular_and_inverts() {
        assert_eq!(invert_matrix(&[1, 1, 1, 1], 2), None);
        let a = [2, 3, 1, 7];
        let inv = invert_matrix(&a, 2).unwrap();
        for i in 0..2 {
            for j in 0..2 {
                let mut s = 0;
                for t in 0..2 {
                    s ^= gf::field::mul(a[i * 2 + t], inv[t * 2 + j]);
                }
                assert_eq!(s, u8::from(i == j));
            }
        }
    }

    #[test]
    fn encode_odd_length_matches_scalar_at_every_isa() {
        let (k, m) = (5, 3);
        let g = gen_cauchy1_matrix(k, m);
        let data: Vec<Vec<u8>> = (0..k)
            .map(|j| (0..131).map(|b| (j * 37 + b * 11 + 3) as u8).collect())
            .collect();
        let isas = [
            Isa::Native,
            Isa::Avx2,
            Isa::Avx512,
            Isa::Avx2Gfni,
            Isa::Avx512Gfni,
        ];
        for isa in isas.into_iter().filter(|i| i.missing_feature().is_none()) {
            let t = Tables::with_isa(k, m, &g[k * k..], isa);
            let mut par = vec![vec![0u8; 131]; m];
            let ins: Vec<&[u8]> = data.iter().map(|d| &d[..]).collect();
            let mut outs: Vec<&mut [u8]> = par.iter_mut().map(|p| &mut p[..]).collect();
            t.encode(&ins, &mut outs);
            for (r, p) in par.iter().enumerate() {
                for (b, &byte) in p.iter().enumerate() {
                    let want =
                        (0..k).fold(0, |s, j| s ^ gf::field::mul(g[(k + r) * k + j], data[j][b]));
                    assert_eq!(byte, want, "{isa:?} row {r} byte {b}");
                }
            }
        }
    }
}
