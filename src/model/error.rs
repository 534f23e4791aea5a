//! The stable error codes of SPEC §14, in one table, and [`SchedulingError`].
//!
//! Codes are never renamed or reused. Each carries an HTTP status, whether retrying the
//! same request later may succeed, and a message in English and Simplified Chinese.

use std::fmt;

/// A language for human-readable messages.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Language {
    /// English.
    English,
    /// Simplified Chinese.
    SimplifiedChinese,
}

/// One of the 16 stable error codes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[non_exhaustive]
pub enum ErrorCode {
    /// `SCHEDULING_NOTFOUND_001`: job not registered.
    JobNotFound,
    /// `SCHEDULING_NOTFOUND_002`: job type not registered.
    JobTypeNotFound,
    /// `SCHEDULING_NOTFOUND_003`: trigger not found.
    TriggerNotFound,
    /// `SCHEDULING_NOTFOUND_004`: run not found or already finished.
    RunNotFound,
    /// `SCHEDULING_NOTFOUND_005`: job has no code definition, cannot restore.
    NoCodeDefinition,
    /// `SCHEDULING_VALIDATION_001`: invalid job definition.
    InvalidDefinition,
    /// `SCHEDULING_VALIDATION_002`: run query paging out of range.
    InvalidPaging,
    /// `SCHEDULING_CONFLICT_001`: job running and not concurrent.
    JobRunning,
    /// `SCHEDULING_CONFLICT_002`: leader lease held by another holder.
    LeaseHeld,
    /// `SCHEDULING_CONFLICT_003`: run canceled.
    RunCanceled,
    /// `SCHEDULING_UNAVAILABLE_001`: scheduler not running on this node.
    SchedulerNotRunning,
    /// `SCHEDULING_UNAVAILABLE_002`: leader-election store unreachable or timed out.
    LeaderStoreUnavailable,
    /// `SCHEDULING_UNAVAILABLE_003`: job store unreachable.
    StoreUnavailable,
    /// `SCHEDULING_UNAVAILABLE_004`: job store full (in-memory history all running).
    StoreFull,
    /// `SCHEDULING_TIMEOUT_001`: run exceeded its timeout.
    RunTimedOut,
    /// `SCHEDULING_UNEXPECTED_001`: job panicked / unhandled error.
    Unexpected,
}

/// What the table says about one code.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ErrorInfo {
    /// The stable string, e.g. `SCHEDULING_NOTFOUND_001`.
    pub code: &'static str,
    /// The HTTP status the admin API answers with.
    pub http_status: u16,
    /// Whether the same request may succeed later without change.
    pub retryable: bool,
    /// The English message.
    pub en: &'static str,
    /// The Simplified Chinese message.
    pub zh: &'static str,
}

/// Every code, in table order.
pub const ALL_ERROR_CODES: [ErrorCode; 16] = [
    ErrorCode::JobNotFound,
    ErrorCode::JobTypeNotFound,
    ErrorCode::TriggerNotFound,
    ErrorCode::RunNotFound,
    ErrorCode::NoCodeDefinition,
    ErrorCode::InvalidDefinition,
    ErrorCode::InvalidPaging,
    ErrorCode::JobRunning,
    ErrorCode::LeaseHeld,
    ErrorCode::RunCanceled,
    ErrorCode::SchedulerNotRunning,
    ErrorCode::LeaderStoreUnavailable,
    ErrorCode::StoreUnavailable,
    ErrorCode::StoreFull,
    ErrorCode::RunTimedOut,
    ErrorCode::Unexpected,
];

const fn info(code: &'static str, http_status: u16, retryable: bool, en: &'static str, zh: &'static str) -> ErrorInfo {
    ErrorInfo { code, http_status, retryable, en, zh }
}

