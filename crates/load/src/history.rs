//! Histories for a linearizability check: clients on their own threads, each with one blocking
//! connection, run `get`, `set`, `cas` (after a `gets`), `incr` and `delete` on a few hot keys
//! and record every operation with the times it was invoked and answered, so that a checker can
//! decide whether one order of them, each taking effect between its two times, explains every
//! reply (`bench::nemesis` runs porcupine on them).
//!
//! Every value written is unique (its writer and sequence number), so a read names the write it
//! saw. A long value repeats its name to its length and is checked whole when read back: a
//! value that is not exactly that is recorded as `corrupt`, which no order explains.
//!
//! Outcomes: `ok` (the reply is recorded), `fail` (the operation certainly had no effect: a read
//! that failed), `unknown` (a write whose reply never came or was a `SERVER_ERROR`: it may have
//! taken effect, at any time after its invocation).

use std::io::{BufRead, BufReader, ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde::{Deserialize, Serialize};

/// What the clients do.
#[derive(Clone, Debug)]
pub struct HistoryConfig {
    /// Client `i` talks to `addrs[i % addrs.len()]`.
    pub addrs: Vec<SocketAddr>,
    pub clients: usize,
    /// Keys of values `value_len` bytes long: `set`, `get`, `cas`, `delete`.
    pub registers: Vec<String>,
    /// Keys of decimal numbers: `set`, `get`, `incr`, `delete`.
    pub counters: Vec<String>,
    pub value_len: usize,
    /// A reply not complete by then makes the operation `unknown` (a read: `fail`), and the
    /// client connects again.
    pub timeout: Duration,
    /// Each client's pause between two operations.
    pub think: Duration,
    pub seed: u64,
}

/// How an operation ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Outcome {
    Ok,
    Fail,
    Unknown,
}

/// One operation of a history (the checker's input format, docs/nemesis.md).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Op {
    pub client: usize,
    pub key: String,
    /// `get`, `set`, `cas`, `incr` or `delete`.
    pub op: String,
    /// The value a `set` or a `cas` writes.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub value: String,
    /// The value a `cas` expects: the one its `gets` returned with the token.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub expect: String,
    /// Nanoseconds since the history began.
    pub call: i64,
    pub ret: i64,
    pub outcome: Outcome,
    /// The reply: `hit:VALUE`, `miss`, `corrupt`, `STORED`, `EXISTS`, `NOT_FOUND`, `DELETED`,
    /// a number (incr), or any other line as it came.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub out: String,
}

impl Op {
    /// Changes the item (when it succeeds).
    pub fn is_write(&self) -> bool {
        self.op != "get"
    }

    /// Acknowledged as having changed the item: stored, deleted or incremented.
    pub fn took_effect(&self) -> bool {
        self.outcome == Outcome::Ok
            && self.is_write()
            && (self.out == "STORED"
                || self.out == "DELETED"
                || (self.op == "incr" && self.out.bytes().all(|b| b.is_ascii_digit())))
    }
}

/// A recorded history.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct History {
    pub ops: Vec<Op>,
}

impl History {
    /// Reads that returned a value older than one already acknowledged when the read began: a
    /// hit on the value of write W while some write X of the key began after W was acknowledged
    /// and was itself acknowledged before the read began. (A subset of what the linearizability
    /// check finds, counted so that a report can say how many.)
    pub fn stale_reads(&self) -> usize {
        let mut by_key: std::collections::BTreeMap<&str, Vec<&Op>> = Default::default();
        for op in &self.ops {
            by_key.entry(&op.key).or_default().push(op);
        }
        let mut stale = 0;
        for ops in by_key.values() {
            // Acknowledged writes by reply time, with the latest invocation among those
            // acknowledged so far.
            let mut writes: Vec<&Op> = ops.iter().copied().filter(|o| o.took_effect()).collect();
            writes.sort_by_key(|o| o.ret);
            let latest_call: Vec<i64> = writes
                .iter()
                .scan(i64::MIN, |m, o| {
                    *m = (*m).max(o.call);
                    Some(*m)
                })
                .collect();
            let written = |v: &str| -> Option<&Op> {
                ops.iter().copied().find(|o| {
                    o.is_write()
                        && o.outcome != Outcome::Fail
                        && (o.value == v || (o.op == "incr" && o.out == v))
                })
            };
            for read in ops
                .iter()
                .filter(|o| o.op == "get" && o.outcome == Outcome::Ok)
            {
                let Some(v) = read.out.strip_prefix("hit:") else {
                    continue;
                };
                let Some(w) = written(v) else {
                    continue;
                };
                // A write whose reply never came may take effect at any time after its call.
                if w.outcome != Outcome::Ok {
                    continue;
                }
                let before = writes.partition_point(|o| o.ret < read.call);
                if before > 0 && latest_call[before - 1] > w.ret {
                    stale += 1;
                }
            }
        }
        stale
    }
}

