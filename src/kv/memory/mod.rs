//! `MemoryKv`: an in-process emulator of FoundationDB's transaction semantics.
//!
//! It is the embedded default store and the simulator's store, so it must behave like FDB
//! in every way the store algorithms can observe (DESIGN.md decision 1):
//!
//! - **MVCC.** Each key keeps its recent versions; a transaction reads at the version it
//!   got on its first read. Old versions are dropped once no live transaction can read
//!   them (and after five seconds of versions in any case).
//! - **Read-your-writes.** A transaction's sets, clears, range clears and atomic ops are
//!   merged into its point and range reads, snapshot or not. A key set with a
//!   versionstamp cannot be read back ([`KvError::ACCESSED_UNREADABLE`]).
//! - **Conflicts exactly as FDB.** Only serializable reads add read-conflict ranges: the
//!   key of a point read; the part of a range actually read (up to the last returned key
//!   when the limit cut it short); nothing for keys or ranges the transaction wrote itself
//!   (unless only by atomic ops, whose result depends on the stored value). Commit fails
//!   with 1020 when a read-conflict range meets a write committed after the read version.
//!   Write-only transactions and atomic ops never conflict.
//! - **Versions and age.** Versions follow the injected monotonic clock at 1,000,000 per
//!   second; a transaction older than 5,000,000 versions fails with 1007.
//! - **Limits.** Keys ≤ 10,000 bytes (2102), values ≤ 100,000 bytes (2103), transactions ≤
//!   the configured size limit, 10,000,000 bytes by default (2101).
//! - **Faults, seeded.** Spurious conflicts; `commit_unknown_result` that did and that did
//!   not commit; timeouts (1031) whose commit lands later, subject to conflicts as any
//!   commit; unavailability; a partition of one client; latency on every operation, and
//!   before a transaction's first read its read-version request's latency, the version
//!   fixed only at its end (so a read can see commits that landed after it was issued).
//!
//! Keys live in B-trees split where [`Kv::split_hint`] says (the job store's hot keys apart
//! from its history; see `key_map`), under one lock: commits hold it alone, and so does a
//! transaction's first read, which registers its read version; its later reads hold it
//! shared, so a node's poller and completer read side by side.
//!
//! Handles are cheap clones sharing one store. [`MemoryKv::client`] makes a handle whose
//! operations are attributed to a named client, which is what partitions apply to.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::fmt;
use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

// Every transaction of every client takes the store's one lock, shared for the reads that
// come after its first: parking_lot's hands it over with less overhead under contention
// (its mutex gave 3 % more fires/s and 6 % less CPU per fire than std's in the sustained
// bench), and it has no poisoning to handle (each critical section leaves the state
// consistent before it could panic).
use parking_lot::{Mutex, RwLock, RwLockReadGuard, RwLockWriteGuard};
use std::ops::{Deref, DerefMut};
use std::time::Duration;

use super::buffer::{Buffer, StoredKey};
use super::journal::{JournalEngine, JournalError, JournalState};
use super::key_map::KeyMap;
use super::{Kv, KvError, Version, TRANSACTION_SIZE_MAX};
use crate::entropy::Entropy;
use crate::time::{Clock, MonotonicInstant, NoSleep, Sleeper};

mod state;
mod transaction;

use state::{LateCommit, State};
pub use transaction::MemoryTransaction;
use transaction::TxnInner;

/// Reads of one `get_many` done under one hold of the store's lock.
const GET_MANY_CHUNK: usize = 32;

/// Fault rates, each the probability per commit (or the bound per operation).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct KvFaults {
    /// A commit with read conflicts that would succeed fails with 1020 instead, not applied.
    pub spurious_conflict: f64,
    /// A commit is applied but reports 1021.
    pub unknown_result_committed: f64,
    /// A commit is not applied and reports 1021.
    pub unknown_result_not_committed: f64,
    /// A commit reports 1031 and lands later (within five seconds), unless it then
    /// conflicts or is too old.
    pub timeout_commit_lands_later: f64,
    /// Every operation waits a uniform random time up to this.
    pub latency_max: Duration,
}

