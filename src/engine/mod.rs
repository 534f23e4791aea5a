//! The engine's decisions, as pure state machines and functions the node's actors drive:
//! a node's local triggers and retries ([`local`]) and the poller's cadence ([`poll`]).

pub mod local;
pub mod poll;
