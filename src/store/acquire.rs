//! Acquisition (SPEC §10 step 8): take due fires, each exactly once across all nodes.
//!
//! One transaction per call:
//! 1. **Candidates, snapshot.** Scan the due index (no conflicts). Each shard has a home
//!    node among the live nodes (rendezvous hashing, in `due`), so concurrent pollers take disjoint
//!    fires; a node also takes fires from other shards once they are `steal_grace` late,
//!    which covers dead and slow nodes. Candidates are ordered by priority, then due time.
//! 2. **Per fire, serializable.** Read the trigger and its job; the trigger must still be
//!    `Waiting` at that due time. Two nodes taking the same fire both read it, one commits,
//!    the other conflicts and, retried, no longer sees it.
//! 3. **Decide.** The misfire policy; an unknown job type puts the trigger in `Error`; a
//!    non-concurrent job whose slot is held turns the trigger `Blocked` in this same
//!    transaction, otherwise the slot is claimed for the new run.
//! 4. **Write.** The run (`Running` on this node), and the trigger's next state: the next
//!    fire (cron, once), `Acquired` until the run ends (interval), or deleted (one-shot
//!    triggers the engine made).
//!
//! After an ambiguous commit the retry first looks at this node's running-run index: runs
//! there that the caller does not know were taken by the earlier attempt and are returned,
//! with `more` set (what else that attempt saw is not known).

use std::borrow::Cow;
use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use chrono::{DateTime, TimeDelta, Utc};
use futures_util::future::try_join;
use uuid::Uuid;

use super::candidate::{Candidate, KeyText};
use super::due::{DueFilter, DueHeads, DueOutlook, JobSet, NodeShards, RawOutlook, ShardHead, StealRota, Vouching};
use super::jobs::instant;
use super::keys::{fnv, DUE_SHARDS};
use super::read_cache::ReadCache;
use super::records::{JobView, NodeView, RunRecord, TriggerKind, TriggerRecord, TriggerView, TriggerWas};
use super::{codec, data_text, job_run_of, parse_data, KvJobStore, Prefetched, StoreError, Tx, BATCH_DATA_BUDGET};
use crate::error::SchedulingError;
use crate::job::{merge_data, JobRun, RunCause, RunState, TriggerState, ERROR_MESSAGE_LEN_MAX};
use crate::kv::{run, Kv, KvTransaction, RangeRequest, VALUE_SIZE_MAX};
use crate::rules::on_due;
use crate::schedule::{JobSchedule, PreviousFire, ScheduleKind};
use crate::time::to_micros;

/// The largest data a run may carry, in bytes of JSON text: its record must fit in one
/// store value with room for its names and error message. Definitions keep data far
/// smaller ([`crate::job::DATA_LEN_MAX`] per part, three parts at most).
const RUN_DATA_LEN_MAX: usize = VALUE_SIZE_MAX - ERROR_MESSAGE_LEN_MAX - 8 * 1024;

/// A set of run ids that can be asked whether it holds one: a node's runs in whatever
/// map or set it keeps them.
pub trait RunSet: Sync {
    /// Whether `id` is in the set.
    fn has(&self, id: &Uuid) -> bool;
}

impl RunSet for BTreeSet<Uuid> {
    fn has(&self, id: &Uuid) -> bool {
        self.contains(id)
    }
}

impl<V: Sync> RunSet for BTreeMap<Uuid, V> {
    fn has(&self, id: &Uuid) -> bool {
        self.contains_key(id)
    }
}

impl std::fmt::Debug for dyn RunSet + '_ {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("RunSet")
    }
}

/// What a node asks for when it acquires.
#[derive(Debug, Clone)]
pub struct AcquireRequest<'a> {
    /// The acquiring node.
    pub node: &'a str,
    /// Now, on this node's clock.
    pub now: DateTime<Utc>,
    /// Most runs to start.
    pub max: usize,
    /// Lateness that counts as misfire.
    pub misfire_threshold: Duration,
    /// How late a fire in another node's shard must be before this node takes it; also how
    /// recent (by this node's clock) a heartbeat saying its node has caught up must be for
    /// that node's shards to be left unread when stealing.
    pub steal_grace: Duration,
    /// Also take fires of this node's shards due up to this far after `now`; their runs
    /// start at their scheduled time (the caller waits), so acquisition is off the
    /// critical path of lateness. Misfire decisions still use `now`.
    pub lookahead: Duration,
    /// Job types this node can run; a fire of another type puts its trigger in `Error`.
    /// `None` accepts every type.
    pub known_types: Option<&'a BTreeSet<String>>,
    /// Runs this node already knows it is running (to recognise runs an ambiguous
    /// commit started). Asked only on a retry after such a commit, so the caller lends
    /// the set it keeps rather than building one per acquisition.
    pub known_runs: &'a dyn RunSet,
    /// Take fires of scheduled triggers (cron, interval, once). A non-leader on a
    /// non-shared store sets this to false (SPEC §10): it takes only one-shot triggers
    /// (enqueue, retry, recovery) and leaves the scheduled ones waiting, to misfire or run
    /// when this node leads.
    pub scheduled: bool,
    /// Jobs whose fires this node must leave waiting now: non-concurrent jobs with a run on
    /// this node that holds no slot in the store (a local job's, judged per node; one kept
    /// after this node was declared lost). Other nodes may take them.
    pub busy_jobs: &'a JobSet,
    /// A version of `busy_jobs` that changes whenever the set does, when the caller keeps
    /// one: the heads this acquisition returns then remember the version, not a copy of
    /// the set. `None` compares the sets.
    pub busy_version: Option<u64>,
    /// Also look at the other nodes' shards, for fires `steal_grace` late. Reading them
    /// costs a read per shard: a poller asks now and then, not at every fire of its own.
    pub steal: bool,
    /// With `steal`, leave unread the shards of each node whose last heartbeat, at most
    /// `steal_grace` from `now`, said it had caught up with them
    /// ([`NodeRecord::caught_up`](super::records::NodeRecord::caught_up)): it takes their
    /// fires itself, and were it to die, its heartbeat grows too old to believe as soon as
    /// its fires grow late enough to steal. A poller sets this at most of its reads, not
    /// all (see [`super::steal_read_trusts`]).
    pub trust_caught_up: bool,
    /// This node's home shards' first due entries as an earlier acquisition of its own
    /// returned them ([`Acquisition::heads`]), to use instead of reading each home shard's
    /// first entry again. The caller passes them only while nothing but that acquisition
    /// can have written those shards since it read them (the engine: while the node's wake
    /// key has not fired and nothing it did itself wrote due entries). They are read again
    /// anyway when `steal` is set without `trust_caught_up` (those reads find the fires no
    /// node was woken for, in every shard), when the node's home shards have changed, or
    /// when this request's filter differs from theirs.
    pub known_heads: Option<&'a DueHeads>,
}

