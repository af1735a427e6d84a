//! Operations on racks and tasks: `flow power|firmware|decommission` submit
//! through `flow.api` (`task.submit`); `flow task` lists, shows, follows and
//! cancels. Live progress is in [`crate::watch`].

use std::collections::BTreeMap;

use flow_config::Settings;
use flow_protocol::TaskId;
use flow_protocol::api::{
    CancelOutcome, ConflictStrategy, Submission, TaskById, TaskList, TaskSubmit, endpoint,
};
use flow_protocol::ids::RackRef;
use flow_protocol::jobs::{FirmwareImage, SubTarget};
use flow_protocol::task::{TaskRecord, timestamp};
use flow_protocol::{ComponentOutcome, TaskStatus};
use flow_rules::{ComponentType, OperationCode};

use crate::Outcome;
use crate::args::{FirmwareAction, FirmwareArgs, PowerArgs, TargetArgs, TaskCommand};
use crate::out::outln;
use crate::remote::{Output, fail};
use crate::watch::watch;
use flow_client::ClientError;

pub(crate) fn bad(message: String) -> ClientError {
    ClientError::Api(flow_protocol::api::ApiError::new(
        flow_protocol::api::ErrorCode::BadRequest,
        message,
    ))
}

/// A task ID given on the command line.
pub(crate) fn task_id(text: &str) -> Result<TaskId, ClientError> {
    text.parse()
        .map_err(|_| bad(format!("{text:?} is not a task ID")))
}

fn request(
    target: &TargetArgs,
    operation: OperationCode,
    firmware: BTreeMap<ComponentType, FirmwareImage>,
) -> Result<TaskSubmit, ClientError> {
    let component_types: Vec<ComponentType> = target
        .types
        .iter()
        .map(|t| {
            t.parse()
                .map_err(|e: flow_rules::UnknownComponentType| bad(format!("--type: {e}")))
        })
        .collect::<Result<_, _>>()?;
    let request_id = target
        .request_id
        .clone()
        .unwrap_or_else(|| format!("cli-{}", TaskId::new()));
    let rule_id = match &target.rule_id {
        Some(r) => Some(
            r.parse()
                .map_err(|_| bad(format!("--rule-id {r:?}: not a rule ID (a UUID)")))?,
        ),
        None => None,
    };
    let conflict = if target.queue {
        let timeout = flow_rules::duration::parse_go(&target.timeout)
            .ok()
            .and_then(|d| d.non_negative())
            .filter(|d| !d.is_zero())
            .ok_or_else(|| {
                bad(format!(
                    "--timeout {:?}: use a positive Go duration such as 30m",
                    target.timeout
                ))
            })?;
        ConflictStrategy::Queue {
            timeout_seconds: timeout.as_secs().max(1),
        }
    } else {
        ConflictStrategy::Reject
    };
    let (racks, components) = targets(target)?;
    let readiness_timeout = flow_rules::duration::parse_go(&target.readiness_timeout)
        .ok()
        .and_then(|d| d.non_negative())
        .filter(|d| d.as_secs() >= 1)
        .ok_or_else(|| {
            bad(format!(
                "--readiness-timeout {:?}: use a Go duration of at least 1s such as 30m",
                target.readiness_timeout
            ))
        })?;
    Ok(TaskSubmit {
        request_id,
        racks,
        labels: target.labels.iter().cloned().collect(),
        components,
        component_types,
        operation,
        forced: false,
        description: target.description.clone().unwrap_or_default(),
        rule_id,
        firmware,
        bundle: None,
        conflict,
        override_readiness: target.override_readiness,
        reason: target.reason.clone(),
        readiness_timeout_seconds: Some(readiness_timeout.as_secs()),
        allow_version_change: false,
        not_before: time_arg("--not-before", target.not_before.as_deref())?,
        not_after: time_arg("--not-after", target.not_after.as_deref())?,
    })
}

/// An RFC 3339 time given on the command line.
fn time_arg(flag: &str, text: Option<&str>) -> Result<Option<time::OffsetDateTime>, ClientError> {
    text.map(|t| {
        time::OffsetDateTime::parse(t, &time::format_description::well_known::Rfc3339).map_err(
            |e| {
                bad(format!(
                    "{flag} {t:?}: not an RFC 3339 time such as 2026-12-02T02:00:00Z ({e})"
                ))
            },
        )
    })
    .transpose()
}

