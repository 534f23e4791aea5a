//! Execution coordination for external triggers (SPEC §15): "run this once across the
//! cluster" for hosts that already have a trigger source (another scheduler, a message, a
//! timer in their own actor system) and only need arbitration.
//!
//! Every instance that receives a fire asks [`ExecutionCoordinator::try_begin`] with the
//! fire's [`ExecutionKey`] — (service, group, job, scheduled fire time) — before doing the
//! work. The first to insert the execution record wins and gets an [`Execution`]; it
//! heartbeats while it works and writes back [`ExecutionCoordinator::succeed`] or
//! [`ExecutionCoordinator::fail`]. The others get a [`Declined`] saying why.
//!
//! Modes ([`UniqueMode`]):
//! - `PerFireTime`: each fire runs once; different fires of a job may overlap.
//! - `PerJob`: each fire runs once, and at most one execution of the job runs at any time.
//! - `Disabled`: no arbitration: every caller is granted, nothing is written.
//!
//! A fire that completed (succeeded or failed) is never run again through the coordinator
//! while its record is kept: a failed fire is retried by its trigger source under a new
//! fire time, not by a second instance racing on the same key. Records are kept until
//! [`ExecutionCoordinator::forget_before`] deletes old completed ones.
//!
//! **Takeover.** A running record whose owner stopped heartbeating may be taken over. As
//! for leader leases (DESIGN.md decision 3), expiry is judged by the observer, never by a
//! timestamp another instance wrote: an instance takes over only a record it has itself
//! seen unchanged (same execution, same heartbeat count) for the record's whole lease on
//! its own monotonic clock. A declined caller is told when to ask again
//! ([`Declined::check_again_in`]); the record's `lease_expires_at` is for display. The
//! owner of a record taken over learns it at its next heartbeat or completion
//! (`SCHEDULING_CONFLICT_002`), and its outcome is not recorded: the new owner's is.
//!
//! ```
//! # use std::{sync::Arc, time::Duration};
//! # use sundial::coordination::*;
//! # use sundial::{entropy::Entropy, kv::memory::MemoryKv, store::keys::Keyspace};
//! # use sundial::name::{GroupName, JobName, ServiceName};
//! # use sundial::time::{from_micros, ManualClock};
//! # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
//! let clock = Arc::new(ManualClock::new(from_micros(1_800_000_000_000_000).unwrap()));
//! let kv = MemoryKv::new(clock.clone()); // the nodes' store (FoundationDB in a cluster)
//! let coordinator = |owner: &str, seed| {
//!     ExecutionCoordinator::new(kv.clone(), Keyspace::default_root(), clock.clone(), owner, Entropy::from_seed(seed))
//! };
//! let (a, b) = (coordinator("instance-a", 1), coordinator("instance-b", 2));
//! // Both instances got the same 01:00 fire from their own trigger source.
//! let key = ExecutionKey::new(
//!     ServiceName::new("orders").unwrap(),
//!     GroupName::new("default").unwrap(),
//!     JobName::new("daily-order-sync").unwrap(),
//!     from_micros(1_800_000_000_000_000).unwrap(),
//! );
//! let request = ExecutionRequest::new(key, UniqueMode::PerFireTime, Duration::from_secs(300));
//! let Decision::Granted(execution) = a.try_begin(&request).await.unwrap() else { unreachable!() };
//! assert!(matches!(b.try_begin(&request).await.unwrap(), Decision::Declined(Declined::Running { .. })));
//! // ... the work, heartbeating well within the lease ...
//! a.heartbeat(&execution).await.unwrap();
//! a.succeed(&execution).await.unwrap();
//! assert!(matches!(b.try_begin(&request).await.unwrap(), Decision::Declined(Declined::AlreadyRan(_))));
//! # });
//! ```
//!
//! Exactly-once per key comes from serializable reads of the record (and, `PerJob`, of
//! the job's slot) in the transaction that inserts it, so it holds however many
//! instances race and under ambiguous commits (an execution id is drawn once, before the
//! retries, and a retry that finds its own record knows it was granted).

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use parking_lot::Mutex;
use serde::{Deserialize, Serialize};
use uuid::Uuid;

