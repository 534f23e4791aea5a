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
//! starting). A run that ended waits, before its end is recorded, for the other runs of
//! its own instant ([`Armed::instant`], [`InstantStarts::settled`]: no lock, no clock
//! read on that path, which every run of the instant takes). Other bookkeeping calls
//! [`PendingStarts::settled`], which waits while some armed run is due at or before now on
//! the node's clock. Either waits at most [`SETTLE_MAX`]: a run armed for an instant its
//! timer has not reached yet (the clock jumped) never holds bookkeeping back for long.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use parking_lot::Mutex;
use sundial::time::Clock;

use crate::gate::Gate;

/// The longest bookkeeping waits for the runs due now to start.
pub(crate) const SETTLE_MAX: Duration = Duration::from_millis(50);

/// The armed runs of one node, by start instant.
///
/// Built for thousands of runs disarming at one instant from every worker: a disarm is an
/// atomic decrement (only the last run of an instant takes the lock), "is anything
/// starting?" is an atomic load, and the runs of an instant wait on that instant's gate.
#[derive(Debug)]
pub(crate) struct PendingStarts {
    clock: Arc<dyn Clock>,
    inner: Mutex<Inner>,
    /// The earliest instant (µs) with an armed run, `i64::MAX` when none.
    earliest: AtomicI64,
}

#[derive(Debug, Default)]
struct Inner {
    /// Start instant (µs) → its runs.
    armed: BTreeMap<i64, Arc<InstantStarts>>,
    /// What other bookkeeping waits on, opened when nothing due is armed any more.
    settle: Option<Arc<SettleGate>>,
}

/// A gate bookkeeping waits on: opened when the starts it waits for are done, or
/// [`SETTLE_MAX`] after its first waiter, whichever comes first.
#[derive(Debug, Default)]
struct SettleGate {
    gate: Arc<Gate>,
    /// Whether its [`SETTLE_MAX`] timer runs.
    timed: AtomicBool,
}

impl SettleGate {
    fn open(&self) {
        self.gate.open();
    }

    fn is_open(&self) -> bool {
        self.gate.is_open()
    }

    async fn wait(&self) {
        if self.gate.is_open() {
            return;
        }
        if !self.timed.swap(true, Ordering::AcqRel) {
            // One timer for every waiter: a run armed for an instant its timer has not
            // reached yet (the clock jumped) holds bookkeeping back only this long.
            let timeout = self.gate.clone();
            tokio::spawn(async move {
                tokio::time::sleep(SETTLE_MAX).await;
                timeout.open();
            });
        }
        self.gate.clone().wait().await;
    }
}

/// The runs due to start at one instant.
#[derive(Debug, Default)]
pub(crate) struct InstantStarts {
    /// How many are armed.
    armed: AtomicUsize,
    /// Opened when none is armed any more.
    started: SettleGate,
}

impl InstantStarts {
    /// Waits until every run armed for this instant has started (or ended without
    /// starting), at most [`SETTLE_MAX`] from the first waiter.
    pub(crate) async fn settled(self: Arc<Self>) {
        self.started.wait().await;
    }
}

impl Inner {
    /// The gate bookkeeping waits on now (a fresh one when the last was opened by its
    /// timer).
    fn settle(&mut self) -> Arc<SettleGate> {
        if self.settle.as_ref().is_some_and(|settle| settle.is_open()) {
            self.settle = None;
        }
        self.settle.get_or_insert_with(Arc::default).clone()
    }

    /// The earliest instant that still has an armed run, forgetting emptied ones.
    fn earliest(&mut self) -> i64 {
        while let Some(entry) = self.armed.first_entry() {
            if entry.get().armed.load(Ordering::Acquire) > 0 {
                return *entry.key();
            }
            entry.remove();
        }
        i64::MAX
    }
}

