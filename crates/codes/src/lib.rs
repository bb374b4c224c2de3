//! Reed-Solomon and Azure LRC codes over GF(2^8): generator matrices, encode, decode of any
//! recoverable erasure pattern, minimal repair sets and prepared calculators.
//!
//! Chunk indices: `0..k` are data chunks, then parity chunks. For LRC(k, l, r), `k..k+l` are
//! the local parities (group g's at `k + g`, group g holding data chunks
//! `g·k/l .. (g+1)·k/l`), then `k+l..k+l+r` the global parities.
//!
//! Codes print and parse as `rs:6,3` (Cauchy, the default), `rs-xor:6,3` (that Cauchy matrix
//! scaled so that the first parity is the XOR of the data), `rs-vand:10,4` (ISA-L
//! `gf_gen_rs_matrix`) and `lrc:12,2,2`.
//!
//! Every operation is a [`Calculator`]: a prepared matrix mapping some chunks of a stripe
//! (its inputs, in a fixed order) to others (its outputs). A [`Codec`] holds the encode
//! calculator of one code and builds decode calculators on demand, keeping the most recently
//! used ones in a bounded cache.
//!
//! ```
//! use codes::{Code, Codec};
//!
//! let codec = Codec::new("rs:4,2".parse::<Code>().unwrap());
//! let data: Vec<Vec<u8>> = (0..4u8).map(|j| vec![j * 10 + 1; 64]).collect();
//! let mut parity = vec![vec![0u8; 64]; 2];
//! {
//!     let data_refs: Vec<&[u8]> = data.iter().map(|d| d.as_slice()).collect();
//!     let mut parity_refs: Vec<&mut [u8]> = parity.iter_mut().map(|p| p.as_mut_slice()).collect();
//!     codec.encode(&data_refs, &mut parity_refs).unwrap();
//! }
//!
//! // Lose data chunks 1 and 3; rebuild only those two from the survivors.
//! let chunks: Vec<Option<&[u8]>> = vec![
//!     Some(&data[0]), None, Some(&data[2]), None, Some(&parity[0]), Some(&parity[1]),
//! ];
//! let (mut c1, mut c3) = (vec![0u8; 64], vec![0u8; 64]);
//! codec.reconstruct(&chunks, &[1, 3], &mut [&mut c1, &mut c3]).unwrap();
//! assert_eq!((c1, c3), (data[1].clone(), data[3].clone()));
//!
//! // The minimal read set: any 4 survivors, data chunks first.
//! assert_eq!(codec.repair_set(&[0, 2, 4, 5], &[1]).unwrap(), vec![0, 2, 4, 5]);
//! assert!(codec.is_recoverable(&[1, 3]));
//! assert!(!codec.is_recoverable(&[0, 1, 2]));
//! ```

#![forbid(unsafe_code)]

mod linalg;
mod lru;
pub mod matrices;
pub mod size;

use std::fmt;
use std::str::FromStr;
use std::sync::{Arc, Mutex, PoisonError};

pub use gf::{Kernel, Matrix};
pub use linalg::{invert, multiply};

use linalg::Basis;
use lru::Lru;
use matrices::VandermondeVerdict;

/// Most chunks a stripe can have: GF(2^8) has 256 elements, and ISA-L's Cauchy construction
/// needs distinct `i XOR j`.
pub const MAX_CHUNKS: usize = 256;

/// How many decode calculators a [`Codec`] keeps by default.
pub const DEFAULT_DECODER_CACHE_CAPACITY: usize = 1024;

/// Longest code string [`Code::from_str`] accepts.
pub const MAX_CODE_STRING_BYTES: usize = 64;

