//! `PgKv`: the [`Kv`] trait over PostgreSQL (15 or later), so the one job store, its
//! conformance scenarios and what the simulation verified carry over to a database most
//! teams already run.
//!
//! # How FoundationDB's transactions are kept
//!
//! FoundationDB commits optimistically: a transaction reads at a read version, buffers
//! its writes, and at commit a *sequencer* gives it a version while a *resolver* refuses
//! it if anything it read serializably was written by a commit after its read version.
//! `PgKv` does the same, with PostgreSQL holding the state (tables in
//! `schema.rs`):
//!
//! - **Reads** run in a `REPEATABLE READ READ ONLY` transaction on one pooled connection,
//!   opened by the transaction's first read. Its first statement reads the last commit
//!   version: that is the read version, and the snapshot holds exactly the commits up to
//!   it (commits are applied one at a time, see below, and each is visible before the
//!   next starts). Writes are buffered in the client with the same code as
//!   [`MemoryKv`](super::memory::MemoryKv) (`buffer.rs`), so a transaction reads its own
//!   writes, snapshot or not, and keeps FDB's read- and write-conflict ranges exactly.
//! - **Commit** is one call of the server function `commit`: it locks the sequencer row
//!   (commits are serialized: their versions are in commit order, as FDB's are), checks
//!   the transaction's read keys and ranges against rows (and range clears) written at a
//!   version above its read version, and applies the writes, range clears, atomic
//!   operations and versionstamps at the new version. The read transaction's `COMMIT`
//!   and the call are pipelined: a commit costs one round trip. A transaction that only
//!   wrote takes a connection just for that call.
//! - **Deletes** leave tombstones (the key and the clear's version, in a table of their
//!   own so reads never step over them) so that a reader of the key conflicts with the
//!   clear; they and the range log are collected after 30
//!   seconds, while every transaction is refused after five (1007), by the client's clock
//!   on reads and by the server's at commit.
//! - **Watches** use `LISTEN`/`NOTIFY`: a watched key is recorded in the `watches` table,
//!   a commit that writes one notifies the schema's channel, and the watching process
//!   compares the key's new value with the one its transaction saw (module `watches`).
//!
//! # Errors
//!
//! | PostgreSQL | [`KvError`] |
//! |---|---|
//! | the resolver's conflict; serialization failure 40001, deadlock 40P01 | 1020 `not_committed` (retryable) |
//! | older than five seconds | 1007 `transaction_too_old` (retryable) |
//! | connection lost, timed out, canceled or terminated during the commit call | 1021 `commit_unknown_result` (retryable; the store checks for its own marker) |
//! | server unreachable, connection lost or timed out before the commit, statement timeout | 1031 `transaction_timed_out` (the store's "unavailable") |
//! | anything else from the server | 4100, with the server's message |
//!
//! Every round trip is bounded by [`PgKvOptions::operation_timeout`], every connect by
//! [`PgKvOptions::connect_timeout`] and the wait for a pooled connection by both: an
//! unreachable server gives an error, never a hang.
//!
//! # Where it differs from FoundationDB, and why that is safe
//!
//! Each point names the test that shows it; `tests/kv_postgres.rs` runs every rule of
//! `tests/kv_rules` and the serializability model of `tests/serializability` (reads at
//! the read version, no missed conflict, no invented one, versions in commit order) on
//! this engine, and `tests/store_postgres.rs` every store scenario.
//!
//! - **Commits are applied one at a time** (the sequencer row's lock, held through the
//!   server's WAL write), where FDB resolves batches of them in parallel. Fewer commits
//!   overlap, none slips between another's check and its writes: the safe side, paid in
//!   throughput (`actors/benches/postgres_cluster.rs` measures it). Conflicts themselves
//!   are FDB's, on exact key ranges, never fewer and never more (the model test).
//! - **Too old is judged by clocks, not versions**: a transaction fails with 1007 once
//!   the client's clock says five seconds passed since its first read
//!   (`transactions_older_than_five_seconds_fail`), and at commit when the server's clock
//!   does (a client that stalled). Versions follow the server's clock too, so this is the
//!   same five seconds FDB counts in versions.
//! - **Deletes are tombstones for 30 seconds**, then deleted (and the rows' space
//!   reclaimed by PostgreSQL's autovacuum): a reader of a cleared key conflicts with the
//!   clear as on FDB, and no transaction lives long enough to miss a collected tombstone
//!   (`tombstones_and_range_records_are_collected_once_past_the_horizon`).
//! - **A watch learns of a write by a notification**, then reads the key: it fires when
//!   the value differs from the one its transaction saw, as FDB's do, milliseconds after
//!   the commit (the watch rules). If the listening connection is lost, every watch of
//!   the process fails (1031) and its caller watches again, as after any watch error.
//! - **A commit cut off is ambiguous** (1021) whenever the server may have applied it:
//!   a lost connection, a timeout, a terminated backend
//!   (`a_connection_lost_during_commit_is_an_unknown_result`); FDB reports 1021 in the
//!   same cases. An unreachable server is 1031 for reads and commits not yet sent
//!   (`a_stopped_server_is_unavailable_at_once_and_served_again_once_back`).
//! - **Size limits** are FDB's, enforced by the client's buffer before anything is sent.

