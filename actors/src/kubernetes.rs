//! Leader election on a Kubernetes `coordination.k8s.io/v1` Lease (SPEC §11), for nodes
//! (or any singleton work) running in a Kubernetes cluster.
//!
//! The Lease object is the record: `holderIdentity` is the pod name, `resourceVersion`
//! decides races (a write based on an older version is refused with 409, so of two
//! contenders one wins), `leaseTransitions` counts acquisitions and gives the term.
//! Expiry is judged by the observer (DESIGN.md decision 3, as client-go does): a contender
//! takes a lease over only after seeing the object unchanged (same `resourceVersion`) for
//! its `leaseDurationSeconds` on its own monotonic clock; `renewTime` is for display. The
//! holder considers its lease lost one TTL after the start of its last successful renewal.
//!
//! A Kubernetes lease lives outside the job store, so it has no store fence
//! ([`LeaderLease::fence`] is `None`): as DESIGN.md decision 3 says, leadership buys
//! efficiency, and exactly-once comes from the store's own transactions.
//!
//! Lease object names: the engine's resource `scheduling.jobs` maps to
//! [`DEFAULT_LEASE_NAME`] (`sundial-scheduler`); another resource maps to its name with
//! `_` as `-` (Kubernetes names allow no `_`), or to what
//! [`KubernetesLeaderElection::with_lease_name`] says.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, SecondsFormat, Utc};
use parking_lot::Mutex;
use serde::{Deserialize, Serialize};
use sundial::error::SchedulingError;
use sundial::lapse::LapseWatch;
use sundial::leader::{LeaderElection, LeaderLease};
use sundial::name::ResourceName;
use sundial::time::{add_duration, Clock, MonotonicInstant};

/// The Lease object the engine's leader lease (resource `scheduling.jobs`) uses.
pub const DEFAULT_LEASE_NAME: &str = "sundial-scheduler";

/// Where the in-cluster service account's files are.
const SERVICE_ACCOUNT: &str = "/var/run/secrets/kubernetes.io/serviceaccount";

/// How long one API request may take before it counts as the API being unreachable.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);

/// Why the Kubernetes API cannot be set up.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("kubernetes API: {0}")]
pub struct KubernetesConfigError(String);

/// Where the bearer token comes from.
#[derive(Debug, Clone)]
enum Token {
    None,
    Static(String),
    /// Read at every request: projected service account tokens are rotated.
    File(std::path::PathBuf),
}

/// A connection to one namespace of a Kubernetes API server.
#[derive(Debug, Clone)]
pub struct KubernetesApi {
    base: String,
    namespace: String,
    token: Token,
    client: reqwest::Client,
}

/// A failed API call.
#[derive(Debug)]
enum ApiError {
    /// 409: the object changed since it was read, or exists already.
    Conflict,
    /// Anything else: unreachable, refused, unexpected answer.
    Unavailable(String),
}

impl KubernetesApi {
    /// The API server at `base_url` (`http://` or `https://`, e.g. through `kubectl
    /// proxy`), namespace `namespace`, with an optional bearer token.
    ///
    /// # Errors
    /// A URL that is not http(s), or an empty namespace.
    pub fn new(base_url: &str, namespace: &str, token: Option<String>) -> Result<Self, KubernetesConfigError> {
        let client = client_builder().build().map_err(|e| KubernetesConfigError(e.to_string()))?;
        Self::with_client(base_url, namespace, token.map_or(Token::None, Token::Static), client)
    }

    /// The API server of the cluster this pod runs in: `KUBERNETES_SERVICE_HOST` and
    /// `_PORT`, the service account's token (re-read at every request, as it rotates), CA
    /// and namespace.
    ///
    /// # Errors
    /// Not in a pod (the variables or files are missing), or an unreadable CA.
    pub fn in_cluster() -> Result<Self, KubernetesConfigError> {
        let env = |name: &str| {
            std::env::var(name).map_err(|_| KubernetesConfigError(format!("{name} is not set: not running in a pod")))
        };
        let (host, port) = (env("KUBERNETES_SERVICE_HOST")?, env("KUBERNETES_SERVICE_PORT")?);
        Self::from_service_account(&host, &port, std::path::Path::new(SERVICE_ACCOUNT))
    }

