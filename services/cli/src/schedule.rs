//! `flow schedule …`: schedules through `flow.api` (`schedule.*`). The
//! operation a schedule fires is built exactly as `flow power|firmware|
//! decommission` builds it ([`crate::task`]); what is a firing's own (its
//! request ID, its window, following it with --wait) is refused here.

use flow_config::Settings;
use flow_protocol::api::{Submission, TaskSubmit, endpoint};
use flow_protocol::schedule::{
    FiringRecord, MaintenanceWindow, Overlap, ScheduleByRef, ScheduleCreate, ScheduleList,
    ScheduleRecord, ScheduleSpec, ScheduleUpdate,
};
use flow_protocol::task::timestamp;

use crate::Outcome;
use crate::args::{
    OperationCommand, OverlapArg, ScheduleCommand, ScheduleCreateArgs, ScheduleUpdateArgs,
    TargetArgs,
};
use crate::out::outln;
use crate::remote::{Output, fail, table};
use crate::task::{bad, decommission_request, firmware_request, opt, power_request};
use flow_client::ClientError;

fn overlap(o: OverlapArg) -> Overlap {
    match o {
        OverlapArg::Skip => Overlap::Skip,
        OverlapArg::Queue => Overlap::Queue,
    }
}

fn spec(
    every: Option<&String>,
    cron: Option<&String>,
    at: Option<&String>,
) -> Result<Option<ScheduleSpec>, ClientError> {
    Ok(match (every, cron, at) {
        (Some(every), _, _) => Some(ScheduleSpec::Interval {
            every: every.clone(),
        }),
        (_, Some(expression), _) => Some(ScheduleSpec::Cron {
            expression: expression.clone(),
        }),
        (_, _, Some(at)) => Some(ScheduleSpec::Once {
            at: time::OffsetDateTime::parse(at, &time::format_description::well_known::Rfc3339)
                .map_err(|e| {
                    bad(format!(
                        "--at {at:?}: not an RFC 3339 time such as 2026-12-02T02:00:00Z ({e})"
                    ))
                })?,
        }),
        _ => None,
    })
}

/// `"<cron> for <duration> [in <timezone>]"`.
pub(crate) fn window(text: &str) -> Result<MaintenanceWindow, ClientError> {
    let usage = || {
        bad(format!(
            "--window {text:?}: use \"<cron> for <duration> [in <timezone>]\", e.g. \"0 22 * * 1-5 for 6h in Europe/Berlin\""
        ))
    };
    let (cron, rest) = text.split_once(" for ").ok_or_else(usage)?;
    let (duration, timezone) = match rest.split_once(" in ") {
        Some((d, tz)) => (d.trim(), tz.trim()),
        None => (rest.trim(), ""),
    };
    if cron.trim().is_empty() || duration.is_empty() {
        return Err(usage());
    }
    Ok(MaintenanceWindow {
        cron: cron.trim().to_owned(),
        duration: duration.to_owned(),
        timezone: timezone.to_owned(),
    })
}

/// Refuses the task flags that belong to one submission, not to `what`
/// (a schedule, a run).
fn check_target(target: &TargetArgs, what: &str) -> Result<(), ClientError> {
    let refuse = |flag: &str, why: &str| Err(bad(format!("{flag}: not for {what} ({why})")));
    if target.wait {
        return refuse("--wait", "follow a firing's tasks with `flow task watch`");
    }
    if target.request_id.is_some() {
        return refuse("--request-id", "each of its tasks gets its own key");
    }
    if target.not_before.is_some() || target.not_after.is_some() {
        return refuse(
            "--not-before/--not-after",
            "give it maintenance windows with --window",
        );
    }
    Ok(())
}

/// Whether the operation asked for `--plan`: the schedule or run is
/// previewed, not created.
pub(crate) fn wants_plan(operation: &OperationCommand) -> bool {
    match operation {
        OperationCommand::Power(a) => a.target.plan,
        OperationCommand::Firmware(a) => a.target.plan,
        OperationCommand::Decommission(a) => a.plan,
    }
}

/// The task request a schedule or run (`what`) is made of: the operation
/// as `flow power|firmware|decommission` builds it, without a request ID.
pub(crate) fn task_request(
    operation: &OperationCommand,
    what: &str,
) -> Result<TaskSubmit, ClientError> {
    let (target, request) = match operation {
        OperationCommand::Power(a) => (&a.target, power_request(a)),
        OperationCommand::Firmware(a) => (&a.target, firmware_request(a)),
        OperationCommand::Decommission(a) => (a, decommission_request(a)),
    };
    check_target(target, what)?;
    let mut request = request?;
    request.request_id.clear();
    Ok(request)
}

