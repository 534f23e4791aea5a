//! Benchmark: lateness (actual start − scheduled time) of to-the-second cron fires on one
//! sundial node and, in the same run, on `apalis` with `apalis-cron` (in memory, no-op
//! jobs), side by side with the p99 ratio. sundial writes full run history; the peer writes
//! none. Missed and duplicated fires are counted from what the jobs themselves recorded.
//!
//! What is measured by default is sundial as people embed it: one trigger per job, default
//! job options (not concurrent), the system allocator, and each load twice, with default
//! `SchedulerOptions` and with options sized to the load (`max_concurrent_runs = 2 × load
//! + 64`, `acquire_batch_size` the load within 16 and 2,000). `-- --packed` measures the
//! shape the engine was first tuned on instead (100 triggers per job, concurrent, tuned
//! options), `-- --concurrent` the default shape with concurrent jobs (what the exclusion
//! of non-concurrent jobs costs). `SUNDIAL_BENCH_ALLOCATOR=mimalloc` runs everything on
//! the `sundial` binary's allocator, `SUNDIAL_BENCH_COUNT_ALLOCATIONS=1` adds allocations
//! per fire to the CPU split (see `allocator`). The tuned configuration also runs on the
//! durable embedded store (`EmbeddedKv`: each commit synced to SQLite's log in a
//! temporary directory before it returns), whose table follows the main one with its p99
//! against `MemoryKv`'s and apalis's, and its bytes on disk per trigger and per run.
//!
//! Loads: N triggers each firing every second = N fires/s, each measured for 20 s or as
//! long as 1,000 fires take (100 s at 10 fires/s), so that a p99 is not the maximum of a
//! few dozen fires, in rounds of 10 s that alternate the schedulers, so that all meet the
//! same phases of the machine. Also: 10,000 one-shot triggers due at the same instant,
//! time until the last one started (the peer's are workers whose cron matches that one
//! second); and, in the full run, a sustained load for 20 s (50,000 fires/s, 100,000 with
//! `--packed`), run again on mimalloc in a child process to print the system allocator's
//! throughput against it, then the CPU a bare ractor actor's whole life costs (the floor
//! of an actor per run) beside a bare tokio task's, and how fast as many of each start
//! when one gate releases them all (the floor of the sustained load's lateness, whose
//! fires all fall on one instant a second). The sustained run also prints what the
//! in-memory store did meanwhile: its commits and conflicts, and how long its one lock
//! was held and waited for, per fire (every read and commit takes that lock, so its hold
//! bounds the fires per second whatever the cores).
//!
//! Run: `cargo bench -p sundial-actors --bench lateness` (`-- --quick`: smaller, shorter;
//! `-- --load N`: that cron load and the burst only; `-- --burst`: only the burst;
//! `-- --burst-size N`: N one-shots in the burst instead of 10,000;
//! `-- --sustained`: only the sustained run; `-- --http-sink`: the tuned row without events,
//! with events counted in the process (as the node binary's metrics do), and with them
//! sent to an HTTP sink whose receiver answers in 100 ms (`sink`); `-- --floor`: only the bare actor's
//! and task's costs, with `--current-thread` on a current-thread runtime as a simulation
//! uses; `-- --start-floor`: only how fast bare tokio tasks and bare ractor
//! actors waiting on one gate start once it opens, `--burst-size` of each; `-- --pinned`:
//! runtime workers pinned to CPUs). `BENCH_PER_SECOND=1`
//! prints sundial's lateness per second and the burst's distribution.
//!
//! All schedulers run on one tokio runtime, the one a node gets
//! (`sundial_actors::runtime::multi_thread`): one worker per CPU, and with `--pinned`
//! each pinned to its own, as `[runtime] pin_workers = true` does.

#![allow(clippy::disallowed_methods)] // A benchmark measures real time by definition.

use std::collections::BTreeMap;
use std::str::FromStr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use apalis::prelude::*;
use apalis_cron::{CronScheduler, Tick};
use chrono::{DateTime, TimeDelta, Timelike, Utc};
use sundial::entropy::Entropy;
use sundial::job::{JobDefinition, JobTriggerDefinition, JobTypeKey};
use sundial::kv::embedded::{EmbeddedEngine, EmbeddedKv, EmbeddedOptions};
use sundial::kv::memory::{MemoryKv, MemoryKvOptions, MemoryKvStats};
use sundial::name::{JobName, TriggerName};
use sundial::options::SchedulerOptions;
use sundial::store::{KvJobStore, StoreOptions};
use sundial::time::{Clock, SystemClock};
use sundial_actors::clock::TokioSleeper;
use sundial_actors::job::{Job, JobResult, RunContext};
use sundial_actors::node::{Node, NodeConfig};
use sundial_actors::registry::JobRegistry;
use sundial_actors::stats::EngineWork;

mod floors;
mod sink;
mod sustained;

use floors::{floors, start_floors};
use sustained::sustained;

mod allocator;

// The system allocator, or the `sundial` binary's (see `allocator`); both schedulers
// measured in a run share it.
#[global_allocator]
static ALLOCATOR: allocator::BenchAllocator = allocator::BenchAllocator;

/// Whole seconds after a scheduler starts before lateness is measured (both schedulers).
const WARM_UP_SECONDS: i64 = 2;

