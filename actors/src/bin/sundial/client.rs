//! The CLI side of the admin API: one request per command (one per item for batch-less
//! endpoints), tables for people, `--json` for scripts, exit codes by error class.

use std::path::PathBuf;

use chrono::{DateTime, SecondsFormat, Utc};
use clap::builder::NonEmptyStringValueParser;
use clap::Subcommand;
use reqwest::{Method, StatusCode};
use serde::de::DeserializeOwned;
use serde_json::Value;
use sundial_actors::admin::error::ErrorBody;
use sundial_actors::admin::views::{ItemResult, JobView, OutcomeView, RunView};
use sundial_actors::admin::NodeInfo;
use sundial_actors::sundial::audit::AuditEntry;

use crate::{exit, Remote};

#[derive(Debug, Subcommand)]
pub(crate) enum JobsAction {
    /// Every job with its state, next fire and last result.
    List,
    /// One job: definition, triggers, last run.
    Show {
        #[arg(value_parser = NonEmptyStringValueParser::new())]
        name: String,
    },
    /// Add or replace the jobs of a file: TOML (`[[jobs]]` tables, or one job's keys) or
    /// JSON (a job spec or a list).
    Apply {
        #[arg(short = 'f', long = "file")]
        file: PathBuf,
    },
    /// Delete jobs and their triggers (history is kept).
    Delete {
        #[arg(required = true, value_parser = NonEmptyStringValueParser::new())]
        names: Vec<String>,
    },
    /// Pause every trigger of jobs.
    Pause {
        #[arg(required = true, value_parser = NonEmptyStringValueParser::new())]
        names: Vec<String>,
    },
    /// Resume jobs.
    Resume {
        #[arg(required = true, value_parser = NonEmptyStringValueParser::new())]
        names: Vec<String>,
    },
    /// Run a job now on the node and wait for the result (exit 1 if the run fails).
    Trigger {
        #[arg(value_parser = NonEmptyStringValueParser::new())]
        name: String,
        /// JSON object overriding the job's data.
        #[arg(long)]
        data: Option<String>,
    },
    /// Queue a run of a job for any node; prints the one-shot trigger's name.
    Enqueue {
        #[arg(value_parser = NonEmptyStringValueParser::new())]
        name: String,
        /// JSON object overriding the job's data.
        #[arg(long)]
        data: Option<String>,
    },
    /// Put overridden code jobs back to their code definition.
    Restore {
        #[arg(required = true, value_parser = NonEmptyStringValueParser::new())]
        names: Vec<String>,
    },
}

#[derive(Debug, Subcommand)]
pub(crate) enum TriggersAction {
    /// Pause one trigger.
    Pause {
        #[arg(value_parser = NonEmptyStringValueParser::new())]
        job: String,
        #[arg(value_parser = NonEmptyStringValueParser::new())]
        trigger: String,
    },
    /// Resume one trigger.
    Resume {
        #[arg(value_parser = NonEmptyStringValueParser::new())]
        job: String,
        #[arg(value_parser = NonEmptyStringValueParser::new())]
        trigger: String,
    },
}

#[derive(Debug, Subcommand)]
pub(crate) enum RunsAction {
    /// Runs, newest scheduled first.
    List {
        #[command(flatten)]
        filters: RunFilters,
        /// Runs to skip.
        #[arg(long)]
        skip: Option<i64>,
        /// Runs to show, 1–1000 (default 100).
        #[arg(long)]
        limit: Option<i64>,
    },
    /// How many runs match.
    Count {
        #[command(flatten)]
        filters: RunFilters,
    },
    /// Cancel runs by id.
    Cancel {
        #[arg(required = true)]
        ids: Vec<String>,
    },
}

