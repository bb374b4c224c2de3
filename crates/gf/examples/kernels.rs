//! Prints the name of every kernel implementation this CPU runs, one a line, slowest first
//! (the names `INEC_KERNEL` takes): `scripts/test-all` runs the kernel tests under each.
//!
//! ```text
//! cargo run -q -p inec-gf --example kernels
//! ```

fn main() {
    for kernel in gf::Kernel::forms() {
        println!("{}", kernel.name());
    }
}
