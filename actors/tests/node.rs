//! Goal: a node's actors follow SPEC §6–10 end to end through the `JobScheduler` handle.
//!
//! Method: one node on `MemoryKv`, on tokio's paused clock (`TokioClock`), so simulated
//! seconds pass instantly and deterministically; jobs record what happened to them.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use chrono::{DateTime, TimeDelta, Utc};
use sundial::entropy::Entropy;
use sundial::error::SchedulingError;
use sundial::job::{
    JobDefinition, JobRunQuery, JobTriggerDefinition, JobTypeKey, MisfirePolicy, RetryPolicy, RunCause, RunState,
};
use sundial::kv::memory::{MemoryKv, MemoryKvOptions};
use sundial::name::{JobName, TriggerName};
use sundial::options::SchedulerOptions;
use sundial::store::{KvJobStore, RunOutcome, StoreOptions};
use sundial::time::Clock;
use sundial_actors::clock::{TokioClock, TokioSleeper};
use sundial_actors::job::{FnJob, Job, JobFailure, JobResult, RunContext};
use sundial_actors::node::{Lifecycle, Node, NodeConfig};
use sundial_actors::registry::JobRegistry;
use sundial_actors::scheduler::{JobScheduler, JobTriggerRequest};

type Store = KvJobStore<MemoryKv>;
type Log = Arc<Mutex<Vec<(DateTime<Utc>, DateTime<Utc>)>>>;

fn t0() -> DateTime<Utc> {
    // A quarter second before a whole second.
    DateTime::from_timestamp_micros(1_800_000_000_750_000).unwrap()
}

/// Starts a node on a store of its own; `node` must be unique per test (actor names are
/// process-wide).
async fn start(node: &str, registry: JobRegistry, clock: Arc<TokioClock>) -> (JobScheduler<MemoryKv>, Store) {
    let kv = MemoryKv::with_options(clock.clone(), Arc::new(TokioSleeper), MemoryKvOptions::default());
    let store = KvJobStore::new(kv, registry.calendars().clone(), Entropy::from_seed(1), StoreOptions::default());
    (start_on(&store, node, registry, clock).await, store)
}

/// Starts a node on `store`.
async fn start_on(store: &Store, node: &str, registry: JobRegistry, clock: Arc<TokioClock>) -> JobScheduler<MemoryKv> {
    let options = SchedulerOptions::default();
    let config = NodeConfig::new(store.clone(), registry, options, node, clock, Entropy::from_seed(2));
    Node::start(config, None).await.unwrap()
}

/// Records (scheduled, started) of each run.
struct Recorder {
    clock: Arc<TokioClock>,
    log: Log,
}

impl Job for Recorder {
    async fn run(&mut self, ctx: &RunContext) -> JobResult {
        self.log.lock().unwrap().push((ctx.run.scheduled_at, self.clock.now()));
        Ok(())
    }
}

#[tokio::test(start_paused = true)]
async fn a_stopped_node_can_start_again_at_once_under_its_own_id() {
    // Actor names are process-wide: `stop` returns only when the node's actors and their
    // names are gone, so the same node starts again straight away, and runs on.
    let clock = Arc::new(TokioClock::new(t0()));
    let log: Log = Arc::default();
    let registry = every_second(&clock, &log);
    let (first, store) = start("again-node", registry.clone(), clock.clone()).await;
    first.serve();
    tokio::time::sleep(Duration::from_millis(2_100)).await;
    first.stop(Duration::from_secs(1)).await;
    for round in 0..3 {
        let node = start_on(&store, "again-node", registry.clone(), clock.clone()).await;
        node.serve();
        let before = log.lock().unwrap().len();
        tokio::time::sleep(Duration::from_millis(2_100)).await;
        assert!(log.lock().unwrap().len() >= before + 2, "round {round}: the restarted node runs the job");
        node.stop(Duration::from_secs(1)).await;
        assert_eq!(node.lifecycle(), Lifecycle::Stopped);
    }
}

/// A registry with one code job, `tick`, every second, whose runs a [`Recorder`] records
/// in `log`.
fn every_second(clock: &Arc<TokioClock>, log: &Log) -> JobRegistry {
    let (clock, log) = (clock.clone(), log.clone());
    JobRegistry::builder()
        .add_job("tick", "cron * * * * * *".parse().unwrap(), move || Recorder {
            clock: clock.clone(),
            log: log.clone(),
        })
        .build()
        .unwrap()
}

/// A registry with one job type, `job_type`, whose runs a [`Recorder`] records in `log`.
fn recording(job_type: &str, clock: &Arc<TokioClock>, log: &Log) -> JobRegistry {
    let (clock, log) = (clock.clone(), log.clone());
    JobRegistry::builder()
        .add_job_type_as(job_type, move || Recorder { clock: clock.clone(), log: log.clone() })
        .build()
        .unwrap()
}

fn name(s: &str) -> JobName {
    JobName::new(s).unwrap()
}

async fn history(store: &Store, job: &str) -> Vec<sundial::job::JobRunInfo> {
    let mut runs =
        store.runs(&JobRunQuery { job: Some(name(job)), limit: 1000, ..JobRunQuery::default() }).await.unwrap();
    runs.reverse();
    runs
}

