//! The emulator's locked state: every key's recent versions, the recent commits' written
//! keys for conflict checks, watches and late commits.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::hash::BuildHasher;

use rustc_hash::FxBuildHasher;
use std::time::Duration;

use crate::entropy::Entropy;
use crate::kv::atomic::{self};
use crate::kv::buffer::{Base, Point, StoredKey, WatchSender};
use crate::kv::journal::{JournalState, Mutation};
use crate::kv::key_map::KeyMap;
use crate::kv::write_set::WriteSet;
use crate::kv::{
    kv_pair, CommitInfo, KvError, RangeCount, RangeResult, Version, FIRST_PAIRS, TRANSACTION_LIFE_VERSIONS_MAX,
};
use crate::time::MonotonicInstant;

use super::{KvFaults, MemoryKvStats};

/// A key's recent versions, oldest first; `None` is a deletion. The newest version is
/// also the key's latest committed write, which is what conflict checks ask (a write
/// that changes nothing readable, such as clearing an absent key, still adds a version
/// while another transaction is live to conflict with it).
/// Most keys have one version (history and index entries are written once): it is kept
/// inline, without an allocation of its own.
pub(super) type Versions = smallvec::SmallVec<[(Version, Option<Box<[u8]>>); 1]>;

pub(super) struct State {
    pub(super) data: KeyMap<StoredKey, Versions>,
    /// The last commit version.
    pub(super) version: Version,
    /// The newest read version handed out. It can be ahead of `version` (read versions
    /// follow the clock), and every later commit must land after it: a commit at a read
    /// version in use would be seen by that reader and escape its conflict check.
    pub(super) newest_read: Version,
    /// Added to the clock-derived version (an injected recovery jump).
    pub(super) version_offset: Version,
    /// Range writes (clear_range, explicit write-conflict ranges), in commit order.
    pub(super) range_log: VecDeque<(Version, Vec<u8>, Vec<u8>)>,
    /// Keys written at a version, oldest first, so old versions can be dropped.
    pub(super) expiry: VecDeque<(Version, StoredKey)>,
    /// Read versions of live transactions (and queued late commits), with counts.
    pub(super) live_reads: BTreeMap<Version, usize>,
    pub(super) entropy: Entropy,
    pub(super) faults: KvFaults,
    pub(super) unavailable: bool,
    pub(super) partitioned: BTreeSet<String>,
    pub(super) late: Vec<LateCommit>,
    pub(super) stats: MemoryKvStats,
    /// Armed watches by key: the value each watcher saw, and how to tell it.
    pub(super) watchers: BTreeMap<Vec<u8>, Vec<Watcher>>,
    /// While a commit applies its point writes (in the order the transaction kept them): the watches
    /// they fire, told in key order once all are applied, so that which watcher's task
    /// wakes first does not depend on the order of a transaction's writes.
    pub(super) held_notices: Option<Vec<(Vec<u8>, WatchSender)>>,
    /// The hashes of the keys written by each recent commit that had company (a live
    /// transaction that could conflict with it), oldest first: a point read's conflict
    /// check looks there before searching the B-trees, and finds most keys absent.
    pub(super) recent: VecDeque<(Version, KeyHashes)>,
    /// Every commit with company after this version is in `recent`.
    pub(super) recent_floor: Version,
    /// Values replaced, deleted or collected under the lock, freed once it is released:
    /// freeing touches each allocation's page, a cache miss the lock need not wait on.
    pub(super) graveyard: Vec<Box<[u8]>>,
    /// For a durable store: its commits on their way to disk (see [`super::journal`]).
    pub(super) journal: Option<JournalState>,
}

/// An armed watch: fires when its key's latest value is no longer `seen`.
pub(super) struct Watcher {
    pub(super) seen: Option<Vec<u8>>,
    pub(super) notify: WatchSender,
}

/// A commit reported as timed out that may still land.
pub(super) struct LateCommit {
    pub(super) land_at: MonotonicInstant,
    pub(super) writes: Writes,
}

