//! Goal: a single `sundial node` on its embedded store survives `kill -9` at any moment
//! and forgets nothing across a clean restart:
//! every change the admin API acknowledged is there after the restart, each run is
//! recorded once, runs a crash interrupted end `Lost` and are recovered by their jobs'
//! policies, no fire runs twice, and retries pending at a crash still run.
//!
//! Method: one node (`tests/cluster`, `Cluster::embedded`) under a cron load (the standard
//! jobs: every second, every 2-5 s, a job that requests recovery, one whose first attempt
//! fails) and enqueues, killed with SIGKILL (it and every process it started) 30 times at
//! random moments and restarted each time; between kills the API adds a job, enqueues a
//! run or pauses and resumes a job. At the end the node is stopped, its store opened, the
//! acknowledged changes looked up and the simulation's checkers run on the jobs' lines
//! and the history. The kill moments come from a seed printed at the start
//! (`SUNDIAL_CRASH_SEED` replays it).

mod cluster;

use std::collections::BTreeSet;
use std::time::Duration;

use cluster::{shell_job, standard_jobs, toml_job_as_json, Cluster};
use sundial::job::{RunCause, RunState};

fn sleep(seconds: f64) {
    std::thread::sleep(Duration::from_secs_f64(seconds));
}

/// A small seeded generator (xorshift64*): the kill moments of one seed.
struct Moments(u64);

impl Moments {
    fn next(&mut self) -> f64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        (self.0.wrapping_mul(0x2545_F491_4F6C_DD1D) >> 11) as f64 / (1u64 << 53) as f64
    }
}

fn seed() -> u64 {
    std::env::var("SUNDIAL_CRASH_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or_else(|| {
        let nanos = cluster::now().timestamp_nanos_opt().unwrap_or(1);
        (nanos as u64) | 1
    })
}

#[test]
fn thirty_kills_lose_no_acknowledged_change_and_run_no_fire_twice() {
    let seed = seed();
    eprintln!("SUNDIAL_CRASH_SEED={seed}");
    let mut moments = Moments(seed);
    let jobs = standard_jobs()
        + &shell_job(
            "later",
            0.3,
            true,
            "requests_recovery = true\nretry = { max_retries = 1, delay = \"2s\" }",
            "",
            "run_once",
        );
    let mut cluster = Cluster::embedded(&jobs);
    cluster.start_all();
    sleep(2.0);
    let mut added = Vec::new();
    let mut enqueued = 0;
    let mut wide_paused = false;
    for round in 0..30 {
        // One change, acknowledged by the API before the next kill.
        match round % 3 {
            0 => {
                let name = format!("added-{round:02}");
                let spec = toml_job_as_json(&shell_job(&name, 0.1, false, "", "every 00:00:03", "run_once"));
                let (status, body) = cluster.api("n1", "PUT", &format!("/api/jobs/{name}"), Some(&spec));
                assert_eq!(status, 200, "{body}");
                added.push(name.clone());
                cluster.changed.insert(name.parse().unwrap());
            }
            1 => {
                let (status, body) = cluster.api("n1", "POST", "/api/jobs/later/enqueue", Some("{}"));
                assert!(status < 300, "{status} {body}");
                enqueued += 1;
            }
            _ => {
                let action = if wide_paused { "resume" } else { "pause" };
                let (status, body) = cluster.api("n1", "POST", &format!("/api/jobs/wide/{action}"), None);
                assert_eq!(status, 200, "{body}");
                wide_paused = !wide_paused;
            }
        }
        sleep(0.2 + 1.8 * moments.next());
        cluster.kill("n1");
        cluster.start("n1");
        cluster.wait_serving("n1");
    }
    for name in ["later", "wide"] {
        cluster.changed.insert(name.parse().unwrap());
    }
    // Recoveries, retries and enqueued runs pending at the last kill run now.
    sleep(8.0);
    let (status, body) = cluster.api("n1", "GET", "/api/jobs", None);
    assert_eq!(status, 200, "{body}");
    let listed: serde_json::Value = serde_json::from_str(&body).unwrap();
    let names: BTreeSet<String> = listed
        .as_array()
        .expect("a job list")
        .iter()
        .filter_map(|job| job["spec"]["name"].as_str().map(str::to_owned))
        .collect();
    for name in &added {
        assert!(names.contains(name), "{name} was acknowledged and is gone: {names:?}");
    }
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let workload = cluster.workload();
    runtime.block_on(cluster.check_stopped(&workload));
    // The store as the node left it: each acknowledged enqueue is one run, which ends in
    // a success (its failed first attempt retried, a run the crash cut short recovered),
    // and the paused state is the last one acknowledged.
    let (store, _open) = cluster.open_stopped();
    let history = runtime.block_on(cluster.history(&store));
    let later: Vec<_> = history.iter().filter(|r| r.job == "later").collect();
    let enqueues = later.iter().filter(|r| r.cause == RunCause::Manual).count();
    assert_eq!(enqueues, enqueued, "each acknowledged enqueue recorded once");
    let succeeded = later.iter().filter(|r| r.state == RunState::Succeeded).count();
    assert_eq!(succeeded, enqueued, "each enqueued run ends in one success: {later:#?}");
    let wide = runtime.block_on(store.status(&"wide".parse().unwrap())).unwrap().unwrap();
    assert_eq!(wide.paused, wide_paused, "the last acknowledged pause state");
}