#[tokio::test(start_paused = true)]
async fn a_code_cron_job_runs_every_second_on_time() {
    let clock = Arc::new(TokioClock::new(t0()));
    let log: Log = Arc::default();
    let registry = every_second(&clock, &log);
    let (scheduler, store) = start("cron-node", registry, clock.clone()).await;
    assert_eq!(scheduler.lifecycle(), Lifecycle::Starting);
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert!(log.lock().unwrap().is_empty(), "nothing runs before the host serves");
    scheduler.serve();
    tokio::time::sleep(Duration::from_millis(5_100)).await;
    let runs = log.lock().unwrap().clone();
    assert!((4..=6).contains(&runs.len()), "{} runs", runs.len());
    for (scheduled, started) in &runs {
        let lateness = (*started - *scheduled).to_std().unwrap();
        assert!(lateness < Duration::from_millis(5), "late by {lateness:?}");
    }
    let stored = history(&store, "tick").await;
    assert_eq!(stored.len(), runs.len());
    assert!(stored.iter().all(|r| r.state == RunState::Succeeded || r.state == RunState::Running));
    scheduler.stop(Duration::from_secs(1)).await;
    assert_eq!(scheduler.lifecycle(), Lifecycle::Stopped);
}

#[tokio::test(start_paused = true)]
async fn trigger_runs_here_and_returns_the_first_result() {
    let clock = Arc::new(TokioClock::new(t0()));
    let registry = JobRegistry::builder()
        .add_job("ok", sundial::JobSchedule::manual(), || FnJob::new(|_| async { Ok(()) }))
        .add_job_type_as("failing", || FnJob::new(|_| async { Err(JobFailure::new("nope")) }))
        .add_job_type_as("slow", || {
            FnJob::new(|_| async {
                tokio::time::sleep(Duration::from_secs(60)).await;
                Ok(())
            })
        })
        .build()
        .unwrap();
    let (scheduler, store) = start("trigger-node", registry, clock.clone()).await;
    let refused = scheduler.trigger_one(name("ok")).await.unwrap_err();
    assert_eq!((refused.code(), refused.http_status()), ("SCHEDULING_UNAVAILABLE_001", 503));
    scheduler.serve();
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(scheduler.trigger_one(name("ok")).await.unwrap(), RunOutcome::Succeeded);
    let failing = JobDefinition::new(name("bad"), JobTypeKey::new("failing").unwrap())
        .with_retry(RetryPolicy::fixed(2, Duration::from_secs(1)).unwrap());
    scheduler.schedule_one(failing).await.unwrap();
    let outcome = scheduler.trigger_one(name("bad")).await.unwrap();
    assert_eq!(outcome, RunOutcome::Failed { code: None, message: "nope".into() });
    // The failure retries per policy, in the background: attempts 2 and 3.
    tokio::time::sleep(Duration::from_secs(5)).await;
    let attempts: Vec<_> = history(&store, "bad").await.iter().map(|r| (r.run.attempt, r.run.cause)).collect();
    assert_eq!(attempts, vec![(1, RunCause::Manual), (2, RunCause::Retry), (3, RunCause::Retry)]);
    let unknown =
        scheduler.schedule_one(JobDefinition::new(name("x"), JobTypeKey::new("nope").unwrap())).await.unwrap_err();
    assert_eq!(unknown.code(), "SCHEDULING_NOTFOUND_002");
    assert_eq!(scheduler.trigger_one(name("missing")).await.unwrap_err().code(), "SCHEDULING_NOTFOUND_001");
    // A running non-concurrent job refuses a second manual run.
    scheduler.schedule_one(JobDefinition::new(name("long"), JobTypeKey::new("slow").unwrap())).await.unwrap();
    let background = scheduler.clone();
    let first = tokio::spawn(async move { background.trigger_one(name("long")).await });
    tokio::time::sleep(Duration::from_millis(10)).await;
    assert_eq!(scheduler.trigger_one(name("long")).await.unwrap_err().code(), "SCHEDULING_CONFLICT_001");
    assert_eq!(first.await.unwrap().unwrap(), RunOutcome::Succeeded);
}

