//! Drives the logic of the fuzz target `wire_header` with seeded random inputs, so it runs on
//! stable in every test run: random bytes, and valid headers with a few bytes changed.

use engine::wire::{check_header_bytes, Header, Kind, HEADER_BYTES, MAX_PAYLOAD_BYTES};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

#[test]
fn frame_headers_from_seeded_random_bytes() {
    let mut rng = SmallRng::seed_from_u64(0x1e_c0de);
    let kinds = [Kind::Hello, Kind::Data, Kind::Abort, Kind::Control];
    let (mut accepted, mut refused) = (0, 0);
    for i in 0..20_000 {
        let mut b: Vec<u8> = if i % 4 == 0 {
            (0..rng.gen_range(0..40)).map(|_| rng.gen()).collect()
        } else {
            let len = match rng.gen_range(0..4) {
                0 => 0,
                1 => rng.gen_range(0..=MAX_PAYLOAD_BYTES),
                2 => MAX_PAYLOAD_BYTES,
                _ => rng.gen_range(0..4096),
            };
            let h = Header::new(
                kinds[rng.gen_range(0..4)],
                rng.gen(),
                rng.gen(),
                rng.gen(),
                len,
            )
            .unwrap();
            let mut v = h.encode().to_vec();
            // Change up to three bytes (magic, version, kind and length included).
            for _ in 0..rng.gen_range(0..4) {
                let at = rng.gen_range(0..HEADER_BYTES);
                v[at] = rng.gen();
            }
            v
        };
        if i % 7 == 0 {
            b.extend_from_slice(b"trailing payload bytes");
        }
        match check_header_bytes(&b) {
            None => assert!(b.len() < HEADER_BYTES),
            Some(Ok(_)) => accepted += 1,
            Some(Err(_)) => refused += 1,
        }
    }
    // Both outcomes are exercised.
    assert!(accepted > 5_000 && refused > 3_000, "{accepted} {refused}");
}
