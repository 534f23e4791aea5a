//! Nodes (SPEC §7, §10 steps 3, 5, 6): heartbeats, declaring lost nodes and recovering
//! their runs, and cancel requests.
//!
//! Liveness is judged by the observer (DESIGN.md decision 3): the leader watches each
//! node's heartbeat sequence on its own monotonic clock and calls [`KvJobStore::reap_node`]
//! with the sequence it saw unchanged for `node_timeout`. The store declares the node lost
//! only if the sequence is still that one: a heartbeat racing the declaration conflicts
//! on the node record, and exactly one of them wins.

use std::collections::{BTreeMap, BTreeSet};

use chrono::{DateTime, Utc};
use parking_lot::Mutex;
use uuid::Uuid;

use super::jobs::one_shot_record;
use super::records::{JobRecord, LeaseRecord, NodeRecord, RunRecord, TriggerKind};
use super::Fence;
use super::{codec, parse_data, KvJobStore, Prefetched, StoreError, BATCH_DATA_BUDGET};
use crate::error::SchedulingError;
use crate::job::RunState;
use crate::kv::{run, Kv, KvTransaction, MaybeCommitted, RangeRequest};
use crate::time::to_micros;

/// What a heartbeat found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Heartbeat {
    /// The new heartbeat sequence.
    pub seq: u64,
    /// How many times this node has been declared lost; pass it to the next heartbeat.
    pub times_declared_lost: u64,
    /// The node was declared lost since the heartbeat that returned `last_known`: its runs
    /// are `Lost` and it must stop them (their completions will not be recorded).
    pub was_declared_lost: bool,
    /// The runs this node has been asked to cancel, as [`KvJobStore::cancel_requests`]
    /// reads them, read in the heartbeat's transaction: a poll cycle needs both, and one
    /// transaction is one round trip to the store.
    pub cancel_requests: Vec<Uuid>,
}

/// The cluster as [`KvJobStore::cluster`] reads it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClusterState {
    /// Every registered node.
    pub nodes: Vec<NodeRecord>,
    /// Runs running now, by node.
    pub running: BTreeMap<String, usize>,
    /// The holder of the leader lease, when the store keeps it and it is not released.
    pub leader: Option<LeaderState>,
}

/// Who holds a store-kept lease.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaderState {
    /// The holder's node id.
    pub node: String,
    /// Its term (the fencing token).
    pub term: u64,
}

/// What one reaping step did. After an ambiguous commit the step may have been done by
/// the attempt that reported it: its lists then hold what that attempt did (the runs it
/// marked `Lost` and their `recovery-…` triggers), read back from the store.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ReapResult {
    /// The node is (now) not alive: declared lost by this step or earlier, deregistered, or
    /// its record already deleted once reaped. False only when it heartbeated since it was
    /// observed (it is alive).
    pub declared: bool,
    /// Runs marked `Lost` in this step.
    pub lost_runs: Vec<Uuid>,
    /// `recovery-…` triggers created in this step.
    pub recovery_triggers: Vec<String>,
    /// More runs of the node remain: call again.
    pub more: bool,
}