    /// The API server at `host:port` with the service account files in `dir`.
    fn from_service_account(host: &str, port: &str, dir: &std::path::Path) -> Result<Self, KubernetesConfigError> {
        let read = |file: &str| {
            let path = dir.join(file);
            std::fs::read(&path).map_err(|e| KubernetesConfigError(format!("cannot read {}: {e}", path.display())))
        };
        let namespace = String::from_utf8_lossy(&read("namespace")?).trim().to_owned();
        let cas = reqwest::Certificate::from_pem_bundle(&read("ca.crt")?)
            .map_err(|e| KubernetesConfigError(format!("the service account CA does not parse: {e}")))?;
        if cas.is_empty() {
            return Err(KubernetesConfigError("the service account CA (ca.crt) holds no certificate".to_owned()));
        }
        let client = client_builder().tls_certs_only(cas).build().map_err(|e| KubernetesConfigError(e.to_string()))?;
        let host = if host.contains(':') { format!("[{host}]") } else { host.to_owned() };
        let token = Token::File(dir.join("token"));
        Self::with_client(&format!("https://{host}:{port}"), &namespace, token, client)
    }

    fn with_client(
        base_url: &str,
        namespace: &str,
        token: Token,
        client: reqwest::Client,
    ) -> Result<Self, KubernetesConfigError> {
        if !(base_url.starts_with("http://") || base_url.starts_with("https://")) {
            return Err(KubernetesConfigError(format!("'{base_url}' is not an http(s) URL")));
        }
        if namespace.is_empty() {
            return Err(KubernetesConfigError("the namespace is empty".to_owned()));
        }
        Ok(Self { base: base_url.trim_end_matches('/').to_owned(), namespace: namespace.to_owned(), token, client })
    }

    fn leases_url(&self) -> String {
        format!("{}/apis/coordination.k8s.io/v1/namespaces/{}/leases", self.base, self.namespace)
    }

    fn request(&self, method: reqwest::Method, url: String) -> Result<reqwest::RequestBuilder, ApiError> {
        let request = self.client.request(method, url);
        let token = match &self.token {
            Token::None => return Ok(request),
            Token::Static(token) => token.clone(),
            Token::File(path) => std::fs::read_to_string(path)
                .map_err(|e| ApiError::Unavailable(format!("cannot read the token {}: {e}", path.display())))?
                .trim()
                .to_owned(),
        };
        Ok(request.bearer_auth(token))
    }

    async fn send(&self, request: reqwest::RequestBuilder) -> Result<Option<Lease>, ApiError> {
        let response = request.send().await.map_err(|e| ApiError::Unavailable(e.to_string()))?;
        match response.status().as_u16() {
            200 | 201 => response.json().await.map(Some).map_err(|e| ApiError::Unavailable(e.to_string())),
            404 => Ok(None),
            409 => Err(ApiError::Conflict),
            status => {
                let body = response.text().await.unwrap_or_default();
                Err(ApiError::Unavailable(format!("HTTP {status}: {}", body.chars().take(300).collect::<String>())))
            }
        }
    }

    /// The Lease `name`, if it exists.
    async fn get(&self, name: &str) -> Result<Option<Lease>, ApiError> {
        self.send(self.request(reqwest::Method::GET, format!("{}/{name}", self.leases_url()))?).await
    }

    /// Creates `lease`; 409 when it exists.
    async fn create(&self, lease: &Lease) -> Result<Lease, ApiError> {
        let request = self.request(reqwest::Method::POST, self.leases_url())?.json(lease);
        self.send(request).await?.ok_or_else(|| ApiError::Unavailable("the namespace does not exist".to_owned()))
    }

    /// Replaces `lease` if its `resourceVersion` is still current; 409 otherwise.
    async fn replace(&self, lease: &Lease) -> Result<Lease, ApiError> {
        let url = format!("{}/{}", self.leases_url(), lease.metadata.name);
        let request = self.request(reqwest::Method::PUT, url)?.json(lease);
        self.send(request).await?.ok_or(ApiError::Conflict)
    }
}

