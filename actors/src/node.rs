//! A node: how it is built ([`NodeConfig`], [`Node::start`]) and the `NodeSupervisor` that
//! owns its actors. What they share is in `context` ([`NodeShared`], [`Lifecycle`]); the
//! messages they exchange in `messages`.
//!
//! Lifecycle: `Starting` → `Serving` (the host says so) → `Draining` (stop began) →
//! `Stopped`. The poller only acquires while `Serving`; `trigger` is refused outside it.
//!
//! Supervision (written down as the style guide asks): the supervisor owns the poller
//! (which owns the run actors), the lease actor and the housekeeper. If the poller fails
//! (a bug: store errors are handled inside the cycle) the supervisor restarts it at once
//! with a fresh state; the run actors it had started die with it (ractor terminates a
//! dead actor's children, which drops their jobs), and the new poller's first cycles mark
//! their runs lost (`reclaim_previous_runs`), as after a crash. The supervisor itself
//! fails only if it cannot spawn a poller, which its own supervisor (the host's, when
//! embedded) then sees.

use std::sync::Arc;

use parking_lot::Mutex;
use ractor::{Actor, ActorCell, ActorProcessingErr, ActorRef, SpawnErr, SupervisionEvent};
use sundial::entropy::{Entropy, RunIdGenerator};
use sundial::kv::Kv;
use sundial::leader::LocalLeaderElection;
use sundial::options::SchedulerOptions;
use sundial::store::KvJobStore;
use sundial::time::{Clock, Sleeper};
use tokio::sync::{mpsc, watch};

use crate::clock::{PreciseSleeper, TokioSleeper};
use crate::completer::spawn_completer;
use crate::context::{HeartbeatTime, Leadership, RunRegistry};
pub use crate::context::{Lifecycle, NodeShared};
use crate::events::{EventPublisher, NoPublisher};
use crate::execute::{AbortOnDrop, RunMiddleware};
use crate::housekeeper::{HousekeeperActor, HousekeeperMsg};
use crate::lease::DynLeaderElection;
use crate::lease_actor::{LeaseActor, LeaseArgs, LeaseMsg};
use crate::messages::{CompletionRequest, PollerMsg};
pub use crate::messages::{NodeMsg, PollerMsgBox};
use crate::poller::{PollerActor, PollerArgs};
use crate::registry::JobRegistry;
use crate::scheduler::JobScheduler;
use crate::slots::RunSlots;
use crate::starts::PendingStarts;
use crate::stats::EngineStats;

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
    /// How runs acquired ahead of time wait for their exact start time. The default
    /// follows the clock: on the system's real time ([`Clock::is_real_time`], as with
    /// [`SystemClock`](sundial::time::SystemClock)), [`PreciseSleeper`], which starts runs
    /// within microseconds of their instant; on any other clock, [`TokioSleeper`], which
    /// follows tokio's clock (deterministic under a paused runtime) with its 1 ms tick.
    /// At 1,000 fires/s a node timed by tokio's tick started its runs 2.4 ms late at the
    /// median, against 0.7 ms (`cargo bench -p sundial-actors --bench lateness -- --load
    /// 1000`, each way).
    pub start_timer: Arc<dyn Sleeper>,
}

impl<K: Kv> NodeConfig<K> {
    /// A config with no events, no middleware, a store of its own (not shared), an
    /// in-process leader election, prefix `sundial`, and the start timer `clock` calls for
    /// (see [`NodeConfig::start_timer`]).
    pub fn new(
        store: KvJobStore<K>,
        registry: JobRegistry,
        options: SchedulerOptions,
        node_id: impl Into<String>,
        clock: Arc<dyn Clock>,
        entropy: Entropy,
    ) -> Self {
        let start_timer: Arc<dyn Sleeper> =
            if clock.is_real_time() { Arc::new(PreciseSleeper::new()) } else { Arc::new(TokioSleeper) };
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
            start_timer,
        }
    }
}

/// The supervisor of a node's actors.
pub struct NodeSupervisor<K: Kv>(std::marker::PhantomData<K>);

