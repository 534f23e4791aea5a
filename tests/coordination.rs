//! Goal: the execution coordinator follows SPEC §15: the first instance to insert a fire's
//! record runs it, once; `PerFireTime` lets different fires overlap and `PerJob` does not;
//! a silent owner's execution is taken over only after the observer saw it unchanged for
//! the whole lease on its own clock, and the old owner then learns it lost the execution;
//! heartbeats keep an execution; outcomes are written back; `Disabled` arbitrates nothing;
//! races and ambiguous commits grant each fire once; bad requests and store trouble are
//! clear errors.
//!
//! Method: instances' coordinators share one `MemoryKv` on a manual clock; time moves only
//! when the test says so.

mod meanwhile;

use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use futures_util::future::BoxFuture;
use sundial::coordination::{
    Decision, Declined, Execution, ExecutionCoordinator, ExecutionKey, ExecutionRequest, ExecutionStatus, UniqueMode,
};
use sundial::entropy::Entropy;
use sundial::kv::memory::{KvFaults, MemoryKv, MemoryKvOptions};
use sundial::name::{GroupName, JobName, ServiceName};
use sundial::store::keys::Keyspace;
use sundial::time::{add_duration, from_micros, ManualClock, Sleeper};

const LEASE: Duration = Duration::from_secs(300);

fn t0() -> DateTime<Utc> {
    from_micros(1_800_000_000_000_000).unwrap()
}

/// Latency on tokio's clock, so operations yield and instances interleave.
#[derive(Debug)]
struct TokioSleeper;

impl Sleeper for TokioSleeper {
    fn sleep(&self, duration: Duration) -> BoxFuture<'static, ()> {
        Box::pin(tokio::time::sleep(duration))
    }
}

fn setup(instances: &[&str]) -> (MemoryKv, ManualClock, Vec<ExecutionCoordinator<MemoryKv>>) {
    let clock = ManualClock::new(t0());
    setup_on(MemoryKv::new(Arc::new(clock.clone())), clock, instances)
}

fn setup_on(
    kv: MemoryKv,
    clock: ManualClock,
    instances: &[&str],
) -> (MemoryKv, ManualClock, Vec<ExecutionCoordinator<MemoryKv>>) {
    let coordinators = instances
        .iter()
        .zip(1..)
        .map(|(name, seed)| {
            ExecutionCoordinator::new(
                kv.client(name),
                Keyspace::default_root(),
                Arc::new(clock.clone()),
                *name,
                Entropy::from_seed(seed),
            )
        })
        .collect();
    (kv, clock, coordinators)
}

fn key(job: &str, fire: DateTime<Utc>) -> ExecutionKey {
    ExecutionKey::new(
        ServiceName::new("orders").unwrap(),
        GroupName::new("default").unwrap(),
        JobName::new(job).unwrap(),
        fire,
    )
}

fn request(job: &str, fire: DateTime<Utc>, mode: UniqueMode) -> ExecutionRequest {
    let mut request = ExecutionRequest::new(key(job, fire), mode, LEASE);
    request.job_name = format!("Daily {job}");
    request.fire_instance_id = "fire-1".to_owned();
    request
}

fn granted(decision: Decision) -> Execution {
    match decision {
        Decision::Granted(execution) => execution,
        Decision::Declined(declined) => panic!("expected a grant, got {declined:?}"),
    }
}

fn declined(decision: Decision) -> Declined {
    match decision {
        Decision::Declined(declined) => declined,
        Decision::Granted(execution) => panic!("expected a decline, got {execution:?}"),
    }
}

