//! Goal: several nodes sharing one store behave as one scheduler: each fire runs exactly
//! once, and a node cut off from the store is declared lost by the leader, its run marked
//! `Lost` and recovered once elsewhere.
//!
//! Method: two nodes on one `MemoryKv` (shared mode: heartbeats, Kv-backed leader
//! election), tokio's paused clock; a partition of one node's store client stands in for a
//! crash.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use sundial::entropy::Entropy;
use sundial::job::{JobDefinition, JobRunQuery, JobTypeKey, RunCause, RunState};
use sundial::kv::memory::{MemoryKv, MemoryKvOptions};
use sundial::leader::KvLeaderElection;
use sundial::name::JobName;
use sundial::options::SchedulerOptions;
use sundial::store::keys::Keyspace;
use sundial::store::{KvJobStore, StoreOptions};
use sundial_actors::clock::{TokioClock, TokioSleeper};
use sundial_actors::job::{FnJob, RunContext};
use sundial_actors::node::{Node, NodeConfig};
use sundial_actors::registry::JobRegistry;
use sundial_actors::scheduler::JobScheduler;

type Store = KvJobStore<MemoryKv>;

fn t0() -> DateTime<Utc> {
    DateTime::from_timestamp_micros(1_800_000_000_500_000).unwrap()
}

fn registry() -> JobRegistry {
    let mut local = JobDefinition::new(JobName::new("local-tick").unwrap(), JobTypeKey::new("noop").unwrap())
        .with_trigger(sundial::job::JobTriggerDefinition::new(
            sundial::name::TriggerName::new("t").unwrap(),
            "cron * * * * * *".parse().unwrap(),
        ));
    local.run_on_every_instance = true;
    JobRegistry::builder()
        .add_job("every-second", "cron * * * * * *".parse().unwrap(), || FnJob::new(|_| async { Ok(()) }))
        .add_job_type_as("noop", || FnJob::new(|_| async { Ok(()) }))
        .add_job_definition(local)
        .add_job_type_as("long", ten_minutes_unless_canceled)
        .build()
        .unwrap()
}

/// A job of type `job_type` named `name` with one trigger `t` on `cron` (any schedule text).
fn cron_job(name: &str, job_type: &str, cron: &str) -> JobDefinition {
    JobDefinition::new(JobName::new(name).unwrap(), JobTypeKey::new(job_type).unwrap()).with_trigger(
        sundial::job::JobTriggerDefinition::new(sundial::name::TriggerName::new("t").unwrap(), cron.parse().unwrap()),
    )
}

/// The runs of the first `count` jobs of [`concurrent_ticks`] scheduled in `[from, to)`.
async fn tick_runs(
    store: &Store,
    count: usize,
    from: DateTime<Utc>,
    to: DateTime<Utc>,
) -> Vec<sundial::job::JobRunInfo> {
    let mut runs = Vec::new();
    for i in 0..count {
        let job = Some(JobName::new(format!("tick-{i:02}")).unwrap());
        let query = JobRunQuery { job, limit: 1000, ..JobRunQuery::default() };
        let all = store.runs(&query).await.unwrap();
        runs.extend(all.into_iter().filter(|run| (from..to).contains(&run.run.scheduled_at)));
    }
    runs
}

/// `count` concurrent jobs `tick-00`, `tick-01`… firing every second.
fn concurrent_ticks(count: usize) -> Vec<JobDefinition> {
    (0..count)
        .map(|i| {
            let mut def = cron_job(&format!("tick-{i:02}"), "noop", "cron * * * * * *");
            def.allow_concurrent = true;
            def
        })
        .collect()
}

/// A job that runs ten minutes, or until its run is canceled.
fn ten_minutes_unless_canceled() -> impl sundial_actors::job::Job {
    FnJob::new(|ctx: RunContext| async move {
        tokio::select! {
            () = ctx.cancel.cancelled() => Ok(()),
            () = tokio::time::sleep(Duration::from_secs(600)) => Ok(()),
        }
    })
}

async fn node(kv: &MemoryKv, clock: &Arc<TokioClock>, id: &str, seed: u64) -> (JobScheduler<MemoryKv>, Store) {
    node_with(kv, clock, id, seed, registry()).await
}

/// Fast cluster options: poll every 200 ms, lease 2 s, lost after 3 s.
fn fast_options() -> SchedulerOptions {
    SchedulerOptions {
        poll_interval: Duration::from_millis(200),
        lease_ttl: Duration::from_secs(2),
        node_timeout: Duration::from_secs(3),
        housekeeping_interval: Duration::from_secs(1),
        ..SchedulerOptions::default()
    }
}

async fn node_with(
    kv: &MemoryKv,
    clock: &Arc<TokioClock>,
    id: &str,
    seed: u64,
    registry: JobRegistry,
) -> (JobScheduler<MemoryKv>, Store) {
    node_with_options(kv, clock, id, seed, registry, fast_options()).await
}

async fn node_with_options(
    kv: &MemoryKv,
    clock: &Arc<TokioClock>,
    id: &str,
    seed: u64,
    registry: JobRegistry,
    options: SchedulerOptions,
) -> (JobScheduler<MemoryKv>, Store) {
    let client = kv.client(id);
    let store = KvJobStore::new(
        client.clone(),
        registry.calendars().clone(),
        Entropy::from_seed(seed),
        StoreOptions::default(),
    );
    let election =
        KvLeaderElection::new(client, Keyspace::default_root(), clock.clone(), id, Entropy::from_seed(seed + 100));
    let mut config =
        NodeConfig::new(store.clone(), registry, options, id, clock.clone(), Entropy::from_seed(seed + 200));
    config.shared_store = true;
    config.election = Some(Arc::new(election));
    config.name_prefix = "cluster-test".into();
    let scheduler = Node::start(config, None).await.unwrap();
    scheduler.serve();
    (scheduler, store)
}

