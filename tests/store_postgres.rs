//! Goal: the job store behaves on PostgreSQL exactly as on `MemoryKv`: the same
//! conformance scenarios (`sundial_test_support::conformance`), the multi-poller race and the history cap
//! pass on `PgKv` against a real server, with real connections interleaving.
//!
//! Method: a throwaway server (`sundial-test-support`; under `CI=true` a missing server
//! fails the test); each scenario in a fresh schema.

use sundial_test_support::conformance;
use sundial_test_support::for_each_scenario;

use std::sync::Arc;

use sundial::calendar::Calendars;
use sundial::entropy::Entropy;
use sundial::kv::postgres::{PgKv, PgKvOptions};
use sundial::kv::RetryOptions;
use sundial::store::{KvJobStore, StoreOptions};
use sundial::time::SystemClock;
use sundial_test_support::postgres::{unique_name, PgServer};

async fn store(server: &PgServer, options: StoreOptions) -> (KvJobStore<PgKv>, PgKv) {
    let mut kv_options = PgKvOptions::new(&server.url()).unwrap();
    kv_options.schema = unique_name("store");
    kv_options.pool_size = 32;
    let kv = PgKv::open(kv_options, Arc::new(SystemClock::new())).await.unwrap();
    let store = KvJobStore::new(kv.clone(), Arc::new(Calendars::new()), Entropy::from_seed(1), options);
    (store, kv)
}

macro_rules! on_postgres {
    ($($name:ident),* $(,)?) => {$(
        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn $name() {
            let Some(server) = PgServer::shared() else { return };
            conformance::$name(&store(server, StoreOptions::default()).await.0).await;
        }
    )*};
}

for_each_scenario!(on_postgres);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_pollers_take_each_fire_exactly_once() {
    let Some(server) = PgServer::shared() else { return };
    let patient =
        StoreOptions { retry: RetryOptions { retry_limit: 100, ..RetryOptions::default() }, ..StoreOptions::default() };
    let (store, kv) = store(server, patient).await;
    conformance::concurrent_pollers_take_each_fire_exactly_once(&store).await;
    let stats = kv.stats();
    assert!(stats.commits > 0 && stats.unknown_results == 0, "{stats:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn history_cap_evicts_finished_runs_and_refuses_when_all_run() {
    let Some(server) = PgServer::shared() else { return };
    let (store, _) = store(server, StoreOptions { max_runs: Some(3), ..StoreOptions::default() }).await;
    conformance::history_cap_evicts_finished_runs_and_refuses_when_all_run(&store).await;
}
