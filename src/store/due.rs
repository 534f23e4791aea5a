//! The due index seen from one node: which shards are its home (rendezvous hashing over
//! the live nodes), what is due next there ([`DueOutlook`], for the poller's sleep), and
//! the wake key that tells a node when another writes new due work in its home shards.

use std::collections::BTreeSet;
use std::time::Duration;

use chrono::{DateTime, TimeDelta, Utc};
use rustc_hash::FxBuildHasher;

use super::acquire::mix64;
use super::jobs::instant;
use super::keys::{fnv, shard_of, DUE_SHARDS};
use super::records::{NodeView, TriggerRecord, TriggerWas};
use super::{codec, KvJobStore, StoreError, Tx};
use crate::job::TriggerState;
use crate::kv::{run, Kv, KvBytes, KvTransaction, RangeRequest};
use crate::name::JobName;
use futures_util::future::BoxFuture;

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

/// The shards whose home is `nodes[0]`, and its turn at stealing, for that node list.
#[derive(Debug)]
pub(super) struct HomeShards {
    nodes: Vec<String>,
    /// Each shard's home, an index into `nodes` (see [`shard_homes`]).
    homes: Vec<usize>,
    home: Vec<bool>,
    rota: StealRota,
}

impl HomeShards {
    fn of(nodes: Vec<String>) -> Self {
        let homes = shard_homes(&nodes);
        let home = (0..usize::from(DUE_SHARDS)).map(|shard| homes.get(shard) == Some(&0)).collect();
        let rota = StealRota::of(&nodes);
        HomeShards { nodes, homes, home, rota }
    }
}

/// The shards as one node sees them, by the node list one transaction read.
#[derive(Debug)]
pub(super) struct NodeShards {
    /// Which shards are the node's home.
    pub(super) home: Vec<bool>,
    /// Its turn at stealing.
    pub(super) rota: StealRota,
    /// Which shards another node vouches for: their home node's recent heartbeat said it
    /// had caught up with them (empty when none does, or when not asked).
    pub(super) vouched: Vec<bool>,
}

/// When a node takes another's heartbeat at its word that it has caught up with its home
/// shards ([`NodeRecord::caught_up`](super::records::NodeRecord::caught_up)): while the
/// heartbeat is at most `within_us` from `now_us` on the reader's clock, either way. A
/// node that died (or stalled) is believed that long after its last heartbeat, plus by
/// how much its clock was ahead; one whose clock is further off either way is never
/// believed, and its shards are read as everyone's were before heartbeats said anything.
#[derive(Debug, Clone, Copy)]
pub(super) struct Vouching {
    /// The reader's now (µs).
    pub(super) now_us: i64,
    /// How far from it a heartbeat may be (µs).
    pub(super) within_us: i64,
}

impl Vouching {
    fn trusts(&self, record: &NodeView<'_>) -> bool {
        record.caught_up && record.heartbeat_us.abs_diff(self.now_us) <= self.within_us.unsigned_abs()
    }
}

/// A node's turn at reading the other nodes' shards for late fires (to steal them): the
/// shard-owning nodes take turns, so a cluster reads them about once per turn, not once
/// per node. Turns go in an order hashed from the node ids, so nodes named alike (one
/// zone's) do not all come one after another.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StealRota {
    /// This node's place in the order, from 0.
    pub place: usize,
    /// How many nodes take turns (this one included).
    pub nodes: usize,
}

impl StealRota {
    /// The rota of `nodes[0]` among `nodes`.
    fn of(nodes: &[String]) -> StealRota {
        let mut order: Vec<(u64, &str)> = nodes.iter().map(|node| (fnv(&[node.as_bytes()]), node.as_str())).collect();
        order.sort_unstable();
        let me = nodes.first().map(String::as_str);
        let place = order.iter().position(|(_, node)| Some(*node) == me).unwrap_or(0);
        StealRota { place, nodes: nodes.len().max(1) }
    }

    /// Whether turn number `turn` (counted by all nodes alike, e.g. from a shared clock)
    /// is this node's. A rota of no nodes counts as one of this node alone.
    pub fn has_turn(&self, turn: u64) -> bool {
        turn % self.nodes.max(1) as u64 == self.place as u64
    }
}

