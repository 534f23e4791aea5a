//! A one-shot gate that thousands of tasks wait on at once, cheaply.
//!
//! At a to-the-second boundary a node releases every run due then through one gate, and
//! holds their bookkeeping behind another. `tokio_util`'s `CancellationToken` and tokio's
//! `Notify` take a shared lock on every poll and every drop of a waiter, so ten thousand
//! runs released together queue on that lock from every worker. Here a waiter that finds
//! the gate open pays one atomic load, and a waiter registers its waker once, under a lock
//! taken before the gate opens. Opening does not wake every waiter at once: it wakes
//! [`RELAY_LANES`] of them, and each passing waiter wakes the next of its lane, so the
//! released tasks stay in the workers' own run queues (see [`RELAY_LANES`]).
//!
//! Public so that benchmarks (the lateness bench's start floor) and embedders that release
//! many tasks at one instant can use the node's own gate.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};
use std::task::{Context, Poll, Waker};

use parking_lot::Mutex;

/// How many waiters an opening wakes itself; each woken waiter wakes the next of its lane
/// (every `RELAY_LANES`-th waiter after it) as it passes. So about this many tasks are
/// runnable at once while a crowd passes: enough to keep every worker busy, few enough to
/// stay in the workers' own run queues (256 tasks each), which other workers steal from
/// without a lock. Waking ten thousand at once overflowed into the runtime's shared
/// queue, whose lock the workers then fought over; a worker that lost slept on it and
/// was often woken on the other worker's CPU, where the two shared one CPU for
/// milliseconds.
pub const RELAY_LANES: usize = 64;

/// A gate: closed until [`open`](Gate::open)ed, then open for ever. Made for waiters that
/// wait once each and are woken together; every waiter that found it closed keeps a waker
/// in it until the gate is dropped, so a gate that may never open is not for an unbounded
/// stream of waiters.
#[derive(Debug, Default)]
pub struct Gate {
    open: AtomicBool,
    /// The waiters that found it closed, in the order they came, until it opens.
    waiting: Mutex<Vec<Waiter>>,
    /// The same waiters once it opened, read without a lock by the relay.
    released: OnceLock<Vec<Waiter>>,
}

/// A registered waiter.
#[derive(Debug)]
struct Waiter {
    waker: Waker,
    /// Dropped before the gate opened: the relay passes over it.
    gone: bool,
}

impl Gate {
    /// Opens the gate and starts the relay that wakes every waiter: the first
    /// [`RELAY_LANES`] now, each of the others as the one before it in its lane passes.
    pub fn open(&self) {
        {
            let mut waiting = self.waiting.lock();
            if self.is_open() {
                return;
            }
            // Under the lock that registrations and drops take: each either registered
            // before (and is in the list) or sees the gate open.
            let _ = self.released.set(std::mem::take(&mut *waiting));
            self.open.store(true, Ordering::Release);
        }
        for lane in 0..RELAY_LANES {
            self.wake_from(lane);
        }
    }

    /// Makes room for `waiters` registered waiters in all, so that waiters registering
    /// together later (at a start instant) do not grow the list then.
    pub fn reserve(&self, waiters: usize) {
        let mut waiting = self.waiting.lock();
        let more = waiters.saturating_sub(waiting.len());
        waiting.reserve(more);
    }

    /// Whether it is open.
    pub fn is_open(&self) -> bool {
        self.open.load(Ordering::Acquire)
    }

    /// Resolves once the gate is open: at once, for one atomic load, when it already is;
    /// otherwise the wait registers its task's waker at its first poll (later polls
    /// replace it only when the task changed) and is woken by the relay
    /// [`open`](Gate::open) starts, which it carries on as it passes (or is dropped).
    pub fn wait(self: Arc<Self>) -> GateWait {
        GateWait { gate: self, slot: None }
    }

    /// Wakes the first waiter still there among `slot`, `slot + RELAY_LANES`, … (once open).
    fn wake_from(&self, slot: usize) {
        let Some(released) = self.released.get() else { return };
        if let Some(waiter) = released.get(slot..).and_then(|rest| rest.iter().step_by(RELAY_LANES).find(|w| !w.gone)) {
            waiter.waker.wake_by_ref();
        }
    }
}

/// A wait for a [`Gate`].
#[derive(Debug)]
pub struct GateWait {
    gate: Arc<Gate>,
    /// Where this waiter is in the gate's list while it has a place there: it hands the
    /// relay on to the next waiter of its lane when it passes or is dropped.
    slot: Option<usize>,
}

impl GateWait {
    /// Hands the relay on, once, if this waiter was woken by it (or would have been).
    fn pass(&mut self) {
        if let Some(slot) = self.slot.take() {
            self.gate.wake_from(slot + RELAY_LANES);
        }
    }
}

