//! Jobs: code-job sync, local jobs, lookahead, one-shots without leadership, a restarted
//! process's runs, a job deleted and added again, batched completions.

use super::*;

/// Checks: code jobs sync with the fingerprint rules and restore.
pub async fn code_jobs_sync_with_the_fingerprint_rules_and_restore<K: Kv>(store: &KvJobStore<K>) {
    use sundial::store::SyncOutcome;
    let code = job("code", &[("t", "cron 0 * * * * *")]);
    assert_eq!(store.sync_code_job(&code, t0()).await.unwrap(), SyncOutcome::Created);
    assert_eq!(store.sync_code_job(&code, t0()).await.unwrap(), SyncOutcome::Unchanged);
    // Overridden at run time; paused.
    store.schedule(&[job("code", &[("t", "cron 30 * * * * *")])], t0()).await;
    store.set_jobs_paused(&[name("code")], true).await;
    let stored = store.job_record("code").await.unwrap().unwrap();
    assert_eq!(stored.origin, sundial::job::JobOrigin::Overridden);
    // Restart with the same code: the runtime change stays.
    assert_eq!(store.sync_code_job(&code, t0()).await.unwrap(), SyncOutcome::KeptOverride);
    assert_eq!(store.trigger_record("code", "t").await.unwrap().unwrap().schedule, "cron 30 * * * * *");
    // Restart with changed code: written back, paused kept, the caller warned.
    let changed = job("code", &[("t", "cron 15 * * * * *")]);
    assert_eq!(
        store.sync_code_job(&changed, t0()).await.unwrap(),
        SyncOutcome::Rewritten { overwrote_runtime_change: true }
    );
    let stored = store.job_record("code").await.unwrap().unwrap();
    assert_eq!((stored.origin, stored.paused), (sundial::job::JobOrigin::Code, true));
    // Restore after another override.
    store.schedule(&[job("code", &[("t", "cron 45 * * * * *")])], t0()).await;
    store.restore(&changed, t0()).await.unwrap();
    assert_eq!(store.trigger_record("code", "t").await.unwrap().unwrap().schedule, "cron 15 * * * * *");
    assert_eq!(store.job_record("code").await.unwrap().unwrap().origin, sundial::job::JobOrigin::Code);
    // A deleted code job comes back at the next start.
    store.unschedule(&[name("code")]).await;
    assert_eq!(store.sync_code_job(&changed, t0()).await.unwrap(), SyncOutcome::Created);
}

