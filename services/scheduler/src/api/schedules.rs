//! The `schedule.*` endpoints (the schedules themselves are
//! [`crate::schedules`]).

use flow_protocol::api::ApiError;
use flow_protocol::api::endpoint as ep;

use super::table::{Cx, Handle};
use crate::error::store_error;

impl Handle for ep::ScheduleCreate {
    async fn handle(cx: Cx<'_>, r: Self::Request) -> Result<Self::Reply, ApiError> {
        cx.tasks.create_schedule(r).await
    }
}

impl Handle for ep::SchedulePlan {
    async fn handle(cx: Cx<'_>, r: Self::Request) -> Result<Self::Reply, ApiError> {
        cx.tasks.plan_schedule(r).await
    }
}

impl Handle for ep::ScheduleGet {
    async fn handle(cx: Cx<'_>, r: Self::Request) -> Result<Self::Reply, ApiError> {
        cx.store.schedule(&r.schedule).await.map_err(store_error)
    }
}

impl Handle for ep::ScheduleList {
    async fn handle(cx: Cx<'_>, r: Self::Request) -> Result<Self::Reply, ApiError> {
        Ok(flow_protocol::schedule::ScheduleListReply {
            schedules: cx
                .store
                .schedules(r.enabled_only)
                .await
                .map_err(store_error)?,
        })
    }
}

impl Handle for ep::ScheduleUpdate {
    async fn handle(cx: Cx<'_>, r: Self::Request) -> Result<Self::Reply, ApiError> {
        cx.tasks.update_schedule(r).await
    }
}

impl Handle for ep::SchedulePause {
    async fn handle(cx: Cx<'_>, r: Self::Request) -> Result<Self::Reply, ApiError> {
        cx.tasks.pause_schedule(&r.schedule).await
    }
}

impl Handle for ep::ScheduleResume {
    async fn handle(cx: Cx<'_>, r: Self::Request) -> Result<Self::Reply, ApiError> {
        cx.tasks.resume_schedule(&r.schedule).await
    }
}

impl Handle for ep::ScheduleTrigger {
    async fn handle(cx: Cx<'_>, r: Self::Request) -> Result<Self::Reply, ApiError> {
        cx.tasks.trigger_schedule(&r.schedule).await
    }
}

impl Handle for ep::ScheduleDelete {
    async fn handle(cx: Cx<'_>, r: Self::Request) -> Result<Self::Reply, ApiError> {
        let schedule = cx.store.schedule(&r.schedule).await.map_err(store_error)?;
        cx.store
            .delete_schedule(schedule.id)
            .await
            .map_err(store_error)?;
        Ok(flow_protocol::schedule::ScheduleDeleteReply { id: schedule.id })
    }
}

impl Handle for ep::ScheduleHistory {
    async fn handle(cx: Cx<'_>, r: Self::Request) -> Result<Self::Reply, ApiError> {
        let schedule = cx.store.schedule(&r.schedule).await.map_err(store_error)?;
        Ok(flow_protocol::schedule::ScheduleHistoryReply {
            firings: cx
                .store
                .firings(schedule.id, r.limit.unwrap_or(20).min(1000))
                .await
                .map_err(store_error)?,
        })
    }
}
