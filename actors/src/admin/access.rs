//! Who may do what through the admin API: named bearer tokens, each with a role.
//!
//! A node without tokens is open (it is then refused a non-loopback listen by its
//! config). With any token, every route needs one: a `read` token reads, an `admin`
//! token also changes. `/health` and `/metrics` stay open for probes and scrapers unless
//! [`AccessPolicy::probes_need_token`] is set. Several tokens may share a role, so a token
//! is rotated by adding its successor, moving clients, then removing it.
//!
//! The decision is a plain function of the policy, the request's method and path and its
//! `Authorization` header ([`AccessPolicy::check`]); the router's middleware only applies
//! it. A given token is compared with every configured one, each comparison without an
//! early exit, so the time taken does not tell how much of a guess matched, nor which
//! token it was close to.

use std::fmt;
use std::sync::Arc;

/// What a token allows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    /// Every read: jobs, runs, node, audit, metrics.
    Read,
    /// Reads and every change.
    Admin,
}

impl Role {
    /// `read` or `admin`.
    pub fn as_str(self) -> &'static str {
        match self {
            Role::Read => "read",
            Role::Admin => "admin",
        }
    }
}

/// One configured token. Its secret never appears in `Debug` output.
#[derive(Clone, PartialEq, Eq)]
pub struct AccessToken {
    /// Who uses it: shown in the audit log, never secret.
    pub name: String,
    /// What it allows.
    pub role: Role,
    /// The bearer secret.
    pub secret: String,
}

impl fmt::Debug for AccessToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AccessToken").field("name", &self.name).field("role", &self.role).finish_non_exhaustive()
    }
}

/// The shortest token accepted: guessing one must be hopeless.
pub const MIN_TOKEN_LEN: usize = 16;

impl AccessToken {
    /// Checks a token as configured: a name of letters, digits, `-`, `_` or `.`, and a
    /// secret of at least [`MIN_TOKEN_LEN`] visible characters.
    ///
    /// # Errors
    /// What is wrong, for the config's error message (the secret is never quoted).
    pub fn new(name: impl Into<String>, role: Role, secret: impl Into<String>) -> Result<Self, String> {
        let name = name.into();
        let secret = secret.into();
        if name.is_empty() || name.len() > 64 || !name.chars().all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c)) {
            return Err(format!("'{name}' is not a token name (1 to 64 letters, digits, '-', '_' or '.')"));
        }
        if secret.chars().count() < MIN_TOKEN_LEN || secret.chars().any(|c| c.is_whitespace() || c.is_control()) {
            return Err(format!(
                "token '{name}' must be at least {MIN_TOKEN_LEN} characters without spaces (use a random secret)"
            ));
        }
        Ok(Self { name, role, secret })
    }
}

/// Who made a request, as the API's handlers and the audit log see it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Caller {
    /// The token's name, or [`ANONYMOUS`] on a node without tokens.
    pub name: Arc<str>,
    /// What it may do.
    pub role: Role,
}

/// The caller's name on a node without tokens (reachable over loopback only).
pub const ANONYMOUS: &str = "anonymous";

/// Why a request is refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Denial {
    /// No `Authorization: Bearer` header (401).
    Missing,
    /// A token that is not configured (401).
    Wrong,
    /// A read token on a change (403).
    ReadOnly,
}

/// The tokens of a node and what they guard.
#[derive(Debug, Clone, Default)]
pub struct AccessPolicy {
    tokens: Vec<(AccessToken, Arc<str>)>,
    probes_need_token: bool,
}

impl AccessPolicy {
    /// No tokens: every request is allowed, as an admin named [`ANONYMOUS`].
    pub fn open() -> Self {
        Self::default()
    }

