//! Job definitions as people write them: in the node's TOML config, in the admin API's
//! JSON, and in the files `sundial jobs apply -f` reads.
//!
//! A [`JobSpec`] is a [`JobDefinition`] with readable fields: schedules in the text form
//! of SPEC §3, durations as `"90s"`/`"1h 30m"` (or a number of seconds), policies by name.
//! Converting either way is lossless, so what `jobs show` prints can be applied again.
//! A [`CalendarSpec`] is a calendar as a node config's `[calendars.<name>]` writes it.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use chrono::{NaiveDate, NaiveTime};

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use sundial::calendar::{CompositeCalendar, CronCalendar, DailyCalendar, HolidayCalendar, JobCalendar, WeeklyCalendar};
use sundial::error::SchedulingError;
use sundial::job::{
    Backoff, JobDefinition, JobTriggerDefinition, JobTypeKey, JsonObject, MisfirePolicy, RetryPolicy, PRIORITY_DEFAULT,
};
use sundial::name::{CalendarName, JobName, TriggerName};
use sundial::schedule::JobSchedule;
use sundial::timezone::parse_time_zone;

/// A duration written as `"30s"`, `"5m"`, `"1h 30m"`, `"250ms"` or a number of seconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DurationText(pub Duration);

impl DurationText {
    /// Parses the text form.
    ///
    /// # Errors
    /// A message naming the problem.
    pub fn parse(text: &str) -> Result<Self, String> {
        let text = text.trim();
        if let Ok(seconds) = text.parse::<f64>() {
            return Self::from_seconds(seconds);
        }
        humantime::parse_duration(text)
            .map(Self)
            .map_err(|e| format!("'{text}' is not a duration ({e}); write e.g. \"90s\", \"5m\" or \"1h 30m\""))
    }

    fn from_seconds(seconds: f64) -> Result<Self, String> {
        Duration::try_from_secs_f64(seconds)
            .map(Self)
            .map_err(|_| format!("{seconds} is not a duration in seconds (must be finite and not negative)"))
    }
}

impl fmt::Display for DurationText {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.0.is_zero() {
            return f.write_str("0s");
        }
        write!(f, "{}", humantime::format_duration(self.0))
    }
}

impl Serialize for DurationText {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for DurationText {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        /// Text or a number of seconds; anything else is refused saying which are welcome.
        struct Visitor;
        impl serde::de::Visitor<'_> for Visitor {
            type Value = DurationText;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a duration such as \"90s\", \"5m\" or \"1h 30m\", or a number of seconds")
            }
            fn visit_str<E: serde::de::Error>(self, text: &str) -> Result<DurationText, E> {
                DurationText::parse(text).map_err(E::custom)
            }
            fn visit_f64<E: serde::de::Error>(self, seconds: f64) -> Result<DurationText, E> {
                DurationText::from_seconds(seconds).map_err(E::custom)
            }
            fn visit_u64<E: serde::de::Error>(self, seconds: u64) -> Result<DurationText, E> {
                Ok(DurationText(Duration::from_secs(seconds)))
            }
            #[allow(clippy::cast_precision_loss, reason = "a negative number is refused by from_seconds")]
            fn visit_i64<E: serde::de::Error>(self, seconds: i64) -> Result<DurationText, E> {
                DurationText::from_seconds(seconds as f64).map_err(E::custom)
            }
        }
        deserializer.deserialize_any(Visitor)
    }
}

/// How failed runs retry (SPEC §8).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RetrySpec {
    /// Retries at most, 1–100.
    pub max_retries: u32,
    /// The delay before the first retry.
    pub delay: DurationText,
    /// `fixed` (default) or `exponential`.
    #[serde(default)]
    pub backoff: BackoffSpec,
    /// The longest delay of exponential backoff.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_delay: Option<DurationText>,
}

/// [`Backoff`] by name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum BackoffSpec {
    /// The same delay every time.
    #[default]
    Fixed,
    /// Doubling delays.
    Exponential,
}

