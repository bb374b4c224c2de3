//! The chunk file format: what `inec encode` writes and `inec decode` reads
//! (the byte layout is specified in `docs/chunk-format.md`).
//!
//! A file encoded with a code of n chunks becomes n chunk files. Chunk file i holds chunk i of
//! every stripe of the file: a fixed [`HEADER_BYTES`]-byte [`ChunkHeader`], then one record per
//! stripe — the chunk's payload followed by a CRC32C that covers the stripe index, the chunk
//! index and the payload ([`stripe_crc32c`]). Every size in the file follows from the header
//! ([`StripeLayout`]), so a truncated or damaged file is detected record by record.
//!
//! This module is pure: it turns headers into bytes and back and checks records; it does no
//! I/O.
//!
//! ```
//! use file::chunk_file::{ChunkHeader, HEADER_BYTES};
//! use codes::{Code, MatrixKind};
//!
//! let code = Code::Rs { k: 4, m: 2, matrix: MatrixKind::Cauchy };
//! let header = ChunkHeader::new(code, 5, 4096, 10_000, 0x1234_5678).unwrap();
//! let bytes = header.to_bytes();
//! assert_eq!(bytes.len(), HEADER_BYTES);
//! assert_eq!(ChunkHeader::parse(&bytes).unwrap(), header);
//! // 10 000 bytes fit in one stripe of 4 × 4096, so it uses chunks of ⌈10 000 / 4⌉ bytes.
//! let layout = header.layout();
//! assert_eq!(layout.stripe_count(), 1);
//! assert_eq!(layout.stripe_chunk_bytes(0), 2500);
//! ```

use codes::{Code, CodeError, MatrixKind};

/// The first eight bytes of every chunk file.
pub const MAGIC: [u8; 8] = *b"INECCHNK";
/// The format version this module writes and the only one it reads.
pub const VERSION: u16 = 1;
/// Size of the version-1 header.
pub const HEADER_BYTES: usize = 64;
/// Size of the CRC32C that follows every stripe's payload.
pub const RECORD_TRAILER_BYTES: usize = 4;
/// Largest `chunk_bytes` a header may carry (1 GiB).
pub const MAX_CHUNK_BYTES: usize = 1 << 30;
/// Largest `file_bytes` a header may carry (1 EiB). With it every offset and size of a chunk
/// file fits a u64 (at most 64 + 2^60 · 5 bytes for k = 1, `chunk_bytes` = 1), so the
/// arithmetic of [`StripeLayout`] cannot overflow for a valid header, however it was crafted.
pub const MAX_FILE_BYTES: u64 = 1 << 60;
/// Bytes of the header covered by its own checksum (everything before the checksum field).
const HEADER_CRC_OFFSET: usize = HEADER_BYTES - 4;

const KIND_RS_CAUCHY: u8 = 1;
const KIND_RS_VANDERMONDE: u8 = 2;
const KIND_LRC: u8 = 3;
const KIND_RS_CAUCHY_XOR: u8 = 4;

/// Byte ranges of header fields that version 1 leaves zero.
const RESERVED: [(usize, usize); 3] = [(13, 14), (22, 24), (48, 60)];

