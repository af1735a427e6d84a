//! Any bytes as a JSON rule definition and as a JSON rule batch: the parser
//! answers with a value or validation errors, never a panic, and whatever it
//! accepts survives the canonical round trip unchanged.

#![no_main]

use flow_rules::{RuleBatch, RuleDefinition};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    if let Ok(definition) = RuleDefinition::from_json_str(text) {
        let again = RuleDefinition::from_value(&definition.to_json_value())
            .expect("the canonical form of an accepted definition parses");
        assert_eq!(
            again, definition,
            "the canonical round trip changed the definition"
        );
    }
    // The API takes batches as JSON values (`rule.batch_create`) and single
    // rules as parts (`rule.create`).
    if let Ok(value) = serde_json::from_str::<serde_json::Value>(text) {
        if let Ok(batch) = RuleBatch::from_value(&value) {
            let canonical = serde_json::json!({
                "version": "v1",
                "rules": batch.rules.iter().map(|r| r.to_json_value()).collect::<Vec<_>>(),
            });
            let again = RuleBatch::from_value(&canonical)
                .expect("the canonical form of an accepted batch parses");
            assert_eq!(again, batch, "the canonical round trip changed the batch");
        }
        let _ = flow_rules::spec_from_parts("fuzz", "", "power_control", "power_on", &value);
    }
});
