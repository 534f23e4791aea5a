//! Nodes: pollers racing for the same fires, lost nodes reaped and their runs recovered,
//! stopped nodes' records, cancel requests.

use super::*;

/// Eight pollers race for the same due set: each fire is acquired exactly once. Returns
/// how many runs the pollers got (at least four of the five cycles' worth even when the
/// store injects faults and some acquisitions give up).
pub async fn concurrent_pollers_take_each_fire_exactly_once<K: Kv>(store: &KvJobStore<K>) -> usize {
    let mut defs = Vec::new();
    for i in 0..120 {
        let mut def = job(&format!("j{i}"), &[("t", "cron * * * * * *")]);
        def.allow_concurrent = i % 3 != 0;
        defs.push(def);
    }
    assert!(store.schedule(&defs, t0()).await.iter().all(Result::is_ok));
    let mut all_runs: Vec<AcquiredRun> = Vec::new();
    // Five cycles: fires at 1..=5 s, each taken by whichever of 8 pollers gets it.
    for second in 1..=5 {
        let now = secs(second);
        let mut pollers = Vec::new();
        for p in 0..8 {
            let store = store.clone();
            let node = format!("node-{p}");
            pollers.push(tokio::spawn(async move {
                let known = BTreeSet::new();
                let mut req = request(&node, now, 64, &known);
                req.steal_grace = Duration::ZERO;
                store
                    .acquire_due(&req)
                    .await
                    .map(|runs| runs.into_iter().map(|r| (node.clone(), r)).collect::<Vec<_>>())
            }));
        }
        let mut this_cycle = Vec::new();
        for poller in pollers {
            // A poller may give up after its retries; the fires stay for others.
            if let Ok(runs) = poller.await.unwrap() {
                this_cycle.extend(runs);
            }
        }
        // A non-concurrent job never holds two slots: at most one run of it per cycle
        // (its previous run was completed before this cycle).
        let mut exclusive_runs: BTreeMap<String, usize> = BTreeMap::new();
        for (_, run) in this_cycle.iter().filter(|(_, r)| r.exclusive) {
            *exclusive_runs.entry(run.run.job.to_string()).or_default() += 1;
        }
        assert!(exclusive_runs.values().all(|n| *n == 1), "two runs of a non-concurrent job at once");
        for (node, run) in &this_cycle {
            complete(store, run.run.id, node, RunOutcome::Succeeded, now).await;
        }
        all_runs.extend(this_cycle.into_iter().map(|(_, r)| r));
    }
    let mut per_fire: BTreeMap<(String, DateTime<Utc>), usize> = BTreeMap::new();
    for run in &all_runs {
        *per_fire.entry((run.run.job.to_string(), run.run.scheduled_at)).or_default() += 1;
    }
    assert!(per_fire.values().all(|n| *n == 1), "a fire ran twice");
    assert!(all_runs.len() >= 120 * 4, "only {} runs", all_runs.len());
    all_runs.len()
}