fn client_builder() -> reqwest::ClientBuilder {
    // reqwest is built without a default crypto provider (see `kinds::http`).
    let _ = rustls::crypto::ring::default_provider().install_default();
    reqwest::Client::builder().timeout(REQUEST_TIMEOUT).user_agent(concat!("sundial/", env!("CARGO_PKG_VERSION")))
}

/// A `coordination.k8s.io/v1` Lease, the fields this election reads and writes (others
/// are ignored on read and left out on write).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Lease {
    /// `coordination.k8s.io/v1`.
    #[serde(default)]
    pub api_version: String,
    /// `Lease`.
    #[serde(default)]
    pub kind: String,
    /// Name and version.
    pub metadata: LeaseMetadata,
    /// Holder and times.
    #[serde(default)]
    pub spec: LeaseSpec,
}

/// A Lease's object metadata.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct LeaseMetadata {
    /// The object name.
    pub name: String,
    /// Its namespace.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    /// The version a replacement must be based on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resource_version: Option<String>,
}

/// A Lease's spec.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct LeaseSpec {
    /// Who holds it; empty or absent when released.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub holder_identity: Option<String>,
    /// How long observers wait, after its last change, before taking it over.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lease_duration_seconds: Option<i64>,
    /// When the holder acquired it (MicroTime, for display).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub acquire_time: Option<String>,
    /// When the holder last renewed it (MicroTime, for display).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub renew_time: Option<String>,
    /// Acquisitions so far (this election counts every one: the term is this plus one).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lease_transitions: Option<i64>,
}

impl Lease {
    fn holder(&self) -> Option<&str> {
        self.spec.holder_identity.as_deref().filter(|h| !h.is_empty())
    }

    fn transitions(&self) -> u64 {
        u64::try_from(self.spec.lease_transitions.unwrap_or(0)).unwrap_or(0)
    }

    fn duration(&self) -> Duration {
        Duration::from_secs(u64::try_from(self.spec.lease_duration_seconds.unwrap_or(0)).unwrap_or(0))
    }
}

fn micro_time(t: DateTime<Utc>) -> String {
    t.to_rfc3339_opts(SecondsFormat::Micros, true)
}

/// Whole seconds for `leaseDurationSeconds`, rounded up, at least one.
fn whole_seconds(ttl: Duration) -> i64 {
    i64::try_from(ttl.as_secs() + u64::from(ttl.subsec_nanos() > 0)).unwrap_or(i64::MAX).max(1)
}

fn unavailable(reason: String) -> SchedulingError {
    SchedulingError::LeaderStoreUnavailable { reason }
}

fn held(resource: &str) -> SchedulingError {
    SchedulingError::LeaseHeld { resource: resource.to_owned() }
}

#[derive(Debug)]
struct Inner {
    api: KubernetesApi,
    clock: Arc<dyn Clock>,
    identity: String,
    names: BTreeMap<String, String>,
    /// Leases held by others, by resource, told apart by `resourceVersion`.
    watch: Mutex<LapseWatch<String, Option<String>>>,
    /// Resources this process holds (leases are not re-entrant).
    held: Mutex<BTreeSet<String>>,
}

/// Leader election on Kubernetes Leases (see the module docs). Cheap to clone.
#[derive(Debug, Clone)]
pub struct KubernetesLeaderElection {
    inner: Arc<Inner>,
}

impl KubernetesLeaderElection {
    /// Elections through `api` for the pod `identity` (its name: unique in the namespace),
    /// timed on `clock`.
    pub fn new(api: KubernetesApi, clock: Arc<dyn Clock>, identity: impl Into<String>) -> Self {
        let names = BTreeMap::from([("scheduling.jobs".to_owned(), DEFAULT_LEASE_NAME.to_owned())]);
        Self {
            inner: Arc::new(Inner {
                api,
                clock,
                identity: identity.into(),
                names,
                watch: Mutex::new(LapseWatch::new()),
                held: Mutex::new(BTreeSet::new()),
            }),
        }
    }

