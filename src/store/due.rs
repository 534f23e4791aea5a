//! The due index seen from one node: which shards are its home (rendezvous hashing over
//! the live nodes), what is due next there ([`DueOutlook`], for the poller's sleep), and
//! the wake key that tells a node when another writes new due work in its home shards.

use std::collections::BTreeSet;
use std::time::Duration;

use chrono::{DateTime, TimeDelta, Utc};

use super::jobs::instant;
use super::keys::{fnv, shard_of, DUE_SHARDS};
use super::records::{NodeRecord, TriggerRecord};
use super::{codec, KvJobStore, StoreError, Tx};
use crate::job::TriggerState;
use crate::kv::{run, BoxFuture, Kv, KvTransaction, RangeRequest};

/// What is due next, for one node: see [`KvJobStore::due_outlook`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct DueOutlook {
    /// The earliest due time of a waiting fire in the node's home shards (the fires it
    /// takes on time).
    pub first: Option<DateTime<Utc>>,
    /// How many fires of its home shards are due within the asked window of `first` (at
    /// most the asked limit).
    pub count: usize,
    /// The earliest due time of a waiting fire in the other shards (which it takes only
    /// once they are `steal_grace` late).
    pub first_elsewhere: Option<DateTime<Utc>>,
}

/// [`DueOutlook`] in store units.
pub(super) struct RawOutlook {
    first: Option<i64>,
    count: usize,
    first_elsewhere: Option<i64>,
}

impl RawOutlook {
    pub(super) fn outlook(self) -> Result<DueOutlook, StoreError> {
        Ok(DueOutlook {
            first: self.first.map(instant).transpose()?,
            count: self.count,
            first_elsewhere: self.first_elsewhere.map(instant).transpose()?,
        })
    }
}

/// The shards whose home is `nodes[0]`, for that node list.
#[derive(Debug)]
pub(super) struct HomeShards {
    nodes: Vec<String>,
    home: Vec<bool>,
}

/// The home node of a shard among `nodes`: the highest hash of (shard, node).
pub(super) fn home_of(shard: u16, nodes: &[String]) -> Option<&str> {
    nodes.iter().max_by_key(|node| fnv(&[&shard.to_le_bytes(), node.as_bytes()])).map(String::as_str)
}

impl<K: Kv> KvJobStore<K> {
    /// `firsts` (each shard's earliest due time, `None` when empty) with the shards in
    /// `shards` read again as `tx` sees them (snapshot, own writes included).
    pub(super) async fn first_due(
        &self,
        tx: &Tx<'_, K::Transaction>,
        mut firsts: Vec<Option<i64>>,
        shards: &BTreeSet<u16>,
    ) -> Result<Vec<Option<i64>>, StoreError> {
        let requests: Vec<RangeRequest> = shards
            .iter()
            .map(|&shard| {
                let (begin, end) = self.keys.due_shard(shard);
                RangeRequest::new(begin, end).limit(1)
            })
            .collect();
        let reads = tx.txn.get_ranges(&requests, true).await?;
        for (&shard, first) in shards.iter().zip(reads) {
            firsts[usize::from(shard)] = match first.pairs.first() {
                Some((key, _)) => Some(self.keys.due_time(key)?),
                None => None,
            };
        }
        Ok(firsts)
    }

    /// The outlook from `firsts` (each shard's earliest due time) for the node whose
    /// home shards are `homes`: its earliest home fire and how many home fires are due
    /// within `window` of it (at most `limit`, snapshot), and the earliest other fire.
    pub(super) async fn count_due(
        &self,
        tx: &Tx<'_, K::Transaction>,
        firsts: &[Option<i64>],
        homes: &[bool],
        window: Duration,
        limit: usize,
    ) -> Result<RawOutlook, StoreError> {
        let earliest =
            |home: bool| firsts.iter().zip(homes).filter(|(_, h)| **h == home).filter_map(|(first, _)| *first).min();
        let (first, first_elsewhere) = (earliest(true), earliest(false));
        let Some(first_home) = first else { return Ok(RawOutlook { first, count: 0, first_elsewhere }) };
        let window = TimeDelta::from_std(window).map_or(i64::MAX, |w| w.num_microseconds().unwrap_or(i64::MAX));
        let until = first_home.saturating_add(window);
        let mut count = 0;
        for ((shard, first), home) in (0..DUE_SHARDS).zip(firsts).zip(homes) {
            if !home || first.is_none_or(|first| first > until) || count >= limit {
                continue;
            }
            let (begin, end) = self.keys.due_until(shard, until);
            count += tx.txn.get_range(&RangeRequest::new(begin, end).limit(limit - count), true).await?.pairs.len();
        }
        Ok(RawOutlook { first, count, first_elsewhere })
    }

    /// The outlook for `node` as `tx` sees the due index (snapshot reads).
    pub(super) async fn outlook_in(
        &self,
        tx: &Tx<'_, K::Transaction>,
        node: &str,
        window: Duration,
        limit: usize,
    ) -> Result<RawOutlook, StoreError> {
        let homes = self.homes_of(tx, node).await?;
        let firsts = self.first_due(tx, vec![None; usize::from(DUE_SHARDS)], &(0..DUE_SHARDS).collect()).await?;
        self.count_due(tx, &firsts, &homes, window, limit).await
    }

