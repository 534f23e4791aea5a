//! The checkers. They read what the simulated jobs wrote (the event log), the store's
//! history (its final content and the runs retention deleted on the way), and periodic
//! samples of run states, and report every invariant broken, with the run ids and times
//! involved.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use chrono::{DateTime, TimeDelta, Utc};
use sundial::calendar::{Calendars, JobCalendar};
use sundial::error::ErrorCode;
use sundial::job::{JobDefinition, MisfirePolicy, RunCause, RunState, TriggerState};
use sundial::name::JobName;
use sundial::schedule::{JobSchedule, PreviousFire, ScheduleKind};
use sundial::store::records::RunRecord;
use sundial::store::JobStatus;
use sundial::time::{add_duration, from_micros};
use uuid::Uuid;

use crate::options::{SimOptions, LIVENESS_BOUND};
use crate::trace::{Event, EventKind, StartFacts};
use crate::workload::{epoch, Op, Workload};

/// Fires this soon after the epoch, plus the largest clock skew, are not accounted: the
/// first fire depends on when the job was registered, on a node clock that may be skewed.
const SETTLE: Duration = Duration::from_secs(30);
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
    /// the most any node's clock is behind (the rule allows [`LIVENESS_BOUND`] beyond
    /// that): how close the engine came to the bound. Fires start within milliseconds on
    /// a healed cluster; seconds mean a node waited for a poll, a steal check or a lease.
    pub liveness_worst: Option<TimeDelta>,
}

/// Run states sampled during the simulation, cheaply: each sample reads the running-run
/// index, and the record of every run that left it since the last sample. A run must leave
/// `Running` by a legal transition, never come back, and keep its final state to the end
/// (in the store, or in the record retention deleted).
#[derive(Debug, Clone, Default)]
pub struct Samples {
    running: BTreeSet<Uuid>,
    finals: BTreeMap<Uuid, (RunState, DateTime<Utc>)>,
    violations: Vec<String>,
    count: u64,
}

impl Samples {
    /// The runs running at the last sample: the caller reads the state of those that are
    /// not running any more and passes them to [`Samples::observe`].
    pub fn running(&self) -> &BTreeSet<Uuid> {
        &self.running
    }

    /// Takes one sample at `at`: the runs running now, and the state of each run that was
    /// running at the previous sample and is not now (`None`: its record is gone).
    pub fn observe(&mut self, at: DateTime<Utc>, running: BTreeSet<Uuid>, left: BTreeMap<Uuid, Option<RunState>>) {
        self.count += 1;
        for (id, state) in left {
            match state {
                None => self.violations.push(format!("run {id} vanished from history at {at} (was Running)")),
                Some(state) if !RunState::Running.can_transition_to(state) => self
                    .violations
                    .push(format!("run {id} went Running -> {state:?} (illegal transition), seen at {at}")),
                Some(RunState::Running) => {}
                Some(state) => {
                    self.finals.insert(id, (state, at));
                }
            }
        }
        for id in &running {
            if let Some((state, seen)) = self.finals.get(id) {
                self.violations.push(format!("run {id} was {state:?} at {seen} and Running again at {at}"));
            }
        }
        self.running = running;
    }