impl ErrorCode {
    /// The table row for this code.
    pub const fn info(self) -> ErrorInfo {
        match self {
            Self::JobNotFound => info("SCHEDULING_NOTFOUND_001", 404, false, "job not registered", "作业未登记"),
            Self::JobTypeNotFound => {
                info("SCHEDULING_NOTFOUND_002", 404, false, "job type not registered", "作业类型未登记")
            }
            Self::TriggerNotFound => info("SCHEDULING_NOTFOUND_003", 404, false, "trigger not found", "触发器不存在"),
            Self::RunNotFound => {
                info("SCHEDULING_NOTFOUND_004", 404, false, "run not found or already finished", "运行不存在或已结束")
            }
            Self::NoCodeDefinition => info(
                "SCHEDULING_NOTFOUND_005",
                404,
                false,
                "job has no code definition, cannot restore",
                "作业没有代码定义，无法还原",
            ),
            Self::InvalidDefinition => {
                info("SCHEDULING_VALIDATION_001", 400, false, "invalid job definition", "作业定义无效")
            }
            Self::InvalidPaging => info(
                "SCHEDULING_VALIDATION_002",
                400,
                false,
                "run query paging out of range",
                "运行查询的分页参数超出范围",
            ),
            Self::JobRunning => info(
                "SCHEDULING_CONFLICT_001",
                409,
                true,
                "job is running and does not allow concurrent runs",
                "作业正在运行且不允许并发",
            ),
            Self::LeaseHeld => info(
                "SCHEDULING_CONFLICT_002",
                409,
                true,
                "leader lease is held by another holder",
                "领导租约被其他持有者占用",
            ),
            Self::RunCanceled => info("SCHEDULING_CONFLICT_003", 409, false, "run canceled", "运行已取消"),
            Self::SchedulerNotRunning => info(
                "SCHEDULING_UNAVAILABLE_001",
                503,
                true,
                "scheduler is not running on this node",
                "本节点的调度器未在运行",
            ),
            Self::LeaderStoreUnavailable => info(
                "SCHEDULING_UNAVAILABLE_002",
                503,
                true,
                "leader-election store unreachable or timed out",
                "领导选举存储不可达或超时",
            ),
            Self::StoreUnavailable => {
                info("SCHEDULING_UNAVAILABLE_003", 503, true, "job store unreachable", "作业存储不可达")
            }
            Self::StoreFull => info(
                "SCHEDULING_UNAVAILABLE_004",
                503,
                true,
                "job store full: every kept run is still running",
                "作业存储已满：保留的运行都仍在进行",
            ),
            Self::RunTimedOut => {
                info("SCHEDULING_TIMEOUT_001", 504, false, "run exceeded its timeout", "运行超过执行时限")
            }
            Self::Unexpected => info(
                "SCHEDULING_UNEXPECTED_001",
                500,
                false,
                "job panicked or failed with an unhandled error",
                "作业发生未处理的异常",
            ),
        }
    }

    /// The stable string.
    pub const fn as_str(self) -> &'static str {
        self.info().code
    }

    /// The code whose stable string is `code`.
    pub fn from_code(code: &str) -> Option<ErrorCode> {
        ALL_ERROR_CODES.into_iter().find(|c| c.as_str() == code)
    }

    /// The table message in `language`.
    pub const fn message(self, language: Language) -> &'static str {
        match language {
            Language::English => self.info().en,
            Language::SimplifiedChinese => self.info().zh,
        }
    }
}