#[tokio::test(start_paused = true)]
async fn two_nodes_run_each_fire_once_and_recover_a_lost_node() {
    let clock = Arc::new(TokioClock::new(t0()));
    let kv = MemoryKv::with_options(clock.clone(), Arc::new(TokioSleeper), MemoryKvOptions::default());
    let (a, _) = node(&kv, &clock, "node-a", 1).await;
    let (b, _) = node(&kv, &clock, "node-b", 2).await;
    // Queries go through a client of their own, unaffected by the partition below.
    let store = KvJobStore::new(
        kv.client("observer"),
        registry().calendars().clone(),
        Entropy::from_seed(9),
        StoreOptions::default(),
    );
    tokio::time::sleep(Duration::from_secs(10)).await;

    let every = JobRunQuery { job: Some(JobName::new("every-second").unwrap()), limit: 1000, ..JobRunQuery::default() };
    let runs = store.runs(&every).await.unwrap();
    assert!(runs.len() >= 9, "{} runs", runs.len());
    let mut per_second: BTreeMap<DateTime<Utc>, usize> = BTreeMap::new();
    for run in &runs {
        *per_second.entry(run.run.scheduled_at).or_default() += 1;
    }
    assert!(per_second.values().all(|n| *n == 1), "a fire ran twice: {per_second:?}");
    let nodes: std::collections::BTreeSet<_> = runs.iter().map(|r| r.node.clone()).collect();
    assert!(!nodes.is_empty());

    // A long recoverable run on one node; then that node is cut off from the store.
    let mut long = JobDefinition::new(JobName::new("long-work").unwrap(), JobTypeKey::new("long").unwrap());
    long.requests_recovery = true;
    a.schedule_one(long).await.unwrap();
    a.enqueue(vec![JobName::new("long-work").unwrap().into()]).await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    let query = JobRunQuery { job: Some(JobName::new("long-work").unwrap()), ..JobRunQuery::default() };
    let first = store.runs(&query).await.unwrap();
    assert_eq!(first.len(), 1);
    assert_eq!(first[0].state, RunState::Running);
    let victim = first[0].node.clone();
    kv.set_partitioned(&victim, true);
    // Lease expiry (2 s) + node timeout (3 s) + housekeeping ticks.
    tokio::time::sleep(Duration::from_secs(12)).await;
    let after = store.runs(&query).await.unwrap();
    let lost: Vec<_> = after.iter().filter(|r| r.run.id == first[0].run.id).collect();
    assert_eq!(lost[0].state, RunState::Lost, "{after:#?}");
    let recoveries: Vec<_> = after.iter().filter(|r| r.run.cause == RunCause::Recovery).collect();
    assert_eq!(recoveries.len(), 1, "recovered exactly once: {after:#?}");
    assert_ne!(recoveries[0].node, victim, "recovered elsewhere");
    assert_eq!(recoveries[0].state, RunState::Running);

    // Healed: the old node learns it was declared lost and stops its stale run.
    kv.set_partitioned(&victim, false);
    tokio::time::sleep(Duration::from_secs(3)).await;
    let healed = store.runs(&query).await.unwrap();
    assert_eq!(healed.iter().find(|r| r.run.id == first[0].run.id).unwrap().state, RunState::Lost, "history kept");
    assert_eq!(healed.iter().filter(|r| r.run.cause == RunCause::Recovery).count(), 1, "no second recovery");

    b.stop(Duration::from_secs(1)).await;
    a.stop(Duration::from_secs(1)).await;
}

#[tokio::test(start_paused = true)]
async fn local_jobs_run_on_every_node() {
    let clock = Arc::new(TokioClock::new(t0()));
    let kv = MemoryKv::with_options(clock.clone(), Arc::new(TokioSleeper), MemoryKvOptions::default());
    let (a, _) = node(&kv, &clock, "local-a", 11).await;
    let (b, _) = node(&kv, &clock, "local-b", 12).await;
    let store = KvJobStore::new(
        kv.client("observer"),
        registry().calendars().clone(),
        Entropy::from_seed(19),
        StoreOptions::default(),
    );
    tokio::time::sleep(Duration::from_secs(6)).await;
    let query = JobRunQuery { job: Some(JobName::new("local-tick").unwrap()), limit: 1000, ..JobRunQuery::default() };
    let runs = store.runs(&query).await.unwrap();
    let mut per_node: BTreeMap<String, usize> = BTreeMap::new();
    for run in &runs {
        *per_node.entry(run.node.clone()).or_default() += 1;
    }
    assert_eq!(per_node.len(), 2, "both nodes ran it: {per_node:?}");
    assert!(per_node.values().all(|n| *n >= 4), "about once a second on each: {per_node:?}");
    a.stop(Duration::from_secs(1)).await;
    b.stop(Duration::from_secs(1)).await;
}

#[tokio::test(start_paused = true)]
async fn a_local_fire_the_store_cannot_record_does_not_run() {
    // Every run goes to history (SPEC §7), and a switch of a non-concurrent job to
    // cluster-unique relies on seeing its local runs: a node cut off from the store skips
    // its local fires instead of running them unrecorded.
    let clock = Arc::new(TokioClock::new(t0()));
    let kv = MemoryKv::with_options(clock.clone(), Arc::new(TokioSleeper), MemoryKvOptions::default());
    let executions = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counted = executions.clone();
    let mut local = cron_job("local-count", "count", "cron * * * * * *");
    local.run_on_every_instance = true;
    let registry = JobRegistry::builder()
        .add_job_type_as("count", move || {
            let counted = counted.clone();
            FnJob::new(move |_| {
                counted.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                async { Ok(()) }
            })
        })
        .add_job_definition(local)
        .build()
        .unwrap();
    let (node, store) = node_with(&kv, &clock, "cut-off", 31, registry).await;
    tokio::time::sleep(Duration::from_millis(2_600)).await;
    // Cut off for less than the self-fence (two thirds of `node_timeout`): the node goes
    // on, its fires due meanwhile find no store.
    kv.set_partitioned("cut-off", true);
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    kv.set_partitioned("cut-off", false);
    tokio::time::sleep(Duration::from_secs(3)).await;
    node.stop(Duration::from_secs(1)).await;
    let query = JobRunQuery { job: Some(JobName::new("local-count").unwrap()), limit: 1000, ..JobRunQuery::default() };
    let recorded = store.runs(&query).await.unwrap();
    let ran = executions.load(std::sync::atomic::Ordering::SeqCst);
    assert!(recorded.len() >= 4, "it ran before and after: {} runs", recorded.len());
    assert_eq!(ran, recorded.len(), "every run that ran is in history");
    assert!(recorded.iter().all(|r| r.state == RunState::Succeeded), "{recorded:#?}");
}

