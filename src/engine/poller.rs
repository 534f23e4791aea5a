//! The poller's state machine: what a node's engine cycle (SPEC §10) remembers between
//! cycles and decides from it, on plain values. The poller actor (`sundial-actors`) asks
//! it what to do, does it (store calls, run actors, timers), and hands it the results.
//!
//! A cycle, in order:
//! 1. write the code jobs until that once works ([`Poller::needs_sync`], [`Poller::synced`]);
//! 2. heartbeat when due ([`Poller::needs_heartbeat`], [`Poller::heartbeat_committed`]): a
//!    node of a shared store without a recent heartbeat takes no new work;
//! 3. start the runs a failed acquisition may have committed ([`Poller::unadopted`],
//!    [`Poller::adopted`]), before anything that counts a job's runs here;
//! 4. refresh the local jobs every [`LOCAL_REFRESH_CYCLES`] or after a local change, and
//!    start the due local fires ([`Poller::local_refresh`], [`Poller::polls_local`]);
//! 5. mark lost the runs an earlier process left ([`Poller::needs_reclaim`]);
//! 6. acquire due fires into free slots ([`Poller::slots`], [`Poller::plan_acquisition`],
//!    [`Poller::acquired`] or [`Poller::acquire_failed`]), skipping the store when what
//!    the last acquisition saw still holds, and reading other nodes' shards at this node's
//!    turns;
//! 7. sleep until the next fire enters the lookahead ([`Poller::wait_after`]).
//!
//! Between cycles: a local change ([`Poller::local_change`]), a fire made due here
//! ([`Poller::wait_for_due`]) and a run's end ([`Poller::run_ended`]) each say whether and
//! when to cycle again.

use std::time::Duration;

use chrono::{DateTime, Utc};

use crate::poll::{heartbeat_due, wait_after_cycle, CycleEnd, NextDue, Taken, STEAL_CHECK};
use crate::rules::{acquire_slots, held_runs_limit, AcquisitionBatch, AcquisitionLead, JobTime, AUTO_ACQUIRE_BATCH};
use crate::store::{steal_read_due, steal_read_trusts, DueHeads, DueOutlook, StealRota};
use crate::time::{add_duration, MonotonicInstant};

/// Fires due this soon are always acquired ahead; their runs wait for their scheduled
/// instant, so acquisition happens before the due time instead of after it.
pub const LOOKAHEAD: Duration = Duration::from_millis(100);
/// The most a node acquires ahead when many fires fall due together (see
/// [`AcquisitionLead`]).
pub const MAX_LOOKAHEAD: Duration = Duration::from_secs(1);
/// The cost per acquired run assumed until the node has measured its own: about what
/// the embedded store and a run's preparation take on a small machine (2 cores).
pub const PRIOR_COST_PER_RUN: Duration = Duration::from_micros(40);
/// Fires counted ahead at most (counting is a read of the due index); fewer when the
/// lead reaches its cap sooner.
pub const OUTLOOK_LIMIT: usize = 100_000;
/// How long a full node waits after a slot frees before it acquires again: runs ending
/// meanwhile free theirs too, and one acquisition fills them all.
pub const REFILL_DELAY: Duration = Duration::from_millis(5);
/// Failed acquisitions whose runs the next cycle looks for; beyond, the oldest attempts'
/// runs (if any) are reclaimed instead.
pub const MAX_UNADOPTED: usize = 64;
/// Local jobs are re-read from the store every this many cycles (SPEC §7).
pub const LOCAL_REFRESH_CYCLES: u32 = 10;

/// What an acquisition saw of the due index, kept while nothing can have changed it for
/// this node: no other node wrote its home shards or changed which shards are its home
/// (the wake key's watch, armed before that acquisition read, has not fired), and nothing
/// happened here that writes them without the watch (a run's end that made a fire due, a
/// change through the handle, code-job sync, reclaiming or adopting runs), nor changed
/// what this node takes (leadership, jobs busy here). An idle node then reads the due
/// index only every `STEAL_CHECK`, when it looks at the other nodes' shards, instead of
/// every cycle.
#[derive(Debug)]
struct KnownDue {
    /// The outlook after the acquisition (its own writes included).
    outlook: DueOutlook,
    /// The acquisition's `scheduled` filter, and the held jobs when it was planned (see
    /// [`Held`]): the outlook left out the entries it left waiting.
    scheduled: bool,
    held: Held,
    /// The home shards' first entries after the acquisition: the next acquisition reads
    /// only the shards they show fires due in.
    heads: DueHeads,
}

/// The jobs a node holds back (whose fires in the store it leaves waiting), as
/// `LocalTriggers` numbers them, without the set itself (which may hold thousands).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Held {
    /// Changes whenever the jobs do; zero when there are none.
    pub version: u64,
    /// Changes whenever a job may have left them.
    pub left: u64,
}

impl Held {
    /// Whether every job held at `self` is held still at `now`.
    fn all_still_held(self, now: Held) -> bool {
        self.version == 0 || self.left == now.left
    }
}

/// The next acquisition, as [`Poller::plan_acquisition`] decided it.
#[derive(Debug)]
pub enum AcquisitionPlan {
    /// What the last acquisition saw still holds and nothing is due within the
    /// lookahead: no store read this cycle.
    Skip(DueOutlook),
    /// Acquire, with these parameters.
    Acquire(Acquire),
}