    /// Uses the Lease object `name` for `resource` (a new election: leases of this one are
    /// not shared with it).
    #[must_use]
    pub fn with_lease_name(self, resource: &ResourceName, name: impl Into<String>) -> Self {
        let mut names = self.inner.names.clone();
        names.insert(resource.to_string(), name.into());
        Self {
            inner: Arc::new(Inner {
                api: self.inner.api.clone(),
                clock: self.inner.clock.clone(),
                identity: self.inner.identity.clone(),
                names,
                watch: Mutex::new(LapseWatch::new()),
                held: Mutex::new(BTreeSet::new()),
            }),
        }
    }

    /// The Lease object name for `resource`.
    pub fn lease_name(&self, resource: &str) -> String {
        match self.inner.names.get(resource) {
            Some(name) => name.clone(),
            None => {
                let mut name = resource.replace('_', "-");
                // Kubernetes names end with a letter or digit; ours may end with - or .
                if !name.ends_with(|c: char| c.is_ascii_alphanumeric()) {
                    name.push('0');
                }
                name
            }
        }
    }

    fn lease_record(&self, name: &str, ttl: Duration, now: DateTime<Utc>, transitions: u64) -> Lease {
        Lease {
            api_version: "coordination.k8s.io/v1".to_owned(),
            kind: "Lease".to_owned(),
            metadata: LeaseMetadata { name: name.to_owned(), ..LeaseMetadata::default() },
            spec: LeaseSpec {
                holder_identity: Some(self.inner.identity.clone()),
                lease_duration_seconds: Some(whole_seconds(ttl)),
                acquire_time: Some(micro_time(now)),
                renew_time: Some(micro_time(now)),
                lease_transitions: Some(i64::try_from(transitions).unwrap_or(i64::MAX)),
            },
        }
    }
}

impl KubernetesLeaderElection {
    /// The Lease object `name` as it stands, if this election holds it under `term`.
    async fn ours(&self, name: &str, term: u64) -> Result<Option<Lease>, ApiError> {
        let current = self.inner.api.get(name).await?;
        Ok(current.filter(|l| l.holder() == Some(self.inner.identity.as_str()) && l.transitions() + 1 == term))
    }

    /// Gives up the Lease object `name` held under `term`; `Ok` also when it is no longer
    /// held. On failure, says whether the API server may have applied the change all the
    /// same (the write was sent and its answer lost).
    async fn give_up(&self, name: &str, term: u64) -> Result<(), (String, bool)> {
        let mut lease = match self.ours(name, term).await {
            Ok(Some(lease)) => lease,
            Ok(None) | Err(ApiError::Conflict) => return Ok(()),
            Err(ApiError::Unavailable(reason)) => return Err((reason, false)),
        };
        lease.spec.holder_identity = None;
        match self.inner.api.replace(&lease).await {
            // A conflict: it changed since, so it is no longer ours.
            Ok(_) | Err(ApiError::Conflict) => Ok(()),
            Err(ApiError::Unavailable(reason)) => Err((reason, true)),
        }
    }
}

impl LeaderElection for KubernetesLeaderElection {
    type Lease = KubernetesLease;

