//! The run's cores, shared by its tasks: every experiment, and every independent run inside one
//! (`Cores::map`), is a task that holds a core while it computes.
//!
//! A task waits for a core; the waiting task with the highest priority (an estimate of its
//! length: longest first, which keeps the last core from running one long task alone at the end)
//! gets the next free one, ties in the order they asked. A task that hands runs to
//! [`Cores::map`] lends its core to them while it waits for their results. A task that measures
//! on the wall clock asks for every core ([`Cores::run_alone`]), so nothing else of this run
//! competes with it. Which core a task gets and when changes no figure: each task computes from
//! its own inputs only, and results come back in the order they were asked for.

use std::cell::Cell;
use std::collections::BinaryHeap;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};

/// A task thread's stack: the experiments ran on the main thread (8 MiB) before they ran as
/// tasks; some recurse deeply (SQLite, the crash checker).
const TASK_STACK_BYTES: usize = 64 << 20;

/// The cores a run may use (cheap to clone: clones share them).
#[derive(Clone, Debug)]
pub struct Cores(Arc<Inner>);

#[derive(Debug)]
struct Inner {
    count: usize,
    state: Mutex<State>,
    freed: Condvar,
}

#[derive(Debug)]
struct State {
    free: usize,
    waiting: BinaryHeap<Waiter>,
    next_ticket: u64,
}

/// A task waiting for cores: higher priority first, then the earlier ticket.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Waiter {
    priority: u64,
    ticket: u64,
    cores: usize,
}

impl Ord for Waiter {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.priority
            .cmp(&other.priority)
            .then(other.ticket.cmp(&self.ticket))
    }
}

impl PartialOrd for Waiter {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

thread_local! {
    /// Cores the task on this thread holds (lent out by `map` while it waits).
    static HELD: Cell<usize> = const { Cell::new(0) };
}

/// One task for [`Cores::map`]: its input and its priority (an estimate of its length).
pub struct Task<I> {
    pub input: I,
    pub priority: u64,
}

impl Cores {
    /// `count` cores (at least one).
    pub fn new(count: usize) -> Cores {
        let count = count.max(1);
        Cores(Arc::new(Inner {
            count,
            state: Mutex::new(State {
                free: count,
                waiting: BinaryHeap::new(),
                next_ticket: 0,
            }),
            freed: Condvar::new(),
        }))
    }

    /// One core: every task in turn, as a serial run.
    pub fn serial() -> Cores {
        Cores::new(1)
    }

    /// The machine's cores (`std::thread::available_parallelism`).
    pub fn all() -> Cores {
        Cores::new(std::thread::available_parallelism().map_or(1, |n| n.get()))
    }

    pub fn count(&self) -> usize {
        self.0.count
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // A task that panicked while holding the lock left the counts consistent (every change
        // is one statement): carry on, the panic is reported when its thread is joined.
        self.0.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Waits for `cores` free cores, behind every waiter of higher priority (or equal priority
    /// and an earlier ticket); the guard gives them back.
    fn acquire(&self, cores: usize, priority: u64) -> Held<'_> {
        let me = self.enqueue(&mut self.lock(), cores, priority);
        self.wait_for(me)
    }

    /// Queues a waiter (under the lock `state`, so that several queue at once).
    fn enqueue(&self, state: &mut State, cores: usize, priority: u64) -> Waiter {
        let me = Waiter {
            priority,
            ticket: state.next_ticket,
            cores: cores.clamp(1, self.0.count),
        };
        state.next_ticket += 1;
        state.waiting.push(me);
        me
    }

    /// Waits until the queued `me` is first and its cores are free; takes them.
    fn wait_for(&self, me: Waiter) -> Held<'_> {
        let mut state = self.lock();
        while !(state.waiting.peek() == Some(&me) && state.free >= me.cores) {
            state = self.0.freed.wait(state).unwrap_or_else(|e| e.into_inner());
        }
        state.waiting.pop();
        state.free -= me.cores;
        drop(state);
        // The next waiter may fit in what is left.
        self.0.freed.notify_all();
        HELD.with(|h| h.set(h.get() + me.cores));
        Held {
            cores: self,
            n: me.cores,
        }
    }

