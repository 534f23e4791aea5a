//! Benchmark: the dashboard as a person meets it, in Chromium against a real `sundial node`.
//!
//! 1. **The demo node** (`sundial node --demo`, the README's first command). Each page is
//!    loaded afresh `LOADS` times (from `about:blank`, so the page, its script and style
//!    are fetched again); a load lasts from navigation start to the page's first draw of
//!    its data: the `sundial:drawn` performance mark the script sets once its API requests
//!    have answered and the page is built. Target: under 300 ms.
//! 2. **A large store.** An embedded data directory is filled through the store's own API
//!    (`KvJobStore::schedule`, `begin_manual_run`, `complete_runs`) with 10,000 `log`
//!    jobs of varied schedules (a twentieth paused) and 1,000,000 finished runs over the
//!    last four days (93 % succeeded, 5 % failed, 2 % canceled, on three node names); then
//!    a node is started on it. Each API request the pages make is timed from outside
//!    (median and worst of `REQUESTS`, a new connection each), then each page's load in
//!    Chromium as in part 1. Target: every page under 300 ms there too.
//!
//! Run: `cargo bench -p sundial-actors --bench dashboard` (`-- --quick`: 1,000 jobs and
//! 100,000 runs; `-- --jobs N --runs M`; `-- --hours H`: the runs spread over the last H
//! hours instead of 96 (`--hours 1`: all of them in the hour the overview counts);
//! `-- --data DIR` fills DIR once and reuses it on later runs, as filling a million runs
//! takes most of a minute).
//! Needs Debian's `chromium` and `chromium-driver`.

#![allow(clippy::disallowed_methods)] // A benchmark measures real time by definition.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use chrono::{DateTime, TimeDelta, Utc};
use futures_util::StreamExt;
use sundial::calendar::Calendars;
use sundial::entropy::{Entropy, RunIdGenerator};
use sundial::job::{JobDefinition, JobTriggerDefinition, JobTypeKey, JsonObject};
use sundial::kv::embedded::EmbeddedKv;
use sundial::name::{JobName, TriggerName};
use sundial::store::{Completion, KvJobStore, RunOutcome, StoreOptions};
use sundial::time::SystemClock;
use sundial_test_support::browser::Browser;
use sundial_test_support::dir::TempDir;
use sundial_test_support::node_process::{http, NodeProcess};

/// Fresh loads of each page.
const LOADS: usize = 15;
/// Times each API request is made.
const REQUESTS: usize = 25;
/// The page-load target.
const TARGET_MS: f64 = 300.0;
/// How far back the prepared history reaches, by default.
const HISTORY_HOURS: i64 = 96;

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let value = |flag: &str| args.iter().position(|a| a == flag).and_then(|i| args.get(i + 1).cloned());
    let quick = args.iter().any(|a| a == "--quick");
    let jobs = value("--jobs").and_then(|v| v.parse().ok()).unwrap_or(if quick { 1_000 } else { 10_000 });
    let runs = value("--runs").and_then(|v| v.parse().ok()).unwrap_or(if quick { 100_000 } else { 1_000_000 });
    let binary = PathBuf::from(env!("CARGO_BIN_EXE_sundial"));
    let runtime = tokio::runtime::Runtime::new().expect("a runtime");

    println!("sundial dashboard: page loads in headless Chromium (median and worst of {LOADS} fresh loads), target {TARGET_MS} ms");
    {
        let node = NodeProcess::start(&binary, &["--demo"], &[]);
        // A few runs of the demo jobs to show.
        std::thread::sleep(Duration::from_secs(6));
        let pages = pages(node.port(), "demo-tick");
        println!("\n1. the demo node (`sundial node --demo`)");
        runtime.block_on(time_pages(&node.base, &pages));
    }

    let scratch;
    let data = match value("--data") {
        Some(dir) => PathBuf::from(dir),
        None => {
            scratch = TempDir::new("dashboard-bench");
            scratch.path().join("data")
        }
    };
    let hours = value("--hours").and_then(|v| v.parse().ok()).unwrap_or(HISTORY_HOURS).max(1);
    runtime.block_on(fill(&data, jobs, runs, TimeDelta::hours(hours)));
    let config = data.with_extension("toml");
    std::fs::write(&config, format!("[store]\nkind = \"embedded\"\npath = \"{}\"\n", data.display())).expect("config");
    let node = NodeProcess::start(&binary, &["--config", &config.to_string_lossy()], &[]);
    let port = node.port();
    println!("\n2. a node over {jobs} jobs and {runs} finished runs of the last {hours} hours (embedded store)");
    let job = format!("job-{:05}", jobs / 2);
    println!("{:<44} {:>9} {:>9} {:>9}", "request", "median ms", "worst ms", "bytes");
    for path in requests(port, &job) {
        time_request(port, &path);
    }
    let pages = pages(port, &job);
    runtime.block_on(time_pages(&node.base, &pages));
}

