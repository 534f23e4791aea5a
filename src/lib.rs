//! # sundial — the deterministic core
//!
//! sundial is a distributed job scheduler: cron (to the second, with time zones), fixed
//! intervals, one-off times and manual runs, with misfire handling, retries, timeouts,
//! pause/resume and run history. Many nodes share one store and every due fire runs on
//! exactly one of them.
//!
//! This crate is the pure core every node, store and simulation is built on. It has no
//! runtime, no sockets and no OS clock or randomness: time comes in through [`time::Clock`]
//! or as arguments, randomness and run ids through [`entropy::Entropy`], so the same inputs
//! give the same outputs, bit for bit.
//!
//! ## Modules, by layer
//! Each layer uses only the ones before it (`tests/layout.rs` checks it); the folders
//! under `src/` are the layers.
//!
//! The model (`src/model/`):
//! - [`name`]: job, trigger, resource and calendar names (one grammar).
//! - [`time`], [`entropy`]: the injected clock and seeded randomness.
//! - [`cron`]: the cron dialect and its fast next-fire search.
//! - [`timezone`]: IANA and Windows time zone ids.
//! - [`schedule`]: schedule kinds, windows, text form, next-fire computation.
//! - [`calendar`]: exclusion calendars.
//! - [`job`]: job and trigger definitions, retry and misfire policies, runs, states.
//! - [`rules`]: pure scheduling decisions (misfires, retries, run slots, how far ahead and
//!   how many fires to acquire).
//! - [`lapse`]: observer-judged expiry: a lease or record held by another is taken over
//!   only once this observer saw it unchanged for its whole lease, on its own clock.
//! - [`options`]: node options from TOML and the environment.
//! - [`error`]: the stable error codes.
//!
//! Storage (`src/kv/`, `src/store/`):
//! - [`kv`]: the FoundationDB-shaped transaction trait and its engines (`MemoryKv`; behind
//!   features, the durable `EmbeddedKv` and PostgreSQL's `PgKv`).
//! - [`store`]: the job store over a `Kv` (`KvJobStore`): records, keys, codec, fencing,
//!   invariants, and the transactions that acquire fires, record runs and keep history.
//!
//! The cluster (`src/cluster/`):
//! - [`leader`]: leader election (in-process, or a lease in the store).
//! - [`coordination`]: "run this once across the cluster" for fires from another trigger
//!   source (SPEC §15).
//!
//! The engine (`src/engine/`), state machines the node's actors drive:
//! - [`poller`]: what each poll cycle does and remembers.
//! - [`poll`]: the poll cycle's cadence (sleeps, heartbeats, steal intervals).
//! - [`local`]: a node's local triggers and in-process retries.
//! - [`housekeeping`]: the leader's housekeeping (which nodes to reap, when to trim
//!   history).
//! - [`liveness`]: a node's self-fencing and leader-lease renewal cadence.
//!
//! ## Glossary
//! - **job**: what to do — a type key naming the code, data, flags, policies, triggers.
//! - **trigger**: when to do it — a schedule plus priority, data and misfire policy.
//! - **fire**: one due time of a trigger, identified by (trigger, scheduled time).
//! - **run**: one execution of a job, produced by a fire, a manual trigger, a retry or a
//!   recovery. Every run is written to history.
//! - **attempt**: a run's position in its retry chain, from 1.
//! - **lease**: time-limited ownership of a resource (the leader lease).
//!
//! ## Guarantees of this crate
//! - [`cron::CronExpression::next_after`] returns the first matching whole second
//!   strictly after its argument; skipped DST wall times never fire and repeated ones
//!   fire once, at their first occurrence.
//! - [`schedule::JobSchedule`]'s text form round-trips: `parse(format(s)) == s`.
//! - No parser in this crate panics on any input string.

#![deny(unsafe_code)]
// Determinism: the OS clock, OS randomness and hash-order iteration only in the one
// allowed place each (see clippy.toml).
#![deny(clippy::disallowed_methods, clippy::disallowed_types)]

// The layers, each depending only on those above it in this list (tests/layers.rs keeps
// it so): the model, the key-value boundary, the job store over it, cluster coordination
// over the store, and the engine's pure decisions. The node's actors (crate
// `sundial-actors`) are the shells on top.
mod model;
pub use model::{
    audit, calendar, cron, describe, entropy, error, job, lapse, name, options, rules, schedule, time, timezone,
};

pub mod kv;

pub mod store;

mod cluster;
pub use cluster::{coordination, leader};

mod engine;
pub use engine::{housekeeping, liveness, local, poll, poller};

pub use calendar::{Calendars, JobCalendar};
pub use cron::{CronError, CronExpression};
pub use error::{ErrorCode, SchedulingError};
pub use job::{JobDefinition, JobRun, JobTriggerDefinition, MisfirePolicy, RetryPolicy};
pub use name::{JobName, TriggerKey, TriggerName};
pub use options::SchedulerOptions;
pub use schedule::{JobSchedule, ScheduleKind};
pub use time::Clock;