/// Runs of `job` as the node's API lists them: (id, attempt, state).
fn api_runs(cluster: &mut Cluster, job: &str) -> Vec<(String, u64, String)> {
    let (status, body) = cluster.api("n1", "GET", &format!("/api/runs?job={job}&limit=1000"), None);
    assert_eq!(status, 200, "{body}");
    let runs: serde_json::Value = serde_json::from_str(&body).unwrap();
    runs.as_array()
        .expect("a run list")
        .iter()
        .map(|r| {
            let text = |k: &str| r[k].as_str().unwrap_or_default().to_owned();
            (text("id"), r["attempt"].as_u64().unwrap_or(0), text("state"))
        })
        .collect()
}

/// Waits up to 20 s for `done` on the API's runs of `job`.
fn wait_runs(cluster: &mut Cluster, job: &str, done: impl Fn(&[(String, u64, String)]) -> bool) -> bool {
    for _ in 0..100 {
        if done(&api_runs(cluster, job)) {
            return true;
        }
        sleep(0.2);
    }
    false
}

#[test]
fn a_clean_restart_keeps_jobs_pauses_overrides_calendars_pending_retries_and_history() {
    use sundial::job::JobOrigin;
    // A calendar from the config, and a job whose trigger follows it.
    let calendar = "[calendars.far-holiday]\nkind = \"holidays\"\ndates = [\"2031-01-01\"]\n\n";
    let jobs = format!(
        "{calendar}{}{}{}",
        standard_jobs(),
        shell_job("later", 0.2, true, "retry = { max_retries = 1, delay = \"12s\" }", "", "run_once"),
        shell_job("weekdays", 0.1, false, "", "cron */3 * * * * * calendar=far-holiday", "run_once"),
    );
    let mut cluster = Cluster::embedded(&jobs);
    cluster.start_all();
    sleep(3.0);
    // Changes made at run time, each acknowledged by the API.
    let added = toml_job_as_json(&shell_job("added", 0.1, false, "", "every 00:00:02", "run_once"));
    let (status, body) = cluster.api("n1", "PUT", "/api/jobs/added", Some(&added));
    assert_eq!(status, 200, "{body}");
    let overridden =
        toml_job_as_json(&shell_job("long", 0.5, false, "requests_recovery = true", "cron */3 * * * * *", "run_once"));
    let (status, body) = cluster.api("n1", "PUT", "/api/jobs/long", Some(&overridden));
    assert_eq!(status, 200, "{body}");
    assert_eq!(cluster.api("n1", "POST", "/api/jobs/wide/pause", None).0, 200);
    assert_eq!(cluster.api("n1", "POST", "/api/jobs/tick/triggers/t/pause", None).0, 200);
    let (status, body) = cluster.api("n1", "POST", "/api/jobs/later/enqueue", Some("{}"));
    assert!(status < 300, "{status} {body}");
    // (The checkers know no calendars: the calendar job's fires are not counted.)
    for name in ["added", "long", "wide", "tick", "later", "weekdays"] {
        cluster.changed.insert(name.parse().unwrap());
    }
    // The enqueued run fails; its retry is due twelve seconds later.
    let failed = wait_runs(&mut cluster, "later", |runs| runs.iter().any(|(_, a, s)| *a == 1 && s == "Failed"));
    assert!(failed, "the enqueued run failed within 20 s");
    let before: BTreeSet<String> = ["tick", "long", "wide", "flaky", "later", "weekdays"]
        .iter()
        .flat_map(|job| api_runs(&mut cluster, job))
        .map(|r| r.0)
        .collect();

    cluster.stop_all();
    sleep(1.0);
    cluster.start_all();
    let job = |cluster: &mut Cluster, name: &str| {
        let (status, body) = cluster.api("n1", "GET", &format!("/api/jobs/{name}"), None);
        assert_eq!(status, 200, "{name}: {body}");
        serde_json::from_str::<serde_json::Value>(&body).unwrap()
    };
    assert_eq!(job(&mut cluster, "added")["origin"], serde_json::json!(JobOrigin::Runtime));
    let long = job(&mut cluster, "long");
    assert_eq!(long["origin"], serde_json::json!(JobOrigin::Overridden));
    assert_eq!(long["spec"]["triggers"][0]["schedule"], "cron */3 * * * * *");
    assert_eq!(job(&mut cluster, "wide")["paused"], true, "the paused job stays paused");
    assert_eq!(job(&mut cluster, "tick")["triggers"][0]["paused"], true, "the paused trigger stays paused");
    assert_eq!(job(&mut cluster, "flaky")["paused"], false);
    let weekdays = job(&mut cluster, "weekdays");
    assert!(weekdays["spec"]["triggers"][0]["schedule"].as_str().unwrap().contains("calendar=far-holiday"));
    // The retry that was pending at the restart runs after it, and succeeds.
    let retried = wait_runs(&mut cluster, "later", |runs| runs.iter().any(|(_, a, s)| *a == 2 && s == "Succeeded"));
    assert!(retried, "the retry pending across the restart ran");
    sleep(3.0);
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let workload = cluster.workload();
    runtime.block_on(cluster.check_stopped(&workload));
    let (store, _open) = cluster.open_stopped();
    let after: BTreeSet<String> = runtime.block_on(cluster.history(&store)).iter().map(|r| r.id.to_string()).collect();
    let lost: Vec<&String> = before.iter().filter(|id| !after.contains(*id)).collect();
    assert!(lost.is_empty(), "runs of before the restart missing from history: {lost:?}");
}
