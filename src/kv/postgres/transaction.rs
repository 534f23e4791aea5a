//! One `PgKv` transaction: its buffer, its read session, and its commit.

use std::future::Future;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::Arc;
use std::time::Duration;

use deadpool_postgres::Object;
use futures_channel::oneshot;
use parking_lot::Mutex;
use tokio_postgres::types::ToSql;

use super::super::atomic::{self, AtomicOp};
use super::super::buffer::{merge, Base, Buffer};
use super::super::{
    key_after, kv_pair, CommitInfo, KvBytes, KvError, KvPair, KvTransaction, RangeRequest, RangeResult, Version,
    TRANSACTION_LIFE_VERSIONS_MAX, TRANSACTION_SIZE_MAX, VERSIONS_PER_SECOND,
};
use super::PgKv;
use crate::time::MonotonicInstant;

/// The shortest page a range read merged with the transaction's own writes asks for.
const MERGE_PAGE_MIN: usize = 64;

/// A [`PgKv`] transaction. Clones are handles to the same transaction.
#[derive(Clone)]
pub struct PgTransaction {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for PgTransaction {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PgTransaction").finish_non_exhaustive()
    }
}

/// A watch's key and where its transaction's commit sends the value it saw.
type PendingWatch = (Vec<u8>, oneshot::Sender<Result<Option<Vec<u8>>, KvError>>);

struct Inner {
    kv: PgKv,
    buffer: Mutex<Buffer>,
    /// The read session, opened by the first read.
    session: tokio::sync::Mutex<Slot>,
    watches: Mutex<Vec<PendingWatch>>,
}

enum Slot {
    Unopened,
    Open(Arc<Session>),
    /// Committed or failed at commit.
    Finished,
}

/// The session's connection is in a read transaction.
const OPEN: u8 = 0;
/// The read transaction ended: the connection goes back to the pool.
const CLEAN: u8 = 1;
/// The connection's state is unknown (a lost or timed-out round trip): it is closed.
const BROKEN: u8 = 2;

/// A read transaction on one pooled connection.
struct Session {
    /// `None` only while it is dropped.
    conn: Option<Object>,
    read_version: Version,
    /// The server's clock when the read version was taken, in microseconds.
    server_time: i64,
    /// The client's clock then.
    started: MonotonicInstant,
    state: AtomicU8,
}

impl Session {
    fn client(&self) -> Result<&Object, KvError> {
        self.conn.as_ref().ok_or_else(|| KvError::new(KvError::USED_DURING_COMMIT))
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        let Some(conn) = self.conn.take() else { return };
        match self.state.load(Ordering::Relaxed) {
            CLEAN => drop(conn),
            // Dropped uncommitted: end the read transaction before the connection serves
            // another, or close it when that cannot be done.
            OPEN => match tokio::runtime::Handle::try_current() {
                Ok(runtime) => {
                    runtime.spawn(async move {
                        if conn.batch_execute("ROLLBACK").await.is_err() {
                            drop(Object::take(conn));
                        }
                    });
                }
                Err(_) => drop(Object::take(conn)),
            },
            _ => drop(Object::take(conn)),
        }
    }
}

/// Pairs read from the server, and whether its limit cut them short.
type Page = (Vec<KvPair>, bool);

/// The `LIMIT` that answers a read of at most `limit` pairs: one more, to know whether
/// more remain (`None`: no limit).
fn one_more(limit: Option<usize>) -> Option<i64> {
    limit.map(|limit| limit.saturating_add(1).min(i64::MAX as usize) as i64)
}

/// `pairs` read with [`one_more`]'s limit, cut back to `limit`.
fn page(mut pairs: Vec<KvPair>, limit: Option<usize>) -> Page {
    let more = limit.is_some_and(|limit| pairs.len() > limit);
    if let (true, Some(limit)) = (more, limit) {
        pairs.truncate(limit);
    }
    (pairs, more)
}

/// FDB's code of an atomic operation, as the server function `atomic` takes it.
fn op_code(op: AtomicOp) -> i32 {
    match op {
        AtomicOp::Add => 0,
        AtomicOp::BitAnd => 1,
        AtomicOp::BitOr => 2,
        AtomicOp::BitXor => 3,
        AtomicOp::Max => 4,
        AtomicOp::Min => 5,
        AtomicOp::ByteMax => 6,
        AtomicOp::ByteMin => 7,
        AtomicOp::CompareAndClear => 8,
        // Never buffered as operations: the buffer turns them into stamped keys and values.
        AtomicOp::SetVersionstampedKey | AtomicOp::SetVersionstampedValue => -1,
    }
}

