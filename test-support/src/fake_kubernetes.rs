//! A fake Kubernetes API server for tests: Lease objects kept the way the API server keeps
//! them (a create of an existing name and a replacement based on an older
//! `resourceVersion` are refused with 409, every write bumps the version, a request without
//! the bearer token is 401, errors answered with a `Status` object), served over real
//! HTTP by axum.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use parking_lot::Mutex;
use sundial_actors::kubernetes::Lease;

/// The bearer token the fake accepts.
pub const TOKEN: &str = "test-token";

/// The fake's state.
#[derive(Default)]
pub struct Fake {
    /// The Lease objects, by namespace and name.
    pub leases: Mutex<BTreeMap<(String, String), Lease>>,
    version: AtomicU64,
    /// Answer 503 to everything.
    pub down: AtomicBool,
    /// Hold the next read before serving it: say so on the first sender, serve it once
    /// the second one says so (a read on its way while others write).
    pub hold_next_read: Mutex<Option<(tokio::sync::oneshot::Sender<()>, tokio::sync::oneshot::Receiver<()>)>>,
    /// Trouble drawn per request, when set.
    pub trouble: Mutex<Option<Trouble>>,
}

/// Trouble for each request, drawn from a seed: time passing while it is on its way
/// (before it is served and after), a refusal (503, nothing done), and for writes an
/// answer lost after the write was applied (503, yet done).
pub struct Trouble {
    /// Draws the trouble.
    pub entropy: sundial::entropy::Entropy,
    /// The clock a request's time on its way passes on.
    pub clock: sundial::time::ManualClock,
    /// The most time a request spends on its way, each way.
    pub latency_max: std::time::Duration,
    /// Per thousand requests.
    pub refused: u64,
    /// Per thousand writes.
    pub answer_lost: u64,
}

/// What trouble one request meets.
#[derive(Default)]
struct Drawn {
    /// Time passing, and turns given to other tasks (whole requests of others can come and
    /// go meanwhile), before the request is served and after.
    before: (std::time::Duration, u64),
    after: (std::time::Duration, u64),
    refused: bool,
    answer_lost: bool,
}

impl Fake {
    fn draw(&self) -> Drawn {
        let mut trouble = self.trouble.lock();
        let Some(t) = trouble.as_mut() else { return Drawn::default() };
        let max = t.latency_max.as_micros() as u64 + 1;
        Drawn {
            before: (std::time::Duration::from_micros(t.entropy.below(max)), t.entropy.below(40)),
            after: (std::time::Duration::from_micros(t.entropy.below(max)), t.entropy.below(40)),
            refused: t.entropy.below(1000) < t.refused,
            answer_lost: t.entropy.below(1000) < t.answer_lost,
        }
    }

    /// Time passes, and other tasks run meanwhile.
    async fn on_its_way(&self, (wait, turns): (std::time::Duration, u64)) {
        if let Some(t) = self.trouble.lock().as_ref() {
            t.clock.advance(wait);
        }
        for _ in 0..=turns {
            tokio::task::yield_now().await;
        }
    }
}

/// The fake, shared by its handlers and the test.
pub type Shared = Arc<Fake>;

/// A refusal as the API server words it: a `meta/v1` `Status` object.
struct Refusal(StatusCode);

impl From<StatusCode> for Refusal {
    fn from(code: StatusCode) -> Self {
        Self(code)
    }
}

impl IntoResponse for Refusal {
    fn into_response(self) -> Response {
        let reason = match self.0 {
            StatusCode::CONFLICT => "Conflict",
            StatusCode::NOT_FOUND => "NotFound",
            StatusCode::UNAUTHORIZED => "Unauthorized",
            StatusCode::SERVICE_UNAVAILABLE => "ServiceUnavailable",
            StatusCode::BAD_REQUEST => "BadRequest",
            _ => "InternalError",
        };
        let status = serde_json::json!({
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": format!("the fake API server refuses: {reason}"),
            "reason": reason,
            "code": self.0.as_u16(),
        });
        (self.0, Json(status)).into_response()
    }
}

fn refused(headers: &HeaderMap, fake: &Fake) -> Option<StatusCode> {
    if fake.down.load(Ordering::SeqCst) {
        return Some(StatusCode::SERVICE_UNAVAILABLE);
    }
    let authorized = headers.get("authorization").and_then(|v| v.to_str().ok()) == Some(&format!("Bearer {TOKEN}"));
    (!authorized).then_some(StatusCode::UNAUTHORIZED)
}

