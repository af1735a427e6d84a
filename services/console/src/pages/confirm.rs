//! The confirmation every action goes through: what will happen, to what,
//! and one button that sends it (with the CSRF token).

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
}

/// The confirmation page's content.
pub fn render(ctx: &Ctx, c: &Confirmation<'_>) -> Markup {
    html! {
        section.confirm {
            h1 { (c.what) "?" }
            p { (c.detail) }
            div.actions {
                (action_form(ctx, c.action, c.fields, "Confirm"))
                a.button.secondary href=(c.back) { "Back" }
            }
        }
    }
}
