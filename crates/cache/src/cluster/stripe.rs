//! Values as stripes: splitting into k chunks, encoding, joining; choosing, from the records
//! the survivors hold, the version of each key an index rebuild adopts.

use std::collections::HashMap;

use codes::{CodeError, Codec};

use crate::record::{Header, Kind};

/// Splits `value` into k data chunks of ⌈len/k⌉ bytes (the last zero-padded) and computes the
/// parity chunks: n chunks in position order.
pub fn encode(codec: &Codec, value: &[u8]) -> Result<Vec<Vec<u8>>, CodeError> {
    let code = codec.code();
    let (k, n) = (code.k(), code.n());
    let chunk_bytes = value.len().div_ceil(k);
    let mut chunks: Vec<Vec<u8>> = (0..n).map(|_| vec![0u8; chunk_bytes]).collect();
    for (i, c) in chunks.iter_mut().take(k).enumerate() {
        let start = (i * chunk_bytes).min(value.len());
        let end = ((i + 1) * chunk_bytes).min(value.len());
        c[..end - start].copy_from_slice(&value[start..end]);
    }
    if chunk_bytes > 0 {
        let (data, parity) = chunks.split_at_mut(k);
        let data: Vec<&[u8]> = data.iter().map(|c| c.as_slice()).collect();
        let mut parity: Vec<&mut [u8]> = parity.iter_mut().map(|c| c.as_mut_slice()).collect();
        codec.encode(&data, &mut parity)?;
    }
    Ok(chunks)
}

/// Joins k data chunks into the value of `value_bytes` bytes (padding dropped).
pub fn join(data: &[&[u8]], value_bytes: usize) -> Vec<u8> {
    let mut out = Vec::with_capacity(value_bytes);
    for c in data {
        let take = (value_bytes - out.len()).min(c.len());
        out.extend_from_slice(&c[..take]);
    }
    out
}

/// What an index rebuild adopts for one key.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Adopted {
    pub version: u64,
    pub kind: Kind,
    pub value_bytes: u64,
    pub flags: u32,
    pub exptime: i64,
    /// The positions (bit p) that hold a record of this version.
    pub held: u64,
    /// The request ids of the key's last writes, this version's first.
    pub trail: crate::record::Trail,
}

/// From the headers the members heard hold for a stripe (`unheard` positions did not answer),
/// the version of each key to adopt: the highest version that may have been acknowledged — a
/// replicated one with a replica heard, or a coded one with `k` chunks heard. A write is
/// acknowledged once every member up stored its chunk, k or more, so a coded version with
/// fewer heard belongs to a write that never finished (it was not acknowledged) and is
/// ignored, unless that write left out members that were down ([`Header::written_around`]):
/// then, if its chunks heard and the positions unheard make k, its other chunks may be at the
/// members not heard, and it is adopted though it cannot be read until they answer. Adopting
/// the version before it would serve the value an acknowledged write replaced.
pub fn adopt(headers: &[Header], k: usize, unheard: usize) -> HashMap<Vec<u8>, Adopted> {
    /// What the records of one (key, version) say together. The fields not listed are the
    /// first record's.
    struct Seen {
        first: usize,
        written_around: bool,
        /// A whole value's home keeps its record's bytes through a touch (they are in the
        /// slab, under parity); the records at the parity positions carry the exptime. One
        /// that missed a touch (its node down) is written again once its node is back
        /// (`Node::fill_holes`); if the agent that knew went first, they disagree, and the
        /// sooner expiry is taken: the value may then lapse early (a miss) but is never served
        /// past an expiry a write or a touch set.
        parity_exptime: Option<i64>,
        /// The positions heard (bit p of word p / 64).
        positions: [u64; 4],
    }
    // Keys borrowed from the headers (a takeover reads a record per position of every key:
    // no copy of a key per record, and a fast hash).
    let mut seen: hashbrown::HashMap<(&[u8], u64), Seen> = hashbrown::HashMap::new();
    for (i, h) in headers.iter().enumerate() {
        let e = seen.entry((&h.key, h.version)).or_insert(Seen {
            first: i,
            written_around: false,
            parity_exptime: None,
            positions: [0; 4],
        });
        e.written_around |= h.written_around;
        if h.kind == Kind::Whole && h.chunk_index != 0 {
            e.parity_exptime = Some(e.parity_exptime.map_or(h.exptime, |x| sooner(x, h.exptime)));
        }
        let p = usize::from(h.chunk_index);
        e.positions[p / 64] |= 1 << (p % 64);
    }
    let mut best: hashbrown::HashMap<&[u8], (u64, &Seen)> = hashbrown::HashMap::new();
    for (&(key, version), s) in &seen {
        let h = &headers[s.first];
        let heard = s
            .positions
            .iter()
            .map(|w| w.count_ones() as usize)
            .sum::<usize>();
        let readable = match h.kind {
            Kind::Coded => heard >= k || (s.written_around && heard + unheard >= k),
            // The home's record, or a parity position's record of where it lies: the value
            // is read from the home or rebuilt from its page's stripe.
            Kind::Replica | Kind::Whole => heard > 0,
        };
        if !readable {
            continue;
        }
        let b = best.entry(key).or_insert((version, s));
        if version > b.0 {
            *b = (version, s);
        }
    }
    best.into_iter()
        .map(|(key, (version, s))| {
            let h = &headers[s.first];
            let adopted = Adopted {
                version,
                kind: h.kind,
                value_bytes: h.value_bytes,
                flags: h.flags,
                exptime: s.parity_exptime.unwrap_or(h.exptime),
                trail: h.trail,
                held: s.positions[0],
            };
            (key.to_vec(), adopted)
        })
        .collect()
}