impl<K: Kv> KvJobStore<K> {
    /// Records a heartbeat of `node` (registering it on first use) and reads its cancel
    /// requests (snapshot). `last_known` is the `times_declared_lost` of this node's
    /// previous heartbeat (`None` for the first one of a process). `caught_up` says the
    /// node's last acquisition left no fire due in its home shards, with run slots to spare
    /// (see [`NodeRecord::caught_up`]); a node that cannot vouch for that passes false,
    /// and the others then read its shards for late fires as usual.
    ///
    /// A process that heartbeated before (`last_known` is `Some`) and finds no record was
    /// declared lost or had stopped, and the leader has since deleted the record (it does
    /// once the node has no runs left): that is reported as
    /// [`was_declared_lost`](Heartbeat::was_declared_lost) too.
    ///
    /// # Errors
    /// Store errors.
    pub async fn heartbeat(
        &self,
        node: &str,
        now: DateTime<Utc>,
        last_known: Option<u64>,
        caught_up: bool,
    ) -> Result<Heartbeat, StoreError> {
        // Before the commit: if it lands while reported failed, the node's record exists,
        // and a later deletion must not read as "a store of its own".
        self.registered.lock().insert(node.to_owned());
        run(&self.kv, self.options.retry, |txn, _| async move {
            let key = self.keys.node(node);
            let old: Option<NodeRecord> =
                txn.get(&key, false).await?.map(|b| codec::decode(&b, "node record")).transpose()?;
            let seq = old.as_ref().map_or(1, |n| n.heartbeat_seq + 1);
            let times_declared_lost = match (&old, last_known) {
                (Some(old), _) => old.times_declared_lost,
                (None, None) => 0,
                (None, Some(known)) => known + 1,
            };
            // A process drains once, to its end; a new one (`None`) serves again.
            let draining = last_known.is_some() && old.as_ref().is_some_and(|n| n.draining);
            let record = NodeRecord {
                node: node.to_owned(),
                heartbeat_seq: seq,
                heartbeat_us: to_micros(now),
                alive: true,
                times_declared_lost,
                draining,
                caught_up: caught_up && !draining,
            };
            txn.set_owned(&key, codec::encode(&record));
            let tx = self.tx(txn);
            if !old.as_ref().is_some_and(NodeRecord::owns_shards) && record.owns_shards() {
                // It takes shards from the others (joining, or back after being declared
                // lost or stopped): woken, each acquires at once and learns the new list,
                // which is also the list it tells of new due work by (see
                // `put_trigger_and_wake`): not a stale one until its next acquisition.
                self.wake_other_nodes(&tx, node).await?;
            }
            let was_declared_lost = last_known.is_some_and(|known| times_declared_lost > known);
            let cancel_requests = tx.cancel_requests(node, true).await?;
            Ok::<_, StoreError>(Heartbeat { seq, times_declared_lost, was_declared_lost, cancel_requests })
        })
        .await
    }

    /// Marks `node` as draining (its stop began): it stays alive, but the other nodes no
    /// longer count it when they share out the due shards, so they take its fires on time
    /// rather than once late. Its heartbeats keep the mark; a new process's first clears it.
    /// Nothing happens to a node without a record.
    ///
    /// # Errors
    /// Store errors.
    pub async fn mark_draining(&self, node: &str) -> Result<(), StoreError> {
        self.update_node(node, |record| record.draining = true).await
    }

    /// Marks `node` as stopped gracefully: other nodes stop counting it among the live ones
    /// at once, instead of after `node_timeout`.
    ///
    /// # Errors
    /// Store errors.
    pub async fn deregister_node(&self, node: &str) -> Result<(), StoreError> {
        self.update_node(node, |record| record.alive = false).await
    }

    /// Applies `change` to `node`'s record, if it has one (read serializably, so a racing
    /// heartbeat or declaration conflicts with it).
    async fn update_node(&self, node: &str, change: impl Fn(&mut NodeRecord) + Copy) -> Result<(), StoreError> {
        run(&self.kv, self.options.retry, |txn, _| async move {
            let tx = self.tx(txn);
            let key = self.keys.node(node);
            if let Some(bytes) = tx.txn.get(&key, false).await? {
                let mut record: NodeRecord = codec::decode(&bytes, "node record")?;
                let owned_shards = record.owns_shards();
                change(&mut record);
                tx.txn.set_owned(&key, codec::encode(&record));
                if owned_shards && !record.owns_shards() {
                    self.wake_other_nodes(&tx, node).await?;
                }
            }
            Ok::<_, StoreError>(())
        })
        .await
    }