#[derive(Debug, Subcommand)]
pub(crate) enum AuditAction {
    /// Changes made through the API, newest first.
    List {
        /// Only this token's changes (its name).
        #[arg(long)]
        actor: Option<String>,
        /// Only these actions (comma list: schedule, unschedule, pause, resume,
        /// pause_trigger, resume_trigger, trigger, enqueue, cancel, restore).
        #[arg(long)]
        action: Option<String>,
        /// Only changes to this job, `job/trigger` or run id.
        #[arg(long)]
        target: Option<String>,
        /// Only failed (true) or succeeded (false) changes.
        #[arg(long)]
        failed: Option<bool>,
        /// Made at or after (RFC 3339).
        #[arg(long)]
        from: Option<String>,
        /// Made before (RFC 3339).
        #[arg(long)]
        to: Option<String>,
        /// Entries to skip.
        #[arg(long)]
        skip: Option<u32>,
        /// Entries to show, 1–1000 (default 100).
        #[arg(long)]
        limit: Option<u32>,
    },
}

#[derive(Debug, clap::Args)]
pub(crate) struct RunFilters {
    /// Only this job.
    #[arg(long)]
    job: Option<String>,
    /// Only these states (comma list: running, succeeded, failed, canceled, lost).
    #[arg(long)]
    state: Option<String>,
    /// Scheduled at or after (RFC 3339).
    #[arg(long)]
    from: Option<String>,
    /// Scheduled before (RFC 3339).
    #[arg(long)]
    to: Option<String>,
    /// Only this trigger.
    #[arg(long)]
    trigger: Option<String>,
    /// Only runs on this node.
    #[arg(long)]
    node: Option<String>,
    /// Only runs with (true) or without (false) an error.
    #[arg(long)]
    has_error: Option<bool>,
}

impl RunFilters {
    fn pairs(&self) -> Vec<(&'static str, String)> {
        let mut pairs = Vec::new();
        let fields = [
            ("job", &self.job),
            ("state", &self.state),
            ("from", &self.from),
            ("to", &self.to),
            ("trigger", &self.trigger),
            ("node", &self.node),
        ];
        for (key, value) in fields {
            if let Some(value) = value {
                pairs.push((key, value.clone()));
            }
        }
        if let Some(has_error) = self.has_error {
            pairs.push(("has_error", has_error.to_string()));
        }
        pairs
    }
}

/// A failed command: what to print and the exit code.
struct Failure {
    message: String,
    code: u8,
    /// The node's error, when the node answered with one.
    api: Option<ErrorBody>,
}

type CliResult<T> = Result<T, Failure>;

fn usage(message: impl Into<String>) -> Failure {
    Failure { message: message.into(), code: exit::USAGE, api: None }
}

/// The `Accept-Language` for the user's locale (the first of `LC_ALL`, `LC_MESSAGES` and
/// `LANG` that is set, as POSIX orders them): Simplified Chinese for a `zh…` locale, none
/// for any other (the API's messages are in English and Simplified Chinese).
fn accept_language(var: impl Fn(&str) -> Option<String>) -> Option<&'static str> {
    let locale = ["LC_ALL", "LC_MESSAGES", "LANG"].into_iter().find_map(|name| var(name).filter(|v| !v.is_empty()))?;
    locale.starts_with("zh").then_some("zh-CN")
}

/// Why the node at `base` could not be reached: the innermost cause (reqwest's own text
/// only says a request failed), and, when nothing answered, where to look.
fn unreachable_message(base: &str, error: &reqwest::Error) -> String {
    let mut cause: &dyn std::error::Error = error;
    while let Some(inner) = cause.source() {
        cause = inner;
    }
    let hint =
        if error.is_connect() { " (is a node running there? `--server` or SUNDIAL_SERVER names another)" } else { "" };
    format!("cannot reach the node at {base}: {cause}{hint}")
}

/// The admin API's base from `--server`: an `http(s)://host[:port]` address. Anything
/// else is a usage error (exit 2), not an unreachable node.
fn server_base(server: &str) -> CliResult<String> {
    let example = "e.g. http://127.0.0.1:7600";
    let url =
        reqwest::Url::parse(server).map_err(|e| usage(format!("--server '{server}' is not a URL ({e}); {example}")))?;
    if !matches!(url.scheme(), "http" | "https") || url.host_str().is_none() {
        return Err(usage(format!("--server '{server}' is not the http(s) address of a node; {example}")));
    }
    Ok(server.trim_end_matches('/').to_owned())
}

