//! The store's invariants, asserted at every write of a run or trigger record, in every
//! build. Each write passes what it replaces (a trigger's old record, a run's id and
//! state) with the new record, so a check sees the transition as well as the state. A violation is a bug in the store's own logic
//! (records come only from these transactions, and decoding refuses malformed bytes), so
//! it panics, before the transaction could commit the broken state: the actor running it
//! fails loudly, as the simulation's checkers would, but in production too. The checks
//! are a few comparisons per write.

use super::records::{RunRecord, TriggerRecord, TriggerWas};
use crate::job::{RunState, TriggerState};
use uuid::Uuid;

/// Checks a run record write: a run is born `Running`; afterwards it only moves along
/// [`RunState::can_transition_to`] (a final run is never rewritten to another state), under
/// its own id; it has an end time exactly when it ended, and an attempt number from 1.
pub(crate) fn run_write<S>(old: Option<(Uuid, RunState)>, new: &RunRecord<S>) {
    match old {
        None => {
            assert!(new.state == RunState::Running, "invariant: run {} is created {:?}, not Running", new.id, new.state)
        }
        Some((old_id, old_state)) => {
            assert!(old_id == new.id, "invariant: run {old_id} rewritten as run {}", new.id);
            assert!(
                old_state == new.state || old_state.can_transition_to(new.state),
                "invariant: run {} moves {:?} → {:?}",
                new.id,
                old_state,
                new.state
            );
        }
    }
    assert!(
        new.state.is_final() == new.finished_us.is_some(),
        "invariant: run {} is {:?} with end time {:?}",
        new.id,
        new.state,
        new.finished_us
    );
    assert!(new.attempt >= 1, "invariant: run {} has attempt 0", new.id);
}

/// Checks that a trigger record write keeps the trigger it replaces (job and name).
pub(crate) fn same_trigger(old: &TriggerRecord, new: &TriggerRecord) {
    assert!(
        old.job == new.job && old.name == new.name,
        "invariant: trigger {}/{} rewritten as {}/{}",
        old.job,
        old.name,
        new.job,
        new.name
    );
}

/// Checks a trigger record write ([`same_trigger`] checks its identity): within one
/// incarnation (the same `uid`; a new definition makes a new one) it only moves along
/// [`TriggerState::can_transition_to`]; a waiting trigger has a due time, and one in
/// `Error` says why.
pub(crate) fn trigger_write<S: AsRef<str>>(old: Option<TriggerWas>, new: &TriggerRecord<S>) {
    let (job, name) = (new.job.as_ref(), new.name.as_ref());
    if let Some(old) = old {
        assert!(
            old.uid != new.uid || old.state == new.state || old.state.can_transition_to(new.state),
            "invariant: trigger {}/{} moves {:?} → {:?}",
            job,
            name,
            old.state,
            new.state
        );
    }
    assert!(
        new.state != TriggerState::Waiting || new.next_fire_us.is_some(),
        "invariant: trigger {}/{} is Waiting with no due time",
        job,
        name
    );
    assert!(
        new.state != TriggerState::Error || new.error.is_some(),
        "invariant: trigger {}/{} is in Error without a reason",
        job,
        name
    );
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::job::{JobRun, RunCause};
    use crate::name::JobName;
    use chrono::DateTime;

    fn running() -> RunRecord {
        let at = DateTime::from_timestamp(1_800_000_000, 0).unwrap();
        let run = JobRun {
            id: Uuid::from_u128(7),
            job: JobName::new("job").unwrap(),
            trigger: None,
            scheduled_at: at,
            cause: RunCause::Manual,
            attempt: 1,
            retry_of: None,
            data: Default::default(),
        };
        RunRecord::running(&run, "n1", at, false, false)
    }

    fn ended(run: &RunRecord, state: RunState) -> RunRecord {
        RunRecord { state, finished_us: Some(run.started_us + 1), ..run.clone() }
    }

    fn waiting() -> TriggerRecord {
        crate::store::records::waiting_trigger()
    }

    fn panics(f: impl FnOnce() + std::panic::UnwindSafe) -> bool {
        std::panic::catch_unwind(f).is_err()
    }

    #[test]
    fn runs_are_born_running_and_end_once() {
        let run = running();
        run_write(None, &run);
        let failed = ended(&run, RunState::Failed);
        run_write(Some((run.id, run.state)), &failed);
        run_write(Some((failed.id, failed.state)), &failed);
        assert!(panics(|| run_write(None, &ended(&running(), RunState::Succeeded))), "born ended");
        assert!(
            panics(|| run_write(Some((failed.id, failed.state)), &ended(&failed, RunState::Succeeded))),
            "ended twice"
        );
        assert!(
            panics(|| run_write(Some((failed.id, failed.state)), &RunRecord { finished_us: None, ..running() })),
            "revived"
        );
        assert!(
            panics(|| run_write(
                Some((running().id, RunState::Running)),
                &RunRecord { state: RunState::Lost, ..running() }
            )),
            "no end time"
        );
        assert!(panics(|| run_write(
            Some((running().id, RunState::Running)),
            &RunRecord { id: Uuid::from_u128(8), ..running() }
        )));
        assert!(panics(|| run_write(None, &RunRecord { attempt: 0, ..running() })));
    }

    #[test]
    fn triggers_move_along_the_table_within_one_incarnation() {
        let old = waiting();
        trigger_write(None, &old);
        trigger_write(Some(old.was()), &TriggerRecord { state: TriggerState::Acquired, ..old.clone() });
        let complete = TriggerRecord { state: TriggerState::Complete, next_fire_us: None, ..old.clone() };
        assert!(panics(|| trigger_write(Some(complete.was()), &old)), "Complete is terminal");
        trigger_write(Some(complete.was()), &TriggerRecord { uid: 2, ..old.clone() });
        assert!(panics(|| same_trigger(&old, &TriggerRecord { name: "u".into(), ..old.clone() })));
        assert!(panics(|| trigger_write(None, &TriggerRecord { next_fire_us: None, ..old.clone() })));
        let error = TriggerRecord { state: TriggerState::Error, ..old.clone() };
        assert!(panics(|| trigger_write(Some(old.was()), &error)), "an error needs its reason");
        trigger_write(Some(old.was()), &TriggerRecord { error: Some("unknown type".into()), ..error });
    }
}
