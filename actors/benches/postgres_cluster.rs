//! Benchmark: `sundial node` processes (1, 2 and 3) sharing one local PostgreSQL server,
//! as a cluster runs in production: to-the-second cron fires of no-op jobs, full history.
//!
//! Each case gets a fresh server (`fsync` on) and N jobs with one trigger each firing
//! every second (N fires/s); the jobs are the built-in `log` kind, whose one line per run
//! (its run id, job and scheduled time, stamped when it ran) is the record: fires missed
//! and repeated are counted from those lines, lateness is the line's time less the
//! scheduled time. After a warm-up the fires of a 15-second window are measured, then the
//! nodes stop. Also measured: the nodes' conflict aborts per acquisition and the fires
//! they took from each other's shards (`stolen`, from `/metrics`), the jobs whose fires
//! ran on more than one node (`moved`, from the lines), the server's transactions and statements per fire (`pg_stat_database`,
//! `pg_stat_statements`), and the CPU the nodes and the server used per fire. Last, a
//! burst: 10,000 one-shot triggers due at the same instant, until the last one started.
//!
//! Run: `cargo bench -p sundial-actors --bench postgres_cluster` (`-- --quick`: 100 and
//! 1,000 fires/s, one and three nodes, a 2,000 one-shot burst; `-- --load N`: that load
//! only, on 1, 2 and 3 nodes; `-- --nodes K`: that many nodes only; `-- --tuned`: with
//! `acquire_batch_size = 512` and `max_concurrent_runs = 2 × load + 64` instead of the
//! defaults, as the lateness bench tunes them: every second's fires are due together, and
//! a node takes them ahead only into free run slots).
//! `BENCH_STATEMENTS=1` prints the server's costliest statements; `BENCH_SERVER_LOG=path`
//! copies each case's server log (each conflict names its key there) to `path.<case>` and
//! the nodes' logs beside it.
//! Needs PostgreSQL's server binaries (Debian's `postgresql`).

#![allow(clippy::disallowed_methods)] // A benchmark measures real time by definition.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use chrono::{DateTime, TimeDelta, Utc};
use sundial_test_support::postgres::{PgServer, ServerOptions};

/// Seconds of fires measured per case.
const WINDOW_SECONDS: i64 = 15;
/// Seconds after every node serves before the window opens.
const WARM_UP_SECONDS: i64 = 5;

struct Case {
    nodes: usize,
    jobs: usize,
    /// One-shots due together instead of cron jobs.
    burst: bool,
    tuned: bool,
}

#[derive(Default)]
struct Report {
    expected: usize,
    ran: usize,
    missed: usize,
    repeated: usize,
    lateness_ms: Vec<f64>,
    acquisitions: f64,
    conflicts: f64,
    stolen: f64,
    /// Jobs whose fires in the window ran on more than one node.
    moved_jobs: usize,
    commits: f64,
    statements: f64,
    node_cpu: f64,
    server_cpu: f64,
    burst_last_ms: Option<f64>,
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let rank = ((p / 100.0) * (sorted.len() - 1) as f64).round() as usize;
    sorted[rank.min(sorted.len() - 1)]
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// CPU seconds (user + system) of `pid` and, with `tree`, every process below it.
fn cpu_seconds(pid: u32, tree: bool) -> f64 {
    let ticks = 100.0; // USER_HZ on Linux
    let own = std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|stat| {
            let after = stat.rsplit_once(')')?.1;
            let fields: Vec<&str> = after.split_whitespace().collect();
            let utime: f64 = fields.get(11)?.parse().ok()?;
            let stime: f64 = fields.get(12)?.parse().ok()?;
            Some((utime + stime) / ticks)
        })
        .unwrap_or(0.0);
    if !tree {
        return own;
    }
    own + sundial_test_support::process::children(pid as i32)
        .into_iter()
        .map(|c| cpu_seconds(c as u32, true))
        .sum::<f64>()
}

/// `GET http://127.0.0.1:port/path`'s body.
fn get(port: u16, path: &str) -> String {
    use std::io::{Read, Write};
    let Ok(mut stream) = std::net::TcpStream::connect(("127.0.0.1", port)) else { return String::new() };
    let _ = stream.set_read_timeout(Some(Duration::from_secs(10)));
    let _ = write!(stream, "GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n");
    let mut response = String::new();
    let _ = stream.read_to_string(&mut response);
    response.split_once("\r\n\r\n").map(|(_, body)| body.to_owned()).unwrap_or_default()
}