/// Checks the durable effects (run states, one recovery) and the steps' lists, which say
/// what was done also when a step is retried after an ambiguous commit.
pub async fn lost_nodes_are_reaped_and_their_runs_recovered_exactly_once<K: Kv>(store: &KvJobStore<K>) {
    // Concurrent, so the recovery is not blocked behind the job's own next fire.
    let mut recovering = job("recover", &[("t", "cron * * * * * *")]);
    recovering.requests_recovery = true;
    recovering.allow_concurrent = true;
    let mut plain = job("plain", &[("t", "cron * * * * * *")]);
    plain.allow_concurrent = true;
    store.schedule(&[recovering, plain], t0()).await;
    let first = store.heartbeat("dying", secs(0), None, false).await.unwrap();
    let runs = acquire(store, "dying", secs(1), 16).await;
    assert_eq!(runs.len(), 2);
    // A heartbeat after the observation: no declaration.
    store.heartbeat("dying", secs(1), Some(first.times_declared_lost), false).await.unwrap();
    assert!(!store.reap_node("dying", first.seq, secs(2), 100, None).await.unwrap().declared);
    let observed = store.nodes().await.unwrap().into_iter().find(|n| n.node == "dying").unwrap();
    assert!(observed.alive);
    let mut step = store.reap_node("dying", observed.heartbeat_seq, secs(100), 100, None).await.unwrap();
    assert!(step.declared);
    let (mut lost, mut recoveries) = (step.lost_runs.clone(), step.recovery_triggers.clone());
    while step.more {
        step = store.reap_node("dying", observed.heartbeat_seq, secs(100), 100, None).await.unwrap();
        lost.extend(step.lost_runs.iter().copied());
        recoveries.extend(step.recovery_triggers.iter().cloned());
    }
    lost.sort();
    let mut expected: Vec<Uuid> = runs.iter().map(|r| r.run.id).collect();
    expected.sort();
    assert_eq!(lost, expected, "each run reported lost once");
    let recovering_run = runs.iter().find(|r| r.run.job.as_str() == "recover").unwrap().run.id;
    assert_eq!(recoveries, [format!("recovery-{}", recovering_run.simple())]);
    // Reaping again recovers nothing twice.
    let again = store.reap_node("dying", observed.heartbeat_seq, secs(100), 100, None).await.unwrap();
    assert!(again.lost_runs.is_empty() && again.recovery_triggers.is_empty());
    for run in &runs {
        assert_eq!(store.run_record(run.run.id).await.unwrap().unwrap().state, RunState::Lost);
    }
    assert!(
        store.nodes().await.unwrap().iter().all(|n| n.node != "dying"),
        "with no run left, the lost node's record is deleted"
    );
    // Declared lost (its record gone), the node takes nothing and records no local run (the leader no longer
    // watches it, so its runs would never be reaped) until it heartbeats again.
    assert!(acquire(store, "dying", secs(100), 16).await.is_empty());
    let mut local = runs[0].run.clone();
    local.id = Uuid::from_u128(0x10ca1);
    let refused = store.begin_local_run(&local, "dying", secs(100)).await.unwrap_err();
    assert_eq!(sundial::SchedulingError::from(refused).code(), "SCHEDULING_UNAVAILABLE_001");
    assert!(store.run_record(local.id).await.unwrap().is_none(), "nothing recorded");
    let (plain, data) = (name("plain"), Default::default());
    let manual = store.begin_manual_run(&plain, &data, "dying", Uuid::from_u128(0xa11), secs(100));
    let refused = manual.await.unwrap_err();
    assert_eq!(sundial::SchedulingError::from(refused).code(), "SCHEDULING_UNAVAILABLE_001", "no manual run either");
    // A late completion from the lost node does not overwrite history.
    let late = complete(store, runs[0].run.id, "dying", RunOutcome::Succeeded, secs(101)).await;
    assert_eq!((late.state, late.recorded), (RunState::Lost, false));
    // The recovery runs once, elsewhere, with cause Recovery.
    let recovered: Vec<_> = acquire(store, "healthy", secs(101), 64)
        .await
        .into_iter()
        .filter(|r| r.run.cause == RunCause::Recovery)
        .collect();
    assert_eq!(recovered.len(), 1);
    assert_eq!(recovered[0].run.job.as_str(), "recover");
    let recovered_from = runs.iter().find(|r| r.run.job.as_str() == "recover").unwrap();
    assert_eq!(recovered[0].run.data, recovered_from.run.data);
    assert!(acquire(store, "healthy", secs(101), 64).await.iter().all(|r| r.run.cause != RunCause::Recovery));
    // The node comes back and learns it was declared lost, even if this heartbeat's own
    // commit is ambiguous and retried.
    let back = store.heartbeat("dying", secs(102), Some(first.times_declared_lost), false).await.unwrap();
    assert!(back.was_declared_lost);
    assert!(back.times_declared_lost > first.times_declared_lost);
    assert!(!acquire(store, "dying", secs(103), 16).await.is_empty(), "alive again, it takes fires");
    assert!(store.nodes().await.unwrap().iter().any(|n| n.node == "dying" && n.alive), "registered again");
}

