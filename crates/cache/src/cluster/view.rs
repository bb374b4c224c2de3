//! A node's view of the others and its leadership: heartbeats sent and answered, who is up,
//! which stripes this node leads, and the lease that makes that safe (`lease`).

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::carrier::peer::{PeerError, Request, Response};
use crate::cluster::lease;
use crate::node::{bump, lock, sight, Node, Peers, RecoveryState, LEADS_REUSE};

/// How many lease terms a peer may go unheard before this node takes it for down even though
/// its own heartbeat rounds keep coming back late ([`Node::heartbeat_round`]): so a node that
/// stays overloaded still notices a peer cut off, later.
pub(crate) const HEARD_OF_LATE: u32 = 3;

impl Node {
    /// Whether this node leads `stripe` now and has without a break since `since`.
    pub(crate) fn led_throughout(&self, stripe: usize, since: Instant) -> bool {
        self.leads(stripe) && !self.lease_lapsed_since(stripe, since)
    }

    pub fn is_ready(&self) -> bool {
        self.ready.load(Ordering::Relaxed)
    }

    pub fn recovery_state(&self) -> RecoveryState {
        *lock(&self.recovery)
    }

    pub fn is_up(&self, node: usize) -> bool {
        node == self.cfg.id || lock(&self.peers)[node].up
    }

    /// Whether `node`'s connection was refused since it last answered: its process is not
    /// running (a stalled or cut-off node is down without being refused), so it comes back
    /// only as a new process that has lost its memory.
    pub fn is_refused(&self, node: usize) -> bool {
        node != self.cfg.id && lock(&self.peers).leases[node].refused
    }

    /// (up, ready) of every node in this node's view.
    pub fn view(&self) -> Vec<(bool, bool)> {
        let peers = lock(&self.peers);
        (0..self.cfg.node_count)
            .map(|i| {
                if i == self.cfg.id {
                    (true, self.is_ready())
                } else {
                    (peers[i].up, peers[i].ready)
                }
            })
            .collect()
    }

    pub(crate) fn mark_down(&self, node: usize) {
        if node != self.cfg.id {
            lock(&self.peers)[node].up = false;
        }
    }

    /// The agent of a stripe in this node's view (with a coordinator: the holder of its key
    /// as last read, if any).
    pub fn agent_of(&self, stripe: usize) -> Option<usize> {
        if let Some(c) = &self.coord {
            if c.holds(stripe, Instant::now()) {
                return Some(self.cfg.id);
            }
            if let Some(h) = c.holder(stripe).filter(|&h| h != self.cfg.id) {
                return Some(h);
            }
        }
        let ready = self.is_ready();
        let peers = lock(&self.peers);
        let me = self.cfg.id;
        self.placement.agent_of(stripe, |n| {
            if n == me {
                ready
            } else {
                peers[n].up && peers[n].ready
            }
        })
    }

    /// Whether this node leads `stripe` now: it is the agent in its view and has not handed
    /// the stripe to a recovered node. Every operation asks at least twice, so a yes is reused
    /// for up to `LEADS_REUSE` (`leads_checked`).
    pub(crate) fn leads(&self, stripe: usize) -> bool {
        let now = Instant::now();
        if self.leads_remembered(stripe, now) {
            return true;
        }
        self.leads_checked(stripe, now)
    }

    /// The yes `leads_checked` remembers, if it still stands at `now`: no lock taken, so it may
    /// be asked under any (`false` only says that the full check is needed).
    pub(crate) fn leads_remembered(&self, stripe: usize, now: Instant) -> bool {
        self.coord.is_none()
            && self.nanos_after_start(now) < self.leads_until[stripe].load(Ordering::Acquire)
    }

    /// `leads` checked in full at `now`, and a yes remembered until the earlier of
    /// `LEADS_REUSE` later and the end of the promises it counted. Reusing it is safe: no
    /// other node can lead the stripe while those promises hold (the argument of
    /// `lease::Run`). It only delays by that much what a change of this node's view would
    /// stop (a member ahead come back); the heartbeat round checks in full after each
    /// change of its view, and a handover clears the yes under the same lock
    /// (`Node::yield_stripe`), so no operation started after it reuses one.
    pub(crate) fn leads_checked(&self, stripe: usize, now: Instant) -> bool {
        if let Some(c) = &self.coord {
            return lock(&self.yielded[stripe]).is_none() && c.holds(stripe, now);
        }
        let yielded = lock(&self.yielded[stripe]);
        let until = if self.agent_of(stripe) == Some(self.cfg.id) && yielded.is_none() {
            self.lease_until(stripe, now)
        } else {
            None
        };
        let reuse = until.map_or(0, |u| self.nanos_after_start(u.min(now + LEADS_REUSE)));
        self.leads_until[stripe].store(reuse, Ordering::Release);
        until.is_some()
    }