#[tokio::test]
async fn per_fire_time_runs_each_fire_once_and_lets_fires_overlap() {
    let (_, clock, c) = setup(&["a", "b"]);
    let fire = t0();
    let first = granted(c[0].try_begin(&request("sync", fire, UniqueMode::PerFireTime)).await.unwrap());
    let record = c[1].record(&key("sync", fire)).await.unwrap().unwrap();
    assert_eq!(Some(record.execution_id), first.execution_id);
    assert_eq!(
        (record.owner.as_str(), record.status, record.job_name.as_str(), record.fire_instance_id.as_str()),
        ("a", ExecutionStatus::Running, "Daily sync", "fire-1")
    );
    assert_eq!(record.lease_expires_at, add_duration(t0(), LEASE));
    match declined(c[1].try_begin(&request("sync", fire, UniqueMode::PerFireTime)).await.unwrap()) {
        Declined::Running { record, check_again_in } => {
            assert_eq!(record.owner, "a");
            assert_eq!(check_again_in, LEASE, "timing starts at the first sight of the record");
        }
        other => panic!("{other:?}"),
    }
    // The next fire runs beside the first.
    let next = add_duration(fire, Duration::from_secs(60));
    clock.advance(Duration::from_secs(60));
    let second = granted(c[1].try_begin(&request("sync", next, UniqueMode::PerFireTime)).await.unwrap());
    c[0].succeed(&first).await.unwrap();
    c[1].fail(&second, "upstream refused").await.unwrap();
    // Completed fires never run again, whoever asks.
    for (coordinator, at) in [(&c[0], fire), (&c[1], fire), (&c[0], next)] {
        let again = declined(coordinator.try_begin(&request("sync", at, UniqueMode::PerFireTime)).await.unwrap());
        assert!(matches!(again, Declined::AlreadyRan(_)), "{again:?}");
        assert_eq!(again.check_again_in(), None);
    }
    let records = c[0]
        .records(
            &ServiceName::new("orders").unwrap(),
            &GroupName::new("default").unwrap(),
            &JobName::new("sync").unwrap(),
            10,
        )
        .await
        .unwrap();
    let summary: Vec<_> =
        records.iter().map(|r| (r.key.scheduled_at, r.status, r.owner.as_str(), r.error_message.clone())).collect();
    assert_eq!(
        summary,
        vec![
            (next, ExecutionStatus::Failed, "b", Some("upstream refused".to_owned())),
            (fire, ExecutionStatus::Succeeded, "a", None),
        ],
        "newest fire first, outcomes written back"
    );
    assert!(records.iter().all(|r| r.completed_at.is_some()));
}

#[tokio::test]
async fn per_job_never_overlaps_the_job_and_still_runs_each_fire_once() {
    let (_, clock, c) = setup(&["a", "b"]);
    let (fire, next) = (t0(), add_duration(t0(), Duration::from_secs(60)));
    let first = granted(c[0].try_begin(&request("report", fire, UniqueMode::PerJob)).await.unwrap());
    clock.advance(Duration::from_secs(60));
    match declined(c[1].try_begin(&request("report", next, UniqueMode::PerJob)).await.unwrap()) {
        Declined::JobBusy { record, .. } => assert_eq!((record.key.scheduled_at, record.owner.as_str()), (fire, "a")),
        other => panic!("{other:?}"),
    }
    // Another job of the same service and group is not held up.
    granted(c[1].try_begin(&request("other", next, UniqueMode::PerJob)).await.unwrap());
    c[0].succeed(&first).await.unwrap();
    let second = granted(c[1].try_begin(&request("report", next, UniqueMode::PerJob)).await.unwrap());
    // The first fire ran: a late arrival of it does not run it again, even with the job free.
    c[1].succeed(&second).await.unwrap();
    let late = declined(c[1].try_begin(&request("report", fire, UniqueMode::PerJob)).await.unwrap());
    assert!(matches!(late, Declined::AlreadyRan(_)), "{late:?}");
}

#[tokio::test]
async fn a_silent_owner_is_taken_over_only_after_the_observer_saw_it_unchanged_for_its_lease() {
    let (_, clock, c) = setup(&["a", "b"]);
    let fire = t0();
    let first = granted(c[0].try_begin(&request("sync", fire, UniqueMode::PerFireTime)).await.unwrap());
    clock.advance(Duration::from_secs(100));
    // b sees the record for the first time: however old it is, b times it from now.
    let seen = declined(c[1].try_begin(&request("sync", fire, UniqueMode::PerFireTime)).await.unwrap());
    assert_eq!(seen.check_again_in(), Some(LEASE));
    clock.advance(LEASE - Duration::from_secs(1));
    let almost = declined(c[1].try_begin(&request("sync", fire, UniqueMode::PerFireTime)).await.unwrap());
    assert_eq!(almost.check_again_in(), Some(Duration::from_secs(1)));
    clock.advance(Duration::from_secs(1));
    let taken = granted(c[1].try_begin(&request("sync", fire, UniqueMode::PerFireTime)).await.unwrap());
    assert_eq!(taken.takeover_of, first.execution_id);
    let record = c[1].record(&key("sync", fire)).await.unwrap().unwrap();
    assert_eq!((record.owner.as_str(), record.takeover_of), ("b", first.execution_id));
    // The old owner learns it lost the execution; its outcome is not recorded.
    assert_eq!(c[0].heartbeat(&first).await.unwrap_err().code(), "SCHEDULING_CONFLICT_002");
    assert_eq!(c[0].succeed(&first).await.unwrap_err().code(), "SCHEDULING_CONFLICT_002");
    c[1].fail(&taken, "boom").await.unwrap();
    let record = c[0].record(&key("sync", fire)).await.unwrap().unwrap();
    assert_eq!((record.owner.as_str(), record.status), ("b", ExecutionStatus::Failed));
}

