//! The admin REST API of a node (axum, JSON): every operation of SPEC §9, node info,
//! `/health` and Prometheus `/metrics`. The OpenAPI document is served at
//! `/api/openapi.json` (source: `actors/src/admin/openapi.json`).
//!
//! With tokens configured, every route needs `Authorization: Bearer <token>`: a `read`
//! token reads, an `admin` token also changes (see [`access`]). Every error is `{"code", "message"}` with the
//! HTTP status of its code: scheduling errors keep their SPEC §14 codes, malformed
//! requests get `ADMIN_REQUEST_001` (400) and never reach the scheduler.

pub mod access;
pub mod dashboard;
pub mod error;
pub mod metrics;
pub mod overview;
mod queries;
pub mod timeline;
pub mod tls;
pub mod views;

use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::rejection::{BytesRejection, PathRejection, QueryRejection};
use axum::extract::{Extension, Path, Query, Request, State};
use axum::http::{header, Method, StatusCode};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use sundial::audit::{AuditAction, AuditEntry};
use sundial::error::SchedulingError;
use sundial::job::{JobRunQuery, JsonObject, RunState};
use sundial::kv::Kv;
use sundial::name::{JobName, TriggerKey, TriggerName};
use sundial::store::JobStatus;
use uuid::Uuid;

use self::access::{AccessPolicy, Caller, Denial};
use self::error::{ApiError, ErrorBody};
use self::metrics::{Metrics, StoreProbe};
use self::overview::{cluster_view, jobs_at_a_glance, ClusterView, Overview, StoreView, ThisNode, RUNS_COUNTED};
use self::queries::{audit_query, job_query, run_query};
use self::views::{ItemResult, JobView, OutcomeView, RunView};
use crate::context::Lifecycle;
use crate::scheduler::{JobScheduler, JobTriggerRequest};
use crate::spec::JobSpec;

/// The OpenAPI 3.1 document of this API.
pub const OPENAPI: &str = include_str!("openapi.json");

/// What the API serves from.
pub struct AdminState<K: Kv> {
    scheduler: JobScheduler<K>,
    access: Arc<AccessPolicy>,
    metrics: Arc<Metrics>,
    store_kind: &'static str,
    store_probe: Option<Arc<dyn StoreProbe>>,
}

impl<K: Kv> Clone for AdminState<K> {
    fn clone(&self) -> Self {
        Self {
            scheduler: self.scheduler.clone(),
            access: self.access.clone(),
            metrics: self.metrics.clone(),
            store_kind: self.store_kind,
            store_probe: self.store_probe.clone(),
        }
    }
}

impl<K: Kv> AdminState<K> {
    /// The API of `scheduler`, guarded by `access`; `store_kind` is shown in node info
    /// (`memory`, `embedded`, `postgres`, `fdb`).
    pub fn new(
        scheduler: JobScheduler<K>,
        access: AccessPolicy,
        metrics: Arc<Metrics>,
        store_kind: &'static str,
    ) -> Self {
        Self { scheduler, access: Arc::new(access), metrics, store_kind, store_probe: None }
    }

    /// Checks the store's server at `/health` and each `/metrics` scrape, and reports
    /// its counters there.
    pub fn with_store_probe(mut self, probe: Arc<dyn StoreProbe>) -> Self {
        self.store_probe = Some(probe);
        self
    }

    /// Asks the store probe, if any, and records the answer in the metrics: `None` when
    /// there is no probe, else the reason the store did not answer, if it did not.
    async fn probe_store(&self) -> Option<Result<(), String>> {
        let probe = self.store_probe.as_ref()?;
        let answer = match tokio::time::timeout(STORE_PROBE_TIMEOUT, probe.ping()).await {
            Ok(answer) => answer,
            Err(_) => Err(format!("no answer within {STORE_PROBE_TIMEOUT:?}")),
        };
        self.metrics.observe_store(answer.is_ok(), probe.counters());
        Some(answer)
    }
}

impl<K: Kv> AdminState<K> {
    /// Records a change asked for by `caller` in the audit log, with its result. Failing
    /// to record it is logged; the request's own result stands.
    async fn audit(&self, caller: &Caller, action: AuditAction, target: &str, error: Option<&ErrorBody>) {
        let error = error.map(|e| (e.code.as_str(), e.message.as_str()));
        if let Err(e) = self.scheduler.record_audit(&caller.name, action, target, error).await {
            tracing::warn!(error = %e, actor = %caller.name, action = action.as_str(), target, "audit entry not recorded");
        }
    }

    /// `result`, recorded in the audit log.
    async fn audited<T>(
        &self,
        caller: &Caller,
        action: AuditAction,
        target: &str,
        result: Result<T, ApiError>,
    ) -> Result<T, ApiError> {
        self.audit(caller, action, target, result.as_ref().err().map(ApiError::body)).await;
        result
    }