/// Fires a cron load's lateness percentiles are taken over, at least: at 10 fires/s, five
/// seconds give 50 fires, whose "p99" is their maximum (one late wake-up of the machine
/// decides it); 1,000 make the p99 the tenth latest.
const MEASURED_FIRES: usize = 1_000;

/// Seconds a cron load is measured, at least: two rounds each, so that a slow phase of
/// the machine (they last seconds to minutes here) meets one scheduler alone less often.
/// One 5 s block each had decided single runs either way (1,000 fires/s: a 0.3× and a
/// 1.1× run among about twenty, every fire of a slow second late).
const MEASURED_SECONDS: i64 = 20;

/// The longest stretch one scheduler is measured before the other's turn, seconds.
const ROUND_SECONDS: i64 = 10;

/// Whole seconds a cron load at `load` fires/s is measured: `base`, or as many as
/// `fires` fires take.
fn measured_seconds(load: usize, base: i64, fires: usize) -> i64 {
    base.max(fires.div_ceil(load.max(1)) as i64)
}

/// (trigger number, scheduled µs, lateness µs), as recorded by the jobs: a fire is its
/// trigger and scheduled time. A number rather than a name, so that recording allocates
/// nothing in either scheduler's jobs (sundial's formatted the job's and trigger's names
/// into one, the peer's cloned its worker's): the jobs measured are no-ops but for this.
type Record = (u32, i64, i64);

/// What the jobs of either scheduler record, shared by all of them.
type Records = Arc<Mutex<Vec<Record>>>;

/// Records with room for `fires`, their memory already touched: a record list growing
/// while jobs start, or filling pages the kernel has yet to zero (it does so at the first
/// write, a huge page at a time, under the lock every job takes), would measure that,
/// not the scheduler.
fn records_for(fires: usize) -> Records {
    let mut records = Vec::with_capacity(fires);
    records.resize(fires, (0, 0, 0));
    records.clear();
    Arc::new(Mutex::new(records))
}

/// Triggers per job at most (`j{n}` has triggers `t0`, `t1`, …).
const TRIGGERS_PER_JOB: usize = 100;

/// The number of trigger `t{t}` of job `j{j}`: `j × TRIGGERS_PER_JOB + t`.
fn trigger_number(job: &str, trigger: &str) -> u32 {
    let number = |name: &str, prefix: char| -> u32 {
        name.strip_prefix(prefix).and_then(|n| n.parse().ok()).expect("a bench job or trigger name")
    };
    number(job, 'j') * TRIGGERS_PER_JOB as u32 + number(trigger, 't')
}

/// How the bench's jobs are defined.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Shape {
    /// Triggers per job (at most [`TRIGGERS_PER_JOB`]).
    per_job: usize,
    /// `allow_concurrent` on every job.
    concurrent: bool,
}

impl Shape {
    /// As people define jobs: one trigger each, default job options (not concurrent).
    const USER: Shape = Shape { per_job: 1, concurrent: false };
    /// The shape the engine was first tuned on: 100 triggers per job, concurrent.
    const PACKED: Shape = Shape { per_job: TRIGGERS_PER_JOB, concurrent: true };
}

/// Which `SchedulerOptions` a sundial node of the bench runs with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Tuning {
    /// `SchedulerOptions::default()`.
    Default,
    /// Sized to the load: `max_concurrent_runs = 2 × load + 64`, `acquire_batch_size`
    /// the load within 16 and 2,000.
    Tuned,
}

impl Tuning {
    fn options(self, load: usize) -> SchedulerOptions {
        match self {
            Tuning::Default => SchedulerOptions::default(),
            Tuning::Tuned => SchedulerOptions {
                max_concurrent_runs: (load * 2 + 64) as u32,
                acquire_batch_size: Some(load.clamp(16, 2_000) as u32),
                ..SchedulerOptions::default()
            },
        }
    }
}

/// One sundial configuration the bench measures: the jobs' shape and the node's options.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Config {
    shape: Shape,
    tuning: Tuning,
    /// Where the node's events go (`--http-sink`).
    events: Events,
}

/// Where a bench node's events go.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Events {
    /// Nowhere: the engine builds none.
    Off,
    /// Counted in the process, as the node binary's metrics do.
    Counted,
    /// To an HTTP sink whose receiver answers in 100 ms.
    HttpSink,
}

impl Config {
    fn label(self) -> String {
        let options = match self.tuning {
            Tuning::Default => "default options",
            Tuning::Tuned => "tuned options",
        };
        let events = match self.events {
            Events::Off => "",
            Events::Counted => " + events",
            Events::HttpSink => " + events to http",
        };
        format!("sundial, {options}{events}")
    }
}

struct Recording {
    clock: Arc<dyn Clock>,
    records: Records,
}

impl Job for Recording {
    async fn run(&mut self, ctx: &RunContext) -> JobResult {
        let now = self.clock.now();
        let scheduled = ctx.run.scheduled_at;
        let id = trigger_number(ctx.run.job.as_str(), ctx.run.trigger.as_ref().map_or("", |t| t.as_str()));
        let lateness = (now - scheduled).num_microseconds().unwrap_or(0);
        self.records.lock().unwrap().push((id, scheduled.timestamp_micros(), lateness));
        Ok(())
    }
}

