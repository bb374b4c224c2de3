//! Property tests (proptest, fixed seed): random data, a random erasure pattern, every kernel.
//! A pattern the code recovers is rebuilt exactly; any other is refused with a typed error.

use codes::{Code, CodeError, Codec, Kernel};
use proptest::prelude::*;
use proptest::test_runner::{Config, RngSeed};
use rand::rngs::SmallRng;
use rand::seq::SliceRandom;
use rand::{RngCore, SeedableRng};

const CODES: [&str; 9] = [
    "rs:1,1",
    "rs:3,2",
    "rs:6,3",
    "rs:10,4",
    "rs-vand:10,4",
    "rs:20,8",
    "lrc:6,2,2",
    "lrc:12,2,2",
    "lrc:12,3,2",
];

fn config() -> Config {
    Config {
        cases: 256,
        rng_seed: RngSeed::Fixed(0x1ec0_de5e),
        failure_persistence: None,
        ..Config::default()
    }
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn recoverable_patterns_rebuild_the_data(
        code_index in 0..CODES.len(),
        kernel_index in 0usize..8,
        chunk_bytes in 0usize..200,
        extra_losses in 0usize..=2,
        seed in any::<u64>(),
    ) {
        let code: Code = CODES[code_index].parse().unwrap();
        let kernels = Kernel::available();
        let kernel = kernels[kernel_index % kernels.len()];
        let codec = Codec::with_kernel(code, kernel);
        let (k, n) = (code.k(), code.n());
        let mut rng = SmallRng::seed_from_u64(seed);

        let mut chunks = vec![vec![0u8; chunk_bytes]; n];
        for c in &mut chunks[..k] {
            rng.fill_bytes(c);
        }
        {
            let (data, parity) = chunks.split_at_mut(k);
            let data: Vec<&[u8]> = data.iter().map(|d| d.as_slice()).collect();
            let mut parity: Vec<&mut [u8]> = parity.iter_mut().map(|p| p.as_mut_slice()).collect();
            codec.encode(&data, &mut parity).unwrap();
        }

        // Up to the parity count plus a few more: both sides of the boundary.
        let mut order: Vec<usize> = (0..n).collect();
        order.shuffle(&mut rng);
        let lost = (order.len()).min(1 + (seed as usize % code.parity_count().max(1)) + extra_losses);
        let mut erased = order[..lost].to_vec();
        erased.sort_unstable();

        let view: Vec<Option<&[u8]>> = (0..n)
            .map(|i| (!erased.contains(&i)).then_some(chunks[i].as_slice()))
            .collect();
        let mut out = vec![vec![0u8; chunk_bytes]; erased.len()];
        let mut outs: Vec<&mut [u8]> = out.iter_mut().map(|o| o.as_mut_slice()).collect();
        let result = codec.reconstruct(&view, &erased, &mut outs);
        if codec.is_recoverable(&erased) {
            prop_assert!(result.is_ok(), "{code} {erased:?}: {result:?}");
            for (o, &e) in out.iter().zip(&erased) {
                prop_assert_eq!(o, &chunks[e], "{} {:?}: chunk {}", code, &erased, e);
            }
        } else {
            prop_assert!(
                matches!(
                    result,
                    Err(CodeError::Unrecoverable { .. } | CodeError::TooFewChunks { .. })
                ),
                "{code} {erased:?}: {result:?}"
            );
        }
    }
}
