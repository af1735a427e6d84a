//! The `audit.*` endpoints: reading the audit records ([`crate::audit`]
//! writes them).

use flow_protocol::api::ApiError;
use flow_protocol::api::endpoint as ep;

use super::table::{Cx, Handle};
use crate::error::store_error;

impl Handle for ep::AuditList {
    async fn handle(cx: Cx<'_>, r: Self::Request) -> Result<Self::Reply, ApiError> {
        r.check()?;
        Ok(flow_protocol::audit::AuditListReply {
            records: cx.store.audit_records(&r).await.map_err(store_error)?,
        })
    }
}
