//! What one simulation runs: derived from its seed, with explicit overrides.
//!
//! Every option that is not given is drawn from the seed, so `--seed 7` alone and
//! `--seed 7` with the same options spelled out are the same simulation (same trace hash).

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use sundial::calendar::JobCalendar;
use sundial::entropy::Entropy;
use sundial::job::JobDefinition;
use sundial::name::CalendarName;
#[cfg(feature = "broken-stores")]
pub use sundial::store::BrokenStore;

/// A deliberate store bug; none in a build without the feature `broken-stores`.
#[cfg(not(feature = "broken-stores"))]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BrokenStore {}

/// A kind of fault the plan can inject.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum FaultKind {
    /// A node dies abruptly (no cleanup, in-flight transactions lost) and restarts later
    /// with the same or a new node id.
    Crash,
    /// A node drains and stops gracefully, then restarts.
    Drain,
    /// Store latency windows.
    Latency,
    /// Spurious transaction conflicts.
    Conflicts,
    /// `commit_unknown_result` (1021), with the commit applied or not.
    UnknownResult,
    /// Windows in which the store is unavailable to everyone.
    Unavailable,
    /// One node cut off from the store for a while.
    Partition,
    /// Per-node wall-clock skew.
    Skew,
    /// Forward jumps of one node's wall clock.
    ClockJump,
    /// Jobs that ignore cancellation and run for hours.
    Hung,
}

impl FaultKind {
    /// Every kind, in a fixed order.
    pub const ALL: [FaultKind; 10] = [
        FaultKind::Crash,
        FaultKind::Drain,
        FaultKind::Latency,
        FaultKind::Conflicts,
        FaultKind::UnknownResult,
        FaultKind::Unavailable,
        FaultKind::Partition,
        FaultKind::Skew,
        FaultKind::ClockJump,
        FaultKind::Hung,
    ];

    /// The name used on the command line.
    pub fn name(self) -> &'static str {
        match self {
            FaultKind::Crash => "crash",
            FaultKind::Drain => "drain",
            FaultKind::Latency => "latency",
            FaultKind::Conflicts => "conflicts",
            FaultKind::UnknownResult => "unknown-result",
            FaultKind::Unavailable => "unavailable",
            FaultKind::Partition => "partition",
            FaultKind::Skew => "skew",
            FaultKind::ClockJump => "clock-jump",
            FaultKind::Hung => "hung",
        }
    }

    /// The default rate. Window and event kinds: events per simulated hour. `conflicts` and
    /// `unknown-result`: probability per commit. `skew`: the largest skew in seconds.
    /// `hung`: probability per run.
    pub fn default_rate(self) -> f64 {
        match self {
            FaultKind::Crash => 2.0,
            FaultKind::Drain => 1.0,
            FaultKind::Latency => 2.0,
            FaultKind::Conflicts => 0.02,
            FaultKind::UnknownResult => 0.01,
            FaultKind::Unavailable => 2.0,
            FaultKind::Partition => 1.5,
            FaultKind::Skew => 5.0,
            FaultKind::ClockJump => 1.0,
            FaultKind::Hung => 0.001,
        }
    }
}

impl FaultKind {
    /// Whether the rate is a probability (so at most 1).
    pub fn is_probability(self) -> bool {
        matches!(self, FaultKind::Conflicts | FaultKind::UnknownResult | FaultKind::Hung)
    }
}

impl std::str::FromStr for FaultKind {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        FaultKind::ALL.into_iter().find(|k| k.name() == s).ok_or_else(|| {
            let names: Vec<_> = FaultKind::ALL.iter().map(|k| k.name()).collect();
            format!("unknown fault '{s}' (known: {})", names.join(", "))
        })
    }
}

/// The largest `skew`, in seconds: two nodes skewed opposite ways stay within the misfire
/// threshold of each other.
pub const SKEW_MAX_SECONDS: f64 = 30.0;

/// The largest `hung` rate: the share of runs that hang at which hung runs, each holding a
/// slot for 1-3 h, stay well below the cluster's slots (two per job) for the workload's
/// run rate.
pub const HUNG_RATE_MAX: f64 = 0.005;

