//! Reed-Solomon and Azure LRC codes over GF(2^8): generator matrices, encode, decode of any
//! recoverable erasure pattern, minimal repair sets and prepared calculators.
//!
//! Chunk indices: `0..k` are data chunks, then parity chunks. For LRC(k, l, r), `k..k+l` are
//! the local parities (group g's at `k + g`, group g holding data chunks
//! `g·k/l .. (g+1)·k/l`), then `k+l..k+l+r` the global parities.
//!
//! Codes print and parse as `rs:6,3` (Cauchy, the default), `rs-vand:10,4` (ISA-L
//! `gf_gen_rs_matrix`) and `lrc:12,2,2`.

#![forbid(unsafe_code)]

pub mod chunk_file;

use std::fmt;
use std::str::FromStr;
use std::sync::Arc;

pub use gf::{Kernel, Matrix};

/// Which generator matrix an RS code uses.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum MatrixKind {
    /// ISA-L `gf_gen_cauchy1_matrix`: parity (i, j) = inv(i ^ j), i ≥ k. MDS for n ≤ 256.
    Cauchy,
    /// ISA-L `gf_gen_rs_matrix`: parity (r, j) = 2^(r·j). Only MDS for some (k, m).
    Vandermonde,
}

/// The algebra of a stripe.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Code {
    Rs {
        k: usize,
        m: usize,
        matrix: MatrixKind,
    },
    Lrc {
        k: usize,
        l: usize,
        r: usize,
    },
}

/// Errors of this crate. Messages are lowercase and name the value and the limit.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CodeError {
    #[error("bad code parameters: {reason}")]
    BadParameters { reason: String },
    #[error("too few chunks: have {have}, need {need}")]
    TooFewChunks { have: usize, need: usize },
    #[error("chunks of unequal length: chunk {index} has {len} bytes, expected {expected}")]
    UnequalLengths {
        index: usize,
        len: usize,
        expected: usize,
    },
    #[error("erasure pattern {erased:?} is not recoverable by {code}")]
    Unrecoverable { code: String, erased: Vec<usize> },
    #[error("chunk index {index} out of range for {code} ({n} chunks)")]
    BadIndex {
        index: usize,
        n: usize,
        code: String,
    },
}

impl Code {
    /// RS(k, m) with the Cauchy matrix. Needs k ≥ 1, m ≥ 1, k + m ≤ 256.
    pub fn rs(k: usize, m: usize) -> Result<Code, CodeError> {
        Code::rs_with(k, m, MatrixKind::Cauchy)
    }

    /// RS(k, m) with the given matrix; `Vandermonde` is refused where it is not MDS, with
    /// the limit in the message.
    pub fn rs_with(k: usize, m: usize, matrix: MatrixKind) -> Result<Code, CodeError> {
        let _ = (k, m, matrix);
        todo!("codes: rs_with")
    }

    /// Azure LRC(k, l, r): l | k, l ≥ 1, r ≥ 0, k + l + r ≤ 256.
    pub fn lrc(k: usize, l: usize, r: usize) -> Result<Code, CodeError> {
        let _ = (k, l, r);
        todo!("codes: lrc")
    }

    /// Number of data chunks.
    pub fn k(&self) -> usize {
        match *self {
            Code::Rs { k, .. } | Code::Lrc { k, .. } => k,
        }
    }

    /// Number of parity chunks (LRC: l + r).
    pub fn parity_count(&self) -> usize {
        match *self {
            Code::Rs { m, .. } => m,
            Code::Lrc { l, r, .. } => l + r,
        }
    }

    /// Total chunks in a stripe.
    pub fn n(&self) -> usize {
        self.k() + self.parity_count()
    }

    /// The n × k generator matrix, row-major, identity on top.
    pub fn generator(&self) -> Vec<u8> {
        todo!("codes: generator")
    }

    /// For LRC: the local group of a data chunk or local parity (None for global parity);
    /// for RS: None.
    pub fn group_of(&self, index: usize) -> Option<usize> {
        let _ = index;
        todo!("codes: group_of")
    }
}

impl fmt::Display for Code {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Code::Rs {
                k,
                m,
                matrix: MatrixKind::Cauchy,
            } => write!(f, "rs:{k},{m}"),
            Code::Rs {
                k,
                m,
                matrix: MatrixKind::Vandermonde,
            } => write!(f, "rs-vand:{k},{m}"),
            Code::Lrc { k, l, r } => write!(f, "lrc:{k},{l},{r}"),
        }
    }
}

impl FromStr for Code {
    type Err = CodeError;
    fn from_str(s: &str) -> Result<Code, CodeError> {
        let _ = s;
        todo!("codes: parse")
    }
}

