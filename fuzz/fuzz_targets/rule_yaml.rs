//! Any bytes as a YAML rule definition and as a YAML rule batch (the
//! `flow rule create --from-yaml` input): a value or validation errors,
//! never a panic, and whatever is accepted survives the canonical round trip.

#![no_main]

use flow_rules::{RuleBatch, RuleDefinition};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    if let Ok(definition) = RuleDefinition::from_yaml_str(text) {
        let again = RuleDefinition::from_value(&definition.to_json_value())
            .expect("the canonical form of an accepted definition parses");
        assert_eq!(
            again, definition,
            "the canonical round trip changed the definition"
        );
    }
    if let Ok(batch) = RuleBatch::from_yaml_str(text) {
        let canonical = serde_json::json!({
            "version": "v1",
            "rules": batch.rules.iter().map(|r| r.to_json_value()).collect::<Vec<_>>(),
        });
        let again = RuleBatch::from_value(&canonical)
            .expect("the canonical form of an accepted batch parses");
        assert_eq!(again, batch, "the canonical round trip changed the batch");
    }
});
