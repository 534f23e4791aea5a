//! Local jobs (SPEC §7 `run_on_every_instance`): every node computes and runs them on its
//! own clock, without store acquisition; their runs still go to history.
//!
//! [`LocalTriggers`] is the pure state of one node's local triggers and in-process retries:
//! the poller feeds it the stored local jobs ([`LocalTriggers::refresh`]), asks it what is
//! due ([`LocalTriggers::poll_due`]), reports ends of runs
//! ([`LocalTriggers::handle_run_finished`]) and sleeps until
//! [`LocalTriggers::poll_timeout`]. "Not concurrent" is judged on this node only; a fire
//! skipped because the job is still running here computes its next fire from now.

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::time::Duration;

use chrono::{DateTime, Utc};
use rustc_hash::FxBuildHasher;
use uuid::Uuid;

use crate::calendar::Calendars;
use crate::job::{merge_data, JobDefinition, JobRun, RunCause};
use crate::name::{CalendarName, JobName, TriggerName};
use crate::rules::{on_due, plan_retry};
use crate::schedule::{JobSchedule, PreviousFire, ScheduleKind};
use crate::store::{JobSet, LocalJob};

/// A local run to start now.
#[derive(Debug, Clone, PartialEq)]
pub struct LocalFire {
    /// The run (id from the caller's generator).
    pub run: JobRun,
    /// The job type to build.
    pub job_type: String,
    /// The job's timeout.
    pub timeout: Option<Duration>,
}

#[derive(Debug, Clone)]
struct Trigger {
    schedule: JobSchedule,
    schedule_text: String,
    data: crate::job::JsonObject,
    misfire: crate::job::MisfirePolicy,
    paused: bool,
    next_fire: Option<DateTime<Utc>>,
    fire_count: u32,
    /// An `Every` trigger whose run is still going: its next fire waits for the end.
    waiting_for_run: bool,
}

#[derive(Debug, Clone)]
struct Job {
    definition: JobDefinition,
    paused: bool,
    revision: u64,
    triggers: BTreeMap<TriggerName, Trigger>,
    running: usize,
    /// Deleted from the store while runs of it still run here: kept, without triggers,
    /// until they end, so a job added again under the same name waits for them.
    removed: bool,
}

impl Job {
    /// Not concurrent and a run of it is on this node now.
    fn is_busy(&self) -> bool {
        !self.definition.allow_concurrent && self.running > 0
    }
}

#[derive(Debug, Clone)]
struct Retry {
    run: JobRun,
    job_type: String,
    timeout: Option<Duration>,
}

/// The earlier of two optional times (`None` is no time, not the earliest).
fn earlier(a: Option<DateTime<Utc>>, b: Option<DateTime<Utc>>) -> Option<DateTime<Utc>> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

/// One node's local triggers and pending local retries.
#[derive(Debug, Clone, Default)]
pub struct LocalTriggers {
    jobs: BTreeMap<JobName, Job>,
    /// Pending retries by (due, run id).
    retries: BTreeMap<(DateTime<Utc>, Uuid), Retry>,
    /// Runs taken from the store that run on this node now and can hold a local fire
    /// back (see [`Self::note_started`]), with their jobs, whatever the job was when they
    /// started: a job that becomes local while one runs here counts it; and whether each
    /// holds (held) its job's slot in the store.
    /// With each, the mark the caller noted it with (see [`Self::holds_back`]).
    store_runs: hashbrown::HashMap<Uuid, (JobName, bool, u64), FxBuildHasher>,
    /// Runs of non-concurrent jobs taken from the store whose slots the cluster took back
    /// while they ran here (see [`Self::note_declared_lost`]), with their jobs.
    given_back: BTreeMap<Uuid, JobName>,
    /// The jobs of `store_runs` that hold their slot, with how many runs each: kept as runs
    /// start and end, so that [`Self::held_jobs`] costs nothing per acquisition however
    /// many runs a node holds.
    slot_jobs: hashbrown::HashMap<JobName, u32, FxBuildHasher>,
    /// The same jobs, as acquisitions take them.
    slot_job_names: JobSet,
    /// Changes whenever the held jobs may have changed ([`Self::held_version`]).
    held_version: u64,
    /// Changes whenever a job may have left the held jobs ([`Self::held_left`]).
    held_left: u64,
    /// The earliest due time of the triggers that may fire (see [`Self::next_trigger_due`]),
    /// known since the last change to any trigger; `None` when it must be computed again.
    /// Most poller cycles come for other work: with it they skip the scan of every trigger.
    trigger_due: Option<Option<DateTime<Utc>>>,
}

impl LocalTriggers {
    /// No local jobs.
    pub fn new() -> Self {
        Self::default()
    }

    /// Replaces the set of local jobs with `jobs` as stored. A trigger whose job revision
    /// and schedule are unchanged keeps its progress; a new or changed one gets its first
    /// fire from `now`. Pending retries of a job no longer listed (deleted, or no longer
    /// local) are dropped, as deleting a job deletes its stored retries.
    ///
    /// A new or changed trigger naming a calendar not registered on this node never fires
    /// here (its fires would ignore the calendar); each is returned, for the caller to
    /// report, as (job, trigger, calendar).
    pub fn refresh(
        &mut self,
        jobs: Vec<LocalJob>,
        now: DateTime<Utc>,
        calendars: &Calendars,
    ) -> Vec<(JobName, TriggerName, CalendarName)> {
        self.trigger_due = None;
        let busy_before = self.busy_jobs();
        let unregistered = self.replace_jobs(jobs, now, calendars);
        let busy = self.busy_jobs();
        if busy != busy_before {
            self.held_changed(!busy_before.is_subset(&busy));
        }
        unregistered
    }

