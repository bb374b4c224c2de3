//! Benchmark data: seeded chunk contents (the same stream as the Go peer's) and the buffer
//! sets a benchmark rotates through.

/// One step of splitmix64.
fn splitmix64(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// Fills data chunk `chunk` of buffer set `set`: little-endian splitmix64 words from a state
/// derived from (seed, set, chunk), the last word cut to the length. `peers/klauspost/main.go`
/// `fill` is the same function, so both sides code identical bytes.
pub fn fill(seed: u64, set: u64, chunk: u64, buf: &mut [u8]) {
    let mut state =
        seed ^ set.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ chunk.wrapping_mul(0xC2B2_AE3D_27D4_EB4F);
    for word in buf.chunks_mut(8) {
        let v = splitmix64(&mut state).to_le_bytes();
        word.copy_from_slice(&v[..word.len()]);
    }
}

/// One memory page: the unit chunk buffers are allocated in, so that every chunk starts at a
/// chosen offset from a page boundary.
#[derive(Clone, Copy, Debug, bytemuck::Pod, bytemuck::Zeroable)]
#[repr(C, align(4096))]
struct Page([u8; PAGE]);

const PAGE: usize = 4096;

/// Chunk slots (see [`Chunk::placed`]) before the offsets repeat: 64 lines of a page.
const SLOTS: usize = PAGE / 64;

/// A chunk buffer at a fixed place relative to the pages: `64 · (slot mod 64)` bytes past a
/// page boundary. Storage systems and the peer libraries' own allocators (klauspost
/// `AllocAligned`, ISA-L's examples with `posix_memalign`) give 64-byte-aligned buffers, but
/// where those fall relative to each other depends on the allocator's history: a 128 KiB cell
/// run alone got its buffers from fresh `mmap`s (every chunk at the same offset in its page),
/// the same cell late in a `--quick` run got them from the heap, where earlier cells had freed
/// theirs, and its figures (inec's, ISA-L's and the XOR pass's, which share the buffers) were
/// up to a quarter lower there while klauspost's, in the Go peer's own buffers, were not. The
/// benchmark therefore places chunk i of a stripe at offset `64 · i` in its own pages, so that
/// the chunks of a stripe use different L1 sets at equal positions, and the Go peer places its
/// chunks the same way (`place` in `peers/klauspost/main.go`): every library gets the same
/// layout in every run.
#[derive(Clone, Debug)]
pub struct Chunk {
    pages: Vec<Page>,
    offset: usize,
    len: usize,
}

impl Chunk {
    /// `len` zero bytes at `64 · (slot mod 64)` bytes past a page boundary.
    pub fn placed(len: usize, slot: usize) -> Chunk {
        let offset = 64 * (slot % SLOTS);
        Chunk {
            pages: vec![Page([0; PAGE]); (offset + len).div_ceil(PAGE)],
            offset,
            len,
        }
    }
}

impl std::ops::Deref for Chunk {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        &bytemuck::cast_slice(&self.pages)[self.offset..self.offset + self.len]
    }
}

impl std::ops::DerefMut for Chunk {
    fn deref_mut(&mut self) -> &mut [u8] {
        &mut bytemuck::cast_slice_mut(&mut self.pages)[self.offset..self.offset + self.len]
    }
}

impl AsRef<[u8]> for Chunk {
    fn as_ref(&self) -> &[u8] {
        self
    }
}

impl AsMut<[u8]> for Chunk {
    fn as_mut(&mut self) -> &mut [u8] {
        self
    }
}

impl PartialEq for Chunk {
    fn eq(&self, other: &Chunk) -> bool {
        self[..] == other[..]
    }
}

/// Buffer sets for one configuration: `sets[s][i]` is chunk i of set s (data chunks, then
/// parity chunks, then one scratch chunk the XOR roofline writes to).
#[derive(Debug)]
pub struct Stripes {
    pub chunk_bytes: usize,
    /// Chunks per stripe, without the scratch chunk.
    pub n: usize,
    pub sets: Vec<Vec<Chunk>>,
    /// A copy of set 0 as it must be (data and correct parity), to verify outputs against
    /// and to restore after a verification that failed.
    pub expected: Vec<Chunk>,
}

impl Stripes {
    /// `set_count` sets of `k` seeded data chunks; parity (n − k chunks) left zero for the
    /// caller's encoder.
    pub fn new(seed: u64, k: usize, n: usize, chunk_bytes: usize, set_count: usize) -> Stripes {
        let sets = (0..set_count)
            .map(|s| {
                (0..=n)
                    .map(|i| {
                        let mut c = Chunk::placed(chunk_bytes, i);
                        if i < k {
                            fill(seed, s as u64, i as u64, &mut c);
                        }
                        c
                    })
                    .collect()
            })
            .collect();
        Stripes {
            chunk_bytes,
            n,
            sets,
            expected: Vec::new(),
        }
    }

