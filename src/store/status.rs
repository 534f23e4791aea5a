//! Statuses (SPEC §9 `status`/`statuses`), code-job sync and restore (SPEC §9 "code jobs
//! changed at run time"), and local jobs (SPEC §7 `run_on_every_instance`).

use std::time::Duration;

use chrono::{DateTime, Utc};
use parking_lot::Mutex;

use super::jobs::{instant, Provenance};
use super::keys::{KeyRange, Keyspace};
use super::records::{JobRecord, RunRecord, RunSummary, SlotRecord, TriggerKind, TriggerRecord};
use super::{add_slot_holder, codec, decode_job, parse_data, KvJobStore, StoreError, Tx};

use crate::error::SchedulingError;
use crate::job::{
    JobDefinition, JobOrigin, JobRun, JobRunInfo, JobTriggerDefinition, JobTypeKey, RunState, TriggerState,
};
use crate::kv::{run, Kv, KvTransaction, RangeRequest};
use crate::name::{JobName, TriggerName};
use crate::schedule::JobSchedule;

/// How many code jobs one transaction of [`KvJobStore::sync_code_jobs`] writes: a few
/// round trips for thousands of jobs, and a transaction well within the store's limits
/// (a job and its triggers are a few hundred bytes).
pub(super) const SYNC_BATCH: usize = 64;

/// Jobs whose statuses one transaction of [`KvJobStore::statuses_brief`] and
/// [`KvJobStore::fill_last_finished`] reads.
pub const STATUS_PAGE: usize = 256;

/// What [`KvJobStore::sync_code_job`] does with a stored job (`old`) given whether it
/// stems from this very code: `None` keeps it as it is.
fn sync_decision(old: Option<&JobRecord>, same_code: bool) -> Option<SyncOutcome> {
    match old {
        None => Some(SyncOutcome::Created),
        Some(job) if same_code && job.origin == JobOrigin::Overridden => None,
        Some(job) if same_code && job.origin == JobOrigin::Code => None,
        Some(job) => Some(SyncOutcome::Rewritten { overwrote_runtime_change: job.origin != JobOrigin::Code }),
    }
}

/// A trigger as `status` shows it (and the admin API serves it).
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct TriggerStatus {
    /// Its name (including engine-made `manual-`, `retry-`, `recovery-` triggers).
    pub name: String,
    /// Its state.
    pub state: TriggerState,
    /// Paused by itself (its job's pause shows in the job status).
    pub paused: bool,
    /// The previous fire's scheduled time.
    pub previous_fire: Option<DateTime<Utc>>,
    /// The next fire.
    pub next_fire: Option<DateTime<Utc>>,
    /// Fires so far.
    pub fire_count: u32,
    /// Why it is in `Error`.
    pub error: Option<String>,
}

/// A job as `status` shows it.
#[derive(Debug, Clone, PartialEq)]
pub struct JobStatus {
    /// The stored definition.
    pub definition: JobDefinition,
    /// Where it came from.
    pub origin: JobOrigin,
    /// Paused.
    pub paused: bool,
    /// Its triggers.
    pub triggers: Vec<TriggerStatus>,
    /// Runs of it running now, anywhere.
    pub running: usize,
    /// Its latest finished run.
    pub last_finished: Option<JobRunInfo>,
}

/// What code-job sync did with one definition.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SyncOutcome {
    /// Not stored before (or deleted at run time): written.
    Created,
    /// Stored as this very code definition: nothing to do.
    Unchanged,
    /// Overridden at run time from this same code definition: the runtime change is kept.
    KeptOverride,
    /// The code definition changed: written back, origin `Code`. `overwrote_runtime_change`
    /// is true when a runtime change was replaced (the caller logs a warning).
    Rewritten {
        /// A runtime change was replaced.
        overwrote_runtime_change: bool,
    },
}

/// A local job (runs on every node on its own clock), for the node's refresh.
#[derive(Debug, Clone, PartialEq)]
pub struct LocalJob {
    /// The definition.
    pub definition: JobDefinition,
    /// Paused: no trigger fires.
    pub paused: bool,
    /// Names of individually paused triggers.
    pub paused_triggers: Vec<TriggerName>,
    /// Increases with every rewrite; a node recomputes its fires when it changes.
    pub revision: u64,
}

