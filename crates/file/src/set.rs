//! The chunk files of one encoded file, as found: which chunk index each holds, which are
//! missing or unusable and why, and reading one stripe's record of one chunk.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::io::{Read, Seek, SeekFrom};

use crate::chunk_file::{
    check_record, chunk_file_name, ChunkFileError, ChunkHeader, StripeLayout, HEADER_BYTES,
    RECORD_TRAILER_BYTES,
};
use codes::Codec;

use crate::buf::{grow, read_full};
use crate::FileError;

/// One file that may be a chunk file: the index its name gives, and the opened file with its
/// length (or why it could not be opened).
#[derive(Debug)]
pub struct Candidate<R> {
    /// The chunk index in the file's name (`chunk-NNN`).
    pub name_index: usize,
    /// The opened file and its length in bytes, or why it could not be opened.
    pub source: std::io::Result<(R, u64)>,
}

/// One chunk index of the encoded file as found.
#[derive(Debug)]
pub enum Source<R> {
    /// A file with a valid header of the chosen set; `len` bounds what can be read from it
    /// (records past it are missing without reading or allocating anything).
    Present {
        /// The file's name (differs from the chunk's name for a renamed file).
        name: String,
        reader: R,
        len: u64,
    },
    /// No usable file; the reason says why (no file, bad header, another encode's file, …).
    Absent(String),
}

/// The chunk files of one encoded file.
#[derive(Debug)]
pub struct ChunkSet<R> {
    /// The header every member shares (its `chunk_index` is that of one member).
    pub header: ChunkHeader,
    /// Indexed by chunk index, `code.n()` entries.
    pub sources: Vec<Source<R>>,
    /// Things found on the way that do not stop decoding (ignored files, trailing bytes).
    pub notes: Vec<String>,
}

