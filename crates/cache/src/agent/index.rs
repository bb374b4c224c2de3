//! The agent's index of one Mem Stripe: every live value's version (its CAS value,
//! `Entry::cas`), size, flags and exptime, its LRU order, and the memory its records take on
//! each member position.
//!
//! Each position of a stripe has a share of its node's memory (`-m` divided by the slots the
//! node holds). Before a write, [`StripeIndex::reserve`] evicts whole values in LRU order until
//! the new value's records fit at every position it uses, so no member over-commits and no
//! partial value remains readable (the caller deletes the victims' records on the members).

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::hash::BuildHasher;

use hashbrown::{DefaultHashBuilder, HashTable};

use crate::record::{self, Kind};

/// One value as the agent knows it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Entry {
    pub version: u64,
    pub value_bytes: u64,
    pub flags: u32,
    /// Absolute Unix seconds, 0 = never.
    pub exptime: i64,
    pub kind: Kind,
    /// When it was stored (µs since the epoch); `flush_all` invalidates by this time.
    pub stored_at_us: u64,
    /// Positions `0..positions` hold a record of this value ...
    pub positions: usize,
    /// ... of this many bytes each.
    pub charge_bytes: u64,
    /// Positions (bit p) that are not known to hold this version's record: a member that was
    /// down (or stalled) during the write, or that answered a read with another version. The
    /// agent fills them in the background once their node is up ([`StripeIndex::holes`]).
    pub holes: u64,
    /// The request ids of the key's last writes, this version's first (`record::Trail`).
    pub trail: record::Trail,
    /// A whole value's location at its home, when this index knows it (the write that
    /// stored it, or a location record an index rebuild read): a repair then needs not ask
    /// the parity positions for it.
    pub whole_at: Option<record::WholeAt>,
    /// The tick of its last use ...
    lru_tick: u64,
    /// ... and the tick it is filed under in the LRU order (at most `lru_tick`).
    lru_filed: u64,
}

impl Entry {
    /// The value's CAS value, as clients see it ([`record::cas_of`]).
    pub fn cas(&self) -> u64 {
        record::cas_of(self.version)
    }

    #[allow(clippy::too_many_arguments)]
    pub fn new(
        version: u64,
        value_bytes: u64,
        flags: u32,
        exptime: i64,
        kind: Kind,
        stored_at_us: u64,
        positions: usize,
        charge_bytes: u64,
    ) -> Entry {
        Entry {
            version,
            value_bytes,
            flags,
            exptime,
            kind,
            stored_at_us,
            positions,
            charge_bytes,
            holes: 0,
            trail: [0; record::TRAIL],
            whole_at: None,
            lru_tick: 0,
            lru_filed: 0,
        }
    }
}

/// The record size and positions of a value: coded values put one chunk of ⌈len/k⌉ bytes on
/// every position; replicated values put the whole value on positions `0..replicas`.
pub fn charge(
    kind: Kind,
    key_bytes: usize,
    value_bytes: u64,
    k: usize,
    n: usize,
    replicas: usize,
) -> (usize, u64) {
    let overhead = (record::OVERHEAD_BYTES + key_bytes) as u64;
    match kind {
        Kind::Coded => (n, overhead + value_bytes.div_ceil(k as u64)),
        Kind::Replica => (replicas, overhead + value_bytes),
        // Kept at position 0 only (its home), counted in chunk units: a k-th of its record,
        // as a coded value charges each position. The home's slab thus holds k shares' worth
        // of whole values, and the parity pages for its stripes take the place of the other
        // positions' shares.
        Kind::Whole => (1, (overhead + value_bytes).div_ceil(k as u64)),
    }
}

/// Bit `p` of a hole mask (0 for positions past 63: holes are tracked for the first 64
/// positions of a stripe).
pub fn bit(p: usize) -> u64 {
    if p < 64 {
        1 << p
    } else {
        0
    }
}

/// Bits `0..positions`.
pub fn position_mask(positions: usize) -> u64 {
    if positions >= 64 {
        u64::MAX
    } else {
        (1u64 << positions) - 1
    }
}

/// No room for a value even after evicting everything else.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("a record of {charge_bytes} bytes does not fit in the {share_bytes}-byte share of a stripe position")]
pub struct NoRoom {
    pub charge_bytes: u64,
    pub share_bytes: u64,
}

/// Why a looked-up entry is not returned.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Gone {
    Expired,
    Flushed,
}

/// Bytes of a key kept in the index's table entry itself.
const INLINE_KEY_BYTES: usize = 30;

/// A key as the index keeps it: up to [`INLINE_KEY_BYTES`] in the table's entry (YCSB's keys
/// are 23 bytes), a longer one boxed. Inline, a lookup's key compare reads the entry it found
/// instead of another allocation (one cache miss less), and the key takes no allocation of its
/// own (the entry grows by 16 bytes, a boxed key of up to 24 bytes took 32 more).
#[derive(Debug)]
enum IndexKey {
    Inline(u8, [u8; INLINE_KEY_BYTES]),
    Boxed(Box<[u8]>),
}

impl IndexKey {
    fn new(key: &[u8]) -> IndexKey {
        if key.len() <= INLINE_KEY_BYTES {
            let mut b = [0; INLINE_KEY_BYTES];
            b[..key.len()].copy_from_slice(key);
            IndexKey::Inline(key.len() as u8, b)
        } else {
            IndexKey::Boxed(key.into())
        }
    }

    fn bytes(&self) -> &[u8] {
        match self {
            IndexKey::Inline(len, b) => &b[..*len as usize],
            IndexKey::Boxed(b) => b,
        }
    }
}

