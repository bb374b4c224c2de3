//! Standard output whose reader may go away (`inec model | head -1`), for the `inec` binary and
//! the benchmarks alike.
//!
//! Rust's runtime ignores SIGPIPE, so that a write to a socket whose peer has gone returns EPIPE
//! instead of killing the process; the servers, nodes and benchmark clients rely on that (and
//! `writev` has no `MSG_NOSIGNAL`). So the signal stays ignored, and a write to standard output
//! that fails with EPIPE is marked instead: [`print`] and [`Stdout`] turn it into an
//! [`io::Error`] carrying [`StdoutClosed`], which [`is_closed`] recognises. A caller returns it
//! as any other error, stopping what it started on the way out, and the binary ends quietly; a
//! socket's EPIPE stays an ordinary error.

use std::fmt;
use std::io::{self, ErrorKind, Write};

/// The reader of standard output went away (EPIPE on a write to it).
#[derive(Debug)]
pub struct StdoutClosed;

impl fmt::Display for StdoutClosed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("standard output closed (broken pipe)")
    }
}

impl std::error::Error for StdoutClosed {}

/// `e` (an error of a write to standard output), or, if it is EPIPE, an EPIPE carrying
/// [`StdoutClosed`].
pub fn mark(e: io::Error) -> io::Error {
    if e.kind() == ErrorKind::BrokenPipe {
        io::Error::new(ErrorKind::BrokenPipe, StdoutClosed)
    } else {
        e
    }
}

/// Whether `e` is EPIPE on standard output, as [`Stdout`] and [`print`] return it.
pub fn is_closed(e: &io::Error) -> bool {
    e.get_ref().is_some_and(|inner| inner.is::<StdoutClosed>())
}

/// Writes `args` to standard output, as `print!` does, but returns its error (EPIPE marked)
/// instead of panicking.
pub fn print(args: fmt::Arguments<'_>) -> io::Result<()> {
    io::stdout().lock().write_fmt(args).map_err(mark)
}

/// Standard output with EPIPE marked; [`Stdout::lock`] holds the lock while it lives,
/// [`Stdout::unlocked`] takes it for each write.
#[derive(Debug)]
pub struct Stdout(Inner);

#[derive(Debug)]
enum Inner {
    Locked(io::StdoutLock<'static>),
    Unlocked(io::Stdout),
}

impl Stdout {
    /// Locks standard output.
    pub fn lock() -> Stdout {
        Stdout(Inner::Locked(io::stdout().lock()))
    }

    /// Standard output, locked for each write only (where other threads print too).
    pub fn unlocked() -> Stdout {
        Stdout(Inner::Unlocked(io::stdout()))
    }

    fn inner(&mut self) -> &mut dyn Write {
        match &mut self.0 {
            Inner::Locked(l) => l,
            Inner::Unlocked(s) => s,
        }
    }
}

impl Write for Stdout {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.inner().write(buf).map_err(mark)
    }

    fn write_all(&mut self, buf: &[u8]) -> io::Result<()> {
        self.inner().write_all(buf).map_err(mark)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.inner().flush().map_err(mark)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_epipe_is_marked() {
        assert!(is_closed(&mark(io::Error::from(ErrorKind::BrokenPipe))));
        assert!(!is_closed(&mark(io::Error::from(ErrorKind::WriteZero))));
        assert!(!is_closed(&io::Error::from(ErrorKind::BrokenPipe)));
    }
}