/// The local jobs as of one local-jobs stamp.
#[derive(Debug, Clone, PartialEq)]
pub struct LocalJobs {
    /// The stamp they were read at: pass it to the next
    /// [`local_jobs_since`](KvJobStore::local_jobs_since).
    pub stamp: u64,
    /// Every local job.
    pub jobs: Vec<LocalJob>,
}

/// Rebuilds a definition from records.
fn definition_of(job: &JobRecord, triggers: &[TriggerRecord]) -> Result<JobDefinition, StoreError> {
    let corrupt = |what: &str| StoreError::Corrupt(format!("job '{}': bad {what}", job.name));
    let mut def = JobDefinition::new(
        JobName::new(&job.name).map_err(|_| corrupt("name"))?,
        JobTypeKey::new(job.job_type.clone()).map_err(|_| corrupt("type"))?,
    );
    def.data = parse_data(&job.data)?;
    def.allow_concurrent = job.allow_concurrent;
    def.run_on_every_instance = job.run_on_every_instance;
    def.requests_recovery = job.requests_recovery;
    def.retry = job.retry;
    def.timeout = job.timeout_us.map(Duration::from_micros);
    def.description = job.description.clone();
    for trigger in triggers.iter().filter(|t| !t.kind.is_synthetic()) {
        let schedule: JobSchedule = trigger.schedule.parse().map_err(|_| corrupt("schedule"))?;
        let mut t =
            JobTriggerDefinition::new(TriggerName::new(&trigger.name).map_err(|_| corrupt("trigger name"))?, schedule);
        t.data = if trigger.data.is_empty() { Default::default() } else { parse_data(&trigger.data)? };
        t.priority = trigger.priority;
        t.misfire = trigger.misfire;
        t.description = trigger.description.clone();
        def.triggers.push(t);
    }
    Ok(def)
}

/// A job's status from its records, without its latest finished run.
fn brief_status(job: &JobRecord, triggers: &[TriggerRecord], running: usize) -> Result<JobStatus, StoreError> {
    Ok(JobStatus {
        definition: definition_of(job, triggers)?,
        origin: job.origin,
        paused: job.paused,
        triggers: triggers.iter().map(trigger_status).collect::<Result<_, _>>()?,
        running,
        last_finished: None,
    })
}

fn trigger_status(t: &TriggerRecord) -> Result<TriggerStatus, StoreError> {
    Ok(TriggerStatus {
        name: t.name.clone(),
        state: t.state,
        paused: t.paused,
        previous_fire: t.previous_fire_us.map(instant).transpose()?,
        next_fire: t.next_fire_us.map(instant).transpose()?,
        fire_count: t.fire_count,
        error: t.error.clone(),
    })
}

impl<K: Kv> KvJobStore<K> {
    /// The status of `job`, or `None` when it is not stored. Snapshot reads.
    ///
    /// # Errors
    /// Store errors.
    pub async fn status(&self, job: &JobName) -> Result<Option<JobStatus>, StoreError> {
        run(&self.kv, self.options.retry, |txn, _| async move { self.status_in(&self.tx(txn), job.as_str()).await })
            .await
    }

    async fn status_in(&self, tx: &Tx<'_, K::Transaction>, name: &str) -> Result<Option<JobStatus>, StoreError> {
        let Some(bytes) = tx.txn.get(&self.keys.job(name), true).await? else { return Ok(None) };
        let job: JobRecord = codec::decode(&bytes, "job record")?;
        let triggers = self.triggers_snapshot(tx, name).await?;
        let running = tx.running_of_job(name, true).await?.len();
        let mut status = brief_status(&job, &triggers, running)?;
        status.last_finished = self.last_finished_in(tx, name).await?;
        Ok(Some(status))
    }

    /// The newest finished run of `job` by scheduled time, if history keeps one.
    async fn last_finished_in(&self, tx: &Tx<'_, K::Transaction>, job: &str) -> Result<Option<JobRunInfo>, StoreError> {
        // The history index holds finished runs: its newest entry is the one. A store
        // written by earlier versions also holds entries of runs still running, passed
        // over within the latest 100.
        let (begin, end) = self.keys.history_of_job(job, i64::MIN, i64::MAX);
        for limit in [1, 100] {
            let range = RangeRequest::new(begin.clone(), end.clone()).limit(limit).reversed();
            let recent = tx.txn.get_range(&range, true).await?;
            for (key, value) in &recent.pairs {
                let summary: RunSummary = codec::decode(value, "run summary")?;
                if summary.state.is_final() {
                    let (_, id) = self.keys.history_entry_of(key, true)?;
                    let Some(bytes) = tx.txn.get(&self.keys.run(id), true).await? else { return Ok(None) };
                    let record: RunRecord = codec::decode(&bytes, "run record")?;
                    return super::history::run_info(&record).map(Some);
                }
            }
            if !recent.more {
                break;
            }
        }
        Ok(None)
    }

