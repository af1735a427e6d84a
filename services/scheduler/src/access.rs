//! Who may (docs/audit.md, "Who may"): in verified identity mode every
//! request of a verified user is checked against the policy Flow keeps
//! (`flow_store::access`) before it is answered — the role its endpoint
//! needs, over the racks it names and the racks of the tasks it names
//! ([`authorize`]) — and every task a submission, a schedule's firing or a
//! run's target would create is checked for its rack against the scope of
//! whoever asked: the caller, or the schedule's or run's creator as the
//! policy stands when it fires ([`TaskService::scope_refusal`]). The
//! decision itself is `flow_decisions::access`'s. In development mode
//! nothing is checked: every caller is the one development user.

use flow_decisions::access::{RackFacts, check, needs};
use flow_protocol::access::Role;
use flow_protocol::api::{ApiError, ErrorCode, endpoint};
use flow_protocol::audit::{Actor, ActorSource};
use flow_store::Store;
use flow_store::tasks::Origin;
use serde_json::Value;

use crate::error::store_error;
use crate::identity::IdentityMode;
use crate::service::TaskService;

/// Whether `actor`'s request to `name` with `body` is let by the policy;
/// the `forbidden` error naming the grant (or its absence) and what was
/// asked, if not. Only verified users are checked, and only in verified
/// mode (Flow's own processes are held to reads and internal endpoints by
/// `crate::identity`).
pub async fn authorize(
    store: &Store,
    mode: IdentityMode,
    name: &str,
    actor: &Actor,
    body: &[u8],
) -> Result<(), ApiError> {
    if mode != IdentityMode::Verified || !is_checked(actor) {
        return Ok(());
    }
    let Some(kind) = endpoint::kind(name) else {
        return Ok(());
    };
    let Some(need) = needs(name, kind) else {
        return Err(forbidden(format!(
            "{name}: only Flow's own processes call it"
        )));
    };
    let request: Value = serde_json::from_slice(body).unwrap_or(Value::Null);
    let subjects = crate::audit::subjects(name, &request);
    let mut racks = subjects.racks;
    for id in &subjects.task_ids {
        if let Some(rack) = store.task_rack(*id).await.map_err(store_error)? {
            racks.push(rack);
        }
    }
    decide(store, &actor.name, name, need, &racks).await
}

/// Whether the policy is checked for `actor`: a user the server verified,
/// or one a trusted intermediary named (`crate::identity`).
pub(crate) fn is_checked(actor: &Actor) -> bool {
    matches!(
        actor.source,
        ActorSource::Verified | ActorSource::Intermediary
    )
}

/// Checks `user` for `what` needing `need` over `racks`: the `forbidden`
/// error, if refused.
async fn decide(
    store: &Store,
    user: &str,
    what: &str,
    need: Role,
    racks: &[String],
) -> Result<(), ApiError> {
    match check_racks(store, user, what, need, racks).await? {
        Ok(used) => {
            tracing::debug!(user, what, grants = ?used, "let by the access policy");
            Ok(())
        }
        Err(message) => {
            tracing::warn!(user, what, reason = %message, "refused by the access policy");
            Err(forbidden(message))
        }
    }
}

/// Whether the policy lets `user` do `what` needing `need` over `racks`
/// (by name or ID; a rack not found is judged by its name alone): the
/// grants that let it, or why not.
pub(crate) async fn check_racks(
    store: &Store,
    user: &str,
    what: &str,
    need: Role,
    racks: &[String],
) -> Result<Result<Vec<i64>, String>, ApiError> {
    let grants = store.access_grants(Some(user)).await.map_err(store_error)?;
    let mut facts = store.rack_facts(racks).await.map_err(store_error)?;
    for rack in racks {
        if !facts.iter().any(|(n, _)| n == rack) && rack.parse::<uuid::Uuid>().is_err() {
            facts.push((rack.clone(), Default::default()));
        }
    }
    let facts: Vec<RackFacts<'_>> = facts
        .iter()
        .map(|(name, labels)| RackFacts { name, labels })
        .collect();
    Ok(check(&grants, user, what, need, &facts).map_err(|d| d.message))
}

fn forbidden(message: String) -> ApiError {
    ApiError::new(ErrorCode::Forbidden, message)
}

impl TaskService {
    /// Why a task of `origin` on `rack` may not be created for its
    /// principal: the API caller, or the creator of the schedule or run
    /// that fires it, checked against the policy as it stands now. `None`:
    /// nothing to check (development mode, an event rule's action, a
    /// schedule or run created unverified) or let.
    pub(crate) async fn scope_refusal(
        &self,
        rack: &str,
        origin: Origin,
    ) -> Result<Option<ApiError>, ApiError> {
        if self.identity != IdentityMode::Verified {
            return Ok(None);
        }
        let (user, what) = match origin {
            Origin::Request => match &self.caller {
                Some(caller) => (caller.clone(), "task.submit".to_owned()),
                None => return Ok(None),
            },
            Origin::Schedule(id) => {
                match self.store.schedule_creator(id).await.map_err(store_error)? {
                    Some(user) => (user, format!("fire schedule {id} (task.submit)")),
                    None => return Ok(None),
                }
            }
            Origin::Run(id) => match self.store.run_creator(id).await.map_err(store_error)? {
                Some(user) => (user, format!("submit run {id}'s target (task.submit)")),
                None => return Ok(None),
            },
            // An event rule's action (a leak's power-off) is a safety
            // response, not anyone's request: never held by a scope.
            Origin::Event(_) => return Ok(None),
        };
        Ok(decide(
            &self.store,
            &user,
            &what,
            Role::Operator,
            &[rack.to_owned()],
        )
        .await
        .err())
    }
}
