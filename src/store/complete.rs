//! Ending runs (SPEC §7–8): the history record, the slot, blocked triggers, the next fire
//! of interval triggers, and retries; and starting runs by hand (`try_begin_run`).

use std::collections::BTreeSet;
use std::sync::Arc;

use chrono::{DateTime, Utc};
use futures_util::future::try_join4;
use uuid::Uuid;

use super::jobs::{instant, one_shot_record, settle};
use super::read_cache::ReadCache;
use super::records::{JobRecord, JobView, RunRecord, RunView, TriggerKind, TriggerRecord};
use super::{codec, decode_trigger, job_run_of, parse_data, AcquiredRun, KvJobStore, Prefetched, StoreError, Tx};
use crate::error::SchedulingError;
use crate::job::{
    bounded, check_data, merge_data, JobRun, JsonObject, RunCause, RunState, TriggerState, ERROR_CODE_LEN_MAX,
    ERROR_MESSAGE_LEN_MAX,
};
use crate::kv::{run, Kv, KvError, KvTransaction, MaybeCommitted, RangeRequest};
use crate::name::JobName;
use crate::rules::plan_retry;
use crate::schedule::{PreviousFire, ScheduleKind};
use crate::time::to_micros;

/// How a run ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RunOutcome {
    /// The job returned success.
    Succeeded,
    /// The job failed, panicked or timed out; retries per policy.
    Failed {
        /// The stable code (`SCHEDULING_TIMEOUT_001`, `SCHEDULING_UNEXPECTED_001`), the
        /// job's own, or none.
        code: Option<String>,
        /// What happened.
        message: String,
    },
    /// Canceled by request or node stop; never retried.
    Canceled {
        /// Why.
        message: String,
    },
}

/// The name of the retry trigger of run `id` (one per failed attempt: the next attempt
/// is a run of its own).
fn retry_name(id: Uuid) -> String {
    format!("retry-{}", id.simple())
}

impl RunOutcome {
    fn state(&self) -> RunState {
        match self {
            Self::Succeeded => RunState::Succeeded,
            Self::Failed { .. } => RunState::Failed,
            Self::Canceled { .. } => RunState::Canceled,
        }
    }
}

/// A node reporting that one of its runs ended.
#[derive(Debug, Clone)]
pub struct Completion {
    /// The run.
    pub run_id: Uuid,
    /// The node that ran it.
    pub node: Arc<str>,
    /// How it ended.
    pub outcome: RunOutcome,
    /// When.
    pub finished_at: DateTime<Utc>,
    /// Whether the run holds its trigger, as the run's start said
    /// ([`AcquiredRun::holds_trigger`]); `None` when not known. `Some(false)` spares the
    /// completion a read of the trigger: only the acquisition that made a run can make it
    /// hold its trigger, so a run that did not from its start never does.
    pub holds_trigger: Option<bool>,
}

/// What a completion did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CompletionResult {
    /// The run's stored final state. Differs from the outcome when the run had already
    /// ended otherwise (e.g. `Lost` after its node was declared lost): history is never
    /// overwritten by a late completion.
    pub state: RunState,
    /// Whether this completion is the one recorded.
    pub recorded: bool,
    /// The `retry-…` trigger created for the failed run.
    pub retry_trigger: Option<String>,
    /// The earliest fire this completion made due: a blocked trigger of the job returned
    /// to `Waiting` (usually due already), the job's interval trigger re-armed, or the
    /// retry. The node that ran the run can wake for it rather than at its next poll.
    /// `None` only when it wrote nothing to the due index: a node relies on that to keep
    /// what it knows of the index (the completion's own time when an earlier attempt of
    /// its transaction committed, whose writes are not known).
    pub next_due: Option<DateTime<Utc>>,
}

/// What a batch of completions read ahead (see `prefetch_completions`).
#[derive(Default)]
struct CompletionReads {
    /// The runs, as stored (each decoded as a [`RunView`] where used).
    runs: Prefetched,
    triggers: Prefetched<Option<TriggerRecord>>,
    /// The slots of non-concurrent jobs.
    slots: Prefetched,
    /// The per-job running index's entries of the runs holding their slot (snapshot
    /// reads): only stores written before have them.
    job_entries: Prefetched,
}

