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
    #[error("unknown kernel {name:?}: expected one of reference, avx2, avx512, gfni")]
    UnknownKernel { name: String },
    #[error("kernel {kind} is not supported by this CPU (it lacks {missing})")]
    Unsupported {
        kind: KernelKind,
        missing: &'static str,
    },
}

/// A region-kernel implementation the CPU is known to support.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct Kernel {
    /// Invariant: `kind.is_available()` was true when this value was made.
    kind: KernelKind,
}

impl fmt::Debug for Kernel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Kernel({})", self.kind)
    }
}

/// The environment variable that forces a kernel.
pub const KERNEL_ENV: &str = "INEC_KERNEL";

impl Kernel {
    /// The kernel of the given kind, or an error if this CPU cannot run it.
    pub fn try_new(kind: KernelKind) -> Result<Kernel, KernelError> {
        match arch::missing_feature(kind) {
            None => Ok(Kernel { kind }),
            Some(missing) => Err(KernelError::Unsupported { kind, missing }),
        }
    }

    /// The reference kernel, which every CPU runs.
    pub fn reference() -> Kernel {
        Kernel {
            kind: KernelKind::Reference,
        }
    }

    /// The fastest kernel this CPU supports.
    pub fn best() -> Kernel {
        let kind = *KernelKind::ALL
            .iter()
            .rev()
            .find(|k| k.is_available())
            .unwrap_or(&KernelKind::Reference);
        Kernel { kind }
    }

    /// The kernel named by `INEC_KERNEL`, or the best one when it is unset or empty.
    pub fn from_env() -> Result<Kernel, KernelError> {
        match std::env::var(KERNEL_ENV) {
            Ok(name) if !name.is_empty() => Kernel::try_new(name.parse()?),
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

    pub fn kind(self) -> KernelKind {
        self.kind
    }

    pub fn name(self) -> &'static str {
        self.kind.name()
    }

    /// `dst ^= src`. Panics if the lengths differ.
    pub fn xor(self, src: &[u8], dst: &mut [u8]) {
        assert_eq!(
            src.len(),
            dst.len(),
            "xor: source and destination lengths differ"
        );
        arch::xor(self.kind, src, dst);
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
            _ => arch::mul(self.kind, c, src, dst, false),
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
            1 => arch::xor(self.kind, src, dst),
            _ => arch::mul(self.kind, c, src, dst, true),
        }
    }

    /// `outputs[i] = Σ_j m[i][j] · inputs[j]`: the encode kernel. `m` has one row per output
    /// and one column per input. Panics if the shapes or lengths disagree.
    pub fn dot_prod(self, m: &Matrix, inputs: &[&[u8]], outputs: &mut [&mut [u8]]) {
        check_shapes(m, inputs, outputs);
        arch::dot_prod(self.kind, m, inputs, outputs, false);
    }

    /// `outputs[i] ^= Σ_j m[i][j] · inputs[j]`: accumulate into partial results.
    pub fn dot_prod_add(self, m: &Matrix, inputs: &[&[u8]], outputs: &mut [&mut [u8]]) {
        check_shapes(m, inputs, outputs);
        arch::dot_prod(self.kind, m, inputs, outputs, true);
    }
}

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
