//! Goal: nothing a person writes makes the node panic or answer with an internal error:
//! node config files and `SUNDIAL_*` variables, job specs (the admin API's bodies and
//! `sundial jobs apply` files), durations, the built-in kinds' data, and any request to the
//! admin API (with and without tokens), tokens, certificate files and event sinks. Each
//! gets its result or a clear error; a spec that is accepted describes the same definition
//! when written back.
//!
//! Method: proptest. Config text is the documented example file with lines dropped and
//! values swapped for hostile ones (plus arbitrary text); specs are JSON objects built
//! from the spec's own fields with hostile values, then mutated (keys dropped, unknown
//! keys added, values of the wrong type); requests go over HTTP to a real node's API on
//! the in-memory store (jobs of the `log` kind only, so nothing fuzzed runs a program or
//! calls out).

use std::collections::BTreeMap;
use std::sync::{Arc, OnceLock};

use proptest::prelude::*;
use serde_json::{json, Value};
use sundial::entropy::Entropy;
use sundial::kv::memory::{MemoryKv, MemoryKvOptions};
use sundial::options::SchedulerOptions;
use sundial::store::{KvJobStore, StoreOptions};
use sundial::time::SystemClock;
use sundial_actors::admin::access::{AccessPolicy, AccessToken, Role};
use sundial_actors::admin::metrics::Metrics;
use sundial_actors::admin::tls::TlsFiles;
use sundial_actors::admin::{self, AdminState};
use sundial_actors::clock::TokioSleeper;
use sundial_actors::config::NodeFileConfig;
use sundial_actors::kinds;
use sundial_actors::node::{Node, NodeConfig};
use sundial_actors::registry::JobRegistry;
use sundial_actors::spec::{DurationText, JobSpec};

const EXAMPLE_CONFIG: &str = include_str!("../sundial.example.toml");

/// Picks one of `items`.
fn one_of(items: &'static [&'static str]) -> impl Strategy<Value = String> {
    prop::sample::select(items).prop_map(str::to_owned)
}

/// Mostly one of `items`, else a few printable characters or anything at all.
fn text_or(items: &'static [&'static str]) -> impl Strategy<Value = String> {
    prop_oneof![8 => one_of(items), 1 => "[\\PC]{0,12}", 1 => any::<String>()]
}

/// Names, now and then one that breaks the grammar.
fn names() -> impl Strategy<Value = String> {
    prop_oneof![
        9 => one_of(&["a", "x1", "demo.job", "job-2", "t", "default"]),
        1 => text_or(&["A", "a b", "", "-a", "é", "a/b", "..", "%2e"]),
    ]
}

/// Durations as text or as seconds, now and then one out of range or malformed.
fn durations() -> impl Strategy<Value = Value> {
    prop_oneof![
        6 => one_of(&["90s", "5m", "1h 30m", "250ms", "1ns", "30days", "2.5"]).prop_map(Value::String),
        2 => text_or(&["0s", "31days", "-5s", "1e400", "1y", "18446744073709551616s", ""]).prop_map(Value::String),
        1 => any::<f64>().prop_map(|f| json!(f)),
        1 => any::<i64>().prop_map(|i| json!(i)),
    ]
}

/// Schedule texts, now and then one that is wrong.
fn schedules() -> impl Strategy<Value = String> {
    prop_oneof![
        8 => one_of(&[
            "cron * * * * * *",
            "cron 0 0 9 * * MON-FRI tz=Asia/Shanghai",
            "cron 0 30 2 * * * tz=Europe/Berlin",
            "every 00:10:00 x5",
            "every 1.00:00:00",
            "every 00:00:01 start=2026-01-01T00:00:00Z end=2025-01-01T00:00:00Z",
            "once 2026-11-01T00:00:00.0000000+00:00",
            "once 9999-12-31T23:59:59Z",
            "once 1970-01-01T00:00:00Z",
        ]),
        2 => text_or(&[
            "cron 0 0 0 31 2 *",
            "cron 61 * * * * *",
            "cron * * * * * * calendar=holidays",
            "cron * * * * * * tz=Mars/Base",
            "every 00:00:00",
            "every 00:00:01 x0",
            "manual",
        ]),
    ]
}

