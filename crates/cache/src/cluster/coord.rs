//! Leadership from a coordinator (`--coordinator etcd://…`), for clusters that span hosts: the
//! service, not the heartbeats, says who leads each stripe, and its revision numbers the
//! leader's terms so that members can refuse an old leader (a fencing token).
//!
//! - **Registration.** Each node holds a lease of the coordinator (a time to live, kept alive
//!   every heartbeat period) and a key under it saying whether it is ready. A node that stops
//!   keeping its lease alive (dead, stalled, cut from the coordinator) loses it, and with it
//!   every key bound to it, once its time to live has passed on the coordinator's clock.
//! - **Leading.** A stripe's leadership key is created bound to the creator's lease, in a
//!   transaction that succeeds only if the key is absent, so one node holds it at a time. Its
//!   creation revision is the term's **fencing token**. The node that tries is the stripe's
//!   preferred agent: the first member, in position order, registered as ready. A node leads
//!   while it holds the key and its own lease is still alive by its own clock: counted from the
//!   *send* time of the keep-alive that the coordinator last answered, minus a margin, so it
//!   stops before the coordinator could let the key go (clocks need only run at the same rate).
//! - **Giving back.** A node that holds a stripe whose preferred agent is another node (one
//!   ahead of it became ready again), or that handed the stripe to a recovered node, stops
//!   leading, lets the operations under way finish, then deletes the key if it is still its
//!   own term's; the preferred node then creates it, with a higher token.
//! - **Fast failover.** A refused connection is proof that a process is not running: a node
//!   that sees one revokes that node's lease at once, which deletes its keys, so a successor
//!   takes over within a heartbeat or two of a SIGKILL instead of after the time to live.
//! - **Fencing.** Every chunk request of a term carries its token (`Request::Fenced`); a member
//!   remembers the highest token it has seen for each stripe and refuses a lower one, so an
//!   agent that was paused past its lease cannot write or read behind its successor's back.
//! - **A new term rebuilds the index** from the members' records, as any takeover does.
//!
//! The [`Coordinator`] trait is the few operations this needs; `etcd.rs` implements it over an
//! etcd cluster. The unit tests run the rules over an in-memory stand-in with etcd's semantics.

use std::sync::Mutex;
use std::time::{Duration, Instant};

/// A coordinator call that failed (unreachable, timed out, refused).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("coordinator: {0}")]
pub struct CoordError(pub String);

/// A node's registration: its lease and whether it is ready to lead.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Registration {
    pub lease: i64,
    pub ready: bool,
}

/// The holder of a stripe's leadership key.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Holder {
    pub node: usize,
    pub lease: i64,
    /// The key's creation revision: the term's fencing token.
    pub token: u64,
}

/// The coordinator's registrations and leadership keys, read at once.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Snapshot {
    /// By node id.
    pub nodes: Vec<Option<Registration>>,
    /// By stripe.
    pub leaders: Vec<Option<Holder>>,
}

/// The operations leadership needs from a coordinator (etcd's semantics).
pub trait Coordinator: Send + Sync + std::fmt::Debug {
    /// A new lease of about `ttl`: its id and the time to live granted.
    fn grant(&self, ttl: Duration) -> Result<(i64, Duration), CoordError>;
    /// Renews `lease`: the time to live it has again, or `None` if it is gone.
    fn keep_alive(&self, lease: i64) -> Result<Option<Duration>, CoordError>;
    /// Writes node `node`'s registration, bound to its lease.
    fn register(&self, node: usize, reg: Registration) -> Result<(), CoordError>;
    /// Every registration and leadership key of a cluster of `nodes` nodes (as many stripes).
    fn snapshot(&self, nodes: usize) -> Result<Snapshot, CoordError>;
    /// Creates `stripe`'s leadership key for `node` bound to `lease` if it is absent: the new
    /// term's token, or `None` when the key exists.
    fn acquire(&self, stripe: usize, node: usize, lease: i64) -> Result<Option<u64>, CoordError>;
    /// Deletes `stripe`'s leadership key if it is still the term `token`'s.
    fn resign(&self, stripe: usize, token: u64) -> Result<(), CoordError>;
    /// Revokes a lease (a dead node's): its keys are deleted.
    fn revoke(&self, lease: i64) -> Result<(), CoordError>;
}

/// A term this node holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Term {
    pub token: u64,
    /// When it was created (after the coordinator answered).
    pub began: Instant,
}

