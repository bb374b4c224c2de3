//! Real `inec serve` processes started by `inec cache up`, on loopback: values of 0 B..1 MiB
//! written through every node read back identical through every other, for every scheme;
//! SIGKILL of up to m nodes (an agent among them) under a writer and readers never returns
//! wrong bytes, and restart + recovery brings every stripe back whole; m+1 down gives
//! SERVER_ERROR; a flipped bit is detected, repaired and never returned; the peer messages of
//! a write and of a normal read are counted. Every spawned process is killed on drop.

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rand::rngs::SmallRng;
use rand::{Rng, RngCore, SeedableRng};

const INEC: &str = env!("CARGO_BIN_EXE_inec");

/// One cluster at a time: the tests share two cores with everything else, and free ports are
/// chosen by `cache up` (two clusters starting at once could pick the same one).
static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

struct Cluster {
    _turn: std::sync::MutexGuard<'static, ()>,
    dir: tempfile::TempDir,
    clients: Vec<SocketAddr>,
    chunks: usize,
}

fn state(dir: &Path) -> serde_json::Value {
    serde_json::from_str(&std::fs::read_to_string(dir.join("cache.json")).unwrap()).unwrap()
}

impl Cluster {
    fn up(code: &str, scheme: &str, chunks: usize) -> Cluster {
        Cluster::up_with(code, scheme, chunks, &[])
    }

    fn up_with(code: &str, scheme: &str, chunks: usize, extra: &[&str]) -> Cluster {
        Cluster::up_env(code, scheme, chunks, extra, &[])
    }

    /// A cluster whose node processes get `env` (test-only settings).
    fn up_env(
        code: &str,
        scheme: &str,
        chunks: usize,
        extra: &[&str],
        env: &[(&str, &str)],
    ) -> Cluster {
        let turn = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
        let dir = tempfile::tempdir().unwrap();
        // These tests are of the paper's layout unless they ask for another.
        let layout: &[&str] = if extra.contains(&"--layout") {
            &[]
        } else {
            &["--layout", "split"]
        };
        let out = Command::new(INEC)
            .envs(env.iter().copied())
            .args(["cache", "up", "--dir"])
            .arg(dir.path())
            .args(layout)
            .args([
                "--code",
                code,
                "--scheme",
                scheme,
                "--debug-commands",
                "-t",
                "2",
            ])
            .args(["--heartbeat-ms", "50", "-m", "64"])
            .args(if extra.contains(&"--down-after-ms") {
                &[][..]
            } else {
                &["--down-after-ms", "600"][..]
            })
            .args(extra)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "cache up failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let st = state(dir.path());
        let clients = st["members"]
            .as_array()
            .unwrap()
            .iter()
            .map(|m| m["client"].as_str().unwrap().parse().unwrap())
            .collect();
        Cluster {
            _turn: turn,
            dir,
            clients,
            chunks,
        }
    }

    fn path(&self) -> PathBuf {
        self.dir.path().to_path_buf()
    }

    fn pids(&self) -> Vec<u32> {
        state(self.dir.path())["pids"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| u32::try_from(p.as_u64().unwrap()).unwrap())
            .collect()
    }

    fn kill(&self, node: usize) {
        let pid = self.pids()[node];
        harness::sigkill(pid);
        assert!(
            harness::process::wait_gone(pid, Duration::from_secs(5)),
            "node {node} (pid {pid}) survived SIGKILL"
        );
    }

    /// Sends a signal (`STOP`, `CONT`) to a node's process: a stall, not a death.
    fn signal(&self, node: usize, sig: &str) {
        let pid = self.pids()[node];
        let ok = Command::new("kill")
            .args([&format!("-{sig}"), &pid.to_string()])
            .status()
            .unwrap();
        assert!(ok.success(), "kill -{sig} {pid}");
        if sig == "STOP" {
            // Every thread of the node stopped before the test goes on: what it sends next
            // must meet a node that cannot answer.
            let deadline = Instant::now() + Duration::from_secs(5);
            while !all_threads_stopped(pid) {
                assert!(
                    Instant::now() < deadline,
                    "node {node} (pid {pid}) did not stop"
                );
                std::thread::sleep(Duration::from_millis(5));
            }
        }
    }

    fn restart(&self, node: usize) {
        let out = Command::new(INEC)
            .args(["cache", "restart", "--dir"])
            .arg(self.path())
            .arg(node.to_string())
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "restart: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    fn client(&self, node: usize) -> Client {
        Client::connect(self.clients[node])
    }

    /// Waits until every node is ready and sees every other node up.
    fn wait_whole(&self) {
        let deadline = Instant::now() + Duration::from_secs(90);
        loop {
            let whole = (0..self.clients.len()).all(|i| {
                let Ok(mut c) = Client::try_connect(self.clients[i]) else {
                    return false;
                };
                let s = c.stats("inec");
                s["ready"] == "1"
                    && s["members_down"] == "0"
                    && (0..self.clients.len()).all(|j| s[&format!("node_{j}")] == "up")
            });
            if whole {
                return;
            }
            assert!(Instant::now() < deadline, "cluster not whole in time");
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    fn status(&self) -> String {
        let out = Command::new(INEC)
            .args(["cache", "status", "--dir"])
            .arg(self.path())
            .output()
            .unwrap();
        String::from_utf8(out.stdout).unwrap()
    }

    fn sum_stat(&self, name: &str) -> u64 {
        (0..self.clients.len())
            .map(|i| self.client(i).stats("inec")[name].parse::<u64>().unwrap())
            .sum()
    }

    /// Peer messages and replies sent, summed over the nodes (heartbeats are not counted).
    fn peer_messages(&self) -> u64 {
        self.sum_stat("peer_messages_sent") + self.sum_stat("peer_replies_sent")
    }

    /// The peer messages `op` costs, counted in a window with no other traffic. In the whole
    /// layout every home tells its parity positions once a second which kept deltas every
    /// position applied (`Commit`), and such a round may fall in any window. So this waits
    /// until every `Commit` sent was answered and no message moved for 100 ms, runs `op`,
    /// waits (up to 2 s) until `want` messages were counted, and runs `op` again when a
    /// `Commit` was sent meanwhile. Returns the count, how many times `op` ran, and what
    /// moved in the window, node by node.
    fn messages_of(&self, want: u64, mut op: impl FnMut()) -> (u64, usize, String) {
        let commits = || {
            (
                self.sum_stat("whole_commits_sent"),
                self.sum_stat("whole_commits_answered"),
            )
        };
        for attempt in 1..=20 {
            let deadline = Instant::now() + Duration::from_secs(10);
            loop {
                let (c, p) = (commits(), self.peer_messages());
                std::thread::sleep(Duration::from_millis(100));
                if c.0 == c.1 && commits() == c && self.peer_messages() == p {
                    break;
                }
                assert!(Instant::now() < deadline, "the cluster never fell quiet");
            }
            let (c0, all) = (commits(), self.all_stats());
            let before = self.peer_messages();
            op();
            let deadline = Instant::now() + Duration::from_secs(2);
            while self.peer_messages() - before < want && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(10));
            }
            let sent = self.peer_messages() - before;
            if commits() == c0 {
                return (sent, attempt, Cluster::moved(&all, &self.all_stats()));
            }
        }
        panic!("every window held a Commit round");
    }

    /// Every node's numeric `stats inec` counters, to say what moved when a count is off.
    fn all_stats(&self) -> Vec<HashMap<String, u64>> {
        (0..self.clients.len())
            .map(|i| {
                self.client(i)
                    .stats("inec")
                    .into_iter()
                    .filter_map(|(k, v)| Some((k, v.parse::<u64>().ok()?)))
                    .collect()
            })
            .collect()
    }

    /// The counters that moved between two [`Cluster::all_stats`], node by node.
    fn moved(before: &[HashMap<String, u64>], after: &[HashMap<String, u64>]) -> String {
        let mut out = String::new();
        for (i, (b, a)) in before.iter().zip(after).enumerate() {
            let mut moved: Vec<_> = a
                .iter()
                .filter(|(k, v)| b.get(*k) != Some(*v))
                .map(|(k, v)| format!("{k} +{}", v.wrapping_sub(b.get(k).copied().unwrap_or(0))))
                .collect();
            moved.sort();
            out.push_str(&format!("node {i}: {}\n", moved.join(", ")));
        }
        out
    }
}

/// Whether every thread of process `pid` is stopped (state `T` in `/proc/<pid>/task/*/stat`).
fn all_threads_stopped(pid: u32) -> bool {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return false;
    };
    tasks.flatten().all(|t| {
        std::fs::read_to_string(t.path().join("stat")).is_ok_and(|stat| {
            // The state follows the command name, which is in parentheses.
            stat.rsplit_once(") ")
                .is_some_and(|(_, rest)| rest.starts_with('T'))
        })
    })
}

impl Drop for Cluster {
    fn drop(&mut self) {
        // A failing test keeps its nodes' logs (a node's panic is only there).
        if std::thread::panicking() {
            let keep = std::env::temp_dir().join(format!(
                "inec-test-logs-{}-{}",
                std::process::id(),
                self.clients[0].port()
            ));
            if std::fs::create_dir_all(&keep).is_ok() {
                for e in std::fs::read_dir(self.dir.path())
                    .into_iter()
                    .flatten()
                    .flatten()
                {
                    if e.file_name().to_string_lossy().ends_with(".log") {
                        let _ = std::fs::copy(e.path(), keep.join(e.file_name()));
                    }
                }
                eprintln!("node logs kept in {}", keep.display());
            }
        }
        let _ = Command::new(INEC)
            .args(["cache", "down", "--dir"])
            .arg(self.dir.path())
            .output();
        for pid in std::fs::read_to_string(self.dir.path().join("cache.json"))
            .ok()
            .and_then(|t| serde_json::from_str::<serde_json::Value>(&t).ok())
            .and_then(|v| v["pids"].as_array().cloned())
            .unwrap_or_default()
        {
            let _ = Command::new("kill")
                .args(["-KILL", &pid.to_string()])
                .status();
        }
    }
}

/// A minimal memcached text-protocol client.
struct Client {
    r: BufReader<TcpStream>,
    w: TcpStream,
}

#[derive(Debug, PartialEq)]
enum Got {
    Hit(Vec<u8>),
    Miss,
    Error(String),
}

impl Client {
    fn try_connect(addr: SocketAddr) -> std::io::Result<Client> {
        let s = TcpStream::connect_timeout(&addr, Duration::from_secs(2))?;
        s.set_read_timeout(Some(Duration::from_secs(30)))?;
        Ok(Client {
            r: BufReader::new(s.try_clone()?),
            w: s,
        })
    }

    fn connect(addr: SocketAddr) -> Client {
        Client::try_connect(addr).unwrap()
    }

    fn line(&mut self) -> String {
        let mut l = String::new();
        self.r.read_line(&mut l).unwrap();
        l
    }

    fn send(&mut self, b: &[u8]) -> String {
        self.w.write_all(b).unwrap();
        self.line()
    }

    fn set(&mut self, key: &str, value: &[u8]) -> String {
        let mut b = format!("set {key} 0 0 {}\r\n", value.len()).into_bytes();
        b.extend_from_slice(value);
        b.extend_from_slice(b"\r\n");
        self.send(&b)
    }

    /// `add`, `replace`, `cas` (with `cas`), … of `value`: the reply line.
    fn store(&mut self, cmd: &str, key: &str, value: &[u8], cas: Option<u64>) -> String {
        let cas = cas.map_or(String::new(), |c| format!(" {c}"));
        let mut b = format!("{cmd} {key} 0 0 {}{cas}\r\n", value.len()).into_bytes();
        b.extend_from_slice(value);
        b.extend_from_slice(b"\r\n");
        self.send(&b)
    }

    /// `get` of several keys: the (key, value) of each hit, in the order of the reply.
    fn get_many(&mut self, keys: &[&str]) -> Vec<(String, Vec<u8>)> {
        self.w
            .write_all(format!("get {}\r\n", keys.join(" ")).as_bytes())
            .unwrap();
        let mut hits = Vec::new();
        loop {
            let first = self.line();
            if first == "END\r\n" {
                return hits;
            }
            let mut t = first.split_whitespace();
            assert_eq!(t.next(), Some("VALUE"), "{first:?}");
            let key = t.next().unwrap().to_string();
            let len: usize = t.nth(1).unwrap().parse().unwrap();
            let mut v = vec![0u8; len + 2];
            self.r.read_exact(&mut v).unwrap();
            v.truncate(len);
            hits.push((key, v));
        }
    }

    /// The CAS value of a present key (`gets`).
    fn cas_of(&mut self, key: &str) -> u64 {
        let first = self.send(format!("gets {key}\r\n").as_bytes());
        let cas = first
            .split_whitespace()
            .nth(4)
            .expect("VALUE … cas")
            .parse();
        assert!(matches!(self.read_value(&first), Got::Hit(_)));
        cas.unwrap()
    }

    fn read_value(&mut self, first: &str) -> Got {
        if first == "END\r\n" || first == "EN\r\n" {
            return Got::Miss;
        }
        let len: usize = if let Some(rest) = first.strip_prefix("VALUE ") {
            rest.split_whitespace().nth(2).unwrap().parse().unwrap()
        } else if let Some(rest) = first.strip_prefix("VA ") {
            rest.split_whitespace().next().unwrap().parse().unwrap()
        } else {
            return Got::Error(first.to_string());
        };
        let mut v = vec![0u8; len + 2];
        self.r.read_exact(&mut v).unwrap();
        v.truncate(len);
        if first.starts_with("VALUE ") {
            assert_eq!(self.line(), "END\r\n");
        }
        Got::Hit(v)
    }

    fn get(&mut self, key: &str) -> Got {
        let first = self.send(format!("get {key}\r\n").as_bytes());
        self.read_value(&first)
    }

    fn mg(&mut self, key: &str) -> Got {
        let first = self.send(format!("mg {key} v\r\n").as_bytes());
        self.read_value(&first)
    }

    fn mg_degraded(&mut self, key: &str, position: usize) -> Got {
        let first = self.send(format!("mg {key} v Oinec-degrade-{position}\r\n").as_bytes());
        self.read_value(&first)
    }

    fn stats(&mut self, group: &str) -> HashMap<String, String> {
        self.w
            .write_all(format!("stats {group}").trim_end().as_bytes())
            .unwrap();
        self.w.write_all(b"\r\n").unwrap();
        let mut m = HashMap::new();
        loop {
            let l = self.line();
            if l == "END\r\n" {
                return m;
            }
            let mut t = l.trim_end().splitn(3, ' ');
            assert_eq!(t.next(), Some("STAT"), "{l:?}");
            m.insert(
                t.next().unwrap().to_string(),
                t.next().unwrap_or("").to_string(),
            );
        }
    }
}

