//! The CloudEvents HTTP sink: each event POSTed to a URL as the CloudEvents HTTP binding
//! says, in structured mode (the envelope as `application/cloudevents+json`), binary mode
//! (the data as the body, the attributes as `ce-*` headers) or batched (an array of
//! envelopes as `application/cloudevents-batch+json`).
//!
//! A 2xx answer delivers; 408, 429, any 5xx, a connection error or a timeout is tried
//! again; any other status is a refusal (the event is dropped).

use std::sync::Arc;
use std::time::Duration;

use futures_util::future::BoxFuture;
use reqwest::header::{HeaderMap, HeaderName, HeaderValue, CONTENT_TYPE};

use super::{Delivery, DeliveryError};
use crate::events::CloudEvent;

/// How events are put in requests.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum HttpMode {
    /// One event per request, the whole envelope as the body.
    #[default]
    Structured,
    /// One event per request, its data as the body and its attributes as headers.
    Binary,
    /// Several events per request, an array of envelopes.
    Batch,
}

/// An HTTP sink.
pub struct HttpSink {
    client: reqwest::Client,
    url: reqwest::Url,
    mode: HttpMode,
    headers: HeaderMap,
    batch_size: usize,
    timeout: Duration,
}

impl std::fmt::Debug for HttpSink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Headers may carry credentials.
        f.debug_struct("HttpSink").field("url", &self.url.as_str()).field("mode", &self.mode).finish_non_exhaustive()
    }
}

impl HttpSink {
    /// A sink POSTing to `url` in `mode` with `headers`, each request within `timeout`;
    /// `batch_size` events per request in batch mode.
    pub fn new(
        client: reqwest::Client,
        url: reqwest::Url,
        mode: HttpMode,
        headers: HeaderMap,
        batch_size: usize,
        timeout: Duration,
    ) -> Self {
        Self { client, url, mode, headers, batch_size: batch_size.max(1), timeout }
    }

    fn request(&self, events: &[Arc<CloudEvent>]) -> Result<reqwest::RequestBuilder, DeliveryError> {
        let request = self.client.post(self.url.clone()).headers(self.headers.clone()).timeout(self.timeout);
        Ok(match (self.mode, events) {
            (HttpMode::Structured, [event]) => {
                request.header(CONTENT_TYPE, "application/cloudevents+json; charset=utf-8").body(event.to_json())
            }
            (HttpMode::Binary, [event]) => {
                let data = serde_json::to_string(&event.data).map_err(|e| DeliveryError::Refused(e.to_string()))?;
                request.headers(binary_headers(event)).header(CONTENT_TYPE, "application/json").body(data)
            }
            _ => {
                let body: Vec<&CloudEvent> = events.iter().map(|e| e.as_ref()).collect();
                let body = serde_json::to_string(&body).map_err(|e| DeliveryError::Refused(e.to_string()))?;
                request.header(CONTENT_TYPE, "application/cloudevents-batch+json; charset=utf-8").body(body)
            }
        })
    }
}

/// The `ce-*` headers of binary mode.
pub fn binary_headers(event: &CloudEvent) -> HeaderMap {
    let mut headers = HeaderMap::new();
    let time = event.time.to_rfc3339_opts(chrono::SecondsFormat::Micros, true);
    let attributes = [
        ("ce-specversion", event.specversion.to_owned()),
        ("ce-id", event.id.to_string()),
        ("ce-source", event.source.to_owned()),
        ("ce-type", event.event_type.to_owned()),
        ("ce-subject", event.subject.clone()),
        ("ce-time", time),
    ];
    for (name, value) in attributes {
        // Percent-encoded as the binding asks for anything outside printable ASCII.
        if let Ok(value) = HeaderValue::from_str(&percent_encode(&value)) {
            headers.insert(HeaderName::from_static(name), value);
        }
    }
    headers
}

/// `text` with `%`, `"` and every byte outside printable ASCII (a space aside) percent-encoded.
fn percent_encode(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for byte in text.bytes() {
        if ((0x21..=0x7e).contains(&byte) && byte != b'%' && byte != b'"') || byte == b' ' {
            out.push(byte as char);
        } else {
            out.push_str(&format!("%{byte:02X}"));
        }
    }
    out
}

impl Delivery for HttpSink {
    fn deliver<'a>(&'a mut self, events: &'a [Arc<CloudEvent>]) -> BoxFuture<'a, Result<(), DeliveryError>> {
        Box::pin(async move {
            let response = self.request(events)?.send().await.map_err(|e| DeliveryError::Retry(e.to_string()))?;
            let status = response.status();
            if status.is_success() {
                Ok(())
            } else if status.is_server_error() || status.as_u16() == 408 || status.as_u16() == 429 {
                Err(DeliveryError::Retry(format!("{} answered {status}", self.url)))
            } else {
                Err(DeliveryError::Refused(format!("{} answered {status}", self.url)))
            }
        })
    }

    fn batch_size(&self) -> usize {
        match self.mode {
            HttpMode::Batch => self.batch_size,
            HttpMode::Structured | HttpMode::Binary => 1,
        }
    }
}

#[cfg(test)]
mod tests {
    use chrono::DateTime;
    use uuid::Uuid;

    use super::*;
    use crate::events::Topic;

    #[test]
    fn binary_mode_puts_the_attributes_in_headers() {
        let event = CloudEvent::for_job(Topic::JobPaused, Uuid::from_u128(7), DateTime::UNIX_EPOCH, "nightly", "n1");
        let headers = binary_headers(&event);
        let get = |name: &str| headers.get(name).and_then(|v| v.to_str().ok()).unwrap_or_default().to_owned();
        assert_eq!(get("ce-specversion"), "1.0");
        assert_eq!(get("ce-id"), "00000000-0000-0000-0000-000000000007");
        assert_eq!(get("ce-source"), "/scheduling");
        assert_eq!(get("ce-type"), "scheduling.job.paused");
        assert_eq!(get("ce-subject"), "nightly");
        assert_eq!(get("ce-time"), "1970-01-01T00:00:00.000000Z");
        assert_eq!(percent_encode("a b%\"é"), "a b%25%22%C3%A9");
    }
}
