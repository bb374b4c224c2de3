//! GF(2^8) arithmetic and region kernels for erasure coding.
//!
//! The field is GF(2^8) with polynomial 0x11D and generator 2, as in ISA-L and
//! klauspost/reedsolomon. [`field`] holds scalar arithmetic; [`Kernel`] runs the region
//! operations (`mul`, `mul_add`, `xor`, and the multi-input, multi-output `dot_prod` that
//! encode and decode are made of) with the fastest implementation the CPU supports, chosen
//! once at run time and forcible for tests and benchmarks.
//!
//! ```
//! use gf::Matrix;
//! let kernel = gf::kernel();
//! // Two outputs over three inputs: out0 = d0 + 2·d1 + 3·d2, out1 = d0 + d1 + d2.
//! let m = Matrix::new(2, 3, &[1, 2, 3, 1, 1, 1]);
//! let d = [vec![1u8; 100], vec![2u8; 100], vec![3u8; 100]];
//! let (mut o0, mut o1) = (vec![0u8; 100], vec![0u8; 100]);
//! kernel.dot_prod(&m, &[&d[0], &d[1], &d[2]], &mut [&mut o0, &mut o1]);
//! assert_eq!(o1[0], 1 ^ 2 ^ 3);
//! assert_eq!(o0[7], 1 ^ gf::field::mul(2, 2) ^ gf::field::mul(3, 3));
//! ```
//!
//! # Safety
//!
//! All `unsafe` code lives under `arch/`: SIMD kernels that may run only after a CPU feature
//! check. A [`Kernel`] of a SIMD kind can only be built by [`Kernel::try_new`] (which checks the
//! CPU) or by [`Kernel::best`]; there is no way to build one the CPU cannot run.

pub mod field;

mod arch;
mod matrix;

pub use matrix::Matrix;

use std::fmt;
use std::str::FromStr;
use std::sync::OnceLock;

/// The implementations of the region kernels, by instruction set.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum KernelKind {
    /// Portable scalar code; the oracle the others are tested against.
    Reference,
    /// AVX2: 4-bit nibble tables looked up with `vpshufb`, 32 bytes per instruction.
    Avx2,
    /// AVX-512BW: the nibble-table method on 64-byte vectors.
    Avx512,
    /// GFNI: `vgf2p8affineqb` with an 8×8 bit matrix per constant, 64-byte vectors
    /// (AVX-512) or 32-byte vectors (AVX, where AVX-512 is absent).
    Gfni,
}

impl KernelKind {
    /// All kinds, slowest first.
    pub const ALL: [KernelKind; 4] = [
        KernelKind::Reference,
        KernelKind::Avx2,
        KernelKind::Avx512,
        KernelKind::Gfni,
    ];

    /// The name used by `INEC_KERNEL` and in benchmark output.
    pub fn name(self) -> &'static str {
        match self {
            KernelKind::Reference => "reference",
            KernelKind::Avx2 => "avx2",
            KernelKind::Avx512 => "avx512",
            KernelKind::Gfni => "gfni",
        }
    }

    /// Whether this CPU can run the kind.
    pub fn is_available(self) -> bool {
        arch::is_available(self)
    }
}

impl fmt::Display for KernelKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for KernelKind {
    type Err = KernelError;
    fn from_str(s: &str) -> Result<Self, KernelError> {
        KernelKind::ALL
            .into_iter()
            .find(|k| k.name() == s)
            .ok_or_else(|| KernelError::UnknownKernel {
                name: s.to_string(),
            })
    }
}

/// Why a kernel could not be chosen.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum KernelError {
    #[error("unknown kernel {name:?}: expected one of reference, avx2, avx512, gfni, gfni256")]
    UnknownKernel { name: String },
    #[error("kernel {kind} is not supported by this CPU (it lacks {missing})")]
    Unsupported {
        kind: KernelKind,
        missing: &'static str,
    },
}

