//! The streaming request parser.

use crate::command::{
    ArithOp, Command, Get, GetKind, Meta, MetaFlag, MetaFlags, MetaKind, MetaMode, MetaSet, Store,
    StoreMode,
};
use crate::{base64, number};

/// memcached's `KEY_MAX_LENGTH`.
pub const KEY_MAX_BYTES: usize = 250;
/// The longest command line without data that is read (memcached: 2048 bytes before it gives
/// up on a line that has no end).
pub const LINE_MAX_BYTES: usize = 2048;
/// The default item size limit (memcached `-I 1m`).
pub const ITEM_SIZE_MAX_BYTES: usize = 1 << 20;
/// The default bound of a `get`/`gets`/`gat`/`gats` line with many keys (memcached has none).
pub const GET_LINE_MAX_BYTES: usize = 1 << 20;
/// memcached's bound on the opaque token of meta commands.
pub const OPAQUE_MAX_BYTES: usize = 32;

/// The limits the parser enforces.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Largest value of a storage command (`-I`); a larger one is refused with
    /// `SERVER_ERROR object too large for cache` and its data block swallowed.
    pub item_size_max_bytes: usize,
    /// Longest command line, `\r\n` included, of every command but the get family.
    pub line_max_bytes: usize,
    /// Longest `get`/`gets`/`gat`/`gats` line, `\r\n` included.
    pub get_line_max_bytes: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            item_size_max_bytes: ITEM_SIZE_MAX_BYTES,
            line_max_bytes: LINE_MAX_BYTES,
            get_line_max_bytes: GET_LINE_MAX_BYTES,
        }
    }
}

impl Limits {
    /// The most bytes a caller must be able to hold for one request: the longest line plus the
    /// largest data block and its `\r\n`.
    pub fn request_max_bytes(&self) -> usize {
        self.line_max_bytes.max(self.get_line_max_bytes) + self.item_size_max_bytes + 2
    }
}

/// A request the parser refuses. [`ProtocolError::reply`] is memcached's reply for it.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ProtocolError {
    #[error("unknown command or wrong number of tokens")]
    UnknownCommand,
    #[error("bad command line format")]
    BadFormat,
    #[error("key of {key_bytes} bytes is longer than the limit of {limit} bytes")]
    KeyTooLong { key_bytes: usize, limit: usize },
    #[error("key contains control character 0x{byte:02x}")]
    KeyControlCharacter { byte: u8 },
    #[error("bad delete arguments (usage: delete <key> [noreply])")]
    BadDeleteFormat,
    #[error("invalid exptime argument")]
    InvalidExptime,
    #[error("invalid numeric delta argument")]
    InvalidDelta,
    #[error("value of {value_bytes} bytes is larger than the item size limit of {limit} bytes")]
    TooLarge { value_bytes: u64, limit: usize },
    #[error("data block does not end with \\r\\n")]
    BadDataChunk,
    #[error(
        "command line of {line_bytes} bytes or more is longer than the limit of {limit} bytes"
    )]
    LineTooLong { line_bytes: usize, limit: usize },
    #[error("invalid meta flag {letter:?}")]
    MetaInvalidFlag { letter: char },
    #[error("meta flag {letter:?} given twice")]
    MetaDuplicateFlag { letter: char },
    #[error("bad token for meta flag {letter:?}")]
    MetaBadToken { letter: char },
    #[error("opaque token of {opaque_bytes} bytes is longer than the limit of {limit} bytes")]
    MetaOpaqueTooLong { opaque_bytes: usize, limit: usize },
    #[error("invalid mode for ms M token")]
    MetaInvalidMode,
    #[error("ms M token is not one letter")]
    MetaModeLength,
    /// md answers every bad flag alike.
    #[error("invalid, duplicate or bad meta delete flag {letter:?}")]
    MetaDeleteBadFlag { letter: char },
    /// ma answers every bad flag alike too (and a base64 key that does not decode), but
    /// [`ProtocolError::MetaArithInvalidMode`].
    #[error("invalid, duplicate or bad meta arithmetic flag {letter:?}")]
    MetaArithBadFlag { letter: char },
    #[error("invalid mode for ma M token")]
    MetaArithInvalidMode,
    #[error("base64 key does not decode")]
    MetaKeyDecode,
    /// An unknown command whose last token starts with `HTTP/`: a browser or proxy talking
    /// HTTP to the cache port (perhaps sent by a web page, cross-protocol). memcached hangs up
    /// without a reply, and so does inec.
    #[error("an HTTP request line on the memcached port")]
    HttpRequest,
}