/// Why a header or a stripe record was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ChunkFileError {
    #[error("chunk file header truncated: have {have} bytes, need {need}")]
    Truncated { have: usize, need: usize },
    #[error("not a chunk file: magic is {found:02x?}, expected \"INECCHNK\"")]
    BadMagic { found: [u8; 8] },
    #[error("unsupported chunk file version {found} (this build reads version {supported})")]
    UnsupportedVersion { found: u16, supported: u16 },
    #[error("header checksum mismatch: stored {stored:#010x}, computed {computed:#010x}")]
    HeaderChecksum { stored: u32, computed: u32 },
    #[error("header length field is {found}, version 1 requires {expected}")]
    BadHeaderBytes { found: u16, expected: u16 },
    #[error("reserved header byte at offset {offset} is {value:#04x}, must be zero")]
    NonZeroReserved { offset: usize, value: u8 },
    #[error("unknown code kind {found} (1 = rs cauchy, 2 = rs vandermonde, 3 = lrc)")]
    BadCodeKind { found: u8 },
    #[error("invalid code in header: {0}")]
    BadCode(#[from] CodeError),
    #[error("chunk index {index} out of range for {code} ({n} chunks)")]
    ChunkIndexOutOfRange {
        index: usize,
        n: usize,
        code: String,
    },
    #[error("chunk_bytes {chunk_bytes} out of range 1..={max}")]
    BadChunkBytes { chunk_bytes: usize, max: usize },
    #[error("file_bytes {file_bytes} exceeds the limit of {max}")]
    FileTooLarge { file_bytes: u64, max: u64 },
    #[error("code parameter {value} does not fit the header's 16-bit field")]
    ParameterTooLarge { value: usize },
    #[error("header says {stored} stripes, but {file_bytes} bytes in chunks of {chunk_bytes} with k = {k} make {expected}")]
    StripeCountMismatch {
        stored: u64,
        expected: u64,
        file_bytes: u64,
        chunk_bytes: usize,
        k: usize,
    },
    #[error("stripe record of {len} bytes, expected {expected} (payload + 4-byte crc32c)")]
    RecordLength { len: usize, expected: usize },
    #[error("stripe {stripe_index} of chunk {chunk_index}: crc32c mismatch: stored {stored:#010x}, computed {computed:#010x}")]
    StripeChecksum {
        chunk_index: usize,
        stripe_index: u64,
        stored: u32,
        computed: u32,
    },
}

/// The header of one chunk file. Every chunk file of one encoded file carries the same header
/// apart from `chunk_index`; [`ChunkHeader::same_file`] compares the rest.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ChunkHeader {
    /// The code of every stripe (kind, matrix and parameters).
    pub code: Code,
    /// Which chunk of each stripe this file holds: `0..k` data, then parity (`< code.n()`).
    pub chunk_index: usize,
    /// Chunk size of every full stripe; only the last stripe may use smaller chunks.
    pub chunk_bytes: usize,
    /// Length of the original file; padding beyond it is dropped on decode.
    pub file_bytes: u64,
    /// CRC32C of the original file's `file_bytes` bytes: the end-to-end check of a decode, and
    /// what tells chunk files of two different files with equal parameters apart.
    pub content_crc32c: u32,
}

impl ChunkHeader {
    /// A header after checking every field against the format's limits.
    pub fn new(
        code: Code,
        chunk_index: usize,
        chunk_bytes: usize,
        file_bytes: u64,
        content_crc32c: u32,
    ) -> Result<ChunkHeader, ChunkFileError> {
        let header = ChunkHeader {
            code,
            chunk_index,
            chunk_bytes,
            file_bytes,
            content_crc32c,
        };
        header.validate()?;
        Ok(header)
    }

    fn validate(&self) -> Result<(), ChunkFileError> {
        let (_, a, b, c) = code_fields(&self.code);
        for value in [a, b, c, self.chunk_index] {
            if value > u16::MAX as usize {
                return Err(ChunkFileError::ParameterTooLarge { value });
            }
        }
        let n = self.code.n();
        if self.chunk_index >= n {
            return Err(ChunkFileError::ChunkIndexOutOfRange {
                index: self.chunk_index,
                n,
                code: self.code.to_string(),
            });
        }
        if self.chunk_bytes == 0 || self.chunk_bytes > MAX_CHUNK_BYTES {
            return Err(ChunkFileError::BadChunkBytes {
                chunk_bytes: self.chunk_bytes,
                max: MAX_CHUNK_BYTES,
            });
        }
        // The limit keeps the layout's arithmetic in range; the checked size is the proof.
        if self.file_bytes > MAX_FILE_BYTES || self.layout().try_chunk_file_bytes().is_none() {
            return Err(ChunkFileError::FileTooLarge {
                file_bytes: self.file_bytes,
                max: MAX_FILE_BYTES,
            });
        }
        Ok(())
    }

    /// Whether `other` belongs to the same encoded file (every field but `chunk_index` equal).
    pub fn same_file(&self, other: &ChunkHeader) -> bool {
        ChunkHeader {
            chunk_index: 0,
            ..*self
        } == ChunkHeader {
            chunk_index: 0,
            ..*other
        }
    }

    /// How the file is cut into stripes.
    pub fn layout(&self) -> StripeLayout {
        StripeLayout::new(self.code.k(), self.chunk_bytes, self.file_bytes)
    }

