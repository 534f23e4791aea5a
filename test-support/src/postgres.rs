//! A throwaway PostgreSQL server for tests: `initdb` in a temporary directory, its own
//! port on 127.0.0.1, stopped and removed when the [`PgServer`] is dropped, and in any
//! case by a watchdog within a second of the test process's exit (a static server is
//! never dropped).
//!
//! It uses the server binaries of Debian's `postgresql` package (the newest under
//! `/usr/lib/postgresql/*/bin`, or `SUNDIAL_PG_BIN`). `initdb` refuses to run as root,
//! so as root every server command runs as the `postgres` user the package creates.
//! Without the binaries [`PgServer::start`] says why and returns `None`, except under
//! `CI=true`, where a test of a real server must never pass by skipping: it panics.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::OnceLock;

/// The superuser's password (logins over TCP use SCRAM, so a wrong one is refused).
pub const PASSWORD: &str = "sundial-test";

/// How a server is set up.
#[derive(Debug, Clone)]
pub struct ServerOptions {
    /// Whether the server makes its WAL durable on disk at commit (`fsync`). Tests that
    /// never crash the machine can do without: a commit is still written to the OS before
    /// it is acknowledged (`synchronous_commit` stays on), so a crashed server loses
    /// nothing it acknowledged. Benches measure with it.
    pub fsync: bool,
    /// `max_connections`.
    pub max_connections: u32,
    /// More settings, `name=value` each (`track_functions=pl`, ...).
    pub settings: Vec<String>,
}

impl Default for ServerOptions {
    fn default() -> Self {
        Self { fsync: false, max_connections: 200, settings: Vec::new() }
    }
}

/// A running PostgreSQL server of the test's own.
#[derive(Debug)]
pub struct PgServer {
    bin: PathBuf,
    dir: PathBuf,
    port: u16,
    /// Server commands run as the `postgres` user (the test runs as root).
    as_postgres: bool,
    options: ServerOptions,
}

/// Whether the tests run in CI (`CI=true`), where a missing real component fails them.
pub(crate) fn in_ci() -> bool {
    std::env::var("CI").is_ok_and(|v| v == "true")
}

/// The directory of the newest installed server's binaries.
fn find_binaries() -> Option<PathBuf> {
    if let Some(dir) = std::env::var_os("SUNDIAL_PG_BIN") {
        return Some(PathBuf::from(dir));
    }
    let mut found: Vec<(u32, PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")
        .ok()?
        .filter_map(|entry| {
            let entry = entry.ok()?;
            let version: u32 = entry.file_name().to_str()?.parse().ok()?;
            let bin = entry.path().join("bin");
            bin.join("initdb").exists().then_some((version, bin))
        })
        .collect();
    found.sort();
    found.pop().map(|(_, bin)| bin)
}

fn is_root() -> bool {
    Command::new("id").arg("-u").output().is_ok_and(|out| String::from_utf8_lossy(&out.stdout).trim() == "0")
}

/// A port nobody listens on now.
fn free_port() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind a probe socket on 127.0.0.1");
    listener.local_addr().expect("the probe's address").port()
}

static NEXT: AtomicU32 = AtomicU32::new(0);

/// A name no other call in this process, or other process, returns: `prefix`, the
/// process id and a counter.
pub fn unique_name(prefix: &str) -> String {
    format!("{prefix}_{}_{}", std::process::id(), NEXT.fetch_add(1, Ordering::Relaxed))
}

