//! The rules of FoundationDB's transactions that every `Kv` engine keeps, each a
//! function generic over the engine: `tests/kv_semantics.rs` runs them on `MemoryKv`,
//! `tests/kv_postgres.rs` on `PgKv` against a real PostgreSQL server.
#![allow(dead_code)] // Each including test binary uses what it needs.

use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use sundial::entropy::Entropy;
use sundial::kv::{
    key_after, AtomicOp, Kv, KvError, KvTransaction, RangeCount, RangeRequest, TRANSACTION_LIFE_VERSIONS_MAX,
};
use sundial::time::ManualClock;

/// Calls `$m!` with the name of every rule.
#[macro_export]
macro_rules! for_each_kv_rule {
    ($m:ident) => {
        $m!(
            reads_see_own_writes_in_point_and_range_reads,
            a_transaction_reads_at_one_version,
            serializable_reads_conflict_and_snapshot_reads_do_not,
            a_limited_range_read_conflicts_only_up_to_its_last_key,
            write_only_transactions_and_atomic_ops_never_conflict,
            reading_own_writes_adds_no_conflict_but_reading_after_an_atomic_op_does,
            read_only_transactions_always_commit_and_explicit_ranges_work,
            versionstamps_fill_in_at_commit_and_are_unreadable_before,
            transactions_older_than_five_seconds_fail,
            random_interleavings_lose_no_update_and_invent_no_conflict,
            a_commit_after_a_read_version_was_taken_gets_a_later_version,
            a_watch_fires_once_its_key_changes_after_its_commit,
            a_watch_compares_with_what_its_transaction_saw,
            a_watch_fails_with_its_transaction,
            ranges_read_together_see_what_each_read_alone_sees,
            ranges_counted_hold_what_they_read_and_conflict_with_nothing,
        );
    };
}

/// What a rule needs beside the store.
pub(crate) struct Env {
    /// The clock the store was given (transaction ages are measured on it).
    pub(crate) clock: ManualClock,
    /// How long a watch may take to fire once its key changed (zero: at once).
    pub(crate) watch_timeout: Duration,
    /// How long a watch that must not fire is watched (zero: one look).
    pub(crate) watch_grace: Duration,
}

pub(crate) async fn put<K: Kv>(kv: &K, pairs: &[(&str, &str)]) {
    let t = kv.create_transaction().unwrap();
    for (k, v) in pairs {
        t.set(k.as_bytes(), v.as_bytes());
    }
    t.commit().await.unwrap();
}

pub(crate) async fn get<K: Kv>(kv: &K, key: &str) -> Option<String> {
    let t = kv.create_transaction().unwrap();
    t.get(key.as_bytes(), true).await.unwrap().map(|v| String::from_utf8(v).unwrap())
}

pub(crate) fn keys(result: &sundial::kv::RangeResult) -> Vec<String> {
    result.pairs.iter().map(|(k, _)| String::from_utf8(k.to_vec()).unwrap()).collect()
}

pub(crate) fn code(result: Result<sundial::kv::CommitInfo, KvError>) -> i32 {
    match result {
        Ok(_) => 0,
        Err(e) => e.code(),
    }
}

/// The watch's outcome if it fires within the environment's timeout.
async fn fired<F: Future>(watch: &mut Pin<Box<F>>, env: &Env) -> Option<F::Output> {
    tokio::time::timeout(env.watch_timeout, watch.as_mut()).await.ok()
}

/// Whether the watch stays quiet for the environment's grace period.
async fn still<F: Future>(watch: &mut Pin<Box<F>>, env: &Env) -> bool {
    tokio::time::timeout(env.watch_grace, watch.as_mut()).await.is_err()
}

