//! What a member holds: chunk records by (stripe, position), then key.
//!
//! A member keeps, besides the current record of a key, the records it replaced until the
//! agent's watermark says the newer writes finished: if the agent dies half-way through a write,
//! the previous version is still whole on every member and the next agent can serve it. A write
//! that failed keeps the watermark below it until its key is written again, so the record it
//! replaced stays too: a second failed write of the key does not take the version the agent
//! serves again (at most [`PREVIOUS_MAX`] are kept per key and position).
//! Records of a lower version never replace a higher one, so writes, write-backs of repaired
//! chunks and recovery can arrive in any order.

use std::collections::VecDeque;
use std::hash::BuildHasher;
use std::time::Instant;

use hashbrown::{DefaultHashBuilder, HashMap, HashTable};

use crate::member::whole::{ParityPages, Slab, SlotWrite, PAGE_BYTES};
use crate::record::{self, Header, RecordError, WholeAt};

/// A delta kept while rebuilding: (data position, seq, offset, bytes).
type HeldDelta = (usize, u64, u32, Vec<u8>);

use crate::carrier::peer::KeptDelta;

/// Kept deltas, by (page stripe, parity position, page, data position), then seq: each with
/// when it arrived.
type Kept = HashMap<(u32, u8, u32, u8), KeptSeqs>;

/// The deltas kept for one data position of one parity page, in order of seq. Deltas come in
/// order and go from the front (a commit), a few at a time, so a sorted queue serves them: a
/// small allocation, where a B-tree made and freed a node of a kilobyte per delta.
#[derive(Debug, Default)]
struct KeptSeqs(std::collections::VecDeque<(u64, KeptDelta, Instant)>);

impl KeptSeqs {
    /// Adds the delta of `seq` unless one of that seq is kept: whether it was added.
    fn insert(&mut self, seq: u64, delta: KeptDelta, at: Instant) -> bool {
        match self.0.binary_search_by_key(&seq, |(s, _, _)| *s) {
            Ok(_) => false,
            Err(i) => {
                self.0.insert(i, (seq, delta, at));
                true
            }
        }
    }

    /// Drops those of seq up to `committed`: their bytes.
    fn commit(&mut self, committed: u64) -> u64 {
        let mut freed = 0;
        while self.0.front().is_some_and(|(s, _, _)| *s <= committed) {
            let (_, d, _) = self.0.pop_front().expect("front");
            freed += d.bytes();
        }
        freed
    }

    /// Those of seq above `above`, in order.
    fn above(&self, above: u64) -> impl Iterator<Item = &KeptDelta> {
        self.0
            .iter()
            .filter(move |(s, _, _)| *s > above)
            .map(|(_, d, _)| d)
    }

    fn len(&self) -> usize {
        self.0.len()
    }

    fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    fn bytes(&self) -> u64 {
        self.0.iter().map(|(_, d, _)| d.bytes()).sum()
    }
}

/// The key of this node's slab page `j` in `ChunkStore::rebuilt`.
fn slab_key(j: u32) -> (u32, u8, u32) {
    (u32::MAX, u8::MAX, j)
}

/// Where a record's bytes are: its own allocation, or a slot of the whole layout's slab.
#[derive(Debug)]
enum Held {
    Heap(Box<[u8]>),
    Slab(WholeAt),
}

impl Held {
    fn len(&self) -> usize {
        match self {
            Held::Heap(b) => b.len(),
            Held::Slab(at) => at.len as usize,
        }
    }
}

fn bytes_of<'a>(slab: &'a Slab, h: &'a Held) -> &'a [u8] {
    match h {
        Held::Heap(b) => b,
        Held::Slab(at) => slab.bytes(*at),
    }
}

/// A stripe's deleted keys, each with its delete's version.
pub type Tombstones = Vec<(Vec<u8>, u64)>;

/// A stripe's listing copied from the store ([`ChunkStore::listing`]).
#[derive(Debug, Default)]
pub struct Listing {
    arena: Vec<u8>,
    /// Heads and keys of records, in `arena`.
    heads: Vec<std::ops::Range<usize>>,
    /// Whole location records, in `arena`.
    whole: Vec<std::ops::Range<usize>>,
    tombstones: Tombstones,
}

impl Listing {
    fn push_head(&mut self, bytes: &[u8]) {
        if let Some((_, end)) = record::head_end(bytes) {
            let at = self.arena.len();
            self.arena.extend_from_slice(&bytes[..end]);
            self.heads.push(at..self.arena.len());
        }
    }

    /// The records of a `List` answer (header-only records, then the location records) and
    /// the tombstones.
    pub fn into_parts(self) -> (Vec<Vec<u8>>, Tombstones) {
        let mut records: Vec<Vec<u8>> = self
            .heads
            .iter()
            .map(|r| record::listed(&self.arena[r.clone()]))
            .collect();
        records.extend(self.whole.iter().map(|r| self.arena[r.clone()].to_vec()));
        (records, self.tombstones)
    }
}

/// Drops a record: a slab slot goes back to the slab (its bytes stay, parity covers them).
fn release(slab: &mut Slab, h: Held) {
    if let Held::Slab(at) = h {
        slab.free(at);
    }
}

/// Records kept per key and position besides the current one, at most: past them the oldest
/// goes even if the watermark has not passed the write that replaced it (only a run of failed
/// writes of one key, each stored here, makes more).
pub const PREVIOUS_MAX: usize = 4;

#[derive(Debug)]
struct Slot {
    cur_version: u64,
    cur: Held,
}

/// A record replaced by a newer version of its key, kept until that write is below the
/// watermark.
#[derive(Debug)]
struct Prev {
    version: u64,
    replaced_by: u64,
    held: Held,
}

/// The records replaced by newer versions of their keys, by (stripe, position, key), oldest
/// first, each kept until the watermark passes the write that replaced it.
///
/// They are kept apart from the slot tables: there are few at a time (about as many as the
/// writes in flight), so this table stays in the CPU's cache, where a slot table and its
/// records are as large as the keys held. A put that replaces a record and the trim that later
/// drops it then make one lookup in a slot table between them, not two.
#[derive(Debug, Default)]
struct Previous {
    table: HashTable<(SlotKey, Vec<Prev>)>,
    hasher: DefaultHashBuilder,
    /// Keys and lists let go (an entry removed, a put's key not kept, a key of
    /// `ChunkStore::pending_prev` done with), for new entries to reuse: a replacing write adds
    /// an entry that a later trim removes, and made and freed its key and list each time.
    spare_keys: Vec<Vec<u8>>,
    spare_lists: Vec<Vec<Prev>>,
}

/// At most this many spare keys and lists are kept (about the writes in flight at a member).
const SPARES_MAX: usize = 256;

impl Previous {
    fn hash(&self, stripe: u32, position: u8, key: &[u8]) -> u64 {
        self.hasher.hash_one((stripe, position, key))
    }

    /// The previous records of a key at a position, oldest first.
    fn of(&self, stripe: u32, position: u8, key: &[u8]) -> &[Prev] {
        let hash = self.hash(stripe, position, key);
        self.table
            .find(hash, |((s, p, k), _)| {
                (*s, *p, k.as_slice()) == (stripe, position, key)
            })
            .map_or(&[], |(_, v)| v)
    }

    fn push(&mut self, stripe: u32, position: u8, key: &[u8], prev: Prev) {
        let hash = self.hash(stripe, position, key);
        let Previous {
            table,
            hasher,
            spare_keys,
            spare_lists,
        } = self;
        let entry = table.entry(
            hash,
            |((s, p, k), _)| (*s, *p, k.as_slice()) == (stripe, position, key),
            |((s, p, k), _)| hasher.hash_one((*s, *p, k.as_slice())),
        );
        entry
            .or_insert_with(|| {
                let list = spare_lists.pop().unwrap_or_default();
                ((stripe, position, copy_key(spare_keys, key)), list)
            })
            .into_mut()
            .1
            .push(prev);
    }

    /// A key done with, kept for reuse.
    fn give_key(&mut self, key: Vec<u8>) {
        if self.spare_keys.len() < SPARES_MAX {
            self.spare_keys.push(key);
        }
    }

