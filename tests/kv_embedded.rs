//! Goal: the embedded durable store (`EmbeddedKv`, a `MemoryKv` journaled to a commit log
//! folded into a SQLite file)
//! keeps FoundationDB's transaction semantics rule by rule, and keeps its durability
//! contract: what a commit acknowledged is there after the store is reopened, versions go
//! on from where they were, nothing a reader saw is lost, one process owns a directory,
//! and a damaged or foreign file is refused with the file left as it was.
//!
//! Method: every rule of `kv_rules` and the serializability model run on a store in a
//! fresh directory (watches waited for in real time: they fire once the commit is on
//! disk); then the store is closed and opened again, or its file damaged, and what it
//! holds or says is checked.

mod kv_rules;
mod serializability;

use std::sync::Arc;
use std::time::Duration;

use proptest::prelude::*;
use sundial::kv::embedded::{EmbeddedError, EmbeddedKv, EmbeddedOptions, DATA_FILE, LOG_FILE};
use sundial::kv::{AtomicOp, Kv, KvTransaction, RangeRequest};
use sundial::time::{from_micros, ManualClock, NoSleep, SystemClock};
use sundial_test_support::dir::TempDir;

fn clock() -> ManualClock {
    ManualClock::new(from_micros(1_800_000_000_000_000).unwrap())
}

fn env(clock: ManualClock) -> kv_rules::Env {
    kv_rules::Env { clock, watch_timeout: Duration::from_secs(5), watch_grace: Duration::from_millis(100) }
}

macro_rules! on_embedded {
    ($($name:ident),* $(,)?) => {$(
        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn $name() {
            let dir = TempDir::new("kv");
            let clock = clock();
            let store = EmbeddedKv::open(dir.path(), Arc::new(clock.clone())).unwrap();
            kv_rules::$name(store.kv(), &env(clock)).await;
        }
    )*};
}

for_each_kv_rule!(on_embedded);

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    /// `tests/kv_model.rs`'s check, on the durable store.
    #[test]
    fn transactions_are_serializable_and_conflict_only_for_a_reason(script in serializability::script()) {
        let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
        let dir = TempDir::new("model");
        let (initial, records) = runtime.block_on(async {
            let clock = clock();
            let store = EmbeddedKv::open(dir.path(), Arc::new(clock.clone())).unwrap();
            serializability::run_script(store.kv(), &clock, &script).await
        });
        serializability::check(&initial, &records)?;
    }
}

/// `s` then a versionstamp (its offset, 1, in the last four bytes).
fn stamped_key() -> Vec<u8> {
    let mut key = b"s".to_vec();
    key.extend_from_slice(&[0; 10]);
    key.extend_from_slice(&1u32.to_le_bytes());
    key
}

