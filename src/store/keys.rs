//! The whole keyspace, in one place. Keys are `foundationdb-tuple` tuples under one root
//! subspace, so they are byte-identical on `MemoryKv` and on FoundationDB. Every value is
//! a record of [`super::records`], encoded by [`super::codec`] (schema byte + bincode).
//!
//! ```text
//! key                                           value          meaning
//! (0)                                           u8             keyspace layout version
//! (1, job)                                      JobRecord      job definition, origin, paused
//! (2, job, trigger)                             TriggerRecord  trigger definition and progress
//! (3, shard, due_us, job, trigger)              i32 LE, u8     due index: present iff the trigger
//!                                                              is Waiting; due_us == next fire;
//!                                                              shard = hash(job, trigger) % 64;
//!                                                              value = priority, one-shot flag
//! (4, job)                                      SlotRecord     the active-run slot of a
//!                                                              non-concurrent job: its holder
//!                                                              is the job's running run
//! (5, job, trigger)                             ''             Blocked triggers of a job
//! (6, run_id)                                   RunRecord      run history
//! (7, 0, job, scheduled_us, run_id)             RunSummary     finished runs by job
//! (7, 1, scheduled_us, run_id)                  RunSummary     finished runs by scheduled time
//!                                                              (written once, when the run
//!                                                              ends; history queries take
//!                                                              running runs from (8), (14)
//!                                                              and (4))
//! (7, 2, …)                                     (retired)      was finished runs by end time;
//!                                                              retention now walks (7, 1)
//! (8, node, run_id)                             ''             Running runs per node
//! (9, node)                                     NodeRecord     node registry and heartbeat
//! (10, resource)                                LeaseRecord    leader leases
//! (11, node, run_id)                            ''             cancel requests per node
//! (12, job)                                     ''             local jobs (run on every node)
//! (13)                                          i64 LE         number of stored runs (atomic add)
//! (14, job, run_id)                             ''             Running runs per job that hold
//!                                                              no slot (a concurrent or local
//!                                                              job's; a non-concurrent job's
//!                                                              one is its slot's holder, and
//!                                                              stores written before hold
//!                                                              entries of those too)
//! (15)                                          u64 LE         local jobs' change stamp (atomic add)
//! (16, node)                                    u64 LE         the node's wake key (atomic add): it
//!                                                              watches it, and looks at the due
//!                                                              index when it changes
//! (17, service, group, job, fire_us)            Execution      coordinated executions of external
//!                                                              fires (`crate::coordination`)
//! (18, service, group, job)                     ExecutionSlot  the running execution of a `PerJob`
//!                                                              job
//! ```
//!
//! Times are microseconds since the Unix epoch (tuple integers sort correctly, negatives
//! included); run ids are UUIDs (v7, so they sort by creation time).

use std::borrow::Cow;
use std::sync::Arc;

use foundationdb_tuple::{PackResult, Subspace, TupleDepth, TuplePack, TupleUnpack};
use uuid::Uuid;

use super::StoreError;
use crate::kv::{key_after, strinc};

/// Bytes most keys take after the root prefix (ids, times and names).
const KEY_ROOM: usize = 72;

/// The third element of a tuple of at least three integers, the rest left unread: a due
/// key's `due_us`.
struct DueTime(i64);

impl<'de> TupleUnpack<'de> for DueTime {
    fn unpack(input: &'de [u8], depth: TupleDepth) -> PackResult<(&'de [u8], Self)> {
        let (input, _subspace) = i64::unpack(input, depth.increment())?;
        let (input, _shard) = i64::unpack(input, depth.increment())?;
        let (_names, due) = i64::unpack(input, depth.increment())?;
        Ok((&[], DueTime(due)))
    }
}

/// FNV-1a over byte strings, with a separator (stable across processes).
pub(crate) fn fnv(parts: &[&[u8]]) -> u64 {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for part in parts {
        for &byte in part.iter().chain(&[0xff]) {
            hash ^= u64::from(byte);
            hash = hash.wrapping_mul(0x0100_0000_01b3);
        }
    }
    hash
}

/// Number of due-index shards. Fixed: changing it changes where due entries live.
pub const DUE_SHARDS: u16 = 64;

