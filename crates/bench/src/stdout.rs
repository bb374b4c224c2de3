//! Standard output whose reader may go away (`inec bench codec | head -3`): the benchmarks
//! print through [`print`] and [`Stdout`] (`engine::stdout`), behind this crate's `outln!`
//! (used in place of `println!`, which would panic), and return a closed standard output as
//! any other error, stopping what they started on the way out.

pub use engine::stdout::{is_closed, print, Stdout, StdoutClosed};

/// `println!` that returns an [`std::io::Result`] (see [`print`]).
macro_rules! outln {
    () => {
        $crate::stdout::print(format_args!("\n"))
    };
    ($($arg:tt)*) => {
        $crate::stdout::print(format_args!("{}\n", format_args!($($arg)*)))
    };
}
