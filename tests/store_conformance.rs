//! Goal: every `KvJobStore` operation does what SPEC §7–10 says on `MemoryKv`, alone, under
//! races between nodes, and under injected store faults.
//!
//! Method: the scenarios live in `conformance/` and are generic over the `Kv` (the FDB
//! conformance binary runs the same ones). Here each runs on a fresh `MemoryKv` whose
//! latency uses tokio's paused clock, so concurrent pollers really interleave inside their
//! transactions; the race and recovery scenarios run again with conflicts and ambiguous
//! commits injected in both directions.

use sundial_test_support::conformance;
use sundial_test_support::{for_each_retry_safe_scenario, for_each_scenario};

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use futures_util::future::BoxFuture;
use sundial::calendar::Calendars;
use sundial::entropy::Entropy;
use sundial::job::{JsonObject, TriggerState};
use sundial::kv::memory::{KvFaults, MemoryKv, MemoryKvOptions};
use sundial::kv::RetryOptions;
use sundial::store::{DueFilter, KvJobStore, RunOutcome, StoreOptions};
use sundial::time::ManualClock;
use sundial::time::Sleeper;

/// Latency on tokio's clock, so operations yield and interleave.
#[derive(Debug)]
struct TokioSleeper;

impl Sleeper for TokioSleeper {
    fn sleep(&self, duration: Duration) -> BoxFuture<'static, ()> {
        Box::pin(tokio::time::sleep(duration))
    }
}

fn store_with(faults: KvFaults, options: StoreOptions, seed: u64) -> (KvJobStore<MemoryKv>, MemoryKv) {
    let clock = ManualClock::new(conformance::t0());
    let kv = MemoryKv::with_options(
        Arc::new(clock),
        Arc::new(TokioSleeper),
        MemoryKvOptions { seed, faults, ..MemoryKvOptions::default() },
    );
    let store = KvJobStore::new(kv.clone(), Arc::new(Calendars::new()), Entropy::from_seed(seed), options);
    (store, kv)
}

fn store() -> KvJobStore<MemoryKv> {
    store_with(KvFaults::default(), StoreOptions::default(), 1).0
}

/// Faults that make some commits conflict or end ambiguously, both ways.
fn faulty() -> KvFaults {
    KvFaults {
        latency_max: Duration::from_millis(2),
        spurious_conflict: 0.05,
        unknown_result_committed: 0.1,
        unknown_result_not_committed: 0.1,
        ..KvFaults::default()
    }
}

fn patient() -> StoreOptions {
    StoreOptions { retry: RetryOptions { retry_limit: 100, ..RetryOptions::default() }, ..StoreOptions::default() }
}

macro_rules! scenarios {
    ($($name:ident),* $(,)?) => {$(
        #[tokio::test(start_paused = true)]
        async fn $name() {
            conformance::$name(&store()).await;
        }
    )*};
}

for_each_scenario!(scenarios);

#[tokio::test(start_paused = true)]
async fn history_cap_evicts_finished_runs_and_refuses_when_all_run() {
    let (store, _) = store_with(KvFaults::default(), StoreOptions { max_runs: Some(3), ..StoreOptions::default() }, 3);
    conformance::history_cap_evicts_finished_runs_and_refuses_when_all_run(&store).await;
}

#[tokio::test(start_paused = true)]
async fn concurrent_pollers_take_each_fire_exactly_once() {
    let faults = KvFaults { latency_max: Duration::from_millis(2), ..KvFaults::default() };
    let (store, kv) = store_with(faults, patient(), 11);
    conformance::concurrent_pollers_take_each_fire_exactly_once(&store).await;
    assert!(kv.stats().conflicts > 0, "the pollers really raced: {:?}", kv.stats());
}

#[tokio::test(start_paused = true)]
async fn concurrent_pollers_take_each_fire_exactly_once_under_faults() {
    for seed in [12, 13, 14] {
        let (store, kv) = store_with(faulty(), patient(), seed);
        conformance::concurrent_pollers_take_each_fire_exactly_once(&store).await;
        let stats = kv.stats();
        assert!(stats.unknown_committed > 0 && stats.unknown_not_committed > 0, "seed {seed}: faults hit: {stats:?}");
    }
}

