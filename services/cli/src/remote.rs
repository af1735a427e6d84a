//! Commands that talk to the `flow.api` service: rules and racks.

use std::path::Path;

use comfy_table::{Table, presets::UTF8_FULL_CONDENSED};
use flow_config::Settings;
use flow_protocol::RuleId;
use flow_protocol::api::{
    ComponentStatusSet, RackByRef, RackLabel, RackList, RuleAssociate, RuleBatchCreate, RuleById,
    RuleCreate, RuleDelete, RuleDisassociate, RuleList, RuleRecord, RuleResolve, RuleUpdate,
    endpoint,
};
use flow_protocol::ids::RackRef;
use flow_protocol::labels::Labels;
use flow_protocol::readiness::{ComponentStatus, UnknownComponentStatus};
use flow_rules::{OperationCode, RuleBatch, RuleSpec};
use serde::Serialize;
use serde_json::{Value, json};
use time::format_description::well_known::Rfc3339;

use crate::Outcome;
use crate::args::{
    AssociateArgs, DeleteArgs, DisassociateArgs, IdArg, ListArgs, RackArg, RackCommand,
    ResolveArgs, SetDefaultArgs, UpdateArgs,
};
use crate::out::outln;
use crate::task::bad;
use flow_client::{Client, ClientError};

/// Output style.
#[derive(Debug, Clone, Copy)]
pub struct Output {
    /// JSON instead of tables.
    pub json: bool,
}

/// Reports a failed command on stderr; API refusals exit 1, everything
/// else (no service, bad settings) exits 2.
pub fn fail(error: ClientError) -> Outcome {
    eprintln!("flow: {error}");
    match error {
        ClientError::Api(api) => {
            for d in &api.details {
                eprintln!("  {d}");
            }
            Outcome::Invalid
        }
        _ => Outcome::Unusable,
    }
}

fn print_json<T: Serialize>(value: &T) {
    match serde_json::to_string_pretty(value) {
        Ok(text) => outln!("{text}"),
        Err(e) => eprintln!("flow: cannot print the reply: {e}"),
    }
}

fn time(t: time::OffsetDateTime) -> String {
    t.format(&Rfc3339).unwrap_or_else(|_| t.to_string())
}

/// A table with the CLI's style and `header`.
pub(crate) fn table(header: &[&str]) -> Table {
    let mut t = Table::new();
    t.load_preset(UTF8_FULL_CONDENSED)
        .set_header(header.to_vec());
    t
}

/// Who the CLI's requests name (`--actor`, `FLOW_ACTOR`, else the OS
/// user), set once by `main`.
static ACTOR: std::sync::OnceLock<String> = std::sync::OnceLock::new();

/// Sets the actor: `given` (from `--actor` or `FLOW_ACTOR`), else the OS
/// user (`USER`, `LOGNAME`, `USERNAME`).
pub fn set_actor(given: Option<String>) {
    let actor = given
        .filter(|a| !a.trim().is_empty())
        .or_else(|| {
            ["USER", "LOGNAME", "USERNAME"]
                .iter()
                .find_map(|v| std::env::var(v).ok().filter(|u| !u.trim().is_empty()))
        })
        .unwrap_or_default();
    let _ = ACTOR.set(actor);
}

/// A client of the service named in `settings`, naming the actor in
/// every request (the audit log's "who").
pub(crate) async fn connect(settings: &Settings) -> Result<Client, ClientError> {
    let client = Client::connect(settings).await?;
    Ok(match ACTOR.get() {
        Some(actor) => client.with_actor(actor.clone()),
        None => client,
    })
}

fn parse_operation(code: &str) -> Result<OperationCode, ClientError> {
    code.parse().map_err(|e: flow_rules::InvalidOperation| {
        ClientError::Api(flow_protocol::api::ApiError::new(
            flow_protocol::api::ErrorCode::BadRequest,
            format!("--operation: {e}"),
        ))
    })
}

