//! A throwaway NATS server: Debian's `nats-server` on a free loopback port, stopped when
//! dropped, and stopped and started again on the same port to play an outage.
//!
//! Without `nats-server` installed, [`NatsServer::start`] returns `None` (the test says it
//! skipped) except under `CI=true`, where a test of a real server must never pass by
//! skipping: it panics.

use std::net::{TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};
use std::thread::sleep;
use std::time::Duration;

/// A running (or stopped) `nats-server`.
#[derive(Debug)]
pub struct NatsServer {
    port: u16,
    child: Option<Child>,
}

fn binary() -> Option<&'static str> {
    ["/usr/sbin/nats-server", "/usr/bin/nats-server", "/usr/local/bin/nats-server"]
        .into_iter()
        .find(|path| std::path::Path::new(path).exists())
}

impl NatsServer {
    /// A server on a free port, accepting connections.
    ///
    /// # Panics
    /// When it does not start, or under `CI=true` when it is not installed.
    pub fn start() -> Option<Self> {
        if binary().is_none() {
            assert!(
                !crate::postgres::in_ci(),
                "nats-server is not installed (CI=true: .ci/run must install Debian's nats-server)"
            );
            println!("skipped: nats-server is not installed (apt-get install nats-server)");
            return None;
        }
        let port = TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()).map(|a| a.port()).unwrap_or(14222);
        let mut server = Self { port, child: None };
        server.start_again();
        Some(server)
    }

    /// `nats://127.0.0.1:<port>`.
    pub fn url(&self) -> String {
        format!("nats://127.0.0.1:{}", self.port)
    }

    /// Stops the server (SIGKILL): clients see it gone.
    pub fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Starts the server again on its port and waits until it accepts connections.
    ///
    /// # Panics
    /// When it does not accept within 10 s.
    pub fn start_again(&mut self) {
        self.stop();
        let binary = binary().expect("nats-server is installed");
        let child = Command::new(binary)
            .args(["-a", "127.0.0.1", "-p", &self.port.to_string()])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("{binary} does not start: {e}"));
        self.child = Some(child);
        for _ in 0..200 {
            if TcpStream::connect(("127.0.0.1", self.port)).is_ok() {
                return;
            }
            sleep(Duration::from_millis(50));
        }
        panic!("nats-server on port {} did not accept connections within 10 s", self.port);
    }
}

impl Drop for NatsServer {
    fn drop(&mut self) {
        self.stop();
    }
}
