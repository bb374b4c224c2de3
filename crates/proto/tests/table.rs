//! The parser against the byte tables of `common/mod.rs`.

mod common;

use common::{cases, outcomes, show};
use proto::Limits;

#[test]
fn parser_matches_the_tables() {
    let mut failures = Vec::new();
    for c in cases() {
        let got = outcomes(&c.request, Limits::default(), usize::MAX);
        if got != c.outcomes {
            failures.push(format!(
                "{}: request {}\n  expected {:?}\n  parsed   {:?}",
                c.name,
                show(&c.request[..c.request.len().min(300)]),
                c.outcomes,
                got
            ));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn parser_gives_the_same_results_whatever_the_reads() {
    for c in cases().into_iter().filter(|c| !c.closes) {
        for read_bytes in [1, 2, 7, 4096] {
            let got = outcomes(&c.request, Limits::default(), read_bytes);
            assert_eq!(
                got, c.outcomes,
                "{} with reads of {read_bytes} bytes",
                c.name
            );
        }
    }
}

#[test]
fn a_swallowed_block_arriving_in_pieces_is_never_read_as_commands() {
    use proto::{Parse, Parser};
    let limits = Limits {
        item_size_max_bytes: 10,
        ..Limits::default()
    };
    let mut parser = Parser::new(limits);
    let Parse::Error { consumed, .. } = parser.parse(b"set k 0 0 20\r\n") else {
        panic!()
    };
    assert_eq!(consumed, 14);
    assert_eq!(parser.swallow_bytes(), 22);
    // The block looks like commands; it must be dropped all the same.
    assert_eq!(
        parser.parse(b"flush_all\r\n"),
        Parse::Swallowed { consumed: 11 }
    );
    assert_eq!(parser.parse(b""), Parse::Incomplete);
    assert_eq!(
        parser.parse(b"version\r\n"),
        Parse::Swallowed { consumed: 9 }
    );
    assert_eq!(
        parser.parse(b"\r\nmn\r\n"),
        Parse::Swallowed { consumed: 2 }
    );
    assert_eq!(parser.swallow_bytes(), 0);
    assert!(matches!(
        parser.parse(b"mn\r\n"),
        Parse::Command {
            command: proto::Command::MetaNoop,
            consumed: 4
        }
    ));
}

#[test]
fn parsed_fields() {
    use proto::{Command, Parse, Parser, Store, StoreMode};
    let mut p = Parser::new(Limits::default());
    let Parse::Command { command, consumed } =
        p.parse(b"cas k 4294967295 -5 2 77 noreply\r\nab\r\n")
    else {
        panic!()
    };
    assert_eq!(consumed, 38);
    assert_eq!(
        command,
        Command::Store(Store {
            mode: StoreMode::Cas,
            key: b"k",
            flags: u32::MAX,
            exptime: -5,
            cas_unique: 77,
            noreply: true,
            data: b"ab",
        })
    );
    let Parse::Command {
        command: Command::MetaSet(ms),
        ..
    } = p.parse(b"ms a2V5 2 b T9 F3 C4 I MR q Oxy k c\r\nab\r\n")
    else {
        panic!()
    };
    let f = &ms.meta.flags;
    assert_eq!(&*ms.meta.key_bytes(), b"key");
    assert_eq!(
        (f.ttl, f.client_flags, f.compare_cas),
        (Some(9), Some(3), Some(4))
    );
    assert!(f.invalidate && f.quiet && f.return_key && f.return_cas && f.base64);
    assert_eq!(f.mode, Some(proto::MetaMode::Replace));
    assert_eq!(f.opaque, Some(&b"xy"[..]));
    let letters: Vec<u8> = f.list.iter().map(|x| x.letter).collect();
    assert_eq!(letters, b"bTFCIMqOkc");
}
