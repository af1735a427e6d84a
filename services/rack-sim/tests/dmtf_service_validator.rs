//! DMTF's Redfish Service Validator (installed by `scripts/lib/python.sh`
//! `ensure_python_validators`) walks a compute tray, a switch tray and a
//! power shelf of each vendor profile and finds nothing wrong, except the
//! `no-links` profile's intended deviation: a service root without `Links`.
//!
//! The validator runs offline: `--skipschema` and the DMTF CSDL shipped by
//! the `nv-redfish-schema` crate (its version read from the workspace's
//! `Cargo.lock`), and every proxy variable points at a closed loopback port,
//! so nothing but the simulator on 127.0.0.1 can be reached. A compute
//! tray's event stream is held open meanwhile, so its EventDestination is
//! validated too.

mod common;

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use common::*;
use flow_rack_sim::{InitialPower, ProfileChoice, ProfileScope, Simulator, VendorProfile};
use reqwest::{Client, StatusCode};
use serde_json::json;

/// Where `ensure_python_validators` puts the validators.
const VALIDATORS_PATH_ENV: &str = "FLOW_PY_VALIDATORS_PATH";
/// The workspace lock file: which `nv-redfish-schema` (and so which CSDL).
const CARGO_LOCK: &str = include_str!("../../../Cargo.lock");
/// The crate that ships DMTF's CSDL (DSP8010) under `redfish-csdl/csdl`.
const CSDL_CRATE: &str = "nv-redfish-schema";
/// One validator run takes 3–6 s on a 2-core machine; this bounds a hung one.
const RUN_LIMIT: Duration = Duration::from_secs(120);
/// A closed port on loopback: any proxied request fails at once.
const NO_PROXY_HERE: &str = "http://127.0.0.1:9";
/// The one failure the `no-links` profile must show (the validator's text).
const NO_LINKS_FAILURE: &str = "/Links ([Not Present]): Required Property Error: The property 'Links' is mandatory, but not present in the payload.";

/// The validator's summary counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Counts {
    pass: u32,
    warn: u32,
    fail: u32,
    not_tested: u32,
}

/// One validator run: its counts and the non-PASS lines of its debug log.
#[derive(Debug)]
struct Run {
    counts: Counts,
    exit: Option<i32>,
    problems: Vec<String>,
}

fn validators_path() -> PathBuf {
    match std::env::var(VALIDATORS_PATH_ENV) {
        Ok(path) if !path.is_empty() => PathBuf::from(path),
        _ => panic!(
            "{VALIDATORS_PATH_ENV} is not set: run through scripts/test, which installs DMTF's \
             redfish-service-validator and exports it (or `source scripts/lib/python.sh && \
             ensure_python_validators`)"
        ),
    }
}

/// The locked version of `crate_name` in a `Cargo.lock`.
fn locked_version(lock: &str, crate_name: &str) -> Option<String> {
    let mut lines = lock.lines();
    while let Some(line) = lines.next() {
        if line.trim() == format!("name = \"{crate_name}\"") {
            let version = lines.next()?.trim();
            return Some(
                version
                    .strip_prefix("version = \"")?
                    .strip_suffix('"')?
                    .to_owned(),
            );
        }
    }
    None
}

/// `$CARGO_HOME/registry/src/*/nv-redfish-schema-<locked>/redfish-csdl/csdl`.
fn csdl_dir() -> PathBuf {
    let version = locked_version(CARGO_LOCK, CSDL_CRATE)
        .unwrap_or_else(|| panic!("Cargo.lock has no {CSDL_CRATE} package"));
    let cargo_home = std::env::var_os("CARGO_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| Path::new(&h).join(".cargo")))
        .expect("CARGO_HOME or HOME is set");
    let sources = cargo_home.join("registry/src");
    let found = std::fs::read_dir(&sources).ok().and_then(|registries| {
        registries.flatten().find_map(|registry| {
            let dir = registry
                .path()
                .join(format!("{CSDL_CRATE}-{version}/redfish-csdl/csdl"));
            dir.join("ServiceRoot_v1.xml").is_file().then_some(dir)
        })
    });
    found.unwrap_or_else(|| {
        panic!(
            "DMTF CSDL not found: expected {}/*/{CSDL_CRATE}-{version}/redfish-csdl/csdl \
             (the crate's source, which `cargo fetch` puts there)",
            sources.display()
        )
    })
}

/// Removes ANSI colour sequences (the validator colours its counts).
fn strip_ansi(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            for c in chars.by_ref() {
                if c.is_ascii_alphabetic() {
                    break;
                }
            }
        } else {
            out.push(c);
        }
    }
    out
}

