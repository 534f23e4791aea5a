//! Goal: a node's events leave the process. Every topic the engine emits (a job scheduled,
//! unscheduled, paused, resumed; a run started, succeeded, failed, canceled, lost) reaches
//! a real HTTP receiver, in structured and in binary CloudEvents mode, and a real NATS
//! server, with the right `type`, `source`, `subject`, ids and data. While a receiver is
//! down, slow, or back again, events wait and arrive, and runs are not held up.
//!
//! Method: the real binary as a child process with `[[events.http]]` and `[[events.nats]]`
//! sinks; an axum receiver on a runtime of the test's own (down: not listening; slow:
//! answering after 100 ms), Debian's `nats-server` stopped and started again, and a NATS
//! subscriber. A run is lost the way it happens in production: the node is killed with
//! SIGKILL while it runs and restarted under the same id.
#![cfg(all(feature = "node", unix))]
// These tests wait on real processes and servers, in real time.
#![allow(clippy::disallowed_methods)]

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::body::Bytes;
use axum::extract::{Path as UrlPath, State};
use axum::http::HeaderMap;
use axum::routing::post;
use parking_lot::Mutex;
use serde_json::Value;
use sundial_test_support::dir::TempDir;
use sundial_test_support::nats::NatsServer;
use sundial_test_support::node_process::{http, NodeProcess};

const BIN: &str = env!("CARGO_BIN_EXE_sundial");
const TOKEN: &str = "events-token-0123456789";

/// One request the receiver got: its path (`structured` or `binary`), its `ce-*` and
/// content-type headers, and its body.
#[derive(Debug, Clone)]
struct Got {
    mode: String,
    headers: BTreeMap<String, String>,
    body: Value,
}

type Inbox = Arc<Mutex<Vec<Got>>>;

/// An HTTP receiver of CloudEvents on a fixed port, on a runtime of its own: dropping the
/// runtime takes the listener and every connection down, as a crash would.
struct Receiver {
    runtime: Option<tokio::runtime::Runtime>,
}

impl Receiver {
    fn start(port: u16, inbox: Inbox, delay_ms: Arc<AtomicU64>) -> Self {
        let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build().unwrap();
        runtime.block_on(async {
            let listener = tokio::net::TcpListener::bind(("127.0.0.1", port)).await.unwrap();
            let app = axum::Router::new().route("/{mode}", post(receive)).with_state((inbox, delay_ms));
            tokio::spawn(async move { axum::serve(listener, app).await });
        });
        Self { runtime: Some(runtime) }
    }

    fn stop(&mut self) {
        if let Some(runtime) = self.runtime.take() {
            runtime.shutdown_background();
        }
    }
}

impl Drop for Receiver {
    fn drop(&mut self) {
        self.stop();
    }
}

async fn receive(
    State((inbox, delay_ms)): State<(Inbox, Arc<AtomicU64>)>,
    UrlPath(mode): UrlPath<String>,
    headers: HeaderMap,
    body: Bytes,
) -> &'static str {
    tokio::time::sleep(Duration::from_millis(delay_ms.load(Ordering::Relaxed))).await;
    let headers = headers
        .iter()
        .filter(|(name, _)| name.as_str().starts_with("ce-") || name.as_str() == "content-type")
        .map(|(name, value)| (name.as_str().to_owned(), value.to_str().unwrap_or("").to_owned()))
        .collect();
    let body = serde_json::from_slice(&body).unwrap_or(Value::Null);
    inbox.lock().push(Got { mode, headers, body });
    "ok"
}

/// A NATS subscriber to `sundial.>`, collecting (subject, JSON body).
struct Subscriber {
    _runtime: tokio::runtime::Runtime,
    got: Arc<Mutex<Vec<(String, Value)>>>,
}

