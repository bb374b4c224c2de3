//! Checking one stripe whose every chunk was read: decode the data, re-encode the parity,
//! compare, and when they disagree find the one chunk that makes them disagree.

use codes::Codec;

use crate::buf::grow;
use crate::set::{rebuild, State};
use crate::FileError;

/// What [`check_stripe`] found.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub(crate) struct StripeCheck {
    /// Too few good records: the stripe cannot be decoded.
    pub lost: bool,
    /// Parity chunks (read and with valid records) that differ from the parity re-encoded from
    /// the data as read.
    pub mismatched: Vec<usize>,
    /// The one chunk whose removal makes every remaining chunk consistent, if exactly one does
    /// (found by leaving each chunk out in turn).
    pub culprit: Option<usize>,
    /// The chunks disagree and no single chunk explains it.
    pub unresolved: bool,
}

/// Checks a stripe of chunk size `c` whose chunks are in `bufs` with states `state` (every
/// chunk read or known absent). On return `bufs[..k]` hold the stripe's data (rebuilt where a
/// chunk was bad, and without the culprit if one was found) unless the stripe is lost or
/// unresolved. `scratch` and `parity` are reused buffers.
pub(crate) fn check_stripe(
    codec: &Codec,
    bufs: &mut [Vec<u8>],
    state: &[State],
    c: usize,
    scratch: &mut Vec<Vec<u8>>,
    parity: &mut Vec<Vec<u8>>,
) -> Result<StripeCheck, FileError> {
    let code = codec.code();
    let n = code.n();
    let good: Vec<usize> = (0..n).filter(|&i| state[i] == State::Good).collect();
    let erased: Vec<usize> = (0..n).filter(|&i| state[i] != State::Good).collect();
    let mut out = StripeCheck::default();
    if !codec.is_recoverable(&erased) {
        out.lost = true;
        return Ok(out);
    }
    // The good chunks as read, for the leave-one-out passes (only needed on a mismatch, but
    // the data buffers are about to be overwritten by the rebuild of erased ones: the good
    // ones are not, so copying lazily from `bufs` is enough).
    out.mismatched = mismatches(codec, bufs, &good, None, c, parity)?;
    if out.mismatched.is_empty() {
        return Ok(out);
    }
    scratch.resize_with(n, Vec::new);
    let mut consistent_without = Vec::new();
    for &i in &good {
        let mut without: Vec<usize> = erased.clone();
        without.push(i);
        if !codec.is_recoverable(&without) {
            continue;
        }
        for &g in &good {
            grow(&mut scratch[g], c, "a chunk copy")?;
            scratch[g][..c].copy_from_slice(&bufs[g][..c]);
        }
        let rest: Vec<usize> = good.iter().copied().filter(|&g| g != i).collect();
        if mismatches(codec, scratch, &rest, Some(i), c, parity)?.is_empty() {
            consistent_without.push(i);
        }
    }
    if let [i] = consistent_without[..] {
        out.culprit = Some(i);
        // The data without the culprit.
        let rest: Vec<usize> = good.iter().copied().filter(|&g| g != i).collect();
        rebuild_data(codec, bufs, &rest, c)?;
    } else {
        out.unresolved = true;
    }
    Ok(out)
}

/// Rebuilds every data chunk not in `good` from a repair set of `good`.
fn rebuild_data(
    codec: &Codec,
    bufs: &mut [Vec<u8>],
    good: &[usize],
    c: usize,
) -> Result<(), FileError> {
    let k = codec.code().k();
    let wanted: Vec<usize> = (0..k).filter(|j| !good.contains(j)).collect();
    if !wanted.is_empty() {
        let inputs = codec.repair_set(good, &wanted)?;
        rebuild(codec, bufs, &inputs, &wanted, c)?;
    }
    Ok(())
}

/// Rebuilds the data from `good` (in `bufs`), re-encodes the parity and returns the parity
/// chunks among `good` that differ from it. `left_out` is excluded from the comparison.
fn mismatches(
    codec: &Codec,
    bufs: &mut [Vec<u8>],
    good: &[usize],
    left_out: Option<usize>,
    c: usize,
    parity: &mut Vec<Vec<u8>>,
) -> Result<Vec<usize>, FileError> {
    let code = codec.code();
    let (k, n) = (code.k(), code.n());
    rebuild_data(codec, bufs, good, c)?;
    parity.resize_with(n - k, Vec::new);
    for p in parity.iter_mut() {
        grow(p, c, "a recomputed parity chunk")?;
    }
    {
        let data: Vec<&[u8]> = bufs[..k].iter().map(|b| &b[..c]).collect();
        let mut outs: Vec<&mut [u8]> = parity.iter_mut().map(|r| &mut r[..c]).collect();
        codec.encode(&data, &mut outs)?;
    }
    Ok((k..n)
        .filter(|p| good.contains(p) && Some(*p) != left_out)
        .filter(|&p| bufs[p][..c] != parity[p - k][..c])
        .collect())
}
