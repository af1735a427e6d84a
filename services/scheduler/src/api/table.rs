//! The `flow.api` dispatch table: each endpoint of the catalog
//! (`flow_protocol::api::endpoint`) answered by its [`Handle`] impl (in the
//! modules beside this one, by area), through one adapter, `serve`, that
//! decodes the request, calls the handler and encodes the reply. A request
//! finds its endpoint by name in [`ROUTES`].

use std::collections::HashMap;
use std::pin::Pin;
use std::sync::LazyLock;

use flow_protocol::api::endpoint as ep;
use flow_protocol::api::{ApiError, Endpoint, decode_request, encode_reply};
use flow_store::Store;

use crate::service::TaskService;

/// What a handler answers with: the store and the task service (both
/// carrying the request's audit scope for a `change` endpoint, see
/// [`crate::audit`]).
#[derive(Clone, Copy)]
pub struct Cx<'a> {
    /// The store.
    pub store: &'a Store,
    /// The task service, over that store.
    pub tasks: &'a TaskService,
}

/// The handler of endpoint `Self`: its decoded request answered with its
/// reply or an error. The types are the endpoint's, so a handler cannot
/// answer a subject with another endpoint's types.
pub trait Handle: Endpoint {
    /// Answers `request`.
    fn handle(
        cx: Cx<'_>,
        request: Self::Request,
    ) -> impl Future<Output = Result<Self::Reply, ApiError>> + Send;
}

/// An encoded reply on its way.
pub type Answer<'a> = Pin<Box<dyn Future<Output = Vec<u8>> + Send + 'a>>;

/// One endpoint's request body answered: decoded, handled, encoded.
pub type Serve = for<'a> fn(Cx<'a>, &'a [u8]) -> Answer<'a>;

/// One entry of the table: an endpoint's name and its `serve`.
#[derive(Clone, Copy)]
pub struct Route {
    /// The endpoint's name, `rule.create`.
    pub name: &'static str,
    /// Its adapter.
    pub serve: Serve,
}

/// Decodes the request of endpoint `E`, answers it with `E`'s handler and
/// encodes the reply in the envelope; a body that does not decode is a
/// `bad_request` naming the problem, and the handler is not called.
fn serve<'a, E: Handle + 'static>(cx: Cx<'a>, body: &'a [u8]) -> Answer<'a> {
    Box::pin(async move {
        let reply = match decode_request::<E::Request>(body) {
            Ok(request) => E::handle(cx, request).await,
            Err(error) => Err(error),
        };
        encode_reply(&reply)
    })
}

/// Endpoint `E`'s entry.
const fn route<E: Handle + 'static>() -> Route {
    Route {
        name: E::NAME,
        serve: serve::<E>,
    }
}

/// Every endpoint's entry, in catalog order (a test holds it to the
/// catalog: one entry per endpoint, none else).
pub static ROUTES: &[Route] = &[
    route::<ep::RuleCreate>(),
    route::<ep::RuleBatchCreate>(),
    route::<ep::RuleGet>(),
    route::<ep::RuleList>(),
    route::<ep::RuleUpdate>(),
    route::<ep::RuleDelete>(),
    route::<ep::RuleSetDefault>(),
    route::<ep::RuleAssociate>(),
    route::<ep::RuleDisassociate>(),
    route::<ep::RuleResolve>(),
    route::<ep::RuleHistory>(),
    route::<ep::RackCreate>(),
    route::<ep::RackGet>(),
    route::<ep::RackList>(),
    route::<ep::RackDelete>(),
    route::<ep::RackLabel>(),
    route::<ep::ComponentStatusSet>(),
    route::<ep::TaskSubmit>(),
    route::<ep::TaskPlan>(),
    route::<ep::TaskGet>(),
    route::<ep::TaskList>(),
    route::<ep::TaskCancel>(),
    route::<ep::TaskCounts>(),
    route::<ep::ScheduleCreate>(),
    route::<ep::SchedulePlan>(),
    route::<ep::ScheduleGet>(),
    route::<ep::ScheduleList>(),
    route::<ep::ScheduleUpdate>(),
    route::<ep::SchedulePause>(),
    route::<ep::ScheduleResume>(),
    route::<ep::ScheduleTrigger>(),
    route::<ep::ScheduleDelete>(),
    route::<ep::ScheduleHistory>(),
    route::<ep::RunCreate>(),
    route::<ep::RunPlan>(),
    route::<ep::RunGet>(),
    route::<ep::RunList>(),
    route::<ep::RunTargets>(),
    route::<ep::RunPause>(),
    route::<ep::RunResume>(),
    route::<ep::RunAdvance>(),
    route::<ep::RunCancel>(),
    route::<ep::EventRuleCreate>(),
    route::<ep::EventRuleGet>(),
    route::<ep::EventRuleList>(),
    route::<ep::EventRuleUpdate>(),
    route::<ep::EventRuleEnable>(),
    route::<ep::EventRuleDelete>(),
    route::<ep::EventRuleBind>(),
    route::<ep::EventRuleUnbind>(),
    route::<ep::EventRuleBindings>(),
    route::<ep::EventPublish>(),
    route::<ep::EventGet>(),
    route::<ep::EventList>(),
    route::<ep::EventClear>(),
    route::<ep::PowerDomainSet>(),
    route::<ep::PowerDomainGet>(),
    route::<ep::PowerDomainList>(),
    route::<ep::PowerDomainDelete>(),
    route::<ep::PowerModelSet>(),
    route::<ep::PowerModelList>(),
    route::<ep::RackPowerDomains>(),
    route::<ep::PowerAdmit>(),
    route::<ep::PowerSent>(),
    route::<ep::RackPower>(),
    route::<ep::AuditList>(),
    route::<ep::AuditVerify>(),
    route::<ep::ArchiveList>(),
    route::<ep::ArchiveShow>(),
    route::<ep::ArchiveVerify>(),
    route::<ep::AccessGrant>(),
    route::<ep::AccessRevoke>(),
    route::<ep::AccessList>(),
    route::<ep::AccessCheck>(),
    route::<ep::FirmwareBundlePublish>(),
    route::<ep::FirmwareBundleGet>(),
    route::<ep::FirmwareBundleList>(),
    route::<ep::FirmwareBundleRetire>(),
];

/// The adapter of the endpoint named `name`, if there is one.
pub fn find(name: &str) -> Option<Serve> {
    static BY_NAME: LazyLock<HashMap<&str, Serve>> =
        LazyLock::new(|| ROUTES.iter().map(|r| (r.name, r.serve)).collect());
    BY_NAME.get(name).copied()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_catalog_endpoint_has_exactly_one_route() {
        let names: Vec<&str> = ROUTES.iter().map(|r| r.name).collect();
        assert_eq!(
            names,
            ep::ALL,
            "one route per catalog endpoint, in its order"
        );
        for name in ep::ALL {
            assert!(find(name).is_some(), "{name} not found");
        }
        assert!(find("rule.nope").is_none());
    }
}