/// Whether a node reads the other nodes' shards for late fires at `now` (its wall
/// clock): `since` is how long ago it last did (`None`: never), `every` the most often it
/// may, and `rota` its turn (`None`: not known yet: it reads every `every`).
///
/// The wall clock is cut into turns half of `every` long, numbered from the epoch, which
/// the nodes take in rota order: each reads in its turn (at most once per `every`). So
/// some node of the cluster looks at every turn, and a late fire waits at most two turns
/// (`every`) for a look (two when the first went to the dead node whose fires these are);
/// each node of a cluster of two reads every `every`, and each of a larger one once per
/// round of turns, so the cluster reads twice per `every` however many nodes it has. A
/// node also reads once a round and a whole `every` have passed since it last did: clock
/// skew or a poll interval longer than a turn made it miss its turn.
pub fn steal_read_due(since: Option<Duration>, now: DateTime<Utc>, every: Duration, rota: Option<StealRota>) -> bool {
    let Some(since) = since else { return true };
    if since < every {
        return false;
    }
    let Some(rota) = rota else { return true };
    let round = (every / 2).saturating_mul(u32::try_from(rota.nodes).unwrap_or(u32::MAX));
    rota.has_turn(steal_turn(now, every)) || since >= round.saturating_add(every)
}

/// The number of the steal turn (half of `every` long, counted from the epoch) `now` is in.
fn steal_turn(now: DateTime<Utc>, every: Duration) -> u64 {
    let turn_us = i64::try_from((every / 2).as_micros()).unwrap_or(i64::MAX).max(1);
    u64::try_from(now.timestamp_micros().div_euclid(turn_us)).unwrap_or(0)
}

/// One steal turn in this many reads the shards of the nodes that vouch for them too.
const DOUBTING_TURNS: u64 = 4;

/// Whether a steal read at `now` (`every` as for [`steal_read_due`], whose turns this
/// counts) may leave unread the shards whose node vouches for them, its recent heartbeat
/// saying it took every fire due there (see
/// [`AcquireRequest::trust_caught_up`](super::AcquireRequest::trust_caught_up)): at every
/// turn but one in four. The reads at those turns find fires a node does not know are in
/// its shards, because whoever wrote them woke another node (by a stale node list) or
/// none (a store that never acquired): such a fire waits up to four turns (10 s with a
/// `STEAL_CHECK` of 5 s) once late enough to steal, where the fires of dead and lagging
/// nodes, which vouch for nothing, wait one or two as before.
pub fn steal_read_trusts(now: DateTime<Utc>, every: Duration) -> bool {
    !steal_turn(now, every).is_multiple_of(DOUBTING_TURNS)
}

/// Each shard's home among `nodes` (an index into `nodes`; empty without nodes): (shard,
/// node) pairs are taken highest rank first, each while its shard has no home and its
/// node is under its share (64 / nodes, the remainder one more each). A pair's rank is a
/// hash of the pair, so every node computes the same homes from the same set of nodes,
/// listed in any order.
///
/// Plain rendezvous hashing (each shard to the node ranking it highest) spreads 64 shards
/// unevenly (five nodes: 16, 16, 14, 12 and 6), and the node with the most does the most
/// work. The shares even that out, and a node joining still moves few homes besides those
/// it takes (five nodes to six: 14 move, 11 of them to the new node); a few more cost
/// little anyway: homes are a preference (any node takes a fire late enough) and a change
/// of owners wakes every node. FNV alone is no rank: names that differ in their last bytes
/// (`node-0`..`node-4`) differ little in its high bits, and ranked by it one node won half
/// the shards; each rank goes through a finalizer whose every bit depends on every input
/// bit.
pub(super) fn shard_homes(nodes: &[String]) -> Vec<usize> {
    if nodes.is_empty() {
        return Vec::new();
    }
    // Each node takes `share` shards, and the first `extra` to want one more, one more.
    let (share, extra) = (usize::from(DUE_SHARDS) / nodes.len(), usize::from(DUE_SHARDS) % nodes.len());
    let mut ranked: Vec<(u64, &str, u16, usize)> = (0..DUE_SHARDS)
        .flat_map(|shard| {
            nodes.iter().enumerate().map(move |(index, node)| {
                (mix64(fnv(&[&shard.to_le_bytes(), node.as_bytes()])), node.as_str(), shard, index)
            })
        })
        .collect();
    // Highest rank first; ties (between equal names only) broken the same way everywhere.
    ranked.sort_unstable_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(b.1)).then(a.2.cmp(&b.2)));
    let mut homes = vec![usize::MAX; usize::from(DUE_SHARDS)];
    let (mut taken, mut above) = (vec![0; nodes.len()], 0);
    for (_, _, shard, index) in ranked {
        let home = &mut homes[usize::from(shard)];
        if *home != usize::MAX || taken[index] > share || (taken[index] == share && above == extra) {
            continue;
        }
        if taken[index] == share {
            above += 1;
        }
        *home = index;
        taken[index] += 1;
    }
    homes
}