/// The parameters of an acquisition to make (the store's `AcquireRequest` is built from
/// them), handed back with its result.
#[derive(Debug)]
pub struct Acquire {
    /// Read the other nodes' shards for late fires too (this node's turn).
    pub steal: bool,
    /// Skip the shards of nodes whose recent heartbeat says they are caught up.
    pub trust_caught_up: bool,
    /// How far ahead to take fires.
    pub lookahead: Duration,
    /// Take scheduled triggers' fires (not only one-shots).
    pub scheduled: bool,
    /// The jobs whose fires wait (non-concurrent jobs busy here) when it was planned.
    held: Held,
    /// The home shards' heads the last acquisition left, when they still hold.
    pub known_heads: Option<DueHeads>,
    /// How many fires after it to count for the outlook.
    pub outlook_limit: usize,
    /// Whether the watch on the wake key was armed before this acquisition reads: only
    /// then may what it sees be trusted later.
    pub watched: bool,
    /// When the sequence of acquisitions this one belongs to began.
    began: MonotonicInstant,
}

/// What a successful acquisition returned, without its runs (which the caller starts).
#[derive(Debug)]
pub struct Acquired {
    /// How many runs it took.
    pub runs: usize,
    /// The due outlook after it (`None` when `more`).
    pub outlook: Option<DueOutlook>,
    /// More may be due right now.
    pub more: bool,
    /// How many of its runs were other nodes' late fires.
    pub stolen: usize,
    /// This node's turn at reading other nodes' shards, if it read the node list.
    pub rota: Option<StealRota>,
    /// The home shards' heads after it.
    pub heads: Option<DueHeads>,
}

/// The poller's memory between cycles. See the module docs for the cycle it drives.
#[derive(Debug)]
pub struct Poller {
    synced: bool,
    /// Runs an earlier process with this node id left `Running` were marked lost.
    reclaimed: bool,
    /// The `now` of failed acquisitions, each of which may have committed before it failed
    /// (a commit reported unknown): the next cycle starts their runs, then reclaims.
    unadopted: Vec<DateTime<Utc>>,
    /// How many times the store declared this node lost, as its last heartbeat read it
    /// (`None`: no heartbeat committed yet).
    times_declared_lost: Option<u64>,
    /// Cycles since local jobs were last read from the store.
    cycles_since_refresh: u32,
    /// Re-read local jobs at the next cycle (a local change was made).
    refresh_local: bool,
    /// The local-jobs stamp of the last listing: an unchanged stamp skips the rebuild.
    local_stamp: Option<u64>,
    /// How far ahead to acquire, learned from this node's acquisitions.
    lead: AcquisitionLead,
    /// How many fires to acquire at once: smaller while acquisitions outgrow the store.
    batch: AcquisitionBatch,
    /// How long this node's jobs take, learned from the ones that ended.
    job_time: JobTime,
    /// The runs this node may hold, as the last cycle found ([`held_runs_limit`]).
    held_limit: usize,
    /// The lookahead of the next acquisition: the lead for the fires due next.
    lookahead: Duration,
    /// The acquisitions since the last one that left nothing due: when the first began,
    /// and how many runs they took. Measured as one, since the time between batches
    /// (other work on the node) delays the last fire as much as the batches do.
    sequence: Option<(MonotonicInstant, usize)>,
    /// A cycle to fill freed slots is planned.
    refill_pending: bool,
    /// When this node last read the other nodes' shards.
    last_steal_check: Option<MonotonicInstant>,
    /// Its turn at reading them, by the node list its last acquisition read.
    steal_rota: Option<StealRota>,
    /// The last cycle took every fire due in this node's home shards and no job was busy
    /// here: the next heartbeat says so.
    caught_up: bool,
    /// What the last acquisition saw, while it holds.
    known_due: Option<KnownDue>,
    /// How many acquisitions were planned: a run noted after the `n`th was held during
    /// every later one, and its end may let the fires they left waiting go.
    acquisitions: u64,
}

impl Poller {
    /// A poller that has done nothing yet, acquiring at most `acquire_batch_size` fires at
    /// once ([`AUTO_ACQUIRE_BATCH`] when unset).
    pub fn new(acquire_batch_size: Option<u32>) -> Self {
        Self {
            synced: false,
            reclaimed: false,
            unadopted: Vec::new(),
            times_declared_lost: None,
            cycles_since_refresh: 0,
            refresh_local: true,
            local_stamp: None,
            lead: AcquisitionLead::new(LOOKAHEAD, MAX_LOOKAHEAD, PRIOR_COST_PER_RUN),
            batch: AcquisitionBatch::new(acquire_batch_size.unwrap_or(AUTO_ACQUIRE_BATCH)),
            job_time: JobTime::new(),
            held_limit: 0,
            lookahead: LOOKAHEAD,
            sequence: None,
            refill_pending: false,
            last_steal_check: None,
            steal_rota: None,
            caught_up: false,
            known_due: None,
            acquisitions: 0,
        }
    }

    /// The due index may have changed in a way no watch reports: the next acquisition
    /// reads the store.
    pub fn forget_due(&mut self) {
        self.known_due = None;
    }