const LAYOUT: i64 = 0;
const JOB: i64 = 1;
const TRIGGER: i64 = 2;
const DUE: i64 = 3;
const SLOT: i64 = 4;
const BLOCKED: i64 = 5;
const RUN: i64 = 6;
const HISTORY: i64 = 7;
const RUNNING: i64 = 8;
const NODE: i64 = 9;
const LEASE: i64 = 10;
const CANCEL: i64 = 11;
const LOCAL_JOB: i64 = 12;
const RUN_COUNT: i64 = 13;
const JOB_RUNNING: i64 = 14;
const LOCAL_STAMP: i64 = 15;
const WAKE: i64 = 16;
const EXECUTION: i64 = 17;
const EXECUTION_SLOT: i64 = 18;
const AUDIT: i64 = 19;

const BY_JOB: i64 = 0;
const BY_TIME: i64 = 1;

/// The keys of one store, under its root prefix.
#[derive(Debug, Clone)]
pub struct Keyspace {
    root: Subspace,
    /// Each due shard's key prefix `(3, shard)` and range, packed once: every poll cycle
    /// reads every shard.
    due_shards: Arc<[(Vec<u8>, KeyRange)]>,
}

/// A `[begin, end)` key range.
pub type KeyRange = (Vec<u8>, Vec<u8>);

/// A key: inline up to 64 bytes (a prefix, a tag, two names and a time or an id fit), on
/// the heap beyond. Derefs to the bytes every `Kv` call takes.
pub type Key = smallvec::SmallVec<[u8; 64]>;

/// Packs a tuple into a [`Key`].
struct KeyWriter<'a>(&'a mut Key);