/// What the supervisor starts with (opaque): the node's shared context, and the
/// completer's end of the completions channel, which the supervisor hands to the completer
/// it starts.
pub struct SupervisorArgs<K: Kv> {
    shared: Arc<NodeShared<K>>,
    /// The node's lifecycle, which only the supervisor moves.
    lifecycle: watch::Sender<Lifecycle>,
    /// The node's leadership, handed to the lease actor, which alone moves it.
    leader: watch::Sender<Option<Leadership>>,
    /// When the last heartbeat committed: handed to each poller, which alone moves it.
    heartbeat: HeartbeatTime,
    completion_inbox: mpsc::UnboundedReceiver<CompletionRequest>,
    /// The first poller's run ids.
    run_ids: RunIdGenerator,
    /// Where a restarted poller's run ids come from.
    entropy: Entropy,
}

/// The supervisor's state.
pub struct SupervisorState<K: Kv> {
    shared: Arc<NodeShared<K>>,
    lifecycle: watch::Sender<Lifecycle>,
    heartbeat: HeartbeatTime,
    /// Where a restarted poller's run ids come from.
    entropy: Entropy,
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
        SupervisorArgs { shared, lifecycle, leader, heartbeat, completion_inbox, run_ids, entropy }: SupervisorArgs<K>,
    ) -> Result<Self::State, ActorProcessingErr> {
        let completer = spawn_completer(shared.clone(), completion_inbox);
        let poller = spawn_poller(&myself, &shared, &heartbeat, run_ids).await?;
        let lease_args = LeaseArgs { shared: shared.clone(), leader };
        let (lease, _) =
            Actor::spawn_linked(Some(shared.actor_name("lease")), LeaseActor::new(), lease_args, myself.get_cell())
                .await?;
        let (housekeeper, _) = Actor::spawn_linked(
            Some(shared.actor_name("housekeeper")),
            HousekeeperActor::new(),
            shared.clone(),
            myself.get_cell(),
        )
        .await?;
        let watchdog = shared.shared_store.then(|| crate::fence::spawn_watchdog(shared.clone()));
        Ok(SupervisorState {
            shared,
            lifecycle,
            heartbeat,
            entropy,
            poller,
            lease,
            housekeeper,
            _watchdog: watchdog,
            _completer: completer,
        })
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
                if *state.lifecycle.borrow() == Lifecycle::Starting {
                    state.lifecycle.send_replace(Lifecycle::Serving);
                    let _ = state.lease.send_message(LeaseMsg::TickNow);
                }
            }
            NodeMsg::Draining(reply) => {
                if *state.lifecycle.borrow() != Lifecycle::Stopped {
                    state.lifecycle.send_replace(Lifecycle::Draining);
                }
                let _ = reply.send(());
            }
            NodeMsg::Stopped(reply) => {
                state.lifecycle.send_replace(Lifecycle::Stopped);
                let _ = reply.send(());
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
                let run_ids = RunIdGenerator::new(state.entropy.fork());
                state.poller = spawn_poller(&myself, &state.shared, &state.heartbeat, run_ids).await?;
            }
            SupervisionEvent::ActorTerminated(cell, _, _)
                if cell.get_id() == state.poller.get_id() && *state.lifecycle.borrow() != Lifecycle::Stopped =>
            {
                let run_ids = RunIdGenerator::new(state.entropy.fork());
                state.poller = spawn_poller(&myself, &state.shared, &state.heartbeat, run_ids).await?;
            }
            _ => {}
        }
        Ok(())
    }

    async fn post_stop(&self, _myself: ActorRef<NodeMsg>, state: &mut Self::State) -> Result<(), ActorProcessingErr> {
        state.lifecycle.send_replace(Lifecycle::Stopped);
        // Children stop in sorted order of their names (housekeeper, lease, poller), so a
        // simulation's trace does not depend on ractor's internal ordering, each before
        // the next: when the supervisor is gone, so are they and their names, and a node
        // of the same id can start in the same process.
        let _ = state.housekeeper.stop_and_wait(None, Some(CHILD_STOP_TIMEOUT)).await;
        let _ = state.lease.stop_and_wait(None, Some(CHILD_STOP_TIMEOUT)).await;
        let _ = state.poller.stop_and_wait(None, Some(CHILD_STOP_TIMEOUT)).await;
        Ok(())
    }
}