impl PgServer {
    /// One server shared by every test of this process, started by the first caller.
    pub fn shared() -> Option<&'static PgServer> {
        static SHARED: OnceLock<Option<PgServer>> = OnceLock::new();
        SHARED.get_or_init(|| PgServer::start(ServerOptions::default())).as_ref()
    }

    /// Starts a new server, or returns `None` (having printed why) when PostgreSQL is not
    /// installed and `CI` is not `true`.
    ///
    /// # Panics
    /// When the server is installed but does not start, or under `CI=true` when it is
    /// not installed.
    pub fn start(options: ServerOptions) -> Option<PgServer> {
        let Some(bin) = find_binaries() else {
            assert!(!in_ci(), "PostgreSQL is not installed (CI=true: .ci/run must install Debian's postgresql)");
            println!("skipped: PostgreSQL's server binaries are not installed (apt-get install postgresql)");
            return None;
        };
        let dir = std::env::temp_dir().join(unique_name("sundial-pg"));
        std::fs::create_dir_all(&dir).expect("create the server's directory");
        let server = PgServer { bin, dir, port: free_port(), as_postgres: is_root(), options };
        server.init();
        server.spawn_watchdog();
        server.start_again();
        Some(server)
    }

    fn data(&self) -> PathBuf {
        self.dir.join("data")
    }

    /// `program` of the server's binaries (or any program when `bin` is false), as the
    /// `postgres` user when the test runs as root.
    fn command(&self, program: &str, bin: bool) -> Command {
        let path = if bin { self.bin.join(program) } else { PathBuf::from(program) };
        if self.as_postgres {
            let mut command = Command::new("runuser");
            command.args(["-u", "postgres", "--"]).arg(path);
            command
        } else {
            Command::new(path)
        }
    }

    fn run(&self, command: &mut Command, what: &str) {
        let out = command.stdin(Stdio::null()).output().unwrap_or_else(|e| panic!("{what}: cannot run: {e}"));
        let log = std::fs::read_to_string(self.dir.join("log")).unwrap_or_default();
        assert!(
            out.status.success(),
            "{what} failed: {}\n{}{}\nserver log:\n{log}",
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr),
        );
    }

    fn init(&self) {
        let password_file = self.dir.join("password");
        std::fs::write(&password_file, PASSWORD).expect("write the password file");
        if self.as_postgres {
            self.run(Command::new("chown").arg("-R").arg("postgres:").arg(&self.dir), "chown the server's directory");
        }
        self.run(
            self.command("initdb", true)
                .arg("-D")
                .arg(self.data())
                .args(["-U", "postgres", "-E", "UTF8", "--no-sync", "--auth-local=trust", "--auth-host=scram-sha-256"])
                .arg(format!("--pwfile={}", password_file.display())),
            "initdb",
        );
    }

    /// Stops the server and removes its directory once this process is gone.
    #[allow(clippy::zombie_processes)] // It outlives this process by design; init reaps it.
    fn spawn_watchdog(&self) {
        let script = format!(
            "while [ -d /proc/{pid} ]; do sleep 1; done; {pg_ctl} -D {data} stop -m immediate >/dev/null 2>&1; rm -rf {dir}",
            pid = std::process::id(),
            pg_ctl = self.bin.join("pg_ctl").display(),
            data = self.data().display(),
            dir = self.dir.display(),
        );
        self.command("sh", false)
            .args(["-c", &script])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start the server's watchdog");
    }

    /// Starts the (stopped) server on its port and waits until it accepts connections.
    ///
    /// # Panics
    /// When it does not start.
    pub fn start_again(&self) {
        let settings_line = format!(
            "-p {port} -c listen_addresses=127.0.0.1 -c unix_socket_directories={dir} -c fsync={fsync} \
             -c full_page_writes={fsync} -c max_connections={max}",
            port = self.port,
            dir = self.dir.display(),
            fsync = if self.options.fsync { "on" } else { "off" },
            max = self.options.max_connections,
        );
        let settings: String = self.options.settings.iter().map(|s| format!(" -c {s}")).collect();
        let settings = settings_line + &settings;
        self.run(
            self.command("pg_ctl", true)
                .arg("-D")
                .arg(self.data())
                .arg("-l")
                .arg(self.dir.join("log"))
                .args(["-w", "-t", "60", "-o", &settings, "start"]),
            "pg_ctl start",
        );
    }

    /// Stops the server: `fast` (clients disconnected, a clean shutdown) or `immediate`
    /// (as if it crashed; it recovers from its WAL at the next start).
    pub fn stop(&self, mode: &str) {
        self.run(
            self.command("pg_ctl", true).arg("-D").arg(self.data()).args(["-w", "-t", "60", "-m", mode, "stop"]),
            "pg_ctl stop",
        );
    }

    /// The port it listens on.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The postmaster's process id (from its pid file), while it runs.
    pub fn pid(&self) -> Option<u32> {
        let text = std::fs::read_to_string(self.data().join("postmaster.pid")).ok()?;
        text.lines().next()?.trim().parse().ok()
    }

    /// Its directory (the data directory is `data` in it, the server's log `log`).
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// A URL for database `postgres` as the superuser, password included.
    pub fn url(&self) -> String {
        format!("postgres://postgres:{PASSWORD}@127.0.0.1:{}/postgres", self.port)
    }

    /// The same URL without the password.
    pub fn url_without_password(&self) -> String {
        format!("postgres://postgres@127.0.0.1:{}/postgres", self.port)
    }

    /// Runs `sql` with `psql` over the server's socket (as the superuser, no password).
    pub fn psql(&self, sql: &str) -> String {
        let out = self
            .command("psql", true)
            .args(["-h"])
            .arg(&self.dir)
            .args(["-p", &self.port.to_string(), "-U", "postgres", "-d", "postgres", "-XAtq", "-v", "ON_ERROR_STOP=1"])
            .args(["-c", sql])
            .stdin(Stdio::null())
            .output()
            .expect("run psql");
        assert!(out.status.success(), "psql {sql:?}: {}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8_lossy(&out.stdout).into_owned()
    }
}

impl Drop for PgServer {
    fn drop(&mut self) {
        let _ = self
            .command("pg_ctl", true)
            .arg("-D")
            .arg(self.data())
            .args(["-m", "immediate", "stop"])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
