//! The key-value boundary: a transaction API with FoundationDB's shape and semantics.
//!
//! Every store algorithm is written once over [`Kv`] and runs unchanged on
//! [`memory::MemoryKv`] (the in-process emulator, the embedded default and the simulator's
//! store) and on FoundationDB (`FdbKv` in the `actors` crate). The contract is FDB's:
//!
//! - a transaction reads at one **read version**, fixed at its first read;
//! - it sees its own writes (**read-your-writes**), in point and range reads, snapshot or not;
//! - at commit it fails with [`KvError::NOT_COMMITTED`] (1020) if a key or range it read
//!   *serializably* was written by a transaction that committed after its read version;
//!   snapshot reads add no conflict; a limited range read conflicts only up to the last
//!   key it returned; keys the transaction wrote itself add no read conflict;
//! - write-only transactions and atomic operations never conflict;
//! - a transaction older than five seconds of versions fails with
//!   [`KvError::TRANSACTION_TOO_OLD`] (1007);
//! - [`KvError::COMMIT_UNKNOWN_RESULT`] (1021) means the commit may or may not have
//!   happened, and [`KvError::TRANSACTION_TIMED_OUT`] (1031) that it may still happen later;
//! - keys ≤ 10,000 bytes, values ≤ 100,000 bytes, transactions ≤ 10,000,000 bytes.
//!
//! [`run`] is the retry loop (FoundationDB's `Database::run`): it re-runs a closure on
//! retryable errors with backoff, up to a retry limit and a timeout, and tells the
//! closure when an earlier attempt may have committed so it can check for its own marker.

pub mod atomic;
mod buffer;
#[cfg(feature = "embedded")]
pub mod embedded;
pub mod journal;
mod key_map;
pub mod memory;
#[cfg(feature = "postgres")]
pub mod postgres;
mod write_set;

use std::borrow::Cow;
use std::fmt;
use std::future::Future;
use std::time::Duration;

pub use atomic::AtomicOp;

use crate::time::MonotonicInstant;

/// A database version: commit versions increase by about 1,000,000 per second.
pub type Version = i64;

/// The longest key, in bytes.
pub const KEY_SIZE_MAX: usize = 10_000;
/// The longest value, in bytes.
pub const VALUE_SIZE_MAX: usize = 100_000;
/// The most bytes one transaction may write (keys, values, cleared ranges, conflict ranges).
pub const TRANSACTION_SIZE_MAX: usize = 10_000_000;
/// How many versions a transaction may live (five seconds).
pub const TRANSACTION_LIFE_VERSIONS_MAX: Version = 5_000_000;
/// Versions per second of wall time.
pub const VERSIONS_PER_SECOND: Version = 1_000_000;

/// An error from the key-value store, carrying FoundationDB's numeric code.
#[derive(Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message} (kv error {code})")]
pub struct KvError {
    code: i32,
    message: Cow<'static, str>,
}

impl fmt::Debug for KvError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "KvError({}: {})", self.code, self.message)
    }
}

impl KvError {
    /// 1007: the transaction is older than five seconds of versions.
    pub const TRANSACTION_TOO_OLD: i32 = 1007;
    /// 1009: the requested version is not yet available.
    pub const FUTURE_VERSION: i32 = 1009;
    /// 1020: a conflicting write committed after the read version.
    pub const NOT_COMMITTED: i32 = 1020;
    /// 1021: the commit may or may not have happened.
    pub const COMMIT_UNKNOWN_RESULT: i32 = 1021;
    /// 1025: the transaction was canceled.
    pub const TRANSACTION_CANCELLED: i32 = 1025;
    /// 1031: the transaction timed out; its commit may still land later.
    pub const TRANSACTION_TIMED_OUT: i32 = 1031;
    /// 1036: read of a key whose value is set at commit (a versionstamp).
    pub const ACCESSED_UNREADABLE: i32 = 1036;
    /// 1037: storage servers are behind; retry.
    pub const PROCESS_BEHIND: i32 = 1037;
    /// 1038: the database is locked; retry.
    pub const DATABASE_LOCKED: i32 = 1038;
    /// 1039: the cluster changed version during commit; may have committed.
    pub const CLUSTER_VERSION_CHANGED: i32 = 1039;
    /// 2017: the transaction was used after commit.
    pub const USED_DURING_COMMIT: i32 = 2017;
    /// 2101: the transaction wrote more than 10,000,000 bytes.
    pub const TRANSACTION_TOO_LARGE: i32 = 2101;
    /// 2102: a key longer than 10,000 bytes.
    pub const KEY_TOO_LARGE: i32 = 2102;
    /// 2103: a value longer than 100,000 bytes.
    pub const VALUE_TOO_LARGE: i32 = 2103;
    /// 2000: a caller error (bad range, bad versionstamp offset, …).
    pub const CLIENT_INVALID_OPERATION: i32 = 2000;

