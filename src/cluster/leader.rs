//! Leader election (SPEC §11): one holder per resource at a time, with fencing.
//!
//! [`KvLeaderElection`] keeps leases in the store. Expiry is judged by the observer, never
//! by a timestamp another node wrote (DESIGN.md decision 3): a contender takes over only
//! after seeing the lease record unchanged for one TTL on its *own* monotonic clock, and the
//! holder considers its lease lost one TTL after the start of its last successful renewal.
//! Every acquisition increases the lease's **term**; work that must not run under two
//! leaders checks its term inside its own transaction ([`Fence`]), because leadership alone
//! is never permission.
//!
//! [`LocalLeaderElection`] is the in-process implementation (single node, or a non-shared
//! store): the holder is a fresh random value per acquisition.

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use parking_lot::Mutex;

use crate::entropy::Entropy;
use crate::error::SchedulingError;
use crate::kv::{run, Kv, KvError, KvTransaction, RetryOptions};
use crate::lapse::LapseWatch;
use crate::name::ResourceName;
use crate::store::codec;
use crate::store::keys::Keyspace;
use crate::store::records::LeaseRecord;
use crate::store::Fence;
use crate::store::StoreError;
use crate::time::{add_duration, Clock, MonotonicInstant};
use futures_util::future::BoxFuture;

/// Grants leases on named resources.
pub trait LeaderElection: Send + Sync {
    /// The lease type.
    type Lease: LeaderLease;

    /// Grants the lease on `resource` when it is free, released, or expired.
    ///
    /// # Errors
    /// `SCHEDULING_CONFLICT_002` when another holder has it (leases are not re-entrant:
    /// also when this process holds it already); `SCHEDULING_UNAVAILABLE_002` when the
    /// store cannot be reached.
    fn try_acquire(
        &self,
        resource: &ResourceName,
        ttl: Duration,
    ) -> impl Future<Output = Result<Self::Lease, SchedulingError>> + Send;
}

/// A granted lease.
pub trait LeaderLease: Send + Sync {
    /// Who holds it (unique per acquisition).
    fn holder(&self) -> &str;
    /// The fencing token: strictly increases with every acquisition of the resource.
    fn term(&self) -> u64;
    /// When it expires, on the wall clock (an estimate for display; expiry is judged on the
    /// monotonic clock).
    fn expires_at(&self) -> DateTime<Utc>;
    /// Whether it is still held: not released and not expired by this holder's clock.
    fn is_held(&self) -> bool;
    /// Extends it by one TTL.
    ///
    /// # Errors
    /// `SCHEDULING_CONFLICT_002` when it expired or was taken over (it is then no longer
    /// held); `SCHEDULING_UNAVAILABLE_002` when the store cannot be reached (state unchanged).
    fn renew(&mut self) -> impl Future<Output = Result<(), SchedulingError>> + Send;
    /// Gives it up now. Calling it again does nothing.
    ///
    /// # Errors
    /// `SCHEDULING_UNAVAILABLE_002` when the store cannot be reached. The lease is then
    /// still held, unless the store may have recorded the release (a commit whose result
    /// was unknown): then it no longer counts as held here either, since another holder
    /// may already have taken it.
    fn release(&mut self) -> impl Future<Output = Result<(), SchedulingError>> + Send;

    /// The fence protected store transactions check for this lease, when the lease lives
    /// in the store; `None` for elections outside it (nothing in the store to check).
    fn fence(&self) -> Option<Fence> {
        None
    }
}

fn unavailable(e: KvError) -> SchedulingError {
    SchedulingError::LeaderStoreUnavailable { reason: e.to_string() }
}

fn from_store(e: StoreError) -> SchedulingError {
    match e {
        StoreError::Kv(e) => unavailable(e),
        other => other.into(),
    }
}

struct KvElectionInner<K: Kv> {
    kv: K,
    keys: Keyspace,
    clock: Arc<dyn Clock>,
    node: String,
    retry: RetryOptions,
    entropy: Mutex<Entropy>,
    /// Leases held by others, by resource.
    watch: Mutex<LapseWatch<String, LeaseRecord>>,
    spawner: Option<Spawner>,
}

