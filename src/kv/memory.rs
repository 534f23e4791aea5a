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
//! from its history; see `key_map`).
//!
//! Handles are cheap clones sharing one store. [`MemoryKv::client`] makes a handle whose
//! operations are attributed to a named client, which is what partitions apply to.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::fmt;
use std::future::Future;
use std::hash::BuildHasher;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use futures_util::future::Either;

// Every transaction of every client takes the store's one lock: parking_lot's hands it
// over with less overhead under contention (3 % more fires/s, 6 % less CPU per fire in the
// sustained bench), and it has no poisoning to handle (each critical section leaves the
// state consistent before it could panic).
use parking_lot::{Mutex, MutexGuard};
use rustc_hash::FxBuildHasher;
use std::ops::{Deref, DerefMut};
use std::time::Duration;

use super::atomic::{self, AtomicOp};
use super::buffer::{merge, Base, Buffer, Point, StoredKey, WatchSender};
use super::journal::{DurableNotice, JournalEngine, JournalError, JournalState, Mutation};
use super::key_map::KeyMap;
use super::write_set::WriteSet;
use super::{
    CommitInfo, Kv, KvError, KvTransaction, RangeRequest, RangeResult, Version, TRANSACTION_LIFE_VERSIONS_MAX,
    TRANSACTION_SIZE_MAX,
};
use crate::entropy::Entropy;
use crate::time::{Clock, MonotonicInstant, NoSleep, Sleeper};

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
    /// With [`MemoryKvOptions::measure_lock`]: how long the store's one lock was held, by
    /// all clients together. Every read and every commit of every transaction takes it, so
    /// at most one second of this passes per second: the store's serial part.
    pub lock_held: Duration,
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
    state: Mutex<State>,
    clock: Arc<dyn Clock>,
    sleeper: Arc<dyn Sleeper>,
    transaction_size_limit: usize,
    /// Whether latency is injected (`faults.latency_max` is not zero), readable without
    /// the state's lock: a transaction's first read asks it.
    latency_on: AtomicBool,
    /// See [`MemoryKvOptions::measure_lock`].
    measure_lock: bool,
}

impl Shared {
    /// The state, locked (and the hold measured, when asked).
    fn lock(&self) -> StateGuard<'_> {
        if !self.measure_lock {
            return StateGuard { guard: self.state.lock(), dead: Vec::new(), held_since: None };
        }
        let (mut guard, waited) = match self.state.try_lock() {
            Some(guard) => (guard, Duration::ZERO),
            None => {
                let asked = self.clock.monotonic();
                let guard = self.state.lock();
                (guard, self.clock.monotonic().saturating_duration_since(asked))
            }
        };
        guard.stats.lock_waited += waited;
        StateGuard { guard, dead: Vec::new(), held_since: Some((self.clock.monotonic(), self.clock.as_ref())) }
    }
}

/// The locked state. Adds the time it was held to the stats when measured.
struct StateGuard<'a> {
    /// Dropped first (fields drop in order): the lock is released before `dead` is freed.
    guard: MutexGuard<'a, State>,
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

/// A key's recent versions, oldest first; `None` is a deletion. The newest version is
/// also the key's latest committed write, which is what conflict checks ask (a write
/// that changes nothing readable, such as clearing an absent key, still adds a version
/// while another transaction is live to conflict with it).
/// Most keys have one version (history and index entries are written once): it is kept
/// inline, without an allocation of its own.
type Versions = smallvec::SmallVec<[(Version, Option<Box<[u8]>>); 1]>;

struct State {
    data: KeyMap<StoredKey, Versions>,
    /// The last commit version.
    version: Version,
    /// The newest read version handed out. It can be ahead of `version` (read versions
    /// follow the clock), and every later commit must land after it: a commit at a read
    /// version in use would be seen by that reader and escape its conflict check.
    newest_read: Version,
    /// Added to the clock-derived version (an injected recovery jump).
    version_offset: Version,
    /// Range writes (clear_range, explicit write-conflict ranges), in commit order.
    range_log: VecDeque<(Version, Vec<u8>, Vec<u8>)>,
    /// Keys written at a version, oldest first, so old versions can be dropped.
    expiry: VecDeque<(Version, StoredKey)>,
    /// Read versions of live transactions (and queued late commits), with counts.
    live_reads: BTreeMap<Version, usize>,
    entropy: Entropy,
    faults: KvFaults,
    unavailable: bool,
    partitioned: BTreeSet<String>,
    late: Vec<LateCommit>,
    stats: MemoryKvStats,
    /// Armed watches by key: the value each watcher saw, and how to tell it.
    watchers: BTreeMap<Vec<u8>, Vec<Watcher>>,
    /// While a commit applies its point writes (in the order the transaction kept them): the watches
    /// they fire, told in key order once all are applied, so that which watcher's task
    /// wakes first does not depend on the order of a transaction's writes.
    held_notices: Option<Vec<(Vec<u8>, WatchSender)>>,
    /// The hashes of the keys written by each recent commit that had company (a live
    /// transaction that could conflict with it), oldest first: a point read's conflict
    /// check looks there before searching the B-trees, and finds most keys absent.
    recent: VecDeque<(Version, KeyHashes)>,
    /// Every commit with company after this version is in `recent`.
    recent_floor: Version,
    /// Values replaced, deleted or collected under the lock, freed once it is released:
    /// freeing touches each allocation's page, a cache miss the lock need not wait on.
    graveyard: Vec<Box<[u8]>>,
    /// For a durable store: its commits on their way to disk (see [`super::journal`]).
    journal: Option<JournalState>,
}

