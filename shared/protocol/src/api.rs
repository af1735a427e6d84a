//! The `flow.api` endpoint catalog: each endpoint's name, kind, request
//! and reply. The envelope and its errors are in [`crate::envelope`], the
//! requests and replies in their own modules ([`crate::rule_api`],
//! [`crate::rack_api`], [`crate::submit`], [`crate::schedule`],
//! [`crate::run`], [`crate::event`], [`crate::power`], [`crate::audit`],
//! [`crate::preview`]), re-exported here so that `flow_protocol::api::X`
//! names them all. Nothing in those modules imports this one.

use schemars::JsonSchema;
use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::audit::EndpointKind;
pub use crate::decode::decode_request;
pub use crate::envelope::*;
pub use crate::rack_api::*;
pub use crate::rule_api::*;
pub use crate::submit::*;

// ---- endpoints --------------------------------------------------------------

/// A `flow.api` endpoint: its name (the subject is `flow.api.<NAME>`), the
/// request it takes and the reply it gives. The service and the client are
/// both written against these, so a subject cannot drift from its types.
pub trait Endpoint {
    /// The name, `rule.create`.
    const NAME: &'static str;
    /// Whether it reads or changes state (which decides whether requests
    /// to it are audited, see [`crate::audit`]).
    const KIND: EndpointKind;
    /// What it does, as its declaration's doc comment says (for the
    /// published contract, [`crate::contract`]).
    const DOC: &'static str;
    /// The request body.
    type Request: Serialize + DeserializeOwned + JsonSchema + Send + Sync;
    /// The reply's `result`.
    type Reply: Serialize + DeserializeOwned + JsonSchema + Send;
}

/// Looks at every endpoint's types in turn ([`endpoint::visit`]): how code
/// that needs the types, not just the names, walks the catalog (the
/// contract generator, [`crate::contract`]).
pub trait Visitor {
    /// Called once for each endpoint, in catalog order.
    fn visit<E: Endpoint>(&mut self);
}

/// Every endpoint: a marker type each, tied to its request and reply.
pub mod endpoint {
    use super::*;
    use crate::task::{TaskListReply, TaskRecord};

