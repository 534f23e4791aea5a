//! `PollerActor`: the engine cycle of SPEC §10 on one node, a shell around
//! [`sundial::poller::Poller`], which decides what each cycle does and how long the node
//! sleeps after it (its module docs list the steps). This actor does what it decides:
//! store calls, starting a [`crate::run`] actor per run, the wake-key watch, timers; and
//! it keeps what only it can hold: the run actors running here and the node's local
//! triggers ([`sundial::local::LocalTriggers`]).

mod cycle;
mod local;
mod runs;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use ractor::{Actor, ActorId, ActorProcessingErr, ActorRef, SupervisionEvent};
use sundial::entropy::RunIdGenerator;
use sundial::kv::Kv;
use sundial::local::LocalTriggers;
use sundial::poller::Poller;
use sundial::time::{Clock, MonotonicInstant};
use uuid::Uuid;

use crate::context::{HeartbeatTime, NodeShared};
use crate::execute::AbortOnDrop;
use crate::messages::PollerMsg;
use crate::run::RunMsg;
use crate::ticker::Ticker;
use cycle::{cycle, watch_wake};
use runs::{run_ended, trigger};

pub(crate) struct PollerState<K: Kv> {
    shared: Arc<NodeShared<K>>,
    /// When the node's last heartbeat committed (the self-fencing watchdog reads it).
    heartbeat: HeartbeatTime,
    /// The actor of each run running here. A run actor takes no messages: runs are
    /// canceled through the node's registry of their cancellations.
    running: BTreeMap<Uuid, ActorRef<RunMsg>>,
    /// The run each running run actor runs: its end (the actor's termination, which
    /// reaches this supervisor anyway) means the node no longer holds the run.
    run_of_actor: BTreeMap<ActorId, Uuid>,
    /// The cycle's decisions and what they remember.
    poller: Poller,
    tick: u64,
    /// When the planned cycle (tick `tick`) comes.
    wake_at: MonotonicInstant,
    /// This node's local triggers and in-process retries.
    local: LocalTriggers,
    /// The ids of the runs this poller records itself (local fires, their retries, manual
    /// triggers); the store's acquisitions make their own.
    run_ids: RunIdGenerator,
    /// The armed watch on this node's wake key (shared store, while serving): another
    /// node that gives this node's home shards new due work wakes it, instead of leaving
    /// the fire for its next poll. Dropping it cancels the watch.
    wake_watch: Option<AbortOnDrop<()>>,
    /// The timer of the next planned cycle.
    ticker: Ticker,
    /// The registered job types (fixed once the node is built): acquisition takes only
    /// fires of types this node can run.
    known_types: BTreeSet<String>,
}

/// What a poller starts with: the node's context, and its own run-id stream (a restarted
/// poller gets a fresh one from the supervisor).
pub(crate) struct PollerArgs<K: Kv> {
    pub(crate) shared: Arc<NodeShared<K>>,
    /// When the node's last heartbeat committed: the poller writes it, and a restarted
    /// poller goes on from its predecessor's.
    pub(crate) heartbeat: HeartbeatTime,
    pub(crate) run_ids: RunIdGenerator,
}

/// The poller.
pub(crate) struct PollerActor<K: Kv>(std::marker::PhantomData<K>);

impl<K: Kv> PollerActor<K> {
    pub(crate) fn new() -> Self {
        Self(std::marker::PhantomData)
    }
}

impl<K: Kv> Actor for PollerActor<K> {
    type Msg = PollerMsg;
    type State = PollerState<K>;
    type Arguments = PollerArgs<K>;

    async fn pre_start(
        &self,
        myself: ActorRef<PollerMsg>,
        PollerArgs { shared, heartbeat, run_ids }: PollerArgs<K>,
    ) -> Result<Self::State, ActorProcessingErr> {
        let _ = myself.send_message(PollerMsg::Tick(0));
        let known_types = shared.registry.type_keys().map(str::to_owned).collect();
        Ok(PollerState {
            poller: Poller::new(shared.options.acquire_batch_size),
            shared,
            heartbeat,
            known_types,
            running: BTreeMap::new(),
            run_of_actor: BTreeMap::new(),
            tick: 0,
            wake_at: MonotonicInstant::from_origin(Duration::ZERO),
            local: LocalTriggers::new(),
            run_ids,
            wake_watch: None,
            ticker: Ticker::spawn(move |tick| {
                let _ = myself.send_message(PollerMsg::Tick(tick));
            }),
        })
    }