impl<K: Kv> KvJobStore<K> {
    /// Records the end of a run and everything that follows from it, in one transaction
    /// (blocked triggers beyond one batch are returned to `Waiting` in follow-up
    /// transactions before this returns).
    ///
    /// # Errors
    /// `SCHEDULING_NOTFOUND_004` for an unknown run; store errors.
    pub async fn complete_run(&self, completion: &Completion) -> Result<CompletionResult, StoreError> {
        let retry_uid = self.random_u64();
        let (result, blocked_left, job) = run(&self.kv, self.options.retry, |txn, maybe| async move {
            let mut none = CompletionReads::default();
            self.complete_in(&self.tx(txn), completion, retry_uid, maybe, &mut none, &mut ReadCache::default()).await
        })
        .await?;
        if blocked_left {
            self.unblock_all(&job).await?;
        }
        Ok(result)
    }

    /// [`complete_run`](Self::complete_run) for many runs in one transaction, with one
    /// result per completion, in order. Each completion has exactly the effects it has
    /// alone (later ones see earlier ones' writes). A store error fails every item alike
    /// (nothing was recorded, or, after an ambiguous commit, a retry finds each recorded);
    /// when an item fails on its own (e.g. an unknown run), or the batch is too large for
    /// one transaction, it is retried one completion per transaction, so the others are
    /// still recorded.
    pub async fn complete_runs(&self, completions: &[Completion]) -> Vec<Result<CompletionResult, StoreError>> {
        if completions.len() <= 1 {
            let mut out = Vec::with_capacity(1);
            for completion in completions {
                out.push(self.complete_run(completion).await);
            }
            return out;
        }
        let uids: Vec<u64> = completions.iter().map(|_| self.random_u64()).collect();
        let batch = run(&self.kv, self.options.retry, |txn, maybe| {
            let uids = &uids;
            async move {
                let tx = self.tx(txn);
                let mut cache = ReadCache::default();
                let mut reads = self.prefetch_completions(&tx, completions, &mut cache).await?;
                let mut out = Vec::with_capacity(completions.len());
                let mut seen = BTreeSet::new();
                for (completion, uid) in completions.iter().zip(uids) {
                    // A run's second completion in the batch is a late duplicate, also when
                    // this is the retry of an attempt that may have committed: only its
                    // first can be the one that attempt recorded.
                    let first = seen.insert(completion.run_id);
                    let maybe = MaybeCommitted(maybe.0 && first);
                    out.push(self.complete_in(&tx, completion, *uid, maybe, &mut reads, &mut cache).await?);
                }
                Ok::<_, StoreError>(out)
            }
        })
        .await;
        match batch {
            Ok(items) => {
                let mut out = Vec::with_capacity(items.len());
                for (result, blocked_left, job) in items {
                    out.push(match blocked_left {
                        true => self.unblock_all(&job).await.map(|()| result),
                        false => Ok(result),
                    });
                }
                out
            }
            // Records at their size limits can make a batch larger than one transaction may
            // be: then each completion on its own, as when one fails alone.
            Err(StoreError::Kv(error)) if error.code() != KvError::TRANSACTION_TOO_LARGE => {
                completions.iter().map(|_| Err(StoreError::Kv(error.clone()))).collect()
            }
            Err(_) => {
                let mut out = Vec::with_capacity(completions.len());
                for completion in completions {
                    out.push(self.complete_run(completion).await);
                }
                out
            }
        }
    }

    /// Reads ahead, together, what each completion of a batch reads first: the runs, then
    /// their jobs, triggers and slots. Two round trips on a remote store instead of up to
    /// four per run.
    async fn prefetch_completions(
        &self,
        tx: &Tx<'_, K::Transaction>,
        completions: &[Completion],
        cache: &mut ReadCache,
    ) -> Result<CompletionReads, StoreError> {
        let runs = tx.prefetch(completions.iter().map(|c| tx.keys.run(c.run_id)).collect(), false).await?;
        let views = runs
            .values()
            .map(|bytes| bytes.and_then(Option::as_deref).map(|bytes| codec::decode(bytes, "run record")).transpose())
            .collect::<Result<Vec<Option<RunView<'_>>>, _>>()?;
        let stored = || views.iter().flatten();
        let jobs: BTreeSet<&str> = stored().map(|run| run.job).collect();
        // The triggers of the runs that may hold theirs (`finish_interval_trigger`).
        let triggers = completions
            .iter()
            .zip(&views)
            .filter(|(completion, _)| completion.holds_trigger != Some(false))
            .filter_map(|(_, run)| {
                let run = run.as_ref()?;
                Some(self.keys.trigger(run.job, run.trigger?))
            })
            .collect();
        // The slots the runs of non-concurrent jobs free, each job's once.
        let mut exclusive_jobs = BTreeSet::new();
        let slots = stored()
            .filter(|run| run.exclusive && run.state == RunState::Running && exclusive_jobs.insert(run.job))
            .map(|run| self.keys.slot(run.job))
            .collect();
        let job_entries = stored()
            .filter(|run| run.exclusive && run.state == RunState::Running)
            .map(|run| self.keys.job_running(run.job, run.id))
            .collect();
        let ((), triggers, slots, job_entries) = try_join4(
            cache.jobs.prefetch(tx, jobs.into_iter()),
            tx.prefetch(triggers, false),
            tx.prefetch(slots, false),
            tx.prefetch(job_entries, true),
        )
        .await?;
        Ok(CompletionReads { triggers: triggers.try_map(decode_trigger)?, slots, runs, job_entries })
    }

