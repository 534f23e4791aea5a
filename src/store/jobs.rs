//! Job definitions at run time: schedule, unschedule, pause and resume, enqueue.

use chrono::{DateTime, Utc};
use uuid::Uuid;

use super::records::{JobRecord, TriggerKind, TriggerRecord};
use super::{data_text, KvJobStore, StoreError, Tx};
use crate::error::SchedulingError;
use crate::job::{check_data, JobDefinition, JobOrigin, JobTriggerDefinition, JsonObject, MisfirePolicy, TriggerState};
use crate::kv::{run, Kv, KvTransaction};
use crate::name::{JobName, TriggerKey, TriggerName};
use crate::schedule::JobSchedule;
use crate::time::from_micros;
use crate::time::to_micros;

/// Where a definition being written comes from.
pub(crate) struct Provenance {
    /// The origin to record.
    pub(crate) origin: JobOrigin,
    /// The code definition's fingerprint, for code and overridden jobs.
    pub(crate) code_fingerprint: Option<String>,
}

/// Whether a trigger in `state` takes part in pausing (running and finished ones do not).
fn pausable(state: TriggerState) -> bool {
    matches!(state, TriggerState::Waiting | TriggerState::Paused | TriggerState::Blocked)
}

/// Puts a trigger in the state its pause flags call for: `Paused` while its job or itself
/// is paused; back to `Waiting` (keeping its due time, so the misfire policy applies at the
/// next acquisition) when neither is.
pub(crate) fn settle(trigger: &mut TriggerRecord, job_paused: bool) {
    // One-shot triggers the engine made (enqueue, retry, recovery) ignore pause: nothing
    // would ever resume them.
    if !pausable(trigger.state) || trigger.kind.is_synthetic() {
        return;
    }
    let paused = job_paused || trigger.paused;
    trigger.state = match (paused, trigger.state, trigger.next_fire_us) {
        (true, _, _) => TriggerState::Paused,
        (false, TriggerState::Paused, Some(_)) => TriggerState::Waiting,
        (false, TriggerState::Paused, None) => TriggerState::Complete,
        (false, state, _) => state,
    };
}

impl<K: Kv> KvJobStore<K> {
    /// Adds or wholly replaces each job and its triggers (SPEC §9 `schedule`). A replaced
    /// code job becomes `Overridden` and keeps its code fingerprint; paused state is kept;
    /// a trigger with the same name and schedule keeps its progress; engine-made one-shot
    /// triggers (manual, retry, recovery) are kept. The job type must be checked by the
    /// caller (it knows the registry).
    ///
    /// # Errors
    /// Per item: `SCHEDULING_VALIDATION_001` for an invalid definition (unknown calendar
    /// included), `SCHEDULING_CONFLICT_001` when a non-concurrent job would become local
    /// (`run_on_every_instance`) while a run of it taken from the store is going, or
    /// cluster-unique while a local run of it is going (its runs could then overlap; try
    /// again once they ended),
    /// `SCHEDULING_UNAVAILABLE_003` when the store fails.
    pub async fn schedule(&self, defs: &[JobDefinition], now: DateTime<Utc>) -> Vec<Result<(), SchedulingError>> {
        let mut results = Vec::with_capacity(defs.len());
        for def in defs {
            results.push(self.schedule_one(def, now).await.map_err(SchedulingError::from));
        }
        results
    }

    async fn schedule_one(&self, def: &JobDefinition, now: DateTime<Utc>) -> Result<(), StoreError> {
        def.validate(Some(&self.calendars))?;
        let uids: Vec<u64> = def.triggers.iter().map(|_| self.random_u64()).collect();
        let uids = &uids;
        run(&self.kv, self.options.retry, |txn, _| async move {
            let tx = self.tx(txn);
            let old = tx.job(def.name.as_str()).await?;
            let provenance = match &old {
                Some(job) if job.origin != JobOrigin::Runtime => {
                    Provenance { origin: JobOrigin::Overridden, code_fingerprint: job.code_fingerprint.clone() }
                }
                _ => Provenance { origin: JobOrigin::Runtime, code_fingerprint: None },
            };
            self.write_definition(&tx, def, old.as_ref(), provenance, uids, now).await
        })
        .await
    }

