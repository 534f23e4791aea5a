//! The due index: the outlook an acquisition returns, known shard heads, fires a node
//! leaves waiting.

use super::*;

/// Each node's outlook covers its home shards (`first`, `count`) and the others
/// (`first_elsewhere`); across the live nodes every waiting fire is home to exactly one.
pub async fn the_due_outlook_splits_home_fires_from_the_others<K: Kv>(store: &KvJobStore<K>) {
    let day = Duration::from_secs(86_400);
    assert_eq!(
        store.due_outlook("a", DueFilter::EVERY, day, 1_000).await.unwrap(),
        DueOutlook::default(),
        "nothing waiting"
    );
    let triggers: Vec<(String, String)> =
        (0..40).map(|i| (format!("t{i}"), format!("once {}", format_instant(secs(10 + i % 7))))).collect();
    let triggers: Vec<(&str, &str)> = triggers.iter().map(|(n, s)| (n.as_str(), s.as_str())).collect();
    let mut def = job("o", &triggers);
    def.allow_concurrent = true;
    store.schedule(&[def], t0()).await;
    // Alone (not even registered), every shard is home.
    let alone = store.due_outlook("a", DueFilter::EVERY, day, 1_000).await.unwrap();
    assert_eq!((alone.first, alone.count, alone.first_elsewhere), (Some(secs(10)), 40, None));
    assert_eq!(
        store.due_outlook("a", DueFilter::EVERY, Duration::from_secs(1), 1_000).await.unwrap().count,
        12,
        "due at 10 s or 11 s"
    );
    assert_eq!(store.due_outlook("a", DueFilter::EVERY, day, 5).await.unwrap().count, 5, "counted up to the limit");
    // Two live nodes share the shards.
    store.heartbeat("a", t0(), None, false).await.unwrap();
    store.heartbeat("b", t0(), None, false).await.unwrap();
    let a = store.due_outlook("a", DueFilter::EVERY, day, 1_000).await.unwrap();
    let b = store.due_outlook("b", DueFilter::EVERY, day, 1_000).await.unwrap();
    assert_eq!(a.count + b.count, 40, "each fire is home to one node: {a:?} {b:?}");
    assert!(a.count > 0 && b.count > 0, "{a:?} {b:?}");
    for (me, other) in [(a, b), (b, a)] {
        assert_eq!(me.first.into_iter().chain(me.first_elsewhere).min(), Some(secs(10)));
        assert_eq!(me.first_elsewhere, other.first, "one node's elsewhere is the other's home");
    }
    // An acquisition reports the same outlook, after its own changes.
    let none_known = BTreeSet::new();
    let taken = store.acquire_with_outlook(&request("a", secs(10), 100, &none_known), day, 1_000).await.unwrap();
    let after = taken.outlook.expect("not full, so the outlook was read");
    assert_eq!(after, store.due_outlook("a", DueFilter::EVERY, day, 1_000).await.unwrap());
    assert_eq!(after.count, a.count - taken.runs.len(), "{a:?} {after:?} took {}", taken.runs.len());
}

