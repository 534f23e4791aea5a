//! Goal: the embedding example (actors/examples/embedded.rs) works: a host supervisor
//! spawns the node linked under it and runs a job through the handle.
//!
//! Method: includes the example's code and runs it on a real (not paused) runtime.

#[path = "../examples/embedded.rs"]
mod example;

#[tokio::test]
async fn the_embedding_example_runs_a_job_under_a_host_supervisor() {
    let outcome = example::run_example().await.expect("the example runs");
    assert_eq!(outcome, sundial::store::RunOutcome::Succeeded);
}
