//! Retries follow their policy; lost runs are recovered exactly when their job asks.

use std::collections::BTreeMap;

use chrono::TimeDelta;
use sundial::job::{JobDefinition, RunCause, RunState};
use sundial::name::JobName;
use sundial::store::records::RunRecord;
use sundial::time::{add_duration, from_micros};
use uuid::Uuid;

use crate::options::LIVENESS_BOUND;

use super::{Checked, Inputs};

/// Retries follow the policy: a `retry-…` run follows a failed run, with attempt + 1 and
/// `retry_of` = the chain's first run, never past `max_retries`; and a failed run with
/// retries left gets exactly one.
pub(super) fn retries(
    inputs: &Inputs<'_>,
    definitions: &BTreeMap<&JobName, &JobDefinition>,
    history: &BTreeMap<Uuid, &RunRecord>,
    checked: &mut Checked,
) {
    let mut retries_of: BTreeMap<String, Vec<&RunRecord>> = BTreeMap::new();
    for run in inputs.history.iter().filter(|r| r.cause == RunCause::Retry && !r.local) {
        *checked.checked.entry("retries").or_default() += 1;
        let Some(failed_simple) = run.trigger.as_deref().and_then(|t| t.strip_prefix("retry-")) else {
            checked.violations.push(format!("retry run {} has trigger {:?}, not retry-…", run.id, run.trigger));
            continue;
        };
        retries_of.entry(failed_simple.to_owned()).or_default().push(run);
        let Some(failed) = Uuid::try_parse(failed_simple).ok().and_then(|id| history.get(&id)) else {
            checked
                .violations
                .push(format!("retry run {} follows run {failed_simple}, which is not in history", run.id));
            continue;
        };
        if failed.state != RunState::Failed {
            checked
                .violations
                .push(format!("retry run {} follows run {} which ended {:?}", run.id, failed.id, failed.state));
        }
        let root = failed.retry_of.unwrap_or(failed.id);
        if run.attempt != failed.attempt + 1 || run.retry_of != Some(root) {
            checked.violations.push(format!(
                "retry run {} has attempt {} retry_of {:?}; expected {} and {root}",
                run.id,
                run.attempt,
                run.retry_of,
                failed.attempt + 1
            ));
        }
        let stable = JobName::new(&run.job).ok().filter(|n| !inputs.workload.changed.contains(n));
        let policy = stable.as_ref().and_then(|n| definitions.get(n)).and_then(|d| d.retry.as_ref());
        if let Some(policy) = policy {
            if run.attempt > policy.max_retries() + 1 {
                checked.violations.push(format!(
                    "retry run {} is attempt {}, past {} retries",
                    run.id,
                    run.attempt,
                    policy.max_retries()
                ));
            }
        }
    }
    for (simple, runs) in &retries_of {
        if runs.len() > 1 {
            let ids: Vec<Uuid> = runs.iter().map(|r| r.id).collect();
            checked.violations.push(format!("run {simple} was retried {} times: {ids:?}", runs.len()));
        }
    }
    let horizon = inputs.end - TimeDelta::from_std(LIVENESS_BOUND).unwrap_or_default();
    for failed in inputs.history.iter().filter(|r| r.state == RunState::Failed && !r.local) {
        let Ok(name) = JobName::new(&failed.job) else { continue };
        if inputs.workload.changed.contains(&name) {
            continue;
        }
        let Some(policy) = definitions.get(&name).and_then(|d| d.retry.as_ref()) else { continue };
        if failed.attempt > policy.max_retries() {
            continue;
        }
        let Some(finished) = failed.finished_us.and_then(from_micros) else { continue };
        if add_duration(finished, policy.delay_for(failed.attempt)) > horizon {
            continue;
        }
        let simple = failed.id.simple().to_string();
        // A retry still waiting (a busy non-concurrent job) is pending, not lost.
        let pending = inputs.triggers.contains(&(failed.job.clone(), format!("retry-{simple}")));
        if pending {
            *checked.checked.entry("retries pending at the end").or_default() += 1;
        }
        if !retries_of.contains_key(&simple) && !pending {
            checked.violations.push(format!(
                "run {} of {} failed at {finished} (attempt {}) and was never retried",
                failed.id, failed.job, failed.attempt
            ));
        }
    }
}

/// A lost run of a job that requests recovery is recovered exactly once; other lost runs
/// never are.
pub(super) fn recovery(inputs: &Inputs<'_>, definitions: &BTreeMap<&JobName, &JobDefinition>, checked: &mut Checked) {
    let mut recoveries: BTreeMap<&str, Vec<Uuid>> = BTreeMap::new();
    for run in inputs.history.iter().filter(|r| r.cause == RunCause::Recovery) {
        if let Some(lost) = run.trigger.as_deref().and_then(|t| t.strip_prefix("recovery-")) {
            recoveries.entry(lost).or_default().push(run.id);
        }
    }
    let horizon = inputs.end - TimeDelta::from_std(LIVENESS_BOUND).unwrap_or_default();
    for lost in inputs.history.iter().filter(|r| r.state == RunState::Lost) {
        *checked.checked.entry("lost runs").or_default() += 1;
        let simple = lost.id.simple().to_string();
        let count = recoveries.get(simple.as_str()).map_or(0, Vec::len);
        let Ok(name) = JobName::new(&lost.job) else { continue };
        let wants = definitions.get(&name).is_some_and(|d| d.requests_recovery);
        let declared = lost.finished_us.and_then(from_micros);
        if inputs.workload.changed.contains(&name) || lost.local {
            if count > 1 {
                checked.violations.push(format!("lost run {} was recovered {count} times", lost.id));
            }
            continue;
        }
        // A recovery still waiting (a busy non-concurrent job) is pending, not lost.
        let pending = inputs.triggers.contains(&(lost.job.clone(), format!("recovery-{simple}")));
        match (wants, count) {
            (true, 1) | (false, 0) => {}
            (true, 0) if pending || declared.is_none_or(|d| d > horizon) => {}
            (true, n) => checked.violations.push(format!(
                "lost run {} of {} (declared at {declared:?}) was recovered {n} times, expected once",
                lost.id, lost.job
            )),
            (false, n) => checked.violations.push(format!(
                "lost run {} of {} was recovered {n} times, but the job does not request recovery",
                lost.id, lost.job
            )),
        }
    }
}
