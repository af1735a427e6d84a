//! The operator's manual's `sh sim` command blocks (`docs/operating.md`; any
//! in `README.md` too), run as written: each block gets a
//! private nats-server, a fresh database, a scheduler and — when the block
//! starts `flow-rack-sim` — the simulator with the block's flags and a
//! worker for it; then every `flow` line runs as the operator would type it
//! and must end with exit 0, or the `# exit N` its comment names. The
//! service lines a block starts by hand (`flow-scheduler &`, `createdb`,
//! `export`) are what the harness provides; any other line fails the test,
//! so a block cannot drift into something this test does not run.

use std::path::{Path, PathBuf};
use std::time::Duration;

use flow_rack_sim::{InitialPower, SimConfig};
use flow_testenv::Stack;

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// One line of a block: the command and the exit status it must end with.
struct Line {
    text: String,
    command: String,
    exit: i32,
}

/// The documents whose `sh sim` blocks run: the operator's manual holds
/// them; the README may have its own.
const DOCUMENTS: &[&str] = &["README.md", "docs/operating.md"];

/// The `sh sim` blocks of the documents, line by line.
fn blocks() -> Vec<Vec<Line>> {
    let mut blocks = Vec::new();
    for document in DOCUMENTS {
        let text = std::fs::read_to_string(root().join(document)).expect(document);
        blocks.extend(blocks_of(&text));
    }
    blocks
}

/// The `sh sim` blocks of one document, line by line.
fn blocks_of(text: &str) -> Vec<Vec<Line>> {
    let mut blocks = Vec::new();
    let mut current: Option<Vec<Line>> = None;
    for raw in text.lines() {
        if let Some(block) = current.as_mut() {
            if raw.starts_with("```") {
                blocks.push(current.take().unwrap_or_default());
                continue;
            }
            let (command, comment) = match raw.find(" # ") {
                Some(i) => (raw[..i].trim(), raw[i + 3..].trim()),
                None => (raw.trim(), ""),
            };
            if command.is_empty() || command.starts_with('#') {
                continue;
            }
            let exit = comment
                .strip_prefix("exit ")
                .and_then(|r| r.split(|c: char| !c.is_ascii_digit()).next())
                .and_then(|n| n.parse().ok())
                .unwrap_or(0);
            block.push(Line {
                text: raw.to_owned(),
                command: command.trim_end_matches('&').trim().to_owned(),
                exit,
            });
        } else if raw.trim_end() == "```sh sim" {
            current = Some(Vec::new());
        }
    }
    blocks
}

/// The simulator a `flow-rack-sim` line asks for, and where it writes its
/// inventory.
fn simulator(line: &str) -> (SimConfig, Option<String>) {
    let mut config = SimConfig::default();
    let mut inventory = None;
    let mut args = line.split_whitespace().skip(1);
    while let Some(flag) = args.next() {
        let mut value = || {
            args.next()
                .unwrap_or_else(|| panic!("{flag} needs a value: {line}"))
                .to_owned()
        };
        match flag {
            "--initial-power" => {
                config.initial_power = match value().as_str() {
                    "on" => InitialPower::On,
                    "off" => InitialPower::Off,
                    other => panic!("--initial-power {other}: {line}"),
                }
            }
            "--compute" => config.compute = value().parse().expect("--compute N"),
            "--nvswitch" => config.nvswitch = value().parse().expect("--nvswitch N"),
            "--powershelf" => config.powershelf = value().parse().expect("--powershelf N"),
            "--inventory-out" => inventory = Some(value()),
            other => panic!(
                "the documentation runs flow-rack-sim with {other}, which this test does not provide: {line}"
            ),
        }
    }
    (config, inventory)
}

async fn run_block(block: &[Line]) {
    let dir = std::env::temp_dir().join(format!(
        "flow-readme-{}-{}",
        std::process::id(),
        block.as_ptr() as usize
    ));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let examples = dir.join("examples");
    if !examples.exists() {
        std::os::unix::fs::symlink(root().join("examples"), &examples).expect("examples link");
    }
    let sim = block
        .iter()
        .find(|l| l.command.starts_with("flow-rack-sim "))
        .map(|l| simulator(&l.command));
    let mut builder = Stack::builder().without_rack();
    if let Some((config, _)) = &sim {
        builder = builder.simulator(config.clone());
    }
    let stack = builder.start().await;
    if let Some((_, Some(inventory))) = &sim {
        let rack = serde_json::to_string_pretty(&stack.sim().inventory()[0]).expect("rack json");
        std::fs::write(dir.join(inventory), rack).expect("write the inventory");
    }
    for line in block {
        let word = line.command.split_whitespace().next().unwrap_or("");
        match word {
            // What the harness provides.
            "export" | "createdb" | "flow-scheduler" | "flow-rack-sim" | "flow-worker" => continue,
            "flow" => {}
            other => panic!(
                "a sh sim block runs {other:?}, which this test cannot: {}",
                line.text
            ),
        }
        assert!(
            !line.command.contains(['"', '\'', '$', '|', '>']),
            "a documented line this test runs must be plain words: {}",
            line.text
        );
        let args: Vec<&str> = line.command.split_whitespace().skip(1).collect();
        let out = tokio::time::timeout(
            Duration::from_secs(600),
            tokio::process::Command::new(env!("CARGO_BIN_EXE_flow"))
                .args(&args)
                .env("FLOW_NATS_URL", stack.nats.url())
                .env_remove("FLOW_CONFIG")
                .current_dir(&dir)
                .output(),
        )
        .await
        .unwrap_or_else(|_| panic!("still running after 10 min: {}", line.text))
        .expect("run flow");
        assert_eq!(
            out.status.code(),
            Some(line.exit),
            "{}\nstdout:\n{}\nstderr:\n{}",
            line.text,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    stack.stop().await;
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn every_sh_sim_block_of_the_readme_runs_as_written() {
    let blocks = blocks();
    assert!(blocks.len() >= 2, "the documentation has its sh sim blocks");
    for block in &blocks {
        run_block(block).await;
    }
}