    /// Removes the previous records of a key at a position for which `go` (given its index
    /// among them, oldest first, and their count) says so, keeping the others' order, and
    /// hands each to `gone`.
    fn remove_where(
        &mut self,
        stripe: u32,
        position: u8,
        key: &[u8],
        mut go: impl FnMut(usize, usize, &Prev) -> bool,
        mut gone: impl FnMut(Prev),
    ) {
        let hash = self.hash(stripe, position, key);
        let Ok(mut entry) = self.table.find_entry(hash, |((s, p, k), _)| {
            (*s, *p, k.as_slice()) == (stripe, position, key)
        }) else {
            return;
        };
        let prevs = &mut entry.get_mut().1;
        let count = prevs.len();
        let mut kept = 0;
        for i in 0..count {
            if !go(i, count, &prevs[i]) {
                prevs.swap(kept, i);
                kept += 1;
            }
        }
        prevs.drain(kept..).for_each(&mut gone);
        if prevs.is_empty() {
            let (((_, _, k), list), _) = entry.remove();
            self.give_key(k);
            if self.spare_lists.len() < SPARES_MAX {
                self.spare_lists.push(list);
            }
        }
    }

    /// The newest previous record of a key at a position, taken out.
    fn pop(&mut self, stripe: u32, position: u8, key: &[u8]) -> Option<Prev> {
        let mut out = None;
        self.remove_where(
            stripe,
            position,
            key,
            |i, count, _| i + 1 == count,
            |p| out = Some(p),
        );
        out
    }

    /// Every previous record of a key at a position, taken out.
    fn take(&mut self, stripe: u32, position: u8, key: &[u8]) -> Vec<Prev> {
        let mut out = Vec::new();
        self.remove_where(stripe, position, key, |_, _, _| true, |p| out.push(p));
        out
    }

    /// Drops the previous records of a key at a position whose replacing write is below
    /// `watermark`, and the oldest past [`PREVIOUS_MAX`]: the bytes freed.
    fn trim(&mut self, slab: &mut Slab, slot: (u32, u8, &[u8]), watermark: u64) -> u64 {
        let mut freed = 0;
        self.remove_where(
            slot.0,
            slot.1,
            slot.2,
            |i, count, p| i < count.saturating_sub(PREVIOUS_MAX) || p.replaced_by < watermark,
            |p| {
                freed += p.held.len() as u64;
                release(slab, p.held);
            },
        );
        freed
    }
}

/// A copy of `key` in one of `spare`'s keys when there is one.
fn copy_key(spare: &mut Vec<Vec<u8>>, key: &[u8]) -> Vec<u8> {
    let mut k = spare.pop().unwrap_or_default();
    k.clear();
    k.extend_from_slice(key);
    k
}

type SlotKey = (u32, u8, Vec<u8>);

/// The records held at one (stripe, position), by key. A member holds few (stripe, position)
/// pairs (one per stripe it is a member of, in the usual placement), so a key's slots across
/// positions are found by visiting them.
///
/// The key is not kept apart: a slot's key is read from its current record's bytes (on the
/// heap or in the slab; every record is checked before it is held, and a slot's records all
/// carry its key), so an entry is the slot alone and a lookup's key compare reads the record's
/// first cache line, which the read that follows needs anyway. A bit flipped in a slab record's
/// key makes its slot unreachable (a read finds no record and rebuilds it from its page's
/// stripe), as a bit flipped in a key kept apart would.
#[derive(Debug, Default)]
struct Slots {
    table: HashTable<Slot>,
    hasher: DefaultHashBuilder,
}

/// The key of a held slot.
fn slot_key<'a>(slab: &'a Slab, slot: &'a Slot) -> &'a [u8] {
    record::key_of(bytes_of(slab, &slot.cur))
}

impl Slots {
    fn hash(&self, key: &[u8]) -> u64 {
        self.hasher.hash_one(key)
    }

    fn get(&self, slab: &Slab, key: &[u8]) -> Option<&Slot> {
        self.table
            .find(self.hash(key), |s| slot_key(slab, s) == key)
    }

    fn get_mut(&mut self, slab: &Slab, key: &[u8]) -> Option<&mut Slot> {
        let hash = self.hash(key);
        self.table.find_mut(hash, |s| slot_key(slab, s) == key)
    }

    /// Adds the slot of a key not held (its record carries `key`).
    fn insert(&mut self, slab: &Slab, key: &[u8], slot: Slot) {
        debug_assert_eq!(slot_key(slab, &slot), key);
        let hasher = &self.hasher;
        self.table.insert_unique(hasher.hash_one(key), slot, |s| {
            hasher.hash_one(slot_key(slab, s))
        });
    }

    fn remove(&mut self, slab: &Slab, key: &[u8]) -> Option<Slot> {
        let hash = self.hash(key);
        match self.table.find_entry(hash, |s| slot_key(slab, s) == key) {
            Ok(e) => Some(e.remove().0),
            Err(_) => None,
        }
    }

    fn values(&self) -> impl Iterator<Item = &Slot> {
        self.table.iter()
    }
}

/// The outcome of a put.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PutOutcome {
    Stored,
    /// A record of a higher version is already held: the put is dropped (not an error).
    Stale,
}

/// How many tombstones a member keeps at most; past it the oldest go first.
pub const MAX_TOMBSTONES: usize = 100_000;

#[derive(Debug)]
pub struct ChunkStore {
    slots: HashMap<(u32, u8), Slots>,
    /// Slots held, over every (stripe, position).
    count: usize,
    /// Records replaced by newer versions, until the watermark passes those.
    prevs: Previous,
    /// Per stripe, the slots holding a previous record, with the version that replaced it.
    pending_prev: HashMap<u32, VecDeque<(SlotKey, u64)>>,
    bytes: u64,
    /// Deleted keys, by (stripe, key), with the delete's version: an index rebuild adopts no
    /// record below it (a member that missed the delete, cut off or stopped, still holds the
    /// old record), and no record below it is stored any more.
    tombstones: HashMap<(u32, Vec<u8>), u64>,
    /// Tombstones in the order they were laid, to drop the oldest past [`MAX_TOMBSTONES`].
    tombstone_order: VecDeque<(u32, Vec<u8>, u64)>,
    /// Per stripe, the highest fencing token a request carried (`cluster::coord`): a request
    /// of an older term is refused.
    fences: HashMap<u32, u64>,
    /// Requests refused for an older term (`admit`).
    pub fenced_out: u64,
    /// The whole layout: the slab of the values this node is the home of ...
    pub slab: Slab,
    /// ... and the parity pages of other homes' pages it keeps (`member::whole`).
    pub parity: ParityPages,
    /// This process started after a restart (`--recover`) and has not rebuilt its pages yet
    /// (`Node::rebuild_pages`): it answers no range of a page not rebuilt, writes no value
    /// whole, and keeps the deltas that arrive for its parity pages until each page is rebuilt
    /// (then applies those the rebuilt page does not already hold).
    pub whole_lost: bool,
    /// Deltas kept while rebuilding, by parity page: (data position, seq, offset, delta).
    held_deltas: HashMap<(u32, u8, u32), Vec<HeldDelta>>,
    /// Parity pages being rebuilt while the node runs (a delta missing, `begin_heal`): the
    /// deltas that arrive meanwhile are applied and kept, to be applied again over the
    /// rebuilt page (each once, by seq).
    healing: HashMap<(u32, u8, u32), Vec<u64>>,
    /// Pages rebuilt so far while rebuilding: parity pages, and slab pages (position 255,
    /// position 255, page stripe 2^32 − 1, stand for "this node's slab").
    rebuilt: std::collections::HashSet<(u32, u8, u32)>,
    /// The code parity pages are kept under: its kernel, generator (n × k, row-major) and k.
    whole_code: Option<(codes::Kernel, Vec<u8>, usize)>,
    /// Deltas kept while another parity position may miss them ([`KeptDelta`]), and their
    /// bytes.
    kept: Kept,
    kept_bytes: u64,
}

impl Default for ChunkStore {
    fn default() -> ChunkStore {
        ChunkStore::with_page_bytes(PAGE_BYTES)
    }
}

impl ChunkStore {
    pub fn new() -> ChunkStore {
        ChunkStore::default()
    }

    /// A store whose slab pages are `page_bytes` each (tests use small pages).
    pub fn with_page_bytes(page_bytes: usize) -> ChunkStore {
        ChunkStore {
            slots: HashMap::new(),
            count: 0,
            prevs: Previous::default(),
            pending_prev: HashMap::new(),
            bytes: 0,
            tombstones: HashMap::new(),
            tombstone_order: VecDeque::new(),
            fences: HashMap::new(),
            fenced_out: 0,
            slab: Slab::new(page_bytes),
            parity: ParityPages::default(),
            whole_lost: false,
            healing: HashMap::new(),
            held_deltas: HashMap::new(),
            rebuilt: std::collections::HashSet::new(),
            whole_code: None,
            kept: HashMap::new(),
            kept_bytes: 0,
        }
    }

    /// How many pages of page stripe `t` this member holds at `position` (a data position:
    /// its slab's pages of that residue; a parity position: one more than its highest page).
    pub fn pages_of(&self, t: u32, position: u8) -> u32 {
        let k = self.slab.residues();
        if (position as usize) < k {
            self.slab.pages_of(position as usize)
        } else {
            self.parity.pages_of(t, position)
        }
    }