#[derive(Debug)]
pub struct StripeIndex {
    /// The live values with their keys.
    entries: HashTable<(IndexKey, Entry)>,
    hasher: DefaultHashBuilder,
    /// LRU order: tick → the hash of the key of the entry filed under that tick (its
    /// `lru_filed`), which holds no copy of the key. A use moves only the entry's `lru_tick`;
    /// eviction files an entry used since it was filed again under its last use, so the first
    /// entry met at its own tick is the least recently used (an exact LRU, with no change of
    /// this map on a read).
    lru: BTreeMap<u64, u64>,
    tick: u64,
    /// Bytes of records (committed and reserved) per position.
    used_bytes: Vec<u64>,
    share_bytes: u64,
    last_version: u64,
    /// Versions handed out whose writes have not finished; the smallest bounds what members
    /// may forget (see [`StripeIndex::watermark`]).
    inflight: BTreeSet<u64>,
    /// Versions of failed writes kept in flight, per key, until the key is written again or
    /// deleted ([`StripeIndex::hold_open`]).
    held_open: HashMap<Vec<u8>, Vec<u64>>,
    pub evictions: u64,
    /// Positions of the stripe whose members the rebuild that made this index did not hear
    /// (0 for an index made empty).
    pub unheard: usize,
    /// When this index was made (before any record was listed for it): an agent lease that
    /// lapsed after it makes it stale (`lease.rs`).
    pub built_at: std::time::Instant,
    /// Unique to this index in the process: a write given up on the event loop and written
    /// again by a worker may be written anew only in the index it was given up in (`once`).
    pub epoch: u64,
    /// Which values the layout wants whole ([`StripeIndex::split_values`]).
    whole_rule: WholeRule,
    /// Counts kept as entries come, change and go (see [`Tally`]).
    tally: Tally,
    /// The entries that expire: (exptime, hash of the key) → how many entries have both (two
    /// keys may share a hash). The sweep takes the expired ones from the front.
    expiring: BTreeMap<(i64, u64), u32>,
    /// The flush (`oldest_live_us`) whose flushed entries the sweep has taken out: a sweep
    /// walks the entries once per flush, not once a second.
    flush_swept: u64,
    /// Walks over the entries the periodic work made (hole filling, split values, a flush's
    /// sweep): none while there is nothing to find.
    walks: std::cell::Cell<u64>,
}

/// Which values the layout wants kept whole at their home: those under `below_bytes`, whose
/// record (key and value with the record's overhead) fits `record_max_bytes` (a slab page).
/// The default wants none (the split layout).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct WholeRule {
    pub below_bytes: u64,
    pub record_max_bytes: usize,
}

impl WholeRule {
    /// Whether a value of `value_bytes` under a key of `key_bytes` is wanted whole.
    pub fn wants(&self, key_bytes: usize, value_bytes: u64) -> bool {
        value_bytes < self.below_bytes
            && (record::OVERHEAD_BYTES + key_bytes) as u64 + value_bytes
                <= self.record_max_bytes as u64
    }
}

/// What the index keeps count of as entries come, change and go, so that its periodic work
/// (hole filling, the rewrite of split values, `stats`) needs no walk over every entry: in a
/// cache of millions of values a walk holds the stripe's lock, and with it every read of the
/// stripe, for tens of milliseconds.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Tally {
    /// Entries with at least one hole ...
    holed: usize,
    /// ... and the holes of all entries.
    holes: u64,
    /// Entries stored split (coded or replicated) that the layout wants whole.
    split_wanted_whole: usize,
    /// [`StripeIndex::footprint`].
    footprint: [u64; 6],
}

/// The source of [`StripeIndex::epoch`].
static EPOCHS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);

impl StripeIndex {
    pub fn new(chunk_count: usize, share_bytes: u64) -> StripeIndex {
        StripeIndex {
            entries: HashTable::new(),
            hasher: DefaultHashBuilder::default(),
            lru: BTreeMap::new(),
            tick: 0,
            used_bytes: vec![0; chunk_count],
            share_bytes,
            last_version: 0,
            inflight: BTreeSet::new(),
            held_open: HashMap::new(),
            evictions: 0,
            unheard: 0,
            built_at: std::time::Instant::now(),
            epoch: EPOCHS.fetch_add(1, std::sync::atomic::Ordering::Relaxed),
            whole_rule: WholeRule::default(),
            tally: Tally::default(),
            expiring: BTreeMap::new(),
            flush_swept: 0,
            walks: std::cell::Cell::new(0),
        }
    }

    /// How many walks over the entries the periodic work has made.
    pub fn walks(&self) -> u64 {
        self.walks.get()
    }

    fn walked(&self) {
        self.walks.set(self.walks.get() + 1);
    }

    /// The index with `rule` for the values its layout wants whole (before any entry).
    pub fn with_whole_rule(mut self, rule: WholeRule) -> StripeIndex {
        debug_assert!(self.entries.is_empty());
        self.whole_rule = rule;
        self
    }

