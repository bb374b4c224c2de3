//! Standard output whose reader may go away (`inec model | head -1`).
//!
//! Rust's runtime ignores SIGPIPE, so that a write to a socket whose peer has gone returns EPIPE
//! instead of killing the process. The servers rely on that: `inec serve` and `inec node`, the
//! nodes and clients that `inec demo` and the benchmarks run in-process, and `writev` (which has
//! no `MSG_NOSIGNAL`) on their connections. So the signal stays ignored in every command, and a
//! write to standard output that fails with EPIPE is marked instead: [`print`] (behind the
//! `out!` and `outln!` macros, used in place of `print!` and `println!`, which would panic)
//! and [`Stdout`] turn it into an [`io::Error`] carrying [`StdoutClosed`]. The command returns
//! that error as any other, so that what it started (child processes, nodes) is stopped on the
//! way out, and `main` ends quietly with [`EXIT_STATUS`] where [`is_closed`] finds it; a socket's
//! EPIPE is an ordinary error.

use std::fmt;
use std::io::{self, ErrorKind, Write};

/// The exit status when standard output's reader went away: 128 + SIGPIPE (13), what a shell
/// reports for a coreutils program killed by the signal in the same place.
pub const EXIT_STATUS: u8 = 141;

/// The reader of standard output went away (EPIPE on a write to it).
#[derive(Debug)]
pub struct StdoutClosed;

impl fmt::Display for StdoutClosed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("standard output closed (broken pipe)")
    }
}

impl std::error::Error for StdoutClosed {}

/// `e`, or, if it is EPIPE, an EPIPE carrying [`StdoutClosed`].
fn mark(e: io::Error) -> io::Error {
    if e.kind() == ErrorKind::BrokenPipe {
        io::Error::new(ErrorKind::BrokenPipe, StdoutClosed)
    } else {
        e
    }
}

/// Whether `e` is [`StdoutClosed`] or an [`io::Error`] carrying it ([`io::Error::source`]
/// skips the payload, so it is looked at here).
fn carries_mark(e: &(dyn std::error::Error + 'static)) -> bool {
    if e.is::<StdoutClosed>() {
        return true;
    }
    let Some(io) = e.downcast_ref::<io::Error>() else {
        return false;
    };
    #[cfg(feature = "bench")]
    if bench::stdout::is_closed(io) {
        return true;
    }
    io.get_ref().is_some_and(|inner| inner.is::<StdoutClosed>())
}

/// Whether the command failed because standard output's reader went away.
pub fn is_closed(e: &anyhow::Error) -> bool {
    e.chain().any(carries_mark)
}

/// Writes `args` to standard output, as `print!` does, but returns its error (EPIPE marked)
/// instead of panicking.
pub fn print(args: fmt::Arguments<'_>) -> io::Result<()> {
    io::stdout().lock().write_fmt(args).map_err(mark)
}

/// Standard output (locked while this lives) with EPIPE marked.
#[derive(Debug)]
pub struct Stdout(io::StdoutLock<'static>);

impl Stdout {
    /// Locks standard output.
    pub fn lock() -> Stdout {
        Stdout(io::stdout().lock())
    }
}

impl Write for Stdout {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.0.write(buf).map_err(mark)
    }

    fn write_all(&mut self, buf: &[u8]) -> io::Result<()> {
        self.0.write_all(buf).map_err(mark)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.0.flush().map_err(mark)
    }
}

/// `print!` that returns an [`io::Result`] (see [`print`]).
macro_rules! out {
    ($($arg:tt)*) => {
        $crate::stdout::print(format_args!($($arg)*))
    };
}

/// `println!` that returns an [`io::Result`] (see [`print`]).
macro_rules! outln {
    () => {
        $crate::stdout::print(format_args!("\n"))
    };
    ($($arg:tt)*) => {
        $crate::stdout::print(format_args!("{}\n", format_args!($($arg)*)))
    };
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_marked_epipe_is_standard_output_closed() {
        let marked = mark(io::Error::from(ErrorKind::BrokenPipe));
        assert!(is_closed(&anyhow::Error::from(marked)));
        let marked = mark(io::Error::from(ErrorKind::BrokenPipe));
        assert!(is_closed(
            &anyhow::Error::from(marked).context("writing the table")
        ));
        // A socket's EPIPE is an ordinary failure.
        let socket = io::Error::from(ErrorKind::BrokenPipe);
        assert!(!is_closed(&anyhow::Error::from(socket)));
        let other = mark(io::Error::from(ErrorKind::WriteZero));
        assert!(!is_closed(&anyhow::Error::from(other)));
    }
}