    /// Puts back page `j` of this node's slab, rebuilt after a restart.
    pub fn install_page(&mut self, j: u32, bytes: &[u8], seq: u64) {
        self.slab.install(j, bytes, seq);
        self.rebuilt.insert(slab_key(j));
    }

    /// Puts back a parity page rebuilt after a restart from data pages at `seqs`, then applies
    /// the deltas kept meanwhile that it does not hold (seq above its data page's).
    pub fn install_parity(&mut self, key: (u32, u8, u32), bytes: &[u8], seqs: &[u64]) {
        self.parity.install(key, bytes, seqs);
        self.rebuilt.insert(key);
        self.apply_held(key);
    }

    fn apply_held(&mut self, key: (u32, u8, u32)) {
        let Some((kernel, generator, k)) = &self.whole_code else {
            return;
        };
        let page_bytes = self.slab.page_bytes();
        for (d, seq, offset, delta) in self.held_deltas.remove(&key).unwrap_or_default() {
            let coef = generator[key.1 as usize * k + d];
            let _ = self
                .parity
                .apply(*kernel, key, *k, page_bytes, d, seq, offset, coef, &delta);
        }
    }

    /// Parity pages with a delta missing for at least `for_at_least` (none while this node
    /// rebuilds its pages after a restart, nor those being healed).
    pub fn gapped_parity(&self, for_at_least: std::time::Duration) -> Vec<(u32, u8, u32)> {
        if self.whole_lost {
            return Vec::new();
        }
        let mut keys = self.parity.gapped(for_at_least);
        keys.retain(|key| !self.healing.contains_key(key));
        keys
    }

    /// Starts rebuilding parity page `key` while the node runs: from now on the deltas that
    /// arrive for it are kept as well as applied. Returns, per data position, the highest
    /// delta seq the page has applied: a rebuild must agree with data pages at least that new
    /// (every delta applied so far is then in the rebuilt bytes).
    pub fn begin_heal(&mut self, key: (u32, u8, u32)) -> Vec<u64> {
        let k = self.whole_code.as_ref().map_or(0, |c| c.2);
        let highest = self.parity.highest_applied(key, k);
        self.healing.insert(key, highest.clone());
        highest
    }

    /// Installs the rebuilt parity page `key` (agreeing with data pages at `seqs`) and applies
    /// over it the deltas that came since `begin_heal` (those the rebuild holds, by seq, are
    /// skipped). False, and the page left as it was, when no heal of it is under way or the
    /// rebuild is older than what the page had applied.
    pub fn finish_heal(&mut self, key: (u32, u8, u32), bytes: &[u8], seqs: &[u64]) -> bool {
        let Some(highest) = self.healing.remove(&key) else {
            return false;
        };
        let older = seqs.len() != highest.len() || seqs.iter().zip(&highest).any(|(s, h)| s < h);
        if older || bytes.len() != self.slab.page_bytes() {
            self.held_deltas.remove(&key);
            return false;
        }
        self.parity.install(key, bytes, seqs);
        self.apply_held(key);
        true
    }

    /// Gives up healing page `key` (the page stays as it was, every delta applied).
    pub fn abort_heal(&mut self, key: (u32, u8, u32)) {
        self.healing.remove(&key);
        self.held_deltas.remove(&key);
    }

    /// The rebuild is over: deltas kept for pages that did not exist when it read their
    /// stripes (every delta such a page ever had arrived since the restart) are applied to
    /// new pages, and the node's pages are whole again.
    pub fn finish_rebuild(&mut self) {
        let keys: Vec<(u32, u8, u32)> = self.held_deltas.keys().copied().collect();
        for key in keys {
            self.apply_held(key);
        }
        self.rebuilt.clear();
        self.whole_lost = false;
    }

    /// Writes a record rebuilt from its page's stripe back into its slot at this home, in
    /// place and without a delta: the parity pages already cover those bytes (the slot's
    /// own were damaged). Only over the slot that holds the key's record of that version, of
    /// that length; true when mended.
    pub fn mend_whole(&mut self, stripe: u32, key: &[u8], version: u64, bytes: &[u8]) -> bool {
        let Some(slot) = self.slot(stripe, 0, key) else {
            return false;
        };
        let (Held::Slab(at), true) = (&slot.cur, slot.cur_version == version) else {
            return false;
        };
        if at.len as usize != bytes.len() {
            return false;
        }
        let at = *at;
        self.slab.bytes_mut(at).copy_from_slice(bytes);
        true
    }

    /// Takes the slot `at` of this node's rebuilt slab as holding the home's record of a key of
    /// `stripe` (of `version`): true when the slot holds exactly that record, which the store
    /// then serves as its position-0 record.
    pub fn link_whole(&mut self, stripe: u32, key: &[u8], version: u64, at: WholeAt) -> bool {
        if !self.slab.holds(at.page)
            || at.offset as usize + at.len as usize > self.slab.page_bytes()
        {
            return false;
        }
        let header = match record::parse(self.slab.bytes(at)) {
            Ok((h, _)) if h.key == key && h.version == version && h.chunk_index == 0 => h,
            _ => return false,
        };
        if self.is_stale(stripe, &header) || !self.slab.claim(at) {
            return false;
        }
        self.put_held(stripe, header, Held::Slab(at), 0);
        true
    }

    /// The whole layout's location records of a stripe held here (current ones), as stored.
    /// What a `List` of `stripe` answers, copied as it stands: the head and key of every
    /// record (current and previous) and the whole layout's location records whole, in one
    /// buffer, with the stripe's tombstones. The member holds its store's lock only for this
    /// copy; the records are made from it after ([`Listing::into_parts`]). Made in the lock,
    /// the listing of 222,000 keys held it about a second on a loaded machine, and the event
    /// loop's requests and its heartbeat answers behind them waited for it.
    pub fn listing(&self, stripe: u32) -> Listing {
        let mut l = Listing::default();
        let held = self.slots.iter().filter(|((s, _), _)| *s == stripe);
        for (&(_, position), slot) in held.flat_map(|(at, m)| m.values().map(move |s| (at, s))) {
            let bytes = bytes_of(&self.slab, &slot.cur);
            l.push_head(bytes);
            for p in self.prevs.of(stripe, position, record::key_of(bytes)) {
                l.push_head(bytes_of(&self.slab, &p.held));
            }
            if position != 0 {
                if let Held::Heap(bytes) = &slot.cur {
                    if record::head_end(bytes).is_some_and(|(k, _)| k == record::Kind::Whole) {
                        let at = l.arena.len();
                        l.arena.extend_from_slice(bytes);
                        l.whole.push(at..l.arena.len());
                    }
                }
            }
        }
        l.tombstones = self.tombstones(stripe);
        l
    }

    /// The whole layout's location records of a stripe (positions past 0), whole: with
    /// [`ChunkStore::list`], the oracle of [`ChunkStore::listing`].
    #[cfg(test)]
    pub fn location_records(&self, stripe: u32) -> Vec<Vec<u8>> {
        let held = self
            .slots
            .iter()
            .filter(|((s, p), _)| *s == stripe && *p != 0);
        held.flat_map(|(_, m)| m.values())
            .filter_map(|slot| match &slot.cur {
                Held::Heap(bytes)
                    if record::parse_header(bytes)
                        .is_ok_and(|(h, _)| h.kind == record::Kind::Whole) =>
                {
                    Some(bytes.to_vec())
                }
                _ => None,
            })
            .collect()
    }

    /// Sets the size of slab and parity pages and the growth of the slab's size classes
    /// (before anything is stored).
    pub fn set_slab(&mut self, page_bytes: usize, growth: f64) {
        assert!(
            self.slab.pages() == 0 && self.parity.is_empty(),
            "the slab set on a store that holds pages"
        );
        let k = self.slab.residues();
        self.slab = Slab::with_growth(page_bytes, growth);
        self.slab.set_residues(k);
    }

    /// The residue the slab's first page takes (`Slab::set_start`; before anything is
    /// stored).
    pub fn set_slab_start(&mut self, start: usize) {
        self.slab.set_start(start);
    }

    /// The code this member's parity pages are kept under.
    pub fn set_code(&mut self, kernel: codes::Kernel, code: codes::Code) {
        self.whole_code = Some((kernel, code.generator(), code.k()));
        if self.slab.residues() != code.k() {
            self.slab.set_residues(code.k());
        }
    }

