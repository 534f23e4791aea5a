//! The store conformance scenarios, generic over the `Kv`: each takes a fresh store and
//! checks one group of SPEC §7–10 rules through the store's public operations, with
//! explicit times (the store never reads a clock), so they run unchanged on `MemoryKv`
//! (tests/store_conformance.rs) and on FoundationDB (actors/tests/fdb_conformance.rs).
#![allow(dead_code)] // Each including test binary uses its own subset.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use chrono::{DateTime, TimeDelta, Utc};
use sundial::error::SchedulingError;
use sundial::job::{
    JobDefinition, JobTriggerDefinition, JobTypeKey, JsonObject, MisfirePolicy, RetryPolicy, RunCause, RunState,
    TriggerState, DATA_LEN_MAX, ERROR_CODE_LEN_MAX, ERROR_MESSAGE_LEN_MAX,
};
use sundial::kv::{Kv, KvTransaction, RetryOptions};
use sundial::name::{JobName, TriggerKey, TriggerName};
use sundial::schedule::format_instant;
use sundial::store::keys::shard_of;
use sundial::store::records::{JobRecord, TriggerRecord};
use sundial::store::{
    codec, AcquireRequest, AcquiredRun, Completion, CompletionResult, DueFilter, DueOutlook, KvJobStore, LocalJobs,
    RunOutcome, StoreError,
};
use sundial::time::from_micros;
use uuid::Uuid;

/// No busy local jobs.
static NO_JOBS: BTreeSet<String> = BTreeSet::new();

/// Calls `$m!` with the name of every scenario that takes a default store (the history
/// cap scenario needs `max_runs: Some(3)` and is run on its own).
#[macro_export]
macro_rules! for_each_scenario {
    ($m:ident $(, $arg:expr)?) => {
        $crate::for_each_retry_safe_scenario!($m $(, $arg)?;
            the_due_outlook_splits_home_fires_from_the_others,
            fires_the_node_leaves_waiting_neither_wake_it_nor_hide_others,
            known_shard_heads_spare_reads_and_are_read_again_when_they_may_not_hold
        );
    };
}

/// Calls `$m!` with the name of every scenario of [`for_each_scenario`] whose checks hold
/// whatever a step retried after an ambiguous commit returns, then with `$extra`. Left out:
/// the three that check the due outlook and shard heads an acquisition returns, which an
/// acquisition retried after an ambiguous commit does not return (it says more may be due
/// instead).
#[macro_export]
macro_rules! for_each_retry_safe_scenario {
    ($m:ident $(, $arg:expr)? $(; $($extra:ident),* $(,)?)?) => {
        $m!($($arg,)?
            a_cron_fire_is_acquired_once_and_the_trigger_advances,
            misfire_policies_at_acquisition,
            a_non_concurrent_job_blocks_and_unblocks,
            an_interval_trigger_waits_for_its_run_then_one_interval,
            failed_runs_retry_per_policy_as_one_shot_triggers,
            enqueue_and_manual_runs,
            pause_and_resume_jobs_and_triggers,
            unknown_job_types_put_the_trigger_in_error,
            schedule_replaces_and_unschedule_deletes,
            lost_nodes_are_reaped_and_their_runs_recovered_exactly_once,
            records_of_stopped_nodes_are_deleted_once_reaped,
            cancel_requests_reach_the_running_node_until_the_run_ends,
            history_queries_filter_page_count_and_expire,
            history_queries_merge_running_runs_by_scheduled_time,
            a_history_scan_over_several_transactions_merges_running_runs_on_every_page,
            retention_deletes_by_end_time_past_runs_that_ended_later,
            status_shows_triggers_running_and_last_result,
            code_jobs_sync_with_the_fingerprint_rules_and_restore,
            code_jobs_sync_in_batches_each_job_with_its_own_outcome,
            local_jobs_stay_out_of_acquisition_but_their_runs_go_to_history,
            local_jobs_are_reread_only_after_a_change,
            lookahead_takes_fires_due_soon_with_their_own_time,
            without_scheduled_fires_only_one_shot_triggers_are_taken,
            a_one_shot_trigger_unblocked_while_its_job_is_paused_still_runs,
            a_restarted_process_reclaims_the_runs_its_predecessor_left,
            a_job_deleted_and_added_again_waits_for_its_old_run,
            batched_completions_act_as_each_one_alone,
            a_non_concurrent_job_switches_between_local_and_cluster_only_between_runs,
            oversized_inputs_are_refused_and_never_wedge_the_store,
            data_heavy_batches_are_split_to_fit_a_transaction,
            external_fires_run_once_through_the_execution_coordinator,
            zero_limits_and_empty_ranges_read_and_clear_nothing,
            $($($extra),*)?
        );
    };
}

/// The scenarios' epoch: 2027-01-15T08:00:00Z.
pub(crate) fn t0() -> DateTime<Utc> {
    from_micros(1_800_000_000_000_000).unwrap()
}

pub(crate) fn secs(s: i64) -> DateTime<Utc> {
    t0() + TimeDelta::seconds(s)
}

fn us(t: DateTime<Utc>) -> i64 {
    t.timestamp_micros()
}

pub(crate) fn name(s: &str) -> JobName {
    JobName::new(s).unwrap()
}

pub(crate) fn job(n: &str, triggers: &[(&str, &str)]) -> JobDefinition {
    let mut def = JobDefinition::new(name(n), JobTypeKey::new("test::Job").unwrap());
    for (trigger, schedule) in triggers {
        def =
            def.with_trigger(JobTriggerDefinition::new(TriggerName::new(*trigger).unwrap(), schedule.parse().unwrap()));
    }
    def
}

pub(crate) fn request<'a>(
    node: &'a str,
    now: DateTime<Utc>,
    max: usize,
    known: &'a BTreeSet<Uuid>,
) -> AcquireRequest<'a> {
    AcquireRequest {
        node,
        now,
        max,
        misfire_threshold: Duration::from_secs(60),
        steal_grace: Duration::from_secs(1),
        lookahead: Duration::ZERO,
        known_types: None,
        known_runs: known,
        scheduled: true,
        busy_jobs: &NO_JOBS,
        steal: true,
        trust_caught_up: true,
        known_heads: None,
    }
}

/// Acquires as a poller does, knowing the runs already running on `node` (it started
/// them): a retry after an ambiguous commit then returns the runs its earlier attempt took,
/// not those of earlier acquisitions at the same instant.
pub(crate) async fn acquire<K: Kv>(
    store: &KvJobStore<K>,
    node: &str,
    now: DateTime<Utc>,
    max: usize,
) -> Vec<AcquiredRun> {
    let known = running_on(store, node).await;
    store.acquire_due(&request(node, now, max, &known)).await.unwrap()
}

/// The runs `node` is running, by the store's history.
pub(crate) async fn running_on<K: Kv>(store: &KvJobStore<K>, node: &str) -> BTreeSet<Uuid> {
    let query = sundial::job::JobRunQuery {
        node: Some(node.to_owned()),
        states: BTreeSet::from([RunState::Running]),
        limit: 1_000,
        ..sundial::job::JobRunQuery::default()
    };
    store.runs(&query).await.unwrap().into_iter().map(|info| info.run.id).collect()
}

pub(crate) async fn complete<K: Kv>(
    store: &KvJobStore<K>,
    run: Uuid,
    node: &str,
    outcome: RunOutcome,
    at: DateTime<Utc>,
) -> CompletionResult {
    let completion = Completion { run_id: run, node: node.to_owned(), outcome, finished_at: at, holds_trigger: None };
    store.complete_run(&completion).await.unwrap()
}

/// Completes `run` on `node` as a node does: passing back whether its start said it holds
/// its trigger.
pub(crate) async fn complete_as_started<K: Kv>(
    store: &KvJobStore<K>,
    run: &AcquiredRun,
    node: &str,
    outcome: RunOutcome,
    at: DateTime<Utc>,
) -> CompletionResult {
    let completion = Completion {
        run_id: run.run.id,
        node: node.to_owned(),
        outcome,
        finished_at: at,
        holds_trigger: run.holds_trigger,
    };
    store.complete_run(&completion).await.unwrap()
}

/// Starts a manual run of `job` on node `n1` with id `id`, scheduled at second `at`.
pub(crate) async fn manual_run<K: Kv>(store: &KvJobStore<K>, job: &str, id: u128, at: i64) -> Uuid {
    store.begin_manual_run(&name(job), &JsonObject::new(), "n1", Uuid::from_u128(id), secs(at)).await.unwrap().run.id
}

async fn trigger_state<K: Kv>(store: &KvJobStore<K>, job: &str, trigger: &str) -> (TriggerState, Option<i64>) {
    let t = store.trigger_record(job, trigger).await.unwrap().unwrap();
    (t.state, t.next_fire_us)
}

pub(crate) async fn a_cron_fire_is_acquired_once_and_the_trigger_advances<K: Kv>(store: &KvJobStore<K>) {
    let results = store.schedule(&[job("report", &[("every-10s", "cron */10 * * * * *")])], t0()).await;
    assert!(results[0].is_ok(), "{results:?}");
    assert_eq!(trigger_state(store, "report", "every-10s").await, (TriggerState::Waiting, Some(us(secs(10)))));
    assert!(acquire(store, "n1", secs(9), 16).await.is_empty(), "not due yet");
    let runs = acquire(store, "n1", secs(10), 16).await;
    assert_eq!(runs.len(), 1);
    let run = &runs[0];
    assert_eq!((run.run.cause, run.run.attempt, run.run.scheduled_at), (RunCause::Schedule, 1, secs(10)));
    assert_eq!(run.run.trigger.as_ref().unwrap().as_str(), "every-10s");
    assert_eq!(trigger_state(store, "report", "every-10s").await, (TriggerState::Waiting, Some(us(secs(20)))));
    assert!(acquire(store, "n1", secs(10), 16).await.is_empty(), "taken once");
    let stored = store.run_record(run.run.id).await.unwrap().unwrap();
    assert_eq!((stored.state, stored.node.as_str()), (RunState::Running, "n1"));
    // A cron trigger moves on without its run (unknown to a run adopted after an ambiguous
    // commit, never claimed wrongly).
    assert_ne!(run.holds_trigger, Some(true));
    // Told so, the completion leaves the trigger alone (it does not even read it).
    let done = complete_as_started(store, run, "n1", RunOutcome::Succeeded, secs(11)).await;
    assert!(done.recorded);
    assert_eq!(store.run_record(run.run.id).await.unwrap().unwrap().state, RunState::Succeeded);
    assert_eq!(trigger_state(store, "report", "every-10s").await, (TriggerState::Waiting, Some(us(secs(20)))));
}

pub(crate) async fn misfire_policies_at_acquisition<K: Kv>(store: &KvJobStore<K>) {
    let mut def = job("m", &[]);
    for (trigger, policy) in
        [("once", MisfirePolicy::RunOnce), ("skip", MisfirePolicy::Skip), ("all", MisfirePolicy::RunAll)]
    {
        def = def.with_trigger(
            JobTriggerDefinition::new(TriggerName::new(trigger).unwrap(), "cron 0 * * * * *".parse().unwrap())
                .with_misfire(policy),
        );
    }
    def.allow_concurrent = true;
    store.schedule(&[def], t0()).await;
    // Due at 60 s; taken at 60 + 150 s: a misfire (threshold 60 s).
    let now = secs(210);
    let runs = acquire(store, "n1", now, 16).await;
    let by_trigger: BTreeMap<String, DateTime<Utc>> =
        runs.iter().map(|r| (r.run.trigger.as_ref().unwrap().to_string(), r.run.scheduled_at)).collect();
    assert_eq!(by_trigger.get("once"), Some(&now), "RunOnce runs now, scheduled now");
    assert_eq!(by_trigger.get("all"), Some(&secs(60)), "RunAll runs the missed time");
    assert!(!by_trigger.contains_key("skip"));
    assert_eq!(trigger_state(store, "m", "once").await.1, Some(us(secs(240))), "next from now");
    assert_eq!(trigger_state(store, "m", "skip").await.1, Some(us(secs(240))), "next from now");
    assert_eq!(trigger_state(store, "m", "all").await.1, Some(us(secs(120))), "next missed time");
    // RunAll catches up one missed fire per acquisition, each saying more is due (so the
    // caller acquires again at once) until the trigger's next fire is not due yet. An
    // acquisition retried after an ambiguous commit cannot tell, and says more may be due:
    // the next one then says what is.
    let mut caught_up = Vec::new();
    let mut said_more = Vec::new();
    while said_more.last() != Some(&false) && said_more.len() < 8 {
        let known = running_on(store, "n1").await;
        let taken = store.acquire_with_outlook(&request("n1", now, 16, &known), Duration::ZERO, 1).await.unwrap();
        caught_up.extend(taken.runs.iter().map(|r| r.run.scheduled_at));
        said_more.push(taken.more);
    }
    assert_eq!(said_more.first(), Some(&true), "another missed fire is due: {said_more:?}");
    assert_eq!(said_more.last(), Some(&false), "{said_more:?}");
    assert_eq!(caught_up, vec![secs(120), secs(180)]);
    assert!(acquire(store, "n1", now, 16).await.is_empty());
}

