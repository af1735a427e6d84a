//! The offline `flow rule` commands, run as the real binary: output, exit
//! codes (0 valid, 1 invalid, 2 unreadable or unusable) and messages.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn flow(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_flow"))
        .args(args)
        .current_dir(root())
        .output()
        .expect("run flow")
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn temp_file(name: &str, text: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("flow-cli-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let path = dir.join(name);
    std::fs::write(&path, text).expect("write temp file");
    path
}

const SEED: [&str; 3] = [
    "shared/rules/tests/fixtures/seed-graceful-power-on.json",
    "shared/rules/tests/fixtures/seed-graceful-power-off.json",
    "shared/rules/tests/fixtures/seed-forceful-power-on.json",
];

#[test]
fn seed_examples_and_the_example_batch_validate() {
    let mut args = vec!["rule", "validate", "examples/operation-rules.yaml"];
    args.extend(SEED);
    let out = flow(&args);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let text = stdout(&out);
    assert!(
        text.starts_with("OK examples/operation-rules.yaml: 8 rules\n"),
        "{text}"
    );
    for seed in SEED {
        assert!(text.contains(&format!("OK {seed}: ")), "{text}");
    }
}

#[test]
fn validate_output_matches_the_golden_file() {
    let out = flow(&["rule", "validate", "examples/operation-rules.yaml", SEED[0]]);
    let golden = root().join("services/cli/tests/golden/validate-examples.txt");
    let actual = stdout(&out);
    if std::env::var_os("UPDATE_GOLDEN").is_some() {
        std::fs::write(&golden, &actual).expect("write golden");
    }
    let expected = std::fs::read_to_string(&golden).expect("golden file");
    assert_eq!(actual, expected);
}

#[test]
fn an_invalid_file_exits_1_with_every_error_and_its_path() {
    let path = temp_file(
        "bad.json",
        r#"{"steps": [{"component_type": "compute", "stage": 1, "timeot": "5m",
            "main_operation": {"name": "PowerControl"},
            "post_operation": [{"name": "VerifyPowerStatus", "poll_interval": "5s",
                                "parameters": {"expected_status": "on"}}]}]}"#,
    );
    let out = flow(&["rule", "validate", path.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1));
    let err = stderr(&out);
    assert!(err.contains(": 2 errors\n"), "{err}");
    assert!(
        err.contains("  steps[0]: unknown field `timeot` (did you mean `timeout`?)"),
        "{err}"
    );
    assert!(
        err.contains("  steps[0].post_operation[0] (VerifyPowerStatus): requires timeout\n"),
        "{err}"
    );
    assert!(stdout(&out).is_empty());
}

#[test]
fn an_unreadable_file_exits_2_and_the_worst_outcome_wins() {
    let bad = temp_file("bad-version.json", r#"{"version": "v2"}"#);
    let out = flow(&[
        "rule",
        "validate",
        SEED[0],
        bad.to_str().unwrap(),
        "does/not/exist.json",
    ]);
    assert_eq!(out.status.code(), Some(2));
    let err = stderr(&out);
    assert!(err.contains("UNREADABLE does/not/exist.json: "), "{err}");
    assert!(err.contains("version: unsupported version \"v2\""), "{err}");
    assert!(stdout(&out).contains(&format!("OK {}", SEED[0])));
}

#[test]
fn json_output_carries_paths_and_messages() {
    let bad = temp_file(
        "stage.json",
        r#"{"steps": [{"component_type": "cdu", "stage": 0,
        "main_operation": {"name": "PowerControl"}}]}"#,
    );
    let out = flow(&["rule", "validate", "--json", bad.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1));
    let v: serde_json::Value = serde_json::from_str(stdout(&out).trim()).expect("json");
    assert_eq!(v["valid"], false);
    assert_eq!(v["errors"][0]["path"], "steps[0].stage");
    assert_eq!(v["errors"][0]["message"], "must be >= 1, got 0");
}

