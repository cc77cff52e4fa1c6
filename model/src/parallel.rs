//! Building a mesh on several threads: the parts of a full build (the
//! model's Services, their clusters and routes, the copies of the Istio
//! objects it keeps) that read only what is already built, split over
//! scoped threads. In-place updates that rebuild a whole list of that size
//! (a route table, 512 or more security policies or Sidecars) take them
//! too. The threads are not pinned: for the tens of milliseconds of a
//! large rebuild they take their share of the cores the serving executors
//! run on.

use std::sync::atomic::{AtomicUsize, Ordering};

/// How many threads a full build uses (0, the default: the machine's
/// parallelism), at most [`MAX_THREADS`].
static THREADS: AtomicUsize = AtomicUsize::new(0);

/// The most threads a full build uses, whatever the machine.
pub const MAX_THREADS: usize = 4;

/// Sets how many threads a full build uses (0: the machine's parallelism,
/// at most [`MAX_THREADS`]); a benchmark that counts one thread's
/// instructions sets 1.
pub fn set_rebuild_threads(n: usize) {
    THREADS.store(n, Ordering::Relaxed);
}

fn threads() -> usize {
    // (The machine's, asked once: the standard library reads the affinity
    // mask and the cgroup's quota on every call.)
    static MACHINE: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    match THREADS.load(Ordering::Relaxed) {
        0 => *MACHINE.get_or_init(|| std::thread::available_parallelism().map_or(1, usize::from).min(MAX_THREADS)),
        n => n.min(MAX_THREADS),
    }
}

/// `f` of each of `items`, in order, on up to [`set_rebuild_threads`]'s
/// count of scoped threads (this one among them). The items are taken in
/// small runs from a shared counter, so that a thread that drew costly
/// items (the services of a namespace may cluster) does not hold up the
/// rest; the runs are put back in order. For the parts of a full build
/// that read only what is built: the result is the same whatever the
/// split (the per-thread memos are keyed by what they hold, or hold what
/// is set once at start, as the compliance policy).
pub fn par_map<T: Sync, R: Send>(items: &[T], f: impl Fn(&T) -> R + Sync) -> Vec<R> {
    // Below this many items a thread costs more than it saves.
    const LEAST_PER_THREAD: usize = 256;
    let threads = threads().min(items.len() / LEAST_PER_THREAD);
    if threads < 2 {
        return items.iter().map(f).collect();
    }
    // About sixteen runs a thread.
    let run = items.len().div_ceil(threads * 16);
    let runs = items.len().div_ceil(run);
    let next = AtomicUsize::new(0);
    let work = || {
        let mut done: Vec<(usize, Vec<R>)> = Vec::new();
        loop {
            let i = next.fetch_add(1, Ordering::Relaxed);
            if i >= runs {
                return done;
            }
            done.push((i, items[i * run..((i + 1) * run).min(items.len())].iter().map(&f).collect()));
        }
    };
    let mut done = std::thread::scope(|s| {
        // A thread the system refuses (a process or cgroup limit) is done
        // without: this one takes every run left.
        let helpers: Vec<_> = (1..threads)
            .map_while(|_| std::thread::Builder::new().name("mesh-build".into()).spawn_scoped(s, work).ok())
            .collect();
        let mut done = work();
        for handle in helpers {
            match handle.join() {
                Ok(part) => done.extend(part),
                // As if the panic had happened on this thread.
                Err(panic) => std::panic::resume_unwind(panic),
            }
        }
        done
    });
    done.sort_unstable_by_key(|(i, _)| *i);
    let mut all = Vec::with_capacity(items.len());
    for (_, part) in done {
        all.extend(part);
    }
    all
}

#[cfg(test)]
mod tests {
    use super::*;

    /// In order, whatever the split; and a panic on a helper thread is
    /// the caller's.
    #[test]
    fn par_map_keeps_the_order_and_the_panics() {
        set_rebuild_threads(3);
        let items: Vec<u32> = (0..1000).collect();
        let seen = std::sync::Mutex::new(std::collections::HashSet::new());
        // (Each item takes a little while, so that the helpers, which
        // take runs as they come, get some: at least 67 ms of work.)
        let out = par_map(&items, |i| {
            seen.lock().unwrap().insert(std::thread::current().id());
            std::thread::sleep(std::time::Duration::from_micros(200));
            i * 2
        });
        assert_eq!(out, items.iter().map(|i| i * 2).collect::<Vec<_>>());
        assert!(seen.lock().unwrap().len() > 1, "helpers took part");
        // Too few items for a second thread: all on this one.
        let here = std::thread::current().id();
        assert!(par_map(&items[..300], |_| std::thread::current().id() == here).into_iter().all(|b| b));
        // A panic only a helper can raise (this thread never does) is the
        // caller's.
        let panicked = std::panic::catch_unwind(|| {
            par_map(&items, |_| {
                std::thread::sleep(std::time::Duration::from_micros(200));
                assert!(std::thread::current().id() == here, "on a helper");
            })
        });
        assert!(panicked.is_err(), "a helper's panic was lost");
    }
}