/// The sum of a counter's samples in a Prometheus text exposition.
fn counter(text: &str, name: &str) -> f64 {
    text.lines()
        .filter(|line| line.starts_with(name) && !line.starts_with('#'))
        .filter_map(|line| line.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

struct Running {
    children: Vec<(Child, u16)>,
    logs: Vec<PathBuf>,
}

fn config(case: &Case, url: &str, due: DateTime<Utc>) -> String {
    let mut text = format!("[store]\nkind = \"postgres\"\nurl = \"{url}\"\npool_size = 16\n\n");
    if case.tuned {
        text += &format!("[scheduler]\nacquire_batch_size = 512\nmax_concurrent_runs = {}\n\n", 2 * case.jobs + 64);
    }
    let schedule =
        if case.burst { format!("once {}", due.format("%Y-%m-%dT%H:%M:%SZ")) } else { "cron * * * * * *".to_owned() };
    for i in 0..case.jobs {
        text += &format!(
            "[[jobs]]\nname = \"j{i:05}\"\ntype = \"log\"\ndata = {{ message = \"fired\" }}\n\
             [[jobs.triggers]]\nname = \"t\"\nschedule = \"{schedule}\"\n\n"
        );
    }
    text
}

fn start_nodes(binary: &Path, dir: &Path, case: &Case) -> Running {
    let mut children = Vec::new();
    let mut logs = Vec::new();
    for i in 1..=case.nodes {
        let port = free_port();
        let log = dir.join(format!("n{i}.log"));
        let file = std::fs::File::create(&log).unwrap();
        let child = Command::new(binary)
            .args(["node", "--log-format", "json", "--config"])
            .arg(dir.join("sundial.toml"))
            .env("SUNDIAL_ADMIN_LISTEN", format!("127.0.0.1:{port}"))
            .env("SUNDIAL_NODE_ID", format!("n{i}"))
            .env("RUST_LOG", "warn,sundial_actors::kinds::log=info")
            .stdin(Stdio::null())
            .stdout(file.try_clone().unwrap())
            .stderr(file)
            .spawn()
            .expect("start a node");
        children.push((child, port));
        logs.push(log);
    }
    for (child, port) in &mut children {
        let began = Instant::now();
        while !get(*port, "/health").contains("serving") {
            if let Ok(Some(status)) = child.try_wait() {
                panic!("a node exited with {status}: see {}", dir.display());
            }
            assert!(began.elapsed() < Duration::from_secs(120), "a node did not serve within 120 s");
            std::thread::sleep(Duration::from_millis(100));
        }
    }
    Running { children, logs }
}

fn stop_nodes(running: &mut Running) {
    for (child, _) in &running.children {
        let _ = Command::new("kill").arg("-TERM").arg(child.id().to_string()).status();
    }
    for (child, _) in &mut running.children {
        let _ = child.wait();
    }
}

/// Node metrics summed over the nodes: acquisitions, conflicts, fires stolen.
fn node_counters(running: &Running) -> (f64, f64, f64) {
    running.children.iter().fold((0.0, 0.0, 0.0), |(a, c, s), (_, port)| {
        let text = get(*port, "/metrics");
        (
            a + counter(&text, "sundial_acquisitions_total"),
            c + counter(&text, "sundial_store_conflicts_total"),
            s + counter(&text, "sundial_stolen_triggers_total"),
        )
    })
}

/// The server's commits and statements so far.
fn server_counters(server: &PgServer) -> (f64, f64) {
    let commits = server.psql("SELECT sum(xact_commit) FROM pg_stat_database").trim().parse().unwrap_or(0.0);
    let statements =
        server.psql("SELECT coalesce(sum(calls), 0) FROM pg_stat_statements").trim().parse().unwrap_or(0.0);
    (commits, statements)
}

/// A time as the log writes it: RFC 3339 (the line's stamp), or chrono's `Display`
/// (`YYYY-MM-DD hh:mm:ss UTC`, a logged field).
fn time(value: &serde_json::Value) -> Option<DateTime<Utc>> {
    let text = value.as_str()?;
    DateTime::parse_from_rfc3339(text)
        .map(|t| t.to_utc())
        .ok()
        .or_else(|| chrono::NaiveDateTime::parse_from_str(text, "%Y-%m-%d %H:%M:%S%.f UTC").ok().map(|t| t.and_utc()))
}

fn sleep_until(at: DateTime<Utc>) {
    if let Ok(wait) = (at - Utc::now()).to_std() {
        std::thread::sleep(wait);
    }
}

fn run_case(binary: &Path, case: &Case) -> Report {
    let options = ServerOptions {
        fsync: true,
        max_connections: 200,
        settings: vec![
            "shared_preload_libraries=pg_stat_statements".into(),
            "pg_stat_statements.track=all".into(),
            // A failed commit's log line shows the start of its key arrays.
            "log_parameter_max_length_on_error=400".into(),
        ],
    };
    let server = PgServer::start(options).expect("PostgreSQL is installed");
    server.psql("CREATE EXTENSION pg_stat_statements");
    let dir = server.dir().join("bench");
    std::fs::create_dir_all(&dir).unwrap();
    // A burst is due well after every node serves, whatever many jobs they write first.
    let due = (Utc::now() + TimeDelta::seconds(30 + (case.jobs / 1000) as i64)).with_nanosecond_zero();
    std::fs::write(dir.join("sundial.toml"), config(case, &server.url(), due)).unwrap();
    let mut running = start_nodes(binary, &dir, case);
    let (window_start, window_end) = if case.burst {
        (due, due + TimeDelta::seconds(10))
    } else {
        let start = (Utc::now() + TimeDelta::seconds(WARM_UP_SECONDS + 1)).with_nanosecond_zero();
        (start, start + TimeDelta::seconds(WINDOW_SECONDS))
    };
    sleep_until(window_start);
    let (acquisitions0, conflicts0, stolen0) = node_counters(&running);
    let (commits0, statements0) = server_counters(&server);
    let node_cpu0: f64 = running.children.iter().map(|(c, _)| cpu_seconds(c.id(), false)).sum();
    let server_pid = server.pid().unwrap_or(0);
    let server_cpu0 = cpu_seconds(server_pid, true);
    // Fires of the window's last second start after it.
    sleep_until(window_end + TimeDelta::seconds(2));
    let (acquisitions1, conflicts1, stolen1) = node_counters(&running);
    let (commits1, statements1) = server_counters(&server);
    let node_cpu1: f64 = running.children.iter().map(|(c, _)| cpu_seconds(c.id(), false)).sum();
    let server_cpu1 = cpu_seconds(server_pid, true);
    if std::env::var_os("BENCH_STATEMENTS").is_some() {
        // Where the server's time went: the statements called most, with their time.
        print!(
            "{}",
            server.psql(
                "SELECT calls, round(total_exec_time::numeric, 1) AS ms, left(regexp_replace(query, '\\s+', ' ', 'g'), 110) \
                 FROM pg_stat_statements ORDER BY total_exec_time DESC LIMIT 15"
            )
        );
    }
    stop_nodes(&mut running);
    if let Some(copy) = std::env::var("BENCH_SERVER_LOG").ok().filter(|path| !path.is_empty()) {
        // The server's log outlives its directory (removed when the bench exits).
        let kind = if case.burst { "burst" } else { "load" };
        let prefix = format!("{copy}.{kind}-{}-{}n", case.jobs, case.nodes);
        let _ = std::fs::copy(server.dir().join("log"), &prefix);
        for (i, log) in running.logs.iter().enumerate() {
            let _ = std::fs::copy(log, format!("{prefix}.n{}", i + 1));
        }
    }

    // The jobs' lines: (job, scheduled) -> start times; job -> the nodes it ran on.
    let mut ran: BTreeMap<(String, DateTime<Utc>), Vec<DateTime<Utc>>> = BTreeMap::new();
    let mut ran_on: BTreeMap<String, std::collections::BTreeSet<usize>> = BTreeMap::new();
    let in_window = |t: &DateTime<Utc>| *t >= window_start && *t < window_end;
    for (node, log) in running.logs.iter().enumerate() {
        for line in BufReader::new(std::fs::File::open(log).unwrap()).lines().map_while(Result::ok) {
            let Ok(value) = serde_json::from_str::<serde_json::Value>(&line) else { continue };
            if value["message"] != "fired" {
                continue;
            }
            let (Some(at), Some(scheduled), Some(job)) =
                (time(&value["timestamp"]), time(&value["scheduled"]), value["job"].as_str())
            else {
                continue;
            };
            if in_window(&scheduled) {
                ran_on.entry(job.to_owned()).or_default().insert(node);
            }
            ran.entry((job.to_owned(), scheduled)).or_default().push(at);
        }
    }
    let mut report =
        Report { moved_jobs: ran_on.values().filter(|nodes| nodes.len() > 1).count(), ..Report::default() };
    let mut lateness = Vec::new();
    let mut distinct = 0;
    for ((_, scheduled), starts) in &ran {
        if !in_window(scheduled) {
            continue;
        }
        distinct += 1;
        report.ran += starts.len();
        report.repeated += starts.len() - 1;
        for start in starts {
            lateness.push((*start - *scheduled).num_microseconds().unwrap_or(i64::MAX) as f64 / 1000.0);
        }
    }
    report.expected = if case.burst { case.jobs } else { case.jobs * WINDOW_SECONDS as usize };
    report.missed = report.expected.saturating_sub(distinct);
    lateness.sort_by(f64::total_cmp);
    if case.burst {
        report.burst_last_ms = lateness.last().copied();
    }
    report.lateness_ms = lateness;
    report.acquisitions = acquisitions1 - acquisitions0;
    report.conflicts = conflicts1 - conflicts0;
    report.stolen = stolen1 - stolen0;
    report.commits = commits1 - commits0;
    report.statements = statements1 - statements0;
    report.node_cpu = node_cpu1 - node_cpu0;
    report.server_cpu = server_cpu1 - server_cpu0;
    report
}

trait WholeSeconds {
    fn with_nanosecond_zero(self) -> Self;
}

impl WholeSeconds for DateTime<Utc> {
    fn with_nanosecond_zero(self) -> Self {
        DateTime::from_timestamp(self.timestamp(), 0).unwrap_or(self)
    }
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let value = |flag: &str| args.iter().position(|a| a == flag).and_then(|i| args.get(i + 1)?.parse::<usize>().ok());
    let quick = args.iter().any(|a| a == "--quick");
    let tuned = args.iter().any(|a| a == "--tuned");
    let loads = value("--load").map_or(if quick { vec![100, 1_000] } else { vec![100, 1_000, 5_000] }, |n| vec![n]);
    let node_counts = value("--nodes").map_or(if quick { vec![1, 3] } else { vec![1, 2, 3] }, |n| vec![n]);
    let burst = if quick { 2_000 } else { 10_000 };
    let binary = PathBuf::from(env!("CARGO_BIN_EXE_sundial"));
    let options = if tuned { "acquire_batch_size 512, max_concurrent_runs 2 × load + 64" } else { "default options" };
    println!("sundial nodes on one PostgreSQL server (fsync on), log jobs, full history, {options}");
    println!(
        "{:>7} {:>5} | {:>9} {:>6} {:>6} | {:>8} {:>8} {:>8} | {:>9} {:>7} {:>6} | {:>8} {:>9} | {:>8} {:>8}",
        "load/s",
        "nodes",
        "ran/s",
        "missed",
        "twice",
        "p50 ms",
        "p99 ms",
        "max ms",
        "confl/acq",
        "stolen",
        "moved",
        "commit/f",
        "stmt/f",
        "node µs/f",
        "pg µs/f"
    );
    for &load in &loads {
        for &nodes in &node_counts {
            let case = Case { nodes, jobs: load, burst: false, tuned };
            let r = run_case(&binary, &case);
            let per_fire = |x: f64| if r.ran == 0 { f64::NAN } else { x / r.ran as f64 };
            println!(
                "{:>7} {:>5} | {:>9.0} {:>6} {:>6} | {:>8.1} {:>8.1} {:>8.1} | {:>9.4} {:>7.0} {:>6} | {:>8.2} {:>9.2} | {:>8.0} {:>8.0}",
                load,
                nodes,
                r.ran as f64 / WINDOW_SECONDS as f64,
                r.missed,
                r.repeated,
                percentile(&r.lateness_ms, 50.0),
                percentile(&r.lateness_ms, 99.0),
                r.lateness_ms.last().copied().unwrap_or(f64::NAN),
                if r.acquisitions > 0.0 { r.conflicts / r.acquisitions } else { f64::NAN },
                r.stolen,
                r.moved_jobs,
                per_fire(r.commits),
                per_fire(r.statements),
                per_fire(r.node_cpu * 1e6),
                per_fire(r.server_cpu * 1e6),
            );
        }
    }
    for &nodes in &node_counts {
        let case = Case { nodes, jobs: burst, burst: true, tuned };
        let r = run_case(&binary, &case);
        println!(
            "burst of {burst} one-shots, {nodes} node(s): {} ran, {} missed, {} twice, last started {:.0} ms after their time (p50 {:.0} ms)",
            r.ran,
            r.missed,
            r.repeated,
            r.burst_last_ms.unwrap_or(f64::NAN),
            percentile(&r.lateness_ms, 50.0),
        );
    }
}
