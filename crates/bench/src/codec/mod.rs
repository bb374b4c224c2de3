//! `inec bench codec`: inec's codec side by side with ISA-L 2.31 (feature `isal`),
//! klauspost/reedsolomon v1.14 (Go, a subprocess), reed-solomon-simd, reed-solomon-erasure
//! and a plain XOR pass (the memory ceiling), in the same run, on the same data.
//!
//! Method, per cell (code × chunk size × hot/cold × threads × op × pattern):
//!
//! - Data: seeded splitmix64 ([`data::fill`]); the Go peer generates the same bytes.
//!   Libraries of one parity family share buffer sets ([`libs::Family`]): inec, ISA-L, the XOR
//!   pass (and, in its own process, klauspost) hold ISA-L Cauchy / Azure LRC parity;
//!   reed-solomon-erasure and reed-solomon-simd hold their own codes' parity.
//! - Layout: chunk i of a stripe lies `64 · i` bytes past a page boundary, on both sides of
//!   the Go peer's pipe ([`data::Chunk`]), so every library gets the same layout in every run.
//! - Hot: one buffer set. Cold: as many sets as make ≥ 2× the last-level cache (at least
//!   64 MiB), called in rotation.
//! - Threads: each call is split by byte range (multiples of 64 bytes); every thread makes the
//!   library call on its range and the call ends when all have finished.
//! - Verification before timing: each library's call runs once, exactly as timed, on set 0
//!   with its outputs clobbered, and must produce the expected bytes: for the Cauchy family the
//!   parity computed here with the gf reference kernel from the generator of docs/chunk-format.md ("The algebra of the parity chunks")
//!   (so inec, ISA-L and klauspost parity are all checked equal to it — klauspost by CRC32C
//!   of each parity chunk); decoded chunks must equal the original ones. The other two
//!   libraries' parity is checked by a decode round trip of their own.
//! - Timing: a calibration (also the warm-up) sizes each library's round to about
//!   `round_ms`; then `rounds` rounds, each running every library once, in an order rotated
//!   every round. Reported: the median round, in GB/s of data: k·chunk_bytes per call, for
//!   decodes too.
//! - Instruction-set level: inec's kernel is `--kernel` (or `INEC_KERNEL`, or the best);
//!   `--peer-isa` forces ISA-L (its per-level `ec_encode_data_*` entry points) and klauspost
//!   (its `With*` switches) to one level, so that kernels of one level compare on a CPU that
//!   has more. The table header and each row's `kernel` name what ran.
//! - Decode patterns: `decode1` loses data chunk 0, `decodem` data chunks 0..m (LRC: l+r data
//!   chunks spread over the groups, the largest such set that is recoverable). The chunks read
//!   are inec's repair set (klauspost and reed-solomon-* read the first k available, the same
//!   chunks for RS). `cached`: the decode matrix is prepared once (inec: the calculator `Codec::decoder`
//!   returns, taken from its LRU once and reused; ISA-L: tables kept; klauspost: its inversion
//!   cache, looked up on every call — it has no way to hold prepared tables); `fresh`: computed on every call (inec: no cache;
//!   ISA-L: `gf_invert_matrix` + `ec_init_tables` per call; klauspost:
//!   `WithInversionCache(false)`). reed-solomon-simd has no per-pattern state, so its two
//!   patterns run the same code; reed-solomon-erasure's cache cannot be bypassed, so it has no
//!   `fresh` figures.

pub mod data;
pub mod klauspost;
pub mod libs;
pub mod timing;

use crate::{BenchError, Result};
use clap::{Args, ValueEnum};
use codes::{Code, MatrixKind};
use data::Stripes;
use libs::{Family, Library};
use serde::Serialize;
use std::collections::BTreeMap;
use std::io::Write;
use std::path::PathBuf;
use std::time::Duration;