    /// A local change was made (through the handle): re-read the local jobs and the due
    /// index at the next cycle, which comes at once.
    pub fn local_change(&mut self) {
        self.refresh_local = true;
        self.known_due = None;
    }

    /// A cycle begins (a refill it was planned for, if any, is under way).
    pub fn cycle_began(&mut self) {
        self.refill_pending = false;
    }

    /// The node is not serving: it takes nothing and vouches for nothing.
    pub fn not_serving(&mut self) {
        self.known_due = None;
        self.caught_up = false;
    }

    /// Whether the code jobs still need writing.
    pub fn needs_sync(&self) -> bool {
        !self.synced
    }

    /// The code jobs were written (`all`: every one of them).
    pub fn synced(&mut self, all: bool) {
        self.synced = all;
        self.known_due = None;
    }

    /// Whether this cycle writes the heartbeat: on a shared store, the first cycle and
    /// whenever the last one is half a poll interval old (see [`heartbeat_due`]).
    pub fn needs_heartbeat(
        &self,
        shared_store: bool,
        heartbeat_age: Option<Duration>,
        poll_interval: Duration,
    ) -> bool {
        shared_store && (self.times_declared_lost.is_none() || heartbeat_due(heartbeat_age, poll_interval))
    }

    /// How many times the store had declared this node lost at its last heartbeat, to send
    /// with the next (`None`: none committed yet, so the cluster does not know this node).
    pub fn times_declared_lost(&self) -> Option<u64> {
        self.times_declared_lost
    }

    /// Whether the next heartbeat vouches that this node took every fire due in its home
    /// shards.
    pub fn caught_up(&self) -> bool {
        self.caught_up
    }

    /// A heartbeat committed, reading that the store declared this node lost
    /// `times_declared_lost` times, one of them since the last (`declared_lost`): then
    /// this node was left out of the node list meanwhile, and what it knew of its shards
    /// no longer holds.
    pub fn heartbeat_committed(&mut self, times_declared_lost: u64, declared_lost: bool) {
        if declared_lost {
            self.known_due = None;
        }
        self.times_declared_lost = Some(times_declared_lost);
    }

    /// The `now` of the failed acquisitions whose runs the next cycle looks for (empty:
    /// none).
    pub fn unadopted(&self) -> &[DateTime<Utc>] {
        &self.unadopted
    }

    /// The runs of the failed acquisitions were looked for (`ok`), or the look failed and
    /// is made again next cycle.
    pub fn adopted(&mut self, ok: bool) {
        if ok {
            self.unadopted.clear();
        }
        self.known_due = None;
    }

    /// Whether the cycle starts the due local fires: only with a recent heartbeat
    /// (`alive`) and no run of a failed acquisition left to adopt (a run it took of a
    /// local job counts for the job's exclusivity here only once started).
    pub fn polls_local(&self, alive: bool) -> bool {
        alive && self.unadopted.is_empty()
    }

    /// Counts a cycle that polls its local jobs, and says whether to re-read them first:
    /// `Some(stamp)` of the last listing (an unchanged stamp lists nothing new).
    pub fn local_refresh(&mut self) -> Option<Option<u64>> {
        self.cycles_since_refresh += 1;
        (self.refresh_local || self.cycles_since_refresh >= LOCAL_REFRESH_CYCLES).then_some(self.local_stamp)
    }

    /// The local jobs were read: a new listing's `stamp`, or `None` when unchanged.
    pub fn local_refreshed(&mut self, stamp: Option<u64>) {
        if let Some(stamp) = stamp {
            self.local_stamp = Some(stamp);
        }
        self.refresh_local = false;
        self.cycles_since_refresh = 0;
    }

    /// The store refused a local fire (its job is no longer local here): re-read the local
    /// jobs next cycle.
    pub fn local_refused(&mut self) {
        self.refresh_local = true;
    }

    /// A write that records a run here failed in a way that may have committed (a local
    /// fire, a manual run): no actor runs it, so the next cycle's reclaim marks it lost.
    pub fn run_may_be_orphaned(&mut self) {
        self.reclaimed = false;
    }

    /// Whether this cycle reclaims the runs no actor here runs: until that once
    /// succeeds, and again after a write that may have left one, once no run of a
    /// failed acquisition is left to adopt.
    pub fn needs_reclaim(&self) -> bool {
        !self.reclaimed && self.unadopted.is_empty()
    }

    /// The reclaim ended (`done`: nothing left). Recovery triggers of the runs it marked
    /// lost may be in this node's shards.
    pub fn reclaimed(&mut self, done: bool) {
        self.reclaimed = done;
        self.known_due = None;
    }

    /// How many fires this cycle may acquire: none on a shared store without a recent
    /// heartbeat, else the runs this node may still take on within the batch. `held`: the
    /// runs it holds (acquired and not ended); `executing`: those whose jobs run now, each
    /// in one of the `max_concurrent_runs` slots. See [`held_runs_limit`]: a node whose
    /// store is its own counts jobs as short until one ended.
    pub fn slots(
        &mut self,
        shared_store: bool,
        alive: bool,
        max_concurrent_runs: u32,
        held: usize,
        executing: usize,
    ) -> usize {
        self.held_limit =
            held_runs_limit(max_concurrent_runs, executing, self.lookahead, self.job_time.mean(), !shared_store);
        if shared_store && !alive {
            0
        } else {
            acquire_slots(self.batch.current(), self.held_limit, held)
        }
    }