    /// `result`, recorded in the audit log if it failed (a step before the change itself).
    async fn audited_failure<T>(
        &self,
        caller: &Caller,
        action: AuditAction,
        target: &str,
        result: Result<T, ApiError>,
    ) -> Result<T, ApiError> {
        if let Err(error) = &result {
            self.audit(caller, action, target, Some(error.body())).await;
        }
        result
    }

    /// One entry per item of a batch, with the item's own result.
    async fn audit_items(&self, caller: &Caller, action: AuditAction, items: &[ItemResult]) {
        for item in items {
            self.audit(caller, action, &item.item, item.error.as_ref()).await;
        }
    }
}

/// A request's target as its path gives it (empty when the path did not parse).
fn path_target(path: &Result<Path<String>, PathRejection>) -> String {
    path.as_ref().map(|Path(target)| target.clone()).unwrap_or_default()
}

/// How long `/health` and `/metrics` wait for the store's server.
const STORE_PROBE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(2);

/// The API's routes.
pub fn router<K: Kv>(state: AdminState<K>) -> Router {
    let api = Router::new()
        .route("/", get(dashboard::index))
        .route("/assets/{file}", get(dashboard::asset))
        .route("/health", get(health::<K>))
        .route("/metrics", get(metrics_text::<K>))
        .route("/api/openapi.json", get(openapi))
        .route("/api/node", get(node_info::<K>))
        .route("/api/job-types", get(job_types::<K>))
        .route("/api/jobs", get(list_jobs::<K>).post(schedule_batch::<K>))
        .route("/api/jobs/{name}", get(show_job::<K>).put(schedule_one::<K>).delete(unschedule::<K>))
        .route("/api/jobs/{name}/pause", post(pause::<K>))
        .route("/api/jobs/{name}/resume", post(resume::<K>))
        .route("/api/jobs/{name}/restore", post(restore::<K>))
        .route("/api/jobs/{name}/trigger", post(trigger::<K>))
        .route("/api/jobs/{name}/enqueue", post(enqueue::<K>))
        .route("/api/jobs/{name}/triggers/{trigger}/pause", post(pause_trigger::<K>))
        .route("/api/jobs/{name}/triggers/{trigger}/resume", post(resume_trigger::<K>))
        .route("/api/runs", get(list_runs::<K>))
        .route("/api/runs/count", get(count_runs::<K>))
        .route("/api/runs/{id}", get(show_run::<K>))
        .route("/api/overview", get(overview::<K>))
        .route("/api/cluster", get(cluster::<K>))
        .route("/api/runs/cancel", post(cancel_runs::<K>))
        .route("/api/runs/{id}/cancel", post(cancel_run::<K>))
        .route("/api/audit", get(list_audit::<K>))
        .fallback(no_route)
        .method_not_allowed_fallback(bad_method);
    api.layer(middleware::from_fn_with_state(state.clone(), authorize::<K>)).with_state(state)
}