/// Options of `inec bench codec`.
#[derive(Args, Debug, Clone, Default)]
pub struct CodecArgs {
    /// CI smoke run: RS(6,3), (10,4), (12,4) at 4 KiB and 128 KiB, hot, one thread, every
    /// library, every op and pattern, short rounds.
    #[arg(long)]
    pub quick: bool,
    /// A code to run, rs:K,M or lrc:K,L,R (repeat the flag for several: `--code rs:6,3
    /// --code lrc:12,2,2`) [default: rs:3,2 rs:6,3 rs:10,4 rs:12,4 lrc:6,2,2 lrc:12,2,2].
    // `--codes "rs:6,3;lrc:12,2,2"` and `--codes rs:6,3 lrc:12,2,2`: the old spellings.
    #[arg(long = "code", alias = "codes", value_name = "CODE", num_args = 1..,
          value_delimiter = ';')]
    pub codes: Vec<Code>,
    /// A chunk size (repeat the flag for several), e.g. 4KiB [default: 1KiB·2^x, x = 0..14].
    // `--chunk-sizes 4K,1M`: the old spelling.
    #[arg(long = "chunk-bytes", alias = "chunk-sizes", value_name = "SIZE",
          value_delimiter = ',', value_parser = codes::size::parse_size)]
    pub chunk_bytes: Vec<usize>,
    /// Operations [default: all].
    #[arg(long, value_delimiter = ',')]
    pub ops: Vec<Op>,
    /// Decode patterns [default: fresh,cached].
    #[arg(long, value_delimiter = ',')]
    pub patterns: Vec<Pattern>,
    /// Cache states [default: hot,cold].
    #[arg(long, value_delimiter = ',')]
    pub cache: Vec<CacheState>,
    /// Thread counts [default: 1..=available cores].
    #[arg(long, value_delimiter = ',')]
    pub threads: Vec<usize>,
    /// Libraries [default: all that are available].
    #[arg(long, value_delimiter = ',')]
    pub libraries: Vec<LibraryName>,
    /// Force inec's kernel (a gf kernel name: reference, avx2, avx512, gfni, …); refused if
    /// the CPU lacks it.
    #[arg(long)]
    pub kernel: Option<String>,
    /// The instruction-set level of the peers that can be forced (ISA-L and
    /// klauspost/reedsolomon): `native` (their own choice), `avx2`, `avx512` (nibble tables,
    /// no GFNI), `avx2-gfni`, `avx512-gfni`; refused if the CPU lacks it [default: native].
    #[arg(long, value_enum, default_value_t = PeerIsa::Native)]
    pub peer_isa: PeerIsa,
    /// Timed rounds per library and cell (the median is reported) [default: 5].
    #[arg(long)]
    pub rounds: Option<usize>,
    /// Target length of one round of one library, in milliseconds [default: 50; quick: 20].
    #[arg(long)]
    pub round_ms: Option<u64>,
    /// Bytes of buffer sets for `cold` [default: max(64 MiB, 2 × last-level cache)].
    #[arg(long, value_name = "SIZE", value_parser = codes::size::parse_size)]
    pub cold_bytes: Option<usize>,
    /// Print one JSON object per line on stdout (the table then goes to stderr).
    #[arg(long)]
    pub json: bool,
    /// Write the JSON lines to this file.
    #[arg(long)]
    pub json_out: Option<PathBuf>,
    /// Seed of the data.
    #[arg(long, default_value_t = 0x1EC0_DEC5)]
    pub seed: u64,
    /// The Go toolchain used to build the klauspost/reedsolomon peer.
    #[arg(long, default_value = "go")]
    pub go: String,
    /// What a round is timed by: `wall` time, or the `cpu` time of the calling thread (one
    /// thread only; every library, the Go peer too), which leaves out the time the thread
    /// was preempted: for a machine shared with other work [default: wall].
    #[arg(long, value_enum, default_value_t = Clock::Wall)]
    pub clock: Clock,
}

/// What a round of `inec bench codec` is timed by.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, ValueEnum)]
pub enum Clock {
    /// Elapsed time.
    #[default]
    Wall,
    /// CPU time of the calling thread (`CLOCK_THREAD_CPUTIME_ID`), one thread only.
    Cpu,
}

impl Clock {
    pub fn name(self) -> &'static str {
        match self {
            Clock::Wall => "wall",
            Clock::Cpu => "cpu",
        }
    }
}

/// The kind of a code as the JSON rows name it (`rs`, `rs-xor`, `lrc`; as `Code` spells it).
fn code_kind(code: Code) -> &'static str {
    match code {
        Code::Rs {
            matrix: MatrixKind::Cauchy,
            ..
        } => "rs",
        Code::Rs {
            matrix: MatrixKind::CauchyXor,
            ..
        } => "rs-xor",
        Code::Rs {
            matrix: MatrixKind::Vandermonde,
            ..
        } => "rs-vand",
        Code::Lrc { .. } => "lrc",
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, ValueEnum)]
pub enum Op {
    Encode,
    Decode1,
    Decodem,
}

impl Op {
    fn name(self) -> &'static str {
        match self {
            Op::Encode => "encode",
            Op::Decode1 => "decode1",
            Op::Decodem => "decodem",
        }
    }
}

/// The instruction-set level the peers run at (`--peer-isa`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, ValueEnum)]
pub enum PeerIsa {
    #[default]
    Native,
    Avx2,
    Avx512,
    #[value(name = "avx2-gfni")]
    Avx2Gfni,
    #[value(name = "avx512-gfni")]
    Avx512Gfni,
}

impl PeerIsa {
    /// The name the Go peer takes.
    pub fn name(self) -> &'static str {
        match self {
            PeerIsa::Native => "native",
            PeerIsa::Avx2 => "avx2",
            PeerIsa::Avx512 => "avx512",
            PeerIsa::Avx2Gfni => "avx2-gfni",
            PeerIsa::Avx512Gfni => "avx512-gfni",
        }
    }

    #[cfg(feature = "isal")]
    fn isal(self) -> crate::isal::Isa {
        use crate::isal::Isa;
        match self {
            PeerIsa::Native => Isa::Native,
            PeerIsa::Avx2 => Isa::Avx2,
            PeerIsa::Avx512 => Isa::Avx512,
            PeerIsa::Avx2Gfni => Isa::Avx2Gfni,
            PeerIsa::Avx512Gfni => Isa::Avx512Gfni,
        }
    }

    /// The CPU feature the level needs and this CPU lacks, if any.
    fn missing_feature(self) -> Option<&'static str> {
        #[cfg(target_arch = "x86_64")]
        {
            use std::arch::is_x86_feature_detected as has;
            let avx512 = [
                ("avx512f", has!("avx512f")),
                ("avx512bw", has!("avx512bw")),
                ("avx512vl", has!("avx512vl")),
            ];
            let need: Vec<(&'static str, bool)> = match self {
                PeerIsa::Native => vec![],
                PeerIsa::Avx2 => vec![("avx2", has!("avx2"))],
                PeerIsa::Avx512 => avx512.to_vec(),
                PeerIsa::Avx2Gfni => vec![("avx2", has!("avx2")), ("gfni", has!("gfni"))],
                PeerIsa::Avx512Gfni => {
                    let mut v = avx512.to_vec();
                    v.push(("gfni", has!("gfni")));
                    v
                }
            };
            need.into_iter().find(|(_, ok)| !ok).map(|(f, _)| f)
        }
        #[cfg(not(target_arch = "x86_64"))]
        {
            (self != PeerIsa::Native).then_some("x86_64")
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, ValueEnum)]
pub enum Pattern {
    Fresh,
    Cached,
}

