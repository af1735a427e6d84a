//! Commands that talk to the `flow.api` service: rules and racks.

use std::path::Path;

use comfy_table::{Table, presets::UTF8_FULL_CONDENSED};
use flow_config::Settings;
use flow_protocol::api::{
    Association, BatchCreateReply, DisassociateReply, HistoryReply, RackDeleteReply, RackListReply,
    RackRecord, ResolveReply, RuleDeleteReply, RuleListReply, RuleRecord, endpoint,
};
use flow_rules::{OperationCode, RuleBatch, RuleSpec};
use serde::Serialize;
use serde_json::{Value, json};
use time::format_description::well_known::Rfc3339;

use crate::Outcome;
use crate::args::{
    AssociateArgs, DeleteArgs, DisassociateArgs, IdArg, ListArgs, RackArg, RackCommand,
    ResolveArgs, SetDefaultArgs, UpdateArgs,
};
use crate::client::{Client, ClientError};

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
        Ok(text) => println!("{text}"),
        Err(e) => eprintln!("flow: cannot print the reply: {e}"),
    }
}

fn time(t: time::OffsetDateTime) -> String {
    t.format(&Rfc3339).unwrap_or_else(|_| t.to_string())
}

fn table(header: &[&str]) -> Table {
    let mut t = Table::new();
    t.load_preset(UTF8_FULL_CONDENSED)
        .set_header(header.to_vec());
    t
}

async fn connect(settings: &Settings) -> Result<Client, ClientError> {
    Client::connect(settings).await
}