    /// An error with FDB's code and its standard description.
    pub fn new(code: i32) -> Self {
        let message = match code {
            Self::TRANSACTION_TOO_OLD => "Transaction is too old to perform reads or be committed",
            Self::FUTURE_VERSION => "Request for future version",
            Self::NOT_COMMITTED => "Transaction not committed due to conflict with another transaction",
            Self::COMMIT_UNKNOWN_RESULT => "Transaction may or may not have committed",
            Self::TRANSACTION_CANCELLED => "Operation aborted because the transaction was cancelled",
            Self::TRANSACTION_TIMED_OUT => "Operation aborted because the transaction timed out",
            Self::ACCESSED_UNREADABLE => "Read or wrote an unreadable key",
            Self::PROCESS_BEHIND => "Storage process does not have recent mutations",
            Self::DATABASE_LOCKED => "Database is locked",
            Self::CLUSTER_VERSION_CHANGED => "The protocol version of the cluster has changed",
            Self::USED_DURING_COMMIT => "Operation issued while a commit was outstanding",
            Self::TRANSACTION_TOO_LARGE => "Transaction exceeds byte limit",
            Self::KEY_TOO_LARGE => "Key length exceeds limit",
            Self::VALUE_TOO_LARGE => "Value length exceeds limit",
            Self::CLIENT_INVALID_OPERATION => "Invalid API call",
            _ => "Unknown error",
        };
        Self { code, message: Cow::Borrowed(message) }
    }

    /// An error with FDB's code and a more specific message.
    pub fn with_message(code: i32, message: impl Into<String>) -> Self {
        Self { code, message: Cow::Owned(message.into()) }
    }

    /// The numeric FoundationDB error code.
    pub fn code(&self) -> i32 {
        self.code
    }

    /// FDB's `maybe_committed` predicate: the transaction may have committed.
    pub fn is_maybe_committed(&self) -> bool {
        matches!(self.code, Self::COMMIT_UNKNOWN_RESULT | Self::CLUSTER_VERSION_CHANGED)
    }

    /// FDB's `retryable_not_committed` predicate: surely not committed, safe to retry.
    pub fn is_retryable_not_committed(&self) -> bool {
        matches!(
            self.code,
            Self::TRANSACTION_TOO_OLD
                | Self::FUTURE_VERSION
                | Self::NOT_COMMITTED
                | Self::PROCESS_BEHIND
                | Self::DATABASE_LOCKED
        )
    }

    /// FDB's `retryable` predicate: the retry loop may run the transaction again.
    /// Timeouts (1031) are not retryable: their commit may still land.
    pub fn is_retryable(&self) -> bool {
        self.is_maybe_committed() || self.is_retryable_not_committed()
    }
}

/// A range read: keys in `[begin, end)`, at most `limit` of them (`None` = all), in
/// descending order when `reverse`. A limit of 0, or `begin >= end`, reads nothing (and
/// adds no read conflict); likewise clearing or adding a conflict over `begin >= end` does
/// nothing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RangeRequest {
    /// First key, inclusive.
    pub begin: Vec<u8>,
    /// Last key, exclusive.
    pub end: Vec<u8>,
    /// Most pairs to return.
    pub limit: Option<usize>,
    /// Descending order.
    pub reverse: bool,
}

impl RangeRequest {
    /// All keys in `[begin, end)`, ascending.
    pub fn new(begin: impl Into<Vec<u8>>, end: impl Into<Vec<u8>>) -> Self {
        Self { begin: begin.into(), end: end.into(), limit: None, reverse: false }
    }

