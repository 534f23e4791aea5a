//! `FdbKv`: the core's [`Kv`] on FoundationDB through the `foundationdb` crate (API 7.3).
//!
//! Every store algorithm of `sundial::store` runs on this unchanged; the semantics it relies
//! on are FoundationDB's own, which `MemoryKv` emulates for tests. The host starts the
//! network thread once per process with `foundationdb::boot()` (re-exported here as
//! [`foundationdb`]; it is `unsafe`, and this workspace forbids unsafe code) and keeps its
//! guard alive while the database is used.
//!
//! Where the client's answers differ from the [`Kv`] contract, the adapter gives the
//! contract's: a transaction that waits on the cluster longer than its timeout
//! ([`TRANSACTION_TIMEOUT`] unless the host chose another) fails with 1031 (the client
//! alone would retry forever), a range limited to 0 keys or inverted reads nothing, and a
//! read-only commit reports its read version.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use foundationdb::options::{ConflictRangeType, DatabaseOption, MutationType, StreamingMode};
use foundationdb::{Database, FdbError, RangeOption, Transaction};
use parking_lot::Mutex;
use sundial::kv::{kv_pair, AtomicOp, CommitInfo, Kv, KvError, KvTransaction, RangeRequest, RangeResult, Version};
use sundial::time::{Clock, MonotonicInstant};

pub use foundationdb;

/// How long a transaction may wait on the cluster, unless the host says otherwise
/// ([`FdbKv::open_with_timeout`]; the node's `[store] transaction_timeout_seconds`),
/// before it fails with `transaction_timed_out` (1031), the store's "unavailable":
/// without a timeout, FoundationDB's client retries an unreachable cluster forever and
/// the node would hang in its poll cycle, lease renewal or completion instead of handling
/// the outage. Longer than the five seconds after which a live cluster fails a
/// transaction with the retryable `transaction_too_old` (1007), so only a cluster that
/// does not answer hits it.
pub const TRANSACTION_TIMEOUT: Duration = Duration::from_secs(10);

fn kv_error(e: FdbError) -> KvError {
    KvError::with_message(e.code(), e.to_string())
}

/// A FoundationDB database as a [`Kv`].
#[derive(Clone)]
pub struct FdbKv {
    db: Arc<Database>,
    clock: Arc<dyn Clock>,
}

impl std::fmt::Debug for FdbKv {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FdbKv").finish_non_exhaustive()
    }
}

impl FdbKv {
    /// Opens the cluster named by `cluster_file` (the default cluster file when `None`),
    /// with [`TRANSACTION_TIMEOUT`] as every transaction's timeout. `clock` times retry
    /// timeouts.
    ///
    /// # Errors
    /// The client's error when the database cannot be opened or the timeout not set.
    pub fn open(cluster_file: Option<&str>, clock: Arc<dyn Clock>) -> Result<Self, KvError> {
        Self::open_with_timeout(cluster_file, TRANSACTION_TIMEOUT, clock)
    }

    /// As [`FdbKv::open`], with `timeout` as every transaction's timeout: a transaction
    /// (its reads, its commit, or a watch it armed) that has not finished `timeout` after
    /// it began fails with 1031, which the job store reports as unavailable. A timeout of
    /// zero or beyond FoundationDB's limit (about 24 days) is refused rather than taken as
    /// "no timeout".
    ///
    /// # Errors
    /// [`KvError`] with code 2006 (`invalid_option_value`) for such a timeout; the
    /// client's error when the database cannot be opened or the timeout not set.
    pub fn open_with_timeout(
        cluster_file: Option<&str>,
        timeout: Duration,
        clock: Arc<dyn Clock>,
    ) -> Result<Self, KvError> {
        let millis = i32::try_from(timeout.as_millis()).ok().filter(|&ms| ms > 0).ok_or_else(|| {
            KvError::with_message(2006, format!("a transaction timeout of {timeout:?} is not from 1 ms to 24 days"))
        })?;
        let db = Database::new(cluster_file).map_err(kv_error)?;
        db.set_option(DatabaseOption::TransactionTimeout(millis)).map_err(kv_error)?;
        Ok(Self { db: Arc::new(db), clock })
    }
}

impl Kv for FdbKv {
    type Transaction = FdbTransaction;