/// An armed watch: fires when its key's latest value is no longer `seen`.
struct Watcher {
    seen: Option<Vec<u8>>,
    notify: WatchSender,
}

/// A commit reported as timed out that may still land.
struct LateCommit {
    land_at: MonotonicInstant,
    writes: Writes,
}

/// Everything a commit needs, taken out of a transaction.
struct Writes {
    read_version: Version,
    /// Keys read by serializable point reads (each stands for `[key, key\0)`).
    read_points: Vec<StoredKey>,
    read_conflicts: Vec<(Vec<u8>, Vec<u8>)>,
    write_conflicts: Vec<(Vec<u8>, Vec<u8>)>,
    cleared: Vec<(Vec<u8>, Vec<u8>)>,
    points: WriteSet<StoredKey, Point>,
    stamped_keys: Vec<(Vec<u8>, usize, Vec<u8>)>,
    /// The hashes of the keys of `points`, worked out before the store is locked.
    point_hashes: KeyHashes,
}

/// Hashes of one commit's written keys ([`key_hash`]): a few in a list (most commits
/// write a few keys, and a set for each would cost them more than its lookups save), more
/// in a set.
enum KeyHashes {
    Few(smallvec::SmallVec<[u64; 8]>),
    Many(hashbrown::HashSet<u64, FxBuildHasher>),
}

/// Keys a commit writes beyond which [`KeyHashes`] keeps their hashes in a set.
const FEW_KEYS_MAX: usize = 32;

impl KeyHashes {
    fn of<'a>(keys: impl ExactSizeIterator<Item = &'a [u8]>) -> Self {
        if keys.len() <= FEW_KEYS_MAX {
            Self::Few(keys.map(key_hash).collect())
        } else {
            Self::Many(keys.map(key_hash).collect())
        }
    }

    fn insert(&mut self, hash: u64) {
        match self {
            Self::Few(hashes) if hashes.len() < FEW_KEYS_MAX => hashes.push(hash),
            // A range clear can add thousands: they go into a set, as at the start.
            Self::Few(hashes) => *self = Self::Many(hashes.iter().copied().chain([hash]).collect()),
            Self::Many(hashes) => {
                hashes.insert(hash);
            }
        }
    }

    fn contains(&self, hash: u64) -> bool {
        match self {
            Self::Few(hashes) => hashes.contains(&hash),
            Self::Many(hashes) => hashes.contains(&hash),
        }
    }
}

/// A key's hash in [`State::recent`].
fn key_hash(key: &[u8]) -> u64 {
    FxBuildHasher.hash_one(key)
}

/// At most this many recent commits are asked whether they wrote a key before its
/// conflict check searches the B-tree instead.
const RECENT_ASKED_MAX: usize = 16;

/// The value among a key's `versions` at `version`.
fn value_in(versions: &Versions, version: Version) -> Option<&[u8]> {
    versions.iter().rev().find(|(v, _)| *v <= version).and_then(|(_, value)| value.as_deref())
}

fn is_point_range(begin: &[u8], end: &[u8]) -> bool {
    end.len() == begin.len() + 1 && end.starts_with(begin) && end[begin.len()] == 0
}

/// The stored pairs visible at `read_version` from `cursor` on, up to `end` (exclusive)
/// and at most `limit` (`more` when the limit cut them short); `cursor` is left at the
/// first key not taken. The cursor is open at the far end and the range cut by comparison: a
/// B-tree range with both ends searches for both, and most reads stop after a few keys.
fn stored_pairs<'a>(
    cursor: &mut std::iter::Peekable<impl Iterator<Item = (&'a StoredKey, &'a Versions)>>,
    end: &[u8],
    limit: Option<usize>,
    read_version: Version,
) -> RangeResult {
    let limit = limit.unwrap_or(usize::MAX);
    // Room for a short read at once: most reads are a shard's first entry or a few index
    // keys, and growing from nothing reallocates three times by 16.
    let mut pairs = Vec::with_capacity(limit.min(16));
    while let Some((key, versions)) = cursor.peek() {
        if key.as_slice() >= end {
            break;
        }
        if let Some(value) = value_in(versions, read_version) {
            if pairs.len() == limit {
                return RangeResult { pairs, more: true };
            }
            pairs.push((key.to_vec(), value.to_vec()));
        }
        cursor.next();
    }
    RangeResult { pairs, more: false }
}

impl State {
    /// The value of `key` at `version`.
    fn value_at(&self, key: &[u8], version: Version) -> Option<&[u8]> {
        value_in(self.data.get(key)?, version)
    }

    /// With a journal, the newest version every commit at or below which is on disk, while
    /// some commit is not (`None`: all are). Reads are served at or below it, so nothing
    /// read can be lost by a crash.
    fn durable_version(&self) -> Option<Version> {
        self.journal.as_ref().and_then(JournalState::durable_version)
    }

    fn register_read(&mut self, version: Version) {
        self.newest_read = self.newest_read.max(version);
        *self.live_reads.entry(version).or_insert(0) += 1;
    }

    fn unregister_read(&mut self, version: Version) {
        if let Some(count) = self.live_reads.get_mut(&version) {
            *count -= 1;
            if *count == 0 {
                self.live_reads.remove(&version);
            }
        }
    }

