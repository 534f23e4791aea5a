//! Clocks and sleepers on tokio's timer, for nodes, tests and simulations.
//!
//! [`TokioClock`] reads time from tokio's clock: real time in production, and virtual,
//! deterministic time under a paused runtime (`start_paused`), where the simulator and the
//! actor tests drive it. Core code still only sees the [`Clock`] trait.
//!
//! [`PreciseSleeper`] is for production nodes on real time: tokio's timer rounds every
//! deadline up to its 1 ms tick, which is most of a to-the-second fire's lateness.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use futures_util::future::BoxFuture;
use parking_lot::Mutex;
use sundial::time::{add_duration, Clock, MonotonicInstant, Sleeper};
use tokio::time::Instant;

use crate::gate::Gate;

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

/// A [`Sleeper`] precise to a few microseconds on real time, rather than tokio's 1 ms
/// tick. Runs use it to wait for their exact start time on production nodes.
///
/// Sleeps whose deadlines fall in the same [`PreciseSleeper::GRANULARITY`] window share
/// one gate: at a to-the-second boundary a thousand runs cost one timer. The gate's task
/// waits on a real-time timer thread (`futures-timer`) until [`PreciseSleeper::EARLY`]
/// before the latest deadline in its window, then yields on a tokio worker until that exact
/// instant and opens: the runs it releases are woken on a running worker instead of after
/// a timer thread's wake-up and a parked worker's. A sleep never ends early; it ends at
/// most the window's width late (only when other sleeps in its window end later).
///
/// It follows the real monotonic clock, not tokio's: never use it under a paused runtime
/// (simulations, actor tests), where it would wait in real time while virtual time jumps.
/// Must be used inside a tokio runtime (each gate's timer is a task).
#[derive(Debug, Clone)]
pub struct PreciseSleeper {
    /// Where window 0 starts (any fixed instant will do).
    origin: std::time::Instant,
    /// The pending windows: each one's latest deadline (µs after `origin`) and its gate.
    gates: Arc<Mutex<Windows>>,
}

/// Window number → (latest deadline in it, µs after the origin; its gate).
type Windows = BTreeMap<u64, (u64, Arc<Gate>)>;

impl PreciseSleeper {
    /// The width of the windows whose sleeps share a gate.
    pub const GRANULARITY: Duration = Duration::from_micros(100);
    /// How long before its deadline a gate's task stops waiting on the timer thread and
    /// starts yielding until the deadline (covers the timer thread's wake-up latency).
    pub const EARLY: Duration = Duration::from_micros(300);

    /// A sleeper with no pending sleeps.
    #[allow(clippy::disallowed_methods)] // A real-time timer by definition (see the type's docs).
    pub fn new() -> Self {
        Self { origin: std::time::Instant::now(), gates: Arc::default() }
    }

    /// Whole microseconds since `origin`, now (rounded down).
    fn now_us(origin: std::time::Instant) -> u64 {
        origin.elapsed().as_micros() as u64
    }

    /// `duration` from now, in microseconds since `origin`, rounded up (never early).
    fn deadline_us(origin: std::time::Instant, duration: Duration) -> u64 {
        origin.elapsed().saturating_add(duration).as_nanos().div_ceil(1_000) as u64
    }
}

impl Default for PreciseSleeper {
    fn default() -> Self {
        Self::new()
    }
}

impl Sleeper for PreciseSleeper {
    fn sleep(&self, duration: Duration) -> BoxFuture<'static, ()> {
        if duration.is_zero() {
            return Box::pin(std::future::ready(()));
        }
        let deadline = Self::deadline_us(self.origin, duration);
        let window = deadline / Self::GRANULARITY.as_micros() as u64;
        let mut gates = self.gates.lock();
        if let Some((latest, gate)) = gates.get_mut(&window) {
            *latest = (*latest).max(deadline);
            return Box::pin(gate.clone().wait());
        }
        let gate = Arc::new(Gate::default());
        gates.insert(window, (deadline, gate.clone()));
        let (origin, all) = (self.origin, self.gates.clone());
        tokio::spawn(async move {
            let early = deadline.saturating_sub(Self::EARLY.as_micros() as u64);
            futures_timer::Delay::new(Duration::from_micros(early.saturating_sub(Self::now_us(origin)))).await;
            loop {
                // The latest deadline may have moved later since (sleeps that joined).
                let due = {
                    let mut gates = all.lock();
                    let latest = gates.get(&window).map_or(0, |(latest, _)| *latest);
                    if Self::now_us(origin) >= latest {
                        Some(gates.remove(&window))
                    } else {
                        None
                    }
                };
                match due {
                    Some(gate) => {
                        if let Some((_, gate)) = gate {
                            gate.open();
                        }
                        return;
                    }
                    None => tokio::task::yield_now().await,
                }
            }
        });
        Box::pin(gate.wait())
    }
}
