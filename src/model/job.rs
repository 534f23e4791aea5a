//! Job definitions (SPEC §1–2, §8), runs, and the legal state transitions of triggers
//! and runs.

use std::collections::BTreeSet;
use std::fmt;
use std::time::Duration;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use uuid::Uuid;

use crate::calendar::Calendars;
use crate::error::SchedulingError;
use crate::name::{JobName, TriggerName};
use crate::schedule::{format_interval, JobSchedule};

/// A JSON object: job, trigger and run data.
pub type JsonObject = serde_json::Map<String, serde_json::Value>;

/// The longest timeout and retry delay: 30 days.
pub const DURATION_LIMIT_MAX: Duration = Duration::from_secs(30 * 86_400);
/// The most retries a policy may ask for.
pub const RETRIES_MAX: u32 = 100;
/// The default trigger priority; higher runs first when more triggers are due than slots.
pub const PRIORITY_DEFAULT: i32 = 5;
/// The longest job type key, in bytes.
pub const JOB_TYPE_LEN_MAX: usize = 256;
/// The largest data object, in bytes of JSON text: a job's data, a trigger's, and the
/// data given to one `trigger` or `enqueue`. A run's data merges at most three of them,
/// so every record fits in one store value (100,000 bytes on FoundationDB) with room for
/// its names and error message.
pub const DATA_LEN_MAX: usize = 16 * 1024;
/// The longest description of a job or trigger, in bytes.
pub const DESCRIPTION_LEN_MAX: usize = 4 * 1024;
/// The longest schedule text, in bytes.
pub const SCHEDULE_TEXT_LEN_MAX: usize = 1024;
/// The most triggers one job may have: a job and its triggers are written in one
/// transaction, which must stay inside the store's limit (10,000,000 bytes on
/// FoundationDB) with every trigger at its size limits.
pub const TRIGGERS_PER_JOB_MAX: usize = 256;
/// The longest error message a run's history keeps, in bytes. A job chooses its own
/// message, and one too large for a store value would hold its completion (and every
/// completion batched with it) for ever: a longer one is cut and says how long it was.
pub const ERROR_MESSAGE_LEN_MAX: usize = 8 * 1024;
/// The longest error code a run's history keeps, in bytes (codes are short identifiers).
pub const ERROR_CODE_LEN_MAX: usize = 128;

/// Checks that `data` (named `what` in the error) is at most [`DATA_LEN_MAX`] bytes as JSON.
///
/// # Errors
/// [`SchedulingError::InvalidDefinition`] (`SCHEDULING_VALIDATION_001`) naming the size.
pub fn check_data(what: &str, data: &JsonObject) -> Result<(), SchedulingError> {
    if data.is_empty() {
        return Ok(());
    }
    let len = json_text(data).len();
    if len > DATA_LEN_MAX {
        return Err(SchedulingError::invalid_definition(format!(
            "{what} is {len} bytes as JSON; at most {DATA_LEN_MAX} are allowed"
        )));
    }
    Ok(())
}

fn check_description(what: &str, description: Option<&String>) -> Result<(), SchedulingError> {
    match description {
        Some(text) if text.len() > DESCRIPTION_LEN_MAX => Err(SchedulingError::invalid_definition(format!(
            "{what} description is {} bytes long; at most {DESCRIPTION_LEN_MAX} are allowed",
            text.len()
        ))),
        _ => Ok(()),
    }
}

/// Which code runs a job: a key registered with a factory. Any non-empty text without
/// control characters, at most [`JOB_TYPE_LEN_MAX`] bytes (by default a Rust type path).
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Debug, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct JobTypeKey(String);

impl JobTypeKey {
    /// Checks and wraps a type key.
    ///
    /// # Errors
    /// [`SchedulingError::InvalidDefinition`] for an empty, over-long or control-character key.
    pub fn new(key: impl Into<String>) -> Result<Self, SchedulingError> {
        let key = key.into();
        if key.trim().is_empty() {
            return Err(SchedulingError::invalid_definition("job type key is empty"));
        }
        if key.len() > JOB_TYPE_LEN_MAX {
            return Err(SchedulingError::invalid_definition(format!(
                "job type key is {} bytes long; at most {JOB_TYPE_LEN_MAX} are allowed",
                key.len()
            )));
        }
        if key.chars().any(char::is_control) {
            return Err(SchedulingError::invalid_definition("job type key contains a control character"));
        }
        Ok(Self(key))
    }

