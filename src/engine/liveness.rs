//! A node's own liveness decisions: when it fences itself for want of a heartbeat, how
//! often its watchdog looks, how often the leader lease is renewed, and what a failed
//! renewal means. The node's actors (`sundial-actors`: the fence watchdog, the lease
//! actor) act on them.
//!
//! The leader declares a node lost once its heartbeat has not moved for `node_timeout` on
//! the leader's own clock (DESIGN.md decision 3). A node that cannot heartbeat does not
//! know it was declared lost, so it fences itself (cancels its runs) once its last
//! committed heartbeat is two thirds of `node_timeout` old: the last third is the margin
//! for its runs to end before their jobs may start elsewhere.

use std::time::Duration;

/// The shortest period between renewals of the leader lease, so a tiny TTL cannot turn
/// the lease actor into a busy loop.
pub const FASTEST_RENEWAL: Duration = Duration::from_millis(10);

/// How old the last committed heartbeat may get before the node fences itself: two thirds
/// of `node_timeout`.
pub fn fence_after(node_timeout: Duration) -> Duration {
    node_timeout * 2 / 3
}

/// Whether a node whose last committed heartbeat began `age` ago (`None`: none yet)
/// fences itself.
pub fn heartbeat_is_stale(age: Option<Duration>, node_timeout: Duration) -> bool {
    age.is_some_and(|age| age >= fence_after(node_timeout))
}

/// How often the fence watchdog looks: a tenth of `node_timeout`, at least every 100 ms
/// and at most every `poll_interval`.
pub fn watchdog_period(node_timeout: Duration, poll_interval: Duration) -> Duration {
    (node_timeout / 10).clamp(Duration::from_millis(100), poll_interval.max(Duration::from_millis(100)))
}

/// How often the leader lease is renewed (or tried for): three times a TTL, at most every
/// [`FASTEST_RENEWAL`].
pub fn renewal_period(lease_ttl: Duration) -> Duration {
    (lease_ttl / 3).max(FASTEST_RENEWAL)
}

/// Whether a lease TTL is so short that renewals [`FASTEST_RENEWAL`] apart can let it lapse
/// between them (valid, as the spec asks only a TTL above zero, but leadership then changes
/// hands again and again).
pub fn lease_ttl_too_short(lease_ttl: Duration) -> bool {
    lease_ttl < FASTEST_RENEWAL * 3
}

/// Whether a leader keeps its lease after a renewal failed: when the store could not be
/// reached (`unavailable`) and the lease is still held by its own timing, it stays the
/// leader and tries again; any other refusal (another node holds it, its term moved on)
/// means it lost the lease.
pub fn keeps_lease_after_failed_renewal(unavailable: bool, still_held: bool) -> bool {
    unavailable && still_held
}

#[cfg(test)]
mod tests {
    use super::*;

    const SECOND: Duration = Duration::from_secs(1);

    #[test]
    fn a_node_fences_itself_a_third_of_the_timeout_before_it_can_be_declared_lost() {
        let timeout = Duration::from_secs(90);
        assert_eq!(fence_after(timeout), Duration::from_secs(60));
        assert!(!heartbeat_is_stale(None, timeout), "no heartbeat yet: nothing to fence");
        assert!(!heartbeat_is_stale(Some(Duration::from_secs(59)), timeout));
        assert!(heartbeat_is_stale(Some(Duration::from_secs(60)), timeout));
    }

    #[test]
    fn the_watchdog_looks_every_tenth_of_the_timeout_within_bounds() {
        assert_eq!(watchdog_period(Duration::from_secs(90), SECOND), SECOND, "at most a poll interval");
        assert_eq!(watchdog_period(Duration::from_secs(5), SECOND), Duration::from_millis(500));
        assert_eq!(watchdog_period(Duration::from_millis(300), SECOND), Duration::from_millis(100));
        assert_eq!(watchdog_period(Duration::from_secs(5), Duration::from_millis(10)), Duration::from_millis(100));
    }

    #[test]
    fn the_lease_is_renewed_three_times_a_ttl_and_kept_only_while_the_store_is_out_of_reach() {
        assert_eq!(renewal_period(Duration::from_secs(30)), Duration::from_secs(10));
        assert_eq!(renewal_period(Duration::from_millis(15)), FASTEST_RENEWAL);
        assert!(lease_ttl_too_short(Duration::from_millis(29)) && !lease_ttl_too_short(Duration::from_millis(30)));
        assert!(keeps_lease_after_failed_renewal(true, true));
        assert!(!keeps_lease_after_failed_renewal(true, false), "expired by its own timing");
        assert!(!keeps_lease_after_failed_renewal(false, true), "refused: another holds it");
    }
}
