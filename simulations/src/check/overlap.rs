//! Runs of a non-concurrent job never overlap (the one excused case reported apart).

use std::collections::BTreeMap;

use chrono::{DateTime, TimeDelta, Utc};
use sundial::job::{JobDefinition, RunCause, RunState};
use sundial::name::JobName;
use sundial::store::records::RunRecord;
use uuid::Uuid;

use super::{time, Checked, Execution, Inputs};

/// A non-concurrent job's runs never overlap in (true) time; a local job's only on one node.
///
/// A job whose definition switches between local and cluster-unique is judged by each
/// run's kind (a run started by a node's local triggers is local; every other run was
/// taken from the store and held the job's slot): its store runs never overlap each
/// other, its runs on one node never overlap, and a run of a scheduled fire taken from
/// the store (the job was cluster-unique then) overlaps no local run anywhere. Local runs
/// on different nodes, and a local run beside a store run of the job's local era (an
/// enqueued one) on another node, may overlap.
pub(super) fn no_overlap(
    inputs: &Inputs<'_>,
    definitions: &BTreeMap<&JobName, &JobDefinition>,
    history: &BTreeMap<Uuid, &RunRecord>,
    executions: &BTreeMap<Uuid, Execution<'_>>,
    checked: &mut Checked,
) {
    let mut groups: BTreeMap<(&JobName, &str), Vec<&Execution<'_>>> = BTreeMap::new();
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
        let node = if def.run_on_every_instance { execution.facts.node.as_str() } else { "" };
        groups.entry((&def.name, node)).or_default().push(execution);
    }
    for ((job, _), runs) in groups {
        exclusive(inputs, history, job.as_str(), runs, checked);
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
