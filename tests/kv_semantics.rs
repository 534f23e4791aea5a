//! Goal: `MemoryKv` reproduces FoundationDB's transaction semantics rule by rule, and
//! reports conflicts exactly where FDB would: never fewer (lost updates) and never more
//! (a design relying on a conflict FDB does not raise would pass here and fail there).
//!
//! Method: each test drives explicit transactions in a chosen interleaving on a manual
//! clock and checks commit outcomes and stored values; fault tests set rates to 1.0 so
//! the outcome is certain; a randomized test checks no lost updates under contention and
//! zero conflicts on disjoint keys.

mod meanwhile;

use std::sync::Arc;
use std::time::Duration;

use futures_util::FutureExt;
use sundial::entropy::Entropy;
use sundial::kv::memory::{KvFaults, MemoryKv, MemoryKvOptions};
use sundial::kv::{
    key_after, run, AtomicOp, Kv, KvError, KvTransaction, MaybeCommitted, RangeRequest, RetryOptions,
    TRANSACTION_LIFE_VERSIONS_MAX,
};
use sundial::time::NoSleep;
use sundial::time::{from_micros, Clock, ManualClock, MonotonicInstant};

fn clock() -> ManualClock {
    ManualClock::new(from_micros(1_800_000_000_000_000).unwrap())
}

fn store() -> (MemoryKv, ManualClock) {
    let clock = clock();
    (MemoryKv::new(Arc::new(clock.clone())), clock)
}

fn store_with(faults: KvFaults, size_limit: usize) -> (MemoryKv, ManualClock) {
    let clock = clock();
    let options = MemoryKvOptions { seed: 7, transaction_size_limit: size_limit, faults, ..MemoryKvOptions::default() };
    (MemoryKv::with_options(Arc::new(clock.clone()), Arc::new(NoSleep), options), clock)
}

async fn put(kv: &MemoryKv, pairs: &[(&str, &str)]) {
    let t = kv.create_transaction().unwrap();
    for (k, v) in pairs {
        t.set(k.as_bytes(), v.as_bytes());
    }
    t.commit().await.unwrap();
}

async fn get(kv: &MemoryKv, key: &str) -> Option<String> {
    let t = kv.create_transaction().unwrap();
    t.get(key.as_bytes(), true).await.unwrap().map(|v| String::from_utf8(v).unwrap())
}

fn keys(result: &sundial::kv::RangeResult) -> Vec<String> {
    result.pairs.iter().map(|(k, _)| String::from_utf8(k.clone()).unwrap()).collect()
}

fn code(result: Result<sundial::kv::CommitInfo, KvError>) -> i32 {
    match result {
        Ok(_) => 0,
        Err(e) => e.code(),
    }
}

#[tokio::test]
async fn reads_see_own_writes_in_point_and_range_reads() {
    let (kv, _) = store();
    put(&kv, &[("a", "1"), ("b", "2"), ("c", "3"), ("d", "4")]).await;
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
    assert_eq!(get(&kv, "a").await.as_deref(), Some("again"));
    assert_eq!(get(&kv, "b").await, None);
    assert_eq!(get(&kv, "d").await.as_deref(), Some("4"));
}

#[tokio::test]
async fn a_transaction_reads_at_one_version() {
    let (kv, _) = store();
    put(&kv, &[("k", "old")]).await;
    let reader = kv.create_transaction().unwrap();
    assert_eq!(reader.get(b"k", true).await.unwrap(), Some(b"old".to_vec()));
    put(&kv, &[("k", "new"), ("other", "x")]).await;
    assert_eq!(reader.get(b"k", true).await.unwrap(), Some(b"old".to_vec()));
    assert_eq!(reader.get(b"other", true).await.unwrap(), None);
    assert_eq!(get(&kv, "k").await.as_deref(), Some("new"));
}

