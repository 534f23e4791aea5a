//! The job store: every operation the engine needs (SPEC §7–10), written once over [`Kv`].
//!
//! [`KvJobStore`] is the one implementation; it runs unchanged on
//! [`crate::kv::memory::MemoryKv`] and on FoundationDB. Its guarantees:
//!
//! - **Each fire runs at most once.** Acquisition scans the due index with snapshot reads,
//!   then reads each chosen trigger serializably in the transaction that moves it, so two
//!   nodes acquiring the same fire conflict and exactly one commits. The run id of a fire is
//!   derived from (trigger incarnation, fire number), a second guard.
//! - **A non-concurrent job never has two runs.** Starting a run claims the job's slot in
//!   the same transaction; a fire that finds the slot held turns its trigger `Blocked`
//!   atomically with that check, and completing the holder's run returns blocked triggers
//!   to `Waiting` in the transaction that frees the slot.
//! - **Every operation is idempotent under retry and ambiguous commits.** Ids are made
//!   before the retry loop; non-idempotent effects (retry triggers, counters, a job's
//!   revision) happen only together with a state transition that a replay sees as already
//!   done. A replay that finds its earlier attempt's commit reports what that attempt did
//!   (the runs it marked lost or deleted, the retry trigger it wrote, what code-job sync
//!   decided), read back from the store where the attempt's own answer was lost.
//! - **Indexes never drift.** Every record write goes through one function that also moves
//!   the record's index entries (due, blocked, history, running-per-node).
//!
//! The keyspace is in [`keys`], the records in [`records`], their encoding in [`codec`].

pub mod codec;
pub mod keys;
pub mod records;

mod acquire;
mod audit;
mod candidate;
mod complete;
mod due;
mod fence;
mod history;
mod invariants;
mod jobs;
mod nodes;
mod prefetch;
mod read_cache;
mod schedules;
mod status;

use std::collections::BTreeSet;
use std::sync::Arc;

use parking_lot::Mutex;
use serde::Serialize;
use uuid::Uuid;

pub use acquire::{fire_run_id, AcquireRequest, AcquiredRun, Acquisition, RunSet};
pub use complete::{Completion, CompletionResult, RunOutcome};
pub use due::{steal_read_due, steal_read_trusts, DueFilter, DueHeads, DueOutlook, JobSet, StealRota};
pub use fence::Fence;
pub use history::{RETENTION_BATCH, SCAN_BUDGET};
pub use nodes::{ClusterState, Heartbeat, LeaderState, ReapResult};
pub(crate) use prefetch::Prefetched;
pub use status::{JobStatus, LocalJob, LocalJobs, SyncOutcome, TriggerStatus, STATUS_PAGE};

use crate::calendar::Calendars;
use crate::entropy::Entropy;
use crate::error::SchedulingError;
use crate::job::{JobRun, JsonObject, RunState, TriggerState};
use crate::kv::{AsKvError, Kv, KvError, KvTransaction, RangeRequest, RetryOptions};
use crate::name::{JobName, TriggerName};
use crate::time::from_micros;
use keys::{shard_of, Key, Keyspace};
use records::{JobRecord, RunRecord, RunView, SlotRecord, TriggerRecord, TriggerWas};