fn create_request(a: &ScheduleCreateArgs) -> Result<ScheduleCreate, ClientError> {
    Ok(ScheduleCreate {
        name: a.name.clone(),
        spec: spec(
            a.when.every.as_ref(),
            a.when.cron.as_ref(),
            a.when.at.as_ref(),
        )?
        .ok_or_else(|| bad("give one of --every, --cron, --at".to_owned()))?,
        timezone: a.timezone.clone(),
        overlap: overlap(a.overlap),
        windows: a
            .windows
            .iter()
            .map(|w| window(w))
            .collect::<Result<_, _>>()?,
        task: task_request(&a.operation, "a schedule")?,
    })
}

fn update_request(a: &ScheduleUpdateArgs) -> Result<ScheduleUpdate, ClientError> {
    Ok(ScheduleUpdate {
        schedule: a.schedule.clone(),
        revision: a.revision,
        name: a.name.clone(),
        spec: spec(a.every.as_ref(), a.cron.as_ref(), a.at.as_ref())?,
        timezone: a.timezone.clone(),
        overlap: a.overlap.map(overlap),
        windows: if a.no_windows {
            Some(Vec::new())
        } else if a.windows.is_empty() {
            None
        } else {
            Some(
                a.windows
                    .iter()
                    .map(|w| window(w))
                    .collect::<Result<_, _>>()?,
            )
        },
    })
}

fn state(s: &ScheduleRecord) -> &'static str {
    match (s.enabled, s.next_run_at) {
        (true, Some(_)) => "active",
        (false, _) => "paused",
        (true, None) => "done",
    }
}

fn print_schedule(s: &ScheduleRecord) {
    outln!("schedule {} ({})", s.name, s.id);
    outln!("  when:     {} ({})", s.spec.describe(), s.timezone);
    outln!("  overlap:  {}", s.overlap.as_str());
    for w in &s.windows {
        outln!("  window:   {w}");
    }
    let mut target: Vec<String> = s.task.racks.iter().map(|r| r.0.clone()).collect();
    target.extend(s.task.labels.iter().map(|(k, v)| format!("label {k}={v}")));
    target.extend(s.task.components.iter().map(|c| format!("component {c}")));
    outln!(
        "  task:     {}{} on {}",
        s.task.operation,
        if s.task.forced { " (forced)" } else { "" },
        target.join(", ")
    );
    outln!("  state:    {}", state(s));
    outln!("  next:     {}", opt(s.next_run_at.map(timestamp::format)));
    outln!(
        "  last:     {}",
        opt(s.last_fired_at.map(timestamp::format))
    );
    outln!("  revision: {}", s.revision);
}

fn print_firing(f: &FiringRecord) {
    let mut line = format!(
        "{} {}{}",
        timestamp::format(f.due_at),
        f.trigger.as_str(),
        if f.late {
            format!(" (late: fired {})", timestamp::format(f.fired_at))
        } else {
            String::new()
        }
    );
    if let (Some(s), Some(e)) = (f.window_start, f.window_end) {
        line.push_str(&format!(
            " window {} – {}",
            timestamp::format(s),
            timestamp::format(e)
        ));
    }
    if !f.done {
        line.push_str(" (unfinished)");
    }
    outln!("{line}");
    if let Some(e) = &f.error {
        outln!("  nothing submitted: {e}");
    }
    for r in &f.results {
        match &r.submission {
            Submission::Created(id) => outln!("  {}: task {id}", r.rack),
            Submission::Duplicate(id) => outln!("  {}: task {id} (already submitted)", r.rack),
            Submission::Queued {
                task_id, position, ..
            } => {
                outln!("  {}: task {task_id} queued (position {position})", r.rack)
            }
            Submission::Refused(e) => outln!("  {}: refused: {e}", r.rack),
        }
    }
    for s in &f.skipped {
        outln!(
            "  {}: skipped (task {} of an earlier firing still open)",
            s.rack,
            s.task_id
        );
    }
}

pub(crate) fn json<T: serde::Serialize>(value: &T) {
    outln!(
        "{}",
        serde_json::to_string_pretty(value).unwrap_or_default()
    );
}

