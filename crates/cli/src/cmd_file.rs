//! `inec encode`, `inec decode`, `inec verify`: a file to chunk files and back.
//!
//! The byte format lives in `codes::chunk_file` (specified in docs/chunk-format.md); this
//! module is the I/O around it. Every loop works stripe by stripe with buffers of at most
//! n · `chunk_bytes` (n · `chunk_bytes` ≤ [`MAX_STRIPE_BUFFER_BYTES`] is enforced when the
//! arguments are checked, and buffers are allocated fallibly, so a shortage is an error and
//! not an abort), so memory does not grow with the file. Outputs are written under a
//! temporary name holding the process id in the target directory and renamed into place only
//! when complete and checked: a failed run removes its temporary files and never leaves a
//! wrong file under the final name, and temporary files of a run that was killed are removed
//! by the next run in that directory.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::fs::{self, File, OpenOptions};
use std::io::{self, BufWriter, Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

use anyhow::{anyhow, bail, ensure, Context, Result};
use clap::{Args, ValueEnum};
use codes::chunk_file::{
    check_record, chunk_file_name, parse_chunk_file_name, stripe_crc32c, ChunkFileError,
    ChunkHeader, StripeLayout, HEADER_BYTES, MAX_CHUNK_BYTES, RECORD_TRAILER_BYTES,
};
use codes::{Code, Codec, MatrixKind};

/// Most memory the stripe buffers of `inec encode` may take: n · `chunk_bytes` (4 GiB).
pub const MAX_STRIPE_BUFFER_BYTES: u64 = 4 << 30;

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
    /// The code and the chunk size, after checking the parameters and the memory limit, before
    /// any file is touched.
    fn checked(&self) -> Result<(Code, usize)> {
        let code = match (self.lrc, self.k, self.m) {
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
        };
        let n = code.n();
        let buffer_bytes = n as u64 * self.chunk_bytes as u64;
        ensure!(
            buffer_bytes <= MAX_STRIPE_BUFFER_BYTES,
            "--chunk-bytes {} with {n} chunks per stripe ({code}) needs stripe buffers of \
             {buffer_bytes} bytes, over the limit of {MAX_STRIPE_BUFFER_BYTES} bytes (4 GiB); \
             use a smaller --chunk-bytes",
            self.chunk_bytes
        );
        Ok((code, self.chunk_bytes))
    }
}

/// Files that are removed when dropped unless `keep` was called: the partial outputs of a
/// run that failed part way.
#[derive(Debug, Default)]
struct Partial {
    paths: Vec<PathBuf>,
}

impl Partial {
    fn add(&mut self, path: PathBuf) {
        self.paths.push(path);
    }
    fn keep(mut self) {
        self.paths.clear();
    }
}

impl Drop for Partial {
    fn drop(&mut self) {
        for p in &self.paths {
            let _ = fs::remove_file(p);
        }
    }
}

