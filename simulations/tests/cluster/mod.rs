//! A cluster of real `sundial node` processes on a throwaway PostgreSQL server (or one
//! node on its embedded store), and the simulation's checkers run on what it did.
//!
//! The nodes share one config. Their jobs are `shell` jobs that append a line when a run
//! starts and one when it ends (run id, job, scheduled time, attempt, node, time) to a
//! file: what really ran is known apart from the store. A node is killed as a machine
//! dies: it is frozen, then it and every process it started get SIGKILL, so none of its
//! runs writes another line. At the end the file becomes the checkers' event log, the
//! store's run records their history, and [`sundial_simulations::check`] judges both as
//! it judges a simulation.
#![allow(dead_code)] // Each scenario uses what it needs.

use std::collections::{BTreeMap, BTreeSet};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, TimeDelta, Utc};
use sundial::calendar::Calendars;
use sundial::entropy::Entropy;
use sundial::job::{JobRun, RunCause};
use sundial::kv::embedded::EmbeddedKv;
use sundial::kv::memory::MemoryKv;
use sundial::kv::postgres::{PgKv, PgKvOptions};
use sundial::kv::Kv;
use sundial::store::records::RunRecord;
use sundial::store::{JobStatus, KvJobStore, StoreOptions};
use sundial::time::SystemClock;
use sundial_simulations::check::{self, Checked, Inputs, LiveNode, Samples, Setting};
use sundial_simulations::trace::{Event, EventKind, StartFacts};
use sundial_simulations::workload::Workload;
use sundial_test_support::dir::TempDir;
use sundial_test_support::postgres::{PgServer, ServerOptions};
use sundial_test_support::process;
use uuid::Uuid;

/// The machine's clock: a real cluster runs on it.
#[allow(clippy::disallowed_methods)]
pub(crate) fn now() -> DateTime<Utc> {
    Utc::now()
}

/// The `sundial` binary `cargo test --workspace` built beside this test.
fn binary() -> PathBuf {
    let exe = std::env::current_exe().expect("the test's path");
    let dir = exe.parent().and_then(Path::parent).expect("target/<profile>/deps/..");
    let binary = dir.join("sundial");
    assert!(
        binary.exists(),
        "{} is missing: run the workspace's tests (cargo test --workspace), which build it",
        binary.display()
    );
    binary
}

/// The scheduler options every node runs with: short timeouts, so a dead node's runs are
/// recovered and a stopped leader replaced within seconds.
pub(crate) const SCHEDULER: &str = "poll_interval_seconds = 0.5
lease_ttl_seconds = 3
node_timeout_seconds = 3
housekeeping_interval_seconds = 1
misfire_threshold_seconds = 5
";

/// `misfire_threshold_seconds` above.
const MISFIRE_THRESHOLD: Duration = Duration::from_secs(5);

/// A shell job's script: `$1` seconds of work between its two lines; `$2 = fail` fails
/// its first attempt. Canceled (SIGTERM to its process group), it says so as it ends.
const SCRIPT: &str = r#"log="$SUNDIAL_TEST_EFFECTS"
trap 'echo "E $SUNDIAL_RUN_ID $SUNDIAL_NODE_ID $(date +%s%N) canceled" >> "$log"; exit 143' TERM
echo "S $SUNDIAL_RUN_ID $SUNDIAL_JOB $SUNDIAL_SCHEDULED_AT $SUNDIAL_ATTEMPT $SUNDIAL_NODE_ID $(date +%s%N)" >> "$log"
sleep "$1"
if [ "$2" = fail ] && [ "$SUNDIAL_ATTEMPT" = 1 ]; then
  echo "E $SUNDIAL_RUN_ID $SUNDIAL_NODE_ID $(date +%s%N) fail" >> "$log"
  exit 1
fi
echo "E $SUNDIAL_RUN_ID $SUNDIAL_NODE_ID $(date +%s%N) ok" >> "$log""#;