/// A prepared linear map from some chunks of a stripe to others: `outputs = matrix · inputs`.
/// Cheap to share (`Arc`); the engine and the plans call it on their hot path.
#[derive(Debug, Clone)]
pub struct Calculator {
    /// Chunk indices read, in the order `compute` expects its inputs.
    inputs: Vec<usize>,
    /// Chunk indices produced, in the order `compute` writes its outputs.
    outputs: Vec<usize>,
    /// `outputs.len() × inputs.len()`, with kernel tables prepared.
    matrix: Matrix,
    kernel: Kernel,
}

impl Calculator {
    /// A calculator for an explicit matrix (rows = outputs, cols = inputs).
    pub fn new(
        kernel: Kernel,
        inputs: Vec<usize>,
        outputs: Vec<usize>,
        coeffs: &[u8],
    ) -> Calculator {
        let matrix = Matrix::new(outputs.len(), inputs.len(), coeffs);
        Calculator {
            inputs,
            outputs,
            matrix,
            kernel,
        }
    }
    pub fn inputs(&self) -> &[usize] {
        &self.inputs
    }
    pub fn outputs(&self) -> &[usize] {
        &self.outputs
    }
    pub fn matrix(&self) -> &Matrix {
        &self.matrix
    }
    pub fn kernel(&self) -> Kernel {
        self.kernel
    }
    /// Coefficient applied to input `input_pos` for output `output_pos`.
    pub fn coeff(&self, output_pos: usize, input_pos: usize) -> u8 {
        self.matrix.get(output_pos, input_pos)
    }
    /// `outputs = matrix · inputs`; checks counts and lengths.
    pub fn compute(&self, inputs: &[&[u8]], outputs: &mut [&mut [u8]]) -> Result<(), CodeError> {
        let _ = (inputs, outputs);
        todo!("codes: compute")
    }
    /// `outputs ^= matrix · inputs`.
    pub fn compute_add(
        &self,
        inputs: &[&[u8]],
        outputs: &mut [&mut [u8]],
    ) -> Result<(), CodeError> {
        let _ = (inputs, outputs);
        todo!("codes: compute_add")
    }
}

/// A code with its prepared encode calculator and a bounded LRU of decode calculators, keyed
/// by (chunks read, chunks wanted). Thread-safe.
#[derive(Debug)]
pub struct Codec {
    code: Code,
    kernel: Kernel,
}

impl Codec {
    /// With the process-wide kernel (`gf::kernel()`).
    pub fn new(code: Code) -> Codec {
        Codec::with_kernel(code, gf::kernel())
    }
    pub fn with_kernel(code: Code, kernel: Kernel) -> Codec {
        Codec { code, kernel }
    }
    pub fn code(&self) -> Code {
        self.code
    }
    pub fn kernel(&self) -> Kernel {
        self.kernel
    }

    /// The calculator that maps the k data chunks to all parity chunks.
    pub fn encoder(&self) -> Arc<Calculator> {
        todo!("codes: encoder")
    }

    /// Computes all parity chunks from k data chunks of equal length.
    pub fn encode(&self, data: &[&[u8]], parity: &mut [&mut [u8]]) -> Result<(), CodeError> {
        let _ = (data, parity);
        todo!("codes: encode")
    }

    /// The minimal set of available chunks to read to rebuild `wanted` (LRC: a single data or
    /// local-parity loss reads its group only; otherwise k chunks, preferring data chunks and
    /// then lower indices). Errors if unrecoverable.
    pub fn repair_set(
        &self,
        available: &[usize],
        wanted: &[usize],
    ) -> Result<Vec<usize>, CodeError> {
        let _ = (available, wanted);
        todo!("codes: repair_set")
    }

    /// A calculator that rebuilds `wanted` from exactly the chunks `inputs` (as returned by
    /// `repair_set`, or any set that suffices); cached per (inputs, wanted) in a bounded LRU.
    pub fn decoder(
        &self,
        inputs: &[usize],
        wanted: &[usize],
    ) -> Result<Arc<Calculator>, CodeError> {
        let _ = (inputs, wanted);
        todo!("codes: decoder")
    }

    /// Rebuilds `wanted` chunks. `chunks[i]` is `Some` for available chunk i (length n);
    /// computes only the chunks asked for, reading the minimal repair set.
    pub fn reconstruct(
        &self,
        chunks: &[Option<&[u8]>],
        wanted: &[usize],
        outputs: &mut [&mut [u8]],
    ) -> Result<(), CodeError> {
        let _ = (chunks, wanted, outputs);
        todo!("codes: reconstruct")
    }

    /// Whether the erasure pattern `erased` leaves every chunk recoverable.
    pub fn is_recoverable(&self, erased: &[usize]) -> bool {
        let _ = erased;
        todo!("codes: is_recoverable")
    }
}