#[test]
fn a_yaml_definition_and_a_zero_step_rule_are_valid_definitions() {
    let def = temp_file(
        "def.yaml",
        "version: v1\nsteps:\n  - component_type: NVLSwitch\n    stage: 1\n    main_operation: {name: PowerControl}\n",
    );
    let empty = temp_file("empty.json", r#"{"version": "v1", "steps": []}"#);
    let out = flow(&[
        "rule",
        "validate",
        def.to_str().unwrap(),
        empty.to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let text = stdout(&out);
    assert!(
        text.contains("def.yaml: 1 stage, 1 step, budget "),
        "{text}"
    );
    assert!(
        text.contains("empty.json: 0 steps: valid as a definition, but a task refuses"),
        "{text}"
    );
}

#[test]
fn batch_dry_run_lists_what_would_be_created() {
    let out = flow(&[
        "rule",
        "create",
        "--from-yaml",
        "examples/operation-rules.yaml",
        "--dry-run",
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let text = stdout(&out);
    assert!(
        text.contains("power_control:\n  • power_on: Graceful Power On - "),
        "{text}"
    );
    assert!(text.ends_with("Would create: 8 rules, each the default for its operation\n"));
}

#[test]
fn batch_dry_run_applies_the_batch_rules() {
    let path = temp_file(
        "partial.yaml",
        "rules:\n  - name: On\n    operation_type: power_control\n    operation: power_on\n    steps: []\n",
    );
    let out = flow(&[
        "rule",
        "create",
        "--from-yaml",
        path.to_str().unwrap(),
        "--dry-run",
    ]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr(&out).contains("rules: has power_control rules but none for power_off"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn single_rule_dry_run_validates_against_its_operation() {
    let out = flow(&[
        "rule",
        "create",
        "--name",
        "Mine",
        "--operation-type",
        "firmware_control",
        "--operation",
        "upgrade",
        "--rule-file",
        SEED[0],
        "--dry-run",
    ]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr(&out).contains(
            "definition.steps[0].main_operation (PowerControl): PowerControl without \
             parameters.operation runs the task's own power operation"
        ),
        "{}",
        stderr(&out)
    );
    let out = flow(&[
        "rule",
        "create",
        "--name",
        "Mine",
        "--operation-type",
        "power_control",
        "--operation",
        "power_on",
        "--rule-file",
        SEED[0],
        "--dry-run",
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(stdout(&out).starts_with("Would create: power_control/power_on \"Mine\": 3 stages"));
}

#[test]
fn single_rule_flags_and_from_yaml_are_mutually_exclusive() {
    let out = flow(&[
        "rule",
        "create",
        "--from-yaml",
        "examples/operation-rules.yaml",
        "--name",
        "x",
        "--dry-run",
    ]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr(&out).contains("cannot be used with"),
        "{}",
        stderr(&out)
    );
    let out = flow(&[
        "rule",
        "create",
        "--from-yaml",
        "examples/operation-rules.yaml",
        "--dry-run",
        "--overwrite",
    ]);
    assert_eq!(out.status.code(), Some(2));
}

#[test]
fn show_builtin_prints_a_definition_that_validates() {
    for code in [
        "power_on",
        "warm_reset",
        "cold_reset",
        "rollback",
        "decommission",
    ] {
        let out = flow(&["rule", "show-builtin", code]);
        assert_eq!(out.status.code(), Some(0), "{code}");
        assert!(stderr(&out).starts_with("Built-in "), "{}", stderr(&out));
        let path = temp_file(&format!("{code}.json"), &stdout(&out));
        let check = flow(&["rule", "validate", path.to_str().unwrap()]);
        assert_eq!(check.status.code(), Some(0), "{}", stderr(&check));
    }
    let out = flow(&["rule", "show-builtin", "reboot"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("unknown operation code \"reboot\"; allowed: power_on"));
}

#[test]
fn validate_with_an_operation_refuses_what_create_refuses() {
    // A power rule (a bare PowerControl) validates on its own, but not for
    // a firmware operation: create refuses it there, and so does validate.
    let out = flow(&["rule", "validate", SEED[0]]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let out = flow(&["rule", "validate", "--operation", "upgrade", SEED[0]]);
    assert_eq!(out.status.code(), Some(1), "{}", stdout(&out));
    assert!(
        stderr(&out).contains(
            "steps[0].main_operation (PowerControl): PowerControl without parameters.operation \
             runs the task's own power operation"
        ),
        "{}",
        stderr(&out)
    );
    let out = flow(&["rule", "validate", "--operation", "power_on", SEED[0]]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let out = flow(&["rule", "validate", "--operation", "reboot", SEED[0]]);
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("--operation: unknown operation code \"reboot\""));
}
