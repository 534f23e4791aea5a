//! Stored records. Each is written with [`super::codec`]; its key is in [`super::keys`].
//! Times are microseconds since the Unix epoch; JSON data is stored as text.

use serde::{Deserialize, Serialize};
use uuid::Uuid;

use super::codec;
use crate::job::{JobOrigin, MisfirePolicy, RetryPolicy, RunCause, RunState, TriggerState};

/// `(1, job)`: a job definition with its origin and paused state.
///
/// `S` is its text: `String` in a record of its own, `&str` in a [`JobView`] decoded from
/// stored bytes without copying them (acquisitions and completions read the job of every
/// fire). Both encode alike.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct JobRecord<S = String> {
    /// The job name.
    pub name: S,
    /// The registered type key that runs it.
    pub job_type: S,
    /// Job data, JSON object text.
    pub data: S,
    /// Runs may overlap.
    pub allow_concurrent: bool,
    /// A local job: every node runs it on its own clock.
    pub run_on_every_instance: bool,
    /// A run on a lost node is re-run once.
    pub requests_recovery: bool,
    /// Retry policy.
    pub retry: Option<RetryPolicy>,
    /// Run timeout, microseconds.
    pub timeout_us: Option<u64>,
    /// Free text.
    pub description: Option<S>,
    /// Where the definition came from.
    pub origin: JobOrigin,
    /// The code definition's fingerprint (code and overridden jobs).
    pub code_fingerprint: Option<S>,
    /// Paused: no trigger of the job fires.
    pub paused: bool,
    /// Increases with every rewrite of the definition.
    pub revision: u64,
}

/// A [`JobRecord`] borrowing its text: decoded from stored bytes, or lent by a record.
pub type JobView<'a> = JobRecord<&'a str>;

impl<S: AsRef<str>> JobRecord<S> {
    /// This record as a [`JobView`].
    pub fn view(&self) -> JobView<'_> {
        JobRecord {
            name: self.name.as_ref(),
            job_type: self.job_type.as_ref(),
            data: self.data.as_ref(),
            allow_concurrent: self.allow_concurrent,
            run_on_every_instance: self.run_on_every_instance,
            requests_recovery: self.requests_recovery,
            retry: self.retry,
            timeout_us: self.timeout_us,
            description: self.description.as_ref().map(AsRef::as_ref),
            origin: self.origin,
            code_fingerprint: self.code_fingerprint.as_ref().map(AsRef::as_ref),
            paused: self.paused,
            revision: self.revision,
        }
    }
}

/// What created a trigger, which decides the cause of its runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum TriggerKind {
    /// A trigger of the job definition.
    Defined,
    /// `enqueue`: a one-shot `manual-…` trigger.
    Manual,
    /// A one-shot `retry-…` trigger for a failed run.
    Retry {
        /// The attempt number of the retry run.
        attempt: u32,
        /// The first attempt's run id.
        retry_of: Uuid,
    },
    /// A one-shot `recovery-…` trigger for a run lost with its node.
    Recovery {
        /// The lost run.
        lost_run: Uuid,
        /// The lost run's attempt.
        attempt: u32,
        /// The lost run's `retry_of`.
        retry_of: Option<Uuid>,
    },
}

impl TriggerKind {
    /// One-shot triggers made by the engine are deleted once acquired.
    pub fn is_synthetic(self) -> bool {
        !matches!(self, Self::Defined)
    }
}