#[tokio::test(start_paused = true)]
async fn a_draining_node_releases_the_lease_at_once() {
    let clock = Arc::new(TokioClock::new(t0()));
    let kv = MemoryKv::with_options(clock.clone(), Arc::new(TokioSleeper), MemoryKvOptions::default());
    let (a, _) = node(&kv, &clock, "lease-a", 21).await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    let (b, _) = node(&kv, &clock, "lease-b", 22).await;
    let election = KvLeaderElection::new(
        kv.client("probe"),
        Keyspace::default_root(),
        clock.clone(),
        "probe",
        Entropy::from_seed(5),
    );
    let resource = sundial::name::ResourceName::new("scheduling.jobs").unwrap();
    use sundial::leader::LeaderElection;
    assert!(election.try_acquire(&resource, Duration::from_secs(2)).await.is_err(), "a leads");
    a.stop(Duration::from_secs(1)).await;
    // Released on stop: b takes over at its next attempt, well before a 2 s expiry.
    tokio::time::sleep(Duration::from_millis(800)).await;
    let holder = sundial::store::codec::decode::<sundial::store::records::LeaseRecord>(
        &sundial::kv::run(&kv, sundial::kv::RetryOptions::default(), |txn, _| async move {
            sundial::kv::KvTransaction::get(&txn, &Keyspace::default_root().lease("scheduling.jobs"), true).await
        })
        .await
        .unwrap()
        .unwrap(),
        "lease",
    )
    .unwrap();
    assert!(holder.holder.starts_with("lease-b:"), "{holder:?}");
    b.stop(Duration::from_secs(1)).await;
}

