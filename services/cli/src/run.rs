//! `flow run …`: phased rollouts through `flow.api` (`run.*`). The
//! operation is built as `flow power|firmware|decommission` builds it
//! ([`crate::schedule::task_request`]); `watch` follows a run with a bar
//! per phase (redrawn on a terminal, a line per change when piped).

use std::io::IsTerminal;
use std::time::Duration;

use flow_config::Settings;
use flow_protocol::api::endpoint;
use flow_protocol::run::{
    Gate, GateKind, GateScope, Ordering, PhaseCounts, PhasePolicy, RetryPolicy, RunAdvance,
    RunByRef, RunCreate, RunList, RunRecord, RunStatus, RunTargets,
};
use flow_protocol::task::timestamp;

use crate::Outcome;
use crate::args::{GateScopeArg, RunCommand, RunCreateArgs};
use crate::out::outln;
use crate::remote::{Output, fail, table};
use crate::schedule::{json, task_request, window};
use crate::task::{bad, opt};
use flow_client::{Client, ClientError};

/// How often `watch` looks.
const WATCH_POLL: Duration = Duration::from_secs(1);

fn list<T: std::str::FromStr>(flag: &str, text: &str) -> Result<Vec<T>, ClientError> {
    text.trim_end_matches('%')
        .split(',')
        .map(|p| {
            p.trim().trim_end_matches('%').parse().map_err(|_| {
                bad(format!(
                    "{flag} {text:?}: use numbers separated by commas, e.g. 1,10,50,100%"
                ))
            })
        })
        .collect()
}

fn phases(a: &RunCreateArgs) -> Result<PhasePolicy, ClientError> {
    match (&a.phases.phases, &a.phases.phase_counts, a.phases.equal) {
        (Some(p), _, _) => Ok(PhasePolicy::Percentages(list("--phases", p)?)),
        (_, Some(c), _) => Ok(PhasePolicy::Counts(list("--phase-counts", c)?)),
        (_, _, Some(k)) => Ok(PhasePolicy::Equal(k)),
        _ => Err(bad(
            "give one of --phases, --phase-counts, --equal".to_owned()
        )),
    }
}

/// `failure-rate=5%` or `failure-count=3`.
fn gate(text: &str, scope: GateScope) -> Result<Gate, ClientError> {
    let usage = || {
        bad(format!(
            "--gate {text:?}: use failure-rate=<1-100>% or failure-count=<n>"
        ))
    };
    let (kind, value) = text.split_once('=').ok_or_else(usage)?;
    let n: u32 = value.trim_end_matches('%').parse().map_err(|_| usage())?;
    let kind = match kind {
        "failure-rate" => GateKind::FailureRate { percent: n },
        "failure-count" => GateKind::FailureCount { count: n },
        _ => return Err(usage()),
    };
    Ok(Gate { kind, scope })
}

/// `random[:seed]`, `row-by-row`, `round-robin-rows`.
fn ordering(text: &str) -> Result<Ordering, ClientError> {
    match text.split_once(':') {
        Some(("random", seed)) => Ok(Ordering::Random {
            seed: Some(seed.parse().map_err(|_| {
                bad(format!(
                    "--order {text:?}: the seed is a number (random:42)"
                ))
            })?),
        }),
        None if text == "random" => Ok(Ordering::Random { seed: None }),
        None if text == "row-by-row" => Ok(Ordering::RowByRow),
        None if text == "round-robin-rows" => Ok(Ordering::RoundRobinRows),
        _ => Err(bad(format!(
            "--order {text:?}: use random[:seed], row-by-row or round-robin-rows"
        ))),
    }
}

fn seconds(flag: &str, text: &str) -> Result<u64, ClientError> {
    flow_rules::duration::parse_go(text)
        .ok()
        .and_then(|d| d.non_negative())
        .filter(|d| d.as_secs() >= 1)
        .map(|d| d.as_secs())
        .ok_or_else(|| bad(format!("{flag} {text:?}: use a Go duration of at least 1s")))
}

fn create_request(a: &RunCreateArgs) -> Result<RunCreate, ClientError> {
    let scope = match a.gate_scope {
        GateScopeArg::Phase => GateScope::Phase,
        GateScopeArg::Run => GateScope::Run,
    };
    Ok(RunCreate {
        name: a.name.clone(),
        description: a.description.clone().unwrap_or_default(),
        task: task_request(&a.operation, "a run")?,
        phases: phases(a)?,
        max_concurrent: a.max_concurrent,
        gates: a
            .gates
            .iter()
            .map(|g| gate(g, scope))
            .collect::<Result<_, _>>()?,
        auto_advance: a.auto_advance,
        ordering: ordering(&a.order)?,
        windows: a
            .windows
            .iter()
            .map(|w| window(w))
            .collect::<Result<_, _>>()?,
        timezone: a.timezone.clone(),
        retry: RetryPolicy {
            timeout_seconds: seconds("--retry-timeout", &a.retry_timeout)?,
            initial_seconds: seconds("--retry-initial", &a.retry_initial)?,
            max_seconds: seconds("--retry-max", &a.retry_max)?,
        },
    })
}

