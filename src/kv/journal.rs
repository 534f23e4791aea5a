//! The journal of a durable [`MemoryKv`](super::memory::MemoryKv): its commits, on their way to a
//! storage engine on disk.
//!
//! A durable store is a `MemoryKv` that keeps every transaction rule it has (conflicts,
//! versions, read-your-writes, watches) and adds three things:
//!
//! - **Each commit's writes are recorded** as they are applied (each key's new value, or
//!   its deletion: what atomic ops, versionstamps and range clears came to) and handed to
//!   a writer thread in version order.
//! - **A commit is acknowledged once it is on disk.** The writer takes every commit
//!   waiting, writes them as one engine transaction and syncs it (a group commit: one
//!   fsync for all the commits that came while the last one ran), then tells their
//!   committers and their watchers.
//! - **Reads are served at the durable version.** A transaction's read version is never
//!   above the last commit on disk while later ones are still on their way, so nothing a
//!   transaction reads can be lost by a crash: a commit the writer has not finished is
//!   not acknowledged, not seen, and its watchers are not told. Conflicts are checked
//!   against every commit, on disk or not, as before.
//!
//! A write the engine refuses (a full or failing disk) stops the store: every commit
//! waiting is reported unknown (1021) and every later operation fails with 1031, so
//! nothing is acknowledged that is not on disk; the node reports its store unreachable
//! and must be restarted.

use std::collections::VecDeque;
use std::sync::mpsc::{Receiver, Sender};

use super::buffer::WatchSender;
use super::{KvError, Version};

/// One key's new value (`None`: deleted) in a commit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mutation {
    /// The key.
    pub key: Vec<u8>,
    /// Its value after the commit.
    pub value: Option<Vec<u8>>,
    /// Whether the key had a value before (in a [`Batch`]: before the batch's first write
    /// of it). `true` when not known. A key that had none and is deleted at the end need
    /// not be written at all (a run's running marker, set at its start, deleted at its end).
    pub existed: bool,
}

impl Mutation {
    /// Whether writing this can change what is on disk: not for a key that had no value
    /// and has none.
    pub fn changes(&self) -> bool {
        self.existed || self.value.is_some()
    }
}

/// The writes of one commit, in the order they were applied (a key may come twice: the
/// later wins).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JournalEntry {
    /// The commit's version.
    pub version: Version,
    /// Its writes.
    pub mutations: Vec<Mutation>,
}

/// Writes gathered from commits in order: each key's last value, and whether it had one
/// before the first of them.
#[derive(Debug, Default)]
pub struct Gathered(std::collections::BTreeMap<Vec<u8>, (Option<Vec<u8>>, bool)>);

impl Gathered {
    /// Adds `mutations`, later than those added before.
    pub fn add(&mut self, mutations: impl IntoIterator<Item = Mutation>) {
        for Mutation { key, value, existed } in mutations {
            match self.0.entry(key) {
                std::collections::btree_map::Entry::Occupied(mut slot) => slot.get_mut().0 = value,
                std::collections::btree_map::Entry::Vacant(slot) => {
                    slot.insert((value, existed));
                }
            }
        }
    }

    /// The writes as a batch as of `version`, in key order; emptied.
    pub fn into_batch(self, version: Version) -> Batch {
        let mutations = self.0.into_iter().map(|(key, (value, existed))| Mutation { key, value, existed }).collect();
        Batch { version, mutations }
    }
}

/// Every key with its value, and the version of the last commit written.
pub type Loaded = (Vec<(Vec<u8>, Vec<u8>)>, Version);

/// Commits written together: their writes in the order applied (a later write of a key
/// wins), or, once [gathered](Gathered), each key once in key order.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Batch {
    /// The version of the last commit in it.
    pub version: Version,
    /// Its writes, by key.
    pub mutations: Vec<Mutation>,
}

impl Batch {
    /// The bytes of its keys and values.
    pub fn bytes(&self) -> usize {
        self.mutations.iter().map(|m| m.key.len() + m.value.as_ref().map_or(0, Vec::len)).sum()
    }
}

/// A storage engine that keeps a durable store's data: the latest value of every key and
/// the version of the last commit written.
pub trait JournalEngine: Send + 'static {
    /// Every key with its value, in any order, and the version of the last commit written
    /// (0 for a new store).
    ///
    /// # Errors
    /// The data cannot be read back (a corrupt file is refused, never reset).
    fn load(&mut self) -> Result<Loaded, JournalError>;

    /// Writes `batch` as one transaction (its writes in order: a later write of a key
    /// wins), with its version as the last commit written, and returns once it is on disk
    /// (synced).
    ///
    /// # Errors
    /// The engine or the disk refused the write; nothing of it may be taken as written.
    fn write(&mut self, batch: Batch) -> Result<(), JournalError>;
}

/// A storage engine's failure.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct JournalError(pub String);

