//! Embedding sundial in an existing ractor system: the host's own supervisor spawns the
//! node's supervisor linked under it, registers its job types, and talks to the node
//! through the `JobScheduler` handle.
//!
//! Run: `cargo run -p sundial-actors --example embedded`. `cargo test` runs it too (the
//! test at the end of this file; `test = true` in `actors/Cargo.toml`).

use std::sync::Arc;
use std::time::Duration;

use ractor::{Actor, ActorProcessingErr, ActorRef, SupervisionEvent};
use sundial::entropy::Entropy;
use sundial::job::{JobDefinition, JobTypeKey};
use sundial::kv::memory::{MemoryKv, MemoryKvOptions};
use sundial::name::JobName;
use sundial::options::SchedulerOptions;
use sundial::store::{KvJobStore, RunOutcome, StoreOptions};
use sundial::time::{Clock, SystemClock};
use sundial_actors::clock::TokioSleeper;
use sundial_actors::job::{Job, JobResult, RunContext};
use sundial_actors::node::{Node, NodeConfig};
use sundial_actors::registry::JobRegistry;

/// The host application's job.
struct Greet;

impl Job for Greet {
    async fn run(&mut self, ctx: &RunContext) -> JobResult {
        let who = ctx.run.data.get("who").and_then(|v| v.as_str()).unwrap_or("world");
        println!("hello, {who} (run {} on {})", ctx.run.id, ctx.node);
        Ok(())
    }
}

/// The host's own top-level supervisor: it just logs what happens to its children.
struct HostSupervisor;

impl Actor for HostSupervisor {
    type Msg = ();
    type State = ();
    type Arguments = ();

    async fn pre_start(&self, _myself: ActorRef<()>, _args: ()) -> Result<(), ActorProcessingErr> {
        Ok(())
    }

    async fn handle_supervisor_evt(
        &self,
        _myself: ActorRef<()>,
        event: SupervisionEvent,
        _state: &mut (),
    ) -> Result<(), ActorProcessingErr> {
        if let SupervisionEvent::ActorFailed(cell, error) = event {
            eprintln!("host: child {:?} failed: {error}", cell.get_name());
        }
        Ok(())
    }
}

/// Builds the host, starts the embedded node under it, runs one job by hand, and stops.
/// Returns the run's outcome.
async fn run_example() -> Result<RunOutcome, Box<dyn std::error::Error>> {
    let (host, host_handle) = Actor::spawn(Some("host/supervisor".into()), HostSupervisor, ()).await?;

    // The production clock and OS-seeded entropy: a real node, not a simulation.
    let clock: Arc<dyn Clock> = Arc::new(SystemClock::new());
    let registry = JobRegistry::builder().add_job_type_as("app.greet", || Greet).build()?;
    let kv = MemoryKv::with_options(clock.clone(), Arc::new(TokioSleeper), MemoryKvOptions::default());
    let store = KvJobStore::new(
        kv,
        registry.calendars().clone(),
        Entropy::from_os(),
        StoreOptions { max_runs: Some(10_000), ..StoreOptions::default() },
    );
    let options = SchedulerOptions::default();
    // On `SystemClock`, runs start on a timer precise to microseconds (`start_timer`).
    let config = NodeConfig::new(store, registry, options, "embedded-1", clock, Entropy::from_os());
    let scheduler = Node::start(config, Some(host.get_cell())).await?;
    scheduler.serve();

    let mut greet = JobDefinition::new(JobName::new("greet")?, JobTypeKey::new("app.greet")?);
    greet.data.insert("who".into(), "embedder".into());
    scheduler.schedule_one(greet).await?;
    let outcome = scheduler.trigger_one(JobName::new("greet")?).await?;

    scheduler.stop(Duration::from_secs(5)).await;
    host.stop(None);
    host_handle.await?;
    Ok(outcome)
}

#[cfg_attr(test, allow(dead_code))] // The test harness has a main of its own.
#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let outcome = run_example().await?;
    println!("outcome: {outcome:?}");
    Ok(())
}

#[cfg(test)]
mod tests {
    #[tokio::test]
    async fn the_embedding_example_runs_a_job_under_a_host_supervisor() {
        let outcome = super::run_example().await.expect("the example runs");
        assert_eq!(outcome, sundial::store::RunOutcome::Succeeded);
    }
}
