//! Clocks and sleepers on tokio's timer, for nodes, tests and simulations.
//!
//! [`TokioClock`] reads time from tokio's clock: real time in production, and virtual,
//! deterministic time under a paused runtime (`start_paused`), where the simulator and the
//! actor tests drive it. Core code still only sees the [`Clock`] trait.

use std::time::Duration;

use chrono::{DateTime, Utc};
use sundial::kv::memory::Sleeper;
use sundial::kv::BoxFuture;
use sundial::time::{add_duration, Clock, MonotonicInstant};
use tokio::time::Instant;

/// A [`Clock`] on tokio's timer: wall time is `start_wall` plus the time elapsed on tokio's
/// clock since creation; monotonic time is that elapsed time.
#[derive(Debug, Clone, Copy)]
pub struct TokioClock {
    start_wall: DateTime<Utc>,
    start: Instant,
}

impl TokioClock {
    /// A clock reading `start_wall` now. Must be created inside a tokio runtime.
    #[allow(clippy::disallowed_methods)] // The one reader of tokio's clock; paused in simulations.
    pub fn new(start_wall: DateTime<Utc>) -> Self {
        Self { start_wall, start: Instant::now() }
    }
}

impl Clock for TokioClock {
    fn now(&self) -> DateTime<Utc> {
        add_duration(self.start_wall, self.start.elapsed())
    }

    fn monotonic(&self) -> MonotonicInstant {
        MonotonicInstant::from_origin(self.start.elapsed())
    }
}

/// A [`Sleeper`] on tokio's timer (for `MemoryKv` latency and retry backoff).
#[derive(Debug, Clone, Copy, Default)]
pub struct TokioSleeper;

impl Sleeper for TokioSleeper {
    fn sleep(&self, duration: Duration) -> BoxFuture<'static, ()> {
        Box::pin(tokio::time::sleep(duration))
    }
}
