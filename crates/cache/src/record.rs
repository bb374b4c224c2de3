//! Chunk records: what a member stores for one chunk (or replica) of one value.
//!
//! A record is self-describing, so a new agent can rebuild a stripe's index from the survivors'
//! records alone. Layout (integers little-endian):
//!
//! | offset | bytes | field |
//! | --- | --- | --- |
//! | 0 | 4 | magic `INC1` |
//! | 4 | 1 | kind: 0 = coded chunk, 1 = replica of the whole value, 2 = whole layout (position 0: the value at its home; other positions: where it lies, [`WholeAt`]); bit 7 set: the write left out members that were down |
//! | 5 | 1 | chunk index (the position in the Mem Stripe) |
//! | 6 | 2 | key length (1..=250) |
//! | 8 | 8 | version (assigned by the agent; with its low [`REWRITE_BITS`] cleared, the CAS value) |
//! | 16 | 8 | value length in bytes (the chunks are ⌈len/k⌉ bytes, zero-padded) |
//! | 24 | 4 | client flags |
//! | 28 | 8 | exptime: absolute Unix seconds, 0 = never (signed) |
//! | 36 | 4 | data length |
//! | 40 | 24 | the request ids of the key's last three writes, newest (this version's) first; 0 = none |
//! | 64 | key length | key |
//! | .. | data length | the chunk (or the whole value for a replica) |
//! | .. | 4 | CRC32C of every byte before it |

use thiserror::Error;

pub const MAGIC: [u8; 4] = *b"INC1";
/// Bytes of a record besides its key and data.
pub const OVERHEAD_BYTES: usize = 68;
const HEADER_BYTES: usize = 64;
/// How many request ids a record carries ([`Header::trail`]).
pub const TRAIL: usize = 3;

/// The request ids of a key's last [`TRAIL`] writes, newest first (0: none). A new agent reads
/// them from the records and answers a retried request whose id is among them from what it
/// did, instead of applying it a second time (`agent::once`).
pub type Trail = [u64; TRAIL];

/// `trail` with `id` in front (the write that replaces the version it describes).
pub fn trail_after(trail: &Trail, id: u64) -> Trail {
    let mut out = [0; TRAIL];
    out[0] = id;
    out[1..].copy_from_slice(&trail[..TRAIL - 1]);
    out
}
/// Low bits of a version that count rewrites of a value that keep its bytes, flags and
/// exptime (its home writing a split value whole again, `agent::rewhole`). A new value's
/// version has them 0 ([`StripeIndex::next_version`](crate::agent::index::StripeIndex)), and a
/// client's CAS value is the version with them cleared ([`cas_of`]), so such a rewrite does
/// not change the CAS value a client holds, while members and a new agent order the
/// rewrite's records after the ones it replaces.
pub const REWRITE_BITS: u32 = 8;

/// The CAS value of a version: its [`REWRITE_BITS`] cleared.
pub fn cas_of(version: u64) -> u64 {
    version & !((1u64 << REWRITE_BITS) - 1)
}

/// The bit of the kind byte that flags [`Header::written_around`].
const WRITTEN_AROUND: u8 = 0x80;

/// Whether a record holds a coded chunk, a whole replica, or a value of the whole layout.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Kind {
    Coded,
    Replica,
    /// The whole layout (`member::whole`): at position 0 (the key's home) the value itself, in
    /// a slab slot that parity across values covers; at the parity positions of the slot's
    /// page, a record whose data is [`WholeAt`] (where the home's record lies).
    Whole,
}

/// Where the home's record of a whole-layout value lies: its slab page, the offset in the page,
/// the record's length and the size of its slot (its page's size class). The data of the
/// record a parity position holds for the value: 16 bytes, `page`, `offset`, `len`, `slot` as
/// u32 little-endian.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WholeAt {
    pub page: u32,
    pub offset: u32,
    pub len: u32,
    pub slot: u32,
}

impl WholeAt {
    pub const BYTES: usize = 16;