    /// The key as text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl TryFrom<String> for JobTypeKey {
    type Error = SchedulingError;
    fn try_from(key: String) -> Result<Self, SchedulingError> {
        Self::new(key)
    }
}

impl From<JobTypeKey> for String {
    fn from(key: JobTypeKey) -> String {
        key.0
    }
}

impl fmt::Display for JobTypeKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// What to do with a trigger whose due time is more than `misfire_threshold` behind now.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
pub enum MisfirePolicy {
    /// Run once now (scheduled time recorded as now), then compute the next from now.
    #[default]
    RunOnce,
    /// No catch-up run; compute the next from now.
    Skip,
    /// Catch up every missed time in order, one per poll cycle.
    RunAll,
}

impl MisfirePolicy {
    /// The stable name used in fingerprints and text.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::RunOnce => "RunOnce",
            Self::Skip => "Skip",
            Self::RunAll => "RunAll",
        }
    }
}

/// How the retry delay grows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Backoff {
    /// The same delay before every retry.
    Fixed,
    /// `delay × 2^(n−1)` before retry n.
    Exponential,
}

/// How a failed run is retried (SPEC §8). Valid by construction.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(try_from = "RetryPolicyFields", into = "RetryPolicyFields")]
pub struct RetryPolicy {
    max_retries: u32,
    delay: Duration,
    backoff: Backoff,
    max_delay: Option<Duration>,
}

/// The serialized shape of a [`RetryPolicy`], validated on the way in.
#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
struct RetryPolicyFields {
    max_retries: u32,
    delay: Duration,
    backoff: Backoff,
    max_delay: Option<Duration>,
}

impl TryFrom<RetryPolicyFields> for RetryPolicy {
    type Error = SchedulingError;
    fn try_from(f: RetryPolicyFields) -> Result<Self, SchedulingError> {
        RetryPolicy::new(f.max_retries, f.delay, f.backoff, f.max_delay)
    }
}

impl From<RetryPolicy> for RetryPolicyFields {
    fn from(p: RetryPolicy) -> Self {
        RetryPolicyFields { max_retries: p.max_retries, delay: p.delay, backoff: p.backoff, max_delay: p.max_delay }
    }
}

fn check_duration_limit(what: &str, d: Duration) -> Result<(), SchedulingError> {
    if d.is_zero() || d > DURATION_LIMIT_MAX {
        return Err(SchedulingError::invalid_definition(format!(
            "{what} {} must be greater than zero and at most 30 days",
            format_interval(d)
        )));
    }
    Ok(())
}

impl RetryPolicy {
    /// Up to `max_retries` retries, each `delay` after the failure.
    ///
    /// # Errors
    /// [`SchedulingError::InvalidDefinition`] unless 1 ≤ `max_retries` ≤ 100 and
    /// 0 < `delay` ≤ 30 days.
    pub fn fixed(max_retries: u32, delay: Duration) -> Result<Self, SchedulingError> {
        Self::new(max_retries, delay, Backoff::Fixed, None)
    }

    /// Up to `max_retries` retries, retry n waiting `delay × 2^(n−1)`, capped by
    /// `max_delay` when given.
    ///
    /// # Errors
    /// As [`RetryPolicy::fixed`], and `max_delay` must be in (0, 30 days].
    pub fn exponential(
        max_retries: u32,
        delay: Duration,
        max_delay: Option<Duration>,
    ) -> Result<Self, SchedulingError> {
        Self::new(max_retries, delay, Backoff::Exponential, max_delay)
    }

    fn new(
        max_retries: u32,
        delay: Duration,
        backoff: Backoff,
        max_delay: Option<Duration>,
    ) -> Result<Self, SchedulingError> {
        if !(1..=RETRIES_MAX).contains(&max_retries) {
            return Err(SchedulingError::invalid_definition(format!(
                "max_retries {max_retries} must be from 1 to {RETRIES_MAX}"
            )));
        }
        check_duration_limit("retry delay", delay)?;
        if let Some(max_delay) = max_delay {
            check_duration_limit("retry max_delay", max_delay)?;
        }
        Ok(Self { max_retries, delay, backoff, max_delay })
    }

    /// How many retries at most.
    pub fn max_retries(&self) -> u32 {
        self.max_retries
    }

    /// The base delay.
    pub fn delay(&self) -> Duration {
        self.delay
    }

    /// How the delay grows.
    pub fn backoff(&self) -> Backoff {
        self.backoff
    }