mod schema;
mod transaction;
mod watches;

use std::fmt;
use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Weak};
use std::time::Duration;

use deadpool_postgres::{Manager, ManagerConfig, Pool, PoolError, RecyclingMethod, Runtime};
use tokio_postgres::NoTls;

pub use transaction::PgTransaction;

use super::{Kv, KvError};
use crate::time::{Clock, MonotonicInstant};
use schema::Statements;

/// FoundationDB's `internal_error`: a server error with no better mapping.
const INTERNAL_ERROR: i32 = 4100;

/// How often each `PgKv` collects old tombstones and range records.
const COLLECT_EVERY: Duration = Duration::from_secs(10);

/// How to reach the database and how long to wait for it.
#[derive(Clone)]
pub struct PgKvOptions {
    /// Where the server is, who to log in as, which database (with the password, if
    /// any, already set).
    pub config: tokio_postgres::Config,
    /// The PostgreSQL schema that holds sundial's tables: nodes sharing one schema form a
    /// cluster; another schema in the same database is another cluster. Lower-case
    /// letters, digits and `_`, starting with a letter or `_`, at most 63 bytes.
    pub schema: String,
    /// Connections in the pool: the most transactions in flight at once.
    pub pool_size: usize,
    /// The longest wait for a new connection.
    pub connect_timeout: Duration,
    /// The longest wait for one round trip (a read, a commit), also set as the server's
    /// `statement_timeout`.
    pub operation_timeout: Duration,
}

impl fmt::Debug for PgKvOptions {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // tokio_postgres::Config's Debug redacts the password.
        f.debug_struct("PgKvOptions")
            .field("config", &self.config)
            .field("schema", &self.schema)
            .field("pool_size", &self.pool_size)
            .field("connect_timeout", &self.connect_timeout)
            .field("operation_timeout", &self.operation_timeout)
            .finish()
    }
}

impl PgKvOptions {
    /// Options for the server at `url` (a `postgres://` URL or a `key=value` connection
    /// string), schema `sundial`, 16 connections, 5-second timeouts.
    ///
    /// # Errors
    /// [`PgOpenError::Url`] when `url` does not parse.
    pub fn new(url: &str) -> Result<Self, PgOpenError> {
        let config = url.parse::<tokio_postgres::Config>().map_err(|e| PgOpenError::Url(e.to_string()))?;
        Ok(Self {
            config,
            schema: "sundial".to_owned(),
            pool_size: 16,
            connect_timeout: Duration::from_secs(5),
            operation_timeout: Duration::from_secs(5),
        })
    }
}

/// Why a [`PgKv`] could not be opened. Each message is one line that says what to fix.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PgOpenError {
    /// The connection URL does not parse.
    #[error("not a PostgreSQL connection URL: {0}")]
    Url(String),
    /// The schema name is not one `PgKv` can use.
    #[error("schema {0:?} is not a lower-case identifier of at most 63 bytes")]
    Schema(String),
    /// An option is out of range.
    #[error("{0}")]
    Option(String),
    /// The server could not be reached or refused the login.
    #[error("cannot connect to PostgreSQL: {0}")]
    Connect(String),
    /// The server is older than PostgreSQL 15.
    #[error("PostgreSQL {0} is too old: sundial needs 15 or later")]
    ServerTooOld(String),
    /// The schema was made by a newer sundial.
    #[error("schema {schema:?} has version {found}, newer than this sundial's {known}: upgrade sundial")]
    SchemaTooNew {
        /// The schema's name.
        schema: String,
        /// Its version.
        found: i32,
        /// The newest this build knows.
        known: i32,
    },
    /// Creating or checking the schema failed.
    #[error("cannot set up schema {schema:?}: {message}")]
    Setup {
        /// The schema's name.
        schema: String,
        /// The server's message.
        message: String,
    },
}

