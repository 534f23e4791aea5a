//! The query parameters of `GET /api/jobs`, `/api/runs`, `/api/runs/count` and
//! `/api/audit`: each filter read and checked, every mistake a 400 naming the parameter.

use std::collections::BTreeSet;

use axum::extract::rejection::QueryRejection;
use axum::extract::Query;
use chrono::{DateTime, Utc};
use sundial::audit::{AuditAction, AuditQuery};
use sundial::job::{JobOrigin, JobRunQuery, RunState};
use sundial::name::{JobName, TriggerName};
use sundial::store::JobStatus;

use super::error::ApiError;
use super::views::JobState;

/// Query parameters as axum gives them.
type Params = Result<Query<Vec<(String, String)>>, QueryRejection>;

/// The pairs of `params`; a parameter other than those in `repeatable` given twice is
/// refused (a second value would silently replace the first).
fn pairs(params: Params, repeatable: &[&str]) -> Result<Vec<(String, String)>, ApiError> {
    let Query(pairs) = params.map_err(|e| ApiError::bad_request(e.body_text()))?;
    let mut given = BTreeSet::new();
    for (key, _) in &pairs {
        if !repeatable.contains(&key.as_str()) && !given.insert(key.as_str()) {
            return Err(ApiError::bad_request(format!("{key}: given more than once; it takes one value")));
        }
    }
    Ok(pairs)
}

fn time(key: &str, value: &str) -> Result<DateTime<Utc>, ApiError> {
    DateTime::parse_from_rfc3339(value)
        .map(|t| t.with_timezone(&Utc))
        .map_err(|e| ApiError::bad_request(format!("{key}: '{value}' is not an RFC 3339 instant ({e})")))
}

fn boolean(key: &str, value: &str) -> Result<bool, ApiError> {
    match value {
        "true" => Ok(true),
        "false" => Ok(false),
        _ => Err(ApiError::bad_request(format!("{key}: '{value}' is not true or false"))),
    }
}

fn number<T: std::str::FromStr>(key: &str, value: &str, what: &str) -> Result<T, ApiError> {
    value.parse().map_err(|_| ApiError::bad_request(format!("{key}: '{value}' is not {what}")))
}

fn unknown(key: &str, known: &str) -> ApiError {
    ApiError::bad_request(format!("unknown parameter '{key}' ({known})"))
}

/// The filters of `GET /api/runs` and `/api/runs/count`.
pub(super) fn run_query(params: Params) -> Result<JobRunQuery, ApiError> {
    let mut query = JobRunQuery::default();
    for (key, value) in pairs(params, &["state"])? {
        match key.as_str() {
            "job" => {
                query.job = Some(
                    JobName::new(value.clone()).map_err(|e| ApiError::bad_request(format!("job: '{value}': {e}")))?,
                )
            }
            "state" => {
                for part in value.split(',').map(str::trim).filter(|p| !p.is_empty()) {
                    query.states.insert(run_state(part)?);
                }
            }
            "from" => query.from = Some(time(&key, &value)?),
            "to" => query.to = Some(time(&key, &value)?),
            "trigger" => {
                query.trigger = Some(
                    TriggerName::new(value.clone())
                        .map_err(|e| ApiError::bad_request(format!("trigger: '{value}': {e}")))?,
                )
            }
            "node" => query.node = Some(value),
            "has_error" => query.has_error = Some(boolean(&key, &value)?),
            "skip" => query.skip = number(&key, &value, "an integer")?,
            "limit" => query.limit = number(&key, &value, "an integer")?,
            other => return Err(unknown(other, "job, state, from, to, trigger, node, has_error, skip, limit")),
        }
    }
    Ok(query)
}

fn run_state(text: &str) -> Result<RunState, ApiError> {
    const STATES: [RunState; 5] =
        [RunState::Running, RunState::Succeeded, RunState::Failed, RunState::Canceled, RunState::Lost];
    STATES.into_iter().find(|s| format!("{s:?}").eq_ignore_ascii_case(text)).ok_or_else(|| {
        ApiError::bad_request(format!("state: '{text}' is not one of running, succeeded, failed, canceled, lost"))
    })
}

