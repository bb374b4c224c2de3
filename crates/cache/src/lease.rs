//! The agent's lease: at most one node leads a Mem Stripe at a time, even when a node stalls
//! (a stopped process, an overloaded machine) and the others take it for dead.
//!
//! Heartbeats are the lease. A node answers a peer's heartbeat with a **grant** when it sees
//! that peer up. With `term` the down-after time:
//!
//! - **Holding.** A node leads a stripe only while every member *behind* it in the stripe's
//!   order that could take over if it went down (one with at most m positions before its own
//!   that are not recovering: with more down, no operation of the stripe succeeds) has granted
//!   it within `term`, counted
//!   from when the heartbeat was *sent* (so a late answer never stretches the lease), unless
//!   that member is not running (its connection was refused) or has not answered at all for
//!   `2 × term` (a dead host).
//! - **Taking over.** A node takes a stripe over from the members *ahead* of it that it sees
//!   down only once it has not granted any of them for `term` (or their connection was
//!   refused): by then their leases have run out, so they have stopped.
//! - **Lapses.** A grant says how long the granting member has seen the node up without a
//!   break. A member that saw it down since the node built its index of a stripe may have led
//!   that stripe meanwhile, so the index is stale and is rebuilt from the members' records. (A
//!   member that never saw it down could not have taken over, however late its grants came:
//!   the node's own heartbeat thread being slow does not cost a rebuild.)
//! - **Giving back.** A node that starts granting a peer again (it saw it down, now up) first
//!   waits for the operations under way at it to finish, so the returning agent, which
//!   rebuilds its index after the lapse, sees every write the stand-in acknowledged.
//!
//! On one host this is safe against stalls; a partition between hosts (each side sees the
//! other silent for `2 × term`) can still give two leaders: split-brain-safe leadership across
//! hosts needs a coordination service (docs/cache.md, "Failures").

use std::time::{Duration, Instant};

/// What a node knows of one peer for the lease.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PeerLease {
    /// Its connection was refused since its last answer: it is not running.
    pub refused: bool,
    /// The send time of the latest heartbeat of ours it answered with a grant.
    pub grant_from: Option<Instant>,
    /// Since when it has seen us up without a break, as its latest grant says (an estimate no
    /// earlier than the truth: the grant's travel time is counted as up time's end).
    pub sees_us_up_since: Option<Instant>,
    /// When we last answered its heartbeat with a grant.
    pub granted_to: Option<Instant>,
    /// Whether our latest answer to it was a grant.
    pub granting: bool,
}

impl PeerLease {
    /// Whether the peer's grant holds at `now`, or it cannot lead anyway (not running; silent
    /// for `2 × term`: `last_ok` is its latest answer of any kind).
    pub fn holds(&self, up: bool, last_ok: Instant, now: Instant, term: Duration) -> bool {
        self.refused
            || self
                .grant_from
                .is_some_and(|g| now.saturating_duration_since(g) < term)
            || (!up && now.saturating_duration_since(last_ok) >= term * 2)
    }

    /// Whether the peer's own lease from us has run out by `now`, so that it has stopped
    /// leading (or it is not running).
    pub fn released(&self, now: Instant, term: Duration) -> bool {
        self.refused
            || self
                .granted_to
                .is_none_or(|g| now.saturating_duration_since(g) >= term)
    }

    /// A grant answering our heartbeat sent at `sent` arrived at `now`; the peer has seen us up
    /// for `up_for` without a break.
    pub fn on_grant(&mut self, sent: Instant, now: Instant, up_for: Duration) {
        let since = now.checked_sub(up_for).unwrap_or(now);
        if self.sees_us_up_since.is_none_or(|s| since > s) {
            self.sees_us_up_since = Some(since);
        }
        if self.grant_from.is_none_or(|g| sent > g) {
            self.grant_from = Some(sent);
        }
        self.refused = false;
    }

    /// Whether the peer may have led in our place since `built`: it saw us down since. (One
    /// that never granted us cannot have stood in while we led: leading needs its grant, or
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

/// What a stripe's agent needs of another member for its lease.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Need {
    /// A member ahead of the agent: its own lease must have run out.
    Released,
    /// A member behind the agent that could take over: its grant.
    Grant,
    /// A recovering member ahead (it leads nothing until handed the stripe), or one behind
    /// with more than `tolerated` non-recovering positions before its own (it would need
    /// them all down, and then no operation of the stripe succeeds).
    Nothing,
}

