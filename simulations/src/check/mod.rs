//! The checkers. They read what the simulated jobs wrote (the event log), the store's
//! history (its final content and the runs retention deleted on the way), and periodic
//! samples of run states, and report every invariant broken, with the run ids and times
//! involved.
//!
//! One module per kind of invariant; [`check_runs`] and [`check_fires`] run them all
//! (each half on its own thread if the caller likes: they share nothing but the inputs and
//! the runs' [`Executions`], which whichever half needs them first builds).

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use chrono::{DateTime, TimeDelta, Utc};
use sundial::job::JobDefinition;
use sundial::name::JobName;
use sundial::store::records::RunRecord;
use sundial::store::JobStatus;
use sundial::time::from_micros;
use uuid::Uuid;

use crate::trace::{Event, EventKind, StartFacts};
use crate::workload::Workload;
use sundial::calendar::Calendars;

mod at_end;
mod fires;
mod history;
mod liveness;
mod overlap;
mod retries;
mod samples;

pub use samples::Samples;

use at_end::{nothing_overdue, nothing_stuck, outcomes_recorded};
use fires::{at_most_once, fire_counts, fires_accounted};
use history::history_kept;
use overlap::no_overlap;
use retries::{recovery, retries};

/// The liveness phase's lateness rule applies from this long after the faults healed
/// (nodes restart, leases expire, missed fires are caught up).
const CATCH_UP: Duration = Duration::from_secs(180);
/// A non-concurrent job's run that ended this long before a fire may still have held the
/// job's slot in the store then (its completion commits after the job ended).
const BUSY_MARGIN: Duration = Duration::from_secs(5);

/// What the checkers must know of the cluster that ran: when its workload began, its
/// nodes' clocks and the options that bound their behaviour. A simulation derives it from
/// its options and fault plan; a run of real processes gives its own.
#[derive(Debug, Clone)]
pub struct Setting<'a> {
    /// When the workload began (true time): the jobs were registered then.
    pub epoch: DateTime<Utc>,
    /// Fires this soon after the epoch (plus the largest skew) are not accounted: the
    /// first fire depends on when each node registered the jobs.
    pub settle: Duration,
    /// Each node's clock skew from true time (what a clock jump adds comes on top).
    pub skews: &'a [TimeDelta],
    /// The most any node's clock may be skewed, in seconds (at least every `skews`).
    pub skew_bound_seconds: f64,
    /// The nodes' `misfire_threshold`.
    pub misfire_threshold: Duration,
    /// The nodes' `history_retention`.
    pub history_retention: Duration,
    /// The calendars the nodes registered.
    pub calendars: &'a Calendars,
}

/// Everything the checkers read.
#[derive(Debug)]
pub struct Inputs<'a> {
    /// The cluster's setting.
    pub setting: Setting<'a>,
    /// The workload (job definitions and which ones changed).
    pub workload: &'a Workload,
    /// The event log.
    pub events: &'a [Event],
    /// Every run record in the store at the end and every one retention deleted before, by
    /// id.
    pub history: &'a [RunRecord],
    /// The runs retention deleted (in `history`, not in the store at the end), by id, with
    /// the true time of the first transaction deleting each (it committed then or later).
    pub deleted: &'a BTreeMap<Uuid, DateTime<Utc>>,
    /// The lowest and highest offset from true time any node's clock had.
    pub clock_offsets: (TimeDelta, TimeDelta),
    /// Sampled run states.
    pub samples: &'a Samples,
    /// Every trigger in the store at the end: (job, trigger).
    pub triggers: &'a BTreeSet<(String, String)>,
    /// The node incarnations alive at the end, by node id.
    pub live: &'a [LiveNode],
    /// When the liveness phase began (true time).
    pub liveness_from: DateTime<Utc>,
    /// How far the furthest jumped clock was ahead when the faults healed: fires that far
    /// into the liveness phase may have run early or been skipped as misfires on it.
    pub jumped_ahead: Duration,
    /// The end (true time).
    pub end: DateTime<Utc>,
    /// Jobs the store took only late: runtime jobs whose first scheduling it refused (the
    /// world scheduled them again until it took them), code jobs the nodes had not written
    /// by the first sample. Their fires do not follow from the epoch, so they are not
    /// accounted for.
    pub late_jobs: &'a BTreeSet<JobName>,
    /// Every job in the store at the end, with its definition and pause states then.
    pub final_jobs: &'a [JobStatus],
    /// Per job, when (true time) the last operation on it (schedule, unschedule, restore,
    /// pause or resume, of the job or a trigger) returned, whatever its outcome.
    pub changed_at: &'a BTreeMap<JobName, DateTime<Utc>>,
    /// Jobs with operations still waiting or retried at the end.
    pub in_flux: &'a BTreeSet<JobName>,
}

/// A node incarnation alive at the end.
#[derive(Debug, Clone)]
pub struct LiveNode {
    /// Its node id.
    pub node: String,
    /// Its incarnation (each start of a node, under the same id or a new one, is a new one).
    pub incarnation: u32,
    /// When (true time) it started.
    pub started: DateTime<Utc>,
}