impl fmt::Display for ErrorCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// An error of the scheduling API: one variant per stable code, with the detail that
/// makes it actionable. `Display` is `CODE: message: detail` in English.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SchedulingError {
    /// The job is not registered.
    #[error("{}: {}: '{job}'", ErrorCode::JobNotFound, ErrorCode::JobNotFound.info().en)]
    JobNotFound {
        /// The job name asked for.
        job: String,
    },
    /// The job type is not registered on this node.
    #[error("{}: {}: '{job_type}'", ErrorCode::JobTypeNotFound, ErrorCode::JobTypeNotFound.info().en)]
    JobTypeNotFound {
        /// The type key asked for.
        job_type: String,
    },
    /// The trigger does not exist.
    #[error("{}: {}: '{job}/{trigger}'", ErrorCode::TriggerNotFound, ErrorCode::TriggerNotFound.info().en)]
    TriggerNotFound {
        /// The job name.
        job: String,
        /// The trigger name.
        trigger: String,
    },
    /// The run does not exist or has finished.
    #[error("{}: {}: {run_id}", ErrorCode::RunNotFound, ErrorCode::RunNotFound.info().en)]
    RunNotFound {
        /// The run id asked for.
        run_id: String,
    },
    /// The job has no code definition to restore.
    #[error("{}: {}: '{job}'", ErrorCode::NoCodeDefinition, ErrorCode::NoCodeDefinition.info().en)]
    NoCodeDefinition {
        /// The job name.
        job: String,
    },
    /// The job definition is invalid.
    #[error("{}: {}: {reason}", ErrorCode::InvalidDefinition, ErrorCode::InvalidDefinition.info().en)]
    InvalidDefinition {
        /// What is wrong.
        reason: String,
    },
    /// A run query's paging is out of range.
    #[error("{}: {}: {reason}", ErrorCode::InvalidPaging, ErrorCode::InvalidPaging.info().en)]
    InvalidPaging {
        /// What is out of range.
        reason: String,
    },
    /// The job is running and does not allow concurrent runs.
    #[error("{}: {}: '{job}'", ErrorCode::JobRunning, ErrorCode::JobRunning.info().en)]
    JobRunning {
        /// The job name.
        job: String,
    },
    /// The leader lease is held by someone else.
    #[error("{}: {}: resource '{resource}'", ErrorCode::LeaseHeld, ErrorCode::LeaseHeld.info().en)]
    LeaseHeld {
        /// The lease resource.
        resource: String,
    },
    /// The run was canceled.
    #[error("{}: {}: {run_id}", ErrorCode::RunCanceled, ErrorCode::RunCanceled.info().en)]
    RunCanceled {
        /// The run id.
        run_id: String,
    },
    /// The scheduler is not running on this node (not started, or stopping).
    #[error("{}: {}: {reason}", ErrorCode::SchedulerNotRunning, ErrorCode::SchedulerNotRunning.info().en)]
    SchedulerNotRunning {
        /// Why (e.g. "not started", "stopping").
        reason: String,
    },
    /// The leader-election store could not be reached.
    #[error("{}: {}: {reason}", ErrorCode::LeaderStoreUnavailable, ErrorCode::LeaderStoreUnavailable.info().en)]
    LeaderStoreUnavailable {
        /// The underlying failure.
        reason: String,
    },
    /// The job store could not be reached.
    #[error("{}: {}: {reason}", ErrorCode::StoreUnavailable, ErrorCode::StoreUnavailable.info().en)]
    StoreUnavailable {
        /// The underlying failure.
        reason: String,
    },
    /// The in-memory store's history is full of running runs.
    #[error("{}: {}: capacity {capacity}", ErrorCode::StoreFull, ErrorCode::StoreFull.info().en)]
    StoreFull {
        /// The configured maximum number of kept runs.
        capacity: usize,
    },
    /// The run exceeded its timeout.
    #[error("{}: {}: timeout {timeout_ms} ms", ErrorCode::RunTimedOut, ErrorCode::RunTimedOut.info().en)]
    RunTimedOut {
        /// The timeout that passed, in milliseconds.
        timeout_ms: u64,
    },
    /// The job panicked or failed in a way it did not handle.
    #[error("{}: {}: {message}", ErrorCode::Unexpected, ErrorCode::Unexpected.info().en)]
    Unexpected {
        /// The panic payload or error text.
        message: String,
    },
}

