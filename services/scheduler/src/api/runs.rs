//! The `run.*` endpoints (phased rollouts are [`crate::runs`]).

use flow_protocol::api::ApiError;
use flow_protocol::api::endpoint as ep;

use super::table::{Cx, Handle};
use crate::error::store_error;

impl Handle for ep::RunCreate {
    async fn handle(cx: Cx<'_>, r: Self::Request) -> Result<Self::Reply, ApiError> {
        cx.tasks.create_run(r).await
    }
}

impl Handle for ep::RunPlan {
    async fn handle(cx: Cx<'_>, r: Self::Request) -> Result<Self::Reply, ApiError> {
        cx.tasks.plan_run(r).await
    }
}

impl Handle for ep::RunGet {
    async fn handle(cx: Cx<'_>, r: Self::Request) -> Result<Self::Reply, ApiError> {
        cx.store.run_record(&r.run).await.map_err(store_error)
    }
}

impl Handle for ep::RunList {
    async fn handle(cx: Cx<'_>, r: Self::Request) -> Result<Self::Reply, ApiError> {
        Ok(flow_protocol::run::RunListReply {
            runs: cx
                .store
                .runs(r.limit.unwrap_or(50).min(1000))
                .await
                .map_err(store_error)?,
        })
    }
}

impl Handle for ep::RunTargets {
    async fn handle(cx: Cx<'_>, r: Self::Request) -> Result<Self::Reply, ApiError> {
        let phase = r
            .phase
            .map(|p| usize::try_from(p.saturating_sub(1)).unwrap_or(usize::MAX));
        Ok(flow_protocol::run::RunTargetsReply {
            targets: cx
                .store
                .run_targets(&r.run, phase)
                .await
                .map_err(store_error)?,
        })
    }
}

impl Handle for ep::RunPause {
    async fn handle(cx: Cx<'_>, r: Self::Request) -> Result<Self::Reply, ApiError> {
        cx.tasks.pause_run(&r.run).await
    }
}

impl Handle for ep::RunResume {
    async fn handle(cx: Cx<'_>, r: Self::Request) -> Result<Self::Reply, ApiError> {
        cx.tasks.resume_run(&r.run).await
    }
}

impl Handle for ep::RunAdvance {
    async fn handle(cx: Cx<'_>, r: Self::Request) -> Result<Self::Reply, ApiError> {
        cx.tasks.advance_run(&r).await
    }
}

impl Handle for ep::RunCancel {
    async fn handle(cx: Cx<'_>, r: Self::Request) -> Result<Self::Reply, ApiError> {
        cx.tasks.cancel_run(&r.run).await
    }
}