    /// The triggers of `job`, read without conflicts.
    async fn triggers_snapshot(
        &self,
        tx: &Tx<'_, K::Transaction>,
        job: &str,
    ) -> Result<Vec<TriggerRecord>, StoreError> {
        let (begin, end) = self.keys.triggers_of(job);
        let range = tx.txn.get_range(&RangeRequest::new(begin, end), true).await?;
        range.pairs.iter().map(|(_, v)| codec::decode(v, "trigger record")).collect()
    }

    /// The status of every job, by name: [`statuses_brief`](Self::statuses_brief) with
    /// each job's latest finished run filled in.
    ///
    /// # Errors
    /// Store errors.
    pub async fn statuses(&self) -> Result<Vec<JobStatus>, StoreError> {
        let mut statuses = self.statuses_brief().await?;
        self.fill_last_finished(&mut statuses).await?;
        Ok(statuses)
    }

    /// The status of every job, by name, without its latest finished run
    /// (`last_finished` is `None`): what a list filters, counts and pages on. Read
    /// [`STATUS_PAGE`] jobs a transaction, each page in three range reads (the jobs, their
    /// triggers, their running runs) rather than reads per job; each page is one snapshot,
    /// the whole is not (a job changed meanwhile shows as one page saw it).
    ///
    /// # Errors
    /// Store errors.
    pub async fn statuses_brief(&self) -> Result<Vec<JobStatus>, StoreError> {
        let (mut begin, end) = self.keys.jobs();
        let mut statuses = Vec::new();
        loop {
            let jobs = RangeRequest::new(begin.clone(), end.clone()).limit(STATUS_PAGE);
            let (page, more) = run(&self.kv, self.options.retry, |txn, _| {
                let jobs = &jobs;
                async move { self.status_page(&self.tx(txn), jobs).await }
            })
            .await?;
            match page.last() {
                Some(last) if more => {
                    begin = crate::kv::key_after(&self.keys.job(last.definition.name.as_str()));
                    statuses.extend(page);
                }
                _ => {
                    statuses.extend(page);
                    return Ok(statuses);
                }
            }
        }
    }

    /// The brief statuses of the jobs `jobs` reads, and whether more follow.
    async fn status_page(
        &self,
        tx: &Tx<'_, K::Transaction>,
        jobs: &RangeRequest,
    ) -> Result<(Vec<JobStatus>, bool), StoreError> {
        let page = tx.txn.get_range(jobs, true).await?;
        let (Some((first, _)), Some((last, _))) = (page.pairs.first(), page.pairs.last()) else {
            return Ok((Vec::new(), false));
        };
        let (first, last) = (self.keys.job_name_of(first)?, self.keys.job_name_of(last)?);
        // Names sort as their keys do, so the page's triggers and running runs are one
        // range each.
        let span =
            |of: fn(&Keyspace, &str) -> KeyRange| RangeRequest::new(of(&self.keys, &first).0, of(&self.keys, &last).1);
        let triggers = tx.txn.get_range(&span(Keyspace::triggers_of), true).await?;
        let running = tx.txn.get_range(&span(Keyspace::running_of_job), true).await?;
        let (slots_begin, slots_end) = self.keys.slots_between(&first, &last);
        let slots = tx.txn.get_range(&RangeRequest::new(slots_begin, slots_end), true).await?;
        let mut triggers = triggers
            .pairs
            .iter()
            .map(|(_, v)| codec::decode::<TriggerRecord>(v, "trigger record"))
            .collect::<Result<Vec<_>, _>>()?
            .into_iter()
            .peekable();
        let mut running = running
            .pairs
            .iter()
            .map(|(key, _)| self.keys.job_running_of(key))
            .collect::<Result<Vec<_>, _>>()?
            .into_iter()
            .peekable();
        // The slots' holders: the running runs of non-concurrent jobs (see `running_of_job`).
        let mut holders = slots
            .pairs
            .iter()
            .map(|(key, value)| Ok((self.keys.slot_job_of(key)?, SlotRecord::decode(value)?.holder)))
            .collect::<Result<Vec<_>, StoreError>>()?
            .into_iter()
            .peekable();
        let mut statuses = Vec::with_capacity(page.pairs.len());
        for (_, value) in &page.pairs {
            let job: JobRecord = codec::decode(value, "job record")?;
            // Entries of a job whose record is gone are passed over (none in a store
            // written whole by its transactions).
            let mut own_triggers = Vec::new();
            while let Some(trigger) = triggers.next_if(|t| t.job.as_str() <= job.name.as_str()) {
                if trigger.job == job.name {
                    own_triggers.push(trigger);
                }
            }
            let mut own_running = Vec::new();
            while let Some((run_of, id)) = running.next_if(|(j, _)| j.as_str() <= job.name.as_str()) {
                if run_of == job.name {
                    own_running.push(id);
                }
            }
            while let Some((slot_of, holder)) = holders.next_if(|(j, _)| j.as_str() <= job.name.as_str()) {
                if slot_of == job.name {
                    add_slot_holder(&mut own_running, holder);
                }
            }
            let own_running = own_running.len();
            statuses.push(brief_status(&job, &own_triggers, own_running)?);
        }
        Ok((statuses, page.more))
    }

