//! The whole layout's memory on a member: the slab pages its home values live in, and the
//! parity pages it keeps for other nodes' pages.
//!
//! **Pages and their stripes.** A node is the home of the whole-layout values of the stripe it
//! is the designated agent of (node `s`, stripe `s`), and keeps them in slab pages of
//! [`Slab::page_bytes`] each, carved into slots of one size class per page (memcached's
//! model: classes growing by a factor). Page `j` of node `h` is data position
//! `d = j mod k` of **page stripe** `t = (h − d) mod N`, as its page `q = j div k`: the k data
//! positions of page stripe `t` are nodes `t, t+1, …, t+k−1`, each giving its page
//! `q·k + d`, and the parity positions `k..n` of stripe `t` (nodes `t+k, …`) keep parity page
//! `q` of that stripe ([`page_of`], [`home_page`]). A node's pages thus rotate over the k
//! stripes it is a data position of, and every parity position of a page's stripe is a member
//! of the home's own stripe (position `i − d` of stripe `h` for parity position `i`).
//!
//! **Deltas.** Writing a record into a slot changes the page by `old ⊕ new` over the record's
//! bytes; each parity position `i` adds `g[i][d] · (old ⊕ new)` to its page (the code is
//! linear), so a parity page always equals the code's parity of the k data pages, whatever the
//! slots hold (a freed slot needs no change: the next record written there sends its delta).
//!
//! **A consistent cut.** Each data page counts the deltas it made (`seq`); each parity page
//! counts, per data position, the deltas it applied — exactly once each, in any order (a
//! delta carries its seq; one applied twice is ignored). A repair may combine a data page with
//! a parity page only when the parity page has applied exactly the data page's deltas; any
//! other combination mixes a delta in with its other half missing and yields wrong bytes.
//! [`consistent`] is the rule; the degraded read retries while deltas are in flight.

use std::collections::BTreeSet;

use hashbrown::HashMap;

use crate::record::WholeAt;

/// Bytes of a slab page by default (memcached's are 1 MiB: smaller pages leave less of the last
/// page of each page stripe, and of its parity, unused).
pub const PAGE_BYTES: usize = 256 << 10;
/// The smallest slot.
pub const MIN_SLOT_BYTES: usize = 96;
/// How much each size class grows over the one below it by default (`--slab-growth-factor`,
/// memcached's `-f`, 1.25 there; smaller here, since a slot's slack is paid again by the parity
/// pages. Measured with 20,000 values of 8 KiB: 1.08 left 5 % of the slab unused, 1.04 3.8 %,
/// 1.02 2 %; but every class in use keeps a partly filled page, so with values of many sizes
/// more classes cost more pages).
pub const GROWTH: f64 = 1.04;

/// The page stripe, data position and page-in-stripe of page `j` of node `home` (`k` data
/// positions, `nodes` nodes).
pub fn page_of(home: usize, j: u32, k: usize, nodes: usize) -> (usize, usize, u32) {
    let d = j as usize % k;
    let t = (home + nodes - d % nodes) % nodes;
    (t, d, j / k as u32)
}

/// The page of a data position's node that is page `q` of its page stripe.
pub fn home_page(d: usize, q: u32, k: usize) -> u32 {
    q * k as u32 + d as u32
}

/// Slots of at least a page's 1/`PAGE_FRACTIONS` are page fractions: one class per page/n.
pub const PAGE_FRACTIONS: usize = 64;

/// The slot sizes of a slab with pages of `page_bytes`: from [`MIN_SLOT_BYTES`] growing by
/// `growth` (rounded up to 8 bytes), then, from a page's 1/[`PAGE_FRACTIONS`] on, every page
/// fraction `page_bytes / n` (bytes, not rounded: a slot needs no alignment): a page holds `n` slots of a large class, so a
/// class between two fractions would hold no more per page than the fraction above it, and a
/// record of `s` bytes lands in a class of `⌊page / s⌋` slots per page, as many as fit. (With
/// growth alone, large classes fall between fractions: records of 8,283 bytes, 8 KiB values,
/// went into slots of 8,584, 30 a page; now 8,456 (256 KiB / 31), 31 a page, 3 % less slab and parity.)
pub fn classes(page_bytes: usize, growth: f64) -> Vec<usize> {
    let fractions_from = page_bytes / PAGE_FRACTIONS;
    let mut out = vec![MIN_SLOT_BYTES.min(page_bytes)];
    loop {
        let last = *out.last().expect("one class");
        let next = ((last as f64 * growth) as usize)
            .max(last + 8)
            .next_multiple_of(8);
        if next >= fractions_from || next >= page_bytes {
            break;
        }
        out.push(next);
    }
    for n in (1..=PAGE_FRACTIONS).rev() {
        let size = page_bytes / n;
        if size > *out.last().expect("one class") {
            out.push(size);
        }
    }
    out
}

#[derive(Debug)]
struct Page {
    /// The page's size class; `None` for a page restored after a restart that holds no live
    /// slot yet (its bytes are known, its slots are not: any class may carve it), and for a
    /// page skipped over.
    class: Option<usize>,
    /// Empty for a page that holds no memory yet: skipped over to reach a page of another
    /// residue, or restored as zeros. It reads as zeros and gets its bytes when carved.
    bytes: Box<[u8]>,
    /// Deltas made on this page.
    seq: u64,
    /// The deltas every parity position applied (each write's, once all its deltas were
    /// acknowledged): a delta carries the count below which all are, so that parity positions
    /// keep a delta only while it may be missing elsewhere.
    done: Applied,
}

impl Page {
    fn skipped() -> Page {
        Page {
            class: None,
            bytes: Box::default(),
            seq: 0,
            done: Applied::default(),
        }
    }
}

