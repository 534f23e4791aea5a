//! The world: real sundial nodes on one paused, seeded `current_thread` runtime, sharing one
//! `MemoryKv`; the workload's operations and the fault plan on one timeline; then the
//! liveness phase and the checkers.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, TimeDelta, Utc};
use parking_lot::Mutex;
use sundial::entropy::Entropy;
use sundial::job::{RunCause, RunState};
use sundial::kv::memory::{KvFaults, MemoryKv, MemoryKvOptions};
use sundial::kv::{run, Kv, KvTransaction, RangeRequest, RetryOptions};
use sundial::leader::KvLeaderElection;
use sundial::options::SchedulerOptions;
use sundial::store::codec;
use sundial::store::keys::Keyspace;
use sundial::store::records::RunRecord;
use sundial::store::{JobStatus, KvJobStore, RunDeletedHook, StoreError, StoreOptions};
use sundial::time::{add_duration, Clock};
use sundial_actors::clock::{TokioClock, TokioSleeper};
use sundial_actors::node::{Node, NodeConfig};
use sundial_actors::registry::JobRegistry;
use sundial_actors::scheduler::JobScheduler;
use tokio::sync::mpsc;
use uuid::Uuid;

use crate::check::{self, Checked, DeletedRun, Samples};
use crate::faults::{self, Fault, FaultPlan};
use crate::options::SimOptions;
use crate::sim_job::{Incarnation, SimJob, SIM_JOB_TYPE};
use crate::trace::{write_event, EventKind, EventLog, Trace};
use crate::workload::{self, epoch, Op, Workload};

mod operations;

use operations::outcome;

type Store = KvJobStore<MemoryKv>;

/// Makes actor names unique per world in this process (names are process-global in
/// ractor); never traced.
static WORLDS: AtomicU64 = AtomicU64::new(0);

/// How long an operator waits before retrying an operation the store refused.
const OP_RETRY: Duration = Duration::from_secs(10);

/// How often the store's run states are sampled for the transition checker (and the
/// nodes' acquisition counts, for [`BusiestPoller`]).
pub const SAMPLE_EVERY: Duration = Duration::from_secs(10);

/// Every run record in `store`, read in one transaction: the history the checkers read.
///
/// # Errors
/// The store's, or a record that does not decode.
pub async fn every_run<K: Kv>(store: &KvJobStore<K>) -> Result<Vec<RunRecord>, StoreError> {
    let keys = store.keys().clone();
    run(store.kv(), RetryOptions::default(), |txn, _| {
        let keys = keys.clone();
        async move {
            let begin = keys.run(Uuid::nil());
            let mut end = keys.run(Uuid::max());
            end.push(0);
            let range = txn.get_range(&RangeRequest::new(begin.into_vec(), end.into_vec()), true).await?;
            range.pairs.iter().map(|(_, v)| codec::decode::<RunRecord>(v, "run record")).collect::<Result<Vec<_>, _>>()
        }
    })
    .await
}

/// The node options every simulated node of `options` runs with: short timeouts so
/// recovery happens within the phases, and room for two runs per job across the cluster
/// (at least 64 per node), as an operator would size it: a saturated cluster delays fires
/// by design, which the liveness checker would rightly report.
pub fn node_options(options: &SimOptions) -> SchedulerOptions {
    let per_node = u32::try_from((options.jobs * 2).div_ceil(options.nodes.max(1))).unwrap_or(u32::MAX);
    SchedulerOptions {
        poll_interval: Duration::from_secs(1),
        lease_ttl: Duration::from_secs(10),
        node_timeout: Duration::from_secs(30),
        housekeeping_interval: Duration::from_secs(10),
        max_concurrent_runs: per_node.max(64),
        history_retention: options.history_retention,
        ..SchedulerOptions::default()
    }
}

