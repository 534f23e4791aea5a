//! Firing: a cron fire taken once, misfire policies, non-concurrent jobs blocking, interval
//! triggers, retries, enqueue and manual runs, pause and resume, unknown job types, a job
//! replaced or deleted, the history cap.

use super::*;

/// Checks: a cron fire is acquired once and the trigger advances.
pub async fn a_cron_fire_is_acquired_once_and_the_trigger_advances<K: Kv>(store: &KvJobStore<K>) {
    let results = store.schedule(&[job("report", &[("every-10s", "cron */10 * * * * *")])], t0()).await;
    assert!(results[0].is_ok(), "{results:?}");
    assert_eq!(trigger_state(store, "report", "every-10s").await, (TriggerState::Waiting, Some(us(secs(10)))));
    assert!(acquire(store, "n1", secs(9), 16).await.is_empty(), "not due yet");
    let runs = acquire(store, "n1", secs(10), 16).await;
    assert_eq!(runs.len(), 1);
    let run = &runs[0];
    assert_eq!((run.run.cause, run.run.attempt, run.run.scheduled_at), (RunCause::Schedule, 1, secs(10)));
    assert_eq!(run.run.trigger.as_ref().unwrap().as_str(), "every-10s");
    assert_eq!(trigger_state(store, "report", "every-10s").await, (TriggerState::Waiting, Some(us(secs(20)))));
    assert!(acquire(store, "n1", secs(10), 16).await.is_empty(), "taken once");
    let stored = store.run_record(run.run.id).await.unwrap().unwrap();
    assert_eq!((stored.state, stored.node.as_str()), (RunState::Running, "n1"));
    // A cron trigger moves on without its run (unknown to a run adopted after an ambiguous
    // commit, never claimed wrongly).
    assert_ne!(run.holds_trigger, Some(true));
    // Told so, the completion leaves the trigger alone (it does not even read it).
    let done = complete_as_started(store, run, "n1", RunOutcome::Succeeded, secs(11)).await;
    assert!(done.recorded);
    assert_eq!(store.run_record(run.run.id).await.unwrap().unwrap().state, RunState::Succeeded);
    assert_eq!(trigger_state(store, "report", "every-10s").await, (TriggerState::Waiting, Some(us(secs(20)))));
}

/// Checks: misfire policies at acquisition.
pub async fn misfire_policies_at_acquisition<K: Kv>(store: &KvJobStore<K>) {
    let mut def = job("m", &[]);
    for (trigger, policy) in
        [("once", MisfirePolicy::RunOnce), ("skip", MisfirePolicy::Skip), ("all", MisfirePolicy::RunAll)]
    {
        def = def.with_trigger(
            JobTriggerDefinition::new(TriggerName::new(trigger).unwrap(), "cron 0 * * * * *".parse().unwrap())
                .with_misfire(policy),
        );
    }
    def.allow_concurrent = true;
    store.schedule(&[def], t0()).await;
    // Due at 60 s; taken at 60 + 150 s: a misfire (threshold 60 s).
    let now = secs(210);
    let runs = acquire(store, "n1", now, 16).await;
    let by_trigger: BTreeMap<String, DateTime<Utc>> =
        runs.iter().map(|r| (r.run.trigger.as_ref().unwrap().to_string(), r.run.scheduled_at)).collect();
    assert_eq!(by_trigger.get("once"), Some(&now), "RunOnce runs now, scheduled now");
    assert_eq!(by_trigger.get("all"), Some(&secs(60)), "RunAll runs the missed time");
    assert!(!by_trigger.contains_key("skip"));
    assert_eq!(trigger_state(store, "m", "once").await.1, Some(us(secs(240))), "next from now");
    assert_eq!(trigger_state(store, "m", "skip").await.1, Some(us(secs(240))), "next from now");
    assert_eq!(trigger_state(store, "m", "all").await.1, Some(us(secs(120))), "next missed time");
    // RunAll catches up one missed fire per acquisition, each saying more is due (so the
    // caller acquires again at once) until the trigger's next fire is not due yet. An
    // acquisition retried after an ambiguous commit cannot tell, and says more may be due:
    // the next one then says what is.
    let mut caught_up = Vec::new();
    let mut said_more = Vec::new();
    while said_more.last() != Some(&false) && said_more.len() < 8 {
        let known = running_on(store, "n1").await;
        let taken = store.acquire_with_outlook(&request("n1", now, 16, &known), Duration::ZERO, 1).await.unwrap();
        caught_up.extend(taken.runs.iter().map(|r| r.run.scheduled_at));
        said_more.push(taken.more);
    }
    assert_eq!(said_more.first(), Some(&true), "another missed fire is due: {said_more:?}");
    assert_eq!(said_more.last(), Some(&false), "{said_more:?}");
    assert_eq!(caught_up, vec![secs(120), secs(180)]);
    assert!(acquire(store, "n1", now, 16).await.is_empty());
}

