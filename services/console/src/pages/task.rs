//! One task: its stages and steps, a bar per step (components done and
//! failed; while it runs, the worker's live progress moves it), each
//! component's attempts and last error, and the rule snapshot that ran.

use std::collections::BTreeMap;

use flow_protocol::status::{ComponentOutcome, StageStatus, StepStatus};
use flow_protocol::task::{StepRecord, TaskRecord};
use maud::{Markup, html};

use super::{Ctx, action_link, badge, json_block, took, when};

/// What a step's bar shows.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Bar {
    /// Components done.
    pub done: usize,
    /// Components failed.
    pub failed: usize,
    /// The step's components.
    pub total: usize,
    /// What it says beside the figures.
    pub label: String,
}

impl Bar {
    /// The bar of a step as recorded (live progress moves it in the
    /// browser between records).
    pub fn of(step: &StepRecord) -> Bar {
        let count = |o| step.results.values().filter(|r| r.status == o).count();
        let label = match step.status {
            StepStatus::Running => "running".to_owned(),
            s => s.as_str().to_owned(),
        };
        Bar {
            done: count(ComponentOutcome::Done),
            failed: count(ComponentOutcome::Failed),
            total: step.components as usize,
            label,
        }
    }

    fn percent(part: usize, total: usize) -> String {
        if total == 0 {
            return "0%".into();
        }
        format!("{:.1}%", part as f64 * 100.0 / total as f64)
    }

    fn render(&self, step: &StepRecord) -> Markup {
        html! {
            div.bar id={ "bar-" (step.step_index) }
                data-step=(step.step_index) data-status=(step.status.as_str())
                data-done=(self.done) data-failed=(self.failed) data-total=(self.total) {
                span.done style={ "width:" (Bar::percent(self.done, self.total)) } {}
                span.failed style={ "width:" (Bar::percent(self.failed, self.total)) } {}
                span.text { (self.label) " · " (self.done) "/" (self.total)
                    @if self.failed > 0 { " · " (self.failed) " failed" } }
            }
        }
    }
}

/// The task page's content.
pub fn render(ctx: &Ctx, task: &TaskRecord) -> Markup {
    let mut stages: BTreeMap<u32, Vec<&StepRecord>> = BTreeMap::new();
    for s in &task.steps {
        stages.entry(s.stage).or_default().push(s);
    }
    html! {
        section.toolbar {
            h1 { (task.operation.as_str()) " on " a href={ "/tasks?rack=" (super::query_value(&task.rack)) } { (task.rack) } " " (badge(task.status.as_str())) }
            @if task.status.is_open() {
                (action_link(ctx, &format!("/tasks/{}/cancel", task.id), "Cancel task"))
            }
        }
        dl.facts data-task=(task.id) data-status=(task.status.as_str()) {
            dt { "Task" } dd { code { (task.id) } }
            dt { "Rule" } dd { (task.rule_name) @if let Some(r) = task.rule_revision { " (revision " (r) ")" } }
            dt { "Submitted" } dd { (when(Some(task.created_at))) }
            dt { "Started" } dd { (when(task.started_at)) }
            dt { "Ended" } dd { (when(task.finished_at)) }
            dt { "Took" } dd { (took(task.started_at, task.finished_at)) }
            @if !task.description.is_empty() { dt { "For" } dd { (task.description) } }
            @if !task.message.is_empty() { dt { "Message" } dd.message { (task.message) } }
            @if let Some(run) = task.run_id { dt { "Rollout" } dd { a href={ "/runs/" (run) } { (run) } } }
            @if let Some(s) = task.schedule_id { dt { "Schedule" } dd { a href={ "/schedules/" (s) } { (s) } } }
        }
        @for (stage, steps) in &stages {
            @let status = StageStatus::of(steps.iter().map(|s| s.status));
            section.stage data-stage=(stage) {
                h2 { "Stage " (stage) " " (badge(status.as_str())) }
                @for step in steps {
                    (render_step(step))
                }
            }
        }
        details.rule {
            summary { "Rule snapshot that ran" }
            (json_block(&task.rule))
        }
    }
}

fn render_step(step: &StepRecord) -> Markup {
    let bar = Bar::of(step);
    html! {
        div.step data-step=(step.step_index) {
            div.step-head {
                span.kind { (step.component_type.as_str()) }
                (badge(step.status.as_str()))
                span.took { (took(step.started_at, step.finished_at)) }
                span.calls { (step.calls) " calls" }
            }
            (bar.render(step))
            @if let Some(e) = &step.error { p.error { (e) } }
            @if !step.results.is_empty() {
                details.components {
                    summary { "Components (" (step.results.len()) ")" }
                    table {
                        thead { tr { th { "Component" } th { "Outcome" } th { "Attempts" } th { "Calls" } th { "Result" } th { "Last error" } } }
                        tbody {
                            @for (name, r) in &step.results {
                                tr data-component=(name) {
                                    td { (name) }
                                    td { (badge(r.status.as_str())) }
                                    td.attempts {
                                        @for (i, a) in r.actions.iter().enumerate() {
                                            @if i > 0 { br; }
                                            (a.summary())
                                        }
                                    }
                                    td { (r.calls) }
                                    td { (r.result) }
                                    td.error { (r.error.as_deref().unwrap_or("")) }
                                }
                            }
                        }
                    }
                }
            }
        }
    }
}