    fn chance(&mut self, rate: f64) -> bool {
        rate > 0.0 && (self.entropy.below(1 << 53) as f64) < rate * (1u64 << 53) as f64
    }

    fn latency(&mut self) -> Option<Duration> {
        let max = self.faults.latency_max;
        if max.is_zero() {
            return None;
        }
        let micros = self.entropy.below(max.as_micros() as u64 + 1);
        Some(Duration::from_micros(micros))
    }

    /// Whether a commit after `read_version` may have written `key`: `false` only when
    /// every such commit is in `recent` and none of them wrote a key of its hash.
    fn maybe_written_after(&self, read_version: Version, key: &[u8]) -> bool {
        if read_version < self.recent_floor {
            return true;
        }
        let first = self.recent.partition_point(|(v, _)| *v <= read_version);
        if self.recent.len() - first > RECENT_ASKED_MAX {
            return true;
        }
        let hash = key_hash(key);
        self.recent.range(first..).any(|(_, hashes)| hashes.contains(hash))
    }

    /// The version of the latest committed write of `key`, if it is still kept.
    fn last_write(&self, key: &[u8]) -> Option<Version> {
        self.data.get(key).and_then(|versions| versions.last()).map(|(v, _)| *v)
    }

    /// Whether a write committed after `read_version` meets `[begin, end)`.
    fn conflicts(&self, read_version: Version, begin: &[u8], end: &[u8]) -> bool {
        self.data.range(begin, end).any(|(_, versions)| versions.last().is_some_and(|(v, _)| *v > read_version))
            || self.range_log.iter().any(|(v, b, e)| *v > read_version && b.as_slice() < end && begin < e.as_slice())
    }

    /// Whether no transaction holds a read version but the one committing, whose read
    /// version (when it registered one) is `own`.
    fn alone(&self, own: Option<Version>) -> bool {
        match own {
            Some(own) => self.live_reads.len() == 1 && self.live_reads.get(&own) == Some(&1),
            None => self.live_reads.is_empty(),
        }
    }

    /// Checks and applies `writes` at a new version, returning it. `own` is the read version
    /// the committing transaction registered, if it did.
    fn apply(&mut self, writes: Writes, now_version: Version, own: Option<Version>) -> Result<CommitInfo, KvError> {
        let version = now_version.max(self.version.max(self.newest_read) + 1);
        if version - writes.read_version > TRANSACTION_LIFE_VERSIONS_MAX {
            self.stats.too_old += 1;
            return Err(KvError::new(KvError::TRANSACTION_TOO_OLD));
        }
        let rv = writes.read_version;
        // Nothing committed since the read version (every commit lands after the newest
        // read version handed out): nothing to conflict with, no need to look.
        let written_since = self.version > rv;
        let point_conflict = written_since
            && writes.read_points.iter().any(|key| {
                (self.maybe_written_after(rv, key) && self.last_write(key).is_some_and(|v| v > rv))
                    || self
                        .range_log
                        .iter()
                        .any(|(v, b, e)| *v > rv && b.as_slice() <= key.as_slice() && key.as_slice() < e.as_slice())
            });
        if point_conflict || (written_since && writes.read_conflicts.iter().any(|(b, e)| self.conflicts(rv, b, e))) {
            self.stats.conflicts += 1;
            return Err(KvError::new(KvError::NOT_COMMITTED));
        }
        // With no other transaction live, every later one reads at this version or after:
        // none can read what a write hides, nor conflict with a write of this one. (Not
        // so with a journal: later ones read below the commits not yet on disk.)
        let alone = self.journal.is_none() && self.alone(own);
        // The point writes' hashes came with them; the keys written otherwise join them.
        let mut hashes = writes.point_hashes;
        let mut stamp = [0u8; 10];
        stamp[..8].copy_from_slice(&version.to_be_bytes());
        if self.journal.is_some() && !self.watchers.is_empty() {
            // Held from the first write (see the end of this function).
            self.held_notices = Some(Vec::new());
        }
        for (begin, end) in &writes.cleared {
            let keys: Vec<StoredKey> = self
                .data
                .range(begin, end)
                .filter(|(_, versions)| versions.last().is_some_and(|(_, value)| value.is_some()))
                .map(|(key, _)| key.clone())
                .collect();
            for key in keys {
                hashes.insert(key_hash(&key));
                self.write_version(key, version, None, alone);
            }
        }
        let stamped_value = writes.points.values().any(|p| matches!(p.base, Base::Stamped(..)));
        if !self.watchers.is_empty() {
            self.held_notices.get_or_insert_with(Vec::new);
        }
        for (key, point) in writes.points.into_entries() {
            let mut value = match point.base {
                Base::Unchanged => self.value_at(&key, version).map(<[u8]>::to_vec),
                Base::Set(value) => Some(value),
                Base::Cleared => None,
                Base::Stamped(bytes, offset) => Some(atomic::stamped(&bytes, offset, &stamp)),
            };
            for (op, param) in &point.ops {
                value = atomic::apply(*op, value.as_deref(), param);
            }
            self.write_version(key, version, value, alone);
        }
        // The point writes' notices, told in key order (stable: a key's watchers in the
        // order they were armed). With a journal, every notice of the commit is held until
        // it is on disk, the ones of the writes below included.
        if self.journal.is_none() {
            if let Some(mut held) = self.held_notices.take() {
                held.sort_by(|(a, _), (b, _)| a.cmp(b));
                for (_, notify) in held {
                    let _ = notify.send(Ok(()));
                }
            }
        }
        let stamped_key = !writes.stamped_keys.is_empty();
        for (bytes, offset, value) in writes.stamped_keys {
            let key = atomic::stamped(&bytes, offset, &stamp);
            hashes.insert(key_hash(&key));
            self.write_version(StoredKey::from_vec(key), version, Some(value), alone);
        }
        for (begin, end) in writes.write_conflicts {
            if is_point_range(&begin, &end) {
                // A conflict on one key: a version with its value unchanged.
                let value = self.value_at(&begin, version).map(<[u8]>::to_vec);
                hashes.insert(key_hash(&begin));
                self.write_version(StoredKey::from_vec(begin), version, value, alone);
            } else {
                self.range_log.push_back((version, begin, end));
            }
        }
        if !alone {
            // A commit alone needs no record: every later read version is at or above it.
            self.recent.push_back((version, hashes));
        }
        self.version = version;
        self.stats.commits += 1;
        if let Some(journal) = &mut self.journal {
            // Watchers hear of the commit once it is on disk, as readers see it then.
            let mut held = self.held_notices.take().unwrap_or_default();
            held.sort_by(|(a, _), (b, _)| a.cmp(b));
            journal.committed(version, held.into_iter().map(|(_, notify)| notify).collect());
        }
        Ok(CommitInfo { version, versionstamp: (stamped_key || stamped_value).then_some(stamp) })
    }

