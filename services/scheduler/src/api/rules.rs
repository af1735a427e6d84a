//! The `rule.*` endpoints: operation rules, their defaults, rack
//! associations, resolution and history.

use flow_protocol::api::ApiError;
use flow_protocol::api::endpoint as ep;

use super::table::{Cx, Handle};
use crate::error::store_error;

fn rule_invalid(errors: &flow_rules::ValidationErrors) -> ApiError {
    ApiError::invalid(
        format!(
            "the rule is invalid ({} {})",
            errors.len(),
            if errors.len() == 1 { "error" } else { "errors" }
        ),
        errors.iter().map(|e| e.to_string()).collect(),
    )
}

impl Handle for ep::RuleCreate {
    async fn handle(cx: Cx<'_>, r: Self::Request) -> Result<Self::Reply, ApiError> {
        let spec = flow_rules::spec_from_parts(
            &r.name,
            &r.description,
            &r.operation_type,
            &r.operation,
            &r.definition,
        )
        .map_err(|e| rule_invalid(&e))?;
        cx.store
            .create_rule(&spec, r.is_default)
            .await
            .map_err(store_error)
    }
}

impl Handle for ep::RuleBatchCreate {
    async fn handle(cx: Cx<'_>, r: Self::Request) -> Result<Self::Reply, ApiError> {
        let batch = flow_rules::RuleBatch::from_value(&r.batch).map_err(|e| rule_invalid(&e))?;
        cx.store
            .batch_create(&batch, r.overwrite)
            .await
            .map_err(store_error)
    }
}

impl Handle for ep::RuleGet {
    async fn handle(cx: Cx<'_>, r: Self::Request) -> Result<Self::Reply, ApiError> {
        cx.store.get_rule(r.id).await.map_err(store_error)
    }
}

impl Handle for ep::RuleList {
    async fn handle(cx: Cx<'_>, r: Self::Request) -> Result<Self::Reply, ApiError> {
        cx.store.list_rules(&r).await.map_err(store_error)
    }
}

impl Handle for ep::RuleUpdate {
    async fn handle(cx: Cx<'_>, r: Self::Request) -> Result<Self::Reply, ApiError> {
        cx.store
            .update_rule(
                r.id,
                r.name.as_deref(),
                r.description.as_deref(),
                r.definition.as_ref(),
            )
            .await
            .map_err(store_error)
    }
}

impl Handle for ep::RuleDelete {
    async fn handle(cx: Cx<'_>, r: Self::Request) -> Result<Self::Reply, ApiError> {
        cx.store
            .delete_rule(r.id, r.force)
            .await
            .map_err(store_error)
    }
}

impl Handle for ep::RuleSetDefault {
    async fn handle(cx: Cx<'_>, r: Self::Request) -> Result<Self::Reply, ApiError> {
        cx.store.set_default(r.id).await.map_err(store_error)
    }
}

impl Handle for ep::RuleAssociate {
    async fn handle(cx: Cx<'_>, r: Self::Request) -> Result<Self::Reply, ApiError> {
        cx.store
            .associate(&r.rack, r.rule_id)
            .await
            .map_err(store_error)
    }
}

impl Handle for ep::RuleDisassociate {
    async fn handle(cx: Cx<'_>, r: Self::Request) -> Result<Self::Reply, ApiError> {
        cx.store
            .disassociate(&r.rack, r.operation)
            .await
            .map_err(store_error)
    }
}

impl Handle for ep::RuleResolve {
    async fn handle(cx: Cx<'_>, r: Self::Request) -> Result<Self::Reply, ApiError> {
        cx.store
            .resolve(&r.rack, r.operation, r.rule_id)
            .await
            .map(|res| res.reply)
            .map_err(store_error)
    }
}

impl Handle for ep::RuleHistory {
    async fn handle(cx: Cx<'_>, r: Self::Request) -> Result<Self::Reply, ApiError> {
        cx.store.rule_history(r.id).await.map_err(store_error)
    }
}
