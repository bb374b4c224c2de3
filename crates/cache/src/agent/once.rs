//! Writes applied at most once across retries and takeovers.
//!
//! The node a client sends a write to gives it a request id ([`Once`]); the agent writes the id
//! into the records of the version the write makes, behind the ids of the key's two writes
//! before it (`record::Trail`), so an index rebuilt by another agent knows them too. A write
//! tried again after a try whose fate is unknown (the agent sent no reply, or a write on the
//! event loop gave up after its records left) is first looked up: if the key's trail holds its
//! id, it was applied, and the answer says what it did — `STORED` with the version, or the
//! number an `incr`/`decr` left if its version is still the key's current one — instead of
//! applying it a second time. If the trail does not hold it, the first try may still have been
//! applied and replaced since, by more writes than the trail keeps, or left records at members
//! no one has heard: the retry is refused as in doubt, never applied. The one exception is a
//! rerun by this node's worker of a write its event loop gave up while leading without a break
//! ([`Attempt::Rerun`]): if the stripe's index is still the one the write was given up in, no
//! other node has led the stripe since, none can have adopted its records, and the new version
//! supersedes them.

use crate::agent::index::Entry;
use crate::carrier::peer::{AgentResult, Attempt, Once};
use crate::node::{bump, Node};

/// Where a write's id was found in its key's trail.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Found {
    /// The key's current version is the one the write made.
    Current,
    /// The write was applied, and later writes replaced its version.
    Replaced,
}

/// Where `id` is in `entry`'s trail, if it is.
pub(crate) fn find(entry: Option<&Entry>, id: u64) -> Option<Found> {
    let trail = entry?.trail;
    match trail.iter().position(|&t| t == id) {
        _ if id == 0 => None,
        Some(0) => Some(Found::Current),
        Some(_) => Some(Found::Replaced),
        None => None,
    }
}

/// The reply to a retry that cannot tell whether its first try was applied.
const UNKNOWN: &str = "the request may or may not have been applied: an earlier try of it may \
     have been, and no record of the key shows it";

impl Node {
    /// What to do with a write carrying `once` before it is applied, under the key's lock
    /// (`current`: the key's live entry): `None` to apply it, or the answer. `arith`: an
    /// `incr`/`decr`, whose answer is the number its version holds.
    pub(crate) fn once_answer(
        &self,
        stripe: usize,
        key: &[u8],
        once: Once,
        current: Option<&Entry>,
        arith: bool,
    ) -> Option<AgentResult> {
        if once.id == 0 || once.attempt == Attempt::First {
            return None;
        }
        let c = &self.counters;
        log::debug!(
            "stripe {stripe}: {} request {:x} tried again ({:?}): {:?} in the trail {:x?}",
            String::from_utf8_lossy(key),
            once.id,
            once.attempt,
            find(current, once.id),
            current.map(|e| e.trail)
        );
        match (find(current, once.id), current) {
            (Some(Found::Current), Some(e)) => {
                bump(&c.retries_answered);
                if !arith {
                    return Some(AgentResult::Stored { cas: e.cas() });
                }
                Some(match self.read_value(stripe, key, e, None) {
                    // The number as `incr` reads it (a value may be padded with spaces).
                    Ok(v) => match proto::incr_decr(&v, proto::ArithOp::Incr, 0) {
                        Ok(r) => AgentResult::Number {
                            number: r.number,
                            cas: e.cas(),
                            exptime: e.exptime,
                        },
                        Err(_) => AgentResult::Error(
                            "the request was applied and its number is no longer known (the \
                             key's value is not a number now)"
                                .into(),
                        ),
                    },
                    Err(r) => AgentResult::Error(r),
                })
            }
            (Some(_), _) => {
                bump(&c.retries_answered);
                // Applied, and replaced since: a store's answer is known; an arithmetic's
                // number is not (its version is gone).
                Some(if arith {
                    AgentResult::Error(
                        "the request was applied and later writes replaced the number it left: \
                         its result is no longer known"
                            .into(),
                    )
                } else {
                    AgentResult::Stored { cas: 0 }
                })
            }
            (None, _) => {
                if let Attempt::Rerun { epoch } = once.attempt {
                    if self.with_index(stripe, |ix| ix.epoch) == epoch {
                        return None;
                    }
                }
                bump(&c.retries_in_doubt);
                bump(&c.writes_in_doubt);
                Some(AgentResult::Error(UNKNOWN.into()))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::Kind;

    #[test]
    fn an_id_is_found_where_the_trail_holds_it() {
        let mut e = Entry::new(7, 1, 0, 0, Kind::Replica, 7, 4, 10);
        e.trail = [30, 20, 10];
        assert_eq!(find(Some(&e), 30), Some(Found::Current));
        assert_eq!(find(Some(&e), 20), Some(Found::Replaced));
        assert_eq!(find(Some(&e), 10), Some(Found::Replaced));
        assert_eq!(find(Some(&e), 40), None);
        assert_eq!(find(None, 30), None);
        // 0 is "no id": never found, though a short trail holds zeros.
        e.trail = [30, 0, 0];
        assert_eq!(find(Some(&e), 0), None);
    }
}
