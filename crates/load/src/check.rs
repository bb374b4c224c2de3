//! Self-describing values, so that every read is checked.
//!
//! A value of `len` bytes (at least [`HEADER_BYTES`]) is: the key id (u64, little endian), the
//! write counter (u64), `len` (u64), then a fill that is a function of (key id, counter, byte
//! position). A reader recomputes the fill from the header and compares every byte, so a value
//! of another key, a value cut short or lengthened, and a torn value (the front of one write and
//! the back of another, or any flipped byte) are all told apart from a good one. Whether a good
//! value is *stale* needs the history of the writes to its key, which [`KeyState`] keeps.

/// Bytes of the header (key id, counter, length).
pub const HEADER_BYTES: usize = 24;

/// What a read returned, judged by its bytes alone.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// A whole value of the expected key, written with this counter.
    Good { counter: u64 },
    /// A well-formed value of another key.
    WrongKey { key_id: u64 },
    /// The length is not the one the header says, or shorter than a header.
    BadLength,
    /// The header is the expected key's but the body is not that write's (torn or corrupted).
    Torn { counter: u64 },
}

fn mix(mut z: u64) -> u64 {
    // splitmix64's finaliser.
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

fn fill_seed(key_id: u64, counter: u64) -> u64 {
    mix(key_id ^ mix(counter.wrapping_add(0x9e37_79b9_7f4a_7c15)))
}

/// Writes the fill of (key id, counter) into `body` (the bytes after the header).
fn fill(body: &mut [u8], key_id: u64, counter: u64) {
    let seed = fill_seed(key_id, counter);
    let mut chunks = body.chunks_exact_mut(8);
    let mut i = 0u64;
    for c in &mut chunks {
        c.copy_from_slice(&mix(seed.wrapping_add(i)).to_le_bytes());
        i += 1;
    }
    let rest = chunks.into_remainder();
    let last = mix(seed.wrapping_add(i)).to_le_bytes();
    rest.copy_from_slice(&last[..rest.len()]);
}

/// Whether `body` is the fill of (key id, counter).
fn fill_matches(body: &[u8], key_id: u64, counter: u64) -> bool {
    let seed = fill_seed(key_id, counter);
    let mut chunks = body.chunks_exact(8);
    let mut i = 0u64;
    for c in &mut chunks {
        if c != mix(seed.wrapping_add(i)).to_le_bytes() {
            return false;
        }
        i += 1;
    }
    let rest = chunks.remainder();
    rest == &mix(seed.wrapping_add(i)).to_le_bytes()[..rest.len()]
}

/// Appends to `out` the value of `len` bytes for (key id, counter). `len` below
/// [`HEADER_BYTES`] is raised to it.
pub fn encode(out: &mut Vec<u8>, key_id: u64, counter: u64, len: usize) {
    let len = len.max(HEADER_BYTES);
    let at = out.len();
    out.resize(at + len, 0);
    let v = &mut out[at..];
    v[0..8].copy_from_slice(&key_id.to_le_bytes());
    v[8..16].copy_from_slice(&counter.to_le_bytes());
    v[16..24].copy_from_slice(&(len as u64).to_le_bytes());
    fill(&mut v[HEADER_BYTES..], key_id, counter);
}

/// The value of `len` bytes for (key id, counter).
pub fn value(key_id: u64, counter: u64, len: usize) -> Vec<u8> {
    let mut v = Vec::new();
    encode(&mut v, key_id, counter, len);
    v
}

/// Judges a value read for `key_id`.
pub fn verify(value: &[u8], key_id: u64) -> Verdict {
    if value.len() < HEADER_BYTES {
        return Verdict::BadLength;
    }
    let word = |i: usize| u64::from_le_bytes(value[i..i + 8].try_into().expect("8 bytes"));
    let (kid, counter, len) = (word(0), word(8), word(16));
    if len != value.len() as u64 {
        return Verdict::BadLength;
    }
    if kid != key_id {
        // Only a well-formed value of another key counts as a wrong key; anything else is torn.
        return if fill_matches(&value[HEADER_BYTES..], kid, counter) {
            Verdict::WrongKey { key_id: kid }
        } else {
            Verdict::Torn { counter }
        };
    }
    if fill_matches(&value[HEADER_BYTES..], kid, counter) {
        Verdict::Good { counter }
    } else {
        Verdict::Torn { counter }
    }
}

/// The write history of one key as the load generator sees it. At most one write per key is
/// in flight at a time (the generator never overlaps writes to a key), so a read sent when
/// `acked` was c may return c, or any counter issued after c (a write that raced the read),
/// and nothing older.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct KeyState {
    /// The counter of the last acknowledged write (0: never written).
    pub acked: u64,
    /// The highest counter ever sent (acknowledged or not).
    pub issued: u64,
    /// A write is in flight.
    pub writing: bool,
}