/// What one simulation found.
#[derive(Debug, Clone)]
pub struct Outcome {
    /// The options it ran with.
    pub options: SimOptions,
    /// Simulated time in all: both phases, with the liveness phase lengthened (see
    /// [`Self::liveness_lengthened`]).
    pub simulated: Duration,
    /// How much longer than [`SimOptions::liveness`] the liveness phase ran: as far as a
    /// clock had jumped ahead when the faults healed (the fires that far into the phase
    /// are not judged, so the checker still judges a whole phase's worth).
    pub liveness_lengthened: Duration,
    /// Runs caused by schedules, in the store's history (the runs retention deleted included).
    pub fires: u64,
    /// Every run in the store's history (the runs retention deleted included).
    pub runs: u64,
    /// Events in the log.
    pub events: usize,
    /// What the checkers found.
    pub checked: Checked,
    /// SHA-256 over the full ordered trace (events, then the history).
    pub trace_hash: String,
    /// Counts of what happened (faults, operations, outcomes), for the summary.
    pub counts: BTreeMap<String, u64>,
    /// The node that acquired most often between two samples: a poller cycling without
    /// need (re-checking a fire it cannot take) shows here long before it costs anything
    /// a checker sees.
    pub busiest_poller: BusiestPoller,
    /// The trace the hash is over (every event, then every run in the history),
    /// when [`SimOptions::keep_trace`] asked for it; empty otherwise.
    pub trace: Vec<String>,
    /// What each job's runs came to, by job name.
    pub jobs: BTreeMap<String, JobTally>,
}

/// What one job's runs came to, from the store's history (the runs retention deleted
/// included): what a user simulating their own jobs wants to see of each.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct JobTally {
    /// Runs its schedules caused.
    pub fires: u64,
    /// Runs by hand (trigger, enqueue).
    pub manual: u64,
    /// Retries of failed runs.
    pub retries: u64,
    /// Re-runs of runs lost with their node.
    pub recoveries: u64,
    /// Runs by state at the end (`Running` for those still running).
    pub states: BTreeMap<RunState, u64>,
    /// The latest a fire started after its scheduled time, on its node's clock (µs).
    pub latest_start_us: Option<i64>,
}

impl JobTally {
    /// Adds one run.
    fn add(&mut self, run: &RunRecord) {
        match run.cause {
            RunCause::Schedule => {
                self.fires += 1;
                let late = run.started_us - run.scheduled_us;
                self.latest_start_us = Some(self.latest_start_us.map_or(late, |l| l.max(late)));
            }
            RunCause::Manual => self.manual += 1,
            RunCause::Retry => self.retries += 1,
            RunCause::Recovery => self.recoveries += 1,
        }
        *self.states.entry(run.state).or_default() += 1;
    }
}

/// The most acquisitions one node made in one sampling interval ([`SAMPLE_EVERY`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct BusiestPoller {
    /// How many (each one store transaction, whether it took fires or not).
    pub acquisitions: u64,
    /// The node's store client (`node#incarnation`).
    pub node: String,
    /// The end of the interval, in true time.
    pub until: Option<chrono::DateTime<chrono::Utc>>,
}

/// Runs one simulation to its end on a fresh runtime.
///
/// # Panics
/// When the runtime cannot be built (the platform lacks timers).
pub fn simulate(options: &SimOptions) -> Outcome {
    let mut seed = [0u8; 8];
    seed.copy_from_slice(&options.seed.to_le_bytes());
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .rng_seed(tokio::runtime::RngSeed::from_bytes(&seed))
        .build()
        .expect("a current_thread runtime with timers");
    let outcome = runtime.block_on(World::run(options.clone()));
    // Dropping the runtime drops every task still pending (hung jobs, node actors).
    drop(runtime);
    outcome
}

struct Running {
    scheduler: JobScheduler<MemoryKv>,
    incarnation: Arc<Incarnation>,
    client: String,
    /// When (true time) it started.
    started: DateTime<Utc>,
}

struct Slot {
    node_id: String,
    incarnation: u32,
    clock: crate::clock::SimClock,
    running: Option<Running>,
    /// A graceful stop is under way; the restart waits for it.
    draining: bool,
    /// The running incarnation's acquisition count at the last sample.
    acquisitions_sampled: u64,
}

/// Timeline actions (faults, their ends, operations, phase changes).
enum Action {
    Fault(Fault),
    Restart {
        slot: usize,
        new_id: bool,
    },
    Heal(Heal),
    Op(Op),
    /// An operation the store refused, tried again.
    RetryOp(Op),
    Sample,
    EndSafety,
}

enum Heal {
    Latency,
    Unavailable,
    Partition(String),
}

/// Messages from tasks the world spawned.
enum Note {
    /// A drain finished: restart the slot after `down`.
    Drained { slot: usize, down: Duration },
}