/// Any JSON value, nested a little.
fn any_json() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(|i| json!(i)),
        any::<u64>().prop_map(|u| json!(u)),
        any::<f64>().prop_map(|f| json!(f)),
        "[\\PC]{0,8}".prop_map(Value::String),
    ];
    leaf.prop_recursive(3, 16, 4, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
            prop::collection::btree_map("[a-z_]{1,8}", inner, 0..4)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

/// Job data: the built-in kinds' parameter names with plausible or hostile values.
fn data() -> impl Strategy<Value = Value> {
    let key = one_of(&[
        "message",
        "level",
        "program",
        "args",
        "env",
        "dir",
        "clear_env",
        "kill_grace",
        "url",
        "method",
        "headers",
        "body",
        "success",
        "timeout",
        "other",
    ]);
    let value = prop_oneof![
        4 => text_or(&[
            "info", "loud", "df", "http://127.0.0.1:1/x", "ftp://x", "not a url", "GET", "G E T", "2xx", "7xx", "99",
            "5m", "0s",
        ])
        .prop_map(Value::String),
        1 => Just(json!(["-h", 1])),
        1 => Just(json!({"accept": "application/json", "bad header": "x", "x": "a\nb"})),
        1 => Just(json!(["2xx", 304, 700, "abc"])),
        // Secret references, sound and not.
        1 => one_of(&[
            r#"{"$env": "HOME"}"#, r#"{"$env": ""}"#, r#"{"$file": "/nonexistent"}"#, r#"{"$secret": "[redacted]"}"#,
            r#"{"$secret": 7}"#, r#"{"$vault": "x"}"#, r#"{"$env": "A", "$file": "/b"}"#, r#"{"A": "[redacted]"}"#,
        ]).prop_map(|text| serde_json::from_str(&text).unwrap()),
        1 => any_json(),
    ];
    prop::collection::btree_map(key, value, 0..4).prop_map(|m| Value::Object(m.into_iter().collect()))
}

/// A retry policy: mostly in range, now and then too many retries or an unknown backoff.
fn retry() -> impl Strategy<Value = Value> {
    (
        prop_oneof![9 => 0u64..=120, 1 => any::<u64>()],
        durations(),
        prop_oneof![9 => one_of(&["fixed", "exponential"]), 1 => text_or(&["linear"])],
        prop::option::of(durations()),
    )
        .prop_map(|(max, delay, backoff, max_delay)| {
            let mut retry = json!({"max_retries": max, "delay": delay, "backoff": backoff});
            if let Some(max_delay) = max_delay {
                retry["max_delay"] = max_delay;
            }
            retry
        })
}

/// A trigger: mostly sound, now and then a priority out of range or an unknown misfire
/// policy.
fn trigger() -> impl Strategy<Value = Value> {
    let priority = prop_oneof![29 => -10i64..20, 1 => any::<i64>()];
    let misfire = prop_oneof![29 => one_of(&["run_once", "skip", "run_all"]), 1 => text_or(&[""])];
    (names(), schedules(), data(), priority, misfire).prop_map(|(name, schedule, data, priority, misfire)| {
        json!({"name": name, "schedule": schedule, "data": data, "priority": priority, "misfire": misfire})
    })
}

/// A job spec's JSON with `types` as its type, then mutated: a key dropped, an unknown
/// key added, or a value replaced by any JSON.
fn spec_json(types: &'static [&'static str]) -> impl Strategy<Value = Value> {
    let spec = (
        names(),
        one_of(types),
        data(),
        any::<[bool; 3]>(),
        prop::option::weighted(0.3, durations()),
        prop::option::weighted(0.3, retry()),
        prop::collection::vec(trigger(), 0..4),
    )
        .prop_map(|(name, job_type, data, flags, timeout, retry, triggers)| {
            let mut spec = json!({
                "name": name, "type": job_type, "data": data, "allow_concurrent": flags[0],
                "run_on_every_instance": flags[1], "requests_recovery": flags[2], "triggers": triggers,
            });
            if let Some(timeout) = timeout {
                spec["timeout"] = timeout;
            }
            if let Some(retry) = retry {
                spec["retry"] = retry;
            }
            spec
        });
    (spec, 0u8..10, any::<prop::sample::Index>(), any_json()).prop_map(|(mut spec, mutation, at, value)| {
        let object = spec.as_object_mut().expect("built as an object");
        let key = at.get(&object.keys().cloned().collect::<Vec<_>>()).clone();
        match mutation {
            0 => {
                object.remove(&key);
            }
            1 => {
                object.insert("colour".into(), value);
            }
            2 => {
                object.insert(key, value);
            }
            _ => {}
        }
        spec
    })
}