    /// Counts `e` (of a key of `key_bytes`) in or out of the tallies and the expiry order.
    fn count(&mut self, key_bytes: usize, hash: u64, e: &Entry, add: bool) {
        let t = &mut self.tally;
        let step = |v: &mut u64, by: u64| *v = if add { *v + by } else { v.saturating_sub(by) };
        let step_n = |v: &mut usize, on: bool| {
            if on {
                *v = if add { *v + 1 } else { v.saturating_sub(1) };
            }
        };
        step_n(&mut t.holed, e.holes != 0);
        step(&mut t.holes, u64::from(e.holes.count_ones()));
        step_n(
            &mut t.split_wanted_whole,
            e.kind != Kind::Whole && self.whole_rule.wants(key_bytes, e.value_bytes),
        );
        let f = footprint_of(key_bytes, e);
        for (sum, by) in t.footprint.iter_mut().zip(f) {
            step(sum, by);
        }
        if e.exptime != 0 {
            let at = (e.exptime, hash);
            if add {
                *self.expiring.entry(at).or_insert(0) += 1;
            } else if let Some(c) = self.expiring.get_mut(&at) {
                *c -= 1;
                if *c == 0 {
                    self.expiring.remove(&at);
                }
            }
        }
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    fn hash(&self, key: &[u8]) -> u64 {
        self.hasher.hash_one(key)
    }

    /// The entry of `key`.
    pub fn get(&self, key: &[u8]) -> Option<&Entry> {
        self.entries
            .find(self.hash(key), |(k, _)| k.bytes() == key)
            .map(|(_, e)| e)
    }

    fn get_mut(&mut self, key: &[u8]) -> Option<&mut Entry> {
        let hash = self.hash(key);
        self.entries
            .find_mut(hash, |(k, _)| k.bytes() == key)
            .map(|(_, e)| e)
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    pub fn used_bytes(&self) -> &[u64] {
        &self.used_bytes
    }

    pub fn share_bytes(&self) -> u64 {
        self.share_bytes
    }

    /// A new version, larger than every version this index has handed out or seen, and at
    /// least the clock in µs times 2^[`record::REWRITE_BITS`] (so a new agent's versions
    /// follow the old agent's), with its rewrite bits 0 ([`record::cas_of`]). Registered as in
    /// flight until [`StripeIndex::finish`].
    pub fn next_version(&mut self, now_us: u64) -> u64 {
        let step = 1u64 << record::REWRITE_BITS;
        let v = (self.last_version + 1)
            .max(now_us.saturating_mul(step))
            .next_multiple_of(step);
        self.last_version = v;
        self.inflight.insert(v);
        v
    }

    /// The version of a rewrite of `key`'s value that keeps its bytes, flags and exptime
    /// (its CAS value too: only the rewrite bits grow), registered as in flight as
    /// [`StripeIndex::next_version`]'s; `None` if the key is not at `version`, or its rewrite
    /// bits are spent.
    pub fn rewrite_version(&mut self, key: &[u8], version: u64) -> Option<u64> {
        if self.get(key)?.version != version {
            return None;
        }
        let v = version + 1;
        if record::cas_of(v) != record::cas_of(version) || self.inflight.contains(&v) {
            return None;
        }
        self.last_version = self.last_version.max(v);
        self.inflight.insert(v);
        Some(v)
    }

    /// Marks a write's version done (committed or abandoned).
    pub fn finish(&mut self, version: u64) {
        self.inflight.remove(&version);
    }

    /// Keeps the version of a write of `key` that failed after some members may have stored
    /// its records in flight, until the key is committed with a later version or deleted
    /// ([`StripeIndex::release_held`]). Those members keep the record it replaced only while
    /// the watermark is at or below it: finished at once, the failed write would cost the key
    /// its previous value wherever it had been stored.
    pub fn hold_open(&mut self, key: &[u8], version: u64) {
        if self.inflight.contains(&version) {
            self.held_open
                .entry(key.to_vec())
                .or_default()
                .push(version);
        }
    }

    /// Finishes the versions held open for `key` (written again, or deleted).
    pub fn release_held(&mut self, key: &[u8]) {
        for v in self.held_open.remove(key).unwrap_or_default() {
            self.inflight.remove(&v);
        }
    }

    /// Every version below this is committed or abandoned: members may drop older records
    /// they keep in case a write fails half-way.
    pub fn watermark(&self) -> u64 {
        self.inflight
            .first()
            .copied()
            .unwrap_or(self.last_version + 1)
    }

    /// Makes sure later versions are above `version` (index rebuilt from records).
    pub fn observe_version(&mut self, version: u64) {
        self.last_version = self.last_version.max(version);
    }

    /// The live entry of `key` (moved to the front of the LRU), or why it is gone. Expired and
    /// flushed entries are removed from the index and returned, so the caller deletes their
    /// records.
    pub fn lookup(
        &mut self,
        key: &[u8],
        now_secs: i64,
        now_us: u64,
        oldest_live_us: u64,
    ) -> Result<Option<Entry>, (Gone, Box<Entry>)> {
        let Some(e) = self.get(key) else {
            return Ok(None);
        };
        let gone = if crate::time::is_expired(e.exptime, now_secs) {
            Some(Gone::Expired)
        } else if oldest_live_us != 0
            && oldest_live_us <= now_us
            && e.stored_at_us <= oldest_live_us
        {
            Some(Gone::Flushed)
        } else {
            None
        };
        if let Some(g) = gone {
            let e = self.remove(key).expect("present");
            return Err((g, Box::new(e)));
        }
        self.tick += 1;
        let tick = self.tick;
        let e = self.get_mut(key).expect("present");
        e.lru_tick = tick;
        Ok(Some(e.clone()))
    }

    /// As [`StripeIndex::lookup`], but an expired or flushed entry is left in place for the
    /// caller that can delete its records (`Err`): for readers that must not block.
    pub fn lookup_live(
        &mut self,
        key: &[u8],
        now_secs: i64,
        now_us: u64,
        oldest_live_us: u64,
    ) -> Result<Option<Entry>, Gone> {
        let recent = (self.entries.len() / 8) as u64;
        let tick = self.tick;
        let Some(e) = self.get_mut(key) else {
            return Ok(None);
        };
        if crate::time::is_expired(e.exptime, now_secs) {
            return Err(Gone::Expired);
        }
        if oldest_live_us != 0 && oldest_live_us <= now_us && e.stored_at_us <= oldest_live_us {
            return Err(Gone::Flushed);
        }
        // A read moves the entry to the most recently used end, unless it is already among
        // the most recently used eighth (as memcached bumps an item at most once a minute): a
        // hot key's reads then leave the LRU order alone.
        let bump = tick - e.lru_tick > recent;
        if bump {
            e.lru_tick = tick + 1;
        }
        let out = e.clone();
        self.tick += u64::from(bump);
        Ok(Some(out))
    }

    /// Removes an entry and releases its memory.
    pub fn remove(&mut self, key: &[u8]) -> Option<Entry> {
        let hash = self.hash(key);
        let (_, e) = self
            .entries
            .find_entry(hash, |(k, _)| k.bytes() == key)
            .ok()?
            .remove()
            .0;
        self.count(key.len(), hash, &e, false);
        self.lru.remove(&e.lru_filed);
        for u in &mut self.used_bytes[..e.positions] {
            *u = u.saturating_sub(e.charge_bytes);
        }
        Some(e)
    }

    /// Reserves `charge_bytes` at positions `0..positions`, evicting least recently used values
    /// until it fits. Returns the victims (their records must be deleted on the members).
    pub fn reserve(
        &mut self,
        positions: usize,
        charge_bytes: u64,
    ) -> Result<Vec<(Vec<u8>, Entry)>, NoRoom> {
        if charge_bytes > self.share_bytes {
            return Err(NoRoom {
                charge_bytes,
                share_bytes: self.share_bytes,
            });
        }
        let mut victims = Vec::new();
        while self.used_bytes[..positions]
            .iter()
            .any(|&u| u + charge_bytes > self.share_bytes)
        {
            let Some((filed, hash)) = self.lru.pop_first() else {
                // Only reserved bytes of writes in flight remain: no room now.
                return Err(NoRoom {
                    charge_bytes,
                    share_bytes: self.share_bytes,
                });
            };
            let mut found = self
                .entries
                .find_entry(hash, |(_, e)| e.lru_filed == filed)
                .expect("lru and entries agree");
            let used = found.get().1.lru_tick;
            if used > filed {
                // Used since it was filed: filed again under its last use.
                found.get_mut().1.lru_filed = used;
                self.lru.insert(used, hash);
                continue;
            }
            let ((key, e), _) = found.remove();
            let key = key.bytes().to_vec();
            self.count(key.len(), hash, &e, false);
            for u in &mut self.used_bytes[..e.positions] {
                *u = u.saturating_sub(e.charge_bytes);
            }
            self.evictions += 1;
            victims.push((key, e));
        }
        for u in &mut self.used_bytes[..positions] {
            *u += charge_bytes;
        }
        Ok(victims)
    }

    /// Whether `charge_bytes` fit at positions `0..positions` without evicting anything.
    pub fn fits(&self, positions: usize, charge_bytes: u64) -> bool {
        self.used_bytes[..positions]
            .iter()
            .all(|&u| u + charge_bytes <= self.share_bytes)
    }

    /// Gives back a reservation whose write failed.
    pub fn release(&mut self, positions: usize, charge_bytes: u64) {
        for u in &mut self.used_bytes[..positions] {
            *u = u.saturating_sub(charge_bytes);
        }
    }

    /// Inserts a committed entry whose bytes were reserved; replaces (and releases) an older
    /// entry of the key. Returns the replaced entry.
    pub fn commit(&mut self, key: &[u8], entry: Entry) -> Option<Entry> {
        self.commit_filed(key, entry, None)
    }

    /// [`StripeIndex::commit`] of a rewrite of the value `replaced` (removed from the index
    /// while it was written): the value keeps its place in the LRU order, as a rewrite is no
    /// use of it.
    pub fn commit_rewrite(&mut self, key: &[u8], entry: Entry, replaced: &Entry) {
        self.commit_filed(key, entry, Some((replaced.lru_tick, replaced.lru_filed)));
    }

    fn commit_filed(&mut self, key: &[u8], entry: Entry, lru: Option<(u64, u64)>) -> Option<Entry> {
        let old = self.remove(key);
        // A later version of the key supersedes what its failed writes left at the members.
        if let Some(held) = self.held_open.get_mut(key) {
            held.retain(|&v| {
                let done = v < entry.version;
                if done {
                    self.inflight.remove(&v);
                }
                !done
            });
            if held.is_empty() {
                self.held_open.remove(key);
            }
        }
        self.observe_version(entry.version);
        let mut entry = entry;
        let hash = self.hash(key);
        match lru {
            // Filed again under its old tick, unless another entry was filed there meanwhile.
            Some((tick, filed)) if !self.lru.contains_key(&filed) => {
                entry.lru_tick = tick;
                entry.lru_filed = filed;
            }
            _ => {
                self.tick += 1;
                entry.lru_tick = self.tick;
                entry.lru_filed = self.tick;
            }
        }
        self.lru.insert(entry.lru_filed, hash);
        self.count(key.len(), hash, &entry, true);
        let hasher = &self.hasher;
        self.entries
            .insert_unique(hash, (IndexKey::new(key), entry), |(k, _)| {
                hasher.hash_one(k.bytes())
            });
        old
    }

    /// Inserts an entry found in the members' records (index rebuild), or the entry a failed
    /// write gives back, charging its memory; nothing if the key has an entry of that version
    /// or a later one.
    pub fn adopt(&mut self, key: &[u8], entry: Entry) {
        // Never back: a failed write gives back the entry it replaced, and meanwhile the key
        // may have been written again, or the index rebuilt from newer records (an index
        // dropped and rebuilt while a write was under way is the one it gives the entry back
        // to). Serving the older entry then would read a value a later write replaced.
        if self.get(key).is_some_and(|e| e.version >= entry.version) {
            return;
        }
        for u in &mut self.used_bytes[..entry.positions] {
            *u += entry.charge_bytes;
        }
        self.commit(key, entry);
    }

    /// Marks positions (a bit mask) of the key's `version` as holes; nothing if the key now
    /// has another version. A value stored split has holes among its positions; a whole value
    /// among every position of the stripe (its parity positions' location records).
    pub fn mark_holes(&mut self, key: &[u8], version: u64, mask: u64) {
        self.change_holes(key, version, |holes, reach| {
            holes | (mask & position_mask(reach))
        });
    }

    /// Clears holes (a bit mask) of the key's `version` once filled.
    pub fn clear_holes(&mut self, key: &[u8], version: u64, mask: u64) {
        self.change_holes(key, version, |holes, _| holes & !mask);
    }

    /// Sets the holes of the key's `version` to `f(holes, reach)`, keeping the tallies; its
    /// reach is its positions, or the stripe's for a whole value.
    fn change_holes(&mut self, key: &[u8], version: u64, f: impl FnOnce(u64, usize) -> u64) {
        let n = self.used_bytes.len();
        let Some(e) = self.get_mut(key).filter(|e| e.version == version) else {
            return;
        };
        let reach = if e.kind == Kind::Whole {
            n
        } else {
            e.positions
        };
        let (before, after) = (e.holes, f(e.holes, reach));
        e.holes = after;
        let t = &mut self.tally;
        t.holed = t.holed + usize::from(after != 0) - usize::from(before != 0);
        t.holes = t.holes + u64::from(after.count_ones()) - u64::from(before.count_ones());
    }

    /// Up to `max` entries with holes at positions `wanted` admits: (key, version, holes).
    pub fn holes(&self, wanted: u64, max: usize) -> Vec<(Vec<u8>, u64, u64)> {
        if self.tally.holed == 0 {
            return Vec::new();
        }
        self.walked();
        self.entries
            .iter()
            .filter(|(_, e)| e.holes & wanted != 0)
            .take(max)
            .map(|(k, e)| (k.bytes().to_vec(), e.version, e.holes & wanted))
            .collect()
    }

    /// The values stored split (coded or replicated) that the layout wants whole
    /// ([`WholeRule`]): how many there are, and the key and version of up to `max` of them
    /// (the entries are walked only for those, and only while there are any).
    pub fn split_values(&self, max: usize) -> (usize, Vec<(Vec<u8>, u64)>) {
        let count = self.tally.split_wanted_whole;
        if count == 0 || max == 0 {
            return (count, Vec::new());
        }
        self.walked();
        let rule = self.whole_rule;
        let some = self
            .entries
            .iter()
            .filter(|(k, e)| e.kind != Kind::Whole && rule.wants(k.bytes().len(), e.value_bytes))
            .take(max.min(count))
            .map(|(k, e)| (k.bytes().to_vec(), e.version))
            .collect();
        (count, some)
    }

    /// Holes of every entry, counted per position.
    pub fn hole_count(&self) -> u64 {
        self.tally.holes
    }

    /// Changes the exptime of a live entry.
    pub fn set_exptime(&mut self, key: &[u8], exptime: i64) {
        let hash = self.hash(key);
        let Some(e) = self.get_mut(key) else {
            return;
        };
        let before = e.clone();
        e.exptime = exptime;
        let after = e.clone();
        self.count(key.len(), hash, &before, false);
        self.count(key.len(), hash, &after, true);
    }

    /// Removes and returns every expired or flushed entry (the periodic sweep). The expired
    /// ones are found in the expiry order, without a walk over the entries; the entries are
    /// walked once per flush (`oldest_live_us`), after it has come.
    pub fn sweep(
        &mut self,
        now_secs: i64,
        now_us: u64,
        oldest_live_us: u64,
    ) -> Vec<(Vec<u8>, Entry)> {
        let mut dead: Vec<Vec<u8>> = Vec::new();
        let due: Vec<(i64, u64)> = self
            .expiring
            .range(..(now_secs + 1, 0))
            .map(|(&at, _)| at)
            .filter(|&(exptime, _)| crate::time::is_expired(exptime, now_secs))
            .collect();
        for (exptime, hash) in due {
            dead.extend(
                self.entries
                    .iter_hash(hash)
                    .filter(|(k, e)| e.exptime == exptime && self.hash(k.bytes()) == hash)
                    .map(|(k, _)| k.bytes().to_vec()),
            );
        }
        let flush_due =
            oldest_live_us != 0 && oldest_live_us <= now_us && oldest_live_us > self.flush_swept;
        if flush_due {
            self.walked();
            dead.extend(
                self.entries
                    .iter()
                    .filter(|(_, e)| {
                        e.stored_at_us <= oldest_live_us
                            && !crate::time::is_expired(e.exptime, now_secs)
                    })
                    .map(|(k, _)| k.bytes().to_vec()),
            );
            self.flush_swept = oldest_live_us;
        }
        dead.into_iter()
            .filter_map(|k| {
                let e = self.remove(&k)?;
                Some((k, e))
            })
            .collect()
    }

    /// Keys and entries (for recovery listings), in no particular order.
    pub fn entries(&self) -> impl Iterator<Item = (&[u8], &Entry)> {
        self.entries.iter().map(|(k, e)| (k.bytes(), e))
    }

    /// Bytes of value held (coded, replicated), bytes of records stored for them over all
    /// positions (coded, replicated), bytes of whole values and of their records at their
    /// home (the parity pages covering them are counted by the members that keep them).
    pub fn footprint(&self) -> [u64; 6] {
        self.tally.footprint
    }
}

/// [`StripeIndex::footprint`]'s share of one entry under a key of `key_bytes`.
fn footprint_of(key_bytes: usize, e: &Entry) -> [u64; 6] {
    let mut f = [0u64; 6];
    match e.kind {
        Kind::Coded | Kind::Replica => {
            let i = usize::from(e.kind == Kind::Replica);
            f[i] = e.value_bytes;
            f[2 + i] = e.charge_bytes * e.positions as u64;
        }
        Kind::Whole => {
            f[4] = e.value_bytes;
            f[5] = (record::OVERHEAD_BYTES + key_bytes) as u64 + e.value_bytes;
        }
    }
    f
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(version: u64, positions: usize, charge: u64) -> Entry {
        Entry::new(version, 10, 0, 0, Kind::Coded, version, positions, charge)
    }

    #[test]
    fn versions_increase_and_watermark_follows_inflight() {
        let mut ix = StripeIndex::new(3, 1000);
        // Versions are the clock in µs times 256 at least, their 8 rewrite bits 0.
        let a = ix.next_version(5);
        let b = ix.next_version(5);
        let c = ix.next_version(100);
        assert_eq!((a, b, c), (5 * 256, 6 * 256, 100 * 256));
        assert_eq!(ix.watermark(), 5 * 256);
        ix.finish(a);
        assert_eq!(ix.watermark(), 6 * 256);
        ix.finish(c);
        ix.finish(b);
        assert_eq!(ix.watermark(), 100 * 256 + 1);
        // A version seen in a record (a rewrite's among them) is passed by the next one.
        ix.observe_version(500 * 256 + 3);
        assert_eq!(ix.next_version(0), 501 * 256);
    }

    #[test]
    fn a_rewrite_keeps_the_cas_value_and_orders_after_the_version_it_replaces() {
        let mut ix = StripeIndex::new(3, 1 << 20);
        let v = ix.next_version(10);
        ix.adopt(b"k", entry(v, 1, 10));
        ix.finish(v);
        // Only the key's present version may be rewritten.
        assert_eq!(ix.rewrite_version(b"k", v + 256), None);
        assert_eq!(ix.rewrite_version(b"other", v), None);
        let r = ix.rewrite_version(b"k", v).expect("rewritable");
        assert_eq!((r, record::cas_of(r)), (v + 1, v));
        // In flight until finished, as a write's version.
        assert_eq!(ix.watermark(), v + 1);
        ix.finish(r);
        ix.adopt(b"k", entry(r, 1, 10));
        assert_eq!(ix.get(b"k").unwrap().cas(), v);
        // The next write's version is a new CAS value past the rewrite.
        assert_eq!(ix.next_version(0), v + 256);
        // Once the rewrite bits are spent, the value is not rewritten again.
        ix.adopt(b"k", entry(v + 255, 1, 10));
        assert_eq!(ix.rewrite_version(b"k", v + 255), None);
    }

    #[test]
    fn holes_are_kept_per_version() {
        let mut ix = StripeIndex::new(9, 1 << 20);
        let e = Entry::new(7, 100, 0, 0, Kind::Coded, 0, 9, 50);
        ix.adopt(b"a", e);
        ix.mark_holes(b"a", 7, 0b1_0000_0101 | (1 << 20));
        assert_eq!(
            ix.hole_count(),
            3,
            "bits past the value's positions are ignored"
        );
        ix.mark_holes(b"a", 6, 0b10);
        assert_eq!(ix.hole_count(), 3, "another version: ignored");
        assert_eq!(ix.holes(0b100, 10), vec![(b"a".to_vec(), 7, 0b100)]);
        assert!(ix.holes(0b10, 10).is_empty());
        ix.clear_holes(b"a", 7, 0b101);
        assert_eq!(ix.holes(u64::MAX, 10), vec![(b"a".to_vec(), 7, 1 << 8)]);
        assert_eq!(position_mask(3), 0b111);
        assert_eq!((bit(2), bit(63), bit(64), bit(200)), (4, 1 << 63, 0, 0));
        assert_eq!(position_mask(64), u64::MAX);
    }

    #[test]
    fn eviction_is_lru_of_whole_values() {
        let mut ix = StripeIndex::new(3, 100);
        for (i, key) in [b"a", b"b", b"c"].iter().enumerate() {
            assert!(ix.reserve(3, 30).unwrap().is_empty());
            ix.commit(*key, entry(i as u64 + 1, 3, 30));
        }
        // Touch "a": "b" is now the least recently used.
        assert!(ix.lookup(b"a", 0, 0, 0).unwrap().is_some());
        let victims = ix.reserve(3, 30).unwrap();
        assert_eq!(victims.len(), 1);
        assert_eq!(victims[0].0, b"b");
        ix.commit(b"d", entry(9, 3, 30));
        assert_eq!(ix.used_bytes(), &[90, 90, 90]);
        assert_eq!(ix.evictions, 1);
        // A replicated value using positions 0..2 only.
        let victims = ix.reserve(2, 50).unwrap();
        assert_eq!(victims.len(), 2, "c then a");
        assert_eq!(ix.used_bytes(), &[80, 80, 30]);
        assert!(ix.reserve(1, 101).is_err());
    }

    /// A read of an entry among the most recently used eighth leaves the LRU order alone;
    /// a read of an older one makes it the most recently used.
    #[test]
    fn reads_of_recent_entries_leave_the_lru_order_alone() {
        let mut ix = StripeIndex::new(1, 1000);
        let keys: Vec<Vec<u8>> = (0..16).map(|i| format!("k{i:02}").into_bytes()).collect();
        for (i, key) in keys.iter().enumerate() {
            assert!(ix.reserve(1, 10).unwrap().is_empty());
            ix.commit(key, entry(i as u64 + 1, 1, 10));
        }
        let order = |ix: &StripeIndex| -> Vec<Vec<u8>> {
            let mut by_use: Vec<(u64, Vec<u8>)> = ix
                .entries()
                .map(|(k, e)| (e.lru_tick, k.to_vec()))
                .collect();
            by_use.sort();
            by_use.into_iter().map(|(_, k)| k).collect()
        };
        let before = order(&ix);
        // k15 and k14 are the two most recent (16 / 8 = 2 ticks): reads move nothing.
        for key in [&keys[15], &keys[14], &keys[15]] {
            assert!(ix.lookup_live(key, 0, 0, 0).unwrap().is_some());
        }
        assert_eq!(order(&ix), before);
        // k00, the least recently used, read: it moves to the end, k01 is evicted first.
        assert!(ix.lookup_live(&keys[0], 0, 0, 0).unwrap().is_some());
        assert_eq!(order(&ix).last(), Some(&keys[0]));
        assert_eq!(order(&ix).len(), 16);
        let victims = ix.reserve(1, 850).unwrap();
        assert_eq!(victims[0].0, keys[1]);
    }

    /// Evictions follow the exact order of last use, whatever mix of writes and reads came
    /// before (the LRU map changes only when an entry is filed again at eviction): checked
    /// against a list kept in order of use.
    #[test]
    fn evictions_follow_the_order_of_last_use() {
        use rand::{Rng, SeedableRng};
        let mut rng = rand::rngs::SmallRng::seed_from_u64(7);
        // Room for 40 values of 10 bytes; 60 keys, so writes keep evicting.
        let mut ix = StripeIndex::new(1, 400);
        let mut model: Vec<Vec<u8>> = Vec::new();
        let mut version = 0;
        for _ in 0..5_000 {
            let key = format!("k{}", rng.gen_range(0..60)).into_bytes();
            if rng.gen_bool(0.3) {
                version += 1;
                let victims = ix.reserve(1, 10).unwrap();
                for (victim, _) in &victims {
                    let oldest = model.remove(0);
                    assert_eq!(*victim, oldest, "evicted out of order");
                }
                ix.commit(&key, entry(version, 1, 10));
                model.retain(|k| *k != key);
                model.push(key);
            } else {
                // `lookup` moves every entry it finds (`lookup_live` skips the most recent
                // eighth, which the model would have to mirror).
                let found = ix.lookup(&key, 0, 0, 0).unwrap().is_some();
                assert_eq!(found, model.contains(&key));
                if found {
                    model.retain(|k| *k != key);
                    model.push(key);
                }
            }
            assert_eq!(ix.len(), model.len());
        }
        assert!(ix.evictions > 100, "{} evictions", ix.evictions);
    }

    #[test]
    fn keys_up_to_thirty_bytes_are_kept_inline_and_all_read_back() {
        assert_eq!(std::mem::size_of::<IndexKey>(), 32);
        for len in [1, 23, INLINE_KEY_BYTES, INLINE_KEY_BYTES + 1, 250] {
            let key: Vec<u8> = (0..len).map(|i| b'a' + (i % 26) as u8).collect();
            let k = IndexKey::new(&key);
            assert_eq!(k.bytes(), &key[..]);
            assert_eq!(matches!(k, IndexKey::Inline(..)), len <= INLINE_KEY_BYTES);
        }
        let mut ix = StripeIndex::new(1, 1 << 20);
        let long = vec![b'x'; 200];
        ix.commit(b"short", entry(1, 1, 10));
        ix.commit(&long, entry(2, 1, 10));
        assert_eq!(ix.get(b"short").map(|e| e.version), Some(1));
        assert_eq!(ix.get(&long).map(|e| e.version), Some(2));
        assert!(ix.get(b"shor").is_none());
        let mut keys: Vec<Vec<u8>> = ix.entries().map(|(k, _)| k.to_vec()).collect();
        keys.sort();
        assert_eq!(keys, vec![b"short".to_vec(), long]);
    }

    #[test]
    fn replacing_releases_old_charge() {
        let mut ix = StripeIndex::new(2, 100);
        ix.reserve(2, 40).unwrap();
        ix.commit(b"k", entry(1, 2, 40));
        ix.reserve(1, 60).unwrap();
        let old = ix.commit(b"k", entry(2, 1, 60)).unwrap();
        assert_eq!(old.version, 1);
        assert_eq!(ix.used_bytes(), &[60, 0]);
        ix.release(1, 0);
        ix.remove(b"k");
        assert_eq!(ix.used_bytes(), &[0, 0]);
    }

    #[test]
    fn expiry_and_flush() {
        let mut ix = StripeIndex::new(1, 1000);
        let mut e = entry(1, 1, 10);
        e.exptime = 50;
        ix.reserve(1, 10).unwrap();
        ix.commit(b"x", e);
        assert!(ix.lookup(b"x", 49, 0, 0).unwrap().is_some());
        let (gone, _) = ix.lookup(b"x", 50, 0, 0).unwrap_err();
        assert_eq!(gone, Gone::Expired);
        assert_eq!(ix.used_bytes(), &[0]);
        ix.reserve(1, 10).unwrap();
        ix.commit(b"y", entry(100, 1, 10));
        // A flush scheduled for t=200 µs: nothing happens before.
        assert!(ix.lookup(b"y", 0, 150, 200).unwrap().is_some());
        assert_eq!(ix.lookup(b"y", 0, 200, 200).unwrap_err().0, Gone::Flushed);
        ix.reserve(1, 10).unwrap();
        ix.commit(b"z", entry(300, 1, 10));
        assert!(ix.lookup(b"z", 0, 400, 200).unwrap().is_some());
        let mut e = entry(301, 1, 10);
        e.exptime = 10;
        ix.reserve(1, 10).unwrap();
        ix.commit(b"w", e);
        let swept = ix.sweep(20, 400, 200);
        assert_eq!(swept.len(), 1);
        assert_eq!(swept[0].0, b"w");
    }

    /// A write fails and gives back the entry it replaced after the key was written again (or
    /// the index rebuilt from newer records): the newer entry stays, with its charge, and the
    /// older one comes back only where the key has none or an older one.
    #[test]
    fn an_entry_given_back_never_replaces_a_newer_one() {
        let mut ix = StripeIndex::new(9, 1 << 20);
        let e = |v| Entry::new(v, 1, 0, 0, Kind::Replica, v, 4, 10);
        ix.adopt(b"k", e(70));
        ix.adopt(b"k", e(50));
        assert_eq!(ix.get(b"k").map(|e| e.version), Some(70));
        assert_eq!(ix.used_bytes[..4], [10; 4], "charged once");
        ix.adopt(b"k", e(70));
        assert_eq!(
            ix.used_bytes[..4],
            [10; 4],
            "the same version is not charged again"
        );
        ix.adopt(b"k", e(90));
        assert_eq!(ix.get(b"k").map(|e| e.version), Some(90));
        assert_eq!(ix.used_bytes[..4], [10; 4]);
        ix.adopt(b"j", e(40));
        assert_eq!(ix.get(b"j").map(|e| e.version), Some(40));
    }

    #[test]
    fn a_failed_write_held_open_bounds_the_watermark_until_its_key_is_written_again() {
        let mut ix = StripeIndex::new(9, 1 << 20);
        let failed = ix.next_version(100);
        ix.hold_open(b"k", failed);
        let other = ix.next_version(200);
        ix.finish(other);
        assert_eq!(ix.watermark(), failed);
        // Re-adopting the previous entry (older) does not release it.
        ix.adopt(b"k", Entry::new(50, 1, 0, 0, Kind::Replica, 50, 4, 10));
        assert_eq!(ix.watermark(), failed);
        let again = ix.next_version(300);
        ix.commit(
            b"k",
            Entry::new(again, 1, 0, 0, Kind::Replica, again, 4, 10),
        );
        ix.finish(again);
        assert_eq!(ix.watermark(), again + 1);
        // A delete releases what is held too.
        let v = ix.next_version(400);
        ix.hold_open(b"j", v);
        ix.release_held(b"j");
        assert_eq!(ix.watermark(), v + 1);
    }

    /// The tallies, recounted by walking every entry (what the periodic work did before it
    /// kept them), and the expiry order rebuilt from the entries.
    fn recount(ix: &StripeIndex) -> (Tally, BTreeMap<(i64, u64), u32>) {
        let mut t = Tally::default();
        let mut expiring = BTreeMap::new();
        for (k, e) in ix.entries() {
            t.holed += usize::from(e.holes != 0);
            t.holes += u64::from(e.holes.count_ones());
            t.split_wanted_whole +=
                usize::from(e.kind != Kind::Whole && ix.whole_rule.wants(k.len(), e.value_bytes));
            for (sum, by) in t.footprint.iter_mut().zip(footprint_of(k.len(), e)) {
                *sum += by;
            }
            if e.exptime != 0 {
                *expiring.entry((e.exptime, ix.hash(k))).or_insert(0) += 1;
            }
        }
        (t, expiring)
    }

    /// Random commits (new keys and replacements, of every kind and size, some with an
    /// exptime, some with holes), evictions, removals, touches, hole marks and fills, and
    /// sweeps: after each step the kept tallies and expiry order equal a recount, and every
    /// sweep takes out exactly the entries a walk finds expired or flushed.
    #[test]
    fn tallies_and_the_expiry_order_follow_every_change() {
        use rand::{rngs::SmallRng, Rng, SeedableRng};
        let rule = WholeRule {
            below_bytes: 4096,
            record_max_bytes: 3000,
        };
        let mut ix = StripeIndex::new(9, 200_000).with_whole_rule(rule);
        let mut rng = SmallRng::seed_from_u64(5);
        let kinds = [Kind::Coded, Kind::Replica, Kind::Whole];
        let mut now_us = 1_000_000_000u64;
        let mut oldest = 0u64;
        for step in 0..20_000 {
            now_us += rng.gen_range(0..20_000);
            let now_secs = crate::time::secs_of(now_us);
            let key = format!("key-{}", rng.gen_range(0..400)).into_bytes();
            // Keys past 30 bytes are boxed, not inline.
            let key = if rng.gen_bool(0.1) {
                [key, vec![b'x'; 40]].concat()
            } else {
                key
            };
            match rng.gen_range(0..10) {
                0..=3 => {
                    let kind = kinds[rng.gen_range(0..3)];
                    let bytes = rng.gen_range(0..6000u64);
                    let (positions, charge) = charge(kind, key.len(), bytes, 6, 9, 3);
                    let Ok(_victims) = ix.reserve(positions, charge) else {
                        continue;
                    };
                    let v = ix.next_version(now_us);
                    let mut e = Entry::new(v, bytes, 0, 0, kind, now_us, positions, charge);
                    if rng.gen_bool(0.3) {
                        e.exptime = now_secs + rng.gen_range(-1..4);
                    }
                    if rng.gen_bool(0.2) {
                        e.holes = rng.gen::<u64>() & position_mask(positions);
                    }
                    ix.commit(&key, e);
                    ix.finish(v);
                }
                4 => {
                    ix.remove(&key);
                }
                5 => {
                    let exptime = [0, now_secs + rng.gen_range(0..4)][rng.gen_range(0..2)];
                    ix.set_exptime(&key, exptime);
                }
                6 => {
                    if let Some(v) = ix.get(&key).map(|e| e.version) {
                        ix.mark_holes(&key, v, rng.gen());
                    }
                }
                7 => {
                    if let Some(v) = ix.get(&key).map(|e| e.version) {
                        ix.clear_holes(&key, v, rng.gen());
                    }
                }
                8 => {
                    if rng.gen_bool(0.02) {
                        oldest = now_us + rng.gen_range(0..50_000);
                    }
                    let mut want: Vec<Vec<u8>> = ix
                        .entries()
                        .filter(|(_, e)| {
                            crate::time::is_expired(e.exptime, now_secs)
                                || (oldest != 0 && oldest <= now_us && e.stored_at_us <= oldest)
                        })
                        .map(|(k, _)| k.to_vec())
                        .collect();
                    let mut got: Vec<Vec<u8>> = ix
                        .sweep(now_secs, now_us, oldest)
                        .into_iter()
                        .map(|(k, _)| k)
                        .collect();
                    want.sort();
                    got.sort();
                    assert_eq!(got, want, "step {step}: swept");
                }
                _ => {
                    let _ = ix.lookup(&key, now_secs, now_us, oldest);
                }
            }
            let (tally, expiring) = recount(&ix);
            assert_eq!(ix.tally, tally, "step {step}");
            assert_eq!(ix.expiring, expiring, "step {step}");
            assert_eq!(ix.hole_count(), tally.holes);
            let (count, some) = ix.split_values(5);
            assert_eq!(count, tally.split_wanted_whole);
            assert_eq!(some.len(), count.min(5));
        }
        assert!(ix.evictions > 0, "the share was small enough to evict");
        assert!(ix.tally.split_wanted_whole > 0 && ix.tally.holed > 0);
    }

    /// In a stripe with no hole, no split value the layout wants whole and no flush to apply,
    /// the periodic work walks no entry, however many there are and however many expire.
    #[test]
    fn the_periodic_work_walks_no_entry_while_there_is_nothing_to_find() {
        let rule = WholeRule {
            below_bytes: u64::MAX,
            record_max_bytes: 1 << 20,
        };
        let mut ix = StripeIndex::new(9, 1 << 40).with_whole_rule(rule);
        let now_secs = 1_000_000;
        let now_us = now_secs as u64 * 1_000_000;
        for i in 0..10_000u64 {
            let key = format!("k{i}").into_bytes();
            let (positions, charge) = charge(Kind::Whole, key.len(), 100, 6, 9, 3);
            ix.reserve(positions, charge).unwrap();
            let mut e = Entry::new(i + 1, 100, 0, 0, Kind::Whole, now_us, positions, charge);
            // One in ten expires, a tenth of them by now.
            if i % 10 == 0 {
                e.exptime = now_secs + (i as i64 / 10) % 10;
            }
            ix.commit(&key, e);
        }
        let swept = ix.sweep(now_secs, now_us, 0);
        assert_eq!(swept.len(), 100);
        assert!(ix.holes(u64::MAX, 256).is_empty());
        assert_eq!(ix.split_values(1024), (0, Vec::new()));
        assert_eq!(ix.walks(), 0);
        // A flush that has come is applied by one walk, and not walked for again.
        let flushed = ix.sweep(now_secs, now_us + 10, now_us + 5);
        assert_eq!(flushed.len(), 9_900);
        assert_eq!(ix.walks(), 1);
        assert!(ix.sweep(now_secs, now_us + 20, now_us + 5).is_empty());
        assert_eq!(ix.walks(), 1);
        // A hole, or a value stored split that the layout wants whole, is walked for.
        let (positions, charge) = charge(Kind::Coded, 1, 100, 6, 9, 3);
        ix.reserve(positions, charge).unwrap();
        ix.commit(
            b"s",
            Entry::new(
                20_000,
                100,
                0,
                0,
                Kind::Coded,
                now_us + 30,
                positions,
                charge,
            ),
        );
        ix.mark_holes(b"s", 20_000, 0b10);
        assert_eq!(ix.holes(u64::MAX, 256), vec![(b"s".to_vec(), 20_000, 0b10)]);
        assert_eq!(ix.split_values(1024), (1, vec![(b"s".to_vec(), 20_000)]));
        assert_eq!(ix.walks(), 3);
    }

    #[test]
    fn charge_of_coded_and_replicated() {
        let (p, c) = charge(Kind::Coded, 5, 1000, 6, 9, 4);
        assert_eq!((p, c), (9, (record::OVERHEAD_BYTES + 5 + 167) as u64));
        let (p, c) = charge(Kind::Replica, 5, 100, 6, 9, 4);
        assert_eq!((p, c), (4, (record::OVERHEAD_BYTES + 5 + 100) as u64));
    }
}
