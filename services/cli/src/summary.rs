//! One-line summaries of rules: stages, steps and the execution budget on a
//! reference NVL72 rack.

use flow_rules::RuleDefinition;
use flow_rules::budget::{ComponentCounts, rule_budget};
use flow_rules::duration::format_short;
use serde_json::{Value, json};

/// `3 stages, 3 steps, budget 1h2m on an NVL72 rack`.
pub fn line(definition: &RuleDefinition) -> String {
    if definition.steps.is_empty() {
        return "0 steps: valid as a definition, but a task refuses to run it (nothing to do)"
            .to_owned();
    }
    let stages = definition.stages().len();
    let steps = definition.steps.len();
    let budget = rule_budget(definition, &ComponentCounts::nvl72());
    format!(
        "{stages} {}, {steps} {}, budget {} on an NVL72 rack",
        plural(stages, "stage"),
        plural(steps, "step"),
        format_short(budget)
    )
}

/// The same figures for `--json`.
pub fn json(definition: &RuleDefinition) -> Value {
    let budget = rule_budget(definition, &ComponentCounts::nvl72());
    json!({
        "stages": definition.stages().len(),
        "steps": definition.steps.len(),
        "budget_nvl72": format_short(budget),
        "budget_nvl72_seconds": budget.as_secs(),
    })
}

fn plural(n: usize, word: &str) -> String {
    if n == 1 {
        word.to_owned()
    } else {
        format!("{word}s")
    }
}
