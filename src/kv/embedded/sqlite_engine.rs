//! The embedded store's SQLite engine (bundled SQLite through `rusqlite`): one table of
//! keys and values in WAL mode with full synchronous commits, so a commit is one append
//! to the write-ahead log and one fsync; SQLite checkpoints the log into the database
//! file as it grows.

use std::path::Path;

use rusqlite::{params, Connection, OptionalExtension};

use super::super::journal::{engine_error, Batch, JournalEngine, JournalError, Loaded};
use super::super::Version;
use super::{open_sqlite, EmbeddedError, LAYOUT};

/// The engine: one SQLite database.
pub(super) struct SqliteEngine {
    db: Connection,
}

impl SqliteEngine {
    pub(super) fn open(path: &Path) -> Result<Self, EmbeddedError> {
        // A fold writes keys all over the table: 64 MiB of page cache, and the file mapped
        // into memory, keep its pages from being read again and again.
        let db = open_sqlite(
            path,
            "PRAGMA cache_size = -65536;
             PRAGMA mmap_size = 1073741824;
             PRAGMA journal_size_limit = 67108864;
             CREATE TABLE IF NOT EXISTS data (k BLOB PRIMARY KEY, v BLOB NOT NULL) WITHOUT ROWID;
             CREATE TABLE IF NOT EXISTS meta (name TEXT PRIMARY KEY, value INTEGER NOT NULL);",
        )?;
        Ok(Self { db })
    }
}

impl JournalEngine for SqliteEngine {
    fn load(&mut self) -> Result<Loaded, JournalError> {
        let meta = |name: &str| -> Result<Option<i64>, JournalError> {
            self.db
                .query_row("SELECT value FROM meta WHERE name = ?1", [name], |row| row.get(0))
                .optional()
                .map_err(engine_error)
        };
        let Some(layout) = meta("layout")? else { return Ok((Vec::new(), 0)) };
        if u64::try_from(layout).ok() != Some(LAYOUT) {
            return Err(JournalError(format!("layout {layout}, this build reads {LAYOUT}")));
        }
        let version: Version = meta("version")?.unwrap_or(0);
        let mut statement = self.db.prepare("SELECT k, v FROM data").map_err(engine_error)?;
        let rows = statement.query_map([], |row| Ok((row.get(0)?, row.get(1)?))).map_err(engine_error)?;
        let pairs = rows.collect::<Result<Vec<(Vec<u8>, Vec<u8>)>, _>>().map_err(engine_error)?;
        Ok((pairs, version))
    }

    fn write(&mut self, batch: Batch) -> Result<(), JournalError> {
        let txn = self.db.transaction().map_err(engine_error)?;
        {
            // An update in place (`OR REPLACE` would delete the row and insert it again).
            let mut put = txn
                .prepare_cached("INSERT INTO data (k, v) VALUES (?1, ?2) ON CONFLICT (k) DO UPDATE SET v = excluded.v")
                .map_err(engine_error)?;
            let mut delete = txn.prepare_cached("DELETE FROM data WHERE k = ?1").map_err(engine_error)?;
            for mutation in &batch.mutations {
                match &mutation.value {
                    Some(value) => put.execute(params![mutation.key, value]),
                    None => delete.execute(params![mutation.key]),
                }
                .map_err(engine_error)?;
            }
            let mut meta = txn
                .prepare_cached("INSERT OR REPLACE INTO meta (name, value) VALUES (?1, ?2)")
                .map_err(engine_error)?;
            meta.execute(params!["version", batch.version]).map_err(engine_error)?;
            meta.execute(params!["layout", LAYOUT as i64]).map_err(engine_error)?;
        }
        txn.commit().map_err(engine_error)
    }
}