    /// A home's delta for parity position `position` of page `page` of page stripe
    /// `page_stripe` (`Request::Delta`): applied to the parity page once, and `record`, the
    /// value's location, stored as this member's record of the key.
    #[allow(clippy::too_many_arguments)]
    pub fn apply_delta(
        &mut self,
        stripe: u32,
        watermark: u64,
        record: Vec<u8>,
        key: (u32, u8, u32),
        data: u8,
        (seq, committed): (u64, u64),
        offset: u32,
        delta: &std::sync::Arc<[u8]>,
    ) -> Result<(), String> {
        let (header, _) = record::parse(&record).map_err(|e| e.to_string())?;
        if header.kind != record::Kind::Whole {
            return Err(format!("a delta's record is {:?}, not whole", header.kind));
        }
        self.apply_page_delta(key, data, seq, offset, delta)?;
        if seq > committed {
            let kept = self.kept.entry((key.0, key.1, key.2, data)).or_default();
            let delta = KeptDelta {
                seq,
                offset,
                delta: std::sync::Arc::clone(delta),
                stripe,
                record: record.clone(),
            };
            let bytes = delta.bytes();
            if kept.insert(seq, delta, Instant::now()) {
                self.kept_bytes += bytes;
            }
        }
        // Those the home now knows every position applied go.
        self.commit_kept(key, data, committed);
        self.put_held(
            stripe,
            header,
            Held::Heap(record.into_boxed_slice()),
            watermark,
        );
        Ok(())
    }

    /// Drops the deltas of data position `data` kept for parity page `key` up to `committed`
    /// (every parity position applied them, the home says).
    pub fn commit_kept(&mut self, key: (u32, u8, u32), data: u8, committed: u64) {
        let at = (key.0, key.1, key.2, data);
        let Some(kept) = self.kept.get_mut(&at) else {
            return;
        };
        // An emptied queue stays, its room for the page's next deltas (`release_kept` drops
        // those left empty).
        self.kept_bytes -= kept.commit(committed);
    }

    /// The deltas of data position `data` kept for parity page `key` with a seq above `above`.
    pub fn kept_deltas(&self, key: (u32, u8, u32), data: u8, above: u64) -> Vec<KeptDelta> {
        self.kept
            .get(&(key.0, key.1, key.2, data))
            .map(|m| m.above(above).cloned().collect())
            .unwrap_or_default()
    }

    /// Drops the kept deltas for which `release` (given the page stripe, the data position and
    /// when the delta arrived) says so.
    pub fn release_kept(&mut self, release: impl Fn(u32, u8, Instant) -> bool) {
        let mut freed = 0;
        self.kept.retain(|&(t, _, _, d), m| {
            m.0.retain(|(_, k, at)| {
                let go = release(t, d, *at);
                if go {
                    freed += k.bytes();
                }
                !go
            });
            !m.is_empty()
        });
        self.kept_bytes -= freed;
    }

    /// Deltas kept, and their bytes.
    pub fn kept(&self) -> (usize, u64) {
        (self.kept.values().map(|m| m.len()).sum(), self.kept_bytes)
    }

    /// The page part of a delta: `g[position][data] · delta` added at `offset` of the parity
    /// page, once per (`data`, `seq`); kept for later while the page is being rebuilt.
    pub fn apply_page_delta(
        &mut self,
        (page_stripe, position, page): (u32, u8, u32),
        data: u8,
        seq: u64,
        offset: u32,
        delta: &[u8],
    ) -> Result<(), String> {
        let Some((kernel, generator, k)) = &self.whole_code else {
            return Err("this member keeps no parity pages (no code set)".into());
        };
        let (k, n) = (*k, generator.len() / *k);
        let (p, d) = (position as usize, data as usize);
        if p < k || p >= n || d >= k {
            return Err(format!(
                "a delta for data position {d} at position {p}: parity positions are {k}..{n}"
            ));
        }
        let coef = generator[p * k + d];
        let page_bytes = self.slab.page_bytes();
        let key = (page_stripe, position, page);
        if offset as usize + delta.len() > page_bytes {
            return Err(format!(
                "delta out of bounds: bytes {offset}..{} of a {page_bytes}-byte page",
                offset as usize + delta.len()
            ));
        }
        if self.whole_lost && !self.rebuilt.contains(&key) {
            // Kept until the page is rebuilt (`install_parity`).
            self.held_deltas
                .entry(key)
                .or_default()
                .push((d, seq, offset, delta.to_vec()));
            return Ok(());
        }
        if self.healing.contains_key(&key) {
            // Applied now, and again over the rebuilt page (`finish_heal`).
            self.held_deltas
                .entry(key)
                .or_default()
                .push((d, seq, offset, delta.to_vec()));
        }
        self.parity
            .apply(*kernel, key, k, page_bytes, d, seq, offset, coef, delta)?;
        Ok(())
    }

    /// A home rebuilt after a restart realigns parity page `key`, which its last deltas tore
    /// (`Request::Realign`): the page's count for data position `data` moves from `from` to
    /// `to` and `correction` is added at `offset` (`ParityPages::realign`). Rolled back
    /// (`to < from`), the location records of the home's keys (`stripe`) that point at bytes
    /// the correction changes came with the deltas undone: each goes back to the record it
    /// replaced (or goes, if none). False when the page's count for `data` is not `from`.
    #[allow(clippy::too_many_arguments)]
    pub fn realign_parity(
        &mut self,
        stripe: u32,
        key: (u32, u8, u32),
        data: u8,
        from: u64,
        to: u64,
        offset: u32,
        correction: &[u8],
    ) -> Result<bool, String> {
        let Some((_, generator, k)) = &self.whole_code else {
            return Err("this member keeps no parity pages (no code set)".into());
        };
        let (k, n) = (*k, generator.len() / *k);
        let (p, d) = (key.1 as usize, data as usize);
        if p < k || p >= n || d >= k {
            return Err(format!(
                "a realignment for data position {d} at position {p}: parity positions are \
                 {k}..{n}"
            ));
        }
        if self.whole_lost && !self.rebuilt.contains(&key) {
            return Err("this parity page is being rebuilt after a restart".into());
        }
        if self.healing.contains_key(&key) {
            return Err("this parity page is being rebuilt (a delta missing)".into());
        }
        let page_bytes = self.slab.page_bytes();
        let done = self
            .parity
            .realign(key, k, page_bytes, d, (from, to), offset, correction)?;
        if done && to < from {
            let j = crate::member::whole::home_page(d, key.2, k);
            self.roll_back_locations(stripe, j, offset, correction);
        }
        if done {
            // The page agrees with its home's rebuilt page: no delta kept of it is to be sent.
            if let Some(m) = self.kept.remove(&(key.0, key.1, key.2, data)) {
                self.kept_bytes -= m.bytes();
            }
        }
        Ok(done)
    }

    /// Puts back, for the location records of `stripe` that point into slab page `j` of its
    /// home at bytes `correction` changes (nonzero), the record each replaced (or drops it).
    fn roll_back_locations(&mut self, stripe: u32, j: u32, offset: u32, correction: &[u8]) {
        let touched = |at: WholeAt| {
            let lo = at.offset.max(offset) as usize;
            let hi = (at.offset as usize + at.len as usize).min(offset as usize + correction.len());
            at.page == j
                && lo < hi
                && correction[lo - offset as usize..hi - offset as usize]
                    .iter()
                    .any(|&b| b != 0)
        };
        let (mut dropped, mut freed, mut bytes_out, mut bytes_in) = (0, Vec::new(), 0u64, 0u64);
        let held = self
            .slots
            .iter_mut()
            .filter(|((s, p), _)| *s == stripe && *p != 0);
        let prevs = &mut self.prevs;
        for (&(_, position), held) in held {
            held.table.retain(|slot| {
                let Held::Heap(bytes) = &slot.cur else {
                    return true;
                };
                let at = match record::parse(bytes) {
                    Ok((h, data)) if h.kind == record::Kind::Whole => WholeAt::from_bytes(data),
                    _ => None,
                };
                if !at.is_some_and(touched) {
                    return true;
                }
                bytes_out += slot.cur.len() as u64;
                let key = record::key_of(bytes);
                match prevs.pop(stripe, position, key) {
                    Some(prev) => {
                        bytes_in += prev.held.len() as u64;
                        slot.cur_version = prev.version;
                        freed.push(std::mem::replace(&mut slot.cur, prev.held));
                        true
                    }
                    None => {
                        dropped += 1;
                        false
                    }
                }
            });
        }
        for h in freed {
            release(&mut self.slab, h);
        }
        self.count -= dropped;
        self.bytes = self.bytes + bytes_in - bytes_out;
    }