impl AcquireRequest<'_> {
    /// The due entries this request takes (its `scheduled` and `busy_jobs`).
    pub fn filter(&self) -> DueFilter<'_> {
        DueFilter { scheduled: self.scheduled, busy_jobs: self.busy_jobs, busy_version: self.busy_version }
    }
}

/// A run the node must now execute.
#[derive(Debug, Clone, PartialEq)]
pub struct AcquiredRun {
    /// The run.
    pub run: JobRun,
    /// The job type to build.
    pub job_type: String,
    /// The job's timeout.
    pub timeout: Option<Duration>,
    /// Whether the run holds its job's slot (the job is not concurrent).
    pub exclusive: bool,
    /// Whether the run holds its trigger until it ends (a fixed-delay interval trigger,
    /// whose next fire is planned from the run's end); `None` when not known (a run
    /// adopted after an ambiguous commit; a local job's run, whose trigger lives on its
    /// node). Its completion passes it back
    /// ([`Completion::holds_trigger`](super::Completion::holds_trigger)).
    pub holds_trigger: Option<bool>,
}

/// The run id of fire number `fire` of the trigger incarnation `uid`: a UUID v7 stamped
/// with the scheduled time, whose random bits are a mix of (uid, fire). The same fire
/// always gets the same id, so a run can be created for it only once; two fires of one
/// incarnation never share an id (the first 64 random bits are a bijection of `fire` for a
/// given `uid`). A mixer, not a cryptographic hash: nothing here is secret, and this runs
/// once per fire on the acquisition path.
pub fn fire_run_id(uid: u64, fire: u32, scheduled_us: i64) -> Uuid {
    let first = mix64(uid ^ u64::from(fire).wrapping_mul(0x9e37_79b9_7f4a_7c15));
    let second = mix64(first ^ 0xd6e8_feb8_6659_fd93);
    let mut random = [0u8; 10];
    random[..8].copy_from_slice(&first.to_le_bytes());
    random[8..].copy_from_slice(&second.to_le_bytes()[..2]);
    let millis = u64::try_from(scheduled_us.div_euclid(1000)).unwrap_or(0);
    uuid::Builder::from_unix_timestamp_millis(millis, &random).into_uuid()
}