    /// Hands `stripe` to recovered node `to`: this node no longer leads it, and no check
    /// made before reuses a yes.
    pub(crate) fn yield_stripe(&self, stripe: usize, to: usize) {
        let mut y = lock(&self.yielded[stripe]);
        *y = Some(to);
        self.leads_until[stripe].store(0, Ordering::Release);
    }

    fn nanos_after_start(&self, t: Instant) -> u64 {
        u64::try_from(t.saturating_duration_since(self.started).as_nanos()).unwrap_or(u64::MAX)
    }

    /// The lease rules of `lease.rs` for `stripe` at this node: a majority of the stripe's
    /// member nodes vote for it. If so, until when the votes counted stay promised.
    pub(crate) fn lease_until(&self, stripe: usize, now: Instant) -> Option<Instant> {
        let members = &self.lease_members[stripe];
        let me = self.cfg.id;
        let ready = self.is_ready();
        let mut peers = lock(&self.peers);
        let Peers { list, leases, runs } = &mut *peers;
        let until = lease::holds_until(
            members,
            me,
            |i| sight(list, me, ready, i),
            leases,
            now,
            self.cfg.down_after,
            self.started,
        );
        runs[stripe] = lease::Run::next(runs[stripe], now, until);
        until
    }

    /// The fencing token of this node's term of `stripe` (`cluster::coord`); 0 without a
    /// coordinator (members then check nothing).
    pub(crate) fn fence(&self, stripe: usize) -> u64 {
        self.coord
            .as_ref()
            .and_then(|c| c.token(stripe))
            .unwrap_or(0)
    }

    /// One round of leadership through the coordinator: keep this node's lease, take the
    /// stripes it should lead, give back those it should not (after the operations under way
    /// finish, as a handover does).
    pub fn coordinator_round(&self) {
        let Some(c) = &self.coord else { return };
        let me = self.cfg.id;
        let stripes: Vec<(usize, Vec<usize>)> = (0..self.cfg.node_count)
            .filter(|&s| self.lease_members[s].contains(&me))
            .map(|s| (s, self.lease_members[s].clone()))
            .collect();
        let refused: Vec<Option<Instant>> = {
            let peers = lock(&self.peers);
            (0..self.cfg.node_count)
                .map(|i| {
                    let l = &peers.leases[i];
                    l.refused_at.filter(|_| i != me && l.refused)
                })
                .collect()
        };
        let yielded = |s: usize| lock(&self.yielded[s]).is_some();
        let refused = |i: usize| refused[i];
        let view = self.view();
        let up = |i: usize| view[i].0;
        let serviceable = |s: usize| self.stripe_state(s) != "unavailable";
        let steps = c.round(&crate::cluster::coord::RoundInput {
            me,
            nodes: self.cfg.node_count,
            ready: self.is_ready(),
            stripes: &stripes,
            yielded: &yielded,
            refused: &refused,
            up: &up,
            serviceable: &serviceable,
        });
        for (s, crate::cluster::coord::Step::GiveBack(token)) in steps {
            c.stop(s, token);
            *lock(&self.stripes[s]) = None;
            self.key_locks.each_freed_once();
            c.resign(s, token);
        }
        // A stripe handed to a recovered node is its once it holds the stripe's key: from
        // then on this node may take the stripe over again like any other (the heartbeats
        // would end the hand-over only when that node is seen down, and a node cut from the
        // coordinator alone is not).
        for s in 0..self.cfg.node_count {
            let mut y = lock(&self.yielded[s]);
            if y.is_some() && *y == c.holder(s) {
                *y = None;
            }
        }
        if let Some(x) = &self.plans {
            for s in 0..self.cfg.node_count {
                x.set_fence(s, self.fence(s));
            }
        }
    }