/// What a [`PgKv`] has done since it was opened.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PgKvStats {
    /// Commits that wrote.
    pub commits: u64,
    /// Commits of read-only transactions.
    pub read_only_commits: u64,
    /// Commits refused for a conflict (1020).
    pub conflicts: u64,
    /// Transactions refused as too old (1007).
    pub too_old: u64,
    /// Commits whose outcome is unknown (1021).
    pub unknown_results: u64,
    /// Operations that found the server unreachable or too slow (1031).
    pub unavailable: u64,
}

#[derive(Default)]
struct Counters {
    commits: AtomicU64,
    read_only_commits: AtomicU64,
    conflicts: AtomicU64,
    too_old: AtomicU64,
    unknown_results: AtomicU64,
    unavailable: AtomicU64,
}

/// A PostgreSQL database as a [`Kv`]. Clones share one connection pool.
#[derive(Clone)]
pub struct PgKv {
    shared: Arc<Shared>,
}

struct Shared {
    pool: Pool,
    options: PgKvOptions,
    statements: Statements,
    /// The `NOTIFY` channel of this schema's watches.
    channel: String,
    clock: Arc<dyn Clock>,
    counters: Counters,
    watches: watches::Watches,
    /// Spreads retries of transactions that conflicted with each other.
    backoff_turn: AtomicU64,
}

impl fmt::Debug for PgKv {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PgKv").field("schema", &self.shared.options.schema).finish_non_exhaustive()
    }
}

/// Whether `name` is a schema name `PgKv` accepts (and so needs no quoting): lower-case
/// letters, digits and `_`, starting with a letter or `_`, at most 63 bytes.
pub fn is_schema_name(name: &str) -> bool {
    let mut chars = name.chars();
    name.len() <= 63
        && chars.next().is_some_and(|c| c.is_ascii_lowercase() || c == '_')
        && chars.all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
}

impl PgKv {
    /// Connects, checks the server's version, and creates the schema's tables or checks
    /// that their version is one this build knows. Must be called inside a tokio runtime
    /// (the pool, the watch listener and the collection of old tombstones run on it).
    /// `clock` times transaction ages and retry timeouts.
    ///
    /// # Errors
    /// [`PgOpenError`]: a bad option, an unreachable server or refused login, a server
    /// older than 15, a schema newer than this build.
    pub async fn open(options: PgKvOptions, clock: Arc<dyn Clock>) -> Result<Self, PgOpenError> {
        if !is_schema_name(&options.schema) {
            return Err(PgOpenError::Schema(options.schema));
        }
        if options.pool_size == 0 {
            return Err(PgOpenError::Option("the pool needs at least one connection".to_owned()));
        }
        for (name, timeout) in [("connect", options.connect_timeout), ("operation", options.operation_timeout)] {
            if timeout.is_zero() {
                return Err(PgOpenError::Option(format!("the {name} timeout must be above zero")));
            }
        }
        let mut config = options.config.clone();
        config.connect_timeout(options.connect_timeout);
        // The URL's own `options`, if any, then the statement timeout.
        let server_options = format!(
            "{} -c statement_timeout={}",
            config.get_options().unwrap_or_default(),
            options.operation_timeout.as_millis()
        );
        config.options(server_options.trim_start());
        if config.get_application_name().is_none() {
            config.application_name("sundial");
        }
        let manager = Manager::from_config(config, NoTls, ManagerConfig { recycling_method: RecyclingMethod::Fast });
        let pool = Pool::builder(manager)
            .max_size(options.pool_size)
            .runtime(Runtime::Tokio1)
            .wait_timeout(Some(options.connect_timeout + options.operation_timeout))
            .create_timeout(Some(options.connect_timeout))
            .recycle_timeout(Some(options.operation_timeout))
            .build()
            .map_err(|e| PgOpenError::Option(e.to_string()))?;
        let schema = options.schema.clone();
        let shared = Arc::new(Shared {
            pool,
            statements: Statements::new(&schema),
            channel: format!("{schema}_watch"),
            options,
            clock,
            counters: Counters::default(),
            watches: watches::Watches::default(),
            backoff_turn: AtomicU64::new(0),
        });
        let kv = Self { shared };
        kv.migrate().await?;
        tokio::spawn(collect_while_open(Arc::downgrade(&kv.shared)));
        Ok(kv)
    }

