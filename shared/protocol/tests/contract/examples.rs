//! Real values of every endpoint's request and reply types, and of the
//! messages on the task and hardware subjects: the examples the contract
//! test serializes and validates. Each endpoint's are given through its
//! marker type, so an example of the wrong type does not compile; options
//! are given both set and unset, enums in each variant.

use std::collections::BTreeMap;

use flow_protocol::access::*;
use flow_protocol::api::endpoint::{self as ep};
use flow_protocol::api::*;
use flow_protocol::audit::{ActorSource, AuditList, AuditListReply, AuditOutcome, AuditRecord};
use flow_protocol::event::*;
use flow_protocol::firmware::{
    BundleImage, BundleList, BundleListReply, BundlePublish, BundleRecord, BundleRef,
};
use flow_protocol::history::{
    ArchiveList, ArchiveListReply, ArchiveSegment, ArchiveShow, ArchiveShowReply, ArchiveVerify,
    ArchiveVerifyReply, ArchivedDetail, ArchivedFailure, AuditVerify, AuditVerifyReply, ChainSpan,
    SegmentKind, SegmentVerdict,
};
use flow_protocol::ids::RackRef;
use flow_protocol::jobs::{ActionCalls, ComponentResult, FirmwareImage, SubTarget};
use flow_protocol::power::*;
use flow_protocol::preview::*;
use flow_protocol::rack::{ComponentSpec, RackSpec};
use flow_protocol::readiness::{ComponentStatus, NotReady};
use flow_protocol::run::*;
use flow_protocol::schedule::*;
use flow_protocol::task::*;
use flow_protocol::{
    ComponentId, ComponentOutcome, EventId, EventRuleId, ExecutionId, RackId, RuleId, RunId,
    ScheduleId, StepStatus, TaskId, TaskStatus,
};
use flow_rules::{
    ComponentType, FirmwareOperation, OperationCode, OperationType, PowerOperation, builtin_rule,
    builtin_rules,
};
use serde_json::{Value, json};
use time::OffsetDateTime;
use time::macros::datetime;

/// One endpoint's examples, as JSON, and how serde reads a request body.
pub struct Examples {
    /// Request bodies, as serialized.
    pub requests: Vec<Value>,
    /// Reply bodies (in their envelope), as sent.
    pub replies: Vec<Value>,
    /// Whether serde reads a body as the endpoint's request.
    pub decodes: fn(&[u8]) -> bool,
}