/// The id of the newest run.
fn newest_run(port: u16) -> String {
    let (_, body) = http(port, "GET", "/api/runs?limit=1", None, None);
    let runs: serde_json::Value = serde_json::from_str(&body).expect("runs as JSON");
    runs[0]["id"].as_str().unwrap_or("none").to_owned()
}

/// The dashboard's pages: (label, hash route).
fn pages(port: u16, job: &str) -> Vec<(String, String)> {
    let run = newest_run(port);
    vec![
        ("overview".into(), "#/".into()),
        ("jobs".into(), "#/jobs".into()),
        ("jobs, searched".into(), "#/jobs?q=job-0".into()),
        ("a job".into(), format!("#/jobs/{job}")),
        ("runs".into(), "#/runs".into()),
        ("runs, failed only".into(), "#/runs?state=Failed".into()),
        ("a run".into(), format!("#/runs/{run}")),
        ("nodes".into(), "#/nodes".into()),
    ]
}

/// The API requests the pages make at each refresh.
fn requests(port: u16, job: &str) -> Vec<String> {
    let run = newest_run(port);
    vec![
        "/api/overview".into(),
        "/api/jobs?limit=50".into(),
        "/api/jobs?limit=50&skip=5000".into(),
        "/api/jobs?q=job-0&limit=50".into(),
        "/api/jobs?state=paused&limit=50".into(),
        "/api/job-types".into(),
        format!("/api/jobs/{job}"),
        format!("/api/runs?job={job}&limit=20"),
        "/api/runs?limit=51".into(),
        "/api/runs?limit=51&skip=5000".into(),
        "/api/runs?state=Failed&limit=51".into(),
        "/api/runs?node=bench-node-2&limit=51".into(),
        // Filters nothing matches: the whole history index is read.
        "/api/runs?state=Lost&limit=51".into(),
        "/api/runs?node=elsewhere&limit=51".into(),
        format!(
            "/api/runs?state=Lost&from={}&limit=51",
            (Utc::now() - TimeDelta::days(1)).to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
        ),
        format!("/api/runs/{run}"),
        "/api/node".into(),
        "/api/cluster".into(),
    ]
}

fn median_and_worst(mut times: Vec<f64>) -> (f64, f64) {
    times.sort_by(f64::total_cmp);
    (times[times.len() / 2], times[times.len() - 1])
}

fn time_request(port: u16, path: &str) {
    let mut times = Vec::with_capacity(REQUESTS);
    let mut bytes = 0;
    for _ in 0..REQUESTS {
        let start = Instant::now();
        let (status, body) = http(port, "GET", path, None, None);
        times.push(start.elapsed().as_secs_f64() * 1e3);
        assert_eq!(status, 200, "{path}: {body}");
        bytes = body.len();
    }
    let (median, worst) = median_and_worst(times);
    println!("{path:<44} {median:>9.1} {worst:>9.1} {bytes:>9}");
}

/// Loads each page `LOADS` times in a fresh navigation and prints how long until it drew.
async fn time_pages(base: &str, pages: &[(String, String)]) {
    let Some(browser) = Browser::start(1280, 800, "en-US").await else {
        panic!("this bench needs Debian's chromium and chromium-driver");
    };
    println!("{:<44} {:>9} {:>9} {:>9}", "page", "median ms", "worst ms", "first ms");
    for (label, route) in pages {
        let mut times = Vec::with_capacity(LOADS);
        for _ in 0..LOADS {
            browser.open("about:blank").await;
            browser.open(&format!("{base}/{route}")).await;
            times.push(drawn_at(&browser, route).await);
        }
        let first = times[0];
        let (median, worst) = median_and_worst(times);
        let verdict = if median < TARGET_MS { "" } else { "  over the target" };
        println!("{label:<44} {median:>9.1} {worst:>9.1} {first:>9.1}{verdict}");
    }
    browser.close().await;
}