/// Options of a [`MemoryKv`].
#[derive(Debug, Clone)]
pub struct MemoryKvOptions {
    /// Seed of the fault and jitter generator.
    pub seed: u64,
    /// The largest transaction, in bytes (FDB's default is 10,000,000).
    pub transaction_size_limit: usize,
    /// Injected faults.
    pub faults: KvFaults,
    /// Whether to measure how long the store's lock is held and waited for
    /// ([`MemoryKvStats::lock_held`]), on the injected clock: a few clock reads per hold
    /// of the lock. Off by default; benchmarks turn it on.
    pub measure_lock: bool,
}

impl Default for MemoryKvOptions {
    fn default() -> Self {
        Self { seed: 0, transaction_size_limit: TRANSACTION_SIZE_MAX, faults: KvFaults::default(), measure_lock: false }
    }
}

/// Counters of what the emulator did, for tests and benchmarks.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct MemoryKvStats {
    /// Transactions that wrote and committed (including 1021 that did commit and late landings).
    pub commits: u64,
    /// Read-only transactions committed.
    pub read_only_commits: u64,
    /// Real conflicts (1020 from the conflict check).
    pub conflicts: u64,
    /// Injected spurious conflicts.
    pub spurious_conflicts: u64,
    /// Injected 1021 whose commit was applied.
    pub unknown_committed: u64,
    /// Injected 1021 whose commit was not applied.
    pub unknown_not_committed: u64,
    /// Injected 1031 timeouts whose commit was queued to land later.
    pub timeouts: u64,
    /// Late commits that landed.
    pub late_landed: u64,
    /// Late commits dropped (conflict or too old when landing).
    pub late_dropped: u64,
    /// 1007 errors.
    pub too_old: u64,
    /// Operations refused while unavailable or partitioned.
    pub unavailable: u64,
    /// Range reads served, each request once whatever it returned (on FoundationDB, one
    /// request to a storage server each).
    pub ranges_read: u64,
    /// With [`MemoryKvOptions::measure_lock`]: how long the store's one lock was held
    /// exclusively, by all clients together: by every commit and by each transaction's
    /// first read (which registers its read version). At most one second of this passes
    /// per second: the store's serial part.
    pub lock_held: Duration,
    /// With [`MemoryKvOptions::measure_lock`]: how long a transaction's later reads held
    /// the lock shared, all together. Shared holds overlap one another (each counts), not
    /// the exclusive ones.
    pub lock_shared: Duration,
    /// With [`MemoryKvOptions::measure_lock`]: how long clients waited for the lock while
    /// another held it, all together (blocked threads: on a node, tokio workers).
    pub lock_waited: Duration,
}

/// The in-process FoundationDB emulator. Cheap to clone; clones share the store.
#[derive(Clone)]
pub struct MemoryKv {
    shared: Arc<Shared>,
    client: Option<Arc<str>>,
    /// An observer outside the system under test: injected faults never touch it.
    exempt: bool,
}

impl fmt::Debug for MemoryKv {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MemoryKv").field("client", &self.client).finish_non_exhaustive()
    }
}

struct Shared {
    /// Written by commits and by a transaction's first read (which registers its read
    /// version); read, shared, by a transaction's later reads.
    state: RwLock<State>,
    clock: Arc<dyn Clock>,
    sleeper: Arc<dyn Sleeper>,
    transaction_size_limit: usize,
    /// Whether latency is injected (`faults.latency_max` is not zero), readable without
    /// the state's lock: a transaction's first read asks it.
    latency_on: AtomicBool,
    /// See [`MemoryKvOptions::measure_lock`].
    measure_lock: bool,
    /// What shared reads add to [`MemoryKvStats`]: they cannot write the state.
    shared_reads: SharedReadStats,
}

/// [`MemoryKvStats`] counted by reads that hold the state's lock shared.
#[derive(Default)]
struct SharedReadStats {
    ranges_read: AtomicU64,
    /// Nanoseconds.
    lock_shared: AtomicU64,
    /// Nanoseconds.
    lock_waited: AtomicU64,
}

