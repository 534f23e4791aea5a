//! Goal: the runtime's building blocks behave as SPEC §2, §8 and §12 say: registration,
//! one run's execution (outcome precedence, panics, timeouts, middleware), and events.
//!
//! Method: plain jobs on tokio's paused clock, so timeouts are exact and tests instant.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use chrono::{DateTime, Utc};
use futures_util::future::BoxFuture;
use sundial::calendar::WeeklyCalendar;
use sundial::job::{JobDefinition, JobRun, JobTriggerDefinition, JobTypeKey, JsonObject, RunCause, RunState};
use sundial::name::{JobName, TriggerName};
use sundial::schedule::JobSchedule;
use sundial::store::RunOutcome;
use sundial::time::Clock;
use sundial_actors::events::{
    publish_logged, BroadcastPublisher, CloudEvent, EventPublisher, PublishError, RunFacts, Topic,
};
use sundial_actors::execute::{execute, prepare, CancelReason, RunCancel, RunGates, RunMiddleware};
use sundial_actors::job::{FnJob, Job, JobFailure, JobResult, RunContext};
use sundial_actors::registry::JobRegistry;
use uuid::Uuid;

struct Hello;

impl Job for Hello {
    async fn run(&mut self, _ctx: &RunContext) -> JobResult {
        Ok(())
    }
}

fn t0() -> DateTime<Utc> {
    DateTime::from_timestamp(1_800_000_000, 0).unwrap()
}

fn ctx(cancel: &RunCancel) -> RunContext {
    RunContext {
        run: JobRun {
            id: Uuid::from_u128(1),
            job: JobName::new("j").unwrap(),
            trigger: Some(TriggerName::new("t").unwrap()),
            scheduled_at: t0(),
            cause: RunCause::Schedule,
            attempt: 1,
            retry_of: None,
            data: JsonObject::new(),
        },
        node: "n1".into(),
        cancel: cancel.token(),
        secrets: Default::default(),
    }
}

#[test]
fn registration_builds_and_fails_loudly() {
    let registry = JobRegistry::builder()
        .add_job("cleanup.nightly", "cron 0 3 * * *".parse().unwrap(), || Hello)
        .add_job("by-hand", JobSchedule::manual(), || Hello)
        .add_job_type_as("custom.key", || FnJob::new(|_ctx| async { Ok(()) }))
        .add_calendar("weekends", Arc::new(WeeklyCalendar::new(&[], chrono_tz::Tz::UTC)))
        .build()
        .unwrap();
    let nightly = registry.code_job(&JobName::new("cleanup.nightly").unwrap()).unwrap();
    assert_eq!(nightly.triggers.len(), 1);
    assert_eq!(nightly.triggers[0].name.as_str(), "default");
    assert!(registry.code_job(&JobName::new("by-hand").unwrap()).unwrap().triggers.is_empty());
    let keys: Vec<&str> = registry.type_keys().collect();
    assert_eq!(keys, vec!["custom.key", "runtime_parts::Hello"], "type keys, sorted; default key is the type name");
    assert!(registry.make("custom.key").is_some() && registry.make("nope").is_none());

    let error = JobRegistry::builder()
        .add_job("dup", "every 00:01:00".parse().unwrap(), || Hello)
        .add_job("dup", "every 00:02:00".parse().unwrap(), || Hello)
        .add_job_definition(JobDefinition::new(
            JobName::new("typeless").unwrap(),
            JobTypeKey::new("missing.Type").unwrap(),
        ))
        .add_job_definition(
            JobDefinition::new(JobName::new("calendared").unwrap(), JobTypeKey::new("runtime_parts::Hello").unwrap())
                .with_trigger(JobTriggerDefinition::new(
                    TriggerName::new("t").unwrap(),
                    "every 00:01:00 calendar=holidays".parse().unwrap(),
                )),
        )
        .add_job("Bad Name", JobSchedule::manual(), || Hello)
        .build()
        .unwrap_err();
    let text = error.to_string();
    for expected in
        ["'dup' is registered twice", "'missing.Type', which is not registered", "calendar 'holidays'", "'Bad Name'"]
    {
        assert!(text.contains(expected), "{expected:?} missing from:\n{text}");
    }
}

