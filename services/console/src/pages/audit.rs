//! The audit log: who changed what, when, why and how it ended, newest
//! first (`audit.list`; `docs/audit.md`). Read-only: no endpoint changes
//! or deletes a record.

use flow_protocol::audit::AuditRecord;
use maud::{Markup, html};
use serde::Deserialize;

use super::{badge, when};

/// The page's filters, from its query string.
#[derive(Debug, Default, Deserialize)]
pub struct Filter {
    /// Only this actor (`console:operator`, a CLI user).
    #[serde(default)]
    pub actor: String,
    /// Only records naming this rack.
    #[serde(default)]
    pub rack: String,
    /// Only this endpoint (`event.clear`).
    #[serde(default)]
    pub endpoint: String,
}

impl Filter {
    fn value(text: &str) -> Option<String> {
        Some(text.trim())
            .filter(|t| !t.is_empty())
            .map(str::to_owned)
    }

    /// The actor asked for, if any.
    pub fn actor(&self) -> Option<String> {
        Filter::value(&self.actor)
    }

    /// The rack asked for, if any.
    pub fn rack(&self) -> Option<String> {
        Filter::value(&self.rack)
    }

    /// The endpoint asked for, if any.
    pub fn endpoint(&self) -> Option<String> {
        Filter::value(&self.endpoint)
    }
}

/// The list.
pub fn render(records: &[AuditRecord], filter: &Filter) -> Markup {
    html! {
        section.toolbar {
            h1 { "Audit" }
            form.filter method="get" action="/audit" {
                label { "Actor " input type="text" name="actor" value=(filter.actor) placeholder="console:operator"; }
                label { "Rack " input type="text" name="rack" value=(filter.rack) placeholder="rack-01"; }
                label { "Endpoint " input type="text" name="endpoint" value=(filter.endpoint) placeholder="event.clear"; }
                button type="submit" { "Filter" }
            }
            p.summary { (records.len()) " records, newest first · append-only" }
        }
        @if records.is_empty() {
            p.empty { "No record matches." }
        } @else {
            table.audit {
                thead { tr {
                    th { "When" } th { "Actor" } th { "Endpoint" } th { "Racks" } th { "Target" }
                    th { "Outcome" } th { "Reason" } th { "Message" }
                } }
                tbody {
                    @for r in records {
                        tr data-endpoint=(r.endpoint) data-outcome=(r.outcome.as_str()) {
                            td { (when(Some(r.at))) }
                            td.actor title=(r.actor_source.as_str()) { (r.who()) }
                            td { code { (r.endpoint) } }
                            td { (r.racks.join(", ")) }
                            td { (r.target.as_deref().unwrap_or_default()) }
                            td { (badge(r.outcome.as_str())) }
                            td.reason { (r.reason.as_deref().unwrap_or_default()) }
                            td.message { (r.message) }
                        }
                    }
                }
            }
        }
    }
}
