//! Events (SPEC §12): CloudEvents 1.0 JSON envelopes for the nine scheduling topics, and
//! where they go. Publishing never affects a run: [`publish_logged`] logs a failure and
//! moves on.

use std::fmt;
use std::sync::Arc;

use chrono::{DateTime, Utc};
use futures_util::future::BoxFuture;
use serde::Serialize;
use sundial::job::{JobRun, RunCause, RunState};
use tokio::sync::broadcast;
use uuid::Uuid;

/// The event topics (the CloudEvents `type`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Topic {
    /// A job was added or replaced.
    JobScheduled,
    /// A job was deleted.
    JobUnscheduled,
    /// A job was paused.
    JobPaused,
    /// A job was resumed.
    JobResumed,
    /// A run started.
    RunStarted,
    /// A run succeeded.
    RunSucceeded,
    /// A run failed (including timeouts and panics).
    RunFailed,
    /// A run was canceled.
    RunCanceled,
    /// A run was lost with its node.
    RunLost,
}

impl Topic {
    /// Every topic.
    pub const ALL: [Topic; 9] = [
        Topic::JobScheduled,
        Topic::JobUnscheduled,
        Topic::JobPaused,
        Topic::JobResumed,
        Topic::RunStarted,
        Topic::RunSucceeded,
        Topic::RunFailed,
        Topic::RunCanceled,
        Topic::RunLost,
    ];

    /// The topic string, e.g. `scheduling.run.started`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::JobScheduled => "scheduling.job.scheduled",
            Self::JobUnscheduled => "scheduling.job.unscheduled",
            Self::JobPaused => "scheduling.job.paused",
            Self::JobResumed => "scheduling.job.resumed",
            Self::RunStarted => "scheduling.run.started",
            Self::RunSucceeded => "scheduling.run.succeeded",
            Self::RunFailed => "scheduling.run.failed",
            Self::RunCanceled => "scheduling.run.canceled",
            Self::RunLost => "scheduling.run.lost",
        }
    }

    /// The topic of a run that ended in `state`.
    pub fn of_end(state: RunState) -> Topic {
        match state {
            RunState::Running => Topic::RunStarted,
            RunState::Succeeded => Topic::RunSucceeded,
            RunState::Failed => Topic::RunFailed,
            RunState::Canceled => Topic::RunCanceled,
            RunState::Lost => Topic::RunLost,
        }
    }
}

impl fmt::Display for Topic {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The `data` of an event.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct EventData {
    /// The job.
    pub job: String,
    /// The trigger, for runs that have one.
    pub trigger: Option<String>,
    /// The run id (run events).
    pub run_id: Option<Uuid>,
    /// Why the run ran.
    pub cause: Option<RunCause>,
    /// The run's state.
    pub state: Option<RunState>,
    /// When the run was due.
    pub scheduled_at: Option<DateTime<Utc>>,
    /// When it started.
    pub started_at: Option<DateTime<Utc>>,
    /// When it ended.
    pub finished_at: Option<DateTime<Utc>>,
    /// The error code of a failed or canceled run.
    pub error_code: Option<String>,
    /// The error message.
    pub error_message: Option<String>,
    /// The attempt number.
    pub attempt: Option<u32>,
    /// The first attempt's id, on retries.
    pub retry_of: Option<Uuid>,
    /// The node that published it.
    pub node: String,
}

/// A CloudEvents 1.0 envelope in structured JSON mode.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CloudEvent {
    /// Always `1.0`.
    pub specversion: &'static str,
    /// Unique per event (from the node's seeded entropy).
    pub id: Uuid,
    /// Always `/scheduling`.
    pub source: &'static str,
    /// The topic.
    #[serde(rename = "type")]
    pub event_type: &'static str,
    /// The run id for run events, the job name for job events.
    pub subject: String,
    /// When it happened (the node's injected clock).
    pub time: DateTime<Utc>,
    /// Always `application/json`.
    pub datacontenttype: &'static str,
    /// The payload.
    pub data: EventData,
}

