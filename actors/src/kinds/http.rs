//! `http`: makes one HTTP request. Data: `url` (required, `http` or `https`), `method`
//! (default `GET`), `headers`, `body` (a string is sent as is; any other JSON value as
//! JSON with `content-type: application/json`), `success` (statuses that count as success:
//! numbers like `204` or classes like `"2xx"`; default every 2xx), `timeout` (the request's
//! own limit, default 30 s).
//!
//! Any other status fails the run with code `HTTP_<status>` and the start of the response
//! body; a connection error or timeout fails it with `HTTP_ERROR` or `HTTP_TIMEOUT`.

use std::collections::BTreeMap;
use std::sync::{Arc, Once};
use std::time::Duration;

use serde::Deserialize;

use crate::job::{Job, JobFailure, JobResult, RunContext};
use crate::spec::DurationText;

/// The type key.
pub const KIND: &str = "http";
/// How much of a failed response's body the failure carries.
const BODY_TAIL: usize = 512;
const DEFAULT_TIMEOUT: Duration = Duration::from_secs(30);

/// The `http` kind's parameters.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HttpParams {
    /// Where to.
    pub url: String,
    /// The method.
    #[serde(default = "default_method")]
    pub method: String,
    /// Request headers.
    #[serde(default)]
    pub headers: BTreeMap<String, String>,
    /// The body.
    #[serde(default)]
    pub body: Option<serde_json::Value>,
    /// Statuses that succeed.
    #[serde(default)]
    pub success: Option<Vec<StatusMatch>>,
    /// The request's time limit.
    #[serde(default)]
    pub timeout: Option<DurationText>,
}

fn default_method() -> String {
    "GET".into()
}

/// A status, or a class of them (`"2xx"`).
#[derive(Debug, Clone)]
pub enum StatusMatch {
    /// Exactly this status.
    Code(u16),
    /// A class such as `"2xx"`, or a status as text.
    Text(String),
}

impl<'de> Deserialize<'de> for StatusMatch {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        /// A number or text; anything else is refused saying which are welcome.
        struct Visitor;
        impl serde::de::Visitor<'_> for Visitor {
            type Value = StatusMatch;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a status such as 200, or a class such as \"2xx\"")
            }
            fn visit_u64<E: serde::de::Error>(self, code: u64) -> Result<StatusMatch, E> {
                u16::try_from(code)
                    .map(StatusMatch::Code)
                    .map_err(|_| E::custom(format!("success status {code} is not between 100 and 599")))
            }
            fn visit_i64<E: serde::de::Error>(self, code: i64) -> Result<StatusMatch, E> {
                u64::try_from(code)
                    .map_err(|_| E::custom(format!("success status {code} is not between 100 and 599")))
                    .and_then(|code| self.visit_u64(code))
            }
            fn visit_str<E: serde::de::Error>(self, text: &str) -> Result<StatusMatch, E> {
                Ok(StatusMatch::Text(text.to_owned()))
            }
        }
        deserializer.deserialize_any(Visitor)
    }
}

impl StatusMatch {
    fn matches(&self, status: u16) -> Result<bool, String> {
        match self {
            Self::Code(code) if (100..=599).contains(code) => Ok(*code == status),
            Self::Code(code) => Err(format!("success status {code} is not between 100 and 599")),
            Self::Text(text) => {
                let lower = text.to_ascii_lowercase();
                match lower.as_bytes() {
                    [d @ b'1'..=b'5', b'x', b'x'] => Ok(u16::from(d - b'0') == status / 100),
                    _ => match lower.parse::<u16>() {
                        Ok(code) => Self::Code(code).matches(status),
                        Err(_) => Err(format!("success entry '{text}' is neither a status nor a class like \"2xx\"")),
                    },
                }
            }
        }
    }
}

