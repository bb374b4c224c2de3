//! Reply composers (byte for byte as memcached 1.6 sends them) and the request composer (the
//! inverse of the parser, for clients and round-trip tests). Every composer appends to `out`.

use std::fmt::Display;
use std::io::Write;

use crate::command::{ArithOp, Command, Get, Meta, MetaFlags, MetaKind, Store};

/// The replies that are one fixed line.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Reply {
    Stored,
    NotStored,
    Exists,
    NotFound,
    Deleted,
    Touched,
    Ok,
    End,
    Error,
    /// `stats reset`.
    Reset,
}

impl Reply {
    /// The line, `\r\n` included.
    pub fn bytes(self) -> &'static [u8] {
        match self {
            Reply::Stored => b"STORED\r\n",
            Reply::NotStored => b"NOT_STORED\r\n",
            Reply::Exists => b"EXISTS\r\n",
            Reply::NotFound => b"NOT_FOUND\r\n",
            Reply::Deleted => b"DELETED\r\n",
            Reply::Touched => b"TOUCHED\r\n",
            Reply::Ok => b"OK\r\n",
            Reply::End => b"END\r\n",
            Reply::Error => b"ERROR\r\n",
            Reply::Reset => b"RESET\r\n",
        }
    }
}

/// Appends a fixed reply line.
pub fn reply(out: &mut Vec<u8>, r: Reply) {
    out.extend_from_slice(r.bytes());
}

/// Bytes of a `VALUE` line besides its key: `VALUE `, flags (u32), length and CAS (u64
/// each), three spaces and `\r\n`.
const VALUE_LINE_MAX: usize = 6 + 10 + 20 + 20 + 3 + 2;

/// `VALUE <key> <flags> <bytes>[ <cas>]\r\n<data>\r\n`: one hit of `get` (cas `None`) or
/// `gets`/`gats` (cas `Some`). Follow the hits with [`Reply::End`].
pub fn value(out: &mut Vec<u8>, key: &[u8], flags: u32, data: &[u8], cas: Option<u64>) {
    // Room for the whole line, the data and an `END\r\n` after it at once: grown piece by
    // piece, a buffer would double past the value's size (and a server that gives back large
    // idle buffers would allocate it again for every reply).
    out.reserve(VALUE_LINE_MAX + key.len() + data.len() + 2 + 5);
    value_line(out, key, flags, data.len(), cas);
    out.extend_from_slice(data);
    out.extend_from_slice(b"\r\n");
}

/// The `VALUE` line alone of a `get` hit whose data is `len` bytes: for a server that sends
/// the data from where it lies, after this line, then `\r\n` (and `END\r\n` after the last).
pub fn value_line(out: &mut Vec<u8>, key: &[u8], flags: u32, len: usize, cas: Option<u64>) {
    out.extend_from_slice(b"VALUE ");
    out.extend_from_slice(key);
    let _ = write!(out, " {flags} {len}");
    if let Some(c) = cas {
        let _ = write!(out, " {c}");
    }
    out.extend_from_slice(b"\r\n");
}

/// The reply of a successful `incr`/`decr`: the new value.
pub fn number(out: &mut Vec<u8>, n: u64) {
    let _ = write!(out, "{n}\r\n");
}

/// One `STAT <name> <value>\r\n` line; end the list with [`Reply::End`].
pub fn stat(out: &mut Vec<u8>, name: &str, value: impl Display) {
    let _ = write!(out, "STAT {name} {value}\r\n");
}

/// `VERSION <version>\r\n`.
pub fn version(out: &mut Vec<u8>, version: &str) {
    let _ = write!(out, "VERSION {version}\r\n");
}

/// `CLIENT_ERROR <message>\r\n`: the request was wrong; retrying it will not help.
pub fn client_error(out: &mut Vec<u8>, message: &str) {
    let _ = write!(out, "CLIENT_ERROR {message}\r\n");
}

/// `SERVER_ERROR <message>\r\n`: the server could not do it; a retry may succeed.
pub fn server_error(out: &mut Vec<u8>, message: &str) {
    let _ = write!(out, "SERVER_ERROR {message}\r\n");
}

/// The status word of a meta reply.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum MetaStatus {
    /// Success without a value.
    Hd,
    /// Success with a value (mg with `v`).
    Va,
    /// mg: miss.
    En,
    /// ms: not stored (mode condition failed).
    Ns,
    /// ms/md: CAS mismatch.
    Ex,
    /// ms (with `C`)/md: not found.
    Nf,
}