fn random_value(rng: &mut SmallRng, len: usize) -> Vec<u8> {
    let mut v = vec![0u8; len];
    rng.fill_bytes(&mut v);
    v
}

/// Values of 0 B..1 MiB through every node, read back through every other node.
fn round_trip(code: &str, scheme: &str, chunks: usize, seed: u64) {
    round_trip_with(code, scheme, chunks, seed, &[]);
}

fn round_trip_with(code: &str, scheme: &str, chunks: usize, seed: u64, extra: &[&str]) {
    let c = Cluster::up_with(code, scheme, chunks, extra);
    let n = c.clients.len();
    let mut rng = SmallRng::seed_from_u64(seed);
    let mut sizes = vec![0usize, 1, 1023, 1024, 1025, 6 * 1024 + 5, 1 << 20];
    while sizes.len() < 18 {
        sizes.push(rng.gen_range(0..=(1 << 20)));
    }
    let mut clients: Vec<Client> = (0..n).map(|i| c.client(i)).collect();
    let mut values = Vec::new();
    for (i, &len) in sizes.iter().enumerate() {
        let key = format!("{scheme}:{i}");
        let v = random_value(&mut rng, len);
        assert_eq!(
            clients[i % n].set(&key, &v),
            "STORED\r\n",
            "{key} ({len} bytes)"
        );
        values.push((key, v));
    }
    for (i, (key, v)) in values.iter().enumerate() {
        for (j, cl) in clients.iter_mut().enumerate() {
            if j == i % n {
                continue;
            }
            assert!(cl.get(key) == Got::Hit(v.clone()), "{key} through node {j}");
        }
        // A forced degraded read of a data chunk returns the same bytes.
        let got = clients[(i + 1) % n].mg_degraded(key, i % (c.chunks - 3).max(1));
        assert!(got == Got::Hit(v.clone()), "degraded read of {key}");
    }
    let degraded = c.sum_stat("forced_degraded_reads");
    assert_eq!(degraded, values.len() as u64);
    // Plain gets run on the agent's loop, whichever node the client asked (`loop_reads`);
    // one the loop hands to a worker reads on the read template at the agent, or over peer
    // messages when a loaded machine's heartbeats marked a member down for a moment
    // (`messages_per_operation_*` checks the exact paths).
    let coded = sizes.iter().filter(|&&len| len >= 1024).count() as u64;
    let reads = c.sum_stat("read_plan_runs");
    let read_fallbacks = c.sum_stat("read_plan_fallbacks");
    let loop_reads = c.sum_stat("loop_reads");
    assert!(
        reads + read_fallbacks + loop_reads >= coded * (n as u64 - 1),
        "{reads} normal reads on plans, {read_fallbacks} not, {loop_reads} on event loops"
    );
    // Writes at the agent's own client port run on its client loop (`loop_writes`, coded and
    // replicated values alike; not TriEC's), the others on the write template.
    let writes = c.sum_stat("write_plan_runs");
    let write_fallbacks = c.sum_stat("write_plan_fallbacks");
    let loop_writes = c.sum_stat("loop_writes");
    assert!(
        writes + write_fallbacks <= coded && writes + write_fallbacks + loop_writes >= coded,
        "{coded} coded writes: {writes} on plans, {write_fallbacks} not, {loop_writes} on loops"
    );
    assert!(loop_writes <= sizes.len() as u64);
    assert!(
        writes + loop_writes >= coded / 2,
        "{writes} writes on plans"
    );
}

#[test]
fn round_trip_rs() {
    round_trip("rs:6,3", "rs", 9, 1);
}

#[test]
fn round_trip_lrc() {
    round_trip("lrc:6,2,2", "lrc", 10, 2);
}

#[test]
fn round_trip_ppr() {
    round_trip("rs:6,3", "ppr", 9, 3);
}

#[test]
fn round_trip_ecpipe() {
    round_trip("rs:6,3", "ecpipe", 9, 4);
}

#[test]
fn round_trip_incoherent() {
    round_trip_with("rs:6,3", "rs", 9, 6, &["--mode", "incoherent"]);
}

#[test]
fn round_trip_triec() {
    round_trip("rs:6,3", "triec", 9, 5);
}

/// Values of 0 B..1 MiB with `--layout whole` (those larger than a 256 KiB slab page split)
/// through every node, read back through every other node, each also read forced degraded
/// (rebuilt from its page's stripe); the whole ones are read at their home without a peer
/// message.
#[test]
fn round_trip_whole() {
    round_trip_whole_with("rs:6,3", "rs", 9, "plan");
}

/// The same with `--whole-repair direct`: degraded reads decode a consistent cut of direct
/// range reads, at the home on its event loop.
#[test]
fn round_trip_whole_direct() {
    round_trip_whole_with("rs:6,3", "rs", 9, "direct");
}

/// The same under LRC(6,2,2): the local parity positions apply the deltas of their group's
/// data positions only (the others' coefficient is 0), and repairs read a local group.
#[test]
fn round_trip_whole_lrc() {
    round_trip_whole_with("lrc:6,2,2", "lrc", 10, "plan");
}

fn round_trip_whole_with(code: &str, scheme: &str, chunks: usize, repair: &str) {
    let c = Cluster::up_with(
        code,
        scheme,
        chunks,
        &["--layout", "whole", "--whole-repair", repair],
    );
    let n = c.clients.len();
    let mut rng = SmallRng::seed_from_u64(11);
    let mut sizes = vec![0usize, 1, 95, 96, 97, 1023, 1024, 8192, 200_000, 1 << 20];
    while sizes.len() < 24 {
        sizes.push(rng.gen_range(0..=(64 << 10)));
    }
    let mut clients: Vec<Client> = (0..n).map(|i| c.client(i)).collect();
    let mut values = Vec::new();
    for (i, &len) in sizes.iter().enumerate() {
        let key = format!("whole:{i}");
        let v = random_value(&mut rng, len);
        assert_eq!(
            clients[i % n].set(&key, &v),
            "STORED\r\n",
            "{key} ({len} bytes)"
        );
        values.push((key, v));
    }
    let big = sizes.iter().filter(|&&len| len + 100 > 256 << 10).count() as u64;
    assert_eq!(c.sum_stat("whole_writes"), sizes.len() as u64 - big);
    assert_eq!(c.sum_stat("whole_fallbacks"), big);
    for (i, (key, v)) in values.iter().enumerate() {
        for (j, cl) in clients.iter_mut().enumerate() {
            if j != i % n {
                assert!(cl.get(key) == Got::Hit(v.clone()), "{key} through node {j}");
            }
        }
        let got = clients[(i + 1) % n].mg_degraded(key, 0);
        assert!(got == Got::Hit(v.clone()), "degraded read of {key}");
    }
    assert!(c.sum_stat("whole_rebuilds") >= sizes.len() as u64 - big);
    // With plans, every whole value's degraded read ran the scheme's repair plan, and what it
    // rebuilt passed the check (nothing was written meanwhile).
    let planned = repair == "plan";
    if planned {
        assert!(c.sum_stat("degraded_plan_runs") >= sizes.len() as u64 - big);
        assert_eq!(c.sum_stat("degraded_plan_fallbacks"), 0, "plan fallbacks");
        assert_eq!(
            c.sum_stat("whole_plan_rejected"),
            0,
            "plan results rejected"
        );
    }
    // A get at the key's home: no peer message.
    let placement = cache::cluster::placement::Placement::new(n, chunks);
    let (key, v) = &values[8 - 1];
    let mut home = c.client(placement.stripe_of(key.as_bytes()));
    let (sent, _, moved) = c.messages_of(0, || assert!(home.get(key) == Got::Hit(v.clone())));
    assert_eq!(sent, 0, "a get at the home; what moved:\n{moved}");
    let code: codes::Code = code.parse().unwrap();
    if planned {
        // A forced-degraded read at the home: one plan run, no message of the cache's own
        // (the plan's frames are the engine's).
        let runs = c.sum_stat("degraded_plan_runs");
        let (sent, tries, moved) = c.messages_of(0, || {
            assert!(home.mg_degraded(key, 0) == Got::Hit(v.clone()))
        });
        assert_eq!(sent, 0, "a degraded read on the plan; what moved:\n{moved}");
        assert_eq!(c.sum_stat("degraded_plan_runs") - runs, tries as u64);
    } else {
        degraded_read_on_the_loop(&c, &mut home, key, v, &code);
    }
    // A set at the home: one delta to each of the parity positions, and their acks.
    let want = 2 * code.parity_count() as u64;
    let (sent, _, moved) =
        c.messages_of(want, || assert_eq!(home.set(key, &v[..100]), "STORED\r\n"));
    assert_eq!(sent, want, "a set at the home; what moved:\n{moved}");
}

/// Whole values' degraded reads run every scheme's repair plan on the engine (the plan's chunk
/// the value's byte range): for PPR, ECPipe and TriEC (RS and LRC: `round_trip_whole*`),
/// values of several sizes read forced degraded through every node, each a plan run, none
/// falling back or failing its check.
#[test]
fn whole_degraded_reads_run_every_schemes_plan() {
    for scheme in ["ppr", "ecpipe", "triec"] {
        let c = Cluster::up_with(
            "rs:6,3",
            scheme,
            9,
            &["--layout", "whole", "--whole-repair", "plan"],
        );
        let mut rng = SmallRng::seed_from_u64(21);
        let mut clients: Vec<Client> = (0..9).map(|i| c.client(i)).collect();
        let values: Vec<(String, Vec<u8>)> = [1usize, 100, 1000, 8192, 50_000]
            .iter()
            .enumerate()
            .map(|(i, &len)| (format!("{scheme}-whole-{i}"), random_value(&mut rng, len)))
            .collect();
        for (i, (key, v)) in values.iter().enumerate() {
            assert_eq!(clients[i % 9].set(key, v), "STORED\r\n", "{scheme} {key}");
        }
        assert_eq!(c.sum_stat("whole_writes"), values.len() as u64, "{scheme}");
        let mut reads = 0;
        for (key, v) in &values {
            for cl in clients.iter_mut() {
                assert!(
                    cl.mg_degraded(key, 0) == Got::Hit(v.clone()),
                    "{scheme}: {key}"
                );
                reads += 1;
            }
        }
        assert_eq!(
            c.sum_stat("degraded_plan_runs"),
            reads,
            "{scheme}: plan runs"
        );
        assert_eq!(
            c.sum_stat("degraded_plan_fallbacks"),
            0,
            "{scheme}: fallbacks"
        );
        assert_eq!(c.sum_stat("whole_plan_rejected"), 0, "{scheme}: rejected");
    }
}

/// Overwrites race the repair plans of whole values that share their pages (real processes):
/// every member applies each delta 4 ms late (test-only), so the data pages of homes that
/// write (a value every 4 ms or so each) run ahead of their parity pages; meanwhile forced-degraded reads at node 0, the home
/// of the victims, rebuild them on the engine from the same pages. Every read returns the right
/// bytes, and some plan results failed the record's check (a torn cut) and were read again
/// over a consistent cut. With the check switched off (test-only), torn results reach the
/// read, which fails.
#[test]
fn overwrites_racing_plan_repairs_of_whole_values_read_right() {
    let (failed, wrong, rejected) = racing_plan_repairs(false);
    assert_eq!((failed, wrong), (0, 0), "reads failed, wrong");
    assert!(rejected > 0, "some plan result was torn and rejected");
    let (failed, wrong, _) = racing_plan_repairs(true);
    eprintln!("check off: {failed} reads failed, {wrong} wrong");
    assert!(
        failed + wrong > 0,
        "without the check, a torn result is served or fails"
    );
}

/// Reads that failed and that returned wrong bytes, and plan results rejected, with the plan
/// check on (`unchecked` false) or off.
fn racing_plan_repairs(unchecked: bool) -> (usize, usize, u64) {
    let mut env = vec![(cache::member::handler::DELTA_DELAY_ENV, "4")];
    if unchecked {
        env.push((cache::agent::whole::PLAN_UNCHECKED_ENV, "1"));
    }
    let c = Cluster::up_env(
        "rs:6,3",
        "rs",
        9,
        &["--layout", "whole", "--whole-repair", "plan"],
        &env,
    );
    let placement = cache::cluster::placement::Placement::new(9, 9);
    let keys_of = |home: usize, count: usize| -> Vec<String> {
        (0..)
            .map(|i| format!("race{home}-{i}"))
            .filter(|k| placement.stripe_of(k.as_bytes()) == home)
            .take(count)
            .collect()
    };
    let value = |key: &str, round: u64| -> Vec<u8> {
        let mut v = format!("{key}/{round}/").into_bytes();
        let seed = v
            .iter()
            .fold(round, |a, &b| a.wrapping_mul(31).wrapping_add(b as u64));
        let mut rng = SmallRng::seed_from_u64(seed);
        while v.len() < 8000 {
            v.push(rng.gen());
        }
        v
    };
    // Node h's first slab page is its page h mod 6 (`Slab::set_start`), data position h mod 6
    // of page stripe h - h mod 6: nodes 1..5's are in page stripe 0 with node 0's page 0, nodes
    // 6..8's in page stripe 6 with node 0's page 3. The victims fill node 0's pages 0..5; the
    // writers overwrite values in the slots of the same offsets of their first pages.
    let victims = keys_of(0, 31 * 6);
    let mut home0 = c.client(0);
    for k in &victims {
        assert_eq!(home0.set(k, &value(k, 0)), "STORED\r\n");
    }
    let writers: Vec<(usize, Vec<String>)> = (1..9).map(|h| (h, keys_of(h, 8))).collect();
    for (h, keys) in &writers {
        let mut cl = c.client(*h);
        for k in keys {
            assert_eq!(cl.set(k, &value(k, 0)), "STORED\r\n");
        }
    }
    let stop = AtomicBool::new(false);
    let (mut failed, mut wrong) = (0, 0);
    std::thread::scope(|s| {
        // One writer per home but node 0: its values overwritten in turn, for ever.
        for (h, keys) in &writers {
            let (c, stop) = (&c, &stop);
            s.spawn(move || {
                let mut cl = c.client(*h);
                for round in 1u64.. {
                    for k in keys {
                        if stop.load(Ordering::Relaxed) {
                            return;
                        }
                        let _ = cl.set(k, &value(k, round));
                        // A pause as long as a delta's lag: each data page is ahead of its
                        // parity about half the time, so consistent cuts come and go (without
                        // it, five pages of a page stripe are ahead nearly always and a direct
                        // read may find no cut in its 50 tries: a `SERVER_ERROR`, not wrong
                        // bytes).
                        std::thread::sleep(Duration::from_millis(4));
                    }
                }
            });
        }
        let deadline = Instant::now() + Duration::from_secs(20);
        let rejected = || {
            c.client(0).stats("inec")["whole_plan_rejected"]
                .parse::<u64>()
                .unwrap()
        };
        'reads: while Instant::now() < deadline {
            for k in &victims {
                match home0.mg_degraded(k, 0) {
                    Got::Hit(v) if v == value(k, 0) => {}
                    Got::Hit(_) => wrong += 1,
                    other => {
                        if failed == 0 {
                            let what = match other {
                                Got::Error(e) => e,
                                _ => "a miss".into(),
                            };
                            eprintln!("a read of {k} failed: {what}");
                        }
                        failed += 1
                    }
                }
            }
            let enough = if unchecked {
                failed + wrong > 0
            } else {
                rejected() >= 3
            };
            if enough {
                break 'reads;
            }
        }
        stop.store(true, Ordering::Relaxed);
    });
    let rejected = c.sum_stat("whole_plan_rejected");
    eprintln!(
        "racing plan repairs (check {}): {} plan runs, {rejected} rejected, {} fallbacks, \
         {failed} failed, {wrong} wrong",
        if unchecked { "off" } else { "on" },
        c.sum_stat("degraded_plan_runs"),
        c.sum_stat("degraded_plan_fallbacks"),
    );
    (failed, wrong, rejected)
}