#[tokio::test(start_paused = true)]
async fn lost_nodes_are_recovered_exactly_once_under_ambiguous_commits() {
    for seed in [21, 22, 23] {
        let faults =
            KvFaults { unknown_result_committed: 0.3, unknown_result_not_committed: 0.3, ..KvFaults::default() };
        let (store, kv) = store_with(faults, patient(), seed);
        conformance::lost_nodes_are_reaped_and_their_runs_recovered_exactly_once(&store).await;
        assert!(kv.stats().unknown_committed > 0, "seed {seed}");
    }
}

/// Every scenario whose checks hold whatever a step retried after an ambiguous commit
/// returns (see `for_each_retry_safe_scenario`), again with each commit possibly
/// applied-but-reported-unknown or not applied (a quarter each), on several seeds: every
/// operation must stay idempotent, and say what it did.
macro_rules! under_ambiguous_commits {
    ($($name:ident),* $(,)?) => {
        mod under_ambiguous_commits {
            use super::*;
            $(
                #[tokio::test(start_paused = true)]
                async fn $name() {
                    let faults = KvFaults {
                        unknown_result_committed: 0.25,
                        unknown_result_not_committed: 0.25,
                        ..KvFaults::default()
                    };
                    for seed in 31..39 {
                        conformance::$name(&store_with(faults.clone(), patient(), seed).0).await;
                    }
                }
            )*
        }
    };
}

for_each_retry_safe_scenario!(under_ambiguous_commits);

#[tokio::test(start_paused = true)]
#[allow(clippy::disallowed_methods)] // Measures the paused clock's time.
async fn a_batch_reads_its_fires_and_its_runs_together_under_latency() {
    // Every store operation waits up to 10 ms. Read one by one, 100 fires' triggers,
    // jobs, slots and run guards would take about two seconds, and 50 runs' records and
    // jobs half a second; read together, a few round trips each.
    let faults = KvFaults { latency_max: Duration::from_millis(10), ..KvFaults::default() };
    let (store, _) = store_with(faults, patient(), 41);
    let defs: Vec<_> = (0..100)
        .map(|i| {
            let mut def = conformance::job(&format!("j{i}"), &[("t", "cron * * * * * *")]);
            def.allow_concurrent = i % 2 == 1;
            def
        })
        .collect();
    assert!(store.schedule(&defs, conformance::t0()).await.iter().all(Result::is_ok));
    let now = conformance::secs(1);
    let known = BTreeSet::new();
    let began = tokio::time::Instant::now();
    let runs = store.acquire_due(&conformance::request("node-0", now, 100, &known)).await.unwrap();
    let acquiring = began.elapsed();
    assert_eq!(runs.len(), 100);
    assert!(acquiring < Duration::from_millis(150), "acquiring 100 fires took {acquiring:?}");
    let completion = |run: &sundial::store::AcquiredRun| sundial::store::Completion {
        run_id: run.run.id,
        node: "node-0".into(),
        outcome: sundial::store::RunOutcome::Succeeded,
        finished_at: now,
        holds_trigger: run.holds_trigger,
    };
    // Runs of concurrent jobs; a non-concurrent job's run also reads its blocked
    // triggers when it frees its slot, one read per run.
    let (exclusive, concurrent): (Vec<_>, Vec<_>) = runs.iter().partition(|r| r.exclusive);
    let concurrent: Vec<_> = concurrent.into_iter().map(completion).collect();
    let began = tokio::time::Instant::now();
    assert!(store.complete_runs(&concurrent).await.iter().all(|r| r.as_ref().is_ok_and(|r| r.recorded)));
    let completing = began.elapsed();
    assert!(completing < Duration::from_millis(100), "completing 50 runs took {completing:?}");
    let exclusive: Vec<_> = exclusive.into_iter().map(completion).collect();
    let began = tokio::time::Instant::now();
    assert!(store.complete_runs(&exclusive).await.iter().all(|r| r.as_ref().is_ok_and(|r| r.recorded)));
    // Their slots are read together; their blocked triggers one job at a time (~5 ms each).
    let completing = began.elapsed();
    assert!(completing < Duration::from_millis(400), "completing 50 exclusive runs took {completing:?}");
}

