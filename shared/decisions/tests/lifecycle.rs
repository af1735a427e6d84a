//! The task state machine without a database: a table of every (status,
//! event) pair, the stage order and the messages, generation fencing, and
//! properties over random event sequences (idempotence, fencing, the
//! invariants the store relies on).

use std::collections::BTreeMap;
use std::sync::Arc;

use flow_decisions::lifecycle::{
    Admission, Applied, CANCELLED, CANCELLED_WHILE_QUEUED, EXPIRED_MESSAGE, Effect, Event,
    LifecycleError, TaskPlan, TaskState, Transition, WAITING_FOR_WINDOW, WINDOW_ENDED, Window,
    apply,
};
use flow_decisions::plan;
use flow_hardware::ComponentTarget;
use flow_protocol::jobs::{ComponentResult, JobId, ResultMessage, StepOutcome};
use flow_protocol::readiness::{ComponentStatus, NotReady};
use flow_protocol::task::TaskEventKind;
use flow_protocol::{ComponentOutcome, RackId, StepStatus, TaskId, TaskStatus};
use flow_rules::{ComponentType, OperationCode, RuleDefinition};
use proptest::prelude::*;

const T0: u64 = 1_700_000_000_000;

fn components() -> Vec<ComponentTarget> {
    [
        (ComponentType::PowerShelf, 2),
        (ComponentType::NVSwitch, 1),
        (ComponentType::Compute, 3),
    ]
    .iter()
    .flat_map(|(t, n)| {
        (1..=*n).map(move |i| ComponentTarget {
            rack: "rack-01".into(),
            name: format!("{}-{i:02}", t.subject_token()),
            component_type: *t,
            bmc_url: format!("http://127.0.0.1:{}", 9000 + i),
            credential_ref: "sim".into(),
            resource_id: None,
        })
    })
    .collect()
}

/// Stage 1 shelves; stage 2 switches and a CDU step (skipped: none
/// targeted); stage 3 compute.
fn rule() -> RuleDefinition {
    let verify = serde_json::json!({"name": "VerifyPowerStatus", "timeout": "20s",
        "poll_interval": "1s", "parameters": {"expected_status": "on"}});
    RuleDefinition::from_value(&serde_json::json!({"version": "v1", "steps": [
        {"component_type": "powershelf", "stage": 1, "main_operation": {"name": "PowerControl"}, "post_operation": [verify]},
        {"component_type": "nvswitch", "stage": 2, "main_operation": {"name": "PowerControl"}},
        {"component_type": "cdu", "stage": 2, "main_operation": {"name": "PowerControl"}},
        {"component_type": "compute", "stage": 3, "max_parallel": 2, "main_operation": {"name": "PowerControl"}}
    ]}))
    .unwrap()
}

fn planned() -> TaskState {
    planned_with(rule())
}

fn planned_with(rule: RuleDefinition) -> TaskState {
    let components = components();
    let plan = plan(&rule, &components).unwrap();
    let task_plan = Arc::new(TaskPlan {
        operation: "power_on".parse::<OperationCode>().unwrap(),
        rule,
        components: plan.components.clone(),
        firmware: BTreeMap::new(),
        readiness_wait_ms: None,
        window: Window::default(),
        power_domains: Vec::new(),
        emergency: false,
    });
    TaskState::planned(TaskId::new(), RackId::new(), task_plan, &plan)
}

/// A planned task whose readiness gate waits at most 60 s.
fn planned_gated() -> TaskState {
    let mut s = planned();
    let mut plan = (*s.plan).clone();
    plan.readiness_wait_ms = Some(60_000);
    s.plan = Arc::new(plan);
    s
}

fn not_ready(name: &str) -> NotReady {
    NotReady {
        component: name.to_owned(),
        status: ComponentStatus::Maintenance,
    }
}

fn ok(state: &TaskState, event: Event, now: u64) -> Transition {
    apply(state, &event, now).unwrap_or_else(|e| panic!("{e}"))
}

fn running() -> TaskState {
    ok(&planned(), Event::Submitted(Admission::Start), T0).state
}

fn waiting() -> TaskState {
    ok(
        &planned(),
        Event::Submitted(Admission::Queue {
            expires_ms: T0 + 60_000,
        }),
        T0,
    )
    .state
}

fn result(state: &TaskState, step_index: u32, outcome: StepOutcome) -> Event {
    let generation = state.step(step_index).unwrap().generation;
    result_gen(state, step_index, generation, outcome)
}

fn result_gen(state: &TaskState, step_index: u32, generation: u32, outcome: StepOutcome) -> Event {
    let names: Vec<String> = state
        .plan
        .components
        .get(&state.step(step_index).unwrap().component_type)
        .map(|cs| cs.iter().map(|c| c.name.clone()).collect())
        .unwrap_or_default();
    Event::StepResult(ResultMessage {
        schema: 1,
        id: JobId {
            task: state.id,
            step_index,
            generation,
        },
        components: names
            .into_iter()
            .map(|n| {
                (
                    n,
                    ComponentResult {
                        status: ComponentOutcome::Done,
                        result: "sent On".into(),
                        calls: 1,
                        error: None,
                        actions: Vec::new(),
                        installed_version: None,
                    },
                )
            })
            .collect(),
        outcome,
        calls: 4,
        started_ms: T0,
        finished_ms: T0 + 1,
    })
}