fn state(r: &RunRecord) -> String {
    if r.status == RunStatus::Paused {
        format!("paused ({})", r.reason)
    } else {
        r.status.to_string()
    }
}

/// `phase 2/3 [#####---------------]  4/8 done, 1 failed, 2 running`.
fn bar(index: usize, count: usize, p: &PhaseCounts) -> String {
    const WIDTH: usize = 20;
    let done = p.completed + p.failed + p.skipped;
    let filled = (done * WIDTH).checked_div(p.planned).unwrap_or(0);
    format!(
        "phase {}/{} [{}{}] {:>4}/{:<4} done, {} failed, {} running",
        index + 1,
        count,
        "#".repeat(filled),
        "-".repeat(WIDTH - filled),
        done,
        p.planned,
        p.failed,
        p.running
    )
}

fn view(r: &RunRecord) -> Vec<String> {
    let mut lines = vec![format!(
        "run {} — {}, phase {} of {}",
        r.name,
        state(r),
        r.phase,
        r.phases.len()
    )];
    for (i, p) in r.phases.iter().enumerate() {
        lines.push(format!("  {}", bar(i, r.phases.len(), p)));
    }
    for g in r.gate_figures() {
        lines.push(format!("  {g}"));
    }
    if let Some(g) = &r.gate {
        lines.push(format!(
            "  tripped {}: {}",
            timestamp::format(g.at),
            g.figure
        ));
    }
    lines
}

fn print_run(r: &RunRecord) {
    outln!("run {} ({})", r.name, r.id);
    if !r.description.is_empty() {
        outln!("  about:      {}", r.description);
    }
    let mut target: Vec<String> = r.task.racks.iter().map(|x| x.0.clone()).collect();
    target.extend(r.task.labels.iter().map(|(k, v)| format!("label {k}={v}")));
    outln!(
        "  operation:  {} on {}",
        r.task.operation,
        target.join(", ")
    );
    outln!(
        "  order:      {}",
        match &r.ordering {
            Ordering::Random { seed } => format!("random (seed {})", opt(*seed)),
            Ordering::RowByRow => "row by row".to_owned(),
            Ordering::RoundRobinRows => "round robin over rows".to_owned(),
        }
    );
    outln!(
        "  concurrent: at most {}; {}",
        r.max_concurrent,
        if r.auto_advance {
            "advances by itself"
        } else {
            "waits at each phase gate"
        }
    );
    for w in &r.windows {
        outln!("  window:     {w} ({})", r.timezone);
    }
    for line in view(r) {
        outln!("{line}");
    }
}

