//! Drives the logic of the fuzz target `memcache_text` with seeded random inputs, so it runs on
//! stable in every test run.

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

/// Fragments that make random inputs reach deep into the parser.
const PIECES: &[&[u8]] = &[
    b"set ",
    b"add ",
    b"replace ",
    b"append ",
    b"prepend ",
    b"cas ",
    b"get ",
    b"gets ",
    b"gat ",
    b"gats ",
    b"touch ",
    b"delete ",
    b"incr ",
    b"decr ",
    b"flush_all",
    b"stats",
    b"version",
    b"verbosity ",
    b"quit",
    b"mg ",
    b"ms ",
    b"md ",
    b"mn",
    b"noreply",
    b" ",
    b"  ",
    b"\r\n",
    b"\n",
    b"\r",
    b"0",
    b"1",
    b"5",
    b"-1",
    b"64",
    b"65",
    b"18446744073709551615",
    b"k",
    b"key",
    b"a2V5",
    b"v",
    b"k",
    b"b",
    b"q",
    b"O1",
    b"T10",
    b"F3",
    b"C9",
    b"MA",
    b"MX",
    b"I",
    b"c",
    b"s",
    b"f",
    b"t",
    b"\x00",
    b"\x7f",
    b"\t",
    b"hello",
];

fn random_input(rng: &mut SmallRng) -> Vec<u8> {
    let mut v = Vec::new();
    let pieces = rng.gen_range(0..40);
    for _ in 0..pieces {
        if rng.gen_bool(0.1) {
            let n = rng.gen_range(0..120);
            v.extend((0..n).map(|_| rng.gen::<u8>()));
        } else {
            v.extend_from_slice(PIECES[rng.gen_range(0..PIECES.len())]);
        }
    }
    v
}

#[test]
fn parse_arbitrary_seeded() {
    let mut rng = SmallRng::seed_from_u64(0x6d63_7465_7874);
    for _ in 0..20_000 {
        let input = random_input(&mut rng);
        proto::check::parse_arbitrary(&input);
    }
}