/// Clients recording a history until [`Recorder::finish`].
#[derive(Debug)]
pub struct Recorder {
    start: Instant,
    stop: Arc<AtomicBool>,
    threads: Vec<JoinHandle<Vec<Op>>>,
}

impl Recorder {
    /// Starts the clients.
    pub fn start(cfg: &HistoryConfig) -> Recorder {
        let start = Instant::now();
        let stop = Arc::new(AtomicBool::new(false));
        let threads = (0..cfg.clients)
            .map(|id| {
                let mut c = HistClient {
                    id,
                    addr: cfg.addrs[id % cfg.addrs.len()],
                    cfg: cfg.clone(),
                    start,
                    conn: None,
                    seq: 0,
                    rng: StdRng::seed_from_u64(cfg.seed.wrapping_add(id as u64)),
                    ops: Vec::new(),
                };
                let stop = stop.clone();
                std::thread::Builder::new()
                    .name(format!("history-{id}"))
                    .spawn(move || {
                        while !stop.load(Ordering::Relaxed) {
                            c.one();
                            if !c.cfg.think.is_zero() {
                                std::thread::sleep(c.cfg.think);
                            }
                        }
                        c.ops
                    })
                    .expect("spawning a history client")
            })
            .collect();
        Recorder {
            start,
            stop,
            threads,
        }
    }

    /// When the history began.
    pub fn started(&self) -> Instant {
        self.start
    }

    /// Nanoseconds since the history began (the clock of every [`Op`]).
    pub fn now_ns(&self) -> i64 {
        self.start.elapsed().as_nanos() as i64
    }

    /// Stops the clients (each ends the operation under way) and returns the history.
    pub fn finish(self) -> History {
        self.stop.store(true, Ordering::Relaxed);
        let mut ops: Vec<Op> = self
            .threads
            .into_iter()
            .flat_map(|t| t.join().expect("a history client panicked"))
            .collect();
        ops.sort_by_key(|o| o.call);
        History { ops }
    }
}

/// Reads each key once through `addr`, one after the other, appending the reads to `history`
/// as client `client` on the clock of a history that began at `started`: the final reads after
/// the faults.
pub fn read_all(
    history: &mut History,
    client: usize,
    addr: SocketAddr,
    keys: &[String],
    value_len: usize,
    timeout: Duration,
    started: Instant,
) {
    let now_ns = || started.elapsed().as_nanos() as i64;
    let mut conn = None;
    for key in keys {
        let call = now_ns();
        let (outcome, out) = match get_once(&mut conn, addr, key, false, timeout) {
            Ok(Reply::Hit(body, _)) => (Outcome::Ok, read_value(&body, value_len)),
            Ok(Reply::Line(l)) if l == "END" => (Outcome::Ok, "miss".to_string()),
            Ok(Reply::Line(l)) if l.starts_with("SERVER_ERROR") => (Outcome::Fail, l),
            Ok(Reply::Line(l)) => (Outcome::Ok, l),
            Err(e) => (Outcome::Fail, e.to_string()),
        };
        history.ops.push(Op {
            client,
            key: key.clone(),
            op: "get".into(),
            value: String::new(),
            expect: String::new(),
            call,
            ret: now_ns(),
            outcome,
            out,
        });
    }
}

enum Reply {
    /// A value's body and its CAS token.
    Hit(Vec<u8>, u64),
    /// Any one-line reply, without its `\r\n`.
    Line(String),
}

struct Conn {
    reader: BufReader<TcpStream>,
    writer: TcpStream,
}

/// Whether a reply is the cache's refusal of an operation because its stripe has more
/// positions down than the code tolerates, given before anything of it was stored (the agent
/// checks first). Such a refusal of a write is a failure, not an unknown, which spares the
/// checker a branch per refused write; a refusal that says the request may or may not have
/// been applied (a later try of a write whose first try went unanswered) stays unknown.
fn refused_unavailable(line: &str) -> bool {
    line.starts_with("SERVER_ERROR stripe ")
        && line.contains(" unavailable: ")
        && !line.contains("may or may not have been applied")
}

