//! The event log: what really happened, in order, written by the simulated jobs and by the
//! world (faults, operations and their results). The checkers read it; its hash is the
//! simulation's fingerprint.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::Arc;

use chrono::{DateTime, Utc};
use parking_lot::Mutex;
use sha2::{Digest, Sha256};
use sundial::job::{JobRun, RunCause};
use uuid::Uuid;

/// What a simulated job did, or what the world did.
#[derive(Debug, Clone, PartialEq)]
pub enum EventKind {
    /// A job began executing.
    Start(Box<StartFacts>),
    /// A job returned; `outcome` is what it returned (`ok`, `fail`, `panic`, `canceled`).
    End {
        /// The run.
        run: Uuid,
        /// The node it ran on.
        node: String,
        /// What the job returned.
        outcome: &'static str,
    },
    /// The job's node crashed while it ran: it ended at this instant.
    Killed {
        /// The run.
        run: Uuid,
        /// The node it ran on.
        node: String,
    },
    /// A fault, an operation or a result, in words.
    World(String),
}

/// A run's facts as the job saw them when it started.
#[derive(Debug, Clone, PartialEq)]
pub struct StartFacts {
    /// The run.
    pub run: JobRun,
    /// The node (id) it runs on.
    pub node: String,
    /// The node slot's incarnation number.
    pub incarnation: u32,
    /// The job ignores its cancellation token.
    pub ignores_cancel: bool,
}

/// One entry: true (simulated) time and what happened.
#[derive(Debug, Clone, PartialEq)]
pub struct Event {
    /// True time (not any node's skewed clock).
    pub at: DateTime<Utc>,
    /// What happened.
    pub kind: EventKind,
}

/// The shared, ordered event log. Cheap to clone.
#[derive(Debug, Clone, Default)]
pub struct EventLog {
    inner: Arc<Mutex<LogInner>>,
}

#[derive(Debug, Default)]
struct LogInner {
    events: Vec<Event>,
    /// The runs executing now, per node: run -> the incarnation it started in. Kept as
    /// events are pushed, so asking what a node runs does not scan a day's log.
    open: BTreeMap<String, BTreeMap<Uuid, u32>>,
}

impl EventLog {
    /// Appends an event.
    pub fn push(&self, at: DateTime<Utc>, kind: EventKind) {
        let mut inner = self.inner.lock();
        match &kind {
            EventKind::Start(facts) => {
                inner.open.entry(facts.node.clone()).or_default().insert(facts.run.id, facts.incarnation);
            }
            EventKind::End { run, node, .. } | EventKind::Killed { run, node } => {
                if let Some(open) = inner.open.get_mut(node) {
                    open.remove(run);
                }
            }
            EventKind::World(_) => {}
        }
        inner.events.push(Event { at, kind });
    }

    /// Appends a world event.
    pub fn world(&self, at: DateTime<Utc>, text: impl Into<String>) {
        self.push(at, EventKind::World(text.into()));
    }

    /// `f` of every event so far, read in place (the log of a long simulation holds
    /// millions of events: it is never copied).
    pub fn read<T>(&self, f: impl FnOnce(&[Event]) -> T) -> T {
        f(&self.inner.lock().events)
    }

    /// The runs that started on `node` in its incarnation `incarnation` and have neither
    /// ended nor been killed, in id order.
    pub fn in_flight(&self, node: &str, incarnation: u32) -> Vec<Uuid> {
        let inner = self.inner.lock();
        let Some(open) = inner.open.get(node) else { return Vec::new() };
        open.iter().filter(|(_, i)| **i == incarnation).map(|(run, _)| *run).collect()
    }

    /// Every event so far, leaving the log empty (the simulation's end).
    pub fn take(&self) -> Vec<Event> {
        let mut inner = self.inner.lock();
        inner.open.clear();
        std::mem::take(&mut inner.events)
    }
}

/// Writes an event's line (one per event, stable across processes: no addresses, ids or
/// hash-map orders) to `line`.
pub fn write_event(line: &mut String, event: &Event) {
    let at = event.at.timestamp_micros();
    match &event.kind {
        EventKind::Start(facts) => {
            let run = &facts.run;
            let cause = match run.cause {
                RunCause::Schedule => "schedule",
                RunCause::Manual => "manual",
                RunCause::Retry => "retry",
                RunCause::Recovery => "recovery",
            };
            let _ = write!(
                line,
                "{at} start {} {} {} sched={} {cause} attempt={} retry_of=",
                run.id,
                run.job,
                run.trigger.as_ref().map_or("-", |t| t.as_str()),
                run.scheduled_at.timestamp_micros(),
                run.attempt,
            );
            let _ = match run.retry_of {
                Some(id) => write!(line, "{id}"),
                None => write!(line, "-"),
            };
            let _ = write!(
                line,
                " on {}#{}{}",
                facts.node,
                facts.incarnation,
                if facts.ignores_cancel { " ignores-cancel" } else { "" },
            );
        }
        EventKind::End { run, node, outcome } => {
            let _ = write!(line, "{at} end {run} on {node}: {outcome}");
        }
        EventKind::Killed { run, node } => {
            let _ = write!(line, "{at} killed {run} on {node}");
        }
        EventKind::World(text) => {
            let _ = write!(line, "{at} {text}");
        }
    }
}

/// The trace, hashed line by line as it is written; the lines themselves are kept only
/// when asked for (a day of a large cluster is gigabytes of text).
pub struct Trace {
    hasher: Sha256,
    kept: Option<Vec<String>>,
    /// The line being written (one buffer for every line).
    line: String,
}

impl Trace {
    /// An empty trace that keeps its lines when `keep`.
    pub fn new(keep: bool) -> Self {
        Self { hasher: Sha256::new(), kept: keep.then(Vec::new), line: String::new() }
    }

    /// Appends the line `write` writes (without its newline) to the buffer it is given.
    pub fn push_with(&mut self, write: impl FnOnce(&mut String)) {
        self.line.clear();
        write(&mut self.line);
        if let Some(kept) = &mut self.kept {
            kept.push(self.line.clone());
        }
        self.line.push('\n');
        self.hasher.update(self.line.as_bytes());
    }

    /// The hash (SHA-256 over every line and its newline, lowercase hex) and the kept
    /// lines (none unless kept).
    pub fn finish(self) -> (String, Vec<String>) {
        let hex = self.hasher.finalize().iter().fold(String::with_capacity(64), |mut hex, byte| {
            let _ = write!(hex, "{byte:02x}");
            hex
        });
        (hex, self.kept.unwrap_or_default())
    }
}
