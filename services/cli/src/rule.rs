//! `flow rule …` commands that need no server.

use std::path::Path;

use flow_rules::{OperationCode, RuleBatch, RuleSpec, ValidationErrors, builtin_rule};
use serde_json::{Value, json};

use crate::Outcome;
use crate::args::{CreateArgs, ShowBuiltinArgs, ValidateArgs};
use crate::input::{self, Document};
use crate::summary;

/// `flow rule validate FILE…`.
pub fn validate(args: &ValidateArgs) -> Outcome {
    let mut worst = Outcome::Valid;
    for path in &args.files {
        let outcome = match input::load(path) {
            Ok(doc) => {
                report_valid(path, &doc, args.json);
                Outcome::Valid
            }
            Err(Ok(errors)) => {
                report_invalid(path, &errors, args.json);
                Outcome::Invalid
            }
            Err(Err(io)) => {
                report_unreadable(path, &io, args.json);
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
        (Document::Definition(def), false) => println!("OK {file}: {}", summary::line(def)),
        (Document::Batch(batch), false) => {
            println!("OK {file}: {} rules", batch.rules.len());
            for rule in &batch.rules {
                println!("  {}", rule_line(rule));
            }
        }
        (Document::Definition(def), true) => {
            let mut v = json!({"file": file.to_string(), "valid": true});
            v["definition"] = summary::json(def);
            println!("{v}");
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
            println!(
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
        println!(
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
        println!(
            "{}",
            json!({"file": path.display().to_string(), "valid": false,
                   "unreadable": error.to_string()})
        );
    } else {
        eprintln!("UNREADABLE {}: {error}", path.display());
    }
}

/// `flow rule create …`: validates offline (`--dry-run`).
pub fn create(args: &CreateArgs) -> Outcome {
    let outcome = match &args.from_yaml {
        Some(path) => create_batch(path),
        None => create_single(args),
    };
    if outcome == Outcome::Valid && !args.dry_run {
        eprintln!(
            "flow: this build of flow has no rule service to create rules in; the rules above \
             are valid. Re-run with --dry-run to validate only."
        );
        return Outcome::Unusable;
    }
    outcome
}

fn create_batch(path: &Path) -> Outcome {
    eprintln!("Loading rules from: {}", path.display());
    let text = match std::fs::read_to_string(path) {
        Ok(t) => t,
        Err(e) => {
            eprintln!("UNREADABLE {}: {e}", path.display());
            return Outcome::Unusable;
        }
    };
    match RuleBatch::from_yaml_str(&text) {
        Err(errors) => {
            report_invalid(path, &errors, false);
            Outcome::Invalid
        }
        Ok(batch) => {
            let mut types: Vec<_> = batch.rules.iter().map(|r| r.operation_type()).collect();
            types.dedup();
            types.sort();
            types.dedup();
            for t in types {
                println!("{t}:");
                for rule in batch.rules.iter().filter(|r| r.operation_type() == t) {
                    let description = if rule.description.is_empty() {
                        String::new()
                    } else {
                        format!(" - {}", rule.description)
                    };
                    println!(
                        "  • {}: {}{description} ({}, default)",
                        rule.operation,
                        rule.name,
                        summary::line(&rule.definition)
                    );
                }
            }
            println!(
                "Would create: {} rules, each the default for its operation",
                batch.rules.len()
            );
            Outcome::Valid
        }
    }
}

fn create_single(args: &CreateArgs) -> Outcome {
    let (Some(name), Some(operation_type), Some(operation), Some(file)) = (
        &args.name,
        &args.operation_type,
        &args.operation,
        &args.rule_file,
    ) else {
        eprintln!(
            "flow: single-rule mode needs --name, --operation-type, --operation and --rule-file"
        );
        return Outcome::Unusable;
    };
    let text = match std::fs::read_to_string(file) {
        Ok(t) => t,
        Err(e) => {
            eprintln!("UNREADABLE {}: {e}", file.display());
            return Outcome::Unusable;
        }
    };
    let definition: Value = match serde_json::from_str(&text) {
        Ok(v) => v,
        Err(e) => {
            eprintln!("INVALID {}: 1 error", file.display());
            eprintln!("  document: not valid JSON: {e}");
            return Outcome::Invalid;
        }
    };
    let description = args.description.as_deref().unwrap_or("");
    match flow_rules::spec_from_parts(name, description, operation_type, operation, &definition) {
        Err(errors) => {
            report_invalid(file, &errors, false);
            Outcome::Invalid
        }
        Ok(rule) => {
            let default = if args.is_default { ", default" } else { "" };
            println!("Would create: {}{default}", rule_line(&rule));
            Outcome::Valid
        }
    }
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
    println!("{}", rule.definition.to_canonical_json());
    Outcome::Valid
}
