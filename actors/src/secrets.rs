//! Secrets in job data: what is never shown, and where a run's secrets come from.
//!
//! Any value in a job's, a trigger's or a request's data may be a secret reference, an
//! object with one of these keys:
//!
//! - `{"$secret": <value>}`: the value is stored with the job, and shown only as
//!   `{"$secret": "[redacted]"}`;
//! - `{"$env": "NAME"}`: the variable `NAME` of the running node's environment;
//! - `{"$file": "/path"}`: the contents of a file on the running node, without a trailing
//!   newline (a mounted Kubernetes or Docker secret).
//!
//! `$env` and `$file` keep the secret out of the store altogether: only its name is
//! stored and shown. A run's job sees every reference replaced by its value, read as the
//! job starts (so a rotated secret is picked up by the next run); a reference that cannot
//! be read fails the run with code [`UNAVAILABLE`], naming it.
//!
//! Shown data is redacted: [`redact`] replaces `$secret` values, and by default every
//! value of a shell job's `env` and an http job's `headers` (where credentials are usually
//! put), with [`REDACTED`]. A run's error message has the values of its secrets (its
//! references' and its `env` and `headers` entries') replaced too ([`Secrets::scrub`]). Data carrying [`REDACTED`] where a secret belongs
//! is refused ([`check`]): it was copied from a redacted view, and applying it would
//! replace the secret with the marker.

use std::sync::Arc;

use serde_json::Value;
use sundial::job::JsonObject;

/// What is shown instead of a secret.
pub const REDACTED: &str = "[redacted]";
/// The error code of a run whose secret reference could not be read.
pub const UNAVAILABLE: &str = "SECRET_UNAVAILABLE";

/// The keys of a secret reference.
const SECRET: &str = "$secret";
const ENV: &str = "$env";
const FILE: &str = "$file";

/// The top-level data keys whose values are secret by default, for a job type (`None`:
/// the type is not known, as for a run in history, so both).
fn secret_by_default(job_type: Option<&str>) -> &'static [&'static str] {
    match job_type {
        // The built-in kinds' type keys (`crate::kinds`, behind the `node` feature).
        Some("shell") => &["env"],
        Some("http") => &["headers"],
        Some(_) => &[],
        None => &["env", "headers"],
    }
}