/// `(2, job, trigger)`: a trigger and its progress.
///
/// `S` is its text: `String` in a record of its own, `&str` in a [`TriggerView`] decoded
/// from stored bytes without copying them (an acquisition reads and rewrites the trigger
/// of every fire). Both encode alike.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct TriggerRecord<S = String> {
    /// The job.
    pub job: S,
    /// The trigger name.
    pub name: S,
    /// The schedule, in its text form.
    pub schedule: S,
    /// Trigger data, JSON object text.
    pub data: S,
    /// Priority; higher first.
    pub priority: i32,
    /// Misfire policy.
    pub misfire: MisfirePolicy,
    /// Free text.
    pub description: Option<S>,
    /// What made it.
    pub kind: TriggerKind,
    /// Its state.
    pub state: TriggerState,
    /// Paused by `pause_triggers` (the job's own flag pauses it too).
    pub paused: bool,
    /// The next fire; kept while `Blocked` or `Paused`.
    pub next_fire_us: Option<i64>,
    /// The previous fire's scheduled time.
    pub previous_fire_us: Option<i64>,
    /// Fires so far.
    pub fire_count: u32,
    /// A random id of this incarnation of the trigger, so run ids of a re-created
    /// trigger never repeat an old one's.
    pub uid: u64,
    /// The run an `Every` trigger waits for while `Acquired`.
    pub running_run: Option<Uuid>,
    /// Why it is in `Error`.
    pub error: Option<S>,
}

/// A [`TriggerRecord`] borrowing its text: decoded from stored bytes, or lent by a record.
pub type TriggerView<'a> = TriggerRecord<&'a str>;

/// A `Waiting` every-second cron trigger `t` of job `job`, due at 1 µs, for tests.
#[cfg(test)]
pub(crate) fn waiting_trigger() -> TriggerRecord {
    TriggerRecord {
        job: "job".into(),
        name: "t".into(),
        schedule: "cron * * * * * *".into(),
        data: String::new(),
        priority: 5,
        misfire: Default::default(),
        description: None,
        kind: TriggerKind::Defined,
        state: TriggerState::Waiting,
        paused: false,
        next_fire_us: Some(1),
        previous_fire_us: None,
        fire_count: 0,
        uid: 1,
        running_run: None,
        error: None,
    }
}

impl<S: AsRef<str>> TriggerRecord<S> {
    /// What a write replacing this record needs of it: its indexes and its transition.
    pub fn was(&self) -> TriggerWas {
        TriggerWas { uid: self.uid, state: self.state, next_fire_us: self.next_fire_us }
    }

    /// This record as a [`TriggerView`].
    pub fn view(&self) -> TriggerView<'_> {
        self.map_text(|text| text.as_ref())
    }

    /// This record with text of its own.
    pub fn to_record(&self) -> TriggerRecord {
        self.map_text(|text| text.as_ref().to_owned())
    }

    /// This record with each text field converted by `f`.
    fn map_text<'a, T>(&'a self, f: impl Fn(&'a S) -> T) -> TriggerRecord<T> {
        TriggerRecord {
            job: f(&self.job),
            name: f(&self.name),
            schedule: f(&self.schedule),
            data: f(&self.data),
            priority: self.priority,
            misfire: self.misfire,
            description: self.description.as_ref().map(&f),
            kind: self.kind,
            state: self.state,
            paused: self.paused,
            next_fire_us: self.next_fire_us,
            previous_fire_us: self.previous_fire_us,
            fire_count: self.fire_count,
            uid: self.uid,
            running_run: self.running_run,
            error: self.error.as_ref().map(&f),
        }
    }
}

/// What a trigger record was before a write changed it in place (the same job and
/// trigger): enough to clear its index entries and check its transition, without a copy
/// of its text.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TriggerWas {
    /// See [`TriggerRecord::uid`].
    pub uid: u64,
    /// See [`TriggerRecord::state`].
    pub state: TriggerState,
    /// See [`TriggerRecord::next_fire_us`].
    pub next_fire_us: Option<i64>,
}

/// `(4, job)`: the single active-run slot of a non-concurrent job.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
pub struct SlotRecord {
    /// The run holding the slot.
    pub holder: Option<Uuid>,
    /// Increases with every claim: a fencing token.
    pub generation: u64,
    /// Some trigger of the job may be `Blocked` behind the holder: set in the transaction
    /// that blocks one, cleared by the release that returned the last of them to
    /// `Waiting`. A release reads the job's blocked triggers only when it is set, so the
    /// usual end of a non-concurrent run (nothing waited for it) costs no range read.
    pub blocked: bool,
}