/// What writing a record into a slot did: where it lies, the page's seq after it, and the
/// delta (old ⊕ new bytes of the record's range) every parity position of the page applies.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SlotWrite {
    pub at: WholeAt,
    pub seq: u64,
    /// Every delta of the page up to this seq was applied by every parity position (as far as
    /// the home knows when it wrote): parity positions drop the deltas they keep up to it.
    pub committed: u64,
    pub delta: std::sync::Arc<[u8]>,
}

/// The slab of a home: pages carved into slots by size class.
#[derive(Debug)]
pub struct Slab {
    page_bytes: usize,
    /// k: page `j` is data position `j mod k` of its page stripe.
    residues: usize,
    classes: Vec<usize>,
    pages: Vec<Page>,
    /// Free slots per class and page residue (`j mod k`): (page, offset).
    free: Vec<Vec<Vec<(u32, u32)>>>,
    /// Bytes of the slots in use.
    pub used_bytes: u64,
    /// Pages that hold memory (carved, or restored with bytes).
    allocated: usize,
    /// The residue this slab's first page takes ([`Slab::set_start`]); the n-th page it
    /// allocates for new values takes residue `(start + n) mod k`.
    start: usize,
    /// Pages whose deltas applied everywhere (`done`) moved since their parity positions were
    /// last told ([`Slab::take_announced`]).
    announce: BTreeSet<u32>,
}

impl Slab {
    pub fn new(page_bytes: usize) -> Slab {
        Slab::with_growth(page_bytes, GROWTH)
    }

    /// A slab whose size classes grow by `growth` (more than 1).
    pub fn with_growth(page_bytes: usize, growth: f64) -> Slab {
        let classes = classes(page_bytes, growth);
        Slab {
            page_bytes,
            residues: 1,
            free: vec![vec![Vec::new()]; classes.len()],
            classes,
            pages: Vec::new(),
            used_bytes: 0,
            allocated: 0,
            start: 0,
            announce: BTreeSet::new(),
        }
    }

    pub fn page_bytes(&self) -> usize {
        self.page_bytes
    }

    pub fn residues(&self) -> usize {
        self.residues
    }

    /// Sets k, the residues pages rotate over (before any page is allocated).
    pub fn set_residues(&mut self, k: usize) {
        assert!(self.pages.is_empty(), "residues set on a slab with pages");
        self.residues = k.max(1);
        self.free = vec![vec![Vec::new(); self.residues]; self.classes.len()];
    }

    /// Makes the n-th page this slab allocates for new values take residue `(start + n) mod
    /// k` (before any page is allocated). Nodes that start at different residues (their id mod
    /// k) put their last, partly filled pages in the same few page stripes, where the parity
    /// positions then keep one page more, instead of in every page stripe.
    pub fn set_start(&mut self, start: usize) {
        assert!(self.pages.is_empty(), "the start set on a slab with pages");
        self.start = start % self.residues;
    }

    /// Pages that hold memory.
    pub fn pages(&self) -> usize {
        self.allocated
    }

    /// Whether page `j` holds memory (a page skipped over, or beyond the last, does not).
    pub fn holds(&self, j: u32) -> bool {
        self.pages
            .get(j as usize)
            .is_some_and(|p| !p.bytes.is_empty())
    }

    fn class_of(&self, len: usize) -> Option<usize> {
        let c = self.classes.partition_point(|&size| size < len);
        (c < self.classes.len()).then_some(c)
    }

    /// Takes a slot for a record of `len` bytes, in a page of residue `want` (`j mod k`: the
    /// page's data position) when given — a value written again keeps its data position, so
    /// the parity positions holding its location stay the same — and in any page otherwise (a
    /// new page of its class when none is free). `None` when the record is larger than a page.
    pub fn alloc(&mut self, len: usize, want: Option<usize>) -> Option<WholeAt> {
        let class = self.class_of(len)?;
        let r = match want {
            Some(r) => r % self.residues,
            None => (0..self.residues)
                .find(|&r| !self.free[class][r].is_empty())
                .unwrap_or((self.start + self.allocated) % self.residues),
        };
        while self.free[class][r].is_empty() {
            // A page of the residue wanted that no class has taken yet (restored, or skipped
            // over), else a new page of that residue, the pages of other residues on the way
            // skipped (no memory until carved).
            let page = match (0..self.pages.len())
                .find(|&j| j % self.residues == r && self.pages[j].class.is_none())
            {
                Some(j) => j,
                None => {
                    while self.pages.len() % self.residues != r {
                        self.pages.push(Page::skipped());
                    }
                    self.pages.push(Page::skipped());
                    self.pages.len() - 1
                }
            };
            self.carve(page, class);
        }
        let (page, offset) = self.free[class][r].pop().expect("a free slot");
        self.used_bytes += self.classes[class] as u64;
        Some(WholeAt {
            page,
            offset,
            len: len as u32,
            slot: self.classes[class] as u32,
        })
    }

    /// Gives page `page` (classless) to `class`: its slots join the class's free list.
    fn carve(&mut self, page: usize, class: usize) {
        let size = self.classes[class];
        let slots = self.page_bytes / size;
        if self.pages[page].bytes.is_empty() {
            self.pages[page].bytes = vec![0; self.page_bytes].into_boxed_slice();
            self.allocated += 1;
        }
        self.pages[page].class = Some(class);
        // Popped from the end: the page's first slot first.
        self.free[class][page % self.residues]
            .extend((0..slots).rev().map(|i| (page as u32, (i * size) as u32)));
    }

    /// Puts back page `j` as rebuilt after a restart (its bytes and seq), classless until a
    /// live slot in it is claimed ([`Slab::claim`]) or a class carves it; pages below it that
    /// are missing become zero pages.
    pub fn install(&mut self, j: u32, bytes: &[u8], seq: u64) {
        assert_eq!(bytes.len(), self.page_bytes, "a whole page");
        while self.pages.len() <= j as usize {
            self.pages.push(Page::skipped());
        }
        let page = &mut self.pages[j as usize];
        assert!(page.class.is_none(), "a page installed over a page in use");
        page.seq = seq;
        page.done = Applied {
            floor: seq,
            above: BTreeSet::new(),
        };
        if page.bytes.is_empty() {
            // A page never written (skipped over before the restart) stays without memory.
            if seq == 0 && bytes.iter().all(|&b| b == 0) {
                return;
            }
            page.bytes = vec![0; self.page_bytes].into_boxed_slice();
            self.allocated += 1;
        }
        page.bytes.copy_from_slice(bytes);
    }

