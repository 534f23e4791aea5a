//! The `[admin]` section: where the API listens and who may use it.
//!
//! ```toml
//! [admin]
//! listen = "0.0.0.0:7600"
//! token = "…"                 # an admin token named "admin" (or SUNDIAL_ADMIN_TOKEN)
//! probes_need_token = false   # /health and /metrics open for probes and scrapers
//!
//! [admin.tls]               # HTTPS; reloaded when the files change or on SIGHUP
//! cert = "/etc/sundial/tls/cert.pem"   # relative paths: to the config file
//! key = "/etc/sundial/tls/key.pem"
//!
//! [[admin.tokens]]
//! name = "grafana"            # who: shown in the audit log
//! role = "read"               # "read" or "admin"
//! file = "/run/secrets/grafana-token"   # or env = "GRAFANA_TOKEN", or value = "…"
//! ```

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;

use serde::Deserialize;

use super::{ConfigError, ADMIN_LISTEN_ENV, ADMIN_TOKEN_ENV, DEFAULT_ADMIN_ADDR};
use crate::admin::access::{AccessPolicy, AccessToken, Role};
use crate::admin::tls::TlsFiles;

/// The name of the token given as `admin.token` or `SUNDIAL_ADMIN_TOKEN`.
pub const LEGACY_TOKEN_NAME: &str = "admin";

/// The admin API's settings.
#[derive(Debug, Clone)]
pub struct AdminConfig {
    /// `false` runs the node without the API.
    pub enabled: bool,
    /// Where it listens.
    pub listen: SocketAddr,
    /// Who may use it (open when no token is configured).
    pub access: AccessPolicy,
    /// HTTPS with these files (plain HTTP without).
    pub tls: Option<TlsFiles>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct AdminSection {
    #[serde(default = "super::yes")]
    enabled: bool,
    #[serde(default)]
    listen: Option<String>,
    #[serde(default)]
    token: Option<String>,
    #[serde(default)]
    tokens: Vec<TokenSection>,
    #[serde(default)]
    probes_need_token: bool,
    #[serde(default)]
    tls: Option<TlsSection>,
}

impl Default for AdminSection {
    fn default() -> Self {
        Self { enabled: true, listen: None, token: None, tokens: Vec::new(), probes_need_token: false, tls: None }
    }
}

/// `[admin.tls]`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct TlsSection {
    cert: PathBuf,
    key: PathBuf,
}

/// One `[[admin.tokens]]` entry: its secret from exactly one of `value`, `file`, `env`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct TokenSection {
    name: String,
    role: Role,
    #[serde(default)]
    value: Option<String>,
    #[serde(default)]
    file: Option<PathBuf>,
    #[serde(default)]
    env: Option<String>,
}

/// Reads and checks the section; `env` is the node's environment.
pub(super) fn admin(section: AdminSection, env: &BTreeMap<String, String>) -> Result<AdminConfig, ConfigError> {
    let listen_text =
        env.get(ADMIN_LISTEN_ENV).cloned().or(section.listen).unwrap_or_else(|| DEFAULT_ADMIN_ADDR.to_owned());
    let listen: SocketAddr = listen_text.parse().map_err(|_| {
        ConfigError::at("admin.listen", format!("'{listen_text}' is not an address like 127.0.0.1:7600"))
    })?;
    let mut tokens = Vec::new();
    let legacy = env.get(ADMIN_TOKEN_ENV).cloned().or(section.token).filter(|t| !t.is_empty());
    if let Some(secret) = legacy {
        let key = if env.contains_key(ADMIN_TOKEN_ENV) { ADMIN_TOKEN_ENV } else { "admin.token" };
        tokens.push(AccessToken::new(LEGACY_TOKEN_NAME, Role::Admin, secret).map_err(|e| ConfigError::at(key, e))?);
    }
    for (i, entry) in section.tokens.into_iter().enumerate() {
        let at = format!("admin.tokens[{i}]");
        let secret = token_secret(&entry, &at, env)?;
        tokens.push(AccessToken::new(entry.name, entry.role, secret).map_err(|e| ConfigError::at(&at, e))?);
    }
    let guarded = !tokens.is_empty();
    let access = AccessPolicy::new(tokens)
        .map_err(|e| ConfigError::at("admin.tokens", e))?
        .probes_need_token(section.probes_need_token);
    // Binding beyond loopback without a token would hand the node to anyone on the network.
    if section.enabled && !listen.ip().is_loopback() && !guarded {
        return Err(ConfigError::at(
            "admin.listen",
            format!("{listen} is not a loopback address: configure [[admin.tokens]] or {ADMIN_TOKEN_ENV}"),
        ));
    }
    let tls = match section.tls {
        None => None,
        Some(tls) => {
            for (key, path) in [("admin.tls.cert", &tls.cert), ("admin.tls.key", &tls.key)] {
                if path.as_os_str().is_empty() {
                    return Err(ConfigError::at(key, "give the path of a PEM file"));
                }
            }
            Some(TlsFiles { cert: tls.cert, key: tls.key })
        }
    };
    Ok(AdminConfig { enabled: section.enabled, listen, access, tls })
}

