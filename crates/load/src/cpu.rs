//! Where the time goes: CPU time per operation of the server processes and of the benchmark
//! client, and the servers' context switches, over a window (the run phase).
//!
//! - **Server CPU** is `utime` + `stime` of `/proc/PID/stat` (the whole process, every thread,
//!   ended threads included), summed over the server processes, as the difference between the
//!   window's end and its start. A process that starts inside the window (a restarted node)
//!   counts from zero. A process killed inside the window is sampled just before the kill
//!   ([`ServerMeter::retire`]): what it ran between that sample and its death (the few
//!   milliseconds of the kill itself) is left out. A process that vanished without being
//!   retired is counted in [`ServerUsage::lost`] and its CPU is left out.
//! - **Context switches** are `voluntary_ctxt_switches` and `nonvoluntary_ctxt_switches` of
//!   `/proc/PID/task/TID/status`, per thread (`/proc/PID/status` has the main thread's only),
//!   summed over the threads alive at the window's end, each as the difference from its count
//!   at the start (zero for a thread born inside the window). Threads that end inside the
//!   window take their switches with them: the count is a lower bound whenever threads come and
//!   go ([`ServerUsage::threads_start`] and [`ServerUsage::threads_end`] show it).
//! - **Client CPU** is `getrusage(RUSAGE_SELF)` of the benchmark process (all its threads, the
//!   ended driver threads included; not its children such as `inec cache restart`).
//!
//! Clock ticks (`CLK_TCK`, usually 100 a second) make the server figures exact to 10 ms per
//! process: over a run phase of seconds that is well under 1%.

use std::collections::BTreeMap;
use std::time::Duration;

use serde::Serialize;

/// The fields of `/proc/PID/stat` this module uses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ProcStat {
    /// Field 14, clock ticks in user mode (all threads, ended ones included).
    pub utime_ticks: u64,
    /// Field 15, clock ticks in kernel mode.
    pub stime_ticks: u64,
    /// Field 20.
    pub threads: u64,
    /// Field 22, clock ticks from boot to the process's start: with the pid, names a process.
    pub start_ticks: u64,
}

/// Parses `/proc/PID/stat`. The command name (field 2) is in parentheses and may hold spaces
/// and parentheses itself, so the fields are counted from its last `)`.
pub fn parse_stat(text: &str) -> Option<ProcStat> {
    let rest = &text[text.rfind(')')? + 1..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    // f[0] is field 3 (state): field N is f[N - 3].
    let num = |n: usize| f.get(n - 3)?.parse::<u64>().ok();
    Some(ProcStat {
        utime_ticks: num(14)?,
        stime_ticks: num(15)?,
        threads: num(20)?,
        start_ticks: num(22)?,
    })
}

/// The command name of a `/proc/PID/stat` or `/proc/PID/task/TID/stat` (a thread's name).
pub fn parse_comm(text: &str) -> Option<&str> {
    Some(&text[text.find('(')? + 1..text.rfind(')')?])
}

/// A thread's name without its number: `worker-3` → `worker`, `peer` → `peer`, so that the
/// threads of a pool add up.
pub fn thread_group(name: &str) -> String {
    let t = name.trim_end_matches(|c: char| c.is_ascii_digit());
    let t = t.trim_end_matches(['-', '_', ' ', '#']);
    if t.is_empty() { name } else { t }.to_string()
}

/// Context switches of one thread.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Switches {
    /// The thread gave up the CPU (blocked: waiting on a lock, a channel, a socket).
    pub voluntary: u64,
    /// The scheduler took the CPU away (its time slice ended or another thread woke).
    pub involuntary: u64,
}

/// Parses the context-switch lines of `/proc/PID/task/TID/status`.
pub fn parse_switches(status: &str) -> Option<Switches> {
    let field = |name: &str| -> Option<u64> {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name)?.strip_prefix(':'))?
            .trim()
            .parse()
            .ok()
    };
    Some(Switches {
        voluntary: field("voluntary_ctxt_switches")?,
        involuntary: field("nonvoluntary_ctxt_switches")?,
    })
}

