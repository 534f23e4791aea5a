//! Fencing: work that must not run under two leaders checks, inside its own transaction,
//! that the leadership term it started under still holds (SPEC §11). The store checks a
//! [`Fence`] in the transactions that record runs, reap nodes and trim history; leader
//! election ([`crate::leader`]) hands them out.

use super::codec;
use super::keys::Keyspace;
use super::records::LeaseRecord;
use super::StoreError;
use crate::error::SchedulingError;
use crate::kv::KvTransaction;

/// A term to check inside a protected transaction.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fence {
    /// The lease resource.
    pub resource: String,
    /// The term the work was started under.
    pub term: u64,
}

impl Fence {
    /// Fails the transaction unless `resource` is still held under `term`. Reads the lease
    /// record serializably, so a takeover committing meanwhile makes this transaction
    /// conflict.
    ///
    /// # Errors
    /// `SCHEDULING_CONFLICT_002` when the term moved on or the lease was released.
    pub async fn check<T: KvTransaction>(&self, txn: &T, keys: &Keyspace) -> Result<(), StoreError> {
        let current: Option<LeaseRecord> = txn
            .get(&keys.lease(&self.resource), false)
            .await?
            .map(|b| codec::decode(&b, "lease record"))
            .transpose()?;
        match current {
            Some(lease) if lease.term == self.term && !lease.released => Ok(()),
            _ => Err(SchedulingError::LeaseHeld { resource: self.resource.clone() }.into()),
        }
    }
}
