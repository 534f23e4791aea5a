//! `log`: writes one log line per run. Data: `message` (default `"job ran"`), `level`
//! (`debug`, `info` default, `warn`, `error`); any other keys are logged as `data`.

use serde::Deserialize;
use sundial::job::JsonObject;

use crate::job::{Job, JobResult, RunContext};

/// The type key.
pub const KIND: &str = "log";

/// The `log` kind's parameters.
#[derive(Debug, Clone, Deserialize)]
pub struct LogParams {
    /// The line.
    #[serde(default)]
    pub message: Option<String>,
    /// Its level.
    #[serde(default)]
    pub level: LogLevel,
    /// Everything else, logged as JSON.
    #[serde(flatten)]
    pub rest: JsonObject,
}

/// A log level.
#[derive(Debug, Clone, Copy, Default, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LogLevel {
    /// Debug.
    Debug,
    /// Info.
    #[default]
    Info,
    /// Warn.
    Warn,
    /// Error.
    Error,
}

/// The `log` job.
#[derive(Debug)]
pub struct LogJob;

impl Job for LogJob {
    async fn run(&mut self, ctx: &RunContext) -> JobResult {
        let p: LogParams = super::run_params(&ctx.run.data)?;
        let message = ctx.secrets.scrub(p.message.as_deref().unwrap_or("job ran"));
        let data = ctx.secrets.scrub(&serde_json::Value::Object(p.rest).to_string());
        let (job, run, scheduled) = (ctx.run.job.as_str(), ctx.run.id, ctx.run.scheduled_at);
        match p.level {
            LogLevel::Debug => tracing::debug!(job, %run, %scheduled, %data, "{message}"),
            LogLevel::Info => tracing::info!(job, %run, %scheduled, %data, "{message}"),
            LogLevel::Warn => tracing::warn!(job, %run, %scheduled, %data, "{message}"),
            LogLevel::Error => tracing::error!(job, %run, %scheduled, %data, "{message}"),
        }
        Ok(())
    }
}