    /// Bumps the wake key of every node owning shards but `node`, which stops or starts
    /// owning them in this transaction. When it stops, each may now have home shards it did
    /// not have, and a poller that skips reading the due index while its wake key says
    /// nothing changed there (the engine's does) must read them at once, not at its next
    /// full read. When it starts, each loses some: woken, each acquires and so learns the
    /// new node list, by which its store tells other nodes of due work it writes (see
    /// `put_trigger_and_wake`); until then it would tell the shards' former home. The node
    /// list is a snapshot read; a node joining concurrently reads its shards on its first
    /// cycle.
    async fn wake_other_nodes(&self, tx: &super::Tx<'_, K::Transaction>, node: &str) -> Result<(), StoreError> {
        let (begin, end) = self.keys.nodes();
        let records = tx.txn.get_range(&RangeRequest::new(begin, end), true).await?;
        for (_, value) in &records.pairs {
            let record: NodeRecord = codec::decode(value, "node record")?;
            if record.owns_shards() && record.node != node {
                tx.txn.atomic_op(&self.keys.wake(&record.node), &1u64.to_le_bytes(), crate::kv::AtomicOp::Add);
            }
        }
        Ok(())
    }

    /// Every registered node (snapshot: for the leader's observations).
    ///
    /// # Errors
    /// Store errors.
    pub async fn nodes(&self) -> Result<Vec<NodeRecord>, StoreError> {
        run(&self.kv, self.options.retry, |txn, _| async move {
            let (begin, end) = self.keys.nodes();
            let range = txn.get_range(&RangeRequest::new(begin, end), true).await?;
            range.pairs.iter().map(|(_, v)| codec::decode(v, "node record")).collect::<Result<Vec<_>, _>>()
        })
        .await
    }

    /// The cluster as the store records it, for people looking at it (snapshot reads):
    /// every node record, how many runs each has running, and who holds the lease on
    /// `lease_resource` if the store keeps it (a store-backed leader election).
    ///
    /// # Errors
    /// Store errors.
    pub async fn cluster(&self, lease_resource: &str) -> Result<ClusterState, StoreError> {
        run(&self.kv, self.options.retry, |txn, _| async move {
            let (begin, end) = self.keys.nodes();
            let records = txn.get_range(&RangeRequest::new(begin, end), true).await?;
            let nodes =
                records.pairs.iter().map(|(_, v)| codec::decode(v, "node record")).collect::<Result<Vec<_>, _>>()?;
            let (begin, end) = self.keys.running_everywhere();
            let running_keys = txn.get_range(&RangeRequest::new(begin, end), true).await?;
            let mut running = BTreeMap::new();
            for (key, _) in &running_keys.pairs {
                *running.entry(self.keys.running_node_of(key)?).or_insert(0) += 1;
            }
            let leader = match txn.get(&self.keys.lease(lease_resource), true).await? {
                Some(bytes) => {
                    let lease: LeaseRecord = codec::decode(&bytes, "lease record")?;
                    // The holder is `node-id:token`.
                    let node = lease.holder.rsplit_once(':').map_or(lease.holder.as_str(), |(node, _)| node);
                    (!lease.released).then(|| LeaderState { node: node.to_owned(), term: lease.term })
                }
                None => None,
            };
            Ok::<_, StoreError>(ClusterState { nodes, running, leader })
        })
        .await
    }