    /// Compares the final states seen with the final history.
    fn finish(&self, history: &BTreeMap<Uuid, &RunRecord>) -> Vec<String> {
        let mut violations = self.violations.clone();
        for (id, (state, seen)) in &self.finals {
            match history.get(id) {
                None => violations.push(format!("run {id} ({state:?} at {seen}) vanished from history")),
                Some(run) if run.state != *state => violations.push(format!(
                    "run {id} was {state:?} at {seen} and is {:?} at the end (a final state changed)",
                    run.state
                )),
                Some(_) => {}
            }
        }
        violations
    }
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

/// Each (trigger, scheduled time) of a cluster-unique job has at most one run. Jobs whose
/// definitions changed are left out: a trigger deleted and made again is a new trigger,
/// whose fires may repeat the old one's times (their runs are still checked one by one:
/// no run id starts twice).
fn at_most_once(inputs: &Inputs<'_>, checked: &mut Checked) {
    let mut fires: BTreeMap<(&str, &str, i64), Vec<Uuid>> = BTreeMap::new();
    let stable = |job: &str| JobName::new(job).is_ok_and(|n| !inputs.workload.changed.contains(&n));
    for run in inputs.history.iter().filter(|r| r.cause == RunCause::Schedule && !r.local && stable(&r.job)) {
        if let Some(trigger) = &run.trigger {
            fires.entry((&run.job, trigger, run.scheduled_us)).or_default().push(run.id);
        }
    }
    *checked.checked.entry("fires").or_default() += fires.len() as u64;
    for ((job, trigger, scheduled), ids) in fires {
        if ids.len() > 1 {
            checked.violations.push(format!(
                "fire {job}/{trigger} at {} ran {} times: {ids:?}",
                time(scheduled),
                ids.len()
            ));
        }
    }
}

/// A non-concurrent job's runs never overlap in (true) time; a local job's only on one node.
///
/// A job whose definition switches between local and cluster-unique is judged by each
/// run's kind (a run started by a node's local triggers is local; every other run was
/// taken from the store and held the job's slot): its store runs never overlap each
/// other, its runs on one node never overlap, and a run of a scheduled fire taken from
/// the store (the job was cluster-unique then) overlaps no local run anywhere. Local runs
/// on different nodes, and a local run beside a store run of the job's local era (an
/// enqueued one) on another node, may overlap.
fn no_overlap(
    inputs: &Inputs<'_>,
    definitions: &BTreeMap<&JobName, &JobDefinition>,
    history: &BTreeMap<Uuid, &RunRecord>,
    executions: &BTreeMap<Uuid, Execution<'_>>,
    checked: &mut Checked,
) {
    let mut groups: BTreeMap<(String, String), Vec<&Execution<'_>>> = BTreeMap::new();
    let mut switched: BTreeMap<&JobName, Vec<&Execution<'_>>> = BTreeMap::new();
    for execution in executions.values() {
        let Some(def) = definitions.get(&execution.facts.run.job) else { continue };
        if inputs.workload.switched.contains(&def.name) {
            // Concurrent in one definition and not in another: judged as non-concurrent
            // only when every definition of it is (the workload keeps the flag).
            if !def.allow_concurrent {
                switched.entry(&def.name).or_default().push(execution);
            }
            continue;
        }
        if def.allow_concurrent {
            continue;
        }
        let node = if def.run_on_every_instance { execution.facts.node.clone() } else { String::new() };
        groups.entry((def.name.to_string(), node)).or_default().push(execution);
    }
    for ((job, _), runs) in groups {
        exclusive(inputs, history, &job, runs, checked);
    }
    for (job, runs) in switched {
        // A run missing from history is reported by `history_kept`; here it counts as local.
        let local = |e: &Execution<'_>| history.get(&e.facts.run.id).is_none_or(|r| r.local);
        let store_runs: Vec<&Execution<'_>> = runs.iter().copied().filter(|e| !local(e)).collect();
        exclusive(inputs, history, job.as_str(), store_runs, checked);
        let mut by_node: BTreeMap<&str, Vec<&Execution<'_>>> = BTreeMap::new();
        for run in &runs {
            by_node.entry(run.facts.node.as_str()).or_default().push(run);
        }
        for (_, on_node) in by_node {
            exclusive(inputs, history, job.as_str(), on_node, checked);
        }
        let (local_runs, store_runs): (Vec<&Execution<'_>>, Vec<&Execution<'_>>) =
            runs.iter().copied().partition(|e| local(e));
        let scheduled: Vec<&Execution<'_>> =
            store_runs.into_iter().filter(|e| e.facts.run.cause == RunCause::Schedule).collect();
        let span = |e: &&Execution<'_>| ((e.start, e.seq), e.end.unwrap_or((inputs.end, usize::MAX)));
        let spans = |runs: &[&Execution<'_>]| runs.iter().map(span).collect::<Vec<_>>();
        for (s, l) in overlapping_pairs(&spans(&scheduled), &spans(&local_runs)) {
            let (store_run, local_run) = (scheduled[s], local_runs[l]);
            let (first, second) = if (local_run.start, local_run.seq) < (store_run.start, store_run.seq) {
                (local_run, store_run)
            } else {
                (store_run, local_run)
            };
            overlap(inputs, history, job.as_str(), first, second, checked);
        }
    }
}

/// The pairs (index in `a`, index in `b`) of spans that overlap, each span `[start,
/// end)` with distinct starts: the later of the two starts before the earlier one ends.
/// In index order. A sweep over the starts, keeping the spans not yet ended: a day's runs
/// of a job pair with only the few that run beside them, not with every other run.
fn overlapping_pairs<K: Ord + Copy>(a: &[(K, K)], b: &[(K, K)]) -> Vec<(usize, usize)> {
    let mut starts: Vec<(K, bool, usize)> = a.iter().enumerate().map(|(i, s)| (s.0, true, i)).collect();
    starts.extend(b.iter().enumerate().map(|(j, s)| (s.0, false, j)));
    starts.sort_unstable();
    let (mut open_a, mut open_b): (Vec<usize>, Vec<usize>) = (Vec::new(), Vec::new());
    let mut pairs = Vec::new();
    for (start, in_a, index) in starts {
        open_a.retain(|&i| a[i].1 > start);
        open_b.retain(|&j| b[j].1 > start);
        if in_a {
            pairs.extend(open_b.iter().map(|&j| (index, j)));
            open_a.push(index);
        } else {
            pairs.extend(open_a.iter().map(|&i| (i, index)));
            open_b.push(index);
        }
    }
    pairs.sort_unstable();
    pairs
}

/// Checks that `runs` (of `job`) never overlap one another.
fn exclusive<'e>(
    inputs: &Inputs<'_>,
    history: &BTreeMap<Uuid, &RunRecord>,
    job: &str,
    mut runs: Vec<&'e Execution<'e>>,
    checked: &mut Checked,
) {
    runs.sort_by_key(|e| (e.start, e.seq));
    *checked.checked.entry("exclusive runs").or_default() += runs.len() as u64;
    // Every overlapping pair, not only each run against the longest before it: two runs
    // overlapping each other inside an excused lost run's span are still two.
    let spans: Vec<_> = runs.iter().map(|e| ((e.start, e.seq), e.end.unwrap_or((inputs.end, usize::MAX)))).collect();
    for (earlier, later) in overlapping_within(&spans) {
        overlap(inputs, history, job, runs[earlier], runs[later], checked);
    }
}

/// The pairs (i, j), i < j, of `spans` (each `[start, end)`, sorted by their distinct
/// starts) that overlap: span j starts before span i ends. In order of j, then i. A sweep
/// keeping the spans not yet ended, as [`overlapping_pairs`].
fn overlapping_within<K: Ord + Copy>(spans: &[(K, K)]) -> Vec<(usize, usize)> {
    let mut open: Vec<usize> = Vec::new();
    let mut pairs = Vec::new();
    for (j, &(start, _)) in spans.iter().enumerate() {
        open.retain(|&i| spans[i].1 > start);
        pairs.extend(open.iter().map(|&i| (i, j)));
        open.push(j);
    }
    pairs
}

/// Reports `run` (started at or after `previous`) if it started before `previous` ended:
/// as the one allowed overlap when `previous` ignored cancellation on a node declared
/// lost, as a violation otherwise (each once).
fn overlap(
    inputs: &Inputs<'_>,
    history: &BTreeMap<Uuid, &RunRecord>,
    job: &str,
    previous: &Execution<'_>,
    run: &Execution<'_>,
    checked: &mut Checked,
) {
    // Log order breaks ties: a run that starts at the instant another ends, but before
    // that end was logged, overlaps it.
    let previous_end = previous.end.unwrap_or((inputs.end, usize::MAX));
    if (run.start, run.seq) >= previous_end {
        return;
    }
    let elsewhere = (&run.facts.node, run.facts.incarnation) != (&previous.facts.node, previous.facts.incarnation);
    let excused = excused_overlap(
        history.get(&previous.facts.run.id).copied(),
        previous.facts.ignores_cancel,
        elsewhere,
        run.start,
        inputs.clock_offsets.1,
    );
    let line = format!(
        "job {job}: run {} on {} ({} to {}) overlaps run {} on {} (from {})",
        previous.facts.run.id,
        previous.facts.node,
        previous.start,
        previous_end.0,
        run.facts.run.id,
        run.facts.node,
        run.start
    );
    if excused {
        // One line per lost run, however many later runs it overlapped.
        let id = previous.facts.run.id.to_string();
        if !checked.lost_node_overlaps.iter().any(|l| l.contains(&id)) {
            checked.lost_node_overlaps.push(line);
        }
    } else if !checked.violations.contains(&line) {
        checked.violations.push(line);
    }
}

/// Whether a run that started at `later_start` (true time) beside the run whose record
/// is `earlier` is the one allowed overlap: the earlier run ignored cancellation, its
/// node had already been declared lost when the later one started, and the later one ran
/// `elsewhere` (in another process: the node itself, once it learns it was declared lost,
/// starts no run beside its own). The record's `finished_at` is the declaring leader's
/// clock at the declaration, at most `highest` (the highest clock offset) ahead of true
/// time; a run that started before that took a slot the store still gave to the earlier
/// run, which no fault excuses.
fn excused_overlap(
    earlier: Option<&RunRecord>,
    ignores_cancel: bool,
    elsewhere: bool,
    later_start: DateTime<Utc>,
    highest: TimeDelta,
) -> bool {
    ignores_cancel
        && elsewhere
        && earlier.is_some_and(|record| {
            record.state == RunState::Lost && record.finished_us.is_some_and(|f| later_start >= time(f) - highest)
        })
}

/// Every fire of a stable trigger is accounted for: `RunAll` cron triggers run every fire
/// exactly at its time, in order (no gap before the latest fire run); `once` triggers fire once (at most once with `Skip`); `every … xN`
/// triggers at most N times; and in the liveness phase every fire of a concurrent job's
/// cron trigger, and each interval fire after its trigger's run ended, starts within
/// [`LIVENESS_BOUND`] of its time (plus the most any node's clock is behind): on every node
/// alive then for a local job, by its final definition for a job operations changed.
fn fires_accounted(
    inputs: &Inputs<'_>,
    definitions: &BTreeMap<&JobName, &JobDefinition>,
    executions: &BTreeMap<Uuid, Execution<'_>>,
    checked: &mut Checked,
) {
    let calendars = crate::world_calendars();
    let skews = crate::faults::plan(inputs.options).skew;
    let skew = skews.iter().map(|s| s.abs()).max().unwrap_or_default();
    let settled = add_duration(epoch(), SETTLE) + skew;
    // A node whose clock is behind takes its fires that much later in true time (and if
    // every node is behind, no other takes them first): the bound allows for it.
    let behind = skews.iter().map(|s| -*s).max().unwrap_or_default().max(TimeDelta::zero());
    let bound = TimeDelta::from_std(LIVENESS_BOUND).unwrap_or_default() + behind;
    let horizon = inputs.end - bound;
    let ahead = skews.iter().copied().max().unwrap_or_default().max(TimeDelta::zero());
    let liveness = Liveness { executions, behind, ahead, bound, horizon };
    let mut ran: BTreeMap<(&str, &str), Vec<&RunRecord>> = BTreeMap::new();
    // Local runs, by node.
    let mut ran_here: BTreeMap<(&str, &str, &str), Vec<&RunRecord>> = BTreeMap::new();
    for run in inputs.history.iter().filter(|r| r.cause == RunCause::Schedule) {
        if let Some(trigger) = &run.trigger {
            if run.local {
                ran_here.entry((&run.job, trigger, &run.node)).or_default().push(run);
            } else {
                ran.entry((&run.job, trigger)).or_default().push(run);
            }
        }
    }
    let lateness_from = add_duration(inputs.liveness_from, CATCH_UP + inputs.jumped_ahead);
    // What ran of each job in the liveness phase (and before, if still running then):
    // whether a non-concurrent job was busy around a fire.
    let since = lateness_from - TimeDelta::from_std(BUSY_MARGIN).unwrap_or_default() - liveness.ahead;
    let mut spans: BTreeMap<&str, Vec<Span>> = BTreeMap::new();
    for (id, execution) in executions {
        if execution.end.is_none_or(|(end, _)| end >= since) {
            let job = execution.facts.run.job.as_str();
            spans.entry(job).or_default().push(Span::of(*id, execution));
        }
    }
    // A job paused into the liveness phase is judged from its resume on.
    let mut resumed: BTreeMap<&JobName, Duration> = BTreeMap::new();
    let mut paused: BTreeSet<&JobName> = BTreeSet::new();
    for (at, op) in &inputs.workload.ops {
        let job = match op {
            Op::Resume(job) => job,
            Op::ResumeTrigger(key) => &key.job,
            Op::Pause(job) => {
                paused.insert(job);
                continue;
            }
            Op::PauseTrigger(key) => {
                paused.insert(&key.job);
                continue;
            }
            _ => continue,
        };
        let latest = resumed.entry(job).or_default();
        *latest = (*latest).max(*at);
    }
    let threshold = crate::world::node_options(inputs.options).misfire_threshold;
    let misfired_by = TimeDelta::from_std(threshold).unwrap_or_default() - TimeDelta::seconds(1);
    for def in definitions.values() {
        let lateness_from =
            resumed.get(&def.name).map_or(lateness_from, |at| lateness_from.max(add_duration(epoch(), *at + CATCH_UP)));
        if inputs.late_jobs.contains(&def.name) {
            *checked.checked.entry("jobs created late (fires not accounted)").or_default() += 1;
            continue;
        }
        if inputs.workload.changed.contains(&def.name) {
            continue;
        }
        if def.run_on_every_instance {
            let from = inputs
                .changed_at
                .get(&def.name)
                .map_or(lateness_from, |at| lateness_from.max(add_duration(*at, CATCH_UP)));
            local_jobs_live(inputs, &calendars, def, &ran_here, from, &liveness, checked);
            continue;
        }
        for trigger in &def.triggers {
            let runs = ran.get(&(def.name.as_str(), trigger.name.as_str())).map_or(&[][..], Vec::as_slice);
            let scheduled: BTreeMap<i64, Uuid> = runs.iter().map(|r| (r.scheduled_us, r.id)).collect();
            let calendar = trigger.schedule.calendar.as_ref().and_then(|c| calendars.get(c));
            let label = format!("{}/{}", def.name, trigger.name);
            match &trigger.schedule.kind {
                ScheduleKind::Cron { .. } => {
                    // RunAll never skips a fire; a busy job may still be catching up at
                    // the end, so every fire up to the latest one run must have run.
                    let strict = trigger.misfire == MisfirePolicy::RunAll;
                    let caught_up = scheduled.keys().next_back().copied().unwrap_or(i64::MIN);
                    let spans = spans.get(def.name.as_str()).map_or(&[][..], Vec::as_slice);
                    let from = settled.timestamp_micros();
                    let mut next = trigger.schedule.first_fire(settled, calendar);
                    let mut count = 0u32;
                    // Missed fires, grouped by the next recorded fire after them; only gaps
                    // that open after a recorded fire in the window (the fires before it
                    // are not all known here).
                    let mut gaps: BTreeMap<i64, i64> = BTreeMap::new();
                    while let Some(at) = next.filter(|at| *at <= horizon) {
                        count += 1;
                        *checked.checked.entry("expected fires").or_default() += 1;
                        let run = scheduled.get(&at.timestamp_micros());
                        let at_us = at.timestamp_micros();
                        let opened = scheduled.range(from..at_us).next_back().is_some();
                        if run.is_none() && opened {
                            if let Some((&after, _)) = scheduled.range(at_us..).next() {
                                gaps.entry(after).or_insert(at_us);
                            }
                        }
                        if strict && run.is_none() && at.timestamp_micros() <= caught_up {
                            checked.violations.push(format!("{label} (RunAll): the fire at {at} never ran"));
                        }
                        if at >= lateness_from {
                            if def.allow_concurrent {
                                liveness.judge(&label, at, run, checked);
                            } else if !blocked(spans, at, run, &liveness) {
                                // Not held back by another run of its job, a non-concurrent
                                // job's fire runs as a concurrent one's would. (A blocked
                                // fire waits, or is skipped as a misfire: not judged.)
                                *checked.checked.entry("liveness fires of idle non-concurrent jobs").or_default() += 1;
                                liveness.judge(&label, at, run, checked);
                            }
                        }
                        let previous = PreviousFire { scheduled_at: at, completed_at: at, fire_count: count };
                        next = trigger.schedule.next_fire(&previous, calendar);
                    }
                    // `RunOnce` and `Skip` skip fires only as misfires: the first fire of a
                    // gap was taken more than the threshold late (on the taking node's
                    // clock), and the next recorded fire (the `RunOnce` catch-up at that
                    // node's now, or the next after it) comes after that. A fire missed for
                    // any other reason leaves a shorter gap. Gaps still open at the end, and
                    // jobs paused at some point, are not judged.
                    if !strict && !paused.contains(&def.name) {
                        for (after, first) in gaps {
                            *checked.checked.entry("skipped fires").or_default() += 1;
                            if time(after) - time(first) <= misfired_by {
                                checked.violations.push(format!(
                                    "{label} ({:?}): the fire at {} never ran, yet the next recorded fire is at {}, \
                                     within the misfire threshold",
                                    trigger.misfire,
                                    time(first),
                                    time(after)
                                ));
                            }
                        }
                    }
                }
                ScheduleKind::Once { at } => {
                    let due = trigger.schedule.first_fire(*at - TimeDelta::seconds(1), calendar);
                    if due.is_some_and(|due| due <= horizon && due > settled) {
                        *checked.checked.entry("expected fires").or_default() += 1;
                        // A non-concurrent job may still hold it back (Blocked) at the end.
                        let pending = !def.allow_concurrent
                            && inputs.triggers.contains(&(def.name.to_string(), trigger.name.to_string()));
                        let expected_min = usize::from(trigger.misfire != MisfirePolicy::Skip && !pending);
                        if runs.len() < expected_min || runs.len() > 1 {
                            let ids: Vec<Uuid> = runs.iter().map(|r| r.id).collect();
                            checked.violations.push(format!(
                                "{label} (once at {at}, {:?}): {} runs {ids:?}",
                                trigger.misfire,
                                runs.len()
                            ));
                        }
                    }
                }
                ScheduleKind::Every { repeat_count, .. } => {
                    if let Some(limit) = repeat_count.filter(|limit| runs.len() > *limit as usize) {
                        checked.violations.push(format!("{label}: {} runs, more than its {limit} repeats", runs.len()));
                    }
                    if def.allow_concurrent && !paused.contains(&def.name) {
                        let mut runs = runs.to_vec();
                        runs.sort_by_key(|r| r.scheduled_us);
                        let fires = Fires { schedule: &trigger.schedule, calendar, from: lateness_from };
                        liveness.judge_intervals(&label, fires, &runs, "interval fires judged", checked);
                    }
                }
                _ => {}
            }
        }
    }
    changed_jobs_live(inputs, &calendars, &ran, lateness_from, &liveness, checked);
}

/// Each trigger's count of fires (its status) is the number of runs its fires started: a
/// fire counts when it starts a run, in the transaction that records the run, and a fire
/// its misfire policy skipped does not count. Left out: jobs an operation changed (a
/// trigger written anew counts from zero), jobs the store took late, and local jobs (each
/// node counts their fires in memory).
fn fire_counts(inputs: &Inputs<'_>, checked: &mut Checked) {
    let mut runs: BTreeMap<(&str, &str), u32> = BTreeMap::new();
    for run in inputs.history.iter().filter(|r| r.cause == RunCause::Schedule && !r.local) {
        if let Some(trigger) = &run.trigger {
            *runs.entry((&run.job, trigger)).or_default() += 1;
        }
    }
    for status in inputs.final_jobs {
        let def = &status.definition;
        if def.run_on_every_instance
            || inputs.workload.changed.contains(&def.name)
            || inputs.late_jobs.contains(&def.name)
        {
            continue;
        }
        // The definition's triggers (not the engine's one-shots, whose runs have other causes).
        for (defined, trigger) in def
            .triggers
            .iter()
            .filter_map(|d| status.triggers.iter().find(|t| t.name == d.name.as_str()).map(|t| (d, t)))
        {
            *checked.checked.entry("trigger fire counts").or_default() += 1;
            let label = format!("{}/{}", def.name, trigger.name);
            let ran = runs.get(&(def.name.as_str(), trigger.name.as_str())).copied().unwrap_or(0);
            if ran != trigger.fire_count {
                checked.violations.push(format!(
                    "{label}: its status counts {} fires, yet {ran} of its fires started a run",
                    trigger.fire_count
                ));
            }
            // An interval trigger with a repeat limit completes with its last fire's run,
            // and only then (a fire its misfire policy skipped does not count).
            if let ScheduleKind::Every { repeat_count: Some(limit), .. } = defined.schedule.kind {
                *checked.checked.entry("repeat limits").or_default() += 1;
                let complete = trigger.state == TriggerState::Complete;
                let wrong = if complete {
                    trigger.fire_count != limit
                } else {
                    trigger.fire_count >= limit && trigger.state != TriggerState::Acquired
                };
                if wrong {
                    checked.violations.push(format!(
                        "{label}: {:?} after {} of its {limit} repeats (next fire {:?})",
                        trigger.state, trigger.fire_count, trigger.next_fire
                    ));
                }
            }
        }
    }
}

/// When a run ran (true time; no end: still running at the end).
struct Span {
    start: DateTime<Utc>,
    end: Option<DateTime<Utc>>,
    run: Uuid,
}

impl Span {
    /// When `execution` (of run `run`) ran.
    fn of(run: Uuid, execution: &Execution<'_>) -> Self {
        Self { start: execution.start, end: execution.end.map(|(end, _)| end), run }
    }
}

/// Whether another run of a non-concurrent job (its runs' `spans`) may have
/// held back its fire at `at`, run as `own` (if it was): one that ran at some time from
/// [`BUSY_MARGIN`] and the most any node's clock is ahead before `at` until `own` started, or, if it never did, until the most
/// any node's clock is behind (and a second) after `at`.
fn blocked(spans: &[Span], at: DateTime<Utc>, own: Option<&Uuid>, liveness: &Liveness<'_, '_>) -> bool {
    // A node whose clock is ahead saw the fire due (and the job busy) that much earlier.
    let from = at - TimeDelta::from_std(BUSY_MARGIN).unwrap_or_default() - liveness.ahead;
    let until = own
        .and_then(|id| liveness.executions.get(id))
        .map_or(at + liveness.behind + TimeDelta::seconds(1), |execution| execution.start);
    spans.iter().any(|span| Some(&span.run) != own && span.start <= until && span.end.is_none_or(|end| end >= from))
}

/// The liveness rule for a local job, on every node alive at the end, from [`CATCH_UP`]
/// after the node started: each fire of its cron triggers from `from` runs there (for a
/// non-concurrent job, each that no run of it on the node held back: such a fire is
/// skipped there), and for a concurrent job so does the fire that follows each run of an
/// interval trigger without a repeat limit there (each node counts repeats in memory).
fn local_jobs_live(
    inputs: &Inputs<'_>,
    calendars: &Calendars,
    def: &JobDefinition,
    ran_here: &BTreeMap<(&str, &str, &str), Vec<&RunRecord>>,
    from: DateTime<Utc>,
    liveness: &Liveness<'_, '_>,
    checked: &mut Checked,
) {
    let status = inputs.final_jobs.iter().find(|s| s.definition.name == def.name);
    if status.is_none_or(|s| s.paused) {
        return;
    }
    // A non-concurrent job's runs on each node incarnation: a fire that finds one of them
    // running there is skipped there.
    let mut held: BTreeMap<(&str, u32), Vec<Span>> = BTreeMap::new();
    if !def.allow_concurrent {
        for (run, e) in liveness.executions.iter().filter(|(_, e)| e.facts.run.job == def.name) {
            held.entry((e.facts.node.as_str(), e.facts.incarnation)).or_default().push(Span::of(*run, e));
        }
    }
    for trigger in &def.triggers {
        let paused = status.is_some_and(|s| s.triggers.iter().any(|t| t.name == trigger.name.as_str() && t.paused));
        if paused {
            continue;
        }
        let calendar = trigger.schedule.calendar.as_ref().and_then(|c| calendars.get(c));
        for live in inputs.live {
            let from = from.max(add_duration(live.started, CATCH_UP));
            // This incarnation's runs (an earlier one's triggers died with it), in order.
            let here = ran_here.get(&(def.name.as_str(), trigger.name.as_str(), live.node.as_str()));
            let mut runs: Vec<&RunRecord> = here
                .into_iter()
                .flatten()
                .copied()
                .filter(|r| liveness.executions.get(&r.id).is_some_and(|e| e.facts.incarnation == live.incarnation))
                .collect();
            runs.sort_by_key(|r| r.scheduled_us);
            let label = format!("{}/{} on {} (local)", def.name, trigger.name, live.node);
            let fires = Fires { schedule: &trigger.schedule, calendar, from };
            match trigger.schedule.kind {
                ScheduleKind::Cron { .. } => {
                    let scheduled: BTreeMap<i64, Uuid> = runs.iter().map(|r| (r.scheduled_us, r.id)).collect();
                    let (held, what) = if def.allow_concurrent {
                        (None, "liveness fires of local jobs")
                    } else {
                        let here = held.get(&(live.node.as_str(), live.incarnation)).map_or(&[][..], Vec::as_slice);
                        (Some(here), "liveness fires of idle non-concurrent local jobs")
                    };
                    liveness.judge_fires(&label, fires, Some(&scheduled), held, what, checked);
                }
                ScheduleKind::Every { repeat_count: None, .. } if def.allow_concurrent => {
                    liveness.judge_intervals(&label, fires, &runs, "interval fires of local jobs", checked);
                }
                _ => {}
            }
        }
    }
}

/// The liveness rule: a fire starts within the bound.
struct Liveness<'e, 'a> {
    executions: &'e BTreeMap<Uuid, Execution<'a>>,
    /// The most any node's clock is behind.
    behind: TimeDelta,
    /// The most any node's clock is ahead.
    ahead: TimeDelta,
    /// [`LIVENESS_BOUND`] plus `behind`.
    bound: TimeDelta,
    /// The latest fire judged: one the bound before the end.
    horizon: DateTime<Utc>,
}

/// A trigger's schedule and calendar, and from when its fires are judged.
struct Fires<'s> {
    schedule: &'s JobSchedule,
    calendar: Option<&'s dyn JobCalendar>,
    from: DateTime<Utc>,
}

