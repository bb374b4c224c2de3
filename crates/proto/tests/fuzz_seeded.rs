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

/// A command that is often well formed: a command word, then tokens.
fn random_command(rng: &mut SmallRng, v: &mut Vec<u8>) {
    const WORDS: &[&str] = &[
        "set",
        "add",
        "cas",
        "append",
        "get",
        "gets",
        "gat",
        "touch",
        "delete",
        "incr",
        "decr",
        "flush_all",
        "stats",
        "verbosity",
        "mg",
        "ms",
        "md",
        "mn",
        "version",
    ];
    let word = WORDS[rng.gen_range(0..WORDS.len())];
    v.extend_from_slice(word.as_bytes());
    let data_bytes = rng.gen_range(0..70usize);
    let tokens = rng.gen_range(0..6);
    for i in 0..tokens {
        v.push(b' ');
        match (word, i, rng.gen_range(0..4)) {
            ("set" | "add" | "cas" | "append", 3, _) | ("ms", 1, _) => {
                v.extend_from_slice(data_bytes.to_string().as_bytes())
            }
            (_, 0, _) => v.extend_from_slice(format!("k{}", rng.gen_range(0..5)).as_bytes()),
            (_, _, 0) => v.extend_from_slice(rng.gen_range(0..100u32).to_string().as_bytes()),
            (_, _, 1) => v.extend_from_slice(b"noreply"),
            _ => v.extend_from_slice(PIECES[rng.gen_range(0..PIECES.len())].trim_ascii()),
        }
    }
    v.extend_from_slice(b"\r\n");
    if rng.gen_bool(0.5) {
        v.extend((0..data_bytes).map(|_| rng.gen_range(b'a'..=b'z')));
        v.extend_from_slice(b"\r\n");
    }
}

fn random_input(rng: &mut SmallRng) -> Vec<u8> {
    let mut v = Vec::new();
    let pieces = rng.gen_range(0..40);
    for _ in 0..pieces {
        if rng.gen_bool(0.3) {
            random_command(rng, &mut v);
        } else if rng.gen_bool(0.1) {
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
    let mut commands = 0;
    for _ in 0..20_000 {
        let input = random_input(&mut rng);
        commands += proto::check::parse_arbitrary(&input);
    }
    // The inputs must reach past the error paths.
    assert!(commands > 5_000, "only {commands} commands accepted");
    eprintln!("{commands} commands accepted");
}

/// A crash the fuzzer found: `mg` with a long key on a line that ends in a bare `\n` and is
/// exactly at the (fuzz target's) line limit. Composed again, with `\r\n`, it was one byte
/// over the limit and refused: the limit now counts every line as ending in `\r\n`.
#[test]
fn a_bare_newline_line_at_the_limit_round_trips() {
    let mut input = b"\x04\nmg t".to_vec();
    input.extend(std::iter::repeat_n(0xffu8, 84));
    input.extend_from_slice(b"~eetg\xecg\n`");
    proto::check::parse_arbitrary(&input);
}

/// The same command line is accepted or refused alike whether it ends in `\r\n` or `\n`.
#[test]
fn line_limit_is_the_same_for_both_line_ends() {
    let limits = proto::Limits {
        line_max_bytes: 16,
        ..proto::Limits::default()
    };
    for len in 8..20 {
        let mut line = b"mg ".to_vec();
        line.extend(std::iter::repeat_n(b'k', len - 3));
        let verdict = |end: &[u8]| {
            let mut buf = line.clone();
            buf.extend_from_slice(end);
            matches!(
                proto::Parser::new(limits).parse(&buf),
                proto::Parse::Command { .. }
            )
        };
        assert_eq!(verdict(b"\r\n"), verdict(b"\n"), "line of {len} bytes");
        assert_eq!(verdict(b"\r\n"), len + 2 <= 16, "line of {len} bytes");
    }
}
