//! Split values written whole again by their home, in the background.
//!
//! A value the layout wants whole is stored split while another node stands in for its home,
//! or while the home rebuilds its pages after a restart (`agent::whole`). The next write at the
//! home makes it whole again, but a value not written again stays split: a read of it gathers
//! k − 1 chunks from other nodes instead of one slot at the home. So once a second the home
//! reads such values and writes each whole, as a *rewrite*: the same bytes, flags, exptime and
//! request ids (`agent::once`), and the same CAS value, since a rewrite's version differs from
//! the version it replaces only in its rewrite bits (`record::REWRITE_BITS`). Members and a new
//! agent order the rewrite's records after the split ones, as any later version's; a client's
//! `cas` with the value it read still succeeds, as no client changed the value.
//!
//! A rewrite runs under the key's lock (no write of the key comes between its read and its
//! commit), only while every member of the stripe is up, and is left out at the first sign of
//! trouble: a refused or unanswered delta, or a lapse of the stripe's lease while it ran
//! (another agent may serve the split records meanwhile), leaves the value as it was, still
//! split and right; the split records are deleted only once the rewrite is committed.
//! It is rate-limited with hole filling's budget (`--recovery-mbps`) and to half a second per
//! round, with up to four rewrites under way at once, and keeps the value's place in the LRU
//! order.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use crate::agent::index::{self, Entry};
use crate::agent::whole::Layout;
use crate::node::{bump, lock, Node};
use crate::record::Kind;
use crate::time;

/// Values looked up per stripe and round.
const PER_ROUND: usize = 1024;
/// How long a round may go on (a round a second, on the thread that also sweeps, fills holes
/// and sends queued deltas again).
const ROUND_TIME: Duration = Duration::from_millis(500);
/// Rewrites under way at once in a round, each on a thread of its own for the round: a
/// rewrite waits for other nodes three times (the split value's chunks, the deltas, the split
/// records' deletion), so one at a time left a restarted home's values split for seconds
/// after its recovery (about a hundred rewritten a second on 2 cores, under load).
const LANES: usize = 4;

/// How one rewrite ended.
#[derive(Debug, PartialEq, Eq)]
enum Rewhole {
    /// Written whole: the value's bytes.
    Done(u64),
    /// Not now: the key changed, the stripe has a member down, the value is not readable, a
    /// delta was refused or the lease lapsed meanwhile (the value stays as it was).
    Skipped(&'static str),
}

impl Node {
    /// Writes whole again, at most `budget_bytes` of them, the values of the stripes this node
    /// is the home of that are stored split though the layout wants them whole. Returns the
    /// bytes written; sets `whole_split_values` to those left in the stripes this node leads.
    pub fn rewhole(&self, budget_bytes: u64) -> u64 {
        if self.cfg.layout == Layout::Split {
            return 0;
        }
        let started = Instant::now();
        let mut todo: Vec<(usize, Vec<u8>, u64)> = Vec::new();
        let mut waiting = 0;
        for s in 0..self.cfg.node_count {
            if !self.leads(s) {
                continue;
            }
            // Written whole again by their home while every member is up and its pages are
            // whole; counted by the stripe's agent (the home, or a node standing in for it)
            // from the index it holds.
            let now = self.placement.node_of(s, 0) == self.cfg.id
                && self.down_positions(s) == 0
                && !self.pages_lost.load(Ordering::Relaxed);
            if now {
                // An index made before a lapse of the lease may miss writes another agent
                // made: it is made again from the records, as an operation would.
                self.drop_stale_index(s);
                if self.ensure_index(s).is_some() {
                    continue;
                }
            }
            if let Some(ix) = lock(&self.stripes[s]).as_ref() {
                let (count, some) = ix.split_values(if now { PER_ROUND } else { 0 });
                waiting += count as u64;
                todo.extend(some.into_iter().map(|(key, version)| (s, key, version)));
            }
        }
        // The lanes take the values in turn until the list, the budget or the round's time
        // runs out.
        let next = AtomicUsize::new(0);
        let done = AtomicU64::new(0);
        let rewritten = AtomicU64::new(0);
        let lane = || loop {
            if done.load(Ordering::Relaxed) >= budget_bytes || started.elapsed() >= ROUND_TIME {
                return;
            }
            let Some((s, key, version)) = todo.get(next.fetch_add(1, Ordering::Relaxed)) else {
                return;
            };
            match self.rewhole_value(*s, key, *version) {
                Rewhole::Done(bytes) => {
                    done.fetch_add(bytes, Ordering::Relaxed);
                    rewritten.fetch_add(1, Ordering::Relaxed);
                }
                Rewhole::Skipped(why) => log::debug!(
                    "stripe {s}: {} v{version} not written whole again: {why}",
                    String::from_utf8_lossy(key)
                ),
            }
        };
        match todo.len() {
            0 => {}
            1 => lane(),
            n => std::thread::scope(|scope| {
                for _ in 0..LANES.min(n) {
                    scope.spawn(lane);
                }
            }),
        }
        let left = waiting.saturating_sub(rewritten.into_inner());
        self.counters
            .whole_split_values
            .store(left, Ordering::Relaxed);
        done.into_inner()
    }

