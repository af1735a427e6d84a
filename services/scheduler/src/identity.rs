//! Who a `flow.api` request comes from (docs/audit.md, "Who").
//!
//! In **verified** mode the identity is the one the NATS server stamps: a
//! request that crosses a service import with `share: true` into the
//! scheduler's account carries exactly one `Nats-Request-Info` header with
//! the requesting account and authenticated user, which the server writes
//! over any copy the client sent (`deploy/nats/flow-verified.conf`). A
//! request with none comes from inside the scheduler's own account — Flow's
//! own processes — and may only read and use the internal endpoints (a
//! worker's power admission; a watcher reports hardware events on its
//! stream, not here); one with two, or with a copy in another letter case,
//! is refused. In **development** mode (the embedded default, one account)
//! nothing is verified: every caller is the one development user.
//! Either way the `Flow-Actor` header is kept beside as a claim.
//!
//! The decision is pure ([`resolve`]): headers in, actor or refusal out.

use flow_protocol::api::{ApiError, ErrorCode};
use flow_protocol::audit::{Actor, ActorSource, EndpointKind, UNKNOWN_ACTOR, clean_name};

/// The header the NATS server stamps on requests crossing a service import
/// (nats-server `server/accounts.go`, `ClientInfoHdr`).
pub const REQUEST_INFO_HEADER: &str = "Nats-Request-Info";

/// The one user every caller is in development mode.
pub const DEVELOPMENT_USER: &str = "development";

/// The account named for Flow's own processes (unstamped requests in
/// verified mode).
pub const SERVICE_ACTOR: &str = "flow-service";

/// How the scheduler knows who calls it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum IdentityMode {
    /// Nothing verified: every caller is [`DEVELOPMENT_USER`] (a single
    /// account server, `scripts/demo`).
    #[default]
    Development,
    /// The identity the NATS server stamps (`Nats-Request-Info`).
    Verified,
}

impl IdentityMode {
    /// The name, as configured (`--identity`, `FLOW_IDENTITY`).
    pub fn as_str(self) -> &'static str {
        match self {
            IdentityMode::Development => "development",
            IdentityMode::Verified => "verified",
        }
    }
}

impl std::str::FromStr for IdentityMode {
    type Err = String;

    fn from_str(text: &str) -> Result<IdentityMode, String> {
        match text {
            "development" => Ok(IdentityMode::Development),
            "verified" => Ok(IdentityMode::Verified),
            other => Err(format!(
                "identity: {other:?} is neither \"development\" nor \"verified\""
            )),
        }
    }
}

/// What the server's stamp says (the fields Flow trusts; `name`, the
/// connection name, is the client's choice and is not read).
#[derive(Debug, serde::Deserialize)]
struct RequestInfo {
    #[serde(default)]
    acc: String,
    #[serde(default)]
    user: String,
}

/// A request refused for who sent it: why, and who it is recorded as (the
/// verified user when the server's stamp was there, else
/// [`UNKNOWN_ACTOR`], `unverified`).
#[derive(Debug)]
pub struct Refusal {
    /// The reply: `unauthenticated` or `forbidden`, naming the endpoint.
    pub error: ApiError,
    /// Who the audit records.
    pub actor: Actor,
}

/// The actor of a request to an endpoint of `kind` named `endpoint`, from
/// its headers as `(name, value)` pairs (every copy, as received) and its
/// `Flow-Actor` claim, or the refusal naming why.
pub fn resolve<'a>(
    mode: IdentityMode,
    endpoint: &str,
    kind: EndpointKind,
    headers: impl IntoIterator<Item = (&'a str, &'a str)>,
    claim: Option<&str>,
) -> Result<Actor, Refusal> {
    let claimed = claim.map(clean_name).filter(|c| !c.is_empty());
    match mode {
        IdentityMode::Development => Ok(Actor {
            name: DEVELOPMENT_USER.to_owned(),
            source: ActorSource::Development,
            claimed,
        }),
        IdentityMode::Verified => verified(endpoint, kind, headers, claimed),
    }
}