/// A run's times and result, for a run event.
#[derive(Debug, Clone, Default)]
pub struct RunFacts {
    /// Its state.
    pub state: Option<RunState>,
    /// When it started.
    pub started_at: Option<DateTime<Utc>>,
    /// When it ended.
    pub finished_at: Option<DateTime<Utc>>,
    /// Error code.
    pub error_code: Option<String>,
    /// Error message.
    pub error_message: Option<String>,
}

impl CloudEvent {
    fn envelope(topic: Topic, id: Uuid, time: DateTime<Utc>, subject: String, data: EventData) -> Self {
        Self {
            specversion: "1.0",
            id,
            source: "/scheduling",
            event_type: topic.as_str(),
            subject,
            time,
            datacontenttype: "application/json",
            data,
        }
    }

    /// A job-level event (scheduled, unscheduled, paused, resumed); the subject is the job.
    pub fn for_job(topic: Topic, id: Uuid, time: DateTime<Utc>, job: &str, node: &str) -> Self {
        let data = EventData {
            job: job.to_owned(),
            trigger: None,
            run_id: None,
            cause: None,
            state: None,
            scheduled_at: None,
            started_at: None,
            finished_at: None,
            error_code: None,
            error_message: None,
            attempt: None,
            retry_of: None,
            node: node.to_owned(),
        };
        Self::envelope(topic, id, time, job.to_owned(), data)
    }

    /// A run event; the subject is the run id.
    pub fn for_run(topic: Topic, id: Uuid, time: DateTime<Utc>, run: &JobRun, facts: RunFacts, node: &str) -> Self {
        let data = EventData {
            job: run.job.to_string(),
            trigger: run.trigger.as_ref().map(ToString::to_string),
            run_id: Some(run.id),
            cause: Some(run.cause),
            state: facts.state,
            scheduled_at: Some(run.scheduled_at),
            started_at: facts.started_at,
            finished_at: facts.finished_at,
            error_code: facts.error_code,
            error_message: facts.error_message,
            attempt: Some(run.attempt),
            retry_of: run.retry_of,
            node: node.to_owned(),
        };
        Self::envelope(topic, id, time, run.id.to_string(), data)
    }

    /// The envelope as JSON.
    pub fn to_json(&self) -> String {
        // Plain data with string keys: serialization cannot fail.
        serde_json::to_string(self).unwrap_or_else(|e| unreachable!("events always serialize: {e}"))
    }
}

/// Why an event could not be published.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("event not published: {0}")]
pub struct PublishError(pub String);

/// Where events go.
pub trait EventPublisher: Send + Sync + 'static {
    /// Publishes one event.
    ///
    /// # Errors
    /// [`PublishError`]; the engine logs it and carries on.
    fn publish<'a>(&'a self, event: &'a CloudEvent) -> BoxFuture<'a, Result<(), PublishError>>;

    /// Publishes one event the caller already shares: a publisher that keeps events (a
    /// queue) takes the `Arc` instead of copying the event. Defaults to [`Self::publish`].
    ///
    /// # Errors
    /// As [`Self::publish`].
    fn publish_shared<'a>(&'a self, event: &'a Arc<CloudEvent>) -> BoxFuture<'a, Result<(), PublishError>> {
        self.publish(event)
    }

    /// Whether this publisher takes events at all. `false` lets the engine skip building
    /// them (no id drawn, nothing allocated). Default `true`.
    fn is_enabled(&self) -> bool {
        true
    }
}

/// Publishes, logging (never propagating) a failure: events never affect runs.
pub async fn publish_logged(publisher: &dyn EventPublisher, event: &CloudEvent) {
    if let Err(error) = publisher.publish(event).await {
        log_failure(event, &error);
    }
}

/// [`publish_logged`] for an event the caller shares (the engine's own).
pub(crate) async fn publish_shared_logged(publisher: &dyn EventPublisher, event: &Arc<CloudEvent>) {
    if let Err(error) = publisher.publish_shared(event).await {
        log_failure(event, &error);
    }
}

