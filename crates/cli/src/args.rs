//! The value parsers every subcommand shares, so that a code, a size or a list is spelled the
//! same way everywhere:
//!
//! - a code is `rs:K,M`, `rs-xor:K,M`, `rs-vand:K,M` or `lrc:K,L,R` (`codes::Code`'s own
//!   spelling);
//! - a size is a number of bytes with an optional unit: `4096`, `64KiB`, `1MiB`, `1GiB`
//!   (`codes::size`);
//! - a list is given by repeating the flag: `--code rs:6,3 --code lrc:6,2,2`.

use codes::size::SizeError;
use codes::{Code, CodeError};
use file::chunk_file::MAX_CHUNK_BYTES;

/// Why a `--code` or `--chunk-bytes` value was refused (clap prints it after the flag's name).
#[derive(Debug, thiserror::Error)]
pub enum ArgError {
    /// Not a code, or a code with parameters its constructor refuses.
    #[error(
        "{0} (a code is rs:K,M, rs-xor:K,M, rs-vand:K,M or lrc:K,L,R, e.g. rs:6,3 or lrc:6,2,2)"
    )]
    Code(CodeError),
    /// Not a size.
    #[error(transparent)]
    Size(#[from] SizeError),
    /// A size, but not one a chunk file holds.
    #[error("chunk size {input} out of range 1..={max} bytes")]
    ChunkBytesOutOfRange { input: String, max: usize },
}

/// `--code`: `rs:K,M`, `rs-xor:K,M`, `rs-vand:K,M` or `lrc:K,L,R`.
pub fn code(s: &str) -> Result<Code, ArgError> {
    s.parse::<Code>().map_err(ArgError::Code)
}

/// A size in bytes, at least 1.
pub use codes::size::parse_size as size;

/// A chunk size: a size in 1..=1 GiB (the chunk file format's limit).
pub fn chunk_bytes(s: &str) -> Result<usize, ArgError> {
    let bytes = codes::size::parse_bytes(s)?;
    match usize::try_from(bytes) {
        Ok(b) if (1..=MAX_CHUNK_BYTES).contains(&b) => Ok(b),
        _ => Err(ArgError::ChunkBytesOutOfRange {
            input: s.to_string(),
            max: MAX_CHUNK_BYTES,
        }),
    }
}