/// Which generator matrix an RS code uses.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum MatrixKind {
    /// ISA-L `gf_gen_cauchy1_matrix`: parity (i, j) = inv(i ^ j), i ≥ k. MDS for n ≤ 256.
    Cauchy,
    /// `Cauchy` with each parity column scaled so that the first parity is the XOR of the
    /// data (see [`matrices::cauchy_xor`]): MDS for n ≤ 256, and faster to encode and to
    /// repair one data chunk with. Written `rs-xor:K,M`.
    CauchyXor,
    /// ISA-L `gf_gen_rs_matrix`: parity (r, j) = 2^(r·j). Only MDS for some (k, m); see
    /// [`matrices::vandermonde_verdict`] for the rule.
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
    /// More chunks per stripe than GF(2^8) allows. `n` is exact (k + parity computed without
    /// overflow), so it is the count asked for even for absurd parameters.
    #[error("{n} chunks per stripe, at most {max} in gf(2^8)")]
    TooManyChunks { n: u128, max: usize },
    /// k = 0.
    #[error("k = 0: a stripe needs at least 1 data chunk")]
    NoDataChunks,
    /// RS with m = 0.
    #[error("m = 0: an rs stripe needs at least 1 parity chunk")]
    NoParityChunks,
    /// LRC with l = 0.
    #[error("l = 0: an lrc needs at least 1 local group")]
    NoLocalGroups,
    /// LRC whose l does not divide k.
    #[error("l = {l} does not divide k = {k}: local groups must be of equal size")]
    GroupsDoNotDivide { k: usize, l: usize },
    /// ISA-L `gf_gen_rs_matrix` is not MDS for (k, m): it is MDS for this m only up to
    /// `max_k`; the parity `rows` × data `cols` submatrix is singular.
    #[error(
        "rs-vand:{k},{m}: isa-l gf_gen_rs_matrix is not mds for k = {k}, m = {m}: with m = {m} \
         it is mds only up to k = {max_k} (parity rows {rows:?} × data columns {cols:?} are \
         singular); use rs:{k},{m} (cauchy)"
    )]
    NotMds {
        k: usize,
        m: usize,
        max_k: usize,
        rows: Vec<usize>,
        cols: Vec<usize>,
    },
    /// The exact MDS check of `gf_gen_rs_matrix` would exceed its work limit.
    #[error(
        "rs-vand:{k},{m}: cannot verify that isa-l gf_gen_rs_matrix is mds: checking its \
         {minors} square submatrices exceeds the work limit of {limit} steps; use rs:{k},{m} \
         (cauchy)"
    )]
    MdsCheckTooLarge {
        k: usize,
        m: usize,
        minors: u128,
        limit: u64,
    },
    /// A code string longer than [`MAX_CODE_STRING_BYTES`].
    #[error("code string of {len} bytes is longer than the limit of {max}")]
    CodeStringTooLong { len: usize, max: usize },
    /// A code string without the `name:` prefix.
    #[error(
        "cannot parse {input:?} as a code: expected rs:K,M, rs-xor:K,M, rs-vand:K,M or \
         lrc:K,L,R, e.g. rs:6,3"
    )]
    Unparsable { input: String },
    /// A code name other than `rs`, `rs-xor`, `rs-vand` and `lrc`.
    #[error("unknown code {name:?} in {input:?}: expected rs, rs-xor, rs-vand or lrc")]
    UnknownCode { name: String, input: String },
    /// A parameter that is not a non-negative integer.
    #[error("{token:?} in {input:?} is not a non-negative integer")]
    NotAnInteger { token: String, input: String },
    /// The wrong number of parameters for the code name.
    #[error("{name} takes {expected} parameters, {input:?} gives {found}")]
    WrongParameterCount {
        name: &'static str,
        expected: usize,
        found: usize,
        input: String,
    },
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
    /// A buffer list of the wrong length that is not a shortage of input chunks (too many
    /// inputs, the wrong number of outputs, a chunk list not of length n).
    #[error("wrong number of {what}: have {have}, expected {expected}")]
    CountMismatch {
        what: &'static str,
        have: usize,
        expected: usize,
    },
}

impl CodeError {
    /// Whether this error says the code's parameters (or its text) are invalid, as opposed
    /// to a problem with the chunks handed to a valid code.
    pub fn is_bad_parameters(&self) -> bool {
        !matches!(
            self,
            CodeError::TooFewChunks { .. }
                | CodeError::UnequalLengths { .. }
                | CodeError::Unrecoverable { .. }
                | CodeError::BadIndex { .. }
                | CodeError::CountMismatch { .. }
        )
    }
}

impl Code {
    /// RS(k, m) with the Cauchy matrix. Needs k ≥ 1, m ≥ 1, k + m ≤ 256.
    pub fn rs(k: usize, m: usize) -> Result<Code, CodeError> {
        Code::rs_with(k, m, MatrixKind::Cauchy)
    }

    /// RS(k, m) with the given matrix; `Vandermonde` is refused where it is not MDS, with
    /// the limit in the message.
    pub fn rs_with(k: usize, m: usize, matrix: MatrixKind) -> Result<Code, CodeError> {
        let code = Code::Rs { k, m, matrix };
        code.validate()?;
        Ok(code)
    }

    /// Azure LRC(k, l, r): l | k, l ≥ 1, r ≥ 0, k + l + r ≤ 256.
    pub fn lrc(k: usize, l: usize, r: usize) -> Result<Code, CodeError> {
        let code = Code::Lrc { k, l, r };
        code.validate()?;
        Ok(code)
    }

