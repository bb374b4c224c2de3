//! `inec encode`, `inec decode`, `inec verify`: the flags and the messages around the
//! `file` crate, which does the work (streaming over `Read`/`Write`, atomic outputs).

use std::path::PathBuf;

use anyhow::{bail, Context, Result};
use clap::{Args, ValueEnum};
use codes::chunk_file::{chunk_file_name, MAX_CHUNK_BYTES};
use codes::{Code, MatrixKind};
use file::{ChunkDir, ChunkState, DecodeMode, FileError, Status};

/// Generator matrix of an RS code.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum MatrixArg {
    /// ISA-L `gf_gen_cauchy1_matrix` (MDS for any k + m ≤ 256).
    Cauchy,
    /// ISA-L `gf_gen_rs_matrix` (refused where it is not MDS).
    Vandermonde,
}

/// LRC parameters as given on the command line (`K,L,R`).
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
    /// Data chunks per stripe of a Reed-Solomon code.
    #[arg(
        long,
        requires = "m",
        required_unless_present = "lrc",
        conflicts_with = "lrc"
    )]
    pub k: Option<usize>,
    /// Parity chunks per stripe of a Reed-Solomon code.
    #[arg(long, requires = "k")]
    pub m: Option<usize>,
    /// Azure LRC instead of RS: K data chunks in L local groups, R global parities.
    #[arg(long, value_name = "K,L,R", value_parser = parse_lrc)]
    pub lrc: Option<LrcParams>,
    /// Chunk size of a full stripe (a number of bytes, optionally with KiB, MiB or GiB).
    #[arg(long, value_name = "BYTES", default_value = "1MiB", value_parser = parse_chunk_bytes)]
    pub chunk_bytes: usize,
    /// Generator matrix of the RS code.
    #[arg(long, value_enum, default_value = "cauchy", conflicts_with = "lrc")]
    pub matrix: MatrixArg,
    /// Replace chunk files already in the directory.
    #[arg(long)]
    pub force: bool,
}