/// An armed run; disarms it when dropped (its job started, it was canceled before its
/// start, or its task was aborted).
#[derive(Debug)]
pub(crate) struct Armed {
    starts: Arc<PendingStarts>,
    instant: Arc<InstantStarts>,
}

impl Armed {
    /// The runs of this run's instant, to wait for once it has ended.
    pub(crate) fn instant(&self) -> Arc<InstantStarts> {
        self.instant.clone()
    }
}

impl Drop for Armed {
    fn drop(&mut self) {
        if self.instant.armed.fetch_sub(1, Ordering::AcqRel) == 1 {
            self.instant.started.open();
            self.starts.instant_started();
        }
    }
}

impl PendingStarts {
    pub(crate) fn new(clock: Arc<dyn Clock>) -> Self {
        Self { clock, inner: Mutex::default(), earliest: AtomicI64::new(i64::MAX) }
    }

    /// Arms a run due to start at `at`.
    pub(crate) fn arm(self: &Arc<Self>, at: DateTime<Utc>) -> Armed {
        let at_us = at.timestamp_micros();
        let mut inner = self.lock();
        let instant = inner.armed.entry(at_us).or_default().clone();
        let armed = instant.armed.fetch_add(1, Ordering::AcqRel) + 1;
        // Room for this run's end to wait, made now: a list growing while thousands of
        // runs start together costs fresh memory on the critical path.
        instant.started.gate.reserve(armed);
        self.earliest.fetch_min(at_us, Ordering::AcqRel);
        Armed { starts: self.clone(), instant }
    }

    /// The last armed run of an instant started: recompute the earliest, and open the
    /// waiters' gate when nothing due is armed any more.
    fn instant_started(&self) {
        let mut inner = self.lock();
        // Under the lock: an arm for the same instant since the decrement keeps it.
        let earliest = inner.earliest();
        self.earliest.store(earliest, Ordering::Release);
        let gate = (earliest > self.now_us()).then(|| inner.settle.take()).flatten();
        drop(inner);
        if let Some(settle) = gate {
            settle.open();
        }
    }

    /// Whether some armed run is due at or before now.
    pub(crate) fn starting(&self) -> bool {
        self.earliest.load(Ordering::Acquire) <= self.now_us()
    }

    /// Waits until no armed run is due at or before now, or at most [`SETTLE_MAX`].
    pub(crate) async fn settled(&self) {
        if !self.starting() {
            return;
        }
        let gate = {
            let mut inner = self.lock();
            // Checked again under the lock, which a settling disarm holds to take the gate.
            if !self.starting() {
                return;
            }
            inner.settle()
        };
        gate.wait().await;
    }

    fn now_us(&self) -> i64 {
        self.clock.now().timestamp_micros()
    }

    fn lock(&self) -> parking_lot::MutexGuard<'_, Inner> {
        self.inner.lock()
    }
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

    #[tokio::test(start_paused = true)]
    async fn a_run_waits_for_its_own_instant_only_and_at_most_settle_max() {
        let clock = ManualClock::new(t(0));
        let starts = Arc::new(PendingStarts::new(Arc::new(clock.clone())));
        let (first, second, later) = (starts.arm(t(0)), starts.arm(t(0)), starts.arm(t(1)));
        let instant = first.instant();
        drop(first);
        let waiter = tokio::spawn(instant.clone().settled());
        tokio::task::yield_now().await;
        assert!(!waiter.is_finished(), "the second run of its instant has not started");
        drop(second);
        waiter.await.unwrap();
        assert!(!later.instant().started.is_open(), "a later instant is not this one's business");
        // A run of an instant that never starts holds the others' ends back SETTLE_MAX.
        let stuck = starts.arm(t(2));
        let short = tokio::time::timeout(SETTLE_MAX - Duration::from_millis(1), stuck.instant().settled()).await;
        assert!(short.is_err(), "still waiting just before SETTLE_MAX");
        stuck.instant().settled().await;
    }
}
