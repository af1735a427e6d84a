//! Reading rule files: the format follows the extension (`.json`, `.yaml`,
//! `.yml`), or the first character for other names.

use std::path::Path;

use flow_rules::{RuleBatch, RuleDefinition, ValidationErrors};

/// What a file held.
pub enum Document {
    /// A single rule definition.
    Definition(RuleDefinition),
    /// A YAML batch.
    Batch(RuleBatch),
}

/// Reads and validates a rule file. `Err(Err(_))` = unreadable,
/// `Err(Ok(errors))` = invalid.
pub fn load(path: &Path) -> Result<Document, Result<ValidationErrors, std::io::Error>> {
    let text = std::fs::read_to_string(path).map_err(Err)?;
    parse(path, &text).map_err(Ok)
}

fn parse(path: &Path, text: &str) -> Result<Document, ValidationErrors> {
    let ext = path.extension().and_then(|e| e.to_str()).unwrap_or("");
    let json = match ext {
        "json" => true,
        "yaml" | "yml" => false,
        _ => text.trim_start().starts_with('{'),
    };
    if json {
        return RuleDefinition::from_json_str(text).map(Document::Definition);
    }
    if looks_like_batch(text) {
        RuleBatch::from_yaml_str(text).map(Document::Batch)
    } else {
        RuleDefinition::from_yaml_str(text).map(Document::Definition)
    }
}

/// A YAML document with a top-level `rules:` key is a batch.
fn looks_like_batch(text: &str) -> bool {
    text.lines()
        .any(|l| l.starts_with("rules:") || l.starts_with("\"rules\":"))
}
