//! The site: every rack as a tile of its components, by type. A component
//! is filled by its power (as a watcher last saw it), ringed by its
//! readiness status, struck when its BMC does not answer, and titled with
//! all of that and its firmware; racks with an open task are marked and
//! linked to it.

use std::collections::BTreeMap;

use flow_protocol::api::{ComponentRecord, RackRecord};
use flow_protocol::state::{ComponentState, PowerState};
use flow_protocol::task::TaskSummary;
use flow_rules::ComponentType;
use maud::{Markup, html};

use super::{Ctx, action_link, badge};

/// What safety holds on racks now: components locked by an event, and
/// racks in a power domain whose limits hold commands.
#[derive(Debug, Default)]
pub struct Marks {
    /// (rack, component) → the event locking it.
    pub locked: BTreeMap<(String, String), flow_protocol::EventId>,
    /// rack → why its domain holds commands (`power held in row=B: 3
    /// waiting`).
    pub held: BTreeMap<String, String>,
}

/// A component's state by (rack, component) name.
pub type StateOf<'a> = &'a dyn Fn(&str, &str) -> Option<ComponentState>;

/// The site page's content.
pub fn render(
    ctx: &Ctx,
    racks: &[RackRecord],
    open: &BTreeMap<String, TaskSummary>,
    filter: &str,
    state_of: StateOf<'_>,
    marks: &Marks,
) -> Markup {
    let components: usize = racks.iter().map(|r| r.components.len()).sum();
    let mut power: BTreeMap<&str, usize> = BTreeMap::new();
    let mut unreachable = 0;
    for r in racks {
        for c in &r.components {
            let s = state_of(&r.name, &c.name);
            *power
                .entry(s.as_ref().map_or("not watched", |s| s.power.as_str()))
                .or_default() += 1;
            unreachable += usize::from(s.is_some_and(|s| !s.reachable));
        }
    }
    html! {
        section.toolbar {
            h1 { "Site" }
            form.filter method="get" action="/" {
                label { "Labels "
                    input type="text" name="labels" value=(filter) placeholder="row=B,pod=2";
                }
                button type="submit" { "Filter" }
            }
            p.summary {
                (racks.len()) " racks · " (components) " components · "
                (open.len()) " with a task open"
                @for (p, n) in &power { " · " (n) " " (p) }
                @if unreachable > 0 { " · " span.error { (unreachable) " unreachable" } }
            }
            p.legend {
                span.c.pw-on {} " on " span.c.pw-off {} " off " span.c.pw-unknown {} " unknown "
                span.c.pw-on.st-maintenance {} " maintenance " span.c.pw-on.st-in_use {} " in use "
                span.c.pw-on.unreachable {} " BMC not answering "
                span.c.pw-off.locked {} " locked (leak)"
            }
        }
        @if racks.is_empty() {
            p.empty { "No rack matches." }
        }
        div.racks {
            @for rack in racks {
                (tile(ctx, rack, open.get(&rack.name), state_of, marks))
            }
        }
    }
}