    /// The votes for this node in `stripe` now, of its member nodes: (votes, members).
    pub fn lease_votes(&self, stripe: usize) -> (usize, usize) {
        let members = &self.lease_members[stripe];
        let me = self.cfg.id;
        let ready = self.is_ready();
        let peers = lock(&self.peers);
        let view = |i| sight(&peers.list, me, ready, i);
        let now = Instant::now();
        let term = self.cfg.down_after;
        let v = lease::votes(members, me, view, &peers.leases, now, term, self.started)
            .map_or(0, |(others, own)| others + usize::from(own));
        (v, members.len())
    }

    /// Drops this node's index of `stripe` if its lease lapsed after the index was built: a
    /// member voting for it now saw it down since, so the stripe may have been led by another
    /// node meanwhile.
    pub(crate) fn drop_stale_index(&self, stripe: usize) {
        let Some(built) = lock(&self.stripes[stripe]).as_ref().map(|ix| ix.built_at) else {
            return;
        };
        if self.lease_lapsed_since(stripe, built) {
            let mut ix = lock(&self.stripes[stripe]);
            if ix.as_ref().is_some_and(|ix| ix.built_at == built) {
                bump(&self.counters.lease_lapses);
                *ix = None;
                log::debug!("stripe {stripe}: index dropped (the lease lapsed since it was built)");
            }
        }
    }

    /// Whether the stripe may have been led by another node since `since`: a member voting for
    /// this node now saw it down since (leading needs a majority, which shares a member with
    /// the one voting for this node now). A member that restarted since cannot tell what it
    /// saw before it started; for it, this node's own checks of its lease answer: a run of the
    /// lease covering the time since `since` (`lease::Run`) leaves no room for another leader.
    pub(crate) fn lease_lapsed_since(&self, stripe: usize, since: Instant) -> bool {
        if let Some(c) = &self.coord {
            return c.lapsed_since(stripe, since);
        }
        let now = Instant::now();
        let peers = lock(&self.peers);
        let run_covers = peers.runs[stripe].is_some_and(|r| r.covers(since, now));
        self.lease_members[stripe].iter().any(|&m| {
            let l = &peers.leases[m];
            let restarted = peers.list[m].restarted_at.is_some_and(|r| r > since);
            m != self.cfg.id
                && l.grant_holds(now, self.cfg.down_after)
                && l.may_have_led_since(since)
                && (!restarted || !run_covers)
        })
    }

    /// Takes peer `i`'s answer to a heartbeat sent at `sent`, come at `now`: it is up, and its
    /// grant (if it grants) holds from `sent`.
    fn take_heartbeat_answer(&self, i: usize, answer: &Response, sent: Instant, now: Instant) {
        let Response::Heartbeat {
            incarnation,
            ready,
            grant,
            up_for_ms,
            exempt,
        } = answer
        else {
            return;
        };
        let (incarnation, ready) = (*incarnation, *ready);
        let mut peers = lock(&self.peers);
        let Peers { list, leases, .. } = &mut *peers;
        let p = &mut list[i];
        // A peer's engine is connected to on its first answer (its engine host listens before
        // its peer port answers), and again when it restarted or came back.
        if !p.up || p.incarnation != incarnation {
            if let Some(x) = self.plans.as_ref() {
                x.connect(i);
            }
            p.incarnation_since = now;
        }
        if p.incarnation != incarnation {
            p.restarted_at = Some(now);
        }
        if !p.up {
            p.up_since = now;
        }
        if !(p.up && p.ready) && ready {
            p.serving_since = now;
        }
        p.up = true;
        p.ready = ready;
        p.incarnation = incarnation;
        p.last_ok = now;
        leases[i].refused = false;
        if *grant {
            let exempt = exempt.iter().map(|&n| n as usize).collect();
            let up_for = Duration::from_millis(*up_for_ms);
            leases[i].on_grant(sent, now, up_for, exempt);
        }
    }

