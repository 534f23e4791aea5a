//! The `JobScheduler` handle (SPEC §9): every runtime operation of one node, batch-first
//! with one result per item, plus single-item helpers. Cheap to clone.

use std::sync::Arc;
use std::time::Duration;

use ractor::rpc::CallResult;
use ractor::{ActorRef, RpcReplyPort};
use sundial::audit::{AuditAction, AuditEntry, AuditQuery};
use sundial::error::SchedulingError;
use sundial::job::{JobDefinition, JobRunInfo, JobRunQuery, JsonObject};
use sundial::kv::Kv;
use sundial::name::{JobName, TriggerKey, TriggerName};
use sundial::store::{JobStatus, RunOutcome};
use sundial::time::Clock;
use uuid::Uuid;

use crate::context::{Lifecycle, NodeShared};
use crate::events::{CloudEvent, Topic};
use crate::execute::CancelReason;
use crate::messages::PollerMsg;
use crate::messages::{NodeMsg, PollerMsgBox};
use crate::registry::JobRegistry;
use crate::stats::EngineCounters;

/// How long a call into the node's actors may take before it counts as failed.
const CALL_TIMEOUT: Duration = Duration::from_secs(30);
/// After the stop deadline cancels the remaining runs, how long they get to finish.
const STOP_GRACE: Duration = Duration::from_secs(10);

/// A manual run request: the job, and data overriding the job's.
#[derive(Debug, Clone, PartialEq)]
pub struct JobTriggerRequest {
    /// The job.
    pub name: JobName,
    /// Overrides same-named keys of the job's data.
    pub data: JsonObject,
}

impl From<JobName> for JobTriggerRequest {
    fn from(name: JobName) -> Self {
        Self { name, data: JsonObject::new() }
    }
}

/// What a stop did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StopReport {
    /// Runs still running at the deadline, which were canceled.
    pub canceled: usize,
    /// Runs that ignored cancellation and still ran when the stop gave up on them; their
    /// tasks are aborted as the node's actors stop.
    pub abandoned: usize,
}

/// One node's handle.
pub struct JobScheduler<K: Kv> {
    shared: Arc<NodeShared<K>>,
    node: ActorRef<NodeMsg>,
}

impl<K: Kv> Clone for JobScheduler<K> {
    fn clone(&self) -> Self {
        Self { shared: self.shared.clone(), node: self.node.clone() }
    }
}

impl<K: Kv> std::fmt::Debug for JobScheduler<K> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("JobScheduler").field("node", &self.shared.node_id).finish_non_exhaustive()
    }
}

fn not_running(reason: &str) -> SchedulingError {
    SchedulingError::SchedulerNotRunning { reason: reason.to_owned() }
}

impl<K: Kv> JobScheduler<K> {
    pub(crate) fn new(shared: Arc<NodeShared<K>>, node: ActorRef<NodeMsg>) -> Self {
        Self { shared, node }
    }

    /// This node's id.
    pub fn node_id(&self) -> &str {
        &self.shared.node_id
    }

    /// Where the node is in its life.
    pub fn lifecycle(&self) -> Lifecycle {
        self.shared.lifecycle()
    }

    /// Whether this node holds the leader lease now.
    pub fn is_leader(&self) -> bool {
        self.shared.leader().is_some()
    }

    /// The engine's counters (acquisitions, store errors, runs here, leadership).
    pub fn counters(&self) -> EngineCounters {
        self.shared.stats.snapshot(self.shared.runs.len(), self.is_leader())
    }

    /// The node's supervisor actor.
    pub fn actor(&self) -> &ActorRef<NodeMsg> {
        &self.node
    }

    /// The registered types, code jobs and calendars.
    pub fn registry(&self) -> &JobRegistry {
        &self.shared.registry
    }

    /// The host is ready: start polling and running. The supervisor moves the lifecycle
    /// to `Serving` as it takes the message; anything asked of the node after this call
    /// reaches the node's actors after it.
    pub fn serve(&self) {
        if self.lifecycle() == Lifecycle::Starting {
            let _ = self.node.send_message(NodeMsg::Serving);
            self.wake();
        }
    }

    fn wake(&self) {
        let _ = self.node.send_message(NodeMsg::Poller(PollerMsgBox(PollerMsg::Wake)));
    }

