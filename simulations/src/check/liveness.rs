//! The liveness rule: once faults heal, every due fire starts within the bound.

use std::collections::BTreeMap;

use chrono::{DateTime, TimeDelta, Utc};
use sundial::calendar::{Calendars, JobCalendar};
use sundial::job::{JobDefinition, RunState};
use sundial::schedule::{JobSchedule, PreviousFire, ScheduleKind};
use sundial::store::records::RunRecord;
use sundial::time::add_duration;
use uuid::Uuid;

use super::{time, Checked, Execution, Inputs, BUSY_MARGIN, CATCH_UP};

/// When a run ran (true time; no end: still running at the end).
pub(super) struct Span {
    pub(super) start: DateTime<Utc>,
    pub(super) end: Option<DateTime<Utc>>,
    pub(super) run: Uuid,
}

impl Span {
    /// When `execution` (of run `run`) ran.
    pub(super) fn of(run: Uuid, execution: &Execution<'_>) -> Self {
        Self { start: execution.start, end: execution.end.map(|(end, _)| end), run }
    }
}

/// Whether another run of a non-concurrent job (its runs' `spans`) may have held back its
/// fire at `at`, run as `own` (if it was): one that ran at some time from [`BUSY_MARGIN`]
/// and the most any node's clock is ahead before `at` until `own` started, or, if it never
/// did, until the most any node's clock is behind (and a second) after `at`.
pub(super) fn blocked(spans: &[Span], at: DateTime<Utc>, own: Option<&Uuid>, liveness: &Liveness<'_, '_>) -> bool {
    // A node whose clock is ahead saw the fire due (and the job busy) that much earlier.
    let from = at - TimeDelta::from_std(BUSY_MARGIN).unwrap_or_default() - liveness.ahead;
    let until = own
        .and_then(|id| liveness.executions.get(id))
        .map_or(at + liveness.behind + TimeDelta::seconds(1), |execution| execution.start);
    spans.iter().any(|span| Some(&span.run) != own && span.start <= until && span.end.is_none_or(|end| end >= from))
}

/// The liveness rule for a local job, on every node alive at the end, from [`CATCH_UP`]
/// after the node started: each fire of its cron triggers from `from` runs there (for a
/// non-concurrent job, each that no run of it on the node held back: such a fire is
/// skipped there), and for a concurrent job so does the fire that follows each run of an
/// interval trigger without a repeat limit there (each node counts repeats in memory).
pub(super) fn local_jobs_live(
    inputs: &Inputs<'_>,
    calendars: &Calendars,
    def: &JobDefinition,
    ran_here: &BTreeMap<(&str, &str, &str), Vec<&RunRecord>>,
    from: DateTime<Utc>,
    liveness: &Liveness<'_, '_>,
    checked: &mut Checked,
) {
    let status = inputs.final_jobs.iter().find(|s| s.definition.name == def.name);
    if status.is_none_or(|s| s.paused) {
        return;
    }
    // A non-concurrent job's runs on each node incarnation: a fire that finds one of them
    // running there is skipped there.
    let mut held: BTreeMap<(&str, u32), Vec<Span>> = BTreeMap::new();
    if !def.allow_concurrent {
        for (run, e) in liveness.executions.iter().filter(|(_, e)| e.facts.run.job == def.name) {
            held.entry((e.facts.node.as_str(), e.facts.incarnation)).or_default().push(Span::of(*run, e));
        }
    }
    for trigger in &def.triggers {
        let paused = status.is_some_and(|s| s.triggers.iter().any(|t| t.name == trigger.name.as_str() && t.paused));
        if paused {
            continue;
        }
        let calendar = trigger.schedule.calendar.as_ref().and_then(|c| calendars.get(c));
        for live in inputs.live {
            let from = from.max(add_duration(live.started, CATCH_UP));
            // This incarnation's runs (an earlier one's triggers died with it), in order.
            let here = ran_here.get(&(def.name.as_str(), trigger.name.as_str(), live.node.as_str()));
            let mut runs: Vec<&RunRecord> = here
                .into_iter()
                .flatten()
                .copied()
                .filter(|r| liveness.executions.get(&r.id).is_some_and(|e| e.facts.incarnation == live.incarnation))
                .collect();
            runs.sort_by_key(|r| r.scheduled_us);
            let label = format!("{}/{} on {} (local)", def.name, trigger.name, live.node);
            let fires = Fires { schedule: &trigger.schedule, calendar, from };
            match trigger.schedule.kind {
                ScheduleKind::Cron { .. } => {
                    let scheduled: BTreeMap<i64, Uuid> = runs.iter().map(|r| (r.scheduled_us, r.id)).collect();
                    let (held, what) = if def.allow_concurrent {
                        (None, "liveness fires of local jobs")
                    } else {
                        let here = held.get(&(live.node.as_str(), live.incarnation)).map_or(&[][..], Vec::as_slice);
                        (Some(here), "liveness fires of idle non-concurrent local jobs")
                    };
                    liveness.judge_fires(&label, fires, Some(&scheduled), held, what, checked);
                }
                ScheduleKind::Every { repeat_count: None, .. } if def.allow_concurrent => {
                    liveness.judge_intervals(&label, fires, &runs, "interval fires of local jobs", checked);
                }
                _ => {}
            }
        }
    }
}