/// A rule ID given on the command line, or an error naming the argument.
fn rule_id(arg: &str, text: &str) -> Result<RuleId, ClientError> {
    text.parse().map_err(|e: uuid::Error| {
        ClientError::Api(flow_protocol::api::ApiError::new(
            flow_protocol::api::ErrorCode::BadRequest,
            format!("{arg} {text:?}: not a rule ID (a UUID): {e}"),
        ))
    })
}

fn read_json(path: &Path) -> Result<Value, ClientError> {
    let bad = |m: String| {
        ClientError::Api(flow_protocol::api::ApiError::new(
            flow_protocol::api::ErrorCode::BadRequest,
            m,
        ))
    };
    let text = std::fs::read_to_string(path)
        .map_err(|e| bad(format!("cannot read {}: {e}", path.display())))?;
    serde_json::from_str(&text).map_err(|e| bad(format!("{}: not valid JSON: {e}", path.display())))
}

/// Creates one validated rule on the service.
pub async fn create_rule(
    settings: &Settings,
    out: Output,
    spec: &RuleSpec,
    is_default: bool,
) -> Outcome {
    let result = async {
        let client = connect(settings).await?;
        client
            .call::<endpoint::RuleCreate>(&RuleCreate {
                name: spec.name.clone(),
                description: spec.description.clone(),
                operation_type: spec.operation_type().as_str().to_owned(),
                operation: spec.operation.as_str().to_owned(),
                definition: spec.definition.to_json_value(),
                is_default,
            })
            .await
    }
    .await;
    match result {
        Ok(rule) if out.json => {
            print_json(&rule);
            Outcome::Valid
        }
        Ok(rule) => {
            outln!("Created rule {}", rule.id);
            outln!(
                "  {} {}/{}{}",
                rule.name,
                rule.operation_type,
                rule.operation,
                if rule.is_default { " (default)" } else { "" }
            );
            Outcome::Valid
        }
        Err(e) => fail(e),
    }
}

/// Creates a validated batch on the service (one transaction).
pub async fn create_batch(
    settings: &Settings,
    out: Output,
    batch: &RuleBatch,
    overwrite: bool,
) -> Outcome {
    let result = async {
        let client = connect(settings).await?;
        let doc = json!({
            "version": "v1",
            "rules": batch.rules.iter().map(RuleSpec::to_json_value).collect::<Vec<_>>(),
        });
        client
            .call::<endpoint::RuleBatchCreate>(&RuleBatchCreate {
                batch: doc,
                overwrite,
            })
            .await
    }
    .await;
    match result {
        Ok(reply) if out.json => {
            print_json(&reply);
            Outcome::Valid
        }
        Ok(reply) => {
            for item in &reply.created {
                outln!(
                    "✅ Created: {} ({}/{}) {}",
                    item.name,
                    item.operation.operation_type(),
                    item.operation,
                    item.id
                );
            }
            for item in &reply.overwritten {
                outln!(
                    "🔄 Overwritten: {} ({}/{}) {}",
                    item.name,
                    item.operation.operation_type(),
                    item.operation,
                    item.id
                );
            }
            for item in &reply.skipped {
                outln!(
                    "⏭️  Skipped: {}/{} - already has rule {} ({})",
                    item.operation.operation_type(),
                    item.operation,
                    item.id,
                    item.name
                );
            }
            outln!(
                "Created: {}, overwritten: {}, skipped: {}",
                reply.created.len(),
                reply.overwritten.len(),
                reply.skipped.len()
            );
            Outcome::Valid
        }
        Err(e) => fail(e),
    }
}

/// Runs a server command and maps its result to an exit code.
pub async fn run<F: Future<Output = Result<(), ClientError>>>(command: F) -> Outcome {
    command.await.map_or_else(fail, |()| Outcome::Valid)
}