/// Serves `router` on `listener` (a `TcpListener`, or a [`tls::TlsListener`]) until
/// `shutdown` completes.
///
/// # Errors
/// An I/O error of the listener.
pub async fn serve<L>(
    listener: L,
    router: Router,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> std::io::Result<()>
where
    L: axum::serve::Listener,
    L::Addr: std::fmt::Debug,
{
    axum::serve(listener, router).with_graceful_shutdown(shutdown).await
}

type ApiResult<T> = Result<Json<T>, ApiError>;

/// Sets the request's language for error messages, then checks the token.
async fn authorize<K: Kv>(state: State<AdminState<K>>, request: Request, next: Next) -> Response {
    let header = request.headers().get(header::ACCEPT_LANGUAGE).and_then(|v| v.to_str().ok());
    let language = error::preferred_language(header);
    error::LANGUAGE.scope(language, check_token(state, request, next)).await
}

/// Applies the access policy; an allowed request carries its [`access::Caller`].
async fn check_token<K: Kv>(State(state): State<AdminState<K>>, mut request: Request, next: Next) -> Response {
    let changes = !matches!(*request.method(), Method::GET | Method::HEAD);
    // A header that is not text is still a credential, and a wrong one.
    let authorization = request.headers().get(header::AUTHORIZATION).map(|v| v.to_str().unwrap_or(""));
    match state.access.check(request.uri().path(), changes, authorization) {
        Ok(caller) => {
            request.extensions_mut().insert(caller);
            next.run(request).await
        }
        Err(denial) => {
            let (status, code, message) = match denial {
                Denial::Missing => {
                    (StatusCode::UNAUTHORIZED, error::UNAUTHORIZED, "this node needs `Authorization: Bearer <token>`")
                }
                Denial::Wrong => (StatusCode::UNAUTHORIZED, error::UNAUTHORIZED, "the bearer token is wrong"),
                Denial::ReadOnly => {
                    (StatusCode::FORBIDDEN, error::FORBIDDEN, "this token may read, not change; use an admin token")
                }
            };
            let mut response = ApiError::new(status, code, message).into_response();
            if status == StatusCode::UNAUTHORIZED {
                response.headers_mut().insert(header::WWW_AUTHENTICATE, header::HeaderValue::from_static("Bearer"));
            }
            response
        }
    }
}

async fn no_route() -> ApiError {
    ApiError::new(StatusCode::NOT_FOUND, error::NO_ROUTE, "no such endpoint; see /api/openapi.json")
}

async fn bad_method() -> ApiError {
    ApiError::new(StatusCode::METHOD_NOT_ALLOWED, error::BAD_METHOD, "this endpoint does not take that method")
}

fn job_name(path: Result<Path<String>, PathRejection>) -> Result<JobName, ApiError> {
    let Path(name) = path.map_err(|e| ApiError::bad_request(e.body_text()))?;
    JobName::new(name.clone()).map_err(|e| ApiError::bad_request(format!("'{name}' is not a job name: {e}")))
}

fn trigger_key(path: Result<Path<(String, String)>, PathRejection>) -> Result<TriggerKey, ApiError> {
    let Path((job, trigger)) = path.map_err(|e| ApiError::bad_request(e.body_text()))?;
    let job =
        JobName::new(job.clone()).map_err(|e| ApiError::bad_request(format!("'{job}' is not a job name: {e}")))?;
    let trigger = TriggerName::new(trigger.clone())
        .map_err(|e| ApiError::bad_request(format!("'{trigger}' is not a trigger name: {e}")))?;
    Ok(TriggerKey::new(job, trigger))
}

/// A JSON body; `None` when empty.
fn json_body<T: DeserializeOwned>(body: Result<Bytes, BytesRejection>) -> Result<Option<T>, ApiError> {
    let bytes = body.map_err(|e| {
        if e.status() == StatusCode::PAYLOAD_TOO_LARGE {
            ApiError::new(StatusCode::PAYLOAD_TOO_LARGE, error::TOO_LARGE, e.body_text())
        } else {
            ApiError::bad_request(e.body_text())
        }
    })?;
    if bytes.iter().all(u8::is_ascii_whitespace) {
        return Ok(None);
    }
    let mut de = serde_json::Deserializer::from_slice(&bytes);
    let value = crate::spec::deserialize_at(&mut de, "body").map_err(ApiError::bad_request)?;
    de.end().map_err(|e| ApiError::bad_request(format!("body: {e}")))?;
    Ok(Some(value))
}

fn required<T>(body: Option<T>, what: &str) -> Result<T, ApiError> {
    body.ok_or_else(|| ApiError::bad_request(format!("the body must be {what}")))
}

#[derive(Serialize)]
struct Health {
    status: &'static str,
    /// `reachable` or `unreachable`, for a store with a server of its own.
    #[serde(skip_serializing_if = "Option::is_none")]
    store: Option<&'static str>,
    /// Why the store did not answer.
    #[serde(skip_serializing_if = "Option::is_none")]
    store_error: Option<String>,
}

/// `GET /health`: 200 while the node serves and its store answers, else 503.
async fn health<K: Kv>(State(state): State<AdminState<K>>) -> Response {
    let lifecycle = state.scheduler.lifecycle();
    let probe = state.probe_store().await;
    let store_ok = !matches!(probe, Some(Err(_)));
    let status =
        if lifecycle == Lifecycle::Serving && store_ok { StatusCode::OK } else { StatusCode::SERVICE_UNAVAILABLE };
    let health = Health {
        status: lifecycle_name(lifecycle),
        store: probe.as_ref().map(|answer| if answer.is_ok() { "reachable" } else { "unreachable" }),
        store_error: probe.and_then(Result::err),
    };
    (status, Json(health)).into_response()
}

fn lifecycle_name(lifecycle: Lifecycle) -> &'static str {
    match lifecycle {
        Lifecycle::Starting => "starting",
        Lifecycle::Serving => "serving",
        Lifecycle::Draining => "draining",
        Lifecycle::Stopped => "stopped",
    }
}

async fn metrics_text<K: Kv>(State(state): State<AdminState<K>>) -> Response {
    state.probe_store().await;
    let text = state.metrics.render(&state.scheduler.counters());
    ([(header::CONTENT_TYPE, "application/openmetrics-text; version=1.0.0; charset=utf-8")], text).into_response()
}

async fn openapi() -> Response {
    ([(header::CONTENT_TYPE, "application/json")], OPENAPI).into_response()
}

