//! Watches over `LISTEN`/`NOTIFY`.
//!
//! A process watches through one listening connection of its own. A watched key is
//! recorded once in the schema's `watches` table; from then on every commit that writes
//! it notifies the schema's channel with the key. On a notification the listener reads
//! the key's latest value and fires the watches that saw another one.
//!
//! A watch is armed after its transaction committed: it registers, then compares the
//! key's latest value with the one its transaction saw, so a write that landed in between
//! fires it at once and one that lands after reaches it by notification. When the
//! listening connection is lost every watch fails (1031) and its caller watches again;
//! the next watch starts a new listener.

use std::collections::{BTreeMap, BTreeSet};

use futures_channel::oneshot;
use parking_lot::Mutex;
use tokio_postgres::{AsyncMessage, NoTls};

use super::super::KvError;
use super::PgKv;

/// A watch waiting for its key to change.
struct Waiter {
    seen: Option<Vec<u8>>,
    notify: oneshot::Sender<Result<(), KvError>>,
}

#[derive(Default)]
struct State {
    /// Whether a listener is running and listening.
    listening: bool,
    waiters: BTreeMap<Vec<u8>, Vec<Waiter>>,
    /// Keys known to be in the `watches` table.
    registered: BTreeSet<Vec<u8>>,
}

/// The watches of one `PgKv` (shared by its clones).
#[derive(Default)]
pub(super) struct Watches {
    state: Mutex<State>,
    /// Held while a listener starts, so concurrent watches start one.
    starting: tokio::sync::Mutex<()>,
}

fn lost(reason: &str) -> KvError {
    KvError::with_message(KvError::TRANSACTION_TIMED_OUT, format!("watch: {reason}"))
}

impl Watches {
    /// Waits until `key`'s value is no longer `seen`.
    pub(super) async fn wait(&self, kv: &PgKv, key: Vec<u8>, seen: Option<Vec<u8>>) -> Result<(), KvError> {
        if !self.state.lock().registered.contains(&key) {
            let conn = kv.connection().await?;
            let statement = kv.timed(conn.prepare_cached(&kv.shared.statements.watch), false).await?;
            kv.timed(conn.execute(&statement, &[&key]), false).await?;
            self.state.lock().registered.insert(key.clone());
        }
        self.listen(kv).await?;
        let (notify, fired) = oneshot::channel();
        {
            let mut state = self.state.lock();
            if !state.listening {
                return Err(lost("the listening connection was lost"));
            }
            let waiters = state.waiters.entry(key.clone()).or_default();
            waiters.retain(|waiter| !waiter.notify.is_canceled());
            waiters.push(Waiter { seen: seen.clone(), notify });
        }
        if kv.latest_value(&key).await? != seen {
            return Ok(());
        }
        fired.await.unwrap_or_else(|_| Err(lost("the listener stopped")))
    }

    /// Starts the listener unless one is listening.
    async fn listen(&self, kv: &PgKv) -> Result<(), KvError> {
        if self.state.lock().listening {
            return Ok(());
        }
        let _starting = self.starting.lock().await;
        if self.state.lock().listening {
            return Ok(());
        }
        let mut config = kv.shared.options.config.clone();
        config.connect_timeout(kv.shared.options.connect_timeout);
        let connected = tokio::time::timeout(kv.shared.options.connect_timeout, config.connect(NoTls)).await;
        let (client, mut connection) = match connected {
            Ok(Ok(pair)) => pair,
            Ok(Err(error)) => {
                return Err(kv.unavailable(format!("watch: PostgreSQL unreachable: {}", super::message_of(&error))))
            }
            Err(_) => return Err(kv.unavailable("watch: PostgreSQL did not answer in time".to_owned())),
        };
        let (keys, mut notified) = tokio::sync::mpsc::unbounded_channel::<Vec<u8>>();
        // Drives the connection and hands its notifications over.
        let driver = tokio::spawn(async move {
            while let Some(message) = std::future::poll_fn(|cx| connection.poll_message(cx)).await {
                match message {
                    Ok(AsyncMessage::Notification(notification)) => {
                        if let Some(key) = from_hex(notification.payload()) {
                            let _ = keys.send(key);
                        }
                    }
                    Ok(_) => {}
                    Err(_) => return,
                }
            }
        });
        let listen = format!("LISTEN {}", kv.shared.channel);
        if let Err(error) = kv.timed(client.batch_execute(&listen), false).await {
            driver.abort();
            return Err(error);
        }
        self.state.lock().listening = true;
        let kv = kv.clone();
        tokio::spawn(async move {
            // The client must live as long as the listener listens.
            let _client = client;
            while let Some(key) = notified.recv().await {
                kv.shared.watches.fire(&kv, key).await;
            }
            // The connection is gone: every watch fails and its caller watches again.
            let waiters = {
                let mut state = kv.shared.watches.state.lock();
                state.listening = false;
                std::mem::take(&mut state.waiters)
            };
            for waiter in waiters.into_values().flatten() {
                let _ = waiter.notify.send(Err(lost("the listening connection was lost")));
            }
        });
        Ok(())
    }

    /// `key` was written: fires its watches that saw another value than its latest.
    async fn fire(&self, kv: &PgKv, key: Vec<u8>) {
        if !self.state.lock().waiters.contains_key(&key) {
            return;
        }
        let latest = kv.latest_value(&key).await;
        let mut state = self.state.lock();
        let Some(waiters) = state.waiters.remove(&key) else { return };
        let mut waiting = Vec::new();
        for waiter in waiters {
            match &latest {
                Ok(latest) if *latest == waiter.seen => {
                    if !waiter.notify.is_canceled() {
                        waiting.push(waiter);
                    }
                }
                Ok(_) => {
                    let _ = waiter.notify.send(Ok(()));
                }
                Err(error) => {
                    let _ = waiter.notify.send(Err(error.clone()));
                }
            }
        }
        if !waiting.is_empty() {
            state.waiters.insert(key, waiting);
        }
    }
}

/// Bytes from lower-case hex (PostgreSQL's `encode(.., 'hex')`).
fn from_hex(text: &str) -> Option<Vec<u8>> {
    let digit = |c: u8| (c as char).to_digit(16).map(|d| d as u8);
    let bytes = text.as_bytes();
    if !bytes.len().is_multiple_of(2) {
        return None;
    }
    bytes.chunks(2).map(|pair| Some(digit(pair[0])? << 4 | digit(pair[1])?)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hex_payloads() {
        assert_eq!(from_hex("00ff10"), Some(vec![0, 255, 16]));
        assert_eq!(from_hex(""), Some(vec![]));
        assert_eq!(from_hex("0"), None);
        assert_eq!(from_hex("zz"), None);
    }
}
