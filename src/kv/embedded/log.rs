//! The embedded store's commit log: each group commit appended as one row (its writes,
//! encoded) to a SQLite database of its own in WAL mode with full synchronous commits, so
//! acknowledging a commit costs one append and one fsync however its keys are spread.
//! Rows are deleted once their writes are folded into the data file.

use std::path::Path;

use rusqlite::{params, Connection, OptionalExtension};

use super::super::journal::{engine_error, Batch, JournalError, Mutation};
use super::super::Version;
use super::{open_sqlite, EmbeddedError, LAYOUT};

/// The log: one SQLite database, one row per batch, keyed by the batch's version.
pub(super) struct CommitLog {
    db: Connection,
}

impl CommitLog {
    /// Opens (creating if need be) the log at `path`; a file that is not one is refused.
    pub(super) fn open(path: &Path) -> Result<Self, EmbeddedError> {
        let corrupt = |message: String| EmbeddedError::Corrupt { path: path.to_path_buf(), message };
        // The write-ahead log is cut back to 64 MiB after a checkpoint: the rows of a
        // folded batch are deleted, and their pages reused by later ones.
        let db = open_sqlite(
            path,
            "PRAGMA journal_size_limit = 67108864;
             CREATE TABLE IF NOT EXISTS log (version INTEGER PRIMARY KEY, mutations BLOB NOT NULL);
             CREATE TABLE IF NOT EXISTS meta (name TEXT PRIMARY KEY, value INTEGER NOT NULL);",
        )?;
        let layout: Option<i64> = db
            .query_row("SELECT value FROM meta WHERE name = 'layout'", [], |row| row.get(0))
            .optional()
            .map_err(|e| corrupt(e.to_string()))?;
        match layout {
            None => {
                db.execute("INSERT INTO meta (name, value) VALUES ('layout', ?1)", [LAYOUT as i64])
                    .map_err(|e| corrupt(e.to_string()))?;
            }
            Some(layout) if u64::try_from(layout).ok() == Some(LAYOUT) => {}
            Some(layout) => return Err(corrupt(format!("log layout {layout}, this build reads {LAYOUT}"))),
        }
        Ok(Self { db })
    }

    /// The batches after version `after`, oldest first.
    pub(super) fn replay(&self, after: Version) -> Result<Vec<Batch>, JournalError> {
        let mut statement = self
            .db
            .prepare("SELECT version, mutations FROM log WHERE version > ?1 ORDER BY version")
            .map_err(engine_error)?;
        let rows = statement
            .query_map([after], |row| Ok((row.get::<_, Version>(0)?, row.get::<_, Vec<u8>>(1)?)))
            .map_err(engine_error)?;
        let mut batches = Vec::new();
        for row in rows {
            let (version, bytes) = row.map_err(engine_error)?;
            let mutations = decode(&bytes)
                .ok_or_else(|| JournalError(format!("the log's entry of version {version} is damaged")))?;
            batches.push(Batch { version, mutations });
        }
        Ok(batches)
    }

    /// Appends `batch` and deletes the rows through `forget` (folded into the data file),
    /// as one transaction; returns once it is on disk.
    pub(super) fn append(&mut self, batch: &Batch, forget: Option<Version>) -> Result<(), JournalError> {
        let txn = self.db.transaction().map_err(engine_error)?;
        {
            let mut insert =
                txn.prepare_cached("INSERT INTO log (version, mutations) VALUES (?1, ?2)").map_err(engine_error)?;
            insert.execute(params![batch.version, encode(&batch.mutations)]).map_err(engine_error)?;
            if let Some(through) = forget {
                let mut delete = txn.prepare_cached("DELETE FROM log WHERE version <= ?1").map_err(engine_error)?;
                delete.execute([through]).map_err(engine_error)?;
            }
        }
        txn.commit().map_err(engine_error)
    }

    /// Deletes the rows through `through` (folded into the data file).
    pub(super) fn forget(&mut self, through: Version) -> Result<(), JournalError> {
        self.db.execute("DELETE FROM log WHERE version <= ?1", [through]).map(drop).map_err(engine_error)
    }

    /// Gives the pages of deleted rows back to the file system when no row is left (a
    /// clean close: the file keeps the pages of its largest backlog otherwise).
    pub(super) fn shrink_if_empty(&mut self) -> Result<(), JournalError> {
        let rows: i64 = self.db.query_row("SELECT count(*) FROM log", [], |row| row.get(0)).map_err(engine_error)?;
        if rows == 0 {
            self.db.execute_batch("VACUUM").map_err(engine_error)?;
        }
        Ok(())
    }
}