    /// The cap on an exponential delay, if any.
    pub fn max_delay(&self) -> Option<Duration> {
        self.max_delay
    }

    /// The wait before retry `n` (1-based; 0 is treated as 1): the fixed delay, or
    /// `delay × 2^(n−1)` capped by `max_delay` and by 30 days.
    pub fn delay_for(&self, n: u32) -> Duration {
        let delay = match self.backoff {
            Backoff::Fixed => self.delay,
            Backoff::Exponential => {
                let factor = 1u32.checked_shl(n.saturating_sub(1)).unwrap_or(u32::MAX);
                self.delay.checked_mul(factor).unwrap_or(DURATION_LIMIT_MAX)
            }
        };
        delay.min(self.max_delay.unwrap_or(DURATION_LIMIT_MAX)).min(DURATION_LIMIT_MAX)
    }
}

/// When a trigger fires, with what data and priority.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct JobTriggerDefinition {
    /// Unique within the job.
    pub name: TriggerName,
    /// When it fires; never [`JobSchedule::manual`].
    pub schedule: JobSchedule,
    /// Overrides same-named keys of the job's data.
    #[serde(default)]
    pub data: JsonObject,
    /// Higher runs first when more triggers are due than slots. Default 5.
    #[serde(default = "priority_default")]
    pub priority: i32,
    /// Default [`MisfirePolicy::RunOnce`].
    #[serde(default)]
    pub misfire: MisfirePolicy,
    /// Free text for people.
    #[serde(default)]
    pub description: Option<String>,
}

fn priority_default() -> i32 {
    PRIORITY_DEFAULT
}

impl JobTriggerDefinition {
    /// A trigger with default data, priority, misfire policy and description.
    pub fn new(name: TriggerName, schedule: JobSchedule) -> Self {
        Self {
            name,
            schedule,
            data: JsonObject::new(),
            priority: PRIORITY_DEFAULT,
            misfire: MisfirePolicy::default(),
            description: None,
        }
    }

    /// This trigger with `data`.
    pub fn with_data(mut self, data: JsonObject) -> Self {
        self.data = data;
        self
    }

    /// This trigger with `priority`.
    pub fn with_priority(mut self, priority: i32) -> Self {
        self.priority = priority;
        self
    }

    /// This trigger with `misfire`.
    pub fn with_misfire(mut self, misfire: MisfirePolicy) -> Self {
        self.misfire = misfire;
        self
    }

    /// This trigger with a description.
    pub fn with_description(mut self, description: impl Into<String>) -> Self {
        self.description = Some(description.into());
        self
    }
}

/// A job: what runs, with which data, flags and policies, and its triggers.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct JobDefinition {
    /// Unique in the store.
    pub name: JobName,
    /// Which registered code runs it.
    pub job_type: JobTypeKey,
    /// Zero or more triggers; with none the job only runs by hand.
    #[serde(default)]
    pub triggers: Vec<JobTriggerDefinition>,
    /// The base layer of every run's data.
    #[serde(default)]
    pub data: JsonObject,
    /// `false` (default): at most one run of the job at a time in the whole cluster.
    #[serde(default)]
    pub allow_concurrent: bool,
    /// `true`: every node runs it on its own clock (a local job).
    #[serde(default)]
    pub run_on_every_instance: bool,
    /// `true`: a run on a lost node is re-run once elsewhere.
    #[serde(default)]
    pub requests_recovery: bool,
    /// How failed runs retry; none by default.
    #[serde(default)]
    pub retry: Option<RetryPolicy>,
    /// A run's time limit, in (0, 30 days]; none by default.
    #[serde(default)]
    pub timeout: Option<Duration>,
    /// Free text for people.
    #[serde(default)]
    pub description: Option<String>,
}

impl JobDefinition {
    /// A job with no triggers and default options.
    pub fn new(name: JobName, job_type: JobTypeKey) -> Self {
        Self {
            name,
            job_type,
            triggers: Vec::new(),
            data: JsonObject::new(),
            allow_concurrent: false,
            run_on_every_instance: false,
            requests_recovery: false,
            retry: None,
            timeout: None,
            description: None,
        }
    }

    /// This job with one more trigger.
    pub fn with_trigger(mut self, trigger: JobTriggerDefinition) -> Self {
        self.triggers.push(trigger);
        self
    }

    /// This job with `data`.
    pub fn with_data(mut self, data: JsonObject) -> Self {
        self.data = data;
        self
    }