/// What a store operation can fail with.
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum StoreError {
    /// A scheduling error with a stable code (not found, conflict, validation …).
    #[error(transparent)]
    Scheduling(#[from] SchedulingError),
    /// The key-value store failed (after retries, or not retryable).
    #[error("store: {0}")]
    Kv(#[from] KvError),
    /// Stored bytes do not decode: never guessed around.
    #[error("corrupt store data: {0}")]
    Corrupt(String),
}

impl AsKvError for StoreError {
    fn as_kv_error(&self) -> Option<&KvError> {
        match self {
            Self::Kv(e) => Some(e),
            _ => None,
        }
    }
}

impl From<StoreError> for SchedulingError {
    /// Store trouble is `SCHEDULING_UNAVAILABLE_003`; corrupt data `SCHEDULING_UNEXPECTED_001`.
    fn from(e: StoreError) -> Self {
        match e {
            StoreError::Scheduling(e) => e,
            StoreError::Kv(e) => SchedulingError::StoreUnavailable { reason: e.to_string() },
            StoreError::Corrupt(reason) => SchedulingError::Unexpected { message: reason },
        }
    }
}

/// Bytes of run and trigger data (JSON text) one batch transaction — an acquisition, a
/// reap or reclaim step — writes before it stops and reports that more is left. Records
/// carry data up to their size limits, so counts alone (16 fires, 100 runs) do not bound
/// a transaction; with this budget a batch stays far inside FoundationDB's 10,000,000
/// bytes, and a batch too large to ever commit cannot stall a node.
pub(crate) const BATCH_DATA_BUDGET: usize = 2_000_000;

/// Options of a [`KvJobStore`].
#[derive(Debug, Clone)]
pub struct StoreOptions {
    /// How each operation's transaction is retried.
    pub retry: RetryOptions,
    /// Most runs kept in history (the embedded in-memory store); the finished runs
    /// scheduled earliest are evicted first, and starting a run when every kept run is
    /// running fails with `SCHEDULING_UNAVAILABLE_004`. `None` keeps everything
    /// (retention still applies).
    pub max_runs: Option<u64>,
    /// Blocked triggers returned to `Waiting` per completion transaction.
    pub unblock_batch: usize,
    /// A deliberate bug, to show that the simulation's checkers catch it.
    #[cfg(feature = "test-hooks")]
    pub broken: Option<BrokenStore>,
    /// Told of every run a transaction deletes (retention, eviction), with its record (a
    /// simulation checks what was deleted and when; a host could archive it).
    pub on_run_deleted: Option<RunDeletedHook>,
}

/// A callback given each deleted run's record. It is called when the deleting
/// transaction clears the run, before it commits: a transaction that then fails calls it
/// for a run that stays, and its retry calls it again.
#[derive(Clone)]
pub struct RunDeletedHook(pub Arc<dyn Fn(&RunRecord) + Send + Sync>);

impl std::fmt::Debug for RunDeletedHook {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("RunDeletedHook")
    }
}

impl Default for StoreOptions {
    fn default() -> Self {
        Self {
            retry: RetryOptions::default(),
            max_runs: None,
            unblock_batch: 64,
            #[cfg(feature = "test-hooks")]
            broken: None,
            on_run_deleted: None,
        }
    }
}

/// Deliberate store bugs (feature `test-hooks`), for testing the simulation's checkers.
#[cfg(feature = "test-hooks")]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BrokenStore {
    /// Acquisition reads the trigger and the fire's run at snapshot isolation: no conflict
    /// check, so two nodes can take the same fire.
    AcquireWithoutConflictCheck,
    /// Acquisition counts a fire as misfired once it is a tenth of the threshold late, so
    /// `RunOnce` and `Skip` triggers skip fires they should have run.
    EarlyMisfire,
    /// Retention deletes runs that ended half the retention ago, so history is lost early.
    EarlyRetention,
    /// A trigger whose schedule an operation changed is written without a next fire, so
    /// it never fires again.
    RescheduleStalls,
    /// An interval trigger whose run ended waits two intervals, not one.
    IntervalTwice,
    /// No local run is recorded (as if its job were no longer local), so local jobs never
    /// run.
    LocalRunsRefused,
    /// A run's end frees its job's slot but leaves the job's blocked triggers blocked.
    UnblockLost,
    /// A fire its misfire policy skipped counts as fired in its trigger's status.
    SkipCounted,
    /// A retry's trigger is written without its due-index entry, so no node ever takes it.
    RetryUnindexed,
    /// An interval trigger with a repeat limit completes one fire short of it.
    RepeatShort,
    /// A failed run is recorded without its error code (a panic or a timeout then reads as
    /// the job's own failure).
    CodesDropped,
}

/// The job store over a [`Kv`]. Cheap to clone.
#[derive(Clone)]
pub struct KvJobStore<K: Kv> {
    kv: K,
    keys: Keyspace,
    calendars: Arc<Calendars>,
    options: StoreOptions,
    entropy: Arc<Mutex<Entropy>>,
    /// Which shards are home to a node, for the last node list seen (it rarely changes).
    homes: Arc<Mutex<Option<due::HomeShards>>>,
    /// Trigger schedules parsed from their stored text.
    schedules: Arc<schedules::ParsedSchedules>,
    /// Nodes this store has heartbeated for. The leader deletes the record of a node no
    /// longer alive once it has no runs left; for these nodes a missing record then means
    /// "declared lost or stopped", not "a store of its own" (see `node_may_run`).
    registered: Arc<Mutex<BTreeSet<String>>>,
}

