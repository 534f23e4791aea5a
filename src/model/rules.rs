//! Pure scheduling decisions (SPEC §6, §8, §10): what to do with a due fire, when to retry,
//! how many triggers to acquire. The store and the engine call these; they hold no state.

use std::time::Duration;

use chrono::{DateTime, TimeDelta, Utc};

use crate::job::{MisfirePolicy, RetryPolicy};
use crate::time::add_duration;

/// What to do with a fire that was due at some time and is being taken now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DueDecision {
    /// Run now, recording this as the run's scheduled time; `None` = no run (skipped).
    pub run_scheduled_at: Option<DateTime<Utc>>,
    /// The time the next fire is computed from (a cron schedule's next match after it).
    pub next_basis: DateTime<Utc>,
    /// Whether the fire was a misfire.
    pub misfired: bool,
}

/// Whether a fire due at `due` has misfired at `now`: more than `threshold` behind.
pub fn is_misfire(due: DateTime<Utc>, now: DateTime<Utc>, threshold: Duration) -> bool {
    TimeDelta::from_std(threshold).is_ok_and(|threshold| now - due > threshold)
}

/// Applies the misfire policy to a fire due at `due`, taken at `now` (SPEC §6).
///
/// - On time (not more than `threshold` late): run with the due time; next from it.
/// - `RunOnce`: run once now, recorded as scheduled now; next from now.
/// - `Skip`: no run; next from now.
/// - `RunAll`: run this missed fire with its own time; next from it, so the following
///   missed fire is due at once and is taken on the next cycle (one catch-up per cycle).
pub fn on_due(policy: MisfirePolicy, due: DateTime<Utc>, now: DateTime<Utc>, threshold: Duration) -> DueDecision {
    if !is_misfire(due, now, threshold) {
        return DueDecision { run_scheduled_at: Some(due), next_basis: due, misfired: false };
    }
    match policy {
        MisfirePolicy::RunOnce => DueDecision { run_scheduled_at: Some(now), next_basis: now, misfired: true },
        MisfirePolicy::Skip => DueDecision { run_scheduled_at: None, next_basis: now, misfired: true },
        MisfirePolicy::RunAll => DueDecision { run_scheduled_at: Some(due), next_basis: due, misfired: true },
    }
}

/// A retry to schedule after a failed run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetryPlan {
    /// The retry's attempt number (the failed attempt + 1).
    pub attempt: u32,
    /// When the retry is due.
    pub due: DateTime<Utc>,
}

/// The retry after attempt `attempt` failed at `failed_at`, or `None` when the policy
/// allows no more (attempt 1 is the first run; retry n waits `delay_for(n)`). Only failed
/// runs retry: the caller does not ask for canceled or lost ones (SPEC §8).
pub fn plan_retry(policy: Option<&RetryPolicy>, attempt: u32, failed_at: DateTime<Utc>) -> Option<RetryPlan> {
    let policy = policy?;
    let retry = attempt.max(1);
    (retry <= policy.max_retries())
        .then(|| RetryPlan { attempt: retry + 1, due: add_duration(failed_at, policy.delay_for(retry)) })
}

/// The most fires one acquisition takes when `acquire_batch_size` is not set: enough that
/// a node keeps up with tens of thousands of fires a second in a few dozen transactions,
/// small enough that one transaction stays far inside FoundationDB's five seconds and ten
/// megabytes (it shrinks further when a store says otherwise, see [`AcquisitionBatch`]).
pub const AUTO_ACQUIRE_BATCH: u32 = 1_000;

/// The most runs a node holds at once (acquired and waiting for their instant or for a
/// run slot, or running), whatever its jobs' speed: bounds a node's memory when a great
/// many fires fall due together.
pub const MAX_HELD_RUNS: usize = 100_000;

/// How many fires to acquire this cycle: the runs the node may still take on
/// ([`held_runs_limit`] less the runs it holds), at most `batch`.
pub fn acquire_slots(batch: u32, held_limit: usize, held: usize) -> usize {
    held_limit.saturating_sub(held).min(batch as usize)
}