impl Shared {
    /// The state, locked (and the hold measured, when asked).
    fn lock(&self) -> StateGuard<'_> {
        if !self.measure_lock {
            return StateGuard { guard: self.state.write(), dead: Vec::new(), held_since: None };
        }
        let (mut guard, waited) = match self.state.try_write() {
            Some(guard) => (guard, Duration::ZERO),
            None => {
                let asked = self.clock.monotonic();
                let guard = self.state.write();
                (guard, self.clock.monotonic().saturating_duration_since(asked))
            }
        };
        guard.stats.lock_waited += waited;
        StateGuard { guard, dead: Vec::new(), held_since: Some((self.clock.monotonic(), self.clock.as_ref())) }
    }

    /// The state, shared with other readers (and the hold measured, when asked).
    fn read(&self) -> SharedStateGuard<'_> {
        if !self.measure_lock {
            return SharedStateGuard { guard: self.state.read(), shared: self, held_since: None };
        }
        let guard = match self.state.try_read() {
            Some(guard) => guard,
            None => {
                let asked = self.clock.monotonic();
                let guard = self.state.read();
                let waited = self.clock.monotonic().saturating_duration_since(asked);
                self.shared_reads.lock_waited.fetch_add(waited.as_nanos() as u64, Ordering::Relaxed);
                guard
            }
        };
        SharedStateGuard { guard, shared: self, held_since: Some(self.clock.monotonic()) }
    }
}

/// The state, locked shared. Adds the time it was held to the stats when measured.
struct SharedStateGuard<'a> {
    guard: RwLockReadGuard<'a, State>,
    shared: &'a Shared,
    held_since: Option<MonotonicInstant>,
}

impl Deref for SharedStateGuard<'_> {
    type Target = State;

    fn deref(&self) -> &State {
        &self.guard
    }
}

impl Drop for SharedStateGuard<'_> {
    fn drop(&mut self) {
        if let Some(since) = self.held_since {
            let held = self.shared.clock.monotonic().saturating_duration_since(since);
            self.shared.shared_reads.lock_shared.fetch_add(held.as_nanos() as u64, Ordering::Relaxed);
        }
    }
}

/// The locked state. Adds the time it was held to the stats when measured.
struct StateGuard<'a> {
    /// Dropped first (fields drop in order): the lock is released before `dead` is freed.
    guard: RwLockWriteGuard<'a, State>,
    /// The graveyard, taken out when the guard drops.
    dead: Vec<Box<[u8]>>,
    held_since: Option<(MonotonicInstant, &'a dyn Clock)>,
}

impl Deref for StateGuard<'_> {
    type Target = State;

    fn deref(&self) -> &State {
        &self.guard
    }
}

impl DerefMut for StateGuard<'_> {
    fn deref_mut(&mut self) -> &mut State {
        &mut self.guard
    }
}

impl Drop for StateGuard<'_> {
    fn drop(&mut self) {
        self.dead = std::mem::take(&mut self.guard.graveyard);
        if let Some((since, clock)) = self.held_since {
            self.guard.stats.lock_held += clock.monotonic().saturating_duration_since(since);
        }
    }
}

impl MemoryKv {
    /// An empty store on `clock`, without faults or delays.
    pub fn new(clock: Arc<dyn Clock>) -> Self {
        Self::with_options(clock, Arc::new(NoSleep), MemoryKvOptions::default())
    }

    /// An empty store with a sleeper (for latency and backoff) and options.
    pub fn with_options(clock: Arc<dyn Clock>, sleeper: Arc<dyn Sleeper>, options: MemoryKvOptions) -> Self {
        let state = State {
            data: KeyMap::new(),
            version: 0,
            newest_read: 0,
            version_offset: 0,
            range_log: VecDeque::new(),
            expiry: VecDeque::new(),
            live_reads: BTreeMap::new(),
            entropy: Entropy::from_seed(options.seed),
            faults: options.faults,
            unavailable: false,
            partitioned: BTreeSet::new(),
            late: Vec::new(),
            watchers: BTreeMap::new(),
            held_notices: None,
            recent: VecDeque::new(),
            recent_floor: 0,
            graveyard: Vec::new(),
            stats: MemoryKvStats::default(),
            journal: None,
        };
        let latency_on = AtomicBool::new(!state.faults.latency_max.is_zero());
        let transaction_size_limit = options.transaction_size_limit;
        let measure_lock = options.measure_lock;
        let shared = Shared {
            state: RwLock::new(state),
            clock,
            sleeper,
            transaction_size_limit,
            latency_on,
            measure_lock,
            shared_reads: SharedReadStats::default(),
        };
        Self { shared: Arc::new(shared), client: None, exempt: false }
    }