/// The parameters of the server function `commit`.
#[derive(Default)]
struct CommitCall {
    rv: Option<i64>,
    rt: Option<i64>,
    read_keys: Vec<Vec<u8>>,
    read_b: Vec<Vec<u8>>,
    read_e: Vec<Vec<u8>>,
    clear_b: Vec<Vec<u8>>,
    clear_e: Vec<Vec<u8>>,
    put_k: Vec<Vec<u8>>,
    put_v: Vec<Option<Vec<u8>>>,
    sval_k: Vec<Vec<u8>>,
    sval_v: Vec<Vec<u8>>,
    sval_o: Vec<i32>,
    op_k: Vec<Vec<u8>>,
    op_c: Vec<i32>,
    op_p: Vec<Vec<u8>>,
    skey_k: Vec<Vec<u8>>,
    skey_o: Vec<i32>,
    skey_v: Vec<Vec<u8>>,
    wc_b: Vec<Vec<u8>>,
    wc_e: Vec<Vec<u8>>,
}

impl CommitCall {
    /// Takes the buffered writes and conflict ranges out of `buffer`.
    fn take(buffer: &mut Buffer) -> Self {
        let mut call =
            Self { read_keys: buffer.read_points.drain(..).map(|key| key.to_vec()).collect(), ..Self::default() };
        (call.read_b, call.read_e) = buffer.read_conflicts.drain(..).unzip();
        (call.clear_b, call.clear_e) = buffer.cleared.drain(..).unzip();
        (call.wc_b, call.wc_e) = buffer.write_conflicts.drain(..).unzip();
        for (bytes, offset, value) in buffer.stamped_keys.drain(..) {
            call.skey_k.push(bytes);
            call.skey_o.push(offset as i32);
            call.skey_v.push(value);
        }
        for (key, point) in std::mem::take(&mut buffer.points).into_entries() {
            let key = key.to_vec();
            let known = match point.base {
                Base::Set(value) => Some(Some(value)),
                Base::Cleared => Some(None),
                Base::Unchanged => None,
                Base::Stamped(bytes, offset) => {
                    call.sval_k.push(key.clone());
                    call.sval_v.push(bytes);
                    call.sval_o.push(offset as i32);
                    None
                }
            };
            match known {
                // The value is known here: fold the operations in.
                Some(mut value) => {
                    for (op, param) in &point.ops {
                        value = atomic::apply(*op, value.as_deref(), param);
                    }
                    call.put_k.push(key);
                    call.put_v.push(value);
                }
                None => {
                    for (op, param) in point.ops {
                        call.op_k.push(key.clone());
                        call.op_c.push(op_code(op));
                        call.op_p.push(param);
                    }
                }
            }
        }
        call
    }

    fn writes(&self) -> bool {
        !(self.put_k.is_empty()
            && self.sval_k.is_empty()
            && self.op_k.is_empty()
            && self.skey_k.is_empty()
            && self.clear_b.is_empty()
            && self.wc_b.is_empty())
    }

    fn stamped(&self) -> bool {
        !self.sval_k.is_empty() || !self.skey_k.is_empty()
    }

    fn params(&self) -> [&(dyn ToSql + Sync); 20] {
        [
            &self.rv,
            &self.rt,
            &self.read_keys,
            &self.read_b,
            &self.read_e,
            &self.clear_b,
            &self.clear_e,
            &self.put_k,
            &self.put_v,
            &self.sval_k,
            &self.sval_v,
            &self.sval_o,
            &self.op_k,
            &self.op_c,
            &self.op_p,
            &self.skey_k,
            &self.skey_o,
            &self.skey_v,
            &self.wc_b,
            &self.wc_e,
        ]
    }
}

/// The stamp of a commit at `version`: its 8 bytes big-endian, then a batch order of 0.
fn stamp_of(version: Version) -> [u8; 10] {
    let mut stamp = [0u8; 10];
    stamp[..8].copy_from_slice(&version.to_be_bytes());
    stamp
}