/// `GET /api/node`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct NodeInfo {
    /// The node's id.
    pub node_id: String,
    /// `starting`, `serving`, `draining` or `stopped`.
    pub state: String,
    /// Holds the leader lease.
    pub leader: bool,
    /// Runs on this node now.
    pub running: usize,
    /// `memory`, `postgres` or `fdb`.
    pub store: String,
    /// The sundial version.
    pub version: String,
    /// Registered job types.
    pub job_types: Vec<String>,
    /// The most runs it runs at once (`max_concurrent_runs`).
    #[serde(default)]
    pub run_slots: u32,
}

async fn node_info<K: Kv>(State(state): State<AdminState<K>>) -> Json<NodeInfo> {
    let s = &state.scheduler;
    let counters = s.counters();
    Json(NodeInfo {
        node_id: s.node_id().to_owned(),
        state: lifecycle_name(s.lifecycle()).to_owned(),
        leader: counters.leader,
        running: counters.running,
        store: state.store_kind.to_owned(),
        version: env!("CARGO_PKG_VERSION").to_owned(),
        job_types: s.registry().type_keys().map(str::to_owned).collect(),
        run_slots: s.run_slots(),
    })
}

async fn job_types<K: Kv>(State(state): State<AdminState<K>>) -> Json<Vec<String>> {
    Json(state.scheduler.registry().type_keys().map(str::to_owned).collect())
}

/// `GET /api/jobs`: every job, or those matching `q`, `state`, `type`, `origin`, by name;
/// with `limit` (and `skip`) a page of them, `X-Total-Count` saying how many match.
async fn list_jobs<K: Kv>(
    State(state): State<AdminState<K>>,
    params: Result<Query<Vec<(String, String)>>, QueryRejection>,
) -> Result<Response, ApiError> {
    let query = job_query(params)?;
    // Filtered and counted on what the list shows of every job; the latest run is read
    // for the page only.
    let statuses = state.scheduler.statuses_brief().await?;
    let matching: Vec<JobStatus> = statuses.into_iter().filter(|s| query.matches(s)).collect();
    let total = matching.len();
    let mut page: Vec<JobStatus> =
        matching.into_iter().skip(query.skip).take(query.limit.unwrap_or(usize::MAX)).collect();
    state.scheduler.fill_last_finished(&mut page).await?;
    let page: Vec<JobView> = page.into_iter().map(JobView::from).collect();
    Ok(([(TOTAL_COUNT, total.to_string())], Json(page)).into_response())
}

/// The header saying how many items match a paged list.
const TOTAL_COUNT: &str = "x-total-count";

async fn show_job<K: Kv>(
    State(state): State<AdminState<K>>,
    path: Result<Path<String>, PathRejection>,
) -> ApiResult<JobView> {
    let name = job_name(path)?;
    match state.scheduler.status(&name).await? {
        Some(status) => Ok(Json(JobView::from(status))),
        None => Err(SchedulingError::JobNotFound { job: name.to_string() }.into()),
    }
}

/// A spec as a definition the scheduler accepts, with the built-in kinds' data checked.
fn definition(spec: &JobSpec, path: &str) -> Result<sundial::job::JobDefinition, SchedulingError> {
    let def = spec.to_definition(path)?;
    crate::kinds::check(&def)
        .map_err(|e| SchedulingError::invalid_definition(format!("{path} ({}): {e}", def.name)))?;
    Ok(def)
}

async fn schedule_one<K: Kv>(
    State(state): State<AdminState<K>>,
    Extension(caller): Extension<Caller>,
    path: Result<Path<String>, PathRejection>,
    body: Result<Bytes, BytesRejection>,
) -> ApiResult<JobView> {
    let target = path_target(&path);
    let scheduled = async {
        let name = job_name(path)?;
        let spec: JobSpec = required(json_body(body)?, "a job spec")?;
        if spec.name != name.as_str() {
            return Err(ApiError::bad_request(format!("the body names job '{}', the path '{name}'", spec.name)));
        }
        let def = definition(&spec, "job")?;
        state.scheduler.schedule_one(def).await?;
        Ok(name)
    }
    .await;
    let name = state.audited(&caller, AuditAction::Schedule, &target, scheduled).await?;
    show_job(State(state), Ok(Path(name.to_string()))).await
}

/// `POST /api/jobs`: a job spec or a list of them.
#[derive(Deserialize)]
#[serde(untagged)]
enum OneOrMany {
    Many(Vec<serde_json::Value>),
    One(Box<serde_json::Value>),
}