    /// [`Self::refresh`] but for what it tells the held jobs.
    fn replace_jobs(
        &mut self,
        jobs: Vec<LocalJob>,
        now: DateTime<Utc>,
        calendars: &Calendars,
    ) -> Vec<(JobName, TriggerName, CalendarName)> {
        let mut unregistered = Vec::new();
        let mut next = BTreeMap::new();
        for local in jobs {
            let name = local.definition.name.clone();
            let old = self.jobs.remove(&name);
            let mut triggers = BTreeMap::new();
            for def in &local.definition.triggers {
                let text = def.schedule.to_string();
                let kept =
                    old.as_ref().and_then(|j| j.triggers.get(&def.name)).filter(|t| t.schedule_text == text).cloned();
                let paused = local.paused_triggers.contains(&def.name);
                let trigger = match kept {
                    Some(mut t) => {
                        t.paused = paused;
                        t.data = def.data.clone();
                        t.misfire = def.misfire;
                        t
                    }
                    None => {
                        let calendar = def.schedule.calendar.as_ref().and_then(|c| calendars.get(c));
                        let next_fire = match &def.schedule.calendar {
                            Some(name) if calendar.is_none() => {
                                unregistered.push((local.definition.name.clone(), def.name.clone(), name.clone()));
                                None
                            }
                            _ => def.schedule.first_fire(now, calendar),
                        };
                        Trigger {
                            schedule: def.schedule.clone(),
                            schedule_text: text,
                            data: def.data.clone(),
                            misfire: def.misfire,
                            paused,
                            next_fire,
                            fire_count: 0,
                            waiting_for_run: false,
                        }
                    }
                };
                triggers.insert(def.name.clone(), trigger);
            }
            // New here: the runs of it taken from the store while it was not local (or
            // before this node knew it was) still run here.
            let running = old
                .as_ref()
                .map_or_else(|| self.store_runs.values().filter(|(j, _, _)| *j == name).count(), |j| j.running);
            next.insert(
                name,
                Job {
                    definition: local.definition,
                    paused: local.paused,
                    revision: local.revision,
                    triggers,
                    running,
                    removed: false,
                },
            );
        }
        for (name, mut gone) in std::mem::take(&mut self.jobs) {
            if gone.running > 0 {
                gone.removed = true;
                gone.triggers.clear();
                next.insert(name, gone);
            }
        }
        self.jobs = next;
        // A retry of a job that is gone would run outside its job's exclusivity (which
        // only listed jobs track) and after the job was deleted.
        let jobs = &self.jobs;
        self.retries.retain(|_, retry| jobs.get(&retry.run.job).is_some_and(|job| !job.removed));
        unregistered
    }

    /// The fires due at `now`, with run ids from `new_id`. Paused jobs and triggers do not
    /// fire (their due time is kept, so the misfire policy applies after resume).
    pub fn poll_due(
        &mut self,
        now: DateTime<Utc>,
        misfire_threshold: Duration,
        calendars: &Calendars,
        mut new_id: impl FnMut() -> Uuid,
    ) -> Vec<LocalFire> {
        let mut fires = Vec::new();
        if self.trigger_due.is_none_or(|first| first.is_some_and(|first| first <= now)) {
            self.fire_triggers(now, misfire_threshold, calendars, &mut new_id, &mut fires);
        }
        let due_retries: Vec<(DateTime<Utc>, Uuid)> =
            self.retries.range(..=(now, Uuid::max())).map(|(k, _)| *k).collect();
        for key in due_retries {
            // A non-concurrent job's retry waits while the job runs here (SPEC §8: retries
            // of non-concurrent jobs stay exclusive); it goes when the run ends.
            let busy = |job: &JobName| self.jobs.get(job).is_some_and(Job::is_busy);
            if self.retries.get(&key).is_some_and(|r| busy(&r.run.job)) {
                continue;
            }
            if let Some(retry) = self.retries.remove(&key) {
                if let Some(job) = self.jobs.get_mut(&retry.run.job) {
                    job.running += 1;
                    self.held_version += 1;
                }
                fires.push(LocalFire { run: retry.run, job_type: retry.job_type, timeout: retry.timeout });
            }
        }
        fires
    }