/// The example config with some lines dropped and some values replaced.
fn config_text() -> impl Strategy<Value = String> {
    // Comments and blank lines left out, so edits land on sections and keys.
    let lines: Vec<&'static str> =
        EXAMPLE_CONFIG.lines().filter(|l| !l.trim().is_empty() && !l.trim_start().starts_with('#')).collect();
    let hostile = one_of(&[
        "0",
        "-1",
        "1e309",
        "nan",
        "inf",
        "18446744073709551616",
        "\"\"",
        "\"x\"",
        "true",
        "[]",
        "{}",
        "\"2026-02-30\"",
        "\"25:00:00\"",
        "\"0.0.0.0:7600\"",
        "\"[::1]:0\"",
        "\"Mars/Base\"",
        "\"fdb\"",
        "\"kubernetes\"",
        "\"short\"",
        "[\"holidays\", \"days-off\"]",
        "\"cron 0 0 0 31 2 *\"",
        "{ max_retries = 0, delay = \"0s\" }",
    ]);
    let edits = prop::collection::vec((any::<prop::sample::Index>(), 0u8..5, hostile), 0..4);
    (edits, prop_oneof![9 => Just(None), 1 => any::<String>().prop_map(Some)]).prop_map(move |(edits, junk)| {
        if let Some(junk) = junk {
            return junk;
        }
        let mut lines: Vec<String> = lines.iter().map(|l| (*l).to_owned()).collect();
        for (at, edit, value) in edits {
            let i = at.index(lines.len());
            match edit {
                0 => {
                    lines.remove(i);
                }
                1 => lines.insert(i, lines[i].clone()),
                // A value swapped; a line without one (a section) is left.
                _ => {
                    if let Some((key, _)) = lines[i].split_once('=') {
                        lines[i] = format!("{key}= {value}");
                    }
                }
            }
            if lines.is_empty() {
                break;
            }
        }
        lines.join("\n")
    })
}

/// No variables, or a few of the node's (and one it ignores) with plausible or bad values.
fn env() -> impl Strategy<Value = BTreeMap<String, String>> {
    let key = one_of(&[
        "SUNDIAL_POLL_INTERVAL_SECONDS",
        "SUNDIAL_MAX_CONCURRENT_RUNS",
        "SUNDIAL_ACQUIRE_BATCH_SIZE",
        "SUNDIAL_MISFIRE_THRESHOLD_SECONDS",
        "SUNDIAL_LEASE_RESOURCE",
        "SUNDIAL_LEASE_TTL_SECONDS",
        "SUNDIAL_NODE_TIMEOUT_SECONDS",
        "SUNDIAL_HISTORY_RETENTION_DAYS",
        "SUNDIAL_ADMIN_LISTEN",
        "SUNDIAL_ADMIN_TOKEN",
        "PATH",
    ]);
    let value = text_or(&["0", "1", "-1", "0.5", "1e309", "NaN", "", "127.0.0.1:0", "0123456789abcdef0123", "x y"]);
    let key = prop_oneof![9 => key, 1 => Just("SUNDIAL_TEST_TOKEN".to_owned())];
    prop_oneof![Just(BTreeMap::new()), prop::collection::btree_map(key, value, 1..3)]
}

/// An `[admin]` section with token entries, mostly sound, now and then broken: a secret
/// too short, from a missing file or variable, from two sources or none, a role or name
/// that does not exist, a name used twice.
fn admin_section() -> impl Strategy<Value = String> {
    let source = prop_oneof![
        4 => text_or(&["token-secret-0123456789", "token-secret-9876543210", "short", "with space 0123456789", ""])
            .prop_map(|v| format!("value = {}", toml_string(&v))),
        1 => one_of(&["/nonexistent/token", "/", ""]).prop_map(|p| format!("file = {}", toml_string(&p))),
        1 => one_of(&["SUNDIAL_TEST_TOKEN", "NOT_SET", ""]).prop_map(|e| format!("env = {}", toml_string(&e))),
        1 => Just("value = \"token-secret-0123456789\"\nenv = \"X\"".to_owned()),
        1 => Just(String::new()),
    ];
    let token = (text_or(&["ops", "grafana", "ops", "a b", ""]), text_or(&["read", "admin", "owner"]), source);
    let entries = prop::collection::vec(token, 0..4);
    let listen = one_of(&["127.0.0.1:7600", "0.0.0.0:7600", "[::1]:0"]);
    let tls = prop_oneof![
        3 => Just(String::new()),
        1 => (text_or(&["cert.pem", "", "/nonexistent"]), text_or(&["key.pem", ""]))
            .prop_map(|(cert, key)| format!("[admin.tls]\ncert = {}\nkey = {}\n", toml_string(&cert), toml_string(&key))),
        1 => Just("[admin.tls]\ncert = \"cert.pem\"\n".to_owned()),
        1 => Just("[admin.tls]\ncert = 7\nkey = \"k\"\nextra = 1\n".to_owned()),
    ];
    (listen, any::<bool>(), entries, tls).prop_map(|(listen, probes, entries, tls)| {
        let mut text = format!("[admin]\nlisten = \"{listen}\"\nprobes_need_token = {probes}\n");
        for (name, role, source) in entries {
            text.push_str(&format!(
                "[[admin.tokens]]\nname = {}\nrole = {}\n{source}\n",
                toml_string(&name),
                toml_string(&role)
            ));
        }
        text.push_str(&tls);
        text
    })
}

