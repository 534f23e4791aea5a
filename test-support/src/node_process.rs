//! A `sundial node` child process for tests of the binary: started on a free admin port,
//! its output collected line by line, driven through the CLI and raw HTTP, stopped with a
//! real signal.
// These helpers wait on real child processes, in real time; no simulation reads this clock.
#![allow(clippy::disallowed_methods)]

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Output, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use serde_json::Value;

/// A running node, killed on drop.
pub struct NodeProcess {
    /// The process.
    pub child: Child,
    lines: mpsc::Receiver<String>,
    /// Every line of output read so far.
    pub seen: Vec<String>,
    /// Its admin API (`http://127.0.0.1:port`, or `https://…`).
    pub base: String,
    bin: PathBuf,
    token: Option<String>,
}

impl NodeProcess {
    /// Runs `bin node <args>` with `envs` (the admin API on a free loopback port, no
    /// admin token from the environment) and waits until its admin API listens.
    ///
    /// # Panics
    /// When it does not start listening within 20 s.
    pub fn start(bin: &Path, args: &[&str], envs: &[(&str, &str)]) -> Self {
        let mut command = Command::new(bin);
        command
            .arg("node")
            .args(args)
            // The default log filter, as a user gets it.
            .env_remove("RUST_LOG")
            .env("NO_COLOR", "1")
            .env("SUNDIAL_ADMIN_LISTEN", "127.0.0.1:0")
            .env_remove("SUNDIAL_ADMIN_TOKEN")
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        for (k, v) in envs {
            command.env(k, v);
        }
        let mut child = command.spawn().expect("the binary starts");
        let (send, lines) = mpsc::channel();
        let pipes: [Box<dyn Read + Send>; 2] =
            [Box::new(child.stdout.take().expect("piped")), Box::new(child.stderr.take().expect("piped"))];
        for pipe in pipes {
            let send = send.clone();
            std::thread::spawn(move || {
                for line in BufReader::new(pipe).lines().map_while(Result::ok) {
                    let _ = send.send(line);
                }
            });
        }
        let mut node = Self { child, lines, seen: Vec::new(), base: String::new(), bin: bin.to_owned(), token: None };
        let line = node.wait_for("admin API listening", Duration::from_secs(20));
        let address = line.split("address=").nth(1).and_then(|rest| rest.split_whitespace().next());
        node.base = address.expect("the line names the address").trim_matches('"').to_owned();
        node
    }

    /// The token [`Self::cli_json`] sends.
    pub fn with_token(mut self, token: &str) -> Self {
        self.token = Some(token.to_owned());
        self
    }

    /// Waits for an output line containing `needle`; returns it.
    ///
    /// # Panics
    /// When none comes within `timeout`.
    pub fn wait_for(&mut self, needle: &str, timeout: Duration) -> String {
        let deadline = Instant::now() + timeout;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(line) => {
                    self.seen.push(line.clone());
                    if line.contains(needle) {
                        return line;
                    }
                }
                Err(_) => panic!("no line with '{needle}' within {timeout:?}:\n{}", self.seen.join("\n")),
            }
        }
    }

    /// The admin API's port.
    pub fn port(&self) -> u16 {
        self.base.rsplit(':').next().and_then(|p| p.parse().ok()).expect("the base ends with a port")
    }

    /// Sends `signal` (e.g. `-TERM`, `-HUP`, `-KILL`) to the process.
    pub fn signal(&self, signal: &str) {
        let _ = Command::new("kill").args([signal, &self.child.id().to_string()]).status();
    }

    /// SIGTERM, then waits for the exit and the last lines.
    pub fn terminate(&mut self) -> ExitStatus {
        self.signal("-TERM");
        let status = self.child.wait().expect("the binary exits");
        while let Ok(line) = self.lines.recv_timeout(Duration::from_millis(500)) {
            self.seen.push(line);
        }
        status
    }

    /// The CLI against this node (no token unless `args` give one).
    pub fn cli(&self, args: &[&str]) -> Output {
        Command::new(&self.bin)
            .args(args)
            .env("SUNDIAL_SERVER", &self.base)
            .env_remove("SUNDIAL_ADMIN_TOKEN")
            .output()
            .expect("the CLI runs")
    }

    /// The CLI with the token, expecting success; its stdout as JSON.
    ///
    /// # Panics
    /// When the command fails or prints no JSON.
    pub fn cli_json(&self, args: &[&str]) -> Value {
        let (code, json) = self.cli_json_status(args);
        assert_eq!(code, Some(0), "{args:?}: {json}");
        json
    }

    /// The CLI with the token: its exit code and its stdout as JSON.
    ///
    /// # Panics
    /// When it prints no JSON.
    pub fn cli_json_status(&self, args: &[&str]) -> (Option<i32>, Value) {
        let mut all = args.to_vec();
        all.push("--json");
        if let Some(token) = &self.token {
            all.extend(["--token", token]);
        }
        let out = self.cli(&all);
        let json = serde_json::from_slice(&out.stdout)
            .unwrap_or_else(|e| panic!("{args:?}: {e}: {}", String::from_utf8_lossy(&out.stderr)));
        (out.status.code(), json)
    }
}

impl Drop for NodeProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// One HTTP/1.1 request to `127.0.0.1:port` with a bearer `token`; (status, body).
pub fn http(port: u16, method: &str, path: &str, token: Option<&str>, body: Option<&str>) -> (u16, String) {
    let auth = token.map(|t| format!("Bearer {t}"));
    let headers: Vec<(&str, &str)> = auth.iter().map(|a| ("Authorization", a.as_str())).collect();
    http_with(port, method, path, &headers, body)
}

/// One HTTP/1.1 request with extra headers; (status, body).
///
/// # Panics
/// When the server does not answer with HTTP.
pub fn http_with(port: u16, method: &str, path: &str, headers: &[(&str, &str)], body: Option<&str>) -> (u16, String) {
    let mut stream = TcpStream::connect(("127.0.0.1", port)).expect("the node listens");
    stream.set_read_timeout(Some(Duration::from_secs(30))).expect("a timeout can be set");
    let mut request = format!("{method} {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n");
    for (name, value) in headers {
        request.push_str(&format!("{name}: {value}\r\n"));
    }
    let body = body.unwrap_or("");
    request.push_str(&format!("Content-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}", body.len()));
    stream.write_all(request.as_bytes()).expect("the request is sent");
    let mut response = String::new();
    stream.read_to_string(&mut response).expect("an answer");
    let status = response.split_whitespace().nth(1).and_then(|s| s.parse().ok()).expect("an HTTP status line");
    let body = response.split_once("\r\n\r\n").map(|(_, b)| b.to_owned()).unwrap_or_default();
    (status, body)
}

/// The `code` of an error body, or empty.
pub fn code_of(body: &str) -> String {
    serde_json::from_str::<Value>(body).map(|v| v["code"].as_str().unwrap_or("").to_owned()).unwrap_or_default()
}