fn connect(addr: SocketAddr, timeout: Duration) -> std::io::Result<Conn> {
    let s = TcpStream::connect_timeout(&addr, timeout)?;
    s.set_read_timeout(Some(timeout))?;
    s.set_write_timeout(Some(timeout))?;
    s.set_nodelay(true)?;
    Ok(Conn {
        reader: BufReader::new(s.try_clone()?),
        writer: s,
    })
}

fn read_line(r: &mut BufReader<TcpStream>) -> std::io::Result<String> {
    let mut line = String::new();
    if r.read_line(&mut line)? == 0 {
        return Err(std::io::ErrorKind::UnexpectedEof.into());
    }
    Ok(line.trim_end_matches(['\r', '\n']).to_string())
}

/// Sends `request` (and reads one reply) on `conn`, connecting first if needed; on any error
/// the connection is dropped (a reply may still be on its way).
fn exchange(
    conn: &mut Option<Conn>,
    addr: SocketAddr,
    request: &[u8],
    timeout: Duration,
) -> std::io::Result<Reply> {
    if conn.is_none() {
        *conn = Some(connect(addr, timeout)?);
    }
    let c = conn.as_mut().expect("connected");
    let r = (|| {
        c.writer.write_all(request)?;
        let line = read_line(&mut c.reader)?;
        let Some(head) = line.strip_prefix("VALUE ") else {
            return Ok(Reply::Line(line));
        };
        let bad = || std::io::Error::new(std::io::ErrorKind::InvalidData, line.clone());
        let f: Vec<&str> = head.split(' ').collect();
        let len: usize = f.get(2).and_then(|l| l.parse().ok()).ok_or_else(bad)?;
        let token: u64 = f.get(3).and_then(|t| t.parse().ok()).unwrap_or(0);
        let mut body = vec![0; len + 2];
        c.reader.read_exact(&mut body)?;
        body.truncate(len);
        if read_line(&mut c.reader)? != "END" {
            return Err(bad());
        }
        Ok(Reply::Hit(body, token))
    })();
    if r.is_err() {
        *conn = None;
    }
    r
}

fn get_once(
    conn: &mut Option<Conn>,
    addr: SocketAddr,
    key: &str,
    gets: bool,
    timeout: Duration,
) -> std::io::Result<Reply> {
    let cmd = if gets { "gets" } else { "get" };
    exchange(conn, addr, format!("{cmd} {key}\r\n").as_bytes(), timeout)
}

/// The body of a register value named `name`: the name and a `.` repeated to `len` bytes (at
/// least the name and its dot).
pub fn value_body(name: &str, len: usize) -> Vec<u8> {
    let unit = format!("{name}.");
    let len = len.max(unit.len());
    unit.bytes().cycle().take(len).collect()
}

/// The recorded reply of a hit: `hit:NAME` when the body is exactly a value's body (a number,
/// for a counter, is its own name), else `corrupt`.
fn read_value(body: &[u8], value_len: usize) -> String {
    let Ok(text) = std::str::from_utf8(body) else {
        return "corrupt".into();
    };
    if !text.is_empty() && text.bytes().all(|b| b.is_ascii_digit()) {
        return format!("hit:{text}");
    }
    let name = text.split('.').next().unwrap_or("");
    if !name.is_empty() && body == value_body(name, value_len.max(body.len())).as_slice() {
        format!("hit:{name}")
    } else {
        "corrupt".into()
    }
}

struct HistClient {
    id: usize,
    addr: SocketAddr,
    cfg: HistoryConfig,
    start: Instant,
    conn: Option<Conn>,
    seq: u64,
    rng: StdRng,
    ops: Vec<Op>,
}

impl HistClient {
    fn now(&self) -> i64 {
        self.start.elapsed().as_nanos() as i64
    }

    /// A fresh unique value name: a register's, or a counter's number (room for a million
    /// increments between two sets).
    fn fresh(&mut self, counter: bool) -> String {
        self.seq += 1;
        if counter {
            ((self.id as u64 + 1) * 1_000_000_000_000 + self.seq * 1_000_000).to_string()
        } else {
            format!("c{}n{}", self.id, self.seq)
        }
    }

