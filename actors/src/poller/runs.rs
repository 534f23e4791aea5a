//! The runs on this node: starting a run actor for each, forgetting it when the actor
//! ends, and runs started by hand (`trigger`).

use std::time::Duration;

use ractor::{Actor, ActorRef};
use sundial::error::SchedulingError;
use sundial::job::JsonObject;
use sundial::kv::Kv;
use sundial::name::JobName;
use sundial::poller::REFILL_DELAY;
use sundial::store::{AcquiredRun, RunOutcome, StoreError};
use sundial::time::Clock;
use tokio::sync::oneshot;
use uuid::Uuid;

use crate::context::Lifecycle;
use crate::run::{RunActor, RunArgs};

use super::cycle::heartbeat;
use super::{tick_in, PollerState};
use crate::messages::PollerMsg;

/// A run here ended (its actor terminated): it is no longer held, and a node that was full
/// is soon filled.
pub(super) fn run_ended<K: Kv>(myself: &ActorRef<PollerMsg>, state: &mut PollerState<K>, id: Uuid) {
    let was_full = state.poller.is_full(state.running.len());
    state.running.remove(&id);
    // The job whose slot this run held here: the last acquisition may have left its fires
    // waiting (`held_jobs`), to take now that its end is recorded.
    let job_waiting = state.local.holds_back(id).is_some_and(|mark| state.poller.left_waiting(mark));
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

pub(super) async fn start_run<K: Kv>(
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
        state.local.note_started(id, &acquired.run.job, acquired.exclusive, state.poller.acquisitions());
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

pub(super) async fn trigger<K: Kv>(
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
    let run_id = state.run_ids.next_id(shared.clock.now());
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
