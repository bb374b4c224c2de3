//! The agent's lease: at most one node leads a Mem Stripe at a time, whatever stalls or cuts
//! the network makes: a stopped process, an overloaded machine, a link that drops every frame
//! between two nodes while each still reaches the others.
//!
//! Heartbeats carry the lease, and a stripe's leader is decided by a **majority** of the
//! stripe's member nodes, with no outside service. With `term` the down-after time:
//!
//! - **A vote.** A node answers a peer's heartbeat with a **grant** when it sees that peer up
//!   and ready, and with the list of nodes it **exempts**: those it sees down whose grant from
//!   it has run out (`term` since its last one, or their connection was refused: not running),
//!   and those it sees recovering. A grant is a vote for the asking node in every stripe where
//!   every member ahead of it is exempted in the same answer: in the granting node's view, no
//!   one ahead can lead.
//! - **Holding.** A node leads a stripe only while more than half of the stripe's member nodes
//!   vote for it: itself (when it exempts every member ahead by the same rule) and each member
//!   whose latest grant was answered to a heartbeat sent less than `term` ago (counted from the
//!   *send* time, so a late answer never stretches the lease) and exempted every member ahead.
//! - **One vote at a time.** A node does not grant a peer until `term` has passed since it last
//!   exempted that peer, and it exempts a peer only `term` after its last grant to it. So the
//!   grant a leader counts and the exemption its rival counts never overlap: two majorities
//!   share a node, and that node's vote is counted by one of them at a time. A node that has
//!   just started (it forgot its promises) grants nothing for its first `term`.
//! - **Silence is not death.** A member that stops answering is not counted either way: it
//!   neither votes nor blocks. A stripe whose agent cannot gather a majority refuses its
//!   operations (`NotAgent`, retried by the fronts) rather than risk two leaders. A refused
//!   connection is proof that a process is not running, so a killed agent is exempted at once
//!   and its successor takes over within a heartbeat or two.
//! - **Runs.** Each check of the lease that finds it held says until when the votes it counted
//!   stay promised (`holds_until`); a check made before the promises of the last one ended
//!   carries the node's run of the lease on (`Run`). No other node can lead within a run: any
//!   other majority shares a member with this node's, whose promise was in force.
//! - **Lapses.** A grant says how long the granting member has seen the node up without a
//!   break. A member that saw it down since the node built its index of a stripe may have
//!   voted for another leader meanwhile, so the index is stale and is rebuilt from the members'
//!   records. (Any other leader needed a majority, which shares a node with this node's current
//!   majority, and that node saw it down.) A member that restarted since forgot what it saw
//!   before; for it the node's run answers: the index stays if the run covers the time since
//!   it was built (before runs, every member's restart made every agent rebuild).
//! - **Giving back.** A node that starts granting a peer again (it saw it down, now up) first
//!   waits for the operations under way at it to finish, so the returning agent, which
//!   rebuilds its index after the lapse, sees every write the stand-in acknowledged.
//!
//! Clocks need not agree between hosts, only run at about the same rate: every interval is
//! measured on one node's own clock.

use std::time::{Duration, Instant};

/// What a node knows of one peer for the lease.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PeerLease {
    /// Its connection was refused since its last answer: it is not running.
    pub refused: bool,
    /// When a refused connection was last seen (a coordinator revokes the lease of a node
    /// registered before it: `coord.rs`).
    pub refused_at: Option<Instant>,
    /// The send time of the latest heartbeat of ours it answered with a grant.
    pub grant_from: Option<Instant>,
    /// The nodes it exempted in that answer (its vote counts in a stripe whose members ahead
    /// of us are all in it).
    pub exempt: Vec<usize>,
    /// Since when it has seen us up without a break, as its latest grant says (an estimate no
    /// earlier than the truth: the grant's travel time is counted as up time's end).
    pub sees_us_up_since: Option<Instant>,
    /// When we last answered its heartbeat with a grant.
    pub granted_to: Option<Instant>,
    /// Whether our latest answer to it was a grant.
    pub granting: bool,
    /// When we last exempted it (told another node it cannot lead, or counted so ourselves).
    pub exempted_at: Option<Instant>,
}

impl PeerLease {
    /// Whether the peer's latest grant still holds at `now`.
    pub fn grant_holds(&self, now: Instant, term: Duration) -> bool {
        self.grant_from
            .is_some_and(|g| now.saturating_duration_since(g) < term)
    }