#[tokio::test(start_paused = true)]
async fn an_acquisition_says_which_runs_hold_their_trigger() {
    let store = store();
    let defs = [
        conformance::job("tick", &[("cron", "cron * * * * * *")]),
        conformance::job("poll", &[("every", "every 00:00:01")]),
        conformance::job("adhoc", &[]),
    ];
    assert!(store.schedule(&defs, conformance::t0()).await.iter().all(Result::is_ok));
    let known = BTreeSet::new();
    let runs = store.acquire_due(&conformance::request("n1", conformance::secs(1), 10, &known)).await.unwrap();
    let holds: BTreeMap<&str, Option<bool>> = runs.iter().map(|r| (r.run.job.as_str(), r.holds_trigger)).collect();
    assert_eq!(holds, BTreeMap::from([("poll", Some(true)), ("tick", Some(false))]));
    let manual = store
        .begin_manual_run(
            &conformance::name("adhoc"),
            &JsonObject::new(),
            "n1",
            uuid::Uuid::from_u128(9),
            conformance::secs(1),
        )
        .await
        .unwrap();
    assert_eq!(manual.holds_trigger, Some(false), "a run by hand has no trigger");
}

#[tokio::test(start_paused = true)]
async fn runs_an_acquisition_took_before_it_failed_are_adopted_not_lost() {
    use sundial::kv::{AsKvError, KvError};
    // Every commit applies and reports 1021, and no retry is allowed: the acquisition
    // reports failure although it took the fires.
    let once =
        StoreOptions { retry: RetryOptions { retry_limit: 0, ..RetryOptions::default() }, ..StoreOptions::default() };
    let (store, kv) = store_with(KvFaults::default(), once, 43);
    let defs: Vec<_> = (0..3).map(|i| conformance::job(&format!("j{i}"), &[("t", "cron * * * * * *")])).collect();
    assert!(store.schedule(&defs, conformance::t0()).await.iter().all(Result::is_ok));
    kv.set_faults(KvFaults { unknown_result_committed: 1.0, ..KvFaults::default() });
    let now = conformance::secs(1);
    let none = BTreeSet::new();
    let error = store.acquire_due(&conformance::request("node-0", now, 10, &none)).await.unwrap_err();
    assert_eq!(error.as_kv_error().map(KvError::code), Some(KvError::COMMIT_UNKNOWN_RESULT));
    kv.set_faults(KvFaults::default());

    // Only the failed attempt's runs: an acquisition at another time took none of them.
    let later = conformance::secs(2);
    assert!(store.adopt_committed_runs("node-0", &none, &[later]).await.unwrap().is_empty());
    let adopted = store.adopt_committed_runs("node-0", &none, &[later, now]).await.unwrap();
    assert_eq!(adopted.len(), 3, "{adopted:?}");
    for run in &adopted {
        assert_eq!((run.run.scheduled_at, run.run.attempt, run.job_type.as_str()), (now, 1, "test::Job"));
        assert_eq!(run.holds_trigger, None, "whether it holds its trigger is not known to an adopted run");
    }
    let known: BTreeSet<_> = adopted.iter().map(|r| r.run.id).collect();
    // Adopted, not taken again, and not reclaimed as lost.
    assert!(store.adopt_committed_runs("node-0", &known, &[now]).await.unwrap().is_empty());
    assert!(store.acquire_due(&conformance::request("node-0", now, 10, &known)).await.unwrap().is_empty());
    let reclaimed = store.reclaim_previous_runs("node-0", &known, now, 64).await.unwrap();
    assert!(reclaimed.lost_runs.is_empty(), "{reclaimed:?}");
    assert_eq!(store.adopt_committed_runs("node-0", &known, &[]).await.unwrap(), Vec::new());
}