fn failed() -> StepOutcome {
    StepOutcome::Failed {
        action: "main_operation (PowerControl)".into(),
        message: "powershelf-01 failed: permanent: HTTP 400".into(),
    }
}

fn statuses(state: &TaskState) -> Vec<StepStatus> {
    state.steps.iter().map(|s| s.status).collect()
}

fn jobs(t: &Transition) -> Vec<&flow_protocol::jobs::JobMessage> {
    t.effects
        .iter()
        .filter_map(|e| match e {
            Effect::PublishJob(j) => Some(&**j),
            _ => None,
        })
        .collect()
}

fn marks(t: &Transition) -> usize {
    t.effects
        .iter()
        .filter(|e| matches!(e, Effect::CancelMark(_)))
        .count()
}

fn promotes(t: &Transition) -> bool {
    t.effects
        .iter()
        .any(|e| matches!(e, Effect::PromoteNext(_)))
}

fn finished_event(t: &Transition) -> Option<(TaskStatus, String)> {
    t.effects.iter().find_map(|e| match e {
        Effect::Emit(ev) => match &ev.kind {
            TaskEventKind::TaskFinished { status, message } => Some((*status, message.clone())),
            _ => None,
        },
        _ => None,
    })
}

use StepStatus::{Cancelled, Completed, Failed, Pending, Running, Skipped};

#[test]
fn a_planned_task_has_pending_steps_and_skipped_absent_types() {
    let t = planned();
    assert_eq!(t.status, TaskStatus::Pending);
    assert_eq!(statuses(&t), [Pending, Pending, Skipped, Pending]);
    assert_eq!(
        t.steps.iter().map(|s| s.components).collect::<Vec<_>>(),
        [2, 1, 0, 3]
    );
}

#[test]
fn submission_starts_the_first_stage_with_its_jobs_and_deadlines() {
    let t = ok(&planned(), Event::Submitted(Admission::Start), T0);
    assert_eq!(t.state.status, TaskStatus::Running);
    assert_eq!(t.state.started_ms, Some(T0));
    assert_eq!(t.state.current_stage, Some(1));
    assert_eq!(statuses(&t.state), [Running, Pending, Skipped, Pending]);
    let step = &t.state.steps[0];
    assert_eq!(step.generation, 1);
    assert_eq!(step.deadline_ms, Some(T0 + step.budget_ms));
    let jobs = jobs(&t);
    assert_eq!(jobs.len(), 1);
    assert_eq!(jobs[0].id.generation, 1);
    assert_eq!(jobs[0].stage, 1);
    assert_eq!(jobs[0].deadline_ms, T0 + step.budget_ms);
    let names: Vec<&str> = jobs[0]
        .job
        .components
        .iter()
        .map(|c| c.name.as_str())
        .collect();
    assert_eq!(names, ["powershelf-01", "powershelf-02"]);
    assert_eq!(jobs[0].job.all_components[&ComponentType::Compute].len(), 3);
    assert!(matches!(
        &t.effects[0],
        Effect::Emit(e) if e.kind == TaskEventKind::StageStarted { stage: 1, steps: vec![0] }
    ));
    assert_eq!(t.applied(&planned_like(&t.state)), Applied::Recorded);
}

fn planned_like(s: &TaskState) -> TaskState {
    let mut p = s.clone();
    p.status = TaskStatus::Pending;
    p
}

#[test]
fn queued_submission_waits_with_its_expiry_and_nothing_to_publish() {
    let t = ok(
        &planned(),
        Event::Submitted(Admission::Queue { expires_ms: T0 + 5 }),
        T0,
    );
    assert_eq!(t.state.status, TaskStatus::Waiting);
    assert_eq!(t.state.queue_expires_ms, Some(T0 + 5));
    assert!(t.effects.is_empty());
}

#[test]
fn stages_run_in_order_and_the_task_completes_handing_on_its_rack() {
    let mut s = running();
    let t = ok(&s, result(&s, 0, StepOutcome::Completed), T0 + 10);
    assert_eq!(statuses(&t.state), [Completed, Running, Skipped, Pending]);
    assert_eq!(t.state.current_stage, Some(2));
    assert_eq!(t.state.steps[0].results.len(), 2);
    assert_eq!(t.state.steps[0].calls, 4);
    assert_eq!(t.state.steps[0].finished_ms, Some(T0 + 10));
    assert_eq!(jobs(&t).len(), 1);
    s = t.state;
    let t = ok(&s, result(&s, 1, StepOutcome::Completed), T0 + 20);
    assert_eq!(statuses(&t.state), [Completed, Completed, Skipped, Running]);
    assert_eq!(jobs(&t)[0].job.components.len(), 3);
    s = t.state;
    let t = ok(&s, result(&s, 3, StepOutcome::Completed), T0 + 30);
    assert_eq!(t.state.status, TaskStatus::Completed);
    assert_eq!(t.state.finished_ms, Some(T0 + 30));
    assert_eq!(
        finished_event(&t),
        Some((TaskStatus::Completed, String::new()))
    );
    assert!(promotes(&t) && marks(&t) == 0 && jobs(&t).is_empty());
    assert_eq!(t.applied(&s), Applied::Finished(TaskStatus::Completed));
}

