//! The state at the end: nothing stuck running, outcomes as the jobs did, nothing overdue.

use std::collections::{BTreeMap, BTreeSet};

use chrono::{DateTime, TimeDelta, Utc};
use sundial::error::ErrorCode;
use sundial::job::{JobDefinition, RunState, TriggerState};
use sundial::name::JobName;
use sundial::store::records::RunRecord;
use uuid::Uuid;

use crate::options::LIVENESS_BOUND;
use crate::trace::EventKind;

use super::{time, Checked, Execution, Inputs, BUSY_MARGIN};

/// At the end, a `Running` run is really running on a live node (or about to start).
pub(super) fn nothing_stuck(inputs: &Inputs<'_>, executions: &BTreeMap<Uuid, Execution<'_>>, checked: &mut Checked) {
    let live: BTreeSet<(&str, u32)> = inputs.live.iter().map(|l| (l.node.as_str(), l.incarnation)).collect();
    // A run taken ahead (up to a second) for a start after the end never started; its
    // scheduled time is on its node's clock, up to the largest skew behind true time.
    let skew = inputs.setting.skew_bound_seconds.max(0.0);
    let soon = inputs.end - TimeDelta::seconds(2) - TimeDelta::milliseconds((skew * 1000.0) as i64);
    for run in inputs.history.iter().filter(|r| r.state == RunState::Running) {
        *checked.checked.entry("running at the end").or_default() += 1;
        let fine = match executions.get(&run.id) {
            Some(execution) => {
                execution.end.is_none() && live.contains(&(execution.facts.node.as_str(), execution.facts.incarnation))
            }
            None => time(run.scheduled_us) >= soon,
        };
        if !fine {
            let what = executions.get(&run.id).map_or_else(
                || "never started".to_owned(),
                |e| {
                    format!(
                        "started {} on {}#{}, ended {:?}",
                        e.start,
                        e.facts.node,
                        e.facts.incarnation,
                        e.end.map(|(at, _)| at)
                    )
                },
            );
            checked.violations.push(format!(
                "run {} of {} is stuck Running on {} after the liveness phase ({what})",
                run.id, run.job, run.node
            ));
        }
    }
}

/// A finished run's record says what its job did (SPEC §8): `Succeeded` only when the
/// job returned success, `Failed` with the job's own failure (its own code, if any) only when it
/// failed, with `SCHEDULING_UNEXPECTED_001` only when it panicked; whatever it did, a
/// cancellation (`Canceled`) or a timeout (`Failed` with `SCHEDULING_TIMEOUT_001`) that
/// came first decides instead, and a timeout only once the job had run that long. A job
/// killed with its node never completed: its run can only end `Lost`. Any run may have
/// been declared lost before its completion came.
pub(super) fn outcomes_recorded(
    inputs: &Inputs<'_>,
    definitions: &BTreeMap<&JobName, &JobDefinition>,
    history: &BTreeMap<Uuid, &RunRecord>,
    executions: &BTreeMap<Uuid, Execution<'_>>,
    checked: &mut Checked,
) {
    let timed_out = Some(ErrorCode::RunTimedOut.as_str());
    let panicked = Some(ErrorCode::Unexpected.as_str());
    for (id, execution) in executions {
        let (Some((end, seq)), Some(record)) = (execution.end, history.get(id)) else { continue };
        if !record.state.is_final() || record.state == RunState::Lost {
            continue;
        }
        *checked.checked.entry("outcomes recorded").or_default() += 1;
        let code = record.error_code.as_deref();
        let (did, own) = match &inputs.events[seq].kind {
            EventKind::End { outcome: "ok", .. } => ("succeeded", record.state == RunState::Succeeded),
            // The job's own failure: its code if it gave one (a shell job's exit status),
            // never one the engine gives for a panic or a timeout.
            EventKind::End { outcome: "fail", .. } => {
                ("failed", record.state == RunState::Failed && code != panicked && code != timed_out)
            }
            EventKind::End { outcome: "panic", .. } => {
                ("panicked", record.state == RunState::Failed && code == panicked)
            }
            EventKind::End { .. } => ("stopped on its cancellation", false),
            _ => ("was killed with its node", false),
        };
        let killed = matches!(inputs.events[seq].kind, EventKind::Killed { .. });
        let preempted =
            !killed && (record.state == RunState::Canceled || record.state == RunState::Failed && code == timed_out);
        let wrong = if !own && !preempted {
            Some(format!("recorded {:?} ({code:?})", record.state))
        } else if record.state == RunState::Failed && code == timed_out {
            *checked.checked.entry("timeouts recorded").or_default() += 1;
            // Changed jobs' timeouts are not known here.
            let job = JobName::new(&record.job).ok().filter(|name| !inputs.workload.changed.contains(name));
            let timeout = job.as_ref().and_then(|name| definitions.get(name)).map(|def| def.timeout);
            match timeout {
                Some(None) => Some("timed out, yet its job has no timeout".to_owned()),
                Some(Some(timeout)) if end - execution.start < TimeDelta::from_std(timeout).unwrap_or_default() => {
                    Some(format!("timed out after {}, before its timeout of {timeout:?}", end - execution.start))
                }
                _ => None,
            }
        } else {
            None
        };
        if let Some(wrong) = wrong {
            checked.violations.push(format!(
                "run {id} of {} (started {} on {}, ended {end}): the job {did}, yet the run was {wrong}",
                record.job, execution.start, execution.facts.node
            ));
        }
    }
}

