//! History: queries with filters and paging, running runs merged in, scans over several
//! transactions, retention, job status.

use super::*;
use sundial::kv::RangeRequest;

/// Checks: history queries filter page count and expire.
pub async fn history_queries_filter_page_count_and_expire<K: Kv>(store: &KvJobStore<K>) {
    let mut a = job("a", &[("t", "cron * * * * * *")]);
    a.allow_concurrent = true;
    let mut b = job("b", &[("t", "cron * * * * * *")]);
    b.allow_concurrent = true;
    store.schedule(&[a, b], t0()).await;
    for second in 1..=10 {
        for run in acquire(store, if second % 2 == 0 { "even" } else { "odd" }, secs(second), 16).await {
            let outcome = if second % 3 == 0 {
                RunOutcome::Failed { code: Some("E".into()), message: "boom".into() }
            } else {
                RunOutcome::Succeeded
            };
            let node = if second % 2 == 0 { "even" } else { "odd" };
            complete(store, run.run.id, node, outcome, secs(second) + TimeDelta::milliseconds(500)).await;
        }
    }
    let all = sundial::job::JobRunQuery::default();
    assert_eq!(store.count_runs(&all).await.unwrap(), 20);
    let page = store.runs(&sundial::job::JobRunQuery { limit: 3, ..all.clone() }).await.unwrap();
    assert_eq!(page.len(), 3);
    assert!(page.windows(2).all(|p| p[0].run.scheduled_at >= p[1].run.scheduled_at), "newest first");
    assert_eq!(page[0].run.scheduled_at, secs(10));
    let only_a = sundial::job::JobRunQuery { job: Some(name("a")), ..all.clone() };
    assert_eq!(store.count_runs(&only_a).await.unwrap(), 10);
    let failed = sundial::job::JobRunQuery { states: [RunState::Failed].into(), ..all.clone() };
    assert_eq!(store.count_runs(&failed).await.unwrap(), 6);
    let errors = sundial::job::JobRunQuery { has_error: Some(true), node: Some("even".into()), ..all.clone() };
    assert_eq!(store.count_runs(&errors).await.unwrap(), 2, "seconds 6 (both jobs) only");
    let window =
        sundial::job::JobRunQuery { from: Some(secs(3)), to: Some(secs(5)), job: Some(name("b")), ..all.clone() };
    let in_window = store.runs(&window).await.unwrap();
    assert_eq!(in_window.iter().map(|r| r.run.scheduled_at).collect::<Vec<_>>(), vec![secs(4), secs(3)]);
    let skipped = store.runs(&sundial::job::JobRunQuery { skip: 18, ..all.clone() }).await.unwrap();
    assert_eq!(skipped.len(), 2);
    for bad in [
        sundial::job::JobRunQuery { skip: -1, ..all.clone() },
        sundial::job::JobRunQuery { limit: 0, ..all.clone() },
        sundial::job::JobRunQuery { limit: 1001, ..all.clone() },
    ] {
        let err = sundial::SchedulingError::from(store.runs(&bad).await.unwrap_err());
        assert_eq!((err.code(), err.http_status()), ("SCHEDULING_VALIDATION_002", 400));
    }
    // Retention: runs that ended more than 5 s before second 11 go.
    let deleted = store.apply_retention(secs(11), Some(Duration::from_secs(5)), None).await.unwrap();
    assert_eq!(deleted, 10, "seconds 1–5 ended at x.5 < 6");
    assert_eq!(store.count_runs(&all).await.unwrap(), 10);
    assert_eq!(store.apply_retention(secs(11), None, None).await.unwrap(), 0, "zero retention keeps everything");
}

