//! The few `flow.api` calls the harness makes, typed by their endpoints,
//! with a bounded wait each.

use flow_protocol::api::{
    Endpoint, RackCreate, RuleBatchCreate, RuleCreate, TaskById, TaskCountsRequest, TaskList,
    TaskSubmit, TaskSubmitReply, endpoint,
};
use flow_protocol::task::{TaskCounts, TaskRecord, TaskSummary};
use serde_json::{Value, json};

/// Calls endpoint `E` through `flow-client` (its 10 s bound: a request
/// routed into a node that stopped answering is lost, and the caller tries
/// again after it); the reply's `result` or an error naming the endpoint.
pub async fn call<E: Endpoint>(
    nats: &async_nats::Client,
    request: &E::Request,
) -> anyhow::Result<E::Reply> {
    let name = E::NAME;
    flow_client::Client::new(nats.clone(), "the bench's NATS server")
        .call::<E>(request)
        .await
        .map_err(|e| match e {
            flow_client::ClientError::Api(e) => {
                anyhow::anyhow!("flow.api.{name}: {e}; {}", e.details.join("; "))
            }
            other => anyhow::anyhow!("flow.api.{name}: {other}"),
        })
}

/// Loads a rule batch (YAML) as the defaults of its operations.
pub async fn load_rules(nats: &async_nats::Client, yaml: &str) -> anyhow::Result<()> {
    let batch = flow_rules::RuleBatch::from_yaml_str(yaml)
        .map_err(|e| anyhow::anyhow!("the benchmark's rules do not validate: {e}"))?;
    let doc = json!({
        "version": "v1",
        "rules": batch.rules.iter().map(flow_rules::RuleSpec::to_json_value).collect::<Vec<_>>(),
    });
    call::<endpoint::RuleBatchCreate>(
        nats,
        &RuleBatchCreate {
            batch: doc,
            overwrite: true,
        },
    )
    .await?;
    Ok(())
}

/// Registers a rack document.
pub async fn create_rack(
    nats: &async_nats::Client,
    rack: &flow_protocol::rack::RackSpec,
) -> anyhow::Result<()> {
    call::<endpoint::RackCreate>(nats, &RackCreate { rack: rack.clone() }).await?;
    Ok(())
}

/// Submits one request; the reply lists a task per rack.
pub async fn submit(
    nats: &async_nats::Client,
    request: &TaskSubmit,
) -> anyhow::Result<TaskSubmitReply> {
    call::<endpoint::TaskSubmit>(nats, request).await
}

/// Tasks by status.
pub async fn task_counts(nats: &async_nats::Client) -> anyhow::Result<TaskCounts> {
    call::<endpoint::TaskCounts>(nats, &TaskCountsRequest {}).await
}

/// Recent tasks (at most 1000), newest first.
pub async fn task_list(nats: &async_nats::Client) -> anyhow::Result<Vec<TaskSummary>> {
    Ok(
        call::<endpoint::TaskList>(nats, &TaskList { limit: Some(1000) })
            .await?
            .tasks,
    )
}

/// Creates a power rule that is not a default; its id.
pub async fn create_rule(
    nats: &async_nats::Client,
    name: &str,
    operation: &str,
    definition: Value,
) -> anyhow::Result<flow_protocol::ids::RuleId> {
    let record = call::<endpoint::RuleCreate>(
        nats,
        &RuleCreate {
            name: name.to_owned(),
            description: String::new(),
            operation_type: "power_control".to_owned(),
            operation: operation.to_owned(),
            definition,
            is_default: false,
        },
    )
    .await?;
    Ok(record.id)
}

/// One task with its steps (`task.get`).
pub async fn task_get(
    nats: &async_nats::Client,
    id: flow_protocol::ids::TaskId,
) -> anyhow::Result<TaskRecord> {
    call::<endpoint::TaskGet>(nats, &TaskById { id }).await
}
