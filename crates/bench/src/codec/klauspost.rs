//! klauspost/reedsolomon (Go), run as a subprocess: our program in `peers/klauspost/` is
//! built with `go build` and answers JSON requests on stdin/stdout, so that its rounds
//! alternate with the in-process libraries' in the same run.

use crate::{BenchError, Result};

const PEER: &str = "klauspost peer";
use serde::Deserialize;
use serde_json::json;
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::time::Duration;

/// Builds the program with `go` (incremental: fast when nothing changed). `Err` explains why
/// it cannot be built (e.g. no `go` on the PATH).
pub fn build(go: &str) -> Result<PathBuf> {
    crate::peers::go_build(
        go,
        "klauspost",
        "klauspost-peer",
        "klauspost/reedsolomon peer",
    )
}

/// An answer of the Go program (fields absent when not relevant).
#[derive(Debug, Default, Deserialize)]
pub struct Reply {
    #[serde(default)]
    pub error: Option<String>,
    #[serde(default)]
    pub version: Option<String>,
    #[serde(default)]
    pub kernel: Option<String>,
    #[serde(default)]
    pub parity: Vec<String>,
    #[serde(default)]
    pub parity_crc32c: Vec<u32>,
    #[serde(default)]
    pub verified: bool,
    #[serde(default)]
    pub ns: u64,
}

/// A running peer process.
#[derive(Debug)]
pub struct Peer {
    child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
    next_id: u64,
    /// The instruction-set level every prepared benchmark runs at ("native", "avx2",
    /// "avx512", "avx2-gfni", "avx512-gfni"; see `PeerIsa`).
    isa: &'static str,
    /// `wall` or `cpu`: what its rounds are timed by (see `Clock`).
    clock: &'static str,
}

impl Peer {
    /// Starts the built program with GOMAXPROCS=1 (each benchmark then sets it to its thread
    /// count).
    pub fn start(binary: &Path) -> Result<Peer> {
        let mut child = Command::new(binary)
            .env("GOMAXPROCS", "1")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .map_err(BenchError::io(format!("starting {}", binary.display())))?;
        let stdin = child.stdin.take().expect("piped stdin");
        let stdout = BufReader::new(child.stdout.take().expect("piped stdout"));
        Ok(Peer {
            child,
            stdin,
            stdout,
            next_id: 1,
            isa: "native",
            clock: "wall",
        })
    }

    /// Runs every benchmark prepared from now on at the instruction-set level `isa` (the
    /// program turns off the library's faster kernels through its options).
    pub fn set_isa(&mut self, isa: &'static str) {
        self.isa = isa;
    }

    /// Times rounds by `clock`: `wall`, or `cpu` (the CPU time of the thread running the
    /// calls, one thread only).
    pub fn set_clock(&mut self, clock: &'static str) {
        self.clock = clock;
    }

    fn request(&mut self, req: serde_json::Value) -> Result<Reply> {
        writeln!(self.stdin, "{req}")
            .and_then(|()| self.stdin.flush())
            .map_err(BenchError::io("writing to the klauspost peer"))?;
        let mut line = String::new();
        let got = self
            .stdout
            .read_line(&mut line)
            .map_err(BenchError::io("reading from the klauspost peer"))?;
        if got == 0 {
            return Err(BenchError::library(PEER, "it exited"));
        }
        let reply: Reply = serde_json::from_str(&line)
            .map_err(|e| BenchError::library(PEER, format!("bad reply {line:?}: {e}")))?;
        if let Some(e) = reply.error {
            return Err(BenchError::library(PEER, e));
        }
        Ok(reply)
    }

    /// The library version the program was built with.
    pub fn version(&mut self) -> Result<String> {
        self.request(json!({"cmd": "info"}))?
            .version
            .ok_or_else(|| BenchError::library(PEER, "no version"))
    }

    /// Full parity of one stripe: of the library's Cauchy matrix (ISA-L's), or of the m × k
    /// `parity_matrix` given (`WithCustomMatrix`). `fill`: "random" (the seeded stream of
    /// set 0) or "pattern" (byte b of data chunk j = 31·j + 7·b + 1 mod 256).
    pub fn parity(
        &mut self,
        k: usize,
        m: usize,
        chunk_bytes: usize,
        seed: u64,
        fill: &str,
        parity_matrix: Option<&[Vec<u8>]>,
    ) -> Result<Vec<Vec<u8>>> {
        let r = self.request(json!({"cmd": "parity", "k": k, "m": m,
            "chunk_bytes": chunk_bytes, "seed": seed, "fill": fill,
            "parity_matrix": parity_matrix}))?;
        r.parity
            .iter()
            .map(|h| decode_hex(h))
            .collect::<Option<Vec<_>>>()
            .ok_or_else(|| BenchError::library(PEER, "bad hex parity"))
    }

    /// Prepares a benchmark (with the library's Cauchy matrix, or the m × k `parity_matrix`
    /// given); the program verifies one call of it and reports the CRC32C of each parity chunk
    /// of set 0. Returns its id and the reply.
    #[allow(clippy::too_many_arguments)]
    pub fn prepare(
        &mut self,
        k: usize,
        m: usize,
        chunk_bytes: usize,
        sets: usize,
        seed: u64,
        op: &str,
        pattern: &str,
        threads: usize,
        parity_matrix: Option<&[Vec<u8>]>,
    ) -> Result<(u64, Reply)> {
        let id = self.next_id;
        self.next_id += 1;
        let r = self.request(json!({"cmd": "prepare", "id": id, "k": k, "m": m,
            "chunk_bytes": chunk_bytes, "sets": sets, "seed": seed, "op": op,
            "pattern": pattern, "threads": threads, "isa": self.isa,
            "parity_matrix": parity_matrix}))?;
        if !r.verified {
            return Err(BenchError::library(PEER, "it did not verify its output"));
        }
        Ok((id, r))
    }

    /// Times `iters` calls of a prepared benchmark (measured inside the program).
    pub fn run(&mut self, id: u64, iters: usize) -> Result<Duration> {
        let r =
            self.request(json!({"cmd": "run", "id": id, "iters": iters, "clock": self.clock}))?;
        Ok(Duration::from_nanos(r.ns))
    }

    /// Frees a prepared benchmark.
    pub fn drop_bench(&mut self, id: u64) -> Result<()> {
        self.request(json!({"cmd": "drop", "id": id})).map(|_| ())
    }
}

impl Drop for Peer {
    fn drop(&mut self) {
        // End the program (it holds no state worth a clean exit) and reap it.
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn decode_hex(s: &str) -> Option<Vec<u8>> {
    if !s.len().is_multiple_of(2) {
        return None;
    }
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(s.get(i..i + 2)?, 16).ok())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::decode_hex;

    #[test]
    fn hex_decodes() {
        assert_eq!(decode_hex("00ff10"), Some(vec![0, 255, 16]));
        assert_eq!(decode_hex("0"), None);
        assert_eq!(decode_hex("zz"), None);
    }
}