    pub fn to_bytes(self) -> [u8; 16] {
        let mut b = [0; 16];
        b[0..4].copy_from_slice(&self.page.to_le_bytes());
        b[4..8].copy_from_slice(&self.offset.to_le_bytes());
        b[8..12].copy_from_slice(&self.len.to_le_bytes());
        b[12..16].copy_from_slice(&self.slot.to_le_bytes());
        b
    }

    pub fn from_bytes(b: &[u8]) -> Option<WholeAt> {
        if b.len() != 16 {
            return None;
        }
        Some(WholeAt {
            page: u32_at(b, 0),
            offset: u32_at(b, 4),
            len: u32_at(b, 8),
            slot: u32_at(b, 12),
        })
    }
}

/// The fields of a record besides its data.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Header {
    pub kind: Kind,
    pub chunk_index: u8,
    /// The write that stored this version left positions out (their members were down): a
    /// version with fewer than k chunks among the members heard may then have been
    /// acknowledged, its other chunks at members not heard (`cluster::stripe::adopt`).
    pub written_around: bool,
    pub key: Vec<u8>,
    pub version: u64,
    pub value_bytes: u64,
    pub flags: u32,
    pub exptime: i64,
    /// The request ids of the key's last writes, this version's first ([`Trail`]).
    pub trail: Trail,
}

/// Why bytes are not a valid record.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
pub enum RecordError {
    #[error("record of {have} bytes is shorter than its {need}-byte layout")]
    Truncated { have: usize, need: usize },
    #[error("record magic {found:02x?} is not INC1")]
    BadMagic { found: [u8; 4] },
    #[error("record kind {kind} is unknown (0 = coded, 1 = replica, 2 = whole, bit 7 a flag)")]
    BadKind { kind: u8 },
    #[error("record key of {key_bytes} bytes is outside 1..=250")]
    BadKeyLength { key_bytes: usize },
    #[error("record of {have} bytes has {extra} bytes after its CRC")]
    TrailingBytes { have: usize, extra: usize },
    #[error("record CRC32C {stored:08x} does not match its bytes ({computed:08x})")]
    BadCrc { stored: u32, computed: u32 },
}

/// The bytes a record of `header` and `data_bytes` bytes of data takes.
pub fn encoded_len(header: &Header, data_bytes: usize) -> usize {
    OVERHEAD_BYTES + header.key.len() + data_bytes
}

/// Encodes a record.
pub fn encode(header: &Header, data: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(encoded_len(header, data.len()));
    out.extend_from_slice(&head(header, data.len()));
    out.extend_from_slice(&header.key);
    out.extend_from_slice(data);
    let crc = crc32c(&out);
    out.extend_from_slice(&crc.to_le_bytes());
    out
}

/// Encodes a record into `out`, which is [`encoded_len`] bytes long (a slab slot's range, so a
/// whole value is not built elsewhere first).
pub fn encode_into(header: &Header, data: &[u8], out: &mut [u8]) {
    assert_eq!(
        out.len(),
        encoded_len(header, data.len()),
        "a record fills `out`"
    );
    let key_end = HEADER_BYTES + header.key.len();
    let body = out.len() - 4;
    out[..HEADER_BYTES].copy_from_slice(&head(header, data.len()));
    out[HEADER_BYTES..key_end].copy_from_slice(&header.key);
    out[key_end..body].copy_from_slice(data);
    let crc = crc32c(&out[..body]);
    out[body..].copy_from_slice(&crc.to_le_bytes());
}

/// A record's fixed header: magic, kind, chunk index, key length, version, value length,
/// flags, exptime, data length, trail.
fn head(header: &Header, data_bytes: usize) -> [u8; HEADER_BYTES] {
    let mut out = [0; HEADER_BYTES];
    out[0..4].copy_from_slice(&MAGIC);
    let kind = match header.kind {
        Kind::Coded => 0,
        Kind::Replica => 1,
        Kind::Whole => 2,
    };
    out[4] = kind
        | if header.written_around {
            WRITTEN_AROUND
        } else {
            0
        };
    out[5] = header.chunk_index;
    out[6..8].copy_from_slice(&(header.key.len() as u16).to_le_bytes());
    out[8..16].copy_from_slice(&header.version.to_le_bytes());
    out[16..24].copy_from_slice(&header.value_bytes.to_le_bytes());
    out[24..28].copy_from_slice(&header.flags.to_le_bytes());
    out[28..36].copy_from_slice(&header.exptime.to_le_bytes());
    out[36..40].copy_from_slice(&(data_bytes as u32).to_le_bytes());
    for (i, id) in header.trail.iter().enumerate() {
        out[40 + 8 * i..48 + 8 * i].copy_from_slice(&id.to_le_bytes());
    }
    out
}