impl MetaStatus {
    pub fn word(self) -> &'static [u8] {
        match self {
            MetaStatus::Hd => b"HD",
            MetaStatus::Va => b"VA",
            MetaStatus::En => b"EN",
            MetaStatus::Ns => b"NS",
            MetaStatus::Ex => b"EX",
            MetaStatus::Nf => b"NF",
        }
    }

    /// Whether `q` suppresses this reply for the command, as memcached 1.6.18 does: mg hides
    /// `EN`; ms and md hide `HD`; ma hides `HD` and `VA` (its successes). Errors and other
    /// statuses are always sent.
    pub fn is_quiet_for(self, kind: MetaKind) -> bool {
        matches!(
            (kind, self),
            (MetaKind::Get, MetaStatus::En)
                | (MetaKind::Set, MetaStatus::Hd)
                | (MetaKind::Delete, MetaStatus::Hd)
                | (MetaKind::Arith, MetaStatus::Hd | MetaStatus::Va)
        )
    }
}

/// What an item can return through meta flags. A requested flag whose value is `None` is
/// left out of the reply.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MetaReturn {
    /// `s`: value size in bytes.
    pub size: Option<u64>,
    /// `f`: client flags.
    pub client_flags: Option<u32>,
    /// `t`: remaining TTL in seconds, -1 for none.
    pub ttl: Option<i64>,
    /// `c`: CAS value.
    pub cas: Option<u64>,
}

/// A meta reply: `<status>[ <size>]<return flags>\r\n` and, for [`MetaStatus::Va`], the
/// value and `\r\n`. Return flags follow the request order of `meta.flags.list`: `k` (the key
/// as sent, then ` b` when base64) and `O` always; `s f t c` from `ret` except on `EN`.
/// Does not apply quiet mode; check [`MetaStatus::is_quiet_for`] first.
pub fn meta(out: &mut Vec<u8>, status: MetaStatus, meta: &Meta, ret: &MetaReturn, data: &[u8]) {
    out.extend_from_slice(status.word());
    if status == MetaStatus::Va {
        let _ = write!(out, " {}", data.len());
    }
    meta_return_flags(out, status, meta.key, &meta.flags, ret);
    out.extend_from_slice(b"\r\n");
    if status == MetaStatus::Va {
        out.extend_from_slice(data);
        out.extend_from_slice(b"\r\n");
    }
}

fn meta_return_flags(
    out: &mut Vec<u8>,
    status: MetaStatus,
    key: &[u8],
    flags: &MetaFlags,
    ret: &MetaReturn,
) {
    let item = status != MetaStatus::En;
    for f in &flags.list {
        match f.letter {
            b'k' => {
                out.extend_from_slice(b" k");
                out.extend_from_slice(key);
                if flags.base64 {
                    out.extend_from_slice(b" b");
                }
            }
            b'O' => {
                out.extend_from_slice(b" O");
                out.extend_from_slice(f.token);
            }
            b's' if item => {
                if let Some(v) = ret.size {
                    let _ = write!(out, " s{v}");
                }
            }
            b'f' if item => {
                if let Some(v) = ret.client_flags {
                    let _ = write!(out, " f{v}");
                }
            }
            b't' if item => {
                if let Some(v) = ret.ttl {
                    let _ = write!(out, " t{v}");
                }
            }
            b'c' if item => {
                if let Some(v) = ret.cas {
                    let _ = write!(out, " c{v}");
                }
            }
            _ => {}
        }
    }
}

/// `MN\r\n`.
pub fn meta_noop(out: &mut Vec<u8>) {
    out.extend_from_slice(b"MN\r\n");
}

/// The result of `incr`/`decr` on a stored value.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct IncrDecr {
    /// The new number (the reply).
    pub number: u64,
    /// The new stored value. As memcached: when the new number has no more digits than the old
    /// value had bytes, the value keeps its length, padded with spaces (`decr` of `100` by 1
    /// stores `99 `); otherwise it is exactly the digits.
    pub value: Vec<u8>,
}

/// The stored value is not a number `incr`/`decr` can work on.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("cannot increment or decrement non-numeric value")]
pub struct NonNumeric;

impl NonNumeric {
    /// memcached's reply line.
    pub fn reply(&self) -> &'static [u8] {
        b"CLIENT_ERROR cannot increment or decrement non-numeric value\r\n"
    }
}

/// memcached's `incr`/`decr` on a value: the value is read as `strtoull` reads it (leading
/// white space, digits, then white space or the end; at most 2^64 - 1); `incr` wraps at 2^64,
/// `decr` stops at 0.
pub fn incr_decr(value: &[u8], op: ArithOp, delta: u64) -> Result<IncrDecr, NonNumeric> {
    let current = stored_number(value).ok_or(NonNumeric)?;
    let number = match op {
        ArithOp::Incr => current.wrapping_add(delta),
        ArithOp::Decr => current.saturating_sub(delta),
    };
    let mut new = number.to_string().into_bytes();
    if new.len() <= value.len() {
        new.resize(value.len(), b' ');
    }
    Ok(IncrDecr { number, value: new })
}

