//! Stored schedule texts, parsed once per store rather than once per transaction.
//!
//! Every fire an acquisition takes and every interval run a completion ends needs its
//! trigger's schedule, which is stored as text. Parsing one costs a few thousand
//! instructions (about 2 % of a simulation's, more with many distinct jobs per
//! acquisition), and a cluster has few distinct texts, so a store keeps what it parsed. A schedule is a pure function of its text (its
//! calendar is looked up by name when used), so a cached value is never stale.

use std::collections::BTreeMap;
use std::sync::Arc;

use parking_lot::Mutex;

use crate::schedule::JobSchedule;

/// Texts kept at most; when full, the cache starts over (cheap, and a workload with
/// more distinct schedules than this parses as it did without a cache).
const CAPACITY: usize = 4096;

/// Parsed schedules by text, shared by every transaction of one store.
#[derive(Debug, Default)]
pub(super) struct ParsedSchedules {
    parsed: Mutex<BTreeMap<String, Result<Arc<JobSchedule>, String>>>,
}

impl ParsedSchedules {
    /// `text` parsed, or why it does not parse.
    pub(super) fn get(&self, text: &str) -> Result<Arc<JobSchedule>, String> {
        if let Some(parsed) = self.lock().get(text) {
            return parsed.clone();
        }
        // Parsed outside the lock: another transaction may parse the same text meanwhile,
        // with the same result.
        let parsed = text.parse::<JobSchedule>().map(Arc::new).map_err(|e| e.to_string());
        let mut cache = self.lock();
        if cache.len() >= CAPACITY {
            cache.clear();
        }
        cache.insert(text.to_owned(), parsed.clone());
        parsed
    }

    fn lock(&self) -> parking_lot::MutexGuard<'_, BTreeMap<String, Result<Arc<JobSchedule>, String>>> {
        self.parsed.lock()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_text_is_parsed_once_and_errors_are_kept_too() {
        let cache = ParsedSchedules::default();
        let first = cache.get("cron */5 * * * * *").unwrap();
        let again = cache.get("cron */5 * * * * *").unwrap();
        assert!(Arc::ptr_eq(&first, &again), "the second lookup is served from the cache");
        assert_eq!(*first, "cron */5 * * * * *".parse::<JobSchedule>().unwrap());
        let bad = cache.get("cron not a schedule").unwrap_err();
        assert_eq!(cache.get("cron not a schedule").unwrap_err(), bad);
    }

    #[test]
    fn a_full_cache_starts_over_and_still_answers() {
        let cache = ParsedSchedules::default();
        let text = |seconds: u64| JobSchedule::every(std::time::Duration::from_secs(seconds)).unwrap().to_string();
        for seconds in 1..=CAPACITY as u64 + 1 {
            cache.get(&text(seconds)).unwrap();
        }
        assert_eq!(cache.lock().len(), 1, "cleared when full, then the new text kept");
        assert!(cache.get(&text(7)).is_ok());
    }
}
