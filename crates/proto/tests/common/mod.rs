//! The byte tables: request bytes → what the parser makes of them → the reply bytes, composed
//! with this crate's composers. `tests/table.rs` checks the parser against them;
//! `tests/memcached.rs` sends every request to a real memcached 1.6 and checks its reply is the
//! same bytes (or, for a documented deviation, the bytes memcached is recorded to give).
#![allow(dead_code)]

use proto::compose::{self, Reply};
use proto::{
    incr_decr, ArithOp, Limits, MetaReturn, MetaStatus, NonNumeric, Parse, Parser, ProtocolError,
};

pub struct Case {
    pub name: &'static str,
    /// Sent first on the same connection (after a `flush_all`); its replies are not checked.
    pub setup: Vec<u8>,
    pub request: Vec<u8>,
    /// What the parser returns for `request`, in order: `cmd: <the command composed back into
    /// request bytes>`, or `err: <error>` (`err quiet:` when the reply is suppressed).
    pub outcomes: Vec<String>,
    /// The reply to `request`, built with the composers.
    pub reply: Vec<u8>,
    /// memcached's reply where inec deviates on purpose (docs/protocol.md says why).
    pub memcached_reply: Option<Vec<u8>>,
    /// The server closes the connection after the reply.
    pub closes: bool,
}

pub fn show(bytes: &[u8]) -> String {
    bytes.escape_ascii().to_string()
}

/// The outcomes of parsing `input` to its end, as the tables write them.
pub fn outcomes(input: &[u8], limits: Limits, read_bytes: usize) -> Vec<String> {
    let mut parser = Parser::new(limits);
    let mut buf = Vec::new();
    let mut fed = 0;
    let mut out = Vec::new();
    loop {
        match parser.parse(&buf) {
            Parse::Incomplete => {
                if fed == input.len() {
                    return out;
                }
                let n = read_bytes.min(input.len() - fed);
                buf.extend_from_slice(&input[fed..fed + n]);
                fed += n;
            }
            Parse::Command { command, consumed } => {
                let mut req = Vec::new();
                compose::request(&mut req, &command);
                out.push(format!("cmd: {}", show(&req)));
                buf.drain(..consumed);
            }
            Parse::Error {
                error,
                consumed,
                noreply,
                unlink,
            } => {
                let q = if noreply { " quiet" } else { "" };
                match unlink {
                    None => out.push(format!("err{q}: {error:?}")),
                    Some(key) => out.push(format!("err{q}: {error:?}, unlink {}", show(&key))),
                }
                buf.drain(..consumed);
                if error.closes_connection() {
                    return out;
                }
            }
            Parse::Swallowed { consumed } => {
                buf.drain(..consumed);
            }
        }
    }
}

fn r(f: impl FnOnce(&mut Vec<u8>)) -> Vec<u8> {
    let mut v = Vec::new();
    f(&mut v);
    v
}

fn e(error: &ProtocolError) -> &'static [u8] {
    error.reply()
}

fn cmd(req: &[u8]) -> String {
    format!("cmd: {}", show(req))
}

fn err(error: ProtocolError) -> String {
    format!("err: {error:?}")
}

fn err_quiet(error: ProtocolError) -> String {
    format!("err quiet: {error:?}")
}

fn err_unlink(error: ProtocolError, key: &[u8]) -> String {
    format!("err: {error:?}, unlink {}", show(key))
}

fn err_quiet_unlink(error: ProtocolError, key: &[u8]) -> String {
    format!("err quiet: {error:?}, unlink {}", show(key))
}

fn case(
    name: &'static str,
    setup: &[u8],
    request: &[u8],
    outcomes: Vec<String>,
    reply: Vec<u8>,
) -> Case {
    Case {
        name,
        setup: setup.to_vec(),
        request: request.to_vec(),
        outcomes,
        reply,
        memcached_reply: None,
        closes: false,
    }
}

fn deviation(mut c: Case, memcached_reply: &[u8]) -> Case {
    c.memcached_reply = Some(memcached_reply.to_vec());
    c
}

fn closing(mut c: Case) -> Case {
    c.closes = true;
    c
}

/// `meta` reply for a request parsed from `request` (the first command in it).
fn meta_reply(request: &[u8], status: MetaStatus, ret: MetaReturn, data: &[u8]) -> Vec<u8> {
    let mut parser = Parser::new(Limits::default());
    let Parse::Command { command, .. } = parser.parse(request) else {
        panic!("not a command: {}", show(request))
    };
    let m = match &command {
        proto::Command::MetaGet(m)
        | proto::Command::MetaDelete(m)
        | proto::Command::MetaArith(m) => m.clone(),
        proto::Command::MetaSet(s) => s.meta.clone(),
        other => panic!("not a meta command: {other:?}"),
    };
    r(|o| compose::meta(o, status, &m, &ret, data))
}

fn cat(parts: &[&[u8]]) -> Vec<u8> {
    parts.concat()
}

pub const MEMCACHED_VERSION: &str = "1.6.18";
/// Bigger than the default item size limit of both memcached and the parser.
pub const TOO_LARGE_BYTES: usize = 2_000_000;