    /// Runs `work` on the calling thread while it holds every core: nothing else of this run
    /// runs beside it (for measurements on the wall clock).
    pub fn run_alone<T>(&self, priority: u64, work: impl FnOnce() -> T) -> T {
        self.lent(|| {
            let _held = self.acquire(self.0.count, priority);
            work()
        })
    }

    /// Runs `work` with the cores the calling thread holds given back meanwhile (a task waiting
    /// for its runs); takes them again afterwards.
    fn lent<T>(&self, work: impl FnOnce() -> T) -> T {
        /// Takes the lent cores back when the work ends, or unwinds: the task's own guard
        /// gives them back once more when it ends.
        struct Lent<'a> {
            cores: &'a Cores,
            n: usize,
        }
        impl Drop for Lent<'_> {
            fn drop(&mut self) {
                if self.n > 0 {
                    std::mem::forget(self.cores.acquire(self.n, u64::MAX));
                }
            }
        }
        let n = HELD.with(|h| h.replace(0));
        if n > 0 {
            self.give_back(n);
        }
        let _lent = Lent { cores: self, n };
        work()
    }

    fn give_back(&self, n: usize) {
        self.lock().free += n;
        self.0.freed.notify_all();
    }

    /// Runs `f` on each task's input as a task of its own (one core each, highest priority
    /// first), on threads of their own; the results in the order of `tasks`. The calling task's
    /// core is lent to them while it waits. A panic in one is raised here once all have ended.
    pub fn map<I: Send, T: Send>(&self, tasks: Vec<Task<I>>, f: impl Fn(I) -> T + Sync) -> Vec<T> {
        self.map_with(tasks, 1, f)
    }

    /// [`Cores::map`], each task holding `cores` cores while it runs.
    pub fn map_with<I: Send, T: Send>(
        &self,
        tasks: Vec<Task<I>>,
        cores: usize,
        f: impl Fn(I) -> T + Sync,
    ) -> Vec<T> {
        let f = &f;
        self.lent(|| {
            // Every task queues before any starts, so the highest priority goes first.
            let queued: Vec<(Waiter, I)> = {
                let mut state = self.lock();
                let queue = |t: Task<I>| (self.enqueue(&mut state, cores, t.priority), t.input);
                tasks.into_iter().map(queue).collect()
            };
            std::thread::scope(|scope| {
                let handles: Vec<_> = queued
                    .into_iter()
                    .map(|(me, input)| {
                        std::thread::Builder::new()
                            .stack_size(TASK_STACK_BYTES)
                            .spawn_scoped(scope, move || {
                                let _held = self.wait_for(me);
                                f(input)
                            })
                            .expect("spawn a task thread")
                    })
                    .collect();
                handles
                    .into_iter()
                    .map(|h| h.join().unwrap_or_else(|p| std::panic::resume_unwind(p)))
                    .collect()
            })
        })
    }
}

/// Cores held by the task on this thread, given back when it ends (or panics).
struct Held<'a> {
    cores: &'a Cores,
    n: usize,
}