#[test]
fn a_fresh_instance_per_run() {
    static MADE: AtomicUsize = AtomicUsize::new(0);
    let registry = JobRegistry::builder()
        .add_job_type(|| {
            MADE.fetch_add(1, Ordering::SeqCst);
            Hello
        })
        .build()
        .unwrap();
    for _ in 0..3 {
        registry.make("runtime_parts::Hello").unwrap();
    }
    assert_eq!(MADE.load(Ordering::SeqCst), 3);
}

async fn outcome_of(job: impl Job, timeout: Option<Duration>, cancel: RunCancel) -> RunOutcome {
    let context = ctx(&cancel);
    execute(Box::new(job), context, cancel, timeout, Vec::new()).await
}

#[tokio::test(start_paused = true)]
async fn outcomes_success_failure_panic() {
    assert_eq!(outcome_of(Hello, None, RunCancel::new()).await, RunOutcome::Succeeded);
    let failing = FnJob::new(|_| async { Err(JobFailure::with_code("E42", "bad input")) });
    assert_eq!(
        outcome_of(failing, None, RunCancel::new()).await,
        RunOutcome::Failed { code: Some("E42".into()), message: "bad input".into() }
    );
    let panicking = FnJob::new(|_| async { panic!("boom") });
    match outcome_of(panicking, None, RunCancel::new()).await {
        RunOutcome::Failed { code, message } => {
            assert_eq!(code.as_deref(), Some("SCHEDULING_UNEXPECTED_001"));
            assert!(message.contains("boom"), "{message}");
        }
        other => panic!("{other:?}"),
    }
}

#[tokio::test(start_paused = true)]
async fn a_job_sees_its_secrets_resolved_and_its_failure_never_repeats_them() {
    let dir = std::env::temp_dir().join(format!("sundial-run-secrets-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("api-key");
    std::fs::write(&file, "key-from-a-file\n").unwrap();
    let run_with = |data: serde_json::Value, job: FnJob<_>| {
        let cancel = RunCancel::new();
        let mut context = ctx(&cancel);
        context.run.data = data.as_object().unwrap().clone();
        execute(Box::new(job), context, cancel, None, Vec::new())
    };
    let echo = |ctx: RunContext| async move {
        let seen = format!("{} {}", ctx.run.data["key"], ctx.run.data["stored"]);
        Err(JobFailure::new(format!("saw {seen}")))
    };
    let data = serde_json::json!({"key": {"$file": file.to_str().unwrap()}, "stored": {"$secret": "stored-secret"}});
    let outcome = run_with(data, FnJob::new(echo)).await;
    // The job saw both values; what it reported has them replaced.
    assert_eq!(outcome, RunOutcome::Failed { code: None, message: "saw \"[redacted]\" \"[redacted]\"".into() });
    let data = serde_json::json!({"key": {"$env": "SUNDIAL_TEST_VARIABLE_NOBODY_SETS"}});
    let outcome = run_with(data, FnJob::new(echo)).await;
    assert_eq!(
        outcome,
        RunOutcome::Failed {
            code: Some("SECRET_UNAVAILABLE".into()),
            message: "the environment has no SUNDIAL_TEST_VARIABLE_NOBODY_SETS".into()
        }
    );
    std::fs::remove_dir_all(dir).unwrap();
}

#[tokio::test(start_paused = true)]
async fn timeouts_fail_the_run_even_when_the_job_ignores_its_token() {
    let cooperative = FnJob::new(|ctx: RunContext| async move {
        ctx.cancel.cancelled().await;
        Ok(())
    });
    let clock = sundial_actors::clock::TokioClock::new(t0());
    let started = clock.monotonic();
    let outcome = outcome_of(cooperative, Some(Duration::from_secs(5)), RunCancel::new()).await;
    assert_eq!(clock.monotonic().saturating_duration_since(started), Duration::from_secs(5));
    assert!(
        matches!(outcome, RunOutcome::Failed { code: Some(ref c), .. } if c == "SCHEDULING_TIMEOUT_001"),
        "{outcome:?}"
    );

    // Ignores the token: the run ends when the job returns, still a timeout failure.
    let stubborn = FnJob::new(|_| async {
        tokio::time::sleep(Duration::from_secs(30)).await;
        Ok(())
    });
    let started = clock.monotonic();
    let outcome = outcome_of(stubborn, Some(Duration::from_secs(5)), RunCancel::new()).await;
    assert_eq!(
        clock.monotonic().saturating_duration_since(started),
        Duration::from_secs(30),
        "waits for the job: it keeps its slot"
    );
    assert!(matches!(outcome, RunOutcome::Failed { code: Some(ref c), .. } if c == "SCHEDULING_TIMEOUT_001"));
}

#[tokio::test(start_paused = true)]
async fn the_first_cancellation_reason_decides() {
    let slow = || {
        FnJob::new(|_| async {
            tokio::time::sleep(Duration::from_secs(10)).await;
            Ok(())
        })
    };
    // Canceled at 2 s, timeout at 5 s: canceled.
    let cancel = RunCancel::new();
    let trigger = cancel.clone();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_secs(2)).await;
        trigger.cancel(CancelReason::Requested);
    });
    assert!(matches!(outcome_of(slow(), Some(Duration::from_secs(5)), cancel).await, RunOutcome::Canceled { .. }));
    // Timeout at 5 s, cancel at 7 s: failed by timeout.
    let cancel = RunCancel::new();
    let trigger = cancel.clone();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_secs(7)).await;
        trigger.cancel(CancelReason::Requested);
    });
    assert!(matches!(outcome_of(slow(), Some(Duration::from_secs(5)), cancel).await, RunOutcome::Failed { .. }));
    // Node stop: canceled, never retried.
    let cancel = RunCancel::new();
    cancel.cancel(CancelReason::NodeStopping);
    assert!(
        matches!(outcome_of(slow(), None, cancel).await, RunOutcome::Canceled { message } if message.contains("stopping"))
    );
}