/// An HTTP client that also trusts the CA certificates in the PEM file at `path`.
fn http_trusting(path: &std::path::Path) -> CliResult<reqwest::Client> {
    let bad = |problem: String| usage(format!("--ca-cert {}: {problem}", path.display()));
    let pem = std::fs::read(path).map_err(|e| bad(format!("cannot read it: {e}")))?;
    let certs = reqwest::Certificate::from_pem_bundle(&pem).map_err(|e| bad(format!("not PEM certificates: {e}")))?;
    if certs.is_empty() {
        return Err(bad("holds no PEM certificate".into()));
    }
    let builder = sundial_actors::kinds::http::client_builder().tls_certs_merge(certs);
    builder.build().map_err(|e| bad(format!("cannot be used: {e}")))
}

/// The exit code of an API error code.
fn exit_code_of(code: &str) -> u8 {
    if code.contains("_NOTFOUND_") || code == "ADMIN_ROUTE_001" {
        exit::NOT_FOUND
    } else if code.contains("_VALIDATION_") || code.starts_with("ADMIN_REQUEST") || code.starts_with("ADMIN_BODY") {
        exit::INVALID
    } else if code.contains("_CONFLICT_") {
        exit::CONFLICT
    } else if code.contains("_UNAVAILABLE_") {
        exit::UNAVAILABLE
    } else if code.starts_with("ADMIN_AUTH_") {
        exit::UNAUTHORIZED
    } else {
        exit::FAILED
    }
}

struct Client {
    base: String,
    token: Option<String>,
    /// The `Accept-Language` to send: the user's locale when it is Chinese, so the API's
    /// messages come in it (none otherwise: the API answers in English).
    language: Option<&'static str>,
    http: reqwest::Client,
    runtime: tokio::runtime::Runtime,
}

impl Client {
    fn new(remote: &Remote) -> CliResult<Self> {
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().map_err(|e| Failure {
            message: format!("cannot start the async runtime: {e}"),
            code: exit::FAILED,
            api: None,
        })?;
        let http = match &remote.ca_cert {
            None => sundial_actors::kinds::http::client().as_ref().clone(),
            Some(path) => http_trusting(path)?,
        };
        let base = server_base(&remote.server)?;
        let language = accept_language(|name| std::env::var(name).ok());
        Ok(Self { base, token: remote.token.clone(), language, http, runtime })
    }

    fn call<T: DeserializeOwned>(
        &self,
        method: Method,
        path: &str,
        query: &[(&str, String)],
        body: Option<&Value>,
    ) -> CliResult<T> {
        let url = format!("{}{path}", self.base);
        let mut request = self.http.request(method, &url).query(query);
        if let Some(token) = &self.token {
            request = request.bearer_auth(token);
        }
        if let Some(language) = self.language {
            request = request.header(reqwest::header::ACCEPT_LANGUAGE, language);
        }
        if let Some(body) = body {
            request = request.json(body);
        }
        self.runtime.block_on(async {
            let response = request.send().await.map_err(|e| Failure {
                message: unreachable_message(&self.base, &e),
                code: exit::UNAVAILABLE,
                api: None,
            })?;
            let status = response.status();
            let bytes = response.bytes().await.map_err(|e| Failure {
                message: format!("reading the answer of {url}: {e}"),
                code: exit::UNAVAILABLE,
                api: None,
            })?;
            if status.is_success() {
                return serde_json::from_slice(&bytes).map_err(|e| Failure {
                    message: format!("unexpected answer from {url}: {e}"),
                    code: exit::FAILED,
                    api: None,
                });
            }
            Err(match serde_json::from_slice::<ErrorBody>(&bytes) {
                Ok(error) => Failure {
                    message: format!("{}: {}", error.code, error.message),
                    code: exit_code_of(&error.code),
                    api: Some(error),
                },
                Err(_) => Failure {
                    message: format!("{url} answered {status}"),
                    code: if status == StatusCode::NOT_FOUND { exit::NOT_FOUND } else { exit::FAILED },
                    api: None,
                },
            })
        })
    }
}