/// An `[events]` section: HTTP and NATS sinks, mostly sound, now and then with a bad URL,
/// mode, batch size, header, queue, retry count, topic or name.
fn events_section() -> impl Strategy<Value = String> {
    let http = (
        text_or(&["http://127.0.0.1:9/hook", "https://hooks.example.com/x", "ftp://x", "not a url", ""]),
        text_or(&["structured", "binary", "batch", "carrier-pigeon"]),
        prop::option::of(prop_oneof![0u64..2000, Just(u64::MAX)]),
        prop::option::of(one_of(&[
            r#"{ authorization = "Bearer x" }"#,
            r#"{ authorization = { "$env" = "SUNDIAL_TEST_TOKEN" } }"#,
            r#"{ authorization = { "$file" = "/nonexistent" } }"#,
            r#"{ "bad name" = "x" }"#,
            r#"{ a = 7 }"#,
            r#"{ a = { "$secret" = "x" } }"#,
        ])),
        prop::option::of(one_of(&["0", "-1", "0.5", "301", "\"x\"", "10"])),
    )
        .prop_map(|(url, mode, batch, headers, timeout)| {
            let mut text = format!("[[events.http]]\nurl = {}\nmode = {}\n", toml_string(&url), toml_string(&mode));
            if let Some(batch) = batch {
                text.push_str(&format!("batch_size = {batch}\n"));
            }
            if let Some(headers) = headers {
                text.push_str(&format!("headers = {headers}\n"));
            }
            if let Some(timeout) = timeout {
                text.push_str(&format!("timeout_seconds = {timeout}\n"));
            }
            text
        });
    let nats = (
        text_or(&["nats://127.0.0.1:4222", "127.0.0.1:4222", "nats://", "", "http://x"]),
        text_or(&["sundial", "a.b", "a..b", "a.*", ""]),
    )
        .prop_map(|(url, prefix)| {
            format!("[[events.nats]]\nurl = {}\nsubject_prefix = {}\n", toml_string(&url), toml_string(&prefix))
        });
    let common = prop::option::of(one_of(&[
        "queue_size = 0",
        "queue_size = 10",
        "max_attempts = 0",
        "max_attempts = 101",
        "topics = [\"scheduling.run.failed\"]",
        "topics = [\"run.failed\"]",
        "name = \"same\"",
        "name = \"a b\"",
    ]));
    let sink = prop_oneof![http, nats];
    prop::collection::vec((sink, common), 0..3).prop_map(|sinks| {
        sinks
            .into_iter()
            .map(|(sink, extra)| match extra {
                Some(extra) => format!("{sink}{extra}\n"),
                None => sink,
            })
            .collect()
    })
}

/// `text` as a TOML basic string.
fn toml_string(text: &str) -> String {
    toml::Value::String(text.to_owned()).to_string()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 200, ..ProptestConfig::default() })]

    #[test]
    fn certificate_files_load_or_name_the_setting(cert in any_pem(), key in any_pem()) {
        let dir = sundial_test_support::dir::TempDir::new("fuzzed-tls");
        let files = TlsFiles { cert: dir.path().join("cert.pem"), key: dir.path().join("key.pem") };
        std::fs::write(&files.cert, cert).unwrap();
        std::fs::write(&files.key, key).unwrap();
        let error = files.load().err().ok_or_else(|| TestCaseError::fail("junk made a certificate"))?;
        prop_assert!(error.key == "admin.tls.cert" || error.key == "admin.tls.key", "{}", error);
        prop_assert!(!error.problem.is_empty());
    }
}

