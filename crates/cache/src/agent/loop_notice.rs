//! Deletes, touches and gets that touch (`gat`) run to completion on the client event loop.
//!
//! Both change the agent's index under the key's lock, then tell each member node that is up
//! (`Delete` of the key's records older than a version, or `Touch` of their expiry), and neither
//! fails for a member that does not answer: the index is what answers reads, and a worker's
//! delete or touch does not fail on them either.
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

use crate::agent::keylock::KeyGuard;
use crate::agent::loop_read::LoopPending;

use crate::agent::index::{Entry, StripeIndex};
use crate::agent::loop_read::LoopValue;
use crate::carrier::peer::Request;
use crate::node::{bump, lock, Node};
use crate::record::Kind;
use crate::time;

/// What the client loop can do with a `delete` or a `touch`.
#[derive(Debug)]
pub enum LoopNoticeStart {
    /// Run it on a worker (the full path).
    Worker,
    /// Another node leads the key's stripe: send it the request.
    Forward(usize),
    /// No live value under the key (`NOT_FOUND`).
    NotFound,
    /// The CAS value given does not match (`EXISTS`; meta deletes).
    Exists,
    /// The members to tell: [`LoopNotice::remote`] (none left when every member up was this
    /// node; the loop ends it at once).
    Send(Box<LoopNotice>),
}

/// What the client loop can do with a `gat` (a get that touches).
#[derive(Debug)]
pub enum LoopGatStart {
    /// Run it on a worker (the full path).
    Worker,
    /// Another node leads the key's stripe: send it the request.
    Forward(usize),
    /// No live value under the key.
    Miss,
    /// The touch to send ([`LoopNotice::remote`]) and the value, its expiry the new one: the
    /// reply once the members have answered.
    Send(Box<LoopNotice>, Box<LoopValue>),
    /// A coded value: its data chunks to read first ([`LoopGatFetch::read`]), the key's lock
    /// held by the touch; [`Node::loop_gat_resume`] then sends the touch.
    Fetch(Box<LoopGatFetch>),
}

/// A `gat` of a coded value on the loop: its chunks read, then its touch sent, all under the
/// key's lock (which the touch holds).
pub struct LoopGatFetch {
    pub read: LoopPending,
    touch: LoopNotice,
    /// The positions the touch tells.
    reach: usize,
}

impl std::fmt::Debug for LoopGatFetch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LoopGatFetch")
            .field("touch", &self.touch)
            .field("remote", &self.read.remote)
            .finish_non_exhaustive()
    }
}

/// A delete or a touch waiting for the members' answers.
pub struct LoopNotice {
    stripe: usize,
    /// The fencing token of the term the delete began in (0: none).
    fence: u64,
    key: Vec<u8>,
    /// A delete: the version finished in the index (the members drop the key's records older
    /// than it). A touch: the version of the records touched.
    version: u64,
    /// A touch: the new expiry (absolute); `None`: a delete.
    touch: Option<i64>,
    /// (node, node) of each member to send `Delete` (the position field is the node).
    pub remote: Vec<(usize, usize)>,
    /// When the delete began: it is done if this node has led the stripe since without a
    /// break.
    started: std::time::Instant,
    _key_guard: KeyGuard,
}

impl std::fmt::Debug for LoopNotice {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LoopNotice")
            .field("stripe", &self.stripe)
            .field("version", &self.version)
            .field("remote", &self.remote)
            .finish_non_exhaustive()
    }
}

impl LoopNotice {
    /// The `Delete` or `Touch` a member is sent.
    pub fn request(&self) -> Request {
        let (stripe, key, version) = (self.stripe as u32, self.key.clone(), self.version);
        let req = match self.touch {
            Some(exptime) => Request::Touch {
                stripe,
                key,
                version,
                exptime,
            },
            None => Request::Delete {
                stripe,
                key,
                version,
            },
        };
        crate::carrier::peer::fenced(self.fence, req)
    }

    /// Whether it is a touch (else a delete).
    pub fn is_touch(&self) -> bool {
        self.touch.is_some()
    }
}

impl Node {
    /// Starts `delete key` (with `compare_cas`: only if its CAS value matches) on the client
    /// loop.
    pub fn loop_delete_start(&self, key: &[u8], compare_cas: Option<u64>) -> LoopNoticeStart {
        let begun = self.loop_notice_begin(key, |ix, e, now_us| {
            if compare_cas.is_some_and(|c| c != e.cas()) {
                return Err(LoopNoticeStart::Exists);
            }
            ix.remove(key);
            ix.release_held(key);
            let v = ix.next_version(now_us);
            ix.finish(v);
            Ok(v)
        });
        match begun {
            Ok((mut d, version)) => {
                d.version = version;
                LoopNoticeStart::Send(Box::new(self.loop_notice_send(d, self.n())))
            }
            Err(answer) => answer,
        }
    }