    /// Adds a version of `key`, and schedules what collection may then do: drop the
    /// versions this one hides, or the key itself if this is a deletion. A new key with a
    /// value has nothing to collect (most writes: history, indexes), so it is not scheduled.
    /// When the committing transaction is `alone`, nothing can read the hidden versions or
    /// conflict with this one: the key keeps its new value only, and a deletion removes it
    /// at once (what collection would do right after the commit anyway).
    fn write_version(&mut self, key: StoredKey, version: Version, value: Option<Vec<u8>>, alone: bool) {
        if !self.watchers.is_empty() {
            self.fire_watchers(&key, value.as_deref());
        }
        let entry = self.data.entry(key);
        if let Some(journal) = &mut self.journal {
            let existed = matches!(&entry, std::collections::btree_map::Entry::Occupied(versions)
                if versions.get().last().is_some_and(|(_, value)| value.is_some()));
            journal.record(Mutation { key: entry.key().to_vec(), value: value.clone(), existed });
        }
        let value = value.map(Vec::into_boxed_slice);
        match entry {
            std::collections::btree_map::Entry::Occupied(mut versions) if alone => match value {
                Some(value) => {
                    let versions = versions.get_mut();
                    self.graveyard.extend(versions.drain(..).filter_map(|(_, old)| old));
                    versions.push((version, Some(value)));
                }
                None => {
                    self.graveyard.extend(versions.remove().into_iter().filter_map(|(_, old)| old));
                }
            },
            std::collections::btree_map::Entry::Occupied(mut versions) => {
                let key = versions.key().clone();
                versions.get_mut().push((version, value));
                self.expiry.push_back((version, key));
            }
            std::collections::btree_map::Entry::Vacant(slot) => {
                if value.is_none() {
                    if alone {
                        return;
                    }
                    self.expiry.push_back((version, slot.key().clone()));
                }
                slot.insert(smallvec::smallvec![(version, value)]);
            }
        }
    }

    /// Tells the watchers of `key` whose value `value` is not the one they saw.
    fn fire_watchers(&mut self, key: &[u8], value: Option<&[u8]>) {
        let Some(watchers) = self.watchers.get_mut(key) else { return };
        for watcher in std::mem::take(watchers) {
            if watcher.seen.as_deref() == value {
                watchers.push(watcher);
            } else if let Some(held) = &mut self.held_notices {
                held.push((key.to_vec(), watcher.notify));
            } else {
                let _ = watcher.notify.send(Ok(()));
            }
        }
        if watchers.is_empty() {
            self.watchers.remove(key);
        }
    }

    /// Arms a watch on `key` that saw `seen`: fires at once if the value moved on since.
    fn arm_watch(&mut self, key: Vec<u8>, seen: Option<Vec<u8>>, notify: WatchSender) {
        let latest = self.data.get(key.as_slice()).and_then(|v| v.last()).and_then(|(_, value)| value.as_deref());
        if latest != seen.as_deref() {
            match &mut self.journal {
                // The value it moved to may not be on disk yet: told once it is.
                Some(journal) => journal.notify_when_durable(notify),
                None => {
                    let _ = notify.send(Ok(()));
                }
            }
            return;
        }
        // Watchers dropped by their callers would pile up on a key nobody writes.
        let watchers = self.watchers.entry(key).or_default();
        watchers.retain(|w| !w.notify.is_canceled());
        watchers.push(Watcher { seen, notify });
    }