    /// This job with a retry policy.
    pub fn with_retry(mut self, retry: RetryPolicy) -> Self {
        self.retry = Some(retry);
        self
    }

    /// This job with a timeout.
    pub fn with_timeout(mut self, timeout: Duration) -> Self {
        self.timeout = Some(timeout);
        self
    }

    /// Checks everything a store would otherwise reject later.
    ///
    /// With `calendars`, every trigger's calendar must be registered there; without, names
    /// are not checked (e.g. when validating on a node that has no calendars yet).
    ///
    /// # Errors
    /// [`SchedulingError::InvalidDefinition`] (`SCHEDULING_VALIDATION_001`) with the reason:
    /// duplicate trigger names, a manual trigger schedule, an invalid schedule or window,
    /// an unknown calendar, a timeout outside (0, 30 days], more than
    /// [`TRIGGERS_PER_JOB_MAX`] triggers, or data, a description or a schedule text over
    /// its size limit ([`DATA_LEN_MAX`], [`DESCRIPTION_LEN_MAX`], [`SCHEDULE_TEXT_LEN_MAX`]).
    pub fn validate(&self, calendars: Option<&Calendars>) -> Result<(), SchedulingError> {
        let job = &self.name;
        if self.triggers.len() > TRIGGERS_PER_JOB_MAX {
            return Err(SchedulingError::invalid_definition(format!(
                "job '{job}' has {} triggers; at most {TRIGGERS_PER_JOB_MAX} are allowed",
                self.triggers.len()
            )));
        }
        check_data(&format!("job '{job}' data"), &self.data)?;
        check_description(&format!("job '{job}'"), self.description.as_ref())?;
        let mut seen = BTreeSet::new();
        for trigger in &self.triggers {
            let at = format!("trigger '{job}/{}'", trigger.name);
            check_data(&format!("{at} data"), &trigger.data)?;
            check_description(&at, trigger.description.as_ref())?;
            let text = trigger.schedule.to_string().len();
            if text > SCHEDULE_TEXT_LEN_MAX {
                return Err(SchedulingError::invalid_definition(format!(
                    "{at} schedule text is {text} bytes long; at most {SCHEDULE_TEXT_LEN_MAX} are allowed"
                )));
            }
            if !seen.insert(&trigger.name) {
                return Err(SchedulingError::invalid_definition(format!(
                    "job '{job}' has two triggers named '{}'",
                    trigger.name
                )));
            }
            if trigger.schedule.is_manual() {
                return Err(SchedulingError::invalid_definition(format!(
                    "trigger '{job}/{}' has a manual schedule; a job without triggers is the way to run only by hand",
                    trigger.name
                )));
            }
            trigger
                .schedule
                .validate()
                .map_err(|e| SchedulingError::invalid_definition(format!("trigger '{job}/{}': {e}", trigger.name)))?;
            if let (Some(name), Some(calendars)) = (&trigger.schedule.calendar, calendars) {
                if !calendars.contains(name) {
                    return Err(SchedulingError::invalid_definition(format!(
                        "trigger '{job}/{}' uses calendar '{name}', which is not registered",
                        trigger.name
                    )));
                }
            }
        }
        if let Some(timeout) = self.timeout {
            check_duration_limit("timeout", timeout)
                .map_err(|e| SchedulingError::invalid_definition(format!("job '{job}': {}", reason_of(&e))))?;
        }
        Ok(())
    }