    /// The trigger part of [`Self::poll_due`]: fires the due triggers into `fires`, moves
    /// every due trigger on, and notes the earliest due time left.
    fn fire_triggers(
        &mut self,
        now: DateTime<Utc>,
        misfire_threshold: Duration,
        calendars: &Calendars,
        new_id: &mut impl FnMut() -> Uuid,
        fires: &mut Vec<LocalFire>,
    ) {
        let mut earliest: Option<DateTime<Utc>> = None;
        let mut held_joined = false;
        for (name, job) in &mut self.jobs {
            for (trigger_name, trigger) in &mut job.triggers {
                if job.paused || trigger.paused || trigger.waiting_for_run {
                    continue;
                }
                let Some(due) = trigger.next_fire.filter(|due| *due <= now) else {
                    earliest = earlier(earliest, trigger.next_fire);
                    continue;
                };
                let calendar = trigger.schedule.calendar.as_ref().and_then(|c| calendars.get(c));
                let decision = on_due(trigger.misfire, due, now, misfire_threshold);
                let is_interval = matches!(trigger.schedule.kind, ScheduleKind::Every { .. });
                // `Job::is_busy`, spelled out: `job.triggers` is borrowed by the loop.
                let busy = !job.definition.allow_concurrent && job.running > 0;
                let (run_at, basis) = match decision.run_scheduled_at {
                    Some(_) if busy => (None, now),
                    Some(at) => (Some(at), decision.next_basis),
                    None => (None, decision.next_basis),
                };
                match run_at {
                    Some(scheduled_at) => {
                        trigger.fire_count += 1;
                        if is_interval {
                            trigger.waiting_for_run = true;
                            trigger.next_fire = None;
                        } else {
                            let previous =
                                PreviousFire { scheduled_at: basis, completed_at: now, fire_count: trigger.fire_count };
                            trigger.next_fire = trigger.schedule.next_fire(&previous, calendar);
                        }
                        job.running += 1;
                        held_joined = true;
                        fires.push(LocalFire {
                            run: JobRun {
                                id: new_id(),
                                job: name.clone(),
                                trigger: Some(trigger_name.clone()),
                                scheduled_at,
                                cause: RunCause::Schedule,
                                attempt: 1,
                                retry_of: None,
                                data: merge_data([&job.definition.data, &trigger.data]),
                            },
                            job_type: job.definition.job_type.to_string(),
                            timeout: job.definition.timeout,
                        });
                    }
                    None => {
                        // Skipped (misfire policy, or still running here): next from now.
                        let previous =
                            PreviousFire { scheduled_at: basis, completed_at: now, fire_count: trigger.fire_count };
                        trigger.next_fire = trigger.schedule.next_fire(&previous, calendar);
                    }
                }
                if !trigger.waiting_for_run {
                    earliest = earlier(earliest, trigger.next_fire);
                }
            }
        }
        self.trigger_due = Some(earliest);
        if held_joined {
            self.held_version += 1;
        }
    }

    /// A local run ended at `finished_at`; `failed` when it failed (not canceled). Frees
    /// the job's slot on this node, re-arms an interval trigger from the end time, and
    /// schedules a retry in process per the job's policy (run id from `new_id`). Returns
    /// the retry's due time, if any.
    pub fn handle_run_finished(
        &mut self,
        run: &JobRun,
        finished_at: DateTime<Utc>,
        failed: bool,
        calendars: &Calendars,
        new_id: impl FnOnce() -> Uuid,
    ) -> Option<DateTime<Utc>> {
        self.trigger_due = None;
        let job = self.jobs.get_mut(&run.job)?;
        let was_busy = job.is_busy();
        job.running = job.running.saturating_sub(1);
        if was_busy && !job.is_busy() {
            self.held_changed(true);
        }
        let job = self.jobs.get_mut(&run.job)?;
        if job.removed {
            // The job is gone: no retry; forget it once its last run here ended.
            if job.running == 0 {
                self.jobs.remove(&run.job);
            }
            return None;
        }
        if let Some(trigger) = run.trigger.as_ref().and_then(|t| job.triggers.get_mut(t)) {
            if trigger.waiting_for_run && run.cause == RunCause::Schedule {
                trigger.waiting_for_run = false;
                let calendar = trigger.schedule.calendar.as_ref().and_then(|c| calendars.get(c));
                let previous = PreviousFire {
                    scheduled_at: run.scheduled_at,
                    completed_at: finished_at,
                    fire_count: trigger.fire_count,
                };
                trigger.next_fire = trigger.schedule.next_fire(&previous, calendar);
            }
        }
        if !failed {
            return None;
        }
        let plan = plan_retry(job.definition.retry.as_ref(), run.attempt, finished_at)?;
        let retry = JobRun {
            id: new_id(),
            job: run.job.clone(),
            trigger: run.trigger.clone(),
            scheduled_at: plan.due,
            cause: RunCause::Retry,
            attempt: plan.attempt,
            retry_of: Some(run.retry_of.unwrap_or(run.id)),
            data: run.data.clone(),
        };
        let key = (plan.due, retry.id);
        self.retries.insert(
            key,
            Retry { run: retry, job_type: job.definition.job_type.to_string(), timeout: job.definition.timeout },
        );
        Some(plan.due)
    }

    /// A fire from [`poll_due`](Self::poll_due) that did not start: the job's slot here is
    /// freed and an interval trigger re-armed from `now`, as when a run ends, so a
    /// scheduled fire is skipped. A retry goes back to the pending retries, due `again`
    /// after `now`, when `again` is given (the store could not record it: not at once, or
    /// a store out of reach would be asked again and again without end); without it (the
    /// run must never start), or when its job is gone (as [`refresh`](Self::refresh)
    /// drops it), it is dropped.
    pub fn not_started(&mut self, fire: LocalFire, now: DateTime<Utc>, again: Option<Duration>, calendars: &Calendars) {
        // Not failed: no retry is planned, so no id is drawn.
        self.handle_run_finished(&fire.run, now, false, calendars, Uuid::nil);
        let listed = self.jobs.get(&fire.run.job).is_some_and(|job| !job.removed);
        if let (RunCause::Retry, true, Some(again)) = (fire.run.cause, listed, again) {
            let key = (crate::time::add_duration(now, again), fire.run.id);
            self.retries.insert(key, Retry { run: fire.run, job_type: fire.job_type, timeout: fire.timeout });
        }
    }