/// One process at one moment: its `stat`, each live thread's switches and each live
/// thread's name group ([`thread_group`]) and CPU ticks (user + system).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProcSample {
    pub stat: ProcStat,
    pub switches: BTreeMap<u32, Switches>,
    pub thread_ticks: BTreeMap<u32, (String, u64)>,
}

/// Reads process `pid` from `/proc` (`None`: it is gone, or this is not Linux).
pub fn sample(pid: u32) -> Option<ProcSample> {
    let stat = parse_stat(&std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?)?;
    let mut switches = BTreeMap::new();
    let mut thread_ticks = BTreeMap::new();
    if let Ok(rd) = std::fs::read_dir(format!("/proc/{pid}/task")) {
        for e in rd.flatten() {
            let Some(tid) = e.file_name().to_str().and_then(|t| t.parse::<u32>().ok()) else {
                continue;
            };
            // A thread may end between the listing and the read: skip it.
            if let Some(s) = std::fs::read_to_string(e.path().join("status"))
                .ok()
                .and_then(|s| parse_switches(&s))
            {
                switches.insert(tid, s);
            }
            if let Some((name, t)) = std::fs::read_to_string(e.path().join("stat"))
                .ok()
                .and_then(|s| Some((thread_group(parse_comm(&s)?), parse_stat(&s)?)))
            {
                thread_ticks.insert(tid, (name, t.utime_ticks + t.stime_ticks));
            }
        }
    }
    Some(ProcSample {
        stat,
        switches,
        thread_ticks,
    })
}

/// CPU ticks and context switches over a window.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Usage {
    pub user_ticks: u64,
    pub system_ticks: u64,
    pub switches: Switches,
    /// CPU ticks of the threads alive at the window's end, by thread name group (threads
    /// that ended inside the window are missing: the sum may be below the process's).
    pub by_thread: BTreeMap<String, u64>,
}

impl Usage {
    /// What one process ran from `before` (`None`: it started inside the window) to `after`.
    pub fn between(before: Option<&ProcSample>, after: &ProcSample) -> Usage {
        let (u0, s0) = before.map_or((0, 0), |b| (b.stat.utime_ticks, b.stat.stime_ticks));
        let mut sw = Switches::default();
        for (tid, a) in &after.switches {
            let b = before
                .and_then(|b| b.switches.get(tid))
                .copied()
                .unwrap_or_default();
            sw.voluntary += a.voluntary.saturating_sub(b.voluntary);
            sw.involuntary += a.involuntary.saturating_sub(b.involuntary);
        }
        let mut by_thread = BTreeMap::new();
        for (tid, (name, t)) in &after.thread_ticks {
            let b = before
                .and_then(|b| b.thread_ticks.get(tid))
                .map_or(0, |x| x.1);
            *by_thread.entry(name.clone()).or_default() += t.saturating_sub(b);
        }
        Usage {
            user_ticks: after.stat.utime_ticks.saturating_sub(u0),
            system_ticks: after.stat.stime_ticks.saturating_sub(s0),
            switches: sw,
            by_thread,
        }
    }

    fn add(&mut self, o: Usage) {
        self.user_ticks += o.user_ticks;
        self.system_ticks += o.system_ticks;
        self.switches.voluntary += o.switches.voluntary;
        self.switches.involuntary += o.switches.involuntary;
        for (name, t) in o.by_thread {
            *self.by_thread.entry(name).or_default() += t;
        }
    }
}

/// What the server processes ran over a window.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ServerUsage {
    pub usage: Usage,
    /// Server processes running at the window's end.
    pub processes: usize,
    /// Their threads at the window's start (processes running then) and at its end.
    pub threads_start: u64,
    pub threads_end: u64,
    /// Processes killed inside the window and sampled just before (see the module's rule).
    pub retired: usize,
    /// Processes running at the start that vanished without being retired: CPU left out.
    pub lost: usize,
}

