//! Recording runs' ends, in batches. Run actors hand their completion to the node's
//! completer and wait for the stored final state; the completer takes every completion
//! waiting at that moment (up to [`BATCH_MAX`]) and records them in one store transaction.
//! Under load — a thousand runs due at the same second — that is a handful of
//! transactions instead of a thousand, and it lets the runs due with them start first.
//!
//! Durability is per completion, as before: while the store is unreachable the batch is
//! held and retried with backoff; a completion the store refuses on its own (an unknown
//! run) is logged and does not hold back the others.

use std::sync::Arc;
use std::time::Duration;

use sundial::job::RunState;
use sundial::kv::Kv;
use sundial::store::{Completion, RunOutcome, StoreError};
use tokio::sync::{mpsc, oneshot};

use crate::context::NodeShared;
use crate::execute::AbortOnDrop;
use crate::messages::{CompletionRequest, Recorded};
use crate::stats::{EngineWork, StoreOp};

/// Completions recorded in one transaction at most (well inside the store's limits).
pub(crate) const BATCH_MAX: usize = 256;
/// The longest wait between attempts while the store is unreachable.
const RETRY_MAX: Duration = Duration::from_secs(5);

/// Records a run's end through the node's completer (batched with others ending
/// meanwhile); returns what was recorded (the run's stored final state, and the earliest
/// fire the end made due). Without a completer (its supervisor is gone) the run records
/// itself.
pub(crate) async fn complete<K: Kv>(shared: &NodeShared<K>, completion: Completion) -> Recorded {
    let (reply, stored) = oneshot::channel();
    let request = CompletionRequest { completion: completion.clone(), reply };
    if shared.completions.send(request).is_ok() {
        if let Ok(recorded) = stored.await {
            return recorded;
        }
    }
    // Recording is idempotent: a completion the completer did record is found as such.
    // Boxed: this rare path's store future is kilobytes, and inline it would make
    // every run actor's future as large, copied at each run's start.
    Box::pin(complete_durably(shared, std::slice::from_ref(&completion))).await[0]
}

/// Starts the completer; it stops when the returned handle is dropped (with the
/// supervisor's state). Completions sent after that are recorded by their run actor.
pub(crate) fn spawn_completer<K: Kv>(
    shared: Arc<NodeShared<K>>,
    mut inbox: mpsc::UnboundedReceiver<CompletionRequest>,
) -> AbortOnDrop<()> {
    AbortOnDrop(tokio::spawn(async move {
        while let Some(first) = inbox.recv().await {
            // Runs due at the same instant as the one that just ended start before this
            // batch's transaction takes the thread.
            tokio::task::yield_now().await;
            shared.starts.settled().await;
            let mut batch = vec![first];
            while batch.len() < BATCH_MAX {
                match inbox.try_recv() {
                    Ok(request) => batch.push(request),
                    Err(_) => break,
                }
            }
            let (completions, replies): (Vec<Completion>, Vec<_>) =
                batch.into_iter().map(|r| (r.completion, r.reply)).unzip();
            let began = shared.clock.monotonic();
            let recorded = complete_durably(&shared, &completions).await;
            shared.stats.spent(EngineWork::Complete, began, shared.clock.monotonic());
            for (reply, recorded) in replies.into_iter().zip(recorded) {
                let _ = reply.send(recorded);
            }
        }
    }))
}

/// Records `completions`, retrying with backoff while the store is unreachable. Returns
/// what was recorded for each.
pub(crate) async fn complete_durably<K: Kv>(shared: &NodeShared<K>, completions: &[Completion]) -> Vec<Recorded> {
    let mut states: Vec<Option<Recorded>> = vec![None; completions.len()];
    let mut wait = Duration::from_millis(50);
    loop {
        let pending: Vec<usize> = (0..completions.len()).filter(|&i| states[i].is_none()).collect();
        if pending.is_empty() {
            return states
                .into_iter()
                .map(|s| s.unwrap_or(Recorded { state: RunState::Failed, next_due: None }))
                .collect();
        }
        let results = if pending.len() == completions.len() {
            shared.store.complete_runs(completions).await
        } else {
            // A retry of what the store could not record: only those.
            let retry: Vec<Completion> = pending.iter().map(|&i| completions[i].clone()).collect();
            shared.store.complete_runs(&retry).await
        };
        let mut unavailable = false;
        for (&i, result) in pending.iter().zip(results) {
            let completion = &completions[i];
            match result {
                Ok(result) => states[i] = Some(Recorded { state: result.state, next_due: result.next_due }),
                Err(StoreError::Kv(error)) => {
                    if !unavailable {
                        shared.stats.store_error(StoreOp::Complete);
                        tracing::warn!(runs = pending.len(), %error, "store unavailable; holding the completions");
                    }
                    unavailable = true;
                }
                Err(error) => {
                    shared.stats.store_error(StoreOp::Complete);
                    tracing::error!(run_id = %completion.run_id, %error, "completion not recorded");
                    let state = match completion.outcome {
                        RunOutcome::Succeeded => RunState::Succeeded,
                        RunOutcome::Failed { .. } => RunState::Failed,
                        RunOutcome::Canceled { .. } => RunState::Canceled,
                    };
                    states[i] = Some(Recorded { state, next_due: None });
                }
            }
        }
        if unavailable {
            tokio::time::sleep(wait).await;
            wait = (wait * 2).min(RETRY_MAX);
        }
    }
}