/// Runs a command body, printing its failure; the exit code.
fn finish(result: CliResult<u8>) -> u8 {
    match result {
        Ok(code) => code,
        Err(failure) => {
            eprintln!("sundial: {}", failure.message);
            failure.code
        }
    }
}

fn print_json(value: &impl serde::Serialize) {
    outln!("{}", serde_json::to_string_pretty(value).unwrap_or_else(|e| format!("{{\"error\": \"{e}\"}}")));
}

fn segment(text: &str) -> String {
    // Names are restricted to URL-safe characters by their grammar, but ids and typos are not.
    text.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}

pub(crate) fn node_info(remote: &Remote) -> u8 {
    finish((|| {
        let client = Client::new(remote)?;
        let info: NodeInfo = client.call(Method::GET, "/api/node", &[], None)?;
        if remote.json {
            print_json(&info);
        } else {
            outln!("node      {}", info.node_id);
            outln!("state     {}", info.state);
            outln!("leader    {}", if info.leader { "yes" } else { "no" });
            outln!("running   {}", info.running);
            outln!("store     {}", info.store);
            outln!("version   {}", info.version);
            outln!("job types {}", info.job_types.join(", "));
        }
        Ok(0)
    })())
}

pub(crate) fn jobs(action: JobsAction, remote: &Remote) -> u8 {
    finish(jobs_inner(action, remote))
}

fn data_arg(data: Option<&str>) -> CliResult<Value> {
    match data {
        None => Ok(serde_json::json!({})),
        Some(text) => match serde_json::from_str::<Value>(text) {
            Ok(Value::Object(map)) => Ok(serde_json::json!({ "data": map })),
            Ok(_) => Err(usage("--data must be a JSON object")),
            Err(e) => Err(usage(format!("--data is not JSON: {e}"))),
        },
    }
}

fn jobs_inner(action: JobsAction, remote: &Remote) -> CliResult<u8> {
    let client = Client::new(remote)?;
    match action {
        JobsAction::List => {
            let jobs: Vec<JobView> = client.call(Method::GET, "/api/jobs", &[], None)?;
            if remote.json {
                print_json(&jobs);
            } else {
                print_jobs(&jobs);
            }
            Ok(0)
        }
        JobsAction::Show { name } => {
            let job: JobView = client.call(Method::GET, &format!("/api/jobs/{}", segment(&name)), &[], None)?;
            if remote.json {
                print_json(&job);
            } else {
                print_job(&job);
            }
            Ok(0)
        }
        JobsAction::Apply { file } => {
            // Checked here, so a mistake names the file and the key. A node config's
            // calendars are the node's own: only its jobs are sent.
            let specs = sundial_actors::spec::read_file(&file).map_err(usage)?.jobs;
            let body = serde_json::to_value(&specs).map_err(|e| usage(e.to_string()))?;
            let results: Vec<ItemResult> = client.call(Method::POST, "/api/jobs", &[], Some(&body))?;
            Ok(print_items(&results, remote.json, "applied"))
        }
        JobsAction::Delete { names } => {
            per_item(&client, remote, &names, Method::DELETE, |n| format!("/api/jobs/{}", segment(n)), "deleted")
        }
        JobsAction::Pause { names } => {
            per_item(&client, remote, &names, Method::POST, |n| format!("/api/jobs/{}/pause", segment(n)), "paused")
        }
        JobsAction::Resume { names } => {
            per_item(&client, remote, &names, Method::POST, |n| format!("/api/jobs/{}/resume", segment(n)), "resumed")
        }
        JobsAction::Restore { names } => {
            per_item(&client, remote, &names, Method::POST, |n| format!("/api/jobs/{}/restore", segment(n)), "restored")
        }
        JobsAction::Trigger { name, data } => {
            let body = data_arg(data.as_deref())?;
            let outcome: OutcomeView =
                client.call(Method::POST, &format!("/api/jobs/{}/trigger", segment(&name)), &[], Some(&body))?;
            if remote.json {
                print_json(&outcome);
            } else {
                let detail = match (&outcome.error_code, &outcome.error_message) {
                    (Some(code), Some(message)) => format!(": {code}: {message}"),
                    (None, Some(message)) => format!(": {message}"),
                    _ => String::new(),
                };
                outln!("{name}: {:?}{detail}", outcome.state);
            }
            Ok(if outcome.state == sundial::job::RunState::Succeeded { 0 } else { exit::FAILED })
        }
        JobsAction::Enqueue { name, data } => {
            let body = data_arg(data.as_deref())?;
            let enqueued: Value =
                client.call(Method::POST, &format!("/api/jobs/{}/enqueue", segment(&name)), &[], Some(&body))?;
            if remote.json {
                print_json(&enqueued);
            } else {
                outln!("{}", enqueued["trigger"].as_str().unwrap_or_default());
            }
            Ok(0)
        }
    }
}