    fn create_transaction(&self) -> Result<FdbTransaction, KvError> {
        let txn = self.db.create_trx().map_err(kv_error)?;
        Ok(FdbTransaction { inner: Arc::new(Mutex::new(Inner { txn: Some(txn), error: None, stamped: false })) })
    }

    fn backoff(&self, attempt: u32, max: Duration) -> impl Future<Output = ()> + Send {
        // FDB's own on_error backoff: 10 ms doubling, capped.
        let delay = Duration::from_millis(10).saturating_mul(1 << attempt.saturating_sub(1).min(16)).min(max);
        tokio::time::sleep(delay)
    }

    fn monotonic_now(&self) -> MonotonicInstant {
        self.clock.monotonic()
    }
}

struct Inner {
    /// `None` once committed.
    txn: Option<Transaction>,
    /// An error from a call that returns nothing, reported at commit.
    error: Option<KvError>,
    /// A versionstamped operation was used: fetch the stamp at commit.
    stamped: bool,
}

/// A FoundationDB transaction; clones are handles to the same one.
#[derive(Clone)]
pub struct FdbTransaction {
    inner: Arc<Mutex<Inner>>,
}

impl std::fmt::Debug for FdbTransaction {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FdbTransaction").finish_non_exhaustive()
    }
}

fn used_after_commit() -> KvError {
    KvError::new(KvError::USED_DURING_COMMIT)
}

impl FdbTransaction {
    fn lock(&self) -> parking_lot::MutexGuard<'_, Inner> {
        self.inner.lock()
    }

    fn with<T>(&self, f: impl FnOnce(&Transaction) -> T) -> Result<T, KvError> {
        let inner = self.lock();
        inner.txn.as_ref().map(f).ok_or_else(used_after_commit)
    }

    fn write(&self, f: impl FnOnce(&Transaction)) {
        let inner = self.lock();
        if let Some(txn) = inner.txn.as_ref() {
            f(txn);
        }
    }
}

fn mutation(op: AtomicOp) -> MutationType {
    match op {
        AtomicOp::Add => MutationType::Add,
        AtomicOp::BitAnd => MutationType::BitAnd,
        AtomicOp::BitOr => MutationType::BitOr,
        AtomicOp::BitXor => MutationType::BitXor,
        AtomicOp::Max => MutationType::Max,
        AtomicOp::Min => MutationType::Min,
        AtomicOp::ByteMax => MutationType::ByteMax,
        AtomicOp::ByteMin => MutationType::ByteMin,
        AtomicOp::CompareAndClear => MutationType::CompareAndClear,
        AtomicOp::SetVersionstampedKey => MutationType::SetVersionstampedKey,
        AtomicOp::SetVersionstampedValue => MutationType::SetVersionstampedValue,
    }
}

impl KvTransaction for FdbTransaction {
    fn read_version(&self) -> impl Future<Output = Result<Version, KvError>> + Send {
        let future = self.with(|t| t.get_read_version());
        async move { future?.await.map_err(kv_error) }
    }

    fn get(&self, key: &[u8], snapshot: bool) -> impl Future<Output = Result<Option<Vec<u8>>, KvError>> + Send {
        let future = self.with(|t| t.get(key, snapshot));
        async move { Ok(future?.await.map_err(kv_error)?.map(|slice| slice.to_vec())) }
    }

    fn get_range(
        &self,
        request: &RangeRequest,
        snapshot: bool,
    ) -> impl Future<Output = Result<RangeResult, KvError>> + Send {
        let this = self.clone();
        let request = request.clone();
        async move {
            // The contract's empty reads, which FoundationDB's client would not give: it
            // takes a limit of 0 for "no limit" and refuses an inverted range (2005).
            if request.begin >= request.end || request.limit == Some(0) {
                return Ok(RangeResult::default());
            }
            let mut option = RangeOption::from((request.begin.as_slice(), request.end.as_slice()));
            option.limit = request.limit;
            option.reverse = request.reverse;
            option.mode = if request.limit.is_some() { StreamingMode::Exact } else { StreamingMode::WantAll };
            let mut result = RangeResult::default();
            let mut iteration = 1;
            loop {
                let future = this.with(|t| t.get_range(&option, iteration, snapshot))?;
                let values = future.await.map_err(kv_error)?;
                result.pairs.extend(values.iter().map(|kv| kv_pair(kv.key(), kv.value())));
                let limit_reached = request.limit.is_some_and(|limit| result.pairs.len() >= limit);
                if !values.more() || limit_reached {
                    result.more = values.more();
                    return Ok(result);
                }
                match option.next_range(&values) {
                    Some(next) => option = next,
                    None => return Ok(result),
                }
                iteration += 1;
            }
        }
    }

