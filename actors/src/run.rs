//! `RunActor`: one per run. Runs the job on its own task, from its start to its end: when
//! the job ends it records the completion in the store — holding it and retrying while the
//! store is unavailable, so nothing a run produced is dropped — then publishes the end
//! event, answers a waiting `trigger` caller, and stops (its termination tells the poller,
//! its supervisor, that the run's slot is free).
//!
//! The whole run is the actor's `post_start`, so a run is one task, not an actor idling
//! beside a task of its job. It takes no messages: cancel requests, timeouts and the node's
//! stop reach the job through the run's token ([`RunCancel`], in the node's registry of
//! runs), and a run abandoned at the node's stop is killed, which drops its job.

use std::sync::{Arc, OnceLock};

use chrono::{DateTime, Utc};

use futures_util::future::BoxFuture;
use ractor::{Actor, ActorProcessingErr, ActorRef};
use sundial::job::RunState;
use sundial::kv::Kv;
use sundial::store::{AcquiredRun, Completion, RunOutcome};
use sundial::time::Clock;
use tokio::sync::oneshot;

use crate::context::NodeShared;
use crate::events::{CloudEvent, RunFacts, Topic};
use crate::execute::{prepare, CancelReason, RunCancel, RunGates, StartHook};
use crate::job::RunContext;
use crate::messages::PollerMsg;

/// A run actor takes no messages (see the module's documentation).
#[derive(Debug)]
pub(crate) enum RunMsg {}

/// What a run starts with.
pub(crate) struct RunArgs<K: Kv> {
    pub(crate) shared: Arc<NodeShared<K>>,
    pub(crate) acquired: AcquiredRun,
    pub(crate) poller: ActorRef<PollerMsg>,
    /// A `trigger` caller waiting for this (first) attempt's outcome.
    pub(crate) reply: Option<oneshot::Sender<RunOutcome>>,
    /// A local job's run: its retries happen in process, so the poller needs its end.
    pub(crate) local: bool,
}

/// A run actor's state: the run, until `post_start` ends it. Ractor hands an ended
/// actor's state to its supervisor, the poller, which every fire waits for: the run is
/// dropped on its own task instead, once it ended or was killed.
pub(crate) struct RunState_<K: Kv>(Option<Run<K>>);

/// A registered run: dropping it takes the run out of the node's registry.
struct Run<K: Kv> {
    args: RunArgs<K>,
    cancel: RunCancel,
}

impl<K: Kv> Drop for Run<K> {
    fn drop(&mut self) {
        // After its completion, or when killed before its job ended (abandoned at node stop).
        self.args.shared.runs.unregister(self.args.acquired.run.id);
    }
}

/// The run actor (stateless; everything is in its state).
pub(crate) struct RunActor<K: Kv>(std::marker::PhantomData<K>);

impl<K: Kv> RunActor<K> {
    pub(crate) fn new() -> Self {
        Self(std::marker::PhantomData)
    }
}

impl<K: Kv> Actor for RunActor<K> {
    type Msg = RunMsg;
    type State = RunState_<K>;
    type Arguments = RunArgs<K>;

    /// Registers the run (so `cancel_runs` finds it at once) and nothing else: the poller
    /// that spawns run actors waits for this, one run after another, so the job's
    /// preparation is left to `post_start`, on the run actor's own task.
    async fn pre_start(&self, _myself: ActorRef<RunMsg>, args: RunArgs<K>) -> Result<Self::State, ActorProcessingErr> {
        let cancel = RunCancel::new();
        args.shared.runs.register(args.acquired.run.id, cancel.clone());
        Ok(RunState_(Some(Run { args, cancel })))
    }

    /// The whole run: waits for its instant, runs the job, records its end, and stops.
    async fn post_start(&self, myself: ActorRef<RunMsg>, state: &mut Self::State) -> Result<(), ActorProcessingErr> {
        // The run stays in the state while it runs rather than moving into this future,
        // which ractor boxes: the box then holds only the run's steps (1.5 KiB, not 2).
        if let Some(run) = state.0.as_mut() {
            let (outcome, started_at) = run_job(run).await;
            finish(&mut run.args, outcome, started_at).await;
        }
        state.0 = None;
        // The poller frees the run's slot when it learns this actor terminated.
        myself.stop(None);
        Ok(())
    }

    async fn handle(
        &self,
        _: ActorRef<RunMsg>,
        message: RunMsg,
        _: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        match message {}
    }
}