impl std::io::Write for KeyWriter<'_> {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.0.extend_from_slice(bytes);
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Keyspace {
    /// The keyspace under `prefix` (e.g. the packed tuple `("sundial", cluster)`).
    pub fn new(prefix: impl Into<Vec<u8>>) -> Self {
        Self::under(Subspace::from_bytes(prefix))
    }

    /// The default root: the tuple `("sundial",)`.
    pub fn default_root() -> Self {
        Self::under(Subspace::all().subspace(&("sundial",)))
    }

    fn under(root: Subspace) -> Self {
        let due_shards = (0..DUE_SHARDS)
            .map(|shard| {
                let prefix = root.pack(&(DUE, i64::from(shard)));
                let range = root.subspace(&(DUE, i64::from(shard))).range();
                (prefix, range)
            })
            .collect();
        Self { root, due_shards }
    }

    /// One key, built in place: most keys fit [`Key`]'s inline room, so building one
    /// allocates nothing (a fire's transactions build about twenty).
    fn point<T: TuplePack>(&self, t: &T) -> Key {
        let mut key = Key::from_slice(self.root.bytes());
        t.pack_root(&mut KeyWriter(&mut key)).expect("packing into memory cannot fail");
        key
    }

    fn pack<T: TuplePack>(&self, t: &T) -> Vec<u8> {
        // Sized once for our keys (a prefix and a few short elements): the tuple encoder
        // appends element by element, and growing from the prefix's exact size took
        // several reallocations per key on the acquisition path.
        let prefix = self.root.bytes();
        let mut key = Vec::with_capacity(prefix.len() + KEY_ROOM);
        key.extend_from_slice(prefix);
        foundationdb_tuple::pack_into(t, &mut key);
        key
    }

    /// All keys of `t`'s subspace: from its prefix and `0x00` to its prefix and `0xff`, as
    /// `Subspace::range` has them, in two allocations (a subspace of its own took five;
    /// heartbeats, acquisitions and completions each ask for one).
    fn range_of<T: TuplePack>(&self, t: &T) -> KeyRange {
        let mut begin = self.pack(t);
        let mut end = Vec::with_capacity(begin.len() + 1);
        end.extend_from_slice(&begin);
        begin.push(0x00);
        end.push(0xff);
        (begin, end)
    }

    fn unpack<'de, T: TupleUnpack<'de>>(&self, key: &'de [u8]) -> Result<T, StoreError> {
        self.root.unpack(key).map_err(|e| StoreError::Corrupt(format!("bad key {key:?}: {e}")))
    }

    /// Where the subspaces of run records `(6)` and history `(7)`, millions of keys each
    /// in a busy store, begin and end: the rest are a few keys per job, trigger, node and
    /// running run, which every transaction reads (see [`Kv::split_hint`](crate::kv::Kv::split_hint)).
    pub fn split_hint(&self) -> Vec<Vec<u8>> {
        [RUN, HISTORY, RUNNING].iter().map(|subspace| self.pack(&(*subspace,))).collect()
    }

    /// `(0)`: the layout version.
    pub fn layout(&self) -> Key {
        self.point(&(LAYOUT,))
    }

    /// `(1, job)`.
    pub fn job(&self, job: &str) -> Key {
        self.point(&(JOB, job))
    }

    /// Every job record.
    pub fn jobs(&self) -> KeyRange {
        self.range_of(&(JOB,))
    }

    /// The job name of a `(1, job)` key.
    pub fn job_name_of(&self, key: &[u8]) -> Result<String, StoreError> {
        let (_, job): (i64, String) = self.unpack(key)?;
        Ok(job)
    }

    /// `(2, job, trigger)`.
    pub fn trigger(&self, job: &str, trigger: &str) -> Key {
        self.point(&(TRIGGER, job, trigger))
    }

    /// Every trigger of `job`.
    pub fn triggers_of(&self, job: &str) -> KeyRange {
        self.range_of(&(TRIGGER, job))
    }

    /// `(3, shard, due_us, job, trigger)`.
    pub fn due(&self, shard: u16, due_us: i64, job: &str, trigger: &str) -> Key {
        self.point(&(DUE, i64::from(shard), due_us, job, trigger))
    }

    /// Due entries of `shard` with due time ≤ `until_us`.
    pub fn due_until(&self, shard: u16, until_us: i64) -> KeyRange {
        let (prefix, (begin, _)) = &self.due_shards[usize::from(shard % DUE_SHARDS)];
        // Everything below (3, shard, until_us + 1): due ≤ until_us. A tuple's packing is
        // its elements' packings in a row.
        let mut end = Vec::with_capacity(prefix.len() + 9);
        end.extend_from_slice(prefix);
        foundationdb_tuple::pack_into(&until_us.saturating_add(1), &mut end);
        (begin.clone(), end)
    }

    /// Every due entry of `shard`.
    pub fn due_shard(&self, shard: u16) -> KeyRange {
        self.due_shards[usize::from(shard % DUE_SHARDS)].1.clone()
    }

    /// The due time of a due key (without decoding its names: pollers read every shard's
    /// earliest entry each cycle, and the names are most of a key).
    pub fn due_time(&self, key: &[u8]) -> Result<i64, StoreError> {
        let DueTime(due) = self.unpack(key)?;
        Ok(due)
    }

    /// `(due_us, job, trigger)` of a due key; the names borrowed from the key (they are
    /// copied only when they hold an escaped NUL byte): scans and filters read thousands
    /// of these per acquisition.
    pub fn due_parts<'k>(&self, key: &'k [u8]) -> Result<(i64, Cow<'k, str>, Cow<'k, str>), StoreError> {
        let (_, _, due, job, trigger): (i64, i64, i64, Cow<'k, str>, Cow<'k, str>) = self.unpack(key)?;
        Ok((due, job, trigger))
    }

    /// `(4, job)`.
    pub fn slot(&self, job: &str) -> Key {
        self.point(&(SLOT, job))
    }

    /// The slots of the jobs from `first` to `last` (in name order, both included).
    pub fn slots_between(&self, first: &str, last: &str) -> KeyRange {
        (self.slot(first).into_vec(), key_after(&self.slot(last)))
    }

    /// The job of a `(4, job)` key.
    pub fn slot_job_of(&self, key: &[u8]) -> Result<String, StoreError> {
        let (_, job): (i64, String) = self.unpack(key)?;
        Ok(job)
    }

    /// `(5, job, trigger)`.
    pub fn blocked(&self, job: &str, trigger: &str) -> Key {
        self.point(&(BLOCKED, job, trigger))
    }

    /// Blocked triggers of `job`.
    pub fn blocked_of(&self, job: &str) -> KeyRange {
        self.range_of(&(BLOCKED, job))
    }

    /// The trigger name of a `(5, job, trigger)` key.
    pub fn blocked_trigger_of(&self, key: &[u8]) -> Result<String, StoreError> {
        let (_, _, trigger): (i64, String, String) = self.unpack(key)?;
        Ok(trigger)
    }

    /// `(6, run_id)`.
    pub fn run(&self, run: Uuid) -> Key {
        self.point(&(RUN, run))
    }

    /// `(7, 0, job, scheduled_us, run_id)`.
    pub fn history_by_job(&self, job: &str, scheduled_us: i64, run: Uuid) -> Key {
        self.point(&(HISTORY, BY_JOB, job, scheduled_us, run))
    }

    /// History of `job` with scheduled time in `[from_us, to_us)`.
    pub fn history_of_job(&self, job: &str, from_us: i64, to_us: i64) -> KeyRange {
        (self.pack(&(HISTORY, BY_JOB, job, from_us)), self.pack(&(HISTORY, BY_JOB, job, to_us)))
    }

    /// `(7, 1, scheduled_us, run_id)`.
    pub fn history_by_time(&self, scheduled_us: i64, run: Uuid) -> Key {
        self.point(&(HISTORY, BY_TIME, scheduled_us, run))
    }

    /// All history with scheduled time in `[from_us, to_us)`.
    pub fn history_between(&self, from_us: i64, to_us: i64) -> KeyRange {
        (self.pack(&(HISTORY, BY_TIME, from_us)), self.pack(&(HISTORY, BY_TIME, to_us)))
    }

    /// The scheduled time and run id of a history key: by job (`(7, 0, …)`) or by time
    /// (`(7, 1, …)`).
    pub fn history_entry_of(&self, key: &[u8], by_job: bool) -> Result<(i64, Uuid), StoreError> {
        if by_job {
            let (_, _, _, scheduled, run): (i64, i64, String, i64, Uuid) = self.unpack(key)?;
            Ok((scheduled, run))
        } else {
            let (_, _, scheduled, run): (i64, i64, i64, Uuid) = self.unpack(key)?;
            Ok((scheduled, run))
        }
    }

    /// `(8, node, run_id)`.
    pub fn running(&self, node: &str, run: Uuid) -> Key {
        self.point(&(RUNNING, node, run))
    }

    /// Running runs of `node`.
    pub fn running_on(&self, node: &str) -> KeyRange {
        self.range_of(&(RUNNING, node))
    }

    /// Running runs of every node.
    pub fn running_everywhere(&self) -> KeyRange {
        self.range_of(&(RUNNING,))
    }

    /// The node of a `(8, node, run_id)` key.
    pub fn running_node_of(&self, key: &[u8]) -> Result<String, StoreError> {
        let (_, node, _): (i64, String, Uuid) = self.unpack(key)?;
        Ok(node)
    }

    /// The run id of a `(8, node, run_id)`, `(11, node, run_id)` or `(14, job, run_id)` key.
    pub fn node_run_of(&self, key: &[u8]) -> Result<Uuid, StoreError> {
        let (_, _, run): (i64, String, Uuid) = self.unpack(key)?;
        Ok(run)
    }

    /// `(9, node)`.
    pub fn node(&self, node: &str) -> Key {
        self.point(&(NODE, node))
    }

    /// Every node record.
    pub fn nodes(&self) -> KeyRange {
        self.range_of(&(NODE,))
    }

    /// `(10, resource)`.
    pub fn lease(&self, resource: &str) -> Key {
        self.point(&(LEASE, resource))
    }

    /// `(11, node, run_id)`.
    pub fn cancel(&self, node: &str, run: Uuid) -> Key {
        self.point(&(CANCEL, node, run))
    }

    /// Cancel requests for `node`.
    pub fn cancels_for(&self, node: &str) -> KeyRange {
        self.range_of(&(CANCEL, node))
    }

    /// `(12, job)`.
    pub fn local_job(&self, job: &str) -> Key {
        self.point(&(LOCAL_JOB, job))
    }

    /// Every local job.
    pub fn local_jobs(&self) -> KeyRange {
        self.range_of(&(LOCAL_JOB,))
    }

    /// The job name of a `(12, job)` key.
    pub fn local_job_name_of(&self, key: &[u8]) -> Result<String, StoreError> {
        let (_, job): (i64, String) = self.unpack(key)?;
        Ok(job)
    }

    /// `(14, job, run_id)`.
    pub fn job_running(&self, job: &str, run: Uuid) -> Key {
        self.point(&(JOB_RUNNING, job, run))
    }

    /// Running runs of `job`.
    pub fn running_of_job(&self, job: &str) -> KeyRange {
        self.range_of(&(JOB_RUNNING, job))
    }

    /// The job and the run of a `(14, job, run_id)` key.
    pub fn job_running_of(&self, key: &[u8]) -> Result<(String, Uuid), StoreError> {
        let (_, job, run): (i64, String, Uuid) = self.unpack(key)?;
        Ok((job, run))
    }

    /// `(13)`: the stored-run counter.
    pub fn run_count(&self) -> Key {
        self.point(&(RUN_COUNT,))
    }

    /// `(15)`: the local-jobs stamp, so a node rereads local jobs only when they changed.
    pub fn local_jobs_stamp(&self) -> Key {
        self.point(&(LOCAL_STAMP,))
    }

    /// `(16, node)`: the key `node` watches to hear of new due work in its home shards.
    pub fn wake(&self, node: &str) -> Key {
        self.point(&(WAKE, node))
    }

    /// `(17, service, group, job, fire_us)`: the coordinated execution of one external fire.
    pub fn execution(&self, service: &str, group: &str, job: &str, fire_us: i64) -> Key {
        self.point(&(EXECUTION, service, group, job, fire_us))
    }

    /// Every coordinated execution of one job, in fire-time order.
    pub fn executions_of(&self, service: &str, group: &str, job: &str) -> KeyRange {
        self.range_of(&(EXECUTION, service, group, job))
    }

    /// `(18, service, group, job)`: which execution of a `PerJob` job runs.
    pub fn execution_slot(&self, service: &str, group: &str, job: &str) -> Key {
        self.point(&(EXECUTION_SLOT, service, group, job))
    }

    /// `(19, at_us, entry_id)`: one audit entry, in time order.
    pub fn audit(&self, at_us: i64, id: Uuid) -> Key {
        self.point(&(AUDIT, at_us, id))
    }

    /// The time and id of an audit entry's key.
    pub fn audit_entry_of(&self, key: &[u8]) -> Result<(i64, Uuid), StoreError> {
        let (_, at_us, id): (i64, i64, Uuid) = self.unpack(key)?;
        Ok((at_us, id))
    }

    /// The audit entries made in `[from_us, to_us)`.
    pub fn audit_between(&self, from_us: i64, to_us: i64) -> KeyRange {
        (self.pack(&(AUDIT, from_us)), self.pack(&(AUDIT, to_us)))
    }

    /// Every key of this store.
    pub fn all(&self) -> KeyRange {
        let prefix = self.root.bytes().to_vec();
        let end = strinc(&prefix);
        (prefix, end)
    }
}

