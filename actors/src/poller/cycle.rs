//! The poll cycle's steps: the store calls and run starts [`sundial::poller::Poller`]
//! asks for, in the order its module docs give, with their results handed back to it.

use std::collections::BTreeSet;
use std::time::Duration;

use ractor::ActorRef;
use sundial::kv::{AsKvError, Kv, KvError};
use sundial::poll::{takes_scheduled_fires, until_heartbeat, Taken, STEAL_GRACE};
use sundial::poller::{Acquired, AcquisitionPlan, CycleWait, Held, MAX_LOOKAHEAD};
use sundial::store::{AcquireRequest, Acquisition, DueFilter, SyncOutcome};
use sundial::time::Clock;
use uuid::Uuid;

use crate::context::{Lifecycle, NodeShared};
use crate::execute::{AbortOnDrop, CancelReason};
use crate::stats::{EngineWork, StoreOp};

use super::local::run_local;
use super::runs::start_run;
use super::PollerState;
use crate::messages::PollerMsg;

/// Arms the watch on this node's wake key if it is not armed (shared store, serving).
/// A failure leaves it for the next cycle: polling finds new work meanwhile.
pub(super) async fn watch_wake<K: Kv>(myself: &ActorRef<PollerMsg>, state: &mut PollerState<K>) {
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
pub(super) async fn heartbeat<K: Kv>(state: &mut PollerState<K>, now: chrono::DateTime<chrono::Utc>) -> bool {
    let shared = state.shared.clone();
    let began = shared.clock.monotonic();
    match shared
        .store
        .heartbeat(&shared.node_id, now, state.poller.times_declared_lost(), state.poller.caught_up())
        .await
    {
        Ok(beat) => {
            state.heartbeat.committed(began);
            if beat.was_declared_lost {
                // Our runs are Lost already and will run again elsewhere: stop them, as
                // the fence would have.
                tracing::warn!(node = %shared.node_id, "this node was declared lost; canceling its runs");
                shared.runs.cancel_all(CancelReason::Fenced);
                // Their slots are free in the store now, but a job ignoring its
                // cancellation runs on: this node starts no run beside it.
                state.local.note_declared_lost();
            }
            state.poller.heartbeat_committed(beat.times_declared_lost, beat.was_declared_lost);
            // Cancel requests for runs here (read with the heartbeat); a failed heartbeat
            // reads them next cycle (a request stays until its run ends).
            for id in beat.cancel_requests {
                if state.running.contains_key(&id) {
                    shared.runs.cancel(id, CancelReason::Requested);
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
pub(super) async fn cycle<K: Kv>(myself: &ActorRef<PollerMsg>, state: &mut PollerState<K>) -> Duration {
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
    let (ended, ran) = shared.run_slots.take_job_times();
    state.poller.jobs_ended(ended, ran);
    let executing = shared.run_slots.executing();
    let held = state.running.len();
    let slots = state.poller.slots(shared.shared_store, alive, shared.options.max_concurrent_runs, held, executing);
    let taken = if slots > 0 { acquire_and_start(myself, state, now, slots).await } else { state.poller.no_slots() };
    state.poller.cycle_ended(now, taken, !state.local.busy_jobs().is_empty());
    if let Taken::Full = taken {
        return Duration::ZERO;
    }
    let read = match state.poller.outlook_to_read(taken) {
        Some(limit) => {
            let busy_jobs = state.local.held_jobs();
            let busy_version = Some(state.local.held_version());
            let filter = DueFilter { scheduled: takes_scheduled(&shared), busy_jobs: &busy_jobs, busy_version };
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
pub(super) async fn acquire_and_start<K: Kv>(
    myself: &ActorRef<PollerMsg>,
    state: &mut PollerState<K>,
    now: chrono::DateTime<chrono::Utc>,
    slots: usize,
) -> Taken {
    let shared = state.shared.clone();
    // Whether the watch on the wake key was armed before this acquisition reads.
    let watched = !shared.shared_store || state.wake_watch.is_some();
    let plan = match state.poller.plan_acquisition(
        now,
        shared.clock.monotonic(),
        Held { version: state.local.held_version(), left: state.local.held_left() },
        takes_scheduled(&shared),
        watched,
    ) {
        AcquisitionPlan::Skip(outlook) => {
            shared.stats.acquisition_skipped();
            return Taken::Done(Some(outlook));
        }
        AcquisitionPlan::Acquire(plan) => plan,
    };
    let busy_jobs = state.local.held_jobs();
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
        busy_jobs: &busy_jobs,
        busy_version: Some(state.local.held_version()),
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

/// Whether this node takes scheduled triggers' fires now ([`takes_scheduled_fires`]).
pub(super) fn takes_scheduled<K: Kv>(shared: &NodeShared<K>) -> bool {
    takes_scheduled_fires(shared.shared_store, shared.leader().is_some())
}

/// Starts the runs that failed acquisitions committed after all (see
/// `KvJobStore::adopt_committed_runs`); on a store error, tries again next cycle (and
/// reclaims nothing meanwhile, which would mark those runs lost); true when they were
/// looked for.
pub(super) async fn adopt_committed_runs<K: Kv>(myself: &ActorRef<PollerMsg>, state: &mut PollerState<K>) -> bool {
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
pub(super) async fn reclaim_previous_runs<K: Kv>(state: &PollerState<K>, now: chrono::DateTime<chrono::Utc>) -> bool {
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
                for run in &result.lost_runs {
                    shared.publish_lost(*run).await;
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
pub(super) async fn sync_code_jobs<K: Kv>(shared: &NodeShared<K>, now: chrono::DateTime<chrono::Utc>) -> bool {
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
