//! `flow rule …` commands that need no server.

use std::path::Path;

use flow_rules::{OperationCode, RuleBatch, RuleSpec, ValidationErrors, builtin_rule};
use serde_json::{Value, json};

use flow_config::Settings;

use crate::Outcome;
use crate::args::{CreateArgs, ShowBuiltinArgs, ValidateArgs};
use crate::input::{self, Document};
use crate::out::outln;
use crate::remote::{self, Output};
use crate::summary;

/// `flow rule validate FILE…`.
pub fn validate(args: &ValidateArgs, out: Output) -> Outcome {
    let operation = match args.operation.as_deref().map(str::parse::<OperationCode>) {
        None => None,
        Some(Ok(op)) => Some(op),
        Some(Err(e)) => {
            eprintln!("flow: --operation: {e}");
            return Outcome::Unusable;
        }
    };
    let mut worst = Outcome::Valid;
    for path in &args.files {
        let loaded = input::load(path).and_then(|doc| match (&doc, operation) {
            (Document::Definition(def), Some(op)) => flow_rules::check_for_operation(def, op)
                .map(|()| doc)
                .map_err(Ok),
            _ => Ok(doc),
        });
        let outcome = match loaded {
            Ok(doc) => {
                report_valid(path, &doc, out.json);
                Outcome::Valid
            }
            Err(Ok(errors)) => {
                report_invalid(path, &errors, out.json);
                Outcome::Invalid
            }
            Err(Err(io)) => {
                report_unreadable(path, &io, out.json);
                Outcome::Unusable
            }
        };
        worst = worst.max(outcome);
    }
    worst
}

fn rule_line(rule: &RuleSpec) -> String {
    format!(
        "{}/{} {:?}: {}",
        rule.operation_type(),
        rule.operation,
        rule.name,
        summary::line(&rule.definition)
    )
}

fn report_valid(path: &Path, doc: &Document, as_json: bool) {
    let file = path.display();
    match (doc, as_json) {
        (Document::Definition(def), false) => outln!("OK {file}: {}", summary::line(def)),
        (Document::Batch(batch), false) => {
            outln!("OK {file}: {} rules", batch.rules.len());
            for rule in &batch.rules {
                outln!("  {}", rule_line(rule));
            }
        }
        (Document::Definition(def), true) => {
            let mut v = json!({"file": file.to_string(), "valid": true});
            v["definition"] = summary::json(def);
            outln!("{v}");
        }
        (Document::Batch(batch), true) => {
            let rules: Vec<Value> = batch
                .rules
                .iter()
                .map(|r| {
                    let mut s = summary::json(&r.definition);
                    s["name"] = r.name.clone().into();
                    s["operation_type"] = r.operation_type().as_str().into();
                    s["operation"] = r.operation.as_str().into();
                    s
                })
                .collect();
            outln!(
                "{}",
                json!({"file": file.to_string(), "valid": true, "rules": rules})
            );
        }
    }
}

fn report_invalid(path: &Path, errors: &ValidationErrors, as_json: bool) {
    if as_json {
        let list: Vec<Value> = errors
            .iter()
            .map(|e| json!({"path": e.path.as_str(), "message": e.problem.to_string()}))
            .collect();
        outln!(
            "{}",
            json!({"file": path.display().to_string(), "valid": false, "errors": list})
        );
        return;
    }
    let n = errors.len();
    eprintln!(
        "INVALID {}: {n} {}",
        path.display(),
        if n == 1 { "error" } else { "errors" }
    );
    for e in errors.iter() {
        eprintln!("  {e}");
    }
}

fn report_unreadable(path: &Path, error: &std::io::Error, as_json: bool) {
    if as_json {
        outln!(
            "{}",
            json!({"file": path.display().to_string(), "valid": false,
                   "unreadable": error.to_string()})
        );
    } else {
        eprintln!("UNREADABLE {}: {error}", path.display());
    }
}

/// `flow rule create …`: validates locally, then (without `--dry-run`)
/// creates on the service.
pub async fn create(settings: &Settings, out: Output, args: &CreateArgs) -> Outcome {
    match &args.from_yaml {
        Some(path) => {
            let batch = match load_batch(path) {
                Ok(b) => b,
                Err(outcome) => return outcome,
            };
            if args.dry_run {
                print_dry_run(&batch);
                return Outcome::Valid;
            }
            remote::create_batch(settings, out, &batch, args.overwrite).await
        }
        None => {
            let rule = match load_single(args) {
                Ok(r) => r,
                Err(outcome) => return outcome,
            };
            if args.dry_run {
                let default = if args.is_default { ", default" } else { "" };
                outln!("Would create: {}{default}", rule_line(&rule));
                return Outcome::Valid;
            }
            remote::create_rule(settings, out, &rule, args.is_default).await
        }
    }
}

fn load_batch(path: &Path) -> Result<RuleBatch, Outcome> {
    eprintln!("Loading rules from: {}", path.display());
    let text = std::fs::read_to_string(path).map_err(|e| {
        eprintln!("UNREADABLE {}: {e}", path.display());
        Outcome::Unusable
    })?;
    RuleBatch::from_yaml_str(&text).map_err(|errors| {
        report_invalid(path, &errors, false);
        Outcome::Invalid
    })
}

fn print_dry_run(batch: &RuleBatch) {
    let mut types: Vec<_> = batch.rules.iter().map(|r| r.operation_type()).collect();
    types.sort();
    types.dedup();
    for t in types {
        outln!("{t}:");
        for rule in batch.rules.iter().filter(|r| r.operation_type() == t) {
            let description = if rule.description.is_empty() {
                String::new()
            } else {
                format!(" - {}", rule.description)
            };
            outln!(
                "  • {}: {}{description} ({}, default)",
                rule.operation,
                rule.name,
                summary::line(&rule.definition)
            );
        }
    }
    outln!(
        "Would create: {} rules, each the default for its operation",
        batch.rules.len()
    );
}

fn load_single(args: &CreateArgs) -> Result<RuleSpec, Outcome> {
    let (Some(name), Some(operation_type), Some(operation), Some(file)) = (
        &args.name,
        &args.operation_type,
        &args.operation,
        &args.rule_file,
    ) else {
        eprintln!(
            "flow: single-rule mode needs --name, --operation-type, --operation and --rule-file"
        );
        return Err(Outcome::Unusable);
    };
    let text = std::fs::read_to_string(file).map_err(|e| {
        eprintln!("UNREADABLE {}: {e}", file.display());
        Outcome::Unusable
    })?;
    let definition: Value = serde_json::from_str(&text).map_err(|e| {
        eprintln!("INVALID {}: 1 error", file.display());
        eprintln!("  document: not valid JSON: {e}");
        Outcome::Invalid
    })?;
    let description = args.description.as_deref().unwrap_or("");
    flow_rules::spec_from_parts(name, description, operation_type, operation, &definition).map_err(
        |errors| {
            report_invalid(file, &errors, false);
            Outcome::Invalid
        },
    )
}

/// `flow rule show-builtin CODE`: the definition on stdout, its name on
/// stderr.
pub fn show_builtin(args: &ShowBuiltinArgs) -> Outcome {
    let code: OperationCode = match args.operation.parse() {
        Ok(c) => c,
        Err(e) => {
            eprintln!("flow: {e}");
            return Outcome::Unusable;
        }
    };
    let rule = builtin_rule(code);
    eprintln!("{}: {}", rule.name, rule.description);
    outln!("{}", rule.definition.to_canonical_json());
    Outcome::Valid
}
