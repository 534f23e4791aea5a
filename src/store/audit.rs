//! The audit log in the store (`crate::audit`): one key per entry under `(19, at_us, id)`,
//! so entries list in time order, newest first by a reversed scan, and expire by a range
//! clear like history.

use super::history::SCAN_BUDGET;
use super::jobs::instant;
use super::{codec, Fence, KvJobStore, StoreError};
use crate::audit::{AuditAction, AuditEntry, AuditQuery};
use crate::kv::{key_after, run, Kv, KvTransaction, RangeRequest};
use crate::time::to_micros;
use chrono::{DateTime, Utc};
use parking_lot::Mutex;
use serde::{Deserialize, Serialize};

/// `(19, at_us, id)`: an audit entry as stored.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct AuditRecord {
    actor: String,
    action: AuditAction,
    target: String,
    node: String,
    error_code: Option<String>,
    error_message: Option<String>,
}

impl<K: Kv> KvJobStore<K> {
    /// Records `entry` (idempotent: a replay writes the same key and value).
    ///
    /// # Errors
    /// Store errors.
    pub async fn record_audit(&self, entry: &AuditEntry) -> Result<(), StoreError> {
        let key = self.keys.audit(to_micros(entry.at), entry.id);
        let value = codec::encode(&AuditRecord {
            actor: entry.actor.clone(),
            action: entry.action,
            target: entry.target.clone(),
            node: entry.node.clone(),
            error_code: entry.error_code.clone(),
            error_message: entry.error_message.clone(),
        });
        let (key, value) = (&key, &value);
        run(&self.kv, self.options.retry, |txn, _| async move {
            txn.set(key, value);
            Ok::<_, StoreError>(())
        })
        .await
    }

    /// The entries matching `query`, newest first, after `query.skip`, at most
    /// `query.limit`. Scans in transactions of at most [`SCAN_BUDGET`] entries with
    /// snapshot reads.
    ///
    /// # Errors
    /// `SCHEDULING_VALIDATION_002` for paging out of range; store errors.
    pub async fn audit(&self, query: &AuditQuery) -> Result<Vec<AuditEntry>, StoreError> {
        query.validate()?;
        let from = query.from.map_or(i64::MIN, to_micros);
        let to = query.to.map_or(i64::MAX, to_micros);
        let (begin, mut end) = self.keys.audit_between(from, to);
        let mut to_skip = query.skip;
        let mut found = Vec::new();
        loop {
            let range = RangeRequest::new(begin.clone(), end.clone()).limit(SCAN_BUDGET).reversed();
            let range = &range;
            let page = run(&self.kv, self.options.retry, |txn, _| async move {
                Ok::<_, StoreError>(txn.get_range(range, true).await?)
            })
            .await?;
            for (key, value) in &page.pairs {
                let entry = self.audit_entry(key, value)?;
                if !query.matches(&entry) {
                    continue;
                }
                if to_skip > 0 {
                    to_skip -= 1;
                    continue;
                }
                found.push(entry);
                if found.len() >= query.limit as usize {
                    return Ok(found);
                }
            }
            match page.pairs.last() {
                Some((last, _)) if page.more => end = last.to_vec(),
                _ => return Ok(found),
            }
        }
    }

    fn audit_entry(&self, key: &[u8], value: &[u8]) -> Result<AuditEntry, StoreError> {
        let (at_us, id) = self.keys.audit_entry_of(key)?;
        let record: AuditRecord = codec::decode(value, "audit entry")?;
        Ok(AuditEntry {
            id,
            at: instant(at_us)?,
            actor: record.actor,
            action: record.action,
            target: record.target,
            node: record.node,
            error_code: record.error_code,
            error_message: record.error_message,
        })
    }

    /// Deletes the audit entries made before `cutoff`; returns how many.
    ///
    /// # Errors
    /// Store errors. With `fence`, each batch commits only while that leader term is
    /// current.
    pub async fn purge_audit(&self, cutoff: DateTime<Utc>, fence: Option<&Fence>) -> Result<usize, StoreError> {
        let (mut begin, end) = self.keys.audit_between(i64::MIN, to_micros(cutoff));
        let mut deleted = 0;
        loop {
            let range = RangeRequest::new(begin, end.clone()).limit(super::RETENTION_BATCH);
            let range = &range;
            // The keys the attempts of this batch cleared, for a replay after an ambiguous
            // commit to count those the attempt that committed cleared.
            let earlier: Mutex<Vec<Vec<u8>>> = Mutex::default();
            let earlier = &earlier;
            let (count, last) = run(&self.kv, self.options.retry, |txn, maybe| async move {
                if let Some(fence) = fence {
                    fence.check(&txn, &self.keys).await?;
                }
                let listing = txn.get_range(range, false).await?;
                let mut cleared: Vec<Vec<u8>> = Vec::with_capacity(listing.pairs.len());
                for (key, _) in &listing.pairs {
                    txn.clear(key);
                    cleared.push(key.to_vec());
                }
                let before = std::mem::take(&mut *earlier.lock());
                let mut count = cleared.len();
                if maybe.0 {
                    for key in before {
                        if !cleared.contains(&key) && txn.get(&key, false).await?.is_none() {
                            count += 1;
                        }
                    }
                }
                *earlier.lock() = cleared;
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
}
