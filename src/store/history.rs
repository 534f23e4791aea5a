//! Run history: queries, counts and retention (SPEC §9 `runs`/`count_runs`, §10 step 5).
//!
//! Queries scan a covering index of finished runs (by job when the query names one, else
//! by scheduled time) newest first, with snapshot reads, and filter on the summaries the
//! index carries; running runs come from the running indexes (a run's summary is written
//! once, when it ends, so starting and finishing a run rewrite no index entry). A scan
//! reads at most [`SCAN_BUDGET`] index entries per transaction and continues in a new
//! transaction after the last key it saw, so no query meets the five-second limit however
//! large history is. A query spanning several transactions is not one consistent snapshot
//! (runs may finish in between; each is still seen once).

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use chrono::{DateTime, Utc};
use parking_lot::Mutex;
use uuid::Uuid;

use super::jobs::instant;
use super::records::{RunRecord, RunSummary};
use super::Fence;
use super::{codec, job_run_of, KvJobStore, StoreError};
use crate::job::{JobRunInfo, JobRunQuery, RunState};
use crate::kv::{key_after, run, Kv, KvTransaction, RangeRequest, RangeResult};
use crate::time::to_micros;

/// Index entries read per transaction by a history scan.
pub const SCAN_BUDGET: usize = 10_000;
/// Finished runs deleted per retention transaction.
pub const RETENTION_BATCH: usize = 256;

impl<K: Kv> KvJobStore<K> {
    /// The runs matching `query`, newest scheduled first, after `skip`, at most `limit`.
    ///
    /// # Errors
    /// `SCHEDULING_VALIDATION_002` for paging out of range (before touching the store);
    /// store errors.
    pub async fn runs(&self, query: &JobRunQuery) -> Result<Vec<JobRunInfo>, StoreError> {
        query.validate_paging()?;
        let mut to_skip = query.skip as u64;
        let mut ids = Vec::new();
        self.scan_history(query, |id, _| {
            if to_skip > 0 {
                to_skip -= 1;
                return true;
            }
            ids.push(id);
            ids.len() < query.limit as usize
        })
        .await?;
        let ids = &ids;
        let records = run(&self.kv, self.options.retry, |txn, _| async move {
            let mut records = Vec::with_capacity(ids.len());
            for id in ids {
                if let Some(bytes) = txn.get(&self.keys.run(*id), true).await? {
                    records.push(codec::decode::<RunRecord>(&bytes, "run record")?);
                }
            }
            Ok::<_, StoreError>(records)
        })
        .await?;
        records.iter().map(run_info).collect()
    }

    /// The run `id`, running or finished, while history keeps it.
    ///
    /// # Errors
    /// Store errors.
    pub async fn run_by_id(&self, id: Uuid) -> Result<Option<JobRunInfo>, StoreError> {
        let record = run(&self.kv, self.options.retry, |txn, _| async move {
            match txn.get(&self.keys.run(id), true).await? {
                Some(bytes) => Ok::<_, StoreError>(Some(codec::decode::<RunRecord>(&bytes, "run record")?)),
                None => Ok(None),
            }
        })
        .await?;
        record.as_ref().map(run_info).transpose()
    }

    /// How many runs match `query`'s filters (paging ignored).
    ///
    /// # Errors
    /// Store errors.
    pub async fn count_runs(&self, query: &JobRunQuery) -> Result<u64, StoreError> {
        let mut count = 0u64;
        self.scan_history(query, |_, _| {
            count += 1;
            true
        })
        .await?;
        Ok(count)
    }

    /// How many runs match `query`'s filters in each state (paging ignored): one scan
    /// where [`count_runs`](Self::count_runs) per state would take one each.
    ///
    /// # Errors
    /// Store errors.
    pub async fn count_runs_by_state(&self, query: &JobRunQuery) -> Result<BTreeMap<RunState, u64>, StoreError> {
        Ok(self.count_runs_by_state_at_most(query, u64::MAX).await?.0)
    }

    /// [`count_runs_by_state`](Self::count_runs_by_state) over at most `at_most` runs,
    /// the newest scheduled first, so a count's cost has a bound however many match;
    /// whether every matching run was counted.
    ///
    /// # Errors
    /// Store errors.
    pub async fn count_runs_by_state_at_most(
        &self,
        query: &JobRunQuery,
        at_most: u64,
    ) -> Result<(BTreeMap<RunState, u64>, bool), StoreError> {
        let mut counts = BTreeMap::new();
        let mut counted = 0u64;
        let mut complete = true;
        self.scan_history(query, |_, summary| {
            if counted == at_most {
                complete = false;
                return false;
            }
            counted += 1;
            *counts.entry(summary.state).or_insert(0) += 1;
            true
        })
        .await?;
        Ok((counts, complete))
    }