/// How many runs a node may hold at once so that each can start on time: those running
/// (`executing`, each in one of the `max_concurrent_runs` run slots) plus, for each free
/// slot, as many runs as it can start one after another within `lead` (the acquisition
/// lead: how far ahead fires are taken) when jobs take `job_time` on average.
///
/// A run takes its slot at its start instant and frees it as its job returns, so a slot
/// serves many short runs within one lead: with 32 slots, jobs of 1 ms and a lead of
/// 100 ms, a node starts 3,200 runs in time. Jobs at least as long as the lead count one
/// run per free slot, as the slots alone did. `job_time` is `None` until this node has
/// seen a job end; then `unknown_is_short` decides: a node whose store is its own (nobody
/// else could run the fires it leaves) counts jobs as short, a node sharing its store
/// counts one run per free slot until it knows. At least `max_concurrent_runs`, at most
/// [`MAX_HELD_RUNS`].
pub fn held_runs_limit(
    max_concurrent_runs: u32,
    executing: usize,
    lead: Duration,
    job_time: Option<Duration>,
    unknown_is_short: bool,
) -> usize {
    let slots = max_concurrent_runs as usize;
    let free = slots.saturating_sub(executing);
    let per_slot = match job_time {
        None if unknown_is_short => MAX_HELD_RUNS,
        None => 1,
        Some(time) if time.is_zero() => MAX_HELD_RUNS,
        Some(time) => ((lead.as_nanos() / time.as_nanos()).min(MAX_HELD_RUNS as u128) as usize).max(1),
    };
    executing.min(slots).saturating_add(free.saturating_mul(per_slot)).clamp(slots.min(MAX_HELD_RUNS), MAX_HELD_RUNS)
}

/// The mean time jobs take on a node, learned from the jobs that ended there: an
/// exponentially weighted mean over batches of ended jobs, a batch weighing more the more
/// jobs it holds, so a node's estimate follows a change of workload within a few cycles.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct JobTime {
    /// The mean in nanoseconds, once a job ended.
    mean_ns: Option<f64>,
}

impl JobTime {
    /// The weight of one ended job in the mean (a batch of `n` weighs `1 − (1 − w)^n`).
    const WEIGHT: f64 = 0.05;

    /// Nothing learned yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// Learns from `count` jobs that ended, taking `total` together.
    pub fn observe(&mut self, count: u64, total: Duration) {
        if count == 0 {
            return;
        }
        let batch_mean = total.as_nanos() as f64 / count as f64;
        self.mean_ns = Some(match self.mean_ns {
            None => batch_mean,
            Some(mean) => {
                let weight = 1.0 - (1.0 - Self::WEIGHT).powf(count as f64);
                mean + weight * (batch_mean - mean)
            }
        });
    }

    /// The mean, once a job ended.
    pub fn mean(&self) -> Option<Duration> {
        self.mean_ns.map(|ns| Duration::from_nanos(ns as u64))
    }
}

/// How many fires one acquisition may take: the configured `acquire_batch_size`, halved
/// each time an acquisition's transaction outgrew the store's limits (too old: FDB's five
/// seconds; too large), and grown back by a quarter after each acquisition that
/// committed.
///
/// An acquisition reads a few keys per fire one after another, so on a slow store a batch
/// that fits in five seconds on a fast one never commits, and a node that kept asking for
/// it would take nothing at all. Halving finds a batch that fits within a few cycles;
/// growing back slowly keeps it from overshooting again at once.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AcquisitionBatch {
    configured: u32,
    current: u32,
}

impl AcquisitionBatch {
    /// The configured batch (at least 1).
    pub fn new(acquire_batch_size: u32) -> Self {
        let configured = acquire_batch_size.max(1);
        Self { configured, current: configured }
    }

    /// The batch to ask for now.
    pub fn current(&self) -> u32 {
        self.current
    }

    /// An acquisition failed for its size: halve (at least 1).
    pub fn shrink(&mut self) {
        self.current = (self.current / 2).max(1);
    }

    /// An acquisition committed: grow by a quarter (at least 1), up to the configured batch.
    pub fn grow(&mut self) {
        self.current = self.current.saturating_add((self.current / 4).max(1)).min(self.configured);
    }
}

/// How far ahead of a fire's due time a node acquires it, so that its run is ready when
/// it is due even when many fires fall due together.
///
/// Acquiring a fire (its store transaction, preparing its run) takes time, and fires due
/// at one instant are acquired one batch after another: the last of `n` is ready about
/// `n × cost` after the first acquisition starts. The lead is `base + 2 × n × cost`
/// (the margin absorbs a cost that varies with load), capped at `max`. `cost` is learned
/// from the node's own acquisitions: time per acquired run on the node's clock (so
/// simulations stay deterministic), taken at once when it rises and approached as an
/// exponentially weighted mean when it falls; a prior stands in until the first
/// measurement.
///
/// A longer lead commits fires earlier: a pause or cancel that lands within the lead
/// before a fire no longer stops it from being taken (a canceled run still never starts
/// its job), and a node that dies holding fires leaves them to recovery. Hence the cap.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct AcquisitionLead {
    base: Duration,
    max: Duration,
    /// Mean time per acquired run, in nanoseconds.
    cost_ns: f64,
}

