//! Self-fencing. The leader declares a node lost once its heartbeat has not moved for
//! `node_timeout` (on the leader's monotonic clock, from when it first saw that heartbeat),
//! then marks its runs `Lost` and may run their jobs again elsewhere. A node that cannot
//! heartbeat — cut off from the store, or stuck in a slow cycle — does not know it was
//! declared lost, so it fences itself: once its last successful heartbeat is two thirds of
//! `node_timeout` old, it cancels every run it has, and keeps canceling new ones while the
//! heartbeat stays stale. A non-concurrent job whose runs honour cancellation therefore
//! ends on this node before its next run can start on another.

use std::sync::Arc;
use std::time::Duration;

use sundial::kv::Kv;

use crate::execute::{AbortOnDrop, CancelReason};
use crate::node::{Lifecycle, NodeShared};

/// How stale the last successful heartbeat may get before the node fences itself, as a
/// fraction of `node_timeout`: the rest is the margin for the runs to end.
const FENCE_AT: (u32, u32) = (2, 3);

/// Whether the node's last successful heartbeat is old enough that it fences itself.
pub(crate) fn heartbeat_is_stale<K: Kv>(shared: &NodeShared<K>) -> bool {
    let fence_after = shared.options.node_timeout * FENCE_AT.0 / FENCE_AT.1;
    shared.heartbeat_age().is_some_and(|age| age >= fence_after)
}

/// Starts the watchdog of a node on a shared store; it stops when the returned handle is
/// dropped (with the supervisor's state) or the node stops.
pub(crate) fn spawn_watchdog<K: Kv>(shared: Arc<NodeShared<K>>) -> AbortOnDrop<()> {
    let fence_after = shared.options.node_timeout * FENCE_AT.0 / FENCE_AT.1;
    let tick = (shared.options.node_timeout / 10).clamp(Duration::from_millis(100), shared.options.poll_interval);
    AbortOnDrop(tokio::spawn(async move {
        let mut fenced = false;
        loop {
            tokio::time::sleep(tick).await;
            match shared.lifecycle() {
                Lifecycle::Stopped => return,
                Lifecycle::Starting => continue,
                Lifecycle::Serving | Lifecycle::Draining => {}
            }
            let stale = heartbeat_is_stale(&shared);
            if stale {
                let canceled = shared.cancel_all_runs(CancelReason::Fenced);
                if !fenced || canceled > 0 {
                    tracing::warn!(
                        node = %shared.node_id,
                        canceled,
                        "no heartbeat for {} ms: fencing this node, its runs are canceled",
                        fence_after.as_millis()
                    );
                }
            }
            fenced = stale;
        }
    }))
}