/// How long the supervisor waits for each child to stop (one busy in a store call that
/// retries); past it the child is left to ractor, which ends it with its supervisor.
const CHILD_STOP_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

async fn spawn_poller<K: Kv>(
    supervisor: &ActorRef<NodeMsg>,
    shared: &Arc<NodeShared<K>>,
    heartbeat: &HeartbeatTime,
    run_ids: RunIdGenerator,
) -> Result<ActorRef<PollerMsg>, SpawnErr> {
    let name = shared.actor_name("poller");
    let args = PollerArgs { shared: shared.clone(), heartbeat: heartbeat.clone(), run_ids };
    let (poller, _) = Actor::spawn_linked(Some(name), PollerActor::new(), args, supervisor.get_cell()).await?;
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
        let lifecycle = watch::Sender::new(Lifecycle::Starting);
        let leader = watch::Sender::new(None);
        let (heartbeat, heartbeat_reader) = HeartbeatTime::new();
        let mut entropy = config.entropy;
        let election = match config.election {
            Some(election) => election,
            None => {
                Arc::new(LocalLeaderElection::new(config.clock.clone(), entropy.fork())) as Arc<dyn DynLeaderElection>
            }
        };
        let run_ids = RunIdGenerator::new(entropy.fork());
        let event_ids = entropy.fork();
        let (completions, completion_inbox) = mpsc::unbounded_channel();
        let run_slots = RunSlots::new(config.options.max_concurrent_runs, config.clock.clone());
        let shared = Arc::new(NodeShared {
            store: config.store,
            registry: config.registry,
            options: config.options,
            node_id: config.node_id.into(),
            clock: config.clock.clone(),
            start_timer: config.start_timer,
            publisher: config.publisher,
            middleware: config.middleware,
            shared_store: config.shared_store,
            name_prefix: config.name_prefix,
            election,
            lifecycle: lifecycle.subscribe(),
            leader: leader.subscribe(),
            heartbeat: heartbeat_reader,
            event_ids: Mutex::new(event_ids),
            runs: RunRegistry::default(),
            stats: EngineStats::default(),
            starts: Arc::new(PendingStarts::new(config.clock.clone())),
            run_slots,
            completions,
        });
        let name = shared.actor_name("supervisor");
        let args =
            SupervisorArgs { shared: shared.clone(), lifecycle, leader, heartbeat, completion_inbox, run_ids, entropy };
        let (node, _) = match supervisor {
            Some(parent) => {
                Actor::spawn_linked(Some(name), NodeSupervisor(std::marker::PhantomData), args, parent).await?
            }
            None => Actor::spawn(Some(name), NodeSupervisor(std::marker::PhantomData), args).await?,
        };
        Ok(JobScheduler::new(shared, node))
    }
}

#[cfg(test)]
mod tests {
    use sundial::kv::memory::{MemoryKv, MemoryKvOptions};
    use sundial::store::StoreOptions;
    use sundial::time::{ManualClock, SystemClock};

    use super::*;

    fn config_on(clock: Arc<dyn Clock>) -> NodeConfig<MemoryKv> {
        let registry = JobRegistry::builder().build().unwrap();
        let kv = MemoryKv::with_options(clock.clone(), Arc::new(TokioSleeper), MemoryKvOptions::default());
        let store = KvJobStore::new(kv, registry.calendars().clone(), Entropy::from_seed(1), StoreOptions::default());
        NodeConfig::new(store, registry, SchedulerOptions::default(), "node", clock, Entropy::from_seed(2))
    }

    /// On the system's clock runs start on the precise timer; on a clock a test or a
    /// simulation moves, on tokio's, which a paused runtime drives.
    #[test]
    fn the_default_start_timer_follows_the_clock() {
        let on_system = config_on(Arc::new(SystemClock::new()));
        assert!(format!("{:?}", on_system.start_timer).starts_with("PreciseSleeper"), "{:?}", on_system.start_timer);
        let wall = chrono::DateTime::from_timestamp(1_800_000_000, 0).unwrap();
        let on_manual = config_on(Arc::new(ManualClock::new(wall)));
        assert!(format!("{:?}", on_manual.start_timer).starts_with("TokioSleeper"), "{:?}", on_manual.start_timer);
    }
}