#[tokio::test(start_paused = true)]
async fn enqueue_cancel_and_the_stop_sequence() {
    let clock = Arc::new(TokioClock::new(t0()));
    let log: Log = Arc::default();
    let (c, l) = (clock.clone(), log.clone());
    let registry = JobRegistry::builder()
        .add_job_type_as("record", move || Recorder { clock: c.clone(), log: l.clone() })
        .add_job_type_as("cooperative", || {
            FnJob::new(|ctx: RunContext| async move {
                tokio::select! {
                    () = ctx.cancel.cancelled() => Ok(()),
                    () = tokio::time::sleep(Duration::from_secs(3600)) => Ok(()),
                }
            })
        })
        .add_job_type_as("stubborn", || {
            FnJob::new(|_| async {
                tokio::time::sleep(Duration::from_secs(3600)).await;
                Ok(())
            })
        })
        .build()
        .unwrap();
    let (scheduler, store) = start("stop-node", registry, clock.clone()).await;
    scheduler.serve();
    for (job, kind) in [("rec", "record"), ("coop", "cooperative"), ("stub", "stubborn")] {
        let mut def = JobDefinition::new(name(job), JobTypeKey::new(kind).unwrap());
        def.allow_concurrent = true;
        scheduler.schedule_one(def).await.unwrap();
    }
    let names = scheduler.enqueue(vec![name("rec").into(), name("nope").into()]).await;
    assert!(names[0].as_ref().unwrap().as_str().starts_with("manual-"));
    assert_eq!(names[1].as_ref().unwrap_err().code(), "SCHEDULING_NOTFOUND_001");
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert_eq!(log.lock().unwrap().len(), 1, "an enqueued run is picked up at once");

    // Cancel a cooperative run here: recorded Canceled.
    scheduler.enqueue(vec![name("coop").into()]).await;
    tokio::time::sleep(Duration::from_millis(50)).await;
    let running = history(&store, "coop").await;
    assert_eq!(running[0].state, RunState::Running);
    assert!(scheduler.cancel_runs(&[running[0].run.id]).await[0].is_ok());
    tokio::time::sleep(Duration::from_millis(50)).await;
    let canceled = history(&store, "coop").await;
    assert_eq!(canceled[0].state, RunState::Canceled);
    assert_eq!(
        scheduler.cancel_runs(&[running[0].run.id]).await[0].as_ref().unwrap_err().code(),
        "SCHEDULING_NOTFOUND_004"
    );

    // Stop: a cooperative run is canceled at the deadline; a stubborn one is abandoned.
    scheduler.enqueue(vec![name("coop").into(), name("stub").into()]).await;
    tokio::time::sleep(Duration::from_millis(50)).await;
    let stopper = scheduler.clone();
    let stop = tokio::spawn(async move { stopper.stop(Duration::from_secs(2)).await });
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(scheduler.lifecycle(), Lifecycle::Draining);
    assert_eq!(scheduler.trigger_one(name("rec")).await.unwrap_err().code(), "SCHEDULING_UNAVAILABLE_001");
    assert!(scheduler.enqueue(vec![name("rec").into()]).await[0].is_ok(), "enqueue works while draining");
    let report = stop.await.unwrap();
    assert_eq!((report.canceled, report.abandoned), (2, 1));
    assert_eq!(scheduler.lifecycle(), Lifecycle::Stopped);
    let coop = history(&store, "coop").await;
    assert_eq!(coop.last().unwrap().state, RunState::Canceled);
}

#[tokio::test(start_paused = true)]
async fn events_are_published_for_runs_and_jobs() {
    use sundial_actors::events::BroadcastPublisher;
    let clock = Arc::new(TokioClock::new(t0()));
    let registry = JobRegistry::builder().add_job_type_as("noop", || FnJob::new(|_| async { Ok(()) })).build().unwrap();
    let kv = MemoryKv::with_options(clock.clone(), Arc::new(TokioSleeper), MemoryKvOptions::default());
    let store = KvJobStore::new(kv, registry.calendars().clone(), Entropy::from_seed(1), StoreOptions::default());
    let publisher = Arc::new(BroadcastPublisher::new(64));
    let mut events = publisher.subscribe();
    let mut config =
        NodeConfig::new(store, registry, SchedulerOptions::default(), "events-node", clock, Entropy::from_seed(3));
    config.publisher = publisher;
    let scheduler = Node::start(config, None).await.unwrap();
    scheduler.serve();
    scheduler.schedule_one(JobDefinition::new(name("e"), JobTypeKey::new("noop").unwrap())).await.unwrap();
    scheduler.trigger_one(name("e")).await.unwrap();
    scheduler.pause(&[name("e")]).await;
    let mut topics = Vec::new();
    while let Ok(event) = events.try_recv() {
        topics.push(event.event_type);
    }
    assert_eq!(
        topics,
        vec!["scheduling.job.scheduled", "scheduling.run.started", "scheduling.run.succeeded", "scheduling.job.paused"]
    );
}

#[tokio::test(start_paused = true)]
async fn a_blocked_cron_job_runs_after_its_previous_run_ends() {
    let clock = Arc::new(TokioClock::new(t0()));
    let log: Log = Arc::default();
    let (c, l) = (clock.clone(), log.clone());
    let registry = JobRegistry::builder()
        .add_job_type_as("slow", move || {
            let (c, l) = (c.clone(), l.clone());
            FnJob::new(move |ctx: RunContext| {
                let (c, l) = (c.clone(), l.clone());
                async move {
                    l.lock().unwrap().push((ctx.run.scheduled_at, c.now()));
                    tokio::time::sleep(Duration::from_millis(2_500)).await;
                    Ok(())
                }
            })
        })
        .build()
        .unwrap();
    let (scheduler, store) = start("blocking-node", registry, clock.clone()).await;
    scheduler.serve();
    let def = JobDefinition::new(name("serial"), JobTypeKey::new("slow").unwrap()).with_trigger(
        sundial::job::JobTriggerDefinition::new(
            sundial::name::TriggerName::new("t").unwrap(),
            "cron * * * * * *".parse().unwrap(),
        ),
    );
    scheduler.schedule_one(def).await.unwrap();
    tokio::time::sleep(Duration::from_secs(8)).await;
    let starts = log.lock().unwrap().clone();
    // Never two at once: each start is at least the run length after the previous one.
    for pair in starts.windows(2) {
        assert!((pair[1].1 - pair[0].1).to_std().unwrap() >= Duration::from_millis(2_500), "{starts:?}");
    }
    assert!(starts.len() >= 3, "blocked fires still run when the slot frees: {starts:?}");
    let runs = history(&store, "serial").await;
    assert!(runs.iter().filter(|r| r.state == RunState::Running).count() <= 1);
}

