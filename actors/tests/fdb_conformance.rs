//! Goal: the store behaves on a real FoundationDB cluster exactly as on `MemoryKv`: the
//! same conformance scenarios (`sundial_test_support::conformance`) pass on both.
//!
//! Method: runs only with feature `fdb` and `FDB_CLUSTER_FILE` set (libfdb_c cannot be
//! installed on the development machines; CI compile-checks this file). Without a cluster
//! it prints that it skipped. Each scenario runs in a fresh random keyspace, cleared after.
#![cfg(feature = "fdb")]

use sundial_test_support::conformance;
use sundial_test_support::for_each_scenario;

use std::sync::Arc;

use sundial::calendar::Calendars;
use sundial::entropy::Entropy;
use sundial::kv::{run, KvTransaction, RetryOptions};
use sundial::store::keys::Keyspace;
use sundial::store::{KvJobStore, StoreOptions};
use sundial::time::{Clock, SystemClock};
use sundial_actors::fdb::{foundationdb, FdbKv};

struct Cluster {
    kv: FdbKv,
    entropy: std::sync::Mutex<Entropy>,
}

impl Cluster {
    fn store(&self, options: StoreOptions) -> (KvJobStore<FdbKv>, Keyspace) {
        let mut entropy = self.entropy.lock().unwrap();
        let keys = Keyspace::new(format!("sundial-conformance-{}", entropy.alphanumeric(12)).into_bytes());
        let store = KvJobStore::with_keyspace(
            self.kv.clone(),
            keys.clone(),
            Arc::new(Calendars::new()),
            entropy.fork(),
            options,
        );
        (store, keys)
    }

    async fn clear(&self, keys: &Keyspace) {
        let (begin, end) = keys.all();
        run(&self.kv, RetryOptions::default(), |txn, _| {
            let (begin, end) = (begin.clone(), end.clone());
            async move {
                txn.clear_range(&begin, &end);
                Ok::<_, sundial::kv::KvError>(())
            }
        })
        .await
        .unwrap();
    }
}

macro_rules! on_fdb {
    ($cluster:expr, $($name:ident),* $(,)?) => {$(
        let (store, keys) = $cluster.store(StoreOptions::default());
        println!("fdb conformance: {}", stringify!($name));
        conformance::$name(&store).await;
        $cluster.clear(&keys).await;
    )*};
}

#[test]
fn store_conformance_on_foundationdb() {
    let Ok(cluster_file) = std::env::var("FDB_CLUSTER_FILE") else {
        println!("fdb_conformance skipped: FDB_CLUSTER_FILE is not set, so no FoundationDB cluster is available");
        return;
    };
    // SAFETY: started once in this test process; the guard outlives every use below.
    #[allow(unsafe_code)]
    let _network = unsafe { foundationdb::boot() };
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build().unwrap();
    runtime.block_on(async {
        let clock: Arc<dyn Clock> = Arc::new(SystemClock::new());
        let kv = FdbKv::open(Some(&cluster_file), clock).expect("open the cluster");
        let cluster = Cluster { kv, entropy: std::sync::Mutex::new(Entropy::from_os()) };
        for_each_scenario!(on_fdb, cluster);
        on_fdb!(cluster, concurrent_pollers_take_each_fire_exactly_once);
        let (store, keys) = cluster.store(StoreOptions { max_runs: Some(3), ..StoreOptions::default() });
        conformance::history_cap_evicts_finished_runs_and_refuses_when_all_run(&store).await;
        cluster.clear(&keys).await;
    });
}
