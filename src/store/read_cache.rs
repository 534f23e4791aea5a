//! What one transaction has already read, by name: the fires an acquisition takes (the
//! runs a batch of completions ends) mostly share a few jobs and one node's cancel
//! requests, each read once.

use std::collections::{BTreeMap, BTreeSet};

use uuid::Uuid;

use super::keys::Key;
use super::records::JobView;
use super::{codec, StoreError, Tx};
use crate::kv::KvTransaction;

/// What one acquisition or completion transaction has already read or worked out, by
/// name: the fires it takes (the runs it completes) mostly share a few jobs.
/// Safe within one transaction, which never changes a job (the first read of each
/// registers its conflict).
#[derive(Default)]
pub(super) struct ReadCache {
    /// The jobs read.
    pub(super) jobs: JobCache,
    /// The runs each node has been asked to cancel (completions clear what they find).
    cancels: BTreeMap<String, BTreeSet<Uuid>>,
}

/// Job records read in one transaction, kept as stored and decoded as a [`JobView`] at
/// each use: a fire needs a few of its job's fields, and decoding a view copies no text.
#[derive(Default)]
pub(super) struct JobCache(BTreeMap<String, Option<Vec<u8>>>);

impl JobCache {
    /// The job `name`, read now unless read already.
    pub(super) async fn get<T: KvTransaction>(
        &mut self,
        tx: &Tx<'_, T>,
        name: &str,
    ) -> Result<Option<JobView<'_>>, StoreError> {
        if !self.0.contains_key(name) {
            let bytes = tx.txn.get(&tx.keys.job(name), false).await?;
            self.0.insert(name.to_owned(), bytes);
        }
        self.cached(name)
    }

    /// Reads the jobs of `names` not read yet, together.
    pub(super) async fn prefetch<'n, T: KvTransaction>(
        &mut self,
        tx: &Tx<'_, T>,
        names: impl Iterator<Item = &'n str>,
    ) -> Result<(), StoreError> {
        let missing: BTreeSet<&str> = names.filter(|name| !self.0.contains_key(*name)).collect();
        let keys: Vec<Key> = missing.iter().map(|name| tx.keys.job(name)).collect();
        let records = tx.txn.get_many(&keys, false).await?;
        for (name, bytes) in missing.into_iter().zip(records) {
            self.0.insert(name.to_owned(), bytes);
        }
        Ok(())
    }

    /// The job `name` if read already (`None` also when it does not exist).
    ///
    /// # Errors
    /// [`StoreError::Corrupt`] when its record does not decode.
    pub(super) fn cached(&self, name: &str) -> Result<Option<JobView<'_>>, StoreError> {
        self.0.get(name).and_then(Option::as_deref).map(|bytes| codec::decode(bytes, "job record")).transpose()
    }
}

impl ReadCache {
    /// Whether `node` has been asked to cancel `run`. Reads the node's cancel requests
    /// once per transaction, serializably: a request written concurrently conflicts with
    /// this transaction, whose retry then sees it. Completions clear only requests that
    /// exist: clearing every run's request key blindly wrote a key per run (for the store
    /// to forget again) to remove one that almost never exists.
    pub(super) async fn cancel_requested<T: KvTransaction>(
        &mut self,
        tx: &Tx<'_, T>,
        node: &str,
        run: Uuid,
    ) -> Result<bool, StoreError> {
        if !self.cancels.contains_key(node) {
            let ids = tx.cancel_requests(node, false).await?;
            self.cancels.insert(node.to_owned(), ids.into_iter().collect());
        }
        Ok(self.cancels.get(node).is_some_and(|ids| ids.contains(&run)))
    }
}