/// Runs a future in the background (the host's runtime, e.g. `tokio::spawn`).
pub type Spawner = Arc<dyn Fn(BoxFuture<'static, ()>) + Send + Sync>;

/// Leader election over the store (shared by every node of a cluster).
pub struct KvLeaderElection<K: Kv> {
    inner: Arc<KvElectionInner<K>>,
}

impl<K: Kv> Clone for KvLeaderElection<K> {
    fn clone(&self) -> Self {
        Self { inner: self.inner.clone() }
    }
}

impl<K: Kv> KvLeaderElection<K> {
    /// Elections for `node` over `kv` under `keys`.
    pub fn new(kv: K, keys: Keyspace, clock: Arc<dyn Clock>, node: impl Into<String>, entropy: Entropy) -> Self {
        Self {
            inner: Arc::new(KvElectionInner {
                kv,
                keys,
                clock,
                node: node.into(),
                retry: RetryOptions { retry_limit: 5, ..RetryOptions::default() },
                entropy: Mutex::new(entropy),
                watch: Mutex::new(LapseWatch::new()),
                spawner: None,
            }),
        }
    }

    /// Lets dropped leases release themselves in the background through `spawner`.
    /// Without one, a lease dropped unreleased lapses after its TTL.
    pub fn with_spawner(self, spawner: Spawner) -> Self {
        let inner = Arc::try_unwrap(self.inner).unwrap_or_else(|shared| KvElectionInner {
            kv: shared.kv.clone(),
            keys: shared.keys.clone(),
            clock: shared.clock.clone(),
            node: shared.node.clone(),
            retry: shared.retry,
            entropy: Mutex::new(shared.entropy.lock().fork()),
            watch: Mutex::new(LapseWatch::new()),
            spawner: None,
        });
        Self { inner: Arc::new(KvElectionInner { spawner: Some(spawner), ..inner }) }
    }
}

enum Attempt {
    Granted(u64),
    HeldBy(LeaseRecord),
}

impl<K: Kv> LeaderElection for KvLeaderElection<K> {
    type Lease = KvLease<K>;

    async fn try_acquire(&self, resource: &ResourceName, ttl: Duration) -> Result<KvLease<K>, SchedulingError> {
        let inner = &self.inner;
        let token = inner.entropy.lock().alphanumeric(12);
        let holder = format!("{}:{token}", inner.node);
        let started = inner.clock.monotonic();
        let wall = inner.clock.now();
        let key = inner.keys.lease(resource.as_str());
        // What was seen before this attempt: the transaction may take over only a record
        // seen unchanged for a whole TTL.
        let watch = inner.watch.lock().clone();
        let (key, holder_ref, watch) = (&key, &holder, &watch);
        let ttl_us = ttl.as_micros().min(u128::from(u64::MAX)) as u64;
        let attempt = run(&inner.kv, inner.retry, |txn, maybe| async move {
            let current: Option<LeaseRecord> =
                txn.get(key, false).await?.map(|b| codec::decode(&b, "lease record")).transpose()?;
            let free = match &current {
                None => true,
                Some(lease) if lease.holder == *holder_ref && maybe.0 => {
                    return Ok::<_, StoreError>(Attempt::Granted(lease.term))
                }
                Some(lease) if lease.released => true,
                Some(lease) => watch.lapsed(resource.as_str(), lease, Duration::from_micros(lease.ttl_us), started),
            };
            if !free {
                return Ok(Attempt::HeldBy(current.unwrap_or_else(|| unreachable!("free when absent"))));
            }
            let term = current.as_ref().map_or(1, |l| l.term + 1);
            let record = LeaseRecord { holder: holder_ref.clone(), term, ttl_us, released: false, renewals: 0 };
            txn.set_owned(key, codec::encode(&record));
            Ok(Attempt::Granted(term))
        })
        .await
        .map_err(from_store)?;
        // The record seen may have been written after `started` (while this attempt's read
        // was on its way, or between retries): its timing starts now, never earlier.
        let seen = inner.clock.monotonic();
        let mut watch = inner.watch.lock();
        match attempt {
            Attempt::Granted(term) => {
                watch.forget(resource.as_str());
                Ok(KvLease {
                    election: self.clone(),
                    resource: resource.to_string(),
                    holder,
                    term,
                    ttl,
                    expires: started.saturating_add(ttl),
                    expires_wall: add_duration(wall, ttl),
                    released: false,
                })
            }
            Attempt::HeldBy(record) => {
                let ttl = Duration::from_micros(record.ttl_us);
                watch.observe(resource.to_string(), record, ttl, seen);
                Err(SchedulingError::LeaseHeld { resource: resource.to_string() })
            }
        }
    }
}

/// A lease held through [`KvLeaderElection`].
pub struct KvLease<K: Kv> {
    election: KvLeaderElection<K>,
    resource: String,
    holder: String,
    term: u64,
    ttl: Duration,
    expires: MonotonicInstant,
    expires_wall: DateTime<Utc>,
    released: bool,
}

impl<K: Kv> std::fmt::Debug for KvLease<K> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KvLease")
            .field("resource", &self.resource)
            .field("holder", &self.holder)
            .field("term", &self.term)
            .finish()
    }
}