impl Drop for Held<'_> {
    fn drop(&mut self) {
        HELD.with(|h| h.set(h.get().saturating_sub(self.n)));
        self.cores.give_back(self.n);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::time::Duration;

    fn tasks(n: u64) -> Vec<Task<u64>> {
        (0..n)
            .map(|i| Task {
                input: i,
                priority: i % 3,
            })
            .collect()
    }

    #[test]
    fn results_come_back_in_the_order_asked_whatever_the_cores() {
        let square = |i: u64| {
            std::thread::sleep(Duration::from_millis((7 * i) % 5));
            i * i
        };
        let serial = Cores::serial().map(tasks(12), square);
        let parallel = Cores::new(3).map(tasks(12), square);
        assert_eq!(serial, (0..12).map(|i| i * i).collect::<Vec<_>>());
        assert_eq!(serial, parallel);
    }

    /// Counts tasks running at once (and the most seen) while each sleeps.
    fn busy(running: &AtomicUsize, most: &AtomicUsize) {
        let now = running.fetch_add(1, Ordering::SeqCst) + 1;
        most.fetch_max(now, Ordering::SeqCst);
        std::thread::sleep(Duration::from_millis(20));
        running.fetch_sub(1, Ordering::SeqCst);
    }

    #[test]
    fn no_more_tasks_run_at_once_than_there_are_cores_and_all_of_them_are_used() {
        let (running, most) = (AtomicUsize::new(0), AtomicUsize::new(0));
        Cores::new(2).map(tasks(8), |_| busy(&running, &most));
        assert_eq!(most.load(Ordering::SeqCst), 2);
        let (running, most) = (AtomicUsize::new(0), AtomicUsize::new(0));
        Cores::serial().map(tasks(4), |_| busy(&running, &most));
        assert_eq!(most.load(Ordering::SeqCst), 1);
    }

    #[test]
    fn a_task_lends_its_core_to_its_runs_and_a_lone_task_runs_alone() {
        let cores = Cores::new(2);
        let (running, most) = (AtomicUsize::new(0), AtomicUsize::new(0));
        // Two tasks, each handing out three runs: never more than two runs at once, and
        // no deadlock although both parents hold a core when they call map.
        let nested = cores.map(tasks(2), |i| {
            cores
                .map(tasks(3), |j| {
                    busy(&running, &most);
                    i * 10 + j
                })
                .iter()
                .sum::<u64>()
        });
        assert_eq!(nested, vec![3, 33]);
        assert_eq!(most.load(Ordering::SeqCst), 2);
        let (running, most) = (AtomicUsize::new(0), AtomicUsize::new(0));
        let alone_saw = AtomicUsize::new(usize::MAX);
        cores.map(tasks(5), |i| {
            if i == 2 {
                cores.run_alone(0, || {
                    let before = running.load(Ordering::SeqCst);
                    busy(&running, &most);
                    alone_saw.store(before, Ordering::SeqCst);
                });
            } else {
                busy(&running, &most);
            }
        });
        assert_eq!(alone_saw.load(Ordering::SeqCst), 0, "a task ran beside it");
    }

    #[test]
    fn the_longest_waiting_task_goes_first() {
        let cores = Cores::serial();
        let order = Mutex::new(Vec::new());
        let held = cores.acquire(1, 0);
        std::thread::scope(|s| {
            for (name, priority) in [("short", 1), ("long", 9), ("medium", 5)] {
                let (cores, order) = (&cores, &order);
                s.spawn(move || {
                    let _h = cores.acquire(1, priority);
                    order.lock().unwrap().push(name);
                });
                // Let each queue before the next.
                std::thread::sleep(Duration::from_millis(30));
            }
            drop(held);
        });
        assert_eq!(*order.lock().unwrap(), ["long", "medium", "short"]);
    }

    #[test]
    fn tasks_handed_out_together_start_longest_first() {
        let order = Mutex::new(Vec::new());
        let tasks = [3, 9, 1, 5]
            .map(|p| Task {
                input: p,
                priority: p,
            })
            .into();
        Cores::serial().map(tasks, |p| order.lock().unwrap().push(p));
        assert_eq!(*order.lock().unwrap(), [9, 5, 3, 1]);
    }

    #[test]
    fn a_panicking_task_gives_its_core_back_and_the_panic_reaches_the_caller() {
        let cores = Cores::serial();
        let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            cores.map(tasks(3), |i| {
                assert!(i != 1, "task 1 fails");
                i
            })
        }));
        assert!(outcome.is_err());
        assert_eq!(cores.map(tasks(2), |i| i), vec![0, 1]);
    }
}