    /// Declares `node` lost if its heartbeat sequence is still `observed_seq` (or it is
    /// already lost or deregistered), then marks up to `chunk` of its running runs `Lost`:
    /// each frees its slot, lets blocked triggers go, re-arms its interval trigger, and,
    /// for jobs that request recovery, gets one `recovery-…` trigger due now (cause
    /// `Recovery`, same data). Call again while [`ReapResult::more`]. The step that finds
    /// no run left deletes the node's record, wake key and cancel requests (see
    /// [`heartbeat`](Self::heartbeat) for a node that comes back).
    ///
    /// With `fence`, the step commits only while that leader term is current.
    ///
    /// # Errors
    /// `SCHEDULING_CONFLICT_002` when fenced out; store errors.
    pub async fn reap_node(
        &self,
        node: &str,
        observed_seq: u64,
        now: DateTime<Utc>,
        chunk: usize,
        fence: Option<&Fence>,
    ) -> Result<ReapResult, StoreError> {
        let base = self.random_u64();
        let earlier = Mutex::new(ReapResult::default());
        let earlier = &earlier;
        let (result, unblock) = run(&self.kv, self.options.retry, |txn, maybe| async move {
            let tx = self.tx(txn);
            if let Some(fence) = fence {
                fence.check(&tx.txn, &self.keys).await?;
            }
            let key = self.keys.node(node);
            let Some(bytes) = tx.txn.get(&key, false).await? else {
                // Reaped to the end already (by an earlier step, or by this one's attempt
                // whose commit was reported unknown), or deregistered and reaped: not alive.
                let result = ReapResult { declared: true, ..ReapResult::default() };
                return Ok::<_, StoreError>((self.with_earlier(&tx, node, maybe, earlier, result).await?, Vec::new()));
            };
            let mut record: NodeRecord = codec::decode(&bytes, "node record")?;
            if record.alive {
                if record.heartbeat_seq != observed_seq {
                    // Alive (again, should an earlier attempt of this step have committed:
                    // what it did is still reported).
                    let result = self.with_earlier(&tx, node, maybe, earlier, ReapResult::default()).await?;
                    return Ok((result, Vec::new()));
                }
                record.alive = false;
                record.times_declared_lost += 1;
                tx.txn.set_owned(&key, codec::encode(&record));
                self.wake_other_nodes(&tx, node).await?;
            }
            let mut result = ReapResult { declared: true, ..ReapResult::default() };
            let mut unblock = Vec::new();
            let (begin, end) = self.keys.running_on(node);
            // Read serializably: a run the node starts while this step is under way (it read
            // its record as alive just before this declaration) conflicts with the step,
            // which then sees it; with a snapshot it would stay `Running` with no record
            // left to lead anyone to it. A completion racing this conflicts on the run.
            let listing = tx.txn.get_range(&RangeRequest::new(begin, end).limit(chunk), false).await?;
            let why = format!("node '{node}' was lost while the run was running");
            let mut written = 0;
            result.more = listing.more;
            for (key, _) in &listing.pairs {
                if written >= BATCH_DATA_BUDGET {
                    result.more = true;
                    break;
                }
                written += self.lose_run(&tx, key, node, now, base, &why, &mut result, &mut unblock).await?;
            }
            if !result.more {
                // Nothing of the node is left: drop its record, so records of nodes gone
                // for good (restarts under new ids) do not pile up for every acquisition
                // and every new leader to read. Should it come back, its heartbeat finds
                // no record and learns it was declared lost.
                tx.txn.clear(&key);
                tx.txn.clear(&self.keys.wake(node));
                let (begin, end) = self.keys.cancels_for(node);
                tx.txn.clear_range(&begin, &end);
            }
            Ok((self.with_earlier(&tx, node, maybe, earlier, result).await?, unblock))
        })
        .await?;
        for job in unblock {
            self.unblock_all(&job).await?;
        }
        Ok(result)
    }

