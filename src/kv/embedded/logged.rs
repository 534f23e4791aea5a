//! The embedded store's engine as the journal sees it: the commit log in front of a data
//! engine, folded into it on a thread of its own.
//!
//! A B-tree written at every group commit rewrites each page a commit touches, and the
//! store's keys (run ids, triggers across every job) touch pages all over the file: under
//! load the writer spent its time rewriting pages, not writing data. So a group commit is
//! acknowledged once it is appended to the [`CommitLog`] (one row, one fsync), and a
//! folder thread writes the log's batches into the data engine, many at a time (a key
//! written by many of them, as a trigger is at each fire, is written once), then tells
//! the log which rows it may delete. At open the data engine's contents, then the log's
//! rows past its version, make the store.

use std::collections::BTreeMap;
use std::sync::mpsc::{channel, Sender};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;

use super::super::journal::{Batch, Gathered, JournalEngine, JournalError, Loaded, Mutation};
use super::super::Version;
use super::log::CommitLog;

/// When the folder writes, and how far it may fall behind.
#[derive(Debug, Clone, Copy)]
pub(super) struct FoldLimits {
    /// The bytes of writes the log gathers before they are folded into the data engine.
    pub(super) fold_bytes: usize,
    /// The bytes of writes not yet folded past which a group commit waits for the folder
    /// (what bounds the log and the folder's memory).
    pub(super) unfolded_max: usize,
}

impl FoldLimits {
    /// Folds of `fold_bytes`; the folder may fall three folds behind the one it gathers.
    pub(super) fn new(fold_bytes: usize) -> Self {
        Self { fold_bytes, unfolded_max: fold_bytes.saturating_mul(4) }
    }
}

/// The default bytes of a fold: 32 MiB.
pub(super) const FOLD_BYTES: usize = 32 << 20;

/// What the writer and the folder share.
#[derive(Default)]
struct Backlog {
    state: Mutex<BacklogState>,
    changed: Condvar,
}

#[derive(Default)]
struct BacklogState {
    /// Bytes appended to the log and not yet folded.
    unfolded: usize,
    /// Every batch at or below this version is in the data engine.
    folded: Version,
    failed: Option<JournalError>,
}

impl Backlog {
    fn lock(&self) -> std::sync::MutexGuard<'_, BacklogState> {
        self.state.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// The log and its folder: a [`JournalEngine`] over a data engine.
pub(super) struct LoggedEngine {
    log: CommitLog,
    /// The data engine until [`JournalEngine::load`] hands it to the folder.
    data: Option<Box<dyn JournalEngine>>,
    limits: FoldLimits,
    backlog: Arc<Backlog>,
    to_folder: Option<Sender<Batch>>,
    folder: Option<JoinHandle<()>>,
    /// The log's rows through this version are deleted.
    forgotten: Version,
}

impl LoggedEngine {
    /// `log` in front of `data`.
    pub(super) fn new(log: CommitLog, data: Box<dyn JournalEngine>, limits: FoldLimits) -> Self {
        Self { log, data: Some(data), limits, backlog: Arc::default(), to_folder: None, folder: None, forgotten: 0 }
    }
}

impl JournalEngine for LoggedEngine {
    /// The data engine's contents with the log's later batches applied; the folder starts.
    fn load(&mut self) -> Result<Loaded, JournalError> {
        let Some(mut data) = self.data.take() else {
            return Err(JournalError("the store was loaded already".into()));
        };
        let (mut pairs, folded) = data.load().map_err(|e| JournalError(format!("its data file: {e}")))?;
        let batches = self.log.replay(folded).map_err(|e| JournalError(format!("its commit log: {e}")))?;
        let version = batches.last().map_or(folded, |batch| batch.version.max(folded));
        // The rows past the data's version (a crash came before they were folded) are
        // folded with the next writes; those at or below it were, and are deleted then.
        let mut unfolded = Gathered::default();
        if !batches.is_empty() {
            let mut map: BTreeMap<Vec<u8>, Vec<u8>> = pairs.into_iter().collect();
            for batch in batches {
                for Mutation { key, value, .. } in &batch.mutations {
                    match value {
                        Some(value) => map.insert(key.clone(), value.clone()),
                        None => map.remove(key),
                    };
                }
                unfolded.add(batch.mutations);
            }
            pairs = map.into_iter().collect();
        }
        let unfolded = unfolded.into_batch(version);
        self.forgotten = 0;
        {
            let mut state = self.backlog.lock();
            state.folded = folded;
            state.unfolded = unfolded.bytes();
        }
        let (sender, receiver) = channel::<Batch>();
        if !unfolded.mutations.is_empty() {
            sender.send(unfolded).map_err(|_| JournalError("the store's folder thread is gone".into()))?;
        }
        let backlog = self.backlog.clone();
        let fold_bytes = self.limits.fold_bytes;
        let folder = std::thread::Builder::new()
            .name("sundial-fold".into())
            .spawn(move || fold_loop(&receiver, data.as_mut(), &backlog, fold_bytes))
            .map_err(|e| JournalError(format!("starting the store's folder thread: {e}")))?;
        self.to_folder = Some(sender);
        self.folder = Some(folder);
        Ok((pairs, version))
    }

