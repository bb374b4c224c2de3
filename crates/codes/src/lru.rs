//! A small least-recently-used map: the decode-calculator cache.

use std::collections::{BTreeMap, HashMap};
use std::hash::Hash;

/// A map holding at most `capacity` entries; inserting into a full map evicts the entry used
/// longest ago. `get` counts as a use.
#[derive(Debug)]
pub(crate) struct Lru<K, V> {
    capacity: usize,
    /// Incremented on every use; an entry's stamp is the tick of its last use.
    tick: u64,
    /// Key → (value, stamp of last use).
    entries: HashMap<K, (V, u64)>,
    /// Stamp → key, oldest first. Same key set as `entries`, one stamp per key.
    by_age: BTreeMap<u64, K>,
}

impl<K: Hash + Eq + Clone, V: Clone> Lru<K, V> {
    pub(crate) fn new(capacity: usize) -> Lru<K, V> {
        Lru {
            capacity,
            tick: 0,
            entries: HashMap::new(),
            by_age: BTreeMap::new(),
        }
    }

    pub(crate) fn len(&self) -> usize {
        self.entries.len()
    }

    pub(crate) fn capacity(&self) -> usize {
        self.capacity
    }

    /// The value for `key`, marking it most recently used.
    pub(crate) fn get(&mut self, key: &K) -> Option<V> {
        self.tick += 1;
        let tick = self.tick;
        let (value, stamp) = self.entries.get_mut(key)?;
        let key = self.by_age.remove(stamp).expect("stamp indexed");
        *stamp = tick;
        let value = value.clone();
        self.by_age.insert(tick, key);
        Some(value)
    }

    /// Inserts `value` unless `key` is present; returns the value now stored for `key` (the
    /// older one if another caller got there first), marked most recently used.
    pub(crate) fn get_or_insert(&mut self, key: K, value: V) -> V {
        if let Some(existing) = self.get(&key) {
            return existing;
        }
        if self.capacity == 0 {
            return value;
        }
        if self.entries.len() >= self.capacity {
            if let Some((_, oldest)) = self.by_age.pop_first() {
                self.entries.remove(&oldest);
            }
        }
        self.tick += 1;
        self.by_age.insert(self.tick, key.clone());
        self.entries.insert(key, (value.clone(), self.tick));
        value
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn evicts_least_recently_used() {
        let mut lru = Lru::new(2);
        assert_eq!(lru.get_or_insert(1, "a"), "a");
        assert_eq!(lru.get_or_insert(2, "b"), "b");
        assert_eq!(lru.get(&1), Some("a")); // 2 is now the oldest
        assert_eq!(lru.get_or_insert(3, "c"), "c");
        assert_eq!(lru.len(), 2);
        assert_eq!(lru.get(&2), None);
        assert_eq!(lru.get(&1), Some("a"));
        assert_eq!(lru.get(&3), Some("c"));
        // A present key keeps its first value.
        assert_eq!(lru.get_or_insert(3, "z"), "c");
        assert_eq!(lru.len(), 2);
    }

    #[test]
    fn zero_capacity_stores_nothing() {
        let mut lru = Lru::new(0);
        assert_eq!(lru.get_or_insert(1, 10), 10);
        assert_eq!(lru.len(), 0);
        assert_eq!(lru.get(&1), None);
        assert_eq!(lru.capacity(), 0);
    }
}
