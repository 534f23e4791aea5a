//! Executing one run (SPEC §2, §8): the job, its cancellation and timeout, panics,
//! middleware, and the tracing span, as one future for the run's task.
//!
//! The outcome follows SPEC §8's precedence: the first reason the run's token was canceled
//! decides — a timeout makes the run `Failed` with `SCHEDULING_TIMEOUT_001`, a cancel
//! request or node stop makes it `Canceled` — whatever the job returns afterwards. A job that
//! ignores its token keeps running until it returns; [`execute`] waits for it (the run
//! keeps its `max_concurrent_runs` slot meanwhile). Otherwise a panic is
//! `SCHEDULING_UNEXPECTED_001`, and the job's own result decides.

use std::any::Any;
use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use futures_util::future::BoxFuture;
use futures_util::FutureExt;
use sundial::error::ErrorCode;
use sundial::store::RunOutcome;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use crate::job::{DynJob, JobFailure, JobResult, RunContext};
use crate::secrets::{self, Secrets};
use crate::slots::RunSlots;

/// Why a run's token was canceled.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CancelReason {
    /// Someone asked (`cancel_runs`).
    Requested,
    /// The job's timeout passed.
    Timeout,
    /// The node is stopping and its deadline passed.
    NodeStopping,
    /// The node was declared lost, or could not heartbeat for most of `node_timeout` and
    /// fenced itself: its runs are, or may soon be, run again elsewhere.
    Fenced,
}

/// A run's cancellation: its token, and the first reason it was canceled for.
#[derive(Debug, Clone, Default)]
pub struct RunCancel {
    token: CancellationToken,
    reason: Arc<OnceLock<CancelReason>>,
}

impl RunCancel {
    /// Not canceled.
    pub fn new() -> Self {
        Self::default()
    }

    /// Cancels the token; the first call's reason is the one that counts.
    pub fn cancel(&self, reason: CancelReason) {
        let _ = self.reason.set(reason);
        self.token.cancel();
    }

    /// The token the job watches.
    pub fn token(&self) -> CancellationToken {
        self.token.clone()
    }

    /// The first reason, once canceled.
    pub fn reason(&self) -> Option<CancelReason> {
        self.reason.get().copied()
    }
}

/// Wraps every run (tenancy, auth, audit, metrics): gets the context and the rest of the
/// chain, and returns its result (or its own).
pub trait RunMiddleware: Send + Sync + 'static {
    /// Runs `next` (the job, or the next middleware) around whatever this layer does.
    fn around<'a>(&'a self, ctx: &'a RunContext, next: BoxFuture<'a, JobResult>) -> BoxFuture<'a, JobResult>;
}

/// Runs `job` with `ctx` to its end and decides the outcome. `ctx.cancel` must be
/// `cancel`'s token.
pub async fn execute(
    job: Box<dyn DynJob>,
    ctx: RunContext,
    cancel: RunCancel,
    timeout: Option<Duration>,
    middleware: Vec<Arc<dyn RunMiddleware>>,
) -> RunOutcome {
    let gates = RunGates { start: std::future::ready(()), slots: None, end: std::future::ready(()), on_start: None };
    prepare(job, ctx, cancel, middleware, gates, timeout).await
}

/// Called as a run's job starts; the future it returns runs alongside the job.
pub type StartHook = Box<dyn FnOnce() -> BoxFuture<'static, ()> + Send>;

/// What a prepared run waits for around its job. The gates are any futures (boxed ones by
/// default): a node passes its own types, so a run allocates nothing for its gates.
pub struct RunGates<Start = BoxFuture<'static, ()>, End = BoxFuture<'static, ()>> {
    /// Ends at the run's start instant, or at once when the run is canceled before it.
    pub start: Start,
    /// The node's run slots: after `start`, the job waits for a free one and holds it
    /// until it returns (a run canceled while waiting never starts its job).
    pub slots: Option<Arc<RunSlots>>,
    /// Awaited after the job returns, before the run's end is reported: a node lets the
    /// other runs due at the same instant start first.
    pub end: End,
    /// Called as the job starts (never for a run canceled before its start); the future
    /// it returns runs alongside the job and ends before the run does (the run's start
    /// event, published while the job already runs).
    pub on_start: Option<StartHook>,
}