#[tokio::test(start_paused = true)]
async fn a_node_without_a_triggers_calendar_puts_it_in_error_rather_than_ignore_the_calendar() {
    // Calendars are registered per node: during a rolling change one node may lack a
    // calendar another used to schedule a trigger. Its next fires would skip nothing.
    use sundial::calendar::WeeklyCalendar;
    use sundial::name::CalendarName;
    let clock = ManualClock::new(conformance::t0());
    let kv = MemoryKv::with_options(Arc::new(clock), Arc::new(TokioSleeper), MemoryKvOptions::default());
    let mut calendars = Calendars::new();
    let weekends = CalendarName::new("weekends").unwrap();
    calendars.insert(weekends, Arc::new(WeeklyCalendar::new(&[], chrono_tz::Tz::UTC)));
    let with = KvJobStore::new(kv.clone(), Arc::new(calendars), Entropy::from_seed(1), StoreOptions::default());
    let without = KvJobStore::new(kv, Arc::new(Calendars::new()), Entropy::from_seed(2), StoreOptions::default());
    let cron = conformance::job("weekdays", &[("t", "cron 0 0 * * * * calendar=weekends")]);
    let every = conformance::job("ticks", &[("t", "every 00:00:10 calendar=weekends")]);
    assert!(with.schedule(&[cron, every], conformance::t0()).await.iter().all(Result::is_ok));
    // 2027-01-15 is a Friday. A node without the calendar takes neither trigger's fire.
    assert!(conformance::acquire(&without, "old", conformance::secs(3600), 16).await.is_empty());
    let weekdays = with.trigger_record("weekdays", "t").await.unwrap().unwrap();
    assert_eq!(weekdays.state, TriggerState::Error);
    assert_eq!(weekdays.error.as_deref(), Some("calendar 'weekends' is not registered on node 'old'"));
    // An interval run taken with the calendar and completed without it (its node restarted
    // with another config): the next fire is not computed either.
    let every = conformance::job("ticks2", &[("t", "every 00:00:10 calendar=weekends")]);
    assert!(with.schedule(&[every], conformance::secs(3600)).await.iter().all(Result::is_ok));
    let runs = conformance::acquire(&with, "n1", conformance::secs(3610), 16).await;
    assert_eq!(runs.len(), 1);
    conformance::complete(&without, runs[0].run.id, "n1", RunOutcome::Succeeded, conformance::secs(3611)).await;
    let ticks = with.trigger_record("ticks2", "t").await.unwrap().unwrap();
    assert_eq!(ticks.state, TriggerState::Error, "{ticks:?}");
    assert_eq!(ticks.error.as_deref(), Some("calendar 'weekends' is not registered on node 'n1'"));
    assert!(conformance::acquire(&with, "n1", conformance::secs(7200), 16).await.is_empty(), "nothing left to run");
}

/// A store where `nodes` have heartbeated (at the scenarios' epoch).
async fn store_of_nodes(nodes: &[&str]) -> KvJobStore<MemoryKv> {
    let store = store();
    for node in nodes {
        store.heartbeat(node, conformance::t0(), None, false).await.unwrap();
    }
    store
}

#[tokio::test(start_paused = true)]
async fn new_due_work_bumps_the_wake_key_of_its_home_node_only() {
    use futures_util::FutureExt;
    let store = store_of_nodes(&["a", "b"]).await;
    let t0 = conformance::t0();
    let mut on_demand = conformance::job("on-demand", &[]);
    on_demand.allow_concurrent = true;
    store.schedule(&[on_demand], t0).await;
    // A store learns the live nodes from its acquisitions.
    assert!(conformance::acquire(&store, "a", t0, 16).await.is_empty());
    let mut wake_a = store.watch_wake("a").await.unwrap();
    let mut wake_b = store.watch_wake("b").await.unwrap();
    assert!(wake_b.as_mut().now_or_never().is_none(), "armed, nothing new yet");
    let pairs: Vec<_> = (0..32).map(|_| (conformance::name("on-demand"), Default::default())).collect();
    for result in store.enqueue(&pairs, t0).await {
        result.unwrap();
    }
    assert!(matches!(wake_b.now_or_never(), Some(Ok(()))), "32 one-shot fires: some are in b's shards");
    assert!(wake_a.as_mut().now_or_never().is_none(), "this store's own node is woken by its handle");
    // Taking fires (advancing, completing) tells nobody: only new due work does.
    let mut wake_b = store.watch_wake("b").await.unwrap();
    let taken = conformance::acquire(&store, "b", t0, 64).await;
    assert!(!taken.is_empty(), "b takes the fires of its shards");
    assert!(wake_b.as_mut().now_or_never().is_none());
}