/// A region-kernel implementation the CPU is known to support.
///
/// Each [`KernelKind`] has one implementation, except GFNI, which has a 512-bit form (chosen
/// when the CPU has AVX-512) and a 256-bit form (chosen otherwise, and forcible with
/// [`Kernel::try_gfni256`] or `INEC_KERNEL=gfni256` so that it can be tested and measured on
/// AVX-512 machines too). Both report [`KernelKind::Gfni`]; [`Kernel::name`] tells them apart.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct Kernel {
    /// Invariant: the CPU was checked to have every feature `imp` needs before this value was
    /// made (the SIMD code checks again before running).
    imp: arch::Imp,
}

impl fmt::Debug for Kernel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Kernel({})", self.name())
    }
}

/// The environment variable that forces a kernel.
pub const KERNEL_ENV: &str = "INEC_KERNEL";

/// The name of the 256-bit GFNI form in `INEC_KERNEL` and [`Kernel::name`].
pub const GFNI256_NAME: &str = "gfni256";

impl Kernel {
    /// The kernel of the given kind, or an error if this CPU cannot run it.
    ///
    /// For [`KernelKind::Gfni`] this is the 512-bit form if the CPU has AVX-512F and
    /// AVX-512BW, else the 256-bit form.
    pub fn try_new(kind: KernelKind) -> Result<Kernel, KernelError> {
        match arch::resolve(kind) {
            Ok(imp) => Ok(Kernel { imp }),
            Err(missing) => Err(KernelError::Unsupported { kind, missing }),
        }
    }

    /// The 256-bit form of the GFNI kernel (GFNI and AVX2), even where the 512-bit form could
    /// run: for tests and benchmarks of the code CPUs without AVX-512 run.
    pub fn try_gfni256() -> Result<Kernel, KernelError> {
        match arch::resolve_gfni256() {
            Ok(imp) => Ok(Kernel { imp }),
            Err(missing) => Err(KernelError::Unsupported {
                kind: KernelKind::Gfni,
                missing,
            }),
        }
    }

    /// The kernel of a name: a [`KernelKind`] name, or `gfni256` for [`Kernel::try_gfni256`].
    pub fn try_from_name(name: &str) -> Result<Kernel, KernelError> {
        if name == GFNI256_NAME {
            Kernel::try_gfni256()
        } else {
            Kernel::try_new(name.parse()?)
        }
    }

    /// The reference kernel, which every CPU runs.
    pub fn reference() -> Kernel {
        Kernel {
            imp: arch::Imp::Reference,
        }
    }

    /// The fastest kernel this CPU supports.
    pub fn best() -> Kernel {
        KernelKind::ALL
            .iter()
            .rev()
            .find_map(|&k| Kernel::try_new(k).ok())
            .unwrap_or_else(Kernel::reference)
    }

    /// The kernel named by `INEC_KERNEL` (see [`Kernel::try_from_name`]), or the best one when
    /// it is unset or empty.
    pub fn from_env() -> Result<Kernel, KernelError> {
        match std::env::var(KERNEL_ENV) {
            Ok(name) if !name.is_empty() => Kernel::try_from_name(&name),
            _ => Ok(Kernel::best()),
        }
    }

    /// All kernels this CPU supports, slowest first.
    pub fn available() -> Vec<Kernel> {
        KernelKind::ALL
            .iter()
            .filter_map(|&k| Kernel::try_new(k).ok())
            .collect()
    }

    /// Every implementation this CPU supports, slowest first: [`Kernel::available`] plus the
    /// 256-bit GFNI form when the 512-bit one is the GFNI kernel. For tests and benchmarks.
    pub fn forms() -> Vec<Kernel> {
        let mut forms = Kernel::available();
        if let Ok(narrow) = Kernel::try_gfni256() {
            if !forms.contains(&narrow) {
                let at = forms.len().saturating_sub(1);
                forms.insert(at, narrow);
            }
        }
        forms
    }

