//! The `sundial` node's TOML config file (see `actors/sundial.example.toml`).
//!
//! ```toml
//! [store]                 # kind = "embedded" (default in a file) with path; "memory"
//!                         # (the default without a file); "postgres" with url, schema,
//!                         # password_file, pool_size and timeouts; or "fdb" with
//!                         # cluster_file and transaction_timeout_seconds
//! [leader]                # kind = "store" (default) or "kubernetes" (a Lease object)
//! [scheduler]             # the options of SPEC §13
//! [admin]                 # listen = "127.0.0.1:7600"; tokens by role (read, admin)
//! [events]                # [[events.http]] and [[events.nats]] sinks
//! [log]                   # format = "text" | "json"
//! [calendars.<name>]      # kind = "holidays" | "weekly" | "daily" | "cron" | "composite"
//! [[jobs]]                # a job spec (crate::spec::JobSpec) with [[jobs.triggers]]
//! ```
//!
//! Loading checks everything before anything starts: unknown keys, option values,
//! calendars, job definitions, built-in kinds' parameters and calendar references. Every
//! error names the file, the key and the problem.

mod admin;
mod events;
mod leader;
mod store;

use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde::Deserialize;
use sundial::calendar::{Calendars, JobCalendar};
use sundial::job::JobDefinition;
use sundial::name::CalendarName;
use sundial::options::SchedulerOptions;

use crate::spec::{reason, CalendarSpec, JobSpec};

use admin::{admin, AdminSection};
pub use admin::{AdminConfig, LEGACY_TOKEN_NAME};
use events::{events, EventsSection};
pub use events::{EventsConfig, HttpSinkConfig, NatsSinkConfig};
pub use leader::LeaderConfig;
use leader::{leader, LeaderSection};
use store::{postgres_store, transaction_timeout, StoreKind, StoreSection};
pub use store::{PostgresStore, StoreConfig};

/// The admin API's default address.
pub const DEFAULT_ADMIN_ADDR: &str = "127.0.0.1:7600";
/// The environment variable holding the admin token (it wins over the file's).
pub const ADMIN_TOKEN_ENV: &str = "SUNDIAL_ADMIN_TOKEN";
/// The environment variable holding the admin API's address (it wins over the file's).
pub const ADMIN_LISTEN_ENV: &str = "SUNDIAL_ADMIN_LISTEN";
/// The environment variable holding the bearer token for `[leader] api_url` (outside a
/// pod; in a pod the service account's is used).
pub const KUBERNETES_TOKEN_ENV: &str = "SUNDIAL_KUBERNETES_TOKEN";
/// The other `SUNDIAL_*` names in use: the CLI's node address, and what shell jobs set for
/// their processes (a node may be started by one).
const OTHER_ENV: [&str; 6] =
    ["SUNDIAL_SERVER", "SUNDIAL_RUN_ID", "SUNDIAL_JOB", "SUNDIAL_TRIGGER", "SUNDIAL_SCHEDULED_AT", "SUNDIAL_ATTEMPT"];
/// The in-memory store's default history cap.
pub const DEFAULT_MAX_RUNS: u64 = 10_000;

/// The embedded store's data directory when `[store] path` is not given, relative to the
/// config file's directory.
pub const DEFAULT_DATA_DIR: &str = "sundial-data";
/// The environment variable holding the PostgreSQL store's password (`[store]
/// password_file` wins over it; a password in `url` is used when neither is set).
pub const STORE_PASSWORD_ENV: &str = "SUNDIAL_STORE_PASSWORD";