    /// Drops versions no live or future transaction can read, and conflict records no
    /// live transaction can conflict with.
    fn collect_garbage(&mut self, now_version: Version) {
        let oldest_live = self.live_reads.keys().next().copied().unwrap_or(self.version);
        // Transactions to come read at the durable version: its values stay.
        let durable = self.durable_version().unwrap_or(self.version);
        let horizon = oldest_live.max(now_version - TRANSACTION_LIFE_VERSIONS_MAX).min(self.version).min(durable);
        while self.expiry.front().is_some_and(|(v, _)| *v <= horizon) {
            let Some((_, key)) = self.expiry.pop_front() else { break };
            if let Some(versions) = self.data.get_mut(key.as_slice()) {
                // Keep the newest version at or below the horizon and everything newer.
                let keep_from = versions.iter().rposition(|(v, _)| *v <= horizon).unwrap_or(0);
                self.graveyard.extend(versions.drain(..keep_from).filter_map(|(_, old)| old));
                if versions.len() == 1 && versions[0].1.is_none() {
                    self.data.remove(key.as_slice());
                }
            }
        }
        while self.range_log.front().is_some_and(|(v, _, _)| *v <= horizon) {
            self.range_log.pop_front();
        }
        while self.recent.front().is_some_and(|(v, _)| *v <= horizon) {
            if let Some((version, _)) = self.recent.pop_front() {
                self.recent_floor = version;
            }
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
        let shared =
            Shared { state: Mutex::new(state), clock, sleeper, transaction_size_limit, latency_on, measure_lock };
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
        self.shared.lock().stats
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

/// The latency to add to an operation's answer, if any.
type Latency = Option<Duration>;

/// Keys' values, in the order asked (`None`: absent).
type Values = Vec<Option<Vec<u8>>>;

/// A [`MemoryKv`] transaction. Clones are handles to the same transaction.
#[derive(Clone)]
pub struct MemoryTransaction {
    inner: Arc<TxnInner>,
}

impl fmt::Debug for MemoryTransaction {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MemoryTransaction").finish_non_exhaustive()
    }
}

struct TxnInner {
    kv: MemoryKv,
    data: Mutex<Buffer>,
}

impl Drop for TxnInner {
    fn drop(&mut self) {
        let data = self.data.lock();
        if let (Some(version), false) = (data.read_version, data.finished) {
            self.kv.shared.lock().unregister_read(version);
        }
    }
}

impl Buffer {
    /// The value of `key` as this transaction sees it, registering a serializable read.
    fn get(&mut self, state: &State, key: &[u8], snapshot: bool) -> Result<Option<Vec<u8>>, KvError> {
        if self.unreadable.iter().any(|(b, e)| b.as_slice() <= key && key < e.as_slice()) {
            return Err(KvError::new(KvError::ACCESSED_UNREADABLE));
        }
        let point = self.points.get(key);
        let depends_on_store = point.map_or_else(|| !self.in_cleared(key), |point| !point.is_independent());
        // A value this transaction wrote outright needs no lookup in the store.
        let stored = if depends_on_store { state.value_at(key, self.read_version.unwrap_or_default()) } else { None };
        let value = self.resolve_point(point, key, stored)?;
        if !snapshot && depends_on_store {
            self.note_point_read(key);
        }
        Ok(value)
    }

    /// `requests` read in order, each as [`get_range`](Self::get_range) reads it. Forward
    /// reads of ascending, disjoint ranges that nothing this transaction wrote touches (a
    /// poll cycle's first due entry of every shard) share one walk along the stored keys:
    /// from one range's last key read to the next range's first, a few steps along the
    /// leaves cost less than a descent from the root through a store of millions of keys.
    fn get_ranges(
        &mut self,
        state: &State,
        requests: &[RangeRequest],
        snapshot: bool,
    ) -> Result<Vec<RangeResult>, KvError> {
        /// Keys stepped over before a new descent is cheaper.
        const WALK_STEPS: usize = 24;
        let walkable = requests.len() > 1
            && requests.windows(2).all(|pair| pair[0].end <= pair[1].begin)
            && requests.iter().all(|r| {
                !r.reverse
                    && r.begin < r.end
                    && r.limit != Some(0)
                    && !self.is_unreadable(&r.begin, &r.end)
                    && self.untouched(&r.begin, &r.end)
            });
        if !walkable {
            return requests.iter().map(|request| self.get_range(state, request, snapshot)).collect();
        }
        let read_version = self.read_version.unwrap_or_default();
        let from = |begin: &[u8]| state.data.from(begin).peekable();
        let mut cursor = from(&requests[0].begin);
        let mut results = Vec::with_capacity(requests.len());
        for request in requests {
            let (begin, end) = (request.begin.as_slice(), request.end.as_slice());
            let mut steps = 0;
            while cursor.peek().is_some_and(|(key, _)| key.as_slice() < begin) {
                if steps == WALK_STEPS {
                    cursor = from(begin);
                    break;
                }
                cursor.next();
                steps += 1;
            }
            let RangeResult { pairs, more } = stored_pairs(&mut cursor, end, request.limit, read_version);
            results.push(self.conflict_on_range(request, snapshot, pairs, more));
        }
        Ok(results)
    }

    /// The pairs of `request` as this transaction sees them, registering a serializable
    /// read's conflict range.
    fn get_range(&mut self, state: &State, request: &RangeRequest, snapshot: bool) -> Result<RangeResult, KvError> {
        let (begin, end) = (request.begin.as_slice(), request.end.as_slice());
        if begin >= end || request.limit == Some(0) {
            return Ok(RangeResult::default());
        }
        if self.is_unreadable(begin, end) {
            return Err(KvError::new(KvError::ACCESSED_UNREADABLE));
        }
        let read_version = self.read_version.unwrap_or_default();
        if self.untouched(begin, end) && !request.reverse {
            // Nothing this transaction wrote is in the range (most reads, e.g. a poll
            // cycle's first due entry of every shard): the stored values as they are.
            let mut cursor = state.data.from(begin).peekable();
            let RangeResult { pairs, more } = stored_pairs(&mut cursor, end, request.limit, read_version);
            return Ok(self.conflict_on_range(request, snapshot, pairs, more));
        }
        let limit = request.limit.unwrap_or(usize::MAX);
        let mut pairs = Vec::with_capacity(limit.min(16));
        let mut more = false;
        // Merge stored keys with this transaction's point writes, in order. A stored
        // key comes with its versions, so it is not looked up again.
        self.points.settle();
        let written = self.points.range(begin, end);
        let written = written.into_iter().map(|(k, _)| (k.as_slice(), None));
        let keys: Box<dyn Iterator<Item = (&[u8], Option<&Versions>)>> = if request.reverse {
            let stored = state.data.before(end);
            let stored = stored.map(|(k, v)| (k.as_slice(), Some(v))).take_while(|(k, _)| *k >= begin);
            Box::new(merge(stored, written.rev(), true))
        } else {
            let stored = state.data.from(begin);
            let stored = stored.map(|(k, v)| (k.as_slice(), Some(v))).take_while(|(k, _)| *k < end);
            Box::new(merge(stored, written, false))
        };
        for (key, versions) in keys {
            let stored = versions.and_then(|versions| value_in(versions, read_version));
            if let Some(value) = self.resolve(key, stored)? {
                if pairs.len() == limit {
                    more = true;
                    break;
                }
                pairs.push((key.to_vec(), value));
            }
        }
        Ok(self.conflict_on_range(request, snapshot, pairs, more))
    }
}

impl MemoryTransaction {
    /// Runs `f` with the transaction and the store locked, after fixing the read version
    /// and checking the transaction's age. Returns the result and the latency to add.
    fn with_read<T>(
        &self,
        f: impl FnOnce(&mut Buffer, &State) -> Result<T, KvError>,
    ) -> (Result<T, KvError>, Option<Duration>) {
        self.with_reads(1, false, f)
    }

    /// [`with_read`](Self::with_read) for `reads` reads issued together (of ranges when
    /// `ranges`): they wait as long as the slowest of them.
    fn with_reads<T>(
        &self,
        reads: usize,
        ranges: bool,
        f: impl FnOnce(&mut Buffer, &State) -> Result<T, KvError>,
    ) -> (Result<T, KvError>, Option<Duration>) {
        let kv = &self.inner.kv;
        let mut data = self.inner.data.lock();
        if data.finished {
            return (Err(KvError::new(KvError::USED_DURING_COMMIT)), None);
        }
        let mut state = match kv.enter() {
            Ok(state) => state,
            Err((mut state, error)) => {
                let latency = kv.latency(&mut state);
                return (Err(error), latency);
            }
        };
        let latency = (0..reads.max(1)).filter_map(|_| kv.latency(&mut state)).max();
        let now_version = kv.now_version(&state);
        let read_version = match data.read_version {
            Some(version) => version,
            None => {
                let version = state.durable_version().map_or(now_version, |durable| durable.min(now_version));
                state.register_read(version);
                data.read_version = Some(version);
                version
            }
        };
        if now_version - read_version > TRANSACTION_LIFE_VERSIONS_MAX {
            state.stats.too_old += 1;
            return (Err(KvError::new(KvError::TRANSACTION_TOO_OLD)), latency);
        }
        if ranges {
            state.stats.ranges_read += reads as u64;
        }
        (f(&mut data, &state), latency)
    }

    fn delayed<T: Send + 'static>(
        &self,
        result: Result<T, KvError>,
        latency: Option<Duration>,
    ) -> impl Future<Output = Result<T, KvError>> + Send {
        let sleep = latency.map(|d| self.inner.kv.shared.sleeper.sleep(d));
        async move {
            if let Some(sleep) = sleep {
                sleep.await;
            }
            result
        }
    }

    /// How long the transaction's first read waits for its read version, if this read is
    /// the first and latency is injected. FDB's client asks for a read version at the
    /// first read, and the version it gets is fixed only when the answer is made: commits
    /// that land while the request is on its way are seen. Without this wait, whatever a
    /// read returns would have been written before the caller asked.
    fn read_version_wait(&self) -> Option<Duration> {
        let kv = &self.inner.kv;
        if kv.exempt || !kv.shared.latency_on.load(Ordering::Relaxed) || self.inner.data.lock().read_version.is_some() {
            return None;
        }
        let mut state = kv.shared.lock();
        kv.latency(&mut state)
    }

    /// A read performed after `wait` (see [`read_version_wait`](Self::read_version_wait)),
    /// then delayed by its own latency.
    fn after<T: Send + 'static>(
        &self,
        wait: Duration,
        perform: impl FnOnce(&MemoryTransaction) -> (Result<T, KvError>, Latency) + Send + 'static,
    ) -> impl Future<Output = Result<T, KvError>> + Send {
        let txn = self.clone();
        let waiting = self.inner.kv.shared.sleeper.sleep(wait);
        async move {
            waiting.await;
            let (result, latency) = perform(&txn);
            txn.delayed(result, latency).await
        }
    }

