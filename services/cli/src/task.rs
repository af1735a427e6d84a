//! Operations on racks and tasks: `flow power|firmware|decommission` submit
//! through `flow.api` (`task.submit`); `flow task` lists, shows, follows and
//! cancels.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use flow_config::Settings;
use flow_protocol::api::{TaskCancelReply, TaskSubmitReply, endpoint};
use flow_rules::{ComponentType, OperationCode};
use serde_json::{Value, json};

use crate::Outcome;
use crate::args::{FirmwareArgs, PowerArgs, TargetArgs, TaskCommand};
use crate::client::{Client, ClientError};
use crate::remote::{Output, fail};

/// How often `--wait` and `task watch` read the task.
const WATCH_EVERY: Duration = Duration::from_millis(500);

fn bad(message: String) -> ClientError {
    ClientError::Api(flow_protocol::api::ApiError::new(
        flow_protocol::api::ErrorCode::BadRequest,
        message,
    ))
}

fn power_code(action: &str) -> Result<OperationCode, ClientError> {
    let code = match action {
        "on" => "power_on",
        "off" => "power_off",
        "force-on" => "force_power_on",
        "force-off" => "force_power_off",
        "restart" => "restart",
        "force-restart" => "force_restart",
        "warm-reset" => "warm_reset",
        "cold-reset" => "cold_reset",
        other => {
            return Err(bad(format!(
                "unknown power action {other:?}; use on, off, force-on, force-off, restart, force-restart, warm-reset or cold-reset"
            )));
        }
    };
    code.parse()
        .map_err(|e: flow_rules::InvalidOperation| bad(e.to_string()))
}

fn request(
    target: &TargetArgs,
    operation: OperationCode,
    firmware: Value,
) -> Result<Value, ClientError> {
    let types: Vec<ComponentType> = target
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
        .unwrap_or_else(|| format!("cli-{}", flow_protocol::TaskId::new()));
    let mut body = json!({
        "request_id": request_id, "racks": target.racks, "component_types": types,
        "operation": operation, "firmware": firmware,
    });
    if let Some(rule) = &target.rule_id {
        body["rule_id"] = json!(rule);
    }
    if target.queue {
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
        body["conflict"] =
            json!({"strategy": "queue", "timeout_seconds": timeout.as_secs().max(1)});
    }
    Ok(body)
}

async fn submit(settings: &Settings, out: Output, target: &TargetArgs, body: Value) -> Outcome {
    let result = async {
        let client = Client::connect(settings).await?;
        let reply: TaskSubmitReply = client.call(endpoint::TASK_SUBMIT, &body).await?;
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
        println!(
            "{}",
            serde_json::to_string_pretty(&reply).unwrap_or_default()
        );
    }
    for r in &reply.results {
        match (&r.task_id, &r.error) {
            (Some(id), _) => {
                if !out.json {
                    let note = if r.duplicate {
                        " (already submitted)"
                    } else {
                        ""
                    };
                    println!("{}: task {id}{note}", r.rack);
                }
                tasks.push(id.to_string());
            }
            (None, Some(e)) => {
                eprintln!("{}: refused: {e}", r.rack);
                for d in &e.details {
                    eprintln!("  {d}");
                }
                outcome = Outcome::Invalid;
            }
            (None, None) => {}
        }
    }
    if target.wait {
        for id in tasks {
            match watch(&client, out, &id).await {
                Ok(true) => {}
                Ok(false) => outcome = Outcome::Invalid,
                Err(e) => return fail(e),
            }
        }
    }
    outcome
}

/// `flow power <action>`.
pub async fn power(settings: &Settings, out: Output, args: &PowerArgs) -> Outcome {
    match power_code(&args.action).and_then(|op| request(&args.target, op, json!({}))) {
        Ok(body) => submit(settings, out, &args.target, body).await,
        Err(e) => fail(e),
    }
}