/// Bytes of a PEM file: armour around junk, mismatched labels, or anything.
fn any_pem() -> impl Strategy<Value = Vec<u8>> {
    let label = one_of(&["CERTIFICATE", "PRIVATE KEY", "EC PRIVATE KEY", "RSA PRIVATE KEY", "X"]);
    let body = prop_oneof![
        "[A-Za-z0-9+/=]{0,120}",
        Just("MIIBszCCAVmgAwIBAgIU".to_owned()),
        Just("!!notbase64!!".to_owned()),
    ];
    prop_oneof![
        3 => (label, body).prop_map(|(label, body)| {
            format!("-----BEGIN {label}-----\n{body}\n-----END {label}-----\n").into_bytes()
        }),
        1 => prop::collection::vec(any::<u8>(), 0..256),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 2000, ..ProptestConfig::default() })]

    #[test]
    fn event_sinks_are_read_or_refused_naming_the_setting(text in events_section(), env in env()) {
        match NodeFileConfig::parse(&text, &env) {
            Ok(config) => {
                let printed = format!("{config:?}");
                prop_assert!(!printed.contains("Bearer x"), "header values stay out of Debug: {}", printed);
            }
            Err(error) => {
                let key = error.key.clone().unwrap_or_default();
                // The variables may be wrong too (SUNDIAL_ADMIN_LISTEN names admin.listen).
                let named = ["events", "admin", "SUNDIAL_"].iter().any(|p| key.starts_with(p));
                prop_assert!(named || key.is_empty(), "{}", error);
                prop_assert!(!error.problem.is_empty());
            }
        }
    }

    #[test]
    fn admin_tokens_are_read_or_refused_naming_the_setting(text in admin_section(), env in env()) {
        match NodeFileConfig::parse(&text, &env) {
            Ok(config) => {
                // Never a secret in what the config prints.
                let printed = format!("{config:?}");
                for secret in ["token-secret-0123456789", "token-secret-9876543210"] {
                    prop_assert!(!printed.contains(secret), "{}", printed);
                }
            }
            Err(error) => {
                let key = error.key.clone().unwrap_or_default();
                prop_assert!(key.starts_with("admin") || key.starts_with("SUNDIAL_") || key.is_empty(), "{}", error);
                if key.starts_with("admin") || key == "SUNDIAL_ADMIN_TOKEN" {
                    prop_assert!(!error.problem.contains("token-secret-"), "{}", error);
                }
            }
        }
    }

    #[test]
    fn config_files_and_variables_never_panic(text in config_text(), env in env()) {
        // Deterministic: the same text and variables give the same answer.
        let first = NodeFileConfig::parse(&text, &env).map(|c| format!("{c:?}")).map_err(|e| e.to_string());
        let again = NodeFileConfig::parse(&text, &env).map(|c| format!("{c:?}")).map_err(|e| e.to_string());
        prop_assert_eq!(&first, &again);
        if let Err(problem) = first {
            prop_assert!(!problem.trim().is_empty());
        }
    }

    #[test]
    fn job_specs_convert_or_name_the_problem(value in spec_json(&["log", "shell", "http", "nope", "my.app::Job"])) {
        let Ok(spec) = serde_json::from_value::<JobSpec>(value) else { return Ok(()) };
        match spec.to_definition("jobs[0]") {
            Ok(def) => {
                // Written back and read again, an accepted spec is the same definition.
                let again = JobSpec::from_definition(&def).to_definition("jobs[0]");
                prop_assert_eq!(again.as_ref(), Ok(&def));
                let _ = kinds::check(&def);
            }
            Err(error) => {
                prop_assert!(error.key.starts_with("jobs[0]"), "{}", error);
                prop_assert!(!error.problem.is_empty());
            }
        }
    }

    #[test]
    fn durations_print_what_they_read(value in durations()) {
        let text = match &value {
            Value::String(text) => text.clone(),
            other => other.to_string(),
        };
        if let Ok(duration) = DurationText::parse(&text) {
            prop_assert_eq!(DurationText::parse(&duration.to_string()), Ok(duration));
        }
        let _ = serde_json::from_value::<DurationText>(value);
    }

    #[test]
    fn jobs_files_in_toml_read_like_json(value in spec_json(&["log", "shell", "http"])) {
        // `sundial jobs apply` and a node's `[[jobs]]` read the same spec from TOML.
        let Ok(spec) = serde_json::from_value::<JobSpec>(value) else { return Ok(()) };
        let Ok(text) = toml::to_string(&spec) else { return Ok(()) };
        let back: JobSpec = toml::from_str(&text).map_err(|e| TestCaseError::fail(format!("{e}\n{text}")))?;
        let definition = |spec: &JobSpec| spec.to_definition("j").map_err(|e| e.to_string());
        prop_assert_eq!(definition(&back), definition(&spec));
    }
}

