//! The audit log: who changed what through a node's management API, when, and with what
//! result. Entries are written by the admin API (the CLI goes through it) to the job
//! store, read newest first with filters, and expire with history
//! (`history_retention_days`).

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use uuid::Uuid;

use crate::error::SchedulingError;

/// A change an entry records.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AuditAction {
    /// A job added or replaced.
    Schedule,
    /// A job removed.
    Unschedule,
    /// A job paused.
    Pause,
    /// A job resumed.
    Resume,
    /// One trigger paused.
    PauseTrigger,
    /// One trigger resumed.
    ResumeTrigger,
    /// A run started here and waited for.
    Trigger,
    /// A run queued for any node.
    Enqueue,
    /// A run canceled.
    Cancel,
    /// A code job put back to its code definition.
    Restore,
}

impl AuditAction {
    /// Every action, in order.
    pub const ALL: [AuditAction; 10] = [
        AuditAction::Schedule,
        AuditAction::Unschedule,
        AuditAction::Pause,
        AuditAction::Resume,
        AuditAction::PauseTrigger,
        AuditAction::ResumeTrigger,
        AuditAction::Trigger,
        AuditAction::Enqueue,
        AuditAction::Cancel,
        AuditAction::Restore,
    ];

    /// Its name in the API (`pause_trigger`).
    pub fn as_str(self) -> &'static str {
        match self {
            AuditAction::Schedule => "schedule",
            AuditAction::Unschedule => "unschedule",
            AuditAction::Pause => "pause",
            AuditAction::Resume => "resume",
            AuditAction::PauseTrigger => "pause_trigger",
            AuditAction::ResumeTrigger => "resume_trigger",
            AuditAction::Trigger => "trigger",
            AuditAction::Enqueue => "enqueue",
            AuditAction::Cancel => "cancel",
            AuditAction::Restore => "restore",
        }
    }

    /// The action named `text`.
    pub fn parse(text: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|a| a.as_str() == text)
    }
}

/// One recorded change.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AuditEntry {
    /// Unique, from the node's entropy.
    pub id: Uuid,
    /// When the change was asked for (the node's clock).
    pub at: DateTime<Utc>,
    /// Who asked: the name of their token (`anonymous` on a node without tokens).
    pub actor: String,
    /// What they asked for.
    pub action: AuditAction,
    /// What it applied to: a job, `job/trigger`, or a run id.
    pub target: String,
    /// The node that served the request.
    pub node: String,
    /// `None` when it succeeded, else the error's code.
    pub error_code: Option<String>,
    /// The error's message.
    pub error_message: Option<String>,
}

/// The most entries one audit query returns.
pub const AUDIT_QUERY_LIMIT_MAX: u32 = 1000;

/// A query of the audit log: filters, then paging, newest first.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct AuditQuery {
    /// Only this actor's changes.
    pub actor: Option<String>,
    /// Only these actions (empty: any).
    pub actions: Vec<AuditAction>,
    /// Only changes to this target.
    pub target: Option<String>,
    /// Only failed (`true`) or succeeded (`false`) changes.
    pub failed: Option<bool>,
    /// From this instant (inclusive).
    pub from: Option<DateTime<Utc>>,
    /// Until this instant (exclusive).
    pub to: Option<DateTime<Utc>>,
    /// Matching entries to pass over first.
    pub skip: u32,
    /// At most this many (1 to [`AUDIT_QUERY_LIMIT_MAX`]).
    pub limit: u32,
}

impl Default for AuditQuery {
    fn default() -> Self {
        Self { actor: None, actions: Vec::new(), target: None, failed: None, from: None, to: None, skip: 0, limit: 100 }
    }
}

impl AuditQuery {
    /// Checks the paging.
    ///
    /// # Errors
    /// `SCHEDULING_VALIDATION_002` for a limit outside 1 to [`AUDIT_QUERY_LIMIT_MAX`].
    pub fn validate(&self) -> Result<(), SchedulingError> {
        if !(1..=AUDIT_QUERY_LIMIT_MAX).contains(&self.limit) {
            return Err(SchedulingError::InvalidPaging {
                reason: format!("limit {} is outside 1–{AUDIT_QUERY_LIMIT_MAX}", self.limit),
            });
        }
        Ok(())
    }

    /// Whether `entry` passes the filters (the time range is the scan's).
    pub fn matches(&self, entry: &AuditEntry) -> bool {
        self.actor.as_ref().is_none_or(|a| a == &entry.actor)
            && (self.actions.is_empty() || self.actions.contains(&entry.action))
            && self.target.as_ref().is_none_or(|t| t == &entry.target)
            && self.failed.is_none_or(|f| f == entry.error_code.is_some())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn actions_round_trip_their_names() {
        for action in AuditAction::ALL {
            assert_eq!(AuditAction::parse(action.as_str()), Some(action));
            let json = serde_json::to_string(&action).unwrap();
            assert_eq!(json, format!("\"{}\"", action.as_str()));
        }
        assert_eq!(AuditAction::parse("delete"), None);
    }

    #[test]
    fn queries_filter_and_check_their_paging() {
        let entry = AuditEntry {
            id: Uuid::from_u128(1),
            at: DateTime::UNIX_EPOCH,
            actor: "ops".into(),
            action: AuditAction::Pause,
            target: "nightly".into(),
            node: "n1".into(),
            error_code: None,
            error_message: None,
        };
        assert!(AuditQuery::default().matches(&entry));
        let by = |q: AuditQuery| q.matches(&entry);
        assert!(by(AuditQuery { actor: Some("ops".into()), ..AuditQuery::default() }));
        assert!(!by(AuditQuery { actor: Some("ci".into()), ..AuditQuery::default() }));
        assert!(by(AuditQuery { actions: vec![AuditAction::Resume, AuditAction::Pause], ..AuditQuery::default() }));
        assert!(!by(AuditQuery { actions: vec![AuditAction::Resume], ..AuditQuery::default() }));
        assert!(!by(AuditQuery { target: Some("other".into()), ..AuditQuery::default() }));
        assert!(!by(AuditQuery { failed: Some(true), ..AuditQuery::default() }));
        assert!(by(AuditQuery { failed: Some(false), ..AuditQuery::default() }));
        assert!(AuditQuery::default().validate().is_ok());
        for limit in [0, AUDIT_QUERY_LIMIT_MAX + 1] {
            let error = AuditQuery { limit, ..AuditQuery::default() }.validate().unwrap_err();
            assert_eq!(error.code(), "SCHEDULING_VALIDATION_002");
        }
    }
}