    /// At most `limit` pairs.
    pub fn limit(mut self, limit: usize) -> Self {
        self.limit = Some(limit);
        self
    }

    /// Descending order.
    pub fn reversed(mut self) -> Self {
        self.reverse = true;
        self
    }

    /// Every key starting with `prefix`.
    pub fn prefix(prefix: &[u8]) -> Self {
        Self::new(prefix.to_vec(), strinc(prefix))
    }
}

/// A key or a value a range read returns: inline up to 64 bytes, on the heap beyond.
/// The store's keys and its index values fit, so a read of thousands of due entries
/// copies no pair to the heap. Derefs to the bytes.
pub type KvBytes = smallvec::SmallVec<[u8; 64]>;

/// A key and its value, as a range read returns them.
pub type KvPair = (KvBytes, KvBytes);

/// How many pairs a range read makes room for at first: as many as fit in 1 KiB. Most
/// reads return a shard's first due entry or a few index keys, and a first buffer past
/// 1 KiB would cost each read a trip through the system allocator's slow path (glibc
/// keeps freed blocks per thread up to 1,032 bytes).
pub const FIRST_PAIRS: usize = 1024 / std::mem::size_of::<KvPair>();

/// `key` and `value`, copied into a [`KvPair`].
pub fn kv_pair(key: &[u8], value: &[u8]) -> KvPair {
    (KvBytes::from_slice(key), KvBytes::from_slice(value))
}

/// The pairs of a range read.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct RangeResult {
    /// Key-value pairs, in the requested order.
    pub pairs: Vec<KvPair>,
    /// Whether the limit cut the result short (more keys remain in the range).
    pub more: bool,
}

/// How many pairs a range holds, as [`KvTransaction::count_ranges`] counts them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct RangeCount {
    /// The pairs counted: at most the request's limit.
    pub count: usize,
    /// Whether the limit cut the count short (more keys remain in the range).
    pub more: bool,
}

impl RangeCount {
    /// The count of a range read's result.
    pub fn of(result: &RangeResult) -> RangeCount {
        RangeCount { count: result.pairs.len(), more: result.more }
    }
}

/// What a successful commit produced.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CommitInfo {
    /// The commit version; for a read-only transaction, its read version.
    pub version: Version,
    /// The 10-byte versionstamp, when the transaction used versionstamped operations.
    pub versionstamp: Option<[u8; 10]>,
}