/// An engine's error as a [`JournalError`] (its message).
#[cfg_attr(not(feature = "embedded"), allow(dead_code))]
pub(super) fn engine_error(e: impl std::fmt::Display) -> JournalError {
    JournalError(e.to_string())
}

/// What a committer waits on: `Ok` once its commit is on disk.
pub(super) type DurableNotice = futures_channel::oneshot::Receiver<Result<(), KvError>>;

/// A commit applied in memory, not yet on disk.
struct PendingCommit {
    version: Version,
    /// Its committers (the transaction, once it asks) and the watchers it fired.
    acks: Vec<futures_channel::oneshot::Sender<Result<(), KvError>>>,
    notices: Vec<WatchSender>,
}

/// A durable store's journal, kept in the store's state (under its lock).
pub(super) struct JournalState {
    /// The writes of the commit being applied.
    collecting: Vec<Mutation>,
    /// The commits on their way to disk, oldest first.
    pending: VecDeque<PendingCommit>,
    /// To the writer thread (`None` once the journal failed or closed).
    sender: Option<Sender<JournalEntry>>,
    failed: Option<KvError>,
}

impl JournalState {
    /// A journal whose entries go to `sender`.
    #[cfg_attr(not(feature = "embedded"), allow(dead_code))]
    pub(super) fn new(sender: Sender<JournalEntry>) -> Self {
        Self { collecting: Vec::new(), pending: VecDeque::new(), sender: Some(sender), failed: None }
    }

    /// Records one write of the commit being applied.
    pub(super) fn record(&mut self, mutation: Mutation) {
        self.collecting.push(mutation);
    }

    /// The commit being applied got `version`; `notices` are the watches it fired.
    pub(super) fn committed(&mut self, version: Version, notices: Vec<WatchSender>) {
        let mutations = std::mem::take(&mut self.collecting);
        let sent = self.sender.as_ref().is_some_and(|sender| sender.send(JournalEntry { version, mutations }).is_ok());
        self.pending.push_back(PendingCommit { version, acks: Vec::new(), notices });
        if !sent {
            // The writer is gone: nothing waiting will be written.
            self.fail();
        }
    }

    /// What tells the committer of `version` that it is on disk: `None` when it is already
    /// (a read-only commit's version is its read version). Once the journal failed, a
    /// commit it could not take is unknown (1021), never acknowledged.
    pub(super) fn acknowledge(&mut self, version: Version) -> Option<DurableNotice> {
        let (sender, receiver) = futures_channel::oneshot::channel();
        match self.pending.iter_mut().rev().find(|p| p.version == version) {
            Some(pending) => pending.acks.push(sender),
            None if self.failed.is_some() => {
                let _ = sender.send(Err(KvError::new(KvError::COMMIT_UNKNOWN_RESULT)));
            }
            None => return None,
        }
        Some(receiver)
    }

    /// Tells `notify` once every commit applied so far is on disk (at once when all are).
    pub(super) fn notify_when_durable(&mut self, notify: WatchSender) {
        match self.pending.back_mut() {
            Some(last) => last.notices.push(notify),
            None => {
                let _ = notify.send(Ok(()));
            }
        }
    }

    /// The newest version at or below which every commit is on disk, while some commit
    /// is not (`None`: all are).
    pub(super) fn durable_version(&self) -> Option<Version> {
        self.pending.front().map(|first| first.version - 1)
    }

    /// The error every operation fails with once the journal failed.
    pub(super) fn failure(&self) -> Option<KvError> {
        self.failed.clone()
    }

    /// Every commit up to `version` is on disk: tells their committers and watchers.
    #[cfg_attr(not(feature = "embedded"), allow(dead_code))]
    pub(super) fn durable(&mut self, version: Version) {
        while self.pending.front().is_some_and(|first| first.version <= version) {
            let Some(done) = self.pending.pop_front() else { break };
            for ack in done.acks {
                let _ = ack.send(Ok(()));
            }
            for notify in done.notices {
                let _ = notify.send(Ok(()));
            }
        }
    }

    /// The engine refused a write: the commits waiting are unknown, and the store stops.
    pub(super) fn fail(&mut self) {
        let error = KvError::new(KvError::TRANSACTION_TIMED_OUT);
        self.failed = Some(error.clone());
        self.sender = None;
        for pending in self.pending.drain(..) {
            for ack in pending.acks {
                let _ = ack.send(Err(KvError::new(KvError::COMMIT_UNKNOWN_RESULT)));
            }
            for notify in pending.notices {
                let _ = notify.send(Err(error.clone()));
            }
        }
    }

    /// Closes the journal: later commits fail; the writer finishes the ones sent.
    #[cfg_attr(not(feature = "embedded"), allow(dead_code))]
    pub(super) fn close(&mut self) {
        self.sender = None;
        if self.failed.is_none() {
            self.failed = Some(KvError::new(KvError::TRANSACTION_TIMED_OUT));
        }
    }
}