/// `flow schedule …`.
pub async fn schedule(settings: &Settings, out: Output, command: &ScheduleCommand) -> Outcome {
    let result = async {
        // Build the request first: bad flags need no service.
        let create = match command {
            ScheduleCommand::Create(a) => Some(create_request(a)?),
            _ => None,
        };
        let update = match command {
            ScheduleCommand::Update(a) => Some(update_request(a)?),
            _ => None,
        };
        let client = crate::remote::connect(settings).await?;
        let by = |s: &String| ScheduleByRef::new(s.clone());
        let mut ok = true;
        match command {
            ScheduleCommand::Create(a) if wants_plan(&a.operation) => {
                let body = create.ok_or_else(|| bad("no request".to_owned()))?;
                let plan = client.call::<endpoint::SchedulePlan>(&body).await?;
                if out.json {
                    json(&plan);
                } else {
                    for line in crate::plan::render_schedule(&plan) {
                        outln!("{line}");
                    }
                }
            }
            ScheduleCommand::Create(_) => {
                let body = create.ok_or_else(|| bad("no request".to_owned()))?;
                let s = client.call::<endpoint::ScheduleCreate>(&body).await?;
                if out.json {
                    json(&s);
                } else {
                    print_schedule(&s);
                }
            }
            ScheduleCommand::Update(_) => {
                let body = update.ok_or_else(|| bad("no request".to_owned()))?;
                let s = client.call::<endpoint::ScheduleUpdate>(&body).await?;
                if out.json {
                    json(&s);
                } else {
                    print_schedule(&s);
                }
            }
            ScheduleCommand::List { enabled_only } => {
                let list = client
                    .call::<endpoint::ScheduleList>(&ScheduleList {
                        enabled_only: *enabled_only,
                    })
                    .await?;
                if out.json {
                    json(&list);
                } else {
                    let mut t = table(&[
                        "NAME",
                        "WHEN",
                        "TIMEZONE",
                        "OVERLAP",
                        "OPERATION",
                        "STATE",
                        "NEXT",
                        "REV",
                    ]);
                    for s in &list.schedules {
                        t.add_row(vec![
                            s.name.clone(),
                            s.spec.describe(),
                            s.timezone.clone(),
                            s.overlap.as_str().to_owned(),
                            s.task.operation.to_string(),
                            state(s).to_owned(),
                            opt(s.next_run_at.map(timestamp::format)),
                            s.revision.to_string(),
                        ]);
                    }
                    outln!("{t}");
                }
            }
            ScheduleCommand::Get(a) => {
                let s = client
                    .call::<endpoint::ScheduleGet>(&by(&a.schedule))
                    .await?;
                if out.json {
                    json(&s);
                } else {
                    print_schedule(&s);
                }
            }
            ScheduleCommand::Pause(a) | ScheduleCommand::Resume(a) => {
                let s = match command {
                    ScheduleCommand::Pause(_) => {
                        client
                            .call::<endpoint::SchedulePause>(&by(&a.schedule))
                            .await?
                    }
                    _ => {
                        client
                            .call::<endpoint::ScheduleResume>(&by(&a.schedule))
                            .await?
                    }
                };
                if out.json {
                    json(&s);
                } else {
                    outln!(
                        "schedule {}: {} (next {}, revision {})",
                        s.name,
                        state(&s),
                        opt(s.next_run_at.map(timestamp::format)),
                        s.revision
                    );
                }
            }
            ScheduleCommand::Trigger(a) => {
                let f = client
                    .call::<endpoint::ScheduleTrigger>(&by(&a.schedule))
                    .await?;
                ok = f.error.is_none()
                    && f.results
                        .iter()
                        .all(|r| !matches!(r.submission, Submission::Refused(_)));
                if out.json {
                    json(&f);
                } else {
                    print_firing(&f);
                }
            }
            ScheduleCommand::Delete(a) => {
                let d = client
                    .call::<endpoint::ScheduleDelete>(&by(&a.schedule))
                    .await?;
                if out.json {
                    json(&d);
                } else {
                    outln!("schedule {} deleted (its tasks run on)", d.id);
                }
            }
            ScheduleCommand::History { schedule, limit } => {
                let h = client
                    .call::<endpoint::ScheduleHistory>(&ScheduleByRef {
                        schedule: schedule.clone(),
                        limit: Some(*limit),
                    })
                    .await?;
                if out.json {
                    json(&h);
                } else if h.firings.is_empty() {
                    outln!("schedule {schedule} has not fired yet");
                } else {
                    for f in &h.firings {
                        print_firing(f);
                    }
                }
            }
        }
        Ok::<_, ClientError>(ok)
    }
    .await;
    match result {
        Ok(true) => Outcome::Valid,
        Ok(false) => Outcome::Invalid,
        Err(e) => fail(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn windows_read_as_typed() {
        let w = window("0 22 * * 1-5 for 6h in Europe/Berlin").unwrap();
        assert_eq!(w.cron, "0 22 * * 1-5");
        assert_eq!(w.duration, "6h");
        assert_eq!(w.timezone, "Europe/Berlin");
        let w = window("30 1 * * * for 90m").unwrap();
        assert_eq!((w.duration.as_str(), w.timezone.as_str()), ("90m", ""));
        for bad in ["0 22 * * *", " for 6h", "0 22 * * * for "] {
            assert!(window(bad).is_err(), "{bad}");
        }
    }
}