impl AcquisitionLead {
    /// Weight of the newest measurement in the mean.
    const WEIGHT: f64 = 0.25;
    /// Acquisitions of fewer runs than this are not measured: their fixed costs would
    /// read as a high cost per run.
    const MIN_MEASURED_RUNS: usize = 8;
    /// Safety factor on the measured cost.
    const MARGIN: f64 = 2.0;

    /// A lead of at least `base`, at most `max`, assuming `prior` per run until measured.
    pub fn new(base: Duration, max: Duration, prior: Duration) -> Self {
        Self { base, max: max.max(base), cost_ns: prior.as_nanos() as f64 }
    }

    /// Learns from one acquisition that took `elapsed` for `runs` runs: a higher cost is
    /// taken at once (a lead too short makes runs late; one too long only commits fires
    /// a little earlier), a lower one is approached gradually.
    pub fn observe(&mut self, runs: usize, elapsed: Duration) {
        if runs < Self::MIN_MEASURED_RUNS {
            return;
        }
        let per_run = elapsed.as_nanos() as f64 / runs as f64;
        if per_run > self.cost_ns {
            self.cost_ns = per_run;
        } else {
            self.cost_ns += Self::WEIGHT * (per_run - self.cost_ns);
        }
    }

    /// The learned (or prior) time per acquired run.
    pub fn cost_per_run(&self) -> Duration {
        Duration::from_nanos(self.cost_ns as u64)
    }

    /// How many fires due together already make the lead its cap: counting further
    /// changes nothing (at least 1).
    pub fn saturation(&self) -> usize {
        let span = self.max.saturating_sub(self.base).as_nanos() as f64;
        let per_fire = Self::MARGIN * self.cost_ns;
        if per_fire <= 0.0 {
            return usize::MAX;
        }
        ((span / per_fire).ceil() as usize).saturating_add(1)
    }

