//! Hardware events: leaks and temperatures as the watchers reported them,
//! the rule each met, its actions' executions and the tasks they
//! submitted, and the components a leak locks. An operator clears an
//! event with a reason (`event.clear`), which lifts its locks
//! (`docs/leak-containment.md`).

use flow_protocol::event::{EventRecord, MAX_CLEAR_REASON_LEN};
use maud::{Markup, html};

use super::{Ctx, badge, when};

/// The list, newest first.
pub fn render_list(events: &[EventRecord], rack: Option<&str>) -> Markup {
    let locking = events.iter().filter(|e| !e.locks.is_empty()).count();
    html! {
        section.toolbar {
            h1 { "Events" }
            form.filter method="get" action="/events" {
                label { "Rack "
                    input type="text" name="rack" value=(rack.unwrap_or_default()) placeholder="rack-01";
                }
                button type="submit" { "Filter" }
            }
            p.summary {
                (events.len()) " events"
                @if locking > 0 { " · " span.error { (locking) " locking components" } }
            }
        }
        @if events.is_empty() {
            p.empty { "No event." }
        } @else {
            table.events {
                thead { tr {
                    th { "Received" } th { "Type" } th { "Severity" } th { "Component" }
                    th { "Rule" } th { "Actions" } th { "Locks" }
                } }
                tbody {
                    @for e in events {
                        tr data-event=(e.id) data-locks=(e.locks.len()) {
                            td { a href={ "/events/" (e.id) } { (when(Some(e.received_at))) } }
                            td { (e.event.event_type.to_string()) }
                            td { (badge(e.event.severity.as_str())) }
                            td { (e.event.rack) "/" (e.event.component) }
                            td { (e.rule) }
                            td {
                                @for x in &e.executions {
                                    span.exec { (x.action) " " (badge(x.status.as_str())) " " }
                                }
                            }
                            td.locks {
                                @if !e.locks.is_empty() {
                                    span.locked { (e.locks.len()) " locked" }
                                } @else if e.cleared_at.is_some() {
                                    "cleared"
                                } @else {
                                    "—"
                                }
                            }
                        }
                    }
                }
            }
        }
    }
}

/// One event, with the Clear form for operators while it locks anything.
pub fn render_one(ctx: &Ctx, e: &EventRecord) -> Markup {
    html! {
        section.toolbar {
            h1 { (e.event.event_type.to_string()) " on " (e.event.rack) "/" (e.event.component) " "
                (badge(e.event.severity.as_str())) }
        }
        dl.facts data-event=(e.id) {
            dt { "Event" } dd { code { (e.id) } }
            dt { "Received" } dd { (when(Some(e.received_at))) }
            dt { "Source" } dd { (e.event.source) }
            @if !e.event.message.is_empty() {
                dt { "Message" } dd { (e.event.message) }
            }
            dt { "Rule" } dd { @if e.rule.is_empty() { "none applied" } @else { (e.rule) } }
            @if let Some(at) = e.cleared_at {
                dt { "Cleared" } dd.cleared {
                    (when(Some(at))) " by " (e.cleared_by) ": " span.reason { (e.cleared_reason) }
                }
            }
        }
        h2 { "Executions" }
        @if e.executions.is_empty() {
            p.empty { "None." }
        } @else {
            table.executions {
                thead { tr { th { "Action" } th { "Status" } th { "Attempts" } th { "Tasks" } th { "Message" } } }
                tbody {
                    @for x in &e.executions {
                        tr {
                            td { (x.action) }
                            td { (badge(x.status.as_str())) }
                            td { (x.attempts) }
                            td {
                                @for t in &x.tasks {
                                    a href={ "/tasks/" (t) } { code { (t.to_string().get(..8).unwrap_or_default()) } } " "
                                }
                            }
                            td { (x.last_error) }
                        }
                    }
                }
            }
        }
        h2 { "Locks" }
        @if e.locks.is_empty() {
            p.empty { "Nothing locked." }
        } @else {
            p { "No power-on, reset or firmware task may start on these until the event is cleared." }
            ul.locks {
                @for l in &e.locks {
                    li data-rack=(l.rack) data-component=(l.component) {
                        span.locked { (l.rack) "/" (l.component) } " since " (when(Some(l.since)))
                    }
                }
            }
            @if ctx.operator() {
                form.clear method="post" action={ "/events/" (e.id) "/clear" } {
                    input type="hidden" name="csrf" value=(ctx.csrf);
                    label { "Why it is safe (kept in the event and the audit log) "
                        textarea name="reason" required maxlength=(MAX_CLEAR_REASON_LEN) rows="3"
                            placeholder="tray replaced, floor dry" {}
                    }
                    button type="submit" { "Clear and unlock" }
                }
            }
        }
    }
}