    /// Whether a node holding `held` runs was full at the last cycle: a run's end then
    /// calls for a refill ([`Poller::run_ended`]).
    pub fn is_full(&self, held: usize) -> bool {
        held >= self.held_limit
    }

    /// `count` jobs ended here since the last call, taking `total` together (from their
    /// start to their return).
    pub fn jobs_ended(&mut self, count: u64, total: Duration) {
        self.job_time.observe(count, total);
    }

    /// No slot was free: nothing was acquired or seen.
    pub fn no_slots(&mut self) -> Taken {
        self.known_due = None;
        Taken::NoSlots
    }

    /// The acquisition of this cycle at `now` (`mono` on the monotonic clock): `held` the
    /// jobs whose fires wait, `scheduled` whether this node takes scheduled triggers'
    /// fires, `watched` whether the wake key's watch is armed.
    pub fn plan_acquisition(
        &mut self,
        now: DateTime<Utc>,
        mono: MonotonicInstant,
        held: Held,
        scheduled: bool,
        watched: bool,
    ) -> AcquisitionPlan {
        let since_steal = self.last_steal_check.map(|last| mono.saturating_duration_since(last));
        // A node still taking its own backlog (its last acquisition left more due) does
        // not look for other nodes' late fires: under more load than the cluster can run,
        // every node is late, and nodes taking each other's fires add conflicts and
        // reads of every shard to the work they are behind on, so the cluster runs fewer
        // fires the more nodes it has. It looks once its own fires are taken.
        let behind = self.sequence.is_some();
        let steal = !behind && steal_read_due(since_steal, now, STEAL_CHECK, self.steal_rota);
        if steal {
            self.last_steal_check = Some(mono);
        }
        let known = self.known_due.take();
        if !steal {
            // The outlook left out the fires of the jobs then held here: it holds only
            // while those are still held (fires of jobs held since are in it, waking this
            // node early).
            let holds = |k: &&KnownDue| k.scheduled == scheduled && k.held.all_still_held(held);
            if let Some(outlook) = known.as_ref().filter(holds).map(|k| k.outlook) {
                let horizon = add_duration(now, self.lookahead);
                if outlook.first.is_none_or(|first| first > horizon) {
                    self.known_due = known;
                    return AcquisitionPlan::Skip(outlook);
                }
            }
        }
        self.acquisitions += 1;
        AcquisitionPlan::Acquire(Acquire {
            steal,
            trust_caught_up: steal_read_trusts(now, STEAL_CHECK),
            lookahead: self.lookahead,
            scheduled,
            held,
            // The store uses them only with this request's filter and the same home shards.
            known_heads: known.map(|k| k.heads),
            outlook_limit: self.lead.saturation().min(OUTLOOK_LIMIT),
            watched,
            began: self.sequence.map_or(mono, |(began, _)| began),
        })
    }

    /// The mark to note a run started now with (`LocalTriggers::note_started`), for
    /// [`Poller::left_waiting`]: how many acquisitions were planned so far.
    pub fn acquisitions(&self) -> u64 {
        self.acquisitions
    }

    /// `plan`'s acquisition took `acquired.runs` runs out of `slots`, which the caller has
    /// started by `mono`. `Full`: acquire again at once (more may be due), measuring the
    /// acquisitions as one sequence; else what is due next as it saw it.
    pub fn acquired(&mut self, plan: Acquire, acquired: Acquired, slots: usize, mono: MonotonicInstant) -> Taken {
        self.steal_rota = acquired.rota.or(self.steal_rota);
        if acquired.stolen > 0 {
            // An acquisition takes one fire per trigger: a node behind (alive, yet slow or
            // saturated) may have left several due. Look again next cycle, so they drain
            // at the poll cadence, not one per STEAL_CHECK.
            self.last_steal_check = None;
        }
        self.batch.grow();
        let taken = self.sequence.map_or(0, |(_, taken)| taken) + acquired.runs;
        if acquired.more || acquired.runs == slots {
            self.sequence = Some((plan.began, taken));
            return Taken::Full;
        }
        self.sequence = None;
        self.lead.observe(taken, mono.saturating_duration_since(plan.began));
        if let (Some(outlook), Some(heads)) = (acquired.outlook.filter(|_| plan.watched), acquired.heads) {
            self.known_due = Some(KnownDue { outlook, scheduled: plan.scheduled, held: plan.held, heads });
        }
        Taken::Done(acquired.outlook)
    }

    /// The planned acquisition at `now` failed; `too_big` when the store found it too old or
    /// too large (the batch halves). An attempt may have committed before the retries gave
    /// up (its commit reported unknown): the next cycle starts the runs it took, then
    /// reclaims (marks lost) any other run no actor here runs.
    pub fn acquire_failed(&mut self, _plan: Acquire, now: DateTime<Utc>, too_big: bool) -> Taken {
        if too_big {
            self.batch.shrink();
        }
        if self.unadopted.len() == MAX_UNADOPTED {
            // A long outage: the oldest attempts' runs (if any) are reclaimed instead.
            self.unadopted.remove(0);
        }
        self.unadopted.push(now);
        self.reclaimed = false;
        Taken::Failed
    }

