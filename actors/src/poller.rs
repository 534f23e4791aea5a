//! `PollerActor`: the engine cycle of SPEC §10 on one node.
//!
//! Each cycle, while the node is serving: write code jobs (first cycle, retried until it
//! works), heartbeat (shared store; once or twice a poll interval, however often the node
//! wakes), act on the cancel requests read with it, and acquire due
//! fires into free slots (`min(acquire_batch_size, max_concurrent_runs − running)`) — with a
//! store of its own and no leadership, only one-shot fires (enqueue, retry) —
//! starting a [`crate::run`] actor for each. Fires due within the lookahead are taken too
//! and their runs wait, ready, for their exact time; the lookahead grows with the number
//! of fires due together, so that their acquisition ends before they are due
//! ([`AcquisitionLead`]). Then it sleeps until its home shards' next fire enters the
//! lookahead (other nodes' shards are read at most every five seconds, for fires late
//! enough to steal), at most `poll_interval`; local changes (`Wake`) and freed slots cut the sleep
//! short, so runs start within microseconds of their due time.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use ractor::{Actor, ActorId, ActorProcessingErr, ActorRef, RpcReplyPort, SupervisionEvent};
use sundial::error::SchedulingError;
use sundial::job::JsonObject;
use sundial::kv::{AsKvError, KvError};
use sundial::name::JobName;
use sundial::poll::{
    heartbeat_due, until_heartbeat, wait_after_cycle, CycleEnd, NextDue, Taken, STEAL_CHECK, STEAL_GRACE,
};
use sundial::rules::{acquire_slots, AcquisitionBatch, AcquisitionLead};
use sundial::kv::Kv;
use sundial::store::{
    steal_read_due, steal_read_trusts, AcquireRequest, AcquiredRun, Acquisition, DueFilter, DueHeads, DueOutlook, RunOutcome, StealRota, StoreError, SyncOutcome,
};
use sundial::time::{Clock, MonotonicInstant};
use tokio::sync::oneshot;
use uuid::Uuid;

use sundial::local::LocalTriggers;

use crate::execute::{AbortOnDrop, CancelReason};
use crate::node::{Lifecycle, NodeShared};
use crate::run::{RunActor, RunArgs, RunMsg};
use crate::stats::{EngineWork, StoreOp};
use crate::ticker::Ticker;

/// Fires due this soon are always acquired ahead; their runs wait for their scheduled
/// instant, so acquisition happens before the due time instead of after it.
const LOOKAHEAD: Duration = Duration::from_millis(100);
/// The most a node acquires ahead when many fires fall due together (see
/// [`AcquisitionLead`]).
const MAX_LOOKAHEAD: Duration = Duration::from_secs(1);
/// The cost per acquired run assumed until the node has measured its own: about what
/// the embedded store and a run's preparation take on a small machine (2 cores).
const PRIOR_COST_PER_RUN: Duration = Duration::from_micros(40);
/// Fires counted ahead at most (counting is a read of the due index); fewer when the
/// lead reaches its cap sooner.
const OUTLOOK_LIMIT: usize = 100_000;
/// How long a full node waits after a slot frees before it acquires again.
const REFILL_DELAY: Duration = Duration::from_millis(5);

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
    synced: bool,
    /// Runs an earlier process with this node id left `Running` were marked lost.
    reclaimed: bool,
    /// The `now` of failed acquisitions, each of which may have committed before it failed
    /// (a commit reported unknown): the next cycle starts their runs, then reclaims.
    unadopted: Vec<chrono::DateTime<chrono::Utc>>,
    known_times_declared_lost: Option<u64>,
    tick: u64,
    /// When the planned cycle (tick `tick`) comes.
    wake_at: MonotonicInstant,
    /// This node's local triggers and in-process retries.
    local: LocalTriggers,
    /// Cycles since local jobs were last read from the store.
    cycles_since_refresh: u32,
    /// Re-read local jobs at the next cycle (a local change was made).
    refresh_local: bool,
    /// The local-jobs stamp of the last listing: an unchanged stamp skips the rebuild.
    local_stamp: Option<u64>,
    /// How far ahead to acquire, learned from this node's acquisitions.
    lead: AcquisitionLead,
    /// How many fires to acquire at once: smaller while acquisitions outgrow the store.
    batch: AcquisitionBatch,
    /// The lookahead of the next acquisition: the lead for the fires due next.
    lookahead: Duration,
    /// The acquisitions since the last one that left nothing due: when the first began,
    /// and how many runs they took. Measured as one, since the time between batches
    /// (other work on the node) delays the last fire as much as the batches do.
    sequence: Option<(sundial::time::MonotonicInstant, usize)>,
    /// A cycle to fill freed slots is scheduled.
    refill_pending: bool,
    /// When this node last read the other nodes' shards.
    last_steal_check: Option<sundial::time::MonotonicInstant>,
    /// Its turn at reading them, by the node list its last acquisition read.
    steal_rota: Option<StealRota>,
    /// The last cycle took every fire due in this node's home shards, and no job was busy
    /// here: the next heartbeat says so, and the other nodes skip these shards when they
    /// look for late fires (see [`caught_up`]).
    caught_up: bool,
    /// The armed watch on this node's wake key (shared store, while serving): another
    /// node that gives this node's home shards new due work wakes it, instead of leaving
    /// the fire for its next poll. Dropping it cancels the watch.
    wake_watch: Option<AbortOnDrop<()>>,
    /// The timer of the next planned cycle.
    ticker: Ticker,
    /// The registered job types (fixed once the node is built): acquisition takes only
    /// fires of types this node can run.
    known_types: BTreeSet<String>,
    /// What the last acquisition saw of this node's home shards, while it still holds:
    /// cycles that find nothing due by it skip the acquisition (see [`KnownDue`]).
    known_due: Option<KnownDue>,
    /// The jobs whose fires the last acquisition left waiting ([`LocalTriggers::held_jobs`]
    /// then): the end of a run holding one's slot here calls for another acquisition.
    held: BTreeSet<String>,
}