    /// Writes `def` over the stored job `old`.
    pub(crate) async fn write_definition(
        &self,
        tx: &Tx<'_, K::Transaction>,
        def: &JobDefinition,
        old: Option<&JobRecord>,
        provenance: Provenance,
        uids: &[u64],
        now: DateTime<Utc>,
    ) -> Result<(), StoreError> {
        // A local run holds no cluster slot, and a run taken from the store is unknown to
        // the local triggers of a node that started it while the job was not local: a
        // non-concurrent job that becomes local or cluster-unique (or is added again under
        // a deleted job's name) while runs of the other kind go could run twice at once.
        let switches = old.is_none_or(|old| old.run_on_every_instance != def.run_on_every_instance);
        let exclusive = !def.allow_concurrent || old.is_some_and(|old| !old.allow_concurrent);
        if switches && exclusive && tx.runs_of_the_other_kind(def.name.as_str(), def.run_on_every_instance).await? {
            return Err(SchedulingError::JobRunning { job: def.name.to_string() }.into());
        }
        let paused = old.is_some_and(|job| job.paused);
        let record = JobRecord {
            name: def.name.to_string(),
            job_type: def.job_type.to_string(),
            data: data_text(&def.data),
            allow_concurrent: def.allow_concurrent,
            run_on_every_instance: def.run_on_every_instance,
            requests_recovery: def.requests_recovery,
            retry: def.retry,
            timeout_us: def.timeout.map(|t| t.as_micros().min(u128::from(u64::MAX)) as u64),
            description: def.description.clone(),
            origin: provenance.origin,
            code_fingerprint: provenance.code_fingerprint,
            paused,
            revision: old.map_or(1, |job| job.revision + 1),
        };
        let old_triggers = tx.triggers_of(def.name.as_str()).await?;
        let dropped: Vec<&TriggerRecord> = old_triggers
            .iter()
            .filter(|old| !old.kind.is_synthetic() && !def.triggers.iter().any(|t| t.name.as_str() == old.name))
            .collect();
        let triggers: Vec<(Option<&TriggerRecord>, TriggerRecord)> = def
            .triggers
            .iter()
            .zip(uids)
            .map(|(trigger, uid)| {
                let previous = old_triggers.iter().find(|t| t.name == trigger.name.as_str() && !t.kind.is_synthetic());
                (previous, self.defined_trigger(def, trigger, previous, *uid, paused, now))
            })
            .collect();
        // The definition as stored already (applied again, or the retry of a write whose
        // commit was reported unknown): nothing to write, and the revision stays, so nodes
        // keep their local fires' progress.
        let same_job = old.is_some_and(|old| *old == JobRecord { revision: old.revision, ..record.clone() });
        if same_job && dropped.is_empty() && triggers.iter().all(|(previous, new)| *previous == Some(new)) {
            return Ok(());
        }
        tx.put_job(&record);
        for old_trigger in dropped {
            tx.delete_trigger(old_trigger);
        }
        for (previous, new) in &triggers {
            self.put_trigger_and_wake(tx, *previous, new, def.run_on_every_instance);
        }
        Ok(())
    }

    /// The record of a defined trigger: a trigger whose schedule did not change keeps its
    /// progress; anything else starts afresh from `now`.
    fn defined_trigger(
        &self,
        def: &JobDefinition,
        trigger: &JobTriggerDefinition,
        previous: Option<&TriggerRecord>,
        uid: u64,
        job_paused: bool,
        now: DateTime<Utc>,
    ) -> TriggerRecord {
        let schedule = trigger.schedule.to_string();
        let mut record = match previous.filter(|p| p.schedule == schedule && p.state != TriggerState::Error) {
            Some(previous) => previous.clone(),
            None => {
                let calendar = trigger.schedule.calendar.as_ref().and_then(|name| self.calendars.get(name));
                let next = trigger.schedule.first_fire(now, calendar);
                #[cfg(feature = "test-hooks")]
                let next = next.filter(|_| {
                    previous.is_none() || self.options.broken != Some(super::BrokenStore::RescheduleStalls)
                });
                TriggerRecord {
                    job: def.name.to_string(),
                    name: trigger.name.to_string(),
                    schedule: schedule.clone(),
                    data: String::new(),
                    priority: trigger.priority,
                    misfire: trigger.misfire,
                    description: None,
                    kind: TriggerKind::Defined,
                    state: if next.is_some() { TriggerState::Waiting } else { TriggerState::Complete },
                    paused: previous.is_some_and(|p| p.paused),
                    next_fire_us: next.map(to_micros),
                    previous_fire_us: None,
                    fire_count: 0,
                    uid,
                    running_run: None,
                    error: None,
                }
            }
        };
        record.data = data_text(&trigger.data);
        record.priority = trigger.priority;
        record.misfire = trigger.misfire;
        record.description = trigger.description.clone();
        settle(&mut record, job_paused);
        record
    }

