//! `shell`: runs a program. Data: `program` (required), `args`, `env`, `dir`,
//! `clear_env` (start from an empty environment), `kill_grace` (how long after SIGTERM a
//! canceled program gets before SIGKILL; default 5 s).
//!
//! The program runs in its own process group, so cancellation and timeouts reach
//! everything it started. Exit code 0 succeeds; any other exit fails the run with code
//! `EXIT_<n>` (or `SIGNAL_<n>`) and the tail of its stderr. It also gets `SUNDIAL_RUN_ID`,
//! `SUNDIAL_JOB`, `SUNDIAL_TRIGGER`, `SUNDIAL_SCHEDULED_AT` and `SUNDIAL_ATTEMPT`.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::{ExitStatus, Stdio};
use std::time::Duration;

use serde::Deserialize;
use tokio::io::{AsyncRead, AsyncReadExt};
use tokio::process::{Child, Command};
use tokio::task::JoinHandle;

use crate::job::{Job, JobFailure, JobResult, RunContext};
use crate::spec::DurationText;

/// The type key.
pub const KIND: &str = "shell";
/// How much of stderr a failure carries.
const STDERR_TAIL: usize = 2048;
/// How long output pipes may stay open after the program exited (a background child
/// holding them), before we stop reading.
const PIPE_GRACE: Duration = Duration::from_secs(1);

/// The `shell` kind's parameters.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ShellParams {
    /// The program: a path, or a name looked up on `PATH`.
    pub program: String,
    /// Its arguments.
    #[serde(default)]
    pub args: Vec<String>,
    /// Extra environment variables.
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    /// The working directory (default: the node's).
    #[serde(default)]
    pub dir: Option<PathBuf>,
    /// Start from an empty environment instead of the node's.
    #[serde(default)]
    pub clear_env: bool,
    /// SIGTERM to SIGKILL on cancellation.
    #[serde(default)]
    pub kill_grace: Option<DurationText>,
}

/// The `shell` job.
#[derive(Debug)]
pub struct ShellJob;

impl Job for ShellJob {
    async fn run(&mut self, ctx: &RunContext) -> JobResult {
        let p: ShellParams = super::run_params(&ctx.run.data)?;
        let mut command = Command::new(&p.program);
        command.args(&p.args).stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped()).kill_on_drop(true);
        if p.clear_env {
            command.env_clear();
        }
        command
            .envs(&p.env)
            .env("SUNDIAL_RUN_ID", ctx.run.id.to_string())
            .env("SUNDIAL_JOB", ctx.run.job.as_str())
            .env("SUNDIAL_TRIGGER", ctx.run.trigger.as_ref().map(|t| t.as_str()).unwrap_or(""))
            .env("SUNDIAL_SCHEDULED_AT", ctx.run.scheduled_at.to_rfc3339())
            .env("SUNDIAL_ATTEMPT", ctx.run.attempt.to_string());
        if let Some(dir) = &p.dir {
            command.current_dir(dir);
        }
        #[cfg(unix)]
        command.process_group(0);
        let mut child = command
            .spawn()
            .map_err(|e| JobFailure::with_code("SPAWN_FAILED", format!("cannot start '{}': {e}", p.program)))?;
        let stdout = child.stdout.take().map(|out| tokio::spawn(read_all(out)));
        let stderr = child.stderr.take().map(|err| tokio::spawn(read_all(err)));
        let status = tokio::select! {
            biased;
            status = child.wait() => status,
            () = ctx.cancel.cancelled() => {
                let grace = p.kill_grace.map_or(Duration::from_secs(5), |g| g.0);
                terminate(&mut child, grace).await;
                // The executor records the cancel or timeout; this result is not used.
                return Err(JobFailure::with_code("KILLED", format!("'{}' was stopped", p.program)));
            }
        };
        let status =
            status.map_err(|e| JobFailure::with_code("WAIT_FAILED", format!("waiting for '{}': {e}", p.program)))?;
        let stdout = collect(stdout).await;
        let stderr = collect(stderr).await;
        if !stdout.is_empty() {
            tracing::debug!(job = ctx.run.job.as_str(), run = %ctx.run.id, stdout = %super::tail(&stdout, STDERR_TAIL), "shell job output");
        }
        if status.success() {
            return Ok(());
        }
        let stderr = super::tail(&stderr, STDERR_TAIL);
        let (code, what) = describe(status);
        let message = if stderr.is_empty() {
            format!("'{}' {what}", p.program)
        } else {
            format!("'{}' {what}: {stderr}", p.program)
        };
        Err(JobFailure::with_code(code, message))
    }
}

fn describe(status: ExitStatus) -> (String, String) {
    if let Some(code) = status.code() {
        return (format!("EXIT_{code}"), format!("exited with code {code}"));
    }
    #[cfg(unix)]
    {
        use std::os::unix::process::ExitStatusExt;
        if let Some(signal) = status.signal() {
            return (format!("SIGNAL_{signal}"), format!("was killed by signal {signal}"));
        }
    }
    ("EXIT_UNKNOWN".into(), format!("ended with {status}"))
}

async fn read_all(mut pipe: impl AsyncRead + Unpin) -> Vec<u8> {
    let mut bytes = Vec::new();
    let _ = pipe.read_to_end(&mut bytes).await;
    bytes
}

/// A pipe's bytes, waiting at most [`PIPE_GRACE`] for a background child to close it.
async fn collect(reader: Option<JoinHandle<Vec<u8>>>) -> Vec<u8> {
    let Some(mut reader) = reader else { return Vec::new() };
    match tokio::time::timeout(PIPE_GRACE, &mut reader).await {
        Ok(Ok(bytes)) => bytes,
        _ => {
            reader.abort();
            Vec::new()
        }
    }
}

/// SIGTERM to the process group, SIGKILL after `grace`.
async fn terminate(child: &mut Child, grace: Duration) {
    #[cfg(unix)]
    if let Some(pid) = child.id().and_then(|id| i32::try_from(id).ok()) {
        use nix::sys::signal::{killpg, Signal};
        use nix::unistd::Pid;
        let group = Pid::from_raw(pid);
        let _ = killpg(group, Signal::SIGTERM);
        if tokio::time::timeout(grace, child.wait()).await.is_err() {
            let _ = killpg(group, Signal::SIGKILL);
        }
        // Children that outlived the leader, or ignored SIGTERM.
        let _ = killpg(group, Signal::SIGKILL);
        let _ = child.wait().await;
        return;
    }
    let _ = child.start_kill();
    let _ = tokio::time::timeout(grace, child.wait()).await;
}
