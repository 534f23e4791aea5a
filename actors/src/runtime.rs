//! The tokio runtime a node runs on, optionally with each worker pinned to its own CPU.
//!
//! Why pin: at a to-the-second boundary a node releases thousands of runs at once, and
//! every worker should be starting them on a CPU of its own. A worker that runs out of
//! work for a moment parks; Linux often wakes it on the CPU of the worker that woke it
//! (wake-affine placement), where the two then share one CPU for several milliseconds
//! until the load balancer moves one. On the 2-core development machine that made the
//! last of 10,000 runs due together start about twice as late in a third of the runs of
//! the lateness benchmark, when the gate woke a burst's runs all at once and the workers
//! slept on the lock of tokio's shared queue. The gate now releases them through a relay
//! that keeps them in the workers' own queues ([`crate::gate::RELAY_LANES`]), so workers
//! rarely park within a burst; a worker pinned to its own CPU is always woken there.
//!
//! The price: a pinned worker woken on an idle CPU waits for that CPU to wake up, where an
//! unpinned one often runs at once on the CPU of the thread that woke it; at light loads
//! (ten fires a second) runs start some tens of microseconds later. And on a shared
//! machine a pinned worker cannot move away from a CPU another process keeps busy. So it
//! is off by default, for nodes that own their machine (or CPU set) and release thousands
//! of runs at a time.

use std::io;

use tokio::runtime::{Builder, Runtime};

/// A multi-thread runtime with all drivers (time, I/O, signals) and tokio's default
/// number of workers. With `pin_workers`, worker `i` runs only on the `i`-th CPU this
/// process may use (round robin when there are more workers than CPUs); threads the
/// runtime starts later for blocking work are not pinned.
///
/// # Errors
/// The runtime cannot be built, or `pin_workers` on a platform without CPU affinity
/// (only Linux has it here) or where this process's allowed CPUs cannot be read.
pub fn multi_thread(pin_workers: bool) -> io::Result<Runtime> {
    let mut builder = Builder::new_multi_thread();
    builder.enable_all();
    if pin_workers {
        pin::workers(&mut builder)?;
    }
    builder.build()
}

#[cfg(target_os = "linux")]
mod pin {
    use std::io;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;

    use nix::sched::{sched_getaffinity, sched_setaffinity, CpuSet};
    use nix::unistd::Pid;
    use tokio::runtime::Builder;

    /// The CPUs the calling thread may run on, in increasing order.
    pub(super) fn allowed_cpus() -> io::Result<Vec<usize>> {
        let set = sched_getaffinity(Pid::from_raw(0)).map_err(io::Error::from)?;
        let cpus: Vec<usize> = (0..CpuSet::count()).filter(|&cpu| set.is_set(cpu).unwrap_or(false)).collect();
        if cpus.is_empty() {
            return Err(io::Error::other("this process may run on no CPU"));
        }
        Ok(cpus)
    }

    /// Pins the calling thread to `cpu`.
    pub(super) fn pin_current_thread(cpu: usize) -> io::Result<()> {
        let mut set = CpuSet::new();
        set.set(cpu).map_err(io::Error::from)?;
        sched_setaffinity(Pid::from_raw(0), &set).map_err(io::Error::from)
    }

    /// Sets `builder` up to pin its workers. A multi-thread runtime starts its workers as
    /// the first threads of its pool, while it is built, before anything else can ask
    /// the pool for a thread: the first `workers` thread starts are the workers.
    pub(super) fn workers(builder: &mut Builder) -> io::Result<()> {
        let cpus = allowed_cpus()?;
        let workers = std::thread::available_parallelism().map_or(cpus.len(), usize::from);
        builder.worker_threads(workers);
        let started = Arc::new(AtomicUsize::new(0));
        builder.on_thread_start(move || {
            let index = started.fetch_add(1, Ordering::Relaxed);
            if index < workers {
                let cpu = cpus[index % cpus.len()];
                if let Err(error) = pin_current_thread(cpu) {
                    // The worker still runs, only unpinned.
                    tracing::warn!(cpu, %error, "could not pin a runtime worker to its CPU");
                }
            }
        });
        Ok(())
    }
}

#[cfg(not(target_os = "linux"))]
mod pin {
    use std::io;

    use tokio::runtime::Builder;

    pub(super) fn workers(_builder: &mut Builder) -> io::Result<()> {
        Err(io::Error::new(io::ErrorKind::Unsupported, "pinning workers to CPUs needs Linux"))
    }
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    #![allow(clippy::disallowed_methods)] // A deadline in real time for threads that spin.

    use std::collections::BTreeSet;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::{Arc, Mutex};
    use std::time::{Duration, Instant};

    use nix::sched::{sched_getaffinity, CpuSet};
    use nix::unistd::Pid;

    use super::*;

    /// The CPUs the calling thread may run on.
    fn own_cpus() -> BTreeSet<usize> {
        let set = sched_getaffinity(Pid::from_raw(0)).unwrap();
        (0..CpuSet::count()).filter(|&cpu| set.is_set(cpu).unwrap()).collect()
    }

    /// Runs one task on every worker at once (each holds its worker until all have
    /// started, so no two share one) and returns what each saw of its CPUs.
    fn cpus_of_each_worker(runtime: &Runtime, workers: usize) -> Vec<BTreeSet<usize>> {
        let arrived = Arc::new(AtomicUsize::new(0));
        let seen = Arc::new(Mutex::new(Vec::new()));
        let tasks: Vec<_> = (0..workers)
            .map(|_| {
                let (arrived, seen) = (arrived.clone(), seen.clone());
                runtime.spawn(async move {
                    arrived.fetch_add(1, Ordering::SeqCst);
                    let deadline = Instant::now() + Duration::from_secs(10);
                    while arrived.load(Ordering::SeqCst) < workers {
                        assert!(Instant::now() < deadline, "the tasks did not all get a worker");
                        std::thread::yield_now();
                    }
                    seen.lock().unwrap().push(own_cpus());
                })
            })
            .collect();
        runtime.block_on(async {
            for task in tasks {
                task.await.unwrap();
            }
        });
        let seen = seen.lock().unwrap().clone();
        seen
    }

    #[test]
    fn each_worker_runs_on_one_cpu_of_its_own() {
        let allowed = pin::allowed_cpus().unwrap();
        let workers = std::thread::available_parallelism().map_or(allowed.len(), usize::from);
        let runtime = multi_thread(true).unwrap();
        let seen = cpus_of_each_worker(&runtime, workers);
        assert_eq!(seen.len(), workers);
        for cpus in &seen {
            assert_eq!(cpus.len(), 1, "a pinned worker may run on one CPU only: {cpus:?}");
            assert!(allowed.contains(cpus.first().unwrap()), "on a CPU this process may use");
        }
        let distinct: BTreeSet<usize> = seen.iter().flatten().copied().collect();
        assert_eq!(distinct.len(), workers.min(allowed.len()), "workers spread over the CPUs: {seen:?}");
        // Threads for blocking work are not pinned.
        let blocking = runtime.block_on(runtime.spawn_blocking(own_cpus)).unwrap();
        assert_eq!(blocking, allowed.iter().copied().collect());
    }

    #[test]
    fn unpinned_workers_keep_every_allowed_cpu() {
        let allowed: BTreeSet<usize> = pin::allowed_cpus().unwrap().into_iter().collect();
        let runtime = multi_thread(false).unwrap();
        let workers = std::thread::available_parallelism().map_or(allowed.len(), usize::from);
        for cpus in cpus_of_each_worker(&runtime, workers) {
            assert_eq!(cpus, allowed);
        }
    }
}