use crate::entropy::{Entropy, RunIdGenerator};
use crate::error::SchedulingError;
use crate::job::{bounded, ERROR_MESSAGE_LEN_MAX};
use crate::kv::{run, Kv, KvTransaction, RangeRequest, RetryOptions};
use crate::lapse::LapseWatch;
use crate::name::{GroupName, JobName, ServiceName};
use crate::store::codec;
use crate::store::keys::Keyspace;
use crate::store::StoreError;
use crate::time::{add_duration, from_micros, to_micros, Clock, MonotonicInstant};

/// The longest lease an execution may ask for.
pub const EXECUTION_LEASE_MAX: Duration = Duration::from_secs(7 * 86_400);

/// The longest display name and fire instance id, in bytes.
pub const EXECUTION_TEXT_LEN_MAX: usize = 1024;

/// How executions of one job are arbitrated.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum UniqueMode {
    /// No arbitration: every caller runs (local development, or jobs safe to run on every
    /// instance). Nothing is written.
    Disabled,
    /// Each fire runs once, and at most one execution of the job runs at any time (a job
    /// that must not overlap itself, whose runs may outlast its trigger interval).
    PerJob,
    /// Each fire runs once; executions of different fires may overlap.
    PerFireTime,
}

/// Which fire an execution is: (service, group, job, scheduled fire time), to the
/// microsecond.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct ExecutionKey {
    /// The service the job belongs to.
    pub service: ServiceName,
    /// The job's group within the service.
    pub group: GroupName,
    /// The job's identifier.
    pub job: JobName,
    /// When the fire was scheduled (the trigger source's time, not when it arrived).
    pub scheduled_at: DateTime<Utc>,
}

impl ExecutionKey {
    /// The key of `job`'s fire scheduled at `scheduled_at` (kept to the microsecond).
    pub fn new(service: ServiceName, group: GroupName, job: JobName, scheduled_at: DateTime<Utc>) -> Self {
        let scheduled_at = from_micros(to_micros(scheduled_at)).unwrap_or(scheduled_at);
        Self { service, group, job, scheduled_at }
    }

    fn fire_us(&self) -> i64 {
        to_micros(self.scheduled_at)
    }
}

impl fmt::Display for ExecutionKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}/{}@{}", self.service, self.group, self.job, self.scheduled_at.to_rfc3339())
    }
}

/// What an instance asks to run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExecutionRequest {
    /// The fire.
    pub key: ExecutionKey,
    /// How executions of the job are arbitrated.
    pub mode: UniqueMode,
    /// How long the execution stays the owner's without a heartbeat (more than the
    /// owner's heartbeat interval; at most [`EXECUTION_LEASE_MAX`]).
    pub lease: Duration,
    /// The job's display name (free text, at most [`EXECUTION_TEXT_LEN_MAX`] bytes).
    pub job_name: String,
    /// The trigger source's id of this fire instance (free text, may be empty).
    pub fire_instance_id: String,
}

impl ExecutionRequest {
    /// A request with an empty display name and fire instance id.
    pub fn new(key: ExecutionKey, mode: UniqueMode, lease: Duration) -> Self {
        Self { key, mode, lease, job_name: String::new(), fire_instance_id: String::new() }
    }

    fn validate(&self) -> Result<(), SchedulingError> {
        let invalid = |reason: String| Err(SchedulingError::InvalidDefinition { reason });
        if self.lease.is_zero() || self.lease > EXECUTION_LEASE_MAX {
            return invalid(format!(
                "execution lease is {:?}; it must be more than zero and at most {:?}",
                self.lease, EXECUTION_LEASE_MAX
            ));
        }
        for (what, text) in [("job name", &self.job_name), ("fire instance id", &self.fire_instance_id)] {
            if text.len() > EXECUTION_TEXT_LEN_MAX {
                return invalid(format!(
                    "execution {what} is {} bytes long; at most {EXECUTION_TEXT_LEN_MAX} are allowed",
                    text.len()
                ));
            }
        }
        Ok(())
    }
}

