//! History is never lost before retention allows.

use std::collections::BTreeMap;

use chrono::TimeDelta;
use sundial::job::RunState;
use sundial::store::records::RunRecord;
use uuid::Uuid;

use super::{time, Checked, Execution, Inputs};

/// Every run a job started is in history, local runs included (a node starts a run only
/// once the store has recorded it), or was deleted by retention no earlier than its end
/// allows. The leader deletes a run once its own clock is `history_retention` past the
/// run's `finished_at` (written by the clock of the node that ended it), so in true time
/// the deletion comes at least `history_retention` after the run's end (for a run declared
/// lost, after the declaration), less how far two clocks can disagree, and at least
/// `history_retention` after `finished_at` less the highest clock offset.
pub(super) fn history_kept(
    inputs: &Inputs<'_>,
    history: &BTreeMap<Uuid, &RunRecord>,
    executions: &BTreeMap<Uuid, Execution<'_>>,
    checked: &mut Checked,
) {
    let retention = TimeDelta::from_std(inputs.setting.history_retention).unwrap_or(TimeDelta::MAX);
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