impl ProtocolError {
    /// The reply line, `\r\n` included, byte for byte as memcached 1.6 sends it (for
    /// [`ProtocolError::LineTooLong`], where memcached closes silently, a `CLIENT_ERROR` line
    /// before the close; see docs/protocol.md).
    pub fn reply(&self) -> &'static [u8] {
        use ProtocolError::*;
        match self {
            UnknownCommand => b"ERROR\r\n",
            BadFormat | KeyTooLong { .. } | KeyControlCharacter { .. } => {
                b"CLIENT_ERROR bad command line format\r\n"
            }
            BadDeleteFormat => {
                b"CLIENT_ERROR bad command line format.  Usage: delete <key> [noreply]\r\n"
            }
            InvalidExptime => b"CLIENT_ERROR invalid exptime argument\r\n",
            InvalidDelta => b"CLIENT_ERROR invalid numeric delta argument\r\n",
            TooLarge { .. } => b"SERVER_ERROR object too large for cache\r\n",
            BadDataChunk => b"CLIENT_ERROR bad data chunk\r\n",
            LineTooLong { .. } => b"CLIENT_ERROR line too long\r\n",
            MetaInvalidFlag { .. } => b"CLIENT_ERROR invalid flag\r\n",
            MetaDuplicateFlag { .. } => b"CLIENT_ERROR duplicate flag\r\n",
            MetaBadToken { .. } => b"CLIENT_ERROR bad token in command line format\r\n",
            MetaOpaqueTooLong { .. } => b"CLIENT_ERROR opaque token too long\r\n",
            MetaInvalidMode => b"CLIENT_ERROR invalid mode for ms M token\r\n",
            MetaModeLength => b"CLIENT_ERROR incorrect length for M token\r\n",
            MetaDeleteBadFlag { .. } | MetaArithBadFlag { .. } => {
                b"CLIENT_ERROR invalid or duplicate flag\r\n"
            }
            MetaArithInvalidMode => b"CLIENT_ERROR invalid mode for ma M token\r\n",
            MetaKeyDecode => b"CLIENT_ERROR error decoding key\r\n",
            HttpRequest => b"",
        }
    }

    /// Whether the connection must be closed after the reply (the parser cannot find the
    /// start of the next command, or the peer speaks HTTP).
    pub fn closes_connection(&self) -> bool {
        matches!(
            self,
            ProtocolError::LineTooLong { .. } | ProtocolError::HttpRequest
        )
    }
}

/// One step of the parser over the front of the caller's buffer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Parse<'a> {
    /// Not a whole command yet: read more bytes and call again with the buffer extended.
    /// Nothing was consumed.
    Incomplete,
    /// A command; drop `consumed` bytes from the front of the buffer once done with it.
    Command {
        command: Command<'a>,
        consumed: usize,
    },
    /// A refused request: send `error.reply()` unless `noreply`, drop `consumed` bytes, and
    /// close the connection if `error.closes_connection()`. When the request announced a data
    /// block, the part of it not yet in the buffer is dropped by later calls
    /// ([`Parse::Swallowed`]), so it is never read as commands.
    Error {
        error: ProtocolError,
        consumed: usize,
        noreply: bool,
        /// The key whose current value the refusal removes, as memcached unlinks it: a `set`,
        /// `append`, `prepend` or `ms` refused as too large must not leave the value it meant
        /// to overwrite behind (`add`, `replace` and `cas` keep it, as in memcached).
        unlink: Option<Vec<u8>>,
    },
    /// `consumed` bytes of a refused request's data block were dropped; no reply.
    Swallowed { consumed: usize },
}