/// A batch's writes as a row: for each, the key's length (u32, little-endian) and bytes,
/// then `0` for a deletion or `1`, the value's length and bytes.
fn encode(mutations: &[Mutation]) -> Vec<u8> {
    let size = mutations.iter().map(|m| 9 + m.key.len() + m.value.as_ref().map_or(0, Vec::len)).sum();
    let mut out = Vec::with_capacity(size);
    for mutation in mutations {
        out.extend_from_slice(&(mutation.key.len() as u32).to_le_bytes());
        out.extend_from_slice(&mutation.key);
        match &mutation.value {
            None => out.push(0),
            Some(value) => {
                out.push(1);
                out.extend_from_slice(&(value.len() as u32).to_le_bytes());
                out.extend_from_slice(value);
            }
        }
    }
    out
}

/// [`encode`]'s writes back; `None` when the bytes are not such a row.
fn decode(mut bytes: &[u8]) -> Option<Vec<Mutation>> {
    fn take<'a>(bytes: &mut &'a [u8], n: usize) -> Option<&'a [u8]> {
        let (head, rest) = bytes.split_at_checked(n)?;
        *bytes = rest;
        Some(head)
    }
    fn length(bytes: &mut &[u8]) -> Option<usize> {
        let raw: [u8; 4] = take(bytes, 4)?.try_into().ok()?;
        usize::try_from(u32::from_le_bytes(raw)).ok()
    }
    let mut mutations = Vec::new();
    while !bytes.is_empty() {
        let key_length = length(&mut bytes)?;
        let key = take(&mut bytes, key_length)?.to_vec();
        let value = match take(&mut bytes, 1)? {
            [0] => None,
            [1] => {
                let value_length = length(&mut bytes)?;
                Some(take(&mut bytes, value_length)?.to_vec())
            }
            _ => return None,
        };
        // Whether the key had a value before is not kept: replayed, every write is applied.
        mutations.push(Mutation { key, value, existed: true });
    }
    Some(mutations)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_decode_to_what_was_encoded_and_damaged_ones_are_refused() {
        let mutations = vec![
            Mutation { key: b"a".to_vec(), value: Some(b"one".to_vec()), existed: true },
            Mutation { key: b"b".to_vec(), value: None, existed: true },
            Mutation { key: Vec::new(), value: Some(Vec::new()), existed: true },
        ];
        let row = encode(&mutations);
        assert_eq!(decode(&row), Some(mutations));
        assert_eq!(decode(&[]), Some(Vec::new()));
        // A row cut between two writes holds the first ones (SQLite keeps a row whole);
        // cut inside one, it is refused.
        let ends = [13, 19];
        for cut in (1..row.len()).filter(|cut| !ends.contains(cut)) {
            assert_eq!(decode(&row[..cut]), None, "cut at {cut}");
        }
        assert_eq!(decode(&row[..13]).map(|m| m.len()), Some(1));
        let mut bad_tag = row.clone();
        bad_tag[5] = 7;
        assert_eq!(decode(&bad_tag), None);
    }

    #[test]
    fn batches_replay_in_order_after_a_version_and_folded_ones_are_forgotten() {
        let dir = sundial_test_support::dir::TempDir::new("log");
        let path = dir.path().join("log.sqlite");
        let batch = |version, key: &str| Batch {
            version,
            mutations: vec![Mutation { key: key.as_bytes().to_vec(), value: Some(b"v".to_vec()), existed: true }],
        };
        {
            let mut log = CommitLog::open(&path).unwrap();
            log.append(&batch(3, "a"), None).unwrap();
            log.append(&batch(5, "b"), None).unwrap();
            log.append(&batch(9, "c"), Some(3)).unwrap();
        }
        let mut log = CommitLog::open(&path).unwrap();
        let versions =
            |log: &CommitLog, after| log.replay(after).unwrap().iter().map(|b| b.version).collect::<Vec<_>>();
        assert_eq!(versions(&log, 0), [5, 9], "3 was forgotten with 9's append");
        assert_eq!(versions(&log, 5), [9]);
        assert_eq!(log.replay(0).unwrap()[1], batch(9, "c"));
        log.forget(9).unwrap();
        assert_eq!(versions(&log, 0), Vec::<Version>::new());
    }
}