    /// One completion inside `tx`: (result, more blocked triggers left, the job's name).
    async fn complete_in(
        &self,
        tx: &Tx<'_, K::Transaction>,
        completion: &Completion,
        retry_uid: u64,
        maybe: MaybeCommitted,
        reads: &mut CompletionReads,
        cache: &mut ReadCache,
    ) -> Result<(CompletionResult, bool, String), StoreError> {
        let id = completion.run_id;
        let bytes = tx
            .get_prefetched(&mut reads.runs, &self.keys.run(id), false, Ok)
            .await?
            .ok_or_else(|| SchedulingError::RunNotFound { run_id: id.to_string() })?;
        let stored: RunView<'_> = codec::decode(&bytes, "run record")?;
        let target = completion.outcome.state();
        if stored.state != RunState::Running || stored.node != &*completion.node {
            // A replay of our own committed completion, or a late one: keep history.
            let recorded = maybe.0 && stored.state == target && stored.node == &*completion.node;
            // What the committed attempt made due is not known: say "now", so the node looks.
            let next_due = recorded.then_some(completion.finished_at);
            // The retry it wrote, if it planned one, has the name it would write now.
            let retry_trigger = if recorded && target == RunState::Failed && !stored.local {
                let job = cache.jobs.get(tx, stored.job).await?;
                job.and_then(|job| plan_retry(job.retry.as_ref(), stored.attempt, completion.finished_at))
                    .map(|_| retry_name(id))
            } else {
                None
            };
            let result = CompletionResult { state: stored.state, recorded, retry_trigger, next_due };
            return Ok((result, false, stored.job.to_owned()));
        }
        // The record ends in place; what the rest reads of it (job, trigger, node, attempt,
        // data) the end does not change.
        let (error_code, error_message) = match &completion.outcome {
            RunOutcome::Succeeded => (None, None),
            RunOutcome::Failed { code, message } => (
                code.as_deref().map(|code| bounded(code, ERROR_CODE_LEN_MAX)),
                Some(bounded(message, ERROR_MESSAGE_LEN_MAX)),
            ),
            RunOutcome::Canceled { message } => (
                Some(SchedulingError::RunCanceled { run_id: id.to_string() }.code().to_owned()),
                Some(bounded(message, ERROR_MESSAGE_LEN_MAX)),
            ),
        };
        let was = stored.state;
        let ended = RunRecord {
            state: target,
            finished_us: Some(to_micros(completion.finished_at)),
            error_code: error_code.as_deref().filter(|_| !self.drops_codes(target)),
            error_message: error_message.as_deref(),
            ..stored
        };
        // Only this run's own start writes its entry: a snapshot read tells whether it did.
        let job_entry = !stored.exclusive
            || tx
                .get_prefetched(&mut reads.job_entries, &self.keys.job_running(stored.job, id), true, Ok)
                .await?
                .is_some();
        tx.put_run_ended(was, &ended, job_entry);
        let stored = ended;
        if cache.cancel_requested(tx, stored.node, id).await? {
            tx.txn.clear(&self.keys.cancel(stored.node, id));
        }
        let job = cache.jobs.get(tx, stored.job).await?;
        let (blocked_left, unblocked_due) = self.release(tx, &stored, job.as_ref(), &mut reads.slots).await?;
        let finished = completion.finished_at;
        let interval_due = match completion.holds_trigger {
            Some(false) => None,
            _ => self.finish_interval_trigger(tx, &stored, job.as_ref(), finished, &mut reads.triggers).await?,
        };
        let (mut retry_trigger, mut retry_due) = (None, None);
        if let (RunOutcome::Failed { .. }, false, Some(job)) = (&completion.outcome, stored.local, &job) {
            if let Some((name, due)) = self.write_retry(tx, &stored, job, retry_uid, completion.finished_at)? {
                (retry_trigger, retry_due) = (Some(name), Some(to_micros(due)));
            }
        }
        let next_due = [unblocked_due, interval_due, retry_due].into_iter().flatten().min().map(instant).transpose()?;
        let result = CompletionResult { state: target, recorded: true, retry_trigger, next_due };
        Ok((result, blocked_left, stored.job.to_owned()))
    }