    /// Fills in `last_finished` of each of `statuses` (their latest finished runs as
    /// history keeps them), [`STATUS_PAGE`] jobs a transaction.
    ///
    /// # Errors
    /// Store errors.
    pub async fn fill_last_finished(&self, statuses: &mut [JobStatus]) -> Result<(), StoreError> {
        for page in statuses.chunks_mut(STATUS_PAGE) {
            let names: Vec<&str> = page.iter().map(|s| s.definition.name.as_str()).collect();
            let names = &names;
            let last = run(&self.kv, self.options.retry, |txn, _| async move {
                let tx = &self.tx(txn);
                // Read together: one round trip per step on a remote store, not per job.
                futures_util::future::try_join_all(names.iter().map(|name| self.last_finished_in(tx, name))).await
            })
            .await?;
            for (status, last) in page.iter_mut().zip(last) {
                status.last_finished = last;
            }
        }
        Ok(())
    }

    /// Every stored job name, ascending (paged over transactions).
    ///
    /// # Errors
    /// Store errors.
    pub async fn job_names(&self) -> Result<Vec<JobName>, StoreError> {
        let (mut begin, end) = self.keys.jobs();
        let mut names = Vec::new();
        loop {
            let range = RangeRequest::new(begin.clone(), end.clone()).limit(super::SCAN_BUDGET);
            let page = run(&self.kv, self.options.retry, |txn, _| {
                let range = &range;
                async move { Ok::<_, StoreError>(txn.get_range(range, true).await?) }
            })
            .await?;
            for (key, _) in &page.pairs {
                let name = self.keys.job_name_of(key)?;
                names.push(JobName::new(name).map_err(|e| StoreError::Corrupt(e.to_string()))?);
            }
            match page.pairs.last() {
                Some((last, _)) if page.more => begin = crate::kv::key_after(last),
                _ => return Ok(names),
            }
        }
    }

    /// Writes a code job at start (SPEC §9): a new or changed code definition is written
    /// with origin `Code`; a job overridden at run time from this same code definition
    /// keeps the runtime change; paused state is always kept.
    ///
    /// # Errors
    /// `SCHEDULING_VALIDATION_001` for an invalid definition; store errors.
    pub async fn sync_code_job(&self, def: &JobDefinition, now: DateTime<Utc>) -> Result<SyncOutcome, StoreError> {
        let mut outcomes = self.write_code(&[def], now, sync_decision).await?;
        outcomes.pop().unwrap_or(Ok(SyncOutcome::Unchanged))
    }

    /// [`Self::sync_code_job`] for each of `defs`, 64 jobs a transaction (a node
    /// with thousands of code jobs starts taking fires after a few round trips, not one
    /// per job), in order. One job's refusal (an invalid definition, a switch between
    /// local and cluster-unique refused while runs go) is its own outcome; the others are
    /// written.
    ///
    /// # Errors
    /// Store errors (nothing of the failed batch is written; earlier batches are).
    pub async fn sync_code_jobs(
        &self,
        defs: &[&JobDefinition],
        now: DateTime<Utc>,
    ) -> Result<Vec<Result<SyncOutcome, StoreError>>, StoreError> {
        let mut outcomes = Vec::with_capacity(defs.len());
        for batch in defs.chunks(SYNC_BATCH) {
            outcomes.extend(self.write_code(batch, now, sync_decision).await?);
        }
        Ok(outcomes)
    }