impl SlotRecord {
    /// Decodes a slot record, including one written before [`SlotRecord::blocked`]
    /// existed, which is read as one that may have blocked triggers (the next release
    /// then looks for them).
    ///
    /// # Errors
    /// [`StoreError::Corrupt`](super::StoreError::Corrupt) when the bytes are neither.
    pub fn decode(bytes: &[u8]) -> Result<SlotRecord, super::StoreError> {
        /// The record before `blocked`.
        #[derive(Deserialize)]
        struct WithoutBlocked {
            holder: Option<Uuid>,
            generation: u64,
        }
        codec::decode(bytes, "slot record").or_else(|error| {
            let old: WithoutBlocked = codec::decode(bytes, "slot record").map_err(|_| error)?;
            Ok(SlotRecord { holder: old.holder, generation: old.generation, blocked: true })
        })
    }
}

/// `(6, run_id)`: one run in history.
///
/// `S` is its text: `String` in a record of its own, `&str` in a [`RunView`] decoded from
/// stored bytes without copying them (a completion reads and rewrites the run of every
/// fire). Both encode alike.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct RunRecord<S = String> {
    /// Run id.
    pub id: Uuid,
    /// The job.
    pub job: S,
    /// The trigger that fired (none for `trigger` by hand).
    pub trigger: Option<S>,
    /// When it was due.
    pub scheduled_us: i64,
    /// Why it ran.
    pub cause: RunCause,
    /// Attempt number, from 1.
    pub attempt: u32,
    /// The first attempt's id, on retries.
    pub retry_of: Option<Uuid>,
    /// Merged data, JSON object text.
    pub data: S,
    /// State.
    pub state: RunState,
    /// The node running it.
    pub node: S,
    /// When it started.
    pub started_us: i64,
    /// When it finished.
    pub finished_us: Option<i64>,
    /// The error code of a failed, canceled or lost run.
    pub error_code: Option<S>,
    /// The error message.
    pub error_message: Option<S>,
    /// It holds its job's slot.
    pub exclusive: bool,
    /// A local job's run (not acquired through the store).
    pub local: bool,
}

/// A [`RunRecord`] borrowing its text: decoded from stored bytes, or lent by a record.
pub type RunView<'a> = RunRecord<&'a str>;

impl RunRecord {
    /// A run starting now on `node`.
    pub fn running(
        run: &crate::job::JobRun,
        node: &str,
        now: chrono::DateTime<chrono::Utc>,
        exclusive: bool,
        local: bool,
    ) -> Self {
        Self {
            id: run.id,
            job: run.job.to_string(),
            trigger: run.trigger.as_ref().map(ToString::to_string),
            scheduled_us: run.scheduled_at.timestamp_micros(),
            cause: run.cause,
            attempt: run.attempt,
            retry_of: run.retry_of,
            data: serde_json::Value::Object(run.data.clone()).to_string(),
            state: RunState::Running,
            node: node.to_owned(),
            started_us: now.timestamp_micros(),
            finished_us: None,
            error_code: None,
            error_message: None,
            exclusive,
            local,
        }
    }
}

