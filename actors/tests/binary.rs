//! Goal: the `sundial` binary works as a new user meets it: the demo node runs and stops on
//! SIGTERM; a node from a config file with shell and HTTP jobs is driven through the admin
//! API and the CLI (history, statuses, retries, timeouts, cancellation, restore, pause,
//! auth); a node leads through a Kubernetes Lease (a fake API server) and gives it up when
//! it stops; bad configs, bad requests and bad CLI input are refused with clear messages and
//! stable codes (in Chinese under a Chinese locale); the offline helpers print instants; a
//! CLI with no node to talk to, and a node whose admin port is taken, say why and what to
//! change.
//!
//! Method: runs the real binary as child processes on free ports (real time, a few
//! seconds per test), talking HTTP with a minimal client so the tests see raw statuses.
#![cfg(all(feature = "node", unix))]
// These tests wait on real child processes, in real time; no simulation reads this clock.
#![allow(clippy::disallowed_methods)]

use sundial_test_support::fake_kubernetes;
use sundial_test_support::node_process::{code_of, http, http_with, NodeProcess};
use sundial_test_support::tls::TestCa;

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

const BIN: &str = env!("CARGO_BIN_EXE_sundial");
const TOKEN: &str = "test-token-0123456789";
/// Secrets of the `secretive` job: in its data, in the node's environment, stored as
/// `$secret`.
const PLAIN_SECRET: &str = "plain-secret-value";
const ENV_SECRET: &str = "env-secret-value";
const STORED_SECRET: &str = "stored-secret-value";
/// A token of the `read` role in [`CONFIG`].
const READ_TOKEN: &str = "read-token-0123456789";

/// A node of this binary, its CLI sending the admin token.
fn start_node(args: &[&str], envs: &[(&str, &str)]) -> NodeProcess {
    NodeProcess::start(Path::new(BIN), args, envs).with_token(TOKEN)
}

/// A scratch directory for one test, removed when dropped (also when the test fails).
struct TempDir(PathBuf);