/// The whole run as one future, for a task of its own: waits for `gates.start` (the start
/// instant) and a run slot (`gates.slots`), runs the job in its tracing span and middleware, cancels it when `timeout`
/// (counted from its start) passes, catches its panic, waits for `gates.end`, and decides
/// the outcome. A run canceled before its start should have its start gate end at once:
/// the job then never starts (the run ends `Canceled`, or `Failed` for a timeout).
/// `ctx.cancel` must be `cancel`'s token.
///
/// Everything that can be done before the scheduled instant is, and the run needs no other
/// task: at an instant where thousands of runs start, each costs one task poll.
pub fn prepare<Start, End>(
    mut job: Box<dyn DynJob>,
    ctx: RunContext,
    cancel: RunCancel,
    middleware: Vec<Arc<dyn RunMiddleware>>,
    gates: RunGates<Start, End>,
    timeout: Option<Duration>,
) -> impl Future<Output = RunOutcome> + Send + 'static
where
    Start: Future<Output = ()> + Send + 'static,
    End: Future<Output = ()> + Send + 'static,
{
    let run = &ctx.run;
    let span = tracing::info_span!(
        "run",
        run_id = %run.id,
        job = %run.job,
        trigger = run.trigger.as_ref().map_or("", |t| t.as_str()),
        cause = ?run.cause,
        attempt = run.attempt,
    );
    async move {
        let mut ctx = ctx;
        let RunGates { start, slots, end, on_start } = gates;
        start.await;
        let slot = match slots {
            Some(slots) if !ctx.cancel.is_cancelled() => slots.take(&ctx.cancel).await,
            _ => None,
        };
        let result = if ctx.cancel.is_cancelled() {
            // Canceled before its start (a cancel request, the node stopping, or fenced):
            // the job never runs; the reason decides the outcome.
            Ok(Err(JobFailure::new("canceled before it started")))
        } else if let Err(problem) = resolve_secrets(&mut ctx) {
            Ok(Err(JobFailure::with_code(secrets::UNAVAILABLE, problem)))
        } else {
            let beside = on_start.map(|on_start| on_start());
            let mut next: BoxFuture<'_, JobResult> = job.run_boxed(&ctx);
            for layer in middleware.iter().rev() {
                next = layer.around(&ctx, next);
            }
            let guarded = AssertUnwindSafe(async {
                match timeout {
                    None => next.await,
                    Some(timeout) => {
                        tokio::select! {
                            biased;
                            result = &mut next => result,
                            () = tokio::time::sleep(timeout) => {
                                // A job that ignores its token runs on until it returns.
                                cancel.cancel(CancelReason::Timeout);
                                next.await
                            }
                        }
                    }
                }
            })
            .catch_unwind();
            match beside {
                None => guarded.await,
                Some(beside) => tokio::join!(guarded, beside).0,
            }
        };
        // The job returned: its slot serves the next run before this one's end is recorded.
        drop(slot);
        end.await;
        let outcome = decide(result, cancel.reason(), timeout);
        if ctx.secrets.is_empty() {
            outcome
        } else {
            scrubbed(outcome, &ctx.secrets)
        }
    }
    .instrument(span)
}

/// Replaces the secret references in the run's data with their values, just before its
/// job starts (see [`crate::secrets`]).
fn resolve_secrets(ctx: &mut RunContext) -> Result<(), String> {
    if !ctx.run.data.is_empty() {
        ctx.secrets = secrets::resolve(&mut ctx.run.data, &secrets::NodeEnvironment)?;
    }
    Ok(())
}

/// The outcome with the run's secret values taken out of its message.
fn scrubbed(outcome: RunOutcome, secrets: &Secrets) -> RunOutcome {
    match outcome {
        RunOutcome::Failed { code, message } => RunOutcome::Failed { code, message: secrets.scrub(&message) },
        RunOutcome::Canceled { message } => RunOutcome::Canceled { message: secrets.scrub(&message) },
        RunOutcome::Succeeded => RunOutcome::Succeeded,
    }
}

/// A task that is aborted when its handle is dropped: a run whose actor dies (killed with
/// its node) takes its job with it instead of leaving it running unowned.
pub(crate) struct AbortOnDrop<T>(pub(crate) tokio::task::JoinHandle<T>);

impl<T> Drop for AbortOnDrop<T> {
    fn drop(&mut self) {
        self.0.abort();
    }
}

fn decide(
    joined: Result<JobResult, Box<dyn Any + Send>>,
    reason: Option<CancelReason>,
    timeout: Option<Duration>,
) -> RunOutcome {
    match reason {
        Some(CancelReason::Timeout) => {
            let ms = timeout.map_or(0, |t| t.as_millis());
            return RunOutcome::Failed {
                code: Some(ErrorCode::RunTimedOut.as_str().to_owned()),
                message: format!("run exceeded its timeout of {ms} ms"),
            };
        }
        Some(CancelReason::Requested) => return RunOutcome::Canceled { message: "canceled by request".into() },
        Some(CancelReason::NodeStopping) => {
            return RunOutcome::Canceled { message: "canceled: the node is stopping".into() }
        }
        Some(CancelReason::Fenced) => {
            return RunOutcome::Canceled { message: "canceled: the node lost contact with the store".into() }
        }
        None => {}
    }
    match joined {
        Ok(Ok(())) => RunOutcome::Succeeded,
        Ok(Err(failure)) => RunOutcome::Failed { code: failure.code, message: failure.message },
        Err(payload) => {
            let message = payload
                .downcast_ref::<&str>()
                .map(|s| (*s).to_owned())
                .or_else(|| payload.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "non-string panic payload".to_owned());
            RunOutcome::Failed {
                code: Some(ErrorCode::Unexpected.as_str().to_owned()),
                message: format!("job panicked: {message}"),
            }
        }
    }
}
