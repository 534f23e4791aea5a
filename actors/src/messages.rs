//! The messages a node's actors exchange, apart from the actors themselves, so that no
//! actor's module needs another's: the supervisor's, the poller's, and the completer's
//! requests and answers.

use chrono::{DateTime, Utc};
use ractor::RpcReplyPort;
use sundial::error::SchedulingError;
use sundial::job::{JobRun, JsonObject, RunState};
use sundial::name::JobName;
use sundial::store::{Completion, RunOutcome};
use tokio::sync::oneshot;
use uuid::Uuid;

use crate::execute::CancelReason;

/// Messages to the supervisor.
#[derive(Debug)]
pub enum NodeMsg {
    /// Forward to the current poller.
    #[doc(hidden)]
    Poller(PollerMsgBox),
    /// Release the leader lease now (stop sequence); replies when done.
    #[doc(hidden)]
    ReleaseLease(RpcReplyPort<()>),
    /// The host is ready: a starting node begins serving, and tries for the lease now
    /// rather than at the next tick.
    #[doc(hidden)]
    Serving,
    /// Stop began: the node drains (unless it stopped already); replies when it is so.
    #[doc(hidden)]
    Draining(RpcReplyPort<()>),
    /// The stop sequence is done: the node is stopped; replies when it is so.
    #[doc(hidden)]
    Stopped(RpcReplyPort<()>),
}

/// An opaque poller message (the poller's messages are internal).
#[derive(Debug)]
pub struct PollerMsgBox(pub(crate) PollerMsg);

/// Messages to the poller.
#[derive(Debug)]
pub(crate) enum PollerMsg {
    /// Run a cycle, if this tick is the current one (older timer ticks are ignored).
    Tick(u64),
    /// Something changed locally: cycle now.
    Wake,
    /// A fire is due at this instant (a run here ended and made it due): cycle a lookahead
    /// before it, if that is sooner than planned.
    DueAt(DateTime<Utc>),
    /// A local job's run here ended: the run, and whether it failed (its retries are in
    /// process). Every run's slot is freed when its actor terminates.
    LocalRunFinished(JobRun, bool),
    /// Run `job` now on this node (SPEC §9 `trigger`); replies with a receiver of the first
    /// attempt's outcome.
    Trigger(JobName, JsonObject, RpcReplyPort<Result<oneshot::Receiver<RunOutcome>, SchedulingError>>),
    /// Cancel these runs if they run here; replies with the ones that did.
    CancelLocal(Vec<Uuid>, CancelReason, RpcReplyPort<Vec<Uuid>>),
    /// How many runs are running here.
    RunningCount(RpcReplyPort<usize>),
    /// Cancel every run here; replies with how many there were.
    CancelAll(CancelReason, RpcReplyPort<usize>),
    /// The watch on this node's wake key fired (`true`: new due work in its home shards,
    /// cycle now) or failed (`false`: watch again after the next cycle).
    Woken(bool),
}

/// A completion and where what was recorded goes.
pub(crate) struct CompletionRequest {
    pub(crate) completion: Completion,
    pub(crate) reply: oneshot::Sender<Recorded>,
}

/// What the store recorded for a completion.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Recorded {
    /// The run's stored final state (it differs from the outcome when the run had already
    /// been declared lost).
    pub(crate) state: RunState,
    /// The earliest fire the completion made due (see `CompletionResult::next_due`).
    pub(crate) next_due: Option<DateTime<Utc>>,
}