/// `SUNDIAL_*` variables of `env` that sundial does not read but that look like a name it
/// does, each with that name (`SUNDIAL_POLL_INTERVAL`, `SUNDIAL_POLL_INTERVAL_SECONDS`).
/// They are ignored, so a node warns of them: a misspelt setting would otherwise go
/// unnoticed. Names far from every known one are left alone (other tools may use them).
pub fn near_misses(env: &BTreeMap<String, String>) -> Vec<(String, String)> {
    use sundial::options::{env_option, ENV_PREFIX, OPTION_KEYS};
    // Options are read as `env_option` says; the others exactly as written.
    let options: Vec<String> =
        OPTION_KEYS.iter().map(|key| format!("{ENV_PREFIX}{}", key.to_ascii_uppercase())).collect();
    let exact =
        [ADMIN_TOKEN_ENV, ADMIN_LISTEN_ENV, KUBERNETES_TOKEN_ENV, STORE_PASSWORD_ENV].into_iter().chain(OTHER_ENV);
    let known: Vec<&str> = options.iter().map(String::as_str).chain(exact.clone()).collect();
    let mut misses = Vec::new();
    for name in env.keys().filter(|name| name.starts_with(ENV_PREFIX)) {
        if env_option(name).is_some() || exact.clone().any(|e| e == name) {
            continue;
        }
        let upper = name.to_ascii_uppercase();
        let like = known
            .iter()
            .map(|k| (strsim::levenshtein(&upper, k), *k))
            .filter(|(distance, k)| *distance <= 3 || k.starts_with(upper.as_str()) || upper.starts_with(k))
            .min();
        if let Some((_, like)) = like {
            misses.push((name.clone(), like.to_owned()));
        }
    }
    misses
}

/// A config problem: where (file and key) and what.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigError {
    /// The file, when the problem is in one.
    pub file: Option<PathBuf>,
    /// The key at fault (`jobs[0] (backup).triggers[1].schedule`), when known.
    pub key: Option<String>,
    /// The problem.
    pub problem: String,
}

impl ConfigError {
    fn at(key: impl Into<String>, problem: impl fmt::Display) -> Self {
        Self { file: None, key: Some(key.into()), problem: problem.to_string() }
    }

    fn in_file(mut self, file: &Path) -> Self {
        self.file = Some(file.to_owned());
        self
    }
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let Some(file) = &self.file {
            write!(f, "{}: ", file.display())?;
        }
        if let Some(key) = &self.key {
            write!(f, "{key}: ")?;
        }
        f.write_str(&self.problem)
    }
}

impl std::error::Error for ConfigError {}

/// Log output.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LogFormat {
    /// For people.
    #[default]
    Text,
    /// One JSON object per line.
    Json,
}

/// A loaded, checked config.
#[derive(Clone)]
pub struct NodeFileConfig {
    /// The store.
    pub store: StoreConfig,
    /// The leader election.
    pub leader: LeaderConfig,
    /// Scheduler options (file, then `SUNDIAL_*` environment).
    pub options: SchedulerOptions,
    /// The admin API.
    pub admin: AdminConfig,
    /// Where events are delivered out of the process.
    pub events: EventsConfig,
    /// Log format.
    pub log: LogFormat,
    /// Whether each worker of the node's runtime is pinned to a CPU of its own
    /// (`[runtime] pin_workers`; see [`crate::runtime`]).
    pub pin_workers: bool,
    /// Named calendars.
    pub calendars: BTreeMap<CalendarName, Arc<dyn JobCalendar>>,
    /// Code jobs.
    pub jobs: Vec<JobDefinition>,
}

impl fmt::Debug for NodeFileConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("NodeFileConfig")
            .field("store", &self.store)
            .field("leader", &self.leader)
            .field("options", &self.options)
            .field("admin", &self.admin)
            .field("events", &self.events)
            .field("log", &self.log)
            .field("pin_workers", &self.pin_workers)
            .field("calendars", &self.calendars.keys().collect::<Vec<_>>())
            .field("jobs", &self.jobs)
            .finish()
    }
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct File {
    #[serde(default)]
    store: StoreSection,
    #[serde(default)]
    leader: LeaderSection,
    #[serde(default)]
    scheduler: Option<toml::Table>,
    #[serde(default)]
    admin: AdminSection,
    #[serde(default)]
    events: EventsSection,
    #[serde(default)]
    log: LogSection,
    #[serde(default)]
    runtime: RuntimeSection,
    #[serde(default)]
    calendars: BTreeMap<String, CalendarSpec>,
    #[serde(default)]
    jobs: Vec<JobSpec>,
}

