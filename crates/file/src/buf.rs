//! Buffers allocated fallibly and reads that fill them.

use std::io::{self, Read};

use crate::FileError;

/// Fills `buf` from `r`; returns how many bytes were read (less than `buf.len()` only at the
/// end of the input).
pub(crate) fn read_full(r: &mut impl Read, buf: &mut [u8]) -> io::Result<usize> {
    let mut filled = 0;
    while filled < buf.len() {
        match r.read(&mut buf[filled..]) {
            Ok(0) => break,
            Ok(n) => filled += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(filled)
}

/// A zeroed buffer, allocated fallibly: a shortage of memory is an error, not an abort.
pub(crate) fn try_zeroed(len: usize, what: &'static str) -> Result<Vec<u8>, FileError> {
    let mut v = Vec::new();
    grow(&mut v, len, what)?;
    Ok(v)
}

/// Grows `buf` to at least `len` bytes (zero-filled), fallibly.
pub(crate) fn grow(buf: &mut Vec<u8>, len: usize, what: &'static str) -> Result<(), FileError> {
    if buf.len() < len {
        buf.try_reserve_exact(len - buf.len())
            .map_err(|e| FileError::Alloc {
                bytes: len,
                what,
                reason: e.to_string(),
            })?;
        buf.resize(len, 0);
    }
    Ok(())
}