/// One request per item; every item is tried, the first failure's class is the exit code.
fn per_item(
    client: &Client,
    remote: &Remote,
    items: &[String],
    method: Method,
    path: impl Fn(&str) -> String,
    done: &str,
) -> CliResult<u8> {
    let mut results = Vec::with_capacity(items.len());
    for item in items {
        let result = client.call::<Value>(method.clone(), &path(item), &[], None);
        results.push(match result {
            Ok(_) => ItemResult { item: item.clone(), ok: true, error: None },
            // The node answered for this item; anything else (unreachable) ends the command.
            Err(Failure { api: Some(error), .. }) => ItemResult { item: item.clone(), ok: false, error: Some(error) },
            Err(failure) => return Err(failure),
        });
    }
    Ok(print_items(&results, remote.json, done))
}

fn print_items(results: &[ItemResult], json: bool, done: &str) -> u8 {
    if json {
        print_json(&results);
    } else {
        for r in results {
            match &r.error {
                None => outln!("{}: {done}", r.item),
                Some(e) => eprintln!("{}: {}: {}", r.item, e.code, e.message),
            }
        }
    }
    results.iter().filter_map(|r| r.error.as_ref()).map(|e| exit_code_of(&e.code)).next().unwrap_or(0)
}

pub(crate) fn triggers(action: TriggersAction, remote: &Remote) -> u8 {
    finish((|| {
        let client = Client::new(remote)?;
        let (job, trigger, verb, done) = match &action {
            TriggersAction::Pause { job, trigger } => (job, trigger, "pause", "paused"),
            TriggersAction::Resume { job, trigger } => (job, trigger, "resume", "resumed"),
        };
        let path = format!("/api/jobs/{}/triggers/{}/{verb}", segment(job), segment(trigger));
        let _: Value = client.call(Method::POST, &path, &[], None)?;
        if remote.json {
            print_json(&serde_json::json!({ "job": job, "trigger": trigger, "ok": true }));
        } else {
            outln!("{job}/{trigger}: {done}");
        }
        Ok(0)
    })())
}

pub(crate) fn runs(action: RunsAction, remote: &Remote) -> u8 {
    finish((|| {
        let client = Client::new(remote)?;
        match action {
            RunsAction::List { filters, skip, limit } => {
                let mut query = filters.pairs();
                if let Some(skip) = skip {
                    query.push(("skip", skip.to_string()));
                }
                if let Some(limit) = limit {
                    query.push(("limit", limit.to_string()));
                }
                let runs: Vec<RunView> = client.call(Method::GET, "/api/runs", &query, None)?;
                if remote.json {
                    print_json(&runs);
                } else {
                    print_runs(&runs);
                }
                Ok(0)
            }
            RunsAction::Count { filters } => {
                let count: Value = client.call(Method::GET, "/api/runs/count", &filters.pairs(), None)?;
                if remote.json {
                    print_json(&count);
                } else {
                    outln!("{}", count["count"]);
                }
                Ok(0)
            }
            RunsAction::Cancel { ids } => {
                let body = serde_json::json!({ "ids": ids });
                let results: Vec<ItemResult> = client.call(Method::POST, "/api/runs/cancel", &[], Some(&body))?;
                Ok(print_items(&results, remote.json, "cancel requested"))
            }
        }
    })())
}