/// A `[[jobs]]` table of a shell job running [`SCRIPT`] for `seconds`, with `extra` keys,
/// and one trigger on `schedule` (none when it is empty).
pub(crate) fn shell_job(name: &str, seconds: f64, fail: bool, extra: &str, schedule: &str, misfire: &str) -> String {
    let script = SCRIPT.replace('\\', "\\\\").replace('"', "\\\"").replace('\n', "\\n");
    let mode = if fail { "fail" } else { "ok" };
    let mut table = format!(
        "[[jobs]]\nname = \"{name}\"\ntype = \"shell\"\n{extra}\ndata = {{ program = \"sh\", args = [\"-c\", \"{script}\", \"{name}\", \"{seconds}\", \"{mode}\"] }}\n"
    );
    if !schedule.is_empty() {
        table += &format!("[[jobs.triggers]]\nname = \"t\"\nschedule = \"{schedule}\"\nmisfire = \"{misfire}\"\n");
    }
    table + "\n"
}

/// A `[[jobs]]` table as the admin API's JSON job spec.
pub(crate) fn toml_job_as_json(table: &str) -> String {
    let parsed: toml::Table = toml::from_str(table).unwrap();
    let job = parsed["jobs"].as_array().unwrap()[0].clone();
    serde_json::to_string(&job).unwrap()
}

/// The jobs most scenarios run: a short non-concurrent job every second (every fire run,
/// in order), a long one that requests recovery, a concurrent one whose runs overlap, and
/// one whose first attempts fail and are retried.
pub(crate) fn standard_jobs() -> String {
    [
        shell_job("tick", 0.2, false, "", "cron * * * * * *", "run_all"),
        shell_job("long", 2.5, false, "requests_recovery = true", "cron */4 * * * * *", "run_once"),
        shell_job("wide", 3.0, false, "allow_concurrent = true", "cron */2 * * * * *", "run_all"),
        shell_job("flaky", 0.3, true, "retry = { max_retries = 2, delay = \"1s\" }", "cron */5 * * * * *", "run_once"),
    ]
    .concat()
}

/// One node: its id, its admin address, its process while it runs.
struct Node {
    id: String,
    port: u16,
    child: Option<Child>,
    /// Its starts: incarnation number (from 1), when, and when it died or stopped.
    lives: Vec<(u32, DateTime<Utc>, Option<DateTime<Utc>>)>,
}

/// A cluster of node processes on a PostgreSQL server of its own, or one node on its
/// embedded store.
pub(crate) struct Cluster {
    /// The nodes' server (`None`: one node on its embedded store).
    server: Option<PgServer>,
    /// The embedded store's directory's parent (removed with the cluster).
    _temp: Option<TempDir>,
    dir: PathBuf,
    config: PathBuf,
    effects: PathBuf,
    binary: PathBuf,
    nodes: Vec<Node>,
    pub(crate) epoch: DateTime<Utc>,
    /// Runs ended by a node's death: run id, when.
    killed: Vec<(String, DateTime<Utc>)>,
    /// Runs whose node was frozen while they ran: nothing could cancel them (the checkers
    /// allow them what they allow a job that ignores cancellation).
    uncancelable: BTreeSet<String>,
    jobs: String,
    /// Jobs whose definitions the scenario changed (the fire accounting skips them).
    pub(crate) changed: BTreeSet<sundial::name::JobName>,
    /// When the last fault healed.
    pub(crate) healed: DateTime<Utc>,
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

impl Cluster {
    /// A server and `nodes` node ids sharing a config with `jobs` (`[[jobs]]` tables);
    /// none started. `None` when PostgreSQL is not installed and `CI` is not `true`.
    pub(crate) fn new(nodes: usize, jobs: &str) -> Option<Self> {
        let server = PgServer::start(ServerOptions::default())?;
        let dir = server.dir().join("cluster");
        let store =
            format!("[store]\nkind = \"postgres\"\nurl = \"{}\"\nschema = \"cluster\"\npool_size = 8\n", server.url());
        Some(Self::create(Some(server), None, dir, nodes, &store, jobs))
    }