/// An observer times a record from when it saw it, not from when it began to look: here b
/// begins to look, and while its read is on its way (store latency) a second passes and a
/// begins the fire; b finds a's record, which it must not take over before a whole lease
/// from when a wrote it.
#[tokio::test]
async fn an_observer_times_a_record_it_saw_late_from_when_it_saw_it() {
    let clock = ManualClock::new(t0());
    let meanwhile = meanwhile::Meanwhile::default();
    let kv = MemoryKv::with_options(Arc::new(clock.clone()), Arc::new(meanwhile.clone()), MemoryKvOptions::default());
    let (kv, clock, c) = setup_on(kv, clock, &["a", "b"]);
    let fire = t0();
    let [a, b] = <[_; 2]>::try_from(c).unwrap_or_else(|_| unreachable!("two instances"));
    let begun = Arc::new(parking_lot::Mutex::new(None));
    let (begun_by_a, clock_a, kv_a) = (begun.clone(), clock.clone(), kv.clone());
    meanwhile.then(async move {
        kv_a.set_faults(KvFaults::default());
        clock_a.advance(Duration::from_secs(1));
        *begun_by_a.lock() = Some(granted(a.try_begin(&request("sync", fire, UniqueMode::PerFireTime)).await.unwrap()));
    });
    kv.set_faults(KvFaults { latency_max: Duration::from_millis(1), ..KvFaults::default() });
    let seen = declined(b.try_begin(&request("sync", fire, UniqueMode::PerFireTime)).await.unwrap());
    assert_eq!(seen.check_again_in(), Some(LEASE));
    let first = begun.lock().take().expect("a began the fire while b looked");
    // A lease after b began looking, a's record is a second short of a lease old.
    clock.advance(LEASE - Duration::from_secs(1));
    let almost = declined(b.try_begin(&request("sync", fire, UniqueMode::PerFireTime)).await.unwrap());
    assert_eq!(almost.check_again_in(), Some(Duration::from_secs(1)), "taken over before a whole lease");
    clock.advance(Duration::from_secs(1));
    let taken = granted(b.try_begin(&request("sync", fire, UniqueMode::PerFireTime)).await.unwrap());
    assert_eq!(taken.takeover_of, first.execution_id);
}

#[tokio::test]
async fn heartbeats_keep_an_execution_from_being_taken_over() {
    let (_, clock, c) = setup(&["a", "b"]);
    let fire = t0();
    let execution = granted(c[0].try_begin(&request("sync", fire, UniqueMode::PerFireTime)).await.unwrap());
    for _ in 0..10 {
        let held = declined(c[1].try_begin(&request("sync", fire, UniqueMode::PerFireTime)).await.unwrap());
        assert!(matches!(held, Declined::Running { .. }), "{held:?}");
        clock.advance(LEASE / 2);
        c[0].heartbeat(&execution).await.unwrap();
        clock.advance(LEASE / 2);
    }
    let record = c[1].record(&key("sync", fire)).await.unwrap().unwrap();
    assert_eq!(record.heartbeats, 10);
    assert_eq!(record.lease_expires_at, add_duration(t0(), LEASE * 10 - LEASE / 2 + LEASE));
    c[0].succeed(&execution).await.unwrap();
}

#[tokio::test]
async fn per_job_takes_over_a_silent_run_of_another_fire_and_marks_it_abandoned() {
    let (_, clock, c) = setup(&["a", "b"]);
    let fire = t0();
    let stale = granted(c[0].try_begin(&request("report", fire, UniqueMode::PerJob)).await.unwrap());
    let next = add_duration(fire, Duration::from_secs(3600));
    clock.advance(Duration::from_secs(3600));
    let busy = declined(c[1].try_begin(&request("report", next, UniqueMode::PerJob)).await.unwrap());
    assert_eq!(busy.check_again_in(), Some(LEASE));
    clock.advance(LEASE);
    let execution = granted(c[1].try_begin(&request("report", next, UniqueMode::PerJob)).await.unwrap());
    assert_eq!(execution.takeover_of, None, "a different fire: nothing of its own was taken over");
    let abandoned = c[1].record(&key("report", fire)).await.unwrap().unwrap();
    assert_eq!(abandoned.status, ExecutionStatus::Failed);
    assert!(abandoned.error_message.as_deref().unwrap().starts_with("abandoned"), "{abandoned:?}");
    assert_eq!(c[0].succeed(&stale).await.unwrap_err().code(), "SCHEDULING_CONFLICT_002");
    // The job is b's until it ends; then the next fire may run.
    let later = add_duration(next, Duration::from_secs(3600));
    let held = declined(c[0].try_begin(&request("report", later, UniqueMode::PerJob)).await.unwrap());
    assert!(matches!(held, Declined::JobBusy { .. }), "{held:?}");
    c[1].succeed(&execution).await.unwrap();
    granted(c[0].try_begin(&request("report", later, UniqueMode::PerJob)).await.unwrap());
}