/// Everything a commit needs, taken out of a transaction.
pub(super) struct Writes {
    pub(super) read_version: Version,
    /// Keys read by serializable point reads (each stands for `[key, key\0)`).
    pub(super) read_points: Vec<StoredKey>,
    pub(super) read_conflicts: Vec<(Vec<u8>, Vec<u8>)>,
    pub(super) write_conflicts: Vec<(Vec<u8>, Vec<u8>)>,
    pub(super) cleared: Vec<(Vec<u8>, Vec<u8>)>,
    pub(super) points: WriteSet<StoredKey, Point>,
    pub(super) stamped_keys: Vec<(Vec<u8>, usize, Vec<u8>)>,
    /// The hashes of the keys of `points`, worked out before the store is locked.
    pub(super) point_hashes: KeyHashes,
}

/// Hashes of one commit's written keys ([`key_hash`]): a few in a list (most commits
/// write a few keys, and a set for each would cost them more than its lookups save), more
/// in a set.
pub(super) enum KeyHashes {
    Few(smallvec::SmallVec<[u64; 8]>),
    Many(hashbrown::HashSet<u64, FxBuildHasher>),
}

/// Keys a commit writes beyond which [`KeyHashes`] keeps their hashes in a set.
pub(super) const FEW_KEYS_MAX: usize = 32;

impl KeyHashes {
    pub(super) fn of<'a>(keys: impl ExactSizeIterator<Item = &'a [u8]>) -> Self {
        if keys.len() <= FEW_KEYS_MAX {
            Self::Few(keys.map(key_hash).collect())
        } else {
            Self::Many(keys.map(key_hash).collect())
        }
    }

    pub(super) fn insert(&mut self, hash: u64) {
        match self {
            Self::Few(hashes) if hashes.len() < FEW_KEYS_MAX => hashes.push(hash),
            // A range clear can add thousands: they go into a set, as at the start.
            Self::Few(hashes) => *self = Self::Many(hashes.iter().copied().chain([hash]).collect()),
            Self::Many(hashes) => {
                hashes.insert(hash);
            }
        }
    }

    pub(super) fn contains(&self, hash: u64) -> bool {
        match self {
            Self::Few(hashes) => hashes.contains(&hash),
            Self::Many(hashes) => hashes.contains(&hash),
        }
    }
}

/// A key's hash in [`State::recent`].
pub(super) fn key_hash(key: &[u8]) -> u64 {
    FxBuildHasher.hash_one(key)
}

/// At most this many recent commits are asked whether they wrote a key before its
/// conflict check searches the B-tree instead.
pub(super) const RECENT_ASKED_MAX: usize = 16;

/// The value among a key's `versions` at `version`.
pub(super) fn value_in(versions: &Versions, version: Version) -> Option<&[u8]> {
    versions.iter().rev().find(|(v, _)| *v <= version).and_then(|(_, value)| value.as_deref())
}

pub(super) fn is_point_range(begin: &[u8], end: &[u8]) -> bool {
    end.len() == begin.len() + 1 && end.starts_with(begin) && end[begin.len()] == 0
}

/// The stored pairs visible at `read_version` from `cursor` on, up to `end` (exclusive)
/// and at most `limit` (`more` when the limit cut them short); `cursor` is left at the
/// first key not taken. The cursor is open at the far end and the range cut by comparison: a
/// B-tree range with both ends searches for both, and most reads stop after a few keys.
pub(super) fn stored_pairs<'a>(
    cursor: &mut std::iter::Peekable<impl Iterator<Item = (&'a StoredKey, &'a Versions)>>,
    end: &[u8],
    limit: Option<usize>,
    read_version: Version,
) -> RangeResult {
    let limit = limit.unwrap_or(usize::MAX);
    let mut pairs = Vec::with_capacity(limit.min(FIRST_PAIRS));
    while let Some((key, versions)) = cursor.peek() {
        if key.as_slice() >= end {
            break;
        }
        if let Some(value) = value_in(versions, read_version) {
            if pairs.len() == limit {
                return RangeResult { pairs, more: true };
            }
            pairs.push(kv_pair(key, value));
        }
        cursor.next();
    }
    RangeResult { pairs, more: false }
}

