//! Every fire accounted for: at most one run each, every fire of a stable trigger run or
//! skipped by its policy, fire counts as the runs say.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use chrono::TimeDelta;
use sundial::job::{JobDefinition, MisfirePolicy, RunCause, TriggerState};
use sundial::name::JobName;
use sundial::schedule::{PreviousFire, ScheduleKind};
use sundial::store::records::RunRecord;
use sundial::time::add_duration;
use uuid::Uuid;

use crate::options::LIVENESS_BOUND;
use crate::workload::Op;

use super::liveness::{blocked, changed_jobs_live, local_jobs_live, Fires, Liveness, Span};
use super::{time, Checked, Execution, Inputs, BUSY_MARGIN, CATCH_UP};

/// Each (trigger, scheduled time) of a cluster-unique job has at most one run. Jobs whose
/// definitions changed are left out: a trigger deleted and made again is a new trigger,
/// whose fires may repeat the old one's times (their runs are still checked one by one:
/// no run id starts twice).
pub(super) fn at_most_once(inputs: &Inputs<'_>, checked: &mut Checked) {
    let stable = |job: &str| JobName::new(job).is_ok_and(|name| !inputs.workload.changed.contains(&name));
    let (fires, repeated) = repeated_fires(inputs.history, stable);
    *checked.checked.entry("fires").or_default() += fires;
    checked.violations.extend(repeated);
}

/// The fires of `stable` jobs' triggers that cluster-unique runs in `history` are of, and
/// a line for each that more than one of them ran.
fn repeated_fires(history: &[RunRecord], stable: impl Fn(&str) -> bool) -> (u64, Vec<String>) {
    // Sorted, a fire's runs lie side by side (a quarter of a million runs a simulated day:
    // one sort, not a map entry and a vector per fire).
    let mut fires: Vec<(&str, &str, i64, Uuid)> = history
        .iter()
        .filter(|r| r.cause == RunCause::Schedule && !r.local)
        .filter_map(|r| r.trigger.as_deref().map(|trigger| (r.job.as_str(), trigger, r.scheduled_us, r.id)))
        .collect();
    fires.sort_unstable();
    let (mut count, mut repeated) = (0, Vec::new());
    for job_fires in fires.chunk_by(|a, b| a.0 == b.0).filter(|runs| stable(runs[0].0)) {
        for runs in job_fires.chunk_by(|a, b| (a.1, a.2) == (b.1, b.2)) {
            count += 1;
            if let [(job, trigger, scheduled, _), _, ..] = runs {
                let ids: Vec<Uuid> = runs.iter().map(|run| run.3).collect();
                repeated.push(format!("fire {job}/{trigger} at {} ran {} times: {ids:?}", time(*scheduled), ids.len()));
            }
        }
    }
    (count, repeated)
}

