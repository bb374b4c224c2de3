//! The peer wire format: every message between two engines is one frame, a fixed 24-byte
//! header followed by `payload_bytes` of payload. `docs/wire.md` gives the byte table.
//!
//! ```text
//! offset size field
//!  0      2   magic          0x49 0x45 ("IE")
//!  2      1   version        1
//!  3      1   kind           Hello | Data | Abort | Control | Start
//!  4      4   payload_bytes  u32 LE, at most MAX_PAYLOAD_BYTES
//!  8      8   op             u64 LE: the operation (plan run) the frame belongs to
//! 16      4   edge           u32 LE: the plan edge (Data), the sender's node id (Hello), 0 else
//! 20      4   slice          u32 LE: the slice index within the edge's buffer (Data), 0 else
//! ```

/// Size of a frame header in bytes.
pub const HEADER_BYTES: usize = 24;
/// The first two bytes of every frame.
pub const MAGIC: [u8; 2] = [0x49, 0x45];
/// The wire format version this engine speaks.
pub const VERSION: u8 = 1;
/// The largest payload a frame may carry (64 MiB); larger frames are refused at parse time.
pub const MAX_PAYLOAD_BYTES: usize = 64 << 20;

// A slice of a plan part travels in one frame.
const _: () = assert!(graph::part::MAX_SLICE_BYTES <= MAX_PAYLOAD_BYTES);

/// What a frame carries.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum Kind {
    /// First frame on every connection: the sender's node id in `edge`. No payload.
    Hello = 1,
    /// One slice of one plan edge's buffer.
    Data = 2,
    /// The sender gave up on operation `op`; the payload is a UTF-8 reason.
    Abort = 3,
    /// A control message between a runner and a host (see `channel.rs`).
    Control = 4,
    /// A Data slice that also starts the run on its receiver: the payload is the slice, then
    /// a `start` control payload (see `channel.rs`), then that payload's length as u32 LE
    /// ([`split_start`]). Sent by a node that launched a run, on its first frame to each
    /// participant it feeds, so that the run costs that participant no separate `start`.
    Start = 5,
}

/// Splits the payload of a [`Kind::Start`] frame into (slice length, the start control
/// payload's range).
pub fn split_start(payload: &[u8]) -> Result<(usize, std::ops::Range<usize>), StartFrameError> {
    let n = payload.len();
    if n < 4 {
        return Err(StartFrameError::NoTrailer { bytes: n });
    }
    let start_bytes = u32::from_le_bytes(payload[n - 4..].try_into().expect("4 bytes")) as usize;
    if start_bytes + 4 > n {
        return Err(StartFrameError::StartTooLong {
            bytes: n,
            start_bytes,
        });
    }
    let slice = n - 4 - start_bytes;
    Ok((slice, slice..n - 4))
}

impl Kind {
    fn from_u8(b: u8) -> Option<Kind> {
        Some(match b {
            1 => Kind::Hello,
            2 => Kind::Data,
            3 => Kind::Abort,
            4 => Kind::Control,
            5 => Kind::Start,
            _ => return None,
        })
    }
}

/// A parsed frame header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Header {
    pub kind: Kind,
    pub payload_bytes: u32,
    pub op: u64,
    pub edge: u32,
    pub slice: u32,
}

/// Why a header was refused. The connection that sent it is closed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WireError {
    #[error("bad frame magic {found:02x?}, expected {MAGIC:02x?}")]
    BadMagic { found: [u8; 2] },
    #[error("unsupported wire version {found}, this engine speaks {VERSION}")]
    BadVersion { found: u8 },
    #[error("unknown frame kind {found}")]
    BadKind { found: u8 },
    #[error("frame payload of {payload_bytes} bytes exceeds the limit of {MAX_PAYLOAD_BYTES}")]
    TooLarge { payload_bytes: usize },
}

/// Why the payload of a [`Kind::Start`] frame was refused. The frame is dropped.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StartFrameError {
    /// Too short for its trailer.
    #[error("start frame of {bytes} bytes has no trailer")]
    NoTrailer { bytes: usize },
    /// Its trailer names a start longer than the payload.
    #[error("start frame of {bytes} bytes cannot hold a start of {start_bytes} bytes")]
    StartTooLong { bytes: usize, start_bytes: usize },
}

impl Header {
    /// A header for a payload of `payload_bytes`; refused (never truncated) above
    /// [`MAX_PAYLOAD_BYTES`].
    pub fn new(
        kind: Kind,
        op: u64,
        edge: u32,
        slice: u32,
        payload_bytes: usize,
    ) -> Result<Header, WireError> {
        if payload_bytes > MAX_PAYLOAD_BYTES {
            return Err(WireError::TooLarge { payload_bytes });
        }
        Ok(Header {
            kind,
            payload_bytes: payload_bytes as u32,
            op,
            edge,
            slice,
        })
    }

    /// The 24 header bytes.
    pub fn encode(&self) -> [u8; HEADER_BYTES] {
        let mut b = [0u8; HEADER_BYTES];
        b[0..2].copy_from_slice(&MAGIC);
        b[2] = VERSION;
        b[3] = self.kind as u8;
        b[4..8].copy_from_slice(&self.payload_bytes.to_le_bytes());
        b[8..16].copy_from_slice(&self.op.to_le_bytes());
        b[16..20].copy_from_slice(&self.edge.to_le_bytes());
        b[20..24].copy_from_slice(&self.slice.to_le_bytes());
        b
    }