#[tokio::test(start_paused = true)]
async fn racing_instances_and_ambiguous_commits_grant_each_fire_once() {
    let names: Vec<String> = (0..6).map(|i| format!("instance-{i}")).collect();
    let refs: Vec<&str> = names.iter().map(String::as_str).collect();
    let clock = ManualClock::new(t0());
    let faults = KvFaults {
        latency_max: Duration::from_millis(2),
        spurious_conflict: 0.2,
        unknown_result_committed: 0.2,
        unknown_result_not_committed: 0.2,
        ..KvFaults::default()
    };
    let options = MemoryKvOptions { seed: 7, faults, ..MemoryKvOptions::default() };
    let kv = MemoryKv::with_options(Arc::new(clock.clone()), Arc::new(TokioSleeper), options);
    let (kv, _, c) = setup_on(kv, clock, &refs);
    let conflicts_before = kv.stats().conflicts;
    let c = Arc::new(c);
    for (n, mode) in (0..20u64).zip([UniqueMode::PerFireTime, UniqueMode::PerJob].into_iter().cycle()) {
        let fire = add_duration(t0(), Duration::from_secs(60 * n));
        let tasks: Vec<_> = (0..c.len())
            .map(|i| {
                let c = c.clone();
                tokio::spawn(async move { c[i].try_begin(&request("sync", fire, mode)).await })
            })
            .collect();
        let mut winners = Vec::new();
        for (i, task) in tasks.into_iter().enumerate() {
            // Store trouble after every retry is an error, never a second grant.
            if let Ok(Decision::Granted(execution)) = task.await.unwrap() {
                winners.push((i, execution));
            }
        }
        assert!(winners.len() <= 1, "fire {n}: {} grants", winners.len());
        let record = c[0].record(&key("sync", fire)).await.unwrap();
        if let Some((i, execution)) = winners.pop() {
            let record = record.expect("a granted fire has its record");
            assert_eq!((record.execution_id, record.owner.as_str()), (execution.execution_id.unwrap(), refs[i]));
            // Completion is idempotent under ambiguous commits too.
            let mut done = c[i].succeed(&execution).await;
            while done.as_ref().is_err_and(|e| e.code() == "SCHEDULING_UNAVAILABLE_003") {
                done = c[i].succeed(&execution).await;
            }
            done.unwrap();
            let status = c[0].record(&key("sync", fire)).await.unwrap().unwrap().status;
            assert_eq!(status, ExecutionStatus::Succeeded);
        }
    }
    // The instances did race: some insertions lost to another's commit.
    assert!(kv.stats().conflicts > conflicts_before, "{:?}", kv.stats());
}

#[tokio::test]
async fn disabled_grants_everyone_and_writes_nothing() {
    let (kv, _, c) = setup(&["a", "b"]);
    let before = kv.key_count();
    for coordinator in &c {
        let execution = granted(coordinator.try_begin(&request("dev", t0(), UniqueMode::Disabled)).await.unwrap());
        assert_eq!(execution.execution_id, None);
        coordinator.heartbeat(&execution).await.unwrap();
        coordinator.succeed(&execution).await.unwrap();
    }
    assert_eq!(kv.key_count(), before);
    assert_eq!(c[0].record(&key("dev", t0())).await.unwrap(), None);
}