impl Liveness<'_, '_> {
    /// Judges each of `fires` up to the horizon, run as the run of `runs` scheduled at its
    /// time (if any), counting them under `what`.
    /// With `held`, the spans of the runs that could hold a fire back (a non-concurrent
    /// job's), only the fires none of them held back are judged.
    fn judge_fires(
        &self,
        label: &str,
        fires: Fires<'_>,
        runs: Option<&BTreeMap<i64, Uuid>>,
        held: Option<&[Span]>,
        what: &'static str,
        checked: &mut Checked,
    ) {
        let mut next = fires.schedule.first_fire(fires.from, fires.calendar);
        let mut count = 0u32;
        while let Some(at) = next.filter(|at| *at <= self.horizon) {
            count += 1;
            let run = runs.and_then(|r| r.get(&at.timestamp_micros()));
            if held.is_none_or(|spans| !blocked(spans, at, run, self)) {
                *checked.checked.entry(what).or_default() += 1;
                self.judge(label, at, run, checked);
            }
            let previous = PreviousFire { scheduled_at: at, completed_at: at, fire_count: count };
            next = fires.schedule.next_fire(&previous, fires.calendar);
        }
    }

    /// Judges the fires from `fires.from` that follow `runs`, the runs of an interval
    /// trigger's fires in order (its first fire's first): each run that ended by itself
    /// re-armed the trigger one interval after its end (or its scheduled time, if later),
    /// unless it was the last of its repeats.
    fn judge_intervals(
        &self,
        label: &str,
        fires: Fires<'_>,
        runs: &[&RunRecord],
        what: &'static str,
        checked: &mut Checked,
    ) {
        let scheduled: BTreeMap<i64, Uuid> = runs.iter().map(|r| (r.scheduled_us, r.id)).collect();
        for (fired, run) in (1u32..).zip(runs) {
            let Some(finished) = run.finished_us.map(time).filter(|_| run.state != RunState::Lost) else { continue };
            let previous =
                PreviousFire { scheduled_at: time(run.scheduled_us), completed_at: finished, fire_count: fired };
            let Some(at) = fires.schedule.next_fire(&previous, fires.calendar) else { continue };
            if at >= fires.from && at <= self.horizon {
                *checked.checked.entry(what).or_default() += 1;
                self.judge(label, at, scheduled.get(&at.timestamp_micros()), checked);
            }
        }
    }

