//! Goal: a node's actors follow SPEC §6–10 end to end through the `JobScheduler` handle.
//!
//! Method: one node on `MemoryKv`, on tokio's paused clock (`TokioClock`), so simulated
//! seconds pass instantly and deterministically; jobs record what happened to them.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use chrono::{DateTime, Utc};
use sundial::entropy::Entropy;
use sundial::job::{JobDefinition, JobRunQuery, JobTypeKey, RetryPolicy, RunCause, RunState};
use sundial::kv::memory::{MemoryKv, MemoryKvOptions};
use sundial::name::JobName;
use sundial::options::SchedulerOptions;
use sundial::store::{KvJobStore, RunOutcome, StoreOptions};
use sundial::time::Clock;
use sundial_actors::clock::{TokioClock, TokioSleeper};
use sundial_actors::job::{FnJob, Job, JobFailure, JobResult, RunContext};
use sundial_actors::node::{Lifecycle, Node, NodeConfig};
use sundial_actors::registry::JobRegistry;
use sundial_actors::scheduler::JobScheduler;

type Store = KvJobStore<MemoryKv>;
type Log = Arc<Mutex<Vec<(DateTime<Utc>, DateTime<Utc>)>>>;

fn t0() -> DateTime<Utc> {
    // A quarter second before a whole second.
    DateTime::from_timestamp_micros(1_800_000_000_750_000).unwrap()
}

/// Starts a node; `node` must be unique per test (actor names are process-wide).
async fn start(node: &str, registry: JobRegistry, clock: Arc<TokioClock>) -> (JobScheduler<Store>, Store) {
    let kv = MemoryKv::with_options(clock.clone(), Arc::new(TokioSleeper), MemoryKvOptions::default());
    let store = KvJobStore::new(kv, registry.calendars().clone(), Entropy::from_seed(1), StoreOptions::default());
    let options = SchedulerOptions::default();
    let config = NodeConfig::new(store.clone(), registry, options, node, clock, Entropy::from_seed(2));
    let scheduler = Node::start(config, None).await.unwrap();
    (scheduler, store)
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
    let (c, l) = (clock.clone(), log.clone());
    let registry = JobRegistry::builder()
        .add_job("tick", "cron * * * * * *".parse().unwrap(), move || Recorder { clock: c.clone(), log: l.clone() })
        .build()
        .unwrap();
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