/// A node with a store of its own (`shared_store: false`) in an election shared with
/// another such node: only the leader runs scheduled triggers; the other takes only its
/// one-shot triggers (enqueue) and starts the scheduled ones once it leads.
#[tokio::test(start_paused = true)]
async fn with_stores_of_their_own_only_the_leader_runs_scheduled_triggers() {
    let clock = Arc::new(TokioClock::new(t0()));
    let election = Arc::new(sundial::leader::LocalLeaderElection::new(clock.clone(), Entropy::from_seed(3)));
    let mut nodes = Vec::new();
    for (id, seed) in [("own-a", 31), ("own-b", 32)] {
        let kv = MemoryKv::with_options(clock.clone(), Arc::new(TokioSleeper), MemoryKvOptions::default());
        let registry = registry();
        let store =
            KvJobStore::new(kv, registry.calendars().clone(), Entropy::from_seed(seed), StoreOptions::default());
        let options = SchedulerOptions {
            poll_interval: Duration::from_millis(200),
            lease_ttl: Duration::from_secs(2),
            ..SchedulerOptions::default()
        };
        let mut config =
            NodeConfig::new(store.clone(), registry, options, id, clock.clone(), Entropy::from_seed(seed + 200));
        config.election = Some(election.clone());
        config.name_prefix = "own-store-test".into();
        let scheduler = Node::start(config, None).await.unwrap();
        scheduler.serve();
        nodes.push((scheduler, store));
        // The first node leads before the second starts.
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let every = JobRunQuery { job: Some(JobName::new("every-second").unwrap()), limit: 1000, ..JobRunQuery::default() };
    let noop = JobName::new("adhoc").unwrap();
    let adhoc = JobDefinition::new(noop.clone(), JobTypeKey::new("noop").unwrap());
    nodes[1].0.schedule_one(adhoc).await.unwrap();
    nodes[1].0.enqueue_one(noop.clone()).await.unwrap();
    tokio::time::sleep(Duration::from_secs(5)).await;
    let (a_runs, b_runs) = (nodes[0].1.runs(&every).await.unwrap(), nodes[1].1.runs(&every).await.unwrap());
    assert!(a_runs.len() >= 5, "the leader runs the cron job: {}", a_runs.len());
    assert!(b_runs.is_empty(), "the follower does not: {}", b_runs.len());
    let adhoc_runs = nodes[1].1.runs(&JobRunQuery { job: Some(noop), ..JobRunQuery::default() }).await.unwrap();
    assert_eq!(adhoc_runs.len(), 1, "a one-shot trigger ignores leadership");
    assert_eq!((adhoc_runs[0].run.cause, adhoc_runs[0].state), (RunCause::Manual, RunState::Succeeded));
    // The leader stops and releases its lease; the other node leads and takes over.
    let (a, _) = nodes.remove(0);
    a.stop(Duration::from_secs(1)).await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    let b_runs = nodes[0].1.runs(&every).await.unwrap();
    assert!(b_runs.len() >= 2, "the new leader runs the cron job: {}", b_runs.len());
    nodes[0].0.stop(Duration::from_secs(1)).await;
}

#[tokio::test(start_paused = true)]
async fn a_live_node_that_falls_behind_has_its_fires_stolen_on_time() {
    // A node whose clock runs 20 s behind (alive, heartbeating) would take its home shards'
    // fires 20 s late; the other node takes them once they are 2 s late. An acquisition
    // takes one fire per trigger, so a stealer must look again at its next cycle while it
    // finds late fires, or every-second triggers fall further behind at each steal check.
    let clock = Arc::new(TokioClock::new(t0()));
    let behind = Arc::new(TokioClock::new(t0() - chrono::TimeDelta::seconds(20)));
    let kv = MemoryKv::with_options(clock.clone(), Arc::new(TokioSleeper), MemoryKvOptions::default());
    let (on_time, store) = node(&kv, &clock, "on-time", 31).await;
    let (_late, _) = node(&kv, &behind, "falls-behind", 32).await;
    let jobs = concurrent_ticks(16);
    assert!(on_time.schedule(jobs).await.iter().all(Result::is_ok));
    tokio::time::sleep(Duration::from_secs(45)).await;
    let (from, to) = (t0() + chrono::TimeDelta::seconds(15), t0() + chrono::TimeDelta::seconds(35));
    let mut late = Vec::new();
    let mut ran: BTreeMap<(String, DateTime<Utc>), usize> = BTreeMap::new();
    for run in tick_runs(&store, 16, from, to).await {
        let at = run.run.scheduled_at;
        *ran.entry((run.run.job.to_string(), at)).or_default() += 1;
        // Stealable 2 s late, looked for at least every 5 s: at most about 7 s late.
        if run.node == "on-time" && run.started_at - at > chrono::TimeDelta::seconds(8) {
            late.push((run.run.job.to_string(), at, run.started_at - at));
        }
    }
    assert_eq!(ran.len(), 16 * 20, "every second's fire of every job ran");
    assert!(ran.values().all(|n| *n == 1), "each once");
    assert!(
        late.is_empty(),
        "{} stolen fires started more than 8 s late, e.g. {:?}",
        late.len(),
        &late[..late.len().min(3)]
    );
}

#[tokio::test(start_paused = true)]
async fn heartbeats_say_whether_a_node_keeps_up_with_its_home_shards() {
    // Nodes that take their fires on time say so in their heartbeats (the others then skip
    // their shards when looking for late fires); a node whose run slots are all taken
    // while fires wait says it is behind.
    let clock = Arc::new(TokioClock::new(t0()));
    let kv = MemoryKv::with_options(clock.clone(), Arc::new(TokioSleeper), MemoryKvOptions::default());
    let (a, store) = node(&kv, &clock, "keeps-up-a", 51).await;
    let (_b, _) = node(&kv, &clock, "keeps-up-b", 52).await;
    assert!(a.schedule(concurrent_ticks(16)).await.iter().all(Result::is_ok));
    tokio::time::sleep(Duration::from_secs(5)).await;
    let records = store.nodes().await.unwrap();
    assert_eq!(records.len(), 2);
    assert!(records.iter().all(|r| r.caught_up), "{records:?}");

    let kv = MemoryKv::with_options(clock.clone(), Arc::new(TokioSleeper), MemoryKvOptions::default());
    let options = SchedulerOptions { max_concurrent_runs: 1, ..fast_options() };
    let (full, store) = node_with_options(&kv, &clock, "one-slot", 53, registry(), options).await;
    let mut long = cron_job("long-ticks", "long", "cron * * * * * *");
    long.allow_concurrent = true;
    assert!(full.schedule(vec![long]).await.iter().all(Result::is_ok));
    tokio::time::sleep(Duration::from_secs(5)).await;
    let records = store.nodes().await.unwrap();
    assert!(records.iter().all(|r| r.node == "one-slot" && !r.caught_up), "{records:?}");
}

#[tokio::test(start_paused = true)]
async fn fires_no_node_was_woken_for_are_found_though_every_node_vouches_for_its_shards() {
    // A store that never acquired knows no nodes and wakes none when it enqueues; the home
    // nodes of those fires, idle, say in their heartbeats that they have caught up, and the
    // others believe them at most steal turns. Every fourth turn (10 s) a node reads every
    // shard anyway: with eight nodes, waiting for the home node's own turn would take up
    // to a round of 20 s.
    let clock = Arc::new(TokioClock::new(t0()));
    let kv = MemoryKv::with_options(clock.clone(), Arc::new(TokioSleeper), MemoryKvOptions::default());
    let options = SchedulerOptions { node_timeout: Duration::from_secs(600), ..fast_options() };
    let mut nodes = Vec::new();
    for i in 0..8u64 {
        nodes.push(node_with_options(&kv, &clock, &format!("vouch-{i}"), 60 + i, registry(), options.clone()).await);
    }
    let adhoc = JobName::new("adhoc").unwrap();
    let mut def = JobDefinition::new(adhoc.clone(), JobTypeKey::new("noop").unwrap());
    def.allow_concurrent = true;
    nodes[0].0.schedule_one(def).await.unwrap();
    tokio::time::sleep(Duration::from_secs(5)).await;
    let writer = KvJobStore::new(
        kv.client("writer"),
        registry().calendars().clone(),
        Entropy::from_seed(7),
        StoreOptions::default(),
    );
    let records = writer.nodes().await.unwrap();
    assert!(records.len() == 8 && records.iter().all(|r| r.caught_up), "{records:?}");
    let pairs: Vec<_> = (0..32).map(|_| (adhoc.clone(), Default::default())).collect();
    for result in writer.enqueue(&pairs, sundial::time::Clock::now(clock.as_ref())).await {
        result.unwrap();
    }
    tokio::time::sleep(Duration::from_secs(30)).await;
    let runs = writer.runs(&JobRunQuery { job: Some(adhoc), limit: 100, ..JobRunQuery::default() }).await.unwrap();
    assert_eq!(runs.len(), 32, "each enqueued fire ran once");
    let latest = runs.iter().map(|run| run.started_at - run.run.scheduled_at).max().unwrap();
    // Late enough to steal after 2 s, then within four turns.
    assert!(latest <= chrono::TimeDelta::seconds(13), "the latest started {latest} late");
    for (node, _) in nodes {
        node.stop(Duration::from_secs(1)).await;
    }
}

#[tokio::test(start_paused = true)]
async fn nodes_take_turns_at_looking_for_late_fires_yet_a_cut_off_nodes_fires_wait_little() {
    // Four nodes read the other nodes' shards in turns of 2.5 s: the cluster looks twice
    // every 5 s, where each node looking every 5 s made it four times. A node cut off
    // from the store (not yet declared lost) leaves its fires to the others, which take
    // them once 2 s late at the next turn, or the one after when the cut-off node's came
    // first, and keep looking while they find some.
    let clock = Arc::new(TokioClock::new(t0()));
    let kv = MemoryKv::with_options(clock.clone(), Arc::new(TokioSleeper), MemoryKvOptions::default());
    let slow_to_reap = SchedulerOptions { node_timeout: Duration::from_secs(600), ..fast_options() };
    let mut nodes = Vec::new();
    for i in 0..4u64 {
        let options = slow_to_reap.clone();
        nodes.push(node_with_options(&kv, &clock, &format!("turns-{i}"), 90 + i, registry(), options).await);
    }
    // Concurrent: a run the cut-off node began keeps its job's slot until it is declared lost.
    let jobs = concurrent_ticks(16);
    assert!(nodes[0].0.schedule(jobs).await.iter().all(Result::is_ok));
    tokio::time::sleep(Duration::from_secs(5)).await;
    let before: Vec<u64> = nodes.iter().map(|(node, _)| node.counters().steal_reads).collect();
    tokio::time::sleep(Duration::from_secs(60)).await;
    let reads: Vec<u64> =
        nodes.iter().zip(&before).map(|((node, _), before)| node.counters().steal_reads - before).collect();
    // 24 turns in 60 s, a read in each; each node's turn every 10 s.
    assert!((22..=26).contains(&reads.iter().sum::<u64>()), "steal reads per node in 60 s: {reads:?}");
    assert!(reads.iter().all(|n| (5..=7).contains(n)), "steal reads per node in 60 s: {reads:?}");

    let cut_at = sundial::time::Clock::now(clock.as_ref());
    kv.set_partitioned("turns-3", true);
    tokio::time::sleep(Duration::from_secs(30)).await;
    let store = &nodes[0].1;
    let (from, to) = (cut_at + chrono::TimeDelta::seconds(1), cut_at + chrono::TimeDelta::seconds(20));
    let mut ran: BTreeMap<(String, DateTime<Utc>), usize> = BTreeMap::new();
    let mut stolen = 0;
    for run in tick_runs(store, 16, from, to).await {
        let at = run.run.scheduled_at;
        *ran.entry((run.run.job.to_string(), at)).or_default() += 1;
        let late = run.started_at - at;
        if late > chrono::TimeDelta::seconds(1) {
            stolen += 1;
            // Stealable 2 s late, looked for within two turns (5 s) and on at once.
            assert!(late <= chrono::TimeDelta::seconds(8), "{} of {at} started {late} late", run.run.job);
        }
    }
    let seconds = usize::try_from((to - from).num_seconds()).unwrap();
    assert_eq!(ran.len(), 16 * seconds, "every second's fire of every job ran");
    assert!(ran.values().all(|n| *n == 1), "each once");
    assert!(stolen >= seconds, "the cut-off node's shards hold fires: {stolen} were stolen");
    for (node, _) in nodes.drain(..3) {
        node.stop(Duration::from_secs(1)).await;
    }
}

#[tokio::test(start_paused = true)]
async fn runs_a_stopped_node_abandoned_are_marked_lost_and_recovered() {
    // A node stops gracefully while a job ignores its cancellation: the stop gives up on
    // it (abandoned) and deregisters the node. No heartbeat will ever go stale for the
    // leader to notice, yet the run must not stay `Running` (its slot held) for ever.
    let clock = Arc::new(TokioClock::new(t0()));
    let kv = MemoryKv::with_options(clock.clone(), Arc::new(TokioSleeper), MemoryKvOptions::default());
    let stubborn = || {
        JobRegistry::builder()
            .add_job_type_as("stubborn", || {
                FnJob::new(|_| async {
                    tokio::time::sleep(Duration::from_secs(3600)).await;
                    Ok(())
                })
            })
            .build()
            .unwrap()
    };
    // Lost only after a minute without heartbeat: the stop (1 s, then 10 s of grace)
    // deregisters the node long before the leader could see it go quiet.
    // Polls 2 s apart: the recovery starts at once only because the reaping leader wakes
    // its own poller.
    let options = SchedulerOptions {
        node_timeout: Duration::from_secs(60),
        poll_interval: Duration::from_secs(2),
        ..fast_options()
    };
    let (stays, store) = node_with_options(&kv, &clock, "stays", 41, stubborn(), options.clone()).await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    let (leaves, _) = node_with_options(&kv, &clock, "leaves", 42, stubborn(), options).await;
    let mut def = JobDefinition::new(JobName::new("stubborn").unwrap(), JobTypeKey::new("stubborn").unwrap());
    def.requests_recovery = true;
    stays.schedule_one(def).await.unwrap();
    let trigger = leaves.clone();
    tokio::spawn(async move { trigger.trigger(vec![JobName::new("stubborn").unwrap().into()]).await });
    tokio::time::sleep(Duration::from_millis(500)).await;
    let query = JobRunQuery { job: Some(JobName::new("stubborn").unwrap()), ..JobRunQuery::default() };
    let started = store.runs(&query).await.unwrap();
    assert_eq!((started.len(), started[0].node.as_str()), (1, "leaves"));
    let report = leaves.stop(Duration::from_secs(1)).await;
    assert_eq!(report.abandoned, 1, "{report:?}");
    let meanwhile = store.runs(&query).await.unwrap();
    assert_eq!(meanwhile.iter().find(|r| r.run.id == started[0].run.id).unwrap().state, RunState::Running);
    tokio::time::sleep(Duration::from_secs(5)).await;
    let after = store.runs(&query).await.unwrap();
    let first = after.iter().find(|r| r.run.id == started[0].run.id).unwrap();
    assert_eq!(first.state, RunState::Lost, "{after:#?}");
    let recovery: Vec<_> = after.iter().filter(|r| r.run.cause == RunCause::Recovery).collect();
    assert_eq!(recovery.len(), 1, "recovered once, on the node that stays: {after:#?}");
    assert_eq!(recovery[0].node, "stays");
    let lost_at = first.finished_at.unwrap();
    assert!(recovery[0].started_at - lost_at < chrono::TimeDelta::milliseconds(50), "{lost_at} {recovery:#?}");
    let nodes: Vec<String> = store.nodes().await.unwrap().into_iter().map(|n| n.node).collect();
    assert_eq!(nodes, ["stays"], "the stopped node's record went with its last run");
    stays.stop(Duration::from_secs(1)).await;
}

/// (cause, start, end) of each execution of the job, on the test's clock.
type Executions = Arc<std::sync::Mutex<Vec<(RunCause, DateTime<Utc>, DateTime<Utc>)>>>;

#[tokio::test(start_paused = true)]
async fn a_node_declared_lost_starts_no_run_beside_its_own_run_that_ignores_cancellation() {
    // A node cut off from the store is declared lost while a non-concurrent job runs on it,
    // ignoring its cancellation; the leader frees the job's slot and asks for a recovery.
    // Healed, the node learns it was declared lost: it must not itself start the recovery
    // (or any run of that job) while its own run still runs. The other node, whose only
    // slot is taken, cannot take the recovery either, so without that rule it would run
    // beside the old run on the same node.
    let clock = Arc::new(TokioClock::new(t0()));
    let kv = MemoryKv::with_options(clock.clone(), Arc::new(TokioSleeper), MemoryKvOptions::default());
    let executions: Executions = Arc::default();
    let registry = || {
        let (clock, executions) = (clock.clone(), executions.clone());
        JobRegistry::builder()
            .add_job_type_as("stubborn", move || {
                let (clock, executions) = (clock.clone(), executions.clone());
                FnJob::new(move |ctx: RunContext| {
                    let (clock, executions) = (clock.clone(), executions.clone());
                    async move {
                        let start = sundial::time::Clock::now(&*clock);
                        tokio::time::sleep(Duration::from_secs(20)).await;
                        let end = sundial::time::Clock::now(&*clock);
                        executions.lock().unwrap().push((ctx.run.cause, start, end));
                        Ok(())
                    }
                })
            })
            .add_job_type_as("hog", ten_minutes_unless_canceled)
            .build()
            .unwrap()
    };
    let (victim, _) = node_with(&kv, &clock, "victim", 51, registry()).await;
    let full = SchedulerOptions { max_concurrent_runs: 1, ..fast_options() };
    let (other, _) = node_with_options(&kv, &clock, "full", 52, registry(), full).await;
    let observer = KvJobStore::new(
        kv.client("observer"),
        registry().calendars().clone(),
        Entropy::from_seed(53),
        StoreOptions::default(),
    );
    let mut stubborn = JobDefinition::new(JobName::new("stubborn").unwrap(), JobTypeKey::new("stubborn").unwrap());
    stubborn.requests_recovery = true;
    victim.schedule_one(stubborn).await.unwrap();
    victim
        .schedule_one(JobDefinition::new(JobName::new("hog").unwrap(), JobTypeKey::new("hog").unwrap()))
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_secs(1)).await;
    let hog = other.clone();
    tokio::spawn(async move { hog.trigger(vec![JobName::new("hog").unwrap().into()]).await });
    let run = victim.clone();
    tokio::spawn(async move { run.trigger(vec![JobName::new("stubborn").unwrap().into()]).await });
    tokio::time::sleep(Duration::from_millis(500)).await;
    let query = JobRunQuery { job: Some(JobName::new("stubborn").unwrap()), ..JobRunQuery::default() };
    let first = observer.runs(&query).await.unwrap();
    assert_eq!((first.len(), first[0].node.as_str(), first[0].state), (1, "victim", RunState::Running));

    kv.set_partitioned("victim", true);
    let mut waited = 0;
    while observer.runs(&query).await.unwrap().iter().all(|r| r.state != RunState::Lost) {
        assert!(waited < 30, "never declared lost");
        tokio::time::sleep(Duration::from_secs(1)).await;
        waited += 1;
    }
    kv.set_partitioned("victim", false);
    tokio::time::sleep(Duration::from_secs(2)).await;
    // Asked to run the job here meanwhile, the node refuses (its own run still runs).
    let refused = victim.trigger_one(JobName::new("stubborn").unwrap()).await;
    assert!(matches!(refused, Err(sundial::error::SchedulingError::JobRunning { .. })), "{refused:?}");
    tokio::time::sleep(Duration::from_secs(38)).await;

    let runs = observer.runs(&query).await.unwrap();
    let recovery: Vec<_> = runs.iter().filter(|r| r.run.cause == RunCause::Recovery).collect();
    assert_eq!(recovery.len(), 1, "{runs:#?}");
    assert_eq!(recovery[0].node, "victim", "the other node's only slot is taken");
    let executions = executions.lock().unwrap().clone();
    let first_end = executions.iter().find(|e| e.0 == RunCause::Manual).map(|e| e.2).unwrap();
    let recovered = executions.iter().find(|e| e.0 == RunCause::Recovery).map(|e| e.1);
    assert!(recovered.is_some_and(|start| start >= first_end), "first ended {first_end}; {executions:?}");
    other.stop(Duration::from_secs(1)).await;
    victim.stop(Duration::from_secs(1)).await;
}