    /// One round of heartbeats; drops the index of stripes this node no longer leads.
    pub fn heartbeat_round(&self) {
        let others: Vec<usize> = (0..self.cfg.node_count)
            .filter(|&i| i != self.cfg.id)
            .collect();
        let from = self.cfg.id as u32;
        // A peer cut off silently holds its heartbeat until the call's deadline, and no longer:
        // the heartbeats to every peer leave together and share that one deadline, so the round
        // lasts at most one timeout however many peers are silent. Each answer is taken as it
        // comes, not at the round's end: a grant taken only after a silent peer's deadline
        // (half a term) came too late to follow the last round's grants without a gap when
        // their term ran out, so every stripe's lease lapsed for a moment each round while one
        // peer was silent (a node restarting under bulk work, a peer cut off).
        let sent = Instant::now();
        let mut taken = vec![false; others.len()];
        let replies = self.heartbeat_transport.call_many_early(
            others
                .iter()
                .map(|&i| (i, Request::Heartbeat { from }))
                .collect(),
            &mut |at, r| {
                if let (Some(&i), Response::Heartbeat { grant, .. }) = (others.get(at), r) {
                    self.take_heartbeat_answer(i, r, sent, Instant::now());
                    taken[at] = true;
                    // A lease run goes on only through a check made while the promises it
                    // counted last still hold (`lease::Run`): checked as each grant comes, the
                    // run goes on even when nothing else checks the lease before the last
                    // round's promises end (no operation on the stripe meanwhile, a silent
                    // peer holding the round up to its deadline).
                    if *grant {
                        for s in 0..self.cfg.node_count {
                            self.leads_checked(s, Instant::now());
                        }
                    }
                }
            },
        );
        let now = Instant::now();
        // A round that came back well after its deadline was held up here (this node's loop or
        // this thread stalled: a lock held long, a starved CPU): its heartbeats may have left
        // late, or their answers waited unread. Its missing answers say nothing of the peers,
        // so they mark none down, unless a peer has been unheard for `HEARD_OF_LATE` terms.
        let on_time =
            now.duration_since(sent) <= self.cfg.heartbeat_timeout() + self.cfg.down_after / 4;
        {
            let mut peers = lock(&self.peers);
            let Peers { list, leases, .. } = &mut *peers;
            for ((&i, r), taken) in others.iter().zip(replies).zip(taken) {
                let p = &mut list[i];
                match r {
                    _ if taken => {}
                    Err(PeerError::Io { ref source, .. })
                        if source.kind() == std::io::ErrorKind::ConnectionRefused =>
                    {
                        p.up = false;
                        leases[i].refused = true;
                        leases[i].refused_at = Some(now);
                    }
                    _ => {
                        let unheard = now.duration_since(p.last_ok);
                        if unheard >= self.cfg.down_after
                            && (on_time || unheard >= self.cfg.down_after * HEARD_OF_LATE)
                        {
                            p.up = false;
                        }
                    }
                }
            }
        }
        for s in 0..self.cfg.node_count {
            let mut y = lock(&self.yielded[s]);
            if y.is_some_and(|to| !self.is_up(to)) {
                *y = None;
            }
        }
        for s in 0..self.cfg.node_count {
            if !self.leads_checked(s, Instant::now()) {
                let mut ix = lock(&self.stripes[s]);
                if ix.is_some() {
                    *ix = None;
                    log::debug!("stripe {s}: index dropped (not leading)");
                }
            }
        }
    }

    /// Runs heartbeats, expiry sweeps and (with `--recover`) recovery in background threads.
    pub fn start_background(self: &Arc<Self>) {
        let me = Arc::clone(self);
        std::thread::Builder::new()
            .name("heartbeat".into())
            .spawn(move || loop {
                me.heartbeat_round();
                std::thread::sleep(me.cfg.heartbeat);
            })
            .expect("spawn heartbeat thread");
        let me = Arc::clone(self);
        std::thread::Builder::new()
            .name("expiry".into())
            .spawn(move || loop {
                std::thread::sleep(Duration::from_secs(1));
                me.sweep();
                me.fill_holes(me.cfg.recovery_bytes_per_s.max(1));
                me.rewhole(me.cfg.recovery_bytes_per_s.max(1));
                me.redeliver_deltas();
                me.announce_commits();
                me.heal_gapped_pages();
                me.release_kept_deltas();
            })
            .expect("spawn expiry thread");
        if self.coord.is_some() {
            let me = Arc::clone(self);
            std::thread::Builder::new()
                .name("coordinator".into())
                .spawn(move || loop {
                    me.coordinator_round();
                    std::thread::sleep(me.cfg.heartbeat);
                })
                .expect("spawn coordinator thread");
        }
        if self.cfg.recover {
            let me = Arc::clone(self);
            std::thread::Builder::new()
                .name("recovery".into())
                .spawn(move || me.recover())
                .expect("spawn recovery thread");
        }
    }

