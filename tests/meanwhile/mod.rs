//! A [`Sleeper`] for tests that interleave two parties: the next time the store makes one
//! of them wait (latency, a retry's backoff), the other party's given steps run instead.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use futures_util::future::BoxFuture;
use parking_lot::Mutex;
use sundial::time::Sleeper;

/// Runs a given future at the next sleep instead of waiting; later sleeps do not wait.
#[derive(Clone, Default)]
pub(crate) struct Meanwhile(Arc<Mutex<Option<BoxFuture<'static, ()>>>>);

impl Meanwhile {
    /// What happens during the next sleep.
    pub(crate) fn then(&self, future: impl Future<Output = ()> + Send + 'static) {
        *self.0.lock() = Some(Box::pin(future));
    }
}

impl std::fmt::Debug for Meanwhile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Meanwhile")
    }
}

impl Sleeper for Meanwhile {
    fn sleep(&self, _duration: Duration) -> BoxFuture<'static, ()> {
        self.0.lock().take().unwrap_or_else(|| Box::pin(std::future::ready(())))
    }
}