/// Where an execution stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum ExecutionStatus {
    /// Its owner is working on it.
    Running,
    /// It ended well.
    Succeeded,
    /// It ended with an error, or was abandoned (its owner stopped heartbeating and
    /// another execution of its `PerJob` job took the job over).
    Failed,
}

/// One coordinated execution, as stored.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ExecutionRecord {
    /// Unique per grant (a takeover gets a new one).
    pub execution_id: Uuid,
    /// The fire.
    pub key: ExecutionKey,
    /// The job's display name.
    pub job_name: String,
    /// The trigger source's id of the fire instance.
    pub fire_instance_id: String,
    /// How the job is arbitrated.
    pub mode: UniqueMode,
    /// The owning instance.
    pub owner: String,
    /// Where it stands.
    pub status: ExecutionStatus,
    /// When it was granted, on the owner's clock.
    pub started_at: DateTime<Utc>,
    /// When it ended, on the owner's clock.
    pub completed_at: Option<DateTime<Utc>>,
    /// The lease, as asked.
    pub lease: Duration,
    /// The owner's estimate of when its lease lapses, on its clock: for display only
    /// (takeover is judged by each observer's own clock, see the module docs).
    pub lease_expires_at: DateTime<Utc>,
    /// Heartbeats so far (each one changes the record, which observers see).
    pub heartbeats: u64,
    /// The execution this one took over (its owner stopped heartbeating).
    pub takeover_of: Option<Uuid>,
    /// Why it failed.
    pub error_message: Option<String>,
}

/// `(18, service, group, job)`: the running execution of a `PerJob` job.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
struct ExecutionSlot {
    execution_id: Uuid,
    fire_us: i64,
}

/// The right to run one fire, held by the instance it was granted to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Execution {
    /// The grant's id (`None` under [`UniqueMode::Disabled`]: nothing was recorded).
    pub execution_id: Option<Uuid>,
    /// The fire.
    pub key: ExecutionKey,
    /// How the job is arbitrated.
    pub mode: UniqueMode,
    /// The lease each heartbeat extends.
    pub lease: Duration,
    /// The execution this one took over.
    pub takeover_of: Option<Uuid>,
}

/// Why an instance may not run a fire now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Declined {
    /// The fire ran already (its record is complete).
    AlreadyRan(ExecutionRecord),
    /// Another instance runs this fire.
    Running {
        /// Its record.
        record: ExecutionRecord,
        /// When asking again could take it over, if the owner stays silent until then.
        check_again_in: Duration,
    },
    /// `PerJob`: another fire of the job is running.
    JobBusy {
        /// The running execution's record.
        record: ExecutionRecord,
        /// When asking again could take the job over, if its owner stays silent until then.
        check_again_in: Duration,
    },
}

impl Declined {
    /// When asking again may succeed (`None`: never, the fire ran).
    pub fn check_again_in(&self) -> Option<Duration> {
        match self {
            Self::AlreadyRan(_) => None,
            Self::Running { check_again_in, .. } | Self::JobBusy { check_again_in, .. } => Some(*check_again_in),
        }
    }
}

/// The outcome of [`ExecutionCoordinator::try_begin`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    /// This instance runs the fire.
    Granted(Execution),
    /// It does not.
    Declined(Declined),
}

/// What tells one state of a running execution from the next: another execution, or a
/// heartbeat. Takeover needs it seen unchanged for a whole lease.
type Version = (Uuid, u64);

fn version_of(record: &ExecutionRecord) -> Version {
    (record.execution_id, record.heartbeats)
}

enum Attempt {
    Granted { id: Uuid, takeover_of: Option<Uuid> },
    Declined(Box<Declined>),
}

/// Arbitrates executions of external fires over the store (see the module docs). One per
/// instance; cheap to share behind an `Arc`.
pub struct ExecutionCoordinator<K: Kv> {
    kv: K,
    keys: Keyspace,
    clock: Arc<dyn Clock>,
    owner: String,
    ids: Mutex<RunIdGenerator>,
    retry: RetryOptions,
    /// Executions owned by others, by record key.
    watch: Mutex<LapseWatch<Vec<u8>, Version>>,
    /// By record key: the execution id of a `try_begin` that failed on store trouble, whose
    /// commit may have landed after all. Asked again, the instance recognises it as its own.
    unanswered: Mutex<BTreeMap<Vec<u8>, Unanswered>>,
}

