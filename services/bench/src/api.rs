//! The few `flow.api` calls the harness makes, with a bounded wait each.

use std::time::Duration;

use flow_protocol::api::{TaskSubmit, TaskSubmitReply, decode_reply, endpoint};
use flow_protocol::subjects::api_subject;
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};

/// How long one API call may take.
const CALL_TIMEOUT: Duration = Duration::from_secs(30);

/// Calls `endpoint` with `body`; the reply's `result` or an error naming
/// the endpoint.
pub async fn call<B: Serialize, T: DeserializeOwned>(
    nats: &async_nats::Client,
    endpoint: &str,
    body: &B,
) -> anyhow::Result<T> {
    let payload = serde_json::to_vec(body)?;
    let reply = tokio::time::timeout(
        CALL_TIMEOUT,
        nats.request(api_subject(endpoint), payload.into()),
    )
    .await
    .map_err(|_| anyhow::anyhow!("flow.api.{endpoint}: no answer within {CALL_TIMEOUT:?}"))?
    .map_err(|e| anyhow::anyhow!("flow.api.{endpoint}: {e}"))?;
    decode_reply(&reply.payload)
        .map_err(|e| anyhow::anyhow!("flow.api.{endpoint}: {e}; {}", e.details.join("; ")))
}

/// Loads a rule batch (YAML) as the defaults of its operations.
pub async fn load_rules(nats: &async_nats::Client, yaml: &str) -> anyhow::Result<()> {
    let batch = flow_rules::RuleBatch::from_yaml_str(yaml)
        .map_err(|e| anyhow::anyhow!("the benchmark's rules do not validate: {e}"))?;
    let doc = json!({
        "version": "v1",
        "rules": batch.rules.iter().map(flow_rules::RuleSpec::to_json_value).collect::<Vec<_>>(),
    });
    let _: Value = call(
        nats,
        endpoint::RULE_BATCH_CREATE,
        &json!({"batch": doc, "overwrite": true}),
    )
    .await?;
    Ok(())
}

/// Registers a rack document.
pub async fn create_rack(
    nats: &async_nats::Client,
    rack: &flow_protocol::rack::RackSpec,
) -> anyhow::Result<()> {
    let _: Value = call(nats, endpoint::RACK_CREATE, &json!({ "rack": rack })).await?;
    Ok(())
}

/// Submits one request; the reply lists a task per rack.
pub async fn submit(
    nats: &async_nats::Client,
    request: &TaskSubmit,
) -> anyhow::Result<TaskSubmitReply> {
    call(nats, endpoint::TASK_SUBMIT, request).await
}

/// Tasks by status, e.g. `{"completed": 3, "running": 1}`.
pub async fn task_counts(nats: &async_nats::Client) -> anyhow::Result<Value> {
    call(nats, endpoint::TASK_COUNTS, &json!({})).await
}

/// Recent tasks (at most 1000), newest first.
pub async fn task_list(nats: &async_nats::Client) -> anyhow::Result<Vec<Value>> {
    call(nats, endpoint::TASK_LIST, &json!({"limit": 1000})).await
}

/// Creates a rule that is not a default; its id.
pub async fn create_rule(
    nats: &async_nats::Client,
    name: &str,
    operation: &str,
    definition: Value,
) -> anyhow::Result<flow_protocol::ids::RuleId> {
    let record: flow_protocol::api::RuleRecord = call(
        nats,
        endpoint::RULE_CREATE,
        &json!({"name": name, "operation_type": "power_control", "operation": operation,
                "definition": definition, "is_default": false}),
    )
    .await?;
    Ok(record.id)
}

/// One task's JSON (`task.get`).
pub async fn task_get(
    nats: &async_nats::Client,
    id: flow_protocol::ids::TaskId,
) -> anyhow::Result<Value> {
    call(nats, endpoint::TASK_GET, &json!({ "id": id })).await
}
