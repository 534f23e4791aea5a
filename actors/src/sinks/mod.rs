//! Event sinks: CloudEvents delivered out of the process, over HTTP ([`http`]) and NATS
//! ([`nats`]), without ever slowing or failing a run.
//!
//! Each sink is a [`SinkPublisher`] in front of a bounded queue and one delivery task.
//! Publishing only puts the event in the queue (never waits): a full queue drops the
//! event, counts it and logs it. The task delivers in order, retrying a delivery that may
//! succeed later (the receiver down, slow or overloaded) with exponential backoff, up to
//! [`SinkOptions::max_attempts`]; a delivery the receiver refuses for good (a 4xx other
//! than 408 and 429) is dropped at once. Every outcome is counted in [`SinkStats`]
//! (`sundial_event_sink_*` in `/metrics`). Delivery is at least once: an event whose
//! answer was lost is sent again.

pub mod http;
pub mod nats;

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use futures_util::future::BoxFuture;
use tokio::sync::mpsc;

use crate::events::{CloudEvent, EventPublisher, PublishError, Topic};

/// A sink's queue and retry settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SinkOptions {
    /// Events waiting for delivery at most; more are dropped.
    pub queue_size: usize,
    /// Tries per delivery before it is dropped (at least 1).
    pub max_attempts: u32,
    /// The first retry's wait; each next one doubles, up to `backoff_max`.
    pub backoff_min: Duration,
    /// The longest wait between tries.
    pub backoff_max: Duration,
    /// Only these topics (`None`: all).
    pub topics: Option<BTreeSet<Topic>>,
}

impl Default for SinkOptions {
    /// 10,000 queued events; 12 tries from 100 ms apart to 10 s apart (about a minute).
    fn default() -> Self {
        Self {
            queue_size: 10_000,
            max_attempts: 12,
            backoff_min: Duration::from_millis(100),
            backoff_max: Duration::from_secs(10),
            topics: None,
        }
    }
}

/// What a sink counted.
#[derive(Debug, Default)]
pub struct SinkStats {
    /// Events delivered.
    pub delivered: AtomicU64,
    /// Deliveries tried again.
    pub retries: AtomicU64,
    /// Events dropped because the queue was full.
    pub dropped_queue_full: AtomicU64,
    /// Events dropped after `max_attempts` tries.
    pub dropped_gave_up: AtomicU64,
    /// Events the receiver refused for good.
    pub dropped_refused: AtomicU64,
    /// Events queued or being delivered now.
    pub pending: AtomicU64,
}

impl SinkStats {
    fn add(counter: &AtomicU64, n: usize) {
        counter.fetch_add(n as u64, Ordering::Relaxed);
    }

    /// `counter`'s value.
    pub fn get(counter: &AtomicU64) -> u64 {
        counter.load(Ordering::Relaxed)
    }
}

/// Why a delivery did not happen.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DeliveryError {
    /// It may work later: try again after a wait.
    Retry(String),
    /// The receiver refused it for good: drop it.
    Refused(String),
}

/// How a sink sends events.
pub trait Delivery: Send + 'static {
    /// Sends `events` (at most [`Delivery::batch_size`], in order) as one delivery.
    fn deliver<'a>(&'a mut self, events: &'a [Arc<CloudEvent>]) -> BoxFuture<'a, Result<(), DeliveryError>>;

    /// The most events one delivery takes.
    fn batch_size(&self) -> usize {
        1
    }
}

/// The publisher of one sink: queues events for its delivery task.
#[derive(Clone)]
pub struct SinkPublisher {
    name: Arc<str>,
    queue: mpsc::Sender<Arc<CloudEvent>>,
    stats: Arc<SinkStats>,
    topics: Option<Arc<BTreeSet<&'static str>>>,
}

impl std::fmt::Debug for SinkPublisher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SinkPublisher").field("name", &self.name).finish_non_exhaustive()
    }
}

impl SinkPublisher {
    /// The sink's name (its label in metrics and logs).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Its counters.
    pub fn stats(&self) -> Arc<SinkStats> {
        self.stats.clone()
    }

    /// Waits until every queued event is delivered or dropped, or `limit` passed; whether
    /// the queue emptied.
    pub async fn flush(&self, limit: Duration) -> bool {
        let step = Duration::from_millis(20);
        let mut waited = Duration::ZERO;
        while SinkStats::get(&self.stats.pending) > 0 {
            if waited >= limit {
                return false;
            }
            tokio::time::sleep(step).await;
            waited += step;
        }
        true
    }
}

/// Dropped events are logged on the first and then every this many.
const LOG_EVERY: u64 = 1000;