impl Pattern {
    fn name(self) -> &'static str {
        match self {
            Pattern::Fresh => "fresh",
            Pattern::Cached => "cached",
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, ValueEnum)]
pub enum CacheState {
    Hot,
    Cold,
}

impl CacheState {
    fn name(self) -> &'static str {
        match self {
            CacheState::Hot => "hot",
            CacheState::Cold => "cold",
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, ValueEnum)]
pub enum LibraryName {
    Inec,
    Isal,
    Klauspost,
    #[value(name = "reed-solomon-simd")]
    ReedSolomonSimd,
    #[value(name = "reed-solomon-erasure")]
    ReedSolomonErasure,
    #[value(name = "xor-roofline")]
    XorRoofline,
}

impl LibraryName {
    const ALL: [LibraryName; 6] = [
        LibraryName::Inec,
        LibraryName::Isal,
        LibraryName::Klauspost,
        LibraryName::ReedSolomonSimd,
        LibraryName::ReedSolomonErasure,
        LibraryName::XorRoofline,
    ];
    fn name(self) -> &'static str {
        match self {
            LibraryName::Inec => "inec",
            LibraryName::Isal => "isal",
            LibraryName::Klauspost => "klauspost",
            LibraryName::ReedSolomonSimd => "reed-solomon-simd",
            LibraryName::ReedSolomonErasure => "reed-solomon-erasure",
            LibraryName::XorRoofline => "xor-roofline",
        }
    }
    /// Short column title of the table.
    fn column(self) -> &'static str {
        match self {
            LibraryName::Inec => "inec",
            LibraryName::Isal => "isal",
            LibraryName::Klauspost => "klauspost",
            LibraryName::ReedSolomonSimd => "rs-simd",
            LibraryName::ReedSolomonErasure => "rs-erasure",
            LibraryName::XorRoofline => "xor-roofline",
        }
    }
}

fn size_label(bytes: usize) -> String {
    codes::size::format_bytes(bytes as u64)
}

/// One benchmark cell, as every library runs it.
#[derive(Debug, Clone)]
pub struct Cell {
    pub code: Code,
    pub chunk_bytes: usize,
    pub op: Op,
    pub pattern: Pattern,
    pub cache: CacheState,
    pub threads: usize,
    /// Chunks the call reads, in the order given to the library.
    pub inputs: Vec<usize>,
    /// Chunks the call writes (encode: the parity; decode: the lost chunks).
    pub outputs: Vec<usize>,
}

/// The resolved settings of a run (`inec bench codec`'s flags with their defaults).
#[derive(Debug, Clone)]
struct Settings {
    codes: Vec<Code>,
    sizes: Vec<usize>,
    ops: Vec<(Op, Pattern)>,
    caches: Vec<CacheState>,
    threads: Vec<usize>,
    libraries: Vec<LibraryName>,
    /// Libraries named by the user (an unavailable one is then an error, not a skip).
    explicit_libraries: bool,
    rounds: usize,
    round: Duration,
    cold_bytes: usize,
    seed: u64,
    kernel: gf::Kernel,
    peer_isa: PeerIsa,
    go: String,
    clock: Clock,
}