#[test]
fn a_task_whose_last_stage_was_skipped_ends_at_that_stage() {
    let rule = RuleDefinition::from_value(&serde_json::json!({"version": "v1", "steps": [
        {"component_type": "compute", "stage": 1, "main_operation": {"name": "PowerControl"}},
        {"component_type": "cdu", "stage": 2, "main_operation": {"name": "PowerControl"}}
    ]}))
    .unwrap();
    let s = ok(&planned_with(rule), Event::Submitted(Admission::Start), T0).state;
    let t = ok(&s, result(&s, 0, StepOutcome::Completed), T0 + 1);
    assert_eq!(t.state.status, TaskStatus::Completed);
    assert_eq!(t.state.current_stage, Some(2));
}

#[test]
fn a_stage_waits_for_all_its_steps() {
    // Two steps in stage 1.
    let rule = RuleDefinition::from_value(&serde_json::json!({"version": "v1", "steps": [
        {"component_type": "powershelf", "stage": 1, "main_operation": {"name": "PowerControl"}},
        {"component_type": "nvswitch", "stage": 1, "main_operation": {"name": "PowerControl"}},
        {"component_type": "compute", "stage": 2, "main_operation": {"name": "PowerControl"}}
    ]}))
    .unwrap();
    let s = ok(&planned_with(rule), Event::Submitted(Admission::Start), T0).state;
    assert_eq!(statuses(&s), [Running, Running, Pending]);
    let t = ok(&s, result(&s, 1, StepOutcome::Completed), T0 + 1);
    assert_eq!(statuses(&t.state), [Running, Completed, Pending]);
    assert!(jobs(&t).is_empty());
    assert_eq!(t.applied(&s), Applied::Recorded);
    // A sibling's failure ends the task and stops the running sibling.
    let t = ok(&s, result(&s, 1, failed()), T0 + 1);
    assert_eq!(t.state.status, TaskStatus::Failed);
    assert_eq!(statuses(&t.state), [Cancelled, Failed, Cancelled]);
    assert_eq!(marks(&t), 1);
}

#[test]
fn a_failed_step_fails_the_task_with_its_action_and_no_later_stage_starts() {
    let s = running();
    let t = ok(&s, result(&s, 0, failed()), T0 + 5);
    assert_eq!(t.state.status, TaskStatus::Failed);
    assert_eq!(
        t.state.message,
        "stage 1 failed: step 0 failed: main_operation (PowerControl): powershelf-01 failed: permanent: HTTP 400"
    );
    assert_eq!(
        t.state.steps[0].error.as_deref(),
        Some("main_operation (PowerControl): powershelf-01 failed: permanent: HTTP 400")
    );
    assert_eq!(statuses(&t.state), [Failed, Cancelled, Skipped, Cancelled]);
    assert!(jobs(&t).is_empty());
    // Nothing else ran: no cancel mark needed.
    assert_eq!(marks(&t), 0);
    assert!(promotes(&t));
    assert_eq!(finished_event(&t).unwrap().0, TaskStatus::Failed);
}

#[test]
fn a_cancelled_step_terminates_the_task() {
    let s = running();
    let t = ok(&s, result(&s, 0, StepOutcome::Cancelled), T0 + 5);
    assert_eq!(t.state.status, TaskStatus::Terminated);
    assert_eq!(t.state.message, CANCELLED);
    assert_eq!(t.state.steps[0].error.as_deref(), Some(CANCELLED));
    assert!(promotes(&t));
}

#[test]
fn generations_fence_results() {
    let s = running();
    // An older generation (0: never queued) changes nothing.
    let t = ok(&s, result_gen(&s, 0, 0, StepOutcome::Completed), T0);
    assert_eq!(t, Transition::unchanged(&s));
    assert_eq!(t.applied(&s), Applied::Ignored);
    // A generation the step never had is refused.
    assert_eq!(
        apply(&s, &result_gen(&s, 0, 2, StepOutcome::Completed), T0),
        Err(LifecycleError::FutureGeneration {
            task: s.id,
            step_index: 0,
            got: 2,
            current: 1
        })
    );
    // A step the task does not have.
    let mut bad = result(&s, 0, StepOutcome::Completed);
    if let Event::StepResult(r) = &mut bad {
        r.id.step_index = 9;
    }
    assert_eq!(
        apply(&s, &bad, T0),
        Err(LifecycleError::UnknownStep {
            task: s.id,
            step_index: 9
        })
    );
    // A result for a step not running (pending, or already done).
    let t = ok(&s, result_gen(&s, 1, 0, StepOutcome::Completed), T0);
    assert_eq!(t, Transition::unchanged(&s));
    let done = ok(&s, result(&s, 0, StepOutcome::Completed), T0).state;
    let again = ok(&done, result_gen(&done, 0, 1, StepOutcome::Completed), T0);
    assert_eq!(again, Transition::unchanged(&done));
}

