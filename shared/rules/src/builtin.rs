//! Built-in fallback rules, one for every operation code. They live in
//! `builtin/rules.yaml` (a batch file like any operator's) and go through the
//! same parser, so they obey every rule they impose.

use std::sync::OnceLock;

use crate::{OperationCode, RuleBatch, RuleSpec};

/// The built-in batch, as text.
pub const BUILTIN_RULES_YAML: &str = include_str!("../builtin/rules.yaml");

fn batch() -> &'static RuleBatch {
    static BATCH: OnceLock<RuleBatch> = OnceLock::new();
    BATCH.get_or_init(|| match RuleBatch::from_yaml_str(BUILTIN_RULES_YAML) {
        Ok(batch) => batch,
        // The file is compiled in and `every_code_has_a_valid_builtin_rule`
        // parses it in the test suite, so this cannot happen in a release.
        Err(errors) => panic!("builtin/rules.yaml is invalid:\n{errors}"),
    })
}

/// The built-in rule for an operation. Every code has one.
pub fn builtin_rule(code: OperationCode) -> &'static RuleSpec {
    batch()
        .rules
        .iter()
        .find(|r| r.operation == code)
        .unwrap_or_else(|| panic!("builtin/rules.yaml has no rule for {code}"))
}

/// All built-in rules.
pub fn builtin_rules() -> &'static [RuleSpec] {
    &batch().rules
}