/// The streaming parser of one connection. Its only state is the number of bytes of a refused
/// data block still to be dropped.
#[derive(Clone, Debug, Default)]
pub struct Parser {
    limits: Limits,
    /// Bytes of a refused request's data block that have not arrived yet; they are dropped
    /// before anything else is parsed.
    swallow_bytes: u64,
}

impl Parser {
    pub fn new(limits: Limits) -> Parser {
        Parser {
            limits,
            swallow_bytes: 0,
        }
    }

    pub fn limits(&self) -> &Limits {
        &self.limits
    }

    /// Bytes of a refused data block still to be dropped.
    pub fn swallow_bytes(&self) -> u64 {
        self.swallow_bytes
    }

    /// Parses the command at the front of `buf`.
    pub fn parse<'a>(&mut self, buf: &'a [u8]) -> Parse<'a> {
        if self.swallow_bytes > 0 {
            if buf.is_empty() {
                return Parse::Incomplete;
            }
            let n = (buf.len() as u64).min(self.swallow_bytes);
            self.swallow_bytes -= n;
            return Parse::Swallowed {
                consumed: n as usize,
            };
        }
        match parse_request(buf, &self.limits) {
            Step::Incomplete => Parse::Incomplete,
            Step::Command(command, consumed) => Parse::Command { command, consumed },
            Step::Error {
                error,
                line_bytes,
                swallow,
                noreply,
                unlink,
            } => {
                let total = line_bytes as u64 + swallow;
                let consumed = total.min(buf.len() as u64);
                self.swallow_bytes = total - consumed;
                Parse::Error {
                    error,
                    consumed: consumed as usize,
                    noreply,
                    unlink,
                }
            }
        }
    }
}

enum Step<'a> {
    Incomplete,
    Command(Command<'a>, usize),
    Error {
        error: ProtocolError,
        /// The request line, `\n` included (or the whole buffer for a line that is too long).
        line_bytes: usize,
        /// Bytes of the announced data block (with its `\r\n`) to drop after the line.
        swallow: u64,
        noreply: bool,
        unlink: Option<Vec<u8>>,
    },
}

fn line_error<'a>(error: ProtocolError, line_bytes: usize, noreply: bool) -> Step<'a> {
    Step::Error {
        error,
        line_bytes,
        swallow: 0,
        noreply,
        unlink: None,
    }
}

fn is_get_family(word: &[u8]) -> bool {
    matches!(word, b"get" | b"gets" | b"gat" | b"gats")
}

fn first_token(buf: &[u8]) -> &[u8] {
    let start = buf.iter().position(|&b| b != b' ').unwrap_or(buf.len());
    let rest = &buf[start..];
    let end = rest
        .iter()
        .position(|&b| b == b' ' || b == b'\r' || b == b'\n')
        .unwrap_or(rest.len());
    &rest[..end]
}