    /// Guards every route with `tokens`.
    ///
    /// # Errors
    /// Two tokens with one name (the audit log could not tell them apart) or one secret.
    pub fn new(tokens: Vec<AccessToken>) -> Result<Self, String> {
        for (i, token) in tokens.iter().enumerate() {
            for earlier in &tokens[..i] {
                if earlier.name == token.name {
                    return Err(format!("two tokens are named '{}'", token.name));
                }
                if same_secret(earlier.secret.as_bytes(), token.secret.as_bytes()) {
                    return Err(format!("tokens '{}' and '{}' have the same secret", earlier.name, token.name));
                }
            }
        }
        let tokens = tokens
            .into_iter()
            .map(|token| {
                let name = Arc::from(token.name.as_str());
                (token, name)
            })
            .collect();
        Ok(Self { tokens, probes_need_token: false })
    }

    /// Makes `/health` and `/metrics` need a token (of either role) too.
    pub fn probes_need_token(mut self, yes: bool) -> Self {
        self.probes_need_token = yes;
        self
    }

    /// Whether any token is configured.
    pub fn is_guarded(&self) -> bool {
        !self.tokens.is_empty()
    }

    /// Who sends `authorization` (the header's value, `Some("")` for one that is not
    /// text), if they may make a request that `changes` something (any method but GET and
    /// HEAD) on `path`.
    ///
    /// # Errors
    /// Why not.
    pub fn check(&self, path: &str, changes: bool, authorization: Option<&str>) -> Result<Caller, Denial> {
        if self.tokens.is_empty() {
            return Ok(Caller { name: Arc::from(ANONYMOUS), role: Role::Admin });
        }
        // The dashboard's page and assets hold no data: open to anyone, whatever they
        // send; the page asks for a token when the API does.
        if !changes && super::dashboard::is_dashboard(path) {
            return Ok(Caller { name: Arc::from(ANONYMOUS), role: Role::Read });
        }
        // Any `Authorization` header is a credential to check: one that is not a bearer
        // token is a wrong one, and a probe is open only to requests without one.
        let given = authorization.map(|v| v.strip_prefix("Bearer ").map_or("", str::trim));
        let probe = !changes && matches!(path, "/health" | "/metrics");
        if probe && !self.probes_need_token && given.is_none() {
            return Ok(Caller { name: Arc::from(ANONYMOUS), role: Role::Read });
        }
        let given = given.ok_or(Denial::Missing)?;
        // Every token is compared, whichever matches.
        let mut found = None;
        for (token, name) in &self.tokens {
            if same_secret(given.as_bytes(), token.secret.as_bytes()) {
                found = Some(Caller { name: name.clone(), role: token.role });
            }
        }
        let caller = found.ok_or(Denial::Wrong)?;
        if changes && caller.role != Role::Admin {
            return Err(Denial::ReadOnly);
        }
        Ok(caller)
    }
}