    /// Parses a header from the first `HEADER_BYTES` of `b`, enforcing the limits.
    /// Panics if `b` is shorter than a header (callers wait for enough bytes first).
    pub fn decode(b: &[u8]) -> Result<Header, WireError> {
        let b = &b[..HEADER_BYTES];
        if b[0..2] != MAGIC {
            return Err(WireError::BadMagic {
                found: [b[0], b[1]],
            });
        }
        if b[2] != VERSION {
            return Err(WireError::BadVersion { found: b[2] });
        }
        let kind = Kind::from_u8(b[3]).ok_or(WireError::BadKind { found: b[3] })?;
        let payload_bytes = u32::from_le_bytes(b[4..8].try_into().unwrap());
        if payload_bytes as usize > MAX_PAYLOAD_BYTES {
            return Err(WireError::TooLarge {
                payload_bytes: payload_bytes as usize,
            });
        }
        Ok(Header {
            kind,
            payload_bytes,
            op: u64::from_le_bytes(b[8..16].try_into().unwrap()),
            edge: u32::from_le_bytes(b[16..20].try_into().unwrap()),
            slice: u32::from_le_bytes(b[20..24].try_into().unwrap()),
        })
    }
}

/// The logic of the fuzz target `wire_header` (also driven by a seeded stable test): parses
/// the first [`HEADER_BYTES`] of `data` (shorter inputs are not headers) and checks that an
/// accepted header re-encodes to the same bytes within the limit, and that a refused one is
/// refused for the reason its bytes give. Panics on a violation; returns the parse result.
pub fn check_header_bytes(data: &[u8]) -> Option<Result<Header, WireError>> {
    if data.len() < HEADER_BYTES {
        return None;
    }
    let b = &data[..HEADER_BYTES];
    let parsed = Header::decode(data);
    let len = u32::from_le_bytes(b[4..8].try_into().unwrap()) as usize;
    match &parsed {
        Ok(h) => {
            assert_eq!(h.encode(), b, "an accepted header re-encodes to its bytes");
            assert!(h.payload_bytes as usize <= MAX_PAYLOAD_BYTES);
            assert_eq!(Header::new(h.kind, h.op, h.edge, h.slice, len), Ok(*h));
        }
        Err(WireError::BadMagic { found }) => {
            assert_ne!(b[0..2], MAGIC);
            assert_eq!(found, &[b[0], b[1]]);
        }
        Err(WireError::BadVersion { found }) => {
            assert_eq!(b[0..2], MAGIC);
            assert_eq!(*found, b[2]);
            assert_ne!(b[2], VERSION);
        }
        Err(WireError::BadKind { found }) => {
            assert_eq!((b[0..2] == MAGIC, b[2]), (true, VERSION));
            assert_eq!(*found, b[3]);
            assert!(Kind::from_u8(b[3]).is_none());
        }
        Err(WireError::TooLarge { payload_bytes }) => {
            assert_eq!(*payload_bytes, len);
            assert!(len > MAX_PAYLOAD_BYTES);
            assert!(Header::new(Kind::Data, 0, 0, 0, len).is_err());
        }
    }
    Some(parsed)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_round_trips_and_has_the_documented_layout() {
        let h = Header::new(Kind::Data, 0x0102_0304_0506_0708, 9, 10, 4096).unwrap();
        let b = h.encode();
        assert_eq!(
            b,
            [0x49, 0x45, 1, 2, 0x00, 0x10, 0, 0, 8, 7, 6, 5, 4, 3, 2, 1, 9, 0, 0, 0, 10, 0, 0, 0]
        );
        assert_eq!(Header::decode(&b).unwrap(), h);
    }

    #[test]
    fn start_frames_split_into_slice_and_start() {
        let mut p = vec![7u8; 10];
        p.extend_from_slice(b"start");
        p.extend_from_slice(&5u32.to_le_bytes());
        assert_eq!(split_start(&p), Ok((10, 10..15)));
        assert!(split_start(&[1, 2]).is_err());
        assert!(split_start(&[0, 0, 0, 9, 0, 0, 0])
            .unwrap_err()
            .to_string()
            .contains("cannot hold"));
    }

    #[test]
    fn bad_headers_are_refused() {
        let mut b = Header::new(Kind::Hello, 0, 3, 0, 0).unwrap().encode();
        b[0] = 0;
        assert!(matches!(
            Header::decode(&b),
            Err(WireError::BadMagic { .. })
        ));
        let mut b = Header::new(Kind::Hello, 0, 3, 0, 0).unwrap().encode();
        b[2] = 9;
        assert_eq!(Header::decode(&b), Err(WireError::BadVersion { found: 9 }));
        let mut b = Header::new(Kind::Hello, 0, 3, 0, 0).unwrap().encode();
        b[3] = 77;
        assert_eq!(Header::decode(&b), Err(WireError::BadKind { found: 77 }));
        let mut b = Header::new(Kind::Data, 0, 3, 0, 0).unwrap().encode();
        b[4..8].copy_from_slice(&(MAX_PAYLOAD_BYTES as u32 + 1).to_le_bytes());
        assert!(matches!(
            Header::decode(&b),
            Err(WireError::TooLarge { .. })
        ));
        assert_eq!(
            Header::new(Kind::Data, 0, 0, 0, MAX_PAYLOAD_BYTES + 1),
            Err(WireError::TooLarge {
                payload_bytes: MAX_PAYLOAD_BYTES + 1
            })
        );
    }
}