fn parse_request<'a>(buf: &'a [u8], limits: &Limits) -> Step<'a> {
    let nl = buf.iter().position(|&b| b == b'\n');
    let word = first_token(&buf[..nl.unwrap_or(buf.len())]);
    let limit = if is_get_family(word) {
        limits.get_line_max_bytes
    } else {
        limits.line_max_bytes
    };
    let Some(nl) = nl else {
        if buf.len() > limit {
            return line_error(
                ProtocolError::LineTooLong {
                    line_bytes: buf.len(),
                    limit,
                },
                buf.len(),
                false,
            );
        }
        return Step::Incomplete;
    };
    let line_bytes = nl + 1;
    // The limit counts a line as if it ended in `\r\n`, so that a line ending in a bare `\n`
    // and the same line as composed (with `\r\n`) are both accepted or both refused.
    let charged = if nl > 0 && buf[nl - 1] == b'\r' {
        line_bytes
    } else {
        line_bytes + 1
    };
    if charged > limit {
        return line_error(
            ProtocolError::LineTooLong {
                line_bytes: charged,
                limit,
            },
            line_bytes,
            false,
        );
    }
    let mut line = &buf[..nl];
    if line.len() > 1 && line[line.len() - 1] == b'\r' {
        line = &line[..line.len() - 1];
    }
    // The tokens: on the stack, but those of a line longer than most (a `get` of many keys).
    let mut few: [&'a [u8]; FEW_TOKENS] = [&[]; FEW_TOKENS];
    let mut many: Vec<&'a [u8]> = Vec::new();
    let mut count = 0;
    for t in line.split(|&b| b == b' ').filter(|t| !t.is_empty()) {
        if count < FEW_TOKENS {
            few[count] = t;
        } else {
            if many.is_empty() {
                many.extend_from_slice(&few);
            }
            many.push(t);
        }
        count += 1;
    }
    let tokens = if count <= FEW_TOKENS {
        &few[..count]
    } else {
        &many[..]
    };
    parse_line(tokens, line_bytes, &buf[line_bytes..], limits)
}

/// Tokens a request line is split into without allocating.
const FEW_TOKENS: usize = 16;

/// `noreply` as memcached's `set_noreply_maybe`: the last token is `noreply`.
fn last_is_noreply(tokens: &[&[u8]]) -> bool {
    tokens.last().is_some_and(|t| *t == b"noreply")
}

pub(crate) fn check_key(key: &[u8]) -> Result<(), ProtocolError> {
    if key.len() > KEY_MAX_BYTES {
        return Err(ProtocolError::KeyTooLong {
            key_bytes: key.len(),
            limit: KEY_MAX_BYTES,
        });
    }
    if let Some(&byte) = key.iter().find(|&&b| b < 0x20 || b == 0x7f) {
        return Err(ProtocolError::KeyControlCharacter { byte });
    }
    Ok(())
}

/// The refusal of a line that names no command: `ERROR`, or a hang-up when it looks like an
/// HTTP request line (memcached's rule: the last token starts with `HTTP/`).
fn unknown_command<'a>(tokens: &[&[u8]], line_bytes: usize) -> Step<'a> {
    let error = if tokens.last().is_some_and(|t| t.starts_with(b"HTTP/")) {
        ProtocolError::HttpRequest
    } else {
        ProtocolError::UnknownCommand
    };
    line_error(error, line_bytes, false)
}

