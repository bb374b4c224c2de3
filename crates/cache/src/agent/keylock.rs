//! The agent's key locks, and the event loops waiting for them.
//!
//! An operation of the agent holds its key's lock (one of [`KEY_LOCKS`], by key hash) from the
//! index lookup to the last reply it waits for, so that operations on one key run one at a time
//! in version order. A loop's write holds it across its members' replies ([`KeyGuard`] is an
//! owned guard); a worker's operation takes it blocking.
//!
//! A request an event loop reads for a key whose lock is held is not handed to a thread that
//! would block on it: the loop leaves the request unread in its connection's buffer and waits
//! ([`KeyLocks::wait`] sets the loop's bit for that lock). Whoever frees a lock with bits set
//! clears them and wakes those loops through their mailboxes ([`CallPost::wake`]); each looks at
//! its waiting connections and runs the ones whose lock is free. The bit is set before the loop
//! looks at the lock once more, and the lock freed before its bits are read, each followed by a
//! full fence: a loop either sees the lock free or is woken (no wake-up is lost).

use std::sync::atomic::{fence, AtomicU64, Ordering};
use std::sync::Arc;

use parking_lot::{ArcMutexGuard, Mutex, RawMutex};

use crate::carrier::calls::CallPost;
use crate::cluster::placement::fnv1a_64;

/// How many key locks an agent has: keys that share one run one at a time.
pub(crate) const KEY_LOCKS: usize = 1024;

/// Which of the agent's key locks `key` takes.
pub fn key_lock_index(key: &[u8]) -> usize {
    (fnv1a_64(key) >> 20) as usize % KEY_LOCKS
}

/// The agent's key locks and, per lock, the event loops waiting for it.
#[derive(Debug, Clone)]
pub(crate) struct KeyLocks(Arc<Table>);

struct Table {
    locks: Vec<Arc<Mutex<()>>>,
    /// Per lock, a bit per loop (loop `i` is bit `i % 64`) waiting for it to be freed.
    waiting: Vec<AtomicU64>,
    /// The node's event loops, woken when a lock they wait for is freed.
    loops: Vec<Arc<dyn CallPost>>,
}

impl std::fmt::Debug for Table {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Table")
            .field("locks", &self.locks.len())
            .field("loops", &self.loops.len())
            .finish()
    }
}

/// A held key lock: freed when dropped, waking the loops that wait for it. Held by the thread
/// that took it (not sent to another: the guard inside is not `Send`).
#[must_use]
pub(crate) struct KeyGuard {
    /// Taken when dropped, before the waiting loops are woken.
    held: Option<ArcMutexGuard<RawMutex, ()>>,
    table: Arc<Table>,
    index: usize,
}

impl std::fmt::Debug for KeyGuard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "KeyGuard({})", self.index)
    }
}

impl Drop for KeyGuard {
    fn drop(&mut self) {
        let t = &self.table;
        drop(self.held.take());
        fence(Ordering::SeqCst);
        let waiting = &t.waiting[self.index];
        if waiting.load(Ordering::Relaxed) == 0 {
            return;
        }
        let bits = waiting.swap(0, Ordering::AcqRel);
        for (i, l) in t.loops.iter().enumerate() {
            if bits & (1 << (i % 64)) != 0 {
                l.wake();
            }
        }
    }
}

impl KeyLocks {
    /// The locks of a node whose event loops are `loops` (none: no loop waits).
    pub(crate) fn new(loops: Vec<Arc<dyn CallPost>>) -> KeyLocks {
        KeyLocks(Arc::new(Table {
            locks: (0..KEY_LOCKS).map(|_| Arc::new(Mutex::new(()))).collect(),
            waiting: (0..KEY_LOCKS).map(|_| AtomicU64::new(0)).collect(),
            loops,
        }))
    }

    fn guard(&self, index: usize, held: ArcMutexGuard<RawMutex, ()>) -> KeyGuard {
        KeyGuard {
            held: Some(held),
            table: Arc::clone(&self.0),
            index,
        }
    }

    /// Takes lock `index`, waiting for it (a worker's operation; never on a loop).
    pub(crate) fn lock(&self, index: usize) -> KeyGuard {
        let held = self.0.locks[index].lock_arc();
        self.guard(index, held)
    }