impl<S: AsRef<str>> RunRecord<S> {
    /// This record as a [`RunView`].
    pub fn view(&self) -> RunView<'_> {
        RunRecord {
            id: self.id,
            job: self.job.as_ref(),
            trigger: self.trigger.as_ref().map(AsRef::as_ref),
            scheduled_us: self.scheduled_us,
            cause: self.cause,
            attempt: self.attempt,
            retry_of: self.retry_of,
            data: self.data.as_ref(),
            state: self.state,
            node: self.node.as_ref(),
            started_us: self.started_us,
            finished_us: self.finished_us,
            error_code: self.error_code.as_ref().map(AsRef::as_ref),
            error_message: self.error_message.as_ref().map(AsRef::as_ref),
            exclusive: self.exclusive,
            local: self.local,
        }
    }

    /// What history indexes carry, so filtered queries need not read primary records.
    pub fn summary(&self) -> RunSummary {
        let RunSummaryView { state, has_error, node, trigger, finished_us } = self.summary_view();
        RunSummary { state, has_error, node: node.to_owned(), trigger: trigger.map(str::to_owned), finished_us }
    }

    /// [`summary`](Self::summary) borrowing this record's text: what a completion encodes.
    pub fn summary_view(&self) -> RunSummaryView<'_> {
        RunSummaryView {
            state: self.state,
            has_error: self.error_code.is_some() || self.error_message.is_some(),
            node: self.node.as_ref(),
            trigger: self.trigger.as_ref().map(AsRef::as_ref),
            finished_us: self.finished_us,
        }
    }
}

/// A [`RunSummary`] borrowing its text, encoded as one: the same fields in the same order
/// (a test checks that `RunSummary` decodes what it encodes).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct RunSummaryView<'a> {
    /// See [`RunSummary::state`].
    pub state: RunState,
    /// See [`RunSummary::has_error`].
    pub has_error: bool,
    /// See [`RunSummary::node`].
    pub node: &'a str,
    /// See [`RunSummary::trigger`].
    pub trigger: Option<&'a str>,
    /// See [`RunSummary::finished_us`].
    pub finished_us: Option<i64>,
}

/// The value of the history index entries: enough to filter without the run record.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunSummary {
    /// State.
    pub state: RunState,
    /// Whether it has an error.
    pub has_error: bool,
    /// The node.
    pub node: String,
    /// The trigger.
    pub trigger: Option<String>,
    /// When it finished.
    pub finished_us: Option<i64>,
}

/// `(9, node)`: a node and its heartbeat.
///
/// `S` is its id's text: `String` in a record of its own, `&str` in a [`NodeView`]
/// decoded without copying it (every acquisition reads them all). Both encode alike.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeRecord<S = String> {
    /// Node id.
    pub node: S,
    /// Increases with every heartbeat; observers time how long it stays unchanged.
    pub heartbeat_seq: u64,
    /// Wall time of the last heartbeat, on the node's clock. Liveness never trusts it; the
    /// other nodes use it only to know when to stop taking `caught_up` at its word.
    pub heartbeat_us: i64,
    /// False once declared lost or deregistered.
    pub alive: bool,
    /// How many times the leader declared this node lost. A counter rather than a flag, so
    /// a heartbeat whose commit was ambiguous cannot erase the news: the node compares it
    /// with the count it last saw.
    pub times_declared_lost: u64,
    /// Stop began (SPEC §10): the node takes no new work but is alive while it finishes
    /// its runs, so the others take its home shards on time instead of as late fires.
    /// Cleared by the first heartbeat of a new process.
    pub draining: bool,
    /// At its last heartbeat the node had taken every fire due in its home shards: the
    /// others skip its shards when they look for late fires to steal, while this heartbeat
    /// is recent by their clocks (see `AcquireRequest::steal_grace`).
    pub caught_up: bool,
}

/// A [`NodeRecord`] borrowing its id.
pub type NodeView<'a> = NodeRecord<&'a str>;

impl<S> NodeRecord<S> {
    /// Whether the node is one of those the due shards are shared out among (alive and
    /// not draining).
    pub fn owns_shards(&self) -> bool {
        self.alive && !self.draining
    }
}