/// Every fire of a stable trigger is accounted for: `RunAll` cron triggers run every fire
/// exactly at its time, in order (no gap before the latest fire run); `once` triggers
/// fire once (at most once with `Skip`); `every … xN` triggers at most N times; and in
/// the liveness phase every fire of a concurrent job's cron trigger, and each interval
/// fire after its trigger's run ended, starts within [`LIVENESS_BOUND`] of its time (plus
/// the most any node's clock is behind): on every node alive then for a local job, by its
/// final definition for a job operations changed.
pub(super) fn fires_accounted(
    inputs: &Inputs<'_>,
    definitions: &BTreeMap<&JobName, &JobDefinition>,
    executions: &BTreeMap<Uuid, Execution<'_>>,
    checked: &mut Checked,
) {
    let calendars = inputs.setting.calendars;
    let skews = inputs.setting.skews;
    let epoch = inputs.setting.epoch;
    let skew = skews.iter().map(|s| s.abs()).max().unwrap_or_default();
    let settled = add_duration(epoch, inputs.setting.settle) + skew;
    // A node whose clock is behind takes its fires that much later in true time (and if
    // every node is behind, no other takes them first): the bound allows for it.
    let behind = skews.iter().map(|s| -*s).max().unwrap_or_default().max(TimeDelta::zero());
    let bound = TimeDelta::from_std(LIVENESS_BOUND).unwrap_or_default() + behind;
    let horizon = inputs.end - bound;
    let ahead = skews.iter().copied().max().unwrap_or_default().max(TimeDelta::zero());
    let liveness = Liveness { executions, behind, ahead, bound, horizon };
    let mut ran: BTreeMap<(&str, &str), Vec<&RunRecord>> = BTreeMap::new();
    // Local runs, by node.
    let mut ran_here: BTreeMap<(&str, &str, &str), Vec<&RunRecord>> = BTreeMap::new();
    for run in inputs.history.iter().filter(|r| r.cause == RunCause::Schedule) {
        if let Some(trigger) = &run.trigger {
            if run.local {
                ran_here.entry((&run.job, trigger, &run.node)).or_default().push(run);
            } else {
                ran.entry((&run.job, trigger)).or_default().push(run);
            }
        }
    }
    let lateness_from = add_duration(inputs.liveness_from, CATCH_UP + inputs.jumped_ahead);
    // What ran of each job in the liveness phase (and before, if still running then):
    // whether a non-concurrent job was busy around a fire.
    let since = lateness_from - TimeDelta::from_std(BUSY_MARGIN).unwrap_or_default() - liveness.ahead;
    let mut spans: BTreeMap<&str, Vec<Span>> = BTreeMap::new();
    for (id, execution) in executions {
        if execution.end.is_none_or(|(end, _)| end >= since) {
            let job = execution.facts.run.job.as_str();
            spans.entry(job).or_default().push(Span::of(*id, execution));
        }
    }
    // A job paused into the liveness phase is judged from its resume on.
    let mut resumed: BTreeMap<&JobName, Duration> = BTreeMap::new();
    let mut paused: BTreeSet<&JobName> = BTreeSet::new();
    for (at, op) in &inputs.workload.ops {
        let job = match op {
            Op::Resume(job) => job,
            Op::ResumeTrigger(key) => &key.job,
            Op::Pause(job) => {
                paused.insert(job);
                continue;
            }
            Op::PauseTrigger(key) => {
                paused.insert(&key.job);
                continue;
            }
            _ => continue,
        };
        let latest = resumed.entry(job).or_default();
        *latest = (*latest).max(*at);
    }
    let threshold = inputs.setting.misfire_threshold;
    let misfired_by = TimeDelta::from_std(threshold).unwrap_or_default() - TimeDelta::seconds(1);
    for def in definitions.values() {
        let lateness_from =
            resumed.get(&def.name).map_or(lateness_from, |at| lateness_from.max(add_duration(epoch, *at + CATCH_UP)));
        if inputs.late_jobs.contains(&def.name) {
            *checked.checked.entry("jobs created late (fires not accounted)").or_default() += 1;
            continue;
        }
        if inputs.workload.changed.contains(&def.name) {
            continue;
        }
        if def.run_on_every_instance {
            let from = inputs
                .changed_at
                .get(&def.name)
                .map_or(lateness_from, |at| lateness_from.max(add_duration(*at, CATCH_UP)));
            local_jobs_live(inputs, calendars, def, &ran_here, from, &liveness, checked);
            continue;
        }
        for trigger in &def.triggers {
            let runs = ran.get(&(def.name.as_str(), trigger.name.as_str())).map_or(&[][..], Vec::as_slice);
            let scheduled: BTreeMap<i64, Uuid> = runs.iter().map(|r| (r.scheduled_us, r.id)).collect();
            let calendar = trigger.schedule.calendar.as_ref().and_then(|c| calendars.get(c));
            let label = format!("{}/{}", def.name, trigger.name);
            match &trigger.schedule.kind {
                ScheduleKind::Cron { .. } => {
                    // RunAll never skips a fire; a busy job may still be catching up at
                    // the end, so every fire up to the latest one run must have run.
                    let strict = trigger.misfire == MisfirePolicy::RunAll;
                    let caught_up = scheduled.keys().next_back().copied().unwrap_or(i64::MIN);
                    let spans = spans.get(def.name.as_str()).map_or(&[][..], Vec::as_slice);
                    let from = settled.timestamp_micros();
                    let mut next = trigger.schedule.first_fire(settled, calendar);
                    let mut count = 0u32;
                    // Missed fires, grouped by the next recorded fire after them; only gaps
                    // that open after a recorded fire in the window (the fires before it
                    // are not all known here).
                    let mut gaps: BTreeMap<i64, i64> = BTreeMap::new();
                    while let Some(at) = next.filter(|at| *at <= horizon) {
                        count += 1;
                        *checked.checked.entry("expected fires").or_default() += 1;
                        let run = scheduled.get(&at.timestamp_micros());
                        let at_us = at.timestamp_micros();
                        let opened = scheduled.range(from..at_us).next_back().is_some();
                        if run.is_none() && opened {
                            if let Some((&after, _)) = scheduled.range(at_us..).next() {
                                gaps.entry(after).or_insert(at_us);
                            }
                        }
                        if strict && run.is_none() && at.timestamp_micros() <= caught_up {
                            checked.violations.push(format!("{label} (RunAll): the fire at {at} never ran"));
                        }
                        if at >= lateness_from {
                            if def.allow_concurrent {
                                liveness.judge(&label, at, run, checked);
                            } else if !blocked(spans, at, run, &liveness) {
                                // Not held back by another run of its job, a non-concurrent
                                // job's fire runs as a concurrent one's would. (A blocked
                                // fire waits, or is skipped as a misfire: not judged.)
                                *checked.checked.entry("liveness fires of idle non-concurrent jobs").or_default() += 1;
                                liveness.judge(&label, at, run, checked);
                            }
                        }
                        let previous = PreviousFire { scheduled_at: at, completed_at: at, fire_count: count };
                        next = trigger.schedule.next_fire(&previous, calendar);
                    }
                    // `RunOnce` and `Skip` skip fires only as misfires: the first fire of a
                    // gap was taken more than the threshold late (on the taking node's
                    // clock), and the next recorded fire (the `RunOnce` catch-up at that
                    // node's now, or the next after it) comes after that. A fire missed for
                    // any other reason leaves a shorter gap. Gaps still open at the end, and
                    // jobs paused at some point, are not judged.
                    if !strict && !paused.contains(&def.name) {
                        for (after, first) in gaps {
                            *checked.checked.entry("skipped fires").or_default() += 1;
                            if time(after) - time(first) <= misfired_by {
                                checked.violations.push(format!(
                                    "{label} ({:?}): the fire at {} never ran, yet the next recorded fire is at {}, \
                                     within the misfire threshold",
                                    trigger.misfire,
                                    time(first),
                                    time(after)
                                ));
                            }
                        }
                    }
                }
                ScheduleKind::Once { at } => {
                    let due = trigger.schedule.first_fire(*at - TimeDelta::seconds(1), calendar);
                    if due.is_some_and(|due| due <= horizon && due > settled) {
                        *checked.checked.entry("expected fires").or_default() += 1;
                        // A non-concurrent job may still hold it back (Blocked) at the end.
                        let pending = !def.allow_concurrent
                            && inputs.triggers.contains(&(def.name.to_string(), trigger.name.to_string()));
                        let expected_min = usize::from(trigger.misfire != MisfirePolicy::Skip && !pending);
                        if runs.len() < expected_min || runs.len() > 1 {
                            let ids: Vec<Uuid> = runs.iter().map(|r| r.id).collect();
                            checked.violations.push(format!(
                                "{label} (once at {at}, {:?}): {} runs {ids:?}",
                                trigger.misfire,
                                runs.len()
                            ));
                        }
                    }
                }
                ScheduleKind::Every { repeat_count, .. } => {
                    if let Some(limit) = repeat_count.filter(|limit| runs.len() > *limit as usize) {
                        checked.violations.push(format!("{label}: {} runs, more than its {limit} repeats", runs.len()));
                    }
                    if def.allow_concurrent && !paused.contains(&def.name) {
                        let mut runs = runs.to_vec();
                        runs.sort_by_key(|r| r.scheduled_us);
                        let fires = Fires { schedule: &trigger.schedule, calendar, from: lateness_from };
                        liveness.judge_intervals(&label, fires, &runs, "interval fires judged", checked);
                    }
                }
                _ => {}
            }
        }
    }
    changed_jobs_live(inputs, calendars, &ran, lateness_from, &liveness, checked);
}