/// Checks: records of stopped nodes are deleted once reaped.
pub async fn records_of_stopped_nodes_are_deleted_once_reaped<K: Kv>(store: &KvJobStore<K>) {
    let mut abandoning = job("abandoning", &[("t", "cron * * * * * *")]);
    abandoning.allow_concurrent = true;
    store.schedule(&[abandoning], t0()).await;
    // A node stops gracefully with a run still `Running` (it ignored cancellation).
    let beat = store.heartbeat("leaving", secs(0), None, false).await.unwrap();
    let runs = acquire(store, "leaving", secs(1), 16).await;
    assert_eq!(runs.len(), 1);
    store.deregister_node("leaving").await.unwrap();
    let stopped = store.nodes().await.unwrap().into_iter().find(|n| n.node == "leaving").unwrap();
    assert!(!stopped.alive);
    // Another node asks it to cancel; the request outlives nothing.
    store.request_cancel(&[runs[0].run.id]).await[0].as_ref().unwrap();
    let step = store.reap_node("leaving", stopped.heartbeat_seq, secs(5), 100, None).await.unwrap();
    assert_eq!(step.lost_runs, vec![runs[0].run.id]);
    assert!(!step.more);
    assert!(store.nodes().await.unwrap().iter().all(|n| n.node != "leaving"), "record deleted with its last run");
    assert!(store.cancel_requests("leaving").await.unwrap().is_empty(), "and its cancel requests");
    // A node that never heartbeated through this store (a store of its own) may still run
    // without a record; this one did, so it may not until it heartbeats again.
    assert!(acquire(store, "leaving", secs(6), 16).await.is_empty());
    assert!(!acquire(store, "own-store", secs(6), 16).await.is_empty());
    // Started again under the same id (a new process: `None`), it simply registers.
    let fresh = store.heartbeat("leaving", secs(7), None, false).await.unwrap();
    assert!(!fresh.was_declared_lost);
    assert!(fresh.seq > 0 && beat.seq > 0);
}

/// Checks: the cluster view lists every node with its runs running and the holder of
/// the store-kept leader lease; a run is found by id while running and once ended.
pub async fn the_cluster_view_counts_each_nodes_runs_and_names_the_leader<K: Kv>(store: &KvJobStore<K>) {
    let mut busy = job("busy", &[]);
    busy.allow_concurrent = true;
    store.schedule(&[busy], t0()).await;
    store.heartbeat("a", secs(0), None, false).await.unwrap();
    store.heartbeat("b", secs(0), None, false).await.unwrap();
    let (busy, data) = (name("busy"), JsonObject::default());
    for (i, node) in ["a", "b", "a"].into_iter().enumerate() {
        store.begin_manual_run(&busy, &data, node, Uuid::from_u128(0xb0 + i as u128), secs(1)).await.unwrap();
    }
    store.mark_draining("b").await.unwrap();
    let cluster = store.cluster("scheduling.jobs").await.unwrap();
    let nodes: Vec<(&str, bool, bool)> = cluster.nodes.iter().map(|n| (n.node.as_str(), n.alive, n.draining)).collect();
    assert_eq!(nodes, [("a", true, false), ("b", true, true)]);
    assert_eq!(cluster.running, BTreeMap::from([("a".to_owned(), 2), ("b".to_owned(), 1)]));
    assert_eq!(cluster.leader, None, "no lease taken");
    // A lease taken through the store's election names its node and term.
    let election = sundial::leader::KvLeaderElection::new(
        store.kv().clone(),
        store.keys().clone(),
        std::sync::Arc::new(sundial::time::ManualClock::new(t0())),
        "a",
        sundial::entropy::Entropy::from_seed(7),
    );
    let resource = sundial::name::ResourceName::new("scheduling.jobs").unwrap();
    let mut lease =
        sundial::leader::LeaderElection::try_acquire(&election, &resource, Duration::from_secs(15)).await.unwrap();
    let leader = store.cluster("scheduling.jobs").await.unwrap().leader.unwrap();
    assert_eq!((leader.node.as_str(), leader.term), ("a", sundial::leader::LeaderLease::term(&lease)));
    sundial::leader::LeaderLease::release(&mut lease).await.unwrap();
    assert_eq!(store.cluster("scheduling.jobs").await.unwrap().leader, None, "released");
    // Runs by id: running, then ended; an unknown id is none.
    let id = Uuid::from_u128(0xb1);
    assert_eq!(store.run_by_id(id).await.unwrap().unwrap().state, RunState::Running);
    complete(store, id, "b", RunOutcome::Succeeded, secs(4)).await;
    let ended = store.run_by_id(id).await.unwrap().unwrap();
    assert_eq!((ended.state, ended.node.as_str(), ended.run.job.as_str()), (RunState::Succeeded, "b", "busy"));
    assert!(store.run_by_id(Uuid::from_u128(0xdead)).await.unwrap().is_none());
    assert_eq!(store.cluster("scheduling.jobs").await.unwrap().running.get("b"), None);
}