/// One transaction. Handles are cheap clones of one shared transaction, as in
/// foundationdb-rs, so a retry closure can take one by value.
pub trait KvTransaction: Clone + Send + Sync + 'static {
    /// The transaction's read version, fixed by the first call or read.
    fn read_version(&self) -> impl Future<Output = Result<Version, KvError>> + Send;

    /// The value of `key`. A serializable read (`snapshot = false`) adds `key` to the read
    /// conflict set unless this transaction wrote it.
    fn get(&self, key: &[u8], snapshot: bool) -> impl Future<Output = Result<Option<Vec<u8>>, KvError>> + Send;

    /// The values of `keys`, in order, read concurrently: one round trip on a remote
    /// store rather than one per key. Each read as [`get`](Self::get) does it. Keys are
    /// anything that is bytes, so a caller need not copy keys it built inline.
    fn get_many<Q: AsRef<[u8]> + Sync>(
        &self,
        keys: &[Q],
        snapshot: bool,
    ) -> impl Future<Output = Result<Vec<Option<Vec<u8>>>, KvError>> + Send {
        futures_util::future::try_join_all(keys.iter().map(move |key| self.get(key.as_ref(), snapshot)))
    }

    /// The pairs of `request`, merged with this transaction's writes. A serializable read
    /// adds the part of the range actually read to the read conflict set.
    fn get_range(
        &self,
        request: &RangeRequest,
        snapshot: bool,
    ) -> impl Future<Output = Result<RangeResult, KvError>> + Send;

    /// The results of `requests`, in order, read concurrently: one round trip on a remote
    /// store rather than one per range. Each read as [`get_range`](Self::get_range) does it.
    fn get_ranges(
        &self,
        requests: &[RangeRequest],
        snapshot: bool,
    ) -> impl Future<Output = Result<Vec<RangeResult>, KvError>> + Send {
        futures_util::future::try_join_all(requests.iter().map(move |request| self.get_range(request, snapshot)))
    }

    /// How many pairs each of `requests` holds, in order: what [`get_ranges`](Self::get_ranges)
    /// with `snapshot = true` would return, counted (each within its limit, `more` when
    /// the limit cut it short). A snapshot read: no conflict range. A store that can count
    /// without copying the pairs out (the in-memory one) does; the others read them.
    fn count_ranges(&self, requests: &[RangeRequest]) -> impl Future<Output = Result<Vec<RangeCount>, KvError>> + Send {
        let reads = self.get_ranges(requests, true);
        async move { Ok(reads.await?.iter().map(RangeCount::of).collect()) }
    }

    /// Sets `key` to `value`.
    fn set(&self, key: &[u8], value: &[u8]);

    /// [`set`](Self::set), handing over the value's buffer: an engine that keeps values
    /// until commit keeps this one without a copy. A store writes several encoded records
    /// a fire, so the copy [`set`](Self::set) makes is an allocation a fire each.
    fn set_owned(&self, key: &[u8], value: Vec<u8>) {
        self.set(key, &value);
    }

    /// Removes `key`.
    fn clear(&self, key: &[u8]);

    /// Removes every key in `[begin, end)`.
    fn clear_range(&self, begin: &[u8], end: &[u8]);

    /// Applies an atomic operation at commit (no read conflict).
    fn atomic_op(&self, key: &[u8], param: &[u8], op: AtomicOp);

    /// Adds `[begin, end)` to the read conflict set, as if it had been read.
    fn add_read_conflict_range(&self, begin: &[u8], end: &[u8]);

    /// Adds `[begin, end)` to the write conflict set, as if it had been written.
    fn add_write_conflict_range(&self, begin: &[u8], end: &[u8]);

    /// Commits. Read-only transactions commit without checks.
    ///
    /// # Errors
    /// 1020 on conflict, 1007 when too old, 1021/1031 when the outcome is unknown, size
    /// errors 2101–2103, and whatever the store's faults inject.
    fn commit(&self) -> impl Future<Output = Result<CommitInfo, KvError>> + Send;

    /// A watch (FoundationDB's): resolves once `key`'s value differs from the value this
    /// transaction sees for it. It is armed when the transaction commits; until then it
    /// reports nothing. The future outlives the transaction; dropping it cancels the watch.
    ///
    /// # Errors
    /// The transaction's commit error, if its commit fails; 1025 when it is dropped
    /// uncommitted; other store errors while watching (the caller watches again).
    fn watch(&self, key: &[u8]) -> impl Future<Output = Result<(), KvError>> + Send + 'static;
}

/// A database: makes transactions and paces retries.
pub trait Kv: Clone + Send + Sync + 'static {
    /// This database's transactions.
    type Transaction: KvTransaction;

    /// A new transaction.
    ///
    /// # Errors
    /// When the database cannot start one (for instance, it is shut down).
    fn create_transaction(&self) -> Result<Self::Transaction, KvError>;

    /// Waits before retry number `attempt` (1-based) of a transaction that failed with
    /// `error`: exponential backoff with jitter, capped at `max`.
    fn backoff(&self, attempt: u32, max: Duration) -> impl Future<Output = ()> + Send;

    /// Now on the monotonic clock the retry loop measures its timeout with.
    fn monotonic_now(&self) -> MonotonicInstant;

    /// A layout hint: the keys where subspaces of very different size and use begin (a
    /// few thousand keys every transaction reads beside millions of history records). A
    /// database may keep the ranges between them apart; nothing a reader sees changes.
    /// The default ignores it (FoundationDB places its shards by load).
    fn split_hint(&self, keys: &[Vec<u8>]) {
        let _ = keys;
    }
}

/// How [`run`] retries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetryOptions {
    /// Retries after the first attempt, at most.
    pub retry_limit: u32,
    /// Give up (with 1031) once this much monotonic time has passed since the start.
    pub timeout: Option<Duration>,
    /// The longest backoff between attempts.
    pub backoff_max: Duration,
}