#[tokio::test(start_paused = true)]
async fn a_draining_node_keeps_its_runs_until_the_stop_deadline() {
    // Stopping with a deadline longer than the node timeout: the node finishes its runs,
    // so it must stay alive meanwhile, neither declared lost by the leader (its runs
    // recovered elsewhere while they still run) nor fencing itself (canceling them early).
    let clock = Arc::new(TokioClock::new(t0()));
    let kv = MemoryKv::with_options(clock.clone(), Arc::new(TokioSleeper), MemoryKvOptions::default());
    let slow = || {
        JobRegistry::builder()
            .add_job_type_as("slow", || {
                FnJob::new(|ctx: RunContext| async move {
                    tokio::select! {
                        () = ctx.cancel.cancelled() => Err(sundial_actors::job::JobFailure::new("canceled")),
                        () = tokio::time::sleep(Duration::from_secs(10)) => Ok(()),
                    }
                })
            })
            .build()
            .unwrap()
    };
    let (stays, store) = node_with(&kv, &clock, "drain-stays", 51, slow()).await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    let (leaves, _) = node_with(&kv, &clock, "drain-leaves", 52, slow()).await;
    let mut def = JobDefinition::new(JobName::new("slow").unwrap(), JobTypeKey::new("slow").unwrap());
    def.requests_recovery = true;
    stays.schedule_one(def).await.unwrap();
    let trigger = leaves.clone();
    tokio::spawn(async move { trigger.trigger(vec![JobName::new("slow").unwrap().into()]).await });
    tokio::time::sleep(Duration::from_millis(500)).await;
    // Node timeout 3 s; the run needs 9.5 s more; the deadline is 20 s.
    let report = leaves.stop(Duration::from_secs(20)).await;
    assert_eq!((report.canceled, report.abandoned), (0, 0), "{report:?}");
    tokio::time::sleep(Duration::from_secs(5)).await;
    let query = JobRunQuery { job: Some(JobName::new("slow").unwrap()), ..JobRunQuery::default() };
    let runs = store.runs(&query).await.unwrap();
    let states: Vec<_> = runs.iter().map(|r| (r.run.cause, r.state, r.node.clone())).collect();
    assert_eq!(states, vec![(RunCause::Manual, RunState::Succeeded, "drain-leaves".to_owned())]);
    stays.stop(Duration::from_secs(1)).await;
}