/// The enabled faults and their rates.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Faults {
    rates: BTreeMap<FaultKind, f64>,
}

impl Faults {
    /// No faults.
    pub fn none() -> Self {
        Self::default()
    }

    /// Every fault at its default rate.
    pub fn all() -> Self {
        Self { rates: FaultKind::ALL.iter().map(|k| (*k, k.default_rate())).collect() }
    }

    /// The rate of `kind`, when enabled.
    pub fn rate(&self, kind: FaultKind) -> Option<f64> {
        self.rates.get(&kind).copied()
    }

    /// Whether `kind` is enabled.
    pub fn has(&self, kind: FaultKind) -> bool {
        self.rates.contains_key(&kind)
    }

    /// Parses `none`, `all`, or a comma list of kinds, each optionally `kind=rate`.
    ///
    /// # Errors
    /// An unknown kind, a rate that is not a non-negative number, or a probability over 1.
    pub fn parse(text: &str) -> Result<Self, String> {
        match text.trim() {
            "none" => return Ok(Self::none()),
            "all" => return Ok(Self::all()),
            _ => {}
        }
        let mut rates = BTreeMap::new();
        for item in text.split(',').map(str::trim).filter(|s| !s.is_empty()) {
            let (name, rate) = match item.split_once('=') {
                Some((name, rate)) => {
                    let rate: f64 =
                        rate.parse().map_err(|_| format!("fault '{name}': rate '{rate}' is not a number"))?;
                    if !rate.is_finite() || rate < 0.0 {
                        return Err(format!("fault '{name}': rate must be a non-negative number"));
                    }
                    (name, Some(rate))
                }
                None => (item, None),
            };
            let kind: FaultKind = name.parse()?;
            if kind.is_probability() && rate.is_some_and(|r| r > 1.0) {
                return Err(format!("fault '{name}': rate is a probability, from 0 to 1"));
            }
            if kind == FaultKind::Skew && rate.is_some_and(|r| r > SKEW_MAX_SECONDS) {
                // Two nodes that far apart disagree by more than the misfire threshold
                // (60 s): each skips the other's fires as misfires, by design.
                return Err(format!(
                    "fault 'skew': at most {SKEW_MAX_SECONDS} s (clocks further apart than the 60 s misfire threshold skip each other's fires)"
                ));
            }
            if kind == FaultKind::Hung && rate.is_some_and(|r| r > HUNG_RATE_MAX) {
                // A hung run holds its slot for 1-3 h: at higher rates they add up to every
                // slot of the cluster (two per job), and no fire could start on time.
                return Err(format!(
                    "fault 'hung': rate at most {HUNG_RATE_MAX} (hung runs hold their slots for hours; more would fill every node)"
                ));
            }
            rates.insert(kind, rate.unwrap_or(kind.default_rate()));
        }
        Ok(Self { rates })
    }
}

impl fmt::Display for Faults {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.rates.is_empty() {
            return f.write_str("none");
        }
        let items: Vec<String> = self.rates.iter().map(|(k, r)| format!("{}={r}", k.name())).collect();
        f.write_str(&items.join(","))
    }
}

/// A user's jobs and calendars (`--jobs-file`), simulated instead of generated jobs.
///
/// Their triggers, policies and flags run as written; their type and data are the
/// simulated job's (whose duration and outcome the seed draws). All are scheduled at the
/// start, through a handle; the runtime operations drawn from the seed pause and resume
/// them and their triggers, trigger, enqueue and cancel runs, but never replace or delete a
/// job, so every fire of every job is accounted for. Every node registers the calendars
/// (beside the simulation's own `quiet`, unless one of them has that name).
#[derive(Debug, Clone, Default)]
pub struct GivenJobs {
    /// The jobs, each with distinct name.
    pub jobs: Vec<JobDefinition>,
    /// The calendars their triggers may name.
    pub calendars: BTreeMap<CalendarName, Arc<dyn JobCalendar>>,
}