struct Summary {
    /// Process CPU time per fire that ran, µs (both cores; `NaN` where unknown).
    cpu_per_fire_us: f64,
    /// Allocations per fire that ran (`NaN` unless counted, see `allocator`).
    allocations_per_fire: f64,
    /// sundial only: time per fire in acquisition, completion and run actor starts, µs.
    engine_per_fire_us: Option<[f64; 3]>,
    /// Lateness of every fire of the measured seconds, µs, ascending.
    lateness_us: Vec<i64>,
    missed: usize,
    duplicated: usize,
    /// Fires that ran per second the scheduler was running (warm-up included): at a load
    /// it cannot keep up with, how many fires per second it does run.
    ran_per_second: f64,
    /// sundial only: what the embedded store did while the node served (commits,
    /// conflicts, its lock) and the fires that ran meanwhile (warm-up included).
    store: Option<(MemoryKvStats, usize)>,
}

/// What the store did from `before` to `after`, in the counters the bench prints.
fn store_since(before: MemoryKvStats, after: MemoryKvStats) -> MemoryKvStats {
    MemoryKvStats {
        commits: after.commits - before.commits,
        read_only_commits: after.read_only_commits - before.read_only_commits,
        conflicts: after.conflicts - before.conflicts,
        lock_held: after.lock_held.saturating_sub(before.lock_held),
        lock_shared: after.lock_shared.saturating_sub(before.lock_shared),
        lock_waited: after.lock_waited.saturating_sub(before.lock_waited),
        ..after
    }
}

impl Summary {
    /// The `p` quantile of lateness (0.5 the median, 1.0 the maximum), ms.
    fn pct(&self, p: f64) -> f64 {
        percentile(&self.lateness_us, p).map_or(f64::NAN, |us| us as f64 / 1000.0)
    }

    /// One summary of the rounds of one load: lateness over all their fires, missed and
    /// duplicated fires summed, the rest averaged over the fires each round ran.
    fn merge(rounds: Vec<Summary>) -> Summary {
        let fires: Vec<f64> = rounds.iter().map(|r| r.lateness_us.len() as f64).collect();
        let weighted = |value: &dyn Fn(&Summary) -> f64| {
            let (sum, weight) = rounds
                .iter()
                .zip(&fires)
                .filter(|(r, _)| value(r).is_finite())
                .fold((0.0, 0.0), |(sum, weight), (r, n)| (sum + value(r) * n, weight + n));
            if weight > 0.0 {
                sum / weight
            } else {
                f64::NAN
            }
        };
        let engine_per_fire_us = rounds[0]
            .engine_per_fire_us
            .map(|_| [0, 1, 2].map(|i| weighted(&|r: &Summary| r.engine_per_fire_us.map_or(f64::NAN, |e| e[i]))));
        let mut lateness_us: Vec<i64> = rounds.iter().flat_map(|r| r.lateness_us.iter().copied()).collect();
        lateness_us.sort_unstable();
        Summary {
            cpu_per_fire_us: weighted(&|r: &Summary| r.cpu_per_fire_us),
            allocations_per_fire: weighted(&|r: &Summary| r.allocations_per_fire),
            engine_per_fire_us,
            lateness_us,
            missed: rounds.iter().map(|r| r.missed).sum(),
            duplicated: rounds.iter().map(|r| r.duplicated).sum(),
            ran_per_second: weighted(&|r: &Summary| r.ran_per_second),
            store: None,
        }
    }
}

/// The process's CPU time so far (user + system, all threads), from `/proc/self/stat`.
fn process_cpu() -> Option<Duration> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    // Fields after the command name (which may hold spaces) ends with ')'.
    let fields: Vec<&str> = stat.rsplit_once(')')?.1.split_whitespace().collect();
    let ticks: u64 = fields.get(11)?.parse::<u64>().ok()? + fields.get(12)?.parse::<u64>().ok()?;
    // Linux reports in USER_HZ, 100 per second on every architecture we run on.
    Some(Duration::from_millis(ticks * 10))
}

/// CPU µs per fire between two `process_cpu` readings; `NaN` when the run used too little
/// CPU for the 10 ms ticks it is counted in (a light load).
fn cpu_per_fire(before: Option<Duration>, after: Option<Duration>, fires: usize) -> f64 {
    match (before, after) {
        (Some(b), Some(a)) if fires > 0 && a - b >= Duration::from_millis(200) => {
            (a - b).as_secs_f64() * 1e6 / fires as f64
        }
        _ => f64::NAN,
    }
}

/// Allocations per fire since `before` (`NaN` when not counted).
fn allocations_per_fire(before: Option<u64>, fires: usize) -> f64 {
    match (before, allocator::allocations()) {
        (Some(before), Some(after)) if fires > 0 => (after - before) as f64 / fires as f64,
        _ => f64::NAN,
    }
}