struct World {
    options: SimOptions,
    truth: TokioClock,
    log: EventLog,
    kv: MemoryKv,
    observer: Store,
    workload: Workload,
    plan: FaultPlan,
    slots: Vec<Slot>,
    timeline: BTreeMap<(Duration, u64), Action>,
    seq: u64,
    entropy: Entropy,
    prefix: String,
    notes: (mpsc::UnboundedSender<Note>, mpsc::UnboundedReceiver<Note>),
    counts: BTreeMap<String, u64>,
    /// The most acquisitions one node made between two samples, with the node and when.
    busiest_poller: BusiestPoller,
    samples: Samples,
    safety_faults: KvFaults,
    latency_windows: u32,
    /// How far ahead of its skew a node's clock had jumped when the faults healed.
    jumped_ahead: Duration,
    /// When the simulation ends (offset from the epoch): both phases, the liveness phase
    /// lengthened by [`Self::jumped_ahead`] when the faults heal.
    end: Duration,
    unavailable_windows: u32,
    partitions: BTreeMap<String, u32>,
    /// Per job, its operations being retried after a refusal: the job's later operations
    /// wait behind them, as an operator's would, so a retried pause never lands after the
    /// resume that was meant to follow it.
    retrying: BTreeMap<sundial::name::JobName, u32>,
    /// Per job, the operations waiting behind its refused one, in the order they came:
    /// each goes once the one ahead of it went through.
    held: BTreeMap<sundial::name::JobName, std::collections::VecDeque<Op>>,
    /// Jobs the store took only late: runtime jobs whose first scheduling it refused, code
    /// jobs not written by the first sample (see `check::Inputs`).
    late_jobs: BTreeSet<sundial::name::JobName>,
    /// Per job, when the last operation on it returned (see `check::Inputs::changed_at`).
    changed_at: BTreeMap<sundial::name::JobName, DateTime<Utc>>,
    /// Whether the first sample looked for the code jobs.
    code_jobs_checked: bool,
    /// Runs the nodes' stores deleted (history retention), by id, with the record and the
    /// true time of the first deletion attempt (see `RunDeletedHook`).
    deleted: Arc<Mutex<BTreeMap<Uuid, DeletedRun>>>,
    /// The lowest and highest offset from true time any node's clock has had (skew and
    /// jumps): how far two nodes' clocks can disagree about when a run ended.
    clock_offsets: (TimeDelta, TimeDelta),
}

impl World {
    async fn run(options: SimOptions) -> Outcome {
        let truth = TokioClock::new(epoch());
        let plan = faults::plan(&options);
        let safety_faults = KvFaults {
            spurious_conflict: plan.conflicts,
            unknown_result_committed: plan.unknown_result / 2.0,
            unknown_result_not_committed: plan.unknown_result / 2.0,
            ..KvFaults::default()
        };
        let kv = MemoryKv::with_options(
            Arc::new(truth),
            Arc::new(TokioSleeper),
            MemoryKvOptions { seed: options.seed, faults: safety_faults.clone(), ..MemoryKvOptions::default() },
        );
        let observer = KvJobStore::new(
            kv.observer(),
            Arc::new(crate::world_calendar_set(options.given.as_deref())),
            Entropy::from_seed(options.seed ^ 0x6f62),
            StoreOptions::default(),
        );
        let slots = (0..options.nodes)
            .map(|slot| Slot {
                node_id: format!("node-{slot}"),
                incarnation: 0,
                clock: crate::clock::SimClock::new(truth, plan.skew.get(slot).copied().unwrap_or_default()),
                running: None,
                draining: false,
                acquisitions_sampled: 0,
            })
            .collect();
        let clock_offsets =
            (plan.skew.iter().copied().min().unwrap_or_default(), plan.skew.iter().copied().max().unwrap_or_default());
        let end = options.duration + options.liveness;
        let world = World {
            workload: workload::generate(&options),
            entropy: Entropy::from_seed(options.seed ^ 0x776f_726c_6400_0000),
            prefix: format!("sim{}", WORLDS.fetch_add(1, Ordering::Relaxed)),
            options,
            truth,
            log: EventLog::default(),
            kv,
            observer,
            plan,
            slots,
            timeline: BTreeMap::new(),
            seq: 0,
            notes: mpsc::unbounded_channel(),
            counts: BTreeMap::new(),
            busiest_poller: BusiestPoller::default(),
            samples: Samples::default(),
            safety_faults,
            latency_windows: 0,
            jumped_ahead: Duration::ZERO,
            end,
            unavailable_windows: 0,
            partitions: BTreeMap::new(),
            retrying: BTreeMap::new(),
            held: BTreeMap::new(),
            late_jobs: BTreeSet::new(),
            changed_at: BTreeMap::new(),
            code_jobs_checked: false,
            deleted: Arc::default(),
            clock_offsets,
        };
        world.main().await
    }

    fn note_clock_offset(&mut self, offset: TimeDelta) {
        self.clock_offsets = (self.clock_offsets.0.min(offset), self.clock_offsets.1.max(offset));
    }

