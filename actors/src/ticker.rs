//! The poller's timer: one task per poller, for as long as it lives.
//!
//! A poller plans its next cycle after each cycle and again at each wake-up between
//! cycles (a local change, a due fire, a freed slot), each plan replacing the one before.
//! With a timer task per plan (ractor's `send_after`), every replaced plan's task still
//! slept, woke and sent a tick the poller ignored: in a simulated cluster, most of the
//! timer tasks spawned. Here a replaced plan's timer is dropped and nothing is spawned.

use std::pin::Pin;
use std::time::Duration;

use ractor::ActorRef;
use tokio::sync::watch;
use tokio::time::Sleep;

use crate::execute::AbortOnDrop;
use crate::poller::PollerMsg;

/// Sends its poller [`PollerMsg::Tick`]`(n)` once plan `n`'s wait has passed on tokio's
/// timer (virtual under a paused runtime), unless a newer plan replaced it first. The task
/// ends when the ticker is dropped with the poller's state.
pub(crate) struct Ticker {
    plan: watch::Sender<Option<(u64, Duration)>>,
    _task: AbortOnDrop<()>,
}

impl Ticker {
    /// Spawns the timer task; nothing is planned yet.
    pub(crate) fn spawn(poller: ActorRef<PollerMsg>) -> Self {
        let (plan, plans) = watch::channel(None);
        Self { plan, _task: AbortOnDrop(tokio::spawn(tick_on_plan(poller, plans))) }
    }

    /// Plans tick `tick` `wait` from now, replacing any plan not yet due.
    pub(crate) fn plan(&self, tick: u64, wait: Duration) {
        self.plan.send_replace(Some((tick, wait)));
    }
}

async fn tick_on_plan(poller: ActorRef<PollerMsg>, mut plans: watch::Receiver<Option<(u64, Duration)>>) {
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
                timer = plans.borrow_and_update().map(|(tick, wait)| (tick, Box::pin(tokio::time::sleep(wait))));
            }
            tick = due(&mut timer) => {
                let _ = poller.send_message(PollerMsg::Tick(tick));
            }
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
