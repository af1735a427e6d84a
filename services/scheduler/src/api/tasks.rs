//! The `task.*` endpoints: submissions, previews, reads and cancels.

use flow_protocol::api::ApiError;
use flow_protocol::api::endpoint as ep;

use super::table::{Cx, Handle};
use crate::error::{api_error, store_error};

impl Handle for ep::TaskSubmit {
    async fn handle(cx: Cx<'_>, r: Self::Request) -> Result<Self::Reply, ApiError> {
        r.check()?;
        cx.tasks.submit(&r).await
    }
}

impl Handle for ep::TaskPlan {
    async fn handle(cx: Cx<'_>, mut r: Self::Request) -> Result<Self::Reply, ApiError> {
        // A preview needs no request ID; one given finds a task it
        // already created (a duplicate).
        if r.request_id.trim().is_empty() {
            r.request_id = format!("plan/{}", uuid::Uuid::new_v4());
        }
        r.check()?;
        cx.tasks.plan_task(&r).await
    }
}

impl Handle for ep::TaskGet {
    async fn handle(cx: Cx<'_>, r: Self::Request) -> Result<Self::Reply, ApiError> {
        let mut record = cx.store.task_record(r.id).await.map_err(store_error)?;
        if record.status.is_open() {
            record.power_waits = cx.store.power_waits(r.id).await.map_err(store_error)?;
        }
        Ok(record)
    }
}

impl Handle for ep::TaskList {
    async fn handle(cx: Cx<'_>, r: Self::Request) -> Result<Self::Reply, ApiError> {
        cx.store
            .list_tasks(i64::from(r.limit.unwrap_or(50).min(1000)))
            .await
            .map_err(store_error)
    }
}

impl Handle for ep::TaskCancel {
    async fn handle(cx: Cx<'_>, r: Self::Request) -> Result<Self::Reply, ApiError> {
        let reply = cx.tasks.cancel(r.id).await.map_err(api_error)?;
        // Its cancel mark or its end is on the outbox: publish now.
        cx.tasks.poke();
        Ok(reply)
    }
}

impl Handle for ep::TaskCounts {
    async fn handle(cx: Cx<'_>, _: Self::Request) -> Result<Self::Reply, ApiError> {
        cx.store.task_counts().await.map_err(store_error)
    }
}