pub(crate) async fn a_non_concurrent_job_blocks_and_unblocks<K: Kv>(store: &KvJobStore<K>) {
    store.schedule(&[job("serial", &[("a", "cron * * * * * *"), ("b", "cron */2 * * * * *")])], t0()).await;
    let first = acquire(store, "n1", secs(2), 16).await;
    assert_eq!(first.len(), 1, "one slot");
    assert!(first[0].exclusive);
    let other = if first[0].run.trigger.as_ref().unwrap().as_str() == "a" { "b" } else { "a" };
    assert_eq!(trigger_state(store, "serial", other).await.0, TriggerState::Blocked);
    assert!(acquire(store, "n2", secs(3), 16).await.is_empty(), "still blocked while running");
    assert_eq!(
        store
            .begin_manual_run(&name("serial"), &JsonObject::new(), "n2", Uuid::from_u128(9), secs(3))
            .await
            .unwrap_err()
            .to_string(),
        "SCHEDULING_CONFLICT_001: job is running and does not allow concurrent runs: 'serial'"
    );
    complete(store, first[0].run.id, "n1", RunOutcome::Succeeded, secs(4)).await;
    assert_eq!(trigger_state(store, "serial", other).await.0, TriggerState::Waiting, "unblocked by the completion");
    let next = acquire(store, "n2", secs(4), 16).await;
    assert_eq!(next.len(), 1);
}

pub(crate) async fn an_interval_trigger_waits_for_its_run_then_one_interval<K: Kv>(store: &KvJobStore<K>) {
    store.schedule(&[job("poll", &[("every", "every 00:00:10 x2")])], t0()).await;
    assert_eq!(trigger_state(store, "poll", "every").await, (TriggerState::Waiting, Some(us(secs(10)))));
    let runs = acquire(store, "n1", secs(10), 16).await;
    assert_eq!(runs.len(), 1);
    assert_ne!(runs[0].holds_trigger, Some(false), "the trigger waits for its run");
    assert_eq!(trigger_state(store, "poll", "every").await, (TriggerState::Acquired, None));
    // Never blocked by its own run, never fired twice while it runs.
    assert!(acquire(store, "n1", secs(30), 16).await.is_empty());
    complete(store, runs[0].run.id, "n1", RunOutcome::Succeeded, secs(25)).await;
    assert_eq!(trigger_state(store, "poll", "every").await, (TriggerState::Waiting, Some(us(secs(35)))));
    // The same with what the acquisition said (the first completion above did not know).
    let second = acquire(store, "n1", secs(35), 16).await;
    complete_as_started(store, &second[0], "n1", RunOutcome::Succeeded, secs(36)).await;
    assert_eq!(trigger_state(store, "poll", "every").await.0, TriggerState::Complete, "repeat count used up");
}

pub(crate) async fn failed_runs_retry_per_policy_as_one_shot_triggers<K: Kv>(store: &KvJobStore<K>) {
    let def = job("flaky", &[("at", "once 2027-01-15T08:00:10Z")])
        .with_retry(RetryPolicy::exponential(2, Duration::from_secs(5), None).unwrap());
    store.schedule(&[def], t0()).await;
    let due: DateTime<Utc> = "2027-01-15T08:00:10Z".parse().unwrap();
    let first = acquire(store, "n1", due, 16).await.remove(0);
    let failure = RunOutcome::Failed { code: Some("SCHEDULING_TIMEOUT_001".into()), message: "timed out".into() };
    let done = complete(store, first.run.id, "n1", failure.clone(), due).await;
    let retry_name = done.retry_trigger.expect("a retry trigger");
    assert!(retry_name.starts_with("retry-"));
    assert!(acquire(store, "n1", due + TimeDelta::seconds(4), 16).await.is_empty(), "retry 1 waits 5 s");
    let second = acquire(store, "n1", due + TimeDelta::seconds(5), 16).await.remove(0);
    assert_eq!((second.run.cause, second.run.attempt, second.run.retry_of), (RunCause::Retry, 2, Some(first.run.id)));
    let done = complete(store, second.run.id, "n1", failure.clone(), due + TimeDelta::seconds(5)).await;
    assert!(done.retry_trigger.is_some());
    let third = acquire(store, "n1", due + TimeDelta::seconds(15), 16).await.remove(0);
    assert_eq!((third.run.attempt, third.run.retry_of), (3, Some(first.run.id)), "retry 2 waits 10 s, chain kept");
    let done = complete(store, third.run.id, "n1", failure, due + TimeDelta::seconds(15)).await;
    assert_eq!(done.retry_trigger, None, "max_retries reached");
    // Canceled runs never retry.
    let fourth =
        store.begin_manual_run(&name("flaky"), &JsonObject::new(), "n1", Uuid::from_u128(77), due).await.unwrap();
    let done = complete(store, fourth.run.id, "n1", RunOutcome::Canceled { message: "stop".into() }, due).await;
    assert_eq!((done.state, done.retry_trigger), (RunState::Canceled, None));
}

pub(crate) async fn enqueue_and_manual_runs<K: Kv>(store: &KvJobStore<K>) {
    let mut def = job("adhoc", &[]);
    def.data.insert("base".into(), 1.into());
    def.data.insert("over".into(), "job".into());
    store.schedule(&[def], t0()).await;
    let mut data = JsonObject::new();
    data.insert("over".into(), "request".into());
    let names = store.enqueue(&[(name("adhoc"), data.clone()), (name("missing"), JsonObject::new())], secs(1)).await;
    let trigger = names[0].as_ref().unwrap().clone();
    assert!(trigger.as_str().starts_with("manual-"));
    assert_eq!(names[1].as_ref().unwrap_err().code(), "SCHEDULING_NOTFOUND_001");
    let runs = acquire(store, "n2", secs(1), 16).await;
    assert_eq!(runs.len(), 1);
    assert_eq!(runs[0].run.cause, RunCause::Manual);
    assert_eq!(serde_json::Value::Object(runs[0].run.data.clone()), serde_json::json!({"base": 1, "over": "request"}));
    assert!(store.trigger_record("adhoc", trigger.as_str()).await.unwrap().is_none(), "one-shot trigger consumed");
    complete(store, runs[0].run.id, "n2", RunOutcome::Succeeded, secs(2)).await;
    let manual = store.begin_manual_run(&name("adhoc"), &data, "n1", Uuid::from_u128(5), secs(2)).await.unwrap();
    assert_eq!((manual.run.cause, manual.run.trigger.clone()), (RunCause::Manual, None));
    assert_eq!(
        store.begin_manual_run(&name("nope"), &data, "n1", Uuid::from_u128(6), secs(2)).await.unwrap_err().to_string(),
        "SCHEDULING_NOTFOUND_001: job not registered: 'nope'"
    );
}

pub(crate) async fn pause_and_resume_jobs_and_triggers<K: Kv>(store: &KvJobStore<K>) {
    store.schedule(&[job("p", &[("a", "cron 0 * * * * *"), ("b", "cron 0 * * * * *")])], t0()).await;
    assert!(store.set_jobs_paused(&[name("p")], true).await[0].is_ok());
    assert_eq!(trigger_state(store, "p", "a").await.0, TriggerState::Paused);
    assert!(acquire(store, "n1", secs(60), 16).await.is_empty());
    let key = TriggerKey::new(name("p"), TriggerName::new("b").unwrap());
    store.set_triggers_paused(std::slice::from_ref(&key), true).await;
    store.set_jobs_paused(&[name("p")], false).await;
    assert_eq!(trigger_state(store, "p", "a").await.0, TriggerState::Waiting);
    assert_eq!(trigger_state(store, "p", "b").await.0, TriggerState::Paused, "individually paused");
    // Resumed after a long pause: the missed fire follows the misfire policy (RunOnce).
    let runs = acquire(store, "n1", secs(600), 16).await;
    assert_eq!(runs.len(), 1);
    assert_eq!(runs[0].run.scheduled_at, secs(600));
    let missing = TriggerKey::new(name("p"), TriggerName::new("zz").unwrap());
    assert_eq!(
        store.set_triggers_paused(&[missing], true).await[0].as_ref().unwrap_err().code(),
        "SCHEDULING_NOTFOUND_003"
    );
    assert_eq!(
        store.set_jobs_paused(&[name("zz")], true).await[0].as_ref().unwrap_err().code(),
        "SCHEDULING_NOTFOUND_001"
    );
}

pub(crate) async fn unknown_job_types_put_the_trigger_in_error<K: Kv>(store: &KvJobStore<K>) {
    store.schedule(&[job("typed", &[("t", "cron * * * * * *")])], t0()).await;
    let known: BTreeSet<String> = ["other::Job".to_owned()].into();
    let none = BTreeSet::new();
    let mut req = request("n1", secs(1), 16, &none);
    req.known_types = Some(&known);
    assert!(store.acquire_due(&req).await.unwrap().is_empty());
    let trigger = store.trigger_record("typed", "t").await.unwrap().unwrap();
    assert_eq!(trigger.state, TriggerState::Error);
    assert!(trigger.error.unwrap().contains("'test::Job' is not registered on node 'n1'"));
}

pub(crate) async fn schedule_replaces_and_unschedule_deletes<K: Kv>(store: &KvJobStore<K>) {
    store.schedule(&[job("r", &[("keep", "cron 0 0 * * * *"), ("drop", "cron 0 0 * * * *")])], t0()).await;
    let kept_before = store.trigger_record("r", "keep").await.unwrap().unwrap();
    store
        .schedule(
            &[job("r", &[("keep", "cron 0 0 * * * *"), ("new", "every 00:01:00")])],
            t0() + TimeDelta::seconds(30),
        )
        .await;
    assert!(store.trigger_record("r", "drop").await.unwrap().is_none());
    assert_eq!(store.trigger_record("r", "keep").await.unwrap().unwrap().uid, kept_before.uid, "progress kept");
    assert_eq!(trigger_state(store, "r", "new").await.1, Some(us(secs(90))));
    let record = store.job_record("r").await.unwrap().unwrap();
    assert_eq!((record.origin, record.revision), (sundial::job::JobOrigin::Runtime, 2));
    let bad = job("bad", &[("t", "manual")]);
    assert_eq!(store.schedule(&[bad], t0()).await[0].as_ref().unwrap_err().code(), "SCHEDULING_VALIDATION_001");
    let with_calendar = job("cal", &[("t", "cron 0 0 * * * * calendar=holidays")]);
    assert_eq!(
        store.schedule(&[with_calendar], t0()).await[0].as_ref().unwrap_err().code(),
        "SCHEDULING_VALIDATION_001"
    );
    assert!(store.unschedule(&[name("r")]).await[0].is_ok());
    assert!(store.job_record("r").await.unwrap().is_none());
    assert!(store.trigger_record("r", "keep").await.unwrap().is_none());
    assert_eq!(store.unschedule(&[name("r")]).await[0].as_ref().unwrap_err().code(), "SCHEDULING_NOTFOUND_001");
    assert!(acquire(store, "n1", secs(100_000), 16).await.is_empty(), "no orphaned due entries");
}

/// The store must be built with `max_runs: Some(3)`.
pub(crate) async fn history_cap_evicts_finished_runs_and_refuses_when_all_run<K: Kv>(store: &KvJobStore<K>) {
    let mut def = job("capped", &[]);
    def.allow_concurrent = true;
    store.schedule(&[def], t0()).await;
    let mut ids = Vec::new();
    for i in 0..3u128 {
        ids.push(
            store
                .begin_manual_run(&name("capped"), &JsonObject::new(), "n1", Uuid::from_u128(100 + i), secs(i as i64))
                .await
                .unwrap()
                .run
                .id,
        );
    }
    let full = store
        .begin_manual_run(&name("capped"), &JsonObject::new(), "n1", Uuid::from_u128(200), secs(5))
        .await
        .unwrap_err();
    assert_eq!(sundial::SchedulingError::from(full).code(), "SCHEDULING_UNAVAILABLE_004");
    complete(store, ids[1], "n1", RunOutcome::Succeeded, secs(6)).await;
    store.begin_manual_run(&name("capped"), &JsonObject::new(), "n1", Uuid::from_u128(201), secs(7)).await.unwrap();
    assert!(store.run_record(ids[1]).await.unwrap().is_none(), "the finished run was evicted");
    assert!(store.run_record(ids[0]).await.unwrap().is_some(), "running runs are kept");
}

