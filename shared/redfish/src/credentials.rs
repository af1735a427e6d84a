//! BMC credentials, resolved by reference. A component names a credential
//! reference (`credential_ref`); the worker maps references to user and
//! password from its own configuration. Passwords are [`Secret`]s: they never
//! print, and no message of this crate contains one.

use std::collections::BTreeMap;
use std::path::Path;

use flow_config::Secret;
use serde::Deserialize;

/// One credential.
#[derive(Debug, Clone, PartialEq)]
pub struct BmcCredential {
    /// User name.
    pub user: String,
    /// Password.
    pub password: Secret,
    /// How requests authenticate with it.
    pub auth: AuthMode,
}

/// How a credential authenticates at a BMC (`auth:` in the credentials
/// file).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum AuthMode {
    /// A Redfish session (`SessionService` login, `X-Auth-Token`), reused
    /// across requests; HTTP Basic where the BMC has no SessionService.
    #[default]
    Session,
    /// HTTP Basic on every request.
    Basic,
}

/// Credentials by reference.
#[derive(Debug, Clone, Default)]
pub struct CredentialStore {
    by_ref: BTreeMap<String, BmcCredential>,
}

/// An entry of a credentials file.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileEntry {
    user: String,
    #[serde(default)]
    password: Option<Secret>,
    #[serde(default)]
    password_env: Option<String>,
    #[serde(default)]
    password_file: Option<std::path::PathBuf>,
    #[serde(default)]
    auth: AuthMode,
}

/// Why a credentials file cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum CredentialError {
    /// The file cannot be read.
    #[error("cannot read credentials file {path}: {reason}")]
    Read {
        /// The file.
        path: String,
        /// Why.
        reason: String,
    },
    /// An entry is wrong.
    #[error("credentials file {path}, entry {reference:?}: {reason}")]
    Entry {
        /// The file.
        path: String,
        /// The reference.
        reference: String,
        /// What is wrong.
        reason: String,
    },
}

impl CredentialStore {
    /// An empty store.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds or replaces a credential.
    pub fn insert(
        &mut self,
        reference: impl Into<String>,
        user: impl Into<String>,
        password: Secret,
    ) {
        self.by_ref.insert(
            reference.into(),
            BmcCredential {
                user: user.into(),
                password,
                auth: AuthMode::default(),
            },
        );
    }

    /// Sets how a configured reference authenticates.
    pub fn set_auth(&mut self, reference: &str, auth: AuthMode) {
        if let Some(c) = self.by_ref.get_mut(reference) {
            c.auth = auth;
        }
    }

    /// A store with one credential.
    pub fn single(reference: &str, user: &str, password: &str) -> Self {
        let mut store = Self::new();
        store.insert(reference, user, Secret::new(password));
        store
    }

    /// The credential for a reference.
    pub fn get(&self, reference: &str) -> Option<&BmcCredential> {
        self.by_ref.get(reference)
    }

    /// The configured references (never the secrets).
    pub fn references(&self) -> impl Iterator<Item = &str> {
        self.by_ref.keys().map(String::as_str)
    }

    /// Loads a YAML file mapping references to credentials:
    ///
    /// ```yaml
    /// sim-bmc: {user: root, password_env: FLOW_SIM_BMC_PASSWORD}
    /// rack-01-bmc: {user: admin, password_file: /run/secrets/rack-01}
    /// lab: {user: root, password: 0penBmc, auth: basic}   # plain text: labs only
    /// ```
    ///
    /// `auth`: `session` (default: a Redfish session, HTTP Basic where the
    /// BMC has no SessionService) or `basic`.
    ///
    /// Exactly one of `password`, `password_env`, `password_file` per entry.
    pub fn from_yaml_file(
        path: &Path,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> Result<Self, CredentialError> {
        let shown = path.display().to_string();
        let text = std::fs::read_to_string(path).map_err(|e| CredentialError::Read {
            path: shown.clone(),
            reason: e.to_string(),
        })?;
        let entries: BTreeMap<String, FileEntry> =
            serde_saphyr::from_str(&text).map_err(|e| CredentialError::Read {
                path: shown.clone(),
                reason: e.to_string().lines().next().unwrap_or_default().to_owned(),
            })?;
        let mut store = Self::new();
        for (reference, entry) in entries {
            let bad = |reason: String| CredentialError::Entry {
                path: shown.clone(),
                reference: reference.clone(),
                reason,
            };
            let password = match (entry.password, entry.password_env, entry.password_file) {
                (Some(p), None, None) => p,
                (None, Some(var), None) => Secret::new(
                    env(&var)
                        .ok_or_else(|| bad(format!("environment variable {var} is not set")))?,
                ),
                (None, None, Some(file)) => Secret::new(
                    std::fs::read_to_string(&file)
                        .map_err(|e| bad(format!("cannot read {}: {e}", file.display())))?
                        .trim_end_matches(['\n', '\r'])
                        .to_owned(),
                ),
                _ => {
                    return Err(bad(
                        "give exactly one of password, password_env, password_file".to_owned(),
                    ));
                }
            };
            store.insert(reference.clone(), entry.user, password);
            store.set_auth(&reference, entry.auth);
        }
        Ok(store)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn file_entries_resolve_passwords_without_printing_them() {
        let dir = std::env::temp_dir().join(format!("flow-creds-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let secret_file = dir.join("pw");
        std::fs::write(&secret_file, "from-file\n").unwrap();
        let file = dir.join("creds.yaml");
        std::fs::write(
            &file,
            format!(
                "a: {{user: root, password_env: PW_A}}\nb: {{user: admin, password_file: {}}}\nc: {{user: u, password: plain, auth: basic}}\n",
                secret_file.display()
            ),
        )
        .unwrap();
        let store = CredentialStore::from_yaml_file(&file, &|k| {
            (k == "PW_A").then(|| "from-env".to_owned())
        })
        .unwrap();
        assert_eq!(store.get("a").unwrap().password.expose(), "from-env");
        assert_eq!(store.get("b").unwrap().password.expose(), "from-file");
        assert_eq!(store.get("c").unwrap().user, "u");
        assert_eq!(store.get("c").unwrap().auth, AuthMode::Basic);
        assert_eq!(store.get("a").unwrap().auth, AuthMode::Session);
        assert!(!format!("{store:?}").contains("from-env"));
        std::fs::write(&file, "a: {user: root}\n").unwrap();
        let e = CredentialStore::from_yaml_file(&file, &|_| None)
            .unwrap_err()
            .to_string();
        assert!(
            e.ends_with("entry \"a\": give exactly one of password, password_env, password_file"),
            "{e}"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
