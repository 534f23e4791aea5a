//! Leader election as the node uses it: object-safe forms of `sundial::leader`'s
//! `LeaderElection` and `LeaderLease`, so a node can hold any election (in the store, in
//! process, a Kubernetes Lease) behind one type.
use std::time::Duration;

use futures_util::future::BoxFuture;
use sundial::error::SchedulingError;
use sundial::leader::{LeaderElection, LeaderLease};
use sundial::name::ResourceName;
use sundial::store::Fence;

/// An object-safe [`LeaderElection`], so a node holds any election behind one type.
pub trait DynLeaderElection: Send + Sync + 'static {
    /// [`LeaderElection::try_acquire`], boxed.
    fn try_acquire_boxed<'a>(
        &'a self,
        resource: &'a ResourceName,
        ttl: Duration,
    ) -> BoxFuture<'a, Result<Box<dyn DynLeaderLease>, SchedulingError>>;
}

/// An object-safe [`LeaderLease`].
pub trait DynLeaderLease: Send + Sync + 'static {
    /// [`LeaderLease::term`].
    fn term(&self) -> u64;
    /// [`LeaderLease::is_held`].
    fn is_held(&self) -> bool;
    /// [`LeaderLease::renew`], boxed.
    fn renew_boxed(&mut self) -> BoxFuture<'_, Result<(), SchedulingError>>;
    /// [`LeaderLease::release`], boxed.
    fn release_boxed(&mut self) -> BoxFuture<'_, Result<(), SchedulingError>>;
    /// [`LeaderLease::fence`].
    fn fence(&self) -> Option<Fence>;
}

impl<E> DynLeaderElection for E
where
    E: LeaderElection + 'static,
    E::Lease: 'static,
{
    fn try_acquire_boxed<'a>(
        &'a self,
        resource: &'a ResourceName,
        ttl: Duration,
    ) -> BoxFuture<'a, Result<Box<dyn DynLeaderLease>, SchedulingError>> {
        Box::pin(async move {
            self.try_acquire(resource, ttl).await.map(|lease| Box::new(lease) as Box<dyn DynLeaderLease>)
        })
    }
}

impl<L: LeaderLease + 'static> DynLeaderLease for L {
    fn term(&self) -> u64 {
        LeaderLease::term(self)
    }
    fn is_held(&self) -> bool {
        LeaderLease::is_held(self)
    }
    fn renew_boxed(&mut self) -> BoxFuture<'_, Result<(), SchedulingError>> {
        Box::pin(self.renew())
    }
    fn release_boxed(&mut self) -> BoxFuture<'_, Result<(), SchedulingError>> {
        Box::pin(self.release())
    }
    fn fence(&self) -> Option<Fence> {
        LeaderLease::fence(self)
    }
}