fn yes() -> bool {
    true
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct LogSection {
    #[serde(default)]
    format: LogFormat,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RuntimeSection {
    #[serde(default)]
    pin_workers: bool,
}

impl NodeFileConfig {
    /// No file: the in-memory store, default options (with `SUNDIAL_*` applied), the admin
    /// API on loopback, no jobs.
    ///
    /// # Errors
    /// An invalid `SUNDIAL_*` variable.
    pub fn defaults(env: &BTreeMap<String, String>) -> Result<Self, ConfigError> {
        // Without a file there is no place of its own for data: the in-memory store.
        let mut file = File::default();
        file.store.kind = StoreKind::Memory;
        Self::from_file(file, env)
    }

    /// Reads and checks `path`; `env` supplies `SUNDIAL_*` overrides.
    ///
    /// # Errors
    /// The first problem, naming the file and key.
    pub fn load(path: &Path, env: &BTreeMap<String, String>) -> Result<Self, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|e| ConfigError {
            file: Some(path.to_owned()),
            key: None,
            problem: format!("cannot read: {e}"),
        })?;
        let mut config = Self::parse(&text, env).map_err(|e| e.in_file(path))?;
        // Paths relative to the file, wherever the node is started from.
        let base = path.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
        let resolve = |file: &mut PathBuf| {
            if file.is_relative() {
                *file = base.join(&*file);
            }
        };
        if let StoreConfig::Embedded { path: data, .. } = &mut config.store {
            resolve(data);
        }
        if let Some(tls) = &mut config.admin.tls {
            resolve(&mut tls.cert);
            resolve(&mut tls.key);
        }
        Ok(config)
    }

    /// Parses and checks config text (relative paths, of the embedded store and the admin
    /// API's certificate, stay relative: [`Self::load`] resolves them against the file's
    /// directory).
    ///
    /// # Errors
    /// The first problem, naming the key.
    pub fn parse(text: &str, env: &BTreeMap<String, String>) -> Result<Self, ConfigError> {
        let file: File =
            toml::from_str(text).map_err(|e| ConfigError { file: None, key: None, problem: toml_problem(&e, text) })?;
        Self::from_file(file, env)
    }

    fn from_file(file: File, env: &BTreeMap<String, String>) -> Result<Self, ConfigError> {
        let postgres_only = [
            ("store.url", file.store.url.is_some()),
            ("store.password_file", file.store.password_file.is_some()),
            ("store.schema", file.store.schema.is_some()),
            ("store.pool_size", file.store.pool_size.is_some()),
            ("store.connect_timeout_seconds", file.store.connect_timeout_seconds.is_some()),
            ("store.operation_timeout_seconds", file.store.operation_timeout_seconds.is_some()),
        ];
        if file.store.kind != StoreKind::Postgres {
            if let Some((key, _)) = postgres_only.iter().find(|(_, set)| *set) {
                return Err(ConfigError::at(*key, "only a store of kind \"postgres\" takes this"));
            }
        }
        if file.store.kind != StoreKind::Embedded && file.store.path.is_some() {
            return Err(ConfigError::at("store.path", "only a store of kind \"embedded\" has a data directory"));
        }
        if file.store.kind != StoreKind::Embedded && file.store.fold_kib.is_some() {
            return Err(ConfigError::at("store.fold_kib", "only a store of kind \"embedded\" has a commit log"));
        }
        let store = match file.store.kind {
            StoreKind::Embedded => {
                let other = [
                    ("store.cluster_file", file.store.cluster_file.is_some()),
                    ("store.transaction_timeout_seconds", file.store.transaction_timeout_seconds.is_some()),
                ];
                if let Some((key, _)) = other.iter().find(|(_, set)| *set) {
                    return Err(ConfigError::at(*key, "a store of kind \"embedded\" does not take this"));
                }
                if file.store.max_runs == Some(0) {
                    return Err(ConfigError::at("store.max_runs", "must be at least 1"));
                }
                let path = file.store.path.unwrap_or_else(|| PathBuf::from(DEFAULT_DATA_DIR));
                if path.as_os_str().is_empty() {
                    return Err(ConfigError::at("store.path", "must name a directory"));
                }
                let fold_kib = file.store.fold_kib;
                if fold_kib.is_some_and(|kib| !(1..=1 << 20).contains(&kib)) {
                    return Err(ConfigError::at("store.fold_kib", "must be from 1 to 1048576 (1 GiB)"));
                }
                StoreConfig::Embedded { path, max_runs: file.store.max_runs, fold_kib }
            }
            StoreKind::Postgres => {
                let other = [
                    ("store.cluster_file", file.store.cluster_file.is_some()),
                    ("store.transaction_timeout_seconds", file.store.transaction_timeout_seconds.is_some()),
                    ("store.max_runs", file.store.max_runs.is_some()),
                ];
                if let Some((key, _)) = other.iter().find(|(_, set)| *set) {
                    return Err(ConfigError::at(*key, "a store of kind \"postgres\" does not take this"));
                }
                StoreConfig::Postgres(postgres_store(&file.store, env)?)
            }
            StoreKind::Memory => {
                if file.store.cluster_file.is_some() {
                    return Err(ConfigError::at(
                        "store.cluster_file",
                        "only a store of kind \"fdb\" has a cluster file",
                    ));
                }
                if file.store.transaction_timeout_seconds.is_some() {
                    return Err(ConfigError::at(
                        "store.transaction_timeout_seconds",
                        "only a store of kind \"fdb\" has transactions that wait on a cluster",
                    ));
                }
                let max_runs = file.store.max_runs.unwrap_or(DEFAULT_MAX_RUNS);
                if max_runs == 0 {
                    return Err(ConfigError::at("store.max_runs", "must be at least 1"));
                }
                StoreConfig::Memory { max_runs }
            }
            StoreKind::Fdb => {
                if file.store.max_runs.is_some() {
                    return Err(ConfigError::at("store.max_runs", "only the embedded stores cap their history"));
                }
                let transaction_timeout =
                    file.store.transaction_timeout_seconds.as_ref().map(transaction_timeout).transpose()?;
                if !cfg!(feature = "fdb") {
                    return Err(ConfigError::at(
                        "store.kind",
                        "this sundial was built without FoundationDB support; rebuild with `--features fdb` \
                         (needs libfdb_c) or use kind = \"memory\"",
                    ));
                }
                StoreConfig::Fdb { cluster_file: file.store.cluster_file, transaction_timeout }
            }
        };
        let leader = leader(file.leader)?;
        let mut options = SchedulerOptions::default();
        if let Some(table) = &file.scheduler {
            options.apply_toml(table).map_err(|e| ConfigError::at(format!("scheduler.{}", e.key), e.problem))?;
        }
        options.apply_env(env.iter()).map_err(|e| ConfigError::at(e.key, e.problem))?;

        let admin = admin(file.admin, env)?;
        let events = events(file.events, env)?;

        let calendars = crate::spec::calendars(&file.calendars).map_err(|e| ConfigError::at(e.key, e.problem))?;
        let mut known = Calendars::new();
        for (name, calendar) in &calendars {
            known.insert(name.clone(), calendar.clone());
        }
        let mut jobs = Vec::with_capacity(file.jobs.len());
        let mut names = BTreeMap::new();
        for (i, spec) in file.jobs.iter().enumerate() {
            let path = format!("jobs[{i}]");
            let def = spec.to_definition(&path).map_err(|e| ConfigError::at(e.key, e.problem))?;
            if let Some(first) = names.insert(def.name.clone(), i) {
                return Err(ConfigError::at(
                    format!("{path}.name"),
                    format!("job '{}' is also jobs[{first}]", def.name),
                ));
            }
            def.validate(Some(&known))
                .map_err(|e| ConfigError::at(format!("{path} ({})", def.name), reason(&e, &def.name)))?;
            crate::kinds::check(&def).map_err(|e| ConfigError::at(format!("{path} ({})", def.name), e))?;
            jobs.push(def);
        }
        let pin_workers = file.runtime.pin_workers;
        Ok(Self { store, leader, options, admin, events, log: file.log.format, pin_workers, calendars, jobs })
    }
}

