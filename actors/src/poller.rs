//! `PollerActor`: the engine cycle of SPEC §10 on one node, a shell around
//! [`sundial::poller::Poller`], which decides what each cycle does and how long the node
//! sleeps after it (its module docs list the steps). This actor does what it decides:
//! store calls, starting a [`crate::run`] actor per run, the wake-key watch, timers; and
//! it keeps what only it can hold: the run actors running here and the node's local
//! triggers ([`sundial::local::LocalTriggers`]).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use ractor::{Actor, ActorId, ActorProcessingErr, ActorRef, RpcReplyPort, SupervisionEvent};
use sundial::error::SchedulingError;
use sundial::job::JsonObject;
use sundial::kv::Kv;
use sundial::kv::{AsKvError, KvError};
use sundial::name::JobName;
use sundial::poll::{until_heartbeat, Taken, STEAL_GRACE};
use sundial::poller::{Acquired, AcquisitionPlan, CycleWait, Poller, MAX_LOOKAHEAD, REFILL_DELAY};
use sundial::store::{AcquireRequest, AcquiredRun, Acquisition, DueFilter, RunOutcome, StoreError, SyncOutcome};
use sundial::time::{Clock, MonotonicInstant};
use tokio::sync::oneshot;
use uuid::Uuid;

use sundial::local::LocalTriggers;

use crate::execute::{AbortOnDrop, CancelReason};
use crate::node::{Lifecycle, NodeShared};
use crate::run::{RunActor, RunArgs, RunMsg};
use crate::stats::{EngineWork, StoreOp};
use crate::ticker::Ticker;

/// Messages to the poller.
#[derive(Debug)]
pub(crate) enum PollerMsg {
    /// Run a cycle, if this tick is the current one (older timer ticks are ignored).
    Tick(u64),
    /// Something changed locally: cycle now.
    Wake,
    /// A fire is due at this instant (a run here ended and made it due): cycle a lookahead
    /// before it, if that is sooner than planned.
    DueAt(chrono::DateTime<chrono::Utc>),
    /// A local job's run here ended: the run, and whether it failed (its retries are in
    /// process). Every run's slot is freed when its actor terminates.
    LocalRunFinished(sundial::job::JobRun, bool),
    /// Run `job` now on this node (SPEC §9 `trigger`); replies with a receiver of the first
    /// attempt's outcome.
    Trigger(JobName, JsonObject, RpcReplyPort<Result<oneshot::Receiver<RunOutcome>, SchedulingError>>),
    /// Cancel these runs if they run here; replies with the ones that did.
    CancelLocal(Vec<Uuid>, CancelReason, RpcReplyPort<Vec<Uuid>>),
    /// How many runs are running here.
    RunningCount(RpcReplyPort<usize>),
    /// Cancel every run here; replies with how many there were.
    CancelAll(CancelReason, RpcReplyPort<usize>),
    /// The watch on this node's wake key fired (`true`: new due work in its home shards,
    /// cycle now) or failed (`false`: watch again after the next cycle).
    Woken(bool),
}

pub(crate) struct PollerState<K: Kv> {
    shared: Arc<NodeShared<K>>,
    /// The actor of each run running here. A run actor takes no messages: runs are
    /// canceled through the node's registry of their cancellations.
    running: BTreeMap<Uuid, ActorRef<RunMsg>>,
    /// The run each running run actor runs: its end (the actor's termination, which
    /// reaches this supervisor anyway) frees the run's slot.
    run_of_actor: BTreeMap<ActorId, Uuid>,
    /// The cycle's decisions and what they remember.
    poller: Poller,
    tick: u64,
    /// When the planned cycle (tick `tick`) comes.
    wake_at: MonotonicInstant,
    /// This node's local triggers and in-process retries.
    local: LocalTriggers,
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
    type Arguments = Arc<NodeShared<K>>;

