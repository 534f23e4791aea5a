//! A node: its shared context, its lifecycle, and the `NodeSupervisor` that owns its actors.
//!
//! Lifecycle: `Starting` → `Serving` (the host says so) → `Draining` (stop began) →
//! `Stopped`. The poller only acquires while `Serving`; `trigger` is refused outside it.
//!
//! Supervision (written down as the style guide asks): the supervisor owns the poller
//! (which owns the run actors), the lease actor and the housekeeper. If the poller fails (a bug: store errors are handled inside
//! the cycle) the supervisor restarts it at once with a fresh state; runs it had started
//! keep going, their completions are still recorded by their own actors, and the new
//! poller adopts nothing (it starts with no runs counted, so briefly more than
//! `max_concurrent_runs` may run). The supervisor itself fails only if it cannot spawn a
//! poller, which its own supervisor (the host's, when embedded) then sees.

use std::collections::BTreeMap;
use std::sync::Arc;

use parking_lot::Mutex;
use ractor::{Actor, ActorCell, ActorProcessingErr, ActorRef, RpcReplyPort, SpawnErr, SupervisionEvent};
use sundial::entropy::{Entropy, RunIdGenerator};
use sundial::kv::Kv;
use sundial::leader::LocalLeaderElection;
use sundial::options::SchedulerOptions;
use sundial::store::Completion;
use sundial::store::Fence;
use sundial::store::KvJobStore;
use sundial::time::{Clock, MonotonicInstant, Sleeper};
use tokio::sync::{mpsc, oneshot, watch};
use uuid::Uuid;