/// CRC32C (Castagnoli, the iSCSI CRC) of `bytes`. Every read of a record checks one over the
/// whole record, so it runs on carry-less multiplication folds where the CPU has them (about
/// four times the rate of the `crc32` instruction on an 8 KiB value).
pub fn crc32c(bytes: &[u8]) -> u32 {
    crc_fast::checksum(crc_fast::CrcAlgorithm::Crc32Iscsi, bytes) as u32
}

fn u64_at(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(b[at..at + 8].try_into().expect("8 bytes"))
}

fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(b[at..at + 4].try_into().expect("4 bytes"))
}

/// Parses the header and locates the data without checking the CRC (cheap; for listings).
pub fn parse_header(bytes: &[u8]) -> Result<(Header, std::ops::Range<usize>), RecordError> {
    let (kind, key, data) = layout(bytes)?;
    let header = Header {
        kind,
        chunk_index: bytes[5],
        written_around: bytes[4] & WRITTEN_AROUND != 0,
        key: bytes[key].to_vec(),
        version: u64_at(bytes, 8),
        value_bytes: u64_at(bytes, 16),
        flags: u32_at(bytes, 24),
        exptime: u64_at(bytes, 28) as i64,
        trail: std::array::from_fn(|i| u64_at(bytes, 40 + 8 * i)),
    };
    Ok((header, data))
}

/// Where the head and key of a record end, if its layout is sound (the checks of
/// [`parse_header`]): a listing copies that much, not the data.
pub fn head_end(bytes: &[u8]) -> Option<(Kind, usize)> {
    layout(bytes).ok().map(|(kind, key, _)| (kind, key.end))
}

/// The header-only record a listing sends for a record whose head and key are `head` (as
/// [`head_end`] bounds them): the same bytes with no data, its own CRC. Equal to
/// [`encode`] of the record's parsed header with empty data.
pub fn listed(head: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(head.len() + 4);
    out.extend_from_slice(head);
    out[36..40].copy_from_slice(&0u32.to_le_bytes());
    let crc = crc32c(&out);
    out.extend_from_slice(&crc.to_le_bytes());
    out
}

/// The checks of [`parse_header`]: the record's kind and where its key and data lie.
fn layout(
    bytes: &[u8],
) -> Result<(Kind, std::ops::Range<usize>, std::ops::Range<usize>), RecordError> {
    if bytes.len() < OVERHEAD_BYTES {
        return Err(RecordError::Truncated {
            have: bytes.len(),
            need: OVERHEAD_BYTES,
        });
    }
    let magic: [u8; 4] = bytes[0..4].try_into().expect("4 bytes");
    if magic != MAGIC {
        return Err(RecordError::BadMagic { found: magic });
    }
    let kind = match bytes[4] & !WRITTEN_AROUND {
        0 => Kind::Coded,
        1 => Kind::Replica,
        2 => Kind::Whole,
        _ => return Err(RecordError::BadKind { kind: bytes[4] }),
    };
    let key_bytes = u16::from_le_bytes([bytes[6], bytes[7]]) as usize;
    if key_bytes == 0 || key_bytes > proto::KEY_MAX_BYTES {
        return Err(RecordError::BadKeyLength { key_bytes });
    }
    let data_bytes = u32_at(bytes, 36) as usize;
    let need = OVERHEAD_BYTES + key_bytes + data_bytes;
    if bytes.len() < need {
        return Err(RecordError::Truncated {
            have: bytes.len(),
            need,
        });
    }
    if bytes.len() > need {
        return Err(RecordError::TrailingBytes {
            have: bytes.len(),
            extra: bytes.len() - need,
        });
    }
    let data_start = HEADER_BYTES + key_bytes;
    Ok((
        kind,
        HEADER_BYTES..data_start,
        data_start..data_start + data_bytes,
    ))
}

