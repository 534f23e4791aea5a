//! What the admin API returns: jobs with their triggers and last result, runs, and
//! per-item results of batch operations. The job definition inside a job view is a
//! [`JobSpec`], so it can be edited and applied again.

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use sundial::describe::{describe, Described};
use sundial::error::SchedulingError;
use sundial::job::{JobOrigin, JobRunInfo, JsonObject, RunCause, RunState, TriggerState};
use sundial::store::{JobStatus, RunOutcome, TriggerStatus};
use uuid::Uuid;

use super::error::{body_of, ErrorBody};
use crate::secrets::redact;
use crate::spec::JobSpec;

/// Where a job stands, at a glance.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum JobState {
    /// Paused as a whole.
    Paused,
    /// A trigger is in `Error` (e.g. its job type is not registered).
    Error,
    /// A run of it is running.
    Running,
    /// A trigger will fire on its own.
    Scheduled,
    /// Nothing will fire on its own: manual triggers only, or every trigger complete.
    Idle,
}

impl JobState {
    /// Every state, in the order above.
    pub const ALL: [JobState; 5] = [Self::Paused, Self::Error, Self::Running, Self::Scheduled, Self::Idle];

    /// Its name in the API.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Paused => "paused",
            Self::Error => "error",
            Self::Running => "running",
            Self::Scheduled => "scheduled",
            Self::Idle => "idle",
        }
    }

    /// Where `status` stands: the first of paused, error, running, scheduled that holds,
    /// else idle.
    pub fn of(status: &JobStatus) -> Self {
        if status.paused {
            Self::Paused
        } else if status.triggers.iter().any(|t| t.state == TriggerState::Error) {
            Self::Error
        } else if status.running > 0 {
            Self::Running
        } else if status.triggers.iter().any(|t| t.next_fire.is_some() && !t.paused) {
            Self::Scheduled
        } else {
            Self::Idle
        }
    }
}

/// A job: its definition and where it stands.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct JobView {
    /// The definition as people write it.
    pub spec: JobSpec,
    /// Where it stands.
    pub state: JobState,
    /// Its triggers' schedules in words, by trigger name (those of a shape put in words;
    /// see [`sundial::describe`]).
    #[serde(default)]
    pub described: BTreeMap<String, Described>,
    /// `Code` (from the node's config), `Overridden` (code job changed at run time) or
    /// `Runtime`.
    pub origin: JobOrigin,
    /// Paused as a whole.
    pub paused: bool,
    /// Runs of it running now, anywhere.
    pub running: usize,
    /// Its triggers, including engine-made ones (`manual-…`, `retry-…`, `recovery-…`).
    pub triggers: Vec<TriggerStatus>,
    /// Its latest finished run.
    pub last_finished: Option<RunView>,
}

impl From<JobStatus> for JobView {
    /// The job as shown: its secrets redacted ([`crate::secrets::redact`]).
    fn from(status: JobStatus) -> Self {
        let mut spec = JobSpec::from_definition(&status.definition);
        let job_type = Some(status.definition.job_type.as_str());
        redact(job_type, &mut spec.data);
        for trigger in &mut spec.triggers {
            redact(job_type, &mut trigger.data);
        }
        let described = status
            .definition
            .triggers
            .iter()
            .filter_map(|t| Some((t.name.to_string(), describe(&t.schedule)?)))
            .collect();
        Self {
            state: JobState::of(&status),
            described,
            spec,
            origin: status.origin,
            paused: status.paused,
            running: status.running,
            triggers: status.triggers,
            last_finished: status.last_finished.map(RunView::from),
        }
    }
}

/// One run in history.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RunView {
    /// Its id.
    pub id: Uuid,
    /// The job.
    pub job: String,
    /// The trigger that fired it (none for `trigger` runs).
    pub trigger: Option<String>,
    /// When it was due.
    pub scheduled_at: DateTime<Utc>,
    /// Why it ran.
    pub cause: RunCause,
    /// 1 for a first attempt.
    pub attempt: u32,
    /// The first attempt, for retries.
    pub retry_of: Option<Uuid>,
    /// Its state.
    pub state: RunState,
    /// The node that ran it.
    pub node: String,
    /// When it started.
    pub started_at: DateTime<Utc>,
    /// When it ended.
    pub finished_at: Option<DateTime<Utc>>,
    /// The error code, when it failed or was canceled.
    pub error_code: Option<String>,
    /// The error message.
    pub error_message: Option<String>,
    /// Its data.
    pub data: JsonObject,
}

impl From<JobRunInfo> for RunView {
    /// The run as shown: its data's secrets redacted, its job's type unknown (so `env` and
    /// `headers` values are, whatever the type).
    fn from(mut info: JobRunInfo) -> Self {
        redact(None, &mut info.run.data);
        Self {
            id: info.run.id,
            job: info.run.job.to_string(),
            trigger: info.run.trigger.map(|t| t.to_string()),
            scheduled_at: info.run.scheduled_at,
            cause: info.run.cause,
            attempt: info.run.attempt,
            retry_of: info.run.retry_of,
            state: info.state,
            node: info.node,
            started_at: info.started_at,
            finished_at: info.finished_at,
            error_code: info.error_code,
            error_message: info.error_message,
            data: info.run.data,
        }
    }
}

/// How a synchronous `trigger` ended.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct OutcomeView {
    /// `Succeeded`, `Failed` or `Canceled`.
    pub state: RunState,
    /// The error code.
    pub error_code: Option<String>,
    /// The error message.
    pub error_message: Option<String>,
}

impl From<RunOutcome> for OutcomeView {
    fn from(outcome: RunOutcome) -> Self {
        match outcome {
            RunOutcome::Succeeded => Self { state: RunState::Succeeded, error_code: None, error_message: None },
            RunOutcome::Failed { code, message } => {
                Self { state: RunState::Failed, error_code: code, error_message: Some(message) }
            }
            RunOutcome::Canceled { message } => Self {
                state: RunState::Canceled,
                error_code: Some(sundial::error::ErrorCode::RunCanceled.as_str().to_owned()),
                error_message: Some(message),
            },
        }
    }
}

/// One item of a batch operation.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ItemResult {
    /// The item (job name, `job/trigger`, or run id).
    pub item: String,
    /// It succeeded.
    pub ok: bool,
    /// Why not.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<ErrorBody>,
}

impl ItemResult {
    /// The result of `item`.
    pub fn of(item: impl Into<String>, result: Result<(), SchedulingError>) -> Self {
        match result {
            Ok(()) => Self { item: item.into(), ok: true, error: None },
            Err(error) => Self { item: item.into(), ok: false, error: Some(body_of(&error)) },
        }
    }

    /// A failed item whose request was malformed.
    pub fn invalid(item: impl Into<String>, error: ErrorBody) -> Self {
        Self { item: item.into(), ok: false, error: Some(error) }
    }
}
