//! `inec encode`, `inec decode`, `inec verify`.

use anyhow::{bail, Result};
use clap::Args;

#[derive(Args, Debug)]
pub struct EncodeArgs {}
#[derive(Args, Debug)]
pub struct DecodeArgs {}
#[derive(Args, Debug)]
pub struct VerifyArgs {}

pub fn encode(_a: EncodeArgs) -> Result<()> {
    bail!("encode: not yet built")
}
pub fn decode(_a: DecodeArgs) -> Result<()> {
    bail!("decode: not yet built")
}
pub fn verify(_a: VerifyArgs) -> Result<()> {
    bail!("verify: not yet built")
}