/// Fills `buf` from `r`; returns how many bytes were read (less than `buf.len()` only at
/// the end of the input).
fn read_full(r: &mut impl Read, buf: &mut [u8]) -> io::Result<usize> {
    let mut filled = 0;
    while filled < buf.len() {
        match r.read(&mut buf[filled..]) {
            Ok(0) => break,
            Ok(n) => filled += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(filled)
}

/// A zeroed buffer, allocated fallibly: a shortage of memory is an error, not an abort.
fn try_zeroed(len: usize, what: &str) -> Result<Vec<u8>> {
    let mut v = Vec::new();
    grow(&mut v, len, what)?;
    Ok(v)
}

/// Grows `buf` to at least `len` bytes (zero-filled), fallibly.
fn grow(buf: &mut Vec<u8>, len: usize, what: &str) -> Result<()> {
    if buf.len() < len {
        buf.try_reserve_exact(len - buf.len())
            .map_err(|e| anyhow!("cannot allocate {len} bytes for {what}: {e}"))?;
        buf.resize(len, 0);
    }
    Ok(())
}

/// The temporary name of a file being written by this process: `.{name}.{pid}.partial`.
fn partial_name(name: &str) -> String {
    format!(".{name}.{}.partial", std::process::id())
}

/// Whether process `pid` exists. Without `/proc` nothing can be known: assume it does.
fn process_alive(pid: u32) -> bool {
    let proc = Path::new("/proc");
    !proc.join("self").exists() || proc.join(pid.to_string()).exists()
}

/// Removes the temporary files `.{name}.{pid}.partial` in `dir` for which `is_target(name)`
/// holds and whose process no longer exists: what a run that was killed left behind. Running
/// writers are left alone. With `pidless`, also `.{name}.partial` (the name encode used before
/// temporary names carried the pid). Returns the names removed.
fn remove_stale_partials(
    dir: &Path,
    pidless: bool,
    is_target: impl Fn(&str) -> bool,
) -> Result<Vec<String>> {
    let mut removed = Vec::new();
    for entry in fs::read_dir(dir).with_context(|| format!("cannot list {}", dir.display()))? {
        let entry = entry?;
        let file_name = entry.file_name();
        let Some(full) = file_name.to_str() else {
            continue;
        };
        let Some(inner) = full
            .strip_prefix('.')
            .and_then(|x| x.strip_suffix(".partial"))
        else {
            continue;
        };
        let stale = match inner.rsplit_once('.') {
            Some((name, pid)) if pid.bytes().all(|b| b.is_ascii_digit()) => {
                is_target(name) && pid.parse().is_ok_and(|pid| !process_alive(pid))
            }
            _ => pidless && is_target(inner),
        };
        if stale && entry.file_type()?.is_file() {
            fs::remove_file(entry.path())
                .with_context(|| format!("cannot remove {}", entry.path().display()))?;
            removed.push(full.to_string());
        }
    }
    Ok(removed)
}

pub fn encode(a: EncodeArgs) -> Result<()> {
    let (code, chunk_bytes) = a.checked()?;
    let codec = Codec::new(code);
    let (k, n) = (code.k(), code.n());

    let mut input =
        File::open(&a.file).with_context(|| format!("cannot open {}", a.file.display()))?;
    let meta = input.metadata()?;
    ensure!(meta.is_file(), "{} is not a regular file", a.file.display());
    let file_bytes = meta.len();
    // Check the header fields (file_bytes among them) before writing anything.
    ChunkHeader::new(code, n - 1, chunk_bytes, file_bytes, 0)?;
    let layout = StripeLayout::new(k, chunk_bytes, file_bytes);

    let dir = &a.output;
    ensure!(
        !dir.exists() || dir.is_dir(),
        "output {} exists and is not a directory",
        dir.display()
    );
    fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let existing = existing_chunk_files(dir)?;
    if !existing.is_empty() && !a.force {
        bail!(
            "{} already holds chunk files ({}); pass --force to replace them",
            dir.display(),
            name_list(existing.keys().map(|&i| chunk_file_name(i)))
        );
    }

    // The first stripe has the largest chunks: `chunk_bytes`, or less for a small file.
    let buffer_chunk_bytes = layout.stripe_chunk_bytes(0);
    let mut data = try_zeroed(k * buffer_chunk_bytes, "the data chunks of a stripe")?;
    let mut parity = try_zeroed(
        (n - k) * buffer_chunk_bytes,
        "the parity chunks of a stripe",
    )?;

    let stale = remove_stale_partials(dir, true, |name| parse_chunk_file_name(name).is_some())?;
    if !stale.is_empty() {
        eprintln!(
            "note: removed {} temporary file(s) of an interrupted encode: {}",
            stale.len(),
            name_list(stale.into_iter())
        );
    }

    // Chunk files are written as `.chunk-NNN.<pid>.partial`, with a zeroed header (no magic)
    // until the content checksum is known; they get their names only once complete.
    let mut partial = Partial::default();
    let mut writers = Vec::with_capacity(n);
    let mut partial_paths = Vec::with_capacity(n);
    for i in 0..n {
        let path = dir.join(partial_name(&chunk_file_name(i)));
        let file = OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&path)
            .with_context(|| format!("cannot create {}", path.display()))?;
        partial.add(path.clone());
        partial_paths.push(path);
        let mut w = BufWriter::with_capacity(1 << 16, file);
        w.write_all(&[0u8; HEADER_BYTES])?;
        writers.push(w);
    }

    let mut content_crc = 0u32;
    for s in 0..layout.stripe_count() {
        let len = layout.stripe_data_bytes(s);
        let c = layout.stripe_chunk_bytes(s);
        let got = read_full(&mut input, &mut data[..len])
            .with_context(|| format!("cannot read {}", a.file.display()))?;
        ensure!(
            got == len,
            "{} shrank while being encoded (expected {file_bytes} bytes)",
            a.file.display()
        );
        content_crc = crc32c::crc32c_append(content_crc, &data[..len]);
        data[len..k * c].fill(0);
        let data_chunks: Vec<&[u8]> = data[..k * c].chunks_exact(c).collect();
        let mut parity_chunks: Vec<&mut [u8]> = parity[..(n - k) * c].chunks_exact_mut(c).collect();
        codec.encode(&data_chunks, &mut parity_chunks)?;
        let all = data_chunks
            .iter()
            .copied()
            .chain(parity_chunks.iter().map(|p| &**p));
        for (i, (payload, w)) in all.zip(writers.iter_mut()).enumerate() {
            w.write_all(payload)?;
            w.write_all(&stripe_crc32c(i, s, payload).to_le_bytes())?;
        }
    }
    ensure!(
        read_full(&mut input, &mut [0u8; 1])? == 0,
        "{} grew while being encoded (expected {file_bytes} bytes)",
        a.file.display()
    );

    for (i, w) in writers.into_iter().enumerate() {
        let header = ChunkHeader::new(code, i, chunk_bytes, file_bytes, content_crc)?;
        let mut file = w.into_inner().map_err(|e| e.into_error())?;
        file.seek(SeekFrom::Start(0))?;
        file.write_all(&header.to_bytes())?;
        file.sync_all()?;
    }
    for (i, path) in partial_paths.iter().enumerate() {
        fs::rename(path, dir.join(chunk_file_name(i)))?;
    }
    partial.keep();
    // Chunk files of an earlier, wider encode would otherwise linger beside the new ones.
    for (&i, path) in &existing {
        if i >= n {
            fs::remove_file(path)?;
        }
    }
    sync_dir(dir);

    println!(
        "encoded {} ({file_bytes} bytes) with {code} into {n} chunk files in {}: {} stripes, chunk_bytes {chunk_bytes}",
        a.file.display(),
        dir.display(),
        layout.stripe_count(),
    );
    Ok(())
}

/// Makes renames in `dir` durable where the platform allows; best effort.
fn sync_dir(dir: &Path) {
    if let Ok(d) = File::open(dir) {
        let _ = d.sync_all();
    }
}

/// Chunk files in `dir` by the index their name gives.
fn existing_chunk_files(dir: &Path) -> Result<BTreeMap<usize, PathBuf>> {
    let mut out = BTreeMap::new();
    for entry in fs::read_dir(dir).with_context(|| format!("cannot list {}", dir.display()))? {
        let entry = entry?;
        if let Some(i) = entry.file_name().to_str().and_then(parse_chunk_file_name) {
            out.insert(i, entry.path());
        }
    }
    Ok(out)
}

fn name_list(names: impl Iterator<Item = String>) -> String {
    let names: Vec<String> = names.collect();
    if names.len() > 8 {
        format!("{}, … ({} in all)", names[..8].join(", "), names.len())
    } else {
        names.join(", ")
    }
}

/// One chunk index of the encoded file as found on disk.
#[derive(Debug)]
enum Source {
    /// A file with a valid header of the chosen set; `len` bounds what can be read from it
    /// (records past it are missing without reading or allocating anything).
    Present { name: String, file: File, len: u64 },
    /// No usable file; the reason says why (no file, bad header, …).
    Absent(String),
}

/// The chunk files of one encoded file, as found in a directory.
#[derive(Debug)]
struct ChunkSet {
    /// The header every member shares (with the index of the first member found).
    header: ChunkHeader,
    /// Indexed by chunk index, `code.n()` entries.
    sources: Vec<Source>,
    /// Things found on the way that do not stop decoding (ignored files, trailing bytes).
    notes: Vec<String>,
}

impl ChunkSet {
    fn absent(&self) -> Vec<usize> {
        (0..self.sources.len())
            .filter(|&i| matches!(self.sources[i], Source::Absent(_)))
            .collect()
    }

    fn describe_absent(&self) -> String {
        let mut out = String::new();
        for (i, s) in self.sources.iter().enumerate() {
            if let Source::Absent(why) = s {
                let _ = write!(out, "\n  {}: {why}", chunk_file_name(i));
            }
        }
        out
    }
}

/// Reads every chunk file header in `dir` and picks the encoded file they describe (the one
/// most chunk files agree on).
fn scan(dir: &Path) -> Result<ChunkSet> {
    let files = existing_chunk_files(dir)?;
    if files.is_empty() {
        bail!(
            "no chunk files (chunk-000, chunk-001, …) in {}",
            dir.display()
        );
    }
    let mut headers: Vec<(usize, PathBuf, ChunkHeader)> = Vec::new();
    let mut bad: BTreeMap<usize, String> = BTreeMap::new();
    for (&name_index, path) in &files {
        let mut buf = [0u8; HEADER_BYTES];
        let parsed = File::open(path)
            .and_then(|mut f| read_full(&mut f, &mut buf))
            .map_err(|e| format!("cannot read: {e}"))
            .and_then(|len| {
                ChunkHeader::parse(&buf[..len]).map_err(|e| format!("corrupt header: {e}"))
            });
        match parsed {
            Ok(h) => headers.push((name_index, path.clone(), h)),
            Err(why) => {
                bad.insert(name_index, why);
            }
        }
    }
    let Some(header) = majority(&headers) else {
        let mut msg = format!("no readable chunk file in {}:", dir.display());
        for (i, why) in &bad {
            let _ = write!(msg, "\n  {}: {why}", chunk_file_name(*i));
        }
        bail!(msg);
    };

    let n = header.code.n();
    let layout = header.layout();
    let mut notes = Vec::new();
    let mut chosen: Vec<Option<(String, PathBuf)>> = vec![None; n];
    for (name_index, path, h) in &headers {
        let name = chunk_file_name(*name_index);
        if !h.same_file(&header) {
            notes.push(format!(
                "{name}: belongs to another encoded file ({}, {} bytes), ignored",
                h.code, h.file_bytes
            ));
            continue;
        }
        let i = h.chunk_index;
        // The header's index is authoritative; a renamed file is still used.
        match &chosen[i] {
            Some((other, _)) if *name_index != i => {
                notes.push(format!("{name}: holds chunk {i} like {other}, ignored"))
            }
            _ => {
                if *name_index != i {
                    notes.push(format!("{name}: holds chunk {i} (renamed?), used as such"));
                }
                chosen[i] = Some((name, path.clone()));
            }
        }
    }
    let expected_bytes = layout.chunk_file_bytes();
    let mut sources = Vec::with_capacity(n);
    for (i, c) in chosen.into_iter().enumerate() {
        let source = match c {
            Some((name, path)) => {
                let file =
                    File::open(&path).with_context(|| format!("cannot open {}", path.display()))?;
                let len = file.metadata()?.len();
                if len < expected_bytes {
                    notes.push(format!(
                        "{name}: truncated ({len} of {expected_bytes} bytes), later stripes missing"
                    ));
                } else if len > expected_bytes {
                    notes.push(format!(
                        "{name}: {} bytes after the last stripe, ignored",
                        len - expected_bytes
                    ));
                }
                Source::Present { name, file, len }
            }
            None => Source::Absent(
                bad.remove(&i)
                    .unwrap_or_else(|| "missing (no file)".to_string()),
            ),
        };
        sources.push(source);
    }
    for (i, why) in bad {
        notes.push(format!("{}: {why}", chunk_file_name(i)));
    }
    Ok(ChunkSet {
        header,
        sources,
        notes,
    })
}

/// The header shared by the most files (ties: the group of the lowest-named file).
fn majority(headers: &[(usize, PathBuf, ChunkHeader)]) -> Option<ChunkHeader> {
    let mut best: Option<(usize, ChunkHeader)> = None;
    for (_, _, h) in headers {
        let votes = headers.iter().filter(|(_, _, o)| o.same_file(h)).count();
        if votes > best.map_or(0, |(v, _)| v) {
            best = Some((votes, *h));
        }
    }
    best.map(|(_, h)| h)
}

/// Reads and checks the record of stripe `s` of chunk `index` (a file of `file_len` bytes)
/// into `buf`. The outer error is fatal (no memory); the inner one says why this record is
/// unusable.
fn read_record(
    file: &mut File,
    file_len: u64,
    layout: &StripeLayout,
    index: usize,
    s: u64,
    buf: &mut Vec<u8>,
) -> Result<Result<(), String>> {
    let c = layout.stripe_chunk_bytes(s);
    let record_bytes = c + RECORD_TRAILER_BYTES;
    let offset = layout.record_offset(s);
    if offset.saturating_add(record_bytes as u64) > file_len {
        return Ok(Err("file ends before this stripe".to_string()));
    }
    grow(buf, record_bytes, "a stripe record")?;
    let record = &mut buf[..record_bytes];
    let read = file
        .seek(SeekFrom::Start(offset))
        .and_then(|_| read_full(file, record));
    Ok(match read {
        Err(e) => Err(format!("read failed: {e}")),
        Ok(got) if got < record_bytes => Err("file ends before this stripe".to_string()),
        Ok(_) => match check_record(index, s, record, c) {
            Ok(_) => Ok(()),
            // The caller names the stripe and the chunk; say only what failed.
            Err(ChunkFileError::StripeChecksum {
                stored, computed, ..
            }) => Err(format!(
                "crc32c mismatch (stored {stored:#010x}, computed {computed:#010x})"
            )),
            Err(e) => Err(e.to_string()),
        },
    })
}

/// What one chunk looked like in one stripe.
#[derive(Debug, Clone, PartialEq)]
enum State {
    NotRead,
    Good,
    Bad(String),
}

/// Damage seen per chunk while streaming: stripe indices (the first few) and a count.
#[derive(Debug, Default, Clone)]
struct Damage {
    count: u64,
    first: Vec<(u64, String)>,
}

impl Damage {
    fn record(&mut self, s: u64, why: String) {
        self.record_run(s, 1, why);
    }
    /// `count` consecutive stripes from `s`, counted in one step.
    fn record_run(&mut self, s: u64, count: u64, why: String) {
        if count == 0 {
            return;
        }
        self.count += count;
        if self.first.len() < 4 {
            let at = if count == 1 {
                format!("stripe {s}")
            } else {
                format!("stripes {s}..{}", s + count)
            };
            self.first.push((s, format!("{at}: {why}")));
        }
    }
    fn describe(&self) -> String {
        let mut out = String::new();
        for (_, why) in &self.first {
            let _ = write!(out, "; {why}");
        }
        if self.count > self.first.len() as u64 {
            out.push_str("; …");
        }
        out
    }
}

/// Reads stripe `s` of chunk `i` into `bufs[i]` and says whether it can be used; damage is
/// recorded against the chunk.
fn load(
    sources: &mut [Source],
    damage: &mut [Damage],
    layout: &StripeLayout,
    s: u64,
    i: usize,
    bufs: &mut [Vec<u8>],
) -> Result<State> {
    Ok(match &mut sources[i] {
        Source::Absent(why) => State::Bad(why.clone()),
        Source::Present { file, len, .. } => {
            match read_record(file, *len, layout, i, s, &mut bufs[i])? {
                Ok(()) => State::Good,
                Err(why) => {
                    damage[i].record(s, why.clone());
                    State::Bad(why)
                }
            }
        }
    })
}

/// Computes chunks `wanted` of one stripe (chunk size `c`) from chunks `inputs`, all in
/// `bufs`; the two lists are disjoint.
fn rebuild(
    codec: &Codec,
    bufs: &mut [Vec<u8>],
    inputs: &[usize],
    wanted: &[usize],
    c: usize,
) -> Result<()> {
    let calculator = codec.decoder(inputs, wanted)?;
    let mut outputs: Vec<Vec<u8>> = wanted
        .iter()
        .map(|&j| std::mem::take(&mut bufs[j]))
        .collect();
    for o in &mut outputs {
        grow(o, c, "a rebuilt chunk")?;
    }
    {
        let ins: Vec<&[u8]> = inputs.iter().map(|&i| &bufs[i][..c]).collect();
        let mut outs: Vec<&mut [u8]> = outputs.iter_mut().map(|o| &mut o[..c]).collect();
        calculator.compute(&ins, &mut outs)?;
    }
    for (&j, o) in wanted.iter().zip(outputs) {
        bufs[j] = o;
    }
    Ok(())
}

fn describe_bad(state: &[State]) -> String {
    let mut out = String::new();
    for (i, st) in state.iter().enumerate() {
        if let State::Bad(why) = st {
            let _ = write!(out, "\n  {}: {why}", chunk_file_name(i));
        }
    }
    out
}

pub fn decode(a: DecodeArgs) -> Result<()> {
    let mut set = scan(&a.dir)?;
    let header = set.header;
    let code = header.code;
    let codec = Codec::new(code);
    let (k, n) = (code.k(), code.n());
    let layout = header.layout();
    for note in &set.notes {
        eprintln!("note: {note}");
    }
    let absent = set.absent();
    if !codec.is_recoverable(&absent) {
        bail!(
            "cannot decode: {} of {n} chunk files of {code} are unusable, a pattern the code cannot recover:{}",
            absent.len(),
            set.describe_absent()
        );
    }

    let out_path = &a.output;
    if out_path.is_dir() {
        bail!(
            "output {} is a directory; give the path of the file to write",
            out_path.display()
        );
    }
    let out_name = out_path
        .file_name()
        .with_context(|| format!("{} has no file name", out_path.display()))?
        .to_string_lossy()
        .into_owned();
    let out_dir = match out_path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    };
    remove_stale_partials(&out_dir, false, |name| name == out_name)?;
    let tmp_path = out_dir.join(partial_name(&out_name));
    let mut partial = Partial::default();
    let tmp = OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(&tmp_path)
        .with_context(|| format!("cannot create {}", tmp_path.display()))?;
    partial.add(tmp_path.clone());
    let mut out = BufWriter::with_capacity(1 << 16, tmp);

    let mut bufs: Vec<Vec<u8>> = vec![Vec::new(); n];
    let mut damage: Vec<Damage> = vec![Damage::default(); n];
    let mut rebuilt_chunks = 0u64;
    let mut content_crc = 0u32;
    for s in 0..layout.stripe_count() {
        let c = layout.stripe_chunk_bytes(s);
        let mut state = vec![State::NotRead; n];
        for (j, st) in state.iter_mut().enumerate().take(k) {
            *st = load(&mut set.sources, &mut damage, &layout, s, j, &mut bufs)?;
        }
        let wanted: Vec<usize> = (0..k).filter(|&j| state[j] != State::Good).collect();
        if !wanted.is_empty() {
            // Read the repair set; a member that turns out bad is dropped and the set chosen
            // again from what is left.
            let inputs = loop {
                let available: Vec<usize> = (0..n)
                    .filter(|&i| match &state[i] {
                        State::Good => true,
                        State::NotRead => matches!(set.sources[i], Source::Present { .. }),
                        State::Bad(_) => false,
                    })
                    .collect();
                let inputs = codec.repair_set(&available, &wanted).map_err(|e| {
                    anyhow!(
                        "cannot decode stripe {s} of {}: {e}{}",
                        layout.stripe_count(),
                        describe_bad(&state)
                    )
                })?;
                let mut all_good = true;
                for &i in &inputs {
                    if state[i] == State::NotRead {
                        state[i] = load(&mut set.sources, &mut damage, &layout, s, i, &mut bufs)?;
                    }
                    all_good &= state[i] == State::Good;
                }
                if all_good {
                    break inputs;
                }
            };
            rebuild(&codec, &mut bufs, &inputs, &wanted, c)?;
            rebuilt_chunks += wanted.len() as u64;
        }
        let mut left = layout.stripe_data_bytes(s);
        for buf in &bufs[..k] {
            let take = left.min(c);
            out.write_all(&buf[..take])?;
            content_crc = crc32c::crc32c_append(content_crc, &buf[..take]);
            left -= take;
        }
    }

    let file = out.into_inner().map_err(|e| e.into_error())?;
    if content_crc != header.content_crc32c {
        bail!(
            "decoded data fails the end-to-end check: crc32c {content_crc:#010x}, the chunk headers record {:#010x}; nothing written",
            header.content_crc32c
        );
    }
    file.sync_all()?;
    fs::rename(&tmp_path, out_path)
        .with_context(|| format!("cannot rename to {}", out_path.display()))?;
    partial.keep();
    sync_dir(&out_dir);

    for (i, d) in damage.iter().enumerate() {
        if d.count > 0 {
            eprintln!(
                "note: {}: {} damaged stripe(s){}",
                chunk_file_name(i),
                d.count,
                d.describe()
            );
        }
    }
    let damaged_files = damage.iter().filter(|d| d.count > 0).count();
    let degraded = if absent.is_empty() && rebuilt_chunks == 0 {
        String::new()
    } else {
        let mut parts = Vec::new();
        if !absent.is_empty() {
            parts.push(format!("{} chunk file(s) unusable", absent.len()));
        }
        if damaged_files > 0 {
            parts.push(format!(
                "{damaged_files} chunk file(s) with damaged stripes"
            ));
        }
        parts.push(format!(
            "{rebuilt_chunks} data chunk(s) rebuilt from parity"
        ));
        format!(" ({})", parts.join(", "))
    };
    println!(
        "decoded {} bytes of {code} from {} into {}{degraded}",
        header.file_bytes,
        a.dir.display(),
        out_path.display()
    );
    Ok(())
}