    /// Creates the schema, or checks its version, holding an advisory lock so nodes
    /// starting together do not race.
    async fn migrate(&self) -> Result<(), PgOpenError> {
        let schema = &self.shared.options.schema;
        let setup = |e: tokio_postgres::Error| PgOpenError::Setup { schema: schema.clone(), message: message_of(&e) };
        let mut conn = self.shared.pool.get().await.map_err(|e| PgOpenError::Connect(pool_message(&e)))?;
        let version: i32 =
            conn.query_one("SELECT current_setting('server_version_num')::integer", &[]).await.map_err(setup)?.get(0);
        if version < 150_000 {
            let shown: String = conn.query_one("SHOW server_version", &[]).await.map_err(setup)?.get(0);
            return Err(PgOpenError::ServerTooOld(shown));
        }
        let txn = conn.transaction().await.map_err(setup)?;
        txn.execute("SELECT pg_advisory_xact_lock(hashtext('sundial schema ' || $1::text))", &[schema])
            .await
            .map_err(setup)?;
        let exists: bool = txn
            .query_one(
                "SELECT EXISTS (SELECT 1 FROM information_schema.tables WHERE table_schema = $1 AND table_name = 'meta')",
                &[schema],
            )
            .await
            .map_err(setup)?
            .get(0);
        if exists {
            let found: i32 = txn
                .query_one(&format!("SELECT schema_version FROM {schema}.meta WHERE id = 1"), &[])
                .await
                .map_err(setup)?
                .get(0);
            if found > schema::SCHEMA_VERSION {
                return Err(PgOpenError::SchemaTooNew { schema: schema.clone(), found, known: schema::SCHEMA_VERSION });
            }
            // Versions below this build's are migrated here, one step each; version 1
            // is the first.
        } else {
            txn.batch_execute(&schema::create(schema, &self.shared.channel)).await.map_err(setup)?;
        }
        txn.commit().await.map_err(setup)
    }

    /// What this handle's pool has done since it was opened.
    pub fn stats(&self) -> PgKvStats {
        let c = &self.shared.counters;
        let get = |n: &AtomicU64| n.load(Ordering::Relaxed);
        PgKvStats {
            commits: get(&c.commits),
            read_only_commits: get(&c.read_only_commits),
            conflicts: get(&c.conflicts),
            too_old: get(&c.too_old),
            unknown_results: get(&c.unknown_results),
            unavailable: get(&c.unavailable),
        }
    }

    /// The schema this handle works in.
    pub fn schema(&self) -> &str {
        &self.shared.options.schema
    }

    /// Whether the server answers: one round trip on a pooled connection.
    ///
    /// # Errors
    /// 1031 when the server cannot be reached in time.
    pub async fn ping(&self) -> Result<(), KvError> {
        let conn = self.connection().await?;
        self.timed(conn.simple_query("SELECT 1"), false).await.map(drop)
    }

    /// Deletes tombstones and range records older than the horizon (every `PgKv` does it
    /// every ten seconds; tests call it to check that space is reclaimed).
    ///
    /// # Errors
    /// As [`ping`](Self::ping).
    pub async fn collect_garbage(&self) -> Result<(), KvError> {
        let conn = self.connection().await?;
        self.timed(conn.batch_execute(&schema::collect(&self.shared.options.schema)), false).await
    }

    /// A pooled connection.
    async fn connection(&self) -> Result<deadpool_postgres::Object, KvError> {
        self.shared
            .pool
            .get()
            .await
            .map_err(|e| self.unavailable(format!("PostgreSQL unreachable: {}", pool_message(&e))))
    }

    /// `operation`, bounded by the operation timeout, its error mapped to the [`KvError`]
    /// of the module docs' table (`commit`: the error came from a commit call).
    async fn timed<T>(
        &self,
        operation: impl Future<Output = Result<T, tokio_postgres::Error>>,
        commit: bool,
    ) -> Result<T, KvError> {
        match tokio::time::timeout(self.shared.options.operation_timeout, operation).await {
            Ok(Ok(value)) => Ok(value),
            Ok(Err(error)) => Err(self.map_error(&error, commit)),
            Err(_) if commit => Err(self.unknown_result("PostgreSQL did not answer the commit in time")),
            Err(_) => Err(self.unavailable("PostgreSQL did not answer in time".to_owned())),
        }
    }