    /// A durable store (see [`super::journal`]) sleeping its retries' backoff on `sleeper`:
    /// `pairs` as of `version` (the last commit `engine` wrote), its commits written by `engine` on a thread of its own before they
    /// are acknowledged. Versions go on from `version`. Returns the store and its writer
    /// thread, which ends once every handle is dropped or [`Self::close_journal`] is
    /// called, after writing every commit already made.
    ///
    /// # Errors
    /// The writer thread could not be started.
    #[cfg_attr(not(feature = "embedded"), allow(dead_code))]
    pub(super) fn journaled(
        clock: Arc<dyn Clock>,
        sleeper: Arc<dyn Sleeper>,
        pairs: Vec<(Vec<u8>, Vec<u8>)>,
        version: Version,
        engine: Box<dyn JournalEngine>,
    ) -> Result<(MemoryKv, std::thread::JoinHandle<()>), JournalError> {
        let kv = Self::with_options(clock, sleeper, MemoryKvOptions::default());
        let (sender, receiver) = std::sync::mpsc::channel();
        {
            let mut state = kv.shared.lock();
            for (key, value) in pairs {
                state
                    .data
                    .entry(StoredKey::from_vec(key))
                    .or_insert(smallvec::smallvec![(version, Some(value.into()))]);
            }
            state.version = version;
            state.version_offset = version;
            state.journal = Some(JournalState::new(sender));
        }
        let shared = Arc::downgrade(&kv.shared);
        let settle = move |outcome: Result<Version, JournalError>| {
            let Some(shared) = shared.upgrade() else { return false };
            let mut state = shared.lock();
            let Some(journal) = state.journal.as_mut() else { return false };
            match outcome {
                Ok(version) => journal.durable(version),
                Err(_) => journal.fail(),
            }
            true
        };
        let writer = std::thread::Builder::new()
            .name("sundial-journal".into())
            .spawn(move || super::journal::write_loop(receiver, engine, settle))
            .map_err(|e| JournalError(format!("starting the journal's writer thread: {e}")))?;
        Ok((kv, writer))
    }

    /// Closes a durable store's journal: commits after this fail (1031); the writer
    /// finishes the commits already made and ends. Nothing for a store without a journal.
    #[cfg_attr(not(feature = "embedded"), allow(dead_code))]
    pub(super) fn close_journal(&self) {
        if let Some(journal) = self.shared.lock().journal.as_mut() {
            journal.close();
        }
    }

    /// A handle on the same store whose operations come from client `name` (for
    /// partitions).
    pub fn client(&self, name: &str) -> MemoryKv {
        Self { shared: self.shared.clone(), client: Some(Arc::from(name)), exempt: false }
    }

    /// A handle on the same store for an observer outside the system under test (a
    /// simulator's checkers): no injected fault — latency, unavailability, partition,
    /// spurious conflict or ambiguous commit — ever touches its operations, so watching
    /// the store neither slows nor changes what it watches.
    pub fn observer(&self) -> MemoryKv {
        Self { shared: self.shared.clone(), client: None, exempt: true }
    }

    /// The injected latency of one operation of this handle.
    fn latency(&self, state: &mut State) -> Option<Duration> {
        if self.exempt {
            None
        } else {
            state.latency()
        }
    }

    /// Replaces the injected faults.
    pub fn set_faults(&self, faults: KvFaults) {
        let mut state = self.shared.lock();
        self.shared.latency_on.store(!faults.latency_max.is_zero(), Ordering::Relaxed);
        state.faults = faults;
    }

