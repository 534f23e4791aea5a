//! Run states sampled during the simulation: every transition legal, final states kept.

use std::collections::{BTreeMap, BTreeSet};

use chrono::{DateTime, Utc};
use sundial::job::RunState;
use sundial::store::records::RunRecord;
use uuid::Uuid;

/// Run states sampled during the simulation, cheaply: each sample reads the running-run
/// index, and the record of every run that left it since the last sample. A run must leave
/// `Running` by a legal transition, never come back, and keep its final state to the end
/// (in the store, or in the record retention deleted).
#[derive(Debug, Clone, Default)]
pub struct Samples {
    running: BTreeSet<Uuid>,
    finals: BTreeMap<Uuid, (RunState, DateTime<Utc>)>,
    violations: Vec<String>,
    pub(super) count: u64,
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
    pub(super) fn finish(&self, history: &BTreeMap<Uuid, &RunRecord>) -> Vec<String> {
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
