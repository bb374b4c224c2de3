//! Streaming encode: a byte stream of known length to n chunk streams.

use std::io::{Read, Seek, SeekFrom, Write};

use crate::chunk_file::{
    stripe_crc32c, ChunkHeader, StripeLayout, HEADER_BYTES, RECORD_TRAILER_BYTES,
};
use codes::{Code, Codec};

use crate::buf::{read_full, try_zeroed};
use crate::{FileError, MAX_STRIPE_BUFFER_BYTES};

/// What an encode wrote.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EncodeSummary {
    pub code: Code,
    pub chunk_bytes: usize,
    pub file_bytes: u64,
    pub stripes: u64,
    pub content_crc32c: u32,
    /// Length of every chunk file.
    pub chunk_file_bytes: u64,
}

impl EncodeSummary {
    /// Bytes of chunk-record checksums per byte of chunk payload in a full stripe
    /// (`4 / chunk_bytes`), or in the one stripe of a file smaller than a stripe.
    pub fn record_overhead(&self) -> f64 {
        let layout = StripeLayout::new(self.code.k(), self.chunk_bytes, self.file_bytes);
        let c = layout.stripe_chunk_bytes(0).max(1);
        RECORD_TRAILER_BYTES as f64 / c as f64
    }
}

/// Checks a code and chunk size for an encode: the stripe buffers (n · `chunk_bytes`) within
/// [`MAX_STRIPE_BUFFER_BYTES`] and the header fields within the format's limits.
pub fn check_params(code: Code, chunk_bytes: usize, file_bytes: u64) -> Result<(), FileError> {
    let n = code.n();
    let bytes = n as u64 * chunk_bytes as u64;
    if bytes > MAX_STRIPE_BUFFER_BYTES {
        return Err(FileError::StripeBuffersTooLarge {
            chunk_bytes,
            n,
            code: code.to_string(),
            bytes,
            max: MAX_STRIPE_BUFFER_BYTES,
        });
    }
    ChunkHeader::new(code, n - 1, chunk_bytes, file_bytes, 0)?;
    Ok(())
}

/// Encodes the `file_bytes` bytes of `input` into `outputs` (one per chunk index, n of them,
/// each positioned at its start): a zeroed header, the stripe records, and at the end the real
/// header written over the zeroed one (it holds the content CRC32C, known only then). Memory:
/// n chunks of one stripe. `progress` gets the input bytes done after each stripe. The
/// outputs are not flushed or synced.
pub fn encode_stream<R: Read, W: Write + Seek>(
    code: Code,
    chunk_bytes: usize,
    file_bytes: u64,
    input: &mut R,
    outputs: &mut [W],
    progress: &mut dyn FnMut(u64),
) -> Result<EncodeSummary, FileError> {
    check_params(code, chunk_bytes, file_bytes)?;
    let (k, n) = (code.k(), code.n());
    assert_eq!(outputs.len(), n, "one output per chunk index");
    let codec = Codec::new(code);
    let layout = StripeLayout::new(k, chunk_bytes, file_bytes);
    // The first stripe has the largest chunks: `chunk_bytes`, or less for a small file.
    let buffer_chunk_bytes = layout.stripe_chunk_bytes(0);
    let mut data = try_zeroed(k * buffer_chunk_bytes, "the data chunks of a stripe")?;
    let mut parity = try_zeroed(
        (n - k) * buffer_chunk_bytes,
        "the parity chunks of a stripe",
    )?;
    let write_err = FileError::stream;
    for w in outputs.iter_mut() {
        w.write_all(&[0u8; HEADER_BYTES])
            .map_err(write_err("cannot write a chunk file"))?;
    }

    let mut content_crc = 0u32;
    let mut done = 0u64;
    for s in 0..layout.stripe_count() {
        let len = layout.stripe_data_bytes(s);
        let c = layout.stripe_chunk_bytes(s);
        let got = read_full(input, &mut data[..len])
            .map_err(FileError::stream("cannot read the input"))?;
        if got != len {
            return Err(FileError::InputShrank {
                expected: file_bytes,
                got: done + got as u64,
            });
        }
        done += len as u64;
        content_crc = crc32c::crc32c_append(content_crc, &data[..len]);
        data[len..k * c].fill(0);
        let data_chunks: Vec<&[u8]> = data[..k * c].chunks_exact(c).collect();
        let mut parity_chunks: Vec<&mut [u8]> = parity[..(n - k) * c].chunks_exact_mut(c).collect();
        codec.encode(&data_chunks, &mut parity_chunks)?;
        let all = data_chunks
            .iter()
            .copied()
            .chain(parity_chunks.iter().map(|p| &**p));
        for (i, (payload, w)) in all.zip(outputs.iter_mut()).enumerate() {
            w.write_all(payload)
                .and_then(|()| w.write_all(&stripe_crc32c(i, s, payload).to_le_bytes()))
                .map_err(write_err("cannot write a chunk file"))?;
        }
        progress(done);
    }
    let more =
        read_full(input, &mut [0u8; 1]).map_err(FileError::stream("cannot read the input"))?;
    if more != 0 {
        return Err(FileError::InputGrew {
            expected: file_bytes,
        });
    }
    for (i, w) in outputs.iter_mut().enumerate() {
        let header = ChunkHeader::new(code, i, chunk_bytes, file_bytes, content_crc)?;
        w.seek(SeekFrom::Start(0))
            .and_then(|_| w.write_all(&header.to_bytes()))
            .map_err(write_err("cannot write a chunk file header"))?;
    }
    Ok(EncodeSummary {
        code,
        chunk_bytes,
        file_bytes,
        stripes: layout.stripe_count(),
        content_crc32c: content_crc,
        chunk_file_bytes: layout.chunk_file_bytes(),
    })
}
