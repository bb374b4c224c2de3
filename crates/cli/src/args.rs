//! The value parsers every subcommand shares, so that a code, a size or a list is spelled the
//! same way everywhere:
//!
//! - a code is `rs:K,M`, `rs-xor:K,M`, `rs-vand:K,M` or `lrc:K,L,R` (`codes::Code`'s own
//!   spelling);
//! - a size is a number of bytes with an optional unit: `4096`, `64KiB`, `1MiB`, `1GiB`
//!   (`codes::size`);
//! - a list is given by repeating the flag: `--code rs:6,3 --code lrc:6,2,2`.

use std::io::IsTerminal;

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
pub fn size(s: &str) -> Result<usize, String> {
    let bytes = codes::size::parse_bytes(s).map_err(|e| e.to_string())?;
    match usize::try_from(bytes) {
        Ok(b) if b >= 1 => Ok(b),
        _ => Err(format!("size {s} out of range (at least 1 byte)")),
    }
}

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

/// A progress bar on standard error when it is a terminal, and nothing otherwise.
pub fn progress(total: u64, what: &str, bytes: bool) -> indicatif::ProgressBar {
    if !std::io::stderr().is_terminal() || std::env::var_os("INEC_NO_PROGRESS").is_some() {
        return indicatif::ProgressBar::hidden();
    }
    let bar = indicatif::ProgressBar::new(total);
    let template = if bytes {
        "{msg} [{bar:30}] {bytes}/{total_bytes} {bytes_per_sec} eta {eta}"
    } else {
        "{msg} [{bar:30}] {pos}/{len} eta {eta}"
    };
    if let Ok(style) = indicatif::ProgressStyle::with_template(template) {
        bar.set_style(style.progress_chars("=> "));
    }
    bar.set_message(what.to_string());
    bar
}