/// A run a node's store deleted, as the deleting transaction read it (kept by the world
/// until the end, when the record joins the history the checkers read).
#[derive(Debug, Clone)]
pub struct DeletedRun {
    /// The record deleted (final: only finished runs are deleted).
    pub record: RunRecord,
    /// When (true time) the first transaction deleting it did so; it committed then or later.
    pub at: DateTime<Utc>,
}

/// What the checkers found.
#[derive(Debug, Clone, Default)]
pub struct Checked {
    /// Broken invariants, each described with its run ids and times.
    pub violations: Vec<String>,
    /// The one allowed overlap: a job that ignored cancellation kept running on a node
    /// already declared lost while a run of its job that started after the declaration ran
    /// beside it on another node (one line per such run, naming the first run it
    /// overlapped).
    pub lost_node_overlaps: Vec<String>,
    /// Counts of what was checked.
    pub checked: BTreeMap<&'static str, u64>,
    /// The latest start, after its scheduled time, of a fire the liveness rule judged, less
    /// the most any node's clock is behind (the rule allows [`LIVENESS_BOUND`](crate::options::LIVENESS_BOUND) beyond
    /// that): how close the engine came to the bound. Fires start within milliseconds on
    /// a healed cluster; seconds mean a node waited for a poll, a steal check or a lease.
    pub liveness_worst: Option<TimeDelta>,
}

/// One run's execution as the event log saw it.
#[derive(Debug, Clone)]
struct Execution<'a> {
    facts: &'a StartFacts,
    start: DateTime<Utc>,
    /// Position of the start in the log: orders starts at the same instant.
    seq: usize,
    /// When it ended and the position of that in the log; `None`: still running at the end.
    end: Option<(DateTime<Utc>, usize)>,
}

/// Each run's execution as the event log tells it (see [`Executions::follow`]), built once
/// for both halves of the checkers: the first to ask builds it, the other waits for it.
pub type SharedExecutions<'a> = std::sync::OnceLock<Executions<'a>>;

/// The runs' executions in the event log, by run id, and the runs it shows started twice.
#[derive(Debug)]
pub struct Executions<'a> {
    runs: BTreeMap<Uuid, Execution<'a>>,
    /// What following the runs found: a run started twice is a violation.
    checked: Checked,
}

impl<'a> Executions<'a> {
    /// Follows every run through `events`: its first start and the first end (or kill)
    /// logged after it.
    pub fn follow(events: &'a [Event]) -> Self {
        let mut checked = Checked::default();
        let runs = executions(events, &mut checked);
        Self { runs, checked }
    }

    /// The violations following the runs found (runs started twice), to report with the
    /// checkers' own.
    pub fn into_checked(self) -> Checked {
        self.checked
    }
}

/// The checkers that follow each run's execution in the event log: non-concurrent runs
/// never overlap, every fire is accounted for, and nothing is stuck or missing its outcome.
/// Independent of [`check_fires`]: the two may run on two threads, sharing `executions`.
pub fn check_runs<'a>(inputs: &Inputs<'a>, executions: &SharedExecutions<'a>) -> Checked {
    let mut checked = Checked::default();
    let definitions = definitions(inputs);
    let history = history_by_id(inputs);
    let executions = &executions.get_or_init(|| Executions::follow(inputs.events)).runs;
    no_overlap(inputs, &definitions, &history, executions, &mut checked);
    fires_accounted(inputs, &definitions, executions, &mut checked);
    nothing_stuck(inputs, executions, &mut checked);
    outcomes_recorded(inputs, &definitions, &history, executions, &mut checked);
    checked
}

/// The checkers that read the store's history and the state samples (each fire runs at
/// most once, fire counts, retries and recovery follow their policies, every sampled state
/// transition is legal), then those that compare the runs' executions with the history
/// (nothing overdue, history kept): they come last, when [`check_runs`] on another thread
/// has built the executions.
pub fn check_fires<'a>(inputs: &Inputs<'a>, executions: &SharedExecutions<'a>) -> Checked {
    let mut checked = Checked::default();
    let definitions = definitions(inputs);
    let history = history_by_id(inputs);
    at_most_once(inputs, &mut checked);
    fire_counts(inputs, &mut checked);
    retries(inputs, &definitions, &history, &mut checked);
    recovery(inputs, &definitions, &mut checked);
    checked.violations.extend(inputs.samples.finish(&history));
    *checked.checked.entry("state samples").or_default() += inputs.samples.count;
    let executions = &executions.get_or_init(|| Executions::follow(inputs.events)).runs;
    nothing_overdue(inputs, executions, &mut checked);
    history_kept(inputs, &history, executions, &mut checked);
    checked
}

impl Checked {
    /// Adds what `other` found (its violations after these).
    pub fn merge(&mut self, other: Checked) {
        self.violations.extend(other.violations);
        self.lost_node_overlaps.extend(other.lost_node_overlaps);
        for (what, count) in other.checked {
            *self.checked.entry(what).or_default() += count;
        }
        self.liveness_worst = self.liveness_worst.max(other.liveness_worst);
    }
}