/// The lateness of fires scheduled in `[from, to)`, against `expected` fires.
fn summarize(records: &[Record], from: i64, to: i64, expected: usize) -> Summary {
    let in_window: Vec<&Record> = records.iter().filter(|(_, s, _)| (from..to).contains(s)).collect();
    let mut per_fire: BTreeMap<(u32, i64), usize> = BTreeMap::new();
    for (id, scheduled, _) in &in_window {
        *per_fire.entry((*id, *scheduled)).or_default() += 1;
    }
    let duplicated = per_fire.values().map(|n| n - 1).sum();
    let missed = expected.saturating_sub(per_fire.len());
    let mut lateness_us: Vec<i64> = in_window.iter().map(|(_, _, l)| *l).collect();
    lateness_us.sort_unstable();
    Summary {
        cpu_per_fire_us: f64::NAN,
        allocations_per_fire: f64::NAN,
        engine_per_fire_us: None,
        lateness_us,
        missed,
        duplicated,
        ran_per_second: f64::NAN,
        store: None,
    }
}

fn next_second(t: DateTime<Utc>) -> DateTime<Utc> {
    t.with_nanosecond(0).unwrap() + TimeDelta::seconds(1)
}

/// Which store a sundial node of the bench keeps its data in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Store {
    /// `MemoryKv`.
    Memory,
    /// `EmbeddedKv`: `MemoryKv` with every commit synced to a file before it returns, on
    /// this engine.
    Durable(EmbeddedEngine),
}

/// The engines the durable store is measured on: SQLite (its default), and with the
/// feature `engine-comparison` redb too.
fn engines() -> Vec<EmbeddedEngine> {
    #[cfg(feature = "engine-comparison")]
    return vec![EmbeddedEngine::Sqlite, EmbeddedEngine::Redb];
    #[cfg(not(feature = "engine-comparison"))]
    vec![EmbeddedEngine::Sqlite]
}

/// A durable store's directory, removed when dropped (after the store it holds).
struct DurableDir {
    store: Option<EmbeddedKv>,
    path: std::path::PathBuf,
}

impl DurableDir {
    /// The size of the files in the directory now.
    fn bytes(&self) -> u64 {
        let files = std::fs::read_dir(&self.path).into_iter().flatten().flatten();
        files.filter_map(|f| f.metadata().ok()).map(|m| m.len()).sum()
    }
}

impl Drop for DurableDir {
    fn drop(&mut self) {
        if let Some(store) = self.store.take() {
            store.close();
        }
        let _ = std::fs::remove_dir_all(&self.path);
    }
}

/// A node on `store` with `triggers` triggers of `schedule` in jobs of `shape`, recording
/// up to `fires` runs without reallocating (and the durable store's directory, to keep
/// while the node runs).
async fn sundial_node(
    node: &str,
    triggers: usize,
    schedule: &str,
    options: SchedulerOptions,
    fires: usize,
    store: Store,
    config: Config,
) -> (sundial_actors::scheduler::JobScheduler<MemoryKv>, Records, Arc<dyn Clock>, MemoryKv, Option<DurableDir>) {
    let shape = config.shape;
    let clock: Arc<dyn Clock> = Arc::new(SystemClock::new());
    let records = records_for(fires);
    let (c, r) = (clock.clone(), records.clone());
    let registry = JobRegistry::builder()
        .add_job_type_as("bench.record", move || Recording { clock: c.clone(), records: r.clone() })
        .build()
        .unwrap();
    // The lock's hold is measured (a few clock reads per hold): it is the store's serial part.
    let (kv, durable) = match store {
        Store::Memory => {
            let options_kv = MemoryKvOptions { measure_lock: true, ..MemoryKvOptions::default() };
            (MemoryKv::with_options(clock.clone(), Arc::new(TokioSleeper), options_kv), None)
        }
        Store::Durable(engine) => {
            let path = std::env::temp_dir().join(format!("sundial-lateness-{}-{node}", std::process::id()));
            let _ = std::fs::remove_dir_all(&path);
            let opened = EmbeddedKv::open_with_options(
                &path,
                clock.clone(),
                Arc::new(TokioSleeper),
                EmbeddedOptions { engine, ..EmbeddedOptions::default() },
            )
            .unwrap();
            (opened.kv().clone(), Some(DurableDir { store: Some(opened), path }))
        }
    };
    let store =
        KvJobStore::new(kv.clone(), registry.calendars().clone(), Entropy::from_seed(1), StoreOptions::default());
    // As a user's: on `SystemClock`, the default start timer is the precise one.
    let mut node_config = NodeConfig::new(store, registry, options, node, clock.clone(), Entropy::from_seed(2));
    match config.events {
        Events::Off => {}
        Events::Counted => node_config.publisher = sink::counted(),
        Events::HttpSink => node_config.publisher = sink::publisher(),
    }
    let scheduler = Node::start(node_config, None).await.unwrap();
    let schedule: sundial::JobSchedule = schedule.parse().unwrap();
    let per_job = shape.per_job.clamp(1, TRIGGERS_PER_JOB).min(triggers.max(1));
    let mut defs = Vec::new();
    for j in 0..triggers.div_ceil(per_job) {
        let mut def =
            JobDefinition::new(JobName::new(format!("j{j}")).unwrap(), JobTypeKey::new("bench.record").unwrap());
        def.allow_concurrent = shape.concurrent;
        for t in 0..per_job.min(triggers - j * per_job) {
            def.triggers.push(JobTriggerDefinition::new(TriggerName::new(format!("t{t}")).unwrap(), schedule.clone()));
        }
        defs.push(def);
    }
    for chunk in defs.chunks(100) {
        assert!(scheduler.schedule(chunk.to_vec()).await.iter().all(Result::is_ok));
    }
    (scheduler, records, clock, kv, durable)
}

