//! The engine's decisions, as pure state machines and functions the node's actors drive:
//! a node's local triggers and retries ([`local`]), the poller's cadence ([`poll`]) and its
//! state machine ([`poller`]), the leader's housekeeping ([`housekeeping`]), and a node's
//! self-fencing and lease renewal cadence ([`liveness`]).

pub mod housekeeping;
pub mod liveness;
pub mod local;
pub mod poll;
pub mod poller;
