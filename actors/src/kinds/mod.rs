//! The built-in job kinds of the `sundial` node: `shell`, `http` and `log`.
//!
//! Each is a job type registered under its plain name; a job's data (merged with its
//! trigger's and the request's) carries the kind's parameters. Parameters are checked when
//! a job is loaded or scheduled ([`check`]), and again at run time, where bad data fails the
//! run with code `INVALID_DATA` rather than panicking.

pub mod http;
pub mod log;
pub mod shell;

use serde::de::DeserializeOwned;
use sundial::job::{JobDefinition, JsonObject};

use crate::job::JobFailure;
use crate::registry::RegistryBuilder;

/// The type keys of the built-in kinds.
pub const KINDS: [&str; 3] = [shell::KIND, http::KIND, log::KIND];

/// Registers the built-in kinds.
pub fn register(builder: RegistryBuilder) -> RegistryBuilder {
    let client = http::client();
    builder
        .add_job_type_as(shell::KIND, || shell::ShellJob)
        .add_job_type_as(http::KIND, move || http::HttpJob::new(client.clone()))
        .add_job_type_as(log::KIND, || log::LogJob)
}

/// Checks a definition's data as the node runs it: secret references in any job's data
/// (see [`crate::secrets::check`]), and a built-in kind's parameters, in the job's data
/// alone (what a manual run gets) and merged with each trigger's data.
///
/// # Errors
/// A message naming the trigger (if any) and the problem.
pub fn check(def: &JobDefinition) -> Result<(), String> {
    let job_type = Some(def.job_type.as_str());
    crate::secrets::check(job_type, &def.data).map_err(|e| format!("data.{e}"))?;
    for trigger in &def.triggers {
        crate::secrets::check(job_type, &trigger.data).map_err(|e| format!("trigger '{}' data.{e}", trigger.name))?;
    }
    // The data with references read as runs start ($env, $file) skipped by content checks.
    let check_one: fn(&JsonObject, &[&str]) -> Result<(), String> = match def.job_type.as_str() {
        shell::KIND => |d, _| params::<shell::ShellParams>(d).map(drop),
        http::KIND => |d, late| params::<http::HttpParams>(d).and_then(|p| p.check(late)),
        log::KIND => |d, _| params::<log::LogParams>(d).map(drop),
        _ => return Ok(()),
    };
    // References are checked by their stand-ins; a message never quotes a secret value.
    let check_data = |data: &JsonObject| {
        check_one(&crate::secrets::stand_ins(data), &crate::secrets::read_at_start(data))
            .map_err(|e| crate::secrets::scrub_quoted(job_type, data, &e))
    };
    check_data(&def.data).map_err(|e| format!("data: {e}"))?;
    for trigger in &def.triggers {
        let merged = sundial::job::merge_data([&def.data, &trigger.data]);
        check_data(&merged).map_err(|e| format!("trigger '{}' data: {e}", trigger.name))?;
    }
    Ok(())
}

/// A kind's parameters from run data; an error names the field (`success[0]: ...`).
fn params<T: DeserializeOwned>(data: &JsonObject) -> Result<T, String> {
    crate::spec::deserialize_at(serde_json::Value::Object(data.clone()), "")
}

/// A kind's parameters from run data, or the run's failure.
fn run_params<T: DeserializeOwned>(data: &JsonObject) -> Result<T, JobFailure> {
    params(data).map_err(|e| JobFailure::with_code("INVALID_DATA", format!("bad job data: {e}")))
}

/// The last `limit` bytes of `bytes` as text, cut at a character boundary, trimmed.
fn tail(bytes: &[u8], limit: usize) -> String {
    let start = bytes.len().saturating_sub(limit);
    let text = String::from_utf8_lossy(&bytes[start..]);
    let text = text.trim();
    if start > 0 {
        format!("…{}", text.trim_start_matches('\u{fffd}'))
    } else {
        text.to_owned()
    }
}

#[cfg(test)]
mod tests {
    use sundial::job::JobTypeKey;
    use sundial::name::JobName;

    use super::*;

    /// `check`'s verdict on a job of `kind` with `data`.
    fn checked(kind: &str, data: serde_json::Value) -> Result<(), String> {
        let serde_json::Value::Object(data) = data else { panic!("data is an object") };
        let def = JobDefinition::new(JobName::new("j").unwrap(), JobTypeKey::new(kind).unwrap()).with_data(data);
        check(&def)
    }