/// Prepares the job, waits for the run's instant, and runs it; returns its outcome and
/// when it started (its scheduled instant, when it was acquired ahead).
async fn run_job<K: Kv>(Run { args, cancel }: &Run<K>) -> (RunOutcome, DateTime<Utc>) {
    let shared = &args.shared;
    let run = &args.acquired.run;
    let ctx = RunContext {
        run: run.clone(),
        node: shared.node_id.clone(),
        cancel: cancel.token(),
        secrets: Default::default(),
    };
    let timeout = args.acquired.timeout;
    let job = shared.registry.make(&args.acquired.job_type);
    // Acquired ahead of time: the run waits for the scheduled instant (and its job never
    // starts when canceled meanwhile). A node whose heartbeat is stale may already be
    // declared lost, its runs given to others: it starts nothing.
    if shared.shared_store && crate::fence::heartbeat_is_stale(shared) {
        cancel.cancel(CancelReason::Fenced);
    }
    // Armed until the gate opens (just before the job starts), or the run is dropped.
    let armed = shared.starts.arm(run.scheduled_at);
    // The job's end is reported once the runs due with it have started.
    let end = armed.instant().settled();
    let early = (run.scheduled_at - shared.clock.now()).to_std().unwrap_or_default();
    let wait = (!early.is_zero()).then(|| (shared.start_timer.sleep(early), cancel.token()));
    // The gates are the run's own future types, not boxed: they live in the run's task.
    let gate = async move {
        if let Some((sleep, token)) = wait {
            tokio::select! {
                biased;
                () = sleep => {}
                () = token.cancelled() => {}
            }
        }
        drop(armed);
    };
    // The start time only goes into events: without a publisher nothing reads the clock,
    // keeps a start time or does anything else when the job starts.
    let started_at = shared.publisher.is_enabled().then(Arc::<OnceLock<DateTime<Utc>>>::default);
    let on_start = started_at.clone().map(|started_at| {
        let (shared, run) = (shared.clone(), run.clone());
        Box::new(move || -> BoxFuture<'static, ()> {
            let at = shared.clock.now();
            let _ = started_at.set(at);
            Box::pin(async move { publish_started(&shared, &run, at).await })
        }) as StartHook
    });
    let gates = RunGates { start: gate, slots: Some(shared.run_slots.clone()), end, on_start };
    let outcome = match job {
        Some(job) => prepare(job, ctx, cancel.clone(), shared.middleware.clone(), gates, timeout).await,
        // The store only hands out runs of registered types, but a type can vanish between
        // acquisition and start only through a bug: fail the run loudly.
        None => {
            let at = shared.clock.now();
            publish_started(shared, run, at).await;
            let outcome = RunOutcome::Failed {
                code: Some(sundial::error::ErrorCode::JobTypeNotFound.as_str().to_owned()),
                message: "job type not registered on this node".into(),
            };
            return (outcome, at);
        }
    };
    let started_at = started_at.and_then(|at| at.get().copied());
    (outcome, started_at.unwrap_or_else(|| shared.clock.now()))
}

/// Records the run's end (after the other runs due at its instant have started: the run
/// waited for them, its end gate), tells the poller what it needs to know, publishes the
/// end event and answers a waiting `trigger` caller.
async fn finish<K: Kv>(args: &mut RunArgs<K>, outcome: RunOutcome, started_at: DateTime<Utc>) {
    let shared = &args.shared;
    let run = &args.acquired.run;
    let finished_at = shared.clock.now();
    let completion = Completion {
        run_id: run.id,
        node: shared.node_id.clone(),
        outcome: outcome.clone(),
        finished_at,
        holds_trigger: args.acquired.holds_trigger,
    };
    let recorded = crate::completer::complete(shared, completion).await;
    let stored_state = recorded.state;
    if let Some(due) = recorded.next_due {
        // A fire this end made due (a blocked one, the interval's next, a retry) may be
        // sooner than the poller's next cycle.
        let _ = args.poller.send_message(PollerMsg::DueAt(due));
    }
    let (error_code, error_message) = match &outcome {
        RunOutcome::Succeeded => (None, None),
        RunOutcome::Failed { code, message } => (code.clone(), Some(message.clone())),
        RunOutcome::Canceled { message } => (None, Some(message.clone())),
    };
    let facts = RunFacts {
        state: Some(stored_state),
        started_at: Some(started_at),
        finished_at: Some(finished_at),
        error_code,
        error_message,
    };
    shared
        .publish(|id| CloudEvent::for_run(Topic::of_end(stored_state), id, finished_at, run, facts, &shared.node_id))
        .await;
    if let Some(reply) = args.reply.take() {
        let _ = reply.send(outcome);
    }
    if args.local {
        let failed = stored_state == RunState::Failed;
        let _ = args.poller.send_message(PollerMsg::LocalRunFinished(run.clone(), failed));
    }
}

/// Publishes `scheduling.run.started`.
async fn publish_started<K: Kv>(
    shared: &NodeShared<K>,
    run: &sundial::job::JobRun,
    started_at: chrono::DateTime<chrono::Utc>,
) {
    let facts = RunFacts { state: Some(RunState::Running), started_at: Some(started_at), ..RunFacts::default() };
    shared.publish(|id| CloudEvent::for_run(Topic::RunStarted, id, started_at, run, facts, &shared.node_id)).await;
}