fn resolve(a: &CodecArgs) -> Result<Settings> {
    let kernel = match &a.kernel {
        Some(name) => gf::Kernel::try_from_name(name)?,
        None => gf::try_kernel()?,
    };
    if let Some(f) = a.peer_isa.missing_feature() {
        return Err(BenchError::Settings(format!(
            "--peer-isa {}: this CPU lacks {f}",
            a.peer_isa.name()
        )));
    }
    let or = |v: &[Code], d: &[&str]| -> Vec<Code> {
        if v.is_empty() {
            d.iter()
                .map(|s| s.parse().expect("valid default"))
                .collect()
        } else {
            v.to_vec()
        }
    };
    let codes = if a.quick {
        or(&a.codes, &["rs:6,3", "rs:10,4", "rs:12,4"])
    } else {
        or(
            &a.codes,
            &[
                "rs:3,2",
                "rs:6,3",
                "rs:10,4",
                "rs:12,4",
                "lrc:6,2,2",
                "lrc:12,2,2",
            ],
        )
    };
    if let Some(c) = codes.iter().find(|c| {
        matches!(
            c,
            Code::Rs {
                matrix: MatrixKind::Vandermonde,
                ..
            }
        )
    }) {
        return Err(BenchError::Settings(format!(
            "{c}: the codec benchmark compares RS with ISA-L's Cauchy matrix (rs:K,M) or that \
             matrix with an XOR first parity (rs-xor:K,M) and Azure LRC (lrc:K,L,R); the \
             Vandermonde matrix is not benchmarked"
        )));
    }
    let sizes = match (a.chunk_bytes.is_empty(), a.quick) {
        (false, _) => a.chunk_bytes.clone(),
        (true, true) => vec![4 << 10, 128 << 10],
        (true, false) => (0..15).map(|x| 1024 << x).collect(),
    };
    let op_list = if a.ops.is_empty() {
        vec![Op::Encode, Op::Decode1, Op::Decodem]
    } else {
        a.ops.clone()
    };
    let patterns = if a.patterns.is_empty() {
        vec![Pattern::Fresh, Pattern::Cached]
    } else {
        a.patterns.clone()
    };
    let mut ops = Vec::new();
    for &op in &op_list {
        if op == Op::Encode {
            // The encode matrix is prepared once: report it as `cached`.
            ops.push((op, Pattern::Cached));
        } else {
            ops.extend(patterns.iter().map(|&p| (op, p)));
        }
    }
    let caches = match (a.cache.is_empty(), a.quick) {
        (false, _) => a.cache.clone(),
        (true, true) => vec![CacheState::Hot],
        (true, false) => vec![CacheState::Hot, CacheState::Cold],
    };
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let threads = match (a.threads.is_empty(), a.quick) {
        (false, _) => a.threads.clone(),
        (true, true) => vec![1],
        (true, false) => (1..=cores).collect(),
    };
    if threads.iter().any(|&t| t == 0 || t > 64) {
        return Err(BenchError::Settings(
            "--threads: each count must be in 1..=64".into(),
        ));
    }
    let explicit_libraries = !a.libraries.is_empty();
    let mut libraries = if explicit_libraries {
        a.libraries.clone()
    } else {
        LibraryName::ALL.to_vec()
    };
    libraries.sort();
    libraries.dedup();
    if !cfg!(feature = "isal") && libraries.contains(&LibraryName::Isal) {
        if explicit_libraries {
            return Err(BenchError::Settings(
                "isal: this binary was built without the `isal` feature".into(),
            ));
        }
        libraries.retain(|&l| l != LibraryName::Isal);
    }
    if a.clock == Clock::Cpu {
        if threads.iter().any(|&t| t != 1) {
            return Err(BenchError::Settings(
                "--clock cpu: times one thread; run it with --threads 1".into(),
            ));
        }
        if timing::thread_cpu_time().is_none() {
            return Err(BenchError::Settings(
                "--clock cpu: this system does not report a thread's CPU time \
                 (CLOCK_THREAD_CPUTIME_ID)"
                    .into(),
            ));
        }
    }
    let rounds = a.rounds.unwrap_or(5).max(1);
    let round_ms = a.round_ms.unwrap_or(if a.quick { 20 } else { 50 }).max(1);
    let cold_bytes = a
        .cold_bytes
        .unwrap_or_else(|| (64 << 20).max(2 * last_level_cache_bytes().unwrap_or(0)));
    Ok(Settings {
        codes,
        sizes,
        ops,
        caches,
        threads,
        libraries,
        explicit_libraries,
        rounds,
        round: Duration::from_millis(round_ms),
        cold_bytes,
        seed: a.seed,
        kernel,
        peer_isa: a.peer_isa,
        go: a.go.clone(),
        clock: a.clock,
    })
}

/// Size of the largest CPU cache, from sysfs.
fn last_level_cache_bytes() -> Option<usize> {
    let dir = std::fs::read_dir("/sys/devices/system/cpu/cpu0/cache").ok()?;
    dir.filter_map(|e| {
        let s = std::fs::read_to_string(e.ok()?.path().join("size")).ok()?;
        codes::size::parse_size(s.trim()).ok()
    })
    .max()
}

/// One line of the results.
#[derive(Debug, Clone, Serialize)]
pub struct Row {
    pub library: String,
    pub kernel: String,
    pub code: &'static str,
    pub k: usize,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub m: Option<usize>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub l: Option<usize>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub r: Option<usize>,
    pub chunk_bytes: usize,
    pub op: &'static str,
    pub pattern: &'static str,
    pub cache: &'static str,
    pub threads: usize,
    /// Median over rounds, GB/s (10^9 bytes) of data: k·chunk_bytes per call.
    pub gbps: f64,
    pub gbps_min: f64,
    pub gbps_max: f64,
    pub rounds: usize,
    pub calls_per_round: usize,
    /// Buffer sets called in rotation.
    pub sets: usize,
    /// Chunks read and written by one call.
    pub read: Vec<usize>,
    pub written: Vec<usize>,
    /// inec's GB/s over this library's, same cell.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub inec_ratio: Option<f64>,
    /// On inec's rows: inec's GB/s over each other library's.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub ratios: BTreeMap<String, f64>,
    pub cpu: String,
}

/// Where results go.
struct Output<'w> {
    json: Option<&'w mut dyn Write>,
    table: &'w mut dyn Write,
    /// Cells done, on standard error when it is a terminal.
    bar: indicatif::ProgressBar,
    columns: Vec<LibraryName>,
    rows: Vec<Row>,
    errors: Vec<String>,
}

impl Output<'_> {
    fn header(&mut self) -> Result<()> {
        write!(
            self.table,
            "{:<12} {:>7} {:<8} {:<7} {:<5} {:>3}",
            "code", "chunk", "op", "pattern", "cache", "thr"
        )?;
        for c in &self.columns {
            write!(self.table, " {:>17}", c.column())?;
        }
        writeln!(self.table)?;
        Ok(())
    }

    fn cell(&mut self, cell: &Cell, rows: Vec<Row>, failed: &BTreeMap<&str, String>) -> Result<()> {
        let bar = self.bar.clone();
        bar.suspend(|| self.write_cell(cell, rows, failed))?;
        bar.inc(1);
        Ok(())
    }

    fn write_cell(
        &mut self,
        cell: &Cell,
        rows: Vec<Row>,
        failed: &BTreeMap<&str, String>,
    ) -> Result<()> {
        write!(
            self.table,
            "{:<12} {:>7} {:<8} {:<7} {:<5} {:>3}",
            cell.code.to_string(),
            size_label(cell.chunk_bytes),
            cell.op.name(),
            cell.pattern.name(),
            cell.cache.name(),
            cell.threads
        )?;
        for c in &self.columns {
            let text = match rows.iter().find(|r| r.library == c.name()) {
                Some(r) if r.library == "inec" => format!("{:.2}", r.gbps),
                Some(r) => match r.inec_ratio {
                    Some(x) => format!("{:.2} ({:.2}x)", r.gbps, x),
                    None => format!("{:.2}", r.gbps),
                },
                None if failed.contains_key(c.name()) => "FAILED".to_string(),
                None => "-".to_string(),
            };
            write!(self.table, " {text:>17}")?;
        }
        writeln!(self.table)?;
        self.table.flush()?;
        if let Some(j) = self.json.as_mut() {
            for r in &rows {
                writeln!(j, "{}", serde_json::to_string(r)?)?;
            }
            j.flush()?;
        }
        for (lib, e) in failed {
            self.errors.push(format!(
                "{cell_label}: {lib}: {e}",
                cell_label = cell_label(cell)
            ));
        }
        self.rows.extend(rows);
        Ok(())
    }
}

