//! Who may use the console, and what they may do.
//!
//! Every request carries credentials: `Authorization: Bearer <secret>` (for
//! scripts and dashboards) or HTTP Basic `<user>:<secret>` (a browser asks
//! for it). Each user has one secret, read from an environment variable the
//! access file names — never from the file itself — and a role: a
//! `viewer` reads every page, an `operator` may also act (power a rack,
//! cancel a task, steer a rollout or a schedule).
//!
//! Actions are `POST` forms carrying a CSRF token, an HMAC of the user's
//! name under the console's key, so a page of another site cannot make a
//! logged-in browser act; a request whose `Origin` or `Sec-Fetch-Site`
//! says it came from elsewhere is refused as well.

use std::collections::BTreeMap;
use std::path::Path;

use base64::Engine;
use ring::hmac;
use serde::Deserialize;
use subtle::ConstantTimeEq;

/// The shortest secret accepted.
pub const MIN_SECRET_LEN: usize = 16;

/// What a user may do.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    /// Reads every page.
    Viewer,
    /// Reads and acts.
    Operator,
}

impl Role {
    /// The name.
    pub fn as_str(self) -> &'static str {
        match self {
            Role::Viewer => "viewer",
            Role::Operator => "operator",
        }
    }
}

/// A user the console knows.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct User {
    /// The name (Basic user name; shown in the page header and logs).
    pub name: String,
    /// What they may do.
    pub role: Role,
}

/// Why the access configuration cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum AccessError {
    /// The access file cannot be read.
    #[error("cannot read the access file {path}")]
    Read {
        /// The file.
        path: String,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The access file is not what it should be.
    #[error("the access file {path} is invalid: {message}")]
    Parse {
        /// The file.
        path: String,
        /// What is wrong, naming the field.
        message: String,
    },
    /// A user's secret is missing or too weak.
    #[error("user {user:?}: {message}")]
    Secret {
        /// The user.
        user: String,
        /// What is wrong.
        message: String,
    },
    /// Nobody could log in.
    #[error(
        "no console users: set FLOW_CONSOLE_OPERATOR_TOKEN and/or FLOW_CONSOLE_VIEWER_TOKEN, or \
         pass --access-file (the console serves no page without credentials)"
    )]
    NoUsers,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct AccessFile {
    users: Vec<UserEntry>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct UserEntry {
    name: String,
    role: Role,
    secret_env: String,
}

/// The users and the key CSRF tokens are made with.
pub struct Access {
    users: Vec<(User, Vec<u8>)>,
    csrf_key: hmac::Key,
}

impl std::fmt::Debug for Access {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Access")
            .field(
                "users",
                &self.users.iter().map(|(u, _)| u).collect::<Vec<_>>(),
            )
            .finish_non_exhaustive()
    }
}

/// Why a request is refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Denied {
    /// No or unknown credentials (401).
    Unauthenticated,
    /// Known user, not allowed (403).
    Forbidden,
    /// An action without a valid CSRF token, or from another origin (403).
    CrossSite,
}

impl Access {
    /// Users from the environment shorthand (`FLOW_CONSOLE_OPERATOR_TOKEN`
    /// → user `operator`, `FLOW_CONSOLE_VIEWER_TOKEN` → user `viewer`) and
    /// from an access file, whose entries name the environment variable of
    /// each secret. `csrf_key` signs the forms' tokens (several consoles
    /// behind one address need the same key); none: a random one.
    pub fn load(
        file: Option<&Path>,
        env: &dyn Fn(&str) -> Option<String>,
        csrf_key: Option<&[u8]>,
    ) -> Result<Access, AccessError> {
        let mut entries: BTreeMap<String, (Role, String)> = BTreeMap::new();
        for (var, name, role) in [
            ("FLOW_CONSOLE_OPERATOR_TOKEN", "operator", Role::Operator),
            ("FLOW_CONSOLE_VIEWER_TOKEN", "viewer", Role::Viewer),
        ] {
            if env(var).is_some() {
                entries.insert(name.to_owned(), (role, var.to_owned()));
            }
        }
        if let Some(path) = file {
            let shown = path.display().to_string();
            let text = std::fs::read_to_string(path).map_err(|source| AccessError::Read {
                path: shown.clone(),
                source,
            })?;
            let parsed: AccessFile =
                serde_saphyr::from_str(&text).map_err(|e| AccessError::Parse {
                    path: shown.clone(),
                    message: e.to_string(),
                })?;
            for (i, u) in parsed.users.into_iter().enumerate() {
                if u.name.trim().is_empty() || u.name.contains(':') {
                    return Err(AccessError::Parse {
                        path: shown,
                        message: format!(
                            "users[{i}].name: must be non-empty and without ':' (it is the HTTP \
                             Basic user name), got {:?}",
                            u.name
                        ),
                    });
                }
                entries.insert(u.name, (u.role, u.secret_env));
            }
        }
        let mut users = Vec::new();
        for (name, (role, var)) in entries {
            let secret = env(&var).ok_or_else(|| AccessError::Secret {
                user: name.clone(),
                message: format!("its secret variable {var} is not set"),
            })?;
            if secret.chars().count() < MIN_SECRET_LEN {
                return Err(AccessError::Secret {
                    user: name,
                    message: format!("the secret in {var} is shorter than {MIN_SECRET_LEN}"),
                });
            }
            users.push((User { name, role }, secret.into_bytes()));
        }
        if users.is_empty() {
            return Err(AccessError::NoUsers);
        }
        let csrf_key = match csrf_key {
            Some(k) => hmac::Key::new(hmac::HMAC_SHA256, k),
            None => hmac::Key::generate(hmac::HMAC_SHA256, &ring::rand::SystemRandom::new())
                .map_err(|_| AccessError::Secret {
                    user: String::new(),
                    message: "no randomness for the CSRF key".into(),
                })?,
        };
        Ok(Access { users, csrf_key })
    }