/// The liveness rule: a fire starts within the bound.
pub(super) struct Liveness<'e, 'a> {
    pub(super) executions: &'e BTreeMap<Uuid, Execution<'a>>,
    /// The most any node's clock is behind.
    pub(super) behind: TimeDelta,
    /// The most any node's clock is ahead.
    pub(super) ahead: TimeDelta,
    /// [`LIVENESS_BOUND`](crate::options::LIVENESS_BOUND) plus `behind`.
    pub(super) bound: TimeDelta,
    /// The latest fire judged: one the bound before the end.
    pub(super) horizon: DateTime<Utc>,
}

/// A trigger's schedule and calendar, and from when its fires are judged.
pub(super) struct Fires<'s> {
    pub(super) schedule: &'s JobSchedule,
    pub(super) calendar: Option<&'s dyn JobCalendar>,
    pub(super) from: DateTime<Utc>,
}

impl Liveness<'_, '_> {
    /// Judges each of `fires` up to the horizon, run as the run of `runs` scheduled at its
    /// time (if any), counting them under `what`.
    /// With `held`, the spans of the runs that could hold a fire back (a non-concurrent
    /// job's), only the fires none of them held back are judged.
    fn judge_fires(
        &self,
        label: &str,
        fires: Fires<'_>,
        runs: Option<&BTreeMap<i64, Uuid>>,
        held: Option<&[Span]>,
        what: &'static str,
        checked: &mut Checked,
    ) {
        let mut next = fires.schedule.first_fire(fires.from, fires.calendar);
        let mut count = 0u32;
        while let Some(at) = next.filter(|at| *at <= self.horizon) {
            count += 1;
            let run = runs.and_then(|r| r.get(&at.timestamp_micros()));
            if held.is_none_or(|spans| !blocked(spans, at, run, self)) {
                *checked.checked.entry(what).or_default() += 1;
                self.judge(label, at, run, checked);
            }
            let previous = PreviousFire { scheduled_at: at, completed_at: at, fire_count: count };
            next = fires.schedule.next_fire(&previous, fires.calendar);
        }
    }

    /// Judges the fires from `fires.from` that follow `runs`, the runs of an interval
    /// trigger's fires in order (its first fire's first): each run that ended by itself
    /// re-armed the trigger one interval after its end (or its scheduled time, if later),
    /// unless it was the last of its repeats.
    pub(super) fn judge_intervals(
        &self,
        label: &str,
        fires: Fires<'_>,
        runs: &[&RunRecord],
        what: &'static str,
        checked: &mut Checked,
    ) {
        let scheduled: BTreeMap<i64, Uuid> = runs.iter().map(|r| (r.scheduled_us, r.id)).collect();
        for (fired, run) in (1u32..).zip(runs) {
            let Some(finished) = run.finished_us.map(time).filter(|_| run.state != RunState::Lost) else { continue };
            let previous =
                PreviousFire { scheduled_at: time(run.scheduled_us), completed_at: finished, fire_count: fired };
            let Some(at) = fires.schedule.next_fire(&previous, fires.calendar) else { continue };
            if at >= fires.from && at <= self.horizon {
                *checked.checked.entry(what).or_default() += 1;
                self.judge(label, at, scheduled.get(&at.timestamp_micros()), checked);
            }
        }
    }