    fn at(&mut self, offset: Duration, action: Action) {
        self.seq += 1;
        self.timeline.insert((offset, self.seq), action);
    }

    fn elapsed(&self) -> Duration {
        (self.truth.now() - epoch()).to_std().unwrap_or_default()
    }

    fn count(&mut self, what: &str) {
        *self.counts.entry(what.to_owned()).or_default() += 1;
    }

    fn world(&self, text: impl Into<String>) {
        self.log.world(self.truth.now(), text);
    }

    async fn main(mut self) -> Outcome {
        for slot in 0..self.slots.len() {
            self.start_node(slot).await;
        }
        self.schedule_runtime_jobs().await;
        let timed = self.plan.timed.clone();
        for (at, fault) in timed {
            self.at(at, Action::Fault(fault));
        }
        for (at, op) in self.workload.ops.clone() {
            self.at(at, Action::Op(op));
        }
        self.at(self.options.duration, Action::EndSafety);
        self.schedule_samples(SAMPLE_EVERY);
        loop {
            let end = self.end;
            let next = self.timeline.keys().next().copied();
            let until = next.map_or(end, |(at, _)| at.min(end));
            let wait = until.saturating_sub(self.elapsed());
            tokio::select! {
                biased;
                Some(note) = self.notes.1.recv() => self.on_note(note),
                () = tokio::time::sleep(wait) => {
                    match next {
                        Some(key) if key.0 <= end => {
                            if let Some(action) = self.timeline.remove(&key) {
                                self.act(action).await;
                            }
                        }
                        _ => break,
                    }
                }
            }
        }
        self.finish().await
    }

    /// Samples every [`SAMPLE_EVERY`] from `from` until the end.
    fn schedule_samples(&mut self, from: Duration) {
        let mut sample_at = from;
        while sample_at < self.end {
            self.at(sample_at, Action::Sample);
            sample_at += SAMPLE_EVERY;
        }
    }

    fn on_note(&mut self, note: Note) {
        match note {
            Note::Drained { slot, down } => {
                self.slots[slot].draining = false;
                let at = self.elapsed() + down;
                self.at(at, Action::Restart { slot, new_id: false });
            }
        }
    }

    async fn act(&mut self, action: Action) {
        match action {
            Action::Fault(fault) => self.fault(fault).await,
            Action::Restart { slot, new_id } => {
                if self.slots[slot].running.is_none() && !self.slots[slot].draining {
                    if new_id {
                        let incarnation = self.slots[slot].incarnation + 1;
                        self.slots[slot].node_id = format!("node-{slot}-{incarnation}");
                    }
                    self.start_node(slot).await;
                }
            }
            Action::Heal(heal) => self.heal(heal),
            Action::Op(op) => self.op(op, false).await,
            Action::RetryOp(op) => self.op(op, true).await,
            Action::Sample => self.sample().await,
            Action::EndSafety => self.end_safety().await,
        }
    }

    fn registry(&self, incarnation: &Arc<Incarnation>) -> JobRegistry {
        let (seed, hung, truth, log) = (self.options.seed, self.plan.hung, self.truth, self.log.clone());
        let incarnation = incarnation.clone();
        let mut builder = JobRegistry::builder().add_job_type_as(SIM_JOB_TYPE, move || SimJob {
            seed,
            hung_rate: hung,
            truth,
            log: log.clone(),
            incarnation: incarnation.clone(),
        });
        for (name, calendar) in crate::world_calendars(self.options.given.as_deref()) {
            builder = builder.add_calendar(name.as_str(), calendar);
        }
        for def in &self.workload.code_jobs {
            builder = builder.add_job_definition(def.clone());
        }
        builder.build().expect("the generated code jobs register")
    }