/// Each trigger's count of fires (its status) is the number of runs its fires started: a
/// fire counts when it starts a run, in the transaction that records the run, and a fire
/// its misfire policy skipped does not count. Left out: jobs an operation changed (a
/// trigger written anew counts from zero), jobs the store took late, and local jobs (each
/// node counts their fires in memory).
pub(super) fn fire_counts(inputs: &Inputs<'_>, checked: &mut Checked) {
    let mut runs: BTreeMap<(&str, &str), u32> = BTreeMap::new();
    for run in inputs.history.iter().filter(|r| r.cause == RunCause::Schedule && !r.local) {
        if let Some(trigger) = &run.trigger {
            *runs.entry((&run.job, trigger)).or_default() += 1;
        }
    }
    for status in inputs.final_jobs {
        let def = &status.definition;
        if def.run_on_every_instance
            || inputs.workload.changed.contains(&def.name)
            || inputs.late_jobs.contains(&def.name)
        {
            continue;
        }
        // The definition's triggers (not the engine's one-shots, whose runs have other causes).
        for (defined, trigger) in def
            .triggers
            .iter()
            .filter_map(|d| status.triggers.iter().find(|t| t.name == d.name.as_str()).map(|t| (d, t)))
        {
            *checked.checked.entry("trigger fire counts").or_default() += 1;
            let label = format!("{}/{}", def.name, trigger.name);
            let ran = runs.get(&(def.name.as_str(), trigger.name.as_str())).copied().unwrap_or(0);
            if ran != trigger.fire_count {
                checked.violations.push(format!(
                    "{label}: its status counts {} fires, yet {ran} of its fires started a run",
                    trigger.fire_count
                ));
            }
            // An interval trigger with a repeat limit completes with its last fire's run,
            // and only then (a fire its misfire policy skipped does not count).
            if let ScheduleKind::Every { repeat_count: Some(limit), .. } = defined.schedule.kind {
                *checked.checked.entry("repeat limits").or_default() += 1;
                let complete = trigger.state == TriggerState::Complete;
                let wrong = if complete {
                    trigger.fire_count != limit
                } else {
                    trigger.fire_count >= limit && trigger.state != TriggerState::Acquired
                };
                if wrong {
                    checked.violations.push(format!(
                        "{label}: {:?} after {} of its {limit} repeats (next fire {:?})",
                        trigger.state, trigger.fire_count, trigger.next_fire
                    ));
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use sundial::job::{RunCause, RunState};
    use sundial::store::records::RunRecord;
    use uuid::Uuid;

    use super::repeated_fires;

    fn run(id: u128, job: &str, scheduled_us: i64, cause: RunCause, local: bool) -> RunRecord {
        RunRecord {
            id: Uuid::from_u128(id),
            job: job.into(),
            trigger: Some("t".into()),
            scheduled_us,
            cause,
            attempt: 1,
            retry_of: None,
            data: "{}".into(),
            state: RunState::Succeeded,
            node: "node-a".into(),
            started_us: scheduled_us,
            finished_us: Some(scheduled_us),
            error_code: None,
            error_message: None,
            exclusive: false,
            local,
        }
    }

    #[test]
    fn a_stable_cluster_fire_run_twice_is_reported_once_with_both_runs() {
        let history = [
            run(1, "j", 0, RunCause::Schedule, false),
            run(2, "j", 1, RunCause::Schedule, false),
            run(3, "j", 0, RunCause::Schedule, false),
            // Not judged: retries and local runs repeat fires by design, changed jobs may.
            run(4, "j", 1, RunCause::Retry, false),
            run(5, "j", 1, RunCause::Schedule, true),
            run(6, "changed", 0, RunCause::Schedule, false),
            run(7, "changed", 0, RunCause::Schedule, false),
        ];
        let (fires, repeated) = repeated_fires(&history, |job| job != "changed");
        assert_eq!(fires, 2);
        let ids = [Uuid::from_u128(1), Uuid::from_u128(3)];
        assert_eq!(repeated, [format!("fire j/t at {} ran 2 times: {ids:?}", super::time(0))]);
    }
}