pub async fn list(settings: &Settings, out: Output, a: &ListArgs) -> Result<(), ClientError> {
    let operation_type = match &a.operation_type {
        Some(t) => Some(t.parse().map_err(|e: flow_rules::InvalidOperation| {
            ClientError::Api(flow_protocol::api::ApiError::new(
                flow_protocol::api::ErrorCode::BadRequest,
                format!("--operation-type: {e}"),
            ))
        })?),
        None => None,
    };
    let operation = a.operation.as_deref().map(parse_operation).transpose()?;
    let reply = connect(settings)
        .await?
        .call::<endpoint::RuleList>(&RuleList {
            operation_type,
            operation,
            default_only: a.default_only,
            offset: a.offset,
            limit: Some(a.limit),
        })
        .await?;
    if out.json {
        print_json(&reply);
        return Ok(());
    }
    if reply.rules.is_empty() {
        outln!("No rules found");
        return Ok(());
    }
    let mut t = table(&[
        "ID",
        "NAME",
        "TYPE",
        "OPERATION",
        "DEFAULT",
        "REV",
        "CREATED",
    ]);
    for r in &reply.rules {
        t.add_row(vec![
            r.id.to_string(),
            r.name.clone(),
            r.operation_type.to_string(),
            r.operation.to_string(),
            if r.is_default { "yes" } else { "no" }.to_owned(),
            r.revision.to_string(),
            time(r.created_at),
        ]);
    }
    outln!("{t}");
    outln!("Total: {} rules", reply.total);
    Ok(())
}

fn print_rule(rule: &RuleRecord) {
    outln!("ID:             {}", rule.id);
    outln!("Name:           {}", rule.name);
    outln!("Description:    {}", rule.description);
    outln!("Operation:      {}/{}", rule.operation_type, rule.operation);
    outln!(
        "Default:        {}",
        if rule.is_default { "yes" } else { "no" }
    );
    outln!("Revision:       {}", rule.revision);
    outln!("Created:        {}", time(rule.created_at));
    outln!("Updated:        {}", time(rule.updated_at));
    if rule.associations.is_empty() {
        outln!("Racks:          none bound");
    } else {
        let racks: Vec<_> = rule
            .associations
            .iter()
            .map(|a| a.rack_name.as_str())
            .collect();
        outln!("Racks:          {}", racks.join(", "));
    }
    outln!("Definition:");
    outln!(
        "{}",
        serde_json::to_string_pretty(&rule.definition).unwrap_or_default()
    );
}

pub async fn get(settings: &Settings, out: Output, a: &IdArg) -> Result<(), ClientError> {
    let rule = connect(settings)
        .await?
        .call::<endpoint::RuleGet>(&RuleById {
            id: rule_id("ID", &a.id)?,
        })
        .await?;
    if out.json {
        print_json(&rule);
    } else {
        print_rule(&rule);
    }
    Ok(())
}

pub async fn update(settings: &Settings, out: Output, a: &UpdateArgs) -> Result<(), ClientError> {
    let request = RuleUpdate {
        id: rule_id("ID", &a.id)?,
        name: a.name.clone(),
        description: a.description.clone(),
        definition: a.rule_file.as_deref().map(read_json).transpose()?,
    };
    let rule = connect(settings)
        .await?
        .call::<endpoint::RuleUpdate>(&request)
        .await?;
    if out.json {
        print_json(&rule);
    } else {
        outln!("Updated rule {} (revision {})", rule.id, rule.revision);
    }
    Ok(())
}

pub async fn delete(settings: &Settings, out: Output, a: &DeleteArgs) -> Result<(), ClientError> {
    let reply = connect(settings)
        .await?
        .call::<endpoint::RuleDelete>(&RuleDelete {
            id: rule_id("ID", &a.id)?,
            force: a.force,
        })
        .await?;
    if out.json {
        print_json(&reply);
    } else if reply.deleted {
        outln!(
            "Deleted rule {} ({} rack binding(s) removed)",
            a.id,
            reply.associations_removed
        );
    } else {
        outln!("No rule {} (nothing deleted)", a.id);
    }
    Ok(())
}