    /// [`get_many`](KvTransaction::get_many)'s reads, performed now, and their latency.
    fn get_many_now(&self, keys: &[Vec<u8>], snapshot: bool) -> (Result<Values, KvError>, Latency) {
        // A chunk at a time: holding the store's lock for thousands of reads would stall
        // every other client (on a node: the completer behind the poller, or the reverse).
        let mut values = Vec::with_capacity(keys.len());
        let mut slowest = None;
        for chunk in keys.chunks(GET_MANY_CHUNK) {
            let (result, latency) = self.with_reads(chunk.len(), false, |data, state| {
                chunk.iter().try_for_each(|key| {
                    values.push(data.get(state, key, snapshot)?);
                    Ok(())
                })
            });
            slowest = slowest.max(latency);
            if let Err(error) = result {
                return (Err(error), slowest);
            }
        }
        (Ok(values), slowest)
    }

    fn write(&self, f: impl FnOnce(&mut Buffer)) {
        let mut data = self.inner.data.lock();
        if !data.finished {
            f(&mut data);
        }
    }
}

impl KvTransaction for MemoryTransaction {
    fn read_version(&self) -> impl Future<Output = Result<Version, KvError>> + Send {
        let read = |txn: &MemoryTransaction| txn.with_read(|data, _| Ok(data.read_version.unwrap_or_default()));
        match self.read_version_wait() {
            None => {
                let (result, latency) = read(self);
                Either::Left(self.delayed(result, latency))
            }
            Some(wait) => Either::Right(self.after(wait, read)),
        }
    }