    /// The user an `Authorization` header value names, if its secret is
    /// right. Every secret is compared in constant time.
    pub fn authenticate(&self, authorization: Option<&str>) -> Result<User, Denied> {
        let header = authorization.ok_or(Denied::Unauthenticated)?;
        let (scheme, value) = header.split_once(' ').ok_or(Denied::Unauthenticated)?;
        let value = value.trim();
        if scheme.eq_ignore_ascii_case("bearer") {
            let mut found = None;
            for (user, secret) in &self.users {
                if bool::from(secret.as_slice().ct_eq(value.as_bytes())) {
                    found = Some(user.clone());
                }
            }
            found.ok_or(Denied::Unauthenticated)
        } else if scheme.eq_ignore_ascii_case("basic") {
            let decoded = base64::engine::general_purpose::STANDARD
                .decode(value)
                .map_err(|_| Denied::Unauthenticated)?;
            let text = String::from_utf8(decoded).map_err(|_| Denied::Unauthenticated)?;
            let (name, given) = text.split_once(':').ok_or(Denied::Unauthenticated)?;
            self.users
                .iter()
                .find(|(u, secret)| {
                    u.name == name && bool::from(secret.as_slice().ct_eq(given.as_bytes()))
                })
                .map(|(u, _)| u.clone())
                .ok_or(Denied::Unauthenticated)
        } else {
            Err(Denied::Unauthenticated)
        }
    }

    /// The CSRF token of a user's forms.
    pub fn csrf_token(&self, user: &User) -> String {
        let tag = hmac::sign(&self.csrf_key, csrf_message(user).as_bytes());
        tag.as_ref().iter().map(|b| format!("{b:02x}")).collect()
    }

    /// Whether `user` may perform an action sent with `token`, from a
    /// request whose `Origin` and `Sec-Fetch-Site` headers are given and
    /// which was addressed to `host`.
    pub fn may_act(
        &self,
        user: &User,
        token: &str,
        origin: Option<&str>,
        fetch_site: Option<&str>,
        host: Option<&str>,
    ) -> Result<(), Denied> {
        if user.role != Role::Operator {
            return Err(Denied::Forbidden);
        }
        if let Some(site) = fetch_site
            && !matches!(site, "same-origin" | "none")
        {
            return Err(Denied::CrossSite);
        }
        if let Some(origin) = origin {
            let authority = origin
                .strip_prefix("http://")
                .or_else(|| origin.strip_prefix("https://"));
            if authority.is_none() || authority != host {
                return Err(Denied::CrossSite);
            }
        }
        let tag = decode_hex(token).ok_or(Denied::CrossSite)?;
        hmac::verify(&self.csrf_key, csrf_message(user).as_bytes(), &tag)
            .map_err(|_| Denied::CrossSite)
    }
}

fn csrf_message(user: &User) -> String {
    format!("flow-console csrf v1\n{}", user.name)
}

