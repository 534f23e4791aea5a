//! Goal: `MemoryKv` reproduces FoundationDB's transaction semantics rule by rule, and
//! reports conflicts exactly where FDB would: never fewer (lost updates) and never more
//! (a design relying on a conflict FDB does not raise would pass here and fail there).
//!
//! Method: each test drives explicit transactions in a chosen interleaving on a manual
//! clock and checks commit outcomes and stored values; fault tests set rates to 1.0 so
//! the outcome is certain; a randomized test checks no lost updates under contention and
//! zero conflicts on disjoint keys.

mod kv_rules;
mod meanwhile;

use kv_rules::{code, get, put};

use std::sync::Arc;
use std::time::Duration;

use futures_util::FutureExt;
use sundial::kv::memory::{KvFaults, MemoryKv, MemoryKvOptions};
use sundial::kv::{run, Kv, KvError, KvTransaction, MaybeCommitted, RetryOptions};
use sundial::time::NoSleep;
use sundial::time::{from_micros, Clock, ManualClock, MonotonicInstant};

fn clock() -> ManualClock {
    ManualClock::new(from_micros(1_800_000_000_000_000).unwrap())
}

fn store() -> (MemoryKv, ManualClock) {
    let clock = clock();
    (MemoryKv::new(Arc::new(clock.clone())), clock)
}

fn env(clock: ManualClock) -> kv_rules::Env {
    kv_rules::Env { clock, watch_timeout: Duration::ZERO, watch_grace: Duration::ZERO }
}

macro_rules! on_memory {
    ($($name:ident),* $(,)?) => {$(
        #[tokio::test]
        async fn $name() {
            let (kv, clock) = store();
            kv_rules::$name(&kv, &env(clock)).await;
        }
    )*};
}

for_each_kv_rule!(on_memory);

#[tokio::test]
async fn ranges_read_together_are_read_once_each() {
    let (kv, clock) = store();
    let before = kv.stats().ranges_read;
    kv_rules::ranges_read_together_see_what_each_read_alone_sees(&kv, &env(clock)).await;
    assert_eq!(kv.stats().ranges_read - before, 2 * 2 * 7, "each range once, read together or alone");
}

#[tokio::test]
async fn a_watch_fails_when_its_commit_cannot_reach_the_store() {
    let (kv, _) = store();
    let client = kv.client("n1");
    kv.set_partitioned("n1", true);
    let t = client.create_transaction().unwrap();
    let mut cut = Box::pin(t.watch(b"wake"));
    assert_eq!(code(t.commit().await), KvError::TRANSACTION_TIMED_OUT);
    assert_eq!(cut.as_mut().now_or_never().unwrap().unwrap_err().code(), KvError::TRANSACTION_TIMED_OUT);
}

fn store_with(faults: KvFaults, size_limit: usize) -> (MemoryKv, ManualClock) {
    let clock = clock();
    let options = MemoryKvOptions { seed: 7, transaction_size_limit: size_limit, faults, ..MemoryKvOptions::default() };
    (MemoryKv::with_options(Arc::new(clock.clone()), Arc::new(NoSleep), options), clock)
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
    // A transaction's later reads are refused too, though its read version is fixed.
    let t = node1.create_transaction().unwrap();
    t.get(b"k", false).await.unwrap();
    kv.set_partitioned("node-1", true);
    assert_eq!(t.get(b"k", false).await.unwrap_err().code(), KvError::TRANSACTION_TIMED_OUT);
    kv.set_partitioned("node-1", false);
    let t = node2.create_transaction().unwrap();
    t.get(b"k", false).await.unwrap();
    kv.set_unavailable(true);
    assert_eq!(t.get_many(&[b"k"], false).await.unwrap_err().code(), KvError::TRANSACTION_TIMED_OUT);
    kv.set_unavailable(false);
}

/// Records every injected delay instead of sleeping.
#[derive(Debug, Default)]
struct RecordingSleeper(std::sync::Mutex<Vec<Duration>>);

impl sundial::time::Sleeper for RecordingSleeper {
    fn sleep(&self, duration: Duration) -> futures_util::future::BoxFuture<'static, ()> {
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
        let after_first_reads = kv.stats();
        // A transaction's second read holds the lock shared: its read version is fixed.
        let t = kv.create_transaction().unwrap();
        assert_eq!(t.get(b"a", false).await.unwrap().as_deref(), Some(&b"1"[..]));
        assert_eq!(t.get(b"b", false).await.unwrap().as_deref(), Some(&b"2"[..]));
        let stats = kv.stats();
        if measure_lock {
            // Each hold reads the clock when it begins and when it ends: a tick at least.
            assert!(stats.lock_held >= Duration::from_micros(2), "two holds at least: {:?}", stats.lock_held);
            assert_eq!(after_first_reads.lock_shared, Duration::ZERO, "first reads hold it exclusively");
            assert!(stats.lock_shared >= Duration::from_micros(1), "the second read's: {:?}", stats.lock_shared);
        } else {
            assert_eq!((stats.lock_held, stats.lock_shared), (Duration::ZERO, Duration::ZERO));
        }
        assert_eq!(stats.lock_waited, Duration::ZERO, "one client never waits");
    }
}
