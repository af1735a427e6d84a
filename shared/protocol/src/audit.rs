//! The audit log's contract: who a request comes from (the identity the
//! NATS server verified, or the development user) beside who it claims to
//! come from (the `Flow-Actor` header), what kind of endpoint it reached,
//! and the `audit.list` request and reply. The records themselves are written by
//! the scheduler in the transaction of each change (docs/audit.md).

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use time::OffsetDateTime;

use crate::envelope::{ApiError, ErrorCode};

/// The NATS header a client names its operator in. A claim, not an
/// authenticated identity: whoever can publish on `flow.api` can set it;
/// it is recorded beside the verified actor (`claimed_actor`).
pub const ACTOR_HEADER: &str = "Flow-Actor";

/// The header a trusted intermediary (the console) names its end user in:
/// a user name, qualified by the intermediary's own account
/// (`docs/audit.md`, "Through the console").
pub const ON_BEHALF_HEADER: &str = "Flow-On-Behalf-Of";

/// The actor of records written before identities were verified, whose
/// request carried no `Flow-Actor` header.
pub const UNKNOWN_ACTOR: &str = "unknown";

/// The longest actor name kept (a longer header is cut to this).
pub const MAX_ACTOR_LEN: usize = 128;

/// The longest reason a request may give.
pub const MAX_REASON_LEN: usize = 1024;

/// Records in one `audit.list` reply at most.
pub const MAX_LIST_LIMIT: u32 = 1000;

/// Records in one `audit.list` reply unless the request says otherwise.
pub const DEFAULT_LIST_LIMIT: u32 = 100;

/// What an endpoint does, which decides whether it is audited.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum EndpointKind {
    /// Only reads: never audited.
    Read,
    /// Changes state on an operator's or a watcher's behalf: every request
    /// leaves exactly one audit record.
    Change,
    /// Used by Flow's own processes (a worker's bookkeeping), not an
    /// operator's decision: not audited (it would flood the log); what it
    /// leads to is recorded where it happens (the task's record).
    Internal,
}

impl EndpointKind {
    /// The name, as stored.
    pub fn as_str(self) -> &'static str {
        match self {
            EndpointKind::Read => "read",
            EndpointKind::Change => "change",
            EndpointKind::Internal => "internal",
        }
    }

    /// Whether requests to such an endpoint are audited.
    pub fn is_audited(self) -> bool {
        matches!(self, EndpointKind::Change)
    }
}

/// Where a record's actor came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum ActorSource {
    /// The NATS server's stamp (`Nats-Request-Info`): `<account>/<user>`,
    /// authenticated by the server (verified mode).
    Verified,
    /// Inside Flow's own account, unstamped: one of Flow's processes
    /// (verified mode; reads, hardware events and internal endpoints only).
    Service,
    /// Development mode: nothing verified, every caller is one user.
    Development,
    /// Verified mode, refused: the request's identity could not be
    /// established (no stamp where one is needed, two, another case);
    /// the actor is [`UNKNOWN_ACTOR`].
    Unverified,
    /// Records written before identities were verified: the `Flow-Actor`
    /// header, a claim.
    Header,
    /// Records written before identities were verified, without a
    /// `Flow-Actor` header: [`UNKNOWN_ACTOR`].
    Default,
    /// Named by a trusted intermediary (the console) whose own identity
    /// the NATS server stamped: `<its account>/<the user it names>`; the
    /// intermediary is kept as `via` (verified mode).
    Intermediary,
}

impl ActorSource {
    /// Every source.
    pub const ALL: [ActorSource; 7] = [
        ActorSource::Verified,
        ActorSource::Service,
        ActorSource::Development,
        ActorSource::Unverified,
        ActorSource::Header,
        ActorSource::Default,
        ActorSource::Intermediary,
    ];

    /// The name, as stored.
    pub fn as_str(self) -> &'static str {
        match self {
            ActorSource::Verified => "verified",
            ActorSource::Service => "service",
            ActorSource::Development => "development",
            ActorSource::Unverified => "unverified",
            ActorSource::Header => "header",
            ActorSource::Default => "default",
            ActorSource::Intermediary => "intermediary",
        }
    }

    /// The source named `text`.
    pub fn parse(text: &str) -> Option<ActorSource> {
        Self::ALL.into_iter().find(|s| s.as_str() == text)
    }
}

/// Who a request comes from, and who it says it comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Actor {
    /// The name (at most [`MAX_ACTOR_LEN`] characters, no control
    /// characters).
    pub name: String,
    /// Where it came from.
    pub source: ActorSource,
    /// The request's `Flow-Actor` header, cleaned as the name; a claim
    /// nobody verified (the console names its user in it).
    pub claimed: Option<String>,
    /// The verified intermediary that named this actor (source
    /// [`ActorSource::Intermediary`]).
    pub via: Option<String>,
}

