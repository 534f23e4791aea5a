//! A node's context: what its actors and its handle share (see DESIGN.md, "What a
//! node's actors share"), its lifecycle, and its leadership.

use crate::events::{publish_shared_logged, CloudEvent, EventPublisher, RunFacts, Topic};
use crate::execute::{CancelReason, RunCancel, RunMiddleware};
use crate::lease::DynLeaderElection;
use crate::messages::{CompletionRequest, PollerMsg};
use crate::registry::JobRegistry;
use crate::slots::RunSlots;
use crate::starts::PendingStarts;
use crate::stats::EngineStats;
use parking_lot::Mutex;
use std::collections::BTreeMap;
use std::sync::Arc;
use sundial::entropy::Entropy;
use sundial::kv::Kv;
use sundial::options::SchedulerOptions;
use sundial::store::Fence;
use sundial::store::KvJobStore;
use sundial::time::{Clock, MonotonicInstant, Sleeper};
use tokio::sync::{mpsc, watch};
use uuid::Uuid;

/// Where a node is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Lifecycle {
    /// Started, not yet serving: nothing is acquired, `trigger` is refused.
    Starting,
    /// Polling and running.
    Serving,
    /// Stop began: no new runs; running ones finish or are canceled at the deadline.
    Draining,
    /// Stopped.
    Stopped,
}

/// Everything a node's actors and its handle share (opaque outside this crate).
///
/// Most of it is fixed when the node starts. What changes has one owner, and the others
/// only read it or reach it by message: the lifecycle is the supervisor's and the
/// leadership the lease actor's (each owner holds the `watch` sender, this context a
/// receiver); the runs register and unregister themselves; the run slots, pending starts,
/// counters and event ids are shared services with their own synchronisation; the
/// completer is reached through its channel.
pub struct NodeShared<K: Kv> {
    pub(crate) store: KvJobStore<K>,
    pub(crate) registry: JobRegistry,
    pub(crate) options: SchedulerOptions,
    pub(crate) node_id: Arc<str>,
    pub(crate) clock: Arc<dyn Clock>,
    pub(crate) publisher: Arc<dyn EventPublisher>,
    pub(crate) middleware: Vec<Arc<dyn RunMiddleware>>,
    pub(crate) shared_store: bool,
    pub(crate) name_prefix: String,
    pub(crate) election: Arc<dyn DynLeaderElection>,
    pub(crate) start_timer: Arc<dyn Sleeper>,
    /// Where the node is in its life; the supervisor moves it (the handle asks by message).
    pub(crate) lifecycle: watch::Receiver<Lifecycle>,
    /// This node's leadership; the lease actor moves it.
    pub(crate) leader: watch::Receiver<Option<Leadership>>,
    /// When this node's last heartbeat committed (monotonic); the poller moves it
    /// ([`HeartbeatTime`]), the self-fencing watchdog and the runs read it.
    pub(crate) heartbeat: watch::Receiver<Option<MonotonicInstant>>,
    /// The runs on this node, so the handle, the poller and the fence can cancel them
    /// while the poller is busy in a store call.
    pub(crate) runs: RunRegistry,
    /// Where event ids come from: one seeded stream every publisher draws from.
    pub(crate) event_ids: Mutex<Entropy>,
    pub(crate) stats: EngineStats,
    /// Runs waiting for their start instant (bookkeeping gives way to them).
    pub(crate) starts: Arc<PendingStarts>,
    /// The `max_concurrent_runs` slots jobs run in, taken and given back by the runs.
    pub(crate) run_slots: Arc<RunSlots>,
    /// Where run actors send their completions (the completer's inbox).
    pub(crate) completions: mpsc::UnboundedSender<CompletionRequest>,
}

impl<K: Kv> NodeShared<K> {
    pub(crate) fn lifecycle(&self) -> Lifecycle {
        *self.lifecycle.borrow()
    }

    /// This node's leadership, if it leads.
    pub(crate) fn leader(&self) -> Option<Leadership> {
        self.leader.borrow().clone()
    }

    /// How long ago, on this node's monotonic clock, its last committed heartbeat began
    /// (`None` before the first).
    pub(crate) fn heartbeat_age(&self) -> Option<std::time::Duration> {
        let began = (*self.heartbeat.borrow())?;
        Some(self.clock.monotonic().saturating_duration_since(began))
    }