    /// Starts `touch key exptime` on the client loop: the entry's expiry changed in the index,
    /// then each member node that holds the value's records told (a whole value's location
    /// lies at every position of its stripe).
    pub fn loop_touch_start(&self, key: &[u8], exptime: i64) -> LoopNoticeStart {
        let stripe = self.placement.stripe_of(key);
        let begun = self.loop_notice_begin(key, |ix, e, now_us| {
            let abs = time::absolute_exptime(exptime, time::secs_of(now_us));
            ix.set_exptime(key, abs);
            ix.mark_holes(key, e.version, self.touch_misses(stripe, &e));
            Ok((e, abs))
        });
        match begun {
            Ok((mut t, (e, abs))) => {
                t.version = e.version;
                t.touch = Some(abs);
                let reach = self.touch_reach(&e);
                LoopNoticeStart::Send(Box::new(self.loop_notice_send(t, reach)))
            }
            Err(answer) => answer,
        }
    }

    /// Starts `gat`/`gats` (or a meta get with a touch) of `key` on the client loop: a touch
    /// (above) of a value this node holds (a whole value at its home, or a replica), read from
    /// its own store under the key's lock, which the touch holds to its end, so no write comes
    /// between the value read and the expiry changed. A coded value's chunks are read first
    /// ([`LoopGatStart::Fetch`]), under the same lock; a record that cannot be read here goes
    /// to a worker.
    pub fn loop_gat_start(&self, key: &[u8], exptime: i64) -> LoopGatStart {
        let stripe = self.placement.stripe_of(key);
        let k = self.k();
        let begun = self.loop_notice_begin(key, |ix, e, now_us| {
            let own = self.own_position(stripe, &e);
            // A coded value is read from its data members (every one up), the lock held.
            let readable = e.kind == Kind::Coded
                && (0..k).all(|p| self.is_up(self.placement.node_of(stripe, p)));
            if own.is_none() && !readable {
                return Err(LoopNoticeStart::Worker);
            }
            let abs = time::absolute_exptime(exptime, time::secs_of(now_us));
            ix.set_exptime(key, abs);
            ix.mark_holes(key, e.version, self.touch_misses(stripe, &e));
            Ok((e, abs, own))
        });
        let (mut t, (e, abs, own)) = match begun {
            Ok(b) => b,
            Err(LoopNoticeStart::NotFound) => return LoopGatStart::Miss,
            Err(LoopNoticeStart::Forward(agent)) => return LoopGatStart::Forward(agent),
            Err(_) => return LoopGatStart::Worker,
        };
        let reach = self.touch_reach(&e);
        t.version = e.version;
        t.touch = Some(abs);
        let Some(own) = own else {
            let Some(read) = self.loop_read_pending(stripe, key, e, (0..k).collect()) else {
                return LoopGatStart::Worker;
            };
            let fetch = Box::new(LoopGatFetch {
                read,
                touch: t,
                reach,
            });
            if fetch.read.remote.is_empty() {
                return self.loop_gat_resume(fetch);
            }
            return LoopGatStart::Fetch(fetch);
        };
        // The expiry is changed in the index: a worker that runs the request instead changes
        // it again and tells the members.
        let Some(value) = self.with_own_record(stripe, key, &e, own, <[u8]>::to_vec) else {
            return LoopGatStart::Worker;
        };
        self.local_messages
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let value = LoopValue {
            key: key.to_vec(),
            flags: e.flags,
            cas: e.cas(),
            exptime: abs,
            value,
        };
        LoopGatStart::Send(Box::new(self.loop_notice_send(t, reach)), Box::new(value))
    }

    /// Sends the touch of a coded value's `gat` once its chunks are in
    /// ([`LoopGatStart::Fetch`]); `Worker` if the value could not be read (the lease lost, a
    /// chunk of another version): a worker runs the request.
    pub fn loop_gat_resume(&self, fetch: Box<LoopGatFetch>) -> LoopGatStart {
        let LoopGatFetch { read, touch, reach } = *fetch;
        let exptime = touch.touch.unwrap_or(0);
        let Some(mut value) = self.loop_read_finish(read) else {
            return LoopGatStart::Worker;
        };
        value.exptime = exptime;
        LoopGatStart::Send(
            Box::new(self.loop_notice_send(touch, reach)),
            Box::new(value),
        )
    }