    /// The header's bytes, little-endian, ending with the header CRC32C.
    pub fn to_bytes(&self) -> [u8; HEADER_BYTES] {
        let (kind, a, b, c) = code_fields(&self.code);
        let mut out = [0u8; HEADER_BYTES];
        out[0..8].copy_from_slice(&MAGIC);
        out[8..10].copy_from_slice(&VERSION.to_le_bytes());
        out[10..12].copy_from_slice(&(HEADER_BYTES as u16).to_le_bytes());
        out[12] = kind;
        out[14..16].copy_from_slice(&(a as u16).to_le_bytes());
        out[16..18].copy_from_slice(&(b as u16).to_le_bytes());
        out[18..20].copy_from_slice(&(c as u16).to_le_bytes());
        out[20..22].copy_from_slice(&(self.chunk_index as u16).to_le_bytes());
        out[24..28].copy_from_slice(&(self.chunk_bytes as u32).to_le_bytes());
        out[28..32].copy_from_slice(&self.content_crc32c.to_le_bytes());
        out[32..40].copy_from_slice(&self.file_bytes.to_le_bytes());
        out[40..48].copy_from_slice(&self.layout().stripe_count().to_le_bytes());
        let crc = crc32c::crc32c(&out[..HEADER_CRC_OFFSET]);
        out[HEADER_CRC_OFFSET..].copy_from_slice(&crc.to_le_bytes());
        out
    }

    /// Parses and checks a header from the first bytes of a chunk file (`bytes` may be longer
    /// than the header; the rest is ignored).
    pub fn parse(bytes: &[u8]) -> Result<ChunkHeader, ChunkFileError> {
        if bytes.len() >= MAGIC.len() && bytes[..MAGIC.len()] != MAGIC {
            let mut found = [0u8; 8];
            found.copy_from_slice(&bytes[..8]);
            return Err(ChunkFileError::BadMagic { found });
        }
        if bytes.len() < HEADER_BYTES {
            return Err(ChunkFileError::Truncated {
                have: bytes.len(),
                need: HEADER_BYTES,
            });
        }
        let h = &bytes[..HEADER_BYTES];
        let version = u16_at(h, 8);
        if version != VERSION {
            return Err(ChunkFileError::UnsupportedVersion {
                found: version,
                supported: VERSION,
            });
        }
        let stored = u32_at(h, HEADER_CRC_OFFSET);
        let computed = crc32c::crc32c(&h[..HEADER_CRC_OFFSET]);
        if stored != computed {
            return Err(ChunkFileError::HeaderChecksum { stored, computed });
        }
        let header_bytes = u16_at(h, 10);
        if header_bytes as usize != HEADER_BYTES {
            return Err(ChunkFileError::BadHeaderBytes {
                found: header_bytes,
                expected: HEADER_BYTES as u16,
            });
        }
        for (start, end) in RESERVED {
            if let Some(pos) = h[start..end].iter().position(|&b| b != 0) {
                return Err(ChunkFileError::NonZeroReserved {
                    offset: start + pos,
                    value: h[start + pos],
                });
            }
        }
        let (a, b, c) = (
            u16_at(h, 14) as usize,
            u16_at(h, 16) as usize,
            u16_at(h, 18) as usize,
        );
        let code = match h[12] {
            KIND_RS_CAUCHY | KIND_RS_CAUCHY_XOR | KIND_RS_VANDERMONDE => {
                if c != 0 {
                    return Err(ChunkFileError::NonZeroReserved {
                        offset: 18,
                        value: h[18] | h[19],
                    });
                }
                let matrix = match h[12] {
                    KIND_RS_CAUCHY => MatrixKind::Cauchy,
                    KIND_RS_CAUCHY_XOR => MatrixKind::CauchyXor,
                    _ => MatrixKind::Vandermonde,
                };
                Code::rs_with(a, b, matrix)?
            }
            KIND_LRC => Code::lrc(a, b, c)?,
            found => return Err(ChunkFileError::BadCodeKind { found }),
        };
        let header = ChunkHeader::new(
            code,
            u16_at(h, 20) as usize,
            u32_at(h, 24) as usize,
            u64_at(h, 32),
            u32_at(h, 28),
        )?;
        let stored_stripes = u64_at(h, 40);
        let layout = header.layout();
        if stored_stripes != layout.stripe_count() {
            return Err(ChunkFileError::StripeCountMismatch {
                stored: stored_stripes,
                expected: layout.stripe_count(),
                file_bytes: header.file_bytes,
                chunk_bytes: header.chunk_bytes,
                k: code.k(),
            });
        }
        Ok(header)
    }
}