/// [`MisfirePolicy`] by name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum MisfireSpec {
    /// Run once now, then continue from now.
    #[default]
    RunOnce,
    /// No catch-up run.
    Skip,
    /// Every missed fire, in order.
    RunAll,
}

/// One trigger of a [`JobSpec`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TriggerSpec {
    /// Unique within the job.
    pub name: String,
    /// Schedule text (SPEC §3), e.g. `cron 0 0 9 * * MON-FRI tz=Asia/Shanghai`.
    pub schedule: String,
    /// Overrides same-named keys of the job's data.
    #[serde(default, skip_serializing_if = "JsonObject::is_empty")]
    pub data: JsonObject,
    /// Higher runs first; default 5.
    #[serde(default = "default_priority")]
    pub priority: i32,
    /// What to do with a late fire; default `run_once`.
    #[serde(default)]
    pub misfire: MisfireSpec,
    /// Free text.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
}

fn default_priority() -> i32 {
    PRIORITY_DEFAULT
}

/// A job as people write it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct JobSpec {
    /// Unique in the store.
    pub name: String,
    /// The registered job type: `shell`, `http`, `log`, or an embedder's key.
    #[serde(rename = "type")]
    pub job_type: String,
    /// Free text.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// The job's data: for the built-in kinds, their parameters.
    #[serde(default, skip_serializing_if = "JsonObject::is_empty")]
    pub data: JsonObject,
    /// Several runs at once are allowed.
    #[serde(default)]
    pub allow_concurrent: bool,
    /// Every node runs it on its own clock.
    #[serde(default)]
    pub run_on_every_instance: bool,
    /// A run on a lost node is re-run once elsewhere.
    #[serde(default)]
    pub requests_recovery: bool,
    /// A run's time limit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout: Option<DurationText>,
    /// How failed runs retry.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry: Option<RetrySpec>,
    /// When it runs; none = only by hand.
    #[serde(default)]
    pub triggers: Vec<TriggerSpec>,
}

/// A spec that does not make a valid definition: the key at fault and the problem.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SpecError {
    /// The key, e.g. `jobs[0] (backup).triggers[1].schedule`.
    pub key: String,
    /// What is wrong.
    pub problem: String,
}

impl fmt::Display for SpecError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.key, self.problem)
    }
}

impl std::error::Error for SpecError {}

impl From<SpecError> for SchedulingError {
    /// `SCHEDULING_VALIDATION_001` with the key and the problem.
    fn from(error: SpecError) -> Self {
        SchedulingError::invalid_definition(error.to_string())
    }
}

fn invalid(path: &str, problem: impl fmt::Display) -> SpecError {
    SpecError { key: path.to_owned(), problem: problem.to_string() }
}

impl JobSpec {
    /// The definition, checked field by field; `path` prefixes every error (e.g.
    /// `jobs[2]`), so the message names the key at fault.
    ///
    /// # Errors
    /// [`SpecError`] naming the field and the problem (it converts to
    /// `SCHEDULING_VALIDATION_001`). Calendars and job types are checked later, against a
    /// registry.
    pub fn to_definition(&self, path: &str) -> Result<JobDefinition, SpecError> {
        let name = JobName::new(self.name.clone()).map_err(|e| invalid(&format!("{path}.name"), e))?;
        let path = format!("{path} ({name})");
        let job_type = JobTypeKey::new(self.job_type.clone()).map_err(|e| invalid(&format!("{path}.type"), e))?;
        let mut def = JobDefinition::new(name, job_type).with_data(self.data.clone());
        def.description = self.description.clone();
        def.allow_concurrent = self.allow_concurrent;
        def.run_on_every_instance = self.run_on_every_instance;
        def.requests_recovery = self.requests_recovery;
        def.timeout = self.timeout.map(|t| t.0);
        if let Some(retry) = &self.retry {
            let policy = match retry.backoff {
                BackoffSpec::Fixed if retry.max_delay.is_some() => {
                    return Err(invalid(&format!("{path}.retry.max_delay"), "only exponential backoff has a max_delay"))
                }
                BackoffSpec::Fixed => RetryPolicy::fixed(retry.max_retries, retry.delay.0),
                BackoffSpec::Exponential => {
                    RetryPolicy::exponential(retry.max_retries, retry.delay.0, retry.max_delay.map(|d| d.0))
                }
            };
            def.retry = Some(policy.map_err(|e| invalid(&format!("{path}.retry"), reason(&e, &def.name)))?);
        }
        for (i, trigger) in self.triggers.iter().enumerate() {
            let at = format!("{path}.triggers[{i}]");
            let name = TriggerName::new(trigger.name.clone()).map_err(|e| invalid(&format!("{at}.name"), e))?;
            let schedule: JobSchedule = trigger.schedule.parse().map_err(|e| invalid(&format!("{at}.schedule"), e))?;
            let misfire = match trigger.misfire {
                MisfireSpec::RunOnce => MisfirePolicy::RunOnce,
                MisfireSpec::Skip => MisfirePolicy::Skip,
                MisfireSpec::RunAll => MisfirePolicy::RunAll,
            };
            let mut t = JobTriggerDefinition::new(name, schedule)
                .with_data(trigger.data.clone())
                .with_priority(trigger.priority)
                .with_misfire(misfire);
            t.description = trigger.description.clone();
            def = def.with_trigger(t);
        }
        def.validate(None).map_err(|e| invalid(&path, reason(&e, &def.name)))?;
        Ok(def)
    }