/// What an acquisition saw of the due index, kept while nothing can have changed it for
/// this node: no other node wrote its home shards or changed which shards are its home
/// (the wake key's watch, armed before that acquisition read, has not fired), and nothing
/// happened here that writes them without the watch (a run's end that made a fire due,
/// which says so with `DueAt`; a change through the handle; code-job sync; reclaiming or
/// adopting runs), nor changed what this node takes (leadership, jobs
/// busy here). An idle node then reads the due index only every `STEAL_CHECK`, when it
/// looks at the other nodes' shards, instead of every cycle: an FDB cluster is not read
/// by every idle node every second, and a simulated day of mostly idle cycles runs faster.
#[derive(Debug)]
struct KnownDue {
    /// The outlook after the acquisition (its own writes included).
    outlook: DueOutlook,
    /// The acquisition's [`DueFilter`] (with [`PollerState::held`]): the outlook left out
    /// the entries it leaves waiting.
    scheduled: bool,
    /// The home shards' first entries after the acquisition: the next acquisition reads
    /// only the shards they show fires due in, not every home shard's first entry.
    heads: DueHeads,
}

/// Failed acquisitions whose runs the next cycle looks for (see `adopt_committed_runs`).
const MAX_UNADOPTED: usize = 64;

/// Local jobs are re-read from the store every this many cycles (SPEC §7).
const LOCAL_REFRESH_CYCLES: u32 = 10;

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
        let batch = AcquisitionBatch::new(shared.options.acquire_batch_size);
        let known_types = shared.registry.type_keys().map(str::to_owned).collect();
        Ok(PollerState {
            shared,
            known_types,
            batch,
            running: BTreeMap::new(),
            run_of_actor: BTreeMap::new(),
            synced: false,
            reclaimed: false,
            unadopted: Vec::new(),
            known_times_declared_lost: None,
            tick: 0,
            wake_at: MonotonicInstant::from_origin(Duration::ZERO),
            local: LocalTriggers::new(),
            cycles_since_refresh: 0,
            refresh_local: true,
            local_stamp: None,
            lead: AcquisitionLead::new(LOOKAHEAD, MAX_LOOKAHEAD, PRIOR_COST_PER_RUN),
            lookahead: LOOKAHEAD,
            sequence: None,
            refill_pending: false,
            last_steal_check: None,
            steal_rota: None,
            caught_up: false,
            wake_watch: None,
            ticker: Ticker::spawn(move |tick| {
                let _ = myself.send_message(PollerMsg::Tick(tick));
            }),
            known_due: None,
            held: BTreeSet::new(),
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
                state.refill_pending = false;
                // Armed before the cycle reads the due index: every change after that
                // read fires it (see `KnownDue`).
                watch_wake(&myself, state).await;
                let wait = cycle(&myself, state).await;
                tick_in(&myself, state, wait);
            }
            PollerMsg::Woken(fired) => {
                state.wake_watch = None;
                state.known_due = None;
                if fired {
                    tick_in(&myself, state, Duration::ZERO);
                }
            }
            PollerMsg::Tick(_) => {}
            PollerMsg::Wake => {
                state.refresh_local = true;
                state.known_due = None;
                tick_in(&myself, state, Duration::ZERO);
            }
            PollerMsg::DueAt(due) => {
                // The run's end wrote it to the due index: no wake key tells this node.
                state.known_due = None;
                // Woken a lookahead early, as the regular sleep is: the fire is acquired
                // ahead and its run starts on time, not one acquisition late.
                let wait =
                    (due - state.shared.clock.now()).to_std().unwrap_or_default().saturating_sub(state.lookahead);
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
    match shared.store.heartbeat(&shared.node_id, now, state.known_times_declared_lost, state.caught_up).await {
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
                // Declared lost, it was left out of the node list meanwhile.
                state.known_due = None;
            }
            state.known_times_declared_lost = Some(beat.times_declared_lost);
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

/// One cycle; returns how long to sleep before the next.
async fn cycle<K: Kv>(myself: &ActorRef<PollerMsg>, state: &mut PollerState<K>) -> Duration {
    let shared = state.shared.clone();
    let poll_interval = shared.options.poll_interval;
    if shared.lifecycle() != Lifecycle::Serving {
        state.known_due = None;
        state.caught_up = false;
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
    if !state.synced {
        state.synced = sync_code_jobs(&shared, now).await;
        state.known_due = None;
    }
    // Without a recent heartbeat, take no new work, local or not: this node may be about
    // to be declared lost, and runs of a node the cluster never heard from (before its
    // first heartbeat commits, it has no record) would never be reaped. A cycle soon after
    // the last heartbeat (woken for a due fire) relies on it; acquisition checks in its own
    // transaction that the node was not declared lost.
    let heartbeat_first = state.known_times_declared_lost.is_none();
    let alive = !shared.shared_store
        || !(heartbeat_first || heartbeat_due(shared.heartbeat_age(), shared.options.poll_interval))
        || heartbeat(state, now).await;
    if !state.unadopted.is_empty() {
        adopt_committed_runs(myself, state).await;
        state.known_due = None;
    }
    // Local fires after adoption: a run a failed acquisition took (of a job local here,
    // say an enqueued one) counts for the job's exclusivity on this node only once it
    // started, and while some may still be unadopted, local fires wait.
    let local_polled = alive && state.unadopted.is_empty();
    if local_polled {
        run_local(myself, state, now).await;
    }
    if !state.reclaimed && state.unadopted.is_empty() {
        // Runs of an earlier process with this id, or of this poller before it restarted.
        state.reclaimed = reclaim_previous_runs(state, now).await;
        // Recovery triggers of the runs it marked lost may be in this node's shards.
        state.known_due = None;
    }
    let slots = if shared.shared_store && !alive {
        0
    } else {
        acquire_slots(state.batch.current(), shared.options.max_concurrent_runs, state.running.len())
    };
    let taken = if slots > 0 {
        acquire_and_start(myself, state, now, slots).await
    } else {
        state.known_due = None;
        Taken::NoSlots
    };
    state.caught_up = taken.caught_up(now) && state.local.busy_jobs().is_empty();
    if let Taken::Full = taken {
        return Duration::ZERO;
    }
    let wait = next_wait(state, now, local_polled, taken).await;
    // Only a shared store's node heartbeats: `None` for the others.
    match until_heartbeat(shared.heartbeat_age(), shared.options.poll_interval) {
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
    // Other nodes' shards are read (for late fires to steal) at this node's turns.
    let now_mono = shared.clock.monotonic();
    let since_steal = state.last_steal_check.map(|last| now_mono.saturating_duration_since(last));
    let steal = steal_read_due(since_steal, now, STEAL_CHECK, state.steal_rota);
    if steal {
        state.last_steal_check = Some(now_mono);
    }
    let busy_jobs = state.local.held_jobs();
    let scheduled = takes_scheduled(&shared);
    let known = state.known_due.take();
    if !steal {
        // The outlook left out the fires of the jobs then held here: it holds only while
        // those are still held (fires of jobs held since are in it, waking this node early).
        let held = &state.held;
        let holds = |k: &&KnownDue| k.scheduled == scheduled && held.is_subset(&busy_jobs);
        if let Some(outlook) = known.as_ref().filter(holds).map(|k| k.outlook) {
            let horizon = sundial::time::add_duration(now, state.lookahead);
            if outlook.first.is_none_or(|first| first > horizon) {
                shared.stats.acquisition_skipped();
                state.known_due = known;
                return Taken::Done(Some(outlook));
            }
        }
    }
    // Whether the watch on the wake key was armed before this acquisition reads.
    let watched = !shared.shared_store || state.wake_watch.is_some();
    let request = AcquireRequest {
        node: &shared.node_id,
        now,
        max: slots,
        misfire_threshold: shared.options.misfire_threshold,
        steal_grace: STEAL_GRACE,
        lookahead: state.lookahead,
        known_types: Some(&state.known_types),
        known_runs: &state.running,
        scheduled,
        busy_jobs: &busy_jobs,
        steal,
        trust_caught_up: steal_read_trusts(now, STEAL_CHECK),
        // The store uses them only with this request's filter and the same home shards.
        known_heads: known.as_ref().map(|k| &k.heads),
    };
    let began = state.sequence.map_or_else(|| shared.clock.monotonic(), |(began, _)| began);
    let limit = state.lead.saturation().min(OUTLOOK_LIMIT);
    let acquiring = shared.clock.monotonic();
    let acquisition = shared.store.acquire_with_outlook(&request, MAX_LOOKAHEAD, limit).await;
    state.held = busy_jobs;
    let starting = shared.clock.monotonic();
    shared.stats.spent(EngineWork::Acquire, acquiring, starting);
    match acquisition {
        Ok(Acquisition { runs, outlook, more, stolen, rota, heads }) => {
            state.steal_rota = rota.or(state.steal_rota);
            if stolen > 0 {
                // An acquisition takes one fire per trigger: a node behind (alive, yet
                // slow or saturated) may have left several due. Look again next cycle,
                // so they drain at the poll cadence, not one per STEAL_CHECK.
                state.last_steal_check = None;
            }
            state.batch.grow();
            shared.stats.acquisition(runs.len(), stolen);
            if steal && rota.is_some() {
                shared.stats.steal_read();
            }
            let full = more || runs.len() == slots;
            let taken = state.sequence.map_or(0, |(_, taken)| taken) + runs.len();
            for run in runs {
                start_run(myself, state, run, None, false).await;
            }
            shared.stats.spent(EngineWork::StartRun, starting, shared.clock.monotonic());
            if full {
                // There may be more due right now: acquire again at once, measuring
                // the batches as one sequence.
                state.sequence = Some((began, taken));
                return Taken::Full;
            }
            state.sequence = None;
            state.lead.observe(taken, shared.clock.monotonic().saturating_duration_since(began));
            if let (Some(outlook), Some(heads)) = (outlook.filter(|_| watched), heads) {
                state.known_due = Some(KnownDue { outlook, scheduled, heads });
            }
            Taken::Done(outlook)
        }
        Err(error) => {
            shared.stats.store_error(StoreOp::Acquire);
            let too_big = error
                .as_kv_error()
                .is_some_and(|e| [KvError::TRANSACTION_TOO_OLD, KvError::TRANSACTION_TOO_LARGE].contains(&e.code()));
            if too_big {
                state.batch.shrink();
            }
            // An attempt may have committed before the retries gave up (its commit
            // reported as unknown, every retry then too old or refused): runs this
            // node never started would stay Running for ever on a live node. The next
            // cycle starts the runs this acquisition took, then reclaims (marks lost)
            // any other run the poller does not know. (The error is the last
            // attempt's: whether an earlier one was ambiguous is not known here.)
            if state.unadopted.len() == MAX_UNADOPTED {
                // A long outage: the oldest attempts' runs (if any) are reclaimed instead.
                state.unadopted.remove(0);
            }
            state.unadopted.push(now);
            state.reclaimed = false;
            tracing::warn!(%error, batch = state.batch.current(), "acquisition failed");
            Taken::Failed
        }
    }
}

/// Whether this node takes scheduled triggers' fires now: with a store of its own, only
/// the leader does (SPEC §10); the others take one-shots only.
fn takes_scheduled<K: Kv>(shared: &NodeShared<K>) -> bool {
    shared.shared_store || shared.leader().is_some()
}

/// How long to sleep after a cycle that ran at `ran_at` (and started its due local fires
/// when `local_polled`) and whose acquisition ended as `taken` (not `Full`): see
/// [`wait_after_cycle`]. Reads what is due next when the acquisition did not, and sets the
/// next acquisition's lookahead from it.
async fn next_wait<K: Kv>(
    state: &mut PollerState<K>,
    ran_at: chrono::DateTime<chrono::Utc>,
    local_polled: bool,
    taken: Taken,
) -> Duration {
    let shared = state.shared.clone();
    // A successful acquisition reached the fires due by `acquired_until`.
    let acquired_until = matches!(taken, Taken::Done(_)).then(|| sundial::time::add_duration(ran_at, state.lookahead));
    let now = shared.clock.now();
    let local_due = state.local.poll_timeout();
    let next_due = match taken {
        // Nothing can be taken until a run ends (which wakes the poller) or the next
        // heartbeat succeeds: no need to know what is due.
        Taken::NoSlots => None,
        // What is due next, as the acquisition saw it (saves reading every shard again).
        Taken::Done(Some(outlook)) => Some(Ok(outlook)),
        Taken::Done(None) | Taken::Failed | Taken::Full => {
            let limit = state.lead.saturation().min(OUTLOOK_LIMIT);
            let busy_jobs = state.local.held_jobs();
            let filter = DueFilter { scheduled: takes_scheduled(&shared), busy_jobs: &busy_jobs };
            Some(shared.store.due_outlook(&shared.node_id, filter, MAX_LOOKAHEAD, limit).await)
        }
    };
    let next_due = next_due.map(|outlook| {
        // The more fires fall due together, the earlier their acquisition starts.
        state.lookahead = match &outlook {
            Ok(next) if next.first.is_some() => state.lead.lead(next.count),
            _ => LOOKAHEAD,
        };
        match outlook {
            Ok(next) => NextDue::Known { home: next.first, elsewhere: next.first_elsewhere },
            Err(_) => NextDue::Unknown,
        }
    });
    wait_after_cycle(&CycleEnd {
        now,
        ran_at,
        poll_interval: shared.options.poll_interval,
        local_due,
        local_polled,
        next_due,
        lookahead: state.lookahead,
        acquired_until,
    })
}

/// Refreshes local jobs when due, and starts this node's due local fires and retries.
async fn run_local<K: Kv>(
    myself: &ActorRef<PollerMsg>,
    state: &mut PollerState<K>,
    now: chrono::DateTime<chrono::Utc>,
) {
    let shared = state.shared.clone();
    state.cycles_since_refresh += 1;
    if state.refresh_local || state.cycles_since_refresh >= LOCAL_REFRESH_CYCLES {
        match shared.store.local_jobs_since(state.local_stamp).await {
            Ok(listing) => {
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
                    state.local_stamp = Some(listing.stamp);
                }
                state.refresh_local = false;
                state.cycles_since_refresh = 0;
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
                state.refresh_local = true;
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
                state.reclaimed = false;
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
/// reclaims nothing meanwhile, which would mark those runs lost).
async fn adopt_committed_runs<K: Kv>(myself: &ActorRef<PollerMsg>, state: &mut PollerState<K>) {
    let shared = state.shared.clone();
    let known: BTreeSet<Uuid> = state.running.keys().copied().collect();
    match shared.store.adopt_committed_runs(&shared.node_id, &known, &state.unadopted).await {
        Ok(runs) => {
            state.unadopted.clear();
            if !runs.is_empty() {
                tracing::warn!(runs = runs.len(), "an acquisition reported as failed had taken runs; starting them");
            }
            for run in runs {
                start_run(myself, state, run, None, false).await;
            }
        }
        Err(error) => {
            shared.stats.store_error(StoreOp::Reclaim);
            tracing::warn!(%error, "adopting the runs of a failed acquisition failed; retrying next cycle");
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
    // The last acquisition left this run's job's fires waiting (`held_jobs`): take them
    // now that its end is recorded, together with those of other runs ending meanwhile.
    let held_back = state.local.holds_back(id).is_some_and(|job| state.held.contains(job.as_str()));
    // A local job's fire, or a fire in the store of a job this run kept busy here after
    // this node was declared lost, may have waited for this run.
    let given_back = state.local.is_given_back(id);
    if (state.local.note_ended(id) && state.local.poll_timeout().is_some()) || given_back {
        tick_in(myself, state, Duration::ZERO);
    }
    if (was_full || held_back) && !state.refill_pending {
        // A slot freed up: fill it soon rather than at the next tick, after other runs
        // ending meanwhile have freed theirs (one acquisition for them all, not one per
        // slot).
        state.refill_pending = true;
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
    if shared.shared_store && state.known_times_declared_lost.is_none() && !heartbeat(state, now).await {
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
                state.reclaimed = false;
            }
            return Err(error.into());
        }
    };
    let (sender, receiver) = oneshot::channel();
    start_run(myself, state, acquired, Some(sender), false).await;
    Ok(receiver)
}