/// The second page of due entries a node reads, in a shard whose earliest entry it leaves
/// waiting, looking for the first one it would take (see [`DueFilter`]).
const SKIP_PAGE: usize = 64;

/// Which due entries a node would take now. Its outlook and acquisition skip the others,
/// so it neither wakes for fires it leaves waiting nor lets them hide fires behind them.
#[derive(Debug, Clone, Copy)]
pub struct DueFilter<'a> {
    /// Scheduled triggers' fires too, not only one-shots (see
    /// [`AcquireRequest::scheduled`](super::AcquireRequest::scheduled)).
    pub scheduled: bool,
    /// Jobs whose fires it leaves waiting (see
    /// [`AcquireRequest::busy_jobs`](super::AcquireRequest::busy_jobs)).
    pub busy_jobs: &'a JobSet,
    /// A version of `busy_jobs` from whoever keeps it, changed whenever the set changes
    /// (see [`AcquireRequest::busy_version`](super::AcquireRequest::busy_version)); `None`
    /// compares the sets themselves.
    pub busy_version: Option<u64>,
}

static NO_JOBS: JobSet = JobSet::new();

/// A set of job names, asked by name once per due entry an acquisition reads: hashed, so
/// that asking costs one hash and one comparison however many jobs it holds (a node
/// running thousands of non-concurrent jobs holds thousands).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct JobSet(hashbrown::HashSet<JobName, FxBuildHasher>);

impl JobSet {
    /// No jobs.
    pub const fn new() -> Self {
        Self(hashbrown::HashSet::with_hasher(FxBuildHasher))
    }

    /// Whether `job` is in the set.
    pub fn contains(&self, job: &str) -> bool {
        self.0.contains(job)
    }

    /// Adds `job`; whether it was not there.
    pub fn insert(&mut self, job: JobName) -> bool {
        self.0.insert(job)
    }

    /// Removes `job`; whether it was there.
    pub fn remove(&mut self, job: &str) -> bool {
        self.0.remove(job)
    }

    /// Whether the set holds no job.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// How many jobs the set holds.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// Whether every job of this set is in `other`.
    pub fn is_subset(&self, other: &JobSet) -> bool {
        self.0.is_subset(&other.0)
    }

    /// The jobs, in no particular order.
    pub fn iter(&self) -> impl Iterator<Item = &JobName> {
        self.0.iter()
    }
}

impl FromIterator<JobName> for JobSet {
    fn from_iter<I: IntoIterator<Item = JobName>>(jobs: I) -> Self {
        Self(jobs.into_iter().collect())
    }
}

impl Extend<JobName> for JobSet {
    fn extend<I: IntoIterator<Item = JobName>>(&mut self, jobs: I) {
        self.0.extend(jobs);
    }
}

impl DueFilter<'_> {
    /// Every due entry.
    pub const EVERY: DueFilter<'static> = DueFilter { scheduled: true, busy_jobs: &NO_JOBS, busy_version: None };

    /// Whether the entry (`key`, `value`) is one the node leaves waiting.
    pub(super) fn skips(&self, keys: &super::keys::Keyspace, key: &[u8], value: &[u8]) -> Result<bool, StoreError> {
        if !self.scheduled && !super::due_value_parts(value).1 {
            return Ok(true);
        }
        if self.busy_jobs.is_empty() {
            return Ok(false);
        }
        let (_, job, _) = keys.due_parts(key)?;
        Ok(self.busy_jobs.contains(job.as_ref()))
    }
}

/// A node's home shards' first due entries (each the first its [`DueFilter`] takes), as
/// an acquisition's transaction saw them after its own writes: see
/// [`Acquisition::heads`](super::Acquisition::heads) and
/// [`AcquireRequest::known_heads`](super::AcquireRequest::known_heads).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DueHeads {
    /// The home shards they are of.
    homes: Vec<bool>,
    /// Per shard, its first entry (`None` for shards that are not home).
    heads: Vec<Option<ShardHead>>,
    /// The filter they were read with.
    scheduled: bool,
    busy: BusyJobs,
}

/// The busy jobs of the filter heads were read with: by version when the caller keeps
/// one (no copy of a set that may hold thousands of jobs), else the set.
#[derive(Debug, Clone, PartialEq, Eq)]
enum BusyJobs {
    Version(u64),
    Jobs(JobSet),
}