#[tokio::test(start_paused = true)]
async fn enqueued_runs_of_a_non_concurrent_job_follow_each_other_without_waiting_for_a_poll() {
    // A queue of work for one job that runs one at a time: each run that ends frees the
    // slot and returns the blocked fires to waiting; the next starts at once, not at the
    // poller's next cycle (up to `poll_interval`, 1 s, later).
    let clock = Arc::new(TokioClock::new(t0()));
    let log: Log = Arc::default();
    let (c, l) = (clock.clone(), log.clone());
    let registry = JobRegistry::builder()
        .add_job_type_as("work", move || {
            let (c, l) = (c.clone(), l.clone());
            FnJob::new(move |ctx: RunContext| {
                let (c, l) = (c.clone(), l.clone());
                async move {
                    l.lock().unwrap().push((ctx.run.scheduled_at, c.now()));
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    Ok(())
                }
            })
        })
        .build()
        .unwrap();
    let (scheduler, _store) = start("queue-node", registry, clock.clone()).await;
    scheduler.serve();
    scheduler.schedule_one(JobDefinition::new(name("queue"), JobTypeKey::new("work").unwrap())).await.unwrap();
    let requests = (0..10).map(|_| JobTriggerRequest::from(name("queue"))).collect();
    assert!(scheduler.enqueue(requests).await.iter().all(Result::is_ok));
    tokio::time::sleep(Duration::from_secs(3)).await;
    let starts: Vec<DateTime<Utc>> = log.lock().unwrap().iter().map(|(_, started)| *started).collect();
    assert_eq!(starts.len(), 10, "ten runs of 100 ms each, one after the other, within 3 s: {starts:?}");
    for pair in starts.windows(2) {
        let gap = (pair[1] - pair[0]).to_std().unwrap();
        assert!(gap >= Duration::from_millis(100) && gap < Duration::from_millis(150), "{gap:?} in {starts:?}");
    }
}

#[tokio::test(start_paused = true)]
async fn pause_and_resume_through_the_handle_follow_the_misfire_policy() {
    let clock = Arc::new(TokioClock::new(t0()));
    let log: Log = Arc::default();
    let (c, l) = (clock.clone(), log.clone());
    let registry = JobRegistry::builder()
        .add_job("paused.job", "cron * * * * * *".parse().unwrap(), move || Recorder {
            clock: c.clone(),
            log: l.clone(),
        })
        .build()
        .unwrap();
    let (scheduler, _) = start("pause-node", registry, clock.clone()).await;
    scheduler.serve();
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    assert!(scheduler.pause(&[name("paused.job")]).await[0].is_ok());
    let before = log.lock().unwrap().len();
    tokio::time::sleep(Duration::from_secs(120)).await;
    assert_eq!(log.lock().unwrap().len(), before, "nothing runs while paused");
    scheduler.resume(&[name("paused.job")]).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let runs = log.lock().unwrap().clone();
    assert_eq!(runs.len(), before + 1, "RunOnce: one catch-up run");
    let (scheduled, started) = runs[before];
    assert!((started - scheduled).to_std().unwrap() < Duration::from_millis(10), "recorded as scheduled now");
    assert_eq!(scheduler.pause(&[name("nope")]).await[0].as_ref().unwrap_err().code(), "SCHEDULING_NOTFOUND_001");
}

#[tokio::test(start_paused = true)]
async fn a_code_job_override_survives_a_restart_until_the_code_changes() {
    let clock = Arc::new(TokioClock::new(t0()));
    let kv = MemoryKv::with_options(clock.clone(), Arc::new(TokioSleeper), MemoryKvOptions::default());
    let code = |schedule: &str| {
        JobRegistry::builder()
            .add_job("report", schedule.parse().unwrap(), || FnJob::new(|_| async { Ok(()) }))
            .build()
            .unwrap()
    };
    let boot = |registry: JobRegistry, id: &'static str| {
        let (kv, clock) = (kv.clone(), clock.clone());
        async move {
            let store =
                KvJobStore::new(kv, registry.calendars().clone(), Entropy::from_seed(1), StoreOptions::default());
            let config =
                NodeConfig::new(store.clone(), registry, SchedulerOptions::default(), id, clock, Entropy::from_seed(2));
            let scheduler = Node::start(config, None).await.unwrap();
            scheduler.serve();
            tokio::time::sleep(Duration::from_millis(100)).await;
            (scheduler, store)
        }
    };
    let schedule_of =
        |status: Option<sundial::store::JobStatus>| status.unwrap().definition.triggers[0].schedule.to_string();
    let (first, store) = boot(code("cron 0 0 3 * * *"), "restart-1").await;
    let mut changed = first.registry().code_job(&name("report")).unwrap().clone();
    changed.triggers[0].schedule = "cron 0 30 4 * * *".parse().unwrap();
    first.schedule_one(changed).await.unwrap();
    first.stop(Duration::from_secs(1)).await;
    // Same code: the runtime change is kept.
    let (second, _) = boot(code("cron 0 0 3 * * *"), "restart-2").await;
    assert_eq!(schedule_of(store.status(&name("report")).await.unwrap()), "cron 0 30 4 * * *");
    assert_eq!(store.status(&name("report")).await.unwrap().unwrap().origin, sundial::job::JobOrigin::Overridden);
    // Restore puts the code definition back.
    assert!(second.restore(&[name("report")]).await[0].is_ok());
    assert_eq!(schedule_of(store.status(&name("report")).await.unwrap()), "cron 0 0 3 * * *");
    assert_eq!(
        second.restore(&[name("runtime-only")]).await[0].as_ref().unwrap_err().code(),
        "SCHEDULING_NOTFOUND_005"
    );
    second
        .schedule_one(second.registry().code_job(&name("report")).unwrap().clone().with_timeout(Duration::from_secs(9)))
        .await
        .unwrap();
    second.stop(Duration::from_secs(1)).await;
    // Changed code: the code wins.
    let (third, _) = boot(code("cron 0 0 5 * * *"), "restart-3").await;
    assert_eq!(schedule_of(store.status(&name("report")).await.unwrap()), "cron 0 0 5 * * *");
    assert_eq!(store.status(&name("report")).await.unwrap().unwrap().origin, sundial::job::JobOrigin::Code);
    third.stop(Duration::from_secs(1)).await;
}