/// A node on the in-memory store, with the built-in kinds, serving its admin API without
/// tokens; its base URL. Started once, on a runtime of its own, for every request case.
fn api() -> &'static (tokio::runtime::Runtime, String) {
    static API: OnceLock<(tokio::runtime::Runtime, String)> = OnceLock::new();
    API.get_or_init(|| start_api(AccessPolicy::open(), "fuzzed"))
}

/// The admin token of [`guarded_api`]'s node, and its read token.
const ADMIN_SECRET: &str = "admin-secret-0123456789";
const READ_SECRET: &str = "read-secret-0123456789";

/// Like [`api`], with an admin and a read token.
fn guarded_api() -> &'static (tokio::runtime::Runtime, String) {
    static API: OnceLock<(tokio::runtime::Runtime, String)> = OnceLock::new();
    API.get_or_init(|| {
        let tokens = vec![
            AccessToken::new("ops", Role::Admin, ADMIN_SECRET).unwrap(),
            AccessToken::new("grafana", Role::Read, READ_SECRET).unwrap(),
        ];
        start_api(AccessPolicy::new(tokens).unwrap(), "fuzzed-guarded")
    })
}

/// A node named `node_id` (unique in the process: it names the node's actors) serving
/// its API guarded by `access`.
fn start_api(access: AccessPolicy, node_id: &'static str) -> (tokio::runtime::Runtime, String) {
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    let base = runtime.block_on(async {
        let clock = Arc::new(SystemClock::new());
        let registry = kinds::register(JobRegistry::builder()).build().unwrap();
        let kv = MemoryKv::with_options(clock.clone(), Arc::new(TokioSleeper), MemoryKvOptions::default());
        let store = KvJobStore::new(kv, registry.calendars().clone(), Entropy::from_seed(1), StoreOptions::default());
        let options = SchedulerOptions::default();
        let config = NodeConfig::new(store, registry, options, node_id, clock, Entropy::from_seed(2));
        let scheduler = Node::start(config, None).await.unwrap();
        scheduler.serve();
        let state = AdminState::new(scheduler, access, Arc::new(Metrics::new(None)), "memory");
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base = format!("http://{}", listener.local_addr().unwrap());
        tokio::spawn(admin::serve(listener, admin::router(state), std::future::pending()));
        base
    });
    (runtime, base)
}

/// What a route's body holds.
#[derive(Debug, Clone, Copy)]
enum Body {
    None,
    Spec,
    Specs,
    Data,
    Ids,
}

/// The API's routes, the method and the body each takes.
const ROUTES: &[(&str, &str, Body)] = &[
    ("GET", "/health", Body::None),
    ("GET", "/metrics", Body::None),
    ("GET", "/api/node", Body::None),
    ("GET", "/api/job-types", Body::None),
    ("GET", "/api/jobs", Body::None),
    ("POST", "/api/jobs", Body::Specs),
    ("GET", "/api/jobs/{}", Body::None),
    ("PUT", "/api/jobs/{}", Body::Spec),
    ("DELETE", "/api/jobs/{}", Body::None),
    ("POST", "/api/jobs/{}/pause", Body::None),
    ("POST", "/api/jobs/{}/resume", Body::None),
    ("POST", "/api/jobs/{}/restore", Body::None),
    ("POST", "/api/jobs/{}/trigger", Body::Data),
    ("POST", "/api/jobs/{}/enqueue", Body::Data),
    ("POST", "/api/jobs/{}/triggers/{}/pause", Body::None),
    ("POST", "/api/jobs/{}/triggers/{}/resume", Body::None),
    ("GET", "/api/runs", Body::None),
    ("GET", "/api/runs/count", Body::None),
    ("POST", "/api/runs/cancel", Body::Ids),
    ("POST", "/api/runs/{}/cancel", Body::None),
    ("GET", "/api/audit", Body::None),
    ("GET", "/api/runs/{}", Body::None),
    ("GET", "/api/overview", Body::None),
    ("GET", "/api/cluster", Body::None),
    ("GET", "/", Body::None),
    ("GET", "/assets/{}", Body::None),
    ("GET", "/api/nowhere", Body::None),
    ("POST", "/api/jobs/{}/{}", Body::None),
];

