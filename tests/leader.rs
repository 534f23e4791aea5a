//! Goal: both leader elections follow SPEC §11: one holder at a time, not re-entrant,
//! renew extends by a TTL, release frees at once and may repeat, takeover only after
//! expiry, terms strictly increase, store trouble is `UNAVAILABLE_002` with state kept,
//! and a protected transaction under an old term is refused.
//!
//! Method: two nodes' elections share one `MemoryKv` on a manual clock; time moves only
//! when the test says so, so expiry is exact.

use std::sync::Arc;
use std::time::Duration;

use sundial::entropy::Entropy;
use sundial::kv::memory::MemoryKv;
use sundial::kv::{run, RetryOptions};
use sundial::leader::{KvLeaderElection, LeaderElection, LeaderLease, LocalLeaderElection};
use sundial::name::ResourceName;
use sundial::store::keys::Keyspace;
use sundial::store::StoreError;
use sundial::time::{from_micros, ManualClock};

const TTL: Duration = Duration::from_secs(30);

fn setup() -> (MemoryKv, ManualClock, KvLeaderElection<MemoryKv>, KvLeaderElection<MemoryKv>) {
    let clock = ManualClock::new(from_micros(1_800_000_000_000_000).unwrap());
    let kv = MemoryKv::new(Arc::new(clock.clone()));
    let a = KvLeaderElection::new(
        kv.client("a"),
        Keyspace::default_root(),
        Arc::new(clock.clone()),
        "node-a",
        Entropy::from_seed(1),
    );
    let b = KvLeaderElection::new(
        kv.client("b"),
        Keyspace::default_root(),
        Arc::new(clock.clone()),
        "node-b",
        Entropy::from_seed(2),
    );
    (kv, clock, a, b)
}

fn resource() -> ResourceName {
    ResourceName::new("scheduling.jobs").unwrap()
}

fn code(e: sundial::SchedulingError) -> &'static str {
    e.code()
}

#[tokio::test]
async fn one_holder_not_reentrant_release_frees_at_once() {
    let (_, _, a, b) = setup();
    let mut lease = a.try_acquire(&resource(), TTL).await.unwrap();
    assert!(lease.is_held());
    assert_eq!(lease.term(), 1);
    assert!(lease.holder().starts_with("node-a:"));
    assert_eq!(code(b.try_acquire(&resource(), TTL).await.unwrap_err()), "SCHEDULING_CONFLICT_002");
    assert_eq!(code(a.try_acquire(&resource(), TTL).await.unwrap_err()), "SCHEDULING_CONFLICT_002", "not re-entrant");
    lease.release().await.unwrap();
    lease.release().await.unwrap();
    assert!(!lease.is_held());
    let taken = b.try_acquire(&resource(), TTL).await.unwrap();
    assert_eq!(taken.term(), 2, "terms strictly increase");
}

#[tokio::test]
async fn takeover_only_after_a_full_ttl_of_no_change_on_the_observer_clock() {
    let (_, clock, a, b) = setup();
    let mut old = a.try_acquire(&resource(), TTL).await.unwrap();
    assert!(b.try_acquire(&resource(), TTL).await.is_err(), "starts observing");
    clock.advance(TTL - Duration::from_secs(1));
    assert!(b.try_acquire(&resource(), TTL).await.is_err(), "not yet a full TTL");
    clock.advance(Duration::from_secs(1));
    let new = b.try_acquire(&resource(), TTL).await.unwrap();
    assert_eq!(new.term(), 2);
    assert!(!old.is_held(), "the old holder's own clock says expired");
    assert_eq!(code(old.renew().await.unwrap_err()), "SCHEDULING_CONFLICT_002");
}

#[tokio::test]
async fn renewals_keep_the_lease() {
    let (_, clock, a, b) = setup();
    let mut lease = a.try_acquire(&resource(), TTL).await.unwrap();
    for _ in 0..10 {
        assert!(b.try_acquire(&resource(), TTL).await.is_err());
        clock.advance(TTL / 3);
        lease.renew().await.unwrap();
    }
    assert!(lease.is_held());
    assert_eq!(lease.term(), 1, "renewal keeps the term");
}