    /// Takes the slot `at` of a restored page as in use (a live record lies there): the page
    /// gets the slot's class if it had none. False when the slot does not fit the page (another
    /// class, or out of range).
    pub fn claim(&mut self, at: WholeAt) -> bool {
        let Some(class) = self.classes.iter().position(|&c| c == at.slot as usize) else {
            return false;
        };
        let j = at.page as usize;
        if j >= self.pages.len() || !(at.offset as usize).is_multiple_of(at.slot as usize) {
            return false;
        }
        match self.pages[j].class {
            None => self.carve(j, class),
            Some(c) if c == class => {}
            Some(_) => return false,
        }
        let list = &mut self.free[class][j % self.residues];
        let Some(i) = list
            .iter()
            .position(|&(p, o)| p == at.page && o == at.offset)
        else {
            return false;
        };
        list.swap_remove(i);
        self.used_bytes += at.slot as u64;
        true
    }

    /// Pages (`j mod k` = `d`) this slab has of data position `d`.
    pub fn pages_of(&self, d: usize) -> u32 {
        if self.pages.len() > d {
            (self.pages.len() - d).div_ceil(self.residues) as u32
        } else {
            0
        }
    }

    /// Gives a slot back. Its bytes stay as they are (parity covers them).
    pub fn free(&mut self, at: WholeAt) {
        let class = self.pages[at.page as usize]
            .class
            .expect("a slot in use is in a carved page");
        self.used_bytes -= self.classes[class] as u64;
        self.free[class][at.page as usize % self.residues].push((at.page, at.offset));
    }

    /// Writes a record into its slot (`fill` writes the slot's `at.len` bytes in place): the
    /// delta for the parity positions and the page's seq.
    pub fn write(&mut self, at: WholeAt, fill: impl FnOnce(&mut [u8])) -> SlotWrite {
        let page = &mut self.pages[at.page as usize];
        let range = at.offset as usize..at.offset as usize + at.len as usize;
        // Made once, shared by the deltas to every parity position: the old bytes copied, then
        // the new ones added (a loop the compiler vectorizes) once written in place.
        let mut delta: std::sync::Arc<[u8]> = std::sync::Arc::from(&page.bytes[range.clone()]);
        let slot = &mut page.bytes[range];
        fill(slot);
        let fresh = std::sync::Arc::get_mut(&mut delta).expect("not shared yet");
        for (d, &b) in fresh.iter_mut().zip(slot.iter()) {
            *d ^= b;
        }
        page.seq += 1;
        SlotWrite {
            at,
            seq: page.seq,
            committed: page.done.floor,
            delta,
        }
    }

    /// Every parity position of page `page` applied the delta `seq` made.
    pub fn mark_done(&mut self, page: u32, seq: u64) {
        if let Some(p) = self.pages.get_mut(page as usize) {
            let floor = p.done.floor;
            p.done.note(seq);
            if p.done.floor > floor {
                self.announce.insert(page);
            }
        }
    }

    /// The pages whose count of deltas applied everywhere moved since the last call, with that
    /// count: their parity positions may drop the deltas they keep up to it.
    pub fn take_announced(&mut self) -> Vec<(u32, u64)> {
        let pages = std::mem::take(&mut self.announce);
        pages
            .into_iter()
            .filter_map(|j| self.pages.get(j as usize).map(|p| (j, p.done.floor)))
            .collect()
    }

    /// The bytes a slot holds.
    pub fn bytes(&self, at: WholeAt) -> &[u8] {
        let start = at.offset as usize;
        &self.pages[at.page as usize].bytes[start..start + at.len as usize]
    }

    pub fn bytes_mut(&mut self, at: WholeAt) -> &mut [u8] {
        let start = at.offset as usize;
        &mut self.pages[at.page as usize].bytes[start..start + at.len as usize]
    }

    /// A range of page `page` with the page's seq (a page never allocated is zeros, seq 0:
    /// so are the parity pages that never heard of it). `None`: past the page's end.
    pub fn range(&self, page: u32, offset: u32, len: u32) -> Option<(u64, Vec<u8>)> {
        let (start, end) = (offset as usize, offset as usize + len as usize);
        if end > self.page_bytes {
            return None;
        }
        Some(match self.pages.get(page as usize) {
            Some(p) if !p.bytes.is_empty() => (p.seq, p.bytes[start..end].to_vec()),
            Some(p) => (p.seq, vec![0; len as usize]),
            None => (0, vec![0; len as usize]),
        })
    }
}

/// Per data position of a parity page: the deltas applied, as the count applied without a gap
/// and the seqs applied above it.
#[derive(Clone, Debug, Default)]
struct Applied {
    floor: u64,
    above: BTreeSet<u64>,
}

impl Applied {
    /// Whether `seq` is new (then it is noted).
    fn note(&mut self, seq: u64) -> bool {
        // The usual case, the next seq with none above: no set touched.
        if seq == self.floor + 1 && self.above.is_empty() {
            self.floor = seq;
            return true;
        }
        if seq <= self.floor || !self.above.insert(seq) {
            return false;
        }
        while self.above.remove(&(self.floor + 1)) {
            self.floor += 1;
        }
        true
    }

    /// The seq of the data page this parity page agrees with, `GAPPED` while deltas in
    /// between are missing.
    fn agreed(&self) -> u64 {
        if self.above.is_empty() {
            self.floor
        } else {
            GAPPED
        }
    }
}

/// A parity page's seq for a data position whose deltas arrived with a gap: it agrees with no
/// data page (a repair waits for the missing delta).
pub const GAPPED: u64 = u64::MAX;