    async fn start_node(&mut self, slot: usize) {
        let seed = self.options.seed;
        let (node_id, clock, number) = {
            let s = &mut self.slots[slot];
            s.incarnation += 1;
            (s.node_id.clone(), s.clock.clone(), s.incarnation)
        };
        let incarnation = Arc::new(Incarnation::new(node_id.clone(), number));
        let registry = self.registry(&incarnation);
        let client = format!("{node_id}#{number}");
        let kv = self.kv.client(&client);
        let stream = seed ^ ((slot as u64) << 32) ^ u64::from(number);
        let (deleted, truth) = (self.deleted.clone(), self.truth);
        let on_run_deleted = RunDeletedHook(Arc::new(move |record: &RunRecord| {
            let mut deleted = deleted.lock();
            deleted.entry(record.id).or_insert_with(|| DeletedRun { record: record.clone(), at: truth.now() });
        }));
        let store_options = StoreOptions {
            #[cfg(feature = "broken-stores")]
            broken: self.options.broken_store,
            on_run_deleted: Some(on_run_deleted),
            ..StoreOptions::default()
        };
        let store =
            KvJobStore::new(kv.clone(), registry.calendars().clone(), Entropy::from_seed(stream ^ 1), store_options);
        let clock: Arc<dyn Clock> = Arc::new(clock);
        let election = KvLeaderElection::new(
            kv,
            Keyspace::default_root(),
            clock.clone(),
            &node_id,
            Entropy::from_seed(stream ^ 2),
        );
        let mut config = NodeConfig::new(
            store,
            registry,
            node_options(&self.options),
            &node_id,
            clock,
            Entropy::from_seed(stream ^ 3),
        );
        config.shared_store = true;
        config.election = Some(Arc::new(election));
        config.name_prefix = format!("{}/{slot}.{number}", self.prefix);
        match Node::start(config, None).await {
            Ok(scheduler) => {
                scheduler.serve();
                self.world(format!("start {node_id}#{number} (slot {slot})"));
                self.count("node starts");
                let started = self.truth.now();
                self.slots[slot].running = Some(Running { scheduler, incarnation, client, started });
                self.slots[slot].acquisitions_sampled = 0;
            }
            Err(error) => self.world(format!("start {node_id}#{number} failed: {error}")),
        }
    }

    async fn schedule_runtime_jobs(&mut self) {
        let Some(scheduler) = self.any_scheduler() else { return };
        let results = scheduler.schedule(self.workload.runtime_jobs.clone()).await;
        for (def, result) in self.workload.runtime_jobs.clone().into_iter().zip(results) {
            let (text, refused) = outcome(format!("schedule {}", def.name), result);
            if refused {
                // As an operator would, and as every later operation is: again until the
                // store takes it (with every commit failing, not before the faults heal).
                self.world(format!("{text}; again in 10s"));
                self.late_jobs.insert(def.name.clone());
                self.refused(Op::Schedule(Box::new(def)), false);
            } else {
                self.world(text);
            }
        }
    }

    fn any_scheduler(&self) -> Option<JobScheduler<MemoryKv>> {
        self.slots.iter().find_map(|s| s.running.as_ref().map(|r| r.scheduler.clone()))
    }

    fn scheduler_of(&self, slot: usize) -> Option<JobScheduler<MemoryKv>> {
        let slot = slot % self.slots.len();
        self.slots[slot].running.as_ref().map(|r| r.scheduler.clone()).or_else(|| self.any_scheduler())
    }

    /// The process of `slot` dies: its jobs end now, its store client never reaches the
    /// store again, its actors are killed without cleanup.
    fn kill(&mut self, slot: usize) -> Option<String> {
        let running = self.slots[slot].running.take()?;
        running.incarnation.kill();
        for run in self.log.in_flight(&running.incarnation.node, running.incarnation.number) {
            self.log.push(self.truth.now(), EventKind::Killed { run, node: running.incarnation.node.clone() });
        }
        self.kv.set_partitioned(&running.client, true);
        running.scheduler.actor().kill();
        Some(running.client)
    }

