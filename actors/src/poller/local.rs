//! Local jobs (those that run on every node): their listing refreshed when the poller
//! says so, and their due fires and retries recorded and started here.

use ractor::ActorRef;
use sundial::kv::Kv;
use sundial::store::AcquiredRun;

use crate::stats::StoreOp;

use super::runs::start_run;
use super::PollerState;
use crate::messages::PollerMsg;

/// Refreshes local jobs when due, and starts this node's due local fires and retries.
pub(super) async fn run_local<K: Kv>(
    myself: &ActorRef<PollerMsg>,
    state: &mut PollerState<K>,
    now: chrono::DateTime<chrono::Utc>,
) {
    let shared = state.shared.clone();
    if let Some(stamp) = state.poller.local_refresh() {
        match shared.store.local_jobs_since(stamp).await {
            Ok(listing) => {
                let stamp = listing.as_ref().map(|listing| listing.stamp);
                if let Some(listing) = listing {
                    let jobs: Vec<_> = listing
                        .jobs
                        .into_iter()
                        .filter(|j| shared.registry.has_type(j.definition.job_type.as_str()))
                        .collect();
                    for (job, trigger, calendar) in state.local.refresh(jobs, now, shared.registry.calendars()) {
                        tracing::warn!(
                            %job, %trigger, %calendar,
                            "local trigger names a calendar not registered on this node: it does not fire here"
                        );
                    }
                }
                state.poller.local_refreshed(stamp);
            }
            Err(error) => {
                shared.stats.store_error(StoreOp::LocalJobs);
                tracing::warn!(%error, "reading local jobs failed");
            }
        }
    }
    let run_ids = &mut state.run_ids;
    let fires = state.local.poll_due(now, shared.options.misfire_threshold, shared.registry.calendars(), || {
        run_ids.next_id(shared.clock.now())
    });
    for fire in fires {
        match shared.store.begin_local_run(&fire.run, &shared.node_id, now).await {
            Ok(true) => {}
            Ok(false) => {
                // Deleted or made cluster-unique elsewhere since the last refresh (a
                // cluster run of it may start any moment), or this run, recorded by an
                // attempt reported failed, was since reclaimed as lost: not run. Re-read
                // the local jobs.
                tracing::info!(run_id = %fire.run.id, job = %fire.run.job, "the job is no longer local here, or the run ended; not running it");
                state.local.not_started(fire, now, None, shared.registry.calendars());
                state.poller.local_refused();
                continue;
            }
            Err(error) => {
                // Not recorded, so not run, as a cluster fire is not taken while the store
                // is out of reach: the run would be missing from history, and a switch of
                // a non-concurrent job to cluster-unique would not see it running. The
                // fire is skipped; a retry goes again a poll interval later (same run: a
                // record an ambiguous commit made is found then). A skipped fire that an
                // ambiguous commit recorded all the same is marked lost by the next
                // reclaim, as no actor runs it.
                shared.stats.store_error(StoreOp::LocalJobs);
                tracing::warn!(run_id = %fire.run.id, %error, "could not record a local run; not running it");
                let again = Some(shared.options.poll_interval);
                state.local.not_started(fire, now, again, shared.registry.calendars());
                state.poller.run_may_be_orphaned();
                continue;
            }
        }
        let acquired = AcquiredRun {
            run: fire.run,
            job_type: fire.job_type,
            timeout: fire.timeout,
            exclusive: false,
            holds_trigger: None,
        };
        start_run(myself, state, acquired, None, true).await;
    }
}
