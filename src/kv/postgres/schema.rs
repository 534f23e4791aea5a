//! The tables and functions `PgKv` keeps in its PostgreSQL schema, and their migration.
//!
//! - `meta`: one row, the schema's version and the **sequencer**: the last commit
//!   version. Every commit locks this row, so commits are applied one at a time, each at
//!   a version above the last (versions follow the server's clock in microseconds, as
//!   FoundationDB's follow time at about 1,000,000 a second).
//! - `kv`: the pairs, each with `ver`, the version of its last write: the **resolver**
//!   finds conflicts by asking whether a key or range a transaction read has a row written
//!   above its read version.
//! - `dead`: **tombstones**, the keys cleared and when, so a reader of a key conflicts
//!   with its clear as on FDB. They are kept apart from `kv` so that reads never step over
//!   them (a due index whose entries are cleared a thousand times a second would leave
//!   tens of thousands of them in the way of every scan).
//! - `ranges`: range clears and explicit write conflict ranges, by version, for the
//!   readers of keys that did not exist.
//! - `watches`: keys some process watches; a commit that writes one of them notifies the
//!   schema's channel with the key.
//!
//! `dead` and `ranges` rows are deleted once older than [`HORIZON_MICROS`]; every
//! transaction older than five seconds fails before it could miss them.

/// The schema version this build creates and understands.
pub(super) const SCHEMA_VERSION: i32 = 1;

/// How old, in server microseconds, a tombstone or a `ranges` row must be before it is
/// collected: six times the five seconds a transaction may live, so a commit checking
/// for conflicts never misses one (see `PgKv`'s module docs).
pub(super) const HORIZON_MICROS: i64 = 30_000_000;

/// The server's clock in microseconds since the Unix epoch, as SQL.
const NOW_MICROS: &str = "(extract(epoch from clock_timestamp()) * 1000000)::bigint";

