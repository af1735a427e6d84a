//! Phased rollouts: each run's phases with their outcome counts, each
//! gate's figure against its threshold, why it is paused, its targets, and
//! pause / resume / advance / cancel for operators.

use flow_protocol::run::{RunReason, RunRecord, RunStatus, RunTargetRecord};
use maud::{Markup, html};

use super::{Ctx, action_link, badge, when};

/// The run list's content.
pub fn list(runs: &[RunRecord]) -> Markup {
    html! {
        section.toolbar { h1 { "Rollouts" } p.summary { (runs.len()) " most recent" } }
        @if runs.is_empty() { p.empty { "No rollout yet (flow run create)." } }
        table.runs {
            thead { tr { th { "Run" } th { "Status" } th { "Phase" } th { "Operation" } th { "Progress" } th { "Updated" } } }
            tbody {
                @for r in runs {
                    @let (planned, done, failed) = totals(r);
                    tr data-run=(r.name) {
                        td { a href={ "/runs/" (r.id) } { (r.name) } }
                        td { (badge(r.status.as_str())) @if r.reason != RunReason::None { " " (badge(r.reason.as_str())) } }
                        td { (r.phase) " of " (r.phases.len()) }
                        td { (r.task.operation.as_str()) }
                        td { (done) " done · " (failed) " failed · " (planned) " racks" }
                        td { (when(Some(r.updated_at))) }
                    }
                }
            }
        }
    }
}

fn totals(r: &RunRecord) -> (usize, usize, usize) {
    r.phases.iter().fold((0, 0, 0), |(p, d, f), c| {
        (p + c.planned, d + c.completed, f + c.failed)
    })
}

/// One run's content.
pub fn one(ctx: &Ctx, r: &RunRecord, targets: &[RunTargetRecord]) -> Markup {
    let base = format!("/runs/{}", r.id);
    html! {
        section.toolbar {
            h1 { "Rollout " (r.name) " " (badge(r.status.as_str()))
                @if r.reason != RunReason::None { " " (badge(r.reason.as_str())) } }
            div.actions {
                @if r.status == RunStatus::Running || r.status == RunStatus::Pending {
                    (action_link(ctx, &format!("{base}/act?do=pause"), "Pause"))
                }
                @if r.status == RunStatus::Paused {
                    @if r.reason == RunReason::PhaseGate {
                        (action_link(ctx, &format!("{base}/act?do=advance"), "Advance to the next phase"))
                    } @else {
                        (action_link(ctx, &format!("{base}/act?do=resume"), "Resume"))
                    }
                }
                @if !r.status.is_final() {
                    (action_link(ctx, &format!("{base}/act?do=cancel"), "Cancel rollout"))
                }
            }
        }
        dl.facts {
            dt { "Operation" } dd { (r.task.operation.as_str()) }
            @if !r.description.is_empty() { dt { "For" } dd { (r.description) } }
            dt { "Phase" } dd { (r.phase) " of " (r.phases.len()) }
            dt { "At most open" } dd { (r.max_concurrent) " tasks" }
            dt { "Advances" } dd { (if r.auto_advance { "by itself" } else { "when an operator advances it" }) }
            @if let Some(g) = &r.gate { dt { "Tripped" } dd.message { (g.gate) ": " (g.figure) " (" (when(Some(g.at))) ")" } }
            @if r.accepted != [0, 0] { dt { "Accepted failures" } dd { (r.accepted[0]) " in the phase, " (r.accepted[1]) " in the run" } }
            dt { "Created" } dd { (when(Some(r.created_at))) }
            dt { "Ended" } dd { (when(r.finished_at)) }
        }
        section.gates {
            h2 { "Gates" }
            @if r.gates.is_empty() { p.empty { "No safety gate." } }
            ul { @for g in r.gate_figures() { li { (g) } } }
        }
        section.phases {
            h2 { "Phases" }
            table {
                thead { tr { th { "Phase" } th { "Racks" } th { "Pending" } th { "Running" } th { "Completed" } th { "Failed" } th { "Skipped" } th {} } }
                tbody {
                    @for (i, p) in r.phases.iter().enumerate() {
                        tr data-phase=(i + 1) class=[(i + 1 == r.phase as usize).then_some("here")] {
                            td { (i + 1) } td { (p.planned) } td { (p.pending) } td { (p.running) }
                            td { (p.completed) } td { (p.failed) } td { (p.skipped) }
                            td {
                                div.bar data-total=(p.planned) data-done=(p.completed) data-failed=(p.failed) {
                                    span.done style={ "width:" (pct(p.completed, p.planned)) } {}
                                    span.failed style={ "width:" (pct(p.failed, p.planned)) } {}
                                }
                            }
                        }
                    }
                }
            }
        }
        section.targets {
            h2 { "Targets" }
            table {
                thead { tr { th { "#" } th { "Phase" } th { "Rack" } th { "Status" } th { "Task" } th { "Attempts" } th { "Message" } } }
                tbody {
                    @for t in targets {
                        tr {
                            td { (t.seq) } td { (t.phase) } td { (t.rack) } td { (badge(t.status.as_str())) }
                            td { @if let Some(id) = t.task_id { a href={ "/tasks/" (id) } { code { (super::tasks::short_id(&id.to_string())) } } } }
                            td { (t.attempts) } td.message { (t.message) }
                        }
                    }
                }
            }
        }
    }
}

fn pct(part: usize, total: usize) -> String {
    if total == 0 {
        "0%".into()
    } else {
        format!("{:.1}%", part as f64 * 100.0 / total as f64)
    }
}