use crate::clock::TokioSleeper;
use crate::completer::{spawn_completer, CompletionRequest, Recorded};
use crate::events::{publish_logged, CloudEvent, EventPublisher, NoPublisher};
use crate::execute::{AbortOnDrop, CancelReason, RunCancel, RunMiddleware};
use crate::housekeeper::{HousekeeperActor, HousekeeperMsg};
use crate::lease::{DynLeaderElection, LeaseActor, LeaseMsg};
use crate::poller::{PollerActor, PollerMsg};
use crate::registry::JobRegistry;
use crate::scheduler::JobScheduler;
use crate::starts::PendingStarts;
use crate::stats::EngineStats;

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
    lifecycle: watch::Sender<Lifecycle>,
    leader: watch::Sender<Option<Leadership>>,
    /// The cancellation of every run on this node, so the fence can reach them while the
    /// poller is busy.
    runs: Mutex<BTreeMap<Uuid, RunCancel>>,
    /// When this node's last heartbeat committed (monotonic).
    last_heartbeat: Mutex<Option<MonotonicInstant>>,
    ids: Mutex<(RunIdGenerator, Entropy)>,
    pub(crate) stats: EngineStats,
    /// Runs waiting for their start instant (bookkeeping gives way to them).
    pub(crate) starts: Arc<PendingStarts>,
    /// Where run actors send their completions (the completer's inbox).
    completions: mpsc::UnboundedSender<CompletionRequest>,
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

    /// Records a run's end through the completer (batched with others ending meanwhile);
    /// returns what was recorded (the run's stored final state, and the earliest fire the
    /// end made due). Without a completer (its supervisor is gone)
    /// the run records itself.
    pub(crate) async fn complete(&self, completion: Completion) -> Recorded {
        let (reply, stored) = oneshot::channel();
        let request = CompletionRequest { completion: completion.clone(), reply };
        if self.completions.send(request).is_ok() {
            if let Ok(recorded) = stored.await {
                return recorded;
            }
        }
        // Recording is idempotent: a completion the completer did record is found as such.
        // Boxed: this rare path's store future is kilobytes, and inline it would make
        // every run actor's future as large, copied at each run's start.
        Box::pin(crate::completer::complete_durably(self, std::slice::from_ref(&completion))).await[0]
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

    /// A fresh run id: UUID v7 from the injected clock and seeded entropy.
    pub(crate) fn run_id(&self) -> Uuid {
        let now = self.clock.now();
        self.ids.lock().0.next_id(now)
    }

    /// Builds (with a fresh id) and publishes an event, when the publisher takes events.
    pub(crate) async fn publish(&self, make: impl FnOnce(Uuid) -> CloudEvent) {
        if self.publisher.is_enabled() {
            let event = make(self.event_id());
            publish_logged(self.publisher.as_ref(), &event).await;
        }
    }

    /// A fresh event id from the seeded entropy.
    pub(crate) fn event_id(&self) -> Uuid {
        let mut ids = self.ids.lock();
        Uuid::from_u64_pair(ids.1.next_u64(), ids.1.next_u64())
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

/// How to build a node.
pub struct NodeConfig<K: Kv> {
    /// The store (shared by the cluster, or embedded).
    pub store: KvJobStore<K>,
    /// Registered types, code jobs and calendars.
    pub registry: JobRegistry,
    /// Options (SPEC §13).
    pub options: SchedulerOptions,
    /// This node's id (see [`SchedulerOptions::node_id_or_default`]).
    pub node_id: String,
    /// The clock everything reads.
    pub clock: Arc<dyn Clock>,
    /// The seed of run ids and event ids.
    pub entropy: Entropy,
    /// Where events go.
    pub publisher: Arc<dyn EventPublisher>,
    /// Wraps every run, first outermost.
    pub middleware: Vec<Arc<dyn RunMiddleware>>,
    /// The store is shared by several nodes (FoundationDB, or one `MemoryKv` in a
    /// simulation): heartbeats and cancel requests go through it.
    pub shared_store: bool,
    /// The first part of actor names (`"{prefix}/{node}/{role}"`).
    pub name_prefix: String,
    /// The leader election; `None` uses the in-process one (right for a single node with
    /// an embedded store). Nodes sharing a store must share a
    /// [`sundial::leader::KvLeaderElection`]: with in-process elections every node would lead
    /// and housekeep (still safe, as reaping is a compare-and-set, but wasteful).
    pub election: Option<Arc<dyn DynLeaderElection>>,
    /// How runs acquired ahead of time wait for their exact start time. The default,
    /// [`TokioSleeper`], follows tokio's clock (deterministic under a paused runtime) with a
    /// 1 ms tick; nodes on real time should use [`PreciseSleeper`](crate::clock::PreciseSleeper)
    /// for sub-millisecond start times, as the `sundial` binary does.
    pub start_timer: Arc<dyn Sleeper>,
}

impl<K: Kv> NodeConfig<K> {
    /// A config with no events, no middleware, an embedded store and prefix `sundial`.
    pub fn new(
        store: KvJobStore<K>,
        registry: JobRegistry,
        options: SchedulerOptions,
        node_id: impl Into<String>,
        clock: Arc<dyn Clock>,
        entropy: Entropy,
    ) -> Self {
        Self {
            store,
            registry,
            options,
            node_id: node_id.into(),
            clock,
            entropy,
            publisher: Arc::new(NoPublisher),
            middleware: Vec::new(),
            shared_store: false,
            name_prefix: "sundial".into(),
            election: None,
            start_timer: Arc::new(TokioSleeper),
        }
    }
}

/// Messages to the supervisor.
#[derive(Debug)]
pub enum NodeMsg {
    /// Forward to the current poller.
    #[doc(hidden)]
    Poller(PollerMsgBox),
    /// Release the leader lease now (stop sequence); replies when done.
    #[doc(hidden)]
    ReleaseLease(RpcReplyPort<()>),
    /// The node began serving: try for the lease now rather than at the next tick.
    #[doc(hidden)]
    Serving,
}

/// An opaque poller message (the poller's messages are internal).
#[derive(Debug)]
pub struct PollerMsgBox(pub(crate) PollerMsg);

/// The supervisor of a node's actors.
pub struct NodeSupervisor<K: Kv>(std::marker::PhantomData<K>);

/// What the supervisor starts with (opaque): the node's shared context, and the
/// completer's end of the completions channel, which the supervisor hands to the completer
/// it starts.
pub struct SupervisorArgs<K: Kv> {
    shared: Arc<NodeShared<K>>,
    completion_inbox: mpsc::UnboundedReceiver<CompletionRequest>,
}

/// The supervisor's state.
pub struct SupervisorState<K: Kv> {
    shared: Arc<NodeShared<K>>,
    poller: ActorRef<PollerMsg>,
    lease: ActorRef<LeaseMsg>,
    housekeeper: ActorRef<HousekeeperMsg>,
    /// The self-fencing watchdog (shared store only); aborted with this state.
    _watchdog: Option<AbortOnDrop<()>>,
    /// The completer; aborted with this state.
    _completer: AbortOnDrop<()>,
}

impl<K: Kv> Actor for NodeSupervisor<K> {
    type Msg = NodeMsg;
    type State = SupervisorState<K>;
    type Arguments = SupervisorArgs<K>;

    async fn pre_start(
        &self,
        myself: ActorRef<NodeMsg>,
        SupervisorArgs { shared, completion_inbox }: SupervisorArgs<K>,
    ) -> Result<Self::State, ActorProcessingErr> {
        let completer = spawn_completer(shared.clone(), completion_inbox);
        let poller = spawn_poller(&myself, &shared).await?;
        let (lease, _) =
            Actor::spawn_linked(Some(shared.actor_name("lease")), LeaseActor::new(), shared.clone(), myself.get_cell())
                .await?;
        let (housekeeper, _) = Actor::spawn_linked(
            Some(shared.actor_name("housekeeper")),
            HousekeeperActor::new(),
            shared.clone(),
            myself.get_cell(),
        )
        .await?;
        let watchdog = shared.shared_store.then(|| crate::fence::spawn_watchdog(shared.clone()));
        Ok(SupervisorState { shared, poller, lease, housekeeper, _watchdog: watchdog, _completer: completer })
    }

    async fn handle(
        &self,
        _myself: ActorRef<NodeMsg>,
        message: NodeMsg,
        state: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        match message {
            NodeMsg::Poller(PollerMsgBox(message)) => {
                let _ = state.poller.send_message(message);
            }
            NodeMsg::Serving => {
                let _ = state.lease.send_message(LeaseMsg::TickNow);
            }
            NodeMsg::ReleaseLease(reply) => {
                let _ = state.lease.call(LeaseMsg::Release, Some(std::time::Duration::from_secs(30))).await;
                let _ = reply.send(());
            }
        }
        Ok(())
    }

    async fn handle_supervisor_evt(
        &self,
        myself: ActorRef<NodeMsg>,
        event: SupervisionEvent,
        state: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        match event {
            SupervisionEvent::ActorFailed(cell, error) if cell.get_id() == state.poller.get_id() => {
                tracing::error!(%error, "the poller failed; restarting it");
                state.poller = spawn_poller(&myself, &state.shared).await?;
            }
            SupervisionEvent::ActorTerminated(cell, _, _)
                if cell.get_id() == state.poller.get_id() && state.shared.lifecycle() != Lifecycle::Stopped =>
            {
                state.poller = spawn_poller(&myself, &state.shared).await?;
            }
            _ => {}
        }
        Ok(())
    }

    async fn post_stop(&self, _myself: ActorRef<NodeMsg>, state: &mut Self::State) -> Result<(), ActorProcessingErr> {
        state.shared.set_lifecycle(Lifecycle::Stopped);
        // Children stop in sorted order of their names (housekeeper, lease, poller), so a
        // simulation's trace does not depend on ractor's internal ordering.
        state.housekeeper.stop(None);
        state.lease.stop(None);
        state.poller.stop(None);
        Ok(())
    }
}

async fn spawn_poller<K: Kv>(
    supervisor: &ActorRef<NodeMsg>,
    shared: &Arc<NodeShared<K>>,
) -> Result<ActorRef<PollerMsg>, SpawnErr> {
    let name = shared.actor_name("poller");
    let (poller, _) =
        Actor::spawn_linked(Some(name), PollerActor::new(), shared.clone(), supervisor.get_cell()).await?;
    Ok(poller)
}

/// Starts nodes.
#[derive(Debug)]
pub struct Node;

impl Node {
    /// Starts a node's actors — linked under `supervisor` when the host has one (embedding),
    /// standalone otherwise — and returns its handle. The node is `Starting`: call
    /// [`JobScheduler::serve`] when the host is ready.
    ///
    /// # Errors
    /// When the actors cannot be spawned (e.g. a node with this id and prefix already runs
    /// in this process).
    pub async fn start<K: Kv>(
        config: NodeConfig<K>,
        supervisor: Option<ActorCell>,
    ) -> Result<JobScheduler<K>, SpawnErr> {
        let (lifecycle, _) = watch::channel(Lifecycle::Starting);
        let (leader, _) = watch::channel(None);
        let mut entropy = config.entropy;
        let election = match config.election {
            Some(election) => election,
            None => {
                Arc::new(LocalLeaderElection::new(config.clock.clone(), entropy.fork())) as Arc<dyn DynLeaderElection>
            }
        };
        let ids = (RunIdGenerator::new(entropy.fork()), entropy.fork());
        let (completions, completion_inbox) = mpsc::unbounded_channel();
        let shared = Arc::new(NodeShared {
            store: config.store,
            registry: config.registry,
            options: config.options,
            node_id: config.node_id,
            clock: config.clock.clone(),
            start_timer: config.start_timer,
            publisher: config.publisher,
            middleware: config.middleware,
            shared_store: config.shared_store,
            name_prefix: config.name_prefix,
            election,
            lifecycle,
            leader,
            ids: Mutex::new(ids),
            runs: Mutex::new(BTreeMap::new()),
            last_heartbeat: Mutex::new(None),
            stats: EngineStats::default(),
            starts: Arc::new(PendingStarts::new(config.clock.clone())),
            completions,
        });
        let name = shared.actor_name("supervisor");
        let args = SupervisorArgs { shared: shared.clone(), completion_inbox };
        let (node, _) = match supervisor {
            Some(parent) => {
                Actor::spawn_linked(Some(name), NodeSupervisor(std::marker::PhantomData), args, parent).await?
            }
            None => Actor::spawn(Some(name), NodeSupervisor(std::marker::PhantomData), args).await?,
        };
        Ok(JobScheduler::new(shared, node))
    }
}
