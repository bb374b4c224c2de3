//! Processes by their pid: alive or not, signals, their resident memory, the processes that
//! name a path; and free loopback ports for servers about to start.

use std::net::TcpListener;
use std::path::Path;
use std::time::{Duration, Instant};

use crate::Error;

/// Whether a process runs (exists and is not a zombie: a zombie keeps its `/proc` entry, with
/// the state letter Z).
pub fn pid_alive(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(s) => !s
            .rsplit(')')
            .next()
            .is_some_and(|rest| rest.trim_start().starts_with('Z')),
        Err(_) => false,
    }
}

fn send(pid: u32, sig: rustix::process::Signal) {
    if let Some(p) = i32::try_from(pid)
        .ok()
        .and_then(rustix::process::Pid::from_raw)
    {
        let _ = rustix::process::kill_process(p, sig);
    }
}

/// Sends SIGKILL to `pid` (no error if it is gone already).
pub fn sigkill(pid: u32) {
    send(pid, rustix::process::Signal::KILL);
}

/// Sends SIGSTOP to `pid`: it stops, its sockets open and unread, as a process stalled by
/// its host does (no error if it is gone already).
pub fn sigstop(pid: u32) {
    send(pid, rustix::process::Signal::STOP);
}

/// Sends SIGCONT to `pid` (no error if it is gone already).
pub fn sigcont(pid: u32) {
    send(pid, rustix::process::Signal::CONT);
}

/// Sends SIGTERM to `pid` (no error if it is gone already).
pub fn sigterm(pid: u32) {
    send(pid, rustix::process::Signal::TERM);
}

/// Waits until `pid` is gone or `timeout` has passed; says whether it is gone.
pub fn wait_gone(pid: u32, timeout: Duration) -> bool {
    let deadline = Instant::now() + timeout;
    while pid_alive(pid) {
        if Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    true
}

/// Resident memory of a process, bytes (from `/proc/PID/status`).
pub fn resident_bytes(pid: u32) -> Option<u64> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = s.lines().find(|l| l.starts_with("VmRSS:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

/// Processes other than this one whose command line has an argument equal to `needle`: the
/// nodes of one cluster directory, found even when their pids were never recorded.
pub fn pids_naming(needle: &Path) -> Vec<u32> {
    let needle = needle.as_os_str().as_encoded_bytes();
    let me = std::process::id();
    let Ok(rd) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    rd.filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|&pid| pid != me)
        .filter(|pid| {
            std::fs::read(format!("/proc/{pid}/cmdline"))
                .is_ok_and(|c| c.split(|&b| b == 0).any(|arg| arg == needle))
        })
        .collect()
}

/// A free loopback port below the kernel's ephemeral range (32768 and up on Linux), so that a
/// server restarted on its port does not find it taken as the local port of some outgoing
/// connection. The port's listener is pushed on `held`: a caller choosing several ports keeps
/// them all until every one is chosen, so that none is picked twice, and drops them before
/// its servers bind.
pub fn free_port(held: &mut Vec<TcpListener>) -> Result<u16, Error> {
    const LOW: u32 = 20_000;
    const SPAN: u32 = 12_000;
    let seed = std::process::id()
        ^ std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.subsec_nanos());
    for i in 0..SPAN {
        let port = (LOW + (seed.wrapping_mul(2_654_435_761) % SPAN + i) % SPAN) as u16;
        if let Ok(l) = TcpListener::bind(("127.0.0.1", port)) {
            held.push(l);
            return Ok(port);
        }
    }
    Err(Error::Failed {
        what: "choosing a port".into(),
        detail: format!("no free port in {LOW}..{}", LOW + SPAN),
    })
}

/// Runs a command to its end; its failure, with its standard error, is the error.
pub fn run(args: &[&str]) -> Result<(), Error> {
    let what = args.join(" ");
    let out = std::process::Command::new(args[0])
        .args(&args[1..])
        .output()
        .map_err(|source| Error::Io {
            what: format!("running {what}"),
            source,
        })?;
    if !out.status.success() {
        return Err(Error::Failed {
            what: format!("`{what}`"),
            detail: String::from_utf8_lossy(&out.stderr).trim().to_string(),
        });
    }
    Ok(())
}

/// `program`, run inside network namespace `netns` when given (`ip netns exec`).
pub fn command_in(
    netns: Option<&str>,
    program: impl AsRef<std::ffi::OsStr>,
) -> std::process::Command {
    match netns {
        Some(ns) => {
            let mut c = std::process::Command::new("ip");
            c.args(["netns", "exec", ns]).arg(program);
            c
        }
        None => std::process::Command::new(program),
    }
}

/// Starts `cmd` in a process group of its own (a signal to the caller's group does not reach
/// it), with no input and its output appended to `log`; returns its pid. `what` names it in
/// errors.
pub fn spawn_logged(cmd: &mut std::process::Command, log: &Path, what: &str) -> Result<u32, Error> {
    use std::os::unix::process::CommandExt;
    use std::process::Stdio;
    let out = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(log)
        .map_err(Error::io(format!("opening {}", log.display())))?;
    let err = out
        .try_clone()
        .map_err(Error::io(format!("opening {}", log.display())))?;
    let child = cmd
        .process_group(0)
        .stdin(Stdio::null())
        .stdout(out)
        .stderr(err)
        .spawn()
        .map_err(Error::io(format!("starting {what}")))?;
    Ok(child.id())
}