    /// The batch size the next acquisition asks for.
    pub fn batch(&self) -> u32 {
        self.batch.current()
    }

    /// Notes how the cycle at `now` ended for the next heartbeat: caught up when its
    /// acquisition left nothing due in the home shards and no job is busy here
    /// (`jobs_busy`), whose fires would wait untaken.
    pub fn cycle_ended(&mut self, now: DateTime<Utc>, taken: Taken, jobs_busy: bool) {
        self.caught_up = taken.caught_up(now) && !jobs_busy;
    }

    /// Whether the wait after a cycle whose acquisition ended as `taken` needs the
    /// outlook read (`Some(limit)`: how many fires to count): not when no slot was free
    /// (nothing can be taken until a run ends, which wakes the poller) nor when the
    /// acquisition read it.
    pub fn outlook_to_read(&self, taken: Taken) -> Option<usize> {
        match taken {
            Taken::NoSlots | Taken::Done(Some(_)) => None,
            Taken::Done(None) | Taken::Failed | Taken::Full => Some(self.lead.saturation().min(OUTLOOK_LIMIT)),
        }
    }

    /// How long to sleep after a cycle that began at `ran_at` (and started its due local
    /// fires when `local_polled`), at `now`: `taken` is how its acquisition ended (not
    /// `Full`), `read` the outlook read for it when [`Poller::outlook_to_read`] asked
    /// (`Err`: the read failed), `local_due` the next local fire. Sets the next
    /// acquisition's lookahead from what is due next: the more fires fall due together,
    /// the earlier their acquisition starts.
    pub fn wait_after(&mut self, end: CycleWait) -> Duration {
        // A successful acquisition reached the fires due by `acquired_until`.
        let acquired_until = matches!(end.taken, Taken::Done(_)).then(|| add_duration(end.ran_at, self.lookahead));
        let outlook = match end.taken {
            Taken::NoSlots => None,
            Taken::Done(Some(outlook)) => Some(Ok(outlook)),
            Taken::Done(None) | Taken::Failed | Taken::Full => end.read,
        };
        let next_due = outlook.map(|outlook| {
            self.lookahead = match &outlook {
                Ok(next) if next.first.is_some() => self.lead.lead(next.count),
                _ => LOOKAHEAD,
            };
            match outlook {
                Ok(next) => NextDue::Known { home: next.first, elsewhere: next.first_elsewhere },
                Err(()) => NextDue::Unknown,
            }
        });
        wait_after_cycle(&CycleEnd {
            now: end.now,
            ran_at: end.ran_at,
            poll_interval: end.poll_interval,
            local_due: end.local_due,
            local_polled: end.local_polled,
            next_due,
            lookahead: self.lookahead,
            acquired_until,
        })
    }

    /// How long from `now` until the poller should cycle for a fire a run's end made due
    /// at `due`: a lookahead before it, as the regular sleep is, so the fire is acquired
    /// ahead and its run starts on time. No watch reports such a write: what the last
    /// acquisition saw no longer holds.
    pub fn wait_for_due(&mut self, due: DateTime<Utc>, now: DateTime<Utc>) -> Duration {
        self.known_due = None;
        (due - now).to_std().unwrap_or_default().saturating_sub(self.lookahead)
    }

    /// Whether an acquisition since a run was noted (`mark`, from
    /// [`Poller::acquisitions`] then) may have left its job's fires waiting: the run held
    /// its job's slot here during it.
    pub fn left_waiting(&self, mark: u64) -> bool {
        self.acquisitions > mark
    }

    /// A run here ended. `was_full`: every run slot was taken before; `job_waiting`: the
    /// last acquisition left fires of the job whose slot it held waiting
    /// ([`Poller::left_waiting`]). True when a refill cycle should be planned
    /// [`REFILL_DELAY`] from now (unless one comes sooner); one refill serves every run
    /// ending before it.
    pub fn run_ended(&mut self, was_full: bool, job_waiting: bool) -> bool {
        if (was_full || job_waiting) && !self.refill_pending {
            self.refill_pending = true;
            return true;
        }
        false
    }
}

/// What [`Poller::wait_after`] needs from the cycle.
#[derive(Debug, Clone, Copy)]
pub struct CycleWait {
    /// Now, after the cycle.
    pub now: DateTime<Utc>,
    /// When the cycle began.
    pub ran_at: DateTime<Utc>,
    /// The longest a node sleeps.
    pub poll_interval: Duration,
    /// This node's next local fire or retry.
    pub local_due: Option<DateTime<Utc>>,
    /// Whether the cycle started the due local fires.
    pub local_polled: bool,
    /// How the cycle's acquisition ended.
    pub taken: Taken,
    /// The outlook read after it, if [`Poller::outlook_to_read`] asked for one.
    pub read: Option<Result<DueOutlook, ()>>,
}

#[cfg(test)]
mod tests {
    use super::*;

    const SECOND: Duration = Duration::from_secs(1);

    fn at(ms: i64) -> DateTime<Utc> {
        DateTime::from_timestamp_millis(1_800_000_000_000 + ms).unwrap()
    }

    fn mono(ms: u64) -> MonotonicInstant {
        MonotonicInstant::from_origin(Duration::from_millis(ms))
    }

    fn outlook(first_ms: Option<i64>, count: usize) -> DueOutlook {
        DueOutlook { first: first_ms.map(at), count, first_elsewhere: None }
    }

