//! Prometheus metrics of one node, served at `/metrics` in the text format.
//!
//! Runs and lateness come from the node's own events (a [`MetricsPublisher`] wraps the
//! configured publisher), so they count exactly what history records; engine counters
//! (acquisitions, store errors and retries, runs here, leadership) are read from the
//! scheduler at scrape time.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use futures_util::future::BoxFuture;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::Registry;

use super::timeline::Ended;
use crate::events::{CloudEvent, EventPublisher, PublishError, Topic};
use crate::stats::EngineCounters;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct JobLabels {
    job: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RunLabels {
    job: String,
    outcome: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct OpLabels {
    operation: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct WorkLabels {
    work: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct SinkName {
    sink: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct SinkLabels {
    sink: String,
    result: String,
}

/// A node's metrics.
pub struct Metrics {
    registry: Registry,
    started: Family<JobLabels, Counter>,
    ended: Family<RunLabels, Counter>,
    lateness: Histogram,
    duration: Histogram,
    acquisitions: Counter,
    skipped: Counter,
    steal_reads: Counter,
    acquired: Counter,
    stolen: Counter,
    store_errors: Family<OpLabels, Counter>,
    store_retries: Counter,
    store_reachable: Gauge,
    store_conflicts: Counter,
    store_unknown_results: Counter,
    store_unavailable: Counter,
    engine_time: Family<WorkLabels, Counter<f64, AtomicU64>>,
    retry_source: Option<Arc<AtomicU64>>,
    running: Gauge,
    leader: Gauge,
    sink_events: Family<SinkLabels, Counter>,
    sink_retries: Family<SinkName, Counter>,
    sink_pending: Family<SinkName, Gauge>,
    sinks: parking_lot::Mutex<Vec<(String, Arc<crate::sinks::SinkStats>)>>,
    /// The last hour, minute by minute, for the dashboard.
    timeline: parking_lot::Mutex<super::timeline::Timeline>,
}

impl std::fmt::Debug for Metrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Metrics").finish_non_exhaustive()
    }
}

/// A store engine with a server of its own (PostgreSQL's): whether it answers, and what
/// it counted, for `/health` and `/metrics`.
pub trait StoreProbe: Send + Sync {
    /// One round trip to the store; the reason when it does not answer.
    fn ping(&self) -> futures_util::future::BoxFuture<'_, Result<(), String>>;
    /// Its counters so far.
    fn counters(&self) -> StoreCounters;
}

/// What a store engine counted since the node started.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct StoreCounters {
    /// Commits refused for a conflict (each then retried by the store).
    pub conflicts: u64,
    /// Commits whose outcome was unknown (a lost connection).
    pub unknown_results: u64,
    /// Operations that found the store unreachable or too slow.
    pub unavailable: u64,
}

impl StoreProbe for sundial::kv::postgres::PgKv {
    fn ping(&self) -> futures_util::future::BoxFuture<'_, Result<(), String>> {
        Box::pin(async move { sundial::kv::postgres::PgKv::ping(self).await.map_err(|e| e.to_string()) })
    }

    fn counters(&self) -> StoreCounters {
        let stats = self.stats();
        StoreCounters {
            conflicts: stats.conflicts,
            unknown_results: stats.unknown_results,
            unavailable: stats.unavailable,
        }
    }
}

impl Metrics {
    /// Metrics named `sundial_*`; `retries` is the store's retry counter
    /// ([`crate::stats::RetryCountingKv::retry_counter`]), when the store counts them.
    pub fn new(retries: Option<Arc<AtomicU64>>) -> Self {
        let mut registry = Registry::with_prefix("sundial");
        let started = Family::<JobLabels, Counter>::default();
        let ended = Family::<RunLabels, Counter>::default();
        // 0.5 ms to about 16 s: start lateness is milliseconds when healthy, seconds when not.
        let lateness = Histogram::new(exponential_buckets(0.0005, 2.0, 16));
        let duration = Histogram::new(exponential_buckets(0.001, 4.0, 12));
        let acquisitions = Counter::default();
        let skipped = Counter::default();
        let steal_reads = Counter::default();
        let acquired = Counter::default();
        let stolen = Counter::default();
        let store_errors = Family::<OpLabels, Counter>::default();
        let store_retries = Counter::default();
        // An in-process store is always there; a probe of a store server says otherwise.
        let store_reachable = Gauge::default();
        store_reachable.set(1);
        let store_conflicts = Counter::default();
        let store_unknown_results = Counter::default();
        let store_unavailable = Counter::default();
        let engine_time = Family::<WorkLabels, Counter<f64, AtomicU64>>::default();
        let running = Gauge::default();
        let leader = Gauge::default();
        let sink_events = Family::<SinkLabels, Counter>::default();
        let sink_retries = Family::<SinkName, Counter>::default();
        let sink_pending = Family::<SinkName, Gauge>::default();
        registry.register(
            "event_sink_events",
            "Events of each sink by result: delivered, or dropped (queue_full, gave_up, refused)",
            sink_events.clone(),
        );
        registry.register("event_sink_retries", "Deliveries each sink tried again", sink_retries.clone());
        registry.register("event_sink_pending", "Events each sink has queued or is delivering", sink_pending.clone());
        registry.register("runs_started", "Runs started on this node, by job", started.clone());
        registry.register("runs", "Runs ended on this node, by job and outcome", ended.clone());
        registry.register(
            "run_lateness_seconds",
            "Actual start minus scheduled time of runs started on this node",
            lateness.clone(),
        );
        registry.register("run_duration_seconds", "Run durations on this node", duration.clone());
        registry.register("acquisitions", "Acquisition transactions committed", acquisitions.clone());
        registry.register(
            "acquisitions_skipped",
            "Poll cycles that left the due index unread, knowing nothing was due",
            skipped.clone(),
        );
        registry.register(
            "steal_reads",
            "Acquisitions that also read the other nodes' shards for late fires to take",
            steal_reads.clone(),
        );
        registry.register("acquired_triggers", "Due triggers acquired to run here", acquired.clone());
        registry.register(
            "stolen_triggers",
            "Of the triggers acquired, those taken from other nodes' shards, late there",
            stolen.clone(),
        );
        registry.register(
            "store_errors",
            "Store operations that failed after the store's own retries, by operation",
            store_errors.clone(),
        );
        registry.register(
            "store_retries",
            "Store transactions run again after a conflict or another retryable error",
            store_retries.clone(),
        );
        registry.register(
            "store_reachable",
            "1 when the store answered the last check (a scrape or /health), else 0",
            store_reachable.clone(),
        );
        registry.register(
            "store_conflicts",
            "Store commits refused for a conflict with another transaction (then retried)",
            store_conflicts.clone(),
        );
        registry.register(
            "store_unknown_results",
            "Store commits whose outcome was unknown (a connection lost during the commit)",
            store_unknown_results.clone(),
        );
        registry.register(
            "store_unavailable",
            "Store operations that found the store unreachable or too slow",
            store_unavailable.clone(),
        );
        registry.register(
            "engine_time_seconds",
            "Time the engine spent acquiring, recording runs' ends and starting run actors",
            engine_time.clone(),
        );
        registry.register("running_runs", "Runs on this node now", running.clone());
        registry.register("leader", "1 while this node holds the leader lease", leader.clone());
        Self {
            registry,
            started,
            ended,
            lateness,
            duration,
            acquisitions,
            skipped,
            steal_reads,
            acquired,
            stolen,
            store_errors,
            store_retries,
            store_reachable,
            store_conflicts,
            store_unknown_results,
            store_unavailable,
            engine_time,
            retry_source: retries,
            running,
            leader,
            sink_events,
            sink_retries,
            sink_pending,
            sinks: parking_lot::Mutex::new(Vec::new()),
            timeline: parking_lot::Mutex::new(super::timeline::Timeline::default()),
        }
    }

    /// Reports an event sink's counters (`sundial_event_sink_*`) at each scrape.
    pub fn add_sink(&self, name: &str, stats: Arc<crate::sinks::SinkStats>) {
        self.sinks.lock().push((name.to_owned(), stats));
    }

    fn observe(&self, event: &CloudEvent) {
        let data = &event.data;
        let seconds = |from: Option<chrono::DateTime<chrono::Utc>>, to: Option<chrono::DateTime<chrono::Utc>>| {
            let (from, to) = (from?, to?);
            Some(((to - from).num_microseconds()? as f64 / 1e6).max(0.0))
        };
        if event.event_type == Topic::RunStarted.as_str() {
            self.started.get_or_create(&JobLabels { job: data.job.clone() }).inc();
            if let Some(late) = seconds(data.scheduled_at, data.started_at) {
                self.lateness.observe(late);
                if let Some(started) = data.started_at {
                    self.timeline
                        .lock()
                        .started(started, std::time::Duration::try_from_secs_f64(late).unwrap_or_default());
                }
            }
            return;
        }
        let outcome = [
            (Topic::RunSucceeded, "succeeded", Ended::Succeeded),
            (Topic::RunFailed, "failed", Ended::Failed),
            (Topic::RunCanceled, "canceled", Ended::Canceled),
            (Topic::RunLost, "lost", Ended::Lost),
        ]
        .into_iter()
        .find(|(topic, _, _)| topic.as_str() == event.event_type);
        if let Some((_, outcome, how)) = outcome {
            if let Some(finished) = data.finished_at {
                self.timeline.lock().ended(finished, how);
            }
            self.ended.get_or_create(&RunLabels { job: data.job.clone(), outcome: outcome.to_owned() }).inc();
            if let Some(took) = seconds(data.started_at, data.finished_at) {
                self.duration.observe(took);
            }
        }
    }

    /// The last hour of this node's runs, minute by minute.
    pub fn timeline(&self) -> Vec<super::timeline::MinuteView> {
        self.timeline.lock().view()
    }

    /// Records what a store probe found: whether the store answered, and its counters.
    pub fn observe_store(&self, reachable: bool, counters: StoreCounters) {
        self.store_reachable.set(i64::from(reachable));
        mirror(&self.store_conflicts, counters.conflicts);
        mirror(&self.store_unknown_results, counters.unknown_results);
        mirror(&self.store_unavailable, counters.unavailable);
    }

    /// The text exposition, with the engine's counters as of now.
    pub fn render(&self, engine: &EngineCounters) -> String {
        mirror(&self.acquisitions, engine.acquisitions);
        mirror(&self.skipped, engine.acquisitions_skipped);
        mirror(&self.steal_reads, engine.steal_reads);
        mirror(&self.acquired, engine.acquired_triggers);
        mirror(&self.stolen, engine.stolen_triggers);
        for (op, count) in &engine.store_errors {
            mirror(&self.store_errors.get_or_create(&OpLabels { operation: op.as_str().to_owned() }), *count);
        }
        for (work, time) in &engine.time_in {
            let counter = self.engine_time.get_or_create(&WorkLabels { work: work.as_str().to_owned() });
            counter.inner().store(time.as_secs_f64().to_bits(), Ordering::Relaxed);
        }
        if let Some(source) = &self.retry_source {
            mirror(&self.store_retries, source.load(Ordering::Relaxed));
        }
        self.running.set(i64::try_from(engine.running).unwrap_or(i64::MAX));
        self.leader.set(i64::from(engine.leader));
        for (sink, stats) in self.sinks.lock().iter() {
            use crate::sinks::SinkStats;
            let results = [
                ("delivered", &stats.delivered),
                ("queue_full", &stats.dropped_queue_full),
                ("gave_up", &stats.dropped_gave_up),
                ("refused", &stats.dropped_refused),
            ];
            for (result, count) in results {
                let labels = SinkLabels { sink: sink.clone(), result: result.to_owned() };
                mirror(&self.sink_events.get_or_create(&labels), SinkStats::get(count));
            }
            let name = SinkName { sink: sink.clone() };
            mirror(&self.sink_retries.get_or_create(&name), SinkStats::get(&stats.retries));
            let pending = i64::try_from(SinkStats::get(&stats.pending)).unwrap_or(i64::MAX);
            self.sink_pending.get_or_create(&name).set(pending);
        }
        let mut text = String::new();
        if let Err(error) = prometheus_client::encoding::text::encode(&mut text, &self.registry) {
            tracing::error!(%error, "encoding metrics failed");
        }
        text
    }
}

/// Sets a counter to a value counted elsewhere (monotonic there too).
fn mirror(counter: &Counter, value: u64) {
    counter.inner().store(value, Ordering::Relaxed);
}

/// Feeds run events to [`Metrics`], then passes them on to `inner`.
pub struct MetricsPublisher {
    metrics: Arc<Metrics>,
    inner: Arc<dyn EventPublisher>,
}

impl MetricsPublisher {
    /// Observes into `metrics`, publishes through `inner`.
    pub fn new(metrics: Arc<Metrics>, inner: Arc<dyn EventPublisher>) -> Self {
        Self { metrics, inner }
    }
}

impl EventPublisher for MetricsPublisher {
    fn publish<'a>(&'a self, event: &'a CloudEvent) -> BoxFuture<'a, Result<(), PublishError>> {
        self.metrics.observe(event);
        self.inner.publish(event)
    }

    fn publish_shared<'a>(&'a self, event: &'a Arc<CloudEvent>) -> BoxFuture<'a, Result<(), PublishError>> {
        self.metrics.observe(event);
        self.inner.publish_shared(event)
    }
}

#[cfg(test)]
mod tests {
    use chrono::{TimeZone, Utc};
    use sundial::job::{JobRun, RunCause};
    use sundial::name::{JobName, TriggerName};

    use super::*;
    use crate::events::RunFacts;
    use crate::stats::{EngineWork, StoreOp};

    #[test]
    fn run_events_and_engine_counters_show_up() {
        let metrics = Metrics::new(Some(Arc::new(AtomicU64::new(4))));
        let at = Utc.with_ymd_and_hms(2026, 1, 1, 0, 0, 0).unwrap();
        let run = JobRun {
            id: uuid::Uuid::nil(),
            job: JobName::new("report").unwrap(),
            trigger: Some(TriggerName::new("daily").unwrap()),
            scheduled_at: at,
            cause: RunCause::Schedule,
            attempt: 1,
            retry_of: None,
            data: Default::default(),
        };
        let started = RunFacts { started_at: Some(at + chrono::Duration::milliseconds(3)), ..RunFacts::default() };
        metrics.observe(&CloudEvent::for_run(Topic::RunStarted, uuid::Uuid::nil(), at, &run, started, "n1"));
        let ended = RunFacts {
            started_at: Some(at),
            finished_at: Some(at + chrono::Duration::seconds(2)),
            ..RunFacts::default()
        };
        metrics.observe(&CloudEvent::for_run(Topic::RunFailed, uuid::Uuid::nil(), at, &run, ended, "n1"));
        let engine = EngineCounters {
            acquisitions: 7,
            acquisitions_skipped: 5,
            steal_reads: 3,
            acquired_triggers: 9,
            stolen_triggers: 2,
            store_errors: vec![(StoreOp::Heartbeat, 2)],
            time_in: vec![(EngineWork::Acquire, std::time::Duration::from_millis(1500))],
            running: 1,
            leader: true,
        };
        let text = metrics.render(&engine);
        for line in [
            "sundial_runs_started_total{job=\"report\"} 1",
            "sundial_runs_total{job=\"report\",outcome=\"failed\"} 1",
            "sundial_run_lateness_seconds_count 1",
            "sundial_acquired_triggers_total 9",
            "sundial_stolen_triggers_total 2",
            "sundial_acquisitions_skipped_total 5",
            "sundial_steal_reads_total 3",
            "sundial_store_errors_total{operation=\"heartbeat\"} 2",
            "sundial_store_retries_total 4",
            "sundial_engine_time_seconds_total{work=\"acquire\"} 1.5",
            "sundial_leader 1",
            "sundial_running_runs 1",
        ] {
            assert!(text.contains(line), "{line} missing from:\n{text}");
        }
    }
}