/// Checks: a non concurrent job blocks and unblocks.
pub async fn a_non_concurrent_job_blocks_and_unblocks<K: Kv>(store: &KvJobStore<K>) {
    store.schedule(&[job("serial", &[("a", "cron * * * * * *"), ("b", "cron */2 * * * * *")])], t0()).await;
    let first = acquire(store, "n1", secs(2), 16).await;
    assert_eq!(first.len(), 1, "one slot");
    assert!(first[0].exclusive);
    let other = if first[0].run.trigger.as_ref().unwrap().as_str() == "a" { "b" } else { "a" };
    assert_eq!(trigger_state(store, "serial", other).await.0, TriggerState::Blocked);
    assert!(acquire(store, "n2", secs(3), 16).await.is_empty(), "still blocked while running");
    assert_eq!(
        store
            .begin_manual_run(&name("serial"), &JsonObject::new(), "n2", Uuid::from_u128(9), secs(3))
            .await
            .unwrap_err()
            .to_string(),
        "SCHEDULING_CONFLICT_001: job is running and does not allow concurrent runs: 'serial'"
    );
    complete(store, first[0].run.id, "n1", RunOutcome::Succeeded, secs(4)).await;
    assert_eq!(trigger_state(store, "serial", other).await.0, TriggerState::Waiting, "unblocked by the completion");
    let next = acquire(store, "n2", secs(4), 16).await;
    assert_eq!(next.len(), 1);
}

/// Checks: an interval trigger waits for its run then one interval.
pub async fn an_interval_trigger_waits_for_its_run_then_one_interval<K: Kv>(store: &KvJobStore<K>) {
    store.schedule(&[job("poll", &[("every", "every 00:00:10 x2")])], t0()).await;
    assert_eq!(trigger_state(store, "poll", "every").await, (TriggerState::Waiting, Some(us(secs(10)))));
    let runs = acquire(store, "n1", secs(10), 16).await;
    assert_eq!(runs.len(), 1);
    assert_ne!(runs[0].holds_trigger, Some(false), "the trigger waits for its run");
    assert_eq!(trigger_state(store, "poll", "every").await, (TriggerState::Acquired, None));
    // Never blocked by its own run, never fired twice while it runs.
    assert!(acquire(store, "n1", secs(30), 16).await.is_empty());
    complete(store, runs[0].run.id, "n1", RunOutcome::Succeeded, secs(25)).await;
    assert_eq!(trigger_state(store, "poll", "every").await, (TriggerState::Waiting, Some(us(secs(35)))));
    // The same with what the acquisition said (the first completion above did not know).
    let second = acquire(store, "n1", secs(35), 16).await;
    complete_as_started(store, &second[0], "n1", RunOutcome::Succeeded, secs(36)).await;
    assert_eq!(trigger_state(store, "poll", "every").await.0, TriggerState::Complete, "repeat count used up");
}