fn parse_operation(code: &str) -> Result<OperationCode, ClientError> {
    code.parse().map_err(|e: flow_rules::InvalidOperation| {
        ClientError::Api(flow_protocol::api::ApiError::new(
            flow_protocol::api::ErrorCode::BadRequest,
            format!("--operation: {e}"),
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
        let body = json!({
            "name": spec.name, "description": spec.description,
            "operation_type": spec.operation_type(), "operation": spec.operation,
            "definition": spec.definition.to_json_value(), "is_default": is_default,
        });
        client
            .call::<_, RuleRecord>(endpoint::RULE_CREATE, &body)
            .await
    }
    .await;
    match result {
        Ok(rule) if out.json => {
            print_json(&rule);
            Outcome::Valid
        }
        Ok(rule) => {
            println!("Created rule {}", rule.id);
            println!(
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
            .call::<_, BatchCreateReply>(
                endpoint::RULE_BATCH_CREATE,
                &json!({"batch": doc, "overwrite": overwrite}),
            )
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
                println!(
                    "✅ Created: {} ({}/{}) {}",
                    item.name,
                    item.operation.operation_type(),
                    item.operation,
                    item.id
                );
            }
            for item in &reply.overwritten {
                println!(
                    "🔄 Overwritten: {} ({}/{}) {}",
                    item.name,
                    item.operation.operation_type(),
                    item.operation,
                    item.id
                );
            }
            for item in &reply.skipped {
                println!(
                    "⏭️  Skipped: {}/{} - already has rule {} ({})",
                    item.operation.operation_type(),
                    item.operation,
                    item.id,
                    item.name
                );
            }
            println!(
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
    let mut body = json!({"default_only": a.default_only, "offset": a.offset, "limit": a.limit});
    if let Some(t) = &a.operation_type {
        body["operation_type"] = json!(t);
    }
    if let Some(c) = &a.operation {
        body["operation"] = json!(c);
    }
    let reply: RuleListReply = connect(settings)
        .await?
        .call(endpoint::RULE_LIST, &body)
        .await?;
    if out.json {
        print_json(&reply);
        return Ok(());
    }
    if reply.rules.is_empty() {
        println!("No rules found");
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
    println!("{t}");
    println!("Total: {} rules", reply.total);
    Ok(())
}

fn print_rule(rule: &RuleRecord) {
    println!("ID:             {}", rule.id);
    println!("Name:           {}", rule.name);
    println!("Description:    {}", rule.description);
    println!("Operation:      {}/{}", rule.operation_type, rule.operation);
    println!(
        "Default:        {}",
        if rule.is_default { "yes" } else { "no" }
    );
    println!("Revision:       {}", rule.revision);
    println!("Created:        {}", time(rule.created_at));
    println!("Updated:        {}", time(rule.updated_at));
    if rule.associations.is_empty() {
        println!("Racks:          none bound");
    } else {
        let racks: Vec<_> = rule
            .associations
            .iter()
            .map(|a| a.rack_name.as_str())
            .collect();
        println!("Racks:          {}", racks.join(", "));
    }
    println!("Definition:");
    println!(
        "{}",
        serde_json::to_string_pretty(&rule.definition).unwrap_or_default()
    );
}

pub async fn get(settings: &Settings, out: Output, a: &IdArg) -> Result<(), ClientError> {
    let rule: RuleRecord = connect(settings)
        .await?
        .call(endpoint::RULE_GET, &json!({"id": a.id}))
        .await?;
    if out.json {
        print_json(&rule);
    } else {
        print_rule(&rule);
    }
    Ok(())
}

pub async fn update(settings: &Settings, out: Output, a: &UpdateArgs) -> Result<(), ClientError> {
    let mut body = json!({"id": a.id});
    if let Some(n) = &a.name {
        body["name"] = json!(n);
    }
    if let Some(d) = &a.description {
        body["description"] = json!(d);
    }
    if let Some(f) = &a.rule_file {
        body["definition"] = read_json(f)?;
    }
    let rule: RuleRecord = connect(settings)
        .await?
        .call(endpoint::RULE_UPDATE, &body)
        .await?;
    if out.json {
        print_json(&rule);
    } else {
        println!("Updated rule {} (revision {})", rule.id, rule.revision);
    }
    Ok(())
}

pub async fn delete(settings: &Settings, out: Output, a: &DeleteArgs) -> Result<(), ClientError> {
    let reply: RuleDeleteReply = connect(settings)
        .await?
        .call(
            endpoint::RULE_DELETE,
            &json!({"id": a.id, "force": a.force}),
        )
        .await?;
    if out.json {
        print_json(&reply);
    } else if reply.deleted {
        println!(
            "Deleted rule {} ({} rack binding(s) removed)",
            a.id, reply.associations_removed
        );
    } else {
        println!("No rule {} (nothing deleted)", a.id);
    }
    Ok(())
}

pub async fn set_default(
    settings: &Settings,
    out: Output,
    a: &SetDefaultArgs,
) -> Result<(), ClientError> {
    let rule: RuleRecord = connect(settings)
        .await?
        .call(endpoint::RULE_SET_DEFAULT, &json!({"id": a.id}))
        .await?;
    if out.json {
        print_json(&rule);
    } else {
        println!(
            "Rule {} is now the default for {}/{}",
            rule.id, rule.operation_type, rule.operation
        );
    }
    Ok(())
}

pub async fn associate(
    settings: &Settings,
    out: Output,
    a: &AssociateArgs,
) -> Result<(), ClientError> {
    let assoc: Association = connect(settings)
        .await?
        .call(
            endpoint::RULE_ASSOCIATE,
            &json!({"rack": a.rack_id, "rule_id": a.rule_id}),
        )
        .await?;
    if out.json {
        print_json(&assoc);
    } else {
        println!(
            "Rack {} now runs rule {} for {}",
            assoc.rack_name, assoc.rule_id, assoc.operation
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
    let reply: DisassociateReply = connect(settings)
        .await?
        .call(
            endpoint::RULE_DISASSOCIATE,
            &json!({"rack": a.rack_id, "operation": op}),
        )
        .await?;
    if out.json {
        print_json(&reply);
    } else if reply.removed {
        println!("Removed the {op} binding of rack {}", a.rack_id);
    } else {
        println!("Rack {} had no rule bound for {op}", a.rack_id);
    }
    Ok(())
}

pub async fn resolve(settings: &Settings, out: Output, a: &ResolveArgs) -> Result<(), ClientError> {
    let mut body = json!({"rack": a.rack, "operation": parse_operation(&a.operation)?});
    if let Some(r) = &a.rule_id {
        body["rule_id"] = json!(r);
    }
    let reply: ResolveReply = connect(settings)
        .await?
        .call(endpoint::RULE_RESOLVE, &body)
        .await?;
    if out.json {
        print_json(&reply);
        return Ok(());
    }
    let source = serde_json::to_value(reply.source).unwrap_or_default();
    println!("Rule:     {}", reply.name);
    match (reply.rule_id, reply.revision) {
        (Some(id), Some(rev)) => println!("ID:       {id} (revision {rev})"),
        _ => println!("ID:       built-in"),
    }
    println!("Source:   {}", source.as_str().unwrap_or_default());
    println!("Why:      {}", reply.reason);
    if let Ok(def) = flow_rules::RuleDefinition::from_value(&reply.definition) {
        println!("Shape:    {}", crate::summary::line(&def));
    }
    Ok(())
}

pub async fn history(settings: &Settings, out: Output, a: &IdArg) -> Result<(), ClientError> {
    let reply: HistoryReply = connect(settings)
        .await?
        .call(endpoint::RULE_HISTORY, &json!({"id": a.id}))
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
    println!("Rule {} ({})", reply.rule_id, reply.operation);
    println!("{t}");
    Ok(())
}

/// `flow rack …`.
pub async fn rack(settings: &Settings, out: Output, command: &RackCommand) -> Outcome {
    let result = async {
        let client = connect(settings).await?;
        match command {
            RackCommand::Create(a) => {
                let doc = read_json(&a.from_json)?;
                let rack: RackRecord = client
                    .call(endpoint::RACK_CREATE, &json!({"rack": doc}))
                    .await?;
                if out.json {
                    print_json(&rack);
                } else {
                    println!(
                        "Created rack {} ({}) with {} components",
                        rack.name,
                        rack.id,
                        rack.components.len()
                    );
                }
            }
            RackCommand::List => {
                let reply: RackListReply = client.call(endpoint::RACK_LIST, &json!({})).await?;
                if out.json {
                    print_json(&reply);
                } else if reply.racks.is_empty() {
                    println!("No racks");
                } else {
                    let mut t =
                        table(&["ID", "NAME", "MODEL", "LOCATION", "COMPONENTS", "CREATED"]);
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
                            comps.join(", "),
                            time(r.created_at),
                        ]);
                    }
                    println!("{t}");
                }
            }
            RackCommand::Get(RackArg { rack }) => {
                let r: RackRecord = client
                    .call(endpoint::RACK_GET, &json!({"rack": rack}))
                    .await?;
                if out.json {
                    print_json(&r);
                } else {
                    println!("ID:        {}", r.id);
                    println!("Name:      {}", r.name);
                    println!("Model:     {} {}", r.manufacturer, r.model);
                    println!("Serial:    {}", r.serial);
                    println!("Location:  {}", r.location);
                    for a in &r.associations {
                        println!("Rule:      {} → {}", a.operation, a.rule_id);
                    }
                    let mut t = table(&[
                        "TYPE",
                        "NAME",
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
                            c.slot.map(|s| s.to_string()).unwrap_or_default(),
                            c.model.clone(),
                            c.firmware_version.clone(),
                            c.bmc_url.clone(),
                            c.credential_ref.clone(),
                        ]);
                    }
                    println!("{t}");
                }
            }
            RackCommand::Delete(RackArg { rack }) => {
                let reply: RackDeleteReply = client
                    .call(endpoint::RACK_DELETE, &json!({"rack": rack}))
                    .await?;
                if out.json {
                    print_json(&reply);
                } else if reply.deleted {
                    println!("Deleted rack {rack}");
                } else {
                    println!("No rack {rack} (nothing deleted)");
                }
            }
        }
        Ok::<(), ClientError>(())
    }
    .await;
    result.map_or_else(fail, |()| Outcome::Valid)
}