/// Running runs are listed from the running indexes and finished ones from the history
/// index: queries see both, newest scheduled first, each once, with every filter.
pub async fn history_queries_merge_running_runs_by_scheduled_time<K: Kv>(store: &KvJobStore<K>) {
    let mut a = job("a", &[("t", "cron * * * * * *")]);
    a.allow_concurrent = true;
    let mut b = job("b", &[("t", "cron * * * * * *")]);
    b.allow_concurrent = true;
    store.schedule(&[a, b], t0()).await;
    let node = |second: i64| if second % 2 == 0 { "even" } else { "odd" };
    // Seconds 2 and 5 keep running: running runs sit between finished ones, newest and
    // oldest finished on either side.
    let mut running = Vec::new();
    for second in 1..=6 {
        for run in acquire(store, node(second), secs(second), 16).await {
            if second == 2 || second == 5 {
                running.push(run.run.id);
            } else {
                complete(store, run.run.id, node(second), RunOutcome::Succeeded, secs(second)).await;
            }
        }
    }
    let all = sundial::job::JobRunQuery::default();
    let seen = |runs: &[sundial::job::JobRunInfo]| {
        runs.iter().map(|r| (r.run.scheduled_at.timestamp() - t0().timestamp(), r.state)).collect::<Vec<_>>()
    };
    let (done, live) = (RunState::Succeeded, RunState::Running);
    let listed = store.runs(&all).await.unwrap();
    assert_eq!(
        seen(&listed),
        [(6, done), (6, done), (5, live), (5, live), (4, done), (4, done)]
            .into_iter()
            .chain([(3, done), (3, done), (2, live), (2, live), (1, done), (1, done)])
            .collect::<Vec<_>>()
    );
    let mut ids: Vec<Uuid> = listed.iter().map(|r| r.run.id).collect();
    ids.dedup();
    assert_eq!(ids.len(), 12, "each run once");
    assert_eq!(store.count_runs(&all).await.unwrap(), 12);
    assert_eq!(store.count_runs_by_state(&all).await.unwrap(), BTreeMap::from([(done, 8), (live, 4)]));
    let paged = store.runs(&sundial::job::JobRunQuery { skip: 3, limit: 4, ..all.clone() }).await.unwrap();
    assert_eq!(seen(&paged), [(5, live), (4, done), (4, done), (3, done)], "pages cross running and finished runs");
    let only_running = sundial::job::JobRunQuery { states: [RunState::Running].into(), ..all.clone() };
    assert_eq!(seen(&store.runs(&only_running).await.unwrap()), [(5, live), (5, live), (2, live), (2, live)]);
    let even_running = sundial::job::JobRunQuery { node: Some("even".into()), ..only_running.clone() };
    assert_eq!(store.count_runs(&even_running).await.unwrap(), 2);
    let of_a = sundial::job::JobRunQuery { job: Some(name("a")), ..all.clone() };
    assert_eq!(
        seen(&store.runs(&of_a).await.unwrap()),
        [(6, done), (5, live), (4, done), (3, done), (2, live), (1, done)]
    );
    let window = sundial::job::JobRunQuery { from: Some(secs(2)), to: Some(secs(5)), ..of_a.clone() };
    assert_eq!(seen(&store.runs(&window).await.unwrap()), [(4, done), (3, done), (2, live)], "from inclusive, to not");
    let erring = sundial::job::JobRunQuery { has_error: Some(true), ..all.clone() };
    assert_eq!(store.count_runs(&erring).await.unwrap(), 0);
    let t_only = sundial::job::JobRunQuery { trigger: Some(TriggerName::new("t").unwrap()), ..only_running.clone() };
    assert_eq!(store.count_runs(&t_only).await.unwrap(), 4);
    // A run that ends moves from the running index to the history, once.
    let failed = RunOutcome::Failed { code: Some("E".into()), message: "boom".into() };
    complete(store, running[0], "even", failed, secs(7)).await;
    assert_eq!(store.count_runs(&all).await.unwrap(), 12);
    assert_eq!(store.count_runs(&only_running).await.unwrap(), 3);
    let by_state = store.count_runs_by_state(&all).await.unwrap();
    assert_eq!(by_state, BTreeMap::from([(done, 8), (live, 3), (RunState::Failed, 1)]), "one scan, each run once");
    assert_eq!(store.count_runs_by_state_at_most(&all, 12).await.unwrap(), (by_state.clone(), true));
    let (newest, complete) = store.count_runs_by_state_at_most(&all, 4).await.unwrap();
    assert!(!complete, "more runs match than were counted");
    assert_eq!(newest.values().sum::<u64>(), 4, "the newest four");
    assert_eq!(store.count_runs(&erring).await.unwrap(), 1);
    let status = store.status(&name("a")).await.unwrap().unwrap();
    assert_eq!(status.last_finished.map(|r| r.run.scheduled_at), Some(secs(6)));
}