pub(crate) async fn reads_see_own_writes_in_point_and_range_reads<K: Kv>(kv: &K, _env: &Env) {
    put(kv, &[("a", "1"), ("b", "2"), ("c", "3"), ("d", "4")]).await;
    let t = kv.create_transaction().unwrap();
    t.set(b"b", b"two");
    t.clear(b"c");
    t.set(b"bb", b"new");
    t.atomic_op(b"n", &5u64.to_le_bytes(), AtomicOp::Add);
    t.atomic_op(b"n", &2u64.to_le_bytes(), AtomicOp::Add);
    for snapshot in [true, false] {
        assert_eq!(t.get(b"b", snapshot).await.unwrap(), Some(b"two".to_vec()));
        assert_eq!(t.get(b"c", snapshot).await.unwrap(), None);
        assert_eq!(t.get(b"n", snapshot).await.unwrap(), Some(7u64.to_le_bytes().to_vec()));
        let all = t.get_range(&RangeRequest::new("a", "z"), snapshot).await.unwrap();
        assert_eq!(keys(&all), ["a", "b", "bb", "d", "n"]);
        let back = t.get_range(&RangeRequest::new("a", "z").limit(2).reversed(), snapshot).await.unwrap();
        assert_eq!(keys(&back), ["n", "d"]);
        assert!(back.more);
    }
    t.clear_range(b"a", b"c");
    assert_eq!(keys(&t.get_range(&RangeRequest::new("a", "z"), false).await.unwrap()), ["d", "n"]);
    t.set(b"a", b"again");
    assert_eq!(t.get(b"a", false).await.unwrap(), Some(b"again".to_vec()));
    t.commit().await.unwrap();
    assert_eq!(get(kv, "a").await.as_deref(), Some("again"));
    assert_eq!(get(kv, "b").await, None);
    assert_eq!(get(kv, "d").await.as_deref(), Some("4"));
}

pub(crate) async fn a_transaction_reads_at_one_version<K: Kv>(kv: &K, _env: &Env) {
    put(kv, &[("k", "old")]).await;
    let reader = kv.create_transaction().unwrap();
    assert_eq!(reader.get(b"k", true).await.unwrap(), Some(b"old".to_vec()));
    put(kv, &[("k", "new"), ("other", "x")]).await;
    assert_eq!(reader.get(b"k", true).await.unwrap(), Some(b"old".to_vec()));
    assert_eq!(reader.get(b"other", true).await.unwrap(), None);
    assert_eq!(get(kv, "k").await.as_deref(), Some("new"));
}

pub(crate) async fn serializable_reads_conflict_and_snapshot_reads_do_not<K: Kv>(kv: &K, _env: &Env) {
    put(kv, &[("k", "0")]).await;
    for (snapshot, expected) in [(false, KvError::NOT_COMMITTED), (true, 0)] {
        let t = kv.create_transaction().unwrap();
        t.get(b"k", snapshot).await.unwrap();
        put(kv, &[("k", "changed")]).await;
        t.set(b"out", b"1");
        assert_eq!(code(t.commit().await), expected, "snapshot = {snapshot}");
    }
}

pub(crate) async fn a_limited_range_read_conflicts_only_up_to_its_last_key<K: Kv>(kv: &K, _env: &Env) {
    put(kv, &[("a", ""), ("b", ""), ("c", ""), ("d", ""), ("e", "")]).await;
    // Forward, limit 2: reads a and b; conflicts on [a, b\0).
    for (write, expected) in [("d", 0), ("c", 0), ("b", KvError::NOT_COMMITTED), ("a\x01", KvError::NOT_COMMITTED)] {
        let t = kv.create_transaction().unwrap();
        let read = t.get_range(&RangeRequest::new("a", "z").limit(2), false).await.unwrap();
        assert_eq!(keys(&read), ["a", "b"]);
        assert!(read.more);
        put(kv, &[(write, "x")]).await;
        t.set(b"~out", b"1");
        assert_eq!(code(t.commit().await), expected, "write {write:?}");
        // Remove a key the case added, so the next read sees a..e again.
        let cleanup = kv.create_transaction().unwrap();
        if write.len() > 1 {
            cleanup.clear(write.as_bytes());
        }
        cleanup.commit().await.unwrap();
    }
    // Reverse, limit 2: reads e and d; conflicts on [d, z).
    for (write, expected) in [("b", 0), ("c\x01", 0), ("d", KvError::NOT_COMMITTED), ("y", KvError::NOT_COMMITTED)] {
        let t = kv.create_transaction().unwrap();
        let read = t.get_range(&RangeRequest::new("a", "z").limit(2).reversed(), false).await.unwrap();
        assert_eq!(keys(&read), ["e", "d"]);
        put(kv, &[(write, "x")]).await;
        t.set(b"~out", b"1");
        assert_eq!(code(t.commit().await), expected, "write {write:?}");
    }
    // An exhausted range read conflicts on the whole range, phantoms included.
    let t = kv.create_transaction().unwrap();
    t.get_range(&RangeRequest::new("f", "m"), false).await.unwrap();
    put(kv, &[("g", "phantom")]).await;
    t.set(b"~out", b"1");
    assert_eq!(code(t.commit().await), KvError::NOT_COMMITTED);
}