fn log_failure(event: &CloudEvent, error: &PublishError) {
    tracing::warn!(topic = event.event_type, subject = %event.subject, %error, "event publish failed");
}

/// Publishes nothing.
#[derive(Debug, Clone, Copy, Default)]
pub struct NoPublisher;

impl EventPublisher for NoPublisher {
    fn publish<'a>(&'a self, _event: &'a CloudEvent) -> BoxFuture<'a, Result<(), PublishError>> {
        Box::pin(std::future::ready(Ok(())))
    }

    fn is_enabled(&self) -> bool {
        false
    }
}

/// Sends events on a tokio broadcast channel, for embedders. With no subscriber the event
/// is dropped (not an error: nobody was listening).
#[derive(Debug, Clone)]
pub struct BroadcastPublisher {
    sender: broadcast::Sender<Arc<CloudEvent>>,
}

impl BroadcastPublisher {
    /// A channel keeping up to `capacity` events for slow subscribers.
    pub fn new(capacity: usize) -> Self {
        Self { sender: broadcast::channel(capacity.max(1)).0 }
    }

    /// A new subscriber, receiving events published from now on.
    pub fn subscribe(&self) -> broadcast::Receiver<Arc<CloudEvent>> {
        self.sender.subscribe()
    }
}

impl EventPublisher for BroadcastPublisher {
    fn publish<'a>(&'a self, event: &'a CloudEvent) -> BoxFuture<'a, Result<(), PublishError>> {
        let _ = self.sender.send(Arc::new(event.clone()));
        Box::pin(std::future::ready(Ok(())))
    }

    fn publish_shared<'a>(&'a self, event: &'a Arc<CloudEvent>) -> BoxFuture<'a, Result<(), PublishError>> {
        let _ = self.sender.send(event.clone());
        Box::pin(std::future::ready(Ok(())))
    }
}

/// Publishes to several publishers, in order; the first failure is returned after all
/// were tried. Enabled when any of them is.
#[derive(Clone, Default)]
pub struct FanOut(Vec<Arc<dyn EventPublisher>>);

impl FanOut {
    /// Publishes to each of `publishers`.
    pub fn new(publishers: Vec<Arc<dyn EventPublisher>>) -> Self {
        Self(publishers)
    }
}

impl fmt::Debug for FanOut {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FanOut").field("publishers", &self.0.len()).finish()
    }
}

impl EventPublisher for FanOut {
    fn publish<'a>(&'a self, event: &'a CloudEvent) -> BoxFuture<'a, Result<(), PublishError>> {
        Box::pin(async move {
            let mut first = Ok(());
            for publisher in self.0.iter().filter(|p| p.is_enabled()) {
                if let (Err(error), Ok(())) = (publisher.publish(event).await, &first) {
                    first = Err(error);
                }
            }
            first
        })
    }

    fn publish_shared<'a>(&'a self, event: &'a Arc<CloudEvent>) -> BoxFuture<'a, Result<(), PublishError>> {
        Box::pin(async move {
            let mut first = Ok(());
            for publisher in self.0.iter().filter(|p| p.is_enabled()) {
                if let (Err(error), Ok(())) = (publisher.publish_shared(event).await, &first) {
                    first = Err(error);
                }
            }
            first
        })
    }

    fn is_enabled(&self) -> bool {
        self.0.iter().any(|p| p.is_enabled())
    }
}

/// Writes each event as a `tracing` info record with its JSON.
#[derive(Debug, Clone, Copy, Default)]
pub struct TracingPublisher;

impl EventPublisher for TracingPublisher {
    fn publish<'a>(&'a self, event: &'a CloudEvent) -> BoxFuture<'a, Result<(), PublishError>> {
        tracing::info!(target: "sundial::events", topic = event.event_type, subject = %event.subject, event = %event.to_json());
        Box::pin(std::future::ready(Ok(())))
    }
}