    /// Judges the fire of `label` at `at`, run as `run` (if it was).
    fn judge(&self, label: &str, at: DateTime<Utc>, run: Option<&Uuid>, checked: &mut Checked) {
        match run.and_then(|id| self.executions.get(id)) {
            None => {
                checked.violations.push(format!("{label}: the fire at {at} (liveness phase) did not start by the end"))
            }
            Some(execution) => {
                *checked.checked.entry("liveness fires judged").or_default() += 1;
                let late = execution.start - at;
                checked.liveness_worst = checked.liveness_worst.max(Some(late - self.behind));
                if late > self.bound {
                    checked.violations.push(format!(
                        "{label}: the fire at {at} (liveness phase) started late, at {}",
                        execution.start
                    ));
                }
            }
        }
    }
}

/// The liveness rule for the jobs operations changed, which the accounting leaves out (their
/// fires do not follow from one definition): the fires of the definition in force at the
/// end (its cron triggers', and its interval triggers' without a repeat limit), from
/// [`CATCH_UP`] after the last operation on the job returned (none pending then).
fn changed_jobs_live(
    inputs: &Inputs<'_>,
    calendars: &Calendars,
    ran: &BTreeMap<(&str, &str), Vec<&RunRecord>>,
    lateness_from: DateTime<Utc>,
    liveness: &Liveness<'_, '_>,
    checked: &mut Checked,
) {
    for status in inputs.final_jobs {
        let def = &status.definition;
        let judged = inputs.workload.changed.contains(&def.name)
            && !inputs.in_flux.contains(&def.name)
            && !inputs.late_jobs.contains(&def.name)
            && def.allow_concurrent
            && !def.run_on_every_instance
            && !status.paused;
        let Some(changed) = inputs.changed_at.get(&def.name).filter(|_| judged) else { continue };
        let from = lateness_from.max(add_duration(*changed, CATCH_UP));
        for trigger in &def.triggers {
            let paused = status.triggers.iter().any(|t| t.name == trigger.name.as_str() && t.paused);
            if paused {
                continue;
            }
            let runs = ran.get(&(def.name.as_str(), trigger.name.as_str())).map_or(&[][..], Vec::as_slice);
            let calendar = trigger.schedule.calendar.as_ref().and_then(|c| calendars.get(c));
            let label = format!("{}/{} (changed)", def.name, trigger.name);
            let fires = Fires { schedule: &trigger.schedule, calendar, from };
            match trigger.schedule.kind {
                ScheduleKind::Cron { .. } => {
                    let scheduled: BTreeMap<i64, Uuid> = runs.iter().map(|r| (r.scheduled_us, r.id)).collect();
                    liveness.judge_fires(
                        &label,
                        fires,
                        Some(&scheduled),
                        None,
                        "liveness fires of changed jobs",
                        checked,
                    );
                }
                ScheduleKind::Every { repeat_count: None, .. } => {
                    // The runs of the trigger as it is at the end: those from `from` on (an
                    // earlier one may have been the old definition's, which re-armed nothing).
                    let mut runs: Vec<&RunRecord> =
                        runs.iter().copied().filter(|r| time(r.scheduled_us) >= from).collect();
                    runs.sort_by_key(|r| r.scheduled_us);
                    liveness.judge_intervals(&label, fires, &runs, "interval fires of changed jobs", checked);
                }
                _ => {}
            }
        }
    }
}