    /// Checks the parameters of a code built directly from the enum (the constructors and the
    /// parser already do).
    pub fn validate(&self) -> Result<(), CodeError> {
        if self.k() == 0 {
            return Err(CodeError::NoDataChunks);
        }
        // Exact even for parameters near usize::MAX, so the error names the real count.
        let n: u128 = match *self {
            Code::Rs { k, m, .. } => k as u128 + m as u128,
            Code::Lrc { k, l, r } => k as u128 + l as u128 + r as u128,
        };
        if n > MAX_CHUNKS as u128 {
            return Err(CodeError::TooManyChunks { n, max: MAX_CHUNKS });
        }
        match *self {
            Code::Rs { m: 0, .. } => Err(CodeError::NoParityChunks),
            Code::Rs {
                k,
                m,
                matrix: MatrixKind::Vandermonde,
            } => match matrices::vandermonde_verdict(k, m) {
                VandermondeVerdict::Mds => Ok(()),
                VandermondeVerdict::Singular { rows, cols, max_k } => Err(CodeError::NotMds {
                    k,
                    m,
                    max_k,
                    rows,
                    cols,
                }),
                VandermondeVerdict::TooLarge { minors } => Err(CodeError::MdsCheckTooLarge {
                    k,
                    m,
                    minors,
                    limit: matrices::VANDERMONDE_CHECK_LIMIT,
                }),
            },
            Code::Rs { .. } => Ok(()),
            Code::Lrc { l: 0, .. } => Err(CodeError::NoLocalGroups),
            Code::Lrc { k, l, .. } if k % l != 0 => Err(CodeError::GroupsDoNotDivide { k, l }),
            Code::Lrc { .. } => Ok(()),
        }
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
            Code::Lrc { l, r, .. } => l.saturating_add(r),
        }
    }

    /// Total chunks in a stripe.
    pub fn n(&self) -> usize {
        self.k().saturating_add(self.parity_count())
    }

    /// The n × k generator matrix, row-major, identity on top. Panics if the code's
    /// parameters are invalid (see [`Code::validate`]).
    pub fn generator(&self) -> Vec<u8> {
        if let Err(e) = self.validate() {
            panic!("{e}");
        }
        match *self {
            Code::Rs {
                k,
                m,
                matrix: MatrixKind::Cauchy,
            } => matrices::cauchy1(k, m),
            Code::Rs {
                k,
                m,
                matrix: MatrixKind::CauchyXor,
            } => matrices::cauchy_xor(k, m),
            Code::Rs {
                k,
                m,
                matrix: MatrixKind::Vandermonde,
            } => matrices::rs_vandermonde(k, m),
            Code::Lrc { k, l, r } => matrices::azure_lrc(k, l, r),
        }
    }

    /// For LRC: the local group of a data chunk or local parity (None for global parity);
    /// for RS: None. Meaningful for a valid code (see [`Code::validate`]).
    pub fn group_of(&self, index: usize) -> Option<usize> {
        match *self {
            Code::Rs { .. } => None,
            Code::Lrc { k, l, .. } => {
                if index < k {
                    // Groups hold k / l consecutive data chunks (l divides k); an invalid
                    // l = 0 or l > k has no groups rather than a division by zero.
                    k.checked_div(l).and_then(|size| index.checked_div(size))
                } else if index < k + l {
                    Some(index - k)
                } else {
                    None
                }
            }
        }
    }

    /// For LRC: the chunks of local group g — its data chunks in order, then its local
    /// parity. None for RS or g ≥ l.
    pub fn local_group(&self, group: usize) -> Option<Vec<usize>> {
        match *self {
            Code::Lrc { k, l, .. } if group < l => {
                let size = k / l;
                let mut members: Vec<usize> = (group * size..(group + 1) * size).collect();
                members.push(k + group);
                Some(members)
            }
            _ => None,
        }
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
            Code::Rs {
                k,
                m,
                matrix: MatrixKind::CauchyXor,
            } => write!(f, "rs-xor:{k},{m}"),
            Code::Lrc { k, l, r } => write!(f, "lrc:{k},{l},{r}"),
        }
    }
}

impl FromStr for Code {
    type Err = CodeError;