impl<R: Read + Seek> ChunkSet<R> {
    /// Reads every candidate's header and keeps the encoded file most candidates agree on.
    /// `place` names where the candidates were found, for messages.
    pub fn scan(
        place: &std::path::Path,
        candidates: Vec<Candidate<R>>,
    ) -> Result<ChunkSet<R>, FileError> {
        if candidates.is_empty() {
            return Err(FileError::NoChunkFiles(place.to_path_buf()));
        }
        let mut headers: Vec<(usize, R, u64, ChunkHeader)> = Vec::new();
        let mut bad: BTreeMap<usize, String> = BTreeMap::new();
        for c in candidates {
            let opened = c.source.map_err(|e| format!("cannot read: {e}"));
            let parsed = opened.and_then(|(mut r, len)| {
                let mut buf = [0u8; HEADER_BYTES];
                let got = r
                    .seek(SeekFrom::Start(0))
                    .and_then(|_| read_full(&mut r, &mut buf))
                    .map_err(|e| format!("cannot read: {e}"))?;
                let h =
                    ChunkHeader::parse(&buf[..got]).map_err(|e| format!("corrupt header: {e}"))?;
                Ok((r, len, h))
            });
            match parsed {
                Ok((r, len, h)) => headers.push((c.name_index, r, len, h)),
                Err(why) => {
                    bad.insert(c.name_index, why);
                }
            }
        }
        let Some(header) = majority(headers.iter().map(|x| &x.3)) else {
            let mut details = String::new();
            for (i, why) in &bad {
                let _ = write!(details, "\n  {}: {why}", chunk_file_name(*i));
            }
            return Err(FileError::NoReadableChunkFile {
                dir: place.to_path_buf(),
                details,
            });
        };

        let n = header.code.n();
        let layout = header.layout();
        let mut notes = Vec::new();
        let mut chosen: Vec<Option<(String, R, u64)>> = (0..n).map(|_| None).collect();
        let mut foreign: BTreeMap<usize, String> = BTreeMap::new();
        for (name_index, r, len, h) in headers {
            let name = chunk_file_name(name_index);
            if !h.same_file(&header) {
                let why = format!(
                    "a chunk file of another encoded file ({}, {} bytes, content crc32c {:#010x}), ignored",
                    h.code, h.file_bytes, h.content_crc32c
                );
                notes.push(format!("{name}: {why}"));
                foreign.insert(name_index, why);
                continue;
            }
            let i = h.chunk_index;
            // The header's index is authoritative; a renamed file is still used.
            match &chosen[i] {
                Some((other, _, _)) if name_index != i => {
                    notes.push(format!("{name}: holds chunk {i} like {other}, ignored"))
                }
                _ => {
                    if name_index != i {
                        notes.push(format!("{name}: holds chunk {i} (renamed?), used as such"));
                    }
                    chosen[i] = Some((name, r, len));
                }
            }
        }
        let expected_bytes = layout.chunk_file_bytes();
        let mut sources = Vec::with_capacity(n);
        for (i, c) in chosen.into_iter().enumerate() {
            let source = match c {
                Some((name, reader, len)) => {
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
                    Source::Present { name, reader, len }
                }
                None => Source::Absent(
                    bad.remove(&i)
                        .or_else(|| foreign.remove(&i))
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

    /// Chunk indices with no usable file.
    pub fn absent(&self) -> Vec<usize> {
        (0..self.sources.len())
            .filter(|&i| matches!(self.sources[i], Source::Absent(_)))
            .collect()
    }

    /// One line per absent chunk: `\n  chunk-NNN: why`.
    pub fn describe_absent(&self) -> String {
        let mut out = String::new();
        for (i, s) in self.sources.iter().enumerate() {
            if let Source::Absent(why) = s {
                let _ = write!(out, "\n  {}: {why}", chunk_file_name(i));
            }
        }
        out
    }

    /// Fails if the absent chunks already make the file unrecoverable (checked before any
    /// output is created).
    pub fn check_recoverable(&self) -> Result<(), FileError> {
        let absent = self.absent();
        if Codec::new(self.header.code).is_recoverable(&absent) {
            return Ok(());
        }
        Err(FileError::Unrecoverable {
            unusable: absent.len(),
            n: self.sources.len(),
            code: self.header.code.to_string(),
            details: self.describe_absent(),
        })
    }

    /// Reads stripe `s` of chunk `i` into `bufs[i]` and says whether it can be used; damage
    /// is recorded against the chunk.
    pub(crate) fn load(
        &mut self,
        damage: &mut [Damage],
        s: u64,
        i: usize,
        bufs: &mut [Vec<u8>],
    ) -> Result<State, FileError> {
        let layout = self.header.layout();
        Ok(match &mut self.sources[i] {
            Source::Absent(why) => State::Bad(why.clone()),
            Source::Present { reader, len, .. } => {
                match read_record(reader, *len, &layout, i, s, &mut bufs[i])? {
                    Ok(()) => State::Good,
                    Err(why) => {
                        damage[i].record(s, why.clone());
                        State::Bad(why)
                    }
                }
            }
        })
    }

    /// Every chunk that cannot be used in a stripe whose states are `state`: those found bad
    /// and those with no file (not read), one line each.
    pub(crate) fn describe_bad(&self, state: &[State]) -> String {
        let mut out = String::new();
        for (i, st) in state.iter().enumerate() {
            let why = match (st, &self.sources[i]) {
                (State::Bad(why), _) | (State::NotRead, Source::Absent(why)) => why,
                _ => continue,
            };
            let _ = write!(out, "\n  {}: {why}", chunk_file_name(i));
        }
        out
    }
}

/// The header shared by the most files (ties: the first group found).
fn majority<'a>(headers: impl Iterator<Item = &'a ChunkHeader> + Clone) -> Option<ChunkHeader> {
    let mut best: Option<(usize, ChunkHeader)> = None;
    for h in headers.clone() {
        let votes = headers.clone().filter(|o| o.same_file(h)).count();
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
    file: &mut (impl Read + Seek),
    file_len: u64,
    layout: &StripeLayout,
    index: usize,
    s: u64,
    buf: &mut Vec<u8>,
) -> Result<Result<(), String>, FileError> {
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
pub(crate) enum State {
    NotRead,
    Good,
    Bad(String),
}

/// Damage seen in one chunk file while streaming: how many stripes, and the first few with
/// the reason.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Damage {
    /// Damaged stripes of this chunk.
    pub count: u64,
    /// The first few: (stripe, "stripe S: why").
    pub first: Vec<(u64, String)>,
}

impl Damage {
    pub(crate) fn record(&mut self, s: u64, why: String) {
        self.record_run(s, 1, why);
    }

    /// `count` consecutive stripes from `s`, counted in one step.
    pub(crate) fn record_run(&mut self, s: u64, count: u64, why: String) {
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

    /// `; stripe 3: why; stripe 9: why; …`
    pub fn describe(&self) -> String {
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

/// Computes chunks `wanted` of one stripe (chunk size `c`) from chunks `inputs`, all in
/// `bufs`; the two lists are disjoint.
pub(crate) fn rebuild(
    codec: &Codec,
    bufs: &mut [Vec<u8>],
    inputs: &[usize],
    wanted: &[usize],
    c: usize,
) -> Result<(), FileError> {
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

/// Names of a list, at most eight shown.
pub fn name_list(names: impl Iterator<Item = String>) -> String {
    let names: Vec<String> = names.collect();
    if names.len() > 8 {
        format!("{}, … ({} in all)", names[..8].join(", "), names.len())
    } else {
        names.join(", ")
    }
}
