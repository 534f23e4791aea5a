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
//! The API server is reached through `kube`'s client ([`KubernetesApi`]): inside a pod
//! with the service account's namespace, CA and (rotating) token; elsewhere with a URL
//! and token, or any `kube::Config`. Each request has a 10 s timeout and no retry of the
//! client's own (DESIGN.md decision 16).
//!
//! Lease object names: the engine's resource `scheduling.jobs` maps to
//! [`DEFAULT_LEASE_NAME`] (`sundial-scheduler`); another resource maps to its name with
//! `_` as `-` (Kubernetes names allow no `_`), or to what
//! [`KubernetesLeaderElection::with_lease_name`] says.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use k8s_openapi::api::coordination::v1::LeaseSpec;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use kube::api::PostParams;
use parking_lot::Mutex;
use sundial::error::SchedulingError;
use sundial::lapse::LapseWatch;
use sundial::leader::{LeaderElection, LeaderLease};
use sundial::name::ResourceName;
use sundial::time::{add_duration, Clock, MonotonicInstant};

/// The `coordination.k8s.io/v1` Lease object, as `k8s-openapi` defines it (the oldest
/// Kubernetes version it supports: the Lease API has been stable since 1.14).
pub use k8s_openapi::api::coordination::v1::Lease;

/// The Lease object the engine's leader lease (resource `scheduling.jobs`) uses.
pub const DEFAULT_LEASE_NAME: &str = "sundial-scheduler";

/// How long connecting, sending a request or waiting for its answer may take before the
/// API counts as unreachable.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);

/// Why the Kubernetes API cannot be set up.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("kubernetes API: {0}")]
pub struct KubernetesConfigError(String);

/// The Lease objects of one namespace, through `kube`'s client.
#[derive(Debug, Clone)]
pub struct KubernetesApi {
    leases: kube::Api<Lease>,
}

/// A failed API call.
#[derive(Debug)]
enum ApiError {
    /// 409: the object changed since it was read, or exists already.
    Conflict,
    /// 404 on a write: the object or its namespace is gone.
    NotFound,
    /// Anything else: unreachable, refused, unexpected answer.
    Unavailable(String),
}

impl From<kube::Error> for ApiError {
    fn from(error: kube::Error) -> Self {
        match error {
            kube::Error::Api(status) if status.code == 409 => Self::Conflict,
            kube::Error::Api(status) if status.is_not_found() => Self::NotFound,
            kube::Error::Api(status) => {
                let message = status.message.chars().take(300).collect::<String>();
                Self::Unavailable(format!("HTTP {} {}: {message}", status.code, status.reason))
            }
            // The causes too: "client error (Connect)" alone hides a refused certificate.
            other => {
                let mut reason = other.to_string();
                let mut cause = std::error::Error::source(&other);
                while let Some(error) = cause {
                    reason.push_str(": ");
                    reason.push_str(&error.to_string());
                    cause = error.source();
                }
                Self::Unavailable(reason)
            }
        }
    }
}

impl KubernetesApi {
    /// The API server at `base_url` (`http://` or `https://`, e.g. through `kubectl
    /// proxy`), namespace `namespace`, with an optional bearer token. Needs a tokio runtime
    /// (the client runs a task of its own).
    ///
    /// # Errors
    /// A URL that is not http(s), an empty namespace, or no tokio runtime.
    pub fn new(base_url: &str, namespace: &str, token: Option<String>) -> Result<Self, KubernetesConfigError> {
        let mut config = kube::Config::new(Self::check(base_url, namespace)?);
        config.default_namespace = namespace.to_owned();
        config.auth_info.token = token.map(Into::into);
        Self::from_config(config)
    }

    /// Checks what [`KubernetesApi::new`] takes, without connecting: `base_url` is an
    /// http(s) URL, `namespace` is not empty.
    ///
    /// # Errors
    /// As [`KubernetesApi::new`], but for the runtime.
    pub fn check(base_url: &str, namespace: &str) -> Result<http::Uri, KubernetesConfigError> {
        let uri = base_url
            .parse::<http::Uri>()
            .ok()
            .filter(|uri| matches!(uri.scheme_str(), Some("http" | "https")) && uri.host().is_some())
            .ok_or_else(|| KubernetesConfigError(format!("'{base_url}' is not an http(s) URL")))?;
        if namespace.is_empty() {
            return Err(KubernetesConfigError("the namespace is empty".to_owned()));
        }
        Ok(uri)
    }

    /// The API server of the cluster this pod runs in, as `kube` finds it
    /// (`kube::Config::incluster`): `KUBERNETES_SERVICE_HOST` and `_PORT`, the service
    /// account's namespace, CA and token (both re-read as they rotate). Needs a tokio
    /// runtime.
    ///
    /// # Errors
    /// Not in a pod (the variables or files are missing), an unreadable CA, or no tokio
    /// runtime.
    pub fn in_cluster() -> Result<Self, KubernetesConfigError> {
        let config = kube::Config::incluster()
            .map_err(|e| KubernetesConfigError(format!("not running in a pod with a service account? {e}")))?;
        Self::from_config(config)
    }

