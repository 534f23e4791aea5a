//! Goal: `PgKv` keeps FoundationDB's transaction semantics on a real PostgreSQL server,
//! rule by rule as `MemoryKv` does, and maps the server's failures to the store's errors:
//! a lost commit is `commit_unknown_result`, an unreachable server `transaction_timed_out`
//! (fast, never a hang), a refused login or a schema newer than this build a clear error
//! at open; old tombstones are collected.
//!
//! Method: a throwaway server of the test's own (`sundial-test-support`; under `CI=true`
//! a missing server fails the test); every rule of `kv_rules` runs in a fresh schema with
//! the client's clock a manual one (transaction ages), watches waited for in real time.

mod kv_rules;
mod serializability;

use std::sync::Arc;
use std::time::Duration;

use proptest::prelude::*;
use sundial::kv::postgres::{PgKv, PgKvOptions, PgOpenError};
use sundial::kv::{Kv, KvError, KvTransaction, RangeRequest};
use sundial::time::{from_micros, ManualClock, SystemClock};
use sundial_test_support::postgres::{unique_name, PgServer, ServerOptions};

fn options(server: &PgServer) -> PgKvOptions {
    let mut options = PgKvOptions::new(&server.url()).unwrap();
    options.schema = unique_name("kv");
    // The interleaving rules keep up to 51 transactions open at once.
    options.pool_size = 64;
    options
}

fn env(clock: ManualClock) -> kv_rules::Env {
    kv_rules::Env { clock, watch_timeout: Duration::from_secs(5), watch_grace: Duration::from_millis(300) }
}

macro_rules! on_postgres {
    ($($name:ident),* $(,)?) => {$(
        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn $name() {
            let Some(server) = PgServer::shared() else { return };
            let clock = ManualClock::new(from_micros(1_800_000_000_000_000).unwrap());
            let kv = PgKv::open(options(server), Arc::new(clock.clone())).await.unwrap();
            kv_rules::$name(&kv, &env(clock)).await;
        }
    )*};
}

