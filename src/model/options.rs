//! Node options (SPEC §13): ten keys with defaults, read from TOML and from `SUNDIAL_*`
//! environment variables. Every invalid value is rejected with a message naming the key.

use std::fmt;
use std::time::Duration;

use crate::entropy::Entropy;
use crate::name::ResourceName;

/// The longest duration option: ten years, far beyond any real setting.
const SECONDS_MAX: f64 = 10.0 * 365.0 * 86_400.0;
/// The longest node id, in bytes.
pub const NODE_ID_LEN_MAX: usize = 256;
/// The prefix of the environment variables read by [`SchedulerOptions::apply_env`].
pub const ENV_PREFIX: &str = "SUNDIAL_";

/// The scheduler's options on one node. `Default` gives the documented defaults.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SchedulerOptions {
    /// `poll_interval_seconds` (> 0, default 1): the poll cycle period.
    pub poll_interval: Duration,
    /// `node_id` (default `host:pid:8 random chars`, see [`SchedulerOptions::node_id_or_default`]).
    pub node_id: Option<String>,
    /// `max_concurrent_runs` (≥ 1, default 32): jobs running at once on this node. A run
    /// takes one of these slots at its start instant and frees it as its job returns (before
    /// its end is recorded); runs acquired ahead wait for their instant without one (see
    /// [`held_runs_limit`](crate::rules::held_runs_limit) for how many a node takes on).
    pub max_concurrent_runs: u32,
    /// `acquire_batch_size` (≥ 1; unset by default): fires one acquisition takes at most.
    /// Unset, an acquisition takes what is due within the lead and fits the node's free
    /// slots, up to [`AUTO_ACQUIRE_BATCH`](crate::rules::AUTO_ACQUIRE_BATCH) per
    /// transaction; set, it is a cap (a smaller transaction per acquisition, for a slow or
    /// contended store). Either way a node asks for less while its acquisitions outgrow the
    /// store's transaction limits (see [`AcquisitionBatch`](crate::rules::AcquisitionBatch)).
    pub acquire_batch_size: Option<u32>,
    /// `misfire_threshold_seconds` (≥ 0, default 60): lateness that counts as misfire.
    pub misfire_threshold: Duration,
    /// `lease_resource` (name grammar, default `scheduling.jobs`).
    pub lease_resource: ResourceName,
    /// `lease_ttl_seconds` (> 0, default 30).
    pub lease_ttl: Duration,
    /// `node_timeout_seconds` (> 0, default 90): heartbeat age that means lost.
    pub node_timeout: Duration,
    /// `housekeeping_interval_seconds` (> 0, default 60): leader maintenance period.
    pub housekeeping_interval: Duration,
    /// `history_retention_days` (≥ 0, default 7); zero keeps history forever.
    pub history_retention: Duration,
}

impl Default for SchedulerOptions {
    fn default() -> Self {
        Self {
            poll_interval: Duration::from_secs(1),
            node_id: None,
            max_concurrent_runs: 32,
            acquire_batch_size: None,
            misfire_threshold: Duration::from_secs(60),
            lease_resource: ResourceName::new("scheduling.jobs").unwrap_or_else(|_| unreachable!("valid literal")),
            lease_ttl: Duration::from_secs(30),
            node_timeout: Duration::from_secs(90),
            housekeeping_interval: Duration::from_secs(60),
            history_retention: Duration::from_secs(7 * 86_400),
        }
    }
}

/// An option that could not be read, naming the key.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("option '{key}': {problem}")]
pub struct OptionsError {
    /// The key (TOML name, or the environment variable).
    pub key: String,
    /// What is wrong with its value.
    pub problem: String,
}

/// One raw value, from TOML or from the environment (always text there).
enum Raw<'a> {
    Toml(&'a toml::Value),
    Text(&'a str),
}

impl fmt::Display for Raw<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Raw::Toml(value) => write!(f, "{value}"),
            Raw::Text(text) => write!(f, "'{text}'"),
        }
    }
}

