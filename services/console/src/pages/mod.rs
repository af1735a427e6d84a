//! The pages: pure functions from `flow.api` records to HTML (maud). Each
//! page renders its `<main>` content alone as well, for the browser to
//! swap in when the live stream says something changed.

pub mod audit;
pub mod confirm;
pub mod events;
pub mod rack;
pub mod runs;
pub mod schedules;
pub mod site;
pub mod task;
pub mod tasks;

use maud::{DOCTYPE, Markup, html};
use time::OffsetDateTime;

use crate::access::{Role, User};

/// What every page needs to know about the request.
#[derive(Debug, Clone)]
pub struct Ctx {
    /// Who asked.
    pub user: User,
    /// Their forms' CSRF token.
    pub csrf: String,
}

impl Ctx {
    /// Whether the user may act.
    pub fn operator(&self) -> bool {
        self.user.role == Role::Operator
    }
}

/// Which section of the navigation a page belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Section {
    /// Racks.
    Site,
    /// Tasks.
    Tasks,
    /// Rollouts.
    Runs,
    /// Schedules.
    Schedules,
    /// Hardware events and locks.
    Events,
    /// The audit log.
    Audit,
}

/// A whole page: the header, the navigation and `main`. `live` is the
/// topic the page's script follows on `/live` (none: a static page).
pub fn layout(
    ctx: &Ctx,
    section: Section,
    title: &str,
    live: Option<&str>,
    main: Markup,
) -> Markup {
    let nav = [
        (Section::Site, "/", "Site"),
        (Section::Tasks, "/tasks", "Tasks"),
        (Section::Runs, "/runs", "Rollouts"),
        (Section::Schedules, "/schedules", "Schedules"),
        (Section::Events, "/events", "Events"),
        (Section::Audit, "/audit", "Audit"),
    ];
    html! {
        (DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                meta name="viewport" content="width=device-width, initial-scale=1";
                title { (title) " · Flow" }
                link rel="stylesheet" href="/static/console.css";
                script src="/static/console.js" defer {}
            }
            body data-live=[live] {
                header {
                    a.brand href="/" { "Flow" }
                    nav {
                        @for (s, href, name) in nav {
                            a href=(href) class=[(s == section).then_some("here")] { (name) }
                        }
                    }
                    span.live #live-state title="live updates" {
                        @if live.is_some() { "connecting…" }
                    }
                    span.who { (ctx.user.name) " · " (ctx.user.role.as_str()) }
                }
                main #main { (main) }
            }
        }
    }
}

/// A value for a URL's query string: every byte but ASCII letters, digits
/// and `-._~` percent-encoded (rack names may hold spaces, `&`, `#`, `/`).
pub fn query_value(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for b in text.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// A status as a coloured badge (`class="badge s-<status>"`).
pub fn badge(status: &str) -> Markup {
    html! { span class={ "badge s-" (status) } { (status.replace('_', " ")) } }
}

/// A time as `2026-12-03 10:06:39Z`, or `—`.
pub fn when(t: Option<OffsetDateTime>) -> String {
    match t {
        Some(t) => {
            let utc = t.to_offset(time::UtcOffset::UTC);
            format!(
                "{:04}-{:02}-{:02} {:02}:{:02}:{:02}Z",
                utc.year(),
                u8::from(utc.month()),
                utc.day(),
                utc.hour(),
                utc.minute(),
                utc.second()
            )
        }
        None => "—".to_owned(),
    }
}

/// How long from `start` to `end` (or to now), as `1m 05s`.
pub fn took(start: Option<OffsetDateTime>, end: Option<OffsetDateTime>) -> String {
    let Some(start) = start else {
        return "—".to_owned();
    };
    let end = end.unwrap_or_else(OffsetDateTime::now_utc);
    let secs = (end - start).whole_seconds().max(0);
    if secs >= 3600 {
        format!("{}h {:02}m", secs / 3600, secs % 3600 / 60)
    } else if secs >= 60 {
        format!("{}m {:02}s", secs / 60, secs % 60)
    } else {
        format!("{secs}s")
    }
}

/// A form that posts an action: the CSRF token and the fields, one button.
pub fn action_form(ctx: &Ctx, action: &str, fields: &[(&str, &str)], label: &str) -> Markup {
    html! {
        form.action method="post" action=(action) {
            input type="hidden" name="csrf" value=(ctx.csrf);
            @for (name, value) in fields {
                input type="hidden" name=(name) value=(value);
            }
            button type="submit" { (label) }
        }
    }
}

/// A link to a confirmation page (actions are confirmed before they are
/// sent), shown to operators only.
pub fn action_link(ctx: &Ctx, href: &str, label: &str) -> Markup {
    html! {
        @if ctx.operator() {
            a.button href=(href) { (label) }
        }
    }
}

/// An error shown in place of a page's content.
pub fn problem(title: &str, message: &str) -> Markup {
    html! {
        section.problem {
            h1 { (title) }
            p { (message) }
        }
    }
}

/// Pre-escaped JSON for a `<pre>` block, pretty-printed.
pub fn json_block(value: &serde_json::Value) -> Markup {
    let text = serde_json::to_string_pretty(value).unwrap_or_default();
    html! { pre.json { (text) } }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_from_the_api_is_escaped() {
        let ctx = Ctx {
            user: User {
                name: "<b>op</b>".into(),
                role: Role::Operator,
            },
            csrf: "t".into(),
        };
        let page = layout(&ctx, Section::Site, "<script>", None, problem("x", "<i>")).into_string();
        assert!(page.contains("&lt;b&gt;op&lt;/b&gt;"), "{page}");
        assert!(page.contains("&lt;script&gt; · Flow"), "{page}");
        assert!(page.contains("&lt;i&gt;"), "{page}");
        assert!(!page.contains("<i>"), "{page}");
    }

    #[test]
    fn query_values_are_percent_encoded() {
        assert_eq!(query_value("rack-01"), "rack-01");
        assert_eq!(query_value("row B&c=d#x/é"), "row%20B%26c%3Dd%23x%2F%C3%A9");
    }

    #[test]
    fn durations_read_as_an_operator_says_them() {
        let t = OffsetDateTime::UNIX_EPOCH;
        assert_eq!(
            took(Some(t), Some(t + time::Duration::seconds(65))),
            "1m 05s"
        );
        assert_eq!(took(Some(t), Some(t + time::Duration::seconds(7))), "7s");
        assert_eq!(
            took(Some(t), Some(t + time::Duration::seconds(3720))),
            "1h 02m"
        );
        assert_eq!(took(None, None), "—");
        assert_eq!(when(Some(t)), "1970-01-01 00:00:00Z");
    }
}