    /// Deletes each job and its triggers (SPEC §9 `unschedule`). Running runs finish and
    /// history is kept.
    ///
    /// # Errors
    /// Per item: `SCHEDULING_NOTFOUND_001` for an unknown job.
    pub async fn unschedule(&self, names: &[JobName]) -> Vec<Result<(), SchedulingError>> {
        let mut results = Vec::with_capacity(names.len());
        for name in names {
            let result = run(&self.kv, self.options.retry, |txn, maybe| async move {
                let tx = self.tx(txn);
                let Some(_) = tx.job(name.as_str()).await? else {
                    // After an ambiguous commit, a missing job is our own deletion.
                    return if maybe.0 {
                        Ok(())
                    } else {
                        Err(SchedulingError::JobNotFound { job: name.to_string() }.into())
                    };
                };
                for trigger in tx.triggers_of(name.as_str()).await? {
                    tx.delete_trigger(&trigger);
                }
                tx.delete_job(name.as_str()).await?;
                Ok::<_, StoreError>(())
            })
            .await;
            results.push(result.map_err(SchedulingError::from));
        }
        results
    }

    /// Pauses (`paused = true`) or resumes each job: all its triggers. On resume, missed
    /// fires follow each trigger's misfire policy at the next acquisition.
    ///
    /// # Errors
    /// Per item: `SCHEDULING_NOTFOUND_001` for an unknown job.
    pub async fn set_jobs_paused(&self, names: &[JobName], paused: bool) -> Vec<Result<(), SchedulingError>> {
        let mut results = Vec::with_capacity(names.len());
        for name in names {
            let result = run(&self.kv, self.options.retry, |txn, _| async move {
                let tx = self.tx(txn);
                let mut job = tx
                    .job(name.as_str())
                    .await?
                    .ok_or_else(|| SchedulingError::JobNotFound { job: name.to_string() })?;
                if job.paused == paused {
                    return Ok::<_, StoreError>(());
                }
                job.paused = paused;
                tx.put_job(&job);
                for trigger in tx.triggers_of(name.as_str()).await? {
                    if trigger.kind.is_synthetic() {
                        continue;
                    }
                    let mut next = trigger.clone();
                    settle(&mut next, paused);
                    if next.state != trigger.state {
                        self.put_trigger_and_wake(&tx, Some(&trigger), &next, job.run_on_every_instance);
                    }
                }
                Ok(())
            })
            .await;
            results.push(result.map_err(SchedulingError::from));
        }
        results
    }

    /// Pauses or resumes single triggers. A trigger resumed while its job is paused stays
    /// paused until the job resumes.
    ///
    /// # Errors
    /// Per item: `SCHEDULING_NOTFOUND_003` for an unknown job or trigger.
    pub async fn set_triggers_paused(&self, keys: &[TriggerKey], paused: bool) -> Vec<Result<(), SchedulingError>> {
        let mut results = Vec::with_capacity(keys.len());
        for key in keys {
            let result = run(&self.kv, self.options.retry, |txn, _| async move {
                let tx = self.tx(txn);
                let not_found =
                    || SchedulingError::TriggerNotFound { job: key.job.to_string(), trigger: key.trigger.to_string() };
                let job = tx.job(key.job.as_str()).await?.ok_or_else(not_found)?;
                let trigger = tx.trigger(key.job.as_str(), key.trigger.as_str()).await?.ok_or_else(not_found)?;
                if trigger.paused == paused {
                    return Ok::<_, StoreError>(());
                }
                let mut next = trigger.clone();
                next.paused = paused;
                settle(&mut next, job.paused);
                self.put_trigger_and_wake(&tx, Some(&trigger), &next, job.run_on_every_instance);
                Ok(())
            })
            .await;
            results.push(result.map_err(SchedulingError::from));
        }
        results
    }