async fn schedule_batch<K: Kv>(
    State(state): State<AdminState<K>>,
    Extension(caller): Extension<Caller>,
    body: Result<Bytes, BytesRejection>,
) -> ApiResult<Vec<ItemResult>> {
    let read = json_body::<OneOrMany>(body).and_then(|body| required(body, "a job spec or a list of them"));
    let items = match state.audited_failure(&caller, AuditAction::Schedule, "", read).await? {
        OneOrMany::Many(items) => items,
        OneOrMany::One(item) => vec![*item],
    };
    // Malformed items fail alone; the valid ones are scheduled in one batch.
    let mut results: Vec<Option<ItemResult>> = Vec::with_capacity(items.len());
    let mut defs = Vec::new();
    let mut slots = Vec::new();
    for (label, parsed) in batch_items(items) {
        match parsed {
            Ok(def) => {
                slots.push((results.len(), label));
                results.push(None);
                defs.push(def);
            }
            Err(e) => results.push(Some(ItemResult::invalid(label, e))),
        }
    }
    let outcomes = state.scheduler.schedule(defs).await;
    for ((slot, label), outcome) in slots.into_iter().zip(outcomes) {
        results[slot] = Some(ItemResult::of(label, outcome));
    }
    let results: Vec<ItemResult> = results.into_iter().flatten().collect();
    state.audit_items(&caller, AuditAction::Schedule, &results).await;
    Ok(Json(results))
}

/// A batch's items as [`batch_item`] reads them, a job named a second time refused (it
/// would silently replace the first).
fn batch_items(items: Vec<serde_json::Value>) -> Vec<(String, Result<sundial::job::JobDefinition, ErrorBody>)> {
    let mut first = std::collections::BTreeMap::new();
    let mut read = Vec::with_capacity(items.len());
    for (i, item) in items.into_iter().enumerate() {
        let (label, mut parsed) = batch_item(i, item);
        if let Ok(def) = &parsed {
            match first.entry(def.name.clone()) {
                std::collections::btree_map::Entry::Vacant(entry) => {
                    entry.insert(i);
                }
                std::collections::btree_map::Entry::Occupied(earlier) => {
                    let message = format!("[{i}] ({0}): job '{0}' is also [{1}]", def.name, earlier.get());
                    parsed = Err(ErrorBody { code: error::BAD_REQUEST.into(), message });
                }
            }
        }
        read.push((label, parsed));
    }
    read
}

/// The `i`th item of a batch: its label in the results (its name, or `[i]` when it has
/// none) and its definition, or why it has none.
fn batch_item(i: usize, item: serde_json::Value) -> (String, Result<sundial::job::JobDefinition, ErrorBody>) {
    let name = item.get("name").and_then(|n| n.as_str()).map(str::to_owned);
    // Where a field is wrong, as `definition` says it: the index, then the name if any.
    let at = name.as_ref().map_or_else(|| format!("[{i}]"), |name| format!("[{i}] ({name})"));
    let parsed = crate::spec::deserialize_at::<JobSpec, _>(item, &at)
        .map_err(|message| ErrorBody { code: error::BAD_REQUEST.into(), message })
        .and_then(|spec| definition(&spec, &format!("[{i}]")).map_err(|e| error::body_of(&e)));
    (name.unwrap_or_else(|| format!("[{i}]")), parsed)
}

#[derive(Serialize, Deserialize)]
struct Done {
    ok: bool,
}

async fn unschedule<K: Kv>(
    State(state): State<AdminState<K>>,
    Extension(caller): Extension<Caller>,
    path: Result<Path<String>, PathRejection>,
) -> ApiResult<Done> {
    let target = path_target(&path);
    let done = async { Ok(state.scheduler.unschedule_one(&job_name(path)?).await?) }.await;
    state.audited(&caller, AuditAction::Unschedule, &target, done).await?;
    Ok(Json(Done { ok: true }))
}

async fn pause<K: Kv>(
    State(state): State<AdminState<K>>,
    Extension(caller): Extension<Caller>,
    path: Result<Path<String>, PathRejection>,
) -> ApiResult<Done> {
    let target = path_target(&path);
    let done = async { Ok(state.scheduler.pause_one(&job_name(path)?).await?) }.await;
    state.audited(&caller, AuditAction::Pause, &target, done).await?;
    Ok(Json(Done { ok: true }))
}

async fn resume<K: Kv>(
    State(state): State<AdminState<K>>,
    Extension(caller): Extension<Caller>,
    path: Result<Path<String>, PathRejection>,
) -> ApiResult<Done> {
    let target = path_target(&path);
    let done = async { Ok(state.scheduler.resume_one(&job_name(path)?).await?) }.await;
    state.audited(&caller, AuditAction::Resume, &target, done).await?;
    Ok(Json(Done { ok: true }))
}

async fn restore<K: Kv>(
    State(state): State<AdminState<K>>,
    Extension(caller): Extension<Caller>,
    path: Result<Path<String>, PathRejection>,
) -> ApiResult<Done> {
    let target = path_target(&path);
    let done = async { Ok(state.scheduler.restore_one(&job_name(path)?).await?) }.await;
    state.audited(&caller, AuditAction::Restore, &target, done).await?;
    Ok(Json(Done { ok: true }))
}