async fn sundial_cron(load: usize, seconds: i64, node: &str, store: Store, config: Config) -> Summary {
    let options = config.tuning.options(load);
    let fires = expected_fires(load, seconds);
    let (scheduler, records, clock, kv, durable) =
        sundial_node(node, load, "cron * * * * * *", options, fires, store, config).await;
    let bytes_before = durable.as_ref().map_or(0, DurableDir::bytes);
    let cpu_before = process_cpu();
    let allocations_before = allocator::allocations();
    let store_before = kv.stats();
    let serving = Instant::now();
    scheduler.serve();
    // Warm up, then measure whole seconds. A node that starts with thousands of fires due
    // within its first second cannot acquire them ahead (it was not running): its first
    // two seconds are late (`BENCH_PER_SECOND=1` shows each second).
    let from = next_second(clock.now()) + TimeDelta::seconds(WARM_UP_SECONDS);
    let to = from + TimeDelta::seconds(seconds);
    tokio::time::sleep((to - clock.now()).to_std().unwrap_or_default() + Duration::from_millis(500)).await;
    let engine = scheduler.counters();
    scheduler.stop(Duration::from_secs(5)).await;
    let running = serving.elapsed();
    let records = records.lock().unwrap().clone();
    if let Some(durable) = &durable {
        // Runs recorded while it ran: each is its run record and two history entries.
        let grown = durable.bytes().saturating_sub(bytes_before);
        eprintln!(
            "durable store ({node}), {load} fires/s: {} bytes on disk at the start ({load} triggers), {:.0} more per run recorded",
            bytes_before,
            grown as f64 / records.len().max(1) as f64
        );
    }
    let cpu = cpu_per_fire(cpu_before, process_cpu(), records.len());
    let allocations = allocations_per_fire(allocations_before, records.len());
    let per_fire = |work: EngineWork| {
        let time = engine.time_in.iter().find(|(w, _)| *w == work).map_or(Duration::ZERO, |(_, t)| *t);
        time.as_secs_f64() * 1e6 / records.len().max(1) as f64
    };
    let engine_per_fire =
        Some([per_fire(EngineWork::Acquire), per_fire(EngineWork::Complete), per_fire(EngineWork::StartRun)]);
    if std::env::var_os("BENCH_PER_SECOND").is_some() {
        let mut per: BTreeMap<i64, Vec<i64>> = BTreeMap::new();
        for (_, s, l) in &records {
            per.entry(*s).or_default().push(*l);
        }
        for (s, mut l) in per {
            l.sort_unstable();
            let (n, p50, max) = (l.len(), l[l.len() / 2], l[l.len() - 1]);
            eprintln!(
                "sundial, fires scheduled at second {}: {n} ran, lateness p50 {p50} µs, max {max} µs",
                s / 1_000_000
            );
        }
    }
    Summary {
        cpu_per_fire_us: cpu,
        allocations_per_fire: allocations,
        engine_per_fire_us: engine_per_fire,
        ran_per_second: records.len() as f64 / running.as_secs_f64(),
        store: Some((store_since(store_before, kv.stats()), records.len())),
        ..summarize(&records, from.timestamp_micros(), to.timestamp_micros(), load * seconds as usize)
    }
}

async fn apalis_cron(load: usize, seconds: i64) -> Summary {
    let from = next_second(Utc::now()) + TimeDelta::seconds(WARM_UP_SECONDS);
    let to = from + TimeDelta::seconds(seconds);
    let cpu_before = process_cpu();
    let allocations_before = allocator::allocations();
    let running = Instant::now();
    let records = apalis_workers(load, "* * * * * *", to, expected_fires(load, seconds)).await;
    Summary {
        cpu_per_fire_us: cpu_per_fire(cpu_before, process_cpu(), records.len()),
        allocations_per_fire: allocations_per_fire(allocations_before, records.len()),
        ran_per_second: records.len() as f64 / running.elapsed().as_secs_f64(),
        ..summarize(&records, from.timestamp_micros(), to.timestamp_micros(), load * seconds as usize)
    }
}

/// Room for every fire of a cron run at `load` fires/s measured for `seconds`: the warm-up,
/// the measured seconds, and the time either scheduler runs on after them.
fn expected_fires(load: usize, seconds: i64) -> usize {
    load * (WARM_UP_SECONDS + seconds + 4) as usize
}

/// `count` apalis-cron workers on `schedule` (the `cron` crate's dialect), run until
/// `until` and half a second more; what their jobs recorded (room for `fires`).
async fn apalis_workers(count: usize, schedule: &str, until: DateTime<Utc>, fires: usize) -> Vec<Record> {
    let records = records_for(fires);
    let mut workers = Vec::new();
    for i in 0..count {
        let schedule = cron::Schedule::from_str(schedule).unwrap();
        let worker = WorkerBuilder::new(format!("w{i}"))
            .backend(CronScheduler::new(schedule))
            .data((records.clone(), i as u32))
            .build(|tick: Tick, data: Data<(Records, u32)>| async move {
                let now = Utc::now();
                let scheduled = tick.get_timestamp() as i64 * 1_000_000;
                let (records, id) = &data.0;
                records.lock().unwrap().push((*id, scheduled, now.timestamp_micros() - scheduled));
            });
        workers.push(tokio::spawn(async move {
            let _ = worker.run().await;
        }));
    }
    tokio::time::sleep((until - Utc::now()).to_std().unwrap_or_default() + Duration::from_millis(500)).await;
    for worker in workers {
        worker.abort();
    }
    let records = records.lock().unwrap().clone();
    records
}