impl<K: Kv> KvLease<K> {
    fn expired(&self) -> bool {
        self.election.inner.clock.monotonic() >= self.expires
    }
}

impl<K: Kv> LeaderLease for KvLease<K> {
    fn holder(&self) -> &str {
        &self.holder
    }

    fn term(&self) -> u64 {
        self.term
    }

    fn expires_at(&self) -> DateTime<Utc> {
        self.expires_wall
    }

    fn is_held(&self) -> bool {
        !self.released && !self.expired()
    }

    fn fence(&self) -> Option<Fence> {
        Some(Fence { resource: self.resource.clone(), term: self.term })
    }

    async fn renew(&mut self) -> Result<(), SchedulingError> {
        let lost = || SchedulingError::LeaseHeld { resource: self.resource.clone() };
        if self.released || self.expired() {
            self.released = true;
            return Err(lost());
        }
        let inner = &self.election.inner;
        let started = inner.clock.monotonic();
        let wall = inner.clock.now();
        let key = inner.keys.lease(&self.resource);
        let (key, holder, term) = (&key, &self.holder, self.term);
        let still_ours = run(&inner.kv, inner.retry, |txn, _| async move {
            let current: Option<LeaseRecord> =
                txn.get(key, false).await?.map(|b| codec::decode(&b, "lease record")).transpose()?;
            match current {
                Some(mut lease) if lease.holder == *holder && lease.term == term && !lease.released => {
                    // One more than stored, not than this holder last knew: after a renewal
                    // whose commit was reported unknown yet landed, rewriting the count it
                    // wrote would change nothing an observer sees, and the observer would
                    // take over a lease renewed since.
                    lease.renewals = lease.renewals.wrapping_add(1);
                    txn.set_owned(key, codec::encode(&lease));
                    Ok::<_, StoreError>(true)
                }
                _ => Ok(false),
            }
        })
        .await
        .map_err(from_store)?;
        if !still_ours {
            self.released = true;
            return Err(lost());
        }
        self.expires = started.saturating_add(self.ttl);
        self.expires_wall = add_duration(wall, self.ttl);
        Ok(())
    }

    async fn release(&mut self) -> Result<(), SchedulingError> {
        if self.released {
            return Ok(());
        }
        let released = release_in_store(&self.election.inner, &self.resource, &self.holder, self.term).await;
        if let Err(Unreleased { error, maybe_released }) = released {
            // Holding on after a release that may have landed could overlap the next holder.
            self.released = maybe_released;
            return Err(error);
        }
        self.released = true;
        Ok(())
    }
}

/// A release that failed, and whether the store may have recorded it all the same (an
/// attempt's commit result was unknown).
struct Unreleased {
    error: SchedulingError,
    maybe_released: bool,
}

/// Marks the lease released if it is still `holder`'s under `term`.
async fn release_in_store<K: Kv>(
    inner: &KvElectionInner<K>,
    resource: &str,
    holder: &str,
    term: u64,
) -> Result<(), Unreleased> {
    let key = inner.keys.lease(resource);
    let key = &key;
    let mut after_unknown = false;
    let released = run(&inner.kv, inner.retry, |txn, maybe| {
        after_unknown |= maybe.0;
        async move {
            let current: Option<LeaseRecord> =
                txn.get(key, false).await?.map(|b| codec::decode(&b, "lease record")).transpose()?;
            if let Some(mut lease) = current.filter(|l| l.holder == holder && l.term == term && !l.released) {
                lease.released = true;
                txn.set_owned(key, codec::encode(&lease));
            }
            Ok::<_, StoreError>(())
        }
    })
    .await;
    released.map_err(|error| {
        let unknown = matches!(&error, StoreError::Kv(e) if e.is_maybe_committed());
        Unreleased { maybe_released: after_unknown || unknown, error: from_store(error) }
    })
}

impl<K: Kv> Drop for KvLease<K> {
    fn drop(&mut self) {
        if self.released {
            return;
        }
        if let Some(spawner) = &self.election.inner.spawner {
            let inner = self.election.inner.clone();
            let (resource, holder, term) = (self.resource.clone(), self.holder.clone(), self.term);
            spawner(Box::pin(async move {
                // Best effort: if the store is unreachable the lease lapses after its TTL.
                let _ = release_in_store(&inner, &resource, &holder, term).await;
            }));
        }
    }
}

