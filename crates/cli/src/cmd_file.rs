//! `inec encode`, `inec decode`, `inec verify`: the flags and the messages around the
//! `file` crate, which does the work (streaming over `Read`/`Write`, atomic outputs).

use std::fs::{self, OpenOptions};
use std::io::BufWriter;
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use clap::{Args, ValueEnum};
use codes::{Code, MatrixKind};
use file::chunk_file::{chunk_file_name, parse_chunk_file_name};
use file::{ChunkDir, ChunkState, DecodeMode, DecodeReport, FileError, Status};

use crate::args;

/// Record overhead (crc32c bytes per payload byte) above which encode warns.
const OVERHEAD_WARN: f64 = 0.03;

/// Generator matrix of an RS code (the hidden `--matrix` of older builds).
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum MatrixArg {
    Cauchy,
    Vandermonde,
}

/// LRC parameters as older builds took them (`--lrc K,L,R`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LrcParams {
    k: usize,
    l: usize,
    r: usize,
}

#[derive(Args, Debug)]
pub struct EncodeArgs {
    /// The file to encode.
    pub file: PathBuf,
    /// Directory for the chunk files (created if missing).
    #[arg(short, long, value_name = "DIR")]
    pub output: PathBuf,
    /// The code: rs:K,M (Reed-Solomon, ISA-L's Cauchy matrix), rs-xor:K,M (that matrix scaled
    /// so that the first parity is the XOR of the data: faster encode and one-chunk repair),
    /// rs-vand:K,M (ISA-L's Vandermonde matrix, refused where it is not MDS) or lrc:K,L,R
    /// (Azure LRC: K data chunks in L local groups, R global parities).
    #[arg(long, value_name = "CODE", value_parser = args::code,
          conflicts_with_all = ["k", "m", "lrc", "matrix"])]
    pub code: Option<Code>,
    /// Old spelling of `--code rs:K,M`.
    #[arg(long, hide = true, requires = "m", conflicts_with = "lrc")]
    pub k: Option<usize>,
    /// Old spelling of `--code rs:K,M`.
    #[arg(long, hide = true, requires = "k")]
    pub m: Option<usize>,
    /// Old spelling of `--code lrc:K,L,R`.
    #[arg(long, hide = true, value_name = "K,L,R", value_parser = parse_lrc)]
    pub lrc: Option<LrcParams>,
    /// Old spelling of `--code rs-vand:K,M` (with `--matrix vandermonde`).
    #[arg(long, hide = true, value_enum, conflicts_with = "lrc")]
    pub matrix: Option<MatrixArg>,
    /// Chunk size of a full stripe (a size: 4096, 64KiB, 1MiB).
    #[arg(long, value_name = "SIZE", default_value = "1MiB", value_parser = args::chunk_bytes)]
    pub chunk_bytes: usize,
    /// Replace chunk files already in the directory.
    #[arg(long)]
    pub force: bool,
}

#[derive(Args, Debug)]
pub struct DecodeArgs {
    /// Directory holding the chunk files.
    pub dir: PathBuf,
    /// Where to write the rebuilt file: a path, or `-` (the default) for standard output. A
    /// FIFO or a device is written to in place; a new file appears atomically, complete and
    /// checked, or not at all; an existing regular file is replaced (atomically) only with
    /// --force. One of the chunk files (or a chunk file name in DIR) is refused.
    #[arg(short, long, value_name = "FILE")]
    pub output: Option<PathBuf>,
    /// Replace an existing regular file given as --output.
    #[arg(long)]
    pub force: bool,
}

#[derive(Args, Debug)]
pub struct VerifyArgs {
    /// Directory holding the chunk files.
    pub dir: PathBuf,
}

fn parse_lrc(s: &str) -> Result<LrcParams, String> {
    let parts: Vec<&str> = s.split(',').map(str::trim).collect();
    let [k, l, r] = parts.as_slice() else {
        return Err(format!("expected K,L,R (three numbers), got {s:?}"));
    };
    let num = |x: &str| {
        x.parse::<usize>()
            .map_err(|_| format!("{x:?} is not a number in {s:?}"))
    };
    Ok(LrcParams {
        k: num(k)?,
        l: num(l)?,
        r: num(r)?,
    })
}