fn open(dir: &TempDir) -> EmbeddedKv {
    EmbeddedKv::open(dir.path(), Arc::new(SystemClock::new())).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn what_was_acknowledged_is_there_after_reopening() {
    let dir = TempDir::new("reopen");
    let store = open(&dir);
    let kv = store.kv().clone();
    kv_rules::put(&kv, &[("a", "1"), ("b", "2"), ("c", "3")]).await;
    let t = kv.create_transaction().unwrap();
    t.clear(b"b");
    t.atomic_op(b"n", &5u64.to_le_bytes(), AtomicOp::Add);
    t.clear_range(b"c", b"d");
    t.atomic_op(&stamped_key(), b"first", AtomicOp::SetVersionstampedKey);
    let first = t.commit().await.unwrap();
    store.close();

    let store = open(&dir);
    let kv = store.kv().clone();
    assert_eq!(kv_rules::get(&kv, "a").await.as_deref(), Some("1"));
    assert_eq!(kv_rules::get(&kv, "b").await, None);
    assert_eq!(kv_rules::get(&kv, "c").await, None);
    let t = kv.create_transaction().unwrap();
    assert_eq!(t.get(b"n", false).await.unwrap(), Some(5u64.to_le_bytes().to_vec()));
    // Versions go on from the last one written: a versionstamp of now sorts after one
    // written before the restart.
    t.atomic_op(&stamped_key(), b"second", AtomicOp::SetVersionstampedKey);
    let second = t.commit().await.unwrap();
    assert!(second.version > first.version, "{} after {}", second.version, first.version);
    let t = kv.create_transaction().unwrap();
    let stamped = t.get_range(&RangeRequest::prefix(b"s"), false).await.unwrap().pairs;
    let values: Vec<&[u8]> = stamped.iter().map(|(_, v)| v.as_slice()).collect();
    assert_eq!(values, [b"first".as_slice(), b"second"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn commits_made_together_are_all_on_disk_when_acknowledged() {
    let dir = TempDir::new("group");
    let store = open(&dir);
    let kv = store.kv().clone();
    let commits: Vec<_> = (0..200)
        .map(|i| {
            let kv = kv.clone();
            tokio::spawn(async move { kv_rules::put(&kv, &[(&format!("k{i:03}"), "v")]).await })
        })
        .collect();
    for commit in commits {
        commit.await.unwrap();
    }
    // Not closed: dropped with nothing left to write, as a process that is killed now.
    drop(store);
    let store = open(&dir);
    let t = store.kv().create_transaction().unwrap();
    assert_eq!(t.get_range(&RangeRequest::prefix(b"k"), false).await.unwrap().pairs.len(), 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_open_of_the_same_directory_is_refused() {
    let dir = TempDir::new("lock");
    let store = open(&dir);
    let second = EmbeddedKv::open(dir.path(), Arc::new(SystemClock::new()));
    assert!(matches!(&second, Err(EmbeddedError::Locked { .. })), "{second:?}");
    let message = second.unwrap_err().to_string();
    assert!(message.contains("in use by another sundial process"), "{message}");
    store.close();
    // Free again once closed.
    open(&dir).close();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_damaged_or_foreign_file_is_refused_and_left_as_it_was() {
    let dir = TempDir::new("corrupt");
    let store = open(&dir);
    for i in 0..500 {
        kv_rules::put(store.kv(), &[(&format!("key{i:04}"), &"x".repeat(100))]).await;
    }
    store.close();
    let path = dir.path().join(DATA_FILE);
    let good = std::fs::read(&path).unwrap();

    // Another program's file.
    std::fs::write(&path, b"not a database at all, just some text that happens to be here").unwrap();
    let refused = EmbeddedKv::open(dir.path(), Arc::new(SystemClock::new()));
    assert!(matches!(&refused, Err(EmbeddedError::Corrupt { .. })), "{refused:?}");
    assert_eq!(std::fs::read(&path).unwrap(), b"not a database at all, just some text that happens to be here");

    // Cut in half.
    std::fs::write(&path, &good[..good.len() / 2]).unwrap();
    let refused = EmbeddedKv::open(dir.path(), Arc::new(SystemClock::new()));
    assert!(refused.is_err(), "a truncated file must not open as an empty store");
    assert_eq!(std::fs::read(&path).unwrap().len(), good.len() / 2, "left as it was");

    // Whole again: it opens with everything.
    std::fs::write(&path, &good).unwrap();
    let store = open(&dir);
    let t = store.kv().create_transaction().unwrap();
    assert_eq!(t.get_range(&RangeRequest::prefix(b"key"), false).await.unwrap().pairs.len(), 500);
    store.close();

    // The commit log is held to the same rule.
    let log = dir.path().join(LOG_FILE);
    std::fs::write(&log, b"not a log either").unwrap();
    let refused = EmbeddedKv::open(dir.path(), Arc::new(SystemClock::new()));
    assert!(matches!(&refused, Err(EmbeddedError::Corrupt { .. })), "{refused:?}");
    assert_eq!(std::fs::read(&log).unwrap(), b"not a log either");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deleted_data_frees_space_for_later_writes() {
    let dir = TempDir::new("space");
    // Folded every 256 KiB of writes (a round writes about 500 KB).
    let options = EmbeddedOptions { fold_bytes: 256 << 10, ..EmbeddedOptions::default() };
    let store =
        EmbeddedKv::open_with_options(dir.path(), Arc::new(SystemClock::new()), Arc::new(NoSleep), options).unwrap();
    let kv = store.kv().clone();
    let bytes =
        || -> u64 { std::fs::read_dir(dir.path()).unwrap().map(|f| f.unwrap().metadata().unwrap().len()).sum() };
    // History written and expired, round after round, as retention does.
    let mut sizes = Vec::new();
    for round in 0..16 {
        for batch in 0..20 {
            let t = kv.create_transaction().unwrap();
            for i in 0..100 {
                t.set(format!("h/{round:02}/{batch:02}/{i:03}").as_bytes(), &[7; 200]);
            }
            t.commit().await.unwrap();
        }
        let t = kv.create_transaction().unwrap();
        t.clear_range(b"h/", b"h0");
        t.commit().await.unwrap();
        sizes.push(bytes());
    }
    // Each round writes about 500 KB and deletes it. The files (data, log and their
    // write-ahead logs, each of which SQLite lets grow to about 4 MB before it starts it
    // again) stop growing after the first rounds instead of growing by that much each
    // round.
    let (early, last) = (sizes[9], sizes[15]);
    assert!(last <= early + early / 10, "the files grew from {early} to {last} bytes: {sizes:?}");
    // Closed, the log is folded whole and gives its pages back.
    store.close();
    let log = std::fs::metadata(dir.path().join(LOG_FILE)).unwrap().len();
    assert!(log < 64 << 10, "the closed store's commit log holds {log} bytes");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_torn_tail_of_the_log_is_discarded_at_open() {
    let dir = TempDir::new("torn");
    let store = open(&dir);
    kv_rules::put(store.kv(), &[("kept", "1")]).await;
    for i in 0..50 {
        kv_rules::put(store.kv(), &[(&format!("torn{i:02}"), &"y".repeat(500))]).await;
    }
    // What a crash leaves: the files as they are while the store is open (every commit
    // acknowledged is in the commit log's write-ahead log, none folded yet), the last
    // frame cut short by the crash.
    let crashed = TempDir::new("torn-image");
    let wal = format!("{LOG_FILE}-wal");
    for file in [DATA_FILE, LOG_FILE] {
        std::fs::copy(dir.path().join(file), crashed.path().join(file)).unwrap();
    }
    let mut tail = std::fs::read(dir.path().join(&wal)).unwrap();
    store.close();
    assert!(tail.len() > 4096, "the commits are in the log ({} bytes)", tail.len());
    tail.truncate(tail.len() - 100);
    std::fs::write(crashed.path().join(&wal), &tail).unwrap();
    let store = EmbeddedKv::open(crashed.path(), Arc::new(SystemClock::new())).unwrap();
    assert_eq!(kv_rules::get(store.kv(), "kept").await.as_deref(), Some("1"));
    let t = store.kv().create_transaction().unwrap();
    let torn = t.get_range(&RangeRequest::prefix(b"torn"), false).await.unwrap().pairs;
    assert_eq!(torn.len(), 49, "every commit but the torn last one");
}