/// A token's secret from its one source; a file's trailing newline is not part of it.
fn token_secret(entry: &TokenSection, at: &str, env: &BTreeMap<String, String>) -> Result<String, ConfigError> {
    match (&entry.value, &entry.file, &entry.env) {
        (Some(value), None, None) => Ok(value.clone()),
        (None, Some(path), None) => {
            let text = std::fs::read_to_string(path)
                .map_err(|e| ConfigError::at(format!("{at}.file"), format!("cannot read {}: {e}", path.display())))?;
            Ok(text.trim_end_matches(['\n', '\r']).to_owned())
        }
        (None, None, Some(name)) => env
            .get(name)
            .cloned()
            .ok_or_else(|| ConfigError::at(format!("{at}.env"), format!("the environment has no {name}"))),
        _ => Err(ConfigError::at(at, "give the token's secret as exactly one of value, file or env")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn section(text: &str) -> AdminSection {
        toml::from_str(text).unwrap()
    }

    #[test]
    fn tokens_come_from_values_files_and_the_environment() {
        let dir = std::env::temp_dir().join(format!("sundial-admin-tokens-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("read-token");
        std::fs::write(&file, "read-secret-from-a-file\n").unwrap();
        let text = format!(
            "listen = \"0.0.0.0:7600\"\ntoken = \"legacy-admin-secret-01\"\n\
             [[tokens]]\nname = \"grafana\"\nrole = \"read\"\nfile = \"{}\"\n\
             [[tokens]]\nname = \"ci\"\nrole = \"admin\"\nenv = \"CI_TOKEN\"\n",
            file.display()
        );
        let env = BTreeMap::from([("CI_TOKEN".to_owned(), "ci-secret-0123456789".to_owned())]);
        let config = admin(section(&text), &env).unwrap();
        let access = &config.access;
        let who = |secret: &str, changes: bool| {
            access.check("/api/jobs", changes, Some(&format!("Bearer {secret}"))).map(|c| c.name.to_string())
        };
        assert_eq!(who("read-secret-from-a-file", false).as_deref(), Ok("grafana"));
        assert!(who("read-secret-from-a-file", true).is_err());
        assert_eq!(who("ci-secret-0123456789", true).as_deref(), Ok("ci"));
        assert_eq!(who("legacy-admin-secret-01", true).as_deref(), Ok(LEGACY_TOKEN_NAME));
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn bad_tokens_name_their_setting() {
        let env = BTreeMap::new();
        let cases = [
            ("token = \"short\"", "admin.token"),
            ("[[tokens]]\nname = \"a\"\nrole = \"read\"", "admin.tokens[0]"),
            ("[[tokens]]\nname = \"a\"\nrole = \"read\"\nvalue = \"x\"", "admin.tokens[0]"),
            ("[[tokens]]\nname = \"a b\"\nrole = \"read\"\nvalue = \"0123456789abcdefgh\"", "admin.tokens[0]"),
            ("[[tokens]]\nname = \"a\"\nrole = \"read\"\nenv = \"NOT_SET_ANYWHERE\"", "admin.tokens[0].env"),
            ("[[tokens]]\nname = \"a\"\nrole = \"read\"\nfile = \"/nonexistent/token\"", "admin.tokens[0].file"),
            (
                "[[tokens]]\nname = \"a\"\nrole = \"read\"\nvalue = \"0123456789abcdefgh\"\nenv = \"X\"",
                "admin.tokens[0]",
            ),
            (
                "token = \"0123456789abcdefgh\"\n[[tokens]]\nname = \"admin\"\nrole = \"read\"\nvalue = \"0123456789abcdefgX\"",
                "admin.tokens",
            ),
            ("listen = \"10.0.0.1:7600\"", "admin.listen"),
        ];
        for (text, key) in cases {
            let error = admin(section(text), &env).unwrap_err();
            assert_eq!(error.key.as_deref(), Some(key), "{text}: {error}");
            assert!(!error.to_string().contains("0123456789abcdefg"), "no secret in errors: {error}");
        }
        assert!(toml::from_str::<AdminSection>("[[tokens]]\nname = \"a\"\nrole = \"owner\"\nvalue = \"x\"").is_err());
    }
}
