//! Limits and edges: switching a job between local and cluster, oversized inputs,
//! data-heavy batches, external fires through the execution coordinator, zero limits and
//! empty ranges.

use super::*;

/// A non-concurrent job switched between local and cluster-unique while a run of the
/// other kind is going would run twice at once (local runs hold no cluster slot; the
/// nodes' local triggers know nothing of a cluster run): refused with
/// `SCHEDULING_CONFLICT_001` until those runs ended. A concurrent job switches any time.
pub async fn a_non_concurrent_job_switches_between_local_and_cluster_only_between_runs<K: Kv>(store: &KvJobStore<K>) {
    let cluster = job("switch", &[("t", "cron */10 * * * * *")]);
    let mut local = cluster.clone();
    local.run_on_every_instance = true;
    let refused = |result: &Result<(), sundial::error::SchedulingError>| {
        result.as_ref().is_err_and(|e| e.code() == "SCHEDULING_CONFLICT_001")
    };
    // Cluster to local while its run is going.
    store.schedule(std::slice::from_ref(&cluster), t0()).await;
    let run = acquire(store, "n1", secs(10), 16).await.remove(0);
    assert!(refused(&store.schedule(std::slice::from_ref(&local), secs(11)).await[0]));
    assert!(store.job_record("switch").await.unwrap().is_some_and(|j| !j.run_on_every_instance), "unchanged");
    assert!(store.schedule(std::slice::from_ref(&cluster), secs(11)).await[0].is_ok(), "no switch: allowed");
    complete(store, run.run.id, "n1", RunOutcome::Succeeded, secs(12)).await;
    assert!(store.schedule(std::slice::from_ref(&local), secs(13)).await[0].is_ok(), "no run going");
    // Local to cluster while a local run is going; the code-job path is held to it too.
    let local_run = sundial::job::JobRun {
        id: Uuid::from_u128(7),
        job: name("switch"),
        trigger: Some(TriggerName::new("t").unwrap()),
        scheduled_at: secs(20),
        cause: RunCause::Schedule,
        attempt: 1,
        retry_of: None,
        data: JsonObject::new(),
    };
    assert!(store.begin_local_run(&local_run, "n2", secs(20)).await.unwrap());
    assert!(refused(&store.schedule(std::slice::from_ref(&cluster), secs(21)).await[0]));
    let sync = store.sync_code_job(&cluster, secs(21)).await.map(|_| ()).map_err(sundial::error::SchedulingError::from);
    assert!(refused(&sync), "a code definition that switches waits too: {sync:?}");
    assert!(acquire(store, "n1", secs(30), 16).await.is_empty(), "still local: not acquired");
    complete(store, local_run.id, "n2", RunOutcome::Succeeded, secs(31)).await;
    assert!(store.schedule(std::slice::from_ref(&cluster), secs(32)).await[0].is_ok());
    // A node that has not reread its local jobs yet fires the job as local: not recorded,
    // and told not to run it (found by simulation seed 57 of the switching workload).
    let stale = sundial::job::JobRun { id: Uuid::from_u128(8), scheduled_at: secs(33), ..local_run.clone() };
    assert!(!store.begin_local_run(&stale, "n3", secs(33)).await.unwrap());
    assert!(store.run_record(stale.id).await.unwrap().is_none());
    // Deleted while its cluster run goes and added again: as a local job, refused (the
    // nodes' local triggers know nothing of that run); as a cluster job, allowed (the run
    // still holds the slot, so the new job's fire waits for it).
    let run = acquire(store, "n1", secs(40), 16).await.remove(0);
    assert!(store.unschedule(&[name("switch")]).await[0].is_ok());
    assert!(refused(&store.schedule(std::slice::from_ref(&local), secs(41)).await[0]));
    assert!(store.schedule(std::slice::from_ref(&cluster), secs(41)).await[0].is_ok());
    assert!(acquire(store, "n2", secs(50), 16).await.is_empty(), "waits for the old run");
    complete(store, run.run.id, "n1", RunOutcome::Succeeded, secs(51)).await;
    // A concurrent job switches while it runs.
    let mut free = job("free", &[("t", "cron */10 * * * * *")]);
    free.allow_concurrent = true;
    store.schedule(std::slice::from_ref(&free), secs(52)).await;
    let running = acquire(store, "n1", secs(60), 16).await;
    assert!(running.iter().any(|r| r.run.job.as_str() == "free"));
    free.run_on_every_instance = true;
    assert!(store.schedule(std::slice::from_ref(&free), secs(61)).await[0].is_ok());
}

