//! The `[events]` section: sinks that deliver the node's CloudEvents out of the process.
//!
//! ```toml
//! [[events.http]]
//! name = "hooks"                      # its label in /metrics and logs (default http-<i>)
//! url = "https://hooks.example.com/sundial"
//! mode = "structured"                 # or "binary", or "batch" (batch_size per request)
//! headers = { authorization = { "$env" = "HOOK_TOKEN" } }   # values: text or $env/$file
//! timeout_seconds = 10
//!
//! [[events.nats]]
//! name = "bus"                        # default nats-<i>
//! url = "nats://127.0.0.1:4222"
//! subject_prefix = "sundial"          # subjects <prefix>.<type>
//!
//! # Each sink also takes: queue_size (10000), max_attempts (12), and
//! # topics = ["scheduling.run.failed", …] (default: all nine).
//! ```

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::time::Duration;

use serde::Deserialize;

use super::store::seconds;
use super::ConfigError;
use crate::events::Topic;
use crate::secrets::{self, SecretSource};
use crate::sinks::http::HttpMode;
use crate::sinks::SinkOptions;

/// The sinks of a node.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct EventsConfig {
    /// CloudEvents over HTTP.
    pub http: Vec<HttpSinkConfig>,
    /// CloudEvents over NATS.
    pub nats: Vec<NatsSinkConfig>,
}

/// One `[[events.http]]`.
#[derive(Clone, PartialEq, Eq)]
pub struct HttpSinkConfig {
    /// Its label.
    pub name: String,
    /// Where events are POSTed (`http` or `https`).
    pub url: reqwest::Url,
    /// Structured, binary or batch.
    pub mode: HttpMode,
    /// Events per request in batch mode.
    pub batch_size: usize,
    /// Headers of every request, secrets resolved (marked sensitive).
    pub headers: reqwest::header::HeaderMap,
    /// Each request's time limit.
    pub timeout: Duration,
    /// Queue and retries.
    pub options: SinkOptions,
}

impl fmt::Debug for HttpSinkConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let headers: Vec<&str> = self.headers.keys().map(|name| name.as_str()).collect();
        f.debug_struct("HttpSinkConfig")
            .field("name", &self.name)
            .field("url", &self.url.as_str())
            .field("mode", &self.mode)
            .field("headers", &headers)
            .field("options", &self.options)
            .finish_non_exhaustive()
    }
}

/// One `[[events.nats]]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NatsSinkConfig {
    /// Its label.
    pub name: String,
    /// The server (`nats://host:port`).
    pub url: String,
    /// Subjects are `<prefix>.<type>`.
    pub prefix: String,
    /// Queue and retries.
    pub options: SinkOptions,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub(super) struct EventsSection {
    #[serde(default)]
    http: Vec<HttpSection>,
    #[serde(default)]
    nats: Vec<NatsSection>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct HttpSection {
    #[serde(default)]
    name: Option<String>,
    url: String,
    #[serde(default)]
    mode: HttpMode,
    #[serde(default)]
    batch_size: Option<u32>,
    #[serde(default)]
    headers: serde_json::Map<String, serde_json::Value>,
    #[serde(default)]
    timeout_seconds: Option<toml::Value>,
    #[serde(default)]
    queue_size: Option<u32>,
    #[serde(default)]
    max_attempts: Option<u32>,
    #[serde(default)]
    topics: Option<Vec<String>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct NatsSection {
    #[serde(default)]
    name: Option<String>,
    url: String,
    #[serde(default = "default_prefix")]
    subject_prefix: String,
    #[serde(default)]
    queue_size: Option<u32>,
    #[serde(default)]
    max_attempts: Option<u32>,
    #[serde(default)]
    topics: Option<Vec<String>>,
}

fn default_prefix() -> String {
    "sundial".into()
}

/// The queue settings every sink takes.
struct QueueSection {
    queue_size: Option<u32>,
    max_attempts: Option<u32>,
    topics: Option<Vec<String>>,
}

/// Secret references in sink settings read from the node's environment (`env`) and files.
struct ConfigEnvironment<'a>(&'a BTreeMap<String, String>);

impl SecretSource for ConfigEnvironment<'_> {
    fn var(&self, name: &str) -> Option<String> {
        self.0.get(name).cloned()
    }

    fn file(&self, path: &str) -> Result<String, String> {
        secrets::NodeEnvironment.file(path)
    }
}