    async fn handle(
        &self,
        myself: ActorRef<PollerMsg>,
        message: PollerMsg,
        state: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        match message {
            PollerMsg::Tick(tick) if tick == state.tick => {
                state.poller.cycle_began();
                // Armed before the cycle reads the due index: every change after that
                // read fires it (see `KnownDue`).
                watch_wake(&myself, state).await;
                let wait = cycle(&myself, state).await;
                tick_in(&myself, state, wait);
            }
            PollerMsg::Woken(fired) => {
                state.wake_watch = None;
                state.poller.forget_due();
                if fired {
                    tick_in(&myself, state, Duration::ZERO);
                }
            }
            PollerMsg::Tick(_) => {}
            PollerMsg::Wake => {
                state.poller.local_change();
                tick_in(&myself, state, Duration::ZERO);
            }
            PollerMsg::DueAt(due) => {
                // The run's end wrote it to the due index: no wake key tells this node.
                let wait = state.poller.wait_for_due(due, state.shared.clock.now());
                if state.shared.clock.monotonic().saturating_add(wait) < state.wake_at {
                    tick_in(&myself, state, wait);
                }
            }
            PollerMsg::LocalRunFinished(run, failed) => {
                let shared = state.shared.clone();
                let now = shared.clock.now();
                let run_ids = &mut state.run_ids;
                let retry = state.local.handle_run_finished(&run, now, failed, shared.registry.calendars(), || {
                    run_ids.next_id(shared.clock.now())
                });
                if retry.is_some() || state.local.poll_timeout().is_some() {
                    // The next local fire may now be sooner than the current sleep.
                    tick_in(&myself, state, Duration::ZERO);
                }
            }
            PollerMsg::Trigger(job, data, reply) => {
                let result = trigger(&myself, state, &job, &data).await;
                let _ = reply.send(result);
            }
            PollerMsg::CancelLocal(ids, reason, reply) => {
                let mut canceled = Vec::new();
                for id in ids {
                    if state.running.contains_key(&id) {
                        state.shared.runs.cancel(id, reason);
                        canceled.push(id);
                    }
                }
                let _ = reply.send(canceled);
            }
            PollerMsg::RunningCount(reply) => {
                let _ = reply.send(state.running.len());
            }
            PollerMsg::CancelAll(reason, reply) => {
                state.shared.runs.cancel_all(reason);
                let _ = reply.send(state.running.len());
            }
        }
        Ok(())
    }

    async fn post_stop(&self, _myself: ActorRef<PollerMsg>, state: &mut Self::State) -> Result<(), ActorProcessingErr> {
        // Runs are killed in run-id order (deterministic); they were canceled and waited
        // for by the stop sequence, so only abandoned ones remain, and killing one drops its
        // job (a run actor is busy with its job until it ends, so a stop would wait for it).
        for run in state.running.values() {
            run.kill();
        }
        Ok(())
    }

    async fn handle_supervisor_evt(
        &self,
        myself: ActorRef<PollerMsg>,
        event: SupervisionEvent,
        state: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        // A run actor ends after recording its run's end; one that fails (a bug: job panics
        // are caught inside it) leaves its stored run Running until the node is declared
        // lost or restarts. Either way this node no longer holds it.
        let (cell, failure) = match event {
            SupervisionEvent::ActorTerminated(cell, _, _) => (cell, None),
            SupervisionEvent::ActorFailed(cell, error) => (cell, Some(error)),
            _ => return Ok(()),
        };
        let run = state.run_of_actor.remove(&cell.get_id());
        if let Some(error) = failure {
            match run {
                Some(id) => tracing::error!(run_id = %id, %error, "a run actor failed"),
                None => tracing::error!(%error, "a run actor failed"),
            }
        }
        if let Some(id) = run {
            run_ended(&myself, state, id);
        }
        Ok(())
    }
}

/// Plans the next cycle `wait` from now, replacing the one planned before: the ticker
/// drops a replaced timer, and a replaced tick already sent is ignored when it comes.
fn tick_in<K: Kv>(myself: &ActorRef<PollerMsg>, state: &mut PollerState<K>, wait: Duration) {
    state.tick += 1;
    state.wake_at = state.shared.clock.monotonic().saturating_add(wait);
    let next = state.tick;
    if wait.is_zero() {
        let _ = myself.send_message(PollerMsg::Tick(next));
    } else {
        state.ticker.plan(next, wait);
    }
}