    pub fn kind(self) -> KernelKind {
        self.imp.kind()
    }

    /// The kind's name, or `gfni256` for the 256-bit GFNI form.
    pub fn name(self) -> &'static str {
        self.imp.name()
    }

    /// Bytes per SIMD register of the implementation (1 for the reference).
    pub fn vector_bytes(self) -> usize {
        self.imp.vector_bytes()
    }

    /// `dst ^= src`. Panics if the lengths differ.
    pub fn xor(self, src: &[u8], dst: &mut [u8]) {
        assert_eq!(
            src.len(),
            dst.len(),
            "xor: source and destination lengths differ"
        );
        arch::xor(self.imp, src, dst);
    }

    /// `dst = c · src`. Panics if the lengths differ.
    pub fn mul(self, c: u8, src: &[u8], dst: &mut [u8]) {
        assert_eq!(
            src.len(),
            dst.len(),
            "mul: source and destination lengths differ"
        );
        match c {
            0 => dst.fill(0),
            1 => dst.copy_from_slice(src),
            _ => arch::mul(self.imp, c, src, dst, false),
        }
    }

    /// `dst ^= c · src`. Panics if the lengths differ.
    pub fn mul_add(self, c: u8, src: &[u8], dst: &mut [u8]) {
        assert_eq!(
            src.len(),
            dst.len(),
            "mul_add: source and destination lengths differ"
        );
        match c {
            0 => {}
            1 => arch::xor(self.imp, src, dst),
            _ => arch::mul(self.imp, c, src, dst, true),
        }
    }

    /// `outputs[i] = Σ_j m[i][j] · inputs[j]`: the encode kernel. `m` has one row per output
    /// and one column per input. Panics if the shapes or lengths disagree.
    pub fn dot_prod(self, m: &Matrix, inputs: &[&[u8]], outputs: &mut [&mut [u8]]) {
        arch::dot_prod(self.imp, m, inputs, outputs, false);
    }

    /// `outputs[i] ^= Σ_j m[i][j] · inputs[j]`: accumulate into partial results.
    pub fn dot_prod_add(self, m: &Matrix, inputs: &[&[u8]], outputs: &mut [&mut [u8]]) {
        arch::dot_prod(self.imp, m, inputs, outputs, true);
    }
}

/// The shape checks of `dot_prod`; the SIMD kernels make the same ones (their soundness rests
/// on them), so only the reference path calls this.
fn check_shapes(m: &Matrix, inputs: &[&[u8]], outputs: &[&mut [u8]]) {
    assert_eq!(m.rows(), outputs.len(), "dot_prod: matrix rows ≠ outputs");
    assert_eq!(m.cols(), inputs.len(), "dot_prod: matrix columns ≠ inputs");
    let len = outputs
        .first()
        .map(|o| o.len())
        .or_else(|| inputs.first().map(|i| i.len()))
        .unwrap_or(0);
    assert!(
        inputs.iter().all(|i| i.len() == len) && outputs.iter().all(|o| o.len() == len),
        "dot_prod: buffers of unequal length"
    );
}

static KERNEL: OnceLock<Result<Kernel, KernelError>> = OnceLock::new();

/// The process-wide kernel: `INEC_KERNEL` if set, else the best available; chosen once.
pub fn try_kernel() -> Result<Kernel, KernelError> {
    KERNEL.get_or_init(Kernel::from_env).clone()
}

/// The process-wide kernel. Panics with the reason if `INEC_KERNEL` names a kernel that does
/// not exist or that this CPU cannot run; call [`try_kernel`] first to report that cleanly.
pub fn kernel() -> Kernel {
    match try_kernel() {
        Ok(k) => k,
        Err(e) => panic!("{KERNEL_ENV}: {e}"),
    }
}

/// The name of the process-wide kernel.
pub fn kernel_name() -> &'static str {
    kernel().name()
}