    async fn pre_start(
        &self,
        myself: ActorRef<PollerMsg>,
        shared: Arc<NodeShared<K>>,
    ) -> Result<Self::State, ActorProcessingErr> {
        let _ = myself.send_message(PollerMsg::Tick(0));
        let known_types = shared.registry.type_keys().map(str::to_owned).collect();
        Ok(PollerState {
            poller: Poller::new(shared.options.acquire_batch_size),
            shared,
            known_types,
            running: BTreeMap::new(),
            run_of_actor: BTreeMap::new(),
            tick: 0,
            wake_at: MonotonicInstant::from_origin(Duration::ZERO),
            local: LocalTriggers::new(),
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
                let retry =
                    state.local.handle_run_finished(&run, now, failed, shared.registry.calendars(), || shared.run_id());
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
                        state.shared.cancel_run(id, reason);
                        canceled.push(id);
                    }
                }
                let _ = reply.send(canceled);
            }
            PollerMsg::RunningCount(reply) => {
                let _ = reply.send(state.running.len());
            }
            PollerMsg::CancelAll(reason, reply) => {
                state.shared.cancel_all_runs(reason);
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
        // lost or restarts. Either way its slot is free.
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

/// Arms the watch on this node's wake key if it is not armed (shared store, serving).
/// A failure leaves it for the next cycle: polling finds new work meanwhile.
async fn watch_wake<K: Kv>(myself: &ActorRef<PollerMsg>, state: &mut PollerState<K>) {
    let shared = &state.shared;
    if !shared.shared_store || shared.lifecycle() != Lifecycle::Serving {
        state.wake_watch = None;
        return;
    }
    if state.wake_watch.is_some() {
        return;
    }
    match shared.store.watch_wake(&shared.node_id).await {
        Ok(watch) => {
            let myself = myself.clone();
            state.wake_watch = Some(AbortOnDrop(tokio::spawn(async move {
                let fired = watch.await.is_ok();
                let _ = myself.send_message(PollerMsg::Woken(fired));
            })));
        }
        Err(error) => tracing::debug!(%error, "could not watch the wake key"),
    }
}

/// Writes this node's heartbeat and acts on what it read back (declared lost, cancel
/// requests); returns whether it committed.
async fn heartbeat<K: Kv>(state: &mut PollerState<K>, now: chrono::DateTime<chrono::Utc>) -> bool {
    let shared = state.shared.clone();
    let began = shared.clock.monotonic();
    match shared
        .store
        .heartbeat(&shared.node_id, now, state.poller.times_declared_lost(), state.poller.caught_up())
        .await
    {
        Ok(beat) => {
            shared.heartbeat_committed(began);
            if beat.was_declared_lost {
                // Our runs are Lost already and will run again elsewhere: stop them, as
                // the fence would have.
                tracing::warn!(node = %shared.node_id, "this node was declared lost; canceling its runs");
                shared.cancel_all_runs(CancelReason::Fenced);
                // Their slots are free in the store now, but a job ignoring its
                // cancellation runs on: this node starts no run beside it.
                state.local.note_declared_lost();
            }
            state.poller.heartbeat_committed(beat.times_declared_lost, beat.was_declared_lost);
            // Cancel requests for runs here (read with the heartbeat); a failed heartbeat
            // reads them next cycle (a request stays until its run ends).
            for id in beat.cancel_requests {
                if state.running.contains_key(&id) {
                    shared.cancel_run(id, CancelReason::Requested);
                }
            }
            true
        }
        Err(error) => {
            shared.stats.store_error(StoreOp::Heartbeat);
            tracing::warn!(%error, "heartbeat failed");
            false
        }
    }
}

/// One cycle (see [`sundial::poller`] for its steps); returns how long to sleep before
/// the next.
async fn cycle<K: Kv>(myself: &ActorRef<PollerMsg>, state: &mut PollerState<K>) -> Duration {
    let shared = state.shared.clone();
    let poll_interval = shared.options.poll_interval;
    if shared.lifecycle() != Lifecycle::Serving {
        state.poller.not_serving();
        // Pending local retries are dropped when the node stops (SPEC §8).
        state.local.drop_retries();
        if shared.lifecycle() == Lifecycle::Draining && shared.shared_store && !state.running.is_empty() {
            // Finishing its runs, the node is alive: without heartbeats it would fence
            // itself (canceling them before the stop's deadline) and the leader would
            // declare it lost (running them again elsewhere). It takes no new work.
            heartbeat(state, shared.clock.now()).await;
        }
        return poll_interval;
    }
    let now = shared.clock.now();
    if state.poller.needs_sync() {
        let all = sync_code_jobs(&shared, now).await;
        state.poller.synced(all);
    }
    // Without a recent heartbeat, take no new work, local or not: this node may be about
    // to be declared lost, and runs of a node the cluster never heard from (before its
    // first heartbeat commits, it has no record) would never be reaped. A cycle soon after
    // the last heartbeat (woken for a due fire) relies on it; acquisition checks in its own
    // transaction that the node was not declared lost.
    let alive = !state.poller.needs_heartbeat(shared.shared_store, shared.heartbeat_age(), poll_interval)
        || heartbeat(state, now).await;
    if !state.poller.unadopted().is_empty() {
        let ok = adopt_committed_runs(myself, state).await;
        state.poller.adopted(ok);
    }
    let local_polled = state.poller.polls_local(alive);
    if local_polled {
        run_local(myself, state, now).await;
    }
    if state.poller.needs_reclaim() {
        // Runs of an earlier process with this id, or of this poller before it restarted.
        let done = reclaim_previous_runs(state, now).await;
        state.poller.reclaimed(done);
    }
    let slots = state.poller.slots(shared.shared_store, alive, shared.options.max_concurrent_runs, state.running.len());
    let taken = if slots > 0 { acquire_and_start(myself, state, now, slots).await } else { state.poller.no_slots() };
    state.poller.cycle_ended(now, taken, !state.local.busy_jobs().is_empty());
    if let Taken::Full = taken {
        return Duration::ZERO;
    }
    let read = match state.poller.outlook_to_read(taken) {
        Some(limit) => {
            let busy_jobs = state.local.held_jobs();
            let filter = DueFilter { scheduled: takes_scheduled(&shared), busy_jobs: &busy_jobs };
            Some(shared.store.due_outlook(&shared.node_id, filter, MAX_LOOKAHEAD, limit).await.map_err(|_| ()))
        }
        None => None,
    };
    let wait = state.poller.wait_after(CycleWait {
        now: shared.clock.now(),
        ran_at: now,
        poll_interval,
        local_due: state.local.poll_timeout(),
        local_polled,
        taken,
        read,
    });
    // Only a shared store's node heartbeats: `None` for the others.
    match until_heartbeat(shared.heartbeat_age(), poll_interval) {
        Some(heartbeat) => wait.min(heartbeat),
        None => wait,
    }
}

/// Acquires up to `slots` (at least one) due fires at `now` and starts their runs.
async fn acquire_and_start<K: Kv>(
    myself: &ActorRef<PollerMsg>,
    state: &mut PollerState<K>,
    now: chrono::DateTime<chrono::Utc>,
    slots: usize,
) -> Taken {
    let shared = state.shared.clone();
    let busy_jobs = state.local.held_jobs();
    // Whether the watch on the wake key was armed before this acquisition reads.
    let watched = !shared.shared_store || state.wake_watch.is_some();
    let plan = match state.poller.plan_acquisition(
        now,
        shared.clock.monotonic(),
        busy_jobs,
        takes_scheduled(&shared),
        watched,
    ) {
        AcquisitionPlan::Skip(outlook) => {
            shared.stats.acquisition_skipped();
            return Taken::Done(Some(outlook));
        }
        AcquisitionPlan::Acquire(plan) => plan,
    };
    let request = AcquireRequest {
        node: &shared.node_id,
        now,
        max: slots,
        misfire_threshold: shared.options.misfire_threshold,
        steal_grace: STEAL_GRACE,
        lookahead: plan.lookahead,
        known_types: Some(&state.known_types),
        known_runs: &state.running,
        scheduled: plan.scheduled,
        busy_jobs: &plan.busy_jobs,
        steal: plan.steal,
        trust_caught_up: plan.trust_caught_up,
        known_heads: plan.known_heads.as_ref(),
    };
    let acquiring = shared.clock.monotonic();
    let acquisition = shared.store.acquire_with_outlook(&request, MAX_LOOKAHEAD, plan.outlook_limit).await;
    let starting = shared.clock.monotonic();
    shared.stats.spent(EngineWork::Acquire, acquiring, starting);
    match acquisition {
        Ok(Acquisition { runs, outlook, more, stolen, rota, heads }) => {
            shared.stats.acquisition(runs.len(), stolen);
            if plan.steal && rota.is_some() {
                shared.stats.steal_read();
            }
            let acquired = Acquired { runs: runs.len(), outlook, more, stolen, rota, heads };
            for run in runs {
                start_run(myself, state, run, None, false).await;
            }
            let started = shared.clock.monotonic();
            shared.stats.spent(EngineWork::StartRun, starting, started);
            state.poller.acquired(plan, acquired, slots, started)
        }
        Err(error) => {
            shared.stats.store_error(StoreOp::Acquire);
            let too_big = error
                .as_kv_error()
                .is_some_and(|e| [KvError::TRANSACTION_TOO_OLD, KvError::TRANSACTION_TOO_LARGE].contains(&e.code()));
            let taken = state.poller.acquire_failed(plan, now, too_big);
            tracing::warn!(%error, batch = state.poller.batch(), "acquisition failed");
            taken
        }
    }
}

/// Whether this node takes scheduled triggers' fires now: with a store of its own, only
/// the leader does (SPEC §10); the others take one-shots only.
fn takes_scheduled<K: Kv>(shared: &NodeShared<K>) -> bool {
    shared.shared_store || shared.leader().is_some()
}

/// Refreshes local jobs when due, and starts this node's due local fires and retries.
async fn run_local<K: Kv>(
    myself: &ActorRef<PollerMsg>,
    state: &mut PollerState<K>,
    now: chrono::DateTime<chrono::Utc>,
) {
    let shared = state.shared.clone();
    if let Some(stamp) = state.poller.local_refresh() {
        match shared.store.local_jobs_since(stamp).await {
            Ok(listing) => {
                let stamp = listing.as_ref().map(|listing| listing.stamp);
                if let Some(listing) = listing {
                    let jobs: Vec<_> = listing
                        .jobs
                        .into_iter()
                        .filter(|j| shared.registry.has_type(j.definition.job_type.as_str()))
                        .collect();
                    for (job, trigger, calendar) in state.local.refresh(jobs, now, shared.registry.calendars()) {
                        tracing::warn!(
                            %job, %trigger, %calendar,
                            "local trigger names a calendar not registered on this node: it does not fire here"
                        );
                    }
                }
                state.poller.local_refreshed(stamp);
            }
            Err(error) => {
                shared.stats.store_error(StoreOp::LocalJobs);
                tracing::warn!(%error, "reading local jobs failed");
            }
        }
    }
    let fires =
        state.local.poll_due(now, shared.options.misfire_threshold, shared.registry.calendars(), || shared.run_id());
    for fire in fires {
        match shared.store.begin_local_run(&fire.run, &shared.node_id, now).await {
            Ok(true) => {}
            Ok(false) => {
                // Deleted or made cluster-unique elsewhere since the last refresh (a
                // cluster run of it may start any moment), or this run, recorded by an
                // attempt reported failed, was since reclaimed as lost: not run. Re-read
                // the local jobs.
                tracing::info!(run_id = %fire.run.id, job = %fire.run.job, "the job is no longer local here, or the run ended; not running it");
                state.local.not_started(fire, now, None, shared.registry.calendars());
                state.poller.local_refused();
                continue;
            }
            Err(error) => {
                // Not recorded, so not run, as a cluster fire is not taken while the store
                // is out of reach: the run would be missing from history, and a switch of
                // a non-concurrent job to cluster-unique would not see it running. The
                // fire is skipped; a retry goes again a poll interval later (same run: a
                // record an ambiguous commit made is found then). A skipped fire that an
                // ambiguous commit recorded all the same is marked lost by the next
                // reclaim, as no actor runs it.
                shared.stats.store_error(StoreOp::LocalJobs);
                tracing::warn!(run_id = %fire.run.id, %error, "could not record a local run; not running it");
                let again = Some(shared.options.poll_interval);
                state.local.not_started(fire, now, again, shared.registry.calendars());
                state.poller.run_may_be_orphaned();
                continue;
            }
        }
        let acquired = AcquiredRun {
            run: fire.run,
            job_type: fire.job_type,
            timeout: fire.timeout,
            exclusive: false,
            holds_trigger: None,
        };
        start_run(myself, state, acquired, None, true).await;
    }
}

/// Starts the runs that failed acquisitions committed after all (see
/// `KvJobStore::adopt_committed_runs`); on a store error, tries again next cycle (and
/// reclaims nothing meanwhile, which would mark those runs lost); true when they were
/// looked for.
async fn adopt_committed_runs<K: Kv>(myself: &ActorRef<PollerMsg>, state: &mut PollerState<K>) -> bool {
    let shared = state.shared.clone();
    let known: BTreeSet<Uuid> = state.running.keys().copied().collect();
    match shared.store.adopt_committed_runs(&shared.node_id, &known, state.poller.unadopted()).await {
        Ok(runs) => {
            if !runs.is_empty() {
                tracing::warn!(runs = runs.len(), "an acquisition reported as failed had taken runs; starting them");
            }
            for run in runs {
                start_run(myself, state, run, None, false).await;
            }
            true
        }
        Err(error) => {
            shared.stats.store_error(StoreOp::Reclaim);
            tracing::warn!(%error, "adopting the runs of a failed acquisition failed; retrying next cycle");
            false
        }
    }
}

/// Marks lost the runs an earlier process with this node id left `Running` (it crashed
/// and this one restarted under the same id, so the leader never saw the node go
/// silent), or that this node's poller had before it was restarted (its run actors died
/// with it), or that a failed acquisition left and adoption did not claim; true when
/// none are left.
async fn reclaim_previous_runs<K: Kv>(state: &PollerState<K>, now: chrono::DateTime<chrono::Utc>) -> bool {
    let shared = &state.shared;
    let known: BTreeSet<Uuid> = state.running.keys().copied().collect();
    loop {
        match shared.store.reclaim_previous_runs(&shared.node_id, &known, now, 64).await {
            Ok(result) => {
                if !result.lost_runs.is_empty() {
                    tracing::warn!(
                        node = %shared.node_id,
                        runs = result.lost_runs.len(),
                        "an earlier process of this node left runs behind; marked them lost"
                    );
                }
                if !result.more {
                    return true;
                }
            }
            Err(error) => {
                shared.stats.store_error(StoreOp::Reclaim);
                tracing::warn!(%error, "reclaiming an earlier process's runs failed; retrying next cycle");
                return false;
            }
        }
    }
}

/// Writes every code job; true when all were written.
async fn sync_code_jobs<K: Kv>(shared: &NodeShared<K>, now: chrono::DateTime<chrono::Utc>) -> bool {
    let defs: Vec<&sundial::job::JobDefinition> = shared.registry.code_jobs().collect();
    let outcomes = match shared.store.sync_code_jobs(&defs, now).await {
        Ok(outcomes) => outcomes,
        Err(error) => {
            shared.stats.store_error(StoreOp::SyncCodeJobs);
            tracing::warn!(%error, "writing the code jobs failed; retrying next cycle");
            return false;
        }
    };
    let mut all = true;
    for (def, outcome) in defs.iter().zip(outcomes) {
        match outcome {
            Ok(SyncOutcome::Rewritten { overwrote_runtime_change: true }) => {
                tracing::warn!(job = %def.name, "the code definition changed: a runtime change to this job was overwritten");
            }
            Ok(_) => {}
            Err(error) => {
                shared.stats.store_error(StoreOp::SyncCodeJobs);
                tracing::warn!(job = %def.name, %error, "writing the code job failed; retrying next cycle");
                all = false;
            }
        }
    }
    if all {
        // Until this line, the API may not show the code jobs yet (SPEC §10 step 2).
        tracing::info!(jobs = defs.len(), "code jobs written to the store");
    }
    all
}

/// A run here ended (its actor terminated): frees its slot, and soon fills a node that
/// was full.
fn run_ended<K: Kv>(myself: &ActorRef<PollerMsg>, state: &mut PollerState<K>, id: Uuid) {
    let was_full = state.running.len() >= state.shared.options.max_concurrent_runs as usize;
    state.running.remove(&id);
    // The job whose slot this run held here: the last acquisition may have left its fires
    // waiting (`held_jobs`), to take now that its end is recorded.
    let job_waiting = state.local.holds_back(id).is_some_and(|job| state.poller.left_waiting(job.as_str()));
    // A local job's fire, or a fire in the store of a job this run kept busy here after
    // this node was declared lost, may have waited for this run.
    let given_back = state.local.is_given_back(id);
    if (state.local.note_ended(id) && state.local.poll_timeout().is_some()) || given_back {
        tick_in(myself, state, Duration::ZERO);
    }
    if state.poller.run_ended(was_full, job_waiting) {
        // Fill it soon rather than at the next tick, after other runs ending meanwhile
        // have freed theirs (one acquisition for them all, not one per slot).
        let soon = state.shared.clock.monotonic().saturating_add(REFILL_DELAY);
        if soon < state.wake_at {
            tick_in(myself, state, REFILL_DELAY);
        }
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

async fn start_run<K: Kv>(
    myself: &ActorRef<PollerMsg>,
    state: &mut PollerState<K>,
    acquired: AcquiredRun,
    reply: Option<oneshot::Sender<RunOutcome>>,
    local: bool,
) {
    let shared = state.shared.clone();
    let id = acquired.run.id;
    if !local {
        // Noted before its actor exists: the local triggers are only consulted between
        // this actor's messages, and a run whose actor never starts is forgotten below.
        state.local.note_started(id, &acquired.run.job, acquired.exclusive);
    }
    let args = RunArgs { shared, acquired, poller: myself.clone(), reply, local };
    // Unnamed: a name would be registered in ractor's process-wide registry and removed
    // again for every run (about 2 µs of a fire's CPU), and nothing looks a run up by
    // name; the poller knows its runs by actor id, and the run's span carries its id.
    match Actor::spawn_linked(None, RunActor::new(), args, myself.get_cell()).await {
        Ok((run, _)) => {
            state.run_of_actor.insert(run.get_id(), id);
            state.running.insert(id, run);
        }
        Err(error) => {
            tracing::error!(run_id = %id, %error, "could not start a run actor");
            state.local.note_ended(id);
        }
    }
}

async fn trigger<K: Kv>(
    myself: &ActorRef<PollerMsg>,
    state: &mut PollerState<K>,
    job: &JobName,
    data: &JsonObject,
) -> Result<oneshot::Receiver<RunOutcome>, SchedulingError> {
    let shared = state.shared.clone();
    if shared.lifecycle() != Lifecycle::Serving {
        return Err(SchedulingError::SchedulerNotRunning { reason: format!("node is {:?}", shared.lifecycle()) });
    }
    // Check the type before starting anything, so a refusal leaves no run behind.
    let record = shared.store.job_record(job.as_str()).await.map_err(SchedulingError::from)?;
    let record = record.ok_or_else(|| SchedulingError::JobNotFound { job: job.to_string() })?;
    if !shared.registry.has_type(&record.job_type) {
        return Err(SchedulingError::JobTypeNotFound { job_type: record.job_type });
    }
    if state.local.is_busy(job) {
        // A non-concurrent job already runs here without a slot in the store: a local
        // job (its slot is per node), or a run kept after this node was declared lost.
        return Err(SchedulingError::JobRunning { job: job.to_string() });
    }
    let now = shared.clock.now();
    if shared.shared_store && state.poller.times_declared_lost().is_none() && !heartbeat(state, now).await {
        // Called before this process's first heartbeat committed: the cluster does not know
        // this node yet, and nobody would ever reap a run it recorded and then lost.
        let reason = "node is not registered with the store yet (its heartbeat failed)".to_owned();
        return Err(SchedulingError::SchedulerNotRunning { reason });
    }
    let run_id = shared.run_id();
    let acquired = match shared.store.begin_manual_run(job, data, &shared.node_id, run_id, now).await {
        Ok(acquired) => acquired,
        Err(error) => {
            if matches!(error, StoreError::Kv(_)) {
                // An attempt may have committed before the retries gave up (its commit
                // reported unknown, the next ones refused): the caller is told the run did
                // not start, and no actor runs it, so it would stay Running on this live
                // node for ever. The next cycle's reclaim marks it lost, as for a failed
                // acquisition or local run.
                state.poller.run_may_be_orphaned();
            }
            return Err(error.into());
        }
    };
    let (sender, receiver) = oneshot::channel();
    start_run(myself, state, acquired, Some(sender), false).await;
    Ok(receiver)
}
