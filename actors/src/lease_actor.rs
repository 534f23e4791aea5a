//! `LeaseActor`: holds the node's leader lease (SPEC §10 step 4, §11).
//!
//! Every third of the TTL while serving it renews the lease, or tries to acquire it. When
//! the node is not serving (starting, draining) it releases the lease at once, so another
//! serving node takes over at its next attempt instead of waiting for expiry. The current
//! leadership (its term, and a [`Fence`] for protected transactions when the lease lives in
//! the store) is published on the node.

use std::sync::Arc;

use ractor::{Actor, ActorProcessingErr, ActorRef, RpcReplyPort};
use sundial::kv::Kv;
use sundial::liveness;
use tokio::sync::watch;

use crate::context::{Leadership, Lifecycle, NodeShared};
use crate::lease::DynLeaderLease;

/// Messages to the lease actor.
#[derive(Debug)]
pub(crate) enum LeaseMsg {
    /// Renew, acquire or release, as the lifecycle says; then again after a third of the
    /// lease's TTL.
    Tick,
    /// Renew, acquire or release now (the node just began serving), keeping the schedule.
    TickNow,
    /// Release now (stop sequence); replies when done.
    Release(RpcReplyPort<()>),
}

/// What the lease actor starts with: the node's context and the leadership it alone moves.
pub(crate) struct LeaseArgs<K: Kv> {
    pub(crate) shared: Arc<NodeShared<K>>,
    pub(crate) leader: watch::Sender<Option<Leadership>>,
}

pub(crate) struct LeaseState<K: Kv> {
    shared: Arc<NodeShared<K>>,
    /// The node's leadership, published to everything that reads it.
    leader: watch::Sender<Option<Leadership>>,
    lease: Option<Box<dyn DynLeaderLease>>,
}

/// The lease actor.
pub(crate) struct LeaseActor<K: Kv>(std::marker::PhantomData<K>);

impl<K: Kv> LeaseActor<K> {
    pub(crate) fn new() -> Self {
        Self(std::marker::PhantomData)
    }
}

impl<K: Kv> Actor for LeaseActor<K> {
    type Msg = LeaseMsg;
    type State = LeaseState<K>;
    type Arguments = LeaseArgs<K>;

    async fn pre_start(
        &self,
        myself: ActorRef<LeaseMsg>,
        LeaseArgs { shared, leader }: LeaseArgs<K>,
    ) -> Result<Self::State, ActorProcessingErr> {
        let ttl = shared.options.lease_ttl;
        if liveness::lease_ttl_too_short(ttl) {
            // Valid (the spec asks only > 0), but a lease renewed at most every 10 ms can
            // lapse between renewals, and leadership then changes hands again and again.
            tracing::warn!(
                lease_ttl_ms = ttl.as_secs_f64() * 1000.0,
                "lease_ttl is under 30 ms, three renewals 10 ms apart: the leader lease can lapse between renewals"
            );
        }
        let _ = myself.send_message(LeaseMsg::Tick);
        Ok(LeaseState { shared, leader, lease: None })
    }

    async fn handle(
        &self,
        myself: ActorRef<LeaseMsg>,
        message: LeaseMsg,
        state: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        match message {
            LeaseMsg::Tick => {
                tick(state).await;
                myself.send_after(liveness::renewal_period(state.shared.options.lease_ttl), || LeaseMsg::Tick);
            }
            LeaseMsg::TickNow => tick(state).await,
            LeaseMsg::Release(reply) => {
                release(state).await;
                let _ = reply.send(());
            }
        }
        Ok(())
    }

    async fn post_stop(&self, _myself: ActorRef<LeaseMsg>, state: &mut Self::State) -> Result<(), ActorProcessingErr> {
        release(state).await;
        Ok(())
    }
}

async fn tick<K: Kv>(state: &mut LeaseState<K>) {
    let shared = state.shared.clone();
    if shared.lifecycle() != Lifecycle::Serving {
        release(state).await;
        return;
    }
    if let Some(lease) = state.lease.as_mut() {
        match lease.renew_boxed().await {
            Ok(()) => return,
            Err(error) if error.code() == "SCHEDULING_UNAVAILABLE_002" => {
                // Still ours as far as we know; if we cannot renew in time it expires.
                tracing::warn!(%error, "could not renew the leader lease");
                if !liveness::keeps_lease_after_failed_renewal(true, lease.is_held()) {
                    state.lease = None;
                    state.leader.send_replace(None);
                }
                return;
            }
            Err(_) => {
                tracing::info!(node = %shared.node_id, "lost the leader lease");
                state.lease = None;
                state.leader.send_replace(None);
            }
        }
    }
    let resource = &shared.options.lease_resource;
    match shared.election.try_acquire_boxed(resource, shared.options.lease_ttl).await {
        Ok(lease) => {
            tracing::info!(node = %shared.node_id, term = lease.term(), "became leader");
            state.leader.send_replace(Some(Leadership { term: lease.term(), fence: lease.fence() }));
            state.lease = Some(lease);
            if !shared.shared_store {
                // With a store of its own, only the leader takes scheduled fires: those due
                // meanwhile wait, and the poller (not woken by them) takes them now.
                shared.wake_poller();
            }
        }
        Err(error) if error.code() == "SCHEDULING_CONFLICT_002" => {}
        Err(error) => tracing::warn!(%error, "could not try the leader lease"),
    }
}

async fn release<K: Kv>(state: &mut LeaseState<K>) {
    if let Some(mut lease) = state.lease.take() {
        state.leader.send_replace(None);
        if let Err(error) = lease.release_boxed().await {
            tracing::warn!(%error, "could not release the leader lease; it will expire");
        }
    }
}