/// How many stored pairs visible at `read_version` lie in `[begin, end)` of `data`, at
/// most `limit`: what [`stored_pairs`] would return, counted without copying them.
pub(super) fn stored_count<'a>(
    cursor: impl Iterator<Item = (&'a StoredKey, &'a Versions)>,
    end: &[u8],
    limit: Option<usize>,
    read_version: Version,
) -> RangeCount {
    let limit = limit.unwrap_or(usize::MAX);
    let mut count = 0;
    for (key, versions) in cursor {
        if key.as_slice() >= end {
            break;
        }
        if value_in(versions, read_version).is_some() {
            if count == limit {
                return RangeCount { count, more: true };
            }
            count += 1;
        }
    }
    RangeCount { count, more: false }
}

impl State {
    /// The value of `key` at `version`.
    pub(super) fn value_at(&self, key: &[u8], version: Version) -> Option<&[u8]> {
        value_in(self.data.get(key)?, version)
    }

    /// With a journal, the newest version every commit at or below which is on disk, while
    /// some commit is not (`None`: all are). Reads are served at or below it, so nothing
    /// read can be lost by a crash.
    pub(super) fn durable_version(&self) -> Option<Version> {
        self.journal.as_ref().and_then(JournalState::durable_version)
    }

    pub(super) fn register_read(&mut self, version: Version) {
        self.newest_read = self.newest_read.max(version);
        *self.live_reads.entry(version).or_insert(0) += 1;
    }

    pub(super) fn unregister_read(&mut self, version: Version) {
        if let Some(count) = self.live_reads.get_mut(&version) {
            *count -= 1;
            if *count == 0 {
                self.live_reads.remove(&version);
            }
        }
    }

    pub(super) fn chance(&mut self, rate: f64) -> bool {
        rate > 0.0 && (self.entropy.below(1 << 53) as f64) < rate * (1u64 << 53) as f64
    }

    pub(super) fn latency(&mut self) -> Option<Duration> {
        let max = self.faults.latency_max;
        if max.is_zero() {
            return None;
        }
        let micros = self.entropy.below(max.as_micros() as u64 + 1);
        Some(Duration::from_micros(micros))
    }

    /// Whether a commit after `read_version` may have written `key`: `false` only when
    /// every such commit is in `recent` and none of them wrote a key of its hash.
    pub(super) fn maybe_written_after(&self, read_version: Version, key: &[u8]) -> bool {
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
    pub(super) fn last_write(&self, key: &[u8]) -> Option<Version> {
        self.data.get(key).and_then(|versions| versions.last()).map(|(v, _)| *v)
    }

    /// Whether a write committed after `read_version` meets `[begin, end)`.
    pub(super) fn conflicts(&self, read_version: Version, begin: &[u8], end: &[u8]) -> bool {
        self.data.range(begin, end).any(|(_, versions)| versions.last().is_some_and(|(v, _)| *v > read_version))
            || self.range_log.iter().any(|(v, b, e)| *v > read_version && b.as_slice() < end && begin < e.as_slice())
    }

    /// Whether no transaction holds a read version but the one committing, whose read
    /// version (when it registered one) is `own`.
    pub(super) fn alone(&self, own: Option<Version>) -> bool {
        match own {
            Some(own) => self.live_reads.len() == 1 && self.live_reads.get(&own) == Some(&1),
            None => self.live_reads.is_empty(),
        }
    }

    /// Checks and applies `writes` at a new version, returning it. `own` is the read version
    /// the committing transaction registered, if it did.
    pub(super) fn apply(
        &mut self,
        writes: Writes,
        now_version: Version,
        own: Option<Version>,
    ) -> Result<CommitInfo, KvError> {
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
    pub(super) fn write_version(&mut self, key: StoredKey, version: Version, value: Option<Vec<u8>>, alone: bool) {
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
    pub(super) fn fire_watchers(&mut self, key: &[u8], value: Option<&[u8]>) {
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
    pub(super) fn arm_watch(&mut self, key: Vec<u8>, seen: Option<Vec<u8>>, notify: WatchSender) {
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
    pub(super) fn collect_garbage(&mut self, now_version: Version) {
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
