//! Goal: leader election on a Kubernetes Lease follows SPEC §11 as the store-backed one
//! does: one holder at a time, not re-entrant, renew extends by a TTL, release frees at
//! once and may repeat, takeover only after the observer saw the Lease unchanged for its
//! duration on its own clock, terms strictly increase, two contenders racing for a free
//! Lease get one winner, and an unreachable or refusing API server is `UNAVAILABLE_002`
//! with the holding state kept.
//!
//! Method: a fake API server (`sundial_test_support::fake_kubernetes`, real HTTP) keeps Lease
//! objects the way the Kubernetes API server does. Elections run on a manual clock, so
//! expiry is exact.
#![cfg(feature = "node")]

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use sundial::entropy::Entropy;
use sundial::leader::{LeaderElection, LeaderLease};
use sundial::name::ResourceName;
use sundial::time::{from_micros, ManualClock};
use sundial_actors::kubernetes::{KubernetesApi, KubernetesLeaderElection, DEFAULT_LEASE_NAME};
use sundial_test_support::contenders::{contend, Race};
use sundial_test_support::fake_kubernetes::{self, start as fake_api, Trouble, TOKEN};
use sundial_test_support::tls::TestCa;

const TTL: Duration = Duration::from_secs(15);

fn election(base: &str, clock: &ManualClock, pod: &str) -> KubernetesLeaderElection {
    let api = KubernetesApi::new(base, "jobs", Some(TOKEN.to_owned())).unwrap();
    KubernetesLeaderElection::new(api, Arc::new(clock.clone()), pod)
}

fn setup_clock() -> ManualClock {
    ManualClock::new(from_micros(1_800_000_000_000_000).unwrap())
}

fn resource() -> ResourceName {
    ResourceName::new("scheduling.jobs").unwrap()
}

fn code(e: sundial::SchedulingError) -> &'static str {
    e.code()
}

#[tokio::test]
async fn one_holder_not_reentrant_release_frees_at_once() {
    let (fake, base) = fake_api().await;
    let clock = setup_clock();
    let (a, b) = (election(&base, &clock, "pod-a"), election(&base, &clock, "pod-b"));
    let mut lease = a.try_acquire(&resource(), TTL).await.unwrap();
    assert!(lease.is_held());
    assert_eq!((lease.holder(), lease.term()), ("pod-a", 1));
    assert_eq!(lease.fence(), None, "a Kubernetes lease is outside the job store");
    let stored = fake.leases.lock().get(&("jobs".to_owned(), DEFAULT_LEASE_NAME.to_owned())).cloned().unwrap();
    let stored = serde_json::to_value(stored).unwrap();
    assert_eq!(stored["spec"]["holderIdentity"], "pod-a");
    assert_eq!(stored["spec"]["leaseDurationSeconds"], 15);
    assert_eq!(stored["spec"]["renewTime"], "2027-01-15T08:00:00.000000Z");
    assert_eq!(code(b.try_acquire(&resource(), TTL).await.unwrap_err()), "SCHEDULING_CONFLICT_002");
    assert_eq!(code(a.try_acquire(&resource(), TTL).await.unwrap_err()), "SCHEDULING_CONFLICT_002", "not re-entrant");
    lease.release().await.unwrap();
    lease.release().await.unwrap();
    assert!(!lease.is_held());
    let taken = b.try_acquire(&resource(), TTL).await.unwrap();
    assert_eq!((taken.holder(), taken.term()), ("pod-b", 2), "free at once after release, next term");
}

#[tokio::test]
async fn takeover_only_after_the_lease_was_seen_unchanged_for_its_duration() {
    let (_, base) = fake_api().await;
    let clock = setup_clock();
    let (a, b) = (election(&base, &clock, "pod-a"), election(&base, &clock, "pod-b"));
    let mut lease = a.try_acquire(&resource(), TTL).await.unwrap();
    clock.advance(Duration::from_secs(60));
    // b sees the Lease for the first time: however old its renewTime, b times it from now.
    assert!(b.try_acquire(&resource(), TTL).await.is_err());
    assert!(!lease.is_held(), "the holder counts its own TTL");
    assert_eq!(code(lease.renew().await.unwrap_err()), "SCHEDULING_CONFLICT_002");
    clock.advance(TTL - Duration::from_secs(1));
    assert!(b.try_acquire(&resource(), TTL).await.is_err());
    clock.advance(Duration::from_secs(1));
    let taken = b.try_acquire(&resource(), TTL).await.unwrap();
    assert_eq!(taken.term(), 2);
}