async fn pause_trigger<K: Kv>(
    State(state): State<AdminState<K>>,
    Extension(caller): Extension<Caller>,
    path: Result<Path<(String, String)>, PathRejection>,
) -> ApiResult<Done> {
    let target = path.as_ref().map(|Path((job, trigger))| format!("{job}/{trigger}")).unwrap_or_default();
    let done = async { Ok(state.scheduler.pause_trigger(&trigger_key(path)?).await?) }.await;
    state.audited(&caller, AuditAction::PauseTrigger, &target, done).await?;
    Ok(Json(Done { ok: true }))
}

async fn resume_trigger<K: Kv>(
    State(state): State<AdminState<K>>,
    Extension(caller): Extension<Caller>,
    path: Result<Path<(String, String)>, PathRejection>,
) -> ApiResult<Done> {
    let target = path.as_ref().map(|Path((job, trigger))| format!("{job}/{trigger}")).unwrap_or_default();
    let done = async { Ok(state.scheduler.resume_trigger(&trigger_key(path)?).await?) }.await;
    state.audited(&caller, AuditAction::ResumeTrigger, &target, done).await?;
    Ok(Json(Done { ok: true }))
}

/// The body of `trigger` and `enqueue`: data overriding the job's.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RunRequest {
    #[serde(default)]
    data: JsonObject,
}

/// A `trigger` or `enqueue` body, its secret references checked.
fn run_request(body: Result<Bytes, BytesRejection>) -> Result<RunRequest, ApiError> {
    let request: RunRequest = json_body(body)?.unwrap_or_default();
    crate::secrets::check(None, &request.data).map_err(|e| ApiError::bad_request(format!("body.data.{e}")))?;
    Ok(request)
}

async fn trigger<K: Kv>(
    State(state): State<AdminState<K>>,
    Extension(caller): Extension<Caller>,
    path: Result<Path<String>, PathRejection>,
    body: Result<Bytes, BytesRejection>,
) -> ApiResult<OutcomeView> {
    let target = path_target(&path);
    // Recorded once the run is started: a run that fails is a change that was made.
    let started = async {
        let name = job_name(path)?;
        let request = run_request(body)?;
        Ok((name, request))
    }
    .await;
    let (name, request) = state.audited_failure(&caller, AuditAction::Trigger, &target, started).await?;
    let outcome =
        state.scheduler.trigger_one(JobTriggerRequest { name, data: request.data }).await.map_err(ApiError::from);
    let outcome = state.audited(&caller, AuditAction::Trigger, &target, outcome).await?;
    Ok(Json(OutcomeView::from(outcome)))
}

#[derive(Serialize, Deserialize)]
struct Enqueued {
    trigger: String,
}

async fn enqueue<K: Kv>(
    State(state): State<AdminState<K>>,
    Extension(caller): Extension<Caller>,
    path: Result<Path<String>, PathRejection>,
    body: Result<Bytes, BytesRejection>,
) -> ApiResult<Enqueued> {
    let target = path_target(&path);
    let enqueued = async {
        let name = job_name(path)?;
        let request = run_request(body)?;
        Ok(state.scheduler.enqueue_one(JobTriggerRequest { name, data: request.data }).await?)
    }
    .await;
    let trigger = state.audited(&caller, AuditAction::Enqueue, &target, enqueued).await?;
    Ok(Json(Enqueued { trigger: trigger.to_string() }))
}

fn run_id(text: &str) -> Result<Uuid, ApiError> {
    Uuid::parse_str(text.trim()).map_err(|_| ApiError::bad_request(format!("'{text}' is not a run id (a UUID)")))
}