    /// Puts a job back to its code definition `def` (SPEC §9 `restore`), keeping paused
    /// state and the progress of same-named triggers whose schedule is unchanged. The
    /// caller supplies the code definition from its registry (and answers
    /// `SCHEDULING_NOTFOUND_005` when it has none).
    ///
    /// # Errors
    /// `SCHEDULING_VALIDATION_001` for an invalid definition; store errors.
    pub async fn restore(&self, def: &JobDefinition, now: DateTime<Utc>) -> Result<(), StoreError> {
        let rewrite = |_: Option<&JobRecord>, _| Some(SyncOutcome::Rewritten { overwrote_runtime_change: false });
        let mut outcomes = self.write_code(&[def], now, rewrite).await?;
        outcomes.pop().unwrap_or(Ok(SyncOutcome::Unchanged)).map(|_| ())
    }

    /// Writes each of `defs` as a code job (origin `Code`, its fingerprint kept), in one
    /// transaction, when `decide`, given the stored job and whether it stems from this very
    /// code, returns an outcome; when it returns `None` the stored job stays as it is.
    /// Each job's own refusal is its outcome.
    async fn write_code(
        &self,
        defs: &[&JobDefinition],
        now: DateTime<Utc>,
        decide: impl Fn(Option<&JobRecord>, bool) -> Option<SyncOutcome>,
    ) -> Result<Vec<Result<SyncOutcome, StoreError>>, StoreError> {
        // Checked once: a refused definition is refused on every attempt.
        let prepared: Vec<Result<(String, Vec<u64>), SchedulingError>> = defs
            .iter()
            .map(|def| {
                def.validate(Some(&self.calendars))?;
                Ok((def.fingerprint(), def.triggers.iter().map(|_| self.random_u64()).collect()))
            })
            .collect();
        // What the last attempt that wrote decided for each job: a retry after its commit
        // was reported unknown finds the write done, and reports what it did.
        let decided = Mutex::new(vec![None; defs.len()]);
        let (prepared, decide, decided) = (&prepared, &decide, &decided);
        run(&self.kv, self.options.retry, |txn, maybe| async move {
            let tx = self.tx(txn);
            let keys: Vec<Vec<u8>> = defs.iter().map(|def| self.keys.job(def.name.as_str()).into_vec()).collect();
            let olds = tx.txn.get_many(&keys, false).await?;
            let mut outcomes = Vec::with_capacity(defs.len());
            let mut wrote = vec![None; defs.len()];
            for (i, (def, old)) in defs.iter().zip(olds).enumerate() {
                let (fingerprint, uids) = match &prepared[i] {
                    Ok(prepared) => prepared,
                    Err(refused) => {
                        outcomes.push(Err(refused.clone().into()));
                        continue;
                    }
                };
                let old = decode_job(old)?;
                let same_code =
                    old.as_ref().is_some_and(|j| j.code_fingerprint.as_deref() == Some(fingerprint.as_str()));
                let Some(outcome) = decide(old.as_ref(), same_code) else {
                    let earlier = decided.lock()[i].filter(|_| maybe.0);
                    let kept = old.as_ref().map_or(SyncOutcome::Unchanged, |j| {
                        if j.origin == JobOrigin::Overridden {
                            SyncOutcome::KeptOverride
                        } else {
                            SyncOutcome::Unchanged
                        }
                    });
                    outcomes.push(Ok(earlier.unwrap_or(kept)));
                    continue;
                };
                let provenance = Provenance { origin: JobOrigin::Code, code_fingerprint: Some(fingerprint.clone()) };
                // Refusals come before the first write of the job (see `write_definition`).
                match self.write_definition(&tx, def, old.as_ref(), provenance, uids, now).await {
                    Ok(()) => {
                        wrote[i] = Some(outcome);
                        outcomes.push(Ok(outcome));
                    }
                    Err(StoreError::Scheduling(refused)) => outcomes.push(Err(refused.into())),
                    Err(error) => return Err(error),
                }
            }
            *decided.lock() = wrote;
            Ok::<_, StoreError>(outcomes)
        })
        .await
    }