    /// Inserts, for each request, a one-shot `manual-…` trigger due at `now` that any node
    /// may run (SPEC §9 `enqueue`); returns the trigger names. Works while the job is
    /// paused and while the node drains.
    ///
    /// # Errors
    /// Per item: `SCHEDULING_NOTFOUND_001` for an unknown job, `SCHEDULING_VALIDATION_001`
    /// for data over [`DATA_LEN_MAX`](crate::job::DATA_LEN_MAX).
    pub async fn enqueue(
        &self,
        requests: &[(JobName, JsonObject)],
        now: DateTime<Utc>,
    ) -> Vec<Result<TriggerName, SchedulingError>> {
        let mut results = Vec::with_capacity(requests.len());
        for (job, data) in requests {
            if let Err(e) = check_data("enqueued data", data) {
                results.push(Err(e));
                continue;
            }
            let id = Uuid::from_u64_pair(self.random_u64(), self.random_u64());
            let uid = self.random_u64();
            let result = self
                .insert_one_shot(job, &format!("manual-{}", id.simple()), TriggerKind::Manual, data, uid, now)
                .await;
            results.push(result.map_err(SchedulingError::from));
        }
        results
    }

    /// Writes a one-shot trigger due at `due`, unless an earlier attempt already did (and
    /// perhaps a node already ran it: its first run's id is known in advance).
    pub(crate) async fn insert_one_shot(
        &self,
        job: &JobName,
        name: &str,
        kind: TriggerKind,
        data: &JsonObject,
        uid: u64,
        due: DateTime<Utc>,
    ) -> Result<TriggerName, StoreError> {
        let trigger_name = TriggerName::new(name).map_err(|e| SchedulingError::invalid_definition(e.to_string()))?;
        run(&self.kv, self.options.retry, |txn, maybe| async move {
            let tx = self.tx(txn);
            tx.job(job.as_str()).await?.ok_or_else(|| SchedulingError::JobNotFound { job: job.to_string() })?;
            if maybe.0 && self.one_shot_exists(&tx, job.as_str(), name, uid, due).await? {
                return Ok(());
            }
            let record = one_shot_record(job.as_str(), name, kind, data, uid, due);
            self.put_trigger_and_wake(&tx, None, &record, false);
            Ok::<_, StoreError>(())
        })
        .await?;
        Ok(trigger_name)
    }

    async fn one_shot_exists(
        &self,
        tx: &Tx<'_, K::Transaction>,
        job: &str,
        name: &str,
        uid: u64,
        due: DateTime<Utc>,
    ) -> Result<bool, StoreError> {
        if tx.trigger(job, name).await?.is_some() {
            return Ok(true);
        }
        // Already acquired and run: its run id is derived from (uid, fire 0).
        let run_id = super::acquire::fire_run_id(uid, 0, to_micros(due));
        Ok(tx.txn.get(&self.keys.run(run_id), false).await?.is_some())
    }
}

/// A one-shot trigger record due at `due`.
pub(crate) fn one_shot_record(
    job: &str,
    name: &str,
    kind: TriggerKind,
    data: &JsonObject,
    uid: u64,
    due: DateTime<Utc>,
) -> TriggerRecord {
    TriggerRecord {
        job: job.to_owned(),
        name: name.to_owned(),
        schedule: JobSchedule::once(due).to_string(),
        data: data_text(data),
        priority: crate::job::PRIORITY_DEFAULT,
        misfire: MisfirePolicy::RunOnce,
        description: None,
        kind,
        state: TriggerState::Waiting,
        paused: false,
        next_fire_us: Some(to_micros(due)),
        previous_fire_us: None,
        fire_count: 0,
        uid,
        running_run: None,
        error: None,
    }
}

/// The instant of stored microseconds, or a corruption error.
pub(crate) fn instant(us: i64) -> Result<DateTime<Utc>, StoreError> {
    from_micros(us).ok_or_else(|| StoreError::Corrupt(format!("time {us} out of range")))
}