impl TempDir {
    fn new(name: &str) -> Self {
        let dir = std::env::temp_dir().join(format!("sundial-binary-{name}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        Self(dir)
    }
}

impl std::ops::Deref for TempDir {
    type Target = Path;
    fn deref(&self) -> &Path {
        &self.0
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap();
    path
}

/// Polls the runs of `job` until `done` holds (or 20 s pass); the last list.
fn runs_until(node: &NodeProcess, job: &str, done: impl Fn(&[Value]) -> bool) -> Vec<Value> {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let runs = node.cli_json(&["runs", "list", "--job", job]);
        let runs = runs.as_array().unwrap().clone();
        if done(&runs) || Instant::now() > deadline {
            return runs;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

#[test]
fn the_demo_node_runs_its_jobs_and_stops_on_sigterm() {
    let mut node = start_node(&["--demo"], &[]);
    node.wait_for("demo job ran", Duration::from_secs(15));
    let (status, body) = http(node.port(), "GET", "/health", None, None);
    assert_eq!((status, body.as_str()), (200, "{\"status\":\"serving\"}"));
    // The CLI asks for the messages in the user's language (SPEC §14: English and
    // Simplified Chinese).
    let mut command = Command::new(BIN);
    command.args(["jobs", "show", "nope"]).env("SUNDIAL_SERVER", &node.base).env_remove("LC_ALL");
    let out = command.env("LANG", "zh_CN.UTF-8").env_remove("LC_MESSAGES").output().unwrap();
    assert_eq!(out.status.code(), Some(3));
    assert!(String::from_utf8_lossy(&out.stderr).contains("SCHEDULING_NOTFOUND_001: 作业未登记"), "{out:?}");
    let out = command.env("LANG", "en_US.UTF-8").output().unwrap();
    assert!(String::from_utf8_lossy(&out.stderr).contains("SCHEDULING_NOTFOUND_001: job not registered"), "{out:?}");
    let status = node.terminate();
    assert!(status.success(), "clean exit on SIGTERM: {status:?}\n{}", node.seen.join("\n"));
    assert!(node.seen.iter().any(|l| l.contains("stopped")), "{}", node.seen.join("\n"));
    // Lines carry the run's own span, not ractor's (actor ids and names) by default.
    assert!(node.seen.iter().any(|l| l.contains("run{run_id=")), "{}", node.seen.join("\n"));
    assert!(!node.seen.iter().any(|l| l.contains("Actor{")), "{}", node.seen.join("\n"));
    assert!(!node.seen.iter().any(|l| l.contains("lease can lapse")), "{}", node.seen.join("\n"));
}

#[test]
fn warnings_at_start_name_a_lease_too_short_to_renew_and_a_misspelt_setting() {
    let envs = [("SUNDIAL_LEASE_TTL_SECONDS", "0.005"), ("SUNDIAL_POLL_INTERVAL", "5")];
    let mut node = start_node(&["--demo"], &envs);
    // Said as the node starts, before its admin API listens.
    let mut said = |needle: &str| {
        let line = node.seen.iter().find(|l| l.contains(needle)).cloned();
        line.unwrap_or_else(|| node.wait_for(needle, Duration::from_secs(15)))
    };
    // Valid (SPEC §13 asks > 0), but renewals come at most every 10 ms.
    let line = said("lease can lapse");
    assert!(line.contains("WARN") && line.contains("lease_ttl_ms=5"), "{line}");
    let line = said("SUNDIAL_POLL_INTERVAL is not a setting");
    assert!(line.contains("WARN") && line.contains("did you mean SUNDIAL_POLL_INTERVAL_SECONDS?"), "{line}");
    // SIGTERM stops a node cleanly once it serves (its handler is set up by then).
    said("sundial node serving");
    assert!(node.terminate().success(), "{}", node.seen.join("\n"));
}

const CONFIG: &str = r#"
[scheduler]
poll_interval_seconds = 1

[admin]
token = "test-token-0123456789"
[[admin.tokens]]
name = "dashboards"
role = "read"
value = "read-token-0123456789"

[[jobs]]
name = "nightly"
type = "log"
data = { message = "nightly ran" }
[[jobs.triggers]]
name = "at-two"
schedule = "cron 0 0 2 * * * tz=Europe/Berlin"
"#;

#[test]
fn a_configured_node_is_driven_through_the_api_and_the_cli() {
    let dir = TempDir::new("drive");
    let config = write(&dir, "sundial.toml", CONFIG);
    let mut node = start_node(&["--config", config.to_str().unwrap()], &[("SECRETIVE_TOKEN", ENV_SECRET)]);
    let port = node.port();
    // The API listens from the start; code jobs are written on the first poll cycle.
    node.wait_for("code jobs written to the store", Duration::from_secs(20));

    // The config's job is a code job.
    let job = node.cli_json(&["jobs", "show", "nightly"]);
    assert_eq!(job["origin"], "Code");
    assert_eq!(job["spec"]["triggers"][0]["schedule"], "cron 0 0 2 * * * tz=Europe/Berlin");
    let info = node.cli_json(&["node", "info"]);
    assert_eq!(info["state"], "serving");
    assert_eq!(info["store"], "embedded");
    assert!(dir.0.join("sundial-data").join(sundial::kv::embedded::DATA_FILE).exists(), "beside the config");
    for kind in ["shell", "http", "log"] {
        assert!(info["job_types"].as_array().unwrap().iter().any(|t| t == kind), "{info}");
    }

    // Jobs from a file: shell ok, shell failing with retries, shell timing out, shell for
    // cancellation, and an HTTP job calling this node's own health endpoint.
    let jobs = format!(
        r#"
[[jobs]]
name = "echo"
type = "shell"
data = {{ program = "sh", args = ["-c", "echo hi; test \"$SUNDIAL_JOB\" = echo"] }}

[[jobs]]
name = "flaky"
type = "shell"
retry = {{ max_retries = 2, delay = "300ms" }}
data = {{ program = "sh", args = ["-c", "echo broken >&2; exit 3"] }}

[[jobs]]
name = "slow"
type = "shell"
timeout = "500ms"
data = {{ program = "sleep", args = ["37"] }}

[[jobs]]
name = "long"
type = "shell"
data = {{ program = "sleep", args = ["30"] }}

[[jobs]]
name = "ping"
type = "http"
data = {{ url = "http://127.0.0.1:{port}/health" }}

[[jobs]]
name = "secretive"
type = "shell"
data = {{ program = "sh", args = ["-c", "test ${{#PLAIN}} = {plain} && test ${{#FROM_ENV}} = {env} && test ${{#1}} = {stored} && echo leaked $PLAIN $FROM_ENV $1 >&2 && exit 9; exit 1", "sh", {{ "$secret" = "{STORED_SECRET}" }}], env = {{ PLAIN = "{PLAIN_SECRET}", FROM_ENV = {{ "$env" = "SECRETIVE_TOKEN" }} }} }}

[[jobs]]
name = "missing"
type = "http"
data = {{ url = "http://127.0.0.1:{port}/nowhere", success = [200], headers = {{ authorization = "Bearer {READ_TOKEN}" }} }}
"#,
        // The script checks the lengths of its secrets: their values would show in it.
        plain = PLAIN_SECRET.len(),
        env = ENV_SECRET.len(),
        stored = STORED_SECRET.len(),
    );
    let file = write(&dir, "jobs.toml", &jobs);
    let out = node.cli(&["jobs", "apply", "-f", file.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(7), "no token, no change: {}", String::from_utf8_lossy(&out.stderr));
    let applied = node.cli_json(&["jobs", "apply", "-f", file.to_str().unwrap()]);
    assert!(applied.as_array().unwrap().iter().all(|r| r["ok"] == true), "{applied}");

    let ok = node.cli(&["jobs", "trigger", "echo", "--token", TOKEN]);
    assert_eq!(ok.status.code(), Some(0), "{}", String::from_utf8_lossy(&ok.stdout));
    let ping = node.cli_json(&["jobs", "trigger", "ping"]);
    assert_eq!(ping["state"], "Succeeded", "{ping}");
    let (code, missing) = node.cli_json_status(&["jobs", "trigger", "missing"]);
    assert_eq!((code, &missing["error_code"]), (Some(1), &Value::from("HTTP_404")), "{missing}");

    // A failing shell job: exit code and stderr in the run, then two retries.
    let failed = node.cli(&["jobs", "trigger", "flaky", "--token", TOKEN]);
    assert_eq!(failed.status.code(), Some(1));
    let text = String::from_utf8_lossy(&failed.stdout);
    assert!(text.contains("EXIT_3") && text.contains("broken"), "{text}");
    // A retry is taken from the store a little ahead of its time and shows as `Running`
    // until it has run: wait for the third run's end.
    let runs = runs_until(&node, "flaky", |runs| runs.len() == 3 && runs.iter().all(|r| r["state"] != "Running"));
    assert_eq!(runs.len(), 3, "{runs:?}");
    let first = runs.iter().find(|r| r["attempt"] == 1).unwrap();
    for attempt in [2, 3] {
        let retry = runs.iter().find(|r| r["attempt"] == attempt).unwrap_or_else(|| panic!("{runs:?}"));
        assert_eq!(retry["retry_of"], first["id"]);
        assert_eq!(retry["cause"], "Retry");
        assert_eq!(retry["state"], "Failed");
    }
    let count = node.cli_json(&["runs", "count", "--job", "flaky", "--state", "failed", "--has-error", "true"]);
    assert_eq!(count["count"], 3);

    // Secrets: the job gets them (exit 9, not 1, says every `test` passed); no route, log
    // line or stored message shows them.
    let (code, secretive) = node.cli_json_status(&["jobs", "trigger", "secretive"]);
    assert_eq!((code, &secretive["error_code"]), (Some(1), &Value::from("EXIT_9")), "{secretive}");
    assert!(secretive["error_message"].as_str().unwrap().contains("leaked [redacted] [redacted] [redacted]"));
    let shown = node.cli_json(&["jobs", "show", "secretive"]);
    assert_eq!(
        shown["spec"]["data"]["env"],
        serde_json::json!({"PLAIN": "[redacted]", "FROM_ENV": {"$env": "SECRETIVE_TOKEN"}})
    );
    assert_eq!(shown["spec"]["data"]["args"][3], serde_json::json!({"$secret": "[redacted]"}));
    // Applied back as shown, the job would lose its secrets: refused.
    let copy = write(&dir, "copy.json", &shown["spec"].to_string());
    let (code, refused) = node.cli_json_status(&["jobs", "apply", "-f", copy.to_str().unwrap()]);
    assert_eq!(code, Some(4), "{refused}");
    assert!(refused.to_string().contains("copied from a redacted view"), "{refused}");

    // A timeout beats the job, and kills its process.
    let (code, slow) = node.cli_json_status(&["jobs", "trigger", "slow"]);
    assert_eq!((code, &slow["error_code"]), (Some(1), &Value::from("SCHEDULING_TIMEOUT_001")), "{slow}");
    let left = Command::new("pgrep").args(["-f", "^sleep 37$"]).output().unwrap();
    assert!(left.stdout.is_empty(), "the timed-out program was killed");

    // Cancel a queued run while it runs.
    let enqueued = node.cli_json(&["jobs", "enqueue", "long"]);
    assert!(enqueued["trigger"].as_str().unwrap().starts_with("manual-"), "{enqueued}");
    let running = runs_until(&node, "long", |runs| runs.iter().any(|r| r["state"] == "Running"));
    let id = running[0]["id"].as_str().unwrap().to_owned();
    let canceled = node.cli_json(&["runs", "cancel", &id]);
    assert_eq!(canceled[0]["ok"], true, "{canceled}");
    let ended = runs_until(&node, "long", |runs| runs.iter().all(|r| r["state"] != "Running"));
    assert_eq!(ended[0]["state"], "Canceled", "{ended:?}");

    // Override a code job, then restore it; pause and resume one trigger.
    let mut spec = job["spec"].clone();
    spec["data"]["message"] = "changed".into();
    let override_file = write(&dir, "override.json", &spec.to_string());
    node.cli_json(&["jobs", "apply", "-f", override_file.to_str().unwrap()]);
    assert_eq!(node.cli_json(&["jobs", "show", "nightly"])["origin"], "Overridden");
    node.cli_json(&["jobs", "restore", "nightly"]);
    let restored = node.cli_json(&["jobs", "show", "nightly"]);
    assert_eq!(
        (restored["origin"].as_str(), restored["spec"]["data"]["message"].as_str()),
        (Some("Code"), Some("nightly ran"))
    );
    node.cli_json(&["triggers", "pause", "nightly", "at-two"]);
    let paused = node.cli_json(&["jobs", "show", "nightly"]);
    assert_eq!(paused["triggers"][0]["paused"], true, "{paused}");
    node.cli_json(&["triggers", "resume", "nightly", "at-two"]);
    node.cli_json(&["jobs", "pause", "nightly"]);
    assert_eq!(node.cli_json(&["jobs", "show", "nightly"])["paused"], true);

    // Tables for people.
    let table = node.cli(&["runs", "list", "--job", "flaky", "--token", READ_TOKEN]);
    let text = String::from_utf8_lossy(&table.stdout);
    assert!(text.starts_with("RUN ") && text.contains("EXIT_3"), "{text}");

    // Not found, invalid, and the exit codes.
    assert_eq!(node.cli(&["jobs", "show", "nope", "--token", READ_TOKEN]).status.code(), Some(3));
    assert_eq!(node.cli(&["jobs", "show", "nightly"]).status.code(), Some(7), "reads need a token too");
    assert_eq!(node.cli(&["jobs", "pause", "nightly", "--token", READ_TOKEN]).status.code(), Some(7));
    assert_eq!(node.cli(&["jobs", "trigger", "nope", "--token", TOKEN]).status.code(), Some(3));
    assert_eq!(node.cli(&["runs", "list", "--limit", "0", "--token", READ_TOKEN]).status.code(), Some(4));
    assert_eq!(node.cli(&["runs", "cancel", "not-a-uuid", "--token", TOKEN]).status.code(), Some(4));
    assert_eq!(node.cli(&["jobs", "trigger", "echo", "--data", "[1]", "--token", TOKEN]).status.code(), Some(2));
    node.cli_json(&["jobs", "delete", "echo"]);
    assert_eq!(node.cli(&["jobs", "show", "echo", "--token", TOKEN]).status.code(), Some(3));
    assert_eq!(
        Command::new(BIN).args(["jobs", "list", "--server", "http://127.0.0.1:1"]).output().unwrap().status.code(),
        Some(6)
    );

    // Every change is in the audit log, with who asked and what came of it; reads and
    // refused requests are not changes.
    let audit = node.cli_json(&["audit", "list", "--limit", "1000"]);
    let entries = audit.as_array().unwrap();
    let find = |action: &str, target: &str| {
        entries
            .iter()
            .find(|e| e["action"] == action && e["target"] == target)
            .unwrap_or_else(|| panic!("no {action} {target}: {audit}"))
    };
    for (action, target) in [
        ("restore", "nightly"),
        ("pause_trigger", "nightly/at-two"),
        ("pause", "nightly"),
        ("enqueue", "long"),
        ("cancel", id.as_str()),
        ("schedule", "ping"),
        ("unschedule", "echo"),
    ] {
        let entry = find(action, target);
        assert_eq!((entry["actor"].as_str(), entry["error_code"].as_str()), (Some("admin"), None), "{entry}");
    }
    assert_eq!(find("trigger", "nope")["error_code"], "SCHEDULING_NOTFOUND_001");
    assert_eq!(find("schedule", "secretive")["error_code"], "SCHEDULING_VALIDATION_001", "the refused copy");
    assert!(!entries.iter().any(|e| e["actor"] == "dashboards"), "the read token changed nothing: {audit}");
    assert!(entries.windows(2).all(|w| w[0]["at"].as_str() >= w[1]["at"].as_str()), "newest first");
    let restores = node.cli_json(&["audit", "list", "--action", "restore,resume", "--target", "nightly"]);
    assert_eq!(restores.as_array().unwrap().len(), 1, "{restores}");
    let failed = node.cli_json(&["audit", "list", "--failed", "true"]);
    assert!(failed.as_array().unwrap().iter().all(|e| !e["error_code"].is_null()), "{failed}");
    assert_eq!(node.cli(&["audit", "list", "--action", "delete", "--token", READ_TOKEN]).status.code(), Some(4));

    // Raw HTTP: every route but the probes needs a token, changes an admin one; bad input
    // is a 4xx with a code.
    /// Method, path, token, body, expected status and code.
    type Case<'a> = (&'a str, &'a str, Option<&'a str>, Option<&'a str>, u16, &'a str);
    let cases: [Case; 19] = [
        ("POST", "/api/jobs/nightly/pause", None, None, 401, "ADMIN_AUTH_001"),
        ("POST", "/api/jobs/nightly/pause", Some("wrong-token-0123456789"), None, 401, "ADMIN_AUTH_001"),
        ("POST", "/api/jobs/nightly/pause", Some(READ_TOKEN), None, 403, "ADMIN_AUTH_002"),
        ("DELETE", "/api/jobs/nightly", Some(READ_TOKEN), None, 403, "ADMIN_AUTH_002"),
        ("GET", "/api/jobs", None, None, 401, "ADMIN_AUTH_001"),
        ("GET", "/api/openapi.json", None, None, 401, "ADMIN_AUTH_001"),
        ("GET", "/api/runs", Some("wrong-token-0123456789"), None, 401, "ADMIN_AUTH_001"),
        ("GET", "/api/jobs", Some(READ_TOKEN), None, 200, ""),
        ("GET", "/health", None, None, 200, ""),
        ("PUT", "/api/jobs/x", Some(TOKEN), Some("{not json"), 400, "ADMIN_REQUEST_001"),
        ("PUT", "/api/jobs/x", Some(TOKEN), Some(r#"{"name":"y","type":"log"}"#), 400, "ADMIN_REQUEST_001"),
        ("PUT", "/api/jobs/x", Some(TOKEN), Some(r#"{"name":"x","type":"nope"}"#), 404, "SCHEDULING_NOTFOUND_002"),
        (
            "PUT",
            "/api/jobs/x",
            Some(TOKEN),
            Some(r#"{"name":"x","type":"shell","data":{"args":["a"]}}"#),
            400,
            "SCHEDULING_VALIDATION_001",
        ),
        ("GET", "/api/runs?limit=5000", Some(READ_TOKEN), None, 400, "SCHEDULING_VALIDATION_002"),
        ("GET", "/api/runs?state=sleeping", Some(READ_TOKEN), None, 400, "ADMIN_REQUEST_001"),
        ("GET", "/api/jobs/Bad%20Name", Some(TOKEN), None, 400, "ADMIN_REQUEST_001"),
        ("POST", "/api/runs/cancel", Some(TOKEN), Some(r#"{"ids":["0190d6a8-0000-7000-8000-000000000000"]}"#), 200, ""),
        ("DELETE", "/api/node", Some(TOKEN), None, 405, "ADMIN_METHOD_001"),
        ("GET", "/api/nothing", Some(READ_TOKEN), None, 404, "ADMIN_ROUTE_001"),
    ];
    for (method, path, token, body, status, code) in cases {
        let (got, text) = http(port, method, path, token, body);
        assert_eq!(got, status, "{method} {path}: {text}");
        assert_eq!(code_of(&text), code, "{method} {path}: {text}");
    }
    let (status, text) = http(
        port,
        "POST",
        "/api/runs/cancel",
        Some(TOKEN),
        Some(r#"{"ids":["0190d6a8-0000-7000-8000-000000000000"]}"#),
    );
    assert_eq!(status, 200);
    assert!(text.contains("SCHEDULING_NOTFOUND_004"), "{text}");
    let auth = format!("Bearer {READ_TOKEN}");
    let (status, text) = http_with(
        port,
        "GET",
        "/api/jobs/nope",
        &[("Accept-Language", "zh-CN,zh;q=0.9"), ("Authorization", &auth)],
        None,
    );
    assert_eq!((status, code_of(&text).as_str()), (404, "SCHEDULING_NOTFOUND_001"));
    assert!(text.contains("作业未登记"), "messages in Chinese on request: {text}");
    let (status, metrics) = http(port, "GET", "/metrics", None, None);
    assert_eq!(status, 200);
    assert!(metrics.contains("sundial_runs_total{job=\"flaky\",outcome=\"failed\"} 3"), "{metrics}");
    assert!(metrics.contains("sundial_leader 1"), "{metrics}");
    let (status, openapi) = http(port, "GET", "/api/openapi.json", Some(READ_TOKEN), None);
    assert_eq!(status, 200);
    assert!(serde_json::from_str::<Value>(&openapi).is_ok());

    // A refused value in a secret place is not quoted back, nor in the audit log.
    let leaky = format!(
        r#"{{"name":"leaky","type":"shell","data":{{"program":"true","env":{{"PLAIN":["{PLAIN_SECRET}"]}}}}}}"#
    );
    let (status, text) = http(port, "PUT", "/api/jobs/leaky", Some(TOKEN), Some(&leaky));
    assert_eq!((status, code_of(&text).as_str()), (400, "SCHEDULING_VALIDATION_001"), "{text}");
    assert!(!text.contains(PLAIN_SECRET), "{text}");

    // No secret anywhere: every read route, every log line.
    for path in [
        "/api/jobs",
        "/api/jobs/secretive",
        "/api/jobs/missing",
        "/api/runs?limit=1000",
        "/api/audit?limit=1000",
        "/metrics",
    ] {
        let (status, body) = http(port, "GET", path, Some(READ_TOKEN), None);
        assert_eq!(status, 200, "{path}: {body}");
        for secret in [PLAIN_SECRET, ENV_SECRET, STORED_SECRET, READ_TOKEN, TOKEN] {
            assert!(!body.contains(secret), "{path} shows a secret: {body}");
        }
    }
    node.terminate();
    for secret in [PLAIN_SECRET, ENV_SECRET, STORED_SECRET, READ_TOKEN, TOKEN] {
        assert!(
            !node.seen.iter().any(|line| line.contains(secret)),
            "a log line shows {secret}:\n{}",
            node.seen.join("\n")
        );
    }
}

#[test]
fn a_node_leads_through_a_kubernetes_lease_and_releases_it_when_it_stops() {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let (fake, api) = runtime.block_on(fake_kubernetes::start());
    let dir = TempDir::new("kubernetes");
    let config = write(
        &dir,
        "sundial.toml",
        &format!(
            "[leader]\nkind = \"kubernetes\"\napi_url = \"{api}\"\nnamespace = \"jobs\"\nidentity = \"pod-e2e\"\n"
        ),
    );
    let mut node =
        start_node(&["--config", config.to_str().unwrap()], &[("SUNDIAL_KUBERNETES_TOKEN", fake_kubernetes::TOKEN)]);
    let deadline = Instant::now() + Duration::from_secs(15);
    while fake.holder("jobs", "sundial-scheduler").as_deref() != Some("pod-e2e") {
        assert!(Instant::now() < deadline, "the node never took the lease:\n{}", node.seen.join("\n"));
        std::thread::sleep(Duration::from_millis(50));
    }
    let status = node.terminate();
    assert!(status.success(), "{status:?}\n{}", node.seen.join("\n"));
    assert_eq!(fake.holder("jobs", "sundial-scheduler"), None, "released at stop");
}

#[test]
fn the_admin_api_serves_https_and_reloads_its_certificate() {
    let dir = TempDir::new("tls");
    let (first_ca, second_ca) = (TestCa::new(&dir.0, "first"), TestCa::new(&dir.0, "second"));
    let (first, second) = (first_ca.issue("first"), second_ca.issue("second"));
    let (cert, key) = (dir.0.join("cert.pem"), dir.0.join("key.pem"));
    let install = |from: &sundial_test_support::tls::ServerCert| {
        std::fs::copy(&from.cert, &cert).unwrap();
        std::fs::copy(&from.key, &key).unwrap();
    };
    install(&first);
    // Relative paths are the config file's.
    let config = write(&dir, "tls.toml", &format!("{CONFIG}\n[admin.tls]\ncert = \"cert.pem\"\nkey = \"key.pem\"\n"));
    let mut node = start_node(&["--config", config.to_str().unwrap()], &[]);
    assert!(node.base.starts_with("https://127.0.0.1:"), "{}", node.base);
    let base = node.base.clone();
    let info = |ca: &Path| {
        node_cli(&base, &["node", "info", "--json", "--token", READ_TOKEN, "--ca-cert", ca.to_str().unwrap()])
    };
    let out = info(&first_ca.cert());
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    // A client that does not trust the authority is refused; plain HTTP gets no answer.
    assert_eq!(info(&second_ca.cert()).status.code(), Some(6));
    let plain =
        Command::new(BIN).args(["node", "info", "--server", &node.base.replace("https", "http")]).output().unwrap();
    assert_ne!(plain.status.code(), Some(0));

    // SIGHUP reads the files again.
    install(&second);
    node.signal("-HUP");
    node.wait_for("admin API certificate reloaded", Duration::from_secs(10));
    assert_eq!(info(&second_ca.cert()).status.code(), Some(0));
    assert_eq!(info(&first_ca.cert()).status.code(), Some(6));
    // So does a change of the files alone; a file that does not load keeps the certificate.
    std::fs::write(&cert, "not a certificate").unwrap();
    node.wait_for("the previous one stays", Duration::from_secs(10));
    assert_eq!(info(&second_ca.cert()).status.code(), Some(0));
    install(&first);
    node.wait_for("admin API certificate reloaded", Duration::from_secs(10));
    assert_eq!(info(&first_ca.cert()).status.code(), Some(0));
    assert!(node.terminate().success());

    // A certificate that does not load stops the node before it starts, naming the setting.
    let broken = write(&dir, "broken.toml", "[admin.tls]\ncert = \"missing.pem\"\nkey = \"key.pem\"\n");
    let out = Command::new(BIN).args(["node", "--config", broken.to_str().unwrap()]).output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("admin.tls.cert: cannot read") && stderr.contains("missing.pem"), "{stderr}");
    let mismatched = write(
        &dir,
        "mismatched.toml",
        &format!("[admin.tls]\ncert = \"{}\"\nkey = \"{}\"\n", first.cert.display(), second.key.display()),
    );
    let out = Command::new(BIN).args(["node", "--config", mismatched.to_str().unwrap()]).output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("admin.tls.key"), "{stderr}");
}

/// The CLI against the node at `base`.
fn node_cli(base: &str, args: &[&str]) -> Output {
    Command::new(BIN).args(args).env("SUNDIAL_SERVER", base).env_remove("SUNDIAL_ADMIN_TOKEN").output().unwrap()
}

#[test]
fn bad_configs_are_refused_naming_the_file_and_key() {
    let dir = TempDir::new("bad");
    let cases = [
        ("unknown-key.toml", "[scheduler]\npoll_interval_seconds = 1\n[schedular]\n", "line 3"),
        ("bad-option.toml", "[scheduler]\nmax_concurrent_runs = 0\n", "scheduler.max_concurrent_runs"),
        (
            "bad-schedule.toml",
            "[[jobs]]\nname = \"a\"\ntype = \"log\"\n[[jobs.triggers]]\nname = \"t\"\nschedule = \"cron 0 0 25 * * *\"\n",
            "jobs[0] (a).triggers[0].schedule",
        ),
        ("bad-shell.toml", "[[jobs]]\nname = \"a\"\ntype = \"shell\"\n", "missing field `program`"),
        ("unknown-type.toml", "[[jobs]]\nname = \"a\"\ntype = \"nope\"\n", "'nope', which is not registered"),
        ("open-admin.toml", "[admin]\nlisten = \"0.0.0.0:7600\"\n", "admin.listen"),
        ("not-toml.toml", "[scheduler\n", "line 1"),
    ];
    for (name, text, expected) in cases {
        let path = write(&dir, name, text);
        let out = Command::new(BIN)
            .args(["node", "--config", path.to_str().unwrap()])
            .env_remove("SUNDIAL_ADMIN_LISTEN")
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{name}: {stderr}");
        assert!(stderr.contains(name), "{name} names the file: {stderr}");
        assert!(stderr.contains(expected), "{name}: {stderr}");
    }
    let out = Command::new(BIN).args(["node", "--config", "/no/such/file.toml"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("/no/such/file.toml"));
    let out = Command::new(BIN).args(["node"]).env("SUNDIAL_MAX_CONCURRENT_RUNS", "zero").output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("SUNDIAL_MAX_CONCURRENT_RUNS"));
    if !cfg!(feature = "fdb") {
        let path = write(&dir, "fdb.toml", "[store]\nkind = \"fdb\"\n");
        let out = Command::new(BIN).args(["node", "--config", path.to_str().unwrap()]).output().unwrap();
        assert_eq!(out.status.code(), Some(2));
        assert!(String::from_utf8_lossy(&out.stderr).contains("without FoundationDB support"));
    }
}

#[test]
fn offline_helpers_print_one_utc_instant_per_line() {
    let out = Command::new(BIN)
        .args([
            "cron",
            "next",
            "0 0 9 * * MON-FRI",
            "--tz",
            "Asia/Shanghai",
            "--after",
            "2026-11-27T00:00:00Z",
            "-n",
            "3",
        ])
        .output()
        .unwrap();
    assert!(out.status.success());
    // Friday the 27th at 09:00 in Shanghai is 01:00 UTC; then Monday and Tuesday.
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "2026-11-27T01:00:00Z\n2026-11-30T01:00:00Z\n2026-12-01T01:00:00Z\n"
    );
    let out = Command::new(BIN)
        .args(["schedule", "next", "every 00:30:00 x2 start=2026-01-01T00:00:00Z", "--after", "2025-12-31T00:00:00Z"])
        .output()
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&out.stdout), "2026-01-01T00:30:00Z\n2026-01-01T01:00:00Z\n");
    // No fires: nothing on stdout, and why on stderr.
    for (text, why) in [
        ("manual", "a manual schedule never fires by itself"),
        ("cron 0 0 0 1 1 * 2030", "no fires after 2031-01-01T00:00:00Z"),
    ] {
        let out =
            Command::new(BIN).args(["schedule", "next", text, "--after", "2031-01-01T00:00:00Z"]).output().unwrap();
        assert_eq!((out.status.code(), out.stdout.as_slice()), (Some(0), &b""[..]), "{text}");
        assert!(String::from_utf8_lossy(&out.stderr).contains(why), "{text}: {out:?}");
    }
    let out = Command::new(BIN).args(["cron", "next", "0 0 9 * * FUNDAY"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("FUNDAY"));
    let out = Command::new(BIN).args(["schedule", "next", "daily"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    // A reader that goes away (`sundial … | head`) ends the command quietly, not in a
    // panic: read one line, close the pipe, and the next write fails.
    let mut child = Command::new(BIN)
        .args(["cron", "next", "* * * * * *", "-n", "10000"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut first = String::new();
    BufReader::new(child.stdout.take().unwrap()).read_line(&mut first).unwrap();
    assert!(first.ends_with("Z\n"), "{first}");
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(out.stderr.is_empty(), "{}", String::from_utf8_lossy(&out.stderr));
    // A count of none, or too many to print, is refused rather than printing nothing or
    // running on for minutes.
    for count in ["0", "10001"] {
        let out = Command::new(BIN).args(["cron", "next", "* * * * * *", "-n", count]).output().unwrap();
        assert_eq!(out.status.code(), Some(2), "-n {count}");
        assert!(String::from_utf8_lossy(&out.stderr).contains("1..=10000"), "-n {count}");
    }
}

#[test]
fn the_cli_without_a_node_says_why_and_where_to_look() {
    // A port nothing listens on: bound, then let go.
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let server = format!("http://127.0.0.1:{port}");
    let out =
        Command::new(BIN).args(["jobs", "list", "--server", &server]).env_remove("SUNDIAL_SERVER").output().unwrap();
    assert_eq!(out.status.code(), Some(6), "node or store unavailable");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains(&format!("cannot reach the node at {server}")), "{stderr}");
    // The cause itself, not only "error sending request", and where to look.
    assert!(!stderr.contains("error sending request"), "{stderr}");
    assert!(stderr.contains("is a node running there?"), "{stderr}");
    // An empty name is a usage error, told before any request (it would name no route).
    for args in [&["jobs", "show", ""][..], &["jobs", "delete", "a", ""], &["triggers", "pause", "a", ""]] {
        let out = Command::new(BIN).args(args).args(["--server", &server]).output().unwrap();
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        assert!(String::from_utf8_lossy(&out.stderr).contains("a value is required"), "{args:?}: {out:?}");
    }
}

#[test]
fn a_node_whose_admin_port_is_taken_stops_at_once_naming_it() {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let address = taken.local_addr().unwrap().to_string();
    let out = Command::new(BIN)
        .args(["node", "--demo"])
        .env("SUNDIAL_ADMIN_LISTEN", &address)
        .env_remove("SUNDIAL_ADMIN_TOKEN")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(6), "{}", String::from_utf8_lossy(&out.stderr));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains(&format!("cannot listen on {address} for the admin API")), "{stderr}");
    assert!(stderr.contains("SUNDIAL_ADMIN_LISTEN picks another address"), "{stderr}");
    // Bound before anything started: the node never served.
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(!stdout.contains("node serving"), "{stdout}");
    drop(taken);
}
