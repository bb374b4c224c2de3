//! A coefficient matrix with the per-kernel tables prepared once.

use crate::{arch, field};

/// A `rows × cols` matrix over GF(2^8), row-major. The multiplication tables of every
/// coefficient (32 bytes of nibble tables, an 8-byte affine matrix) come from static tables,
/// so preparing a matrix costs no table building. Each SIMD kernel also keeps
/// here, on its first use of the matrix, how it splits the matrix into register-sized blocks
/// with their coefficients laid out in the order it reads them: build a `Matrix` once per
/// code or erasure pattern and reuse it.
#[derive(Clone)]
pub struct Matrix {
    rows: usize,
    cols: usize,
    coeffs: Vec<u8>,
    /// Per-kernel blockings, derived from the fields above (so not part of equality).
    #[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
    blockings: arch::Blockings,
}

impl PartialEq for Matrix {
    fn eq(&self, other: &Matrix) -> bool {
        (self.rows, self.cols, &self.coeffs) == (other.rows, other.cols, &other.coeffs)
    }
}

impl Eq for Matrix {}

impl std::fmt::Debug for Matrix {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        writeln!(f, "Matrix {}x{} [", self.rows, self.cols)?;
        for r in 0..self.rows {
            writeln!(f, "  {:02x?}", self.row(r))?;
        }
        write!(f, "]")
    }
}

impl Matrix {
    /// Prepares the matrix. Panics if `coeffs.len() != rows * cols`.
    pub fn new(rows: usize, cols: usize, coeffs: &[u8]) -> Matrix {
        assert_eq!(
            coeffs.len(),
            rows * cols,
            "matrix: {rows}x{cols} needs {} coefficients",
            rows * cols
        );
        Matrix {
            rows,
            cols,
            coeffs: coeffs.to_vec(),
            blockings: arch::Blockings::default(),
        }
    }

    pub fn rows(&self) -> usize {
        self.rows
    }

    pub fn cols(&self) -> usize {
        self.cols
    }

    /// Coefficient (row, col).
    pub fn get(&self, row: usize, col: usize) -> u8 {
        self.coeffs[row * self.cols + col]
    }

    /// One row of coefficients.
    pub fn row(&self, row: usize) -> &[u8] {
        &self.coeffs[row * self.cols..(row + 1) * self.cols]
    }

    /// All coefficients, row-major.
    pub fn coeffs(&self) -> &[u8] {
        &self.coeffs
    }

    /// Nibble tables of coefficient (row, col).
    pub fn nibble_tables(&self, row: usize, col: usize) -> &'static [u8; 32] {
        field::nibble_tables_static(self.get(row, col))
    }

    #[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
    pub(crate) fn blockings(&self) -> &arch::Blockings {
        &self.blockings
    }

    /// Affine bit matrix of coefficient (row, col).
    pub fn affine(&self, row: usize, col: usize) -> u64 {
        field::affine_matrix(self.get(row, col))
    }
}