    /// Frees the run's slot and returns up to one batch of blocked triggers to `Waiting`.
    /// Returns whether more blocked triggers remain, and the earliest due time of those
    /// returned.
    pub(crate) async fn release(
        &self,
        tx: &Tx<'_, K::Transaction>,
        run: &RunView<'_>,
        job: Option<&JobView<'_>>,
        slots: &mut Prefetched,
    ) -> Result<(bool, Option<i64>), StoreError> {
        if !run.exclusive {
            return Ok((false, None));
        }
        let mut slot = tx.slot_prefetched(slots, run.job).await?;
        if slot.holder != Some(run.id) {
            return Ok((false, None));
        }
        slot.holder = None;
        // Nothing blocked behind this run (the usual case): no range read.
        let mut unblocked = (false, None);
        if slot.blocked && !self.loses_unblocks() {
            unblocked = self.unblock(tx, run.job, job).await?;
            slot.blocked = unblocked.0;
        }
        if job.is_some() {
            tx.put_slot(run.job, &slot);
        } else {
            // The job was deleted while this run held its slot.
            tx.txn.clear(&self.keys.slot(run.job));
        }
        Ok(unblocked)
    }

    /// Whether a run ending in `state` loses its error code: the deliberate bug
    /// `CodesDropped` (feature `test-hooks`), for failed runs.
    fn drops_codes(&self, state: RunState) -> bool {
        #[cfg(feature = "test-hooks")]
        {
            self.options.broken == Some(super::BrokenStore::CodesDropped) && state == RunState::Failed
        }
        #[cfg(not(feature = "test-hooks"))]
        {
            let _ = state;
            false
        }
    }

    /// Whether releases leave blocked triggers blocked: the deliberate bug `UnblockLost`
    /// (feature `test-hooks`).
    fn loses_unblocks(&self) -> bool {
        #[cfg(feature = "test-hooks")]
        {
            self.options.broken == Some(super::BrokenStore::UnblockLost)
        }
        #[cfg(not(feature = "test-hooks"))]
        {
            false
        }
    }

    /// Returns up to one batch of `job`'s blocked triggers to `Waiting` (their due time
    /// kept, so the misfire policy applies when they are next taken). Reads the blocked
    /// set serializably: a fire blocking concurrently conflicts with this transaction.
    /// Returns whether more remain, and the earliest due time of those now waiting.
    async fn unblock(
        &self,
        tx: &Tx<'_, K::Transaction>,
        job_name: &str,
        job: Option<&JobView<'_>>,
    ) -> Result<(bool, Option<i64>), StoreError> {
        let (begin, end) = self.keys.blocked_of(job_name);
        let blocked = tx.txn.get_range(&RangeRequest::new(begin, end).limit(self.options.unblock_batch), false).await?;
        let mut earliest: Option<i64> = None;
        for (key, _) in &blocked.pairs {
            let name = self.keys.blocked_trigger_of(key)?;
            match tx.trigger(job_name, &name).await? {
                Some(trigger) if trigger.state == TriggerState::Blocked => {
                    let mut waiting = trigger.clone();
                    waiting.state = TriggerState::Waiting;
                    settle(&mut waiting, job.is_some_and(|j| j.paused));
                    if let (TriggerState::Waiting, Some(due)) = (waiting.state, waiting.next_fire_us) {
                        earliest = Some(earliest.map_or(due, |e| e.min(due)));
                    }
                    self.put_trigger_and_wake(tx, Some(&trigger), &waiting, false);
                }
                _ => tx.txn.clear(key),
            }
        }
        Ok((blocked.more, earliest))
    }