    /// Marks `Lost` the runs of `node` that the calling process does not know (`known`):
    /// left `Running` by an earlier process with the same node id, which died, by this
    /// node's poller before it was restarted, or by an acquisition whose commit was
    /// reported unknown and whose retries then failed. Each is handled as when a lost node
    /// is reaped: its slot freed, its interval trigger re-armed, and a `recovery-…` trigger
    /// when its job requests recovery. A node calls this when its poller starts (its heartbeat
    /// sequence goes on, so the leader would never declare those runs lost). Call again
    /// while [`ReapResult::more`].
    ///
    /// # Errors
    /// Store errors.
    pub async fn reclaim_previous_runs(
        &self,
        node: &str,
        known: &BTreeSet<Uuid>,
        now: DateTime<Utc>,
        chunk: usize,
    ) -> Result<ReapResult, StoreError> {
        let base = self.random_u64();
        let earlier = Mutex::new(ReapResult::default());
        let earlier = &earlier;
        let (result, unblock) = run(&self.kv, self.options.retry, |txn, maybe| async move {
            let tx = self.tx(txn);
            let mut result = ReapResult::default();
            let mut unblock = Vec::new();
            let (begin, end) = self.keys.running_on(node);
            let listing = tx.txn.get_range(&RangeRequest::new(begin, end), true).await?;
            let mut taken = 0;
            let why = format!(
                "node '{node}' does not run it: its process ended, or the acquisition that started it failed after its commit"
            );
            let mut written = 0;
            for (key, _) in &listing.pairs {
                if known.contains(&self.keys.node_run_of(key)?) {
                    continue;
                }
                if taken >= chunk || written >= BATCH_DATA_BUDGET {
                    result.more = true;
                    break;
                }
                taken += 1;
                written += self.lose_run(&tx, key, node, now, base, &why, &mut result, &mut unblock).await?;
            }
            Ok::<_, StoreError>((self.with_earlier(&tx, node, maybe, earlier, result).await?, unblock))
        })
        .await?;
        for job in unblock {
            self.unblock_all(&job).await?;
        }
        Ok(result)
    }

    /// `result` of a reaping attempt, with what earlier attempts of the same step did when
    /// one may have committed (`maybe`): the runs they marked lost that this attempt no
    /// longer found running and that are `Lost` on `node` now were theirs, and so are their
    /// recovery triggers. Without this, a step retried after an ambiguous commit would
    /// return empty lists, and the leader would publish no `run.lost` event for those runs.
    /// Keeps the merged result in `earlier` for the next attempt.
    async fn with_earlier(
        &self,
        tx: &super::Tx<'_, K::Transaction>,
        node: &str,
        maybe: MaybeCommitted,
        earlier: &Mutex<ReapResult>,
        mut result: ReapResult,
    ) -> Result<ReapResult, StoreError> {
        let before = std::mem::take(&mut *earlier.lock());
        if maybe.0 {
            let (mut runs, mut triggers) = (Vec::new(), Vec::new());
            for id in before.lost_runs.iter().filter(|id| !result.lost_runs.contains(id)) {
                if tx.run(*id).await?.is_some_and(|run| run.state == RunState::Lost && run.node == node) {
                    runs.push(*id);
                    let recovery = recovery_name(*id);
                    triggers.extend(before.recovery_triggers.iter().find(|t| **t == recovery).cloned());
                }
            }
            runs.append(&mut result.lost_runs);
            triggers.append(&mut result.recovery_triggers);
            (result.lost_runs, result.recovery_triggers) = (runs, triggers);
        }
        *earlier.lock() = result.clone();
        Ok(result)
    }

    /// Marks the run behind running-index entry `key` `Lost` (if it still runs on `node`),
    /// frees its slot, re-arms its interval trigger and writes its recovery trigger (its
    /// incarnation from `base` and the run: see [`recovery_uid`]).
    /// Returns the bytes of run data it wrote (for [`BATCH_DATA_BUDGET`]).
    #[allow(clippy::too_many_arguments)]
    async fn lose_run(
        &self,
        tx: &super::Tx<'_, K::Transaction>,
        key: &[u8],
        node: &str,
        now: DateTime<Utc>,
        base: u64,
        why: &str,
        result: &mut ReapResult,
        unblock: &mut Vec<String>,
    ) -> Result<usize, StoreError> {
        let id = self.keys.node_run_of(key)?;
        let Some(stored) = tx.run(id).await? else {
            tx.txn.clear(key);
            return Ok(0);
        };
        if stored.state != RunState::Running || stored.node != node {
            tx.txn.clear(key);
            return Ok(0);
        }
        let mut lost = stored.clone();
        lost.state = RunState::Lost;
        lost.finished_us = Some(to_micros(now));
        lost.error_message = Some(why.to_owned());
        tx.put_run(Some(&stored), &lost.view());
        tx.txn.clear(&self.keys.cancel(node, id));
        let job = tx.job(&stored.job).await?;
        let job = job.as_ref().map(JobRecord::view);
        if self.release(tx, &stored.view(), job.as_ref(), &mut Prefetched::default()).await?.0 {
            unblock.push(stored.job.clone());
        }
        self.finish_interval_trigger(tx, &stored.view(), job.as_ref(), now, &mut Prefetched::default()).await?;
        let mut written = stored.data.len();
        if job.as_ref().is_some_and(|j| j.requests_recovery) && !stored.local {
            result.recovery_triggers.push(self.write_recovery(tx, &stored, recovery_uid(base, id), now)?);
            written += stored.data.len();
        }
        result.lost_runs.push(id);
        Ok(written)
    }