/// Retries follow the policy: a `retry-…` run follows a failed run, with attempt + 1 and
/// `retry_of` = the chain's first run, never past `max_retries`; and a failed run with
/// retries left gets exactly one.
fn retries(
    inputs: &Inputs<'_>,
    definitions: &BTreeMap<&JobName, &JobDefinition>,
    history: &BTreeMap<Uuid, &RunRecord>,
    checked: &mut Checked,
) {
    let mut retries_of: BTreeMap<String, Vec<&RunRecord>> = BTreeMap::new();
    for run in inputs.history.iter().filter(|r| r.cause == RunCause::Retry && !r.local) {
        *checked.checked.entry("retries").or_default() += 1;
        let Some(failed_simple) = run.trigger.as_deref().and_then(|t| t.strip_prefix("retry-")) else {
            checked.violations.push(format!("retry run {} has trigger {:?}, not retry-…", run.id, run.trigger));
            continue;
        };
        retries_of.entry(failed_simple.to_owned()).or_default().push(run);
        let Some(failed) = Uuid::try_parse(failed_simple).ok().and_then(|id| history.get(&id)) else {
            checked
                .violations
                .push(format!("retry run {} follows run {failed_simple}, which is not in history", run.id));
            continue;
        };
        if failed.state != RunState::Failed {
            checked
                .violations
                .push(format!("retry run {} follows run {} which ended {:?}", run.id, failed.id, failed.state));
        }
        let root = failed.retry_of.unwrap_or(failed.id);
        if run.attempt != failed.attempt + 1 || run.retry_of != Some(root) {
            checked.violations.push(format!(
                "retry run {} has attempt {} retry_of {:?}; expected {} and {root}",
                run.id,
                run.attempt,
                run.retry_of,
                failed.attempt + 1
            ));
        }
        let stable = JobName::new(&run.job).ok().filter(|n| !inputs.workload.changed.contains(n));
        let policy = stable.as_ref().and_then(|n| definitions.get(n)).and_then(|d| d.retry.as_ref());
        if let Some(policy) = policy {
            if run.attempt > policy.max_retries() + 1 {
                checked.violations.push(format!(
                    "retry run {} is attempt {}, past {} retries",
                    run.id,
                    run.attempt,
                    policy.max_retries()
                ));
            }
        }
    }
    for (simple, runs) in &retries_of {
        if runs.len() > 1 {
            let ids: Vec<Uuid> = runs.iter().map(|r| r.id).collect();
            checked.violations.push(format!("run {simple} was retried {} times: {ids:?}", runs.len()));
        }
    }
    let horizon = inputs.end - TimeDelta::from_std(LIVENESS_BOUND).unwrap_or_default();
    for failed in inputs.history.iter().filter(|r| r.state == RunState::Failed && !r.local) {
        let Ok(name) = JobName::new(&failed.job) else { continue };
        if inputs.workload.changed.contains(&name) {
            continue;
        }
        let Some(policy) = definitions.get(&name).and_then(|d| d.retry.as_ref()) else { continue };
        if failed.attempt > policy.max_retries() {
            continue;
        }
        let Some(finished) = failed.finished_us.and_then(from_micros) else { continue };
        if add_duration(finished, policy.delay_for(failed.attempt)) > horizon {
            continue;
        }
        let simple = failed.id.simple().to_string();
        // A retry still waiting (a busy non-concurrent job) is pending, not lost.
        let pending = inputs.triggers.contains(&(failed.job.clone(), format!("retry-{simple}")));
        if pending {
            *checked.checked.entry("retries pending at the end").or_default() += 1;
        }
        if !retries_of.contains_key(&simple) && !pending {
            checked.violations.push(format!(
                "run {} of {} failed at {finished} (attempt {}) and was never retried",
                failed.id, failed.job, failed.attempt
            ));
        }
    }
}