impl HttpParams {
    /// Checks what deserialization cannot: URL, method, headers and success entries. The
    /// fields named in `read_at_start` (`url`, `method`) hold stand-ins for values read as
    /// a run starts, and are left to the run's own check.
    ///
    /// # Errors
    /// The first problem.
    pub fn check(&self, read_at_start: &[&str]) -> Result<(), String> {
        if !read_at_start.contains(&"url") {
            let url = reqwest::Url::parse(&self.url).map_err(|e| format!("url '{}': {e}", self.url))?;
            if !matches!(url.scheme(), "http" | "https") {
                return Err(format!("url '{}': only http and https are supported", self.url));
            }
        }
        if !read_at_start.contains(&"method") {
            reqwest::Method::from_bytes(self.method.as_bytes())
                .map_err(|_| format!("method '{}' is not valid", self.method))?;
        }
        for (name, value) in &self.headers {
            reqwest::header::HeaderName::from_bytes(name.as_bytes())
                .map_err(|_| format!("header name '{name}' is not valid"))?;
            reqwest::header::HeaderValue::from_str(value)
                .map_err(|_| format!("header '{name}' has an invalid value"))?;
        }
        for entry in self.success.iter().flatten() {
            entry.matches(200)?;
        }
        if self.timeout.is_some_and(|t| t.0.is_zero()) {
            return Err("timeout must be greater than zero".into());
        }
        Ok(())
    }

    fn succeeds(&self, status: u16) -> bool {
        match &self.success {
            None => (200..300).contains(&status),
            Some(entries) => entries.iter().any(|e| e.matches(status).unwrap_or(false)),
        }
    }
}

/// A builder of this crate's HTTP client (rustls on ring, sundial's user agent), for
/// callers that add to it (the CLI's trusted CA).
pub fn client_builder() -> reqwest::ClientBuilder {
    static PROVIDER: Once = Once::new();
    PROVIDER.call_once(|| {
        // Fails only when the host installed a provider already, which is then used.
        let _ = rustls::crypto::ring::default_provider().install_default();
    });
    reqwest::Client::builder().user_agent(concat!("sundial/", env!("CARGO_PKG_VERSION")))
}

/// The process's HTTP client (connection pools are shared by every run), on rustls with
/// the ring provider and the platform's roots.
pub fn client() -> Arc<reqwest::Client> {
    let client = client_builder().build();
    Arc::new(client.unwrap_or_else(|error| {
        tracing::error!(%error, "cannot build the HTTP client with TLS; http jobs fall back to the default client");
        reqwest::Client::new()
    }))
}

/// The `http` job.
#[derive(Debug)]
pub struct HttpJob {
    client: Arc<reqwest::Client>,
}

impl HttpJob {
    /// A job sending through `client`.
    pub fn new(client: Arc<reqwest::Client>) -> Self {
        Self { client }
    }
}

impl Job for HttpJob {
    async fn run(&mut self, ctx: &RunContext) -> JobResult {
        let p: HttpParams = super::run_params(&ctx.run.data)?;
        p.check(&[]).map_err(|e| JobFailure::with_code("INVALID_DATA", e))?;
        let method = reqwest::Method::from_bytes(p.method.as_bytes()).unwrap_or(reqwest::Method::GET);
        let mut request = self
            .client
            .request(method, &p.url)
            .timeout(p.timeout.map_or(DEFAULT_TIMEOUT, |t| t.0))
            .header("x-sundial-run-id", ctx.run.id.to_string())
            .header("x-sundial-job", ctx.run.job.as_str());
        for (name, value) in &p.headers {
            request = request.header(name, value);
        }
        request = match &p.body {
            None => request,
            Some(serde_json::Value::String(text)) => request.body(text.clone()),
            Some(value) => request.json(value),
        };
        let response = tokio::select! {
            biased;
            () = ctx.cancel.cancelled() => return Err(JobFailure::with_code("KILLED", "request abandoned")),
            response = request.send() => response,
        };
        let response = response.map_err(|e| {
            let code = if e.is_timeout() { "HTTP_TIMEOUT" } else { "HTTP_ERROR" };
            JobFailure::with_code(code, format!("{} {}: {e}", p.method, p.url))
        })?;
        let status = response.status().as_u16();
        if p.succeeds(status) {
            return Ok(());
        }
        let body = tokio::select! {
            biased;
            () = ctx.cancel.cancelled() => Vec::new(),
            body = response.bytes() => body.map(|b| b.to_vec()).unwrap_or_default(),
        };
        let head = String::from_utf8_lossy(&body[..body.len().min(BODY_TAIL)]).trim().to_owned();
        Err(JobFailure::with_code(
            format!("HTTP_{status}"),
            format!("{} {} answered {status}: {head}", p.method, p.url),
        ))
    }
}