/// Reads and checks the section.
pub(super) fn events(section: EventsSection, env: &BTreeMap<String, String>) -> Result<EventsConfig, ConfigError> {
    let mut names = BTreeSet::new();
    let mut unique = |name: String, at: &str| {
        if name.is_empty() || name.len() > 64 || !name.chars().all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c)) {
            return Err(ConfigError::at(
                format!("{at}.name"),
                format!("'{name}' is not a sink name (letters, digits, '-', '_', '.')"),
            ));
        }
        if !names.insert(name.clone()) {
            return Err(ConfigError::at(format!("{at}.name"), format!("another sink is named '{name}'")));
        }
        Ok(name)
    };
    let mut config = EventsConfig::default();
    for (i, http) in section.http.into_iter().enumerate() {
        let at = format!("events.http[{i}]");
        let name = unique(http.name.unwrap_or_else(|| format!("http-{i}")), &at)?;
        let url = reqwest::Url::parse(&http.url)
            .map_err(|e| ConfigError::at(format!("{at}.url"), format!("'{}' is not a URL: {e}", http.url)))?;
        if !matches!(url.scheme(), "http" | "https") || url.host_str().is_none() {
            return Err(ConfigError::at(format!("{at}.url"), format!("'{}' is not an http(s) URL", http.url)));
        }
        let batch_size = match (http.mode, http.batch_size) {
            (HttpMode::Batch, Some(n @ 1..=1000)) => n as usize,
            (HttpMode::Batch, None) => 100,
            (HttpMode::Batch, Some(n)) => {
                return Err(ConfigError::at(format!("{at}.batch_size"), format!("{n} is not between 1 and 1000")))
            }
            (_, Some(_)) => {
                return Err(ConfigError::at(format!("{at}.batch_size"), "only mode = \"batch\" sends batches"))
            }
            (_, None) => 1,
        };
        let timeout = match &http.timeout_seconds {
            Some(value) => seconds(&format!("{at}.timeout_seconds"), value, 0.001, 300.0)?,
            None => Duration::from_secs(10),
        };
        let headers = headers(http.headers, &format!("{at}.headers"), env)?;
        let options = queue(
            QueueSection { queue_size: http.queue_size, max_attempts: http.max_attempts, topics: http.topics },
            &at,
        )?;
        config.http.push(HttpSinkConfig { name, url, mode: http.mode, batch_size, headers, timeout, options });
    }
    for (i, nats) in section.nats.into_iter().enumerate() {
        let at = format!("events.nats[{i}]");
        let name = unique(nats.name.unwrap_or_else(|| format!("nats-{i}")), &at)?;
        let parsed = nats.url.parse::<async_nats::ServerAddr>();
        if parsed.is_err() || nats.url.trim().is_empty() {
            return Err(ConfigError::at(format!("{at}.url"), format!("'{}' is not a NATS server address", nats.url)));
        }
        crate::sinks::nats::check_prefix(&nats.subject_prefix)
            .map_err(|e| ConfigError::at(format!("{at}.subject_prefix"), e))?;
        let options = queue(
            QueueSection { queue_size: nats.queue_size, max_attempts: nats.max_attempts, topics: nats.topics },
            &at,
        )?;
        config.nats.push(NatsSinkConfig { name, url: nats.url, prefix: nats.subject_prefix, options });
    }
    Ok(config)
}

fn queue(section: QueueSection, at: &str) -> Result<SinkOptions, ConfigError> {
    let mut options = SinkOptions::default();
    if let Some(size) = section.queue_size {
        if !(1..=1_000_000).contains(&size) {
            return Err(ConfigError::at(format!("{at}.queue_size"), format!("{size} is not between 1 and 1000000")));
        }
        options.queue_size = size as usize;
    }
    if let Some(attempts) = section.max_attempts {
        if !(1..=100).contains(&attempts) {
            return Err(ConfigError::at(format!("{at}.max_attempts"), format!("{attempts} is not between 1 and 100")));
        }
        options.max_attempts = attempts;
    }
    if let Some(names) = section.topics {
        let mut topics = BTreeSet::new();
        for name in names {
            let topic = Topic::ALL.into_iter().find(|t| t.as_str() == name).ok_or_else(|| {
                let known: Vec<&str> = Topic::ALL.iter().map(|t| t.as_str()).collect();
                ConfigError::at(format!("{at}.topics"), format!("'{name}' is not one of {}", known.join(", ")))
            })?;
            topics.insert(topic);
        }
        options.topics = Some(topics);
    }
    Ok(options)
}