pub async fn set_default(
    settings: &Settings,
    out: Output,
    a: &SetDefaultArgs,
) -> Result<(), ClientError> {
    let rule = connect(settings)
        .await?
        .call::<endpoint::RuleSetDefault>(&RuleById {
            id: rule_id("ID", &a.id)?,
        })
        .await?;
    if out.json {
        print_json(&rule);
    } else {
        outln!(
            "Rule {} is now the default for {}/{}",
            rule.id,
            rule.operation_type,
            rule.operation
        );
    }
    Ok(())
}

pub async fn associate(
    settings: &Settings,
    out: Output,
    a: &AssociateArgs,
) -> Result<(), ClientError> {
    let assoc = connect(settings)
        .await?
        .call::<endpoint::RuleAssociate>(&RuleAssociate {
            rack: RackRef(a.rack_id.clone()),
            rule_id: rule_id("--rule-id", &a.rule_id)?,
        })
        .await?;
    if out.json {
        print_json(&assoc);
    } else {
        outln!(
            "Rack {} now runs rule {} for {}",
            assoc.rack_name,
            assoc.rule_id,
            assoc.operation
        );
    }
    Ok(())
}

pub async fn disassociate(
    settings: &Settings,
    out: Output,
    a: &DisassociateArgs,
) -> Result<(), ClientError> {
    let op = parse_operation(&a.operation)?;
    if let Some(t) = &a.operation_type
        && t != op.operation_type().as_str()
    {
        return Err(ClientError::Api(flow_protocol::api::ApiError::new(
            flow_protocol::api::ErrorCode::BadRequest,
            format!(
                "--operation {op} is a {} operation, not {t}",
                op.operation_type()
            ),
        )));
    }
    let reply = connect(settings)
        .await?
        .call::<endpoint::RuleDisassociate>(&RuleDisassociate {
            rack: RackRef(a.rack_id.clone()),
            operation: op,
        })
        .await?;
    if out.json {
        print_json(&reply);
    } else if reply.removed {
        outln!("Removed the {op} binding of rack {}", a.rack_id);
    } else {
        outln!("Rack {} had no rule bound for {op}", a.rack_id);
    }
    Ok(())
}

pub async fn resolve(settings: &Settings, out: Output, a: &ResolveArgs) -> Result<(), ClientError> {
    let request = RuleResolve {
        rack: RackRef(a.rack.clone()),
        operation: parse_operation(&a.operation)?,
        rule_id: a
            .rule_id
            .as_deref()
            .map(|r| rule_id("--rule-id", r))
            .transpose()?,
    };
    let reply = connect(settings)
        .await?
        .call::<endpoint::RuleResolve>(&request)
        .await?;
    if out.json {
        print_json(&reply);
        return Ok(());
    }
    let source = serde_json::to_value(reply.source).unwrap_or_default();
    outln!("Rule:     {}", reply.name);
    match (reply.rule_id, reply.revision) {
        (Some(id), Some(rev)) => outln!("ID:       {id} (revision {rev})"),
        _ => outln!("ID:       built-in"),
    }
    outln!("Source:   {}", source.as_str().unwrap_or_default());
    outln!("Why:      {}", reply.reason);
    if let Ok(def) = flow_rules::RuleDefinition::from_value(&reply.definition) {
        outln!("Shape:    {}", crate::summary::line(&def));
    }
    Ok(())
}

pub async fn history(settings: &Settings, out: Output, a: &IdArg) -> Result<(), ClientError> {
    let reply = connect(settings)
        .await?
        .call::<endpoint::RuleHistory>(&RuleById {
            id: rule_id("ID", &a.id)?,
        })
        .await?;
    if out.json {
        print_json(&reply);
        return Ok(());
    }
    let mut t = table(&["REV", "NAME", "SAVED", "SHAPE"]);
    for r in &reply.revisions {
        let shape = flow_rules::RuleDefinition::from_value(&r.definition)
            .map(|d| crate::summary::line(&d))
            .unwrap_or_else(|e| format!("unreadable: {e}"));
        t.add_row(vec![
            r.revision.to_string(),
            r.name.clone(),
            time(r.created_at),
            shape,
        ]);
    }
    outln!("Rule {} ({})", reply.rule_id, reply.operation);
    outln!("{t}");
    Ok(())
}

