//! Reusable byte buffers, so that no slice costs an allocation once a run is warm.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

/// A shared free list of byte buffers keyed by length. The engine thread, the transport and
/// the application thread all take and return buffers here; the lock is held only for a
/// push or a pop.
#[derive(Clone, Debug, Default)]
pub struct BufferPool {
    inner: Arc<Mutex<PoolInner>>,
}

#[derive(Debug, Default)]
struct PoolInner {
    /// Free buffers by exact length: a buffer taken for a length is handed out without being
    /// cleared (its old bytes are overwritten by whoever takes it).
    by_len: HashMap<usize, Vec<Vec<u8>>>,
    /// Bytes held by free buffers; bounded by `MAX_POOLED_BYTES`.
    pooled_bytes: usize,
}

/// The pool keeps at most this many bytes of free buffers; beyond it, returned buffers are
/// freed.
const MAX_POOLED_BYTES: usize = 512 << 20;

/// ... and at most this many free buffers of one length: as many as runs of one size take at
/// once in practice. A caller that returns buffers it did not take (allocated elsewhere) then
/// grows the pool by at most this many per length, not up to the byte bound.
const MAX_POOLED_PER_LEN: usize = 64;

impl BufferPool {
    pub fn new() -> BufferPool {
        BufferPool::default()
    }

    /// A buffer of exactly `len` bytes with unspecified contents.
    pub fn take(&self, len: usize) -> Vec<u8> {
        if len == 0 {
            return Vec::new();
        }
        let mut inner = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(v) = inner.by_len.get_mut(&len).and_then(|l| l.pop()) {
            inner.pooled_bytes -= len;
            return v;
        }
        drop(inner);
        vec![0u8; len]
    }

    /// Returns a buffer for reuse.
    pub fn put(&self, buf: Vec<u8>) {
        let len = buf.len();
        if len == 0 {
            return;
        }
        let mut inner = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
        if inner.pooled_bytes + len > MAX_POOLED_BYTES {
            return;
        }
        let free = inner.by_len.entry(len).or_default();
        if free.len() >= MAX_POOLED_PER_LEN {
            return;
        }
        free.push(buf);
        inner.pooled_bytes += len;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buffers_are_reused_by_length() {
        let pool = BufferPool::new();
        let mut a = pool.take(100);
        a[0] = 7;
        let ptr = a.as_ptr();
        pool.put(a);
        let b = pool.take(100);
        assert_eq!(b.as_ptr(), ptr);
        assert_eq!(b.len(), 100);
        let c = pool.take(50);
        assert_eq!(c.len(), 50);
    }

    /// Buffers returned beyond what one length may keep are freed, however many come back.
    #[test]
    fn one_length_keeps_a_bounded_number_of_free_buffers() {
        let pool = BufferPool::new();
        for _ in 0..3 * MAX_POOLED_PER_LEN {
            pool.put(vec![1u8; 10]);
        }
        let inner = pool.inner.lock().unwrap();
        assert_eq!(inner.by_len[&10].len(), MAX_POOLED_PER_LEN);
        assert_eq!(inner.pooled_bytes, 10 * MAX_POOLED_PER_LEN);
    }
}