#[derive(Debug)]
struct ParityPage {
    bytes: Box<[u8]>,
    applied: Vec<Applied>,
    /// Since when a delta of some data position has been missing (a later one applied).
    gapped_since: Option<std::time::Instant>,
}

/// Parity pages a member keeps: by (page stripe, parity position, page).
#[derive(Debug, Default)]
pub struct ParityPages {
    pages: HashMap<(u32, u8, u32), ParityPage>,
}

impl ParityPages {
    /// Pages held.
    pub fn len(&self) -> usize {
        self.pages.len()
    }

    pub fn is_empty(&self) -> bool {
        self.pages.is_empty()
    }

    /// Adds `coef · delta` at `offset` of the page, once per (data position, seq): false when
    /// this delta was applied already (nothing changes).
    #[allow(clippy::too_many_arguments)]
    pub fn apply(
        &mut self,
        kernel: codes::Kernel,
        (t, position, page): (u32, u8, u32),
        k: usize,
        page_bytes: usize,
        d: usize,
        seq: u64,
        offset: u32,
        coef: u8,
        delta: &[u8],
    ) -> Result<bool, String> {
        let start = offset as usize;
        if d >= k || start + delta.len() > page_bytes {
            return Err(format!(
                "delta out of bounds: data position {d} of {k}, bytes {start}..{} of a \
                 {page_bytes}-byte page",
                start + delta.len()
            ));
        }
        let p = self
            .pages
            .entry((t, position, page))
            .or_insert_with(|| ParityPage {
                bytes: vec![0; page_bytes].into_boxed_slice(),
                applied: vec![Applied::default(); k],
                gapped_since: None,
            });
        if !p.applied[d].note(seq) {
            return Ok(false);
        }
        kernel.mul_add(coef, delta, &mut p.bytes[start..start + delta.len()]);
        let gapped = p.applied.iter().any(|a| !a.above.is_empty());
        match (gapped, p.gapped_since) {
            (true, None) => p.gapped_since = Some(std::time::Instant::now()),
            (false, Some(_)) => p.gapped_since = None,
            _ => {}
        }
        Ok(true)
    }

    /// Moves a page's count for data position `d` from `from` to `to` and adds `correction`
    /// (parity bytes, already scaled) at `offset`: a home rebuilt after a restart makes a page
    /// that its last deltas tore agree with its rebuilt page (`Node::realign_torn`). False,
    /// and nothing changed, unless the page's count for `d` is exactly `from` with nothing
    /// applied above it (a page never written counts 0 everywhere).
    #[allow(clippy::too_many_arguments)]
    pub fn realign(
        &mut self,
        key: (u32, u8, u32),
        k: usize,
        page_bytes: usize,
        d: usize,
        (from, to): (u64, u64),
        offset: u32,
        correction: &[u8],
    ) -> Result<bool, String> {
        let start = offset as usize;
        if d >= k || start + correction.len() > page_bytes {
            return Err(format!(
                "a realignment out of bounds: data position {d} of {k}, bytes {start}..{} of a \
                 {page_bytes}-byte page",
                start + correction.len()
            ));
        }
        if !self.pages.contains_key(&key) && from != 0 {
            return Ok(false);
        }
        let p = self.pages.entry(key).or_insert_with(|| ParityPage {
            bytes: vec![0; page_bytes].into_boxed_slice(),
            applied: vec![Applied::default(); k],
            gapped_since: None,
        });
        let a = &mut p.applied[d];
        if a.floor != from || !a.above.is_empty() {
            return Ok(false);
        }
        a.floor = to;
        for (b, c) in p.bytes[start..start + correction.len()]
            .iter_mut()
            .zip(correction)
        {
            *b ^= c;
        }
        Ok(true)
    }

    /// Pages with a delta missing for at least `for_at_least` (its home may have died before
    /// it could send it again): they agree with no data page until rebuilt.
    pub fn gapped(&self, for_at_least: std::time::Duration) -> Vec<(u32, u8, u32)> {
        let mut out: Vec<(u32, u8, u32)> = self
            .pages
            .iter()
            .filter(|(_, p)| p.gapped_since.is_some_and(|t| t.elapsed() >= for_at_least))
            .map(|(&key, _)| key)
            .collect();
        out.sort_unstable();
        out
    }

    /// Per data position, the highest delta seq a page has applied (0: none, or no page).
    pub fn highest_applied(&self, key: (u32, u8, u32), k: usize) -> Vec<u64> {
        match self.pages.get(&key) {
            Some(p) => p
                .applied
                .iter()
                .map(|a| a.above.last().copied().unwrap_or(a.floor))
                .collect(),
            None => vec![0; k],
        }
    }

    /// Puts back a parity page rebuilt after a restart, agreeing with data pages at `seqs`.
    pub fn install(&mut self, key: (u32, u8, u32), bytes: &[u8], seqs: &[u64]) {
        // The parity of data pages never written (a home skipped them to reach a residue) is
        // what no page reads as: zeros, every seq 0. It takes no memory.
        if seqs.iter().all(|&s| s == 0) && bytes.iter().all(|&b| b == 0) {
            self.pages.remove(&key);
            return;
        }
        self.pages.insert(
            key,
            ParityPage {
                bytes: bytes.to_vec().into_boxed_slice(),
                applied: seqs
                    .iter()
                    .map(|&floor| Applied {
                        floor,
                        above: BTreeSet::new(),
                    })
                    .collect(),
                gapped_since: None,
            },
        );
    }

    /// Pages held at (page stripe, parity position): one more than the highest held.
    pub fn pages_of(&self, t: u32, position: u8) -> u32 {
        self.pages
            .keys()
            .filter(|(pt, pp, _)| *pt == t && *pp == position)
            .map(|(_, _, q)| q + 1)
            .max()
            .unwrap_or(0)
    }

