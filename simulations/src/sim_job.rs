//! The simulated job: how long it runs, how it ends, whether it panics or ignores its
//! cancellation — all drawn from the seed and the run id, so a run behaves the same in
//! every replay. It writes what really happened to the event log.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use sha2::{Digest, Sha256};
use sundial::time::Clock;
use sundial_actors::clock::TokioClock;
use sundial_actors::job::{Job, JobFailure, JobResult, RunContext};
use uuid::Uuid;

use crate::trace::{EventKind, EventLog, StartFacts};

/// The job type key every simulated job is registered under.
pub const SIM_JOB_TYPE: &str = "sim.job";

/// How one run behaves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Behaviour {
    /// How long the job works.
    pub duration: Duration,
    /// What it returns when it finishes.
    pub outcome: Outcome,
    /// It keeps working when its token is canceled.
    pub ignores_cancel: bool,
}

/// How a run that was not canceled ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// Returns success.
    Ok,
    /// Returns a failure.
    Fail,
    /// Panics.
    Panic,
}

impl Behaviour {
    /// The behaviour of run `run` in simulation `seed`; `hung_rate` is the chance it hangs
    /// (ignores cancellation and runs for hours).
    pub fn of(seed: u64, run: Uuid, hung_rate: f64) -> Self {
        let digest = Sha256::new().chain_update(seed.to_le_bytes()).chain_update(run.as_bytes()).finalize();
        let word = |i: usize| u64::from_le_bytes(digest[i * 8..i * 8 + 8].try_into().unwrap_or_default());
        let unit = |i: usize| (word(i) >> 11) as f64 / (1u64 << 53) as f64;
        if unit(0) < hung_rate {
            let duration = Duration::from_secs(3600 + word(1) % 7200);
            return Self { duration, outcome: Outcome::Ok, ignores_cancel: true };
        }
        let length = unit(1);
        let millis = if length < 0.80 {
            100 + word(2) % 2_900
        } else if length < 0.98 {
            3_000 + word(2) % 27_000
        } else {
            30_000 + word(2) % 270_000
        };
        let roll = unit(3);
        let outcome = if roll < 0.85 {
            Outcome::Ok
        } else if roll < 0.95 {
            Outcome::Fail
        } else {
            Outcome::Panic
        };
        Self { duration: Duration::from_millis(millis), outcome, ignores_cancel: unit(0) < hung_rate + 0.05 }
    }
}

/// A node incarnation as its jobs see it: when it crashes, its jobs stop existing.
#[derive(Debug)]
pub struct Incarnation {
    /// The node id.
    pub node: String,
    /// Which start of the node slot this is.
    pub number: u32,
    alive: AtomicBool,
}

impl Incarnation {
    /// A live incarnation.
    pub fn new(node: String, number: u32) -> Self {
        Self { node, number, alive: AtomicBool::new(true) }
    }

    /// The process died.
    pub fn kill(&self) {
        self.alive.store(false, Ordering::Relaxed);
    }

    /// Whether the process still lives.
    pub fn is_alive(&self) -> bool {
        self.alive.load(Ordering::Relaxed)
    }
}

/// A simulated job instance (one per run).
#[derive(Debug)]
pub struct SimJob {
    /// The simulation's seed.
    pub seed: u64,
    /// Chance a run hangs.
    pub hung_rate: f64,
    /// True time.
    pub truth: TokioClock,
    /// Where it writes what happened.
    pub log: EventLog,
    /// The node incarnation it runs in.
    pub incarnation: Arc<Incarnation>,
}

impl Job for SimJob {
    async fn run(&mut self, ctx: &RunContext) -> JobResult {
        if !self.incarnation.is_alive() {
            // The process died an instant ago; its actors have not processed the kill yet.
            // Nothing of a dead process runs.
            return std::future::pending().await;
        }
        let behaviour = Behaviour::of(self.seed, ctx.run.id, self.hung_rate);
        let node = self.incarnation.node.clone();
        self.log.push(
            self.truth.now(),
            EventKind::Start(Box::new(StartFacts {
                run: ctx.run.clone(),
                node: node.clone(),
                incarnation: self.incarnation.number,
                ignores_cancel: behaviour.ignores_cancel,
            })),
        );
        let canceled = if behaviour.ignores_cancel {
            tokio::time::sleep(behaviour.duration).await;
            false
        } else {
            tokio::select! {
                biased;
                () = ctx.cancel.cancelled() => true,
                () = tokio::time::sleep(behaviour.duration) => false,
            }
        };
        if !self.incarnation.is_alive() {
            // The process died meanwhile: the world logged the kill; nothing of this job
            // exists any more.
            return std::future::pending().await;
        }
        let outcome = match (canceled, behaviour.outcome) {
            (true, _) => "canceled",
            (false, Outcome::Ok) => "ok",
            (false, Outcome::Fail) => "fail",
            (false, Outcome::Panic) => "panic",
        };
        self.log.push(self.truth.now(), EventKind::End { run: ctx.run.id, node, outcome });
        match outcome {
            "ok" => Ok(()),
            "panic" => panic!("simulated panic in run {}", ctx.run.id),
            "canceled" => Err(JobFailure::new("canceled")),
            _ => Err(JobFailure::new("simulated failure")),
        }
    }
}