/// `flow firmware <action> --image type=uri@version`.
pub async fn firmware(settings: &Settings, out: Output, args: &FirmwareArgs) -> Outcome {
    let build = || -> Result<Value, ClientError> {
        let op: OperationCode = args
            .action
            .parse()
            .ok()
            .filter(|c: &OperationCode| {
                c.operation_type() == flow_rules::OperationType::FirmwareControl
            })
            .ok_or_else(|| {
                bad(format!(
                    "unknown firmware action {:?}; use upgrade, downgrade or rollback",
                    args.action
                ))
            })?;
        let mut images = BTreeMap::new();
        for spec in &args.images {
            let (t, rest) = spec
                .split_once('=')
                .ok_or_else(|| bad(format!("--image {spec:?}: use <type>=<uri>@<version>")))?;
            let t: ComponentType = t
                .parse()
                .map_err(|e: flow_rules::UnknownComponentType| bad(format!("--image: {e}")))?;
            let (uri, version) = match rest.rsplit_once('@') {
                Some((u, v)) => (u, Some(v)),
                None => (rest, None),
            };
            images.insert(t, json!({"image_uri": uri, "version": version}));
        }
        request(&args.target, op, json!(images))
    };
    match build() {
        Ok(body) => submit(settings, out, &args.target, body).await,
        Err(e) => fail(e),
    }
}

/// `flow decommission`.
pub async fn decommission(settings: &Settings, out: Output, args: &TargetArgs) -> Outcome {
    match request(args, OperationCode::Decommission, json!({})) {
        Ok(body) => submit(settings, out, args, body).await,
        Err(e) => fail(e),
    }
}