pub(crate) async fn write_only_transactions_and_atomic_ops_never_conflict<K: Kv>(kv: &K, _env: &Env) {
    let blind = kv.create_transaction().unwrap();
    blind.set(b"k", b"blind");
    put(kv, &[("k", "other")]).await;
    assert_eq!(code(blind.commit().await), 0);

    let adders: Vec<_> = (0..5).map(|_| kv.create_transaction().unwrap()).collect();
    for t in &adders {
        t.atomic_op(b"counter", &1i64.to_le_bytes(), AtomicOp::Add);
    }
    for t in &adders {
        assert_eq!(code(t.commit().await), 0);
    }
    let t = kv.create_transaction().unwrap();
    assert_eq!(t.get(b"counter", false).await.unwrap(), Some(5i64.to_le_bytes().to_vec()));
}

pub(crate) async fn reading_own_writes_adds_no_conflict_but_reading_after_an_atomic_op_does<K: Kv>(kv: &K, _env: &Env) {
    put(kv, &[("k", "0"), ("n", "")]).await;
    let t = kv.create_transaction().unwrap();
    t.set(b"k", b"mine");
    t.get(b"k", false).await.unwrap();
    t.clear_range(b"r", b"s");
    t.get_range(&RangeRequest::new("r", "s"), false).await.unwrap();
    t.add_read_conflict_range(b"k", &key_after(b"k"));
    put(kv, &[("k", "theirs"), ("r1", "theirs")]).await;
    assert_eq!(code(t.commit().await), 0, "own writes determine what was read");

    let t = kv.create_transaction().unwrap();
    t.atomic_op(b"n", &1u8.to_le_bytes(), AtomicOp::Add);
    t.get(b"n", false).await.unwrap();
    put(kv, &[("n", "x")]).await;
    assert_eq!(code(t.commit().await), KvError::NOT_COMMITTED, "the atomic result depends on the stored value");

    // A range read over partly written keys conflicts on the rest.
    let t = kv.create_transaction().unwrap();
    t.clear_range(b"a", b"m");
    t.get_range(&RangeRequest::new("a", "z"), false).await.unwrap();
    put(kv, &[("b", "inside own clear")]).await;
    t.set(b"zz", b"1");
    let inside = code(t.commit().await);
    let t = kv.create_transaction().unwrap();
    t.clear_range(b"a", b"m");
    t.get_range(&RangeRequest::new("a", "z"), false).await.unwrap();
    put(kv, &[("p", "outside own clear")]).await;
    t.set(b"zz", b"1");
    assert_eq!((inside, code(t.commit().await)), (0, KvError::NOT_COMMITTED));
}

pub(crate) async fn read_only_transactions_always_commit_and_explicit_ranges_work<K: Kv>(kv: &K, _env: &Env) {
    let t = kv.create_transaction().unwrap();
    t.get(b"k", false).await.unwrap();
    put(kv, &[("k", "x")]).await;
    assert_eq!(code(t.commit().await), 0);

    // Explicit read conflict range meets a write; explicit write conflict range is seen by others.
    let reader = kv.create_transaction().unwrap();
    reader.read_version().await.unwrap();
    reader.add_read_conflict_range(b"p", b"q");
    reader.set(b"out", b"1");
    let writer = kv.create_transaction().unwrap();
    writer.add_write_conflict_range(b"p1", b"p2");
    writer.commit().await.unwrap();
    assert_eq!(code(reader.commit().await), KvError::NOT_COMMITTED);
}

