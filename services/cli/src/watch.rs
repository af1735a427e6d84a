//! Following a task live: bars on a terminal, a line per change otherwise,
//! from the workers' progress events and the task's record; then the
//! per-stage summary.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use flow_protocol::api::{TaskById, endpoint};
use flow_protocol::task::{TaskEvent, TaskEventKind, TaskRecord};
use flow_protocol::{StepStatus, TaskId, TaskStatus};

use crate::out::outln;
use crate::remote::Output;
use crate::task::counts;
use crate::timeline::Timeline;
use flow_client::{Client, ClientError};

fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// How often `--wait` and `task watch` read the task.
const WATCH_EVERY: Duration = Duration::from_millis(500);

/// How `watch` shows progress: bars on a terminal, one line per change
/// otherwise (logs, CI, pipes).
enum View {
    Lines(Timeline),
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
            View::Lines(Timeline::new(now_ms()))
        }
    }

    /// Shows a step's state as a bar: `key` identifies the step,
    /// `done`/`total` the components, `message` what it is doing.
    fn bar(&mut self, key: String, done: u64, total: u64, message: String) {
        match self {
            View::Lines(_) => {}
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
pub(crate) async fn watch(client: &Client, out: Output, id: TaskId) -> Result<bool, ClientError> {
    use futures::StreamExt;
    let started = Instant::now();
    let mut view = View::new();
    // Live progress from the workers (current action, components done).
    let mut events = client
        .nats()
        .subscribe(flow_protocol::jobs::progress_subject(id))
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
                        let Ok(event) = serde_json::from_slice::<TaskEvent>(&msg.payload) else { continue };
                        if out.json {
                            continue;
                        }
                        if let TaskEventKind::StepProgress { stage, component_type, action, done, failed, total, held, waiting, .. } = event.kind {
                            // A step's end is told once, by its record
                            // ("completed", "failed"), not also as "done".
                            if action == "done" && matches!(view, View::Lines(_)) {
                                continue;
                            }
                            let line = format!(
                                "  stage {stage} {:<10} {action:<40} {done}/{total} done{}",
                                component_type.as_str(),
                                if failed > 0 { format!(", {failed} failed") } else { String::new() },
                            );
                            // Power admission holding commands: say why.
                            let line = match waiting {
                                Some(why) if held > 0 => format!("{line}; {held} held: {why}"),
                                _ => line,
                            };
                            match &mut view {
                                View::Lines(timeline) => timeline.progress(event.at_ms, stage, component_type.as_str(), line),
                                View::Bars(..) => view.bar(format!("stage {stage}/{component_type}"), done as u64, total as u64, action),
                            }
                        }
                    }
                    _ = &mut deadline => break,
                }
            }
        }
        let task = client.call::<endpoint::TaskGet>(&TaskById { id }).await?;
        if !out.json {
            match &mut view {
                View::Lines(timeline) => {
                    for line in timeline.record(&task, now_ms()) {
                        outln!("{line}");
                    }
                }
                View::Bars(..) => {
                    for s in &task.steps {
                        let key = format!("stage {}/{}", s.stage, s.component_type);
                        let (done, _) = counts(s);
                        // Bars take their counts from the workers' live
                        // events while running.
                        if let View::Bars(_, bars) = &view
                            && s.status == StepStatus::Running
                            && bars.contains_key(&key)
                        {
                            continue;
                        }
                        view.bar(
                            key,
                            done as u64,
                            u64::from(s.components),
                            s.status.as_str().to_owned(),
                        );
                    }
                }
            }
        }
        if task.status.is_final() {
            view.finish();
            if out.json {
                outln!(
                    "{}",
                    serde_json::to_string_pretty(&task).unwrap_or_default()
                );
            } else {
                summary(&task, started);
            }
            return Ok(task.status == TaskStatus::Completed);
        }
        if events.is_none() {
            tokio::time::sleep(WATCH_EVERY).await;
        }
    }
}

/// The per-stage summary printed when a watched task ends.
fn summary(task: &TaskRecord, started: Instant) {
    let seconds = |d: time::Duration| format!("{:.1}s", d.as_seconds_f64());
    // Offsets from the task's start, and each step's length.
    let start = |t: Option<time::OffsetDateTime>| match (task.started_at, t) {
        (Some(task_start), Some(t)) => format!("+{}", seconds(t - task_start)),
        _ => String::new(),
    };
    let took = |a: Option<time::OffsetDateTime>, b: Option<time::OffsetDateTime>| match (a, b) {
        (Some(a), Some(b)) => seconds(b - a),
        _ => String::new(),
    };
    outln!();
    outln!("Summary ({:.1}s):", started.elapsed().as_secs_f64());
    let mut t = crate::remote::table(&[
        "STAGE",
        "TYPE",
        "STATUS",
        "COMPONENTS",
        "CALLS",
        "START",
        "TOOK",
        "ERROR",
    ]);
    for s in &task.steps {
        t.add_row(vec![
            s.stage.to_string(),
            s.component_type.to_string(),
            s.status.to_string(),
            s.components.to_string(),
            s.calls.to_string(),
            start(s.started_at),
            took(s.started_at, s.finished_at),
            s.error.clone().unwrap_or_default(),
        ]);
    }
    outln!("{t}");
    outln!(
        "Task {}: {}{}",
        task.id,
        task.status,
        Some(task.message.as_str())
            .filter(|m| !m.is_empty())
            .map(|m| format!(" — {m}"))
            .unwrap_or_default()
    );
}