struct Recorder {
    name: &'static str,
    log: Arc<Mutex<Vec<String>>>,
}

impl RunMiddleware for Recorder {
    fn around<'a>(&'a self, ctx: &'a RunContext, next: BoxFuture<'a, JobResult>) -> BoxFuture<'a, JobResult> {
        Box::pin(async move {
            self.log.lock().unwrap().push(format!("{} before {}", self.name, ctx.run.job));
            let result = next.await;
            self.log.lock().unwrap().push(format!("{} after", self.name));
            result
        })
    }
}

#[tokio::test(start_paused = true)]
async fn middleware_wraps_every_run_first_outermost() {
    let log = Arc::new(Mutex::new(Vec::new()));
    let layers: Vec<Arc<dyn RunMiddleware>> = vec![
        Arc::new(Recorder { name: "tenancy", log: log.clone() }),
        Arc::new(Recorder { name: "audit", log: log.clone() }),
    ];
    let cancel = RunCancel::new();
    let job_log = log.clone();
    let job = FnJob::new(move |_| {
        let log = job_log.clone();
        async move {
            log.lock().unwrap().push("job".into());
            Ok(())
        }
    });
    let outcome = execute(Box::new(job), ctx(&cancel), cancel, None, layers).await;
    assert_eq!(outcome, RunOutcome::Succeeded);
    assert_eq!(*log.lock().unwrap(), vec!["tenancy before j", "audit before j", "job", "audit after", "tenancy after"]);
}

struct Failing;

impl EventPublisher for Failing {
    fn publish<'a>(&'a self, _event: &'a CloudEvent) -> BoxFuture<'a, Result<(), PublishError>> {
        Box::pin(async { Err(PublishError("broker down".into())) })
    }
}