fn parse_line<'a>(
    tokens: &[&'a [u8]],
    line_bytes: usize,
    rest: &'a [u8],
    limits: &Limits,
) -> Step<'a> {
    use ProtocolError::*;
    let n = tokens.len();
    if n == 0 || tokens[0].len() < 2 {
        return unknown_command(tokens, line_bytes);
    }
    let done = |command: Command<'a>| Step::Command(command, line_bytes);
    let noreply = last_is_noreply(tokens);
    match tokens[0] {
        b"get" | b"gets" | b"gat" | b"gats" => {
            let kind = match tokens[0] {
                b"get" => GetKind::Get,
                b"gets" => GetKind::Gets,
                b"gat" => GetKind::Gat,
                _ => GetKind::Gats,
            };
            if n < 2 {
                return line_error(UnknownCommand, line_bytes, false);
            }
            let (exptime, keys) = if matches!(kind, GetKind::Gat | GetKind::Gats) {
                let Some(e) = number::strtol(tokens[1]) else {
                    return line_error(InvalidExptime, line_bytes, false);
                };
                (Some(e), &tokens[2..])
            } else {
                (None, &tokens[1..])
            };
            // memcached answers `gat <exptime>` without keys with `END`, `get` with `ERROR`.
            if keys.is_empty() && exptime.is_none() {
                return line_error(UnknownCommand, line_bytes, false);
            }
            for k in keys {
                if let Err(e) = check_key(k) {
                    return line_error(e, line_bytes, false);
                }
            }
            done(Command::Get(Get {
                kind,
                exptime,
                keys: keys.to_vec(),
            }))
        }
        b"set" | b"add" | b"replace" | b"append" | b"prepend" | b"cas" => {
            let mode = match tokens[0] {
                b"set" => StoreMode::Set,
                b"add" => StoreMode::Add,
                b"replace" => StoreMode::Replace,
                b"append" => StoreMode::Append,
                b"prepend" => StoreMode::Prepend,
                _ => StoreMode::Cas,
            };
            let base = if mode == StoreMode::Cas { 6 } else { 5 };
            if n != base && n != base + 1 {
                // A length where the length belongs announces a data block, whatever else is
                // wrong with the line: it is dropped, never read as commands (a client that lets
                // a user choose a value could otherwise be made to send any command).
                if let Some(data_bytes) = tokens.get(4).and_then(|t| data_length(t)) {
                    return Step::Error {
                        error: BadFormat,
                        line_bytes,
                        swallow: data_bytes + 2,
                        noreply,
                        unlink: None,
                    };
                }
                return line_error(UnknownCommand, line_bytes, false);
            }
            parse_store(mode, tokens, noreply, line_bytes, rest, limits)
        }
        b"touch" => {
            if n != 3 && n != 4 {
                return line_error(UnknownCommand, line_bytes, false);
            }
            if let Err(e) = check_key(tokens[1]) {
                return line_error(e, line_bytes, noreply);
            }
            let Some(exptime) = number::strtol(tokens[2]) else {
                return line_error(InvalidExptime, line_bytes, noreply);
            };
            done(Command::Touch {
                key: tokens[1],
                exptime,
                noreply,
            })
        }
        b"delete" => {
            if !(2..=4).contains(&n) {
                return line_error(UnknownCommand, line_bytes, false);
            }
            if n > 2 {
                let hold_is_zero = tokens[2] == b"0";
                let valid =
                    (n == 3 && (hold_is_zero || noreply)) || (n == 4 && hold_is_zero && noreply);
                if !valid {
                    return line_error(BadDeleteFormat, line_bytes, noreply);
                }
            }
            if let Err(e) = check_key(tokens[1]) {
                return line_error(e, line_bytes, noreply);
            }
            done(Command::Delete {
                key: tokens[1],
                noreply,
            })
        }
        b"incr" | b"decr" => {
            if n != 3 && n != 4 {
                return line_error(UnknownCommand, line_bytes, false);
            }
            if let Err(e) = check_key(tokens[1]) {
                return line_error(e, line_bytes, noreply);
            }
            let Some(delta) = number::strtoull(tokens[2]) else {
                return line_error(InvalidDelta, line_bytes, noreply);
            };
            let op = if tokens[0] == b"incr" {
                ArithOp::Incr
            } else {
                ArithOp::Decr
            };
            done(Command::Arith {
                op,
                key: tokens[1],
                delta,
                noreply,
            })
        }
        b"flush_all" => {
            if n > 3 {
                return line_error(UnknownCommand, line_bytes, false);
            }
            let delay = if n != if noreply { 2 } else { 1 } {
                match number::strtol(tokens[1]) {
                    Some(d) => Some(d),
                    None => return line_error(InvalidExptime, line_bytes, noreply),
                }
            } else {
                None
            };
            done(Command::FlushAll { delay, noreply })
        }
        b"stats" => done(Command::Stats {
            group: tokens.get(1).copied(),
            args: tokens.get(2..).unwrap_or_default().to_vec(),
        }),
        b"version" => done(Command::Version),
        b"quit" => done(Command::Quit),
        b"verbosity" => {
            if n != 2 && n != 3 {
                return line_error(UnknownCommand, line_bytes, false);
            }
            let Some(level) = number::strtoul(tokens[1]).and_then(|l| u32::try_from(l).ok()) else {
                return line_error(BadFormat, line_bytes, noreply);
            };
            done(Command::Verbosity { level, noreply })
        }
        b"mn" => done(Command::MetaNoop),
        b"mg" | b"md" => {
            if n < 2 {
                return line_error(UnknownCommand, line_bytes, false);
            }
            let kind = if tokens[0] == b"mg" {
                MetaKind::Get
            } else {
                MetaKind::Delete
            };
            match parse_meta(kind, tokens[1], &tokens[2..]).map_err(|e| delete_error(kind, e)) {
                Ok(meta) => done(if kind == MetaKind::Get {
                    Command::MetaGet(meta)
                } else {
                    Command::MetaDelete(meta)
                }),
                Err(e) => line_error(e, line_bytes, false),
            }
        }
        b"ma" => {
            if n < 2 {
                return line_error(UnknownCommand, line_bytes, false);
            }
            match parse_meta(MetaKind::Arith, tokens[1], &tokens[2..]).map_err(arith_error) {
                Ok(meta) => done(Command::MetaArith(meta)),
                Err(e) => line_error(e, line_bytes, false),
            }
        }
        b"ms" => {
            if n < 2 {
                return line_error(UnknownCommand, line_bytes, false);
            }
            if n < 3 {
                return line_error(BadFormat, line_bytes, false);
            }
            let Some(data_bytes) = data_length(tokens[2]) else {
                return line_error(BadFormat, line_bytes, false);
            };
            let swallow = data_bytes + 2;
            let refuse = |error| Step::Error {
                error,
                line_bytes,
                swallow,
                noreply: false,
                unlink: None,
            };
            let meta = match parse_meta(MetaKind::Set, tokens[1], &tokens[3..]) {
                Ok(m) => m,
                Err(e) => return refuse(e),
            };
            if data_bytes > limits.item_size_max_bytes as u64 {
                // memcached unlinks the key whatever the mode.
                let key = meta.key_bytes().into_owned();
                return too_large(data_bytes, limits, line_bytes, false, Some(key));
            }
            match data_block(rest, data_bytes as usize) {
                None => Step::Incomplete,
                Some(Err(())) => refuse(BadDataChunk),
                Some(Ok(data)) => Step::Command(
                    Command::MetaSet(MetaSet { meta, data }),
                    line_bytes + data_bytes as usize + 2,
                ),
            }
        }
        _ => unknown_command(tokens, line_bytes),
    }
}

