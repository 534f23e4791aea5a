//! Simulated clocks: true time on tokio's paused timer, and per-node wall clocks with skew
//! and forward jumps.

use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;

use chrono::{DateTime, TimeDelta, Utc};
use sundial::time::{Clock, MonotonicInstant};
use sundial_actors::clock::TokioClock;

/// One node's clock: the world's true time plus this node's offset. The offset moves wall
/// time only (skew, forward jumps); monotonic time is the world's, so timeouts and lease
/// expiry judged on it stay honest, as with NTP steps on a real machine.
#[derive(Debug, Clone)]
pub struct SimClock {
    truth: TokioClock,
    offset_us: Arc<AtomicI64>,
}

impl SimClock {
    /// A clock reading `truth` shifted by `offset`.
    pub fn new(truth: TokioClock, offset: TimeDelta) -> Self {
        Self { truth, offset_us: Arc::new(AtomicI64::new(offset.num_microseconds().unwrap_or(0))) }
    }

    /// Moves this clock's wall time forward by `by` (and keeps it there).
    pub fn jump(&self, by: TimeDelta) {
        self.offset_us.fetch_add(by.num_microseconds().unwrap_or(0), Ordering::Relaxed);
    }

    /// Sets the offset from true time (a correction, as NTP steps a clock back).
    pub fn set_offset(&self, offset: TimeDelta) {
        self.offset_us.store(offset.num_microseconds().unwrap_or(0), Ordering::Relaxed);
    }

    /// The current offset from true time.
    pub fn offset(&self) -> TimeDelta {
        TimeDelta::microseconds(self.offset_us.load(Ordering::Relaxed))
    }
}

impl Clock for SimClock {
    fn now(&self) -> DateTime<Utc> {
        self.truth.now() + self.offset()
    }

    fn monotonic(&self) -> MonotonicInstant {
        self.truth.monotonic()
    }
}