/// Measures the server processes over a window: [`ServerMeter::start`], [`ServerMeter::retire`]
/// before each kill, [`ServerMeter::finish`].
#[derive(Debug)]
pub struct ServerMeter {
    baseline: BTreeMap<u32, ProcSample>,
    /// (pid, start ticks) of the processes already accounted for.
    retired: Vec<(u32, u64)>,
    total: Usage,
}

impl ServerMeter {
    /// Samples the processes `pids` (those not running are skipped).
    pub fn start(pids: &[u32]) -> ServerMeter {
        ServerMeter {
            baseline: pids.iter().filter_map(|&p| Some((p, sample(p)?))).collect(),
            retired: Vec::new(),
            total: Usage::default(),
        }
    }

    /// Accounts for process `pid` now, before it is killed.
    pub fn retire(&mut self, pid: u32) {
        if let Some(now) = sample(pid) {
            self.account(pid, &now);
            self.retired.push((pid, now.stat.start_ticks));
        }
    }

    fn account(&mut self, pid: u32, now: &ProcSample) {
        let before = self
            .baseline
            .get(&pid)
            .filter(|b| b.stat.start_ticks == now.stat.start_ticks);
        self.total.add(Usage::between(before, now));
    }

    /// Ends the window; `pids` are the server processes now (restarted ones included).
    pub fn finish(mut self, pids: &[u32]) -> ServerUsage {
        let mut out = ServerUsage {
            threads_start: self.baseline.values().map(|b| b.stat.threads).sum(),
            retired: self.retired.len(),
            ..ServerUsage::default()
        };
        let mut seen = Vec::new();
        for &pid in pids {
            let Some(now) = sample(pid) else { continue };
            let me = (pid, now.stat.start_ticks);
            if self.retired.contains(&me) || seen.contains(&me) {
                continue;
            }
            seen.push(me);
            out.processes += 1;
            out.threads_end += now.stat.threads;
            self.account(pid, &now);
        }
        out.lost = self
            .baseline
            .iter()
            .filter(|(&p, b)| {
                let me = (p, b.stat.start_ticks);
                !self.retired.contains(&me) && !seen.contains(&me)
            })
            .count();
        out.usage = self.total;
        out
    }
}

/// The calling process's own CPU time and context switches (`getrusage(RUSAGE_SELF)`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SelfUsage {
    pub user: Duration,
    pub system: Duration,
    pub switches: Switches,
}

/// `getrusage(RUSAGE_SELF)`: every thread of this process, ended ones included.
#[allow(unsafe_code)] // One FFI call behind this safe function; see the crate root.
pub fn self_usage() -> Option<SelfUsage> {
    // SAFETY: `rusage` is plain old data: all-zero bytes are a valid value.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: `ru` is a valid, writable `rusage`; `getrusage` writes only it.
    let rc = unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) };
    if rc != 0 {
        return None;
    }
    let tv = |t: libc::timeval| {
        Duration::from_secs(t.tv_sec.max(0) as u64) + Duration::from_micros(t.tv_usec.max(0) as u64)
    };
    Some(SelfUsage {
        user: tv(ru.ru_utime),
        system: tv(ru.ru_stime),
        switches: Switches {
            voluntary: ru.ru_nvcsw.max(0) as u64,
            involuntary: ru.ru_nivcsw.max(0) as u64,
        },
    })
}

/// `sysconf(_SC_CLK_TCK)`: the unit of `/proc/PID/stat`'s times.
#[allow(unsafe_code)] // One FFI call behind this safe function; see the crate root.
pub fn clock_ticks_per_second() -> u64 {
    // SAFETY: `sysconf` only reads a configuration value.
    let t = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    if t > 0 {
        t as u64
    } else {
        100
    }
}