impl PgTransaction {
    pub(super) fn new(kv: PgKv) -> Self {
        Self {
            inner: Arc::new(Inner {
                kv,
                buffer: Mutex::new(Buffer::default()),
                session: tokio::sync::Mutex::new(Slot::Unopened),
                watches: Mutex::new(Vec::new()),
            }),
        }
    }

    fn kv(&self) -> &PgKv {
        &self.inner.kv
    }

    /// The read session, opened now if this is the first read; fails once the
    /// transaction is older than five seconds.
    async fn session(&self) -> Result<Arc<Session>, KvError> {
        let mut slot = self.inner.session.lock().await;
        let session = match &*slot {
            Slot::Open(session) => session.clone(),
            Slot::Finished => return Err(KvError::new(KvError::USED_DURING_COMMIT)),
            Slot::Unopened => {
                let session = self.open_session().await?;
                self.inner.buffer.lock().read_version = Some(session.read_version);
                *slot = Slot::Open(session.clone());
                session
            }
        };
        drop(slot);
        self.check_age(&session)?;
        Ok(session)
    }

    /// Fails with 1007 once the session is older than FDB's five seconds, on the client's
    /// clock.
    fn check_age(&self, session: &Session) -> Result<(), KvError> {
        let kv = self.kv();
        let age = kv.shared.clock.monotonic().saturating_duration_since(session.started);
        let life = Duration::from_secs((TRANSACTION_LIFE_VERSIONS_MAX / VERSIONS_PER_SECOND) as u64);
        if age > life {
            kv.shared.counters.too_old.fetch_add(1, Ordering::Relaxed);
            return Err(KvError::new(KvError::TRANSACTION_TOO_OLD));
        }
        Ok(())
    }

    async fn open_session(&self) -> Result<Arc<Session>, KvError> {
        let kv = self.kv();
        let conn = kv.connection().await?;
        let started = kv.shared.clock.monotonic();
        let mut session =
            Session { conn: Some(conn), read_version: 0, server_time: 0, started, state: AtomicU8::new(OPEN) };
        let begun = kv.timed(session.client()?.simple_query(&kv.shared.statements.begin), false).await;
        let messages = match begun {
            Ok(messages) => messages,
            Err(error) => {
                session.state.store(BROKEN, Ordering::Relaxed);
                return Err(error);
            }
        };
        let row = messages.iter().find_map(|message| match message {
            tokio_postgres::SimpleQueryMessage::Row(row) => Some(row),
            _ => None,
        });
        let number = |i: usize| row.and_then(|row| row.get(i)).and_then(|text| text.parse::<i64>().ok());
        match (number(0), number(1)) {
            (Some(version), Some(time)) => {
                session.read_version = version;
                session.server_time = time;
                Ok(Arc::new(session))
            }
            _ => {
                session.state.store(BROKEN, Ordering::Relaxed);
                Err(KvError::with_message(super::INTERNAL_ERROR, "PostgreSQL: the schema has no sequencer row"))
            }
        }
    }

    /// Runs a read on the session, closing its connection if the round trip failed.
    async fn read<T>(
        &self,
        session: &Session,
        read: impl Future<Output = Result<T, tokio_postgres::Error>>,
    ) -> Result<T, KvError> {
        let result = self.kv().timed(read, false).await;
        if result.is_err() {
            session.state.store(BROKEN, Ordering::Relaxed);
        }
        result
    }

    async fn prepared(&self, session: &Session, query: &str) -> Result<tokio_postgres::Statement, KvError> {
        self.read(session, session.client()?.prepare_cached(query)).await
    }

    /// The stored values of `keys` at the read version (absent keys: `None`).
    async fn stored(&self, session: &Session, keys: &[&[u8]]) -> Result<Vec<Option<Vec<u8>>>, KvError> {
        if keys.is_empty() {
            return Ok(Vec::new());
        }
        let client = session.client()?;
        if let [key] = keys {
            let statement = self.prepared(session, &self.kv().shared.statements.get).await?;
            let row = self.read(session, client.query_opt(&statement, &[key])).await?;
            return Ok(vec![row.and_then(|row| row.get::<_, Option<Vec<u8>>>(0))]);
        }
        let statement = self.prepared(session, &self.kv().shared.statements.get_many).await?;
        let rows = self.read(session, client.query(&statement, &[&keys])).await?;
        let found: std::collections::BTreeMap<Vec<u8>, Vec<u8>> =
            rows.into_iter().map(|row| (row.get(0), row.get(1))).collect();
        Ok(keys.iter().map(|key| found.get(*key).cloned()).collect())
    }