/// A path segment: mostly a name jobs here have, else one that is invalid or escaped.
fn segments() -> impl Strategy<Value = String> {
    prop_oneof![
        4 => one_of(&["a", "x1", "default", "t", "nope"]),
        1 => text_or(&["A%20B", "%00", "%ZZ", "..", "0190c0de-0000-7000-8000-000000000000", "not-a-uuid"])
            .prop_map(|s| s.replace(['/', '?', '#'], "_")),
    ]
}

/// A query string of run filters (escaped), valid or not, or none.
fn queries() -> impl Strategy<Value = String> {
    let pair = (
        one_of(&[
            "job",
            "state",
            "from",
            "to",
            "trigger",
            "node",
            "has_error",
            "skip",
            "limit",
            "colour",
            "actor",
            "action",
            "target",
            "failed",
        ]),
        text_or(&[
            "a",
            "failed,running",
            "pause,resume_trigger",
            "pause,nope",
            "2026-01-01T00:00:00Z",
            "yesterday",
            "true",
            "maybe",
            "0",
            "-1",
            "1000",
            "1001",
            "99999999999999999999",
            "",
        ]),
    );
    prop::collection::vec(pair, 0..3).prop_map(|pairs| {
        let escaped = |v: &str| v.bytes().map(|b| format!("%{b:02X}")).collect::<String>();
        let pairs: Vec<String> = pairs.iter().map(|(k, v)| format!("{k}={}", escaped(v))).collect();
        if pairs.is_empty() {
            String::new()
        } else {
            format!("?{}", pairs.join("&"))
        }
    })
}

/// A body of each kind; `name` names the spec's job.
fn body(kind: Body, name: String) -> BoxedStrategy<Vec<u8>> {
    // Jobs of the `log` kind, or of a type no node has: nothing fuzzed runs a program.
    let types: &'static [&'static str] = &["log", "log", "nope"];
    let json = match kind {
        Body::None => return Just(Vec::new()).boxed(),
        Body::Spec => spec_json(types)
            .prop_map(move |mut spec| {
                if spec.get("name").is_some() {
                    spec["name"] = Value::String(name.clone());
                }
                spec
            })
            .boxed(),
        Body::Specs => prop::collection::vec(spec_json(types), 0..3).prop_map(Value::Array).boxed(),
        Body::Data => data().prop_map(|data| json!({"data": data})).boxed(),
        Body::Ids => {
            let id = text_or(&["0190c0de-0000-7000-8000-000000000000", "not-a-uuid", ""]).prop_map(Value::String);
            prop::collection::vec(id, 0..3).prop_map(|ids| json!({"ids": ids})).boxed()
        }
    };
    json.prop_map(|v| v.to_string().into_bytes()).boxed()
}

/// A request (method, path, body): mostly a route with its method and its kind of body,
/// now and then another method, any JSON or bytes that are not JSON.
fn requests() -> impl Strategy<Value = (String, String, Vec<u8>)> {
    // Routes that create jobs come up often, so that the others find jobs to act on.
    let creating: Vec<_> =
        ROUTES.iter().filter(|(_, _, body)| matches!(body, Body::Spec | Body::Specs)).copied().collect();
    let creating = prop::sample::select(creating);
    let route = (prop_oneof![2 => prop::sample::select(ROUTES), 1 => creating], segments(), segments(), queries());
    route.prop_flat_map(|((method, pattern, kind), first, second, query)| {
        let path = format!("{}{query}", pattern.replacen("{}", &first, 1).replacen("{}", &second, 1));
        let method = prop_oneof![9 => Just(method.to_owned()), 1 => one_of(&["GET", "POST", "PUT", "DELETE", "PATCH"])];
        let body = prop_oneof![
            8 => body(kind, first),
            1 => any_json().prop_map(|v| v.to_string().into_bytes()),
            1 => prop::collection::vec(any::<u8>(), 0..32),
        ];
        (method, Just(path), body)
    })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 600, ..ProptestConfig::default() })]

    #[test]
    fn the_admin_api_answers_every_request_without_an_internal_error(
        (method, path, body) in requests(),
        json_type in any::<bool>(),
    ) {
        let (runtime, base) = api();
        let (status, text) = runtime.block_on(async {
            let client = kinds::http::client();
            let method = reqwest::Method::from_bytes(method.as_bytes()).unwrap();
            let mut request = client.request(method, format!("{base}{path}")).body(body);
            if json_type {
                request = request.header("content-type", "application/json");
            }
            // A panicking handler drops the connection: an error here.
            let response = request.send().await.map_err(|e| e.to_string())?;
            let status = response.status();
            Ok::<_, String>((status, response.text().await.map_err(|e| e.to_string())?))
        }).map_err(|e| TestCaseError::fail(format!("{path}: {e}")))?;
        prop_assert!(!status.is_server_error(), "{} {}: {}", status, path, text);
        if status.is_client_error() {
            let error: Value =
                serde_json::from_str(&text).map_err(|e| TestCaseError::fail(format!("{path}: {e}: {text}")))?;
            prop_assert!(error["code"].as_str().is_some_and(|c| !c.is_empty()), "{}: {}", path, text);
            prop_assert!(error["message"].as_str().is_some_and(|m| !m.is_empty()), "{}: {}", path, text);
        }
    }
}