/// The statements that create schema version 1 in schema `s` (a checked identifier),
/// notifying channel `channel`.
pub(super) fn create(s: &str, channel: &str) -> String {
    format!(
        r#"
CREATE SCHEMA IF NOT EXISTS {s};
CREATE TABLE {s}.meta (
    id integer PRIMARY KEY CHECK (id = 1),
    schema_version integer NOT NULL,
    version bigint NOT NULL
);
INSERT INTO {s}.meta VALUES (1, {SCHEMA_VERSION}, 0);
CREATE TABLE {s}.kv (
    key bytea PRIMARY KEY,
    value bytea NOT NULL,
    ver bigint NOT NULL
);
CREATE TABLE {s}.dead (
    key bytea PRIMARY KEY,
    ver bigint NOT NULL
);
CREATE INDEX dead_ver ON {s}.dead (ver);
CREATE TABLE {s}.ranges (
    ver bigint NOT NULL,
    b bytea NOT NULL,
    e bytea NOT NULL
);
CREATE INDEX ranges_ver ON {s}.ranges (ver);
CREATE TABLE {s}.watches (key bytea PRIMARY KEY);

-- FoundationDB's atomic operations (codes: see `op_code` in transaction.rs) on the
-- stored value `cur` (NULL: absent) with operand `p`; NULL: the key is cleared.
CREATE FUNCTION {s}.atomic(op integer, cur bytea, p bytea) RETURNS bytea
LANGUAGE plpgsql IMMUTABLE AS $fn$
DECLARE
    n integer := length(p);
    v bytea;
    c integer := 0;
BEGIN
    IF op = 8 THEN -- compare and clear
        IF cur = p THEN RETURN NULL; END IF;
        RETURN cur;
    ELSIF op = 6 THEN -- byte max
        IF cur IS NOT NULL AND cur >= p THEN RETURN cur; END IF;
        RETURN p;
    ELSIF op = 7 THEN -- byte min
        IF cur IS NOT NULL AND cur <= p THEN RETURN cur; END IF;
        RETURN p;
    ELSIF cur IS NULL AND op IN (1, 5) THEN -- bit and, min: an absent value yields the operand
        RETURN p;
    END IF;
    -- The stored value as an integer of the operand's length: truncated, or zero-extended
    -- at the high end.
    v := coalesce(cur, '\x'::bytea);
    IF length(v) > n THEN
        v := substring(v FROM 1 FOR n);
    ELSIF length(v) < n THEN
        v := v || decode(repeat('00', n - length(v)), 'hex');
    END IF;
    IF op = 0 THEN -- add, little-endian, wrapping
        FOR i IN 0 .. n - 1 LOOP
            c := get_byte(v, i) + get_byte(p, i) + c;
            v := set_byte(v, i, c & 255);
            c := c >> 8;
        END LOOP;
        RETURN v;
    ELSIF op IN (1, 2, 3) THEN -- bit and, or, xor
        FOR i IN 0 .. n - 1 LOOP
            v := set_byte(v, i, CASE op
                WHEN 1 THEN get_byte(v, i) & get_byte(p, i)
                WHEN 2 THEN get_byte(v, i) | get_byte(p, i)
                ELSE get_byte(v, i) # get_byte(p, i) END);
        END LOOP;
        RETURN v;
    ELSIF op IN (4, 5) THEN -- max, min, as little-endian unsigned integers
        FOR i IN REVERSE n - 1 .. 0 LOOP
            IF get_byte(v, i) <> get_byte(p, i) THEN
                c := CASE WHEN get_byte(v, i) > get_byte(p, i) THEN 1 ELSE -1 END;
                EXIT;
            END IF;
        END LOOP;
        IF (op = 4 AND c >= 0) OR (op = 5 AND c <= 0) THEN RETURN v; END IF;
        RETURN p;
    END IF;
    RAISE EXCEPTION 'unknown atomic operation %', op;
END
$fn$;

-- A commit: takes the sequencer's lock and the next version, fails with SD007 when the
-- transaction is too old and SD020 when a write committed after its read version `rv`
-- meets what it read, else applies its writes at the new version and returns it.
CREATE FUNCTION {s}.commit(
    rv bigint, rt bigint,
    read_keys bytea[], read_b bytea[], read_e bytea[],
    clear_b bytea[], clear_e bytea[],
    put_k bytea[], put_v bytea[],
    sval_k bytea[], sval_v bytea[], sval_o integer[],
    op_k bytea[], op_c integer[], op_p bytea[],
    skey_k bytea[], skey_o integer[], skey_v bytea[],
    wc_b bytea[], wc_e bytea[]
) RETURNS bigint
LANGUAGE plpgsql AS $fn$
DECLARE
    _prev bigint;
    _v bigint;
    _stamp bytea;
    _cur bytea;
    _hit bytea;
BEGIN
    SELECT version INTO _prev FROM {s}.meta WHERE id = 1 FOR UPDATE;
    _v := greatest(_prev + 1, {NOW_MICROS});
    IF rt IS NOT NULL AND {NOW_MICROS} - rt > 5000000 THEN
        RAISE EXCEPTION 'transaction is too old' USING ERRCODE = 'SD007';
    END IF;
    -- Something committed after the read version: look for a write it made to what
    -- this transaction read, and name the first key found (the server's log has it).
    IF rv IS NOT NULL AND _prev > rv THEN
        SELECT hit INTO _hit FROM (
            SELECT k.key AS hit FROM {s}.kv k WHERE k.key = ANY(read_keys) AND k.ver > rv
            UNION ALL
            SELECT d.key FROM {s}.dead d WHERE d.key = ANY(read_keys) AND d.ver > rv
            UNION ALL
            SELECT w.key FROM unnest(read_b, read_e) r(b, e) CROSS JOIN LATERAL (
                (SELECT k.key FROM {s}.kv k WHERE k.key >= r.b AND k.key < r.e AND k.ver > rv LIMIT 1)
                UNION ALL
                (SELECT d.key FROM {s}.dead d WHERE d.key >= r.b AND d.key < r.e AND d.ver > rv LIMIT 1)
            ) w
            UNION ALL
            SELECT g.b FROM {s}.ranges g WHERE g.ver > rv AND (
                EXISTS (SELECT 1 FROM unnest(read_keys) x(key) WHERE x.key >= g.b AND x.key < g.e)
                OR EXISTS (SELECT 1 FROM unnest(read_b, read_e) r(b, e) WHERE r.b < g.e AND g.b < r.e))
        ) hits LIMIT 1;
        IF FOUND THEN
            RAISE EXCEPTION 'conflict on key %', encode(_hit, 'hex') USING ERRCODE = 'SD020';
        END IF;
    END IF;
    UPDATE {s}.meta SET version = _v WHERE id = 1;
    _stamp := int8send(_v) || '\x0000'::bytea;
    -- Range clears first: the point writes kept are the ones made after them.
    IF cardinality(clear_b) > 0 THEN
        WITH gone AS (
            DELETE FROM {s}.kv k USING unnest(clear_b, clear_e) c(b, e)
            WHERE k.key >= c.b AND k.key < c.e RETURNING k.key
        )
        INSERT INTO {s}.dead (key, ver) SELECT DISTINCT key, _v FROM gone
        ON CONFLICT (key) DO UPDATE SET ver = excluded.ver;
    END IF;
    IF cardinality(put_k) > 0 THEN
        INSERT INTO {s}.kv (key, value, ver) SELECT p.k, p.v, _v FROM unnest(put_k, put_v) p(k, v)
        WHERE p.v IS NOT NULL
        ON CONFLICT (key) DO UPDATE SET value = excluded.value, ver = excluded.ver;
        -- Clears (a NULL value): the row goes, a tombstone stays.
        IF array_position(put_v, NULL) IS NOT NULL THEN
            DELETE FROM {s}.kv k USING unnest(put_k, put_v) p(k, v) WHERE p.v IS NULL AND k.key = p.k;
            INSERT INTO {s}.dead (key, ver) SELECT p.k, _v FROM unnest(put_k, put_v) p(k, v) WHERE p.v IS NULL
            ON CONFLICT (key) DO UPDATE SET ver = excluded.ver;
        END IF;
    END IF;
    FOR i IN 1 .. cardinality(sval_k) LOOP
        INSERT INTO {s}.kv (key, value, ver)
        VALUES (sval_k[i], overlay(sval_v[i] PLACING _stamp FROM sval_o[i] + 1 FOR 10), _v)
        ON CONFLICT (key) DO UPDATE SET value = excluded.value, ver = excluded.ver;
    END LOOP;
    FOR i IN 1 .. cardinality(op_k) LOOP
        _cur := {s}.atomic(op_c[i], (SELECT k.value FROM {s}.kv k WHERE k.key = op_k[i]), op_p[i]);
        IF _cur IS NULL THEN
            DELETE FROM {s}.kv k WHERE k.key = op_k[i];
            INSERT INTO {s}.dead (key, ver) VALUES (op_k[i], _v) ON CONFLICT (key) DO UPDATE SET ver = excluded.ver;
        ELSE
            INSERT INTO {s}.kv (key, value, ver) VALUES (op_k[i], _cur, _v)
            ON CONFLICT (key) DO UPDATE SET value = excluded.value, ver = excluded.ver;
        END IF;
    END LOOP;
    FOR i IN 1 .. cardinality(skey_k) LOOP
        INSERT INTO {s}.kv (key, value, ver)
        VALUES (overlay(skey_k[i] PLACING _stamp FROM skey_o[i] + 1 FOR 10), skey_v[i], _v)
        ON CONFLICT (key) DO UPDATE SET value = excluded.value, ver = excluded.ver;
    END LOOP;
    IF cardinality(wc_b) > 0 THEN
        INSERT INTO {s}.ranges (ver, b, e) SELECT _v, w.b, w.e FROM unnest(wc_b, wc_e) w(b, e);
    END IF;
    IF EXISTS (SELECT 1 FROM {s}.watches) THEN
        PERFORM pg_notify('{channel}', encode(w.key, 'hex')) FROM {s}.watches w
        WHERE w.key = ANY(put_k) OR w.key = ANY(op_k) OR w.key = ANY(sval_k)
           OR EXISTS (SELECT 1 FROM unnest(clear_b, clear_e) c(b, e) WHERE w.key >= c.b AND w.key < c.e);
    END IF;
    RETURN _v;
END
$fn$;
"#
    )
}

/// The statement that collects tombstones and `ranges` rows older than the horizon.
pub(super) fn collect(s: &str) -> String {
    format!(
        "DELETE FROM {s}.dead WHERE ver < {NOW_MICROS} - {HORIZON_MICROS}; \
         DELETE FROM {s}.ranges WHERE ver < {NOW_MICROS} - {HORIZON_MICROS};"
    )
}

/// Statements a transaction runs, for schema `s`.
#[derive(Debug)]
pub(super) struct Statements {
    /// Starts a read transaction (a snapshot) and returns the read version and the
    /// server's time: a simple query.
    pub(super) begin: String,
    pub(super) get: String,
    pub(super) get_many: String,
    pub(super) range: String,
    pub(super) range_reverse: String,
    /// Many forward ranges in one statement: `(index, key, value)` rows.
    pub(super) ranges: String,
    /// Many reverse ranges in one statement.
    pub(super) ranges_reverse: String,
    pub(super) latest: String,
    pub(super) commit: String,
    pub(super) watch: String,
}

/// Ranges `[$1[i], $2[i])`, at most `$3[i]` pairs each (NULL: all), in `order`, in one
/// statement: rows of (1-based range index, key, value).
fn many_ranges(s: &str, order: &str) -> String {
    format!(
        "SELECT r.i, k.key, k.value FROM unnest($1::bytea[], $2::bytea[], $3::int8[]) WITH ORDINALITY AS r(b, e, l, i) \
         CROSS JOIN LATERAL (SELECT key, value FROM {s}.kv WHERE key >= r.b AND key < r.e \
         ORDER BY key {order} LIMIT r.l) k ORDER BY r.i, k.key {order}"
    )
}

impl Statements {
    pub(super) fn new(s: &str) -> Self {
        Self {
            begin: format!(
                "BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY; \
                 SELECT version, {NOW_MICROS} FROM {s}.meta WHERE id = 1"
            ),
            get: format!("SELECT value FROM {s}.kv WHERE key = $1"),
            get_many: format!("SELECT key, value FROM {s}.kv WHERE key = ANY($1)"),
            range: format!("SELECT key, value FROM {s}.kv WHERE key >= $1 AND key < $2 ORDER BY key LIMIT $3"),
            range_reverse: format!(
                "SELECT key, value FROM {s}.kv WHERE key >= $1 AND key < $2 ORDER BY key DESC LIMIT $3"
            ),
            ranges: many_ranges(s, "ASC"),
            ranges_reverse: many_ranges(s, "DESC"),
            latest: format!("SELECT version FROM {s}.meta WHERE id = 1"),
            commit: format!(
                "SELECT {s}.commit($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, \
                 $17, $18, $19, $20)"
            ),
            watch: format!("INSERT INTO {s}.watches VALUES ($1) ON CONFLICT DO NOTHING"),
        }
    }
}