/// The in-process election: leases live in this process's memory.
#[derive(Clone)]
pub struct LocalLeaderElection {
    inner: Arc<LocalInner>,
}

struct LocalInner {
    clock: Arc<dyn Clock>,
    entropy: Mutex<Entropy>,
    leases: Mutex<BTreeMap<String, LocalEntry>>,
}

#[derive(Debug, Clone)]
struct LocalEntry {
    holder: String,
    term: u64,
    expires: MonotonicInstant,
    released: bool,
}

impl LocalLeaderElection {
    /// An empty election on `clock`, drawing holder tokens from `entropy`.
    pub fn new(clock: Arc<dyn Clock>, entropy: Entropy) -> Self {
        Self {
            inner: Arc::new(LocalInner { clock, entropy: Mutex::new(entropy), leases: Mutex::new(BTreeMap::new()) }),
        }
    }
}

impl LeaderElection for LocalLeaderElection {
    type Lease = LocalLease;

    async fn try_acquire(&self, resource: &ResourceName, ttl: Duration) -> Result<LocalLease, SchedulingError> {
        let now = self.inner.clock.monotonic();
        let holder = self.inner.entropy.lock().alphanumeric(16);
        let mut leases = self.inner.leases.lock();
        let term = match leases.get(resource.as_str()) {
            Some(entry) if !entry.released && now < entry.expires => {
                return Err(SchedulingError::LeaseHeld { resource: resource.to_string() })
            }
            Some(entry) => entry.term + 1,
            None => 1,
        };
        let expires = now.saturating_add(ttl);
        leases.insert(resource.to_string(), LocalEntry { holder: holder.clone(), term, expires, released: false });
        Ok(LocalLease {
            election: self.clone(),
            resource: resource.to_string(),
            holder,
            term,
            ttl,
            expires_wall: add_duration(self.inner.clock.now(), ttl),
            released: false,
        })
    }
}

/// A lease held through [`LocalLeaderElection`]. Dropping it releases it.
#[derive(Debug)]
pub struct LocalLease {
    election: LocalLeaderElection,
    resource: String,
    holder: String,
    term: u64,
    ttl: Duration,
    expires_wall: DateTime<Utc>,
    released: bool,
}

impl std::fmt::Debug for LocalLeaderElection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LocalLeaderElection").finish_non_exhaustive()
    }
}

impl LocalLease {
    fn entry_is_mine(&self, entry: &LocalEntry) -> bool {
        entry.holder == self.holder && entry.term == self.term && !entry.released
    }

    fn release_now(&mut self) {
        if self.released {
            return;
        }
        let mut leases = self.election.inner.leases.lock();
        if let Some(entry) = leases.get_mut(&self.resource) {
            if entry.holder == self.holder && entry.term == self.term {
                entry.released = true;
            }
        }
        self.released = true;
    }
}

impl LeaderLease for LocalLease {
    fn holder(&self) -> &str {
        &self.holder
    }

    fn term(&self) -> u64 {
        self.term
    }

    fn expires_at(&self) -> DateTime<Utc> {
        self.expires_wall
    }

    fn is_held(&self) -> bool {
        let now = self.election.inner.clock.monotonic();
        !self.released
            && self
                .election
                .inner
                .leases
                .lock()
                .get(&self.resource)
                .is_some_and(|e| self.entry_is_mine(e) && now < e.expires)
    }

    async fn renew(&mut self) -> Result<(), SchedulingError> {
        let inner = &self.election.inner;
        let now = inner.clock.monotonic();
        let mut leases = inner.leases.lock();
        match leases.get_mut(&self.resource) {
            Some(entry)
                if !self.released
                    && entry.holder == self.holder
                    && entry.term == self.term
                    && !entry.released
                    && now < entry.expires =>
            {
                entry.expires = now.saturating_add(self.ttl);
                self.expires_wall = add_duration(inner.clock.now(), self.ttl);
                Ok(())
            }
            _ => {
                self.released = true;
                Err(SchedulingError::LeaseHeld { resource: self.resource.clone() })
            }
        }
    }

    async fn release(&mut self) -> Result<(), SchedulingError> {
        self.release_now();
        Ok(())
    }
}

impl Drop for LocalLease {
    fn drop(&mut self) {
        self.release_now();
    }
}