/// Every endpoint's examples, by name.
#[derive(Default)]
pub struct Catalog(pub BTreeMap<&'static str, Examples>);

fn decodes<E: Endpoint>(body: &[u8]) -> bool {
    decode_request::<E::Request>(body).is_ok()
}

impl Catalog {
    /// Adds the examples of `E`, checking that each reads back equal from
    /// its JSON (so it is the type's real wire form).
    fn add<E: Endpoint>(&mut self, requests: Vec<E::Request>, replies: Vec<E::Reply>)
    where
        E::Request: PartialEq + std::fmt::Debug,
        E::Reply: PartialEq + std::fmt::Debug,
    {
        assert!(
            !requests.is_empty() && !replies.is_empty(),
            "{}: give a request and a reply",
            E::NAME
        );
        let requests = requests
            .into_iter()
            .map(|r| {
                let body = serde_json::to_vec(&r).unwrap();
                let back = decode_request::<E::Request>(&body);
                assert_eq!(back.as_ref(), Ok(&r), "{}: a request reads back", E::NAME);
                serde_json::from_slice(&body).unwrap()
            })
            .collect();
        let replies = replies
            .into_iter()
            .map(|r| {
                let reply = Ok(r);
                let body = encode_reply(&reply);
                assert_eq!(
                    decode_reply::<E::Reply>(&body),
                    reply,
                    "{}: a reply reads back",
                    E::NAME
                );
                serde_json::from_slice(&body).unwrap()
            })
            .collect();
        let previous = self.0.insert(
            E::NAME,
            Examples {
                requests,
                replies,
                decodes: decodes::<E>,
            },
        );
        assert!(previous.is_none(), "{}: examples given twice", E::NAME);
    }
}

const T0: OffsetDateTime = datetime!(2026-03-01 02:00:00.25 UTC);
const T1: OffsetDateTime = datetime!(2026-03-01 02:07:31 UTC);

fn rack_ref() -> RackRef {
    RackRef("rack-01".into())
}

fn power_on() -> OperationCode {
    OperationCode::Power(PowerOperation::PowerOn)
}

fn definition() -> Value {
    builtin_rule(power_on()).definition.to_json_value()
}

fn batch() -> Value {
    json!({
        "version": "v1",
        "rules": builtin_rules().iter().map(|r| r.to_json_value()).collect::<Vec<_>>(),
    })
}

fn association() -> Association {
    Association {
        rack_id: RackId::new(),
        rack_name: "rack-01".into(),
        operation: power_on(),
        rule_id: RuleId::new(),
    }
}

fn rule_record() -> RuleRecord {
    RuleRecord {
        id: RuleId::new(),
        name: "graceful power on".into(),
        description: "shelves, then switches, then trays".into(),
        operation_type: OperationType::PowerControl,
        operation: power_on(),
        is_default: true,
        revision: 3,
        definition: definition(),
        associations: vec![association()],
        created_at: T0,
        updated_at: T1.to_offset(time::macros::offset!(+2)),
    }
}

fn batch_item() -> BatchItem {
    BatchItem {
        id: RuleId::new(),
        name: "r".into(),
        operation: OperationCode::Firmware(FirmwareOperation::Upgrade),
    }
}

fn resolve_reply(source: RuleSource, stored: bool) -> ResolveReply {
    ResolveReply {
        source,
        reason: "bound to rack-01".into(),
        rule_id: stored.then(RuleId::new),
        revision: stored.then_some(2),
        name: "graceful power on".into(),
        operation: power_on(),
        definition: definition(),
    }
}

fn rack_spec() -> RackSpec {
    RackSpec {
        name: "rack-01".into(),
        manufacturer: "NVIDIA".into(),
        model: "GB200 NVL72".into(),
        serial: "S-1".into(),
        location: "dc1/row3/pos7".into(),
        labels: [("row".to_owned(), "B".to_owned())].into(),
        power_domains: vec!["row=B".parse().unwrap()],
        components: vec![
            ComponentSpec {
                component_type: "compute".into(),
                name: "compute-01".into(),
                slot: Some(1),
                manufacturer: "NVIDIA".into(),
                model: "GB200".into(),
                serial: "C-1".into(),
                firmware_version: "1.2.3".into(),
                bmc_url: "https://10.0.0.1".into(),
                credential_ref: "bmc".into(),
            },
            ComponentSpec {
                component_type: "NVLSwitch".into(),
                name: "switch-01".into(),
                slot: None,
                manufacturer: String::new(),
                model: String::new(),
                serial: String::new(),
                firmware_version: String::new(),
                bmc_url: "http://127.0.0.1:8800".into(),
                credential_ref: String::new(),
            },
        ],
    }
}

fn component_record(status: ComponentStatus, slot: Option<u32>) -> ComponentRecord {
    ComponentRecord {
        id: ComponentId::new(),
        component_type: ComponentType::Compute,
        name: "compute-01".into(),
        slot,
        manufacturer: "NVIDIA".into(),
        model: "GB200".into(),
        serial: "C-1".into(),
        firmware_version: "1.2.3".into(),
        bmc_url: "https://10.0.0.1".into(),
        credential_ref: "bmc".into(),
        status,
    }
}

fn rack_record() -> RackRecord {
    RackRecord {
        id: RackId::new(),
        name: "rack-01".into(),
        manufacturer: "NVIDIA".into(),
        model: "GB200 NVL72".into(),
        serial: "S-1".into(),
        location: "dc1/row3/pos7".into(),
        labels: [("row".to_owned(), "B".to_owned())].into(),
        power_domains: vec!["site".parse().unwrap(), "row=B".parse().unwrap()],
        components: vec![
            component_record(ComponentStatus::Ready, Some(1)),
            component_record(ComponentStatus::InUse, None),
            component_record(ComponentStatus::Maintenance, Some(3)),
        ],
        associations: vec![association()],
        created_at: T0,
    }
}

fn api_error() -> ApiError {
    ApiError::invalid(
        "the rule is invalid (2 errors)",
        vec!["steps[0]: unknown field `timeot`".into(), "…".into()],
    )
}

/// A submission with every option set.
fn full_submit() -> TaskSubmit {
    let mut s = TaskSubmit::new(
        "req-1".into(),
        OperationCode::Firmware(FirmwareOperation::Upgrade),
        vec![rack_ref()],
    );
    s.labels = [("row".to_owned(), "B".to_owned())].into();
    s.components = vec!["rack-01/compute-01".into()];
    s.component_types = vec![ComponentType::Compute, ComponentType::NVSwitch];
    s.description = "quarterly firmware".into();
    s.rule_id = Some(RuleId::new());
    s.firmware = [
        (
            ComponentType::Compute,
            FirmwareImage {
                image_uri: "http://images/compute-2.0.bin".into(),
                version: Some("2.0".into()),
                sub_targets: vec![SubTarget::Bmc, SubTarget::Bios],
                digest: Some(
                    "sha256:9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08"
                        .into(),
                ),
                size: Some(1_048_576),
            },
        ),
        (
            ComponentType::NVSwitch,
            FirmwareImage {
                image_uri: "http://images/switch.bin".into(),
                version: None,
                sub_targets: Vec::new(),
                digest: None,
                size: None,
            },
        ),
    ]
    .into();
    s.conflict = ConflictStrategy::Queue {
        timeout_seconds: 600,
    };
    s.override_readiness = true;
    s.readiness_timeout_seconds = Some(120);
    s.allow_version_change = true;
    s.reason = Some("tray 7 swapped, checked by hand".into());
    s.not_before = Some(T0);
    s.not_after = Some(T1);
    s
}

/// A submission with every option at its default.
fn plain_submit() -> TaskSubmit {
    TaskSubmit::new("req-2".into(), power_on(), vec![rack_ref()])
}

/// A firmware submission naming a published bundle.
fn bundle_submit() -> TaskSubmit {
    let mut s = TaskSubmit::new(
        "req-3".into(),
        OperationCode::Firmware(FirmwareOperation::Upgrade),
        vec![rack_ref()],
    );
    s.bundle = Some(flow_protocol::firmware::TaskBundle {
        name: "gb200-fw".into(),
        version: "2026.11".into(),
        sub_targets: vec![SubTarget::Nvos],
    });
    s
}

fn forced_submit() -> TaskSubmit {
    let mut s = TaskSubmit::new(
        String::new(),
        OperationCode::Power(PowerOperation::PowerOff),
        Vec::new(),
    );
    s.forced = true;
    s.labels = [("pod".to_owned(), "7".to_owned())].into();
    s
}

fn outcomes() -> Vec<RackOutcome> {
    let refused = ApiError::new(ErrorCode::Conflict, "rack-03 is busy");
    vec![
        RackOutcome {
            rack: "rack-01".into(),
            submission: Submission::Created(TaskId::new()),
        },
        RackOutcome {
            rack: "rack-02".into(),
            submission: Submission::Duplicate(TaskId::new()),
        },
        RackOutcome {
            rack: "rack-03".into(),
            submission: Submission::Queued {
                task_id: TaskId::new(),
                position: 2,
                expires_at: T1,
            },
        },
        RackOutcome {
            rack: "rack-04".into(),
            submission: Submission::Refused(refused),
        },
    ]
}

fn component_result(status: ComponentOutcome) -> ComponentResult {
    ComponentResult {
        status,
        result: "sent On".into(),
        calls: 3,
        error: (status == ComponentOutcome::Failed).then(|| "BMC timed out".into()),
        actions: vec![ActionCalls {
            action: "main_operation (PowerControl)".into(),
            attempts: 2,
            error: Some("503".into()),
            at_ms: vec![1_772_330_400_000, 1_772_330_401_000],
        }],
        installed_version: (status == ComponentOutcome::Done).then(|| "2.0".into()),
    }
}

fn step_record(status: StepStatus, started: bool) -> StepRecord {
    StepRecord {
        step_index: 0,
        stage: 1,
        component_type: ComponentType::PowerShelf,
        status,
        components: 2,
        budget_ms: 1_200_000,
        deadline: started.then_some(T1),
        started_at: started.then_some(T0),
        finished_at: started.then_some(T1),
        error: started.then(|| "a component failed".into()),
        results: [
            (
                "shelf-01".to_owned(),
                component_result(ComponentOutcome::Done),
            ),
            (
                "shelf-02".to_owned(),
                component_result(ComponentOutcome::Failed),
            ),
            (
                "shelf-03".to_owned(),
                component_result(ComponentOutcome::Pending),
            ),
        ]
        .into(),
        calls: 9,
        generation: 1,
    }
}

fn task_record(finished: bool) -> TaskRecord {
    TaskRecord {
        id: TaskId::new(),
        request_id: "req-1".into(),
        rack_id: RackId::new(),
        rack: "rack-01".into(),
        description: "quarterly firmware".into(),
        operation_type: OperationType::PowerControl,
        operation: power_on(),
        status: if finished {
            TaskStatus::Failed
        } else {
            TaskStatus::Running
        },
        rule_id: finished.then(RuleId::new),
        rule_revision: finished.then_some(2),
        rule_source: RuleSource::Builtin,
        rule_name: "builtin power_on".into(),
        rule: definition(),
        current_stage: finished.then_some(1),
        message: "step 0 failed".into(),
        created_at: T0,
        started_at: finished.then_some(T0),
        finished_at: finished.then_some(T1),
        not_before: finished.then_some(T0),
        not_after: finished.then_some(T1),
        schedule_id: finished.then(ScheduleId::new),
        run_id: finished.then(RunId::new),
        event_id: finished.then(EventId::new),
        power_waits: if finished {
            vec![PowerWait {
                component: "compute-01".into(),
                reason: "waiting for power budget in row=B: 1,180 of 1,200 kW".into(),
                since: T0,
            }]
        } else {
            Vec::new()
        },
        preempted_by: finished.then(EventId::new),
        firmware_snapshot: if finished {
            vec![flow_protocol::firmware::InstalledVersion {
                component: "compute-01".into(),
                component_type: ComponentType::Compute,
                version: "25.06-2".into(),
            }]
        } else {
            Vec::new()
        },
        archived: finished.then(|| ArchivedDetail {
            at: T1,
            segment: "tasks-20261207T180000Z-1a2b3c4d".into(),
            submitted_by: Some("OPS/alice".into()),
            steps: 2,
            components: 18,
            failed: 1,
            calls: 57,
            failures: vec![ArchivedFailure {
                step_index: 0,
                component_type: ComponentType::Compute,
                component: "compute-01".into(),
                status: flow_protocol::ComponentOutcome::Failed,
                error: Some("no answer".into()),
            }],
        }),
        steps: vec![
            step_record(StepStatus::Failed, true),
            step_record(StepStatus::Pending, false),
        ],
    }
}

fn task_summary(finished: bool) -> TaskSummary {
    TaskSummary {
        id: TaskId::new(),
        rack: "rack-01".into(),
        operation: power_on(),
        status: TaskStatus::Completed,
        current_stage: finished.then_some(3),
        message: String::new(),
        description: "nightly".into(),
        created_at: T0,
        finished_at: finished.then_some(T1),
    }
}

fn windows() -> Vec<MaintenanceWindow> {
    vec![
        MaintenanceWindow {
            cron: "0 1 * * *".into(),
            duration: "4h".into(),
            timezone: "Europe/Berlin".into(),
        },
        MaintenanceWindow {
            cron: "0 13 * * 6".into(),
            duration: "90m".into(),
            timezone: String::new(),
        },
    ]
}

fn schedule_create(spec: ScheduleSpec) -> ScheduleCreate {
    ScheduleCreate {
        name: "nightly restart".into(),
        spec,
        timezone: "Europe/Berlin".into(),
        overlap: Overlap::Queue,
        windows: windows(),
        task: full_submit(),
    }
}

fn schedule_record(spec: ScheduleSpec, paused: bool) -> ScheduleRecord {
    ScheduleRecord {
        id: ScheduleId::new(),
        name: "nightly restart".into(),
        spec,
        timezone: "UTC".into(),
        overlap: Overlap::Skip,
        windows: if paused { Vec::new() } else { windows() },
        task: if paused {
            plain_submit()
        } else {
            full_submit()
        },
        enabled: !paused,
        next_run_at: (!paused).then_some(T1),
        last_fired_at: (!paused).then_some(T0),
        revision: 4,
        created_at: T0,
        updated_at: T1,
    }
}

fn specs() -> Vec<ScheduleSpec> {
    vec![
        ScheduleSpec::Interval {
            every: "24h".into(),
        },
        ScheduleSpec::Cron {
            expression: "0 2 * * 1-5".into(),
        },
        ScheduleSpec::Once { at: T1 },
    ]
}

fn firing(windowed: bool) -> FiringRecord {
    FiringRecord {
        due_at: T0,
        fired_at: T1,
        late: true,
        trigger: if windowed {
            FiringTrigger::Scheduled
        } else {
            FiringTrigger::Manual
        },
        done: true,
        results: outcomes(),
        skipped: vec![Skipped {
            rack: "rack-05".into(),
            task_id: TaskId::new(),
        }],
        error: (!windowed).then(|| ApiError::new(ErrorCode::NotFound, "no rack carries row=Z")),
        window_start: windowed.then_some(T0),
        window_end: windowed.then_some(T1),
    }
}

fn gates() -> Vec<Gate> {
    vec![
        Gate {
            kind: GateKind::FailureRate { percent: 20 },
            scope: GateScope::Phase,
        },
        Gate {
            kind: GateKind::FailureCount { count: 3 },
            scope: GateScope::Run,
        },
    ]
}

fn run_create(phases: PhasePolicy, ordering: Ordering) -> RunCreate {
    let mut task = plain_submit();
    task.request_id = String::new();
    RunCreate {
        name: "fw-rollout".into(),
        description: "firmware 2.0, row by row".into(),
        task,
        phases,
        max_concurrent: 4,
        gates: gates(),
        auto_advance: true,
        ordering,
        windows: windows(),
        timezone: "UTC".into(),
        retry: RetryPolicy::default(),
    }
}

fn phase_counts() -> PhaseCounts {
    PhaseCounts {
        planned: 10,
        pending: 2,
        running: 3,
        completed: 4,
        failed: 1,
        skipped: 0,
    }
}

fn run_record(status: RunStatus, reason: RunReason, tripped: bool) -> RunRecord {
    RunRecord {
        id: RunId::new(),
        name: "fw-rollout".into(),
        description: String::new(),
        task: plain_submit(),
        status,
        reason,
        phase: 2,
        phases: vec![phase_counts(), PhaseCounts::default()],
        phase_policy: PhasePolicy::Percentages(vec![10, 50, 100]),
        max_concurrent: 4,
        gates: gates(),
        auto_advance: false,
        ordering: Ordering::Random { seed: Some(42) },
        windows: windows(),
        timezone: "UTC".into(),
        retry: RetryPolicy {
            timeout_seconds: 60,
            initial_seconds: 5,
            max_seconds: 30,
        },
        gate: tripped.then(|| GateState {
            gate: gates()[0],
            figure: "2/10 failed (20.0 %)".into(),
            at: T1,
        }),
        accepted: [1, 2],
        created_at: T0,
        updated_at: T1,
        finished_at: status.is_final().then_some(T1),
    }
}

fn run_target(status: TargetStatus, submitted: bool) -> RunTargetRecord {
    RunTargetRecord {
        rack: "rack-01".into(),
        phase: 1,
        seq: 1,
        status,
        task_id: submitted.then(TaskId::new),
        attempts: 2,
        message: if submitted {
            String::new()
        } else {
            "rack-01 is busy".into()
        },
        next_attempt_at: (!submitted).then_some(T1),
    }
}

fn rack_plan(outcome: PlanOutcome, full: bool) -> RackPlan {
    let duplicate = outcome == PlanOutcome::Duplicate;
    let refused = outcome == PlanOutcome::Refused;
    RackPlan {
        rack: "rack-01".into(),
        outcome,
        task_id: duplicate.then(TaskId::new),
        rule: full.then(|| PlannedRule::from(&resolve_reply(RuleSource::Explicit, true))),
        stages: if full {
            vec![StagePlan {
                stage: 1,
                steps: vec![
                    StepPlan {
                        step_index: 0,
                        component_type: ComponentType::Compute,
                        components: vec!["compute-01".into(), "compute-02".into()],
                        skipped: false,
                        budget_ms: 1_500_000,
                    },
                    StepPlan {
                        step_index: 1,
                        component_type: ComponentType::Cdu,
                        components: Vec::new(),
                        skipped: true,
                        budget_ms: 0,
                    },
                ],
            }]
        } else {
            Vec::new()
        },
        budget_ms: 1_500_000,
        expected_ms: 45_000,
        versions: if full {
            [
                VersionMove::Up,
                VersionMove::Down,
                VersionMove::Same,
                VersionMove::Unknown,
            ]
            .into_iter()
            .map(|direction| VersionChange {
                component: "compute-01".into(),
                component_type: ComponentType::Compute,
                installed: "1.0".into(),
                target: "2.0".into(),
                direction,
                wrong_way: direction == VersionMove::Down,
            })
            .collect()
        } else {
            Vec::new()
        },
        problems: if refused {
            vec![api_error()]
        } else {
            Vec::new()
        },
        holds: if full {
            vec!["queued behind 1 open task".into()]
        } else {
            Vec::new()
        },
        not_ready: if full {
            vec![NotReady {
                component: "compute-02".into(),
                status: ComponentStatus::Maintenance,
            }]
        } else {
            Vec::new()
        },
    }
}

fn rack_plans() -> Vec<RackPlan> {
    vec![
        rack_plan(PlanOutcome::Create, true),
        rack_plan(PlanOutcome::Queue, false),
        rack_plan(PlanOutcome::Duplicate, false),
        rack_plan(PlanOutcome::Refused, false),
    ]
}

fn window_plan() -> WindowPlan {
    WindowPlan {
        opens: T0,
        closes: T1,
        open_at_firing: false,
    }
}

fn actions() -> Vec<RuleAction> {
    let mut task = TaskSubmit::new(
        String::new(),
        OperationCode::Power(PowerOperation::PowerOff),
        Vec::new(),
    );
    task.forced = true;
    vec![
        RuleAction {
            name: "power_off_affected".into(),
            when: ActionCondition {
                severities: vec![Severity::Critical, Severity::Warning],
                component_types: vec![ComponentType::Compute],
                min_leaking_trays: Some(2),
                max_leaking_trays: Some(8),
            },
            kind: ActionKind::SubmitTask {
                target: TargetStrategy::AffectedComponents,
                task: Box::new(task),
                preempt: true,
                lock: true,
            },
        },
        RuleAction {
            name: "whole_rack".into(),
            when: ActionCondition::default(),
            kind: ActionKind::SubmitTask {
                target: TargetStrategy::Rack,
                task: Box::new(plain_submit()),
                preempt: false,
                lock: false,
            },
        },
        RuleAction {
            name: "page".into(),
            when: ActionCondition::default(),
            kind: ActionKind::Alert {
                severity: Severity::Ok,
                message: "leak".into(),
            },
        },
        RuleAction {
            name: "record".into(),
            when: ActionCondition::default(),
            kind: ActionKind::Noop,
        },
    ]
}

fn event_rule_spec() -> EventRuleSpec {
    EventRuleSpec {
        name: "leak-response".into(),
        description: "power off what a leak drips on".into(),
        event_type: EventType::LeakDetected,
        actions: actions(),
    }
}

fn event_rule_record(builtin: bool) -> EventRuleRecord {
    EventRuleRecord {
        id: (!builtin).then(EventRuleId::new),
        read_only: builtin,
        enabled: !builtin,
        revision: 2,
        spec: event_rule_spec(),
        created_at: T0,
        updated_at: T1,
    }
}

fn binding(scope: BindingScope) -> BindingRecord {
    BindingRecord {
        event_type: EventType::TemperatureCritical,
        scope,
        rule_id: EventRuleId::new(),
        rule_name: "leak-response".into(),
        enabled: true,
    }
}

pub fn hardware_event(origin: &str) -> HardwareEvent {
    HardwareEvent {
        source: "redfish".into(),
        key: "rack-01/compute-01/Leak/2026-03-01T02:00:00Z".into(),
        event_type: EventType::LeakDetected,
        severity: Severity::Critical,
        rack: "rack-01".into(),
        component: "compute-01".into(),
        message: "leak detected".into(),
        origin: origin.into(),
        observed_at: T0,
    }
}

fn event_record(cleared: bool) -> EventRecord {
    EventRecord {
        id: EventId::new(),
        event: hardware_event(if cleared { "" } else { "/redfish/v1/Chassis/1" }),
        received_at: T0,
        rule: "builtin:hardware.leak.detected".into(),
        executions: [
            ExecutionStatus::Pending,
            ExecutionStatus::Running,
            ExecutionStatus::Completed,
            ExecutionStatus::Failed,
            ExecutionStatus::Skipped,
        ]
        .into_iter()
        .map(|status| ExecutionRecord {
            id: ExecutionId::new(),
            action: "power_off_affected".into(),
            kind: "submit_task".into(),
            status,
            attempts: 1,
            next_attempt_at: (status == ExecutionStatus::Pending).then_some(T1),
            last_error: String::new(),
            targets: vec!["rack-01/compute-01".into()],
            tasks: vec![TaskId::new()],
        })
        .collect(),
        locks: if cleared {
            Vec::new()
        } else {
            vec![ComponentLock {
                rack: "rack-01".into(),
                component: "compute-01".into(),
                event_id: EventId::new(),
                since: T0,
            }]
        },
        cleared_at: cleared.then_some(T1),
        cleared_reason: if cleared {
            "tray dried and checked".into()
        } else {
            String::new()
        },
        cleared_by: if cleared {
            "alice".into()
        } else {
            String::new()
        },
    }
}

fn domain_record(limited: bool) -> PowerDomainRecord {
    PowerDomainRecord {
        name: "row=B".parse().unwrap(),
        budget_kw: limited.then_some(1200.5),
        max_shelves_off: limited.then_some(2),
        min_spacing_ms: limited.then_some(250),
        racks: vec!["rack-01".into()],
        steady_kw: 1180.0,
        counted_kw: if limited { 640.2 } else { 1180.0 },
        unknown: if limited { 12 } else { 0 },
        inrush_kw: 0.5,
        shelves_off: 1,
        waiting: 3,
        updated_at: T0,
    }
}

fn power_model(rack_model: &str) -> PowerModelSet {
    PowerModelSet {
        component_type: ComponentType::PowerShelf,
        rack_model: rack_model.into(),
        inrush_w: 3000,
        steady_w: 1500,
        settle_ms: 800,
    }
}

fn audit_record(outcome: AuditOutcome) -> AuditRecord {
    AuditRecord {
        id: 42,
        at: T0,
        actor: if outcome == AuditOutcome::Ok {
            "OPS/alice".into()
        } else {
            "development".into()
        },
        actor_source: if outcome == AuditOutcome::Ok {
            ActorSource::Verified
        } else {
            ActorSource::Development
        },
        claimed_actor: (outcome == AuditOutcome::Ok).then(|| "alice".into()),
        via: None,
        endpoint: "task.submit".into(),
        kind: flow_protocol::audit::EndpointKind::Change,
        racks: vec!["rack-01".into()],
        task_ids: vec![TaskId::new()],
        target: (outcome == AuditOutcome::Ok).then(|| "rule 1".into()),
        request: json!({"request_id": "r", "racks": ["rack-01"], "operation": "power_on"}),
        outcome,
        message: String::new(),
        reason: (outcome == AuditOutcome::Refused).then(|| "because".into()),
    }
}

/// The examples of every endpoint in the catalog.
pub fn catalog() -> Catalog {
    let mut c = Catalog::default();
    let rule_id = || RuleById { id: RuleId::new() };
    let rack_by_ref = || RackByRef { rack: rack_ref() };
    let task_by_id = || TaskById { id: TaskId::new() };
    let schedule = || ScheduleByRef::new("nightly restart");
    let run = || RunByRef {
        run: "fw-rollout".into(),
    };
    let event_rule = || EventRuleByRef {
        rule: "builtin:hardware.leak.detected".into(),
    };
    let domain = || PowerDomainByName {
        name: "row=B".parse().unwrap(),
    };

    c.add::<ep::RuleCreate>(
        vec![RuleCreate {
            name: "graceful power on".into(),
            description: "shelves first".into(),
            operation_type: "power_control".into(),
            operation: "power_on".into(),
            definition: definition(),
            is_default: true,
        }],
        vec![rule_record()],
    );
    c.add::<ep::RuleBatchCreate>(
        vec![RuleBatchCreate {
            batch: batch(),
            overwrite: true,
        }],
        vec![
            BatchCreateReply {
                created: vec![batch_item()],
                overwritten: vec![batch_item()],
                skipped: vec![batch_item()],
            },
            BatchCreateReply::default(),
        ],
    );
    c.add::<ep::RuleGet>(vec![rule_id()], vec![rule_record()]);
    c.add::<ep::RuleList>(
        vec![
            RuleList::default(),
            RuleList {
                operation_type: Some(OperationType::FirmwareControl),
                operation: Some(OperationCode::Decommission),
                default_only: true,
                offset: 100,
                limit: Some(50),
            },
        ],
        vec![RuleListReply {
            rules: vec![RuleSummary {
                id: RuleId::new(),
                name: "r".into(),
                operation_type: OperationType::Decommission,
                operation: OperationCode::Decommission,
                is_default: false,
                revision: 1,
                created_at: T0,
            }],
            total: 1,
        }],
    );
    c.add::<ep::RuleUpdate>(
        vec![
            RuleUpdate {
                id: RuleId::new(),
                name: Some("renamed".into()),
                description: Some("new".into()),
                definition: Some(definition()),
            },
            RuleUpdate {
                id: RuleId::new(),
                name: None,
                description: None,
                definition: None,
            },
        ],
        vec![rule_record()],
    );
    c.add::<ep::RuleDelete>(
        vec![RuleDelete {
            id: RuleId::new(),
            force: true,
        }],
        vec![RuleDeleteReply {
            deleted: true,
            associations_removed: 2,
        }],
    );
    c.add::<ep::RuleSetDefault>(vec![rule_id()], vec![rule_record()]);
    c.add::<ep::RuleAssociate>(
        vec![RuleAssociate {
            rack: rack_ref(),
            rule_id: RuleId::new(),
        }],
        vec![association()],
    );
    c.add::<ep::RuleDisassociate>(
        vec![RuleDisassociate {
            rack: RackRef(RackId::new().to_string()),
            operation: OperationCode::Power(PowerOperation::ColdReset),
        }],
        vec![DisassociateReply { removed: false }],
    );
    c.add::<ep::RuleResolve>(
        vec![
            RuleResolve {
                rack: rack_ref(),
                operation: power_on(),
                rule_id: Some(RuleId::new()),
            },
            RuleResolve {
                rack: rack_ref(),
                operation: power_on(),
                rule_id: None,
            },
        ],
        RuleSource::ALL
            .into_iter()
            .map(|s| resolve_reply(s, s != RuleSource::Builtin))
            .collect(),
    );
    c.add::<ep::RuleHistory>(
        vec![rule_id()],
        vec![HistoryReply {
            rule_id: RuleId::new(),
            operation: power_on(),
            revisions: vec![RevisionRecord {
                revision: 1,
                name: "r".into(),
                description: String::new(),
                definition: definition(),
                created_at: T0,
            }],
        }],
    );
    c.add::<ep::RackCreate>(vec![RackCreate { rack: rack_spec() }], vec![rack_record()]);
    c.add::<ep::RackGet>(vec![rack_by_ref()], vec![rack_record()]);
    c.add::<ep::RackList>(
        vec![
            RackList::default(),
            RackList {
                labels: [("row".to_owned(), "B".to_owned())].into(),
            },
        ],
        vec![RackListReply {
            racks: vec![RackSummary {
                id: RackId::new(),
                name: "rack-01".into(),
                model: "GB200 NVL72".into(),
                location: String::new(),
                labels: BTreeMap::new(),
                components: vec![(ComponentType::Compute, 18), (ComponentType::Ums, 1)],
                created_at: T0,
            }],
        }],
    );
    c.add::<ep::RackDelete>(vec![rack_by_ref()], vec![RackDeleteReply { deleted: true }]);
    c.add::<ep::RackLabel>(
        vec![RackLabel {
            rack: rack_ref(),
            set: [("row".to_owned(), "C".to_owned())].into(),
            remove: vec!["pod".into()],
        }],
        vec![rack_record()],
    );
    c.add::<ep::ComponentStatusSet>(
        vec![ComponentStatusSet {
            components: vec!["rack-01/compute-01".into(), ComponentId::new().to_string()],
            status: ComponentStatus::InUse,
        }],
        vec![ComponentStatusReply {
            components: vec![ComponentStatusEntry {
                rack: "rack-01".into(),
                component: "compute-01".into(),
                status: ComponentStatus::Maintenance,
            }],
        }],
    );
    c.add::<ep::TaskSubmit>(
        vec![
            full_submit(),
            plain_submit(),
            forced_submit(),
            bundle_submit(),
        ],
        vec![TaskSubmitReply {
            results: outcomes(),
        }],
    );
    c.add::<ep::TaskPlan>(
        vec![full_submit(), plain_submit()],
        vec![TaskPlanReply {
            results: rack_plans(),
        }],
    );
    c.add::<ep::TaskGet>(
        vec![task_by_id()],
        vec![task_record(true), task_record(false)],
    );
    c.add::<ep::TaskList>(
        vec![TaskList::default(), TaskList { limit: Some(10) }],
        vec![
            TaskListReply {
                tasks: vec![task_summary(true), task_summary(false)],
            },
            TaskListReply::default(),
        ],
    );
    c.add::<ep::TaskCancel>(
        vec![task_by_id()],
        [
            CancelOutcome::Cancelling,
            CancelOutcome::CancelledWhileQueued,
            CancelOutcome::CancelledBeforeStart,
            CancelOutcome::AlreadyFinished,
        ]
        .into_iter()
        .map(|outcome| TaskCancelReply {
            cancelling: outcome == CancelOutcome::Cancelling,
            outcome,
            status: TaskStatus::Terminated,
        })
        .collect(),
    );
    c.add::<ep::TaskCounts>(
        vec![TaskCountsRequest {}],
        vec![TaskCounts {
            by_status: TaskStatus::ALL.iter().map(|s| (*s, 3)).collect(),
        }],
    );
    c.add::<ep::ScheduleCreate>(
        specs().into_iter().map(schedule_create).collect(),
        specs()
            .into_iter()
            .map(|s| schedule_record(s, false))
            .collect(),
    );
    c.add::<ep::SchedulePlan>(
        vec![schedule_create(specs().remove(1))],
        vec![SchedulePlanReply {
            name: "nightly restart".into(),
            timezone: "Europe/Berlin".into(),
            firings: vec![
                FiringPlan {
                    at: T0,
                    local: "2026-03-01 03:00 CET".into(),
                    window: Some(window_plan()),
                },
                FiringPlan {
                    at: T1,
                    local: "2026-03-01 03:07 CET".into(),
                    window: None,
                },
            ],
            racks: rack_plans(),
        }],
    );
    c.add::<ep::ScheduleGet>(
        vec![schedule()],
        vec![schedule_record(specs().remove(0), true)],
    );
    c.add::<ep::ScheduleList>(
        vec![ScheduleList::default(), ScheduleList { enabled_only: true }],
        vec![ScheduleListReply {
            schedules: vec![schedule_record(specs().remove(2), false)],
        }],
    );
    c.add::<ep::ScheduleUpdate>(
        vec![
            ScheduleUpdate {
                schedule: "nightly restart".into(),
                revision: 4,
                name: Some("weekly restart".into()),
                spec: Some(specs().remove(1)),
                timezone: Some("UTC".into()),
                overlap: Some(Overlap::Skip),
                windows: Some(Vec::new()),
            },
            ScheduleUpdate {
                schedule: ScheduleId::new().to_string(),
                revision: 1,
                name: None,
                spec: None,
                timezone: None,
                overlap: None,
                windows: None,
            },
        ],
        vec![schedule_record(specs().remove(1), false)],
    );
    c.add::<ep::SchedulePause>(
        vec![schedule()],
        vec![schedule_record(specs().remove(0), true)],
    );
    c.add::<ep::ScheduleResume>(
        vec![schedule()],
        vec![schedule_record(specs().remove(0), false)],
    );
    c.add::<ep::ScheduleTrigger>(vec![schedule()], vec![firing(true), firing(false)]);
    c.add::<ep::ScheduleDelete>(
        vec![schedule()],
        vec![ScheduleDeleteReply {
            id: ScheduleId::new(),
        }],
    );
    c.add::<ep::ScheduleHistory>(
        vec![ScheduleByRef {
            schedule: "nightly restart".into(),
            limit: Some(5),
        }],
        vec![ScheduleHistoryReply {
            firings: vec![firing(true), firing(false)],
        }],
    );
    c.add::<ep::RunCreate>(
        vec![
            run_create(
                PhasePolicy::Percentages(vec![1, 10, 50, 100]),
                Ordering::default(),
            ),
            run_create(PhasePolicy::Counts(vec![2, 20]), Ordering::RowByRow),
            run_create(PhasePolicy::Equal(4), Ordering::RoundRobinRows),
            run_create(PhasePolicy::Equal(1), Ordering::Random { seed: Some(7) }),
        ],
        vec![run_record(RunStatus::Pending, RunReason::None, false)],
    );
    c.add::<ep::RunPlan>(
        vec![run_create(PhasePolicy::Equal(2), Ordering::RowByRow)],
        vec![
            RunPlanReply {
                name: "fw-rollout".into(),
                ordering: Ordering::Random { seed: Some(42) },
                phases: vec![PhasePlan {
                    phase: 1,
                    racks: vec!["rack-01".into(), "rack-02".into()],
                }],
                max_concurrent: 4,
                gates: gates(),
                auto_advance: true,
                timezone: "UTC".into(),
                window: Some(window_plan()),
                racks: rack_plans(),
            },
            RunPlanReply {
                name: "fw-rollout".into(),
                ordering: Ordering::RoundRobinRows,
                phases: Vec::new(),
                max_concurrent: 1,
                gates: Vec::new(),
                auto_advance: false,
                timezone: "UTC".into(),
                window: None,
                racks: Vec::new(),
            },
        ],
    );
    c.add::<ep::RunGet>(
        vec![run()],
        vec![
            run_record(RunStatus::Paused, RunReason::SafetyGate, true),
            run_record(
                RunStatus::CompletedWithFailures,
                RunReason::OutsideWindow,
                false,
            ),
        ],
    );
    c.add::<ep::RunList>(
        vec![RunList::default(), RunList { limit: Some(3) }],
        vec![RunListReply {
            runs: RunStatus::ALL
                .iter()
                .zip(RunReason::ALL.iter().cycle())
                .map(|(s, r)| run_record(*s, *r, false))
                .collect(),
        }],
    );
    c.add::<ep::RunTargets>(
        vec![
            RunTargets {
                run: "fw-rollout".into(),
                phase: Some(1),
            },
            RunTargets {
                run: RunId::new().to_string(),
                phase: None,
            },
        ],
        vec![RunTargetsReply {
            targets: TargetStatus::ALL
                .iter()
                .map(|s| run_target(*s, *s != TargetStatus::Blocked))
                .collect(),
        }],
    );
    c.add::<ep::RunPause>(
        vec![run()],
        vec![run_record(
            RunStatus::Paused,
            RunReason::OperatorPaused,
            false,
        )],
    );
    c.add::<ep::RunResume>(
        vec![run()],
        vec![run_record(RunStatus::Running, RunReason::None, true)],
    );
    c.add::<ep::RunAdvance>(
        vec![
            RunAdvance {
                run: "fw-rollout".into(),
                expect_phase: Some(1),
            },
            RunAdvance {
                run: "fw-rollout".into(),
                expect_phase: None,
            },
        ],
        vec![run_record(RunStatus::Running, RunReason::PhaseGate, false)],
    );
    c.add::<ep::RunCancel>(
        vec![run()],
        vec![run_record(
            RunStatus::Cancelled,
            RunReason::ConflictRetryTimeout,
            false,
        )],
    );
    c.add::<ep::EventRuleCreate>(
        vec![EventRuleCreate {
            spec: event_rule_spec(),
            enabled: true,
        }],
        vec![event_rule_record(false)],
    );
    c.add::<ep::EventRuleGet>(vec![event_rule()], vec![event_rule_record(true)]);
    c.add::<ep::EventRuleList>(
        vec![EventRuleList {}],
        vec![EventRuleListReply {
            rules: vec![event_rule_record(false), event_rule_record(true)],
        }],
    );
    c.add::<ep::EventRuleUpdate>(
        vec![EventRuleUpdate {
            rule: "leak-response".into(),
            revision: 2,
            spec: event_rule_spec(),
        }],
        vec![event_rule_record(false)],
    );
    c.add::<ep::EventRuleEnable>(
        vec![EventRuleEnable {
            rule: "leak-response".into(),
            enabled: false,
        }],
        vec![event_rule_record(false)],
    );
    c.add::<ep::EventRuleDelete>(
        vec![event_rule()],
        vec![EventRuleDeleteReply {
            id: EventRuleId::new(),
            bindings_removed: 1,
        }],
    );
    c.add::<ep::EventRuleBind>(
        vec![
            EventRuleBind {
                rule: "leak-response".into(),
                scope: BindingScope::Site,
            },
            EventRuleBind {
                rule: "leak-response".into(),
                scope: BindingScope::Rack("rack-01".into()),
            },
        ],
        vec![binding(BindingScope::Rack("rack-01".into()))],
    );
    c.add::<ep::EventRuleUnbind>(
        vec![EventRuleUnbind {
            event_type: EventType::TemperatureCritical,
            scope: BindingScope::Site,
        }],
        vec![UnbindReply { removed: true }],
    );
    c.add::<ep::EventRuleBindings>(
        vec![BindingList {}],
        vec![BindingListReply {
            bindings: vec![
                binding(BindingScope::Site),
                binding(BindingScope::Rack("rack-01".into())),
            ],
        }],
    );
    c.add::<ep::EventPublish>(
        vec![hardware_event(""), hardware_event("/redfish/v1/Chassis/1")],
        vec![EventPublishReply {
            id: EventId::new(),
            created: true,
        }],
    );
    c.add::<ep::EventGet>(
        vec![EventById { id: EventId::new() }],
        vec![event_record(false), event_record(true)],
    );
    c.add::<ep::EventList>(
        vec![
            EventList::default(),
            EventList {
                rack: Some("rack-01".into()),
                limit: Some(5),
            },
        ],
        vec![EventListReply {
            events: vec![event_record(true)],
        }],
    );
    c.add::<ep::EventClear>(
        vec![
            EventClear {
                id: EventId::new(),
                reason: "tray dried".into(),
                by: "alice".into(),
            },
            EventClear {
                id: EventId::new(),
                reason: "tray dried".into(),
                by: String::new(),
            },
        ],
        vec![event_record(true)],
    );
    c.add::<ep::PowerDomainSet>(
        vec![
            PowerDomainSet {
                name: "row=B".parse().unwrap(),
                budget_kw: Some(1200.0),
                max_shelves_off: Some(2),
                min_spacing_ms: Some(250),
            },
            PowerDomainSet {
                name: "pdu/3".parse().unwrap(),
                budget_kw: None,
                max_shelves_off: None,
                min_spacing_ms: None,
            },
        ],
        vec![domain_record(true), domain_record(false)],
    );
    c.add::<ep::PowerDomainGet>(vec![domain()], vec![domain_record(true)]);
    c.add::<ep::PowerDomainList>(
        vec![PowerDomainList {}],
        vec![PowerDomainListReply {
            domains: vec![domain_record(false)],
        }],
    );
    c.add::<ep::PowerDomainDelete>(
        vec![domain()],
        vec![PowerDomainDeleteReply { deleted: true }],
    );
    c.add::<ep::PowerModelSet>(
        vec![power_model("GB200 NVL72"), power_model("")],
        vec![power_model("GB200 NVL72"), power_model("")],
    );
    c.add::<ep::PowerModelList>(
        vec![PowerModelList {}],
        vec![PowerModelListReply {
            models: vec![power_model(""), power_model("GB200 NVL72")],
        }],
    );
    c.add::<ep::RackPowerDomains>(
        vec![RackPowerDomains {
            rack: rack_ref(),
            domains: vec!["site".parse().unwrap(), "zone:east".parse().unwrap()],
        }],
        vec![rack_record()],
    );
    c.add::<ep::PowerAdmit>(
        vec![PowerAdmit {
            task: TaskId::new(),
            rack: "rack-01".into(),
            component: "shelf-01".into(),
            component_type: ComponentType::PowerShelf,
            operation: PowerOperation::ForcePowerOff,
            domains: vec!["row=B".parse().unwrap()],
            emergency: true,
            observed: Some(flow_protocol::power::SeenPower {
                power: flow_protocol::state::PowerState::On,
                at_ms: 1_772_330_400_000,
            }),
            replaces_ms: Some(1_772_330_399_250),
        }],
        vec![
            Admission::Granted,
            Admission::Reserved {
                at_ms: 1_772_330_400_250,
                send_by_ms: 1_772_330_400_300,
                reason: "waiting for power budget in row=B: 1,180 of 1,200 kW".into(),
            },
            Admission::Wait {
                until_ms: 1_772_330_401_000,
                reason: "2 of 2 shelves off in row=B".into(),
            },
            Admission::Refused {
                reason: "row=B's budget is below its steady draw".into(),
            },
        ],
    );
    c.add::<ep::PowerSent>(
        vec![flow_protocol::power::PowerSent {
            task: TaskId::new(),
            rack: "rack-01".into(),
            sent: vec![flow_protocol::power::SentCommand {
                component: "compute-01".into(),
                operation: PowerOperation::PowerOn,
                at_ms: 1_772_330_400_260,
            }],
        }],
        vec![flow_protocol::power::PowerSentReply { grants: 1 }],
    );
    c.add::<ep::RackPower>(
        vec![flow_protocol::power::RackPowerRequest { rack: rack_ref() }],
        vec![flow_protocol::power::RackPowerReply {
            rack: "rack-01".into(),
            domains: vec!["row=B".parse().unwrap()],
            known_for_s: 60,
            task: Some(TaskId::new()),
            components: vec![
                flow_protocol::power::ComponentPower {
                    component: "compute-01".into(),
                    component_type: ComponentType::Compute,
                    power: flow_protocol::state::PowerState::On,
                    reachable: true,
                    source: Some(flow_protocol::state::ObservationSource::Telemetry),
                    observed_at: Some(T0),
                    age_s: Some(3.2),
                    measured_w: Some(5_612),
                    steady_w: 5_400,
                    counted: flow_protocol::power::Counted::On,
                    counted_w: 5_612,
                    desired: Some(flow_protocol::state::PowerState::On),
                    inrush_w: None,
                    held: None,
                },
                flow_protocol::power::ComponentPower {
                    component: "compute-02".into(),
                    component_type: ComponentType::Compute,
                    power: flow_protocol::state::PowerState::Off,
                    reachable: false,
                    source: None,
                    observed_at: None,
                    age_s: None,
                    measured_w: None,
                    steady_w: 5_400,
                    counted: flow_protocol::power::Counted::Unknown,
                    counted_w: 5_400,
                    desired: None,
                    inrush_w: Some(3_600),
                    held: Some("waiting for power budget in row=B: 1,180 of 1,200 kW".into()),
                },
            ],
        }],
    );
    c.add::<ep::AuditList>(
        vec![
            AuditList::default(),
            AuditList {
                since: Some(T0),
                until: Some(T1),
                actor: Some("alice".into()),
                rack: Some("rack-01".into()),
                endpoint: Some("task.submit".into()),
                outcome: Some(AuditOutcome::Refused),
                limit: Some(10),
            },
        ],
        vec![AuditListReply {
            records: AuditOutcome::ALL.into_iter().map(audit_record).collect(),
        }],
    );
    let hash = |c: char| format!("sha256:{}", c.to_string().repeat(64));
    c.add::<ep::AuditVerify>(
        vec![AuditVerify {}],
        vec![
            AuditVerifyReply {
                ok: true,
                archived: 500,
                sealed: 1_204,
                unsealed: 3,
                head: hash('c'),
                problems: Vec::new(),
            },
            AuditVerifyReply {
                ok: false,
                archived: 0,
                sealed: 1_204,
                unsealed: 0,
                head: hash('c'),
                problems: vec![format!(
                    "seal 7 (audit record 7): the record hashes to {}, sealed as {} (the record was changed)",
                    hash('d'),
                    hash('e')
                )],
            },
        ],
    );
    let audit_segment = ArchiveSegment {
        segment: "audit-20261207T180000Z-5e6f7a8b".into(),
        kind: SegmentKind::Audit,
        created_at: "2026-12-07T18:00:00.000000Z".into(),
        records: 500,
        first_at: Some("2025-10-01T00:00:00.000000Z".into()),
        last_at: Some("2025-10-31T23:59:59.000000Z".into()),
        bytes: 48_213,
        sha256: hash('a'),
        chain: Some(ChainSpan {
            first_seq: 1,
            last_seq: 500,
            prev_hash: hash('0'),
            last_hash: hash('b'),
        }),
    };
    let task_segment = ArchiveSegment {
        segment: "tasks-20261207T180000Z-1a2b3c4d".into(),
        kind: SegmentKind::Tasks,
        chain: None,
        ..audit_segment.clone()
    };
    c.add::<ep::ArchiveList>(
        vec![
            ArchiveList::default(),
            ArchiveList {
                kind: Some(SegmentKind::Audit),
            },
        ],
        vec![ArchiveListReply {
            dir: "/var/lib/flow/archive".into(),
            segments: vec![task_segment.clone(), audit_segment.clone()],
        }],
    );
    c.add::<ep::ArchiveShow>(
        vec![
            ArchiveShow {
                segment: task_segment.segment.clone(),
                task: None,
            },
            ArchiveShow {
                segment: task_segment.segment.clone(),
                task: Some(TaskId::new()),
            },
        ],
        vec![
            ArchiveShowReply {
                segment: audit_segment.clone(),
                task: None,
            },
            ArchiveShowReply {
                segment: task_segment.clone(),
                task: Some(serde_json::to_value(task_record(true)).unwrap()),
            },
        ],
    );
    c.add::<ep::ArchiveVerify>(
        vec![
            ArchiveVerify::default(),
            ArchiveVerify {
                segment: Some(task_segment.segment.clone()),
            },
        ],
        vec![ArchiveVerifyReply {
            ok: false,
            segments: vec![
                SegmentVerdict {
                    segment: task_segment.segment.clone(),
                    records: 500,
                    problems: Vec::new(),
                },
                SegmentVerdict {
                    segment: audit_segment.segment.clone(),
                    records: 500,
                    problems: vec![format!(
                        "its data hashes to {}, the manifest says {}",
                        hash('f'),
                        hash('a')
                    )],
                },
            ],
            chain_problems: Vec::new(),
        }],
    );
    let grant_record =
        |id: i64, racks: Vec<String>, labels: BTreeMap<String, String>| AccessGrantRecord {
            id,
            subject: "OPS/alice".into(),
            role: Role::Operator,
            racks,
            labels,
            granted_by: "OPS/root".into(),
            granted_at: T0,
        };
    let row_a: BTreeMap<String, String> = [("row".to_owned(), "A".to_owned())].into();
    c.add::<ep::AccessGrant>(
        vec![
            AccessGrant {
                subject: "OPS/alice".into(),
                role: Role::Operator,
                racks: Vec::new(),
                labels: row_a.clone(),
            },
            AccessGrant {
                subject: "OPS/*".into(),
                role: Role::Viewer,
                racks: vec!["rack-01".into()],
                labels: BTreeMap::new(),
            },
        ],
        vec![grant_record(4, Vec::new(), row_a.clone())],
    );
    c.add::<ep::AccessRevoke>(
        vec![AccessRevoke { id: 4 }],
        vec![AccessRevokeReply {
            revoked: grant_record(4, vec!["rack-01".into()], BTreeMap::new()),
        }],
    );
    c.add::<ep::AccessList>(
        vec![
            AccessList::default(),
            AccessList {
                subject: Some("OPS/alice".into()),
            },
        ],
        vec![AccessListReply {
            grants: vec![
                grant_record(4, Vec::new(), row_a),
                grant_record(5, vec!["rack-09".into()], BTreeMap::new()),
            ],
        }],
    );
    c.add::<ep::AccessCheck>(
        vec![AccessCheck {
            subject: "OPS/alice".into(),
            endpoint: "task.submit".into(),
            racks: vec!["rack-01".into()],
        }],
        vec![
            AccessCheckReply {
                allowed: true,
                needs: Some(Role::Operator),
                reason: "let by grant 4".into(),
            },
            AccessCheckReply {
                allowed: false,
                needs: None,
                reason: "power.admit: only Flow's own processes call it".into(),
            },
        ],
    );
    let image = |t: ComponentType, sub: Option<SubTarget>, c: char| BundleImage {
        component_type: t,
        sub_target: sub,
        version: "2.1".into(),
        url: "http://fw.example/image.bin".into(),
        digest: format!("sha256:{}", c.to_string().repeat(64)),
        size: 2_097_152,
    };
    let images = vec![
        image(ComponentType::Compute, None, 'a'),
        image(ComponentType::NVSwitch, Some(SubTarget::Nvos), 'b'),
    ];
    let bundle = |retired: bool| BundleRecord {
        name: "gb200-fw".into(),
        version: "2026.11".into(),
        models: if retired {
            Vec::new()
        } else {
            vec!["gb200-nvl72".into()]
        },
        images: images.clone(),
        published_by: "OPS/alice".into(),
        published_at: T0,
        retired_at: retired.then_some(T0),
    };
    let bundle_ref = BundleRef {
        name: "gb200-fw".into(),
        version: "2026.11".into(),
    };
    c.add::<ep::FirmwareBundlePublish>(
        vec![
            BundlePublish {
                name: "gb200-fw".into(),
                version: "2026.11".into(),
                models: vec!["gb200-nvl72".into()],
                images: images.clone(),
            },
            BundlePublish {
                name: "gb200-fw".into(),
                version: "2026.12".into(),
                models: Vec::new(),
                images: vec![image(ComponentType::PowerShelf, Some(SubTarget::Psu), 'c')],
            },
        ],
        vec![bundle(false)],
    );
    c.add::<ep::FirmwareBundleGet>(vec![bundle_ref.clone()], vec![bundle(false), bundle(true)]);
    c.add::<ep::FirmwareBundleList>(
        vec![
            BundleList::default(),
            BundleList {
                name: Some("gb200-fw".into()),
                retired: true,
            },
        ],
        vec![BundleListReply {
            bundles: vec![bundle(false), bundle(true)],
        }],
    );
    c.add::<ep::FirmwareBundleRetire>(vec![bundle_ref], vec![bundle(true)]);
    c
}

/// Task events of every kind: (kind, event).
pub fn task_events() -> Vec<(&'static str, TaskEvent)> {
    let task = TaskId::new();
    vec![
        (
            "stage_started",
            TaskEvent::new(
                task,
                1,
                TaskEventKind::StageStarted {
                    stage: 1,
                    steps: vec![0, 1],
                },
            ),
        ),
        (
            "step_finished",
            TaskEvent::new(
                task,
                2,
                TaskEventKind::StepFinished {
                    stage: 1,
                    step_index: 0,
                    generation: 1,
                    status: StepStatus::Completed,
                    error: None,
                    calls: 3,
                },
            ),
        ),
        (
            "step_finished",
            TaskEvent::new(
                task,
                3,
                TaskEventKind::StepFinished {
                    stage: 1,
                    step_index: 1,
                    generation: 2,
                    status: StepStatus::Failed,
                    error: Some("BMC timed out".into()),
                    calls: 9,
                },
            ),
        ),
        (
            "task_finished",
            TaskEvent::new(
                task,
                4,
                TaskEventKind::TaskFinished {
                    status: TaskStatus::Failed,
                    message: "step 1 failed".into(),
                },
            ),
        ),
        (
            "step_progress",
            TaskEvent::new(
                task,
                5,
                TaskEventKind::StepProgress {
                    stage: 2,
                    step_index: 1,
                    component_type: ComponentType::Compute,
                    action: "main_operation (PowerControl)".into(),
                    done: 4,
                    failed: 1,
                    total: 18,
                    held: 0,
                    waiting: None,
                },
            ),
        ),
        (
            "step_progress",
            TaskEvent::new(
                task,
                6,
                TaskEventKind::StepProgress {
                    stage: 2,
                    step_index: 1,
                    component_type: ComponentType::Compute,
                    action: "main_operation (PowerControl)".into(),
                    done: 4,
                    failed: 0,
                    total: 18,
                    held: 3,
                    waiting: Some("waiting for power budget in row=B".into()),
                },
            ),
        ),
    ]
}

/// Task requests as published on `flow.tasks.submit`.
pub fn submissions() -> Vec<TaskSubmit> {
    vec![full_submit(), plain_submit()]
}

/// What a submission's outcome subject carries.
pub fn submit_outcomes() -> Vec<Result<TaskSubmitReply, ApiError>> {
    vec![
        Ok(TaskSubmitReply {
            results: outcomes(),
        }),
        Err(ApiError::new(
            ErrorCode::BadRequest,
            "racks: name at least one rack, label or component",
        )),
    ]
}

/// Error replies of every code.
pub fn errors() -> Vec<ApiError> {
    [
        ErrorCode::BadRequest,
        ErrorCode::Invalid,
        ErrorCode::NotFound,
        ErrorCode::Conflict,
        ErrorCode::Unavailable,
        ErrorCode::Internal,
    ]
    .into_iter()
    .map(|code| ApiError::new(code, "what was wrong"))
    .chain([api_error()])
    .collect()
}