/// Nodes a and b, and a concurrent job whose 16 triggers fire every second.
async fn ticking_on_two_nodes() -> KvJobStore<MemoryKv> {
    let store = store_of_nodes(&["a", "b"]).await;
    let triggers: Vec<(String, &str)> = (0..16).map(|i| (format!("t{i}"), "cron * * * * * *")).collect();
    let triggers: Vec<(&str, &str)> = triggers.iter().map(|(name, cron)| (name.as_str(), *cron)).collect();
    let mut ticking = conformance::job("ticking", &triggers);
    ticking.allow_concurrent = true;
    store.schedule(&[ticking], conformance::t0()).await;
    store
}

#[tokio::test(start_paused = true)]
async fn a_fire_stolen_from_a_shard_wakes_its_home_node_for_the_next_one() {
    use futures_util::FutureExt;
    let store = ticking_on_two_nodes().await;
    let mut wake_a = store.watch_wake("a").await.unwrap();
    // On time, b takes the fires of its own shards only: a hears nothing.
    let known = BTreeSet::new();
    let mut request = conformance::request("b", conformance::secs(1), 64, &known);
    let on_time = store.acquire_with_outlook(&request, Duration::from_secs(1), 100).await.unwrap();
    assert!(!on_time.runs.is_empty() && on_time.stolen == 0, "{on_time:?}");
    assert!(wake_a.as_mut().now_or_never().is_none(), "b's own fires moved on");
    // Seconds later a's fires are late enough to steal; the next fire of each trigger b
    // took is in a's shard again, and a must hear of it (it may skip reading its shards).
    request.now = conformance::secs(5);
    let late = store.acquire_with_outlook(&request, Duration::from_secs(1), 100).await.unwrap();
    assert!(late.stolen > 0, "{late:?}");
    assert!(matches!(wake_a.now_or_never(), Some(Ok(()))), "a's shards have new due entries");
}

#[tokio::test(start_paused = true)]
async fn the_due_count_is_exact_up_to_any_limit() {
    // 300 fires over the 64 shards, unevenly: each shard's share of a limit is read
    // together, then the shards that held more are read on while under it.
    let store = store();
    let due = conformance::secs(10);
    let once = format!("once {}", sundial::schedule::format_instant(due));
    let jobs: Vec<_> = (0..3)
        .map(|j| {
            let names: Vec<String> = (0..100).map(|i| format!("t{i}")).collect();
            let triggers: Vec<(&str, &str)> = names.iter().map(|n| (n.as_str(), once.as_str())).collect();
            let mut def = conformance::job(&format!("many-{j}"), &triggers);
            def.allow_concurrent = true;
            def
        })
        .collect();
    let scheduled = store.schedule(&jobs, conformance::t0()).await;
    assert!(scheduled.iter().all(Result::is_ok), "{scheduled:?}");
    let day = Duration::from_secs(86_400);
    for limit in (1..=320).step_by(7).chain([299, 300, 301]) {
        let outlook = store.due_outlook("a", DueFilter::EVERY, day, limit).await.unwrap();
        assert_eq!((outlook.first, outlook.count), (Some(due), limit.min(300)), "limit {limit}");
    }
}