    /// The position of `e`'s stripe whose record this node holds whole: a whole value's home
    /// (position 0), or a replica here; `None` for a coded value, or a replica held elsewhere.
    pub(crate) fn own_position(&self, stripe: usize, e: &Entry) -> Option<usize> {
        match e.kind {
            Kind::Whole => (self.placement.node_of(stripe, 0) == self.cfg.id).then_some(0),
            Kind::Replica => {
                (0..e.positions).find(|&p| self.placement.node_of(stripe, p) == self.cfg.id)
            }
            Kind::Coded => None,
        }
    }

    /// How many positions of `e`'s stripe a touch tells: a whole value's location record lies
    /// at every position, other values' records at their own.
    pub(crate) fn touch_reach(&self, e: &Entry) -> usize {
        if e.kind == Kind::Whole {
            self.n()
        } else {
            e.positions
        }
    }

    /// What a delete and a touch begin with: this node leads the key's stripe (else the agent
    /// to forward to), holds the key's lock (else a worker), and `change` runs on the index
    /// with the key's live entry (`NOT_FOUND` without one; an expired or flushed one goes to
    /// the worker, which deletes its records). The notice it returns has no version, expiry
    /// or steps yet.
    fn loop_notice_begin<T>(
        &self,
        key: &[u8],
        change: impl FnOnce(&mut StripeIndex, Entry, u64) -> Result<T, LoopNoticeStart>,
    ) -> Result<(LoopNotice, T), LoopNoticeStart> {
        let stripe = self.placement.stripe_of(key);
        if !self.leads(stripe) {
            return Err(match self.agent_of(stripe) {
                Some(agent) if agent != self.cfg.id => LoopNoticeStart::Forward(agent),
                _ => LoopNoticeStart::Worker,
            });
        }
        let Some(guard) = self.key_locks.try_lock(crate::node::key_lock_index(key)) else {
            return Err(LoopNoticeStart::Worker);
        };
        self.drop_stale_index(stripe);
        if self.down_positions(stripe) > self.parity() {
            return Err(LoopNoticeStart::Worker);
        }
        let started = std::time::Instant::now();
        let oldest = self
            .oldest_live_us
            .load(std::sync::atomic::Ordering::Relaxed);
        let changed = {
            let mut g = lock(&self.stripes[stripe]);
            let Some(ix) = g.as_mut() else {
                return Err(LoopNoticeStart::Worker);
            };
            let now_us = time::now_micros();
            let Ok(current) = ix.lookup_live(key, time::secs_of(now_us), now_us, oldest) else {
                return Err(LoopNoticeStart::Worker);
            };
            let Some(e) = current else {
                return Err(LoopNoticeStart::NotFound);
            };
            change(ix, e, now_us)?
        };
        let notice = LoopNotice {
            stripe,
            fence: self.fence(stripe),
            key: key.to_vec(),
            version: 0,
            touch: None,
            remote: Vec::new(),
            started,
            _key_guard: guard,
        };
        Ok((notice, changed))
    }

    /// `n`'s request handled here for this node's own positions among the first `positions`
    /// of its stripe, and the other member nodes that are up as its remote steps.
    fn loop_notice_send(&self, n: LoopNotice, positions: usize) -> LoopNotice {
        let mut remote = Vec::new();
        for member in self.member_nodes(n.stripe, positions) {
            if member == self.cfg.id {
                self.local_messages
                    .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                self.handle_peer(n.request());
            } else if self.is_up(member) {
                remote.push((member, member));
            }
        }
        LoopNotice { remote, ..n }
    }

    /// Ends a delete or touch whose members answered (or were waited for long enough): true if
    /// this node has led the stripe throughout (`DELETED`, `TOUCHED`); false if not (a delete
    /// is in doubt then; a touch, which may be applied again, goes to a worker).
    pub fn loop_notice_finish(&self, d: LoopNotice) -> bool {
        if self.led_throughout(d.stripe, d.started) {
            log::debug!(
                "stripe {}: {} {} on the loop (v{})",
                d.stripe,
                String::from_utf8_lossy(&d.key),
                if d.is_touch() { "touched" } else { "deleted" },
                d.version
            );
            return true;
        }
        bump(&self.counters.lease_lost_ops);
        if !d.is_touch() {
            bump(&self.counters.writes_in_doubt);
        }
        false
    }
}