pub(crate) async fn versionstamps_fill_in_at_commit_and_are_unreadable_before<K: Kv>(kv: &K, _env: &Env) {
    let t = kv.create_transaction().unwrap();
    let mut key = b"log/".to_vec();
    key.extend_from_slice(&[0; 10]);
    key.extend_from_slice(&4u32.to_le_bytes());
    t.atomic_op(&key, b"entry", AtomicOp::SetVersionstampedKey);
    let mut value = b"hb:".to_vec();
    value.extend_from_slice(&[0; 10]);
    value.extend_from_slice(&3u32.to_le_bytes());
    t.atomic_op(b"heartbeat", &value, AtomicOp::SetVersionstampedValue);
    assert_eq!(t.get(b"heartbeat", true).await.unwrap_err().code(), KvError::ACCESSED_UNREADABLE);
    assert_eq!(
        t.get_range(&RangeRequest::prefix(b"log/"), true).await.unwrap_err().code(),
        KvError::ACCESSED_UNREADABLE
    );
    let info = t.commit().await.unwrap();
    let stamp = info.versionstamp.expect("a versionstamped commit reports its stamp");
    assert_eq!(&stamp[..8], &info.version.to_be_bytes());
    let r = kv.create_transaction().unwrap();
    let log = r.get_range(&RangeRequest::prefix(b"log/"), false).await.unwrap();
    assert_eq!(log.pairs.len(), 1);
    assert_eq!(&log.pairs[0].0[4..], &stamp);
    assert_eq!(r.get(b"heartbeat", false).await.unwrap().unwrap()[3..], stamp);
    // Later commits stamp higher.
    let t2 = kv.create_transaction().unwrap();
    t2.atomic_op(b"heartbeat", &value, AtomicOp::SetVersionstampedValue);
    assert!(t2.commit().await.unwrap().versionstamp.unwrap() > stamp);
}

pub(crate) async fn transactions_older_than_five_seconds_fail<K: Kv>(kv: &K, env: &Env) {
    let clock = &env.clock;
    let t = kv.create_transaction().unwrap();
    t.get(b"k", false).await.unwrap();
    clock.advance(Duration::from_millis(4_900));
    t.get(b"k", false).await.unwrap();
    clock.advance(Duration::from_millis(200));
    assert_eq!(t.get(b"k", false).await.unwrap_err().code(), KvError::TRANSACTION_TOO_OLD);
    let w = kv.create_transaction().unwrap();
    w.get(b"k", false).await.unwrap();
    w.set(b"k", b"v");
    clock.advance(Duration::from_micros(TRANSACTION_LIFE_VERSIONS_MAX as u64 + 1));
    assert_eq!(code(w.commit().await), KvError::TRANSACTION_TOO_OLD);
}

/// Interleaves many read-modify-write transactions; every committed increment must be
/// counted (no lost update: conflicts are never missed), and transactions on disjoint keys
/// must never conflict (conflicts are never invented).
pub(crate) async fn random_interleavings_lose_no_update_and_invent_no_conflict<K: Kv>(kv: &K, _env: &Env) {
    for seed in 0..20 {
        // Each seed counts under keys of its own.
        let counter = |key: usize| [b'c', seed as u8, key as u8];
        let mut rng = Entropy::from_seed(seed);
        let mut committed = [0u64; 4];
        let mut open: Vec<(usize, K::Transaction)> = Vec::new();
        for _ in 0..400 {
            if open.len() < 6 && rng.below(2) == 0 {
                let key = rng.below(4) as usize;
                let t = kv.create_transaction().unwrap();
                let current = t.get(&counter(key), false).await.unwrap();
                let n = current.map_or(0, |v| u64::from_le_bytes(v.try_into().unwrap()));
                t.set(&counter(key), &(n + 1).to_le_bytes());
                open.push((key, t));
            } else if !open.is_empty() {
                let (key, t) = open.remove(rng.below(open.len() as u64) as usize);
                if t.commit().await.is_ok() {
                    committed[key] += 1;
                }
            }
        }
        for (key, t) in open {
            if t.commit().await.is_ok() {
                committed[key] += 1;
            }
        }
        let t = kv.create_transaction().unwrap();
        for (key, count) in committed.iter().enumerate() {
            let stored = t.get(&counter(key), false).await.unwrap();
            assert_eq!(stored.map_or(0, |v| u64::from_le_bytes(v.try_into().unwrap())), *count, "seed {seed}");
        }
    }

    // Disjoint keys: interleaved read-modify-writes never conflict.
    let txns: Vec<_> = (0..50u8).map(|_| kv.create_transaction().unwrap()).collect();
    for (i, t) in txns.iter().enumerate() {
        t.get(&[b'd', i as u8], false).await.unwrap();
        t.get_range(&RangeRequest::new(vec![b'r', i as u8], vec![b'r', i as u8, 0xff]), false).await.unwrap();
        t.set(&[b'd', i as u8], b"x");
    }
    for t in &txns {
        assert_eq!(code(t.commit().await), 0);
    }
}