#[tokio::test]
async fn cloud_events_for_every_topic() {
    let cancel = RunCancel::new();
    let run = ctx(&cancel).run;
    let facts = RunFacts {
        state: Some(RunState::Failed),
        error_code: Some("SCHEDULING_TIMEOUT_001".into()),
        ..RunFacts::default()
    };
    let event = CloudEvent::for_run(Topic::RunFailed, Uuid::from_u128(9), t0(), &run, facts, "n1");
    let json: serde_json::Value = serde_json::from_str(&event.to_json()).unwrap();
    assert_eq!(json["specversion"], "1.0");
    assert_eq!(json["source"], "/scheduling");
    assert_eq!(json["type"], "scheduling.run.failed");
    assert_eq!(json["subject"], run.id.to_string());
    assert_eq!(json["datacontenttype"], "application/json");
    assert_eq!(json["data"]["job"], "j");
    assert_eq!(json["data"]["error_code"], "SCHEDULING_TIMEOUT_001");
    assert_eq!(json["data"]["attempt"], 1);
    assert_eq!(json["data"]["node"], "n1");
    let job_event = CloudEvent::for_job(Topic::JobPaused, Uuid::from_u128(10), t0(), "j", "n1");
    assert_eq!(job_event.subject, "j");
    let topics: std::collections::BTreeSet<&str> = Topic::ALL.iter().map(|t| t.as_str()).collect();
    assert_eq!(topics.len(), 9);
    assert!(topics.iter().all(|t| t.starts_with("scheduling.")));

    let broadcast = BroadcastPublisher::new(16);
    let mut subscriber = broadcast.subscribe();
    publish_logged(&broadcast, &event).await;
    assert_eq!(subscriber.recv().await.unwrap().id, event.id);
    // A failing publisher is logged, never propagated.
    publish_logged(&Failing, &event).await;
}

/// The precise sleeper on real time: sleeps sharing a granule all end, none ends before its
/// own duration, and a later sleep on a fired granule still waits.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[allow(clippy::disallowed_methods)] // Real time is what this sleeper follows.
async fn precise_sleeper_never_ends_early_and_shares_granules() {
    use sundial::time::Sleeper;
    use sundial_actors::clock::PreciseSleeper;

    let sleeper = PreciseSleeper::new();
    let mut waits = Vec::new();
    for i in 0..200u64 {
        let duration = Duration::from_micros(3_000 + i * 7);
        let started = std::time::Instant::now();
        let sleep = sleeper.sleep(duration);
        waits.push(tokio::spawn(async move {
            sleep.await;
            (started.elapsed(), duration)
        }));
    }
    for wait in waits {
        let (elapsed, duration) = wait.await.unwrap();
        assert!(elapsed >= duration, "ended after {elapsed:?}, before its {duration:?}");
    }
    let started = std::time::Instant::now();
    sleeper.sleep(Duration::from_millis(2)).await;
    assert!(started.elapsed() >= Duration::from_millis(2));
    sleeper.sleep(Duration::ZERO).await;
}

/// A run canceled before its start instant never runs its job (a node fenced for a stale
/// heartbeat must not start what it acquired); the cancel reason decides the outcome.
#[tokio::test(start_paused = true)]
async fn a_run_canceled_before_its_start_never_runs_its_job() {
    let calls = Arc::new(AtomicUsize::new(0));
    let counted = calls.clone();
    let job = FnJob::new(move |_ctx: RunContext| {
        let counted = counted.clone();
        async move {
            counted.fetch_add(1, Ordering::SeqCst);
            Ok(())
        }
    });
    let cancel = RunCancel::new();
    let token = cancel.token();
    let gate: BoxFuture<'static, ()> = Box::pin(async move {
        tokio::select! {
            () = tokio::time::sleep(Duration::from_secs(60)) => {}
            () = token.cancelled() => {}
        }
    });
    let started = Arc::new(AtomicUsize::new(0));
    let on_start = started.clone();
    let gates = RunGates {
        start: gate,
        slots: None,
        end: Box::pin(std::future::ready(())),
        on_start: Some(Box::new(move || -> BoxFuture<'static, ()> {
            on_start.fetch_add(1, Ordering::SeqCst);
            Box::pin(std::future::ready(()))
        })),
    };
    let prepared = prepare(Box::new(job), ctx(&cancel), cancel.clone(), Vec::new(), gates, None);
    cancel.cancel(CancelReason::Fenced);
    let outcome = prepared.await;
    assert!(matches!(outcome, RunOutcome::Canceled { .. }), "{outcome:?}");
    assert_eq!(started.load(Ordering::SeqCst), 0, "the job never started");
    assert_eq!(calls.load(Ordering::SeqCst), 0);
}

