//! For tests that need something a machine may lack (memcached, `memccapable`, pymemcache, a Go
//! toolchain, util-linux `script`, network namespaces, `mknod`): one way to skip, or to fail.
//!
//! On a developer machine such a test skips: it prints one line `SKIPPED: <test>: <what is
//! missing> (<what provides it>)` on standard error, appends the same line to the file named
//! by `INEC_SKIP_LOG` if that is set (`scripts/test-all` sets it, and counts the lines at the
//! end, since the test harness keeps a passing test's output to itself), and the test returns.
//! Under CI (`CI` set to anything but `0`/`false`/`no`/`off`/empty, as CI services set it) or
//! with `INEC_REQUIRE_TOOLS=1` (`.ci/run`), it fails instead, naming the package to install: a
//! test that cannot run must not pass there. `INEC_REQUIRE_TOOLS=0` allows skips under CI too.
//!
//! This module alone of the libraries prints (`eprintln!`) instead of logging: it runs inside
//! test binaries, which install no logger, and its `SKIPPED:` line is the test's own output,
//! which the test harness captures per test (it catches `eprintln!`, not a write to the
//! stderr handle) and shows with `--nocapture` or when the test fails.
//!
//! ```no_run
//! if !harness::Memcached::available() {
//!     harness::skip::skip_or_fail("/usr/bin/memcached", "Debian package memcached");
//!     return;
//! }
//! ```

use std::io::Write;
use std::path::Path;

use crate::Error;

/// What a test does when something it needs is missing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Missing {
    /// Print `SKIPPED: …` and pass.
    Skip,
    /// Fail, naming the package.
    Fail,
}

/// `Some(true)` for a value that turns a switch on, `Some(false)` for `0`, `false`, `no`,
/// `off`, `None` for an empty or unset one.
fn switch(value: Option<&str>) -> Option<bool> {
    let v = value?.trim();
    if v.is_empty() {
        return None;
    }
    Some(!matches!(
        v.to_ascii_lowercase().as_str(),
        "0" | "false" | "no" | "off"
    ))
}

/// The policy for the values of `CI` and `INEC_REQUIRE_TOOLS` (`None`: unset):
/// `INEC_REQUIRE_TOOLS` decides when it is set, `CI` otherwise, and skipping is the default.
pub fn policy(ci: Option<&str>, require_tools: Option<&str>) -> Missing {
    match switch(require_tools).or(switch(ci)) {
        Some(true) => Missing::Fail,
        Some(false) | None => Missing::Skip,
    }
}

/// What to do for `test`, lacking `tool` (provided by `package`), under `policy`: the line to
/// print (skip) or the failure.
pub fn outcome(policy: Missing, test: &str, tool: &str, package: &str) -> Result<String, Error> {
    match policy {
        Missing::Skip => Ok(format!("SKIPPED: {test}: {tool} is missing ({package})")),
        Missing::Fail => Err(Error::ToolRequired {
            test: test.to_string(),
            tool: tool.to_string(),
            package: package.to_string(),
        }),
    }
}

/// The running test: its test binary (without Cargo's hash) and the thread the harness runs
/// it on, which bears its name (`clients::pymemcache_against_memcached`).
fn current_test() -> String {
    let binary = std::env::current_exe()
        .ok()
        .and_then(|p| p.file_stem().map(|s| s.to_string_lossy().into_owned()))
        .map(|s| match s.rsplit_once('-') {
            Some((name, hash)) if hash.chars().all(|c| c.is_ascii_hexdigit()) => name.to_string(),
            _ => s,
        })
        .unwrap_or_default();
    let thread = std::thread::current();
    match thread.name() {
        Some(name) if name != "main" => format!("{binary}::{name}"),
        _ => binary,
    }
}

/// Appends `line` to the file `log`.
fn append(log: &Path, line: &str) -> std::io::Result<()> {
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(log)?;
    f.write_all(format!("{line}\n").as_bytes())
}

/// The running test lacks `tool` (a program, a path, a permission), which `package` provides
/// (`Debian package memcached`, `PyPI package pymemcache`, …): skips, printing `SKIPPED: …`
/// and logging it to `INEC_SKIP_LOG`, so that the caller returns; or, under CI or with
/// `INEC_REQUIRE_TOOLS=1`, fails the test (panics) naming `package`.
#[track_caller]
pub fn skip_or_fail(tool: &str, package: &str) {
    let var = |name: &str| std::env::var(name).ok();
    let policy = policy(var("CI").as_deref(), var("INEC_REQUIRE_TOOLS").as_deref());
    match outcome(policy, &current_test(), tool, package) {
        Ok(line) => {
            eprintln!("{line}");
            if let Some(log) = std::env::var_os("INEC_SKIP_LOG").filter(|l| !l.is_empty()) {
                if let Err(e) = append(Path::new(&log), &line) {
                    eprintln!("note: cannot append to INEC_SKIP_LOG: {e}");
                }
            }
        }
        Err(failure) => panic!("{failure}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ci_or_inec_require_tools_turn_a_skip_into_a_failure() {
        // Neither set (or empty): skip.
        assert_eq!(policy(None, None), Missing::Skip);
        assert_eq!(policy(Some(""), Some("")), Missing::Skip);
        // CI as services set it.
        assert_eq!(policy(Some("true"), None), Missing::Fail);
        assert_eq!(policy(Some("1"), None), Missing::Fail);
        assert_eq!(policy(Some("TRUE"), None), Missing::Fail);
        assert_eq!(policy(Some("false"), None), Missing::Skip);
        assert_eq!(policy(Some("0"), None), Missing::Skip);
        // INEC_REQUIRE_TOOLS, which decides over CI.
        assert_eq!(policy(None, Some("1")), Missing::Fail);
        assert_eq!(policy(Some("false"), Some("1")), Missing::Fail);
        assert_eq!(policy(None, Some("0")), Missing::Skip);
        assert_eq!(policy(Some("true"), Some("0")), Missing::Skip);
    }

    #[test]
    fn a_skip_prints_one_skipped_line_and_a_failure_names_the_package() {
        let line = outcome(
            Missing::Skip,
            "t::x",
            "memccapable",
            "Debian libmemcached-tools",
        );
        assert_eq!(
            line.unwrap(),
            "SKIPPED: t::x: memccapable is missing (Debian libmemcached-tools)"
        );
        let failure = outcome(
            Missing::Fail,
            "t::x",
            "memccapable",
            "Debian libmemcached-tools",
        )
        .unwrap_err()
        .to_string();
        assert!(failure.contains("t::x cannot run"), "{failure}");
        assert!(failure.contains("Debian libmemcached-tools"), "{failure}");
    }

    #[test]
    fn skips_are_appended_to_the_log() {
        let dir = std::env::temp_dir().join(format!("inec-skip-log-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let log = dir.join("skips");
        append(&log, "SKIPPED: a").unwrap();
        append(&log, "SKIPPED: b").unwrap();
        assert_eq!(
            std::fs::read_to_string(&log).unwrap(),
            "SKIPPED: a\nSKIPPED: b\n"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn the_test_is_named_by_its_binary_and_thread() {
        assert_eq!(
            current_test(),
            "harness::skip::tests::the_test_is_named_by_its_binary_and_thread"
        );
    }
}
