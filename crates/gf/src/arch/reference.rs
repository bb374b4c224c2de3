//! Portable scalar kernels: the oracle every SIMD kernel is tested against.

use crate::field;
use crate::Matrix;

pub(crate) fn xor(src: &[u8], dst: &mut [u8]) {
    for (d, s) in dst.iter_mut().zip(src) {
        *d ^= s;
    }
}

pub(crate) fn mul(c: u8, src: &[u8], dst: &mut [u8], add: bool) {
    // A 256-entry product table makes the loop one lookup per byte.
    let mut table = [0u8; 256];
    for (x, t) in table.iter_mut().enumerate() {
        *t = field::mul(c, x as u8);
    }
    if add {
        for (d, s) in dst.iter_mut().zip(src) {
            *d ^= table[*s as usize];
        }
    } else {
        for (d, s) in dst.iter_mut().zip(src) {
            *d = table[*s as usize];
        }
    }
}

pub(crate) fn dot_prod(m: &Matrix, inputs: &[&[u8]], outputs: &mut [&mut [u8]], add: bool) {
    for (r, out) in outputs.iter_mut().enumerate() {
        if !add {
            out.fill(0);
        }
        for (c, input) in inputs.iter().enumerate() {
            let coeff = m.get(r, c);
            match coeff {
                0 => {}
                1 => xor(input, out),
                _ => mul(coeff, input, out, true),
            }
        }
    }
}