/// As FDB's client, a transaction gets its read version at its first read, fixed when the
/// answer is made: with latency injected, a commit that lands while that request is on
/// its way is seen, and later reads keep that version.
#[tokio::test]
async fn the_read_version_is_fixed_when_the_first_read_gets_it() {
    let clock = clock();
    let meanwhile = meanwhile::Meanwhile::default();
    let options = MemoryKvOptions { seed: 7, faults: KvFaults::default(), ..MemoryKvOptions::default() };
    let kv = MemoryKv::with_options(Arc::new(clock.clone()), Arc::new(meanwhile.clone()), options);
    put(&kv, &[("k", "old")]).await;
    kv.set_faults(KvFaults { latency_max: Duration::from_millis(5), ..KvFaults::default() });
    let reader = kv.create_transaction().unwrap();
    let writer = kv.clone();
    meanwhile.then(async move {
        clock.advance(Duration::from_millis(5));
        put(&writer, &[("k", "new")]).await;
    });
    assert_eq!(reader.get(b"k", false).await.unwrap().as_deref(), Some(&b"new"[..]));
    put(&kv, &[("k", "newer")]).await;
    assert_eq!(reader.get(b"k", false).await.unwrap().as_deref(), Some(&b"new"[..]), "one read version");
}

#[tokio::test]
async fn serializable_reads_conflict_and_snapshot_reads_do_not() {
    let (kv, _) = store();
    put(&kv, &[("k", "0")]).await;
    for (snapshot, expected) in [(false, KvError::NOT_COMMITTED), (true, 0)] {
        let t = kv.create_transaction().unwrap();
        t.get(b"k", snapshot).await.unwrap();
        put(&kv, &[("k", "changed")]).await;
        t.set(b"out", b"1");
        assert_eq!(code(t.commit().await), expected, "snapshot = {snapshot}");
    }
}

#[tokio::test]
async fn a_limited_range_read_conflicts_only_up_to_its_last_key() {
    let (kv, _) = store();
    put(&kv, &[("a", ""), ("b", ""), ("c", ""), ("d", ""), ("e", "")]).await;
    // Forward, limit 2: reads a and b; conflicts on [a, b\0).
    for (write, expected) in [("d", 0), ("c", 0), ("b", KvError::NOT_COMMITTED), ("a\x01", KvError::NOT_COMMITTED)] {
        let t = kv.create_transaction().unwrap();
        let read = t.get_range(&RangeRequest::new("a", "z").limit(2), false).await.unwrap();
        assert_eq!(keys(&read), ["a", "b"]);
        assert!(read.more);
        put(&kv, &[(write, "x")]).await;
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
        put(&kv, &[(write, "x")]).await;
        t.set(b"~out", b"1");
        assert_eq!(code(t.commit().await), expected, "write {write:?}");
    }
    // An exhausted range read conflicts on the whole range, phantoms included.
    let t = kv.create_transaction().unwrap();
    t.get_range(&RangeRequest::new("f", "m"), false).await.unwrap();
    put(&kv, &[("g", "phantom")]).await;
    t.set(b"~out", b"1");
    assert_eq!(code(t.commit().await), KvError::NOT_COMMITTED);
}

