//! klauspost/reedsolomon v1.14 with `WithCauchyMatrix` (our Go peer program) computes the same
//! parity bytes as our Cauchy code, and with `WithCustomMatrix` those of our `rs-xor` code.
//! Needs `go`; without it a test skips, saying so (`harness::skip`), or fails under CI.

use bench::codec::{data, klauspost};
use codes::{Code, Codec, MatrixKind};

fn our_parity<D: AsRef<[u8]>>(k: usize, m: usize, data: &[D]) -> Vec<Vec<u8>> {
    code_parity(Code::rs(k, m).unwrap(), data)
}

fn code_parity<D: AsRef<[u8]>>(code: Code, data: &[D]) -> Vec<Vec<u8>> {
    let m = code.parity_count();
    let codec = Codec::new(code);
    let len = data[0].as_ref().len();
    let mut parity = vec![vec![0u8; len]; m];
    let ins: Vec<&[u8]> = data.iter().map(|d| d.as_ref()).collect();
    let mut outs: Vec<&mut [u8]> = parity.iter_mut().map(|p| &mut p[..]).collect();
    codec.encode(&ins, &mut outs).unwrap();
    parity
}

#[test]
fn klauspost_cauchy_parity_equals_ours() {
    if !bench::peers::go_available("go") {
        harness::skip::skip_or_fail("`go` on the PATH", bench::peers::GO_PACKAGE);
        return;
    }
    let bin = klauspost::build("go").expect("build the Go peer");
    let mut peer = klauspost::Peer::start(&bin).expect("start the Go peer");
    assert_eq!(peer.version().unwrap(), "v1.14.2");
    let seed = 99;
    for (k, m) in [
        (1, 1),
        (3, 2),
        (4, 3),
        (6, 3),
        (10, 4),
        (12, 4),
        (17, 3),
        (32, 8),
        (100, 20),
    ] {
        for len in [1, 13, 64, 1000, 4096 + 3] {
            let d: Vec<Vec<u8>> = (0..k)
                .map(|j| {
                    let mut c = vec![0u8; len];
                    // Set 0 of the peer's seeded stream.
                    data::fill(seed, 0, j as u64, &mut c);
                    c
                })
                .collect();
            let theirs = peer.parity(k, m, len, seed, "random", None).unwrap();
            assert_eq!(theirs, our_parity(k, m, &d), "rs({k},{m}) len {len}");
        }
    }
    // The fixed vector of `crates/codes/testdata/README.md`: byte b of data chunk j =
    // 31·j + 7·b + 1.
    let theirs = peer.parity(4, 3, 16, 0, "pattern", None).unwrap();
    let d: Vec<Vec<u8>> = (0..4)
        .map(|j| (0..16).map(|b| (31 * j + 7 * b + 1) as u8).collect())
        .collect();
    assert_eq!(theirs, our_parity(4, 3, &d));
}

#[test]
fn klauspost_peer_verifies_decodes_and_reports_parity_checksums() {
    if !bench::peers::go_available("go") {
        harness::skip::skip_or_fail("`go` on the PATH", bench::peers::GO_PACKAGE);
        return;
    }
    let bin = klauspost::build("go").expect("build the Go peer");
    let mut peer = klauspost::Peer::start(&bin).expect("start the Go peer");
    let (k, m, len, sets, seed) = (6, 3, 4096, 3, 7);
    for op in ["encode", "decode1", "decodem"] {
        for pattern in ["fresh", "cached"] {
            for threads in [1, 2] {
                let (id, reply) = peer
                    .prepare(k, m, len, sets, seed, op, pattern, threads, None)
                    .unwrap();
                assert!(reply.verified);
                let st = data::Stripes::new(seed, k, k + m, len, 1);
                let p = our_parity(k, m, &st.sets[0][..k]);
                let want: Vec<u32> = p.iter().map(|c| crc32c::crc32c(c)).collect();
                assert_eq!(reply.parity_crc32c, want, "{op} {pattern} {threads}");
                assert!(peer.run(id, 3).is_ok());
                peer.drop_bench(id).unwrap();
            }
        }
    }
}

/// The peer's `parity_matrix` (`WithCustomMatrix`) with our `rs-xor` rows gives our `rs-xor`
/// parity, and its prepared benchmarks of that code verify.
#[test]
fn klauspost_custom_matrix_parity_equals_ours() {
    if !bench::peers::go_available("go") {
        harness::skip::skip_or_fail("`go` on the PATH", bench::peers::GO_PACKAGE);
        return;
    }
    let bin = klauspost::build("go").expect("build the Go peer");
    let mut peer = klauspost::Peer::start(&bin).expect("start the Go peer");
    let seed = 5;
    for (k, m) in [(4, 3), (6, 3), (10, 4), (12, 4)] {
        let code = Code::rs_with(k, m, MatrixKind::CauchyXor).unwrap();
        let g = code.generator();
        let rows: Vec<Vec<u8>> = g[k * k..].chunks(k).map(|r| r.to_vec()).collect();
        for len in [1, 64, 4096 + 3] {
            let d: Vec<Vec<u8>> = (0..k)
                .map(|j| {
                    let mut c = vec![0u8; len];
                    data::fill(seed, 0, j as u64, &mut c);
                    c
                })
                .collect();
            let theirs = peer.parity(k, m, len, seed, "random", Some(&rows)).unwrap();
            assert_eq!(theirs, code_parity(code, &d), "{code} len {len}");
        }
        for op in ["encode", "decode1", "decodem"] {
            let (id, reply) = peer
                .prepare(k, m, 4096, 2, seed, op, "fresh", 1, Some(&rows))
                .unwrap();
            assert!(reply.verified, "{code} {op}");
            let st = data::Stripes::new(seed, k, k + m, 4096, 1);
            let want: Vec<u32> = code_parity(code, &st.sets[0][..k])
                .iter()
                .map(|c| crc32c::crc32c(c))
                .collect();
            assert_eq!(reply.parity_crc32c, want, "{code} {op}");
            peer.drop_bench(id).unwrap();
        }
    }
    // A matrix of the wrong shape is refused with a message.
    let err = peer
        .parity(4, 3, 16, 0, "random", Some(&[vec![1u8; 4]]))
        .unwrap_err();
    assert!(
        format!("{err:#}").contains("parity_matrix has 1 rows"),
        "{err:#}"
    );
}
