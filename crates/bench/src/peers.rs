//! Our Go programs under `peers/` (the klauspost/reedsolomon peer, the porcupine checker):
//! where their sources are, how they are built, and whether `go` is there.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use crate::{BenchError, Result};

/// What provides `go`, for a test that skips (or fails under CI) without it.
pub const GO_PACKAGE: &str = "the Go toolchain: Debian package golang-go, or go.dev/dl";

/// Whether `go` runs.
pub fn go_available(go: &str) -> bool {
    Command::new(go)
        .arg("version")
        .output()
        .is_ok_and(|o| o.status.success())
}

/// The source directory of the program `peers/<name>`.
pub fn source_dir(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("peers")
        .join(name)
}

/// Builds `peers/<name>` with `go` (incremental: fast when nothing changed) into
/// `$CARGO_TARGET_DIR` (or the workspace's `target/`) `/peers/<binary>`; `what` names it in
/// errors.
pub fn go_build(go: &str, name: &str, binary: &str, what: &str) -> Result<PathBuf> {
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target"));
    let out = target.join("peers").join(binary);
    let src = source_dir(name);
    let status = Command::new(go)
        .args(["build", "-o"])
        .arg(&out)
        .arg(".")
        .current_dir(&src)
        .stdout(Stdio::null())
        .status()
        .map_err(BenchError::io(format!(
            "running {go:?} to build the {what}"
        )))?;
    if !status.success() {
        return Err(BenchError::library(
            what,
            format!("go build of {} failed: {status}", src.display()),
        ));
    }
    Ok(out)
}