/// A lost run of a job that requests recovery is recovered exactly once; other lost runs
/// never are.
fn recovery(inputs: &Inputs<'_>, definitions: &BTreeMap<&JobName, &JobDefinition>, checked: &mut Checked) {
    let mut recoveries: BTreeMap<&str, Vec<Uuid>> = BTreeMap::new();
    for run in inputs.history.iter().filter(|r| r.cause == RunCause::Recovery) {
        if let Some(lost) = run.trigger.as_deref().and_then(|t| t.strip_prefix("recovery-")) {
            recoveries.entry(lost).or_default().push(run.id);
        }
    }
    let horizon = inputs.end - TimeDelta::from_std(LIVENESS_BOUND).unwrap_or_default();
    for lost in inputs.history.iter().filter(|r| r.state == RunState::Lost) {
        *checked.checked.entry("lost runs").or_default() += 1;
        let simple = lost.id.simple().to_string();
        let count = recoveries.get(simple.as_str()).map_or(0, Vec::len);
        let Ok(name) = JobName::new(&lost.job) else { continue };
        let wants = definitions.get(&name).is_some_and(|d| d.requests_recovery);
        let declared = lost.finished_us.and_then(from_micros);
        if inputs.workload.changed.contains(&name) || lost.local {
            if count > 1 {
                checked.violations.push(format!("lost run {} was recovered {count} times", lost.id));
            }
            continue;
        }
        // A recovery still waiting (a busy non-concurrent job) is pending, not lost.
        let pending = inputs.triggers.contains(&(lost.job.clone(), format!("recovery-{simple}")));
        match (wants, count) {
            (true, 1) | (false, 0) => {}
            (true, 0) if pending || declared.is_none_or(|d| d > horizon) => {}
            (true, n) => checked.violations.push(format!(
                "lost run {} of {} (declared at {declared:?}) was recovered {n} times, expected once",
                lost.id, lost.job
            )),
            (false, n) => checked.violations.push(format!(
                "lost run {} of {} was recovered {n} times, but the job does not request recovery",
                lost.id, lost.job
            )),
        }
    }
}

/// At the end, a `Running` run is really running on a live node (or about to start).
fn nothing_stuck(inputs: &Inputs<'_>, executions: &BTreeMap<Uuid, Execution<'_>>, checked: &mut Checked) {
    let live: BTreeSet<(&str, u32)> = inputs.live.iter().map(|l| (l.node.as_str(), l.incarnation)).collect();
    // A run taken ahead (up to a second) for a start after the end never started; its
    // scheduled time is on its node's clock, up to the largest skew behind true time.
    let skew = inputs.options.faults.rate(crate::options::FaultKind::Skew).unwrap_or(0.0).max(0.0);
    let soon = inputs.end - TimeDelta::seconds(2) - TimeDelta::milliseconds((skew * 1000.0) as i64);
    for run in inputs.history.iter().filter(|r| r.state == RunState::Running) {
        *checked.checked.entry("running at the end").or_default() += 1;
        let fine = match executions.get(&run.id) {
            Some(execution) => {
                execution.end.is_none() && live.contains(&(execution.facts.node.as_str(), execution.facts.incarnation))
            }
            None => time(run.scheduled_us) >= soon,
        };
        if !fine {
            let what = executions.get(&run.id).map_or_else(
                || "never started".to_owned(),
                |e| {
                    format!(
                        "started {} on {}#{}, ended {:?}",
                        e.start,
                        e.facts.node,
                        e.facts.incarnation,
                        e.end.map(|(at, _)| at)
                    )
                },
            );
            checked.violations.push(format!(
                "run {} of {} is stuck Running on {} after the liveness phase ({what})",
                run.id, run.job, run.node
            ));
        }
    }
}

