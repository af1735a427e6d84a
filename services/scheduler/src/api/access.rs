//! The `access.*` endpoints: the policy of who may do what to which racks
//! (`crate::access` enforces it; `flow_store::access` keeps it).

use flow_protocol::access::{AccessCheckReply, AccessListReply, AccessRevokeReply};
use flow_protocol::api::endpoint as ep;
use flow_protocol::api::{ApiError, ErrorCode, endpoint};

use super::table::{Cx, Handle};
use crate::error::store_error;

impl Handle for ep::AccessGrant {
    async fn handle(cx: Cx<'_>, r: Self::Request) -> Result<Self::Reply, ApiError> {
        r.check()?;
        cx.store.grant_access(&r).await.map_err(store_error)
    }
}

impl Handle for ep::AccessRevoke {
    async fn handle(cx: Cx<'_>, r: Self::Request) -> Result<Self::Reply, ApiError> {
        Ok(AccessRevokeReply {
            revoked: cx.store.revoke_access(r.id).await.map_err(store_error)?,
        })
    }
}

impl Handle for ep::AccessList {
    async fn handle(cx: Cx<'_>, r: Self::Request) -> Result<Self::Reply, ApiError> {
        if let Some(subject) = &r.subject {
            flow_protocol::access::check_subject(subject)?;
        }
        Ok(AccessListReply {
            grants: cx
                .store
                .access_grants(r.subject.as_deref())
                .await
                .map_err(store_error)?,
        })
    }
}

impl Handle for ep::AccessCheck {
    async fn handle(cx: Cx<'_>, r: Self::Request) -> Result<Self::Reply, ApiError> {
        flow_protocol::access::check_subject(&r.subject)?;
        let Some(kind) = endpoint::kind(&r.endpoint) else {
            return Err(ApiError::new(
                ErrorCode::BadRequest,
                format!("endpoint: no endpoint {:?}", r.endpoint),
            ));
        };
        let Some(needs) = flow_decisions::access::needs(&r.endpoint, kind) else {
            return Ok(AccessCheckReply {
                allowed: false,
                needs: None,
                reason: format!("{}: only Flow's own processes call it", r.endpoint),
            });
        };
        let answer =
            crate::access::check_racks(cx.store, &r.subject, &r.endpoint, needs, &r.racks).await?;
        Ok(AccessCheckReply {
            allowed: answer.is_ok(),
            needs: Some(needs),
            reason: match answer {
                Ok(grants) => format!(
                    "let by grant{} {}",
                    if grants.len() == 1 { "" } else { "s" },
                    grants
                        .iter()
                        .map(i64::to_string)
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
                Err(message) => message,
            },
        })
    }
}