    /// The spec of a stored definition.
    pub fn from_definition(def: &JobDefinition) -> Self {
        Self {
            name: def.name.to_string(),
            job_type: def.job_type.to_string(),
            description: def.description.clone(),
            data: def.data.clone(),
            allow_concurrent: def.allow_concurrent,
            run_on_every_instance: def.run_on_every_instance,
            requests_recovery: def.requests_recovery,
            timeout: def.timeout.map(DurationText),
            retry: def.retry.map(|r| RetrySpec {
                max_retries: r.max_retries(),
                delay: DurationText(r.delay()),
                backoff: match r.backoff() {
                    Backoff::Fixed => BackoffSpec::Fixed,
                    Backoff::Exponential => BackoffSpec::Exponential,
                },
                max_delay: r.max_delay().map(DurationText),
            }),
            triggers: def
                .triggers
                .iter()
                .map(|t| TriggerSpec {
                    name: t.name.to_string(),
                    schedule: t.schedule.to_string(),
                    data: t.data.clone(),
                    priority: t.priority,
                    misfire: match t.misfire {
                        MisfirePolicy::RunOnce => MisfireSpec::RunOnce,
                        MisfirePolicy::Skip => MisfireSpec::Skip,
                        MisfirePolicy::RunAll => MisfireSpec::RunAll,
                    },
                    description: t.description.clone(),
                })
                .collect(),
        }
    }
}

/// A calendar as people write it: a `[calendars.<name>]` table of a node config, whose
/// `kind` says which of the core's calendars it is. Time zones are IANA names (UTC when
/// left out).
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(tag = "kind", rename_all = "lowercase", deny_unknown_fields)]
pub enum CalendarSpec {
    /// Whole days, e.g. public holidays (`"2026-12-25"`).
    Holidays {
        /// The days excluded, in `tz`.
        dates: Vec<NaiveDate>,
        /// Their time zone.
        #[serde(default)]
        tz: Option<String>,
    },
    /// Whole weekdays, e.g. `["sat", "sun"]`.
    Weekly {
        /// The weekdays excluded, in `tz`.
        days: Vec<String>,
        /// Their time zone.
        #[serde(default)]
        tz: Option<String>,
    },
    /// A time range every day, e.g. from `"22:00:00"` to `"06:00:00"` (across midnight).
    Daily {
        /// Its start, excluded.
        from: NaiveTime,
        /// Its end, not excluded.
        to: NaiveTime,
        /// Their time zone.
        #[serde(default)]
        tz: Option<String>,
    },
    /// The seconds a cron expression matches.
    Cron {
        /// The expression, in the cron dialect of schedules.
        expression: String,
        /// Its time zone.
        #[serde(default)]
        tz: Option<String>,
    },
    /// Excludes what any member excludes; members are plain (non-composite) calendars of
    /// the same set.
    Composite {
        /// The members' names.
        members: Vec<String>,
    },
}

