//! Streaming decode: the chunk files of one encoded file back to its bytes.

use std::io::{Read, Seek, Write};

use crate::chunk_file::{chunk_file_name, ChunkHeader};
use codes::Codec;

use crate::set::{rebuild, ChunkSet, Damage, Source, State};
use crate::stripe::check_stripe;
use crate::FileError;

/// How a decode went.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DecodeReport {
    pub header: ChunkHeader,
    /// Chunk indices with no usable file.
    pub unusable: Vec<usize>,
    /// Damaged stripes per chunk index.
    pub damage: Vec<Damage>,
    /// Data chunks computed from parity instead of read.
    pub rebuilt_chunks: u64,
    /// Chunks left out because their content disagreed with the rest (check mode only):
    /// (chunk index, stripes).
    pub inconsistent: Vec<(usize, u64)>,
}

/// How [`decode_stream`] reads each stripe.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum DecodeMode {
    /// Read the data chunks, and parity only for what is missing or damaged (the fast path).
    #[default]
    Fast,
    /// Read every chunk of every stripe, compare the parity with the data and leave out the
    /// one chunk that disagrees (a chunk altered with a valid record checksum).
    Checked,
}

/// Writes the file held by `set` to `out`, stripe by stripe, rebuilding what is missing or
/// damaged; calls `progress` with the bytes written so far after each stripe. Fails with
/// [`FileError::ContentMismatch`] at the end if the bytes written do not match the headers'
/// CRC32C: the caller must then discard what was written.
pub fn decode_stream<R: Read + Seek, W: Write>(
    set: &mut ChunkSet<R>,
    out: &mut W,
    mode: DecodeMode,
    progress: &mut dyn FnMut(u64),
) -> Result<DecodeReport, FileError> {
    let header = set.header;
    let code = header.code;
    let codec = Codec::new(code);
    let (k, n) = (code.k(), code.n());
    let layout = header.layout();
    set.check_recoverable()?;

    let mut bufs: Vec<Vec<u8>> = vec![Vec::new(); n];
    let mut scratch = Vec::new();
    let mut parity = Vec::new();
    let mut damage: Vec<Damage> = vec![Damage::default(); n];
    let mut inconsistent: Vec<u64> = vec![0; n];
    let mut rebuilt_chunks = 0u64;
    let mut content_crc = 0u32;
    let mut written = 0u64;
    let stripes = layout.stripe_count();
    for s in 0..stripes {
        let c = layout.stripe_chunk_bytes(s);
        let mut state = vec![State::NotRead; n];
        match mode {
            DecodeMode::Checked => {
                for (i, st) in state.iter_mut().enumerate() {
                    *st = set.load(&mut damage, s, i, &mut bufs)?;
                }
                let check = check_stripe(&codec, &mut bufs, &state, c, &mut scratch, &mut parity)?;
                if check.lost {
                    return Err(FileError::StripeUnrecoverable {
                        stripe: s,
                        stripes,
                        source: Box::new(codes::CodeError::Unrecoverable {
                            code: code.to_string(),
                            erased: (0..n).filter(|&i| state[i] != State::Good).collect(),
                        }),
                        details: set.describe_bad(&state),
                    });
                }
                if check.unresolved {
                    return Err(FileError::StripeInconsistent {
                        stripe: s,
                        stripes,
                        parity: check
                            .mismatched
                            .iter()
                            .map(|&p| chunk_file_name(p))
                            .collect::<Vec<_>>()
                            .join(", "),
                    });
                }
                if let Some(i) = check.culprit {
                    inconsistent[i] += 1;
                }
                rebuilt_chunks += (0..k)
                    .filter(|&j| state[j] != State::Good || check.culprit == Some(j))
                    .count() as u64;
            }
            DecodeMode::Fast => {
                for (j, st) in state.iter_mut().enumerate().take(k) {
                    *st = set.load(&mut damage, s, j, &mut bufs)?;
                }
                let wanted: Vec<usize> = (0..k).filter(|&j| state[j] != State::Good).collect();
                if !wanted.is_empty() {
                    // Read the repair set; a member that turns out bad is dropped and the set
                    // chosen again from what is left.
                    let inputs = loop {
                        let available: Vec<usize> = (0..n)
                            .filter(|&i| match &state[i] {
                                State::Good => true,
                                State::NotRead => {
                                    matches!(set.sources[i], Source::Present { .. })
                                }
                                State::Bad(_) => false,
                            })
                            .collect();
                        let inputs = codec.repair_set(&available, &wanted).map_err(|e| {
                            FileError::StripeUnrecoverable {
                                stripe: s,
                                stripes,
                                source: Box::new(e),
                                details: set.describe_bad(&state),
                            }
                        })?;
                        let mut all_good = true;
                        for &i in &inputs {
                            if state[i] == State::NotRead {
                                state[i] = set.load(&mut damage, s, i, &mut bufs)?;
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
            }
        }
        let mut left = layout.stripe_data_bytes(s);
        for buf in &bufs[..k] {
            let take = left.min(c);
            out.write_all(&buf[..take])
                .map_err(FileError::stream("cannot write the decoded file"))?;
            content_crc = crc32c::crc32c_append(content_crc, &buf[..take]);
            left -= take;
            written += take as u64;
        }
        progress(written);
    }
    out.flush()
        .map_err(FileError::stream("cannot write the decoded file"))?;
    if content_crc != header.content_crc32c {
        return Err(FileError::ContentMismatch {
            computed: content_crc,
            recorded: header.content_crc32c,
            hint: String::new(),
        });
    }
    Ok(DecodeReport {
        header,
        unusable: set.absent(),
        damage,
        rebuilt_chunks,
        inconsistent: inconsistent
            .iter()
            .enumerate()
            .filter(|(_, &c)| c > 0)
            .map(|(i, &c)| (i, c))
            .collect(),
    })
}