impl Future for GateWait {
    type Output = ();

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        if self.gate.is_open() {
            self.pass();
            return Poll::Ready(());
        }
        let gate = self.gate.clone();
        let mut waiting = gate.waiting.lock();
        // Opened since the check: the list was handed to the relay.
        if gate.is_open() {
            drop(waiting);
            self.pass();
            return Poll::Ready(());
        }
        match self.slot.and_then(|slot| waiting.get_mut(slot)) {
            Some(waiter) => {
                if !waiter.waker.will_wake(cx.waker()) {
                    waiter.waker.clone_from(cx.waker());
                }
            }
            None => {
                self.slot = Some(waiting.len());
                waiting.push(Waiter { waker: cx.waker().clone(), gone: false });
            }
        }
        Poll::Pending
    }
}

impl Drop for GateWait {
    fn drop(&mut self) {
        let Some(slot) = self.slot else { return };
        {
            let mut waiting = self.gate.waiting.lock();
            if !self.gate.is_open() {
                // The relay will pass over it.
                if let Some(waiter) = waiting.get_mut(slot) {
                    waiter.gone = true;
                }
                return;
            }
        }
        // Opened, and this waiter was (or is about to be) woken without passing: the
        // waiters after it in its lane must not wait for it.
        self.pass();
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

    /// Waiters registered on `gate`, each a task that ends once it passed.
    async fn registered(gate: &Arc<Gate>, count: usize) -> Vec<tokio::task::JoinHandle<()>> {
        let waiters: Vec<_> = (0..count).map(|_| tokio::spawn(gate.clone().wait())).collect();
        // Every waiter registers at its first poll.
        while gate.waiting.lock().len() < count {
            tokio::task::yield_now().await;
        }
        waiters
    }

    async fn all_pass(waiters: Vec<tokio::task::JoinHandle<()>>) {
        for waiter in waiters {
            tokio::time::timeout(std::time::Duration::from_secs(5), waiter).await.expect("woken").unwrap();
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_relay_wakes_a_crowd_many_times_its_lanes() {
        let gate = Arc::new(Gate::default());
        let waiters = registered(&gate, RELAY_LANES * 40 + 7).await;
        assert!(waiters.iter().all(|w| !w.is_finished()), "closed");
        gate.open();
        all_pass(waiters).await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn waiters_dropped_before_the_opening_do_not_stop_their_lanes() {
        let gate = Arc::new(Gate::default());
        let mut waiters = registered(&gate, RELAY_LANES * 5).await;
        // Whole runs of a lane gone, including its first waiter and its last.
        let dropped = [0, 5, RELAY_LANES, RELAY_LANES * 2 + 3, RELAY_LANES * 3 + 3, RELAY_LANES * 4 + 3];
        for slot in dropped.into_iter().rev() {
            waiters.remove(slot).abort();
        }
        // Aborted tasks drop their waits.
        while gate.waiting.lock().iter().filter(|w| w.gone).count() < dropped.len() {
            tokio::task::yield_now().await;
        }
        gate.open();
        all_pass(waiters).await;
    }

    #[test]
    fn a_waiter_woken_but_dropped_before_it_passed_hands_the_relay_on() {
        let gate = Arc::new(Gate::default());
        let woken: Vec<Arc<Flag>> = (0..RELAY_LANES * 3).map(|_| Arc::new(Flag::default())).collect();
        let mut waits: Vec<GateWait> = woken
            .iter()
            .map(|flag| {
                let mut wait = gate.clone().wait();
                let waker = Waker::from(flag.clone());
                assert!(Pin::new(&mut wait).poll(&mut Context::from_waker(&waker)).is_pending());
                wait
            })
            .collect();
        gate.open();
        // The opening woke each lane's first waiter, and only those.
        let is_woken = |slot: usize| woken[slot].0.load(Ordering::Acquire);
        assert!((0..RELAY_LANES).all(is_woken));
        assert!(!(RELAY_LANES..RELAY_LANES * 3).any(is_woken));
        // The first of lane 0 goes without passing; the first of lane 1 passes.
        drop(waits.remove(0));
        assert!(is_woken(RELAY_LANES));
        let waker = Waker::from(Arc::new(Flag::default()));
        assert!(Pin::new(&mut waits[0]).poll(&mut Context::from_waker(&waker)).is_ready());
        assert!(is_woken(RELAY_LANES + 1));
        assert!(!is_woken(RELAY_LANES * 2) && !is_woken(RELAY_LANES * 2 + 1));
    }

    /// A waker that notes it was woken.
    #[derive(Default)]
    struct Flag(AtomicBool);

    impl std::task::Wake for Flag {
        fn wake(self: Arc<Self>) {
            self.0.store(true, Ordering::Release);
        }
    }
}