    macro_rules! endpoints {
        ($($(#[doc = $doc:literal])* $marker:ident = $name:literal ($kind:ident): $req:ty => $rep:ty;)+) => {
            $(
                $(#[doc = $doc])*
                #[derive(Debug, Clone, Copy)]
                pub struct $marker;

                impl Endpoint for $marker {
                    const NAME: &'static str = $name;
                    const KIND: EndpointKind = EndpointKind::$kind;
                    const DOC: &'static str = concat!($($doc, "\n"),*);
                    type Request = $req;
                    type Reply = $rep;
                }
            )+

            /// Calls `visitor` with every endpoint, in catalog order.
            pub fn visit(visitor: &mut impl Visitor) {
                $(visitor.visit::<$marker>();)+
            }

            /// Every endpoint's name.
            pub const ALL: &[&str] = &[$($name,)+];

            /// Every endpoint with its kind (read, change, internal):
            /// every `change` request leaves one audit record.
            pub const CATALOG: &[(&str, EndpointKind)] = &[$(($name, EndpointKind::$kind),)+];
        };
    }

    /// The kind of the endpoint named `name`, if there is one.
    pub fn kind(name: &str) -> Option<EndpointKind> {
        CATALOG.iter().find(|(n, _)| *n == name).map(|(_, k)| *k)
    }

    endpoints! {
        /// Create one rule.
        RuleCreate = "rule.create" (Change): super::RuleCreate => RuleRecord;
        /// Create a batch of rules (the YAML batch, as JSON).
        RuleBatchCreate = "rule.batch_create" (Change): super::RuleBatchCreate => BatchCreateReply;
        /// Get one rule.
        RuleGet = "rule.get" (Read): RuleById => RuleRecord;
        /// List rules.
        RuleList = "rule.list" (Read): super::RuleList => RuleListReply;
        /// Change a rule's name, description or definition.
        RuleUpdate = "rule.update" (Change): super::RuleUpdate => RuleRecord;
        /// Delete a rule.
        RuleDelete = "rule.delete" (Change): super::RuleDelete => RuleDeleteReply;
        /// Make a rule the default for its operation.
        RuleSetDefault = "rule.set_default" (Change): RuleById => RuleRecord;
        /// Bind a rule to a rack.
        RuleAssociate = "rule.associate" (Change): super::RuleAssociate => Association;
        /// Unbind a rack's rule for an operation.
        RuleDisassociate = "rule.disassociate" (Change): super::RuleDisassociate => DisassociateReply;
        /// Which rule would run, and why.
        RuleResolve = "rule.resolve" (Read): super::RuleResolve => ResolveReply;
        /// Every saved definition of a rule.
        RuleHistory = "rule.history" (Read): RuleById => HistoryReply;
        /// Create a rack from a rack document.
        RackCreate = "rack.create" (Change): super::RackCreate => RackRecord;
        /// Get a rack and its components.
        RackGet = "rack.get" (Read): RackByRef => RackRecord;
        /// List racks.
        RackList = "rack.list" (Read): super::RackList => RackListReply;
        /// Delete a rack.
        RackDelete = "rack.delete" (Change): RackByRef => RackDeleteReply;
        /// Set or remove a rack's labels.
        RackLabel = "rack.label" (Change): super::RackLabel => RackRecord;
        /// Set components' operator status (ready, in_use, maintenance).
        ComponentStatusSet = "rack.component_status" (Change): super::ComponentStatusSet => ComponentStatusReply;
        /// Submit an operation on racks (one task per rack).
        TaskSubmit = "task.submit" (Change): super::TaskSubmit => TaskSubmitReply;
        /// What `task.submit` would do, per rack, creating nothing.
        TaskPlan = "task.plan" (Read): super::TaskSubmit => crate::preview::TaskPlanReply;
        /// Get a task with its steps.
        TaskGet = "task.get" (Read): TaskById => TaskRecord;
        /// List recent tasks.
        TaskList = "task.list" (Read): super::TaskList => TaskListReply;
        /// Cancel a task at its next action boundary.
        TaskCancel = "task.cancel" (Change): TaskById => TaskCancelReply;
        /// Tasks by status.
        TaskCounts = "task.counts" (Read): TaskCountsRequest => crate::task::TaskCounts;
        /// Create a schedule.
        ScheduleCreate = "schedule.create" (Change): crate::schedule::ScheduleCreate => crate::schedule::ScheduleRecord;
        /// What `schedule.create` would store and fire, creating nothing.
        SchedulePlan = "schedule.plan" (Read): crate::schedule::ScheduleCreate => crate::preview::SchedulePlanReply;
        /// Get a schedule.
        ScheduleGet = "schedule.get" (Read): crate::schedule::ScheduleByRef => crate::schedule::ScheduleRecord;
        /// List schedules, oldest first.
        ScheduleList = "schedule.list" (Read): crate::schedule::ScheduleList => crate::schedule::ScheduleListReply;
        /// Change a schedule at the revision read.
        ScheduleUpdate = "schedule.update" (Change): crate::schedule::ScheduleUpdate => crate::schedule::ScheduleRecord;
        /// Stop a schedule firing.
        SchedulePause = "schedule.pause" (Change): crate::schedule::ScheduleByRef => crate::schedule::ScheduleRecord;
        /// Let a paused schedule fire again (its next time counted from now).
        ScheduleResume = "schedule.resume" (Change): crate::schedule::ScheduleByRef => crate::schedule::ScheduleRecord;
        /// Fire a schedule now.
        ScheduleTrigger = "schedule.trigger" (Change): crate::schedule::ScheduleByRef => crate::schedule::TriggerReply;
        /// Delete a schedule (its tasks run on).
        ScheduleDelete = "schedule.delete" (Change): crate::schedule::ScheduleByRef => crate::schedule::ScheduleDeleteReply;
        /// A schedule's firings and the tasks each created, newest first.
        ScheduleHistory = "schedule.history" (Read): crate::schedule::ScheduleByRef => crate::schedule::ScheduleHistoryReply;
        /// Create a phased rollout.
        RunCreate = "run.create" (Change): crate::run::RunCreate => crate::run::RunRecord;
        /// What `run.create` would do: phases, order, gates, windows and
        /// each rack's task, creating nothing.
        RunPlan = "run.plan" (Read): crate::run::RunCreate => crate::preview::RunPlanReply;
        /// Get a run with its phases' counts.
        RunGet = "run.get" (Read): crate::run::RunByRef => crate::run::RunRecord;
        /// List runs, newest first.
        RunList = "run.list" (Read): crate::run::RunList => crate::run::RunListReply;
        /// A run's targets.
        RunTargets = "run.targets" (Read): crate::run::RunTargets => crate::run::RunTargetsReply;
        /// Pause a run.
        RunPause = "run.pause" (Change): crate::run::RunByRef => crate::run::RunRecord;
        /// Resume a paused run (accepting the failures that tripped a gate).
        RunResume = "run.resume" (Change): crate::run::RunByRef => crate::run::RunRecord;
        /// Start the next phase of a run at its phase gate.
        RunAdvance = "run.advance" (Change): crate::run::RunAdvance => crate::run::RunRecord;
        /// Cancel a run and its open tasks.
        RunCancel = "run.cancel" (Change): crate::run::RunByRef => crate::run::RunRecord;
        /// Create an event rule (disabled unless asked).
        EventRuleCreate = "event_rule.create" (Change): crate::event::EventRuleCreate => crate::event::EventRuleRecord;
        /// Get an event rule (or a built-in: `builtin:<event type>`).
        EventRuleGet = "event_rule.get" (Read): crate::event::EventRuleByRef => crate::event::EventRuleRecord;
        /// List event rules, then the built-ins.
        EventRuleList = "event_rule.list" (Read): crate::event::EventRuleList => crate::event::EventRuleListReply;
        /// Change an event rule at the revision read.
        EventRuleUpdate = "event_rule.update" (Change): crate::event::EventRuleUpdate => crate::event::EventRuleRecord;
        /// Enable or disable an event rule.
        EventRuleEnable = "event_rule.enable" (Change): crate::event::EventRuleEnable => crate::event::EventRuleRecord;
        /// Delete an event rule and its bindings.
        EventRuleDelete = "event_rule.delete" (Change): crate::event::EventRuleByRef => crate::event::EventRuleDeleteReply;
        /// Bind a rule to the site or a rack for its event type.
        EventRuleBind = "event_rule.bind" (Change): crate::event::EventRuleBind => crate::event::BindingRecord;
        /// Remove the binding of an event type at a scope.
        EventRuleUnbind = "event_rule.unbind" (Change): crate::event::EventRuleUnbind => crate::event::UnbindReply;
        /// Every binding.
        EventRuleBindings = "event_rule.bindings" (Read): crate::event::BindingList => crate::event::BindingListReply;
        /// Hand in a hardware event (as a watcher publishes it).
        EventPublish = "event.publish" (Change): crate::event::HardwareEvent => crate::event::EventPublishReply;
        /// Get an event and its executions.
        EventGet = "event.get" (Read): crate::event::EventById => crate::event::EventRecord;
        /// List events, newest first.
        EventList = "event.list" (Read): crate::event::EventList => crate::event::EventListReply;
        /// Clear an event with a reason: its locks go.
        EventClear = "event.clear" (Change): crate::event::EventClear => crate::event::EventRecord;
        /// Create a power domain or replace its limits.
        PowerDomainSet = "power_domain.set" (Change): crate::power::PowerDomainSet => crate::power::PowerDomainRecord;
        /// A power domain: limits, racks, draw in use, waiting commands.
        PowerDomainGet = "power_domain.get" (Read): crate::power::PowerDomainByName => crate::power::PowerDomainRecord;
        /// Every power domain.
        PowerDomainList = "power_domain.list" (Read): crate::power::PowerDomainList => crate::power::PowerDomainListReply;
        /// Delete a power domain (racks naming it keep the name, unlimited).
        PowerDomainDelete = "power_domain.delete" (Change): crate::power::PowerDomainByName => crate::power::PowerDomainDeleteReply;
        /// Set the draw of a component type (for a rack model).
        PowerModelSet = "power_model.set" (Change): crate::power::PowerModelSet => crate::power::PowerModelSet;
        /// Every draw model, defaults included.
        PowerModelList = "power_model.list" (Read): crate::power::PowerModelList => crate::power::PowerModelListReply;
        /// Replace the power domains a rack belongs to.
        RackPowerDomains = "rack.power_domains" (Change): crate::power::RackPowerDomains => RackRecord;
        /// May this power command go now (budget, spacing, shelves off)? Asked by workers.
        PowerAdmit = "power.admit" (Internal): crate::power::PowerAdmit => crate::power::Admission;
        /// The commands a step's devices accepted, and when: a grant's inrush is counted from then. Told by workers.
        PowerSent = "power.sent" (Internal): crate::power::PowerSent => crate::power::PowerSentReply;
        /// Each component of a rack: its power as last observed and how old that is, its measured draw, how it counts against its domains, its desired power and any held command.
        RackPower = "rack.power" (Read): crate::power::RackPowerRequest => crate::power::RackPowerReply;
        /// Audit records, newest first (nothing can change or delete them).
        AuditList = "audit.list" (Read): crate::audit::AuditList => crate::audit::AuditListReply;
        /// Check the audit log's hash chain: the archived segments in order, then every live record against its seal.
        AuditVerify = "audit.verify" (Read): crate::history::AuditVerify => crate::history::AuditVerifyReply;
        /// The archive's segments: history retention moved out of the database, each with its manifest.
        ArchiveList = "archive.list" (Read): crate::history::ArchiveList => crate::history::ArchiveListReply;
        /// One archive segment's manifest, or one archived task as `task.get` showed it, with its steps.
        ArchiveShow = "archive.show" (Read): crate::history::ArchiveShow => crate::history::ArchiveShowReply;
        /// Check archive segments against their manifests (size, sha256, records) and the audit chain across them.
        ArchiveVerify = "archive.verify" (Read): crate::history::ArchiveVerify => crate::history::ArchiveVerifyReply;
        /// Give a verified user (or every user of an account) a role over racks by name, by label, or all.
        AccessGrant = "access.grant" (Change): crate::access::AccessGrant => crate::access::AccessGrantRecord;
        /// Remove a grant.
        AccessRevoke = "access.revoke" (Change): crate::access::AccessRevoke => crate::access::AccessRevokeReply;
        /// The grants, of one user or all.
        AccessList = "access.list" (Read): crate::access::AccessList => crate::access::AccessListReply;
        /// Would the policy let a user call an endpoint on these racks, and by which grant (or why not)?
        AccessCheck = "access.check" (Read): crate::access::AccessCheck => crate::access::AccessCheckReply;
        /// Publish a firmware bundle: images with sha256 digests, immutable once published (the same contents again answer the same bundle; other contents are refused naming the image).
        FirmwareBundlePublish = "firmware_bundle.publish" (Change): crate::firmware::BundlePublish => crate::firmware::BundleRecord;
        /// One firmware bundle.
        FirmwareBundleGet = "firmware_bundle.get" (Read): crate::firmware::BundleRef => crate::firmware::BundleRecord;
        /// The firmware bundle catalog.
        FirmwareBundleList = "firmware_bundle.list" (Read): crate::firmware::BundleList => crate::firmware::BundleListReply;
        /// Retire a firmware bundle: kept, no longer listed by default.
        FirmwareBundleRetire = "firmware_bundle.retire" (Change): crate::firmware::BundleRef => crate::firmware::BundleRecord;
    }
}

impl crate::audit::AuditList {
    /// What decoding cannot check: a limit of 1 to
    /// [`crate::audit::MAX_LIST_LIMIT`], `until` later than `since`, an
    /// endpoint in the catalog (or one of the scheduler's own: retention,
    /// a restore).
    pub fn check(&self) -> Result<(), ApiError> {
        self.check_fields()?;
        if let Some(endpoint) = &self.endpoint
            && endpoint::kind(endpoint).is_none()
            && endpoint != crate::history::EXPIRE_ENDPOINT
            && endpoint != crate::restore::RESTORE_ENDPOINT
        {
            return Err(ApiError::new(
                ErrorCode::BadRequest,
                format!("endpoint: no endpoint {endpoint:?}"),
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use crate::ids::RackRef;

    #[test]
    fn a_submission_needs_a_target_and_checks_its_options() {
        let submit = |body: serde_json::Value| {
            crate::decode::request::<TaskSubmit>(body.to_string().as_bytes())
                .unwrap()
                .check()
                .map_err(|e| e.message)
        };
        assert_eq!(
            submit(serde_json::json!({"request_id": "r", "operation": "power_on"})),
            Err("racks: name at least one rack, label or component".to_owned())
        );
        for target in [
            serde_json::json!({"racks": ["r1"]}),
            serde_json::json!({"labels": {"row": "B"}}),
            serde_json::json!({"components": ["r1/compute-01"]}),
        ] {
            let mut body = serde_json::json!({"request_id": "r", "operation": "power_off"});
            body.as_object_mut()
                .unwrap()
                .extend(target.as_object().unwrap().clone());
            assert_eq!(submit(body), Ok(()));
        }
        assert_eq!(
            submit(
                serde_json::json!({"request_id": "r", "operation": "power_off", "labels": {"row": ""}})
            ),
            Err("labels: label \"row\" needs a value".to_owned())
        );
        assert_eq!(
            submit(
                serde_json::json!({"request_id": "r", "operation": "power_off", "racks": ["r1"],
                                      "description": "x".repeat(MAX_DESCRIPTION_LEN + 1)})
            ),
            Err(format!(
                "description: must be at most {MAX_DESCRIPTION_LEN} characters"
            ))
        );
        let forced = |op: &str| {
            let mut s =
                TaskSubmit::new("r".into(), op.parse().unwrap(), vec![RackRef("r1".into())]);
            s.forced = true;
            s.operation_to_run()
                .map(|o| o.to_string())
                .map_err(|e| e.message)
        };
        assert_eq!(forced("power_off"), Ok("force_power_off".to_owned()));
        assert_eq!(forced("restart"), Ok("force_restart".to_owned()));
        assert_eq!(forced("force_power_off"), Ok("force_power_off".to_owned()));
        assert!(
            forced("upgrade")
                .unwrap_err()
                .starts_with("forced: only power_off and restart")
        );
    }

    use super::*;

    #[test]
    fn replies_round_trip_and_errors_keep_their_code() {
        let ok: Result<RuleDeleteReply, ApiError> = Ok(RuleDeleteReply {
            deleted: true,
            associations_removed: 2,
        });
        let bytes = encode_reply(&ok);
        assert_eq!(decode_reply::<RuleDeleteReply>(&bytes), ok);
        let err: Result<RuleDeleteReply, ApiError> =
            Err(ApiError::new(ErrorCode::NotFound, "rule 1 not found"));
        let bytes = encode_reply(&err);
        assert_eq!(
            String::from_utf8(bytes.clone()).unwrap(),
            r#"{"schema":1,"error":{"code":"not_found","message":"rule 1 not found"}}"#
        );
        assert_eq!(decode_reply::<RuleDeleteReply>(&bytes), err);
    }

    #[test]
    fn bad_requests_name_the_problem() {
        let e = decode_request::<RuleById>(br#"{"id": 5}"#).unwrap_err();
        assert_eq!(e.code, ErrorCode::BadRequest);
        assert!(e.message.contains("invalid type: integer `5`"), "{e}");
        let e = decode_request::<RuleById>(br#"{"id": "x", "extra": 1}"#).unwrap_err();
        assert!(e.message.contains("UUID"), "{e}");
        let e = decode_request::<RackByRef>(b"{").unwrap_err();
        assert!(e.message.contains("EOF"), "{e}");
        let e = decode_request::<RuleList>(br#"{"operation": "reboot"}"#).unwrap_err();
        assert!(
            e.message.contains("unknown operation code \"reboot\""),
            "{e}"
        );
        assert_eq!(decode_request::<RackList>(b""), Ok(RackList::default()));
    }
}