/// Overrides from the command line; `None` means "derive from the seed".
#[derive(Debug, Clone, Default)]
pub struct Overrides {
    /// Number of nodes.
    pub nodes: Option<usize>,
    /// Length of the safety phase (faults on).
    pub duration: Option<Duration>,
    /// Number of jobs in the workload.
    pub jobs: Option<usize>,
    /// Faults; `None` = all.
    pub faults: Option<Faults>,
    /// A deliberately broken store (checker self-test).
    pub broken_store: Option<BrokenStore>,
    /// How long the nodes keep finished runs.
    pub history_retention: Option<Duration>,
    /// The workload's jobs, instead of generated ones (see [`SimOptions::given`]).
    pub given: Option<Arc<GivenJobs>>,
}

/// Everything a simulation runs with.
#[derive(Debug, Clone)]
pub struct SimOptions {
    /// The seed everything derives from.
    pub seed: u64,
    /// Number of node slots (each runs one node incarnation at a time).
    pub nodes: usize,
    /// Safety phase: workload and faults.
    pub duration: Duration,
    /// Liveness phase: faults healed, every node up; due fires must run.
    pub liveness: Duration,
    /// Number of jobs in the workload.
    pub jobs: usize,
    /// Enabled faults.
    pub faults: Faults,
    /// A deliberate store bug (feature `broken-stores`), to test the checkers.
    pub broken_store: Option<BrokenStore>,
    /// How long the nodes keep finished runs (their `history_retention`): two seeds in three
    /// draw 10 to 60 minutes, so the leader deletes history while runs come and go; the
    /// third keeps the nodes' default, [`keep_history`].
    pub history_retention: Duration,
    /// Keep the trace's lines in the outcome (`--trace`), not only their hash. Not part of
    /// the world: it changes nothing the simulation does.
    pub keep_trace: bool,
    /// The workload's jobs as a user wrote them (`--jobs-file`), instead of generated ones;
    /// `jobs` is their number.
    pub given: Option<Arc<GivenJobs>>,
}

/// The nodes' default `history_retention` (7 days): longer than any simulation.
pub fn keep_history() -> Duration {
    sundial::options::SchedulerOptions::default().history_retention
}

/// The latest a due fire may start in the liveness phase (poll interval, lookahead,
/// and catching up after the faults healed are all well inside it).
pub const LIVENESS_BOUND: Duration = Duration::from_secs(60);

impl SimOptions {
    /// The options of `seed`, with `overrides` applied.
    pub fn derive(seed: u64, overrides: &Overrides) -> Self {
        let mut entropy = Entropy::from_seed(seed ^ OPTIONS_SALT);
        let nodes = 2 + entropy.below(4) as usize;
        let jobs = 12 + entropy.below(28) as usize;
        let history_retention = match entropy.below(3) {
            0 => keep_history(),
            _ => Duration::from_secs(60 * (10 + entropy.below(51))),
        };
        Self {
            seed,
            nodes: overrides.nodes.unwrap_or(nodes),
            duration: overrides.duration.unwrap_or(Duration::from_secs(2 * 3600)),
            liveness: Duration::from_secs(15 * 60),
            jobs: overrides.given.as_ref().map_or(overrides.jobs.unwrap_or(jobs), |given| given.jobs.len()),
            faults: overrides.faults.clone().unwrap_or_else(Faults::all),
            broken_store: overrides.broken_store,
            history_retention: overrides.history_retention.unwrap_or(history_retention),
            keep_trace: false,
            given: overrides.given.clone(),
        }
    }

    /// Simulated seconds in total (both phases).
    pub fn simulated_seconds(&self) -> u64 {
        (self.duration + self.liveness).as_secs()
    }
}

/// A fixed salt ("options") so the option stream differs from the other seed-derived
/// streams.
const OPTIONS_SALT: u64 = 0x6f70_7469_6f6e_7300;

/// Parses a duration as job specs write one (humantime's grammar: `90s`, `15m`, `6h`,
/// `2d`, `1h 30m`).
///
/// # Errors
/// Anything else, or zero.
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let duration = humantime::parse_duration(text.trim())
        .map_err(|e| format!("duration '{text}': {e} (write it as job specs do: 90s, 15m, 6h, 2d)"))?;
    if duration.is_zero() {
        return Err(format!("duration '{text}' must be positive"));
    }
    Ok(duration)
}