/// How a file of `file_bytes` bytes is cut into stripes of k chunks of `chunk_bytes`, and
/// where each stripe's record sits in a chunk file.
///
/// Every stripe but the last holds `k · chunk_bytes` bytes of the file. The last stripe holds
/// the remaining L bytes (0 < L ≤ k · chunk_bytes) in chunks of ⌈L / k⌉ bytes, data chunk j
/// taking bytes `j·⌈L/k⌉ ..` of it, zero-padded at the end. An empty file has no stripes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StripeLayout {
    k: usize,
    chunk_bytes: usize,
    file_bytes: u64,
}

impl StripeLayout {
    /// Panics if `k` or `chunk_bytes` is zero.
    pub fn new(k: usize, chunk_bytes: usize, file_bytes: u64) -> StripeLayout {
        assert!(
            k > 0 && chunk_bytes > 0,
            "k and chunk_bytes must be positive"
        );
        StripeLayout {
            k,
            chunk_bytes,
            file_bytes,
        }
    }

    fn stripe_capacity(&self) -> u64 {
        (self.k as u64).saturating_mul(self.chunk_bytes as u64)
    }

    /// Number of stripes (0 for an empty file).
    pub fn stripe_count(&self) -> u64 {
        self.file_bytes.div_ceil(self.stripe_capacity())
    }

    /// Bytes of the original file held by stripe `stripe_index`.
    pub fn stripe_data_bytes(&self, stripe_index: u64) -> usize {
        let start = stripe_index.saturating_mul(self.stripe_capacity());
        let left = self.file_bytes.saturating_sub(start);
        left.min(self.stripe_capacity()) as usize
    }

    /// Chunk size of stripe `stripe_index`: `chunk_bytes`, or ⌈L / k⌉ for a last stripe
    /// holding L < k · chunk_bytes bytes.
    pub fn stripe_chunk_bytes(&self, stripe_index: u64) -> usize {
        self.stripe_data_bytes(stripe_index).div_ceil(self.k)
    }

    /// Offset of stripe `stripe_index`'s record in every chunk file of this layout
    /// (saturating at `u64::MAX` far beyond the last stripe of a valid header).
    pub fn record_offset(&self, stripe_index: u64) -> u64 {
        // Only the last stripe may be shorter, so every earlier record is full-sized.
        stripe_index
            .saturating_mul(self.chunk_bytes as u64 + RECORD_TRAILER_BYTES as u64)
            .saturating_add(HEADER_BYTES as u64)
    }

    /// The exact length of a complete chunk file of this layout, or `None` if it does not
    /// fit a u64 (never for a layout of a valid [`ChunkHeader`]).
    pub fn try_chunk_file_bytes(&self) -> Option<u64> {
        let stripes = self.stripe_count();
        if stripes == 0 {
            return Some(HEADER_BYTES as u64);
        }
        let last = stripes - 1;
        last.checked_mul(self.chunk_bytes as u64 + RECORD_TRAILER_BYTES as u64)?
            .checked_add(HEADER_BYTES as u64)?
            .checked_add(self.stripe_chunk_bytes(last) as u64)?
            .checked_add(RECORD_TRAILER_BYTES as u64)
    }

    /// The exact length of a complete chunk file of this layout (saturating at `u64::MAX`;
    /// see [`StripeLayout::try_chunk_file_bytes`]).
    pub fn chunk_file_bytes(&self) -> u64 {
        self.try_chunk_file_bytes().unwrap_or(u64::MAX)
    }

    /// How many stripes have their complete record within the first `file_len` bytes of a
    /// chunk file: the stripes a truncated file still holds (at most `stripe_count`).
    pub fn complete_stripes(&self, file_len: u64) -> u64 {
        let stripes = self.stripe_count();
        if stripes == 0 || file_len < HEADER_BYTES as u64 {
            return 0;
        }
        let record = self.chunk_bytes as u64 + RECORD_TRAILER_BYTES as u64;
        let full = ((file_len - HEADER_BYTES as u64) / record).min(stripes - 1);
        // Every stripe before the last has a full-sized record; the last may be shorter.
        if full == stripes - 1 && file_len >= self.chunk_file_bytes() {
            stripes
        } else {
            full
        }
    }
}