fn tile(
    ctx: &Ctx,
    rack: &RackRecord,
    open: Option<&TaskSummary>,
    state_of: StateOf<'_>,
    marks: &Marks,
) -> Markup {
    let locked = |c: &str| marks.locked.get(&(rack.name.clone(), c.to_owned()));
    let locks = rack
        .components
        .iter()
        .filter(|c| locked(&c.name).is_some())
        .count();
    let lock_event = rack.components.iter().find_map(|c| locked(&c.name));
    let mut by_type: BTreeMap<ComponentType, Vec<_>> = BTreeMap::new();
    for c in &rack.components {
        by_type.entry(c.component_type).or_default().push(c);
    }
    html! {
        article.rack.busy[open.is_some()].locked[locks > 0] data-rack=(rack.name) data-locks=(locks)
            data-held=[marks.held.get(&rack.name)] {
            header {
                h2 { a href={ "/racks/" (rack.name) } { (rack.name) } }
                span.model { (rack.model) }
                @if !rack.location.is_empty() { span.location { (rack.location) } }
            }
            @if !rack.labels.is_empty() {
                p.labels {
                    @for (k, v) in &rack.labels { span.label { (k) "=" (v) } }
                }
            }
            @if let Some(event) = lock_event {
                p.lock {
                    a href={ "/events/" (event) } { "🔒 " (locks) " locked by a leak event" }
                }
            }
            @if let Some(why) = marks.held.get(&rack.name) {
                p.held { "⏸ " (why) }
            }
            @if let Some(task) = open {
                p.running {
                    a href={ "/tasks/" (task.id) } {
                        (task.operation.as_str()) " " (badge(task.status.as_str()))
                    }
                }
            }
            @for (kind, list) in &by_type {
                div.kind {
                    span.kind-name { (kind.as_str()) " ×" (list.len()) }
                    div.components {
                        @for c in list {
                            (component(kind.as_str(), c, state_of(&rack.name, &c.name).as_ref(), locked(&c.name).is_some()))
                        }
                    }
                }
            }
            footer {
                (firmware_summary(rack))
                @if open.is_none() {
                    (action_link(ctx, &format!("/racks/{}/power?op=on", rack.id), "Power on"))
                    (action_link(ctx, &format!("/racks/{}/power?op=off", rack.id), "Power off"))
                }
            }
        }
    }
}

/// One component's square.
fn component(
    kind: &str,
    c: &ComponentRecord,
    state: Option<&ComponentState>,
    locked: bool,
) -> Markup {
    let power = state.map_or(PowerState::Unknown, |s| s.power);
    let reachable = match state {
        None => "not watched",
        Some(s) if s.reachable => "reachable",
        Some(_) => "unreachable",
    };
    let firmware = if c.firmware_version.is_empty() {
        "unknown"
    } else {
        c.firmware_version.as_str()
    };
    let mut title = format!(
        "{} · {kind} · power {} · {reachable} · firmware {firmware} · {}",
        c.name,
        power.as_str(),
        c.status.as_str()
    );
    if let Some(s) = state.filter(|s| !s.error.is_empty()) {
        title.push_str(&format!(" · {}", s.error));
    }
    if locked {
        title.push_str(" · locked by a leak event");
    }
    html! {
        span class={ "c pw-" (power.as_str()) " st-" (c.status.as_str()) @if reachable == "unreachable" { " unreachable" } @if locked { " locked" } }
            data-component=(c.name) data-locked=[locked.then_some("true")] data-power=(power.as_str()) data-reachable=(reachable)
            data-status=(c.status.as_str()) title=(title) {
            (c.slot.map(|s| s.to_string()).unwrap_or_default())
        }
    }
}

/// The firmware versions a rack runs, per type: `Compute 1.2 ×18`.
fn firmware_summary(rack: &RackRecord) -> Markup {
    let mut versions: BTreeMap<(ComponentType, &str), usize> = BTreeMap::new();
    for c in &rack.components {
        let v = if c.firmware_version.is_empty() {
            "unknown"
        } else {
            c.firmware_version.as_str()
        };
        *versions.entry((c.component_type, v)).or_default() += 1;
    }
    html! {
        details.firmware {
            summary { "Firmware" }
            ul {
                @for ((kind, version), n) in &versions {
                    li { (kind.as_str()) " " code { (version) } " ×" (n) }
                }
            }
        }
    }
}

/// Reads `row=B,pod=2` into labels; a part without `=` is named.
pub fn parse_filter(text: &str) -> Result<flow_protocol::labels::Labels, String> {
    let mut labels = flow_protocol::labels::Labels::new();
    for part in text.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let (k, v) = part
            .split_once('=')
            .ok_or_else(|| format!("label filter {part:?} is not key=value"))?;
        labels.insert(k.trim().to_owned(), v.trim().to_owned());
    }
    Ok(labels)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_filter_reads_as_labels_and_names_a_bad_part() {
        let l = parse_filter(" row=B, pod=2 ,").unwrap();
        assert_eq!(l.get("row").map(String::as_str), Some("B"));
        assert_eq!(l.len(), 2);
        assert_eq!(
            parse_filter("row").unwrap_err(),
            "label filter \"row\" is not key=value"
        );
    }
}