/// The keys, in the order of SPEC §13.
pub const OPTION_KEYS: [&str; 10] = [
    "poll_interval_seconds",
    "node_id",
    "max_concurrent_runs",
    "acquire_batch_size",
    "misfire_threshold_seconds",
    "lease_resource",
    "lease_ttl_seconds",
    "node_timeout_seconds",
    "housekeeping_interval_seconds",
    "history_retention_days",
];

/// The option a variable sets, if any: `SUNDIAL_` then the key in any case
/// (`SUNDIAL_POLL_INTERVAL_SECONDS` and `SUNDIAL_poll_interval_seconds` set
/// `poll_interval_seconds`), as [`SchedulerOptions::apply_env`] reads them.
#[must_use]
pub fn env_option(name: &str) -> Option<&'static str> {
    let key = name.strip_prefix(ENV_PREFIX)?;
    OPTION_KEYS.iter().copied().find(|k| k.eq_ignore_ascii_case(key))
}

impl SchedulerOptions {
    /// Defaults overlaid with the keys of a TOML document (top-level keys).
    ///
    /// # Errors
    /// [`OptionsError`] for bad TOML, an unknown key or an invalid value.
    pub fn from_toml_str(text: &str) -> Result<Self, OptionsError> {
        let table: toml::Table = toml::from_str(text)
            .map_err(|e| OptionsError { key: "(file)".into(), problem: format!("not valid TOML: {}", e.message()) })?;
        let mut options = Self::default();
        options.apply_toml(&table)?;
        Ok(options)
    }

    /// Overlays the keys of a TOML table (e.g. a config file's `[scheduler]` section).
    ///
    /// # Errors
    /// [`OptionsError`] for an unknown key or an invalid value; `self` is then unchanged.
    pub fn apply_toml(&mut self, table: &toml::Table) -> Result<(), OptionsError> {
        let mut next = self.clone();
        for (key, value) in table {
            next.set(key, key, Raw::Toml(value))?;
        }
        *self = next;
        Ok(())
    }

    /// Overlays `SUNDIAL_<KEY>` variables (e.g. `SUNDIAL_POLL_INTERVAL_SECONDS=0.5`) from
    /// `vars`. Variables with other names, including other `SUNDIAL_` ones, are ignored.
    ///
    /// # Errors
    /// [`OptionsError`] naming the variable; `self` is then unchanged.
    pub fn apply_env<K: AsRef<str>, V: AsRef<str>>(
        &mut self,
        vars: impl IntoIterator<Item = (K, V)>,
    ) -> Result<(), OptionsError> {
        let mut next = self.clone();
        for (name, value) in vars {
            let name = name.as_ref();
            if let Some(key) = env_option(name) {
                next.set(name, key, Raw::Text(value.as_ref().trim()))?;
            }
        }
        *self = next;
        Ok(())
    }

    /// Defaults, then the TOML document if given, then the process environment.
    ///
    /// # Errors
    /// [`OptionsError`] for the first invalid source value.
    pub fn load(toml_text: Option<&str>) -> Result<Self, OptionsError> {
        let mut options = match toml_text {
            Some(text) => Self::from_toml_str(text)?,
            None => Self::default(),
        };
        options.apply_env(std::env::vars())?;
        Ok(options)
    }

    /// The configured node id, or `host:pid:` followed by 8 random characters from
    /// `entropy` (so simulations get reproducible ids).
    pub fn node_id_or_default(&self, host: &str, pid: u32, entropy: &mut Entropy) -> String {
        match &self.node_id {
            Some(id) => id.clone(),
            None => format!("{host}:{pid}:{}", entropy.alphanumeric(8)),
        }
    }

    /// History retention, `None` when history is kept forever.
    pub fn history_retention(&self) -> Option<Duration> {
        (!self.history_retention.is_zero()).then_some(self.history_retention)
    }