#[tokio::test(start_paused = true)]
async fn a_node_whose_recent_heartbeat_says_it_caught_up_is_not_stolen_from() {
    let store = ticking_on_two_nodes().await;
    let t0 = conformance::t0();
    let known = BTreeSet::new();
    let millis = |ms: i64| t0 + chrono::TimeDelta::milliseconds(ms);
    let steal_at = |now| {
        let store = &store;
        let known = &known;
        async move {
            let request = conformance::request("b", now, 64, known);
            store.acquire_with_outlook(&request, Duration::from_secs(1), 100).await.unwrap()
        }
    };
    // a never took its fires, but says it caught up, 0.5 s ago by b's clock: b believes it
    // (a's shards are not even read) and takes only its own fires.
    store.heartbeat("a", millis(4_500), Some(0), true).await.unwrap();
    let believed = steal_at(millis(5_000)).await;
    assert!(!believed.runs.is_empty(), "b's own fires: {believed:?}");
    assert_eq!(believed.stolen, 0, "{believed:?}");
    // Unless b is told not to believe it.
    let mut doubting = conformance::request("b", millis(5_100), 64, &known);
    doubting.trust_caught_up = false;
    let doubted = store.acquire_with_outlook(&doubting, Duration::from_secs(1), 100).await.unwrap();
    assert!(doubted.stolen > 0, "{doubted:?}");
    // 1.5 s after that heartbeat (more than the grace of 1 s) a may be dead: b steals.
    let stale = steal_at(millis(6_000)).await;
    assert!(stale.stolen > 0, "{stale:?}");
    // A fresh heartbeat that does not say so: b steals.
    store.heartbeat("a", millis(8_000), Some(0), false).await.unwrap();
    assert!(steal_at(millis(8_500)).await.stolen > 0);
    // One that says so from a clock 20 s ahead of b's: not believed.
    store.heartbeat("a", millis(30_000), Some(0), true).await.unwrap();
    assert!(steal_at(millis(10_000)).await.stolen > 0);
    // Believed again once the clocks agree; and only when stealing: a has no say over b's
    // own shards, whose fires b took throughout.
    store.heartbeat("a", millis(12_000), Some(0), true).await.unwrap();
    let again = steal_at(millis(12_500)).await;
    assert!(!again.runs.is_empty() && again.stolen == 0, "{again:?}");
}

#[tokio::test(start_paused = true)]
async fn a_node_leaving_or_joining_the_shard_owners_wakes_the_others() {
    use futures_util::FutureExt;
    let store = store();
    let t0 = conformance::t0();
    let mut seqs = BTreeMap::new();
    for node in ["a", "b", "c", "d"] {
        seqs.insert(node, store.heartbeat(node, t0, None, false).await.unwrap().seq);
    }
    // Declared lost: every live node's shards may grow.
    let wake_a = store.watch_wake("a").await.unwrap();
    let wake_b = store.watch_wake("b").await.unwrap();
    assert!(store.reap_node("d", seqs["d"], conformance::secs(60), 64, None).await.unwrap().declared);
    assert!(matches!(wake_a.now_or_never(), Some(Ok(()))));
    assert!(matches!(wake_b.now_or_never(), Some(Ok(()))));
    // Draining: the others share out its shards at once.
    let wake_a = store.watch_wake("a").await.unwrap();
    let wake_c = store.watch_wake("c").await.unwrap();
    store.mark_draining("b").await.unwrap();
    assert!(matches!(wake_a.now_or_never(), Some(Ok(()))));
    assert!(matches!(wake_c.now_or_never(), Some(Ok(()))));
    // Stopping after draining changes nothing more; stopping while serving does.
    let mut wake_a = store.watch_wake("a").await.unwrap();
    store.deregister_node("b").await.unwrap();
    assert!(wake_a.as_mut().now_or_never().is_none(), "b had left the owners already");
    store.deregister_node("c").await.unwrap();
    assert!(matches!(wake_a.now_or_never(), Some(Ok(()))));
    // A node joining takes shards from the others: woken, each learns the new node list
    // at once (the one it tells the other nodes of new due work by). Its later heartbeats,
    // and the others', wake no one.
    let wake_a = store.watch_wake("a").await.unwrap();
    let e_joined = store.heartbeat("e", t0, None, false).await.unwrap();
    assert!(matches!(wake_a.now_or_never(), Some(Ok(()))));
    let mut wake_a = store.watch_wake("a").await.unwrap();
    let mut wake_e = store.watch_wake("e").await.unwrap();
    store.heartbeat("e", conformance::secs(1), Some(e_joined.times_declared_lost), false).await.unwrap();
    store.heartbeat("a", conformance::secs(1), None, false).await.unwrap();
    assert!(wake_a.as_mut().now_or_never().is_none(), "an ordinary heartbeat");
    assert!(wake_e.as_mut().now_or_never().is_none(), "an ordinary heartbeat");
}