/// Where a run phase's CPU went, per operation (µs of CPU time per completed operation).
#[derive(Clone, Debug, Serialize)]
pub struct CpuPerOp {
    /// Operations completed successfully inside the window (the warm-up included; a
    /// read-modify-write is one operation of two requests, as YCSB counts it).
    pub ops: u64,
    /// Wall-clock seconds of the window (the run phase, its warm-up and drain included).
    pub window_s: f64,
    pub server_user_us_per_op: f64,
    pub server_system_us_per_op: f64,
    pub server_us_per_op: f64,
    pub client_user_us_per_op: f64,
    pub client_system_us_per_op: f64,
    pub client_us_per_op: f64,
    /// Server + client.
    pub total_us_per_op: f64,
    /// Cores the servers and the client kept busy on average (CPU seconds ÷ window seconds).
    pub server_cores: f64,
    pub client_cores: f64,
    /// The throughput the machine's cores allow at this CPU cost: cores × 10^6 ÷ total µs/op.
    pub cpu_bound_ops_s: f64,
    /// Context switches of the servers' threads per operation (a lower bound when threads
    /// end inside the window).
    pub server_voluntary_switches_per_op: f64,
    pub server_involuntary_switches_per_op: f64,
    /// Server CPU µs per operation by thread name group (`worker`, `peer`, …: the number of
    /// a pool's thread dropped), threads alive at the window's end only.
    pub server_us_per_op_by_thread: BTreeMap<String, f64>,
    pub client_voluntary_switches_per_op: f64,
    pub client_involuntary_switches_per_op: f64,
    pub server_processes: usize,
    /// Server threads at the window's start and end (summed over the processes).
    pub server_threads_start: u64,
    pub server_threads_end: u64,
    /// Server processes killed inside the window whose CPU was sampled before the kill.
    pub killed_processes_sampled: usize,
    /// Server processes that vanished unsampled: their CPU is left out.
    pub processes_left_out: usize,
}