/// A JSON object whose text is `len` bytes or a little more.
fn data_of_len(len: usize) -> JsonObject {
    let mut data = JsonObject::new();
    data.insert("pad".into(), "x".repeat(len).into());
    data
}

/// Checks: oversized inputs are refused and never wedge the store.
pub async fn oversized_inputs_are_refused_and_never_wedge_the_store<K: Kv>(store: &KvJobStore<K>) {
    // Data over the limit is refused with the validation code, and nothing is stored.
    let mut big = job("big", &[("t", "cron */10 * * * * *")]);
    big.data = data_of_len(DATA_LEN_MAX);
    let refused = store.schedule(&[big], t0()).await;
    assert_eq!(refused[0].as_ref().unwrap_err().code(), "SCHEDULING_VALIDATION_001", "{refused:?}");
    assert!(store.status(&name("big")).await.unwrap().is_none());
    let mut other = job("other", &[("t", "cron */10 * * * * *")]);
    other.allow_concurrent = true;
    store.schedule(&[job("small", &[("t", "cron */10 * * * * *")]), other], t0()).await;
    let enqueued = store.enqueue(&[(name("small"), data_of_len(DATA_LEN_MAX))], t0()).await;
    assert_eq!(enqueued[0].as_ref().unwrap_err().code(), "SCHEDULING_VALIDATION_001");
    let manual =
        store.begin_manual_run(&name("small"), &data_of_len(DATA_LEN_MAX), "n1", Uuid::from_u128(9), t0()).await;
    assert_eq!(SchedulingError::from(manual.unwrap_err()).code(), "SCHEDULING_VALIDATION_001");

    // A trigger whose runs could not be stored (data written around validation, e.g. by
    // an older version) goes to Error on its own; the fires due with it still run.
    // Job and trigger data of 60,000 bytes each: a run would merge them past the store's
    // value limit, and without the check every acquisition would fail with 2103.
    let (job_key, trigger_key) = (store.keys().job("small"), store.keys().trigger("small", "t"));
    let kv = store.kv().clone();
    let (job_key, trigger_key) = (&job_key, &trigger_key);
    sundial::kv::run(&kv, RetryOptions::default(), |txn, _| async move {
        let bytes = txn.get(job_key, false).await?.unwrap();
        let mut job: JobRecord = codec::decode(&bytes, "job record").unwrap();
        job.data = serde_json::Value::Object(data_of_len(60_000)).to_string();
        txn.set(job_key, &codec::encode(&job));
        let bytes = txn.get(trigger_key, false).await?.unwrap();
        let mut trigger: TriggerRecord = codec::decode(&bytes, "trigger record").unwrap();
        let mut data = JsonObject::new();
        data.insert("more".into(), "y".repeat(60_000).into());
        trigger.data = serde_json::Value::Object(data).to_string();
        txn.set(trigger_key, &codec::encode(&trigger));
        Ok::<_, StoreError>(())
    })
    .await
    .unwrap();
    let runs = acquire(store, "n1", secs(10), 16).await;
    assert_eq!(runs.iter().map(|r| r.run.job.as_str()).collect::<Vec<_>>(), ["other"]);
    let small = store.trigger_record("small", "t").await.unwrap().unwrap();
    assert_eq!(small.state, TriggerState::Error);
    assert!(small.error.as_deref().unwrap().starts_with("run data is "), "{:?}", small.error);

    // A job's error message of any length is recorded, cut, in the same batch as others.
    let manual = store.begin_manual_run(&name("other"), &JsonObject::new(), "n1", Uuid::from_u128(10), secs(10)).await;
    let message = "é".repeat(100_000);
    let completions = [
        Completion {
            run_id: runs[0].run.id,
            node: "n1".into(),
            outcome: RunOutcome::Failed { code: Some("C".repeat(10_000)), message: message.clone() },
            finished_at: secs(11),
            holds_trigger: runs[0].holds_trigger,
        },
        Completion {
            run_id: manual.unwrap().run.id,
            node: "n1".into(),
            outcome: RunOutcome::Succeeded,
            finished_at: secs(11),
            holds_trigger: None,
        },
    ];
    let results = store.complete_runs(&completions).await;
    assert!(results.iter().all(|r| r.as_ref().is_ok_and(|r| r.recorded)), "{results:?}");
    let stored = store.run_record(runs[0].run.id).await.unwrap().unwrap();
    let kept = stored.error_message.unwrap();
    assert!(kept.len() <= ERROR_MESSAGE_LEN_MAX && kept.ends_with("… (cut from 200000 bytes)"), "{}", kept.len());
    assert!(message.starts_with(kept.trim_end_matches("… (cut from 200000 bytes)")));
    assert!(stored.error_code.unwrap().len() <= ERROR_CODE_LEN_MAX);
}

