//! Placement: which Mem Stripe a key belongs to and which nodes hold its chunks.
//!
//! N nodes sit on a ring in node-id order. Mem Stripe `s` (one per node, `0..N`) has its agent
//! at node `s`; chunk position `p` (`0..n` where n = k + parity chunks of the code) lives on
//! node `(s + p) mod N`. So every node is the agent of one stripe and holds one position of n
//! stripes. With fewer nodes than chunks a node holds several positions of the same stripe
//! (a single-node cache still works, without tolerance to node loss).
//!
//! A key maps to stripe `fnv1a_64(key) mod N` (FNV-1a, 64 bits, offset basis
//! 0xcbf29ce484222325, prime 0x100000001b3): stable across processes, versions and hosts.

/// FNV-1a, 64 bits: the stable hash that places keys.
pub fn fnv1a_64(bytes: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in bytes {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h
}

/// The ring of a cluster: node count and chunks per stripe.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Placement {
    node_count: usize,
    chunk_count: usize,
}

impl Placement {
    /// `node_count` ≥ 1 nodes, `chunk_count` ≥ 1 chunks per stripe.
    pub fn new(node_count: usize, chunk_count: usize) -> Placement {
        assert!(node_count >= 1 && chunk_count >= 1, "empty placement");
        Placement {
            node_count,
            chunk_count,
        }
    }

    pub fn node_count(&self) -> usize {
        self.node_count
    }

    pub fn chunk_count(&self) -> usize {
        self.chunk_count
    }

    /// The Mem Stripe of a key.
    pub fn stripe_of(&self, key: &[u8]) -> usize {
        (fnv1a_64(key) % self.node_count as u64) as usize
    }

    /// The node holding chunk position `position` of stripe `stripe`.
    pub fn node_of(&self, stripe: usize, position: usize) -> usize {
        (stripe + position) % self.node_count
    }

    /// The nodes of stripe `stripe`, by position (a node appears more than once when N < n).
    pub fn members(&self, stripe: usize) -> Vec<usize> {
        (0..self.chunk_count)
            .map(|p| self.node_of(stripe, p))
            .collect()
    }

    /// The positions node `node` holds in stripe `stripe` (empty if it is not a member).
    pub fn positions_of(&self, stripe: usize, node: usize) -> Vec<usize> {
        (0..self.chunk_count)
            .filter(|&p| self.node_of(stripe, p) == node)
            .collect()
    }

    /// The stripes node `node` is a member of.
    pub fn stripes_of(&self, node: usize) -> Vec<usize> {
        (0..self.node_count)
            .filter(|&s| !self.positions_of(s, node).is_empty())
            .collect()
    }

    /// The agent of `stripe` given which nodes may act (alive and ready): the first such node
    /// in position order, or `None` when no member may act.
    pub fn agent_of(&self, stripe: usize, may_act: impl Fn(usize) -> bool) -> Option<usize> {
        (0..self.chunk_count)
            .map(|p| self.node_of(stripe, p))
            .find(|&n| may_act(n))
    }

    /// How many (stripe, position) slots a node holds: its memory is shared among them. The
    /// rotation gives every node one slot per position (position p of stripe `node − p mod
    /// N`), so n in all, however many nodes (a test counts them from [`Placement::positions_of`]).
    pub fn slots_per_node(&self) -> usize {
        self.chunk_count
    }
}

/// The state of a Mem Stripe from how many of its members are down and whether one is
/// rebuilding: `unavailable` (more down than the code tolerates), `degraded`, `recovering` or
/// `whole`. The node's view and `inec cache status` both say it this way.
pub fn stripe_state(down: usize, tolerated: usize, recovering: bool) -> &'static str {
    if down > tolerated {
        "unavailable"
    } else if down > 0 {
        "degraded"
    } else if recovering {
        "recovering"
    } else {
        "whole"
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stripe_state_orders_unavailable_degraded_recovering_whole() {
        assert_eq!(stripe_state(4, 3, false), "unavailable");
        assert_eq!(stripe_state(4, 3, true), "unavailable");
        assert_eq!(stripe_state(3, 3, true), "degraded");
        assert_eq!(stripe_state(1, 3, false), "degraded");
        assert_eq!(stripe_state(0, 3, true), "recovering");
        assert_eq!(stripe_state(0, 3, false), "whole");
    }

    #[test]
    fn fnv1a_matches_published_vectors() {
        assert_eq!(fnv1a_64(b""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(fnv1a_64(b"a"), 0xaf63_dc4c_8601_ec8c);
        assert_eq!(fnv1a_64(b"foobar"), 0x8594_4171_f739_67e8);
    }

    #[test]
    fn every_node_plays_every_role() {
        let p = Placement::new(9, 9);
        for node in 0..9 {
            assert_eq!(p.stripes_of(node).len(), 9);
            assert_eq!(p.slots_per_node(), 9);
            for s in 0..9 {
                assert_eq!(p.positions_of(s, node), vec![(node + 9 - s) % 9]);
            }
        }
        assert_eq!(p.members(7), vec![7, 8, 0, 1, 2, 3, 4, 5, 6]);
        let p = Placement::new(12, 10);
        assert_eq!(p.members(5), vec![5, 6, 7, 8, 9, 10, 11, 0, 1, 2]);
        // Fewer nodes than positions: a node holds several positions of a stripe.
        for (nodes, chunks) in [(12, 10), (5, 9), (1, 9), (3, 3)] {
            let p = Placement::new(nodes, chunks);
            for node in 0..nodes {
                let listed: usize = (0..nodes).map(|s| p.positions_of(s, node).len()).sum();
                assert_eq!(p.slots_per_node(), listed, "{nodes} nodes, {chunks} chunks");
            }
        }
        assert_eq!(p.stripes_of(0).len(), 10);
    }

    #[test]
    fn agent_is_first_member_that_may_act() {
        let p = Placement::new(9, 9);
        assert_eq!(p.agent_of(3, |_| true), Some(3));
        assert_eq!(p.agent_of(3, |n| n != 3 && n != 4), Some(5));
        assert_eq!(p.agent_of(3, |_| false), None);
    }

    #[test]
    fn keys_spread_over_stripes() {
        let p = Placement::new(9, 9);
        let mut counts = [0usize; 9];
        for i in 0..9000 {
            counts[p.stripe_of(format!("key:{i}").as_bytes())] += 1;
        }
        for c in counts {
            assert!((700..1300).contains(&c), "{counts:?}");
        }
    }

    #[test]
    fn fewer_nodes_than_chunks_wrap() {
        let p = Placement::new(1, 9);
        assert_eq!(p.members(0), vec![0; 9]);
        assert_eq!(p.positions_of(0, 0).len(), 9);
    }
}