    async fn try_acquire(&self, resource: &ResourceName, ttl: Duration) -> Result<KubernetesLease, SchedulingError> {
        let inner = &self.inner;
        let resource = resource.as_str();
        if inner.held.lock().contains(resource) {
            return Err(held(resource));
        }
        let name = self.lease_name(resource);
        let started = inner.clock.monotonic();
        let wall = inner.clock.now();
        let current = inner.api.get(&name).await;
        // The Lease seen may have been written after `started`, while the read was on its
        // way: its timing starts now, never earlier (its lapse is judged at `started`).
        let seen = inner.clock.monotonic();
        let written = match current {
            Err(ApiError::Unavailable(reason)) => return Err(unavailable(reason)),
            Err(ApiError::Conflict) => return Err(held(resource)),
            Ok(None) => inner.api.create(&self.lease_record(&name, ttl, wall, 0)).await,
            Ok(Some(current)) => {
                let version = &current.metadata.resource_version;
                let free = {
                    let mut watch = inner.watch.lock();
                    let free = match current.holder() {
                        None => true,
                        // This pod's name: an earlier process of this pod held it.
                        Some(holder) if holder == inner.identity => true,
                        Some(_) => watch.lapsed(resource, version, current.duration(), started),
                    };
                    if !free {
                        watch.observe(resource.to_owned(), version.clone(), current.duration(), seen);
                    }
                    free
                };
                if !free {
                    return Err(held(resource));
                }
                let mut next = self.lease_record(&name, ttl, wall, current.transitions() + 1);
                next.metadata.resource_version.clone_from(&current.metadata.resource_version);
                inner.api.replace(&next).await
            }
        };
        let lease = match written {
            Ok(lease) => lease,
            // Another contender wrote first.
            Err(ApiError::Conflict) => return Err(held(resource)),
            Err(ApiError::Unavailable(reason)) => return Err(unavailable(reason)),
        };
        inner.watch.lock().forget(resource);
        inner.held.lock().insert(resource.to_owned());
        Ok(KubernetesLease {
            election: self.clone(),
            resource: resource.to_owned(),
            name,
            term: lease.transitions() + 1,
            ttl,
            expires: started.saturating_add(ttl),
            expires_wall: add_duration(wall, ttl),
            released: false,
        })
    }
}

/// A lease held through [`KubernetesLeaderElection`]. Dropped unreleased inside a tokio
/// runtime, it releases itself in the background; elsewhere it lapses after its TTL.
#[derive(Debug)]
pub struct KubernetesLease {
    election: KubernetesLeaderElection,
    resource: String,
    name: String,
    term: u64,
    ttl: Duration,
    expires: MonotonicInstant,
    expires_wall: DateTime<Utc>,
    released: bool,
}

impl KubernetesLease {
    fn expired(&self) -> bool {
        self.election.inner.clock.monotonic() >= self.expires
    }

    fn lost(&mut self) -> SchedulingError {
        self.released = true;
        self.election.inner.held.lock().remove(&self.resource);
        held(&self.resource)
    }
}

impl LeaderLease for KubernetesLease {
    fn holder(&self) -> &str {
        &self.election.inner.identity
    }

    fn term(&self) -> u64 {
        self.term
    }

    fn expires_at(&self) -> DateTime<Utc> {
        self.expires_wall
    }

    fn is_held(&self) -> bool {
        !self.released && !self.expired()
    }

    async fn renew(&mut self) -> Result<(), SchedulingError> {
        if self.released || self.expired() {
            return Err(self.lost());
        }
        let inner = self.election.inner.clone();
        let started = inner.clock.monotonic();
        let wall = inner.clock.now();
        let mut lease = match self.election.ours(&self.name, self.term).await {
            Ok(Some(lease)) => lease,
            Ok(None) | Err(ApiError::Conflict) => return Err(self.lost()),
            Err(ApiError::Unavailable(reason)) => return Err(unavailable(reason)),
        };
        lease.spec.renew_time = Some(micro_time(wall));
        lease.spec.lease_duration_seconds = Some(whole_seconds(self.ttl));
        match inner.api.replace(&lease).await {
            Ok(_) => {
                self.expires = started.saturating_add(self.ttl);
                self.expires_wall = add_duration(wall, self.ttl);
                Ok(())
            }
            Err(ApiError::Conflict) => Err(self.lost()),
            Err(ApiError::Unavailable(reason)) => Err(unavailable(reason)),
        }
    }

    async fn release(&mut self) -> Result<(), SchedulingError> {
        if self.released {
            return Ok(());
        }
        if let Err((reason, maybe_released)) = self.election.give_up(&self.name, self.term).await {
            if maybe_released {
                // Another holder may have it already: holding on could overlap it.
                self.lost();
            }
            return Err(unavailable(reason));
        }
        self.lost();
        Ok(())
    }
}