/// The peer's one-shot burst: `count` workers whose cron matches one second only (with
/// its year), due together; time from that instant until the last one started.
async fn apalis_burst(count: usize) -> (Duration, usize) {
    let due = next_second(Utc::now()) + TimeDelta::seconds(2);
    let schedule = due.format("%S %M %H %d %m * %Y").to_string();
    let records = apalis_workers(count, &schedule, due + TimeDelta::seconds(2), count).await;
    let at_due: Vec<i64> =
        records.iter().filter(|(_, s, _)| *s == due.timestamp_micros()).map(|(_, _, lateness)| *lateness).collect();
    let last = at_due.iter().copied().max().unwrap_or(0);
    (Duration::from_micros(last.max(0) as u64), at_due.len())
}

/// `count` one-shot triggers due at the same instant: time from that instant until the
/// last one started, and how many ran.
async fn sundial_burst(count: usize, store: Store, config: Config) -> (Duration, usize) {
    let clock = SystemClock::new();
    let due = next_second(clock.now()) + TimeDelta::seconds(2);
    let schedule = format!("once {}", sundial::schedule::format_instant(due));
    let options = config.tuning.options(count);
    let (scheduler, records, clock, _, _durable) =
        sundial_node("burst-node", count, &schedule, options, count, store, config).await;
    scheduler.serve();
    tokio::time::sleep((due - clock.now()).to_std().unwrap_or_default() + Duration::from_secs(3)).await;
    scheduler.stop(Duration::from_secs(5)).await;
    let records = records.lock().unwrap();
    let last = records.iter().map(|(_, _, lateness)| *lateness).max().unwrap_or(0);
    if std::env::var_os("BENCH_PER_SECOND").is_some() {
        let mut lateness: Vec<i64> = records.iter().map(|(_, _, l)| *l).collect();
        lateness.sort_unstable();
        let at = |p: f64| percentile(&lateness, p).unwrap_or(0);
        eprintln!(
            "sundial burst lateness µs: p10 {} p50 {} p90 {} p99 {} max {}",
            at(0.1),
            at(0.5),
            at(0.9),
            at(0.99),
            last
        );
    }
    (Duration::from_micros(last.max(0) as u64), records.len())
}

/// What a run of the bench measures, from its arguments.
struct Plan {
    /// The cron loads (fires/s).
    loads: Vec<usize>,
    /// The seconds and fires each load is measured for at least.
    seconds: i64,
    fires: usize,
    /// The sundial configurations, the first the main one.
    configs: Vec<Config>,
    burst_size: usize,
    /// Whether the burst and the sustained run are measured.
    burst: bool,
    sustained: bool,
    /// The sustained run: sundial only, no floors (a child run for the allocator peer).
    sundial_only: bool,
}

impl Plan {
    fn from_args(args: &[String]) -> Plan {
        let has = |flag: &str| args.iter().any(|a| a == flag);
        let value = |flag: &str| args.iter().position(|a| a == flag).and_then(|i| args.get(i + 1));
        let quick = has("--quick");
        let (loads, seconds, fires): (Vec<usize>, i64, usize) =
            if quick { (vec![10, 1_000], 3, 100) } else { (vec![10, 1_000, 10_000], MEASURED_SECONDS, MEASURED_FIRES) };
        let only = value("--load").and_then(|n| n.parse().ok());
        let sustained_only = has("--sustained");
        let burst_only = has("--burst");
        let configs = if has("--packed") {
            vec![Config { shape: Shape::PACKED, tuning: Tuning::Tuned, events: Events::Off }]
        } else if has("--http-sink") {
            // The same node without events, with events counted in the process, and with
            // them sent to a slow webhook.
            let tuned = Config { shape: Shape::USER, tuning: Tuning::Tuned, events: Events::Off };
            vec![tuned, Config { events: Events::HttpSink, ..tuned }, Config { events: Events::Counted, ..tuned }]
        } else {
            // `--concurrent`: the user's shape with every job concurrent, to see what the
            // exclusion of non-concurrent jobs costs.
            let shape = Shape { concurrent: has("--concurrent"), ..Shape::USER };
            vec![
                Config { shape, tuning: Tuning::Default, events: Events::Off },
                Config { shape, tuning: Tuning::Tuned, events: Events::Off },
            ]
        };
        Plan {
            loads: if sustained_only || burst_only { Vec::new() } else { only.map_or(loads, |n| vec![n]) },
            seconds,
            fires,
            configs,
            burst_size: value("--burst-size").and_then(|n| n.parse().ok()).unwrap_or(10_000),
            burst: !sustained_only,
            sustained: !(quick || only.is_some() || burst_only),
            sundial_only: has("--sundial-only"),
        }
    }
}