    async fn fault(&mut self, fault: Fault) {
        let now = self.elapsed();
        match fault {
            Fault::Crash { slot, down, new_id } => {
                if let Some(client) = self.kill(slot) {
                    self.world(format!(
                        "crash {client}; back in {}s{}",
                        down.as_secs(),
                        if new_id { " as a new node" } else { "" }
                    ));
                    self.count("crashes");
                    self.at(now + down, Action::Restart { slot, new_id });
                }
            }
            Fault::Drain { slot, down } => {
                let Some(running) = self.slots[slot].running.take() else { return };
                self.slots[slot].draining = true;
                self.world(format!("drain {}", running.client));
                self.count("drains");
                let (log, truth, notes) = (self.log.clone(), self.truth, self.notes.0.clone());
                tokio::spawn(async move {
                    let report = running.scheduler.stop(Duration::from_secs(20)).await;
                    // The process exits: whatever still runs (jobs that ignore cancellation) ends.
                    running.incarnation.kill();
                    let node = &running.incarnation.node;
                    for run in log.in_flight(node, running.incarnation.number) {
                        log.push(truth.now(), EventKind::Killed { run, node: node.clone() });
                    }
                    log.world(
                        truth.now(),
                        format!(
                            "stopped {}: canceled {}, abandoned {}",
                            running.client, report.canceled, report.abandoned
                        ),
                    );
                    let _ = notes.send(Note::Drained { slot, down });
                });
            }
            Fault::Latency { length, max } => {
                self.latency_windows += 1;
                self.kv.set_faults(KvFaults { latency_max: max, ..self.safety_faults.clone() });
                self.world(format!("latency up to {}ms for {}s", max.as_millis(), length.as_secs()));
                self.count("latency windows");
                self.at(now + length, Action::Heal(Heal::Latency));
            }
            Fault::Unavailable { length } => {
                self.unavailable_windows += 1;
                self.kv.set_unavailable(true);
                self.world(format!("store unavailable for {}s", length.as_secs()));
                self.count("unavailability windows");
                self.at(now + length, Action::Heal(Heal::Unavailable));
            }
            Fault::Partition { slot, length } => {
                let Some(client) = self.slots[slot].running.as_ref().map(|r| r.client.clone()) else { return };
                *self.partitions.entry(client.clone()).or_default() += 1;
                self.kv.set_partitioned(&client, true);
                self.world(format!("partition {client} for {}s", length.as_secs()));
                self.count("partitions");
                self.at(now + length, Action::Heal(Heal::Partition(client)));
            }
            Fault::ClockJump { slot, by } => {
                let by = TimeDelta::from_std(by).unwrap_or_default();
                self.slots[slot].clock.jump(by);
                self.note_clock_offset(self.slots[slot].clock.offset());
                self.world(format!("clock of slot {slot} jumps {}s ahead", by.num_seconds()));
                self.count("clock jumps");
            }
        }
    }

    fn heal(&mut self, heal: Heal) {
        match heal {
            Heal::Latency => {
                self.latency_windows = self.latency_windows.saturating_sub(1);
                if self.latency_windows == 0 {
                    self.kv.set_faults(self.safety_faults.clone());
                    self.world("latency healed");
                }
            }
            Heal::Unavailable => {
                self.unavailable_windows = self.unavailable_windows.saturating_sub(1);
                if self.unavailable_windows == 0 {
                    self.kv.set_unavailable(false);
                    self.world("store available");
                }
            }
            Heal::Partition(client) => {
                let left = self.partitions.get(&client).copied().unwrap_or(0).saturating_sub(1);
                self.partitions.insert(client.clone(), left);
                let alive = self.slots.iter().any(|s| s.running.as_ref().is_some_and(|r| r.client == client));
                if left == 0 && alive {
                    self.kv.set_partitioned(&client, false);
                    self.world(format!("partition of {client} healed"));
                }
            }
        }
    }

    async fn end_safety(&mut self) {
        self.world("safety phase over: faults healed");
        // Clocks that jumped are corrected back to their skew. Until true time catches up
        // with the furthest jump, fires may already have run early (or been skipped as
        // misfires) on the jumped clock.
        for (slot, skew) in self.plan.skew.clone().into_iter().enumerate() {
            let ahead = (self.slots[slot].clock.offset() - skew).to_std().unwrap_or_default();
            self.jumped_ahead = self.jumped_ahead.max(ahead);
            self.slots[slot].clock.set_offset(skew);
        }
        if !self.jumped_ahead.is_zero() {
            // Fires that far into the liveness phase may have run early or been skipped on
            // a jumped clock, so the liveness checker judges only the fires after them: the
            // phase is lengthened by as much, so that it judges as long as without jumps.
            let longer = Duration::from_secs(self.jumped_ahead.as_secs_f64().ceil() as u64);
            let old_end = self.end;
            self.end += longer;
            let next_sample = SAMPLE_EVERY * (old_end.as_secs().div_ceil(SAMPLE_EVERY.as_secs()) as u32);
            self.schedule_samples(next_sample);
            self.world(format!(
                "liveness phase lengthened by {}s: a clock had jumped that far ahead",
                longer.as_secs()
            ));
        }
        self.safety_faults = KvFaults::default();
        self.kv.set_faults(KvFaults::default());
        self.kv.set_unavailable(false);
        self.unavailable_windows = 0;
        self.latency_windows = 0;
        let clients: Vec<String> =
            self.slots.iter().filter_map(|s| s.running.as_ref().map(|r| r.client.clone())).collect();
        for client in clients {
            self.kv.set_partitioned(&client, false);
            self.partitions.remove(&client);
        }
        for slot in 0..self.slots.len() {
            if self.slots[slot].running.is_none() && !self.slots[slot].draining {
                self.start_node(slot).await;
            }
        }
    }

