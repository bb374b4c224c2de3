//! The property the fuzz target `memcache_text` checks, as a plain function so the crate's
//! stable tests drive it with seeded random inputs too.

use crate::{compose, Limits, Parse, Parser};

/// Parses arbitrary bytes to the end, as a connection would, and checks: no panic; every step
/// consumes at most what it was given and something unless it says `Incomplete`; every parsed
/// command, composed back into request bytes, parses to the same command using exactly those
/// bytes; feeding the same bytes one at a time gives the same commands and errors. Returns how
/// many commands were accepted (so seeded tests can see the inputs reach the parser's depths).
pub fn parse_arbitrary(data: &[u8]) -> usize {
    let limits = Limits {
        item_size_max_bytes: 64,
        line_max_bytes: 96,
        get_line_max_bytes: 160,
    };
    let whole = run(data, limits, usize::MAX);
    let piecewise = run(data, limits, 1);
    assert_eq!(whole, piecewise, "results depend on how the bytes arrive");
    whole
        .iter()
        .filter(|o| {
            !o.starts_with(b"ERROR")
                && !o.starts_with(b"CLIENT_ERROR")
                && !o.starts_with(b"SERVER_ERROR")
        })
        .count()
}

/// Feeds `data` in reads of at most `read_bytes`, returns the outcomes in order (commands as
/// their composed request bytes, errors as their replies).
fn run(data: &[u8], limits: Limits, read_bytes: usize) -> Vec<Vec<u8>> {
    let mut parser = Parser::new(limits);
    let mut buf: Vec<u8> = Vec::new();
    let mut fed = 0;
    let mut outcomes = Vec::new();
    loop {
        match parser.parse(&buf) {
            Parse::Incomplete => {
                if fed == data.len() {
                    return outcomes;
                }
                let n = read_bytes.min(data.len() - fed);
                buf.extend_from_slice(&data[fed..fed + n]);
                fed += n;
            }
            Parse::Command { command, consumed } => {
                assert!(consumed > 0 && consumed <= buf.len());
                // Carried past its buffer, the command is the same command.
                let owned = command.to_owned_command();
                assert_eq!(owned.as_command(), command, "the owned command differs");
                let mut again = Vec::new();
                compose::request(&mut again, &command);
                let mut fresh = Parser::new(limits);
                match fresh.parse(&again) {
                    Parse::Command {
                        command: c2,
                        consumed: n2,
                    } => {
                        assert_eq!(c2, command, "round trip changed the command");
                        assert_eq!(n2, again.len(), "round trip left bytes");
                    }
                    other => panic!("composed request {again:?} parses as {other:?}"),
                }
                outcomes.push(again);
                buf.drain(..consumed);
            }
            Parse::Error {
                error, consumed, ..
            } => {
                assert!(consumed > 0 && consumed <= buf.len());
                if !error.closes_connection() {
                    let dropped = consumed as u64 + parser.swallow_bytes();
                    assert_eq!(
                        dropped,
                        refused_request_bytes(&buf),
                        "refused {:?}: {error:?} dropped {dropped} bytes",
                        String::from_utf8_lossy(&buf[..consumed]),
                    );
                }
                outcomes.push(error.reply().to_vec());
                buf.drain(..consumed);
                if error.closes_connection() {
                    return outcomes;
                }
            }
            Parse::Swallowed { consumed } => {
                assert!(consumed > 0 && consumed <= buf.len());
                buf.drain(..consumed);
            }
        }
    }
}

/// The bytes a refused request (not one that closes the connection) must drop, worked out from
/// its line alone: the line, and when it is a storage command (`set`…`cas`, `ms`) whose length
/// token (the fifth, or the third of `ms`) is a usable length, that many bytes and `\r\n` more,
/// whatever else is wrong with the line. So a refused value is never read as commands.
fn refused_request_bytes(buf: &[u8]) -> u64 {
    let nl = buf
        .iter()
        .position(|&b| b == b'\n')
        .expect("a refused line that does not close the connection ends in a newline");
    let mut line = &buf[..nl];
    if line.len() > 1 && line.ends_with(b"\r") {
        line = &line[..line.len() - 1];
    }
    let tokens: Vec<&[u8]> = line
        .split(|&b| b == b' ')
        .filter(|t| !t.is_empty())
        .collect();
    let length_at = match tokens.first().copied() {
        Some(b"set" | b"add" | b"replace" | b"append" | b"prepend" | b"cas") => 4,
        Some(b"ms") => 2,
        _ => usize::MAX,
    };
    let block = tokens
        .get(length_at)
        .and_then(|t| crate::number::strtol(t))
        .filter(|&len| (0..=i64::from(i32::MAX) - 2).contains(&len))
        .map_or(0, |len| len as u64 + 2);
    (nl + 1) as u64 + block
}