#[tokio::test(start_paused = true)]
async fn the_others_take_a_draining_nodes_fires_on_time() {
    // While a node drains (finishing a long run), the fires of its home shards go to the
    // other node on time: it is not mistaken for a node that is merely slow, whose fires
    // are taken only once late.
    let clock = Arc::new(TokioClock::new(t0()));
    let kv = MemoryKv::with_options(clock.clone(), Arc::new(TokioSleeper), MemoryKvOptions::default());
    let (stays, store) = node(&kv, &clock, "busy-stays", 61).await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    let (leaves, _) = node(&kv, &clock, "busy-leaves", 62).await;
    // Enough every-second jobs that both nodes have home shards among them.
    let jobs: Vec<JobDefinition> =
        (0..32).map(|i| cron_job(&format!("tick-{i}"), "noop", "cron * * * * * *")).collect();
    for job in jobs {
        stays.schedule_one(job).await.unwrap();
    }
    let long = JobDefinition::new(JobName::new("long").unwrap(), JobTypeKey::new("long").unwrap());
    stays.schedule_one(long).await.unwrap();
    let trigger = leaves.clone();
    tokio::spawn(async move { trigger.trigger(vec![JobName::new("long").unwrap().into()]).await });
    tokio::time::sleep(Duration::from_secs(3)).await;
    let before = store.runs(&JobRunQuery { node: Some("busy-leaves".into()), ..JobRunQuery::default() }).await;
    assert!(before.unwrap().len() > 5, "the leaving node had home fires of its own");
    // The long run keeps the node draining for the whole 10 s deadline.
    let stop = tokio::spawn(async move { leaves.stop(Duration::from_secs(10)).await });
    tokio::time::sleep(Duration::from_secs(8)).await;
    let query = JobRunQuery { limit: 1000, ..JobRunQuery::default() };
    let runs = store.runs(&query).await.unwrap();
    let during: Vec<_> = runs
        .iter()
        .filter(|r| r.run.job.as_str().starts_with("tick-"))
        .filter(|r| r.run.scheduled_at >= t0() + chrono::TimeDelta::seconds(7))
        .filter(|r| r.run.scheduled_at <= t0() + chrono::TimeDelta::seconds(13))
        .collect();
    assert!(during.len() >= 32 * 5, "every tick fired: {}", during.len());
    for run in &during {
        assert_eq!(run.node, "busy-stays");
        let late = run.started_at - run.run.scheduled_at;
        assert!(late < chrono::TimeDelta::milliseconds(500), "{} started {late} late", run.run.job);
    }
    stop.await.unwrap();
    stays.stop(Duration::from_secs(1)).await;
}