/// A node recording its runs' start times (job types `test.record`, and
/// `test.record-and-fail` whose runs then fail), on a store whose every operation takes up
/// to `latency` (a paused clock), acquiring at most `batch` fires at once.
async fn recorder_on_a_slow_store(
    node: &str,
    latency: Duration,
    batch: u32,
) -> (sundial_actors::scheduler::JobScheduler<MemoryKv>, Log) {
    use sundial::kv::memory::KvFaults;

    let clock = Arc::new(TokioClock::new(t0()));
    let log: Log = Arc::default();
    let (c, l) = (clock.clone(), log.clone());
    let (c2, l2) = (clock.clone(), log.clone());
    let registry = JobRegistry::builder()
        .add_job_type_as("test.record", move || Recorder { clock: c.clone(), log: l.clone() })
        .add_job_type_as("test.record-and-fail", move || {
            let (clock, log) = (c2.clone(), l2.clone());
            FnJob::new(move |ctx: RunContext| {
                log.lock().unwrap().push((ctx.run.scheduled_at, clock.now()));
                async { Err(JobFailure::new("recorded, then failed")) }
            })
        })
        .build()
        .unwrap();
    let faults = KvFaults { latency_max: latency, ..KvFaults::default() };
    let options = MemoryKvOptions { faults, ..MemoryKvOptions::default() };
    let kv = MemoryKv::with_options(clock.clone(), Arc::new(TokioSleeper), options);
    let store = KvJobStore::new(kv, registry.calendars().clone(), Entropy::from_seed(1), StoreOptions::default());
    let options =
        SchedulerOptions { max_concurrent_runs: 5_000, acquire_batch_size: Some(batch), ..SchedulerOptions::default() };
    let config = NodeConfig::new(store, registry, options, node, clock, Entropy::from_seed(2));
    (Node::start(config, None).await.unwrap(), log)
}

/// `jobs` concurrent jobs of 50 one-shot triggers each, all due at `due`.
fn one_shots(prefix: &str, jobs: usize, due: DateTime<Utc>) -> Vec<JobDefinition> {
    (0..jobs)
        .map(|j| {
            let mut def = JobDefinition::new(name(&format!("{prefix}-{j}")), JobTypeKey::new("test.record").unwrap());
            def.allow_concurrent = true;
            for t in 0..50 {
                let trigger = sundial::name::TriggerName::new(format!("t{t}")).unwrap();
                def.triggers.push(sundial::job::JobTriggerDefinition::new(trigger, sundial::JobSchedule::once(due)));
            }
            def
        })
        .collect()
}

/// Many fires due at one instant, on a store whose every operation takes time: the node
/// learns what an acquisition costs and starts acquiring early enough that every run of
/// the next such burst starts on time (the first burst, before any measurement, uses a
/// prior meant for a local store and is late here, where each store round trip takes up
/// to 20 ms of the paused clock).
#[tokio::test(start_paused = true)]
async fn fires_due_together_are_acquired_early_enough_to_start_on_time() {
    let (scheduler, log) = recorder_on_a_slow_store("burst-node", Duration::from_millis(20), 100).await;
    let bursts = [t0() + chrono::TimeDelta::seconds(5), t0() + chrono::TimeDelta::seconds(15)];
    let defs: Vec<JobDefinition> =
        bursts.iter().enumerate().flat_map(|(b, due)| one_shots(&format!("burst-{b}"), 3, *due)).collect();
    assert!(scheduler.schedule(defs).await.iter().all(Result::is_ok));
    scheduler.serve();
    tokio::time::sleep(Duration::from_secs(20)).await;
    let runs = log.lock().unwrap().clone();
    assert_eq!(runs.len(), 300, "every fire ran once");
    let latest = |due| runs.iter().filter(|(s, _)| *s == due).map(|(s, started)| *started - *s).max().unwrap();
    assert!(latest(bursts[0]) > chrono::TimeDelta::milliseconds(100), "the first burst, unmeasured, was late");
    assert!(
        latest(bursts[1]) < chrono::TimeDelta::milliseconds(5),
        "the second burst's last run started {} late",
        latest(bursts[1])
    );
    scheduler.stop(Duration::from_secs(1)).await;
}