/// What one node knows of its leadership through a coordinator.
#[derive(Debug, Default)]
pub struct LeaderState {
    /// This node's lease, and until when it holds by this node's clock.
    pub lease: Option<i64>,
    pub valid_until: Option<Instant>,
    /// The readiness last registered.
    pub registered: Option<bool>,
    /// The coordinator's state as last read.
    pub snapshot: Snapshot,
    /// By stripe: the term this node holds.
    pub terms: Vec<Option<Term>>,
    /// Leases this node revoked (each once).
    pub revoked: Vec<i64>,
    /// When this node first saw each registration's lease (only a refusal seen after it
    /// proves that its node died: a node registers once it listens).
    pub first_seen: std::collections::HashMap<i64, Instant>,
    /// The last coordinator error, for `stats inec`.
    pub last_error: Option<String>,
}

/// Leadership through a coordinator: the service and what this node knows.
#[derive(Debug)]
pub struct Leadership {
    pub backend: Box<dyn Coordinator>,
    pub state: Mutex<LeaderState>,
    /// The time to live asked for.
    pub ttl: Duration,
}

/// The share of a lease's time to live a node does not count on (clock rate differences,
/// the time between the coordinator's answer and its use).
pub const MARGIN_DIVISOR: u32 = 8;

/// What a round decided for one stripe (the caller acts on it).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Step {
    /// Stop leading, let operations under way finish, then resign the term.
    GiveBack(u64),
}

/// What a node tells a round about itself and the stripes it is a member of.
pub struct RoundInput<'a> {
    pub me: usize,
    pub nodes: usize,
    pub ready: bool,
    /// The stripes this node is a member of, each with its member nodes in position order.
    pub stripes: &'a [(usize, Vec<usize>)],
    /// Whether this node handed the stripe to a recovered node (it must not lead it).
    pub yielded: &'a dyn Fn(usize) -> bool,
    /// For a node whose connection was refused since it last answered (not running): when.
    pub refused: &'a dyn Fn(usize) -> Option<Instant>,
    /// Whether this node's heartbeats see a node up.
    pub up: &'a dyn Fn(usize) -> bool,
    /// Whether a stripe can be served in this node's view (no more positions down than the
    /// code tolerates): a node that cannot serve a stripe does not lead it.
    pub serviceable: &'a dyn Fn(usize) -> bool,
}

