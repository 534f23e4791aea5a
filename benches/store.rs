//! Benchmark: the job store on `MemoryKv`.
//!
//! 1. Acquisitions per second with 1, 2, 4 and 8 concurrent pollers (each a registered
//!    node) draining a set of due fires, each run completed, and the conflict-abort rate:
//!    acquire transactions aborted by a conflict per acquisition (target ≤ 1 %).
//! 2. The cost of one acquisition cycle (16 due fires) with 10,000 and with 1,000,000
//!    registered triggers, and their ratio (target ≤ 1.5).
//! 3. Memory per registered trigger, measured by a counting allocator (target ≤ 1 KiB).
//! 4. The store's share of one fire on the node's hot path: 10,000 every-second cron
//!    triggers, acquired in batches of 2,000 and completed in batches of 256, as the
//!    node's poller and completer do. µs per fire = acquisition + completion.
//! 5. The durable embedded store with 1,000,000 triggers (`--durable [triggers]`, feature
//!    `embedded`): bytes on disk per trigger, and how long opening it takes (reading every
//!    key into memory).
//!
//! Run: `cargo bench --bench store` (add `-- --quick` for smaller sizes;
//! `cargo bench --bench store --features embedded -- --durable` for 5 alone).

#![allow(clippy::disallowed_methods)] // A benchmark measures wall time by definition.