    /// Walks the matching runs newest scheduled first, calling `visit` until it returns
    /// false: the finished runs from the history index, in transactions of at most
    /// [`SCAN_BUDGET`] entries, with the running runs (listed in the first transaction
    /// from the running indexes) merged in by scheduled time.
    async fn scan_history(
        &self,
        query: &JobRunQuery,
        mut visit: impl FnMut(Uuid, &RunSummary) -> bool,
    ) -> Result<(), StoreError> {
        let from = query.from.map_or(i64::MIN, to_micros);
        let to = query.to.map_or(i64::MAX, to_micros);
        let by_job = query.job.is_some();
        let (begin, mut end) = match &query.job {
            Some(job) => self.keys.history_of_job(job.as_str(), from, to),
            None => self.keys.history_between(from, to),
        };
        // Oldest first, so the newest is popped first.
        let mut running = Vec::new();
        // Every run listed as running: one that finishes during the scan is then met in
        // the index too, and visited once.
        let mut listed = BTreeSet::new();
        let mut first_page = true;
        // The index holds finished runs only: a query for running runs reads none of it.
        let running_only = query.states.len() == 1 && query.states.contains(&RunState::Running);
        loop {
            let range = RangeRequest::new(begin.clone(), end.clone()).limit(SCAN_BUDGET).reversed();
            // A query for finished states only has no running runs to merge.
            let list_running = std::mem::take(&mut first_page)
                && (query.states.is_empty() || query.states.contains(&RunState::Running));
            let (page, now_running) = run(&self.kv, self.options.retry, |txn, _| {
                let range = &range;
                async move {
                    let page = if running_only { RangeResult::default() } else { txn.get_range(range, true).await? };
                    // In the same snapshot as the first page: a run is then either running
                    // or in the index, never both nor neither.
                    let now_running =
                        if list_running { Some(self.running_matching(&txn, query, from, to).await?) } else { None };
                    Ok::<_, StoreError>((page, now_running))
                }
            })
            .await?;
            if let Some(now_running) = now_running {
                listed = now_running.iter().map(|r| r.id).collect();
                running = now_running;
            }
            for (key, value) in &page.pairs {
                let (scheduled_us, id) = self.keys.history_entry_of(key, by_job)?;
                while running.last().is_some_and(|r| (r.scheduled_us, r.id) > (scheduled_us, id)) {
                    let Some(newer) = running.pop() else { break };
                    if !visit(newer.id, &newer.summary) {
                        return Ok(());
                    }
                }
                if listed.contains(&id) {
                    continue;
                }
                let summary: RunSummary = codec::decode(value, "run summary")?;
                if matches(query, &summary) && !visit(id, &summary) {
                    return Ok(());
                }
            }
            match page.pairs.last() {
                Some((last, _)) if page.more => end = last.to_vec(),
                _ => break,
            }
        }
        for older in running.into_iter().rev() {
            if !visit(older.id, &older.summary) {
                break;
            }
        }
        Ok(())
    }

    /// The running runs matching `query` with scheduled time in `[from_us, to_us)`, oldest
    /// scheduled first (snapshot reads of the running index and the runs).
    async fn running_matching(
        &self,
        txn: &K::Transaction,
        query: &JobRunQuery,
        from_us: i64,
        to_us: i64,
    ) -> Result<Vec<Running>, StoreError> {
        let ids = match &query.job {
            Some(job) => super::running_of_job(txn, &self.keys, job.as_str(), true).await?,
            None => {
                let (begin, end) = self.keys.running_everywhere();
                let index = txn.get_range(&RangeRequest::new(begin, end), true).await?;
                index.pairs.iter().map(|(key, _)| self.keys.node_run_of(key)).collect::<Result<Vec<_>, _>>()?
            }
        };
        let keys: Vec<_> = ids.into_iter().map(|id| self.keys.run(id).into_vec()).collect();
        let mut running = Vec::with_capacity(keys.len());
        for bytes in txn.get_many(&keys, true).await? {
            let Some(bytes) = bytes else { continue };
            let record: RunRecord = codec::decode(&bytes, "run record")?;
            if record.state != RunState::Running {
                continue;
            }
            let summary = record.summary();
            if (from_us..to_us).contains(&record.scheduled_us) && matches(query, &summary) {
                running.push(Running { scheduled_us: record.scheduled_us, id: record.id, summary });
            }
        }
        running.sort_unstable_by_key(|r| (r.scheduled_us, r.id));
        Ok(running)
    }