impl std::fmt::Debug for RoundInput<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RoundInput")
            .field("me", &self.me)
            .field("ready", &self.ready)
            .field("stripes", &self.stripes)
            .finish_non_exhaustive()
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl Leadership {
    pub fn new(backend: Box<dyn Coordinator>, ttl: Duration, nodes: usize) -> Leadership {
        Leadership {
            backend,
            state: Mutex::new(LeaderState {
                terms: vec![None; nodes],
                ..LeaderState::default()
            }),
            ttl,
        }
    }

    /// Whether this node leads `stripe` at `now`: it holds a term and its lease is alive by
    /// its own clock.
    pub fn holds(&self, stripe: usize, now: Instant) -> bool {
        let st = lock(&self.state);
        st.valid_until.is_some_and(|v| now < v) && st.terms.get(stripe).is_some_and(Option::is_some)
    }

    /// The token of the term this node holds of `stripe`, if any.
    pub fn token(&self, stripe: usize) -> Option<u64> {
        lock(&self.state)
            .terms
            .get(stripe)
            .copied()
            .flatten()
            .map(|t| t.token)
    }

    /// Whether this node's term of `stripe` began after `since` (or it holds none): another
    /// node may have led the stripe since.
    pub fn lapsed_since(&self, stripe: usize, since: Instant) -> bool {
        lock(&self.state)
            .terms
            .get(stripe)
            .copied()
            .flatten()
            .is_none_or(|t| t.began > since)
    }

    /// The holder of `stripe`'s key as last read.
    pub fn holder(&self, stripe: usize) -> Option<usize> {
        lock(&self.state)
            .snapshot
            .leaders
            .get(stripe)
            .copied()
            .flatten()
            .map(|h| h.node)
    }

    /// The last error a coordinator call returned, if any.
    pub fn last_error(&self) -> Option<String> {
        lock(&self.state).last_error.clone()
    }

    fn note(&self, e: CoordError) {
        log::debug!("{e}");
        lock(&self.state).last_error = Some(e.0);
    }

    /// Keeps this node's lease alive (or takes a new one) and its registration current.
    fn keep(&self, me: usize, ready: bool) -> Result<(), CoordError> {
        let lease = lock(&self.state).lease;
        let sent = Instant::now();
        let ttl = match lease {
            Some(l) => self.backend.keep_alive(l)?,
            None => None,
        };
        let (lease, ttl) = match (lease, ttl) {
            (Some(l), Some(ttl)) => (l, ttl),
            _ => {
                // Lost (or never had) a lease: every term bound to it is gone.
                let sent_new = Instant::now();
                let (l, ttl) = self.backend.grant(self.ttl)?;
                let mut st = lock(&self.state);
                if st.lease.is_some() {
                    log::debug!("node {me}: coordinator lease lost; a new one");
                }
                st.terms.iter_mut().for_each(|t| *t = None);
                st.lease = Some(l);
                st.registered = None;
                st.valid_until = Some(sent_new + ttl - ttl / MARGIN_DIVISOR);
                drop(st);
                (l, Duration::ZERO)
            }
        };
        {
            let mut st = lock(&self.state);
            if !ttl.is_zero() {
                st.valid_until = Some(sent + ttl - ttl / MARGIN_DIVISOR);
            }
        }
        if lock(&self.state).registered != Some(ready) {
            self.backend.register(me, Registration { lease, ready })?;
            lock(&self.state).registered = Some(ready);
        }
        Ok(())
    }

    /// One round: keep the lease, revoke the leases of nodes seen not running, read the
    /// coordinator, acquire the stripes this node should lead and is free to, and say which
    /// terms to give back (the caller stops leading them, waits, and calls [`Self::resign`]).
    pub fn round(&self, input: &RoundInput<'_>) -> Vec<(usize, Step)> {
        if let Err(e) = self.keep(input.me, input.ready) {
            self.note(e);
            return Vec::new();
        }
        let mut snap = match self.backend.snapshot(input.nodes) {
            Ok(s) => s,
            Err(e) => {
                self.note(e);
                return Vec::new();
            }
        };
        // A refused connection: that process is not running; its lease goes now. Only a
        // refusal seen after the registration counts (before it, the node may not have been
        // listening yet).
        let now = Instant::now();
        {
            let mut st = lock(&self.state);
            let live: Vec<i64> = snap.nodes.iter().flatten().map(|r| r.lease).collect();
            st.first_seen.retain(|l, _| live.contains(l));
            for l in live {
                st.first_seen.entry(l).or_insert(now);
            }
        }
        let mut revoked_any = false;
        for (n, reg) in snap.nodes.iter().enumerate() {
            let Some(reg) = reg else { continue };
            let seen = lock(&self.state).first_seen.get(&reg.lease).copied();
            let refused_after = (input.refused)(n).zip(seen).is_some_and(|(r, s)| r > s);
            if n == input.me || !refused_after || lock(&self.state).revoked.contains(&reg.lease) {
                continue;
            }
            match self.backend.revoke(reg.lease) {
                Ok(()) => {
                    log::debug!("node {}: revoked the lease of node {n} (refused)", input.me);
                    let mut st = lock(&self.state);
                    st.revoked.push(reg.lease);
                    if st.revoked.len() > 64 {
                        st.revoked.remove(0);
                    }
                    revoked_any = true;
                }
                Err(e) => self.note(e),
            }
        }
        if revoked_any {
            match self.backend.snapshot(input.nodes) {
                Ok(s) => snap = s,
                Err(e) => {
                    self.note(e);
                    return Vec::new();
                }
            }
        }
        let my_lease = lock(&self.state).lease;
        let mut steps = Vec::new();
        for (s, members) in input.stripes {
            let s = *s;
            let held = snap.leaders.get(s).copied().flatten();
            let mine = held.filter(|h| h.node == input.me && Some(h.lease) == my_lease);
            let term = lock(&self.state).terms.get(s).copied().flatten();
            // A term this node thinks it holds that the coordinator no longer shows as its own
            // is over; a key of its own it does not know of is resigned.
            match (term, mine) {
                (Some(t), m) if m.is_none_or(|h| h.token != t.token) => {
                    lock(&self.state).terms[s] = None;
                }
                (None, Some(h)) => steps.push((s, Step::GiveBack(h.token))),
                _ => {}
            }
            // The first member registered ready that this node sees up. The views of two nodes
            // may differ; the key's transaction keeps it to one leader, and only the holder
            // gives a stripe back.
            let preferred = members.iter().copied().find(|&n| {
                if n == input.me {
                    input.ready
                } else {
                    (input.up)(n)
                        && snap
                            .nodes
                            .get(n)
                            .copied()
                            .flatten()
                            .is_some_and(|r| r.ready)
                }
            });
            let yielded = (input.yielded)(s);
            // A node that sees more positions of the stripe down than the code tolerates
            // cannot serve it: it gives the stripe back (a node that sees them up may take
            // it) and does not take it.
            let servable = (input.serviceable)(s);
            if let Some(t) = lock(&self.state).terms.get(s).copied().flatten() {
                if preferred != Some(input.me) || yielded || !servable {
                    steps.push((s, Step::GiveBack(t.token)));
                }
                continue;
            }
            if held.is_some() || preferred != Some(input.me) || yielded || !servable {
                continue;
            }
            let Some(lease) = my_lease else { continue };
            match self.backend.acquire(s, input.me, lease) {
                Ok(Some(token)) => {
                    log::debug!("stripe {s}: node {} leads, term {token}", input.me);
                    lock(&self.state).terms[s] = Some(Term {
                        token,
                        began: Instant::now(),
                    });
                    if let Some(l) = snap.leaders.get_mut(s) {
                        *l = Some(Holder {
                            node: input.me,
                            lease,
                            token,
                        });
                    }
                }
                Ok(None) => {}
                Err(e) => self.note(e),
            }
        }
        lock(&self.state).snapshot = snap;
        steps
    }

    /// Stops leading `stripe`'s term `token` (this node's view: before operations under way
    /// are waited for).
    pub fn stop(&self, stripe: usize, token: u64) {
        let mut st = lock(&self.state);
        if st.terms[stripe].is_some_and(|t| t.token == token) {
            st.terms[stripe] = None;
        }
    }

    /// Deletes `stripe`'s key if it is still term `token`'s (after [`Self::stop`] and the wait).
    pub fn resign(&self, stripe: usize, token: u64) {
        match self.backend.resign(stripe, token) {
            Ok(()) => log::debug!("stripe {stripe}: term {token} given back"),
            Err(e) => self.note(e),
        }
    }
}