impl<K: Kv> std::fmt::Debug for KvJobStore<K> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KvJobStore").field("keys", &self.keys).finish_non_exhaustive()
    }
}

impl<K: Kv> KvJobStore<K> {
    /// A store on `kv` under the default root, resolving trigger calendars in
    /// `calendars`, drawing ids from `entropy`.
    pub fn new(kv: K, calendars: Arc<Calendars>, entropy: Entropy, options: StoreOptions) -> Self {
        Self::with_keyspace(kv, Keyspace::default_root(), calendars, entropy, options)
    }

    /// A store under an explicit keyspace (several independent stores in one database).
    pub fn with_keyspace(
        kv: K,
        keys: Keyspace,
        calendars: Arc<Calendars>,
        entropy: Entropy,
        options: StoreOptions,
    ) -> Self {
        kv.split_hint(&keys.split_hint());
        Self {
            kv,
            keys,
            calendars,
            options,
            entropy: Arc::new(Mutex::new(entropy)),
            homes: Arc::default(),
            schedules: Arc::default(),
            registered: Arc::default(),
        }
    }

    /// The underlying database.
    pub fn kv(&self) -> &K {
        &self.kv
    }

    /// The keyspace.
    pub fn keys(&self) -> &Keyspace {
        &self.keys
    }

    /// Whether this store has heartbeated for `node`.
    fn has_registered(&self, node: &str) -> bool {
        self.registered.lock().contains(node)
    }

    /// A fresh random value for ids, drawn before a retry loop.
    fn random_u64(&self) -> u64 {
        self.entropy.lock().next_u64()
    }

    fn tx(&self, txn: K::Transaction) -> Tx<'_, K::Transaction> {
        Tx { txn, keys: &self.keys }
    }
}

/// A transaction with typed record access. Every write of a record also moves its index
/// entries, so indexes cannot drift from records.
pub(crate) struct Tx<'a, T: KvTransaction> {
    pub(crate) txn: T,
    pub(crate) keys: &'a Keyspace,
}