    /// Stored pairs in `[begin, end)`, ascending or descending, at most `limit`.
    async fn stored_range(
        &self,
        session: &Session,
        begin: &[u8],
        end: &[u8],
        limit: Option<usize>,
        reverse: bool,
    ) -> Result<Page, KvError> {
        let statements = &self.kv().shared.statements;
        let query = if reverse { &statements.range_reverse } else { &statements.range };
        let statement = self.prepared(session, query).await?;
        let asked = one_more(limit);
        let rows = self.read(session, session.client()?.query(&statement, &[&begin, &end, &asked])).await?;
        Ok(page(rows.iter().map(|row| kv_pair(row.get(0), row.get(1))).collect(), limit))
    }

    /// Stored pairs of untouched ranges, `reverse` all or none, in one statement.
    async fn stored_ranges(
        &self,
        session: &Session,
        requests: &[&RangeRequest],
        reverse: bool,
    ) -> Result<Vec<Page>, KvError> {
        if requests.is_empty() {
            return Ok(Vec::new());
        }
        let statements = &self.kv().shared.statements;
        let query = if reverse { &statements.ranges_reverse } else { &statements.ranges };
        let statement = self.prepared(session, query).await?;
        let begins: Vec<&[u8]> = requests.iter().map(|r| r.begin.as_slice()).collect();
        let ends: Vec<&[u8]> = requests.iter().map(|r| r.end.as_slice()).collect();
        let asked: Vec<Option<i64>> = requests.iter().map(|r| one_more(r.limit)).collect();
        let rows = self.read(session, session.client()?.query(&statement, &[&begins, &ends, &asked])).await?;
        let mut pairs: Vec<Vec<KvPair>> = vec![Vec::new(); requests.len()];
        for row in rows {
            let index: i64 = row.get(0);
            if let Some(pairs) = usize::try_from(index - 1).ok().and_then(|i| pairs.get_mut(i)) {
                pairs.push(kv_pair(row.get(1), row.get(2)));
            }
        }
        Ok(pairs.into_iter().zip(requests).map(|(pairs, request)| page(pairs, request.limit)).collect())
    }

    /// `request` read where this transaction wrote: stored pages merged with its writes
    /// until the limit is met (and one more pair found, for `more`) or the range ends.
    async fn merged_range(&self, session: &Session, request: &RangeRequest) -> Result<Page, KvError> {
        let limit = request.limit.unwrap_or(usize::MAX);
        let page = request.limit.map(|limit| limit.saturating_add(1).max(MERGE_PAGE_MIN));
        let (mut low, mut high) = (request.begin.clone(), request.end.clone());
        let mut pairs = Vec::new();
        loop {
            let (stored, stored_more) = self.stored_range(session, &low, &high, page, request.reverse).await?;
            // The part of the range this page covers: through its last key when more remain.
            let (covered_low, covered_high) = match (stored_more, stored.last()) {
                (true, Some((last, _))) if request.reverse => (last.to_vec(), high.clone()),
                (true, Some((last, _))) => (low.clone(), key_after(last)),
                _ => (low.clone(), high.clone()),
            };
            let mut buffer = self.inner.buffer.lock();
            buffer.points.settle();
            let written = buffer.points.range(&covered_low, &covered_high);
            let mut written: Vec<&[u8]> = written.into_iter().map(|(key, _)| key.as_slice()).collect();
            let stored_keys = stored.iter().map(|(key, value)| (key.as_slice(), Some(value.as_slice())));
            if request.reverse {
                written.reverse();
            }
            let written_keys = written.iter().map(|key| (*key, None));
            for (key, value) in merge(stored_keys, written_keys, request.reverse) {
                if let Some(value) = buffer.resolve(key, value)? {
                    if pairs.len() == limit {
                        return Ok((pairs, true));
                    }
                    pairs.push((KvBytes::from_slice(key), KvBytes::from_vec(value)));
                }
            }
            if !stored_more {
                return Ok((pairs, false));
            }
            if request.reverse {
                high = covered_low;
            } else {
                low = covered_high;
            }
        }
    }