    /// Unblocks every blocked trigger of `job` whose slot is free, a batch per transaction.
    pub(crate) async fn unblock_all(&self, job: &str) -> Result<(), StoreError> {
        loop {
            let more = run(&self.kv, self.options.retry, |txn, _| async move {
                let tx = self.tx(txn);
                let record = tx.job(job).await?;
                if tx.slot(job).await?.holder.is_some() {
                    return Ok::<_, StoreError>(false);
                }
                Ok(self.unblock(&tx, job, record.as_ref().map(JobRecord::view).as_ref()).await?.0)
            })
            .await?;
            if !more {
                return Ok(());
            }
        }
    }

    /// The interval trigger whose run this was waits one interval from now.
    pub(crate) async fn finish_interval_trigger(
        &self,
        tx: &Tx<'_, K::Transaction>,
        run: &RunView<'_>,
        job: Option<&JobView<'_>>,
        finished: DateTime<Utc>,
        triggers: &mut Prefetched<Option<TriggerRecord>>,
    ) -> Result<Option<i64>, StoreError> {
        let (Some(trigger_name), Some(job)) = (&run.trigger, job) else { return Ok(None) };
        let Some(trigger) = tx.trigger_prefetched(triggers, run.job, trigger_name).await? else { return Ok(None) };
        if trigger.state != TriggerState::Acquired || trigger.running_run != Some(run.id) {
            return Ok(None);
        }
        let mut next = trigger.clone();
        next.running_run = None;
        let error = match self.schedules.get(&trigger.schedule) {
            Ok(schedule) if matches!(schedule.kind, ScheduleKind::Every { .. }) => {
                match self.missing_calendar(&schedule, run.node) {
                    Some(reason) => Some(reason),
                    None => {
                        let calendar = schedule.calendar.as_ref().and_then(|name| self.calendars.get(name));
                        #[cfg(feature = "test-hooks")]
                        let finished = match (self.options.broken, &schedule.kind) {
                            (Some(super::BrokenStore::IntervalTwice), ScheduleKind::Every { interval, .. }) => {
                                crate::time::add_duration(finished, *interval)
                            }
                            _ => finished,
                        };
                        let fire_count = trigger.fire_count;
                        #[cfg(feature = "test-hooks")]
                        let fire_count =
                            fire_count + u32::from(self.options.broken == Some(super::BrokenStore::RepeatShort));
                        let previous = PreviousFire {
                            scheduled_at: instant(run.scheduled_us)?,
                            completed_at: finished,
                            fire_count,
                        };
                        let due = schedule.next_fire(&previous, calendar);
                        next.next_fire_us = due.map(to_micros);
                        next.state = if due.is_some() { TriggerState::Waiting } else { TriggerState::Complete };
                        None
                    }
                }
            }
            _ => Some("acquired trigger without an interval schedule".to_owned()),
        };
        if let Some(reason) = error {
            next.state = TriggerState::Error;
            next.error = Some(reason);
        }
        settle(&mut next, job.paused);
        self.put_trigger_and_wake(tx, Some(&trigger), &next, job.run_on_every_instance);
        Ok(next.next_fire_us.filter(|_| next.state == TriggerState::Waiting))
    }

    /// The `retry-…` trigger of a failed run, and when it is due, if its job's policy
    /// allows another attempt.
    fn write_retry(
        &self,
        tx: &Tx<'_, K::Transaction>,
        run: &RunView<'_>,
        job: &JobView<'_>,
        uid: u64,
        failed_at: DateTime<Utc>,
    ) -> Result<Option<(String, DateTime<Utc>)>, StoreError> {
        let Some(plan) = plan_retry(job.retry.as_ref(), run.attempt, failed_at) else { return Ok(None) };
        let name = retry_name(run.id);
        let kind = TriggerKind::Retry { attempt: plan.attempt, retry_of: run.retry_of.unwrap_or(run.id) };
        let data = parse_data(run.data)?;
        let record = one_shot_record(run.job, &name, kind, &data, uid, plan.due);
        #[cfg(feature = "test-hooks")]
        if self.options.broken == Some(super::BrokenStore::RetryUnindexed) {
            tx.txn.set_owned(&self.keys.trigger(&record.job, &record.name), super::codec::encode(&record));
            return Ok(Some((name, plan.due)));
        }
        self.put_trigger_and_wake(tx, None, &record, false);
        Ok(Some((name, plan.due)))
    }