/// Checks: code jobs sync in batches each job with its own outcome.
pub async fn code_jobs_sync_in_batches_each_job_with_its_own_outcome<K: Kv>(store: &KvJobStore<K>) {
    use sundial::store::SyncOutcome;
    // A running non-concurrent cluster job that the code now makes local: refused while
    // its run goes, in the middle of a batch.
    let busy = job("j0040", &[("t", "cron */10 * * * * *")]);
    store.schedule(std::slice::from_ref(&busy), t0()).await;
    let run = acquire(store, "n1", secs(10), 16).await.remove(0);
    let mut defs: Vec<JobDefinition> =
        (0..150).map(|i| job(&format!("j{i:04}"), &[("t", "cron 0 * * * * *")])).collect();
    defs[40].run_on_every_instance = true;
    // An invalid definition: a trigger naming a calendar nobody registered.
    defs[100] = job("j0100", &[("t", "cron 0 * * * * * calendar=nowhere")]);
    let refs: Vec<&JobDefinition> = defs.iter().collect();
    let outcomes = store.sync_code_jobs(&refs, secs(11)).await.unwrap();
    assert_eq!(outcomes.len(), 150, "one outcome per job, in order");
    let code = |o: &Result<SyncOutcome, sundial::store::StoreError>| {
        o.as_ref().map_err(|e| sundial::error::SchedulingError::from(e.clone()).code()).copied()
    };
    assert_eq!(code(&outcomes[40]), Err("SCHEDULING_CONFLICT_001"));
    assert_eq!(code(&outcomes[100]), Err("SCHEDULING_VALIDATION_001"));
    for (i, outcome) in outcomes.iter().enumerate().filter(|(i, _)| ![40, 100].contains(i)) {
        assert_eq!(code(outcome), Ok(SyncOutcome::Created), "job {i}");
    }
    assert!(store.job_record("j0100").await.unwrap().is_none(), "nothing written for the refused one");
    assert!(store.job_record("j0040").await.unwrap().is_some_and(|j| !j.run_on_every_instance), "unchanged");
    assert_eq!(store.statuses().await.unwrap().len(), 149);
    // Again once the run ended, the invalid one left out: the switch goes through, the
    // rest stays.
    complete(store, run.run.id, "n1", RunOutcome::Succeeded, secs(12)).await;
    let refs: Vec<&JobDefinition> = defs.iter().filter(|d| d.name.as_str() != "j0100").collect();
    let outcomes = store.sync_code_jobs(&refs, secs(13)).await.unwrap();
    assert_eq!(code(&outcomes[40]), Ok(SyncOutcome::Rewritten { overwrote_runtime_change: true }));
    assert!(outcomes.iter().enumerate().all(|(i, o)| i == 40 || code(o) == Ok(SyncOutcome::Unchanged)));
    assert!(store.job_record("j0040").await.unwrap().is_some_and(|j| j.run_on_every_instance));
}

/// Checks: local jobs stay out of acquisition but their runs go to history.
pub async fn local_jobs_stay_out_of_acquisition_but_their_runs_go_to_history<K: Kv>(store: &KvJobStore<K>) {
    let mut local = job("local", &[("t", "cron * * * * * *")]);
    local.run_on_every_instance = true;
    store.schedule(&[local], t0()).await;
    assert!(acquire(store, "n1", secs(5), 16).await.is_empty(), "never acquired through the store");
    let locals = store.local_jobs().await.unwrap();
    assert_eq!(locals.len(), 1);
    assert_eq!(locals[0].definition.name.as_str(), "local");
    let job_run = sundial::job::JobRun {
        id: Uuid::from_u128(42),
        job: name("local"),
        trigger: Some(TriggerName::new("t").unwrap()),
        scheduled_at: secs(5),
        cause: RunCause::Schedule,
        attempt: 1,
        retry_of: None,
        data: JsonObject::new(),
    };
    assert!(store.begin_local_run(&job_run, "n1", secs(5)).await.unwrap());
    assert!(store.begin_local_run(&job_run, "n1", secs(5)).await.unwrap(), "a retry after an ambiguous commit");
    // A run the node reclaimed as lost (it never knew its start committed) never starts.
    let mut unknown = job_run.clone();
    unknown.id = Uuid::from_u128(43);
    assert!(store.begin_local_run(&unknown, "n1", secs(5)).await.unwrap());
    let known = std::collections::BTreeSet::from([job_run.id]);
    let reclaimed = store.reclaim_previous_runs("n1", &known, secs(5), 64).await.unwrap();
    assert_eq!(reclaimed.lost_runs, vec![unknown.id]);
    assert!(!store.begin_local_run(&unknown, "n1", secs(5)).await.unwrap(), "ended: not started again");
    let failure = RunOutcome::Failed { code: Some("E".into()), message: "x".into() };
    let done = complete(store, job_run.id, "n1", failure, secs(6)).await;
    assert_eq!(done.retry_trigger, None, "local jobs retry in process, not in the store");
    assert_eq!(store.count_runs(&sundial::job::JobRunQuery::default()).await.unwrap(), 2);
}

