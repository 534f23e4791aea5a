//! Run history: queries, counts and retention (SPEC §9 `runs`/`count_runs`, §10 step 5).
//!
//! Queries scan a covering index (by job when the query names one, else by scheduled
//! time) newest first, with snapshot reads, and filter on the summaries the index
//! carries. A scan reads at most [`SCAN_BUDGET`] index entries per transaction and
//! continues in a new transaction after the last key it saw, so no query meets the
//! five-second limit however large history is. A query spanning several transactions is
//! not one consistent snapshot (runs may finish in between).

use std::time::Duration;

use chrono::{DateTime, Utc};
use uuid::Uuid;

use super::jobs::instant;
use super::records::{RunRecord, RunSummary};
use super::{codec, job_run_of, micros, KvJobStore, StoreError};
use crate::job::{JobRunInfo, JobRunQuery};
use crate::kv::{run, Kv, KvTransaction, RangeRequest};
use crate::leader::Fence;

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

    /// Walks the matching index entries newest first, calling `visit` until it returns
    /// false, in transactions of at most [`SCAN_BUDGET`] entries.
    async fn scan_history(
        &self,
        query: &JobRunQuery,
        mut visit: impl FnMut(Uuid, &RunSummary) -> bool,
    ) -> Result<(), StoreError> {
        let from = query.from.map_or(i64::MIN, micros);
        let to = query.to.map_or(i64::MAX, micros);
        let (begin, mut end) = match &query.job {
            Some(job) => self.keys.history_of_job(job.as_str(), from, to),
            None => self.keys.history_between(from, to),
        };
        loop {
            let range = RangeRequest::new(begin.clone(), end.clone()).limit(SCAN_BUDGET).reversed();
            let page = run(&self.kv, self.options.retry, |txn, _| {
                let range = &range;
                async move { Ok::<_, StoreError>(txn.get_range(range, true).await?) }
            })
            .await?;
            for (key, value) in &page.pairs {
                let summary: RunSummary = codec::decode(value, "run summary")?;
                if matches(query, &summary) && !visit(self.keys.history_run_of(key, query.job.is_some())?, &summary) {
                    return Ok(());
                }
            }
            match page.pairs.last() {
                Some((last, _)) if page.more => end = last.clone(),
                _ => return Ok(()),
            }
        }
    }

    /// Deletes finished runs that ended before `cutoff`, in batches; returns how many.
    ///
    /// # Errors
    /// Store errors.
    /// With `fence`, each batch commits only while that leader term is current.
    pub async fn purge_history(&self, cutoff: DateTime<Utc>, fence: Option<&Fence>) -> Result<usize, StoreError> {
        let mut deleted = 0;
        loop {
            let batch = run(&self.kv, self.options.retry, |txn, _| async move {
                let tx = self.tx(txn);
                if let Some(fence) = fence {
                    fence.check(&tx.txn, &self.keys).await?;
                }
                let (begin, end) = self.keys.finished_before(micros(cutoff));
                let listing = tx.txn.get_range(&RangeRequest::new(begin, end).limit(RETENTION_BATCH), true).await?;
                let ids = listing
                    .pairs
                    .iter()
                    .map(|(key, _)| self.keys.finished_run_of(key))
                    .collect::<Result<Vec<_>, _>>()?;
                // Read together (one round trip on FoundationDB) and serializably: a replay
                // finds the runs gone and skips them.
                let mut runs = tx.prefetch_runs(ids.iter().copied()).await?;
                let mut count = 0;
                for ((key, _), &id) in listing.pairs.iter().zip(&ids) {
                    if let Some(stored) = tx.run_prefetched(&mut runs, id).await? {
                        if stored.state.is_final() {
                            self.delete_run(&tx, &stored);
                            count += 1;
                        }
                    } else {
                        tx.txn.clear(key);
                    }
                }
                Ok::<_, StoreError>((count, listing.pairs.len()))
            })
            .await?;
            deleted += batch.0;
            if batch.1 < RETENTION_BATCH {
                return Ok(deleted);
            }
        }
    }

    /// Deletes history older than `retention` before `now` (none when `retention` is
    /// `None`, i.e. kept forever).
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
            Some(cutoff) => self.purge_history(cutoff, fence).await,
        }
    }
}

fn matches(query: &JobRunQuery, summary: &RunSummary) -> bool {
    (query.states.is_empty() || query.states.contains(&summary.state))
        && query.trigger.as_ref().is_none_or(|t| summary.trigger.as_deref() == Some(t.as_str()))
        && query.node.as_ref().is_none_or(|n| &summary.node == n)
        && query.has_error.is_none_or(|e| summary.has_error == e)
}

pub(crate) fn run_info(record: &RunRecord) -> Result<JobRunInfo, StoreError> {
    Ok(JobRunInfo {
        run: job_run_of(record)?,
        state: record.state,
        node: record.node.clone(),
        started_at: instant(record.started_us)?,
        finished_at: record.finished_us.map(instant).transpose()?,
        error_code: record.error_code.clone(),
        error_message: record.error_message.clone(),
    })
}
