//! The embedded store's redb engine: one table of keys and values, one table of meta data,
//! each write a redb transaction with immediate durability (its pages copied on write,
//! the commit slot checksummed and synced).

use std::path::Path;

use redb::{Database, ReadableDatabase, ReadableTable, TableDefinition, TableError};

use super::super::journal::{engine_error, Batch, JournalEngine, JournalError, Loaded};
use super::super::Version;
use super::{EmbeddedError, LAYOUT};

/// Every key and its latest value.
const DATA: TableDefinition<&[u8], &[u8]> = TableDefinition::new("data");
/// `version`: the last commit written; `layout`: the file's layout version.
const META: TableDefinition<&str, u64> = TableDefinition::new("meta");

/// The journal's engine: one redb file.
pub(super) struct RedbEngine {
    db: Database,
}

impl RedbEngine {
    pub(super) fn open(path: &Path) -> Result<Self, EmbeddedError> {
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

    fn write(&mut self, batch: Batch) -> Result<(), JournalError> {
        let txn = self.db.begin_write().map_err(engine_error)?;
        {
            let mut data = txn.open_table(DATA).map_err(engine_error)?;
            for mutation in &batch.mutations {
                match &mutation.value {
                    Some(value) => data.insert(mutation.key.as_slice(), value.as_slice()).map(drop),
                    None => data.remove(mutation.key.as_slice()).map(drop),
                }
                .map_err(engine_error)?;
            }
            let mut meta = txn.open_table(META).map_err(engine_error)?;
            meta.insert("version", u64::try_from(batch.version).unwrap_or(0)).map_err(engine_error)?;
            meta.insert("layout", LAYOUT).map_err(engine_error)?;
        }
        txn.commit().map_err(engine_error)
    }
}
