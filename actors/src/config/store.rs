//! `[store]`: which store the node uses, and how a PostgreSQL store is reached.

use std::collections::BTreeMap;
use std::fmt;
use std::path::PathBuf;
use std::time::Duration;

use serde::Deserialize;

use super::{ConfigError, STORE_PASSWORD_ENV};

/// Which store the node uses.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StoreConfig {
    /// The embedded in-memory store: one node, history capped at `max_runs`, forgotten
    /// when the process ends.
    Memory {
        /// Finished runs kept at most.
        max_runs: u64,
    },
    /// The embedded durable store (`sundial::kv::embedded::EmbeddedKv`): one node, its
    /// data in a directory of its own, kept across restarts and crashes.
    Embedded {
        /// The data directory (`path`; relative to the config file's directory, default
        /// `sundial-data` there).
        path: PathBuf,
        /// Finished runs kept at most (`max_runs`); `None`: history retention alone
        /// bounds them.
        max_runs: Option<u64>,
        /// The KiB of writes the commit log gathers before folding them into the data
        /// file (`fold_kib`); `None`: the store's default (32 MiB).
        fold_kib: Option<u64>,
    },
    /// A PostgreSQL database shared with other nodes (`sundial::kv::postgres::PgKv`).
    Postgres(PostgresStore),
    /// A FoundationDB cluster shared with other nodes.
    Fdb {
        /// The cluster file; `None` uses FoundationDB's default lookup.
        cluster_file: Option<PathBuf>,
        /// How long a transaction may wait on the cluster before the store reports it
        /// unavailable (`transaction_timeout_seconds`, 1 to 3600); `None`: the adapter's
        /// default, 10 s.
        transaction_timeout: Option<Duration>,
    },
}

/// `[store] kind = "postgres"`: where the database is and how long to wait for it.
#[derive(Clone, PartialEq, Eq)]
pub struct PostgresStore {
    /// The connection URL (`postgres://user@host:port/database`, or a `key=value`
    /// string), without its password if it had one set elsewhere.
    pub url: String,
    /// The password, from `password_file` or `SUNDIAL_STORE_PASSWORD` (`None`: the
    /// URL's, if any). Never printed.
    pub password: Option<String>,
    /// The PostgreSQL schema holding sundial's tables: one cluster per schema.
    pub schema: String,
    /// Connections in the node's pool.
    pub pool_size: usize,
    /// The longest wait for a new connection.
    pub connect_timeout: Duration,
    /// The longest wait for one round trip.
    pub operation_timeout: Duration,
}

impl fmt::Debug for PostgresStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PostgresStore")
            .field("url", &self.url)
            .field("password", &self.password.as_ref().map(|_| "<redacted>"))
            .field("schema", &self.schema)
            .field("pool_size", &self.pool_size)
            .field("connect_timeout", &self.connect_timeout)
            .field("operation_timeout", &self.operation_timeout)
            .finish()
    }
}

impl PostgresStore {
    /// The options to open the store with.
    ///
    /// # Errors
    /// When `url` does not parse (checked at load, so only for a value made by hand).
    pub fn options(&self) -> Result<sundial::kv::postgres::PgKvOptions, sundial::kv::postgres::PgOpenError> {
        let mut options = sundial::kv::postgres::PgKvOptions::new(&self.url)?;
        if let Some(password) = &self.password {
            options.config.password(password.as_bytes());
        }
        options.schema = self.schema.clone();
        options.pool_size = self.pool_size;
        options.connect_timeout = self.connect_timeout;
        options.operation_timeout = self.operation_timeout;
        Ok(options)
    }
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub(super) struct StoreSection {
    #[serde(default)]
    pub(super) kind: StoreKind,
    #[serde(default)]
    pub(super) cluster_file: Option<PathBuf>,
    #[serde(default)]
    pub(super) max_runs: Option<u64>,
    #[serde(default)]
    pub(super) transaction_timeout_seconds: Option<toml::Value>,
    #[serde(default)]
    pub(super) url: Option<String>,
    #[serde(default)]
    pub(super) password_file: Option<PathBuf>,
    #[serde(default)]
    pub(super) schema: Option<String>,
    #[serde(default)]
    pub(super) pool_size: Option<u64>,
    #[serde(default)]
    pub(super) connect_timeout_seconds: Option<toml::Value>,
    #[serde(default)]
    pub(super) operation_timeout_seconds: Option<toml::Value>,
    #[serde(default)]
    pub(super) path: Option<PathBuf>,
    #[serde(default)]
    pub(super) fold_kib: Option<u64>,
}

#[derive(Deserialize, Default, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub(super) enum StoreKind {
    /// A config file that names no store keeps its data.
    #[default]
    Embedded,
    Memory,
    Postgres,
    Fdb,
}

