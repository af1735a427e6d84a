//! The task list, newest first, filtered by status, rack and operation.

use flow_protocol::status::TaskStatus;
use flow_protocol::task::TaskSummary;
use maud::{Markup, html};
use serde::Deserialize;

use super::{badge, took, when};

/// The list's filters (the query string).
#[derive(Debug, Clone, Default, Deserialize)]
pub struct Filter {
    /// Only tasks with this status (`open`: any not final).
    #[serde(default)]
    pub status: String,
    /// Only this rack's.
    #[serde(default)]
    pub rack: String,
    /// Only this operation.
    #[serde(default)]
    pub operation: String,
    /// How many recent tasks to look through (default 200).
    #[serde(default)]
    pub limit: Option<u32>,
}

impl Filter {
    /// Whether a task passes.
    pub fn keeps(&self, t: &TaskSummary) -> bool {
        let status = match self.status.as_str() {
            "" => true,
            "open" => t.status.is_open(),
            s => t.status.as_str() == s,
        };
        status
            && (self.rack.is_empty() || t.rack == self.rack)
            && (self.operation.is_empty() || t.operation.as_str() == self.operation)
    }
}

/// The task list's content.
pub fn render(tasks: &[TaskSummary], filter: &Filter, looked_at: usize) -> Markup {
    let shown: Vec<_> = tasks.iter().filter(|t| filter.keeps(t)).collect();
    html! {
        section.toolbar {
            h1 { "Tasks" }
            form.filter method="get" action="/tasks" {
                label { "Status "
                    select name="status" {
                        option value="" selected[filter.status.is_empty()] { "any" }
                        option value="open" selected[filter.status == "open"] { "open" }
                        @for s in TaskStatus::ALL {
                            option value=(s.as_str()) selected[filter.status == s.as_str()] { (s.as_str()) }
                        }
                    }
                }
                label { "Rack " input type="text" name="rack" value=(filter.rack); }
                label { "Operation " input type="text" name="operation" value=(filter.operation) placeholder="power_on"; }
                button type="submit" { "Filter" }
            }
            p.summary { (shown.len()) " of the " (looked_at) " most recent tasks" }
        }
        table.tasks {
            thead { tr { th { "Task" } th { "Rack" } th { "Operation" } th { "Status" } th { "Stage" } th { "Submitted" } th { "Took" } th { "Message" } } }
            tbody {
                @for t in &shown {
                    tr data-task=(t.id) {
                        td { a href={ "/tasks/" (t.id) } { code { (short_id(&t.id.to_string())) } } }
                        td { a href={ "/tasks?rack=" (super::query_value(&t.rack)) } { (t.rack) } }
                        td { (t.operation.as_str()) }
                        td { (badge(t.status.as_str())) }
                        td { (t.current_stage.map(|s| s.to_string()).unwrap_or_default()) }
                        td { (when(Some(t.created_at))) }
                        td { (took(Some(t.created_at), t.finished_at)) }
                        td.message { (t.message) }
                    }
                }
            }
        }
    }
}

/// The first 8 characters of an ID (the full one is in the link).
pub fn short_id(id: &str) -> &str {
    id.get(..8).unwrap_or(id)
}
