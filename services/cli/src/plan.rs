//! `--plan`: prints what a submission would do (`task.plan`), creating
//! nothing. One rack in full (rule, stages, versions, problems, holds) in
//! at most 100 columns; several racks as counts per outcome, a line per
//! rack and the first problems.

use std::collections::BTreeMap;
use std::time::Duration;

use flow_protocol::preview::{
    PlanOutcome, RackPlan, RunPlanReply, SchedulePlanReply, TaskPlanReply, VersionMove, WindowPlan,
};
use flow_protocol::run::Ordering;
use flow_rules::duration::format_short;

/// Lines of the plan as an operator reads it.
pub fn render(reply: &TaskPlanReply) -> Vec<String> {
    match reply.results.as_slice() {
        [one] => rack(one),
        many => summary(many),
    }
}

/// A run's preview: its phases and gates, then its racks.
pub fn render_run(plan: &RunPlanReply) -> Vec<String> {
    let racks: usize = plan.phases.iter().map(|p| p.racks.len()).sum();
    let order = match &plan.ordering {
        Ordering::Random { seed: Some(seed) } => format!("random (seed {seed})"),
        Ordering::Random { seed: None } => "random".to_owned(),
        Ordering::RowByRow => "row by row".to_owned(),
        Ordering::RoundRobinRows => "round robin over rows".to_owned(),
    };
    let mut lines = vec![
        fit(
            &format!(
                "run {}: {racks} racks in {} phases, order {order}",
                plan.name,
                plan.phases.len()
            ),
            100,
        ),
        fit(
            &format!(
                "  at most {} at once; gates {}; {}",
                plan.max_concurrent,
                plan.gates
                    .iter()
                    .map(ToString::to_string)
                    .collect::<Vec<_>>()
                    .join(", "),
                if plan.auto_advance {
                    "phases advance on their own"
                } else {
                    "phases wait for `flow run advance`"
                }
            ),
            100,
        ),
    ];
    if let Some(w) = &plan.window {
        lines.push(window_line("  window", w, &plan.timezone));
    }
    for p in &plan.phases {
        let name = format!("phase {}", p.phase);
        lines.push(fit(
            &format!("  {name:<9} {:>4} × {}", p.racks.len(), names(&p.racks, 80)),
            100,
        ));
    }
    lines.push(String::new());
    lines.extend(render(&TaskPlanReply {
        results: plan.racks.clone(),
    }));
    lines
}

/// A schedule's preview: its next firings and their windows, then its
/// racks as a firing would find them now.
pub fn render_schedule(plan: &SchedulePlanReply) -> Vec<String> {
    let mut lines = vec![fit(
        &format!("schedule {} ({}): next firings", plan.name, plan.timezone),
        100,
    )];
    if plan.firings.is_empty() {
        lines.push("  none: it never fires again".to_owned());
    }
    for f in &plan.firings {
        lines.push(fit(&format!("  {}", f.local), 100));
        if let Some(w) = &f.window {
            lines.push(window_line("    window", w, &plan.timezone));
        }
    }
    lines.push(String::new());
    lines.extend(render(&TaskPlanReply {
        results: plan.racks.clone(),
    }));
    lines
}

fn window_line(label: &str, w: &WindowPlan, zone: &str) -> String {
    let t = |at: &time::OffsetDateTime| {
        format!(
            "{}-{:02}-{:02} {:02}:{:02}",
            at.year(),
            u8::from(at.month()),
            at.day(),
            at.hour(),
            at.minute()
        )
    };
    fit(
        &format!(
            "{label} {} – {} UTC (windows in {zone}){}",
            t(&w.opens),
            t(&w.closes),
            if w.open_at_firing {
                ": open"
            } else {
                ": tasks wait for it"
            }
        ),
        100,
    )
}

fn outcome(o: &PlanOutcome) -> &'static str {
    match o {
        PlanOutcome::Create => "would create a task",
        PlanOutcome::Queue => "would queue a task",
        PlanOutcome::Duplicate => "already submitted",
        PlanOutcome::Refused => "would be refused",
    }
}

fn ms(v: u64) -> String {
    format_short(Duration::from_millis(v))
}

/// Cuts `text` to `width` characters, marking the cut.
fn fit(text: &str, width: usize) -> String {
    if text.chars().count() <= width {
        return text.to_owned();
    }
    let mut s: String = text.chars().take(width.saturating_sub(1)).collect();
    s.push('…');
    s
}

