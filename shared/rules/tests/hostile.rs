//! Hostile documents the fuzz targets (`fuzz/`) also feed the parser: deep
//! nesting and an alias ("billion laughs") bomb are refused with a syntax
//! error, quickly and without a stack overflow or a panic.

use std::time::{Duration, Instant};

use flow_rules::{RuleBatch, RuleDefinition};

/// Generous for a debug build on a loaded machine; an alias bomb that
/// expanded would take hours.
const QUICK: Duration = Duration::from_secs(10);

fn laughs() -> String {
    let mut lines = vec!["a0: &a0 [x, x, x, x, x, x, x, x, x, x]".to_owned()];
    for i in 1..12 {
        let refs = vec![format!("*a{}", i - 1); 10].join(", ");
        lines.push(format!("a{i}: &a{i} [{refs}]"));
    }
    lines.push("steps: *a11".to_owned());
    lines.join("\n")
}

#[test]
fn deep_nesting_and_alias_bombs_are_refused_quickly() {
    let cases = [
        ("deep YAML sequence", "[".repeat(100_000)),
        (
            "deep YAML mapping",
            format!("{}1{}", "{a: ".repeat(50_000), "}".repeat(50_000)),
        ),
        ("alias bomb", laughs()),
    ];
    for (what, text) in &cases {
        let start = Instant::now();
        let errors = RuleDefinition::from_yaml_str(text).expect_err(what);
        assert!(!errors.is_empty(), "{what}");
        assert!(RuleBatch::from_yaml_str(text).is_err(), "{what}");
        assert!(start.elapsed() < QUICK, "{what}: {:?}", start.elapsed());
    }
    let start = Instant::now();
    let errors = RuleDefinition::from_json_str(&"[".repeat(100_000)).expect_err("deep JSON");
    assert!(
        errors.to_string().contains("recursion limit exceeded"),
        "{errors}"
    );
    assert!(start.elapsed() < QUICK);
}
