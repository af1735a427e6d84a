//! The confirmation every action goes through: what will happen, to what,
//! and one button that sends it (with the CSRF token).

use flow_protocol::preview::{PlanOutcome, RackPlan};
use flow_rules::duration::format_short;
use maud::{Markup, html};

use super::{Ctx, action_form};

/// An action to confirm.
#[derive(Debug, Clone, Copy)]
pub struct Confirmation<'a> {
    /// What it does, as a question without its mark: `Power on rack-01`.
    pub what: &'a str,
    /// What follows from it.
    pub detail: &'a str,
    /// Where `Confirm` posts.
    pub action: &'a str,
    /// The form's fields beside the token.
    pub fields: &'a [(&'a str, &'a str)],
    /// Where `Back` goes.
    pub back: &'a str,
    /// What a submission would do (`task.plan`), shown before the button.
    pub preview: Option<&'a RackPlan>,
}

/// The confirmation page's content.
pub fn render(ctx: &Ctx, c: &Confirmation<'_>) -> Markup {
    html! {
        section.confirm {
            h1 { (c.what) "?" }
            p { (c.detail) }
            @if let Some(p) = c.preview { (preview(p)) }
            div.actions {
                (action_form(ctx, c.action, c.fields, "Confirm"))
                a.button.secondary href=(c.back) { "Back" }
            }
        }
    }
}

/// A rack's plan: the rule and why, the steps, and every problem or hold.
fn preview(p: &RackPlan) -> Markup {
    let outcome = match p.outcome {
        PlanOutcome::Create => "would create a task",
        PlanOutcome::Queue => "would queue behind the rack's open tasks",
        PlanOutcome::Duplicate => "already submitted",
        PlanOutcome::Refused => "would be refused",
    };
    html! {
        section.preview data-outcome=(format!("{:?}", p.outcome).to_lowercase()) {
            h2 { "Preview" }
            p { (p.rack) ": " strong { (outcome) } }
            @if let Some(rule) = &p.rule {
                p.rule { "Rule " strong { (rule.name) } " — " (rule.resolved.reason) }
            }
            @if !p.stages.is_empty() {
                p { "At least " (format_short(std::time::Duration::from_millis(p.expected_ms)))
                    ", budget " (format_short(std::time::Duration::from_millis(p.budget_ms))) }
                table.steps {
                    thead { tr { th { "Stage" } th { "Type" } th { "Components" } } }
                    tbody {
                        @for stage in &p.stages {
                            @for step in &stage.steps {
                                tr {
                                    td { (stage.stage) }
                                    td { (step.component_type.as_str()) }
                                    td { @if step.skipped { "skipped" } @else { (step.components.len()) } }
                                }
                            }
                        }
                    }
                }
            }
            @for e in &p.problems {
                p.error.problem { (e.message) }
                @for d in &e.details { p.error.detail { (d) } }
            }
            @for h in &p.holds {
                p.hold { (h) }
            }
        }
    }
}