    fn map_error(&self, error: &tokio_postgres::Error, commit: bool) -> KvError {
        let counters = &self.shared.counters;
        match error.as_db_error().map(|db| db.code().code()) {
            Some("SD020" | "40001" | "40P01") => {
                counters.conflicts.fetch_add(1, Ordering::Relaxed);
                // The resolver's message names the key the conflict was found on.
                KvError::with_message(KvError::NOT_COMMITTED, format!("not committed: {}", message_of(error)))
            }
            Some("SD007") => {
                counters.too_old.fetch_add(1, Ordering::Relaxed);
                KvError::new(KvError::TRANSACTION_TOO_OLD)
            }
            // A commit call canceled (statement timeout) or cut off (an administrator's
            // termination, a shutdown): it may have been cut off after it committed.
            Some(code) if commit && code.starts_with("57") => {
                self.unknown_result(&format!("commit interrupted: {}", message_of(error)))
            }
            // The statement timeout, an administrator's cancel or shutdown, too many
            // connections: the read did not run, and the server is not serving.
            Some("57014" | "57P01" | "57P02" | "57P03" | "53300") => {
                self.unavailable(format!("PostgreSQL: {}", message_of(error)))
            }
            Some(_) => KvError::with_message(INTERNAL_ERROR, format!("PostgreSQL: {}", message_of(error))),
            None if commit => self.unknown_result(&format!("connection lost during commit: {}", message_of(error))),
            None => self.unavailable(format!("PostgreSQL unreachable: {}", message_of(error))),
        }
    }

    fn unavailable(&self, message: String) -> KvError {
        self.shared.counters.unavailable.fetch_add(1, Ordering::Relaxed);
        KvError::with_message(KvError::TRANSACTION_TIMED_OUT, message)
    }

    fn unknown_result(&self, message: &str) -> KvError {
        self.shared.counters.unknown_results.fetch_add(1, Ordering::Relaxed);
        KvError::with_message(KvError::COMMIT_UNKNOWN_RESULT, message)
    }

    /// The latest committed value of `key`, outside any transaction.
    async fn latest_value(&self, key: &[u8]) -> Result<Option<Vec<u8>>, KvError> {
        let conn = self.connection().await?;
        let statement = self.timed(conn.prepare_cached(&self.shared.statements.get), false).await?;
        let row = self.timed(conn.query_opt(&statement, &[&key]), false).await?;
        Ok(row.and_then(|row| row.get::<_, Option<Vec<u8>>>(0)))
    }
}

/// The message of a client error: the server's own for a database error (the client's
/// `Display` says only "db error").
fn message_of(error: &tokio_postgres::Error) -> String {
    match error.as_db_error() {
        Some(db) => format!("{} ({})", db.message(), db.code().code()),
        None => match std::error::Error::source(error) {
            Some(source) => format!("{error}: {source}"),
            None => error.to_string(),
        },
    }
}

fn pool_message(error: &PoolError) -> String {
    match error {
        PoolError::Backend(e) => message_of(e),
        PoolError::Timeout(_) => "no connection within the timeout".to_owned(),
        other => other.to_string(),
    }
}

/// Collects old tombstones every [`COLLECT_EVERY`] while the `PgKv` is alive.
async fn collect_while_open(shared: Weak<Shared>) {
    loop {
        tokio::time::sleep(COLLECT_EVERY).await;
        let Some(shared) = shared.upgrade() else { return };
        // A failed collection (the server is away) is retried at the next turn.
        let _ = PgKv { shared }.collect_garbage().await;
    }
}

impl Kv for PgKv {
    type Transaction = PgTransaction;

    fn create_transaction(&self) -> Result<PgTransaction, KvError> {
        Ok(PgTransaction::new(self.clone()))
    }

    fn backoff(&self, attempt: u32, max: Duration) -> impl Future<Output = ()> + Send {
        // FDB's client backoff: 10 ms doubling, capped, with up to half of it as jitter so
        // transactions that conflicted with each other do not retry in step. The jitter
        // comes from a counter, not from a random source: it only needs to differ
        // between retries.
        let delay = Duration::from_millis(10).saturating_mul(1 << attempt.saturating_sub(1).min(16)).min(max);
        let turn = self.shared.backoff_turn.fetch_add(1, Ordering::Relaxed);
        let spread = turn.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 33;
        let half = delay.as_micros() as u64 / 2;
        let jitter = if half == 0 { 0 } else { spread % half };
        tokio::time::sleep(delay - Duration::from_micros(jitter))
    }

    fn monotonic_now(&self) -> MonotonicInstant {
        self.shared.clock.monotonic()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn schema_names_are_plain_identifiers() {
        for good in ["sundial", "_x", "a1_b", &"a".repeat(63)] {
            assert!(is_schema_name(good), "{good}");
        }
        for bad in ["", "1a", "Sundial", "a-b", "a b", "a\"b", &"a".repeat(64)] {
            assert!(!is_schema_name(bad), "{bad}");
        }
    }

    #[test]
    fn a_url_that_does_not_parse_is_refused() {
        assert!(matches!(PgKvOptions::new("postgres://host:notaport/db"), Err(PgOpenError::Url(_))));
        let options = PgKvOptions::new("postgres://sundial@localhost:5432/sundial").unwrap();
        assert_eq!(options.schema, "sundial");
    }
}
