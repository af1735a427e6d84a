//! `flow bmc`: one BMC through the same managers the workers use.

use std::sync::Arc;
use std::time::{Duration, Instant};

use flow_config::Secret;
use flow_hardware::{
    ComponentManager, ComponentTarget, FirmwareRequest, FirmwareStart, FirmwareState, HardwareError,
};
use flow_redfish::{CredentialStore, RedfishManager, RedfishSettings};
use flow_rules::{ComponentType, PowerOperation};
use serde_json::json;

use crate::Outcome;
use crate::args::{BmcAction, BmcArgs, BmcKind};
use crate::out::outln;
use crate::remote::Output;

/// The credential reference used for `--user/--password-env`.
const CLI_REF: &str = "flow-bmc-cli";

fn fail(error: &HardwareError, out: Output) -> Outcome {
    let class = error.class().as_str();
    if out.json {
        outln!(
            "{}",
            json!({"ok": false, "error": error.to_string(), "class": class})
        );
    } else {
        eprintln!("flow: {error} ({class})");
    }
    Outcome::Invalid
}

fn usage(message: String) -> Outcome {
    eprintln!("flow: {message}");
    Outcome::Unusable
}

/// Runs `flow bmc`.
pub async fn run(args: &BmcArgs, out: Output) -> Outcome {
    let (store, reference) = match credentials(args) {
        Ok(v) => v,
        Err(message) => return usage(message),
    };
    let component_type = match args.kind {
        BmcKind::Compute => ComponentType::Compute,
        BmcKind::Nvswitch => ComponentType::NVSwitch,
        BmcKind::Powershelf => ComponentType::PowerShelf,
    };
    let settings = RedfishSettings {
        ca_file: args.ca_file.clone(),
        insecure: args.insecure,
        ..RedfishSettings::default()
    };
    let manager = match RedfishManager::new(component_type, &settings, Arc::new(store), None) {
        Ok(m) => m,
        Err(e) => return usage(e.to_string()),
    };
    let target = ComponentTarget {
        rack: String::new(),
        name: args.url.clone(),
        component_type,
        bmc_url: args.url.clone(),
        credential_ref: reference,
        resource_id: None,
    };
    let outcome = act(args, &manager, &target, out).await;
    flow_hardware::ComponentManager::close(&manager).await;
    outcome
}

/// `flow bmc … power <operation>`: decided as a step decides it
/// (`shared/hardware/src/command.rs`) — the state read first (except for a
/// forced power-off), nothing sent when the component rests in the end
/// state or is moving, the command sent otherwise.
async fn power(
    manager: &RedfishManager,
    target: &ComponentTarget,
    op: PowerOperation,
    out: Output,
) -> Outcome {
    use flow_hardware::command::{PowerPlan, plan, reads_first};
    let decided = if reads_first(op) {
        match manager.power_status(target).await {
            Ok(state) => plan(op, state),
            Err(e) => return fail(&e, out),
        }
    } else {
        PowerPlan::Send
    };
    // (JSON field, its value, the line printed)
    let (field, value, text) = match decided {
        PowerPlan::Already(state) => (
            "already",
            state.to_string(),
            format!("already {state}: nothing sent"),
        ),
        PowerPlan::AwaitSteady(state) => (
            "moving",
            state.to_string(),
            format!("{state}: the component is moving; nothing sent (ask again once it settles)"),
        ),
        PowerPlan::Refuse(why) => {
            let e = HardwareError::InvalidState {
                component: target.name.clone(),
                message: why,
            };
            return fail(&e, out);
        }
        PowerPlan::Send => match manager.power_control(target, op).await {
            Ok(sent) => (
                "sent",
                sent.reset_type.clone(),
                format!("sent ResetType {}", sent.reset_type),
            ),
            Err(e) => return fail(&e, out),
        },
    };
    if out.json {
        outln!("{}", json!({"ok": true, field: value}));
    } else {
        outln!("{text}");
    }
    Outcome::Valid
}