    /// The lead for `upcoming` fires falling due together.
    pub fn lead(&self, upcoming: usize) -> Duration {
        let extra = Duration::from_nanos((Self::MARGIN * self.cost_ns * upcoming as f64).min(u64::MAX as f64) as u64);
        self.base.saturating_add(extra).min(self.max)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(s: i64) -> DateTime<Utc> {
        DateTime::from_timestamp(1_800_000_000 + s, 0).unwrap()
    }

    #[test]
    fn on_time_fires_keep_their_due_time() {
        for policy in [MisfirePolicy::RunOnce, MisfirePolicy::Skip, MisfirePolicy::RunAll] {
            let d = on_due(policy, t(0), t(60), Duration::from_secs(60));
            assert_eq!(d, DueDecision { run_scheduled_at: Some(t(0)), next_basis: t(0), misfired: false });
        }
    }

    #[test]
    fn misfire_policies() {
        let threshold = Duration::from_secs(60);
        assert_eq!(
            on_due(MisfirePolicy::RunOnce, t(0), t(61), threshold),
            DueDecision { run_scheduled_at: Some(t(61)), next_basis: t(61), misfired: true }
        );
        assert_eq!(
            on_due(MisfirePolicy::Skip, t(0), t(61), threshold),
            DueDecision { run_scheduled_at: None, next_basis: t(61), misfired: true }
        );
        assert_eq!(
            on_due(MisfirePolicy::RunAll, t(0), t(61), threshold),
            DueDecision { run_scheduled_at: Some(t(0)), next_basis: t(0), misfired: true }
        );
        assert!(is_misfire(t(0), t(1), Duration::ZERO));
        assert!(!is_misfire(t(0), t(0), Duration::ZERO));
    }

    #[test]
    fn retries_follow_the_policy() {
        let policy = RetryPolicy::exponential(2, Duration::from_secs(10), None).unwrap();
        assert_eq!(plan_retry(Some(&policy), 1, t(0)), Some(RetryPlan { attempt: 2, due: t(10) }));
        assert_eq!(plan_retry(Some(&policy), 2, t(0)), Some(RetryPlan { attempt: 3, due: t(20) }));
        assert_eq!(plan_retry(Some(&policy), 3, t(0)), None);
        assert_eq!(plan_retry(None, 1, t(0)), None);
    }

    #[test]
    fn slots_are_what_the_node_may_still_hold_within_the_batch() {
        assert_eq!(acquire_slots(16, 32, 0), 16);
        assert_eq!(acquire_slots(16, 32, 20), 12);
        assert_eq!(acquire_slots(16, 32, 40), 0);
        assert_eq!(acquire_slots(1_000, 5_000, 4_500), 500);
    }

    #[test]
    fn a_free_slot_holds_as_many_runs_as_it_can_start_within_the_lead() {
        let ms = Duration::from_millis;
        // 1 ms jobs, 100 ms lead: each free slot starts 100 runs in time.
        assert_eq!(held_runs_limit(32, 0, ms(100), Some(ms(1)), false), 3_200);
        // Two slots busy: they count once each.
        assert_eq!(held_runs_limit(32, 2, ms(100), Some(ms(1)), false), 2 + 30 * 100);
        // Jobs as long as the lead or longer: one run per slot, as the slots alone allowed.
        assert_eq!(held_runs_limit(32, 0, ms(100), Some(ms(100)), false), 32);
        assert_eq!(held_runs_limit(32, 5, ms(100), Some(Duration::from_secs(60)), false), 32);
        assert_eq!(held_runs_limit(32, 40, ms(100), Some(ms(1)), false), 32, "more running than slots");
        // Not learned yet: a node sharing its store assumes one run per slot, a node with
        // a store of its own short jobs.
        assert_eq!(held_runs_limit(32, 0, ms(100), None, false), 32);
        assert_eq!(held_runs_limit(32, 0, ms(100), None, true), MAX_HELD_RUNS);
        // Bounded whatever the speed.
        assert_eq!(held_runs_limit(32, 0, ms(1_000), Some(Duration::from_nanos(1)), false), MAX_HELD_RUNS);
        assert_eq!(held_runs_limit(32, 0, ms(100), Some(Duration::ZERO), false), MAX_HELD_RUNS);
        assert_eq!(held_runs_limit(1_000_000, 0, ms(100), Some(ms(100)), false), MAX_HELD_RUNS);
    }

    #[test]
    fn job_time_follows_the_jobs_that_ended() {
        let ms = Duration::from_millis;
        let mut time = JobTime::new();
        assert_eq!(time.mean(), None);
        time.observe(0, ms(5));
        assert_eq!(time.mean(), None, "no job ended");
        time.observe(4, ms(8));
        assert_eq!(time.mean(), Some(ms(2)), "the first batch sets it");
        // One slow job moves it a little; many move it most of the way.
        time.observe(1, ms(102));
        assert_eq!(time.mean(), Some(ms(7)));
        time.observe(1_000, ms(1_000));
        let mean = time.mean().unwrap();
        assert!(mean > Duration::from_micros(999) && mean < Duration::from_micros(1_001), "{mean:?}");
    }

    #[test]
    fn the_batch_halves_when_too_big_and_grows_back_by_quarters() {
        let mut batch = AcquisitionBatch::new(100);
        assert_eq!(batch.current(), 100);
        batch.grow();
        assert_eq!(batch.current(), 100, "never beyond the configured batch");
        for expected in [50, 25, 12, 6, 3, 1, 1] {
            batch.shrink();
            assert_eq!(batch.current(), expected);
        }
        let grown: Vec<u32> = (0..6)
            .map(|_| {
                batch.grow();
                batch.current()
            })
            .collect();
        assert_eq!(grown, vec![2, 3, 4, 5, 6, 7]);
        for _ in 0..40 {
            batch.grow();
        }
        assert_eq!(batch.current(), 100);
        assert_eq!(AcquisitionBatch::new(0).current(), 1, "a zero batch is one");
    }

    #[test]
    fn acquisition_lead_grows_with_the_fires_due_together_up_to_its_cap() {
        let ms = Duration::from_millis;
        let mut lead = AcquisitionLead::new(ms(100), ms(1_000), Duration::from_micros(20));
        assert_eq!(lead.lead(0), ms(100));
        assert_eq!(lead.lead(1_000), ms(140));
        assert_eq!(lead.lead(1_000_000), ms(1_000), "capped");
        // Learns the measured cost, ignoring small acquisitions.
        lead.observe(2, ms(50));
        assert_eq!(lead.cost_per_run(), Duration::from_micros(20));
        lead.observe(1_000, ms(60));
        assert_eq!(lead.cost_per_run(), Duration::from_micros(60), "a higher cost is taken at once");
        lead.observe(1_000, ms(20));
        assert_eq!(lead.cost_per_run(), Duration::from_micros(50), "a lower one approached by a quarter");
        for _ in 0..50 {
            lead.observe(1_000, ms(60));
        }
        assert!(lead.lead(5_000) > ms(695) && lead.lead(5_000) < ms(705));
        // Instant acquisitions (a paused clock) bring it down to the base.
        for _ in 0..200 {
            lead.observe(100, Duration::ZERO);
        }
        assert_eq!(lead.lead(10_000), ms(100));
        assert_eq!(lead.saturation(), usize::MAX, "free acquisitions: no count is enough");
        let lead = AcquisitionLead::new(ms(100), ms(1_000), Duration::from_micros(40));
        assert_eq!(lead.saturation(), 11_251);
        assert_eq!(lead.lead(lead.saturation()), ms(1_000));
        // A cap below the base is the base.
        assert_eq!(AcquisitionLead::new(ms(100), ms(10), Duration::ZERO).lead(10), ms(100));
    }
}