    /// Takes lock `index` if it is free.
    pub(crate) fn try_lock(&self, index: usize) -> Option<KeyGuard> {
        let held = self.0.locks[index].try_lock_arc()?;
        Some(self.guard(index, held))
    }

    /// Whether lock `index` is held.
    pub(crate) fn is_locked(&self, index: usize) -> bool {
        self.0.locks[index].is_locked()
    }

    /// Event loop `loop_id` waits for lock `index`: true if it is still held (the loop is woken
    /// once it is freed), false if it was freed meanwhile (the loop goes on now).
    pub(crate) fn wait(&self, index: usize, loop_id: usize) -> bool {
        self.0.waiting[index].fetch_or(1 << (loop_id % 64), Ordering::SeqCst);
        fence(Ordering::SeqCst);
        self.is_locked(index)
    }

    /// Whether every lock is free now (each taken and freed at once): if so, every operation
    /// that held one before has ended, as [`KeyLocks::each_freed_once`] would wait for.
    pub(crate) fn all_free_now(&self) -> bool {
        (0..KEY_LOCKS).all(|index| self.try_lock(index).is_some())
    }

    /// Takes and frees every lock once: every operation that held one when this began has
    /// ended.
    pub(crate) fn each_freed_once(&self) {
        for index in 0..KEY_LOCKS {
            drop(self.lock(index));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::carrier::calls::Call;
    use std::sync::atomic::AtomicUsize;

    #[derive(Debug, Default)]
    struct Counted(AtomicUsize);

    impl CallPost for Counted {
        fn post(&self, call: Call) -> Result<(), Call> {
            Err(call)
        }
        fn wake(&self) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    #[test]
    fn a_loop_waiting_for_a_held_lock_is_woken_once_when_it_is_freed() {
        let loops: Vec<Arc<Counted>> = (0..3).map(|_| Arc::new(Counted::default())).collect();
        let locks = KeyLocks::new(
            loops
                .iter()
                .map(|l| Arc::clone(l) as Arc<dyn CallPost>)
                .collect(),
        );
        let g = locks.try_lock(7).expect("free");
        assert!(locks.try_lock(7).is_none());
        assert!(locks.is_locked(7));
        // Loop 1 waits; loop 2 waits for another lock, which is free: it goes on at once.
        assert!(locks.wait(7, 1));
        assert!(!locks.wait(8, 2));
        drop(g);
        let woken: Vec<usize> = loops.iter().map(|l| l.0.load(Ordering::SeqCst)).collect();
        assert_eq!(woken, vec![0, 1, 0]);
        assert!(!locks.is_locked(7));
        // The bit was cleared: freeing the lock again wakes no one.
        drop(locks.lock(7));
        assert_eq!(loops[1].0.load(Ordering::SeqCst), 1);
        // Loop 2's bit on lock 8 is still set: its next freeing wakes it (a spare wake-up).
        drop(locks.lock(8));
        assert_eq!(loops[2].0.load(Ordering::SeqCst), 1);
    }

    #[test]
    fn all_free_now_is_false_while_any_lock_is_held() {
        let locks = KeyLocks::new(Vec::new());
        assert!(locks.all_free_now());
        let g = locks.lock(KEY_LOCKS - 1);
        assert!(!locks.all_free_now());
        drop(g);
        assert!(locks.all_free_now());
    }

    #[test]
    fn a_waiting_loop_is_never_left_asleep_when_the_lock_is_freed_on_another_thread() {
        // Many rounds of: a holder on another thread frees the lock while this thread waits
        // for it; either the wait sees it free or the wake comes.
        let loops = [Arc::new(Counted::default())];
        let locks = Arc::new(KeyLocks::new(vec![
            Arc::clone(&loops[0]) as Arc<dyn CallPost>
        ]));
        for round in 0..2000 {
            let before = loops[0].0.load(Ordering::SeqCst);
            let (tx, rx) = std::sync::mpsc::channel();
            let l2 = Arc::clone(&locks);
            let holder = std::thread::spawn(move || {
                let g = l2.lock(3);
                tx.send(()).unwrap();
                if round % 2 == 0 {
                    std::thread::yield_now();
                }
                drop(g);
            });
            rx.recv().unwrap();
            let held = locks.wait(3, 0);
            holder.join().unwrap();
            let woken = loops[0].0.load(Ordering::SeqCst) > before;
            assert!(
                !held || woken,
                "round {round}: held when looked at, never woken"
            );
        }
    }
}