/// The `try_begin` calls for one fire that failed, any of which may have written its
/// record.
#[derive(Debug, Clone, Default)]
struct Unanswered {
    /// Their execution ids, the latest few.
    execution_ids: Vec<Uuid>,
    lease: Duration,
    since: Option<MonotonicInstant>,
}

/// How many failed calls per fire an instance remembers.
const UNANSWERED_MAX: usize = 8;

impl<K: Kv> fmt::Debug for ExecutionCoordinator<K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ExecutionCoordinator").field("owner", &self.owner).finish_non_exhaustive()
    }
}

impl<K: Kv> ExecutionCoordinator<K> {
    /// The coordinator of instance `owner` (unique among the instances sharing the store)
    /// over `kv` under `keys`; execution ids come from `entropy` and `clock`.
    pub fn new(kv: K, keys: Keyspace, clock: Arc<dyn Clock>, owner: impl Into<String>, entropy: Entropy) -> Self {
        Self {
            kv,
            keys,
            clock,
            owner: owner.into(),
            ids: Mutex::new(RunIdGenerator::new(entropy)),
            retry: RetryOptions { retry_limit: 10, ..RetryOptions::default() },
            watch: Mutex::new(LapseWatch::new()),
            unanswered: Mutex::new(BTreeMap::new()),
        }
    }

    /// This instance's owner id.
    pub fn owner(&self) -> &str {
        &self.owner
    }

    fn record_key(&self, key: &ExecutionKey, fire_us: i64) -> Vec<u8> {
        self.keys.execution(key.service.as_str(), key.group.as_str(), key.job.as_str(), fire_us).into_vec()
    }

    fn slot_key(&self, key: &ExecutionKey) -> Vec<u8> {
        self.keys.execution_slot(key.service.as_str(), key.group.as_str(), key.job.as_str()).into_vec()
    }

