//! # sundial-actors — the node runtime
//!
//! The ractor actors of a sundial node and everything around them:
//!
//! - [`node`]: [`node::Node::start`] spawns a node's supervisor (standalone, or linked
//!   under a host's), which owns the poller, the lease actor, the housekeeper and one
//!   actor per run; [`scheduler::JobScheduler`] is the handle for every runtime operation;
//! - [`job`], [`registry`]: the async [`job::Job`] trait and the registration of job types,
//!   code jobs and calendars;
//! - [`execute`]: one run with cancellation, timeout, panic capture, middleware and its
//!   tracing span;
//! - [`secrets`]: secret references in job data, resolved as a run starts, and what is
//!   redacted when data is shown;
//! - [`events`]: CloudEvents envelopes and publishers; [`stats`]: engine counters;
//! - [`clock`]: the tokio clock and sleepers a node runs on;
//! - [`spec`]: job definitions as people write them (with feature `spec-files`, read from
//!   TOML or JSON files);
//! - behind the default feature `node`: [`config`] (the TOML file), [`kinds`] (the
//!   `shell`, `http` and `log` job kinds), [`admin`] (the REST API with metrics),
//!   [`sinks`] (events delivered over HTTP and NATS),
//!   [`kubernetes`] (leader election on a Kubernetes Lease), and the `sundial` binary;
//! - `fdb::FdbKv` (feature `fdb`): the core's [`sundial::kv::Kv`] on FoundationDB, so
//!   several nodes can share one cluster.
//!
//! It re-exports the core, so one dependency suffices.

pub use sundial;

#[cfg(feature = "node")]
pub mod admin;
#[cfg(feature = "allocator")]
pub mod allocator;
pub mod clock;
mod completer;
#[cfg(feature = "node")]
pub mod config;
mod context;
pub mod events;
pub mod execute;
#[cfg(feature = "fdb")]
pub mod fdb;
mod fence;
pub mod gate;
mod housekeeper;
pub mod job;
#[cfg(feature = "node")]
pub mod kinds;
#[cfg(feature = "node")]
pub mod kubernetes;
pub mod lease;
mod lease_actor;
mod messages;
pub mod node;
mod poller;
pub mod registry;
mod run;
#[cfg(feature = "node")]
pub mod runtime;
pub mod scheduler;
pub mod secrets;
#[cfg(feature = "node")]
pub mod sinks;
pub mod slots;
pub mod spec;
mod starts;
pub mod stats;
mod ticker;
