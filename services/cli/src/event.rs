//! `flow event-rule …` and `flow event …`: event rules, their bindings and
//! the hardware events through `flow.api` (`event_rule.*`, `event.*`).

use std::path::Path;

use flow_config::Settings;
use flow_protocol::api::endpoint;
use flow_protocol::event::{
    BindingList, BindingScope, EventById, EventClear, EventList, EventRecord, EventRuleBind,
    EventRuleByRef, EventRuleCreate, EventRuleEnable, EventRuleList, EventRuleRecord,
    EventRuleSpec, EventRuleUnbind, EventRuleUpdate,
};
use flow_protocol::task::timestamp;

use crate::Outcome;
use crate::args::{EventCommand, EventRuleCommand, ScopeArgs};
use crate::out::outln;
use crate::remote::{Output, fail, table};
use crate::schedule::json;
use crate::task::bad;
use flow_client::ClientError;

/// Reads a rule file (YAML, of which JSON is a part).
fn read_spec(path: &Path) -> Result<EventRuleSpec, ClientError> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| bad(format!("cannot read {}: {e}", path.display())))?;
    let value: serde_json::Value = serde_saphyr::from_str(&text)
        .map_err(|e| bad(format!("{}: not YAML or JSON: {e}", path.display())))?;
    serde_json::from_value(value).map_err(|e| bad(format!("{}: {e}", path.display())))
}

fn scope(s: &ScopeArgs) -> BindingScope {
    match &s.rack {
        Some(rack) => BindingScope::Rack(rack.clone()),
        None => BindingScope::Site,
    }
}

fn print_rule(r: &EventRuleRecord) {
    outln!("rule {}", r.spec.name);
    outln!(
        "  id:         {}",
        r.id.map_or_else(|| "(built in)".to_owned(), |id| id.to_string())
    );
    outln!("  event type: {}", r.spec.event_type);
    outln!(
        "  state:      {}{}",
        if r.enabled { "enabled" } else { "disabled" },
        if r.read_only { ", read-only" } else { "" }
    );
    outln!("  revision:   {}", r.revision);
    if !r.spec.description.is_empty() {
        outln!("  about:      {}", r.spec.description);
    }
    for a in &r.spec.actions {
        let when = [
            a.when
                .severities
                .iter()
                .map(|s| s.as_str())
                .collect::<Vec<_>>()
                .join("|"),
            a.when
                .component_types
                .iter()
                .map(|t| t.as_str())
                .collect::<Vec<_>>()
                .join("|"),
            a.when
                .min_leaking_trays
                .map(|n| format!("≥{n} leaking trays"))
                .unwrap_or_default(),
            a.when
                .max_leaking_trays
                .map(|n| format!("≤{n} leaking trays"))
                .unwrap_or_default(),
        ]
        .into_iter()
        .filter(|s| !s.is_empty())
        .collect::<Vec<_>>()
        .join(", ");
        let what = match &a.kind {
            flow_protocol::event::ActionKind::SubmitTask {
                target,
                task,
                preempt,
                lock,
            } => format!(
                "submit {} on {}{}{}{}",
                task.operation,
                serde_json::to_value(target)
                    .ok()
                    .and_then(|v| v.as_str().map(str::to_owned))
                    .unwrap_or_default(),
                if task.forced { " (forced)" } else { "" },
                if *preempt { ", preempting" } else { "" },
                if *lock { ", locking them" } else { "" }
            ),
            flow_protocol::event::ActionKind::Alert { severity, message } => {
                format!("alert {severity}: {message}")
            }
            flow_protocol::event::ActionKind::Noop => "nothing".to_owned(),
        };
        outln!(
            "  action {}: {what}{}",
            a.name,
            if when.is_empty() {
                String::new()
            } else {
                format!(" (when {when})")
            }
        );
    }
}