impl Default for RetryOptions {
    /// 20 retries, no timeout, backoff up to 500 ms (the research's database defaults).
    fn default() -> Self {
        Self { retry_limit: 20, timeout: None, backoff_max: Duration::from_millis(500) }
    }
}

/// Whether an earlier attempt of this transaction may have committed (it ended in 1021).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MaybeCommitted(pub bool);

/// An error type the retry loop can look into for a store error.
pub trait AsKvError {
    /// The store error inside, if any.
    fn as_kv_error(&self) -> Option<&KvError>;
}

impl AsKvError for KvError {
    fn as_kv_error(&self) -> Option<&KvError> {
        Some(self)
    }
}

/// Runs `body` in a transaction and commits it, retrying on retryable store errors with
/// backoff, like FoundationDB's `Database::run`.
///
/// `body` may run more than once, so it must be idempotent: generate ids outside, and when
/// [`MaybeCommitted`] is true check for the effect of an earlier attempt first. An error
/// that is not a retryable [`KvError`] ends the loop at once. When `retry_limit` retries
/// are used up the last error is returned; when the timeout passes, 1031.
///
/// # Errors
/// The body's error, the commit's error, or 1031 on timeout.
pub async fn run<K, F, Fut, T, E>(kv: &K, options: RetryOptions, mut body: F) -> Result<T, E>
where
    K: Kv,
    F: FnMut(K::Transaction, MaybeCommitted) -> Fut,
    Fut: Future<Output = Result<T, E>>,
    E: From<KvError> + AsKvError,
{
    let started = kv.monotonic_now();
    let mut maybe_committed = false;
    let mut attempt = 0u32;
    loop {
        let txn = kv.create_transaction()?;
        let error = match body(txn.clone(), MaybeCommitted(maybe_committed)).await {
            Ok(value) => match txn.commit().await {
                Ok(_) => return Ok(value),
                Err(error) => E::from(error),
            },
            Err(error) => error,
        };
        let retryable = error.as_kv_error().is_some_and(KvError::is_retryable);
        if !retryable || attempt >= options.retry_limit {
            return Err(error);
        }
        if error.as_kv_error().is_some_and(KvError::is_maybe_committed) {
            maybe_committed = true;
        }
        attempt += 1;
        if let Some(timeout) = options.timeout {
            if kv.monotonic_now().saturating_duration_since(started) >= timeout {
                return Err(E::from(KvError::new(KvError::TRANSACTION_TIMED_OUT)));
            }
        }
        kv.backoff(attempt, options.backoff_max).await;
    }
}

/// The first key after every key that starts with `prefix`: `prefix` with its last
/// non-0xff byte incremented and the 0xff tail dropped (all 0xff → `[0xff]`).
pub fn strinc(prefix: &[u8]) -> Vec<u8> {
    let mut key = prefix.to_vec();
    while let Some(&last) = key.last() {
        if last == 0xff {
            key.pop();
        } else {
            *key.last_mut().unwrap_or_else(|| unreachable!("checked non-empty")) += 1;
            return key;
        }
    }
    vec![0xff]
}

/// The first key after `key`: `key` followed by a zero byte.
pub fn key_after(key: &[u8]) -> Vec<u8> {
    let mut next = Vec::with_capacity(key.len() + 1);
    next.extend_from_slice(key);
    next.push(0);
    next
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn error_predicates_follow_fdb() {
        let e = KvError::new;
        assert!(e(1020).is_retryable() && e(1020).is_retryable_not_committed() && !e(1020).is_maybe_committed());
        assert!(e(1021).is_retryable() && e(1021).is_maybe_committed() && !e(1021).is_retryable_not_committed());
        assert!(e(1007).is_retryable());
        assert!(!e(1031).is_retryable());
        assert!(!e(2101).is_retryable());
        assert_eq!(
            e(1020).to_string(),
            "Transaction not committed due to conflict with another transaction (kv error 1020)"
        );
    }

    #[test]
    fn key_helpers() {
        assert_eq!(strinc(b"ab"), b"ac");
        assert_eq!(strinc(b"a\xff\xff"), b"b");
        assert_eq!(strinc(b"\xff"), b"\xff");
        assert_eq!(key_after(b"a"), b"a\x00");
        assert_eq!(RangeRequest::prefix(b"p").end, b"q");
    }
}