/// A record checked as [`parse`] checks it (layout and CRC), read in place: its key, chunk
/// index and data, for a read that needs no other field.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Checked<'a> {
    pub key: &'a [u8],
    pub chunk_index: u8,
    pub version: u64,
    pub data: &'a [u8],
}

/// [`parse`] without copying the key out.
pub fn check(bytes: &[u8]) -> Result<Checked<'_>, RecordError> {
    let (_, key, data) = layout(bytes)?;
    check_crc(bytes)?;
    Ok(Checked {
        key: &bytes[key],
        chunk_index: bytes[5],
        version: u64_at(bytes, 8),
        data: &bytes[data],
    })
}

fn check_crc(bytes: &[u8]) -> Result<(), RecordError> {
    let body = bytes.len() - 4;
    let stored = u32_at(bytes, body);
    let computed = crc32c(&bytes[..body]);
    if stored != computed {
        return Err(RecordError::BadCrc { stored, computed });
    }
    Ok(())
}

/// The key of a record's bytes as a store holds them (checked when stored), without parsing
/// the rest: empty for bytes too short to hold the key their header names.
pub fn key_of(bytes: &[u8]) -> &[u8] {
    let Some(len) = bytes.get(6..8) else {
        return &[];
    };
    let len = u16::from_le_bytes([len[0], len[1]]) as usize;
    bytes.get(HEADER_BYTES..HEADER_BYTES + len).unwrap_or(&[])
}