impl EncodeArgs {
    /// The code, from `--code` or the old `--k --m [--matrix]` / `--lrc`; `None` if none was
    /// given.
    fn code(&self) -> Result<Option<Code>> {
        Ok(Some(match (self.code, self.lrc, self.k, self.m) {
            (Some(c), ..) => c,
            (None, Some(p), _, _) => Code::lrc(p.k, p.l, p.r)
                .with_context(|| format!("invalid --lrc {},{},{}", p.k, p.l, p.r))?,
            (None, None, Some(k), Some(m)) => {
                let matrix = match self.matrix {
                    Some(MatrixArg::Vandermonde) => MatrixKind::Vandermonde,
                    _ => MatrixKind::Cauchy,
                };
                Code::rs_with(k, m, matrix).with_context(|| format!("invalid --k {k} --m {m}"))?
            }
            _ => return Ok(None),
        }))
    }
}

pub fn encode(a: EncodeArgs) -> Result<()> {
    let Some(code) = a.code()? else {
        crate::usage_error(
            "encode",
            "no code given: pass --code rs:K,M (Reed-Solomon), rs-xor:K,M, rs-vand:K,M or \
             lrc:K,L,R (Azure LRC), e.g. --code rs:6,3",
        );
    };
    let dir = ChunkDir::new(&a.output);
    let total = fs::metadata(&a.file).map(|m| m.len()).unwrap_or(0);
    let bar = harness::progress::bar(total, "encode", true);
    let outcome = match dir.encode_file(&a.file, code, a.chunk_bytes, a.force, &mut |done| {
        bar.set_position(done)
    }) {
        Ok(o) => o,
        Err(e @ FileError::ChunkFilesExist { .. }) => {
            bail!("{e}; pass --force to replace them")
        }
        Err(e) => return Err(e.into()),
    };
    bar.finish_and_clear();
    if !outcome.stale_removed.is_empty() {
        eprintln!(
            "note: removed {} temporary file(s) of an interrupted encode: {}",
            outcome.stale_removed.len(),
            file::name_list(outcome.stale_removed.into_iter())
        );
    }
    let s = outcome.summary;
    let overhead = s.record_overhead();
    if s.stripes > 1 && overhead > OVERHEAD_WARN {
        eprintln!(
            "warning: --chunk-bytes {}: every {}-byte chunk record carries a 4-byte crc32c, {:.0}% \
             more bytes than the data itself needs; chunks of 4KiB or more keep it under 0.1%",
            s.chunk_bytes,
            s.chunk_bytes,
            overhead * 100.0
        );
    }
    outln!(
        "encoded {} ({} bytes) with {code} into {} chunk files in {}: {} stripes, chunk_bytes {}",
        a.file.display(),
        s.file_bytes,
        code.n(),
        a.output.display(),
        s.stripes,
        s.chunk_bytes,
    )?;
    Ok(())
}

/// Where `inec decode` writes.
#[derive(Debug)]
enum Target {
    Stdout,
    /// An existing FIFO, device or socket: written to in place.
    Special(PathBuf),
    /// A regular file: written atomically.
    File(PathBuf),
}

/// Chooses the target for `--output`, refusing one of the inputs, a chunk file name in the
/// chunk directory, a directory, a missing directory and an existing regular file without
/// `force`.
fn target(output: Option<&Path>, dir: &Path, force: bool) -> Result<Target> {
    let path = match output {
        None => return Ok(Target::Stdout),
        Some(p) if p == Path::new("-") => return Ok(Target::Stdout),
        Some(p) => p,
    };
    let inputs = ChunkDir::new(dir).chunk_files()?;
    let same_file = |m: &fs::Metadata| {
        inputs.values().find(|input| {
            fs::metadata(input).is_ok_and(|i| i.dev() == m.dev() && i.ino() == m.ino())
        })
    };
    match fs::metadata(path) {
        Ok(meta) => {
            if let Some(input) = same_file(&meta) {
                bail!(
                    "output {} is {}, one of the chunk files being decoded; choose another path",
                    path.display(),
                    input.display()
                );
            }
            let kind = meta.file_type();
            if kind.is_dir() {
                bail!(
                    "output {} is a directory; give the path of the file to write",
                    path.display()
                );
            }
            if kind.is_fifo() || kind.is_char_device() || kind.is_block_device() || kind.is_socket()
            {
                return Ok(Target::Special(path.to_path_buf()));
            }
            if !force {
                bail!(
                    "output {} exists; pass --force to replace it (atomically: it is replaced \
                     only once the decoded file is complete and checked)",
                    path.display()
                );
            }
            Ok(Target::File(path.to_path_buf()))
        }
        Err(_) => {
            let parent = match path.parent() {
                Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
                _ => PathBuf::from("."),
            };
            if !parent.is_dir() {
                bail!(
                    "cannot write {}: directory {} does not exist",
                    path.display(),
                    parent.display()
                );
            }
            let in_chunk_dir = fs::canonicalize(&parent).ok() == fs::canonicalize(dir).ok();
            let chunk_name = path
                .file_name()
                .and_then(|n| n.to_str())
                .and_then(parse_chunk_file_name);
            if let (true, Some(i)) = (in_chunk_dir, chunk_name) {
                bail!(
                    "output {} would be chunk file {} of the directory being decoded; choose \
                     another path",
                    path.display(),
                    chunk_file_name(i)
                );
            }
            Ok(Target::File(path.to_path_buf()))
        }
    }
}

