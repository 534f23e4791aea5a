//! `--http-sink`: a webhook that answers every event after 100 ms, on a thread and runtime
//! of its own, and the node's HTTP sink pointed at it, to show that a slow receiver does
//! not make runs late (the sink's queue takes the event and the run goes on); beside it, a
//! publisher that only counts, for the cost of the events themselves.

use std::sync::OnceLock;
use std::time::Duration;

use sundial_actors::events::EventPublisher;
use sundial_actors::sinks::http::{HttpMode, HttpSink};
use sundial_actors::sinks::{self, SinkOptions};

/// How long the receiver takes to answer.
const RECEIVER_DELAY: Duration = Duration::from_millis(100);

/// The receiver's URL, started on first use.
fn receiver_url() -> &'static str {
    static URL: OnceLock<String> = OnceLock::new();
    URL.get_or_init(|| {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://{}/events", listener.local_addr().unwrap());
        listener.set_nonblocking(true).unwrap();
        std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
            runtime.block_on(async move {
                let listener = tokio::net::TcpListener::from_std(listener).unwrap();
                let app = axum::Router::new().route(
                    "/events",
                    axum::routing::post(|| async {
                        tokio::time::sleep(RECEIVER_DELAY).await;
                        "ok"
                    }),
                );
                let _ = axum::serve(listener, app).await;
            });
        });
        url
    })
}

/// A publisher that counts events in the process (as the node binary's metrics do).
pub(crate) fn counted() -> std::sync::Arc<dyn EventPublisher> {
    std::sync::Arc::new(Counted(std::sync::atomic::AtomicU64::new(0)))
}

struct Counted(std::sync::atomic::AtomicU64);

impl EventPublisher for Counted {
    fn publish<'a>(
        &'a self,
        _event: &'a sundial_actors::events::CloudEvent,
    ) -> futures_util::future::BoxFuture<'a, Result<(), sundial_actors::events::PublishError>> {
        self.0.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        Box::pin(std::future::ready(Ok(())))
    }
}

/// A publisher sending every event to the slow receiver, in structured mode, one request
/// at a time (as a node configured with `[[events.http]]` does).
pub(crate) fn publisher() -> std::sync::Arc<dyn EventPublisher> {
    let client = sundial_actors::kinds::http::client_builder().build().unwrap();
    let url = reqwest::Url::parse(receiver_url()).unwrap();
    let delivery = HttpSink::new(client, url, HttpMode::Structured, Default::default(), 1, Duration::from_secs(10));
    std::sync::Arc::new(sinks::spawn("bench", delivery, SinkOptions::default()))
}