#[test]
fn a_deadline_fails_the_step_and_the_task_and_tells_the_worker_to_stop() {
    let s = running();
    let deadline = s.steps[0].deadline_ms.unwrap();
    let early = ok(
        &s,
        Event::DeadlinePassed {
            step_index: 0,
            generation: 1,
        },
        deadline - 1,
    );
    assert_eq!(early, Transition::unchanged(&s));
    let stale = ok(
        &s,
        Event::DeadlinePassed {
            step_index: 0,
            generation: 0,
        },
        deadline,
    );
    assert_eq!(stale, Transition::unchanged(&s));
    let t = ok(
        &s,
        Event::DeadlinePassed {
            step_index: 0,
            generation: 1,
        },
        deadline,
    );
    assert_eq!(t.state.status, TaskStatus::Failed);
    let budget =
        flow_rules::duration::format_short(std::time::Duration::from_millis(s.steps[0].budget_ms));
    let message = format!("step 0 exceeded its budget of {budget}");
    assert_eq!(t.state.message, message);
    assert_eq!(t.state.steps[0].error.as_deref(), Some(message.as_str()));
    assert_eq!(t.state.steps[0].status, Failed);
    assert_eq!(marks(&t), 1, "the overdue step may still run on a worker");
    assert!(promotes(&t));
}

#[test]
fn a_restore_sends_every_running_step_again_under_its_generation_with_a_new_deadline() {
    // Stage 1 done; stage 2 (the switch) running, as a backup recorded it.
    let s = running();
    let s = ok(&s, result(&s, 0, StepOutcome::Completed), T0 + 1_000).state;
    let s = ok(&s, result(&s, 1, StepOutcome::Completed), T0 + 2_000).state;
    let running_steps: Vec<u32> = s
        .steps
        .iter()
        .filter(|x| x.status == Running)
        .map(|x| x.step_index)
        .collect();
    assert!(!running_steps.is_empty());
    let later = T0 + 3_600_000;
    let t = ok(&s, Event::Restored, later);
    assert_eq!(t.state.status, TaskStatus::Running);
    assert_eq!(statuses(&t.state), statuses(&s), "no step moves");
    let sent: Vec<_> = jobs(&t);
    assert_eq!(
        sent.iter().map(|j| j.id.step_index).collect::<Vec<_>>(),
        running_steps
    );
    for j in &sent {
        let step = t.state.step(j.id.step_index).unwrap();
        let before = s.step(j.id.step_index).unwrap();
        assert_eq!(
            j.id.generation, before.generation,
            "same generation: same checkpoint"
        );
        assert_eq!(step.generation, before.generation);
        assert_eq!(j.deadline_ms, later + step.budget_ms);
        assert_eq!(step.deadline_ms, Some(later + step.budget_ms));
        assert_eq!(j.stage, step.stage);
    }
    assert_eq!(marks(&t), 0);
    assert!(!promotes(&t));
    assert!(finished_event(&t).is_none());
    // A result of that generation still applies.
    let step = sent[0].id.step_index;
    let done = ok(
        &t.state,
        result(&t.state, step, StepOutcome::Completed),
        later + 1,
    );
    assert_ne!(done.state.step(step).unwrap().status, Running);
    // A task being cancelled gets its mark again.
    let cancelling = ok(&s, Event::CancelRequested, T0 + 2_500).state;
    assert_eq!(marks(&ok(&cancelling, Event::Restored, later)), 1);
}

#[test]
fn a_cancel_request_marks_once_and_no_further_stage_starts() {
    let s = running();
    let t = ok(&s, Event::CancelRequested, T0 + 1);
    assert!(t.state.cancel_requested);
    assert_eq!(t.state.status, TaskStatus::Running);
    assert_eq!(marks(&t), 1);
    let s = t.state;
    assert_eq!(
        ok(&s, Event::CancelRequested, T0 + 2),
        Transition::unchanged(&s)
    );
    // The running step finished before it saw the mark: the task ends
    // instead of starting stage 2, and no second mark goes out.
    let t = ok(&s, result(&s, 0, StepOutcome::Completed), T0 + 3);
    assert_eq!(t.state.status, TaskStatus::Terminated);
    assert_eq!(t.state.message, CANCELLED);
    assert!(jobs(&t).is_empty() && marks(&t) == 0 && promotes(&t));
}