/// Checks: cancel requests reach the running node until the run ends.
pub async fn cancel_requests_reach_the_running_node_until_the_run_ends<K: Kv>(store: &KvJobStore<K>) {
    store.schedule(&[job("c", &[("t", "cron * * * * * *")])], t0()).await;
    let run = acquire(store, "n7", secs(1), 16).await.remove(0);
    let results = store.request_cancel(&[run.run.id, Uuid::from_u128(1)]).await;
    assert_eq!(results[0].as_ref().unwrap(), "n7");
    assert_eq!(results[1].as_ref().unwrap_err().code(), "SCHEDULING_NOTFOUND_004");
    assert_eq!(store.cancel_requests("n7").await.unwrap(), vec![run.run.id]);
    assert_eq!(store.cancel_requests("n7").await.unwrap(), vec![run.run.id], "read-only until the run ends");
    let beat = store.heartbeat("n7", secs(1), None, false).await.unwrap();
    assert_eq!(beat.cancel_requests, vec![run.run.id], "a heartbeat brings the node its requests");
    complete(store, run.run.id, "n7", RunOutcome::Canceled { message: "requested".into() }, secs(2)).await;
    assert!(store.cancel_requests("n7").await.unwrap().is_empty());
    assert!(store
        .heartbeat("n7", secs(2), Some(beat.times_declared_lost), false)
        .await
        .unwrap()
        .cancel_requests
        .is_empty());
    assert_eq!(store.request_cancel(&[run.run.id]).await[0].as_ref().unwrap_err().code(), "SCHEDULING_NOTFOUND_004");
    // In one batch of completions, each clears its own request and no other run's.
    let mut many = job("many", &[("t", "cron * * * * * *")]);
    many.allow_concurrent = true;
    store.schedule(&[many], secs(2)).await;
    let runs: Vec<Uuid> = acquire(store, "n7", secs(3), 16).await.iter().map(|r| r.run.id).collect();
    let more: Vec<Uuid> = acquire(store, "n7", secs(4), 16).await.iter().map(|r| r.run.id).collect();
    let last: Vec<Uuid> = acquire(store, "n7", secs(5), 16).await.iter().map(|r| r.run.id).collect();
    let (a, b, c) = (runs[0], more[0], last[0]);
    assert!(store.request_cancel(&[a, c]).await.iter().all(Result::is_ok));
    let ended = |id| Completion {
        run_id: id,
        node: "n7".into(),
        outcome: RunOutcome::Succeeded,
        finished_at: secs(6),
        holds_trigger: None,
    };
    assert!(store.complete_runs(&[ended(a), ended(b)]).await.iter().all(Result::is_ok));
    assert_eq!(store.cancel_requests("n7").await.unwrap(), vec![c], "c still runs: its request stays");
    assert!(store.complete_runs(&[ended(c)]).await.iter().all(Result::is_ok));
    assert!(store.cancel_requests("n7").await.unwrap().is_empty());
}