    /// Asks to run the fire `request.key`: granted when no record of it exists, or when its
    /// running owner was seen silent for its whole lease; under `PerJob` also only when no
    /// other fire of the job runs (or its owner was seen silent as long).
    ///
    /// # Errors
    /// `SCHEDULING_VALIDATION_001` for a lease of zero or over [`EXECUTION_LEASE_MAX`], or
    /// texts over [`EXECUTION_TEXT_LEN_MAX`]; `SCHEDULING_UNAVAILABLE_003` when the store
    /// cannot be reached (nothing was granted; a commit reported ambiguous may have written
    /// the record after all: asked again, this instance recognises it as its own and is
    /// granted; never asked again, it lapses after its lease, as an owner that died would);
    /// `SCHEDULING_UNEXPECTED_001` for corrupt stored data.
    pub async fn try_begin(&self, request: &ExecutionRequest) -> Result<Decision, SchedulingError> {
        request.validate()?;
        let key = &request.key;
        let grant = |execution_id, takeover_of| Execution {
            execution_id,
            key: key.clone(),
            mode: request.mode,
            lease: request.lease,
            takeover_of,
        };
        if request.mode == UniqueMode::Disabled {
            return Ok(Decision::Granted(grant(None, None)));
        }
        let now = self.clock.now();
        let started = self.clock.monotonic();
        let id = self.ids.lock().next_id(now);
        let record_key = self.record_key(key, key.fire_us());
        let slot_key = self.slot_key(key);
        let watch = self.watch.lock().clone();
        let mut unanswered = self.unanswered.lock().remove(&record_key).unwrap_or_default();
        let record = ExecutionRecord {
            execution_id: id,
            key: key.clone(),
            job_name: request.job_name.clone(),
            fire_instance_id: request.fire_instance_id.clone(),
            mode: request.mode,
            owner: self.owner.clone(),
            status: ExecutionStatus::Running,
            started_at: now,
            completed_at: None,
            lease: request.lease,
            lease_expires_at: add_duration(now, request.lease),
            heartbeats: 0,
            takeover_of: None,
            error_message: None,
        };
        let earlier_ids = &unanswered.execution_ids;
        let (record_key, slot_key, watch, record) = (&record_key, &slot_key, &watch, &record);
        let attempt = run(&self.kv, self.retry, |txn, maybe| async move {
            let current = read_record(&txn, record_key).await?;
            if let Some(current) = &current {
                let own_attempt = current.execution_id == id && maybe.0;
                let own_earlier_call = earlier_ids.contains(&current.execution_id);
                if (own_attempt || own_earlier_call) && current.status == ExecutionStatus::Running {
                    // An earlier attempt (or call) whose commit was reported ambiguous
                    // committed after all: the execution is this instance's.
                    let takeover_of = current.takeover_of;
                    return Ok::<_, StoreError>(Attempt::Granted { id: current.execution_id, takeover_of });
                }
                match current.status {
                    ExecutionStatus::Succeeded | ExecutionStatus::Failed => {
                        return Ok(Attempt::Declined(Box::new(Declined::AlreadyRan(current.clone()))));
                    }
                    ExecutionStatus::Running => {
                        let version = version_of(current);
                        if !watch.lapsed(record_key, &version, current.lease, started) {
                            let check_again_in = watch.remaining(record_key, &version, current.lease, started);
                            return Ok(Attempt::Declined(Box::new(Declined::Running {
                                record: current.clone(),
                                check_again_in,
                            })));
                        }
                    }
                }
            }
            if request.mode == UniqueMode::PerJob {
                if let Some(slot) = txn.get(slot_key, false).await? {
                    let slot: ExecutionSlot = codec::decode(&slot, "execution slot")?;
                    if slot.fire_us != key.fire_us() {
                        let holder_key = self.record_key(key, slot.fire_us);
                        let holder = read_record(&txn, &holder_key).await?;
                        if let Some(mut holder) = holder
                            .filter(|h| h.execution_id == slot.execution_id && h.status == ExecutionStatus::Running)
                        {
                            let version = version_of(&holder);
                            if !watch.lapsed(&holder_key, &version, holder.lease, started) {
                                let check_again_in = watch.remaining(&holder_key, &version, holder.lease, started);
                                return Ok(Attempt::Declined(Box::new(Declined::JobBusy {
                                    record: holder,
                                    check_again_in,
                                })));
                            }
                            holder.status = ExecutionStatus::Failed;
                            holder.completed_at = Some(now);
                            holder.error_message = Some(format!(
                                "abandoned: no heartbeat for its whole lease; the job was taken over for its fire {} by '{}'",
                                key.scheduled_at.to_rfc3339(),
                                self.owner
                            ));
                            txn.set_owned(&holder_key, codec::encode(&holder));
                        }
                    }
                }
                txn.set_owned(slot_key, codec::encode(&ExecutionSlot { execution_id: id, fire_us: key.fire_us() }));
            }
            let takeover_of = current.map(|c| c.execution_id);
            txn.set_owned(record_key, codec::encode(&ExecutionRecord { takeover_of, ..record.clone() }));
            Ok(Attempt::Granted { id, takeover_of })
        })
        .await;
        let attempt = match attempt {
            Ok(attempt) => attempt,
            Err(error) => {
                if matches!(error, StoreError::Kv(_)) {
                    if unanswered.execution_ids.len() == UNANSWERED_MAX {
                        unanswered.execution_ids.remove(0);
                    }
                    unanswered.execution_ids.push(id);
                    unanswered.lease = request.lease;
                    unanswered.since = Some(started);
                    let mut all = self.unanswered.lock();
                    // Forgotten two leases on: the record, if written, has lapsed for all.
                    all.retain(|_, u| {
                        u.since
                            .is_some_and(|since| started.saturating_duration_since(since) <= u.lease.saturating_mul(2))
                    });
                    all.insert(record_key.clone(), unanswered);
                }
                return Err(error.into());
            }
        };
        // A record seen may have been written after `started` (while this attempt's read
        // was on its way, or between retries): its timing starts now, never earlier.
        let seen = self.clock.monotonic();
        let mut watch = self.watch.lock();
        // An instance declined once may never ask about that fire again.
        watch.forget_stale(started);
        match attempt {
            Attempt::Granted { id, takeover_of } => {
                watch.forget(record_key.as_slice());
                Ok(Decision::Granted(grant(Some(id), takeover_of)))
            }
            Attempt::Declined(declined) => {
                let watched = match declined.as_ref() {
                    Declined::AlreadyRan(_) => None,
                    Declined::Running { record, .. } => Some((record_key.clone(), record)),
                    Declined::JobBusy { record, .. } => {
                        Some((self.record_key(&record.key, record.key.fire_us()), record))
                    }
                };
                match watched {
                    Some((watched_key, record)) => watch.observe(watched_key, version_of(record), record.lease, seen),
                    None => watch.forget(record_key.as_slice()),
                }
                Ok(Decision::Declined(*declined))
            }
        }
    }