async fn cancel_run<K: Kv>(
    State(state): State<AdminState<K>>,
    Extension(caller): Extension<Caller>,
    path: Result<Path<String>, PathRejection>,
) -> ApiResult<Done> {
    let target = path_target(&path);
    let done = async {
        let Path(id) = path.map_err(|e| ApiError::bad_request(e.body_text()))?;
        Ok(state.scheduler.cancel_run(run_id(&id)?).await?)
    }
    .await;
    state.audited(&caller, AuditAction::Cancel, &target, done).await?;
    Ok(Json(Done { ok: true }))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct CancelRequest {
    ids: Vec<String>,
}

async fn cancel_runs<K: Kv>(
    State(state): State<AdminState<K>>,
    Extension(caller): Extension<Caller>,
    body: Result<Bytes, BytesRejection>,
) -> ApiResult<Vec<ItemResult>> {
    let read = async {
        let request: CancelRequest = required(json_body(body)?, "{\"ids\": [run ids]}")?;
        let ids = request.ids.iter().map(|id| run_id(id)).collect::<Result<Vec<_>, _>>()?;
        Ok((request, ids))
    }
    .await;
    let (request, ids) = state.audited_failure(&caller, AuditAction::Cancel, "", read).await?;
    let results = state.scheduler.cancel_runs(&ids).await;
    let results: Vec<ItemResult> = request.ids.into_iter().zip(results).map(|(id, r)| ItemResult::of(id, r)).collect();
    state.audit_items(&caller, AuditAction::Cancel, &results).await;
    Ok(Json(results))
}

async fn list_runs<K: Kv>(
    State(state): State<AdminState<K>>,
    params: Result<Query<Vec<(String, String)>>, QueryRejection>,
) -> ApiResult<Vec<RunView>> {
    let query = run_query(params)?;
    let runs = state.scheduler.runs(&query).await?;
    Ok(Json(runs.into_iter().map(RunView::from).collect()))
}

/// `GET /api/runs/{id}`.
async fn show_run<K: Kv>(
    State(state): State<AdminState<K>>,
    path: Result<Path<String>, PathRejection>,
) -> ApiResult<RunView> {
    let Path(id) = path.map_err(|e| ApiError::bad_request(e.body_text()))?;
    let id = Uuid::parse_str(&id).map_err(|_| ApiError::bad_request(format!("'{id}' is not a run id")))?;
    match state.scheduler.run(id).await? {
        Some(run) => Ok(Json(RunView::from(run))),
        None => Err(SchedulingError::RunNotFound { run_id: id.to_string() }.into()),
    }
}

/// `GET /api/cluster`.
async fn cluster<K: Kv>(State(state): State<AdminState<K>>) -> ApiResult<ClusterView> {
    let s = &state.scheduler;
    let cluster = s.cluster().await?;
    Ok(Json(cluster_view(cluster, s.now(), this_node(s))))
}

/// The answering node as it knows itself.
fn this_node<K: Kv>(s: &JobScheduler<K>) -> ThisNode<'_> {
    ThisNode {
        id: s.node_id(),
        leads: s.is_leader(),
        lifecycle: lifecycle_name(s.lifecycle()),
        running: s.counters().running,
    }
}

/// `GET /api/overview`.
async fn overview<K: Kv>(State(state): State<AdminState<K>>) -> ApiResult<Overview> {
    let s = &state.scheduler;
    let now = s.now();
    let statuses = s.statuses_brief().await?;
    let jobs = jobs_at_a_glance(&statuses, now);
    drop(statuses);
    // Running runs counted whole (from the running index); finished ones over the
    // newest `RUNS_COUNTED`.
    let from = Some(now - chrono::TimeDelta::hours(1));
    let running = JobRunQuery { from, states: [RunState::Running].into(), ..JobRunQuery::default() };
    let finished = [RunState::Succeeded, RunState::Failed, RunState::Canceled, RunState::Lost];
    let ended = JobRunQuery { from, states: finished.into(), ..JobRunQuery::default() };
    let (mut by_state, runs_last_hour_complete) = s.count_runs_by_state_at_most(&ended, RUNS_COUNTED).await?;
    by_state.insert(RunState::Running, s.count_runs(&running).await?);
    let runs_last_hour = std::iter::once(RunState::Running)
        .chain(finished)
        .map(|state| (format!("{state:?}").to_lowercase(), by_state.get(&state).copied().unwrap_or(0)))
        .collect();
    let failures =
        JobRunQuery { states: [RunState::Failed, RunState::Lost].into(), limit: 5, ..JobRunQuery::default() };
    let recent_failures = s.runs(&failures).await?.into_iter().map(RunView::from).collect();
    let cluster = cluster_view(s.cluster().await?, now, this_node(s));
    let probe = state.probe_store().await;
    let store = StoreView {
        kind: state.store_kind.to_owned(),
        reachable: probe.as_ref().map(Result::is_ok),
        error: probe.and_then(Result::err),
    };
    let Json(node) = node_info(State(state.clone())).await;
    Ok(Json(Overview {
        now,
        node,
        jobs,
        runs_last_hour,
        runs_last_hour_complete,
        recent_failures,
        cluster,
        store,
        timeline: state.metrics.timeline(),
    }))
}

#[derive(Serialize, Deserialize)]
struct Count {
    count: u64,
}

async fn count_runs<K: Kv>(
    State(state): State<AdminState<K>>,
    params: Result<Query<Vec<(String, String)>>, QueryRejection>,
) -> ApiResult<Count> {
    let query = run_query(params)?;
    Ok(Json(Count { count: state.scheduler.count_runs(&query).await? }))
}