/// For the stripe's members in position order (`(node, recovering)`, a node's later positions
/// included), what the agent `me` needs of each other node, at its first position.
pub fn needs(order: &[(usize, bool)], me: usize, tolerated: usize) -> Vec<(usize, Need)> {
    let mut out: Vec<(usize, Need)> = Vec::new();
    let mut ahead = true;
    // Positions so far whose node is not recovering (it is ready, or down).
    let mut before = 0usize;
    for &(node, recovering) in order {
        if node == me {
            ahead = false;
        } else if !out.iter().any(|&(n, _)| n == node) {
            let need = match (ahead, recovering) {
                (true, true) => Need::Nothing,
                (true, false) => Need::Released,
                (false, _) if before > tolerated => Need::Nothing,
                (false, _) => Need::Grant,
            };
            out.push((node, need));
        }
        if !recovering || node == me {
            before += 1;
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_agent_needs_grants_from_the_members_that_could_take_over() {
        use Need::*;
        // RS(6,3) on 9 nodes, stripe 0, node 0 leads: positions 1..=3 could take over.
        let order: Vec<(usize, bool)> = (0..9).map(|n| (n, false)).collect();
        let got = needs(&order, 0, 3);
        let want: Vec<(usize, Need)> = (1..9)
            .map(|n| (n, if n <= 3 { Grant } else { Nothing }))
            .collect();
        assert_eq!(got, want);
        // Node 2 recovering: it cannot lead, and it does not count, so node 4 could.
        let mut order2 = order.clone();
        order2[2].1 = true;
        let got = needs(&order2, 0, 3);
        assert_eq!(&got[..4], &[(1, Grant), (2, Grant), (3, Grant), (4, Grant)]);
        assert_eq!(got[4], (5, Nothing));
        // Node 2 stands in (0 and 1 down): they must be released; 3 could take over, 4 not.
        let got = needs(&order, 2, 3);
        assert_eq!(
            &got[..4],
            &[(0, Released), (1, Released), (3, Grant), (4, Nothing)]
        );
        // A recovering node ahead needs nothing.
        let got = needs(&order2, 3, 3);
        assert_eq!(&got[..3], &[(0, Released), (1, Released), (2, Nothing)]);
        // Two nodes holding every position of a stripe (N < n): each needs the other's grant.
        let order3: Vec<(usize, bool)> = (0..9).map(|p| (p % 2, false)).collect();
        assert_eq!(needs(&order3, 0, 3), vec![(1, Grant)]);
        assert_eq!(needs(&order3, 1, 3), vec![(0, Released)]);
    }

    const T: Duration = Duration::from_millis(1000);

    fn at(base: Instant, ms: u64) -> Instant {
        base + Duration::from_millis(ms)
    }

    #[test]
    fn a_grant_holds_for_a_term_from_its_heartbeat_send_time() {
        let b = Instant::now();
        let mut p = PeerLease::default();
        assert!(!p.holds(true, b, b, T), "no grant yet");
        let up = Duration::from_secs(60);
        // Sent at 0, answered at 400: holds until 1000, not 1400.
        p.on_grant(b, at(b, 400), up);
        assert!(p.holds(true, b, at(b, 999), T));
        assert!(!p.holds(true, b, at(b, 1000), T));
        // A late answer to an older heartbeat does not move the lease back.
        p.on_grant(at(b, 300), at(b, 500), up);
        p.on_grant(at(b, 100), at(b, 600), up);
        assert_eq!(p.grant_from, Some(at(b, 300)));
    }

    #[test]
    fn refused_or_long_silent_peers_cannot_lead_and_do_not_block() {
        let b = Instant::now();
        let mut p = PeerLease::default();
        p.on_grant(b, b, Duration::ZERO);
        let later = at(b, 1500);
        assert!(
            !p.holds(false, b, later, T),
            "silent for 1.5 terms: maybe stalled"
        );
        assert!(
            p.holds(false, b, at(b, 2000), T),
            "silent for 2 terms: gone"
        );
        assert!(
            !p.holds(true, b, at(b, 2000), T),
            "answers without granting"
        );
        p.refused = true;
        assert!(p.holds(false, b, later, T));
        // A grant clears the refusal.
        p.on_grant(later, later, Duration::ZERO);
        assert!(!p.refused);
    }

    #[test]
    fn only_a_peer_that_saw_us_down_may_have_led() {
        let b = at(Instant::now(), 100_000);
        let mut p = PeerLease::default();
        assert!(!p.may_have_led_since(b), "no grant yet");
        // Up for 50 s as of its grant at b: it did not see us down since b - 50 s.
        p.on_grant(b, b, Duration::from_secs(50));
        assert!(!p.may_have_led_since(at(b, 0)));
        // Late grants of an unbroken run change nothing, however late they come.
        p.on_grant(at(b, 5000), at(b, 9000), Duration::from_secs(59));
        assert!(!p.may_have_led_since(at(b, 0)));
        // It saw us down and up again: up for 1 s as of 20 s.
        p.on_grant(at(b, 20_000), at(b, 20_000), Duration::from_secs(1));
        assert!(
            p.may_have_led_since(at(b, 0)),
            "index built before the break"
        );
        assert!(!p.may_have_led_since(at(b, 19_500)), "index built after it");
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
}
