//! The value parsers every subcommand shares, so that a code, a size or a list is spelled the
//! same way everywhere:
//!
//! - a code is `rs:K,M`, `rs-xor:K,M`, `rs-vand:K,M` or `lrc:K,L,R` (`codes::Code`'s own
//!   spelling);
//! - a size is a number of bytes with an optional unit: `4096`, `64KiB`, `1MiB`, `1GiB`
//!   (`codes::size`);
//! - a list is given by repeating the flag: `--code rs:6,3 --code lrc:6,2,2`.

use codes::Code;
use file::chunk_file::MAX_CHUNK_BYTES;

/// `--code`: `rs:K,M`, `rs-xor:K,M`, `rs-vand:K,M` or `lrc:K,L,R`.
pub fn code(s: &str) -> Result<Code, String> {
    s.parse::<Code>().map_err(|e| {
        format!(
            "{e} (a code is rs:K,M, rs-xor:K,M, rs-vand:K,M or lrc:K,L,R, e.g. rs:6,3 or \
             lrc:6,2,2)"
        )
    })
}

/// A size in bytes, at least 1.
pub use codes::size::parse_size as size;

/// A chunk size: a size in 1..=1 GiB (the chunk file format's limit).
pub fn chunk_bytes(s: &str) -> Result<usize, String> {
    let bytes = codes::size::parse_bytes(s).map_err(|e| e.to_string())?;
    match usize::try_from(bytes) {
        Ok(b) if (1..=MAX_CHUNK_BYTES).contains(&b) => Ok(b),
        _ => Err(format!(
            "chunk size {s} out of range 1..={MAX_CHUNK_BYTES} bytes"
        )),
    }
}