    /// One node, `n1`, on its embedded store (`data` beside the config), with `jobs`; not
    /// started. Its commit log is folded every 16 KiB of writes (every few runs of these
    /// workloads), so kills land before, during and after folds.
    pub(crate) fn embedded(jobs: &str) -> Self {
        let temp = TempDir::new("embedded-node");
        let dir = temp.path().to_path_buf();
        let store = "[store]\nkind = \"embedded\"\npath = \"data\"\nfold_kib = 16\n";
        Self::create(None, Some(temp), dir, 1, store, jobs)
    }

    fn create(
        server: Option<PgServer>,
        temp: Option<TempDir>,
        dir: PathBuf,
        nodes: usize,
        store: &str,
        jobs: &str,
    ) -> Self {
        std::fs::create_dir_all(&dir).unwrap();
        let effects = dir.join("effects.log");
        std::fs::write(&effects, "").unwrap();
        let config = dir.join("sundial.toml");
        std::fs::write(&config, format!("{store}\n[scheduler]\n{SCHEDULER}\n{jobs}")).unwrap();
        let nodes = (1..=nodes)
            .map(|i| Node { id: format!("n{i}"), port: free_port(), child: None, lives: Vec::new() })
            .collect();
        let epoch = now();
        Self {
            server,
            _temp: temp,
            dir,
            config,
            effects,
            binary: binary(),
            nodes,
            epoch,
            killed: Vec::new(),
            uncancelable: BTreeSet::new(),
            jobs: jobs.to_owned(),
            changed: BTreeSet::new(),
            healed: epoch,
        }
    }

    /// The nodes' PostgreSQL server.
    pub(crate) fn server(&mut self) -> &mut PgServer {
        self.server.as_mut().expect("a cluster on PostgreSQL")
    }

    fn node(&mut self, id: &str) -> &mut Node {
        self.nodes.iter_mut().find(|n| n.id == id).unwrap_or_else(|| panic!("no node {id}"))
    }

    /// The node ids.
    pub(crate) fn ids(&self) -> Vec<String> {
        self.nodes.iter().map(|n| n.id.clone()).collect()
    }

    /// Starts every node and waits until each serves; the first time, the workload's
    /// epoch is then (every node has written its code jobs).
    pub(crate) fn start_all(&mut self) {
        let first = self.nodes.iter().all(|n| n.lives.is_empty());
        for id in self.ids() {
            self.start(&id);
        }
        for id in self.ids() {
            self.wait_serving(&id);
        }
        if first {
            self.epoch = now();
            self.healed = self.epoch;
        }
    }

    /// Starts node `id` (a new incarnation if it ran before).
    pub(crate) fn start(&mut self, id: &str) {
        let binary = self.binary.clone();
        let config = self.config.clone();
        let effects = self.effects.clone();
        let dir = self.dir.clone();
        let node = self.node(id);
        assert!(node.child.is_none(), "{id} runs already");
        let incarnation = node.lives.len() as u32 + 1;
        let log = std::fs::File::create(dir.join(format!("{id}.{incarnation}.log"))).unwrap();
        let child = Command::new(binary)
            .args(["node", "--config"])
            .arg(config)
            .env("SUNDIAL_ADMIN_LISTEN", format!("127.0.0.1:{}", node.port))
            .env("SUNDIAL_NODE_ID", &node.id)
            .env("SUNDIAL_TEST_EFFECTS", effects)
            .env("RUST_LOG", "info")
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .expect("start a node");
        node.child = Some(child);
        node.lives.push((incarnation, now(), None));
    }