impl<T: KvTransaction> Tx<'_, T> {
    /// Reads `keys` concurrently (serializably unless `snapshot`), for [`Tx::get_prefetched`].
    pub(crate) async fn prefetch(&self, keys: Vec<Key>, snapshot: bool) -> Result<Prefetched, StoreError> {
        let values = self.txn.get_many(&keys, snapshot).await?;
        Ok(Prefetched::new(keys, values))
    }

    /// The value of `key`: the prefetched one if it has not been handed out yet, else read
    /// now (serializably unless `snapshot`, as it was prefetched) and converted by `decode`
    /// (as the prefetched values were).
    pub(crate) async fn get_prefetched<V>(
        &self,
        prefetched: &mut Prefetched<V>,
        key: &[u8],
        snapshot: bool,
        decode: impl FnOnce(Option<Vec<u8>>) -> Result<V, StoreError>,
    ) -> Result<V, StoreError> {
        match prefetched.take(key) {
            Some(value) => Ok(value),
            None => decode(self.txn.get(key, snapshot).await?),
        }
    }

    pub(crate) async fn job(&self, name: &str) -> Result<Option<JobRecord>, StoreError> {
        decode_job(self.txn.get(&self.keys.job(name), false).await?)
    }

    /// Writes a job record. Every job write bumps the local-jobs stamp: the job may be
    /// local now or may have been local before.
    pub(crate) fn put_job(&self, job: &JobRecord) {
        self.touch_local_jobs();
        self.txn.set_owned(&self.keys.job(&job.name), codec::encode(job));
        let local = self.keys.local_job(&job.name);
        if job.run_on_every_instance {
            self.txn.set(&local, b"");
        } else {
            self.txn.clear(&local);
        }
    }

    /// Deletes a job record. Its slot stays while a run holds it: that run still runs, and
    /// a job re-added under the same name must wait for it (its end clears the slot).
    pub(crate) async fn delete_job(&self, name: &str) -> Result<(), StoreError> {
        self.touch_local_jobs();
        self.txn.clear(&self.keys.job(name));
        self.txn.clear(&self.keys.local_job(name));
        if self.slot(name).await?.holder.is_none() {
            self.txn.clear(&self.keys.slot(name));
        }
        Ok(())
    }

    pub(crate) async fn trigger(&self, job: &str, name: &str) -> Result<Option<TriggerRecord>, StoreError> {
        self.trigger_prefetched(&mut Prefetched::default(), job, name).await
    }

    /// The trigger `job`/`name` (serializable), from `prefetched` when it holds it.
    pub(crate) async fn trigger_prefetched(
        &self,
        prefetched: &mut Prefetched<Option<TriggerRecord>>,
        job: &str,
        name: &str,
    ) -> Result<Option<TriggerRecord>, StoreError> {
        self.get_prefetched(prefetched, &self.keys.trigger(job, name), false, decode_trigger).await
    }

    pub(crate) async fn triggers_of(&self, job: &str) -> Result<Vec<TriggerRecord>, StoreError> {
        let (begin, end) = self.keys.triggers_of(job);
        let range = self.txn.get_range(&RangeRequest::new(begin, end), false).await?;
        range.pairs.iter().map(|(_, v)| codec::decode(v, "trigger record")).collect()
    }

    /// Writes `new`, replacing the record that `was` (the same job and trigger; `None`
    /// for a new trigger), and moves its due and blocked entries. `local` triggers (of
    /// jobs that run on every node) never enter the due index.
    pub(crate) fn put_trigger_from<S: AsRef<str> + Serialize>(
        &self,
        was: Option<TriggerWas>,
        new: &TriggerRecord<S>,
        local: bool,
    ) {
        invariants::trigger_write(was, new);
        if local {
            // A local trigger's pause is part of the local jobs' listing.
            self.touch_local_jobs();
        }
        let (job, name) = (new.job.as_ref(), new.name.as_ref());
        if let Some(was) = was {
            self.clear_trigger_indexes(job, name, was);
        }
        match (new.state, new.next_fire_us) {
            (TriggerState::Waiting, Some(due)) if !local => {
                let shard = shard_of(job, name);
                self.txn.set(&self.keys.due(shard, due, job, name), &due_value(new));
            }
            (TriggerState::Blocked, _) => self.txn.set(&self.keys.blocked(job, name), b""),
            _ => {}
        }
        self.txn.set_owned(&self.keys.trigger(job, name), codec::encode(new));
    }

    /// Marks the local jobs as changed. An atomic add: writers never conflict on it.
    fn touch_local_jobs(&self) {
        self.txn.atomic_op(&self.keys.local_jobs_stamp(), &1u64.to_le_bytes(), crate::kv::AtomicOp::Add);
    }

    pub(crate) fn delete_trigger<S: AsRef<str>>(&self, old: &TriggerRecord<S>) {
        let (job, name) = (old.job.as_ref(), old.name.as_ref());
        self.clear_trigger_indexes(job, name, old.was());
        self.txn.clear(&self.keys.trigger(job, name));
    }

    /// Clears the index entries of trigger `job`/`name` as it `was`.
    fn clear_trigger_indexes(&self, job: &str, name: &str, was: TriggerWas) {
        if let (TriggerState::Waiting, Some(due)) = (was.state, was.next_fire_us) {
            self.txn.clear(&self.keys.due(shard_of(job, name), due, job, name));
        }
        if was.state == TriggerState::Blocked {
            self.txn.clear(&self.keys.blocked(job, name));
        }
    }

    /// The ids of `job`'s running runs ([`running_of_job`]).
    pub(crate) async fn running_of_job(&self, job: &str, snapshot: bool) -> Result<Vec<Uuid>, StoreError> {
        running_of_job(&self.txn, self.keys, job, snapshot).await
    }

    /// Whether a `Running` run of `job` is local when `local` is false, or not local
    /// when it is true. Its running runs are read serializably (a run starting meanwhile
    /// conflicts); each run's kind never changes, so its record is a snapshot read.
    pub(crate) async fn runs_of_the_other_kind(&self, job: &str, local: bool) -> Result<bool, StoreError> {
        let ids = self.running_of_job(job, false).await?;
        let keys: Vec<_> = ids.into_iter().map(|id| self.keys.run(id).into_vec()).collect();
        // One round trip for all of them (a run on each node, for a local job).
        for bytes in self.txn.get_many(&keys, true).await? {
            if decode_run(bytes)?.is_some_and(|run| run.state == RunState::Running && run.local != local) {
                return Ok(true);
            }
        }
        Ok(false)
    }

    pub(crate) async fn slot(&self, job: &str) -> Result<SlotRecord, StoreError> {
        self.slot_prefetched(&mut Prefetched::default(), job).await
    }

    /// The slot of `job` (serializable), from `prefetched` when it holds it.
    pub(crate) async fn slot_prefetched(
        &self,
        prefetched: &mut Prefetched,
        job: &str,
    ) -> Result<SlotRecord, StoreError> {
        let bytes = self.get_prefetched(prefetched, &self.keys.slot(job), false, Ok).await?;
        bytes.map_or(Ok(SlotRecord::default()), |bytes| SlotRecord::decode(&bytes))
    }

    pub(crate) fn put_slot(&self, job: &str, slot: &SlotRecord) {
        self.txn.set_owned(&self.keys.slot(job), codec::encode(slot));
    }

    /// The runs `node` has been asked to cancel.
    pub(crate) async fn cancel_requests(&self, node: &str, snapshot: bool) -> Result<Vec<Uuid>, StoreError> {
        let (begin, end) = self.keys.cancels_for(node);
        let requests = self.txn.get_range(&RangeRequest::new(begin, end), snapshot).await?;
        requests.pairs.iter().map(|(key, _)| self.keys.node_run_of(key)).collect()
    }

    pub(crate) async fn run(&self, id: Uuid) -> Result<Option<RunRecord>, StoreError> {
        self.run_prefetched(&mut Prefetched::default(), id).await
    }

    /// The run `id` (serializable), from `prefetched` when it holds it.
    pub(crate) async fn run_prefetched(
        &self,
        prefetched: &mut Prefetched<Option<RunRecord>>,
        id: Uuid,
    ) -> Result<Option<RunRecord>, StoreError> {
        self.get_prefetched(prefetched, &self.keys.run(id), false, decode_run).await
    }

    /// The runs `ids` (serializable), read together, for [`Tx::run_prefetched`].
    pub(crate) async fn prefetch_runs(
        &self,
        ids: impl Iterator<Item = Uuid>,
    ) -> Result<Prefetched<Option<RunRecord>>, StoreError> {
        self.prefetch(ids.map(|id| self.keys.run(id)).collect(), false).await?.try_map(decode_run)
    }

    /// Writes `new` (replacing `old`, same id), with its running index entries while it
    /// runs, and its history index entries once it ended.
    pub(crate) fn put_run(&self, old: Option<&RunRecord>, new: &RunView<'_>) {
        invariants::run_write(old.map(|old| (old.id, old.state)), new);
        if let Some(old) = old.filter(|old| old.state == RunState::Running) {
            self.txn.clear(&self.keys.running(&old.node, old.id));
            self.txn.clear(&self.keys.job_running(&old.job, old.id));
        }
        self.put_run_indexes(new);
    }

    /// Writes `run`, whose stored record was in state `was` and otherwise differs only in
    /// its end (state, end time, error): a run ending, changed in place, not copied.
    /// `job_entry`: whether the run has an entry in the per-job running index, which only
    /// the runs that hold no slot have, and those of stores written before.
    pub(crate) fn put_run_ended(&self, was: RunState, run: &RunView<'_>, job_entry: bool) {
        invariants::run_write(Some((run.id, was)), run);
        if was == RunState::Running {
            self.txn.clear(&self.keys.running(run.node, run.id));
            if job_entry {
                self.txn.clear(&self.keys.job_running(run.job, run.id));
            }
        }
        self.put_run_indexes(run);
    }

    /// The run's record and the index entries of its state.
    fn put_run_indexes(&self, new: &RunView<'_>) {
        if new.state.is_final() {
            let summary = codec::encode(&new.summary_view());
            self.txn.set(&self.keys.history_by_job(new.job, new.scheduled_us, new.id), &summary);
            self.txn.set_owned(&self.keys.history_by_time(new.scheduled_us, new.id), summary);
        }
        if new.state == RunState::Running {
            self.txn.set(&self.keys.running(new.node, new.id), b"");
            // A run holding its job's slot is found as the slot's holder: an entry would
            // be a write at its start and another at its end, for every such fire.
            if !new.exclusive {
                self.txn.set(&self.keys.job_running(new.job, new.id), b"");
            }
        }
        self.txn.set_owned(&self.keys.run(new.id), codec::encode(new));
    }
}

