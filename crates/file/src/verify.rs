//! Verify: read every record of every chunk file, decode the data without writing it, compare
//! the parity with the data, and say whether the file is intact, degraded but recoverable, or
//! lost.

use std::io::{Read, Seek};

use crate::chunk_file::{chunk_file_name, ChunkHeader};
use codes::Codec;

use crate::set::{ChunkSet, Damage, Source, State};
use crate::stripe::check_stripe;
use crate::FileError;

/// The verdict of a verify.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Status {
    /// Every chunk file intact, the parity consistent, the content checksum matches.
    Intact,
    /// Some chunk files missing, damaged or inconsistent, but every stripe decodes and the
    /// content checksum matches.
    Degraded,
    /// At least one stripe cannot be decoded, or the decoded data fails its checksum.
    Lost,
}

/// What verify found in one chunk index.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ChunkState {
    /// No usable file (why).
    Absent(String),
    /// Present; `file` is the file's name when it differs from the chunk's (renamed).
    Present {
        file: Option<String>,
        /// Stripes whose record is missing or fails its checksum.
        damage: Damage,
        /// Stripes where this chunk alone disagrees with the others although its record
        /// checksum passes (found by leaving each chunk out): (count, first stripe).
        inconsistent: Option<(u64, u64)>,
    },
}

impl ChunkState {
    /// Whether the chunk file is whole and agrees with the others.
    pub fn is_ok(&self) -> bool {
        matches!(
            self,
            ChunkState::Present {
                damage,
                inconsistent: None,
                ..
            } if damage.count == 0
        )
    }
}

/// Everything a verify found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VerifyReport {
    pub header: ChunkHeader,
    pub stripes: u64,
    /// Indexed by chunk index.
    pub chunks: Vec<ChunkState>,
    /// Stripes that cannot be decoded, and the first with the chunks unusable in it.
    pub lost_stripes: u64,
    pub first_lost: Option<(u64, Vec<usize>)>,
    /// Stripes whose chunks disagree with no single chunk to blame, and the parity chunks that
    /// differed in the first of them.
    pub unresolved_stripes: u64,
    pub first_unresolved: Option<(u64, Vec<usize>)>,
    /// CRC32C of the decoded data (over the stripes that decoded).
    pub content_crc32c: u32,
}

impl VerifyReport {
    pub fn status(&self) -> Status {
        if self.first_lost.is_some()
            || self.unresolved_stripes > 0
            || self.content_crc32c != self.header.content_crc32c
        {
            Status::Lost
        } else if self.chunks.iter().all(ChunkState::is_ok) {
            Status::Intact
        } else {
            Status::Degraded
        }
    }

    /// Chunk indices that are not intact.
    pub fn unusable(&self) -> Vec<usize> {
        (0..self.chunks.len())
            .filter(|&i| !self.chunks[i].is_ok())
            .collect()
    }

    /// Why the file is lost, in one sentence (empty if it is not).
    pub fn why_lost(&self) -> String {
        let code = self.header.code;
        if let Some((s, erased)) = &self.first_lost {
            let names: Vec<String> = erased.iter().map(|&i| chunk_file_name(i)).collect();
            if self.lost_stripes == 0 {
                return format!(
                    "too few good chunks for {code}: {} unusable",
                    names.join(", ")
                );
            }
            format!(
                "too few good chunks for {code}: {} stripe(s) lost, the first is stripe {s} \
                 with {} unusable",
                self.lost_stripes,
                names.join(", ")
            )
        } else if let Some((s, parity)) = &self.first_unresolved {
            let names: Vec<String> = parity.iter().map(|&i| chunk_file_name(i)).collect();
            format!(
                "in {} stripe(s) the parity differs from the data although every record \
                 checksum passed, and no single chunk explains it (written wrongly, or chunks \
                 of different encodes); the first is stripe {s}, where {} differ",
                self.unresolved_stripes,
                names.join(", ")
            )
        } else if self.content_crc32c != self.header.content_crc32c {
            format!(
                "the decoded data fails the whole-file check: crc32c {:#010x}, the chunk \
                 headers record {:#010x}",
                self.content_crc32c, self.header.content_crc32c
            )
        } else {
            String::new()
        }
    }
}