    /// The API server and namespace (`default_namespace`) a `kube` configuration names,
    /// e.g. from a kubeconfig file (`kube::Config::infer`). Requests get this module's
    /// timeouts and no retries of `kube`'s own: the election retries at its next turn,
    /// after judging what it saw. Needs a tokio runtime.
    ///
    /// # Errors
    /// A TLS setup `kube` refuses, an empty namespace, or no tokio runtime.
    pub fn from_config(mut config: kube::Config) -> Result<Self, KubernetesConfigError> {
        if config.default_namespace.is_empty() {
            return Err(KubernetesConfigError("the namespace is empty".to_owned()));
        }
        if tokio::runtime::Handle::try_current().is_err() {
            return Err(KubernetesConfigError("the client needs a tokio runtime".to_owned()));
        }
        config.connect_timeout = Some(REQUEST_TIMEOUT);
        config.write_timeout = Some(REQUEST_TIMEOUT);
        config.read_timeout = Some(REQUEST_TIMEOUT);
        // The read timeout counts from the request, not from when its pooled connection
        // went idle.
        config.reset_reader_on_write = true;
        config.default_retry = false;
        // rustls is built without a default crypto provider (see `kinds::http`).
        let _ = rustls::crypto::ring::default_provider().install_default();
        let namespace = config.default_namespace.clone();
        let client = kube::Client::try_from(config).map_err(|e| KubernetesConfigError(e.to_string()))?;
        Ok(Self { leases: kube::Api::namespaced(client, &namespace) })
    }

    /// The Lease `name`, if it exists.
    async fn get(&self, name: &str) -> Result<Option<Lease>, ApiError> {
        self.leases.get_opt(name).await.map_err(ApiError::from)
    }

    /// Creates `lease`; 409 when it exists.
    async fn create(&self, lease: &Lease) -> Result<Lease, ApiError> {
        match self.leases.create(&PostParams::default(), lease).await.map_err(ApiError::from) {
            Err(ApiError::NotFound) => Err(ApiError::Unavailable("the namespace does not exist".to_owned())),
            other => other,
        }
    }

    /// Replaces `lease` if its `resourceVersion` is still current; 409 otherwise (and
    /// when it is gone).
    async fn replace(&self, lease: &Lease) -> Result<Lease, ApiError> {
        let name = lease.metadata.name.as_deref().unwrap_or_default();
        match self.leases.replace(name, &PostParams::default(), lease).await.map_err(ApiError::from) {
            Err(ApiError::NotFound) => Err(ApiError::Conflict),
            other => other,
        }
    }
}

fn spec(lease: &Lease) -> Option<&LeaseSpec> {
    lease.spec.as_ref()
}

/// Who holds `lease`; `None` when released.
fn holder(lease: &Lease) -> Option<&str> {
    spec(lease).and_then(|s| s.holder_identity.as_deref()).filter(|h| !h.is_empty())
}

/// Acquisitions so far (this election counts every one: the term is this plus one).
fn transitions(lease: &Lease) -> u64 {
    u64::try_from(spec(lease).and_then(|s| s.lease_transitions).unwrap_or(0)).unwrap_or(0)
}

/// How long observers wait, after its last change, before taking it over.
fn duration(lease: &Lease) -> Duration {
    Duration::from_secs(u64::try_from(spec(lease).and_then(|s| s.lease_duration_seconds).unwrap_or(0)).unwrap_or(0))
}

/// A MicroTime for display (`acquireTime`, `renewTime`).
fn micro_time(t: DateTime<Utc>) -> Option<MicroTime> {
    k8s_openapi::jiff::Timestamp::from_microsecond(t.timestamp_micros()).ok().map(MicroTime)
}

/// Whole seconds for `leaseDurationSeconds`, rounded up, at least one.
fn whole_seconds(ttl: Duration) -> i32 {
    i32::try_from(ttl.as_secs() + u64::from(ttl.subsec_nanos() > 0)).unwrap_or(i32::MAX).max(1)
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
            metadata: ObjectMeta { name: Some(name.to_owned()), ..ObjectMeta::default() },
            spec: Some(LeaseSpec {
                holder_identity: Some(self.inner.identity.clone()),
                lease_duration_seconds: Some(whole_seconds(ttl)),
                acquire_time: micro_time(now),
                renew_time: micro_time(now),
                lease_transitions: Some(i32::try_from(transitions).unwrap_or(i32::MAX)),
                ..LeaseSpec::default()
            }),
        }
    }
}

impl KubernetesLeaderElection {
    /// The Lease object `name` as it stands, if this election holds it under `term`.
    async fn ours(&self, name: &str, term: u64) -> Result<Option<Lease>, ApiError> {
        let current = self.inner.api.get(name).await?;
        Ok(current.filter(|l| holder(l) == Some(self.inner.identity.as_str()) && transitions(l) + 1 == term))
    }