    /// Samples run states for the transition checker: the running-run index, and the
    /// record of each run that left it since the last sample.
    async fn sample(&mut self) {
        for slot in &mut self.slots {
            let Some(running) = &slot.running else { continue };
            let total = running.scheduler.counters().acquisitions;
            let since = total.saturating_sub(slot.acquisitions_sampled);
            slot.acquisitions_sampled = total;
            if since > self.busiest_poller.acquisitions {
                let at = self.truth.now();
                self.busiest_poller =
                    BusiestPoller { acquisitions: since, node: running.client.clone(), until: Some(at) };
            }
        }
        if !self.code_jobs_checked {
            // Nodes write their code jobs at their first cycle; one the store refused that
            // long (every commit failing) exists only later, so its fires do not follow
            // from the epoch (see `check::Inputs::late_jobs`).
            self.code_jobs_checked = true;
            for def in self.workload.code_jobs.clone() {
                if !matches!(self.observer.status(&def.name).await, Ok(Some(_))) {
                    self.world(format!("code job {} not written yet", def.name));
                    self.late_jobs.insert(def.name);
                }
            }
        }
        let keys = self.observer.keys().clone();
        let before = self.samples.running().clone();
        let read = run(self.observer.kv(), RetryOptions { retry_limit: 3, ..RetryOptions::default() }, |txn, _| {
            let (keys, before) = (keys.clone(), &before);
            async move {
                let (begin, end) = keys.running_everywhere();
                let range = txn.get_range(&RangeRequest::new(begin, end), true).await?;
                let mut running = BTreeSet::new();
                for (key, _) in &range.pairs {
                    running.insert(keys.node_run_of(key)?);
                }
                let mut left = BTreeMap::new();
                for id in before.difference(&running) {
                    let state = match txn.get(&keys.run(*id), true).await? {
                        Some(bytes) => Some(codec::decode::<RunRecord>(&bytes, "run record")?.state),
                        None => None,
                    };
                    left.insert(*id, state);
                }
                Ok::<_, sundial::store::StoreError>((running, left))
            }
        })
        .await;
        if let Ok((running, mut left)) = read {
            // A run that ended since the last sample may be gone already (retention, on a
            // leader whose clock runs ahead): its state is the deleted record's.
            let deleted = self.deleted.lock();
            for (id, state) in &mut left {
                if state.is_none() {
                    *state = deleted.get(id).map(|d| d.record.state);
                }
            }
            drop(deleted);
            self.samples.observe(self.truth.now(), running, left);
        }
    }

    async fn history(&self) -> Vec<RunRecord> {
        every_run(&self.observer).await.unwrap_or_default()
    }

