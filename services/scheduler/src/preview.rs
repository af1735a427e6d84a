//! `task.plan`: what `task.submit` would do, per rack, creating nothing
//! and touching no hardware. Computed by the submission's own functions —
//! the same targets ([`TaskService::targets`]), preparation
//! ([`TaskService::prepare`]: rule, plan, capability, image, version and
//! lock checks) and admission ([`TaskService::would_create`]: duplicate,
//! window, conflicts, queue, readiness, in a transaction rolled back) —
//! plus what power admission would answer now
//! ([`flow_store::Store::preview_power`]).

use flow_decisions::admission::Decision;
use flow_decisions::plan::{Plan, least_duration};
use flow_protocol::api::{ApiError, ErrorCode, Submission, TaskSubmit};
use flow_protocol::ids::RackRef;
use flow_protocol::power::PowerAdmit;
use flow_protocol::power::gated;
use flow_protocol::preview::{PlanOutcome, RackPlan, StagePlan, StepPlan, TaskPlanReply};
use flow_protocol::task::timestamp;
use flow_rules::{Action, OperationCode, PowerOperation, RuleDefinition};
use flow_store::tasks::Origin;

use crate::error::{api_error, store_error};
use crate::service::TaskService;
use crate::submit::{Prepared, Scope};

fn ms(d: std::time::Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

impl TaskService {
    /// `task.plan`: one plan per targeted rack, in the submission's order.
    /// Targets that name nothing refuse the whole request, as they do a
    /// submission.
    pub async fn plan_task(&self, request: &TaskSubmit) -> Result<TaskPlanReply, ApiError> {
        let targets = self.targets(request).await?;
        let mut results = Vec::with_capacity(targets.racks.len());
        for (rack, scope) in &targets.racks {
            results.push(self.plan_rack(request, rack, scope).await?);
        }
        Ok(TaskPlanReply { results })
    }

    async fn plan_rack(
        &self,
        request: &TaskSubmit,
        rack: &RackRef,
        scope: &Scope,
    ) -> Result<RackPlan, ApiError> {
        let prepared = match self.prepare(request, rack, scope, Origin::Request).await {
            Ok(p) => p,
            Err(e) if e.code == ErrorCode::Unavailable => return Err(e),
            Err(e) => {
                return Ok(RackPlan {
                    rack: rack.0.clone(),
                    outcome: PlanOutcome::Refused,
                    task_id: None,
                    rule: None,
                    stages: Vec::new(),
                    budget_ms: 0,
                    expected_ms: 0,
                    versions: Vec::new(),
                    problems: vec![e],
                    holds: Vec::new(),
                    not_ready: Vec::new(),
                });
            }
        };
        let Prepared {
            operation,
            record,
            locked,
            resolution,
            plan,
            versions,
            problems: prepared_problems,
            task,
        } = prepared;
        let mut problems: Vec<ApiError> = locked.into_iter().chain(prepared_problems).collect();
        let (stages, budget_ms, expected_ms) = match (&plan, &resolution) {
            (Some(p), Some(r)) => (
                stages(p),
                p.stages
                    .iter()
                    .flat_map(|s| &s.steps)
                    .map(|s| ms(s.budget))
                    .sum(),
                ms(least_duration(&r.definition, p)),
            ),
            _ => (Vec::new(), 0, 0),
        };
        let mut out = RackPlan {
            rack: record.name.clone(),
            outcome: PlanOutcome::Refused,
            task_id: None,
            rule: resolution.as_ref().map(|r| (&r.reply).into()),
            stages,
            budget_ms,
            expected_ms,
            versions,
            problems: Vec::new(),
            holds: Vec::new(),
            not_ready: Vec::new(),
        };
        let Some(task) = task.filter(|_| problems.is_empty()) else {
            out.problems = problems;
            return Ok(out);
        };
        let would = self
            .would_create(&task.new, &task.state, task.queue_timeout)
            .await
            .map_err(api_error)?;
        match would.submission {
            Submission::Created(_) => out.outcome = PlanOutcome::Create,
            Submission::Queued {
                position,
                expires_at,
                ..
            } => {
                out.outcome = PlanOutcome::Queue;
                if !would.open.is_empty() {
                    out.holds.push(format!(
                    "queued at position {position} behind the rack's open tasks ({}); gives up at {}",
                    would
                        .open
                        .iter()
                        .map(ToString::to_string)
                        .collect::<Vec<_>>()
                        .join(", "),
                    timestamp::format(expires_at)
                    ));
                }
            }
            Submission::Duplicate(id) => {
                out.outcome = PlanOutcome::Duplicate;
                out.task_id = Some(id);
            }
            Submission::Refused(e) => {
                problems.push(e);
                out.outcome = PlanOutcome::Refused;
            }
        }
        out.problems = problems;
        if !matches!(out.outcome, PlanOutcome::Create | PlanOutcome::Queue) {
            return Ok(out);
        }
        if let Some(at) = request.not_before
            && would
                .transition
                .as_ref()
                .is_some_and(|t| t.state.plan.window.not_before_ms.is_some())
        {
            out.holds.push(format!(
                "waits for its window: not before {}",
                timestamp::format(at)
            ));
        }
        if let Some(wait) = request.readiness_wait()
            && !would.not_ready.is_empty()
        {
            out.holds.push(format!(
                "waits up to {} s for components to be ready: {}",
                wait.as_secs(),
                would
                    .not_ready
                    .iter()
                    .map(ToString::to_string)
                    .collect::<Vec<_>>()
                    .join(", ")
            ));
        }
        out.not_ready = would.not_ready;
        if let (Some(p), Some(r)) = (&plan, &resolution) {
            out.holds.extend(
                self.power_holds(&record, operation, &r.definition, p, &task.state)
                    .await?,
            );
        }
        Ok(out)
    }

    /// What power admission would answer now for the first component of
    /// each step that sends a gated command (`shared/decisions/src/admission.rs`).
    async fn power_holds(
        &self,
        record: &flow_protocol::api::RackRecord,
        operation: OperationCode,
        rule: &RuleDefinition,
        plan: &Plan,
        state: &flow_decisions::lifecycle::TaskState,
    ) -> Result<Vec<String>, ApiError> {
        let mut holds = Vec::new();
        if record.power_domains.is_empty() {
            return Ok(holds);
        }
        for step in plan.stages.iter().flat_map(|s| &s.steps) {
            let Some(first) = step.components.first() else {
                continue;
            };
            let Some(definition) = rule.steps.get(step.step_index) else {
                continue;
            };
            let ops: Vec<PowerOperation> = definition
                .actions()
                .filter_map(|a| match (a, operation) {
                    (
                        Action::PowerControl {
                            operation: Some(op),
                            ..
                        },
                        _,
                    ) => Some(*op),
                    (
                        Action::PowerControl {
                            operation: None, ..
                        },
                        OperationCode::Power(op),
                    ) => Some(op),
                    _ => None,
                })
                .filter(|op| gated(step.component_type, *op))
                .collect();
            for op in ops {
                let ask = PowerAdmit {
                    task: state.id,
                    rack: record.name.clone(),
                    component: first.name.clone(),
                    component_type: step.component_type,
                    operation: op,
                    domains: record.power_domains.clone(),
                    emergency: false,
                    observed: None,
                    replaces_ms: None,
                };
                let text = match self.store.preview_power(&ask).await.map_err(store_error)? {
                    None | Some(Decision::Admit) => continue,
                    Some(Decision::Reserve { reason, .. } | Decision::Wait { reason, .. }) => {
                        format!(
                            "{} {} would wait now: {reason}",
                            step.component_type,
                            op.as_str()
                        )
                    }
                    Some(Decision::Refuse { reason }) => format!(
                        "{} {} would fail at its first command: power admission refused: {reason}",
                        step.component_type,
                        op.as_str()
                    ),
                };
                if !holds.contains(&text) {
                    holds.push(text);
                }
            }
        }
        Ok(holds)
    }
}

/// The plan's stages as the preview shows them.
fn stages(plan: &Plan) -> Vec<StagePlan> {
    plan.stages
        .iter()
        .map(|s| StagePlan {
            stage: s.stage.get(),
            steps: s
                .steps
                .iter()
                .map(|step| StepPlan {
                    step_index: u32::try_from(step.step_index).unwrap_or(u32::MAX),
                    component_type: step.component_type,
                    components: step.components.iter().map(|c| c.name.clone()).collect(),
                    skipped: step.skipped,
                    budget_ms: ms(step.budget),
                })
                .collect(),
        })
        .collect()
}