fn main() {
    if allocator::is_mimalloc() {
        sundial_actors::allocator::configure();
    }
    let args: Vec<String> = std::env::args().collect();
    let plan = Plan::from_args(&args);
    // `--pinned`: each worker pinned to a CPU of its own.
    let pinned = args.iter().any(|a| a == "--pinned");
    let runtime = sundial_actors::runtime::multi_thread(pinned).unwrap();
    let workers = runtime.metrics().num_workers();
    // `--floor`: only the bare actor's and the bare task's costs.
    if args.iter().any(|a| a == "--floor") {
        if args.iter().any(|a| a == "--current-thread") {
            // The kind of runtime a simulation runs its whole cluster on.
            match tokio::runtime::Builder::new_current_thread().enable_all().build() {
                Ok(current) => floors(&current),
                Err(error) => eprintln!("no current-thread runtime: {error}"),
            }
            return;
        }
        floors(&runtime);
        return;
    }
    // `--start-floor`: only the bare tasks' and actors' starts at one instant.
    if args.iter().any(|a| a == "--start-floor") {
        start_floors(&runtime, plan.burst_size);
        return;
    }
    if plan.sundial_only {
        sustained(&runtime, &plan);
        return;
    }
    let placement = if pinned { "each pinned to a CPU" } else { "not pinned" };
    let shape = plan.configs[0].shape;
    println!(
        "lateness of to-the-second cron fires, ms: jobs of {} trigger(s) each, {}; on {}; each load measured for \
         {} s or the seconds {} fires take, whichever is longer, after {WARM_UP_SECONDS} s warm-up; all schedulers \
         on one runtime of {workers} workers {placement}; sundial keeps full history",
        shape.per_job,
        if shape.concurrent { "concurrent" } else { "not concurrent (the default)" },
        allocator::name(),
        plan.seconds,
        plan.fires,
    );
    println!(
        "{:>8} {:>4} | {:<24} | {:>7} {:>7} {:>7} {:>7} {:>6} {:>4} {:>8} | {:>13}",
        "fires/s", "s", "scheduler", "p50", "p90", "p99", "max", "missed", "dup", "ran/s", "apalis p99 / it"
    );
    let mut cpu = Vec::new();
    let mut durable_rows = Vec::new();
    let main_config =
        *plan.configs.last().unwrap_or(&Config { shape: Shape::USER, tuning: Tuning::Tuned, events: Events::Off });
    for (i, &load) in plan.loads.iter().enumerate() {
        let measured = measured_seconds(load, plan.seconds, plan.fires);
        // A long measurement alternates the schedulers in rounds, so that all meet the
        // same phases of a machine whose timer wake-ups drift from minute to minute.
        let mut ours: Vec<Vec<Summary>> = plan.configs.iter().map(|_| Vec::new()).collect();
        let mut peer = Vec::new();
        let mut durable: Vec<Vec<Summary>> = engines().iter().map(|_| Vec::new()).collect();
        for round in 0..(measured + ROUND_SECONDS - 1) / ROUND_SECONDS {
            let length = ROUND_SECONDS.min(measured - round * ROUND_SECONDS);
            for (c, config) in plan.configs.iter().enumerate() {
                let node = format!("bench-{i}-{round}-{c}");
                ours[c].push(runtime.block_on(sundial_cron(load, length, &node, Store::Memory, *config)));
            }
            for (e, engine) in engines().into_iter().enumerate() {
                let node = format!("durable-{i}-{round}-{e}");
                durable[e].push(runtime.block_on(sundial_cron(
                    load,
                    length,
                    &node,
                    Store::Durable(engine),
                    main_config,
                )));
            }
            peer.push(runtime.block_on(apalis_cron(load, length)));
        }
        let peer = Summary::merge(peer);
        let ours: Vec<Summary> = ours.into_iter().map(Summary::merge).collect();
        for (config, s) in plan.configs.iter().zip(&ours) {
            print_row(load, measured, &config.label(), s, Some(peer.pct(0.99) / s.pct(0.99)));
            cpu.push((load, config.label(), s.cpu_per_fire_us, s.engine_per_fire_us, s.allocations_per_fire));
        }
        print_row(load, measured, "apalis + apalis-cron", &peer, None);
        cpu.push((load, "apalis".to_owned(), peer.cpu_per_fire_us, None, peer.allocations_per_fire));
        let durable: Vec<Summary> = durable.into_iter().map(Summary::merge).collect();
        let memory_p99 = ours.last().map_or(f64::NAN, |s| s.pct(0.99));
        durable_rows.push((load, measured, memory_p99, peer.pct(0.99), durable));
    }
    if !durable_rows.is_empty() {
        println!(
            "\nthe durable store (EmbeddedKv: MemoryKv, each commit synced to a file first), {}, same loads, same rounds",
            main_config.label()
        );
        for (load, measured, memory_p99, apalis_p99, d, engine) in durable_rows
            .iter()
            .flat_map(|(l, m, mp, ap, ds)| ds.iter().zip(engines()).map(move |(d, engine)| (l, m, mp, ap, d, engine)))
        {
            println!(
                "{load:>8} {measured:>4} {engine:?} | p50 {:.2} p90 {:.2} p99 {:.2} max {:.2} ms, {} missed, {} dup | p99 {:.1}x MemoryKv's, apalis's {:.1}x it",
                d.pct(0.5),
                d.pct(0.9),
                d.pct(0.99),
                d.pct(1.0),
                d.missed,
                d.duplicated,
                d.pct(0.99) / memory_p99,
                apalis_p99 / d.pct(0.99)
            );
        }
    }
    if !cpu.is_empty() {
        println!(
            "\nwhere the time goes, per fire that ran (process CPU on both cores; engine time on sundial's clock)"
        );
    }
    for (load, label, ours, engine, allocations) in cpu {
        let allocations =
            if allocations.is_nan() { String::new() } else { format!("; {allocations:.1} allocations per fire") };
        match engine {
            Some(_) => println!("{load:>8} fires/s, {label}: {}{allocations}", where_the_time_goes(ours, engine)),
            None => println!("{load:>8} fires/s, {label}: {}{allocations}", cpu_text(ours)),
        }
    }
    if plan.burst {
        burst(&runtime, plan.burst_size, &plan.configs);
    }
    if !plan.sustained {
        return;
    }
    sustained(&runtime, &plan);
    floors(&runtime);
    // What starting the sustained load's fires of one instant costs at least.
    start_floors(&runtime, sustained_load(&plan));
}

