//! Bytes from peers are untrusted: the record parser and the peer message decoders never panic
//! on arbitrary input (seeded random bytes and mutations of valid messages), and the member
//! store agrees with a simple model under random puts, deletes and watermarks.

use std::collections::HashMap;

use cache::carrier::peer::{self, AgentOp, Attempt, Once, Request};
use cache::member::store::{ChunkStore, PutOutcome};
use cache::record::{self, Header, Kind};
use proto::StoreMode;
use rand::rngs::SmallRng;
use rand::{Rng, RngCore, SeedableRng};

fn header(key: &[u8], idx: u8, version: u64) -> Header {
    Header {
        kind: Kind::Coded,
        chunk_index: idx,
        written_around: false,
        key: key.to_vec(),
        version,
        value_bytes: 30,
        flags: 1,
        exptime: 0,
        trail: [version + 1, version, 0],
    }
}

#[test]
fn parsers_survive_random_and_mutated_bytes() {
    let mut rng = SmallRng::seed_from_u64(0x1ec);
    let valid: Vec<Vec<u8>> = vec![
        record::encode(&header(b"k", 1, 5), b"0123456789"),
        peer::encode_request(&Request::Put {
            stripe: 1,
            watermark: 2,
            record: record::encode(&header(b"k", 1, 5), b"abc"),
        }),
        peer::encode_request(&Request::Agent(AgentOp::Store {
            mode: StoreMode::Set,
            key: b"key".to_vec(),
            flags: 3,
            exptime: 0,
            compare_cas: Some(9),
            value: vec![1; 40],
            once: Once::first(77),
        })),
        peer::encode_response(&peer::Response::Headers(
            vec![record::encode(&header(b"x", 0, 1), &[])],
            vec![(b"gone".to_vec(), 4)],
        )),
    ];
    for round in 0..20_000 {
        let bytes = if round % 2 == 0 {
            let mut b = vec![0u8; rng.gen_range(0..200)];
            rng.fill_bytes(&mut b);
            b
        } else {
            let mut b = valid[rng.gen_range(0..valid.len())].clone();
            for _ in 0..rng.gen_range(1..4) {
                match rng.gen_range(0..3) {
                    0 if !b.is_empty() => {
                        let i = rng.gen_range(0..b.len());
                        b[i] ^= 1 << rng.gen_range(0..8);
                    }
                    1 if !b.is_empty() => {
                        b.truncate(rng.gen_range(0..b.len()));
                    }
                    _ => b.push(rng.gen()),
                }
            }
            b
        };
        let _ = record::parse(&bytes);
        let _ = record::parse_header(&bytes);
        let _ = peer::decode_request(&bytes);
        let _ = peer::decode_response(&bytes);
    }
}

#[test]
fn member_store_matches_a_model() {
    let mut rng = SmallRng::seed_from_u64(7);
    let mut store = ChunkStore::new();
    // Model: the highest version put per (stripe, position, key), unless deleted since; a
    // delete's tombstone per (stripe, key) refuses every later put of a lower version, and a
    // put of its version or above lifts it.
    let mut model: HashMap<(u32, u8, Vec<u8>), u64> = HashMap::new();
    let mut tombs: HashMap<(u32, Vec<u8>), u64> = HashMap::new();
    for _ in 0..20_000 {
        let stripe = rng.gen_range(0..3u32);
        let pos = rng.gen_range(0..3u8);
        let key = format!("k{}", rng.gen_range(0..5)).into_bytes();
        let version = rng.gen_range(1..1000u64);
        if rng.gen_bool(0.1) {
            store.delete(stripe, &key, version);
            let t = tombs.entry((stripe, key.clone())).or_insert(0);
            *t = (*t).max(version);
            for p in 0..3u8 {
                let slot = (stripe, p, key.clone());
                if model.get(&slot).is_some_and(|&v| v < version) {
                    model.remove(&slot);
                }
            }
            continue;
        }
        let data = vec![version as u8; rng.gen_range(0..20)];
        let rec = record::encode(&header(&key, pos, version), &data);
        let outcome = store.put(stripe, rec, rng.gen_range(0..1000)).unwrap();
        if tombs
            .get(&(stripe, key.clone()))
            .is_some_and(|&d| d > version)
        {
            assert_eq!(outcome, PutOutcome::Stale, "a put below a tombstone");
            continue;
        }
        tombs.remove(&(stripe, key.clone()));
        let e = model.entry((stripe, pos, key)).or_insert(version);
        *e = (*e).max(version);
    }
    for ((stripe, pos, key), v) in &model {
        let got = store.get_latest(*stripe, *pos, key).expect("held");
        assert_eq!(record::parse(got).unwrap().0.version, *v);
        assert!(store.get(*stripe, *pos, key, *v).is_some());
    }
    assert_eq!(store.len(), model.len());
    for s in 0..3u32 {
        let mut have = store.tombstones(s);
        have.sort();
        let mut want: Vec<(Vec<u8>, u64)> = tombs
            .iter()
            .filter(|((ts, _), _)| *ts == s)
            .map(|((_, k), &v)| (k.clone(), v))
            .collect();
        want.sort();
        assert_eq!(have, want, "stripe {s}'s tombstones");
    }
    // Byte accounting: dropping every previous record leaves exactly the current ones.
    for s in 0..3 {
        store.trim(s, u64::MAX);
    }
    let current: u64 = model
        .keys()
        .map(|(s, p, k)| store.get_latest(*s, *p, k).unwrap().len() as u64)
        .sum();
    assert_eq!(store.bytes(), current);
}

