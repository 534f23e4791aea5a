//! `[leader]`: how the node elects its leader (the store's election, or a Kubernetes
//! Lease).

use serde::Deserialize;

use super::ConfigError;

/// How the node elects its leader.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum LeaderConfig {
    /// The store's own: over FoundationDB for a shared store, in-process for the memory
    /// store.
    #[default]
    Store,
    /// A Kubernetes `coordination.k8s.io/v1` Lease (see [`crate::kubernetes`]).
    Kubernetes {
        /// The Lease object's name.
        lease_name: String,
        /// The API server (e.g. `kubectl proxy`'s) and namespace; `None`: the cluster this
        /// pod runs in, through its service account.
        api: Option<(String, String)>,
        /// The holder identity; `None`: `$HOSTNAME` (the pod name), else the node id.
        identity: Option<String>,
    },
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub(super) struct LeaderSection {
    #[serde(default)]
    pub(super) kind: LeaderKind,
    #[serde(default)]
    pub(super) lease_name: Option<String>,
    #[serde(default)]
    pub(super) api_url: Option<String>,
    #[serde(default)]
    pub(super) namespace: Option<String>,
    #[serde(default)]
    pub(super) identity: Option<String>,
}

#[derive(Deserialize, Default, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub(super) enum LeaderKind {
    #[default]
    Store,
    Kubernetes,
}

/// A Kubernetes object name: lowercase letters, digits, `-` and `.`, starting and ending
/// with a letter or digit, at most 253 characters.
pub(super) fn is_kubernetes_name(name: &str) -> bool {
    let edge = |c: Option<char>| c.is_some_and(|c| c.is_ascii_lowercase() || c.is_ascii_digit());
    name.len() <= 253
        && edge(name.chars().next())
        && edge(name.chars().last())
        && name.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '.')
}

pub(super) fn leader(section: LeaderSection) -> Result<LeaderConfig, ConfigError> {
    let kubernetes_only = [
        ("leader.lease_name", section.lease_name.is_some()),
        ("leader.api_url", section.api_url.is_some()),
        ("leader.namespace", section.namespace.is_some()),
        ("leader.identity", section.identity.is_some()),
    ];
    if section.kind == LeaderKind::Store {
        if let Some((key, _)) = kubernetes_only.iter().find(|(_, set)| *set) {
            return Err(ConfigError::at(*key, "only a leader of kind \"kubernetes\" takes this"));
        }
        return Ok(LeaderConfig::Store);
    }
    let lease_name = section.lease_name.unwrap_or_else(|| crate::kubernetes::DEFAULT_LEASE_NAME.to_owned());
    if !is_kubernetes_name(&lease_name) {
        return Err(ConfigError::at(
            "leader.lease_name",
            format!("'{lease_name}' is not a Kubernetes name (lowercase letters, digits, '-' and '.')"),
        ));
    }
    let api = match (section.api_url, section.namespace) {
        (None, None) => None,
        (Some(url), Some(namespace)) => {
            // Checked as the election will use them.
            crate::kubernetes::KubernetesApi::check(&url, &namespace)
                .map_err(|e| ConfigError::at("leader.api_url", e.to_string()))?;
            Some((url, namespace))
        }
        (Some(_), None) => return Err(ConfigError::at("leader.namespace", "is needed with leader.api_url")),
        (None, Some(_)) => {
            return Err(ConfigError::at(
                "leader.api_url",
                "is needed with leader.namespace (in a pod, leave both out: the service account says)",
            ))
        }
    };
    if section.identity.as_deref().is_some_and(str::is_empty) {
        return Err(ConfigError::at("leader.identity", "must not be empty"));
    }
    Ok(LeaderConfig::Kubernetes { lease_name, api, identity: section.identity })
}