/// An `Authorization` header: none, the right tokens (some with stray spaces or the wrong
/// scheme), near misses, or anything.
fn authorizations() -> impl Strategy<Value = Option<Vec<u8>>> {
    let near = |secret: &'static str| {
        prop_oneof![
            Just(format!("Bearer {secret}")),
            Just(format!("Bearer  {secret} ")),
            Just(format!("bearer {secret}")),
            Just(format!("Basic {secret}")),
            Just(format!("Bearer {}", &secret[..secret.len() - 1])),
            Just(format!("Bearer {secret}x")),
            Just(secret.to_owned()),
        ]
    };
    prop_oneof![
        1 => Just(None),
        3 => prop_oneof![near(ADMIN_SECRET), near(READ_SECRET)].prop_map(|h| Some(h.into_bytes())),
        1 => "Bearer [\\PC]{0,40}".prop_map(|h| Some(h.into_bytes())),
        1 => prop::collection::vec(any::<u8>(), 0..48).prop_map(Some),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 400, ..ProptestConfig::default() })]

    #[test]
    fn tokens_are_checked_on_every_route_with_stable_codes(
        (method, path, body) in requests(),
        authorization in authorizations(),
    ) {
        let (runtime, base) = guarded_api();
        let header = match &authorization {
            None => None,
            // Bytes no HTTP header may carry never leave the client.
            Some(bytes) => match reqwest::header::HeaderValue::from_bytes(bytes) {
                Ok(value) => Some(value),
                Err(_) => return Ok(()),
            },
        };
        let admin = authorization.as_deref() == Some(format!("Bearer {ADMIN_SECRET}").as_bytes())
            || authorization.as_deref() == Some(format!("Bearer  {ADMIN_SECRET} ").as_bytes());
        let read = authorization.as_deref() == Some(format!("Bearer {READ_SECRET}").as_bytes())
            || authorization.as_deref() == Some(format!("Bearer  {READ_SECRET} ").as_bytes());
        let probe = method == "GET" && (path.starts_with("/health") || path.starts_with("/metrics"));
        // The dashboard's page and assets hold no data: open whatever the token.
        let page = method == "GET" && (path == "/" || path.starts_with("/?") || path.starts_with("/assets/"));
        let (status, text) = runtime.block_on(async {
            let client = kinds::http::client();
            let verb = reqwest::Method::from_bytes(method.as_bytes()).unwrap();
            let mut request = client.request(verb, format!("{base}{path}")).body(body);
            if let Some(header) = header {
                request = request.header("authorization", header);
            }
            let response = request.send().await.map_err(|e| e.to_string())?;
            let status = response.status().as_u16();
            Ok::<_, String>((status, response.text().await.map_err(|e| e.to_string())?))
        }).map_err(|e| TestCaseError::fail(format!("{path}: {e}")))?;
        prop_assert!(status < 500, "{} {}: {}", status, path, text);
        let code = serde_json::from_str::<Value>(&text).ok().and_then(|v| v["code"].as_str().map(str::to_owned));
        let changes = !matches!(method.as_str(), "GET" | "HEAD");
        if admin || (read && !changes) || (probe && authorization.is_none()) || page {
            prop_assert!(status != 401 && status != 403, "{} {} {}: {}", status, method, path, text);
        } else if read {
            prop_assert_eq!((status, code.as_deref()), (403, Some("ADMIN_AUTH_002")), "{} {}", method, path);
        } else {
            prop_assert_eq!((status, code.as_deref()), (401, Some("ADMIN_AUTH_001")), "{} {}", method, path);
        }
    }
}