use std::alloc::{GlobalAlloc, Layout};
use std::collections::BTreeSet;
use std::sync::atomic::{AtomicIsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use chrono::{DateTime, TimeDelta, Utc};
use sundial::calendar::Calendars;
use sundial::entropy::Entropy;
use sundial::job::{JobDefinition, JobTriggerDefinition, JobTypeKey, JsonObject};
use sundial::kv::memory::MemoryKv;
use sundial::name::{JobName, TriggerName};
use sundial::store::{AcquireRequest, Completion, KvJobStore, RunOutcome, StoreOptions};
use sundial::time::{from_micros, ManualClock};

/// Counts live heap bytes, over the allocator the `sundial` binary uses.
struct Counting;

static INNER: mimalloc::MiMalloc = mimalloc::MiMalloc;

static LIVE: AtomicIsize = AtomicIsize::new(0);

// SAFETY: forwards to mimalloc and only counts sizes.
#[allow(unsafe_code)]
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        LIVE.fetch_add(layout.size() as isize, Ordering::Relaxed);
        // SAFETY: same contract as the caller's.
        unsafe { INNER.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        LIVE.fetch_sub(layout.size() as isize, Ordering::Relaxed);
        // SAFETY: same contract as the caller's.
        unsafe { INNER.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

fn t0() -> DateTime<Utc> {
    from_micros(1_800_000_000_000_000).unwrap()
}

fn new_store(clock: &ManualClock) -> (KvJobStore<MemoryKv>, MemoryKv) {
    let kv = MemoryKv::new(Arc::new(clock.clone()));
    let store = KvJobStore::new(kv.clone(), Arc::new(Calendars::new()), Entropy::from_seed(1), StoreOptions::default());
    (store, kv)
}

/// `jobs` jobs of `per_job` triggers each with schedule `schedule`, registered in one
/// transaction per job.
async fn register(store: &KvJobStore<MemoryKv>, jobs: usize, per_job: usize, schedule: &str, prefix: &str) {
    let schedule: sundial::JobSchedule = schedule.parse().unwrap();
    let mut batch = Vec::new();
    for j in 0..jobs {
        let mut def =
            JobDefinition::new(JobName::new(format!("{prefix}{j}")).unwrap(), JobTypeKey::new("bench::Job").unwrap());
        def.allow_concurrent = true;
        for t in 0..per_job {
            def.triggers.push(JobTriggerDefinition::new(TriggerName::new(format!("t{t}")).unwrap(), schedule.clone()));
        }
        batch.push(def);
        if batch.len() == 256 {
            assert!(store.schedule(&batch, t0()).await.iter().all(Result::is_ok));
            batch.clear();
        }
    }
    assert!(store.schedule(&batch, t0()).await.iter().all(Result::is_ok));
}

/// A request for up to 16 fires due by `now` on `node` (the conformance scenarios' own).
fn request<'a>(node: &'a str, now: DateTime<Utc>, known: &'a BTreeSet<uuid::Uuid>) -> AcquireRequest<'a> {
    sundial_test_support::conformance::request(node, now, 16, known)
}

fn pollers_benchmark(fires: usize) {
    println!("1. acquisitions with concurrent pollers ({fires} due fires, batch 16, each run completed)");
    println!("{:>8} {:>14} {:>12} {:>14}", "pollers", "acquired/s", "aborts", "abort rate");
    for pollers in [1usize, 2, 4, 8] {
        let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
        let (acquired, aborts, elapsed) = runtime.block_on(async {
            let clock = ManualClock::new(t0());
            let (store, kv) = new_store(&clock);
            register(&store, fires, 1, "once 2027-01-15T08:00:00Z", "j").await;
            let due: DateTime<Utc> = "2027-01-15T08:00:00Z".parse().unwrap();
            for p in 0..pollers {
                store.heartbeat(&format!("node-{p}"), due, None, false).await.unwrap();
            }
            let before = kv.stats();
            let started = Instant::now();
            let mut tasks = Vec::new();
            for p in 0..pollers {
                let store = store.clone();
                tasks.push(tokio::spawn(async move {
                    let node = format!("node-{p}");
                    let known = BTreeSet::new();
                    let mut taken = 0usize;
                    loop {
                        let request = request(&node, due, &known);
                        let runs = store.acquire_due(&request).await.unwrap();
                        if runs.is_empty() {
                            return taken;
                        }
                        taken += runs.len();
                        for run in runs {
                            let completion = Completion {
                                run_id: run.run.id,
                                node: node.as_str().into(),
                                outcome: RunOutcome::Succeeded,
                                finished_at: due,
                                holds_trigger: run.holds_trigger,
                            };
                            store.complete_run(&completion).await.unwrap();
                        }
                    }
                }));
            }
            let mut acquired = 0;
            for task in tasks {
                acquired += task.await.unwrap();
            }
            let elapsed = started.elapsed();
            let aborts = kv.stats().conflicts - before.conflicts;
            (acquired, aborts, elapsed)
        });
        assert_eq!(acquired, fires, "every fire acquired exactly once");
        println!(
            "{:>8} {:>14.0} {:>12} {:>13.2}%",
            pollers,
            acquired as f64 / elapsed.as_secs_f64(),
            aborts,
            100.0 * aborts as f64 / acquired as f64
        );
    }
}

/// Registers `registered` idle triggers (next fire a day away) plus a stream of due
/// manual fires; returns the mean time of one acquisition cycle of 16, and bytes per
/// idle trigger.
async fn cycle_cost(registered: usize, cycles: usize) -> (Duration, f64) {
    let clock = ManualClock::new(t0());
    let (store, kv) = new_store(&clock);
    let live_before = LIVE.load(Ordering::Relaxed);
    register(&store, registered / 100, 100, "cron 0 0 3 * * *", "idle").await;
    // Let old versions go: nothing reads them any more.
    clock.advance(Duration::from_secs(6));
    store.heartbeat("node-0", t0(), None, false).await.unwrap();
    let bytes_per_trigger = (LIVE.load(Ordering::Relaxed) - live_before) as f64 / registered as f64;
    let mut hot = JobDefinition::new(JobName::new("hot").unwrap(), JobTypeKey::new("bench::Job").unwrap());
    hot.allow_concurrent = true;
    store.schedule(&[hot], t0()).await;
    let now = t0() + TimeDelta::seconds(1);
    let known = BTreeSet::new();
    let mut total = Duration::ZERO;
    for _ in 0..cycles {
        let requests: Vec<_> = (0..16).map(|_| (JobName::new("hot").unwrap(), JsonObject::new())).collect();
        store.enqueue(&requests, t0()).await;
        let request = request("node-0", now, &known);
        let started = Instant::now();
        let runs = store.acquire_due(&request).await.unwrap();
        total += started.elapsed();
        assert_eq!(runs.len(), 16);
        for run in runs {
            let completion = Completion {
                run_id: run.run.id,
                node: "node-0".into(),
                outcome: RunOutcome::Succeeded,
                finished_at: now,
                holds_trigger: run.holds_trigger,
            };
            store.complete_run(&completion).await.unwrap();
        }
    }
    drop(kv);
    (total / cycles as u32, bytes_per_trigger)
}

/// Acquires and completes every fire of `triggers` every-second cron triggers for
/// `seconds` simulated seconds; returns (acquisition, completion) time per fire.
async fn fire_cost(triggers: usize, seconds: usize) -> (Duration, Duration) {
    let clock = ManualClock::new(t0());
    let (store, _kv) = new_store(&clock);
    register(&store, triggers / 100, 100, "cron * * * * * *", "cron").await;
    store.heartbeat("node-0", t0(), None, false).await.unwrap();
    let known = BTreeSet::new();
    let (mut acquiring, mut completing, mut fires) = (Duration::ZERO, Duration::ZERO, 0usize);
    for second in 1..=seconds {
        let now = t0() + TimeDelta::seconds(second as i64);
        clock.set_wall(now);
        loop {
            let request = AcquireRequest { max: 2_000, ..request("node-0", now, &known) };
            let started = Instant::now();
            let runs = store.acquire_due(&request).await.unwrap();
            acquiring += started.elapsed();
            if runs.is_empty() {
                break;
            }
            fires += runs.len();
            let completions: Vec<Completion> = runs
                .iter()
                .map(|run| Completion {
                    run_id: run.run.id,
                    node: "node-0".into(),
                    outcome: RunOutcome::Succeeded,
                    finished_at: now,
                    holds_trigger: run.holds_trigger,
                })
                .collect();
            let started = Instant::now();
            for chunk in completions.chunks(256) {
                assert!(store.complete_runs(chunk).await.iter().all(Result::is_ok));
            }
            completing += started.elapsed();
        }
    }
    assert_eq!(fires, triggers * seconds, "every fire acquired exactly once");
    (acquiring / fires as u32, completing / fires as u32)
}

/// Registers `triggers` idle triggers on a durable store in a fresh directory, closes it,
/// and opens it again: bytes on disk per trigger, and the open's time.
#[cfg(feature = "embedded")]
fn durable_benchmark(triggers: usize) {
    use sundial::kv::embedded::EmbeddedKv;
    let dir = std::env::temp_dir().join(format!("sundial-store-bench-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let clock = ManualClock::new(t0());
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let store = EmbeddedKv::open(&dir, Arc::new(clock.clone())).unwrap();
    let jobs =
        KvJobStore::new(store.kv().clone(), Arc::new(Calendars::new()), Entropy::from_seed(1), StoreOptions::default());
    let began = Instant::now();
    runtime.block_on(register(&jobs, triggers / 100, 100, "cron 0 0 0 1 1 *", "j"));
    let written = began.elapsed();
    drop(jobs);
    store.close();
    let bytes: u64 =
        std::fs::read_dir(&dir).unwrap().flatten().filter_map(|f| f.metadata().ok()).map(|m| m.len()).sum();
    let began = Instant::now();
    let store = EmbeddedKv::open(&dir, Arc::new(clock)).unwrap();
    let opened = began.elapsed();
    let keys = store.kv().key_count();
    store.close();
    let _ = std::fs::remove_dir_all(&dir);
    println!("5. the durable embedded store with {triggers} triggers ({keys} keys)");
    println!(
        "written in {:.1} s; {:.0} bytes on disk per trigger; opened (every key read into memory) in {:.2} s",
        written.as_secs_f64(),
        bytes as f64 / triggers as f64,
        opened.as_secs_f64()
    );
}

fn main() {
    let quick = std::env::args().any(|a| a == "--quick");
    if std::env::args().any(|a| a == "--durable") {
        let triggers = std::env::args().filter_map(|a| a.parse().ok()).next().unwrap_or(1_000_000);
        #[cfg(feature = "embedded")]
        durable_benchmark(triggers);
        #[cfg(not(feature = "embedded"))]
        eprintln!("--durable needs the feature `embedded` ({triggers} triggers asked)");
        return;
    }
    let only_cycle = std::env::args().any(|a| a == "--cycle");
    if std::env::args().any(|a| a == "--fires") {
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        // `--fires [triggers] [seconds]`: the sustained benchmark's store is 100,000
        // triggers and 2,000,000 runs of history.
        let numbers: Vec<usize> = std::env::args().filter_map(|a| a.parse().ok()).collect();
        let triggers = numbers.first().copied().unwrap_or(10_000);
        let seconds = numbers.get(1).copied().unwrap_or(if quick { 3 } else { 10 });
        let (acquire, complete) = runtime.block_on(fire_cost(triggers, seconds));
        println!("4. store work per fire ({triggers} every-second cron triggers, {seconds} s)");
        println!(
            "acquire {:.1} µs + complete {:.1} µs per fire",
            acquire.as_secs_f64() * 1e6,
            complete.as_secs_f64() * 1e6
        );
        return;
    }
    if !only_cycle {
        pollers_benchmark(if quick { 4_000 } else { 20_000 });
    }
    let large = if quick { 200_000 } else { 1_000_000 };
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    println!("\n2. one acquisition cycle (16 due fires) against registered idle triggers");
    let (small_cost, small_bytes) = runtime.block_on(cycle_cost(10_000, 300));
    let (large_cost, large_bytes) = runtime.block_on(cycle_cost(large, 300));
    println!("{:>12} triggers: {:>10.1} µs per cycle", 10_000, small_cost.as_secs_f64() * 1e6);
    println!("{:>12} triggers: {:>10.1} µs per cycle", large, large_cost.as_secs_f64() * 1e6);
    println!("ratio {:.2} (target <= 1.5)", large_cost.as_secs_f64() / small_cost.as_secs_f64());
    println!("\n3. memory per registered trigger (trigger record, due entry, share of its job)");
    println!("{:>12} triggers: {:>8.0} bytes each", 10_000, small_bytes);
    println!("{:>12} triggers: {:>8.0} bytes each (target <= 1024)", large, large_bytes);
}
