//! The engine's decisions, as pure state machines and functions the node's actors drive:
//! a node's local triggers and retries ([`local`]), the poller's cadence ([`poll`]) and its
//! state machine ([`poller`]), and the leader's housekeeping ([`housekeeping`]).

pub mod housekeeping;
pub mod local;
pub mod poll;
pub mod poller;
