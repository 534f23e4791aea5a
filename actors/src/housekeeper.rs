//! `HousekeeperActor`: the leader's maintenance (SPEC §10 step 5).
//!
//! While this node leads, it watches every node's heartbeat sequence on its own monotonic
//! clock (DESIGN.md decision 3) and reaps a node whose sequence stayed unchanged for
//! `node_timeout`: its runs become `Lost`, and those of jobs that request recovery are
//! re-enqueued once. Each `housekeeping_interval` it deletes history that ended more than
//! `history_retention` ago. Every store write it makes is fenced by its leader term, so a
//! deposed leader's late housekeeping cannot commit. A new leader observes for a full
//! `node_timeout` before reaping anything.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use ractor::{Actor, ActorProcessingErr, ActorRef};
use sundial::kv::Kv;
use sundial::lapse::LapseWatch;
use sundial::time::{Clock, MonotonicInstant};

use crate::events::{CloudEvent, RunFacts, Topic};
use crate::node::NodeShared;

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
    /// Other nodes' heartbeat sequences, timed while unchanged: a node is lost once its
    /// sequence stayed the same for `node_timeout` on this leader's clock.
    observations: LapseWatch<String, u64>,
    last_retention: Option<MonotonicInstant>,
    leading_term: Option<u64>,
    /// Nodes no longer alive (declared lost, or stopped) whose runs this term has
    /// finished reaping.
    swept: BTreeSet<String>,
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
        Ok(HousekeeperState {
            shared,
            observations: LapseWatch::new(),
            last_retention: None,
            leading_term: None,
            swept: BTreeSet::new(),
        })
    }

    async fn handle(
        &self,
        myself: ActorRef<HousekeeperMsg>,
        _message: HousekeeperMsg,
        state: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        tick(state).await;
        let options = &state.shared.options;
        // Observe often enough to notice a lost node within about a third of the timeout.
        let period = options.housekeeping_interval.min(options.node_timeout / 3).max(Duration::from_millis(100));
        myself.send_after(period, || HousekeeperMsg::Tick);
        Ok(())
    }
}

async fn tick<K: Kv>(state: &mut HousekeeperState<K>) {
    let shared = state.shared.clone();
    let Some(leadership) = shared.leader() else {
        state.observations.clear();
        state.leading_term = None;
        state.last_retention = None;
        state.swept.clear();
        return;
    };
    if state.leading_term != Some(leadership.term) {
        // A new term: observations from before do not count, and nodes no longer alive
        // are swept again (an earlier leader may have stopped half-way).
        state.observations.clear();
        state.swept.clear();
        state.leading_term = Some(leadership.term);
    }
    let fence = leadership.fence.as_ref();
    let now_mono = shared.clock.monotonic();
    let now = shared.clock.now();
    if shared.shared_store {
        match shared.store.nodes().await {
            Ok(nodes) => {
                // A heartbeat seen may have been written after `now_mono`, while the read
                // was on its way: its timing starts now, never earlier (its lapse is judged
                // at `now_mono`).
                let seen = shared.clock.monotonic();
                // Records of nodes fully reaped are deleted: forget them.
                state.swept.retain(|name| nodes.iter().any(|n| &n.node == name));
                state.observations.retain(|name| nodes.iter().any(|n| &n.node == name));
                // A node no longer alive may still have runs `Running`: one stopped with
                // runs that ignored cancellation (abandoned), or one whose reaping failed
                // after it was declared lost. Nothing else would ever end them.
                for node in nodes.iter().filter(|n| !n.alive && n.node != shared.node_id) {
                    if !state.swept.contains(&node.node) && reap(&shared, &node.node, node.heartbeat_seq, fence).await {
                        state.swept.insert(node.node.clone());
                    }
                }
                for node in nodes.into_iter().filter(|n| n.alive && n.node != shared.node_id) {
                    state.swept.remove(&node.node);
                    let timeout = shared.options.node_timeout;
                    state.observations.observe(node.node.clone(), node.heartbeat_seq, timeout, seen);
                    if !state.observations.lapsed(&node.node, &node.heartbeat_seq, timeout, now_mono) {
                        continue;
                    }
                    tracing::warn!(node = %node.node, "node lost: no heartbeat for node_timeout");
                    if reap(&shared, &node.node, node.heartbeat_seq, fence).await {
                        // Declared and reaped: the sweep of nodes no longer alive skips it.
                        state.swept.insert(node.node.clone());
                    }
                    state.observations.forget(&node.node);
                }
            }
            Err(error) => tracing::warn!(%error, "could not read nodes"),
        }
    }
    let retention_due = state
        .last_retention
        .is_none_or(|last| now_mono.saturating_duration_since(last) >= shared.options.housekeeping_interval);
    if retention_due {
        match shared.store.apply_retention(now, shared.options.history_retention(), fence).await {
            Ok(deleted) if deleted > 0 => tracing::info!(deleted, "expired history"),
            Ok(_) => {}
            Err(error) => tracing::warn!(%error, "history retention failed"),
        }
        state.last_retention = Some(now_mono);
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
                    publish_lost(shared, *run).await;
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

async fn publish_lost<K: Kv>(shared: &NodeShared<K>, id: uuid::Uuid) {
    let Ok(Some(record)) = shared.store.run_record(id).await else { return };
    let Ok(run) = record.job_run() else { return };
    let facts = RunFacts {
        state: Some(record.state),
        started_at: sundial::time::from_micros(record.started_us),
        finished_at: record.finished_us.and_then(sundial::time::from_micros),
        error_code: record.error_code.clone(),
        error_message: record.error_message.clone(),
    };
    let now = shared.clock.now();
    shared.publish(|id| CloudEvent::for_run(Topic::RunLost, id, now, &run, facts, &shared.node_id)).await;
}
