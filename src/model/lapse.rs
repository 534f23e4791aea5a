//! Observer-judged expiry (DESIGN.md decision 3): a lease, claim or record held by someone
//! else may be taken over only once this observer has itself seen it unchanged for its
//! whole lease, timed on its own monotonic clock. Wall-clock expiry times written by the
//! holder are never trusted: clocks differ between machines, a monotonic clock does not
//! jump, and a holder that is alive changes what it holds (renews, heartbeats) well
//! within the lease.
//!
//! Which instant to time from matters, since a read takes time. What a read returns may
//! have been written at any moment up to when it returned, and the holder times its lease
//! from before its write. So an observer starts timing a version it read no earlier than
//! when that read returned ([`LapseWatch::observe`]), and judges whether a version
//! lapsed as of no later than when the read that found it unchanged began
//! ([`LapseWatch::lapsed`]). Timed from when the read began, a version written while the
//! read was on its way would lapse for the observer before its holder's lease ended.
//!
//! [`LapseWatch`] is that rule in one place. The store's leader leases
//! ([`crate::leader`]), coordinated executions ([`crate::coordination`]), the node's
//! Kubernetes Leases and the leader's watch over the other nodes' heartbeats each keep one,
//! keyed by what they watch, with whatever tells one version of it from the next (the
//! whole record, an execution id and heartbeat count, a `resourceVersion`, a heartbeat
//! sequence).

use std::borrow::Borrow;
use std::collections::BTreeMap;
use std::time::Duration;

use crate::time::MonotonicInstant;

/// What this observer saw of things held by others, and since when each has been seen
/// unchanged. Cheap to clone while small: take a copy into a transaction that must judge
/// by what was seen before it started.
#[derive(Debug, Clone)]
pub struct LapseWatch<K, V> {
    seen: BTreeMap<K, Seen<V>>,
}

#[derive(Debug, Clone)]
struct Seen<V> {
    version: V,
    lease: Duration,
    since: MonotonicInstant,
}

impl<K, V> Default for LapseWatch<K, V> {
    fn default() -> Self {
        Self { seen: BTreeMap::new() }
    }
}

impl<K: Ord, V: PartialEq> LapseWatch<K, V> {
    /// A watch that has seen nothing.
    pub fn new() -> Self {
        Self::default()
    }

    /// Records that `key` was seen at `version`, held for `lease`, at `now`: a time no
    /// earlier than when the read that saw it returned. Timing starts when `key` is new or
    /// its version changed, and keeps running while it stays the same (the lease noted is
    /// the latest seen).
    pub fn observe(&mut self, key: K, version: V, lease: Duration, now: MonotonicInstant) {
        match self.seen.get_mut(&key) {
            Some(seen) if seen.version == version => seen.lease = lease,
            _ => {
                self.seen.insert(key, Seen { version, lease, since: now });
            }
        }
    }

    /// How long `key` has been seen unchanged at `version` by `now`; `None` when it was
    /// never seen at that version (then it has not been timed at all).
    pub fn unchanged_for<Q>(&self, key: &Q, version: &V, now: MonotonicInstant) -> Option<Duration>
    where
        K: Borrow<Q>,
        Q: Ord + ?Sized,
    {
        self.seen.get(key).filter(|seen| seen.version == *version).map(|seen| now.saturating_duration_since(seen.since))
    }

    /// Whether `key`, now at `version` with `lease`, has been seen unchanged for the whole
    /// lease by `now`: only then may it be taken over. `now` is no later than when the
    /// read that found it at `version` began.
    pub fn lapsed<Q>(&self, key: &Q, version: &V, lease: Duration, now: MonotonicInstant) -> bool
    where
        K: Borrow<Q>,
        Q: Ord + ?Sized,
    {
        self.unchanged_for(key, version, now).is_some_and(|unchanged| unchanged >= lease)
    }

    /// How long until `key`, now at `version` with `lease`, could lapse if it stays
    /// unchanged: the whole lease when it was not seen at that version before.
    pub fn remaining<Q>(&self, key: &Q, version: &V, lease: Duration, now: MonotonicInstant) -> Duration
    where
        K: Borrow<Q>,
        Q: Ord + ?Sized,
    {
        lease.saturating_sub(self.unchanged_for(key, version, now).unwrap_or_default())
    }