fn cell_label(c: &Cell) -> String {
    format!(
        "{} {} {} {} {} threads={}",
        c.code,
        size_label(c.chunk_bytes),
        c.op.name(),
        c.pattern.name(),
        c.cache.name(),
        c.threads
    )
}

/// Runs `inec bench codec`: the table on stdout (stderr with `--json`), JSON lines on stdout
/// with `--json` and/or to `--json-out`.
pub fn run(a: CodecArgs) -> Result<()> {
    let stderr = std::io::stderr();
    let mut file = match &a.json_out {
        Some(p) => Some(std::io::BufWriter::new(
            std::fs::File::create(p)
                .map_err(BenchError::io(format!("creating {}", p.display())))?,
        )),
        None => None,
    };
    // With both --json and --json-out, the lines go to both.
    let mut tee;
    let mut out_lock = crate::stdout::Stdout::lock();
    let mut err_lock = stderr.lock();
    let (json, table): (Option<&mut dyn Write>, &mut dyn Write) = match (a.json, file.as_mut()) {
        (true, Some(f)) => {
            tee = Tee(&mut out_lock, f);
            (Some(&mut tee), &mut err_lock)
        }
        (true, None) => (Some(&mut out_lock), &mut err_lock),
        (false, Some(f)) => (Some(f), &mut out_lock),
        (false, None) => (None, &mut out_lock),
    };
    execute(&a, json, table).map(|_| ())
}

struct Tee<'a>(&'a mut dyn Write, &'a mut dyn Write);

impl Write for Tee<'_> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.write_all(buf)?;
        self.1.write_all(buf)?;
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        self.0.flush()?;
        self.1.flush()
    }
}

/// Runs the benchmark: JSON lines to `json`, the table to `table`. Returns the rows, or an
/// error (after all cells ran) if any library failed its verification.
pub fn execute<'w>(
    a: &CodecArgs,
    json: Option<&'w mut dyn Write>,
    table: &'w mut dyn Write,
) -> Result<Vec<Row>> {
    let settings = resolve(a)?;
    let cpu = crate::host::cpu_model();
    let mut peer = None;
    let mut libraries = settings.libraries.clone();
    if libraries.contains(&LibraryName::Klauspost) {
        match klauspost::build(&settings.go).and_then(|bin| klauspost::Peer::start(&bin)) {
            Ok(mut p) => {
                p.set_isa(settings.peer_isa.name());
                p.set_clock(settings.clock.name());
                let v = p.version()?;
                writeln!(table, "# klauspost/reedsolomon {v} (Go peer, subprocess)")?;
                peer = Some(p);
            }
            Err(e) if !settings.explicit_libraries => {
                writeln!(table, "# klauspost/reedsolomon skipped: {e:#}")?;
                libraries.retain(|&l| l != LibraryName::Klauspost);
            }
            Err(e) => return Err(e),
        }
    }
    writeln!(table, "# cpu: {cpu}")?;
    writeln!(
        table,
        "# inec kernel: {}; GB/s of data (k·chunk_bytes per call, decodes too), median of {} \
         rounds of ~{} ms; (x) = inec / that library",
        settings.kernel.name(),
        settings.rounds,
        settings.round.as_millis()
    )?;
    #[cfg(feature = "isal")]
    writeln!(
        table,
        "# isal 2.31 kernel: {}",
        settings.peer_isa.isal().kernel_name()
    )?;
    writeln!(table, "# peers' ISA level: {}", settings.peer_isa.name())?;
    if settings.clock == Clock::Cpu {
        writeln!(
            table,
            "# clock: cpu (each round timed by the calling thread's CPU time, every library)"
        )?;
    }
    let cells = settings.codes.len()
        * settings.sizes.len()
        * settings.caches.len()
        * settings.threads.len()
        * settings.ops.len();
    let mut out = Output {
        json,
        table,
        bar: harness::progress::bar(cells as u64, "bench codec: cells", false),
        columns: libraries.clone(),
        rows: Vec::new(),
        errors: Vec::new(),
    };
    out.header()?;
    for &code in &settings.codes {
        run_code(&settings, &libraries, code, peer.as_mut(), &cpu, &mut out)?;
    }
    out.bar.finish_and_clear();
    if !out.errors.is_empty() {
        for e in &out.errors {
            writeln!(out.table, "verification failed: {e}")?;
        }
        return Err(BenchError::Verification {
            count: out.errors.len(),
        });
    }
    Ok(out.rows)
}

