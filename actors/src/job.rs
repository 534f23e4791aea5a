//! Jobs: the code a run executes (SPEC §2).
//!
//! A job type implements [`Job`]; a fresh instance is made for every run by the factory
//! registered for its type key, so no state leaks between runs (the Rust equivalent of a
//! per-run DI scope). The run gets a [`RunContext`]: the [`JobRun`] and a cancellation
//! token that fires on cancel requests, timeouts and node stop.

use std::fmt;
use std::future::Future;
use std::sync::Arc;

use futures_util::future::BoxFuture;
use sundial::job::JobRun;
use tokio_util::sync::CancellationToken;

use crate::secrets::Secrets;

/// What a job reports when it fails. The run is recorded `Failed` with this message (and
/// code, when given) and retries per its job's policy.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobFailure {
    /// An application error code for history and events (the engine's own failures use
    /// the stable `SCHEDULING_*` codes).
    pub code: Option<String>,
    /// What went wrong.
    pub message: String,
}

impl JobFailure {
    /// A failure with a message.
    pub fn new(message: impl Into<String>) -> Self {
        Self { code: None, message: message.into() }
    }

    /// A failure with an application error code and a message.
    pub fn with_code(code: impl Into<String>, message: impl Into<String>) -> Self {
        Self { code: Some(code.into()), message: message.into() }
    }
}

impl fmt::Display for JobFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.code {
            Some(code) => write!(f, "{code}: {}", self.message),
            None => f.write_str(&self.message),
        }
    }
}

impl std::error::Error for JobFailure {}

impl From<String> for JobFailure {
    fn from(message: String) -> Self {
        Self::new(message)
    }
}

impl From<&str> for JobFailure {
    fn from(message: &str) -> Self {
        Self::new(message)
    }
}

/// What a job's `run` returns.
pub type JobResult = Result<(), JobFailure>;

/// Everything a run can see.
#[derive(Debug, Clone)]
pub struct RunContext {
    /// The run: id, job, trigger, scheduled time, cause, attempt, data.
    pub run: JobRun,
    /// The node running it (shared text: every run of the node holds the same).
    pub node: Arc<str>,
    /// Fires when the run is canceled, times out, or the node stops. A job should return
    /// soon after; one that ignores it keeps running (and keeps its slot) until it returns.
    pub cancel: CancellationToken,
    /// The values of the secrets in `run.data` (see [`crate::secrets`]), resolved as the
    /// job starts: [`Secrets::scrub`] keeps them out of what a job logs or reports.
    pub secrets: Secrets,
}

/// The code of a job type.
pub trait Job: Send + 'static {
    /// Runs once.
    ///
    /// # Errors
    /// A [`JobFailure`] fails the run. A panic is caught and recorded as
    /// `SCHEDULING_UNEXPECTED_001`; the node survives it.
    fn run(&mut self, ctx: &RunContext) -> impl Future<Output = JobResult> + Send;
}

/// An object-safe [`Job`], so factories can return boxed jobs of any type.
pub trait DynJob: Send + 'static {
    /// [`Job::run`], boxed.
    fn run_boxed<'a>(&'a mut self, ctx: &'a RunContext) -> BoxFuture<'a, JobResult>;
}

impl<T: Job> DynJob for T {
    fn run_boxed<'a>(&'a mut self, ctx: &'a RunContext) -> BoxFuture<'a, JobResult> {
        Box::pin(self.run(ctx))
    }
}

/// Makes a fresh job instance for each run.
pub type JobFactory = Arc<dyn Fn() -> Box<dyn DynJob> + Send + Sync>;

/// A job from an async function: `FnJob::new(|ctx| async move { … })`.
pub struct FnJob<F> {
    f: F,
}

impl<F> FnJob<F> {
    /// Wraps `f`, called once per run with the run's context.
    pub fn new(f: F) -> Self {
        Self { f }
    }
}

impl<F, Fut> Job for FnJob<F>
where
    F: Fn(RunContext) -> Fut + Send + 'static,
    Fut: Future<Output = JobResult> + Send + 'static,
{
    fn run(&mut self, ctx: &RunContext) -> impl Future<Output = JobResult> + Send {
        (self.f)(ctx.clone())
    }
}

impl<F> fmt::Debug for FnJob<F> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FnJob").finish_non_exhaustive()
    }
}
