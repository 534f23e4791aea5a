//! Goal: the store behaves on a real FoundationDB cluster as on `MemoryKv`: each due fire
//! is acquired exactly once by concurrent pollers, and runs complete.
//!
//! Method: runs only with feature `fdb` and `FDB_CLUSTER_FILE` set (libfdb_c cannot be
//! installed on the development machines; CI compile-checks this file). Without a cluster
//! it prints that it skipped. Each run uses a fresh random keyspace and clears it after.
#![cfg(feature = "fdb")]

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use sundial::calendar::Calendars;
use sundial::entropy::Entropy;
use sundial::job::{JobDefinition, JobTriggerDefinition, JobTypeKey};
use sundial::kv::{run, KvTransaction, RetryOptions};
use sundial::name::{JobName, TriggerName};
use sundial::store::keys::Keyspace;
use sundial::store::{AcquireRequest, Completion, KvJobStore, RunOutcome, StoreOptions};
use sundial::time::{Clock, SystemClock};
use sundial_actors::fdb::{foundationdb, FdbKv};

#[test]
fn store_conformance_on_foundationdb() {
    let Ok(cluster_file) = std::env::var("FDB_CLUSTER_FILE") else {
        println!("fdb_conformance skipped: FDB_CLUSTER_FILE is not set, so no FoundationDB cluster is available");
        return;
    };
    // SAFETY: started once in this test process; the guard outlives every use below.
    #[allow(unsafe_code)]
    let _network = unsafe { foundationdb::boot() };
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    runtime.block_on(async {
        let clock: Arc<dyn Clock> = Arc::new(SystemClock::new());
        let kv = FdbKv::open(Some(&cluster_file), clock.clone()).expect("open the cluster");
        let mut entropy = Entropy::from_os();
        let keys = Keyspace::new(format!("sundial-conformance-{}", entropy.alphanumeric(12)).into_bytes());
        let store = KvJobStore::with_keyspace(
            kv.clone(),
            keys.clone(),
            Arc::new(Calendars::new()),
            entropy.fork(),
            StoreOptions::default(),
        );
        let now = clock.now();
        let mut defs = Vec::new();
        for i in 0..50 {
            let mut def =
                JobDefinition::new(JobName::new(format!("j{i}")).unwrap(), JobTypeKey::new("fdb::Test").unwrap());
            def.allow_concurrent = true;
            def.triggers
                .push(JobTriggerDefinition::new(TriggerName::new("t").unwrap(), "every 00:00:01".parse().unwrap()));
            defs.push(def);
        }
        assert!(store.schedule(&defs, now).await.iter().all(Result::is_ok));
        let due = sundial::time::add_duration(now, Duration::from_secs(2));
        let mut tasks = Vec::new();
        for p in 0..4 {
            let store = store.clone();
            tasks.push(tokio::spawn(async move {
                let node = format!("poller-{p}");
                let known = BTreeSet::new();
                let request = AcquireRequest {
                    node: &node,
                    now: due,
                    max: 64,
                    misfire_threshold: Duration::from_secs(60),
                    steal_grace: Duration::ZERO,
                    known_types: None,
                    known_runs: &known,
                };
                let runs = store.acquire_due(&request).await.unwrap();
                for run in &runs {
                    let completion = Completion {
                        run_id: run.run.id,
                        node: node.clone(),
                        outcome: RunOutcome::Succeeded,
                        finished_at: due,
                    };
                    store.complete_run(&completion).await.unwrap();
                }
                runs.into_iter().map(|r| r.run.job.to_string()).collect::<Vec<_>>()
            }));
        }
        let mut jobs = Vec::new();
        for task in tasks {
            jobs.extend(task.await.unwrap());
        }
        let unique: BTreeSet<_> = jobs.iter().cloned().collect();
        assert_eq!(jobs.len(), 50, "every fire once");
        assert_eq!(unique.len(), 50, "no fire twice");
        let (begin, end) = keys.all();
        run(&kv, RetryOptions::default(), |txn, _| {
            let (begin, end) = (begin.clone(), end.clone());
            async move {
                txn.clear_range(&begin, &end);
                Ok::<_, sundial::kv::KvError>(())
            }
        })
        .await
        .unwrap();
    });
}
