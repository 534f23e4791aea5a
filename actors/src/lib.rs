//! # sundial-actors — the node runtime
//!
//! This crate will hold the ractor actors of a sundial node (supervisor, poller, lease,
//! housekeeper, one actor per run), the `JobScheduler` handle and the `sundial` binary.
//! Today it holds the FoundationDB adapter (`fdb::FdbKv`, behind feature `fdb`), which
//! implements the core's [`sundial::kv::Kv`] so several nodes can share one FoundationDB
//! cluster. It re-exports the core, so one dependency suffices.

pub use sundial;

#[cfg(feature = "fdb")]
pub mod fdb;
