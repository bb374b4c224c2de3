//! Stock clients against a memcached-protocol service: the pymemcache checks
//! (`pymemcache_check.py`, run by `python3`) and libmemcached's `memccapable` (text protocol
//! tests only), each test's pass or failure parsed with its reason. Used by the integration
//! tests of `inec-cli` against memcached (which proves the checks) and against inec.

use std::io::Read;
use std::net::SocketAddr;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// The pymemcache script (also at `crates/clients/src/pymemcache_check.py`).
pub const PYMEMCACHE_SCRIPT: &str = include_str!("pymemcache_check.py");

/// The text-protocol tests of `memccapable` (libmemcached 1.x), in its order.
pub const MEMCCAPABLE_ASCII_TESTS: [&str; 27] = [
    "ascii version",
    "ascii quit",
    "ascii verbosity",
    "ascii set",
    "ascii set noreply",
    "ascii get",
    "ascii gets",
    "ascii mget",
    "ascii flush",
    "ascii flush noreply",
    "ascii add",
    "ascii add noreply",
    "ascii replace",
    "ascii replace noreply",
    "ascii cas",
    "ascii cas noreply",
    "ascii delete",
    "ascii delete noreply",
    "ascii incr",
    "ascii incr noreply",
    "ascii decr",
    "ascii decr noreply",
    "ascii append",
    "ascii append noreply",
    "ascii prepend",
    "ascii prepend noreply",
    "ascii stat",
];

#[derive(Debug, thiserror::Error)]
pub enum ClientsError {
    /// `tool` is not installed; `package` provides it.
    #[error("{tool} is not installed ({package})")]
    Missing {
        tool: &'static str,
        package: &'static str,
    },
    #[error("running {what}: {source}")]
    Run {
        what: String,
        source: std::io::Error,
    },
}

/// Whether a program is on the PATH.
pub fn have(program: &str) -> bool {
    std::env::var_os("PATH").is_some_and(|p| {
        std::env::split_paths(&p).any(|d| {
            let f = d.join(program);
            f.is_file()
        })
    })
}