fn verified<'a>(
    endpoint: &str,
    kind: EndpointKind,
    headers: impl IntoIterator<Item = (&'a str, &'a str)>,
    claimed: Option<String>,
) -> Result<Actor, Refusal> {
    let unknown = Actor {
        name: UNKNOWN_ACTOR.to_owned(),
        source: ActorSource::Unverified,
        claimed: claimed.clone(),
    };
    let refuse = |code: ErrorCode, why: String, actor: &Actor| Refusal {
        error: ApiError::new(code, format!("{endpoint}: {why}")),
        actor: actor.clone(),
    };
    let mut stamps = Vec::new();
    let mut other_case = None;
    for (name, value) in headers {
        if name == REQUEST_INFO_HEADER {
            stamps.push(value);
        } else if name.eq_ignore_ascii_case(REQUEST_INFO_HEADER) {
            other_case = Some(name);
        }
    }
    let actor = match stamps.as_slice() {
        [] => None,
        [stamp] => Some(
            stamped(stamp, claimed.clone())
                .map_err(|why| refuse(ErrorCode::Unauthenticated, why, &unknown))?,
        ),
        _ => {
            return Err(refuse(
                ErrorCode::Unauthenticated,
                format!(
                    "{} {REQUEST_INFO_HEADER} headers; the server stamps exactly one",
                    stamps.len()
                ),
                &unknown,
            ));
        }
    };
    // A copy in another letter case is never the server's (it matches the
    // name exactly): someone tried. Refused, recorded as whoever the
    // server says sent it.
    if let Some(name) = other_case {
        return Err(refuse(
            ErrorCode::Unauthenticated,
            format!(
                "a {name:?} header (the server's {REQUEST_INFO_HEADER} in another letter case) was sent; refused"
            ),
            actor.as_ref().unwrap_or(&unknown),
        ));
    }
    match actor {
        None => {
            if kind == EndpointKind::Change {
                return Err(refuse(
                    ErrorCode::Unauthenticated,
                    format!(
                        "no {REQUEST_INFO_HEADER}: the request did not come through an operator account's import (only Flow's own processes call from inside its account, and they may not change this)"
                    ),
                    &unknown,
                ));
            }
            Ok(Actor {
                name: SERVICE_ACTOR.to_owned(),
                source: ActorSource::Service,
                claimed,
            })
        }
        Some(actor) if kind == EndpointKind::Internal => Err(refuse(
            ErrorCode::Forbidden,
            "only Flow's own processes call it".to_owned(),
            &actor,
        )),
        Some(actor) => Ok(actor),
    }
}

/// The verified actor of the server's stamp, or why it names none.
fn stamped(stamp: &str, claimed: Option<String>) -> Result<Actor, String> {
    let info: RequestInfo = serde_json::from_str(stamp)
        .map_err(|error| format!("{REQUEST_INFO_HEADER} is not the server's JSON: {error}"))?;
    let (acc, user) = (clean_name(&info.acc), clean_name(&info.user));
    if acc.is_empty() || user.is_empty() {
        return Err(format!(
            "{REQUEST_INFO_HEADER} names no account and user (the import must have share: true, the user a name: not a bare token)"
        ));
    }
    Ok(Actor {
        name: format!("{acc}/{user}"),
        source: ActorSource::Verified,
        claimed,
    })
}

