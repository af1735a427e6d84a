//! `access.*` on `flow.api`: the policy Flow keeps of who may do what to
//! which racks (`docs/audit.md`, "Who may"). A grant gives a subject — a
//! verified user `ACCOUNT/user`, or every user of an account `ACCOUNT/*`
//! (the account is the group the NATS server vouches for) — a role over a
//! scope of racks: by name, by label, or all of them. Enforced in verified
//! identity mode; the decision is `flow_decisions::access`'s.

use std::collections::BTreeMap;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use time::OffsetDateTime;

use crate::api::{ApiError, ErrorCode};

/// What a grant lets its subject do, each role including the ones before.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize, JsonSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    /// Reads.
    Viewer,
    /// Tasks, runs, schedules, event rules and their bindings, clears.
    Operator,
    /// Rules, racks, power domains and models, the policy itself.
    Admin,
}

impl Role {
    /// The name, as stored and shown.
    pub fn as_str(self) -> &'static str {
        match self {
            Role::Viewer => "viewer",
            Role::Operator => "operator",
            Role::Admin => "admin",
        }
    }
}

impl std::fmt::Display for Role {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::str::FromStr for Role {
    type Err = String;

    fn from_str(text: &str) -> Result<Role, String> {
        match text {
            "viewer" => Ok(Role::Viewer),
            "operator" => Ok(Role::Operator),
            "admin" => Ok(Role::Admin),
            other => Err(format!("role: {other:?} is not viewer, operator or admin")),
        }
    }
}

/// `access.grant`: give `subject` `role` over a scope of racks.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct AccessGrant {
    /// A verified user `ACCOUNT/user`, or `ACCOUNT/*` for every user of the
    /// account.
    pub subject: String,
    /// The role.
    pub role: Role,
    /// Racks by name. With `labels` empty too, the grant covers every rack.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub racks: Vec<String>,
    /// Racks carrying every one of these labels (`row=A`).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub labels: BTreeMap<String, String>,
}

impl AccessGrant {
    /// What decoding cannot check: a subject of the form `ACCOUNT/user`
    /// or `ACCOUNT/*`; racks by name or by labels, not both.
    pub fn check(&self) -> Result<(), ApiError> {
        check_subject(&self.subject)?;
        if !self.racks.is_empty() && !self.labels.is_empty() {
            return Err(ApiError::new(
                ErrorCode::BadRequest,
                "racks: name racks or labels, not both (grant each on its own)",
            ));
        }
        if let Some(r) = self.racks.iter().find(|r| r.trim().is_empty()) {
            return Err(ApiError::new(
                ErrorCode::BadRequest,
                format!("racks: {r:?} is no rack name"),
            ));
        }
        Ok(())
    }
}

/// Checks a subject: `ACCOUNT/user` or `ACCOUNT/*`.
pub fn check_subject(subject: &str) -> Result<(), ApiError> {
    let ok = subject.split_once('/').is_some_and(|(acc, user)| {
        !acc.is_empty()
            && !user.is_empty()
            && !user.contains('/')
            && !subject.chars().any(char::is_whitespace)
    });
    if ok {
        Ok(())
    } else {
        Err(ApiError::new(
            ErrorCode::BadRequest,
            format!(
                "subject: {subject:?} is not ACCOUNT/user or ACCOUNT/* (the account and user the NATS server verifies, e.g. OPS/alice)"
            ),
        ))
    }
}

/// A grant as kept.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct AccessGrantRecord {
    /// Its number (`access.revoke` takes it).
    pub id: i64,
    /// Whom it names.
    pub subject: String,
    /// The role.
    pub role: Role,
    /// Racks by name (with `labels`, empty: every rack).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub racks: Vec<String>,
    /// Racks by label.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub labels: BTreeMap<String, String>,
    /// Who granted it (`flow-scheduler --admin` for the ones it was started
    /// with).
    pub granted_by: String,
    /// When.
    #[schemars(with = "crate::contract::Timestamp")]
    #[serde(with = "time::serde::rfc3339")]
    pub granted_at: OffsetDateTime,
}

impl AccessGrantRecord {
    /// The racks it covers, for people: `every rack`, `racks r1, r2`,
    /// `racks labelled row=A`.
    pub fn scope_text(&self) -> String {
        if !self.racks.is_empty() {
            format!("racks {}", self.racks.join(", "))
        } else if !self.labels.is_empty() {
            let labels: Vec<String> = self
                .labels
                .iter()
                .map(|(k, v)| format!("{k}={v}"))
                .collect();
            format!("racks labelled {}", labels.join(", "))
        } else {
            "every rack".to_owned()
        }
    }
}

/// `access.revoke`: remove a grant.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct AccessRevoke {
    /// The grant's number.
    pub id: i64,
}

/// `access.revoke` reply: the grant removed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct AccessRevokeReply {
    /// What it was.
    pub revoked: AccessGrantRecord,
}

/// `access.list`: the grants, of one subject or all.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct AccessList {
    /// Only the grants that apply to this user (`OPS/alice`: hers and
    /// `OPS/*`'s).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub subject: Option<String>,
}

/// `access.list` reply.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct AccessListReply {
    /// Oldest first.
    pub grants: Vec<AccessGrantRecord>,
}

/// `access.check`: would the policy let `subject` call `endpoint` on
/// `racks`?
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct AccessCheck {
    /// The verified user, `ACCOUNT/user`.
    pub subject: String,
    /// An endpoint of `flow.api`, `task.submit`.
    pub endpoint: String,
    /// The racks it would touch, by name.
    #[serde(default)]
    pub racks: Vec<String>,
}

/// `access.check` reply.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct AccessCheckReply {
    /// Whether it would go.
    pub allowed: bool,
    /// The role the endpoint needs (none: Flow's own processes only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub needs: Option<Role>,
    /// The grants that let it (by number), or why not.
    pub reason: String,
}
