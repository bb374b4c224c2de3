//! Fixed vectors that pin the generator matrices to ISA-L's.
//!
//! Data chunk j, byte b = (31·j + 7·b + 1) mod 256, 16-byte chunks. The expected parity was
//! computed with ISA-L's `gf_gen_cauchy1_matrix` / `gf_gen_rs_matrix` + `ec_encode_data`
//! (checked against the real ISA-L in `crates/bench/tests/isal_compat.rs`) and recomputed
//! independently by `testdata/fixed_vectors.py`; `testdata/README.md` says how.

use codes::{Code, Codec, Kernel, MatrixKind};

fn data(k: usize) -> Vec<Vec<u8>> {
    (0..k)
        .map(|j| {
            (0..16)
                .map(|b| ((31 * j + 7 * b + 1) % 256) as u8)
                .collect()
        })
        .collect()
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn parity(code: Code, kernel: Kernel) -> Vec<String> {
    let codec = Codec::with_kernel(code, kernel);
    let data = data(code.k());
    let refs: Vec<&[u8]> = data.iter().map(|d| d.as_slice()).collect();
    let mut parity = vec![vec![0u8; 16]; code.parity_count()];
    let mut outs: Vec<&mut [u8]> = parity.iter_mut().map(|p| p.as_mut_slice()).collect();
    codec.encode(&refs, &mut outs).unwrap();
    parity.iter().map(|p| hex(p)).collect()
}

#[test]
fn cauchy_k4_m3_matches_isal() {
    for kernel in Kernel::available() {
        let p = parity(Code::rs(4, 3).unwrap(), kernel);
        assert_eq!(p[0], "56f4b05fed4e08311bf7d1048c2d4f23", "{kernel:?}");
        assert_eq!(p[1], "4814e46cb98120ac333e8537d89eaaef", "{kernel:?}");
        assert_eq!(p[2], "d65d1883c53486ee0887b41569bc0cfc", "{kernel:?}");
    }
}

#[test]
fn vandermonde_k10_m4_matches_isal() {
    for kernel in Kernel::available() {
        let p = parity(
            Code::rs_with(10, 4, MatrixKind::Vandermonde).unwrap(),
            kernel,
        );
        assert_eq!(p[0], "2117213b219f617b6117612b212fa1eb", "{kernel:?}");
        assert_eq!(p[1], "aac240e6b5474203993fdd1533f32fd8", "{kernel:?}");
        assert_eq!(p[2], "8aac68f9175c77a20cb30b3943619dd7", "{kernel:?}");
        assert_eq!(p[3], "68d2a72d1728d96a64074d4dd9f631f5", "{kernel:?}");
    }
}

#[test]
fn generator_entries_follow_isal_definitions() {
    use gf::field::{exp2, inv};
    let g = Code::rs(4, 3).unwrap().generator();
    assert_eq!(&g[..16], &[1, 0, 0, 0, 0, 1, 0, 0, 0, 0, 1, 0, 0, 0, 0, 1]);
    for i in 4..7 {
        for j in 0..4 {
            assert_eq!(g[i * 4 + j], inv((i ^ j) as u8));
        }
    }
    let v = Code::rs_with(10, 4, MatrixKind::Vandermonde)
        .unwrap()
        .generator();
    for r in 0..4 {
        for j in 0..10 {
            assert_eq!(v[(10 + r) * 10 + j], exp2((r * j) as u32));
        }
    }
    // The first parity row of gf_gen_rs_matrix is all ones.
    assert!(v[100..110].iter().all(|&x| x == 1));
}

#[test]
fn lrc_generator_follows_design() {
    use gf::field::{exp2, pow};
    let code = Code::lrc(6, 2, 2).unwrap();
    let g = code.generator();
    assert_eq!(g.len(), 10 * 6);
    assert_eq!(&g[36..42], &[1, 1, 1, 0, 0, 0]);
    assert_eq!(&g[42..48], &[0, 0, 0, 1, 1, 1]);
    for t in 0..2 {
        for j in 0..6 {
            let alpha = exp2(j as u32 + 1);
            assert_eq!(g[(8 + t) * 6 + j], pow(alpha, t as u32 + 1));
        }
    }
}

/// `rs-xor`: parity (i, j) = (k XOR j) / ((k + i) XOR j) (ISA-L's Cauchy entry with column j
/// scaled by the inverse of its first parity entry), so the first parity is the XOR of the
/// data; every kernel computes it so.
#[test]
fn cauchy_xor_parity_follows_its_definition() {
    use gf::field::{div, mul};
    for (k, m) in [(4, 3), (6, 3), (10, 4), (12, 4)] {
        let code = Code::rs_with(k, m, MatrixKind::CauchyXor).unwrap();
        let data = data(k);
        let xor: Vec<u8> = (0..16)
            .map(|b| data.iter().fold(0, |s, d| s ^ d[b]))
            .collect();
        let want: Vec<String> = (0..m)
            .map(|i| {
                let p: Vec<u8> = (0..16)
                    .map(|b| {
                        (0..k).fold(0, |s, j| {
                            s ^ mul(div((k ^ j) as u8, ((k + i) ^ j) as u8), data[j][b])
                        })
                    })
                    .collect();
                hex(&p)
            })
            .collect();
        assert_eq!(want[0], hex(&xor));
        for kernel in Kernel::available() {
            assert_eq!(parity(code, kernel), want, "{code} {kernel:?}");
        }
    }
}