/// A forced-degraded read at the home (`--whole-repair direct`) runs on its event loop: the
/// value's range asked of every other position of its page's stripe (`Range`), their replies,
/// no fallback.
fn degraded_read_on_the_loop(
    c: &Cluster,
    home: &mut Client,
    key: &str,
    v: &[u8],
    code: &codes::Code,
) {
    let (loop_reads, fallbacks) = (c.sum_stat("loop_reads"), c.sum_stat("loop_read_fallbacks"));
    // It asks k + 1 of the other positions of an RS code (all n - 1 when there are no more, or
    // of an LRC), and may finish on the first k consistent pieces; the last reply still comes.
    let asked = match code {
        codes::Code::Rs { .. } => (code.n() - 1).min(code.k() + 1),
        codes::Code::Lrc { .. } => code.n() - 1,
    };
    let want = 2 * asked as u64;
    let (sent, tries, moved) = c.messages_of(want, || {
        assert!(home.mg_degraded(key, 0) == Got::Hit(v.to_vec()))
    });
    assert_eq!(sent, want, "a degraded read; what moved:\n{moved}");
    assert_eq!(c.sum_stat("loop_reads") - loop_reads, tries as u64);
    assert_eq!(c.sum_stat("loop_read_fallbacks"), fallbacks);
}

/// The value of write `idx` of key `key`: a header naming both, then bytes derived from them,
/// so a reader can tell exactly which write it got and that every byte is right.
fn versioned_value(key: usize, idx: u64) -> Vec<u8> {
    let mut rng = SmallRng::seed_from_u64(key as u64 * 1_000_003 + idx);
    let len = if rng.gen_bool(0.5) {
        rng.gen_range(0..800)
    } else {
        rng.gen_range(1024..40_000)
    };
    let mut v = format!("K{key:04}W{idx:010}").into_bytes();
    v.extend(random_value(&mut rng, len));
    v
}

fn decode_idx(v: &[u8]) -> Option<(usize, u64)> {
    let s = std::str::from_utf8(v.get(..16)?).ok()?;
    Some((s[1..5].parse().ok()?, s[6..16].parse().ok()?))
}

/// Per key: the last acknowledged write and the write in flight.
type Writes = (Option<u64>, u64);

const LOAD_KEYS: usize = 24;

/// A writer (through node 0, or the node given) and readers (through `fronts`) over `LOAD_KEYS`
/// keys; every read is checked against the last acknowledged write and the one in flight.
struct Load {
    /// (last acknowledged write, write in flight) per key.
    writes: Arc<Mutex<Vec<Writes>>>,
    stop: Arc<AtomicBool>,
    wrong: Arc<AtomicU64>,
    reads_ok: Arc<AtomicU64>,
    read_errors: Arc<AtomicU64>,
    writer: std::thread::JoinHandle<u64>,
    readers: Vec<std::thread::JoinHandle<()>>,
}

impl Load {
    fn start(c: &Cluster, fronts: &[usize]) -> Load {
        Load::start_at(c, 0, fronts)
    }

    /// The writer through node `writer`, the readers through `fronts`.
    fn start_at(c: &Cluster, writer: usize, fronts: &[usize]) -> Load {
        let writes: Arc<Mutex<Vec<Writes>>> = Arc::new(Mutex::new(vec![(None, 0); LOAD_KEYS]));
        let stop = Arc::new(AtomicBool::new(false));
        let wrong = Arc::new(AtomicU64::new(0));
        let reads_ok = Arc::new(AtomicU64::new(0));
        let read_errors = Arc::new(AtomicU64::new(0));
        let writer = {
            let (writes, stop, addr) = (writes.clone(), stop.clone(), c.clients[writer]);
            std::thread::spawn(move || {
                let mut cl = Client::connect(addr);
                let mut idx = 1u64;
                let mut failed = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    for key in 0..LOAD_KEYS {
                        writes.lock().unwrap()[key].1 = idx;
                        let reply = cl.set(&format!("w{key}"), &versioned_value(key, idx));
                        if reply == "STORED\r\n" {
                            writes.lock().unwrap()[key].0 = Some(idx);
                        } else {
                            assert!(reply.starts_with("SERVER_ERROR "), "{reply:?}");
                            failed += 1;
                        }
                        idx += 1;
                    }
                }
                failed
            })
        };
        let readers = fronts
            .iter()
            .enumerate()
            .map(|(r, &front)| {
                let (writes, stop, wrong, ok, errs, addr) = (
                    writes.clone(),
                    stop.clone(),
                    wrong.clone(),
                    reads_ok.clone(),
                    read_errors.clone(),
                    c.clients[front],
                );
                std::thread::spawn(move || {
                    let mut cl = Client::connect(addr);
                    let mut rng = SmallRng::seed_from_u64(100 + r as u64);
                    while !stop.load(Ordering::Relaxed) {
                        let key = rng.gen_range(0..LOAD_KEYS);
                        let lo = writes.lock().unwrap()[key].0;
                        let got = cl.get(&format!("w{key}"));
                        let hi = writes.lock().unwrap()[key].1;
                        match got {
                            Got::Hit(v) => {
                                let good = decode_idx(&v).is_some_and(|(k, idx)| {
                                    k == key
                                        && lo.is_none_or(|lo| idx >= lo)
                                        && idx <= hi
                                        && v == versioned_value(key, idx)
                                });
                                if good {
                                    ok.fetch_add(1, Ordering::Relaxed);
                                } else {
                                    wrong.fetch_add(1, Ordering::Relaxed);
                                    eprintln!(
                                        "wrong value for w{key}: lo {lo:?} hi {hi} got {:?}",
                                        decode_idx(&v)
                                    );
                                }
                            }
                            Got::Miss if lo.is_none() => {}
                            Got::Miss => {
                                wrong.fetch_add(1, Ordering::Relaxed);
                                eprintln!("w{key} missing after write {lo:?} was acknowledged");
                            }
                            Got::Error(e) => {
                                assert!(e.starts_with("SERVER_ERROR "), "{e:?}");
                                errs.fetch_add(1, Ordering::Relaxed);
                            }
                        }
                    }
                })
            })
            .collect();
        Load {
            writes,
            stop,
            wrong,
            reads_ok,
            read_errors,
            writer,
            readers,
        }
    }

    /// Stops the load, checks that no wrong value was read and enough reads succeeded, and
    /// returns (last acknowledged, in flight) per key.
    fn finish(self) -> Vec<Writes> {
        self.stop.store(true, Ordering::Relaxed);
        let failed_writes = self.writer.join().unwrap();
        for r in self.readers {
            r.join().unwrap();
        }
        assert_eq!(
            self.wrong.load(Ordering::Relaxed),
            0,
            "wrong values were returned"
        );
        assert!(
            self.reads_ok.load(Ordering::Relaxed) > 50,
            "too few reads succeeded"
        );
        eprintln!(
            "reads ok {}, read errors {}, failed writes {failed_writes}",
            self.reads_ok.load(Ordering::Relaxed),
            self.read_errors.load(Ordering::Relaxed)
        );
        let w = self.writes.lock().unwrap().clone();
        w
    }
}

/// Full read-back through every node: the last acknowledged write (or the one in flight).
/// A miss fails at once (a value lost); a `SERVER_ERROR` (a refusal while the nodes' views
/// settle after a fault heals) is asked again for up to 5 s, each one printed, before it fails.
fn read_back(c: &Cluster, w: &[Writes]) {
    for node in 0..9 {
        let mut cl = c.client(node);
        for (key, &(acked, inflight)) in w.iter().enumerate() {
            let deadline = Instant::now() + Duration::from_secs(5);
            let v = loop {
                match cl.get(&format!("w{key}")) {
                    Got::Hit(v) => break v,
                    Got::Error(e) if Instant::now() < deadline => {
                        eprintln!("read-back of w{key} through node {node}: {e}; asking again");
                        std::thread::sleep(Duration::from_millis(100));
                    }
                    other => panic!("w{key} not readable through node {node}: {other:?}"),
                }
            };
            let (k, idx) = decode_idx(&v).unwrap();
            assert_eq!(k, key);
            assert!(acked.is_none_or(|a| idx >= a) && idx <= inflight);
            assert_eq!(v, versioned_value(key, idx));
        }
    }
}

/// Reads every key of the load through nodes 0 and 4; returns how many of those reads were
/// degraded (a chunk missing at its member).
fn reads_degraded(c: &Cluster) -> u64 {
    let before = c.sum_stat("degraded_reads");
    for node in [0usize, 4] {
        let mut cl = c.client(node);
        for key in 0..LOAD_KEYS {
            assert!(matches!(cl.get(&format!("w{key}")), Got::Hit(_)));
        }
    }
    c.sum_stat("degraded_reads") - before
}

#[test]
fn sigkill_up_to_m_nodes_under_load_then_recover() {
    sigkill_under_load_then_recover(&[]);
}

/// The same with every value whole at its home (`--layout whole`): the homes killed are
/// stood in for with values rebuilt from their pages' stripes, the writes made meanwhile are
/// stored split, and the restarted homes rebuild their pages and serve their values from them.
#[test]
fn sigkill_up_to_m_nodes_under_load_then_recover_whole() {
    sigkill_under_load_then_recover(&["--layout", "whole"]);
}

/// The same with whole values rebuilt on the scheme's repair plans (`--whole-repair plan`):
/// the stand-ins' reads of the killed homes' values ran plans.
#[test]
fn sigkill_up_to_m_nodes_under_load_then_recover_whole_on_plans() {
    sigkill_under_load_then_recover(&["--layout", "whole", "--whole-repair", "plan"]);
}

fn sigkill_under_load_then_recover(extra: &[&str]) {
    let c = Cluster::up_with("rs:6,3", "rs", 9, extra);
    // Clients talk to nodes 0, 5..8; nodes 1, 2, 3 (agents of stripes 1, 2, 3) are killed.
    let load = Load::start(&c, &[0, 5, 6, 7, 8]);
    std::thread::sleep(Duration::from_millis(500));
    for victim in [3usize, 1, 2] {
        c.kill(victim);
        std::thread::sleep(Duration::from_millis(700));
    }
    std::thread::sleep(Duration::from_millis(1000));
    let status = c.status();
    assert!(status.contains("degraded"), "{status}");
    // Whole layout: keys written only now, while their homes (nodes 1, 2, 3) are down, are
    // stored split by the stand-ins; their CAS values as a client reads them.
    let whole = extra.contains(&"whole");
    let only_down: Vec<(String, Vec<u8>, u64)> = if whole {
        let mut cl = c.client(0);
        (0..60)
            .map(|i| format!("down{i}"))
            .filter(|k| {
                let stripe = cache::cluster::placement::fnv1a_64(k.as_bytes()) % 9;
                [1, 2, 3].contains(&stripe)
            })
            .map(|k| {
                let value = versioned_value(7, k.len() as u64 * 1000 + 3);
                assert_eq!(cl.set(&k, &value), "STORED\r\n");
                let cas = cl.cas_of(&k);
                (k, value, cas)
            })
            .collect()
    } else {
        Vec::new()
    };
    for victim in [1usize, 2, 3] {
        c.restart(victim);
    }
    c.wait_whole();
    std::thread::sleep(Duration::from_millis(300));
    let w = load.finish();
    let status = c.status();
    assert_eq!(status.matches(" whole ").count(), 9, "{status}");
    assert!(status.contains("done"), "{status}");
    read_back(&c, &w);
    // Recovery rebuilt the records of the restarted nodes: reads that need them are not
    // degraded (each restarted node holds a data chunk of every stripe).
    assert_eq!(reads_degraded(&c), 0, "recovered records are used");
    if extra.contains(&"whole") {
        assert!(c.sum_stat("whole_writes") > 0, "values were written whole");
        assert!(
            c.sum_stat("whole_fallbacks") > 0,
            "writes at stand-ins for killed homes went split"
        );
        // Homes went on writing whole past killed parity positions: their deltas were
        // queued, and were all delivered once the restarted nodes were up.
        assert!(c.sum_stat("whole_deltas_queued") > 0);
        let deadline = Instant::now() + Duration::from_secs(10);
        while c.sum_stat("whole_deltas_pending") > 0 && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(100));
        }
        assert_eq!(c.sum_stat("whole_deltas_pending"), 0);
        // Once every member is back, the homes write the split values whole again in the
        // background, with the CAS values the clients read: no value stays split.
        assert!(!only_down.is_empty());
        let split = || c.sum_stat("value_bytes_coded") + c.sum_stat("value_bytes_replicated");
        let deadline = Instant::now() + Duration::from_secs(30);
        while split() > 0 && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(200));
        }
        assert_eq!(split(), 0, "values still split");
        assert!(c.sum_stat("whole_rewritten") >= only_down.len() as u64);
        let mut cl = c.client(4);
        for (k, value, cas) in &only_down {
            assert_eq!(cl.cas_of(k), *cas, "{k}: the CAS value is kept");
            assert!(matches!(cl.get(k), Got::Hit(v) if v == *value), "{k}");
        }
    }
    if extra.contains(&"plan") {
        assert!(
            c.sum_stat("degraded_plan_runs") > 0,
            "whole values rebuilt on plans"
        );
    }
}

/// Under the same writer and readers, agents stall (SIGSTOP) for longer than the down-after
/// time, one after the other and overlapping, then resume: stand-ins take their stripes and
/// give them back, no read ever returns a wrong, stale or missing value, the records the
/// stalled nodes missed are filled in, and every value reads back through every node.
#[test]
fn agents_stalled_under_load_never_return_stale_values() {
    agents_stalled_under_load(&[]);
}