/// A `[store]` number of seconds from `min` to `max`.
pub(super) fn seconds(key: &str, value: &toml::Value, min: f64, max: f64) -> Result<Duration, ConfigError> {
    let seconds = match value {
        toml::Value::Integer(n) => *n as f64,
        toml::Value::Float(x) => *x,
        _ => f64::NAN,
    };
    if !(min..=max).contains(&seconds) {
        return Err(ConfigError::at(key, format!("must be a number of seconds from {min} to {max}, got {value}")));
    }
    Ok(Duration::from_secs_f64(seconds))
}

/// The `[store]` section of kind `postgres`; the password from `password_file`, else
/// `SUNDIAL_STORE_PASSWORD` in `env`.
pub(super) fn postgres_store(
    section: &StoreSection,
    env: &BTreeMap<String, String>,
) -> Result<PostgresStore, ConfigError> {
    let Some(url) = section.url.clone() else {
        return Err(ConfigError::at(
            "store.url",
            "is needed for a store of kind \"postgres\" (postgres://user@host:5432/database)",
        ));
    };
    // The parser's message may quote the URL, password and all: say what is wrong
    // without it.
    if sundial::kv::postgres::PgKvOptions::new(&url).is_err() {
        return Err(ConfigError::at(
            "store.url",
            "is not a PostgreSQL connection URL (postgres://user@host:5432/database, or host=... dbname=...)",
        ));
    }
    let password = match &section.password_file {
        Some(path) => {
            let text = std::fs::read_to_string(path)
                .map_err(|e| ConfigError::at("store.password_file", format!("cannot read {}: {e}", path.display())))?;
            let password = text.trim_end_matches(['\n', '\r']).to_owned();
            if password.is_empty() {
                return Err(ConfigError::at("store.password_file", format!("{} is empty", path.display())));
            }
            Some(password)
        }
        None => env.get(STORE_PASSWORD_ENV).cloned(),
    };
    let schema = section.schema.clone().unwrap_or_else(|| "sundial".to_owned());
    if !sundial::kv::postgres::is_schema_name(&schema) {
        return Err(ConfigError::at(
            "store.schema",
            format!("'{schema}' is not a lower-case identifier (letters, digits, '_'; at most 63)"),
        ));
    }
    let pool_size = section.pool_size.unwrap_or(16);
    if !(1..=1000).contains(&pool_size) {
        return Err(ConfigError::at("store.pool_size", format!("must be from 1 to 1000, got {pool_size}")));
    }
    let timeout = |key: &str, value: &Option<toml::Value>| match value {
        Some(value) => seconds(key, value, 0.1, 3600.0),
        None => Ok(Duration::from_secs(5)),
    };
    Ok(PostgresStore {
        url,
        password,
        schema,
        pool_size: pool_size as usize,
        connect_timeout: timeout("store.connect_timeout_seconds", &section.connect_timeout_seconds)?,
        operation_timeout: timeout("store.operation_timeout_seconds", &section.operation_timeout_seconds)?,
    })
}

/// `[store] transaction_timeout_seconds`: shorter than a second would fail transactions a
/// loaded cluster completes; longer than an hour would leave a node hanging on a cluster
/// that stopped answering.
pub(super) fn transaction_timeout(value: &toml::Value) -> Result<Duration, ConfigError> {
    seconds("store.transaction_timeout_seconds", value, 1.0, 3600.0)
}