/// The CRC32C (Castagnoli) stored after a stripe's payload: over the stripe index (u64
/// little-endian), the chunk index (u16 little-endian), then the payload. The two indices are
/// not stored in the record; covering them makes a record read at the wrong place fail.
pub fn stripe_crc32c(chunk_index: usize, stripe_index: u64, payload: &[u8]) -> u32 {
    let mut prefix = [0u8; 10];
    prefix[..8].copy_from_slice(&stripe_index.to_le_bytes());
    prefix[8..].copy_from_slice(&(chunk_index as u16).to_le_bytes());
    crc32c::crc32c_append(crc32c::crc32c(&prefix), payload)
}

/// Checks one stripe record (`payload_bytes` of payload, then its CRC32C) and returns the
/// payload.
pub fn check_record(
    chunk_index: usize,
    stripe_index: u64,
    record: &[u8],
    payload_bytes: usize,
) -> Result<&[u8], ChunkFileError> {
    let expected = payload_bytes + RECORD_TRAILER_BYTES;
    if record.len() != expected {
        return Err(ChunkFileError::RecordLength {
            len: record.len(),
            expected,
        });
    }
    let (payload, trailer) = record.split_at(payload_bytes);
    let stored = u32_at(trailer, 0);
    let computed = stripe_crc32c(chunk_index, stripe_index, payload);
    if stored != computed {
        return Err(ChunkFileError::StripeChecksum {
            chunk_index,
            stripe_index,
            stored,
            computed,
        });
    }
    Ok(payload)
}

/// The name of chunk file `index`: `chunk-000` … `chunk-255`.
pub fn chunk_file_name(index: usize) -> String {
    format!("chunk-{index:03}")
}

/// The chunk index a file name stands for, if it is a chunk file name.
pub fn parse_chunk_file_name(name: &str) -> Option<usize> {
    let digits = name.strip_prefix("chunk-")?;
    if digits.len() != 3 || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}

/// (kind, first, second, third parameter) as the header stores them.
fn code_fields(code: &Code) -> (u8, usize, usize, usize) {
    match *code {
        Code::Rs {
            k,
            m,
            matrix: MatrixKind::Cauchy,
        } => (KIND_RS_CAUCHY, k, m, 0),
        Code::Rs {
            k,
            m,
            matrix: MatrixKind::Vandermonde,
        } => (KIND_RS_VANDERMONDE, k, m, 0),
        Code::Rs {
            k,
            m,
            matrix: MatrixKind::CauchyXor,
        } => (KIND_RS_CAUCHY_XOR, k, m, 0),
        Code::Lrc { k, l, r } => (KIND_LRC, k, l, r),
    }
}

fn u16_at(b: &[u8], at: usize) -> u16 {
    u16::from_le_bytes([b[at], b[at + 1]])
}

fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(b[at..at + 4].try_into().expect("4 bytes"))
}