#[cfg(test)]
pub(crate) mod mem {
    //! An in-memory coordinator with etcd's semantics (revisions, leases with a time to live
    //! on its own clock, create-if-absent), for the unit tests of the rules.

    use super::*;
    use std::collections::BTreeMap;

    #[derive(Debug, Default)]
    struct State {
        revision: u64,
        next_lease: i64,
        /// Lease id → (expiry, time to live).
        leases: BTreeMap<i64, (Instant, Duration)>,
        nodes: BTreeMap<usize, Registration>,
        leaders: BTreeMap<usize, Holder>,
        /// Calls fail while set (the node is cut from the coordinator).
        cut: Vec<usize>,
    }

    /// One shared coordinator; `for_node` gives each node its handle.
    #[derive(Debug, Default)]
    pub struct MemCoord {
        state: Mutex<State>,
    }

    impl MemCoord {
        fn expire(st: &mut State, now: Instant) {
            let gone: Vec<i64> = st
                .leases
                .iter()
                .filter(|(_, &(e, _))| e <= now)
                .map(|(&l, _)| l)
                .collect();
            for l in gone {
                Self::drop_lease(st, l);
            }
        }

        fn drop_lease(st: &mut State, l: i64) {
            st.leases.remove(&l);
            st.nodes.retain(|_, r| r.lease != l);
            st.leaders.retain(|_, h| h.lease != l);
        }

        /// Ends node `n`'s lease now, as its time to live running out would (its keys go).
        pub fn expire_node(&self, n: usize) {
            let mut st = lock(&self.state);
            if let Some(r) = st.nodes.get(&n).copied() {
                MemCoord::drop_lease(&mut st, r.lease);
            }
        }

        /// Cuts node `n` from the coordinator (its calls fail) or heals it.
        pub fn cut(&self, n: usize, cut: bool) {
            let mut st = lock(&self.state);
            st.cut.retain(|&c| c != n);
            if cut {
                st.cut.push(n);
            }
        }
    }

    /// Node `node`'s handle on a shared [`MemCoord`].
    #[derive(Debug)]
    pub struct MemHandle {
        pub hub: std::sync::Arc<MemCoord>,
        pub node: usize,
    }

    impl MemHandle {
        fn with<T>(&self, f: impl FnOnce(&mut State) -> T) -> Result<T, CoordError> {
            let mut st = lock(&self.hub.state);
            if st.cut.contains(&self.node) {
                return Err(CoordError("cut".into()));
            }
            MemCoord::expire(&mut st, Instant::now());
            Ok(f(&mut st))
        }
    }