/// Eight pollers race for the same due set: each fire is acquired exactly once. Returns
/// how many runs the pollers got (at least four of the five cycles' worth even when the
/// store injects faults and some acquisitions give up).
pub(crate) async fn concurrent_pollers_take_each_fire_exactly_once<K: Kv>(store: &KvJobStore<K>) -> usize {
    let mut defs = Vec::new();
    for i in 0..120 {
        let mut def = job(&format!("j{i}"), &[("t", "cron * * * * * *")]);
        def.allow_concurrent = i % 3 != 0;
        defs.push(def);
    }
    assert!(store.schedule(&defs, t0()).await.iter().all(Result::is_ok));
    let mut all_runs: Vec<AcquiredRun> = Vec::new();
    // Five cycles: fires at 1..=5 s, each taken by whichever of 8 pollers gets it.
    for second in 1..=5 {
        let now = secs(second);
        let mut pollers = Vec::new();
        for p in 0..8 {
            let store = store.clone();
            let node = format!("node-{p}");
            pollers.push(tokio::spawn(async move {
                let known = BTreeSet::new();
                let mut req = request(&node, now, 64, &known);
                req.steal_grace = Duration::ZERO;
                store
                    .acquire_due(&req)
                    .await
                    .map(|runs| runs.into_iter().map(|r| (node.clone(), r)).collect::<Vec<_>>())
            }));
        }
        let mut this_cycle = Vec::new();
        for poller in pollers {
            // A poller may give up after its retries; the fires stay for others.
            if let Ok(runs) = poller.await.unwrap() {
                this_cycle.extend(runs);
            }
        }
        // A non-concurrent job never holds two slots: at most one run of it per cycle
        // (its previous run was completed before this cycle).
        let mut exclusive_runs: BTreeMap<String, usize> = BTreeMap::new();
        for (_, run) in this_cycle.iter().filter(|(_, r)| r.exclusive) {
            *exclusive_runs.entry(run.run.job.to_string()).or_default() += 1;
        }
        assert!(exclusive_runs.values().all(|n| *n == 1), "two runs of a non-concurrent job at once");
        for (node, run) in &this_cycle {
            complete(store, run.run.id, node, RunOutcome::Succeeded, now).await;
        }
        all_runs.extend(this_cycle.into_iter().map(|(_, r)| r));
    }
    let mut per_fire: BTreeMap<(String, DateTime<Utc>), usize> = BTreeMap::new();
    for run in &all_runs {
        *per_fire.entry((run.run.job.to_string(), run.run.scheduled_at)).or_default() += 1;
    }
    assert!(per_fire.values().all(|n| *n == 1), "a fire ran twice");
    assert!(all_runs.len() >= 120 * 4, "only {} runs", all_runs.len());
    all_runs.len()
}

/// Checks the durable effects (run states, one recovery) and the steps' lists, which say
/// what was done also when a step is retried after an ambiguous commit.
pub(crate) async fn lost_nodes_are_reaped_and_their_runs_recovered_exactly_once<K: Kv>(store: &KvJobStore<K>) {
    // Concurrent, so the recovery is not blocked behind the job's own next fire.
    let mut recovering = job("recover", &[("t", "cron * * * * * *")]);
    recovering.requests_recovery = true;
    recovering.allow_concurrent = true;
    let mut plain = job("plain", &[("t", "cron * * * * * *")]);
    plain.allow_concurrent = true;
    store.schedule(&[recovering, plain], t0()).await;
    let first = store.heartbeat("dying", secs(0), None, false).await.unwrap();
    let runs = acquire(store, "dying", secs(1), 16).await;
    assert_eq!(runs.len(), 2);
    // A heartbeat after the observation: no declaration.
    store.heartbeat("dying", secs(1), Some(first.times_declared_lost), false).await.unwrap();
    assert!(!store.reap_node("dying", first.seq, secs(2), 100, None).await.unwrap().declared);
    let observed = store.nodes().await.unwrap().into_iter().find(|n| n.node == "dying").unwrap();
    assert!(observed.alive);
    let mut step = store.reap_node("dying", observed.heartbeat_seq, secs(100), 100, None).await.unwrap();
    assert!(step.declared);
    let (mut lost, mut recoveries) = (step.lost_runs.clone(), step.recovery_triggers.clone());
    while step.more {
        step = store.reap_node("dying", observed.heartbeat_seq, secs(100), 100, None).await.unwrap();
        lost.extend(step.lost_runs.iter().copied());
        recoveries.extend(step.recovery_triggers.iter().cloned());
    }
    lost.sort();
    let mut expected: Vec<Uuid> = runs.iter().map(|r| r.run.id).collect();
    expected.sort();
    assert_eq!(lost, expected, "each run reported lost once");
    let recovering_run = runs.iter().find(|r| r.run.job.as_str() == "recover").unwrap().run.id;
    assert_eq!(recoveries, [format!("recovery-{}", recovering_run.simple())]);
    // Reaping again recovers nothing twice.
    let again = store.reap_node("dying", observed.heartbeat_seq, secs(100), 100, None).await.unwrap();
    assert!(again.lost_runs.is_empty() && again.recovery_triggers.is_empty());
    for run in &runs {
        assert_eq!(store.run_record(run.run.id).await.unwrap().unwrap().state, RunState::Lost);
    }
    assert!(
        store.nodes().await.unwrap().iter().all(|n| n.node != "dying"),
        "with no run left, the lost node's record is deleted"
    );
    // Declared lost (its record gone), the node takes nothing and records no local run (the leader no longer
    // watches it, so its runs would never be reaped) until it heartbeats again.
    assert!(acquire(store, "dying", secs(100), 16).await.is_empty());
    let mut local = runs[0].run.clone();
    local.id = Uuid::from_u128(0x10ca1);
    let refused = store.begin_local_run(&local, "dying", secs(100)).await.unwrap_err();
    assert_eq!(sundial::SchedulingError::from(refused).code(), "SCHEDULING_UNAVAILABLE_001");
    assert!(store.run_record(local.id).await.unwrap().is_none(), "nothing recorded");
    let (plain, data) = (name("plain"), Default::default());
    let manual = store.begin_manual_run(&plain, &data, "dying", Uuid::from_u128(0xa11), secs(100));
    let refused = manual.await.unwrap_err();
    assert_eq!(sundial::SchedulingError::from(refused).code(), "SCHEDULING_UNAVAILABLE_001", "no manual run either");
    // A late completion from the lost node does not overwrite history.
    let late = complete(store, runs[0].run.id, "dying", RunOutcome::Succeeded, secs(101)).await;
    assert_eq!((late.state, late.recorded), (RunState::Lost, false));
    // The recovery runs once, elsewhere, with cause Recovery.
    let recovered: Vec<_> = acquire(store, "healthy", secs(101), 64)
        .await
        .into_iter()
        .filter(|r| r.run.cause == RunCause::Recovery)
        .collect();
    assert_eq!(recovered.len(), 1);
    assert_eq!(recovered[0].run.job.as_str(), "recover");
    let recovered_from = runs.iter().find(|r| r.run.job.as_str() == "recover").unwrap();
    assert_eq!(recovered[0].run.data, recovered_from.run.data);
    assert!(acquire(store, "healthy", secs(101), 64).await.iter().all(|r| r.run.cause != RunCause::Recovery));
    // The node comes back and learns it was declared lost, even if this heartbeat's own
    // commit is ambiguous and retried.
    let back = store.heartbeat("dying", secs(102), Some(first.times_declared_lost), false).await.unwrap();
    assert!(back.was_declared_lost);
    assert!(back.times_declared_lost > first.times_declared_lost);
    assert!(!acquire(store, "dying", secs(103), 16).await.is_empty(), "alive again, it takes fires");
    assert!(store.nodes().await.unwrap().iter().any(|n| n.node == "dying" && n.alive), "registered again");
}

pub(crate) async fn records_of_stopped_nodes_are_deleted_once_reaped<K: Kv>(store: &KvJobStore<K>) {
    let mut abandoning = job("abandoning", &[("t", "cron * * * * * *")]);
    abandoning.allow_concurrent = true;
    store.schedule(&[abandoning], t0()).await;
    // A node stops gracefully with a run still `Running` (it ignored cancellation).
    let beat = store.heartbeat("leaving", secs(0), None, false).await.unwrap();
    let runs = acquire(store, "leaving", secs(1), 16).await;
    assert_eq!(runs.len(), 1);
    store.deregister_node("leaving").await.unwrap();
    let stopped = store.nodes().await.unwrap().into_iter().find(|n| n.node == "leaving").unwrap();
    assert!(!stopped.alive);
    // Another node asks it to cancel; the request outlives nothing.
    store.request_cancel(&[runs[0].run.id]).await[0].as_ref().unwrap();
    let step = store.reap_node("leaving", stopped.heartbeat_seq, secs(5), 100, None).await.unwrap();
    assert_eq!(step.lost_runs, vec![runs[0].run.id]);
    assert!(!step.more);
    assert!(store.nodes().await.unwrap().iter().all(|n| n.node != "leaving"), "record deleted with its last run");
    assert!(store.cancel_requests("leaving").await.unwrap().is_empty(), "and its cancel requests");
    // A node that never heartbeated through this store (a store of its own) may still run
    // without a record; this one did, so it may not until it heartbeats again.
    assert!(acquire(store, "leaving", secs(6), 16).await.is_empty());
    assert!(!acquire(store, "own-store", secs(6), 16).await.is_empty());
    // Started again under the same id (a new process: `None`), it simply registers.
    let fresh = store.heartbeat("leaving", secs(7), None, false).await.unwrap();
    assert!(!fresh.was_declared_lost);
    assert!(fresh.seq > 0 && beat.seq > 0);
}

pub(crate) async fn cancel_requests_reach_the_running_node_until_the_run_ends<K: Kv>(store: &KvJobStore<K>) {
    store.schedule(&[job("c", &[("t", "cron * * * * * *")])], t0()).await;
    let run = acquire(store, "n7", secs(1), 16).await.remove(0);
    let results = store.request_cancel(&[run.run.id, Uuid::from_u128(1)]).await;
    assert_eq!(results[0].as_ref().unwrap(), "n7");
    assert_eq!(results[1].as_ref().unwrap_err().code(), "SCHEDULING_NOTFOUND_004");
    assert_eq!(store.cancel_requests("n7").await.unwrap(), vec![run.run.id]);
    assert_eq!(store.cancel_requests("n7").await.unwrap(), vec![run.run.id], "read-only until the run ends");
    let beat = store.heartbeat("n7", secs(1), None, false).await.unwrap();
    assert_eq!(beat.cancel_requests, vec![run.run.id], "a heartbeat brings the node its requests");
    complete(store, run.run.id, "n7", RunOutcome::Canceled { message: "requested".into() }, secs(2)).await;
    assert!(store.cancel_requests("n7").await.unwrap().is_empty());
    assert!(store
        .heartbeat("n7", secs(2), Some(beat.times_declared_lost), false)
        .await
        .unwrap()
        .cancel_requests
        .is_empty());
    assert_eq!(store.request_cancel(&[run.run.id]).await[0].as_ref().unwrap_err().code(), "SCHEDULING_NOTFOUND_004");
    // In one batch of completions, each clears its own request and no other run's.
    let mut many = job("many", &[("t", "cron * * * * * *")]);
    many.allow_concurrent = true;
    store.schedule(&[many], secs(2)).await;
    let runs: Vec<Uuid> = acquire(store, "n7", secs(3), 16).await.iter().map(|r| r.run.id).collect();
    let more: Vec<Uuid> = acquire(store, "n7", secs(4), 16).await.iter().map(|r| r.run.id).collect();
    let last: Vec<Uuid> = acquire(store, "n7", secs(5), 16).await.iter().map(|r| r.run.id).collect();
    let (a, b, c) = (runs[0], more[0], last[0]);
    assert!(store.request_cancel(&[a, c]).await.iter().all(Result::is_ok));
    let ended = |id| Completion {
        run_id: id,
        node: "n7".into(),
        outcome: RunOutcome::Succeeded,
        finished_at: secs(6),
        holds_trigger: None,
    };
    assert!(store.complete_runs(&[ended(a), ended(b)]).await.iter().all(Result::is_ok));
    assert_eq!(store.cancel_requests("n7").await.unwrap(), vec![c], "c still runs: its request stays");
    assert!(store.complete_runs(&[ended(c)]).await.iter().all(Result::is_ok));
    assert!(store.cancel_requests("n7").await.unwrap().is_empty());
}