/// The chunks a decode loses.
fn lost_chunks(code: Code, op: Op, codec: &codes::Codec) -> Result<Vec<usize>> {
    Ok(match (op, code) {
        (Op::Encode, _) => Vec::new(),
        (Op::Decode1, _) => vec![0],
        (Op::Decodem, Code::Rs { k, m, .. }) => (0..m.min(k)).collect(),
        (Op::Decodem, Code::Lrc { k, l, r }) => {
            // l + r data chunks, spread over the groups; drop the last until recoverable.
            let group = k / l;
            let mut per_group = vec![0; l];
            let mut lost = Vec::new();
            for t in 0..l + r {
                let g = t % l;
                if per_group[g] < group {
                    lost.push(g * group + per_group[g]);
                    per_group[g] += 1;
                }
            }
            while !lost.is_empty() && !codec.is_recoverable(&lost) {
                lost.pop();
            }
            lost.sort_unstable();
            lost
        }
    })
}

fn make_cell(
    code: Code,
    chunk_bytes: usize,
    (op, pattern): (Op, Pattern),
    cache: CacheState,
    threads: usize,
    codec: &codes::Codec,
) -> Result<Cell> {
    let (k, n) = (code.k(), code.n());
    let (inputs, outputs) = if op == Op::Encode {
        ((0..k).collect(), (k..n).collect())
    } else {
        let lost = lost_chunks(code, op, codec)?;
        let available: Vec<usize> = (0..n).filter(|i| !lost.contains(i)).collect();
        (codec.repair_set(&available, &lost)?, lost)
    };
    Ok(Cell {
        code,
        chunk_bytes,
        op,
        pattern,
        cache,
        threads,
        inputs,
        outputs,
    })
}

/// The Cauchy family's buffer sets: data, parity encoded by inec (fast) and set 0's parity
/// computed with the gf reference kernel from [`libs::reference_generator`]; set 0 is then
/// the reference. Returns the sets and whether inec's parity equalled the reference.
fn cauchy_stripes(
    code: Code,
    chunk_bytes: usize,
    set_count: usize,
    seed: u64,
    inec: &libs::Inec,
) -> Result<(Stripes, bool)> {
    let (k, n) = (code.k(), code.n());
    let mut st = Stripes::new(seed, k, n, chunk_bytes, set_count);
    let g = libs::reference_generator(code);
    let parity_rows = gf::Matrix::new(n - k, k, &g[k * k..]);
    let mut inec_ok = true;
    for (s, set) in st.sets.iter_mut().enumerate() {
        let (data, rest) = set.split_at_mut(k);
        let ins: Vec<&[u8]> = data.iter().map(|d| &d[..]).collect();
        let mut outs: Vec<&mut [u8]> = rest[..n - k].iter_mut().map(|p| &mut p[..]).collect();
        let encoded = inec.codec().encode(&ins, &mut outs).is_ok();
        if s == 0 || !encoded {
            let mut want = vec![vec![0u8; chunk_bytes]; n - k];
            let mut w: Vec<&mut [u8]> = want.iter_mut().map(|p| &mut p[..]).collect();
            gf::Kernel::reference().dot_prod(&parity_rows, &ins, &mut w);
            if !encoded || outs.iter().zip(&want).any(|(o, w)| o[..] != w[..]) {
                inec_ok = false;
            }
            for (o, w) in outs.iter_mut().zip(&want) {
                o.copy_from_slice(w);
            }
        }
    }
    st.snapshot();
    Ok((st, inec_ok))
}

/// Buffer sets of a library with its own code, with its round trip checked on set 0.
fn own_stripes(
    code: Code,
    chunk_bytes: usize,
    set_count: usize,
    seed: u64,
    encode: impl Fn(&mut [data::Chunk]) -> Result<()>,
    reconstruct: impl Fn(&mut [data::Chunk], &[usize]) -> Result<()>,
) -> Result<Stripes> {
    let (k, n) = (code.k(), code.n());
    let mut st = Stripes::new(seed, k, n, chunk_bytes, set_count);
    for set in &mut st.sets {
        encode(set)?;
    }
    let mut copy = st.sets[0].clone();
    let lost: Vec<usize> = (0..code.parity_count().min(k)).collect();
    for &i in &lost {
        copy[i].fill(0x5A);
    }
    reconstruct(&mut copy, &lost)?;
    if copy[..k] != st.sets[0][..k] {
        return Err(BenchError::Check(
            "its decode round trip did not give the data back".into(),
        ));
    }
    st.snapshot();
    Ok(st)
}