    /// The answer to a heartbeat from `from`, at once: it never waits for a lock that an
    /// operation holds.
    pub(crate) fn heartbeat(&self, from: usize) -> Response {
        let me = self.cfg.id;
        let term = self.cfg.down_after;
        let ready = self.is_ready();
        // (Whether this answer grants `from` again, and since when this node has seen it up
        // and ready.)
        let resumes = (from < self.cfg.node_count)
            .then(|| {
                let peers = lock(&self.peers);
                let view = |i| sight(&peers.list, me, ready, i);
                let now = Instant::now();
                let (p, l) = (&peers.list[from], &peers.leases[from]);
                let serving = p.up_since.max(p.serving_since);
                // Granting again: after a refusal, or after a break in which this node saw it
                // down without answering it (its latest grant is older than the break).
                let again = !l.granting || l.granted_to.is_none_or(|g| g < serving);
                (lease::grants(view, &peers.leases, me, from, now, term, self.started) && again)
                    .then_some(serving)
            })
            .flatten();
        if resumes
            .is_some_and(|since| !self.key_locks.all_free_now() && !self.drained_for(from, since))
        {
            // This node may have stood in for `from` while it saw it down: the operations
            // under way here finish before `from` may lead again (each checks `leads` under
            // its key lock, and `from` is up in this view now). Until each key lock has been
            // free once since, `from` is refused, at once: an answer held for a lock (an
            // operation waiting for an index rebuild holds its key lock for the rebuild,
            // seconds at millions of keys) made `from` see this node down, and in turn drop
            // its own index and hold its locks for its own rebuild.
            return Response::Heartbeat {
                incarnation: self.incarnation,
                ready,
                grant: false,
                up_for_ms: 0,
                exempt: Vec::new(),
            };
        }
        if from < self.cfg.node_count {
            lock(&self.drains).wanted[from] = None;
        }
        let now = Instant::now();
        let mut peers = lock(&self.peers);
        let Peers { list, leases, .. } = &mut *peers;
        let (grant, exempt, _) = lease::answer(
            |i| sight(list, me, ready, i),
            leases,
            me,
            from,
            now,
            term,
            self.started,
        );
        let up_for_ms = if grant {
            now.saturating_duration_since(list[from].up_since)
                .as_millis() as u64
        } else {
            0
        };
        Response::Heartbeat {
            incarnation: self.incarnation,
            ready,
            grant,
            up_for_ms,
            exempt: exempt.into_iter().map(|n| n as u32).collect(),
        }
    }

    /// Whether every key lock has been free once since this node first wanted to grant
    /// `from` again, having seen it up and ready since `serving` (it may have stood in for it
    /// before that, and a wait that began then may not cover what it started meanwhile); if
    /// not, starts that wait (on a thread of its own, one at a time) unless one that began
    /// since is under way.
    fn drained_for(&self, from: usize, serving: Instant) -> bool {
        let mut d = lock(&self.drains);
        let wanted = match d.wanted[from] {
            Some(w) if w >= serving => w,
            _ => *d.wanted[from].insert(Instant::now()),
        };
        if d.done_from.is_some_and(|t| t >= wanted) {
            return true;
        }
        if !d.running {
            d.running = true;
            let (locks, drains) = (self.key_locks.clone(), Arc::clone(&self.drains));
            let spawned = std::thread::Builder::new()
                .name("drain".into())
                .spawn(move || {
                    let began = Instant::now();
                    locks.each_freed_once();
                    let mut d = lock(&drains);
                    d.done_from = Some(began);
                    d.running = false;
                });
            if let Err(e) = spawned {
                log::warn!("node {}: no thread for a key-lock wait: {e}", self.cfg.id);
                d.running = false;
            }
        }
        false
    }

    /// The state of a stripe in this node's view: `whole`, `recovering` (a member is
    /// rebuilding), `degraded` (≤ m positions down) or `unavailable`.
    pub fn stripe_state(&self, stripe: usize) -> &'static str {
        let view = self.view();
        let down = (0..self.n())
            .filter(|&p| !view[self.placement.node_of(stripe, p)].0)
            .count();
        let recovering = (0..self.n()).any(|p| {
            let v = view[self.placement.node_of(stripe, p)];
            v.0 && !v.1
        });
        crate::cluster::placement::stripe_state(down, self.parity(), recovering)
    }
}