    fn get(&self, key: &[u8], snapshot: bool) -> impl Future<Output = Result<Option<Vec<u8>>, KvError>> + Send {
        match self.read_version_wait() {
            None => {
                let (result, latency) = self.with_read(|data, state| data.get(state, key, snapshot));
                Either::Left(self.delayed(result, latency))
            }
            Some(wait) => {
                let key = key.to_vec();
                Either::Right(self.after(wait, move |txn| txn.with_read(|data, state| data.get(state, &key, snapshot))))
            }
        }
    }

    fn get_many(
        &self,
        keys: &[Vec<u8>],
        snapshot: bool,
    ) -> impl Future<Output = Result<Vec<Option<Vec<u8>>>, KvError>> + Send {
        match self.read_version_wait() {
            None => {
                let (result, latency) = self.get_many_now(keys, snapshot);
                Either::Left(self.delayed(result, latency))
            }
            Some(wait) => {
                let keys = keys.to_vec();
                Either::Right(self.after(wait, move |txn| txn.get_many_now(&keys, snapshot)))
            }
        }
    }

    fn get_range(
        &self,
        request: &RangeRequest,
        snapshot: bool,
    ) -> impl Future<Output = Result<RangeResult, KvError>> + Send {
        match self.read_version_wait() {
            None => {
                let (result, latency) =
                    self.with_reads(1, true, |data, state| data.get_range(state, request, snapshot));
                Either::Left(self.delayed(result, latency))
            }
            Some(wait) => {
                let request = request.clone();
                Either::Right(self.after(wait, move |txn| {
                    txn.with_reads(1, true, |data, state| data.get_range(state, &request, snapshot))
                }))
            }
        }
    }

    fn get_ranges(
        &self,
        requests: &[RangeRequest],
        snapshot: bool,
    ) -> impl Future<Output = Result<Vec<RangeResult>, KvError>> + Send {
        match self.read_version_wait() {
            None => {
                let (result, latency) =
                    self.with_reads(requests.len(), true, |data, state| data.get_ranges(state, requests, snapshot));
                Either::Left(self.delayed(result, latency))
            }
            Some(wait) => {
                let requests = requests.to_vec();
                Either::Right(self.after(wait, move |txn| {
                    txn.with_reads(requests.len(), true, |data, state| data.get_ranges(state, &requests, snapshot))
                }))
            }
        }
    }

    fn set(&self, key: &[u8], value: &[u8]) {
        self.write(|data| data.set(key, value));
    }

    fn clear(&self, key: &[u8]) {
        self.write(|data| data.clear(key));
    }

    fn clear_range(&self, begin: &[u8], end: &[u8]) {
        self.write(|data| data.clear_range(begin, end));
    }

    fn atomic_op(&self, key: &[u8], param: &[u8], op: AtomicOp) {
        self.write(|data| data.atomic_op(key, param, op));
    }

    fn add_read_conflict_range(&self, begin: &[u8], end: &[u8]) {
        self.write(|data| data.add_read_conflict(begin, end));
    }

    fn add_write_conflict_range(&self, begin: &[u8], end: &[u8]) {
        self.write(|data| data.add_write_conflict_range(begin, end));
    }

    fn commit(&self) -> impl Future<Output = Result<CommitInfo, KvError>> + Send {
        let (result, latency, durable) = self.commit_now();
        let delayed = self.delayed(result, latency);
        async move {
            let info = delayed.await?;
            if let Some(durable) = durable {
                // Acknowledged once on disk; a journal that failed leaves it unknown.
                durable.await.unwrap_or_else(|_| Err(KvError::new(KvError::COMMIT_UNKNOWN_RESULT)))?;
            }
            Ok(info)
        }
    }

    fn watch(&self, key: &[u8]) -> impl Future<Output = Result<(), KvError>> + Send + 'static {
        let (notify, fired) = futures_channel::oneshot::channel();
        let mut data = self.inner.data.lock();
        if data.finished {
            let _ = notify.send(Err(KvError::new(KvError::USED_DURING_COMMIT)));
        } else {
            data.watches.push((key.to_vec(), notify));
        }
        async move { fired.await.unwrap_or_else(|_| Err(KvError::new(KvError::TRANSACTION_CANCELLED))) }
    }
}

