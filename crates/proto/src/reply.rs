//! The client side: parsing what a server sends back, one reply unit at a time (a `VALUE` or
//! `VA` block with its data, or one line). For benchmarks and client checks.

use crate::number;

/// One unit of a server's reply.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ServerReply<'a> {
    /// `VALUE <key> <flags> <bytes>[ <cas>]\r\n<data>\r\n`.
    Value {
        key: &'a [u8],
        flags: u32,
        cas: Option<u64>,
        data: &'a [u8],
    },
    /// `VA <size>[ <flags>]\r\n<data>\r\n`; `flags` is the rest of the line after the size.
    MetaValue { flags: &'a [u8], data: &'a [u8] },
    /// Any other line, without its `\r\n`: `END`, `STORED`, a number, `STAT …`, `HD …`, errors.
    Line(&'a [u8]),
}

/// One step of the reply parser.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReplyParse<'a> {
    /// Read more; nothing consumed.
    Incomplete,
    Reply {
        reply: ServerReply<'a>,
        consumed: usize,
    },
    /// A `VALUE`/`VA` header that does not parse, or data not followed by `\r\n`: the stream
    /// cannot be followed any further.
    Malformed { line: &'a [u8] },
}

/// Parses the reply unit at the front of `buf`.
pub fn parse_reply(buf: &[u8]) -> ReplyParse<'_> {
    let Some(nl) = buf.windows(2).position(|w| w == b"\r\n") else {
        return ReplyParse::Incomplete;
    };
    let line = &buf[..nl];
    let after = nl + 2;
    let tokens: Vec<&[u8]> = line.split(|&b| b == b' ').collect();
    match tokens[0] {
        b"VALUE" => {
            if tokens.len() != 4 && tokens.len() != 5 {
                return ReplyParse::Malformed { line };
            }
            let flags = number::strtoul(tokens[2]).and_then(|f| u32::try_from(f).ok());
            let cas = tokens.get(4).map(|c| number::strtoull(c));
            let (Some(flags), Some(cas)) = (flags, cas.map_or(Some(None), |c| c.map(Some))) else {
                return ReplyParse::Malformed { line };
            };
            let key = tokens[1];
            match data_block(buf, after, number::strtoull(tokens[3])) {
                Ok(Some((data, consumed))) => ReplyParse::Reply {
                    reply: ServerReply::Value {
                        key,
                        flags,
                        cas,
                        data,
                    },
                    consumed,
                },
                Ok(None) => ReplyParse::Incomplete,
                Err(()) => ReplyParse::Malformed { line },
            }
        }
        b"VA" => {
            let size_token = tokens.get(1).copied().unwrap_or_default();
            let flags = &line[(3 + size_token.len()).min(line.len())..];
            let flags = flags.strip_prefix(b" ").unwrap_or(flags);
            match data_block(buf, after, number::strtoull(size_token)) {
                Ok(Some((data, consumed))) => ReplyParse::Reply {
                    reply: ServerReply::MetaValue { flags, data },
                    consumed,
                },
                Ok(None) => ReplyParse::Incomplete,
                Err(()) => ReplyParse::Malformed { line },
            }
        }
        _ => ReplyParse::Reply {
            reply: ServerReply::Line(line),
            consumed: after,
        },
    }
}

/// The data block of `data_bytes` bytes starting at `at`, and the end of its `\r\n`.
fn data_block(
    buf: &[u8],
    at: usize,
    data_bytes: Option<u64>,
) -> Result<Option<(&[u8], usize)>, ()> {
    let n = data_bytes.and_then(|n| usize::try_from(n).ok()).ok_or(())?;
    let end = at.checked_add(n).and_then(|e| e.checked_add(2)).ok_or(())?;
    if buf.len() < end {
        return Ok(None);
    }
    if &buf[end - 2..end] != b"\r\n" {
        return Err(());
    }
    Ok(Some((&buf[at..at + n], end)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn units() {
        let b = b"VALUE k 5 3 9\r\nabc\r\nEND\r\n";
        let ReplyParse::Reply { reply, consumed } = parse_reply(b) else {
            panic!()
        };
        assert_eq!(consumed, 20);
        assert_eq!(
            reply,
            ServerReply::Value {
                key: b"k",
                flags: 5,
                cas: Some(9),
                data: b"abc"
            }
        );
        assert_eq!(
            parse_reply(&b[20..]),
            ReplyParse::Reply {
                reply: ServerReply::Line(b"END"),
                consumed: 5
            }
        );
        assert_eq!(parse_reply(&b[..18]), ReplyParse::Incomplete);
        assert_eq!(
            parse_reply(b"VA 2 f0 kk\r\nxy\r\n"),
            ReplyParse::Reply {
                reply: ServerReply::MetaValue {
                    flags: b"f0 kk",
                    data: b"xy"
                },
                consumed: 16
            }
        );
        assert!(matches!(
            parse_reply(b"VALUE k x 3\r\nabc\r\n"),
            ReplyParse::Malformed { .. }
        ));
        assert!(matches!(
            parse_reply(b"VALUE k 0 3\r\nabcd\r\n"),
            ReplyParse::Malformed { .. }
        ));
    }
}
