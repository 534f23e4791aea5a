//! The workload's operations on the running cluster: each sent to a node that is up,
//! retried while the store refuses it as unavailable, and those behind it on the same job
//! held until it is done.

use sundial::time::Clock;
use uuid::Uuid;

use super::{Action, World, OP_RETRY};
use crate::workload::Op;

impl World {
    pub(super) async fn op(&mut self, op: Op, retry: bool) {
        if !retry {
            self.count("operations");
        }
        let job = op.ordered_job().cloned();
        if let Some(job) = job.as_ref().filter(|job| !retry && self.retrying.contains_key(*job)) {
            // An earlier operation on this job is still being retried: wait behind it (and
            // behind the others already waiting).
            self.world(format!("{op:?} waits behind a refused operation on {job}"));
            self.held.entry(job.clone()).or_default().push_back(op);
            return;
        }
        let Some(scheduler) = self.any_scheduler() else {
            self.world(format!("no node up for {op:?}; again in 10s"));
            self.refused(op, retry);
            return;
        };
        // An operator retries what the store refused while unavailable.
        let (text, refused) = match &op {
            Op::Pause(job) => outcome(format!("pause {job}"), scheduler.pause_one(job).await),
            Op::Resume(job) => outcome(format!("resume {job}"), scheduler.resume_one(job).await),
            Op::PauseTrigger(key) => outcome(format!("pause trigger {key}"), scheduler.pause_trigger(key).await),
            Op::ResumeTrigger(key) => outcome(format!("resume trigger {key}"), scheduler.resume_trigger(key).await),
            Op::Schedule(def) => {
                outcome(format!("schedule {}", def.name), scheduler.schedule_one((**def).clone()).await)
            }
            Op::Unschedule(job) => outcome(format!("unschedule {job}"), scheduler.unschedule_one(job).await),
            Op::Restore(job) => outcome(format!("restore {job}"), scheduler.restore_one(job).await),
            Op::Enqueue(slot, job) => {
                let Some(scheduler) = self.scheduler_of(*slot) else { return };
                outcome(format!("enqueue {job}"), scheduler.enqueue_one(job.clone()).await)
            }
            Op::Trigger(slot, job) => {
                let Some(scheduler) = self.scheduler_of(*slot) else { return };
                let (log, truth, name) = (self.log.clone(), self.truth, job.clone());
                let node = scheduler.node_id().to_owned();
                let text = format!("trigger {job} on {node}");
                tokio::spawn(async move {
                    let result = scheduler.trigger_one(name.clone()).await;
                    log.world(truth.now(), format!("trigger {name} on {node} returned {}", describe(&result)));
                });
                (text, false)
            }
            Op::Cancel(slot) => {
                let Some(scheduler) = self.scheduler_of(*slot) else { return };
                let open: Vec<Uuid> = self
                    .slots
                    .iter()
                    .filter_map(|s| s.running.as_ref())
                    .flat_map(|r| self.log.in_flight(&r.incarnation.node, r.incarnation.number))
                    .collect();
                if open.is_empty() {
                    return;
                }
                let run = open[self.entropy.below(open.len() as u64) as usize];
                outcome(format!("cancel {run} via {}", scheduler.node_id()), scheduler.cancel_run(run).await)
            }
        };
        if let Some(job) = job.clone() {
            // Whatever the outcome: a commit reported as failed may have landed.
            self.changed_at.insert(job, self.truth.now());
        }
        if refused {
            self.world(format!("{text}; again in 10s"));
            self.refused(op, retry);
        } else {
            self.world(text);
            if retry {
                if let Some(job) = job {
                    self.done_retrying(&job);
                }
            }
        }
    }

    /// Schedules a refused operation's next try, holding back its job's later ones.
    pub(super) fn refused(&mut self, op: Op, retry: bool) {
        if !retry {
            if let Some(job) = op.ordered_job() {
                *self.retrying.entry(job.clone()).or_default() += 1;
            }
        }
        self.at(self.elapsed() + OP_RETRY, Action::RetryOp(op));
    }

    /// A retried operation on `job` went through: the first one waiting behind it goes now
    /// (as a retry, so the ones after it keep waiting).
    pub(super) fn done_retrying(&mut self, job: &sundial::name::JobName) {
        if let Some(count) = self.retrying.get_mut(job) {
            *count -= 1;
            if *count == 0 {
                self.retrying.remove(job);
            }
        }
        if self.retrying.contains_key(job) {
            return;
        }
        let Some(waiting) = self.held.get_mut(job) else { return };
        let next = waiting.pop_front();
        if waiting.is_empty() {
            self.held.remove(job);
        }
        if let Some(next) = next {
            *self.retrying.entry(job.clone()).or_default() += 1;
            self.at(self.elapsed(), Action::RetryOp(next));
        }
    }
}

/// An operation's log line, and whether the store refused it as unavailable.
pub(super) fn outcome<T: std::fmt::Debug>(
    what: String,
    result: Result<T, sundial::error::SchedulingError>,
) -> (String, bool) {
    let refused = result.as_ref().is_err_and(|e| e.code().starts_with("SCHEDULING_UNAVAILABLE"));
    (format!("{what}: {}", describe(&result)), refused)
}

fn describe<T: std::fmt::Debug>(result: &Result<T, sundial::error::SchedulingError>) -> String {
    match result {
        Ok(value) => format!("ok {value:?}"),
        Err(error) => error.code().to_owned(),
    }
}