    /// Whether the peer votes for us at `now` in a stripe where `ahead` are the members before
    /// us: its grant holds and it exempted each of them.
    pub fn votes(&self, ahead: &[usize], now: Instant, term: Duration) -> bool {
        self.grant_holds(now, term) && ahead.iter().all(|a| self.exempt.contains(a))
    }

    /// Whether the peer's own lease from us has run out by `now`, so that it has stopped
    /// leading (or it is not running).
    pub fn released(&self, now: Instant, term: Duration) -> bool {
        self.refused
            || self
                .granted_to
                .is_none_or(|g| now.saturating_duration_since(g) >= term)
    }

    /// Whether we may exempt the peer at `now`: we see it down or recovering (`up`, `ready`:
    /// our view of it) and our grants to it have run out.
    pub fn exemptable(&self, up: bool, ready: bool, now: Instant, term: Duration) -> bool {
        (!up || !ready) && self.released(now, term)
    }

    /// Whether we may grant the peer at `now`: we see it up and ready, and `term` has passed
    /// since we last exempted it (a node we exempted may still be counted as not leading).
    pub fn may_grant(&self, up: bool, ready: bool, now: Instant, term: Duration) -> bool {
        up && ready
            && self
                .exempted_at
                .is_none_or(|e| now.saturating_duration_since(e) >= term)
    }

    /// A grant answering our heartbeat sent at `sent` arrived at `now`; the peer has seen us up
    /// for `up_for` without a break and exempts `exempt`.
    pub fn on_grant(&mut self, sent: Instant, now: Instant, up_for: Duration, exempt: Vec<usize>) {
        let since = now.checked_sub(up_for).unwrap_or(now);
        if self.sees_us_up_since.is_none_or(|s| since > s) {
            self.sees_us_up_since = Some(since);
        }
        if self.grant_from.is_none_or(|g| sent >= g) {
            self.grant_from = Some(sent);
            self.exempt = exempt;
        }
        self.refused = false;
    }

    /// Whether the peer may have voted for another leader since `built`: it saw us down since.
    /// (One that never granted us cannot have stood in while we led: leading needs its grant, or
    /// its death; when it first grants, its answer tells since when it sees us up.)
    pub fn may_have_led_since(&self, built: Instant) -> bool {
        self.sees_us_up_since.is_some_and(|s| s >= built)
    }

    /// We answer its heartbeat at `now`, granting or not. Returns whether this grant follows
    /// a refusal (the caller first lets its operations under way finish).
    pub fn answer(&mut self, grant: bool, now: Instant) -> bool {
        let resumed = grant && !self.granting;
        self.granting = grant;
        if grant {
            self.granted_to = Some(now);
        }
        resumed
    }
}

/// The distinct nodes of a stripe in position order (a node's later positions dropped).
pub fn member_nodes(positions: impl IntoIterator<Item = usize>) -> Vec<usize> {
    let mut out: Vec<usize> = Vec::new();
    for n in positions {
        if !out.contains(&n) {
            out.push(n);
        }
    }
    out
}

/// Whether `votes` of a stripe's `members` member nodes are a majority.
pub fn is_majority(votes: usize, members: usize) -> bool {
    2 * votes > members
}

/// A node's view of another: (up, ready).
pub type Sight = (bool, bool);

/// Whether node `me` grants `from` at `now` (see [`answer`]; nothing is stamped).
pub fn grants(
    view: impl Fn(usize) -> Sight,
    leases: &[PeerLease],
    me: usize,
    from: usize,
    now: Instant,
    term: Duration,
    started: Instant,
) -> bool {
    if from >= leases.len() || from == me || now.saturating_duration_since(started) < term {
        return false;
    }
    let (up, ready) = view(from);
    leases[from].may_grant(up, ready, now, term)
}

/// Node `me`'s answer at `now` to the heartbeat of `from`, by the rules above: whether it
/// grants, the nodes it exempts, and whether this grant resumes granting after a refusal (the
/// caller first lets its operations under way finish). `view(i)` is how `me` sees node `i`,
/// `leases[i]` what it knows of `i`; `started` is when `me` started. Stamps what it promised.
pub fn answer(
    view: impl Fn(usize) -> Sight,
    leases: &mut [PeerLease],
    me: usize,
    from: usize,
    now: Instant,
    term: Duration,
    started: Instant,
) -> (bool, Vec<usize>, bool) {
    if from >= leases.len() || from == me {
        return (false, Vec::new(), false);
    }
    let grant = grants(&view, leases, me, from, now, term, started);
    let mut exempt = Vec::new();
    if grant {
        for (i, l) in leases.iter_mut().enumerate() {
            let (up, ready) = view(i);
            if i != me && i != from && l.exemptable(up, ready, now, term) {
                l.exempted_at = Some(now);
                exempt.push(i);
            }
        }
    }
    let resumed = leases[from].answer(grant, now);
    (grant, exempt, resumed)
}