    /// A byte range of page `page` of page stripe `page_stripe` at `position`: this node's
    /// slab page for a data position, its parity page otherwise; with its seqs
    /// (`member::whole`).
    pub fn range(
        &self,
        (page_stripe, position, page): (u32, u8, u32),
        offset: u32,
        len: u32,
    ) -> Result<(Vec<u64>, Vec<u8>), String> {
        let Some((_, generator, k)) = &self.whole_code else {
            return Err("this member keeps no pages (no code set)".into());
        };
        let (k, n) = (*k, generator.len() / *k);
        let p = position as usize;
        let rebuilt = if p < k {
            self.rebuilt
                .contains(&slab_key(crate::member::whole::home_page(p, page, k)))
        } else {
            self.rebuilt.contains(&(page_stripe, position, page))
        };
        if self.whole_lost && !rebuilt {
            return Err("this node's pages were lost in a restart and are being rebuilt".into());
        }
        let out = if p < k {
            self.slab
                .range(crate::member::whole::home_page(p, page, k), offset, len)
                .map(|(seq, bytes)| (vec![seq], bytes))
        } else if p < n {
            self.parity.range(
                (page_stripe, position, page),
                k,
                self.slab.page_bytes(),
                offset,
                len,
            )
        } else {
            None
        };
        out.ok_or_else(|| format!("no range {offset}+{len} of page {page} at position {p}"))
    }

    /// Admits a request of `stripe` carrying fencing token `token`: refused (with the newer
    /// token) when a request of a newer term has been seen; otherwise the token is noted.
    pub fn admit(&mut self, stripe: u32, token: u64) -> Result<(), u64> {
        if token == 0 {
            // No coordinator (every request), or a bare request: nothing to note.
            return match self.fences.get(&stripe) {
                Some(&seen) if seen > 0 => {
                    self.fenced_out += 1;
                    Err(seen)
                }
                _ => Ok(()),
            };
        }
        let seen = self.fences.entry(stripe).or_insert(0);
        if token < *seen {
            self.fenced_out += 1;
            return Err(*seen);
        }
        *seen = token;
        Ok(())
    }

    /// Bytes of records held (current and previous).
    pub fn bytes(&self) -> u64 {
        self.bytes
    }

    pub fn len(&self) -> usize {
        self.count
    }

    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    fn slot(&self, stripe: u32, position: u8, key: &[u8]) -> Option<&Slot> {
        self.slots.get(&(stripe, position))?.get(&self.slab, key)
    }

    /// Stores a record after checking it. `watermark`: every write of this stripe below it has
    /// finished, so previous records replaced by such writes are dropped.
    pub fn put(
        &mut self,
        stripe: u32,
        bytes: Vec<u8>,
        watermark: u64,
    ) -> Result<PutOutcome, RecordError> {
        let (header, _) = record::parse(&bytes)?;
        Ok(self.put_held(
            stripe,
            header,
            Held::Heap(bytes.into_boxed_slice()),
            watermark,
        ))
    }

    /// Stores the record of a whole-layout value at its home (`header` and the value), encoded
    /// in a slab slot: the slot's delta for the parity positions of its page, or why not
    /// (`None` from a stale record: nothing written). Errors: the record is larger than a
    /// page, or the slab's pages were lost in a restart.
    pub fn put_whole(
        &mut self,
        stripe: u32,
        header: Header,
        data: &[u8],
        watermark: u64,
    ) -> Result<Option<SlotWrite>, String> {
        if self.whole_lost {
            return Err("this node's slab pages were lost in a restart".into());
        }
        if self.is_stale(stripe, &header) {
            return Ok(None);
        }
        // The slot the key's record is in now, if in the slab: the new one keeps its residue.
        let want = match self
            .slot(stripe, header.chunk_index, &header.key)
            .map(|s| &s.cur)
        {
            Some(Held::Slab(at)) => Some(at.page as usize),
            _ => None,
        };
        let len = record::encoded_len(&header, data.len());
        let at = self.slab.alloc(len, want).ok_or_else(|| {
            format!(
                "a record of {len} bytes does not fit a {}-byte slab page",
                self.slab.page_bytes()
            )
        })?;
        // Encoded in its slot: the value is copied once, from the request into the slab.
        let written = self
            .slab
            .write(at, |slot| record::encode_into(&header, data, slot));
        match self.put_held(stripe, header, Held::Slab(at), watermark) {
            PutOutcome::Stored => Ok(Some(written)),
            // Not reached (checked above), but the slot's delta stands either way.
            PutOutcome::Stale => Ok(Some(written)),
        }
    }

    /// Whether a record is older than what the store holds of its key (a delete or a newer
    /// record at its position).
    fn is_stale(&self, stripe: u32, header: &Header) -> bool {
        // (A lookup by key needs a copy of it: skipped while no key was ever deleted.)
        if !self.tombstones.is_empty()
            && self
                .tombstones
                .get(&(stripe, header.key.clone()))
                .is_some_and(|&d| d > header.version)
        {
            return true;
        }
        self.slot(stripe, header.chunk_index, &header.key)
            .is_some_and(|slot| slot.cur_version > header.version)
    }

    fn put_held(&mut self, stripe: u32, header: Header, bytes: Held, watermark: u64) -> PutOutcome {
        let version = header.version;
        let tomb = (stripe, header.key);
        match self.tombstones.get(&tomb) {
            Some(&deleted) if deleted > version => {
                log::debug!(
                    "stripe {stripe}: record {} v{version} older than its delete v{deleted}",
                    String::from_utf8_lossy(&tomb.1)
                );
                release(&mut self.slab, bytes);
                return PutOutcome::Stale;
            }
            Some(_) => {
                self.tombstones.remove(&tomb);
            }
            None => {}
        }
        let key: SlotKey = (stripe, header.chunk_index, tomb.1);
        let held = self.slots.entry((stripe, key.1)).or_default();
        // A record replaced: its key goes to the trims to come (`pending_prev`); else back to
        // the spares.
        let mut replaced = false;
        let outcome = match held.get_mut(&self.slab, &key.2) {
            Some(slot) if slot.cur_version > version => {
                log::debug!(
                    "stripe {stripe}: record {} v{version} at position {} older than v{}",
                    String::from_utf8_lossy(&key.2),
                    key.1,
                    slot.cur_version
                );
                release(&mut self.slab, bytes);
                PutOutcome::Stale
            }
            Some(slot) if slot.cur_version == version => {
                self.bytes = self.bytes + bytes.len() as u64 - slot.cur.len() as u64;
                let old = std::mem::replace(&mut slot.cur, bytes);
                release(&mut self.slab, old);
                PutOutcome::Stored
            }
            Some(slot) => {
                let old = std::mem::replace(&mut slot.cur, bytes);
                self.bytes += slot.cur.len() as u64;
                let prev = Prev {
                    version: slot.cur_version,
                    replaced_by: version,
                    held: old,
                };
                slot.cur_version = version;
                self.prevs.push(stripe, key.1, &key.2, prev);
                self.bytes -= (self.prevs).trim(&mut self.slab, (stripe, key.1, &key.2), watermark);
                replaced = true;
                PutOutcome::Stored
            }
            None => {
                self.bytes += bytes.len() as u64;
                self.count += 1;
                held.insert(
                    &self.slab,
                    &key.2,
                    Slot {
                        cur_version: version,
                        cur: bytes,
                    },
                );
                PutOutcome::Stored
            }
        };
        if replaced {
            self.pending_prev
                .entry(stripe)
                .or_default()
                .push_back((key, version));
        } else {
            self.prevs.give_key(key.2);
        }
        self.trim(stripe, watermark);
        outcome
    }

    /// Drops previous records whose replacing write is below the watermark.
    pub fn trim(&mut self, stripe: u32, watermark: u64) {
        let Some(q) = self.pending_prev.get_mut(&stripe) else {
            return;
        };
        while let Some((_, v)) = q.front() {
            if *v >= watermark {
                break;
            }
            let ((s, p, key), _) = q.pop_front().expect("front");
            self.bytes -= self.prevs.trim(&mut self.slab, (s, p, &key), watermark);
            self.prevs.give_key(key);
        }
    }

    /// The record of `version` at a position (current or previous), if held.
    pub fn get(&self, stripe: u32, position: u8, key: &[u8], version: u64) -> Option<&[u8]> {
        let slot = self.slot(stripe, position, key)?;
        if slot.cur_version == version {
            return Some(bytes_of(&self.slab, &slot.cur));
        }
        self.prevs
            .of(stripe, position, key)
            .iter()
            .find(|p| p.version == version)
            .map(|p| bytes_of(&self.slab, &p.held))
    }

    /// The bytes of slot `at` of this node's slab, for a read that knows where a value's record
    /// lies (`Entry::whole_at`) and checks what it finds (key, version, CRC): `None` while the
    /// slab is being rebuilt after a restart, or for a slot outside the slab's pages.
    pub fn whole_slot(&self, at: WholeAt) -> Option<&[u8]> {
        let inside = at.offset as usize + at.len as usize <= self.slab.page_bytes();
        (!self.whole_lost && inside && self.slab.holds(at.page)).then(|| self.slab.bytes(at))
    }