/// Compares without an early exit: the time depends on the length of `given` only, never
/// on how much of it matches `secret`.
fn same_secret(given: &[u8], secret: &[u8]) -> bool {
    let mut differ = u8::from(given.len() != secret.len());
    for (i, byte) in given.iter().enumerate() {
        differ |= byte ^ secret.get(i).copied().unwrap_or(!byte);
    }
    differ == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy() -> AccessPolicy {
        AccessPolicy::new(vec![
            AccessToken::new("ops", Role::Admin, "admin-secret-0123456789").unwrap(),
            AccessToken::new("ops-next", Role::Admin, "admin-secret-9876543210").unwrap(),
            AccessToken::new("grafana", Role::Read, "read-secret-0123456789").unwrap(),
        ])
        .unwrap()
    }

    fn bearer(secret: &str) -> String {
        format!("Bearer {secret}")
    }

    #[test]
    fn an_open_policy_lets_everyone_change_everything() {
        let caller = AccessPolicy::open().check("/api/jobs/x", true, None).unwrap();
        assert_eq!((&*caller.name, caller.role), (ANONYMOUS, Role::Admin));
        assert!(!AccessPolicy::open().is_guarded());
    }

    #[test]
    fn every_route_needs_a_token_and_changes_need_an_admin_one() {
        let p = policy();
        assert!(p.is_guarded());
        assert_eq!(p.check("/api/jobs", false, None), Err(Denial::Missing));
        assert_eq!(p.check("/api/jobs", false, Some("Basic abc")), Err(Denial::Wrong));
        assert_eq!(p.check("/api/jobs", false, Some("Bearer")), Err(Denial::Wrong));
        assert_eq!(p.check("/api/jobs", false, Some(&bearer("guess-0123456789abcdef"))), Err(Denial::Wrong));
        assert_eq!(p.check("/api/jobs", false, Some(&bearer("admin-secret-012345678"))), Err(Denial::Wrong));
        let read = p.check("/api/jobs", false, Some(&bearer("read-secret-0123456789"))).unwrap();
        assert_eq!((&*read.name, read.role), ("grafana", Role::Read));
        assert_eq!(p.check("/api/jobs/x", true, Some(&bearer("read-secret-0123456789"))), Err(Denial::ReadOnly));
        // Both admin tokens work while one replaces the other.
        for (secret, name) in [("admin-secret-0123456789", "ops"), ("admin-secret-9876543210", "ops-next")] {
            let caller = p.check("/api/jobs/x", true, Some(&bearer(secret))).unwrap();
            assert_eq!((&*caller.name, caller.role), (name, Role::Admin));
        }
    }

    #[test]
    fn probes_are_open_unless_configured_otherwise() {
        let p = policy();
        assert_eq!(p.check("/health", false, None).unwrap().role, Role::Read);
        assert_eq!(p.check("/metrics", false, None).unwrap().role, Role::Read);
        // A token given to a probe is still checked.
        assert_eq!(p.check("/metrics", false, Some(&bearer("guess-0123456789abcdef"))), Err(Denial::Wrong));
        assert_eq!(p.check("/metrics", false, Some("Basic x")), Err(Denial::Wrong));
        assert_eq!(p.check("/health", true, None), Err(Denial::Missing));
        let strict = policy().probes_need_token(true);
        assert_eq!(strict.check("/health", false, None), Err(Denial::Missing));
        assert!(strict.check("/metrics", false, Some(&bearer("read-secret-0123456789"))).is_ok());
    }

    #[test]
    fn the_dashboards_page_is_open_and_its_data_is_not() {
        let p = policy();
        for path in ["/", "/assets/app.js"] {
            assert_eq!(p.check(path, false, None).unwrap().role, Role::Read, "{path}");
            assert!(p.check(path, false, Some("Basic x")).is_ok(), "{path}: holds nothing to guard");
            assert_eq!(p.check(path, true, None), Err(Denial::Missing), "{path}: changes nothing");
        }
        assert_eq!(p.check("/api/overview", false, None), Err(Denial::Missing));
    }

    #[test]
    fn tokens_are_checked_as_configured() {
        assert!(AccessToken::new("a", Role::Read, "short").is_err());
        assert!(AccessToken::new("a", Role::Read, "has a space 0123456789").is_err());
        assert!(AccessToken::new("", Role::Read, "0123456789abcdefgh").is_err());
        assert!(AccessToken::new("who?", Role::Read, "0123456789abcdefgh").is_err());
        let error = AccessToken::new("a", Role::Read, "short-secret").unwrap_err();
        assert!(!error.contains("short-secret"), "the secret is not quoted: {error}");
        let token = AccessToken::new("a", Role::Read, "0123456789abcdefgh").unwrap();
        assert!(!format!("{token:?}").contains("0123456789"), "Debug hides the secret");
        let twin = AccessToken::new("b", Role::Admin, "0123456789abcdefgh").unwrap();
        assert!(AccessPolicy::new(vec![token.clone(), twin]).unwrap_err().contains("same secret"));
        assert!(AccessPolicy::new(vec![token.clone(), token]).unwrap_err().contains("named 'a'"));
    }

    #[test]
    fn secrets_compare_whole() {
        assert!(same_secret(b"abcdef", b"abcdef"));
        assert!(!same_secret(b"abcdef", b"abcdeg"));
        assert!(!same_secret(b"abc", b"abcdef"));
        assert!(!same_secret(b"abcdefg", b"abcdef"));
        assert!(!same_secret(b"", b"a"));
        // A zero byte past the secret's end is still a difference.
        assert!(!same_secret(b"ab\0", b"ab"));
    }
}