#[test]
fn a_waiting_task_starts_when_promoted_expires_in_time_and_cancels_at_once() {
    let s = waiting();
    let t = ok(&s, Event::Promoted, T0 + 10);
    assert_eq!(t.state.status, TaskStatus::Running);
    assert_eq!(t.state.started_ms, Some(T0 + 10));
    assert_eq!(t.state.queue_expires_ms, None);
    assert_eq!(jobs(&t).len(), 1);
    assert_eq!(
        ok(&s, Event::QueueExpired, T0 + 59_999),
        Transition::unchanged(&s)
    );
    let t = ok(&s, Event::QueueExpired, T0 + 60_000);
    assert_eq!(t.state.status, TaskStatus::Failed);
    assert_eq!(t.state.message, EXPIRED_MESSAGE);
    assert!(!promotes(&t), "a waiting task never held the rack");
    let t = ok(&s, Event::CancelRequested, T0 + 1);
    assert_eq!(t.state.status, TaskStatus::Terminated);
    assert_eq!(t.state.message, CANCELLED_WHILE_QUEUED);
    assert_eq!(marks(&t), 0);
    assert_eq!(
        statuses(&t.state),
        [Cancelled, Cancelled, Skipped, Cancelled]
    );
}

#[test]
fn a_readiness_gate_holds_the_task_until_its_components_are_ready_or_its_wait_ends() {
    // Gated: running (it holds its components) but nothing queued.
    let t = ok(&planned_gated(), Event::Submitted(Admission::Start), T0);
    assert_eq!(t.state.status, TaskStatus::Running);
    assert_eq!(t.state.readiness_until_ms, Some(T0 + 60_000));
    assert_eq!(t.state.started_ms, None);
    assert!(t.effects.is_empty(), "{:?}", t.effects);
    let held = t.state;
    // Not ready yet: it says what it waits for, once.
    let t = ok(
        &held,
        Event::ReadinessChecked(vec![not_ready("compute-01")]),
        T0 + 5_000,
    );
    assert_eq!(
        t.state.message,
        "waiting for components to be ready: compute-01 (maintenance)"
    );
    assert!(t.effects.is_empty());
    let again = ok(
        &t.state,
        Event::ReadinessChecked(vec![not_ready("compute-01")]),
        T0 + 10_000,
    );
    assert_eq!(again, Transition::unchanged(&t.state));
    // Ready: the first stage starts, as an ungated task's would.
    let started = ok(&t.state, Event::ReadinessChecked(Vec::new()), T0 + 15_000);
    assert_eq!(started.state.readiness_until_ms, None);
    assert_eq!(started.state.message, "");
    assert_eq!(started.state.started_ms, Some(T0 + 15_000));
    assert_eq!(jobs(&started).len(), 1);
    // Still not ready when the wait is over: it fails naming them and
    // hands its components on.
    let failed = ok(
        &held,
        Event::ReadinessChecked(vec![not_ready("compute-01"), not_ready("compute-02")]),
        T0 + 60_000,
    );
    assert_eq!(
        finished_event(&failed),
        Some((
            TaskStatus::Failed,
            "components not ready after 1m: compute-01 (maintenance), compute-02 (maintenance)"
                .to_owned()
        ))
    );
    assert!(promotes(&failed));
    assert_eq!(failed.state.readiness_until_ms, None);
    assert!(jobs(&failed).is_empty());
    // Cancelled while held: terminated at once, no cancel mark (nothing
    // runs).
    let cancelled = ok(&held, Event::CancelRequested, T0 + 1);
    assert_eq!(
        finished_event(&cancelled),
        Some((TaskStatus::Terminated, CANCELLED.to_owned()))
    );
    assert_eq!(marks(&cancelled), 0);
    assert!(promotes(&cancelled));
    // A task without a gate starts at once and ignores checks.
    let plain = running();
    assert_eq!(
        ok(
            &plain,
            Event::ReadinessChecked(vec![not_ready("compute-01")]),
            T0
        ),
        Transition::unchanged(&plain)
    );
}

#[test]
fn a_task_waits_for_its_window_and_fails_when_it_ends_unstarted() {
    let mut s = planned();
    let mut plan = (*s.plan).clone();
    plan.window = Window {
        not_before_ms: Some(T0 + 10_000),
        not_after_ms: Some(T0 + 20_000),
    };
    s.plan = Arc::new(plan);
    let queued = ok(
        &s,
        Event::Submitted(Admission::Queue {
            expires_ms: T0 + 20_000,
        }),
        T0,
    );
    assert_eq!(queued.state.status, TaskStatus::Waiting);
    assert_eq!(queued.state.message, WAITING_FOR_WINDOW);
    // Promoted early: nothing changes; in its window: it starts.
    assert_eq!(
        ok(&queued.state, Event::Promoted, T0 + 9_999),
        Transition::unchanged(&queued.state)
    );
    let started = ok(&queued.state, Event::Promoted, T0 + 10_000);
    assert_eq!(started.state.status, TaskStatus::Running);
    assert_eq!(started.state.message, "");
    assert_eq!(jobs(&started).len(), 1);
    // Its end passes while it waits: it fails, saying so.
    let ended = ok(&queued.state, Event::QueueExpired, T0 + 20_000);
    assert_eq!(
        finished_event(&ended),
        Some((TaskStatus::Failed, WINDOW_ENDED.to_owned()))
    );
    // A promotion after the end fails it too, and nothing is queued.
    let late = ok(&queued.state, Event::Promoted, T0 + 25_000);
    assert_eq!(late.state.status, TaskStatus::Failed);
    assert!(jobs(&late).is_empty());
}