/// The calendars `specs` describe, by name: plain ones first, then composites of them.
///
/// # Errors
/// [`SpecError`] keyed `calendars.<name>` (or one of its fields): an invalid name, time
/// zone, weekday, range or expression, or a composite member that is not a plain
/// calendar of `specs`.
pub fn calendars(
    specs: &BTreeMap<String, CalendarSpec>,
) -> Result<BTreeMap<CalendarName, Arc<dyn JobCalendar>>, SpecError> {
    let mut done: BTreeMap<CalendarName, Arc<dyn JobCalendar>> = BTreeMap::new();
    let mut composites = Vec::new();
    for (name, spec) in specs {
        let key = format!("calendars.{name}");
        let calendar_name = CalendarName::new(name.clone()).map_err(|e| invalid(&key, e))?;
        let tz = |tz: &Option<String>| match tz {
            None => Ok(chrono_tz::UTC),
            Some(id) => parse_time_zone(id).map_err(|e| invalid(&format!("{key}.tz"), e)),
        };
        let calendar: Arc<dyn JobCalendar> = match spec {
            CalendarSpec::Holidays { dates, tz: zone } => {
                Arc::new(HolidayCalendar::new(dates.iter().copied(), tz(zone)?))
            }
            CalendarSpec::Weekly { days, tz: zone } => {
                let days = days
                    .iter()
                    .map(|d| {
                        d.parse::<chrono::Weekday>()
                            .map_err(|_| invalid(&format!("{key}.days"), format!("'{d}' is not a weekday")))
                    })
                    .collect::<Result<Vec<_>, _>>()?;
                Arc::new(WeeklyCalendar::new(&days, tz(zone)?))
            }
            CalendarSpec::Daily { from, to, tz: zone } => {
                Arc::new(DailyCalendar::new(*from, *to, tz(zone)?).map_err(|e| invalid(&key, e))?)
            }
            CalendarSpec::Cron { expression, tz: zone } => {
                let expression = expression.parse().map_err(|e| invalid(&format!("{key}.expression"), e))?;
                Arc::new(CronCalendar::new(expression, tz(zone)?))
            }
            CalendarSpec::Composite { members } => {
                composites.push((calendar_name, key, members));
                continue;
            }
        };
        done.insert(calendar_name, calendar);
    }
    // Composites of plain calendars only: no cycles to detect, and one level is what
    // schedules need in practice.
    for (name, key, members) in composites {
        let mut parts = Vec::with_capacity(members.len());
        for member in members {
            let found =
                CalendarName::new(member.clone()).ok().and_then(|m| done.get(&m).cloned()).ok_or_else(|| {
                    invalid(&format!("{key}.members"), format!("'{member}' is not a (non-composite) calendar here"))
                })?;
            parts.push(found);
        }
        done.insert(name, Arc::new(CompositeCalendar::new(parts)));
    }
    Ok(done)
}

/// Deserializes a `T` from `de`. An error says where: `at`, then the path of the field it
/// is about (`` jobs[0].triggers[1]: missing field `schedule` ``), nothing more where it is
/// about the whole.
#[cfg(feature = "spec-files")]
pub(crate) fn deserialize_at<'de, T, D>(de: D, at: &str) -> Result<T, String>
where
    T: Deserialize<'de>,
    D: Deserializer<'de>,
    D::Error: Reason,
{
    use serde_path_to_error::Segment;
    serde_path_to_error::deserialize(de).map_err(|e| {
        let mut place = at.to_owned();
        for segment in e.path() {
            match segment {
                Segment::Seq { index } => place.push_str(&format!("[{index}]")),
                Segment::Map { key } | Segment::Enum { variant: key } => {
                    if !place.is_empty() {
                        place.push('.');
                    }
                    place.push_str(key);
                }
                // A key that did not parse: the error says what, and where in the text.
                Segment::Unknown => {}
            }
        }
        let reason = e.inner().reason();
        if place.is_empty() {
            reason
        } else {
            format!("{place}: {reason}")
        }
    })
}

