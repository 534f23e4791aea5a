//! The embedded durable store: a [`MemoryKv`] whose commits are written to a
//! [redb](https://docs.rs/redb) file before they are acknowledged (see [`super::journal`]
//! for how), so a single node keeps its jobs, runs and history across restarts and
//! crashes without a database server.
//!
//! # Durability contract
//!
//! - A commit acknowledged to its caller is on disk: written in a redb transaction with
//!   immediate durability (synced), grouped with the commits that came while the previous
//!   write ran. `kill -9` or a power cut at any instant loses no acknowledged commit.
//! - Nothing a transaction reads can be lost: reads are served at the last version on
//!   disk.
//! - A write cut short by a crash is not half there: redb commits are atomic (checksummed
//!   commit slots), and the file opens as of the last complete commit.
//! - A file that is not a sound sundial store (another program's file, a damaged one, a
//!   newer layout) is refused at open with an error naming it, never reset.
//! - One owner: the data directory's `LOCK` file is locked by the operating system for
//!   as long as the store is open; a second process (or a second open in this one) gets
//!   [`EmbeddedError::Locked`]. The lock goes with the process, however it ends.
//! - Space: deleted keys (expired history, deleted jobs) free their pages for later
//!   writes; the file does not grow without bound under a steady load.
//!
//! The whole data set is held in memory, as `MemoryKv` holds it, and read from the file at
//! open.

use std::fs::{File, OpenOptions};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::thread::JoinHandle;

use redb::{Database, ReadableDatabase, ReadableTable, TableDefinition, TableError};

use super::journal::{JournalEngine, JournalEntry, JournalError, Loaded};
use super::memory::MemoryKv;
use super::Version;
use crate::time::Clock;

/// Every key and its latest value.
const DATA: TableDefinition<&[u8], &[u8]> = TableDefinition::new("data");
/// `version`: the last commit written; `layout`: the file's layout version.
const META: TableDefinition<&str, u64> = TableDefinition::new("meta");
/// The layout this build writes and reads.
const LAYOUT: u64 = 1;
/// The data file's name in the data directory.
pub const DATA_FILE: &str = "sundial.redb";
/// The lock file's name in the data directory.
pub const LOCK_FILE: &str = "LOCK";

/// Why an embedded store did not open.
#[derive(Debug, thiserror::Error)]
pub enum EmbeddedError {
    /// Another process (or another open store in this one) has the directory.
    #[error("{path} is in use by another sundial process (its lock file is held)")]
    Locked {
        /// The lock file.
        path: PathBuf,
    },
    /// The directory or its files could not be created or opened.
    #[error("{path}: {message}")]
    Io {
        /// The file or directory.
        path: PathBuf,
        /// What the operating system said.
        message: String,
    },
    /// The data file is not a sound sundial store; it is left as it is.
    #[error("{path} is not a usable sundial store ({message}); it was left untouched")]
    Corrupt {
        /// The data file.
        path: PathBuf,
        /// What is wrong with it.
        message: String,
    },
}

/// An open embedded store: the [`MemoryKv`] to use, the directory's lock and the journal's
/// writer. Dropping it closes the store (see [`Self::close`]).
#[derive(Debug)]
pub struct EmbeddedKv {
    kv: MemoryKv,
    writer: Option<JoinHandle<()>>,
    dir: PathBuf,
    /// Held (locked) while the store is open.
    _lock: File,
}

impl EmbeddedKv {
    /// Opens (creating if need be) the store in directory `dir`, reading its data into
    /// memory, with versions on `clock`.
    ///
    /// # Errors
    /// [`EmbeddedError`]: the directory is in use, cannot be created, or holds a file that
    /// is not a sound store.
    pub fn open(dir: &Path, clock: Arc<dyn Clock>) -> Result<Self, EmbeddedError> {
        let io = |path: &Path| {
            let path = path.to_path_buf();
            move |e: std::io::Error| EmbeddedError::Io { path, message: e.to_string() }
        };
        std::fs::create_dir_all(dir).map_err(io(dir))?;
        let lock_path = dir.join(LOCK_FILE);
        let lock =
            OpenOptions::new().create(true).truncate(false).write(true).open(&lock_path).map_err(io(&lock_path))?;
        match lock.try_lock() {
            Ok(()) => {}
            Err(std::fs::TryLockError::WouldBlock) => return Err(EmbeddedError::Locked { path: lock_path }),
            Err(std::fs::TryLockError::Error(e)) => return Err(io(&lock_path)(e)),
        }
        let path = dir.join(DATA_FILE);
        let mut engine = RedbEngine::open(&path)?;
        let (pairs, version) =
            engine.load().map_err(|e| EmbeddedError::Corrupt { path: path.clone(), message: e.0 })?;
        let (kv, writer) = MemoryKv::journaled(clock, pairs, version, Box::new(engine))
            .map_err(|e| EmbeddedError::Io { path: path.clone(), message: e.0 })?;
        Ok(Self { kv, writer: Some(writer), dir: dir.to_path_buf(), _lock: lock })
    }