/// Whether `python3` can import pymemcache.
pub fn have_pymemcache() -> bool {
    Command::new("python3")
        .args(["-c", "import pymemcache"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// Runs a command with a deadline; returns (exit success, stdout, stderr). A command still
/// running at the deadline is killed (by its pid) and reported as failed.
fn run_with_deadline(
    cmd: &mut Command,
    what: &str,
    deadline: Duration,
) -> Result<(bool, String, String), ClientsError> {
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|source| ClientsError::Run {
            what: what.into(),
            source,
        })?;
    let mut out = child.stdout.take().expect("piped");
    let mut err = child.stderr.take().expect("piped");
    let t_out = std::thread::spawn(move || {
        let mut s = Vec::new();
        let _ = out.read_to_end(&mut s);
        s
    });
    let t_err = std::thread::spawn(move || {
        let mut s = Vec::new();
        let _ = err.read_to_end(&mut s);
        s
    });
    let end = Instant::now() + deadline;
    let mut timed_out = false;
    let status = loop {
        match child.try_wait() {
            Ok(Some(s)) => break Some(s),
            Ok(None) if Instant::now() >= end => {
                timed_out = true;
                let _ = child.kill();
                let _ = child.wait();
                break None;
            }
            Ok(None) => std::thread::sleep(Duration::from_millis(20)),
            Err(source) => {
                return Err(ClientsError::Run {
                    what: what.into(),
                    source,
                })
            }
        }
    };
    let out = String::from_utf8_lossy(&t_out.join().unwrap_or_default()).into_owned();
    let mut err = String::from_utf8_lossy(&t_err.join().unwrap_or_default()).into_owned();
    if timed_out {
        err.push_str(&format!("\n(killed after {} s)", deadline.as_secs()));
    }
    Ok((status.is_some_and(|s| s.success()), out, err))
}

/// The outcome of the pymemcache checks.
#[derive(Clone, Debug)]
pub struct PymemcacheReport {
    pub passed: Vec<String>,
    /// (check, reason).
    pub failed: Vec<(String, String)>,
    /// The script exited 0 and printed its summary line.
    pub completed: bool,
    pub output: String,
}

/// Parses the script's output (`ok NAME`, `FAIL NAME: reason`, `N passed, M failed`).
pub fn parse_pymemcache(stdout: &str) -> (Vec<String>, Vec<(String, String)>, bool) {
    let mut passed = Vec::new();
    let mut failed = Vec::new();
    let mut summary = false;
    for l in stdout.lines() {
        if let Some(n) = l.strip_prefix("ok ") {
            passed.push(n.to_string());
        } else if let Some(rest) = l.strip_prefix("FAIL ") {
            let (n, why) = rest.split_once(": ").unwrap_or((rest, ""));
            failed.push((n.to_string(), why.to_string()));
        } else if let Some((p, f)) = l.split_once(" passed, ") {
            summary = p.parse::<usize>().ok() == Some(passed.len())
                && f.strip_suffix(" failed")
                    .and_then(|x| x.parse::<usize>().ok())
                    == Some(failed.len());
        }
    }
    (passed, failed, summary)
}

/// Runs the pymemcache checks against `addrs` (one key space; see the script).
pub fn pymemcache(addrs: &[SocketAddr]) -> Result<PymemcacheReport, ClientsError> {
    if !have("python3") {
        return Err(ClientsError::Missing {
            tool: "python3",
            package: "Debian package python3",
        });
    }
    if !have_pymemcache() {
        return Err(ClientsError::Missing {
            tool: "pymemcache",
            package: "PyPI package pymemcache: python3 -m pip install pymemcache",
        });
    }
    let dir = std::env::temp_dir().join(format!("inec-pymemcache-{}", std::process::id()));
    std::fs::create_dir_all(&dir).map_err(|source| ClientsError::Run {
        what: "a temporary directory".into(),
        source,
    })?;
    let script =
        dir.join(format!("check-{:?}.py", std::thread::current().id()).replace(['(', ')'], ""));
    std::fs::write(&script, PYMEMCACHE_SCRIPT).map_err(|source| ClientsError::Run {
        what: "writing the script".into(),
        source,
    })?;
    let mut cmd = Command::new("python3");
    cmd.arg(&script);
    for a in addrs {
        cmd.arg(a.to_string());
    }
    let r = run_with_deadline(&mut cmd, "python3", Duration::from_secs(120));
    let _ = std::fs::remove_file(&script);
    let (ok, out, err) = r?;
    let (passed, failed, summary) = parse_pymemcache(&out);
    Ok(PymemcacheReport {
        passed,
        failed,
        completed: ok && summary,
        output: format!("{out}{err}"),
    })
}

/// One `memccapable` test.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CapableResult {
    pub test: String,
    pub status: CapableStatus,
    /// The assertion lines memccapable printed (`-v`), for a failure.
    pub reason: String,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CapableStatus {
    Pass,
    Fail,
    Skip,
    /// The test did not report (killed, or the name is unknown to this memccapable).
    NotRun,
}

/// Judges the output of `memccapable -a -v -T TEST`: it prints the test name on stdout, then
/// `[pass]` (stdout) or `[FAIL]`/`[skip]` (stderr) with the failed assertions.
pub fn parse_capable_one(test: &str, ok: bool, stdout: &str, stderr: &str) -> CapableResult {
    let all = format!("{stdout}\n{stderr}");
    let ran = stdout.contains(test);
    let status = if !ran {
        CapableStatus::NotRun
    } else if all.contains("[FAIL]") {
        CapableStatus::Fail
    } else if all.contains("[skip]") {
        CapableStatus::Skip
    } else if all.contains("[pass]") && ok {
        CapableStatus::Pass
    } else {
        CapableStatus::NotRun
    };
    let reason = if status == CapableStatus::Pass {
        String::new()
    } else {
        // The assertion lines, and what the server sent when memccapable echoes it.
        let mut r: Vec<String> = all
            .lines()
            .map(str::trim)
            .filter(|l| {
                !l.is_empty()
                    && !l.starts_with(test)
                    && *l != "[FAIL]"
                    && !l.ends_with("tests failed")
                    && *l != "All tests passed"
            })
            .map(|l| l.replace("./src/bin/", ""))
            .collect();
        r.dedup();
        r.join(" | ")
    };
    CapableResult {
        test: test.to_string(),
        status,
        reason,
    }
}

fn memccapable_command(addr: SocketAddr, io_timeout_s: u32) -> Result<Command, ClientsError> {
    if !have("memccapable") {
        return Err(ClientsError::Missing {
            tool: "memccapable",
            package: "Debian package libmemcached-tools",
        });
    }
    let mut cmd = Command::new("memccapable");
    cmd.args(["-h", &addr.ip().to_string()])
        .args(["-p", &addr.port().to_string()])
        .args(["-t", &io_timeout_s.to_string()])
        .args(["-a", "-v"]);
    Ok(cmd)
}

/// Judges the stdout of a whole `memccapable -a -v` run: each known test's segment (from its
/// name to the next test's name) holds `[pass]`, or the failed assertions (`[FAIL]` itself
/// goes to stderr), or `[skip]`.
pub fn parse_capable_suite(stdout: &str) -> Vec<CapableResult> {
    // Where each test's name appears, in order.
    let mut at = Vec::new();
    let mut from = 0;
    for t in MEMCCAPABLE_ASCII_TESTS {
        // Names are padded with spaces to 40 columns; "ascii set" must not match
        // "ascii set noreply", so look for the name followed by two spaces or `[`.
        let b = stdout.as_bytes();
        let found = (from..b.len()).find(|&i| {
            b[i..].starts_with(t.as_bytes())
                && matches!(&b[i + t.len()..], [b' ', b' ', ..] | [b'[', ..])
        });
        match found {
            Some(i) => {
                at.push((t, Some(i)));
                from = i + t.len();
            }
            None => at.push((t, None)),
        }
    }
    let starts: Vec<usize> = at.iter().filter_map(|(_, i)| *i).collect();
    at.iter()
        .map(|&(t, i)| {
            let Some(i) = i else {
                return CapableResult {
                    test: t.to_string(),
                    status: CapableStatus::NotRun,
                    reason: "not in memccapable's output".into(),
                };
            };
            let end = starts
                .iter()
                .copied()
                .find(|&s| s > i)
                .unwrap_or(stdout.len());
            let seg = String::from_utf8_lossy(&stdout.as_bytes()[i + t.len()..end]);
            let status = if seg.contains("[pass]") {
                CapableStatus::Pass
            } else if seg.contains("[skip]") {
                CapableStatus::Skip
            } else {
                CapableStatus::Fail
            };
            let reason = if status == CapableStatus::Fail {
                let r: Vec<String> = seg
                    .lines()
                    .map(str::trim)
                    .filter(|l| !l.is_empty() && !l.starts_with("All tests"))
                    .map(|l| l.replace("./src/bin/", ""))
                    .collect();
                if r.is_empty() {
                    "no [pass] (output cut short)".to_string()
                } else {
                    r.join(" | ")
                }
            } else {
                String::new()
            };
            CapableResult {
                test: t.to_string(),
                status,
                reason,
            }
        })
        .collect()
}

/// Runs memccapable's whole text-protocol suite (`-a`) against `addr`, as its users run it,
/// with `io_timeout_s` for each I/O. Flushes the server.
pub fn memccapable(
    addr: SocketAddr,
    io_timeout_s: u32,
) -> Result<Vec<CapableResult>, ClientsError> {
    let mut cmd = memccapable_command(addr, io_timeout_s)?;
    let (_, so, _) = run_with_deadline(
        &mut cmd,
        "memccapable",
        Duration::from_secs(u64::from(io_timeout_s) * 60 + 30),
    )?;
    Ok(parse_capable_suite(&so))
}

/// Runs the given memccapable tests one at a time (`-T`), each on a fresh connection.
pub fn memccapable_each(
    addr: SocketAddr,
    tests: &[&str],
    io_timeout_s: u32,
) -> Result<Vec<CapableResult>, ClientsError> {
    let mut out = Vec::new();
    for t in tests {
        let mut cmd = memccapable_command(addr, io_timeout_s)?;
        cmd.args(["-T", t]);
        let (ok, so, se) = run_with_deadline(
            &mut cmd,
            "memccapable",
            Duration::from_secs(u64::from(io_timeout_s) * 10 + 10),
        )?;
        out.push(parse_capable_one(t, ok, &so, &se));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn memccapable_output() {
        // As memccapable 1.1 prints them (captured from runs against memcached and against a
        // server that fails).
        let pass = parse_capable_one(
            "ascii cas",
            true,
            "ascii cas                               [pass]\nAll tests passed\n",
            "",
        );
        assert_eq!(pass.status, CapableStatus::Pass);
        assert_eq!(pass.reason, "");
        let fail = parse_capable_one(
            "ascii add",
            false,
            "ascii add                               \n./src/bin/memcapable.cc:1069: strcmp(msg, \
             buffer) == 0\n./src/bin/memcapable.cc:1189: receive_response(\"NOT_STORED\\r\\n\")",
            "[STORED\n]\n\n[FAIL]\n1 of 1 tests failed\n",
        );
        assert_eq!(fail.status, CapableStatus::Fail);
        assert!(fail
            .reason
            .contains("memcapable.cc:1069: strcmp(msg, buffer) == 0"));
        assert!(fail.reason.contains("NOT_STORED"));
        assert!(fail.reason.contains("[STORED"));
        // An unknown name runs nothing and says all passed: not a pass.
        let none = parse_capable_one("ascii nosuch", true, "All tests passed\n", "");
        assert_eq!(none.status, CapableStatus::NotRun);
    }

    #[test]
    fn memccapable_suite_output() {
        // Padded names as memccapable prints them; "ascii set" passes, "ascii set noreply"
        // fails with its assertions, the rest are missing.
        let out = "ascii set                               [pass]\n\
                   ascii set noreply                       \n\
                   ./src/bin/memcapable.cc:1076: strncmp(buffer, \"ERROR\", 5) == 0\n\
                   ascii get                               [pass]\n";
        let r = parse_capable_suite(out);
        let by = |t: &str| r.iter().find(|x| x.test == t).unwrap().clone();
        assert_eq!(by("ascii set").status, CapableStatus::Pass);
        assert_eq!(by("ascii get").status, CapableStatus::Pass);
        let f = by("ascii set noreply");
        assert_eq!(f.status, CapableStatus::Fail);
        assert_eq!(
            f.reason,
            "memcapable.cc:1076: strncmp(buffer, \"ERROR\", 5) == 0"
        );
        assert_eq!(by("ascii quit").status, CapableStatus::NotRun);
        assert_eq!(r.len(), MEMCCAPABLE_ASCII_TESTS.len());
    }

    #[test]
    fn pymemcache_output() {
        let (p, f, s) = parse_pymemcache(
            "ok a\nFAIL b c: AssertionError: x: got 1\nok d\n2 passed, 1 failed\n",
        );
        assert_eq!(p, ["a", "d"]);
        assert_eq!(
            f,
            [("b c".to_string(), "AssertionError: x: got 1".to_string())]
        );
        assert!(s);
        let (_, _, s) = parse_pymemcache("ok a\n2 passed, 0 failed\n");
        assert!(!s, "a summary that does not match the lines");
    }
}
