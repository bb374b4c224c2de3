//! Linear algebra over GF(2^8) for decoding: an incrementally built row basis that remembers
//! how each of its rows combines the rows it was given, so that "is this row in the span?" and
//! "with which coefficients?" are answered by one reduction.

use gf::field;

/// A basis of the span of the rows inserted so far (row echelon form, not fully reduced).
///
/// Invariants: `rows[i][pivots[i]] == 1`; `rows[i]` is zero at `pivots[0..i]`; when tags are
/// tracked, `rows[i] = Σ_t transforms[i][t] · (row inserted with tag t)`. Reducing a vector
/// against the rows in insertion order therefore clears every pivot column.
#[derive(Debug, Clone)]
pub(crate) struct Basis {
    width: usize,
    tag_count: usize,
    rows: Vec<Vec<u8>>,
    pivots: Vec<usize>,
    transforms: Vec<Vec<u8>>,
}

/// `dst ^= c · src`, elementwise.
fn axpy(c: u8, src: &[u8], dst: &mut [u8]) {
    if c == 0 {
        return;
    }
    for (d, &s) in dst.iter_mut().zip(src) {
        *d ^= field::mul(c, s);
    }
}

impl Basis {
    /// An empty basis of rows of `width` coefficients; `tag_count` is the number of distinct
    /// tags rows may be inserted with (0 when combinations are not needed).
    pub(crate) fn new(width: usize, tag_count: usize) -> Basis {
        Basis {
            width,
            tag_count,
            rows: Vec::new(),
            pivots: Vec::new(),
            transforms: Vec::new(),
        }
    }

    pub(crate) fn rank(&self) -> usize {
        self.rows.len()
    }

    /// Drops the rows inserted after the first `rank` (insertion never changes older rows).
    pub(crate) fn truncate(&mut self, rank: usize) {
        self.rows.truncate(rank);
        self.pivots.truncate(rank);
        self.transforms.truncate(rank);
    }

    /// Reduces `v` (and its combination `t`, if tracked) against every basis row.
    fn reduce(&self, v: &mut [u8], mut t: Option<&mut [u8]>) {
        for (i, row) in self.rows.iter().enumerate() {
            let c = v[self.pivots[i]];
            if c != 0 {
                axpy(c, row, v);
                if let Some(t) = t.as_deref_mut() {
                    axpy(c, &self.transforms[i], t);
                }
            }
        }
    }

    /// Adds `row` if it is independent of the basis; returns whether it was. `tag` names the
    /// row in later combinations (must be `< tag_count` when tags are tracked).
    pub(crate) fn insert(&mut self, row: &[u8], tag: usize) -> bool {
        debug_assert_eq!(row.len(), self.width);
        let mut v = row.to_vec();
        let mut t = vec![0u8; self.tag_count];
        if self.tag_count > 0 {
            t[tag] = 1;
        }
        self.reduce(&mut v, Some(&mut t));
        let Some(pivot) = v.iter().position(|&x| x != 0) else {
            return false;
        };
        let scale = field::inv(v[pivot]);
        for x in v.iter_mut().chain(t.iter_mut()) {
            *x = field::mul(scale, *x);
        }
        self.rows.push(v);
        self.pivots.push(pivot);
        self.transforms.push(t);
        true
    }

    /// Whether `row` lies in the span of the basis.
    pub(crate) fn contains(&self, row: &[u8]) -> bool {
        let mut v = row.to_vec();
        self.reduce(&mut v, None);
        v.iter().all(|&x| x == 0)
    }

    /// Coefficients `c` (one per tag) with `row = Σ_t c[t] · (row tagged t)`, or `None` if the
    /// row is outside the span. Rows that were dependent when inserted get coefficient 0.
    pub(crate) fn express(&self, row: &[u8]) -> Option<Vec<u8>> {
        let mut v = row.to_vec();
        let mut c = vec![0u8; self.tag_count];
        self.reduce(&mut v, Some(&mut c));
        v.iter().all(|&x| x == 0).then_some(c)
    }
}

