//! `sundial`: runs a node, and talks to one.
//!
//! ```text
//! sundial node [--config FILE] [--demo] [--log-format text|json]   run a node
//! sundial node info                                                 ask a running node
//! sundial jobs list|show|apply|delete|pause|resume|trigger|enqueue|restore
//! sundial triggers pause|resume JOB TRIGGER
//! sundial runs list|count [filters] | cancel ID…
//! sundial cron next "<expr>" [--tz ZONE] [--after T] [-n N]         offline
//! sundial schedule next "<schedule text>" [--after T] [-n N]       offline
//! ```

/// `println!` for what a command prints: when the reader has gone (`sundial runs list |
/// head`) the command ends quietly, and any other failure to write ends it with status 1,
/// rather than a panic.
macro_rules! outln {
    () => {
        $crate::write_line(format_args!(""))
    };
    ($($arg:tt)*) => {
        $crate::write_line(format_args!($($arg)*))
    };
}

mod client;
mod node;
mod offline;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, Parser, Subcommand};

#[global_allocator]
static ALLOCATOR: sundial_actors::allocator::Allocator = sundial_actors::allocator::Allocator {};

/// Exit codes by error class, for scripts.
pub(crate) mod exit {
    /// A triggered run failed or was canceled; or an unexpected error.
    pub(crate) const FAILED: u8 = 1;
    /// Bad command line, config or input file.
    pub(crate) const USAGE: u8 = 2;
    /// Job, trigger, run or endpoint not found.
    pub(crate) const NOT_FOUND: u8 = 3;
    /// The node refused the request as invalid.
    pub(crate) const INVALID: u8 = 4;
    /// A conflict: the job is running and not concurrent, or similar.
    pub(crate) const CONFLICT: u8 = 5;
    /// The node or its store is unreachable or not running.
    pub(crate) const UNAVAILABLE: u8 = 6;
    /// The token is missing or wrong.
    pub(crate) const UNAUTHORIZED: u8 = 7;
}

const EXIT_CODES: &str = "Exit codes: 0 ok, 1 run failed or unexpected error, 2 usage or config error, \
3 not found, 4 invalid request, 5 conflict, 6 node or store unavailable, 7 unauthorized.";

#[derive(Debug, Parser)]
#[command(
    name = "sundial",
    version,
    about = "sundial: a distributed job scheduler. Runs a node, and manages one through its admin API.",
    after_help = EXIT_CODES
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

/// How the CLI reaches a node.
#[derive(Debug, Clone, Args)]
pub(crate) struct Remote {
    /// The node's admin API.
    #[arg(long, global = true, env = "SUNDIAL_SERVER", default_value = "http://127.0.0.1:7600")]
    pub(crate) server: String,
    /// A token of the node's: a read token to look, an admin token to change.
    #[arg(long, global = true, env = "SUNDIAL_ADMIN_TOKEN", hide_env_values = true)]
    pub(crate) token: Option<String>,
    /// A PEM file of CA certificates to trust (besides the platform's) for an https
    /// `--server`.
    #[arg(long, global = true, env = "SUNDIAL_CA_CERT", value_name = "FILE")]
    pub(crate) ca_cert: Option<std::path::PathBuf>,
    /// Print JSON instead of tables.
    #[arg(long, global = true)]
    pub(crate) json: bool,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run a node (or, with `info`, describe a running one).
    Node(NodeCommand),
    /// Jobs: list, show, apply, delete, pause, resume, trigger, enqueue, restore.
    Jobs {
        #[command(subcommand)]
        action: client::JobsAction,
        #[command(flatten)]
        remote: Remote,
    },
    /// Pause or resume one trigger of a job.
    Triggers {
        #[command(subcommand)]
        action: client::TriggersAction,
        #[command(flatten)]
        remote: Remote,
    },
    /// Run history: list, count, cancel.
    Runs {
        #[command(subcommand)]
        action: client::RunsAction,
        #[command(flatten)]
        remote: Remote,
    },
    /// The audit log: who changed what through the API.
    Audit {
        #[command(subcommand)]
        action: client::AuditAction,
        #[command(flatten)]
        remote: Remote,
    },
    /// Cron expressions, offline.
    Cron {
        #[command(subcommand)]
        action: offline::CronAction,
    },
    /// Schedule texts, offline.
    Schedule {
        #[command(subcommand)]
        action: offline::ScheduleAction,
    },
}

#[derive(Debug, Args)]
#[command(args_conflicts_with_subcommands = true)]
struct NodeCommand {
    #[command(subcommand)]
    action: Option<NodeAction>,
    #[command(flatten)]
    run: RunNode,
}

#[derive(Debug, Subcommand)]
enum NodeAction {
    /// Describe a running node: id, state, leadership, store, job types.
    Info {
        #[command(flatten)]
        remote: Remote,
    },
}

/// `sundial node`: run one node until SIGINT/SIGTERM.
#[derive(Debug, Clone, Args)]
pub(crate) struct RunNode {
    /// The node's TOML config (see `actors/sundial.example.toml`); none = embedded
    /// in-memory store, admin API on 127.0.0.1:7600.
    #[arg(long, value_name = "FILE")]
    pub(crate) config: Option<PathBuf>,
    /// Add demo jobs: a cron job every 5 s, an interval job, and a job that fails twice
    /// and succeeds on its third attempt.
    #[arg(long)]
    pub(crate) demo: bool,
    /// Log format (overrides the config's `[log] format`).
    #[arg(long, value_name = "FORMAT", value_parser = ["text", "json"])]
    pub(crate) log_format: Option<String>,
}

/// Writes one line of a command's output (see `outln!`).
fn write_line(line: std::fmt::Arguments<'_>) {
    use std::io::Write as _;
    let mut out = std::io::stdout().lock();
    match out.write_fmt(line).and_then(|()| out.write_all(b"\n")) {
        Ok(()) => {}
        Err(error) if error.kind() == std::io::ErrorKind::BrokenPipe => std::process::exit(0),
        Err(error) => {
            eprintln!("sundial: cannot write the output: {error}");
            std::process::exit(1);
        }
    }
}

fn main() -> ExitCode {
    sundial_actors::allocator::configure();
    let cli = Cli::parse();
    let code = match cli.command {
        Command::Node(NodeCommand { action: None, run }) => node::run(run),
        Command::Node(NodeCommand { action: Some(NodeAction::Info { remote }), .. }) => client::node_info(&remote),
        Command::Jobs { action, remote } => client::jobs(action, &remote),
        Command::Triggers { action, remote } => client::triggers(action, &remote),
        Command::Runs { action, remote } => client::runs(action, &remote),
        Command::Audit { action, remote } => client::audit(action, &remote),
        Command::Cron { action } => offline::cron(action),
        Command::Schedule { action } => offline::schedule(action),
    };
    ExitCode::from(code)
}