pub(crate) async fn history_queries_filter_page_count_and_expire<K: Kv>(store: &KvJobStore<K>) {
    let mut a = job("a", &[("t", "cron * * * * * *")]);
    a.allow_concurrent = true;
    let mut b = job("b", &[("t", "cron * * * * * *")]);
    b.allow_concurrent = true;
    store.schedule(&[a, b], t0()).await;
    for second in 1..=10 {
        for run in acquire(store, if second % 2 == 0 { "even" } else { "odd" }, secs(second), 16).await {
            let outcome = if second % 3 == 0 {
                RunOutcome::Failed { code: Some("E".into()), message: "boom".into() }
            } else {
                RunOutcome::Succeeded
            };
            let node = if second % 2 == 0 { "even" } else { "odd" };
            complete(store, run.run.id, node, outcome, secs(second) + TimeDelta::milliseconds(500)).await;
        }
    }
    let all = sundial::job::JobRunQuery::default();
    assert_eq!(store.count_runs(&all).await.unwrap(), 20);
    let page = store.runs(&sundial::job::JobRunQuery { limit: 3, ..all.clone() }).await.unwrap();
    assert_eq!(page.len(), 3);
    assert!(page.windows(2).all(|p| p[0].run.scheduled_at >= p[1].run.scheduled_at), "newest first");
    assert_eq!(page[0].run.scheduled_at, secs(10));
    let only_a = sundial::job::JobRunQuery { job: Some(name("a")), ..all.clone() };
    assert_eq!(store.count_runs(&only_a).await.unwrap(), 10);
    let failed = sundial::job::JobRunQuery { states: [RunState::Failed].into(), ..all.clone() };
    assert_eq!(store.count_runs(&failed).await.unwrap(), 6);
    let errors = sundial::job::JobRunQuery { has_error: Some(true), node: Some("even".into()), ..all.clone() };
    assert_eq!(store.count_runs(&errors).await.unwrap(), 2, "seconds 6 (both jobs) only");
    let window =
        sundial::job::JobRunQuery { from: Some(secs(3)), to: Some(secs(5)), job: Some(name("b")), ..all.clone() };
    let in_window = store.runs(&window).await.unwrap();
    assert_eq!(in_window.iter().map(|r| r.run.scheduled_at).collect::<Vec<_>>(), vec![secs(4), secs(3)]);
    let skipped = store.runs(&sundial::job::JobRunQuery { skip: 18, ..all.clone() }).await.unwrap();
    assert_eq!(skipped.len(), 2);
    for bad in [
        sundial::job::JobRunQuery { skip: -1, ..all.clone() },
        sundial::job::JobRunQuery { limit: 0, ..all.clone() },
        sundial::job::JobRunQuery { limit: 1001, ..all.clone() },
    ] {
        let err = sundial::SchedulingError::from(store.runs(&bad).await.unwrap_err());
        assert_eq!((err.code(), err.http_status()), ("SCHEDULING_VALIDATION_002", 400));
    }
    // Retention: runs that ended more than 5 s before second 11 go.
    let deleted = store.apply_retention(secs(11), Some(Duration::from_secs(5)), None).await.unwrap();
    assert_eq!(deleted, 10, "seconds 1–5 ended at x.5 < 6");
    assert_eq!(store.count_runs(&all).await.unwrap(), 10);
    assert_eq!(store.apply_retention(secs(11), None, None).await.unwrap(), 0, "zero retention keeps everything");
}

/// Running runs are listed from the running indexes and finished ones from the history
/// index: queries see both, newest scheduled first, each once, with every filter.
pub(crate) async fn history_queries_merge_running_runs_by_scheduled_time<K: Kv>(store: &KvJobStore<K>) {
    let mut a = job("a", &[("t", "cron * * * * * *")]);
    a.allow_concurrent = true;
    let mut b = job("b", &[("t", "cron * * * * * *")]);
    b.allow_concurrent = true;
    store.schedule(&[a, b], t0()).await;
    let node = |second: i64| if second % 2 == 0 { "even" } else { "odd" };
    // Seconds 2 and 5 keep running: running runs sit between finished ones, newest and
    // oldest finished on either side.
    let mut running = Vec::new();
    for second in 1..=6 {
        for run in acquire(store, node(second), secs(second), 16).await {
            if second == 2 || second == 5 {
                running.push(run.run.id);
            } else {
                complete(store, run.run.id, node(second), RunOutcome::Succeeded, secs(second)).await;
            }
        }
    }
    let all = sundial::job::JobRunQuery::default();
    let seen = |runs: &[sundial::job::JobRunInfo]| {
        runs.iter().map(|r| (r.run.scheduled_at.timestamp() - t0().timestamp(), r.state)).collect::<Vec<_>>()
    };
    let (done, live) = (RunState::Succeeded, RunState::Running);
    let listed = store.runs(&all).await.unwrap();
    assert_eq!(
        seen(&listed),
        [(6, done), (6, done), (5, live), (5, live), (4, done), (4, done)]
            .into_iter()
            .chain([(3, done), (3, done), (2, live), (2, live), (1, done), (1, done)])
            .collect::<Vec<_>>()
    );
    let mut ids: Vec<Uuid> = listed.iter().map(|r| r.run.id).collect();
    ids.dedup();
    assert_eq!(ids.len(), 12, "each run once");
    assert_eq!(store.count_runs(&all).await.unwrap(), 12);
    let paged = store.runs(&sundial::job::JobRunQuery { skip: 3, limit: 4, ..all.clone() }).await.unwrap();
    assert_eq!(seen(&paged), [(5, live), (4, done), (4, done), (3, done)], "pages cross running and finished runs");
    let only_running = sundial::job::JobRunQuery { states: [RunState::Running].into(), ..all.clone() };
    assert_eq!(seen(&store.runs(&only_running).await.unwrap()), [(5, live), (5, live), (2, live), (2, live)]);
    let even_running = sundial::job::JobRunQuery { node: Some("even".into()), ..only_running.clone() };
    assert_eq!(store.count_runs(&even_running).await.unwrap(), 2);
    let of_a = sundial::job::JobRunQuery { job: Some(name("a")), ..all.clone() };
    assert_eq!(
        seen(&store.runs(&of_a).await.unwrap()),
        [(6, done), (5, live), (4, done), (3, done), (2, live), (1, done)]
    );
    let window = sundial::job::JobRunQuery { from: Some(secs(2)), to: Some(secs(5)), ..of_a.clone() };
    assert_eq!(seen(&store.runs(&window).await.unwrap()), [(4, done), (3, done), (2, live)], "from inclusive, to not");
    let erring = sundial::job::JobRunQuery { has_error: Some(true), ..all.clone() };
    assert_eq!(store.count_runs(&erring).await.unwrap(), 0);
    let t_only = sundial::job::JobRunQuery { trigger: Some(TriggerName::new("t").unwrap()), ..only_running.clone() };
    assert_eq!(store.count_runs(&t_only).await.unwrap(), 4);
    // A run that ends moves from the running index to the history, once.
    let failed = RunOutcome::Failed { code: Some("E".into()), message: "boom".into() };
    complete(store, running[0], "even", failed, secs(7)).await;
    assert_eq!(store.count_runs(&all).await.unwrap(), 12);
    assert_eq!(store.count_runs(&only_running).await.unwrap(), 3);
    assert_eq!(store.count_runs(&erring).await.unwrap(), 1);
    let status = store.status(&name("a")).await.unwrap().unwrap();
    assert_eq!(status.last_finished.map(|r| r.run.scheduled_at), Some(secs(6)));
}

/// A history scan reads at most `SCAN_BUDGET` index entries per transaction: the running
/// runs listed with its first page are merged in on every page, and after the last.
pub(crate) async fn a_history_scan_over_several_transactions_merges_running_runs_on_every_page<K: Kv>(
    store: &KvJobStore<K>,
) {
    let mut def = job("many", &[]);
    def.allow_concurrent = true;
    store.schedule(&[def], t0()).await;
    let finished = sundial::store::SCAN_BUDGET as i64 + 50;
    let begin = |id: u128, at: i64| manual_run(store, "many", id, at);
    for at in 1..=finished {
        let id = begin(at as u128, at).await;
        complete(store, id, "n1", RunOutcome::Succeeded, secs(at)).await;
    }
    // Running: newer than all, in the first page, in the second, older than all.
    for (i, at) in [finished + 10, finished - 100, 20, 0].into_iter().enumerate() {
        begin(1_000_000 + i as u128, at).await;
    }
    let all = sundial::job::JobRunQuery::default();
    assert_eq!(store.count_runs(&all).await.unwrap(), finished as u64 + 4);
    let at = |runs: Vec<sundial::job::JobRunInfo>| {
        runs.iter().map(|r| (r.run.scheduled_at.timestamp() - t0().timestamp(), r.state)).collect::<Vec<_>>()
    };
    let (done, live) = (RunState::Succeeded, RunState::Running);
    let newest = store.runs(&sundial::job::JobRunQuery { limit: 3, ..all.clone() }).await.unwrap();
    assert_eq!(at(newest), [(finished + 10, live), (finished, done), (finished - 1, done)]);
    let oldest = store.runs(&sundial::job::JobRunQuery { skip: finished - 20, limit: 1000, ..all.clone() }).await;
    let oldest = at(oldest.unwrap());
    assert_eq!(oldest.len(), 24);
    assert_eq!(oldest[..4], [(22, done), (21, done), (20, live), (20, done)], "same time: by run id, newest first");
    assert_eq!(oldest[oldest.len() - 2..], [(1, done), (0, live)]);
    let running = sundial::job::JobRunQuery { states: [RunState::Running].into(), ..all.clone() };
    assert_eq!(store.count_runs(&running).await.unwrap(), 4);
    let by_job = sundial::job::JobRunQuery { job: Some(name("many")), ..all.clone() };
    assert_eq!(store.count_runs(&by_job).await.unwrap(), finished as u64 + 4);
}

/// Retention deletes the runs that ended before the cutoff, over several batches, and
/// keeps one scheduled earlier that ended later; a run that ended before its scheduled
/// time goes once the cutoff passes that time.
pub(crate) async fn retention_deletes_by_end_time_past_runs_that_ended_later<K: Kv>(store: &KvJobStore<K>) {
    let mut def = job("kept", &[]);
    def.allow_concurrent = true;
    store.schedule(&[def], t0()).await;
    let begin = |id: u128, at: i64| manual_run(store, "kept", id, at);
    let long = begin(1, 0).await;
    let early = begin(2, 600).await;
    let mut short = Vec::new();
    for i in 1..=300 {
        short.push(begin(1000 + i as u128, i).await);
    }
    complete(store, long, "n1", RunOutcome::Succeeded, secs(1000)).await;
    complete(store, early, "n1", RunOutcome::Succeeded, secs(400)).await;
    for (i, id) in short.iter().enumerate() {
        complete(store, *id, "n1", RunOutcome::Succeeded, secs(i as i64 + 2)).await;
    }
    let all = sundial::job::JobRunQuery::default();
    assert_eq!(store.count_runs(&all).await.unwrap(), 302);
    let deleted = store.purge_history(secs(500), None).await.unwrap();
    assert_eq!(deleted, 300, "every short run, past the long one scheduled first and across batches");
    assert!(store.run_record(long).await.unwrap().is_some(), "ended at 1000: within retention");
    assert!(
        store.run_record(early).await.unwrap().is_some(),
        "ended before it was due: kept until the cutoff passes 600"
    );
    assert_eq!(store.purge_history(secs(700), None).await.unwrap(), 1);
    assert!(store.run_record(early).await.unwrap().is_none());
    assert_eq!(store.purge_history(secs(1000), None).await.unwrap(), 0, "ended at the cutoff: not before it");
    assert_eq!(store.purge_history(secs(1001), None).await.unwrap(), 1);
    assert_eq!(store.count_runs(&all).await.unwrap(), 0);
}

pub(crate) async fn status_shows_triggers_running_and_last_result<K: Kv>(store: &KvJobStore<K>) {
    store.schedule(&[job("s", &[("t", "cron */5 * * * * *")])], t0()).await;
    let run = acquire(store, "n1", secs(5), 16).await.remove(0);
    let status = store.status(&name("s")).await.unwrap().unwrap();
    assert_eq!(status.running, 1);
    assert_eq!(status.triggers[0].next_fire, Some(secs(10)));
    assert_eq!(status.triggers[0].previous_fire, Some(secs(5)));
    assert_eq!(status.triggers[0].fire_count, 1);
    complete(store, run.run.id, "n1", RunOutcome::Succeeded, secs(6)).await;
    let status = store.status(&name("s")).await.unwrap().unwrap();
    assert_eq!(status.running, 0);
    assert_eq!(status.last_finished.unwrap().state, RunState::Succeeded);
    assert_eq!(status.definition.triggers[0].schedule.to_string(), "cron */5 * * * * *");
    assert!(store.status(&name("nope")).await.unwrap().is_none());
    assert_eq!(store.statuses().await.unwrap().len(), 1);
}

