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
pub struct NodeShared<K: Kv> {
    pub(crate) store: KvJobStore<K>,
    pub(crate) registry: JobRegistry,
    pub(crate) options: SchedulerOptions,
    pub(crate) node_id: String,
    pub(crate) clock: Arc<dyn Clock>,
    pub(crate) publisher: Arc<dyn EventPublisher>,
    pub(crate) middleware: Vec<Arc<dyn RunMiddleware>>,
    pub(crate) shared_store: bool,
    pub(crate) name_prefix: String,
    pub(crate) election: Arc<dyn DynLeaderElection>,
    pub(crate) start_timer: Arc<dyn Sleeper>,
    pub(crate) lifecycle: watch::Sender<Lifecycle>,
    pub(crate) leader: watch::Sender<Option<Leadership>>,
    /// The cancellation of every run on this node, so the fence can reach them while the
    /// poller is busy.
    pub(crate) runs: Mutex<BTreeMap<Uuid, RunCancel>>,
    /// When this node's last heartbeat committed (monotonic).
    pub(crate) last_heartbeat: Mutex<Option<MonotonicInstant>>,
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

    pub(crate) fn set_lifecycle(&self, next: Lifecycle) {
        self.lifecycle.send_replace(next);
    }

    /// This node's leadership, if it leads.
    pub(crate) fn leader(&self) -> Option<Leadership> {
        self.leader.borrow().clone()
    }

    pub(crate) fn set_leader(&self, leadership: Option<Leadership>) {
        self.leader.send_replace(leadership);
    }

    /// Asks this node's poller for a cycle now (it has work it could not know of).
    pub(crate) fn wake_poller(&self) {
        if let Some(poller) = ractor::registry::where_is(self.actor_name("poller")) {
            let _ = poller.send_message(PollerMsg::Wake);
        }
    }

    pub(crate) fn register_run(&self, id: Uuid, cancel: RunCancel) {
        self.runs.lock().insert(id, cancel);
    }

    pub(crate) fn unregister_run(&self, id: Uuid) {
        self.runs.lock().remove(&id);
    }

    /// Cancels the run `id` if it runs here (a run that ended meanwhile is left alone).
    pub(crate) fn cancel_run(&self, id: Uuid, reason: CancelReason) {
        if let Some(cancel) = self.runs.lock().get(&id) {
            cancel.cancel(reason);
        }
    }

    /// Cancels every run here (in run-id order); returns how many were not canceled yet.
    pub(crate) fn cancel_all_runs(&self, reason: CancelReason) -> usize {
        let runs = self.runs.lock();
        let fresh = runs.values().filter(|c| c.reason().is_none()).count();
        for cancel in runs.values() {
            cancel.cancel(reason);
        }
        fresh
    }

    /// Runs on this node now.
    pub(crate) fn running(&self) -> usize {
        self.runs.lock().len()
    }

    /// Notes a heartbeat that committed, begun at `began`. The leader times a heartbeat
    /// from when it saw it, which is after it was written and so after it began: timed
    /// from its beginning here, the node's own view of its heartbeat's age is never
    /// younger than the leader's, and it fences itself before it can be declared lost.
    pub(crate) fn heartbeat_committed(&self, began: MonotonicInstant) {
        *self.last_heartbeat.lock() = Some(began);
    }

    /// How long ago, on this node's monotonic clock, its last committed heartbeat began
    /// (`None` before the first).
    pub(crate) fn heartbeat_age(&self) -> Option<std::time::Duration> {
        let last = (*self.last_heartbeat.lock())?;
        Some(self.clock.monotonic().saturating_duration_since(last))
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

/// A node's current leadership.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Leadership {
    /// The lease term.
    pub(crate) term: u64,
    /// What protected store transactions check, when the lease lives in the store.
    pub(crate) fence: Option<Fence>,
}
