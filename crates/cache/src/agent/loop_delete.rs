//! Deletes run to completion on the client event loop.
//!
//! A `delete` at the stripe's agent does what a worker's does (`Node::op_delete`), without a
//! worker: under the key's lock, which the loop holds across the replies, the agent takes the
//! entry out of its index and finishes a new version; every member that is up (this node
//! included) is sent `Delete` of the key's records older than it, and once they have answered,
//! or the loop stops waiting for them, the client is told `DELETED`. As on a worker, a member's
//! failure to answer does not fail the delete: its records are older than a version the
//! index finished, and the index is what answers reads. Should the lease lapse before the
//! answers are in (a member that votes for this node saw it down since the delete began),
//! another node may have led the stripe meanwhile and adopted the records before they went:
//! the delete is in doubt and answered so.

use parking_lot::{ArcMutexGuard, RawMutex};

use crate::carrier::peer::Request;
use crate::node::{bump, lock, Node};
use crate::time;

/// What the client loop can do with a `delete`.
#[derive(Debug)]
pub enum LoopDeleteStart {
    /// Run it on a worker (the full path).
    Worker,
    /// Another node leads the key's stripe: send it the request.
    Forward(usize),
    /// No live value under the key (`NOT_FOUND`).
    NotFound,
    /// The CAS value given does not match (`EXISTS`; meta deletes).
    Exists,
    /// The members' records to delete: [`LoopDelete::remote`] (none left when every member
    /// up was this node; the loop ends it at once).
    Send(Box<LoopDelete>),
}

/// A delete waiting for the members' answers.
pub struct LoopDelete {
    stripe: usize,
    /// The fencing token of the term the delete began in (0: none).
    fence: u64,
    key: Vec<u8>,
    /// The version finished in the index: the members drop the key's records older than it.
    version: u64,
    /// (node, node) of each member to send `Delete` (the position field is the node).
    pub remote: Vec<(usize, usize)>,
    /// When the delete began: it is done if this node has led the stripe since without a
    /// break.
    started: std::time::Instant,
    _key_guard: ArcMutexGuard<RawMutex, ()>,
}

impl std::fmt::Debug for LoopDelete {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LoopDelete")
            .field("stripe", &self.stripe)
            .field("version", &self.version)
            .field("remote", &self.remote)
            .finish_non_exhaustive()
    }
}

impl LoopDelete {
    /// The `Delete` a member is sent.
    pub fn request(&self) -> Request {
        let req = Request::Delete {
            stripe: self.stripe as u32,
            key: self.key.clone(),
            version: self.version,
        };
        crate::carrier::peer::fenced(self.fence, req)
    }
}

impl Node {
    /// Starts `delete key` (with `compare_cas`: only if its CAS value matches) on the client
    /// loop.
    pub fn loop_delete_start(&self, key: &[u8], compare_cas: Option<u64>) -> LoopDeleteStart {
        let stripe = self.placement.stripe_of(key);
        if !self.leads(stripe) {
            return match self.agent_of(stripe) {
                Some(agent) if agent != self.cfg.id => LoopDeleteStart::Forward(agent),
                _ => LoopDeleteStart::Worker,
            };
        }
        let Some(guard) = self.key_locks[crate::node::key_lock_index(key)].try_lock_arc() else {
            return LoopDeleteStart::Worker;
        };
        self.drop_stale_index(stripe);
        if self.down_positions(stripe) > self.parity() {
            return LoopDeleteStart::Worker;
        }
        let started = std::time::Instant::now();
        let oldest = self
            .oldest_live_us
            .load(std::sync::atomic::Ordering::Relaxed);
        let version = {
            let mut g = lock(&self.stripes[stripe]);
            let Some(ix) = g.as_mut() else {
                return LoopDeleteStart::Worker;
            };
            let now_us = time::now_micros();
            // An expired or flushed entry: the worker deletes its records and answers.
            let Ok(current) = ix.lookup_live(key, time::secs_of(now_us), now_us, oldest) else {
                return LoopDeleteStart::Worker;
            };
            let Some(e) = current else {
                return LoopDeleteStart::NotFound;
            };
            if compare_cas.is_some_and(|c| c != e.version) {
                return LoopDeleteStart::Exists;
            }
            ix.remove(key);
            ix.release_held(key);
            let v = ix.next_version(now_us);
            ix.finish(v);
            v
        };
        let d = LoopDelete {
            stripe,
            fence: self.fence(stripe),
            key: key.to_vec(),
            version,
            remote: Vec::new(),
            started,
            _key_guard: guard,
        };
        let mut remote = Vec::new();
        for member in self.member_nodes(stripe, self.n()) {
            if member == self.cfg.id {
                self.local_messages
                    .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                self.handle_peer(d.request());
            } else if self.is_up(member) {
                remote.push((member, member));
            }
        }
        LoopDeleteStart::Send(Box::new(LoopDelete { remote, ..d }))
    }

    /// Ends a delete whose members answered (or were waited for long enough): true if this node
    /// has led the stripe throughout (`DELETED`), false if the delete is in doubt.
    pub fn loop_delete_finish(&self, d: LoopDelete) -> bool {
        if self.led_throughout(d.stripe, d.started) {
            log::debug!(
                "stripe {}: {} deleted on the loop (v{})",
                d.stripe,
                String::from_utf8_lossy(&d.key),
                d.version
            );
            return true;
        }
        bump(&self.counters.lease_lost_ops);
        bump(&self.counters.writes_in_doubt);
        false
    }
}