    /// Records set 0 as the expected contents (call after encoding).
    pub fn snapshot(&mut self) {
        self.expected = self.sets[0][..self.n].to_vec();
    }

    /// Puts set 0 back to the expected contents.
    pub fn restore(&mut self) {
        for (c, e) in self.sets[0].iter_mut().zip(&self.expected) {
            c.copy_from_slice(e);
        }
    }

    /// Total bytes of all sets.
    pub fn total_bytes(&self) -> usize {
        self.sets.len() * (self.n + 1) * self.chunk_bytes
    }

    /// Splits every chunk of every set into `threads` byte ranges: `views[t][s][i]` is thread
    /// t's range of chunk i of set s (the scratch chunk included, at index n).
    pub fn thread_views(&mut self, threads: usize) -> Vec<Vec<Vec<&mut [u8]>>> {
        let ranges = split_ranges(self.chunk_bytes, threads);
        let mut views: Vec<Vec<Vec<&mut [u8]>>> = (0..threads)
            .map(|_| Vec::with_capacity(self.sets.len()))
            .collect();
        for set in &mut self.sets {
            let mut per_thread: Vec<Vec<&mut [u8]>> = (0..threads)
                .map(|_| Vec::with_capacity(set.len()))
                .collect();
            for chunk in set.iter_mut() {
                let mut rest: &mut [u8] = &mut chunk[..];
                for (t, r) in ranges.iter().enumerate() {
                    let (head, tail) = rest.split_at_mut(r.len());
                    per_thread[t].push(head);
                    rest = tail;
                }
            }
            for (t, v) in per_thread.into_iter().enumerate() {
                views[t].push(v);
            }
        }
        views
    }
}

/// Byte ranges of `len` for `parts` threads: multiples of 64 bytes except the last (the Go
/// peer splits the same way).
pub fn split_ranges(len: usize, parts: usize) -> Vec<std::ops::Range<usize>> {
    let per = (len / parts).div_ceil(64) * 64;
    (0..parts)
        .map(|t| {
            let lo = (t * per).min(len);
            let hi = if t == parts - 1 {
                len
            } else {
                (lo + per).min(len)
            };
            lo..hi
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chunks_lie_at_their_slot_offset_and_have_their_length() {
        for len in [0, 1, 63, 64, 65, 4096, 131_072 + 7] {
            for slot in [0, 1, 5, 63, 64, 70] {
                let mut c = Chunk::placed(len, slot);
                assert_eq!(c.len(), len);
                let want = 64 * (slot % 64);
                assert_eq!(c.as_ptr() as usize % 4096, want, "len {len} slot {slot}");
                c.fill(7);
                let d = c.clone();
                assert_eq!(d.as_ptr() as usize % 4096, want);
                assert!(d == c && d.iter().all(|&b| b == 7));
            }
        }
    }

    #[test]
    fn a_stripes_chunks_take_consecutive_slots() {
        let st = Stripes::new(1, 3, 5, 1000, 2);
        for set in &st.sets {
            assert_eq!(set.len(), 6);
            for (i, c) in set.iter().enumerate() {
                assert_eq!(c.as_ptr() as usize % 4096, 64 * i);
                assert_eq!(c.len(), 1000);
            }
        }
    }

    #[test]
    fn fill_is_deterministic_and_cut_to_length() {
        let mut a = vec![0u8; 13];
        let mut b = vec![0u8; 16];
        fill(7, 1, 2, &mut a);
        fill(7, 1, 2, &mut b);
        assert_eq!(a[..], b[..13]);
        let mut c = vec![0u8; 16];
        fill(7, 1, 3, &mut c);
        assert_ne!(b, c);
    }

    #[test]
    fn splitmix64_matches_published_first_output() {
        // splitmix64 seeded with 0 yields 0xE220A8397B1DCDAF first.
        let mut s = 0;
        assert_eq!(splitmix64(&mut s), 0xE220_A839_7B1D_CDAF);
    }

    #[test]
    fn ranges_cover_the_chunk() {
        for len in [0, 1, 64, 100, 4096, 4097] {
            for parts in 1..4 {
                let r = split_ranges(len, parts);
                assert_eq!(r.len(), parts);
                assert_eq!(r[0].start, 0);
                assert_eq!(r[parts - 1].end, len);
                for w in r.windows(2) {
                    assert_eq!(w[0].end, w[1].start);
                }
            }
        }
    }

    #[test]
    fn thread_views_split_each_chunk() {
        let mut s = Stripes::new(1, 2, 3, 200, 2);
        let views = s.thread_views(2);
        assert_eq!(views.len(), 2);
        assert_eq!(views[0].len(), 2);
        assert_eq!(views[0][0].len(), 4);
        assert_eq!(views[0][0][0].len(), 128);
        assert_eq!(views[1][1][3].len(), 72);
    }
}