    fn write(&mut self, batch: Batch) -> Result<(), JournalError> {
        let folded = {
            let mut state = self.backlog.lock();
            while state.failed.is_none() && state.unfolded > self.limits.unfolded_max {
                state = self.backlog.changed.wait(state).unwrap_or_else(std::sync::PoisonError::into_inner);
            }
            if let Some(failed) = &state.failed {
                return Err(failed.clone());
            }
            state.folded
        };
        let forget = (folded > self.forgotten).then_some(folded);
        self.log.append(&batch, forget)?;
        self.forgotten = self.forgotten.max(folded);
        self.backlog.lock().unfolded += batch.bytes();
        let sent = self.to_folder.as_ref().is_some_and(|folder| folder.send(batch).is_ok());
        if sent {
            return Ok(());
        }
        // The folder ended: it says why when a fold failed.
        let failed = self.backlog.lock().failed.clone();
        Err(failed.unwrap_or_else(|| JournalError("the store's folder thread is gone".into())))
    }
}

impl Drop for LoggedEngine {
    /// Folds what the log holds and deletes its rows, so the next open reads the data
    /// engine only (a store dropped by a crash replays them instead).
    fn drop(&mut self) {
        self.to_folder = None;
        if let Some(folder) = self.folder.take() {
            let _ = folder.join();
        }
        let state = self.backlog.lock();
        if state.failed.is_none() && state.folded > self.forgotten {
            let _ = self.log.forget(state.folded).and_then(|()| self.log.shrink_if_empty());
        }
    }
}

/// The folder: gathers batches until they hold `fold_bytes` of writes (or the log
/// closes), writes them to `data` as one batch, and reports the version folded, until
/// the writer closes its end or `data` refuses a write.
fn fold_loop(
    receiver: &std::sync::mpsc::Receiver<Batch>,
    data: &mut dyn JournalEngine,
    backlog: &Backlog,
    fold_bytes: usize,
) {
    let mut gathered = Gathered::default();
    let (mut version, mut bytes) = (0, 0);
    loop {
        let next = receiver.recv();
        let closed = next.is_err();
        for batch in next.into_iter().chain(receiver.try_iter()) {
            bytes += batch.bytes();
            version = batch.version;
            gathered.add(batch.mutations);
        }
        if bytes > 0 && (bytes >= fold_bytes || closed) {
            let mut batch = std::mem::take(&mut gathered).into_batch(version);
            // A key made and deleted within the fold (a run's running markers, a fire's
            // due entry) never reaches the data file.
            batch.mutations.retain(Mutation::changes);
            let written = data.write(batch);
            let mut state = backlog.lock();
            match written {
                Ok(()) => {
                    state.folded = version;
                    state.unfolded = state.unfolded.saturating_sub(bytes);
                    bytes = 0;
                }
                Err(error) => state.failed = Some(error),
            }
            backlog.changed.notify_all();
            if state.failed.is_some() {
                return;
            }
        }
        if closed {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A data engine in memory that records its writes and can be told to fail.
    #[derive(Clone, Default)]
    struct Recorded(Arc<Mutex<(Vec<Batch>, bool)>>);

    impl JournalEngine for Recorded {
        fn load(&mut self) -> Result<Loaded, JournalError> {
            let (writes, _) = &*self.0.lock().unwrap();
            let mut gathered = Gathered::default();
            gathered.add(writes.iter().flat_map(|b| b.mutations.clone()));
            let batch = gathered.into_batch(writes.last().map_or(0, |b| b.version));
            let pairs = batch.mutations.into_iter().filter_map(|m| Some((m.key, m.value?))).collect();
            Ok((pairs, batch.version))
        }

        fn write(&mut self, batch: Batch) -> Result<(), JournalError> {
            let (writes, fail) = &mut *self.0.lock().unwrap();
            if *fail {
                return Err(JournalError("disk full".into()));
            }
            writes.push(batch);
            Ok(())
        }
    }

    fn set(version: Version, key: &str, value: &str) -> Batch {
        Batch { version, mutations: vec![Mutation { key: key.into(), value: Some(value.into()), existed: true }] }
    }

    fn engine(dir: &sundial_test_support::dir::TempDir, data: &Recorded, fold_bytes: usize) -> LoggedEngine {
        let log = CommitLog::open(&dir.path().join("log.sqlite")).unwrap();
        LoggedEngine::new(log, Box::new(data.clone()), FoldLimits { fold_bytes, unfolded_max: 1 << 20 })
    }

    #[test]
    fn batches_are_folded_together_once_they_hold_enough_and_the_rest_when_closed() {
        let dir = sundial_test_support::dir::TempDir::new("fold");
        let data = Recorded::default();
        let mut logged = engine(&dir, &data, 8);
        assert_eq!(logged.load().unwrap(), (Vec::new(), 0));
        // Each batch holds 2 bytes: the fourth reaches 8 and folds the four as one.
        for (version, value) in [(1, "1"), (2, "2"), (3, "3"), (4, "4"), (5, "5")] {
            logged.write(set(version, "k", value)).unwrap();
        }
        drop(logged);
        let writes = data.0.lock().unwrap().0.clone();
        let folded: Vec<(Version, usize)> = writes.iter().map(|b| (b.version, b.mutations.len())).collect();
        assert!(
            folded == [(4, 1), (5, 1)] || folded == [(5, 1)],
            "a key written by many batches is written once a fold: {folded:?}"
        );
        assert_eq!(writes.last().unwrap().mutations[0].value.as_deref(), Some(b"5".as_slice()));
        // Closed cleanly: the log's rows are gone, the data engine has everything.
        let log = CommitLog::open(&dir.path().join("log.sqlite")).unwrap();
        assert!(log.replay(0).unwrap().is_empty());
    }

    #[test]
    fn after_a_crash_the_log_rows_past_the_data_engines_version_are_replayed() {
        let dir = sundial_test_support::dir::TempDir::new("replay");
        let data = Recorded::default();
        let mut logged = engine(&dir, &data, 1 << 20);
        logged.load().unwrap();
        logged.write(set(1, "a", "1")).unwrap();
        logged.write(set(2, "b", "1")).unwrap();
        // A crash: nothing folded, the log as it was written.
        std::mem::forget(logged);
        assert!(data.0.lock().unwrap().0.is_empty());
        let mut reopened = engine(&dir, &data, 1 << 20);
        let (mut pairs, version) = reopened.load().unwrap();
        pairs.sort();
        assert_eq!(version, 2);
        assert_eq!(pairs, [(b"a".to_vec(), b"1".to_vec()), (b"b".to_vec(), b"1".to_vec())]);
        // A later write goes on from there; a deletion in the log removes a key.
        let delete = Mutation { key: b"a".to_vec(), value: None, existed: true };
        reopened.write(Batch { version: 3, mutations: vec![delete] }).unwrap();
        std::mem::forget(reopened);
        let mut third = engine(&dir, &data, 4);
        let (pairs, version) = third.load().unwrap();
        assert_eq!((pairs, version), (vec![(b"b".to_vec(), b"1".to_vec())], 3));
        // The rows replayed are folded with the next writes before they are deleted: a
        // fold, then a crash, loses none of them.
        third.write(set(4, "c", "1")).unwrap();
        while data.0.lock().unwrap().0.is_empty() {
            std::thread::yield_now();
        }
        third.write(set(5, "d", "1")).unwrap();
        std::mem::forget(third);
        let (mut pairs, version) = engine(&dir, &data, 1 << 20).load().unwrap();
        pairs.sort();
        let keys: Vec<&[u8]> = pairs.iter().map(|(k, _)| k.as_slice()).collect();
        assert_eq!((keys, version), (vec![b"b".as_slice(), b"c", b"d"], 5));
    }

    #[test]
    fn a_fold_the_data_engine_refuses_fails_the_writes_after_it() {
        let dir = sundial_test_support::dir::TempDir::new("fold-fails");
        let data = Recorded::default();
        data.0.lock().unwrap().1 = true;
        let mut logged = engine(&dir, &data, 1);
        logged.load().unwrap();
        logged.write(set(1, "a", "1")).unwrap();
        let mut failed = None;
        for version in 2..1_000 {
            if let Err(error) = logged.write(set(version, "a", "1")) {
                failed = Some(error);
                break;
            }
            std::thread::yield_now();
        }
        assert_eq!(failed.map(|e| e.0), Some("disk full".to_owned()));
    }
}
