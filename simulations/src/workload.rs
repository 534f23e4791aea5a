//! The workload of a seed: jobs across every schedule kind and flag, and the runtime
//! operations made during the safety phase.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, NaiveTime, TimeDelta, Utc};
use sundial::calendar::{DailyCalendar, JobCalendar};
use sundial::entropy::Entropy;
use sundial::job::{JobDefinition, JobTriggerDefinition, JobTypeKey, MisfirePolicy, RetryPolicy};
use sundial::name::{JobName, TriggerKey, TriggerName};
use sundial::schedule::JobSchedule;

use crate::options::{GivenJobs, SimOptions};
use crate::sim_job::SIM_JOB_TYPE;

/// The simulations' epoch: 2027-03-14T05:00:00Z, two hours before the US switch to daylight
/// saving time (07:00 UTC in New York, 08:00 UTC in Chicago), so zoned crons cross it.
pub fn epoch() -> DateTime<Utc> {
    DateTime::from_timestamp(1_805_000_400, 0).unwrap_or_default()
}

/// The name of the calendar some triggers use.
pub const QUIET_CALENDAR: &str = "quiet";

/// The calendar behind [`QUIET_CALENDAR`]: no fires 00:40–00:50 in New York. That is
/// 05:40–05:50 UTC on the epoch's day, and an hour earlier in UTC from the next day on
/// (the clocks go forward at 07:00 UTC): runs longer than a day see the calendar follow
/// its zone across a DST change.
pub fn quiet_calendar() -> Arc<dyn JobCalendar> {
    let from = NaiveTime::from_hms_opt(0, 40, 0).unwrap_or_default();
    let to = NaiveTime::from_hms_opt(0, 50, 0).unwrap_or_default();
    match DailyCalendar::new(from, to, chrono_tz::America::New_York) {
        Ok(calendar) => Arc::new(calendar),
        Err(_) => unreachable!("a non-empty span"),
    }
}

/// A runtime operation, made through one node's handle.
#[derive(Debug, Clone, PartialEq)]
pub enum Op {
    /// Pause a job (resumed by a later `Resume`).
    Pause(JobName),
    /// Resume a job.
    Resume(JobName),
    /// Pause one trigger.
    PauseTrigger(TriggerKey),
    /// Resume one trigger.
    ResumeTrigger(TriggerKey),
    /// Run a job now on a node (by slot) and wait for the first attempt.
    Trigger(usize, JobName),
    /// Enqueue a one-shot run through a node (by slot).
    Enqueue(usize, JobName),
    /// Cancel one running run (the world picks it), through a node (by slot).
    Cancel(usize),
    /// Replace a job's definition.
    Schedule(Box<JobDefinition>),
    /// Delete a job.
    Unschedule(JobName),
    /// Put a code job back to its code definition.
    Restore(JobName),
}

impl Op {
    /// The job whose state this operation changes, for the ones whose order matters
    /// (pause/resume, schedule, unschedule, restore).
    pub fn ordered_job(&self) -> Option<&JobName> {
        match self {
            Op::Pause(job) | Op::Resume(job) | Op::Unschedule(job) | Op::Restore(job) => Some(job),
            Op::PauseTrigger(key) | Op::ResumeTrigger(key) => Some(&key.job),
            Op::Schedule(def) => Some(&def.name),
            Op::Trigger(..) | Op::Enqueue(..) | Op::Cancel(_) => None,
        }
    }
}

/// Jobs and operations.
#[derive(Debug, Clone)]
pub struct Workload {
    /// Registered on every node as code jobs.
    pub code_jobs: Vec<JobDefinition>,
    /// Scheduled through a handle at the start.
    pub runtime_jobs: Vec<JobDefinition>,
    /// Operations at offsets from the start, in order.
    pub ops: Vec<(Duration, Op)>,
    /// Jobs whose definitions change during the run (the fire accounting skips them).
    pub changed: BTreeSet<JobName>,
    /// Jobs a new definition of which switches between local and cluster-unique (the
    /// overlap check judges their runs by kind); all of them are in `changed` too.
    pub switched: BTreeSet<JobName>,
}

impl Workload {
    /// Every job's first definition.
    pub fn jobs(&self) -> impl Iterator<Item = &JobDefinition> {
        self.code_jobs.iter().chain(&self.runtime_jobs)
    }
}

const ZONES: [&str; 6] =
    ["America/New_York", "America/Chicago", "Asia/Kolkata", "Asia/Kathmandu", "Australia/Lord_Howe", "UTC"];

fn pick<'a, T>(entropy: &mut Entropy, items: &'a [T]) -> &'a T {
    &items[entropy.below(items.len() as u64) as usize]
}

fn chance(entropy: &mut Entropy, percent: u64) -> bool {
    entropy.below(100) < percent
}

fn name(text: &str) -> JobName {
    JobName::new(text).unwrap_or_else(|_| unreachable!("generated names are valid"))
}