/// A problem's details: the first few, then how many more.
fn details(list: &[String], indent: &str) -> Vec<String> {
    const SHOWN: usize = 3;
    let mut out: Vec<String> = list
        .iter()
        .take(SHOWN)
        .map(|d| fit(&format!("{indent}{d}"), 100))
        .collect();
    if list.len() > SHOWN {
        out.push(format!("{indent}… {} more", list.len() - SHOWN));
    }
    out
}

/// Names, as many as fit in `width`, then how many more.
fn names(list: &[String], width: usize) -> String {
    let mut out = String::new();
    for (i, n) in list.iter().enumerate() {
        let more = list.len() - i;
        let next = if out.is_empty() {
            n.clone()
        } else {
            format!("{out}, {n}")
        };
        let tail = format!(" +{} more", more - 1);
        if next.chars().count() + if more > 1 { tail.len() } else { 0 } > width {
            return format!("{out} +{more} more");
        }
        out = next;
    }
    out
}

fn rack(p: &RackPlan) -> Vec<String> {
    let mut lines = vec![fit(&format!("{}: {}", p.rack, outcome(&p.outcome)), 100)];
    if let Some(id) = p.task_id {
        lines.push(format!("  task      {id}"));
    }
    if let Some(rule) = &p.rule {
        let revision = rule
            .resolved
            .revision
            .map_or_else(String::new, |r| format!(", revision {r}"));
        let source = serde_json::to_value(rule.resolved.source)
            .ok()
            .and_then(|v| v.as_str().map(str::to_owned))
            .unwrap_or_default();
        lines.push(fit(
            &format!(
                "  rule      {} ({source}{revision}): {}",
                rule.name, rule.resolved.reason
            ),
            100,
        ));
    }
    if !p.stages.is_empty() {
        lines.push(format!(
            "  time      at least {}, budget {}",
            ms(p.expected_ms),
            ms(p.budget_ms)
        ));
        for stage in &p.stages {
            for step in &stage.steps {
                let what = if step.skipped {
                    "skipped: no component of this type".to_owned()
                } else {
                    format!(
                        "{:>2} × {}",
                        step.components.len(),
                        names(&step.components, 56)
                    )
                };
                lines.push(fit(
                    &format!(
                        "  stage {:<3} {:<11} {what}",
                        stage.stage,
                        step.component_type.as_str()
                    ),
                    100,
                ));
            }
        }
    }
    // Components moving alike on one line.
    let mut moves: Vec<(String, Vec<String>)> = Vec::new();
    for v in &p.versions {
        let way = match v.direction {
            VersionMove::Up => "up",
            VersionMove::Down => "down",
            VersionMove::Same => "same: skipped",
            VersionMove::Unknown => "not comparable",
        };
        let installed = if v.installed.is_empty() {
            "unknown"
        } else {
            v.installed.as_str()
        };
        let wrong = if v.wrong_way { ", the wrong way" } else { "" };
        let key = format!("{installed} → {} ({way}{wrong})", v.target);
        match moves.iter_mut().find(|(k, _)| *k == key) {
            Some((_, names)) => names.push(v.component.clone()),
            None => moves.push((key, vec![v.component.clone()])),
        }
    }
    for (key, components) in &moves {
        lines.push(fit(
            &format!(
                "  version   {:>2} × {key}: {}",
                components.len(),
                names(components, 40)
            ),
            100,
        ));
    }
    for e in &p.problems {
        lines.push(fit(&format!("  problem   {}", e.message), 100));
        lines.extend(details(&e.details, "            "));
    }
    for h in &p.holds {
        lines.push(fit(&format!("  hold      {h}"), 100));
    }
    lines
}

/// Racks listed one per line before the rest are only counted.
const RACK_LINES: usize = 15;