/// The fuzz target `peer_message`'s property on seeded inputs: valid messages of every kind,
/// their mutations and random bytes.
#[test]
fn peer_decoders_round_trip_what_they_accept() {
    let mut rng = SmallRng::seed_from_u64(0x9ee7);
    let rec = record::encode(&header(b"key", 2, 77), b"chunk bytes");
    let valid: Vec<Vec<u8>> = vec![
        rec.clone(),
        peer::encode_request(&Request::Heartbeat { from: 3 }),
        peer::encode_request(&Request::Put {
            stripe: 1,
            watermark: 2,
            record: rec.clone(),
        }),
        peer::encode_request(&Request::Agent(AgentOp::Store {
            mode: StoreMode::Cas,
            key: b"key".to_vec(),
            flags: 3,
            exptime: -1,
            compare_cas: Some(9),
            value: b"v".to_vec(),
            once: Once {
                id: 78,
                attempt: Attempt::Retry,
            },
        })),
        peer::encode_request(&Request::Agent(AgentOp::Get {
            key: b"key".to_vec(),
            touch: None,
            degrade: Some(1),
        })),
        peer::encode_response(&peer::Response::Record(Some(rec))),
        peer::encode_response(&peer::Response::Agent(peer::AgentResult::Value {
            flags: 1,
            cas: 2,
            exptime: 0,
            value: b"value".to_vec(),
        })),
    ];
    let mut accepted = 0;
    for v in &valid {
        assert!(cache::check::peer_bytes_arbitrary(v) >= 1, "{v:?} refused");
    }
    for _ in 0..20_000 {
        let mut m = valid[rng.gen_range(0..valid.len())].clone();
        for _ in 0..rng.gen_range(1..4) {
            match rng.gen_range(0..3) {
                0 if !m.is_empty() => {
                    let i = rng.gen_range(0..m.len());
                    m[i] = rng.gen();
                }
                1 if !m.is_empty() => m.truncate(rng.gen_range(0..m.len())),
                _ => m.push(rng.gen()),
            }
        }
        accepted += cache::check::peer_bytes_arbitrary(&m);
        let mut random = vec![0u8; rng.gen_range(0..64)];
        rng.fill_bytes(&mut random);
        accepted += cache::check::peer_bytes_arbitrary(&random);
    }
    // The mutations reach past the decoders' first checks.
    assert!(accepted > 1_000, "only {accepted} accepted");
}

/// A store mode byte past `cas` (5) is refused, not read as `cas`.
#[test]
fn store_modes_past_cas_are_refused() {
    let op = |mode| {
        peer::encode_request(&Request::Agent(AgentOp::Store {
            mode,
            key: b"k".to_vec(),
            flags: 0,
            exptime: 0,
            compare_cas: None,
            value: Vec::new(),
            once: Once::first(3),
        }))
    };
    // The mode's byte: where a set and an add differ.
    let (set, add) = (op(StoreMode::Set), op(StoreMode::Add));
    let at = (0..set.len()).find(|&i| set[i] != add[i]).unwrap();
    assert_eq!((set[at], add[at]), (0, 1));
    for b in 0..=255u8 {
        let mut bytes = set.clone();
        bytes[at] = b;
        let decoded = peer::decode_request(&bytes);
        assert_eq!(decoded.is_some(), b <= 5, "mode byte {b}");
    }
    assert_eq!(
        peer::decode_request(&op(StoreMode::Cas)).unwrap(),
        Request::Agent(AgentOp::Store {
            mode: StoreMode::Cas,
            key: b"k".to_vec(),
            flags: 0,
            exptime: 0,
            compare_cas: None,
            value: Vec::new(),
            once: Once::first(3),
        })
    );
}
