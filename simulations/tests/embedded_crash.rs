//! Goal: a single `sundial node` on its embedded store survives `kill -9` at any moment:
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

use cluster::{shell_job, standard_jobs, Cluster};
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

/// A `[[jobs]]` table as the admin API's JSON job spec.
fn toml_job_as_json(table: &str) -> String {
    let parsed: toml::Table = toml::from_str(table).unwrap();
    let job = parsed["jobs"].as_array().unwrap()[0].clone();
    serde_json::to_string(&job).unwrap()
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
