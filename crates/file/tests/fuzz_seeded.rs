//! Drives the logic of the fuzz target `chunk_header` with seeded random inputs, so it runs on
//! stable in every test run: valid headers of random codes and sizes, mutated a byte or a few
//! at a time, cut short, or followed by a record; and plain random bytes.

use codes::Code;
use file::chunk_file::{stripe_crc32c, ChunkHeader};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

fn random_header(rng: &mut SmallRng) -> ChunkHeader {
    let code = match rng.gen_range(0..3) {
        0 => Code::rs(rng.gen_range(1..20), rng.gen_range(1..6)).unwrap(),
        1 => Code::rs_with(
            rng.gen_range(1..8),
            rng.gen_range(1..4),
            codes::MatrixKind::Vandermonde,
        )
        .unwrap(),
        _ => {
            let l = rng.gen_range(1..4);
            Code::lrc(l * rng.gen_range(1..5), l, rng.gen_range(0..3)).unwrap()
        }
    };
    let chunk_bytes = [1usize, 3, 64, 4096, 1 << 20, 1 << 30][rng.gen_range(0..6)];
    let file_bytes = [0u64, 1, 100, 1 << 20, 1 << 40, 1 << 60][rng.gen_range(0..6)];
    ChunkHeader::new(
        code,
        rng.gen_range(0..code.n()),
        chunk_bytes,
        file_bytes,
        rng.gen(),
    )
    .unwrap()
}

#[test]
fn chunk_header_arbitrary_seeded() {
    let mut rng = SmallRng::seed_from_u64(0x00C4_0A4D);
    let mut accepted = 0;
    for round in 0..5_000 {
        let h = random_header(&mut rng);
        let mut bytes = h.to_bytes().to_vec();
        // A record of stripe 0, right or wrong.
        let c = h.layout().stripe_chunk_bytes(0).min(256);
        let payload: Vec<u8> = (0..c).map(|_| rng.gen()).collect();
        let mut crc = stripe_crc32c(h.chunk_index, 0, &payload);
        if rng.gen_bool(0.3) {
            crc ^= 1 << rng.gen_range(0..32);
        }
        bytes.extend_from_slice(&payload);
        bytes.extend_from_slice(&crc.to_le_bytes());
        match round % 4 {
            0 => {}
            1 => {
                let i = rng.gen_range(0..64);
                bytes[i] ^= 1 << rng.gen_range(0..8);
            }
            2 => {
                for _ in 0..rng.gen_range(1..6) {
                    let i = rng.gen_range(0..bytes.len());
                    bytes[i] = rng.gen();
                }
            }
            _ => {
                let cut = rng.gen_range(0..bytes.len());
                bytes.truncate(cut);
            }
        }
        accepted += file::check::chunk_header_arbitrary(&bytes);
        let noise: Vec<u8> = (0..rng.gen_range(0..100)).map(|_| rng.gen()).collect();
        accepted += file::check::chunk_header_arbitrary(&noise);
    }
    // Valid headers (a quarter unchanged, most of the rest resealed) reach the deep checks.
    assert!(accepted > 2_500, "only {accepted} headers accepted");
}