/// The writer: takes every entry waiting (blocking for the first), writes them as one
/// engine transaction, then reports the last version written (or the failure) through
/// `settle`, until the store closes its end. `settle` returns `false` once the store is
/// gone.
#[cfg_attr(not(feature = "embedded"), allow(dead_code))]
pub(super) fn write_loop(
    receiver: Receiver<JournalEntry>,
    mut engine: Box<dyn JournalEngine>,
    settle: impl Fn(Result<Version, JournalError>) -> bool,
) {
    while let Ok(first) = receiver.recv() {
        let mut entries = vec![first];
        entries.extend(receiver.try_iter());
        let last = entries.last().map_or(0, |entry| entry.version);
        let batch = Batch { version: last, mutations: entries.into_iter().flat_map(|entry| entry.mutations).collect() };
        match engine.write(batch) {
            Ok(()) => {
                if !settle(Ok(last)) {
                    // The store is gone; finish what was sent.
                    continue;
                }
            }
            Err(error) => {
                settle(Err(error));
                return;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mutation(key: &str) -> Mutation {
        Mutation { key: key.as_bytes().to_vec(), value: Some(b"v".to_vec()), existed: true }
    }

    #[test]
    fn commits_are_acknowledged_in_order_once_written_and_reads_stay_below_the_first_unwritten() {
        let (sender, receiver) = std::sync::mpsc::channel();
        let mut journal = JournalState::new(sender);
        assert_eq!(journal.durable_version(), None, "nothing on its way");
        for version in [10, 11, 12] {
            journal.record(mutation("k"));
            journal.committed(version, Vec::new());
        }
        let entries: Vec<JournalEntry> = receiver.try_iter().collect();
        assert_eq!(
            entries.iter().map(|e| (e.version, e.mutations.len())).collect::<Vec<_>>(),
            [(10, 1), (11, 1), (12, 1)]
        );
        assert_eq!(journal.durable_version(), Some(9));
        let (mut first, mut third) = (journal.acknowledge(10).unwrap(), journal.acknowledge(12).unwrap());
        assert!(journal.acknowledge(9).is_none(), "a read-only commit's version is on disk already");
        let (watch, mut fired) = futures_channel::oneshot::channel();
        journal.notify_when_durable(watch);
        journal.durable(11);
        assert_eq!(first.try_recv().unwrap(), Some(Ok(())));
        assert_eq!(third.try_recv().unwrap(), None, "12 is not written yet");
        assert_eq!(fired.try_recv().unwrap(), None, "told once everything applied is written");
        assert_eq!(journal.durable_version(), Some(11));
        journal.durable(12);
        assert_eq!(third.try_recv().unwrap(), Some(Ok(())));
        assert_eq!(fired.try_recv().unwrap(), Some(Ok(())));
        assert_eq!(journal.durable_version(), None);
    }

    #[test]
    fn a_batch_holds_each_key_once_in_key_order_with_its_last_value() {
        let set = |key: &str, value: &str| Mutation { key: key.into(), value: Some(value.into()), existed: true };
        let clear = |key: &str| Mutation { key: key.into(), value: None, existed: true };
        let new = |mutation: Mutation| Mutation { existed: false, ..mutation };
        let mut gathered = Gathered::default();
        gathered.add([new(set("b", "1")), set("a", "1"), clear("b"), set("c", "1"), new(clear("d"))]);
        let first = gathered.into_batch(3);
        assert_eq!(first.mutations, [set("a", "1"), new(clear("b")), set("c", "1"), new(clear("d"))]);
        assert_eq!(first.bytes(), 6);
        let changes: Vec<bool> = first.mutations.iter().map(Mutation::changes).collect();
        assert_eq!(changes, [true, false, true, false], "b and d had no value before and have none after");
    }

    #[test]
    fn a_failed_or_missing_writer_leaves_commits_unknown_never_acknowledged() {
        let (sender, receiver) = std::sync::mpsc::channel();
        let mut journal = JournalState::new(sender);
        journal.committed(5, Vec::new());
        let mut waiting = journal.acknowledge(5).unwrap();
        journal.fail();
        assert_eq!(
            waiting.try_recv().unwrap().map(|r| r.map_err(|e| e.code())),
            Some(Err(KvError::COMMIT_UNKNOWN_RESULT))
        );
        assert!(journal.failure().is_some());
        // The writer thread is gone: a commit it can no longer take is unknown too.
        drop(receiver);
        let (sender, receiver) = std::sync::mpsc::channel();
        let mut journal = JournalState::new(sender);
        drop(receiver);
        journal.committed(7, Vec::new());
        let mut lost = journal.acknowledge(7).unwrap();
        assert_eq!(
            lost.try_recv().unwrap().map(|r| r.map_err(|e| e.code())),
            Some(Err(KvError::COMMIT_UNKNOWN_RESULT))
        );
        assert_eq!(journal.failure().map(|e| e.code()), Some(KvError::TRANSACTION_TIMED_OUT));
    }
}