#[test]
fn components_a_firmware_action_finished_are_recorded_with_their_version() {
    let s = running();
    let Event::StepResult(mut message) = result(&s, 0, StepOutcome::Completed) else {
        unreachable!()
    };
    // The first component was flashed, the second was already at another
    // version; a component whose firmware action never finished (none
    // here) would not be named.
    let mut names = message
        .components
        .keys()
        .cloned()
        .collect::<Vec<_>>()
        .into_iter();
    let (a, b) = (names.next().unwrap(), names.next().unwrap());
    message.components.get_mut(&a).unwrap().installed_version = Some("26.02".into());
    message.components.get_mut(&b).unwrap().installed_version = Some("26.01".into());
    let t = ok(&s, Event::StepResult(message), T0 + 1);
    let installed: Vec<(Vec<String>, String)> = t
        .effects
        .iter()
        .filter_map(|e| match e {
            Effect::FirmwareInstalled {
                components,
                version,
                ..
            } => Some((components.clone(), version.clone())),
            _ => None,
        })
        .collect();
    assert_eq!(
        installed,
        [(vec![b], "26.01".to_owned()), (vec![a], "26.02".to_owned())]
    );
    // A power step's result records nothing.
    let t = ok(&s, result(&s, 0, StepOutcome::Completed), T0 + 1);
    assert!(
        !t.effects
            .iter()
            .any(|e| matches!(e, Effect::FirmwareInstalled { .. }))
    );
}

#[test]
fn a_readiness_wait_never_outlasts_the_window() {
    let mut s = planned_gated();
    let mut plan = (*s.plan).clone();
    plan.window = Window {
        not_before_ms: None,
        not_after_ms: Some(T0 + 5_000),
    };
    s.plan = Arc::new(plan);
    let held = ok(&s, Event::Submitted(Admission::Start), T0).state;
    assert_eq!(
        held.readiness_until_ms,
        Some(T0 + 5_000),
        "capped at the end"
    );
    // Ready only after the end: it does not start.
    let late = ok(&held, Event::ReadinessChecked(Vec::new()), T0 + 5_000);
    assert_eq!(
        finished_event(&late),
        Some((TaskStatus::Failed, WINDOW_ENDED.to_owned()))
    );
    assert!(jobs(&late).is_empty());
}

#[test]
fn nothing_to_do_fails_at_start() {
    let mut s = planned();
    for step in &mut s.steps {
        step.status = Skipped;
    }
    let t = ok(&s, Event::Submitted(Admission::Start), T0);
    assert_eq!(t.state.status, TaskStatus::Failed);
    assert_eq!(t.state.message, flow_decisions::lifecycle::NOTHING_TO_DO);
    assert!(promotes(&t));
}

/// A state of each status, for the table.
fn states() -> Vec<TaskState> {
    let r = running();
    let completed = {
        let mut s = r.clone();
        for i in [0, 1, 3] {
            s = ok(&s, result(&s, i, StepOutcome::Completed), T0).state;
        }
        s
    };
    let failed = ok(&r, result(&r, 0, failed()), T0).state;
    let terminated = ok(&waiting(), Event::CancelRequested, T0).state;
    let gated = ok(&planned_gated(), Event::Submitted(Admission::Start), T0).state;
    vec![
        planned(),
        waiting(),
        r,
        completed,
        failed,
        terminated,
        gated,
    ]
}

/// One event of each kind for a state (results and deadlines aimed at its
/// current stage's first step, or step 0).
fn events(s: &TaskState) -> Vec<Event> {
    let step = s
        .steps
        .iter()
        .find(|x| x.status == Running)
        .map_or(0, |x| x.step_index);
    let generation = s.step(step).unwrap().generation;
    vec![
        Event::Submitted(Admission::Start),
        Event::Submitted(Admission::Queue { expires_ms: T0 }),
        result_gen(s, step, generation, StepOutcome::Completed),
        Event::DeadlinePassed {
            step_index: step,
            generation,
        },
        Event::CancelRequested,
        Event::QueueExpired,
        Event::Promoted,
        Event::ReadinessChecked(Vec::new()),
        Event::Restored,
    ]
}