    /// Arms `watches` after a successful commit: each is told the value its
    /// transaction saw (`seen`, in the same order).
    fn arm(watches: Vec<PendingWatch>, seen: Result<Vec<Option<Vec<u8>>>, KvError>) {
        match seen {
            Ok(seen) => {
                for ((_, notify), seen) in watches.into_iter().zip(seen) {
                    let _ = notify.send(Ok(seen));
                }
            }
            Err(error) => {
                for (_, notify) in watches {
                    let _ = notify.send(Err(error.clone()));
                }
            }
        }
    }

    async fn commit_now(&self) -> Result<CommitInfo, KvError> {
        let kv = self.kv().clone();
        let session = match std::mem::replace(&mut *self.inner.session.lock().await, Slot::Finished) {
            Slot::Open(session) => Some(session),
            Slot::Unopened => None,
            Slot::Finished => return Err(KvError::new(KvError::USED_DURING_COMMIT)),
        };
        let watches = std::mem::take(&mut *self.inner.watches.lock());
        let (mut call, watched, seen_written) = {
            let mut buffer = self.inner.buffer.lock();
            buffer.finished = true;
            if let Some(error) = buffer.error.take() {
                return Err(error);
            }
            if buffer.size > TRANSACTION_SIZE_MAX {
                return Err(KvError::new(KvError::TRANSACTION_TOO_LARGE));
            }
            // What each watch sees of its key through this transaction's own writes:
            // `None` when it depends on the stored value, read below.
            let watched: Vec<Vec<u8>> = watches.iter().map(|(key, _)| key.clone()).collect();
            let seen_written: Vec<Option<Option<Vec<u8>>>> = watched
                .iter()
                .map(|key| (!buffer.depends_on_store(key)).then(|| buffer.resolve(key, None).unwrap_or(None)))
                .collect();
            (CommitCall::take(&mut buffer), watched, seen_written)
        };
        if let Some(session) = &session {
            if let Err(error) = self.check_age(session) {
                Self::arm(watches, Err(error.clone()));
                return Err(error);
            }
            call.rv = Some(session.read_version);
            call.rt = Some(session.server_time);
        }
        let writes = call.writes();
        // A transaction that never read commits on any pooled connection.
        let mut fresh = None;
        let client: &Object = match &session {
            Some(session) => session.client()?,
            None => fresh.insert(kv.connection().await?),
        };
        let statements = &kv.shared.statements;
        // Prepared before the pipeline below (a first use per connection is a round trip of
        // its own); nothing is committed yet, so a failure here is not ambiguous.
        let commit = kv.timed(client.prepare_cached(&statements.commit), false).await?;
        // The stored values the watches depend on, read in the snapshot before it ends.
        let unknown: Vec<&[u8]> = watched
            .iter()
            .zip(&seen_written)
            .filter(|(_, written)| written.is_none())
            .map(|(key, _)| key.as_slice())
            .collect();
        let get_many = if unknown.is_empty() {
            None
        } else {
            Some(kv.timed(client.prepare_cached(&statements.get_many), false).await?)
        };
        let read_watched = async {
            match &get_many {
                Some(get_many) => client.query(get_many, &[&unknown]).await,
                None => Ok(Vec::new()),
            }
        };
        let end_snapshot = async {
            match &session {
                Some(_) => client.batch_execute("COMMIT").await,
                None => Ok(()),
            }
        };
        let params = call.params();
        let apply = async {
            if writes {
                client.query_one(&commit, &params).await.map(Some)
            } else {
                Ok(None)
            }
        };
        // Sent in this order, in one round trip.
        let (watched_rows, ended, applied) = futures_util::future::join3(
            kv.timed(read_watched, false),
            kv.timed(end_snapshot, false),
            kv.timed(apply, true),
        )
        .await;
        // After a refusal (a conflict, too old) the connection is as good as before; after
        // a lost or late answer its state is unknown, and it is closed.
        let connection_ok = ended.is_ok()
            && match &applied {
                Ok(_) => true,
                Err(error) => matches!(error.code(), KvError::NOT_COMMITTED | KvError::TRANSACTION_TOO_OLD),
            };
        if let Some(session) = &session {
            session.state.store(if connection_ok { CLEAN } else { BROKEN }, Ordering::Relaxed);
        }
        if let (false, Some(fresh)) = (connection_ok, fresh) {
            drop(Object::take(fresh));
        }
        let outcome = ended.and(applied);
        let info = match outcome {
            Ok(Some(row)) => {
                kv.shared.counters.commits.fetch_add(1, Ordering::Relaxed);
                let version: i64 = row.get(0);
                CommitInfo { version, versionstamp: call.stamped().then(|| stamp_of(version)) }
            }
            Ok(None) => {
                kv.shared.counters.read_only_commits.fetch_add(1, Ordering::Relaxed);
                let version = match &session {
                    Some(session) => session.read_version,
                    None => {
                        let conn = kv.connection().await?;
                        let latest = kv.timed(conn.prepare_cached(&statements.latest), false).await?;
                        kv.timed(conn.query_one(&latest, &[]), false).await?.get(0)
                    }
                };
                CommitInfo { version, versionstamp: None }
            }
            Err(error) => {
                Self::arm(watches, Err(error.clone()));
                return Err(error);
            }
        };
        let seen = watched_rows.map(|rows| {
            let found: std::collections::BTreeMap<Vec<u8>, Vec<u8>> =
                rows.into_iter().map(|row| (row.get(0), row.get(1))).collect();
            let buffer = self.inner.buffer.lock();
            watched
                .iter()
                .zip(seen_written)
                .map(|(key, written)| match written {
                    Some(value) => value,
                    None => buffer.resolve(key, found.get(key).map(Vec::as_slice)).unwrap_or(None),
                })
                .collect()
        });
        Self::arm(watches, seen);
        Ok(info)
    }
}

