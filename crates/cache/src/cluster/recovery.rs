//! Recovery: a node restarted empty rebuilds its records from the stripes; holes left by
//! writes a member missed are filled in; expired records are swept.

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use crate::agent::index::{self, Entry};
use crate::carrier::peer::{AgentOp, AgentResult, Request, Response};
use crate::node::{bump, lock, Node, RecoveryState};
use crate::record::{self, Kind};
use crate::time;

impl Node {
    /// Deletes expired and flushed values of the stripes this node leads (periodic expiry).
    pub fn sweep(&self) {
        let oldest = self.oldest_live_us.load(Ordering::Relaxed);
        for s in 0..self.cfg.node_count {
            let dead = {
                let mut g = lock(&self.stripes[s]);
                match g.as_mut() {
                    Some(ix) => ix.sweep(time::now_secs(), time::now_micros(), oldest),
                    None => continue,
                }
            };
            for (key, e) in dead {
                bump(&self.counters.expired_unfetched);
                let _g = self.key_lock(&key);
                self.delete_records(s, &key, e.version + 1);
            }
        }
    }

    /// Fills holes of the stripes this node leads (records a member lacks because it was down
    /// or stalled during a write, or answered a read with another version) at members that
    /// are up and ready (a recovering node rebuilds its own), rebuilt from the other positions
    /// and stored there; at most `budget_bytes` of records per call (the recovery rate over
    /// one sweep period). Returns the bytes stored.
    pub fn fill_holes(&self, budget_bytes: u64) -> u64 {
        let mut done = 0u64;
        for s in 0..self.cfg.node_count {
            if !self.leads(s) {
                continue;
            }
            let view = self.view();
            let wanted = (0..self.n())
                .filter(|&p| {
                    let node = self.placement.node_of(s, p);
                    view[node].0 && view[node].1
                })
                .fold(0u64, |m, p| m | index::bit(p));
            let todo = {
                let g = lock(&self.stripes[s]);
                match g.as_ref() {
                    Some(ix) => ix.holes(wanted, 256),
                    None => continue,
                }
            };
            for (key, version, holes) in todo {
                if done >= budget_bytes {
                    return done;
                }
                let _g = self.key_lock(&key);
                if !self.leads(s) {
                    break;
                }
                let Some(e) = self.lookup(s, &key).filter(|e| e.version == version) else {
                    continue;
                };
                if e.kind == Kind::Whole {
                    done += self.fill_location_records(s, &key, &e, holes & e.holes);
                    continue;
                }
                for p in (0..e.positions).filter(|&p| holes & e.holes & index::bit(p) != 0) {
                    let Ok(data) = self.repair_chunk(s, &key, &e, p) else {
                        continue;
                    };
                    if self.write_back(s, &key, &e, p, &data) {
                        self.with_index(s, |ix| ix.clear_holes(&key, version, index::bit(p)));
                        bump(&self.counters.holes_filled);
                        done += data.len() as u64;
                    }
                }
            }
        }
        done
    }

    /// Fills the holes `holes` of a whole value (positions that missed a touch): each parity
    /// position of its page gets its location record again, with the entry's expiry; a
    /// position that is none of them holds no record of it, and its hole just goes. Returns
    /// the bytes written.
    fn fill_location_records(&self, s: usize, key: &[u8], e: &Entry, holes: u64) -> u64 {
        let mut done = 0;
        for p in (1..self.n()).filter(|&p| holes & index::bit(p) != 0) {
            let Some(rec) = self.whole_location_record(s, key, e, p) else {
                self.with_index(s, |ix| ix.clear_holes(key, e.version, index::bit(p)));
                continue;
            };
            let bytes = rec.len() as u64;
            let put = Request::Put {
                stripe: s as u32,
                watermark: self.with_index(s, |ix| ix.watermark()),
                record: rec,
            };
            let node = self.placement.node_of(s, p);
            if let Some(Ok(Response::Ack)) = self.call(vec![(node, put)]).pop() {
                self.with_index(s, |ix| ix.clear_holes(key, e.version, index::bit(p)));
                bump(&self.counters.holes_filled);
                done += bytes;
            }
        }
        done
    }

    /// Holes of the stripes this node leads, waiting to be filled.
    pub fn holes_pending(&self) -> u64 {
        self.stripes
            .iter()
            .map(|g| lock(g).as_ref().map_or(0, |ix| ix.hole_count()))
            .sum()
    }

    /// Rebuilds every record this node must hold, stripe by stripe, from the acting agents,
    /// rate-limited; then the node is ready (it may lead its stripe again).
    pub(crate) fn recover(&self) {
        std::thread::sleep(self.cfg.heartbeat * 3);
        let me = self.cfg.id;
        // The whole layout's pages first: the values whose records they hold need no other
        // rebuild, and the node's parity pages cover the pages of other homes again.
        if lock(&self.store).whole_lost {
            if let Err(e) = self.rebuild_pages() {
                log::error!(
                    "node {me}: the whole layout's pages were not rebuilt ({e}); this node \
                     writes no value whole and serves no page range until it restarts"
                );
            }
        }
        let started = Instant::now();
        let mut bytes_done: u64 = 0;
        for s in self.placement.stripes_of(me) {
            let positions = self.placement.positions_of(s, me);
            let keys = loop {
                match self.route(s, AgentOp::Keys { stripe: s as u32 }) {
                    AgentResult::Keys(keys) => break keys,
                    _ => std::thread::sleep(Duration::from_millis(200)),
                }
            };
            self.counters
                .recovery_keys_total
                .fetch_add(keys.len() as u64, Ordering::Relaxed);
            for (key, version) in keys {
                for &p in &positions {
                    let held = lock(&self.store)
                        .get_latest(s as u32, p as u8, &key)
                        .and_then(|r| record::parse_header(r).ok())
                        .is_some_and(|(h, _)| h.version >= version);
                    if held {
                        continue;
                    }
                    if let AgentResult::Record(rec) = self.route(
                        s,
                        AgentOp::Repair {
                            key: key.clone(),
                            version,
                            position: p as u8,
                        },
                    ) {
                        bytes_done += rec.len() as u64;
                        self.counters
                            .recovery_bytes
                            .fetch_add(rec.len() as u64, Ordering::Relaxed);
                        let _ = lock(&self.store).put(s as u32, rec, 0);
                    }
                }
                bump(&self.counters.recovery_keys_done);
                // Rate limit: stay under recovery_bytes_per_s on average.
                let rate = self.cfg.recovery_bytes_per_s.max(1);
                let due = Duration::from_secs_f64(bytes_done as f64 / rate as f64);
                let spent = started.elapsed();
                if due > spent {
                    std::thread::sleep(due - spent);
                }
            }
        }
        // Take back the stripes this node will lead once ready from their acting agents.
        for s in 0..self.cfg.node_count {
            let view = self.view();
            let will_lead = self
                .placement
                .agent_of(s, |n| n == me || (view[n].0 && view[n].1))
                == Some(me);
            if !will_lead {
                continue;
            }
            while let Some(acting) = self.agent_of(s) {
                let handed = self.call(vec![(
                    acting,
                    Request::Agent(AgentOp::Handover {
                        stripe: s as u32,
                        to: me as u32,
                    }),
                )]);
                if matches!(handed.first(), Some(Ok(Response::Agent(AgentResult::Ok)))) {
                    break;
                }
                std::thread::sleep(Duration::from_millis(50));
            }
        }
        self.ready.store(true, Ordering::Relaxed);
        *lock(&self.recovery) = RecoveryState::Done;
    }
}
