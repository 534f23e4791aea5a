//! A `MemoryKv` transaction: its buffered writes, read-your-writes reads, and commit.

use std::fmt;
use std::future::Future;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use futures_util::future::Either;

use parking_lot::Mutex;
use std::time::Duration;

use crate::kv::atomic::AtomicOp;
use crate::kv::buffer::{merge, Buffer};
use crate::kv::journal::DurableNotice;
use crate::kv::{
    CommitInfo, KvBytes, KvError, KvTransaction, RangeCount, RangeRequest, RangeResult, Version, FIRST_PAIRS,
    TRANSACTION_LIFE_VERSIONS_MAX,
};
use crate::time::Clock;

use super::state::{stored_count, stored_pairs, value_in, KeyHashes, LateCommit, State, Versions, Writes};
use super::{KvFaults, MemoryKv, GET_MANY_CHUNK};

/// The latency to add to an operation's answer, if any.
pub(super) type Latency = Option<Duration>;

/// Keys' values, in the order asked (`None`: absent).
pub(super) type Values = Vec<Option<Vec<u8>>>;

/// A [`MemoryKv`] transaction. Clones are handles to the same transaction.
#[derive(Clone)]
pub struct MemoryTransaction {
    pub(super) inner: Arc<TxnInner>,
}

impl fmt::Debug for MemoryTransaction {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MemoryTransaction").finish_non_exhaustive()
    }
}

pub(super) struct TxnInner {
    pub(super) kv: MemoryKv,
    pub(super) data: Mutex<Buffer>,
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
    pub(super) fn get(&mut self, state: &State, key: &[u8], snapshot: bool) -> Result<Option<Vec<u8>>, KvError> {
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
    pub(super) fn get_ranges(
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

    /// How many pairs each of `requests` holds as this transaction sees them (snapshot
    /// reads). A range it wrote nothing in is counted in place; any other is read.
    pub(super) fn count_ranges(
        &mut self,
        state: &State,
        requests: &[RangeRequest],
    ) -> Result<Vec<RangeCount>, KvError> {
        let read_version = self.read_version.unwrap_or_default();
        let mut counts = Vec::with_capacity(requests.len());
        for request in requests {
            let (begin, end) = (request.begin.as_slice(), request.end.as_slice());
            let in_place = begin < end
                && request.limit != Some(0)
                && !request.reverse
                && !self.is_unreadable(begin, end)
                && self.untouched(begin, end);
            counts.push(if in_place {
                stored_count(state.data.from(begin), end, request.limit, read_version)
            } else {
                RangeCount::of(&self.get_range(state, request, true)?)
            });
        }
        Ok(counts)
    }

    /// The pairs of `request` as this transaction sees them, registering a serializable
    /// read's conflict range.
    pub(super) fn get_range(
        &mut self,
        state: &State,
        request: &RangeRequest,
        snapshot: bool,
    ) -> Result<RangeResult, KvError> {
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
        let mut pairs = Vec::with_capacity(limit.min(FIRST_PAIRS));
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
                pairs.push((KvBytes::from_slice(key), KvBytes::from_vec(value)));
            }
        }
        Ok(self.conflict_on_range(request, snapshot, pairs, more))
    }
}

impl MemoryTransaction {
    /// Runs `f` with the transaction and the store locked, after fixing the read version
    /// and checking the transaction's age. Returns the result and the latency to add.
    pub(super) fn with_read<T>(
        &self,
        f: impl FnOnce(&mut Buffer, &State) -> Result<T, KvError>,
    ) -> (Result<T, KvError>, Option<Duration>) {
        self.with_reads(1, false, f)
    }

    /// [`with_read`](Self::with_read) for `reads` reads issued together (of ranges when
    /// `ranges`): they wait as long as the slowest of them.
    pub(super) fn with_reads<T>(
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
        // A transaction's later reads share the store with other readers: only its first
        // read registers a read version, which writes the state.
        if let Some(read_version) = data.read_version {
            if let Some(state) = kv.enter_shared() {
                if kv.now_version(&state) - read_version <= TRANSACTION_LIFE_VERSIONS_MAX {
                    if ranges {
                        kv.shared.shared_reads.ranges_read.fetch_add(reads as u64, Ordering::Relaxed);
                    }
                    return (f(&mut data, &state), None);
                }
            }
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

    pub(super) fn delayed<T: Send + 'static>(
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
    pub(super) fn read_version_wait(&self) -> Option<Duration> {
        let kv = &self.inner.kv;
        if kv.exempt || !kv.shared.latency_on.load(Ordering::Relaxed) || self.inner.data.lock().read_version.is_some() {
            return None;
        }
        let mut state = kv.shared.lock();
        kv.latency(&mut state)
    }

    /// A read performed after `wait` (see [`read_version_wait`](Self::read_version_wait)),
    /// then delayed by its own latency.
    pub(super) fn after<T: Send + 'static>(
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
    pub(super) fn get_many_now<Q: AsRef<[u8]>>(
        &self,
        keys: &[Q],
        snapshot: bool,
    ) -> (Result<Values, KvError>, Latency) {
        // A chunk at a time: holding the store's lock for thousands of reads would stall
        // every other client (on a node: the completer behind the poller, or the reverse).
        let mut values = Vec::with_capacity(keys.len());
        let mut slowest = None;
        for chunk in keys.chunks(GET_MANY_CHUNK) {
            let (result, latency) = self.with_reads(chunk.len(), false, |data, state| {
                chunk.iter().try_for_each(|key| {
                    values.push(data.get(state, key.as_ref(), snapshot)?);
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

    pub(super) fn write(&self, f: impl FnOnce(&mut Buffer)) {
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

    fn get_many<Q: AsRef<[u8]> + Sync>(
        &self,
        keys: &[Q],
        snapshot: bool,
    ) -> impl Future<Output = Result<Vec<Option<Vec<u8>>>, KvError>> + Send {
        match self.read_version_wait() {
            None => {
                let (result, latency) = self.get_many_now(keys, snapshot);
                Either::Left(self.delayed(result, latency))
            }
            Some(wait) => {
                let keys: Vec<Vec<u8>> = keys.iter().map(|key| key.as_ref().to_vec()).collect();
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

    fn count_ranges(&self, requests: &[RangeRequest]) -> impl Future<Output = Result<Vec<RangeCount>, KvError>> + Send {
        match self.read_version_wait() {
            None => {
                let (result, latency) =
                    self.with_reads(requests.len(), true, |data, state| data.count_ranges(state, requests));
                Either::Left(self.delayed(result, latency))
            }
            Some(wait) => {
                let requests = requests.to_vec();
                Either::Right(self.after(wait, move |txn| {
                    txn.with_reads(requests.len(), true, |data, state| data.count_ranges(state, &requests))
                }))
            }
        }
    }

    fn set(&self, key: &[u8], value: &[u8]) {
        self.write(|data| data.set(key, value));
    }

    fn set_owned(&self, key: &[u8], value: Vec<u8>) {
        self.write(|data| data.set_owned(key, value));
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
    pub(super) fn commit_now(&self) -> (Result<CommitInfo, KvError>, Option<Duration>, Option<DurableNotice>) {
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

    pub(super) fn commit_locked(
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