/// Rank of the given rows of a row-major matrix with `width` columns.
pub(crate) fn rank_of(matrix: &[u8], width: usize, rows: impl IntoIterator<Item = usize>) -> usize {
    let mut basis = Basis::new(width, 0);
    for r in rows {
        basis.insert(&matrix[r * width..(r + 1) * width], 0);
        if basis.rank() == width {
            break;
        }
    }
    basis.rank()
}

/// The inverse of a square matrix by Gauss-Jordan elimination, or `None` if it is singular.
pub fn invert(matrix: &[u8], size: usize) -> Option<Vec<u8>> {
    assert_eq!(
        matrix.len(),
        size * size,
        "invert: not a {size}x{size} matrix"
    );
    let mut a = matrix.to_vec();
    let mut b = vec![0u8; size * size];
    for i in 0..size {
        b[i * size + i] = 1;
    }
    for col in 0..size {
        let pivot = (col..size).find(|&r| a[r * size + col] != 0)?;
        if pivot != col {
            for j in 0..size {
                a.swap(pivot * size + j, col * size + j);
                b.swap(pivot * size + j, col * size + j);
            }
        }
        let scale = field::inv(a[col * size + col]);
        for j in 0..size {
            a[col * size + j] = field::mul(scale, a[col * size + j]);
            b[col * size + j] = field::mul(scale, b[col * size + j]);
        }
        for r in 0..size {
            let c = a[r * size + col];
            if r == col || c == 0 {
                continue;
            }
            for j in 0..size {
                a[r * size + j] ^= field::mul(c, a[col * size + j]);
                b[r * size + j] ^= field::mul(c, b[col * size + j]);
            }
        }
    }
    Some(b)
}

/// The product of a row-major `rows × inner` matrix and an `inner × cols` matrix.
pub fn multiply(a: &[u8], b: &[u8], rows: usize, inner: usize, cols: usize) -> Vec<u8> {
    assert_eq!(a.len(), rows * inner, "multiply: left operand shape");
    assert_eq!(b.len(), inner * cols, "multiply: right operand shape");
    let mut out = vec![0u8; rows * cols];
    for r in 0..rows {
        for t in 0..inner {
            axpy(
                a[r * inner + t],
                &b[t * cols..(t + 1) * cols],
                &mut out[r * cols..(r + 1) * cols],
            );
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn invert_round_trips_and_detects_singular() {
        // A 3x3 Cauchy-like matrix is invertible.
        let m: Vec<u8> = (0..9u8)
            .map(|x| field::inv((x / 3) ^ (x % 3 + 3)))
            .collect();
        let inv = invert(&m, 3).expect("invertible");
        let id = multiply(&m, &inv, 3, 3, 3);
        assert_eq!(id, vec![1, 0, 0, 0, 1, 0, 0, 0, 1]);
        // Two equal rows: singular.
        assert_eq!(invert(&[1, 2, 1, 2], 2), None);
        assert_eq!(invert(&[0, 0, 0, 0], 2), None);
    }

    #[test]
    fn basis_expresses_rows_it_spans() {
        let rows: [[u8; 3]; 4] = [[1, 0, 0], [1, 1, 0], [0, 1, 0], [5, 7, 9]];
        let mut b = Basis::new(3, 4);
        assert!(b.insert(&rows[0], 0));
        assert!(b.insert(&rows[1], 1));
        assert!(!b.insert(&rows[2], 2), "row 2 = row 0 + row 1");
        assert_eq!(b.rank(), 2);
        assert!(!b.contains(&rows[3]));
        assert_eq!(b.express(&rows[3]), None);
        let c = b.express(&[3, 4, 0]).unwrap();
        assert_eq!(c[2], 0, "dependent rows get no weight");
        let mut sum = [0u8; 3];
        for (t, row) in rows.iter().enumerate() {
            axpy(c[t], row, &mut sum);
        }
        assert_eq!(sum, [3, 4, 0]);
        b.truncate(1);
        assert_eq!(b.rank(), 1);
        assert!(b.insert(&rows[2], 2));
    }
}