fn schedule(entropy: &mut Entropy, options: &SimOptions) -> JobSchedule {
    let zone = *pick(entropy, &ZONES);
    let tz = (zone != "UTC").then_some(zone);
    let text = match entropy.below(10) {
        0..=2 => format!("*/{} * * * * *", pick(entropy, &[5, 10, 15, 20, 30])),
        3..=4 => format!("{} * * * * *", entropy.below(60)),
        5 => format!("0 */{} * * * *", pick(entropy, &[2, 5, 10])),
        // Nonexistent in New York on the epoch's date (02:00–03:00 is skipped).
        6 => "0 30 2,3 * * *".to_owned(),
        7 => "0 0,15,30,45 * * * *".to_owned(),
        8 => {
            let span = options.duration.as_secs().max(120);
            let at = epoch() + TimeDelta::seconds(60 + entropy.below(span - 60) as i64);
            return JobSchedule::once(at);
        }
        _ => {
            let every = Duration::from_secs(20 + entropy.below(100));
            let repeat = chance(entropy, 50).then(|| 3 + entropy.below(30) as u32);
            return JobSchedule::every_times(every, repeat).unwrap_or_else(|_| unreachable!("a valid interval"));
        }
    };
    let zone = if text.starts_with("0 30 2,3") { Some("America/New_York") } else { tz };
    JobSchedule::cron(&text, zone).unwrap_or_else(|e| unreachable!("generated cron '{text}' is valid: {e}"))
}

fn job(entropy: &mut Entropy, options: &SimOptions, index: usize) -> JobDefinition {
    let mut def = JobDefinition::new(
        name(&format!("job-{index:03}")),
        JobTypeKey::new(SIM_JOB_TYPE).unwrap_or_else(|_| unreachable!("a valid key")),
    );
    let triggers = match entropy.below(10) {
        0 => 0,
        1..=7 => 1,
        _ => 2,
    };
    for t in 0..triggers {
        let mut schedule = schedule(entropy, options);
        if chance(entropy, 10) {
            schedule = schedule.with_calendar(
                sundial::name::CalendarName::new(QUIET_CALENDAR).unwrap_or_else(|_| unreachable!("a valid name")),
            );
        }
        let misfire = *pick(entropy, &[MisfirePolicy::RunOnce, MisfirePolicy::Skip, MisfirePolicy::RunAll]);
        let trigger = JobTriggerDefinition::new(
            TriggerName::new(format!("t{t}")).unwrap_or_else(|_| unreachable!("a valid name")),
            schedule,
        )
        .with_misfire(misfire)
        .with_priority(entropy.below(10) as i32);
        def = def.with_trigger(trigger);
    }
    def.allow_concurrent = chance(entropy, 50);
    def.run_on_every_instance = triggers > 0 && chance(entropy, 8);
    def.requests_recovery = chance(entropy, 50);
    if chance(entropy, 40) {
        let retries = 1 + entropy.below(3) as u32;
        let delay = Duration::from_secs(2 + entropy.below(60));
        let policy = if chance(entropy, 50) {
            RetryPolicy::fixed(retries, delay)
        } else {
            RetryPolicy::exponential(retries, delay, Some(Duration::from_secs(120)))
        };
        def = def.with_retry(policy.unwrap_or_else(|_| unreachable!("a valid policy")));
    }
    if chance(entropy, 30) {
        def = def.with_timeout(Duration::from_secs(2 + entropy.below(120)));
    }
    def
}

/// A user's job as the simulation runs it: the simulated job's type, no data (the
/// simulated job reads none).
fn simulated(def: &JobDefinition) -> JobDefinition {
    let mut def = def.clone();
    def.job_type = JobTypeKey::new(SIM_JOB_TYPE).unwrap_or_else(|_| unreachable!("a valid key"));
    def.data = Default::default();
    for trigger in &mut def.triggers {
        trigger.data = Default::default();
    }
    def
}

/// Whether a simulation can run `given` as it is: no two jobs share a name, and every
/// calendar its jobs name is one of its calendars or the simulation's own `quiet`.
///
/// # Errors
/// The first job defined twice, or the first job and trigger naming another calendar and
/// the calendars there are.
pub fn check_given(given: &GivenJobs) -> Result<(), String> {
    let mut names = BTreeSet::new();
    if let Some(def) = given.jobs.iter().find(|def| !names.insert(&def.name)) {
        return Err(format!("job '{}' is defined twice", def.name));
    }
    let calendars = crate::world_calendars(Some(given));
    for def in &given.jobs {
        for trigger in &def.triggers {
            if let Some(calendar) = trigger.schedule.calendar.as_ref().filter(|c| !calendars.contains_key(*c)) {
                let known: Vec<String> = calendars.keys().map(ToString::to_string).collect();
                return Err(format!(
                    "job '{}' trigger '{}': calendar '{calendar}' is neither in the file nor the simulation's own (there are: {})",
                    def.name,
                    trigger.name,
                    known.join(", ")
                ));
            }
        }
    }
    Ok(())
}