fn run_code(
    settings: &Settings,
    libraries: &[LibraryName],
    code: Code,
    mut peer: Option<&mut klauspost::Peer>,
    cpu: &str,
    out: &mut Output<'_>,
) -> Result<()> {
    let has = |l: LibraryName| libraries.contains(&l);
    let inec = libs::Inec::new(code, settings.kernel)?;
    #[cfg(feature = "isal")]
    let isal = libs::Isal::new(code, settings.peer_isa.isal());
    let erasure = libs::Erasure::new(code).ok();
    let simd = libs::Simd::new(code).ok();
    let xor = libs::XorRoofline::new(settings.kernel);
    let mut in_process: Vec<(LibraryName, &dyn Library)> = Vec::new();
    if has(LibraryName::Inec) {
        in_process.push((LibraryName::Inec, &inec));
    }
    #[cfg(feature = "isal")]
    if has(LibraryName::Isal) {
        in_process.push((LibraryName::Isal, &isal));
    }
    if let (true, Some(e)) = (has(LibraryName::ReedSolomonErasure), erasure.as_ref()) {
        in_process.push((LibraryName::ReedSolomonErasure, e));
    }
    if let (true, Some(s)) = (has(LibraryName::ReedSolomonSimd), simd.as_ref()) {
        in_process.push((LibraryName::ReedSolomonSimd, s));
    }
    if has(LibraryName::XorRoofline) {
        in_process.push((LibraryName::XorRoofline, &xor));
    }
    let use_peer = has(LibraryName::Klauspost) && matches!(code, Code::Rs { .. });
    let n = code.n();
    for &chunk_bytes in &settings.sizes {
        for &cache in &settings.caches {
            let set_count = match cache {
                CacheState::Hot => 1,
                CacheState::Cold => settings.cold_bytes.div_ceil((n + 1) * chunk_bytes).max(1),
            };
            // Buffer sets per family, and libraries whose family could not be set up.
            let mut families: BTreeMap<Family, Stripes> = BTreeMap::new();
            let mut broken: BTreeMap<&str, String> = BTreeMap::new();
            let (st, inec_ok) = cauchy_stripes(code, chunk_bytes, set_count, settings.seed, &inec)?;
            if !inec_ok {
                broken.insert("inec", "encode parity differs from the reference".into());
            }
            families.insert(Family::Cauchy, st);
            for &(name, lib) in &in_process {
                let fam = lib.family();
                if families.contains_key(&fam) {
                    continue;
                }
                let made = match (fam, erasure.as_ref(), simd.as_ref()) {
                    (Family::Erasure, Some(e), _) => own_stripes(
                        code,
                        chunk_bytes,
                        set_count,
                        settings.seed,
                        |s| e.encode(s),
                        |s, l| e.reconstruct(s, l),
                    ),
                    (Family::Simd, _, Some(x)) => own_stripes(
                        code,
                        chunk_bytes,
                        set_count,
                        settings.seed,
                        |s| x.encode(s),
                        |s, l| x.reconstruct(s, l),
                    ),
                    _ => Err(BenchError::Check(format!("no buffer sets for {fam:?}"))),
                };
                match made {
                    Ok(st) => {
                        families.insert(fam, st);
                    }
                    Err(e) => {
                        broken.insert(name.name(), format!("{e:#}"));
                    }
                }
            }
            for &threads in &settings.threads {
                for &op in &settings.ops {
                    let cell = make_cell(code, chunk_bytes, op, cache, threads, inec.codec())?;
                    let entrants: Vec<(LibraryName, &dyn Library)> = in_process
                        .iter()
                        .copied()
                        .filter(|(name, lib)| {
                            lib.supports(&cell).is_ok() && !broken.contains_key(name.name())
                        })
                        .collect();
                    let rows = run_cell(
                        settings,
                        &cell,
                        &entrants,
                        if use_peer { peer.as_deref_mut() } else { None },
                        &mut families,
                        cpu,
                    )?;
                    let mut failed = rows.1;
                    for (name, e) in &broken {
                        failed.insert(name, e.clone());
                    }
                    out.cell(&cell, rows.0, &failed)?;
                }
            }
        }
    }
    Ok(())
}

/// What runs in a cell: an in-process library or the Go peer's prepared benchmark.
enum Entrant<'l> {
    Lib(LibraryName, &'l dyn Library),
    Peer(u64),
}

impl Entrant<'_> {
    fn name(&self) -> &'static str {
        match self {
            Entrant::Lib(n, _) => n.name(),
            Entrant::Peer(..) => LibraryName::Klauspost.name(),
        }
    }
}

/// Checks one call of `lib`, made exactly as it will be timed, on set 0.
fn verify(lib: &dyn Library, cell: &Cell, st: &mut Stripes) -> Result<()> {
    let xor = lib.name() == LibraryName::XorRoofline.name();
    let outputs = if xor {
        vec![cell.code.n()]
    } else {
        cell.outputs.clone()
    };
    for &o in &outputs {
        st.sets[0][o].fill(0xA5);
    }
    let ran = {
        let views = st.thread_views(cell.threads);
        std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| -> Result<()> {
            let mut parts = views
                .into_iter()
                .map(|v| lib.bind(cell, v))
                .collect::<Result<Vec<_>>>()?;
            timing::run(&mut parts, 1, 1, false);
            Ok(())
        }))
        .map_err(|_| BenchError::Check("it panicked".into()))
        .and_then(|r| r)
    };
    let checked = ran.and_then(|()| {
        for &o in &outputs {
            let want: Vec<u8> = if xor {
                let mut acc = vec![0u8; cell.chunk_bytes];
                for &i in &cell.inputs {
                    acc.iter_mut()
                        .zip(st.sets[0][i].iter())
                        .for_each(|(a, b)| *a ^= b);
                }
                acc
            } else {
                st.expected[o].to_vec()
            };
            if st.sets[0][o][..] != want[..] {
                return Err(BenchError::Check(format!(
                    "chunk {o} differs from the expected bytes"
                )));
            }
        }
        Ok(())
    });
    st.restore();
    checked
}

fn time_lib(
    lib: &dyn Library,
    cell: &Cell,
    st: &mut Stripes,
    iters: usize,
    clock: Clock,
) -> Result<Duration> {
    let set_count = st.sets.len();
    let views = st.thread_views(cell.threads);
    let mut parts = views
        .into_iter()
        .map(|v| lib.bind(cell, v))
        .collect::<Result<Vec<_>>>()?;
    Ok(timing::run(
        &mut parts,
        iters,
        set_count,
        clock == Clock::Cpu,
    ))
}

/// Sizes a round to about `round` (the runs doing so are the warm-up).
fn calibrate(round: Duration, mut time: impl FnMut(usize) -> Result<Duration>) -> Result<usize> {
    let target = round / 4;
    let mut iters = 1usize;
    loop {
        let d = time(iters)?;
        if d >= target || iters >= 1 << 32 {
            let per_call = d.as_secs_f64().max(1e-9) / iters as f64;
            return Ok(((round.as_secs_f64() / per_call) as usize).max(1));
        }
        let scale = if d.is_zero() {
            16.0
        } else {
            (target.as_secs_f64() / d.as_secs_f64() * 1.2).clamp(2.0, 64.0)
        };
        iters = (iters as f64 * scale).ceil() as usize;
    }
}

