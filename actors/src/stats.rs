//! Counters of a node's engine, read by metrics exporters (the `sundial` binary's
//! `/metrics`, or an embedder's own). Counting never affects scheduling.

use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use sundial::kv::{Kv, KvError};
use sundial::time::MonotonicInstant;

/// Which store operation failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum StoreOp {
    /// Acquiring due triggers.
    Acquire,
    /// Writing the heartbeat (and reading the node's cancel requests with it).
    Heartbeat,
    /// Reading local jobs, or recording a local run.
    LocalJobs,
    /// Writing code jobs at start.
    SyncCodeJobs,
    /// Recording a run's end.
    Complete,
    /// Reclaiming an earlier process's runs.
    Reclaim,
}

impl StoreOp {
    /// Every operation, in a fixed order.
    pub const ALL: [StoreOp; 6] = [
        StoreOp::Acquire,
        StoreOp::Heartbeat,
        StoreOp::LocalJobs,
        StoreOp::SyncCodeJobs,
        StoreOp::Complete,
        StoreOp::Reclaim,
    ];

    /// A stable label.
    pub fn as_str(self) -> &'static str {
        match self {
            StoreOp::Acquire => "acquire",
            StoreOp::Heartbeat => "heartbeat",
            StoreOp::LocalJobs => "local_jobs",
            StoreOp::SyncCodeJobs => "sync_code_jobs",
            StoreOp::Complete => "complete",
            StoreOp::Reclaim => "reclaim",
        }
    }
}

/// Where a node's engine spends its time (see [`EngineCounters::time_in`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum EngineWork {
    /// Acquisition transactions (the poller waits for each).
    Acquire,
    /// Recording runs' ends (the completer's batches, with their retries).
    Complete,
    /// Starting run actors for acquired runs (the poller waits for each).
    StartRun,
}

impl EngineWork {
    /// Every kind, in a fixed order.
    pub const ALL: [EngineWork; 3] = [EngineWork::Acquire, EngineWork::Complete, EngineWork::StartRun];

    /// A stable label.
    pub fn as_str(self) -> &'static str {
        match self {
            EngineWork::Acquire => "acquire",
            EngineWork::Complete => "complete",
            EngineWork::StartRun => "start_run",
        }
    }
}

/// The live counters.
#[derive(Debug, Default)]
pub(crate) struct EngineStats {
    acquisitions: AtomicU64,
    skipped: AtomicU64,
    steal_reads: AtomicU64,
    acquired: AtomicU64,
    stolen: AtomicU64,
    store_errors: [AtomicU64; StoreOp::ALL.len()],
    /// Microseconds on the node's monotonic clock, per [`EngineWork`].
    time_us: [AtomicU64; EngineWork::ALL.len()],
}

impl EngineStats {
    /// An acquisition committed, taking `acquired` fires, `stolen` of them from other
    /// nodes' shards.
    pub(crate) fn acquisition(&self, acquired: usize, stolen: usize) {
        self.acquisitions.fetch_add(1, Ordering::Relaxed);
        self.acquired.fetch_add(acquired as u64, Ordering::Relaxed);
        self.stolen.fetch_add(stolen as u64, Ordering::Relaxed);
    }

    /// A cycle left the due index unread: what it knew said nothing was due.
    pub(crate) fn acquisition_skipped(&self) {
        self.skipped.fetch_add(1, Ordering::Relaxed);
    }