    /// When something is next due (a trigger of an unpaused job, or a retry).
    pub fn poll_timeout(&self) -> Option<DateTime<Utc>> {
        // A non-concurrent job's retry waits for its run here to end, which wakes the
        // poller anyway.
        let retries = self
            .retries
            .iter()
            .filter(|(_, r)| !self.jobs.get(&r.run.job).is_some_and(Job::is_busy))
            .map(|((due, _), _)| *due);
        retries.chain(self.next_trigger_due()).min()
    }

    /// The earliest due time of the triggers that may fire: of an unpaused job, not
    /// paused, not waiting for its own run (an interval trigger). A busy job's trigger
    /// counts: [`Self::poll_due`] moves it on from its due time.
    fn next_trigger_due(&self) -> Option<DateTime<Utc>> {
        let scan = || {
            self.jobs
                .values()
                .filter(|j| !j.paused)
                .flat_map(|j| j.triggers.values())
                .filter(|t| !t.paused && !t.waiting_for_run)
                .filter_map(|t| t.next_fire)
                .min()
        };
        match self.trigger_due {
            Some(known) => {
                debug_assert_eq!(known, scan(), "the known earliest trigger due time is stale");
                known
            }
            None => scan(),
        }
    }

    /// Whether `job` is not concurrent and a run of it is on this node now without holding
    /// a slot in the store: a local job's run, or one given back (see
    /// [`Self::note_declared_lost`]).
    pub fn is_busy(&self, job: &JobName) -> bool {
        self.jobs.get(job).is_some_and(Job::is_busy) || self.given_back.values().any(|j| j == job)
    }

    /// The jobs [`Self::is_busy`] on this node now: the node must not start another run of
    /// them from the store (scheduled, enqueued, manual, retry, recovery) meanwhile.
    pub fn busy_jobs(&self) -> JobSet {
        let local = self.jobs.iter().filter(|(_, j)| j.is_busy()).map(|(name, _)| name);
        local.chain(self.given_back.values()).cloned().collect()
    }