#[tokio::test(start_paused = true)]
async fn a_run_started_while_its_node_is_reaped_never_outlives_the_record() {
    // An acquisition by a node and the step that declares it lost and deletes its record,
    // interleaved inside their transactions: whichever commits second must see the other
    // (the acquisition then takes nothing; the reap marks the new run lost). A run left
    // `Running` on a node with no record would never be reaped.
    let mut seen_by_the_reap = 0;
    for seed in 0..40 {
        let faults = KvFaults { latency_max: Duration::from_millis(3), ..KvFaults::default() };
        let (store, _) = store_with(faults, patient(), 500 + seed);
        let mut racing = conformance::job("racing", &[("t", "cron * * * * * *")]);
        racing.allow_concurrent = true;
        store.schedule(&[racing], conformance::t0()).await;
        let beat = store.heartbeat("x", conformance::t0(), None, false).await.unwrap();
        // Acquiring at once (knowing no runs: the node has none), not after a history read.
        let known = BTreeSet::new();
        let request = conformance::request("x", conformance::secs(1), 16, &known);
        let acquisition = store.acquire_due(&request);
        let (taken, reaped) = tokio::join!(async { acquisition.await.unwrap() }, async {
            // Starting at various points of the acquisition's transaction.
            tokio::time::sleep(Duration::from_micros(seed * 250)).await;
            store.reap_node("x", beat.seq, conformance::secs(1), 100, None).await
        },);
        assert!(reaped.unwrap().declared);
        assert!(store.nodes().await.unwrap().iter().all(|n| n.node != "x"), "seed {seed}: record deleted");
        for run in &taken {
            let state = store.run_record(run.run.id).await.unwrap().unwrap().state;
            assert_eq!(state, sundial::job::RunState::Lost, "seed {seed}: the reap saw the run");
            seen_by_the_reap += 1;
        }
    }
    assert!(seen_by_the_reap > 0, "the acquisition committed first in some seeds");
}

#[tokio::test(start_paused = true)]
async fn recovery_runs_of_a_reap_retried_after_ambiguous_commits_have_distinct_ids() {
    // Every commit applied but reported unknown: each retry of a one-run reaping step
    // finds the run before it gone from the node and reaps the next one. Each lost run's
    // recovery trigger must still be an incarnation of its own: recovery runs are due at
    // the reaping `now`, so triggers sharing a uid would give their runs one id.
    let (store, kv) = store_with(KvFaults::default(), patient(), 31);
    let every_second = "cron * * * * * *";
    let mut recovering = conformance::job("recover", &[("a", every_second), ("b", every_second), ("c", every_second)]);
    recovering.requests_recovery = true;
    recovering.allow_concurrent = true;
    store.schedule(&[recovering], conformance::t0()).await;
    let beat = store.heartbeat("dying", conformance::secs(0), None, false).await.unwrap();
    let runs = conformance::acquire(&store, "dying", conformance::secs(1), 16).await;
    assert_eq!(runs.len(), 3);
    kv.set_faults(KvFaults { unknown_result_committed: 1.0, ..KvFaults::default() });
    let lost_at = conformance::secs(100);
    // Gives up (every attempt "unknown"), having reaped one run per attempt.
    let _ = store.reap_node("dying", beat.seq, lost_at, 1, None).await;
    kv.set_faults(KvFaults::default());
    while store.reap_node("dying", beat.seq, lost_at, 1, None).await.unwrap().more {}
    for run in &runs {
        assert_eq!(store.run_record(run.run.id).await.unwrap().unwrap().state, sundial::job::RunState::Lost);
    }
    let recovered: Vec<_> = conformance::acquire(&store, "healthy", conformance::secs(101), 64)
        .await
        .into_iter()
        .filter(|r| r.run.cause == sundial::job::RunCause::Recovery)
        .collect();
    let ids: std::collections::BTreeSet<_> = recovered.iter().map(|r| r.run.id).collect();
    assert_eq!((recovered.len(), ids.len()), (3, 3), "one recovery run per lost run, each its own id");
    assert!(kv.stats().unknown_committed >= 2, "the reap's attempts were ambiguous: {:?}", kv.stats());
}