#[tokio::test(start_paused = true)]
async fn work_enqueued_on_one_node_wakes_the_node_whose_shard_it_is() {
    // Polls are 5 s apart: an enqueued run whose shard is the other node's starts at once
    // only because that node watches its wake key.
    let clock = Arc::new(TokioClock::new(t0()));
    let kv = MemoryKv::with_options(clock.clone(), Arc::new(TokioSleeper), MemoryKvOptions::default());
    let options = SchedulerOptions { poll_interval: Duration::from_secs(5), ..fast_options() };
    let (here, store) = node_with_options(&kv, &clock, "enqueues", 71, registry(), options.clone()).await;
    let (_there, _) = node_with_options(&kv, &clock, "watches", 72, registry(), options).await;
    let job = JobName::new("on-demand").unwrap();
    here.schedule_one(JobDefinition::new(job.clone(), JobTypeKey::new("noop").unwrap())).await.unwrap();
    // Both nodes have polled since both registered: each knows the other.
    tokio::time::sleep(Duration::from_secs(12)).await;
    let enqueued_at = sundial::time::Clock::now(clock.as_ref());
    for _ in 0..16 {
        here.enqueue_one(job.clone()).await.unwrap();
    }
    tokio::time::sleep(Duration::from_secs(1)).await;
    let runs = store.runs(&JobRunQuery { job: Some(job), ..JobRunQuery::default() }).await.unwrap();
    assert_eq!(runs.len(), 16, "{runs:#?}");
    assert!(runs.iter().any(|r| r.node == "watches"), "some shards are the other node's");
    for run in &runs {
        let waited = run.started_at - enqueued_at;
        assert!(waited < chrono::TimeDelta::milliseconds(200), "started {waited} after the enqueue on {}", run.node);
    }
}

