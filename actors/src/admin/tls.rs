//! TLS for the admin API (rustls): a certificate chain and key from PEM files, reloaded
//! when the files change or on SIGHUP, without dropping the listener or open connections.
//!
//! [`TlsListener`] accepts TCP connections and completes each TLS handshake in a task of
//! its own (a slow or silent client never holds up the others; a handshake gets
//! [`HANDSHAKE_TIMEOUT`]), handing finished connections to axum. Every handshake uses the
//! certificate current when it starts ([`CurrentCertificate`]); [`watch`] replaces it when
//! the files' size or modification time changes (checked every [`WATCH_INTERVAL`]) or
//! when asked (SIGHUP). A certificate that does not load is logged and the previous one
//! kept, so a half-written file never takes the API down.

use std::io;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use parking_lot::RwLock;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::ServerConfig;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tokio_rustls::server::TlsStream;
use tokio_rustls::TlsAcceptor;

/// How long a client has to complete its TLS handshake.
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
/// How often [`watch`] looks at the files.
pub const WATCH_INTERVAL: Duration = Duration::from_secs(2);

/// Where the certificate chain and its key are.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsFiles {
    /// PEM: the server's certificate first, then its intermediates.
    pub cert: PathBuf,
    /// PEM: the private key (PKCS#8, PKCS#1 or SEC1).
    pub key: PathBuf,
}

/// Why the files do not make a TLS configuration: which setting, and what is wrong.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsError {
    /// `admin.tls.cert` or `admin.tls.key`.
    pub key: &'static str,
    /// What is wrong.
    pub problem: String,
}

impl std::fmt::Display for TlsError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.key, self.problem)
    }
}

impl TlsFiles {
    /// Reads the files into a server configuration (HTTP/1.1 over TLS 1.2 or 1.3).
    ///
    /// # Errors
    /// A file that cannot be read or holds no certificate or key, or a key that does not
    /// match the certificate.
    pub fn load(&self) -> Result<Arc<ServerConfig>, TlsError> {
        let cert_error = |problem: String| TlsError { key: "admin.tls.cert", problem };
        let key_error = |problem: String| TlsError { key: "admin.tls.key", problem };
        let certs = CertificateDer::pem_file_iter(&self.cert)
            .map_err(|e| cert_error(pem_problem(&self.cert, &e)))?
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| cert_error(pem_problem(&self.cert, &e)))?;
        if certs.is_empty() {
            return Err(cert_error(format!("{} holds no PEM certificate", self.cert.display())));
        }
        let key = PrivateKeyDer::from_pem_file(&self.key).map_err(|e| key_error(pem_problem(&self.key, &e)))?;
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut config = ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| cert_error(e.to_string()))?
            .with_no_client_auth()
            .with_single_cert(certs, key)
            .map_err(|e| key_error(format!("does not go with the certificate in {}: {e}", self.cert.display())))?;
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        Ok(Arc::new(config))
    }

    /// The files' sizes and modification times, to notice a change.
    fn stamp(&self) -> Option<[(u64, SystemTime); 2]> {
        let of = |path: &Path| std::fs::metadata(path).ok().and_then(|m| Some((m.len(), m.modified().ok()?)));
        Some([of(&self.cert)?, of(&self.key)?])
    }
}

fn pem_problem(path: &Path, error: &rustls::pki_types::pem::Error) -> String {
    match error {
        rustls::pki_types::pem::Error::Io(e) => format!("cannot read {}: {e}", path.display()),
        rustls::pki_types::pem::Error::NoItemsFound => format!("{} holds no PEM item of that kind", path.display()),
        other => format!("{} is not valid PEM: {other:?}", path.display()),
    }
}

/// The certificate new handshakes use, replaced as the files change.
#[derive(Clone)]
pub struct CurrentCertificate(Arc<RwLock<TlsAcceptor>>);

impl CurrentCertificate {
    /// Starts with `config`.
    pub fn new(config: Arc<ServerConfig>) -> Self {
        Self(Arc::new(RwLock::new(TlsAcceptor::from(config))))
    }

    fn acceptor(&self) -> TlsAcceptor {
        self.0.read().clone()
    }

    fn replace(&self, config: Arc<ServerConfig>) {
        *self.0.write() = TlsAcceptor::from(config);
    }
}

/// Keeps `current` up to date with `files`: reloads when their size or modification time
/// changes, and whenever `asked` yields (SIGHUP). Ends when `asked` ends.
pub async fn watch(files: TlsFiles, current: CurrentCertificate, mut asked: mpsc::Receiver<()>) {
    let mut seen = files.stamp();
    let mut tick = tokio::time::interval(WATCH_INTERVAL);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        let why = tokio::select! {
            _ = tick.tick() => {
                let now = files.stamp();
                if now == seen || now.is_none() {
                    continue;
                }
                seen = now;
                "the files changed"
            }
            asked_now = asked.recv() => {
                if asked_now.is_none() {
                    return;
                }
                seen = files.stamp();
                "asked (SIGHUP)"
            }
        };
        match files.load() {
            Ok(config) => {
                current.replace(config);
                tracing::info!(cert = %files.cert.display(), why, "admin API certificate reloaded");
            }
            Err(error) => tracing::warn!(%error, why, "admin API certificate not reloaded; the previous one stays"),
        }
    }
}

/// A TCP listener whose connections are TLS, for [`crate::admin::serve`].
pub struct TlsListener {
    incoming: mpsc::Receiver<(TlsStream<TcpStream>, SocketAddr)>,
    local: SocketAddr,
}

impl TlsListener {
    /// Serves TLS on `tcp` with the `current` certificate.
    ///
    /// # Errors
    /// The listener's address cannot be read.
    pub fn new(tcp: TcpListener, current: CurrentCertificate) -> io::Result<Self> {
        let local = tcp.local_addr()?;
        let (send, incoming) = mpsc::channel(64);
        tokio::spawn(accept_loop(tcp, current, send));
        Ok(Self { incoming, local })
    }
}

async fn accept_loop(
    tcp: TcpListener,
    current: CurrentCertificate,
    send: mpsc::Sender<(TlsStream<TcpStream>, SocketAddr)>,
) {
    loop {
        let accepted = tokio::select! {
            () = send.closed() => return,
            accepted = tcp.accept() => accepted,
        };
        let (stream, peer) = match accepted {
            Ok(accepted) => accepted,
            Err(error) => {
                // Out of descriptors and the like: pass, as axum's own listener does.
                tracing::debug!(%error, "admin API accept failed");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let (acceptor, send) = (current.acceptor(), send.clone());
        tokio::spawn(async move {
            match tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(stream)).await {
                Ok(Ok(tls)) => {
                    let _ = send.send((tls, peer)).await;
                }
                Ok(Err(error)) => tracing::debug!(%peer, %error, "admin API TLS handshake failed"),
                Err(_) => tracing::debug!(%peer, "admin API TLS handshake timed out"),
            }
        });
    }
}

impl axum::serve::Listener for TlsListener {
    type Io = TlsStream<TcpStream>;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        match self.incoming.recv().await {
            Some(connection) => connection,
            // The accept loop only ends with this listener.
            None => std::future::pending().await,
        }
    }

    fn local_addr(&self) -> io::Result<Self::Addr> {
        Ok(self.local)
    }
}