/// The ids of `job`'s running runs in `txn`: the running index's entries (14), which hold
/// the runs that hold no slot, and the holder of the job's slot (4). Snapshot reads, or
/// serializable ones (a run starting meanwhile conflicts) when `snapshot` is false.
pub(crate) async fn running_of_job<T: KvTransaction>(
    txn: &T,
    keys: &Keyspace,
    job: &str,
    snapshot: bool,
) -> Result<Vec<Uuid>, StoreError> {
    let (begin, end) = keys.running_of_job(job);
    let running = txn.get_range(&RangeRequest::new(begin, end), snapshot).await?;
    let mut ids = running.pairs.iter().map(|(key, _)| keys.node_run_of(key)).collect::<Result<Vec<_>, _>>()?;
    let slot = txn.get(&keys.slot(job), snapshot).await?;
    add_slot_holder(&mut ids, slot.map(|bytes| SlotRecord::decode(&bytes)).transpose()?.and_then(|slot| slot.holder));
    Ok(ids)
}

/// Adds a job's slot `holder` to the running runs the per-job running index gave for it,
/// unless it is there: a store written before also holds an index entry of the holder.
pub(crate) fn add_slot_holder(running: &mut Vec<Uuid>, holder: Option<Uuid>) {
    if let Some(holder) = holder.filter(|holder| !running.contains(holder)) {
        running.push(holder);
    }
}