    /// Tells the other instances `execution` is alive: its record changes, so observers
    /// start timing its lease again. Heartbeat well within the lease.
    ///
    /// # Errors
    /// `SCHEDULING_CONFLICT_002` when another instance took the execution over (stop the
    /// work: it runs there now); `SCHEDULING_UNAVAILABLE_003` when the store cannot be
    /// reached (nothing changed: try again before the lease lapses).
    pub async fn heartbeat(&self, execution: &Execution) -> Result<(), SchedulingError> {
        let Some(id) = execution.execution_id else { return Ok(()) };
        let now = self.clock.now();
        let record_key = self.record_key(&execution.key, execution.key.fire_us());
        let record_key = &record_key;
        let ours = run(&self.kv, self.retry, |txn, _| async move {
            match read_record(&txn, record_key).await? {
                Some(mut record) if record.execution_id == id && record.status == ExecutionStatus::Running => {
                    record.heartbeats += 1;
                    record.lease_expires_at = add_duration(now, record.lease);
                    txn.set_owned(record_key, codec::encode(&record));
                    Ok::<_, StoreError>(true)
                }
                _ => Ok(false),
            }
        })
        .await?;
        if ours {
            Ok(())
        } else {
            Err(taken_over(execution))
        }
    }

    /// Records that `execution` ended well.
    ///
    /// # Errors
    /// As [`fail`](Self::fail).
    pub async fn succeed(&self, execution: &Execution) -> Result<(), SchedulingError> {
        self.finish(execution, None).await
    }

    /// Records that `execution` ended with `error` (kept up to
    /// [`ERROR_MESSAGE_LEN_MAX`] bytes, cut at a character boundary).
    ///
    /// # Errors
    /// `SCHEDULING_CONFLICT_002` when the execution is no longer this instance's to finish:
    /// another instance took it over (its outcome, not this one, will be recorded), or it
    /// was finished already with another outcome; `SCHEDULING_UNAVAILABLE_003` when the
    /// store cannot be reached (call again: a repeated call after an ambiguous commit
    /// finds its own outcome and succeeds).
    pub async fn fail(&self, execution: &Execution, error: &str) -> Result<(), SchedulingError> {
        self.finish(execution, Some(bounded(error, ERROR_MESSAGE_LEN_MAX))).await
    }

    async fn finish(&self, execution: &Execution, error: Option<String>) -> Result<(), SchedulingError> {
        let Some(id) = execution.execution_id else { return Ok(()) };
        let now = self.clock.now();
        let record_key = self.record_key(&execution.key, execution.key.fire_us());
        let slot_key = self.slot_key(&execution.key);
        let (record_key, slot_key, error) = (&record_key, &slot_key, &error);
        let status = if error.is_some() { ExecutionStatus::Failed } else { ExecutionStatus::Succeeded };
        let ours = run(&self.kv, self.retry, |txn, _| async move {
            let Some(mut record) = read_record(&txn, record_key).await? else { return Ok::<_, StoreError>(false) };
            if record.execution_id != id {
                return Ok(false);
            }
            if record.status != ExecutionStatus::Running {
                // This outcome, recorded by an earlier attempt or call whose commit was
                // reported ambiguous (idempotent), or another: marked abandoned by a
                // `PerJob` takeover.
                return Ok(record.status == status && record.error_message == *error);
            }
            record.status = status;
            record.completed_at = Some(now);
            record.error_message.clone_from(error);
            txn.set_owned(record_key, codec::encode(&record));
            if execution.mode == UniqueMode::PerJob {
                let slot = txn.get(slot_key, false).await?;
                let slot: Option<ExecutionSlot> = slot.map(|s| codec::decode(&s, "execution slot")).transpose()?;
                if slot.is_some_and(|s| s.execution_id == id) {
                    txn.clear(slot_key);
                }
            }
            Ok(true)
        })
        .await?;
        if ours {
            Ok(())
        } else {
            Err(taken_over(execution))
        }
    }