    /// Waits until node `id` answers `/health` with 200.
    pub(crate) fn wait_serving(&mut self, id: &str) {
        let port = self.node(id).port;
        for _ in 0..300 {
            if let Some((200, _)) = http(port, "GET", "/health", None) {
                return;
            }
            if let Some(child) = &mut self.node(id).child {
                if let Ok(Some(status)) = child.try_wait() {
                    panic!("node {id} exited with {status}: see {}", self.dir.display());
                }
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        panic!("node {id} did not serve within 30 s");
    }

    fn pid(&mut self, id: &str) -> i32 {
        self.node(id).child.as_ref().map(|c| c.id() as i32).unwrap_or_else(|| panic!("{id} is not running"))
    }

    /// Stops every running node as a deploy does.
    pub(crate) fn stop_all(&mut self) {
        let running: Vec<String> = self.nodes.iter().filter(|n| n.child.is_some()).map(|n| n.id.clone()).collect();
        for id in running {
            self.stop(&id);
        }
    }

    /// Stops node `id` as a deploy does (SIGTERM: running runs finish) and waits.
    pub(crate) fn stop(&mut self, id: &str) {
        let pid = self.pid(id);
        signal(pid, "TERM");
        let node = self.node(id);
        let status = node.child.take().map(|mut c| c.wait().unwrap());
        assert!(status.is_some_and(|s| s.success()), "node {id} stopped with {status:?}");
        if let Some(life) = node.lives.last_mut() {
            life.2 = Some(now());
        }
    }

    /// Kills node `id` as its machine dies: frozen, then it and every process it started
    /// get SIGKILL. Its runs' processes write no other line; they ended now.
    pub(crate) fn kill(&mut self, id: &str) {
        let pid = self.pid(id);
        process::kill_tree(pid);
        let at = now();
        let node = self.node(id);
        if let Some(mut child) = node.child.take() {
            let _ = child.wait();
        }
        if let Some(life) = node.lives.last_mut() {
            life.2 = Some(at);
        }
        // Its runs that had not ended ended now.
        let id = id.to_owned();
        for (run, node) in self.open_runs() {
            if node == id {
                self.killed.push((run, at));
            }
        }
    }

    /// Freezes node `id` (SIGSTOP); the processes of its runs go on, and nothing can
    /// cancel them until it thaws.
    pub(crate) fn freeze(&mut self, id: &str) {
        let pid = self.pid(id);
        signal(pid, "STOP");
        let open = self.open_runs();
        self.uncancelable.extend(open.into_iter().filter(|(_, node)| node == id).map(|(run, _)| run));
    }

    /// Thaws a frozen node (SIGCONT).
    pub(crate) fn thaw(&mut self, id: &str) {
        let pid = self.pid(id);
        signal(pid, "CONT");
    }

    /// Runs started and not ended in the effects file: run id, node.
    fn open_runs(&self) -> Vec<(String, String)> {
        let text = std::fs::read_to_string(&self.effects).unwrap();
        let mut open: BTreeMap<String, String> = BTreeMap::new();
        for line in text.lines() {
            let words: Vec<&str> = line.split(' ').collect();
            match words.as_slice() {
                ["S", run, _, _, _, node, _] => {
                    open.insert((*run).to_owned(), (*node).to_owned());
                }
                ["E", run, ..] => {
                    open.remove(*run);
                }
                _ => {}
            }
        }
        open.into_iter().collect()
    }

    /// Nodes with a run going now, most first.
    pub(crate) fn busiest(&self) -> Vec<String> {
        let mut counts: BTreeMap<String, usize> = BTreeMap::new();
        for (_, node) in self.open_runs() {
            *counts.entry(node).or_default() += 1;
        }
        let mut nodes: Vec<(usize, String)> = counts.into_iter().map(|(n, c)| (c, n)).collect();
        nodes.sort_by(|a, b| b.cmp(a));
        nodes.into_iter().map(|(_, n)| n).collect()
    }

    /// `GET /api/node` of node `id`, if it answers.
    pub(crate) fn node_info(&mut self, id: &str) -> Option<serde_json::Value> {
        let port = self.node(id).port;
        let (status, body) = http(port, "GET", "/api/node", None)?;
        (status == 200).then(|| serde_json::from_str(&body).ok()).flatten()
    }

    /// The node holding the leader lease, asking the running nodes.
    pub(crate) fn leader(&mut self) -> Option<String> {
        let running: Vec<String> = self.nodes.iter().filter(|n| n.child.is_some()).map(|n| n.id.clone()).collect();
        running.into_iter().find(|id| self.node_info(id).is_some_and(|info| info["leader"] == true))
    }

    /// A request to node `id`'s admin API: status and body.
    pub(crate) fn api(&mut self, id: &str, method: &str, path: &str, body: Option<&str>) -> (u16, String) {
        let port = self.node(id).port;
        http(port, method, path, body).unwrap_or_else(|| panic!("{method} {path} on {id}: no answer"))
    }

    /// A store handle on the cluster's schema, for reading what the nodes wrote.
    pub(crate) async fn store(&self) -> KvJobStore<PgKv> {
        let server = self.server.as_ref().expect("a cluster on PostgreSQL (an embedded store is read once stopped)");
        let mut options = PgKvOptions::new(&server.url()).unwrap();
        options.schema = "cluster".into();
        let kv = PgKv::open(options, Arc::new(SystemClock::new())).await.unwrap();
        KvJobStore::new(kv, Arc::new(Calendars::new()), Entropy::from_seed(7), StoreOptions::default())
    }

    /// Every run record in the store.
    pub(crate) async fn history<K: Kv>(&self, store: &KvJobStore<K>) -> Vec<RunRecord> {
        sundial_simulations::world::every_run(store).await.expect("read the history")
    }

    /// The effects file's `text` as the checkers' event log, runs' facts from `history`.
    fn events(&self, text: &str, history: &[RunRecord]) -> Vec<Event> {
        let by_id: BTreeMap<Uuid, &RunRecord> = history.iter().map(|r| (r.id, r)).collect();
        let mut events: Vec<(i64, usize, Event)> = Vec::new();
        for (seq, line) in text.lines().enumerate() {
            let words: Vec<&str> = line.split(' ').collect();
            match words.as_slice() {
                ["S", run, job, scheduled, attempt, node, ns] => {
                    let id: Uuid = run.parse().unwrap();
                    let at = from_ns(ns);
                    let facts = match by_id.get(&id) {
                        Some(record) => JobRun {
                            id,
                            job: record.job.parse().unwrap(),
                            trigger: record.trigger.as_deref().map(|t| t.parse().unwrap()),
                            scheduled_at: sundial::time::from_micros(record.scheduled_us).unwrap(),
                            cause: record.cause,
                            attempt: record.attempt,
                            retry_of: record.retry_of,
                            data: Default::default(),
                        },
                        None => JobRun {
                            id,
                            job: job.parse().unwrap(),
                            trigger: None,
                            scheduled_at: DateTime::parse_from_rfc3339(scheduled).unwrap().to_utc(),
                            cause: RunCause::Schedule,
                            attempt: attempt.parse().unwrap(),
                            retry_of: None,
                            data: Default::default(),
                        },
                    };
                    let incarnation = self.incarnation(node, at);
                    let ignores_cancel = self.uncancelable.contains(*run);
                    let facts = StartFacts { run: facts, node: (*node).to_owned(), incarnation, ignores_cancel };
                    events.push((
                        at.timestamp_nanos_opt().unwrap(),
                        seq,
                        Event { at, kind: EventKind::Start(Box::new(facts)) },
                    ));
                }
                ["E", run, node, ns, outcome] => {
                    let at = from_ns(ns);
                    let outcome = match *outcome {
                        "ok" => "ok",
                        "canceled" => "canceled",
                        _ => "fail",
                    };
                    let kind = EventKind::End { run: run.parse().unwrap(), node: (*node).to_owned(), outcome };
                    events.push((at.timestamp_nanos_opt().unwrap(), seq, Event { at, kind }));
                }
                _ => panic!("a line the jobs do not write: {line:?}"),
            }
        }
        let lines = events.len();
        for (i, (run, at)) in self.killed.iter().enumerate() {
            let node = self.open_node_of(run, text);
            let kind = EventKind::Killed { run: run.parse().unwrap(), node };
            events.push((at.timestamp_nanos_opt().unwrap(), lines + i, Event { at: *at, kind }));
        }
        events.sort_by_key(|(ns, seq, _)| (*ns, *seq));
        events.into_iter().map(|(_, _, e)| e).collect()
    }

    fn open_node_of(&self, run: &str, text: &str) -> String {
        text.lines()
            .find_map(|line| {
                let words: Vec<&str> = line.split(' ').collect();
                matches!(words.as_slice(), ["S", r, ..] if *r == run).then(|| words[5].to_owned())
            })
            .unwrap_or_default()
    }

    /// Which incarnation of node `id` was alive at `at`.
    fn incarnation(&self, id: &str, at: DateTime<Utc>) -> u32 {
        let node = self.nodes.iter().find(|n| n.id == id).unwrap_or_else(|| panic!("a line of an unknown node {id}"));
        node.lives.iter().rev().find(|(_, from, _)| *from <= at).map_or(1, |(n, _, _)| *n)
    }

    /// Reads the effects, then the store (every run a line names is in it by then), and
    /// runs the simulation's checkers. Panics with every violation found.
    pub(crate) async fn check(&self, workload: &Workload) -> Checked {
        let store = self.store().await;
        // The lines first: a run is recorded before it starts, so every run they name is
        // in the history read after them. The nodes run on: a run that just ended has its
        // completion recorded a moment later, so the history is read a second after the
        // lines (runs started meanwhile are due within the checkers' margin of the end).
        let effects = std::fs::read_to_string(&self.effects).unwrap();
        tokio::time::sleep(Duration::from_secs(1)).await;
        // History and job statuses are two reads; a fire committed between them would
        // count in one and not the other. The nodes are frozen (SIGSTOP) across both, after
        // a pause in which the server finishes what they had already sent.
        let pids: Vec<i32> = self.nodes.iter().filter_map(|n| n.child.as_ref().map(|c| c.id() as i32)).collect();
        for pid in &pids {
            signal(*pid, "STOP");
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
        let history = self.history(&store).await;
        let statuses: Vec<JobStatus> = store.statuses().await.expect("read the jobs");
        for pid in &pids {
            signal(*pid, "CONT");
        }
        let end = now();
        let live = self.live(None);
        self.judge(workload, &statuses, &effects, history, end, &live)
    }

    /// Stops the one node of an embedded store as a deploy does, then reads its store and
    /// runs the checkers as of the moment it was asked to stop (it served until then).
    pub(crate) async fn check_stopped(&mut self, workload: &Workload) -> Checked {
        let end = now();
        let live = self.live(Some(end));
        self.stop_all();
        let effects = std::fs::read_to_string(&self.effects).unwrap();
        let (store, _open) = self.open_stopped();
        let history = self.history(&store).await;
        let statuses: Vec<JobStatus> = store.statuses().await.expect("read the jobs");
        self.judge(workload, &statuses, &effects, history, end, &live)
    }

    /// The embedded store of a stopped node, and what keeps it open.
    pub(crate) fn open_stopped(&self) -> (KvJobStore<MemoryKv>, EmbeddedKv) {
        let embedded = EmbeddedKv::open(&self.dir.join("data"), Arc::new(SystemClock::new())).expect("open the store");
        let kv = embedded.kv().clone();
        (KvJobStore::new(kv, Arc::new(Calendars::new()), Entropy::from_seed(7), StoreOptions::default()), embedded)
    }

    /// The node incarnations running now (or, with `at`, those that ran until then).
    fn live(&self, at: Option<DateTime<Utc>>) -> Vec<LiveNode> {
        self.nodes
            .iter()
            .filter(|n| n.child.is_some())
            .filter_map(|n| {
                let (i, from, _) = n.lives.last()?;
                at.is_none_or(|at| *from <= at).then(|| LiveNode {
                    node: n.id.clone(),
                    incarnation: *i,
                    started: *from,
                })
            })
            .collect()
    }

    /// Runs the checkers on what was read: the effects' lines, the history and the jobs'
    /// statuses (read with no commit between them).
    fn judge(
        &self,
        workload: &Workload,
        statuses: &[JobStatus],
        effects: &str,
        history: Vec<RunRecord>,
        end: DateTime<Utc>,
        live: &[LiveNode],
    ) -> Checked {
        let events = self.events(effects, &history);
        let triggers: BTreeSet<(String, String)> = statuses
            .iter()
            .flat_map(|s| s.triggers.iter().map(|t| (s.definition.name.to_string(), t.name.clone())))
            .collect();
        let skews = vec![TimeDelta::zero(); self.nodes.len()];
        let calendars = Calendars::new();
        let setting = Setting {
            epoch: self.epoch,
            settle: Duration::from_secs(2),
            skews: &skews,
            skew_bound_seconds: 0.0,
            misfire_threshold: MISFIRE_THRESHOLD,
            history_retention: Duration::from_secs(7 * 86_400),
            calendars: &calendars,
        };
        let inputs = Inputs {
            setting,
            workload,
            events: &events,
            history: &history,
            deleted: &BTreeMap::new(),
            clock_offsets: (TimeDelta::zero(), TimeDelta::zero()),
            samples: &Samples::default(),
            triggers: &triggers,
            live,
            liveness_from: self.healed,
            jumped_ahead: Duration::ZERO,
            end,
            late_jobs: &BTreeSet::new(),
            final_jobs: statuses,
            changed_at: &BTreeMap::new(),
            in_flux: &BTreeSet::new(),
        };
        let executions = check::SharedExecutions::new();
        let mut checked = check::check_runs(&inputs, &executions);
        checked.merge(check::check_fires(&inputs, &executions));
        if !checked.violations.is_empty() {
            // The server's directory goes with the test process: keep the evidence.
            let kept = std::env::temp_dir().join(sundial_test_support::postgres::unique_name("sundial-cluster-failed"));
            let _ = Command::new("cp").arg("-r").arg(&self.dir).arg(&kept).status();
            let _ = std::fs::write(kept.join("violations.txt"), checked.violations.join("\n"));
            panic!(
                "{} violations (the nodes' logs and the jobs' lines are in {}):\n{}",
                checked.violations.len(),
                kept.display(),
                checked.violations.join("\n")
            );
        }
        checked
    }

    /// The workload of the config's jobs.
    pub(crate) fn workload(&self) -> Workload {
        let file = self.dir.join("jobs.toml");
        std::fs::write(&file, &self.jobs).unwrap();
        let specs = sundial_actors::spec::read_file(&file).expect("the jobs parse");
        Workload {
            code_jobs: specs.definitions,
            runtime_jobs: Vec::new(),
            ops: Vec::new(),
            changed: self.changed.clone(),
            switched: BTreeSet::new(),
        }
    }

    /// Where the cluster's files are.
    pub(crate) fn dir(&self) -> &Path {
        &self.dir
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        for node in &mut self.nodes {
            if let Some(mut child) = node.child.take() {
                let _ = child.kill();
                let _ = child.wait();
            }
        }
        // The killed nodes' processes are gone; a stopped node's children end with it.
    }
}

fn from_ns(text: &str) -> DateTime<Utc> {
    DateTime::from_timestamp_nanos(text.parse().unwrap_or_else(|_| panic!("a time in ns: {text:?}")))
}

fn signal(pid: i32, sig: &str) {
    assert!(process::signal(pid, sig), "kill -{sig} {pid}");
}

/// A minimal HTTP/1.1 request to 127.0.0.1:`port`: status and body, `None` when nothing
/// answers.
fn http(port: u16, method: &str, path: &str, body: Option<&str>) -> Option<(u16, String)> {
    let mut stream = TcpStream::connect(("127.0.0.1", port)).ok()?;
    stream.set_read_timeout(Some(Duration::from_secs(10))).ok()?;
    let body = body.unwrap_or("");
    let request = format!(
        "{method} {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    );
    stream.write_all(request.as_bytes()).ok()?;
    let mut response = String::new();
    stream.read_to_string(&mut response).ok()?;
    let status = response.split(' ').nth(1)?.parse().ok()?;
    let body = response.split_once("\r\n\r\n").map(|(_, b)| b.to_owned()).unwrap_or_default();
    // Chunked bodies: the JSON is the chunk between the size lines.
    let body = if response.to_ascii_lowercase().contains("transfer-encoding: chunked") {
        body.lines()
            .filter(|l| !l.is_empty() && u64::from_str_radix(l.trim(), 16).is_err())
            .collect::<Vec<_>>()
            .join("\n")
    } else {
        body
    };
    Some((status, body))
}