/// The longest safety phase a simulation runs: 30 days. The checkers keep every run's
/// history, about 220 MB per simulated day of the default workload, so longer runs outgrow
/// most machines' memory (and take over five minutes); run more seeds instead.
pub const DURATION_MAX: Duration = Duration::from_secs(30 * 86_400);

/// [`parse_duration`], at most [`DURATION_MAX`].
///
/// # Errors
/// As [`parse_duration`], or a longer duration.
pub fn parse_safety_duration(text: &str) -> Result<Duration, String> {
    let duration = parse_duration(text)?;
    if duration > DURATION_MAX {
        return Err(format!(
            "duration '{text}' is longer than 30 days: the checkers keep all history (about 220 MB per \
             simulated day), so run more seeds instead"
        ));
    }
    Ok(duration)
}

/// Parses `a..b` (b exclusive) into the seeds it names.
///
/// # Errors
/// Not two numbers, or an empty range.
pub fn parse_seed_range(text: &str) -> Result<std::ops::Range<u64>, String> {
    let (a, b) = text.split_once("..").ok_or_else(|| format!("seed range '{text}': expected a..b"))?;
    let a: u64 = a.trim().parse().map_err(|_| format!("seed range '{text}': '{a}' is not a number"))?;
    let b: u64 = b.trim().parse().map_err(|_| format!("seed range '{text}': '{b}' is not a number"))?;
    if a >= b {
        return Err(format!("seed range '{text}' is empty (b is exclusive)"));
    }
    Ok(a..b)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn faults_parse_lists_rates_and_reject_unknowns() {
        assert_eq!(Faults::parse("none").unwrap(), Faults::none());
        assert_eq!(Faults::parse("all").unwrap(), Faults::all());
        let some = Faults::parse("crash, partition=3").unwrap();
        assert_eq!((some.rate(FaultKind::Crash), some.rate(FaultKind::Partition)), (Some(2.0), Some(3.0)));
        assert!(!some.has(FaultKind::Hung));
        assert!(Faults::parse("crash,meteor").unwrap_err().contains("unknown fault 'meteor'"));
        assert!(Faults::parse("crash=-1").is_err());
        assert!(Faults::parse("unknown-result=2").unwrap_err().contains("probability, from 0 to 1"));
        assert!(Faults::parse("conflicts=1,crash=30").is_ok());
        assert!(Faults::parse("hung=0.005").is_ok());
        assert!(Faults::parse("hung=0.3").unwrap_err().contains("at most 0.005"));
        assert!(Faults::parse("skew=30").is_ok());
        assert!(Faults::parse("skew=600").unwrap_err().contains("at most 30 s"));
        assert_eq!(Faults::parse(&some.to_string()).unwrap(), some);
    }

    #[test]
    fn durations_and_seed_ranges_parse() {
        assert_eq!(parse_duration("6h").unwrap(), Duration::from_secs(21_600));
        assert_eq!(parse_duration("1h 30m").unwrap(), Duration::from_secs(5_400));
        assert!(parse_duration("90").is_err(), "a unit, as in job specs");
        assert!(parse_duration("6x").is_err());
        assert!(parse_duration("0s").is_err());
        assert_eq!(parse_safety_duration("30d").unwrap(), DURATION_MAX);
        assert!(parse_safety_duration("31d").unwrap_err().contains("longer than 30 days"));
        assert!(parse_safety_duration("1000000d").is_err());
        assert_eq!(parse_seed_range("3..7").unwrap(), 3..7);
        assert!(parse_seed_range("7..3").is_err());
    }

    #[test]
    fn options_derive_from_the_seed_and_overrides_win() {
        let a = SimOptions::derive(42, &Overrides::default());
        let b = SimOptions::derive(42, &Overrides::default());
        assert_eq!((a.nodes, a.jobs), (b.nodes, b.jobs));
        let c = SimOptions::derive(42, &Overrides { nodes: Some(7), ..Overrides::default() });
        assert_eq!((c.nodes, c.jobs), (7, a.jobs));
    }
}