impl BusyJobs {
    fn of(filter: &DueFilter<'_>) -> BusyJobs {
        match filter.busy_version {
            Some(version) => BusyJobs::Version(version),
            None => BusyJobs::Jobs(filter.busy_jobs.clone()),
        }
    }

    fn is(&self, filter: &DueFilter<'_>) -> bool {
        match (self, filter.busy_version) {
            (BusyJobs::Version(version), Some(other)) => *version == other,
            (BusyJobs::Jobs(jobs), None) => jobs == filter.busy_jobs,
            _ => false,
        }
    }
}

impl DueHeads {
    /// Heads of no shard, for the engine's tests.
    #[cfg(test)]
    pub(crate) fn none() -> DueHeads {
        DueHeads { homes: Vec::new(), heads: Vec::new(), scheduled: true, busy: BusyJobs::Jobs(JobSet::new()) }
    }

    /// The home shards' heads among `heads` (every shard's), read with `filter`.
    pub(super) fn of_homes(homes: Vec<bool>, mut heads: Vec<Option<ShardHead>>, filter: DueFilter<'_>) -> DueHeads {
        for (head, home) in heads.iter_mut().zip(&homes) {
            if !*home {
                *head = None;
            }
        }
        DueHeads { homes, heads, scheduled: filter.scheduled, busy: BusyJobs::of(&filter) }
    }

    /// The heads, if they are of `homes` and were read with `filter`.
    pub(super) fn heads_for(&self, homes: &[bool], filter: DueFilter<'_>) -> Option<&[Option<ShardHead>]> {
        let same = self.homes == homes && self.scheduled == filter.scheduled && self.busy.is(&filter);
        same.then_some(self.heads.as_slice())
    }
}

/// A shard's first due entry that a node would take (by its [`DueFilter`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct ShardHead {
    /// Its due time (µs).
    pub(super) due: i64,
    /// Its key: reading the shard from here skips the entries before it.
    pub(super) key: KvBytes,
}

impl<K: Kv> KvJobStore<K> {
    /// `heads` (each shard's [`ShardHead`], `None` when it has none) with the shards in
    /// `shards` read again as `tx` sees them (snapshot, own writes included), by `filter`.
    pub(super) async fn first_due(
        &self,
        tx: &Tx<'_, K::Transaction>,
        mut heads: Vec<Option<ShardHead>>,
        shards: &BTreeSet<u16>,
        filter: DueFilter<'_>,
    ) -> Result<Vec<Option<ShardHead>>, StoreError> {
        // Each shard's first entry, and in the rare shard whose first is one this node
        // leaves waiting, on past such entries, in pages growing from SKIP_PAGE fourfold,
        // until a fire to take or the shard's end.
        let mut pending: Vec<(u16, Vec<u8>, Vec<u8>)> = shards
            .iter()
            .map(|&shard| {
                let (begin, end) = self.keys.due_shard(shard);
                (shard, begin, end)
            })
            .collect();
        let mut page = 1;
        while !pending.is_empty() {
            let (reading, requests): (Vec<u16>, Vec<RangeRequest>) =
                pending.into_iter().map(|(shard, from, end)| (shard, RangeRequest::new(from, end).limit(page))).unzip();
            let reads = tx.txn.get_ranges(&requests, true).await?;
            let mut next = Vec::new();
            for (shard, read) in reading.into_iter().zip(reads) {
                heads[usize::from(shard)] = None;
                let mut last = None;
                for (key, value) in read.pairs {
                    if !filter.skips(&self.keys, &key, &value)? {
                        heads[usize::from(shard)] = Some(ShardHead { due: self.keys.due_time(&key)?, key });
                        last = None;
                        break;
                    }
                    last = Some(key);
                }
                if let Some(after) = last.filter(|_| read.more) {
                    // The next page starts just after the last entry read.
                    let mut after = after.into_vec();
                    after.push(0);
                    next.push((shard, after, self.keys.due_shard(shard).1));
                }
            }
            pending = next;
            page = if page == 1 { SKIP_PAGE } else { page.saturating_mul(4) };
        }
        Ok(heads)
    }