fn definitions<'a>(inputs: &Inputs<'a>) -> BTreeMap<&'a JobName, &'a JobDefinition> {
    inputs.workload.jobs().map(|d| (&d.name, d)).collect()
}

fn history_by_id<'a>(inputs: &Inputs<'a>) -> BTreeMap<Uuid, &'a RunRecord> {
    inputs.history.iter().map(|r| (r.id, r)).collect()
}

/// Each run's execution in `events`, by run id: its first start and the first end (or
/// kill) logged after it. A run started again is a violation.
fn executions<'a>(events: &'a [Event], checked: &mut Checked) -> BTreeMap<Uuid, Execution<'a>> {
    // Starts and ends gathered, sorted by run and matched, and the map built from the
    // sorted runs at once: a day's quarter of a million runs, not as many map inserts.
    let mut starts: Vec<(Uuid, Execution<'a>)> = Vec::new();
    let mut ends: Vec<(Uuid, usize, DateTime<Utc>)> = Vec::new();
    for (seq, event) in events.iter().enumerate() {
        match &event.kind {
            EventKind::Start(facts) => {
                starts.push((facts.run.id, Execution { facts, start: event.at, seq, end: None }));
            }
            EventKind::End { run, .. } | EventKind::Killed { run, .. } => ends.push((*run, seq, event.at)),
            EventKind::World(_) => {}
        }
    }
    // Stable: a run's starts stay in log order.
    starts.sort_by_key(|(id, _)| *id);
    ends.sort_unstable_by_key(|&(run, seq, _)| (run, seq));
    let mut ends = ends.into_iter().peekable();
    let mut twice = Vec::new();
    let mut runs = Vec::with_capacity(starts.len());
    for same_run in starts.chunk_by(|a, b| a.0 == b.0) {
        let (id, first) = &same_run[0];
        for (_, again) in &same_run[1..] {
            twice.push((
                again.seq,
                format!(
                    "run {} of {} started twice: on {} at {} and on {} at {}",
                    again.facts.run.id,
                    again.facts.run.job,
                    first.facts.node,
                    first.start,
                    again.facts.node,
                    again.start
                ),
            ));
        }
        // Its end: the first logged after its first start.
        while ends.next_if(|&(run, seq, _)| run < *id || run == *id && seq < first.seq).is_some() {}
        let end = ends.next_if(|(run, _, _)| run == id).map(|(_, seq, at)| (at, seq));
        runs.push((*id, Execution { end, ..first.clone() }));
    }
    twice.sort_unstable_by_key(|(seq, _)| *seq);
    checked.violations.extend(twice.into_iter().map(|(_, line)| line));
    *checked.checked.entry("executions").or_default() += runs.len() as u64;
    runs.into_iter().collect()
}

fn time(micros: i64) -> DateTime<Utc> {
    from_micros(micros).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use chrono::{DateTime, Utc};
    use sundial::job::{JobRun, RunCause};
    use uuid::Uuid;

    use super::Executions;
    use crate::trace::{Event, EventKind, StartFacts};

    fn at(s: i64) -> DateTime<Utc> {
        DateTime::from_timestamp(s, 0).unwrap()
    }

    fn start(s: i64, run: u128, node: &str) -> Event {
        let run = JobRun {
            id: Uuid::from_u128(run),
            job: "job".parse().unwrap(),
            trigger: None,
            scheduled_at: at(0),
            cause: RunCause::Manual,
            attempt: 1,
            retry_of: None,
            data: Default::default(),
        };
        let facts = StartFacts { run, node: node.into(), incarnation: 1, ignores_cancel: false };
        Event { at: at(s), kind: EventKind::Start(Box::new(facts)) }
    }

    fn end(s: i64, run: u128) -> Event {
        Event { at: at(s), kind: EventKind::End { run: Uuid::from_u128(run), node: "a".into(), outcome: "ok" } }
    }

    #[test]
    fn a_run_ends_at_its_first_end_after_its_first_start_and_starts_once() {
        let events = vec![
            end(1, 2),
            start(2, 1, "a"),
            start(3, 2, "a"),
            start(4, 1, "b"),
            end(5, 2),
            Event { at: at(6), kind: EventKind::Killed { run: Uuid::from_u128(1), node: "a".into() } },
            end(7, 1),
            start(8, 3, "a"),
        ];
        let executions = Executions::follow(&events);
        // Per run: id, start (s), its position in the log, and its end (s, position).
        let summary = |(id, e): (&Uuid, &super::Execution<'_>)| {
            (id.as_u128(), e.start.timestamp(), e.seq, e.end.map(|(at, seq)| (at.timestamp(), seq)))
        };
        let runs: Vec<_> = executions.runs.iter().map(summary).collect();
        assert_eq!(runs, [(1, 2, 1, Some((6, 5))), (2, 3, 2, Some((5, 4))), (3, 8, 7, None)]);
        let started_twice =
            format!("run {} of job started twice: on a at {} and on b at {}", Uuid::from_u128(1), at(2), at(4));
        // Reported once, by whoever holds the executions both halves of the checkers read.
        let checked = executions.into_checked();
        assert_eq!(checked.violations, [started_twice]);
        assert_eq!(checked.checked.get("executions"), Some(&3));
    }
}
