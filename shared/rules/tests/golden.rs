//! Golden tests of validation messages: each document in `tests/golden/` is
//! refused with exactly the text of its `.errors` file. Run with
//! `UPDATE_GOLDEN=1` to rewrite the files after an intended change, and
//! review the diff.

use std::path::Path;

use flow_rules::{RuleBatch, RuleDefinition};

fn render(path: &Path) -> String {
    let text = std::fs::read_to_string(path).expect("read golden input");
    let result = match path.extension().and_then(|e| e.to_str()) {
        Some("json") => RuleDefinition::from_json_str(&text).map(|_| ()),
        Some("yaml") => RuleBatch::from_yaml_str(&text).map(|_| ()),
        other => panic!("unexpected golden input {other:?}"),
    };
    match result {
        Ok(()) => panic!("{} was accepted", path.display()),
        Err(errors) => format!("{errors}\n"),
    }
}

#[test]
fn validation_messages_match_the_golden_files() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/golden");
    let update = std::env::var_os("UPDATE_GOLDEN").is_some();
    let mut inputs: Vec<_> = std::fs::read_dir(&dir)
        .expect("golden dir")
        .map(|e| e.expect("dir entry").path())
        .filter(|p| p.extension().is_some_and(|e| e != "errors"))
        .collect();
    inputs.sort();
    assert!(inputs.len() >= 4, "golden inputs missing: {inputs:?}");
    let mut mismatches = Vec::new();
    for input in inputs {
        let actual = render(&input);
        let golden = input.with_extension(format!(
            "{}.errors",
            input.extension().unwrap().to_str().unwrap()
        ));
        if update {
            std::fs::write(&golden, &actual).expect("write golden");
            continue;
        }
        let expected = std::fs::read_to_string(&golden).unwrap_or_default();
        if expected != actual {
            mismatches.push(format!(
                "{}:\n--- expected\n{expected}--- actual\n{actual}",
                input.display()
            ));
        }
    }
    assert!(mismatches.is_empty(), "{}", mismatches.join("\n"));
}