/// Home shard heads an acquisition returns spare the next one reading every home shard's
/// first entry: they are trusted (a fire written since without the caller knowing stays
/// unseen until the heads are read again), so they are read again whenever they may not
/// hold for the request (new home shards, another filter) and by a doubting look at the
/// other shards (the one that finds fires no node was woken for), and a known head whose
/// entry was removed since is read on from and replaced.
pub async fn known_shard_heads_spare_reads_and_are_read_again_when_they_may_not_hold<K: Kv>(store: &KvJobStore<K>) {
    let day = Duration::from_secs(86_400);
    let known = BTreeSet::new();
    let ahead = |node, now, heads| {
        let mut request = request(node, now, 100, &known);
        request.steal = false;
        request.known_heads = heads;
        request
    };
    // A concurrent job `name` of 40 one-shot triggers `t0`..`t39`, trigger i due at `at(i)` s.
    let forty = |name: &str, at: &dyn Fn(i64) -> i64| {
        let schedules: Vec<(String, String)> =
            (0..40).map(|i| (format!("t{i}"), format!("once {}", format_instant(secs(at(i)))))).collect();
        let triggers: Vec<(&str, &str)> = schedules.iter().map(|(n, s)| (n.as_str(), s.as_str())).collect();
        let mut def = job(name, &triggers);
        def.allow_concurrent = true;
        def
    };
    store.heartbeat("a", t0(), None, false).await.unwrap();
    store.heartbeat("b", t0(), None, false).await.unwrap();
    store.schedule(&[forty("h", &|i| 10 + i % 7)], t0()).await;
    let first = store.acquire_with_outlook(&ahead("a", secs(5), None), day, 1_000).await.unwrap();
    assert!(first.runs.is_empty());
    let heads = first.heads.expect("returned with the outlook");

    // Pausing the fires due at 10 s removes their entries (no node is woken for that):
    // the heads that were theirs are read on from, and the heads returned are fresh.
    let paused: Vec<TriggerKey> = (0..40)
        .filter(|i| i % 7 == 0)
        .map(|i| TriggerKey::new(name("h"), TriggerName::new(format!("t{i}")).unwrap()))
        .collect();
    assert!(store.set_triggers_paused(&paused, true).await.iter().all(Result::is_ok));
    let with_known = store.acquire_with_outlook(&ahead("a", secs(10), Some(&heads)), day, 1_000).await.unwrap();
    let read_anew = store.acquire_with_outlook(&ahead("a", secs(10), None), day, 1_000).await.unwrap();
    assert!(with_known.runs.is_empty() && read_anew.runs.is_empty(), "nothing of a's is due at 10 s any more");
    assert_eq!(with_known.heads, read_anew.heads, "the stale heads were replaced");
    assert_eq!(with_known.outlook, read_anew.outlook);
    let heads = with_known.heads.expect("returned with the outlook");

    // Fires written since that the caller does not account for stay unseen with the heads
    // (these are due before any head of a's, the fires due at 10 s being paused: no read
    // from a head reaches them).
    store.schedule(&[forty("x", &|_| 10)], t0()).await;
    let hidden = store.acquire_with_outlook(&ahead("a", secs(11), Some(&heads)), day, 1_000).await.unwrap();
    let hidden_extra = hidden.runs.iter().filter(|r| r.run.job.as_str() == "x").count();
    assert_eq!(hidden_extra, 0, "the heads were used, not read again");
    let heads = hidden.heads.expect("returned with the outlook");
    // Another filter: read again.
    let busy = JobSet::from_iter([JobName::new("h").unwrap()]);
    let mut other_filter = ahead("a", secs(11), Some(&heads));
    other_filter.busy_jobs = &busy;
    let taken = store.acquire_with_outlook(&other_filter, day, 1_000).await.unwrap();
    let a_extra = taken.runs.iter().filter(|r| r.run.job.as_str() == "x").count();
    assert!(a_extra > 0, "a's share of the new fires, once its filter changed");
    // A look at the other shards trusting the nodes that vouch for theirs (with the same
    // filter): b does not, so its shards are read (its shares, 3 s and 2 s late, are taken
    // now); a's own heads still hold, so a's share of fires written since stays unseen.
    let heads = taken.heads.expect("returned with the outlook");
    store.schedule(&[forty("w", &|_| 11)], t0()).await;
    let count = |runs: &[AcquiredRun], job: &str| runs.iter().filter(|r| r.run.job.as_str() == job).count();
    let mut steal = ahead("a", secs(13), Some(&heads));
    (steal.steal, steal.busy_jobs) = (true, &busy);
    let stolen = store.acquire_with_outlook(&steal, day, 1_000).await.unwrap();
    assert_eq!(count(&stolen.runs, "x"), 40 - a_extra, "b's share");
    let b_share = count(&stolen.runs, "w");
    // A doubting look reads every shard afresh, its own too: a's share is found.
    let mut doubting = ahead("a", secs(13), stolen.heads.as_ref());
    (doubting.steal, doubting.trust_caught_up, doubting.busy_jobs) = (true, false, &busy);
    let found = store.acquire_with_outlook(&doubting, day, 1_000).await.unwrap();
    let a_share = count(&found.runs, "w");
    assert!(b_share > 0 && a_share > 0 && a_share + b_share == 40, "b's share {b_share}, then a's {a_share}");
    // New home shards (b stops owning shards): read again.
    let heads = found.heads.expect("returned with the outlook");
    store.schedule(&[forty("y", &|_| 14)], t0()).await;
    store.deregister_node("b").await.unwrap();
    let all_home = store.acquire_with_outlook(&ahead("a", secs(14), Some(&heads)), day, 1_000).await.unwrap();
    assert_eq!(all_home.runs.iter().filter(|r| r.run.job.as_str() == "y").count(), 40, "every shard is a's now");
}

/// A node leaves some fires waiting (its busy jobs'; scheduled ones when it does not
/// lead its own store): its outlook skips them, so it does not wake for them over and
/// over, and its acquisition reads past them, so they hide no fire behind them (here 150
/// of them, in the same shard as another job's fire, more than one read takes).
pub async fn fires_the_node_leaves_waiting_neither_wake_it_nor_hide_others<K: Kv>(store: &KvJobStore<K>) {
    let day = Duration::from_secs(86_400);
    let shard = shard_of("free", "f");
    let names: Vec<String> =
        (0..).map(|i| format!("b{i}")).filter(|n| shard_of("busy", n) == shard).take(150).collect();
    let once = format!("once {}", format_instant(secs(10)));
    let triggers: Vec<(&str, &str)> = names.iter().map(|n| (n.as_str(), once.as_str())).collect();
    let mut busy = job("busy", &triggers);
    busy.allow_concurrent = true;
    let free = job("free", &[("f", &format!("once {}", format_instant(secs(20))))]);
    store.schedule(&[busy, free], t0()).await;

    let every = store.due_outlook("a", DueFilter::EVERY, day, 1_000).await.unwrap();
    assert_eq!((every.first, every.count), (Some(secs(10)), 151));
    let busy_jobs = JobSet::from_iter([JobName::new("busy").unwrap()]);
    let filter = DueFilter { scheduled: true, busy_jobs: &busy_jobs, busy_version: None };
    let outlook = store.due_outlook("a", filter, day, 1_000).await.unwrap();
    assert_eq!((outlook.first, outlook.count), (Some(secs(20)), 1), "the busy job's fires left out");

    let known = BTreeSet::new();
    let mut request = request("a", secs(30), 2, &known);
    request.busy_jobs = &busy_jobs;
    let taken = store.acquire_with_outlook(&request, day, 1_000).await.unwrap();
    let runs: Vec<_> = taken.runs.iter().map(|r| r.run.job.as_str()).collect();
    assert_eq!(runs, ["free"], "taken from behind the busy job's fires");
    assert_eq!(taken.outlook.map(|o| (o.first, o.count)), Some((None, 0)), "nothing left to take");
    let left = store.due_outlook("a", DueFilter::EVERY, day, 1_000).await.unwrap();
    assert_eq!((left.first, left.count), (Some(secs(10)), 150), "the busy job's fires still wait");
}