impl MemoryTransaction {
    /// Commits under the store's lock: the result, the latency to add and, with a
    /// journal, what tells when the commit is on disk.
    fn commit_now(&self) -> (Result<CommitInfo, KvError>, Option<Duration>, Option<DurableNotice>) {
        let kv = &self.inner.kv;
        let mut data = self.inner.data.lock();
        if data.finished {
            return (Err(KvError::new(KvError::USED_DURING_COMMIT)), None, None);
        }
        data.finished = true;
        let read_version = data.read_version;
        let watches = std::mem::take(&mut data.watches);
        // Hashed before the store is locked, for the commit's record in `State::recent`.
        let point_hashes = KeyHashes::of(data.points.keys());
        let mut state = match kv.enter() {
            Ok(state) => state,
            Err((mut state, error)) => {
                if let Some(version) = read_version {
                    state.unregister_read(version);
                }
                for (_, notify) in watches {
                    let _ = notify.send(Err(error.clone()));
                }
                let latency = kv.latency(&mut state);
                return (Err(error), latency, None);
            }
        };
        let latency = kv.latency(&mut state);
        let now_version = kv.now_version(&state);
        // What each watch saw: the value at the read version, with this transaction's writes.
        let seen: Vec<Option<Vec<u8>>> = watches
            .iter()
            .map(|(key, _)| {
                let stored = state.value_at(key, read_version.unwrap_or(now_version));
                data.resolve(key, stored).unwrap_or(None)
            })
            .collect();
        let result = self.commit_locked(&mut data, &mut state, now_version, point_hashes);
        // A read-only commit's version is its read version, on disk already.
        let durable = match (&result, &mut state.journal) {
            (Ok(info), Some(journal)) => journal.acknowledge(info.version),
            _ => None,
        };
        for ((key, notify), seen) in watches.into_iter().zip(seen) {
            match &result {
                Ok(_) => state.arm_watch(key, seen, notify),
                Err(error) => {
                    let _ = notify.send(Err(error.clone()));
                }
            }
        }
        if let Some(version) = read_version {
            // A late commit keeps its read version registered until it lands.
            let handed_to_late = matches!(&result, Err(e) if e.code() == KvError::TRANSACTION_TIMED_OUT);
            if !handed_to_late {
                state.unregister_read(version);
            }
        }
        state.collect_garbage(now_version);
        (result, latency, durable)
    }

    fn commit_locked(
        &self,
        data: &mut Buffer,
        state: &mut State,
        now_version: Version,
        point_hashes: KeyHashes,
    ) -> Result<CommitInfo, KvError> {
        if let Some(error) = data.error.take() {
            return Err(error);
        }
        if data.size > self.inner.kv.shared.transaction_size_limit {
            return Err(KvError::new(KvError::TRANSACTION_TOO_LARGE));
        }
        let read_only = data.write_conflicts.is_empty() && data.points.is_empty() && data.cleared.is_empty();
        if read_only {
            state.stats.read_only_commits += 1;
            return Ok(CommitInfo { version: data.read_version.unwrap_or(now_version), versionstamp: None });
        }
        let writes = Writes {
            // A transaction that wrote without reading gets its read version now.
            read_version: data.read_version.unwrap_or(now_version),
            read_points: std::mem::take(&mut data.read_points),
            read_conflicts: std::mem::take(&mut data.read_conflicts),
            write_conflicts: std::mem::take(&mut data.write_conflicts),
            cleared: std::mem::take(&mut data.cleared),
            points: std::mem::take(&mut data.points),
            stamped_keys: std::mem::take(&mut data.stamped_keys),
            point_hashes,
        };
        let faults = if self.inner.kv.exempt { KvFaults::default() } else { state.faults.clone() };
        // FDB can only abort a transaction that has something to conflict on.
        let has_reads = !writes.read_conflicts.is_empty() || !writes.read_points.is_empty();
        if has_reads && state.chance(faults.spurious_conflict) {
            state.stats.spurious_conflicts += 1;
            return Err(KvError::new(KvError::NOT_COMMITTED));
        }
        if state.chance(faults.unknown_result_not_committed) {
            state.stats.unknown_not_committed += 1;
            return Err(KvError::new(KvError::COMMIT_UNKNOWN_RESULT));
        }
        if state.chance(faults.timeout_commit_lands_later) {
            state.stats.timeouts += 1;
            let delay = Duration::from_micros(state.entropy.below(4_000_000));
            let land_at = self.inner.kv.shared.clock.monotonic().saturating_add(delay);
            if data.read_version.is_none() {
                state.register_read(writes.read_version);
            }
            state.late.push(LateCommit { land_at, writes });
            return Err(KvError::new(KvError::TRANSACTION_TIMED_OUT));
        }
        let info = state.apply(writes, now_version, data.read_version)?;
        if state.chance(faults.unknown_result_committed) {
            state.stats.unknown_committed += 1;
            return Err(KvError::new(KvError::COMMIT_UNKNOWN_RESULT));
        }
        Ok(info)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
                assert!(kv.shared.state.lock().recent.len() >= between, "commits with company are recorded");
                reader.set(b"result", b"r");
                let outcome = reader.commit().await;
                match writer {
                    Some(_) => assert_eq!(outcome.unwrap_err().code(), KvError::NOT_COMMITTED, "{between} commits"),
                    None => assert!(outcome.is_ok(), "{between} commits, none wrote the key"),
                }
                assert!(kv.shared.state.lock().recent.is_empty(), "collected once no transaction is live");
            }
        });
    }
}