    /// The jobs whose fires in the store this node leaves waiting now: [`Self::busy_jobs`],
    /// and the non-concurrent jobs of runs taken from the store that run here (each holds
    /// its job's slot until its end is recorded). Such a fire, taken now, would only turn
    /// its trigger `Blocked`, and the transaction taking it would read a slot that the
    /// run's end is about to write (a conflict with the node's own completion); left
    /// waiting, it is taken once the run has ended (see [`Self::holds_back`]). Borrowed,
    /// not built, unless a local job or a run given back is busy here.
    pub fn held_jobs(&self) -> Cow<'_, JobSet> {
        let busy = self.busy_jobs();
        if busy.is_empty() {
            return Cow::Borrowed(&self.slot_job_names);
        }
        let mut jobs = busy;
        jobs.extend(self.slot_job_names.iter().cloned());
        Cow::Owned(jobs)
    }

    /// A number that changes whenever [`Self::held_jobs`] may have changed: equal numbers,
    /// the same jobs. Zero, and only then, when no job is held, so that a node holding
    /// nothing at two acquisitions sees the same jobs however many came and went between.
    pub fn held_version(&self) -> u64 {
        if self.slot_job_names.is_empty() && self.busy_jobs().is_empty() {
            0
        } else {
            self.held_version + 1
        }
    }

    /// A number that changes whenever a job may have left [`Self::held_jobs`]: equal
    /// numbers, every job held then is held still.
    pub fn held_left(&self) -> u64 {
        self.held_left
    }

    /// Whether `run` is a run taken from the store that holds its job's slot here (its
    /// end lets the fires [`Self::held_jobs`] left waiting go): the mark it was noted with.
    pub fn holds_back(&self, run: Uuid) -> Option<u64> {
        self.store_runs.get(&run).filter(|(_, exclusive, _)| *exclusive).map(|(_, _, mark)| *mark)
    }

    /// Run `run` of `job` started on this node outside the local triggers (taken from the
    /// store: a scheduled fire of a cluster-unique job, enqueued, manual, retry,
    /// recovery); `exclusive` when the job was not concurrent as it was taken; `mark`
    /// whatever the caller needs back from [`Self::holds_back`] (the poller: how many
    /// acquisitions it had made). "Not concurrent" counts it for a local job, and for a
    /// job that becomes local while it runs (a node may learn that only after it took the
    /// run); other runs (a concurrent job's, not local here) are not kept. Call
    /// [`Self::note_ended`] when it ends.
    pub fn note_started(&mut self, run: Uuid, job: &JobName, exclusive: bool, mark: u64) {
        let local = self.jobs.get_mut(job);
        if !exclusive && local.is_none() {
            return;
        }
        if let Some(j) = local {
            j.running += 1;
        }
        if exclusive {
            let count = self.slot_jobs.entry(job.clone()).or_default();
            if *count == 0 {
                self.slot_job_names.insert(job.clone());
            }
            *count += 1;
        }
        self.held_version += 1;
        self.store_runs.insert(run, (job.clone(), exclusive, mark));
    }

    fn held_changed(&mut self, left: bool) {
        self.held_version += 1;
        if left {
            self.held_left += 1;
        }
    }

    /// This node learned it was declared lost: the store marked its runs `Lost` and freed
    /// their jobs' slots, so another run of such a job may be taken at once. The runs
    /// still running here (their jobs ignoring cancellation) keep their non-concurrent
    /// jobs busy on this node until they end: this node does not itself start a run beside
    /// one. Other nodes cannot know and may: the one overlap a job ignoring its
    /// cancellation can cause.
    pub fn note_declared_lost(&mut self) {
        let exclusive = self.store_runs.iter().filter(|(_, (_, exclusive, _))| *exclusive);
        self.given_back.extend(exclusive.map(|(run, (job, _, _))| (*run, job.clone())));
        self.held_changed(false);
    }

    /// Whether `run` is one of [`Self::note_declared_lost`]'s (its end lets fires of its
    /// job waiting in the store go).
    pub fn is_given_back(&self, run: Uuid) -> bool {
        self.given_back.contains_key(&run)
    }

    /// A run given to [`Self::note_started`] ended. Returns whether it counted for a local
    /// job here (whose fires its end may let go).
    pub fn note_ended(&mut self, run: Uuid) -> bool {
        if self.given_back.remove(&run).is_some() {
            self.held_changed(true);
        }
        let Some((job, exclusive, _)) = self.store_runs.remove(&run) else { return false };
        self.held_changed(true);
        if exclusive {
            if let Some(count) = self.slot_jobs.get_mut(&job) {
                *count -= 1;
                if *count == 0 {
                    self.slot_jobs.remove(&job);
                    self.slot_job_names.remove(job.as_str());
                }
            }
        }
        let Some(j) = self.jobs.get_mut(&job) else { return false };
        j.running = j.running.saturating_sub(1);
        if j.removed && j.running == 0 {
            self.jobs.remove(&job);
        }
        true
    }

    /// Drops pending retries (the node is stopping: SPEC §8).
    pub fn drop_retries(&mut self) -> usize {
        let n = self.retries.len();
        self.retries.clear();
        n
    }

    /// The revisions of the known jobs (to tell whether a refresh changed anything).
    pub fn revisions(&self) -> BTreeMap<&JobName, u64> {
        self.jobs.iter().map(|(name, job)| (name, job.revision)).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::job::{JobTriggerDefinition, JobTypeKey, RetryPolicy};
    use chrono::TimeDelta;

    fn t(s: i64) -> DateTime<Utc> {
        DateTime::from_timestamp(1_800_000_000 + s, 0).unwrap()
    }

    fn job_set(names: &[&str]) -> JobSet {
        names.iter().map(|name| JobName::new(name).unwrap()).collect()
    }

    fn local(name: &str, schedule: &str, allow_concurrent: bool) -> LocalJob {
        let mut def = JobDefinition::new(JobName::new(name).unwrap(), JobTypeKey::new("t").unwrap())
            .with_trigger(JobTriggerDefinition::new(TriggerName::new("t").unwrap(), schedule.parse().unwrap()));
        def.allow_concurrent = allow_concurrent;
        def.run_on_every_instance = true;
        LocalJob { definition: def, paused: false, paused_triggers: Vec::new(), revision: 1 }
    }

    fn ids() -> impl FnMut() -> Uuid {
        let mut n = 0u128;
        move || {
            n += 1;
            Uuid::from_u128(n)
        }
    }

    #[test]
    fn cron_fires_on_this_nodes_clock_and_skips_while_running() {
        let cal = Calendars::new();
        let mut local = LocalTriggers::new();
        local.refresh(vec![local_job("a")], t(0), &cal);
        assert_eq!(local.poll_timeout(), Some(t(1)));
        let mut id = ids();
        assert!(local.poll_due(t(0), Duration::from_secs(60), &cal, &mut id).is_empty());
        let fires = local.poll_due(t(1), Duration::from_secs(60), &cal, &mut id);
        assert_eq!(fires.len(), 1);
        assert_eq!(fires[0].run.scheduled_at, t(1));
        // Still running at 2 s: not concurrent on this node, skipped, next from now.
        assert!(local.poll_due(t(2), Duration::from_secs(60), &cal, &mut id).is_empty());
        assert_eq!(local.poll_timeout(), Some(t(3)));
        local.handle_run_finished(&fires[0].run, t(2), false, &cal, &mut id);
        assert_eq!(local.poll_due(t(3), Duration::from_secs(60), &cal, &mut id).len(), 1);
    }

    fn local_job(name: &str) -> LocalJob {
        local(name, "cron * * * * * *", false)
    }

    #[test]
    fn a_trigger_whose_calendar_is_not_registered_here_never_fires_here() {
        let cal = Calendars::new();
        let mut triggers = LocalTriggers::new();
        let skipped = triggers.refresh(vec![local("h", "cron * * * * * * calendar=holidays", true)], t(0), &cal);
        let expected =
            (JobName::new("h").unwrap(), TriggerName::new("t").unwrap(), CalendarName::new("holidays").unwrap());
        assert_eq!(skipped, vec![expected]);
        assert_eq!(triggers.poll_timeout(), None);
        assert!(triggers.poll_due(t(10), Duration::from_secs(60), &cal, ids()).is_empty());
        // Reported once: an unchanged trigger keeps its state at the next refresh.
        let again = triggers.refresh(vec![local("h", "cron * * * * * * calendar=holidays", true)], t(20), &cal);
        assert!(again.is_empty());
    }

    #[test]
    fn interval_triggers_wait_for_their_run_and_failures_retry_in_process() {
        let cal = Calendars::new();
        let mut job = local("i", "every 00:00:10", true);
        job.definition.retry = Some(RetryPolicy::fixed(1, Duration::from_secs(5)).unwrap());
        let mut local = LocalTriggers::new();
        local.refresh(vec![job], t(0), &cal);
        let mut id = ids();
        let fire = local.poll_due(t(10), Duration::from_secs(60), &cal, &mut id).remove(0);
        assert!(local.poll_due(t(30), Duration::from_secs(60), &cal, &mut id).is_empty(), "waits for its run");
        let retry_due = local.handle_run_finished(&fire.run, t(12), true, &cal, &mut id);
        assert_eq!(retry_due, Some(t(17)));
        assert_eq!(local.poll_timeout(), Some(t(17)));
        let retries = local.poll_due(t(17), Duration::from_secs(60), &cal, &mut id);
        assert_eq!(retries.len(), 1);
        assert_eq!(
            (retries[0].run.cause, retries[0].run.attempt, retries[0].run.retry_of),
            (RunCause::Retry, 2, Some(fire.run.id))
        );
        assert_eq!(local.handle_run_finished(&retries[0].run, t(18), true, &cal, &mut id), None, "policy used up");
        assert_eq!(local.poll_timeout(), Some(t(22)), "next interval from the first run's end");
    }

    /// Found by simulation seed 6: a non-concurrent local job's retry ran beside the job's
    /// next scheduled run on the same node.
    #[test]
    fn a_non_concurrent_jobs_retry_waits_for_its_running_run() {
        let cal = Calendars::new();
        let mut job = local("n", "cron */10 * * * * *", false);
        job.definition.retry = Some(RetryPolicy::fixed(1, Duration::from_secs(10)).unwrap());
        let mut local = LocalTriggers::new();
        local.refresh(vec![job], t(0), &cal);
        let mut id = ids();
        let first = local.poll_due(t(10), Duration::from_secs(60), &cal, &mut id).remove(0);
        assert_eq!(local.handle_run_finished(&first.run, t(11), true, &cal, &mut id), Some(t(21)));
        let second = local.poll_due(t(20), Duration::from_secs(60), &cal, &mut id);
        assert_eq!(second.len(), 1, "the scheduled fire");
        assert!(local.poll_due(t(21), Duration::from_secs(60), &cal, &mut id).is_empty(), "the retry waits");
        assert_eq!(local.poll_timeout(), Some(t(30)), "and does not wake the poller meanwhile");
        local.handle_run_finished(&second[0].run, t(25), false, &cal, &mut id);
        let retry = local.poll_due(t(25), Duration::from_secs(60), &cal, &mut id);
        assert_eq!((retry.len(), retry[0].run.cause), (1, RunCause::Retry));
    }

    /// Found by simulation seed 7: an enqueued run of a local non-concurrent job (taken from
    /// the store) ran beside the job's local fire on the same node.
    #[test]
    fn runs_from_the_store_count_towards_a_local_jobs_exclusivity() {
        let cal = Calendars::new();
        let jobs = vec![local_job("a"), local("c", "cron * * * * * *", true)];
        let mut local = LocalTriggers::new();
        local.refresh(jobs, t(0), &cal);
        let mut id = ids();
        let a = JobName::new("a").unwrap();
        assert!(local.busy_jobs().is_empty());
        local.note_started(Uuid::from_u128(101), &a, true, 0);
        local.note_started(Uuid::from_u128(102), &JobName::new("elsewhere").unwrap(), true, 0);
        local.note_started(Uuid::from_u128(103), &JobName::new("c").unwrap(), false, 0);
        assert_eq!(local.busy_jobs(), job_set(&["a"]), "c runs concurrently");
        let fires = local.poll_due(t(1), Duration::from_secs(60), &cal, &mut id);
        assert_eq!(fires.len(), 1, "only c fires while a's store run runs here");
        local.note_ended(Uuid::from_u128(101));
        assert!(!local.is_busy(&a));
        assert_eq!(local.poll_due(t(2), Duration::from_secs(60), &cal, &mut id).len(), 2);
    }

    #[test]
    fn the_slots_a_nodes_runs_hold_keep_their_jobs_fires_waiting() {
        let cal = Calendars::new();
        let mut local = LocalTriggers::new();
        local.refresh(vec![local_job("l")], t(0), &cal);
        let (a, b, l) = (JobName::new("a").unwrap(), JobName::new("b").unwrap(), JobName::new("l").unwrap());
        let (run_a, run_b, run_l) = (Uuid::from_u128(1), Uuid::from_u128(2), Uuid::from_u128(3));
        let (version, left) = (local.held_version(), local.held_left());
        local.note_started(run_a, &a, true, 7);
        local.note_started(run_b, &b, false, 8);
        local.note_started(run_l, &l, true, 9);
        assert!(local.held_version() > version && local.held_left() == left, "jobs joined, none left");
        let held = job_set(&["a", "l"]);
        assert_eq!(*local.held_jobs(), held, "b runs concurrently");
        assert_eq!(local.busy_jobs(), job_set(&["l"]), "a's slot is in the store");
        assert_eq!((local.holds_back(run_a), local.holds_back(run_b)), (Some(7), None), "with its mark");
        // A second run of `a` (taken after this node was declared lost and back): `a` stays
        // held until both ended.
        let run_a2 = Uuid::from_u128(4);
        local.note_started(run_a2, &a, true, 10);
        local.note_ended(run_a);
        assert_eq!(*local.held_jobs(), held);
        let left = local.held_left();
        local.note_ended(run_a2);
        assert!(local.held_left() > left, "a left");
        assert_eq!((&*local.held_jobs(), local.holds_back(run_a)), (&job_set(&["l"]), None));
        assert!(matches!(local.held_jobs(), Cow::Owned(_)), "with a local job busy, built");
        local.note_ended(run_l);
        assert!(matches!(local.held_jobs(), Cow::Borrowed(jobs) if jobs.is_empty()), "else borrowed");
    }

    /// Found by simulation seed 112301 (two days, all faults): a node declared lost while a
    /// job ran on it, ignoring its cancellation, rejoined and took that job's recovery
    /// beside it (the store had freed the job's slot).
    #[test]
    fn runs_a_node_kept_after_it_was_declared_lost_keep_their_jobs_busy_here() {
        let mut local = LocalTriggers::new();
        let (a, b, c) = (JobName::new("a").unwrap(), JobName::new("b").unwrap(), JobName::new("c").unwrap());
        let (run_a, run_b, run_c) = (Uuid::from_u128(1), Uuid::from_u128(2), Uuid::from_u128(3));
        local.note_started(run_a, &a, true, 0);
        local.note_started(run_b, &b, false, 0);
        assert!(local.busy_jobs().is_empty(), "their slots are held in the store");
        local.note_declared_lost();
        assert_eq!(local.busy_jobs(), job_set(&["a"]), "b runs concurrently");
        assert!(local.is_busy(&a) && !local.is_busy(&b));
        assert!(local.is_given_back(run_a) && !local.is_given_back(run_b));
        // A run taken after the node learned it was lost holds its slot in the store again.
        local.note_started(run_c, &c, true, 0);
        assert!(!local.is_busy(&c));
        assert!(!local.note_ended(run_a), "not a local job");
        assert!(!local.is_given_back(run_a));
        assert!(local.busy_jobs().is_empty(), "a's run ended here");
        local.note_ended(run_b);
        local.note_ended(run_c);
        local.note_declared_lost();
        assert!(local.busy_jobs().is_empty(), "no run left to keep");
    }

    /// Found by simulation seed 60343 (heavy faults): a non-concurrent job became local
    /// while an enqueued run of it waited in the store; a node that did not know yet took
    /// that run, then learned the job was local and fired it beside the run.
    #[test]
    fn a_job_that_becomes_local_waits_for_its_store_run_here() {
        let cal = Calendars::new();
        let mut local = LocalTriggers::new();
        let mut id = ids();
        let (a, b) = (JobName::new("a").unwrap(), JobName::new("b").unwrap());
        let (run_a, run_b) = (Uuid::from_u128(101), Uuid::from_u128(102));
        local.note_started(run_a, &a, true, 0);
        local.note_started(run_b, &b, true, 0);
        assert!(!local.note_ended(run_b), "not a local job yet");
        local.refresh(vec![local_job("a"), local_job("b")], t(0), &cal);
        assert!(local.is_busy(&a), "its store run still runs here");
        assert!(!local.is_busy(&b), "its store run ended before");
        let fires = local.poll_due(t(1), Duration::from_secs(60), &cal, &mut id);
        assert_eq!(fires.iter().map(|f| f.run.job.as_str()).collect::<Vec<_>>(), ["b"]);
        assert!(local.note_ended(run_a), "a local job now");
        assert!(!local.is_busy(&a));
        assert_eq!(local.poll_due(t(2), Duration::from_secs(60), &cal, &mut id).len(), 1, "a fires again");
    }

    /// Found by simulation seed 35: a local job deleted and added again while its run still
    /// ran here forgot that run and fired beside it.
    #[test]
    fn a_local_job_added_again_waits_for_its_old_run_here() {
        let cal = Calendars::new();
        let mut local = LocalTriggers::new();
        local.refresh(vec![local_job("a")], t(0), &cal);
        let mut id = ids();
        let old = local.poll_due(t(1), Duration::from_secs(60), &cal, &mut id).remove(0);
        local.refresh(Vec::new(), t(2), &cal);
        assert_eq!(local.poll_timeout(), None, "deleted: no fires");
        local.refresh(vec![local_job("a")], t(3), &cal);
        assert!(local.poll_due(t(4), Duration::from_secs(60), &cal, &mut id).is_empty(), "the old run still runs");
        local.handle_run_finished(&old.run, t(5), false, &cal, &mut id);
        let new = local.poll_due(t(6), Duration::from_secs(60), &cal, &mut id).remove(0);
        // Deleted for good while running: kept until its run ends, then forgotten, and a
        // failure of that run does not retry.
        local.refresh(Vec::new(), t(7), &cal);
        assert_eq!(local.revisions().len(), 1, "kept while its run runs");
        assert_eq!(local.handle_run_finished(&new.run, t(8), true, &cal, &mut id), None);
        assert!(local.revisions().is_empty());
    }

    /// Found by simulation seed 7180: two pending retries of a non-concurrent local job,
    /// which was deleted while the store was unavailable, both ran at once on the node
    /// (the deleted job no longer tracked whether it ran here).
    #[test]
    fn a_deleted_local_jobs_pending_retries_are_dropped() {
        let cal = Calendars::new();
        let mut job = local("n", "cron */10 * * * * *", false);
        job.definition.retry = Some(RetryPolicy::fixed(1, Duration::from_secs(30)).unwrap());
        let mut local = LocalTriggers::new();
        local.refresh(vec![job.clone()], t(0), &cal);
        let mut id = ids();
        let first = local.poll_due(t(10), Duration::from_secs(60), &cal, &mut id).remove(0);
        assert_eq!(local.handle_run_finished(&first.run, t(11), true, &cal, &mut id), Some(t(41)));
        let second = local.poll_due(t(20), Duration::from_secs(60), &cal, &mut id).remove(0);
        assert_eq!(local.handle_run_finished(&second.run, t(21), true, &cal, &mut id), Some(t(51)));
        local.refresh(vec![job], t(30), &cal);
        assert_eq!(local.poll_timeout(), Some(t(30)), "kept while the job is listed");
        local.refresh(Vec::new(), t(31), &cal);
        assert_eq!(local.poll_timeout(), None, "deleted: nothing due, no retry");
        assert!(local.poll_due(t(60), Duration::from_secs(60), &cal, &mut id).is_empty());
        assert_eq!(local.drop_retries(), 0);
    }

    #[test]
    fn a_fire_that_did_not_start_is_skipped_and_a_retry_goes_again() {
        let cal = Calendars::new();
        let mut job = local("r", "cron */10 * * * * *", false);
        job.definition.retry = Some(RetryPolicy::fixed(2, Duration::from_secs(5)).unwrap());
        let mut local = LocalTriggers::new();
        local.refresh(vec![job], t(0), &cal);
        let mut id = ids();
        let fire = local.poll_due(t(10), Duration::from_secs(60), &cal, &mut id).remove(0);
        local.not_started(fire, t(10), Some(Duration::from_secs(1)), &cal);
        assert!(!local.is_busy(&JobName::new("r").unwrap()), "its slot is free");
        assert!(local.poll_due(t(11), Duration::from_secs(60), &cal, &mut id).is_empty(), "skipped, not fired again");
        let fire = local.poll_due(t(20), Duration::from_secs(60), &cal, &mut id).remove(0);
        assert_eq!(local.handle_run_finished(&fire.run, t(21), true, &cal, &mut id), Some(t(26)));
        let retry = local.poll_due(t(26), Duration::from_secs(60), &cal, &mut id).remove(0);
        let (retry_id, attempt) = (retry.run.id, retry.run.attempt);
        local.not_started(retry, t(26), Some(Duration::from_secs(1)), &cal);
        assert_eq!(local.poll_timeout(), Some(t(27)), "the retry is pending again, a while later");
        assert!(local.poll_due(t(26), Duration::from_secs(60), &cal, &mut id).is_empty());
        let again = local.poll_due(t(27), Duration::from_secs(60), &cal, &mut id);
        assert_eq!(again.len(), 1);
        assert_eq!((again[0].run.id, again[0].run.attempt), (retry_id, attempt), "the same retry run");
        local.not_started(again.into_iter().next().unwrap(), t(27), None, &cal);
        assert_eq!(local.poll_timeout(), Some(t(30)), "a retry that must never start is dropped");
    }

    #[test]
    fn refresh_keeps_progress_and_pause_holds_fires() {
        let cal = Calendars::new();
        let mut local = LocalTriggers::new();
        local.refresh(vec![local_job("a")], t(0), &cal);
        let mut id = ids();
        let fire = local.poll_due(t(1), Duration::from_secs(60), &cal, &mut id).remove(0);
        local.handle_run_finished(&fire.run, t(1) + TimeDelta::milliseconds(10), false, &cal, &mut id);
        let mut paused = local_job("a");
        paused.paused = true;
        local.refresh(vec![paused], t(1), &cal);
        assert_eq!(local.poll_timeout(), None, "paused");
        assert!(local.poll_due(t(5), Duration::from_secs(60), &cal, &mut id).is_empty());
        local.refresh(vec![local_job("a")], t(5), &cal);
        // Resumed: the missed fire (due 2 s) is a misfire at 100 s; RunOnce runs once now.
        let fires = local.poll_due(t(100), Duration::from_secs(60), &cal, &mut id);
        assert_eq!(fires.len(), 1);
        assert_eq!(fires[0].run.scheduled_at, t(100));
        local.refresh(Vec::new(), t(100), &cal);
        assert_eq!(local.poll_timeout(), None, "a deleted local job is forgotten");
        assert_eq!(local.drop_retries(), 0);
    }
}