impl KvTransaction for PgTransaction {
    async fn read_version(&self) -> Result<Version, KvError> {
        Ok(self.session().await?.read_version)
    }

    async fn get(&self, key: &[u8], snapshot: bool) -> Result<Option<Vec<u8>>, KvError> {
        Ok(self.get_many(&[key], snapshot).await?.pop().flatten())
    }

    async fn get_many<Q: AsRef<[u8]> + Sync>(
        &self,
        keys: &[Q],
        snapshot: bool,
    ) -> Result<Vec<Option<Vec<u8>>>, KvError> {
        {
            let buffer = self.inner.buffer.lock();
            if buffer.finished {
                return Err(KvError::new(KvError::USED_DURING_COMMIT));
            }
            let unreadable = |key: &Q| {
                buffer.unreadable.iter().any(|(b, e)| b.as_slice() <= key.as_ref() && key.as_ref() < e.as_slice())
            };
            if keys.iter().any(unreadable) {
                return Err(KvError::new(KvError::ACCESSED_UNREADABLE));
            }
        }
        let session = self.session().await?;
        let depends: Vec<bool> = {
            let buffer = self.inner.buffer.lock();
            keys.iter().map(|key| buffer.depends_on_store(key.as_ref())).collect()
        };
        let needed: Vec<&[u8]> = keys.iter().zip(&depends).filter(|(_, d)| **d).map(|(k, _)| k.as_ref()).collect();
        let mut stored = self.stored(&session, &needed).await?.into_iter();
        let mut buffer = self.inner.buffer.lock();
        let mut values = Vec::with_capacity(keys.len());
        for (key, depends) in keys.iter().zip(depends) {
            let key = key.as_ref();
            let value = if depends {
                let value = stored.next().flatten();
                if !snapshot {
                    buffer.note_point_read(key);
                }
                buffer.resolve(key, value.as_deref())?
            } else {
                buffer.resolve(key, None)?
            };
            values.push(value);
        }
        Ok(values)
    }

    async fn get_range(&self, request: &RangeRequest, snapshot: bool) -> Result<RangeResult, KvError> {
        let (begin, end) = (request.begin.as_slice(), request.end.as_slice());
        let untouched = {
            let mut buffer = self.inner.buffer.lock();
            if buffer.finished {
                return Err(KvError::new(KvError::USED_DURING_COMMIT));
            }
            if begin >= end || request.limit == Some(0) {
                return Ok(RangeResult::default());
            }
            if buffer.is_unreadable(begin, end) {
                return Err(KvError::new(KvError::ACCESSED_UNREADABLE));
            }
            buffer.untouched(begin, end)
        };
        let session = self.session().await?;
        let (pairs, more) = if untouched {
            self.stored_range(&session, begin, end, request.limit, request.reverse).await?
        } else {
            self.merged_range(&session, request).await?
        };
        Ok(self.inner.buffer.lock().conflict_on_range(request, snapshot, pairs, more))
    }