impl SinkPublisher {
    /// Queues the event `make` gives, if the queue has room and the topic is this sink's;
    /// `make` is called only then (a full queue costs no copy).
    fn enqueue(&self, event_type: &str, make: impl FnOnce() -> Arc<CloudEvent>) -> Result<(), PublishError> {
        if self.topics.as_ref().is_some_and(|topics| !topics.contains(event_type)) {
            return Ok(());
        }
        match self.queue.try_reserve() {
            Ok(permit) => {
                self.stats.pending.fetch_add(1, Ordering::Relaxed);
                permit.send(make());
                Ok(())
            }
            Err(mpsc::error::TrySendError::Full(())) => {
                let dropped = self.stats.dropped_queue_full.fetch_add(1, Ordering::Relaxed);
                if dropped.is_multiple_of(LOG_EVERY) {
                    tracing::warn!(
                        sink = %self.name,
                        dropped = dropped + 1,
                        "event sink queue full: events dropped (counted in /metrics)"
                    );
                }
                Ok(())
            }
            Err(mpsc::error::TrySendError::Closed(())) => {
                Err(PublishError(format!("event sink '{}' has stopped", self.name)))
            }
        }
    }
}

impl EventPublisher for SinkPublisher {
    fn publish<'a>(&'a self, event: &'a CloudEvent) -> BoxFuture<'a, Result<(), PublishError>> {
        Box::pin(std::future::ready(self.enqueue(event.event_type, || Arc::new(event.clone()))))
    }

    fn publish_shared<'a>(&'a self, event: &'a Arc<CloudEvent>) -> BoxFuture<'a, Result<(), PublishError>> {
        Box::pin(std::future::ready(self.enqueue(event.event_type, || event.clone())))
    }
}

/// Starts a sink named `name` delivering with `delivery`; its publisher.
pub fn spawn(name: &str, delivery: impl Delivery, options: SinkOptions) -> SinkPublisher {
    let (queue, incoming) = mpsc::channel(options.queue_size.max(1));
    let stats = Arc::new(SinkStats::default());
    let topics = options.topics.as_ref().map(|t| Arc::new(t.iter().map(|topic| topic.as_str()).collect()));
    let name: Arc<str> = Arc::from(name);
    tokio::spawn(deliver_all(name.clone(), incoming, delivery, stats.clone(), options));
    SinkPublisher { name, queue, stats, topics }
}

/// The wait before try `attempt` (2 for the first retry).
pub fn backoff(options: &SinkOptions, attempt: u32) -> Duration {
    let doublings = attempt.saturating_sub(2).min(30);
    options.backoff_min.saturating_mul(1 << doublings).min(options.backoff_max)
}

