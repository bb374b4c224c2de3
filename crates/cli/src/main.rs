//! The `inec` command-line tool.
#![forbid(unsafe_code)]

fn main() {
    println!("inec");
}