    /// Parses `rs:K,M`, `rs-xor:K,M`, `rs-vand:K,M` or `lrc:K,L,R` (surrounding spaces
    /// allowed), then checks the parameters as the constructors do.
    fn from_str(s: &str) -> Result<Code, CodeError> {
        if s.len() > MAX_CODE_STRING_BYTES {
            return Err(CodeError::CodeStringTooLong {
                len: s.len(),
                max: MAX_CODE_STRING_BYTES,
            });
        }
        let text = s.trim();
        let Some((name, params)) = text.split_once(':') else {
            return Err(CodeError::Unparsable {
                input: text.to_string(),
            });
        };
        let numbers = params
            .split(',')
            .map(|p| {
                let p = p.trim();
                p.parse::<usize>().map_err(|_| CodeError::NotAnInteger {
                    token: p.to_string(),
                    input: text.to_string(),
                })
            })
            .collect::<Result<Vec<usize>, CodeError>>()?;
        let arity = |name: &'static str, expected: usize| -> Result<(), CodeError> {
            if numbers.len() == expected {
                Ok(())
            } else {
                Err(CodeError::WrongParameterCount {
                    name,
                    expected,
                    found: numbers.len(),
                    input: text.to_string(),
                })
            }
        };
        match name.trim() {
            "rs" => {
                arity("rs", 2)?;
                Code::rs(numbers[0], numbers[1])
            }
            "rs-vand" => {
                arity("rs-vand", 2)?;
                Code::rs_with(numbers[0], numbers[1], MatrixKind::Vandermonde)
            }
            "rs-xor" => {
                arity("rs-xor", 2)?;
                Code::rs_with(numbers[0], numbers[1], MatrixKind::CauchyXor)
            }
            "lrc" => {
                arity("lrc", 3)?;
                Code::lrc(numbers[0], numbers[1], numbers[2])
            }
            other => Err(CodeError::UnknownCode {
                name: other.to_string(),
                input: text.to_string(),
            }),
        }
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
    /// A calculator for an explicit matrix (rows = outputs, cols = inputs). Panics if
    /// `coeffs.len() != outputs.len() · inputs.len()`.
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
    /// Whether every coefficient is 0 or 1, so that the map is plain XOR.
    pub fn is_xor(&self) -> bool {
        self.matrix.coeffs().iter().all(|&c| c <= 1)
    }

    /// Checks buffer counts and lengths against the calculator's shape.
    fn check(&self, inputs: &[&[u8]], outputs: &[&mut [u8]]) -> Result<(), CodeError> {
        let need = self.inputs.len();
        if inputs.len() < need {
            return Err(CodeError::TooFewChunks {
                have: inputs.len(),
                need,
            });
        }
        if inputs.len() > need {
            return Err(CodeError::CountMismatch {
                what: "input chunks",
                have: inputs.len(),
                expected: need,
            });
        }
        if outputs.len() != self.outputs.len() {
            return Err(CodeError::CountMismatch {
                what: "output chunks",
                have: outputs.len(),
                expected: self.outputs.len(),
            });
        }
        let expected = inputs
            .first()
            .map(|b| b.len())
            .or_else(|| outputs.first().map(|b| b.len()))
            .unwrap_or(0);
        let lengths = inputs
            .iter()
            .map(|b| b.len())
            .zip(&self.inputs)
            .chain(outputs.iter().map(|b| b.len()).zip(&self.outputs));
        for (len, &index) in lengths {
            if len != expected {
                return Err(CodeError::UnequalLengths {
                    index,
                    len,
                    expected,
                });
            }
        }
        Ok(())
    }

    /// `outputs = matrix · inputs`; checks counts and lengths.
    pub fn compute(&self, inputs: &[&[u8]], outputs: &mut [&mut [u8]]) -> Result<(), CodeError> {
        self.check(inputs, outputs)?;
        self.kernel.dot_prod(&self.matrix, inputs, outputs);
        Ok(())
    }

    /// `outputs ^= matrix · inputs`.
    pub fn compute_add(
        &self,
        inputs: &[&[u8]],
        outputs: &mut [&mut [u8]],
    ) -> Result<(), CodeError> {
        self.check(inputs, outputs)?;
        self.kernel.dot_prod_add(&self.matrix, inputs, outputs);
        Ok(())
    }
}

/// The decode calculators of a codec, keyed by the chunks read (in order), `usize::MAX`, then
/// the chunks wanted (in order).
#[derive(Debug)]
struct DecoderCache {
    lru: Lru<Arc<Calculator>>,
    /// Where a key is assembled for a lookup, so that a hit allocates nothing.
    key: Vec<usize>,
}

impl DecoderCache {
    fn set_key(&mut self, inputs: &[usize], wanted: &[usize]) {
        self.key.clear();
        self.key.extend_from_slice(inputs);
        self.key.push(usize::MAX);
        self.key.extend_from_slice(wanted);
    }
}

/// A code with its prepared encode calculator and a bounded LRU of decode calculators, keyed
/// by (chunks read, chunks wanted). Thread-safe.
#[derive(Debug)]
pub struct Codec {
    code: Code,
    kernel: Kernel,
    /// The n × k generator matrix, row-major; row i expresses chunk i in the data chunks.
    generator: Vec<u8>,
    /// Data chunks `0..k` → parity chunks `k..n`.
    encoder: Arc<Calculator>,
    /// Decode calculators by (inputs, wanted). Built outside the lock; the first one stored
    /// for a key wins, so every caller of one key shares one `Arc`.
    decoders: Mutex<DecoderCache>,
}