pub(crate) async fn a_commit_after_a_read_version_was_taken_gets_a_later_version<K: Kv>(kv: &K, env: &Env) {
    // A read version can run ahead of the last commit (it follows the clock); a commit in
    // the same microsecond must still land after it, or the reader would see it and miss
    // its conflict.
    let clock = &env.clock;
    put(kv, &[("k", "old")]).await;
    clock.advance(Duration::from_secs(1));
    let t = kv.create_transaction().unwrap();
    assert_eq!(t.get(b"k", false).await.unwrap(), Some(b"old".to_vec()));
    put(kv, &[("k", "new")]).await;
    assert_eq!(t.get(b"k", true).await.unwrap(), Some(b"old".to_vec()), "one snapshot");
    t.set(b"k", b"old+1");
    assert_eq!(code(t.commit().await), KvError::NOT_COMMITTED, "a lost update");
    assert_eq!(get(kv, "k").await.as_deref(), Some("new"));
}

pub(crate) async fn a_watch_fires_once_its_key_changes_after_its_commit<K: Kv>(kv: &K, env: &Env) {
    put(kv, &[("wake", "1")]).await;
    let t = kv.create_transaction().unwrap();
    t.get(b"wake", true).await.unwrap();
    let mut watch = Box::pin(t.watch(b"wake"));
    assert!(still(&mut watch, env).await, "not armed before the commit");
    t.commit().await.unwrap();
    put(kv, &[("wake", "1")]).await;
    assert!(still(&mut watch, env).await, "the same value again is no change");
    put(kv, &[("other", "x")]).await;
    assert!(still(&mut watch, env).await, "other keys do not fire it");
    put(kv, &[("wake", "2")]).await;
    assert_eq!(fired(&mut watch, env).await, Some(Ok(())));
    // An atomic add changes the value too; a clear of a missing key does not.
    let t = kv.create_transaction().unwrap();
    let mut counter = Box::pin(t.watch(b"counter"));
    t.commit().await.unwrap();
    let clear = kv.create_transaction().unwrap();
    clear.clear(b"counter");
    clear.commit().await.unwrap();
    assert!(still(&mut counter, env).await);
    let add = kv.create_transaction().unwrap();
    add.atomic_op(b"counter", &1i64.to_le_bytes(), AtomicOp::Add);
    add.commit().await.unwrap();
    assert_eq!(fired(&mut counter, env).await, Some(Ok(())));
}

pub(crate) async fn a_watch_compares_with_what_its_transaction_saw<K: Kv>(kv: &K, env: &Env) {
    put(kv, &[("wake", "1")]).await;
    // Changed between the watch's read version and its commit: fires at the commit.
    let t = kv.create_transaction().unwrap();
    t.get(b"wake", true).await.unwrap();
    let mut watch = Box::pin(t.watch(b"wake"));
    put(kv, &[("wake", "2")]).await;
    assert!(still(&mut watch, env).await);
    t.commit().await.unwrap();
    assert_eq!(fired(&mut watch, env).await, Some(Ok(())));
    // Its own write is what it saw: another write of that value changes nothing.
    let t = kv.create_transaction().unwrap();
    t.set(b"wake", b"3");
    let mut own = Box::pin(t.watch(b"wake"));
    t.commit().await.unwrap();
    put(kv, &[("wake", "3")]).await;
    assert!(still(&mut own, env).await);
    put(kv, &[("wake", "4")]).await;
    assert_eq!(fired(&mut own, env).await, Some(Ok(())));
}

pub(crate) async fn a_watch_fails_with_its_transaction<K: Kv>(kv: &K, env: &Env) {
    // Dropped uncommitted: canceled.
    let t = kv.create_transaction().unwrap();
    let mut dropped = Box::pin(t.watch(b"wake"));
    drop(t);
    assert_eq!(fired(&mut dropped, env).await.unwrap().unwrap_err().code(), KvError::TRANSACTION_CANCELLED);
    // A failed commit: its error.
    let t = kv.create_transaction().unwrap();
    t.get(b"wake", false).await.unwrap();
    t.set(b"mine", b"x");
    let mut conflicted = Box::pin(t.watch(b"wake"));
    put(kv, &[("wake", "1")]).await;
    assert_eq!(code(t.commit().await), KvError::NOT_COMMITTED);
    assert_eq!(fired(&mut conflicted, env).await.unwrap().unwrap_err().code(), KvError::NOT_COMMITTED);
}