/// Milliseconds from navigation start to the page's first draw of its data.
async fn drawn_at(browser: &Browser, route: &str) -> f64 {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let marks = browser.run("return performance.getEntriesByName('sundial:drawn').map(e => e.startTime)").await;
        if let Some(at) = marks.as_array().and_then(|m| m.first()).and_then(serde_json::Value::as_f64) {
            return at;
        }
        assert!(Instant::now() < deadline, "{route} never drew:\n{}", browser.text().await);
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// Fills `dir` (once: a directory already filled with as many is kept) with `jobs` jobs and
/// `runs` finished runs, through the store.
async fn fill(dir: &Path, jobs: usize, runs: usize, span: TimeDelta) {
    let stamp = format!("{jobs} jobs, {runs} runs over {} hours", span.num_hours());
    // Beside the directory, naming what it holds.
    let marker = dir.with_extension("filled");
    if std::fs::read_to_string(&marker).is_ok_and(|s| s == stamp) {
        println!("\n(reusing {}: {stamp})", dir.display());
        return;
    }
    let _ = std::fs::remove_dir_all(dir);
    let _ = std::fs::remove_file(&marker);
    std::fs::create_dir_all(dir).expect("the data directory");
    let started = Instant::now();
    let embedded = EmbeddedKv::open(dir, Arc::new(SystemClock::new())).expect("the store opens");
    let store = KvJobStore::new(
        embedded.kv().clone(),
        Arc::new(Calendars::new()),
        Entropy::from_seed(11),
        StoreOptions::default(),
    );
    let now = Utc::now();
    let definitions: Vec<JobDefinition> = (0..jobs).map(job_definition).collect();
    for batch in definitions.chunks(500) {
        for result in store.schedule(batch, now).await {
            result.expect("a job is scheduled");
        }
    }
    let paused: Vec<JobName> = definitions.iter().step_by(20).map(|d| d.name.clone()).collect();
    for result in store.set_jobs_paused(&paused, true).await {
        result.expect("a job is paused");
    }
    let names: Vec<JobName> = definitions.into_iter().map(|d| d.name).collect();
    // One run of every job per wave, oldest first, ending a minute ago.
    let first = now - span;
    let step = span.num_microseconds().unwrap_or(i64::MAX) / runs.max(1) as i64;
    let mut ids = RunIdGenerator::new(Entropy::from_seed(12));
    let empty = JsonObject::new();
    let mut done = 0;
    while done < runs {
        let wave: Vec<(usize, DateTime<Utc>, uuid::Uuid)> = (done..runs.min(done + names.len()))
            .map(|i| {
                let scheduled = first + TimeDelta::microseconds(step * i as i64);
                (i, scheduled, ids.next_id(scheduled))
            })
            .collect();
        let store = &store;
        let (names, empty) = (&names, &empty);
        let begun: Vec<(usize, DateTime<Utc>, uuid::Uuid)> = futures_util::stream::iter(wave)
            .map(|(i, scheduled, id)| async move {
                let node = format!("bench-node-{}", i % 3 + 1);
                store.begin_manual_run(&names[i % names.len()], empty, &node, id, scheduled).await.expect("a run");
                (i, scheduled, id)
            })
            .buffer_unordered(64)
            .collect()
            .await;
        for batch in begun.chunks(500) {
            let completions: Vec<Completion> =
                batch.iter().map(|&(i, scheduled, id)| completion(i, scheduled, id)).collect();
            for result in store.complete_runs(&completions).await {
                result.expect("a run completes");
            }
        }
        done += begun.len();
        let rate = done as f64 / started.elapsed().as_secs_f64();
        eprint!("\rfilling {}: {done} of {runs} runs ({rate:.0}/s)   ", dir.display());
    }
    eprintln!();
    drop(store);
    embedded.close();
    std::fs::write(&marker, stamp).expect("the marker");
    println!("\nfilled {} in {:.0} s", dir.display(), started.elapsed().as_secs_f64());
}

/// Job `i`: a `log` job with one trigger of a kind that varies with `i` (cron in a zone on
/// weekdays, cron at a second of each hour, every six hours, once in a year).
fn job_definition(i: usize) -> JobDefinition {
    let schedule = match i % 4 {
        0 => format!("cron 0 {} {} * * MON-FRI tz=Asia/Shanghai", i % 60, 9 + i % 9),
        1 => format!("cron {} {} * * * *", i % 60, (i / 60) % 60),
        2 => "every 06:00:00".to_owned(),
        _ => "once 2027-12-01T00:00:00Z".to_owned(),
    };
    let name = JobName::new(format!("job-{i:05}")).expect("a job name");
    let trigger = JobTriggerDefinition::new(
        TriggerName::new("main").expect("a trigger name"),
        schedule.parse().expect("a schedule"),
    );
    let mut data = JsonObject::new();
    data.insert("message".into(), format!("job {i} ran").into());
    let mut def =
        JobDefinition::new(name, JobTypeKey::new("log").expect("a type")).with_trigger(trigger).with_data(data);
    def.description = Some(format!("bench job {i} of the dashboard bench"));
    def
}

/// How run `i` ended: most succeeded, 5 % failed with an error, 2 % canceled.
fn completion(i: usize, scheduled: DateTime<Utc>, id: uuid::Uuid) -> Completion {
    let outcome = match i % 100 {
        0..=4 => RunOutcome::Failed {
            code: Some("HTTP_503".into()),
            message: format!("upstream answered 503 Service Unavailable (attempt for run {i})"),
        },
        5 | 6 => RunOutcome::Canceled { message: "canceled by an operator".into() },
        _ => RunOutcome::Succeeded,
    };
    Completion {
        run_id: id,
        node: format!("bench-node-{}", i % 3 + 1).into(),
        outcome,
        finished_at: scheduled + TimeDelta::milliseconds(20 + (i % 2_000) as i64),
        holds_trigger: Some(false),
    }
}
