//! The node's workers: threads for the requests an event loop hands over (those that may wait
//! for other nodes or for a key's lock, `front`'s `Handoff`). A pool starts a thread when a job
//! finds none free, up to its limit (`--workers`), and a thread ends after [`IDLE_FOR`] without
//! a job. So a node that runs every request on its loops has no worker threads: its threads are
//! its loops, its heartbeat and expiry threads, and the main thread that waits for the loops.

use std::collections::VecDeque;
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

/// How long a worker waits for a job before it ends.
pub(crate) const IDLE_FOR: Duration = Duration::from_secs(10);

/// Up to `max` threads running `run` on the jobs submitted, in their order.
pub(crate) struct Pool<J> {
    name: &'static str,
    max: usize,
    state: Mutex<State<J>>,
    ready: Condvar,
    run: Box<dyn Fn(J) + Send + Sync>,
}

struct State<J> {
    queue: VecDeque<J>,
    /// Threads waiting for a job.
    waiting: usize,
    /// Threads running, waiting or working.
    live: usize,
    /// Threads started so far (their names' numbers).
    started: usize,
}

impl<J: Send + 'static> Pool<J> {
    /// A pool of at most `max` (at least 1) threads named `<name>-<n>`, none started yet.
    pub(crate) fn new(
        name: &'static str,
        max: usize,
        run: impl Fn(J) + Send + Sync + 'static,
    ) -> Arc<Pool<J>> {
        Arc::new(Pool {
            name,
            max: max.max(1),
            state: Mutex::new(State {
                queue: VecDeque::new(),
                waiting: 0,
                live: 0,
                started: 0,
            }),
            ready: Condvar::new(),
            run: Box::new(run),
        })
    }

    fn lock(&self) -> MutexGuard<'_, State<J>> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Queues `job`: a waiting thread takes it, or a new one if every thread is busy and the
    /// pool is below its limit; at the limit, the first thread done with its job takes it.
    pub(crate) fn submit(self: &Arc<Self>, job: J) {
        let mut s = self.lock();
        s.queue.push_back(job);
        // Every queued job has a waiting thread that will take it (one woken but not yet
        // running still counts as waiting, so a second job starts a thread of its own).
        if s.queue.len() <= s.waiting {
            self.ready.notify_one();
            return;
        }
        if s.live >= self.max {
            return;
        }
        s.live += 1;
        s.started += 1;
        let n = s.started;
        drop(s);
        let me = Arc::clone(self);
        let spawned = std::thread::Builder::new()
            .name(format!("{}-{n}", self.name))
            .spawn(move || me.work());
        if let Err(e) = spawned {
            log::error!("cannot start a {} thread: {e}", self.name);
            self.lock().live -= 1;
        }
    }

    /// Threads running now.
    #[cfg(test)]
    fn live(&self) -> usize {
        self.lock().live
    }

    fn work(&self) {
        // A job that panics ends its thread; the pool counts it gone.
        let _leave = Leave(self);
        let mut s = self.lock();
        loop {
            if let Some(job) = s.queue.pop_front() {
                drop(s);
                (self.run)(job);
                s = self.lock();
                continue;
            }
            s.waiting += 1;
            let (g, wait) = (self.ready)
                .wait_timeout(s, IDLE_FOR)
                .unwrap_or_else(PoisonError::into_inner);
            s = g;
            s.waiting -= 1;
            if wait.timed_out() && s.queue.is_empty() {
                return;
            }
        }
    }
}

/// Counts a pool's thread gone when it ends (its last wait timed out, or its job panicked).
struct Leave<'a, J>(&'a Pool<J>);

impl<J> Drop for Leave<'_, J> {
    fn drop(&mut self) {
        let mut s = self.0.state.lock().unwrap_or_else(PoisonError::into_inner);
        s.live -= 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::mpsc;

    /// No thread until a job comes; one per job while every thread is busy, up to the limit;
    /// jobs past the limit wait for a thread and all run; a thread free again takes the next
    /// job rather than a new one starting.
    #[test]
    fn threads_start_when_jobs_find_none_free_up_to_the_limit() {
        let (gate_tx, gate_rx) = mpsc::channel::<()>();
        let gate = Mutex::new(gate_rx);
        let (done_tx, done_rx) = mpsc::channel::<usize>();
        let done = Mutex::new(done_tx);
        let pool = Pool::new("test-worker", 3, move |job: usize| {
            if job < 100 {
                // Blocks until the test opens the gate once for it.
                gate.lock().unwrap().recv().unwrap();
            }
            done.lock().unwrap().send(job).unwrap();
        });
        assert_eq!(pool.live(), 0);
        for job in 0..5 {
            pool.submit(job);
        }
        assert_eq!(pool.live(), 3, "three threads, each blocked on a job");
        for _ in 0..5 {
            gate_tx.send(()).unwrap();
        }
        let mut ran: Vec<usize> = (0..5).map(|_| done_rx.recv().unwrap()).collect();
        ran.sort_unstable();
        assert_eq!(ran, vec![0, 1, 2, 3, 4], "the jobs past the limit ran too");
        // All three wait now: the next jobs start no thread.
        while pool.lock().waiting < 3 {
            std::thread::yield_now();
        }
        pool.submit(100);
        pool.submit(101);
        let mut ran: Vec<usize> = (0..2).map(|_| done_rx.recv().unwrap()).collect();
        ran.sort_unstable();
        assert_eq!(ran, vec![100, 101]);
        assert_eq!(pool.live(), 3);
        assert_eq!(pool.lock().started, 3);
    }

    /// A job that panics ends its thread, and the pool starts another for the next job.
    #[test]
    fn a_thread_whose_job_panicked_is_replaced() {
        let (done_tx, done_rx) = mpsc::channel::<usize>();
        let done = Mutex::new(done_tx);
        let pool = Pool::new("test-worker", 1, move |job: usize| {
            if job == 0 {
                panic!("the test's job 0 panics on purpose");
            }
            done.lock().unwrap().send(job).unwrap();
        });
        pool.submit(0);
        while pool.live() != 0 {
            std::thread::yield_now();
        }
        pool.submit(1);
        assert_eq!(done_rx.recv().unwrap(), 1);
        assert_eq!(pool.lock().started, 2);
    }
}