type CellRows<'a> = (Vec<Row>, BTreeMap<&'a str, String>);

fn run_cell<'a>(
    settings: &Settings,
    cell: &Cell,
    libs: &[(LibraryName, &'a dyn Library)],
    mut peer: Option<&mut klauspost::Peer>,
    families: &mut BTreeMap<Family, Stripes>,
    cpu: &str,
) -> Result<CellRows<'a>> {
    let code = cell.code;
    let (k, m) = (code.k(), code.parity_count());
    let mut failed: BTreeMap<&str, String> = BTreeMap::new();
    let mut entrants: Vec<(Entrant<'a>, String)> = Vec::new();
    let set_count = families[&Family::Cauchy].sets.len();
    for &(name, lib) in libs {
        let st = families
            .get_mut(&lib.family())
            .expect("the family's buffer sets exist");
        match verify(lib, cell, st) {
            Ok(()) => entrants.push((Entrant::Lib(name, lib), lib.kernel(cell))),
            Err(e) => {
                failed.insert(name.name(), format!("{e:#}"));
            }
        }
    }
    let mut peer_id = None;
    if let Some(p) = peer.as_deref_mut() {
        // `rs-xor` through `WithCustomMatrix` with the reference rows; `rs` through the
        // library's own Cauchy matrix (checked against ours below).
        let custom: Option<Vec<Vec<u8>>> = match code {
            Code::Rs {
                matrix: MatrixKind::CauchyXor,
                ..
            } => Some(
                libs::reference_generator(code)[k * k..]
                    .chunks(k)
                    .map(|r| r.to_vec())
                    .collect(),
            ),
            _ => None,
        };
        let prepared = p.prepare(
            k,
            m,
            cell.chunk_bytes,
            set_count,
            settings.seed,
            cell.op.name(),
            cell.pattern.name(),
            cell.threads,
            custom.as_deref(),
        );
        match prepared {
            Ok((id, reply)) => {
                peer_id = Some(id);
                let want: Vec<u32> = families[&Family::Cauchy].expected[k..]
                    .iter()
                    .map(|c| crc32c::crc32c(c))
                    .collect();
                if reply.parity_crc32c != want {
                    failed.insert(
                        "klauspost",
                        "its parity differs from the reference parity".into(),
                    );
                } else {
                    let kernel = reply.kernel.unwrap_or_default();
                    entrants.push((Entrant::Peer(id), kernel));
                }
            }
            Err(e) => {
                failed.insert("klauspost", format!("{e:#}"));
            }
        }
    }
    let mut time = |e: &Entrant<'_>, iters: usize| -> Result<Duration> {
        match e {
            Entrant::Lib(_, lib) => {
                let st = families.get_mut(&lib.family()).expect("family exists");
                time_lib(*lib, cell, st, iters, settings.clock)
            }
            Entrant::Peer(id) => peer
                .as_deref_mut()
                .expect("a peer entrant has a peer")
                .run(*id, iters),
        }
    };
    let mut iters = Vec::with_capacity(entrants.len());
    for (e, _) in &entrants {
        iters.push(calibrate(settings.round, |n| time(e, n))?);
    }
    let data_bytes = (k * cell.chunk_bytes) as f64;
    let mut gbps = vec![Vec::with_capacity(settings.rounds); entrants.len()];
    for round in 0..settings.rounds {
        for j in 0..entrants.len() {
            let i = (round + j) % entrants.len();
            let d = time(&entrants[i].0, iters[i])?;
            gbps[i].push(iters[i] as f64 * data_bytes / d.as_secs_f64().max(1e-12) / 1e9);
        }
    }
    if let (Some(id), Some(p)) = (peer_id, peer) {
        p.drop_bench(id)?;
    }
    let mut rows: Vec<Row> = entrants
        .iter()
        .enumerate()
        .map(|(i, (e, kernel))| {
            let g = &gbps[i];
            Row {
                library: e.name().to_string(),
                kernel: kernel.clone(),
                code: code_kind(code),
                k,
                m: matches!(code, Code::Rs { .. }).then_some(m),
                l: match code {
                    Code::Lrc { l, .. } => Some(l),
                    Code::Rs { .. } => None,
                },
                r: match code {
                    Code::Lrc { r, .. } => Some(r),
                    Code::Rs { .. } => None,
                },
                chunk_bytes: cell.chunk_bytes,
                op: cell.op.name(),
                pattern: cell.pattern.name(),
                cache: cell.cache.name(),
                threads: cell.threads,
                gbps: crate::stats::median(g),
                gbps_min: g.iter().copied().fold(f64::INFINITY, f64::min),
                gbps_max: g.iter().copied().fold(0.0, f64::max),
                rounds: settings.rounds,
                calls_per_round: iters[i],
                sets: set_count,
                read: cell.inputs.clone(),
                written: cell.outputs.clone(),
                inec_ratio: None,
                ratios: BTreeMap::new(),
                cpu: cpu.to_string(),
            }
        })
        .collect();
    if let Some(inec) = rows.iter().find(|r| r.library == "inec").map(|r| r.gbps) {
        let mut ratios = BTreeMap::new();
        for r in rows.iter_mut().filter(|r| r.library != "inec") {
            let x = inec / r.gbps;
            r.inec_ratio = Some(x);
            ratios.insert(r.library.clone(), x);
        }
        if let Some(r) = rows.iter_mut().find(|r| r.library == "inec") {
            r.ratios = ratios;
        }
    }
    Ok((rows, failed))
}