    /// A range of a parity page with, per data position, the seq of the data page it agrees
    /// with ([`GAPPED`] while a delta is missing). A page never written is zeros, all seqs 0.
    pub fn range(
        &self,
        key: (u32, u8, u32),
        k: usize,
        page_bytes: usize,
        offset: u32,
        len: u32,
    ) -> Option<(Vec<u64>, Vec<u8>)> {
        let (start, end) = (offset as usize, offset as usize + len as usize);
        if end > page_bytes {
            return None;
        }
        Some(match self.pages.get(&key) {
            Some(p) => (
                p.applied.iter().map(Applied::agreed).collect(),
                p.bytes[start..end].to_vec(),
            ),
            None => (vec![0; k], vec![0; len as usize]),
        })
    }
}

/// Switches the rule of a consistent cut off (tests that show it matters).
#[cfg(test)]
pub static RULE_OFF: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// One piece a repair read of a page stripe's range: its position in the page stripe and the
/// seqs it came with (one for a data page, k for a parity page).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Piece {
    pub position: usize,
    pub seqs: Vec<u64>,
}

/// The pieces a repair may combine (a consistent cut): a group of parity pieces that have
/// applied the same deltas (no gap), with the data pieces whose pages are at exactly the seqs
/// that group agrees with. A data page read ahead of the group (its delta still in flight to
/// the parity pages) is left out and decoded like a lost one, at the content the group holds
/// for it. Of the groups, the one with the most pieces wins (more data pieces on a tie; with no
/// parity piece, the data pieces alone). Returns the positions kept.
pub fn consistent(pieces: &[Piece], k: usize) -> Vec<usize> {
    #[cfg(test)]
    if RULE_OFF.load(std::sync::atomic::Ordering::Relaxed) {
        return pieces.iter().map(|p| p.position).collect();
    }
    let mut best = Cut::default();
    for cut in cuts(pieces, k) {
        let (size, best_size) = (cut.size(), best.size());
        if size > best_size || (size == best_size && cut.data.len() > best.data.len()) {
            best = cut;
        }
    }
    best.positions()
}

/// Prefers the newest page of data position `target` (a page that is lost: a home rebuilding
/// its own page): of the cuts of at least k pieces, the one whose parity group holds the
/// highest seq for `target` (the larger on a tie). So a home whose last deltas reached only
/// some parity positions before it died comes back with those writes, not without them
/// (`Node::realign_torn` then brings the other parity positions to it). With no such cut, as
/// [`consistent`].
pub fn consistent_newest(pieces: &[Piece], k: usize, target: usize) -> Vec<usize> {
    #[cfg(test)]
    if OLDEST_FIRST.with(std::cell::Cell::get) {
        let oldest = cuts(pieces, k)
            .into_iter()
            .filter(|c| c.size() >= k && c.seqs.len() == k)
            .min_by_key(|c| (c.seqs[target], std::cmp::Reverse(c.size())));
        return oldest.map_or_else(|| consistent(pieces, k), |c| c.positions());
    }
    let newest = cuts(pieces, k)
        .into_iter()
        .filter(|c| c.size() >= k && c.seqs.len() == k && target < k)
        .max_by_key(|c| (c.seqs[target], c.size()));
    newest.map_or_else(|| consistent(pieces, k), |c| c.positions())
}