/// `flow rack …`.
pub async fn rack(settings: &Settings, out: Output, command: &RackCommand) -> Outcome {
    let result = async {
        let client = connect(settings).await?;
        match command {
            RackCommand::Create(a) => {
                let doc = read_json(&a.from_json)?;
                // The service checks the document and reports every problem.
                let rack = client
                    .call_document::<endpoint::RackCreate>(&json!({"rack": doc}))
                    .await?;
                if out.json {
                    print_json(&rack);
                } else {
                    outln!(
                        "Created rack {} ({}) with {} components",
                        rack.name,
                        rack.id,
                        rack.components.len()
                    );
                }
            }
            RackCommand::List(args) => {
                let reply = client
                    .call::<endpoint::RackList>(&RackList {
                        labels: args.labels.iter().cloned().collect(),
                    })
                    .await?;
                if out.json {
                    print_json(&reply);
                } else if reply.racks.is_empty() {
                    outln!("No racks");
                } else {
                    let mut t = table(&[
                        "ID",
                        "NAME",
                        "MODEL",
                        "LOCATION",
                        "LABELS",
                        "COMPONENTS",
                        "CREATED",
                    ]);
                    for r in &reply.racks {
                        let comps: Vec<_> = r
                            .components
                            .iter()
                            .map(|(t, n)| format!("{n} {t}"))
                            .collect();
                        t.add_row(vec![
                            r.id.to_string(),
                            r.name.clone(),
                            r.model.clone(),
                            r.location.clone(),
                            labels_text(&r.labels),
                            comps.join(", "),
                            time(r.created_at),
                        ]);
                    }
                    outln!("{t}");
                }
            }
            RackCommand::Get(RackArg { rack }) => {
                let r = client
                    .call::<endpoint::RackGet>(&RackByRef {
                        rack: RackRef(rack.clone()),
                    })
                    .await?;
                if out.json {
                    print_json(&r);
                } else {
                    outln!("ID:        {}", r.id);
                    outln!("Name:      {}", r.name);
                    outln!("Model:     {} {}", r.manufacturer, r.model);
                    outln!("Serial:    {}", r.serial);
                    outln!("Location:  {}", r.location);
                    outln!("Labels:    {}", labels_text(&r.labels));
                    for a in &r.associations {
                        outln!("Rule:      {} → {}", a.operation, a.rule_id);
                    }
                    let mut t = table(&[
                        "TYPE",
                        "NAME",
                        "STATUS",
                        "SLOT",
                        "MODEL",
                        "FIRMWARE",
                        "BMC",
                        "CREDENTIAL",
                    ]);
                    for c in &r.components {
                        t.add_row(vec![
                            c.component_type.to_string(),
                            c.name.clone(),
                            c.status.to_string(),
                            c.slot.map(|s| s.to_string()).unwrap_or_default(),
                            c.model.clone(),
                            c.firmware_version.clone(),
                            c.bmc_url.clone(),
                            c.credential_ref.clone(),
                        ]);
                    }
                    outln!("{t}");
                }
            }
            RackCommand::Label(args) => {
                let mut request = RackLabel {
                    rack: RackRef(args.rack.clone()),
                    set: Labels::new(),
                    remove: Vec::new(),
                };
                for change in &args.changes {
                    if let Some(key) = change.strip_suffix('-').filter(|k| !k.contains('=')) {
                        request.remove.push(key.to_owned());
                    } else {
                        let (k, v) = flow_protocol::labels::parse_pair(change)
                            .map_err(|e| bad(format!("{e} (or key- to remove a label)")))?;
                        request.set.insert(k, v);
                    }
                }
                let r = client.call::<endpoint::RackLabel>(&request).await?;
                if out.json {
                    print_json(&r);
                } else {
                    outln!("{}: {}", r.name, labels_text(&r.labels));
                }
            }
            RackCommand::ComponentStatus(args) => {
                let status: ComponentStatus = args
                    .status
                    .parse()
                    .map_err(|e: UnknownComponentStatus| bad(e.to_string()))?;
                let reply = client
                    .call::<endpoint::ComponentStatusSet>(&ComponentStatusSet {
                        components: crate::task::in_rack(args.rack.as_ref(), &args.components),
                        status,
                    })
                    .await?;
                if out.json {
                    print_json(&reply);
                } else {
                    for c in &reply.components {
                        outln!("{}/{}: {}", c.rack, c.component, c.status);
                    }
                }
            }
            RackCommand::Power(RackArg { rack }) => {
                let reply = client
                    .call::<endpoint::RackPower>(&flow_protocol::power::RackPowerRequest {
                        rack: RackRef(rack.clone()),
                    })
                    .await?;
                if out.json {
                    print_json(&reply);
                } else {
                    print_rack_power(&reply);
                }
            }
            RackCommand::Delete(RackArg { rack }) => {
                let reply = client
                    .call::<endpoint::RackDelete>(&RackByRef {
                        rack: RackRef(rack.clone()),
                    })
                    .await?;
                if out.json {
                    print_json(&reply);
                } else if reply.deleted {
                    outln!("Deleted rack {rack}");
                } else {
                    outln!("No rack {rack} (nothing deleted)");
                }
            }
        }
        Ok::<(), ClientError>(())
    }
    .await;
    result.map_or_else(fail, |()| Outcome::Valid)
}