/// A transaction that read its version after `count` keys `{prefix}0000…` were written,
/// before another removed `{prefix}0011` and added `{prefix}0012a` (changes it must not see).
async fn reader_behind_a_change<K: Kv>(kv: &K, env: &Env, prefix: &str, count: usize) -> K::Transaction {
    let pairs: Vec<(String, String)> = (0..count).map(|i| (format!("{prefix}{i:04}"), format!("v{i}"))).collect();
    let refs: Vec<(&str, &str)> = pairs.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    put(kv, &refs).await;
    env.clock.advance(Duration::from_millis(1));
    let reader = kv.create_transaction().unwrap();
    reader.read_version().await.unwrap();
    let writer = kv.create_transaction().unwrap();
    writer.clear(format!("{prefix}0011").as_bytes());
    writer.set(format!("{prefix}0012a").as_bytes(), b"late");
    writer.commit().await.unwrap();
    reader
}

pub(crate) async fn ranges_read_together_see_what_each_read_alone_sees<K: Kv>(kv: &K, env: &Env) {
    // Ascending, disjoint ranges with few and many keys between them, under a key deleted
    // after the reader began (a version it must not see) and one written after it.
    let reader = reader_behind_a_change(kv, env, "k", 400).await;
    let range = |begin: &str, end: &str, limit: Option<usize>| {
        let request = RangeRequest::new(begin.as_bytes().to_vec(), end.as_bytes().to_vec());
        limit.map_or(request.clone(), |limit| request.limit(limit))
    };
    let requests = [
        range("k0010", "k0013", None),
        range("k0014", "k0020", Some(2)),
        range("k0021", "k0022", Some(1)),
        range("k0100", "k0150", Some(3)),
        range("k0150", "k0151", None),
        range("k0390", "k0500", None),
        range("k0500", "k0600", Some(1)),
    ];
    for snapshot in [true, false] {
        let together = reader.get_ranges(&requests, snapshot).await.unwrap();
        for (request, result) in requests.iter().zip(&together) {
            let alone = reader.get_range(request, snapshot).await.unwrap();
            assert_eq!((&result.pairs, result.more), (&alone.pairs, alone.more), "{request:?}");
        }
        assert_eq!(keys(&together[0]), ["k0010", "k0011", "k0012"], "as of the reader's version");
        assert_eq!((keys(&together[1]), together[1].more), (vec!["k0014".to_owned(), "k0015".to_owned()], true));
        assert_eq!(keys(&together[3]), ["k0100", "k0101", "k0102"]);
        assert_eq!(keys(&together[5]).len(), 10);
        assert!(together[6].pairs.is_empty() && !together[6].more);
    }
    reader.get(b"k0001", true).await.unwrap();
}

pub(crate) async fn ranges_counted_hold_what_they_read_and_conflict_with_nothing<K: Kv>(kv: &K, env: &Env) {
    // Counts as of the reader's version, within limits, in ranges the reader wrote in
    // (its own writes counted) and not, ascending and descending.
    let reader = reader_behind_a_change(kv, env, "c", 60).await;
    reader.set(b"c0030a", b"mine");
    reader.clear(b"c0031");
    let range = |begin: &str, end: &str| RangeRequest::new(begin.as_bytes().to_vec(), end.as_bytes().to_vec());
    let requests = [
        range("c0010", "c0013"),
        range("c0014", "c0020").limit(2),
        range("c0014", "c0020").limit(6),
        range("c0014", "c0020").limit(7),
        range("c0029", "c0033"),
        range("c0029", "c0033").limit(2),
        range("c0040", "c0050").limit(3).reversed(),
        range("c0050", "c0040"),
        range("c0100", "c0200"),
        range("c0000", "c0060").limit(0),
    ];
    let counts = reader.count_ranges(&requests).await.unwrap();
    for (request, count) in requests.iter().zip(&counts) {
        let read = reader.get_range(request, true).await.unwrap();
        assert_eq!(*count, RangeCount::of(&read), "{request:?}");
    }
    let count = |n, more| RangeCount { count: n, more };
    assert_eq!(counts[0], count(3, false), "c0011 still there and c0012a not yet, as of the reader's version");
    assert_eq!(&counts[1..4], [count(2, true), count(6, false), count(6, false)]);
    assert_eq!(counts[4], count(4, false), "c0029, c0030, its own c0030a, c0032");
    assert_eq!(counts[5], count(2, true));
    assert_eq!(counts[6], count(3, true));
    assert_eq!(&counts[7..], [count(0, false), count(0, false), count(0, false)]);
    // Counting is a snapshot read: a change in a counted range does not fail the reader.
    put(kv, &[("c0015", "changed")]).await;
    reader.commit().await.unwrap();
}