    impl Coordinator for MemHandle {
        fn grant(&self, ttl: Duration) -> Result<(i64, Duration), CoordError> {
            self.with(|st| {
                st.next_lease += 1;
                st.leases.insert(st.next_lease, (Instant::now() + ttl, ttl));
                (st.next_lease, ttl)
            })
        }
        fn keep_alive(&self, lease: i64) -> Result<Option<Duration>, CoordError> {
            self.with(|st| {
                st.leases.get_mut(&lease).map(|(e, ttl)| {
                    *e = Instant::now() + *ttl;
                    *ttl
                })
            })
        }
        fn register(&self, node: usize, reg: Registration) -> Result<(), CoordError> {
            self.with(|st| {
                if st.leases.contains_key(&reg.lease) {
                    st.revision += 1;
                    st.nodes.insert(node, reg);
                }
            })
        }
        fn snapshot(&self, nodes: usize) -> Result<Snapshot, CoordError> {
            self.with(|st| Snapshot {
                nodes: (0..nodes).map(|n| st.nodes.get(&n).copied()).collect(),
                leaders: (0..nodes).map(|s| st.leaders.get(&s).copied()).collect(),
            })
        }
        fn acquire(
            &self,
            stripe: usize,
            node: usize,
            lease: i64,
        ) -> Result<Option<u64>, CoordError> {
            self.with(|st| {
                if st.leaders.contains_key(&stripe) || !st.leases.contains_key(&lease) {
                    return None;
                }
                st.revision += 1;
                let token = st.revision;
                st.leaders.insert(stripe, Holder { node, lease, token });
                Some(token)
            })
        }
        fn resign(&self, stripe: usize, token: u64) -> Result<(), CoordError> {
            self.with(|st| {
                if st.leaders.get(&stripe).is_some_and(|h| h.token == token) {
                    st.revision += 1;
                    st.leaders.remove(&stripe);
                }
            })
        }
        fn revoke(&self, lease: i64) -> Result<(), CoordError> {
            self.with(|st| MemCoord::drop_lease(st, lease))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::mem::{MemCoord, MemHandle};
    use super::*;
    use std::sync::Arc;

    const TTL: Duration = Duration::from_millis(400);

    struct Cluster {
        hub: Arc<MemCoord>,
        nodes: Vec<Leadership>,
        ready: Vec<bool>,
        refused: Vec<Option<Instant>>,
        /// `up[a][b]`: node a's heartbeats see node b up.
        up: Vec<Vec<bool>>,
        /// Whether node a can serve the stripe in its view.
        serviceable: Vec<bool>,
        members: Vec<(usize, Vec<usize>)>,
    }

    impl Cluster {
        /// Three nodes, one stripe whose members are 0, 1, 2 in that order.
        fn new() -> Cluster {
            let hub = Arc::new(MemCoord::default());
            let nodes = (0..3)
                .map(|n| {
                    let h = MemHandle {
                        hub: Arc::clone(&hub),
                        node: n,
                    };
                    Leadership::new(Box::new(h), TTL, 1)
                })
                .collect();
            Cluster {
                hub,
                nodes,
                ready: vec![true; 3],
                refused: vec![None; 3],
                up: vec![vec![true; 3]; 3],
                serviceable: vec![true; 3],
                members: vec![(0, vec![0, 1, 2])],
            }
        }

        fn round(&self, n: usize) -> Vec<(usize, Step)> {
            let refused = |i: usize| self.refused[i];
            let up = |i: usize| self.up[n][i];
            let serviceable = |_| self.serviceable[n];
            let input = RoundInput {
                me: n,
                nodes: 1,
                ready: self.ready[n],
                stripes: &self.members,
                yielded: &|_| false,
                refused: &refused,
                up: &up,
                serviceable: &serviceable,
            };
            let steps = self.nodes[n].round(&input);
            for &(s, Step::GiveBack(t)) in &steps {
                self.nodes[n].stop(s, t);
                self.nodes[n].resign(s, t);
            }
            steps
        }

        fn rounds(&self, which: &[usize]) {
            for _ in 0..2 {
                for &n in which {
                    self.round(n);
                }
            }
        }

        fn leaders(&self) -> Vec<usize> {
            let now = Instant::now();
            (0..3).filter(|&n| self.nodes[n].holds(0, now)).collect()
        }
    }

    #[test]
    fn the_first_ready_member_leads_and_one_node_at_a_time() {
        let c = Cluster::new();
        // Node 2 registers first: node 0 and 1 are not registered yet, so it takes the key.
        c.round(2);
        assert_eq!(c.leaders(), vec![2]);
        c.rounds(&[0, 1, 2]);
        // Node 0 is now the preferred agent: node 2 gave back, node 0 took over.
        c.rounds(&[0, 1, 2]);
        assert_eq!(c.leaders(), vec![0]);
        let t0 = c.nodes[0].token(0).expect("a term");
        assert!(t0 > 0);
        assert_eq!(c.nodes[1].holder(0), Some(0));
    }

    #[test]
    fn a_node_cut_from_the_coordinator_stops_before_its_successor_starts() {
        let c = Cluster::new();
        c.rounds(&[0, 1, 2]);
        assert_eq!(c.leaders(), vec![0]);
        let first = c.nodes[0].token(0).unwrap();
        c.hub.cut(0, true);
        let start = Instant::now();
        let mut overlap = false;
        let mut took_over = None;
        while start.elapsed() < 4 * TTL {
            c.rounds(&[0, 1, 2]);
            let l = c.leaders();
            overlap |= l.len() > 1;
            if took_over.is_none() && l == vec![1] {
                took_over = Some(start.elapsed());
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        assert!(!overlap, "two nodes led at once");
        let after = took_over.expect("node 1 took over");
        assert!(
            after >= TTL - TTL / MARGIN_DIVISOR,
            "took over after {after:?}"
        );
        let second = c.nodes[1].token(0).unwrap();
        assert!(second > first, "tokens {first} then {second}");
        // Node 0 stopped by its own clock, though it never heard it lost the key.
        assert!(!c.nodes[0].holds(0, Instant::now()));
        // Healed: node 0 gets a new lease, node 1 gives back, node 0 leads with a newer term.
        c.hub.cut(0, false);
        c.rounds(&[0, 1, 2]);
        c.rounds(&[0, 1, 2]);
        assert_eq!(c.leaders(), vec![0]);
        assert!(c.nodes[0].token(0).unwrap() > second);
        assert!(c.nodes[0].lapsed_since(0, start));
    }

    #[test]
    fn a_refused_connection_revokes_at_once() {
        let mut c = Cluster::new();
        c.rounds(&[0, 1, 2]);
        assert_eq!(c.leaders(), vec![0]);
        // A refusal seen before node 0 registered (it was not listening yet) proves nothing.
        c.refused[0] = Some(Instant::now() - Duration::from_secs(5));
        c.round(1);
        assert_eq!(c.nodes[1].holder(0), Some(0));
        // Node 0 is killed: it keeps nothing alive, and its port refuses.
        c.refused[0] = Some(Instant::now());
        c.round(1);
        c.round(1);
        assert_eq!(c.nodes[1].holder(0), Some(1));
        assert!(c.nodes[1].holds(0, Instant::now()));
    }

    #[test]
    fn a_member_not_ready_does_not_lead_and_takes_over_when_ready() {
        let mut c = Cluster::new();
        c.ready[0] = false;
        c.rounds(&[0, 1, 2]);
        assert_eq!(c.leaders(), vec![1]);
        c.ready[0] = true;
        c.rounds(&[0, 1, 2]);
        c.rounds(&[0, 1, 2]);
        assert_eq!(c.leaders(), vec![0]);
    }

    /// An agent cut from the other members (but not from the coordinator) cannot serve its
    /// stripe: it gives it back, the members that see it down take it, and it does not take
    /// it again until it can serve it; then, preferred again, it gets it back.
    #[test]
    fn an_agent_that_cannot_serve_its_stripe_gives_it_to_one_that_can() {
        let mut c = Cluster::new();
        c.rounds(&[0, 1, 2]);
        assert_eq!(c.leaders(), vec![0]);
        c.serviceable[0] = false;
        c.up[1][0] = false;
        c.up[2][0] = false;
        c.up[0][1] = false;
        c.up[0][2] = false;
        c.rounds(&[0, 1, 2]);
        assert_eq!(c.leaders(), vec![1]);
        c.rounds(&[0, 1, 2]);
        assert_eq!(
            c.leaders(),
            vec![1],
            "node 0 took it back while it could not serve it"
        );
        c.serviceable[0] = true;
        c.up = vec![vec![true; 3]; 3];
        c.rounds(&[0, 1, 2]);
        c.rounds(&[0, 1, 2]);
        assert_eq!(c.leaders(), vec![0]);
    }
}