/// The votes for node `me` in a stripe at `now` (see [`holds_until`]): how many of the members
/// after it vote for it, and whether it votes for itself. Nothing is stamped.
pub fn votes(
    members: &[usize],
    me: usize,
    view: impl Fn(usize) -> Sight,
    leases: &[PeerLease],
    now: Instant,
    term: Duration,
    started: Instant,
) -> Option<(usize, bool)> {
    let at = members.iter().position(|&m| m == me)?;
    let ahead = &members[..at];
    let others = members[at + 1..]
        .iter()
        .filter(|&&m| leases[m].votes(ahead, now, term))
        .count();
    let settled = now.saturating_duration_since(started) >= term;
    let own = settled
        && ahead.iter().all(|&a| {
            let (up, ready) = view(a);
            leases[a].exemptable(up, ready, now, term)
        });
    Some((others, own))
}

/// Whether node `me` holds the lease of a stripe at `now`, and if so, until when: a majority
/// of the stripe's member nodes (`members`, in position order, `me` among them) vote for it.
/// Its own vote needs every member ahead of it exempted by its own view (and stamps them, as
/// an answer would). The time is how long the votes counted now stay promised: until a
/// majority of them no longer does (each member's promise lasts `term` from the send time of the
/// heartbeat its grant answered, this node's own `term` from now). `None`: not held.
pub fn holds_until(
    members: &[usize],
    me: usize,
    view: impl Fn(usize) -> Sight,
    leases: &mut [PeerLease],
    now: Instant,
    term: Duration,
    started: Instant,
) -> Option<Instant> {
    let (others, own) = votes(members, me, view, leases, now, term, started)?;
    if !is_majority(others + usize::from(own), members.len()) {
        return None;
    }
    let at = members.iter().position(|&m| m == me).unwrap_or(0);
    let ahead = &members[..at];
    if own {
        for &a in ahead {
            leases[a].exempted_at = Some(now);
        }
    }
    // The latest time by which a majority's promises still all hold: the largest end that as
    // many votes as a majority reach. (A few votes: compared pairwise, nothing allocated, as
    // every operation checks the lease.)
    let leases = &*leases;
    let ends = || {
        members[at + 1..]
            .iter()
            .filter(move |&&m| leases[m].votes(ahead, now, term))
            .filter_map(move |&m| leases[m].grant_from.map(|g| g + term))
            .chain(own.then_some(now + term))
    };
    let need = members.len() / 2 + 1;
    ends()
        .filter(|&e| ends().filter(|&f| f >= e).count() >= need)
        .max()
}

/// A stretch of time over which a node held a stripe's lease without a break, as far as its
/// own checks of it show: each check that finds it held before the promises counted at the
/// last one ended carries it on. No other node can have led a stripe in a run of its lease
/// (two majorities share a member, whose promise to this node was in force), so an index built
/// within the run has seen every write: a member that restarted, and forgot what it saw of
/// this node, need not vouch for it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Run {
    /// The first check of the run.
    pub since: Instant,
    /// When the promises counted so far end.
    pub until: Instant,
}

impl Run {
    /// The run after a check at `now` that found the lease held until `until` (`None`: not
    /// held, which ends it).
    pub fn next(run: Option<Run>, now: Instant, until: Option<Instant>) -> Option<Run> {
        let until = until?;
        Some(match run {
            Some(r) if now < r.until => Run {
                since: r.since,
                until: r.until.max(until),
            },
            _ => Run { since: now, until },
        })
    }