#[tokio::test]
async fn renewals_keep_a_lease_and_restart_the_observers_clock() {
    let (_, base) = fake_api().await;
    let clock = setup_clock();
    let (a, b) = (election(&base, &clock, "pod-a"), election(&base, &clock, "pod-b"));
    let mut lease = a.try_acquire(&resource(), TTL).await.unwrap();
    for _ in 0..6 {
        assert!(b.try_acquire(&resource(), TTL).await.is_err());
        clock.advance(TTL / 2);
        lease.renew().await.unwrap();
        assert!(lease.is_held());
    }
    clock.advance(TTL / 2);
    assert!(b.try_acquire(&resource(), TTL).await.is_err(), "changed half a TTL ago");
    assert_eq!(lease.term(), 1, "renewals keep the term");
}

/// An observer times a Lease from when it saw it, not from when it began to look: a
/// renewal that lands while the observer's read is on its way holds for its whole duration
/// from when the holder began it, and the observer must not take over before that.
#[tokio::test]
async fn an_observer_times_a_renewal_it_read_late_from_when_it_read_it() {
    let (fake, base) = fake_api().await;
    let clock = setup_clock();
    let (a, b) = (election(&base, &clock, "pod-a"), election(&base, &clock, "pod-b"));
    let mut lease = a.try_acquire(&resource(), TTL).await.unwrap();
    let (held, read_held) = tokio::sync::oneshot::channel();
    let (serve, served) = tokio::sync::oneshot::channel();
    *fake.hold_next_read.lock() = Some((held, served));
    let looking = {
        let b = b.clone();
        tokio::spawn(async move { b.try_acquire(&resource(), TTL).await.map(|_| ()).map_err(code) })
    };
    // While b's read is on its way, a second passes and a renews.
    read_held.await.unwrap();
    clock.advance(Duration::from_secs(1));
    lease.renew().await.unwrap();
    serve.send(()).unwrap();
    assert_eq!(looking.await.unwrap(), Err("SCHEDULING_CONFLICT_002"));
    // A duration after b began looking, the renewal still holds (it began a second later).
    clock.advance(TTL - Duration::from_secs(1));
    assert!(lease.is_held());
    assert_eq!(
        code(b.try_acquire(&resource(), TTL).await.unwrap_err()),
        "SCHEDULING_CONFLICT_002",
        "taken over while the renewal still held"
    );
    clock.advance(Duration::from_secs(1));
    assert!(!lease.is_held());
    assert_eq!(b.try_acquire(&resource(), TTL).await.unwrap().term(), 2, "taken over once it lapsed");
}

/// Contenders racing for one Lease at the same time, their requests interleaving: time
/// passes while each request is on its way, requests are refused, and writes' answers are
/// lost after the write was applied. At no moment may two contenders believe they hold the
/// Lease, and every grant's term is higher than all before it.
#[tokio::test]
async fn interleaved_contenders_never_hold_the_lease_twice() {
    let mut grants = 0;
    for seed in 0..40u64 {
        let (fake, base) = fake_api().await;
        let clock = setup_clock();
        *fake.trouble.lock() = Some(Trouble {
            entropy: Entropy::from_seed(seed),
            clock: clock.clone(),
            latency_max: Duration::from_millis(500),
            refused: 100,
            answer_lost: 200,
        });
        let race = Race::new(3);
        let contenders: Vec<_> = (0..3)
            .map(|i| {
                let election = election(&base, &clock, &format!("pod-{i}"));
                let (race, clock) = (race.clone(), clock.clone());
                tokio::spawn(async move {
                    contend(election, i, race, clock, (resource(), TTL), ("kubernetes", seed, 40)).await;
                })
            })
            .collect();
        for contender in contenders {
            contender.await.unwrap();
        }
        grants += race.grants();
    }
    assert!(grants > 100, "the Lease changed hands often: {grants} grants");
}

#[tokio::test]
async fn of_two_contenders_for_a_free_lease_one_wins() {
    let (_, base) = fake_api().await;
    let clock = setup_clock();
    for round in 0..5 {
        let r = ResourceName::new(format!("race.{round}")).unwrap();
        let contenders: Vec<_> = (0..4).map(|i| election(&base, &clock, &format!("pod-{i}"))).collect();
        let attempts: Vec<_> = contenders
            .iter()
            .map(|e| {
                let (e, r) = (e.clone(), r.clone());
                tokio::spawn(async move { e.try_acquire(&r, TTL).await })
            })
            .collect();
        let mut winners = 0;
        for attempt in attempts {
            match attempt.await.unwrap() {
                Ok(lease) => {
                    winners += 1;
                    std::mem::forget(lease); // keep it held for the count
                }
                Err(e) => assert_eq!(code(e), "SCHEDULING_CONFLICT_002"),
            }
        }
        assert_eq!(winners, 1, "round {round}");
    }
}

