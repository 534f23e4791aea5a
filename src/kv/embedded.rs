//! The embedded durable store: a [`MemoryKv`] whose commits are on disk before they are
//! acknowledged (see [`super::journal`] for how), so a single node keeps its jobs, runs
//! and history across restarts and crashes without a database server.
//!
//! Two files hold it, both SQLite databases (bundled, through `rusqlite`) in WAL mode:
//! the commit log ([`LOG_FILE`]), to which each group commit is appended as one row, and
//! the data file ([`DATA_FILE`]), a table of every key's latest value, into which a
//! thread of its own folds the log's rows many at a time and then deletes them. A commit
//! costs one append and one fsync however its keys are spread; a key written by many
//! commits (a trigger, at each fire) reaches the data file once a fold. redb is the other
//! data engine measured (feature `embedded-redb`; why SQLite: `docs/performance.md`,
//! "The embedded store").
//!
//! # Durability contract
//!
//! - A commit acknowledged to its caller is on disk: appended to the commit log in one
//!   SQLite transaction with the commits that came while the previous append ran, and
//!   synced (`synchronous = FULL`). `kill -9` or a power cut at any instant loses no
//!   acknowledged commit.
//! - Nothing a transaction reads can be lost: reads are served at the last version on
//!   disk.
//! - A write cut short by a crash is not half there: each frame of SQLite's write-ahead
//!   logs is checksummed, and a torn or half-written tail is discarded at open (the store
//!   opens as of its last whole commit). A fold is one transaction of the data file that
//!   records the last version it holds; the log's rows are deleted only after it, and at
//!   open the rows past that version are applied again.
//! - A file that is not a sound sundial store (another program's file, a damaged or
//!   truncated one, a newer layout) is refused at open with an error naming it, and left
//!   as it was.
//! - One owner: the data directory's `LOCK` file is locked by the operating system for
//!   as long as the store is open; a second process (or a second open in this one) gets
//!   [`EmbeddedError::Locked`]. The lock goes with the process, however it ends.
//! - Space: folded rows of the log and deleted keys of the data file (expired history,
//!   deleted jobs) free their pages for later writes, and SQLite starts each write-ahead
//!   log again once it passes about 4 MB: the files do not grow without bound under a
//!   steady load. A store closed cleanly has folded its whole log.
//!
//! The whole data set is held in memory, as `MemoryKv` holds it, and read from the files
//! at open.

use std::fs::{File, OpenOptions};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::thread::JoinHandle;

mod log;
mod logged;
#[cfg(feature = "embedded-redb")]
mod redb_engine;
mod sqlite_engine;

use super::journal::JournalEngine;
use super::memory::MemoryKv;
use crate::time::{Clock, NoSleep, Sleeper};

/// The layout this build writes and reads.
const LAYOUT: u64 = 1;
/// The data file's name in the data directory (SQLite's database; its write-ahead log is
/// beside it, with `-wal` appended), with the SQLite engine.
pub const DATA_FILE: &str = "sundial.sqlite";
/// The redb engine's data file.
pub const REDB_FILE: &str = "sundial.redb";
/// The commit log's file (a SQLite database whatever the data engine; its write-ahead log
/// is beside it, with `-wal` appended).
pub const LOG_FILE: &str = "sundial-log.sqlite";

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
/// How an embedded store is kept on disk.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EmbeddedOptions {
    /// The engine of the data file.
    pub engine: EmbeddedEngine,
    /// The bytes of writes (keys and values) the commit log gathers before they are folded
    /// into the data file: more folds fewer writes of keys written often (a trigger is at
    /// each fire) and costs a longer replay at open after a crash. Default 16 MiB.
    pub fold_bytes: usize,
}

impl Default for EmbeddedOptions {
    fn default() -> Self {
        Self { engine: EmbeddedEngine::default(), fold_bytes: logged::FOLD_BYTES }
    }
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
    /// A file of the store (or, when its contents disagree, its directory) is not sound;
    /// it is left as it is.
    #[error("{path} is not a usable sundial store ({message}); it was left untouched")]
    Corrupt {
        /// The file, or the directory.
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
        Self::open_with_options(dir, clock, sleeper, EmbeddedOptions::default())
    }

    /// [`Self::open_with_sleeper`] with `options`.
    ///
    /// # Errors
    /// As [`Self::open`].
    pub fn open_with_options(
        dir: &Path,
        clock: Arc<dyn Clock>,
        sleeper: Arc<dyn Sleeper>,
        options: EmbeddedOptions,
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
        let data: Box<dyn JournalEngine> = match options.engine {
            EmbeddedEngine::Sqlite => Box::new(sqlite_engine::SqliteEngine::open(&dir.join(DATA_FILE))?),
            #[cfg(feature = "embedded-redb")]
            EmbeddedEngine::Redb => Box::new(redb_engine::RedbEngine::open(&dir.join(REDB_FILE))?),
        };
        let log = log::CommitLog::open(&dir.join(LOG_FILE))?;
        let mut engine = logged::LoggedEngine::new(log, data, logged::FoldLimits::new(options.fold_bytes));
        let (pairs, version) =
            engine.load().map_err(|e| EmbeddedError::Corrupt { path: dir.to_path_buf(), message: e.0 })?;
        let (kv, writer) = MemoryKv::journaled(clock, sleeper, pairs, version, Box::new(engine))
            .map_err(|e| EmbeddedError::Io { path: dir.to_path_buf(), message: e.0 })?;
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

/// Opens (creating if need be) the SQLite database at `path` in WAL mode with full
/// synchronous commits, after checking it is one (`quick_check`: a file that is not a
/// database fails at its first read, here, before anything is written to it), and runs
/// `setup` (its pragmas and tables). A file it refuses is left as it was.
fn open_sqlite(path: &Path, setup: &str) -> Result<rusqlite::Connection, EmbeddedError> {
    use rusqlite::OpenFlags;
    let corrupt = |message: String| EmbeddedError::Corrupt { path: path.to_path_buf(), message };
    let flags = OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_CREATE | OpenFlags::SQLITE_OPEN_NO_MUTEX;
    let db = rusqlite::Connection::open_with_flags(path, flags)
        .map_err(|e| EmbeddedError::Io { path: path.to_path_buf(), message: e.to_string() })?;
    let check: String = db.query_row("PRAGMA quick_check", [], |row| row.get(0)).map_err(|e| corrupt(e.to_string()))?;
    if check != "ok" {
        return Err(corrupt(check));
    }
    db.execute_batch("PRAGMA journal_mode = WAL; PRAGMA synchronous = FULL;")
        .and_then(|()| db.execute_batch(setup))
        .map_err(|e| corrupt(e.to_string()))?;
    Ok(db)
}

impl Drop for EmbeddedKv {
    fn drop(&mut self) {
        self.shut();
    }
}