for_each_kv_rule!(on_postgres);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connection_lost_during_commit_is_an_unknown_result() {
    let Some(server) = PgServer::shared() else { return };
    let options = options(server);
    let schema = options.schema.clone();
    let kv = PgKv::open(options, Arc::new(SystemClock::new())).await.unwrap();
    // Another session holds the sequencer, so the commit waits inside the server.
    let (holder, connection) = tokio_postgres::connect(&server.url(), tokio_postgres::NoTls).await.unwrap();
    tokio::spawn(connection);
    holder.batch_execute(&format!("BEGIN; SELECT 1 FROM {schema}.meta FOR UPDATE")).await.unwrap();
    // Watched from a session of its own: inside a transaction (the holder's) a session
    // reads pg_stat_activity once and sees that snapshot until the transaction ends.
    let (observer, connection) = tokio_postgres::connect(&server.url(), tokio_postgres::NoTls).await.unwrap();
    tokio::spawn(connection);
    let t = kv.create_transaction().unwrap();
    t.set(b"k", b"lost");
    let commit = tokio::spawn(async move { t.commit().await });
    let waiting =
        format!("SELECT pid FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query LIKE '%{schema}.commit(%'");
    let mut polls = 0;
    let pid: i32 = loop {
        if let Some(row) = observer.query_opt(&waiting, &[]).await.unwrap() {
            break row.get(0);
        }
        // Never a hang: a commit that ended without waiting, or never reached the server,
        // fails the test with what it did.
        if commit.is_finished() {
            panic!("the commit did not wait for the sequencer: {:?}", commit.await);
        }
        let sessions = "SELECT pid, state, wait_event_type, left(query, 60) FROM pg_stat_activity";
        assert!(
            polls < 3_000,
            "the commit did not reach the server within 30 s; sessions: {:?}",
            observer.query(sessions, &[]).await.map(|rows| rows
                .iter()
                .map(|r| format!(
                    "{:?} {:?} {:?} {:?}",
                    r.get::<_, i32>(0),
                    r.get::<_, Option<String>>(1),
                    r.get::<_, Option<String>>(2),
                    r.get::<_, Option<String>>(3)
                ))
                .collect::<Vec<_>>())
        );
        polls += 1;
        tokio::time::sleep(Duration::from_millis(10)).await;
    };
    observer.execute("SELECT pg_terminate_backend($1)", &[&pid]).await.unwrap();
    let outcome = commit.await.unwrap();
    assert_eq!(outcome.unwrap_err().code(), KvError::COMMIT_UNKNOWN_RESULT);
    holder.batch_execute("ROLLBACK").await.unwrap();
    // It did not land, and the pool serves on.
    assert_eq!(kv_rules::get(&kv, "k").await, None);
    kv_rules::put(&kv, &[("k", "next")]).await;
    assert_eq!(kv_rules::get(&kv, "k").await.as_deref(), Some("next"));
    assert_eq!(kv.stats().unknown_results, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stopped_server_is_unavailable_at_once_and_served_again_once_back() {
    let Some(server) = PgServer::start(ServerOptions::default()) else { return };
    let mut options = options(&server);
    options.connect_timeout = Duration::from_secs(1);
    options.operation_timeout = Duration::from_secs(1);
    let kv = PgKv::open(options, Arc::new(SystemClock::new())).await.unwrap();
    kv_rules::put(&kv, &[("k", "before")]).await;
    let reader = kv.create_transaction().unwrap();
    reader.get(b"k", false).await.unwrap();
    server.stop("fast");
    assert_eq!(reader.get(b"j", false).await.unwrap_err().code(), KvError::TRANSACTION_TIMED_OUT);
    let t = kv.create_transaction().unwrap();
    let error = t.get(b"k", false).await.unwrap_err();
    assert_eq!(error.code(), KvError::TRANSACTION_TIMED_OUT, "{error}");
    let t = kv.create_transaction().unwrap();
    t.set(b"k", b"during");
    let code = t.commit().await.unwrap_err().code();
    assert!(matches!(code, KvError::TRANSACTION_TIMED_OUT | KvError::COMMIT_UNKNOWN_RESULT), "{code}");
    server.start_again();
    assert_eq!(kv_rules::get(&kv, "k").await.as_deref(), Some("before"));
    kv_rules::put(&kv, &[("k", "after")]).await;
    assert_eq!(kv_rules::get(&kv, "k").await.as_deref(), Some("after"));
    assert!(kv.stats().unavailable >= 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_logins_missing_databases_and_unreachable_servers_are_named_at_open() {
    let Some(server) = PgServer::shared() else { return };
    let clock = || Arc::new(SystemClock::new());
    let url = format!("postgres://postgres:wrong@127.0.0.1:{}/postgres", server.port());
    let error = PgKv::open(PgKvOptions::new(&url).unwrap(), clock()).await.unwrap_err();
    assert!(matches!(&error, PgOpenError::Connect(m) if m.contains("password authentication failed")), "{error}");
    let url =
        format!("postgres://postgres:{}@127.0.0.1:{}/nowhere", sundial_test_support::postgres::PASSWORD, server.port());
    let error = PgKv::open(PgKvOptions::new(&url).unwrap(), clock()).await.unwrap_err();
    assert!(matches!(&error, PgOpenError::Connect(m) if m.contains("\"nowhere\" does not exist")), "{error}");
    // Nothing listens on a port just freed.
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let mut options = PgKvOptions::new(&format!("postgres://postgres@127.0.0.1:{port}/postgres")).unwrap();
    options.connect_timeout = Duration::from_secs(1);
    let error = PgKv::open(options, clock()).await.unwrap_err();
    assert!(matches!(&error, PgOpenError::Connect(m) if m.contains("refused")), "{error}");
    let mut options = PgKvOptions::new(&server.url()).unwrap();
    options.schema = "Not-A-Name".into();
    assert!(matches!(PgKv::open(options, clock()).await, Err(PgOpenError::Schema(_))));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_schema_newer_than_this_build_is_refused_and_an_existing_one_reused() {
    let Some(server) = PgServer::shared() else { return };
    let options = options(server);
    let schema = options.schema.clone();
    let kv = PgKv::open(options.clone(), Arc::new(SystemClock::new())).await.unwrap();
    kv_rules::put(&kv, &[("k", "kept")]).await;
    let again = PgKv::open(options.clone(), Arc::new(SystemClock::new())).await.unwrap();
    assert_eq!(kv_rules::get(&again, "k").await.as_deref(), Some("kept"));
    server.psql(&format!("UPDATE {schema}.meta SET schema_version = 99"));
    let error = PgKv::open(options, Arc::new(SystemClock::new())).await.unwrap_err();
    assert_eq!(error, PgOpenError::SchemaTooNew { schema: schema.clone(), found: 99, known: 1 });
    assert!(error.to_string().contains("upgrade sundial"), "{error}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tombstones_and_range_records_are_collected_once_past_the_horizon() {
    let Some(server) = PgServer::shared() else { return };
    let options = options(server);
    let schema = options.schema.clone();
    let kv = PgKv::open(options, Arc::new(SystemClock::new())).await.unwrap();
    let pairs: Vec<(String, String)> = (0..50).map(|i| (format!("h{i:02}"), "x".to_owned())).collect();
    let refs: Vec<(&str, &str)> = pairs.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    kv_rules::put(&kv, &refs).await;
    let t = kv.create_transaction().unwrap();
    t.clear_range(b"h", b"i");
    t.clear(b"h00");
    t.commit().await.unwrap();
    let count = |sql: String| server.psql(&sql).trim().parse::<u64>().unwrap();
    let tombstones = || count(format!("SELECT count(*) FROM {schema}.dead"));
    let ranges = || count(format!("SELECT count(*) FROM {schema}.ranges"));
    assert_eq!((tombstones(), ranges()), (50, 1));
    kv.collect_garbage().await.unwrap();
    assert_eq!((tombstones(), ranges()), (50, 1), "younger than the horizon: kept");
    server.psql(&format!("UPDATE {schema}.dead SET ver = ver - 60000000"));
    server.psql(&format!("UPDATE {schema}.ranges SET ver = ver - 60000000"));
    kv.collect_garbage().await.unwrap();
    assert_eq!((tombstones(), ranges()), (0, 0));
    let t = kv.create_transaction().unwrap();
    assert!(t.get_range(&RangeRequest::prefix(b"h"), false).await.unwrap().pairs.is_empty());
}

proptest! {
    // Each case runs in a schema of its own, a round trip per operation.
    #![proptest_config(ProptestConfig { cases: 100, ..ProptestConfig::default() })]

    /// `tests/kv_model.rs`'s check, on PostgreSQL.
    #[test]
    fn transactions_are_serializable_and_conflict_only_for_a_reason(script in serializability::script()) {
        let Some(server) = PgServer::shared() else { return Ok(()) };
        let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
        let (initial, records) = runtime.block_on(async {
            let clock = ManualClock::new(from_micros(1_800_000_000_000_000).unwrap());
            let kv = PgKv::open(options(server), Arc::new(clock.clone())).await.unwrap();
            serializability::run_script(&kv, &clock, &script).await
        });
        serializability::check(&initial, &records)?;
    }
}