    fn set(&mut self, shown: &str, key: &str, raw: Raw<'_>) -> Result<(), OptionsError> {
        let fail = |problem: String| OptionsError { key: shown.to_owned(), problem };
        match key {
            "poll_interval_seconds" => self.poll_interval = seconds(&raw, false).map_err(fail)?,
            "misfire_threshold_seconds" => self.misfire_threshold = seconds(&raw, true).map_err(fail)?,
            "lease_ttl_seconds" => self.lease_ttl = seconds(&raw, false).map_err(fail)?,
            "node_timeout_seconds" => self.node_timeout = seconds(&raw, false).map_err(fail)?,
            "housekeeping_interval_seconds" => self.housekeeping_interval = seconds(&raw, false).map_err(fail)?,
            "history_retention_days" => {
                let days = number(&raw).map_err(fail)?;
                if !(0.0..=SECONDS_MAX / 86_400.0).contains(&days) {
                    return Err(fail(format!("must be from 0 to 3650 days, got {raw}")));
                }
                self.history_retention = Duration::from_secs_f64(days * 86_400.0);
            }
            "max_concurrent_runs" => self.max_concurrent_runs = count(&raw, 1_000_000).map_err(fail)?,
            "acquire_batch_size" => self.acquire_batch_size = Some(count(&raw, 10_000).map_err(fail)?),
            "lease_resource" => {
                let text = text(&raw).map_err(fail)?;
                self.lease_resource = ResourceName::new(text).map_err(|e| fail(e.to_string()))?;
            }
            "node_id" => {
                let text = text(&raw).map_err(fail)?;
                if text.is_empty() || text.len() > NODE_ID_LEN_MAX {
                    return Err(fail(format!("must be 1 to {NODE_ID_LEN_MAX} bytes long")));
                }
                if text.chars().any(|c| c.is_whitespace() || c.is_control()) {
                    return Err(fail("must not contain whitespace or control characters".into()));
                }
                self.node_id = Some(text.to_owned());
            }
            _ => return Err(fail(format!("unknown option; known options are {}", OPTION_KEYS.join(", ")))),
        }
        Ok(())
    }
}

fn number(raw: &Raw<'_>) -> Result<f64, String> {
    let value = match raw {
        Raw::Toml(toml::Value::Integer(n)) => *n as f64,
        Raw::Toml(toml::Value::Float(x)) => *x,
        Raw::Toml(other) => return Err(format!("must be a number, got {other}")),
        Raw::Text(text) => text.parse::<f64>().map_err(|_| format!("must be a number, got '{text}'"))?,
    };
    if value.is_finite() {
        Ok(value)
    } else {
        Err(format!("must be a finite number, got {raw}"))
    }
}

fn seconds(raw: &Raw<'_>, zero_allowed: bool) -> Result<Duration, String> {
    let value = number(raw)?;
    if value < 0.0 || (!zero_allowed && value == 0.0) {
        let bound = if zero_allowed { "at least 0" } else { "greater than 0" };
        return Err(format!("must be {bound} seconds, got {raw}"));
    }
    if value > SECONDS_MAX {
        return Err(format!("must be at most ten years, got {raw}"));
    }
    Ok(Duration::from_secs_f64(value))
}

fn count(raw: &Raw<'_>, max: u32) -> Result<u32, String> {
    let value = match raw {
        Raw::Toml(toml::Value::Integer(n)) => *n,
        Raw::Toml(other) => return Err(format!("must be a whole number, got {other}")),
        Raw::Text(text) => text.parse::<i64>().map_err(|_| format!("must be a whole number, got '{text}'"))?,
    };
    if value < 1 || value > i64::from(max) {
        return Err(format!("must be from 1 to {max}, got {value}"));
    }
    Ok(value as u32)
}