/// `local_jobs_since` answers `None` while nothing a node's local triggers depend on
/// changed, and a fresh listing after each kind of change: a local job defined, a trigger
/// of it paused, the job paused, turned into a cluster job, and deleted. Runs, acquisitions
/// and completions change nothing.
pub async fn local_jobs_are_reread_only_after_a_change<K: Kv>(store: &KvJobStore<K>) {
    let first = store.local_jobs_since(None).await.unwrap().expect("the first read always lists");
    assert!(first.jobs.is_empty());
    assert_eq!(store.local_jobs_since(Some(first.stamp)).await.unwrap(), None);
    let mut local = job("local", &[("t", "cron * * * * * *")]);
    local.run_on_every_instance = true;
    let mut cluster = job("cluster", &[("t", "cron * * * * * *")]);
    cluster.allow_concurrent = true;
    store.schedule(&[local.clone(), cluster], t0()).await;
    let listed = store.local_jobs_since(Some(first.stamp)).await.unwrap().expect("a local job was defined");
    assert_eq!(listed.jobs.len(), 1);
    let mut stamp = listed.stamp;

    // Cluster work leaves the stamp alone.
    let runs = acquire(store, "n1", secs(5), 16).await;
    assert_eq!(runs.len(), 1);
    complete(store, runs[0].run.id, "n1", RunOutcome::Succeeded, secs(5)).await;
    assert_eq!(store.local_jobs_since(Some(stamp)).await.unwrap(), None, "cluster runs change no local job");

    let check = |what: &str, listing: Option<LocalJobs>, stamp: &mut u64, expect: &dyn Fn(&LocalJobs) -> bool| {
        let listing = listing.unwrap_or_else(|| panic!("{what}: the stamp did not move"));
        assert!(expect(&listing), "{what}: {listing:?}");
        assert!(listing.stamp > *stamp);
        *stamp = listing.stamp;
    };
    let key = TriggerKey::new(name("local"), TriggerName::new("t").unwrap());
    store.set_triggers_paused(std::slice::from_ref(&key), true).await[0].as_ref().unwrap();
    let paused_one = |l: &LocalJobs| l.jobs[0].paused_triggers.len() == 1;
    check("trigger paused", store.local_jobs_since(Some(stamp)).await.unwrap(), &mut stamp, &paused_one);
    store.set_jobs_paused(&[name("local")], true).await[0].as_ref().unwrap();
    check("job paused", store.local_jobs_since(Some(stamp)).await.unwrap(), &mut stamp, &|l| l.jobs[0].paused);
    local.run_on_every_instance = false;
    store.schedule(&[local], t0()).await[0].as_ref().unwrap();
    check("no longer local", store.local_jobs_since(Some(stamp)).await.unwrap(), &mut stamp, &|l| l.jobs.is_empty());
    let mut again = job("local", &[("t", "cron * * * * * *")]);
    again.run_on_every_instance = true;
    store.schedule(&[again], t0()).await[0].as_ref().unwrap();
    check("local again", store.local_jobs_since(Some(stamp)).await.unwrap(), &mut stamp, &|l| l.jobs.len() == 1);
    store.unschedule(&[name("local")]).await[0].as_ref().unwrap();
    check("deleted", store.local_jobs_since(Some(stamp)).await.unwrap(), &mut stamp, &|l| l.jobs.is_empty());
    assert_eq!(store.local_jobs_since(Some(stamp)).await.unwrap(), None);
}