    /// The outlook from `heads` (each shard's [`ShardHead`]) for the node whose home
    /// shards are `homes`: its earliest home fire and how many home fires are due within
    /// `window` of it (at most `limit`, snapshot), and the earliest other fire.
    pub(super) async fn count_due(
        &self,
        tx: &Tx<'_, K::Transaction>,
        heads: &[Option<ShardHead>],
        homes: &[bool],
        window: Duration,
        limit: usize,
    ) -> Result<RawOutlook, StoreError> {
        let earliest = |home: bool| {
            let heads = heads.iter().zip(homes).filter(|(_, h)| **h == home).filter_map(|(head, _)| head.as_ref());
            heads.map(|head| head.due).min()
        };
        let (first, first_elsewhere) = (earliest(true), earliest(false));
        let Some(first_home) = first else { return Ok(RawOutlook { first, count: 0, first_elsewhere }) };
        let window = TimeDelta::from_std(window).map_or(i64::MAX, |w| w.num_microseconds().unwrap_or(i64::MAX));
        let until = first_home.saturating_add(window);
        // Counted from each head (the entries skipped before it are not this node's to
        // take), every shard's share of the limit counted together (one round trip, no
        // pair copied out of an in-memory store), then again, one by one, with what is
        // left of the limit, in the shards that had more, while under it.
        let counted: Vec<(u16, &ShardHead)> = (0..DUE_SHARDS)
            .zip(heads)
            .zip(homes)
            .filter_map(|((shard, head), home)| {
                head.as_ref().filter(|head| *home && head.due <= until).map(|h| (shard, h))
            })
            .collect();
        let share = limit.div_ceil(counted.len().max(1)).max(1);
        let ranges: Vec<RangeRequest> = counted
            .iter()
            .map(|&(shard, head)| {
                RangeRequest::new(head.key.to_vec(), self.keys.due_until(shard, until).1).limit(share)
            })
            .collect();
        let counts = tx.txn.count_ranges(&ranges).await?;
        let mut count: usize = counts.iter().map(|c| c.count).sum();
        for (range, first) in ranges.into_iter().zip(counts) {
            if !first.more || count >= limit {
                continue;
            }
            let whole = range.limit(first.count + limit - count);
            let again = tx.txn.count_ranges(std::slice::from_ref(&whole)).await?;
            count += again.first().map_or(0, |c| c.count).saturating_sub(first.count);
        }
        Ok(RawOutlook { first, count: count.min(limit), first_elsewhere })
    }

    /// The outlook for `node`, leaving out what `filter` skips, as `tx` sees the due index
    /// (snapshot reads).
    pub(super) async fn outlook_in(
        &self,
        tx: &Tx<'_, K::Transaction>,
        node: &str,
        filter: DueFilter<'_>,
        window: Duration,
        limit: usize,
    ) -> Result<RawOutlook, StoreError> {
        let NodeShards { home: homes, .. } = self.homes_of(tx, node, None).await?;
        let heads = self.first_due(tx, vec![None; usize::from(DUE_SHARDS)], &(0..DUE_SHARDS).collect(), filter).await?;
        self.count_due(tx, &heads, &homes, window, limit).await
    }

    /// What is due next for `node`: the earliest fire of its home shards (the shards it
    /// takes on time, by rendezvous hashing over the live nodes) and how many of them are
    /// due within `window` of it (counted up to `limit`), and the earliest fire of the
    /// other shards (which it takes only once they are late). A poller sleeps until the
    /// first, starting earlier the more fires fall due together (see
    /// [`crate::rules::AcquisitionLead`]), and checks the others now and then: it is not
    /// woken by every fire of the cluster. Fires `filter` skips are left out (not counted,
    /// not first): a node does not wake for fires it would leave waiting.
    ///
    /// Snapshot reads: the node list, one read per shard for the earliest entry, then a
    /// range read of the home shards that have entries within the window.
    ///
    /// # Errors
    /// Store errors.
    pub async fn due_outlook(
        &self,
        node: &str,
        filter: DueFilter<'_>,
        window: Duration,
        limit: usize,
    ) -> Result<DueOutlook, StoreError> {
        let outlook = run(&self.kv, self.options.retry, |txn, _| async move {
            let tx = self.tx(txn);
            self.outlook_in(&tx, node, filter, window, limit).await
        })
        .await?;
        outlook.outlook()
    }

    /// Which shards are home to `node` among the live nodes that are not draining, and its
    /// turn at stealing among them (snapshot). With `vouching` (now on `node`'s clock, and
    /// how recent a heartbeat must be), also which shards the others vouch for (see
    /// [`NodeShards::vouched`]).
    pub(super) async fn homes_of(
        &self,
        tx: &Tx<'_, K::Transaction>,
        node: &str,
        vouching: Option<Vouching>,
    ) -> Result<NodeShards, StoreError> {
        let (begin, end) = self.keys.nodes();
        let node_records = tx.txn.get_range(&RangeRequest::new(begin, end), true).await?;
        // Read in place: most acquisitions find the list they found last time.
        let mut others: Vec<(&str, bool)> = Vec::with_capacity(node_records.pairs.len());
        for (_, value) in &node_records.pairs {
            let record: NodeView<'_> = codec::decode(value, "node record")?;
            if record.owns_shards() && record.node != node {
                others.push((record.node, vouching.is_some_and(|v| v.trusts(&record))));
            }
        }
        Ok(self.home_shards(node, &others))
    }