/// The least nats-server version that strips every forged
/// `Nats-Request-Info` (CVE-2026-33223, CVE-2026-33246): 2.11.15 in 2.11,
/// 2.12.6 in 2.12, and 2.14.0 onwards.
pub fn server_strips_forgeries(version: &str) -> bool {
    let mut parts = version
        .trim_start_matches('v')
        .split(|c: char| !c.is_ascii_digit())
        .map(|p| p.parse::<u64>().ok());
    let (Some(Some(major)), Some(Some(minor)), Some(Some(patch))) =
        (parts.next(), parts.next(), parts.next())
    else {
        return false;
    };
    match (major, minor) {
        (0..=1, _) => false,
        (2, 0..=10) => false,
        (2, 11) => patch >= 15,
        (2, 12) => patch >= 6,
        (2, 13) => false,
        _ => true,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const STAMP: &str = r#"{"acc":"OPS","user":"alice","name":"claimed-name","kind":"Client"}"#;

    fn verified(
        endpoint: &str,
        kind: EndpointKind,
        headers: &[(&str, &str)],
    ) -> Result<Actor, Refusal> {
        resolve(
            IdentityMode::Verified,
            endpoint,
            kind,
            headers.iter().copied(),
            Some("root"),
        )
    }

    #[test]
    fn the_stamp_is_the_actor_and_the_header_a_claim() {
        let actor = verified(
            "task.submit",
            EndpointKind::Change,
            &[("Flow-Actor", "root"), (REQUEST_INFO_HEADER, STAMP)],
        )
        .unwrap();
        assert_eq!(actor.name, "OPS/alice");
        assert_eq!(actor.source, ActorSource::Verified);
        assert_eq!(actor.claimed.as_deref(), Some("root"));
    }

    #[test]
    fn two_stamps_another_case_or_a_bad_one_are_refused() {
        for (headers, recorded) in [
            (
                vec![(REQUEST_INFO_HEADER, STAMP), (REQUEST_INFO_HEADER, STAMP)],
                UNKNOWN_ACTOR,
            ),
            (
                vec![
                    ("nats-request-info", r#"{"acc":"FLOW","user":"root"}"#),
                    (REQUEST_INFO_HEADER, STAMP),
                ],
                "OPS/alice",
            ),
            (
                vec![("NATS-REQUEST-INFO", r#"{"acc":"FLOW","user":"root"}"#)],
                UNKNOWN_ACTOR,
            ),
            (vec![(REQUEST_INFO_HEADER, "not json")], UNKNOWN_ACTOR),
            (
                vec![(REQUEST_INFO_HEADER, r#"{"acc":"OPS","user":"  "}"#)],
                UNKNOWN_ACTOR,
            ),
            (
                vec![(REQUEST_INFO_HEADER, r#"{"acc":"OPS"}"#)],
                UNKNOWN_ACTOR,
            ),
        ] {
            let refusal = verified("task.submit", EndpointKind::Change, &headers).unwrap_err();
            assert_eq!(
                refusal.error.code,
                ErrorCode::Unauthenticated,
                "{headers:?}"
            );
            assert!(
                refusal.error.message.starts_with("task.submit: "),
                "{refusal:?}"
            );
            assert_eq!(refusal.actor.name, recorded, "{headers:?}");
            assert_eq!(refusal.actor.claimed.as_deref(), Some("root"));
        }
    }

    #[test]
    fn unstamped_requests_are_flows_own_and_may_not_change_things() {
        for endpoint in ["task.submit", "event.publish"] {
            let refusal = verified(endpoint, EndpointKind::Change, &[]).unwrap_err();
            assert_eq!(refusal.error.code, ErrorCode::Unauthenticated);
            assert_eq!(refusal.actor.source, ActorSource::Unverified);
        }
        for (endpoint, kind) in [
            ("rack.get", EndpointKind::Read),
            ("power.admit", EndpointKind::Internal),
        ] {
            let actor = verified(endpoint, kind, &[]).unwrap();
            assert_eq!(
                (actor.name.as_str(), actor.source),
                (SERVICE_ACTOR, ActorSource::Service)
            );
        }
        let refusal = verified(
            "power.admit",
            EndpointKind::Internal,
            &[(REQUEST_INFO_HEADER, STAMP)],
        )
        .unwrap_err();
        assert_eq!(refusal.error.code, ErrorCode::Forbidden);
        assert_eq!(refusal.actor.name, "OPS/alice");
    }

    #[test]
    fn development_mode_has_one_user_and_keeps_the_claim() {
        let actor = resolve(
            IdentityMode::Development,
            "task.submit",
            EndpointKind::Change,
            [(REQUEST_INFO_HEADER, STAMP)],
            Some(" alice "),
        )
        .unwrap();
        assert_eq!(actor.name, DEVELOPMENT_USER);
        assert_eq!(actor.source, ActorSource::Development);
        assert_eq!(actor.claimed.as_deref(), Some("alice"));
    }

    #[test]
    fn only_servers_that_strip_forgeries_serve_verified_mode() {
        for (version, ok) in [
            ("2.10.29", false),
            ("2.11.14", false),
            ("2.11.15", true),
            ("2.12.5", false),
            ("2.12.6", true),
            ("2.13.2", false),
            ("2.14.0", true),
            ("2.14.6", true),
            ("2.15.0-dev", true),
            ("3.0.0", true),
            ("garbage", false),
        ] {
            assert_eq!(server_strips_forgeries(version), ok, "{version}");
        }
    }
}