/// A fire due within the lookahead is taken early with its own scheduled time (not a
/// misfire); one due later is not.
pub async fn lookahead_takes_fires_due_soon_with_their_own_time<K: Kv>(store: &KvJobStore<K>) {
    let mut def = job("soon", &[("a", "cron 10 * * * * *"), ("b", "cron 40 * * * * *")]);
    def.allow_concurrent = true;
    store.schedule(&[def], t0()).await;
    let known = BTreeSet::new();
    let mut req = request("n1", secs(9), 16, &known);
    req.lookahead = Duration::from_millis(1_500);
    let runs = store.acquire_due(&req).await.unwrap();
    assert_eq!(runs.len(), 1);
    assert_eq!(runs[0].run.scheduled_at, secs(10), "its own time, ahead of now");
    assert_eq!(runs[0].run.trigger.as_ref().unwrap().as_str(), "a");
    // b is due at 40 s: beyond a 1.5 s lookahead from 37 s, nobody takes it yet.
    let mut early = request("n1", secs(37), 16, &known);
    early.lookahead = Duration::from_millis(1_500);
    assert!(store.acquire_due(&early).await.unwrap().is_empty());
    early.now = secs(38) + TimeDelta::milliseconds(600);
    let b = store.acquire_due(&early).await.unwrap();
    assert_eq!(b.len(), 1);
    assert_eq!(b[0].run.scheduled_at, secs(40));
}

/// A non-leader on a store of its own (`scheduled: false`) takes enqueued one-shot fires
/// even behind many due scheduled ones, and leaves the scheduled ones waiting at their due
/// time; a later request with `scheduled: true` (the node leads) takes them.
pub async fn without_scheduled_fires_only_one_shot_triggers_are_taken<K: Kv>(store: &KvJobStore<K>) {
    let crons: Vec<JobDefinition> = (0..40)
        .map(|i| {
            let mut def = job(&format!("cron{i:02}"), &[("t", "cron * * * * * *")]);
            def.allow_concurrent = true;
            def
        })
        .collect();
    store.schedule(&crons, t0()).await;
    store.schedule(&[job("adhoc", &[])], t0()).await;
    let names = store.enqueue(&[(name("adhoc"), JsonObject::new())], secs(5)).await;
    let manual = names[0].as_ref().unwrap().clone();
    let known = BTreeSet::new();
    let mut follower = request("n1", secs(5), 2, &known);
    follower.scheduled = false;
    let runs = store.acquire_due(&follower).await.unwrap();
    assert_eq!(runs.len(), 1, "only the one-shot fire");
    assert_eq!((runs[0].run.cause, runs[0].run.trigger.as_ref()), (RunCause::Manual, Some(&manual)));
    assert!(store.acquire_due(&follower).await.unwrap().is_empty());
    assert_eq!(trigger_state(store, "cron07", "t").await, (TriggerState::Waiting, Some(us(secs(1)))));
    // Leading now; 4 s late is within the misfire threshold, so each runs at its due time.
    let known = running_on(store, "n1").await;
    let leader = request("n1", secs(5), 100, &known);
    let runs = store.acquire_due(&leader).await.unwrap();
    assert_eq!(runs.len(), 40);
    assert!(runs.iter().all(|r| r.run.cause == RunCause::Schedule && r.run.scheduled_at == secs(1)));
}

/// Found by simulation seed 2: a one-shot trigger (here an enqueued run) blocked behind a
/// non-concurrent job's running run, unblocked while the job was paused, became `Paused` —
/// and resuming the job never touches one-shot triggers, so it never ran. One-shot
/// triggers ignore pause.
pub async fn a_one_shot_trigger_unblocked_while_its_job_is_paused_still_runs<K: Kv>(store: &KvJobStore<K>) {
    store.schedule(&[job("serial", &[("a", "cron 0 * * * * *")])], t0()).await;
    let first = acquire(store, "n1", secs(60), 16).await;
    assert_eq!(first.len(), 1);
    let names = store.enqueue(&[(name("serial"), JsonObject::new())], secs(61)).await;
    let manual = names[0].as_ref().unwrap().clone();
    assert!(acquire(store, "n1", secs(62), 16).await.is_empty());
    assert_eq!(trigger_state(store, "serial", manual.as_str()).await.0, TriggerState::Blocked);
    assert!(store.set_jobs_paused(&[name("serial")], true).await[0].is_ok());
    complete(store, first[0].run.id, "n1", RunOutcome::Succeeded, secs(63)).await;
    assert_eq!(trigger_state(store, "serial", manual.as_str()).await.0, TriggerState::Waiting);
    let runs = acquire(store, "n1", secs(64), 16).await;
    assert_eq!(runs.len(), 1, "the enqueued run goes ahead while the job is paused");
    assert_eq!(runs[0].run.trigger.as_ref(), Some(&manual));
}

