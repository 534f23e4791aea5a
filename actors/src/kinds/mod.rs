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

/// Checks a built-in kind's parameters in a definition: the job's data alone (what a
/// manual run gets) and merged with each trigger's data. Other job types pass.
///
/// # Errors
/// A message naming the trigger (if any) and the problem.
pub fn check(def: &JobDefinition) -> Result<(), String> {
    let check_one: fn(&JsonObject) -> Result<(), String> = match def.job_type.as_str() {
        shell::KIND => |d| params::<shell::ShellParams>(d).map(drop),
        http::KIND => |d| params::<http::HttpParams>(d).and_then(|p| p.check()),
        log::KIND => |d| params::<log::LogParams>(d).map(drop),
        _ => return Ok(()),
    };
    check_one(&def.data).map_err(|e| format!("data: {e}"))?;
    for trigger in &def.triggers {
        let merged = sundial::job::merge_data([&def.data, &trigger.data]);
        check_one(&merged).map_err(|e| format!("trigger '{}' data: {e}", trigger.name))?;
    }
    Ok(())
}

/// A kind's parameters from run data.
fn params<T: DeserializeOwned>(data: &JsonObject) -> Result<T, String> {
    serde_json::from_value(serde_json::Value::Object(data.clone())).map_err(|e| e.to_string())
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