impl Codec {
    /// With the process-wide kernel (`gf::kernel()`). Panics if the code's parameters are
    /// invalid (codes from [`Code::rs`], [`Code::lrc`] or parsing always are valid).
    pub fn new(code: Code) -> Codec {
        Codec::with_kernel(code, gf::kernel())
    }

    /// With the given kernel and the default cache capacity. Panics like [`Codec::new`].
    pub fn with_kernel(code: Code, kernel: Kernel) -> Codec {
        Codec::with_cache_capacity(code, kernel, DEFAULT_DECODER_CACHE_CAPACITY)
    }

    /// With the given kernel, keeping at most `capacity` decode calculators (0 disables the
    /// cache). Panics like [`Codec::new`].
    pub fn with_cache_capacity(code: Code, kernel: Kernel, capacity: usize) -> Codec {
        match Codec::try_new(code, kernel, capacity) {
            Ok(codec) => codec,
            Err(e) => panic!("{e}"),
        }
    }

    /// Like [`Codec::with_cache_capacity`], returning invalid parameters as an error.
    pub fn try_new(code: Code, kernel: Kernel, capacity: usize) -> Result<Codec, CodeError> {
        code.validate()?;
        let generator = code.generator();
        let (k, n) = (code.k(), code.n());
        let encoder = Calculator::new(
            kernel,
            (0..k).collect(),
            (k..n).collect(),
            &generator[k * k..],
        );
        Ok(Codec {
            code,
            kernel,
            generator,
            encoder: Arc::new(encoder),
            decoders: Mutex::new(DecoderCache {
                lru: Lru::new(capacity),
                key: Vec::new(),
            }),
        })
    }

    pub fn code(&self) -> Code {
        self.code
    }
    pub fn kernel(&self) -> Kernel {
        self.kernel
    }

    /// The n × k generator matrix, row-major (row i: chunk i as a combination of the data).
    pub fn generator(&self) -> &[u8] {
        &self.generator
    }

    fn row(&self, index: usize) -> &[u8] {
        let k = self.code.k();
        &self.generator[index * k..(index + 1) * k]
    }

    /// Number of decode calculators cached now.
    pub fn decoder_cache_len(&self) -> usize {
        self.lock_decoders().lru.len()
    }

    /// Most decode calculators the cache holds.
    pub fn decoder_cache_capacity(&self) -> usize {
        self.lock_decoders().lru.capacity()
    }

    fn lock_decoders(&self) -> std::sync::MutexGuard<'_, DecoderCache> {
        // The cache holds no invariant a panicking holder could break half-way (entries are
        // inserted whole), so a poisoned lock is still usable.
        self.decoders.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The calculator that maps the k data chunks to all parity chunks.
    pub fn encoder(&self) -> Arc<Calculator> {
        Arc::clone(&self.encoder)
    }

    /// Computes all parity chunks from k data chunks of equal length.
    pub fn encode(&self, data: &[&[u8]], parity: &mut [&mut [u8]]) -> Result<(), CodeError> {
        self.encoder.compute(data, parity)
    }

    fn check_index(&self, index: usize) -> Result<(), CodeError> {
        if index < self.code.n() {
            Ok(())
        } else {
            Err(CodeError::BadIndex {
                index,
                n: self.code.n(),
                code: self.code.to_string(),
            })
        }
    }

    /// The error for wanted chunks that `available` cannot rebuild.
    fn unrecoverable(&self, available: &[bool]) -> CodeError {
        let have = available.iter().filter(|&&a| a).count();
        let need = self.code.k();
        if have < need {
            CodeError::TooFewChunks { have, need }
        } else {
            CodeError::Unrecoverable {
                code: self.code.to_string(),
                erased: (0..available.len()).filter(|&i| !available[i]).collect(),
            }
        }
    }

