//! Starts before bookkeeping: the runs waiting for their start instant, so that work
//! which can wait — recording ended runs, their events, their actors' shutdown — gives
//! way while runs due now are still being started.
//!
//! At a to-the-second boundary a node may release thousands of runs at once. Without this,
//! each run that has already started and ended does its bookkeeping (a dozen task wakes,
//! messages and a share of a store transaction) ahead of the runs still waiting for a
//! thread, and the last run due at that instant starts several times later than it
//! could.
//!
//! A run is *armed* from its preparation until its job starts (or it ends without
//! starting). Bookkeeping calls [`PendingStarts::settled`], which waits while some armed
//! run is due at or before now on the node's clock, for at most [`SETTLE_MAX`]: a run
//! armed for an instant its timer has not reached yet (the clock jumped) never holds
//! bookkeeping back for long.

use std::collections::BTreeMap;
use std::pin::pin;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use chrono::{DateTime, Utc};
use sundial::time::Clock;
use tokio::sync::Notify;

/// The longest bookkeeping waits for the runs due now to start.
pub(crate) const SETTLE_MAX: Duration = Duration::from_millis(50);

/// The armed runs of one node, by start instant.
#[derive(Debug)]
pub(crate) struct PendingStarts {
    clock: Arc<dyn Clock>,
    /// Start instant (µs) → armed runs due then.
    armed: Mutex<BTreeMap<i64, usize>>,
    /// Woken when no armed run is due any more.
    settled: Notify,
}

/// An armed run; disarms it when dropped (its job started, it was canceled before its
/// start, or its task was aborted).
#[derive(Debug)]
pub(crate) struct Armed {
    starts: Arc<PendingStarts>,
    at_us: i64,
}

impl Drop for Armed {
    fn drop(&mut self) {
        self.starts.disarm(self.at_us);
    }
}

impl PendingStarts {
    pub(crate) fn new(clock: Arc<dyn Clock>) -> Self {
        Self { clock, armed: Mutex::default(), settled: Notify::new() }
    }

    /// Arms a run due to start at `at`.
    pub(crate) fn arm(self: &Arc<Self>, at: DateTime<Utc>) -> Armed {
        let at_us = at.timestamp_micros();
        *self.lock().entry(at_us).or_insert(0) += 1;
        Armed { starts: self.clone(), at_us }
    }

    fn disarm(&self, at_us: i64) {
        let mut armed = self.lock();
        if let Some(count) = armed.get_mut(&at_us) {
            *count -= 1;
            if *count == 0 {
                armed.remove(&at_us);
            }
        }
        let settled = !is_starting(&armed, self.now_us());
        drop(armed);
        if settled {
            self.settled.notify_waiters();
        }
    }

    /// Whether some armed run is due at or before now.
    pub(crate) fn starting(&self) -> bool {
        is_starting(&self.lock(), self.now_us())
    }

    /// Waits until no armed run is due at or before now, or [`SETTLE_MAX`] passed.
    pub(crate) async fn settled(&self) {
        if !self.starting() {
            return;
        }
        let wait = async {
            loop {
                let mut notified = pin!(self.settled.notified());
                // Registered before the check, so a disarm between the two still wakes us.
                notified.as_mut().enable();
                if !self.starting() {
                    return;
                }
                notified.await;
            }
        };
        let _ = tokio::time::timeout(SETTLE_MAX, wait).await;
    }

    fn now_us(&self) -> i64 {
        self.clock.now().timestamp_micros()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<i64, usize>> {
        self.armed.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

fn is_starting(armed: &BTreeMap<i64, usize>, now_us: i64) -> bool {
    armed.keys().next().is_some_and(|&first| first <= now_us)
}

#[cfg(test)]
mod tests {
    use super::*;
    use sundial::time::ManualClock;

    fn t(s: i64) -> DateTime<Utc> {
        DateTime::from_timestamp(1_800_000_000 + s, 0).unwrap()
    }

    #[test]
    fn starting_while_a_run_due_now_is_armed() {
        let clock = ManualClock::new(t(0));
        let starts = Arc::new(PendingStarts::new(Arc::new(clock.clone())));
        let later = starts.arm(t(5));
        assert!(!starts.starting(), "armed for later: not starting yet");
        let now_a = starts.arm(t(0));
        let now_b = starts.arm(t(0));
        assert!(starts.starting());
        drop(now_a);
        assert!(starts.starting(), "one of the two due now is still armed");
        drop(now_b);
        assert!(!starts.starting());
        clock.set_wall(t(5));
        assert!(starts.starting());
        drop(later);
        assert!(!starts.starting());
    }

    #[tokio::test(start_paused = true)]
    async fn settled_waits_for_the_last_start_and_at_most_settle_max() {
        let clock = ManualClock::new(t(0));
        let starts = Arc::new(PendingStarts::new(Arc::new(clock.clone())));
        let armed = starts.arm(t(0));
        let waiter = tokio::spawn({
            let starts = starts.clone();
            async move { starts.settled().await }
        });
        tokio::task::yield_now().await;
        assert!(!waiter.is_finished());
        drop(armed);
        waiter.await.unwrap();
        // A run whose start never comes holds bookkeeping back only SETTLE_MAX.
        let _stuck = starts.arm(t(0));
        let short = tokio::time::timeout(SETTLE_MAX - Duration::from_millis(1), starts.settled()).await;
        assert!(short.is_err(), "still waiting just before SETTLE_MAX");
        starts.settled().await;
    }
}
