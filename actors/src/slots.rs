//! A node's run slots (`max_concurrent_runs`, SPEC §13): how many jobs run on it at once.
//!
//! A run takes a slot at its start instant, after waiting for it (runs are acquired ahead),
//! and gives it back as its job returns, before its end is recorded: a short job's slot
//! serves the next run at once, not after a store transaction. Runs waiting for a slot
//! start in the order they asked (tokio's semaphore is fair). The slots also measure how
//! long jobs take, from which the poller sizes its acquisitions
//! ([`sundial::rules::held_runs_limit`]).

use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use sundial::time::{Clock, MonotonicInstant};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio_util::sync::CancellationToken;

/// The run slots of one node.
#[derive(Debug)]
pub struct RunSlots {
    semaphore: Arc<Semaphore>,
    capacity: usize,
    clock: Arc<dyn Clock>,
    /// Jobs ended since [`RunSlots::take_job_times`] last read, and their time together.
    ended: Mutex<(u64, Duration)>,
}

impl RunSlots {
    /// `capacity` slots (at least one), timed on `clock`'s monotonic time.
    pub fn new(capacity: u32, clock: Arc<dyn Clock>) -> Arc<Self> {
        let capacity = (capacity.max(1) as usize).min(Semaphore::MAX_PERMITS);
        Arc::new(Self {
            semaphore: Arc::new(Semaphore::new(capacity)),
            capacity,
            clock,
            ended: Mutex::new((0, Duration::ZERO)),
        })
    }

    /// Takes a slot, waiting for one to free; `None` when `cancel` fires first (the run
    /// then never starts its job).
    pub async fn take(self: &Arc<Self>, cancel: &CancellationToken) -> Option<RunSlot> {
        let permit = match self.semaphore.clone().try_acquire_owned() {
            Ok(permit) => permit,
            Err(_) => tokio::select! {
                biased;
                () = cancel.cancelled() => return None,
                permit = self.semaphore.clone().acquire_owned() => permit.ok()?,
            },
        };
        Some(RunSlot { _permit: permit, slots: self.clone(), began: self.clock.monotonic() })
    }

    /// Jobs running now.
    pub fn executing(&self) -> usize {
        self.capacity.saturating_sub(self.semaphore.available_permits())
    }

    /// How many jobs returned since the last call, and how long they ran together.
    pub fn take_job_times(&self) -> (u64, Duration) {
        std::mem::take(&mut *self.ended.lock())
    }
}

/// One run's slot, held while its job runs; dropping it frees the slot and counts the
/// job's time.
#[derive(Debug)]
pub struct RunSlot {
    _permit: OwnedSemaphorePermit,
    slots: Arc<RunSlots>,
    began: MonotonicInstant,
}

impl Drop for RunSlot {
    fn drop(&mut self) {
        let ran = self.slots.clock.monotonic().saturating_duration_since(self.began);
        let mut ended = self.slots.ended.lock();
        ended.0 += 1;
        ended.1 = ended.1.saturating_add(ran);
    }
}