    /// An acquisition read the other nodes' shards too (for late fires to steal).
    pub(crate) fn steal_read(&self) {
        self.steal_reads.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn store_error(&self, op: StoreOp) {
        let index = StoreOp::ALL.iter().position(|o| *o == op).unwrap_or(0);
        self.store_errors[index].fetch_add(1, Ordering::Relaxed);
    }

    /// Adds the time from `since` to `until` (the node's monotonic clock) to `work`.
    pub(crate) fn spent(&self, work: EngineWork, since: MonotonicInstant, until: MonotonicInstant) {
        let index = EngineWork::ALL.iter().position(|w| *w == work).unwrap_or(0);
        let micros = until.saturating_duration_since(since).as_micros();
        self.time_us[index].fetch_add(u64::try_from(micros).unwrap_or(u64::MAX), Ordering::Relaxed);
    }

    pub(crate) fn snapshot(&self, running: usize, leader: bool) -> EngineCounters {
        EngineCounters {
            acquisitions: self.acquisitions.load(Ordering::Relaxed),
            acquisitions_skipped: self.skipped.load(Ordering::Relaxed),
            steal_reads: self.steal_reads.load(Ordering::Relaxed),
            acquired_triggers: self.acquired.load(Ordering::Relaxed),
            stolen_triggers: self.stolen.load(Ordering::Relaxed),
            store_errors: StoreOp::ALL
                .iter()
                .zip(&self.store_errors)
                .map(|(op, count)| (*op, count.load(Ordering::Relaxed)))
                .collect(),
            time_in: EngineWork::ALL
                .iter()
                .zip(&self.time_us)
                .map(|(work, us)| (*work, Duration::from_micros(us.load(Ordering::Relaxed))))
                .collect(),
            running,
            leader,
        }
    }
}

/// A node's counters at one moment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EngineCounters {
    /// Acquisition transactions that committed.
    pub acquisitions: u64,
    /// Cycles that did not read the due index: the node's last acquisition saw nothing due
    /// before the cycle's lookahead, and nothing that could change that had happened since
    /// (its wake key's watch had not fired, nothing changed on the node itself).
    pub acquisitions_skipped: u64,
    /// Acquisitions that also read the other nodes' shards, for fires late enough to take
    /// from them (the nodes of a cluster take turns: see [`sundial::store::steal_read_due`]).
    pub steal_reads: u64,
    /// Triggers they acquired.
    pub acquired_triggers: u64,
    /// Of those, the fires taken from other nodes' shards (late there).
    pub stolen_triggers: u64,
    /// Failed store operations (after the store's own retries), by operation.
    pub store_errors: Vec<(StoreOp, u64)>,
    /// Time spent so far in each kind of engine work, on the node's monotonic clock
    /// (under a virtual clock, virtual time): where a busy node's time goes. Waits inside
    /// the work count too (a slow store's latency, a completion's retries).
    pub time_in: Vec<(EngineWork, Duration)>,
    /// Runs on this node now.
    pub running: usize,
    /// This node holds the leader lease.
    pub leader: bool,
}

/// A [`Kv`] that counts the transactions its retry loop had to run again (after a
/// conflict, or another retryable error such as an ambiguous commit): the store's
/// contention, for metrics.
#[derive(Debug, Clone)]
pub struct RetryCountingKv<K> {
    inner: K,
    retries: Arc<AtomicU64>,
}

impl<K: Kv> RetryCountingKv<K> {
    /// Wraps `inner`.
    pub fn new(inner: K) -> Self {
        Self { inner, retries: Arc::new(AtomicU64::new(0)) }
    }

    /// Retries so far, over every clone of this wrapper.
    pub fn retries(&self) -> u64 {
        self.retries.load(Ordering::Relaxed)
    }

    /// The counter itself, to read after the store took ownership of the wrapper.
    pub fn retry_counter(&self) -> Arc<AtomicU64> {
        self.retries.clone()
    }
}

impl<K: Kv> Kv for RetryCountingKv<K> {
    type Transaction = K::Transaction;

    fn create_transaction(&self) -> Result<Self::Transaction, KvError> {
        self.inner.create_transaction()
    }

    fn backoff(&self, attempt: u32, max: Duration) -> impl Future<Output = ()> + Send {
        // The retry loop backs off exactly once before each retry.
        self.retries.fetch_add(1, Ordering::Relaxed);
        self.inner.backoff(attempt, max)
    }

    fn monotonic_now(&self) -> MonotonicInstant {
        self.inner.monotonic_now()
    }

    fn split_hint(&self, keys: &[Vec<u8>]) {
        self.inner.split_hint(keys);
    }
}