/// A history scan reads at most `SCAN_BUDGET` index entries per transaction: the running
/// runs listed with its first page are merged in on every page, and after the last.
pub async fn a_history_scan_over_several_transactions_merges_running_runs_on_every_page<K: Kv>(store: &KvJobStore<K>) {
    let mut def = job("many", &[]);
    def.allow_concurrent = true;
    store.schedule(&[def], t0()).await;
    let finished = sundial::store::SCAN_BUDGET as i64 + 50;
    let begin = |id: u128, at: i64| manual_run(store, "many", id, at);
    for at in 1..=finished {
        let id = begin(at as u128, at).await;
        complete(store, id, "n1", RunOutcome::Succeeded, secs(at)).await;
    }
    // Running: newer than all, in the first page, in the second, older than all.
    for (i, at) in [finished + 10, finished - 100, 20, 0].into_iter().enumerate() {
        begin(1_000_000 + i as u128, at).await;
    }
    let all = sundial::job::JobRunQuery::default();
    assert_eq!(store.count_runs(&all).await.unwrap(), finished as u64 + 4);
    let at = |runs: Vec<sundial::job::JobRunInfo>| {
        runs.iter().map(|r| (r.run.scheduled_at.timestamp() - t0().timestamp(), r.state)).collect::<Vec<_>>()
    };
    let (done, live) = (RunState::Succeeded, RunState::Running);
    let newest = store.runs(&sundial::job::JobRunQuery { limit: 3, ..all.clone() }).await.unwrap();
    assert_eq!(at(newest), [(finished + 10, live), (finished, done), (finished - 1, done)]);
    let oldest = store.runs(&sundial::job::JobRunQuery { skip: finished - 20, limit: 1000, ..all.clone() }).await;
    let oldest = at(oldest.unwrap());
    assert_eq!(oldest.len(), 24);
    assert_eq!(oldest[..4], [(22, done), (21, done), (20, live), (20, done)], "same time: by run id, newest first");
    assert_eq!(oldest[oldest.len() - 2..], [(1, done), (0, live)]);
    let running = sundial::job::JobRunQuery { states: [RunState::Running].into(), ..all.clone() };
    assert_eq!(store.count_runs(&running).await.unwrap(), 4);
    let by_job = sundial::job::JobRunQuery { job: Some(name("many")), ..all.clone() };
    assert_eq!(store.count_runs(&by_job).await.unwrap(), finished as u64 + 4);
}

