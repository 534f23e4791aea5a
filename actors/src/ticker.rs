//! The poller's timer: one task per poller, for as long as it lives.
//!
//! A poller plans its next cycle after each cycle and again at each wake-up between
//! cycles (a local change, a due fire, a freed slot), each plan replacing the one before.
//! With a timer task per plan (ractor's `send_after`), every replaced plan's task still
//! slept, woke and sent a tick the poller ignored: in a simulated cluster, most of the
//! timer tasks spawned. Here a replaced plan's timer is dropped and nothing is spawned.

use std::pin::Pin;
use std::time::Duration;

use tokio::sync::watch;
use tokio::time::Sleep;

use crate::execute::AbortOnDrop;

/// Calls its `tick` function with `n` once plan `n`'s wait has passed on tokio's timer
/// (virtual under a paused runtime), unless a newer plan replaced it first. The task ends
/// when the ticker is dropped (with the poller's state).
pub(crate) struct Ticker {
    plan: watch::Sender<(u64, Duration)>,
    _task: AbortOnDrop<()>,
}

impl Ticker {
    /// Spawns the timer task; nothing is planned yet. `tick` sends the poller its tick.
    pub(crate) fn spawn(tick: impl Fn(u64) + Send + 'static) -> Self {
        // The receiver has seen this first value: only plans sent wake it.
        let (plan, plans) = watch::channel((0, Duration::ZERO));
        Self { plan, _task: AbortOnDrop(tokio::spawn(tick_on_plan(tick, plans))) }
    }

    /// Plans tick `tick` `wait` from now, replacing any plan not yet due.
    pub(crate) fn plan(&self, tick: u64, wait: Duration) {
        self.plan.send_replace((tick, wait));
    }
}

async fn tick_on_plan(tick: impl Fn(u64), mut plans: watch::Receiver<(u64, Duration)>) {
    let mut timer: Option<(u64, Pin<Box<Sleep>>)> = None;
    loop {
        // Biased: a plan replacing a due one wins, so a replaced tick is never sent (the
        // poller would ignore it anyway), and no random branch choice is drawn.
        tokio::select! {
            biased;
            changed = plans.changed() => {
                if changed.is_err() {
                    return;
                }
                // The wait starts now, as `send_after`'s did when its task first ran.
                let (planned, wait) = *plans.borrow_and_update();
                timer = Some((planned, Box::pin(tokio::time::sleep(wait))));
            }
            planned = due(&mut timer) => tick(planned),
        }
    }
}

/// The planned tick once its wait has passed; never, when nothing is planned.
async fn due(timer: &mut Option<(u64, Pin<Box<Sleep>>)>) -> u64 {
    let Some((tick, sleep)) = timer.as_mut() else {
        return std::future::pending().await;
    };
    sleep.as_mut().await;
    let tick = *tick;
    *timer = None;
    tick
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    use sundial::time::Clock;

    use super::*;
    use crate::clock::TokioClock;

    /// Each tick sent, with the virtual time it came at (ms since the start).
    type Sent = Arc<Mutex<Vec<(u64, u128)>>>;

    fn recording() -> (Ticker, Sent) {
        let clock = TokioClock::new(chrono::DateTime::UNIX_EPOCH);
        let sent = Arc::new(Mutex::new(Vec::new()));
        let log = sent.clone();
        let ticker =
            Ticker::spawn(move |tick| log.lock().unwrap().push((tick, clock.monotonic().since_origin().as_millis())));
        (ticker, sent)
    }

    #[tokio::test(start_paused = true)]
    async fn a_plan_ticks_once_after_its_wait() {
        let (ticker, sent) = recording();
        ticker.plan(1, Duration::from_millis(250));
        tokio::time::sleep(Duration::from_millis(249)).await;
        assert!(sent.lock().unwrap().is_empty(), "not before its wait");
        tokio::time::sleep(Duration::from_secs(5)).await;
        assert_eq!(*sent.lock().unwrap(), [(1, 250)], "once, at its time");
    }

    #[tokio::test(start_paused = true)]
    async fn a_replaced_plan_never_ticks_whether_the_new_one_is_sooner_or_later() {
        let (ticker, sent) = recording();
        ticker.plan(1, Duration::from_secs(1));
        tokio::time::sleep(Duration::from_millis(100)).await;
        ticker.plan(2, Duration::from_millis(100));
        tokio::time::sleep(Duration::from_millis(500)).await;
        ticker.plan(3, Duration::from_secs(2));
        tokio::time::sleep(Duration::from_secs(5)).await;
        assert_eq!(*sent.lock().unwrap(), [(2, 200), (3, 2600)]);
    }

    #[tokio::test(start_paused = true)]
    async fn a_dropped_ticker_ticks_no_more() {
        let (ticker, sent) = recording();
        ticker.plan(1, Duration::from_millis(10));
        drop(ticker);
        tokio::time::sleep(Duration::from_secs(1)).await;
        assert!(sent.lock().unwrap().is_empty());
    }
}