    /// What is due next for `node`: the earliest fire of its home shards (the shards it
    /// takes on time, by rendezvous hashing over the live nodes) and how many of them are
    /// due within `window` of it (counted up to `limit`), and the earliest fire of the
    /// other shards (which it takes only once they are late). A poller sleeps until the
    /// first, starting earlier the more fires fall due together (see
    /// [`crate::rules::AcquisitionLead`]), and checks the others now and then: it is not
    /// woken by every fire of the cluster.
    ///
    /// Snapshot reads: the node list, one read per shard for the earliest entry, then a
    /// range read of the home shards that have entries within the window.
    ///
    /// # Errors
    /// Store errors.
    pub async fn due_outlook(&self, node: &str, window: Duration, limit: usize) -> Result<DueOutlook, StoreError> {
        let outlook = run(&self.kv, self.options.retry, |txn, _| async move {
            let tx = self.tx(txn);
            self.outlook_in(&tx, node, window, limit).await
        })
        .await?;
        outlook.outlook()
    }

    /// Which shards are home to `node` among the live nodes that are not draining (snapshot).
    pub(super) async fn homes_of(&self, tx: &Tx<'_, K::Transaction>, node: &str) -> Result<Vec<bool>, StoreError> {
        let (begin, end) = self.keys.nodes();
        let node_records = tx.txn.get_range(&RangeRequest::new(begin, end), true).await?;
        let mut nodes = vec![node.to_owned()];
        for (_, value) in &node_records.pairs {
            let record: NodeRecord = codec::decode(value, "node record")?;
            if record.alive && !record.draining && record.node != node {
                nodes.push(record.node);
            }
        }
        Ok(self.home_shards(nodes))
    }

    /// Writes `new` (replacing `old`) as [`Tx::put_trigger`] does and, when that gives it a
    /// due entry it did not have, tells the node whose home shard holds the entry (by the
    /// node list this store's last acquisition saw) through its wake key, so it need not
    /// wait for its next poll, unless that is this store's own node. A store that never
    /// acquired knows no nodes and tells none: polling still finds the fire.
    pub(crate) fn put_trigger_and_wake(
        &self,
        tx: &Tx<'_, K::Transaction>,
        old: Option<&TriggerRecord>,
        new: &TriggerRecord,
        local: bool,
    ) {
        tx.put_trigger(old, new, local);
        let due = |t: &TriggerRecord| (t.state == TriggerState::Waiting).then_some(t.next_fire_us).flatten();
        if local || due(new).is_none() || old.and_then(due) == due(new) {
            return;
        }
        let cache = self.homes.lock();
        let Some(cached) = cache.as_ref() else { return };
        let home = home_of(shard_of(&new.job, &new.name), &cached.nodes);
        // This store's own node (the first of the list) learns of its own writes without
        // its watch: the handle and the run's end wake its poller.
        if let Some(node) = home.filter(|home| Some(*home) != cached.nodes.first().map(String::as_str)) {
            tx.txn.atomic_op(&self.keys.wake(node), &1u64.to_le_bytes(), crate::kv::AtomicOp::Add);
        }
    }

    /// Watches `node`'s wake key: the future resolves when another transaction gives one
    /// of its home shards new due work (see `put_trigger_and_wake`), or fails when
    /// watching does (watch again after the next poll).
    ///
    /// # Errors
    /// Store errors arming the watch.
    pub async fn watch_wake(&self, node: &str) -> Result<BoxFuture<'static, Result<(), StoreError>>, StoreError> {
        let txn = self.kv.create_transaction()?;
        let watch = txn.watch(&self.keys.wake(node));
        txn.commit().await?;
        Ok(Box::pin(async move { watch.await.map_err(StoreError::from) }))
    }

    /// Which shards are home to `nodes[0]` among `nodes` (cached for the last list).
    pub(super) fn home_shards(&self, nodes: Vec<String>) -> Vec<bool> {
        let mut cache = self.homes.lock();
        if let Some(cached) = cache.as_ref().filter(|c| c.nodes == nodes) {
            return cached.home.clone();
        }
        let me = nodes.first().map(String::as_str);
        let home: Vec<bool> = (0..DUE_SHARDS).map(|shard| home_of(shard, &nodes) == me).collect();
        *cache = Some(HomeShards { nodes, home: home.clone() });
        home
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_shard_has_one_home() {
        let nodes = vec!["a".to_owned(), "b".to_owned(), "c".to_owned()];
        let mut per_node = std::collections::BTreeMap::new();
        for shard in 0..DUE_SHARDS {
            *per_node.entry(home_of(shard, &nodes).unwrap().to_owned()).or_insert(0) += 1;
        }
        assert_eq!(per_node.len(), 3);
        assert!(per_node.values().all(|n| *n > 10), "{per_node:?}");
    }
}