/// Retention deletes the runs that ended before the cutoff, over several batches, and
/// keeps one scheduled earlier that ended later; a run that ended before its scheduled
/// time goes once the cutoff passes that time.
pub async fn retention_deletes_by_end_time_past_runs_that_ended_later<K: Kv>(store: &KvJobStore<K>) {
    let mut def = job("kept", &[]);
    def.allow_concurrent = true;
    store.schedule(&[def], t0()).await;
    let begin = |id: u128, at: i64| manual_run(store, "kept", id, at);
    let long = begin(1, 0).await;
    let early = begin(2, 600).await;
    let mut short = Vec::new();
    for i in 1..=300 {
        short.push(begin(1000 + i as u128, i).await);
    }
    complete(store, long, "n1", RunOutcome::Succeeded, secs(1000)).await;
    complete(store, early, "n1", RunOutcome::Succeeded, secs(400)).await;
    for (i, id) in short.iter().enumerate() {
        complete(store, *id, "n1", RunOutcome::Succeeded, secs(i as i64 + 2)).await;
    }
    let all = sundial::job::JobRunQuery::default();
    assert_eq!(store.count_runs(&all).await.unwrap(), 302);
    let deleted = store.purge_history(secs(500), None).await.unwrap();
    assert_eq!(deleted, 300, "every short run, past the long one scheduled first and across batches");
    assert!(store.run_record(long).await.unwrap().is_some(), "ended at 1000: within retention");
    assert!(
        store.run_record(early).await.unwrap().is_some(),
        "ended before it was due: kept until the cutoff passes 600"
    );
    assert_eq!(store.purge_history(secs(700), None).await.unwrap(), 1);
    assert!(store.run_record(early).await.unwrap().is_none());
    assert_eq!(store.purge_history(secs(1000), None).await.unwrap(), 0, "ended at the cutoff: not before it");
    assert_eq!(store.purge_history(secs(1001), None).await.unwrap(), 1);
    assert_eq!(store.count_runs(&all).await.unwrap(), 0);
}

/// Checks: status shows triggers running and last result.
pub async fn status_shows_triggers_running_and_last_result<K: Kv>(store: &KvJobStore<K>) {
    store.schedule(&[job("s", &[("t", "cron */5 * * * * *")])], t0()).await;
    let run = acquire(store, "n1", secs(5), 16).await.remove(0);
    let status = store.status(&name("s")).await.unwrap().unwrap();
    assert_eq!(status.running, 1);
    assert_eq!(status.triggers[0].next_fire, Some(secs(10)));
    assert_eq!(status.triggers[0].previous_fire, Some(secs(5)));
    assert_eq!(status.triggers[0].fire_count, 1);
    complete(store, run.run.id, "n1", RunOutcome::Succeeded, secs(6)).await;
    let status = store.status(&name("s")).await.unwrap().unwrap();
    assert_eq!(status.running, 0);
    assert_eq!(status.last_finished.unwrap().state, RunState::Succeeded);
    assert_eq!(status.definition.triggers[0].schedule.to_string(), "cron */5 * * * * *");
    assert!(store.status(&name("nope")).await.unwrap().is_none());
    assert_eq!(store.statuses().await.unwrap().len(), 1);
}