    /// Whether the run covers everything from `since` to `now`.
    pub fn covers(&self, since: Instant, now: Instant) -> bool {
        self.since <= since && now < self.until
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const T: Duration = Duration::from_millis(1000);

    fn at(base: Instant, ms: u64) -> Instant {
        base + Duration::from_millis(ms)
    }

    #[test]
    fn a_grant_holds_for_a_term_from_its_heartbeat_send_time() {
        let b = Instant::now();
        let mut p = PeerLease::default();
        assert!(!p.grant_holds(b, T), "no grant yet");
        let up = Duration::from_secs(60);
        // Sent at 0, answered at 400: holds until 1000, not 1400.
        p.on_grant(b, at(b, 400), up, vec![3]);
        assert!(p.grant_holds(at(b, 999), T));
        assert!(!p.grant_holds(at(b, 1000), T));
        // A late answer to an older heartbeat moves neither the lease nor the exemptions back.
        p.on_grant(at(b, 300), at(b, 500), up, vec![4]);
        p.on_grant(at(b, 100), at(b, 600), up, vec![5]);
        assert_eq!(p.grant_from, Some(at(b, 300)));
        assert_eq!(p.exempt, vec![4]);
    }

    /// The lease lasts as long as the promises of a majority: with five members, until the
    /// third latest end among the votes (own vote: a term from now).
    #[test]
    fn a_lease_holds_until_the_third_latest_of_five_promises_ends() {
        let b = Instant::now();
        let settled = b.checked_sub(2 * T).expect("the clock has run two terms");
        let members = [0, 1, 2, 3, 4];
        let mut leases = vec![PeerLease::default(); 5];
        for (m, sent) in [(1, 300), (2, 100), (3, 900), (4, 500)] {
            leases[m].on_grant(at(b, sent), at(b, sent), Duration::ZERO, Vec::new());
        }
        let up = |_| (true, true);
        let now = at(b, 950);
        // Ends: own 1950, then 1900, 1500, 1300, 1100.
        let until = holds_until(&members, 0, up, &mut leases, now, T, settled);
        assert_eq!(until, Some(at(b, 1500)));
        // Members 3 and 4 silent past their terms: two votes of five, not held.
        assert_eq!(
            holds_until(&members, 0, up, &mut leases, at(b, 1501), T, settled),
            None
        );
        // Node 2 of the five: member 0 ahead must be exempted, and no one here does.
        assert_eq!(
            holds_until(&members, 2, up, &mut leases, now, T, settled),
            None
        );
    }

    #[test]
    fn a_vote_needs_every_member_ahead_exempted() {
        let b = Instant::now();
        let mut p = PeerLease::default();
        p.on_grant(b, b, Duration::ZERO, vec![0, 2]);
        assert!(p.votes(&[], at(b, 10), T), "nobody ahead");
        assert!(p.votes(&[0, 2], at(b, 10), T));
        assert!(!p.votes(&[0, 1], at(b, 10), T), "node 1 not exempted");
        assert!(!p.votes(&[0, 2], at(b, 1000), T), "the grant ran out");
    }

    #[test]
    fn a_node_neither_grants_nor_exempts_a_peer_within_a_term_of_the_other() {
        let b = Instant::now();
        let mut p = PeerLease::default();
        assert!(p.may_grant(true, true, b, T));
        assert!(!p.may_grant(false, true, b, T), "down");
        assert!(!p.may_grant(true, false, b, T), "recovering");
        p.answer(true, b);
        // Seen down at 100: exempted only once the grant of 0 has run out.
        assert!(!p.exemptable(false, true, at(b, 999), T));
        assert!(p.exemptable(false, true, at(b, 1000), T));
        assert!(!p.exemptable(true, true, at(b, 1000), T), "up and ready");
        p.exempted_at = Some(at(b, 1000));
        // Seen up again at 1100: granted only a term after the exemption.
        assert!(!p.may_grant(true, true, at(b, 1999), T));
        assert!(p.may_grant(true, true, at(b, 2000), T));
        // A refused connection: not running, exempted at once.
        let mut q = PeerLease::default();
        q.answer(true, b);
        q.refused = true;
        assert!(q.exemptable(false, true, at(b, 1), T));
    }

    #[test]
    fn a_peer_is_released_a_term_after_our_last_grant() {
        let b = Instant::now();
        let mut p = PeerLease::default();
        assert!(p.released(b, T), "never granted");
        assert!(p.answer(true, b), "the first grant resumes");
        assert!(!p.answer(true, at(b, 100)));
        assert!(!p.released(at(b, 1099), T));
        assert!(!p.answer(false, at(b, 200)), "refusing");
        assert!(p.released(at(b, 1100), T));
        assert!(p.answer(true, at(b, 1200)), "granting again after refusing");
        assert!(!p.released(at(b, 1300), T));
        p.refused = true;
        assert!(p.released(at(b, 1300), T));
    }

    #[test]
    fn only_a_peer_that_saw_us_down_may_have_led() {
        let b = at(Instant::now(), 100_000);
        let mut p = PeerLease::default();
        assert!(!p.may_have_led_since(b), "no grant yet");
        // Up for 50 s as of its grant at b: it did not see us down since b - 50 s.
        p.on_grant(b, b, Duration::from_secs(50), Vec::new());
        assert!(!p.may_have_led_since(at(b, 0)));
        // Late grants of an unbroken run change nothing, however late they come.
        p.on_grant(
            at(b, 5000),
            at(b, 9000),
            Duration::from_secs(59),
            Vec::new(),
        );
        assert!(!p.may_have_led_since(at(b, 0)));
        // It saw us down and up again: up for 1 s as of 20 s.
        p.on_grant(
            at(b, 20_000),
            at(b, 20_000),
            Duration::from_secs(1),
            Vec::new(),
        );
        assert!(
            p.may_have_led_since(at(b, 0)),
            "index built before the break"
        );
        assert!(!p.may_have_led_since(at(b, 19_500)), "index built after it");
    }

    #[test]
    fn member_nodes_keep_the_first_position_of_each_node() {
        assert_eq!(member_nodes([0, 1, 0, 2, 1, 3]), vec![0, 1, 2, 3]);
        assert!(is_majority(5, 9) && !is_majority(4, 9));
        assert!(is_majority(2, 2) && !is_majority(1, 2));
    }

    /// Nine nodes, one stripe in order 0..9; every node hears every other every 100 ms.
    struct Cluster {
        now: Instant,
        started: Instant,
        /// `view[a][b]`: how a sees b.
        view: Vec<Vec<Sight>>,
        leases: Vec<Vec<PeerLease>>,
    }

    impl Cluster {
        fn new(n: usize) -> Cluster {
            let now = Instant::now();
            Cluster {
                now,
                started: now,
                view: vec![vec![(true, true); n]; n],
                leases: vec![vec![PeerLease::default(); n]; n],
            }
        }

        /// `from` asks `to`, which answers; the answer arrives if `back` (the link from `to` to
        /// `from` carries it).
        fn beat(&mut self, from: usize, to: usize, back: bool) {
            let (now, started) = (self.now, self.started);
            let (grant, exempt, _) = answer(
                |i| self.view[to][i],
                &mut self.leases[to],
                to,
                from,
                now,
                T,
                started,
            );
            if grant && back {
                self.leases[from][to].on_grant(now, now, Duration::ZERO, exempt);
            }
        }

        fn holds(&mut self, me: usize) -> bool {
            let members: Vec<usize> = (0..self.view.len()).collect();
            let (now, started) = (self.now, self.started);
            let view = &self.view[me];
            holds_until(
                &members,
                me,
                |i| view[i],
                &mut self.leases[me],
                now,
                T,
                started,
            )
            .is_some()
        }

        fn leaders(&mut self) -> Vec<usize> {
            (0..self.view.len()).filter(|&m| self.holds(m)).collect()
        }

        /// Runs `ms` of heartbeats over the links `cut` leaves up.
        fn run(&mut self, ms: u64, cut: impl Fn(usize, usize) -> bool) -> Vec<Vec<usize>> {
            let n = self.view.len();
            let mut seen = Vec::new();
            for _ in 0..ms / 100 {
                self.now += Duration::from_millis(100);
                for a in 0..n {
                    for b in 0..n {
                        if a != b && !cut(a, b) {
                            self.beat(a, b, !cut(b, a));
                        }
                    }
                }
                // A node sees another up while its heartbeats are answered.
                for a in 0..n {
                    for b in 0..n {
                        if a != b {
                            self.view[a][b].0 = !cut(a, b) && !cut(b, a);
                        }
                    }
                }
                seen.push(self.leaders());
            }
            seen
        }
    }

    /// The cut that made two agents before the majority lease: the agent and its successor cannot hear each
    /// other, everyone else hears both. The agent keeps the stripe, the successor never leads.
    #[test]
    fn a_cut_between_the_agent_and_its_successor_makes_no_second_leader() {
        let mut c = Cluster::new(9);
        let settled = c.run(2000, |_, _| false);
        assert_eq!(settled.last().unwrap(), &vec![0]);
        let cut = |a: usize, b: usize| (a, b) == (0, 1) || (a, b) == (1, 0);
        for leaders in c.run(5000, cut) {
            assert_eq!(leaders, vec![0]);
        }
    }

    /// The agent cut from everyone: after its lease runs out it stops, and only then does its
    /// successor lead; never both.
    #[test]
    fn an_isolated_agent_stops_before_its_successor_starts() {
        let mut c = Cluster::new(9);
        c.run(2000, |_, _| false);
        let cut = |a: usize, b: usize| (a == 0) != (b == 0);
        let seen = c.run(5000, cut);
        assert!(seen.iter().all(|l| l.len() <= 1), "{seen:?}");
        assert_eq!(seen.last().unwrap(), &vec![1]);
        // Healed: node 0 leads again once the others' promises to 1 have run out.
        let seen = c.run(5000, |_, _| false);
        assert!(seen.iter().all(|l| l.len() <= 1), "{seen:?}");
        assert_eq!(seen.last().unwrap(), &vec![0]);
    }

    /// Random partitions as below. Each node checks its lease only now and then (in a node,
    /// when an operation or a heartbeat round asks), and carries its run on from check to
    /// check (`Run`). Whenever a check finds a run, no other node held the stripe at any step
    /// since the run began: an index built in it has seen every write.
    #[test]
    fn a_run_of_the_lease_never_spans_another_leader() {
        use rand::{Rng, SeedableRng};
        let mut rng = rand::rngs::SmallRng::seed_from_u64(11);
        let n = 5;
        let mut c = Cluster::new(n);
        let members: Vec<usize> = (0..n).collect();
        let mut runs: Vec<Option<Run>> = vec![None; n];
        // (time, the nodes holding the stripe then), every step.
        let mut history: Vec<(Instant, Vec<usize>)> = Vec::new();
        let (mut checked_runs, mut long_runs) = (0, 0);
        for _ in 0..2000 {
            let cuts: Vec<Vec<bool>> = (0..n)
                .map(|_| (0..n).map(|_| rng.gen_bool(0.3)).collect())
                .collect();
            for _ in 0..rng.gen_range(1..8) {
                c.run(100, |a, b| cuts[a][b]);
                let now = c.now;
                let mut leaders = Vec::new();
                let mut found = Vec::new();
                for me in 0..n {
                    let view = &c.view[me];
                    let until = holds_until(
                        &members,
                        me,
                        |i| view[i],
                        &mut c.leases[me],
                        now,
                        T,
                        c.started,
                    );
                    if until.is_some() {
                        leaders.push(me);
                    }
                    found.push(until);
                }
                history.push((now, leaders));
                for me in 0..n {
                    if !rng.gen_bool(0.05) {
                        continue;
                    }
                    runs[me] = Run::next(runs[me], now, found[me]);
                    let Some(run) = runs[me] else { continue };
                    checked_runs += 1;
                    if run.since < now {
                        long_runs += 1;
                    }
                    for (at, leaders) in history.iter().filter(|(at, _)| *at >= run.since) {
                        assert!(
                            leaders.iter().all(|&l| l == me),
                            "node {me}'s run from {:?} spans {leaders:?} holding at {:?}",
                            run.since - c.started,
                            *at - c.started,
                        );
                    }
                }
            }
        }
        assert!(
            long_runs > 30 && checked_runs > long_runs,
            "{long_runs} of {checked_runs}"
        );
    }

    /// Random partitions, healed and cut again every few hundred ms, with random one-way cuts:
    /// at no step do two nodes both hold the stripe.
    #[test]
    fn random_partitions_never_make_two_leaders() {
        use rand::{Rng, SeedableRng};
        let mut rng = rand::rngs::SmallRng::seed_from_u64(7);
        let n = 5;
        let mut c = Cluster::new(n);
        let mut led = vec![false; n];
        for _ in 0..400 {
            let cuts: Vec<Vec<bool>> = (0..n)
                .map(|_| (0..n).map(|_| rng.gen_bool(0.3)).collect())
                .collect();
            let steps = rng.gen_range(1..8) * 100;
            for leaders in c.run(steps, |a, b| cuts[a][b]) {
                assert!(leaders.len() <= 1, "two leaders: {leaders:?}");
                for l in leaders {
                    led[l] = true;
                }
            }
        }
        assert!(led.iter().filter(|&&l| l).count() >= 2, "{led:?}");
    }
}