/// `text` trimmed, its control characters dropped and cut to
/// [`MAX_ACTOR_LEN`] characters: how any name is kept.
pub fn clean_name(text: &str) -> String {
    text.chars()
        .filter(|c| !c.is_control())
        .collect::<String>()
        .trim()
        .chars()
        .take(MAX_ACTOR_LEN)
        .collect()
}

/// How a request ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum AuditOutcome {
    /// It was carried out (its change is committed with the record).
    Ok,
    /// It was refused before any change: invalid, not found, a conflict.
    Refused,
    /// A fault (the database, a dependency) stopped it; nothing changed.
    Error,
}

impl AuditOutcome {
    /// Every outcome.
    pub const ALL: [AuditOutcome; 3] =
        [AuditOutcome::Ok, AuditOutcome::Refused, AuditOutcome::Error];

    /// The name, as stored.
    pub fn as_str(self) -> &'static str {
        match self {
            AuditOutcome::Ok => "ok",
            AuditOutcome::Refused => "refused",
            AuditOutcome::Error => "error",
        }
    }

    /// The outcome named `text`.
    pub fn parse(text: &str) -> Option<AuditOutcome> {
        Self::ALL.into_iter().find(|o| o.as_str() == text)
    }

    /// The outcome of a request answered with `error`: the caller's
    /// mistakes are refusals, faults are errors.
    pub fn of_error(error: &ApiError) -> AuditOutcome {
        match error.code {
            ErrorCode::BadRequest
            | ErrorCode::Invalid
            | ErrorCode::NotFound
            | ErrorCode::Conflict
            | ErrorCode::Unauthenticated
            | ErrorCode::Forbidden => AuditOutcome::Refused,
            ErrorCode::Unavailable | ErrorCode::Internal => AuditOutcome::Error,
        }
    }
}

/// Checks an operator's reason for an override: required (`field` names
/// what needs it), not blank, at most [`MAX_REASON_LEN`] characters.
pub fn check_reason(reason: Option<&str>, needed_by: &str) -> Result<(), ApiError> {
    let bad = |m: String| Err(ApiError::new(ErrorCode::BadRequest, m));
    match reason {
        None => bad(format!("reason: required with {needed_by}")),
        Some(r) if r.trim().is_empty() => bad(format!(
            "reason: must not be blank (required with {needed_by})"
        )),
        Some(r) if r.chars().count() > MAX_REASON_LEN => bad(format!(
            "reason: must be at most {MAX_REASON_LEN} characters"
        )),
        Some(r) if r.chars().any(|c| c.is_control() && c != '\n') => {
            bad("reason: must not contain control characters".to_owned())
        }
        Some(_) => Ok(()),
    }
}

/// `audit.list`: records newest first, each filter narrowing.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct AuditList {
    /// At or after this (RFC 3339).
    #[schemars(with = "Option<crate::contract::Timestamp>")]
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        with = "crate::task::timestamp::option"
    )]
    pub since: Option<OffsetDateTime>,
    /// Before this (RFC 3339).
    #[schemars(with = "Option<crate::contract::Timestamp>")]
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        with = "crate::task::timestamp::option"
    )]
    pub until: Option<OffsetDateTime>,
    /// Only records whose actor (verified) or claimed actor is this.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub actor: Option<String>,
    /// Only records naming this rack (by name).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rack: Option<String>,
    /// Only this endpoint (`task.submit`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub endpoint: Option<String>,
    /// Only this outcome.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub outcome: Option<AuditOutcome>,
    /// At most this many (default [`DEFAULT_LIST_LIMIT`], at most
    /// [`MAX_LIST_LIMIT`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limit: Option<u32>,
}

impl AuditList {
    /// What decoding cannot check, but the endpoint's name (the catalog
    /// checks it: `AuditList::check` in `crate::api`): a limit of 1 to
    /// [`MAX_LIST_LIMIT`], `until` later than `since`.
    pub(crate) fn check_fields(&self) -> Result<(), ApiError> {
        let bad = |m: String| Err(ApiError::new(ErrorCode::BadRequest, m));
        if let Some(limit) = self.limit
            && !(1..=MAX_LIST_LIMIT).contains(&limit)
        {
            return bad(format!("limit: must be 1 to {MAX_LIST_LIMIT}, got {limit}"));
        }
        if let (Some(since), Some(until)) = (self.since, self.until)
            && until <= since
        {
            return bad("until: must be later than since".to_owned());
        }
        Ok(())
    }

    /// The limit to apply.
    pub fn effective_limit(&self) -> u32 {
        self.limit
            .unwrap_or(DEFAULT_LIST_LIMIT)
            .clamp(1, MAX_LIST_LIMIT)
    }
}