/// Component references with bare names put in `rack` (IDs and
/// `<rack>/<name>` stay as given).
pub(crate) fn in_rack(rack: Option<&String>, components: &[String]) -> Vec<String> {
    components
        .iter()
        .map(|c| match rack {
            Some(rack) if !c.contains('/') && c.parse::<uuid::Uuid>().is_err() => {
                format!("{rack}/{c}")
            }
            _ => c.clone(),
        })
        .collect()
}

/// Whole racks and single components from `--rack` and `--component`: with
/// components, one `--rack` is where their bare names are looked up, not a
/// whole-rack target.
fn targets(target: &TargetArgs) -> Result<(Vec<RackRef>, Vec<String>), ClientError> {
    if target.components.is_empty() {
        return Ok((
            target.racks.iter().cloned().map(RackRef).collect(),
            Vec::new(),
        ));
    }
    let components = match target.racks.as_slice() {
        [] => target.components.clone(),
        [rack] => in_rack(Some(rack), &target.components),
        _ => {
            return Err(bad(
                "--component with several --rack: name each component as <rack>/<name> and leave --rack out"
                    .to_owned(),
            ));
        }
    };
    Ok((Vec::new(), components))
}

async fn submit(
    settings: &Settings,
    out: Output,
    target: &TargetArgs,
    body: TaskSubmit,
) -> Outcome {
    if target.plan {
        return preview(settings, out, &body).await;
    }
    let result = async {
        let client = crate::remote::connect(settings).await?;
        let reply = client.call::<endpoint::TaskSubmit>(&body).await?;
        Ok::<_, ClientError>((client, reply))
    }
    .await;
    let (client, reply) = match result {
        Ok(v) => v,
        Err(e) => return fail(e),
    };
    let mut outcome = Outcome::Valid;
    let mut tasks = Vec::new();
    if out.json && !target.wait {
        outln!(
            "{}",
            serde_json::to_string_pretty(&reply).unwrap_or_default()
        );
    }
    for r in &reply.results {
        match &r.submission {
            Submission::Created(id)
            | Submission::Queued { task_id: id, .. }
            | Submission::Duplicate(id) => {
                if !out.json {
                    let note = match &r.submission {
                        Submission::Duplicate(_) => " (already submitted)".to_owned(),
                        Submission::Queued {
                            position,
                            expires_at,
                            ..
                        } => format!(
                            " queued (position {position}, expires {})",
                            timestamp::format(*expires_at)
                        ),
                        _ => String::new(),
                    };
                    outln!("{}: task {id}{note}", r.rack);
                }
                tasks.push(*id);
            }
            Submission::Refused(e) => {
                eprintln!("{}: refused: {e}", r.rack);
                for d in &e.details {
                    eprintln!("  {d}");
                }
                outcome = Outcome::Invalid;
            }
        }
    }
    if target.wait {
        for id in tasks {
            match watch(&client, out, id).await {
                Ok(true) => {}
                Ok(false) => outcome = Outcome::Invalid,
                Err(e) => return fail(e),
            }
        }
    }
    outcome
}

/// `--plan`: what the submission would do, creating nothing; invalid
/// when any rack would be refused.
async fn preview(settings: &Settings, out: Output, body: &TaskSubmit) -> Outcome {
    let reply = async {
        let client = crate::remote::connect(settings).await?;
        client.call::<endpoint::TaskPlan>(body).await
    }
    .await;
    let reply = match reply {
        Ok(r) => r,
        Err(e) => return fail(e),
    };
    if out.json {
        outln!(
            "{}",
            serde_json::to_string_pretty(&reply).unwrap_or_default()
        );
    } else {
        for line in crate::plan::render(&reply) {
            outln!("{line}");
        }
    }
    if reply
        .results
        .iter()
        .any(|r| r.outcome == flow_protocol::preview::PlanOutcome::Refused)
    {
        Outcome::Invalid
    } else {
        Outcome::Valid
    }
}

/// The request `flow power <action>` submits.
pub(crate) fn power_request(args: &PowerArgs) -> Result<TaskSubmit, ClientError> {
    Ok(TaskSubmit {
        forced: args.forced,
        ..request(&args.target, args.action.operation(), BTreeMap::new())?
    })
}