/// A deserialization error's own words, without the keys that toml's `Display` adds
/// ([`deserialize_at`] says where).
#[cfg(feature = "spec-files")]
pub(crate) trait Reason {
    fn reason(&self) -> String;
}

#[cfg(feature = "spec-files")]
impl Reason for serde_json::Error {
    fn reason(&self) -> String {
        self.to_string()
    }
}

#[cfg(feature = "spec-files")]
impl Reason for toml::de::Error {
    fn reason(&self) -> String {
        self.message().to_owned()
    }
}

/// What a file of job specs holds (see [`read_file`]).
#[cfg(feature = "spec-files")]
#[derive(Debug, Clone)]
pub struct SpecFile {
    /// Its jobs as written.
    pub jobs: Vec<JobSpec>,
    /// The same jobs as definitions ([`JobSpec::to_definition`]), in the same order.
    pub definitions: Vec<JobDefinition>,
    /// The calendars of its `[calendars.<name>]` tables (a node config's), built and
    /// checked; none in a JSON file.
    pub calendars: BTreeMap<CalendarName, Arc<dyn JobCalendar>>,
}

/// Job specs read from a file: TOML (`[[jobs]]` tables and `[calendars.<name>]` ones, as
/// in a node config, whose other sections are ignored here; or one job's keys at the top
/// level) or JSON (an array of jobs, or one job), told apart by the extension `.toml` or
/// `.json`, and without one by whether the text parses as JSON. Every spec is checked with
/// [`JobSpec::to_definition`] and every calendar built, so a mistake names the file and
/// the key.
///
/// # Errors
/// A message naming the file: it cannot be read, does not parse, a job or a calendar is
/// invalid, or it holds no jobs.
#[cfg(feature = "spec-files")]
pub fn read_file(file: &std::path::Path) -> Result<SpecFile, String> {
    use serde_json::Value;
    let text = std::fs::read_to_string(file).map_err(|e| format!("{}: cannot read: {e}", file.display()))?;
    // A TOML file starting with `[[jobs]]` also starts with `[`: by extension first.
    let is_json = match file.extension().and_then(|e| e.to_str()).map(str::to_ascii_lowercase).as_deref() {
        Some("json") => true,
        Some("toml") => false,
        _ => serde_json::from_str::<Value>(&text).is_ok(),
    };
    let at = |e: String| format!("{}: {e}", file.display());
    // How a message names the i-th job: by its place in the JSON array, or in `[[jobs]]`.
    let item = |i: usize| if is_json { format!("[{i}]") } else { format!("jobs[{i}]") };
    let mut calendar_specs = BTreeMap::new();
    let specs = if is_json {
        match serde_json::from_str::<Value>(&text).map_err(|e| at(e.to_string()))? {
            Value::Array(items) => items
                .into_iter()
                .enumerate()
                .map(|(i, v)| deserialize_at(v, &item(i)).map_err(at))
                .collect::<Result<Vec<JobSpec>, _>>()?,
            other => vec![deserialize_at(other, "").map_err(at)?],
        }
    } else {
        let mut table: toml::Table = toml::from_str(&text).map_err(|e| at(e.message().to_owned()))?;
        if let Some(calendars) = table.remove("calendars") {
            calendar_specs = deserialize_at(calendars, "calendars").map_err(at)?;
        }
        match table.remove("jobs") {
            Some(toml::Value::Array(items)) => items
                .into_iter()
                .enumerate()
                .map(|(i, v)| deserialize_at(v, &item(i)).map_err(at))
                .collect::<Result<Vec<JobSpec>, _>>()?,
            Some(_) => return Err(at("`jobs` must be an array of tables ([[jobs]])".into())),
            None => {
                vec![deserialize_at(toml::Value::Table(table), "").map_err(at)?]
            }
        }
    };
    let definitions = specs
        .iter()
        .enumerate()
        .map(|(i, spec)| spec.to_definition(&item(i)).map_err(|e| at(e.to_string())))
        .collect::<Result<Vec<_>, _>>()?;
    // One job twice would be applied twice, the later silently replacing the earlier: as
    // a node config, the file is refused instead.
    let mut names = BTreeMap::new();
    for (i, def) in definitions.iter().enumerate() {
        if let Some(first) = names.insert(&def.name, i) {
            return Err(at(format!("{}.name: job '{}' is also {}", item(i), def.name, item(first))));
        }
    }
    if specs.is_empty() {
        return Err(at("no jobs in the file".into()));
    }
    let calendars = calendars(&calendar_specs).map_err(|e| at(e.to_string()))?;
    Ok(SpecFile { jobs: specs, definitions, calendars })
}

