//! `sundial`: runs one node.
//!
//! ```text
//! sundial [--config sundial.toml] [--demo]
//! ```
//!
//! The node uses the embedded in-memory store (history capped at 10,000 runs). Options come
//! from the config file's `[scheduler]` table (SPEC §13 keys) and `SUNDIAL_*` environment
//! variables. `--demo` registers a demo job that logs a line every five seconds. Ctrl-C
//! stops the node gracefully: no new runs, running ones get 30 seconds.

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use clap::Parser;
use sundial::entropy::Entropy;
use sundial::kv::memory::{MemoryKv, MemoryKvOptions};
use sundial::options::SchedulerOptions;
use sundial::store::{KvJobStore, StoreOptions};
use sundial::time::{Clock, SystemClock};
use sundial_actors::clock::{PreciseSleeper, TokioSleeper};
use sundial_actors::job::{Job, JobResult, RunContext};
use sundial_actors::node::{Node, NodeConfig};
use sundial_actors::registry::JobRegistry;

/// How long running runs get to finish when the node is stopped.
const STOP_DEADLINE: Duration = Duration::from_secs(30);

#[derive(Debug, Parser)]
#[command(name = "sundial", version, about = "Runs a sundial scheduler node (embedded in-memory store).")]
struct Args {
    /// A TOML file whose `[scheduler]` table sets the node's options.
    #[arg(long)]
    config: Option<PathBuf>,
    /// Register a demo job that logs a line every five seconds.
    #[arg(long)]
    demo: bool,
}

/// The demo job: logs its run.
struct Demo;

impl Job for Demo {
    async fn run(&mut self, ctx: &RunContext) -> JobResult {
        tracing::info!(run = %ctx.run.id, scheduled = %ctx.run.scheduled_at, "demo job ran");
        Ok(())
    }
}

fn load_options(args: &Args) -> Result<SchedulerOptions, String> {
    let mut options = SchedulerOptions::default();
    if let Some(path) = &args.config {
        let text = std::fs::read_to_string(path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
        let document: toml::Table =
            toml::from_str(&text).map_err(|e| format!("{}: not valid TOML: {}", path.display(), e.message()))?;
        if let Some(value) = document.get("scheduler") {
            let table = value.as_table().ok_or_else(|| format!("{}: [scheduler] must be a table", path.display()))?;
            options.apply_toml(table).map_err(|e| format!("{}: {e}", path.display()))?;
        }
    }
    options.apply_env(std::env::vars()).map_err(|e| e.to_string())?;
    Ok(options)
}

#[tokio::main]
async fn main() -> ExitCode {
    let args = Args::parse();
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()))
        .init();
    let options = match load_options(&args) {
        Ok(options) => options,
        Err(error) => {
            eprintln!("sundial: {error}");
            return ExitCode::from(2);
        }
    };
    let mut registry = JobRegistry::builder();
    if args.demo {
        registry = registry.add_job(
            "demo",
            "cron */5 * * * * *".parse().unwrap_or_else(|_| unreachable!("valid literal")),
            || Demo,
        );
    }
    let registry = match registry.build() {
        Ok(registry) => registry,
        Err(error) => {
            eprintln!("sundial: {error}");
            return ExitCode::from(2);
        }
    };
    // The production clock and OS-seeded entropy: the one place a node reads them.
    let clock: Arc<dyn Clock> = Arc::new(SystemClock::new());
    let mut entropy = Entropy::from_os();
    let host = std::env::var("HOSTNAME").unwrap_or_else(|_| "localhost".into());
    let node_id = options.node_id_or_default(&host, std::process::id(), &mut entropy);
    let kv = MemoryKv::with_options(clock.clone(), Arc::new(TokioSleeper), MemoryKvOptions::default());
    let store_options = StoreOptions { max_runs: Some(10_000), ..StoreOptions::default() };
    let store = KvJobStore::new(kv, registry.calendars().clone(), entropy.fork(), store_options);
    let mut config = NodeConfig::new(store, registry, options, node_id.clone(), clock, entropy.fork());
    config.start_timer = Arc::new(PreciseSleeper::new());
    let scheduler = match Node::start(config, None).await {
        Ok(scheduler) => scheduler,
        Err(error) => {
            eprintln!("sundial: could not start the node: {error}");
            return ExitCode::FAILURE;
        }
    };
    scheduler.serve();
    tracing::info!(node = %node_id, demo = args.demo, "sundial node serving; Ctrl-C or SIGTERM stops it");
    shutdown_signal().await;
    tracing::info!("stopping: no new runs; running ones get {STOP_DEADLINE:?}");
    let report = scheduler.stop(STOP_DEADLINE).await;
    tracing::info!(canceled = report.canceled, abandoned = report.abandoned, "stopped");
    ExitCode::SUCCESS
}

/// Waits for Ctrl-C, or SIGTERM (what service managers send) on Unix.
async fn shutdown_signal() {
    #[cfg(unix)]
    {
        let mut term = match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(term) => term,
            Err(error) => {
                tracing::error!(%error, "cannot wait for SIGTERM");
                let _ = tokio::signal::ctrl_c().await;
                return;
            }
        };
        tokio::select! {
            _ = tokio::signal::ctrl_c() => {}
            _ = term.recv() => {}
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
    }
}