/// On a store so slow that the configured batch cannot be acquired within FDB's five
/// seconds (every attempt fails as too old), the node halves its batch until one commits,
/// and every fire runs: asking again for the same batch would never take anything.
#[tokio::test(start_paused = true)]
async fn a_batch_too_big_for_a_slow_store_shrinks_until_it_commits() {
    // About 20 ms per store operation: 100 fires in one transaction take well over 5 s.
    let (scheduler, log) = recorder_on_a_slow_store("slow-node", Duration::from_millis(40), 100).await;
    let due = t0() + chrono::TimeDelta::seconds(10);
    assert!(scheduler.schedule(one_shots("slow", 2, due)).await.iter().all(Result::is_ok));
    scheduler.serve();
    tokio::time::sleep(Duration::from_secs(600)).await;
    let ran = log.lock().unwrap().len();
    assert_eq!(ran, 100, "every fire ran once");
    scheduler.stop(Duration::from_secs(1)).await;
}

/// A retry due sooner than the poller's next cycle wakes it ahead, by the lookahead, as
/// its regular sleep does: on a store whose operations take up to 10 ms (a cycle well
/// within the lookahead), the retry is acquired before its time and starts on it, not one
/// acquisition late.
#[tokio::test(start_paused = true)]
async fn a_fire_made_due_by_a_run_end_is_acquired_ahead_of_its_time() {
    let (scheduler, log) = recorder_on_a_slow_store("due-ahead-node", Duration::from_millis(10), 100).await;
    let def = JobDefinition::new(name("flaky"), JobTypeKey::new("test.record-and-fail").unwrap())
        .with_retry(RetryPolicy::fixed(3, Duration::from_millis(400)).unwrap());
    scheduler.schedule_one(def).await.unwrap();
    scheduler.serve();
    tokio::time::sleep(Duration::from_secs(1)).await;
    scheduler.enqueue_one(JobTriggerRequest::from(name("flaky"))).await.unwrap();
    tokio::time::sleep(Duration::from_secs(5)).await;
    let runs = log.lock().unwrap().clone();
    assert_eq!(runs.len(), 4, "the run and its three retries");
    for (scheduled, started) in &runs[1..] {
        let late = *started - *scheduled;
        assert!(late < chrono::TimeDelta::milliseconds(2), "a retry started {late} late");
    }
    scheduler.stop(Duration::from_secs(1)).await;
}

/// A registry with one job type, `rec`, whose runs succeed at once.
fn succeeding_registry() -> JobRegistry {
    JobRegistry::builder().add_job_type_as("rec", || FnJob::new(|_| async { Ok(()) })).build().unwrap()
}

#[tokio::test(start_paused = true)]
async fn each_misfire_policy_after_the_node_was_down() {
    let clock = Arc::new(TokioClock::new(t0()));
    let kv = MemoryKv::with_options(clock.clone(), Arc::new(TokioSleeper), MemoryKvOptions::default());
    let store = KvJobStore::new(kv, Default::default(), Entropy::from_seed(1), StoreOptions::default());
    let first = start_on(&store, "misfire-node-a", succeeding_registry(), clock.clone()).await;
    first.serve();
    let mut defs = Vec::new();
    for (job, policy) in
        [("once", MisfirePolicy::RunOnce), ("skip", MisfirePolicy::Skip), ("all", MisfirePolicy::RunAll)]
    {
        let mut trigger =
            JobTriggerDefinition::new(TriggerName::new("every-10s").unwrap(), "cron */10 * * * * *".parse().unwrap());
        trigger.misfire = policy;
        let mut def = JobDefinition::new(name(job), JobTypeKey::new("rec").unwrap());
        def.triggers.push(trigger);
        defs.push(def);
    }
    assert!(first.schedule(defs).await.iter().all(Result::is_ok));
    tokio::time::sleep(Duration::from_secs(15)).await;
    first.stop(Duration::from_secs(5)).await;
    let mut before = Vec::new();
    for job in ["once", "skip", "all"] {
        before.push(history(&store, job).await.len());
    }
    assert!(before.iter().all(|&n| n >= 1), "each ran while the node was up: {before:?}");
    // Down for 95 s: nine fires of each trigger missed, the oldest beyond the threshold.
    tokio::time::sleep(Duration::from_secs(95)).await;
    let back = clock.now();
    let second = start_on(&store, "misfire-node-b", succeeding_registry(), clock.clone()).await;
    second.serve();
    tokio::time::sleep(Duration::from_secs(25)).await;
    second.stop(Duration::from_secs(5)).await;
    let after = |runs: Vec<sundial::job::JobRunInfo>, skip: usize| runs.into_iter().skip(skip).collect::<Vec<_>>();
    let whole_ten = |t: DateTime<Utc>| t.timestamp_subsec_micros() == 0 && t.timestamp() % 10 == 0;

    // RunOnce: one catch-up run at once, recorded as scheduled now; then on the schedule.
    let once = after(history(&store, "once").await, before[0]);
    assert!(
        once[0].run.scheduled_at >= back && once[0].run.scheduled_at - back < chrono::TimeDelta::milliseconds(100),
        "{once:?}"
    );
    assert_eq!(once[0].run.cause, RunCause::Schedule);
    assert!(once[1..].iter().all(|r| whole_ten(r.run.scheduled_at) && r.run.scheduled_at > back), "{once:?}");
    assert_eq!(once.len(), 1 + 2, "the catch-up and the two fires of the next 25 s: {once:?}");

    // Skip: no catch-up; the next fire is the schedule's next after the node came back.
    let skip = after(history(&store, "skip").await, before[1]);
    assert!(skip.iter().all(|r| whole_ten(r.run.scheduled_at) && r.run.scheduled_at > back), "{skip:?}");
    assert_eq!(skip.len(), 2, "{skip:?}");

    // RunAll: every missed time, oldest first, each with its own scheduled time; then on
    // the schedule.
    let all = after(history(&store, "all").await, before[2]);
    let scheduled: Vec<DateTime<Utc>> = all.iter().map(|r| r.run.scheduled_at).collect();
    assert!(scheduled.iter().all(|t| whole_ten(*t)), "{scheduled:?}");
    assert!(
        scheduled.windows(2).all(|w| w[1] - w[0] == chrono::TimeDelta::seconds(10)),
        "no time missed or repeated: {scheduled:?}"
    );
    let missed = scheduled.iter().filter(|t| **t < back).count();
    assert!(missed >= 9, "the fires of the 95 s down ran: {scheduled:?}");
    let caught_up = all[missed - 1].started_at;
    assert!(
        caught_up - back < chrono::TimeDelta::seconds(2),
        "caught up within a few poll cycles: {caught_up} vs {back}"
    );
}