impl Drop for KubernetesLease {
    fn drop(&mut self) {
        if self.released || self.expired() {
            self.election.inner.held.lock().remove(&self.resource);
            return;
        }
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            self.election.inner.held.lock().remove(&self.resource);
            return;
        };
        let (election, name, term, resource) =
            (self.election.clone(), self.name.clone(), self.term, self.resource.clone());
        runtime.spawn(async move {
            if let Err((reason, _)) = election.give_up(&name, term).await {
                tracing::warn!(%reason, lease = %name, "could not release a dropped lease; it lapses after its TTL");
            }
            election.inner.held.lock().remove(&resource);
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A self-signed certificate, standing in for a cluster's CA.
    const CA: &str = "-----BEGIN CERTIFICATE-----\nMIIBkTCCATegAwIBAgIUD5/RIivcVRv190ELv1Y6fy9Z9KEwCgYIKoZIzj0EAwIw\nHTEbMBkGA1UEAwwSdGVzdC1rdWJlcm5ldGVzLWNhMCAXDTI2MTIwMTE3MjAwMloY\nDzIxMjYxMTA3MTcyMDAyWjAdMRswGQYDVQQDDBJ0ZXN0LWt1YmVybmV0ZXMtY2Ew\nWTATBgcqhkjOPQIBBggqhkjOPQMBBwNCAASwY7zZK18o3PkfaVOH3+zC94ToP/sn\nPLB+ZkftzoS1vgEy1QeSg9wJhKKieyd1bpACEu4hlp55W2gjgpQrUBEUo1MwUTAd\nBgNVHQ4EFgQU3pJNIHx+Od2GrIYxhz6h32y1HK0wHwYDVR0jBBgwFoAU3pJNIHx+\nOd2GrIYxhz6h32y1HK0wDwYDVR0TAQH/BAUwAwEB/zAKBggqhkjOPQQDAgNIADBF\nAiAvv3FtHETRlVUVpRQ/9JlgEYLuik7tsSVti0xssjCYngIhAPF79dT1EF1u2vFc\n7P6/fkMQ+wwiqE94lAe0hmOsqzhc\n-----END CERTIFICATE-----\n";

    /// A service account directory holding `files`, removed when dropped.
    struct ServiceAccount(std::path::PathBuf);

    impl std::ops::Deref for ServiceAccount {
        type Target = std::path::Path;
        fn deref(&self) -> &std::path::Path {
            &self.0
        }
    }

    impl Drop for ServiceAccount {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    fn service_account(label: &str, files: &[(&str, &str)]) -> ServiceAccount {
        let dir = std::env::temp_dir().join(format!("sundial-sa-{}-{label}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        for (name, text) in files {
            std::fs::write(dir.join(name), text).unwrap();
        }
        ServiceAccount(dir)
    }

    #[test]
    fn a_pods_service_account_gives_the_api_its_namespace_and_token() {
        let dir = service_account("good", &[("namespace", "jobs\n"), ("token", "secret\n"), ("ca.crt", CA)]);
        let api = KubernetesApi::from_service_account("10.0.0.1", "443", &dir).unwrap();
        assert_eq!(api.leases_url(), "https://10.0.0.1:443/apis/coordination.k8s.io/v1/namespaces/jobs/leases");
        let request = api.request(reqwest::Method::GET, api.leases_url()).unwrap().build().unwrap();
        assert_eq!(request.headers()["authorization"], "Bearer secret", "the token file, trimmed, read per request");
        let v6 = KubernetesApi::from_service_account("fd00::1", "6443", &dir).unwrap();
        assert!(v6.leases_url().starts_with("https://[fd00::1]:6443/"), "{}", v6.leases_url());
        std::fs::remove_file(dir.join("token")).unwrap();
        assert!(matches!(api.request(reqwest::Method::GET, api.leases_url()), Err(ApiError::Unavailable(_))));
    }

    #[test]
    fn a_missing_or_broken_service_account_is_a_clear_error() {
        let missing = service_account("missing", &[("token", "secret")]);
        let error = KubernetesApi::from_service_account("10.0.0.1", "443", &missing).unwrap_err();
        assert!(error.to_string().contains("namespace"), "{error}");
        let bad_ca =
            service_account("bad-ca", &[("namespace", "jobs"), ("token", "secret"), ("ca.crt", "not a certificate")]);
        let error = KubernetesApi::from_service_account("10.0.0.1", "443", &bad_ca).unwrap_err();
        assert!(error.to_string().contains("CA"), "{error}");
    }
}