fn summary(plans: &[RackPlan]) -> Vec<String> {
    let mut counts: BTreeMap<&'static str, usize> = BTreeMap::new();
    for p in plans {
        *counts.entry(outcome(&p.outcome)).or_default() += 1;
    }
    let mut lines = vec![format!(
        "{} racks: {}",
        plans.len(),
        counts
            .iter()
            .map(|(k, v)| format!("{v} {k}"))
            .collect::<Vec<_>>()
            .join(", ")
    )];
    lines.push(format!(
        "{:<12} {:<20} {:>8}  {:<22} {}",
        "RACK", "OUTCOME", "AT LEAST", "RULE", "NOTE"
    ));
    for p in plans.iter().take(RACK_LINES) {
        let note = p
            .problems
            .first()
            .map(|e| e.message.clone())
            .or_else(|| p.holds.first().cloned())
            .or_else(|| {
                let down = p
                    .versions
                    .iter()
                    .filter(|v| v.direction == VersionMove::Down)
                    .count();
                (down > 0).then(|| format!("{down} downgrade(s)"))
            })
            .unwrap_or_default();
        let line = format!(
            "{:<12} {:<20} {:>8}  {:<22} {note}",
            fit(&p.rack, 12),
            outcome(&p.outcome),
            if p.stages.is_empty() {
                "-".to_owned()
            } else {
                ms(p.expected_ms)
            },
            fit(p.rule.as_ref().map_or("-", |r| r.name.as_str()), 22),
        );
        lines.push(fit(&line, 100));
    }
    if plans.len() > RACK_LINES {
        lines.push(format!(
            "… {} more racks (--json lists every one)",
            plans.len() - RACK_LINES
        ));
    }
    let problems: Vec<String> = plans
        .iter()
        .flat_map(|p| {
            p.problems.iter().flat_map(move |e| {
                std::iter::once(format!("{}: {}", p.rack, e.message))
                    .chain(details(&e.details, "  "))
            })
        })
        .collect();
    if !problems.is_empty() {
        lines.push(String::new());
        lines.push(format!("problems (first {} shown):", problems.len().min(8)));
        lines.extend(problems.iter().take(8).map(|l| fit(l, 100)));
    }
    lines
}

#[cfg(test)]
mod tests {
    use super::*;
    use flow_protocol::api::{ApiError, ErrorCode};
    use flow_protocol::preview::{StagePlan, StepPlan, VersionChange};
    use flow_rules::ComponentType;

    fn plan(rack: &str, outcome: PlanOutcome) -> RackPlan {
        RackPlan {
            rack: rack.into(),
            outcome,
            task_id: None,
            rule: None,
            stages: vec![StagePlan {
                stage: 1,
                steps: vec![StepPlan {
                    step_index: 0,
                    component_type: ComponentType::Compute,
                    components: (1..=18).map(|i| format!("compute-tray-{i:02}")).collect(),
                    skipped: false,
                    budget_ms: 600_000,
                }],
            }],
            budget_ms: 600_000,
            expected_ms: 90_000,
            versions: vec![VersionChange {
                component: "compute-tray-01".into(),
                component_type: ComponentType::Compute,
                installed: "26.10".into(),
                target: "26.02".into(),
                direction: VersionMove::Down,
                wrong_way: true,
            }],
            problems: vec![ApiError::new(ErrorCode::Invalid, "x".repeat(300))],
            holds: vec![],
            not_ready: vec![],
        }
    }

    #[test]
    fn one_rack_fits_100_columns_and_names_the_downgrade() {
        let lines = render(&TaskPlanReply {
            results: vec![plan("rack-01", PlanOutcome::Refused)],
        });
        assert!(lines.iter().all(|l| l.chars().count() <= 100), "{lines:#?}");
        assert!(lines[0].starts_with("rack-01: would be refused"));
        assert!(
            lines
                .iter()
                .any(|l| l.contains("26.10 → 26.02 (down, the wrong way)")),
            "{lines:#?}"
        );
        assert!(lines.iter().any(|l| l.contains("18 × compute-tray-01")));
    }

    #[test]
    fn many_racks_are_counted_by_outcome_with_the_first_problems() {
        let mut plans: Vec<RackPlan> = (1..=20)
            .map(|i| plan(&format!("rack-{i:02}"), PlanOutcome::Create))
            .collect();
        for p in plans.iter_mut().skip(3) {
            p.problems.clear();
        }
        plans[0].outcome = PlanOutcome::Refused;
        let lines = render(&TaskPlanReply { results: plans });
        assert_eq!(
            lines[0],
            "20 racks: 1 would be refused, 19 would create a task"
        );
        assert_eq!(
            lines.iter().filter(|l| l.starts_with("rack-")).count(),
            RACK_LINES + 3
        );
        assert!(
            lines.contains(&"… 5 more racks (--json lists every one)".to_owned()),
            "{lines:#?}"
        );
        assert!(lines.iter().all(|l| l.chars().count() <= 100), "{lines:#?}");
        assert!(
            lines.iter().any(|l| l == "problems (first 3 shown):"),
            "{lines:#?}"
        );
    }
}