async fn deliver_all(
    name: Arc<str>,
    mut incoming: mpsc::Receiver<Arc<CloudEvent>>,
    mut delivery: impl Delivery,
    stats: Arc<SinkStats>,
    options: SinkOptions,
) {
    let mut batch = Vec::new();
    while let Some(first) = incoming.recv().await {
        batch.clear();
        batch.push(first);
        while batch.len() < delivery.batch_size().max(1) {
            match incoming.try_recv() {
                Ok(event) => batch.push(event),
                Err(_) => break,
            }
        }
        let mut attempt = 1;
        loop {
            match delivery.deliver(&batch).await {
                Ok(()) => {
                    SinkStats::add(&stats.delivered, batch.len());
                    break;
                }
                Err(DeliveryError::Refused(why)) => {
                    SinkStats::add(&stats.dropped_refused, batch.len());
                    tracing::warn!(sink = %name, events = batch.len(), %why, "event sink refused events; dropped");
                    break;
                }
                Err(DeliveryError::Retry(why)) if attempt >= options.max_attempts.max(1) => {
                    SinkStats::add(&stats.dropped_gave_up, batch.len());
                    tracing::warn!(sink = %name, events = batch.len(), attempts = attempt, %why, "event sink gave up; dropped");
                    break;
                }
                Err(DeliveryError::Retry(why)) => {
                    attempt += 1;
                    stats.retries.fetch_add(1, Ordering::Relaxed);
                    tracing::debug!(sink = %name, attempt, %why, "event delivery failed; trying again");
                    tokio::time::sleep(backoff(&options, attempt)).await;
                }
            }
        }
        stats.pending.fetch_sub(batch.len() as u64, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use std::collections::VecDeque;

    use chrono::DateTime;
    use parking_lot::Mutex;
    use uuid::Uuid;

    use super::*;

    /// Answers from a script, then succeeds; records what it was given.
    struct Scripted {
        answers: VecDeque<Result<(), DeliveryError>>,
        seen: Arc<Mutex<Vec<Vec<String>>>>,
        batch: usize,
    }

    impl Delivery for Scripted {
        fn deliver<'a>(&'a mut self, events: &'a [Arc<CloudEvent>]) -> BoxFuture<'a, Result<(), DeliveryError>> {
            self.seen.lock().push(events.iter().map(|e| e.subject.clone()).collect());
            let answer = self.answers.pop_front().unwrap_or(Ok(()));
            Box::pin(std::future::ready(answer))
        }
        fn batch_size(&self) -> usize {
            self.batch
        }
    }

    fn event(job: &str, topic: Topic) -> CloudEvent {
        CloudEvent::for_job(topic, Uuid::nil(), DateTime::UNIX_EPOCH, job, "n1")
    }

    fn options(queue_size: usize, max_attempts: u32) -> SinkOptions {
        SinkOptions { queue_size, max_attempts, ..SinkOptions::default() }
    }

    fn scripted(answers: Vec<Result<(), DeliveryError>>, batch: usize) -> (Scripted, Arc<Mutex<Vec<Vec<String>>>>) {
        let seen = Arc::new(Mutex::new(Vec::new()));
        (Scripted { answers: answers.into(), seen: seen.clone(), batch }, seen)
    }

    #[tokio::test(start_paused = true)]
    async fn deliveries_are_retried_with_backoff_then_given_up() {
        let retry = || Err(DeliveryError::Retry("down".into()));
        let (delivery, seen) = scripted(vec![retry(), retry(), retry(), retry()], 1);
        let sink = spawn("s", delivery, options(10, 3));
        sink.publish(&event("a", Topic::JobPaused)).await.unwrap();
        sink.publish(&event("b", Topic::JobPaused)).await.unwrap();
        assert!(sink.flush(Duration::from_secs(60)).await);
        let stats = sink.stats();
        // `a`: three tries, dropped; `b`: one failure, then delivered.
        assert_eq!(seen.lock().iter().map(|b| b[0].as_str()).collect::<Vec<_>>(), ["a", "a", "a", "b", "b"]);
        assert_eq!(SinkStats::get(&stats.dropped_gave_up), 1);
        assert_eq!(SinkStats::get(&stats.delivered), 1);
        assert_eq!(SinkStats::get(&stats.retries), 3);
    }

    #[tokio::test(start_paused = true)]
    async fn refused_events_are_dropped_at_once_and_others_batched() {
        let (delivery, seen) = scripted(vec![Err(DeliveryError::Refused("400".into()))], 3);
        let sink = spawn("s", delivery, options(10, 5));
        for job in ["a", "b", "c", "d"] {
            sink.publish(&event(job, Topic::JobPaused)).await.unwrap();
        }
        assert!(sink.flush(Duration::from_secs(5)).await);
        assert_eq!(*seen.lock(), [vec!["a", "b", "c"], vec!["d"]]);
        assert_eq!(SinkStats::get(&sink.stats().dropped_refused), 3);
        assert_eq!(SinkStats::get(&sink.stats().delivered), 1);
    }

    #[tokio::test(start_paused = true)]
    async fn a_full_queue_drops_without_waiting_and_topics_filter() {
        let retry = || Err(DeliveryError::Retry("down".into()));
        let (delivery, _) = scripted(vec![retry(); 100], 1);
        let mut options = options(2, 100);
        options.topics = Some([Topic::JobPaused].into());
        let sink = spawn("s", delivery, options);
        sink.publish(&event("a", Topic::JobPaused)).await.unwrap();
        // The delivery task takes `a` and keeps failing on it.
        tokio::time::sleep(Duration::from_millis(1)).await;
        for job in ["b", "c", "d", "e"] {
            // Never waits, however stuck the delivery is.
            sink.publish(&event(job, Topic::JobPaused)).await.unwrap();
            sink.publish(&event(job, Topic::JobResumed)).await.unwrap();
        }
        // One in delivery, two queued, two dropped; resumed events are not for this sink.
        assert_eq!(SinkStats::get(&sink.stats().dropped_queue_full), 2);
        assert_eq!(SinkStats::get(&sink.stats().pending), 3);
    }

    #[test]
    fn backoff_doubles_up_to_its_maximum() {
        let o = SinkOptions::default();
        let waits: Vec<u128> = (2..10).map(|a| backoff(&o, a).as_millis()).collect();
        assert_eq!(waits, [100, 200, 400, 800, 1600, 3200, 6400, 10_000]);
        assert_eq!(backoff(&o, u32::MAX), o.backoff_max);
    }
}