/// `flow rack power`: a row per component.
fn print_rack_power(reply: &flow_protocol::power::RackPowerReply) {
    use flow_protocol::power::Counted;
    let domains: Vec<&str> = reply.domains.iter().map(|d| d.as_str()).collect();
    outln!(
        "Rack:      {} (domains: {}; an observation is known for {} s)",
        reply.rack,
        if domains.is_empty() {
            "none".to_owned()
        } else {
            domains.join(", ")
        },
        reply.known_for_s
    );
    if let Some(task) = reply.task {
        outln!("Task:      {task} (the desired power below is its)");
    }
    let mut t = table(&[
        "COMPONENT",
        "POWER",
        "SEEN",
        "BY",
        "MEASURED",
        "COUNTED",
        "DESIRED",
        "HELD",
    ]);
    let mut total = 0u64;
    for c in &reply.components {
        total += u64::from(c.counted_w);
        let counted = match c.counted {
            Counted::Off => "off: 0 W".to_owned(),
            Counted::Unpowered => "unpowered: 0 W".to_owned(),
            Counted::On => format!("on: {} W", c.counted_w),
            Counted::Granted => format!(
                "granted: {} W + {} W inrush",
                c.counted_w,
                c.inrush_w.unwrap_or(0)
            ),
            Counted::Unknown => format!("unknown: {} W", c.counted_w),
        };
        t.add_row(vec![
            c.component.clone(),
            format!(
                "{}{}",
                c.power,
                if c.reachable || c.observed_at.is_none() {
                    ""
                } else {
                    " (unreachable)"
                }
            ),
            c.age_s
                .map(|a| format!("{a:.1}s ago"))
                .unwrap_or_else(|| "never".to_owned()),
            c.source.map(|s| s.to_string()).unwrap_or_default(),
            c.measured_w.map(|w| format!("{w} W")).unwrap_or_default(),
            counted,
            c.desired.map(|d| d.to_string()).unwrap_or_default(),
            c.held.clone().unwrap_or_default(),
        ]);
    }
    outln!("{t}");
    outln!(
        "Counted against its domains: {:.1} kW",
        total as f64 / 1000.0
    );
}

/// Labels as `key=value, …` (`-` when none).
fn labels_text(labels: &Labels) -> String {
    if labels.is_empty() {
        "-".to_owned()
    } else {
        labels
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect::<Vec<_>>()
            .join(", ")
    }
}