/// Reads every record of `set`, calling `progress` with the stripes done.
pub fn verify<R: Read + Seek>(
    set: &mut ChunkSet<R>,
    progress: &mut dyn FnMut(u64),
) -> Result<VerifyReport, FileError> {
    let header = set.header;
    let code = header.code;
    let codec = Codec::new(code);
    let (k, n) = (code.k(), code.n());
    let layout = header.layout();
    let stripes = layout.stripe_count();

    // Stripes at or past `end` have no record in any file (every file is shorter): they are
    // counted in one step, however many the header claims.
    let end = set
        .sources
        .iter()
        .map(|source| match source {
            Source::Present { len, .. } => layout.complete_stripes(*len),
            Source::Absent(_) => 0,
        })
        .max()
        .unwrap_or(0);

    let mut damage: Vec<Damage> = vec![Damage::default(); n];
    let mut inconsistent: Vec<Option<(u64, u64)>> = vec![None; n];
    let mut bufs: Vec<Vec<u8>> = vec![Vec::new(); n];
    let mut scratch = Vec::new();
    let mut parity = Vec::new();
    let mut report = VerifyReport {
        header,
        stripes,
        chunks: Vec::new(),
        lost_stripes: 0,
        first_lost: None,
        unresolved_stripes: 0,
        first_unresolved: None,
        content_crc32c: 0,
    };
    let mut content_crc = 0u32;
    for s in 0..end {
        let c = layout.stripe_chunk_bytes(s);
        let mut state = Vec::with_capacity(n);
        for i in 0..n {
            state.push(set.load(&mut damage, s, i, &mut bufs)?);
        }
        let check = check_stripe(&codec, &mut bufs, &state, c, &mut scratch, &mut parity)?;
        if check.lost {
            report.lost_stripes += 1;
            report
                .first_lost
                .get_or_insert_with(|| (s, (0..n).filter(|&i| state[i] != State::Good).collect()));
            continue;
        }
        if check.unresolved {
            report.unresolved_stripes += 1;
            report
                .first_unresolved
                .get_or_insert_with(|| (s, check.mismatched.clone()));
            continue;
        }
        if let Some(i) = check.culprit {
            let e = inconsistent[i].get_or_insert((0, s));
            e.0 += 1;
        }
        let mut left = layout.stripe_data_bytes(s);
        for buf in &bufs[..k] {
            let take = left.min(c);
            content_crc = crc32c::crc32c_append(content_crc, &buf[..take]);
            left -= take;
        }
        progress(s + 1);
    }
    if end < stripes {
        report.lost_stripes += stripes - end;
        report
            .first_lost
            .get_or_insert_with(|| (end, (0..n).collect()));
        for (i, source) in set.sources.iter().enumerate() {
            if let Source::Present { .. } = source {
                damage[i].record_run(end, stripes - end, "file ends before this stripe".into());
            }
        }
    }
    progress(stripes);
    report.content_crc32c = content_crc;
    if stripes == 0 && !codec.is_recoverable(&set.absent()) {
        // An empty file has no stripe to lose; the whole-file pattern decides.
        report.first_lost = Some((0, set.absent()));
        report.lost_stripes = 0;
    }
    report.chunks = set
        .sources
        .iter()
        .enumerate()
        .map(|(i, source)| match source {
            Source::Absent(why) => ChunkState::Absent(why.clone()),
            Source::Present { name, .. } => ChunkState::Present {
                file: (*name != chunk_file_name(i)).then(|| name.clone()),
                damage: damage[i].clone(),
                inconsistent: inconsistent[i],
            },
        })
        .collect();
    Ok(report)
}