/// The counts of the summary table the validator prints last:
/// `| PASS | WARN | FAIL | NOT TESTED |`, a rule, then one row of numbers.
fn summary(stdout: &str) -> Option<Counts> {
    let text = strip_ansi(stdout);
    let lines: Vec<&str> = text.lines().collect();
    let header = lines
        .iter()
        .rposition(|l| l.contains("PASS") && l.contains("NOT TESTED"))?;
    let row = lines[header + 1..]
        .iter()
        .find(|l| l.trim_start().starts_with('|'))?;
    let cells: Vec<u32> = row
        .split('|')
        .map(str::trim)
        .filter(|c| !c.is_empty())
        .map(|c| c.parse().ok())
        .collect::<Option<_>>()?;
    match cells.as_slice() {
        [pass, warn, fail, not_tested] => Some(Counts {
            pass: *pass,
            warn: *warn,
            fail: *fail,
            not_tested: *not_tested,
        }),
        _ => None,
    }
}

/// The `WARN`, `FAIL` and other error lines of the debug log(s) under
/// `logdir` (`<logdir>/<time>/RedfishServiceValidatorDebug_<time>.log`).
fn problems(logdir: &Path) -> Vec<String> {
    let mut lines = Vec::new();
    let runs = std::fs::read_dir(logdir).into_iter().flatten().flatten();
    for file in runs.flat_map(|run| {
        std::fs::read_dir(run.path())
            .into_iter()
            .flatten()
            .flatten()
    }) {
        let name = file.file_name();
        if !name
            .to_string_lossy()
            .starts_with("RedfishServiceValidatorDebug")
        {
            continue;
        }
        let text = std::fs::read_to_string(file.path()).unwrap_or_default();
        lines.extend(
            text.lines()
                .filter(|l| {
                    [" - WARNING - ", " - ERROR - ", " - CRITICAL - "]
                        .iter()
                        .any(|level| l.contains(level))
                })
                .map(strip_ansi),
        );
    }
    lines
}

/// Runs the service validator against `base` (every resource from the root).
async fn validate(base: &str, label: &str) -> Run {
    let validators = validators_path();
    let script = validators.join("bin/rf_service_validator");
    let logdir = std::env::temp_dir().join(format!(
        "flow-rsv-{}-{label}-{}",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos())
    ));
    std::fs::create_dir_all(&logdir).expect("log directory");
    let run = tokio::process::Command::new("python3")
        .arg(&script)
        .args(["--rhost", base, "--user", USER, "--password", PASSWORD])
        .args([
            "--authtype",
            "Session",
            "--skipschema",
            "--schema_directory",
        ])
        .arg(csdl_dir())
        .arg("--logdir")
        .arg(&logdir)
        // The root once (the default start, `/redfish/v1/`, differs from the
        // root's `@odata.id` and would validate it twice).
        .args(["--payload", "Tree", "/redfish/v1"])
        // Its own directory: the validator reads `config.ini` from here.
        .current_dir(&logdir)
        .env("PYTHONPATH", &validators)
        .env("PYTHONNOUSERSITE", "1")
        .env("HTTP_PROXY", NO_PROXY_HERE)
        .env("HTTPS_PROXY", NO_PROXY_HERE)
        .env("http_proxy", NO_PROXY_HERE)
        .env("https_proxy", NO_PROXY_HERE)
        .env("NO_PROXY", "127.0.0.1,localhost")
        .env("no_proxy", "127.0.0.1,localhost")
        .stdin(Stdio::null())
        .kill_on_drop(true)
        .output();
    let output = tokio::time::timeout(RUN_LIMIT, run)
        .await
        .unwrap_or_else(|_| {
            panic!("{label}: the service validator did not finish in {RUN_LIMIT:?}")
        })
        .expect("python3 runs");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    let counts = summary(&stdout).unwrap_or_else(|| {
        panic!(
            "{label}: no summary from the service validator ({}):\nstdout:\n{stdout}\nstderr:\n{stderr}",
            output.status
        )
    });
    let problems = problems(&logdir);
    let _ = std::fs::remove_dir_all(&logdir);
    Run {
        counts,
        exit: output.status.code(),
        problems,
    }
}

