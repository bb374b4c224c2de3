//! `Codec::repair_set` against brute force over small codes: for every pattern of up to four
//! unavailable chunks and every wanted set of up to three chunks, the repair set
//! - contains every wanted chunk that is available (it is copied, never rebuilt),
//! - reads only available chunks and spans the missing wanted ones,
//! - is as small as any set with those two properties (found by trying every subset),
//! - and errs exactly when no subset of the available chunks spans the missing wanted ones.
//!
//! The decoder built from it is then run on a stripe and must return the wanted chunks, with
//! the available ones copied (a unit row).

use codes::{Code, Codec, Kernel};
use gf::field;
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

/// Rank over GF(2^8) of the generator rows selected by `mask`.
fn rank(generator: &[u8], k: usize, mask: u32) -> usize {
    let mut rows: Vec<Vec<u8>> = (0..32)
        .filter(|i| mask >> i & 1 == 1)
        .map(|i| generator[i * k..(i + 1) * k].to_vec())
        .collect();
    let mut rank = 0;
    for col in 0..k {
        let Some(pivot) = (rank..rows.len()).find(|&r| rows[r][col] != 0) else {
            continue;
        };
        rows.swap(rank, pivot);
        let inv = field::inv(rows[rank][col]);
        for x in rows[rank].iter_mut() {
            *x = field::mul(*x, inv);
        }
        let pivot_row = rows[rank].clone();
        for (r, row) in rows.iter_mut().enumerate() {
            let c = row[col];
            if r != rank && c != 0 {
                for (x, &p) in row.iter_mut().zip(&pivot_row) {
                    *x ^= field::mul(c, p);
                }
            }
        }
        rank += 1;
    }
    rank
}

fn bits(mask: u32) -> Vec<usize> {
    (0..32).filter(|i| mask >> i & 1 == 1).collect()
}

/// Every mask over `n` bits with at most `max_ones` ones.
fn masks_up_to(n: usize, max_ones: u32) -> impl Iterator<Item = u32> {
    (0u32..1 << n).filter(move |m| m.count_ones() <= max_ones)
}

/// Smallest S with `forced ⊆ S ⊆ available` whose span holds every row of `missing`, by
/// trying every subset (`ranks[mask]` precomputed).
fn brute_force_minimum(ranks: &[usize], available: u32, forced: u32, missing: u32) -> Option<u32> {
    let free = available & !forced;
    let mut best: Option<u32> = None;
    // Every submask of `free`, including 0 and `free` itself.
    let mut sub = free;
    loop {
        let s = sub | forced;
        if ranks[(s | missing) as usize] == ranks[s as usize]
            && best.is_none_or(|b| s.count_ones() < b)
        {
            best = Some(s.count_ones());
        }
        if sub == 0 {
            break;
        }
        sub = (sub - 1) & free;
    }
    best
}

