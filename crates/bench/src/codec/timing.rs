//! Running one library call split by byte range across threads, many times, and timing it.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

/// One thread's share of a library call: called with the buffer-set index, it codes that
/// thread's byte range of that set.
pub type Part<'a> = Box<dyn FnMut(usize) + Send + 'a>;

/// Spins briefly, then yields, until `ready()` holds: the calling thread waits for the others
/// without a system call when they are quick, and leaves the core when they are not (the
/// machine may be shared).
fn wait_until(ready: impl Fn() -> bool) {
    let mut spins = 0u32;
    while !ready() {
        if spins < 2000 {
            std::hint::spin_loop();
            spins += 1;
        } else {
            std::thread::yield_now();
        }
    }
}

/// The CPU time the calling thread has run (`clock_gettime(CLOCK_THREAD_CPUTIME_ID)`, which
/// the kernel brings up to date when asked; `/proc/thread-self/schedstat` only moves at
/// scheduler ticks), or `None` where the system does not report it.
#[allow(unsafe_code)] // One FFI call behind this safe function; see lib.rs.
pub fn thread_cpu_time() -> Option<Duration> {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable `timespec`; `clock_gettime` writes only it.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    let (secs, nanos) = (
        u64::try_from(ts.tv_sec).ok()?,
        u32::try_from(ts.tv_nsec).ok()?,
    );
    (rc == 0).then(|| Duration::new(secs, nanos))
}

/// Makes `iters` calls, call i on buffer set `i % set_count`; each call runs every part (one
/// per thread) and completes when all have finished, like a call split across a pool. Returns
/// the wall time of all calls, or with `cpu_clock` and a single part the CPU time of the
/// calling thread (which leaves out the time it was preempted: on a shared machine the wall
/// time counts other processes' work). One part runs on the calling thread with no
/// synchronisation.
pub fn run(parts: &mut [Part<'_>], iters: usize, set_count: usize, cpu_clock: bool) -> Duration {
    let Some((first, rest)) = parts.split_first_mut() else {
        return Duration::ZERO;
    };
    if rest.is_empty() {
        let (start, cpu_start) = (Instant::now(), thread_cpu_time().filter(|_| cpu_clock));
        for i in 0..iters {
            first(i % set_count);
        }
        return match (cpu_start, thread_cpu_time()) {
            (Some(a), Some(b)) => b.saturating_sub(a),
            _ => start.elapsed(),
        };
    }
    // `go`: calls started; `done`: parts finished by the helper threads, over all calls;
    // `aborted`: a part panicked, so everyone stops instead of waiting for it forever.
    let go = AtomicUsize::new(0);
    let done = AtomicUsize::new(0);
    let aborted = AtomicBool::new(false);
    let helpers = rest.len();
    let elapsed = std::thread::scope(|scope| {
        for part in rest.iter_mut() {
            let (go, done, aborted) = (&go, &done, &aborted);
            scope.spawn(move || {
                for i in 0..iters {
                    wait_until(|| {
                        go.load(Ordering::Acquire) > i || aborted.load(Ordering::Acquire)
                    });
                    if aborted.load(Ordering::Acquire) {
                        return;
                    }
                    if catch_unwind(AssertUnwindSafe(|| part(i % set_count))).is_err() {
                        aborted.store(true, Ordering::Release);
                        return;
                    }
                    done.fetch_add(1, Ordering::AcqRel);
                }
            });
        }
        let start = Instant::now();
        for i in 0..iters {
            go.store(i + 1, Ordering::Release);
            if catch_unwind(AssertUnwindSafe(|| first(i % set_count))).is_err() {
                aborted.store(true, Ordering::Release);
            }
            wait_until(|| {
                done.load(Ordering::Acquire) >= (i + 1) * helpers || aborted.load(Ordering::Acquire)
            });
            if aborted.load(Ordering::Acquire) {
                break;
            }
        }
        start.elapsed()
    });
    if aborted.into_inner() {
        panic!("a part of a benchmarked call panicked");
    }
    elapsed
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Mutex;

    #[test]
    fn every_part_runs_every_call_in_order() {
        let log = Mutex::new(Vec::new());
        let mut parts: Vec<Part<'_>> = (0..3)
            .map(|t| {
                let log = &log;
                Box::new(move |set: usize| log.lock().unwrap().push((t, set))) as Part<'_>
            })
            .collect();
        run(&mut parts, 5, 2, false);
        drop(parts);
        let mut got = log.into_inner().unwrap();
        assert_eq!(got.len(), 15);
        got.sort();
        assert_eq!(&got[..5], &[(0, 0), (0, 0), (0, 0), (0, 1), (0, 1)]);
    }

    #[test]
    fn the_cpu_clock_counts_the_threads_work() {
        if thread_cpu_time().is_none() {
            return;
        }
        // A busy single part: its CPU time is positive and at most the wall time around it.
        let mut parts: Vec<Part<'_>> = vec![Box::new(|_set: usize| {
            let mut x = 0u64;
            for i in 0..200_000u64 {
                x = std::hint::black_box(x.wrapping_mul(31).wrapping_add(i));
            }
        })];
        let wall = Instant::now();
        let cpu = run(&mut parts, 20, 1, true);
        let wall = wall.elapsed();
        assert!(
            cpu > Duration::ZERO && cpu <= wall,
            "cpu {cpu:?}, wall {wall:?}"
        );
    }

    #[test]
    fn a_panicking_part_stops_every_thread() {
        for bad in 0..2 {
            let mut parts: Vec<Part<'_>> = (0..2)
                .map(|t| {
                    Box::new(move |_set: usize| {
                        if t == bad {
                            panic!("part {t} fails");
                        }
                    }) as Part<'_>
                })
                .collect();
            let r = catch_unwind(AssertUnwindSafe(|| run(&mut parts, 3, 1, false)));
            assert!(r.is_err(), "part {bad} panicked: run must panic, not hang");
        }
    }
}