/// The due shard of a trigger: FNV-1a over its key, so it is stable across processes.
pub fn shard_of(job: &str, trigger: &str) -> u16 {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in job.bytes().chain([0]).chain(trigger.bytes()) {
        hash ^= u64::from(byte);
        hash = hash.wrapping_mul(0x0100_0000_01b3);
    }
    (hash % u64::from(DUE_SHARDS)) as u16
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_the_tuple_layers_encoding() {
        let keys = Keyspace::new(b"\x02app\x00".to_vec());
        let run = Uuid::from_u128(7);
        let long = "j".repeat(200);
        assert_eq!(keys.job(&long).as_slice(), keys.root.pack(&(JOB, long.as_str())), "spilled to the heap");
        assert_eq!(keys.due(5, -3, "a", "b").as_slice(), keys.root.pack(&(DUE, 5i64, -3i64, "a", "b")));
        assert_eq!(keys.run(run).as_slice(), keys.root.pack(&(RUN, run)));
        assert!(!keys.run(run).spilled() && !keys.due(5, -3, "a-job", "its-trigger").spilled(), "inline");
    }

    #[test]
    fn precomputed_due_ranges_equal_packed_ones() {
        for keys in [Keyspace::default_root(), Keyspace::new(b"\x02app\x00".to_vec())] {
            for shard in [0, 17, DUE_SHARDS - 1] {
                let range = keys.root.subspace(&(DUE, i64::from(shard))).range();
                assert_eq!(keys.due_shard(shard), range);
                for until in [i64::MIN + 5, -1, 0, 1_800_000_000_000_000, i64::MAX] {
                    let end = keys.pack(&(DUE, i64::from(shard), until.saturating_add(1)));
                    assert_eq!(keys.due_until(shard, until), (range.0.clone(), end));
                }
            }
        }
    }

    #[test]
    fn subspace_ranges_equal_the_tuple_layers() {
        for keys in [Keyspace::default_root(), Keyspace::new(b"\x02app\x00".to_vec())] {
            let of = |t: &(i64, &str)| keys.root.subspace(t).range();
            assert_eq!(keys.nodes(), keys.root.subspace(&(NODE,)).range());
            assert_eq!(keys.cancels_for("node-1"), of(&(CANCEL, "node-1")));
            assert_eq!(keys.blocked_of("with\0nul"), of(&(BLOCKED, "with\0nul")));
            assert_eq!(keys.triggers_of(&"j".repeat(200)), of(&(TRIGGER, "j".repeat(200).as_str())));
            let (begin, end) = keys.running_on("");
            assert!(begin < keys.pack(&(RUNNING, "", Uuid::nil())) && keys.pack(&(RUNNING, "", Uuid::max())) < end);
        }
    }

    #[test]
    fn a_due_keys_time_reads_without_its_names() {
        let keys = Keyspace::new(b"\x02app\x00".to_vec());
        for due in [i64::MIN, -1, 0, 1_800_000_000_000_000, i64::MAX] {
            for (job, trigger) in [("a", "b"), ("with\0nul", "\u{ff}\0"), ("", "")] {
                let key = keys.due(63, due, job, trigger);
                assert_eq!(keys.due_time(&key).unwrap(), due);
                assert_eq!(keys.due_parts(&key).unwrap(), (due, Cow::Borrowed(job), Cow::Borrowed(trigger)));
            }
        }
        assert!(matches!(keys.due_time(&keys.job("j")), Err(StoreError::Corrupt(_))), "not a due key");
        assert!(matches!(keys.due_time(b"\x02app\x00\x15\x03"), Err(StoreError::Corrupt(_))), "cut short");
    }

    #[test]
    fn due_keys_sort_by_time_within_a_shard() {
        let keys = Keyspace::default_root();
        let early = keys.due(3, -5, "b", "t").into_vec();
        let late = keys.due(3, 1_000, "a", "t").into_vec();
        assert!(early < late);
        let (begin, end) = keys.due_until(3, 1_000);
        assert!(begin <= early && early < end && late < end);
        assert!(keys.due(3, 1_001, "a", "t").as_slice() >= end.as_slice());
        assert_eq!(keys.due_parts(&late).unwrap(), (1_000, Cow::Borrowed("a"), Cow::Borrowed("t")));
        assert_eq!(keys.due_time(&early).unwrap(), -5);
    }

    #[test]
    fn shards_are_stable_and_spread() {
        assert_eq!(shard_of("job", "default"), shard_of("job", "default"));
        let used: std::collections::BTreeSet<u16> =
            (0..1000).map(|i| shard_of(&format!("job-{i}"), "default")).collect();
        assert!(used.len() > 60, "{}", used.len());
    }

    #[test]
    fn ranges_contain_their_keys() {
        let keys = Keyspace::default_root();
        let run = Uuid::from_u128(7);
        let (b, e) = keys.running_on("node-1");
        let k = keys.running(run_node(), run).into_vec();
        assert!(b <= k && k < e);
        assert_eq!(keys.node_run_of(&k).unwrap(), run);
        let (b, e) = keys.all();
        assert!(b <= k && k < e);
    }

    fn run_node() -> &'static str {
        "node-1"
    }
}