    /// Gives up the Lease object `name` held under `term`; `Ok` also when it is no longer
    /// held. On failure, says whether the API server may have applied the change all the
    /// same (the write was sent and its answer lost).
    async fn give_up(&self, name: &str, term: u64) -> Result<(), (String, bool)> {
        let mut lease = match self.ours(name, term).await {
            Ok(Some(lease)) => lease,
            Ok(None) | Err(ApiError::Conflict | ApiError::NotFound) => return Ok(()),
            Err(ApiError::Unavailable(reason)) => return Err((reason, false)),
        };
        if let Some(spec) = lease.spec.as_mut() {
            spec.holder_identity = None;
        }
        match self.inner.api.replace(&lease).await {
            // A conflict: it changed since, so it is no longer ours.
            Ok(_) | Err(ApiError::Conflict | ApiError::NotFound) => Ok(()),
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
            Err(ApiError::Conflict | ApiError::NotFound) => return Err(held(resource)),
            Ok(None) => inner.api.create(&self.lease_record(&name, ttl, wall, 0)).await,
            Ok(Some(current)) => {
                let version = &current.metadata.resource_version;
                let free = {
                    let mut watch = inner.watch.lock();
                    let free = match holder(&current) {
                        None => true,
                        // This pod's name: an earlier process of this pod held it.
                        Some(holder) if holder == inner.identity => true,
                        Some(_) => watch.lapsed(resource, version, duration(&current), started),
                    };
                    if !free {
                        watch.observe(resource.to_owned(), version.clone(), duration(&current), seen);
                    }
                    free
                };
                if !free {
                    return Err(held(resource));
                }
                let mut next = self.lease_record(&name, ttl, wall, transitions(&current) + 1);
                next.metadata.resource_version.clone_from(&current.metadata.resource_version);
                inner.api.replace(&next).await
            }
        };
        let lease = match written {
            Ok(lease) => lease,
            // Another contender wrote first.
            Err(ApiError::Conflict | ApiError::NotFound) => return Err(held(resource)),
            Err(ApiError::Unavailable(reason)) => return Err(unavailable(reason)),
        };
        inner.watch.lock().forget(resource);
        inner.held.lock().insert(resource.to_owned());
        Ok(KubernetesLease {
            election: self.clone(),
            resource: resource.to_owned(),
            name,
            term: transitions(&lease) + 1,
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
            Ok(None) | Err(ApiError::Conflict | ApiError::NotFound) => return Err(self.lost()),
            Err(ApiError::Unavailable(reason)) => return Err(unavailable(reason)),
        };
        let spec = lease.spec.get_or_insert_with(LeaseSpec::default);
        spec.renew_time = micro_time(wall);
        spec.lease_duration_seconds = Some(whole_seconds(self.ttl));
        match inner.api.replace(&lease).await {
            Ok(_) => {
                self.expires = started.saturating_add(self.ttl);
                self.expires_wall = add_duration(wall, self.ttl);
                Ok(())
            }
            Err(ApiError::Conflict | ApiError::NotFound) => Err(self.lost()),
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

    #[test]
    fn the_api_needs_an_http_url_a_namespace_and_a_runtime() {
        assert!(KubernetesApi::check("https://10.0.0.1:6443", "jobs").is_ok());
        assert!(KubernetesApi::check("http://[fd00::1]:8001/", "jobs").is_ok());
        for url in ["ftp://x", "not a url", "http://", "/apis", ""] {
            let error = KubernetesApi::check(url, "jobs").unwrap_err();
            assert!(error.to_string().contains("http(s) URL"), "{url}: {error}");
        }
        assert!(KubernetesApi::check("http://x", "").unwrap_err().to_string().contains("namespace"));
        // Outside a runtime: an error, not the panic of kube's client spawning its task.
        let error = KubernetesApi::new("http://127.0.0.1:8001", "jobs", None).unwrap_err();
        assert!(error.to_string().contains("tokio runtime"), "{error}");
    }

    #[tokio::test]
    async fn a_lease_record_names_its_holder_duration_and_times() {
        let clock = sundial::time::ManualClock::new(sundial::time::from_micros(1_800_000_000_123_456).unwrap());
        let api = KubernetesApi::new("http://127.0.0.1:1", "jobs", None).unwrap();
        let election = KubernetesLeaderElection::new(api, Arc::new(clock.clone()), "pod-a");
        let lease = election.lease_record("sundial-scheduler", Duration::from_millis(15_200), clock.now(), 4);
        let json = serde_json::to_value(&lease).unwrap();
        assert_eq!(json["apiVersion"], "coordination.k8s.io/v1");
        assert_eq!(json["kind"], "Lease");
        assert_eq!(json["metadata"]["name"], "sundial-scheduler");
        assert_eq!(json["spec"]["holderIdentity"], "pod-a");
        assert_eq!(json["spec"]["leaseDurationSeconds"], 16, "rounded up to whole seconds");
        assert_eq!(json["spec"]["leaseTransitions"], 4);
        assert_eq!(json["spec"]["renewTime"], "2027-01-15T08:00:00.123456Z");
        assert_eq!(
            (holder(&lease), transitions(&lease), duration(&lease)),
            (Some("pod-a"), 4, Duration::from_secs(16))
        );
    }
}
