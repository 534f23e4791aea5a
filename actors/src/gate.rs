//! A one-shot gate that thousands of tasks wait on at once, cheaply.
//!
//! At a to-the-second boundary a node releases every run due then through one gate, and
//! holds their bookkeeping behind another. `tokio_util`'s `CancellationToken` and tokio's
//! `Notify` take a shared lock on every poll and every drop of a waiter, so ten thousand
//! runs released together queue on that lock from every worker. Here a waiter that finds
//! the gate open pays one atomic load; a waiter registers its waker once, under a lock
//! taken before the gate opens; opening takes the lock once and wakes every waiter outside
//! it.
//!
//! Public so that benchmarks (the lateness bench's start floor) and embedders that release
//! many tasks at one instant can use the node's own gate.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll, Waker};

use parking_lot::Mutex;

/// A gate: closed until [`open`](Gate::open)ed, then open for ever. Made for waiters that
/// wait once each and are woken together; every waiter that found it closed keeps a waker
/// in it until it opens, so a gate that may never open is not for an unbounded stream of
/// waiters.
#[derive(Debug, Default)]
pub struct Gate {
    open: AtomicBool,
    /// Wakers of the waiters that found it closed (a dropped waiter's stays until the
    /// gate opens: waking it is harmless).
    wakers: Mutex<Vec<Waker>>,
}

impl Gate {
    /// Opens the gate and wakes every waiter.
    pub fn open(&self) {
        // Set before the list is taken: a waiter that registers after the take sees it.
        self.open.store(true, Ordering::Release);
        let wakers = std::mem::take(&mut *self.wakers.lock());
        for waker in wakers {
            waker.wake();
        }
    }

    /// Makes room for `waiters` registered waiters in all, so that waiters registering
    /// together later (at a start instant) do not grow the list then.
    pub fn reserve(&self, waiters: usize) {
        let mut wakers = self.wakers.lock();
        let more = waiters.saturating_sub(wakers.len());
        wakers.reserve(more);
    }

    /// Whether it is open.
    pub fn is_open(&self) -> bool {
        self.open.load(Ordering::Acquire)
    }

    /// Resolves once the gate is open: at once, for one atomic load, when it already is;
    /// otherwise the wait registers its task's waker at its first poll (later polls
    /// replace it only when the task changed) and is woken by [`open`](Gate::open).
    pub fn wait(self: Arc<Self>) -> GateWait {
        GateWait { gate: self, slot: None }
    }
}

/// A wait for a [`Gate`].
#[derive(Debug)]
pub struct GateWait {
    gate: Arc<Gate>,
    /// Where this waiter's waker is in the gate's list, once registered.
    slot: Option<usize>,
}

impl Future for GateWait {
    type Output = ();

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        if self.gate.is_open() {
            return Poll::Ready(());
        }
        let gate = self.gate.clone();
        let mut wakers = gate.wakers.lock();
        // Opened since the check: the list may already be taken.
        if gate.is_open() {
            return Poll::Ready(());
        }
        match self.slot.and_then(|slot| wakers.get_mut(slot)) {
            Some(waker) => {
                if !waker.will_wake(cx.waker()) {
                    waker.clone_from(cx.waker());
                }
            }
            None => {
                self.slot = Some(wakers.len());
                wakers.push(cx.waker().clone());
            }
        }
        Poll::Pending
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn waiters_wait_until_it_opens_and_later_ones_pass_at_once() {
        let gate = Arc::new(Gate::default());
        let waiters: Vec<_> = (0..100).map(|_| tokio::spawn(gate.clone().wait())).collect();
        tokio::task::yield_now().await;
        assert!(waiters.iter().all(|w| !w.is_finished()), "closed");
        // A dropped waiter leaves its waker behind, which must not break the others.
        drop(tokio::spawn(gate.clone().wait()));
        gate.open();
        for waiter in waiters {
            waiter.await.unwrap();
        }
        gate.clone().wait().await;
        assert!(gate.is_open());
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn an_open_racing_a_registration_never_strands_a_waiter() {
        for _ in 0..200 {
            let gate = Arc::new(Gate::default());
            let waiter = tokio::spawn(gate.clone().wait());
            let opener = tokio::spawn({
                let gate = gate.clone();
                async move { gate.open() }
            });
            opener.await.unwrap();
            tokio::time::timeout(std::time::Duration::from_secs(5), waiter).await.expect("woken").unwrap();
        }
    }
}