/// The request `flow firmware <action> --image type=uri@version` submits.
pub(crate) fn firmware_request(args: &FirmwareArgs) -> Result<TaskSubmit, ClientError> {
    if args.action == FirmwareAction::Restore || args.snapshot.is_some() {
        return Err(bad(
            "a restore is planned from its snapshot when it runs: use flow firmware restore --snapshot <task> (it cannot be scheduled or rolled out)".to_owned(),
        ));
    }
    let mut images = BTreeMap::new();
    for spec in &args.images {
        let (t, rest) = spec
            .split_once('=')
            .ok_or_else(|| bad(format!("--image {spec:?}: use <type>=<uri>@<version>")))?;
        let t: ComponentType = t
            .parse()
            .map_err(|e: flow_rules::UnknownComponentType| bad(format!("--image: {e}")))?;
        let (uri, version) = match rest.rsplit_once('@') {
            Some((u, v)) => (u, Some(v.to_owned())),
            None => (rest, None),
        };
        images.insert(
            t,
            FirmwareImage {
                image_uri: uri.to_owned(),
                version,
                sub_targets: Vec::new(),
                digest: None,
                size: None,
            },
        );
    }
    for spec in &args.digests {
        let (t, digest) = spec.split_once('=').ok_or_else(|| {
            bad(format!(
                "--sha256 {spec:?}: use <type>=sha256:<64 hex digits>"
            ))
        })?;
        let t: ComponentType = t
            .parse()
            .map_err(|e: flow_rules::UnknownComponentType| bad(format!("--sha256: {e}")))?;
        let image = images
            .get_mut(&t)
            .ok_or_else(|| bad(format!("--sha256 {spec:?}: no --image for {t}")))?;
        let digest = digest.trim().to_ascii_lowercase();
        let digest = if digest.starts_with("sha256:") {
            digest
        } else {
            format!("sha256:{digest}")
        };
        if !flow_protocol::firmware::is_sha256(&digest) {
            return Err(bad(format!(
                "--sha256 {spec:?}: not sha256:<64 hex digits>"
            )));
        }
        image.digest = Some(digest);
    }
    if let Some((t, image)) = images.iter().find(|(_, i)| i.digest.is_none()) {
        return Err(bad(format!(
            "--image {}: give its digest with --sha256 {}=sha256:<64 hex digits> (BMCs are given only bytes Flow has verified)",
            image.image_uri,
            t.subject_token()
        )));
    }
    let mut bundle_subs = Vec::new();
    for name in &args.sub_targets {
        let sub: SubTarget = name
            .trim()
            .parse()
            .map_err(|e: String| bad(format!("--sub-target: {e}")))?;
        if args.bundle.is_some() {
            bundle_subs.push(sub);
            continue;
        }
        let mut taken = false;
        for (t, image) in images.iter_mut() {
            if SubTarget::of(*t).contains(&sub) && !image.sub_targets.contains(&sub) {
                image.sub_targets.push(sub);
                taken = true;
            }
        }
        if !taken {
            return Err(bad(format!(
                "--sub-target {sub}: no --image of a type that has it (bmc, cpld, bios, nvos: nvswitch; pmc, psu: powershelf)"
            )));
        }
    }
    let bundle = match &args.bundle {
        None => None,
        Some(spec) => {
            let (name, version) = spec
                .rsplit_once('@')
                .filter(|(n, v)| !n.is_empty() && !v.is_empty())
                .ok_or_else(|| bad(format!("--bundle {spec:?}: use <name>@<version>")))?;
            Some(flow_protocol::firmware::TaskBundle {
                name: name.to_owned(),
                version: version.to_owned(),
                sub_targets: bundle_subs,
            })
        }
    };
    Ok(TaskSubmit {
        allow_version_change: args.allow_version_change,
        bundle,
        ..request(&args.target, args.action.operation(), images)?
    })
}

/// The request `flow decommission` submits.
pub(crate) fn decommission_request(args: &TargetArgs) -> Result<TaskSubmit, ClientError> {
    request(args, OperationCode::Decommission, BTreeMap::new())
}

/// `flow power <action>`.
pub async fn power(settings: &Settings, out: Output, args: &PowerArgs) -> Outcome {
    match power_request(args) {
        Ok(body) => submit(settings, out, &args.target, body).await,
        Err(e) => fail(e),
    }
}