/// The sooner of two absolute expiries (0: never).
fn sooner(a: i64, b: i64) -> i64 {
    match (a, b) {
        (0, x) | (x, 0) => x,
        (a, b) => a.min(b),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use codes::Code;

    #[test]
    fn encode_join_round_trip_all_lengths() {
        let codec = Codec::new("rs:6,3".parse::<Code>().unwrap());
        for len in [0usize, 1, 5, 6, 7, 100, 4097] {
            let value: Vec<u8> = (0..len).map(|i| (i * 31 + 7) as u8).collect();
            let chunks = encode(&codec, &value).unwrap();
            assert_eq!(chunks.len(), 9);
            assert!(chunks.iter().all(|c| c.len() == len.div_ceil(6)));
            let data: Vec<&[u8]> = chunks[..6].iter().map(|c| c.as_slice()).collect();
            assert_eq!(join(&data, len), value);
            if len > 0 {
                // Any 6 of 9 rebuild the lost data chunks.
                let avail: Vec<Option<&[u8]>> = (0..9)
                    .map(|i| (![0, 2, 4].contains(&i)).then(|| chunks[i].as_slice()))
                    .collect();
                let mut outs = vec![vec![0u8; chunks[0].len()]; 3];
                let mut refs: Vec<&mut [u8]> = outs.iter_mut().map(|o| o.as_mut_slice()).collect();
                codec.reconstruct(&avail, &[0, 2, 4], &mut refs).unwrap();
                assert_eq!(outs[1], chunks[2]);
            }
        }
    }

    fn h(key: &[u8], version: u64, idx: u8, kind: Kind) -> Header {
        Header {
            kind,
            chunk_index: idx,
            written_around: false,
            key: key.to_vec(),
            version,
            value_bytes: 10,
            flags: 0,
            exptime: 0,
            trail: [version + 100, version + 99, 0],
        }
    }

    /// `adopt` as it was first written (a key copied per record, the positions heard in a
    /// list): the oracle of the one that borrows the keys.
    fn adopt_by_copies(headers: &[Header], k: usize, unheard: usize) -> HashMap<Vec<u8>, Adopted> {
        let mut seen: HashMap<(Vec<u8>, u64), (Header, Vec<u8>)> = HashMap::new();
        let mut parity_exptime: HashMap<(Vec<u8>, u64), i64> = HashMap::new();
        for h in headers {
            let e = seen
                .entry((h.key.clone(), h.version))
                .or_insert_with(|| (h.clone(), Vec::new()));
            e.0.written_around |= h.written_around;
            if h.kind == Kind::Whole && h.chunk_index != 0 {
                let x = parity_exptime
                    .entry((h.key.clone(), h.version))
                    .or_insert(h.exptime);
                *x = sooner(*x, h.exptime);
                e.0.exptime = *x;
            }
            if !e.1.contains(&h.chunk_index) {
                e.1.push(h.chunk_index);
            }
        }
        let mut out: HashMap<Vec<u8>, Adopted> = HashMap::new();
        for ((key, version), (h, positions)) in seen {
            let readable = match h.kind {
                Kind::Coded => {
                    positions.len() >= k || (h.written_around && positions.len() + unheard >= k)
                }
                Kind::Replica | Kind::Whole => !positions.is_empty(),
            };
            if !readable || out.get(&key).is_some_and(|a| a.version >= version) {
                continue;
            }
            let held = positions
                .iter()
                .filter(|&&p| p < 64)
                .fold(0u64, |m, &p| m | (1 << p));
            let (kind, value_bytes, flags, exptime, trail) =
                (h.kind, h.value_bytes, h.flags, h.exptime, h.trail);
            let a = Adopted {
                version,
                kind,
                value_bytes,
                flags,
                exptime,
                trail,
                held,
            };
            out.insert(key, a);
        }
        out
    }

    #[test]
    fn adopt_equals_its_oracle_on_random_listings() {
        use rand::{Rng, SeedableRng};
        let mut rng = rand::rngs::SmallRng::seed_from_u64(2026);
        for round in 0..2_000 {
            let keys = rng.gen_range(1..6);
            let records = rng.gen_range(0..40);
            let hs: Vec<Header> = (0..records)
                .map(|_| {
                    let kind = [Kind::Coded, Kind::Replica, Kind::Whole][rng.gen_range(0..3)];
                    let key = format!("k{}", rng.gen_range(0..keys)).into_bytes();
                    let version = rng.gen_range(1..5u64);
                    // Positions past 64 too: counted as heard, not in `held`.
                    let idx = if rng.gen_bool(0.1) {
                        rng.gen_range(60..200)
                    } else {
                        rng.gen_range(0..9)
                    };
                    let mut r = h(&key, version, idx, kind);
                    r.written_around = rng.gen_bool(0.2);
                    r.exptime = [0, 100, 200, 300][rng.gen_range(0..4)];
                    r.flags = rng.gen_range(0..3);
                    r.value_bytes = rng.gen_range(0..3);
                    r
                })
                .collect();
            let (k, unheard) = (rng.gen_range(1..5), rng.gen_range(0..3));
            assert_eq!(
                adopt(&hs, k, unheard),
                adopt_by_copies(&hs, k, unheard),
                "round {round}: {hs:?}"
            );
        }
    }

    #[test]
    fn adopt_picks_highest_readable_version() {
        let mut hs = Vec::new();
        // Key a: version 1 whole on 0..3, version 2 only on 0..1 (write cut short).
        for i in 0..3 {
            hs.push(h(b"a", 1, i, Kind::Coded));
        }
        hs.push(h(b"a", 2, 0, Kind::Coded));
        hs.push(h(b"a", 2, 1, Kind::Coded));
        // Key b: version 5 has 3 chunks: adopted.
        for i in 0..3 {
            hs.push(h(b"b", 5, i, Kind::Coded));
        }
        // Key c: replica of version 9.
        hs.push(h(b"c", 9, 2, Kind::Replica));
        // Key d: two chunks only.
        hs.push(h(b"d", 1, 0, Kind::Coded));
        hs.push(h(b"d", 1, 0, Kind::Coded));
        hs.push(h(b"d", 1, 1, Kind::Coded));
        let a = adopt(&hs, 3, 0);
        assert_eq!(a[&b"a".to_vec()].version, 1);
        // The adopted version's request ids come with it.
        assert_eq!(a[&b"a".to_vec()].trail, [101, 100, 0]);
        assert_eq!(a[&b"b".to_vec()].version, 5);
        assert_eq!(a[&b"c".to_vec()].kind, Kind::Replica);
        assert!(!a.contains_key(b"d".as_slice()));
        // One position unheard: a's version 2 (2 chunks heard) is still a write cut short,
        // unless it left out members that were down: its third chunk may be the one unheard.
        assert_eq!(adopt(&hs, 3, 1)[&b"a".to_vec()].version, 1);
        for h in hs.iter_mut().filter(|h| h.key == b"a" && h.version == 2) {
            h.written_around = h.chunk_index == 1;
        }
        assert_eq!(adopt(&hs, 3, 0)[&b"a".to_vec()].version, 1);
        let a = adopt(&hs, 3, 1);
        assert_eq!(a[&b"a".to_vec()].version, 2);
        assert_eq!(a[&b"a".to_vec()].held, 0b11);
        assert_eq!(a[&b"b".to_vec()].version, 5);
        assert!(!a.contains_key(b"d".as_slice()));
    }

    /// A whole value's expiry is its parity positions' location records' (the home's record
    /// keeps the write's); when they disagree (one missed a touch), the sooner, 0 meaning never,
    /// in whatever order the members answered.
    #[test]
    fn adopt_takes_a_whole_values_soonest_parity_expiry() {
        let at = |idx: u8, exptime: i64| Header {
            exptime,
            ..h(b"w", 3, idx, Kind::Whole)
        };
        for (records, want) in [
            (vec![at(0, 0), at(2, 500)], 500),
            (vec![at(0, 900), at(2, 0), at(3, 0)], 0),
            (vec![at(0, 100), at(2, 0), at(3, 700)], 700),
            (vec![at(2, 700), at(3, 600), at(0, 100)], 600),
            (vec![at(3, 0), at(2, 650), at(0, 0)], 650),
            (vec![at(0, 0)], 0),
        ] {
            for rotate in 0..records.len() {
                let mut hs = records.clone();
                hs.rotate_left(rotate);
                let a = adopt(&hs, 2, 0);
                assert_eq!(a[&b"w".to_vec()].exptime, want, "{hs:?}");
            }
        }
    }
}