/// One row of the main table: a scheduler's lateness at one load.
fn print_row(load: usize, measured: i64, label: &str, s: &Summary, ratio: Option<f64>) {
    let ratio = ratio.map_or(String::new(), |r| format!("{r:>12.1}x"));
    println!(
        "{:>8} {:>4} | {:<24} | {:>7.2} {:>7.2} {:>7.2} {:>7.2} {:>6} {:>4} {:>8.0} | {ratio}",
        load,
        measured,
        label,
        s.pct(0.5),
        s.pct(0.9),
        s.pct(0.99),
        s.pct(1.0),
        s.missed,
        s.duplicated,
        s.ran_per_second,
    );
}

/// The sustained load: 50,000 fires/s in the user's shape, 100,000 in the packed one.
fn sustained_load(plan: &Plan) -> usize {
    if plan.configs.iter().any(|c| c.shape == Shape::PACKED) {
        100_000
    } else {
        50_000
    }
}

/// The `p` quantile (0 to 1) of ascending values, the nearest rank; `None` when empty.
fn percentile(sorted: &[i64], p: f64) -> Option<i64> {
    let index = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted.get(index).copied()
}

/// sundial's CPU per fire, split into the engine's store work, its run actor starts, and
/// the rest (the run actors' tasks: their jobs, ends and shutdown; timers, the runtime). The
/// engine's parts are timed on its clock, so they count time its threads waited for a core
/// too: when they add up to more than the process's CPU, other processes shared the cores
/// and there is no split to give.
fn where_the_time_goes(cpu: f64, engine: Option<[f64; 3]>) -> String {
    match engine {
        _ if cpu.is_nan() => "sundial: too little CPU in this run to split".to_owned(),
        Some(parts) if parts.iter().sum::<f64>() > cpu => format!(
            "sundial: CPU {cpu:.1} µs, less than the engine's own timing ({:.1} µs on its clock): \
             other processes shared the cores, no split",
            parts.iter().sum::<f64>()
        ),
        Some([acquire, complete, start]) => format!(
            "sundial: CPU {cpu:.1} µs = store acquisition {acquire:.1} + store completion {complete:.1} \
             + run actor starts {start:.1} + the rest {:.1} (run actors' jobs, ends and shutdown, runtime)",
            cpu - acquire - complete - start
        ),
        None => format!("sundial: CPU {cpu:.1} µs"),
    }
}

/// A CPU-per-fire figure, or why there is none.
fn cpu_text(cpu: f64) -> String {
    if cpu.is_nan() {
        "too little CPU in this run to measure".to_owned()
    } else {
        format!("CPU {cpu:.1} µs")
    }
}

/// The one-shot burst of `size` triggers on each configuration and the peer, printed.
fn burst(runtime: &tokio::runtime::Runtime, size: usize, configs: &[Config]) {
    let started = Instant::now();
    let ours: Vec<_> =
        configs.iter().map(|c| (c.label(), runtime.block_on(sundial_burst(size, Store::Memory, *c)))).collect();
    let main_config =
        *configs.last().unwrap_or(&Config { shape: Shape::USER, tuning: Tuning::Tuned, events: Events::Off });
    let durable: Vec<_> = engines()
        .into_iter()
        .map(|e| (e, runtime.block_on(sundial_burst(size, Store::Durable(e), main_config))))
        .collect();
    let (peer_last, peer_ran) = runtime.block_on(apalis_burst(size));
    println!("\n{size} one-shot triggers due at one instant: when the last started after it");
    for (label, (last, ran)) in &ours {
        println!(
            "{label:>24}: {:.1} ms ({ran} ran), apalis's {:.1}x it",
            last.as_secs_f64() * 1e3,
            peer_last.as_secs_f64() / last.as_secs_f64()
        );
    }
    println!("{:>24}: {:.1} ms ({peer_ran} ran)", "apalis", peer_last.as_secs_f64() * 1e3);
    for (engine, (last, ran)) in durable {
        println!(
            "{:>24}: {:.1} ms ({ran} ran), {}",
            format!("durable store ({engine:?})"),
            last.as_secs_f64() * 1e3,
            main_config.label()
        );
    }
    println!("({:.1} s in all)", started.elapsed().as_secs_f64());
}