/// One audit record.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct AuditRecord {
    /// Its place in the log (increasing).
    pub id: i64,
    /// When it was written (the change's transaction time).
    #[schemars(with = "crate::contract::Timestamp")]
    #[serde(with = "time::serde::rfc3339")]
    pub at: OffsetDateTime,
    /// Who the request came from: `<account>/<user>` as the NATS server
    /// verified it, or the development user (see `actor_source`).
    pub actor: String,
    /// Where that name came from.
    pub actor_source: ActorSource,
    /// Who the request said it came from (its `Flow-Actor` header): a
    /// claim, never checked.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub claimed_actor: Option<String>,
    /// The trusted intermediary, verified by the server, that named the
    /// actor (`actor_source` `intermediary`: the console's service user).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub via: Option<String>,
    /// The endpoint.
    pub endpoint: String,
    /// Its kind.
    pub kind: EndpointKind,
    /// Racks it named (by name, as given or resolved).
    #[serde(default)]
    pub racks: Vec<String>,
    /// Tasks it named.
    #[serde(default)]
    pub task_ids: Vec<crate::TaskId>,
    /// Any other target (a rule, schedule, run or event rule).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target: Option<String>,
    /// The request as received.
    pub request: Value,
    /// How it ended.
    pub outcome: AuditOutcome,
    /// The refusal or error message (empty when ok).
    #[serde(default)]
    pub message: String,
    /// The operator's reason, if given.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

impl AuditRecord {
    /// Who, in one line for people: the actor, how it is known when it is
    /// not verified, and the claim beside it (`OPS/alice`, `OPS/alice
    /// (claims root)`, `development (claims alice)`, `alice (claimed)`).
    pub fn who(&self) -> String {
        let claim = self
            .claimed_actor
            .as_deref()
            .filter(|c| *c != self.actor)
            .map(|c| format!(" (claims {c})"))
            .unwrap_or_default();
        match self.actor_source {
            ActorSource::Verified | ActorSource::Service | ActorSource::Development => {
                format!("{}{claim}", self.actor)
            }
            ActorSource::Unverified => format!("{} (unverified){claim}", self.actor),
            ActorSource::Header => format!("{} (claimed)", self.actor),
            ActorSource::Default => format!("{} (no header)", self.actor),
            ActorSource::Intermediary => format!(
                "{} (via {}){claim}",
                self.actor,
                self.via.as_deref().unwrap_or("an intermediary")
            ),
        }
    }
}

/// `audit.list` reply.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct AuditListReply {
    /// Newest first.
    pub records: Vec<AuditRecord>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_name_is_trimmed_cleaned_and_cut() {
        assert_eq!(clean_name("  alice\n"), "alice");
        assert_eq!(clean_name(" a\u{7}b "), "ab");
        let long = "x".repeat(MAX_ACTOR_LEN + 10);
        assert_eq!(clean_name(&long).len(), MAX_ACTOR_LEN);
        for source in ActorSource::ALL {
            assert_eq!(ActorSource::parse(source.as_str()), Some(source));
        }
    }

    #[test]
    fn a_reason_is_required_and_not_blank() {
        let msg = |r: Option<&str>| check_reason(r, "override_readiness").map_err(|e| e.message);
        assert_eq!(
            msg(None),
            Err("reason: required with override_readiness".into())
        );
        assert!(
            msg(Some("  "))
                .unwrap_err()
                .starts_with("reason: must not be blank")
        );
        assert!(
            msg(Some(&"r".repeat(MAX_REASON_LEN + 1)))
                .unwrap_err()
                .starts_with("reason: must be at most")
        );
        assert_eq!(msg(Some("tray 7 swapped, checked by hand")), Ok(()));
    }

    #[test]
    fn a_listing_checks_its_limit_window_and_endpoint() {
        let check = |body: serde_json::Value| {
            crate::decode::request::<AuditList>(body.to_string().as_bytes())
                .unwrap()
                .check()
                .map_err(|e| e.message)
        };
        assert_eq!(check(serde_json::json!({})), Ok(()));
        assert!(
            check(serde_json::json!({"limit": 0}))
                .unwrap_err()
                .starts_with("limit:")
        );
        assert!(
            check(serde_json::json!({"limit": 1001}))
                .unwrap_err()
                .starts_with("limit:")
        );
        assert!(
            check(serde_json::json!({"since": "2026-01-02T00:00:00Z", "until": "2026-01-01T00:00:00Z"}))
                .unwrap_err()
                .starts_with("until:")
        );
        assert!(
            check(serde_json::json!({"endpoint": "nope.x"}))
                .unwrap_err()
                .starts_with("endpoint:")
        );
        assert_eq!(
            check(serde_json::json!({"endpoint": "task.submit"})),
            Ok(())
        );
    }
}