/// The filters and page of `GET /api/jobs`.
#[derive(Debug, Default)]
pub(super) struct JobListQuery {
    /// Text in the job's name, type or description, any case (kept in lower case).
    pub(super) text: Option<String>,
    /// Only jobs in these states (empty = any).
    pub(super) states: BTreeSet<JobState>,
    /// Only jobs of these types (empty = any).
    pub(super) types: BTreeSet<String>,
    /// Only jobs of these origins (empty = any).
    pub(super) origins: BTreeSet<JobOrigin>,
    /// Matching jobs to skip.
    pub(super) skip: usize,
    /// Most jobs to return (1–1000); all when not given.
    pub(super) limit: Option<usize>,
}

impl JobListQuery {
    /// Whether `status` passes the filters.
    pub(super) fn matches(&self, status: &JobStatus) -> bool {
        let def = &status.definition;
        let text = self.text.as_deref().is_none_or(|text| {
            def.name.as_str().to_lowercase().contains(text)
                || def.job_type.as_str().to_lowercase().contains(text)
                || def.description.as_deref().is_some_and(|d| d.to_lowercase().contains(text))
        });
        text && (self.states.is_empty() || self.states.contains(&JobState::of(status)))
            && (self.types.is_empty() || self.types.contains(def.job_type.as_str()))
            && (self.origins.is_empty() || self.origins.contains(&status.origin))
    }
}

/// Values of a filter that may repeat and list several, comma separated.
fn each(value: &str) -> impl Iterator<Item = &str> {
    value.split(',').map(str::trim).filter(|p| !p.is_empty())
}

pub(super) fn job_query(params: Params) -> Result<JobListQuery, ApiError> {
    let mut query = JobListQuery::default();
    for (key, value) in pairs(params, &["state", "type", "origin"])? {
        match key.as_str() {
            "q" => query.text = Some(value.trim().to_lowercase()).filter(|t| !t.is_empty()),
            "state" => {
                for part in each(&value) {
                    let state = JobState::ALL.into_iter().find(|s| s.as_str().eq_ignore_ascii_case(part));
                    query.states.insert(state.ok_or_else(|| {
                        let names: Vec<&str> = JobState::ALL.iter().map(|s| s.as_str()).collect();
                        ApiError::bad_request(format!("state: '{part}' is not one of {}", names.join(", ")))
                    })?);
                }
            }
            "type" => query.types.extend(each(&value).map(str::to_owned)),
            "origin" => {
                for part in each(&value) {
                    const ORIGINS: [JobOrigin; 3] = [JobOrigin::Code, JobOrigin::Overridden, JobOrigin::Runtime];
                    let origin = ORIGINS.into_iter().find(|o| format!("{o:?}").eq_ignore_ascii_case(part));
                    query.origins.insert(origin.ok_or_else(|| {
                        ApiError::bad_request(format!("origin: '{part}' is not one of code, overridden, runtime"))
                    })?);
                }
            }
            "skip" => query.skip = number(&key, &value, "a whole number")?,
            "limit" => {
                let limit: usize = number(&key, &value, "a whole number")?;
                if !(1..=1000).contains(&limit) {
                    return Err(ApiError::bad_request(format!("limit: {limit} is not between 1 and 1000")));
                }
                query.limit = Some(limit);
            }
            other => return Err(unknown(other, "q, state, type, origin, skip, limit")),
        }
    }
    Ok(query)
}