fn print_event(e: &EventRecord) {
    outln!("event {}", e.id);
    outln!(
        "  what:     {} ({}) on {}/{}",
        e.event.event_type,
        e.event.severity,
        e.event.rack,
        e.event.component
    );
    if !e.event.message.is_empty() {
        outln!("  message:  {}", e.event.message);
    }
    outln!(
        "  seen:     {} by {} ({})",
        timestamp::format(e.event.observed_at),
        e.event.source,
        e.event.key
    );
    outln!("  received: {}", timestamp::format(e.received_at));
    outln!(
        "  rule:     {}",
        if e.rule.is_empty() { "-" } else { &e.rule }
    );
    for l in &e.locks {
        outln!(
            "  locked:   {}/{} since {} (flow event clear {} --reason …)",
            l.rack,
            l.component,
            timestamp::format(l.since),
            e.id
        );
    }
    if let Some(at) = e.cleared_at {
        outln!(
            "  cleared:  {}{} — {}",
            timestamp::format(at),
            if e.cleared_by.is_empty() {
                String::new()
            } else {
                format!(" by {}", e.cleared_by)
            },
            e.cleared_reason
        );
    }
    for x in &e.executions {
        let mut line = format!(
            "  action {} ({}): {} after {} attempt(s)",
            x.action, x.kind, x.status, x.attempts
        );
        if let Some(next) = x.next_attempt_at {
            line.push_str(&format!(", next at {}", timestamp::format(next)));
        }
        if !x.last_error.is_empty() {
            line.push_str(&format!(" — {}", x.last_error));
        }
        outln!("{line}");
        if !x.targets.is_empty() {
            outln!("    targets: {}", x.targets.join(", "));
        }
        for t in &x.tasks {
            outln!("    task:    {t}");
        }
    }
}