pub(crate) fn audit(action: AuditAction, remote: &Remote) -> u8 {
    finish((|| {
        let client = Client::new(remote)?;
        let AuditAction::List { actor, action, target, failed, from, to, skip, limit } = action;
        let mut query = Vec::new();
        for (key, value) in [("actor", actor), ("action", action), ("target", target), ("from", from), ("to", to)] {
            if let Some(value) = value {
                query.push((key, value));
            }
        }
        query.extend(failed.map(|f| ("failed", f.to_string())));
        query.extend(skip.map(|n| ("skip", n.to_string())));
        query.extend(limit.map(|n| ("limit", n.to_string())));
        let entries: Vec<AuditEntry> = client.call(Method::GET, "/api/audit", &query, None)?;
        if remote.json {
            print_json(&entries);
        } else {
            let rows: Vec<Vec<String>> = entries
                .iter()
                .map(|e| {
                    vec![
                        time(Some(e.at)),
                        e.actor.clone(),
                        e.action.as_str().to_owned(),
                        e.target.clone(),
                        match (&e.error_code, &e.error_message) {
                            (Some(code), Some(message)) => format!("{code}: {message}"),
                            (Some(code), None) => code.clone(),
                            _ => "ok".to_owned(),
                        },
                    ]
                })
                .collect();
            table(&["AT", "ACTOR", "ACTION", "TARGET", "RESULT"], &rows);
        }
        Ok(0)
    })())
}

fn time(at: Option<DateTime<Utc>>) -> String {
    at.map_or_else(|| "-".to_owned(), |t| t.to_rfc3339_opts(SecondsFormat::Secs, true))
}

/// Prints rows as columns padded to their widest cell.
fn table(header: &[&str], rows: &[Vec<String>]) {
    let mut widths: Vec<usize> = header.iter().map(|h| h.chars().count()).collect();
    for row in rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let line = |cells: Vec<String>| {
        let last = cells.len().saturating_sub(1);
        let text: Vec<String> = cells
            .into_iter()
            .enumerate()
            .map(|(i, c)| if i == last { c } else { format!("{c:<w$}", w = widths[i]) })
            .collect();
        outln!("{}", text.join("  ").trim_end());
    };
    line(header.iter().map(|h| (*h).to_owned()).collect());
    for row in rows {
        line(row.clone());
    }
}

fn print_jobs(jobs: &[JobView]) {
    let rows: Vec<Vec<String>> = jobs
        .iter()
        .map(|j| {
            let next = j.triggers.iter().filter_map(|t| t.next_fire).min();
            let last = j.last_finished.as_ref().map_or_else(|| "-".to_owned(), |r| format!("{:?}", r.state));
            vec![
                j.spec.name.clone(),
                j.spec.job_type.clone(),
                format!("{:?}", j.origin),
                if j.paused { "paused".into() } else { "active".into() },
                j.running.to_string(),
                time(next),
                last,
            ]
        })
        .collect();
    table(&["NAME", "TYPE", "ORIGIN", "STATE", "RUNNING", "NEXT FIRE", "LAST"], &rows);
}

fn print_job(job: &JobView) {
    outln!("name      {}", job.spec.name);
    outln!("type      {}", job.spec.job_type);
    outln!("origin    {:?}", job.origin);
    outln!("paused    {}", if job.paused { "yes" } else { "no" });
    outln!("running   {}", job.running);
    if let Some(description) = &job.spec.description {
        outln!("about     {description}");
    }
    if !job.spec.data.is_empty() {
        outln!("data      {}", Value::Object(job.spec.data.clone()));
    }
    if let Some(last) = &job.last_finished {
        let error = last.error_message.as_deref().map(|m| format!(" ({m})")).unwrap_or_default();
        outln!("last run  {} {:?} at {}{error}", last.id, last.state, time(Some(last.scheduled_at)));
    }
    outln!();
    let schedules: std::collections::BTreeMap<&str, &str> =
        job.spec.triggers.iter().map(|t| (t.name.as_str(), t.schedule.as_str())).collect();
    let rows: Vec<Vec<String>> = job
        .triggers
        .iter()
        .map(|t| {
            vec![
                t.name.clone(),
                format!("{:?}{}", t.state, if t.paused { " (paused)" } else { "" }),
                time(t.previous_fire),
                time(t.next_fire),
                t.fire_count.to_string(),
                schedules.get(t.name.as_str()).map_or_else(|| t.error.clone().unwrap_or_default(), |s| (*s).to_owned()),
            ]
        })
        .collect();
    table(&["TRIGGER", "STATE", "PREVIOUS", "NEXT", "FIRES", "SCHEDULE"], &rows);
}