    /// Asks this node's poller for a cycle now (it has work it could not know of).
    pub(crate) fn wake_poller(&self) {
        if let Some(poller) = ractor::registry::where_is(self.actor_name("poller")) {
            let _ = poller.send_message(PollerMsg::Wake);
        }
    }

    /// Builds (with a fresh id) and publishes an event, when the publisher takes events.
    pub(crate) async fn publish(&self, make: impl FnOnce(Uuid) -> CloudEvent) {
        if self.publisher.is_enabled() {
            let event = Arc::new(make(self.event_id()));
            publish_shared_logged(self.publisher.as_ref(), &event).await;
        }
    }

    /// Publishes `scheduling.run.lost` for a run the store just marked lost (reaped with
    /// its node, or left by an earlier process of this one); reads the run only when a
    /// publisher takes events.
    pub(crate) async fn publish_lost(&self, id: Uuid) {
        if !self.publisher.is_enabled() {
            return;
        }
        let Ok(Some(record)) = self.store.run_record(id).await else { return };
        let Ok(run) = record.job_run() else { return };
        let facts = RunFacts {
            state: Some(record.state),
            started_at: sundial::time::from_micros(record.started_us),
            finished_at: record.finished_us.and_then(sundial::time::from_micros),
            error_code: record.error_code.clone(),
            error_message: record.error_message.clone(),
        };
        let now = self.clock.now();
        self.publish(|event_id| CloudEvent::for_run(Topic::RunLost, event_id, now, &run, facts, &self.node_id)).await;
    }

    /// A fresh event id from the seeded entropy.
    pub(crate) fn event_id(&self) -> Uuid {
        let mut ids = self.event_ids.lock();
        Uuid::from_u64_pair(ids.next_u64(), ids.next_u64())
    }

    /// `"{prefix}/{node}/{role}"`: deterministic, unique per node in a process.
    pub(crate) fn actor_name(&self, role: &str) -> String {
        format!("{}/{}/{role}", self.name_prefix, self.node_id)
    }
}

/// The cancellation of every run on a node, by run id. Each run registers itself as its
/// actor starts and unregisters as it ends.
#[derive(Default)]
pub(crate) struct RunRegistry(Mutex<BTreeMap<Uuid, RunCancel>>);

impl RunRegistry {
    pub(crate) fn register(&self, id: Uuid, cancel: RunCancel) {
        self.0.lock().insert(id, cancel);
    }

    pub(crate) fn unregister(&self, id: Uuid) {
        self.0.lock().remove(&id);
    }

    /// Cancels the run `id` if it runs here (a run that ended meanwhile is left alone).
    pub(crate) fn cancel(&self, id: Uuid, reason: CancelReason) {
        if let Some(cancel) = self.0.lock().get(&id) {
            cancel.cancel(reason);
        }
    }

    /// Cancels every run here (in run-id order); returns how many were not canceled yet.
    pub(crate) fn cancel_all(&self, reason: CancelReason) -> usize {
        let runs = self.0.lock();
        let fresh = runs.values().filter(|c| c.reason().is_none()).count();
        for cancel in runs.values() {
            cancel.cancel(reason);
        }
        fresh
    }

    /// Runs on this node now.
    pub(crate) fn len(&self) -> usize {
        self.0.lock().len()
    }
}

/// The writing end of a node's heartbeat time ([`NodeShared::heartbeat`]), held by its
/// poller (the supervisor keeps it for a restarted poller, which goes on from it).
#[derive(Clone)]
pub(crate) struct HeartbeatTime(watch::Sender<Option<MonotonicInstant>>);

impl HeartbeatTime {
    /// No heartbeat yet; the receiver goes into the node's context.
    pub(crate) fn new() -> (Self, watch::Receiver<Option<MonotonicInstant>>) {
        let sender = watch::Sender::new(None);
        let receiver = sender.subscribe();
        (Self(sender), receiver)
    }

    /// Notes a heartbeat that committed, begun at `began`. The leader times a heartbeat
    /// from when it saw it, which is after it was written and so after it began: timed
    /// from its beginning here, the node's own view of its heartbeat's age is never
    /// younger than the leader's, and it fences itself before it can be declared lost.
    pub(crate) fn committed(&self, began: MonotonicInstant) {
        self.0.send_replace(Some(began));
    }
}

/// A node's current leadership.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Leadership {
    /// The lease term.
    pub(crate) term: u64,
    /// What protected store transactions check, when the lease lives in the store.
    pub(crate) fence: Option<Fence>,
}