    /// The minimal set of available chunks to read to rebuild `wanted` (LRC: a single data or
    /// local-parity loss reads its group only; otherwise k chunks, preferring data chunks and
    /// then lower indices). Errors if unrecoverable.
    ///
    /// The result is sorted ascending and contains every wanted chunk that is available: such
    /// a chunk is read and copied (the calculator of [`Codec::decoder`] gives it coefficient
    /// 1), never rebuilt. If every wanted chunk is available the result is `wanted` itself.
    /// Besides those, it holds as few chunks as possible that, together with them, span the
    /// missing wanted chunks:
    /// - RS: the available wanted chunks, filled up to k with the lowest other available
    ///   indices (data first); only the available wanted chunks if there are k or more.
    /// - LRC, when every missing wanted chunk is a data chunk or local parity whose group has
    ///   no other loss: the union of those groups' survivors, plus the available wanted
    ///   chunks — unless the greedy set below is smaller (possible only when a wanted parity
    ///   chunk is available).
    /// - LRC otherwise: a greedy basis — the available wanted chunks first, then the other
    ///   available chunks in ascending index order (data, then local, then global parities),
    ///   each kept only if it raises the rank, until the rank is k; if the survivors have rank
    ///   below k but still span the wanted chunks (an LRC whose other groups are damaged), that
    ///   basis pruned of every chunk the wanted ones do not need.
    ///
    /// Errors: [`CodeError::TooFewChunks`] if fewer than k chunks are available and the wanted
    /// chunks cannot be rebuilt, [`CodeError::Unrecoverable`] otherwise, and
    /// [`CodeError::BadIndex`] for an index ≥ n.
    pub fn repair_set(
        &self,
        available: &[usize],
        wanted: &[usize],
    ) -> Result<Vec<usize>, CodeError> {
        let (k, n) = (self.code.k(), self.code.n());
        // n ≤ MAX_CHUNKS for a valid code: flags on the stack keep the common path free of
        // allocations but the result.
        let mut is_available = [false; MAX_CHUNKS];
        for &i in available {
            self.check_index(i)?;
            is_available[i] = true;
        }
        let mut is_wanted = [false; MAX_CHUNKS];
        for &w in wanted {
            self.check_index(w)?;
            is_wanted[w] = true;
        }
        let is_available = &is_available[..n];
        let is_wanted = &is_wanted[..n];
        // Available wanted chunks: always read (and copied).
        let forced = |i: usize| is_wanted[i] && is_available[i];
        if (0..n).all(|i| !is_wanted[i] || is_available[i]) {
            return Ok((0..n).filter(|&i| is_wanted[i]).collect());
        }

        if let Code::Rs { .. } = self.code {
            // MDS: any k chunks are independent, and fewer than k span no other chunk.
            let forced_count = (0..n).filter(|&i| forced(i)).count();
            let mut extra = k.saturating_sub(forced_count);
            let reads: Vec<usize> = (0..n)
                .filter(|&i| {
                    if forced(i) {
                        true
                    } else if is_available[i] && extra > 0 {
                        extra -= 1;
                        true
                    } else {
                        false
                    }
                })
                .collect();
            return if extra == 0 {
                Ok(reads)
            } else {
                Err(self.unrecoverable(is_available))
            };
        }

        let missing: Vec<usize> = (0..n)
            .filter(|&i| is_wanted[i] && !is_available[i])
            .collect();
        let local = self.local_repair_set(is_available, is_wanted, &missing);
        let forced_parity = (k..n).any(forced);
        match local {
            // With no wanted parity among the reads, the local set is at most k chunks and
            // the greedy one at least k: no need to build it.
            Some(local) if !forced_parity => Ok(local),
            Some(local) => {
                let greedy = self.greedy_repair_set(is_available, is_wanted, &missing)?;
                Ok(if greedy.len() < local.len() {
                    greedy
                } else {
                    local
                })
            }
            None => self.greedy_repair_set(is_available, is_wanted, &missing),
        }
    }

    /// LRC: the reads when every missing wanted chunk is a data chunk or local parity whose
    /// group has no other loss (its group's survivors, plus the available wanted chunks),
    /// else `None`.
    fn local_repair_set(
        &self,
        is_available: &[bool],
        is_wanted: &[bool],
        missing: &[usize],
    ) -> Option<Vec<usize>> {
        let mut reads = vec![false; is_available.len()];
        for &w in missing {
            let group = self.code.local_group(self.code.group_of(w)?)?;
            for member in group.into_iter().filter(|&x| x != w) {
                if !is_available[member] {
                    return None;
                }
                reads[member] = true;
            }
        }
        for (i, read) in reads.iter_mut().enumerate() {
            *read |= is_wanted[i] && is_available[i];
        }
        Some((0..reads.len()).filter(|&i| reads[i]).collect())
    }