    /// Starts a run of `job` by hand on `node` (SPEC §9 `trigger`; the store's
    /// `try_begin_run(exclusive)`): for a non-concurrent job the slot is claimed atomically
    /// with the check. `run_id` comes from the caller, made before any retry.
    ///
    /// # Errors
    /// `SCHEDULING_NOTFOUND_001` for an unknown job, `SCHEDULING_CONFLICT_001` when a
    /// non-concurrent job is running, `SCHEDULING_UNAVAILABLE_004` when history is full,
    /// `SCHEDULING_VALIDATION_001` for data over [`DATA_LEN_MAX`](crate::job::DATA_LEN_MAX).
    pub async fn begin_manual_run(
        &self,
        job: &JobName,
        data: &JsonObject,
        node: &str,
        run_id: Uuid,
        now: DateTime<Utc>,
    ) -> Result<AcquiredRun, StoreError> {
        check_data("trigger data", data)?;
        run(&self.kv, self.options.retry, |txn, maybe| async move {
            let tx = self.tx(txn);
            let record =
                tx.job(job.as_str()).await?.ok_or_else(|| SchedulingError::JobNotFound { job: job.to_string() })?;
            let exclusive = !record.allow_concurrent;
            let timeout = record.timeout_us.map(std::time::Duration::from_micros);
            if maybe.0 {
                if let Some(existing) = tx.run(run_id).await? {
                    return Ok(AcquiredRun {
                        run: job_run_of(&existing.view())?,
                        job_type: record.job_type.clone(),
                        timeout,
                        holds_trigger: Some(false),
                        exclusive,
                    });
                }
            }
            if !self.node_may_run(&tx, node).await? {
                // Declared lost: a run started now would never be reaped if the node died.
                let reason = format!("node '{node}' was declared lost");
                return Err(SchedulingError::SchedulerNotRunning { reason }.into());
            }
            if exclusive {
                let mut slot = tx.slot(job.as_str()).await?;
                if slot.holder.is_some() {
                    return Err(SchedulingError::JobRunning { job: job.to_string() }.into());
                }
                slot.holder = Some(run_id);
                slot.generation += 1;
                tx.put_slot(job.as_str(), &slot);
            }
            self.make_room(&tx).await?;
            let data = merge_data([&parse_data(&record.data)?, data]);
            let job_run = JobRun {
                id: run_id,
                job: job.clone(),
                trigger: None,
                scheduled_at: now,
                cause: RunCause::Manual,
                attempt: 1,
                retry_of: None,
                data,
            };
            let run = RunRecord::running(&job_run, node, now, exclusive, false);
            tx.put_run(None, &run.view());
            self.count_runs_delta(&tx, 1);
            Ok(AcquiredRun {
                run: job_run_of(&run.view())?,
                job_type: record.job_type.clone(),
                timeout,
                exclusive,
                holds_trigger: Some(false),
            })
        })
        .await
    }

    /// The stored run, if any.
    ///
    /// # Errors
    /// Store errors.
    pub async fn run_record(&self, id: Uuid) -> Result<Option<RunRecord>, StoreError> {
        run(&self.kv, self.options.retry, |txn, _| async move { self.tx(txn).run(id).await }).await
    }

    /// A trigger's stored record, if any.
    ///
    /// # Errors
    /// Store errors.
    pub async fn trigger_record(
        &self,
        job: &str,
        trigger: &str,
    ) -> Result<Option<super::records::TriggerRecord>, StoreError> {
        run(&self.kv, self.options.retry, |txn, _| async move { self.tx(txn).trigger(job, trigger).await }).await
    }

    /// A job's stored record, if any.
    ///
    /// # Errors
    /// Store errors.
    pub async fn job_record(&self, job: &str) -> Result<Option<JobRecord>, StoreError> {
        run(&self.kv, self.options.retry, |txn, _| async move { self.tx(txn).job(job).await }).await
    }
}

#[cfg(test)]
mod tests {
    use crate::job::bounded;

    #[test]
    fn long_texts_are_cut_at_a_character_boundary_and_say_so() {
        assert_eq!(bounded("short", 10), "short");
        let cut = bounded(&"é".repeat(100), 40);
        assert!(cut.len() <= 40, "{cut}");
        assert!(cut.ends_with("… (cut from 200 bytes)"), "{cut}");
        assert!(cut.starts_with("éééé"));
        assert_eq!(bounded("abcdef", 3), "… (cut from 6 bytes)", "the note alone when there is no room");
    }
}