    /// The code-definition fingerprint (SPEC §9): hex SHA-256 over the type key, data,
    /// flags, description and each trigger's name, schedule text, data, priority, misfire
    /// policy and description, in order; the retry policy and timeout only when set. The
    /// job name is not part of it. Each field is length-prefixed, so no two different
    /// definitions share an encoding.
    pub fn fingerprint(&self) -> String {
        let mut f = Fingerprinter(Sha256::new());
        f.field(b"type", self.job_type.as_str().as_bytes());
        f.field(b"data", json_text(&self.data).as_bytes());
        f.field(b"allow_concurrent", &[u8::from(self.allow_concurrent)]);
        f.field(b"run_on_every_instance", &[u8::from(self.run_on_every_instance)]);
        f.field(b"requests_recovery", &[u8::from(self.requests_recovery)]);
        f.optional(b"description", self.description.as_deref());
        f.field(b"triggers", &(self.triggers.len() as u64).to_le_bytes());
        for trigger in &self.triggers {
            f.field(b"trigger.name", trigger.name.as_str().as_bytes());
            f.field(b"trigger.schedule", trigger.schedule.to_string().as_bytes());
            f.field(b"trigger.data", json_text(&trigger.data).as_bytes());
            f.field(b"trigger.priority", &trigger.priority.to_le_bytes());
            f.field(b"trigger.misfire", trigger.misfire.as_str().as_bytes());
            f.optional(b"trigger.description", trigger.description.as_deref());
        }
        if let Some(retry) = &self.retry {
            let backoff: &[u8] = match retry.backoff {
                Backoff::Fixed => b"Fixed",
                Backoff::Exponential => b"Exponential",
            };
            f.field(b"retry.max_retries", &retry.max_retries.to_le_bytes());
            f.field(b"retry.delay", &duration_nanos(retry.delay).to_le_bytes());
            f.field(b"retry.backoff", backoff);
            if let Some(max_delay) = retry.max_delay {
                f.field(b"retry.max_delay", &duration_nanos(max_delay).to_le_bytes());
            }
        }
        if let Some(timeout) = self.timeout {
            f.field(b"timeout", &duration_nanos(timeout).to_le_bytes());
        }
        f.finish()
    }
}

fn reason_of(e: &SchedulingError) -> String {
    match e {
        SchedulingError::InvalidDefinition { reason } => reason.clone(),
        other => other.to_string(),
    }
}

fn duration_nanos(d: Duration) -> u128 {
    d.as_nanos()
}

/// JSON text with keys in sorted order (serde_json's map is a `BTreeMap` here), so equal
/// data always hashes the same.
fn json_text(data: &JsonObject) -> String {
    serde_json::Value::Object(data.clone()).to_string()
}

struct Fingerprinter(Sha256);

impl Fingerprinter {
    fn field(&mut self, tag: &[u8], bytes: &[u8]) {
        self.0.update((tag.len() as u64).to_le_bytes());
        self.0.update(tag);
        self.0.update((bytes.len() as u64).to_le_bytes());
        self.0.update(bytes);
    }

    fn optional(&mut self, tag: &[u8], text: Option<&str>) {
        match text {
            None => self.field(tag, &[0]),
            Some(text) => {
                let mut bytes = vec![1];
                bytes.extend_from_slice(text.as_bytes());
                self.field(tag, &bytes);
            }
        }
    }

    fn finish(self) -> String {
        self.0.finalize().iter().map(|b| format!("{b:02x}")).collect()
    }
}

/// Merges run data layer by layer: job ← trigger ← manual request; a later layer
/// overrides same-named keys.
pub fn merge_data<'a>(layers: impl IntoIterator<Item = &'a JsonObject>) -> JsonObject {
    let mut merged = JsonObject::new();
    for layer in layers {
        for (key, value) in layer {
            merged.insert(key.clone(), value.clone());
        }
    }
    merged
}

/// Where a stored job definition came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum JobOrigin {
    /// Registered in code and written at start.
    Code,
    /// A code job replaced at run time; the code definition's fingerprint is kept.
    Overridden,
    /// Created at run time; has no code definition.
    Runtime,
}

/// Why a run exists.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum RunCause {
    /// A trigger fired on its schedule.
    Schedule,
    /// Someone triggered or enqueued it by hand.
    Manual,
    /// Re-run of a run lost with its node.
    Recovery,
    /// Retry of a failed run.
    Retry,
}

/// One execution of a job.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct JobRun {
    /// Unique run id (UUID v7 from the injected clock and entropy).
    pub id: Uuid,
    /// The job.
    pub job: JobName,
    /// The trigger that fired, `None` for manual runs.
    pub trigger: Option<TriggerName>,
    /// When the run was due.
    pub scheduled_at: DateTime<Utc>,
    /// Why it runs.
    pub cause: RunCause,
    /// 1 for a first attempt, n + 1 for the n-th retry.
    pub attempt: u32,
    /// The first attempt's id, on retries.
    pub retry_of: Option<Uuid>,
    /// The merged data.
    pub data: JsonObject,
}

/// The most runs one query returns.
pub const RUN_QUERY_LIMIT_MAX: i64 = 1000;