/// `(10, resource)`: a leader lease.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LeaseRecord {
    /// `node-id:token`, fresh per acquisition.
    pub holder: String,
    /// Increases with every acquisition or takeover: the fencing token.
    pub term: u64,
    /// The lease's time to live, microseconds (observers expire it after this long
    /// without change, on their own clocks).
    pub ttl_us: u64,
    /// Released by its holder: free at once.
    pub released: bool,
    /// Increases with every renewal, so observers see the record change.
    pub renewals: u64,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_slot_written_before_it_said_whether_triggers_are_blocked_reads_as_maybe_blocked() {
        #[derive(Serialize)]
        struct WithoutBlocked {
            holder: Option<Uuid>,
            generation: u64,
        }
        let holder = Some(Uuid::from_u128(7));
        let old = codec::encode(&WithoutBlocked { holder, generation: 3 });
        assert_eq!(SlotRecord::decode(&old).unwrap(), SlotRecord { holder, generation: 3, blocked: true });
        for slot in [SlotRecord::default(), SlotRecord { holder, generation: 9, blocked: true }] {
            assert_eq!(SlotRecord::decode(&codec::encode(&slot)).unwrap(), slot);
        }
        let mut long = codec::encode(&SlotRecord::default());
        long.extend([1, 2, 3]);
        let error = SlotRecord::decode(&long).unwrap_err().to_string();
        assert!(error.contains("slot record") && error.contains("trailing"), "{error}");
    }

    #[test]
    fn a_run_summary_reads_what_its_view_wrote() {
        for (node, trigger) in [("node-1", Some("every-minute")), ("n", None)] {
            let summary = RunSummary {
                state: RunState::Failed,
                has_error: true,
                node: node.into(),
                trigger: trigger.map(Into::into),
                finished_us: Some(-7),
            };
            let view = RunSummaryView {
                state: summary.state,
                has_error: summary.has_error,
                node,
                trigger,
                finished_us: summary.finished_us,
            };
            let bytes = codec::encode(&view);
            assert_eq!(bytes, codec::encode(&summary));
            assert_eq!(codec::decode::<RunSummary>(&bytes, "run summary").unwrap(), summary);
        }
    }

    #[test]
    fn a_job_view_reads_what_a_job_record_wrote() {
        let record: JobRecord = JobRecord {
            name: "nightly".into(),
            job_type: "report".into(),
            data: r#"{"a":1}"#.into(),
            allow_concurrent: false,
            run_on_every_instance: true,
            requests_recovery: true,
            retry: Some(RetryPolicy::fixed(3, std::time::Duration::from_secs(2)).unwrap()),
            timeout_us: Some(5_000_000),
            description: Some("the nightly report".into()),
            origin: JobOrigin::Overridden,
            code_fingerprint: Some("f00d".into()),
            paused: true,
            revision: 9,
        };
        let bytes = codec::encode(&record);
        let view: JobView<'_> = codec::decode(&bytes, "job record").unwrap();
        assert_eq!(view, record.view());
        let bare = JobRecord { retry: None, timeout_us: None, description: None, code_fingerprint: None, ..record };
        let bytes = codec::encode(&bare);
        assert_eq!(codec::decode::<JobView<'_>>(&bytes, "job record").unwrap(), bare.view());
    }

    #[test]
    fn a_node_view_reads_what_a_node_record_wrote() {
        let record: NodeRecord = NodeRecord {
            node: "node-7".into(),
            heartbeat_seq: 300,
            heartbeat_us: -5,
            alive: true,
            times_declared_lost: 2,
            draining: false,
            caught_up: true,
        };
        let bytes = codec::encode(&record);
        let view: NodeView<'_> = codec::decode(&bytes, "node record").unwrap();
        let NodeView { node, heartbeat_seq, heartbeat_us, alive, times_declared_lost, draining, caught_up } = view;
        let read = NodeRecord {
            node: node.into(),
            heartbeat_seq,
            heartbeat_us,
            alive,
            times_declared_lost,
            draining,
            caught_up,
        };
        assert_eq!(read, record);
        let flipped = NodeRecord { alive: false, draining: true, caught_up: false, ..record };
        let bytes = codec::encode(&flipped);
        let view: NodeView<'_> = codec::decode(&bytes, "node record").unwrap();
        assert_eq!((view.alive, view.draining, view.caught_up), (false, true, false));
    }
}