/// Checks: a non-concurrent job's running run is found as its slot's holder, with no entry
/// in the running index per job (a concurrent job's runs have one); a store written before,
/// which holds such entries, counts and lists each run once, and the run's end clears it.
pub async fn runs_holding_their_slot_are_counted_once_with_or_without_an_index_entry<K: Kv>(store: &KvJobStore<K>) {
    let mut shared = job("shared", &[("t", "cron */5 * * * * *")]);
    shared.allow_concurrent = true;
    store.schedule(&[job("alone", &[("t", "cron */5 * * * * *")]), shared], t0()).await;
    let runs = acquire(store, "n1", secs(5), 16).await;
    let run_of = |job: &str| runs.iter().find(|r| r.run.job.as_str() == job).unwrap().run.id;
    let (alone, shared) = (run_of("alone"), run_of("shared"));
    let kv = store.kv().clone();
    let entries = |job: &'static str| {
        let (kv, keys) = (kv.clone(), store.keys().clone());
        async move {
            let (begin, end) = keys.running_of_job(job);
            let txn = kv.create_transaction().unwrap();
            txn.get_range(&RangeRequest::new(begin, end), true).await.unwrap().pairs.len()
        }
    };
    assert_eq!(entries("alone").await, 0, "a slot's holder has no entry");
    assert_eq!(entries("shared").await, 1);
    let running_of = |job: &str| sundial::job::JobRunQuery {
        job: Some(name(job)),
        states: [RunState::Running].into(),
        ..Default::default()
    };
    for (job, id) in [("alone", alone), ("shared", shared)] {
        assert_eq!(store.status(&name(job)).await.unwrap().unwrap().running, 1, "{job}");
        let listed = store.runs(&running_of(job)).await.unwrap();
        assert_eq!(listed.iter().map(|r| r.run.id).collect::<Vec<_>>(), [id], "{job}");
    }

    // As a store written before left it: the slot's holder has an entry too.
    let entry = store.keys().job_running("alone", alone);
    let entry = &entry;
    sundial::kv::run(&kv, RetryOptions::default(), |txn, _| async move {
        txn.set(entry, b"");
        Ok::<_, StoreError>(())
    })
    .await
    .unwrap();
    assert_eq!(entries("alone").await, 1);
    assert_eq!(store.status(&name("alone")).await.unwrap().unwrap().running, 1, "counted once");
    let brief = store.statuses_brief().await.unwrap();
    assert_eq!(brief.iter().map(|s| s.running).collect::<Vec<_>>(), [1, 1], "counted once in pages too");
    let listed = store.runs(&running_of("alone")).await.unwrap();
    assert_eq!(listed.iter().map(|r| r.run.id).collect::<Vec<_>>(), [alone], "listed once");
    assert_eq!(store.count_runs(&running_of("alone")).await.unwrap(), 1);

    complete(store, alone, "n1", RunOutcome::Succeeded, secs(6)).await;
    complete(store, shared, "n1", RunOutcome::Succeeded, secs(6)).await;
    assert_eq!(entries("alone").await, 0, "its end cleared the entry");
    assert_eq!(entries("shared").await, 0);
    for job in ["alone", "shared"] {
        assert_eq!(store.status(&name(job)).await.unwrap().unwrap().running, 0, "{job}");
        assert!(store.runs(&running_of(job)).await.unwrap().is_empty(), "{job}");
    }
}

/// Checks: every job's status read in pages of jobs (a few range reads each) is what
/// reading each job alone gives, across page boundaries and names that prefix others; the
/// brief form leaves out the latest run only, and filling it in gives it back.
pub async fn statuses_read_in_pages_agree_with_each_jobs_status<K: Kv>(store: &KvJobStore<K>) {
    use sundial::store::STATUS_PAGE;
    // More than a page; "p0010" and "p00100" sort next to each other.
    let mut names: Vec<String> = (0..STATUS_PAGE + 40).map(|i| format!("p{i:04}")).collect();
    names.extend(["p00100".to_owned(), "p00101".to_owned()]);
    let defs: Vec<JobDefinition> = names
        .iter()
        .enumerate()
        .map(|(i, n)| {
            let mut triggers = vec![("t", "cron */10 * * * * *")];
            if i % 7 == 0 {
                triggers.push(("u", "every 00:01:00"));
            }
            job(n, &triggers)
        })
        .collect();
    for batch in defs.chunks(100) {
        assert!(store.schedule(batch, t0()).await.iter().all(Result::is_ok));
    }
    let paused: Vec<JobName> = names.iter().step_by(5).map(|n| name(n)).collect();
    store.set_jobs_paused(&paused, true).await;
    let runs = acquire(store, "n1", secs(10), 40).await;
    assert_eq!(runs.len(), 40);
    for run in &runs[..20] {
        complete(store, run.run.id, "n1", RunOutcome::Succeeded, secs(11)).await;
    }
    let full = store.statuses().await.unwrap();
    let mut each = Vec::new();
    for n in store.job_names().await.unwrap() {
        each.push(store.status(&n).await.unwrap().unwrap());
    }
    assert_eq!(full.len(), names.len());
    assert!(full == each, "read in pages = read one by one");
    assert_eq!(full.iter().filter(|s| s.running == 1).count(), 20);
    assert_eq!(full.iter().filter(|s| s.last_finished.is_some()).count(), 20);
    assert_eq!(full.iter().filter(|s| s.paused).count(), paused.len());
    assert_eq!(full.iter().map(|s| s.triggers.len()).sum::<usize>(), names.len() + names.len().div_ceil(7));
    let mut brief = store.statuses_brief().await.unwrap();
    let without_last: Vec<JobStatus> = full.iter().cloned().map(|s| JobStatus { last_finished: None, ..s }).collect();
    assert!(brief == without_last, "the brief form leaves out the latest run only");
    store.fill_last_finished(&mut brief[STATUS_PAGE - 5..]).await.unwrap();
    assert!(brief[STATUS_PAGE - 5..] == full[STATUS_PAGE - 5..], "filled in where asked");
}