/// `flow firmware <action> --image type=uri@version`.
pub async fn firmware(settings: &Settings, out: Output, args: &FirmwareArgs) -> Outcome {
    if args.action == FirmwareAction::Restore {
        return match crate::restore::request(settings, args).await {
            Ok(body) => submit(settings, out, &args.target, body).await,
            Err(e) => fail(e),
        };
    }
    match firmware_request(args) {
        Ok(body) => submit(settings, out, &args.target, body).await,
        Err(e) => fail(e),
    }
}

/// `flow decommission`.
pub async fn decommission(settings: &Settings, out: Output, args: &TargetArgs) -> Outcome {
    match decommission_request(args) {
        Ok(body) => submit(settings, out, args, body).await,
        Err(e) => fail(e),
    }
}

/// `flow task …`.
pub async fn task(settings: &Settings, out: Output, command: &TaskCommand) -> Outcome {
    let result = async {
        let client = crate::remote::connect(settings).await?;
        match command {
            TaskCommand::List { limit } => {
                let list = client
                    .call::<endpoint::TaskList>(&TaskList {
                        limit: Some(*limit),
                    })
                    .await?;
                if out.json {
                    outln!(
                        "{}",
                        serde_json::to_string_pretty(&list).unwrap_or_default()
                    );
                } else {
                    let mut t = crate::remote::table(&[
                        "ID",
                        "RACK",
                        "OPERATION",
                        "STATUS",
                        "STAGE",
                        "CREATED",
                        "MESSAGE",
                    ]);
                    for task in &list.tasks {
                        t.add_row(vec![
                            task.id.to_string(),
                            task.rack.clone(),
                            task.operation.to_string(),
                            task.status.to_string(),
                            opt(task.current_stage),
                            timestamp::format(task.created_at),
                            task.message.clone(),
                        ]);
                    }
                    outln!("{t}");
                }
                Ok(true)
            }
            TaskCommand::Show { id, rule } => {
                let task = client
                    .call::<endpoint::TaskGet>(&TaskById { id: task_id(id)? })
                    .await?;
                if out.json {
                    outln!(
                        "{}",
                        serde_json::to_string_pretty(&task).unwrap_or_default()
                    );
                } else {
                    print_task(&task, *rule);
                }
                Ok(task.status == TaskStatus::Completed)
            }
            TaskCommand::Watch { id } => watch(&client, out, task_id(id)?).await,
            TaskCommand::Cancel { id } => {
                let reply = client
                    .call::<endpoint::TaskCancel>(&TaskById { id: task_id(id)? })
                    .await?;
                if out.json {
                    outln!("{}", serde_json::to_string(&reply).unwrap_or_default());
                } else {
                    match reply.outcome {
                        CancelOutcome::Cancelling => {
                            outln!("task {id}: cancelling at the next action boundary")
                        }
                        CancelOutcome::CancelledWhileQueued => outln!(
                            "task {id}: cancelled while queued ({}; nothing ran)",
                            reply.status
                        ),
                        CancelOutcome::CancelledBeforeStart => outln!(
                            "task {id}: cancelled while its readiness gate held it ({}; nothing ran)",
                            reply.status
                        ),
                        CancelOutcome::AlreadyFinished => {
                            outln!("task {id} had already finished ({})", reply.status)
                        }
                    }
                }
                Ok(true)
            }
        }
    }
    .await;
    match result {
        Ok(true) => Outcome::Valid,
        Ok(false) => Outcome::Invalid,
        Err(e) => fail(e),
    }
}

/// An optional value as a cell: empty when absent.
pub(crate) fn opt<T: std::fmt::Display>(v: Option<T>) -> String {
    v.map(|v| v.to_string()).unwrap_or_default()
}

/// How many components of a step are done and failed.
pub(crate) fn counts(step: &flow_protocol::task::StepRecord) -> (usize, usize) {
    let n = |o| step.results.values().filter(|c| c.status == o).count();
    (n(ComponentOutcome::Done), n(ComponentOutcome::Failed))
}

pub(crate) fn step_line(s: &flow_protocol::task::StepRecord) -> String {
    let (done, failed) = counts(s);
    let error = s
        .error
        .as_deref()
        .map(|e| format!(" — {e}"))
        .unwrap_or_default();
    format!(
        "  stage {} {:<10} {:<9} {done}/{} done{}{error}",
        s.stage,
        s.component_type.as_str(),
        s.status.as_str(),
        s.components,
        if failed > 0 {
            format!(", {failed} failed")
        } else {
            String::new()
        },
    )
}

