//! Self-fencing (when: [`sundial::liveness`]). The leader declares a node lost once its heartbeat has not moved for
//! `node_timeout` (on the leader's monotonic clock, from when it first saw that heartbeat),
//! then marks its runs `Lost` and may run their jobs again elsewhere. A node that cannot
//! heartbeat — cut off from the store, or stuck in a slow cycle — does not know it was
//! declared lost, so it fences itself: once its last successful heartbeat is two thirds of
//! `node_timeout` old, it cancels every run it has, and keeps canceling new ones while the
//! heartbeat stays stale. A non-concurrent job whose runs honour cancellation therefore
//! ends on this node before its next run can start on another.

use std::sync::Arc;

use sundial::kv::Kv;
use sundial::liveness;

use crate::context::{Lifecycle, NodeShared};
use crate::execute::{AbortOnDrop, CancelReason};

/// Whether the node's last successful heartbeat is old enough that it fences itself.
pub(crate) fn heartbeat_is_stale<K: Kv>(shared: &NodeShared<K>) -> bool {
    liveness::heartbeat_is_stale(shared.heartbeat_age(), shared.options.node_timeout)
}

/// Starts the watchdog of a node on a shared store; it stops when the returned handle is
/// dropped (with the supervisor's state) or the node stops.
pub(crate) fn spawn_watchdog<K: Kv>(shared: Arc<NodeShared<K>>) -> AbortOnDrop<()> {
    let fence_after = liveness::fence_after(shared.options.node_timeout);
    let tick = liveness::watchdog_period(shared.options.node_timeout, shared.options.poll_interval);
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
                let canceled = shared.runs.cancel_all(CancelReason::Fenced);
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