async fn read(
    State(fake): State<Shared>,
    headers: HeaderMap,
    Path((ns, name)): Path<(String, String)>,
) -> Result<Json<Lease>, Refusal> {
    if let Some(status) = refused(&headers, &fake) {
        return Err(status.into());
    }
    let hold = fake.hold_next_read.lock().take();
    if let Some((held, serve)) = hold {
        let _ = held.send(());
        let _ = serve.await;
    }
    let drawn = fake.draw();
    fake.on_its_way(drawn.before).await;
    if drawn.refused {
        return Err(StatusCode::SERVICE_UNAVAILABLE.into());
    }
    let lease = fake.leases.lock().get(&(ns, name)).cloned();
    fake.on_its_way(drawn.after).await;
    lease.map(Json).ok_or(StatusCode::NOT_FOUND.into())
}

fn stored(fake: &Fake, ns: &str, mut lease: Lease) -> Lease {
    lease.metadata.namespace = Some(ns.to_owned());
    lease.metadata.resource_version = Some(fake.version.fetch_add(1, Ordering::SeqCst).to_string());
    lease
}

/// A write, with the trouble drawn for it: refused before `apply`, or its answer lost
/// after.
async fn write(
    fake: &Fake,
    apply: impl FnOnce(&mut BTreeMap<(String, String), Lease>) -> Result<Lease, StatusCode>,
) -> Result<Lease, StatusCode> {
    let drawn = fake.draw();
    fake.on_its_way(drawn.before).await;
    if drawn.refused {
        return Err(StatusCode::SERVICE_UNAVAILABLE);
    }
    let written = apply(&mut fake.leases.lock())?;
    fake.on_its_way(drawn.after).await;
    if drawn.answer_lost {
        return Err(StatusCode::SERVICE_UNAVAILABLE);
    }
    Ok(written)
}

async fn create(
    State(fake): State<Shared>,
    headers: HeaderMap,
    Path(ns): Path<String>,
    Json(lease): Json<Lease>,
) -> Result<(StatusCode, Json<Lease>), Refusal> {
    if let Some(status) = refused(&headers, &fake) {
        return Err(status.into());
    }
    let created = write(&fake, |leases| {
        let key = (ns.clone(), lease.metadata.name.clone().unwrap_or_default());
        if leases.contains_key(&key) {
            return Err(StatusCode::CONFLICT);
        }
        let lease = stored(&fake, &ns, lease);
        leases.insert(key, lease.clone());
        Ok(lease)
    })
    .await
    .map_err(Refusal)?;
    Ok((StatusCode::CREATED, Json(created)))
}

async fn replace(
    State(fake): State<Shared>,
    headers: HeaderMap,
    Path((ns, name)): Path<(String, String)>,
    Json(lease): Json<Lease>,
) -> Result<Json<Lease>, Refusal> {
    if let Some(status) = refused(&headers, &fake) {
        return Err(status.into());
    }
    let replaced = write(&fake, |leases| {
        if lease.metadata.name.as_ref() != Some(&name) {
            return Err(StatusCode::BAD_REQUEST);
        }
        let key = (ns.clone(), name);
        let current = leases.get(&key).ok_or(StatusCode::NOT_FOUND)?;
        if current.metadata.resource_version != lease.metadata.resource_version {
            return Err(StatusCode::CONFLICT);
        }
        let lease = stored(&fake, &ns, lease);
        leases.insert(key, lease.clone());
        Ok(lease)
    })
    .await
    .map_err(Refusal)?;
    Ok(Json(replaced))
}

fn app(fake: Shared) -> Router {
    Router::new()
        .route("/apis/coordination.k8s.io/v1/namespaces/{ns}/leases", post(create))
        .route("/apis/coordination.k8s.io/v1/namespaces/{ns}/leases/{name}", get(read).put(replace))
        .with_state(fake)
}

/// A fake API server over HTTP; its base URL.
pub async fn start() -> (Shared, String) {
    let fake = Shared::default();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let app = app(fake.clone());
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (fake, base)
}

/// A fake API server over HTTPS with the certificate `cert` (for `127.0.0.1`), as a
/// cluster's API server is reached from a pod; its base URL.
///
/// # Panics
/// When the certificate or key does not load.
pub async fn start_tls(cert: &crate::tls::ServerCert) -> (Shared, String) {
    use sundial_actors::admin::tls::{CurrentCertificate, TlsFiles, TlsListener};
    let fake = Shared::default();
    let files = TlsFiles { cert: cert.cert.clone(), key: cert.key.clone() };
    let current = CurrentCertificate::new(files.load().unwrap());
    let tcp = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("https://{}", tcp.local_addr().unwrap());
    let listener = TlsListener::new(tcp, current).unwrap();
    let app = app(fake.clone());
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (fake, base)
}

impl Fake {
    /// The holder of Lease `name` in namespace `ns`, if any.
    pub fn holder(&self, ns: &str, name: &str) -> Option<String> {
        self.leases.lock().get(&(ns.to_owned(), name.to_owned())).and_then(|l| l.spec.as_ref()?.holder_identity.clone())
    }
}