    /// The store: a handle to clone and use as any [`MemoryKv`].
    pub fn kv(&self) -> &MemoryKv {
        &self.kv
    }

    /// The data directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Closes the store: commits from now on fail (1031), the commits made so far are
    /// written, then the directory's lock is released.
    pub fn close(mut self) {
        self.shut();
    }

    fn shut(&mut self) {
        self.kv.close_journal();
        if let Some(writer) = self.writer.take() {
            let _ = writer.join();
        }
    }
}

impl Drop for EmbeddedKv {
    fn drop(&mut self) {
        self.shut();
    }
}

/// The journal's engine: one redb file.
struct RedbEngine {
    db: Database,
}

impl RedbEngine {
    fn open(path: &Path) -> Result<Self, EmbeddedError> {
        let corrupt = |message: String| EmbeddedError::Corrupt { path: path.to_path_buf(), message };
        // redb asserts some of its file's structure instead of reporting it (a file cut
        // short fails an assertion at open): such a panic is a refusal like any other.
        let opened = std::panic::catch_unwind(|| Database::create(path)).map_err(|panic| {
            let what = panic
                .downcast_ref::<&str>()
                .map(|s| (*s).to_owned())
                .or_else(|| panic.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "the engine gave up reading it".to_owned());
            corrupt(what)
        })?;
        let db = match opened {
            Ok(db) => db,
            // redb reads a file that is not one of its own as invalid data.
            Err(redb::DatabaseError::Storage(redb::StorageError::Io(e)))
                if e.kind() != std::io::ErrorKind::InvalidData =>
            {
                return Err(EmbeddedError::Io { path: path.to_path_buf(), message: e.to_string() })
            }
            Err(e) => return Err(corrupt(e.to_string())),
        };
        Ok(Self { db })
    }
}

fn engine_error(e: impl std::fmt::Display) -> JournalError {
    JournalError(e.to_string())
}

impl JournalEngine for RedbEngine {
    fn load(&mut self) -> Result<Loaded, JournalError> {
        let read = self.db.begin_read().map_err(engine_error)?;
        let meta = match read.open_table(META) {
            Ok(meta) => meta,
            // A new file: written at the first commit.
            Err(TableError::TableDoesNotExist(_)) => return Ok((Vec::new(), 0)),
            Err(e) => return Err(engine_error(e)),
        };
        let layout = meta.get("layout").map_err(engine_error)?.map(|v| v.value());
        if layout != Some(LAYOUT) {
            let found = layout.map_or_else(|| "none".to_owned(), |v| v.to_string());
            return Err(JournalError(format!("layout {found}, this build reads {LAYOUT}")));
        }
        let version = meta.get("version").map_err(engine_error)?.map_or(0, |v| v.value());
        let data = read.open_table(DATA).map_err(engine_error)?;
        let mut pairs = Vec::new();
        for pair in data.iter().map_err(engine_error)? {
            let (key, value) = pair.map_err(engine_error)?;
            pairs.push((key.value().to_vec(), value.value().to_vec()));
        }
        let version = Version::try_from(version).map_err(engine_error)?;
        Ok((pairs, version))
    }

    fn write(&mut self, entries: &[JournalEntry]) -> Result<(), JournalError> {
        let txn = self.db.begin_write().map_err(engine_error)?;
        {
            let mut data = txn.open_table(DATA).map_err(engine_error)?;
            for entry in entries {
                for mutation in &entry.mutations {
                    match &mutation.value {
                        Some(value) => data.insert(mutation.key.as_slice(), value.as_slice()).map(drop),
                        None => data.remove(mutation.key.as_slice()).map(drop),
                    }
                    .map_err(engine_error)?;
                }
            }
            let mut meta = txn.open_table(META).map_err(engine_error)?;
            let last = entries.last().map_or(0, |entry| entry.version);
            meta.insert("version", u64::try_from(last).unwrap_or(0)).map_err(engine_error)?;
            meta.insert("layout", LAYOUT).map_err(engine_error)?;
        }
        txn.commit().map_err(engine_error)
    }
}