    async fn call_poller<T: Send + 'static>(
        &self,
        make: impl FnOnce(RpcReplyPort<T>) -> PollerMsg,
    ) -> Result<T, SchedulingError> {
        let result = self.node.call(|reply| NodeMsg::Poller(PollerMsgBox(make(reply))), Some(CALL_TIMEOUT)).await;
        match result {
            Ok(CallResult::Success(value)) => Ok(value),
            _ => Err(not_running("the node's actors did not answer")),
        }
    }

    async fn job_event(&self, topic: Topic, job: &JobName) {
        let now = self.shared.clock.now();
        self.shared.publish(|id| CloudEvent::for_job(topic, id, now, job.as_str(), &self.shared.node_id)).await;
    }

    /// Adds or wholly replaces jobs (`SCHEDULING_NOTFOUND_002` for an unregistered type,
    /// `SCHEDULING_VALIDATION_001` for an invalid definition, `SCHEDULING_CONFLICT_001`
    /// when a non-concurrent job would switch `run_on_every_instance` while a run of the
    /// other kind is going). Effective here at once.
    pub async fn schedule(&self, defs: Vec<JobDefinition>) -> Vec<Result<(), SchedulingError>> {
        let mut results: Vec<Option<Result<(), SchedulingError>>> = vec![None; defs.len()];
        let mut accepted = Vec::new();
        for (i, def) in defs.iter().enumerate() {
            if self.shared.registry.has_type(def.job_type.as_str()) {
                accepted.push((i, def.clone()));
            } else {
                results[i] = Some(Err(SchedulingError::JobTypeNotFound { job_type: def.job_type.to_string() }));
            }
        }
        let batch: Vec<JobDefinition> = accepted.iter().map(|(_, d)| d.clone()).collect();
        let stored = self.shared.store.schedule(&batch, self.shared.clock.now()).await;
        for ((i, def), result) in accepted.into_iter().zip(stored) {
            if result.is_ok() {
                self.job_event(Topic::JobScheduled, &def.name).await;
            }
            results[i] = Some(result);
        }
        self.wake();
        results.into_iter().map(|r| r.unwrap_or_else(|| Err(not_running("unreachable")))).collect()
    }

    /// [`JobScheduler::schedule`] for one job.
    ///
    /// # Errors
    /// As `schedule`.
    pub async fn schedule_one(&self, def: JobDefinition) -> Result<(), SchedulingError> {
        self.schedule(vec![def]).await.remove(0)
    }

    /// Deletes jobs; running runs finish, history stays (`SCHEDULING_NOTFOUND_001`).
    pub async fn unschedule(&self, names: &[JobName]) -> Vec<Result<(), SchedulingError>> {
        let results = self.shared.store.unschedule(names).await;
        for (name, result) in names.iter().zip(&results) {
            if result.is_ok() {
                self.job_event(Topic::JobUnscheduled, name).await;
            }
        }
        self.wake();
        results
    }

    /// [`JobScheduler::unschedule`] for one job.
    ///
    /// # Errors
    /// As `unschedule`.
    pub async fn unschedule_one(&self, name: &JobName) -> Result<(), SchedulingError> {
        self.unschedule(std::slice::from_ref(name)).await.remove(0)
    }

    /// Pauses jobs (`SCHEDULING_NOTFOUND_001`).
    pub async fn pause(&self, names: &[JobName]) -> Vec<Result<(), SchedulingError>> {
        self.set_paused(names, true).await
    }

    /// Resumes jobs; missed fires follow their misfire policy (`SCHEDULING_NOTFOUND_001`).
    pub async fn resume(&self, names: &[JobName]) -> Vec<Result<(), SchedulingError>> {
        self.set_paused(names, false).await
    }

    /// [`JobScheduler::pause`] for one job.
    ///
    /// # Errors
    /// As `pause`.
    pub async fn pause_one(&self, name: &JobName) -> Result<(), SchedulingError> {
        self.pause(std::slice::from_ref(name)).await.remove(0)
    }

    /// [`JobScheduler::resume`] for one job.
    ///
    /// # Errors
    /// As `resume`.
    pub async fn resume_one(&self, name: &JobName) -> Result<(), SchedulingError> {
        self.resume(std::slice::from_ref(name)).await.remove(0)
    }

    async fn set_paused(&self, names: &[JobName], paused: bool) -> Vec<Result<(), SchedulingError>> {
        let results = self.shared.store.set_jobs_paused(names, paused).await;
        let topic = if paused { Topic::JobPaused } else { Topic::JobResumed };
        for (name, result) in names.iter().zip(&results) {
            if result.is_ok() {
                self.job_event(topic, name).await;
            }
        }
        self.wake();
        results
    }

    /// Pauses single triggers (`SCHEDULING_NOTFOUND_003`).
    pub async fn pause_triggers(&self, keys: &[TriggerKey]) -> Vec<Result<(), SchedulingError>> {
        let results = self.shared.store.set_triggers_paused(keys, true).await;
        self.wake();
        results
    }

    /// Resumes single triggers (`SCHEDULING_NOTFOUND_003`).
    pub async fn resume_triggers(&self, keys: &[TriggerKey]) -> Vec<Result<(), SchedulingError>> {
        let results = self.shared.store.set_triggers_paused(keys, false).await;
        self.wake();
        results
    }

    /// [`JobScheduler::pause_triggers`] for one trigger.
    ///
    /// # Errors
    /// As `pause_triggers`.
    pub async fn pause_trigger(&self, key: &TriggerKey) -> Result<(), SchedulingError> {
        self.pause_triggers(std::slice::from_ref(key)).await.remove(0)
    }

    /// [`JobScheduler::resume_triggers`] for one trigger.
    ///
    /// # Errors
    /// As `resume_triggers`.
    pub async fn resume_trigger(&self, key: &TriggerKey) -> Result<(), SchedulingError> {
        self.resume_triggers(std::slice::from_ref(key)).await.remove(0)
    }

    /// Runs jobs now on this node, ignoring pause and leadership, and waits for each first
    /// attempt's outcome (a failure still retries per policy). Refused with
    /// `SCHEDULING_UNAVAILABLE_001` unless the node is serving; `SCHEDULING_NOTFOUND_001`,
    /// `SCHEDULING_CONFLICT_001` for a running non-concurrent job.
    pub async fn trigger(&self, requests: Vec<JobTriggerRequest>) -> Vec<Result<RunOutcome, SchedulingError>> {
        let mut waiting = Vec::with_capacity(requests.len());
        for request in requests {
            // The poller refuses it unless the node serves; a stopped node's is gone.
            if self.lifecycle() == Lifecycle::Stopped {
                waiting.push(Err(not_running("node is Stopped")));
                continue;
            }
            let started = self.call_poller(|reply| PollerMsg::Trigger(request.name, request.data, reply)).await;
            waiting.push(started.and_then(|r| r));
        }
        let mut results = Vec::with_capacity(waiting.len());
        for started in waiting {
            results.push(match started {
                Ok(receiver) => receiver.await.map_err(|_| not_running("the run ended without an outcome")),
                Err(e) => Err(e),
            });
        }
        results
    }

    /// [`JobScheduler::trigger`] for one job.
    ///
    /// # Errors
    /// As `trigger`.
    pub async fn trigger_one(&self, request: impl Into<JobTriggerRequest>) -> Result<RunOutcome, SchedulingError> {
        self.trigger(vec![request.into()]).await.remove(0)
    }

    /// Inserts one-shot `manual-…` triggers due now, run by any node; no waiting. Always
    /// allowed, even while draining (`SCHEDULING_NOTFOUND_001`).
    pub async fn enqueue(&self, requests: Vec<JobTriggerRequest>) -> Vec<Result<TriggerName, SchedulingError>> {
        let pairs: Vec<(JobName, JsonObject)> = requests.into_iter().map(|r| (r.name, r.data)).collect();
        let results = self.shared.store.enqueue(&pairs, self.shared.clock.now()).await;
        self.wake();
        results
    }

    /// [`JobScheduler::enqueue`] for one job; returns the new trigger's name.
    ///
    /// # Errors
    /// As `enqueue`.
    pub async fn enqueue_one(&self, request: impl Into<JobTriggerRequest>) -> Result<TriggerName, SchedulingError> {
        self.enqueue(vec![request.into()]).await.remove(0)
    }

    /// Cancels runs: at once when they run here, at the running node's next cycle
    /// otherwise (`SCHEDULING_NOTFOUND_004` when unknown or finished).
    pub async fn cancel_runs(&self, ids: &[Uuid]) -> Vec<Result<(), SchedulingError>> {
        let local = self
            .call_poller(|reply| PollerMsg::CancelLocal(ids.to_vec(), CancelReason::Requested, reply))
            .await
            .unwrap_or_default();
        let remote: Vec<Uuid> = ids.iter().copied().filter(|id| !local.contains(id)).collect();
        let mut remote_results = self.shared.store.request_cancel(&remote).await.into_iter();
        ids.iter()
            .map(|id| if local.contains(id) { Ok(()) } else { remote_results.next().map_or(Ok(()), |r| r.map(|_| ())) })
            .collect()
    }

    /// [`JobScheduler::cancel_runs`] for one run.
    ///
    /// # Errors
    /// As `cancel_runs`.
    pub async fn cancel_run(&self, id: Uuid) -> Result<(), SchedulingError> {
        self.cancel_runs(&[id]).await.remove(0)
    }

    /// A job's status, or `None`.
    ///
    /// # Errors
    /// `SCHEDULING_UNAVAILABLE_003` when the store fails.
    pub async fn status(&self, job: &JobName) -> Result<Option<JobStatus>, SchedulingError> {
        self.shared.store.status(job).await.map_err(SchedulingError::from)
    }

    /// Every job's status.
    ///
    /// # Errors
    /// `SCHEDULING_UNAVAILABLE_003` when the store fails.
    pub async fn statuses(&self) -> Result<Vec<JobStatus>, SchedulingError> {
        self.shared.store.statuses().await.map_err(SchedulingError::from)
    }

    /// The status of every job, by name, without its latest finished run: what a list
    /// filters and counts on, read in a few range reads per page of jobs.
    ///
    /// # Errors
    /// `SCHEDULING_UNAVAILABLE_003` when the store fails.
    pub async fn statuses_brief(&self) -> Result<Vec<JobStatus>, SchedulingError> {
        self.shared.store.statuses_brief().await.map_err(SchedulingError::from)
    }

    /// Fills in the latest finished run of each of `statuses`.
    ///
    /// # Errors
    /// `SCHEDULING_UNAVAILABLE_003` when the store fails.
    pub async fn fill_last_finished(&self, statuses: &mut [JobStatus]) -> Result<(), SchedulingError> {
        self.shared.store.fill_last_finished(statuses).await.map_err(SchedulingError::from)
    }

    /// Run history, newest first.
    ///
    /// # Errors
    /// `SCHEDULING_VALIDATION_002` for paging out of range; `SCHEDULING_UNAVAILABLE_003`.
    pub async fn runs(&self, query: &JobRunQuery) -> Result<Vec<JobRunInfo>, SchedulingError> {
        self.shared.store.runs(query).await.map_err(SchedulingError::from)
    }

    /// How many runs match `query`'s filters in each state, in one scan of history.
    ///
    /// # Errors
    /// `SCHEDULING_UNAVAILABLE_003` when the store fails.
    pub async fn count_runs_by_state(
        &self,
        query: &JobRunQuery,
    ) -> Result<std::collections::BTreeMap<sundial::job::RunState, u64>, SchedulingError> {
        self.shared.store.count_runs_by_state(query).await.map_err(SchedulingError::from)
    }

    /// [`count_runs_by_state`](Self::count_runs_by_state) over the newest `at_most`
    /// matching runs; whether that was all of them.
    ///
    /// # Errors
    /// `SCHEDULING_UNAVAILABLE_003` when the store fails.
    pub async fn count_runs_by_state_at_most(
        &self,
        query: &JobRunQuery,
        at_most: u64,
    ) -> Result<(std::collections::BTreeMap<sundial::job::RunState, u64>, bool), SchedulingError> {
        self.shared.store.count_runs_by_state_at_most(query, at_most).await.map_err(SchedulingError::from)
    }

    /// The run `id`, running or finished, while history keeps it.
    ///
    /// # Errors
    /// `SCHEDULING_UNAVAILABLE_003` when the store fails.
    pub async fn run(&self, id: Uuid) -> Result<Option<JobRunInfo>, SchedulingError> {
        self.shared.store.run_by_id(id).await.map_err(SchedulingError::from)
    }

    /// The cluster as the store records it: nodes, their running runs, and the holder of
    /// the leader lease when the store keeps it.
    ///
    /// # Errors
    /// `SCHEDULING_UNAVAILABLE_003` when the store fails.
    pub async fn cluster(&self) -> Result<sundial::store::ClusterState, SchedulingError> {
        self.shared.store.cluster(self.shared.options.lease_resource.as_str()).await.map_err(SchedulingError::from)
    }

    /// Now, on this node's clock.
    pub fn now(&self) -> chrono::DateTime<chrono::Utc> {
        self.shared.clock.now()
    }

    /// The most runs this node runs at once (`max_concurrent_runs`).
    pub fn run_slots(&self) -> u32 {
        self.shared.options.max_concurrent_runs
    }

    /// Records in the store's audit log that `actor` asked for `action` on `target`, and
    /// the `error` (code, message) it met if it failed; the entry's time and id come from
    /// this node's clock and entropy.
    ///
    /// # Errors
    /// `SCHEDULING_UNAVAILABLE_003` when the store fails.
    pub async fn record_audit(
        &self,
        actor: &str,
        action: AuditAction,
        target: &str,
        error: Option<(&str, &str)>,
    ) -> Result<(), SchedulingError> {
        let error_code = error.map(|(code, _)| code.to_owned());
        let error_message = error.map(|(_, message)| message.to_owned());
        let entry = AuditEntry {
            id: self.shared.event_id(),
            at: self.shared.clock.now(),
            actor: actor.to_owned(),
            action,
            target: target.to_owned(),
            node: self.shared.node_id.to_string(),
            error_code,
            error_message,
        };
        self.shared.store.record_audit(&entry).await.map_err(SchedulingError::from)
    }

    /// The audit log, newest first.
    ///
    /// # Errors
    /// `SCHEDULING_VALIDATION_002` for paging out of range; `SCHEDULING_UNAVAILABLE_003`.
    pub async fn audit(&self, query: &AuditQuery) -> Result<Vec<AuditEntry>, SchedulingError> {
        self.shared.store.audit(query).await.map_err(SchedulingError::from)
    }

    /// How many runs match (paging ignored).
    ///
    /// # Errors
    /// `SCHEDULING_UNAVAILABLE_003` when the store fails.
    pub async fn count_runs(&self, query: &JobRunQuery) -> Result<u64, SchedulingError> {
        self.shared.store.count_runs(query).await.map_err(SchedulingError::from)
    }

    /// Puts code jobs back to their code definitions (`SCHEDULING_NOTFOUND_005` for a job
    /// without one on this node).
    pub async fn restore(&self, names: &[JobName]) -> Vec<Result<(), SchedulingError>> {
        let mut results = Vec::with_capacity(names.len());
        for name in names {
            let result = match self.shared.registry.code_job(name) {
                None => Err(SchedulingError::NoCodeDefinition { job: name.to_string() }),
                Some(def) => {
                    self.shared.store.restore(def, self.shared.clock.now()).await.map_err(SchedulingError::from)
                }
            };
            results.push(result);
        }
        self.wake();
        results
    }

    /// [`JobScheduler::restore`] for one job.
    ///
    /// # Errors
    /// As `restore`.
    pub async fn restore_one(&self, name: &JobName) -> Result<(), SchedulingError> {
        self.restore(std::slice::from_ref(name)).await.remove(0)
    }

    /// Stops the node (SPEC §10): no new runs; running ones get until `deadline` to finish,
    /// then are canceled and given a short grace; the node deregisters and its actors stop.
    /// Returns once they have: a node of the same id can then start in this process.
    pub async fn stop(&self, deadline: Duration) -> StopReport {
        if self.lifecycle() == Lifecycle::Stopped {
            return StopReport { canceled: 0, abandoned: 0 };
        }
        let _ = self.node.call(NodeMsg::Draining, Some(CALL_TIMEOUT)).await;
        if self.shared.shared_store {
            // The others take this node's home fires on time from now on. Failing that,
            // they take them as late fires, as from a node that died.
            if let Err(error) = self.shared.store.mark_draining(&self.shared.node_id).await {
                tracing::warn!(%error, "could not mark the node draining");
            }
        }
        let running = |this: &Self| {
            let this = this.clone();
            async move { this.call_poller(PollerMsg::RunningCount).await.unwrap_or(0) }
        };
        let canceled = wait_until_idle(deadline, || running(self)).await;
        if canceled > 0 {
            let _ = self.call_poller(|reply| PollerMsg::CancelAll(CancelReason::NodeStopping, reply)).await;
        }
        let abandoned = if canceled > 0 { wait_until_idle(STOP_GRACE, || running(self)).await } else { 0 };
        // Release the lease now rather than at its expiry.
        let _ = self.node.call(NodeMsg::ReleaseLease, Some(CALL_TIMEOUT)).await;
        if self.shared.shared_store {
            if let Err(error) = self.shared.store.deregister_node(&self.shared.node_id).await {
                tracing::warn!(%error, "could not deregister the node");
            }
        }
        let _ = self.node.call(NodeMsg::Stopped, Some(CALL_TIMEOUT)).await;
        // Returns once the node's actors are gone (their names free for a new node).
        let _ = self.node.stop_and_wait(None, Some(CALL_TIMEOUT)).await;
        StopReport { canceled, abandoned }
    }
}

/// Polls `count` until it is zero or `limit` passes; returns the last count.
async fn wait_until_idle<F, Fut>(limit: Duration, count: F) -> usize
where
    F: Fn() -> Fut,
    Fut: std::future::Future<Output = usize>,
{
    let step = Duration::from_millis(20);
    let mut waited = Duration::ZERO;
    loop {
        let n = count().await;
        if n == 0 || waited >= limit {
            return n;
        }
        tokio::time::sleep(step.min(limit - waited)).await;
        waited += step;
    }
}