    #[test]
    fn bad_parameters_name_the_field() {
        let url = "http://127.0.0.1:1/";
        assert_eq!(checked("http", serde_json::json!({"url": url, "success": ["2xx", 304]})), Ok(()));
        assert_eq!(
            checked("http", serde_json::json!({"url": url, "success": [200, 70000]})),
            Err("data: success[1]: success status 70000 is not between 100 and 599".into())
        );
        assert_eq!(
            checked("http", serde_json::json!({"url": url, "success": [-1]})),
            Err("data: success[0]: success status -1 is not between 100 and 599".into())
        );
        let error = checked("http", serde_json::json!({"url": url, "success": [true]})).unwrap_err();
        assert_eq!(
            error,
            "data: success[0]: invalid type: boolean `true`, expected a status such as 200, or a class such as \"2xx\""
        );
        let error = checked("http", serde_json::json!({"url": url, "success": ["7xx"]})).unwrap_err();
        assert!(error.contains("'7xx' is neither a status nor a class"), "{error}");
        let error = checked("http", serde_json::json!({"url": url, "timeout": "soon"})).unwrap_err();
        assert!(error.starts_with("data: timeout: 'soon' is not a duration"), "{error}");
        let error = checked("shell", serde_json::json!({"program": "ls", "args": [1]})).unwrap_err();
        assert!(error.starts_with("data: args[0]: invalid type: integer `1`"), "{error}");
        assert_eq!(checked("shell", serde_json::json!({})), Err("data: missing field `program`".into()));
        assert_eq!(checked("someone.elses", serde_json::json!({"anything": 1})), Ok(()));
        // Secret references stand in for text; malformed ones are refused for any type.
        let with_secrets = serde_json::json!({"program": {"$env": "PROGRAM"}, "env": {"TOKEN": {"$file": "/run/t"}}});
        assert_eq!(checked("shell", with_secrets), Ok(()));
        let error = checked("someone.elses", serde_json::json!({"key": {"$env": 7}})).unwrap_err();
        assert!(error.starts_with("data.key: $env takes"), "{error}");
        let error = checked("http", serde_json::json!({"url": url, "headers": {"a": "[redacted]"}})).unwrap_err();
        assert!(error.starts_with("data.headers.a: holds '[redacted]'"), "{error}");
    }

    #[test]
    fn a_refused_value_in_a_secret_place_is_not_quoted() {
        let url = "http://127.0.0.1:1/";
        let refused = [
            ("shell", serde_json::json!({"program": "ls", "env": {"TOKEN": 4711}}), "4711"),
            ("shell", serde_json::json!({"program": "ls", "env": "TOKEN=hunter2"}), "hunter2"),
            ("shell", serde_json::json!({"program": "ls", "env": {"A": ["s3cr3t"]}}), "s3cr3t"),
            ("shell", serde_json::json!({"program": {"$secret": 42}}), "42"),
            ("http", serde_json::json!({"url": url, "headers": {"Authorization": true}}), "true"),
            ("http", serde_json::json!({"url": url, "headers": {"X": "bad\nvalue-s3cr3t"}}), "s3cr3t"),
            ("http", serde_json::json!({"url": {"$secret": "ftp://user:s3cr3t@host/"}}), "s3cr3t"),
            ("http", serde_json::json!({"url": url, "method": {"$secret": "BAD METHOD"}}), "BAD METHOD"),
        ];
        for (kind, data, secret) in refused {
            let error = checked(kind, data.clone()).unwrap_err();
            assert!(!error.contains(secret), "{data}: {error}");
            assert!(error.starts_with("data: "), "{data}: {error}");
        }
        // Values outside secret places are still quoted, to say what is wrong.
        let error = checked("http", serde_json::json!({"url": "ftp://host/"})).unwrap_err();
        assert!(error.contains("'ftp://host/'"), "{error}");
    }

    #[test]
    fn values_read_as_runs_start_are_checked_by_type_only() {
        let from_env = serde_json::json!({"url": {"$env": "URL"}, "method": {"$file": "/run/method"}});
        assert_eq!(checked("http", from_env), Ok(()));
        let error = checked("http", serde_json::json!({"url": {"$env": "URL"}, "timeout": "soon"})).unwrap_err();
        assert!(error.starts_with("data: timeout:"), "{error}");
    }
}