/// md answers every flag error with one message.
fn delete_error(kind: MetaKind, e: ProtocolError) -> ProtocolError {
    use ProtocolError::*;
    match (kind, e) {
        (
            MetaKind::Delete,
            MetaInvalidFlag { letter } | MetaDuplicateFlag { letter } | MetaBadToken { letter },
        ) => MetaDeleteBadFlag { letter },
        (_, e) => e,
    }
}

/// ma answers every flag error (a base64 key that does not decode included) with one message,
/// but a mode letter it does not know.
fn arith_error(e: ProtocolError) -> ProtocolError {
    use ProtocolError::*;
    match e {
        MetaInvalidFlag { letter } | MetaDuplicateFlag { letter } | MetaBadToken { letter } => {
            MetaArithBadFlag { letter }
        }
        MetaModeLength => MetaArithBadFlag { letter: 'M' },
        MetaKeyDecode => MetaArithBadFlag { letter: 'b' },
        e => e,
    }
}

/// A data length as memcached accepts it: a `strtol` number in 0..=i32::MAX - 2.
fn data_length(token: &[u8]) -> Option<u64> {
    let v = number::strtol(token)?;
    (0..=i64::from(i32::MAX) - 2)
        .contains(&v)
        .then_some(v as u64)
}

/// A storage command refused for its value's size: its data block is swallowed, and `unlink`
/// names the key whose value the refusal removes (see [`Parse::Error`]).
fn too_large<'a>(
    data_bytes: u64,
    limits: &Limits,
    line_bytes: usize,
    noreply: bool,
    unlink: Option<Vec<u8>>,
) -> Step<'a> {
    Step::Error {
        error: ProtocolError::TooLarge {
            value_bytes: data_bytes,
            limit: limits.item_size_max_bytes,
        },
        line_bytes,
        swallow: data_bytes + 2,
        noreply,
        unlink,
    }
}