/// What the table expects: the new status, `None` for "unchanged", or an
/// error.
#[derive(Debug, PartialEq)]
enum Expect {
    To(TaskStatus),
    Unchanged,
    Refused,
}

#[test]
fn every_status_and_event_pair_is_legal_or_refused_as_the_table_says() {
    use Expect::*;
    use TaskStatus as S;
    let far = T0 + 10 * 24 * 3600 * 1000;
    // Rows: Pending, Waiting, Running, Completed, Failed, Terminated, and
    // Running held by its readiness gate.
    // Columns: submit-start, submit-queue, result, deadline (far future),
    // cancel, expiry (far future), promotion, readiness checked (all ready),
    // restored from a backup.
    let table = [
        [
            To(S::Running),
            To(S::Waiting),
            Refused,
            Refused,
            Refused,
            Refused,
            Refused,
            Refused,
            Refused,
        ],
        [
            Refused,
            Refused,
            Refused,
            Refused,
            To(S::Terminated),
            To(S::Failed),
            To(S::Running),
            Refused,
            Unchanged,
        ],
        [
            Refused,
            Refused,
            To(S::Running),
            To(S::Failed),
            To(S::Running),
            Unchanged,
            Unchanged,
            Unchanged,
            To(S::Running),
        ],
        [
            Refused, Refused, Unchanged, Unchanged, Unchanged, Unchanged, Unchanged, Unchanged,
            Unchanged,
        ],
        [
            Refused, Refused, Unchanged, Unchanged, Unchanged, Unchanged, Unchanged, Unchanged,
            Unchanged,
        ],
        [
            Refused, Refused, Unchanged, Unchanged, Unchanged, Unchanged, Unchanged, Unchanged,
            Unchanged,
        ],
        [
            Refused,
            Refused,
            Unchanged,
            Unchanged,
            To(S::Terminated),
            Unchanged,
            Unchanged,
            To(S::Running),
            Unchanged,
        ],
    ];
    for (state, row) in states().iter().zip(table) {
        for (event, want) in events(state).iter().zip(row) {
            let got = match apply(state, event, far) {
                Err(LifecycleError::IllegalEvent { .. }) => Refused,
                Err(e) => panic!("{e}"),
                Ok(t) if t == Transition::unchanged(state) => Unchanged,
                Ok(t) => To(t.state.status),
            };
            assert_eq!(got, want, "{} on a {} task", event.name(), state.status);
        }
    }
}

#[test]
fn an_illegal_event_is_refused_with_a_typed_error_naming_it() {
    let s = waiting();
    let e = apply(&s, &Event::Submitted(Admission::Start), T0).unwrap_err();
    assert_eq!(
        e,
        LifecycleError::IllegalEvent {
            task: s.id,
            event: "submission",
            status: TaskStatus::Waiting
        }
    );
    assert_eq!(
        e.to_string(),
        format!(
            "task {}: a submission is not possible while it is waiting",
            s.id
        )
    );
}

// ---- properties --------------------------------------------------------

/// An event described relative to the state it is applied to.
#[derive(Debug, Clone)]
enum Abstract {
    Submit {
        queue: bool,
    },
    Result {
        step: usize,
        gen_delta: i8,
        outcome: u8,
    },
    Deadline {
        step: usize,
        gen_delta: i8,
    },
    Cancel,
    Restore,
    Expire,
    Promote,
    Ready {
        blocked: bool,
    },
}

fn abstract_event() -> impl Strategy<Value = Abstract> {
    prop_oneof![
        any::<bool>().prop_map(|queue| Abstract::Submit { queue }),
        (0usize..4, -1i8..=1, 0u8..6).prop_map(|(step, gen_delta, outcome)| Abstract::Result {
            step,
            gen_delta,
            outcome
        }),
        (0usize..4, -1i8..=1).prop_map(|(step, gen_delta)| Abstract::Deadline { step, gen_delta }),
        Just(Abstract::Cancel),
        Just(Abstract::Expire),
        Just(Abstract::Promote),
        any::<bool>().prop_map(|blocked| Abstract::Ready { blocked }),
        Just(Abstract::Restore),
    ]
}

fn concrete(s: &TaskState, a: &Abstract) -> Event {
    let pick = |i: usize| &s.steps[i % s.steps.len()];
    let generation = |i: usize, d: i8| pick(i).generation.saturating_add_signed(i32::from(d));
    match a {
        Abstract::Submit { queue: false } => Event::Submitted(Admission::Start),
        Abstract::Submit { queue: true } => Event::Submitted(Admission::Queue {
            expires_ms: T0 + 30_000,
        }),
        Abstract::Result {
            step,
            gen_delta,
            outcome,
        } => result_gen(
            s,
            pick(*step).step_index,
            generation(*step, *gen_delta),
            // Mostly completions, so tasks get somewhere.
            match outcome {
                0 => failed(),
                1 => StepOutcome::Cancelled,
                _ => StepOutcome::Completed,
            },
        ),
        Abstract::Deadline { step, gen_delta } => Event::DeadlinePassed {
            step_index: pick(*step).step_index,
            generation: generation(*step, *gen_delta),
        },
        Abstract::Cancel => Event::CancelRequested,
        Abstract::Expire => Event::QueueExpired,
        Abstract::Promote => Event::Promoted,
        Abstract::Ready { blocked: false } => Event::ReadinessChecked(Vec::new()),
        Abstract::Ready { blocked: true } => Event::ReadinessChecked(vec![not_ready("compute-01")]),
        Abstract::Restore => Event::Restored,
    }
}