fn u64_at(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(b[at..at + 8].try_into().expect("8 bytes"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rs63() -> Code {
        Code::rs(6, 3).unwrap()
    }

    fn sample() -> ChunkHeader {
        ChunkHeader::new(rs63(), 7, 1 << 20, 1_000_003, 0xdead_beef).unwrap()
    }

    /// Rewrites the header CRC after a test edits a field, so the edit itself is what fails.
    fn reseal(bytes: &mut [u8; HEADER_BYTES]) {
        let crc = crc32c::crc32c(&bytes[..HEADER_CRC_OFFSET]);
        bytes[HEADER_CRC_OFFSET..].copy_from_slice(&crc.to_le_bytes());
    }

    #[test]
    fn round_trips_every_code_kind() {
        let codes = [
            rs63(),
            Code::rs_with(10, 4, MatrixKind::Vandermonde).unwrap(),
            Code::rs_with(12, 4, MatrixKind::CauchyXor).unwrap(),
            Code::lrc(12, 2, 2).unwrap(),
        ];
        for code in codes {
            for index in [0, code.n() - 1] {
                let h = ChunkHeader::new(code, index, 4096, 123_456_789, 42).unwrap();
                let bytes = h.to_bytes();
                assert_eq!(ChunkHeader::parse(&bytes), Ok(h));
                // Trailing bytes (the first stripe record) are ignored.
                let mut longer = bytes.to_vec();
                longer.extend_from_slice(&[0xaa; 100]);
                assert_eq!(ChunkHeader::parse(&longer), Ok(h));
            }
        }
    }

    #[test]
    fn fixed_layout_little_endian() {
        let b = sample().to_bytes();
        assert_eq!(&b[0..8], b"INECCHNK");
        assert_eq!(&b[8..10], &[1, 0]);
        assert_eq!(&b[10..12], &[64, 0]);
        assert_eq!(b[12], 1);
        assert_eq!(&b[14..20], &[6, 0, 3, 0, 0, 0]);
        assert_eq!(&b[20..22], &[7, 0]);
        assert_eq!(&b[24..28], &[0, 0, 0x10, 0]);
        assert_eq!(&b[28..32], &[0xef, 0xbe, 0xad, 0xde]);
        assert_eq!(&b[32..40], &1_000_003u64.to_le_bytes());
        assert_eq!(&b[40..48], &1u64.to_le_bytes());
        assert!(b[48..60].iter().all(|&x| x == 0));
        assert_eq!(
            u32::from_le_bytes(b[60..64].try_into().unwrap()),
            crc32c::crc32c(&b[..60])
        );
    }

    #[test]
    fn truncated_header() {
        let b = sample().to_bytes();
        for len in [0, 5, 8, 63] {
            assert_eq!(
                ChunkHeader::parse(&b[..len]),
                Err(ChunkFileError::Truncated {
                    have: len,
                    need: HEADER_BYTES
                })
            );
        }
    }

    #[test]
    fn bad_magic() {
        let mut b = sample().to_bytes();
        b[0] = b'X';
        assert!(matches!(
            ChunkHeader::parse(&b),
            Err(ChunkFileError::BadMagic { found }) if &found == b"XNECCHNK"
        ));
        // A short file that is clearly something else says so rather than "truncated".
        assert!(matches!(
            ChunkHeader::parse(b"hello, world"),
            Err(ChunkFileError::BadMagic { .. })
        ));
    }

    #[test]
    fn bad_version() {
        let mut b = sample().to_bytes();
        b[8] = 2;
        reseal(&mut b);
        assert_eq!(
            ChunkHeader::parse(&b),
            Err(ChunkFileError::UnsupportedVersion {
                found: 2,
                supported: 1
            })
        );
        // The version is judged before the checksum: a future layout may move the checksum.
        b[60] ^= 1;
        assert!(matches!(
            ChunkHeader::parse(&b),
            Err(ChunkFileError::UnsupportedVersion { found: 2, .. })
        ));
    }

    #[test]
    fn bad_header_crc_on_any_flipped_bit() {
        let good = sample().to_bytes();
        for byte in 10..HEADER_BYTES {
            for bit in [0, 7] {
                let mut b = good;
                b[byte] ^= 1 << bit;
                assert!(
                    matches!(
                        ChunkHeader::parse(&b),
                        Err(ChunkFileError::HeaderChecksum { .. })
                    ),
                    "flip of byte {byte} bit {bit} not caught"
                );
            }
        }
    }

    #[test]
    fn sealed_but_invalid_fields() {
        let good = sample().to_bytes();
        let edit = |at: usize, bytes: &[u8]| {
            let mut b = good;
            b[at..at + bytes.len()].copy_from_slice(bytes);
            reseal(&mut b);
            ChunkHeader::parse(&b)
        };
        assert_eq!(
            edit(10, &[32, 0]),
            Err(ChunkFileError::BadHeaderBytes {
                found: 32,
                expected: 64
            })
        );
        assert_eq!(
            edit(12, &[9]),
            Err(ChunkFileError::BadCodeKind { found: 9 })
        );
        assert_eq!(
            edit(50, &[1]),
            Err(ChunkFileError::NonZeroReserved {
                offset: 50,
                value: 1
            })
        );
        assert_eq!(
            edit(14, &[0, 0]),
            Err(ChunkFileError::BadCode(CodeError::NoDataChunks))
        );
        assert!(matches!(
            edit(20, &[9, 0]),
            Err(ChunkFileError::ChunkIndexOutOfRange { index: 9, n: 9, .. })
        ));
        assert!(matches!(
            edit(24, &[0, 0, 0, 0]),
            Err(ChunkFileError::BadChunkBytes { chunk_bytes: 0, .. })
        ));
        assert!(matches!(
            edit(40, &[5]),
            Err(ChunkFileError::StripeCountMismatch {
                stored: 5,
                expected: 1,
                ..
            })
        ));
    }

    #[test]
    fn new_refuses_out_of_range_fields() {
        assert!(matches!(
            ChunkHeader::new(rs63(), 9, 1, 0, 0),
            Err(ChunkFileError::ChunkIndexOutOfRange { .. })
        ));
        assert!(matches!(
            ChunkHeader::new(rs63(), 0, MAX_CHUNK_BYTES + 1, 0, 0),
            Err(ChunkFileError::BadChunkBytes { .. })
        ));
    }

    #[test]
    fn same_file_ignores_only_the_index() {
        let a = sample();
        let b = ChunkHeader {
            chunk_index: 2,
            ..a
        };
        assert!(a.same_file(&b));
        let c = ChunkHeader {
            content_crc32c: 1,
            ..a
        };
        assert!(!a.same_file(&c));
    }

    #[test]
    fn layout_of_small_and_odd_files() {
        // Empty: no stripes, header only.
        let empty = StripeLayout::new(6, 1024, 0);
        assert_eq!(empty.stripe_count(), 0);
        assert_eq!(empty.chunk_file_bytes(), 64);
        // One byte, k = 6: one stripe of 1-byte chunks.
        let one = StripeLayout::new(6, 1024, 1);
        assert_eq!(one.stripe_count(), 1);
        assert_eq!(one.stripe_chunk_bytes(0), 1);
        assert_eq!(one.stripe_data_bytes(0), 1);
        assert_eq!(one.chunk_file_bytes(), 64 + 1 + 4);
        // Exactly two full stripes.
        let full = StripeLayout::new(4, 100, 800);
        assert_eq!(full.stripe_count(), 2);
        assert_eq!(full.stripe_chunk_bytes(1), 100);
        assert_eq!(full.chunk_file_bytes(), 64 + 2 * 104);
        // 1 000 003 bytes, k = 6, 4096-byte chunks: 40 full stripes, then 16 963 bytes in
        // chunks of 2828.
        let odd = StripeLayout::new(6, 4096, 1_000_003);
        assert_eq!(odd.stripe_count(), 41);
        assert_eq!(odd.stripe_data_bytes(40), 1_000_003 - 40 * 6 * 4096);
        assert_eq!(odd.stripe_chunk_bytes(40), 16_963usize.div_ceil(6));
        assert_eq!(odd.record_offset(40), 64 + 40 * 4100);
        assert_eq!(odd.chunk_file_bytes(), 64 + 40 * 4100 + 2828 + 4);
        assert_eq!(odd.stripe_data_bytes(41), 0);
    }

    /// A header with a valid checksum and k = 1, m = 1, chunk_bytes = 1, file_bytes = 2^63
    /// used to overflow `record_offset` (a panic in debug builds) and make `inec verify` walk
    /// 2^63 stripes in release builds.
    #[test]
    fn crafted_header_with_huge_file_bytes_is_refused() {
        let code = Code::rs(1, 1).unwrap();
        let small = ChunkHeader::new(code, 0, 1, 1, 0).unwrap();
        for file_bytes in [1u64 << 63, MAX_FILE_BYTES + 1, u64::MAX] {
            let mut b = small.to_bytes();
            b[32..40].copy_from_slice(&file_bytes.to_le_bytes());
            // The stripe count is consistent (k · chunk_bytes = 1), so only the limit refuses it.
            b[40..48].copy_from_slice(&file_bytes.to_le_bytes());
            reseal(&mut b);
            assert_eq!(
                ChunkHeader::parse(&b),
                Err(ChunkFileError::FileTooLarge {
                    file_bytes,
                    max: MAX_FILE_BYTES
                })
            );
            assert!(matches!(
                ChunkHeader::new(code, 0, 1, file_bytes, 0),
                Err(ChunkFileError::FileTooLarge { .. })
            ));
        }
        // The limit itself is accepted, and its chunk file size fits with room to spare.
        let edge = ChunkHeader::new(code, 0, 1, MAX_FILE_BYTES, 0).unwrap();
        assert_eq!(ChunkHeader::parse(&edge.to_bytes()), Ok(edge));
        assert_eq!(
            edge.layout().try_chunk_file_bytes(),
            Some(64 + MAX_FILE_BYTES * 5)
        );
        let layout = edge.layout();
        assert_eq!(
            layout.record_offset(MAX_FILE_BYTES - 1),
            64 + (MAX_FILE_BYTES - 1) * 5
        );
        assert_eq!(layout.record_offset(u64::MAX), u64::MAX);
        // An unvalidated layout saturates instead of wrapping.
        let absurd = StripeLayout::new(1, 1, u64::MAX);
        assert_eq!(absurd.try_chunk_file_bytes(), None);
        assert_eq!(absurd.chunk_file_bytes(), u64::MAX);
    }

    #[test]
    fn complete_stripes_of_truncated_files() {
        // 41 stripes: 40 of 4100-byte records, the last of 2828 + 4.
        let odd = StripeLayout::new(6, 4096, 1_000_003);
        let full = odd.chunk_file_bytes();
        assert_eq!(odd.complete_stripes(full), 41);
        assert_eq!(odd.complete_stripes(full + 100), 41);
        assert_eq!(odd.complete_stripes(full - 1), 40);
        assert_eq!(odd.complete_stripes(64 + 40 * 4100), 40);
        assert_eq!(odd.complete_stripes(64 + 4100), 1);
        assert_eq!(odd.complete_stripes(64 + 4099), 0);
        assert_eq!(odd.complete_stripes(10), 0);
        assert_eq!(StripeLayout::new(4, 100, 0).complete_stripes(1000), 0);
        // Huge headers: one step, no loop.
        let huge = StripeLayout::new(1, 1, MAX_FILE_BYTES);
        assert_eq!(huge.complete_stripes(64 + 5 * 3), 3);
    }

    #[test]
    fn record_check() {
        let payload = b"0123456789";
        let mut record = payload.to_vec();
        record.extend_from_slice(&stripe_crc32c(3, 17, payload).to_le_bytes());
        assert_eq!(check_record(3, 17, &record, 10), Ok(&payload[..]));
        // The same bytes are refused at another stripe or chunk index.
        assert!(matches!(
            check_record(3, 18, &record, 10),
            Err(ChunkFileError::StripeChecksum { .. })
        ));
        assert!(matches!(
            check_record(4, 17, &record, 10),
            Err(ChunkFileError::StripeChecksum { .. })
        ));
        assert_eq!(
            check_record(3, 17, &record[..13], 10),
            Err(ChunkFileError::RecordLength {
                len: 13,
                expected: 14
            })
        );
        let mut flipped = record.clone();
        flipped[4] ^= 0x10;
        assert!(matches!(
            check_record(3, 17, &flipped, 10),
            Err(ChunkFileError::StripeChecksum {
                chunk_index: 3,
                stripe_index: 17,
                ..
            })
        ));
    }

    #[test]
    fn crc32c_is_castagnoli() {
        // The standard check value of CRC-32C.
        assert_eq!(crc32c::crc32c(b"123456789"), 0xe306_9283);
        // The record checksum of an empty payload at stripe 0, chunk 0 (documented example).
        assert_eq!(stripe_crc32c(0, 0, &[]), crc32c::crc32c(&[0u8; 10]));
    }

    #[test]
    fn chunk_file_names() {
        assert_eq!(chunk_file_name(0), "chunk-000");
        assert_eq!(chunk_file_name(255), "chunk-255");
        assert_eq!(parse_chunk_file_name("chunk-042"), Some(42));
        assert_eq!(parse_chunk_file_name("chunk-42"), None);
        assert_eq!(parse_chunk_file_name("chunk-0420"), None);
        assert_eq!(parse_chunk_file_name(".chunk-042.tmp"), None);
        assert_eq!(parse_chunk_file_name("chunk-+42"), None);
    }
}
