//! The power endpoints: `power_domain.*`, `power_model.*`,
//! `rack.power_domains`, `rack.power` and the workers' `power.admit` and
//! `power.sent`.

use flow_protocol::api::ApiError;
use flow_protocol::api::endpoint as ep;

use super::table::{Cx, Handle};
use crate::error::store_error;

impl Handle for ep::PowerDomainSet {
    async fn handle(cx: Cx<'_>, r: Self::Request) -> Result<Self::Reply, ApiError> {
        cx.store.set_power_domain(&r).await.map_err(store_error)
    }
}

impl Handle for ep::PowerDomainGet {
    async fn handle(cx: Cx<'_>, r: Self::Request) -> Result<Self::Reply, ApiError> {
        cx.store.power_domain(&r.name).await.map_err(store_error)
    }
}

impl Handle for ep::PowerDomainList {
    async fn handle(cx: Cx<'_>, _: Self::Request) -> Result<Self::Reply, ApiError> {
        cx.store.list_power_domains().await.map_err(store_error)
    }
}

impl Handle for ep::PowerDomainDelete {
    async fn handle(cx: Cx<'_>, r: Self::Request) -> Result<Self::Reply, ApiError> {
        cx.store
            .delete_power_domain(&r.name)
            .await
            .map_err(store_error)
    }
}

impl Handle for ep::PowerModelSet {
    async fn handle(cx: Cx<'_>, r: Self::Request) -> Result<Self::Reply, ApiError> {
        cx.store.set_power_model(&r).await.map_err(store_error)
    }
}

impl Handle for ep::PowerModelList {
    async fn handle(cx: Cx<'_>, _: Self::Request) -> Result<Self::Reply, ApiError> {
        cx.store.list_power_models().await.map_err(store_error)
    }
}

impl Handle for ep::RackPowerDomains {
    async fn handle(cx: Cx<'_>, r: Self::Request) -> Result<Self::Reply, ApiError> {
        cx.store
            .set_rack_power_domains(&r)
            .await
            .map_err(store_error)
    }
}

impl Handle for ep::PowerAdmit {
    async fn handle(cx: Cx<'_>, r: Self::Request) -> Result<Self::Reply, ApiError> {
        cx.store.admit_power(&r).await.map_err(store_error)
    }
}

impl Handle for ep::PowerSent {
    async fn handle(cx: Cx<'_>, r: Self::Request) -> Result<Self::Reply, ApiError> {
        cx.store.power_sent(&r).await.map_err(store_error)
    }
}

impl Handle for ep::RackPower {
    async fn handle(cx: Cx<'_>, r: Self::Request) -> Result<Self::Reply, ApiError> {
        let known_for = cx.store.power_known_for();
        cx.store
            .rack_power(&r.rack, known_for)
            .await
            .map_err(store_error)
    }
}
