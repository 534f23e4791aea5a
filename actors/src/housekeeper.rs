//! `HousekeeperActor`: the leader's maintenance (SPEC §10 step 5).
//!
//! While this node leads, it watches every node's heartbeat sequence on its own monotonic
//! clock (DESIGN.md decision 3) and reaps a node whose sequence stayed unchanged for
//! `node_timeout`: its runs become `Lost`, and those of jobs that request recovery are
//! re-enqueued once. Each `housekeeping_interval` it deletes history that ended more than
//! `history_retention` ago. Every store write it makes is fenced by its leader term, so a
//! deposed leader's late housekeeping cannot commit. A new leader observes for a full
//! `node_timeout` before reaping anything. What to reap and when to trim is decided by
//! [`sundial::housekeeping::Housekeeper`]; this actor reads the node list, makes the
//! store calls and publishes the lost runs' events.

use std::sync::Arc;

use ractor::{Actor, ActorProcessingErr, ActorRef};
use sundial::housekeeping::{tick_period, Housekeeper};
use sundial::kv::Kv;
use sundial::time::Clock;

use crate::context::NodeShared;

/// Runs reaped per transaction.
const REAP_CHUNK: usize = 100;

/// Messages to the housekeeper.
#[derive(Debug)]
pub(crate) enum HousekeeperMsg {
    /// Observe nodes; reap and expire history when due.
    Tick,
}

pub(crate) struct HousekeeperState<K: Kv> {
    shared: Arc<NodeShared<K>>,
    /// What to reap and when to trim, and what that remembers.
    keeper: Housekeeper,
}

/// The housekeeper.
pub(crate) struct HousekeeperActor<K: Kv>(std::marker::PhantomData<K>);

impl<K: Kv> HousekeeperActor<K> {
    pub(crate) fn new() -> Self {
        Self(std::marker::PhantomData)
    }
}

impl<K: Kv> Actor for HousekeeperActor<K> {
    type Msg = HousekeeperMsg;
    type State = HousekeeperState<K>;
    type Arguments = Arc<NodeShared<K>>;

    async fn pre_start(
        &self,
        myself: ActorRef<HousekeeperMsg>,
        shared: Arc<NodeShared<K>>,
    ) -> Result<Self::State, ActorProcessingErr> {
        let _ = myself.send_message(HousekeeperMsg::Tick);
        Ok(HousekeeperState { shared, keeper: Housekeeper::new() })
    }

    async fn handle(
        &self,
        myself: ActorRef<HousekeeperMsg>,
        _message: HousekeeperMsg,
        state: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        tick(state).await;
        myself.send_after(tick_period(&state.shared.options), || HousekeeperMsg::Tick);
        Ok(())
    }
}

async fn tick<K: Kv>(state: &mut HousekeeperState<K>) {
    let shared = state.shared.clone();
    let Some(leadership) = shared.leader() else {
        state.keeper.not_leading();
        return;
    };
    state.keeper.leading(leadership.term);
    let fence = leadership.fence.as_ref();
    let now_mono = shared.clock.monotonic();
    let now = shared.clock.now();
    if shared.shared_store {
        match shared.store.nodes().await {
            Ok(nodes) => {
                let seen = shared.clock.monotonic();
                let timeout = shared.options.node_timeout;
                for reap_step in state.keeper.plan_reaps(&shared.node_id, &nodes, timeout, seen, now_mono) {
                    if reap_step.lapsed {
                        tracing::warn!(node = %reap_step.node, "node lost: no heartbeat for node_timeout");
                    }
                    let done = reap(&shared, &reap_step.node, reap_step.seq, fence).await;
                    state.keeper.reaped(&reap_step, done);
                }
            }
            Err(error) => tracing::warn!(%error, "could not read nodes"),
        }
    }
    if state.keeper.retention_due(now_mono, shared.options.housekeeping_interval) {
        match shared.store.apply_retention(now, shared.options.history_retention(), fence).await {
            Ok(deleted) if deleted > 0 => tracing::info!(deleted, "expired history"),
            Ok(_) => {}
            Err(error) => tracing::warn!(%error, "history retention failed"),
        }
        state.keeper.retention_ran(now_mono);
    }
}

/// Declares `node` lost (unless it heartbeated since `seq`) and marks its runs `Lost`;
/// returns whether that finished (a failed step is taken again at the next tick).
async fn reap<K: Kv>(shared: &NodeShared<K>, node: &str, seq: u64, fence: Option<&sundial::store::Fence>) -> bool {
    loop {
        match shared.store.reap_node(node, seq, shared.clock.now(), REAP_CHUNK, fence).await {
            Ok(step) => {
                for run in &step.lost_runs {
                    tracing::warn!(%node, run_id = %run, "run lost with its node");
                    shared.publish_lost(*run).await;
                }
                if !step.recovery_triggers.is_empty() {
                    // Recoveries are due now. Other nodes hear of those in their shards
                    // through their wake keys; this node's poller is told here.
                    shared.wake_poller();
                }
                if !step.more {
                    return true;
                }
            }
            Err(error) => {
                tracing::warn!(%node, %error, "reaping failed; retrying at the next tick");
                return false;
            }
        }
    }
}
