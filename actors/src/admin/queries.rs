//! The query parameters of `GET /api/runs`, `/api/runs/count` and `/api/audit`: each
//! filter read and checked, every mistake a 400 naming the parameter.

use std::collections::BTreeSet;

use axum::extract::rejection::QueryRejection;
use axum::extract::Query;
use chrono::{DateTime, Utc};
use sundial::audit::{AuditAction, AuditQuery};
use sundial::job::{JobRunQuery, RunState};
use sundial::name::{JobName, TriggerName};

use super::error::ApiError;

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

    #[test]
    fn audit_queries_parse_every_filter_and_refuse_bad_ones() {
        let params =
            |pairs: &[(&str, &str)]| Ok(Query(pairs.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect()));
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
    fn run_queries_parse_every_filter_and_refuse_bad_ones() {
        let params =
            |pairs: &[(&str, &str)]| Ok(Query(pairs.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect()));
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