/// A history query (SPEC §9): filters, then paging. Results are ordered by scheduled time,
/// newest first. Paging is checked by the query, not at construction: an out-of-range
/// `skip` or `limit` makes `runs` fail with `SCHEDULING_VALIDATION_002`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct JobRunQuery {
    /// Only this job.
    pub job: Option<JobName>,
    /// Only these states (empty = any).
    pub states: BTreeSet<RunState>,
    /// Scheduled at or after this.
    pub from: Option<DateTime<Utc>>,
    /// Scheduled before this.
    pub to: Option<DateTime<Utc>>,
    /// Only this trigger.
    pub trigger: Option<TriggerName>,
    /// Only runs on this node.
    pub node: Option<String>,
    /// Only runs with (true) or without (false) an error.
    pub has_error: Option<bool>,
    /// Matching runs to skip (≥ 0; default 0).
    pub skip: i64,
    /// Most runs to return (1–1000; default 100).
    pub limit: i64,
}

impl Default for JobRunQuery {
    fn default() -> Self {
        Self {
            job: None,
            states: BTreeSet::new(),
            from: None,
            to: None,
            trigger: None,
            node: None,
            has_error: None,
            skip: 0,
            limit: 100,
        }
    }
}

impl JobRunQuery {
    /// Checks `skip` and `limit`.
    ///
    /// # Errors
    /// `SCHEDULING_VALIDATION_002` when `skip < 0` or `limit` is outside 1–1000.
    pub fn validate_paging(&self) -> Result<(), SchedulingError> {
        if self.skip < 0 {
            return Err(SchedulingError::InvalidPaging { reason: format!("skip {} is negative", self.skip) });
        }
        if !(1..=RUN_QUERY_LIMIT_MAX).contains(&self.limit) {
            return Err(SchedulingError::InvalidPaging {
                reason: format!("limit {} is outside 1–{RUN_QUERY_LIMIT_MAX}", self.limit),
            });
        }
        Ok(())
    }
}

/// A run as history shows it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct JobRunInfo {
    /// The run.
    pub run: JobRun,
    /// Its state.
    pub state: RunState,
    /// The node that ran it.
    pub node: String,
    /// When it started.
    pub started_at: DateTime<Utc>,
    /// When it ended.
    pub finished_at: Option<DateTime<Utc>>,
    /// The error code of a failed or canceled run.
    pub error_code: Option<String>,
    /// The error message of a failed, canceled or lost run.
    pub error_message: Option<String>,
}

/// A run's state in history.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum RunState {
    /// Started, not finished.
    Running,
    /// The job returned success.
    Succeeded,
    /// The job failed, panicked or timed out.
    Failed,
    /// Canceled by request or node stop.
    Canceled,
    /// Its node was declared lost while it ran.
    Lost,
}

impl RunState {
    /// Whether the run is over.
    pub fn is_final(self) -> bool {
        !matches!(self, Self::Running)
    }

    /// The one table of legal run transitions: only `Running` moves, to any final state.
    pub fn can_transition_to(self, next: RunState) -> bool {
        matches!(self, Self::Running) && next.is_final()
    }
}

/// A trigger's state in the store (SPEC §10).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum TriggerState {
    /// Waiting for its due time.
    Waiting,
    /// Paused by hand; does not fire.
    Paused,
    /// Taken by a node to run (an interval trigger stays so until its run ends).
    Acquired,
    /// Due, but the previous run of its non-concurrent job is still going.
    Blocked,
    /// No next fire.
    Complete,
    /// Cannot run (e.g. unknown job type); the reason is stored.
    Error,
}

impl TriggerState {
    /// The one table of legal trigger transitions, shared by the store's assertions and
    /// the simulator's checker. Staying in the same state is not a transition.
    pub fn can_transition_to(self, next: TriggerState) -> bool {
        use TriggerState::*;
        match self {
            Waiting => matches!(next, Paused | Acquired | Blocked | Complete | Error),
            // Resume returns to waiting (or completes when the window has passed).
            Paused => matches!(next, Waiting | Complete),
            // The run ended or the node gave it back; or the previous run still holds
            // the slot; or the schedule has no next fire; or the job type is unknown.
            Acquired => matches!(next, Waiting | Paused | Blocked | Complete | Error),
            Blocked => matches!(next, Waiting | Paused | Complete),
            // Terminal until the trigger is rewritten by a new definition.
            Complete | Error => false,
        }
    }
}

/// `text` cut to at most `max` bytes at a character boundary; a cut text ends with how
/// long it was (and is that note alone when `max` has no room for more).
pub(crate) fn bounded(text: &str, max: usize) -> String {
    if text.len() <= max {
        return text.to_owned();
    }
    let note = format!("… (cut from {} bytes)", text.len());
    let mut end = max.saturating_sub(note.len());
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}{note}", &text[..end])
}