pub(crate) async fn code_jobs_sync_with_the_fingerprint_rules_and_restore<K: Kv>(store: &KvJobStore<K>) {
    use sundial::store::SyncOutcome;
    let code = job("code", &[("t", "cron 0 * * * * *")]);
    assert_eq!(store.sync_code_job(&code, t0()).await.unwrap(), SyncOutcome::Created);
    assert_eq!(store.sync_code_job(&code, t0()).await.unwrap(), SyncOutcome::Unchanged);
    // Overridden at run time; paused.
    store.schedule(&[job("code", &[("t", "cron 30 * * * * *")])], t0()).await;
    store.set_jobs_paused(&[name("code")], true).await;
    let stored = store.job_record("code").await.unwrap().unwrap();
    assert_eq!(stored.origin, sundial::job::JobOrigin::Overridden);
    // Restart with the same code: the runtime change stays.
    assert_eq!(store.sync_code_job(&code, t0()).await.unwrap(), SyncOutcome::KeptOverride);
    assert_eq!(store.trigger_record("code", "t").await.unwrap().unwrap().schedule, "cron 30 * * * * *");
    // Restart with changed code: written back, paused kept, the caller warned.
    let changed = job("code", &[("t", "cron 15 * * * * *")]);
    assert_eq!(
        store.sync_code_job(&changed, t0()).await.unwrap(),
        SyncOutcome::Rewritten { overwrote_runtime_change: true }
    );
    let stored = store.job_record("code").await.unwrap().unwrap();
    assert_eq!((stored.origin, stored.paused), (sundial::job::JobOrigin::Code, true));
    // Restore after another override.
    store.schedule(&[job("code", &[("t", "cron 45 * * * * *")])], t0()).await;
    store.restore(&changed, t0()).await.unwrap();
    assert_eq!(store.trigger_record("code", "t").await.unwrap().unwrap().schedule, "cron 15 * * * * *");
    assert_eq!(store.job_record("code").await.unwrap().unwrap().origin, sundial::job::JobOrigin::Code);
    // A deleted code job comes back at the next start.
    store.unschedule(&[name("code")]).await;
    assert_eq!(store.sync_code_job(&changed, t0()).await.unwrap(), SyncOutcome::Created);
}

pub(crate) async fn code_jobs_sync_in_batches_each_job_with_its_own_outcome<K: Kv>(store: &KvJobStore<K>) {
    use sundial::store::SyncOutcome;
    // A running non-concurrent cluster job that the code now makes local: refused while
    // its run goes, in the middle of a batch.
    let busy = job("j0040", &[("t", "cron */10 * * * * *")]);
    store.schedule(std::slice::from_ref(&busy), t0()).await;
    let run = acquire(store, "n1", secs(10), 16).await.remove(0);
    let mut defs: Vec<JobDefinition> =
        (0..150).map(|i| job(&format!("j{i:04}"), &[("t", "cron 0 * * * * *")])).collect();
    defs[40].run_on_every_instance = true;
    // An invalid definition: a trigger naming a calendar nobody registered.
    defs[100] = job("j0100", &[("t", "cron 0 * * * * * calendar=nowhere")]);
    let refs: Vec<&JobDefinition> = defs.iter().collect();
    let outcomes = store.sync_code_jobs(&refs, secs(11)).await.unwrap();
    assert_eq!(outcomes.len(), 150, "one outcome per job, in order");
    let code = |o: &Result<SyncOutcome, sundial::store::StoreError>| {
        o.as_ref().map_err(|e| sundial::error::SchedulingError::from(e.clone()).code()).copied()
    };
    assert_eq!(code(&outcomes[40]), Err("SCHEDULING_CONFLICT_001"));
    assert_eq!(code(&outcomes[100]), Err("SCHEDULING_VALIDATION_001"));
    for (i, outcome) in outcomes.iter().enumerate().filter(|(i, _)| ![40, 100].contains(i)) {
        assert_eq!(code(outcome), Ok(SyncOutcome::Created), "job {i}");
    }
    assert!(store.job_record("j0100").await.unwrap().is_none(), "nothing written for the refused one");
    assert!(store.job_record("j0040").await.unwrap().is_some_and(|j| !j.run_on_every_instance), "unchanged");
    assert_eq!(store.statuses().await.unwrap().len(), 149);
    // Again once the run ended, the invalid one left out: the switch goes through, the
    // rest stays.
    complete(store, run.run.id, "n1", RunOutcome::Succeeded, secs(12)).await;
    let refs: Vec<&JobDefinition> = defs.iter().filter(|d| d.name.as_str() != "j0100").collect();
    let outcomes = store.sync_code_jobs(&refs, secs(13)).await.unwrap();
    assert_eq!(code(&outcomes[40]), Ok(SyncOutcome::Rewritten { overwrote_runtime_change: true }));
    assert!(outcomes.iter().enumerate().all(|(i, o)| i == 40 || code(o) == Ok(SyncOutcome::Unchanged)));
    assert!(store.job_record("j0040").await.unwrap().is_some_and(|j| j.run_on_every_instance));
}

pub(crate) async fn local_jobs_stay_out_of_acquisition_but_their_runs_go_to_history<K: Kv>(store: &KvJobStore<K>) {
    let mut local = job("local", &[("t", "cron * * * * * *")]);
    local.run_on_every_instance = true;
    store.schedule(&[local], t0()).await;
    assert!(acquire(store, "n1", secs(5), 16).await.is_empty(), "never acquired through the store");
    let locals = store.local_jobs().await.unwrap();
    assert_eq!(locals.len(), 1);
    assert_eq!(locals[0].definition.name.as_str(), "local");
    let job_run = sundial::job::JobRun {
        id: Uuid::from_u128(42),
        job: name("local"),
        trigger: Some(TriggerName::new("t").unwrap()),
        scheduled_at: secs(5),
        cause: RunCause::Schedule,
        attempt: 1,
        retry_of: None,
        data: JsonObject::new(),
    };
    assert!(store.begin_local_run(&job_run, "n1", secs(5)).await.unwrap());
    assert!(store.begin_local_run(&job_run, "n1", secs(5)).await.unwrap(), "a retry after an ambiguous commit");
    // A run the node reclaimed as lost (it never knew its start committed) never starts.
    let mut unknown = job_run.clone();
    unknown.id = Uuid::from_u128(43);
    assert!(store.begin_local_run(&unknown, "n1", secs(5)).await.unwrap());
    let known = std::collections::BTreeSet::from([job_run.id]);
    let reclaimed = store.reclaim_previous_runs("n1", &known, secs(5), 64).await.unwrap();
    assert_eq!(reclaimed.lost_runs, vec![unknown.id]);
    assert!(!store.begin_local_run(&unknown, "n1", secs(5)).await.unwrap(), "ended: not started again");
    let failure = RunOutcome::Failed { code: Some("E".into()), message: "x".into() };
    let done = complete(store, job_run.id, "n1", failure, secs(6)).await;
    assert_eq!(done.retry_trigger, None, "local jobs retry in process, not in the store");
    assert_eq!(store.count_runs(&sundial::job::JobRunQuery::default()).await.unwrap(), 2);
}

/// `local_jobs_since` answers `None` while nothing a node's local triggers depend on
/// changed, and a fresh listing after each kind of change: a local job defined, a trigger
/// of it paused, the job paused, turned into a cluster job, and deleted. Runs, acquisitions
/// and completions change nothing.
pub(crate) async fn local_jobs_are_reread_only_after_a_change<K: Kv>(store: &KvJobStore<K>) {
    let first = store.local_jobs_since(None).await.unwrap().expect("the first read always lists");
    assert!(first.jobs.is_empty());
    assert_eq!(store.local_jobs_since(Some(first.stamp)).await.unwrap(), None);
    let mut local = job("local", &[("t", "cron * * * * * *")]);
    local.run_on_every_instance = true;
    let mut cluster = job("cluster", &[("t", "cron * * * * * *")]);
    cluster.allow_concurrent = true;
    store.schedule(&[local.clone(), cluster], t0()).await;
    let listed = store.local_jobs_since(Some(first.stamp)).await.unwrap().expect("a local job was defined");
    assert_eq!(listed.jobs.len(), 1);
    let mut stamp = listed.stamp;

    // Cluster work leaves the stamp alone.
    let runs = acquire(store, "n1", secs(5), 16).await;
    assert_eq!(runs.len(), 1);
    complete(store, runs[0].run.id, "n1", RunOutcome::Succeeded, secs(5)).await;
    assert_eq!(store.local_jobs_since(Some(stamp)).await.unwrap(), None, "cluster runs change no local job");

    let check = |what: &str, listing: Option<LocalJobs>, stamp: &mut u64, expect: &dyn Fn(&LocalJobs) -> bool| {
        let listing = listing.unwrap_or_else(|| panic!("{what}: the stamp did not move"));
        assert!(expect(&listing), "{what}: {listing:?}");
        assert!(listing.stamp > *stamp);
        *stamp = listing.stamp;
    };
    let key = TriggerKey::new(name("local"), TriggerName::new("t").unwrap());
    store.set_triggers_paused(std::slice::from_ref(&key), true).await[0].as_ref().unwrap();
    let paused_one = |l: &LocalJobs| l.jobs[0].paused_triggers.len() == 1;
    check("trigger paused", store.local_jobs_since(Some(stamp)).await.unwrap(), &mut stamp, &paused_one);
    store.set_jobs_paused(&[name("local")], true).await[0].as_ref().unwrap();
    check("job paused", store.local_jobs_since(Some(stamp)).await.unwrap(), &mut stamp, &|l| l.jobs[0].paused);
    local.run_on_every_instance = false;
    store.schedule(&[local], t0()).await[0].as_ref().unwrap();
    check("no longer local", store.local_jobs_since(Some(stamp)).await.unwrap(), &mut stamp, &|l| l.jobs.is_empty());
    let mut again = job("local", &[("t", "cron * * * * * *")]);
    again.run_on_every_instance = true;
    store.schedule(&[again], t0()).await[0].as_ref().unwrap();
    check("local again", store.local_jobs_since(Some(stamp)).await.unwrap(), &mut stamp, &|l| l.jobs.len() == 1);
    store.unschedule(&[name("local")]).await[0].as_ref().unwrap();
    check("deleted", store.local_jobs_since(Some(stamp)).await.unwrap(), &mut stamp, &|l| l.jobs.is_empty());
    assert_eq!(store.local_jobs_since(Some(stamp)).await.unwrap(), None);
}

/// A fire due within the lookahead is taken early with its own scheduled time (not a
/// misfire); one due later is not.
pub(crate) async fn lookahead_takes_fires_due_soon_with_their_own_time<K: Kv>(store: &KvJobStore<K>) {
    let mut def = job("soon", &[("a", "cron 10 * * * * *"), ("b", "cron 40 * * * * *")]);
    def.allow_concurrent = true;
    store.schedule(&[def], t0()).await;
    let known = BTreeSet::new();
    let mut req = request("n1", secs(9), 16, &known);
    req.lookahead = Duration::from_millis(1_500);
    let runs = store.acquire_due(&req).await.unwrap();
    assert_eq!(runs.len(), 1);
    assert_eq!(runs[0].run.scheduled_at, secs(10), "its own time, ahead of now");
    assert_eq!(runs[0].run.trigger.as_ref().unwrap().as_str(), "a");
    // b is due at 40 s: beyond a 1.5 s lookahead from 37 s, nobody takes it yet.
    let mut early = request("n1", secs(37), 16, &known);
    early.lookahead = Duration::from_millis(1_500);
    assert!(store.acquire_due(&early).await.unwrap().is_empty());
    early.now = secs(38) + TimeDelta::milliseconds(600);
    let b = store.acquire_due(&early).await.unwrap();
    assert_eq!(b.len(), 1);
    assert_eq!(b[0].run.scheduled_at, secs(40));
}

