//! Who may, decided: a verified user's request against the policy's grants
//! (`flow_protocol::access`). Pure: the scheduler reads the grants and the
//! racks a request touches, this answers which grants let it or why not
//! (`docs/audit.md`, "Who may").
//!
//! * An endpoint **needs** a role by what it does: reads `viewer`; tasks,
//!   schedules, runs, event rules and clears `operator`; rules, racks, power
//!   domains and models and the policy `admin`; the internal endpoints are
//!   Flow's own processes' and no grant opens them.
//! * A grant **applies** to a user when it names the user (`OPS/alice`) or
//!   the user's account (`OPS/*`); it **covers** a rack when it names it,
//!   when the rack carries all its labels, or when it names neither (every
//!   rack).
//! * A request is let when, for each rack it touches, some grant that
//!   applies with a role at least the one needed covers that rack; a
//!   request that touches no rack needs such a grant of any scope.

use std::collections::BTreeMap;

use flow_protocol::access::{AccessGrantRecord, Role};
use flow_protocol::audit::EndpointKind;

/// The role an endpoint of `kind` named `endpoint` needs; `None` for the
/// internal endpoints (no grant opens them).
pub fn needs(endpoint: &str, kind: EndpointKind) -> Option<Role> {
    match kind {
        EndpointKind::Internal => None,
        EndpointKind::Read => Some(Role::Viewer),
        EndpointKind::Change => {
            let area = endpoint.split('.').next().unwrap_or_default();
            Some(match area {
                "task" | "schedule" | "run" | "event_rule" | "event" => Role::Operator,
                _ => Role::Admin,
            })
        }
    }
}

/// A rack as the policy sees it.
#[derive(Debug, Clone, Copy)]
pub struct RackFacts<'a> {
    /// Its name.
    pub name: &'a str,
    /// Its labels.
    pub labels: &'a BTreeMap<String, String>,
}

/// Whether `grant` names `user` (`ACCOUNT/user`) or the user's account.
pub fn applies(grant: &AccessGrantRecord, user: &str) -> bool {
    if grant.subject == user {
        return true;
    }
    match (grant.subject.split_once('/'), user.split_once('/')) {
        (Some((acc, "*")), Some((user_acc, _))) => acc == user_acc,
        _ => false,
    }
}

/// Whether `grant` covers `rack`.
pub fn covers(grant: &AccessGrantRecord, rack: RackFacts<'_>) -> bool {
    if !grant.racks.is_empty() {
        return grant.racks.iter().any(|r| r == rack.name);
    }
    grant
        .labels
        .iter()
        .all(|(k, v)| rack.labels.get(k) == Some(v))
}

/// Why a request was not let: the message of its `forbidden` reply.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Denial {
    /// For the caller and the audit record.
    pub message: String,
}