/// Found by simulation seed 1: a node that crashed and restarted under the same id kept
/// heartbeating, so the leader never declared its old runs lost; they stayed `Running`
/// (and an ambiguous acquisition of the new process adopted and re-ran them). The new
/// process reclaims them: `Lost`, slot freed, recovered once when the job asks.
pub async fn a_restarted_process_reclaims_the_runs_its_predecessor_left<K: Kv>(store: &KvJobStore<K>) {
    let mut recovering = job("again", &[("t", "cron 0 * * * * *")]);
    recovering.requests_recovery = true;
    store.schedule(&[recovering, job("other", &[("t", "cron 0 * * * * *")])], t0()).await;
    store.heartbeat("phoenix", secs(59), None, false).await.unwrap();
    let old = acquire(store, "phoenix", secs(60), 16).await;
    assert_eq!(old.len(), 2);
    // The new process already runs one run of its own when it reclaims.
    store.enqueue(&[(name("other"), JsonObject::new())], secs(65)).await;
    complete(
        store,
        old.iter().find(|r| r.run.job.as_str() == "other").unwrap().run.id,
        "phoenix",
        RunOutcome::Succeeded,
        secs(64),
    )
    .await;
    let own = acquire(store, "phoenix", secs(65), 16).await;
    assert_eq!(own.len(), 1);
    let known: BTreeSet<Uuid> = own.iter().map(|r| r.run.id).collect();
    let mut step = store.reclaim_previous_runs("phoenix", &known, secs(66), 64).await.unwrap();
    while step.more {
        step = store.reclaim_previous_runs("phoenix", &known, secs(66), 64).await.unwrap();
    }
    let left = old.iter().find(|r| r.run.job.as_str() == "again").unwrap();
    assert_eq!(store.run_record(left.run.id).await.unwrap().unwrap().state, RunState::Lost);
    assert_eq!(store.run_record(own[0].run.id).await.unwrap().unwrap().state, RunState::Running, "its own run stays");
    // Once: a second call finds nothing; the recovery runs, and the slot is free for it.
    let again = store.reclaim_previous_runs("phoenix", &known, secs(67), 64).await.unwrap();
    assert!(again.lost_runs.is_empty());
    let recovered = acquire(store, "elsewhere", secs(67), 16).await;
    assert_eq!(recovered.len(), 1);
    assert_eq!((recovered[0].run.cause, recovered[0].run.job.as_str()), (RunCause::Recovery, "again"));
}

/// Found by simulation seed 23: unscheduling a non-concurrent job cleared its slot while
/// its run still ran, so the job added again under the same name ran beside it.
pub async fn a_job_deleted_and_added_again_waits_for_its_old_run<K: Kv>(store: &KvJobStore<K>) {
    let def = job("again", &[("t", "cron */10 * * * * *")]);
    store.schedule(std::slice::from_ref(&def), t0()).await;
    let old = acquire(store, "n1", secs(10), 16).await;
    assert_eq!(old.len(), 1);
    assert!(store.unschedule(&[name("again")]).await[0].is_ok());
    store.schedule(std::slice::from_ref(&def), secs(11)).await;
    assert!(acquire(store, "n2", secs(20), 16).await.is_empty(), "the old run still holds the slot");
    assert_eq!(trigger_state(store, "again", "t").await.0, TriggerState::Blocked);
    complete(store, old[0].run.id, "n1", RunOutcome::Succeeded, secs(21)).await;
    let next = acquire(store, "n2", secs(21), 16).await;
    assert_eq!(next.len(), 1, "unblocked by the old run's end");
    // Deleted for good while running: the run's end leaves no slot behind.
    assert!(store.unschedule(&[name("again")]).await[0].is_ok());
    complete(store, next[0].run.id, "n2", RunOutcome::Succeeded, secs(22)).await;
    store.schedule(std::slice::from_ref(&def), secs(23)).await;
    assert_eq!(acquire(store, "n2", secs(30), 16).await.len(), 1);
}