/// A non-leader on a store of its own (`scheduled: false`) takes enqueued one-shot fires
/// even behind many due scheduled ones, and leaves the scheduled ones waiting at their due
/// time; a later request with `scheduled: true` (the node leads) takes them.
pub(crate) async fn without_scheduled_fires_only_one_shot_triggers_are_taken<K: Kv>(store: &KvJobStore<K>) {
    let crons: Vec<JobDefinition> = (0..40)
        .map(|i| {
            let mut def = job(&format!("cron{i:02}"), &[("t", "cron * * * * * *")]);
            def.allow_concurrent = true;
            def
        })
        .collect();
    store.schedule(&crons, t0()).await;
    store.schedule(&[job("adhoc", &[])], t0()).await;
    let names = store.enqueue(&[(name("adhoc"), JsonObject::new())], secs(5)).await;
    let manual = names[0].as_ref().unwrap().clone();
    let known = BTreeSet::new();
    let mut follower = request("n1", secs(5), 2, &known);
    follower.scheduled = false;
    let runs = store.acquire_due(&follower).await.unwrap();
    assert_eq!(runs.len(), 1, "only the one-shot fire");
    assert_eq!((runs[0].run.cause, runs[0].run.trigger.as_ref()), (RunCause::Manual, Some(&manual)));
    assert!(store.acquire_due(&follower).await.unwrap().is_empty());
    assert_eq!(trigger_state(store, "cron07", "t").await, (TriggerState::Waiting, Some(us(secs(1)))));
    // Leading now; 4 s late is within the misfire threshold, so each runs at its due time.
    let known = running_on(store, "n1").await;
    let leader = request("n1", secs(5), 100, &known);
    let runs = store.acquire_due(&leader).await.unwrap();
    assert_eq!(runs.len(), 40);
    assert!(runs.iter().all(|r| r.run.cause == RunCause::Schedule && r.run.scheduled_at == secs(1)));
}

/// Found by simulation seed 2: a one-shot trigger (here an enqueued run) blocked behind a
/// non-concurrent job's running run, unblocked while the job was paused, became `Paused` —
/// and resuming the job never touches one-shot triggers, so it never ran. One-shot
/// triggers ignore pause.
pub(crate) async fn a_one_shot_trigger_unblocked_while_its_job_is_paused_still_runs<K: Kv>(store: &KvJobStore<K>) {
    store.schedule(&[job("serial", &[("a", "cron 0 * * * * *")])], t0()).await;
    let first = acquire(store, "n1", secs(60), 16).await;
    assert_eq!(first.len(), 1);
    let names = store.enqueue(&[(name("serial"), JsonObject::new())], secs(61)).await;
    let manual = names[0].as_ref().unwrap().clone();
    assert!(acquire(store, "n1", secs(62), 16).await.is_empty());
    assert_eq!(trigger_state(store, "serial", manual.as_str()).await.0, TriggerState::Blocked);
    assert!(store.set_jobs_paused(&[name("serial")], true).await[0].is_ok());
    complete(store, first[0].run.id, "n1", RunOutcome::Succeeded, secs(63)).await;
    assert_eq!(trigger_state(store, "serial", manual.as_str()).await.0, TriggerState::Waiting);
    let runs = acquire(store, "n1", secs(64), 16).await;
    assert_eq!(runs.len(), 1, "the enqueued run goes ahead while the job is paused");
    assert_eq!(runs[0].run.trigger.as_ref(), Some(&manual));
}

/// Found by simulation seed 1: a node that crashed and restarted under the same id kept
/// heartbeating, so the leader never declared its old runs lost; they stayed `Running`
/// (and an ambiguous acquisition of the new process adopted and re-ran them). The new
/// process reclaims them: `Lost`, slot freed, recovered once when the job asks.
pub(crate) async fn a_restarted_process_reclaims_the_runs_its_predecessor_left<K: Kv>(store: &KvJobStore<K>) {
    let mut recovering = job("again", &[("t", "cron 0 * * * * *")]);
    recovering.requests_recovery = true;
    store.schedule(&[recovering, job("other", &[("t", "cron 0 * * * * *")])], t0()).await;
    store.heartbeat("phoenix", secs(59), None, false).await.unwrap();
    let old = acquire(store, "phoenix", secs(60), 16).await;
    assert_eq!(old.len(), 2);
    // The new process already runs one run of its own when it reclaims.
    store.enqueue(&[(name("other"), JsonObject::new())], secs(65)).await;
    complete(
        store,
        old.iter().find(|r| r.run.job.as_str() == "other").unwrap().run.id,
        "phoenix",
        RunOutcome::Succeeded,
        secs(64),
    )
    .await;
    let own = acquire(store, "phoenix", secs(65), 16).await;
    assert_eq!(own.len(), 1);
    let known: BTreeSet<Uuid> = own.iter().map(|r| r.run.id).collect();
    let mut step = store.reclaim_previous_runs("phoenix", &known, secs(66), 64).await.unwrap();
    while step.more {
        step = store.reclaim_previous_runs("phoenix", &known, secs(66), 64).await.unwrap();
    }
    let left = old.iter().find(|r| r.run.job.as_str() == "again").unwrap();
    assert_eq!(store.run_record(left.run.id).await.unwrap().unwrap().state, RunState::Lost);
    assert_eq!(store.run_record(own[0].run.id).await.unwrap().unwrap().state, RunState::Running, "its own run stays");
    // Once: a second call finds nothing; the recovery runs, and the slot is free for it.
    let again = store.reclaim_previous_runs("phoenix", &known, secs(67), 64).await.unwrap();
    assert!(again.lost_runs.is_empty());
    let recovered = acquire(store, "elsewhere", secs(67), 16).await;
    assert_eq!(recovered.len(), 1);
    assert_eq!((recovered[0].run.cause, recovered[0].run.job.as_str()), (RunCause::Recovery, "again"));
}

/// Found by simulation seed 23: unscheduling a non-concurrent job cleared its slot while
/// its run still ran, so the job added again under the same name ran beside it.
pub(crate) async fn a_job_deleted_and_added_again_waits_for_its_old_run<K: Kv>(store: &KvJobStore<K>) {
    let def = job("again", &[("t", "cron */10 * * * * *")]);
    store.schedule(std::slice::from_ref(&def), t0()).await;
    let old = acquire(store, "n1", secs(10), 16).await;
    assert_eq!(old.len(), 1);
    assert!(store.unschedule(&[name("again")]).await[0].is_ok());
    store.schedule(std::slice::from_ref(&def), secs(11)).await;
    assert!(acquire(store, "n2", secs(20), 16).await.is_empty(), "the old run still holds the slot");
    assert_eq!(trigger_state(store, "again", "t").await.0, TriggerState::Blocked);
    complete(store, old[0].run.id, "n1", RunOutcome::Succeeded, secs(21)).await;
    let next = acquire(store, "n2", secs(21), 16).await;
    assert_eq!(next.len(), 1, "unblocked by the old run's end");
    // Deleted for good while running: the run's end leaves no slot behind.
    assert!(store.unschedule(&[name("again")]).await[0].is_ok());
    complete(store, next[0].run.id, "n2", RunOutcome::Succeeded, secs(22)).await;
    store.schedule(std::slice::from_ref(&def), secs(23)).await;
    assert_eq!(acquire(store, "n2", secs(30), 16).await.len(), 1);
}

pub(crate) async fn batched_completions_act_as_each_one_alone<K: Kv>(store: &KvJobStore<K>) {
    let serial = job("serial", &[("a", "cron * * * * * *"), ("b", "cron */2 * * * * *")]);
    let flaky = job("flaky", &[("at", "once 2027-01-15T08:00:02Z")])
        .with_retry(RetryPolicy::fixed(1, Duration::from_secs(5)).unwrap());
    let poll = job("poll", &[("every", "every 00:00:02")]);
    let results = store.schedule(&[serial, flaky, poll], t0()).await;
    assert!(results.iter().all(Result::is_ok), "{results:?}");
    let runs = acquire(store, "n1", secs(2), 16).await;
    assert_eq!(runs.len(), 3, "one of serial (the other blocked), flaky, poll");
    let id_of = |job: &str| runs.iter().find(|r| r.run.job.as_str() == job).unwrap().run.id;
    let blocked = if runs.iter().any(|r| r.run.trigger.as_ref().unwrap().as_str() == "a") { "b" } else { "a" };
    assert_eq!(trigger_state(store, "serial", blocked).await.0, TriggerState::Blocked);
    let failure = RunOutcome::Failed { code: None, message: "boom".into() };
    let completion = |id: Uuid, outcome: RunOutcome| Completion {
        run_id: id,
        node: "n1".into(),
        outcome,
        finished_at: secs(3),
        holds_trigger: None,
    };
    let batch = [
        completion(id_of("serial"), RunOutcome::Succeeded),
        completion(id_of("flaky"), failure.clone()),
        completion(id_of("poll"), RunOutcome::Succeeded),
        // A run finished twice in one batch: the second is a late duplicate.
        completion(id_of("poll"), RunOutcome::Succeeded),
    ];
    let results = store.complete_runs(&batch).await;
    let results: Vec<CompletionResult> = results.into_iter().map(Result::unwrap).collect();
    assert_eq!(results.iter().map(|r| r.recorded).collect::<Vec<_>>(), [true, true, true, false]);
    assert!(results[1].retry_trigger.is_some(), "the failed run got its retry");
    assert_eq!(trigger_state(store, "serial", blocked).await.0, TriggerState::Waiting, "slot released, unblocked");
    assert_eq!(trigger_state(store, "poll", "every").await, (TriggerState::Waiting, Some(us(secs(5)))));
    for (job, state) in [("serial", RunState::Succeeded), ("flaky", RunState::Failed), ("poll", RunState::Succeeded)] {
        assert_eq!(store.run_record(id_of(job)).await.unwrap().unwrap().state, state, "{job}");
    }

    // An unknown run fails alone; the others in its batch are still recorded.
    let more = acquire(store, "n1", secs(5), 16).await;
    assert!(!more.is_empty());
    let mut batch: Vec<Completion> = more.iter().map(|r| completion(r.run.id, RunOutcome::Succeeded)).collect();
    batch.insert(0, completion(Uuid::from_u128(77), RunOutcome::Succeeded));
    let results = store.complete_runs(&batch).await;
    assert_eq!(
        results[0].as_ref().unwrap_err().to_string(),
        "SCHEDULING_NOTFOUND_004: run not found or already finished: 00000000-0000-0000-0000-00000000004d"
    );
    assert!(results[1..].iter().all(|r| r.as_ref().is_ok_and(|r| r.recorded)), "{results:?}");
}

/// Each node's outlook covers its home shards (`first`, `count`) and the others
/// (`first_elsewhere`); across the live nodes every waiting fire is home to exactly one.
pub(crate) async fn the_due_outlook_splits_home_fires_from_the_others<K: Kv>(store: &KvJobStore<K>) {
    let day = Duration::from_secs(86_400);
    assert_eq!(
        store.due_outlook("a", DueFilter::EVERY, day, 1_000).await.unwrap(),
        DueOutlook::default(),
        "nothing waiting"
    );
    let triggers: Vec<(String, String)> =
        (0..40).map(|i| (format!("t{i}"), format!("once {}", format_instant(secs(10 + i % 7))))).collect();
    let triggers: Vec<(&str, &str)> = triggers.iter().map(|(n, s)| (n.as_str(), s.as_str())).collect();
    let mut def = job("o", &triggers);
    def.allow_concurrent = true;
    store.schedule(&[def], t0()).await;
    // Alone (not even registered), every shard is home.
    let alone = store.due_outlook("a", DueFilter::EVERY, day, 1_000).await.unwrap();
    assert_eq!((alone.first, alone.count, alone.first_elsewhere), (Some(secs(10)), 40, None));
    assert_eq!(
        store.due_outlook("a", DueFilter::EVERY, Duration::from_secs(1), 1_000).await.unwrap().count,
        12,
        "due at 10 s or 11 s"
    );
    assert_eq!(store.due_outlook("a", DueFilter::EVERY, day, 5).await.unwrap().count, 5, "counted up to the limit");
    // Two live nodes share the shards.
    store.heartbeat("a", t0(), None, false).await.unwrap();
    store.heartbeat("b", t0(), None, false).await.unwrap();
    let a = store.due_outlook("a", DueFilter::EVERY, day, 1_000).await.unwrap();
    let b = store.due_outlook("b", DueFilter::EVERY, day, 1_000).await.unwrap();
    assert_eq!(a.count + b.count, 40, "each fire is home to one node: {a:?} {b:?}");
    assert!(a.count > 0 && b.count > 0, "{a:?} {b:?}");
    for (me, other) in [(a, b), (b, a)] {
        assert_eq!(me.first.into_iter().chain(me.first_elsewhere).min(), Some(secs(10)));
        assert_eq!(me.first_elsewhere, other.first, "one node's elsewhere is the other's home");
    }
    // An acquisition reports the same outlook, after its own changes.
    let none_known = BTreeSet::new();
    let taken = store.acquire_with_outlook(&request("a", secs(10), 100, &none_known), day, 1_000).await.unwrap();
    let after = taken.outlook.expect("not full, so the outlook was read");
    assert_eq!(after, store.due_outlook("a", DueFilter::EVERY, day, 1_000).await.unwrap());
    assert_eq!(after.count, a.count - taken.runs.len(), "{a:?} {after:?} took {}", taken.runs.len());
}