/// The audit log: entries list newest first with every filter and paging, and expire with
/// history.
pub async fn the_audit_log_lists_newest_first_filters_pages_and_expires<K: Kv>(store: &KvJobStore<K>) {
    use sundial::audit::{AuditAction, AuditEntry, AuditQuery};
    let actions = [AuditAction::Schedule, AuditAction::Pause, AuditAction::Trigger];
    for i in 0..12u32 {
        let entry = AuditEntry {
            id: Uuid::from_u128(u128::from(i) + 1),
            at: secs(i64::from(i)),
            actor: if i % 2 == 0 { "ops" } else { "ci" }.into(),
            action: actions[i as usize % 3],
            target: format!("job-{}", i % 4),
            node: "n1".into(),
            error_code: (i % 5 == 0).then(|| "SCHEDULING_NOTFOUND_001".into()),
            error_message: (i % 5 == 0).then(|| "job not registered".into()),
        };
        store.record_audit(&entry).await.unwrap();
        // A replay of the same entry changes nothing.
        store.record_audit(&entry).await.unwrap();
    }
    let all = store.audit(&AuditQuery::default()).await.unwrap();
    assert_eq!(all.len(), 12);
    assert!(all.windows(2).all(|w| w[0].at > w[1].at), "newest first");
    assert_eq!((all[0].actor.as_str(), all[0].action, all[0].target.as_str()), ("ci", AuditAction::Trigger, "job-3"));
    let q = |query: AuditQuery| async move {
        store.audit(&query).await.unwrap().into_iter().map(|e| e.at).collect::<Vec<_>>()
    };
    assert_eq!(
        q(AuditQuery { actor: Some("ops".into()), limit: 2, ..AuditQuery::default() }).await,
        [secs(10), secs(8)]
    );
    assert_eq!(q(AuditQuery { skip: 10, ..AuditQuery::default() }).await, [secs(1), secs(0)]);
    let pauses =
        AuditQuery { actions: vec![AuditAction::Pause], target: Some("job-1".into()), ..AuditQuery::default() };
    assert_eq!(q(pauses).await, [secs(1)]);
    assert_eq!(q(AuditQuery { failed: Some(true), ..AuditQuery::default() }).await, [secs(10), secs(5), secs(0)]);
    let window = AuditQuery { from: Some(secs(3)), to: Some(secs(6)), ..AuditQuery::default() };
    assert_eq!(q(window).await, [secs(5), secs(4), secs(3)]);
    let bad = AuditQuery { limit: 0, ..AuditQuery::default() };
    let err = SchedulingError::from(store.audit(&bad).await.unwrap_err());
    assert_eq!(err.code(), "SCHEDULING_VALIDATION_002");
    // Expiry: entries made more than 5 s before second 12 go with history.
    let deleted = store.apply_retention(secs(12), Some(Duration::from_secs(5)), None).await.unwrap();
    assert_eq!(deleted, 7, "seconds 0–6");
    assert_eq!(q(AuditQuery::default()).await.last(), Some(&secs(7)));
}