    async fn finish(mut self) -> Outcome {
        self.sample().await;
        // The log is complete, and its part of the trace (the first) needs nothing else: it
        // is written on a second thread while this one reads the store.
        let events = self.log.take();
        let keep_trace = self.options.keep_trace;
        let events_trace = std::thread::spawn(move || {
            let mut trace = Trace::new(keep_trace);
            for event in &events {
                trace.push_with(|line| write_event(line, event));
            }
            (trace, events)
        });
        let mut history = self.history().await;
        // Runs retention deleted (a deletion that did not commit left its run in the store).
        let kept: BTreeSet<Uuid> = history.iter().map(|r| r.id).collect();
        let mut deleted = BTreeMap::new();
        for (id, run) in std::mem::take(&mut *self.deleted.lock()) {
            if !kept.contains(&id) {
                deleted.insert(id, run.at);
                history.push(run.record);
            }
        }
        history.sort_by_key(|r| r.id);
        let end = self.truth.now();
        let mut live: Vec<check::LiveNode> = self
            .slots
            .iter()
            .filter_map(|s| s.running.as_ref())
            .map(|r| check::LiveNode {
                node: r.incarnation.node.clone(),
                incarnation: r.incarnation.number,
                started: r.started,
            })
            .collect();
        live.sort_by(|a, b| a.node.cmp(&b.node));
        let statuses = self.observer.statuses().await.unwrap_or_default();
        let triggers: std::collections::BTreeSet<(String, String)> = statuses
            .iter()
            .flat_map(|s| s.triggers.iter().map(|t| (s.definition.name.to_string(), t.name.clone())))
            .collect();
        let (trace, events) = events_trace.join().unwrap_or_else(|panic| std::panic::resume_unwind(panic));
        let skews = faults::plan(&self.options).skew;
        let calendars = crate::world_calendar_set(self.options.given.as_deref());
        let setting = check::Setting {
            epoch: epoch(),
            // Nodes start and write their code jobs in the simulation's first seconds.
            settle: Duration::from_secs(30),
            skews: &skews,
            skew_bound_seconds: self.options.faults.rate(crate::options::FaultKind::Skew).unwrap_or(0.0),
            misfire_threshold: node_options(&self.options).misfire_threshold,
            history_retention: self.options.history_retention,
            calendars: &calendars,
        };
        let inputs = check::Inputs {
            triggers: &triggers,
            setting,
            workload: &self.workload,
            events: &events,
            history: &history,
            deleted: &deleted,
            clock_offsets: self.clock_offsets,
            samples: &self.samples,
            live: &live,
            liveness_from: add_duration(epoch(), self.options.duration),
            jumped_ahead: self.jumped_ahead,
            end,
            late_jobs: &self.late_jobs,
            final_jobs: &statuses,
            changed_at: &self.changed_at,
            in_flux: &self.retrying.keys().chain(self.held.keys()).cloned().collect(),
        };
        // The checkers and the rest of the trace read the same finished run: the checkers of
        // runs on a second thread, the trace and then the checkers of fires on this one (all
        // pure functions of the run, so the outcome does not depend on which ends first).
        let executions = check::SharedExecutions::new();
        let (by_checkers, trace) = std::thread::scope(|scope| {
            let runs = scope.spawn(|| check::check_runs(&inputs, &executions));
            let trace = trace_of(trace, &history, &deleted, &statuses);
            let fires = check::check_fires(&inputs, &executions);
            let mut checked = runs.join().unwrap_or_else(|panic| std::panic::resume_unwind(panic));
            checked.merge(fires);
            (checked, trace)
        });
        // Runs started twice first: the other findings may follow from them.
        let mut checked = executions.into_inner().map(check::Executions::into_checked).unwrap_or_default();
        checked.merge(by_checkers);
        let (trace_hash, lines) = trace.finish();
        let fires = history.iter().filter(|r| r.cause == RunCause::Schedule).count() as u64;
        let mut jobs: BTreeMap<String, JobTally> = BTreeMap::new();
        for run in &history {
            *self.counts.entry(format!("runs {:?}", run.state).to_lowercase()).or_default() += 1;
            jobs.entry(run.job.clone()).or_default().add(run);
        }
        // Stop the nodes abruptly: the checks are done, and the runtime drops their tasks.
        for slot in 0..self.slots.len() {
            if let Some(running) = self.slots[slot].running.take() {
                running.incarnation.kill();
                running.scheduler.actor().kill();
            }
        }
        let liveness_lengthened = self.end.saturating_sub(self.options.duration + self.options.liveness);
        Outcome {
            options: self.options,
            simulated: self.end,
            liveness_lengthened,
            fires,
            runs: history.len() as u64,
            events: events.len(),
            checked,
            trace_hash,
            counts: self.counts,
            busiest_poller: self.busiest_poller,
            trace: lines,
            jobs,
        }
    }
}

/// The rest of the run's trace after its events (`trace`): every run record (with when
/// retention deleted it), then every trigger's final state.
fn trace_of(
    mut trace: Trace,
    history: &[RunRecord],
    deleted: &BTreeMap<Uuid, DateTime<Utc>>,
    statuses: &[JobStatus],
) -> Trace {
    use std::fmt::Write;
    for run in history {
        trace.push_with(|line| {
            let _ = write!(
                line,
                "history {} {} {} sched={} {:?} attempt={} {:?} on {} start={} end={:?} code={:?} {:?}",
                run.id,
                run.job,
                run.trigger.as_deref().unwrap_or("-"),
                run.scheduled_us,
                run.cause,
                run.attempt,
                run.state,
                run.node,
                run.started_us,
                run.finished_us,
                run.error_code,
                run.error_message,
            );
            if let Some(at) = deleted.get(&run.id) {
                let _ = write!(line, " deleted={}", at.timestamp_micros());
            }
        });
    }
    for status in statuses {
        for trigger in &status.triggers {
            trace.push_with(|line| {
                let _ = write!(
                    line,
                    "trigger {}/{} {:?}{} next={:?} fired={} error={:?}",
                    status.definition.name,
                    trigger.name,
                    trigger.state,
                    if trigger.paused || status.paused { " paused" } else { "" },
                    trigger.next_fire.map(|t| t.timestamp_micros()),
                    trigger.fire_count,
                    trigger.error,
                );
            });
        }
    }
    trace
}

/// True time `offset` after the epoch.
pub fn at_offset(offset: Duration) -> DateTime<Utc> {
    add_duration(epoch(), offset)
}