/// Checks: data heavy batches are split to fit a transaction.
pub async fn data_heavy_batches_are_split_to_fit_a_transaction<K: Kv>(store: &KvJobStore<K>) {
    // 250 fires whose runs each carry 32 KiB of data (job and trigger data at their limit):
    // about 12 MB of writes, more than one transaction may hold (10,000,000 bytes).
    const FIRES: usize = 250;
    let mut trigger_data = JsonObject::new();
    trigger_data.insert("t".into(), "y".repeat(DATA_LEN_MAX - 8).into());
    let defs: Vec<JobDefinition> = (0..FIRES)
        .map(|i| {
            let mut def = job(&format!("heavy-{i:03}"), &[]);
            def.data = data_of_len(DATA_LEN_MAX - 10);
            def.allow_concurrent = true;
            let trigger =
                JobTriggerDefinition::new(TriggerName::new("t").unwrap(), "cron */10 * * * * *".parse().unwrap());
            def.with_trigger(trigger.with_data(trigger_data.clone()))
        })
        .collect();
    assert!(store.schedule(&defs, t0()).await.iter().all(Result::is_ok));
    let mut runs = Vec::new();
    let mut transactions = 0;
    loop {
        let known = running_on(store, "n1").await;
        let taken = store
            .acquire_with_outlook(&request("n1", secs(10), FIRES, &known), Duration::from_secs(1), 16)
            .await
            .unwrap();
        transactions += 1;
        runs.extend(taken.runs);
        if !taken.more {
            break;
        }
    }
    assert_eq!(runs.len(), FIRES, "every fire taken");
    assert!(transactions > 2, "in several transactions, each within its data budget ({transactions})");
    // Their completions in one batch, each with an error message at its limit.
    let completions: Vec<Completion> = runs
        .iter()
        .map(|run| Completion {
            run_id: run.run.id,
            node: "n1".into(),
            outcome: RunOutcome::Failed { code: None, message: "m".repeat(ERROR_MESSAGE_LEN_MAX) },
            finished_at: secs(11),
            holds_trigger: run.holds_trigger,
        })
        .collect();
    let results = store.complete_runs(&completions).await;
    assert!(results.iter().all(|r| r.as_ref().is_ok_and(|r| r.recorded && r.state == RunState::Failed)));
}

