//! The firmware bundle catalog: `firmware_bundle.*` (docs/firmware.md).

use flow_protocol::api::ApiError;
use flow_protocol::api::endpoint as ep;

use super::table::{Cx, Handle};
use crate::error::store_error;

impl Handle for ep::FirmwareBundlePublish {
    async fn handle(cx: Cx<'_>, r: Self::Request) -> Result<Self::Reply, ApiError> {
        r.check()?;
        cx.store.publish_bundle(&r).await.map_err(store_error)
    }
}

impl Handle for ep::FirmwareBundleGet {
    async fn handle(cx: Cx<'_>, r: Self::Request) -> Result<Self::Reply, ApiError> {
        cx.store.bundle(&r).await.map_err(store_error)
    }
}

impl Handle for ep::FirmwareBundleList {
    async fn handle(cx: Cx<'_>, r: Self::Request) -> Result<Self::Reply, ApiError> {
        cx.store.list_bundles(&r).await.map_err(store_error)
    }
}

impl Handle for ep::FirmwareBundleRetire {
    async fn handle(cx: Cx<'_>, r: Self::Request) -> Result<Self::Reply, ApiError> {
        cx.store.retire_bundle(&r).await.map_err(store_error)
    }
}