    /// Makes every operation of every client fail with 1031 (`true`) or work again.
    pub fn set_unavailable(&self, unavailable: bool) {
        self.shared.lock().unavailable = unavailable;
    }

    /// Cuts client `name` off from the store (its operations fail with 1031), or heals it.
    pub fn set_partitioned(&self, name: &str, partitioned: bool) {
        let mut state = self.shared.lock();
        if partitioned {
            state.partitioned.insert(name.to_owned());
        } else {
            state.partitioned.remove(name);
        }
    }

    /// Advances versions by `by` at once, as an FDB recovery does (about 100 s).
    pub fn jump_versions(&self, by: Version) {
        self.shared.lock().version_offset += by;
    }

    /// The last commit version.
    pub fn committed_version(&self) -> Version {
        self.shared.lock().version
    }

    /// What the emulator has done so far.
    pub fn stats(&self) -> MemoryKvStats {
        let mut stats = self.shared.lock().stats;
        let reads = &self.shared.shared_reads;
        stats.ranges_read += reads.ranges_read.load(Ordering::Relaxed);
        stats.lock_shared += Duration::from_nanos(reads.lock_shared.load(Ordering::Relaxed));
        stats.lock_waited += Duration::from_nanos(reads.lock_waited.load(Ordering::Relaxed));
        stats
    }

    /// How many keys hold a value now.
    pub fn key_count(&self) -> usize {
        self.shared.lock().data.values().filter(|v| v.last().is_some_and(|(_, value)| value.is_some())).count()
    }

    /// How many key versions are stored (current values plus versions kept for live
    /// transactions); shows that old versions are collected.
    pub fn stored_versions(&self) -> usize {
        self.shared.lock().data.values().map(|versions| versions.len()).sum()
    }

    /// The current version: the clock's microseconds (plus any injected jump), never
    /// below the last commit.
    fn now_version(&self, state: &State) -> Version {
        let micros = self.shared.clock.monotonic().since_origin().as_micros() as Version;
        (micros + state.version_offset).max(state.version)
    }

    /// Locks the store, lands due late commits, and checks this client can reach it.
    fn enter(&self) -> Result<StateGuard<'_>, (StateGuard<'_>, KvError)> {
        let mut state = self.shared.lock();
        self.land_late_commits(&mut state);
        let partitioned = self.client.as_deref().is_some_and(|c| state.partitioned.contains(c));
        if (state.unavailable || partitioned) && !self.exempt {
            state.stats.unavailable += 1;
            return Err((state, KvError::new(KvError::TRANSACTION_TIMED_OUT)));
        }
        if let Some(error) = state.journal.as_ref().and_then(JournalState::failure) {
            // The disk refused a write: nothing more is served (what was read stays true,
            // and nothing is acknowledged that is not on disk).
            return Err((state, error));
        }
        Ok(state)
    }

    /// The store, locked shared, for a read of a transaction whose read version is fixed:
    /// `None` when the read needs the state written (a late commit to land, latency to
    /// draw) or must fail (unavailable, partitioned, a failed journal), which the
    /// exclusive path of [`Self::enter`] does.
    fn enter_shared(&self) -> Option<SharedStateGuard<'_>> {
        if self.shared.latency_on.load(Ordering::Relaxed) && !self.exempt {
            return None;
        }
        let state = self.shared.read();
        let partitioned = self.client.as_deref().is_some_and(|c| state.partitioned.contains(c));
        let refused = (state.unavailable || partitioned) && !self.exempt;
        let failed = state.journal.as_ref().and_then(JournalState::failure).is_some();
        (state.late.is_empty() && !refused && !failed).then_some(state)
    }

    fn land_late_commits(&self, state: &mut State) {
        if state.late.is_empty() {
            return;
        }
        let now = self.shared.clock.monotonic();
        let (due, waiting): (Vec<LateCommit>, Vec<LateCommit>) =
            std::mem::take(&mut state.late).into_iter().partition(|late| late.land_at <= now);
        state.late = waiting;
        for late in due {
            let now_version = self.now_version(state);
            let read_version = late.writes.read_version;
            match state.apply(late.writes, now_version, Some(read_version)) {
                Ok(_) => state.stats.late_landed += 1,
                Err(_) => state.stats.late_dropped += 1,
            }
            state.unregister_read(read_version);
        }
    }
}

