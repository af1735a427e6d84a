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
use flow_protocol::audit::{
    Actor, ActorSource, EndpointKind, ON_BEHALF_HEADER, UNKNOWN_ACTOR, clean_name,
};

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
    pub actor: Box<Actor>,
}

/// The actor of a request to an endpoint of `kind` named `endpoint`, from
/// its headers as `(name, value)` pairs (every copy, as received) and its
/// `Flow-Actor` claim, or the refusal naming why.
/// In verified mode a request of one of `intermediaries` (verified users,
/// `ACCOUNT/user`: the console) that names its end user in
/// `Flow-On-Behalf-Of` acts as that user of the intermediary's account
/// ([`on_behalf`]).
pub fn resolve<'a>(
    mode: IdentityMode,
    intermediaries: &[String],
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
            via: None,
        }),
        IdentityMode::Verified => {
            let headers: Vec<(&str, &str)> = headers.into_iter().collect();
            let actor = verified(endpoint, kind, headers.iter().copied(), claimed)?;
            on_behalf(intermediaries, endpoint, actor, &headers)
        }
    }
}

/// The actor a verified request acts as: itself, or — when it is one of
/// `intermediaries` and names exactly one user in `Flow-On-Behalf-Of` —
/// that user of its own account, the intermediary kept as `via` (as
/// Kubernetes' impersonation: the named user's grants apply, and the
/// intermediary can name no one outside its account). Anyone else naming
/// a user is refused `forbidden`, recorded as themselves; a copy of the
/// header in another letter case, two, or a name that is not a plain user
/// name, `unauthenticated`.
fn on_behalf(
    intermediaries: &[String],
    endpoint: &str,
    actor: Actor,
    headers: &[(&str, &str)],
) -> Result<Actor, Refusal> {
    let named: Vec<(&str, &str)> = headers
        .iter()
        .copied()
        .filter(|(name, _)| name.eq_ignore_ascii_case(ON_BEHALF_HEADER))
        .collect();
    if named.is_empty() {
        return Ok(actor);
    }
    let refuse = |code: ErrorCode, why: String| Refusal {
        error: ApiError::new(code, format!("{endpoint}: {why}")),
        actor: Box::new(actor.clone()),
    };
    let trusted = actor.source == ActorSource::Verified && intermediaries.contains(&actor.name);
    if !trusted {
        return Err(refuse(
            ErrorCode::Forbidden,
            format!(
                "{} may not act on behalf of another user ({ON_BEHALF_HEADER}): only a trusted intermediary may (flow-scheduler --intermediary)",
                actor.name
            ),
        ));
    }
    let user = match named.as_slice() {
        [(name, user)] if *name == ON_BEHALF_HEADER => clean_name(user),
        [(name, _)] => {
            return Err(refuse(
                ErrorCode::Unauthenticated,
                format!("a {name:?} header: the end user is named in {ON_BEHALF_HEADER}, exactly"),
            ));
        }
        _ => {
            return Err(refuse(
                ErrorCode::Unauthenticated,
                format!(
                    "{} {ON_BEHALF_HEADER} headers: an intermediary names one user",
                    named.len()
                ),
            ));
        }
    };
    if user.is_empty()
        || user.contains('/')
        || user.contains('*')
        || user.contains(char::is_whitespace)
    {
        return Err(refuse(
            ErrorCode::Unauthenticated,
            format!(
                "{ON_BEHALF_HEADER}: {user:?} is not a user name (one word, no '/' or '*': it is qualified by the intermediary's account)"
            ),
        ));
    }
    let account = actor
        .name
        .split_once('/')
        .map_or(actor.name.as_str(), |(acc, _)| acc);
    Ok(Actor {
        name: format!("{account}/{user}"),
        source: ActorSource::Intermediary,
        claimed: actor.claimed.clone(),
        via: Some(actor.name),
    })
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
        via: None,
    };
    let refuse = |code: ErrorCode, why: String, actor: &Actor| Refusal {
        error: ApiError::new(code, format!("{endpoint}: {why}")),
        actor: Box::new(actor.clone()),
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
                via: None,
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
        via: None,
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
            &[],
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
            &[],
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
    fn a_trusted_intermediary_names_a_user_of_its_own_account() {
        const CONSOLE: &str = r#"{"acc":"CONSOLE","user":"console"}"#;
        let trusted = ["CONSOLE/console".to_owned()];
        let ask = |headers: &[(&str, &str)]| {
            resolve(
                IdentityMode::Verified,
                &trusted,
                "task.submit",
                EndpointKind::Change,
                headers.iter().copied(),
                Some("console:carol"),
            )
        };
        let actor = ask(&[(REQUEST_INFO_HEADER, CONSOLE), (ON_BEHALF_HEADER, "carol")]).unwrap();
        assert_eq!(actor.name, "CONSOLE/carol");
        assert_eq!(actor.source, ActorSource::Intermediary);
        assert_eq!(actor.via.as_deref(), Some("CONSOLE/console"));
        assert_eq!(actor.claimed.as_deref(), Some("console:carol"));
        // Without the header the intermediary is itself.
        let itself = ask(&[(REQUEST_INFO_HEADER, CONSOLE)]).unwrap();
        assert_eq!(
            (itself.name.as_str(), itself.source),
            ("CONSOLE/console", ActorSource::Verified)
        );
        // Anyone else naming a user is refused as themselves.
        let refusal =
            ask(&[(REQUEST_INFO_HEADER, STAMP), (ON_BEHALF_HEADER, "carol")]).unwrap_err();
        assert_eq!(refusal.error.code, ErrorCode::Forbidden);
        assert_eq!(refusal.actor.name, "OPS/alice");
        assert!(
            refusal
                .error
                .message
                .contains("OPS/alice may not act on behalf"),
            "{refusal:?}"
        );
        // Another case, two names, or a name that reaches out of the account.
        for headers in [
            vec![
                (REQUEST_INFO_HEADER, CONSOLE),
                ("flow-on-behalf-of", "carol"),
            ],
            vec![
                (REQUEST_INFO_HEADER, CONSOLE),
                (ON_BEHALF_HEADER, "carol"),
                (ON_BEHALF_HEADER, "dave"),
            ],
            vec![
                (REQUEST_INFO_HEADER, CONSOLE),
                (ON_BEHALF_HEADER, "OPS/alice"),
            ],
            vec![(REQUEST_INFO_HEADER, CONSOLE), (ON_BEHALF_HEADER, "*")],
            vec![(REQUEST_INFO_HEADER, CONSOLE), (ON_BEHALF_HEADER, "  ")],
        ] {
            let refusal = ask(&headers).unwrap_err();
            assert_eq!(
                refusal.error.code,
                ErrorCode::Unauthenticated,
                "{headers:?}"
            );
            assert_eq!(refusal.actor.name, "CONSOLE/console", "{headers:?}");
        }
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