/// The filters of `GET /api/audit`.
pub(super) fn audit_query(params: Params) -> Result<AuditQuery, ApiError> {
    let mut query = AuditQuery::default();
    for (key, value) in pairs(params, &["action"])? {
        match key.as_str() {
            "actor" => query.actor = Some(value),
            "action" => {
                for part in value.split(',').map(str::trim).filter(|p| !p.is_empty()) {
                    let action = AuditAction::parse(part).ok_or_else(|| {
                        let names: Vec<&str> = AuditAction::ALL.iter().map(|a| a.as_str()).collect();
                        ApiError::bad_request(format!("action: '{part}' is not one of {}", names.join(", ")))
                    })?;
                    if !query.actions.contains(&action) {
                        query.actions.push(action);
                    }
                }
            }
            "target" => query.target = Some(value),
            "failed" => query.failed = Some(boolean(&key, &value)?),
            "from" => query.from = Some(time(&key, &value)?),
            "to" => query.to = Some(time(&key, &value)?),
            "skip" => query.skip = number(&key, &value, "a whole number")?,
            "limit" => query.limit = number(&key, &value, "a whole number")?,
            other => return Err(unknown(other, "actor, action, target, failed, from, to, skip, limit")),
        }
    }
    Ok(query)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::admin::error;

    /// Query parameters as axum gives them.
    fn params(pairs: &[(&str, &str)]) -> Params {
        Ok(Query(pairs.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect()))
    }

    #[test]
    fn audit_queries_parse_every_filter_and_refuse_bad_ones() {
        let q = audit_query(params(&[
            ("actor", "ops"),
            ("action", "pause,resume"),
            ("action", "pause_trigger"),
            ("target", "nightly"),
            ("failed", "false"),
            ("from", "2026-01-01T00:00:00Z"),
            ("skip", "5"),
            ("limit", "7"),
        ]))
        .unwrap();
        assert_eq!(q.actions, [AuditAction::Pause, AuditAction::Resume, AuditAction::PauseTrigger]);
        assert_eq!((q.actor.as_deref(), q.failed, q.skip, q.limit), (Some("ops"), Some(false), 5, 7));
        for bad in [
            ("action", "delete"),
            ("failed", "yes"),
            ("from", "yesterday"),
            ("limit", "-1"),
            ("skip", "many"),
            ("who", "x"),
            ("limit", "99999999999"),
        ] {
            let e = audit_query(params(&[bad])).unwrap_err();
            assert_eq!(e.body().code, error::BAD_REQUEST, "{bad:?}");
        }
        let e = audit_query(params(&[("actor", "a"), ("actor", "b")])).unwrap_err();
        assert_eq!(e.body().message, "actor: given more than once; it takes one value");
    }

    #[test]
    fn job_queries_parse_every_filter_and_refuse_bad_ones() {
        let q = job_query(params(&[
            ("q", " Night "),
            ("state", "paused,Error"),
            ("state", "idle"),
            ("type", "shell,http"),
            ("origin", "code"),
            ("skip", "50"),
            ("limit", "25"),
        ]))
        .unwrap();
        assert_eq!(q.text.as_deref(), Some("night"), "trimmed, in lower case for matching");
        assert_eq!(q.states, BTreeSet::from([JobState::Paused, JobState::Error, JobState::Idle]));
        assert_eq!(q.types.len(), 2);
        assert_eq!(q.origins, BTreeSet::from([JobOrigin::Code]));
        assert_eq!((q.skip, q.limit), (50, Some(25)));
        assert_eq!(job_query(params(&[("q", "  ")])).unwrap().text, None);
        for bad in [
            ("state", "sleeping"),
            ("origin", "elsewhere"),
            ("limit", "0"),
            ("limit", "1001"),
            ("skip", "-1"),
            ("sort", "name"),
        ] {
            let e = job_query(params(&[bad])).unwrap_err();
            assert_eq!(e.body().code, error::BAD_REQUEST, "{bad:?}");
        }
    }

    #[test]
    fn run_queries_parse_every_filter_and_refuse_bad_ones() {
        let q = run_query(params(&[
            ("job", "a"),
            ("state", "failed,Running"),
            ("from", "2026-01-01T00:00:00Z"),
            ("has_error", "true"),
            ("skip", "5"),
            ("limit", "7"),
        ]))
        .unwrap();
        assert_eq!(q.states.len(), 2);
        assert_eq!((q.skip, q.limit, q.has_error), (5, 7, Some(true)));
        for bad in [("state", "done"), ("from", "yesterday"), ("limit", "many"), ("colour", "red"), ("job", "A B")] {
            let e = run_query(params(&[bad])).unwrap_err();
            assert_eq!(e.body().code, error::BAD_REQUEST, "{bad:?}");
        }
        // `state` may repeat (its values add up); the others take one value.
        let q = run_query(params(&[("state", "failed"), ("state", "lost")])).unwrap();
        assert_eq!(q.states.len(), 2);
        let e = run_query(params(&[("job", "a"), ("state", "lost"), ("job", "b")])).unwrap_err();
        assert_eq!(e.body().message, "job: given more than once; it takes one value");
    }
}