#[cfg(test)]
mod tests {
    use super::*;

    fn job(name: &str) -> JobDefinition {
        JobDefinition::new(JobName::new(name).unwrap(), JobTypeKey::new("app::Report").unwrap())
    }

    fn trigger(name: &str, schedule: &str) -> JobTriggerDefinition {
        JobTriggerDefinition::new(TriggerName::new(name).unwrap(), schedule.parse().unwrap())
    }

    #[test]
    fn defaults() {
        let t = trigger("default", "every 00:01:00");
        assert_eq!(t.priority, 5);
        assert_eq!(t.misfire, MisfirePolicy::RunOnce);
        let j = job("a");
        assert!(!j.allow_concurrent && !j.run_on_every_instance && !j.requests_recovery);
        assert!(j.retry.is_none() && j.timeout.is_none() && j.triggers.is_empty());
        let parsed: JobTriggerDefinition = serde_json::from_str(r#"{"name":"t","schedule":"cron 0 0 * * *"}"#).unwrap();
        assert_eq!(parsed.priority, 5);
    }

    #[test]
    fn validation_reasons() {
        let dup = job("a").with_trigger(trigger("t", "every 00:01:00")).with_trigger(trigger("t", "every 00:02:00"));
        let err = dup.validate(None).unwrap_err();
        assert_eq!(err.code(), "SCHEDULING_VALIDATION_001");
        assert!(err.to_string().contains("two triggers named 't'"));

        let manual = job("a").with_trigger(trigger("t", "manual"));
        assert!(manual.validate(None).unwrap_err().to_string().contains("manual schedule"));

        let cal = job("a").with_trigger(trigger("t", "every 00:01:00 calendar=holidays"));
        assert!(cal.validate(None).is_ok());
        let err = cal.validate(Some(&Calendars::new())).unwrap_err();
        assert!(err.to_string().contains("calendar 'holidays', which is not registered"));

        for bad in [Duration::ZERO, DURATION_LIMIT_MAX + Duration::from_secs(1)] {
            let err = job("a").with_timeout(bad).validate(None).unwrap_err();
            assert!(err.to_string().contains("timeout"), "{err}");
        }
        assert!(job("a").with_timeout(DURATION_LIMIT_MAX).validate(None).is_ok());
        assert!(JobTypeKey::new(" ").is_err());
    }

    /// An object whose JSON text is exactly `len` bytes (`{"p":"…"}` is 8 bytes of frame).
    fn data_of(len: usize) -> JsonObject {
        let mut data = JsonObject::new();
        data.insert("p".into(), "x".repeat(len - 8).into());
        assert_eq!(json_text(&data).len(), len);
        data
    }

    #[test]
    fn data_descriptions_and_schedule_texts_have_size_limits() {
        assert!(job("a").with_data(data_of(DATA_LEN_MAX)).validate(None).is_ok());
        let err = job("a").with_data(data_of(DATA_LEN_MAX + 1)).validate(None).unwrap_err();
        assert_eq!(err.code(), "SCHEDULING_VALIDATION_001");
        assert!(err.to_string().contains("job 'a' data is 16385 bytes as JSON; at most 16384"), "{err}");
        let t = trigger("t", "every 00:01:00").with_data(data_of(DATA_LEN_MAX + 1));
        assert!(job("a").with_trigger(t).validate(None).unwrap_err().to_string().contains("trigger 'a/t' data"));
        let mut described = job("a");
        described.description = Some("d".repeat(DESCRIPTION_LEN_MAX + 1));
        assert!(described.validate(None).unwrap_err().to_string().contains("description is 4097 bytes"));
        let mut t = trigger("t", "every 00:01:00");
        t.description = Some("d".repeat(DESCRIPTION_LEN_MAX));
        assert!(job("a").with_trigger(t).validate(None).is_ok());
        let long_cron = format!("cron {} * * * * *", vec!["0"; 600].join(","));
        let err = job("a").with_trigger(trigger("t", &long_cron)).validate(None).unwrap_err();
        assert!(err.to_string().contains("schedule text is"), "{err}");
        assert_eq!(check_data("x", &JsonObject::new()), Ok(()));
        let many = |n: usize| (0..n).fold(job("a"), |j, i| j.with_trigger(trigger(&format!("t{i}"), "every 00:01:00")));
        assert!(many(TRIGGERS_PER_JOB_MAX).validate(None).is_ok());
        assert!(many(TRIGGERS_PER_JOB_MAX + 1).validate(None).unwrap_err().to_string().contains("257 triggers"));
    }

    #[test]
    fn retry_policies() {
        let fixed = RetryPolicy::fixed(3, Duration::from_secs(10)).unwrap();
        assert_eq!(fixed.delay_for(1), Duration::from_secs(10));
        assert_eq!(fixed.delay_for(3), Duration::from_secs(10));
        let exp = RetryPolicy::exponential(10, Duration::from_secs(10), Some(Duration::from_secs(60))).unwrap();
        assert_eq!(exp.delay_for(1), Duration::from_secs(10));
        assert_eq!(exp.delay_for(2), Duration::from_secs(20));
        assert_eq!(exp.delay_for(3), Duration::from_secs(40));
        assert_eq!(exp.delay_for(4), Duration::from_secs(60));
        let uncapped = RetryPolicy::exponential(100, Duration::from_secs(86_400), None).unwrap();
        assert_eq!(uncapped.delay_for(100), DURATION_LIMIT_MAX);
        for (n, delay) in [(0, 1), (101, 1), (1, 0), (1, 30 * 86_400 + 1)] {
            assert!(RetryPolicy::fixed(n, Duration::from_secs(delay)).is_err(), "{n} {delay}");
        }
        assert!(RetryPolicy::exponential(1, Duration::from_secs(1), Some(Duration::ZERO)).is_err());
        let json = serde_json::to_string(&exp).unwrap();
        assert_eq!(serde_json::from_str::<RetryPolicy>(&json).unwrap(), exp);
        assert!(serde_json::from_str::<RetryPolicy>(
            r#"{"max_retries":0,"delay":{"secs":1,"nanos":0},"backoff":"Fixed","max_delay":null}"#
        )
        .is_err());
    }

    #[test]
    fn fingerprint_covers_the_listed_fields_only() {
        let base = job("a").with_trigger(trigger("t", "cron 0 0 * * *"));
        let fp = base.fingerprint();
        assert_eq!(fp.len(), 64);
        assert_eq!(fp, base.clone().fingerprint());
        // The job name is the key, not part of the definition.
        let mut renamed = base.clone();
        renamed.name = JobName::new("b").unwrap();
        assert_eq!(renamed.fingerprint(), fp);
        let changes: Vec<JobDefinition> = vec![
            {
                let mut j = base.clone();
                j.allow_concurrent = true;
                j
            },
            {
                let mut j = base.clone();
                j.description = Some(String::new());
                j
            },
            {
                let mut j = base.clone();
                j.data.insert("k".into(), 1.into());
                j
            },
            {
                let mut j = base.clone();
                j.triggers[0].priority = 6;
                j
            },
            {
                let mut j = base.clone();
                j.triggers[0].misfire = MisfirePolicy::Skip;
                j
            },
            {
                let mut j = base.clone();
                j.triggers[0].schedule = "cron 0 1 * * *".parse().unwrap();
                j
            },
            base.clone().with_timeout(Duration::from_secs(5)),
            base.clone().with_retry(RetryPolicy::fixed(1, Duration::from_secs(1)).unwrap()),
        ];
        for changed in changes {
            assert_ne!(changed.fingerprint(), fp, "{changed:?}");
        }
    }

    #[test]
    fn data_layers_override_in_order() {
        let a: JsonObject = serde_json::from_str(r#"{"x":1,"y":1}"#).unwrap();
        let b: JsonObject = serde_json::from_str(r#"{"y":2,"z":2}"#).unwrap();
        let c: JsonObject = serde_json::from_str(r#"{"z":3}"#).unwrap();
        let merged = merge_data([&a, &b, &c]);
        assert_eq!(serde_json::Value::Object(merged), serde_json::json!({"x":1,"y":2,"z":3}));
    }

    #[test]
    fn transition_tables() {
        assert!(RunState::Running.can_transition_to(RunState::Lost));
        assert!(!RunState::Succeeded.can_transition_to(RunState::Failed));
        assert!(!RunState::Running.can_transition_to(RunState::Running));
        assert!(TriggerState::Waiting.can_transition_to(TriggerState::Acquired));
        assert!(TriggerState::Blocked.can_transition_to(TriggerState::Waiting));
        assert!(!TriggerState::Complete.can_transition_to(TriggerState::Waiting));
        assert!(!TriggerState::Paused.can_transition_to(TriggerState::Acquired));
    }
}