/// `flow task …`.
pub async fn task(settings: &Settings, out: Output, command: &TaskCommand) -> Outcome {
    let result = async {
        let client = Client::connect(settings).await?;
        match command {
            TaskCommand::List { limit } => {
                let list: Value = client
                    .call(endpoint::TASK_LIST, &json!({"limit": limit}))
                    .await?;
                if out.json {
                    println!(
                        "{}",
                        serde_json::to_string_pretty(&list).unwrap_or_default()
                    );
                } else {
                    let mut t = comfy_table::Table::new();
                    t.load_preset(comfy_table::presets::UTF8_FULL_CONDENSED)
                        .set_header(vec![
                            "ID",
                            "RACK",
                            "OPERATION",
                            "STATUS",
                            "STAGE",
                            "CREATED",
                            "MESSAGE",
                        ]);
                    for task in list.as_array().cloned().unwrap_or_default() {
                        t.add_row(vec![
                            str_of(&task["id"]),
                            str_of(&task["rack"]),
                            str_of(&task["operation"]),
                            str_of(&task["status"]),
                            str_of(&task["current_stage"]),
                            str_of(&task["created_at"]),
                            str_of(&task["message"]),
                        ]);
                    }
                    println!("{t}");
                }
                Ok(true)
            }
            TaskCommand::Show { id } => {
                let task: Value = client.call(endpoint::TASK_GET, &json!({"id": id})).await?;
                if out.json {
                    println!(
                        "{}",
                        serde_json::to_string_pretty(&task).unwrap_or_default()
                    );
                } else {
                    print_task(&task, true);
                }
                Ok(task["status"] == "completed")
            }
            TaskCommand::Watch { id } => watch(&client, out, id).await,
            TaskCommand::Cancel { id } => {
                let reply: TaskCancelReply = client
                    .call(endpoint::TASK_CANCEL, &json!({"id": id}))
                    .await?;
                if out.json {
                    println!("{}", json!({"cancelling": reply.cancelling}));
                } else if reply.cancelling {
                    println!("task {id}: cancelling at the next action boundary");
                } else {
                    println!("task {id} has already finished");
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

fn str_of(v: &Value) -> String {
    match v {
        Value::Null => String::new(),
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

fn step_line(s: &Value) -> String {
    let results = s["results"].as_object();
    let done = results.map_or(0, |r| r.values().filter(|c| c["status"] == "done").count());
    let failed = results.map_or(0, |r| {
        r.values().filter(|c| c["status"] == "failed").count()
    });
    let total = s["components"].as_i64().unwrap_or(0);
    let error = s["error"]
        .as_str()
        .map(|e| format!(" — {e}"))
        .unwrap_or_default();
    format!(
        "  stage {} {:<10} {:<9} {done}/{total} done{}{error}",
        str_of(&s["stage"]),
        str_of(&s["component_type"]),
        str_of(&s["status"]),
        if failed > 0 {
            format!(", {failed} failed")
        } else {
            String::new()
        },
    )
}

fn print_task(task: &Value, full: bool) {
    println!("Task:      {}", str_of(&task["id"]));
    println!("Rack:      {}", str_of(&task["rack"]));
    println!(
        "Operation: {}/{}",
        str_of(&task["operation_type"]),
        str_of(&task["operation"])
    );
    println!(
        "Rule:      {} ({}{})",
        str_of(&task["rule_name"]),
        str_of(&task["rule_source"]),
        task["rule_revision"]
            .as_i64()
            .map(|r| format!(", revision {r}"))
            .unwrap_or_default()
    );
    println!(
        "Status:    {}{}",
        str_of(&task["status"]),
        task["message"]
            .as_str()
            .filter(|m| !m.is_empty())
            .map(|m| format!(" — {m}"))
            .unwrap_or_default()
    );
    for s in task["steps"].as_array().cloned().unwrap_or_default() {
        println!("{}", step_line(&s));
        if full {
            for (name, c) in s["results"].as_object().cloned().unwrap_or_default() {
                let error = c["error"]
                    .as_str()
                    .map(|e| format!(" ({e})"))
                    .unwrap_or_default();
                println!(
                    "      {name:<16} {:<8} {}{error}",
                    str_of(&c["status"]),
                    str_of(&c["result"])
                );
            }
        }
    }
    if full {
        println!("Rule snapshot:");
        println!(
            "{}",
            serde_json::to_string_pretty(&task["rule"]).unwrap_or_default()
        );
    }
}

/// How `watch` shows progress: bars on a terminal, one line per change
/// otherwise (logs, CI, pipes).
enum View {
    Lines(BTreeMap<String, String>),
    Bars(
        indicatif::MultiProgress,
        BTreeMap<String, indicatif::ProgressBar>,
    ),
}

impl View {
    fn new() -> View {
        use std::io::IsTerminal;
        if std::io::stdout().is_terminal() {
            View::Bars(indicatif::MultiProgress::new(), BTreeMap::new())
        } else {
            View::Lines(BTreeMap::new())
        }
    }

    /// Shows a step's state: `key` identifies the step, `line` is the text
    /// form, `done`/`total` the components, `message` what it is doing.
    fn step(
        &mut self,
        started: Instant,
        key: String,
        line: String,
        done: u64,
        total: u64,
        message: String,
    ) {
        match self {
            View::Lines(last) => {
                if last.get(&key) != Some(&line) {
                    println!("[{:>6.1}s]{line}", started.elapsed().as_secs_f64());
                    last.insert(key, line);
                }
            }
            View::Bars(multi, bars) => {
                let bar = bars.entry(key.clone()).or_insert_with(|| {
                    let bar = multi.add(indicatif::ProgressBar::new(total));
                    bar.set_style(
                        indicatif::ProgressStyle::with_template(
                            "{prefix:<22} [{bar:30}] {pos}/{len} {elapsed:>4} {msg}",
                        )
                        .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar())
                        .progress_chars("=> "),
                    );
                    bar.set_prefix(key.replace('/', " "));
                    bar
                });
                bar.set_length(total);
                bar.set_position(done);
                bar.set_message(message);
            }
        }
    }

    fn finish(&mut self) {
        if let View::Bars(_, bars) = self {
            for bar in bars.values() {
                bar.finish();
            }
        }
    }
}

/// Follows a task until it finishes: one line per step change, then the
/// per-stage summary. Returns whether it completed.
async fn watch(client: &Client, out: Output, id: &str) -> Result<bool, ClientError> {
    use futures::StreamExt;
    let started = Instant::now();
    let mut view = View::new();
    // Live progress from the workers (current action, components done).
    let mut events = client
        .nats()
        .subscribe(flow_protocol::jobs::event_subject(
            id.parse()
                .map_err(|_| bad(format!("{id:?} is not a task ID")))?,
        ))
        .await
        .ok();
    loop {
        if let Some(sub) = events.as_mut() {
            let deadline = tokio::time::sleep(WATCH_EVERY);
            tokio::pin!(deadline);
            loop {
                tokio::select! {
                    // Cancel-safe: a subscription message not yet yielded stays queued.
                    msg = sub.next() => {
                        let Some(msg) = msg else { break };
                        let Ok(e) = serde_json::from_slice::<Value>(&msg.payload) else { continue };
                        if e["kind"] == "step_progress" && !out.json {
                            let step_key = format!("stage {}/{}", str_of(&e["stage"]), str_of(&e["component_type"]));
                            let key = if matches!(view, View::Lines(_)) { format!("progress/{step_key}") } else { step_key };
                            let line = format!(
                                "  stage {} {:<10} {:<40} {}/{} done{}",
                                str_of(&e["stage"]),
                                str_of(&e["component_type"]),
                                str_of(&e["action"]),
                                str_of(&e["done"]),
                                str_of(&e["total"]),
                                if e["failed"].as_u64().unwrap_or(0) > 0 { format!(", {} failed", str_of(&e["failed"])) } else { String::new() },
                            );
                            let (done, total) = (e["done"].as_u64().unwrap_or(0), e["total"].as_u64().unwrap_or(0));
                            view.step(started, key, line, done, total, str_of(&e["action"]));
                        }
                    }
                    _ = &mut deadline => break,
                }
            }
        }
        let task: Value = client.call(endpoint::TASK_GET, &json!({"id": id})).await?;
        let status = str_of(&task["status"]);
        if !out.json {
            for s in task["steps"].as_array().cloned().unwrap_or_default() {
                let key = format!(
                    "stage {}/{}",
                    str_of(&s["stage"]),
                    str_of(&s["component_type"])
                );
                let done = s["results"]
                    .as_object()
                    .map_or(0, |r| r.values().filter(|c| c["status"] == "done").count());
                let total = s["components"].as_u64().unwrap_or(0);
                let status = str_of(&s["status"]);
                // Bars take their counts from the workers' live events while running.
                if let View::Bars(_, bars) = &view
                    && status == "running"
                    && bars.contains_key(&key)
                {
                    continue;
                }
                view.step(started, key, step_line(&s), done as u64, total, status);
            }
        }
        if ["completed", "failed", "terminated"].contains(&status.as_str()) {
            view.finish();
            if out.json {
                println!(
                    "{}",
                    serde_json::to_string_pretty(&task).unwrap_or_default()
                );
            } else {
                println!();
                println!("Summary ({:.1}s):", started.elapsed().as_secs_f64());
                let mut t = comfy_table::Table::new();
                t.load_preset(comfy_table::presets::UTF8_FULL_CONDENSED)
                    .set_header(vec![
                        "STAGE",
                        "TYPE",
                        "STATUS",
                        "COMPONENTS",
                        "CALLS",
                        "STARTED",
                        "FINISHED",
                        "ERROR",
                    ]);
                for s in task["steps"].as_array().cloned().unwrap_or_default() {
                    t.add_row(vec![
                        str_of(&s["stage"]),
                        str_of(&s["component_type"]),
                        str_of(&s["status"]),
                        str_of(&s["components"]),
                        str_of(&s["calls"]),
                        str_of(&s["started_at"]),
                        str_of(&s["finished_at"]),
                        str_of(&s["error"]),
                    ]);
                }
                println!("{t}");
                println!(
                    "Task {id}: {status}{}",
                    task["message"]
                        .as_str()
                        .filter(|m| !m.is_empty())
                        .map(|m| format!(" — {m}"))
                        .unwrap_or_default()
                );
            }
            return Ok(status == "completed");
        }
        if events.is_none() {
            tokio::time::sleep(WATCH_EVERY).await;
        }
    }
}

/// `flow status`: stream depths, consumer lag and redeliveries, pull
/// requests waiting (idle workers), and tasks by status.
pub async fn status(settings: &Settings, out: Output) -> Outcome {
    use flow_protocol::jobs::{
        CONSUMER_SCHEDULER, CONSUMER_SUBMIT, CONSUMER_WORKERS, STREAM_EVENTS, STREAM_JOBS,
        STREAM_PARKED, STREAM_RESULTS, STREAM_TASKS,
    };
    let result = async {
        let client = Client::connect(settings).await?;
        let js = async_nats::jetstream::new(client.nats().clone());
        let mut streams = Vec::new();
        for (name, consumer) in [
            (STREAM_TASKS, Some(CONSUMER_SUBMIT)),
            (STREAM_JOBS, Some(CONSUMER_WORKERS)),
            (STREAM_RESULTS, Some(CONSUMER_SCHEDULER)),
            (STREAM_EVENTS, None),
            (STREAM_PARKED, None),
        ] {
            let mut entry = json!({"stream": name});
            match js.get_stream(name).await {
                Ok(mut stream) => {
                    if let Ok(info) = stream.info().await {
                        entry["messages"] = json!(info.state.messages);
                        entry["bytes"] = json!(info.state.bytes);
                    }
                    if let Some(c) = consumer
                        && let Ok(mut consumer) = stream
                            .get_consumer::<async_nats::jetstream::consumer::pull::Config>(c)
                            .await
                        && let Ok(info) = consumer.info().await
                    {
                        entry["consumer"] = json!(c);
                        entry["pending"] = json!(info.num_pending);
                        entry["in_flight"] = json!(info.num_ack_pending);
                        entry["redelivered"] = json!(info.num_redelivered);
                        entry["waiting_pulls"] = json!(info.num_waiting);
                    }
                }
                Err(_) => entry["missing"] = json!(true),
            }
            streams.push(entry);
        }
        let tasks: Value = client.call(endpoint::TASK_COUNTS, &json!({})).await?;
        let parked = streams
            .iter()
            .find(|s| s["stream"] == STREAM_PARKED)
            .and_then(|s| s["messages"].as_u64())
            .unwrap_or(0);
        Ok::<_, ClientError>(json!({"streams": streams, "tasks": tasks, "parked": parked}))
    }
    .await;
    match result {
        Ok(v) if out.json => {
            println!("{}", serde_json::to_string_pretty(&v).unwrap_or_default());
            Outcome::Valid
        }
        Ok(v) => {
            let mut t = comfy_table::Table::new();
            t.load_preset(comfy_table::presets::UTF8_FULL_CONDENSED)
                .set_header(vec![
                    "STREAM",
                    "MESSAGES",
                    "CONSUMER",
                    "PENDING",
                    "IN FLIGHT",
                    "REDELIVERED",
                    "WAITING PULLS",
                ]);
            for s in v["streams"].as_array().cloned().unwrap_or_default() {
                if s["missing"] == true {
                    t.add_row(vec![str_of(&s["stream"]), "missing".to_owned()]);
                    continue;
                }
                t.add_row(vec![
                    str_of(&s["stream"]),
                    str_of(&s["messages"]),
                    str_of(&s["consumer"]),
                    str_of(&s["pending"]),
                    str_of(&s["in_flight"]),
                    str_of(&s["redelivered"]),
                    str_of(&s["waiting_pulls"]),
                ]);
            }
            println!("{t}");
            let counts: Vec<String> = v["tasks"]
                .as_object()
                .map(|m| m.iter().map(|(k, n)| format!("{k} {n}")).collect())
                .unwrap_or_default();
            println!(
                "Tasks: {}",
                if counts.is_empty() {
                    "none".to_owned()
                } else {
                    counts.join(", ")
                }
            );
            if v["parked"].as_u64().unwrap_or(0) > 0 {
                println!(
                    "Parked: {} refused messages kept on {STREAM_PARKED} (headers say where from and why; `nats stream view {STREAM_PARKED}`)",
                    v["parked"]
                );
            }
            println!("(waiting pulls ≈ idle worker slots; in flight = jobs a worker holds)");
            Outcome::Valid
        }
        Err(e) => fail(e),
    }
}