impl Subscriber {
    fn start(url: &str) -> Self {
        let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build().unwrap();
        let got = Arc::new(Mutex::new(Vec::new()));
        let sink = got.clone();
        runtime.block_on(async {
            let client = async_nats::connect(url).await.unwrap();
            let mut messages = client.subscribe("sundial.>").await.unwrap();
            client.flush().await.unwrap();
            tokio::spawn(async move {
                use futures_util::StreamExt;
                let _client = client;
                while let Some(message) = messages.next().await {
                    let body = serde_json::from_slice(&message.payload).unwrap_or(Value::Null);
                    sink.lock().push((message.subject.to_string(), body));
                }
            });
        });
        Self { _runtime: runtime, got }
    }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// Waits up to `limit` for `done`.
fn eventually(what: &str, limit: Duration, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + limit;
    while !done() {
        assert!(Instant::now() < deadline, "not within {limit:?}: {what}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The structured events received so far.
fn structured(inbox: &Inbox) -> Vec<Value> {
    inbox.lock().iter().filter(|g| g.mode == "structured").map(|g| g.body.clone()).collect()
}

fn has(inbox: &Inbox, event_type: &str, subject: &str) -> bool {
    structured(inbox).iter().any(|e| e["type"] == event_type && e["subject"] == subject)
}

/// A sink's count of `result` in the node's `/metrics`.
fn sink_metric(node: &NodeProcess, sink: &str, result: &str) -> u64 {
    let (_, text) = http(node.port(), "GET", "/metrics", None, None);
    let needle = format!("sundial_event_sink_events_total{{sink=\"{sink}\",result=\"{result}\"}} ");
    text.lines().find_map(|l| l.strip_prefix(needle.as_str())).and_then(|v| v.trim().parse().ok()).unwrap_or(0)
}

fn start_node(config: &Path) -> NodeProcess {
    NodeProcess::start(Path::new(BIN), &["--config", config.to_str().unwrap()], &[("SUNDIAL_NODE_ID", "n1")])
        .with_token(TOKEN)
}

/// The id of the newest run of `job` once one is in `state`.
fn run_in_state(node: &NodeProcess, job: &str, state: &str) -> String {
    let mut id = String::new();
    eventually(&format!("a {state} run of {job}"), Duration::from_secs(20), || {
        let runs = node.cli_json(&["runs", "list", "--job", job]);
        match runs.as_array().unwrap().iter().find(|r| r["state"] == state) {
            Some(run) => {
                id = run["id"].as_str().unwrap().to_owned();
                true
            }
            None => false,
        }
    });
    id
}

#[test]
fn every_topic_reaches_http_and_nats_receivers_through_outages() {
    let Some(mut nats) = NatsServer::start() else { return };
    let dir = TempDir::new("events-out");
    let port = free_port();
    let config = dir.path().join("sundial.toml");
    std::fs::write(
        &config,
        format!(
            r#"
[scheduler]
poll_interval_seconds = 1

[admin]
token = "{TOKEN}"

[[events.http]]
name = "hooks"
url = "http://127.0.0.1:{port}/structured"
max_attempts = 100

[[events.http]]
name = "hooks-binary"
url = "http://127.0.0.1:{port}/binary"
mode = "binary"
max_attempts = 100

[[events.nats]]
name = "bus"
url = "{nats}"
max_attempts = 100
"#,
            nats = nats.url()
        ),
    )
    .unwrap();
    let jobs = dir.path().join("jobs.toml");
    std::fs::write(
        &jobs,
        r#"
[[jobs]]
name = "ok"
type = "shell"
data = { program = "true" }

[[jobs]]
name = "fails"
type = "shell"
data = { program = "sh", args = ["-c", "exit 3"] }

[[jobs]]
name = "long"
type = "shell"
data = { program = "sleep", args = ["30"] }
"#,
    )
    .unwrap();
    let subscriber = Subscriber::start(&nats.url());
    let mut node = start_node(&config);

    // The HTTP receiver is down: runs go on, events wait.
    let applied = node.cli_json(&["jobs", "apply", "-f", jobs.to_str().unwrap()]);
    assert!(applied.as_array().unwrap().iter().all(|r| r["ok"] == true), "{applied}");
    let started = Instant::now();
    assert_eq!(node.cli_json(&["jobs", "trigger", "ok"])["state"], "Succeeded");
    assert!(started.elapsed() < Duration::from_secs(5), "a run waited for a sink: {:?}", started.elapsed());

    // Back, and slow: everything queued arrives.
    let inbox: Inbox = Arc::default();
    let delay = Arc::new(AtomicU64::new(100));
    let mut receiver = Receiver::start(port, inbox.clone(), delay.clone());
    eventually("the events queued while the receiver was down", Duration::from_secs(30), || {
        ["ok", "fails", "long"].iter().all(|job| has(&inbox, "scheduling.job.scheduled", job))
            && structured(&inbox).iter().any(|e| e["type"] == "scheduling.run.succeeded")
    });
    delay.store(0, Ordering::Relaxed);

    // Paused, resumed, failed, canceled, unscheduled.
    node.cli_json(&["jobs", "pause", "ok"]);
    node.cli_json(&["jobs", "resume", "ok"]);
    assert_eq!(node.cli_json_status(&["jobs", "trigger", "fails"]).0, Some(1));
    node.cli_json(&["jobs", "enqueue", "long"]);
    let canceled = run_in_state(&node, "long", "Running");
    node.cli_json(&["runs", "cancel", &canceled]);
    node.cli_json(&["jobs", "delete", "ok"]);
    eventually("the run canceled", Duration::from_secs(20), || has(&inbox, "scheduling.run.canceled", &canceled));

    // NATS down: its events wait in the node; back: they are delivered.
    nats.stop();
    assert_eq!(node.cli_json_status(&["jobs", "trigger", "fails"]).0, Some(1));
    std::thread::sleep(Duration::from_millis(500));
    assert!(
        sink_metric(&node, "bus", "delivered") < sink_metric(&node, "hooks", "delivered"),
        "events wait for the NATS server"
    );
    nats.start_again();
    eventually("every event on NATS too", Duration::from_secs(30), || {
        let http_count = sink_metric(&node, "hooks", "delivered");
        http_count == structured(&inbox).len() as u64 && sink_metric(&node, "bus", "delivered") == http_count
    });

    // A run lost with its node: killed while it runs, restarted under the same id.
    node.cli_json(&["jobs", "enqueue", "long"]);
    let lost = run_in_state(&node, "long", "Running");
    node.signal("-KILL");
    let _ = node.child.wait();
    let mut node = start_node(&config);
    eventually("the run lost", Duration::from_secs(30), || has(&inbox, "scheduling.run.lost", &lost));
    eventually("the run lost, on NATS", Duration::from_secs(30), || {
        subscriber
            .got
            .lock()
            .iter()
            .any(|(_, body)| body["type"] == "scheduling.run.lost" && body["subject"] == lost.as_str())
    });
    assert!(node.terminate().success());
    receiver.stop();

    // Every topic, each event as the CloudEvents spec and SPEC §12 have it.
    let events = structured(&inbox);
    let types: BTreeSet<&str> = events.iter().filter_map(|e| e["type"].as_str()).collect();
    let all = [
        "scheduling.job.scheduled",
        "scheduling.job.unscheduled",
        "scheduling.job.paused",
        "scheduling.job.resumed",
        "scheduling.run.started",
        "scheduling.run.succeeded",
        "scheduling.run.failed",
        "scheduling.run.canceled",
        "scheduling.run.lost",
    ];
    assert_eq!(types, all.into_iter().collect(), "{events:#?}");
    let ids: BTreeSet<&str> = events.iter().filter_map(|e| e["id"].as_str()).collect();
    assert_eq!(ids.len(), events.len(), "ids are unique");
    for event in &events {
        assert_eq!((event["specversion"].as_str(), event["source"].as_str()), (Some("1.0"), Some("/scheduling")));
        let (kind, data) = (event["type"].as_str().unwrap(), &event["data"]);
        assert_eq!(data["node"], "n1", "{event}");
        if kind.starts_with("scheduling.job.") {
            assert_eq!(event["subject"], data["job"], "{event}");
        } else {
            assert_eq!(event["subject"], data["run_id"], "{event}");
            assert!(data["scheduled_at"].is_string() && data["attempt"].is_number(), "{event}");
        }
    }
    let of = |kind: &str, job: &str| {
        events.iter().find(|e| e["type"] == kind && e["data"]["job"] == job).unwrap_or_else(|| panic!("{kind} {job}"))
    };
    let failed = &of("scheduling.run.failed", "fails")["data"];
    assert_eq!((failed["state"].as_str(), failed["error_code"].as_str()), (Some("Failed"), Some("EXIT_3")));
    assert_eq!(of("scheduling.run.succeeded", "ok")["data"]["state"], "Succeeded");
    assert_eq!(of("scheduling.run.canceled", "long")["subject"], canceled.as_str());
    assert_eq!(of("scheduling.run.lost", "long")["data"]["state"], "Lost");

    // Binary mode: the same events, attributes as headers, the data as the body.
    let binary: Vec<Got> = inbox.lock().iter().filter(|g| g.mode == "binary").cloned().collect();
    assert_eq!(binary.len(), events.len());
    for got in &binary {
        let id = got.headers.get("ce-id").unwrap();
        let twin = events.iter().find(|e| e["id"] == id.as_str()).unwrap_or_else(|| panic!("{got:?}"));
        assert_eq!(got.headers.get("ce-type").map(String::as_str), twin["type"].as_str());
        assert_eq!(got.headers.get("ce-subject").map(String::as_str), twin["subject"].as_str());
        assert_eq!(got.headers.get("ce-source").map(String::as_str), Some("/scheduling"));
        assert_eq!(got.headers.get("ce-specversion").map(String::as_str), Some("1.0"));
        assert_eq!(got.headers.get("content-type").map(String::as_str), Some("application/json"));
        assert_eq!(got.body, twin["data"]);
    }
    for got in inbox.lock().iter().filter(|g| g.mode == "structured") {
        let content_type = got.headers.get("content-type").map_or("", String::as_str);
        assert!(content_type.starts_with("application/cloudevents+json"), "{got:?}");
    }

    // NATS: subjects <prefix>.<type>, the envelope as the body; every topic reached the
    // subscriber (those sent while the server was down may reach it or not: NATS keeps
    // nothing for a subscriber that is reconnecting).
    let messages = subscriber.got.lock().clone();
    for (subject, body) in &messages {
        assert_eq!(subject, &format!("sundial.{}", body["type"].as_str().unwrap()));
        assert!(events.iter().any(|e| e["id"] == body["id"]), "{body}");
    }
    let nats_types: BTreeSet<&str> = messages.iter().filter_map(|(_, b)| b["type"].as_str()).collect();
    assert_eq!(nats_types, all.into_iter().collect());
}
