//! Schedules: what each fires and when next, its windows, its firings and
//! the tasks they made, and pause / resume / fire-now for operators.

use flow_protocol::schedule::{FiringRecord, ScheduleRecord};
use maud::{Markup, html};

use super::{Ctx, action_link, badge, when};

/// The schedule list's content.
pub fn list(schedules: &[ScheduleRecord]) -> Markup {
    html! {
        section.toolbar { h1 { "Schedules" } p.summary { (schedules.len()) " schedules" } }
        @if schedules.is_empty() { p.empty { "No schedule yet (flow schedule create)." } }
        table.schedules {
            thead { tr { th { "Schedule" } th { "When" } th { "Operation" } th { "State" } th { "Next firing" } th { "Last fired" } } }
            tbody {
                @for s in schedules {
                    tr data-schedule=(s.name) {
                        td { a href={ "/schedules/" (s.id) } { (s.name) } }
                        td { (s.spec.describe()) " (" (s.timezone) ")" }
                        td { (s.task.operation.as_str()) }
                        td { (badge(if s.enabled { "enabled" } else { "paused" })) }
                        td { (when(s.next_run_at)) }
                        td { (when(s.last_fired_at)) }
                    }
                }
            }
        }
    }
}

/// One schedule's content with its firings, newest first.
pub fn one(ctx: &Ctx, s: &ScheduleRecord, firings: &[FiringRecord]) -> Markup {
    let base = format!("/schedules/{}", s.id);
    html! {
        section.toolbar {
            h1 { "Schedule " (s.name) " " (badge(if s.enabled { "enabled" } else { "paused" })) }
            div.actions {
                @if s.enabled {
                    (action_link(ctx, &format!("{base}/act?do=pause"), "Pause"))
                } @else {
                    (action_link(ctx, &format!("{base}/act?do=resume"), "Resume"))
                }
                (action_link(ctx, &format!("{base}/act?do=trigger"), "Fire now"))
            }
        }
        dl.facts {
            dt { "When" } dd { (s.spec.describe()) " (" (s.timezone) ")" }
            dt { "Operation" } dd { (s.task.operation.as_str()) }
            dt { "Next firing" } dd { (when(s.next_run_at)) }
            dt { "Windows" } dd { @if s.windows.is_empty() { "any time" } @else { @for w in &s.windows { span.window { (w) } " " } } }
            dt { "Revision" } dd { (s.revision) }
        }
        section.firings {
            h2 { "Firings" }
            @if firings.is_empty() { p.empty { "Not fired yet." } }
            table {
                thead { tr { th { "Due" } th { "Fired" } th { "Trigger" } th { "Tasks" } th { "Skipped" } th { "Error" } } }
                tbody {
                    @for f in firings {
                        tr {
                            td { (when(Some(f.due_at))) @if f.late { " " (badge("late")) } }
                            td { (when(Some(f.fired_at))) }
                            td { (f.trigger.as_str()) }
                            td {
                                @for o in &f.results {
                                    @if let Some(id) = o.submission.task_id() {
                                        a href={ "/tasks/" (id) } { (o.rack) } " "
                                    } @else { (o.rack) " (none) " }
                                }
                            }
                            td { @for k in &f.skipped { (k.rack) " " } }
                            td.error { @if let Some(e) = &f.error { (e) } }
                        }
                    }
                }
            }
        }
    }
}