    fn write_recovery(
        &self,
        tx: &super::Tx<'_, K::Transaction>,
        lost: &RunRecord,
        uid: u64,
        now: DateTime<Utc>,
    ) -> Result<String, StoreError> {
        let name = recovery_name(lost.id);
        let kind = TriggerKind::Recovery { lost_run: lost.id, attempt: lost.attempt, retry_of: lost.retry_of };
        let record = one_shot_record(&lost.job, &name, kind, &parse_data(&lost.data)?, uid, now);
        self.put_trigger_and_wake(tx, None, &record, false);
        Ok(name)
    }

    /// Asks the node running each run to cancel it; returns that node (the caller cancels
    /// at once when it is itself, otherwise the node does at its next cycle).
    ///
    /// # Errors
    /// Per item: `SCHEDULING_NOTFOUND_004` when the run is unknown or already finished.
    pub async fn request_cancel(&self, ids: &[Uuid]) -> Vec<Result<String, SchedulingError>> {
        let mut results = Vec::with_capacity(ids.len());
        for &id in ids {
            let result = run(&self.kv, self.options.retry, |txn, _| async move {
                let tx = self.tx(txn);
                let not_found = || SchedulingError::RunNotFound { run_id: id.to_string() };
                let stored = tx.run(id).await?.ok_or_else(not_found)?;
                if stored.state != RunState::Running {
                    return Err(not_found().into());
                }
                tx.txn.set(&self.keys.cancel(&stored.node, id), b"");
                Ok::<_, StoreError>(stored.node)
            })
            .await;
            results.push(result.map_err(SchedulingError::from));
        }
        results
    }

    /// The runs `node` has been asked to cancel. Read-only: a request stays until its run
    /// ends (completion clears it), so an ambiguous commit can never drop one, and acting
    /// on it twice is harmless.
    ///
    /// # Errors
    /// Store errors.
    pub async fn cancel_requests(&self, node: &str) -> Result<Vec<Uuid>, StoreError> {
        run(&self.kv, self.options.retry, |txn, _| async move { self.tx(txn).cancel_requests(node, true).await }).await
    }
}

/// The name of the recovery trigger of lost run `id`.
fn recovery_name(id: Uuid) -> String {
    format!("recovery-{}", id.simple())
}

/// The incarnation uid of the recovery trigger of lost run `id`, from `base` (drawn once
/// per reaping step, before its retry loop). Derived from the run rather than handed out
/// in listing order: an attempt whose commit was reported unknown may have committed, and
/// its retry then lists other runs; uids by position would give their recovery triggers
/// the committed ones' uids, and the recovery runs (whose ids come from the uid and the
/// scheduled time, the same `now`) the same ids.
fn recovery_uid(base: u64, id: Uuid) -> u64 {
    let (high, low) = id.as_u64_pair();
    super::acquire::mix64(base ^ super::acquire::mix64(high ^ super::acquire::mix64(low)))
}