/// `flow run …`.
pub async fn run(settings: &Settings, out: Output, command: &RunCommand) -> Outcome {
    let result = async {
        let create = match command {
            RunCommand::Create(a) => Some(create_request(a)?),
            _ => None,
        };
        let client = crate::remote::connect(settings).await?;
        let by = |r: &String| RunByRef { run: r.clone() };
        let show = |r: &RunRecord| {
            if out.json {
                json(r);
            } else {
                print_run(r);
            }
        };
        match command {
            RunCommand::Create(a) if crate::schedule::wants_plan(&a.operation) => {
                let body = create.ok_or_else(|| bad("no request".to_owned()))?;
                let plan = client.call::<endpoint::RunPlan>(&body).await?;
                if out.json {
                    json(&plan);
                } else {
                    for line in crate::plan::render_run(&plan) {
                        outln!("{line}");
                    }
                }
            }
            RunCommand::Create(_) => {
                let body = create.ok_or_else(|| bad("no request".to_owned()))?;
                show(&client.call::<endpoint::RunCreate>(&body).await?);
            }
            RunCommand::Show(a) => show(&client.call::<endpoint::RunGet>(&by(&a.run)).await?),
            RunCommand::Pause(a) => show(&client.call::<endpoint::RunPause>(&by(&a.run)).await?),
            RunCommand::Resume(a) => show(&client.call::<endpoint::RunResume>(&by(&a.run)).await?),
            RunCommand::Cancel(a) => show(&client.call::<endpoint::RunCancel>(&by(&a.run)).await?),
            RunCommand::Advance { run, expect_phase } => show(
                &client
                    .call::<endpoint::RunAdvance>(&RunAdvance {
                        run: run.clone(),
                        expect_phase: *expect_phase,
                    })
                    .await?,
            ),
            RunCommand::List { limit } => {
                let list = client
                    .call::<endpoint::RunList>(&RunList {
                        limit: Some(*limit),
                    })
                    .await?;
                if out.json {
                    json(&list);
                } else {
                    let mut t = table(&[
                        "NAME",
                        "OPERATION",
                        "STATUS",
                        "PHASE",
                        "DONE",
                        "FAILED",
                        "CREATED",
                    ]);
                    for r in &list.runs {
                        let done: usize = r.phases.iter().map(|p| p.completed).sum();
                        let failed: usize = r.phases.iter().map(|p| p.failed).sum();
                        let planned: usize = r.phases.iter().map(|p| p.planned).sum();
                        t.add_row(vec![
                            r.name.clone(),
                            r.task.operation.to_string(),
                            state(r),
                            format!("{}/{}", r.phase, r.phases.len()),
                            format!("{done}/{planned}"),
                            failed.to_string(),
                            timestamp::format(r.created_at),
                        ]);
                    }
                    outln!("{t}");
                }
            }
            RunCommand::Targets { run, phase } => {
                let reply = client
                    .call::<endpoint::RunTargets>(&RunTargets {
                        run: run.clone(),
                        phase: *phase,
                    })
                    .await?;
                if out.json {
                    json(&reply);
                } else {
                    let mut t =
                        table(&["PHASE", "#", "RACK", "STATUS", "TASK", "TRIES", "MESSAGE"]);
                    for x in &reply.targets {
                        t.add_row(vec![
                            x.phase.to_string(),
                            x.seq.to_string(),
                            x.rack.clone(),
                            x.status.to_string(),
                            opt(x.task_id),
                            x.attempts.to_string(),
                            x.message.clone(),
                        ]);
                    }
                    outln!("{t}");
                }
            }
            RunCommand::Watch(a) => return watch(&client, out, &a.run).await,
        }
        Ok::<_, ClientError>(true)
    }
    .await;
    match result {
        Ok(true) => Outcome::Valid,
        Ok(false) => Outcome::Invalid,
        Err(e) => fail(e),
    }
}

/// Follows a run until it ends: true when it completed.
async fn watch(client: &Client, out: Output, run: &str) -> Result<bool, ClientError> {
    let redraw = !out.json && std::io::stdout().is_terminal();
    let mut shown: Vec<String> = Vec::new();
    loop {
        let r = client
            .call::<endpoint::RunGet>(&RunByRef {
                run: run.to_owned(),
            })
            .await?;
        let lines = view(&r);
        if lines != shown {
            if out.json {
                outln!("{}", serde_json::to_string(&r).unwrap_or_default());
            } else if redraw && !shown.is_empty() {
                // Up over what was drawn, then draw again.
                outln!("\x1b[{}A\x1b[J{}", shown.len(), lines.join("\n"));
            } else {
                for line in &lines {
                    outln!("{line}");
                }
            }
            shown = lines;
        }
        if r.status.is_final() {
            return Ok(r.status == RunStatus::Completed);
        }
        tokio::time::sleep(WATCH_POLL).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flags_read_as_typed() {
        assert_eq!(
            list::<u32>("--phases", "1,10,50,100%").unwrap(),
            [1, 10, 50, 100]
        );
        assert_eq!(list::<usize>("--phase-counts", "2,20").unwrap(), [2, 20]);
        assert!(list::<u32>("--phases", "1,x").is_err());
        assert_eq!(
            gate("failure-rate=5%", GateScope::Phase).unwrap().kind,
            GateKind::FailureRate { percent: 5 }
        );
        assert_eq!(
            gate("failure-count=3", GateScope::Run).unwrap(),
            Gate {
                kind: GateKind::FailureCount { count: 3 },
                scope: GateScope::Run
            }
        );
        for bad in ["failure-rate", "rate=5%", "failure-count=x"] {
            assert!(gate(bad, GateScope::Phase).is_err(), "{bad}");
        }
        assert_eq!(
            ordering("random:42").unwrap(),
            Ordering::Random { seed: Some(42) }
        );
        assert_eq!(ordering("row-by-row").unwrap(), Ordering::RowByRow);
        assert!(ordering("zigzag").is_err());
        let p = PhaseCounts {
            planned: 8,
            completed: 3,
            failed: 1,
            running: 2,
            ..PhaseCounts::default()
        };
        assert_eq!(
            bar(1, 3, &p),
            "phase 2/3 [##########----------]    4/8    done, 1 failed, 2 running"
        );
    }
}