fn print_runs(runs: &[RunView]) {
    let rows: Vec<Vec<String>> = runs
        .iter()
        .map(|r| {
            vec![
                r.id.to_string(),
                r.job.clone(),
                r.trigger.clone().unwrap_or_else(|| "-".into()),
                time(Some(r.scheduled_at)),
                format!("{:?}", r.state),
                r.attempt.to_string(),
                r.node.clone(),
                match (&r.error_code, &r.error_message) {
                    (Some(code), Some(message)) => format!("{code}: {message}"),
                    (None, Some(message)) => message.clone(),
                    _ => String::new(),
                },
            ]
        })
        .collect();
    table(&["RUN", "JOB", "TRIGGER", "SCHEDULED", "STATE", "ATTEMPT", "NODE", "ERROR"], &rows);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn error_codes_map_to_exit_classes() {
        assert_eq!(server_base("http://127.0.0.1:7600/").ok().as_deref(), Some("http://127.0.0.1:7600"));
        for bad in ["notaurl", "http://[::1]:99999", "ftp://node"] {
            let failure = server_base(bad).err().unwrap();
            assert_eq!(failure.code, exit::USAGE, "{bad}");
            assert!(failure.message.contains(bad), "{}", failure.message);
        }
        assert_eq!(exit_code_of("SCHEDULING_NOTFOUND_001"), exit::NOT_FOUND);
        assert_eq!(exit_code_of("SCHEDULING_VALIDATION_002"), exit::INVALID);
        assert_eq!(exit_code_of("ADMIN_REQUEST_001"), exit::INVALID);
        assert_eq!(exit_code_of("SCHEDULING_CONFLICT_001"), exit::CONFLICT);
        assert_eq!(exit_code_of("SCHEDULING_UNAVAILABLE_001"), exit::UNAVAILABLE);
        assert_eq!(exit_code_of("ADMIN_AUTH_001"), exit::UNAUTHORIZED);
        assert_eq!(exit_code_of("ADMIN_AUTH_002"), exit::UNAUTHORIZED);
        assert_eq!(exit_code_of("SCHEDULING_UNEXPECTED_001"), exit::FAILED);
    }

    #[test]
    fn a_chinese_locale_asks_for_chinese_messages() {
        let env = |pairs: &'static [(&'static str, &'static str)]| {
            move |name: &str| pairs.iter().find(|(n, _)| *n == name).map(|(_, v)| (*v).to_owned())
        };
        assert_eq!(accept_language(env(&[("LANG", "zh_CN.UTF-8")])), Some("zh-CN"));
        assert_eq!(accept_language(env(&[("LANG", "zh_TW.UTF-8")])), Some("zh-CN"));
        assert_eq!(accept_language(env(&[("LANG", "en_US.UTF-8")])), None);
        assert_eq!(accept_language(env(&[])), None);
        // POSIX order: LC_ALL over LC_MESSAGES over LANG; an empty one does not count.
        assert_eq!(accept_language(env(&[("LC_ALL", "C"), ("LANG", "zh_CN.UTF-8")])), None);
        assert_eq!(accept_language(env(&[("LC_MESSAGES", "zh_CN"), ("LANG", "en_US")])), Some("zh-CN"));
        assert_eq!(accept_language(env(&[("LC_ALL", ""), ("LANG", "zh_CN.UTF-8")])), Some("zh-CN"));
    }

    #[test]
    fn path_segments_are_escaped() {
        assert_eq!(segment("a.b-c_d"), "a.b-c_d");
        assert_eq!(segment("a/b c"), "a%2Fb%20c");
    }
}