/// What is wrong, for a message that already says where and that the definition is
/// invalid: an invalid definition's bare reason (without the core's `job '<name>': `
/// prefix, since the caller's path names the job), else [`detail`].
pub(crate) fn reason(error: &SchedulingError, job: &JobName) -> String {
    match error {
        SchedulingError::InvalidDefinition { reason } => {
            reason.strip_prefix(&format!("job '{job}': ")).unwrap_or(reason).to_owned()
        }
        other => detail(other),
    }
}

/// An error's detail without its code prefix, for messages that add their own context.
pub(crate) fn detail(error: &SchedulingError) -> String {
    let text = error.to_string();
    match text.split_once(": ") {
        Some((code, rest)) if code == error.code() => rest.to_owned(),
        _ => text,
    }
}

#[cfg(all(test, feature = "spec-files"))]
mod tests {
    use super::*;

    fn spec(toml_text: &str) -> JobSpec {
        toml::from_str(toml_text).unwrap()
    }

    #[test]
    fn durations_read_text_and_seconds_and_print_text() {
        assert_eq!(DurationText::parse("90s").unwrap().0, Duration::from_secs(90));
        assert_eq!(DurationText::parse("1h 30m").unwrap().0, Duration::from_secs(5400));
        assert_eq!(DurationText::parse("2.5").unwrap().0, Duration::from_millis(2500));
        assert!(DurationText::parse("-1").is_err());
        assert!(DurationText::parse("soon").unwrap_err().contains("soon"));
        assert_eq!(DurationText(Duration::from_secs(5400)).to_string(), "1h 30m");
        // Deserialized: text, or seconds as any kind of number.
        let json = |text: &str| serde_json::from_str::<DurationText>(text).map(|d| d.0).map_err(|e| e.to_string());
        assert_eq!(json(r#""5m""#), Ok(Duration::from_secs(300)));
        assert_eq!(json("90"), Ok(Duration::from_secs(90)));
        assert_eq!(json("0.25"), Ok(Duration::from_millis(250)));
        assert!(json("-3").unwrap_err().contains("not a duration in seconds"));
        assert!(json("[]").unwrap_err().contains("expected a duration such as"));
        assert_eq!(
            toml::from_str::<RetrySpec>("max_retries = 1\ndelay = 7").map(|r| r.delay.0),
            Ok(Duration::from_secs(7))
        );
    }

    #[test]
    fn a_spec_converts_to_a_definition_and_back() {
        let s = spec(
            r#"
            name = "backup"
            type = "shell"
            timeout = "10m"
            retry = { max_retries = 3, delay = "30s", backoff = "exponential", max_delay = "5m" }
            data = { program = "/bin/true" }
            [[triggers]]
            name = "nightly"
            schedule = "cron 0 0 2 * * * tz=Europe/Berlin"
            misfire = "skip"
            priority = 7
            "#,
        );
        let def = s.to_definition("jobs[0]").unwrap();
        assert_eq!(def.timeout, Some(Duration::from_secs(600)));
        assert_eq!(def.retry.unwrap().max_delay(), Some(Duration::from_secs(300)));
        assert_eq!(def.triggers[0].misfire, MisfirePolicy::Skip);
        assert_eq!(def.triggers[0].priority, 7);
        let back = JobSpec::from_definition(&def);
        assert_eq!(back.to_definition("x").unwrap(), def);
        let json = serde_json::to_string(&back).unwrap();
        assert_eq!(serde_json::from_str::<JobSpec>(&json).unwrap(), back);
    }

    #[test]
    fn errors_name_the_field() {
        let mut s = spec("name = \"a\"\ntype = \"log\"\n[[triggers]]\nname = \"t\"\nschedule = \"cron 61 * * * * *\"");
        let e = s.to_definition("jobs[0]").unwrap_err();
        assert_eq!(e.key, "jobs[0] (a).triggers[0].schedule");
        assert_eq!(SchedulingError::from(e).code(), "SCHEDULING_VALIDATION_001");
        s.triggers.clear();
        s.name = "Bad Name".into();
        assert!(s.to_definition("jobs[0]").unwrap_err().to_string().contains("jobs[0].name"));
        let bad_retry = spec("name = \"a\"\ntype = \"log\"\nretry = { max_retries = 0, delay = \"1s\" }");
        assert_eq!(
            bad_retry.to_definition("j").unwrap_err().to_string(),
            "j (a).retry: max_retries 0 must be from 1 to 100",
            "said once, without the summary or the job name again"
        );
        let long = spec("name = \"a\"\ntype = \"log\"\ntimeout = \"31d\"");
        assert_eq!(
            long.to_definition("j").unwrap_err().to_string(),
            "j (a): timeout 31.00:00:00 must be greater than zero and at most 30 days"
        );
        assert!(toml::from_str::<JobSpec>("name = \"a\"\ntype = \"log\"\ncolour = 1").is_err());
    }

    /// Writes `text` to a fresh file named `name` and reads it back with [`read_file`].
    fn read(name: &str, text: &str) -> Result<SpecFile, String> {
        let dir = std::env::temp_dir().join(format!("sundial-spec-{}-{name}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join(name);
        std::fs::write(&file, text).unwrap();
        let specs = read_file(&file);
        std::fs::remove_dir_all(&dir).unwrap();
        specs
    }

    fn names(file: &SpecFile) -> Vec<&str> {
        file.jobs.iter().map(|s| s.name.as_str()).collect()
    }

    #[test]
    fn files_hold_toml_or_json_jobs() {
        // A node config: its own sections are not jobs, and are left alone here.
        let config = "[scheduler]\npoll_interval = \"1s\"\n[[jobs]]\nname = \"a\"\ntype = \"log\"\n\
                      [[jobs]]\nname = \"b\"\ntype = \"log\"\n\
                      [calendars.weekends]\nkind = \"weekly\"\ndays = [\"sat\", \"sun\"]\n\
                      [calendars.off]\nkind = \"composite\"\nmembers = [\"weekends\"]\n";
        let file = read("node.toml", config).unwrap();
        assert_eq!(names(&file), ["a", "b"]);
        let defined: Vec<&str> = file.definitions.iter().map(|d| d.name.as_str()).collect();
        assert_eq!(defined, ["a", "b"], "the definitions, in the file's order");
        let calendars: Vec<String> = file.calendars.keys().map(ToString::to_string).collect();
        assert_eq!(calendars, ["off", "weekends"]);
        let saturday = chrono::DateTime::parse_from_rfc3339("2027-03-13T12:00:00Z").unwrap().to_utc();
        assert!(file.calendars.values().all(|c| c.is_excluded(saturday)), "both exclude a Saturday");
        assert_eq!(names(&read("one.toml", "name = \"solo\"\ntype = \"log\"").unwrap()), ["solo"]);
        let array = r#"[{"name": "a", "type": "log"}, {"name": "b", "type": "http"}]"#;
        assert_eq!(names(&read("jobs.json", array).unwrap()), ["a", "b"]);
        // Without an extension: JSON when it parses as JSON, else TOML.
        assert_eq!(names(&read("jobs", r#"{"name": "j", "type": "log"}"#).unwrap()), ["j"]);
        assert_eq!(names(&read("jobs", "[[jobs]]\nname = \"t\"\ntype = \"log\"").unwrap()), ["t"]);
    }

    #[test]
    fn file_errors_name_the_file_and_the_key() {
        let bad_schedule =
            "[[jobs]]\nname = \"a\"\ntype = \"log\"\n[[jobs.triggers]]\nname = \"t\"\nschedule = \"cron 61 * * * * *\"";
        let error = read("bad.toml", bad_schedule).unwrap_err();
        assert!(error.contains("bad.toml: jobs[0] (a).triggers[0].schedule"), "{error}");
        // A field that does not deserialize: the path to it, however deep.
        let no_schedule = "[[jobs]]\nname = \"a\"\ntype = \"log\"\n[[jobs.triggers]]\nname = \"t\"";
        let error = read("short.toml", no_schedule).unwrap_err();
        assert!(error.ends_with("short.toml: jobs[0].triggers[0]: missing field `schedule`"), "{error}");
        let misfire =
            r#"[{"name": "a", "type": "log", "triggers": [{"name": "t", "schedule": "manual", "misfire": 7}]}]"#;
        let error = read("misfire.json", misfire).unwrap_err();
        assert!(error.contains("misfire.json: [0].triggers[0].misfire: invalid type: integer `7`"), "{error}");
        let error = read("one.json", r#"{"name": "a", "type": "log", "triggers": [{}]}"#).unwrap_err();
        assert!(error.ends_with("one.json: triggers[0]: missing field `name`"), "{error}");
        let error = read("one.toml", "name = \"a\"\ntype = \"log\"\ntimeout = true").unwrap_err();
        assert!(error.ends_with("one.toml: timeout: invalid type: boolean `true`, expected a duration such as \"90s\", \"5m\" or \"1h 30m\", or a number of seconds"), "{error}");
        let error = read("typo.toml", "[[jobs]]\nname = \"a\"\ntype = \"log\"\ncolour = 1").unwrap_err();
        assert!(error.contains("typo.toml: jobs[0]") && error.contains("colour"), "{error}");
        let weekday = "[[jobs]]\nname = \"a\"\ntype = \"log\"\n[calendars.w]\nkind = \"weekly\"\ndays = [\"caturday\"]";
        let error = read("cal.toml", weekday).unwrap_err();
        assert!(error.ends_with("cal.toml: calendars.w.days: 'caturday' is not a weekday"), "{error}");
        let error = read("flat.toml", "jobs = 3").unwrap_err();
        assert!(error.ends_with("flat.toml: `jobs` must be an array of tables ([[jobs]])"), "{error}");
        let twice = "[[jobs]]\nname = \"a\"\ntype = \"log\"\n[[jobs]]\nname = \"b\"\ntype = \"log\"\n\
                     [[jobs]]\nname = \"a\"\ntype = \"log\"";
        let error = read("twice.toml", twice).unwrap_err();
        assert!(error.ends_with("twice.toml: jobs[2].name: job 'a' is also jobs[0]"), "{error}");
        let twice = r#"[{"name": "a", "type": "log"}, {"name": "a", "type": "log"}]"#;
        let error = read("twice.json", twice).unwrap_err();
        assert!(error.ends_with("twice.json: [1].name: job 'a' is also [0]"), "{error}");
        let cron = r#"[{"name": "a", "type": "log", "triggers": [{"name": "t", "schedule": "cron 61 * * * * *"}]}]"#;
        let error = read("cron.json", cron).unwrap_err();
        assert!(error.contains("cron.json: [0] (a).triggers[0].schedule"), "{error}");
        let error = read("empty.json", "[]").unwrap_err();
        assert!(error.ends_with("empty.json: no jobs in the file"), "{error}");
        let error = read("broken.json", "[{").unwrap_err();
        assert!(error.contains("broken.json: "), "{error}");
        let missing = std::env::temp_dir().join("sundial-spec-no-such-dir/jobs.toml");
        let error = read_file(&missing).unwrap_err();
        assert!(error.contains("jobs.toml: cannot read: "), "{error}");
    }
}
