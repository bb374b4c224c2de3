//! A small least-recently-used map: the decode-calculator cache.
//!
//! Keys are short lists of chunk indices; they are hashed with a multiply-rotate hash (no
//! need for SipHash's flood resistance: keys come from the library, not from the network),
//! and looked up by slice so that a hit allocates nothing.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

/// FxHash-style hasher: one rotate, xor and multiply per word.
#[derive(Default, Clone, Copy, Debug)]
pub(crate) struct WordHasher(u64);

impl Hasher for WordHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        // A slice of integers arrives here as one byte string: take it a word at a time.
        let mut words = bytes.chunks_exact(8);
        for word in &mut words {
            self.write_u64(u64::from_le_bytes(word.try_into().expect("8 bytes")));
        }
        for &b in words.remainder() {
            self.write_u64(b as u64);
        }
    }
    fn write_u64(&mut self, word: u64) {
        self.0 = (self.0.rotate_left(5) ^ word).wrapping_mul(0x51_7c_c1_b7_27_22_0a_95);
    }
    fn write_usize(&mut self, word: usize) {
        self.write_u64(word as u64);
    }
}

/// A map from index lists to values holding at most `capacity` entries. Inserting into a full
/// map evicts the least recently used eighth of the entries in one pass (so a miss costs an
/// amortized few nanoseconds of bookkeeping, not a scan); `get` counts as a use.
#[derive(Debug)]
pub(crate) struct Lru<V> {
    capacity: usize,
    /// Incremented on every use; an entry's stamp is the tick of its last use.
    tick: u64,
    /// Key → (value, stamp of last use).
    entries: HashMap<Vec<usize>, (V, u64), BuildHasherDefault<WordHasher>>,
}

impl<V: Clone> Lru<V> {
    pub(crate) fn new(capacity: usize) -> Lru<V> {
        Lru {
            capacity,
            tick: 0,
            entries: HashMap::default(),
        }
    }

    pub(crate) fn len(&self) -> usize {
        self.entries.len()
    }

    pub(crate) fn capacity(&self) -> usize {
        self.capacity
    }

    /// The value for `key`, marking it most recently used.
    pub(crate) fn get(&mut self, key: &[usize]) -> Option<V> {
        self.tick += 1;
        let (value, stamp) = self.entries.get_mut(key)?;
        *stamp = self.tick;
        Some(value.clone())
    }

    /// Inserts `value` unless `key` is present; returns the value now stored for `key` (the
    /// older one if another caller got there first), marked most recently used.
    pub(crate) fn get_or_insert(&mut self, key: &[usize], value: V) -> V {
        if let Some(existing) = self.get(key) {
            return existing;
        }
        if self.capacity == 0 {
            return value;
        }
        if self.entries.len() >= self.capacity {
            self.evict_oldest(self.capacity.div_ceil(8));
        }
        self.tick += 1;
        self.entries
            .insert(key.to_vec(), (value.clone(), self.tick));
        value
    }

    /// Removes the `count` least recently used entries.
    fn evict_oldest(&mut self, count: usize) {
        let mut stamps: Vec<u64> = self.entries.values().map(|&(_, s)| s).collect();
        let count = count.min(stamps.len());
        if count == 0 {
            return;
        }
        let (_, &mut cutoff, _) = stamps.select_nth_unstable(count - 1);
        // Stamps are unique, so exactly `count` entries have a stamp ≤ cutoff.
        self.entries.retain(|_, &mut (_, s)| s > cutoff);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn evicts_least_recently_used() {
        let mut lru = Lru::new(2);
        assert_eq!(lru.get_or_insert(&[1], "a"), "a");
        assert_eq!(lru.get_or_insert(&[2], "b"), "b");
        assert_eq!(lru.get(&[1]), Some("a")); // [2] is now the oldest
        assert_eq!(lru.get_or_insert(&[3], "c"), "c");
        assert_eq!(lru.len(), 2);
        assert_eq!(lru.get(&[2]), None);
        assert_eq!(lru.get(&[1]), Some("a"));
        assert_eq!(lru.get(&[3]), Some("c"));
        // A present key keeps its first value.
        assert_eq!(lru.get_or_insert(&[3], "z"), "c");
        assert_eq!(lru.len(), 2);
    }

    #[test]
    fn evicts_an_eighth_of_a_large_cache_oldest_first() {
        let mut lru = Lru::new(16);
        for i in 0..16 {
            lru.get_or_insert(&[i], i);
        }
        // Use 0 and 1 so that 2 and 3 are the oldest.
        lru.get(&[0]);
        lru.get(&[1]);
        lru.get_or_insert(&[99], 99);
        assert_eq!(lru.len(), 15);
        assert_eq!(lru.get(&[2]), None);
        assert_eq!(lru.get(&[3]), None);
        for i in (0..2).chain(4..16).chain([99]) {
            assert_eq!(lru.get(&[i]), Some(i));
        }
    }

    #[test]
    fn zero_capacity_stores_nothing() {
        let mut lru = Lru::new(0);
        assert_eq!(lru.get_or_insert(&[1], 10), 10);
        assert_eq!(lru.len(), 0);
        assert_eq!(lru.get(&[1]), None);
        assert_eq!(lru.capacity(), 0);
    }
}