fn decode_hex(text: &str) -> Option<Vec<u8>> {
    if !text.len().is_multiple_of(2) {
        return None;
    }
    (0..text.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(text.get(i..i + 2)?, 16).ok())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    const OP: &str = "operator-secret-0123";
    const VIEW: &str = "viewer-secret-456789";

    fn access() -> Access {
        Access::load(
            None,
            &|k| match k {
                "FLOW_CONSOLE_OPERATOR_TOKEN" => Some(OP.into()),
                "FLOW_CONSOLE_VIEWER_TOKEN" => Some(VIEW.into()),
                _ => None,
            },
            Some(b"key"),
        )
        .expect("access")
    }

    fn basic(user: &str, secret: &str) -> String {
        format!(
            "Basic {}",
            base64::engine::general_purpose::STANDARD.encode(format!("{user}:{secret}"))
        )
    }

    #[test]
    fn bearer_and_basic_name_the_same_users() {
        let a = access();
        let op = a.authenticate(Some(&format!("Bearer {OP}"))).unwrap();
        assert_eq!((op.name.as_str(), op.role), ("operator", Role::Operator));
        let v = a.authenticate(Some(&basic("viewer", VIEW))).unwrap();
        assert_eq!(v.role, Role::Viewer);
        assert_eq!(a.authenticate(None), Err(Denied::Unauthenticated));
        assert_eq!(
            a.authenticate(Some("Bearer wrong")),
            Err(Denied::Unauthenticated)
        );
        // The right secret under another user's name is no login.
        assert_eq!(
            a.authenticate(Some(&basic("viewer", OP))),
            Err(Denied::Unauthenticated)
        );
        assert_eq!(
            a.authenticate(Some("Digest x")),
            Err(Denied::Unauthenticated)
        );
    }

    #[test]
    fn only_an_operator_with_the_token_from_this_origin_may_act() {
        let a = access();
        let op = a.authenticate(Some(&format!("Bearer {OP}"))).unwrap();
        let viewer = a.authenticate(Some(&format!("Bearer {VIEW}"))).unwrap();
        let token = a.csrf_token(&op);
        let host = Some("127.0.0.1:8080");
        assert_eq!(a.may_act(&op, &token, None, None, host), Ok(()));
        assert_eq!(
            a.may_act(
                &op,
                &token,
                Some("http://127.0.0.1:8080"),
                Some("same-origin"),
                host
            ),
            Ok(())
        );
        assert_eq!(
            a.may_act(&viewer, &a.csrf_token(&viewer), None, None, host),
            Err(Denied::Forbidden)
        );
        assert_eq!(
            a.may_act(&op, "00ff", None, None, host),
            Err(Denied::CrossSite)
        );
        assert_eq!(
            a.may_act(&op, &token, Some("http://evil.example"), None, host),
            Err(Denied::CrossSite)
        );
        assert_eq!(
            a.may_act(&op, &token, None, Some("cross-site"), host),
            Err(Denied::CrossSite)
        );
    }

    #[test]
    fn a_missing_or_short_secret_and_no_users_are_refused() {
        let e = Access::load(None, &|_| None, None).unwrap_err();
        assert!(matches!(e, AccessError::NoUsers), "{e}");
        let e = Access::load(
            None,
            &|k| (k == "FLOW_CONSOLE_VIEWER_TOKEN").then(|| "short".to_owned()),
            None,
        )
        .unwrap_err();
        assert_eq!(
            e.to_string(),
            "user \"viewer\": the secret in FLOW_CONSOLE_VIEWER_TOKEN is shorter than 16"
        );
    }

    #[test]
    fn the_access_file_names_each_secrets_variable() {
        let dir = std::env::temp_dir().join(format!("flow-access-{}", uuid::Uuid::new_v4()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("access.yaml");
        std::fs::write(
            &path,
            "users:\n  - {name: alice, role: operator, secret_env: ALICE}\n  - {name: bob, role: viewer, secret_env: BOB}\n",
        )
        .unwrap();
        let env = |k: &str| match k {
            "ALICE" => Some("alice-secret-000000".to_owned()),
            "BOB" => Some("bob-secret-11111111".to_owned()),
            _ => None,
        };
        let a = Access::load(Some(&path), &env, None).unwrap();
        assert_eq!(
            a.authenticate(Some(&basic("bob", "bob-secret-11111111")))
                .unwrap()
                .role,
            Role::Viewer
        );
        let e = Access::load(Some(&path), &|k| env(k).filter(|_| k != "BOB"), None).unwrap_err();
        assert_eq!(
            e.to_string(),
            "user \"bob\": its secret variable BOB is not set"
        );
        std::fs::write(&path, "users:\n  - {name: a, role: admin, secret_env: X}\n").unwrap();
        let e = Access::load(Some(&path), &env, None).unwrap_err();
        assert!(e.to_string().contains("admin"), "{e}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
