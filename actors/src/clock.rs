//! Clocks and sleepers on tokio's timer, for nodes, tests and simulations.
//!
//! [`TokioClock`] reads time from tokio's clock: real time in production, and virtual,
//! deterministic time under a paused runtime (`start_paused`), where the simulator and the
//! actor tests drive it. Core code still only sees the [`Clock`] trait.
//!
//! [`PreciseSleeper`] is for production nodes on real time: tokio's timer rounds every
//! deadline up to its 1 ms tick, which is most of a to-the-second fire's lateness.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use chrono::{DateTime, Utc};
use sundial::kv::BoxFuture;
use sundial::time::{add_duration, Clock, MonotonicInstant, Sleeper};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

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

/// A [`Sleeper`] on tokio's timer: `MemoryKv` latency and retry backoff, and a node's
/// default run-start timer (1 ms tick; deterministic under a paused runtime).
#[derive(Debug, Clone, Copy, Default)]
pub struct TokioSleeper;

impl Sleeper for TokioSleeper {
    fn sleep(&self, duration: Duration) -> BoxFuture<'static, ()> {
        Box::pin(tokio::time::sleep(duration))
    }
}

/// A [`Sleeper`] on a dedicated real-time timer thread (`futures-timer`), precise to about
/// [`PreciseSleeper::GRANULARITY`] rather than tokio's 1 ms tick. Runs use it to wait for
/// their exact start time on production nodes.
///
/// Sleeps ending within the same granule share one timer: at a to-the-second boundary a
/// thousand runs cost one wake from the timer thread, which then wakes the rest inside the
/// runtime. A sleep never ends early; it may end up to one granule late.
///
/// It follows the real monotonic clock, not tokio's: never use it under a paused runtime
/// (simulations, actor tests), where it would wait in real time while virtual time jumps.
/// Must be used inside a tokio runtime (each granule's timer is a task).
#[derive(Debug, Clone)]
pub struct PreciseSleeper {
    /// Where granule 0 starts (any fixed instant will do).
    origin: std::time::Instant,
    /// The pending granules, each canceled when its timer fires.
    gates: Arc<Mutex<BTreeMap<u64, CancellationToken>>>,
}

impl PreciseSleeper {
    /// The width of the shared deadlines.
    pub const GRANULARITY: Duration = Duration::from_micros(100);

    /// A sleeper with no pending sleeps.
    #[allow(clippy::disallowed_methods)] // A real-time timer by definition (see the type's docs).
    pub fn new() -> Self {
        Self { origin: std::time::Instant::now(), gates: Arc::default() }
    }
}

impl Default for PreciseSleeper {
    fn default() -> Self {
        Self::new()
    }
}

impl Sleeper for PreciseSleeper {
    #[allow(clippy::disallowed_methods)] // A real-time timer by definition (see the type's docs).
    fn sleep(&self, duration: Duration) -> BoxFuture<'static, ()> {
        if duration.is_zero() {
            return Box::pin(std::future::ready(()));
        }
        let granule_us = Self::GRANULARITY.as_micros();
        let deadline = std::time::Instant::now() + duration;
        // Round up: the shared deadline is never before this sleep's own.
        let granule = (deadline - self.origin).as_micros().div_ceil(granule_us) as u64;
        let mut gates = self.gates.lock().unwrap_or_else(PoisonError::into_inner);
        let gate = gates.entry(granule).or_insert_with(|| {
            let gate = CancellationToken::new();
            let wake_at = self.origin + Duration::from_micros(granule * granule_us as u64);
            let (fire, all) = (gate.clone(), self.gates.clone());
            tokio::spawn(async move {
                futures_timer::Delay::new(wake_at.saturating_duration_since(std::time::Instant::now())).await;
                all.lock().unwrap_or_else(PoisonError::into_inner).remove(&granule);
                fire.cancel();
            });
            gate
        });
        Box::pin(gate.clone().cancelled_owned())
    }
}