    /// Held jobs numbered `version`, of which jobs left `left` times.
    fn held(version: u64, left: u64) -> Held {
        Held { version, left }
    }

    /// A plan at `ms` (wall and monotonic alike) that must acquire, holding `held` back.
    fn acquire(poller: &mut Poller, ms: i64, held: Held, scheduled: bool) -> Acquire {
        match poller.plan_acquisition(at(ms), mono(ms as u64), held, scheduled, true) {
            AcquisitionPlan::Acquire(plan) => plan,
            AcquisitionPlan::Skip(outlook) => panic!("skipped at {ms} ms, knowing {outlook:?}"),
        }
    }

    fn skips(poller: &mut Poller, ms: i64, held: Held, scheduled: bool) -> bool {
        matches!(poller.plan_acquisition(at(ms), mono(ms as u64), held, scheduled, true), AcquisitionPlan::Skip(_))
    }

    /// An acquisition that took `runs` of 16 slots and saw the next fire at `next_ms`.
    fn took(runs: usize, next_ms: Option<i64>) -> Acquired {
        Acquired {
            runs,
            outlook: Some(outlook(next_ms, 1)),
            more: false,
            stolen: 0,
            rota: None,
            heads: Some(DueHeads::none()),
        }
    }

    /// A poller whose first acquisition (a steal turn), at 0, took nothing and saw the next
    /// fire at `next_ms`.
    fn idle(next_ms: i64) -> Poller {
        let mut poller = Poller::new(Some(16));
        let plan = acquire(&mut poller, 0, Held::default(), true);
        assert!(plan.steal, "the first acquisition looks at every shard");
        assert_eq!(
            poller.acquired(plan, took(0, Some(next_ms)), 16, mono(0)),
            Taken::Done(Some(outlook(Some(next_ms), 1)))
        );
        poller
    }

    #[test]
    fn an_idle_node_reads_the_store_only_when_its_next_fire_nears_or_at_its_steal_turn() {
        let mut poller = idle(3_000);
        assert!(skips(&mut poller, 1_000, Held::default(), true), "nothing due within the lookahead");
        assert!(skips(&mut poller, 2_899, Held::default(), true));
        assert!(!acquire(&mut poller, 2_900, Held::default(), true).steal, "the fire enters the lookahead");

        let mut poller = idle(60_000);
        assert!(skips(&mut poller, 4_999, Held::default(), true));
        assert!(
            acquire(&mut poller, 5_000, Held::default(), true).steal,
            "STEAL_CHECK later, the other shards are read"
        );
    }

    #[test]
    fn what_an_acquisition_saw_holds_only_if_watched_and_for_the_same_filter() {
        let mut poller = Poller::new(Some(16));
        let plan = match poller.plan_acquisition(at(0), mono(0), Held::default(), true, false) {
            AcquisitionPlan::Acquire(plan) => plan,
            AcquisitionPlan::Skip(_) => panic!("nothing known yet"),
        };
        poller.acquired(plan, took(0, None), 16, mono(0));
        acquire(&mut poller, 1_000, Held::default(), true);

        let mut poller = poller_holding(held(5, 3));
        assert!(
            skips(&mut poller, 1_000, held(6, 3), true),
            "no job left: fires of jobs held since only wake it early"
        );
        let mut a_job_left = poller_holding(held(5, 3));
        acquire(&mut a_job_left, 1_000, held(6, 4), true);
        let mut none_held = poller_holding(held(0, 3));
        assert!(skips(&mut none_held, 1_000, held(7, 9), true), "nothing was held back then: nothing can have left");
        let mut other_filter = poller_holding(held(5, 3));
        acquire(&mut other_filter, 1_000, held(5, 3), false);
    }

    fn poller_holding(held: Held) -> Poller {
        let mut poller = Poller::new(Some(16));
        let plan = acquire(&mut poller, 0, held, true);
        poller.acquired(plan, took(0, None), 16, mono(0));
        poller
    }