#[cfg(test)]
thread_local! {
    /// Test-only: [`consistent_newest`] on this thread prefers the oldest page instead (so a
    /// test reaches the realignment that moves parity pages back).
    pub static OLDEST_FIRST: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Every cut of at least k pieces, the one [`consistent`] picks first, then the others by size:
/// a repair whose result fails its record's check tries the next (a delta torn by its home's
/// death leaves two groups of parity pages, each a consistent cut with the data pages, and the
/// record may be in either).
pub fn cuts_of_k(pieces: &[Piece], k: usize) -> Vec<Vec<usize>> {
    #[cfg(test)]
    if RULE_OFF.load(std::sync::atomic::Ordering::Relaxed) {
        return vec![pieces.iter().map(|p| p.position).collect()];
    }
    let mut all: Vec<Cut> = cuts(pieces, k)
        .into_iter()
        .filter(|c| c.size() >= k)
        .collect();
    all.sort_by_key(|c| (std::cmp::Reverse(c.size()), std::cmp::Reverse(c.data.len())));
    all.into_iter().map(Cut::positions).collect()
}

/// The largest cut that keeps data piece `d` (a home's own page, checking the parity pages
/// against it): its positions, empty if none does.
pub fn consistent_with(pieces: &[Piece], k: usize, d: usize) -> Vec<usize> {
    cuts(pieces, k)
        .into_iter()
        .filter(|c| c.data.contains(&d))
        .max_by_key(Cut::size)
        .map_or_else(Vec::new, Cut::positions)
}

/// One candidate cut: data positions, the parity group, and the seqs that group agrees with
/// (empty for the data pieces alone).
#[derive(Default)]
struct Cut {
    data: Vec<usize>,
    group: Vec<usize>,
    seqs: Vec<u64>,
}

impl Cut {
    fn size(&self) -> usize {
        self.data.len() + self.group.len()
    }

    fn positions(self) -> Vec<usize> {
        let mut out = self.data;
        out.extend(self.group);
        out.sort_unstable();
        out
    }
}

/// Every candidate cut: the data pieces alone, and per group of parity pieces with the same
/// seqs (no gap), that group with the data pieces at exactly those seqs.
fn cuts(pieces: &[Piece], k: usize) -> Vec<Cut> {
    let data: Vec<(usize, u64)> = pieces
        .iter()
        .filter(|p| p.position < k)
        .filter_map(|p| p.seqs.first().map(|&s| (p.position, s)))
        .collect();
    let parity: Vec<&Piece> = pieces
        .iter()
        .filter(|p| p.position >= k && p.seqs.len() == k && !p.seqs.contains(&GAPPED))
        .collect();
    let mut out = vec![Cut {
        data: data.iter().map(|&(d, _)| d).collect(),
        ..Cut::default()
    }];
    for a in &parity {
        if out.iter().any(|c| c.seqs == a.seqs) {
            continue;
        }
        let group: Vec<usize> = parity
            .iter()
            .filter(|b| b.seqs == a.seqs)
            .map(|b| b.position)
            .collect();
        let agree: Vec<usize> = data
            .iter()
            .filter(|&&(d, s)| s != GAPPED && a.seqs[d] == s)
            .map(|&(d, _)| d)
            .collect();
        out.push(Cut {
            data: agree,
            group,
            seqs: a.seqs.clone(),
        });
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use codes::{Code, Codec};

    #[test]
    fn applied_seqs_equal_their_model_in_order_and_out_of_order() {
        use rand::{Rng, SeedableRng};
        let mut rng = rand::rngs::SmallRng::seed_from_u64(418);
        for round in 0..200 {
            let mut a = Applied::default();
            let mut model = std::collections::BTreeSet::new();
            let mut next = 1u64;
            for _ in 0..200 {
                // Mostly the next seq; sometimes one again, one skipped ahead, or an old one.
                let seq = match rng.gen_range(0..10) {
                    0 => rng.gen_range(1..next + 4),
                    1 => next + rng.gen_range(1..4),
                    _ => next,
                };
                next = next.max(seq + 1);
                let fresh = model.insert(seq);
                assert_eq!(a.note(seq), fresh, "round {round} seq {seq}");
                let floor = (1..).take_while(|s| model.contains(s)).last().unwrap_or(0);
                assert_eq!(a.floor, floor, "round {round} seq {seq}");
                let above: Vec<u64> = model.range(floor + 1..).copied().collect();
                assert_eq!(a.above.iter().copied().collect::<Vec<_>>(), above);
                let agreed = if above.is_empty() { floor } else { GAPPED };
                assert_eq!(a.agreed(), agreed);
            }
        }
    }

    #[test]
    fn pages_rotate_over_the_stripes_a_node_is_a_data_position_of() {
        // k = 3, 5 nodes: node 2's pages 0, 1, 2 are data positions 0, 1, 2 of stripes 2, 1, 0.
        assert_eq!(page_of(2, 0, 3, 5), (2, 0, 0));
        assert_eq!(page_of(2, 1, 3, 5), (1, 1, 0));
        assert_eq!(page_of(2, 2, 3, 5), (0, 2, 0));
        assert_eq!(page_of(2, 3, 3, 5), (2, 0, 1));
        assert_eq!(page_of(0, 4, 3, 5), (4, 1, 1));
        for home in 0..5 {
            for j in 0..30 {
                let (t, d, q) = page_of(home, j, 3, 5);
                assert_eq!((t + d) % 5, home);
                assert_eq!(home_page(d, q, 3), j);
            }
        }
    }

    #[test]
    fn classes_grow_to_a_page() {
        for page in [PAGE_BYTES, 4096, 1 << 20] {
            let c = classes(page, GROWTH);
            assert_eq!(c[0], MIN_SLOT_BYTES);
            assert_eq!(*c.last().unwrap(), page);
            assert!(c.windows(2).all(|w| w[0] < w[1]));
            assert!(c.iter().all(|&s| s >= page / 64 || s % 8 == 0));
            // Below the page fractions, classes grow by the factor.
            let small: Vec<usize> = c.iter().copied().filter(|&s| s < page / 64).collect();
            assert!(small
                .windows(2)
                .all(|w| (w[1] as f64) <= (w[0] as f64 * GROWTH) + 8.0));
            // Above, a record lands in a class that holds as many of it per page as fit.
            for len in ((page / 64).max(MIN_SLOT_BYTES)..=page).step_by(97) {
                let class = *c.iter().find(|&&s| s >= len).unwrap();
                assert_eq!(
                    page / class,
                    page / len,
                    "a record of {len} bytes, page {page}"
                );
            }
        }
        // The example in the doc: 8 KiB values' records, 31 to a page of 256 KiB.
        let c = classes(PAGE_BYTES, GROWTH);
        assert_eq!(*c.iter().find(|&&s| s >= 8283).unwrap(), 8456);
    }

    #[test]
    fn slots_are_reused_and_their_old_bytes_enter_the_delta() {
        let mut slab = Slab::new(4096);
        let a = slab.alloc(100, None).unwrap();
        let w = slab.write(a, |s| s.copy_from_slice(&[1; 100]));
        assert_eq!(w.seq, 1);
        assert_eq!(&w.delta[..], &[1; 100][..]);
        slab.free(a);
        // 101 bytes: the same size class as 100 (4096 / 40 = 102 bytes); the delta covers
        // the new record's bytes, old ones included.
        let b = slab.alloc(101, None).unwrap();
        assert_eq!((b.page, b.offset), (a.page, a.offset));
        let w = slab.write(b, |s| s.copy_from_slice(&[3; 101]));
        let mut want = vec![2; 100];
        want.push(3);
        assert_eq!(&w.delta[..], &want[..]);
        assert_eq!(w.seq, 2);
        assert!(slab.alloc(4097, None).is_none());
        // With k = 3, a slot of residue 2 is found in page 2; pages 0 and 1 are skipped on the
        // way (no memory, read as zeros) until a slot of their residue is wanted.
        let mut slab = Slab::new(4096);
        slab.set_residues(3);
        let c = slab.alloc(100, Some(2)).unwrap();
        assert_eq!(c.page, 2);
        assert_eq!(slab.pages(), 1);
        assert!(!slab.holds(0) && !slab.holds(1) && slab.holds(2));
        assert_eq!(slab.range(1, 0, 4).unwrap(), (0, vec![0; 4]));
        assert_eq!(slab.alloc(100, Some(0)).unwrap().page, 0);
        assert_eq!(slab.pages(), 2);
        assert_eq!(slab.alloc(100, Some(2)).unwrap().page, 2);
        assert_eq!(slab.range(9, 0, 4).unwrap(), (0, vec![0; 4]));
        assert!(slab.range(0, 4090, 7).is_none());
        // A skipped page restored as zeros stays without memory; one with bytes gets them.
        slab.install(1, &[0; 4096], 0);
        assert!(!slab.holds(1));
        slab.install(4, &[7; 4096], 3);
        assert!(slab.holds(4) && !slab.holds(3));
        assert_eq!(slab.range(4, 0, 2).unwrap(), (3, vec![7; 2]));
        assert_eq!(slab.pages(), 3);
    }

    #[test]
    fn a_parity_page_restored_as_zeros_takes_no_memory() {
        let mut parity = ParityPages::default();
        parity.install((1, 4, 0), &[0; 64], &[0, 0]);
        assert!(parity.is_empty());
        assert_eq!(
            parity.range((1, 4, 0), 2, 64, 0, 4).unwrap(),
            (vec![0, 0], vec![0; 4])
        );
        parity.install((1, 4, 1), &[0; 64], &[0, 3]);
        assert_eq!(
            parity.len(),
            1,
            "a page agreeing with a written data page is kept"
        );
        assert_eq!(parity.pages_of(1, 4), 2);
    }

    #[test]
    fn new_pages_rotate_from_the_slabs_start() {
        // k = 3, records of 2 000 bytes (two to a 4 KiB page): a slab starting at residue 2
        // fills page 2 first (pages 0 and 1 skipped, no memory), then pages 0 and 1 as their
        // residues come, then page 5.
        let mut slab = Slab::new(4096);
        slab.set_residues(3);
        slab.set_start(2);
        let pages: Vec<u32> = (0..6)
            .map(|_| slab.alloc(2000, None).unwrap().page)
            .collect();
        assert_eq!(pages, vec![2, 2, 0, 0, 1, 1]);
        assert_eq!(slab.pages(), 3);
        assert_eq!(slab.alloc(2000, None).unwrap().page, 5);
        // With the start at residue 0, the first page is page 0.
        let mut slab = Slab::new(4096);
        slab.set_residues(3);
        assert_eq!(slab.alloc(2000, None).unwrap().page, 0);
    }

    /// The data pages of a page stripe, written through slabs and deltas, and their parity
    /// pages, always equal the code's parity of the data pages.
    #[test]
    fn parity_pages_follow_every_write() {
        let code = Code::rs(4, 2).unwrap();
        let codec = Codec::new(code);
        let g = code.generator();
        let (k, n, page) = (4, 6, 2048);
        let kernel = codes::Kernel::best();
        let mut slabs: Vec<Slab> = (0..k).map(|_| Slab::new(page)).collect();
        let mut parity = ParityPages::default();
        let mut live: Vec<Vec<WholeAt>> = vec![Vec::new(); k];
        let mut rng = 0x1234_5678u64;
        let mut next = || {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            rng
        };
        for round in 0..400 {
            let d = (next() % k as u64) as usize;
            if !live[d].is_empty() && next() % 3 == 0 {
                let i = (next() % live[d].len() as u64) as usize;
                slabs[d].free(live[d].swap_remove(i));
                continue;
            }
            let len = 1 + (next() % 700) as usize;
            let Some(at) = slabs[d].alloc(len, None) else {
                continue;
            };
            live[d].push(at);
            let bytes: Vec<u8> = (0..len).map(|i| (i as u64 * 31 + round) as u8).collect();
            let w = slabs[d].write(at, |s| s.copy_from_slice(&bytes));
            for i in k..n {
                let applied = parity
                    .apply(
                        kernel,
                        (0, i as u8, at.page),
                        k,
                        page,
                        d,
                        w.seq,
                        at.offset,
                        g[i * k + d],
                        &w.delta,
                    )
                    .unwrap();
                assert!(applied);
                // The same delta again changes nothing.
                assert!(!parity
                    .apply(
                        kernel,
                        (0, i as u8, at.page),
                        k,
                        page,
                        d,
                        w.seq,
                        at.offset,
                        g[i * k + d],
                        &w.delta
                    )
                    .unwrap());
            }
        }
        let pages = slabs.iter().map(Slab::pages).max().unwrap();
        assert!(pages > 1);
        for q in 0..pages as u32 {
            let data: Vec<Vec<u8>> = slabs
                .iter()
                .map(|s| s.range(q, 0, page as u32).unwrap().1)
                .collect();
            let refs: Vec<&[u8]> = data.iter().map(|d| &d[..]).collect();
            let mut want = vec![vec![0u8; page]; n - k];
            let mut outs: Vec<&mut [u8]> = want.iter_mut().map(|w| &mut w[..]).collect();
            codec.encode(&refs, &mut outs).unwrap();
            for i in k..n {
                let (seqs, got) = parity
                    .range((0, i as u8, q), k, page, 0, page as u32)
                    .unwrap();
                assert_eq!(got, want[i - k], "parity {i} page {q}");
                for d in 0..k {
                    assert_eq!(seqs[d], slabs[d].range(q, 0, 1).unwrap().0);
                }
            }
        }
    }

    fn piece(position: usize, seqs: &[u64]) -> Piece {
        Piece {
            position,
            seqs: seqs.to_vec(),
        }
    }

    #[test]
    fn a_cut_keeps_only_parity_that_applied_what_the_data_pages_made() {
        // k = 2: data 0 at seq 5 read; data 1 lost; parities 2, 3, 4.
        let pieces = [
            piece(0, &[5]),
            piece(2, &[5, 7]),
            piece(3, &[4, 7]),      // behind data 0: a delta in flight
            piece(4, &[5, GAPPED]), // a delta of the lost page missing
        ];
        assert_eq!(consistent(&pieces, 2), vec![0, 2]);
        // Two parities that agree with data 0 but not with each other on the lost page: the
        // larger group (or the first) only.
        let pieces = [
            piece(0, &[5]),
            piece(2, &[5, 7]),
            piece(3, &[5, 8]),
            piece(4, &[5, 8]),
        ];
        assert_eq!(consistent(&pieces, 2), vec![0, 3, 4]);
    }

    #[test]
    fn a_data_page_ahead_of_every_parity_page_is_decoded_instead_of_read() {
        // k = 3: data 0 at seq 5, data 1 at seq 9 (its delta 9 not yet at any parity), data 2
        // lost; parities 3 and 4 agree with each other and with data 0. The cut leaves data 1
        // out: 0, 3 and 4 are k pieces of one state of the page stripe.
        let pieces = [
            piece(0, &[5]),
            piece(1, &[9]),
            piece(3, &[5, 8, 2]),
            piece(4, &[5, 8, 2]),
        ];
        assert_eq!(consistent(&pieces, 3), vec![0, 3, 4]);
        // When a parity page has caught up with data 1, the cut with it is as large and holds
        // more data pieces.
        let pieces = [
            piece(0, &[5]),
            piece(1, &[9]),
            piece(3, &[5, 9, 2]),
            piece(4, &[5, 8, 2]),
        ];
        assert_eq!(consistent(&pieces, 3), vec![0, 1, 3]);
        // A parity page that is behind data 0 and data 1 joins no cut with them; alone with
        // its group (one piece) it is smaller than the data pieces alone.
        let pieces = [piece(0, &[5]), piece(1, &[9]), piece(3, &[4, 8, 2])];
        assert_eq!(consistent(&pieces, 3), vec![0, 1]);
    }

    #[test]
    fn a_home_takes_its_page_back_at_the_newest_seq_a_cut_of_k_shows() {
        // k = 2, m = 3: data 0 lost (the home); data 1 at seq 4; parities 2 and 3 applied the
        // home's delta 7, parity 4 did not (torn). Both groups make a cut of k with data 1.
        let pieces = [
            piece(1, &[4]),
            piece(2, &[7, 4]),
            piece(3, &[7, 4]),
            piece(4, &[6, 4]),
        ];
        assert_eq!(consistent_newest(&pieces, 2, 0), vec![1, 2, 3]);
        // The newest group the smaller: still taken.
        let pieces = [
            piece(1, &[4]),
            piece(2, &[6, 4]),
            piece(3, &[6, 4]),
            piece(4, &[7, 4]),
        ];
        assert_eq!(consistent_newest(&pieces, 2, 0), vec![1, 4]);
        assert_eq!(consistent(&pieces, 2), vec![1, 2, 3]);
        // The newest group short of k (its data piece ahead of it): the largest cut.
        let pieces = [
            piece(1, &[5]),
            piece(2, &[6, 5]),
            piece(3, &[6, 5]),
            piece(4, &[7, 4]),
        ];
        assert_eq!(consistent_newest(&pieces, 2, 0), vec![1, 2, 3]);
        // Checking the parity pages against the home's rebuilt page: the largest cut that
        // keeps it, whatever is larger without it.
        let pieces = [
            piece(0, &[7]),
            piece(1, &[4]),
            piece(2, &[6, 4]),
            piece(3, &[6, 4]),
            piece(4, &[7, 4]),
            piece(5, &[6, 4]),
        ];
        assert_eq!(consistent(&pieces, 2), vec![1, 2, 3, 5]);
        assert_eq!(consistent_with(&pieces, 2, 0), vec![0, 1, 4]);
        assert_eq!(
            consistent_with(&[piece(0, &[7]), piece(2, &[6, 4])], 2, 3),
            Vec::<usize>::new()
        );
    }

    #[test]
    fn a_realignment_moves_a_count_only_from_the_seq_it_was_computed_for() {
        let mut parity = ParityPages::default();
        let kernel = codes::Kernel::best();
        let key = (0, 2, 0);
        for seq in 1..=3 {
            assert!(parity
                .apply(kernel, key, 2, 64, 0, seq, 8, 1, &[seq as u8; 4])
                .unwrap());
        }
        let before = parity.range(key, 2, 64, 0, 64).unwrap();
        assert_eq!(before.0, vec![3, 0]);
        // Computed for seq 2 (the page has moved on since): refused, nothing changed.
        let fix = [0x5a; 3];
        assert!(!parity.realign(key, 2, 64, 0, (2, 1), 9, &fix).unwrap());
        assert_eq!(parity.range(key, 2, 64, 0, 64).unwrap(), before);
        // From 3 to 2: the bytes corrected, the count moved; a delta 3 again is applied.
        assert!(parity.realign(key, 2, 64, 0, (3, 2), 9, &fix).unwrap());
        let (seqs, bytes) = parity.range(key, 2, 64, 0, 64).unwrap();
        assert_eq!(seqs, vec![2, 0]);
        for (i, (b, a)) in bytes.iter().zip(&before.1).enumerate() {
            let want = if (9..12).contains(&i) { a ^ 0x5a } else { *a };
            assert_eq!(*b, want, "byte {i}");
        }
        assert!(parity
            .apply(kernel, key, 2, 64, 0, 3, 8, 1, &[0; 4])
            .unwrap());
        // A count with a gap above it is not moved; a page never written only from 0.
        assert!(parity
            .apply(kernel, key, 2, 64, 1, 2, 0, 1, &[1; 4])
            .unwrap());
        assert!(!parity.realign(key, 2, 64, 1, (0, 2), 0, &[]).unwrap());
        assert!(!parity.realign((0, 3, 0), 2, 64, 0, (1, 2), 0, &[]).unwrap());
        assert!(parity
            .realign((0, 3, 0), 2, 64, 0, (0, 2), 0, &[7])
            .unwrap());
        assert_eq!(
            parity.range((0, 3, 0), 2, 64, 0, 2).unwrap(),
            (vec![2, 0], vec![7, 0])
        );
        assert!(parity.realign(key, 2, 64, 0, (3, 1), 60, &[1; 5]).is_err());
    }
}