    /// LRC: the greedy basis of [`Codec::repair_set`] (available wanted chunks first, then
    /// ascending indices, until rank k), pruned when the survivors have rank below k.
    fn greedy_repair_set(
        &self,
        is_available: &[bool],
        is_wanted: &[bool],
        missing: &[usize],
    ) -> Result<Vec<usize>, CodeError> {
        let (k, n) = (self.code.k(), self.code.n());
        let forced = |i: usize| is_wanted[i] && is_available[i];
        let mut reads: Vec<usize>;
        let full_rank;
        if (k..n).any(forced) {
            // A wanted parity chunk is read anyway: let it stand in for data chunks.
            let mut basis = Basis::new(k, 0);
            reads = (0..n).filter(|&i| forced(i)).collect();
            for &i in &reads {
                basis.insert(self.row(i), 0);
            }
            for i in (0..n).filter(|&i| is_available[i] && !is_wanted[i]) {
                if basis.rank() == k {
                    break;
                }
                if basis.insert(self.row(i), 0) {
                    reads.push(i);
                }
            }
            full_rank = basis.rank() == k;
            reads.sort_unstable();
        } else {
            // Available data chunks are unit rows, always independent; a parity row raises
            // the rank exactly when its restriction to the unread data columns does.
            let unread: Vec<usize> = (0..k).filter(|&j| !is_available[j]).collect();
            reads = (0..k).filter(|&j| is_available[j]).collect();
            let mut basis = Basis::new(unread.len(), 0);
            let mut restricted = Vec::with_capacity(unread.len());
            for i in (k..n).filter(|&i| is_available[i]) {
                if basis.rank() == unread.len() {
                    break;
                }
                let row = self.row(i);
                restricted.clear();
                restricted.extend(unread.iter().map(|&j| row[j]));
                if basis.insert(&restricted, 0) {
                    reads.push(i);
                }
            }
            full_rank = basis.rank() == unread.len();
        }
        if full_rank {
            return Ok(reads);
        }
        // Rank below k: the data is not recoverable, but the wanted chunks may be. Keep the
        // greedy basis only if it spans them, then drop every chunk they do not need.
        let spans_missing = |set: &[usize]| {
            let mut b = Basis::new(k, 0);
            for &i in set {
                b.insert(self.row(i), 0);
            }
            missing.iter().all(|&w| b.contains(self.row(w)))
        };
        if !spans_missing(&reads) {
            return Err(self.unrecoverable(is_available));
        }
        let mut pos = reads.len();
        while pos > 0 {
            pos -= 1;
            let removed = reads.remove(pos);
            if forced(removed) || !spans_missing(&reads) {
                reads.insert(pos, removed);
            }
        }
        Ok(reads)
    }

    /// A calculator that rebuilds `wanted` from exactly the chunks `inputs` (as returned by
    /// `repair_set`, or any set that suffices); cached per (inputs, wanted) in a bounded LRU.
    ///
    /// The calculator's inputs are `inputs` in the order given and its outputs `wanted` in
    /// the order given; it computes only those rows. A wanted chunk that is also an input is
    /// copied (coefficient 1 on it). Otherwise the input rows are taken greedily in the order
    /// given, skipping any that does not raise the rank (those get coefficient 0), and each
    /// wanted row is solved in their span by Gauss-Jordan elimination; a wanted chunk outside
    /// the span is an error ([`CodeError::TooFewChunks`] with fewer than k distinct inputs,
    /// else [`CodeError::Unrecoverable`] naming the chunks not read).
    pub fn decoder(
        &self,
        inputs: &[usize],
        wanted: &[usize],
    ) -> Result<Arc<Calculator>, CodeError> {
        for &i in inputs.iter().chain(wanted) {
            self.check_index(i)?;
        }
        {
            let mut cache = self.lock_decoders();
            cache.set_key(inputs, wanted);
            let DecoderCache { lru, key } = &mut *cache;
            if let Some(found) = lru.get(key) {
                return Ok(found);
            }
        }
        // Built without the lock: other patterns stay served meanwhile.
        let calculator = Arc::new(self.build_decoder(inputs, wanted)?);
        let mut cache = self.lock_decoders();
        cache.set_key(inputs, wanted);
        let DecoderCache { lru, key } = &mut *cache;
        Ok(lru.get_or_insert(key, calculator))
    }