/// The data block at the front of `rest`: `None` if not all there yet, `Err` if it does not
/// end with `\r\n`.
fn data_block(rest: &[u8], data_bytes: usize) -> Option<Result<&[u8], ()>> {
    if rest.len() < data_bytes + 2 {
        return None;
    }
    if &rest[data_bytes..data_bytes + 2] != b"\r\n" {
        return Some(Err(()));
    }
    Some(Ok(&rest[..data_bytes]))
}

fn parse_store<'a>(
    mode: StoreMode,
    tokens: &[&'a [u8]],
    noreply: bool,
    line_bytes: usize,
    rest: &'a [u8],
    limits: &Limits,
) -> Step<'a> {
    use ProtocolError::*;
    // The length decides whether the data block can be swallowed, so it is read first.
    let data_bytes = data_length(tokens[4]);
    let swallow = data_bytes.map_or(0, |b| b + 2);
    let refuse = |error| Step::Error {
        error,
        line_bytes,
        swallow,
        noreply,
        unlink: None,
    };
    if let Err(e) = check_key(tokens[1]) {
        return refuse(e);
    }
    let flags = number::strtoul(tokens[2]).and_then(|f| u32::try_from(f).ok());
    let exptime = number::strtol(tokens[3]);
    let (Some(flags), Some(exptime), Some(data_bytes)) = (flags, exptime, data_bytes) else {
        return refuse(BadFormat);
    };
    let cas_unique = if mode == StoreMode::Cas {
        match number::strtoull(tokens[5]) {
            Some(c) => c,
            None => return refuse(BadFormat),
        }
    } else {
        0
    };
    if data_bytes > limits.item_size_max_bytes as u64 {
        let overwrites = matches!(
            mode,
            StoreMode::Set | StoreMode::Append | StoreMode::Prepend
        );
        let key = overwrites.then(|| tokens[1].to_vec());
        return too_large(data_bytes, limits, line_bytes, noreply, key);
    }
    match data_block(rest, data_bytes as usize) {
        None => Step::Incomplete,
        Some(Err(())) => refuse(BadDataChunk),
        Some(Ok(data)) => Step::Command(
            Command::Store(Store {
                mode,
                key: tokens[1],
                flags,
                exptime,
                cas_unique,
                noreply,
                data,
            }),
            line_bytes + data_bytes as usize + 2,
        ),
    }
}