#[derive(Args, Debug)]
pub struct DecodeArgs {
    /// Directory holding the chunk files.
    pub dir: PathBuf,
    /// Where to write the rebuilt file (replaced atomically if it exists).
    #[arg(short, long, value_name = "FILE")]
    pub output: PathBuf,
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

fn parse_chunk_bytes(s: &str) -> Result<usize, String> {
    let digits_end = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
    let (digits, unit) = s.split_at(digits_end);
    let value: usize = digits
        .parse()
        .map_err(|_| format!("{s:?} is not a size (e.g. 4096, 64KiB, 1MiB)"))?;
    let scale: usize = match unit.trim() {
        "" | "B" => 1,
        "K" | "KiB" => 1 << 10,
        "M" | "MiB" => 1 << 20,
        "G" | "GiB" => 1 << 30,
        other => return Err(format!("unknown unit {other:?} (use KiB, MiB or GiB)")),
    };
    match value.checked_mul(scale) {
        Some(bytes) if (1..=MAX_CHUNK_BYTES).contains(&bytes) => Ok(bytes),
        _ => Err(format!(
            "chunk size {s} out of range 1..={MAX_CHUNK_BYTES} bytes"
        )),
    }
}

impl EncodeArgs {
    /// The code and the chunk size, after checking the parameters, before any file is touched.
    fn code(&self) -> Result<Code> {
        Ok(match (self.lrc, self.k, self.m) {
            (Some(p), _, _) => Code::lrc(p.k, p.l, p.r)
                .with_context(|| format!("invalid --lrc {},{},{}", p.k, p.l, p.r))?,
            (None, Some(k), Some(m)) => {
                let matrix = match self.matrix {
                    MatrixArg::Cauchy => MatrixKind::Cauchy,
                    MatrixArg::Vandermonde => MatrixKind::Vandermonde,
                };
                Code::rs_with(k, m, matrix).with_context(|| format!("invalid --k {k} --m {m}"))?
            }
            _ => bail!("give --k and --m, or --lrc K,L,R"),
        })
    }
}

pub fn encode(a: EncodeArgs) -> Result<()> {
    let code = a.code()?;
    let dir = ChunkDir::new(&a.output);
    let outcome = match dir.encode_file(&a.file, code, a.chunk_bytes, a.force, &mut |_| {}) {
        Ok(o) => o,
        Err(e @ FileError::ChunkFilesExist { .. }) => {
            bail!("{e}; pass --force to replace them")
        }
        Err(e) => return Err(e.into()),
    };
    if !outcome.stale_removed.is_empty() {
        eprintln!(
            "note: removed {} temporary file(s) of an interrupted encode: {}",
            outcome.stale_removed.len(),
            file::name_list(outcome.stale_removed.into_iter())
        );
    }
    let s = outcome.summary;
    println!(
        "encoded {} ({} bytes) with {code} into {} chunk files in {}: {} stripes, chunk_bytes {}",
        a.file.display(),
        s.file_bytes,
        code.n(),
        a.output.display(),
        s.stripes,
        s.chunk_bytes,
    );
    Ok(())
}

pub fn decode(a: DecodeArgs) -> Result<()> {
    let mut set = ChunkDir::new(&a.dir).open_set()?;
    for note in &set.notes {
        eprintln!("note: {note}");
    }
    set.check_recoverable()?;
    let out_path = &a.output;
    if out_path.is_dir() {
        bail!(
            "output {} is a directory; give the path of the file to write",
            out_path.display()
        );
    }
    let fast = {
        let mut out = file::AtomicFile::create(out_path)?;
        match file::decode_stream(&mut set, &mut out, DecodeMode::Fast, &mut |_| {}) {
            Ok(r) => {
                out.commit()?;
                Some(r)
            }
            Err(FileError::ContentMismatch { .. }) => None,
            Err(e) => return Err(e.into()),
        }
    };
    let report = match fast {
        Some(r) => r,
        None => {
            // A chunk altered with a valid record checksum: read every chunk of every stripe
            // and leave out the one that disagrees with the rest.
            eprintln!(
                "note: the decoded data failed its end-to-end check; decoding again with every \
                 chunk read and compared with the others"
            );
            let mut out = file::AtomicFile::create(out_path)?;
            let r = file::decode_stream(&mut set, &mut out, DecodeMode::Checked, &mut |_| {})
                .map_err(|e| match e {
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
            r
        }
    };
    for &(i, stripes) in &report.inconsistent {
        eprintln!(
            "note: {}: left out in {stripes} stripe(s): its records pass their crc32c but it \
             disagrees with the other chunks",
            chunk_file_name(i)
        );
    }
    let code = report.header.code;
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
    println!(
        "decoded {} bytes of {code} from {} into {}{degraded}",
        report.header.file_bytes,
        a.dir.display(),
        out_path.display()
    );
    Ok(())
}

pub fn verify(a: VerifyArgs) -> Result<()> {
    let mut set = ChunkDir::new(&a.dir).open_set()?;
    let header = set.header;
    let code = header.code;
    let n = code.n();
    println!(
        "{}: {} bytes encoded with {code}, chunk_bytes {}, {} stripe(s)",
        a.dir.display(),
        header.file_bytes,
        header.chunk_bytes,
        header.layout().stripe_count()
    );
    for note in &set.notes {
        println!("note: {note}");
    }
    let report = file::verify(&mut set, &mut |_| {})?;
    let stripes = report.stripes;
    for (i, chunk) in report.chunks.iter().enumerate() {
        let name = chunk_file_name(i);
        match chunk {
            ChunkState::Absent(why) => println!("{name}  {why}"),
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
                    println!(
                        "{name}  corrupt: {} of {stripes} stripe(s) fail{shown}{}",
                        damage.count,
                        damage.describe()
                    );
                } else if let Some((count, first)) = inconsistent {
                    println!(
                        "{name}  inconsistent: its records pass their crc32c but it disagrees \
                         with the other chunks in {count} of {stripes} stripe(s), the first is \
                         stripe {first} (found by leaving each chunk out){shown}"
                    );
                } else {
                    println!("{name}  ok{shown}");
                }
            }
        }
    }
    println!(
        "checked: the header and every stripe record's crc32c of each chunk file; the data \
         decoded (not written) against the whole-file crc32c; each parity chunk read against \
         the parity re-encoded from the stripe's data"
    );
    match report.status() {
        Status::Lost => bail!("not recoverable: {}", report.why_lost()),
        Status::Intact => println!(
            "status: ok: all {n} chunk files intact, parity consistent, content crc32c {:#010x} matches",
            header.content_crc32c
        ),
        Status::Degraded => println!(
            "status: degraded but recoverable: {} of {n} chunk files missing, damaged or \
             inconsistent; the data decodes and matches its crc32c {:#010x}; `inec decode` \
             rebuilds the file",
            report.unusable().len(),
            header.content_crc32c
        ),
    }
    Ok(())
}