/// Whether `user` may do what needs `need` to `racks` under `grants`: the
/// numbers of the grants that let it (ascending), or why not.
pub fn check(
    grants: &[AccessGrantRecord],
    user: &str,
    what: &str,
    need: Role,
    racks: &[RackFacts<'_>],
) -> Result<Vec<i64>, Denial> {
    let own: Vec<&AccessGrantRecord> = grants.iter().filter(|g| applies(g, user)).collect();
    let strong: Vec<&AccessGrantRecord> = own.iter().copied().filter(|g| g.role >= need).collect();
    if strong.is_empty() {
        let message = if own.is_empty() {
            format!(
                "{user} may not {what}: no grant names {user} or its account (it needs {need}; an admin grants it with `flow access grant`)"
            )
        } else {
            format!(
                "{user} may not {what}: it needs {need}, and {user} has {}",
                describe(&own)
            )
        };
        return Err(Denial { message });
    }
    let mut used: Vec<i64> = Vec::new();
    if racks.is_empty() {
        used.push(strong[0].id);
    }
    for rack in racks {
        match strong.iter().find(|g| covers(g, *rack)) {
            Some(g) => used.push(g.id),
            None => {
                return Err(Denial {
                    message: format!(
                        "{user} may not {what} on {}: it is outside {user}'s {need} scope ({})",
                        rack.name,
                        describe(&strong)
                    ),
                });
            }
        }
    }
    used.sort_unstable();
    used.dedup();
    Ok(used)
}

/// `viewer on every rack (grant 3); operator on racks labelled row=A (grant 4)`.
fn describe(grants: &[&AccessGrantRecord]) -> String {
    grants
        .iter()
        .map(|g| format!("{} on {} (grant {})", g.role, g.scope_text(), g.id))
        .collect::<Vec<_>>()
        .join("; ")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn grant(
        id: i64,
        subject: &str,
        role: Role,
        racks: &[&str],
        labels: &[(&str, &str)],
    ) -> AccessGrantRecord {
        AccessGrantRecord {
            id,
            subject: subject.into(),
            role,
            racks: racks.iter().map(|r| (*r).to_owned()).collect(),
            labels: labels
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect(),
            granted_by: "OPS/root".into(),
            granted_at: time::OffsetDateTime::UNIX_EPOCH,
        }
    }

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    #[test]
    fn endpoints_need_roles_by_what_they_do() {
        assert_eq!(needs("task.get", EndpointKind::Read), Some(Role::Viewer));
        assert_eq!(
            needs("task.submit", EndpointKind::Change),
            Some(Role::Operator)
        );
        assert_eq!(
            needs("schedule.create", EndpointKind::Change),
            Some(Role::Operator)
        );
        assert_eq!(
            needs("event.clear", EndpointKind::Change),
            Some(Role::Operator)
        );
        assert_eq!(
            needs("rule.create", EndpointKind::Change),
            Some(Role::Admin)
        );
        assert_eq!(needs("rack.label", EndpointKind::Change), Some(Role::Admin));
        assert_eq!(
            needs("power_domain.set", EndpointKind::Change),
            Some(Role::Admin)
        );
        assert_eq!(
            needs("access.grant", EndpointKind::Change),
            Some(Role::Admin)
        );
        assert_eq!(needs("power.admit", EndpointKind::Internal), None);
    }

    #[test]
    fn a_viewer_may_read_but_not_power_on_naming_its_grant() {
        let grants = [grant(3, "OPS/victor", Role::Viewer, &[], &[])];
        let a = labels(&[("row", "A")]);
        let rack = RackFacts {
            name: "rack-01",
            labels: &a,
        };
        assert_eq!(
            check(&grants, "OPS/victor", "task.get", Role::Viewer, &[rack]),
            Ok(vec![3])
        );
        let denied = check(
            &grants,
            "OPS/victor",
            "task.submit",
            Role::Operator,
            &[rack],
        )
        .unwrap_err();
        assert_eq!(
            denied.message,
            "OPS/victor may not task.submit: it needs operator, and OPS/victor has viewer on every rack (grant 3)"
        );
        let nobody = check(&grants, "OPS/mallory", "task.get", Role::Viewer, &[]).unwrap_err();
        assert!(
            nobody
                .message
                .starts_with("OPS/mallory may not task.get: no grant names OPS/mallory"),
            "{}",
            nobody.message
        );
    }

    #[test]
    fn a_scope_by_label_or_name_covers_its_racks_and_no_other() {
        let grants = [
            grant(4, "OPS/alice", Role::Operator, &[], &[("row", "A")]),
            grant(5, "OPS/alice", Role::Operator, &["rack-09"], &[]),
            grant(6, "OPS/*", Role::Viewer, &[], &[]),
        ];
        let (a, b) = (
            labels(&[("row", "A"), ("site", "east")]),
            labels(&[("row", "B")]),
        );
        let in_a = RackFacts {
            name: "rack-01",
            labels: &a,
        };
        let in_b = RackFacts {
            name: "rack-04",
            labels: &b,
        };
        let named = RackFacts {
            name: "rack-09",
            labels: &b,
        };
        assert_eq!(
            check(
                &grants,
                "OPS/alice",
                "task.submit",
                Role::Operator,
                &[in_a, named]
            ),
            Ok(vec![4, 5])
        );
        let denied = check(
            &grants,
            "OPS/alice",
            "task.submit",
            Role::Operator,
            &[in_a, in_b],
        )
        .unwrap_err();
        assert_eq!(
            denied.message,
            "OPS/alice may not task.submit on rack-04: it is outside OPS/alice's operator scope (operator on racks labelled row=A (grant 4); operator on racks rack-09 (grant 5))"
        );
        // The account's grant applies to every user of it, and only them.
        assert_eq!(
            check(&grants, "OPS/bob", "rack.get", Role::Viewer, &[in_b]),
            Ok(vec![6])
        );
        assert!(check(&grants, "DEV/bob", "rack.get", Role::Viewer, &[in_b]).is_err());
        // A role includes the ones below it; none above.
        let admin = [grant(1, "OPS/root", Role::Admin, &[], &[])];
        assert_eq!(
            check(&admin, "OPS/root", "task.submit", Role::Operator, &[in_b]),
            Ok(vec![1])
        );
        assert!(check(&grants, "OPS/alice", "rule.create", Role::Admin, &[]).is_err());
    }
}
