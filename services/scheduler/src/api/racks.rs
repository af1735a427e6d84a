//! The `rack.*` endpoints of the inventory: racks, their labels and their
//! components' operator status.

use flow_protocol::api::endpoint as ep;
use flow_protocol::api::{ApiError, ErrorCode};

use super::table::{Cx, Handle};
use crate::error::store_error;

impl Handle for ep::RackCreate {
    async fn handle(cx: Cx<'_>, r: Self::Request) -> Result<Self::Reply, ApiError> {
        cx.store.create_rack(&r.rack).await.map_err(store_error)
    }
}

impl Handle for ep::RackGet {
    async fn handle(cx: Cx<'_>, r: Self::Request) -> Result<Self::Reply, ApiError> {
        cx.store.get_rack(&r.rack).await.map_err(store_error)
    }
}

impl Handle for ep::RackList {
    async fn handle(cx: Cx<'_>, r: Self::Request) -> Result<Self::Reply, ApiError> {
        cx.store.list_racks(&r.labels).await.map_err(store_error)
    }
}

impl Handle for ep::RackDelete {
    async fn handle(cx: Cx<'_>, r: Self::Request) -> Result<Self::Reply, ApiError> {
        cx.store.delete_rack(&r.rack).await.map_err(store_error)
    }
}

impl Handle for ep::RackLabel {
    async fn handle(cx: Cx<'_>, r: Self::Request) -> Result<Self::Reply, ApiError> {
        cx.store.label_rack(&r).await.map_err(store_error)
    }
}

impl Handle for ep::ComponentStatusSet {
    async fn handle(cx: Cx<'_>, r: Self::Request) -> Result<Self::Reply, ApiError> {
        if r.components.is_empty() {
            return Err(ApiError::new(
                ErrorCode::BadRequest,
                "components: name at least one component".to_owned(),
            ));
        }
        cx.store
            .set_component_status(&r.components, r.status)
            .await
            .map_err(store_error)
    }
}