/// A TOML error as one line with its position.
fn toml_problem(error: &toml::de::Error, text: &str) -> String {
    let message = error.message().trim();
    match error.span() {
        Some(span) => {
            let line = text[..span.start.min(text.len())].matches('\n').count() + 1;
            format!("line {line}: {message}")
        }
        None => message.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn parse(text: &str) -> Result<NodeFileConfig, ConfigError> {
        NodeFileConfig::parse(text, &BTreeMap::new())
    }

    #[test]
    fn the_example_file_loads() {
        let text = include_str!("../../sundial.example.toml");
        let config = parse(text).unwrap();
        assert_eq!(config.store, StoreConfig::Embedded { path: "sundial-data".into(), max_runs: None, fold_kib: None });
        assert!(config.jobs.iter().any(|j| j.job_type.as_str() == "shell"));
        assert!(config.jobs.iter().any(|j| j.job_type.as_str() == "http"));
        assert!(!config.calendars.is_empty());
        assert!(!config.pin_workers);
    }

    #[test]
    fn workers_are_pinned_only_when_asked() {
        assert!(!parse("").unwrap().pin_workers);
        assert!(parse("[runtime]\npin_workers = true").unwrap().pin_workers);
        let error = parse("[runtime]\npin_workers = \"yes\"").err().unwrap().to_string();
        assert!(error.contains("line 2") && error.contains("boolean"), "{error}");
        assert!(parse("[runtime]\nworkers = 3").is_err(), "unknown keys are refused");
    }

    #[test]
    fn the_leader_is_the_stores_unless_kubernetes_is_asked_for() {
        assert_eq!(parse("").unwrap().leader, LeaderConfig::Store);
        let in_pod = parse("[leader]\nkind = \"kubernetes\"").unwrap();
        assert_eq!(
            in_pod.leader,
            LeaderConfig::Kubernetes { lease_name: "sundial-scheduler".to_owned(), api: None, identity: None }
        );
        let proxied = parse(
            "[leader]\nkind = \"kubernetes\"\nlease_name = \"billing.leader\"\napi_url = \"http://127.0.0.1:8001\"\n\
             namespace = \"jobs\"\nidentity = \"pod-7\"",
        )
        .unwrap();
        assert_eq!(
            proxied.leader,
            LeaderConfig::Kubernetes {
                lease_name: "billing.leader".to_owned(),
                api: Some(("http://127.0.0.1:8001".to_owned(), "jobs".to_owned())),
                identity: Some("pod-7".to_owned()),
            }
        );
    }

    #[test]
    fn the_example_jobs_file_loads() {
        let config = parse(include_str!("../../jobs.example.toml")).unwrap();
        let kinds: Vec<&str> = config.jobs.iter().map(|j| j.job_type.as_str()).collect();
        assert_eq!(kinds, ["shell", "http", "log"]);
    }

    #[test]
    fn a_file_keeps_its_data_in_an_embedded_store_beside_it_unless_it_says_otherwise() {
        assert_eq!(
            parse("").unwrap().store,
            StoreConfig::Embedded { path: "sundial-data".into(), max_runs: None, fold_kib: None }
        );
        let text = "[store]\nkind = \"embedded\"\npath = \"/var/lib/sundial\"\nmax_runs = 500\nfold_kib = 4096";
        assert_eq!(
            parse(text).unwrap().store,
            StoreConfig::Embedded { path: "/var/lib/sundial".into(), max_runs: Some(500), fold_kib: Some(4096) }
        );
        assert_eq!(parse("[store]\nkind = \"memory\"").unwrap().store, StoreConfig::Memory { max_runs: 10_000 });
        for (text, key) in [
            ("[store]\nkind = \"memory\"\npath = \"x\"", "store.path"),
            ("[store]\nkind = \"postgres\"\nurl = \"postgres://a@b/c\"\npath = \"x\"", "store.path"),
            ("[store]\npath = \"\"", "store.path"),
            ("[store]\nmax_runs = 0", "store.max_runs"),
            ("[store]\nfold_kib = 0", "store.fold_kib"),
            ("[store]\nkind = \"memory\"\nfold_kib = 64", "store.fold_kib"),
            ("[store]\ncluster_file = \"x\"", "store.cluster_file"),
        ] {
            let error = parse(text).err().unwrap_or_else(|| panic!("{text} was accepted")).to_string();
            assert!(error.contains(key), "{text}: {error}");
        }
        // A relative path is the file's neighbour, wherever the node starts.
        let dir = std::env::temp_dir().join(format!("sundial-config-path-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("node.toml"), "[store]\npath = \"data\"").unwrap();
        let config = NodeFileConfig::load(&dir.join("node.toml"), &BTreeMap::new()).unwrap();
        assert_eq!(config.store, StoreConfig::Embedded { path: dir.join("data"), max_runs: None, fold_kib: None });
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn defaults_are_a_memory_store_and_a_loopback_api() {
        let config = NodeFileConfig::defaults(&BTreeMap::new()).unwrap();
        assert!(matches!(config.store, StoreConfig::Memory { .. }));
        assert_eq!(config.admin.listen.to_string(), DEFAULT_ADMIN_ADDR);
        assert!(!config.admin.access.is_guarded());
        assert!(config.jobs.is_empty());
    }

    #[test]
    fn a_postgres_store_takes_its_password_from_a_file_or_the_environment_never_printed() {
        let dir = std::env::temp_dir().join(format!("sundial-config-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("pw");
        std::fs::write(&file, "from-file\n").unwrap();
        let text = format!(
            "[store]\nkind = \"postgres\"\nurl = \"postgres://sundial@db:5432/jobs\"\nschema = \"prod\"\n\
             pool_size = 4\nconnect_timeout_seconds = 2\noperation_timeout_seconds = 0.5\npassword_file = \"{}\"",
            file.display()
        );
        let env = BTreeMap::from([(STORE_PASSWORD_ENV.to_owned(), "from-env".to_owned())]);
        let StoreConfig::Postgres(store) = NodeFileConfig::parse(&text, &env).unwrap().store else { panic!() };
        assert_eq!(store.password.as_deref(), Some("from-file"), "the file wins");
        assert_eq!((store.schema.as_str(), store.pool_size), ("prod", 4));
        assert_eq!(
            (store.connect_timeout, store.operation_timeout),
            (Duration::from_secs(2), Duration::from_millis(500))
        );
        assert!(!format!("{store:?}").contains("from-file"), "the password is never printed");
        let options = store.options().unwrap();
        assert_eq!(options.config.get_password(), Some(&b"from-file"[..]));
        let text = "[store]\nkind = \"postgres\"\nurl = \"postgres://sundial@db/jobs\"";
        let StoreConfig::Postgres(store) = NodeFileConfig::parse(text, &env).unwrap().store else { panic!() };
        assert_eq!((store.password.as_deref(), store.schema.as_str()), (Some("from-env"), "sundial"));
        let StoreConfig::Postgres(store) = NodeFileConfig::parse(text, &BTreeMap::new()).unwrap().store else {
            panic!()
        };
        assert_eq!(store.password, None, "then the URL's, if any");
        std::fs::write(&file, "\n").unwrap();
        let empty = text.replace("jobs\"", &format!("jobs\"\npassword_file = \"{}\"", file.display()));
        assert_eq!(NodeFileConfig::parse(&empty, &env).unwrap_err().key.as_deref(), Some("store.password_file"));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn errors_name_the_key() {
        let cases = [
            ("[scheduler]\nmax_concurrent_runs = 0", "scheduler.max_concurrent_runs"),
            ("[store]\nkind = \"memory\"\ncluster_file = \"x\"", "store.cluster_file"),
            ("[store]\ntransaction_timeout_seconds = 5", "store.transaction_timeout_seconds"),
            ("[store]\nkind = \"fdb\"\ntransaction_timeout_seconds = 0", "store.transaction_timeout_seconds"),
            ("[store]\nkind = \"fdb\"\ntransaction_timeout_seconds = 0.5", "store.transaction_timeout_seconds"),
            ("[store]\nkind = \"fdb\"\ntransaction_timeout_seconds = 3601", "store.transaction_timeout_seconds"),
            ("[store]\nkind = \"fdb\"\ntransaction_timeout_seconds = nan", "store.transaction_timeout_seconds"),
            ("[store]\nkind = \"postgres\"", "store.url"),
            ("[store]\nkind = \"postgres\"\nurl = \"postgres://h:port/db\"", "store.url"),
            ("[store]\nkind = \"postgres\"\nurl = \"postgres://h/db\"\nschema = \"Bad-Name\"", "store.schema"),
            ("[store]\nkind = \"postgres\"\nurl = \"postgres://h/db\"\npool_size = 0", "store.pool_size"),
            ("[store]\nkind = \"postgres\"\nurl = \"postgres://h/db\"\nconnect_timeout_seconds = 0", "store.connect_timeout_seconds"),
            ("[store]\nkind = \"postgres\"\nurl = \"postgres://h/db\"\noperation_timeout_seconds = \"5\"", "store.operation_timeout_seconds"),
            ("[store]\nkind = \"postgres\"\nurl = \"postgres://h/db\"\npassword_file = \"/nonexistent/pw\"", "store.password_file"),
            ("[store]\nkind = \"postgres\"\nurl = \"postgres://h/db\"\nmax_runs = 5", "store.max_runs"),
            ("[store]\nurl = \"postgres://h/db\"", "store.url"),
            ("[store]\nkind = \"fdb\"\nschema = \"s\"", "store.schema"),
            ("[leader]\nlease_name = \"x\"", "leader.lease_name"),
            ("[leader]\nkind = \"kubernetes\"\nlease_name = \"Not_A_Name\"", "leader.lease_name"),
            ("[leader]\nkind = \"kubernetes\"\napi_url = \"http://127.0.0.1:8001\"", "leader.namespace"),
            ("[leader]\nkind = \"kubernetes\"\nnamespace = \"jobs\"", "leader.api_url"),
            ("[leader]\nkind = \"kubernetes\"\napi_url = \"ftp://x\"\nnamespace = \"jobs\"", "leader.api_url"),
            ("[leader]\nkind = \"kubernetes\"\nidentity = \"\"", "leader.identity"),
            ("[admin]\nlisten = \"nowhere\"", "admin.listen"),
            ("[admin]\nlisten = \"0.0.0.0:7600\"", "admin.listen"),
            ("[admin]\ntoken = \"short\"", "admin.token"),
            ("[admin]\n[[admin.tokens]]\nname = \"a\"\nrole = \"read\"", "admin.tokens[0]"),
            ("[calendars.x]\nkind = \"weekly\"\ndays = [\"caturday\"]", "calendars.x.days"),
            ("[calendars.x]\nkind = \"composite\"\nmembers = [\"y\"]", "calendars.x.members"),
            ("[[jobs]]\nname = \"a\"\ntype = \"log\"\ntriggers = [{ name = \"t\", schedule = \"cron nope\" }]", "jobs[0] (a).triggers[0].schedule"),
            ("[[jobs]]\nname = \"a\"\ntype = \"shell\"", "jobs[0] (a)"),
            ("[[jobs]]\nname = \"a\"\ntype = \"log\"\n[[jobs]]\nname = \"a\"\ntype = \"log\"", "jobs[1].name"),
            (
                "[[jobs]]\nname = \"a\"\ntype = \"log\"\ntriggers = [{ name = \"t\", schedule = \"cron * * * * * * calendar=none\" }]",
                "jobs[0] (a)",
            ),
        ];
        for (text, key) in cases {
            let error = parse(text).unwrap_err();
            assert_eq!(error.key.as_deref(), Some(key), "{text}: {error}");
        }
        let unknown = parse("[scheduler]\npoll_interval_seconds = 1\n[shceduler]\nx = 1").unwrap_err();
        assert!(unknown.to_string().contains("line 3"), "{unknown}");
        assert!(unknown.to_string().contains("shceduler"), "{unknown}");
        let http = parse("[[jobs]]\nname = \"a\"\ntype = \"http\"\ndata = { url = \"ftp://x\" }").unwrap_err();
        assert!(http.problem.contains("only http and https"), "{http}");
    }

    #[test]
    fn the_environment_overrides_the_file() {
        let env = BTreeMap::from([
            ("SUNDIAL_MAX_CONCURRENT_RUNS".to_owned(), "7".to_owned()),
            (ADMIN_TOKEN_ENV.to_owned(), "0123456789abcdef0123".to_owned()),
            ("SUNDIAL_ADMIN_LISTEN".to_owned(), "0.0.0.0:9000".to_owned()),
        ]);
        let config = NodeFileConfig::parse("[scheduler]\nmax_concurrent_runs = 3", &env).unwrap();
        assert_eq!(config.options.max_concurrent_runs, 7);
        assert_eq!(config.admin.listen.port(), 9000);
        let env = |names: &[&str]| names.iter().map(|n| ((*n).to_owned(), "1".to_owned())).collect();
        let misses = near_misses(&env(&[
            "SUNDIAL_POLL_INTERVAL",
            "SUNDIAL_MAX_CONCURENT_RUNS",
            "sundial_lease_ttl_seconds",
            "SUNDIAL_ADMIN",
            "SUNDIAL_LEASE_TTL_SECONDS",
            "SUNDIAL_node_timeout_seconds",
            "SUNDIAL_admin_listen",
            "SUNDIAL_JOB",
            "SUNDIAL_SOMETHING_ELSE_ENTIRELY",
            "PATH",
        ]));
        let pairs: Vec<(&str, &str)> = misses.iter().map(|(a, b)| (a.as_str(), b.as_str())).collect();
        assert_eq!(
            pairs,
            [
                ("SUNDIAL_ADMIN", "SUNDIAL_ADMIN_TOKEN"),
                ("SUNDIAL_MAX_CONCURENT_RUNS", "SUNDIAL_MAX_CONCURRENT_RUNS"),
                ("SUNDIAL_POLL_INTERVAL", "SUNDIAL_POLL_INTERVAL_SECONDS"),
                ("SUNDIAL_admin_listen", "SUNDIAL_ADMIN_LISTEN"),
            ],
            "names read (options in any case after the prefix), run names, far names and \
             ones without the prefix are left alone"
        );
        let bad = BTreeMap::from([("SUNDIAL_MAX_CONCURRENT_RUNS".to_owned(), "zero".to_owned())]);
        assert_eq!(NodeFileConfig::defaults(&bad).unwrap_err().key.as_deref(), Some("SUNDIAL_MAX_CONCURRENT_RUNS"));
    }

    #[test]
    fn fdb_without_the_feature_says_so() {
        let result = parse("[store]\nkind = \"fdb\"");
        if cfg!(feature = "fdb") {
            assert_eq!(result.unwrap().store, StoreConfig::Fdb { cluster_file: None, transaction_timeout: None });
        } else {
            assert!(result.unwrap_err().problem.contains("without FoundationDB"));
        }
    }

    #[test]
    fn an_fdb_store_takes_its_transaction_timeout_in_seconds() {
        for (text, seconds) in [("1", 1.0), ("2.5", 2.5), ("3600", 3600.0)] {
            let result = parse(&format!("[store]\nkind = \"fdb\"\ntransaction_timeout_seconds = {text}"));
            if cfg!(feature = "fdb") {
                let timeout = Some(Duration::from_secs_f64(seconds));
                assert_eq!(
                    result.unwrap().store,
                    StoreConfig::Fdb { cluster_file: None, transaction_timeout: timeout }
                );
            } else {
                // A valid timeout passes its own check and meets the build's refusal.
                assert!(result.unwrap_err().problem.contains("without FoundationDB"), "{text}");
            }
        }
        let bad = parse("[store]\nkind = \"fdb\"\ntransaction_timeout_seconds = 0").unwrap_err();
        assert!(bad.problem.contains("from 1 to 3600, got 0"), "{bad}");
        let text = parse("[store]\nkind = \"fdb\"\ntransaction_timeout_seconds = \"10s\"").unwrap_err();
        assert_eq!(text.key.as_deref(), Some("store.transaction_timeout_seconds"));
        assert!(text.problem.contains("got \"10s\""), "{text}");
    }
}