/// At the end, no trigger of a cluster-unique job waits for a fire that was due the
/// liveness bound before (plus the most any node's clock was behind), or before the last
/// operation on its job returned if that was later: after the liveness phase every due
/// fire was taken, whatever made it (a schedule, an operation, a retry, a
/// recovery, an enqueue). Nor does one stay `Blocked` while its job has been idle that
/// long: the end of the run that held the slot releases its blocked triggers. Left out:
/// local jobs (their triggers fire in each node's memory), paused jobs and triggers, jobs
/// with operations still pending, and a non-concurrent job still running somewhere (a
/// node leaves its fires waiting while it keeps a run of it that holds no slot).
pub(super) fn nothing_overdue(inputs: &Inputs<'_>, executions: &BTreeMap<Uuid, Execution<'_>>, checked: &mut Checked) {
    if inputs.live.is_empty() {
        return;
    }
    let behind = (-inputs.clock_offsets.0).max(TimeDelta::zero());
    let horizon = inputs.end - TimeDelta::from_std(LIVENESS_BOUND).unwrap_or_default() - behind;
    // Per job: whether a run of it was still going at the end, and when the last one ended.
    let mut activity: BTreeMap<&str, (bool, Option<DateTime<Utc>>)> = BTreeMap::new();
    for execution in executions.values() {
        let (open, last) = activity.entry(execution.facts.run.job.as_str()).or_default();
        match execution.end {
            None => *open = true,
            Some((end, _)) => *last = (*last).max(Some(end)),
        }
    }
    for status in inputs.final_jobs {
        let def = &status.definition;
        if def.run_on_every_instance || status.paused || inputs.in_flux.contains(&def.name) {
            continue;
        }
        let (open, last_end) = activity.get(def.name.as_str()).copied().unwrap_or_default();
        let busy = open || status.running > 0;
        // A fire due while its job was paused (or its trigger was not yet written) may be
        // taken from the last operation on the job on.
        let changed = inputs.changed_at.get(&def.name).copied();
        for trigger in status.triggers.iter().filter(|t| !t.paused) {
            let overdue = match trigger.state {
                TriggerState::Waiting if def.allow_concurrent || !busy => {
                    trigger.next_fire.filter(|due| (*due).max(changed.unwrap_or(*due)) <= horizon)
                }
                // Blocked since the job's last run ended, with nothing running now.
                TriggerState::Blocked if !busy => {
                    let idle_since = last_end.map(|end| end + TimeDelta::from_std(BUSY_MARGIN).unwrap_or_default());
                    trigger.next_fire.filter(|_| idle_since.is_none_or(|idle| idle <= horizon))
                }
                _ => None,
            };
            *checked.checked.entry("triggers at the end").or_default() += 1;
            if let Some(due) = overdue {
                checked.violations.push(format!(
                    "{}/{} ({:?}): its fire due at {due} was still not taken at the end ({})",
                    def.name, trigger.name, trigger.state, inputs.end
                ));
            }
        }
    }
}