/// A session token (the `session-only` profile refuses HTTP Basic).
async fn login(http: &Client, base: &str) -> String {
    let response = http
        .post(format!("{base}/redfish/v1/SessionService/Sessions"))
        .json(&json!({"UserName": USER, "Password": PASSWORD}))
        .send()
        .await
        .expect("login");
    assert_eq!(response.status(), StatusCode::CREATED);
    response.headers()["x-auth-token"]
        .to_str()
        .expect("token")
        .to_owned()
}

async fn simulator(profile: VendorProfile) -> Simulator {
    let mut config = small(InitialPower::On, 0.01);
    config.profiles = vec![ProfileChoice {
        scope: ProfileScope::All,
        profile,
    }];
    start(config).await
}

/// Validates one BMC of each kind of a simulator in `profile`.
async fn check_profile(profile: VendorProfile) {
    let sim = simulator(profile).await;
    let http = client();
    let compute = bmc(&sim, "compute-01");
    let token = login(&http, &compute).await;
    let stream = http
        .get(format!("{compute}/redfish/v1/EventService/SSE"))
        .header("X-Auth-Token", &token)
        .header("Accept", "text/event-stream")
        .send()
        .await
        .expect("open the event stream");
    assert_eq!(stream.status(), StatusCode::OK);

    let mut failures = Vec::new();
    for component in ["compute-01", "nvswitch-01", "powershelf-01"] {
        let label = format!("{profile}-{component}");
        let run = validate(&bmc(&sim, component), &label).await;
        let fails: Vec<&String> = run
            .problems
            .iter()
            .filter(|l| l.contains(" FAIL - "))
            .collect();
        let expected_fails = if profile == VendorProfile::NoLinks {
            1
        } else {
            0
        };
        let only_intended = fails.iter().all(|l| l.contains(NO_LINKS_FAILURE));
        let as_expected = run.counts.fail == expected_fails
            && run.counts.warn == 0
            && fails.len() == expected_fails as usize
            && only_intended
            && run.counts.pass > 50
            && run.exit == Some(i32::from(expected_fails > 0));
        if !as_expected {
            failures.push(format!(
                "{label}: {:?}, exit {:?}, expected {expected_fails} failure(s){}:\n  {}",
                run.counts,
                run.exit,
                if expected_fails > 0 {
                    format!(" ({NO_LINKS_FAILURE})")
                } else {
                    String::new()
                },
                run.problems.join("\n  ")
            ));
        }
    }
    drop(stream);
    assert!(
        failures.is_empty(),
        "the DMTF service validator disagrees:\n{}",
        failures.join("\n")
    );
    sim.shutdown().await;
}

#[tokio::test]
async fn service_validator_passes_standard() {
    check_profile(VendorProfile::Standard).await;
}

#[tokio::test]
async fn service_validator_finds_only_the_missing_links_of_no_links() {
    check_profile(VendorProfile::NoLinks).await;
}

#[tokio::test]
async fn service_validator_passes_uuid_ids() {
    check_profile(VendorProfile::UuidIds).await;
}

#[tokio::test]
async fn service_validator_passes_multi_system() {
    check_profile(VendorProfile::MultiSystem).await;
}

#[tokio::test]
async fn service_validator_passes_action_info() {
    check_profile(VendorProfile::ActionInfo).await;
}

#[tokio::test]
async fn service_validator_passes_session_only() {
    check_profile(VendorProfile::SessionOnly).await;
}

#[tokio::test]
async fn service_validator_passes_reset_200() {
    check_profile(VendorProfile::Reset200).await;
}

#[tokio::test]
async fn service_validator_passes_if_match() {
    check_profile(VendorProfile::IfMatch).await;
}

#[test]
fn the_summary_row_and_the_locked_csdl_version_are_read() {
    let stdout = "Validating /redfish/v1...\n\n+----+\n|     PASS     |     WARN     |     FAIL     |  NOT TESTED  |\n+----+\n| \u{1b}[32m    170     \u{1b}[0m |      0       | \u{1b}[31m     3      \u{1b}[0m |     332      |\n+----+\n";
    assert_eq!(
        summary(stdout),
        Some(Counts {
            pass: 170,
            warn: 0,
            fail: 3,
            not_tested: 332
        })
    );
    assert_eq!(summary("Could not set up the service"), None);
    let lock =
        "[[package]]\nname = \"nv-redfish-schema\"\nversion = \"0.22.1\"\nsource = \"registry\"\n";
    assert_eq!(locked_version(lock, CSDL_CRATE).as_deref(), Some("0.22.1"));
    assert!(locked_version(CARGO_LOCK, CSDL_CRATE).is_some());
}