/// The end-to-end check failed on a stream that cannot be taken back.
fn streamed_mismatch(e: FileError, to: &str, dir: &Path) -> anyhow::Error {
    anyhow::anyhow!(
        "{e}: the bytes written to {to} are wrong, discard them. A chunk altered with a valid \
         record checksum does this: `inec verify {}` names it, and decoding into a file \
         (-o FILE) leaves it out",
        dir.display()
    )
}

pub fn decode(a: DecodeArgs) -> Result<()> {
    let mut set = ChunkDir::new(&a.dir).open_set()?;
    for note in &set.notes {
        eprintln!("note: {note}");
    }
    set.check_recoverable()?;
    let target = target(a.output.as_deref(), &a.dir, a.force)?;
    let bar = harness::progress::bar(set.header.file_bytes, "decode", true);
    let mut progress = |done: u64| bar.set_position(done);
    let (report, shown) = match &target {
        Target::Stdout => {
            let mut out = BufWriter::with_capacity(1 << 16, crate::stdout::Stdout::lock());
            let r = file::decode_stream(&mut set, &mut out, DecodeMode::Fast, &mut progress)
                .map_err(|e| match e {
                    e @ FileError::ContentMismatch { .. } => {
                        streamed_mismatch(e, "standard output", &a.dir)
                    }
                    e => e.into(),
                })?;
            (r, "standard output".to_string())
        }
        Target::Special(path) => {
            let f = OpenOptions::new()
                .write(true)
                .open(path)
                .with_context(|| format!("cannot open {} for writing", path.display()))?;
            let mut out = BufWriter::with_capacity(1 << 16, f);
            let r = file::decode_stream(&mut set, &mut out, DecodeMode::Fast, &mut progress)
                .map_err(|e| match e {
                    e @ FileError::ContentMismatch { .. } => {
                        streamed_mismatch(e, &path.display().to_string(), &a.dir)
                    }
                    e => e.into(),
                })?;
            (r, path.display().to_string())
        }
        Target::File(path) => (
            decode_to_file(&mut set, path, &mut progress)?,
            path.display().to_string(),
        ),
    };
    bar.finish_and_clear();
    report_decode(&report, &a.dir, &shown, matches!(target, Target::Stdout))?;
    Ok(())
}

/// Decodes into a regular file atomically; if the end-to-end check fails, decodes again
/// reading every chunk and leaving out the one that disagrees with the others.
fn decode_to_file(
    set: &mut file::ChunkSet<fs::File>,
    path: &Path,
    progress: &mut dyn FnMut(u64),
) -> Result<DecodeReport> {
    {
        let mut out = file::AtomicFile::create(path)?;
        match file::decode_stream(set, &mut out, DecodeMode::Fast, progress) {
            Ok(r) => {
                out.commit()?;
                return Ok(r);
            }
            Err(FileError::ContentMismatch { .. }) => {}
            Err(e) => return Err(e.into()),
        }
    }
    eprintln!(
        "note: the decoded data failed its end-to-end check; decoding again with every chunk \
         read and compared with the others"
    );
    let mut out = file::AtomicFile::create(path)?;
    let r =
        file::decode_stream(set, &mut out, DecodeMode::Checked, progress).map_err(|e| match e {
            FileError::ContentMismatch {
                computed, recorded, ..
            } => FileError::ContentMismatch {
                computed,
                recorded,
                hint: "; nothing written".into(),
            },
            e => e,
        })?;
    out.commit()?;
    Ok(r)
}

