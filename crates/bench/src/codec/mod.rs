//! `inec bench codec`.

use anyhow::{bail, Result};
use clap::Args;

#[derive(Args, Debug)]
pub struct CodecArgs {}

pub fn run(_a: CodecArgs) -> Result<()> {
    bail!("bench codec: not yet built")
}
