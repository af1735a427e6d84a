//! One rack's power as Flow knows it (`rack.power`): each component's
//! observed state and how old it is, who saw it, its measured draw, how it
//! counts against the rack's power domains, its desired state and any held
//! command (`docs/operating-safety.md`, "What counts").

use flow_protocol::power::{Counted, RackPowerReply};
use maud::{Markup, html};

/// The rack page's content.
pub fn render(reply: &RackPowerReply) -> Markup {
    let total: u64 = reply
        .components
        .iter()
        .map(|c| u64::from(c.counted_w))
        .sum();
    let domains: Vec<&str> = reply.domains.iter().map(|d| d.as_str()).collect();
    html! {
        section.toolbar {
            h1 { "Rack " (reply.rack) }
        }
        p.summary {
            "Power domains: " (if domains.is_empty() { "none".to_owned() } else { domains.join(", ") })
            " · counted against them now: " strong { (format!("{:.1} kW", total as f64 / 1000.0)) }
            " · an observation is known for " (reply.known_for_s) " s"
            @if let Some(task) = reply.task {
                " · open task " a href={ "/tasks/" (task) } { (task.to_string()) }
            }
        }
        table.power data-rack=(reply.rack) {
            thead { tr {
                th { "Component" } th { "Power" } th { "Seen" } th { "By" }
                th { "Measured" } th { "Counted" } th { "Desired" } th { "Held" }
            } }
            tbody {
                @for c in &reply.components {
                    tr data-component=(c.component) data-counted=(counted_name(c.counted)) {
                        td { (c.component) }
                        td.power { (c.power.as_str()) @if !c.reachable && c.observed_at.is_some() { " (unreachable)" } }
                        td { @match c.age_s { Some(a) => { (format!("{a:.1} s ago")) }, None => { "never" } } }
                        td { @if let Some(s) = c.source { (s.as_str()) } }
                        td { @if let Some(w) = c.measured_w { (w) " W" } }
                        td.counted { (counted_text(c.counted, c.counted_w, c.inrush_w)) }
                        td { @if let Some(d) = c.desired { (d.as_str()) } }
                        td { @if let Some(h) = &c.held { (h) } }
                    }
                }
            }
        }
    }
}

fn counted_name(c: Counted) -> &'static str {
    match c {
        Counted::Off => "off",
        Counted::Unpowered => "unpowered",
        Counted::On => "on",
        Counted::Granted => "granted",
        Counted::Unknown => "unknown",
    }
}

fn counted_text(c: Counted, w: u32, inrush: Option<u32>) -> String {
    match c {
        Counted::Off => "off · 0 W".to_owned(),
        Counted::Unpowered => "unpowered · 0 W".to_owned(),
        Counted::On => format!("on · {w} W"),
        Counted::Granted => format!("granted · {w} W + {} W inrush", inrush.unwrap_or(0)),
        Counted::Unknown => format!("unknown · {w} W"),
    }
}