/// Checks: failed runs retry per policy as one shot triggers.
pub async fn failed_runs_retry_per_policy_as_one_shot_triggers<K: Kv>(store: &KvJobStore<K>) {
    let def = job("flaky", &[("at", "once 2027-01-15T08:00:10Z")])
        .with_retry(RetryPolicy::exponential(2, Duration::from_secs(5), None).unwrap());
    store.schedule(&[def], t0()).await;
    let due: DateTime<Utc> = "2027-01-15T08:00:10Z".parse().unwrap();
    let first = acquire(store, "n1", due, 16).await.remove(0);
    let failure = RunOutcome::Failed { code: Some("SCHEDULING_TIMEOUT_001".into()), message: "timed out".into() };
    let done = complete(store, first.run.id, "n1", failure.clone(), due).await;
    let retry_name = done.retry_trigger.expect("a retry trigger");
    assert!(retry_name.starts_with("retry-"));
    assert!(acquire(store, "n1", due + TimeDelta::seconds(4), 16).await.is_empty(), "retry 1 waits 5 s");
    let second = acquire(store, "n1", due + TimeDelta::seconds(5), 16).await.remove(0);
    assert_eq!((second.run.cause, second.run.attempt, second.run.retry_of), (RunCause::Retry, 2, Some(first.run.id)));
    let done = complete(store, second.run.id, "n1", failure.clone(), due + TimeDelta::seconds(5)).await;
    assert!(done.retry_trigger.is_some());
    let third = acquire(store, "n1", due + TimeDelta::seconds(15), 16).await.remove(0);
    assert_eq!((third.run.attempt, third.run.retry_of), (3, Some(first.run.id)), "retry 2 waits 10 s, chain kept");
    let done = complete(store, third.run.id, "n1", failure, due + TimeDelta::seconds(15)).await;
    assert_eq!(done.retry_trigger, None, "max_retries reached");
    // Canceled runs never retry.
    let fourth =
        store.begin_manual_run(&name("flaky"), &JsonObject::new(), "n1", Uuid::from_u128(77), due).await.unwrap();
    let done = complete(store, fourth.run.id, "n1", RunOutcome::Canceled { message: "stop".into() }, due).await;
    assert_eq!((done.state, done.retry_trigger), (RunState::Canceled, None));
}

/// Checks: enqueue and manual runs.
pub async fn enqueue_and_manual_runs<K: Kv>(store: &KvJobStore<K>) {
    let mut def = job("adhoc", &[]);
    def.data.insert("base".into(), 1.into());
    def.data.insert("over".into(), "job".into());
    store.schedule(&[def], t0()).await;
    let mut data = JsonObject::new();
    data.insert("over".into(), "request".into());
    let names = store.enqueue(&[(name("adhoc"), data.clone()), (name("missing"), JsonObject::new())], secs(1)).await;
    let trigger = names[0].as_ref().unwrap().clone();
    assert!(trigger.as_str().starts_with("manual-"));
    assert_eq!(names[1].as_ref().unwrap_err().code(), "SCHEDULING_NOTFOUND_001");
    let runs = acquire(store, "n2", secs(1), 16).await;
    assert_eq!(runs.len(), 1);
    assert_eq!(runs[0].run.cause, RunCause::Manual);
    assert_eq!(serde_json::Value::Object(runs[0].run.data.clone()), serde_json::json!({"base": 1, "over": "request"}));
    assert!(store.trigger_record("adhoc", trigger.as_str()).await.unwrap().is_none(), "one-shot trigger consumed");
    complete(store, runs[0].run.id, "n2", RunOutcome::Succeeded, secs(2)).await;
    let manual = store.begin_manual_run(&name("adhoc"), &data, "n1", Uuid::from_u128(5), secs(2)).await.unwrap();
    assert_eq!((manual.run.cause, manual.run.trigger.clone()), (RunCause::Manual, None));
    assert_eq!(
        store.begin_manual_run(&name("nope"), &data, "n1", Uuid::from_u128(6), secs(2)).await.unwrap_err().to_string(),
        "SCHEDULING_NOTFOUND_001: job not registered: 'nope'"
    );
}

/// Checks: pause and resume jobs and triggers.
pub async fn pause_and_resume_jobs_and_triggers<K: Kv>(store: &KvJobStore<K>) {
    store.schedule(&[job("p", &[("a", "cron 0 * * * * *"), ("b", "cron 0 * * * * *")])], t0()).await;
    assert!(store.set_jobs_paused(&[name("p")], true).await[0].is_ok());
    assert_eq!(trigger_state(store, "p", "a").await.0, TriggerState::Paused);
    assert!(acquire(store, "n1", secs(60), 16).await.is_empty());
    let key = TriggerKey::new(name("p"), TriggerName::new("b").unwrap());
    store.set_triggers_paused(std::slice::from_ref(&key), true).await;
    store.set_jobs_paused(&[name("p")], false).await;
    assert_eq!(trigger_state(store, "p", "a").await.0, TriggerState::Waiting);
    assert_eq!(trigger_state(store, "p", "b").await.0, TriggerState::Paused, "individually paused");
    // Resumed after a long pause: the missed fire follows the misfire policy (RunOnce).
    let runs = acquire(store, "n1", secs(600), 16).await;
    assert_eq!(runs.len(), 1);
    assert_eq!(runs[0].run.scheduled_at, secs(600));
    let missing = TriggerKey::new(name("p"), TriggerName::new("zz").unwrap());
    assert_eq!(
        store.set_triggers_paused(&[missing], true).await[0].as_ref().unwrap_err().code(),
        "SCHEDULING_NOTFOUND_003"
    );
    assert_eq!(
        store.set_jobs_paused(&[name("zz")], true).await[0].as_ref().unwrap_err().code(),
        "SCHEDULING_NOTFOUND_001"
    );
}