impl SchedulingError {
    /// This error's code.
    pub fn error_code(&self) -> ErrorCode {
        match self {
            Self::JobNotFound { .. } => ErrorCode::JobNotFound,
            Self::JobTypeNotFound { .. } => ErrorCode::JobTypeNotFound,
            Self::TriggerNotFound { .. } => ErrorCode::TriggerNotFound,
            Self::RunNotFound { .. } => ErrorCode::RunNotFound,
            Self::NoCodeDefinition { .. } => ErrorCode::NoCodeDefinition,
            Self::InvalidDefinition { .. } => ErrorCode::InvalidDefinition,
            Self::InvalidPaging { .. } => ErrorCode::InvalidPaging,
            Self::JobRunning { .. } => ErrorCode::JobRunning,
            Self::LeaseHeld { .. } => ErrorCode::LeaseHeld,
            Self::RunCanceled { .. } => ErrorCode::RunCanceled,
            Self::SchedulerNotRunning { .. } => ErrorCode::SchedulerNotRunning,
            Self::LeaderStoreUnavailable { .. } => ErrorCode::LeaderStoreUnavailable,
            Self::StoreUnavailable { .. } => ErrorCode::StoreUnavailable,
            Self::StoreFull { .. } => ErrorCode::StoreFull,
            Self::RunTimedOut { .. } => ErrorCode::RunTimedOut,
            Self::Unexpected { .. } => ErrorCode::Unexpected,
        }
    }

    /// The stable code string, e.g. `SCHEDULING_VALIDATION_001`.
    pub fn code(&self) -> &'static str {
        self.error_code().as_str()
    }

    /// The HTTP status the admin API answers with.
    pub fn http_status(&self) -> u16 {
        self.error_code().info().http_status
    }

    /// Whether the same request may succeed later without change (store or leader
    /// trouble, a running non-concurrent job, a node not serving yet).
    pub fn is_retryable(&self) -> bool {
        self.error_code().info().retryable
    }

    /// A shorthand for [`SchedulingError::InvalidDefinition`].
    pub fn invalid_definition(reason: impl Into<String>) -> Self {
        Self::InvalidDefinition { reason: reason.into() }
    }

    /// The message in `language`: the table message, then this error's detail.
    pub fn localized(&self, language: Language) -> String {
        let english = self.to_string();
        let prefix = format!("{}: {}", self.code(), self.error_code().info().en);
        let detail = english.strip_prefix(&prefix).unwrap_or_default();
        format!("{}: {}{}", self.code(), self.error_code().message(language), detail)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_is_complete_and_codes_are_unique() {
        let mut codes: Vec<&str> = ALL_ERROR_CODES.iter().map(|c| c.as_str()).collect();
        codes.sort_unstable();
        codes.dedup();
        assert_eq!(codes.len(), 16);
        for code in ALL_ERROR_CODES {
            assert_eq!(ErrorCode::from_code(code.as_str()), Some(code));
            assert!(code.as_str().starts_with("SCHEDULING_"));
            assert!(!code.info().en.is_empty() && !code.info().zh.is_empty());
        }
        assert_eq!(ErrorCode::from_code("SCHEDULING_NOPE_001"), None);
    }

    #[test]
    fn statuses_named_by_the_spec() {
        assert_eq!(SchedulingError::InvalidPaging { reason: "limit 0".into() }.http_status(), 400);
        assert_eq!(SchedulingError::SchedulerNotRunning { reason: "stopping".into() }.http_status(), 503);
        assert_eq!(ErrorCode::JobNotFound.info().http_status, 404);
    }

    #[test]
    fn messages_carry_code_and_detail_in_both_languages() {
        let err = SchedulingError::invalid_definition("duplicate trigger name 'default'");
        assert_eq!(err.code(), "SCHEDULING_VALIDATION_001");
        assert_eq!(
            err.to_string(),
            "SCHEDULING_VALIDATION_001: invalid job definition: duplicate trigger name 'default'"
        );
        assert_eq!(
            err.localized(Language::SimplifiedChinese),
            "SCHEDULING_VALIDATION_001: 作业定义无效: duplicate trigger name 'default'"
        );
        assert!(!err.is_retryable());
        assert!(SchedulingError::StoreUnavailable { reason: "timeout".into() }.is_retryable());
    }
}