/// One action's calls for a component: how many, when (seconds after the
/// step started), and the last error.
fn action_line(a: &flow_protocol::jobs::ActionCalls, step_start: Option<u64>) -> String {
    let times: Vec<String> = a
        .at_ms
        .iter()
        .map(|at| match step_start {
            Some(start) => format!("+{:.1}s", at.saturating_sub(start) as f64 / 1000.0),
            None => at.to_string(),
        })
        .collect();
    // The record keeps the first call's time and the latest ones.
    let shown = match times.split_first() {
        Some((first, rest)) if (a.attempts as usize) > times.len() => {
            format!("{first} … {}", rest.join(" "))
        }
        _ => times.join(" "),
    };
    let (one, many) = if a.polls() {
        ("poll", "polls")
    } else {
        ("attempt", "attempts")
    };
    format!(
        "{}: {} {} at {shown}{}",
        a.action,
        a.attempts,
        if a.attempts == 1 { one } else { many },
        a.error
            .as_deref()
            .map(|e| format!("; last error: {e}"))
            .unwrap_or_default()
    )
}

/// A task for people: its record, its steps and each component's calls;
/// the rule snapshot only when asked (`with_rule`).
fn print_task(task: &TaskRecord, with_rule: bool) {
    outln!("Task:      {}", task.id);
    outln!("Rack:      {}", task.rack);
    if !task.description.is_empty() {
        outln!("About:     {}", task.description);
    }
    outln!("Operation: {}/{}", task.operation_type, task.operation);
    outln!(
        "Rule:      {} ({}{})",
        task.rule_name,
        serde_json::to_value(task.rule_source)
            .ok()
            .and_then(|v| v.as_str().map(str::to_owned))
            .unwrap_or_default(),
        task.rule_revision
            .map(|r| format!(", revision {r}"))
            .unwrap_or_default()
    );
    outln!(
        "Status:    {}{}",
        task.status,
        Some(task.message.as_str())
            .filter(|m| !m.is_empty())
            .map(|m| format!(" — {m}"))
            .unwrap_or_default()
    );
    // Commands power admission holds now, grouped by reason.
    let mut held: std::collections::BTreeMap<&str, Vec<&str>> = std::collections::BTreeMap::new();
    for w in &task.power_waits {
        held.entry(w.reason.as_str())
            .or_default()
            .push(w.component.as_str());
    }
    for (reason, components) in held {
        outln!("Held:      {} ({})", reason, components.join(", "));
    }
    if let Some(event) = task.preempted_by {
        outln!("Preempted: by hardware event {event} (flow event show {event})");
    }
    if let Some(a) = &task.archived {
        outln!(
            "Archived:  {} — steps in segment {} (flow admin archive show {} --task {})",
            flow_protocol::task::timestamp::format(a.at),
            a.segment,
            a.segment,
            task.id
        );
        outln!(
            "Summary:   {} steps, {} component results, {} not done, {} calls{}",
            a.steps,
            a.components,
            a.failed,
            a.calls,
            a.submitted_by
                .as_deref()
                .map(|w| format!("; submitted by {w}"))
                .unwrap_or_default()
        );
        for f in &a.failures {
            outln!(
                "  {:<5} {} {} {}{}",
                f.step_index,
                f.component_type,
                f.component,
                f.status.as_str(),
                f.error
                    .as_deref()
                    .map(|e| format!(" ({e})"))
                    .unwrap_or_default()
            );
        }
    }
    for s in &task.steps {
        outln!("{}", step_line(s));
        let step_start = s
            .started_at
            .map(|t| u64::try_from(t.unix_timestamp_nanos() / 1_000_000).unwrap_or(0));
        for (name, c) in &s.results {
            let error = c
                .error
                .as_deref()
                .map(|e| format!(" ({e})"))
                .unwrap_or_default();
            outln!(
                "      {name:<16} {:<8} {}{error}",
                c.status.as_str(),
                c.result
            );
            for a in &c.actions {
                outln!("        {}", action_line(a, step_start));
            }
        }
    }
    if with_rule {
        outln!("Rule snapshot:");
        outln!(
            "{}",
            serde_json::to_string_pretty(&task.rule).unwrap_or_default()
        );
    }
}