/// The workload of `options.seed`.
pub fn generate(options: &SimOptions) -> Workload {
    let mut entropy = Entropy::from_seed(options.seed ^ 0x776f_726b_6c6f_6164);
    let given = options.given.as_deref();
    let (code_jobs, runtime_jobs) = match given {
        Some(given) => (Vec::new(), given.jobs.iter().map(simulated).collect()),
        None => {
            let mut all: Vec<JobDefinition> = (0..options.jobs).map(|i| job(&mut entropy, options, i)).collect();
            let runtime_jobs = all.split_off(all.len().min(3));
            (all, runtime_jobs)
        }
    };
    let names: Vec<JobName> = code_jobs.iter().chain(&runtime_jobs).map(|d| d.name.clone()).collect();
    let mut ops = Vec::new();
    let mut changed = BTreeSet::new();
    let mut switched = BTreeSet::new();
    // Switches draw from their own stream: every other draw stays as it was.
    let mut switches = Entropy::from_seed(options.seed ^ 0x7377_6974_6368_0000);
    let span = options.duration.as_secs().max(120);
    let mut at = 30 + entropy.below(120);
    while at + 60 < span {
        let offset = Duration::from_secs(at);
        let job = pick(&mut entropy, &names).clone();
        let node = entropy.below(options.nodes as u64) as usize;
        match entropy.below(12) {
            0..=1 => {
                ops.push((offset, Op::Pause(job.clone())));
                let back = offset + Duration::from_secs(30 + entropy.below(600));
                ops.push((back, Op::Resume(job)));
            }
            2 => {
                let def = code_jobs.iter().chain(&runtime_jobs).find(|d| d.name == job);
                if let Some(trigger) = def.and_then(|d| d.triggers.first()) {
                    let key = TriggerKey::new(job.clone(), trigger.name.clone());
                    ops.push((offset, Op::PauseTrigger(key.clone())));
                    let back = offset + Duration::from_secs(30 + entropy.below(600));
                    ops.push((back, Op::ResumeTrigger(key)));
                }
            }
            3..=4 => ops.push((offset, Op::Trigger(node, job))),
            5..=6 => ops.push((offset, Op::Enqueue(node, job))),
            7..=8 => ops.push((offset, Op::Cancel(node))),
            // A user's jobs stay as written (so every fire of theirs is accounted for), and
            // none is a code job.
            9.. if given.is_some() => {}
            9 => {
                // A new definition under the same name (same flags, new triggers).
                let index = names.iter().position(|n| *n == job).unwrap_or(0);
                let mut replacement = self::job(&mut entropy, options, index);
                if let Some(old) = code_jobs.iter().chain(&runtime_jobs).find(|d| d.name == job) {
                    replacement.allow_concurrent = old.allow_concurrent;
                    replacement.run_on_every_instance = old.run_on_every_instance;
                }
                // Now and then local becomes cluster-unique or the reverse (refused while
                // runs of the other kind go).
                if chance(&mut switches, 25) {
                    replacement.run_on_every_instance = !replacement.run_on_every_instance;
                    switched.insert(job.clone());
                }
                changed.insert(job);
                ops.push((offset, Op::Schedule(Box::new(replacement))));
            }
            10 => {
                changed.insert(job.clone());
                ops.push((offset, Op::Unschedule(job.clone())));
                if let Some(def) = code_jobs.iter().chain(&runtime_jobs).find(|d| d.name == job) {
                    let back = offset + Duration::from_secs(60 + entropy.below(600));
                    ops.push((back, Op::Schedule(Box::new(def.clone()))));
                }
            }
            _ => {
                if let Some(code) = code_jobs.get(entropy.below(code_jobs.len().max(1) as u64) as usize) {
                    changed.insert(code.name.clone());
                    ops.push((offset, Op::Restore(code.name.clone())));
                }
            }
        }
        at += 20 + entropy.below(280);
    }
    ops.sort_by_key(|(offset, _)| *offset);
    Workload { code_jobs, runtime_jobs, ops, changed, switched }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn given_jobs_are_refused_when_two_share_a_name_or_a_calendar_is_unknown() {
        let job = |name: &str, schedule: &str| {
            JobDefinition::new(JobName::new(name).unwrap(), JobTypeKey::new("log").unwrap())
                .with_trigger(JobTriggerDefinition::new(TriggerName::new("t").unwrap(), schedule.parse().unwrap()))
        };
        let given = |jobs| GivenJobs { jobs, calendars: Default::default() };
        assert_eq!(check_given(&given(vec![job("a", "cron 0 * * * * *"), job("b", "manual")])), Ok(()));
        let twice = given(vec![job("a", "manual"), job("b", "manual"), job("a", "cron 0 * * * * *")]);
        assert_eq!(check_given(&twice), Err("job 'a' is defined twice".into()));
        let quiet = given(vec![job("a", "cron 0 * * * * * calendar=quiet")]);
        assert_eq!(check_given(&quiet), Ok(()), "the simulation's own calendar");
        let unknown = check_given(&given(vec![job("a", "cron 0 * * * * * calendar=holidays")])).unwrap_err();
        assert!(unknown.contains("calendar 'holidays' is neither in the file nor the simulation's own"), "{unknown}");
    }
}
