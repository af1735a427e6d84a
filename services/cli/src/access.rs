//! `flow access …`: the policy of who may do what to which racks, through
//! `flow.api` (`access.*`; docs/audit.md, "Who may").

use flow_client::ClientError;
use flow_config::Settings;
use flow_protocol::access::{
    AccessCheck, AccessGrant, AccessGrantRecord, AccessList, AccessRevoke,
};
use flow_protocol::api::endpoint;

use crate::Outcome;
use crate::args::AccessCommand;
use crate::out::outln;
use crate::remote::{Output, fail, table};
use crate::schedule::json;
use crate::task::bad;

/// `flow access …`.
pub async fn access(settings: &Settings, out: Output, command: &AccessCommand) -> Outcome {
    let result = async {
        let client = crate::remote::connect(settings).await?;
        match command {
            AccessCommand::Grant {
                subject,
                role,
                racks,
                labels,
            } => {
                let g = client
                    .call::<endpoint::AccessGrant>(&AccessGrant {
                        subject: subject.clone(),
                        role: role.parse().map_err(bad)?,
                        racks: racks.clone(),
                        labels: labels.iter().cloned().collect(),
                    })
                    .await?;
                if out.json {
                    json(&g);
                } else {
                    outln!("grant {}: {}", g.id, describe(&g));
                }
            }
            AccessCommand::Revoke { id } => {
                let r = client
                    .call::<endpoint::AccessRevoke>(&AccessRevoke { id: *id })
                    .await?;
                if out.json {
                    json(&r);
                } else {
                    outln!("revoked grant {}: {}", r.revoked.id, describe(&r.revoked));
                }
            }
            AccessCommand::List { subject } => {
                let list = client
                    .call::<endpoint::AccessList>(&AccessList {
                        subject: subject.clone(),
                    })
                    .await?;
                if out.json {
                    json(&list);
                } else if list.grants.is_empty() {
                    outln!("no grants");
                } else {
                    let mut t = table(&["ID", "SUBJECT", "ROLE", "RACKS", "GRANTED BY", "AT"]);
                    for g in &list.grants {
                        t.add_row(vec![
                            g.id.to_string(),
                            g.subject.clone(),
                            g.role.to_string(),
                            g.scope_text(),
                            g.granted_by.clone(),
                            flow_protocol::task::timestamp::format(g.granted_at),
                        ]);
                    }
                    outln!("{t}");
                }
            }
            AccessCommand::Check {
                subject,
                endpoint: name,
                racks,
            } => {
                let c = client
                    .call::<endpoint::AccessCheck>(&AccessCheck {
                        subject: subject.clone(),
                        endpoint: name.clone(),
                        racks: racks.clone(),
                    })
                    .await?;
                if out.json {
                    json(&c);
                } else {
                    outln!(
                        "{}: {}{}",
                        if c.allowed { "allowed" } else { "refused" },
                        c.reason,
                        c.needs.map(|r| format!(" (needs {r})")).unwrap_or_default()
                    );
                }
                if !c.allowed {
                    return Err(bad(format!("{subject} may not {name}")));
                }
            }
        }
        Ok::<_, ClientError>(())
    }
    .await;
    match result {
        Ok(()) => Outcome::Valid,
        Err(e) => fail(e),
    }
}

/// `OPS/alice: operator on racks labelled row=A (by OPS/root)`.
fn describe(g: &AccessGrantRecord) -> String {
    format!(
        "{}: {} on {} (by {})",
        g.subject,
        g.role,
        g.scope_text(),
        g.granted_by
    )
}