fn text<'a>(raw: &'a Raw<'a>) -> Result<&'a str, String> {
    match raw {
        Raw::Toml(toml::Value::String(text)) => Ok(text),
        Raw::Toml(other) => Err(format!("must be a string, got {other}")),
        Raw::Text(text) => Ok(text),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_of_the_spec() {
        let o = SchedulerOptions::default();
        assert_eq!(o.poll_interval, Duration::from_secs(1));
        assert_eq!(o.max_concurrent_runs, 32);
        assert_eq!(o.acquire_batch_size, None);
        assert_eq!(o.misfire_threshold, Duration::from_secs(60));
        assert_eq!(o.lease_resource.as_str(), "scheduling.jobs");
        assert_eq!(o.lease_ttl, Duration::from_secs(30));
        assert_eq!(o.node_timeout, Duration::from_secs(90));
        assert_eq!(o.housekeeping_interval, Duration::from_secs(60));
        assert_eq!(o.history_retention(), Some(Duration::from_secs(7 * 86_400)));
        let mut entropy = Entropy::from_seed(1);
        let id = o.node_id_or_default("host", 42, &mut entropy);
        assert!(id.starts_with("host:42:") && id.len() == "host:42:".len() + 8, "{id}");
    }

    #[test]
    fn toml_sets_every_key() {
        let o = SchedulerOptions::from_toml_str(
            r#"
            poll_interval_seconds = 0.25
            node_id = "node-a"
            max_concurrent_runs = 4
            acquire_batch_size = 2
            misfire_threshold_seconds = 0
            lease_resource = "my.lease"
            lease_ttl_seconds = 10
            node_timeout_seconds = 20
            housekeeping_interval_seconds = 5
            history_retention_days = 0
            "#,
        )
        .unwrap();
        assert_eq!(o.poll_interval, Duration::from_millis(250));
        assert_eq!(o.node_id.as_deref(), Some("node-a"));
        assert_eq!((o.max_concurrent_runs, o.acquire_batch_size), (4, Some(2)));
        assert_eq!(o.misfire_threshold, Duration::ZERO);
        assert_eq!(o.lease_resource.as_str(), "my.lease");
        assert_eq!(
            (o.lease_ttl, o.node_timeout, o.housekeeping_interval),
            (Duration::from_secs(10), Duration::from_secs(20), Duration::from_secs(5))
        );
        assert_eq!(o.history_retention(), None);
    }

    #[test]
    fn invalid_values_name_the_key() {
        let cases = [
            ("poll_interval_seconds = 0", "poll_interval_seconds"),
            ("poll_interval_seconds = -1", "poll_interval_seconds"),
            ("poll_interval_seconds = \"fast\"", "poll_interval_seconds"),
            ("max_concurrent_runs = 0", "max_concurrent_runs"),
            ("max_concurrent_runs = 1.5", "max_concurrent_runs"),
            ("acquire_batch_size = -3", "acquire_batch_size"),
            ("misfire_threshold_seconds = -0.1", "misfire_threshold_seconds"),
            ("lease_resource = \"Bad Name\"", "lease_resource"),
            ("lease_ttl_seconds = nan", "lease_ttl_seconds"),
            ("node_timeout_seconds = 0", "node_timeout_seconds"),
            ("housekeeping_interval_seconds = 1e30", "housekeeping_interval_seconds"),
            ("history_retention_days = -1", "history_retention_days"),
            ("node_id = \"\"", "node_id"),
            ("node_id = \"a b\"", "node_id"),
            ("pol_interval_seconds = 1", "pol_interval_seconds"),
            ("= broken", "(file)"),
        ];
        for (text, key) in cases {
            let err = SchedulerOptions::from_toml_str(text).unwrap_err();
            assert_eq!(err.key, key, "{text}: {err}");
            assert!(err.to_string().starts_with(&format!("option '{key}'")), "{err}");
        }
    }

    #[test]
    fn environment_overrides_and_names_the_variable() {
        let mut o = SchedulerOptions::from_toml_str("max_concurrent_runs = 4").unwrap();
        o.apply_env([("SUNDIAL_MAX_CONCURRENT_RUNS", "8"), ("SUNDIAL_CONFIG", "x.toml"), ("PATH", "/bin")]).unwrap();
        assert_eq!(env_option("SUNDIAL_node_timeout_SECONDS"), Some("node_timeout_seconds"));
        assert_eq!((env_option("SUNDIAL_CONFIG"), env_option("NODE_TIMEOUT_SECONDS")), (None, None));
        assert_eq!(o.max_concurrent_runs, 8);
        let before = o.clone();
        let err =
            o.apply_env([("SUNDIAL_LEASE_TTL_SECONDS", "5"), ("SUNDIAL_NODE_TIMEOUT_SECONDS", "soon")]).unwrap_err();
        assert_eq!(err.key, "SUNDIAL_NODE_TIMEOUT_SECONDS");
        assert_eq!(o, before, "a failed overlay changes nothing");
    }
}