    /// Every local job (snapshot), for a node's refresh of its local triggers.
    ///
    /// # Errors
    /// Store errors.
    pub async fn local_jobs(&self) -> Result<Vec<LocalJob>, StoreError> {
        Ok(self.local_jobs_since(None).await?.map(|listing| listing.jobs).unwrap_or_default())
    }

    /// Every local job (snapshot) with the stamp it was read at, or `None` when the stamp
    /// is still `known`: nothing a node's local triggers depend on changed since that
    /// listing. A node polls this every few cycles, so an unchanged cluster costs one read.
    ///
    /// # Errors
    /// Store errors.
    pub async fn local_jobs_since(&self, known: Option<u64>) -> Result<Option<LocalJobs>, StoreError> {
        run(&self.kv, self.options.retry, |txn, _| async move {
            let tx = self.tx(txn);
            let stamp = tx.txn.get(&self.keys.local_jobs_stamp(), true).await?;
            let stamp = stamp.map_or(Ok(0), |bytes| {
                <[u8; 8]>::try_from(bytes.as_slice())
                    .map(u64::from_le_bytes)
                    .map_err(|_| StoreError::Corrupt("local-jobs stamp is not 8 bytes".into()))
            })?;
            if known == Some(stamp) {
                return Ok(None);
            }
            let (begin, end) = self.keys.local_jobs();
            let listing = tx.txn.get_range(&RangeRequest::new(begin, end), true).await?;
            let mut jobs = Vec::new();
            for (key, _) in &listing.pairs {
                let name = self.keys.local_job_name_of(key)?;
                let Some(bytes) = tx.txn.get(&self.keys.job(&name), true).await? else { continue };
                let job: JobRecord = codec::decode(&bytes, "job record")?;
                let triggers = self.triggers_snapshot(&tx, &name).await?;
                let paused_triggers = triggers
                    .iter()
                    .filter(|t| t.paused && t.kind == TriggerKind::Defined)
                    .map(|t| TriggerName::new(&t.name).map_err(|e| StoreError::Corrupt(e.to_string())))
                    .collect::<Result<_, _>>()?;
                jobs.push(LocalJob {
                    definition: definition_of(&job, &triggers)?,
                    paused: job.paused,
                    paused_triggers,
                    revision: job.revision,
                });
            }
            Ok::<_, StoreError>(Some(LocalJobs { stamp, jobs }))
        })
        .await
    }

    /// Records the start of a local job's run on `node` (it still goes to history; no
    /// slot: "not concurrent" is judged on the node). `Ok(false)`: the run must not start,
    /// because the job is no longer a local job (deleted, or made cluster-unique since the
    /// node last read its local jobs), or because an earlier attempt recorded the run and
    /// it has ended since (the node, not knowing that attempt committed, reclaimed the run
    /// as lost). The job is read serializably, so a change racing this start either sees
    /// the run (and the switch rule of `schedule` applies) or is seen by it.
    ///
    /// # Errors
    /// `SCHEDULING_UNAVAILABLE_004` when history is full; store errors.
    pub async fn begin_local_run(&self, job_run: &JobRun, node: &str, now: DateTime<Utc>) -> Result<bool, StoreError> {
        run(&self.kv, self.options.retry, |txn, _| async move {
            let tx = self.tx(txn);
            if let Some(recorded) = tx.run(job_run.id).await? {
                // An earlier attempt committed (its result was reported unknown).
                return Ok::<_, StoreError>(recorded.state == RunState::Running && recorded.node == node);
            }
            if !self.node_may_run(&tx, node).await? {
                // Declared lost: the leader no longer watches this node, so a run recorded
                // now would stay `Running` for ever if the node then died.
                let reason = format!("node '{node}' was declared lost");
                return Err(crate::error::SchedulingError::SchedulerNotRunning { reason }.into());
            }
            if !tx.job(job_run.job.as_str()).await?.is_some_and(|job| job.run_on_every_instance) {
                return Ok(false);
            }
            #[cfg(feature = "test-hooks")]
            if self.options.broken == Some(super::BrokenStore::LocalRunsRefused) {
                return Ok(false);
            }
            self.make_room(&tx).await?;
            let record = RunRecord::running(job_run, node, now, false, true);
            tx.put_run(None, &record.view());
            self.count_runs_delta(&tx, 1);
            Ok(true)
        })
        .await
    }
}