/// A read's outcome once its bytes and the key's history are taken into account.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReadOutcome {
    /// The last acknowledged value, or one whose write was in flight.
    Ok,
    /// A miss although a write had been acknowledged before the read was sent.
    Missing,
    /// A miss of a key never written: not an error.
    MissNeverWritten,
    /// A good value older than the last write acknowledged before the read was sent.
    Stale,
    /// A good value with a counter never sent.
    Unknown,
    WrongKey,
    BadLength,
    Torn,
}

impl KeyState {
    /// Starts a write: returns its counter.
    pub fn begin_write(&mut self) -> u64 {
        debug_assert!(!self.writing);
        self.issued += 1;
        self.writing = true;
        self.issued
    }

    /// The write of `counter` ended (`acked`: the server said STORED).
    pub fn end_write(&mut self, counter: u64, acked: bool) {
        self.writing = false;
        if acked && counter > self.acked {
            self.acked = counter;
        }
    }

    /// Judges a read that was sent when the last acknowledged counter was `floor`; `value` is
    /// `None` for a miss.
    pub fn judge(&self, floor: u64, key_id: u64, value: Option<&[u8]>) -> ReadOutcome {
        let Some(v) = value else {
            return if floor == 0 {
                ReadOutcome::MissNeverWritten
            } else {
                ReadOutcome::Missing
            };
        };
        match verify(v, key_id) {
            Verdict::Good { counter } if counter < floor => ReadOutcome::Stale,
            Verdict::Good { counter } if counter > self.issued => ReadOutcome::Unknown,
            Verdict::Good { .. } => ReadOutcome::Ok,
            Verdict::WrongKey { .. } => ReadOutcome::WrongKey,
            Verdict::BadLength => ReadOutcome::BadLength,
            Verdict::Torn { .. } => ReadOutcome::Torn,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_every_kind_of_damage() {
        for len in [0, 24, 25, 31, 32, 33, 8192, 8195] {
            let v = value(7, 3, len);
            assert_eq!(v.len(), len.max(HEADER_BYTES));
            assert_eq!(verify(&v, 7), Verdict::Good { counter: 3 });
            assert_eq!(verify(&v, 8), Verdict::WrongKey { key_id: 7 });
            // A flipped bit anywhere is seen.
            for pos in [0, 9, 17, 23, v.len() - 1] {
                let mut d = v.clone();
                d[pos] ^= 0x10;
                assert_ne!(
                    verify(&d, 7),
                    Verdict::Good { counter: 3 },
                    "len {len} pos {pos}"
                );
            }
            // Cut short or lengthened.
            assert_eq!(verify(&v[..v.len() - 1], 7), Verdict::BadLength);
            let mut longer = v.clone();
            longer.push(0);
            assert_eq!(verify(&longer, 7), Verdict::BadLength);
        }
        // Torn: the front of write 3 and the back of write 4.
        let a = value(7, 3, 8192);
        let b = value(7, 4, 8192);
        let mut torn = a[..4096].to_vec();
        torn.extend_from_slice(&b[4096..]);
        assert_eq!(verify(&torn, 7), Verdict::Torn { counter: 3 });
        let mut torn = b[..4096].to_vec();
        torn.extend_from_slice(&a[4096..]);
        assert_eq!(verify(&torn, 7), Verdict::Torn { counter: 4 });
        assert_eq!(verify(b"short", 7), Verdict::BadLength);
    }

    #[test]
    fn history() {
        let mut v;
        let mut k = KeyState::default();
        assert_eq!(k.judge(0, 1, None), ReadOutcome::MissNeverWritten);
        let c1 = k.begin_write();
        k.end_write(c1, true);
        let floor = k.acked;
        assert_eq!(k.judge(floor, 1, None), ReadOutcome::Missing);
        v = value(1, c1, 100);
        assert_eq!(k.judge(floor, 1, Some(&v)), ReadOutcome::Ok);
        // A write races the read: both the old and the new value are fine.
        let c2 = k.begin_write();
        v = value(1, c2, 100);
        assert_eq!(k.judge(floor, 1, Some(&v)), ReadOutcome::Ok);
        k.end_write(c2, true);
        // Once c2 is acknowledged, a read sent afterwards must not see c1.
        v = value(1, c1, 100);
        assert_eq!(k.judge(k.acked, 1, Some(&v)), ReadOutcome::Stale);
        v = value(1, 99, 100);
        assert_eq!(k.judge(k.acked, 1, Some(&v)), ReadOutcome::Unknown);
        v = value(2, c2, 100);
        assert_eq!(k.judge(k.acked, 1, Some(&v)), ReadOutcome::WrongKey);
        // A failed write does not move the floor but its counter may still appear.
        let c3 = k.begin_write();
        k.end_write(c3, false);
        assert_eq!(k.acked, c2);
        v = value(1, c3, 100);
        assert_eq!(k.judge(k.acked, 1, Some(&v)), ReadOutcome::Ok);
    }
}