#[tokio::test(start_paused = true)]
async fn idle_nodes_leave_the_due_index_unread_yet_take_new_work_on_time() {
    // Polling every 200 ms with nothing due for an hour, a node reads the due index only
    // when it looks at the other nodes' shards (every 5 s); its wake key tells it of work
    // the other node writes into its shards meanwhile, and of shards it inherits.
    let clock = Arc::new(TokioClock::new(t0()));
    let kv = MemoryKv::with_options(clock.clone(), Arc::new(TokioSleeper), MemoryKvOptions::default());
    let (first, store) = node(&kv, &clock, "idle-1", 81).await;
    let (second, _) = node(&kv, &clock, "idle-2", 82).await;
    first.schedule_one(cron_job("hourly", "noop", "cron 0 0 * * * *")).await.unwrap();
    // Once both wrote their code jobs: only the local job runs (every second, on each).
    tokio::time::sleep(Duration::from_secs(1)).await;
    first.unschedule(&[JobName::new("every-second").unwrap()]).await;
    tokio::time::sleep(Duration::from_secs(5)).await;
    let before = [first.counters(), second.counters()];
    tokio::time::sleep(Duration::from_secs(20)).await;
    for (node, before) in [&first, &second].into_iter().zip(before) {
        let now = node.counters();
        let (read, skipped) =
            (now.acquisitions - before.acquisitions, now.acquisitions_skipped - before.acquisitions_skipped);
        // 100 cycles in 20 s: one in 25 reads the index (the shards of the other node),
        // plus the odd cycle after the lease or housekeeping woke the poller.
        assert!(read <= 12, "{read} acquisitions read the due index in 20 s");
        assert!(skipped >= 80, "{skipped} cycles skipped it");
    }
    // Every-second work scheduled through the first node: it runs on time on the node
    // whose shard it is in, also when that is not the node that wrote it.
    for i in 0..8 {
        first.schedule_one(cron_job(&format!("tick-{i}"), "noop", "cron * * * * * *")).await.unwrap();
    }
    tokio::time::sleep(Duration::from_secs(3)).await;
    let query = JobRunQuery { limit: 1000, ..JobRunQuery::default() };
    let ticks = |runs: Vec<sundial::job::JobRunInfo>| -> Vec<sundial::job::JobRunInfo> {
        runs.into_iter().filter(|r| r.run.job.as_str().starts_with("tick-")).collect()
    };
    let so_far = ticks(store.runs(&query).await.unwrap());
    assert!(so_far.len() >= 8 * 2, "{}", so_far.len());
    // Keep only the jobs of the second node's shards: the first has nothing to do.
    let first_runs: std::collections::BTreeSet<JobName> =
        so_far.iter().filter(|r| r.node == "idle-1").map(|r| r.run.job.clone()).collect();
    assert!(first_runs.len() < 8, "some ticks are in the second node's shards");
    first.unschedule(&first_runs.into_iter().collect::<Vec<_>>()).await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    // The second node stops: the first inherits its shards and is told so at once, not
    // at its next read of the index.
    let skipped = first.counters().acquisitions_skipped;
    let stopped_at = sundial::time::Clock::now(clock.as_ref());
    second.stop(Duration::from_secs(1)).await;
    tokio::time::sleep(Duration::from_secs(4)).await;
    assert!(first.counters().acquisitions_skipped > skipped, "the first node was idle");
    let all = ticks(store.runs(&query).await.unwrap());
    let after: Vec<_> = all.iter().filter(|r| r.run.scheduled_at > stopped_at).collect();
    assert!(after.len() >= 3, "the second node's ticks went on: {}", after.len());
    assert!(after.iter().all(|r| r.node == "idle-1"), "{after:#?}");
    assert!(all.iter().any(|r| r.node == "idle-2"));
    for run in &all {
        let late = run.started_at - run.run.scheduled_at;
        assert!(late < chrono::TimeDelta::milliseconds(100), "{} started {late} late on {}", run.run.job, run.node);
    }
    first.stop(Duration::from_secs(1)).await;
}

#[tokio::test(start_paused = true)]
async fn a_busy_node_reads_only_the_shards_whose_first_fire_is_due() {
    // Alone, a node's home is all 64 due shards. With a fire every second, its
    // acquisitions read only the shard whose first entry (as its last acquisition left it)
    // is due, not the first entry of every shard; every 5 s it reads them all, looking for
    // late fires.
    let clock = Arc::new(TokioClock::new(t0()));
    let kv = MemoryKv::with_options(clock.clone(), Arc::new(TokioSleeper), MemoryKvOptions::default());
    let (node, store) = node(&kv, &clock, "alone", 97).await;
    tokio::time::sleep(Duration::from_secs(5)).await;
    let (before, ranges_before) = (node.counters(), kv.stats().ranges_read);
    tokio::time::sleep(Duration::from_secs(30)).await;
    let after = node.counters();
    let (acquisitions, steals) = (after.acquisitions - before.acquisitions, after.steal_reads - before.steal_reads);
    let ranges = kv.stats().ranges_read - ranges_before;
    assert!(acquisitions >= 30 && (5..=7).contains(&steals), "{acquisitions} acquisitions, {steals} steal reads");
    // Each steal read reads every shard's first entry; all else the node read in these
    // 30 s (the other acquisitions, heartbeats, completions, housekeeping) comes to less
    // than half a shard count per other acquisition. Reading every home shard's first
    // entry at each acquisition came to more than a whole one.
    let shards = u64::from(sundial::store::keys::DUE_SHARDS);
    let rest = ranges - steals * shards;
    assert!(rest < (acquisitions - steals) * shards / 2, "{ranges} ranges read in {acquisitions} acquisitions");
    let query = JobRunQuery { job: Some(JobName::new("every-second").unwrap()), limit: 1000, ..JobRunQuery::default() };
    let fires = store.runs(&query).await.unwrap();
    assert!(fires.len() >= 30, "{}", fires.len());
    node.stop(Duration::from_secs(1)).await;
}

#[tokio::test(start_paused = true)]
async fn a_node_woken_many_times_a_second_heartbeats_once_or_twice_a_poll_interval() {
    // Twenty one-shot fires 150 ms apart wake the node about seven times a second, more
    // often than its poll interval (1 s) and farther apart than its lookahead. A heartbeat
    // per wake-up would be a store write per fire; the node writes one each poll interval
    // (two at most), and runs every fire on time.
    let clock = Arc::new(TokioClock::new(t0()));
    let kv = MemoryKv::with_options(clock.clone(), Arc::new(TokioSleeper), MemoryKvOptions::default());
    let options = SchedulerOptions { poll_interval: Duration::from_secs(1), ..fast_options() };
    let (node, store) = node_with_options(&kv, &clock, "woken", 61, registry(), options).await;
    node.unschedule(&[JobName::new("every-second").unwrap()]).await;
    let start = t0() + chrono::TimeDelta::seconds(3);
    for i in 0..20 {
        let at = start + chrono::TimeDelta::milliseconds(150 * i);
        let once = format!("once {}", at.to_rfc3339());
        node.schedule_one(cron_job(&format!("once-{i:02}"), "noop", &once)).await.unwrap();
    }
    let heartbeats = || async {
        let nodes = store.nodes().await.unwrap();
        nodes.iter().find(|n| n.node == "woken").map(|n| n.heartbeat_seq).unwrap()
    };
    tokio::time::sleep((start - t0()).to_std().unwrap()).await;
    let before = heartbeats().await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    let written = heartbeats().await - before;
    assert!((2..=6).contains(&written), "{written} heartbeats in 3 s");
    let query = JobRunQuery { limit: 1000, ..JobRunQuery::default() };
    let fires: Vec<_> =
        store.runs(&query).await.unwrap().into_iter().filter(|r| r.run.job.as_str().starts_with("once-")).collect();
    assert_eq!(fires.len(), 20);
    for run in &fires {
        let late = run.started_at - run.run.scheduled_at;
        assert!(late < chrono::TimeDelta::milliseconds(50), "{} started {late} late", run.run.job);
    }
    node.stop(Duration::from_secs(1)).await;
}
