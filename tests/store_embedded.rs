//! Goal: the job store behaves on the embedded durable store exactly as on `MemoryKv`:
//! the same conformance scenarios (`sundial_test_support::conformance`), the multi-poller race and the
//! history cap pass on `EmbeddedKv`, every commit written to disk before it returns; and a
//! store reopened from its directory holds what the scenario left.
//!
//! Method: each scenario in a fresh directory; then the directory is opened again and the
//! two stores' keys and values compared.

use sundial_test_support::conformance;
use sundial_test_support::for_each_scenario;

use std::sync::Arc;

use sundial::calendar::Calendars;
use sundial::entropy::Entropy;
use sundial::kv::embedded::EmbeddedKv;
use sundial::kv::memory::MemoryKv;
use sundial::kv::{Kv, KvTransaction, RangeRequest, RetryOptions};
use sundial::store::{KvJobStore, StoreOptions};
use sundial::time::SystemClock;
use sundial_test_support::dir::TempDir;

fn store(dir: &TempDir, options: StoreOptions) -> (KvJobStore<MemoryKv>, EmbeddedKv) {
    let embedded = EmbeddedKv::open(dir.path(), Arc::new(SystemClock::new())).unwrap();
    let store = KvJobStore::new(embedded.kv().clone(), Arc::new(Calendars::new()), Entropy::from_seed(1), options);
    (store, embedded)
}

async fn everything(kv: &MemoryKv) -> Vec<(Vec<u8>, Vec<u8>)> {
    let t = kv.create_transaction().unwrap();
    let pairs = t.get_range(&RangeRequest::new(Vec::new(), vec![0xff]), true).await.unwrap().pairs;
    pairs.into_iter().map(|(key, value)| (key.into_vec(), value.into_vec())).collect()
}

macro_rules! on_embedded {
    ($($name:ident),* $(,)?) => {$(
        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn $name() {
            let dir = TempDir::new("store");
            let (store, embedded) = store(&dir, StoreOptions::default());
            conformance::$name(&store).await;
            let before = everything(embedded.kv()).await;
            drop(store);
            embedded.close();
            let reopened = EmbeddedKv::open(dir.path(), Arc::new(SystemClock::new())).unwrap();
            assert!(everything(reopened.kv()).await == before, "the reopened store holds what the scenario left");
        }
    )*};
}

for_each_scenario!(on_embedded);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_pollers_take_each_fire_exactly_once() {
    let dir = TempDir::new("store");
    let patient =
        StoreOptions { retry: RetryOptions { retry_limit: 100, ..RetryOptions::default() }, ..StoreOptions::default() };
    let (store, _embedded) = store(&dir, patient);
    conformance::concurrent_pollers_take_each_fire_exactly_once(&store).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn history_cap_evicts_finished_runs_and_refuses_when_all_run() {
    let dir = TempDir::new("store");
    let (store, _embedded) = store(&dir, StoreOptions { max_runs: Some(3), ..StoreOptions::default() });
    conformance::history_cap_evicts_finished_runs_and_refuses_when_all_run(&store).await;
}