/// SPEC §15 on this store's `Kv` and keyspace: the first instance to insert a fire's
/// record runs it, once; `PerJob` holds the job's other fires while it runs; outcomes are
/// written back. (Takeover after a silent lease is timed on a manual clock in
/// tests/coordination.rs.)
pub async fn external_fires_run_once_through_the_execution_coordinator<K: Kv>(store: &KvJobStore<K>) {
    use std::sync::Arc;
    use sundial::coordination::{
        Decision, Declined, ExecutionCoordinator, ExecutionKey, ExecutionRequest, ExecutionStatus, UniqueMode,
    };
    use sundial::entropy::Entropy;
    use sundial::name::{GroupName, ServiceName};
    use sundial::time::ManualClock;

    let clock = Arc::new(ManualClock::new(t0()));
    let instance = |owner: &str, seed| {
        ExecutionCoordinator::new(
            store.kv().clone(),
            store.keys().clone(),
            clock.clone(),
            owner,
            Entropy::from_seed(seed),
        )
    };
    let (a, b) = (instance("instance-a", 1), instance("instance-b", 2));
    let fire = |job: &str, at: DateTime<Utc>, mode| {
        let key =
            ExecutionKey::new(ServiceName::new("billing").unwrap(), GroupName::new("nightly").unwrap(), name(job), at);
        ExecutionRequest::new(key, mode, Duration::from_secs(120))
    };
    let per_fire = fire("invoice", t0(), UniqueMode::PerFireTime);
    let Decision::Granted(first) = a.try_begin(&per_fire).await.unwrap() else { panic!("the first instance runs it") };
    let held = b.try_begin(&per_fire).await.unwrap();
    assert!(matches!(held, Decision::Declined(Declined::Running { .. })), "{held:?}");
    let Decision::Granted(overlapping) =
        b.try_begin(&fire("invoice", secs(60), UniqueMode::PerFireTime)).await.unwrap()
    else {
        panic!("another fire of a PerFireTime job runs beside it")
    };
    a.succeed(&first).await.unwrap();
    b.fail(&overlapping, "card declined").await.unwrap();
    let again = b.try_begin(&per_fire).await.unwrap();
    assert!(matches!(again, Decision::Declined(Declined::AlreadyRan(_))), "{again:?}");
    let record = a.record(&per_fire.key).await.unwrap().unwrap();
    assert_eq!((record.owner.as_str(), record.status), ("instance-a", ExecutionStatus::Succeeded));

    let Decision::Granted(running) = a.try_begin(&fire("report", t0(), UniqueMode::PerJob)).await.unwrap() else {
        panic!("the first fire of a PerJob job runs")
    };
    let busy = b.try_begin(&fire("report", secs(60), UniqueMode::PerJob)).await.unwrap();
    assert!(matches!(busy, Decision::Declined(Declined::JobBusy { .. })), "{busy:?}");
    a.succeed(&running).await.unwrap();
    let next = b.try_begin(&fire("report", secs(60), UniqueMode::PerJob)).await.unwrap();
    assert!(matches!(next, Decision::Granted(_)), "the job is free once its run ended: {next:?}");
}

/// Reads and writes over ranges that hold nothing by construction act alike on every
/// `Kv`: a limit of 0 and an empty or inverted range read nothing, and clearing or
/// adding a conflict over one changes nothing (FoundationDB's own client takes a limit of
/// 0 for "no limit" and refuses an inverted range).
pub async fn zero_limits_and_empty_ranges_read_and_clear_nothing<K: Kv>(store: &KvJobStore<K>) {
    use sundial::kv::{run, KvError, RangeRequest};
    let (root, _) = store.keys().all();
    let key = |name: &str| [root.as_slice(), b"\x00kv-edges/", name.as_bytes()].concat();
    let (a, b, c, end) = (key("a"), key("b"), key("c"), key("d"));
    let kv = store.kv();
    run(kv, RetryOptions::default(), |txn, _| {
        let keys = [a.clone(), b.clone(), c.clone()];
        async move {
            for key in &keys {
                txn.set(key, b"v");
            }
            Ok::<_, KvError>(())
        }
    })
    .await
    .unwrap();
    let requests = [
        RangeRequest::new(a.clone(), end.clone()).limit(0),
        RangeRequest::new(a.clone(), end.clone()).limit(0).reversed(),
        RangeRequest::new(b.clone(), b.clone()),
        RangeRequest::new(c.clone(), a.clone()),
        RangeRequest::new(c.clone(), a.clone()).reversed(),
    ];
    for snapshot in [false, true] {
        let read = run(kv, RetryOptions::default(), |txn, _| {
            let (requests, a, b, c) = (requests.clone(), a.clone(), b.clone(), c.clone());
            async move {
                let mut pairs = Vec::new();
                for request in &requests {
                    pairs.push(txn.get_range(request, snapshot).await?.pairs);
                }
                txn.clear_range(&c, &a);
                txn.clear_range(&b, &b);
                txn.add_read_conflict_range(&c, &a);
                txn.add_write_conflict_range(&c, &a);
                Ok::<_, KvError>(pairs)
            }
        })
        .await
        .unwrap();
        assert!(read.iter().all(Vec::is_empty), "snapshot {snapshot}: {read:?}");
    }
    let left = run(kv, RetryOptions::default(), |txn, _| {
        let request = RangeRequest::new(a.clone(), end.clone());
        async move { Ok::<_, KvError>(txn.get_range(&request, false).await?.pairs) }
    })
    .await
    .unwrap();
    let keys: Vec<Vec<u8>> = left.into_iter().map(|(key, _)| key.into_vec()).collect();
    assert_eq!(keys, vec![a, b, c], "nothing was cleared");
}