/// Home shard heads an acquisition returns spare the next one reading every home shard's
/// first entry: they are trusted (a fire written since without the caller knowing stays
/// unseen until the heads are read again), so they are read again whenever they may not
/// hold for the request (new home shards, another filter) and by a doubting look at the
/// other shards (the one that finds fires no node was woken for), and a known head whose
/// entry was removed since is read on from and replaced.
pub(crate) async fn known_shard_heads_spare_reads_and_are_read_again_when_they_may_not_hold<K: Kv>(
    store: &KvJobStore<K>,
) {
    let day = Duration::from_secs(86_400);
    let known = BTreeSet::new();
    let ahead = |node, now, heads| {
        let mut request = request(node, now, 100, &known);
        request.steal = false;
        request.known_heads = heads;
        request
    };
    // A concurrent job `name` of 40 one-shot triggers `t0`..`t39`, trigger i due at `at(i)` s.
    let forty = |name: &str, at: &dyn Fn(i64) -> i64| {
        let schedules: Vec<(String, String)> =
            (0..40).map(|i| (format!("t{i}"), format!("once {}", format_instant(secs(at(i)))))).collect();
        let triggers: Vec<(&str, &str)> = schedules.iter().map(|(n, s)| (n.as_str(), s.as_str())).collect();
        let mut def = job(name, &triggers);
        def.allow_concurrent = true;
        def
    };
    store.heartbeat("a", t0(), None, false).await.unwrap();
    store.heartbeat("b", t0(), None, false).await.unwrap();
    store.schedule(&[forty("h", &|i| 10 + i % 7)], t0()).await;
    let first = store.acquire_with_outlook(&ahead("a", secs(5), None), day, 1_000).await.unwrap();
    assert!(first.runs.is_empty());
    let heads = first.heads.expect("returned with the outlook");

    // Pausing the fires due at 10 s removes their entries (no node is woken for that):
    // the heads that were theirs are read on from, and the heads returned are fresh.
    let paused: Vec<TriggerKey> = (0..40)
        .filter(|i| i % 7 == 0)
        .map(|i| TriggerKey::new(name("h"), TriggerName::new(format!("t{i}")).unwrap()))
        .collect();
    assert!(store.set_triggers_paused(&paused, true).await.iter().all(Result::is_ok));
    let with_known = store.acquire_with_outlook(&ahead("a", secs(10), Some(&heads)), day, 1_000).await.unwrap();
    let read_anew = store.acquire_with_outlook(&ahead("a", secs(10), None), day, 1_000).await.unwrap();
    assert!(with_known.runs.is_empty() && read_anew.runs.is_empty(), "nothing of a's is due at 10 s any more");
    assert_eq!(with_known.heads, read_anew.heads, "the stale heads were replaced");
    assert_eq!(with_known.outlook, read_anew.outlook);
    let heads = with_known.heads.expect("returned with the outlook");

    // Fires written since that the caller does not account for stay unseen with the heads
    // (these are due before any head of a's, the fires due at 10 s being paused: no read
    // from a head reaches them).
    store.schedule(&[forty("x", &|_| 10)], t0()).await;
    let hidden = store.acquire_with_outlook(&ahead("a", secs(11), Some(&heads)), day, 1_000).await.unwrap();
    let hidden_extra = hidden.runs.iter().filter(|r| r.run.job.as_str() == "x").count();
    assert_eq!(hidden_extra, 0, "the heads were used, not read again");
    let heads = hidden.heads.expect("returned with the outlook");
    // Another filter: read again.
    let busy = BTreeSet::from(["h".to_owned()]);
    let mut other_filter = ahead("a", secs(11), Some(&heads));
    other_filter.busy_jobs = &busy;
    let taken = store.acquire_with_outlook(&other_filter, day, 1_000).await.unwrap();
    let a_extra = taken.runs.iter().filter(|r| r.run.job.as_str() == "x").count();
    assert!(a_extra > 0, "a's share of the new fires, once its filter changed");
    // A look at the other shards trusting the nodes that vouch for theirs (with the same
    // filter): b does not, so its shards are read (its shares, 3 s and 2 s late, are taken
    // now); a's own heads still hold, so a's share of fires written since stays unseen.
    let heads = taken.heads.expect("returned with the outlook");
    store.schedule(&[forty("w", &|_| 11)], t0()).await;
    let count = |runs: &[AcquiredRun], job: &str| runs.iter().filter(|r| r.run.job.as_str() == job).count();
    let mut steal = ahead("a", secs(13), Some(&heads));
    (steal.steal, steal.busy_jobs) = (true, &busy);
    let stolen = store.acquire_with_outlook(&steal, day, 1_000).await.unwrap();
    assert_eq!(count(&stolen.runs, "x"), 40 - a_extra, "b's share");
    let b_share = count(&stolen.runs, "w");
    // A doubting look reads every shard afresh, its own too: a's share is found.
    let mut doubting = ahead("a", secs(13), stolen.heads.as_ref());
    (doubting.steal, doubting.trust_caught_up, doubting.busy_jobs) = (true, false, &busy);
    let found = store.acquire_with_outlook(&doubting, day, 1_000).await.unwrap();
    let a_share = count(&found.runs, "w");
    assert!(b_share > 0 && a_share > 0 && a_share + b_share == 40, "b's share {b_share}, then a's {a_share}");
    // New home shards (b stops owning shards): read again.
    let heads = found.heads.expect("returned with the outlook");
    store.schedule(&[forty("y", &|_| 14)], t0()).await;
    store.deregister_node("b").await.unwrap();
    let all_home = store.acquire_with_outlook(&ahead("a", secs(14), Some(&heads)), day, 1_000).await.unwrap();
    assert_eq!(all_home.runs.iter().filter(|r| r.run.job.as_str() == "y").count(), 40, "every shard is a's now");
}

/// A node leaves some fires waiting (its busy jobs'; scheduled ones when it does not
/// lead its own store): its outlook skips them, so it does not wake for them over and
/// over, and its acquisition reads past them, so they hide no fire behind them (here 150
/// of them, in the same shard as another job's fire, more than one read takes).
pub(crate) async fn fires_the_node_leaves_waiting_neither_wake_it_nor_hide_others<K: Kv>(store: &KvJobStore<K>) {
    let day = Duration::from_secs(86_400);
    let shard = shard_of("free", "f");
    let names: Vec<String> =
        (0..).map(|i| format!("b{i}")).filter(|n| shard_of("busy", n) == shard).take(150).collect();
    let once = format!("once {}", format_instant(secs(10)));
    let triggers: Vec<(&str, &str)> = names.iter().map(|n| (n.as_str(), once.as_str())).collect();
    let mut busy = job("busy", &triggers);
    busy.allow_concurrent = true;
    let free = job("free", &[("f", &format!("once {}", format_instant(secs(20))))]);
    store.schedule(&[busy, free], t0()).await;

    let every = store.due_outlook("a", DueFilter::EVERY, day, 1_000).await.unwrap();
    assert_eq!((every.first, every.count), (Some(secs(10)), 151));
    let busy_jobs = BTreeSet::from(["busy".to_owned()]);
    let filter = DueFilter { scheduled: true, busy_jobs: &busy_jobs };
    let outlook = store.due_outlook("a", filter, day, 1_000).await.unwrap();
    assert_eq!((outlook.first, outlook.count), (Some(secs(20)), 1), "the busy job's fires left out");

    let known = BTreeSet::new();
    let mut request = request("a", secs(30), 2, &known);
    request.busy_jobs = &busy_jobs;
    let taken = store.acquire_with_outlook(&request, day, 1_000).await.unwrap();
    let runs: Vec<_> = taken.runs.iter().map(|r| r.run.job.as_str()).collect();
    assert_eq!(runs, ["free"], "taken from behind the busy job's fires");
    assert_eq!(taken.outlook.map(|o| (o.first, o.count)), Some((None, 0)), "nothing left to take");
    let left = store.due_outlook("a", DueFilter::EVERY, day, 1_000).await.unwrap();
    assert_eq!((left.first, left.count), (Some(secs(10)), 150), "the busy job's fires still wait");
}

/// A non-concurrent job switched between local and cluster-unique while a run of the
/// other kind is going would run twice at once (local runs hold no cluster slot; the
/// nodes' local triggers know nothing of a cluster run): refused with
/// `SCHEDULING_CONFLICT_001` until those runs ended. A concurrent job switches any time.
pub(crate) async fn a_non_concurrent_job_switches_between_local_and_cluster_only_between_runs<K: Kv>(
    store: &KvJobStore<K>,
) {
    let cluster = job("switch", &[("t", "cron */10 * * * * *")]);
    let mut local = cluster.clone();
    local.run_on_every_instance = true;
    let refused = |result: &Result<(), sundial::error::SchedulingError>| {
        result.as_ref().is_err_and(|e| e.code() == "SCHEDULING_CONFLICT_001")
    };
    // Cluster to local while its run is going.
    store.schedule(std::slice::from_ref(&cluster), t0()).await;
    let run = acquire(store, "n1", secs(10), 16).await.remove(0);
    assert!(refused(&store.schedule(std::slice::from_ref(&local), secs(11)).await[0]));
    assert!(store.job_record("switch").await.unwrap().is_some_and(|j| !j.run_on_every_instance), "unchanged");
    assert!(store.schedule(std::slice::from_ref(&cluster), secs(11)).await[0].is_ok(), "no switch: allowed");
    complete(store, run.run.id, "n1", RunOutcome::Succeeded, secs(12)).await;
    assert!(store.schedule(std::slice::from_ref(&local), secs(13)).await[0].is_ok(), "no run going");
    // Local to cluster while a local run is going; the code-job path is held to it too.
    let local_run = sundial::job::JobRun {
        id: Uuid::from_u128(7),
        job: name("switch"),
        trigger: Some(TriggerName::new("t").unwrap()),
        scheduled_at: secs(20),
        cause: RunCause::Schedule,
        attempt: 1,
        retry_of: None,
        data: JsonObject::new(),
    };
    assert!(store.begin_local_run(&local_run, "n2", secs(20)).await.unwrap());
    assert!(refused(&store.schedule(std::slice::from_ref(&cluster), secs(21)).await[0]));
    let sync = store.sync_code_job(&cluster, secs(21)).await.map(|_| ()).map_err(sundial::error::SchedulingError::from);
    assert!(refused(&sync), "a code definition that switches waits too: {sync:?}");
    assert!(acquire(store, "n1", secs(30), 16).await.is_empty(), "still local: not acquired");
    complete(store, local_run.id, "n2", RunOutcome::Succeeded, secs(31)).await;
    assert!(store.schedule(std::slice::from_ref(&cluster), secs(32)).await[0].is_ok());
    // A node that has not reread its local jobs yet fires the job as local: not recorded,
    // and told not to run it (found by simulation seed 57 of the switching workload).
    let stale = sundial::job::JobRun { id: Uuid::from_u128(8), scheduled_at: secs(33), ..local_run.clone() };
    assert!(!store.begin_local_run(&stale, "n3", secs(33)).await.unwrap());
    assert!(store.run_record(stale.id).await.unwrap().is_none());
    // Deleted while its cluster run goes and added again: as a local job, refused (the
    // nodes' local triggers know nothing of that run); as a cluster job, allowed (the run
    // still holds the slot, so the new job's fire waits for it).
    let run = acquire(store, "n1", secs(40), 16).await.remove(0);
    assert!(store.unschedule(&[name("switch")]).await[0].is_ok());
    assert!(refused(&store.schedule(std::slice::from_ref(&local), secs(41)).await[0]));
    assert!(store.schedule(std::slice::from_ref(&cluster), secs(41)).await[0].is_ok());
    assert!(acquire(store, "n2", secs(50), 16).await.is_empty(), "waits for the old run");
    complete(store, run.run.id, "n1", RunOutcome::Succeeded, secs(51)).await;
    // A concurrent job switches while it runs.
    let mut free = job("free", &[("t", "cron */10 * * * * *")]);
    free.allow_concurrent = true;
    store.schedule(std::slice::from_ref(&free), secs(52)).await;
    let running = acquire(store, "n1", secs(60), 16).await;
    assert!(running.iter().any(|r| r.run.job.as_str() == "free"));
    free.run_on_every_instance = true;
    assert!(store.schedule(std::slice::from_ref(&free), secs(61)).await[0].is_ok());
}

