//! What carries a request between nodes: the peer messages and their TCP transport
//! ([`peer`]), the event loop's pipelined links to the other nodes' peer ports (`links`), the
//! engine's transport on those links ([`lane`]), the engine's plans bound to the cache
//! ([`plans`]: the application that feeds a plan the node's chunk records and takes its
//! outputs), and nodes in one process for tests ([`mem`]).

pub mod calls;
pub mod lane;
pub(crate) mod links;

/// A connection's buffer that a burst grew past this keeps its memory only while in use.
/// Measured under YCSB with 8 KiB values (docs/bench-ycsb.md): 16 KiB held 0.04–0.06 fewer
/// bytes per value byte than 64 KiB at no cost in CPU (a node has some fifty connections,
/// each with two buffers); 8 KiB held 0.01–0.02 fewer again but cost CPU on YCSB-C. An idle
/// buffer past the limit shrunk to it rather than freed (so a link that carries a few deltas a
/// pass regrows it once, not from nothing) held 1.85 against 1.81 on YCSB-A and 1.80 against
/// 1.76 on C (Intel Xeon, two runs each), past the layout's memory bound: it is freed.
pub const IDLE_BUFFER_MAX: usize = 16 << 10;

/// Gives back the memory of an empty connection buffer grown past [`IDLE_BUFFER_MAX`] (a
/// burst of large frames or pipelined requests): a cache of many connections otherwise keeps
/// each one's largest burst for good. The next burst grows it again.
pub fn shrink_idle(buf: &mut Vec<u8>) {
    if buf.is_empty() && buf.capacity() > IDLE_BUFFER_MAX {
        *buf = Vec::new();
    }
}
pub mod mem;
pub mod peer;
pub mod plans;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_an_empty_buffer_past_the_limit_gives_its_memory_back() {
        let mut big = Vec::with_capacity(IDLE_BUFFER_MAX + 1);
        big.push(1u8);
        shrink_idle(&mut big);
        assert!(
            big.capacity() > IDLE_BUFFER_MAX,
            "a buffer in use keeps its memory"
        );
        big.clear();
        shrink_idle(&mut big);
        assert_eq!(big.capacity(), 0);
        let mut small: Vec<u8> = Vec::with_capacity(IDLE_BUFFER_MAX);
        shrink_idle(&mut small);
        assert_eq!(small.capacity(), IDLE_BUFFER_MAX);
    }
}