pub fn cases() -> Vec<Case> {
    use ProtocolError::*;
    let long_key = "k".repeat(251);
    let key250 = "k".repeat(250);
    let big = vec![b'a'; TOO_LARGE_BYTES];
    let none = MetaReturn::default();
    let mut v = vec![
        // Storage and retrieval.
        case(
            "set then get",
            b"",
            b"set k 5 0 3\r\nabc\r\nget k\r\n",
            vec![cmd(b"set k 5 0 3\r\nabc\r\n"), cmd(b"get k\r\n")],
            r(|o| {
                compose::reply(o, Reply::Stored);
                compose::value(o, b"k", 5, b"abc", None);
                compose::reply(o, Reply::End);
            }),
        ),
        case(
            "key of 250 bytes",
            b"",
            format!("set {key250} 0 0 1\r\na\r\nget {key250}\r\n").as_bytes(),
            vec![
                cmd(format!("set {key250} 0 0 1\r\na\r\n").as_bytes()),
                cmd(format!("get {key250}\r\n").as_bytes()),
            ],
            r(|o| {
                compose::reply(o, Reply::Stored);
                compose::value(o, key250.as_bytes(), 0, b"a", None);
                compose::reply(o, Reply::End);
            }),
        ),
        case(
            "gets returns the cas",
            b"set k 0 0 1\r\na\r\n",
            b"gets k\r\n",
            vec![cmd(b"gets k\r\n")],
            r(|o| {
                compose::value(o, b"k", 0, b"a", Some(1));
                compose::reply(o, Reply::End);
            }),
        ),
        case(
            "get many keys, misses left out, repeats answered twice",
            b"set 1 0 0 1\r\na\r\nset 2 0 0 1\r\nb\r\n",
            b"get 1 2 3 1\r\n",
            vec![cmd(b"get 1 2 3 1\r\n")],
            r(|o| {
                compose::value(o, b"1", 0, b"a", None);
                compose::value(o, b"2", 0, b"b", None);
                compose::value(o, b"1", 0, b"a", None);
                compose::reply(o, Reply::End);
            }),
        ),
        case(
            "empty value",
            b"",
            b"set k 0 0 0\r\n\r\nget k\r\n",
            vec![cmd(b"set k 0 0 0\r\n\r\n"), cmd(b"get k\r\n")],
            r(|o| {
                compose::reply(o, Reply::Stored);
                compose::value(o, b"k", 0, b"", None);
                compose::reply(o, Reply::End);
            }),
        ),
        case(
            "append and prepend",
            b"set k 0 0 3\r\nabc\r\n",
            b"append k 0 0 2\r\nde\r\nprepend k 0 0 2\r\nxy\r\nget k\r\n",
            vec![
                cmd(b"append k 0 0 2\r\nde\r\n"),
                cmd(b"prepend k 0 0 2\r\nxy\r\n"),
                cmd(b"get k\r\n"),
            ],
            r(|o| {
                compose::reply(o, Reply::Stored);
                compose::reply(o, Reply::Stored);
                compose::value(o, b"k", 0, b"xyabcde", None);
                compose::reply(o, Reply::End);
            }),
        ),
        case(
            "not stored: add of a present key, replace/append/prepend of a missing one",
            b"set k 0 0 1\r\na\r\n",
            b"add k 0 0 1\r\nb\r\nreplace n 0 0 1\r\nb\r\nappend n 0 0 1\r\nb\r\nprepend n 0 0 1\r\nb\r\n",
            vec![
                cmd(b"add k 0 0 1\r\nb\r\n"),
                cmd(b"replace n 0 0 1\r\nb\r\n"),
                cmd(b"append n 0 0 1\r\nb\r\n"),
                cmd(b"prepend n 0 0 1\r\nb\r\n"),
            ],
            r(|o| {
                for _ in 0..4 {
                    compose::reply(o, Reply::NotStored);
                }
            }),
        ),
        case(
            "cas: exists and not found",
            b"set k 0 0 1\r\na\r\n",
            b"cas k 0 0 1 999\r\nb\r\ncas n 0 0 1 1\r\nb\r\n",
            vec![cmd(b"cas k 0 0 1 999\r\nb\r\n"), cmd(b"cas n 0 0 1 1\r\nb\r\n")],
            r(|o| {
                compose::reply(o, Reply::Exists);
                compose::reply(o, Reply::NotFound);
            }),
        ),
        case(
            "cas unique of 2^64-1",
            b"",
            b"cas n 0 0 1 18446744073709551615\r\na\r\n",
            vec![cmd(b"cas n 0 0 1 18446744073709551615\r\na\r\n")],
            Reply::NotFound.bytes().to_vec(),
        ),
        case(
            "noreply",
            b"",
            b"set k 0 0 1 noreply\r\na\r\nget k\r\n",
            vec![cmd(b"set k 0 0 1 noreply\r\na\r\n"), cmd(b"get k\r\n")],
            r(|o| {
                compose::value(o, b"k", 0, b"a", None);
                compose::reply(o, Reply::End);
            }),
        ),
        case(
            "a sixth token other than noreply is ignored",
            b"",
            b"set k 0 0 3 foo\r\nabc\r\n",
            vec![cmd(b"set k 0 0 3\r\nabc\r\n")],
            Reply::Stored.bytes().to_vec(),
        ),
        case(
            "numbers with plus signs and leading zeros",
            b"",
            b"set k +1 0 01\r\na\r\nget k\r\n",
            vec![cmd(b"set k 1 0 1\r\na\r\n"), cmd(b"get k\r\n")],
            r(|o| {
                compose::reply(o, Reply::Stored);
                compose::value(o, b"k", 1, b"a", None);
                compose::reply(o, Reply::End);
            }),
        ),
        case(
            "negative exptime stores an expired item",
            b"",
            b"set k 0 -1 3\r\nabc\r\nget k\r\n",
            vec![cmd(b"set k 0 -1 3\r\nabc\r\n"), cmd(b"get k\r\n")],
            r(|o| {
                compose::reply(o, Reply::Stored);
                compose::reply(o, Reply::End);
            }),
        ),
        case(
            "lines may end with a bare newline; spaces between tokens collapse",
            b"",
            b"set k 0 0 1\nx\r\n  get   k  \n",
            vec![cmd(b"set k 0 0 1\r\nx\r\n"), cmd(b"get k\r\n")],
            r(|o| {
                compose::reply(o, Reply::Stored);
                compose::value(o, b"k", 0, b"x", None);
                compose::reply(o, Reply::End);
            }),
        ),
        // Refused storage commands.
        case(
            "bad data chunk: bytes+2 are used, the rest is read as commands",
            b"",
            b"set k 0 0 3\r\nabcde\r\n",
            vec![err(BadDataChunk), err(UnknownCommand)],
            cat(&[e(&BadDataChunk), e(&UnknownCommand)]),
        ),
        case(
            "bad data chunk with noreply is not answered",
            b"",
            b"set k 0 0 3 noreply\r\nabcde\r\n",
            vec![err_quiet(BadDataChunk), err(UnknownCommand)],
            e(&UnknownCommand).to_vec(),
        ),
        case(
            "too large: the data block is swallowed",
            b"",
            &cat(&[b"set k 0 0 2000000\r\n", &big, b"\r\nget k\r\n"]),
            vec![
                err_unlink(TooLarge { value_bytes: TOO_LARGE_BYTES as u64, limit: 1 << 20 }, b"k"),
                cmd(b"get k\r\n"),
            ],
            cat(&[b"SERVER_ERROR object too large for cache\r\n", Reply::End.bytes()]),
        ),
        case(
            "a set too large removes the value it meant to overwrite",
            b"set k 0 0 3\r\nMOO\r\n",
            &cat(&[b"set k 0 0 2000000\r\n", &big, b"\r\nget k\r\n"]),
            vec![
                err_unlink(TooLarge { value_bytes: TOO_LARGE_BYTES as u64, limit: 1 << 20 }, b"k"),
                cmd(b"get k\r\n"),
            ],
            cat(&[b"SERVER_ERROR object too large for cache\r\n", Reply::End.bytes()]),
        ),
        deviation(
            case(
                "an append too large removes the value too",
                b"set k 0 0 3\r\nMOO\r\n",
                &cat(&[b"append k 0 0 2000000\r\n", &big, b"\r\nget k\r\n"]),
                vec![
                    err_unlink(TooLarge { value_bytes: TOO_LARGE_BYTES as u64, limit: 1 << 20 }, b"k"),
                    cmd(b"get k\r\n"),
                ],
                cat(&[b"SERVER_ERROR object too large for cache\r\n", Reply::End.bytes()]),
            ),
            &cat(&[b"SERVER_ERROR object too large for cache\r\n", &r(|o| {
                compose::value(o, b"k", 0, b"MOO", None);
                compose::reply(o, Reply::End);
            })]),
        ),
        case(
            "add too large keeps the value, as memcached",
            b"set k 0 0 3\r\nMOO\r\n",
            &cat(&[b"add k 0 0 1100000\r\n", &big[..1_100_000], b"\r\nget k\r\n"]),
            vec![err(TooLarge { value_bytes: 1_100_000, limit: 1 << 20 }), cmd(b"get k\r\n")],
            cat(&[b"SERVER_ERROR object too large for cache\r\n", &r(|o| {
                compose::value(o, b"k", 0, b"MOO", None);
                compose::reply(o, Reply::End);
            })]),
        ),
        case(
            "replace too large keeps the value, as memcached",
            b"set k 0 0 3\r\nMOO\r\n",
            &cat(&[b"replace k 0 0 1100000\r\n", &big[..1_100_000], b"\r\nget k\r\n"]),
            vec![err(TooLarge { value_bytes: 1_100_000, limit: 1 << 20 }), cmd(b"get k\r\n")],
            cat(&[b"SERVER_ERROR object too large for cache\r\n", &r(|o| {
                compose::value(o, b"k", 0, b"MOO", None);
                compose::reply(o, Reply::End);
            })]),
        ),
        case(
            "cas too large keeps the value, as memcached",
            b"set k 0 0 3\r\nMOO\r\n",
            &cat(&[b"cas k 0 0 1100000 1\r\n", &big[..1_100_000], b"\r\nget k\r\n"]),
            vec![err(TooLarge { value_bytes: 1_100_000, limit: 1 << 20 }), cmd(b"get k\r\n")],
            cat(&[b"SERVER_ERROR object too large for cache\r\n", &r(|o| {
                compose::value(o, b"k", 0, b"MOO", None);
                compose::reply(o, Reply::End);
            })]),
        ),
        case(
            "too large with noreply",
            b"",
            &cat(&[b"set k 0 0 2000000 noreply\r\n", &big, b"\r\nget k\r\n"]),
            vec![
                err_quiet_unlink(TooLarge { value_bytes: TOO_LARGE_BYTES as u64, limit: 1 << 20 }, b"k"),
                cmd(b"get k\r\n"),
            ],
            Reply::End.bytes().to_vec(),
        ),
        case(
            "negative length: not swallowed (its length is unknown)",
            b"",
            b"set k 0 0 -1\r\nabc\r\n",
            vec![err(BadFormat), err(UnknownCommand)],
            cat(&[e(&BadFormat), e(&UnknownCommand)]),
        ),
        case(
            "length not a number",
            b"",
            b"set k 0 0 abc\r\nabc\r\n",
            vec![err(BadFormat), err(UnknownCommand)],
            cat(&[e(&BadFormat), e(&UnknownCommand)]),
        ),
        case(
            "too few tokens",
            b"",
            b"set k 0 0\r\nabc\r\n",
            vec![err(UnknownCommand), err(UnknownCommand)],
            cat(&[e(&UnknownCommand), e(&UnknownCommand)]),
        ),
        deviation(
            case(
                "too many tokens with a length: the data block is swallowed",
                b"",
                b"set k 0 0 3 noreply extra\r\nabc\r\n",
                vec![err(BadFormat)],
                e(&BadFormat).to_vec(),
            ),
            &cat(&[e(&UnknownCommand), e(&UnknownCommand)]),
        ),
        deviation(
            case(
                "cas without its unique: the data block is swallowed",
                b"",
                b"cas k 0 0 1\r\na\r\n",
                vec![err(BadFormat)],
                e(&BadFormat).to_vec(),
            ),
            &cat(&[e(&UnknownCommand), e(&UnknownCommand)]),
        ),
        deviation(
            case(
                "a cas with an empty unique cannot smuggle its value in as a command",
                b"set foo 0 0 1\r\nx\r\n",
                b"cas foo 0 0 9 \r\nflush_all\r\nget foo\r\n",
                vec![err(BadFormat), cmd(b"get foo\r\n")],
                cat(&[e(&BadFormat), &r(|o| {
                    compose::value(o, b"foo", 0, b"x", None);
                    compose::reply(o, Reply::End);
                })]),
            ),
            // memcached 1.6.18 runs the value `flush_all`: the key is gone.
            &cat(&[e(&UnknownCommand), b"OK\r\n", Reply::End.bytes()]),
        ),
        deviation(
            case(
                "key too long: the data block is swallowed",
                b"",
                format!("set {long_key} 0 0 3\r\nabc\r\n").as_bytes(),
                vec![err(KeyTooLong { key_bytes: 251, limit: 250 })],
                e(&BadFormat).to_vec(),
            ),
            &cat(&[e(&BadFormat), e(&UnknownCommand)]),
        ),
        deviation(
            case(
                "bad flags with a valid length: the data block is swallowed",
                b"",
                b"set k -1 0 3\r\nabc\r\n",
                vec![err(BadFormat)],
                e(&BadFormat).to_vec(),
            ),
            &cat(&[e(&BadFormat), e(&UnknownCommand)]),
        ),
        deviation(
            case(
                "flags above 2^32-1 are refused, not truncated",
                b"",
                b"set k 4294967296 0 1\r\na\r\n",
                vec![err(BadFormat)],
                e(&BadFormat).to_vec(),
            ),
            Reply::Stored.bytes(),
        ),
        deviation(
            case(
                "bad cas unique: the data block is swallowed",
                b"",
                b"cas k 0 0 1 -1\r\na\r\n",
                vec![err(BadFormat)],
                e(&BadFormat).to_vec(),
            ),
            &cat(&[e(&BadFormat), e(&UnknownCommand)]),
        ),
        deviation(
            case(
                "key too long with noreply: swallowed, nothing sent",
                b"",
                format!("set {long_key} 0 0 1 noreply\r\na\r\n").as_bytes(),
                vec![err_quiet(KeyTooLong { key_bytes: 251, limit: 250 })],
                vec![],
            ),
            e(&UnknownCommand),
        ),
        // Other commands and errors.
        case("get misses", b"", b"get a b\r\n", vec![cmd(b"get a b\r\n")], Reply::End.bytes().to_vec()),
        case("get without a key", b"", b"get\r\n", vec![err(UnknownCommand)], e(&UnknownCommand).to_vec()),
        case("gets without a key", b"", b"gets \r\n", vec![err(UnknownCommand)], e(&UnknownCommand).to_vec()),
        case(
            "get with a key too long",
            b"",
            format!("get a {long_key}\r\n").as_bytes(),
            vec![err(KeyTooLong { key_bytes: 251, limit: 250 })],
            e(&BadFormat).to_vec(),
        ),
        case("unknown command", b"", b"foo\r\n", vec![err(UnknownCommand)], e(&UnknownCommand).to_vec()),
        case("commands are case sensitive", b"", b"GET k\r\n", vec![err(UnknownCommand)], e(&UnknownCommand).to_vec()),
        case("empty line", b"", b"\r\n", vec![err(UnknownCommand)], e(&UnknownCommand).to_vec()),
        deviation(
            case(
                "control character in a key",
                b"",
                b"get k\x01\r\n",
                vec![err(KeyControlCharacter { byte: 1 })],
                e(&BadFormat).to_vec(),
            ),
            Reply::End.bytes(),
        ),
        case(
            "incr grows the value, decr keeps its length padded with spaces",
            b"set n 0 0 2\r\n99\r\n",
            b"incr n 1\r\nget n\r\ndecr n 1\r\nget n\r\n",
            vec![cmd(b"incr n 1\r\n"), cmd(b"get n\r\n"), cmd(b"decr n 1\r\n"), cmd(b"get n\r\n")],
            r(|o| {
                let up = incr_decr(b"99", ArithOp::Incr, 1).unwrap();
                compose::number(o, up.number);
                compose::value(o, b"n", 0, &up.value, None);
                compose::reply(o, Reply::End);
                let down = incr_decr(&up.value, ArithOp::Decr, 1).unwrap();
                compose::number(o, down.number);
                compose::value(o, b"n", 0, &down.value, None);
                compose::reply(o, Reply::End);
            }),
        ),
        case(
            "incr wraps at 2^64",
            b"set n 0 0 1\r\n5\r\n",
            b"incr n 18446744073709551615\r\n",
            vec![cmd(b"incr n 18446744073709551615\r\n")],
            r(|o| compose::number(o, incr_decr(b"5", ArithOp::Incr, u64::MAX).unwrap().number)),
        ),
        case(
            "decr stops at 0",
            b"set n 0 0 1\r\n5\r\n",
            b"decr n 10\r\n",
            vec![cmd(b"decr n 10\r\n")],
            r(|o| compose::number(o, incr_decr(b"5", ArithOp::Decr, 10).unwrap().number)),
        ),
        case(
            "incr of a value with spaces around the digits",
            b"set n 0 0 4\r\n 12 \r\n",
            b"incr n 1\r\n",
            vec![cmd(b"incr n 1\r\n")],
            r(|o| compose::number(o, incr_decr(b" 12 ", ArithOp::Incr, 1).unwrap().number)),
        ),
        case(
            "incr of a non-numeric value",
            b"set n 0 0 1\r\na\r\n",
            b"incr n 1\r\n",
            vec![cmd(b"incr n 1\r\n")],
            incr_decr(b"a", ArithOp::Incr, 1).unwrap_err().reply().to_vec(),
        ),
        case(
            "incr of a number above 2^64-1",
            b"set n 0 0 20\r\n18446744073709551616\r\n",
            b"incr n 1\r\n",
            vec![cmd(b"incr n 1\r\n")],
            incr_decr(b"18446744073709551616", ArithOp::Incr, 1).unwrap_err().reply().to_vec(),
        ),
        case(
            "incr of an empty value",
            b"set n 0 0 0\r\n\r\n",
            b"incr n 1\r\n",
            vec![cmd(b"incr n 1\r\n")],
            incr_decr(b"", ArithOp::Incr, 1).unwrap_err().reply().to_vec(),
        ),
        case(
            "bad deltas",
            b"set n 0 0 1\r\n5\r\n",
            b"incr n -1\r\nincr n abc\r\ndecr n 18446744073709551616\r\n",
            vec![err(InvalidDelta), err(InvalidDelta), err(InvalidDelta)],
            cat(&[e(&InvalidDelta), e(&InvalidDelta), e(&InvalidDelta)]),
        ),
        case("incr of a missing key", b"", b"incr n 1\r\n", vec![cmd(b"incr n 1\r\n")], Reply::NotFound.bytes().to_vec()),
        case("incr without delta", b"", b"incr n\r\n", vec![err(UnknownCommand)], e(&UnknownCommand).to_vec()),
        case(
            "incr errors obey noreply",
            b"",
            b"incr n abc noreply\r\n",
            vec![err_quiet(InvalidDelta)],
            vec![],
        ),
        case(
            "delete",
            b"set k 0 0 1\r\na\r\n",
            b"delete k\r\ndelete k\r\ndelete k 0\r\ndelete k noreply\r\n",
            vec![cmd(b"delete k\r\n"), cmd(b"delete k\r\n"), cmd(b"delete k\r\n"), cmd(b"delete k noreply\r\n")],
            r(|o| {
                compose::reply(o, Reply::Deleted);
                compose::reply(o, Reply::NotFound);
                compose::reply(o, Reply::NotFound);
            }),
        ),
        case(
            "delete with a hold time",
            b"",
            b"delete k 5\r\ndelete k 5 noreply\r\n",
            vec![err(BadDeleteFormat), err_quiet(BadDeleteFormat)],
            e(&BadDeleteFormat).to_vec(),
        ),
        case(
            "touch",
            b"set k 0 0 1\r\na\r\n",
            b"touch k 10\r\ntouch n 10\r\ntouch k 10 noreply\r\n",
            vec![cmd(b"touch k 10\r\n"), cmd(b"touch n 10\r\n"), cmd(b"touch k 10 noreply\r\n")],
            r(|o| {
                compose::reply(o, Reply::Touched);
                compose::reply(o, Reply::NotFound);
            }),
        ),
        case("touch with a bad exptime", b"", b"touch k abc\r\n", vec![err(InvalidExptime)], e(&InvalidExptime).to_vec()),
        case("touch without exptime", b"", b"touch k\r\n", vec![err(UnknownCommand)], e(&UnknownCommand).to_vec()),
        case(
            "gat and gats",
            b"set k 0 0 1\r\na\r\n",
            b"gat 10 k\r\ngats 10 k n\r\n",
            vec![cmd(b"gat 10 k\r\n"), cmd(b"gats 10 k n\r\n")],
            r(|o| {
                compose::value(o, b"k", 0, b"a", None);
                compose::reply(o, Reply::End);
                compose::value(o, b"k", 0, b"a", Some(1));
                compose::reply(o, Reply::End);
            }),
        ),
        case("gat without exptime", b"", b"gat k\r\n", vec![err(InvalidExptime)], e(&InvalidExptime).to_vec()),
        case("gat without keys", b"", b"gat 10\r\n", vec![cmd(b"gat 10\r\n")], Reply::End.bytes().to_vec()),
        case("gats without anything", b"", b"gats\r\n", vec![err(UnknownCommand)], e(&UnknownCommand).to_vec()),
        case(
            "flush_all forms",
            b"",
            b"flush_all\r\nflush_all 0\r\nflush_all noreply\r\nflush_all 0 noreply\r\nflush_all abc\r\nflush_all noreply 1\r\n",
            vec![
                cmd(b"flush_all\r\n"),
                cmd(b"flush_all 0\r\n"),
                cmd(b"flush_all noreply\r\n"),
                cmd(b"flush_all 0 noreply\r\n"),
                err(InvalidExptime),
                err(InvalidExptime),
            ],
            r(|o| {
                compose::reply(o, Reply::Ok);
                compose::reply(o, Reply::Ok);
                o.extend_from_slice(e(&InvalidExptime));
                o.extend_from_slice(e(&InvalidExptime));
            }),
        ),
        case(
            "version",
            b"",
            b"version\r\n",
            vec![cmd(b"version\r\n")],
            r(|o| compose::version(o, MEMCACHED_VERSION)),
        ),
        case(
            "verbosity",
            b"",
            b"verbosity\r\nverbosity 1\r\nverbosity 1 noreply\r\nverbosity a\r\n",
            vec![
                err(UnknownCommand),
                cmd(b"verbosity 1\r\n"),
                cmd(b"verbosity 1 noreply\r\n"),
                err(BadFormat),
            ],
            r(|o| {
                o.extend_from_slice(e(&UnknownCommand));
                compose::reply(o, Reply::Ok);
                o.extend_from_slice(e(&BadFormat));
            }),
        ),
        case(
            "stats with an unknown group",
            b"",
            b"stats foo\r\n",
            vec![cmd(b"stats foo\r\n")],
            Reply::Error.bytes().to_vec(),
        ),
        case(
            "stats detail on",
            b"",
            b"stats detail on\r\n",
            vec![cmd(b"stats detail on\r\n")],
            Reply::Ok.bytes().to_vec(),
        ),
        closing(case("quit", b"", b"quit\r\n", vec![cmd(b"quit\r\n")], vec![])),
        closing(case("an HTTP GET hangs up without a reply", b"", b"GET / HTTP/1.0\r\n\r\n", vec![err(HttpRequest)], vec![])),
        closing(case("an HTTP PUT hangs up without a reply", b"", b"PUT /a/b HTTP/1.1\r\nHost: x\r\n\r\n", vec![err(HttpRequest)], vec![])),
        closing(case("an HTTP DELETE hangs up without a reply", b"", b"DELETE HTTP/1.1\r\n", vec![err(HttpRequest)], vec![])),
        closing(case("an HTTP line after commands hangs up after their replies", b"", b"mn\r\nPOST /x HTTP/1.1\r\nmn\r\n", vec![cmd(b"mn\r\n"), err(HttpRequest)], b"MN\r\n".to_vec())),
        case("a known command with an HTTP-like last token is that command", b"", b"get k HTTP/1.1\r\n", vec![cmd(b"get k HTTP/1.1\r\n")], Reply::End.bytes().to_vec()),
        case("an unknown command without HTTP/ is an error", b"", b"GET /\r\n", vec![err(UnknownCommand)], e(&UnknownCommand).to_vec()),
        closing(deviation(
            case(
                "a line without end longer than the limit",
                b"",
                &[b'x'; 3000],
                vec![err(LineTooLong { line_bytes: 3000, limit: 2048 })],
                e(&LineTooLong { line_bytes: 0, limit: 0 }).to_vec(),
            ),
            b"",
        )),
        // Meta commands.
        case("mn", b"", b"mn\r\n", vec![cmd(b"mn\r\n")], b"MN\r\n".to_vec()),
        case(
            "mg miss",
            b"",
            b"mg k v\r\n",
            vec![cmd(b"mg k v\r\n")],
            meta_reply(b"mg k v\r\n", MetaStatus::En, none, b""),
        ),
        case(
            "mg hits with return flags in request order",
            b"set k 5 0 3\r\nabc\r\n",
            b"mg k\r\nmg k v\r\nmg k s v f t k Oab123\r\nmg k k v\r\nmg k q v\r\nmg k q\r\nmg k s f\r\n",
            vec![
                cmd(b"mg k\r\n"),
                cmd(b"mg k v\r\n"),
                cmd(b"mg k s v f t k Oab123\r\n"),
                cmd(b"mg k k v\r\n"),
                cmd(b"mg k q v\r\n"),
                cmd(b"mg k q\r\n"),
                cmd(b"mg k s f\r\n"),
            ],
            {
                let item = MetaReturn { size: Some(3), client_flags: Some(5), ttl: Some(-1), cas: None };
                cat(&[
                    &meta_reply(b"mg k\r\n", MetaStatus::Hd, item, b""),
                    &meta_reply(b"mg k v\r\n", MetaStatus::Va, item, b"abc"),
                    &meta_reply(b"mg k s v f t k Oab123\r\n", MetaStatus::Va, item, b"abc"),
                    &meta_reply(b"mg k k v\r\n", MetaStatus::Va, item, b"abc"),
                    &meta_reply(b"mg k q v\r\n", MetaStatus::Va, item, b"abc"),
                    &meta_reply(b"mg k q\r\n", MetaStatus::Hd, item, b""),
                    &meta_reply(b"mg k s f\r\n", MetaStatus::Hd, item, b""),
                ])
            },
        ),
        case(
            "mg returns the cas",
            b"set k 0 0 1\r\na\r\n",
            b"mg k c v\r\n",
            vec![cmd(b"mg k c v\r\n")],
            meta_reply(b"mg k c v\r\n", MetaStatus::Va, MetaReturn { cas: Some(1), ..none }, b"a"),
        ),
        case(
            "mg miss: quiet hides EN, k and O are returned",
            b"",
            b"mg zz v q\r\nmg zz k O3\r\n",
            vec![cmd(b"mg zz v q\r\n"), cmd(b"mg zz k O3\r\n")],
            meta_reply(b"mg zz k O3\r\n", MetaStatus::En, none, b""),
        ),
        case(
            "mg T sets the TTL",
            b"set k 0 0 1\r\na\r\n",
            b"mg k T30 t v\r\n",
            vec![cmd(b"mg k T30 t v\r\n")],
            meta_reply(b"mg k T30 t v\r\n", MetaStatus::Va, MetaReturn { ttl: Some(30), ..none }, b"a"),
        ),
        case("mg without a key", b"", b"mg\r\n", vec![err(UnknownCommand)], e(&UnknownCommand).to_vec()),
        case(
            "mg flag errors",
            b"",
            b"mg k zz\r\nmg k v v\r\nmg k Tabc\r\nmg k E5\r\n",
            vec![
                err(MetaInvalidFlag { letter: 'z' }),
                err(MetaDuplicateFlag { letter: 'v' }),
                err(MetaBadToken { letter: 'T' }),
                err(MetaInvalidFlag { letter: 'E' }),
            ],
            cat(&[
                e(&MetaInvalidFlag { letter: 'z' }),
                e(&MetaDuplicateFlag { letter: 'v' }),
                e(&MetaBadToken { letter: 'T' }),
                e(&MetaInvalidFlag { letter: 'E' }),
            ]),
        ),
        case(
            "mg opaque too long",
            b"",
            format!("mg k O{} v\r\n", "x".repeat(40)).as_bytes(),
            vec![err(MetaOpaqueTooLong { opaque_bytes: 40, limit: 32 })],
            e(&MetaOpaqueTooLong { opaque_bytes: 40, limit: 32 }).to_vec(),
        ),
        case(
            "mg key too long",
            b"",
            format!("mg {long_key} v\r\n").as_bytes(),
            vec![err(KeyTooLong { key_bytes: 251, limit: 250 })],
            e(&BadFormat).to_vec(),
        ),
        deviation(
            case(
                "mg key with a control character",
                b"",
                b"mg k\x01 v\r\n",
                vec![err(KeyControlCharacter { byte: 1 })],
                e(&BadFormat).to_vec(),
            ),
            b"EN\r\n",
        ),
        case(
            "ms then mg",
            b"",
            b"ms k 3\r\nabc\r\nmg k v f\r\n",
            vec![cmd(b"ms k 3\r\nabc\r\n"), cmd(b"mg k v f\r\n")],
            cat(&[
                &meta_reply(b"ms k 3\r\nabc\r\n", MetaStatus::Hd, none, b""),
                &meta_reply(b"mg k v f\r\n", MetaStatus::Va, MetaReturn { client_flags: Some(0), ..none }, b"abc"),
            ]),
        ),
        case(
            "ms with F and T, quiet, k and O",
            b"",
            b"ms k 3 F7 T100\r\nabc\r\nmg k v f\r\nms k 3 q\r\nabc\r\nms k 3 k Oxx\r\nabc\r\n",
            vec![
                cmd(b"ms k 3 F7 T100\r\nabc\r\n"),
                cmd(b"mg k v f\r\n"),
                cmd(b"ms k 3 q\r\nabc\r\n"),
                cmd(b"ms k 3 k Oxx\r\nabc\r\n"),
            ],
            cat(&[
                &meta_reply(b"ms k 3 F7 T100\r\nabc\r\n", MetaStatus::Hd, none, b""),
                &meta_reply(b"mg k v f\r\n", MetaStatus::Va, MetaReturn { client_flags: Some(7), ..none }, b"abc"),
                &meta_reply(b"ms k 3 k Oxx\r\nabc\r\n", MetaStatus::Hd, none, b""),
            ]),
        ),
        case(
            "ms modes",
            b"ms k 3\r\nabc\r\n",
            b"ms k 3 MA\r\nxyz\r\nmg k v\r\nms n 1 ME\r\nx\r\nms n 1 ME\r\nx\r\nms m 1 MR\r\nq\r\n",
            vec![
                cmd(b"ms k 3 MA\r\nxyz\r\n"),
                cmd(b"mg k v\r\n"),
                cmd(b"ms n 1 ME\r\nx\r\n"),
                cmd(b"ms n 1 ME\r\nx\r\n"),
                cmd(b"ms m 1 MR\r\nq\r\n"),
            ],
            cat(&[
                b"HD\r\n",
                &meta_reply(b"mg k v\r\n", MetaStatus::Va, none, b"abcxyz"),
                b"HD\r\nNS\r\nNS\r\n",
            ]),
        ),
        case(
            "ms compare cas mismatch",
            b"set k 0 0 1\r\na\r\n",
            b"ms k 3 C999\r\nabc\r\n",
            vec![cmd(b"ms k 3 C999\r\nabc\r\n")],
            meta_reply(b"ms k 3 C999\r\nabc\r\n", MetaStatus::Ex, none, b""),
        ),
        case(
            "ms flag errors swallow the data block",
            b"",
            b"ms k 3 Z\r\nabc\r\nms k 3 MX\r\nabc\r\nms k 3 M\r\nabc\r\nms k 3 F1 F2\r\nabc\r\nms k 3 T\r\nabc\r\nms k 3 F-1\r\nabc\r\nms k 3 C-1\r\nabc\r\nms k 3 b\r\nabc\r\n",
            vec![
                err(MetaInvalidFlag { letter: 'Z' }),
                err(MetaInvalidMode),
                err(MetaModeLength),
                err(MetaDuplicateFlag { letter: 'F' }),
                err(MetaBadToken { letter: 'T' }),
                err(BadFormat),
                err(MetaBadToken { letter: 'C' }),
                err(MetaKeyDecode),
            ],
            cat(&[
                e(&MetaInvalidFlag { letter: 'Z' }),
                e(&MetaInvalidMode),
                e(&MetaModeLength),
                e(&MetaDuplicateFlag { letter: 'F' }),
                e(&MetaBadToken { letter: 'T' }),
                e(&BadFormat),
                e(&MetaBadToken { letter: 'C' }),
                e(&MetaKeyDecode),
            ]),
        ),
        case(
            "ms without a valid length: the data is read as commands",
            b"",
            b"ms k S3\r\nabc\r\nms k\r\nabc\r\nms\r\n",
            vec![err(BadFormat), err(UnknownCommand), err(BadFormat), err(UnknownCommand), err(UnknownCommand)],
            cat(&[e(&BadFormat), e(&UnknownCommand), e(&BadFormat), e(&UnknownCommand), e(&UnknownCommand)]),
        ),
        case(
            "ms bad data chunk",
            b"",
            b"ms k 3\r\nabcde\r\n",
            vec![err(BadDataChunk), err(UnknownCommand)],
            cat(&[e(&BadDataChunk), e(&UnknownCommand)]),
        ),
        case(
            "ms too large",
            b"",
            &cat(&[b"ms k 2000000\r\n", &big, b"\r\nmn\r\n"]),
            vec![err_unlink(TooLarge { value_bytes: TOO_LARGE_BYTES as u64, limit: 1 << 20 }, b"k"), cmd(b"mn\r\n")],
            cat(&[e(&TooLarge { value_bytes: 0, limit: 0 }), b"MN\r\n"]),
        ),
        case(
            "ms too large removes the value whatever its mode (base64 key decoded)",
            b"set key 0 0 3\r\nMOO\r\n",
            &cat(&[b"ms a2V5 1100000 b MA\r\n", &big[..1_100_000], b"\r\nget key\r\n"]),
            vec![err_unlink(TooLarge { value_bytes: 1_100_000, limit: 1 << 20 }, b"key"), cmd(b"get key\r\n")],
            cat(&[e(&TooLarge { value_bytes: 0, limit: 0 }), Reply::End.bytes()]),
        ),
        deviation(
            case(
                "ms key too long: the data block is swallowed",
                b"",
                format!("ms {long_key} 3\r\nabc\r\n").as_bytes(),
                vec![err(KeyTooLong { key_bytes: 251, limit: 250 })],
                e(&BadFormat).to_vec(),
            ),
            &cat(&[e(&BadFormat), e(&UnknownCommand)]),
        ),
        case(
            "base64 keys",
            b"",
            b"ms a2V5 3 b k\r\nabc\r\nmg a2V5 b k v\r\nget key\r\n",
            vec![cmd(b"ms a2V5 3 b k\r\nabc\r\n"), cmd(b"mg a2V5 b k v\r\n"), cmd(b"get key\r\n")],
            cat(&[
                &meta_reply(b"ms a2V5 3 b k\r\nabc\r\n", MetaStatus::Hd, none, b""),
                &meta_reply(b"mg a2V5 b k v\r\n", MetaStatus::Va, none, b"abc"),
                &r(|o| {
                    compose::value(o, b"key", 0, b"abc", None);
                    compose::reply(o, Reply::End);
                }),
            ]),
        ),
        case(
            "md: quiet hides HD, not NF",
            b"set k 0 0 1\r\na\r\nset j 0 0 1\r\na\r\n",
            b"md k\r\nmd k\r\nmd k q\r\nmd j q\r\n",
            vec![cmd(b"md k\r\n"), cmd(b"md k\r\n"), cmd(b"md k q\r\n"), cmd(b"md j q\r\n")],
            cat(&[b"HD\r\n", b"NF\r\n", b"NF\r\n"]),
        ),
        case(
            "md returns O and k in request order",
            b"",
            b"md k Oab k\r\n",
            vec![cmd(b"md k Oab k\r\n")],
            meta_reply(b"md k Oab k\r\n", MetaStatus::Nf, none, b""),
        ),
        case(
            "md compare cas and invalidate",
            b"set k 0 0 1\r\na\r\n",
            b"md k C999\r\nmd k I T30\r\n",
            vec![cmd(b"md k C999\r\n"), cmd(b"md k I T30\r\n")],
            cat(&[
                &meta_reply(b"md k C999\r\n", MetaStatus::Ex, none, b""),
                &meta_reply(b"md k I T30\r\n", MetaStatus::Hd, none, b""),
            ]),
        ),
        case(
            "md flag errors",
            b"",
            b"md k x\r\nmd k Cx\r\nmd k q q\r\n",
            vec![
                err(MetaDeleteBadFlag { letter: 'x' }),
                err(MetaDeleteBadFlag { letter: 'C' }),
                err(MetaDeleteBadFlag { letter: 'q' }),
            ],
            cat(&[
                e(&MetaDeleteBadFlag { letter: 'x' }),
                e(&MetaDeleteBadFlag { letter: 'x' }),
                e(&MetaDeleteBadFlag { letter: 'x' }),
            ]),
        ),
        case(
            "ma: a miss, then created by N, then counted up",
            b"",
            b"ma k\r\nma k N0\r\nma k v\r\nma k N0 J10 v\r\nma j N100 J10 v t\r\n",
            vec![
                cmd(b"ma k\r\n"),
                cmd(b"ma k N0\r\n"),
                cmd(b"ma k v\r\n"),
                cmd(b"ma k N0 J10 v\r\n"),
                cmd(b"ma j N100 J10 v t\r\n"),
            ],
            cat(&[
                &meta_reply(b"ma k\r\n", MetaStatus::Nf, none, b""),
                &meta_reply(b"ma k N0\r\n", MetaStatus::Hd, none, b""),
                &meta_reply(b"ma k v\r\n", MetaStatus::Va, none, b"1"),
                &meta_reply(b"ma k N0 J10 v\r\n", MetaStatus::Va, none, b"2"),
                &meta_reply(b"ma j N100 J10 v t\r\n", MetaStatus::Va, MetaReturn { ttl: Some(100), ..none }, b"10"),
            ]),
        ),
        case(
            "ma modes and deltas; the stored value keeps its length, padded",
            b"set k 0 0 2\r\n10\r\n",
            b"ma k v MD D3\r\nma k v M- D100\r\nma k v M+ D5 k O12\r\nma k v MI\r\nmg k v\r\n",
            vec![
                cmd(b"ma k v MD D3\r\n"),
                cmd(b"ma k v M- D100\r\n"),
                cmd(b"ma k v M+ D5 k O12\r\n"),
                cmd(b"ma k v MI\r\n"),
                cmd(b"mg k v\r\n"),
            ],
            cat(&[
                &meta_reply(b"ma k v MD D3\r\n", MetaStatus::Va, none, b"7"),
                &meta_reply(b"ma k v M- D100\r\n", MetaStatus::Va, none, b"0"),
                &meta_reply(b"ma k v M+ D5 k O12\r\n", MetaStatus::Va, none, b"5"),
                &meta_reply(b"ma k v MI\r\n", MetaStatus::Va, none, b"6"),
                &meta_reply(b"mg k v\r\n", MetaStatus::Va, none, b"6 "),
            ]),
        ),
        case(
            "ma wraps at 2^64 and grows a value it outgrows",
            b"set k 0 0 20\r\n18446744073709551615\r\nset p 0 0 2\r\n99\r\n",
            b"ma k v\r\nma p v\r\nmg p v\r\n",
            vec![cmd(b"ma k v\r\n"), cmd(b"ma p v\r\n"), cmd(b"mg p v\r\n")],
            cat(&[
                &meta_reply(b"ma k v\r\n", MetaStatus::Va, none, b"0"),
                &meta_reply(b"ma p v\r\n", MetaStatus::Va, none, b"100"),
                &meta_reply(b"mg p v\r\n", MetaStatus::Va, none, b"100"),
            ]),
        ),
        case(
            "ma: quiet hides HD and VA, not NF or EX",
            b"set k 0 0 1\r\n5\r\n",
            b"ma k q\r\nma k q v\r\nma n q\r\nma k q C1\r\nmg k v\r\n",
            vec![
                cmd(b"ma k q\r\n"),
                cmd(b"ma k q v\r\n"),
                cmd(b"ma n q\r\n"),
                cmd(b"ma k q C1\r\n"),
                cmd(b"mg k v\r\n"),
            ],
            cat(&[b"NF\r\n", b"EX\r\n", &meta_reply(b"mg k v\r\n", MetaStatus::Va, none, b"7")]),
        ),
        case(
            "ma returns the cas and compares it",
            b"set k 0 0 1\r\n5\r\n",
            b"ma k c\r\nma k C1 v\r\n",
            vec![cmd(b"ma k c\r\n"), cmd(b"ma k C1 v\r\n")],
            cat(&[
                &meta_reply(b"ma k c\r\n", MetaStatus::Hd, MetaReturn { cas: Some(1), ..none }, b""),
                &meta_reply(b"ma k C1 v\r\n", MetaStatus::Ex, none, b""),
            ]),
        ),
        case(
            "ma of a value that is not a number",
            b"set k 0 0 1\r\na\r\nset e 0 0 0\r\n\r\nset l 0 0 21\r\n123456789012345678901\r\n",
            b"ma k\r\nma e v\r\nma l v\r\n",
            vec![cmd(b"ma k\r\n"), cmd(b"ma e v\r\n"), cmd(b"ma l v\r\n")],
            cat(&[NonNumeric.reply(), NonNumeric.reply(), NonNumeric.reply()]),
        ),
        case(
            "ma T sets the TTL, t returns it",
            b"set k 0 0 1\r\n5\r\n",
            b"ma k t\r\nma k T30 t v\r\nma k T0 t\r\nma n N10 T20 t\r\n",
            vec![
                cmd(b"ma k t\r\n"),
                cmd(b"ma k T30 t v\r\n"),
                cmd(b"ma k T0 t\r\n"),
                cmd(b"ma n N10 T20 t\r\n"),
            ],
            cat(&[
                &meta_reply(b"ma k t\r\n", MetaStatus::Hd, MetaReturn { ttl: Some(-1), ..none }, b""),
                &meta_reply(b"ma k T30 t v\r\n", MetaStatus::Va, MetaReturn { ttl: Some(30), ..none }, b"7"),
                &meta_reply(b"ma k T0 t\r\n", MetaStatus::Hd, MetaReturn { ttl: Some(-1), ..none }, b""),
                &meta_reply(b"ma n N10 T20 t\r\n", MetaStatus::Hd, MetaReturn { ttl: Some(20), ..none }, b""),
            ]),
        ),
        case(
            "ma takes the flags it ignores, and a base64 key",
            b"set key 0 0 1\r\n1\r\n",
            b"ma a2V5 f s h l u F1 I L P R1\r\nma a2V5 b v k\r\n",
            vec![cmd(b"ma a2V5 f s h l u F1 I L P R1\r\n"), cmd(b"ma a2V5 b v k\r\n")],
            cat(&[
                &meta_reply(b"ma a2V5 f s h l u F1 I L P R1\r\n", MetaStatus::Nf, none, b""),
                &meta_reply(b"ma a2V5 b v k\r\n", MetaStatus::Va, none, b"2"),
            ]),
        ),
        case(
            "ma flag errors",
            b"",
            format!("ma k Z\r\nma k v v\r\nma k Dx\r\nma k D-1\r\nma k MX\r\nma k MIX\r\nma k M\r\nma k Jx\r\nma k N\r\nma k E5\r\nma k b\r\nma k O{}\r\nma {long_key}\r\nma\r\n", "x".repeat(33)).as_bytes(),
            vec![
                err(MetaArithBadFlag { letter: 'Z' }),
                err(MetaArithBadFlag { letter: 'v' }),
                err(MetaArithBadFlag { letter: 'D' }),
                err(MetaArithBadFlag { letter: 'D' }),
                err(MetaArithInvalidMode),
                err(MetaArithBadFlag { letter: 'M' }),
                err(MetaArithBadFlag { letter: 'M' }),
                err(MetaArithBadFlag { letter: 'J' }),
                err(MetaArithBadFlag { letter: 'N' }),
                err(MetaArithBadFlag { letter: 'E' }),
                err(MetaArithBadFlag { letter: 'b' }),
                err(MetaOpaqueTooLong { opaque_bytes: 33, limit: 32 }),
                err(KeyTooLong { key_bytes: 251, limit: 250 }),
                err(UnknownCommand),
            ],
            cat(&[
                &e(&MetaArithBadFlag { letter: 'x' }).repeat(4),
                e(&MetaArithInvalidMode),
                &e(&MetaArithBadFlag { letter: 'x' }).repeat(6),
                e(&MetaOpaqueTooLong { opaque_bytes: 0, limit: 0 }),
                e(&BadFormat),
                e(&UnknownCommand),
            ]),
        ),
        deviation(
            case(
                "ma: quiet hides the HD of an item it created",
                b"",
                b"ma n N0 q\r\nmg n v\r\n",
                vec![cmd(b"ma n N0 q\r\n"), cmd(b"mg n v\r\n")],
                meta_reply(b"mg n v\r\n", MetaStatus::Va, none, b"0"),
            ),
            &cat(&[b"HD\r\n", &meta_reply(b"mg n v\r\n", MetaStatus::Va, none, b"0")]),
        ),
    ];
    v.extend(malformed_storage_lines());
    for c in &mut v {
        assert!(c.request.len() <= TOO_LARGE_BYTES + 64);
    }
    v
}