impl CpuPerOp {
    /// The per-operation figures of a window of `window` with `ops` completed operations, on a
    /// machine of `cores` cores, `ticks_per_s` clock ticks a second.
    pub fn new(
        server: &ServerUsage,
        client: (SelfUsage, SelfUsage),
        ops: u64,
        window: Duration,
        cores: usize,
        ticks_per_s: u64,
    ) -> CpuPerOp {
        let per_op = |us: f64| if ops > 0 { us / ops as f64 } else { 0.0 };
        let tick_us = 1e6 / ticks_per_s.max(1) as f64;
        let su = server.usage.user_ticks as f64 * tick_us;
        let ss = server.usage.system_ticks as f64 * tick_us;
        let (c0, c1) = client;
        let cu = c1.user.saturating_sub(c0.user).as_secs_f64() * 1e6;
        let cs = c1.system.saturating_sub(c0.system).as_secs_f64() * 1e6;
        let total = per_op(su + ss + cu + cs);
        let secs = window.as_secs_f64().max(1e-9);
        CpuPerOp {
            ops,
            window_s: window.as_secs_f64(),
            server_user_us_per_op: per_op(su),
            server_system_us_per_op: per_op(ss),
            server_us_per_op: per_op(su + ss),
            client_user_us_per_op: per_op(cu),
            client_system_us_per_op: per_op(cs),
            client_us_per_op: per_op(cu + cs),
            total_us_per_op: total,
            server_cores: (su + ss) / 1e6 / secs,
            client_cores: (cu + cs) / 1e6 / secs,
            cpu_bound_ops_s: if total > 0.0 {
                cores as f64 * 1e6 / total
            } else {
                0.0
            },
            server_voluntary_switches_per_op: per_op(server.usage.switches.voluntary as f64),
            server_involuntary_switches_per_op: per_op(server.usage.switches.involuntary as f64),
            server_us_per_op_by_thread: server
                .usage
                .by_thread
                .iter()
                .map(|(n, &t)| (n.clone(), per_op(t as f64 * tick_us)))
                .collect(),
            client_voluntary_switches_per_op: per_op(
                c1.switches.voluntary.saturating_sub(c0.switches.voluntary) as f64,
            ),
            client_involuntary_switches_per_op: per_op(
                c1.switches
                    .involuntary
                    .saturating_sub(c0.switches.involuntary) as f64,
            ),
            server_processes: server.processes,
            server_threads_start: server.threads_start,
            server_threads_end: server.threads_end,
            killed_processes_sampled: server.retired,
            processes_left_out: server.lost,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // A memcached's /proc/PID/stat (Linux 6.x), 52 fields.
    const STAT: &str = "4242 (memcached) S 4100 4242 4100 0 -1 4194560 1523 0 0 0 \
        1234 567 0 0 20 0 6 0 987654 1119227904 2190 18446744073709551615 1 1 0 0 0 0 0 \
        4096 16899 0 0 0 17 1 0 0 0 0 0 0 0 0 0 0 0 0 0\n";

    #[test]
    fn stat_fields_are_counted_from_the_last_parenthesis() {
        let s = parse_stat(STAT).unwrap();
        assert_eq!(
            s,
            ProcStat {
                utime_ticks: 1234,
                stime_ticks: 567,
                threads: 6,
                start_ticks: 987654,
            }
        );
        // A command name with spaces and parentheses does not shift the fields.
        let odd = STAT.replace("(memcached)", "(a) b (c) d)");
        assert_eq!(parse_stat(&odd), Some(s));
        assert_eq!(parse_comm(&odd), Some("a) b (c) d"));
        assert_eq!(thread_group("worker-12"), "worker");
        assert_eq!(thread_group("peer"), "peer");
        assert_eq!(thread_group("mc-worker"), "mc-worker");
        assert_eq!(thread_group("1234"), "1234");
        // Cut short, or not numbers: no sample rather than a wrong one.
        assert_eq!(parse_stat("4242 (x) S 1 2 3"), None);
        assert_eq!(parse_stat(&STAT.replace(" 1234 ", " x ")), None);
        assert_eq!(parse_stat("no parenthesis"), None);
    }

    #[test]
    fn switches_are_read_from_status() {
        let status = "Name:\tworker-0\nState:\tS (sleeping)\nThreads:\t9\n\
            VmRSS:\t  10240 kB\nvoluntary_ctxt_switches:\t150\n\
            nonvoluntary_ctxt_switches:\t7\n";
        assert_eq!(
            parse_switches(status),
            Some(Switches {
                voluntary: 150,
                involuntary: 7
            })
        );
        assert_eq!(
            parse_switches("Name:\tx\nvoluntary_ctxt_switches:\t1\n"),
            None
        );
    }

    fn at(user: u64, sys: u64, start: u64, threads: &[(u32, u64, u64, u64)]) -> ProcSample {
        ProcSample {
            stat: ProcStat {
                utime_ticks: user,
                stime_ticks: sys,
                threads: threads.len() as u64,
                start_ticks: start,
            },
            thread_ticks: threads
                .iter()
                .map(|&(t, _, _, ticks)| {
                    (t, (if t == 10 { "main" } else { "worker" }.into(), ticks))
                })
                .collect(),
            switches: threads
                .iter()
                .map(|&(t, v, i, _)| {
                    (
                        t,
                        Switches {
                            voluntary: v,
                            involuntary: i,
                        },
                    )
                })
                .collect(),
        }
    }

    #[test]
    fn usage_is_the_difference_per_thread() {
        let before = at(
            100,
            40,
            7,
            &[(10, 5, 1, 50), (11, 20, 2, 60), (12, 3, 3, 30)],
        );
        // Thread 12 ended (its switches and ticks are gone), 13 was born.
        let after = at(
            160,
            55,
            7,
            &[(10, 9, 1, 70), (11, 30, 6, 90), (13, 4, 2, 15)],
        );
        assert_eq!(
            Usage::between(Some(&before), &after),
            Usage {
                user_ticks: 60,
                system_ticks: 15,
                switches: Switches {
                    voluntary: 4 + 10 + 4,
                    involuntary: 4 + 2
                },
                by_thread: [("main".to_string(), 20), ("worker".to_string(), 30 + 15)].into(),
            }
        );
        // A process that started inside the window counts from zero.
        assert_eq!(
            Usage::between(None, &after),
            Usage {
                user_ticks: 160,
                system_ticks: 55,
                switches: Switches {
                    voluntary: 43,
                    involuntary: 9
                },
                by_thread: [("main".to_string(), 70), ("worker".to_string(), 105)].into(),
            }
        );
    }

    #[test]
    fn per_op_figures() {
        let server = ServerUsage {
            usage: Usage {
                user_ticks: 300,
                system_ticks: 100,
                switches: Switches {
                    voluntary: 20_000,
                    involuntary: 1_000,
                },
                by_thread: [("worker".to_string(), 250)].into(),
            },
            processes: 3,
            threads_start: 12,
            threads_end: 12,
            retired: 1,
            lost: 0,
        };
        let c0 = SelfUsage {
            user: Duration::from_millis(500),
            system: Duration::from_millis(100),
            switches: Switches::default(),
        };
        let c1 = SelfUsage {
            user: Duration::from_millis(1500),
            system: Duration::from_millis(1100),
            switches: Switches {
                voluntary: 100,
                involuntary: 10_000,
            },
        };
        // 4 s of server CPU (400 ticks of 10 ms) and 2 s of client CPU over 10 000 ops in 4 s.
        let c = CpuPerOp::new(&server, (c0, c1), 10_000, Duration::from_secs(4), 2, 100);
        assert!((c.server_user_us_per_op - 300.0).abs() < 1e-9);
        assert!((c.server_system_us_per_op - 100.0).abs() < 1e-9);
        assert!((c.client_user_us_per_op - 100.0).abs() < 1e-9);
        assert!((c.client_system_us_per_op - 100.0).abs() < 1e-9);
        assert!((c.total_us_per_op - 600.0).abs() < 1e-9);
        assert!((c.server_cores - 1.0).abs() < 1e-9);
        assert!((c.client_cores - 0.5).abs() < 1e-9);
        // 2 cores at 600 µs per op: at most 3 333 ops/s.
        assert!((c.cpu_bound_ops_s - 2e6 / 600.0).abs() < 1e-6);
        assert!((c.server_voluntary_switches_per_op - 2.0).abs() < 1e-12);
        assert!((c.client_involuntary_switches_per_op - 1.0).abs() < 1e-12);
        assert_eq!(c.killed_processes_sampled, 1);
        assert_eq!(c.server_us_per_op_by_thread["worker"], 250.0);
        // No operation: zeros, not NaN or infinity.
        let z = CpuPerOp::new(&server, (c0, c1), 0, Duration::from_secs(4), 2, 100);
        assert_eq!((z.total_us_per_op, z.cpu_bound_ops_s), (0.0, 0.0));
    }

    #[test]
    fn the_meter_sees_this_process_and_children_it_is_given() {
        // This test process burns CPU between start and finish; a second sample is taken as
        // if it were killed (retired) and must not be counted twice.
        let me = std::process::id();
        let m = ServerMeter::start(&[me, u32::MAX]);
        // Spin until this process has run 60 ms more of CPU (by getrusage), however long the
        // shared machine makes that take.
        let c0 = self_usage().unwrap();
        let mut x = 0u64;
        loop {
            for _ in 0..10_000 {
                x = x.wrapping_mul(6364136223846793005).wrapping_add(1);
            }
            let c1 = self_usage().unwrap();
            if (c1.user + c1.system).saturating_sub(c0.user + c0.system)
                >= Duration::from_millis(60)
            {
                break;
            }
        }
        assert_ne!(x, 1);
        let u = m.finish(&[me, me, u32::MAX]);
        assert_eq!(u.processes, 1, "the same process listed twice counts once");
        assert!(u.threads_end >= 1 && u.threads_start >= 1);
        assert!(
            u.usage.user_ticks + u.usage.system_ticks >= 1,
            "60 ms of CPU is at least one tick: {u:?}"
        );
        assert_eq!(u.lost, 0);
        let mut m = ServerMeter::start(&[me]);
        m.retire(me);
        let u = m.finish(&[me]);
        assert_eq!((u.retired, u.processes, u.lost), (1, 0, 0));
        // A process gone without a retire is reported as left out.
        let mut m = ServerMeter::start(&[me]);
        m.baseline.get_mut(&me).unwrap().stat.start_ticks += 1;
        let u = m.finish(&[]);
        assert_eq!(u.lost, 1);
    }
}