    /// The current record at a position, whatever its version.
    pub fn get_latest(&self, stripe: u32, position: u8, key: &[u8]) -> Option<&[u8]> {
        self.slot(stripe, position, key)
            .map(|s| bytes_of(&self.slab, &s.cur))
    }

    /// Deletes the key's records at every position of the stripe whose version is below
    /// `version` (the delete's own version), and lays a tombstone of that version.
    pub fn delete(&mut self, stripe: u32, key: &[u8], version: u64) {
        let at = self.tombstones.entry((stripe, key.to_vec())).or_insert(0);
        if *at < version {
            *at = version;
            self.tombstone_order
                .push_back((stripe, key.to_vec(), version));
        }
        while self.tombstone_order.len() > MAX_TOMBSTONES {
            let (s, k, v) = self.tombstone_order.pop_front().expect("not empty");
            if self.tombstones.get(&(s, k.clone())) == Some(&v) {
                self.tombstones.remove(&(s, k));
            }
        }
        let (mut slots, mut bytes) = (0, 0);
        let mut freed = Vec::new();
        let of_stripe = self.slots.iter_mut().filter(|((s, _), _)| *s == stripe);
        for (&(_, position), held) in of_stripe {
            if held
                .get(&self.slab, key)
                .is_none_or(|slot| slot.cur_version >= version)
            {
                continue;
            }
            let slot = held.remove(&self.slab, key).expect("present");
            slots += 1;
            bytes += slot.cur.len() as u64;
            freed.push(slot.cur);
            for p in self.prevs.take(stripe, position, key) {
                bytes += p.held.len() as u64;
                freed.push(p.held);
            }
        }
        for h in freed {
            release(&mut self.slab, h);
        }
        self.count -= slots;
        self.bytes -= bytes;
    }

    /// Rewrites the exptime of the key's records of `version` (touch).
    pub fn touch(&mut self, stripe: u32, key: &[u8], version: u64, exptime: i64) {
        let of_stripe = self.slots.iter_mut().filter(|((s, _), _)| *s == stripe);
        for (_, held) in of_stripe {
            let Some(slot) = held.get_mut(&self.slab, key) else {
                continue;
            };
            if slot.cur_version != version {
                continue;
            }
            // A record in the slab keeps its bytes (a change would need a delta): the index and
            // the records at the parity positions carry the new exptime.
            let Held::Heap(cur) = &mut slot.cur else {
                continue;
            };
            if let Ok((mut header, data)) = record::parse(cur) {
                header.exptime = exptime;
                *cur = record::encode(&header, data).into_boxed_slice();
            }
        }
    }

    /// Headers of every record (current and previous) of a stripe: what a listing made in the
    /// lock parsed, kept as the oracle of [`ChunkStore::listing`].
    #[cfg(test)]
    pub fn list(&self, stripe: u32) -> Vec<Header> {
        let mut out = Vec::new();
        let held = self.slots.iter().filter(|((s, _), _)| *s == stripe);
        for (&(_, position), slot) in held.flat_map(|(at, m)| m.values().map(move |s| (at, s))) {
            let bytes = bytes_of(&self.slab, &slot.cur);
            if let Ok((h, _)) = record::parse_header(bytes) {
                out.push(h);
            }
            for p in self.prevs.of(stripe, position, record::key_of(bytes)) {
                if let Ok((h, _)) = record::parse_header(bytes_of(&self.slab, &p.held)) {
                    out.push(h);
                }
            }
        }
        out
    }

    /// The tombstones of a stripe: each deleted key with its delete's version.
    pub fn tombstones(&self, stripe: u32) -> Vec<(Vec<u8>, u64)> {
        self.tombstones
            .iter()
            .filter(|((s, _), _)| *s == stripe)
            .map(|((_, k), &v)| (k.clone(), v))
            .collect()
    }

