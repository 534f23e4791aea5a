//! The NATS sink: each event published as its structured JSON envelope on the subject
//! `<prefix>.<type>` (e.g. `sundial.scheduling.run.failed`), through `async-nats`.
//!
//! The client connects in the background and reconnects by itself. While it is not
//! connected a delivery waits and is tried again (with the sink's backoff), so events
//! reach a server that was down once it is back. Core NATS does not acknowledge: a
//! publish that the client accepted is delivered when the connection carries it.

use std::sync::Arc;
use std::time::Duration;

use futures_util::future::BoxFuture;

use super::{Delivery, DeliveryError};
use crate::events::CloudEvent;

/// How long a flush of the client's buffer may take before the delivery counts as done
/// anyway (the client keeps the messages and sends them when it can).
const FLUSH_TIMEOUT: Duration = Duration::from_secs(5);

/// A NATS sink.
pub struct NatsSink {
    client: async_nats::Client,
    prefix: String,
}

impl std::fmt::Debug for NatsSink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NatsSink").field("prefix", &self.prefix).finish_non_exhaustive()
    }
}

/// Checks a subject prefix: NATS tokens separated by dots, without spaces or wildcards.
///
/// # Errors
/// What is wrong.
pub fn check_prefix(prefix: &str) -> Result<(), String> {
    let bad = |token: &str| token.is_empty() || token.contains(|c: char| c.is_whitespace() || "*>".contains(c));
    if prefix.split('.').any(bad) {
        return Err(format!("'{prefix}' is not a subject prefix (tokens separated by dots, no spaces, * or >)"));
    }
    Ok(())
}

impl NatsSink {
    /// A sink on the server at `url` (`nats://host:port`, credentials in the URL if any),
    /// publishing under `prefix`. Returns at once: the client connects in the background.
    ///
    /// # Errors
    /// A URL the client does not accept.
    pub async fn connect(url: &str, prefix: &str, name: &str) -> Result<Self, String> {
        check_prefix(prefix)?;
        let client = async_nats::ConnectOptions::new()
            .name(format!("sundial {name}"))
            .retry_on_initial_connect()
            .connection_timeout(Duration::from_secs(5))
            .connect(url)
            .await
            .map_err(|e| format!("'{url}': {e}"))?;
        Ok(Self { client, prefix: prefix.to_owned() })
    }
}

impl Delivery for NatsSink {
    fn deliver<'a>(&'a mut self, events: &'a [Arc<CloudEvent>]) -> BoxFuture<'a, Result<(), DeliveryError>> {
        Box::pin(async move {
            if self.client.connection_state() != async_nats::connection::State::Connected {
                return Err(DeliveryError::Retry("not connected to the NATS server".into()));
            }
            for event in events {
                let subject = format!("{}.{}", self.prefix, event.event_type);
                self.client
                    .publish(subject, event.to_json().into_bytes().into())
                    .await
                    .map_err(|e| DeliveryError::Retry(e.to_string()))?;
            }
            if let Ok(Err(error)) = tokio::time::timeout(FLUSH_TIMEOUT, self.client.flush()).await {
                tracing::debug!(%error, "NATS flush failed; the client sends when it reconnects");
            }
            Ok(())
        })
    }

    fn batch_size(&self) -> usize {
        // Publishes are buffered by the client: several per flush.
        64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefixes_are_subject_tokens() {
        assert!(check_prefix("sundial").is_ok());
        assert!(check_prefix("acme.sundial").is_ok());
        for bad in ["", "a..b", "a b", "a.*", ">", ".a"] {
            assert!(check_prefix(bad).is_err(), "{bad}");
        }
    }
}