    /// Writes `new` (replacing `old`) as [`Tx::put_trigger_from`] does and, when that gives it a
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
        if let Some(old) = old {
            super::invariants::same_trigger(old, new);
        }
        self.put_trigger_from_and_wake(tx, old.map(TriggerRecord::was), new, local);
    }

    /// [`put_trigger_and_wake`](Self::put_trigger_and_wake) for a record changed in place,
    /// given what it `was`.
    pub(crate) fn put_trigger_from_and_wake<S: AsRef<str> + serde::Serialize>(
        &self,
        tx: &Tx<'_, K::Transaction>,
        was: Option<TriggerWas>,
        new: &TriggerRecord<S>,
        local: bool,
    ) {
        tx.put_trigger_from(was, new, local);
        let due = |state: TriggerState, next: Option<i64>| (state == TriggerState::Waiting).then_some(next).flatten();
        let new_due = due(new.state, new.next_fire_us);
        if local || new_due.is_none() || was.and_then(|was| due(was.state, was.next_fire_us)) == new_due {
            return;
        }
        let cache = self.homes.lock();
        let Some(cached) = cache.as_ref() else { return };
        let shard = shard_of(new.job.as_ref(), new.name.as_ref());
        let home = cached.homes.get(usize::from(shard)).map(|&i| cached.nodes[i].as_str());
        // This store's own node (the first of the list) learns of its own writes without
        // its watch: the handle and the run's end wake its poller.
        if let Some(node) = home.filter(|home| Some(*home) != cached.nodes.first().map(String::as_str)) {
            tx.txn.atomic_op(&self.keys.wake(node), &1u64.to_le_bytes(), crate::kv::AtomicOp::Add);
        }
    }

    /// Watches `node`'s wake key: the future resolves when another transaction gives one
    /// of its home shards new due work (a schedule change, a completion or retry written
    /// elsewhere, a recovery, a fire another node stole from it moved on: see
    /// `put_trigger_and_wake`) or changes its home shards (a node declared lost, draining
    /// or stopped, or one joining), or fails when watching does (watch again after the
    /// next poll).
    ///
    /// A watch armed before a transaction reads the due index resolves on every such change
    /// committed after that read (the watch compares with the value as of its own, earlier,
    /// read version): while it is pending, what that read saw of the node's home shards
    /// still holds, except for changes the node made itself and for writers whose view of
    /// the node list is stale (a poller still reads the index now and then).
    ///
    /// # Errors
    /// Store errors arming the watch.
    pub async fn watch_wake(&self, node: &str) -> Result<BoxFuture<'static, Result<(), StoreError>>, StoreError> {
        let txn = self.kv.create_transaction()?;
        let watch = txn.watch(&self.keys.wake(node));
        txn.commit().await?;
        Ok(Box::pin(async move { watch.await.map_err(StoreError::from) }))
    }

    /// Which shards are home to `node` among it and `others`, and its turn at stealing
    /// (cached for the last list), and the shards whose home is one of `others` flagged
    /// as vouching for them.
    pub(super) fn home_shards(&self, node: &str, others: &[(&str, bool)]) -> NodeShards {
        let mut cache = self.homes.lock();
        let same = |nodes: &[String]| {
            nodes.len() == others.len() + 1
                && nodes[0] == node
                && nodes[1..].iter().zip(others).all(|(cached, (other, _))| cached == other)
        };
        let cached = match cache.take() {
            Some(cached) if same(&cached.nodes) => cache.insert(cached),
            _ => {
                let nodes = std::iter::once(node).chain(others.iter().map(|(other, _)| *other));
                cache.insert(HomeShards::of(nodes.map(str::to_owned).collect()))
            }
        };
        let vouched = if others.iter().any(|(_, vouches)| *vouches) {
            // Index 0 is this node, which vouches for nothing to itself.
            let vouches = |home: usize| home.checked_sub(1).and_then(|i| others.get(i)).is_some_and(|(_, v)| *v);
            cached.homes.iter().map(|&home| vouches(home)).collect()
        } else {
            Vec::new()
        };
        NodeShards { home: cached.home.clone(), rota: cached.rota, vouched }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn heads_hold_for_the_filter_they_were_read_with_by_version_or_by_jobs() {
        let busy = JobSet::from_iter([JobName::new("a").unwrap()]);
        let other = JobSet::from_iter([JobName::new("b").unwrap()]);
        let head = ShardHead { due: 5, key: KvBytes::from_slice(&[1]) };
        let heads = |filter| DueHeads::of_homes(vec![true], vec![Some(head.clone())], filter);
        let versioned = DueFilter { scheduled: true, busy_jobs: &busy, busy_version: Some(3) };
        let read = heads(versioned);
        assert!(read.heads_for(&[true], versioned).is_some());
        // The version decides, not the set: a keeper changes it whenever the set changes.
        assert!(read.heads_for(&[true], DueFilter { busy_version: Some(4), ..versioned }).is_none());
        assert!(read.heads_for(&[true], DueFilter { busy_version: None, ..versioned }).is_none());
        assert!(read.heads_for(&[false], versioned).is_none(), "other home shards");
        assert!(read.heads_for(&[true], DueFilter { scheduled: false, ..versioned }).is_none());
        let by_jobs = DueFilter { busy_version: None, ..versioned };
        let read = heads(by_jobs);
        assert!(read.heads_for(&[true], by_jobs).is_some());
        assert!(read.heads_for(&[true], DueFilter { busy_jobs: &other, ..by_jobs }).is_none());
        assert!(read.heads_for(&[true], versioned).is_none());
    }

    fn nodes(names: &[&str]) -> Vec<String> {
        names.iter().map(|name| (*name).to_owned()).collect()
    }

    #[test]
    fn each_node_has_its_own_place_in_the_rota() {
        let names = ["zone-a-1", "zone-a-2", "zone-a-3", "zone-b-1", "zone-b-2"];
        let mut places: Vec<usize> = (0..names.len())
            .map(|i| {
                let mut list = nodes(&names);
                list.swap(0, i);
                let rota = StealRota::of(&list);
                assert_eq!(rota.nodes, 5);
                rota.place
            })
            .collect();
        places.sort_unstable();
        assert_eq!(places, vec![0, 1, 2, 3, 4]);
        // The order does not depend on how the list came.
        let mut reordered = nodes(&names);
        reordered[1..].reverse();
        assert_eq!(StealRota::of(&reordered), StealRota::of(&nodes(&names)));
        assert_eq!(StealRota::of(&[]), StealRota { place: 0, nodes: 1 });
        assert!(StealRota { place: 0, nodes: 0 }.has_turn(7), "no nodes: this one alone");
    }

    /// For `nodes` nodes cycling every second (at different offsets) for 200 s: how many
    /// reads each turn of 2.5 s saw, and how many each node made.
    fn steal_reads(nodes: usize) -> (std::collections::BTreeMap<i64, usize>, Vec<usize>) {
        let every = Duration::from_secs(5);
        let start = DateTime::from_timestamp(1_800_000_000, 0).unwrap();
        let mut last: Vec<Option<DateTime<Utc>>> = vec![Some(start - TimeDelta::seconds(5)); nodes];
        let mut per_turn = std::collections::BTreeMap::<i64, usize>::new();
        let mut per_node = vec![0; nodes];
        let step = 1000 / i64::try_from(nodes).unwrap();
        for ms in (0..200_000i64).step_by(usize::try_from(step).unwrap()) {
            let node = usize::try_from(ms / step).unwrap() % nodes;
            let now = start + TimeDelta::milliseconds(ms);
            let since = last[node].map(|at| (now - at).to_std().unwrap());
            if steal_read_due(since, now, every, Some(StealRota { place: node, nodes })) {
                last[node] = Some(now);
                per_node[node] += 1;
                *per_turn.entry(now.timestamp_millis().div_euclid(2500)).or_default() += 1;
            }
        }
        (per_turn, per_node)
    }

    #[test]
    fn nodes_take_turns_at_stealing_one_turn_each() {
        let (per_turn, per_node) = steal_reads(4);
        assert_eq!(per_turn.len(), 80, "some node reads in every turn");
        assert!(per_turn.values().all(|n| *n == 1), "one node per turn: {per_turn:?}");
        assert_eq!(per_node, vec![20; 4], "each node once per round");
        // Two nodes: each reads every 5 s, in turns between the other's.
        let (per_turn, per_node) = steal_reads(2);
        assert_eq!((per_turn.len(), per_node), (80, vec![40, 40]));
        // One node: every 5 s.
        let (per_turn, per_node) = steal_reads(1);
        assert_eq!((per_turn.len(), per_node), (40, vec![40]));
    }

    #[test]
    fn one_steal_turn_in_four_reads_the_shards_nodes_vouch_for() {
        let every = Duration::from_secs(5);
        let at = |ms: i64| DateTime::from_timestamp_millis(1_800_000_000_000 + ms).unwrap();
        let doubting: Vec<i64> =
            (0..40).map(|turn| turn * 2500 + 1200).filter(|&ms| !steal_read_trusts(at(ms), every)).collect();
        assert_eq!(doubting.len(), 10, "{doubting:?}");
        assert!(doubting.windows(2).all(|pair| pair[1] - pair[0] == 10_000), "every 10 s: {doubting:?}");
        // The same answer all through a turn, on every node's clock that agrees.
        let first = doubting[0];
        let turn_start = first - 1200;
        assert!((turn_start..turn_start + 2500).step_by(100).all(|ms| !steal_read_trusts(at(ms), every)));
        assert!(steal_read_trusts(at(turn_start + 2500), every));
    }

    #[test]
    fn a_node_reads_without_its_turn_only_after_a_round_it_missed() {
        let every = Duration::from_secs(5);
        let rota = Some(StealRota { place: 2, nodes: 5 });
        let turn = |n: i64| DateTime::from_timestamp_millis(n * 2500).unwrap();
        let secs = |s| Some(Duration::from_secs(s));
        assert!(steal_read_due(None, turn(3), every, rota), "a node that never read reads");
        assert!(steal_read_due(secs(12), turn(7), every, rota), "its turn");
        assert!(!steal_read_due(secs(4), turn(7), every, rota), "at most every 5 s");
        assert!(!steal_read_due(secs(15), turn(8), every, rota), "another's turn");
        assert!(steal_read_due(secs(18), turn(8), every, rota), "a missed round");
        assert!(steal_read_due(secs(5), turn(8), every, None), "no rota: every 5 s");
        assert!(!steal_read_due(secs(4), turn(8), every, None));
    }

    #[test]
    fn every_shard_has_one_home_and_every_node_its_share_in_any_order() {
        let named = |prefix: &str, numbers: std::ops::Range<usize>| -> Vec<String> {
            numbers.map(|i| format!("{prefix}{i}")).collect()
        };
        // Names as operators give them: numbered pods and hosts, differing in their last
        // bytes (ranked by FNV alone, node-4 was home to 32 of 64 shards of five nodes
        // and worker-10 to 28 of ten).
        for nodes in [
            nodes(&["solo"]),
            nodes(&["a", "b", "c"]),
            named("node-", 0..5),
            named("sundial-", 0..3),
            named("worker-", 1..11),
            named("ip-10-0-1-", 20..24),
            named("n", 0..100),
        ] {
            let homes = shard_homes(&nodes);
            assert_eq!(homes.len(), usize::from(DUE_SHARDS));
            let mut per_node = vec![0; nodes.len()];
            for &home in &homes {
                per_node[home] += 1;
            }
            let share = usize::from(DUE_SHARDS) / nodes.len();
            assert!(per_node.iter().all(|n| *n == share || *n == share + 1), "{nodes:?}: {per_node:?}");
            // The same homes from the same nodes listed in another order.
            let mut reversed = nodes.clone();
            reversed.reverse();
            let homes_reversed = shard_homes(&reversed);
            for (home, home_reversed) in homes.iter().zip(&homes_reversed) {
                assert_eq!(nodes[*home], reversed[*home_reversed]);
            }
        }
        assert!(shard_homes(&[]).is_empty());
    }

    #[test]
    fn a_node_joining_takes_shards_and_leaves_most_homes_where_they_were() {
        let five: Vec<String> = (0..5).map(|i| format!("node-{i}")).collect();
        let six: Vec<String> = (0..6).map(|i| format!("node-{i}")).collect();
        let (before, after) = (shard_homes(&five), shard_homes(&six));
        let moved = before.iter().zip(&after).filter(|(b, a)| five[**b] != six[**a]).count();
        let joined = after.iter().filter(|home| **home == 5).count();
        assert!(joined >= 10, "{joined}");
        // Plain rendezvous moves only the joiner's; the shares move a few more.
        assert!(moved <= 2 * joined, "{moved} of 64 shards moved, {joined} to the new node");
    }
}