fn parse_meta<'a>(
    kind: MetaKind,
    key: &'a [u8],
    flag_tokens: &[&'a [u8]],
) -> Result<Meta<'a>, ProtocolError> {
    use ProtocolError::*;
    if key.len() > KEY_MAX_BYTES {
        return Err(KeyTooLong {
            key_bytes: key.len(),
            limit: KEY_MAX_BYTES,
        });
    }
    let mut flags = MetaFlags::default();
    let mut seen = [false; 128];
    for t in flag_tokens {
        let letter = t[0];
        let token = &t[1..];
        let ch = letter as char;
        if !kind.accepted_flags().contains(&letter) {
            return Err(MetaInvalidFlag { letter: ch });
        }
        if seen[letter as usize] {
            return Err(MetaDuplicateFlag { letter: ch });
        }
        seen[letter as usize] = true;
        match letter {
            b'b' => flags.base64 = true,
            b'v' => flags.return_value = true,
            b'k' => flags.return_key = true,
            b'f' => flags.return_client_flags = true,
            b't' => flags.return_ttl = true,
            b'c' => flags.return_cas = true,
            b's' => flags.return_size = true,
            b'q' => flags.quiet = true,
            b'I' => flags.invalidate = true,
            b'O' => {
                if token.len() > OPAQUE_MAX_BYTES {
                    return Err(MetaOpaqueTooLong {
                        opaque_bytes: token.len(),
                        limit: OPAQUE_MAX_BYTES,
                    });
                }
                flags.opaque = Some(token);
            }
            b'T' => flags.ttl = Some(number::strtol(token).ok_or(MetaBadToken { letter: ch })?),
            // ma ignores `F` (as memcached 1.6.18 does) but checks it is a number.
            b'F' if kind == MetaKind::Arith => {
                number::strtoull(token).ok_or(MetaBadToken { letter: ch })?;
            }
            b'F' => {
                flags.client_flags = Some(
                    number::strtoul(token)
                        .and_then(|f| u32::try_from(f).ok())
                        .ok_or(BadFormat)?,
                )
            }
            b'R' => {
                number::strtoull(token).ok_or(MetaBadToken { letter: ch })?;
            }
            b'N' => flags.vivify = Some(number::strtol(token).ok_or(MetaBadToken { letter: ch })?),
            b'J' => {
                flags.initial = Some(number::strtoull(token).ok_or(MetaBadToken { letter: ch })?)
            }
            b'D' => flags.delta = Some(number::strtoull(token).ok_or(MetaBadToken { letter: ch })?),
            b'C' => {
                flags.compare_cas =
                    Some(number::strtoull(token).ok_or(MetaBadToken { letter: ch })?)
            }
            b'M' if kind == MetaKind::Arith => {
                if token.len() != 1 {
                    return Err(MetaModeLength);
                }
                flags.arith = Some(match token[0] {
                    b'I' | b'+' => ArithOp::Incr,
                    b'D' | b'-' => ArithOp::Decr,
                    _ => return Err(MetaArithInvalidMode),
                })
            }
            b'M' => {
                if token.len() != 1 {
                    return Err(MetaModeLength);
                }
                flags.mode = Some(match token[0] {
                    b'E' => MetaMode::Add,
                    b'A' => MetaMode::Append,
                    b'P' => MetaMode::Prepend,
                    b'R' => MetaMode::Replace,
                    b'S' => MetaMode::Set,
                    _ => return Err(MetaInvalidMode),
                })
            }
            _ => {}
        }
        flags.list.push(MetaFlag { letter, token });
    }
    if flags.base64 {
        match base64::decode(key) {
            Some(k) if !k.is_empty() && k.len() <= KEY_MAX_BYTES => {}
            _ => return Err(MetaKeyDecode),
        }
    } else {
        check_key(key)?;
    }
    Ok(Meta { key, flags })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A line's tokens are split on the stack up to [`FEW_TOKENS`] and into a vector past
    /// that: a `get` or `gat` of as many keys as either holds, or one more, reads every key in
    /// order, and a `set` line too long to be one is refused either way.
    #[test]
    fn lines_of_any_token_count_parse_alike() {
        for count in [
            1,
            FEW_TOKENS - 2,
            FEW_TOKENS - 1,
            FEW_TOKENS,
            FEW_TOKENS + 1,
            40,
        ] {
            let keys: Vec<String> = (0..count).map(|i| format!("k{i}")).collect();
            for (line, exptime) in [
                (format!("get {}\r\n", keys.join(" ")), None),
                (format!("gat 10 {}\r\n", keys.join(" ")), Some(10)),
            ] {
                let mut parser = Parser::new(Limits::default());
                match parser.parse(line.as_bytes()) {
                    Parse::Command {
                        command: Command::Get(g),
                        consumed,
                    } => {
                        assert_eq!(consumed, line.len());
                        assert_eq!(g.exptime, exptime);
                        let got: Vec<&[u8]> = g.keys.to_vec();
                        let want: Vec<&[u8]> = keys.iter().map(|k| k.as_bytes()).collect();
                        assert_eq!(got, want, "{count} keys");
                    }
                    other => panic!("{count} keys: {other:?}"),
                }
            }
        }
        let mut parser = Parser::new(Limits::default());
        let line = format!("set k 0 0 1 {}\r\nx\r\n", vec!["x"; FEW_TOKENS].join(" "));
        assert!(matches!(parser.parse(line.as_bytes()), Parse::Error { .. }));
    }
}