/// A reference, if `value` is one.
enum Reference<'a> {
    Stored(&'a Value),
    Env(&'a Value),
    File(&'a Value),
}

fn reference(value: &Value) -> Option<Reference<'_>> {
    let Value::Object(map) = value else { return None };
    if map.len() != 1 {
        return None;
    }
    let (key, inner) = map.iter().next()?;
    match key.as_str() {
        SECRET => Some(Reference::Stored(inner)),
        ENV => Some(Reference::Env(inner)),
        FILE => Some(Reference::File(inner)),
        _ => None,
    }
}

/// Hides the secrets of data of a job of `job_type` (`None`: unknown) for showing it.
pub fn redact(job_type: Option<&str>, data: &mut JsonObject) {
    for (key, value) in data.iter_mut() {
        if secret_by_default(job_type).contains(&key.as_str()) {
            if let Value::Object(entries) = value {
                for entry in entries.values_mut() {
                    redact_value(entry, true);
                }
                continue;
            }
        }
        redact_value(value, false);
    }
}

/// Redacts `value`: wholly when `secret` (except `$env` and `$file` references, which
/// show names only), else its `$secret` references, however deep.
fn redact_value(value: &mut Value, secret: bool) {
    match reference(value) {
        Some(Reference::Stored(_)) => {
            *value = serde_json::json!({ SECRET: REDACTED });
            return;
        }
        Some(Reference::Env(_) | Reference::File(_)) => return,
        None => {}
    }
    if secret {
        *value = Value::String(REDACTED.to_owned());
        return;
    }
    match value {
        Value::Object(map) => map.values_mut().for_each(|v| redact_value(v, false)),
        Value::Array(items) => items.iter_mut().for_each(|v| redact_value(v, false)),
        _ => {}
    }
}

/// Checks the secret references and secret values in data of a job of `job_type`.
///
/// # Errors
/// Where a reference is malformed (`$env` needs a variable name, `$file` a path, one key
/// only), or a secret holds [`REDACTED`].
pub fn check(job_type: Option<&str>, data: &JsonObject) -> Result<(), String> {
    for (key, value) in data {
        let by_default = secret_by_default(job_type).contains(&key.as_str());
        match value {
            Value::Object(entries) if by_default && reference(value).is_none() => {
                for (name, entry) in entries {
                    if entry.as_str() == Some(REDACTED) {
                        return Err(redacted_copy(&format!("{key}.{name}")));
                    }
                    check_value(entry, &format!("{key}.{name}"))?;
                }
            }
            _ => check_value(value, key)?,
        }
    }
    Ok(())
}

fn redacted_copy(at: &str) -> String {
    format!(
        "{at}: holds '{REDACTED}', copied from a redacted view; give the secret's value, or a $env or $file reference"
    )
}

fn check_value(value: &Value, at: &str) -> Result<(), String> {
    if let Value::Object(map) = value {
        if map.keys().any(|k| k.starts_with('$')) {
            let text = |inner: &Value| inner.as_str().filter(|s| !s.is_empty()).map(str::to_owned);
            return match reference(value) {
                Some(Reference::Stored(inner)) if inner.as_str() == Some(REDACTED) => Err(redacted_copy(at)),
                Some(Reference::Stored(_)) => Ok(()),
                Some(Reference::Env(inner)) => match text(inner) {
                    Some(name) if !name.contains(['=', '\0']) => Ok(()),
                    _ => Err(format!("{at}: $env takes the name of an environment variable")),
                },
                Some(Reference::File(inner)) => match text(inner) {
                    Some(path) if !path.contains('\0') => Ok(()),
                    _ => Err(format!("{at}: $file takes a file's path")),
                },
                None => Err(format!(
                    "{at}: a secret reference is an object with one key: $secret, $env or $file (keys starting \
                     with '$' are reserved for them)"
                )),
            };
        }
        for (key, inner) in map {
            check_value(inner, &format!("{at}.{key}"))?;
        }
    } else if let Value::Array(items) = value {
        for (i, inner) in items.iter().enumerate() {
            check_value(inner, &format!("{at}[{i}]"))?;
        }
    }
    Ok(())
}

/// The top-level keys of `data` whose value is a `$env` or `$file` reference: their
/// content is known only as a run starts, so only their type is checked before.
pub fn read_at_start(data: &JsonObject) -> Vec<&str> {
    data.iter()
        .filter(|(_, value)| matches!(reference(value), Some(Reference::Env(_) | Reference::File(_))))
        .map(|(key, _)| key.as_str())
        .collect()
}

/// `message` (about data of a job of `job_type`) with every quoted secret value of `data`
/// replaced by [`REDACTED`]: the values [`redact`] hides, quoted as parsers and checks
/// quote what they refuse (`'v'`, `"v"`, `` `v` ``, escaped or not), however short.
pub fn scrub_quoted(job_type: Option<&str>, data: &JsonObject, message: &str) -> String {
    let mut texts = Vec::new();
    for (key, value) in data {
        let whole = secret_by_default(job_type).contains(&key.as_str()) && reference(value).is_none();
        secret_texts(value, whole, &mut texts);
    }
    let mut message = message.to_owned();
    for text in &texts {
        let escaped = format!("{text:?}");
        for (quoted, shown) in [
            (format!("'{text}'"), format!("'{REDACTED}'")),
            (format!("`{text}`"), format!("`{REDACTED}`")),
            (format!("\"{text}\""), format!("\"{REDACTED}\"")),
            (escaped, format!("\"{REDACTED}\"")),
        ] {
            if message.contains(&quoted) {
                message = message.replace(&quoted, &shown);
            }
        }
    }
    message
}

/// The scalar values in `value` that are secret: all of them when `secret`, else those
/// in `$secret` references.
fn secret_texts(value: &Value, secret: bool, out: &mut Vec<String>) {
    match (reference(value), value) {
        (Some(Reference::Stored(inner)), _) => secret_texts(inner, true, out),
        (Some(Reference::Env(_) | Reference::File(_)), _) => {}
        (None, Value::Object(map)) => map.values().for_each(|v| secret_texts(v, secret, out)),
        (None, Value::Array(items)) => items.iter().for_each(|v| secret_texts(v, secret, out)),
        (None, Value::String(text)) if secret => out.push(text.clone()),
        (None, Value::Number(_) | Value::Bool(_)) if secret => out.push(value.to_string()),
        (None, _) => {}
    }
}

/// Data as a kind's parameters are checked at scheduling: each reference replaced by a
/// stand-in of its value's type (a `$secret`'s value; text for `$env` and `$file`).
pub fn stand_ins(data: &JsonObject) -> JsonObject {
    let mut data = data.clone();
    data.values_mut().for_each(|v| replace(v, &mut |r| Ok(stand_in(r))).unwrap_or(()));
    data
}

fn stand_in(reference: Reference<'_>) -> Value {
    match reference {
        Reference::Stored(value) => value.clone(),
        Reference::Env(_) | Reference::File(_) => Value::String(String::new()),
    }
}

/// The values of the secrets a run resolved, to keep them out of what it reports.
#[derive(Debug, Clone, Default)]
pub struct Secrets(Option<Arc<[String]>>);

/// Values shorter than this are not scrubbed from messages: they would match everywhere.
const SCRUB_MIN: usize = 4;

impl Secrets {
    /// `text` with every resolved secret value replaced by [`REDACTED`].
    pub fn scrub(&self, text: &str) -> String {
        let mut text = text.to_owned();
        for value in self.0.iter().flat_map(|v| v.iter()) {
            if value.len() >= SCRUB_MIN && text.contains(value.as_str()) {
                text = text.replace(value.as_str(), REDACTED);
            }
        }
        text
    }

    /// Whether the run resolved any secret.
    pub fn is_empty(&self) -> bool {
        self.0.as_ref().is_none_or(|v| v.is_empty())
    }
}

/// Where `$env` and `$file` references are read from.
pub trait SecretSource {
    /// The environment variable `name`.
    fn var(&self, name: &str) -> Option<String>;
    /// The file at `path`.
    ///
    /// # Errors
    /// Why it cannot be read.
    fn file(&self, path: &str) -> Result<String, String>;
}

/// The node's own environment and file system.
#[derive(Debug, Clone, Copy, Default)]
pub struct NodeEnvironment;

impl SecretSource for NodeEnvironment {
    fn var(&self, name: &str) -> Option<String> {
        std::env::var(name).ok()
    }

    fn file(&self, path: &str) -> Result<String, String> {
        std::fs::read_to_string(path).map_err(|e| e.to_string())
    }
}

/// `data` with every reference replaced by its value, and the values of the secrets
/// (the references' and those of `env` and `headers` entries).
///
/// # Errors
/// The first reference that cannot be read, named (never its value).
pub fn resolve(data: &mut JsonObject, source: &dyn SecretSource) -> Result<Secrets, String> {
    let mut values = Vec::new();
    let mut read = |reference: Reference<'_>| -> Result<Value, String> {
        let value = match reference {
            Reference::Stored(value) => value.clone(),
            Reference::Env(name) => {
                let name = name.as_str().unwrap_or_default();
                Value::String(source.var(name).ok_or_else(|| format!("the environment has no {name}"))?)
            }
            Reference::File(path) => {
                let path = path.as_str().unwrap_or_default();
                let text = source.file(path).map_err(|e| format!("cannot read the secret file {path}: {e}"))?;
                Value::String(text.trim_end_matches(['\n', '\r']).to_owned())
            }
        };
        if let Value::String(text) = &value {
            values.push(text.clone());
        }
        Ok(value)
    };
    for value in data.values_mut() {
        replace(value, &mut read)?;
    }
    // The values secret by default are kept out of messages too (the job's type is not
    // known here: both kinds' fields).
    for key in secret_by_default(None) {
        if let Some(Value::Object(entries)) = data.get(*key) {
            values.extend(entries.values().filter_map(Value::as_str).map(str::to_owned));
        }
    }
    Ok(Secrets((!values.is_empty()).then(|| values.into())))
}