async fn act(
    args: &BmcArgs,
    manager: &RedfishManager,
    target: &ComponentTarget,
    out: Output,
) -> Outcome {
    let target = target.clone();
    match &args.action {
        BmcAction::Probe => match manager.probe(&target).await {
            Ok(found) => {
                if out.json {
                    outln!("{}", json!({"ok": true, "probe": found}));
                } else {
                    print_probe(&found);
                }
                Outcome::Valid
            }
            Err(e) => fail(&e, out),
        },
        BmcAction::PowerStatus => match manager.power_status(&target).await {
            Ok(s) => {
                if out.json {
                    outln!("{}", json!({"ok": true, "power": s}));
                } else {
                    outln!("{s:?}");
                }
                Outcome::Valid
            }
            Err(e) => fail(&e, out),
        },
        BmcAction::Power { operation } => {
            let op: PowerOperation = match operation.parse() {
                Ok(op) => op,
                Err(e) => return usage(e.to_string()),
            };
            power(manager, &target, op, out).await
        }
        BmcAction::FirmwareStatus => match manager.firmware_status(&target, None).await {
            Ok(status) => {
                if out.json {
                    outln!("{}", json!({"ok": true, "versions": status.versions}));
                } else {
                    for (member, version) in &status.versions {
                        outln!("{member}\t{version}");
                    }
                }
                Outcome::Valid
            }
            Err(e) => fail(&e, out),
        },
        BmcAction::FirmwareUpdate {
            image_uri,
            version,
            targets,
            wait_seconds,
        } => {
            let request = FirmwareRequest {
                image_uri: image_uri.clone(),
                version: version.clone(),
                targets: targets.clone(),
                sub_targets: Vec::new(),
            };
            let job = match manager.firmware_update(&target, &request).await {
                Ok(FirmwareStart::AlreadyInstalled { version }) => {
                    if out.json {
                        outln!("{}", json!({"ok": true, "already_installed": version}));
                    } else {
                        outln!("version {version} is already installed: nothing started");
                    }
                    return Outcome::Valid;
                }
                Ok(FirmwareStart::Started(job)) => job,
                Err(e) => return fail(&e, out),
            };
            if !out.json {
                eprintln!("update started: task {}", job.task);
            }
            let deadline = Instant::now() + Duration::from_secs(*wait_seconds);
            loop {
                let status = match manager.firmware_status(&target, Some(&job)).await {
                    Ok(s) => s,
                    Err(e) if e.is_transient() && Instant::now() < deadline => {
                        eprintln!("({e}; retrying)");
                        tokio::time::sleep(Duration::from_secs(2)).await;
                        continue;
                    }
                    Err(e) => return fail(&e, out),
                };
                match status.state {
                    FirmwareState::Completed | FirmwareState::Failed => {
                        let ok = status.state == FirmwareState::Completed;
                        if out.json {
                            outln!("{}", json!({"ok": ok, "task": job.task, "status": status}));
                        } else {
                            outln!("{:?}: {}", status.state, status.message);
                            for (member, version) in &status.versions {
                                outln!("{member}\t{version}");
                            }
                        }
                        return if ok { Outcome::Valid } else { Outcome::Invalid };
                    }
                    _ if Instant::now() >= deadline => {
                        return usage(format!(
                            "gave up after {wait_seconds} s; task {} still {:?}",
                            job.task, status.state
                        ));
                    }
                    _ => {
                        if !out.json {
                            eprintln!(
                                "{:?} {}% {}",
                                status.state,
                                status.percent.unwrap_or(0),
                                status.message
                            );
                        }
                        tokio::time::sleep(Duration::from_secs(2)).await;
                    }
                }
            }
        }
    }
}

fn print_probe(p: &flow_redfish::probe::Probe) {
    let or = |v: &Option<String>| v.clone().unwrap_or_else(|| "-".to_owned());
    outln!(
        "service root\tVendor {}, Product {}, Redfish {}{}",
        or(&p.vendor),
        or(&p.product),
        or(&p.redfish_version),
        if p.root_links { "" } else { ", no Links" }
    );
    for (label, members) in [("system", &p.systems), ("chassis", &p.chassis)] {
        for m in members {
            let resets = match &m.reset_types {
                None => "no reset".to_owned(),
                Some(v) if v.is_empty() => "reset (values not listed)".to_owned(),
                Some(v) => format!(
                    "reset {}{}",
                    v.join(","),
                    if m.action_info { " (ActionInfo)" } else { "" }
                ),
            };
            outln!(
                "{label}\t{} ({}), PowerState {}, {resets}",
                m.odata_id,
                or(&m.kind),
                or(&m.power_state)
            );
        }
    }
    outln!("power resource\t{}", or(&p.power_resource));
    outln!(
        "update service\t{}; firmware {}",
        if p.simple_update {
            "SimpleUpdate"
        } else {
            "no SimpleUpdate"
        },
        if p.firmware.is_empty() {
            "-".to_owned()
        } else {
            p.firmware.join(", ")
        }
    );
    outln!("sessions\t{}", p.sessions);
    outln!("auth\t{}", p.auth);
    outln!(
        "basic\t{}",
        if p.basic_accepted {
            "accepted"
        } else {
            "refused (sessions only)"
        }
    );
    outln!("events\t{}", or(&p.events));
    outln!("resembles\t{}", p.resembles);
}

fn credentials(args: &BmcArgs) -> Result<(CredentialStore, String), String> {
    if let (Some(user), Some(var)) = (&args.user, &args.password_env) {
        let password = std::env::var(var)
            .map_err(|_| format!("--password-env {var}: the variable is not set"))?;
        let mut store = CredentialStore::new();
        store.insert(CLI_REF, user.clone(), Secret::new(password));
        return Ok((store, CLI_REF.to_owned()));
    }
    let Some(reference) = &args.credential else {
        return Err(
            "give --user with --password-env, or --credential with a credentials file".into(),
        );
    };
    let Some(file) = &args.credentials_file else {
        return Err("--credential needs --credentials-file or FLOW_BMC_CREDENTIALS_FILE".into());
    };
    let store = CredentialStore::from_yaml_file(file, &|k| std::env::var(k).ok())
        .map_err(|e| e.to_string())?;
    if store.get(reference).is_none() {
        return Err(format!(
            "credential {reference:?} is not in {}",
            file.display()
        ));
    }
    Ok((store, reference.clone()))
}