impl Kv for MemoryKv {
    type Transaction = MemoryTransaction;

    fn create_transaction(&self) -> Result<MemoryTransaction, KvError> {
        Ok(MemoryTransaction { inner: Arc::new(TxnInner { kv: self.clone(), data: Mutex::new(Buffer::default()) }) })
    }

    fn backoff(&self, attempt: u32, max: Duration) -> impl Future<Output = ()> + Send {
        let base = Duration::from_millis(10).saturating_mul(1 << attempt.saturating_sub(1).min(16)).min(max);
        // Full jitter from the seeded generator, so contending retries spread out
        // reproducibly.
        let micros = self.shared.lock().entropy.below(base.as_micros() as u64 + 1);
        self.shared.sleeper.sleep(Duration::from_micros(micros))
    }

    fn monotonic_now(&self) -> MonotonicInstant {
        self.shared.clock.monotonic()
    }

    /// Keeps the key ranges between `keys` in B-trees of their own.
    fn split_hint(&self, keys: &[Vec<u8>]) {
        self.shared.lock().data.split_at(keys);
    }
}

#[cfg(test)]
mod tests {
    use super::state::{key_hash, KeyHashes, RECENT_ASKED_MAX};
    use super::*;
    use crate::kv::KvTransaction;

    #[test]
    fn a_commits_key_hashes_stay_a_short_list_only_while_few() {
        let keys: Vec<Vec<u8>> = (0..100u32).map(|i| i.to_be_bytes().to_vec()).collect();
        let mut hashes = KeyHashes::of(keys[..3].iter().map(Vec::as_slice));
        assert!(matches!(hashes, KeyHashes::Few(_)));
        for key in &keys[3..] {
            hashes.insert(key_hash(key));
        }
        assert!(matches!(hashes, KeyHashes::Many(_)), "a range clear's many keys go into a set");
        assert!(keys.iter().all(|key| hashes.contains(key_hash(key))), "none is lost on the way");
        assert!(!hashes.contains(key_hash(b"absent")));
        assert!(matches!(KeyHashes::of(keys.iter().map(Vec::as_slice)), KeyHashes::Many(_)));
    }

    /// A point read's conflict check asks the recent commits' key hashes first; past
    /// [`RECENT_ASKED_MAX`] commits since its read, or with none of them writing the key,
    /// the answer must still be what a search of the store gives.
    #[test]
    fn point_conflicts_are_found_however_many_commits_came_between() {
        let runtime = tokio::runtime::Builder::new_current_thread().build().unwrap();
        runtime.block_on(async {
            let clock = crate::time::ManualClock::new(crate::time::from_micros(1_800_000_000_000_000).unwrap());
            let kv = MemoryKv::new(Arc::new(clock.clone()));
            for (between, writer) in
                [(1, Some(0)), (3, None), (RECENT_ASKED_MAX + 4, Some(2)), (RECENT_ASKED_MAX + 4, None)]
            {
                let reader = kv.create_transaction().unwrap();
                reader.get(b"watched", false).await.unwrap();
                for i in 0..between {
                    clock.advance(Duration::from_millis(1));
                    let other = kv.create_transaction().unwrap();
                    let key = if writer == Some(i) { b"watched".to_vec() } else { format!("other{i}").into_bytes() };
                    other.set(&key, b"v");
                    other.commit().await.unwrap();
                }
                assert!(kv.shared.state.read().recent.len() >= between, "commits with company are recorded");
                reader.set(b"result", b"r");
                let outcome = reader.commit().await;
                match writer {
                    Some(_) => assert_eq!(outcome.unwrap_err().code(), KvError::NOT_COMMITTED, "{between} commits"),
                    None => assert!(outcome.is_ok(), "{between} commits, none wrote the key"),
                }
                assert!(kv.shared.state.read().recent.is_empty(), "collected once no transaction is live");
            }
        });
    }
}
