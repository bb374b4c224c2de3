//! Standard output whose reader may go away (`inec model | head -1`).
//!
//! Rust's runtime ignores SIGPIPE, so that a write to a socket whose peer has gone returns EPIPE
//! instead of killing the process. The servers rely on that: `inec serve` and `inec node`, the
//! nodes and clients that `inec demo` and the benchmarks run in-process, and `writev` (which has
//! no `MSG_NOSIGNAL`) on their connections. So the signal stays ignored in every command, and a
//! write to standard output that fails with EPIPE is marked instead: [`print`] (behind the
//! `out!` and `outln!` macros, used in place of `print!` and `println!`, which would panic)
//! and [`Stdout`] turn it into an [`io::Error`] carrying `engine::stdout::StdoutClosed`. The command returns
//! that error as any other, so that what it started (child processes, nodes) is stopped on the
//! way out, and `main` ends quietly with [`EXIT_STATUS`] where [`is_closed`] finds it; a socket's
//! EPIPE is an ordinary error.

use std::io;

pub use engine::stdout::{print, Stdout};

/// The exit status when standard output's reader went away: 128 + SIGPIPE (13), what a shell
/// reports for a coreutils program killed by the signal in the same place.
pub const EXIT_STATUS: u8 = 141;

/// Whether the command failed because standard output's reader went away (an
/// [`engine::stdout::StdoutClosed`] anywhere in the error's chain; [`io::Error::source`] skips
/// an I/O error's payload, so it is looked at here).
pub fn is_closed(e: &anyhow::Error) -> bool {
    e.chain().any(|e| {
        e.is::<engine::stdout::StdoutClosed>()
            || e.downcast_ref::<io::Error>()
                .is_some_and(engine::stdout::is_closed)
    })
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
    use engine::stdout::mark;
    use std::io::ErrorKind;

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