/// SplitMix64's finalizer: a bijection on `u64` whose output bits each depend on every
/// input bit.
pub(super) fn mix64(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// What an acquisition's fires added up to.
#[derive(Debug, Default)]
struct BatchTally {
    /// Data bytes written (see `BATCH_DATA_BUDGET`).
    written: usize,
    /// A trigger taken is due again at once (a backlog catching up): acquire again now.
    due_again: bool,
}

/// What an acquisition found to take.
struct Candidates {
    /// The fires this node may take, in the order to take them.
    ordered: Vec<Candidate>,
    /// Each shard's first fire to take (`None` when it has none).
    heads: Vec<Option<ShardHead>>,
    /// Which shards are this node's home.
    homes: Vec<bool>,
    /// This node's turn at stealing, by the node list read.
    rota: StealRota,
    /// Some shard had more due than was read.
    truncated: bool,
    /// Shards whose head, known from an earlier acquisition, was read on from: it may be
    /// an entry removed since (removals wake no node), so their head is read again.
    recheck: BTreeSet<u16>,
}

/// What an acquisition read ahead for the fires it takes (see `prefetch_fires`).
struct FireReads {
    /// The triggers, as stored (each decoded as a [`TriggerView`] where used).
    triggers: Prefetched,
    /// The run records of the fires' runs (present only if a fire already ran).
    guards: Prefetched,
    /// The slots of non-concurrent jobs.
    slots: Prefetched,
}

/// What one acquisition did and saw.
#[derive(Debug, Clone, PartialEq)]
pub struct Acquisition {
    /// The runs it started.
    pub runs: Vec<AcquiredRun>,
    /// The due outlook after it (see [`KvJobStore::due_outlook`]); `None` when `more`.
    /// Without `steal`, the other nodes' shards were not read: `first_elsewhere` is `None`.
    pub outlook: Option<DueOutlook>,
    /// More fires may be due right now (it took `max`, wrote its data budget, read only
    /// part of a crowded shard, or left a trigger it took due again, catching up): the
    /// caller acquires again rather than sleeps, and the outlook is not read.
    pub more: bool,
    /// How many of `runs` are late fires of other nodes' shards (stolen).
    pub stolen: usize,
    /// The node's turn at [`steal`](AcquireRequest::steal)ing among the nodes that own
    /// shards, by the node list this acquisition read (`None`: it read no due entries,
    /// being asked for none, finding runs an earlier attempt of its own took, or the node
    /// no longer being alive).
    pub rota: Option<StealRota>,
    /// This node's home shards' first due entries after it (with `outlook`; `None` when
    /// that is): see [`AcquireRequest::known_heads`].
    pub heads: Option<DueHeads>,
}

impl<K: Kv> KvJobStore<K> {
    /// Takes up to `request.max` due fires and starts their runs on `request.node`.
    ///
    /// # Errors
    /// `SCHEDULING_UNAVAILABLE_004` when the history cap is reached by running runs, and
    /// store errors.
    pub async fn acquire_due(&self, request: &AcquireRequest<'_>) -> Result<Vec<AcquiredRun>, StoreError> {
        Ok(self.acquire(request, None).await?.runs)
    }

    /// [`acquire_due`](Self::acquire_due), also reporting the
    /// [`due_outlook`](Self::due_outlook) with `window` and `limit` as the acquisition's
    /// transaction sees the due index afterwards (its own changes included): a poller need
    /// not read every shard again to know when to wake.
    ///
    /// # Errors
    /// As [`acquire_due`](Self::acquire_due).
    pub async fn acquire_with_outlook(
        &self,
        request: &AcquireRequest<'_>,
        window: Duration,
        limit: usize,
    ) -> Result<Acquisition, StoreError> {
        self.acquire(request, Some((window, limit))).await
    }

    /// Acquisition, reading the outlook (`window`, `limit`) only when asked for it.
    async fn acquire(
        &self,
        request: &AcquireRequest<'_>,
        wanted: Option<(Duration, usize)>,
    ) -> Result<Acquisition, StoreError> {
        if request.max == 0 {
            let outlook = match wanted {
                Some((window, limit)) => Some(self.due_outlook(request.node, request.filter(), window, limit).await?),
                None => None,
            };
            return Ok(Acquisition { runs: Vec::new(), outlook, more: false, stolen: 0, rota: None, heads: None });
        }
        let (runs, outlook, more, stolen, rota, heads) = run(&self.kv, self.options.retry, |txn, maybe| async move {
            let tx = self.tx(txn);
            let outlook_now = |tx| async move {
                match wanted {
                    Some((window, limit)) => {
                        self.outlook_in(tx, request.node, request.filter(), window, limit).await.map(Some)
                    }
                    None => Ok(None),
                }
            };
            if maybe.0 {
                let now = [to_micros(request.now)];
                let adopted = self.unknown_runs_started_at(&tx, request.node, request.known_runs, &now).await?;
                if !adopted.is_empty() {
                    // Whether that attempt filled the batch or left a fire due again is not
                    // known: the caller acquires again at once, and that acquisition knows.
                    return Ok((adopted, None, true, 0, None, None));
                }
            }
            if !self.node_may_run(&tx, request.node).await? {
                return Ok((Vec::new(), outlook_now(&tx).await?, false, 0, None, None));
            }
            let Candidates { ordered, heads, homes, rota, truncated, recheck } = self.candidates(&tx, request).await?;
            let mut acquired = Vec::with_capacity(ordered.len().min(request.max));
            let mut changed = recheck;
            let mut cache = ReadCache::default();
            let mut reads = self.prefetch_fires(&tx, request, &ordered, &mut cache).await?;
            let (mut tally, mut stolen) = (BatchTally::default(), 0);
            for candidate in ordered {
                if acquired.len() == request.max || tally.written >= BATCH_DATA_BUDGET {
                    break;
                }
                // Taking (or clearing) a fire rewrites due entries of its trigger's shard.
                changed.insert(candidate.shard);
                let taken = self.take_fire(&tx, request, &candidate, &mut reads, &mut cache, &mut tally).await?;
                stolen += usize::from(taken.is_some() && !candidate.home);
                acquired.extend(taken);
            }
            let full = acquired.len() == request.max || tally.written >= BATCH_DATA_BUDGET;
            let more = full || truncated && !acquired.is_empty() || tally.due_again;
            let Some((window, limit)) = wanted.filter(|_| !more) else {
                // More may be due at once (the caller acquires again before it sleeps), or
                // no outlook was asked for.
                return Ok((acquired, None, more, stolen, Some(rota), None));
            };
            let heads = self.first_due(&tx, heads, &changed, request.filter()).await?;
            let outlook = self.count_due(&tx, &heads, &homes, window, limit).await?;
            let heads = DueHeads::of_homes(homes, heads, request.filter());
            Ok::<_, StoreError>((acquired, Some(outlook), false, stolen, Some(rota), Some(heads)))
        })
        .await?;
        Ok(Acquisition { runs, outlook: outlook.map(RawOutlook::outlook).transpose()?, more, stolen, rota, heads })
    }

    /// Whether `node` may take fires or start runs: not when it is registered but no
    /// longer alive (declared lost, or deregistered). Its runs would belong to a node the leader no
    /// longer watches, and would stay `Running` for ever if it then died. Read
    /// serializably, so a declaration racing this acquisition conflicts with it, and the
    /// retry sees it. A node without a record may if this store never heartbeated for it (a
    /// store of its own); one it did heartbeat for was declared lost or stopped, and the
    /// leader deleted the record once no runs were left: it may not until it heartbeats.
    pub(super) async fn node_may_run(&self, tx: &Tx<'_, K::Transaction>, node: &str) -> Result<bool, StoreError> {
        let Some(bytes) = tx.txn.get(&self.keys.node(node), false).await? else {
            return Ok(!self.has_registered(node));
        };
        let record: NodeView<'_> = codec::decode(&bytes, "node record")?;
        Ok(record.alive)
    }

    /// The runs that failed acquisitions by `node` committed after all: a commit reported
    /// as unknown, and every retry then failed too (too old, unavailable), so the caller
    /// never heard of runs that are `Running` on `node` in the store. `attempts` are those
    /// acquisitions' `now`; `known` the runs the caller has. Hand them to their run actors
    /// as if acquired now (they start late by the time the retries took), before
    /// [`reclaim_previous_runs`](Self::reclaim_previous_runs), which would mark them lost.
    ///
    /// Only runs such an acquisition started qualify (not local, not manual, started at
    /// one of the attempts' `now`, or at their scheduled time when acquired ahead of it).
    /// Snapshot reads; nothing is written.
    ///
    /// # Errors
    /// Store errors.
    pub async fn adopt_committed_runs(
        &self,
        node: &str,
        known: &BTreeSet<Uuid>,
        attempts: &[DateTime<Utc>],
    ) -> Result<Vec<AcquiredRun>, StoreError> {
        if attempts.is_empty() {
            return Ok(Vec::new());
        }
        let attempts: Vec<i64> = attempts.iter().map(|at| to_micros(*at)).collect();
        run(&self.kv, self.options.retry, |txn, _| {
            let attempts = &attempts;
            async move { self.unknown_runs_started_at(&self.tx(txn), node, known, attempts).await }
        })
        .await
    }

    /// Runs `Running` on `node` that are not in `known` and that an acquisition at one of
    /// `attempts` (µs) started: an earlier attempt whose commit was ambiguous. Older ones
    /// belong to an earlier process with this node id (see `reclaim_previous_runs`).
    /// Snapshot reads, so completions elsewhere do not conflict.
    async fn unknown_runs_started_at(
        &self,
        tx: &Tx<'_, K::Transaction>,
        node: &str,
        known: &dyn RunSet,
        attempts: &[i64],
    ) -> Result<Vec<AcquiredRun>, StoreError> {
        let (begin, end) = self.keys.running_on(node);
        let running = tx.txn.get_range(&RangeRequest::new(begin, end), true).await?;
        let mut unknown = Vec::new();
        for (key, _) in &running.pairs {
            let id = self.keys.node_run_of(key)?;
            if !known.has(&id) {
                unknown.push(self.keys.run(id).into_vec());
            }
        }
        // Read together: under store latency one read per run made a retry too old.
        let records = tx.txn.get_many(&unknown, true).await?;
        let mut adopted = Vec::new();
        for bytes in records.into_iter().flatten() {
            let record: RunRecord = codec::decode(&bytes, "run record")?;
            let started_by_an_attempt = attempts.iter().any(|&now| record.started_us == now.max(record.scheduled_us));
            if record.state != RunState::Running
                || !started_by_an_attempt
                || record.local
                || record.cause == RunCause::Manual && record.trigger.is_none()
            {
                continue;
            }
            let job = tx.job(&record.job).await?;
            adopted.push(AcquiredRun {
                run: job_run_of(&record.view())?,
                job_type: job.as_ref().map(|j| j.job_type.clone()).unwrap_or_default(),
                timeout: job.as_ref().and_then(|j| j.timeout_us).map(Duration::from_micros),
                exclusive: record.exclusive,
                holds_trigger: None,
            });
        }
        Ok(adopted)
    }

    /// The fires this node may take, in the order to take them.
    async fn candidates(
        &self,
        tx: &Tx<'_, K::Transaction>,
        request: &AcquireRequest<'_>,
    ) -> Result<Candidates, StoreError> {
        let now = to_micros(request.now);
        let grace =
            TimeDelta::from_std(request.steal_grace).map_or(i64::MAX, |g| g.num_microseconds().unwrap_or(i64::MAX));
        let vouching = (request.steal && request.trust_caught_up).then_some(Vouching { now_us: now, within_us: grace });
        let NodeShards { home: homes, rota, vouched } = self.homes_of(tx, request.node, vouching).await?;
        let lookahead = TimeDelta::from_std(request.lookahead).map_or(0, |l| l.num_microseconds().unwrap_or(0));
        let mut candidates = Vec::new();
        let filter = request.filter();
        // The home shards' heads an earlier acquisition of this node left, if they hold;
        // otherwise each home shard's first entry is read. A doubting steal read reads
        // them all afresh: it looks for the fires no node was woken for.
        let doubting = request.steal && !request.trust_caught_up;
        let known = request.known_heads.filter(|_| !doubting).and_then(|known| known.heads_for(&homes, filter));
        // Stealing, the shards of nodes that vouch for them are left out: their late fires
        // would be taken by their home node before they are late enough.
        let stolen_from =
            |s: u16| request.steal && !homes[usize::from(s)] && !vouched.get(usize::from(s)).is_some_and(|v| *v);
        let read: BTreeSet<u16> =
            (0..DUE_SHARDS).filter(|&s| (known.is_none() && homes[usize::from(s)]) || stolen_from(s)).collect();
        let heads = known.map_or_else(|| vec![None; usize::from(DUE_SHARDS)], <[_]>::to_vec);
        let heads = if read.is_empty() { heads } else { self.first_due(tx, heads, &read, filter).await? };
        let until = |shard: u16| {
            if homes[usize::from(shard)] {
                now.saturating_add(lookahead)
            } else {
                now.saturating_sub(grace)
            }
        };
        // Most shards have nothing due: their head, read anyway for the outlook, says so
        // without a range read.
        let active: Vec<(u16, &ShardHead)> = (0..DUE_SHARDS)
            .filter_map(|s| heads[usize::from(s)].as_ref().filter(|head| head.due <= until(s)).map(|head| (s, head)))
            .collect();
        // Known heads may be early (an entry since taken or skipped): the home shards with
        // one due are read again after the acquisition.
        let recheck = match known {
            Some(_) => active.iter().map(|(shard, _)| *shard).filter(|&s| homes[usize::from(s)]).collect(),
            None => BTreeSet::new(),
        };
        // Each shard's fair share of the batch, twice over: a large batch reads about
        // twice what it takes, not every fire due within the lookahead. A shard cut short
        // says so (`truncated`), and the caller acquires again.
        let per_shard = (2 * request.max).div_ceil(active.len().max(1)).clamp(16, request.max.max(16));
        let mut truncated = false;
        let ranges: Vec<RangeRequest> = active
            .iter()
            .map(|&(shard, head)| {
                // From the head: the entries before it are fires this node leaves waiting.
                let (_, end) = self.keys.due_until(shard, until(shard));
                let range = RangeRequest::new(head.key.to_vec(), end);
                // Without scheduled fires, the waiting scheduled entries are skipped: read
                // past them so they cannot hide one-shot fires behind them.
                if request.scheduled {
                    range.limit(per_shard)
                } else {
                    range
                }
            })
            .collect();
        let reads = tx.txn.get_ranges(&ranges, true).await?;
        candidates.reserve_exact(reads.iter().map(|read| read.pairs.len()).sum());
        for ((shard, _), read) in active.into_iter().zip(reads) {
            let home = homes[usize::from(shard)];
            truncated |= read.more;
            for (key, value) in read.pairs {
                if filter.skips(&self.keys, &key, &value)? {
                    continue;
                }
                let priority = super::due_value_parts(&value).0;
                let (due, job, trigger) = self.keys.due_parts(&key)?;
                let spread = if home { 0 } else { fnv(&[request.node.as_bytes(), job.as_bytes(), trigger.as_bytes()]) };
                let (job, trigger) = (KeyText::of(&key, job), KeyText::of(&key, trigger));
                candidates.push(Candidate { home, spread, priority, due, key, job, trigger, shard });
            }
        }
        // Home fires by priority then due time; then stolen ones, by priority and then in
        // this node's own pseudo-random order, so nodes stealing together pick apart.
        // Ties keep the order read (shard by shard, each in key order): deterministic, and
        // sorting by integers only (thousands of fires due together all tie up to here).
        candidates.sort_by_cached_key(|c| (!c.home, std::cmp::Reverse(c.priority), c.spread, c.due));
        Ok(Candidates { ordered: candidates, heads, homes, rota, truncated, recheck })
    }

    /// Writes the next state of a trigger whose fire this acquisition took. A fire taken
    /// from another node's shard (stolen) gives that shard a new due entry, which its home
    /// node hears of through its wake key, as of any other node's write (see
    /// `put_trigger_and_wake`); a home fire's next entry is this node's own.
    fn put_taken_trigger(
        &self,
        tx: &Tx<'_, K::Transaction>,
        candidate: &Candidate,
        was: TriggerWas,
        new: &TriggerView<'_>,
    ) {
        if candidate.home {
            tx.put_trigger_from(Some(was), new, false);
        } else {
            self.put_trigger_from_and_wake(tx, Some(was), new, false);
        }
    }

    /// Takes one candidate fire: `Some(run)` when a run starts.
    async fn take_fire(
        &self,
        tx: &Tx<'_, K::Transaction>,
        request: &AcquireRequest<'_>,
        candidate: &Candidate,
        reads: &mut FireReads,
        cache: &mut ReadCache,
        tally: &mut BatchTally,
    ) -> Result<Option<AcquiredRun>, StoreError> {
        let snapshot = self.broken_acquisition();
        let key = self.keys.trigger(candidate.job(), candidate.trigger());
        let bytes = tx.get_prefetched(&mut reads.triggers, &key, snapshot, Ok).await?;
        let Some(bytes) = bytes else {
            // An index entry without its trigger: never written by this store; repair.
            tx.txn.clear(&candidate.key);
            return Ok(None);
        };
        let trigger: TriggerView<'_> = codec::decode(&bytes, "trigger record")?;
        if trigger.state != TriggerState::Waiting || trigger.next_fire_us != Some(candidate.due) {
            // The snapshot showed an entry the trigger no longer has (another node moved
            // it since); clearing it is a no-op unless it is stale.
            tx.txn.clear(&candidate.key);
            return Ok(None);
        }
        let Some(job) = cache.jobs.get(tx, candidate.job()).await? else {
            tx.delete_trigger(&trigger);
            return Ok(None);
        };
        if request.known_types.is_some_and(|types| !types.contains(job.job_type)) {
            let reason = format!("job type '{}' is not registered on node '{}'", job.job_type, request.node);
            self.put_error(tx, &trigger, reason);
            return Ok(None);
        }
        let schedule = match self.schedules.get(trigger.schedule) {
            Ok(schedule) => schedule,
            Err(e) => {
                self.put_error(tx, &trigger, format!("stored schedule does not parse: {e}"));
                return Ok(None);
            }
        };
        if let Some(reason) = self.missing_calendar(&schedule, request.node) {
            // Its next fire would ignore the calendar (a holiday job run on a holiday), as
            // on a node that lacks the job's type: visible in Error, not silently wrong.
            self.put_error(tx, &trigger, reason);
            return Ok(None);
        }
        let (decision, run_id) = self.fire_of(request, &trigger, candidate.due)?;
        let (Some(scheduled), Some(run_id)) = (decision.run_scheduled_at, run_id) else {
            // Skipped by the misfire policy: no run, next fire from now.
            let fire_count = trigger.fire_count;
            #[cfg(feature = "test-hooks")]
            let fire_count = fire_count + u32::from(self.options.broken == Some(super::BrokenStore::SkipCounted));
            let was = trigger.was();
            let next = self.advance(trigger, &schedule, decision.next_basis, request.now, fire_count);
            self.put_taken_trigger(tx, candidate, was, &next);
            return Ok(None);
        };
        let (cause, attempt, retry_of, data) = match trigger.kind {
            TriggerKind::Defined => (RunCause::Schedule, 1, None, run_data(&job, &trigger)?),
            TriggerKind::Manual => (RunCause::Manual, 1, None, run_data(&job, &trigger)?),
            TriggerKind::Retry { attempt, retry_of } => {
                (RunCause::Retry, attempt, Some(retry_of), Cow::Borrowed(trigger.data))
            }
            TriggerKind::Recovery { attempt, retry_of, .. } => {
                (RunCause::Recovery, attempt, retry_of, Cow::Borrowed(trigger.data))
            }
        };
        if data.len() > RUN_DATA_LEN_MAX {
            // Validation keeps data far smaller; a record written otherwise must fail on
            // its own, not fail every acquisition it is part of (the store would refuse
            // the whole transaction, on every node, at every cycle).
            let reason = format!("run data is {} bytes as JSON; a run keeps at most {RUN_DATA_LEN_MAX}", data.len());
            self.put_error(tx, &trigger, reason);
            return Ok(None);
        }
        let exclusive = !job.allow_concurrent;
        if exclusive {
            let mut slot = tx.slot_prefetched(&mut reads.slots, job.name).await?;
            if slot.holder.is_some() {
                // The previous run still holds the slot: block, keeping the due time. The
                // slot was read in this transaction, so a completion freeing it now
                // conflicts with us, and one of us sees the other.
                let blocked = TriggerRecord { state: TriggerState::Blocked, ..trigger };
                tx.put_trigger_from(Some(trigger.was()), &blocked, false);
                if !slot.blocked {
                    // The holder's release looks for blocked triggers.
                    slot.blocked = true;
                    tx.put_slot(job.name, &slot);
                }
                return Ok(None);
            }
            slot.holder = Some(run_id);
            slot.generation += 1;
            tx.put_slot(job.name, &slot);
        }
        self.make_room(tx).await?;
        let record = RunRecord {
            id: run_id,
            job: job.name,
            trigger: Some(trigger.name),
            scheduled_us: to_micros(scheduled),
            cause,
            attempt,
            retry_of,
            data: &data,
            state: RunState::Running,
            node: request.node,
            // A fire taken ahead starts at its scheduled time (its run waits for it).
            started_us: to_micros(request.now).max(to_micros(scheduled)),
            finished_us: None,
            error_code: None,
            error_message: None,
            exclusive,
            local: false,
        };
        // A snapshot read: every transaction that creates a fire's run writes its trigger
        // too, which this one read, so a run created since conflicts there already.
        if tx.get_prefetched(&mut reads.guards, &self.keys.run(run_id), true, Ok).await?.is_some() {
            // The fire already ran: a second guard behind the trigger's state.
            return Ok(None);
        }
        tx.put_run(None, &record);
        tally.written += record.data.len() + trigger.data.len();
        let run = job_run_of(&record)?;
        self.count_runs_delta(tx, 1);
        // Only here does a run come to hold its trigger: a fixed-delay interval's.
        let holds_trigger = !trigger.kind.is_synthetic() && matches!(schedule.kind, ScheduleKind::Every { .. });
        if trigger.kind.is_synthetic() {
            tx.delete_trigger(&trigger);
        } else if holds_trigger {
            // Fixed delay: the next fire is computed when this run completes.
            let acquired = TriggerRecord {
                state: TriggerState::Acquired,
                running_run: Some(run_id),
                next_fire_us: None,
                previous_fire_us: Some(to_micros(scheduled)),
                fire_count: trigger.fire_count + 1,
                ..trigger
            };
            tx.put_trigger_from(Some(trigger.was()), &acquired, false);
        } else {
            let (was, fire_count) = (trigger.was(), trigger.fire_count + 1);
            let mut next = self.advance(trigger, &schedule, decision.next_basis, request.now, fire_count);
            next.previous_fire_us = Some(to_micros(scheduled));
            // Catching up (`RunAll`): its next fire is due already, and one acquisition
            // takes one fire per trigger.
            tally.due_again |= next.state == TriggerState::Waiting
                && next.next_fire_us.is_some_and(|due| due <= to_micros(request.now));
            self.put_taken_trigger(tx, candidate, was, &next);
        }
        Ok(Some(AcquiredRun {
            run,
            job_type: job.job_type.to_owned(),
            timeout: job.timeout_us.map(Duration::from_micros),
            exclusive,
            holds_trigger: Some(holds_trigger),
        }))
    }

    /// Reads ahead, together, what taking the first `request.max` candidates reads one
    /// by one (they are all taken or cleared, whatever they turn out to be): their
    /// triggers and jobs, then the run records that guard the fires those triggers are
    /// due for and the slots of non-concurrent jobs. Two round trips on a remote store
    /// instead of several per fire.
    async fn prefetch_fires(
        &self,
        tx: &Tx<'_, K::Transaction>,
        request: &AcquireRequest<'_>,
        ordered: &[Candidate],
        cache: &mut ReadCache,
    ) -> Result<FireReads, StoreError> {
        let snapshot = self.broken_acquisition();
        let first = &ordered[..ordered.len().min(request.max)];
        let keys = first.iter().map(|c| self.keys.trigger(c.job(), c.trigger())).collect();
        let (triggers, ()) =
            try_join(tx.prefetch(keys, snapshot), cache.jobs.prefetch(tx, first.iter().map(Candidate::job))).await?;
        // Guards and slots in the order the fires ask for them; each slot once.
        let (mut guards, mut slots, mut exclusive_jobs) = (Vec::new(), Vec::new(), BTreeSet::new());
        for (candidate, bytes) in first.iter().zip(triggers.values()) {
            let Some(Some(bytes)) = bytes else { continue };
            let trigger: TriggerView<'_> = codec::decode(bytes, "trigger record")?;
            if trigger.state != TriggerState::Waiting || trigger.next_fire_us != Some(candidate.due) {
                continue;
            }
            if let (_, Some(run_id)) = self.fire_of(request, &trigger, candidate.due)? {
                guards.push(self.keys.run(run_id));
                let exclusive = cache.jobs.cached(candidate.job())?.is_some_and(|job| !job.allow_concurrent);
                if exclusive && exclusive_jobs.insert(candidate.job()) {
                    slots.push(self.keys.slot(candidate.job()));
                }
            }
        }
        // The guards at snapshot level (see `take_fire`).
        let (guards, slots) = try_join(tx.prefetch(guards, true), tx.prefetch(slots, false)).await?;
        Ok(FireReads { triggers, guards, slots })
    }

    /// What a due fire of `trigger` does (run, skip) and the id of the run it starts.
    fn fire_of<S>(
        &self,
        request: &AcquireRequest<'_>,
        trigger: &TriggerRecord<S>,
        due_us: i64,
    ) -> Result<(crate::rules::DueDecision, Option<Uuid>), StoreError> {
        let decision = on_due(trigger.misfire, instant(due_us)?, request.now, self.misfire_threshold(request));
        let run_id = decision.run_scheduled_at.map(|at| fire_run_id(trigger.uid, trigger.fire_count, to_micros(at)));
        Ok((decision, run_id))
    }

    /// The misfire threshold acquisition applies: the request's (a tenth of it with the
    /// deliberate bug `EarlyMisfire`, feature `test-hooks`).
    fn misfire_threshold(&self, request: &AcquireRequest<'_>) -> std::time::Duration {
        #[cfg(feature = "test-hooks")]
        if self.options.broken == Some(super::BrokenStore::EarlyMisfire) {
            return request.misfire_threshold / 10;
        }
        request.misfire_threshold
    }

    /// Whether acquisition skips its conflict checks (a deliberate bug, feature `test-hooks`).
    fn broken_acquisition(&self) -> bool {
        #[cfg(feature = "test-hooks")]
        {
            self.options.broken == Some(super::BrokenStore::AcquireWithoutConflictCheck)
        }
        #[cfg(not(feature = "test-hooks"))]
        {
            false
        }
    }

    /// The trigger after a fire whose next is computed from `basis` (the scheduled time,
    /// or now after a misfire): `Waiting` at the next fire, or `Complete`.
    fn advance<S>(
        &self,
        mut record: TriggerRecord<S>,
        schedule: &JobSchedule,
        basis: DateTime<Utc>,
        now: DateTime<Utc>,
        fire_count: u32,
    ) -> TriggerRecord<S> {
        let calendar = schedule.calendar.as_ref().and_then(|name| self.calendars.get(name));
        let previous = PreviousFire { scheduled_at: basis, completed_at: now, fire_count };
        let next = schedule.next_fire(&previous, calendar);
        record.fire_count = fire_count;
        record.next_fire_us = next.map(to_micros);
        record.state = if next.is_some() { TriggerState::Waiting } else { TriggerState::Complete };
        record
    }

    /// Why `schedule`'s next fires cannot be computed on `node`: it names a calendar that
    /// is not registered here (calendars are registered in code or config, per node, and
    /// may differ during a rolling change).
    pub(crate) fn missing_calendar(&self, schedule: &JobSchedule, node: &str) -> Option<String> {
        let name = schedule.calendar.as_ref()?;
        (!self.calendars.contains(name)).then(|| format!("calendar '{name}' is not registered on node '{node}'"))
    }

    fn put_error<S: AsRef<str>>(&self, tx: &Tx<'_, K::Transaction>, trigger: &TriggerRecord<S>, reason: String) {
        let failed = TriggerRecord { state: TriggerState::Error, error: Some(reason), ..trigger.to_record() };
        tx.put_trigger_from(Some(trigger.was()), &failed, false);
    }

    /// Adjusts the stored-run counter (an atomic add: never a conflict).
    pub(crate) fn count_runs_delta(&self, tx: &Tx<'_, K::Transaction>, delta: i64) {
        if self.options.max_runs.is_some() {
            tx.txn.atomic_op(&self.keys.run_count(), &delta.to_le_bytes(), crate::kv::AtomicOp::Add);
        }
    }

    /// With a history cap, evicts the finished runs scheduled earliest to make room for one
    /// more; fails with `SCHEDULING_UNAVAILABLE_004` when every kept run is still running.
    pub(crate) async fn make_room(&self, tx: &Tx<'_, K::Transaction>) -> Result<(), StoreError> {
        let Some(max_runs) = self.options.max_runs else { return Ok(()) };
        let count = match tx.txn.get(&self.keys.run_count(), true).await? {
            Some(bytes) => bytes.try_into().map(i64::from_le_bytes).unwrap_or(0),
            None => 0,
        };
        let excess = (count + 1).saturating_sub(max_runs as i64);
        if excess <= 0 {
            return Ok(());
        }
        // The history index holds finished runs only.
        let (begin, end) = self.keys.history_between(i64::MIN, i64::MAX);
        let oldest = tx.txn.get_range(&RangeRequest::new(begin, end).limit(excess as usize), true).await?;
        if (oldest.pairs.len() as i64) < excess {
            return Err(SchedulingError::StoreFull { capacity: max_runs as usize }.into());
        }
        for (key, _) in oldest.pairs {
            let (_, id) = self.keys.history_entry_of(&key, false)?;
            if let Some(old) = tx.run(id).await?.filter(|old| old.state.is_final()) {
                self.delete_run(tx, &old);
            }
        }
        Ok(())
    }

    /// Deletes a finished run and its index entries.
    pub(crate) fn delete_run(&self, tx: &Tx<'_, K::Transaction>, run: &RunRecord) {
        if let Some(hook) = &self.options.on_run_deleted {
            (hook.0)(run);
        }
        tx.txn.clear(&self.keys.run(run.id));
        tx.txn.clear(&self.keys.history_by_job(&run.job, run.scheduled_us, run.id));
        tx.txn.clear(&self.keys.history_by_time(run.scheduled_us, run.id));
        if run.state == RunState::Running {
            tx.txn.clear(&self.keys.running(&run.node, run.id));
            tx.txn.clear(&self.keys.job_running(&run.job, run.id));
        }
        self.count_runs_delta(tx, -1);
    }
}

/// A run's data: the job's data under the trigger's (SPEC §3), as JSON text.
///
/// Data is stored as the canonical text [`data_text`] writes, which a merge with an empty
/// object leaves as it is: when either side has nothing (most triggers, and most jobs),
/// the run's data is the other's text as stored, parsed by neither.
fn run_data<'a>(job: &JobView<'a>, trigger: &TriggerView<'a>) -> Result<Cow<'a, str>, StoreError> {
    let nothing = |data: &str| data.is_empty() || data == EMPTY_DATA;
    if nothing(trigger.data) {
        return Ok(Cow::Borrowed(job.data));
    }
    if nothing(job.data) {
        return Ok(Cow::Borrowed(trigger.data));
    }
    Ok(Cow::Owned(data_text(&merge_data([&parse_data(job.data)?, &parse_data(trigger.data)?]))))
}

/// An empty JSON object in [`data_text`]'s form.
const EMPTY_DATA: &str = "{}";

#[cfg(test)]
mod tests {
    use super::*;
    use crate::job::JsonObject;
    use crate::store::records::{self, JobRecord};

    #[test]
    fn run_data_is_the_merge_of_job_and_trigger_data_in_canonical_text() {
        let texts = [
            "",
            "{}",
            r#"{"a":1}"#,
            r#"{"a":{"x":[1,2.5,-3e-7]},"b":"é\n\"q\""}"#,
            r#"{"a":null,"c":true}"#,
            r#"{"big":18446744073709551615,"neg":-9223372036854775808,"f":0.1}"#,
        ];
        let canonical =
            |text: &str| if text.is_empty() { String::new() } else { data_text(&parse_data(text).unwrap()) };
        for job_text in texts.iter().map(|t| canonical(t)).filter(|t| !t.is_empty()) {
            for trigger_text in texts.iter().map(|t| canonical(t)) {
                let job = JobRecord {
                    name: "job".into(),
                    job_type: "t".into(),
                    data: job_text.clone(),
                    allow_concurrent: false,
                    run_on_every_instance: false,
                    requests_recovery: false,
                    retry: None,
                    timeout_us: None,
                    description: None,
                    origin: crate::job::JobOrigin::Runtime,
                    code_fingerprint: None,
                    paused: false,
                    revision: 0,
                };
                let trigger = TriggerRecord { data: trigger_text.clone(), ..records::waiting_trigger() };
                let trigger_data =
                    if trigger_text.is_empty() { JsonObject::new() } else { parse_data(&trigger_text).unwrap() };
                let parsed = merge_data([&parse_data(&job_text).unwrap(), &trigger_data]);
                let merged = run_data(&job.view(), &trigger.view()).unwrap();
                assert_eq!(merged, data_text(&parsed), "{job_text} <- {trigger_text}");
            }
        }
    }

    #[test]
    fn fire_ids_are_stable_v7_and_distinct() {
        let a = fire_run_id(1, 0, 1_800_000_000_000_000);
        assert_eq!(a, fire_run_id(1, 0, 1_800_000_000_000_000));
        assert_eq!(a.get_version_num(), 7);
        assert_ne!(a, fire_run_id(1, 1, 1_800_000_000_000_000));
        assert_ne!(a, fire_run_id(2, 0, 1_800_000_000_000_000));
    }

    #[test]
    fn fire_ids_do_not_collide_across_fires_and_neighbouring_incarnations() {
        // All at one scheduled millisecond, so only the mixed bits tell them apart.
        let mut seen = std::collections::BTreeSet::new();
        for uid in 0..300u64 {
            for fire in 0..300u32 {
                assert!(seen.insert(fire_run_id(uid, fire, 1_800_000_000_000_000)), "uid {uid} fire {fire}");
            }
        }
        for fire in [0, 1, u32::MAX - 1, u32::MAX] {
            assert!(seen.insert(fire_run_id(u64::MAX, fire, 1_800_000_000_000_000)));
        }
    }
}