impl records::RunRecord {
    /// The public run this record describes.
    ///
    /// # Errors
    /// [`StoreError::Corrupt`] when a stored field does not decode.
    pub fn job_run(&self) -> Result<JobRun, StoreError> {
        job_run_of(&self.view())
    }
}

pub(crate) fn decode_job(bytes: Option<Vec<u8>>) -> Result<Option<JobRecord>, StoreError> {
    bytes.map(|b| codec::decode(&b, "job record")).transpose()
}

pub(crate) fn decode_trigger(bytes: Option<Vec<u8>>) -> Result<Option<TriggerRecord>, StoreError> {
    bytes.map(|b| codec::decode(&b, "trigger record")).transpose()
}

fn decode_run(bytes: Option<Vec<u8>>) -> Result<Option<RunRecord>, StoreError> {
    bytes.map(|b| codec::decode(&b, "run record")).transpose()
}

/// Rebuilds the public run from its record.
pub(crate) fn job_run_of(record: &RunView<'_>) -> Result<JobRun, StoreError> {
    let corrupt = |what: &str| StoreError::Corrupt(format!("run {}: bad {what}", record.id));
    Ok(JobRun {
        id: record.id,
        job: JobName::new(record.job).map_err(|_| corrupt("job name"))?,
        trigger: record.trigger.map(TriggerName::new).transpose().map_err(|_| corrupt("trigger name"))?,
        scheduled_at: from_micros(record.scheduled_us).ok_or_else(|| corrupt("scheduled time"))?,
        cause: record.cause,
        attempt: record.attempt,
        retry_of: record.retry_of,
        data: parse_data(record.data).map_err(|_| corrupt("data"))?,
    })
}

/// The value of a due-index entry: the trigger's priority (i32 LE), then 1 for a one-shot
/// trigger the engine made (enqueue, retry, recovery), 0 for a scheduled one. Acquisition
/// orders and filters candidates from it without reading the triggers.
fn due_value<S>(trigger: &TriggerRecord<S>) -> [u8; 5] {
    let mut value = [0u8; 5];
    value[..4].copy_from_slice(&trigger.priority.to_le_bytes());
    value[4] = u8::from(trigger.kind.is_synthetic());
    value
}

/// `(priority, one_shot)` of a due-index value (see [`due_value`]).
pub(crate) fn due_value_parts(value: &[u8]) -> (i32, bool) {
    let priority =
        value.get(..4).and_then(|p| p.try_into().ok()).map_or(crate::job::PRIORITY_DEFAULT, i32::from_le_bytes);
    (priority, value.get(4) == Some(&1))
}

/// JSON object text → object.
pub(crate) fn parse_data(text: &str) -> Result<JsonObject, StoreError> {
    serde_json::from_str(text).map_err(|e| StoreError::Corrupt(format!("bad data JSON: {e}")))
}

/// Object → JSON text (keys sorted, as serde_json's map is ordered).
pub(crate) fn data_text(data: &JsonObject) -> String {
    serde_json::Value::Object(data.clone()).to_string()
}