fn stored_number(value: &[u8]) -> Option<u64> {
    let is_space = |b: u8| matches!(b, b' ' | b'\t' | b'\n' | b'\x0b' | b'\x0c' | b'\r');
    if value.is_empty() {
        return None;
    }
    let start = value.iter().position(|&b| !is_space(b))?;
    let rest = &value[start..];
    let mut end = usize::from(matches!(rest.first(), Some(b'+' | b'-')));
    while end < rest.len() && rest[end].is_ascii_digit() {
        end += 1;
    }
    if end < rest.len() && !is_space(rest[end]) {
        return None;
    }
    crate::number::strtoull(&rest[..end])
}

/// Appends the request bytes of a command (the inverse of the parser): what a client sends.
pub fn request(out: &mut Vec<u8>, command: &Command) {
    match command {
        Command::Store(Store {
            mode,
            key,
            flags,
            exptime,
            cas_unique,
            noreply,
            data,
        }) => {
            out.extend_from_slice(mode.name().as_bytes());
            out.push(b' ');
            out.extend_from_slice(key);
            let _ = write!(out, " {flags} {exptime} {}", data.len());
            if *mode == crate::StoreMode::Cas {
                let _ = write!(out, " {cas_unique}");
            }
            noreply_suffix(out, *noreply);
            out.extend_from_slice(b"\r\n");
            out.extend_from_slice(data);
            out.extend_from_slice(b"\r\n");
        }
        Command::Get(Get {
            kind,
            exptime,
            keys,
        }) => {
            out.extend_from_slice(kind.name().as_bytes());
            if let Some(e) = exptime {
                let _ = write!(out, " {e}");
            }
            for k in keys {
                out.push(b' ');
                out.extend_from_slice(k);
            }
            out.extend_from_slice(b"\r\n");
        }
        Command::Touch {
            key,
            exptime,
            noreply,
        } => {
            out.extend_from_slice(b"touch ");
            out.extend_from_slice(key);
            let _ = write!(out, " {exptime}");
            noreply_suffix(out, *noreply);
            out.extend_from_slice(b"\r\n");
        }
        Command::Delete { key, noreply } => {
            out.extend_from_slice(b"delete ");
            out.extend_from_slice(key);
            noreply_suffix(out, *noreply);
            out.extend_from_slice(b"\r\n");
        }
        Command::Arith {
            op,
            key,
            delta,
            noreply,
        } => {
            out.extend_from_slice(match op {
                ArithOp::Incr => b"incr ",
                ArithOp::Decr => b"decr ",
            });
            out.extend_from_slice(key);
            let _ = write!(out, " {delta}");
            noreply_suffix(out, *noreply);
            out.extend_from_slice(b"\r\n");
        }
        Command::FlushAll { delay, noreply } => {
            out.extend_from_slice(b"flush_all");
            if let Some(d) = delay {
                let _ = write!(out, " {d}");
            }
            noreply_suffix(out, *noreply);
            out.extend_from_slice(b"\r\n");
        }
        Command::Stats { group, args } => {
            out.extend_from_slice(b"stats");
            for t in group.iter().chain(args.iter()) {
                out.push(b' ');
                out.extend_from_slice(t);
            }
            out.extend_from_slice(b"\r\n");
        }
        Command::Version => out.extend_from_slice(b"version\r\n"),
        Command::Quit => out.extend_from_slice(b"quit\r\n"),
        Command::Verbosity { level, noreply } => {
            let _ = write!(out, "verbosity {level}");
            noreply_suffix(out, *noreply);
            out.extend_from_slice(b"\r\n");
        }
        Command::MetaNoop => out.extend_from_slice(b"mn\r\n"),
        Command::MetaGet(m) => meta_request(out, b"mg", m, None),
        Command::MetaDelete(m) => meta_request(out, b"md", m, None),
        Command::MetaArith(m) => meta_request(out, b"ma", m, None),
        Command::MetaSet(s) => meta_request(out, b"ms", &s.meta, Some(s.data)),
    }
}

fn noreply_suffix(out: &mut Vec<u8>, noreply: bool) {
    if noreply {
        out.extend_from_slice(b" noreply");
    }
}

fn meta_request(out: &mut Vec<u8>, word: &[u8], m: &Meta, data: Option<&[u8]>) {
    out.extend_from_slice(word);
    out.push(b' ');
    out.extend_from_slice(m.key);
    if let Some(d) = data {
        let _ = write!(out, " {}", d.len());
    }
    for f in &m.flags.list {
        out.push(b' ');
        out.push(f.letter);
        out.extend_from_slice(f.token);
    }
    out.extend_from_slice(b"\r\n");
    if let Some(d) = data {
        out.extend_from_slice(d);
        out.extend_from_slice(b"\r\n");
    }
}