/// A finished run's record says what its job did (SPEC §8): `Succeeded` only when the
/// job returned success, `Failed` with the job's own failure (no code, here) only when it
/// failed, with `SCHEDULING_UNEXPECTED_001` only when it panicked; whatever it did, a
/// cancellation (`Canceled`) or a timeout (`Failed` with `SCHEDULING_TIMEOUT_001`) that
/// came first decides instead, and a timeout only once the job had run that long. A job
/// killed with its node never completed: its run can only end `Lost`. Any run may have
/// been declared lost before its completion came.
fn outcomes_recorded(
    inputs: &Inputs<'_>,
    definitions: &BTreeMap<&JobName, &JobDefinition>,
    history: &BTreeMap<Uuid, &RunRecord>,
    executions: &BTreeMap<Uuid, Execution<'_>>,
    checked: &mut Checked,
) {
    let timed_out = Some(ErrorCode::RunTimedOut.as_str());
    let panicked = Some(ErrorCode::Unexpected.as_str());
    for (id, execution) in executions {
        let (Some((end, seq)), Some(record)) = (execution.end, history.get(id)) else { continue };
        if !record.state.is_final() || record.state == RunState::Lost {
            continue;
        }
        *checked.checked.entry("outcomes recorded").or_default() += 1;
        let code = record.error_code.as_deref();
        let (did, own) = match &inputs.events[seq].kind {
            EventKind::End { outcome: "ok", .. } => ("succeeded", record.state == RunState::Succeeded),
            EventKind::End { outcome: "fail", .. } => ("failed", record.state == RunState::Failed && code.is_none()),
            EventKind::End { outcome: "panic", .. } => {
                ("panicked", record.state == RunState::Failed && code == panicked)
            }
            EventKind::End { .. } => ("stopped on its cancellation", false),
            _ => ("was killed with its node", false),
        };
        let killed = matches!(inputs.events[seq].kind, EventKind::Killed { .. });
        let preempted =
            !killed && (record.state == RunState::Canceled || record.state == RunState::Failed && code == timed_out);
        let wrong = if !own && !preempted {
            Some(format!("recorded {:?} ({code:?})", record.state))
        } else if record.state == RunState::Failed && code == timed_out {
            *checked.checked.entry("timeouts recorded").or_default() += 1;
            // Changed jobs' timeouts are not known here.
            let job = JobName::new(&record.job).ok().filter(|name| !inputs.workload.changed.contains(name));
            let timeout = job.as_ref().and_then(|name| definitions.get(name)).map(|def| def.timeout);
            match timeout {
                Some(None) => Some("timed out, yet its job has no timeout".to_owned()),
                Some(Some(timeout)) if end - execution.start < TimeDelta::from_std(timeout).unwrap_or_default() => {
                    Some(format!("timed out after {}, before its timeout of {timeout:?}", end - execution.start))
                }
                _ => None,
            }
        } else {
            None
        };
        if let Some(wrong) = wrong {
            checked.violations.push(format!(
                "run {id} of {} (started {} on {}, ended {end}): the job {did}, yet the run was {wrong}",
                record.job, execution.start, execution.facts.node
            ));
        }
    }
}

/// At the end, no trigger of a cluster-unique job waits for a fire that was due the
/// liveness bound before (plus the most any node's clock was behind), or before the last
/// operation on its job returned if that was later: after the liveness phase every due
/// fire was taken, whatever made it (a schedule, an operation, a retry, a
/// recovery, an enqueue). Nor does one stay `Blocked` while its job has been idle that
/// long: the end of the run that held the slot releases its blocked triggers. Left out:
/// local jobs (their triggers fire in each node's memory), paused jobs and triggers, jobs
/// with operations still pending, and a non-concurrent job still running somewhere (a
/// node leaves its fires waiting while it keeps a run of it that holds no slot).
fn nothing_overdue(inputs: &Inputs<'_>, executions: &BTreeMap<Uuid, Execution<'_>>, checked: &mut Checked) {
    if inputs.live.is_empty() {
        return;
    }
    let behind = (-inputs.clock_offsets.0).max(TimeDelta::zero());
    let horizon = inputs.end - TimeDelta::from_std(LIVENESS_BOUND).unwrap_or_default() - behind;
    // Per job: whether a run of it was still going at the end, and when the last one ended.
    let mut activity: BTreeMap<&str, (bool, Option<DateTime<Utc>>)> = BTreeMap::new();
    for execution in executions.values() {
        let (open, last) = activity.entry(execution.facts.run.job.as_str()).or_default();
        match execution.end {
            None => *open = true,
            Some((end, _)) => *last = (*last).max(Some(end)),
        }
    }
    for status in inputs.final_jobs {
        let def = &status.definition;
        if def.run_on_every_instance || status.paused || inputs.in_flux.contains(&def.name) {
            continue;
        }
        let (open, last_end) = activity.get(def.name.as_str()).copied().unwrap_or_default();
        let busy = open || status.running > 0;
        // A fire due while its job was paused (or its trigger was not yet written) may be
        // taken from the last operation on the job on.
        let changed = inputs.changed_at.get(&def.name).copied();
        for trigger in status.triggers.iter().filter(|t| !t.paused) {
            let overdue = match trigger.state {
                TriggerState::Waiting if def.allow_concurrent || !busy => {
                    trigger.next_fire.filter(|due| (*due).max(changed.unwrap_or(*due)) <= horizon)
                }
                // Blocked since the job's last run ended, with nothing running now.
                TriggerState::Blocked if !busy => {
                    let idle_since = last_end.map(|end| end + TimeDelta::from_std(BUSY_MARGIN).unwrap_or_default());
                    trigger.next_fire.filter(|_| idle_since.is_none_or(|idle| idle <= horizon))
                }
                _ => None,
            };
            *checked.checked.entry("triggers at the end").or_default() += 1;
            if let Some(due) = overdue {
                checked.violations.push(format!(
                    "{}/{} ({:?}): its fire due at {due} was still not taken at the end ({})",
                    def.name, trigger.name, trigger.state, inputs.end
                ));
            }
        }
    }
}

