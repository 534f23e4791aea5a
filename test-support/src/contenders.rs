//! Contenders racing for one lease at the same time, for any [`LeaderElection`]: each does
//! random acquisitions, renewals, releases and pauses, and after each step checks that no
//! two contenders believe they hold the lease now and that every grant's term is higher
//! than all before it. Shared by the store-backed election's tests and the Kubernetes
//! one's (`actors/tests/kubernetes_lease.rs`).

use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use parking_lot::Mutex;
use sundial::entropy::Entropy;
use sundial::leader::{LeaderElection, LeaderLease};
use sundial::name::ResourceName;
use sundial::time::{Clock, ManualClock};

/// What the contenders share: until when each believes it holds the lease (`None`: it
/// does not), and the terms granted so far, in order.
#[derive(Clone, Default)]
pub struct Race {
    beliefs: Arc<Mutex<Vec<Option<DateTime<Utc>>>>>,
    terms: Arc<Mutex<Vec<u64>>>,
}

impl Race {
    /// A race of `contenders`.
    pub fn new(contenders: usize) -> Self {
        Self { beliefs: Arc::new(Mutex::new(vec![None; contenders])), terms: Arc::default() }
    }

    /// How many grants there were.
    pub fn grants(&self) -> usize {
        self.terms.lock().len()
    }
}

/// Contender `i` of `race` (a failure names `label`): `steps` random steps through
/// `election` on `resource`, stalling up to a TTL and a quarter at a time on `clock`.
pub async fn contend<E: LeaderElection>(
    election: E,
    i: usize,
    race: Race,
    clock: ManualClock,
    (resource, ttl): (ResourceName, Duration),
    (label, seed, steps): (&str, u64, usize),
) {
    let mut lease: Option<E::Lease> = None;
    let mut choice = Entropy::from_seed(seed * 10 + i as u64 + 1_000);
    for step in 0..steps {
        match (choice.below(5), lease.as_mut()) {
            (0, _) => {
                // A stall of up to a TTL and a quarter (a holder that stops renewing, its
                // lease lapsing while the others look), time passing in small steps while
                // the others act.
                let until = clock.now() + ttl.mul_f64(choice.below(1_250) as f64 / 1_000.0);
                while clock.now() < until {
                    clock.advance(Duration::from_millis(1 + choice.below(500)));
                    tokio::task::yield_now().await;
                }
            }
            (1 | 2, None) => {
                if let Ok(taken) = election.try_acquire(&resource, ttl).await {
                    let mut terms = race.terms.lock();
                    assert!(
                        terms.iter().all(|&t| t < taken.term()),
                        "{label} seed {seed}: term {} again",
                        taken.term()
                    );
                    terms.push(taken.term());
                    lease = Some(taken);
                }
            }
            (1..=3, Some(held)) => {
                let _ = held.renew().await;
            }
            (_, Some(held)) => {
                // Giving the lease up, this contender no longer acts as its holder.
                race.beliefs.lock()[i] = None;
                let _ = held.release().await;
                if !held.is_held() {
                    lease = None;
                }
            }
            _ => {}
        }
        let now = clock.now();
        let mut beliefs = race.beliefs.lock();
        beliefs[i] = lease.as_ref().filter(|held| held.is_held()).map(LeaderLease::expires_at);
        let holders: Vec<usize> = (0..beliefs.len()).filter(|&j| beliefs[j].is_some_and(|until| until > now)).collect();
        assert!(holders.len() <= 1, "{label} seed {seed}, contender {i} step {step}: {holders:?} all hold the lease");
    }
    // Done: a lease still held is dropped, which releases it.
    race.beliefs.lock()[i] = None;
}