#[tokio::test]
async fn a_lease_not_renewed_in_time_cannot_be_renewed() {
    let (_, clock, a, _) = setup();
    let mut lease = a.try_acquire(&resource(), TTL).await.unwrap();
    clock.advance(TTL);
    assert!(!lease.is_held());
    assert_eq!(code(lease.renew().await.unwrap_err()), "SCHEDULING_CONFLICT_002");
}

#[tokio::test]
async fn store_trouble_is_unavailable_and_keeps_state() {
    let (kv, _, a, b) = setup();
    let mut lease = a.try_acquire(&resource(), TTL).await.unwrap();
    kv.set_partitioned("a", true);
    assert_eq!(code(lease.renew().await.unwrap_err()), "SCHEDULING_UNAVAILABLE_002");
    assert_eq!(code(lease.release().await.unwrap_err()), "SCHEDULING_UNAVAILABLE_002");
    assert!(lease.is_held(), "holding state unchanged");
    kv.set_partitioned("a", false);
    lease.renew().await.unwrap();
    kv.set_partitioned("b", true);
    assert_eq!(code(b.try_acquire(&resource(), TTL).await.unwrap_err()), "SCHEDULING_UNAVAILABLE_002");
}

#[tokio::test]
async fn protected_transactions_are_fenced_by_term() {
    let (kv, clock, a, b) = setup();
    let old = a.try_acquire(&resource(), TTL).await.unwrap();
    let fence = old.fence().unwrap();
    let keys = Keyspace::default_root();
    let protected = |fence: sundial::leader::Fence| {
        let kv = kv.clone();
        let keys = keys.clone();
        async move {
            run(&kv, RetryOptions::default(), |txn, _| {
                let (fence, keys) = (fence.clone(), keys.clone());
                async move {
                    fence.check(&txn, &keys).await?;
                    sundial::kv::KvTransaction::set(&txn, b"protected", b"done");
                    Ok::<_, StoreError>(())
                }
            })
            .await
        }
    };
    protected(fence.clone()).await.unwrap();
    assert!(b.try_acquire(&resource(), TTL).await.is_err());
    clock.advance(TTL);
    let new = b.try_acquire(&resource(), TTL).await.unwrap();
    let refused = protected(fence).await.unwrap_err();
    assert_eq!(sundial::SchedulingError::from(refused).code(), "SCHEDULING_CONFLICT_002");
    protected(new.fence().unwrap()).await.unwrap();
}

#[tokio::test]
async fn dropping_a_lease_releases_it_through_the_spawner() {
    let (_, _, a, b) = setup();
    let spawner: sundial::leader::Spawner = Arc::new(|future| {
        tokio::spawn(future);
    });
    let a = a.with_spawner(spawner);
    let lease = a.try_acquire(&resource(), TTL).await.unwrap();
    drop(lease);
    tokio::task::yield_now().await;
    assert_eq!(b.try_acquire(&resource(), TTL).await.unwrap().term(), 2);
}

#[tokio::test]
async fn the_in_process_election() {
    let clock = ManualClock::new(from_micros(1_800_000_000_000_000).unwrap());
    let election = LocalLeaderElection::new(Arc::new(clock.clone()), Entropy::from_seed(3));
    let mut first = election.try_acquire(&resource(), TTL).await.unwrap();
    assert_eq!(code(election.try_acquire(&resource(), TTL).await.unwrap_err()), "SCHEDULING_CONFLICT_002");
    clock.advance(TTL / 2);
    first.renew().await.unwrap();
    clock.advance(TTL / 2);
    assert!(first.is_held());
    drop(first);
    let mut second = election.try_acquire(&resource(), TTL).await.unwrap();
    assert_eq!(second.term(), 2);
    assert_ne!(second.holder(), "", "a fresh random holder");
    clock.advance(TTL);
    assert!(!second.is_held());
    assert!(second.renew().await.is_err());
    let third = election.try_acquire(&resource(), TTL).await.unwrap();
    assert_eq!(third.term(), 3);
}