/// Replaces every reference in `value` by what `with` makes of it.
fn replace(value: &mut Value, with: &mut dyn FnMut(Reference<'_>) -> Result<Value, String>) -> Result<(), String> {
    if let Some(found) = reference(value) {
        *value = with(found)?;
        return Ok(());
    }
    match value {
        Value::Object(map) => map.values_mut().try_for_each(|v| replace(v, with)),
        Value::Array(items) => items.iter_mut().try_for_each(|v| replace(v, with)),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use serde_json::json;

    use super::*;

    fn object(value: Value) -> JsonObject {
        match value {
            Value::Object(map) => map,
            other => panic!("{other} is not an object"),
        }
    }

    struct Fake(BTreeMap<&'static str, &'static str>);

    impl SecretSource for Fake {
        fn var(&self, name: &str) -> Option<String> {
            self.0.get(name).map(|v| (*v).to_owned())
        }
        fn file(&self, path: &str) -> Result<String, String> {
            self.0.get(path).map(|v| format!("{v}\n")).ok_or_else(|| "no such file".to_owned())
        }
    }

    #[test]
    fn shown_data_hides_stored_secrets_and_default_secret_fields() {
        let mut shell = object(json!({
            "program": "deploy",
            "env": {"TOKEN": "abc123", "FROM_ENV": {"$env": "DEPLOY_TOKEN"}},
            "args": ["--key", {"$secret": "k-42"}],
        }));
        redact(Some("shell"), &mut shell);
        assert_eq!(
            Value::Object(shell),
            json!({
                "program": "deploy",
                "env": {"TOKEN": REDACTED, "FROM_ENV": {"$env": "DEPLOY_TOKEN"}},
                "args": ["--key", {"$secret": REDACTED}],
            })
        );
        let mut http = object(json!({"url": "https://x", "headers": {"authorization": "Bearer t"}, "env": {"a": "b"}}));
        redact(Some("http"), &mut http);
        assert_eq!(http["headers"]["authorization"], REDACTED);
        assert_eq!(http["env"]["a"], "b", "env is an http job's own field, not secret by default");
        // A run's data, its job's type unknown: both default fields.
        let mut run = object(json!({"headers": {"a": "1"}, "env": {"b": "2"}, "other": {"$secret": 3}}));
        redact(None, &mut run);
        assert_eq!(
            Value::Object(run),
            json!({"headers": {"a": REDACTED}, "env": {"b": REDACTED}, "other": {"$secret": REDACTED}})
        );
        // Someone else's type: only marked secrets.
        let mut mine = object(json!({"env": {"b": "2"}, "nested": {"deep": [{"$secret": "x"}]}}));
        redact(Some("mine"), &mut mine);
        assert_eq!(Value::Object(mine), json!({"env": {"b": "2"}, "nested": {"deep": [{"$secret": REDACTED}]}}));
    }

    #[test]
    fn references_are_checked_and_redacted_copies_refused() {
        let ok = object(json!({"a": {"$env": "A"}, "b": {"$file": "/run/secrets/b"}, "c": {"$secret": {"any": 1}}}));
        assert_eq!(check(Some("mine"), &ok), Ok(()));
        let cases = [
            (json!({"a": {"$env": ""}}), "a: $env takes"),
            (json!({"a": {"$env": 7}}), "a: $env takes"),
            (json!({"a": {"$file": ""}}), "a: $file takes"),
            (json!({"a": [{"$secret": 1, "x": 2}]}), "a[0]: a secret reference is"),
            (json!({"a": {"b": {"$vault": "x"}}}), "a.b: a secret reference is"),
            (json!({"a": {"$secret": REDACTED}}), "a: holds '[redacted]'"),
            (json!({"env": {"T": REDACTED}}), "env.T: holds '[redacted]'"),
        ];
        for (data, expected) in cases {
            let error = check(Some("shell"), &object(data.clone())).unwrap_err();
            assert!(error.starts_with(expected), "{data}: {error}");
        }
        // The marker is only refused where a secret belongs.
        assert_eq!(check(Some("log"), &object(json!({"message": REDACTED}))), Ok(()));
    }

    #[test]
    fn runs_read_references_and_scrub_their_values() {
        let source = Fake(BTreeMap::from([("TOKEN", "from-the-env"), ("/run/secrets/key", "from-a-file")]));
        let mut data = object(json!({
            "env": {"T": {"$env": "TOKEN"}},
            "args": [{"$file": "/run/secrets/key"}, "plain"],
            "stored": {"$secret": "stored-value"},
            "number": {"$secret": 7},
        }));
        let secrets = resolve(&mut data, &source).unwrap();
        assert_eq!(
            Value::Object(data.clone()),
            json!({"env": {"T": "from-the-env"}, "args": ["from-a-file", "plain"], "stored": "stored-value", "number": 7})
        );
        assert_eq!(secrets.scrub("echo from-the-env and from-a-file: 7"), "echo [redacted] and [redacted]: 7");
        let mut missing = object(json!({"a": {"$env": "NOT_THERE"}}));
        assert_eq!(resolve(&mut missing, &source).unwrap_err(), "the environment has no NOT_THERE");
        let mut missing = object(json!({"a": {"$file": "/nope"}}));
        assert_eq!(resolve(&mut missing, &source).unwrap_err(), "cannot read the secret file /nope: no such file");
        let mut plain = object(json!({"a": 1}));
        assert!(resolve(&mut plain, &source).unwrap().is_empty());
        // Values secret by default are scrubbed too.
        let mut env = object(json!({"env": {"A": "literal-secret"}, "headers": {"x": "header-secret"}}));
        let secrets = resolve(&mut env, &source).unwrap();
        assert_eq!(secrets.scrub("literal-secret header-secret"), "[redacted] [redacted]");
    }

    #[test]
    fn kinds_check_stand_ins_of_the_references_type() {
        let data = object(json!({"env": {"T": {"$env": "TOKEN"}}, "n": {"$secret": 5}}));
        assert_eq!(Value::Object(stand_ins(&data)), json!({"env": {"T": ""}, "n": 5}));
    }
}