    /// Stops timing `key` (this observer took it, or saw it released or gone).
    pub fn forget<Q>(&mut self, key: &Q)
    where
        K: Borrow<Q>,
        Q: Ord + ?Sized,
    {
        self.seen.remove(key);
    }

    /// Forgets what was first seen more than two of its leases before `now`: an observer
    /// that never asks about it again need not remember it, and one that does times it
    /// afresh (takeover then comes later, never earlier).
    pub fn forget_stale(&mut self, now: MonotonicInstant) {
        self.seen.retain(|_, seen| now.saturating_duration_since(seen.since) <= seen.lease.saturating_mul(2));
    }

    /// Keeps timing only the keys `keep` holds to (e.g. those still listed).
    pub fn retain(&mut self, mut keep: impl FnMut(&K) -> bool) {
        self.seen.retain(|key, _| keep(key));
    }

    /// Forgets everything (e.g. a new observer's term: what was seen before does not count).
    pub fn clear(&mut self) {
        self.seen.clear();
    }

    /// How many things are being timed.
    pub fn len(&self) -> usize {
        self.seen.len()
    }

    /// Whether nothing is being timed.
    pub fn is_empty(&self) -> bool {
        self.seen.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LEASE: Duration = Duration::from_secs(10);

    fn at(secs: u64) -> MonotonicInstant {
        MonotonicInstant::from_origin(Duration::from_secs(secs))
    }

    #[test]
    fn a_holder_lapses_only_after_a_whole_lease_seen_unchanged() {
        let mut watch = LapseWatch::new();
        assert!(!watch.lapsed("lease", &1, LEASE, at(100)), "never seen: not timed at all");
        assert_eq!(watch.remaining("lease", &1, LEASE, at(100)), LEASE);
        watch.observe("lease", 1, LEASE, at(100));
        watch.observe("lease", 1, LEASE, at(105));
        assert_eq!(
            watch.unchanged_for("lease", &1, at(105)),
            Some(Duration::from_secs(5)),
            "seeing it again keeps timing"
        );
        assert_eq!(watch.remaining("lease", &1, LEASE, at(105)), Duration::from_secs(5));
        assert!(!watch.lapsed("lease", &1, LEASE, at(109)));
        assert!(watch.lapsed("lease", &1, LEASE, at(110)));
        assert!(!watch.lapsed("lease", &1, Duration::from_secs(11), at(110)), "judged by the lease it holds now");
    }

    #[test]
    fn any_change_restarts_the_clock() {
        let mut watch = LapseWatch::new();
        watch.observe("lease", 1, LEASE, at(100));
        assert!(!watch.lapsed("lease", &2, LEASE, at(200)), "a version never seen is not timed");
        watch.observe("lease", 2, LEASE, at(108));
        assert!(!watch.lapsed("lease", &2, LEASE, at(110)), "renewed at 108");
        assert!(!watch.lapsed("lease", &1, LEASE, at(200)), "the old version is gone");
        assert!(watch.lapsed("lease", &2, LEASE, at(118)));
    }

    #[test]
    fn forgetting_stops_timing() {
        let mut watch = LapseWatch::new();
        watch.observe("a".to_owned(), 1, LEASE, at(0));
        watch.observe("b".to_owned(), 1, LEASE, at(15));
        watch.forget("a");
        assert!(!watch.lapsed("a", &1, LEASE, at(100)));
        watch.observe("a".to_owned(), 1, LEASE, at(20));
        watch.forget_stale(at(36));
        assert_eq!(watch.len(), 1, "b, first seen 21 s ago, is more than two leases old");
        assert!(watch.unchanged_for("a", &1, at(36)).is_some());
        watch.forget_stale(at(41));
        assert!(watch.is_empty());
        watch.observe("c".to_owned(), 1, LEASE, at(50));
        watch.observe("d".to_owned(), 1, LEASE, at(50));
        watch.retain(|key| key == "d");
        assert_eq!((watch.len(), watch.unchanged_for("d", &1, at(51))), (1, Some(Duration::from_secs(1))));
        watch.clear();
        assert!(watch.is_empty());
    }
}