/// Every run a job started is in history, local runs included (a node starts a run only
/// once the store has recorded it), or was deleted by retention no earlier than its end
/// allows. The leader deletes a run once its own clock is `history_retention` past the
/// run's `finished_at` (written by the clock of the node that ended it), so in true time
/// the deletion comes at least `history_retention` after the run's end (for a run declared
/// lost, after the declaration), less how far two clocks can disagree, and at least
/// `history_retention` after `finished_at` less the highest clock offset.
fn history_kept(
    inputs: &Inputs<'_>,
    history: &BTreeMap<Uuid, &RunRecord>,
    executions: &BTreeMap<Uuid, Execution<'_>>,
    checked: &mut Checked,
) {
    let retention = TimeDelta::from_std(inputs.options.history_retention).unwrap_or(TimeDelta::MAX);
    let (lowest, highest) = inputs.clock_offsets;
    let spread = highest - lowest;
    for (id, execution) in executions {
        if !history.contains_key(id) {
            checked.violations.push(format!(
                "run {id} of {} started on {} at {} but is not in history",
                execution.facts.run.job, execution.facts.node, execution.start
            ));
        }
    }
    for (id, &deleted_at) in inputs.deleted {
        let Some(record) = history.get(id) else { continue };
        let finished = record.finished_us.map(time);
        let by_record = finished.map(|f| f - highest + retention);
        // A run declared lost ended, for history, when it was declared: its job may have
        // run on (on a node cut off from the store) after that.
        let own_end = executions.get(id).and_then(|e| e.end).filter(|_| record.state != RunState::Lost);
        let by_end = own_end.map(|(end, _)| end + retention - spread);
        if let Some(earliest) = by_record.into_iter().chain(by_end).max().filter(|earliest| deleted_at < *earliest) {
            checked.violations.push(format!(
                "run {id} of {} ({:?}, finished_at {finished:?}, ended {:?}) deleted at {} before its retention \
                 ({}s; clocks within {}..{} ms of true time): not before {earliest}",
                record.job,
                record.state,
                executions.get(id).and_then(|e| e.end).map(|(end, _)| end),
                deleted_at,
                retention.num_seconds(),
                lowest.num_milliseconds(),
                highest.num_milliseconds(),
            ));
        }
        if !record.state.is_final() {
            checked
                .violations
                .push(format!("run {id} of {} deleted at {deleted_at} while {:?}", record.job, record.state));
        }
    }
    *checked.checked.entry("runs deleted by retention").or_default() += inputs.deleted.len() as u64;
}

fn time(micros: i64) -> DateTime<Utc> {
    from_micros(micros).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use chrono::{DateTime, TimeDelta, Utc};
    use sundial::job::{RunCause, RunState};
    use sundial::store::records::RunRecord;

    use super::{excused_overlap, overlapping_pairs, overlapping_within};

    /// A run record of `state` that finished (was declared lost) at `finished_s`.
    fn record(state: RunState, finished_s: Option<i64>) -> RunRecord {
        RunRecord {
            id: uuid::Uuid::from_u128(1),
            job: "job".into(),
            trigger: Some("t".into()),
            scheduled_us: 0,
            cause: RunCause::Schedule,
            attempt: 1,
            retry_of: None,
            data: "{}".into(),
            state,
            node: "node-a".into(),
            started_us: 0,
            finished_us: finished_s.map(|s| s * 1_000_000),
            error_code: None,
            error_message: None,
            exclusive: true,
            local: false,
        }
    }

    fn at(s: i64) -> DateTime<Utc> {
        DateTime::from_timestamp(s, 0).unwrap()
    }

    #[test]
    fn only_a_run_started_elsewhere_after_the_loss_was_declared_is_excused() {
        let lost = record(RunState::Lost, Some(100));
        let no_offset = TimeDelta::zero();
        let excused = |record: Option<&RunRecord>, ignores: bool, elsewhere: bool, start: i64, offset: TimeDelta| {
            excused_overlap(record, ignores, elsewhere, at(start), offset)
        };
        // Started elsewhere after the declaration, beside a run that ignored cancellation.
        assert!(excused(Some(&lost), true, true, 100, no_offset));
        assert!(excused(Some(&lost), true, true, 160, no_offset));
        // Started while the store still gave the slot to the lost run.
        assert!(!excused(Some(&lost), true, true, 99, no_offset));
        // The declaring clock may run ahead of true time by the highest offset, no more.
        assert!(excused(Some(&lost), true, true, 95, TimeDelta::seconds(5)));
        assert!(!excused(Some(&lost), true, true, 94, TimeDelta::seconds(5)));
        // On the lost run's own node (same process), which knows its run still runs.
        assert!(!excused(Some(&lost), true, false, 160, no_offset));
        // A run that heeded cancellation, one that was not lost, or one without a
        // declaration time is never excused.
        assert!(!excused(Some(&lost), false, true, 160, no_offset));
        assert!(!excused(Some(&record(RunState::Failed, Some(100))), true, true, 160, no_offset));
        assert!(!excused(Some(&record(RunState::Lost, None)), true, true, 160, no_offset));
        assert!(!excused(None, true, true, 160, no_offset));
    }

    /// What the sweep must equal: every pair tried.
    fn all_pairs(a: &[(u64, u64)], b: &[(u64, u64)]) -> Vec<(usize, usize)> {
        let mut pairs = Vec::new();
        for (i, x) in a.iter().enumerate() {
            for (j, y) in b.iter().enumerate() {
                let (first, second) = if x.0 < y.0 { (x, y) } else { (y, x) };
                if second.0 < first.1 {
                    pairs.push((i, j));
                }
            }
        }
        pairs
    }

    #[test]
    fn overlaps_within_one_list_are_every_overlapping_pair() {
        let mut entropy = sundial::entropy::Entropy::from_seed(8);
        for round in 0..200u32 {
            let longest = if round % 2 == 0 { 10 } else { 80 };
            let spans: Vec<(u64, u64)> = (0..40u64)
                .map(|i| {
                    let start = i * 7 + entropy.below(7);
                    (start, start + entropy.below(longest))
                })
                .collect();
            let mut expected = Vec::new();
            for j in 0..spans.len() {
                for i in 0..j {
                    if spans[j].0 < spans[i].1 {
                        expected.push((i, j));
                    }
                }
            }
            assert_eq!(overlapping_within(&spans), expected, "round {round}: {spans:?}");
        }
        // Two runs inside a long one overlap each other too; touching spans do not.
        assert_eq!(overlapping_within(&[(0, 100), (10, 30), (20, 40), (40, 50)]), vec![(0, 1), (0, 2), (1, 2), (0, 3)]);
    }

    #[test]
    fn the_sweep_finds_exactly_the_overlapping_pairs() {
        let mut entropy = sundial::entropy::Entropy::from_seed(7);
        for round in 0..200u32 {
            // Distinct starts (as log positions are), each span in `a` or `b` at random,
            // from empty to long.
            let longest = if round % 2 == 0 { 10 } else { 80 };
            let (mut a, mut b) = (Vec::new(), Vec::new());
            for i in 0..40u64 {
                let start = i * 7 + entropy.below(7);
                let span = (start, start + entropy.below(longest));
                if entropy.below(2) == 0 {
                    a.push(span)
                } else {
                    b.push(span)
                }
            }
            assert_eq!(overlapping_pairs(&a, &b), all_pairs(&a, &b), "round {round}: a {a:?}, b {b:?}");
        }
        assert_eq!(overlapping_pairs::<u64>(&[], &[(1, 5)]), Vec::new());
        // Touching spans do not overlap; one inside another does.
        assert_eq!(overlapping_pairs(&[(0, 5), (20, 30)], &[(5, 9), (21, 22)]), vec![(1, 1)]);
    }
}