#[tokio::test(start_paused = true)]
async fn exponential_retries_wait_twice_as_long_each_time() {
    let clock = Arc::new(TokioClock::new(t0()));
    let registry = JobRegistry::builder()
        .add_job_type_as("failing", || FnJob::new(|_| async { Err(JobFailure::new("still broken")) }))
        .build()
        .unwrap();
    let (scheduler, store) = start("exponential-node", registry, clock.clone()).await;
    scheduler.serve();
    let def = JobDefinition::new(name("flaky"), JobTypeKey::new("failing").unwrap())
        .with_retry(RetryPolicy::exponential(3, Duration::from_secs(1), None).unwrap());
    scheduler.schedule_one(def).await.unwrap();
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(matches!(scheduler.trigger_one(name("flaky")).await.unwrap(), RunOutcome::Failed { .. }));
    tokio::time::sleep(Duration::from_secs(30)).await;
    let runs = history(&store, "flaky").await;
    let attempts: Vec<_> = runs.iter().map(|r| (r.run.attempt, r.run.cause, r.state)).collect();
    assert_eq!(
        attempts,
        vec![
            (1, RunCause::Manual, RunState::Failed),
            (2, RunCause::Retry, RunState::Failed),
            (3, RunCause::Retry, RunState::Failed),
            (4, RunCause::Retry, RunState::Failed),
        ],
        "three retries, then no more"
    );
    for (n, pair) in runs.windows(2).enumerate() {
        let waited = pair[1].run.scheduled_at - pair[0].finished_at.unwrap();
        assert_eq!(waited, chrono::TimeDelta::seconds(1 << n), "retry {} waits 2^{n} s", n + 1);
        let late = pair[1].started_at - pair[1].run.scheduled_at;
        assert!(late < chrono::TimeDelta::milliseconds(20), "retry {} starts on time, not {late} late", n + 1);
        assert_eq!(pair[1].run.retry_of, Some(runs[0].run.id), "every retry points at the first run");
    }
}

#[tokio::test(start_paused = true)]
async fn a_retry_due_sooner_than_the_next_poll_starts_on_time() {
    let clock = Arc::new(TokioClock::new(t0()));
    let registry = JobRegistry::builder()
        .add_job_type_as("failing", || FnJob::new(|_| async { Err(JobFailure::new("broken")) }))
        .build()
        .unwrap();
    let (scheduler, store) = start("short-retry-node", registry, clock.clone()).await;
    scheduler.serve();
    let def = JobDefinition::new(name("quick"), JobTypeKey::new("failing").unwrap())
        .with_retry(RetryPolicy::fixed(2, Duration::from_millis(200)).unwrap());
    scheduler.schedule_one(def).await.unwrap();
    assert!(matches!(scheduler.trigger_one(name("quick")).await.unwrap(), RunOutcome::Failed { .. }));
    tokio::time::sleep(Duration::from_secs(3)).await;
    let runs = history(&store, "quick").await;
    assert_eq!(runs.len(), 3, "the run and its two retries");
    for retry in &runs[1..] {
        let late = retry.started_at - retry.run.scheduled_at;
        assert!(late < chrono::TimeDelta::milliseconds(20), "a retry 200 ms after a failure started {late} late");
    }
}

/// An election this node never wins (another node holds the lease all along).
struct HeldElsewhere;

impl sundial_actors::lease::DynLeaderElection for HeldElsewhere {
    fn try_acquire_boxed<'a>(
        &'a self,
        resource: &'a sundial::name::ResourceName,
        _ttl: Duration,
    ) -> futures_util::future::BoxFuture<'a, Result<Box<dyn sundial_actors::lease::DynLeaderLease>, SchedulingError>>
    {
        Box::pin(async move { Err(SchedulingError::LeaseHeld { resource: resource.to_string() }) })
    }
}