/// Stripes whose parity chunk disagrees with the parity of the stripe's data.
#[derive(Debug, Default)]
struct Mismatch {
    count: u64,
    first: Option<u64>,
}

pub fn verify(a: VerifyArgs) -> Result<()> {
    let mut set = scan(&a.dir)?;
    let header = set.header;
    let code = header.code;
    let codec = Codec::new(code);
    let (k, n) = (code.k(), code.n());
    let layout = header.layout();
    let stripes = layout.stripe_count();
    println!(
        "{}: {} bytes encoded with {code}, chunk_bytes {}, {stripes} stripe(s)",
        a.dir.display(),
        header.file_bytes,
        header.chunk_bytes
    );
    for note in &set.notes {
        println!("note: {note}");
    }

    let absent = set.absent();
    // Stripes at or past `end` have no record in any file (every file is shorter): they are
    // counted in one step, however many the header claims.
    let held: Vec<u64> = set
        .sources
        .iter()
        .map(|source| match source {
            Source::Present { len, .. } => layout.complete_stripes(*len),
            Source::Absent(_) => 0,
        })
        .collect();
    let end = held.iter().copied().max().unwrap_or(0);

    let mut damage: Vec<Damage> = vec![Damage::default(); n];
    let mut bufs: Vec<Vec<u8>> = vec![Vec::new(); n];
    let mut recomputed: Vec<Vec<u8>> = vec![Vec::new(); n - k];
    let mut mismatch: Vec<Mismatch> = (0..n).map(|_| Mismatch::default()).collect();
    let mut lost_stripes = 0u64;
    let mut first_lost: Option<(u64, Vec<usize>)> = None;
    let mut content_crc = 0u32;
    for s in 0..end {
        let c = layout.stripe_chunk_bytes(s);
        let mut state = Vec::with_capacity(n);
        for i in 0..n {
            state.push(load(
                &mut set.sources,
                &mut damage,
                &layout,
                s,
                i,
                &mut bufs,
            )?);
        }
        let erased: Vec<usize> = (0..n).filter(|&i| state[i] != State::Good).collect();
        if !codec.is_recoverable(&erased) {
            lost_stripes += 1;
            first_lost.get_or_insert((s, erased));
            continue;
        }
        // Decode the data (without writing it) for the whole-file checksum.
        let wanted: Vec<usize> = erased.iter().copied().filter(|&i| i < k).collect();
        if !wanted.is_empty() {
            let good: Vec<usize> = (0..n).filter(|&i| state[i] == State::Good).collect();
            let inputs = codec.repair_set(&good, &wanted)?;
            rebuild(&codec, &mut bufs, &inputs, &wanted, c)?;
        }
        let mut left = layout.stripe_data_bytes(s);
        for buf in &bufs[..k] {
            let take = left.min(c);
            content_crc = crc32c::crc32c_append(content_crc, &buf[..take]);
            left -= take;
        }
        // Re-encode and compare every parity chunk that was read.
        for r in &mut recomputed {
            grow(r, c, "a recomputed parity chunk")?;
        }
        {
            let data: Vec<&[u8]> = bufs[..k].iter().map(|b| &b[..c]).collect();
            let mut parity: Vec<&mut [u8]> = recomputed.iter_mut().map(|r| &mut r[..c]).collect();
            codec.encode(&data, &mut parity)?;
        }
        for p in (k..n).filter(|&p| state[p] == State::Good) {
            if bufs[p][..c] != recomputed[p - k][..c] {
                let m = &mut mismatch[p];
                m.count += 1;
                m.first.get_or_insert(s);
            }
        }
    }
    if end < stripes {
        lost_stripes += stripes - end;
        first_lost.get_or_insert((end, (0..n).collect()));
        for (i, source) in set.sources.iter().enumerate() {
            if let Source::Present { .. } = source {
                damage[i].record_run(end, stripes - end, "file ends before this stripe".into());
            }
        }
    }

    let mut unusable = 0;
    for (i, source) in set.sources.iter().enumerate() {
        let name = chunk_file_name(i);
        let d = &damage[i];
        match source {
            Source::Absent(why) => {
                unusable += 1;
                println!("{name}  {why}");
            }
            Source::Present {
                name: file_name, ..
            } => {
                let shown = if *file_name == name {
                    String::new()
                } else {
                    format!(" (file {file_name})")
                };
                if d.count == 0 {
                    println!("{name}  ok{shown}");
                } else {
                    unusable += 1;
                    println!(
                        "{name}  corrupt: {} of {stripes} stripe(s) fail{shown}{}",
                        d.count,
                        d.describe()
                    );
                }
            }
        }
    }
    println!(
        "checked: the header and every stripe record's crc32c of each chunk file; the data \
         decoded (not written) against the whole-file crc32c; each parity chunk read against \
         the parity re-encoded from the stripe's data"
    );
    // The whole-file pattern decides only for an empty file (no stripes).
    let recoverable = lost_stripes == 0 && codec.is_recoverable(&absent);
    if !recoverable {
        let detail = match first_lost {
            Some((s, erased)) => format!(
                "; {lost_stripes} stripe(s) lost, the first is stripe {s} with chunks {erased:?} unusable"
            ),
            None => format!("; chunks {absent:?} unusable"),
        };
        bail!("not recoverable: too few good chunks for {code}{detail}");
    }
    let mut inconsistent = Vec::new();
    for (p, m) in mismatch.iter().enumerate() {
        if let Some(first) = m.first {
            inconsistent.push(format!(
                "{} differs from the parity of the data in {} stripe(s), the first is stripe {first}",
                chunk_file_name(p),
                m.count
            ));
        }
    }
    if !inconsistent.is_empty() {
        bail!(
            "parity inconsistent with the data although every record checksum passed (written \
             wrongly, or data and parity chunks of different encodes):\n  {}",
            inconsistent.join("\n  ")
        );
    }
    if content_crc != header.content_crc32c {
        bail!(
            "decoded data fails the whole-file check: crc32c {content_crc:#010x}, the chunk headers record {:#010x}",
            header.content_crc32c
        );
    }
    if unusable == 0 {
        println!(
            "status: ok: all {n} chunk files intact, parity consistent, content crc32c {:#010x} matches",
            header.content_crc32c
        );
    } else {
        println!(
            "status: degraded but recoverable: {unusable} of {n} chunk files missing or damaged; \
             the data decodes and matches its crc32c {:#010x}; `inec decode` rebuilds the file",
            header.content_crc32c
        );
    }
    Ok(())
}
