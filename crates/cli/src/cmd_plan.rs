//! `inec plan`, `inec model`.

use anyhow::{bail, Result};
use clap::Args;

#[derive(Args, Debug)]
pub struct PlanArgs {}
#[derive(Args, Debug)]
pub struct ModelArgs {}

pub fn plan(_a: PlanArgs) -> Result<()> {
    bail!("plan: not yet built")
}
pub fn model(_a: ModelArgs) -> Result<()> {
    bail!("model: not yet built")
}