#[tokio::test(start_paused = true)]
async fn a_node_not_leading_its_own_store_takes_one_shots_and_does_not_poll_for_scheduled_fires() {
    // With a store of its own, only the leader runs scheduled triggers (SPEC §10): their
    // fires stay due in the store, and a non-leader must neither run them nor wake for
    // them over and over; enqueued runs (one-shots) it takes as usual.
    let clock = Arc::new(TokioClock::new(t0()));
    let log: Log = Arc::default();
    let registry = recording("record", &clock, &log);
    let kv = MemoryKv::with_options(clock.clone(), Arc::new(TokioSleeper), MemoryKvOptions::default());
    let store = KvJobStore::new(kv, registry.calendars().clone(), Entropy::from_seed(1), StoreOptions::default());
    let mut config = NodeConfig::new(
        store.clone(),
        registry,
        SchedulerOptions::default(),
        "follower",
        clock.clone(),
        Entropy::from_seed(2),
    );
    config.election = Some(Arc::new(HeldElsewhere));
    let scheduler = Node::start(config, None).await.unwrap();
    scheduler.serve();
    let def = JobDefinition::new(name("ticks"), JobTypeKey::new("record").unwrap())
        .with_trigger(JobTriggerDefinition::new(TriggerName::new("t").unwrap(), "cron * * * * * *".parse().unwrap()));
    scheduler.schedule_one(def).await.unwrap();
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert!(log.lock().unwrap().is_empty(), "a non-leader runs no scheduled fire");

    let before = scheduler.counters().acquisitions;
    tokio::time::sleep(Duration::from_secs(10)).await;
    let acquisitions = scheduler.counters().acquisitions - before;
    // About one per poll interval (1 s); re-checking the overdue fire every few
    // milliseconds would be hundreds.
    assert!(acquisitions <= 20, "{acquisitions} acquisitions in 10 s");

    scheduler.enqueue_one(name("ticks")).await.unwrap();
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(log.lock().unwrap().len(), 1, "the enqueued run started at once");
    assert!(!scheduler.is_leader());
    scheduler.stop(Duration::from_secs(1)).await;
}

#[tokio::test(start_paused = true)]
async fn a_run_all_trigger_catches_up_its_missed_fires_at_once() {
    // One acquisition takes one fire per trigger; the node acquires again at once while
    // the trigger is still due, instead of once per retry wait (10 ms a fire).
    run_all_catches_up_at_once("catch-up-node", false).await;
}

#[tokio::test(start_paused = true)]
async fn a_local_run_all_trigger_catches_up_its_missed_fires_at_once() {
    // A cycle fires each local trigger once; the next cycle comes at once while one is
    // still due (it moved on), not after the 10 ms a fire that stays due waits.
    run_all_catches_up_at_once("local-catch-up-node", true).await;
}

/// Records its run as [`Recorder`] does, then runs on for a second: no run ends (which
/// wakes the poller) while a catch-up is timed.
struct SlowRecorder(Recorder);

impl Job for SlowRecorder {
    async fn run(&mut self, ctx: &RunContext) -> JobResult {
        self.0.run(ctx).await?;
        tokio::time::sleep(Duration::from_secs(1)).await;
        Ok(())
    }
}

/// Resumed after 30 s paused, a `RunAll` every-second trigger (of a local job when
/// `local`) owes 30 fires: all start within 50 ms (with 32 run slots), each once and in
/// order.
async fn run_all_catches_up_at_once(node: &str, local: bool) {
    let clock = Arc::new(TokioClock::new(t0()));
    let log: Log = Arc::default();
    let (c, l) = (clock.clone(), log.clone());
    let registry = JobRegistry::builder()
        .add_job_type_as("record", move || SlowRecorder(Recorder { clock: c.clone(), log: l.clone() }))
        .build()
        .unwrap();
    let (scheduler, _) = start(node, registry, clock.clone()).await;
    scheduler.serve();
    let trigger = JobTriggerDefinition::new(TriggerName::new("t").unwrap(), "cron * * * * * *".parse().unwrap())
        .with_misfire(MisfirePolicy::RunAll);
    let mut def = JobDefinition::new(name("owed"), JobTypeKey::new("record").unwrap()).with_trigger(trigger);
    def.allow_concurrent = true;
    def.run_on_every_instance = local;
    scheduler.schedule_one(def).await.unwrap();
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    assert!(scheduler.pause(&[name("owed")]).await[0].is_ok());
    let before = log.lock().unwrap().len();
    assert!(before >= 1, "it ran before the pause");
    tokio::time::sleep(Duration::from_secs(30)).await;
    assert_eq!(log.lock().unwrap().len(), before, "no run while paused");
    scheduler.resume(&[name("owed")]).await;
    tokio::time::sleep(Duration::from_millis(50)).await;
    let runs = log.lock().unwrap().clone();
    assert!(runs.len() - before >= 30, "{} of the missed fires ran in 50 ms", runs.len() - before);
    let scheduled: Vec<_> = runs.iter().map(|(scheduled, _)| *scheduled).collect();
    assert!(scheduled.windows(2).all(|w| w[1] - w[0] == TimeDelta::seconds(1)), "each fire once, in order");
    scheduler.stop(Duration::from_secs(2)).await;
}
