//! The embedded durable store: a [`MemoryKv`] whose commits are written to a storage
//! engine on disk before they are acknowledged (see [`super::journal`] for how), so a
//! single node keeps its jobs, runs and history across restarts and crashes without a
//! database server. The engine is SQLite (bundled, through `rusqlite`) in WAL mode; redb
//! is the other engine measured (feature `embedded-redb`; why SQLite: `docs/performance.md`,
//! "The embedded store").
//!
//! # Durability contract
//!
//! - A commit acknowledged to its caller is on disk: written in one SQLite transaction
//!   with the commits that came while the previous write ran, appended to the
//!   write-ahead log and synced (`synchronous = FULL`). `kill -9` or a power cut at any
//!   instant loses no acknowledged commit.
//! - Nothing a transaction reads can be lost: reads are served at the last version on
//!   disk.
//! - A write cut short by a crash is not half there: each frame of the log is
//!   checksummed, and a torn or half-written tail is discarded at open (the store opens
//!   as of its last whole commit).
//! - A file that is not a sound sundial store (another program's file, a damaged or
//!   truncated one, a newer layout) is refused at open with an error naming it, and left
//!   as it was.
//! - One owner: the data directory's `LOCK` file is locked by the operating system for
//!   as long as the store is open; a second process (or a second open in this one) gets
//!   [`EmbeddedError::Locked`]. The lock goes with the process, however it ends.
//! - Space: deleted keys (expired history, deleted jobs) free their pages for later
//!   writes; the file does not grow without bound under a steady load. The log is
//!   checkpointed into the database as it grows.
//!
//! The whole data set is held in memory, as `MemoryKv` holds it, and read from the file at
//! open.

use std::fs::{File, OpenOptions};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::thread::JoinHandle;

#[cfg(feature = "embedded-redb")]
mod redb_engine;
mod sqlite_engine;

use super::journal::JournalEngine;
use super::memory::MemoryKv;
use crate::time::{Clock, NoSleep, Sleeper};

/// The layout this build writes and reads.
const LAYOUT: u64 = 1;
/// The data file's name in the data directory (SQLite's database; its write-ahead log is
/// beside it, with `-wal` appended).
pub const DATA_FILE: &str = "sundial.sqlite";
/// The redb engine's data file.
pub const REDB_FILE: &str = "sundial.redb";

/// The storage engine under an embedded store.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum EmbeddedEngine {
    /// SQLite in WAL mode (the default), [`DATA_FILE`].
    #[default]
    Sqlite,
    /// redb, a copy-on-write B-tree file, [`REDB_FILE`] (feature `embedded-redb`).
    #[cfg(feature = "embedded-redb")]
    Redb,
}
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
        Self::open_with_sleeper(dir, clock, Arc::new(NoSleep))
    }

    /// [`Self::open`], with retries' backoff slept on `sleeper` (a node's: its runtime's
    /// timer; [`Self::open`]'s does not wait).
    ///
    /// # Errors
    /// As [`Self::open`].
    pub fn open_with_sleeper(
        dir: &Path,
        clock: Arc<dyn Clock>,
        sleeper: Arc<dyn Sleeper>,
    ) -> Result<Self, EmbeddedError> {
        Self::open_with_engine(dir, clock, sleeper, EmbeddedEngine::default())
    }

    /// [`Self::open_with_sleeper`] on `engine`.
    ///
    /// # Errors
    /// As [`Self::open`].
    pub fn open_with_engine(
        dir: &Path,
        clock: Arc<dyn Clock>,
        sleeper: Arc<dyn Sleeper>,
        engine: EmbeddedEngine,
    ) -> Result<Self, EmbeddedError> {
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
        let (path, mut engine): (PathBuf, Box<dyn JournalEngine>) = match engine {
            EmbeddedEngine::Sqlite => {
                let path = dir.join(DATA_FILE);
                let engine = sqlite_engine::SqliteEngine::open(&path)?;
                (path, Box::new(engine))
            }
            #[cfg(feature = "embedded-redb")]
            EmbeddedEngine::Redb => {
                let path = dir.join(REDB_FILE);
                let engine = redb_engine::RedbEngine::open(&path)?;
                (path, Box::new(engine))
            }
        };
        let (pairs, version) =
            engine.load().map_err(|e| EmbeddedError::Corrupt { path: path.clone(), message: e.0 })?;
        let (kv, writer) = MemoryKv::journaled(clock, sleeper, pairs, version, engine)
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