fn report_decode(
    report: &DecodeReport,
    dir: &Path,
    shown: &str,
    to_stdout: bool,
) -> std::io::Result<()> {
    let code = report.header.code;
    for &(i, stripes) in &report.inconsistent {
        eprintln!(
            "note: {}: left out in {stripes} stripe(s): its records pass their crc32c but it \
             disagrees with the other chunks",
            chunk_file_name(i)
        );
    }
    for (i, d) in report.damage.iter().enumerate() {
        if d.count > 0 {
            eprintln!(
                "note: {}: {} damaged stripe(s){}",
                chunk_file_name(i),
                d.count,
                d.describe()
            );
        }
    }
    let damaged_files = report.damage.iter().filter(|d| d.count > 0).count();
    let unusable = report.unusable.len();
    let degraded = if unusable == 0 && report.rebuilt_chunks == 0 {
        String::new()
    } else {
        let mut parts = Vec::new();
        if unusable > 0 {
            parts.push(format!("{unusable} chunk file(s) unusable"));
        }
        if damaged_files > 0 {
            parts.push(format!(
                "{damaged_files} chunk file(s) with damaged stripes"
            ));
        }
        parts.push(format!(
            "{} data chunk(s) rebuilt from parity",
            report.rebuilt_chunks
        ));
        format!(" ({})", parts.join(", "))
    };
    let line = format!(
        "decoded {} bytes of {code} from {} into {shown}{degraded}",
        report.header.file_bytes,
        dir.display(),
    );
    if to_stdout {
        eprintln!("{line}");
        Ok(())
    } else {
        outln!("{line}")
    }
}

/// Exit status of `inec verify` for each verdict (2 is a usage error, as for every command).
pub fn verify_exit_code(status: Status) -> u8 {
    match status {
        Status::Intact => 0,
        Status::Degraded => 1,
        Status::Lost => 3,
    }
}

pub fn verify(a: VerifyArgs) -> Result<Status> {
    let mut set = ChunkDir::new(&a.dir).open_set()?;
    let header = set.header;
    let code = header.code;
    let n = code.n();
    outln!(
        "{}: {} bytes encoded with {code}, chunk_bytes {}, {} stripe(s)",
        a.dir.display(),
        header.file_bytes,
        header.chunk_bytes,
        header.layout().stripe_count()
    )?;
    for note in &set.notes {
        outln!("note: {note}")?;
    }
    let bar = harness::progress::bar(header.layout().stripe_count(), "verify", false);
    let report = file::verify(&mut set, &mut |s| bar.set_position(s))?;
    bar.finish_and_clear();
    let stripes = report.stripes;
    for (i, chunk) in report.chunks.iter().enumerate() {
        let name = chunk_file_name(i);
        match chunk {
            ChunkState::Absent(why) => outln!("{name}  {why}")?,
            ChunkState::Present {
                file,
                damage,
                inconsistent,
            } => {
                let shown = file
                    .as_ref()
                    .map(|f| format!(" (file {f})"))
                    .unwrap_or_default();
                if damage.count > 0 {
                    outln!(
                        "{name}  corrupt: {} of {stripes} stripe(s) fail{shown}{}",
                        damage.count,
                        damage.describe()
                    )?;
                } else if let Some((count, first)) = inconsistent {
                    outln!(
                        "{name}  inconsistent: its records pass their crc32c but it disagrees \
                         with the other chunks in {count} of {stripes} stripe(s), the first is \
                         stripe {first} (found by leaving each chunk out){shown}"
                    )?;
                } else {
                    outln!("{name}  ok{shown}")?;
                }
            }
        }
    }
    outln!(
        "checked: the header and every stripe record's crc32c of each chunk file; the data \
         decoded (not written) against the whole-file crc32c; each parity chunk read against \
         the parity re-encoded from the stripe's data"
    )?;
    let status = report.status();
    match status {
        Status::Lost => outln!("status: lost: not recoverable: {}", report.why_lost())?,
        Status::Intact => outln!(
            "status: ok: all {n} chunk files intact, parity consistent, content crc32c {:#010x} matches",
            header.content_crc32c
        )?,
        Status::Degraded => outln!(
            "status: degraded but recoverable: {} of {n} chunk files missing, damaged or \
             inconsistent; the data decodes and matches its crc32c {:#010x}; `inec decode` \
             rebuilds the file",
            report.unusable().len(),
            header.content_crc32c
        )?,
    }
    Ok(status)
}
