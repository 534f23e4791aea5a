//! Time as the engine sees it: a wall-clock UTC instant for due times and a monotonic
//! instant for liveness, both read through the injected [`Clock`].
//!
//! Core and actor code never reads the OS clock; [`SystemClock`] is the one place that
//! does, and simulations and tests use [`ManualClock`].

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, TimeDelta, Utc};
use parking_lot::Mutex;

use futures_util::future::BoxFuture;

/// A point on a monotonic timeline with an arbitrary origin: only differences between
/// two instants of the same clock mean anything.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct MonotonicInstant(Duration);

impl MonotonicInstant {
    /// The instant `offset` after the clock's origin.
    pub const fn from_origin(offset: Duration) -> Self {
        Self(offset)
    }

    /// Time since the clock's origin.
    pub const fn since_origin(self) -> Duration {
        self.0
    }

    /// Time from `earlier` to `self`, zero when `earlier` is later.
    pub fn saturating_duration_since(self, earlier: MonotonicInstant) -> Duration {
        self.0.saturating_sub(earlier.0)
    }

    /// The instant `d` later, saturating at the end of time.
    pub fn saturating_add(self, d: Duration) -> MonotonicInstant {
        Self(self.0.saturating_add(d))
    }
}

/// The source of time for a node. Implementations must be cheap to call and safe to
/// share between threads.
pub trait Clock: Send + Sync + fmt::Debug {
    /// The current wall-clock instant in UTC. May jump (NTP, simulated skew).
    fn now(&self) -> DateTime<Utc>;
    /// The current monotonic instant. Never goes backwards.
    fn monotonic(&self) -> MonotonicInstant;
    /// Whether this clock is the system's real time, which no runtime pauses or drives
    /// (`SystemClock`): a node on it times its runs' starts on a real-time timer. `false`
    /// by default, for clocks a test or simulation moves.
    fn is_real_time(&self) -> bool {
        false
    }
}

impl<C: Clock + ?Sized> Clock for Arc<C> {
    fn now(&self) -> DateTime<Utc> {
        (**self).now()
    }
    fn monotonic(&self) -> MonotonicInstant {
        (**self).monotonic()
    }
    fn is_real_time(&self) -> bool {
        (**self).is_real_time()
    }
}

/// The production clock: the OS wall clock and `std::time::Instant`.
#[derive(Debug, Clone, Copy)]
pub struct SystemClock {
    origin: std::time::Instant,
}

impl SystemClock {
    /// A clock whose monotonic origin is the moment of this call.
    #[allow(clippy::disallowed_methods)] // The one production reader of the OS monotonic clock.
    pub fn new() -> Self {
        Self { origin: std::time::Instant::now() }
    }
}

impl Default for SystemClock {
    fn default() -> Self {
        Self::new()
    }
}

impl Clock for SystemClock {
    #[allow(clippy::disallowed_methods)] // The one production reader of the OS wall clock.
    fn now(&self) -> DateTime<Utc> {
        Utc::now()
    }

    #[allow(clippy::disallowed_methods)] // The one production reader of the OS monotonic clock.
    fn monotonic(&self) -> MonotonicInstant {
        MonotonicInstant(std::time::Instant::now().duration_since(self.origin))
    }

    fn is_real_time(&self) -> bool {
        true
    }
}

/// A clock moved by hand, for tests and simulations. Clones share the same time.
///
/// [`ManualClock::advance`] moves both timelines; [`ManualClock::set_wall`] and
/// [`ManualClock::jump_wall`] move only the wall clock, as NTP steps and skew do.
#[derive(Debug, Clone)]
pub struct ManualClock {
    state: Arc<Mutex<ManualState>>,
}

#[derive(Debug)]
struct ManualState {
    wall: DateTime<Utc>,
    monotonic: Duration,
}

impl ManualClock {
    /// A clock reading `wall`, with monotonic time at its origin.
    pub fn new(wall: DateTime<Utc>) -> Self {
        Self { state: Arc::new(Mutex::new(ManualState { wall, monotonic: Duration::ZERO })) }
    }

    /// Moves wall and monotonic time forward by `d`.
    pub fn advance(&self, d: Duration) {
        let mut state = self.lock();
        state.monotonic = state.monotonic.saturating_add(d);
        state.wall = add_duration(state.wall, d);
    }

    /// Sets the wall clock, leaving monotonic time alone.
    pub fn set_wall(&self, wall: DateTime<Utc>) {
        self.lock().wall = wall;
    }

    /// Moves the wall clock by a signed amount, leaving monotonic time alone.
    pub fn jump_wall(&self, delta: TimeDelta) {
        let mut state = self.lock();
        state.wall = state.wall.checked_add_signed(delta).unwrap_or(state.wall);
    }

    fn lock(&self) -> parking_lot::MutexGuard<'_, ManualState> {
        self.state.lock()
    }
}

impl Clock for ManualClock {
    fn now(&self) -> DateTime<Utc> {
        self.lock().wall
    }
    fn monotonic(&self) -> MonotonicInstant {
        MonotonicInstant(self.lock().monotonic)
    }
}

/// `t + d`, saturating at chrono's last representable instant.
pub fn add_duration(t: DateTime<Utc>, d: Duration) -> DateTime<Utc> {
    TimeDelta::from_std(d).ok().and_then(|delta| t.checked_add_signed(delta)).unwrap_or(DateTime::<Utc>::MAX_UTC)
}

/// Microseconds since the Unix epoch: the stored form of every due time.
pub fn to_micros(t: DateTime<Utc>) -> i64 {
    t.timestamp_micros()
}

/// The instant `micros` microseconds after the Unix epoch; `None` outside chrono's range.
pub fn from_micros(micros: i64) -> Option<DateTime<Utc>> {
    DateTime::from_timestamp_micros(micros)
}

/// Waits for a duration: how code that must not own a timer (the `MemoryKv` emulator, a
/// node's run start) waits. The host supplies it: tokio's `sleep` in a node or a
/// simulation, a precise real-time timer in production.
pub trait Sleeper: Send + Sync + fmt::Debug {
    /// A future that completes after `duration`.
    fn sleep(&self, duration: Duration) -> BoxFuture<'static, ()>;
}

/// A [`Sleeper`] that does not wait: latency faults and backoff become no-ops. For tests
/// without an async timer.
#[derive(Debug, Clone, Copy, Default)]
pub struct NoSleep;

impl Sleeper for NoSleep {
    fn sleep(&self, _duration: Duration) -> BoxFuture<'static, ()> {
        Box::pin(std::future::ready(()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn manual_clock_moves_only_when_told() {
        let start = from_micros(1_800_000_000_000_000).unwrap();
        let clock = ManualClock::new(start);
        let shared = clock.clone();
        assert_eq!(clock.now(), start);
        clock.advance(Duration::from_millis(1500));
        assert_eq!(shared.now(), start + TimeDelta::milliseconds(1500));
        assert_eq!(shared.monotonic().since_origin(), Duration::from_millis(1500));
        clock.jump_wall(TimeDelta::hours(-1));
        assert_eq!(shared.now(), start + TimeDelta::milliseconds(1500) - TimeDelta::hours(1));
        assert_eq!(shared.monotonic().since_origin(), Duration::from_millis(1500));
    }

    #[test]
    fn micros_round_trip() {
        let t = from_micros(1_234_567_890_123_456).unwrap();
        assert_eq!(to_micros(t), 1_234_567_890_123_456);
    }

    #[test]
    fn system_clock_monotonic_does_not_go_back() {
        let clock = SystemClock::new();
        let a = clock.monotonic();
        let b = clock.monotonic();
        assert!(b >= a);
    }
}
