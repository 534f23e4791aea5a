//! The checkers. They read what the simulated jobs wrote (the event log), the store's
//! history (its final content and the runs retention deleted on the way), and periodic
//! samples of run states, and report every invariant broken, with the run ids and times
//! involved.
//!
//! One module per kind of invariant; [`check`] runs them all.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use chrono::{DateTime, TimeDelta, Utc};
use sundial::job::JobDefinition;
use sundial::name::JobName;
use sundial::store::records::RunRecord;
use sundial::store::JobStatus;
use sundial::time::from_micros;
use uuid::Uuid;

use crate::options::SimOptions;
use crate::trace::{Event, EventKind, StartFacts};
use crate::workload::Workload;

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

/// Everything the checkers read.
#[derive(Debug)]
pub struct Inputs<'a> {
    /// The simulation's options.
    pub options: &'a SimOptions,
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

/// Runs every checker.
pub fn check(inputs: &Inputs<'_>) -> Checked {
    let mut checked = Checked::default();
    let definitions: BTreeMap<&JobName, &JobDefinition> = inputs.workload.jobs().map(|d| (&d.name, d)).collect();
    let history: BTreeMap<Uuid, &RunRecord> = inputs.history.iter().map(|r| (r.id, r)).collect();
    let executions = executions(inputs, &mut checked);
    at_most_once(inputs, &mut checked);
    no_overlap(inputs, &definitions, &history, &executions, &mut checked);
    fires_accounted(inputs, &definitions, &executions, &mut checked);
    fire_counts(inputs, &mut checked);
    retries(inputs, &definitions, &history, &mut checked);
    recovery(inputs, &definitions, &mut checked);
    nothing_stuck(inputs, &executions, &mut checked);
    outcomes_recorded(inputs, &definitions, &history, &executions, &mut checked);
    nothing_overdue(inputs, &executions, &mut checked);
    history_kept(inputs, &history, &executions, &mut checked);
    checked.violations.extend(inputs.samples.finish(&history));
    *checked.checked.entry("state samples").or_default() += inputs.samples.count;
    checked
}

fn executions<'a>(inputs: &'a Inputs<'_>, checked: &mut Checked) -> BTreeMap<Uuid, Execution<'a>> {
    let mut runs: BTreeMap<Uuid, Execution<'a>> = BTreeMap::new();
    for (seq, event) in inputs.events.iter().enumerate() {
        match &event.kind {
            EventKind::Start(facts) => {
                if let Some(first) = runs.get(&facts.run.id) {
                    checked.violations.push(format!(
                        "run {} of {} started twice: on {} at {} and on {} at {}",
                        facts.run.id, facts.run.job, first.facts.node, first.start, facts.node, event.at
                    ));
                    continue;
                }
                runs.insert(facts.run.id, Execution { facts, start: event.at, seq, end: None });
            }
            EventKind::End { run, .. } | EventKind::Killed { run, .. } => {
                if let Some(execution) = runs.get_mut(run) {
                    execution.end.get_or_insert((event.at, seq));
                }
            }
            EventKind::World(_) => {}
        }
    }
    *checked.checked.entry("executions").or_default() += runs.len() as u64;
    runs
}

fn time(micros: i64) -> DateTime<Utc> {
    from_micros(micros).unwrap_or_default()
}