/// Every storage verb with each field of its line malformed in turn, the data block being the
/// command `mn`: wherever the line carries a readable length, the block must be swallowed (no
/// `MN` in the reply), whatever else is wrong; where it does not, memcached's `ERROR` or
/// `CLIENT_ERROR` and then the block read as a command. memcached 1.6.18's replies are recorded
/// where they differ (it runs the block for a bad key, flags, exptime, unique or token count).
#[rustfmt::skip]
pub fn malformed_storage_lines() -> Vec<Case> {
    use ProtocolError::*;
    let long_key = "k".repeat(251);
    let mn = b"MN\r\n";
    let mut v = Vec::new();
    for verb in ["set", "add", "replace", "append", "prepend", "cas"] {
        let unique = if verb == "cas" { " 1" } else { "" };
        let too_long = KeyTooLong { key_bytes: 251, limit: 250 };
        // (field, line, our error (None: answered without swallowing), memcached's reply).
        let lines: Vec<(&str, String, ProtocolError, bool, Vec<u8>)> = vec![
            ("key too long", format!("{verb} {long_key} 0 0 2{unique}"), too_long, true, cat(&[e(&BadFormat), mn])),
            ("control character in the key", format!("{verb} k\x01 0 0 2{unique}"), KeyControlCharacter { byte: 1 }, true, vec![]),
            ("flags not a number", format!("{verb} k x 0 2{unique}"), BadFormat, true, cat(&[e(&BadFormat), mn])),
            ("negative flags", format!("{verb} k -1 0 2{unique}"), BadFormat, true, cat(&[e(&BadFormat), mn])),
            ("exptime not a number", format!("{verb} k 0 x 2{unique}"), BadFormat, true, cat(&[e(&BadFormat), mn])),
            ("length not a number", format!("{verb} k 0 0 x{unique}"), BadFormat, false, vec![]),
            ("negative length", format!("{verb} k 0 0 -2{unique}"), BadFormat, false, vec![]),
            ("too many tokens", format!("{verb} k 0 0 2{unique} noreply extra"), BadFormat, true, cat(&[e(&UnknownCommand), mn])),
            ("too few tokens", format!("{verb} k 0 0"), UnknownCommand, false, vec![]),
            ("bad flags, noreply", format!("{verb} k x 0 2{unique} noreply"), BadFormat, true, mn.to_vec()),
        ];
        let mut lines = lines;
        if verb == "cas" {
            lines.push(("unique not a number", "cas k 0 0 2 x".into(), BadFormat, true, cat(&[e(&BadFormat), mn])));
            lines.push(("unique missing", "cas k 0 0 2".into(), BadFormat, true, cat(&[e(&UnknownCommand), mn])));
            lines.push(("unique missing, noreply", "cas k 0 0 2 noreply".into(), BadFormat, true, mn.to_vec()));
        }
        for (field, line, error, swallowed, memcached) in lines {
            let quiet = line.ends_with(" noreply");
            let request = format!("{line}\r\nmn\r\n");
            let mut reply = if quiet { vec![] } else { e(&error).to_vec() };
            let outcome = if quiet { err_quiet(error.clone()) } else { err(error.clone()) };
            let mut outcomes = vec![outcome];
            if !swallowed {
                outcomes.push(cmd(b"mn\r\n"));
                reply.extend_from_slice(mn);
            }
            let name: &'static str = format!("{verb}: {field}").leak();
            let c = case(name, b"", request.as_bytes(), outcomes, reply.clone());
            // memcached takes a control character as part of the key and runs the command on
            // an empty cache.
            let memcached = match (field, verb) {
                ("control character in the key", "set" | "add") => Reply::Stored.bytes().to_vec(),
                ("control character in the key", "cas") => Reply::NotFound.bytes().to_vec(),
                ("control character in the key", _) => Reply::NotStored.bytes().to_vec(),
                _ if memcached.is_empty() => reply.clone(),
                _ => memcached,
            };
            v.push(if memcached == reply { c } else { deviation(c, &memcached) });
        }
    }
    // The meta set: its length is the third token.
    let ms: Vec<(&str, String, ProtocolError, bool, Vec<u8>)> = vec![
        ("ms: invalid flag", "ms k 2 zz".into(), MetaInvalidFlag { letter: 'z' }, true, vec![]),
        ("ms: bad token", "ms k 2 T".into(), MetaBadToken { letter: 'T' }, true, vec![]),
        ("ms: bad mode", "ms k 2 MZ".into(), MetaInvalidMode, true, vec![]),
        ("ms: key too long", format!("ms {long_key} 2"), KeyTooLong { key_bytes: 251, limit: 250 }, true, cat(&[e(&BadFormat), mn])),
        ("ms: base64 key that does not decode", "ms k 2 b".into(), MetaKeyDecode, true, vec![]),
        ("ms: quiet with an invalid flag", "ms k 2 q zz".into(), MetaInvalidFlag { letter: 'z' }, true, vec![]),
        ("ms: length not a number", "ms k x".into(), BadFormat, false, vec![]),
        ("ms: negative length", "ms k -2".into(), BadFormat, false, vec![]),
    ];
    for (name, line, error, swallowed, memcached) in ms {
        let request = format!("{line}\r\nmn\r\n");
        let mut reply = e(&error).to_vec();
        let mut outcomes = vec![err(error)];
        if !swallowed {
            outcomes.push(cmd(b"mn\r\n"));
            reply.extend_from_slice(mn);
        }
        let c = case(name, b"", request.as_bytes(), outcomes, reply.clone());
        v.push(if memcached.is_empty() || memcached == reply { c } else { deviation(c, &memcached) });
    }
    v
}