    /// Deletes finished runs that ended before `cutoff`, in batches; returns how many.
    ///
    /// Walks the history index by scheduled time up to `cutoff`: a run ends after its
    /// scheduled time, so every run that ended before the cutoff is there. (One that ended
    /// earlier than scheduled, e.g. lost before its time came, is deleted by a later pass
    /// once the cutoff passes its scheduled time: kept longer, never deleted early.) The
    /// entries passed over are the runs still within retention that were scheduled before
    /// the cutoff: those that were running at the cutoff.
    ///
    /// # Errors
    /// Store errors.
    /// With `fence`, each batch commits only while that leader term is current.
    pub async fn purge_history(&self, cutoff: DateTime<Utc>, fence: Option<&Fence>) -> Result<usize, StoreError> {
        let cutoff_us = to_micros(cutoff);
        let (mut begin, end) = self.keys.history_between(i64::MIN, cutoff_us);
        let mut deleted = 0;
        loop {
            let range = RangeRequest::new(begin, end.clone()).limit(RETENTION_BATCH);
            let range = &range;
            // The runs the attempts of this batch deleted, for a retry after an ambiguous
            // commit to count those the attempt that committed deleted.
            let earlier: Mutex<Vec<Uuid>> = Mutex::default();
            let earlier = &earlier;
            let (count, last) = run(&self.kv, self.options.retry, |txn, maybe| async move {
                let tx = self.tx(txn);
                if let Some(fence) = fence {
                    fence.check(&tx.txn, &self.keys).await?;
                }
                let listing = tx.txn.get_range(range, true).await?;
                let mut ended = Vec::new();
                for (key, value) in &listing.pairs {
                    let summary: RunSummary = codec::decode(value, "run summary")?;
                    if summary.state.is_final() && summary.finished_us.is_some_and(|finished| finished < cutoff_us) {
                        ended.push((key, self.keys.history_entry_of(key, false)?.1));
                    }
                }
                // Read together (one round trip on FoundationDB) and serializably: a replay
                // finds the runs gone and skips them.
                let mut runs = tx.prefetch_runs(ended.iter().map(|(_, id)| *id)).await?;
                let mut gone = Vec::new();
                for (key, id) in ended {
                    match tx.run_prefetched(&mut runs, id).await? {
                        Some(stored) if stored.state.is_final() => {
                            self.delete_run(&tx, &stored);
                            gone.push(id);
                        }
                        Some(_) => {}
                        None => tx.txn.clear(key),
                    }
                }
                let before = std::mem::take(&mut *earlier.lock());
                if maybe.0 {
                    // Deleted by an earlier attempt that may have committed: gone now, and
                    // not found by this one.
                    for id in before {
                        if !gone.contains(&id) && tx.run(id).await?.is_none() {
                            gone.push(id);
                        }
                    }
                }
                let count = gone.len();
                *earlier.lock() = gone;
                let last = listing.more.then(|| listing.pairs.last().map(|(key, _)| key_after(key))).flatten();
                Ok::<_, StoreError>((count, last))
            })
            .await?;
            deleted += count;
            match last {
                Some(next) => begin = next,
                None => return Ok(deleted),
            }
        }
    }

    /// Deletes history and audit entries older than `retention` before `now` (none when
    /// `retention` is `None`, i.e. kept forever); returns how many.
    ///
    /// # Errors
    /// Store errors.
    pub async fn apply_retention(
        &self,
        now: DateTime<Utc>,
        retention: Option<Duration>,
        fence: Option<&Fence>,
    ) -> Result<usize, StoreError> {
        #[cfg(feature = "test-hooks")]
        let retention = match self.options.broken {
            Some(super::BrokenStore::EarlyRetention) => retention.map(|r| r / 2),
            _ => retention,
        };
        let cutoff =
            retention.and_then(|r| chrono::TimeDelta::from_std(r).ok()).and_then(|r| now.checked_sub_signed(r));
        match cutoff {
            None => Ok(0),
            Some(cutoff) => Ok(self.purge_history(cutoff, fence).await? + self.purge_audit(cutoff, fence).await?),
        }
    }
}

/// A running run, for merging into a history scan.
struct Running {
    scheduled_us: i64,
    id: Uuid,
    summary: RunSummary,
}

fn matches(query: &JobRunQuery, summary: &RunSummary) -> bool {
    (query.states.is_empty() || query.states.contains(&summary.state))
        && query.trigger.as_ref().is_none_or(|t| summary.trigger.as_deref() == Some(t.as_str()))
        && query.node.as_ref().is_none_or(|n| &summary.node == n)
        && query.has_error.is_none_or(|e| summary.has_error == e)
}

pub(crate) fn run_info(record: &RunRecord) -> Result<JobRunInfo, StoreError> {
    Ok(JobRunInfo {
        run: job_run_of(&record.view())?,
        state: record.state,
        node: record.node.clone(),
        started_at: instant(record.started_us)?,
        finished_at: record.finished_us.map(instant).transpose()?,
        error_code: record.error_code.clone(),
        error_message: record.error_message.clone(),
    })
}