/// Parses a record and checks its CRC.
pub fn parse(bytes: &[u8]) -> Result<(Header, &[u8]), RecordError> {
    let (header, data) = parse_header(bytes)?;
    check_crc(bytes)?;
    Ok((header, &bytes[data]))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn encode_into_writes_what_encode_returns() {
        let h = header();
        for data in [&b""[..], b"v", &[7u8; 9000]] {
            let want = encode(&h, data);
            let mut out = vec![0xa5; encoded_len(&h, data.len())];
            encode_into(&h, data, &mut out);
            assert_eq!(out, want);
            assert_eq!(parse(&out).unwrap(), (h.clone(), data));
        }
    }

    #[test]
    fn crc32c_is_the_castagnoli_crc_at_every_length_and_alignment() {
        assert_eq!(crc32c(b"123456789"), 0xe306_9283);
        assert_eq!(crc32c(b""), 0);
        let bytes: Vec<u8> = (0..20_000u32)
            .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
            .collect();
        for start in 0..16 {
            for len in (0..600).chain([4095, 4096, 8191, 8192, 8300, 19_000]) {
                let b = &bytes[start..start + len];
                assert_eq!(crc32c(b), crc32c::crc32c(b), "{len} bytes from {start}");
            }
        }
    }

    fn header() -> Header {
        Header {
            kind: Kind::Coded,
            chunk_index: 3,
            written_around: false,
            key: b"user:42".to_vec(),
            version: 0x0102_0304_0506_0708,
            value_bytes: 1000,
            flags: 0xdead_beef,
            exptime: -5,
            trail: [9, 0x0a0b_0c0d_0e0f_1011, 0],
        }
    }

    #[test]
    fn round_trip() {
        let data = vec![7u8; 167];
        let bytes = encode(&header(), &data);
        assert_eq!(bytes.len(), OVERHEAD_BYTES + 7 + 167);
        let (h, d) = parse(&bytes).unwrap();
        assert_eq!((h, d), (header(), &data[..]));
        let empty = encode(&header(), &[]);
        assert_eq!(parse(&empty).unwrap().1, b"");
        assert_eq!(key_of(&bytes), b"user:42");
        let c = check(&bytes).unwrap();
        assert_eq!(
            (c.key, c.chunk_index, c.data),
            (&b"user:42"[..], 3, &data[..])
        );
        assert_eq!(c.version, header().version);
        let mut bad = bytes.clone();
        bad[OVERHEAD_BYTES + 10] ^= 1;
        assert!(matches!(check(&bad), Err(RecordError::BadCrc { .. })));
        assert_eq!(check(&bytes[..20]), parse(&bytes[..20]).map(|_| c));
        assert_eq!(key_of(&bytes[..HEADER_BYTES + 3]), b"");
        assert_eq!(key_of(&bytes[..5]), b"");
        let around = Header {
            kind: Kind::Replica,
            written_around: true,
            ..header()
        };
        let bytes = encode(&around, &data);
        assert_eq!(bytes[4], 0x81);
        assert_eq!(parse(&bytes).unwrap().0, around);
    }

    #[test]
    fn layout_is_as_documented() {
        let bytes = encode(&header(), b"xy");
        assert_eq!(&bytes[0..4], b"INC1");
        assert_eq!(bytes[4], 0);
        assert_eq!(bytes[5], 3);
        assert_eq!(&bytes[6..8], &7u16.to_le_bytes());
        assert_eq!(&bytes[8..16], &0x0102_0304_0506_0708u64.to_le_bytes());
        assert_eq!(&bytes[36..40], &2u32.to_le_bytes());
        assert_eq!(&bytes[40..48], &9u64.to_le_bytes());
        assert_eq!(&bytes[48..56], &0x0a0b_0c0d_0e0f_1011u64.to_le_bytes());
        assert_eq!(&bytes[56..64], &[0; 8]);
        assert_eq!(&bytes[64..71], b"user:42");
        assert_eq!(&bytes[71..73], b"xy");
        assert_eq!(bytes.len(), OVERHEAD_BYTES + 7 + 2);
    }

    #[test]
    fn a_whole_location_round_trips() {
        let at = WholeAt {
            page: 7,
            offset: 0x0102_0304,
            len: 99,
            slot: 104,
        };
        assert_eq!(WholeAt::from_bytes(&at.to_bytes()), Some(at));
        assert_eq!(WholeAt::from_bytes(&[0; 15]), None);
        let h = Header {
            kind: Kind::Whole,
            ..header()
        };
        let bytes = encode(&h, &at.to_bytes());
        assert_eq!(bytes[4], 2);
        assert_eq!(parse(&bytes).unwrap().0.kind, Kind::Whole);
    }

    #[test]
    fn a_trail_keeps_the_newest_ids() {
        assert_eq!(trail_after(&[0; TRAIL], 5), [5, 0, 0]);
        assert_eq!(trail_after(&[5, 4, 3], 6), [6, 5, 4]);
    }

    #[test]
    fn every_flipped_bit_is_detected() {
        let bytes = encode(&header(), &[0x5a; 33]);
        for bit in 0..bytes.len() * 8 {
            let mut b = bytes.clone();
            b[bit / 8] ^= 1 << (bit % 8);
            assert!(parse(&b).is_err(), "bit {bit}");
        }
    }

    #[test]
    fn typed_errors() {
        let bytes = encode(&header(), b"abc");
        assert!(matches!(
            parse(&bytes[..10]),
            Err(RecordError::Truncated { have: 10, .. })
        ));
        assert!(matches!(
            parse(&bytes[..bytes.len() - 1]),
            Err(RecordError::Truncated { .. })
        ));
        let mut long = bytes.clone();
        long.push(0);
        assert!(matches!(
            parse(&long),
            Err(RecordError::TrailingBytes { extra: 1, .. })
        ));
        let mut b = bytes.clone();
        b[0] = b'X';
        assert!(matches!(parse(&b), Err(RecordError::BadMagic { .. })));
        let mut b = bytes.clone();
        b[4] = 9;
        assert_eq!(parse(&b), Err(RecordError::BadKind { kind: 9 }));
        let mut b = bytes.clone();
        b[6] = 0;
        b[7] = 0;
        assert!(matches!(
            parse(&b),
            Err(RecordError::BadKeyLength { key_bytes: 0 })
        ));
        let mut b = bytes;
        let last = b.len() - 5;
        b[last] ^= 1;
        assert!(matches!(parse(&b), Err(RecordError::BadCrc { .. })));
    }
}