    async fn get_ranges(&self, requests: &[RangeRequest], snapshot: bool) -> Result<Vec<RangeResult>, KvError> {
        // What each request needs: nothing (empty), its own merged read, or a place in
        // one of the two batched statements.
        enum Plan {
            Empty,
            Alone,
            Batched,
        }
        let plans: Vec<Plan> = {
            let mut buffer = self.inner.buffer.lock();
            if buffer.finished {
                return Err(KvError::new(KvError::USED_DURING_COMMIT));
            }
            let mut plans = Vec::with_capacity(requests.len());
            for request in requests {
                let (begin, end) = (request.begin.as_slice(), request.end.as_slice());
                if begin >= end || request.limit == Some(0) {
                    plans.push(Plan::Empty);
                } else if buffer.is_unreadable(begin, end) {
                    return Err(KvError::new(KvError::ACCESSED_UNREADABLE));
                } else if buffer.untouched(begin, end) {
                    plans.push(Plan::Batched);
                } else {
                    plans.push(Plan::Alone);
                }
            }
            plans
        };
        let session = self.session().await?;
        let batched = |reverse: bool| -> Vec<&RangeRequest> {
            requests
                .iter()
                .zip(&plans)
                .filter(|(r, plan)| matches!(plan, Plan::Batched) && r.reverse == reverse)
                .map(|(r, _)| r)
                .collect()
        };
        let (forward, backward) = (batched(false), batched(true));
        let (forward, backward) = futures_util::future::try_join(
            self.stored_ranges(&session, &forward, false),
            self.stored_ranges(&session, &backward, true),
        )
        .await?;
        let (mut forward, mut backward) = (forward.into_iter(), backward.into_iter());
        let mut results = Vec::with_capacity(requests.len());
        for (request, plan) in requests.iter().zip(plans) {
            let (pairs, more) = match plan {
                Plan::Empty => {
                    results.push(RangeResult::default());
                    continue;
                }
                Plan::Alone => self.merged_range(&session, request).await?,
                Plan::Batched if request.reverse => backward.next().unwrap_or_default(),
                Plan::Batched => forward.next().unwrap_or_default(),
            };
            results.push(self.inner.buffer.lock().conflict_on_range(request, snapshot, pairs, more));
        }
        Ok(results)
    }

    fn set(&self, key: &[u8], value: &[u8]) {
        self.write(|buffer| buffer.set(key, value));
    }

    fn set_owned(&self, key: &[u8], value: Vec<u8>) {
        self.write(|buffer| buffer.set_owned(key, value));
    }

    fn clear(&self, key: &[u8]) {
        self.write(|buffer| buffer.clear(key));
    }

    fn clear_range(&self, begin: &[u8], end: &[u8]) {
        self.write(|buffer| buffer.clear_range(begin, end));
    }

    fn atomic_op(&self, key: &[u8], param: &[u8], op: AtomicOp) {
        self.write(|buffer| buffer.atomic_op(key, param, op));
    }

    fn add_read_conflict_range(&self, begin: &[u8], end: &[u8]) {
        self.write(|buffer| buffer.add_read_conflict(begin, end));
    }

    fn add_write_conflict_range(&self, begin: &[u8], end: &[u8]) {
        self.write(|buffer| buffer.add_write_conflict_range(begin, end));
    }

    async fn commit(&self) -> Result<CommitInfo, KvError> {
        self.commit_now().await
    }

    fn watch(&self, key: &[u8]) -> impl Future<Output = Result<(), KvError>> + Send + 'static {
        let (notify, seen) = oneshot::channel();
        if self.inner.buffer.lock().finished {
            let _ = notify.send(Err(KvError::new(KvError::USED_DURING_COMMIT)));
        } else {
            self.inner.watches.lock().push((key.to_vec(), notify));
        }
        let kv = self.kv().clone();
        let key = key.to_vec();
        async move {
            let seen = seen.await.unwrap_or_else(|_| Err(KvError::new(KvError::TRANSACTION_CANCELLED)))?;
            kv.shared.watches.wait(&kv, key, seen).await
        }
    }
}

impl PgTransaction {
    fn write(&self, f: impl FnOnce(&mut Buffer)) {
        let mut buffer = self.inner.buffer.lock();
        if !buffer.finished {
            f(&mut buffer);
        }
    }
}