#[tokio::test]
async fn an_unreachable_or_refusing_api_is_unavailable_and_keeps_the_state() {
    let (fake, base) = fake_api().await;
    let clock = setup_clock();
    let a = election(&base, &clock, "pod-a");
    let mut lease = a.try_acquire(&resource(), TTL).await.unwrap();
    fake.down.store(true, Ordering::SeqCst);
    assert_eq!(code(lease.renew().await.unwrap_err()), "SCHEDULING_UNAVAILABLE_002");
    assert_eq!(code(lease.release().await.unwrap_err()), "SCHEDULING_UNAVAILABLE_002");
    assert!(lease.is_held(), "state unchanged");
    let b = election(&base, &clock, "pod-b");
    assert_eq!(code(b.try_acquire(&resource(), TTL).await.unwrap_err()), "SCHEDULING_UNAVAILABLE_002");
    fake.down.store(false, Ordering::SeqCst);
    lease.renew().await.unwrap();
    // A wrong token is refused: unavailable, not a silent grant.
    let api = KubernetesApi::new(&base, "jobs", Some("wrong".to_owned())).unwrap();
    let stranger = KubernetesLeaderElection::new(api, Arc::new(clock.clone()), "pod-c");
    let error = stranger.try_acquire(&resource(), TTL).await.unwrap_err();
    assert_eq!(code(error.clone()), "SCHEDULING_UNAVAILABLE_002");
    assert!(error.to_string().contains("401"), "{error}");
    // Nothing listens here.
    let nowhere = KubernetesApi::new("http://127.0.0.1:1", "jobs", None).unwrap();
    let lonely = KubernetesLeaderElection::new(nowhere, Arc::new(clock.clone()), "pod-d");
    assert_eq!(code(lonely.try_acquire(&resource(), TTL).await.unwrap_err()), "SCHEDULING_UNAVAILABLE_002");
    assert!(KubernetesApi::new("ftp://x", "jobs", None).is_err());
    assert!(KubernetesApi::new("http://x", "", None).is_err());
}

#[tokio::test]
async fn a_dropped_lease_releases_itself_and_names_map_to_kubernetes_names() {
    let (fake, base) = fake_api().await;
    let clock = setup_clock();
    let a = election(&base, &clock, "pod-a");
    let r = ResourceName::new("reports_nightly-").unwrap();
    assert_eq!(a.lease_name(r.as_str()), "reports-nightly-0");
    let custom = a.clone().with_lease_name(&r, "my-lease");
    assert_eq!(custom.lease_name(r.as_str()), "my-lease");
    drop(a.try_acquire(&r, TTL).await.unwrap());
    // The release runs in the background.
    for _ in 0..100 {
        if fake.holder("jobs", "reports-nightly-0").is_none() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let b = election(&base, &clock, "pod-b");
    assert_eq!(b.try_acquire(&r, TTL).await.unwrap().term(), 2, "released by the drop, taken at once");
}

/// As in a pod: the API server over HTTPS with the cluster's CA, the token in a file
/// (`kube` re-reads it as it rotates), the namespace from the configuration.
#[tokio::test]
async fn a_pods_configuration_reaches_the_api_over_https_with_its_ca_and_token_file() {
    let dir = sundial_test_support::dir::TempDir::new("kubernetes-tls");
    let cluster = TestCa::new(dir.path(), "cluster");
    let (fake, base) = fake_kubernetes::start_tls(&cluster.issue("apiserver")).await;
    let token = dir.path().join("token");
    std::fs::write(&token, TOKEN).unwrap();
    let in_pod = |ca: std::path::PathBuf| {
        let mut config = kube::Config::new(base.parse().unwrap());
        config.default_namespace = "jobs".to_owned();
        config.root_cert_file = Some(ca);
        config.root_cert = Some(Vec::new());
        config.auth_info.token_file = Some(token.to_str().unwrap().to_owned());
        config
    };
    let clock = setup_clock();
    let api = KubernetesApi::from_config(in_pod(cluster.cert())).unwrap();
    let a = KubernetesLeaderElection::new(api, Arc::new(clock.clone()), "pod-a");
    let mut lease = a.try_acquire(&resource(), TTL).await.unwrap();
    lease.renew().await.unwrap();
    assert_eq!(fake.holder("jobs", DEFAULT_LEASE_NAME).as_deref(), Some("pod-a"));
    // A server whose certificate another authority signed is not the cluster's.
    let stranger = TestCa::new(dir.path(), "stranger");
    let api = KubernetesApi::from_config(in_pod(stranger.cert())).unwrap();
    let b = KubernetesLeaderElection::new(api, Arc::new(clock.clone()), "pod-b");
    let error = b.try_acquire(&resource(), TTL).await.unwrap_err();
    assert!(error.to_string().contains("UnknownIssuer"), "{error}");
    assert_eq!(code(error), "SCHEDULING_UNAVAILABLE_002");
    lease.release().await.unwrap();
    assert_eq!(fake.holder("jobs", DEFAULT_LEASE_NAME), None);
}