/// `flow event-rule …`.
pub async fn event_rule(settings: &Settings, out: Output, command: &EventRuleCommand) -> Outcome {
    let result = async {
        // Read files first: a bad file needs no service.
        let spec = match command {
            EventRuleCommand::Create { file, .. } | EventRuleCommand::Update { file, .. } => {
                Some(read_spec(file)?)
            }
            _ => None,
        };
        let client = crate::remote::connect(settings).await?;
        let by = |r: &String| EventRuleByRef { rule: r.clone() };
        let show = |r: &EventRuleRecord| {
            if out.json {
                json(r);
            } else {
                print_rule(r);
            }
        };
        match command {
            EventRuleCommand::Create { enabled, .. } => {
                let spec = spec.ok_or_else(|| bad("no rule".to_owned()))?;
                let r = client
                    .call::<endpoint::EventRuleCreate>(&EventRuleCreate {
                        spec,
                        enabled: *enabled,
                    })
                    .await?;
                show(&r);
            }
            EventRuleCommand::Update { rule, revision, .. } => {
                let spec = spec.ok_or_else(|| bad("no rule".to_owned()))?;
                let r = client
                    .call::<endpoint::EventRuleUpdate>(&EventRuleUpdate {
                        rule: rule.clone(),
                        revision: *revision,
                        spec,
                    })
                    .await?;
                show(&r);
            }
            EventRuleCommand::List => {
                let list = client
                    .call::<endpoint::EventRuleList>(&EventRuleList {})
                    .await?;
                if out.json {
                    json(&list);
                } else {
                    let mut t = table(&["NAME", "EVENT TYPE", "STATE", "ACTIONS", "REV"]);
                    for r in &list.rules {
                        t.add_row(vec![
                            r.spec.name.clone(),
                            r.spec.event_type.to_string(),
                            match (r.read_only, r.enabled) {
                                (true, _) => "built in".to_owned(),
                                (false, true) => "enabled".to_owned(),
                                (false, false) => "disabled".to_owned(),
                            },
                            r.spec
                                .actions
                                .iter()
                                .map(|a| a.name.as_str())
                                .collect::<Vec<_>>()
                                .join(", "),
                            r.revision.to_string(),
                        ]);
                    }
                    outln!("{t}");
                }
            }
            EventRuleCommand::Show { rule } => {
                show(&client.call::<endpoint::EventRuleGet>(&by(rule)).await?);
            }
            EventRuleCommand::Enable { rule } | EventRuleCommand::Disable { rule } => {
                let r = client
                    .call::<endpoint::EventRuleEnable>(&EventRuleEnable {
                        rule: rule.clone(),
                        enabled: matches!(command, EventRuleCommand::Enable { .. }),
                    })
                    .await?;
                show(&r);
            }
            EventRuleCommand::Delete { rule } => {
                let d = client.call::<endpoint::EventRuleDelete>(&by(rule)).await?;
                if out.json {
                    json(&d);
                } else {
                    outln!(
                        "event rule {} deleted with {} binding(s)",
                        d.id,
                        d.bindings_removed
                    );
                }
            }
            EventRuleCommand::Bind { rule, scope: s } => {
                let b = client
                    .call::<endpoint::EventRuleBind>(&EventRuleBind {
                        rule: rule.clone(),
                        scope: scope(s),
                    })
                    .await?;
                if out.json {
                    json(&b);
                } else {
                    outln!(
                        "{} bound for {} at {}{}",
                        b.rule_name,
                        b.event_type,
                        b.scope,
                        if b.enabled {
                            ""
                        } else {
                            " (disabled: passed over until enabled)"
                        }
                    );
                }
            }
            EventRuleCommand::Unbind {
                event_type,
                scope: s,
            } => {
                let event_type =
                    event_type
                        .parse()
                        .map_err(|e: flow_protocol::status::UnknownStatus| {
                            bad(format!("--event-type: {e}"))
                        })?;
                let u = client
                    .call::<endpoint::EventRuleUnbind>(&EventRuleUnbind {
                        event_type,
                        scope: scope(s),
                    })
                    .await?;
                if out.json {
                    json(&u);
                } else if u.removed {
                    outln!("binding removed");
                } else {
                    outln!("no binding there");
                }
            }
            EventRuleCommand::Bindings => {
                let list = client
                    .call::<endpoint::EventRuleBindings>(&BindingList {})
                    .await?;
                if out.json {
                    json(&list);
                } else {
                    let mut t = table(&["EVENT TYPE", "SCOPE", "RULE", "STATE"]);
                    for b in &list.bindings {
                        t.add_row(vec![
                            b.event_type.to_string(),
                            b.scope.to_string(),
                            b.rule_name.clone(),
                            if b.enabled { "enabled" } else { "disabled" }.to_owned(),
                        ]);
                    }
                    outln!("{t}");
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

/// `flow event …`.
pub async fn event(settings: &Settings, out: Output, command: &EventCommand) -> Outcome {
    let result = async {
        let client = crate::remote::connect(settings).await?;
        match command {
            EventCommand::List { rack, limit } => {
                let list = client
                    .call::<endpoint::EventList>(&EventList {
                        rack: rack.clone(),
                        limit: Some(*limit),
                    })
                    .await?;
                if out.json {
                    json(&list);
                } else {
                    let mut t = table(&[
                        "ID",
                        "RECEIVED",
                        "TYPE",
                        "COMPONENT",
                        "RULE",
                        "ACTIONS",
                        "LOCKS",
                    ]);
                    for e in &list.events {
                        t.add_row(vec![
                            e.id.to_string(),
                            timestamp::format(e.received_at),
                            e.event.event_type.to_string(),
                            format!("{}/{}", e.event.rack, e.event.component),
                            e.rule.clone(),
                            e.executions
                                .iter()
                                .map(|x| format!("{} {}", x.action, x.status))
                                .collect::<Vec<_>>()
                                .join(", "),
                            match (e.locks.len(), e.cleared_at) {
                                (_, Some(_)) => "cleared".to_owned(),
                                (0, None) => "-".to_owned(),
                                (n, None) => format!("{n} locked"),
                            },
                        ]);
                    }
                    outln!("{t}");
                }
            }
            EventCommand::Clear { id, reason } => {
                let id = id
                    .parse()
                    .map_err(|e| bad(format!("event ID {id:?}: {e}")))?;
                let by = std::env::var("USER")
                    .or_else(|_| std::env::var("LOGNAME"))
                    .unwrap_or_default();
                let e = client
                    .call::<endpoint::EventClear>(&EventClear {
                        id,
                        reason: reason.clone(),
                        by,
                    })
                    .await?;
                if out.json {
                    json(&e);
                } else {
                    print_event(&e);
                }
            }
            EventCommand::Show { id } => {
                let id = id
                    .parse()
                    .map_err(|e| bad(format!("event ID {id:?}: {e}")))?;
                let e = client.call::<endpoint::EventGet>(&EventById { id }).await?;
                if out.json {
                    json(&e);
                } else {
                    print_event(&e);
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