    /// The record of the fire `key`, if any (a snapshot read).
    ///
    /// # Errors
    /// `SCHEDULING_UNAVAILABLE_003` when the store cannot be reached;
    /// `SCHEDULING_UNEXPECTED_001` for corrupt stored data.
    pub async fn record(&self, key: &ExecutionKey) -> Result<Option<ExecutionRecord>, SchedulingError> {
        let record_key = self.record_key(key, key.fire_us());
        let record_key = &record_key;
        Ok(run(&self.kv, self.retry, |txn, _| async move {
            match txn.get(record_key, true).await? {
                Some(bytes) => Ok::<_, StoreError>(Some(codec::decode::<ExecutionRecord>(&bytes, "execution record")?)),
                None => Ok(None),
            }
        })
        .await?)
    }

    /// The job's most recent execution records, newest fire first, at most `limit`.
    ///
    /// # Errors
    /// As [`record`](Self::record).
    pub async fn records(
        &self,
        service: &ServiceName,
        group: &GroupName,
        job: &JobName,
        limit: usize,
    ) -> Result<Vec<ExecutionRecord>, SchedulingError> {
        let (begin, end) = self.keys.executions_of(service.as_str(), group.as_str(), job.as_str());
        let request = RangeRequest::new(begin, end).limit(limit).reversed();
        let request = &request;
        Ok(run(&self.kv, self.retry, |txn, _| async move {
            let range = txn.get_range(request, true).await?;
            range
                .pairs
                .iter()
                .map(|(_, bytes)| codec::decode::<ExecutionRecord>(bytes, "execution record"))
                .collect::<Result<Vec<_>, StoreError>>()
        })
        .await?)
    }

    /// Deletes up to `limit` of the job's completed records whose fire is before `before`
    /// (running ones stay), oldest first; returns how many it deleted. Records are never
    /// deleted otherwise: call it now and then with the history you want kept, until it
    /// returns less than `limit`. A fire whose record is gone may run again if its trigger
    /// source sends it again.
    ///
    /// # Errors
    /// As [`record`](Self::record).
    pub async fn forget_before(
        &self,
        service: &ServiceName,
        group: &GroupName,
        job: &JobName,
        before: DateTime<Utc>,
        limit: usize,
    ) -> Result<usize, SchedulingError> {
        let (begin, _) = self.keys.executions_of(service.as_str(), group.as_str(), job.as_str());
        let end = self.keys.execution(service.as_str(), group.as_str(), job.as_str(), to_micros(before)).into_vec();
        let request = RangeRequest::new(begin, end).limit(limit);
        let request = &request;
        Ok(run(&self.kv, self.retry, |txn, _| async move {
            // Serializable: an owner completing or a takeover meanwhile conflicts with this.
            let range = txn.get_range(request, false).await?;
            let mut deleted = 0;
            for (key, bytes) in &range.pairs {
                let record: ExecutionRecord = codec::decode(bytes, "execution record")?;
                if record.status != ExecutionStatus::Running {
                    txn.clear(key);
                    deleted += 1;
                }
            }
            Ok::<_, StoreError>(deleted)
        })
        .await?)
    }
}

/// The record at `key`, read serializably.
async fn read_record<T: KvTransaction>(txn: &T, key: &[u8]) -> Result<Option<ExecutionRecord>, StoreError> {
    txn.get(key, false).await?.map(|bytes| codec::decode(&bytes, "execution record")).transpose()
}

fn taken_over(execution: &Execution) -> SchedulingError {
    SchedulingError::LeaseHeld { resource: format!("execution {}", execution.key) }
}