    fn set(&self, key: &[u8], value: &[u8]) {
        self.write(|t| t.set(key, value));
    }

    fn clear(&self, key: &[u8]) {
        self.write(|t| t.clear(key));
    }

    fn clear_range(&self, begin: &[u8], end: &[u8]) {
        // An empty or inverted range clears nothing (FoundationDB refuses the inverted one).
        if begin < end {
            self.write(|t| t.clear_range(begin, end));
        }
    }

    fn atomic_op(&self, key: &[u8], param: &[u8], op: AtomicOp) {
        let mut inner = self.lock();
        if matches!(op, AtomicOp::SetVersionstampedKey | AtomicOp::SetVersionstampedValue) {
            inner.stamped = true;
        }
        if let Some(txn) = inner.txn.as_ref() {
            txn.atomic_op(key, param, mutation(op));
        }
    }

    fn add_read_conflict_range(&self, begin: &[u8], end: &[u8]) {
        self.add_conflict(begin, end, ConflictRangeType::Read);
    }

    fn add_write_conflict_range(&self, begin: &[u8], end: &[u8]) {
        self.add_conflict(begin, end, ConflictRangeType::Write);
    }

    fn commit(&self) -> impl Future<Output = Result<CommitInfo, KvError>> + Send {
        let taken = {
            let mut inner = self.lock();
            match (inner.error.take(), inner.txn.take()) {
                (Some(error), _) => Err(error),
                (None, None) => Err(used_after_commit()),
                (None, Some(txn)) => Ok((txn, inner.stamped)),
            }
        };
        async move {
            let (txn, stamped) = taken?;
            let stamp = stamped.then(|| txn.get_versionstamp());
            // Asked before the commit takes the transaction: the version its reads used
            // (nothing more to fetch), or for a blind write one more read-version request.
            let read_version = txn.get_read_version();
            let committed = txn.commit().await.map_err(|e| kv_error(FdbError::from(e)))?;
            let mut version = committed.committed_version().map_err(kv_error)?;
            if version < 0 {
                // FoundationDB reports -1 for a read-only transaction; the contract, its
                // read version.
                version = read_version.await.map_err(kv_error)?;
            }
            let versionstamp = match stamp {
                None => None,
                Some(future) => {
                    let bytes = future.await.map_err(kv_error)?;
                    let stamp = <[u8; 10]>::try_from(&bytes[..]).map_err(|_| {
                        KvError::with_message(
                            KvError::CLIENT_INVALID_OPERATION,
                            format!("a versionstamp of {} bytes, not 10", bytes.len()),
                        )
                    })?;
                    Some(stamp)
                }
            };
            // The transaction outlives the futures read from it above.
            drop(committed);
            Ok(CommitInfo { version, versionstamp })
        }
    }

    fn watch(&self, key: &[u8]) -> impl Future<Output = Result<(), KvError>> + Send + 'static {
        // The watch keeps its transaction's timeout, so arming it never waits forever on
        // a cluster that does not answer; a watch that outlives the timeout fails, and
        // the poller arms another at its next cycle (re-reading its shards meanwhile).
        let future = self.with(|t| t.watch(key));
        async move { future?.await.map_err(kv_error) }
    }
}

impl FdbTransaction {
    fn add_conflict(&self, begin: &[u8], end: &[u8], kind: ConflictRangeType) {
        // An empty or inverted range adds no conflict (FoundationDB refuses the inverted one).
        if begin >= end {
            return;
        }
        let mut inner = self.lock();
        let result = inner.txn.as_ref().map(|t| t.add_conflict_range(begin, end, kind));
        if let Some(Err(e)) = result {
            inner.error.get_or_insert(kv_error(e));
        }
    }
}