/// What must hold of every state the machine reaches.
fn invariants(s: &TaskState) {
    if s.readiness_until_ms.is_some() {
        // Held by its gate: running, nothing started yet.
        assert_eq!(s.status, TaskStatus::Running, "{s:?}");
        assert!(s.steps.iter().all(|x| x.generation == 0), "{s:?}");
    }
    let running: Vec<_> = s.steps.iter().filter(|x| x.status == Running).collect();
    for step in &running {
        assert_eq!(Some(step.stage), s.current_stage, "{s:?}");
        assert!(step.generation >= 1 && step.deadline_ms.is_some());
    }
    if !running.is_empty() {
        assert_eq!(s.status, TaskStatus::Running);
        // No step of an earlier stage is still open.
        let stage = running[0].stage;
        assert!(
            s.steps
                .iter()
                .all(|x| x.stage >= stage || !x.status.is_open()),
            "{s:?}"
        );
    }
    if s.status.is_final() {
        assert!(s.finished_ms.is_some());
        assert!(s.steps.iter().all(|x| !x.status.is_open()), "{s:?}");
    }
    if s.status == TaskStatus::Completed {
        assert!(
            s.steps
                .iter()
                .all(|x| matches!(x.status, Completed | Skipped))
        );
    }
    assert!(
        s.steps
            .iter()
            .all(|x| x.status != Skipped || x.generation == 0)
    );
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: 512,
        failure_persistence: None,
        ..ProptestConfig::default()
    })]

    #[test]
    fn random_event_sequences_keep_the_invariants_and_are_idempotent(
        script in proptest::collection::vec((abstract_event(), 0u64..20_000_000), 1..40),
        gated in any::<bool>(),
    ) {
        let mut state = if gated { planned_gated() } else { planned() };
        let mut now = T0;
        let mut finished_events = 0;
        let mut promotions = 0;
        for (a, dt) in &script {
            now += dt;
            let event = concrete(&state, a);
            let before = state.clone();
            match apply(&state, &event, now) {
                Err(_) => {
                    // Refused: the caller keeps the state it had.
                }
                Ok(t) => {
                    finished_events += usize::from(super_finished(&t));
                    promotions += usize::from(promotes(&t));
                    // Jobs carry the generation the step now has.
                    for j in jobs(&t) {
                        let step = t.state.step(j.id.step_index).unwrap();
                        prop_assert_eq!(step.status, Running);
                        prop_assert_eq!(step.generation, j.id.generation);
                        prop_assert_eq!(j.id.task, t.state.id);
                    }
                    invariants(&t.state);
                    // The same event again is the same as once (or refused,
                    // which changes nothing either) — but for a restore,
                    // which sends the running steps' jobs again each time
                    // (under the same IDs) and changes nothing else.
                    if let Ok(again) = apply(&t.state, &event, now) {
                        if matches!(event, Event::Restored) {
                            prop_assert_eq!(&again.state, &t.state);
                            prop_assert_eq!(jobs(&again).len(), jobs(&t).len());
                        } else {
                            prop_assert_eq!(again, Transition::unchanged(&t.state));
                        }
                    }
                    // A final status never changes.
                    if before.status.is_final() {
                        prop_assert_eq!(&t, &Transition::unchanged(&before));
                    }
                    state = t.state;
                }
            }
        }
        prop_assert!(finished_events <= 1, "a task finishes once");
        prop_assert!(promotions <= 1, "a task hands on its rack once");
        prop_assert_eq!(finished_events == 1, state.status.is_final());
    }

    #[test]
    fn a_result_of_an_older_generation_changes_nothing(
        script in proptest::collection::vec((abstract_event(), 0u64..1_000_000), 0..20),
        step in 0usize..4,
    ) {
        let mut state = running();
        let mut now = T0;
        for (a, dt) in &script {
            now += dt;
            if let Ok(t) = apply(&state, &concrete(&state, a), now) {
                state = t.state;
            }
        }
        let s = &state.steps[step % state.steps.len()];
        if s.generation > 0 {
            for outcome in [StepOutcome::Completed, failed(), StepOutcome::Cancelled] {
                let stale = result_gen(&state, s.step_index, s.generation - 1, outcome);
                prop_assert_eq!(apply(&state, &stale, now), Ok(Transition::unchanged(&state)));
            }
        }
    }
}

fn super_finished(t: &Transition) -> bool {
    finished_event(t).is_some()
}