    /// Writes the split value of `key` at `version` whole, keeping its CAS value.
    fn rewhole_value(&self, stripe: usize, key: &[u8], version: u64) -> Rewhole {
        let _key_guard = self.key_lock(key);
        let began = Instant::now();
        if !self.leads(stripe) {
            return Rewhole::Skipped("not the stripe's agent");
        }
        // (As above: the lease may have lapsed since the round listed the key.)
        self.drop_stale_index(stripe);
        let oldest = self.oldest_live_us.load(Ordering::Relaxed);
        let now = time::now_secs();
        let Some(old) = lock(&self.stripes[stripe])
            .as_ref()
            .and_then(|ix| ix.get(key).cloned())
        else {
            return Rewhole::Skipped("no index or no value");
        };
        if old.version != version || old.kind == Kind::Whole {
            return Rewhole::Skipped("written again meanwhile");
        }
        // Expired or flushed: the sweep deletes it.
        if time::is_expired(old.exptime, now) || old.stored_at_us < oldest {
            return Rewhole::Skipped("expired or flushed");
        }
        if self.down_positions(stripe) != 0 || !self.whole_ok(stripe, key, old.value_bytes as usize)
        {
            return Rewhole::Skipped("not writable whole now");
        }
        let value = match self.read_value(stripe, key, &old, None) {
            Ok(v) => v,
            Err(_) => return Rewhole::Skipped("the value was not read"),
        };
        let (positions, charge) = index::charge(
            Kind::Whole,
            key.len(),
            old.value_bytes,
            self.k(),
            self.n(),
            self.replicas(),
        );
        // The value leaves the index while it is written (as a write's: no eviction can take
        // it meanwhile, and no reader misses it, as readers take the key's lock); its whole
        // charge at the home is below its split one, so the reservation evicts nothing unless
        // other writes filled the share meanwhile.
        let reserved = {
            let mut g = lock(&self.stripes[stripe]);
            let Some(ix) = g.as_mut() else {
                return Rewhole::Skipped("the index was dropped");
            };
            let Some(v) = ix.rewrite_version(key, version) else {
                return Rewhole::Skipped("its rewrite bits are spent");
            };
            ix.remove(key);
            match ix.reserve(positions, charge) {
                Ok(victims) => {
                    for (vkey, _) in &victims {
                        ix.release_held(vkey);
                    }
                    Ok((v, victims, ix.watermark()))
                }
                Err(_) => {
                    ix.finish(v);
                    ix.adopt(key, old.clone());
                    Err(())
                }
            }
        };
        let Ok((v, victims, watermark)) = reserved else {
            return Rewhole::Skipped("no room in the stripe's share");
        };
        for (vkey, e) in &victims {
            self.delete_records(stripe, vkey, e.version + 1);
        }
        let mut entry = Entry::new(
            v,
            old.value_bytes,
            old.flags,
            old.exptime,
            Kind::Whole,
            old.stored_at_us,
            positions,
            charge,
        );
        entry.trail = old.trail;
        match self.write_whole(stripe, key, &entry, &value, watermark) {
            Ok(at) => {
                // Another node may have led the stripe meanwhile and adopted the split
                // version, which it serves from the split records: they stay (the rewrite's
                // records, of the same value and CAS value, are harmless), and so does the
                // index's entry (an index that outlived a lapse is rebuilt before use).
                if !self.led_throughout(stripe, began) {
                    self.rewhole_undo(stripe, key, old, v, positions, charge);
                    return Rewhole::Skipped("the lease lapsed during the rewrite");
                }
                entry.whole_at = Some(at);
                // An index dropped meanwhile (a lease lapse) is rebuilt from the records, the
                // rewrite's among them.
                if let Some(ix) = lock(&self.stripes[stripe]).as_mut() {
                    ix.commit_rewrite(key, entry, &old);
                    ix.finish(v);
                }
                // The split records at the other positions are older than the rewrite (the
                // home's own chunk is the record its slot replaced, dropped once the
                // stripe's watermark passes the rewrite, as a write's).
                let nodes = (1..self.n()).map(|p| self.placement.node_of(stripe, p));
                self.delete_records_at(stripe, key, v, nodes);
                bump(&self.counters.whole_rewritten);
                Rewhole::Done(old.value_bytes)
            }
            Err(_) => {
                self.rewhole_undo(stripe, key, old, v, positions, charge);
                Rewhole::Skipped("a delta was refused or not answered")
            }
        }
    }

    /// Gives the index back the split value a rewrite did not replace. Some positions may hold
    /// the rewrite's records: its version stays in flight until the key is written again, as
    /// a failed write's; the split value is served meanwhile (its records are all there).
    fn rewhole_undo(
        &self,
        stripe: usize,
        key: &[u8],
        old: Entry,
        version: u64,
        positions: usize,
        charge: u64,
    ) {
        if let Some(ix) = lock(&self.stripes[stripe]).as_mut() {
            ix.release(positions, charge);
            ix.hold_open(key, version);
            ix.adopt(key, old);
        }
    }
}
