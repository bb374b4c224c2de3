//! Scalar arithmetic in GF(2^8) with the polynomial x^8 + x^4 + x^3 + x^2 + 1 (0x11D) and
//! generator 2 — the field of ISA-L, klauspost/reedsolomon and Jerasure (w = 8).

/// The reduction polynomial, with the x^8 bit.
pub const POLY: u16 = 0x11D;

const fn build_exp() -> [u8; 512] {
    let mut t = [0u8; 512];
    let mut x: u16 = 1;
    let mut i = 0;
    while i < 255 {
        t[i] = x as u8;
        t[i + 255] = x as u8;
        x <<= 1;
        if x & 0x100 != 0 {
            x ^= POLY;
        }
        i += 1;
    }
    // Indices 510 and 511 are never reached by `mul` (log a + log b ≤ 508) but keep the table
    // total.
    t[510] = t[0];
    t[511] = t[1];
    t
}

const fn build_log(exp: &[u8; 512]) -> [u8; 256] {
    let mut t = [0u8; 256];
    let mut i = 0;
    while i < 255 {
        t[exp[i] as usize] = i as u8;
        i += 1;
    }
    t
}

/// `EXP[i] = 2^i`, doubled so that `EXP[log a + log b]` needs no reduction mod 255.
pub static EXP: [u8; 512] = build_exp();
/// `LOG[a]` for a ≠ 0; `LOG[0]` is meaningless (0).
pub static LOG: [u8; 256] = build_log(&build_exp());

/// a · b.
#[inline]
pub fn mul(a: u8, b: u8) -> u8 {
    if a == 0 || b == 0 {
        0
    } else {
        EXP[LOG[a as usize] as usize + LOG[b as usize] as usize]
    }
}

/// The multiplicative inverse of a. Panics for a = 0, which has none.
#[inline]
pub fn inv(a: u8) -> u8 {
    assert!(a != 0, "zero has no inverse in GF(2^8)");
    EXP[255 - LOG[a as usize] as usize]
}

/// a / b. Panics for b = 0.
#[inline]
pub fn div(a: u8, b: u8) -> u8 {
    assert!(b != 0, "division by zero in GF(2^8)");
    if a == 0 {
        0
    } else {
        EXP[LOG[a as usize] as usize + 255 - LOG[b as usize] as usize]
    }
}

/// a^e (with 0^0 = 1).
pub fn pow(a: u8, e: u32) -> u8 {
    if e == 0 {
        return 1;
    }
    if a == 0 {
        return 0;
    }
    let l = (LOG[a as usize] as u64 * e as u64) % 255;
    EXP[l as usize]
}

/// 2^e, the generator to the power e.
#[inline]
pub fn exp2(e: u32) -> u8 {
    EXP[(e % 255) as usize]
}

/// Carry-less "Russian peasant" multiplication, independent of the tables: the oracle the
/// tables are tested against.
pub const fn mul_slow(mut a: u8, mut b: u8) -> u8 {
    let mut p = 0u8;
    while b != 0 {
        if b & 1 != 0 {
            p ^= a;
        }
        let carry = a & 0x80 != 0;
        a <<= 1;
        if carry {
            a ^= (POLY & 0xFF) as u8;
        }
        b >>= 1;
    }
    p
}

/// The 8×8 bit matrix of "multiply by c", packed as `vgf2p8affineqb` expects: byte 7−i of the
/// result holds row i, and bit j of row i is bit i of c·2^j. A table lookup: preparing a
/// matrix for the GFNI kernel costs nothing per coefficient.
#[inline]
pub fn affine_matrix(c: u8) -> u64 {
    AFFINE[c as usize]
}

/// The two 16-entry nibble tables of "multiply by c": `lo[x] = c·x`, `hi[x] = c·(x << 4)`.
/// A table lookup, like [`affine_matrix`].
#[inline]
pub fn nibble_tables(c: u8) -> [u8; 32] {
    NIBBLES[c as usize]
}

/// The nibble tables of c, in place in the static table.
#[inline]
pub(crate) fn nibble_tables_static(c: u8) -> &'static [u8; 32] {
    &NIBBLES[c as usize]
}

/// `AFFINE[c]`: the affine bit matrix of c, built at compile time.
static AFFINE: [u64; 256] = build_affine();
/// `NIBBLES[c]`: the nibble tables of c, built at compile time.
static NIBBLES: [[u8; 32]; 256] = build_nibbles();

const fn build_affine() -> [u64; 256] {
    let mut t = [0u64; 256];
    let mut c = 0;
    while c < 256 {
        // Column j of the matrix is c·2^j; eight products, then a bit transpose.
        let mut m = 0u64;
        let mut i = 0;
        while i < 8 {
            let mut row = 0u8;
            let mut j = 0;
            while j < 8 {
                row |= ((mul_slow(c as u8, 1 << j) >> i) & 1) << j;
                j += 1;
            }
            m |= (row as u64) << (8 * (7 - i));
            i += 1;
        }
        t[c] = m;
        c += 1;
    }
    t
}

const fn build_nibbles() -> [[u8; 32]; 256] {
    let mut t = [[0u8; 32]; 256];
    let mut c = 0;
    while c < 256 {
        let mut x = 0;
        while x < 16 {
            t[c][x] = mul_slow(c as u8, x as u8);
            t[c][16 + x] = mul_slow(c as u8, (x as u8) << 4);
            x += 1;
        }
        c += 1;
    }
    t
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tables_match_carryless_multiplication() {
        for a in 0..=255u8 {
            for b in 0..=255u8 {
                assert_eq!(mul(a, b), mul_slow(a, b), "{a}·{b}");
            }
        }
    }

    #[test]
    fn inverse_and_division() {
        for a in 1..=255u8 {
            assert_eq!(mul(a, inv(a)), 1, "a = {a}");
            for b in 1..=255u8 {
                assert_eq!(mul(div(a, b), b), a);
            }
        }
    }

    #[test]
    fn generator_two_has_order_255() {
        let mut seen = [false; 256];
        for e in 0..255 {
            let v = exp2(e);
            assert!(!seen[v as usize], "2^{e} repeats");
            seen[v as usize] = true;
        }
        assert_eq!(pow(2, 255), 1);
        assert_eq!(pow(3, 0), 1);
        assert_eq!(pow(0, 5), 0);
        assert_eq!(pow(7, 3), mul(7, mul(7, 7)));
    }

    #[test]
    fn nibble_tables_compose_a_product() {
        for c in 0..=255u8 {
            let t = nibble_tables(c);
            for x in 0..=255u8 {
                assert_eq!(t[(x & 15) as usize] ^ t[16 + (x >> 4) as usize], mul(c, x));
            }
        }
    }

    #[test]
    fn affine_matrix_applies_multiplication() {
        // Apply the packed matrix as the instruction does: bit i of the result is the parity
        // of (row i & x), with row i in byte 7 − i.
        for c in 0..=255u8 {
            let m = affine_matrix(c);
            for x in 0..=255u8 {
                let mut r = 0u8;
                for i in 0..8 {
                    let row = (m >> (8 * (7 - i))) as u8;
                    if (row & x).count_ones() % 2 == 1 {
                        r |= 1 << i;
                    }
                }
                assert_eq!(r, mul(c, x), "c={c} x={x}");
            }
        }
    }
}