/// The start hook is called once as the job starts; what it returns (a node's start
/// event) runs beside the job, and the run ends only after it.
#[tokio::test(start_paused = true)]
async fn the_start_hook_runs_beside_the_job_and_the_run_waits_for_it() {
    let published = Arc::new(AtomicUsize::new(0));
    let hook = published.clone();
    let cancel = RunCancel::new();
    let gates = RunGates {
        start: Box::pin(std::future::ready(())),
        slots: None,
        end: Box::pin(std::future::ready(())),
        on_start: Some(Box::new(move || -> BoxFuture<'static, ()> {
            Box::pin(async move {
                tokio::time::sleep(Duration::from_secs(5)).await;
                hook.fetch_add(1, Ordering::SeqCst);
            })
        })),
    };
    let job = FnJob::new(|_ctx: RunContext| async {
        tokio::time::sleep(Duration::from_secs(1)).await;
        Ok(())
    });
    let clock = sundial_actors::clock::TokioClock::new(t0());
    let outcome = prepare(Box::new(job), ctx(&cancel), cancel.clone(), Vec::new(), gates, None).await;
    assert_eq!(outcome, RunOutcome::Succeeded);
    assert_eq!(published.load(Ordering::SeqCst), 1);
    assert_eq!(clock.now() - t0(), chrono::TimeDelta::seconds(5), "beside the job, not before it");
}

/// A run slot is held while the job runs and freed as it returns, before the run's end
/// gate: with one slot, the second run starts as soon as the first job returns, though the
/// first run has not ended; a run canceled while waiting for a slot never starts its job;
/// the slots count how long the jobs ran.
#[tokio::test(start_paused = true)]
async fn a_slot_is_held_while_the_job_runs_and_serves_the_next_run_as_it_returns() {
    use sundial_actors::slots::RunSlots;
    let clock = Arc::new(sundial_actors::clock::TokioClock::new(t0()));
    let slots = RunSlots::new(1, clock.clone());
    let started: Arc<std::sync::Mutex<Vec<(&str, i64)>>> = Arc::default();
    let run = |name: &'static str, end_after: u64| {
        let cancel = RunCancel::new();
        let (started, clock) = (started.clone(), clock.clone());
        let job = FnJob::new(move |_ctx: RunContext| {
            let (started, clock) = (started.clone(), clock.clone());
            async move {
                started.lock().unwrap().push((name, (clock.now() - t0()).num_seconds()));
                tokio::time::sleep(Duration::from_secs(1)).await;
                Ok(())
            }
        });
        let gates = RunGates {
            start: Box::pin(std::future::ready(())),
            slots: Some(slots.clone()),
            end: Box::pin(tokio::time::sleep(Duration::from_secs(end_after))),
            on_start: None,
        };
        let prepared = prepare(Box::new(job), ctx(&cancel), cancel.clone(), Vec::new(), gates, None);
        (tokio::spawn(prepared), cancel)
    };
    let (first, _) = run("first", 10);
    tokio::task::yield_now().await;
    let (second, _) = run("second", 0);
    let (third, third_cancel) = run("third", 0);
    tokio::task::yield_now().await;
    assert_eq!(slots.executing(), 1);
    third_cancel.cancel(CancelReason::Requested);
    assert!(matches!(third.await.unwrap(), RunOutcome::Canceled { .. }), "canceled while waiting for a slot");
    assert_eq!(second.await.unwrap(), RunOutcome::Succeeded);
    assert_eq!(
        *started.lock().unwrap(),
        vec![("first", 0), ("second", 1)],
        "the second started as the first job returned"
    );
    assert_eq!(slots.take_job_times(), (2, Duration::from_secs(2)));
    assert_eq!(slots.take_job_times(), (0, Duration::ZERO), "taken once");
    assert_eq!(first.await.unwrap(), RunOutcome::Succeeded);
    assert_eq!(clock.now() - t0(), chrono::TimeDelta::seconds(10), "the first run ended after its end gate");
    assert_eq!(slots.executing(), 0);
}
