//! The `event_rule.*` and `event.*` endpoints (event rules and hardware
//! events are [`crate::events`]).

use flow_protocol::api::ApiError;
use flow_protocol::api::endpoint as ep;

use super::table::{Cx, Handle};
use crate::error::store_error;

impl Handle for ep::EventRuleCreate {
    async fn handle(cx: Cx<'_>, r: Self::Request) -> Result<Self::Reply, ApiError> {
        cx.tasks.create_event_rule(r).await
    }
}

impl Handle for ep::EventRuleGet {
    async fn handle(cx: Cx<'_>, r: Self::Request) -> Result<Self::Reply, ApiError> {
        cx.tasks.event_rule(&r.rule).await
    }
}

impl Handle for ep::EventRuleList {
    async fn handle(cx: Cx<'_>, _: Self::Request) -> Result<Self::Reply, ApiError> {
        Ok(flow_protocol::event::EventRuleListReply {
            rules: cx.tasks.event_rules().await?,
        })
    }
}

impl Handle for ep::EventRuleUpdate {
    async fn handle(cx: Cx<'_>, r: Self::Request) -> Result<Self::Reply, ApiError> {
        cx.tasks.update_event_rule(r).await
    }
}

impl Handle for ep::EventRuleEnable {
    async fn handle(cx: Cx<'_>, r: Self::Request) -> Result<Self::Reply, ApiError> {
        cx.tasks.enable_event_rule(&r.rule, r.enabled).await
    }
}

impl Handle for ep::EventRuleDelete {
    async fn handle(cx: Cx<'_>, r: Self::Request) -> Result<Self::Reply, ApiError> {
        cx.tasks.delete_event_rule(&r.rule).await
    }
}

impl Handle for ep::EventRuleBind {
    async fn handle(cx: Cx<'_>, r: Self::Request) -> Result<Self::Reply, ApiError> {
        cx.tasks.bind_event_rule(r).await
    }
}

impl Handle for ep::EventRuleUnbind {
    async fn handle(cx: Cx<'_>, r: Self::Request) -> Result<Self::Reply, ApiError> {
        Ok(flow_protocol::event::UnbindReply {
            removed: cx.tasks.unbind_event_rule(r.event_type, &r.scope).await?,
        })
    }
}

impl Handle for ep::EventRuleBindings {
    async fn handle(cx: Cx<'_>, _: Self::Request) -> Result<Self::Reply, ApiError> {
        Ok(flow_protocol::event::BindingListReply {
            bindings: cx.store.list_bindings().await.map_err(store_error)?,
        })
    }
}

impl Handle for ep::EventPublish {
    async fn handle(cx: Cx<'_>, r: Self::Request) -> Result<Self::Reply, ApiError> {
        cx.tasks.ingest_event(&r).await
    }
}

impl Handle for ep::EventGet {
    async fn handle(cx: Cx<'_>, r: Self::Request) -> Result<Self::Reply, ApiError> {
        cx.tasks.event(r.id).await
    }
}

impl Handle for ep::EventList {
    async fn handle(cx: Cx<'_>, r: Self::Request) -> Result<Self::Reply, ApiError> {
        Ok(flow_protocol::event::EventListReply {
            events: cx
                .store
                .list_events(r.rack.as_deref(), r.limit.unwrap_or(50).min(1000))
                .await
                .map_err(store_error)?,
        })
    }
}

impl Handle for ep::EventClear {
    async fn handle(cx: Cx<'_>, r: Self::Request) -> Result<Self::Reply, ApiError> {
        cx.tasks.clear_event(&r).await
    }
}