    /// Flips one bit of the data of the current record at a position (test-only command).
    /// Returns false when there is no such record or the bit is outside its data.
    pub fn flip_bit(&mut self, stripe: u32, position: u8, key: &[u8], bit: u64) -> bool {
        let Some(slot) = self
            .slots
            .get_mut(&(stripe, position))
            .and_then(|m| m.get_mut(&self.slab, key))
        else {
            return false;
        };
        // A record in the slab is flipped in place, behind its parity's back (as a memory
        // fault would): a read finds its CRC wrong and rebuilds it from its page's stripe.
        let bytes: &mut [u8] = match &mut slot.cur {
            Held::Heap(b) => b,
            Held::Slab(at) => self.slab.bytes_mut(*at),
        };
        let Ok((_, data)) = record::parse_header(bytes) else {
            return false;
        };
        let byte = data.start as u64 + bit / 8;
        if bit / 8 >= data.len() as u64 {
            return false;
        }
        bytes[byte as usize] ^= 1 << (bit % 8);
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::{Header, Kind};

    fn rec(key: &[u8], pos: u8, version: u64, data: &[u8]) -> Vec<u8> {
        record::encode(
            &Header {
                kind: Kind::Coded,
                chunk_index: pos,
                written_around: false,
                key: key.to_vec(),
                version,
                value_bytes: data.len() as u64,
                flags: 0,
                exptime: 0,
                trail: [0; record::TRAIL],
            },
            data,
        )
    }

    #[test]
    fn keeps_previous_until_watermark() {
        let mut st = ChunkStore::new();
        assert_eq!(st.put(1, rec(b"k", 0, 10, b"a"), 0), Ok(PutOutcome::Stored));
        assert_eq!(
            st.put(1, rec(b"k", 0, 20, b"b"), 10),
            Ok(PutOutcome::Stored)
        );
        assert!(st.get(1, 0, b"k", 10).is_some());
        assert!(st.get(1, 0, b"k", 20).is_some());
        assert_eq!(st.list(1).len(), 2);
        // A write of version 30 to another key says 20 is done: the previous record goes.
        st.put(1, rec(b"j", 0, 30, b"c"), 21).unwrap();
        assert!(st.get(1, 0, b"k", 10).is_none());
        assert!(st.get(1, 0, b"k", 20).is_some());
        assert_eq!(st.bytes(), (rec(b"k", 0, 20, b"b").len() * 2) as u64);
    }

    /// Writes 20 and 30 of one key fail in turn (the watermark stays at 20, the first one
    /// still in flight): version 10, which the agent serves again, is kept under both, and goes
    /// once a later write is below the watermark. Past [`PREVIOUS_MAX`] records replaced the
    /// oldest goes all the same.
    #[test]
    fn records_replaced_by_writes_in_flight_stay_until_the_watermark_passes_them() {
        let mut st = ChunkStore::new();
        st.put(1, rec(b"k", 0, 10, b"a"), 0).unwrap();
        st.put(1, rec(b"k", 0, 20, b"b"), 11).unwrap();
        st.put(1, rec(b"k", 0, 30, b"c"), 20).unwrap();
        for v in [10, 20, 30] {
            assert!(st.get(1, 0, b"k", v).is_some(), "v{v}");
        }
        assert_eq!(st.list(1).len(), 3);
        let one = rec(b"k", 0, 10, b"a").len() as u64;
        assert_eq!(st.bytes(), 3 * one);
        // Version 40 committed: everything below it is done.
        st.put(1, rec(b"k", 0, 40, b"d"), 40).unwrap();
        st.put(1, rec(b"j", 0, 50, b"e"), 41).unwrap();
        for v in [10, 20, 30] {
            assert!(st.get(1, 0, b"k", v).is_none(), "v{v}");
        }
        assert!(st.get(1, 0, b"k", 40).is_some());
        assert_eq!(st.bytes(), 2 * one);
        // A watermark that never moves keeps at most PREVIOUS_MAX.
        for v in 60..70 {
            st.put(2, rec(b"m", 0, v, b"f"), 0).unwrap();
        }
        let kept: Vec<u64> = (60..70)
            .filter(|&v| st.get(2, 0, b"m", v).is_some())
            .collect();
        assert_eq!(kept, (69 - PREVIOUS_MAX as u64..70).collect::<Vec<_>>());
    }

    #[test]
    fn a_delete_leaves_a_tombstone_that_refuses_older_records() {
        let mut st = ChunkStore::new();
        st.put(3, rec(b"k", 1, 10, b"v"), 0).unwrap();
        st.delete(3, b"k", 15);
        assert!(st.get_latest(3, 1, b"k").is_none());
        assert_eq!(st.tombstones(3), vec![(b"k".to_vec(), 15)]);
        assert!(st.tombstones(4).is_empty());
        // A record older than the delete (a late write, a write-back) is not stored again.
        assert_eq!(
            st.put(3, rec(b"k", 2, 12, b"old"), 0),
            Ok(PutOutcome::Stale)
        );
        assert!(st.get_latest(3, 2, b"k").is_none());
        // A newer write stores, and the tombstone goes.
        assert_eq!(
            st.put(3, rec(b"k", 1, 20, b"new"), 0),
            Ok(PutOutcome::Stored)
        );
        assert!(st.tombstones(3).is_empty());
        // Past the bound, the oldest tombstones go first.
        for i in 0..MAX_TOMBSTONES + 2 {
            st.delete(5, format!("d{i}").as_bytes(), 100 + i as u64);
        }
        let t = st.tombstones(5);
        assert_eq!(t.len(), MAX_TOMBSTONES);
        assert!(!t.iter().any(|(k, _)| k == b"d0" || k == b"d1"));
        assert!(t.iter().any(|(k, _)| k == b"d2"));
    }

    #[test]
    fn lower_version_never_replaces_higher() {
        let mut st = ChunkStore::new();
        st.put(0, rec(b"k", 2, 20, b"new"), 0).unwrap();
        assert_eq!(
            st.put(0, rec(b"k", 2, 10, b"old"), 0),
            Ok(PutOutcome::Stale)
        );
        let r = st.get_latest(0, 2, b"k").unwrap();
        assert_eq!(record::parse(r).unwrap().1, b"new");
    }

    #[test]
    fn corrupt_put_is_refused() {
        let mut st = ChunkStore::new();
        let mut r = rec(b"k", 0, 1, b"abc");
        r[45] ^= 4;
        assert!(st.put(0, r, 0).is_err());
        assert!(st.is_empty());
    }

    #[test]
    fn delete_touch_flip() {
        let mut st = ChunkStore::new();
        st.put(0, rec(b"k", 0, 5, b"abc"), 0).unwrap();
        st.put(0, rec(b"k", 1, 5, b"def"), 0).unwrap();
        st.touch(0, b"k", 5, 1234);
        let (h, _) = record::parse(st.get(0, 1, b"k", 5).unwrap()).unwrap();
        assert_eq!(h.exptime, 1234);
        assert!(st.flip_bit(0, 1, b"k", 3));
        assert!(record::parse(st.get(0, 1, b"k", 5).unwrap()).is_err());
        assert!(!st.flip_bit(0, 1, b"k", 24));
        st.delete(0, b"k", 4);
        assert_eq!(st.len(), 2);
        st.delete(0, b"k", 6);
        assert!(st.is_empty());
        assert_eq!(st.bytes(), 0);
    }

    #[test]
    fn a_delete_or_touch_reaches_only_its_keys_slots_at_every_position_again_after_a_delete() {
        let mut st = ChunkStore::new();
        for k in 0..50u8 {
            for p in [0, 3] {
                st.put(1, rec(&[b'k', k], p, 5, b"abc"), 0).unwrap();
            }
        }
        // The same key in another stripe is another key.
        st.put(2, rec(b"k\x07", 0, 5, b"abc"), 0).unwrap();
        st.delete(1, b"k\x07", 6);
        assert_eq!(st.len(), 99);
        assert!(st.get(1, 0, b"k\x07", 5).is_none() && st.get(1, 3, b"k\x07", 5).is_none());
        assert!(st.get(2, 0, b"k\x07", 5).is_some() && st.get(1, 3, b"k\x08", 5).is_some());
        // Stored again after the delete, at another position too: touched and deleted again.
        st.put(1, rec(b"k\x07", 3, 7, b"xy"), 0).unwrap();
        st.put(1, rec(b"k\x07", 5, 7, b"xy"), 0).unwrap();
        st.touch(1, b"k\x07", 7, 99);
        for p in [3, 5] {
            let (h, _) = record::parse(st.get(1, p, b"k\x07", 7).unwrap()).unwrap();
            assert_eq!(h.exptime, 99);
        }
        let (h, _) = record::parse(st.get(1, 3, b"k\x08", 5).unwrap()).unwrap();
        assert_eq!(h.exptime, 0);
        st.delete(1, b"k\x07", 8);
        assert_eq!(st.len(), 99);
        for k in 0..50u8 {
            st.delete(1, &[b'k', k], 9);
        }
        st.delete(2, b"k\x07", 9);
        assert!(st.is_empty());
        assert_eq!(st.bytes(), 0);
    }

    /// A location record of the whole layout: `key` v`version` at `at` of its home.
    fn location(key: &[u8], pos: u8, version: u64, at: WholeAt) -> Vec<u8> {
        record::encode(
            &Header {
                kind: Kind::Whole,
                chunk_index: pos,
                written_around: false,
                key: key.to_vec(),
                version,
                value_bytes: 10,
                flags: 0,
                exptime: 0,
                trail: [0; record::TRAIL],
            },
            &at.to_bytes(),
        )
    }

    /// A listing copied under the lock answers what the listing made under it did: the
    /// parsed header of every record (current and previous, at every position) encoded with
    /// no data, then the whole location records, then the tombstones; records of other
    /// stripes left out.
    #[test]
    fn a_copied_listing_equals_the_listing_made_in_the_lock() {
        let mut st = ChunkStore::with_page_bytes(4096);
        let at = |offset: u32| WholeAt {
            page: 0,
            offset,
            len: 8,
            slot: 8,
        };
        for i in 0..40u8 {
            let key = [b'k', i];
            st.put(3, rec(&key, i % 3, 10, &[i; 5]), 0).unwrap();
            if i % 4 == 0 {
                // Replaced while the watermark stays: the previous record is listed too.
                st.put(3, rec(&key, i % 3, 20, &[i; 9]), 0).unwrap();
            }
            st.put(3, location(&key, 4 + i % 2, 10, at(8 * i as u32)), 0)
                .unwrap();
            st.put(5, rec(&key, 0, 10, b"other"), 0).unwrap();
        }
        let whole = Header {
            kind: Kind::Whole,
            chunk_index: 0,
            written_around: true,
            key: b"home".to_vec(),
            version: 30,
            value_bytes: 3,
            flags: 7,
            exptime: 99,
            trail: [1, 2, 3],
        };
        st.put_whole(3, whole, b"abc", 0).unwrap();
        st.delete(3, b"gone", 40);
        let mut want: Vec<Vec<u8>> = st.list(3).iter().map(|h| record::encode(h, &[])).collect();
        assert_eq!(want.len(), 40 + 10 + 40 + 1);
        want.extend(st.location_records(3));
        let (records, tombstones) = st.listing(3).into_parts();
        assert_eq!(records, want);
        assert_eq!(tombstones, st.tombstones(3));
        assert_eq!(tombstones.len(), 1);
    }

    #[test]
    fn a_page_realigned_back_gives_up_the_location_records_of_the_deltas_it_undoes() {
        let mut st = ChunkStore::with_page_bytes(64);
        st.set_code(codes::Kernel::best(), "rs:2,2".parse().expect("code"));
        let at = |offset: u32| WholeAt {
            page: 0,
            offset,
            len: 8,
            slot: 8,
        };
        // Parity position 2 of page stripe 0, data position 0 (the home is stripe 0's node):
        // "a" written at 0 then moved to 16 (the torn write), "b" at 32, "c" first written at
        // 48 by the torn write too.
        let key = (0, 2, 0);
        let delta = |st: &mut ChunkStore, k: &[u8], v: u64, seq: u64, off: u32| {
            let delta: std::sync::Arc<[u8]> = vec![seq as u8; 8].into();
            st.apply_delta(
                0,
                0,
                location(k, 2, v, at(off)),
                key,
                0,
                (seq, 0),
                off,
                &delta,
            )
            .expect("applied");
        };
        delta(&mut st, b"a", 10, 1, 0);
        delta(&mut st, b"b", 11, 2, 32);
        delta(&mut st, b"a", 12, 3, 16);
        delta(&mut st, b"c", 13, 4, 48);
        let version = |st: &ChunkStore, k: &[u8]| {
            st.get_latest(0, 2, k)
                .map(|r| record::parse_header(r).expect("a record").0.version)
        };
        assert_eq!(version(&st, b"a"), Some(12));
        let (bytes_before, (_, page_before)) = (st.bytes(), st.range(key, 0, 64).expect("a range"));
        // Moved back from 4 to 2: the correction covers bytes 16..24 and 48..56.
        let mut fix = vec![0u8; 40];
        fix[..8].fill(3);
        fix[32..].fill(4);
        assert!(!st
            .realign_parity(0, key, 0, 3, 2, 16, &fix)
            .expect("checked"));
        assert!(st
            .realign_parity(0, key, 0, 4, 2, 16, &fix)
            .expect("realigned"));
        assert_eq!(
            version(&st, b"a"),
            Some(10),
            "back to the record it replaced"
        );
        assert_eq!(version(&st, b"b"), Some(11), "untouched");
        assert_eq!(version(&st, b"c"), None, "no record before it");
        assert!(st.bytes() < bytes_before);
        let (seqs, page) = st.range(key, 0, 64).expect("a range");
        assert_eq!(seqs[0], 2);
        for (i, (b, a)) in page.iter().zip(&page_before).enumerate() {
            let fixed = (16..56).contains(&i) && fix[i - 16] != 0;
            assert_eq!(*b, if fixed { a ^ fix[i - 16] } else { *a }, "byte {i}");
        }
        // Moved forward, no record changes; a data position out of range is an error.
        assert!(st
            .realign_parity(0, key, 0, 2, 4, 16, &fix)
            .expect("realigned"));
        assert_eq!(version(&st, b"a"), Some(10));
        assert!(st.realign_parity(0, key, 2, 0, 1, 0, &[]).is_err());
        assert!(st.realign_parity(0, (0, 1, 0), 0, 0, 1, 0, &[]).is_err());
    }

    #[test]
    fn a_parity_position_keeps_deltas_until_the_home_says_every_position_applied_them() {
        let mut st = ChunkStore::with_page_bytes(64);
        st.set_code(codes::Kernel::best(), "rs:2,2".parse().expect("code"));
        let at = WholeAt {
            page: 0,
            offset: 0,
            len: 8,
            slot: 8,
        };
        let key = (0, 2, 0);
        let delta = |st: &mut ChunkStore, seq: u64, committed: u64| {
            let bytes: std::sync::Arc<[u8]> = vec![seq as u8; 8].into();
            let rec = location(b"a", 2, 10 + seq, at);
            st.apply_delta(0, 0, rec, key, 0, (seq, committed), 0, &bytes)
                .expect("applied");
        };
        delta(&mut st, 1, 0);
        delta(&mut st, 2, 0);
        delta(&mut st, 3, 1);
        let seqs = |st: &ChunkStore, above| {
            st.kept_deltas(key, 0, above)
                .iter()
                .map(|d| d.seq)
                .collect::<Vec<_>>()
        };
        assert_eq!(seqs(&st, 0), vec![2, 3], "1 is committed");
        assert_eq!(seqs(&st, 2), vec![3]);
        let kept = &st.kept_deltas(key, 0, 2)[0];
        assert_eq!(
            (kept.offset, &kept.delta[..], kept.stripe),
            (0, &[3u8; 8][..], 0)
        );
        let (h, _) = record::parse(&kept.record).expect("its location record");
        assert_eq!(h.version, 13);
        assert_eq!(st.kept().0, 2);
        // A delta sent again is kept once; a later committed drops those up to it.
        delta(&mut st, 3, 1);
        assert_eq!(st.kept().0, 2);
        delta(&mut st, 4, 3);
        assert_eq!(seqs(&st, 0), vec![4]);
        // Released by the node's rule; then nothing is kept, and no bytes counted.
        st.release_kept(|t, d, _| t == 0 && d == 0);
        assert_eq!(st.kept(), (0, 0));
        assert!(st.kept_deltas(key, 0, 0).is_empty());
    }

    /// The table of previous records against a plain model (a list per stripe, position and
    /// key, oldest first): 20,000 random pushes, trims, pops, takes and reads over keys that
    /// meet in few stripes and positions, each checked against the model, with the bytes a
    /// trim frees and the table's size.
    /// The kept deltas of a page and data position, under random arrivals (in order, again,
    /// late), commits and releases, against a map by seq.
    #[test]
    fn kept_deltas_equal_their_model_under_random_changes() {
        use rand::{Rng, SeedableRng};
        let mut rng = rand::rngs::SmallRng::seed_from_u64(564);
        let delta = |seq: u64| KeptDelta {
            seq,
            offset: 0,
            delta: std::sync::Arc::from(vec![seq as u8; (seq % 7) as usize + 1]),
            stripe: 0,
            record: vec![1; 3],
        };
        let mut kept = KeptSeqs::default();
        let mut model: std::collections::BTreeMap<u64, KeptDelta> = Default::default();
        let (mut next, mut floor) = (1u64, 0u64);
        let t = Instant::now();
        for step in 0..20_000 {
            match rng.gen_range(0..10) {
                0..=5 => {
                    // The next, one skipped ahead (leaving a gap), or one late (filling a gap,
                    // or sent again).
                    let seq = match rng.gen_range(0..4) {
                        0 => rng.gen_range(floor + 1..next + 1),
                        1 => next + rng.gen_range(1..4),
                        _ => next,
                    };
                    next = next.max(seq + 1);
                    let fresh = !model.contains_key(&seq);
                    assert_eq!(kept.insert(seq, delta(seq), t), fresh, "step {step}");
                    model.entry(seq).or_insert_with(|| delta(seq));
                }
                6..=8 => {
                    floor = rng.gen_range(floor..next);
                    let gone: u64 = model.range(..=floor).map(|(_, d)| d.bytes()).sum();
                    model.retain(|&s, _| s > floor);
                    assert_eq!(kept.commit(floor), gone, "step {step}");
                }
                _ => {
                    let above = rng.gen_range(0..next + 1);
                    let want: Vec<&KeptDelta> = model.range(above + 1..).map(|(_, d)| d).collect();
                    assert_eq!(kept.above(above).collect::<Vec<_>>(), want, "step {step}");
                }
            }
            assert_eq!(kept.len(), model.len());
            assert_eq!(kept.bytes(), model.values().map(|d| d.bytes()).sum::<u64>());
        }
    }

    #[test]
    fn previous_records_equal_their_model_under_random_changes() {
        use rand::{Rng, SeedableRng};
        type At = (u32, u8, Vec<u8>);
        let mut rng = rand::rngs::SmallRng::seed_from_u64(856);
        let mut slab = Slab::new(PAGE_BYTES);
        let mut prevs = Previous::default();
        // (version, replaced_by, bytes), oldest first.
        let mut model: HashMap<At, Vec<(u64, u64, usize)>> = HashMap::new();
        let seen = |v: &[Prev]| -> Vec<(u64, u64, usize)> {
            v.iter()
                .map(|p| (p.version, p.replaced_by, p.held.len()))
                .collect()
        };
        let mut version = 0;
        let (mut trims, mut freeing_trims) = (0, 0);
        for step in 0..20_000 {
            let (s, p) = (rng.gen_range(0..3u32), rng.gen_range(0..3u8));
            let key = format!("k{}", rng.gen_range(0..12)).into_bytes();
            let at: At = (s, p, key.clone());
            let want = model.entry(at.clone()).or_default();
            match rng.gen_range(0..10) {
                0..=4 => {
                    version += 1;
                    let (replaced_by, len) = (version + rng.gen_range(0..8), rng.gen_range(1..9));
                    let held = Held::Heap(vec![7; len].into_boxed_slice());
                    prevs.push(
                        s,
                        p,
                        &key,
                        Prev {
                            version,
                            replaced_by,
                            held,
                        },
                    );
                    want.push((version, replaced_by, len));
                }
                5..=6 => {
                    let watermark = version.saturating_sub(rng.gen_range(0..12));
                    let over = want.len().saturating_sub(PREVIOUS_MAX);
                    let mut expect = 0;
                    let mut i = 0;
                    want.retain(|&(_, by, len)| {
                        let go = i < over || by < watermark;
                        i += 1;
                        if go {
                            expect += len as u64;
                        }
                        !go
                    });
                    let freed = prevs.trim(&mut slab, (s, p, &key), watermark);
                    assert_eq!(freed, expect, "step {step}: bytes a trim freed");
                    trims += 1;
                    freeing_trims += usize::from(freed > 0);
                }
                7 => assert_eq!(seen(prevs.pop(s, p, &key).as_slice()), {
                    want.pop().into_iter().collect::<Vec<_>>()
                }),
                8 => assert_eq!(seen(&prevs.take(s, p, &key)), std::mem::take(want)),
                _ => {}
            }
            assert_eq!(seen(prevs.of(s, p, &key)), *want, "step {step}");
            model.retain(|_, v| !v.is_empty());
            assert_eq!(prevs.table.len(), model.len(), "step {step}: keys held");
        }
        for ((s, p, key), want) in &model {
            assert_eq!(seen(prevs.of(*s, *p, key)), *want);
        }
        // The random walk reached the cases it is for.
        assert!(
            trims > 3_000 && freeing_trims > 1_000,
            "{trims} {freeing_trims}"
        );
        assert!(model.values().any(|v| v.len() > 1));
    }
}