#[tokio::test]
async fn write_only_transactions_and_atomic_ops_never_conflict() {
    let (kv, _) = store();
    let blind = kv.create_transaction().unwrap();
    blind.set(b"k", b"blind");
    put(&kv, &[("k", "other")]).await;
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

#[tokio::test]
async fn reading_own_writes_adds_no_conflict_but_reading_after_an_atomic_op_does() {
    let (kv, _) = store();
    put(&kv, &[("k", "0"), ("n", "")]).await;
    let t = kv.create_transaction().unwrap();
    t.set(b"k", b"mine");
    t.get(b"k", false).await.unwrap();
    t.clear_range(b"r", b"s");
    t.get_range(&RangeRequest::new("r", "s"), false).await.unwrap();
    t.add_read_conflict_range(b"k", &key_after(b"k"));
    put(&kv, &[("k", "theirs"), ("r1", "theirs")]).await;
    assert_eq!(code(t.commit().await), 0, "own writes determine what was read");

    let t = kv.create_transaction().unwrap();
    t.atomic_op(b"n", &1u8.to_le_bytes(), AtomicOp::Add);
    t.get(b"n", false).await.unwrap();
    put(&kv, &[("n", "x")]).await;
    assert_eq!(code(t.commit().await), KvError::NOT_COMMITTED, "the atomic result depends on the stored value");

    // A range read over partly written keys conflicts on the rest.
    let t = kv.create_transaction().unwrap();
    t.clear_range(b"a", b"m");
    t.get_range(&RangeRequest::new("a", "z"), false).await.unwrap();
    put(&kv, &[("b", "inside own clear")]).await;
    t.set(b"zz", b"1");
    let inside = code(t.commit().await);
    let t = kv.create_transaction().unwrap();
    t.clear_range(b"a", b"m");
    t.get_range(&RangeRequest::new("a", "z"), false).await.unwrap();
    put(&kv, &[("p", "outside own clear")]).await;
    t.set(b"zz", b"1");
    assert_eq!((inside, code(t.commit().await)), (0, KvError::NOT_COMMITTED));
}

#[tokio::test]
async fn read_only_transactions_always_commit_and_explicit_ranges_work() {
    let (kv, _) = store();
    let t = kv.create_transaction().unwrap();
    t.get(b"k", false).await.unwrap();
    put(&kv, &[("k", "x")]).await;
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

#[tokio::test]
async fn versionstamps_fill_in_at_commit_and_are_unreadable_before() {
    let (kv, _) = store();
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

#[tokio::test]
async fn transactions_older_than_five_seconds_fail() {
    let (kv, clock) = store();
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

#[tokio::test]
async fn size_limits_are_enforced() {
    let (kv, _) = store_with(KvFaults::default(), 1000);
    let t = kv.create_transaction().unwrap();
    t.set(&vec![b'k'; 10_001], b"v");
    assert_eq!(code(t.commit().await), KvError::KEY_TOO_LARGE);
    let t = kv.create_transaction().unwrap();
    t.set(b"k", &vec![0; 100_001]);
    assert_eq!(code(t.commit().await), KvError::VALUE_TOO_LARGE);
    let t = kv.create_transaction().unwrap();
    for i in 0..20u8 {
        t.set(&[b'k', i], &[0; 60]);
    }
    assert_eq!(code(t.commit().await), KvError::TRANSACTION_TOO_LARGE);
    let t = kv.create_transaction().unwrap();
    t.set(b"k", &[0; 900]);
    assert_eq!(code(t.commit().await), 0);
}

#[tokio::test]
async fn ambiguous_commits_happen_both_ways() {
    let faults = KvFaults { unknown_result_committed: 1.0, ..KvFaults::default() };
    let (kv, _) = store_with(faults, 10_000_000);
    let t = kv.create_transaction().unwrap();
    t.set(b"k", b"v");
    assert_eq!(code(t.commit().await), KvError::COMMIT_UNKNOWN_RESULT);
    assert_eq!(get(&kv, "k").await.as_deref(), Some("v"));

    let faults = KvFaults { unknown_result_not_committed: 1.0, ..KvFaults::default() };
    let (kv, _) = store_with(faults, 10_000_000);
    let t = kv.create_transaction().unwrap();
    t.set(b"k", b"v");
    assert_eq!(code(t.commit().await), KvError::COMMIT_UNKNOWN_RESULT);
    assert_eq!(get(&kv, "k").await, None);
    assert_eq!(kv.stats().unknown_not_committed, 1);
}

#[tokio::test]
async fn a_timed_out_commit_can_land_later_unless_it_conflicts() {
    let faults = KvFaults { timeout_commit_lands_later: 1.0, ..KvFaults::default() };
    let (kv, clock) = store_with(faults.clone(), 10_000_000);
    let t = kv.create_transaction().unwrap();
    t.set(b"k", b"late");
    assert_eq!(code(t.commit().await), KvError::TRANSACTION_TIMED_OUT);
    assert_eq!(get(&kv, "k").await, None, "not landed yet");
    clock.advance(Duration::from_secs(4));
    assert_eq!(get(&kv, "k").await.as_deref(), Some("late"), "landed within five seconds");
    assert_eq!(kv.stats().late_landed, 1);

    // A late commit that read a key since overwritten is dropped at landing.
    let t = kv.create_transaction().unwrap();
    t.get(b"k", false).await.unwrap();
    t.set(b"k", b"late again");
    assert_eq!(code(t.commit().await), KvError::TRANSACTION_TIMED_OUT);
    kv.set_faults(KvFaults::default());
    put(&kv, &[("k", "winner")]).await;
    clock.advance(Duration::from_secs(4));
    assert_eq!(get(&kv, "k").await.as_deref(), Some("winner"));
    assert_eq!(kv.stats().late_dropped, 1);
}

#[tokio::test]
async fn spurious_conflicts_hit_only_transactions_that_read() {
    let faults = KvFaults { spurious_conflict: 1.0, ..KvFaults::default() };
    let (kv, _) = store_with(faults, 10_000_000);
    let blind = kv.create_transaction().unwrap();
    blind.set(b"k", b"v");
    assert_eq!(code(blind.commit().await), 0);
    let reader = kv.create_transaction().unwrap();
    reader.get(b"k", false).await.unwrap();
    reader.set(b"k", b"w");
    assert_eq!(code(reader.commit().await), KvError::NOT_COMMITTED);
    assert_eq!(kv.stats().spurious_conflicts, 1);
}

#[tokio::test]
async fn unavailability_and_partitions() {
    let (kv, _) = store();
    let node1 = kv.client("node-1");
    let node2 = kv.client("node-2");
    kv.set_partitioned("node-1", true);
    let t = node1.create_transaction().unwrap();
    assert_eq!(t.get(b"k", false).await.unwrap_err().code(), KvError::TRANSACTION_TIMED_OUT);
    let t = node2.create_transaction().unwrap();
    t.set(b"k", b"from 2");
    assert_eq!(code(t.commit().await), 0);
    kv.set_partitioned("node-1", false);
    kv.set_unavailable(true);
    let t = node2.create_transaction().unwrap();
    assert_eq!(t.get(b"k", false).await.unwrap_err().code(), KvError::TRANSACTION_TIMED_OUT);
    kv.set_unavailable(false);
    assert_eq!(get(&node1, "k").await.as_deref(), Some("from 2"));
}

/// Records every injected delay instead of sleeping.
#[derive(Debug, Default)]
struct RecordingSleeper(std::sync::Mutex<Vec<Duration>>);

impl sundial::time::Sleeper for RecordingSleeper {
    fn sleep(&self, duration: Duration) -> sundial::kv::BoxFuture<'static, ()> {
        self.0.lock().unwrap().push(duration);
        Box::pin(std::future::ready(()))
    }
}

#[tokio::test]
async fn an_observer_is_touched_by_no_fault() {
    let faults = KvFaults {
        latency_max: Duration::from_millis(500),
        spurious_conflict: 1.0,
        unknown_result_committed: 1.0,
        ..KvFaults::default()
    };
    let sleeper = Arc::new(RecordingSleeper::default());
    let options = MemoryKvOptions { seed: 7, faults, ..MemoryKvOptions::default() };
    let kv = MemoryKv::with_options(Arc::new(clock()), sleeper.clone(), options);
    let node = kv.client("node-1");
    let observer = kv.observer();
    // The system under test sees every fault.
    let t = node.create_transaction().unwrap();
    t.get(b"k", false).await.unwrap();
    t.set(b"k", b"v");
    assert_eq!(code(t.commit().await), KvError::NOT_COMMITTED);
    assert!(!sleeper.0.lock().unwrap().is_empty(), "the node's operations were delayed");
    // The observer sees none: no delay, no spurious conflict, no ambiguous result, and
    // neither unavailability nor a partition of another client cuts it off.
    sleeper.0.lock().unwrap().clear();
    let t = observer.create_transaction().unwrap();
    t.get(b"k", false).await.unwrap();
    t.set(b"k", b"seen");
    assert_eq!(code(t.commit().await), 0);
    kv.set_unavailable(true);
    kv.set_partitioned("node-1", true);
    assert_eq!(get(&observer, "k").await.as_deref(), Some("seen"));
    assert!(sleeper.0.lock().unwrap().is_empty(), "no operation of the observer was delayed");
    assert_eq!(
        node.create_transaction().unwrap().get(b"k", false).await.unwrap_err().code(),
        KvError::TRANSACTION_TIMED_OUT
    );
}

#[tokio::test]
async fn old_versions_are_collected() {
    let (kv, clock) = store();
    for i in 0..100 {
        put(&kv, &[("k", &i.to_string()), ("j", "x")]).await;
    }
    // No live transactions: one version per key remains.
    assert_eq!(kv.stored_versions(), 2);
    let reader = kv.create_transaction().unwrap();
    reader.get(b"k", true).await.unwrap();
    for i in 0..10 {
        put(&kv, &[("k", &format!("new {i}"))]).await;
    }
    assert_eq!(reader.get(b"k", true).await.unwrap(), Some(b"99".to_vec()), "kept for the live reader");
    clock.advance(Duration::from_secs(6));
    assert_eq!(reader.get(b"k", true).await.unwrap_err().code(), KvError::TRANSACTION_TOO_OLD);
    drop(reader);
    put(&kv, &[("j", "y")]).await;
    assert_eq!(kv.stored_versions(), 2, "once no reader needs them, old versions go");
}

#[tokio::test]
async fn with_no_other_transaction_live_a_write_keeps_only_what_it_wrote() {
    let (kv, _clock) = store();
    put(&kv, &[("k", "1"), ("gone", "x")]).await;
    // A writer that read first (its own read version is live) and one that did not.
    let t = kv.create_transaction().unwrap();
    assert_eq!(t.get(b"k", false).await.unwrap(), Some(b"1".to_vec()));
    t.set(b"k", b"2");
    t.clear(b"gone");
    t.clear(b"never-there");
    t.commit().await.unwrap();
    assert_eq!(kv.stored_versions(), 1, "no version hidden, no deletion, no clear of nothing kept");
    assert_eq!(kv.key_count(), 1);
    // With a reader live, what a write hides stays for it, and its write still conflicts.
    let reader = kv.create_transaction().unwrap();
    assert_eq!(reader.get(b"k", false).await.unwrap(), Some(b"2".to_vec()));
    let t = kv.create_transaction().unwrap();
    t.clear(b"k");
    t.commit().await.unwrap();
    assert_eq!(reader.get(b"k", true).await.unwrap(), Some(b"2".to_vec()), "its snapshot is kept");
    reader.set(b"other", b"y");
    assert_eq!(code(reader.commit().await), KvError::NOT_COMMITTED, "the deletion conflicts with its read");
    assert_eq!(get(&kv, "k").await, None);
    assert_eq!(get(&kv, "other").await, None);
}

#[derive(Debug)]
enum AppError {
    Kv(KvError),
    Refused,
}

impl From<KvError> for AppError {
    fn from(e: KvError) -> Self {
        AppError::Kv(e)
    }
}

impl sundial::kv::AsKvError for AppError {
    fn as_kv_error(&self) -> Option<&KvError> {
        match self {
            AppError::Kv(e) => Some(e),
            AppError::Refused => None,
        }
    }
}

#[tokio::test]
async fn run_retries_conflicts_and_reports_maybe_committed() {
    let faults = KvFaults { unknown_result_committed: 1.0, ..KvFaults::default() };
    let (kv, _) = store_with(faults, 10_000_000);
    let mut seen = Vec::new();
    let options = RetryOptions { retry_limit: 3, ..RetryOptions::default() };
    let result: Result<(), AppError> = run(&kv, options, |t, maybe| {
        seen.push(maybe);
        async move {
            // Idempotent: after an ambiguous commit, check the marker first.
            if maybe.0 && t.get(b"marker", false).await?.is_some() {
                return Ok(());
            }
            t.set(b"marker", b"done");
            Ok(())
        }
    })
    .await;
    // Every commit reports 1021, so the loop ends on its retry limit, but the body saw the
    // flag and the marker was written once.
    assert!(matches!(result, Ok(()) | Err(AppError::Kv(_))));
    assert_eq!(seen[0], MaybeCommitted(false));
    assert_eq!(seen[1], MaybeCommitted(true));
    assert_eq!(get(&kv, "marker").await.as_deref(), Some("done"));

    let (kv, _) = store();
    let mut attempts = 0;
    let result: Result<u32, AppError> = run(&kv, RetryOptions::default(), |_, _| {
        attempts += 1;
        async { Err(AppError::Refused) }
    })
    .await;
    assert!(matches!(result, Err(AppError::Refused)));
    assert_eq!(attempts, 1, "a non-store error is not retried");
}

#[tokio::test]
async fn run_gives_up_after_the_retry_limit_and_on_timeout() {
    let faults = KvFaults { spurious_conflict: 1.0, ..KvFaults::default() };
    let (kv, _) = store_with(faults, 10_000_000);
    let mut attempts = 0;
    let body = |t: sundial::kv::memory::MemoryTransaction, _| {
        attempts += 1;
        async move {
            t.get(b"k", false).await?;
            t.set(b"k", b"v");
            Ok::<_, KvError>(())
        }
    };
    let result = run(&kv, RetryOptions { retry_limit: 4, ..RetryOptions::default() }, body).await;
    assert_eq!(result.unwrap_err().code(), KvError::NOT_COMMITTED);
    assert_eq!(attempts, 5);

    let (kv, clock) = store_with(KvFaults { spurious_conflict: 1.0, ..KvFaults::default() }, 10_000_000);
    let options = RetryOptions { retry_limit: 100, timeout: Some(Duration::from_secs(1)), ..RetryOptions::default() };
    let result = run(&kv, options, |t, _| {
        clock.advance(Duration::from_millis(300));
        async move {
            t.get(b"k", false).await?;
            t.set(b"k", b"v");
            Ok::<_, KvError>(())
        }
    })
    .await;
    assert_eq!(result.unwrap_err().code(), KvError::TRANSACTION_TIMED_OUT);
}

/// Interleaves many read-modify-write transactions; every committed increment must be
/// counted (no lost update: conflicts are never missed), and transactions on disjoint keys
/// must never conflict (conflicts are never invented).
#[tokio::test]
async fn random_interleavings_lose_no_update_and_invent_no_conflict() {
    for seed in 0..20 {
        let (kv, _) = store();
        let mut rng = Entropy::from_seed(seed);
        let mut committed = [0u64; 4];
        let mut open: Vec<(usize, sundial::kv::memory::MemoryTransaction)> = Vec::new();
        for _ in 0..400 {
            if open.len() < 6 && rng.below(2) == 0 {
                let key = rng.below(4) as usize;
                let t = kv.create_transaction().unwrap();
                let current = t.get(&[b'c', key as u8], false).await.unwrap();
                let n = current.map_or(0, |v| u64::from_le_bytes(v.try_into().unwrap()));
                t.set(&[b'c', key as u8], &(n + 1).to_le_bytes());
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
            let stored = t.get(&[b'c', key as u8], false).await.unwrap();
            assert_eq!(stored.map_or(0, |v| u64::from_le_bytes(v.try_into().unwrap())), *count, "seed {seed}");
        }
    }

    // Disjoint keys: interleaved read-modify-writes never conflict.
    let (kv, _) = store();
    let txns: Vec<_> = (0..50u8).map(|_| kv.create_transaction().unwrap()).collect();
    for (i, t) in txns.iter().enumerate() {
        t.get(&[b'd', i as u8], false).await.unwrap();
        t.get_range(&RangeRequest::new(vec![b'r', i as u8], vec![b'r', i as u8, 0xff]), false).await.unwrap();
        t.set(&[b'd', i as u8], b"x");
    }
    for t in &txns {
        assert_eq!(code(t.commit().await), 0);
    }
    assert_eq!(kv.stats().conflicts, 0);
}

#[tokio::test]
async fn a_commit_after_a_read_version_was_taken_gets_a_later_version() {
    // A read version can run ahead of the last commit (it follows the clock); a commit in
    // the same microsecond must still land after it, or the reader would see it and miss
    // its conflict.
    let (kv, clock) = store();
    put(&kv, &[("k", "old")]).await;
    clock.advance(Duration::from_secs(1));
    let t = kv.create_transaction().unwrap();
    assert_eq!(t.get(b"k", false).await.unwrap(), Some(b"old".to_vec()));
    put(&kv, &[("k", "new")]).await;
    assert_eq!(t.get(b"k", true).await.unwrap(), Some(b"old".to_vec()), "one snapshot");
    t.set(b"k", b"old+1");
    assert_eq!(code(t.commit().await), KvError::NOT_COMMITTED, "a lost update");
    assert_eq!(get(&kv, "k").await.as_deref(), Some("new"));
}

#[tokio::test]
async fn a_watch_fires_once_its_key_changes_after_its_commit() {
    let (kv, _) = store();
    put(&kv, &[("wake", "1")]).await;
    let t = kv.create_transaction().unwrap();
    t.get(b"wake", true).await.unwrap();
    let mut watch = Box::pin(t.watch(b"wake"));
    assert!(watch.as_mut().now_or_never().is_none(), "not armed before the commit");
    t.commit().await.unwrap();
    put(&kv, &[("wake", "1")]).await;
    assert!(watch.as_mut().now_or_never().is_none(), "the same value again is no change");
    put(&kv, &[("other", "x")]).await;
    assert!(watch.as_mut().now_or_never().is_none(), "other keys do not fire it");
    put(&kv, &[("wake", "2")]).await;
    assert_eq!(watch.as_mut().now_or_never(), Some(Ok(())));
    // An atomic add changes the value too; a clear of a missing key does not.
    let t = kv.create_transaction().unwrap();
    let mut counter = Box::pin(t.watch(b"counter"));
    t.commit().await.unwrap();
    let clear = kv.create_transaction().unwrap();
    clear.clear(b"counter");
    clear.commit().await.unwrap();
    assert!(counter.as_mut().now_or_never().is_none());
    let add = kv.create_transaction().unwrap();
    add.atomic_op(b"counter", &1i64.to_le_bytes(), AtomicOp::Add);
    add.commit().await.unwrap();
    assert_eq!(counter.as_mut().now_or_never(), Some(Ok(())));
}

#[tokio::test]
async fn a_watch_compares_with_what_its_transaction_saw() {
    let (kv, _) = store();
    put(&kv, &[("wake", "1")]).await;
    // Changed between the watch's read version and its commit: fires at the commit.
    let t = kv.create_transaction().unwrap();
    t.get(b"wake", true).await.unwrap();
    let mut watch = Box::pin(t.watch(b"wake"));
    put(&kv, &[("wake", "2")]).await;
    assert!(watch.as_mut().now_or_never().is_none());
    t.commit().await.unwrap();
    assert_eq!(watch.as_mut().now_or_never(), Some(Ok(())));
    // Its own write is what it saw: another write of that value changes nothing.
    let t = kv.create_transaction().unwrap();
    t.set(b"wake", b"3");
    let mut own = Box::pin(t.watch(b"wake"));
    t.commit().await.unwrap();
    put(&kv, &[("wake", "3")]).await;
    assert!(own.as_mut().now_or_never().is_none());
    put(&kv, &[("wake", "4")]).await;
    assert_eq!(own.as_mut().now_or_never(), Some(Ok(())));
}

#[tokio::test]
async fn a_watch_fails_with_its_transaction() {
    let (kv, _) = store();
    // Dropped uncommitted: canceled.
    let t = kv.create_transaction().unwrap();
    let mut dropped = Box::pin(t.watch(b"wake"));
    drop(t);
    assert_eq!(dropped.as_mut().now_or_never().unwrap().unwrap_err().code(), KvError::TRANSACTION_CANCELLED);
    // A failed commit: its error.
    let t = kv.create_transaction().unwrap();
    t.get(b"wake", false).await.unwrap();
    t.set(b"mine", b"x");
    let mut conflicted = Box::pin(t.watch(b"wake"));
    put(&kv, &[("wake", "1")]).await;
    assert_eq!(code(t.commit().await), KvError::NOT_COMMITTED);
    assert_eq!(conflicted.as_mut().now_or_never().unwrap().unwrap_err().code(), KvError::NOT_COMMITTED);
    // Partitioned: the commit cannot reach the store.
    let client = kv.client("n1");
    kv.set_partitioned("n1", true);
    let t = client.create_transaction().unwrap();
    let mut cut = Box::pin(t.watch(b"wake"));
    assert_eq!(code(t.commit().await), KvError::TRANSACTION_TIMED_OUT);
    assert_eq!(cut.as_mut().now_or_never().unwrap().unwrap_err().code(), KvError::TRANSACTION_TIMED_OUT);
}

#[tokio::test]
async fn ranges_read_together_see_what_each_read_alone_sees() {
    // Ascending, disjoint ranges with few and many keys between them, under a key deleted
    // after the reader began (a version it must not see) and one written after it.
    let (kv, clock) = store();
    let pairs: Vec<(String, String)> = (0..400).map(|i| (format!("k{i:04}"), format!("v{i}"))).collect();
    let refs: Vec<(&str, &str)> = pairs.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    put(&kv, &refs).await;
    clock.advance(Duration::from_millis(1));
    let reader = kv.create_transaction().unwrap();
    reader.read_version().await.unwrap();
    let writer = kv.create_transaction().unwrap();
    writer.clear(b"k0011");
    writer.set(b"k0012a", b"late");
    writer.commit().await.unwrap();
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
    let ranges_before = kv.stats().ranges_read;
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
    assert_eq!(kv.stats().ranges_read - ranges_before, 2 * 2 * 7, "each range once, read together or alone");
}

/// A clock whose monotonic time moves on a microsecond at every read of it.
#[derive(Debug, Default)]
struct Ticking(std::sync::atomic::AtomicU64);

impl Clock for Ticking {
    fn now(&self) -> chrono::DateTime<chrono::Utc> {
        from_micros(1_800_000_000_000_000).unwrap()
    }

    fn monotonic(&self) -> MonotonicInstant {
        let micros = self.0.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        MonotonicInstant::from_origin(Duration::from_micros(micros))
    }
}

#[tokio::test]
async fn the_lock_is_measured_only_when_asked() {
    for measure_lock in [false, true] {
        let options = MemoryKvOptions { measure_lock, ..MemoryKvOptions::default() };
        let kv = MemoryKv::with_options(Arc::new(Ticking::default()), Arc::new(NoSleep), options);
        put(&kv, &[("a", "1"), ("b", "2")]).await;
        assert_eq!(get(&kv, "a").await.as_deref(), Some("1"), "the store works the same either way");
        let stats = kv.stats();
        if measure_lock {
            // Each hold reads the clock when it begins and when it ends: a tick at least.
            assert!(stats.lock_held >= Duration::from_micros(2), "two holds at least: {:?}", stats.lock_held);
        } else {
            assert_eq!(stats.lock_held, Duration::ZERO);
        }
        assert_eq!(stats.lock_waited, Duration::ZERO, "one client never waits");
    }
}