/// Header names and values, each value text or a `$env`/`$file` reference, read now.
fn headers(
    given: serde_json::Map<String, serde_json::Value>,
    at: &str,
    env: &BTreeMap<String, String>,
) -> Result<reqwest::header::HeaderMap, ConfigError> {
    let mut out = reqwest::header::HeaderMap::with_capacity(given.len());
    for (name, value) in given {
        let key = format!("{at}.{name}");
        let Ok(header) = reqwest::header::HeaderName::from_bytes(name.as_bytes()) else {
            return Err(ConfigError::at(key, "is not a header name"));
        };
        let mut data = serde_json::Map::new();
        data.insert(name.clone(), value);
        secrets::check(None, &data).map_err(|e| ConfigError::at(&key, e))?;
        secrets::resolve(&mut data, &ConfigEnvironment(env)).map_err(|e| ConfigError::at(&key, e))?;
        let Some(serde_json::Value::String(text)) = data.remove(&name) else {
            return Err(ConfigError::at(key, "give text, or a $env or $file reference"));
        };
        let Ok(mut text) = reqwest::header::HeaderValue::from_str(&text) else {
            // The value is never quoted: it may be a secret.
            return Err(ConfigError::at(key, "is not a valid header value"));
        };
        text.set_sensitive(true);
        out.insert(header, text);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str, env: &[(&str, &str)]) -> Result<EventsConfig, ConfigError> {
        let section: EventsSection = toml::from_str(text).map_err(|e| ConfigError::at("toml", e.message()))?;
        let env = env.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect();
        events(section, &env)
    }

    #[test]
    fn sinks_read_with_defaults_and_secret_headers() {
        let config = parse(
            "[[http]]\nurl = \"http://127.0.0.1:9/hook\"\nmode = \"batch\"\nheaders = { authorization = { \"$env\" = \"HOOK\" }, x-team = \"ops\" }\n\
             topics = [\"scheduling.run.failed\"]\n[[nats]]\nurl = \"nats://127.0.0.1:4222\"\nmax_attempts = 3\n",
            &[("HOOK", "Bearer hook-secret-value")],
        )
        .unwrap();
        let http = &config.http[0];
        assert_eq!((http.name.as_str(), http.mode, http.batch_size), ("http-0", HttpMode::Batch, 100));
        let header = |name: &str| http.headers.get(name).and_then(|v| v.to_str().ok());
        assert_eq!(
            (header("authorization"), header("x-team"), http.headers.len()),
            (Some("Bearer hook-secret-value"), Some("ops"), 2)
        );
        assert_eq!(http.options.topics, Some([Topic::RunFailed].into()));
        assert!(!format!("{http:?}").contains("hook-secret"), "Debug hides header values");
        let nats = &config.nats[0];
        assert_eq!((nats.name.as_str(), nats.prefix.as_str(), nats.options.max_attempts), ("nats-0", "sundial", 3));
    }

    #[test]
    fn bad_sinks_name_the_setting() {
        let cases = [
            ("[[http]]\nurl = \"ftp://x\"", "events.http[0].url"),
            ("[[http]]\nurl = \"not a url\"", "events.http[0].url"),
            ("[[http]]\nurl = \"http://x\"\nbatch_size = 5", "events.http[0].batch_size"),
            ("[[http]]\nurl = \"http://x\"\nmode = \"batch\"\nbatch_size = 0", "events.http[0].batch_size"),
            ("[[http]]\nurl = \"http://x\"\ntimeout_seconds = 0", "events.http[0].timeout_seconds"),
            ("[[http]]\nurl = \"http://x\"\nheaders = { \"bad name\" = \"x\" }", "events.http[0].headers.bad name"),
            ("[[http]]\nurl = \"http://x\"\nheaders = { a = { \"$env\" = \"MISSING\" } }", "events.http[0].headers.a"),
            ("[[http]]\nurl = \"http://x\"\nheaders = { a = 7 }", "events.http[0].headers.a"),
            ("[[http]]\nurl = \"http://x\"\nheaders = { a = \"x\\ny\" }", "events.http[0].headers.a"),
            ("[[http]]\nurl = \"http://x\"\nqueue_size = 0", "events.http[0].queue_size"),
            ("[[http]]\nurl = \"http://x\"\nmax_attempts = 0", "events.http[0].max_attempts"),
            ("[[http]]\nurl = \"http://x\"\ntopics = [\"run.failed\"]", "events.http[0].topics"),
            (
                "[[http]]\nurl = \"http://x\"\nname = \"a\"\n[[nats]]\nurl = \"nats://x:4222\"\nname = \"a\"",
                "events.nats[0].name",
            ),
            ("[[nats]]\nurl = \"\"", "events.nats[0].url"),
            ("[[nats]]\nurl = \"nats://x:4222\"\nsubject_prefix = \"a.*\"", "events.nats[0].subject_prefix"),
            ("[[nats]]\nurl = \"nats://x:4222\"\nname = \"a b\"", "events.nats[0].name"),
        ];
        for (text, key) in cases {
            let error = parse(text, &[]).unwrap_err();
            assert_eq!(error.key.as_deref(), Some(key), "{text}: {error}");
        }
    }
}