/// Checks: unknown job types put the trigger in error.
pub async fn unknown_job_types_put_the_trigger_in_error<K: Kv>(store: &KvJobStore<K>) {
    store.schedule(&[job("typed", &[("t", "cron * * * * * *")])], t0()).await;
    let known: BTreeSet<String> = ["other::Job".to_owned()].into();
    let none = BTreeSet::new();
    let mut req = request("n1", secs(1), 16, &none);
    req.known_types = Some(&known);
    assert!(store.acquire_due(&req).await.unwrap().is_empty());
    let trigger = store.trigger_record("typed", "t").await.unwrap().unwrap();
    assert_eq!(trigger.state, TriggerState::Error);
    assert!(trigger.error.unwrap().contains("'test::Job' is not registered on node 'n1'"));
}

/// Checks: schedule replaces and unschedule deletes.
pub async fn schedule_replaces_and_unschedule_deletes<K: Kv>(store: &KvJobStore<K>) {
    store.schedule(&[job("r", &[("keep", "cron 0 0 * * * *"), ("drop", "cron 0 0 * * * *")])], t0()).await;
    let kept_before = store.trigger_record("r", "keep").await.unwrap().unwrap();
    store
        .schedule(
            &[job("r", &[("keep", "cron 0 0 * * * *"), ("new", "every 00:01:00")])],
            t0() + TimeDelta::seconds(30),
        )
        .await;
    assert!(store.trigger_record("r", "drop").await.unwrap().is_none());
    assert_eq!(store.trigger_record("r", "keep").await.unwrap().unwrap().uid, kept_before.uid, "progress kept");
    assert_eq!(trigger_state(store, "r", "new").await.1, Some(us(secs(90))));
    let record = store.job_record("r").await.unwrap().unwrap();
    assert_eq!((record.origin, record.revision), (sundial::job::JobOrigin::Runtime, 2));
    let bad = job("bad", &[("t", "manual")]);
    assert_eq!(store.schedule(&[bad], t0()).await[0].as_ref().unwrap_err().code(), "SCHEDULING_VALIDATION_001");
    let with_calendar = job("cal", &[("t", "cron 0 0 * * * * calendar=holidays")]);
    assert_eq!(
        store.schedule(&[with_calendar], t0()).await[0].as_ref().unwrap_err().code(),
        "SCHEDULING_VALIDATION_001"
    );
    assert!(store.unschedule(&[name("r")]).await[0].is_ok());
    assert!(store.job_record("r").await.unwrap().is_none());
    assert!(store.trigger_record("r", "keep").await.unwrap().is_none());
    assert_eq!(store.unschedule(&[name("r")]).await[0].as_ref().unwrap_err().code(), "SCHEDULING_NOTFOUND_001");
    assert!(acquire(store, "n1", secs(100_000), 16).await.is_empty(), "no orphaned due entries");
}

/// The store must be built with `max_runs: Some(3)`.
pub async fn history_cap_evicts_finished_runs_and_refuses_when_all_run<K: Kv>(store: &KvJobStore<K>) {
    let mut def = job("capped", &[]);
    def.allow_concurrent = true;
    store.schedule(&[def], t0()).await;
    let mut ids = Vec::new();
    for i in 0..3u128 {
        ids.push(
            store
                .begin_manual_run(&name("capped"), &JsonObject::new(), "n1", Uuid::from_u128(100 + i), secs(i as i64))
                .await
                .unwrap()
                .run
                .id,
        );
    }
    let full = store
        .begin_manual_run(&name("capped"), &JsonObject::new(), "n1", Uuid::from_u128(200), secs(5))
        .await
        .unwrap_err();
    assert_eq!(sundial::SchedulingError::from(full).code(), "SCHEDULING_UNAVAILABLE_004");
    complete(store, ids[1], "n1", RunOutcome::Succeeded, secs(6)).await;
    store.begin_manual_run(&name("capped"), &JsonObject::new(), "n1", Uuid::from_u128(201), secs(7)).await.unwrap();
    assert!(store.run_record(ids[1]).await.unwrap().is_none(), "the finished run was evicted");
    assert!(store.run_record(ids[0]).await.unwrap().is_some(), "running runs are kept");
}