    /// Solves each wanted row over the inputs. Data chunks among the inputs are unit rows, so
    /// only the parity inputs restricted to the unread data columns need elimination: with U
    /// the unread data columns, a wanted row g is `Σ_t c_t · P_t` over the parity inputs P_t
    /// on U, and then each read data chunk a gets `g[a] + Σ_t c_t · P_t[a]`.
    fn build_decoder(&self, inputs: &[usize], wanted: &[usize]) -> Result<Calculator, CodeError> {
        const UNREAD: usize = usize::MAX;
        let k = self.code.k();
        let width = inputs.len();
        // Position of the first input holding each data chunk.
        let mut data_pos = vec![UNREAD; k];
        for (pos, &i) in inputs.iter().enumerate() {
            if i < k && data_pos[i] == UNREAD {
                data_pos[i] = pos;
            }
        }
        let unread: Vec<usize> = (0..k).filter(|&j| data_pos[j] == UNREAD).collect();
        let parity_pos: Vec<usize> = (0..width).filter(|&pos| inputs[pos] >= k).collect();
        let restrict = |row: &[u8], out: &mut Vec<u8>| {
            out.clear();
            out.extend(unread.iter().map(|&j| row[j]));
        };
        // The parity inputs on the unread columns, taken greedily in input order.
        let mut basis = Basis::new(unread.len(), parity_pos.len());
        let mut restricted = Vec::with_capacity(unread.len());
        for (t, &pos) in parity_pos.iter().enumerate() {
            if basis.rank() == unread.len() {
                break;
            }
            restrict(self.row(inputs[pos]), &mut restricted);
            basis.insert(&restricted, t);
        }
        let mut coeffs = vec![0u8; wanted.len() * width];
        for (out, &w) in wanted.iter().enumerate() {
            let row = &mut coeffs[out * width..(out + 1) * width];
            if let Some(pos) = inputs.iter().position(|&i| i == w) {
                row[pos] = 1;
                continue;
            }
            let g = self.row(w);
            restrict(g, &mut restricted);
            let Some(c) = basis.express(&restricted) else {
                let mut read = vec![false; self.code.n()];
                for &i in inputs {
                    read[i] = true;
                }
                return Err(self.unrecoverable(&read));
            };
            for (a, &pos) in data_pos.iter().enumerate() {
                if pos != UNREAD {
                    row[pos] = g[a];
                }
            }
            for (t, &ppos) in parity_pos.iter().enumerate() {
                let ct = c[t];
                if ct == 0 {
                    continue;
                }
                row[ppos] = ct;
                let p = self.row(inputs[ppos]);
                for (a, &pos) in data_pos.iter().enumerate() {
                    if pos != UNREAD {
                        row[pos] ^= gf::field::mul(ct, p[a]);
                    }
                }
            }
        }
        Ok(Calculator::new(
            self.kernel,
            inputs.to_vec(),
            wanted.to_vec(),
            &coeffs,
        ))
    }

    /// Rebuilds `wanted` chunks. `chunks[i]` is `Some` for available chunk i (length n);
    /// computes only the chunks asked for, reading the minimal repair set.
    ///
    /// `outputs[i]` receives chunk `wanted[i]`. Every available chunk and every output must
    /// have the same length.
    pub fn reconstruct(
        &self,
        chunks: &[Option<&[u8]>],
        wanted: &[usize],
        outputs: &mut [&mut [u8]],
    ) -> Result<(), CodeError> {
        let n = self.code.n();
        if chunks.len() != n {
            return Err(CodeError::CountMismatch {
                what: "chunk slots",
                have: chunks.len(),
                expected: n,
            });
        }
        if outputs.len() != wanted.len() {
            return Err(CodeError::CountMismatch {
                what: "output chunks",
                have: outputs.len(),
                expected: wanted.len(),
            });
        }
        let available: Vec<usize> = (0..n).filter(|&i| chunks[i].is_some()).collect();
        let expected = available
            .first()
            .and_then(|&i| chunks[i].map(|c| c.len()))
            .or_else(|| outputs.first().map(|o| o.len()))
            .unwrap_or(0);
        let lengths = available
            .iter()
            .filter_map(|&i| chunks[i].map(|c| (i, c.len())))
            .chain(wanted.iter().copied().zip(outputs.iter().map(|o| o.len())));
        for (index, len) in lengths {
            if len != expected {
                return Err(CodeError::UnequalLengths {
                    index,
                    len,
                    expected,
                });
            }
        }
        let reads = self.repair_set(&available, wanted)?;
        let calculator = self.decoder(&reads, wanted)?;
        let inputs: Vec<&[u8]> = reads
            .iter()
            .map(|&i| chunks[i].expect("repair set reads available chunks"))
            .collect();
        calculator.compute(&inputs, outputs)
    }

    /// Whether the erasure pattern `erased` leaves every chunk recoverable (the survivors have
    /// rank k). An index ≥ n makes the pattern meaningless: false.
    pub fn is_recoverable(&self, erased: &[usize]) -> bool {
        let (k, n) = (self.code.k(), self.code.n());
        let mut lost = vec![false; n];
        for &e in erased {
            if e >= n {
                return false;
            }
            lost[e] = true;
        }
        match self.code {
            Code::Rs { m, .. } => lost.iter().filter(|&&x| x).count() <= m,
            Code::Lrc { .. } => {
                linalg::rank_of(&self.generator, k, (0..n).filter(|&i| !lost[i])) == k
            }
        }
    }
}