#[tokio::test]
async fn bad_requests_and_store_trouble_are_clear_errors() {
    let (kv, _, c) = setup(&["a"]);
    let mut zero = request("sync", t0(), UniqueMode::PerFireTime);
    zero.lease = Duration::ZERO;
    assert_eq!(c[0].try_begin(&zero).await.unwrap_err().code(), "SCHEDULING_VALIDATION_001");
    let mut long = request("sync", t0(), UniqueMode::PerJob);
    long.fire_instance_id = "x".repeat(2000);
    let error = c[0].try_begin(&long).await.unwrap_err();
    assert_eq!(error.code(), "SCHEDULING_VALIDATION_001");
    assert!(error.to_string().contains("fire instance id"), "{error}");
    assert!(ServiceName::new("Orders Service").is_err(), "service names follow the name grammar");
    kv.set_unavailable(true);
    let error = c[0].try_begin(&request("sync", t0(), UniqueMode::PerFireTime)).await.unwrap_err();
    assert_eq!(error.code(), "SCHEDULING_UNAVAILABLE_003");
    kv.set_unavailable(false);
    // Nothing was granted while the store was away: the fire is still free.
    let execution = granted(c[0].try_begin(&request("sync", t0(), UniqueMode::PerFireTime)).await.unwrap());
    c[0].fail(&execution, &"é".repeat(10_000)).await.unwrap();
    // Told again (its answer lost on the way, say), the same outcome is no error.
    c[0].fail(&execution, &"é".repeat(10_000)).await.unwrap();
    assert_eq!(c[0].succeed(&execution).await.unwrap_err().code(), "SCHEDULING_CONFLICT_002", "not another outcome");
    let record = c[0].record(&key("sync", t0())).await.unwrap().unwrap();
    assert!(record.error_message.unwrap().len() <= sundial::job::ERROR_MESSAGE_LEN_MAX, "long errors are cut");
}

#[tokio::test]
async fn old_completed_records_can_be_forgotten_running_ones_stay() {
    let (_, clock, c) = setup(&["a"]);
    let fires: Vec<_> = (0..5u64).map(|n| add_duration(t0(), Duration::from_secs(60 * n))).collect();
    let mut running = None;
    for (n, fire) in fires.iter().enumerate() {
        let execution = granted(c[0].try_begin(&request("sync", *fire, UniqueMode::PerFireTime)).await.unwrap());
        match n {
            1 => running = Some(execution),
            _ => c[0].succeed(&execution).await.unwrap(),
        }
        clock.advance(Duration::from_secs(60));
    }
    let (service, group, job) =
        (ServiceName::new("orders").unwrap(), GroupName::new("default").unwrap(), JobName::new("sync").unwrap());
    // Before the fourth fire: the first and third go, the running second stays.
    assert_eq!(c[0].forget_before(&service, &group, &job, fires[3], 100).await.unwrap(), 2);
    let left: Vec<_> =
        c[0].records(&service, &group, &job, 10).await.unwrap().iter().map(|r| r.key.scheduled_at).collect();
    assert_eq!(left, vec![fires[4], fires[3], fires[1]]);
    // At most `limit` at a time, oldest first.
    c[0].succeed(&running.unwrap()).await.unwrap();
    assert_eq!(c[0].forget_before(&service, &group, &job, fires[4], 1).await.unwrap(), 1);
    assert_eq!(c[0].record(&key("sync", fires[1])).await.unwrap(), None);
    assert!(c[0].record(&key("sync", fires[3])).await.unwrap().is_some());
}

#[tokio::test(start_paused = true)]
async fn a_grant_whose_answer_was_lost_is_recognised_when_the_instance_asks_again() {
    let clock = ManualClock::new(t0());
    // Every commit times out and lands a few seconds later: the call gives up, yet its
    // record is written.
    let faults = KvFaults { timeout_commit_lands_later: 1.0, ..KvFaults::default() };
    let options = MemoryKvOptions { seed: 3, faults, ..MemoryKvOptions::default() };
    let kv = MemoryKv::with_options(Arc::new(clock.clone()), Arc::new(TokioSleeper), options);
    let (kv, clock, c) = setup_on(kv, clock, &["a", "b"]);
    let request = request("sync", t0(), UniqueMode::PerFireTime);
    let error = c[0].try_begin(&request).await.unwrap_err();
    assert_eq!(error.code(), "SCHEDULING_UNAVAILABLE_003");
    kv.set_faults(KvFaults::default());
    clock.advance(Duration::from_secs(5));
    let record = c[1].record(&key("sync", t0())).await.unwrap().expect("a late commit landed");
    assert_eq!(record.owner, "a");
    // b is held off; a, asking again, knows the record for its own.
    assert!(matches!(declined(c[1].try_begin(&request).await.unwrap()), Declined::Running { .. }));
    let execution = granted(c[0].try_begin(&request).await.unwrap());
    assert_eq!(execution.execution_id, Some(record.execution_id));
    c[0].succeed(&execution).await.unwrap();
}