    #[test]
    fn every_change_no_watch_reports_makes_the_next_cycle_read_the_store() {
        type Change = (&'static str, fn(&mut Poller));
        let changes: [Change; 8] = [
            ("a local change", Poller::local_change),
            ("forgotten", Poller::forget_due),
            ("not serving", Poller::not_serving),
            ("code jobs written", |p| p.synced(true)),
            ("reclaimed", |p| p.reclaimed(true)),
            ("adopted", |p| p.adopted(true)),
            ("declared lost", |p| p.heartbeat_committed(1, true)),
            ("a fire made due here", |p| {
                p.wait_for_due(at(50_000), at(1_000));
            }),
        ];
        for (what, change) in changes {
            let mut poller = idle(60_000);
            change(&mut poller);
            assert!(!skips(&mut poller, 1_000, Held::default(), true), "{what}");
        }
        let mut poller = idle(60_000);
        poller.heartbeat_committed(0, false);
        assert!(skips(&mut poller, 1_000, Held::default(), true), "an ordinary heartbeat changes nothing");
    }

    #[test]
    fn a_full_batch_acquires_again_at_once_and_a_stolen_fire_brings_the_next_look_forward() {
        let mut poller = Poller::new(Some(16));
        let plan = acquire(&mut poller, 0, Held::default(), true);
        assert_eq!(poller.acquired(plan, took(16, None), 16, mono(1)), Taken::Full);
        assert_eq!(poller.outlook_to_read(Taken::Full), Some(poller.lead.saturation().min(OUTLOOK_LIMIT)));
        let plan = acquire(&mut poller, 2, Held::default(), true);
        assert!(!plan.steal, "the steal turn was taken 2 ms ago");
        let more = Acquired { more: true, ..took(3, None) };
        assert_eq!(poller.acquired(plan, more, 16, mono(3)), Taken::Full, "the store said more are due");

        let plan = acquire(&mut poller, 4, Held::default(), true);
        let stolen = Acquired { stolen: 1, ..took(1, None) };
        assert!(matches!(poller.acquired(plan, stolen, 16, mono(5)), Taken::Done(_)));
        assert!(
            acquire(&mut poller, 1_000, Held::default(), true).steal,
            "others' late fires drain at the poll cadence"
        );
    }

    #[test]
    fn a_node_taking_its_own_backlog_looks_at_other_shards_only_once_it_is_through() {
        let mut poller = Poller::new(Some(16));
        let plan = acquire(&mut poller, 0, Held::default(), true);
        assert!(plan.steal);
        let stolen = Acquired { stolen: 2, more: true, ..took(16, None) };
        assert_eq!(poller.acquired(plan, stolen, 16, mono(1)), Taken::Full);
        assert!(!acquire(&mut poller, 6_000, Held::default(), true).steal, "its turn comes while more is due here");
        assert!(!acquire(&mut poller, 12_000, Held::default(), true).steal, "and again");
        let plan = acquire(&mut poller, 12_001, Held::default(), true);
        assert!(!plan.steal);
        assert!(matches!(poller.acquired(plan, took(3, None), 16, mono(12_002)), Taken::Done(_)));
        assert!(acquire(&mut poller, 12_003, Held::default(), true).steal, "through its backlog, it looks");
    }

    #[test]
    fn a_failed_acquisition_is_adopted_before_local_fires_and_the_reclaim() {
        let mut poller = Poller::new(Some(16));
        poller.reclaimed(true);
        let plan = acquire(&mut poller, 0, Held::default(), true);
        assert_eq!(poller.acquire_failed(plan, at(0), false), Taken::Failed);
        assert_eq!(poller.unadopted(), &[at(0)]);
        assert!(!poller.polls_local(true), "local fires wait for the adoption");
        assert!(!poller.needs_reclaim(), "a reclaim now would mark the failed attempt's runs lost");
        poller.adopted(false);
        assert_eq!(poller.unadopted().len(), 1, "a failed look is made again");
        poller.adopted(true);
        assert!(poller.polls_local(true));
        assert!(!poller.polls_local(false), "nor without a recent heartbeat");
        assert!(poller.needs_reclaim(), "then the runs no actor runs are marked lost");
        poller.reclaimed(true);
        assert!(!poller.needs_reclaim());
        poller.run_may_be_orphaned();
        assert!(poller.needs_reclaim());
    }

    #[test]
    fn a_long_outage_keeps_the_latest_failed_acquisitions_to_adopt() {
        let mut poller = Poller::new(Some(16));
        for i in 0..(MAX_UNADOPTED as i64 + 6) {
            let plan = acquire(&mut poller, i, Held::default(), true);
            poller.acquire_failed(plan, at(i), false);
        }
        assert_eq!(poller.unadopted().len(), MAX_UNADOPTED);
        assert_eq!(poller.unadopted()[0], at(6), "the oldest are left to the reclaim");
    }

    #[test]
    fn an_acquisition_too_big_for_the_store_halves_the_batch_and_success_grows_it_back() {
        let mut poller = Poller::new(Some(16));
        for expected in [8, 4] {
            let plan = acquire(&mut poller, 0, Held::default(), true);
            poller.acquire_failed(plan, at(0), true);
            assert_eq!(poller.batch(), expected);
        }
        let plan = acquire(&mut poller, 0, Held::default(), true);
        poller.acquire_failed(plan, at(0), false);
        assert_eq!(poller.batch(), 4, "other failures leave it");
        assert_eq!(poller.slots(true, true, 32, 0, 0), 4);
        let plan = acquire(&mut poller, 0, Held::default(), true);
        poller.acquired(plan, took(0, None), 4, mono(0));
        assert_eq!(poller.batch(), 5);
    }

    #[test]
    fn slots_are_the_batch_within_the_runs_the_node_may_hold_and_none_without_a_heartbeat() {
        let mut poller = Poller::new(Some(16));
        // A shared store's node counts one run per free slot until it knows its jobs.
        assert_eq!(poller.slots(true, true, 32, 0, 0), 16);
        assert_eq!(poller.slots(true, true, 32, 20, 0), 12);
        assert_eq!(poller.slots(true, true, 32, 40, 0), 0);
        assert!(poller.is_full(40) && !poller.is_full(31));
        assert_eq!(poller.slots(true, false, 32, 0, 0), 0, "a shared store's node without a heartbeat");
        // A store of its own needs no heartbeat, and counts unknown jobs as short.
        assert_eq!(poller.slots(false, false, 32, 5_000, 0), 16);
        // Jobs of 1 ms: each free slot starts a lookahead's worth (100 ms) of runs in time.
        poller.jobs_ended(10, Duration::from_millis(10));
        assert_eq!(poller.slots(true, true, 32, 3_000, 2), 2);
        assert!(poller.is_full(2 + 30 * 100) && !poller.is_full(2 + 30 * 100 - 1));
        // Unset, the batch is the automatic one.
        let mut auto = Poller::new(None);
        assert_eq!(auto.slots(false, true, 32, 0, 0), AUTO_ACQUIRE_BATCH as usize);
        assert_eq!(auto.slots(true, true, 32, 0, 0), 32);
    }

    #[test]
    fn a_heartbeat_goes_first_then_every_half_poll_interval_on_a_shared_store_only() {
        let mut poller = Poller::new(Some(16));
        assert!(poller.needs_heartbeat(true, Some(Duration::ZERO), SECOND), "none committed by this poller yet");
        assert_eq!(poller.times_declared_lost(), None);
        poller.heartbeat_committed(2, false);
        assert_eq!(poller.times_declared_lost(), Some(2));
        assert!(!poller.needs_heartbeat(true, Some(Duration::from_millis(100)), SECOND));
        assert!(poller.needs_heartbeat(true, Some(Duration::from_millis(500)), SECOND));
        assert!(!Poller::new(Some(16)).needs_heartbeat(false, None, SECOND));
    }

    #[test]
    fn local_jobs_are_read_every_ten_cycles_and_after_a_change() {
        let mut poller = Poller::new(Some(16));
        assert_eq!(poller.local_refresh(), Some(None), "first read: everything");
        poller.local_refreshed(Some(7));
        for cycle in 1..LOCAL_REFRESH_CYCLES {
            assert_eq!(poller.local_refresh(), None, "cycle {cycle}");
        }
        assert_eq!(poller.local_refresh(), Some(Some(7)), "since the last listing's stamp");
        poller.local_refreshed(None);
        poller.local_refused();
        assert_eq!(poller.local_refresh(), Some(Some(7)), "unchanged keeps the stamp");
        poller.local_refreshed(None);
        poller.local_change();
        assert!(poller.local_refresh().is_some());
    }

    #[test]
    fn one_refill_serves_every_run_ending_before_it() {
        let mut poller = Poller::new(Some(16));
        let held_before = poller.acquisitions();
        let plan = acquire(&mut poller, 0, Held::default(), true);
        poller.acquired(plan, took(0, None), 16, mono(0));
        let taken_by_it = poller.acquisitions();
        assert!(!poller.run_ended(false, false), "a slot of a node that was not full");
        assert!(poller.left_waiting(held_before), "held during the acquisition");
        assert!(!poller.left_waiting(taken_by_it), "a run that acquisition took was not held during it");
        assert!(poller.run_ended(false, poller.left_waiting(held_before)), "its job's fires wait");
        assert!(!poller.run_ended(true, false), "one refill is planned already");
        poller.cycle_began();
        assert!(poller.run_ended(true, false), "a full node's freed slot");
    }

    #[test]
    fn the_lookahead_grows_with_the_fires_due_together_and_the_sleep_ends_as_it_begins() {
        let mut poller = Poller::new(Some(16));
        let wait = |read, taken| CycleWait {
            now: at(10),
            ran_at: at(0),
            poll_interval: SECOND,
            local_due: None,
            local_polled: true,
            taken,
            read,
        };
        // 1,000 fires due at 500 ms: acquired earlier than the base lookahead.
        let crowd = poller.wait_after(wait(Some(Ok(outlook(Some(500), 1_000))), Taken::Failed));
        let lead = acquire(&mut poller, 20, Held::default(), true).lookahead;
        assert!(lead > LOOKAHEAD && lead <= MAX_LOOKAHEAD, "{lead:?}");
        assert_eq!(crowd, (Duration::from_millis(490)).saturating_sub(lead));
        // A failed read: the base lookahead, and a poll interval's sleep.
        assert_eq!(poller.wait_after(wait(Some(Err(())), Taken::Failed)), SECOND);
        assert_eq!(acquire(&mut poller, 30, Held::default(), true).lookahead, LOOKAHEAD);
        // No slot: nothing read, the lookahead kept.
        assert_eq!(poller.outlook_to_read(Taken::NoSlots), None);
        assert_eq!(poller.wait_after(wait(None, Taken::NoSlots)), SECOND);
        // A fire a run's end made due at 1 s, seen at 100 ms: cycle a lookahead before it.
        assert_eq!(poller.wait_for_due(at(1_000), at(100)), Duration::from_millis(900) - LOOKAHEAD);
    }

    #[test]
    fn a_node_vouches_for_its_shards_only_when_it_left_nothing_due_and_no_job_busy() {
        let mut poller = Poller::new(Some(16));
        poller.cycle_ended(at(0), Taken::Done(Some(outlook(Some(5_000), 1))), false);
        assert!(poller.caught_up());
        poller.cycle_ended(at(0), Taken::Done(Some(outlook(Some(5_000), 1))), true);
        assert!(!poller.caught_up(), "a busy job's fires wait untaken");
        poller.cycle_ended(at(0), Taken::Done(Some(outlook(None, 0))), false);
        poller.not_serving();
        assert!(!poller.caught_up());
    }
}
