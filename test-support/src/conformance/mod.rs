//! The store conformance scenarios, generic over the `Kv`: each takes a fresh store and
//! checks one group of SPEC §7–10 rules through the store's public operations, with
//! explicit times (the store never reads a clock), so they run unchanged on every engine:
//! `MemoryKv` (tests/store_conformance.rs), the embedded store (tests/store_embedded.rs),
//! PostgreSQL (tests/store_postgres.rs) and FoundationDB (actors/tests/fdb_conformance.rs).
//! Each file below holds one family of scenarios; all are re-exported here.

mod due;
mod firing;
mod history;
mod jobs;
mod limits;
mod nodes;

pub use due::*;
pub use firing::*;
pub use history::*;
pub use jobs::*;
pub use limits::*;
pub use nodes::*;

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
    codec, AcquireRequest, AcquiredRun, Completion, CompletionResult, DueFilter, DueOutlook, JobSet, JobStatus,
    KvJobStore, LocalJobs, RunOutcome, StoreError,
};
use sundial::time::from_micros;
use uuid::Uuid;

/// No busy local jobs.
pub(crate) static NO_JOBS: JobSet = JobSet::new();

/// Calls `$m!` with the name of every scenario that takes a default store (the history
/// cap scenario needs `max_runs: Some(3)` and is run on its own). The cluster view's
/// scenario takes a leader lease through the store's own election, whose retries after an
/// ambiguous commit are its own business: it is run without injected faults.
#[macro_export]
macro_rules! for_each_scenario {
    ($m:ident $(, $arg:expr)?) => {
        $crate::for_each_retry_safe_scenario!($m $(, $arg)?;
            the_due_outlook_splits_home_fires_from_the_others,
            fires_the_node_leaves_waiting_neither_wake_it_nor_hide_others,
            known_shard_heads_spare_reads_and_are_read_again_when_they_may_not_hold,
            the_cluster_view_counts_each_nodes_runs_and_names_the_leader
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
            the_audit_log_lists_newest_first_filters_pages_and_expires,
            status_shows_triggers_running_and_last_result,
            runs_holding_their_slot_are_counted_once_with_or_without_an_index_entry,
            statuses_read_in_pages_agree_with_each_jobs_status,
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
pub fn t0() -> DateTime<Utc> {
    from_micros(1_800_000_000_000_000).unwrap()
}

/// `s` seconds after [`t0`].
pub fn secs(s: i64) -> DateTime<Utc> {
    t0() + TimeDelta::seconds(s)
}

pub(crate) fn us(t: DateTime<Utc>) -> i64 {
    t.timestamp_micros()
}

/// A job name (valid by construction in the scenarios).
pub fn name(s: &str) -> JobName {
    JobName::new(s).unwrap()
}

/// A job `n` of type `test::Job` with `triggers` as (name, schedule text) pairs.
pub fn job(n: &str, triggers: &[(&str, &str)]) -> JobDefinition {
    let mut def = JobDefinition::new(name(n), JobTypeKey::new("test::Job").unwrap());
    for (trigger, schedule) in triggers {
        def =
            def.with_trigger(JobTriggerDefinition::new(TriggerName::new(*trigger).unwrap(), schedule.parse().unwrap()));
    }
    def
}

/// An acquisition request of `node` at `now` for up to `max` fires, knowing `known` runs
/// running on it: a 60 s misfire threshold, a 1 s steal grace, no lookahead, every shard
/// read, every job type taken.
pub fn request<'a>(node: &'a str, now: DateTime<Utc>, max: usize, known: &'a BTreeSet<Uuid>) -> AcquireRequest<'a> {
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
        busy_version: None,
        steal: true,
        trust_caught_up: true,
        known_heads: None,
    }
}

/// Acquires as a poller does, knowing the runs already running on `node` (it started
/// them): a retry after an ambiguous commit then returns the runs its earlier attempt took,
/// not those of earlier acquisitions at the same instant.
pub async fn acquire<K: Kv>(store: &KvJobStore<K>, node: &str, now: DateTime<Utc>, max: usize) -> Vec<AcquiredRun> {
    let known = running_on(store, node).await;
    store.acquire_due(&request(node, now, max, &known)).await.unwrap()
}

/// The runs `node` is running, by the store's history.
pub async fn running_on<K: Kv>(store: &KvJobStore<K>, node: &str) -> BTreeSet<Uuid> {
    let query = sundial::job::JobRunQuery {
        node: Some(node.to_owned()),
        states: BTreeSet::from([RunState::Running]),
        limit: 1_000,
        ..sundial::job::JobRunQuery::default()
    };
    store.runs(&query).await.unwrap().into_iter().map(|info| info.run.id).collect()
}

/// Completes `run` on `node` at `at` with `outcome`, as a node records a run's end.
pub async fn complete<K: Kv>(
    store: &KvJobStore<K>,
    run: Uuid,
    node: &str,
    outcome: RunOutcome,
    at: DateTime<Utc>,
) -> CompletionResult {
    let completion = Completion { run_id: run, node: node.into(), outcome, finished_at: at, holds_trigger: None };
    store.complete_run(&completion).await.unwrap()
}

/// Completes `run` on `node` as a node does: passing back whether its start said it holds
/// its trigger.
pub async fn complete_as_started<K: Kv>(
    store: &KvJobStore<K>,
    run: &AcquiredRun,
    node: &str,
    outcome: RunOutcome,
    at: DateTime<Utc>,
) -> CompletionResult {
    let completion = Completion {
        run_id: run.run.id,
        node: node.into(),
        outcome,
        finished_at: at,
        holds_trigger: run.holds_trigger,
    };
    store.complete_run(&completion).await.unwrap()
}

/// Starts a manual run of `job` on node `n1` with id `id`, scheduled at second `at`.
pub async fn manual_run<K: Kv>(store: &KvJobStore<K>, job: &str, id: u128, at: i64) -> Uuid {
    store.begin_manual_run(&name(job), &JsonObject::new(), "n1", Uuid::from_u128(id), secs(at)).await.unwrap().run.id
}

pub(crate) async fn trigger_state<K: Kv>(
    store: &KvJobStore<K>,
    job: &str,
    trigger: &str,
) -> (TriggerState, Option<i64>) {
    let t = store.trigger_record(job, trigger).await.unwrap().unwrap();
    (t.state, t.next_fire_us)
}