/// `GET /api/audit`: who changed what, newest first.
async fn list_audit<K: Kv>(
    State(state): State<AdminState<K>>,
    params: Result<Query<Vec<(String, String)>>, QueryRejection>,
) -> ApiResult<Vec<AuditEntry>> {
    let query = audit_query(params)?;
    Ok(Json(state.scheduler.audit(&query).await?))
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use super::*;

    fn body_error<T: DeserializeOwned>(body: &str) -> String {
        match json_body::<T>(Ok(Bytes::copy_from_slice(body.as_bytes()))) {
            Ok(_) => panic!("{body} was accepted"),
            Err(e) => e.body().message.clone(),
        }
    }

    #[test]
    fn body_errors_say_which_field() {
        let message = body_error::<JobSpec>(r#"{"name":"x","type":"log","triggers":[{"schedule":"every 00:00:10"}]}"#);
        assert!(message.starts_with("body.triggers[0]: missing field `name`"), "{message}");
        let message = body_error::<JobSpec>(r#"{"name":"x","type":"log","timeout":"soon"}"#);
        assert!(message.starts_with("body.timeout: "), "{message}");
        let message = body_error::<CancelRequest>(r#"{"ids":["a",7]}"#);
        assert!(message.starts_with("body.ids[1]: invalid type: integer `7`"), "{message}");
        // About the whole body: no path.
        let message = body_error::<JobSpec>("{not json");
        assert!(message.starts_with("body: key must be a string"), "{message}");
        let message = body_error::<JobSpec>("7");
        assert!(message.starts_with("body: invalid type: integer `7`"), "{message}");
        let message = body_error::<CancelRequest>(r#"{"ids":[]} 7"#);
        assert!(message.starts_with("body: trailing characters"), "{message}");
        assert!(json_body::<JobSpec>(Ok(Bytes::from_static(b" \n"))).unwrap().is_none());
    }

    #[test]
    fn batch_items_say_which_item_and_field() {
        let item = serde_json::json!({"name": "x", "type": "log", "triggers": [{"schedule": "every 00:00:10"}]});
        let (label, parsed) = batch_item(3, item);
        assert_eq!(label, "x");
        let message = parsed.err().map(|e| e.message).unwrap_or_default();
        assert!(message.starts_with("[3] (x).triggers[0]: missing field `name`"), "{message}");
        let (label, parsed) = batch_item(0, serde_json::json!({"type": "log"}));
        assert_eq!(label, "[0]");
        let message = parsed.err().map(|e| e.message).unwrap_or_default();
        assert_eq!(message, "[0]: missing field `name`");
        // The definition's own checks name the item the same way.
        let item = serde_json::json!({"name": "x", "type": "log", "triggers": [{"name": "t", "schedule": "cron 0 0 25 * * *"}]});
        let message = batch_item(0, item).1.err().map(|e| e.message).unwrap_or_default();
        assert!(message.contains("[0] (x).triggers[0].schedule: cron hour field"), "{message}");
        let item =
            serde_json::json!({"name": "x", "type": "log", "triggers": [{"name": "t", "schedule": "every 00:00:10"}]});
        assert!(batch_item(0, item).1.is_ok());
        // A job named twice: the later items fail, naming the first.
        let job = |name: &str| serde_json::json!({"name": name, "type": "log"});
        let read = batch_items(vec![job("a"), job("b"), job("a"), job("a")]);
        let verdicts: Vec<Result<(), String>> =
            read.into_iter().map(|(_, parsed)| parsed.map(drop).map_err(|e| e.message)).collect();
        assert_eq!(
            verdicts,
            [Ok(()), Ok(()), Err("[2] (a): job 'a' is also [0]".into()), Err("[3] (a): job 'a' is also [0]".into())]
        );
    }

    #[test]
    fn the_openapi_document_lists_every_route() {
        let doc: serde_json::Value = serde_json::from_str(OPENAPI).unwrap();
        let paths = doc["paths"].as_object().unwrap();
        let expected: BTreeSet<&str> = [
            "/health",
            "/metrics",
            "/api/node",
            "/api/job-types",
            "/api/jobs",
            "/api/jobs/{name}",
            "/api/jobs/{name}/pause",
            "/api/jobs/{name}/resume",
            "/api/jobs/{name}/restore",
            "/api/jobs/{name}/trigger",
            "/api/jobs/{name}/enqueue",
            "/api/jobs/{name}/triggers/{trigger}/pause",
            "/api/jobs/{name}/triggers/{trigger}/resume",
            "/api/runs",
            "/api/runs/count",
            "/api/runs/{id}",
            "/api/overview",
            "/api/cluster",
            "/api/runs/cancel",
            "/api/runs/{id}/cancel",
            "/api/audit",
        ]
        .into_iter()
        .collect();
        let listed: BTreeSet<&str> = paths.keys().map(String::as_str).collect();
        assert_eq!(listed, expected);
    }
}