    /// Runs one operation and records it (nothing when it could not even connect).
    fn one(&mut self) {
        let nr = self.cfg.registers.len();
        let nc = self.cfg.counters.len();
        let pick = self.rng.gen_range(0..nr + nc);
        let counter = pick >= nr;
        let key = if counter {
            self.cfg.counters[pick - nr].clone()
        } else {
            self.cfg.registers[pick].clone()
        };
        let dice = self.rng.gen_range(0..100);
        if self.conn.is_none() {
            match connect(self.addr, self.cfg.timeout) {
                Ok(c) => self.conn = Some(c),
                Err(_) => {
                    std::thread::sleep(Duration::from_millis(50));
                    return;
                }
            }
        }
        match (counter, dice) {
            (_, 0..45) => {
                self.get(&key, false);
            }
            (false, 45..75) | (true, 45..55) => {
                let name = self.fresh(counter);
                self.store("set", &key, name, String::new(), 0);
            }
            (false, 75..95) => {
                // gets, then a cas over what it saw.
                if let Some((seen, token)) = self.get(&key, true) {
                    let name = self.fresh(false);
                    self.store("cas", &key, name, seen, token);
                }
            }
            (true, 55..95) => self.line_command("incr", &key, format!("incr {key} 1\r\n")),
            _ => self.line_command("delete", &key, format!("delete {key}\r\n")),
        }
    }

    fn record(&mut self, key: &str, op: &str, value: String, expect: String, call: i64) -> usize {
        self.ops.push(Op {
            client: self.id,
            key: key.to_string(),
            op: op.to_string(),
            value,
            expect,
            call,
            ret: 0,
            outcome: Outcome::Unknown,
            out: String::new(),
        });
        self.ops.len() - 1
    }