/// Checks: batched completions act as each one alone.
pub async fn batched_completions_act_as_each_one_alone<K: Kv>(store: &KvJobStore<K>) {
    let serial = job("serial", &[("a", "cron * * * * * *"), ("b", "cron */2 * * * * *")]);
    let flaky = job("flaky", &[("at", "once 2027-01-15T08:00:02Z")])
        .with_retry(RetryPolicy::fixed(1, Duration::from_secs(5)).unwrap());
    let poll = job("poll", &[("every", "every 00:00:02")]);
    let results = store.schedule(&[serial, flaky, poll], t0()).await;
    assert!(results.iter().all(Result::is_ok), "{results:?}");
    let runs = acquire(store, "n1", secs(2), 16).await;
    assert_eq!(runs.len(), 3, "one of serial (the other blocked), flaky, poll");
    let id_of = |job: &str| runs.iter().find(|r| r.run.job.as_str() == job).unwrap().run.id;
    let blocked = if runs.iter().any(|r| r.run.trigger.as_ref().unwrap().as_str() == "a") { "b" } else { "a" };
    assert_eq!(trigger_state(store, "serial", blocked).await.0, TriggerState::Blocked);
    let failure = RunOutcome::Failed { code: None, message: "boom".into() };
    let completion = |id: Uuid, outcome: RunOutcome| Completion {
        run_id: id,
        node: "n1".into(),
        outcome,
        finished_at: secs(3),
        holds_trigger: None,
    };
    let batch = [
        completion(id_of("serial"), RunOutcome::Succeeded),
        completion(id_of("flaky"), failure.clone()),
        completion(id_of("poll"), RunOutcome::Succeeded),
        // A run finished twice in one batch: the second is a late duplicate.
        completion(id_of("poll"), RunOutcome::Succeeded),
    ];
    let results = store.complete_runs(&batch).await;
    let results: Vec<CompletionResult> = results.into_iter().map(Result::unwrap).collect();
    assert_eq!(results.iter().map(|r| r.recorded).collect::<Vec<_>>(), [true, true, true, false]);
    assert!(results[1].retry_trigger.is_some(), "the failed run got its retry");
    assert_eq!(trigger_state(store, "serial", blocked).await.0, TriggerState::Waiting, "slot released, unblocked");
    assert_eq!(trigger_state(store, "poll", "every").await, (TriggerState::Waiting, Some(us(secs(5)))));
    for (job, state) in [("serial", RunState::Succeeded), ("flaky", RunState::Failed), ("poll", RunState::Succeeded)] {
        assert_eq!(store.run_record(id_of(job)).await.unwrap().unwrap().state, state, "{job}");
    }

    // An unknown run fails alone; the others in its batch are still recorded.
    let more = acquire(store, "n1", secs(5), 16).await;
    assert!(!more.is_empty());
    let mut batch: Vec<Completion> = more.iter().map(|r| completion(r.run.id, RunOutcome::Succeeded)).collect();
    batch.insert(0, completion(Uuid::from_u128(77), RunOutcome::Succeeded));
    let results = store.complete_runs(&batch).await;
    assert_eq!(
        results[0].as_ref().unwrap_err().to_string(),
        "SCHEDULING_NOTFOUND_004: run not found or already finished: 00000000-0000-0000-0000-00000000004d"
    );
    assert!(results[1..].iter().all(|r| r.as_ref().is_ok_and(|r| r.recorded)), "{results:?}");
}
