//! memcached 1.6's rules for the storage commands, decided on what the agent's index says.

use proto::StoreMode;

use crate::agent::index::Entry;

/// What a storage command does given the key's current entry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Decision {
    /// Store the new value (append/prepend: combined with the current value).
    Proceed,
    /// `NOT_STORED`: add of a present key; replace/append/prepend of a missing one.
    NotStored,
    /// `EXISTS`: cas value differs.
    Exists,
    /// `NOT_FOUND`: cas of a missing key.
    NotFound,
}

/// Decides a storage command. `compare_cas` is the client's CAS value for `cas` (and for meta
/// sets with `C`, which apply it to any mode).
pub fn decide(mode: StoreMode, current: Option<&Entry>, compare_cas: Option<u64>) -> Decision {
    if let Some(cas) = compare_cas {
        return match current {
            None => Decision::NotFound,
            Some(e) if e.cas() != cas => Decision::Exists,
            Some(_) => match mode {
                StoreMode::Add => Decision::NotStored,
                _ => Decision::Proceed,
            },
        };
    }
    match (mode, current) {
        (StoreMode::Set, _) => Decision::Proceed,
        (StoreMode::Add, None) => Decision::Proceed,
        (StoreMode::Add, Some(_)) => Decision::NotStored,
        (StoreMode::Replace | StoreMode::Append | StoreMode::Prepend, None) => Decision::NotStored,
        (StoreMode::Replace | StoreMode::Append | StoreMode::Prepend, Some(_)) => Decision::Proceed,
        (StoreMode::Cas, None) => Decision::NotFound,
        (StoreMode::Cas, Some(_)) => Decision::Exists,
    }
}

/// The value stored by append/prepend (which keep the current flags and exptime).
pub fn combine(mode: StoreMode, current: &[u8], data: &[u8]) -> Vec<u8> {
    let mut v = Vec::with_capacity(current.len() + data.len());
    match mode {
        StoreMode::Prepend => {
            v.extend_from_slice(data);
            v.extend_from_slice(current);
        }
        _ => {
            v.extend_from_slice(current);
            v.extend_from_slice(data);
        }
    }
    v
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::Kind;

    #[test]
    fn memcached_rules() {
        // A version is its CAS value with the rewrite bits (`record::REWRITE_BITS`) below it:
        // `e` is a value as written, `r` the same value after one rewrite.
        let cas = 7 << crate::record::REWRITE_BITS;
        let e = Entry::new(cas, 1, 0, 0, Kind::Coded, 0, 1, 1);
        let r = Entry::new(cas + 1, 1, 0, 0, Kind::Coded, 0, 1, 1);
        use Decision::*;
        use StoreMode::*;
        let table = [
            (Set, None, None, Proceed),
            (Set, Some(&e), None, Proceed),
            (Add, None, None, Proceed),
            (Add, Some(&e), None, NotStored),
            (Replace, None, None, NotStored),
            (Replace, Some(&e), None, Proceed),
            (Append, None, None, NotStored),
            (Prepend, Some(&e), None, Proceed),
            (Cas, None, Some(cas), NotFound),
            (Cas, Some(&e), Some(cas + 256), Exists),
            (Cas, Some(&e), Some(cas), Proceed),
            (Cas, Some(&e), Some(cas + 1), Exists),
            (Cas, Some(&r), Some(cas), Proceed),
            (Cas, Some(&r), Some(cas + 1), Exists),
            (Set, Some(&e), Some(cas - 256), Exists),
        ];
        for (mode, cur, cas, want) in table {
            assert_eq!(decide(mode, cur, cas), want, "{mode:?} {cur:?} {cas:?}");
        }
        assert_eq!(combine(Append, b"ab", b"cd"), b"abcd");
        assert_eq!(combine(Prepend, b"ab", b"cd"), b"cdab");
    }
}