    /// Judges the fire of `label` at `at`, run as `run` (if it was).
    pub(super) fn judge(&self, label: &str, at: DateTime<Utc>, run: Option<&Uuid>, checked: &mut Checked) {
        match run.and_then(|id| self.executions.get(id)) {
            None => {
                checked.violations.push(format!("{label}: the fire at {at} (liveness phase) did not start by the end"))
            }
            Some(execution) => {
                *checked.checked.entry("liveness fires judged").or_default() += 1;
                let late = execution.start - at;
                checked.liveness_worst = checked.liveness_worst.max(Some(late - self.behind));
                if late > self.bound {
                    checked.violations.push(format!(
                        "{label}: the fire at {at} (liveness phase) started late, at {}",
                        execution.start
                    ));
                }
            }
        }
    }
}

/// The liveness rule for the jobs operations changed, which the accounting leaves out (their
/// fires do not follow from one definition): the fires of the definition in force at the
/// end (its cron triggers', and its interval triggers' without a repeat limit), from
/// [`CATCH_UP`] after the last operation on the job returned (none pending then).
pub(super) fn changed_jobs_live(
    inputs: &Inputs<'_>,
    calendars: &Calendars,
    ran: &BTreeMap<(&str, &str), Vec<&RunRecord>>,
    lateness_from: DateTime<Utc>,
    liveness: &Liveness<'_, '_>,
    checked: &mut Checked,
) {
    for status in inputs.final_jobs {
        let def = &status.definition;
        let judged = inputs.workload.changed.contains(&def.name)
            && !inputs.in_flux.contains(&def.name)
            && !inputs.late_jobs.contains(&def.name)
            && def.allow_concurrent
            && !def.run_on_every_instance
            && !status.paused;
        let Some(changed) = inputs.changed_at.get(&def.name).filter(|_| judged) else { continue };
        let from = lateness_from.max(add_duration(*changed, CATCH_UP));
        for trigger in &def.triggers {
            let paused = status.triggers.iter().any(|t| t.name == trigger.name.as_str() && t.paused);
            if paused {
                continue;
            }
            let runs = ran.get(&(def.name.as_str(), trigger.name.as_str())).map_or(&[][..], Vec::as_slice);
            let calendar = trigger.schedule.calendar.as_ref().and_then(|c| calendars.get(c));
            let label = format!("{}/{} (changed)", def.name, trigger.name);
            let fires = Fires { schedule: &trigger.schedule, calendar, from };
            match trigger.schedule.kind {
                ScheduleKind::Cron { .. } => {
                    let scheduled: BTreeMap<i64, Uuid> = runs.iter().map(|r| (r.scheduled_us, r.id)).collect();
                    liveness.judge_fires(
                        &label,
                        fires,
                        Some(&scheduled),
                        None,
                        "liveness fires of changed jobs",
                        checked,
                    );
                }
                ScheduleKind::Every { repeat_count: None, .. } => {
                    // The runs of the trigger as it is at the end: those from `from` on (an
                    // earlier one may have been the old definition's, which re-armed nothing).
                    let mut runs: Vec<&RunRecord> =
                        runs.iter().copied().filter(|r| time(r.scheduled_us) >= from).collect();
                    runs.sort_by_key(|r| r.scheduled_us);
                    liveness.judge_intervals(&label, fires, &runs, "interval fires of changed jobs", checked);
                }
                _ => {}
            }
        }
    }
}