    /// Ends the op at `at` with what the exchange returned: a write's lost reply or
    /// `SERVER_ERROR` is unknown (but a refusal for want of members, [`refused_unavailable`]),
    /// a read's is a failure.
    fn end(&mut self, at: usize, reply: std::io::Result<Reply>) -> Option<(Vec<u8>, u64)> {
        let ret = self.now();
        let op = &mut self.ops[at];
        op.ret = ret;
        let failed = if op.is_write() {
            Outcome::Unknown
        } else {
            Outcome::Fail
        };
        let mut hit = None;
        (op.outcome, op.out) = match reply {
            Ok(Reply::Hit(body, token)) => {
                let out = read_value(&body, self.cfg.value_len);
                hit = Some((body, token));
                (Outcome::Ok, out)
            }
            Ok(Reply::Line(l)) if l == "END" && !op.is_write() => (Outcome::Ok, "miss".into()),
            Ok(Reply::Line(l)) if refused_unavailable(&l) => (Outcome::Fail, l),
            Ok(Reply::Line(l)) if l.starts_with("SERVER_ERROR") => (failed, l),
            Ok(Reply::Line(l)) => (Outcome::Ok, l),
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
                (failed, "timed out".into())
            }
            Err(e) => (failed, e.to_string()),
        };
        hit
    }

    /// A `get` (or `gets`); returns the value's name and token on a clean hit.
    fn get(&mut self, key: &str, gets: bool) -> Option<(String, u64)> {
        let call = self.now();
        let at = self.record(key, "get", String::new(), String::new(), call);
        let reply = get_once(&mut self.conn, self.addr, key, gets, self.cfg.timeout);
        let (_, token) = self.end(at, reply)?;
        let name = self.ops[at].out.strip_prefix("hit:")?.to_string();
        Some((name, token))
    }

    fn store(&mut self, cmd: &str, key: &str, name: String, expect: String, token: u64) {
        let body = if name.bytes().all(|b| b.is_ascii_digit()) {
            name.clone().into_bytes()
        } else {
            value_body(&name, self.cfg.value_len)
        };
        let mut req = if cmd == "cas" {
            format!("cas {key} 0 0 {} {token}\r\n", body.len()).into_bytes()
        } else {
            format!("{cmd} {key} 0 0 {}\r\n", body.len()).into_bytes()
        };
        req.extend_from_slice(&body);
        req.extend_from_slice(b"\r\n");
        let call = self.now();
        let at = self.record(key, cmd, name, expect, call);
        let reply = exchange(&mut self.conn, self.addr, &req, self.cfg.timeout);
        self.end(at, reply);
    }

    /// A one-line command on `key` (`incr key 1`, `delete key`) recorded as `op`.
    fn line_command(&mut self, op: &str, key: &str, request: String) {
        let call = self.now();
        let at = self.record(key, op, String::new(), String::new(), call);
        let reply = exchange(
            &mut self.conn,
            self.addr,
            request.as_bytes(),
            self.cfg.timeout,
        );
        self.end(at, reply);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn op(key: &str, kind: &str, value: &str, call: i64, ret: i64, out: &str) -> Op {
        Op {
            client: 0,
            key: key.into(),
            op: kind.into(),
            value: value.into(),
            expect: String::new(),
            call,
            ret,
            outcome: Outcome::Ok,
            out: out.into(),
        }
    }

    /// Only the refusal for want of members, said as the cache says it, is a failure; the same
    /// refusal of a later try (which says it may have been applied) and any other error stay
    /// unknown.
    #[test]
    fn a_write_refused_for_want_of_members_failed_and_other_errors_are_unknown() {
        let refused = "SERVER_ERROR stripe 3 unavailable: 4 of 9 chunk positions down (nodes \
                       [1, 2, 3, 4]), rs:6,3 tolerates 3";
        assert!(refused_unavailable(refused));
        let reason = refused.trim_start_matches("SERVER_ERROR ");
        for later in [
            format!(
                "SERVER_ERROR the request may or may not have been applied (an earlier try of it \
                 may have been): {reason}"
            ),
            format!("{refused}: the request may or may not have been applied"),
        ] {
            assert!(!refused_unavailable(&later), "{later}");
        }
        for other in [
            "SERVER_ERROR the lease of stripe 0 ran out during the write: it may or may not have \
             been applied",
            "SERVER_ERROR no agent of stripe 0 answers (views of the cluster disagree)",
            "SERVER_ERROR object too large for cache",
            "STORED",
        ] {
            assert!(!refused_unavailable(other), "{other}");
        }
    }

    #[test]
    fn a_read_of_a_value_older_than_an_acknowledged_one_is_stale() {
        let mut h = History {
            ops: vec![
                op("k", "set", "a", 0, 10, "STORED"),
                op("k", "set", "b", 20, 30, "STORED"),
                // Concurrent with set b: not stale.
                op("k", "get", "", 25, 35, "hit:a"),
                op("k", "get", "", 40, 50, "hit:b"),
            ],
        };
        assert_eq!(h.stale_reads(), 0);
        h.ops.push(op("k", "get", "", 40, 50, "hit:a"));
        assert_eq!(h.stale_reads(), 1);
        // Another key's writes do not make it stale.
        h.ops.push(op("j", "set", "x", 0, 5, "STORED"));
        h.ops.push(op("j", "set", "y", 6, 8, "STORED"));
        h.ops.push(op("j", "get", "", 7, 9, "hit:x"));
        assert_eq!(h.stale_reads(), 1);
        // An incr's result names its write too.
        h.ops.push(op("n", "incr", "", 0, 5, "7"));
        h.ops.push(op("n", "incr", "", 10, 15, "8"));
        h.ops.push(op("n", "get", "", 20, 25, "hit:7"));
        assert_eq!(h.stale_reads(), 2);
        // A write that changed nothing (a cas refused, a delete of nothing) makes no read stale.
        h.ops.push(op("m", "set", "p", 0, 5, "STORED"));
        h.ops.push(op("m", "cas", "q", 10, 15, "EXISTS"));
        h.ops
            .push(op("m", "incr", "", 10, 15, "CLIENT_ERROR cannot increment"));
        h.ops.push(op("m", "get", "", 20, 25, "hit:p"));
        assert_eq!(h.stale_reads(), 2);
        h.ops.push(op("m", "delete", "", 10, 15, "DELETED"));
        assert_eq!(h.stale_reads(), 3);
        // A write whose reply never came may have taken effect late: reading it is not stale.
        let mut late = op("u", "set", "z", 0, 5, "");
        late.outcome = Outcome::Unknown;
        h.ops.push(late);
        h.ops.push(op("u", "set", "y", 10, 15, "STORED"));
        h.ops.push(op("u", "get", "", 20, 25, "hit:z"));
        assert_eq!(h.stale_reads(), 3);
    }

    #[test]
    fn a_value_reads_back_as_its_name_and_anything_else_is_corrupt() {
        let body = value_body("c3n17", 100);
        assert_eq!(body.len(), 100);
        assert_eq!(read_value(&body, 100), "hit:c3n17");
        let mut bad = body.clone();
        bad[60] ^= 1;
        assert_eq!(read_value(&bad, 100), "corrupt");
        assert_eq!(read_value(&body[..99], 100), "corrupt");
        assert_eq!(read_value(b"1234", 100), "hit:1234");
        assert_eq!(read_value(b"", 100), "corrupt");
    }

    #[test]
    fn ops_round_trip_through_json_in_the_checker_s_format() {
        let o = op("k", "cas", "b", 1, 2, "STORED");
        let text = serde_json::to_string(&o).unwrap();
        assert_eq!(
            text,
            r#"{"client":0,"key":"k","op":"cas","value":"b","call":1,"ret":2,"outcome":"ok","out":"STORED"}"#
        );
        assert_eq!(serde_json::from_str::<Op>(&text).unwrap(), o);
    }
}