/// A JSON object whose text is `len` bytes or a little more.
fn data_of_len(len: usize) -> JsonObject {
    let mut data = JsonObject::new();
    data.insert("pad".into(), "x".repeat(len).into());
    data
}

pub(crate) async fn oversized_inputs_are_refused_and_never_wedge_the_store<K: Kv>(store: &KvJobStore<K>) {
    // Data over the limit is refused with the validation code, and nothing is stored.
    let mut big = job("big", &[("t", "cron */10 * * * * *")]);
    big.data = data_of_len(DATA_LEN_MAX);
    let refused = store.schedule(&[big], t0()).await;
    assert_eq!(refused[0].as_ref().unwrap_err().code(), "SCHEDULING_VALIDATION_001", "{refused:?}");
    assert!(store.status(&name("big")).await.unwrap().is_none());
    let mut other = job("other", &[("t", "cron */10 * * * * *")]);
    other.allow_concurrent = true;
    store.schedule(&[job("small", &[("t", "cron */10 * * * * *")]), other], t0()).await;
    let enqueued = store.enqueue(&[(name("small"), data_of_len(DATA_LEN_MAX))], t0()).await;
    assert_eq!(enqueued[0].as_ref().unwrap_err().code(), "SCHEDULING_VALIDATION_001");
    let manual =
        store.begin_manual_run(&name("small"), &data_of_len(DATA_LEN_MAX), "n1", Uuid::from_u128(9), t0()).await;
    assert_eq!(SchedulingError::from(manual.unwrap_err()).code(), "SCHEDULING_VALIDATION_001");

    // A trigger whose runs could not be stored (data written around validation, e.g. by
    // an older version) goes to Error on its own; the fires due with it still run.
    // Job and trigger data of 60,000 bytes each: a run would merge them past the store's
    // value limit, and without the check every acquisition would fail with 2103.
    let (job_key, trigger_key) = (store.keys().job("small"), store.keys().trigger("small", "t"));
    let kv = store.kv().clone();
    let (job_key, trigger_key) = (&job_key, &trigger_key);
    sundial::kv::run(&kv, RetryOptions::default(), |txn, _| async move {
        let bytes = txn.get(job_key, false).await?.unwrap();
        let mut job: JobRecord = codec::decode(&bytes, "job record").unwrap();
        job.data = serde_json::Value::Object(data_of_len(60_000)).to_string();
        txn.set(job_key, &codec::encode(&job));
        let bytes = txn.get(trigger_key, false).await?.unwrap();
        let mut trigger: TriggerRecord = codec::decode(&bytes, "trigger record").unwrap();
        let mut data = JsonObject::new();
        data.insert("more".into(), "y".repeat(60_000).into());
        trigger.data = serde_json::Value::Object(data).to_string();
        txn.set(trigger_key, &codec::encode(&trigger));
        Ok::<_, StoreError>(())
    })
    .await
    .unwrap();
    let runs = acquire(store, "n1", secs(10), 16).await;
    assert_eq!(runs.iter().map(|r| r.run.job.as_str()).collect::<Vec<_>>(), ["other"]);
    let small = store.trigger_record("small", "t").await.unwrap().unwrap();
    assert_eq!(small.state, TriggerState::Error);
    assert!(small.error.as_deref().unwrap().starts_with("run data is "), "{:?}", small.error);

    // A job's error message of any length is recorded, cut, in the same batch as others.
    let manual = store.begin_manual_run(&name("other"), &JsonObject::new(), "n1", Uuid::from_u128(10), secs(10)).await;
    let message = "é".repeat(100_000);
    let completions = [
        Completion {
            run_id: runs[0].run.id,
            node: "n1".into(),
            outcome: RunOutcome::Failed { code: Some("C".repeat(10_000)), message: message.clone() },
            finished_at: secs(11),
            holds_trigger: runs[0].holds_trigger,
        },
        Completion {
            run_id: manual.unwrap().run.id,
            node: "n1".into(),
            outcome: RunOutcome::Succeeded,
            finished_at: secs(11),
            holds_trigger: None,
        },
    ];
    let results = store.complete_runs(&completions).await;
    assert!(results.iter().all(|r| r.as_ref().is_ok_and(|r| r.recorded)), "{results:?}");
    let stored = store.run_record(runs[0].run.id).await.unwrap().unwrap();
    let kept = stored.error_message.unwrap();
    assert!(kept.len() <= ERROR_MESSAGE_LEN_MAX && kept.ends_with("… (cut from 200000 bytes)"), "{}", kept.len());
    assert!(message.starts_with(kept.trim_end_matches("… (cut from 200000 bytes)")));
    assert!(stored.error_code.unwrap().len() <= ERROR_CODE_LEN_MAX);
}

pub(crate) async fn data_heavy_batches_are_split_to_fit_a_transaction<K: Kv>(store: &KvJobStore<K>) {
    // 250 fires whose runs each carry 32 KiB of data (job and trigger data at their limit):
    // about 12 MB of writes, more than one transaction may hold (10,000,000 bytes).
    const FIRES: usize = 250;
    let mut trigger_data = JsonObject::new();
    trigger_data.insert("t".into(), "y".repeat(DATA_LEN_MAX - 8).into());
    let defs: Vec<JobDefinition> = (0..FIRES)
        .map(|i| {
            let mut def = job(&format!("heavy-{i:03}"), &[]);
            def.data = data_of_len(DATA_LEN_MAX - 10);
            def.allow_concurrent = true;
            let trigger =
                JobTriggerDefinition::new(TriggerName::new("t").unwrap(), "cron */10 * * * * *".parse().unwrap());
            def.with_trigger(trigger.with_data(trigger_data.clone()))
        })
        .collect();
    assert!(store.schedule(&defs, t0()).await.iter().all(Result::is_ok));
    let mut runs = Vec::new();
    let mut transactions = 0;
    loop {
        let known = running_on(store, "n1").await;
        let taken = store
            .acquire_with_outlook(&request("n1", secs(10), FIRES, &known), Duration::from_secs(1), 16)
            .await
            .unwrap();
        transactions += 1;
        runs.extend(taken.runs);
        if !taken.more {
            break;
        }
    }
    assert_eq!(runs.len(), FIRES, "every fire taken");
    assert!(transactions > 2, "in several transactions, each within its data budget ({transactions})");
    // Their completions in one batch, each with an error message at its limit.
    let completions: Vec<Completion> = runs
        .iter()
        .map(|run| Completion {
            run_id: run.run.id,
            node: "n1".into(),
            outcome: RunOutcome::Failed { code: None, message: "m".repeat(ERROR_MESSAGE_LEN_MAX) },
            finished_at: secs(11),
            holds_trigger: run.holds_trigger,
        })
        .collect();
    let results = store.complete_runs(&completions).await;
    assert!(results.iter().all(|r| r.as_ref().is_ok_and(|r| r.recorded && r.state == RunState::Failed)));
}

/// SPEC §15 on this store's `Kv` and keyspace: the first instance to insert a fire's
/// record runs it, once; `PerJob` holds the job's other fires while it runs; outcomes are
/// written back. (Takeover after a silent lease is timed on a manual clock in
/// tests/coordination.rs.)
pub(crate) async fn external_fires_run_once_through_the_execution_coordinator<K: Kv>(store: &KvJobStore<K>) {
    use std::sync::Arc;
    use sundial::coordination::{
        Decision, Declined, ExecutionCoordinator, ExecutionKey, ExecutionRequest, ExecutionStatus, UniqueMode,
    };
    use sundial::entropy::Entropy;
    use sundial::name::{GroupName, ServiceName};
    use sundial::time::ManualClock;

    let clock = Arc::new(ManualClock::new(t0()));
    let instance = |owner: &str, seed| {
        ExecutionCoordinator::new(
            store.kv().clone(),
            store.keys().clone(),
            clock.clone(),
            owner,
            Entropy::from_seed(seed),
        )
    };
    let (a, b) = (instance("instance-a", 1), instance("instance-b", 2));
    let fire = |job: &str, at: DateTime<Utc>, mode| {
        let key =
            ExecutionKey::new(ServiceName::new("billing").unwrap(), GroupName::new("nightly").unwrap(), name(job), at);
        ExecutionRequest::new(key, mode, Duration::from_secs(120))
    };
    let per_fire = fire("invoice", t0(), UniqueMode::PerFireTime);
    let Decision::Granted(first) = a.try_begin(&per_fire).await.unwrap() else { panic!("the first instance runs it") };
    let held = b.try_begin(&per_fire).await.unwrap();
    assert!(matches!(held, Decision::Declined(Declined::Running { .. })), "{held:?}");
    let Decision::Granted(overlapping) =
        b.try_begin(&fire("invoice", secs(60), UniqueMode::PerFireTime)).await.unwrap()
    else {
        panic!("another fire of a PerFireTime job runs beside it")
    };
    a.succeed(&first).await.unwrap();
    b.fail(&overlapping, "card declined").await.unwrap();
    let again = b.try_begin(&per_fire).await.unwrap();
    assert!(matches!(again, Decision::Declined(Declined::AlreadyRan(_))), "{again:?}");
    let record = a.record(&per_fire.key).await.unwrap().unwrap();
    assert_eq!((record.owner.as_str(), record.status), ("instance-a", ExecutionStatus::Succeeded));

    let Decision::Granted(running) = a.try_begin(&fire("report", t0(), UniqueMode::PerJob)).await.unwrap() else {
        panic!("the first fire of a PerJob job runs")
    };
    let busy = b.try_begin(&fire("report", secs(60), UniqueMode::PerJob)).await.unwrap();
    assert!(matches!(busy, Decision::Declined(Declined::JobBusy { .. })), "{busy:?}");
    a.succeed(&running).await.unwrap();
    let next = b.try_begin(&fire("report", secs(60), UniqueMode::PerJob)).await.unwrap();
    assert!(matches!(next, Decision::Granted(_)), "the job is free once its run ended: {next:?}");
}

/// Reads and writes over ranges that hold nothing by construction act alike on every
/// `Kv`: a limit of 0 and an empty or inverted range read nothing, and clearing or
/// adding a conflict over one changes nothing (FoundationDB's own client takes a limit of
/// 0 for "no limit" and refuses an inverted range).
pub(crate) async fn zero_limits_and_empty_ranges_read_and_clear_nothing<K: Kv>(store: &KvJobStore<K>) {
    use sundial::kv::{run, KvError, RangeRequest};
    let (root, _) = store.keys().all();
    let key = |name: &str| [root.as_slice(), b"\x00kv-edges/", name.as_bytes()].concat();
    let (a, b, c, end) = (key("a"), key("b"), key("c"), key("d"));
    let kv = store.kv();
    run(kv, RetryOptions::default(), |txn, _| {
        let keys = [a.clone(), b.clone(), c.clone()];
        async move {
            for key in &keys {
                txn.set(key, b"v");
            }
            Ok::<_, KvError>(())
        }
    })
    .await
    .unwrap();
    let requests = [
        RangeRequest::new(a.clone(), end.clone()).limit(0),
        RangeRequest::new(a.clone(), end.clone()).limit(0).reversed(),
        RangeRequest::new(b.clone(), b.clone()),
        RangeRequest::new(c.clone(), a.clone()),
        RangeRequest::new(c.clone(), a.clone()).reversed(),
    ];
    for snapshot in [false, true] {
        let read = run(kv, RetryOptions::default(), |txn, _| {
            let (requests, a, b, c) = (requests.clone(), a.clone(), b.clone(), c.clone());
            async move {
                let mut pairs = Vec::new();
                for request in &requests {
                    pairs.push(txn.get_range(request, snapshot).await?.pairs);
                }
                txn.clear_range(&c, &a);
                txn.clear_range(&b, &b);
                txn.add_read_conflict_range(&c, &a);
                txn.add_write_conflict_range(&c, &a);
                Ok::<_, KvError>(pairs)
            }
        })
        .await
        .unwrap();
        assert!(read.iter().all(Vec::is_empty), "snapshot {snapshot}: {read:?}");
    }
    let left = run(kv, RetryOptions::default(), |txn, _| {
        let request = RangeRequest::new(a.clone(), end.clone());
        async move { Ok::<_, KvError>(txn.get_range(&request, false).await?.pairs) }
    })
    .await
    .unwrap();
    let keys: Vec<Vec<u8>> = left.into_iter().map(|(key, _)| key).collect();
    assert_eq!(keys, vec![a, b, c], "nothing was cleared");
}
