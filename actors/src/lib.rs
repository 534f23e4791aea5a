//! # sundial-actors — the node runtime
//!
//! This crate will hold the ractor actors of a sundial node (supervisor, poller, lease,
//! housekeeper, one actor per run), the `JobScheduler` handle and the `sundial` binary.
//! Today it holds their building blocks:
//!
//! - [`job`]: the async [`job::Job`] trait, per-run context and factories;
//! - [`registry`]: registration of job types, code jobs and calendars;
//! - [`execute`]: running one job with cancellation, timeout, panic capture, middleware
//!   and its tracing span, and deciding the outcome;
//! - [`events`]: CloudEvents envelopes and publishers;
//! - `fdb::FdbKv` (feature `fdb`): the core's [`sundial::kv::Kv`] on FoundationDB, so
//!   several nodes can share one cluster.
//!
//! It re-exports the core, so one dependency suffices.

pub use sundial;

#[cfg(feature = "node")]
pub mod admin;
pub mod clock;
#[cfg(feature = "node")]
pub mod config;
pub mod events;
pub mod execute;
#[cfg(feature = "fdb")]
pub mod fdb;
mod fence;
mod housekeeper;
pub mod job;
#[cfg(feature = "node")]
pub mod kinds;
pub mod lease;
pub mod node;
mod poller;
pub mod registry;
mod run;
pub mod scheduler;
#[cfg(feature = "node")]
pub mod spec;
pub mod stats;