fn check_code(code: Code) {
    let codec = Codec::with_kernel(code, Kernel::reference());
    let (k, n) = (code.k(), code.n());
    let generator = code.generator();
    let ranks: Vec<usize> = (0u32..1 << n).map(|m| rank(&generator, k, m)).collect();

    // One stripe of random data to run every decoder on.
    let mut rng = SmallRng::seed_from_u64(n as u64 * 1000 + k as u64);
    let mut chunks: Vec<Vec<u8>> = (0..n)
        .map(|_| (0..8).map(|_| rng.gen()).collect())
        .collect();
    {
        let (data, parity) = chunks.split_at_mut(k);
        let data: Vec<&[u8]> = data.iter().map(|d| d.as_slice()).collect();
        let mut parity: Vec<&mut [u8]> = parity.iter_mut().map(|p| p.as_mut_slice()).collect();
        codec.encode(&data, &mut parity).unwrap();
    }

    let all = (1u32 << n) - 1;
    let mut checked = 0;
    for lost in masks_up_to(n, 4) {
        let available = all & !lost;
        for wanted in masks_up_to(n, 3).filter(|&w| w != 0) {
            let forced = wanted & available;
            let missing = wanted & !available;
            let minimum = brute_force_minimum(&ranks, available, forced, missing);
            let result = codec.repair_set(&bits(available), &bits(wanted));
            let case = format!(
                "{code}: available {:?}, wanted {:?}",
                bits(available),
                bits(wanted)
            );
            let reads = match (result, minimum) {
                (Ok(reads), Some(min)) => {
                    assert_eq!(reads.len() as u32, min, "{case}: {reads:?} is not minimal");
                    reads
                }
                (Err(e), None) => {
                    assert!(!e.is_bad_parameters(), "{case}: {e}");
                    continue;
                }
                (Ok(reads), None) => {
                    panic!("{case}: {reads:?} but nothing spans the wanted chunks")
                }
                (Err(e), Some(min)) => panic!("{case}: {e}, but {min} chunks suffice"),
            };
            assert!(
                reads.windows(2).all(|w| w[0] < w[1]),
                "{case}: {reads:?} unsorted"
            );
            let read_mask = reads.iter().fold(0u32, |m, &i| m | 1 << i);
            assert_eq!(
                read_mask & !available,
                0,
                "{case}: reads unavailable chunks"
            );
            assert_eq!(
                read_mask & forced,
                forced,
                "{case}: {reads:?} leaves out available wanted chunks"
            );
            assert_eq!(
                ranks[(read_mask | missing) as usize],
                ranks[read_mask as usize],
                "{case}: {reads:?} does not span the missing wanted chunks"
            );

            let wanted_list = bits(wanted);
            let calc = codec.decoder(&reads, &wanted_list).unwrap();
            let inputs: Vec<&[u8]> = reads.iter().map(|&i| chunks[i].as_slice()).collect();
            let mut out = vec![vec![0u8; 8]; wanted_list.len()];
            let mut outs: Vec<&mut [u8]> = out.iter_mut().map(|o| o.as_mut_slice()).collect();
            calc.compute(&inputs, &mut outs).unwrap();
            for (row, (&w, o)) in wanted_list.iter().zip(&out).enumerate() {
                assert_eq!(o, &chunks[w], "{case}: chunk {w}");
                if available >> w & 1 == 1 {
                    // Copied: coefficient 1 on itself, 0 elsewhere.
                    for (col, &i) in reads.iter().enumerate() {
                        assert_eq!(calc.coeff(row, col), u8::from(i == w), "{case}: chunk {w}");
                    }
                }
            }
            checked += 1;
        }
    }
    assert!(checked > 100, "{code}: only {checked} cases");
}

#[test]
fn repair_sets_are_minimal_and_copy_available_wanted_chunks_rs() {
    for code in ["rs:3,2", "rs:4,3", "rs-vand:5,4"] {
        check_code(code.parse().unwrap());
    }
}

#[test]
fn repair_sets_are_minimal_and_copy_available_wanted_chunks_lrc() {
    for code in [
        "lrc:4,2,2",
        "lrc:6,2,2",
        "lrc:6,3,1",
        "lrc:4,2,1",
        "lrc:4,1,2",
    ] {
        check_code(code.parse().unwrap());
    }
}

/// The case the review found: wanted chunk 7 is available, yet it was rebuilt from
/// [2, 3, 4, 6] instead of being read.
#[test]
fn available_wanted_global_parity_is_read_not_rebuilt() {
    let codec = Codec::new("lrc:4,2,2".parse().unwrap());
    let reads = codec.repair_set(&[2, 3, 4, 5, 6, 7], &[0, 7]).unwrap();
    assert!(reads.contains(&7), "{reads:?}");
    assert_eq!(reads.len(), 4);
    let calc = codec.decoder(&reads, &[0, 7]).unwrap();
    let pos = reads.iter().position(|&i| i == 7).unwrap();
    assert!((0..reads.len()).all(|c| calc.coeff(1, c) == u8::from(c == pos)));
}
