//! Building a full mesh on several threads: the parts of a full build
//! (the model's services, their clusters and routes) that read only what
//! is already built, split over scoped threads.

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
    match THREADS.load(Ordering::Relaxed) {
        0 => std::thread::available_parallelism().map_or(1, usize::from).min(MAX_THREADS),
        n => n.min(MAX_THREADS),
    }
}

/// `f` of each of `items`, in order, on up to [`set_rebuild_threads`]'s
/// count of scoped threads (contiguous parts; this thread takes the first). For the parts
/// of a full translation that read only the model: the result is the same
/// whatever the split (the per-thread memos are keyed by what they hold).
pub fn par_map<T: Sync, R: Send>(items: &[T], f: impl Fn(&T) -> R + Sync) -> Vec<R> {
    // Below this many items a thread costs more than it saves.
    const LEAST_PER_THREAD: usize = 256;
    let threads = threads().min(items.len() / LEAST_PER_THREAD).max(1);
    let f = &f;
    let build = move |part: &[T]| part.iter().map(f).collect::<Vec<R>>();
    if threads == 1 {
        return build(items);
    }
    let per = items.len().div_ceil(threads);
    std::thread::scope(|s| {
        let rest: Vec<_> = items.chunks(per).skip(1).map(|part| s.spawn(move || build(part))).collect();
        let mut all = build(&items[..per]);
        for handle in rest {
            match handle.join() {
                Ok(part) => all.extend(part),
                // As if the panic had happened on this thread.
                Err(panic) => std::panic::resume_unwind(panic),
            }
        }
        all
    })
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
        let out = par_map(&items, |i| {
            seen.lock().unwrap().insert(std::thread::current().id());
            i * 2
        });
        assert_eq!(out, items.iter().map(|i| i * 2).collect::<Vec<_>>());
        assert_eq!(seen.lock().unwrap().len(), 3, "three threads");
        // Too few items for a second thread: all on this one.
        let here = std::thread::current().id();
        assert!(par_map(&items[..300], |_| std::thread::current().id() == here).into_iter().all(|b| b));
        let panicked = std::panic::catch_unwind(|| par_map(&items, |i| assert!(*i != 999, "item {i}")));
        assert!(panicked.is_err());
    }
}