/// The same with every value whole at its home: the deltas the stalled nodes missed as parity
/// positions are sent again once they are back.
#[test]
fn agents_stalled_under_load_never_return_stale_values_whole() {
    agents_stalled_under_load(&["--layout", "whole"]);
}

fn agents_stalled_under_load(extra: &[&str]) {
    let c = Cluster::up_with("rs:6,3", "rs", 9, extra);
    let load = Load::start(&c, &[0, 5, 6, 7, 8]);
    std::thread::sleep(Duration::from_millis(500));
    // Each stall outlasts the 5 s a peer call waits for a stalled node, so that the others
    // mark it down and go on without it: stand-ins lead its stripe and writes leave holes at
    // it.
    let rebuilds = |n: usize| {
        c.client(n).stats("inec")["index_rebuilds"]
            .parse::<u64>()
            .unwrap()
    };
    let before_3 = rebuilds(3);
    c.signal(3, "STOP");
    std::thread::sleep(Duration::from_millis(3000));
    let before_1 = rebuilds(1);
    c.signal(1, "STOP");
    std::thread::sleep(Duration::from_millis(4000));
    c.signal(3, "CONT");
    std::thread::sleep(Duration::from_millis(3000));
    c.signal(1, "CONT");
    c.wait_whole();
    // Node 4 stood in for node 3 (stripe 3) and node 2 for node 1 (stripe 1): each built an
    // index. The returning agents lead again once the others' promises to the stand-ins have
    // run out (a term after they last exempted them), and rebuild theirs: an index kept from
    // before the stall would miss the stand-ins' writes.
    let deadline = Instant::now() + Duration::from_secs(30);
    while rebuilds(3) <= before_3 || rebuilds(1) <= before_1 {
        assert!(
            Instant::now() < deadline,
            "returning agents: {} → {}, {} → {}\n{}\n{:?}",
            before_3,
            rebuilds(3),
            before_1,
            rebuilds(1),
            c.status(),
            (0..9)
                .map(|n| {
                    let st = c.client(n).stats("inec");
                    format!(
                        "node {n}: sees 1 {}, votes for itself in stripe 1 {}, lease_lost_ops {}, lease_lapses {}, server_errors {}",
                        st["node_1"], st["stripe_1_votes"], st["lease_lost_ops"], st["lease_lapses"], st["server_errors"]
                    )
                })
                .collect::<Vec<_>>(),
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    std::thread::sleep(Duration::from_millis(500));
    let w = load.finish();
    let deadline = Instant::now() + Duration::from_secs(30);
    while c.sum_stat("holes_pending") != 0 {
        assert!(Instant::now() < deadline, "holes not filled");
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(
        c.sum_stat("writes_with_holes") > 0,
        "writes went on around the stalled nodes"
    );
    // (The writer overwrote most of them once the nodes were back; the rest were filled.)
    assert!(rebuilds(4) >= 1 && rebuilds(2) >= 1, "stand-ins");
    read_back(&c, &w);
    // Every record is whole again: no read is degraded.
    assert_eq!(reads_degraded(&c), 0, "holes were filled");
    if extra.contains(&"whole") {
        assert!(c.sum_stat("whole_writes") > 0, "values were written whole");
    }
    let deadline = Instant::now() + Duration::from_secs(30);
    while c.sum_stat("whole_deltas_pending") != 0 {
        assert!(Instant::now() < deadline, "missed deltas not sent again");
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn more_than_m_down_is_a_server_error() {
    let c = Cluster::up("rs:6,3", "rs", 9);
    let mut rng = SmallRng::seed_from_u64(7);
    let mut cl = c.client(0);
    let mut values = Vec::new();
    for i in 0..12 {
        let len = if i % 2 == 0 { 100 } else { 20_000 };
        let v = random_value(&mut rng, len);
        assert_eq!(cl.set(&format!("x{i}"), &v), "STORED\r\n");
        values.push(v);
    }
    for victim in [1usize, 2, 3, 4] {
        c.kill(victim);
    }
    std::thread::sleep(Duration::from_millis(300));
    // Every stripe has 4 of its 9 positions down: every read is refused with the reason.
    for i in 0..values.len() {
        match cl.get(&format!("x{i}")) {
            Got::Error(e) => {
                assert!(
                    e.starts_with("SERVER_ERROR ") && e.contains("down"),
                    "{e:?}"
                );
            }
            other => panic!("x{i}: {other:?}"),
        }
    }
    let reply = cl.set("new", &[1u8; 5000]);
    assert!(
        reply.starts_with("SERVER_ERROR ") && reply.contains("tolerates 3"),
        "{reply:?}"
    );
}

#[test]
fn flipped_bit_is_detected_repaired_and_never_returned() {
    let c = Cluster::up("rs:6,3", "rs", 9);
    let mut rng = SmallRng::seed_from_u64(9);
    let mut cl = c.client(4);
    for (key, len) in [("coded", 50_000usize), ("small", 300)] {
        let v = random_value(&mut rng, len);
        assert_eq!(cl.set(key, &v), "STORED\r\n");
        for position in [0usize, 2] {
            let r = cl
                .send(format!("inec_flip {key} {position} {}\r\n", 8 * (len / 12) + 5).as_bytes());
            assert_eq!(r, "OK\r\n");
            assert_eq!(
                cl.get(key),
                Got::Hit(v.clone()),
                "{key} after flipping chunk {position}"
            );
            // The repaired chunk was written back: the next read is not degraded.
            let before = c.sum_stat("degraded_reads");
            assert_eq!(cl.get(key), Got::Hit(v.clone()));
            assert_eq!(c.sum_stat("degraded_reads"), before);
        }
    }
    // Detected: both chunks of the coded value; the small value's first replica (the agent
    // reads its own, position 0, first; position 2's flip is never read).
    assert!(c.sum_stat("crc_errors") >= 3);
    assert!(c.sum_stat("chunks_written_back") >= 3);
}

/// Messages of one operation at the key's agent, over all nodes: peer requests and replies
/// and engine frames (control and data), heartbeats excluded (`messages_sent` of `stats
/// inec`). Writes and normal reads run the templates installed at start-up: nothing is
/// installed for them later, and no peer message is sent for them.
fn messages_per_operation(code: &str, n: usize, k: usize) {
    let lrc = code.starts_with("lrc");
    let c = Cluster::up(code, if lrc { "lrc" } else { "rs" }, n);
    let placement = cache::cluster::placement::Placement::new(n, n);
    let key = "counted";
    let agent = placement.stripe_of(key.as_bytes());
    // Every node installed its parts of the write template of each of its n stripes, of
    // the read template of those where it is the agent or holds a data chunk, and of the
    // repair templates of one lost data chunk it takes part in.
    let startup = c.sum_stat("startup_templates");
    assert!(
        startup > (n * (n + k)) as u64,
        "templates installed at start-up: {startup}"
    );
    let mut cl = c.client(agent);
    // Warm up: the agent builds its index of the stripe on first use.
    assert_eq!(cl.set(key, &[1u8; 8192]), "STORED\r\n");
    let count = || {
        (
            c.sum_stat("messages_sent"),
            c.sum_stat("peer_messages_sent") + c.sum_stat("peer_replies_sent"),
        )
    };
    let stat = |name: &str| c.client(agent).stats("inec")[name].parse::<u64>().unwrap();
    let (m0, p0) = count();
    let (writes0, loop_writes0) = (stat("write_plan_runs"), stat("loop_writes"));
    assert_eq!(cl.set(key, &[2u8; 8192]), "STORED\r\n");
    let (m1, p1) = count();
    // At the agent, the client loop runs the write itself: one record to and one ack from each
    // member but the agent, over its peer connections.
    assert_eq!(m1 - m0, 2 * (n - 1) as u64, "write");
    assert_eq!(p1 - p0, 2 * (n - 1) as u64, "write: peer messages");
    assert_eq!(stat("loop_writes") - loop_writes0, 1);
    assert_eq!(stat("write_plan_runs") - writes0, 0);
    // Through another node: one forward and its reply more, both sent by the event loops
    // (the front's, which sends the forward and answers the client from the agent's reply,
    // and the agent's, which runs the write as for a client of its own).
    let front = (agent + 1) % n;
    let front_stat = |name: &str| c.client(front).stats("inec")[name].parse::<u64>().unwrap();
    let forwards0 = front_stat("loop_forwards");
    let (ma, pa) = count();
    assert_eq!(c.client(front).set(key, &[2u8; 8192]), "STORED\r\n");
    let (mb, pb) = count();
    assert_eq!(mb - ma, 2 * (n - 1) as u64 + 2, "forwarded write");
    assert_eq!(
        pb - pa,
        2 * (n - 1) as u64 + 2,
        "forwarded write: peer messages"
    );
    assert_eq!(stat("loop_writes") - loop_writes0, 2);
    assert_eq!(stat("write_plan_runs") - writes0, 0);
    assert_eq!(front_stat("loop_forwards") - forwards0, 1);
    let (m1, p1) = count();
    let (reads0, loop_reads0) = (stat("read_plan_runs"), stat("loop_reads"));
    assert_eq!(cl.get(key), Got::Hit(vec![2u8; 8192]));
    let (m2, p2) = count();
    // At the agent, the client loop runs the read itself: one request to and one chunk from
    // each data member but the agent, over its peer connections.
    assert_eq!(m2 - m1, 2 * (k - 1) as u64, "normal read");
    assert_eq!(p2 - p1, 2 * (k - 1) as u64, "normal read: peer messages");
    assert_eq!(stat("loop_reads") - loop_reads0, 1);
    assert_eq!(stat("read_plan_runs") - reads0, 0);
    assert_eq!(stat("loop_read_fallbacks"), 0);
    // Through another node: one forward and its reply more; the agent's loop reads as for
    // its own client.
    let mut other = c.client(front);
    assert_eq!(other.get(key), Got::Hit(vec![2u8; 8192]));
    let (m3, p3) = count();
    assert_eq!(m3 - m2, 2 * (k - 1) as u64 + 2, "forwarded read");
    assert_eq!(
        p3 - p2,
        2 * (k - 1) as u64 + 2,
        "forwarded read: peer messages"
    );
    assert_eq!(stat("loop_reads") - loop_reads0, 2);
    assert_eq!(stat("read_plan_runs") - reads0, 0);
    assert_eq!(front_stat("loop_forwards") - forwards0, 2);
    // A meta get is forwarded by the front's loop too; the agent's loop reads it.
    let front_workers0 = front_stat("worker_jobs");
    assert_eq!(other.mg(key), Got::Hit(vec![2u8; 8192]));
    assert_eq!(front_stat("loop_forwards") - forwards0, 3);
    assert_eq!(front_stat("worker_jobs"), front_workers0);
    let (m4, p4) = count();
    assert_eq!(m4 - m3, 2 * (k - 1) as u64 + 2, "forwarded mg");
    assert_eq!(
        p4 - p3,
        2 * (k - 1) as u64 + 2,
        "forwarded mg: peer messages"
    );
    assert_eq!(stat("loop_reads") - loop_reads0, 3);
    // At the agent, a meta get runs on the loop as a get does.
    assert_eq!(cl.mg(key), Got::Hit(vec![2u8; 8192]));
    let (m5, p5) = count();
    assert_eq!(m5 - m4, 2 * (k - 1) as u64, "mg at the agent");
    assert_eq!(
        p5 - p4,
        2 * (k - 1) as u64,
        "mg at the agent: peer messages"
    );
    assert_eq!(stat("loop_reads") - loop_reads0, 4);
    // A get that touches (`gat`) of a coded value runs on the agent's loop too: the data
    // chunks read as a get reads them (a `Get` to and a chunk from each data member but the
    // agent), then each other member node sent its `Touch`, the key's lock held throughout;
    // no worker takes part.
    let workers0 = stat("worker_jobs");
    let first = cl.send(format!("gat 0 {key}\r\n").as_bytes());
    assert_eq!(cl.read_value(&first), Got::Hit(vec![2u8; 8192]));
    let (m5b, p5b) = count();
    let touches = 2 * (n - 1) as u64;
    assert_eq!(m5b - m5, 2 * (k - 1) as u64 + touches, "gat at the agent");
    assert_eq!(
        p5b - p5,
        2 * (k - 1) as u64 + touches,
        "gat at the agent: peer messages"
    );
    assert_eq!(stat("read_plan_runs") - reads0, 0);
    assert_eq!(stat("loop_reads") - loop_reads0, 5);
    assert_eq!(stat("worker_jobs"), workers0);
    // A degraded read of data position 1 (the repair template of one lost data chunk was
    // installed at start-up; a first read warms the connections): the normal read of the
    // k-2 data chunks left over peer messages (a request and a chunk each), then the repair
    // plan: one start to each helper but the agent and its data edge to the agent (RS: the
    // k helpers 0, 2.. k; LRC: the local group's 0, 2 and its local parity).
    assert_eq!(cl.mg_degraded(key, 1), Got::Hit(vec![2u8; 8192]));
    let installed = c.sum_stat("plan_templates_installed");
    let (m4, p4) = count();
    assert_eq!(cl.mg_degraded(key, 1), Got::Hit(vec![2u8; 8192]));
    let (m5, p5) = count();
    let helpers = if lrc { 2 } else { k - 1 } as u64;
    assert_eq!(p5 - p4, 2 * (k - 2) as u64, "degraded read: peer messages");
    assert_eq!(m5 - m4, 2 * (k - 2) as u64 + 2 * helpers, "degraded read");
    // Through another node: forwarded by its loop, read at the agent's loop, as above plus
    // the forward and its reply; no worker at either node.
    let agent_peer_workers0 = stat("peer_worker_jobs");
    assert_eq!(other.mg_degraded(key, 1), Got::Hit(vec![2u8; 8192]));
    let (m5f, p5f) = count();
    assert_eq!(
        p5f - p5,
        2 * (k - 2) as u64 + 2,
        "forwarded degraded read: peer"
    );
    assert_eq!(
        m5f - m5,
        2 * (k - 2) as u64 + 2 * helpers + 2,
        "forwarded degraded read"
    );
    assert_eq!(front_stat("worker_jobs"), front_workers0);
    assert_eq!(stat("peer_worker_jobs"), agent_peer_workers0);
    assert_eq!(c.sum_stat("degraded_plan_fallbacks"), 0);
    // No template was installed after start-up, not even for the degraded reads.
    assert_eq!(installed, 0);
    assert_eq!(c.sum_stat("plan_templates_installed"), 0);
    assert_eq!(c.sum_stat("startup_templates"), startup);
    assert_eq!(c.sum_stat("write_plan_fallbacks"), 0);
    assert_eq!(c.sum_stat("read_plan_fallbacks"), 0);
    // `add`, `replace` and `cas` run on the agent's loop as a `set` does. A refused one (an
    // `add` of a present key, a `cas` with a stale value) is answered there with no message.
    let cas = cl.cas_of(key);
    let (writes0, refused0) = (stat("loop_writes"), stat("loop_writes_refused"));
    let (m6, p6) = count();
    assert_eq!(cl.store("add", key, &[3u8; 8192], None), "NOT_STORED\r\n");
    assert_eq!(
        cl.store("cas", key, &[3u8; 8192], Some(cas + 1)),
        "EXISTS\r\n"
    );
    assert_eq!(count(), (m6, p6), "refused writes send no message");
    assert_eq!(stat("loop_writes_refused") - refused0, 2);
    assert_eq!(cl.store("cas", key, &[4u8; 8192], Some(cas)), "STORED\r\n");
    let (m7, p7) = count();
    assert_eq!(m7 - m6, 2 * (n - 1) as u64, "cas");
    assert_eq!(p7 - p6, 2 * (n - 1) as u64, "cas: peer messages");
    assert_eq!(stat("loop_writes") - writes0, 1);
    // Through another node: the front's loop forwards it, the agent's runs it.
    let forwards0 = front_stat("loop_forwards");
    let mut other = c.client(front);
    assert_eq!(
        other.store("replace", key, &[5u8; 8192], None),
        "STORED\r\n"
    );
    assert_eq!(
        other.store("add", key, &[6u8; 8192], None),
        "NOT_STORED\r\n"
    );
    let (m8, p8) = count();
    assert_eq!(m8 - m7, 2 * (n - 1) as u64 + 4, "forwarded replace and add");
    assert_eq!(p8 - p7, 2 * (n - 1) as u64 + 4);
    assert_eq!(stat("loop_writes") - writes0, 2);
    assert_eq!(stat("loop_writes_refused") - refused0, 3);
    assert_eq!(front_stat("loop_forwards") - forwards0, 2);
    assert_eq!(cl.get(key), Got::Hit(vec![5u8; 8192]));
    assert_eq!(c.sum_stat("loop_write_fallbacks"), 0);
    // A delete on the agent's loop: one `Delete` to and one ack from each other member; a miss
    // is answered there with no message. Forwarded, one forward and its reply more.
    let deletes0 = stat("loop_deletes");
    let (m8, p8) = count();
    assert_eq!(
        cl.send(format!("delete {key}\r\n").as_bytes()),
        "DELETED\r\n"
    );
    let (m9, p9) = count();
    assert_eq!(m9 - m8, 2 * (n - 1) as u64, "delete");
    assert_eq!(p9 - p8, 2 * (n - 1) as u64, "delete: peer messages");
    assert_eq!(
        cl.send(format!("delete {key}\r\n").as_bytes()),
        "NOT_FOUND\r\n"
    );
    assert_eq!(count(), (m9, p9), "a delete's miss sends no message");
    assert_eq!(cl.get(key), Got::Miss);
    assert_eq!(cl.set(key, &[7u8; 8192]), "STORED\r\n");
    let (m10, p10) = count();
    assert_eq!(
        other.send(format!("delete {key}\r\n").as_bytes()),
        "DELETED\r\n"
    );
    let (m11, p11) = count();
    assert_eq!(m11 - m10, 2 * (n - 1) as u64 + 2, "forwarded delete");
    assert_eq!(p11 - p10, 2 * (n - 1) as u64 + 2);
    assert_eq!(stat("loop_deletes") - deletes0, 2);
    assert_eq!(front_stat("loop_forwards") - forwards0, 3);
    assert_eq!(cl.get(key), Got::Miss);
    assert_eq!(other.get(key), Got::Miss);
    // A get of several keys on the loop: each key read (or forwarded to its agent) at once,
    // the reply in the keys' order. Here a key of this agent, a missing one of this agent,
    // and one of another agent: k - 1 chunks each for the two hits, one forward for the third.
    let of = |prefix: &str, here: bool| {
        (0..)
            .map(|i| format!("{prefix}{i}"))
            .find(|k| (placement.stripe_of(k.as_bytes()) == agent) == here)
            .unwrap()
    };
    let (missing, elsewhere) = (of("missing", true), of("elsewhere", false));
    assert_eq!(cl.set(key, &[8u8; 8192]), "STORED\r\n");
    assert_eq!(cl.set(&elsewhere, &[9u8; 8192]), "STORED\r\n");
    let multi0 = stat("loop_multi_gets");
    let (m12, p12) = count();
    assert_eq!(
        cl.get_many(&[key, &missing, &elsewhere, key]),
        vec![
            (key.to_string(), vec![8u8; 8192]),
            (elsewhere.clone(), vec![9u8; 8192]),
            (key.to_string(), vec![8u8; 8192]),
        ]
    );
    let (m13, p13) = count();
    assert_eq!(m13 - m12, 3 * 2 * (k - 1) as u64 + 2, "multi-key get");
    assert_eq!(p13 - p12, 3 * 2 * (k - 1) as u64 + 2);
    assert_eq!(stat("loop_multi_gets") - multi0, 1);
    // `incr`, `decr`, `append` and `prepend` of a small (replicated) value on the agent's loop:
    // read from its own replica, written as a `set` of it is (m records and m acks); a miss
    // and a value that is not a number are answered with no message. Through another node,
    // one forward and its reply more.
    let m = (n - k) as u64;
    let counter = of("counter", true);
    assert_eq!(
        cl.send(format!("incr {counter} 1\r\n").as_bytes()),
        "NOT_FOUND\r\n"
    );
    assert_eq!(cl.set(&counter, b"41"), "STORED\r\n");
    let writes0 = stat("loop_writes");
    let (m14, p14) = count();
    assert_eq!(
        cl.send(format!("incr {counter} 1\r\n").as_bytes()),
        "42\r\n"
    );
    assert_eq!(
        cl.send(format!("decr {counter} 2\r\n").as_bytes()),
        "40\r\n"
    );
    let (m15, p15) = count();
    assert_eq!(m15 - m14, 2 * 2 * m, "incr and decr");
    assert_eq!(p15 - p14, 2 * 2 * m);
    assert_eq!(cl.store("append", &counter, b"x", None), "STORED\r\n");
    assert_eq!(cl.store("prepend", &counter, b"y", None), "STORED\r\n");
    let (m16, p16) = count();
    assert_eq!(m16 - m15, 2 * 2 * m, "append and prepend");
    assert_eq!(
        cl.send(format!("incr {counter} 1\r\n").as_bytes()),
        "CLIENT_ERROR cannot increment or decrement non-numeric value\r\n"
    );
    assert_eq!(count(), (m16, p16), "a non-number sends nothing");
    assert_eq!(cl.get(&counter), Got::Hit(b"y40x".to_vec()));
    assert_eq!(stat("loop_writes") - writes0, 4);
    assert_eq!(cl.set(&counter, b"7"), "STORED\r\n");
    let (m17, p17) = count();
    assert_eq!(
        other.send(format!("incr {counter} 3\r\n").as_bytes()),
        "10\r\n"
    );
    let (m18, p18) = count();
    assert_eq!(m18 - m17, 2 * m + 2, "forwarded incr");
    assert_eq!(p18 - p17, 2 * m + 2);
    assert_eq!(stat("loop_writes") - writes0, 6);
    // Of a coded value (8 KiB: a number and spaces), on the agent's loop too: its k − 1 other
    // data chunks read (a `Get` and a chunk each), then written as a `set` of it is (n − 1
    // records and acks); an `append` the same. Through another node, one forward and its
    // reply more. No worker takes part.
    let mut padded = b"41".to_vec();
    padded.resize(8192, b' ');
    assert_eq!(cl.set(key, &padded), "STORED\r\n");
    let workers0 = stat("worker_jobs");
    let modify = 2 * (k - 1) as u64 + 2 * (n - 1) as u64;
    let (m19, p19) = count();
    assert_eq!(cl.send(format!("incr {key} 1\r\n").as_bytes()), "42\r\n");
    let (m20, p20) = count();
    assert_eq!(m20 - m19, modify, "incr of a coded value");
    assert_eq!(p20 - p19, modify);
    assert_eq!(cl.store("append", key, b"x", None), "STORED\r\n");
    let (m21, p21) = count();
    assert_eq!(m21 - m20, modify, "append to a coded value");
    assert_eq!(p21 - p20, modify);
    assert_eq!(other.send(format!("decr {key} 2\r\n").as_bytes()), "40\r\n");
    let (m22, p22) = count();
    assert_eq!(m22 - m21, modify + 2, "forwarded decr of a coded value");
    assert_eq!(p22 - p21, modify + 2);
    // memcached's rule: the number written over the whole value, padded to its length.
    let mut expect = b"40".to_vec();
    expect.resize(8193, b' ');
    assert_eq!(cl.get(key), Got::Hit(expect));
    assert_eq!(stat("worker_jobs"), workers0);
    // The `set` of the padded number, the incr, the append and the decr.
    assert_eq!(stat("loop_writes") - writes0, 10);
    // A meta get's flags: the agent's loop composes the same reply as the other node's worker
    // (size, client flags, CAS value, key, opaque, in the order asked); a quiet miss says
    // nothing (`mn` ends the batch).
    let ask = |cl: &mut Client, line: String| {
        let mut l = cl.send(line.as_bytes());
        if l.starts_with("VA ") {
            l.push_str(&cl.line());
        }
        l
    };
    let line = format!("mg {counter} s v f c k O7 t\r\n");
    let (at_agent, through) = (ask(&mut cl, line.clone()), ask(&mut other, line));
    assert!(at_agent.starts_with("VA 2 s2 f0 c"), "{at_agent:?}");
    assert!(
        at_agent.ends_with(&format!(" k{counter} O7 t-1\r\n10\r\n")),
        "{at_agent:?}"
    );
    assert_eq!(at_agent, through);
    let quiet = format!("mg {missing} v q\r\nmn\r\n");
    assert_eq!(ask(&mut cl, quiet.clone()), "MN\r\n");
    assert_eq!(ask(&mut other, quiet), "MN\r\n");
    // A touch on the agent's loop: the index's expiry, then one `Touch` and ack per other
    // member node holding the value (a replicated one: m); a miss none; through another node
    // two more. A negative expiry ends the value at once, as memcached's.
    let touches0 = stat("loop_touches");
    let (m19, p19) = count();
    assert_eq!(
        cl.send(format!("touch {counter} 100\r\n").as_bytes()),
        "TOUCHED\r\n"
    );
    let (m20, p20) = count();
    assert_eq!(m20 - m19, 2 * m, "touch");
    assert_eq!(p20 - p19, 2 * m);
    assert_eq!(
        cl.send(format!("touch {missing} 100\r\n").as_bytes()),
        "NOT_FOUND\r\n"
    );
    assert_eq!(count(), (m20, p20), "a touch's miss sends nothing");
    let ttl = ask(&mut cl, format!("mg {counter} t\r\n"));
    assert!(ttl == "HD t100\r\n" || ttl == "HD t99\r\n", "{ttl:?}");
    // A `gat` on the agent's loop: the value read from the agent's own store, then the touch's
    // messages (m for a replicated value); a miss sends nothing; `gats` through another node,
    // two more (the agent runs it on its loop as well); a meta get with `T` the same, its reply
    // composed from its flags as the other node's is.
    let value = |cl: &mut Client, line: String| {
        let mut l = cl.send(line.as_bytes());
        if l.starts_with("VALUE ") {
            l.push_str(&cl.line());
            l.push_str(&cl.line());
        } else if l.starts_with("VA ") {
            l.push_str(&cl.line());
        }
        l
    };
    let touched_before_gat = stat("loop_touches");
    let (g0, q0) = count();
    assert_eq!(
        value(&mut cl, format!("gat 200 {counter}\r\n")),
        format!("VALUE {counter} 0 2\r\n10\r\nEND\r\n")
    );
    let (g1, q1) = count();
    assert_eq!(g1 - g0, 2 * m, "gat");
    assert_eq!(q1 - q0, 2 * m);
    let ttl = ask(&mut cl, format!("mg {counter} t\r\n"));
    assert!(ttl == "HD t200\r\n" || ttl == "HD t199\r\n", "{ttl:?}");
    assert_eq!(value(&mut cl, format!("gat 100 {missing}\r\n")), "END\r\n");
    assert_eq!(count(), (g1, q1), "a gat's miss sends nothing");
    let gats = value(&mut other, format!("gats 300 {counter}\r\n"));
    assert!(
        gats.starts_with(&format!("VALUE {counter} 0 2 ")) && gats.ends_with("\r\n10\r\nEND\r\n"),
        "{gats:?}"
    );
    let (g2, q2) = count();
    assert_eq!(g2 - g1, 2 * m + 2, "forwarded gats");
    assert_eq!(q2 - q1, 2 * m + 2);
    let line = format!("mg {counter} v s T400 t k\r\n");
    let (at_agent, through) = (value(&mut cl, line.clone()), value(&mut other, line));
    for reply in [&at_agent, &through] {
        assert!(
            reply.starts_with("VA 2 s2 t") && reply.ends_with(&format!(" k{counter}\r\n10\r\n")),
            "{reply:?}"
        );
    }
    let (g3, q3) = count();
    assert_eq!(g3 - g2, 2 * m + 2 * m + 2, "meta gets with T");
    assert_eq!(q3 - q2, 2 * m + 2 * m + 2);
    assert_eq!(stat("loop_touches") - touched_before_gat, 4);
    let ttl = ask(&mut cl, format!("mg {counter} t\r\n"));
    assert!(ttl == "HD t400\r\n" || ttl == "HD t399\r\n", "{ttl:?}");
    // A meta append and prepend on the agent's loop cost what `append` and `prepend` do; of a
    // missing key, `NS` and nothing sent; one that compares a CAS value goes to a worker.
    let writes_before = stat("loop_writes");
    let (g4, q4) = count();
    assert_eq!(
        cl.send(format!("ms {counter} 1 MA\r\nx\r\n").as_bytes()),
        "HD\r\n"
    );
    assert_eq!(
        cl.send(format!("ms {counter} 1 MP O5\r\ny\r\n").as_bytes()),
        "HD O5\r\n"
    );
    let (g5, q5) = count();
    assert_eq!(g5 - g4, 2 * 2 * m, "meta append and prepend");
    assert_eq!(q5 - q4, 2 * 2 * m);
    assert_eq!(
        cl.send(format!("ms {missing} 1 MA\r\nx\r\n").as_bytes()),
        "NS\r\n"
    );
    assert_eq!(count(), (g5, q5), "a meta append's miss sends nothing");
    assert_eq!(stat("loop_writes") - writes_before, 2);
    assert_eq!(
        value(&mut other, format!("mg {counter} v\r\n")),
        "VA 4\r\ny10x\r\n"
    );
    let (m20, p20) = count();
    assert_eq!(
        other.send(format!("touch {counter} -1\r\n").as_bytes()),
        "TOUCHED\r\n"
    );
    let (m21, p21) = count();
    assert_eq!(m21 - m20, 2 * m + 2, "forwarded touch");
    assert_eq!(p21 - p20, 2 * m + 2);
    assert_eq!(stat("loop_touches") - touches0, 6);
    assert_eq!(cl.get(&counter), Got::Miss);
    // A meta set and a meta delete on the agent's loop cost what a set and a delete do, their
    // replies composed from their flags as a worker's are (an `I`nvalidate goes to a worker,
    // which stores as a plain `ms`); a refusal sends nothing; through another node, one
    // forward and its reply more.
    let ms = |cl: &mut Client, flags: &str, fill: u8| {
        let mut b = format!("ms {key} 8192 {flags}\r\n").into_bytes();
        b.extend_from_slice(&[fill; 8192]);
        b.extend_from_slice(b"\r\n");
        cl.send(&b)
    };
    let no_cas = |reply: &str| {
        reply
            .split(' ')
            .filter(|t| !t.starts_with('c'))
            .collect::<Vec<_>>()
            .join(" ")
    };
    let (writes0, refused0, deletes0) = (
        stat("loop_writes"),
        stat("loop_writes_refused"),
        stat("loop_deletes"),
    );
    let (m22, p22) = count();
    let loop_reply = ms(&mut cl, "c k O9 F3", 10);
    let (m23, p23) = count();
    assert_eq!(m23 - m22, 2 * (n - 1) as u64, "ms");
    assert_eq!(p23 - p22, 2 * (n - 1) as u64, "ms: peer messages");
    assert_eq!(stat("loop_writes") - writes0, 1);
    let cas = cl.cas_of(key);
    assert_eq!(loop_reply, format!("HD c{cas} k{key} O9\r\n"));
    let worker_reply = ms(&mut cl, "c k O9 F3 I", 11);
    assert_eq!(
        stat("loop_writes") - writes0,
        1,
        "an invalidate runs on a worker"
    );
    assert_eq!(no_cas(&worker_reply), no_cas(&loop_reply));
    let (m24, p24) = count();
    assert_eq!(ms(&mut cl, "ME", 12), "NS\r\n");
    assert_eq!(ms(&mut cl, &format!("C{}", cas), 12), "EX\r\n");
    assert_eq!(count(), (m24, p24), "a refused ms sends nothing");
    assert_eq!(stat("loop_writes_refused") - refused0, 2);
    let through = ms(&mut other, "C0 q", 13);
    assert_eq!(through, "EX\r\n");
    let (m25, p25) = count();
    assert_eq!(m25 - m24, 2, "forwarded refused ms");
    assert_eq!(p25 - p24, 2);
    assert_eq!(other.get(key), Got::Hit(vec![11u8; 8192]));
    let (m26, p26) = count();
    assert_eq!(
        cl.send(format!("md {key} q O5\r\nmn\r\n").as_bytes()),
        "MN\r\n"
    );
    let (m27, p27) = count();
    assert_eq!(m27 - m26, 2 * (n - 1) as u64, "md");
    assert_eq!(p27 - p26, 2 * (n - 1) as u64);
    assert_eq!(cl.send(format!("md {key} O5\r\n").as_bytes()), "NF O5\r\n");
    assert_eq!(count(), (m27, p27), "an md's miss sends nothing");
    assert_eq!(stat("loop_deletes") - deletes0, 1);
    assert_eq!(ms(&mut other, "", 14), "HD\r\n");
    let (m28, p28) = count();
    assert_eq!(m28 - m27, 2 * (n - 1) as u64 + 2, "forwarded ms");
    assert_eq!(other.send(format!("md {key}\r\n").as_bytes()), "HD\r\n");
    let (m29, p29) = count();
    assert_eq!(m29 - m28, 2 * (n - 1) as u64 + 2, "forwarded md");
    assert_eq!(p29 - p28, 2 * (n - 1) as u64 + 2);
    assert_eq!(cl.get(key), Got::Miss);
    assert_eq!(c.sum_stat("loop_read_fallbacks"), 0);
    assert_eq!(c.sum_stat("loop_forward_fallbacks"), 0);
    assert_eq!(c.sum_stat("loop_write_fallbacks"), 0);
}

#[test]
fn messages_per_operation_rs() {
    messages_per_operation("rs:6,3", 9, 6);
}

/// TriEC writes run its tripartite encode, installed at start-up like the others: the agent
/// sends each other data member its chunk (carrying its start), each parity member gets one
/// start, every data member (the agent's own included) sends each parity member its products,
/// and every member answers `done`.
#[test]
fn messages_per_triec_write() {
    let (n, k, m) = (9usize, 6usize, 3usize);
    let c = Cluster::up("rs:6,3", "triec", n);
    let placement = cache::cluster::placement::Placement::new(n, n);
    let key = "counted";
    let agent = placement.stripe_of(key.as_bytes());
    assert!(c.sum_stat("startup_templates") > (n * (n + k)) as u64);
    let mut cl = c.client(agent);
    assert_eq!(cl.set(key, &[1u8; 8192]), "STORED\r\n");
    let (m0, p0) = (
        c.sum_stat("messages_sent"),
        c.sum_stat("peer_messages_sent"),
    );
    assert_eq!(cl.set(key, &[2u8; 8192]), "STORED\r\n");
    let (m1, p1) = (
        c.sum_stat("messages_sent"),
        c.sum_stat("peer_messages_sent"),
    );
    assert_eq!(
        m1 - m0,
        ((k - 1) + m + k * m + (n - 1)) as u64,
        "TriEC write"
    );
    assert_eq!(p1 - p0, 0, "TriEC write: no peer message");
    assert_eq!(c.sum_stat("write_plan_runs"), 2);
    assert_eq!(c.sum_stat("write_plan_fallbacks"), 0);
    for front in 0..n {
        assert_eq!(c.client(front).get(key), Got::Hit(vec![2u8; 8192]));
    }
    // Every parity position holds the parity of the value: a degraded read that needs them.
    for lost in 0..3 {
        assert_eq!(cl.mg_degraded(key, lost), Got::Hit(vec![2u8; 8192]));
    }
}

#[test]
fn messages_per_operation_lrc() {
    messages_per_operation("lrc:6,2,2", 10, 6);
}

#[test]
fn client_buffers_are_bounded() {
    let c = Cluster::up("rs:6,3", "rs", 9);
    let pid = c.pids()[0];
    let mut cl = c.client(0);
    assert_eq!(cl.set("big", &vec![7u8; 1 << 20]), "STORED\r\n");
    let before = harness::resident_bytes(pid).unwrap() / 1024;
    // An endless line: refused and the connection closed; the node keeps serving.
    let mut endless = TcpStream::connect(c.clients[0]).unwrap();
    endless
        .set_write_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    let chunk = vec![b'a'; 64 * 1024];
    let mut sent = 0usize;
    while sent < 64 << 20 && endless.write_all(&chunk).is_ok() {
        sent += chunk.len();
    }
    assert!(sent < 64 << 20, "the node kept reading an endless line");
    // A client that asks for 1 MiB values and never reads the replies.
    let mut greedy = TcpStream::connect(c.clients[0]).unwrap();
    greedy
        .set_write_timeout(Some(Duration::from_secs(3)))
        .unwrap();
    let mut asked = 0;
    while asked < 2000 && greedy.write_all(b"get big\r\n").is_ok() {
        asked += 1;
    }
    std::thread::sleep(Duration::from_millis(500));
    let grown_kib = (harness::resident_bytes(pid).unwrap() / 1024).saturating_sub(before);
    assert!(grown_kib < 64 * 1024, "node grew by {grown_kib} KiB");
    assert_eq!(cl.get("big"), Got::Hit(vec![7u8; 1 << 20]));
    drop((endless, greedy));
}

#[test]
fn expiry_touch_and_flush_follow_memcached() {
    let c = Cluster::up("rs:6,3", "rs", 9);
    let mut a = c.client(1);
    let mut b = c.client(2);
    // memcached's `threads`: the event loops (`-t 2`).
    assert_eq!(a.stats("")["threads"], "2");
    let big = vec![3u8; 5000];
    // Negative exptime: stored and gone at once.
    assert_eq!(a.send(b"set gone 0 -1 1\r\nx\r\n"), "STORED\r\n");
    assert_eq!(b.get("gone"), Got::Miss);
    // Relative exptime of 2 s (coded and replicated values), then touch extends one of them.
    // The clock counts whole seconds (as memcached's): an exptime of 2 lives at least 1 s and
    // at most 2 s, so the reads below, within 1 s of the sets, hit, and the one 2.1 s later
    // misses (an exptime of 1 could lapse at once, the set made just before a second turns).
    let mut req = b"set short 0 2 5000\r\n".to_vec();
    req.extend_from_slice(&big);
    req.extend_from_slice(b"\r\n");
    assert_eq!(a.send(&req), "STORED\r\n");
    assert_eq!(a.send(b"set small 0 2 2\r\nhi\r\n"), "STORED\r\n");
    assert_eq!(b.send(b"touch small 100\r\n"), "TOUCHED\r\n");
    assert_eq!(b.send(b"touch nothing 100\r\n"), "NOT_FOUND\r\n");
    assert_eq!(b.get("short"), Got::Hit(big.clone()));
    std::thread::sleep(Duration::from_millis(2100));
    assert_eq!(b.get("short"), Got::Miss);
    assert_eq!(a.get("small"), Got::Hit(b"hi".to_vec()));
    // gat sets a new exptime and returns the value.
    let first = a.send(b"gat 1 small\r\n");
    assert_eq!(a.read_value(&first), Got::Hit(b"hi".to_vec()));
    // An absolute exptime in the past: expired.
    let past = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs()
        - 10;
    let mut req = format!("set old 0 {past} 1\r\n").into_bytes();
    req.extend_from_slice(b"x\r\n");
    assert_eq!(a.send(&req), "STORED\r\n");
    assert_eq!(b.get("old"), Got::Miss);
    // flush_all with a delay: values stay until the delay has passed, on every node.
    assert_eq!(a.set("f1", &big), "STORED\r\n");
    assert_eq!(a.send(b"flush_all 1\r\n"), "OK\r\n");
    assert_eq!(b.get("f1"), Got::Hit(big.clone()));
    std::thread::sleep(Duration::from_millis(1200));
    assert_eq!(b.get("f1"), Got::Miss);
    assert_eq!(a.set("f2", &big), "STORED\r\n");
    assert_eq!(b.get("f2"), Got::Hit(big));
    assert_eq!(a.send(b"flush_all\r\n"), "OK\r\n");
    assert_eq!(c.client(5).get("f2"), Got::Miss);
}

#[test]
fn lrc_node_restarted_empty_is_rebuilt() {
    let c = Cluster::up("lrc:6,2,2", "lrc", 10);
    let mut rng = SmallRng::seed_from_u64(11);
    let mut cl = c.client(0);
    let mut values = Vec::new();
    for i in 0..30 {
        let len = if i % 3 == 0 {
            rng.gen_range(0..1024)
        } else {
            rng.gen_range(1024..100_000)
        };
        let v = random_value(&mut rng, len);
        assert_eq!(cl.set(&format!("l{i}"), &v), "STORED\r\n");
        values.push(v);
    }
    c.kill(4);
    c.restart(4);
    c.wait_whole();
    let status = c.status();
    assert_eq!(status.matches(" whole ").count(), 10, "{status}");
    // Node 4 holds a position of every coded value and some replicas: all rebuilt.
    assert!(c.sum_stat("chunks_repaired") >= 20);
    let before = c.sum_stat("degraded_reads");
    for node in 0..10 {
        let mut cl = c.client(node);
        for (i, v) in values.iter().enumerate() {
            assert!(
                cl.get(&format!("l{i}")) == Got::Hit(v.clone()),
                "l{i} via node {node}"
            );
        }
    }
    assert_eq!(
        c.sum_stat("degraded_reads"),
        before,
        "reads after recovery are not degraded"
    );
}

/// `stats inec` field `name` of every node.
fn per_node(c: &Cluster, name: &str) -> Vec<u64> {
    (0..c.clients.len())
        .map(|i| c.client(i).stats("inec")[name].parse::<u64>().unwrap())
        .collect()
}

/// A forced degraded read runs the scheme's repair plan on the engine hosts: the right bytes,
/// one more `degraded_plan_runs` at the agent and no fallback, one `Start` per participant
/// other than the agent (which launches the run) and none twice, and on the cache's own
/// messages only the normal read of the data chunks that are left. Once its plan is installed,
/// the read runs to completion on the agent's event loop (no worker waits for the run).
fn degraded_read_on_engine(code: &str, scheme: &str, n: usize, k: usize, extra: &[&str]) {
    let c = Cluster::up_with(code, scheme, n, extra);
    let placement = cache::cluster::placement::Placement::new(n, n);
    let mut rng = SmallRng::seed_from_u64(11);
    for (round, (key, len)) in [("planned", 10_000usize), ("planned-big", 300_001)]
        .into_iter()
        .enumerate()
    {
        let agent = placement.stripe_of(key.as_bytes());
        let mut cl = c.client(agent);
        let v = random_value(&mut rng, len);
        assert_eq!(cl.set(key, &v), "STORED\r\n");
        for position in [1, k - 1] {
            // The first read of a loss pattern and size class installs the plan.
            assert!(
                cl.mg_degraded(key, position) == Got::Hit(v.clone()),
                "{key} warm-up"
            );
            let starts0 = per_node(&c, "plan_starts");
            let runs0 = per_node(&c, "degraded_plan_runs");
            let on_loop0 = per_node(&c, "loop_degraded_reads");
            let sent0 = c.sum_stat("peer_messages_sent");
            let installed0 = c.sum_stat("plan_templates_installed");
            assert!(
                cl.mg_degraded(key, position) == Got::Hit(v.clone()),
                "{scheme}: degraded read of {key} position {position}"
            );
            let starts1 = per_node(&c, "plan_starts");
            let runs1 = per_node(&c, "degraded_plan_runs");
            assert_eq!(
                runs1[agent] - runs0[agent],
                1,
                "{scheme}: plan runs at the agent"
            );
            assert_eq!(runs1.iter().sum::<u64>() - runs0.iter().sum::<u64>(), 1);
            let on_loop1 = per_node(&c, "loop_degraded_reads");
            assert_eq!(
                on_loop1[agent] - on_loop0[agent],
                1,
                "{scheme}: the degraded read ran on the agent's event loop"
            );
            assert_eq!(
                c.sum_stat("degraded_plan_fallbacks"),
                0,
                "{scheme}: fallbacks"
            );
            assert_eq!(
                c.sum_stat("plan_templates_installed"),
                installed0,
                "no reinstall"
            );
            let deltas: Vec<u64> = starts1.iter().zip(&starts0).map(|(a, b)| a - b).collect();
            assert!(
                deltas.iter().all(|&d| d <= 1),
                "{scheme}: starts per node {deltas:?}"
            );
            // The helpers of the plan but the agent (at least k-1, LRC: the local group's 2).
            assert_eq!(
                deltas[agent], 0,
                "{scheme}: the agent launches without a start"
            );
            let participants = deltas.iter().sum::<u64>();
            let least = if scheme == "lrc" { 2 } else { k as u64 - 1 };
            assert!(
                participants >= least,
                "{scheme}: {participants} participants"
            );
            // On the cache's own messages: only the normal read of the k-2 other data
            // members (position 0 is the agent's, `position` is treated as missing).
            let sent1 = c.sum_stat("peer_messages_sent");
            assert_eq!(sent1 - sent0, (k - 2) as u64, "{scheme}: peer messages");
        }
        assert!(round < 2);
    }
}

#[test]
fn degraded_read_on_engine_rs() {
    degraded_read_on_engine("rs:6,3", "rs", 9, 6, &[]);
}

#[test]
fn degraded_read_on_engine_rs_incoherent() {
    degraded_read_on_engine("rs:6,3", "rs", 9, 6, &["--mode", "incoherent"]);
}

#[test]
fn degraded_read_on_engine_lrc() {
    degraded_read_on_engine("lrc:6,2,2", "lrc", 10, 6, &[]);
}

#[test]
fn degraded_read_on_engine_ppr() {
    degraded_read_on_engine("rs:6,3", "ppr", 9, 6, &[]);
}

#[test]
fn degraded_read_on_engine_ecpipe() {
    degraded_read_on_engine("rs:6,3", "ecpipe", 9, 6, &[]);
}

#[test]
fn degraded_read_on_engine_triec() {
    degraded_read_on_engine("rs:6,3", "triec", 9, 6, &[]);
}

/// Every agent installs its own repair templates on the same hosts: degraded reads of keys
/// of every stripe, each agent's template installed in turn, all run on the engine (a host
/// that confused one agent's template with another's would read a position it does not hold
/// and the read would fall back).
#[test]
fn degraded_reads_of_every_stripe_share_the_hosts() {
    let n = 9;
    let c = Cluster::up_with("rs:6,3", "rs", n, &[]);
    let mut rng = SmallRng::seed_from_u64(23);
    let values: Vec<(String, Vec<u8>)> = one_key_per_stripe(n, "every-stripe-")
        .into_iter()
        .map(|k| (k, random_value(&mut rng, 6_000)))
        .collect();
    let mut cl = c.client(0);
    for (key, v) in &values {
        assert_eq!(cl.set(key, v), "STORED\r\n");
    }
    for round in 0..2 {
        for position in [1, 4] {
            for (key, v) in &values {
                assert!(
                    cl.mg_degraded(key, position) == Got::Hit(v.clone()),
                    "round {round}: degraded read of {key} position {position}"
                );
            }
        }
    }
    assert_eq!(c.sum_stat("degraded_plan_fallbacks"), 0, "fallbacks");
    assert_eq!(
        c.sum_stat("degraded_plan_runs"),
        (2 * 2 * n) as u64,
        "plan runs"
    );
}

/// A node killed and restarted is back on the engine's plans at once: afterwards every
/// stripe's degraded reads (each agent's repair needs the restarted node as a helper, on the
/// side of it whose engine connects to it and on the side it connects to) and writes run as
/// plans, with no fallback to peer messages.
#[test]
fn restarted_node_is_back_on_the_plans() {
    let n = 9;
    let c = Cluster::up_with("rs:6,3", "rs", n, &[]);
    let keys = one_key_per_stripe(n, "restart-");
    let mut rng = SmallRng::seed_from_u64(29);
    let mut cl = c.client(0);
    for key in &keys {
        assert_eq!(cl.set(key, &random_value(&mut rng, 6_000)), "STORED\r\n");
    }
    let restarted = 4;
    c.kill(restarted);
    c.restart(restarted);
    c.wait_whole();
    let fallbacks = [
        "degraded_plan_fallbacks",
        "read_plan_fallbacks",
        "write_plan_fallbacks",
    ];
    let before: Vec<u64> = fallbacks.iter().map(|f| c.sum_stat(f)).collect();
    let runs0 = c.sum_stat("degraded_plan_runs");
    let mut reads = 0;
    for (i, key) in keys.iter().enumerate() {
        let v = random_value(&mut rng, 6_000);
        // Through the agent (node i leads stripe i) and through the restarted node (which
        // forwards).
        let via = [i, restarted];
        let mut cl = c.client(via[i % 2]);
        assert_eq!(cl.set(key, &v), "STORED\r\n", "{key}");
        assert!(cl.get(key) == Got::Hit(v.clone()), "{key}");
        for position in [1, 4] {
            assert!(
                cl.mg_degraded(key, position) == Got::Hit(v.clone()),
                "degraded read of {key} position {position}"
            );
            reads += 1;
        }
    }
    let after: Vec<u64> = fallbacks.iter().map(|f| c.sum_stat(f)).collect();
    let per: Vec<Vec<u64>> = fallbacks.iter().map(|f| per_node(&c, f)).collect();
    assert_eq!(
        after, before,
        "fallbacks {fallbacks:?} after the restart (per node: {per:?})"
    );
    assert_eq!(c.sum_stat("degraded_plan_runs") - runs0, reads, "plan runs");
}

/// Two degraded reads at one agent run at once (runs are launched from the agent's host, not
/// queued behind one runner): each repair helper waits 400 ms before reading its record
/// (test-only delay), two clients ask the agent together, both get their bytes, and the agent
/// had both runs in flight at the same time. The delay holds up the loop that steps each
/// helper's host, heartbeats included: the down-after time is raised well above it.
#[test]
fn concurrent_degraded_reads_at_one_agent() {
    let c = Cluster::up_env(
        "rs:6,3",
        "rs",
        9,
        &["--down-after-ms", "4000"],
        &[(cache::carrier::plans::INPUT_DELAY_ENV, "400")],
    );
    let placement = cache::cluster::placement::Placement::new(9, 9);
    // Two keys of stripe 0 that do not share a key lock.
    let mut keys: Vec<String> = Vec::new();
    for k in (0..).map(|i| format!("concurrent-{i}")) {
        let lock = cache::node::key_lock_index(k.as_bytes());
        if placement.stripe_of(k.as_bytes()) == 0
            && keys
                .iter()
                .all(|o| cache::node::key_lock_index(o.as_bytes()) != lock)
        {
            keys.push(k);
            if keys.len() == 2 {
                break;
            }
        }
    }
    let mut rng = SmallRng::seed_from_u64(5);
    let values: Vec<Vec<u8>> = keys
        .iter()
        .map(|_| random_value(&mut rng, 20_000))
        .collect();
    let mut cl = c.client(0);
    for (k, v) in keys.iter().zip(&values) {
        assert_eq!(cl.set(k, v), "STORED\r\n");
        // Runs the start-up repair template of (stripe 0, position 1 lost) once.
        assert!(cl.mg_degraded(k, 1) == Got::Hit(v.clone()));
    }
    let stat = |name: &str| c.client(0).stats("inec")[name].parse::<u64>().unwrap();
    assert_eq!(stat("degraded_plan_runs_in_flight_max"), 1);
    let runs0 = stat("degraded_plan_runs");
    let barrier = std::sync::Barrier::new(2);
    std::thread::scope(|s| {
        for (k, v) in keys.iter().zip(&values) {
            let (barrier, c) = (&barrier, &c);
            s.spawn(move || {
                let mut cl = c.client(0);
                barrier.wait();
                assert!(cl.mg_degraded(k, 1) == Got::Hit(v.clone()), "{k}");
            });
        }
    });
    assert_eq!(stat("degraded_plan_runs") - runs0, 2);
    assert_eq!(stat("degraded_plan_fallbacks"), 0);
    assert_eq!(stat("degraded_plan_runs_in_flight_max"), 2);
    assert_eq!(stat("plan_templates_installed"), 0);
}

/// `inec cache up --netns`: every node in its own namespace behind a rate-limited veth link,
/// the cluster file giving their namespace addresses; values written through one node read
/// back through another, a write and a read on the start-up plans; `down` removes the
/// namespaces and the bridge. Skipped (saying why) where namespaces cannot be made; failed
/// there under CI.
#[test]
fn cache_up_in_network_namespaces() {
    // Two namespace tests of this binary run in parallel: they take turns on the one bridge.
    let _slot = harness::netns::slot().unwrap();
    if let Some((tool, package)) = harness::netns::unavailable() {
        harness::skip::skip_or_fail(tool, package);
        return;
    }
    let c = Cluster::up_with("rs:6,3", "rs", 9, &["--netns", "--link-rate", "1gbit"]);
    let st = state(&c.path());
    for (i, m) in st["members"].as_array().unwrap().iter().enumerate() {
        let client: std::net::SocketAddr = m["client"].as_str().unwrap().parse().unwrap();
        assert!(client.ip().to_string().starts_with("10.77."), "{client}");
        assert_eq!(client.port(), 11211);
        assert_eq!(st["netns"][i].as_str().unwrap(), format!("inec-ns{i}"));
        assert!(std::path::Path::new("/run/netns")
            .join(format!("inec-ns{i}"))
            .exists());
    }
    let text = std::fs::read_to_string(c.path().join("cluster.txt")).unwrap();
    assert!(text.contains("10.77.0.12:11211"), "{text}");
    let mut rng = SmallRng::seed_from_u64(3);
    for i in 0..9 {
        let key = format!("ns-{i}");
        let v = random_value(&mut rng, 8192 + i);
        assert_eq!(c.client(i).set(&key, &v), "STORED\r\n");
        assert!(c.client((i + 4) % 9).get(&key) == Got::Hit(v), "{key}");
    }
    assert!(c.sum_stat("write_plan_runs") + c.sum_stat("loop_writes") >= 9);
    // Every read ran on a loop or a worker (on the read template, or over peer messages when
    // a loaded machine's heartbeats marked a member down for a moment).
    let reads = ["read_plan_runs", "read_plan_fallbacks", "loop_reads"];
    assert!(reads.iter().map(|s| c.sum_stat(s)).sum::<u64>() >= 9);
    assert_eq!(c.sum_stat("write_plan_fallbacks"), 0);
    drop(c);
    for i in 0..9 {
        assert!(!std::path::Path::new("/run/netns")
            .join(format!("inec-ns{i}"))
            .exists());
    }
    assert!(!std::path::Path::new("/sys/class/net/inec-br").exists());
}

/// The cut that once made two agents: the agent of stripe 0 (node 0) and its successor (node 1)
/// cannot hear each other, in both directions and silently (frames vanish, nothing answers with
/// an error), for five seconds, while every other link works. A writer writes through the
/// successor and readers read through three other nodes. The successor cannot gather a
/// majority (the others still hear the agent), so it never leads: once it sees the agent down
/// it acknowledges no write of stripe 0 (the rules before the majority lease let it take the
/// stripe over and acknowledge them, a second leader), the readers keep reading, no read
/// returns a value older than one acknowledged before the read began, and after the heal every
/// value reads back through every node. Skipped (saying why) where namespaces cannot be made; failed there under
/// CI.
#[test]
fn a_silent_cut_between_the_agent_and_its_successor_serves_nothing_stale() {
    // Two namespace tests of this binary run in parallel: they take turns on the one bridge.
    let _slot = harness::netns::slot().unwrap();
    if let Some((tool, package)) = harness::netns::unavailable() {
        harness::skip::skip_or_fail(tool, package);
        return;
    }
    let c = Cluster::up_with("rs:6,3", "rs", 9, &["--netns"]);
    // The load's keys of stripe 0 (agent 0, successor 1).
    let stripe_0: Vec<usize> = (0..LOAD_KEYS)
        .filter(|k| {
            cache::cluster::placement::fnv1a_64(format!("w{k}").as_bytes()).is_multiple_of(9)
        })
        .collect();
    assert!(!stripe_0.is_empty());
    let load = Load::start_at(&c, 1, &[3, 4, 5]);
    std::thread::sleep(Duration::from_millis(1000));
    harness::netns::cut(0, 1).unwrap();
    harness::netns::cut(1, 0).unwrap();
    // A write under way when the cut came may still be acknowledged: after a down-after time
    // the successor sees the agent down, and from then on only a second leader could
    // acknowledge a write of stripe 0 through it.
    std::thread::sleep(Duration::from_millis(1500));
    let acked = |load: &Load| -> Vec<Option<u64>> {
        let w = load.writes.lock().unwrap();
        stripe_0.iter().map(|&k| w[k].0).collect()
    };
    let at_cut = acked(&load);
    let reads_at_cut = load.reads_ok.load(Ordering::Relaxed);
    std::thread::sleep(Duration::from_millis(3500));
    // The successor saw the agent down and stood ready to take over, but no majority voted
    // for it: it acknowledged nothing of stripe 0, while the other nodes kept reading.
    let st = c.client(1).stats("inec");
    assert_eq!(
        st["node_0"], "down",
        "the cut was not silent enough to be seen"
    );
    assert_eq!(st["stripe_0"].split(",agent=").nth(1), Some("1"));
    assert_eq!(acked(&load), at_cut, "a second leader acknowledged writes");
    // The other nodes keep reading through the cut. A read of stripe 0 that asked the cut
    // member before it was seen down waits out its request, and the three readers can all be
    // in such a read at once: under the load of the test beside this one, that has held
    // reads back for the whole 3.5 s above (3 times in 9 runs of the binary). So the cut stays
    // up to 6.5 s longer until they have made progress, still with no second leader.
    let deadline = Instant::now() + Duration::from_millis(6500);
    while load.reads_ok.load(Ordering::Relaxed) <= reads_at_cut + 50 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(
        load.reads_ok.load(Ordering::Relaxed) > reads_at_cut + 50,
        "reads made no progress during the cut"
    );
    assert_eq!(acked(&load), at_cut, "a second leader acknowledged writes");
    harness::netns::heal(0, 1).unwrap();
    harness::netns::heal(1, 0).unwrap();
    std::thread::sleep(Duration::from_millis(2000));
    let w = load.finish();
    c.wait_whole();
    read_back(&c, &w);
}

/// Keys of `stripe` (9 nodes), `count` of them, some coded (8 KiB) and some replicated (100 B).
/// One key of each stripe of an `n`-node cache (`n` chunks per stripe), the key of stripe s
/// at index s, named `prefix` and a number.
fn one_key_per_stripe(n: usize, prefix: &str) -> Vec<String> {
    let placement = cache::cluster::placement::Placement::new(n, n);
    let mut keys: Vec<Option<String>> = vec![None; n];
    for key in (0..).map(|i| format!("{prefix}{i}")) {
        let s = placement.stripe_of(key.as_bytes());
        if keys[s].is_none() {
            keys[s] = Some(key);
            if keys.iter().all(Option::is_some) {
                break;
            }
        }
    }
    keys.into_iter().map(|k| k.expect("key")).collect()
}

fn keys_of_stripe(stripe: usize, count: usize) -> Vec<String> {
    let placement = cache::cluster::placement::Placement::new(9, 9);
    (0..)
        .map(|i| format!("stall{i}"))
        .filter(|k| placement.stripe_of(k.as_bytes()) == stripe)
        .take(count)
        .collect()
}

/// Writes generation `generation` of every key through `cl`; each must be acknowledged.
fn set_all(cl: &mut Client, keys: &[String], generation: u64) {
    for (i, k) in keys.iter().enumerate() {
        assert_eq!(
            cl.set(k, &stall_value(k, generation, i)),
            "STORED\r\n",
            "{k}, generation {generation}"
        );
    }
}

/// Reads every key through every node: each must be generation `generation` (`when` says when,
/// for the failure message).
fn read_all_through_every_node(c: &Cluster, keys: &[String], generation: u64, when: &str) {
    for front in 0..9 {
        let mut cl = c.client(front);
        for (i, k) in keys.iter().enumerate() {
            assert_eq!(
                cl.get(k),
                Got::Hit(stall_value(k, generation, i)),
                "key {k} through node {front} {when}"
            );
        }
    }
}

fn stall_value(key: &str, generation: u64, i: usize) -> Vec<u8> {
    let len = if i.is_multiple_of(2) { 8192 } else { 100 };
    format!("{key}:{generation}:")
        .bytes()
        .cycle()
        .take(len)
        .collect()
}

/// A stalled agent (SIGSTOP for longer than the down-after time) is replaced by the next
/// member, which takes writes; when the agent resumes it must not serve its old index: every
/// node returns the values acknowledged during the stall, and the returning agent refills the
/// records it missed. Before the agent lease, the resumed agent kept its old index and every
/// read of the overwritten keys failed (the members had dropped the old version).
#[test]
fn stalled_agent_is_replaced_and_resumes_without_stale_or_lost_values() {
    let c = Cluster::up("rs:6,3", "rs", 9);
    let keys = keys_of_stripe(4, 10);
    let mut cl = c.client(1);
    set_all(&mut cl, &keys, 1);
    c.signal(4, "STOP");
    std::thread::sleep(Duration::from_millis(1500));
    set_all(&mut cl, &keys, 2);
    let stand_in = c.client(5).stats("inec");
    c.signal(4, "CONT");
    c.wait_whole();
    read_all_through_every_node(&c, &keys, 2, "after the agent resumed");
    // The agent leads again (its stripe's state names it) and holds no stale index: a write
    // through it and a read through every node agree.
    let mut cl = c.client(4);
    set_all(&mut cl, &keys, 3);
    read_all_through_every_node(&c, &keys, 3, "written through the agent");
    let agent = c.client(4).stats("inec");
    assert!(
        agent["stripe_4"].contains("agent=4"),
        "{}",
        agent["stripe_4"]
    );
    assert!(
        stand_in["writes_with_holes"].parse::<u64>().unwrap() >= 10,
        "node 5 stood in and wrote around the stalled node: {stand_in:?}"
    );
}

/// A member stalled during writes misses their records; once it is back the agent fills them
/// in, so that m more nodes may then die without losing the values acknowledged meanwhile.
#[test]
fn writes_missed_by_a_stalled_member_are_filled_in() {
    let c = Cluster::up("rs:6,3", "rs", 9);
    let keys = keys_of_stripe(4, 10);
    let mut cl = c.client(1);
    set_all(&mut cl, &keys, 1);
    // Node 6 holds position 2 of stripe 4 (a coded chunk and a replica). The first write
    // starts on the agent's loop while node 6 still looks up; once its `Put` to node 6 goes
    // unanswered past the loop's patience (twice --down-after-ms), a worker writes it again to
    // the others if the agent led the stripe throughout. If a member voting for the agent saw
    // it down meanwhile (a loaded machine can delay heartbeats past --down-after-ms), the write
    // is in doubt instead (answered SERVER_ERROR, never run again) and the client writes it
    // again; either way the records go to the others.
    c.signal(6, "STOP");
    let mut in_doubt = 0;
    for (i, k) in keys.iter().enumerate() {
        let value = stall_value(k, 2, i);
        loop {
            let reply = cl.set(k, &value);
            if reply == "STORED\r\n" {
                break;
            }
            assert!(
                reply.starts_with("SERVER_ERROR") && reply.contains("may or may not"),
                "{k}: {reply:?}"
            );
            in_doubt += 1;
            assert!(in_doubt <= 3 * keys.len(), "{k}: still {reply:?}");
        }
    }
    let s4 = c.client(4).stats("inec");
    let given_up = s4["runs_given_up"].parse::<u64>().unwrap()
        + s4["loop_write_fallbacks"].parse::<u64>().unwrap()
        + s4["writes_in_doubt"].parse::<u64>().unwrap();
    assert!(
        given_up >= 1,
        "the agent gave up the write that waited for node 6: {s4:?}"
    );
    c.signal(6, "CONT");
    c.wait_whole();
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let s = c.client(4).stats("inec");
        if s["holes_pending"] == "0" && s["holes_filled"].parse::<u64>().unwrap() >= 10 {
            break;
        }
        assert!(Instant::now() < deadline, "holes not filled: {s:?}");
        std::thread::sleep(Duration::from_millis(100));
    }
    // Three other members of stripe 4 die, the agent among them: node 6's filled-in records
    // are needed for every coded value (6 of 9 chunks left) and some replicas.
    for node in [4, 5, 7] {
        c.kill(node);
    }
    let mut cl = c.client(1);
    for (i, k) in keys.iter().enumerate() {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let got = cl.get(k);
            if got == Got::Hit(stall_value(k, 2, i)) {
                break;
            }
            // Until the others see the dead nodes down, a request may fail; never other bytes.
            assert!(matches!(got, Got::Error(_)), "key {k}: {got:?}");
            assert!(Instant::now() < deadline, "key {k}: {got:?}");
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

/// A write acknowledged while three members of its stripe were stalled holds its records at
/// the six other positions only: a coded value exactly k chunks, a replicated one the agent's
/// replica alone. If the agent stalls before it fills the holes in and the three come back,
/// the stand-in cannot read that version; it must answer an error for the key (or the value,
/// once the agent is back), never the older value the write replaced: that would be an
/// acknowledged write lost and a stale read.
#[test]
fn a_write_with_holes_is_never_read_back_older_when_its_agent_stalls() {
    let c = Cluster::up("rs:6,3", "rs", 9);
    let keys = keys_of_stripe(4, 10);
    let mut cl = c.client(1);
    set_all(&mut cl, &keys, 1);
    // Nodes 5, 6 and 7 hold positions 1-3 of stripe 4: three coded chunks and three of the
    // four replicas.
    for node in [5, 6, 7] {
        c.signal(node, "STOP");
    }
    std::thread::sleep(Duration::from_millis(1500));
    for (i, k) in keys.iter().enumerate() {
        let value = stall_value(k, 2, i);
        let mut tries = 0;
        while cl.set(k, &value) != "STORED\r\n" {
            tries += 1;
            assert!(tries < 20, "{k}: generation 2 never stored");
        }
    }
    c.signal(4, "STOP");
    for node in [5, 6, 7] {
        c.signal(node, "CONT");
    }
    let deadline = Instant::now() + Duration::from_secs(6);
    let mut errors = 0;
    while Instant::now() < deadline {
        for (i, k) in keys.iter().enumerate() {
            match cl.get(k) {
                Got::Hit(v) if v == stall_value(k, 2, i) => {}
                Got::Error(_) => errors += 1,
                Got::Hit(v) => panic!(
                    "key {k} while its agent is stalled: {:?}",
                    String::from_utf8_lossy(&v[..v.len().min(24)])
                ),
                Got::Miss => panic!("key {k} while its agent is stalled: a miss"),
            }
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    c.signal(4, "CONT");
    c.wait_whole();
    read_all_through_every_node(
        &c,
        &keys,
        2,
        &format!("once the agent is back ({errors} errors before)"),
    );
}

/// A write that fails after some members stored its records (here four members of the
/// stripe stall as a `replace` is sent, more than RS(6,3) tolerates) must not cost the value it meant
/// to replace: the members that stored the new version keep the one it replaced until a later
/// write of the key supersedes both, so once the four are back the key reads as one of the
/// two (the failed write may or may not have taken effect), never an error or a miss.
#[test]
fn a_failed_write_never_costs_the_value_it_meant_to_replace() {
    let c = Cluster::up("rs:6,3", "rs", 9);
    let keys = keys_of_stripe(4, 3);
    let (key, other) = (&keys[0], &keys[1]);
    let mut cl = c.client(1);
    assert_eq!(cl.set(key, &stall_value(key, 1, 0)), "STORED\r\n");
    // Nodes 5-8 hold positions 1-4 of stripe 4; stopped together, the write sent to them at
    // once finds them silent and fails.
    for node in [5, 6, 7, 8] {
        c.signal(node, "STOP");
    }
    // A `replace` (not a plain `set`, which the agent's event loop would run) goes the full way
    // on a worker.
    let value = stall_value(key, 2, 0);
    let mut req = format!("replace {key} 0 0 {}\r\n", value.len()).into_bytes();
    req.extend_from_slice(&value);
    req.extend_from_slice(b"\r\n");
    let reply = cl.send(&req);
    assert!(reply.starts_with("SERVER_ERROR"), "{reply:?}");
    for node in [5, 6, 7, 8] {
        c.signal(node, "CONT");
    }
    c.wait_whole();
    // Later writes of the stripe tell the members that every earlier write has finished.
    for g in 3..6 {
        let mut tries = 0;
        while cl.set(other, &stall_value(other, g, 0)) != "STORED\r\n" {
            tries += 1;
            assert!(tries < 50, "{other} never stored");
            std::thread::sleep(Duration::from_millis(100));
        }
    }
    for front in 0..9 {
        let mut cl = c.client(front);
        let got = cl.get(key);
        assert!(
            got == Got::Hit(stall_value(key, 1, 0)) || got == Got::Hit(stall_value(key, 2, 0)),
            "{key} through node {front}: {}",
            match got {
                Got::Hit(v) => format!("{:?}", String::from_utf8_lossy(&v[..24])),
                other => format!("{other:?}"),
            }
        );
    }
}

/// A home killed between its deltas to its parity positions, with real processes: node 4 (test
/// only, `INEC_TEST_TEAR_VALUE_PREFIX`) sends an overwrite's delta to one parity position of
/// its page (node X) and exits once that one applied it, leaving the page's parity torn. While
/// it is down every value of its stripe reads right through the other nodes (the torn key its
/// old value or the overwrite). Restarted, it sends the delta node X kept to the other parity
/// positions (`whole_deltas_completed`, over the peer links) before it takes its page back, and
/// every node reads the overwrite. Then node 4 and node X are killed: the overwrite is still
/// what every read returns, rebuilt from parity positions that did not have it before. (Left
/// torn, they hold the old value and its location record: the stand-in served the old value,
/// a stale read after the overwrite had been read.)
#[test]
fn a_home_killed_between_its_deltas_comes_back_whole() {
    let c = Cluster::up_env(
        "rs:6,3",
        "rs",
        9,
        &["--layout", "whole"],
        &[("INEC_TEST_TEAR_VALUE_PREFIX", "inec-test-tear")],
    );
    let keys: Vec<String> = (0..)
        .map(|i| format!("tear{i}"))
        .filter(|k| cache::cluster::placement::fnv1a_64(k.as_bytes()) % 9 == 4)
        .take(12)
        .collect();
    let value = |i: usize| vec![b'a' + i as u8 % 7; 1500 + 37 * i];
    let mut cl = c.client(0);
    for (i, k) in keys.iter().enumerate() {
        assert_eq!(cl.set(k, &value(i)), "STORED\r\n");
    }
    // The torn overwrite, sent to node 4 itself: no reply comes, the process is gone.
    let mut torn = b"inec-test-tear ".to_vec();
    torn.resize(1500, b'#');
    let pid = c.pids()[4];
    let mut raw = TcpStream::connect(c.clients[4]).unwrap();
    raw.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut req = format!("set {} 0 0 {}\r\n", keys[0], torn.len()).into_bytes();
    req.extend_from_slice(&torn);
    req.extend_from_slice(b"\r\n");
    raw.write_all(&req).unwrap();
    let mut reply = Vec::new();
    let _ = raw.read_to_end(&mut reply);
    assert!(reply.is_empty(), "{}", String::from_utf8_lossy(&reply));
    assert!(
        harness::process::wait_gone(pid, Duration::from_secs(5)),
        "node 4 exited after its first delta"
    );
    let log = std::fs::read_to_string(c.path().join("node-4.log")).unwrap_or_default();
    let x: usize = log
        .lines()
        .find_map(|l| l.split("a delta sent to node ").nth(1))
        .and_then(|rest| rest.split(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("node 4's log names the node it sent the delta to:\n{log}"));
    assert!(x != 4 && x < 9);
    std::thread::sleep(Duration::from_millis(1500));
    // Every key through each of `nodes` reads its value; the torn one the overwrite, or
    // (`fresh` false, node 4 not back yet) its old value.
    let reads_right = |nodes: &[usize], fresh: bool, what: &str| {
        for &node in nodes {
            let mut cl = c.client(node);
            for (i, k) in keys.iter().enumerate() {
                let got = cl.get(k);
                let right = match &got {
                    Got::Hit(v) if i == 0 => *v == torn || (!fresh && *v == value(0)),
                    Got::Hit(v) => *v == value(i),
                    _ => false,
                };
                assert!(right, "{what}: {k} via node {node}: {got:?}");
            }
        }
    };
    reads_right(&[0, 1, 2], false, "node 4 down");
    c.restart(4);
    c.wait_whole();
    let stats = c.client(4).stats("inec");
    assert!(
        stats["whole_deltas_completed"].parse::<u64>().unwrap() >= 1,
        "node 4 sent the kept delta on: {stats:?}"
    );
    assert_eq!(stats["whole_pages_salvaged"], "0");
    reads_right(&(0..9).collect::<Vec<_>>(), true, "node 4 back");
    // Node 4 and the only parity position that had the overwrite before are killed.
    c.kill(4);
    c.kill(x);
    std::thread::sleep(Duration::from_millis(1500));
    let reader = (0..9).find(|&n| n != 4 && n != x).unwrap();
    reads_right(&[reader], true, &format!("nodes 4 and {x} down"));
}
