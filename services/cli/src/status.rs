//! `flow status`: the pipeline at a glance.

use flow_config::Settings;
use flow_protocol::api::{TaskCountsRequest, endpoint};
use serde_json::{Value, json};

use crate::Outcome;
use crate::out::outln;
use crate::remote::{Output, fail};
use flow_client::ClientError;

fn str_of(v: &Value) -> String {
    match v {
        Value::Null => String::new(),
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// A consumer's figures, with those of its partitions (`<name>-<n>`, the
/// jobs' consumers) added in.
#[derive(Default)]
struct ConsumerSum {
    consumers: usize,
    pending: u64,
    in_flight: usize,
    redelivered: usize,
    waiting: usize,
}

async fn consumer_sum(
    stream: &async_nats::jetstream::stream::Stream,
    name: &str,
) -> Option<ConsumerSum> {
    use futures::StreamExt;
    let mut sum = ConsumerSum::default();
    let mut list = stream.consumers();
    let partition_prefix = format!("{name}-");
    while let Some(info) = list.next().await {
        let info = info.ok()?;
        if info.name == name || info.name.starts_with(&partition_prefix) {
            sum.consumers += 1;
            sum.pending += info.num_pending;
            sum.in_flight += info.num_ack_pending;
            sum.redelivered += info.num_redelivered;
            sum.waiting += info.num_waiting;
        }
    }
    (sum.consumers > 0).then_some(sum)
}

/// `flow status`: stream depths, replicas (how many have caught up) and
/// leaders, consumer lag and redeliveries, pull requests waiting (idle
/// workers), and tasks by status.
pub async fn status(settings: &Settings, out: Output) -> Outcome {
    use flow_protocol::jobs::{
        CONSUMER_SCHEDULER, CONSUMER_SUBMIT, CONSUMER_WORKERS, STREAM_EVENTS, STREAM_JOBS,
        STREAM_PARKED, STREAM_RESULTS, STREAM_TASKS,
    };
    let result = async {
        let client = crate::remote::connect(settings).await?;
        let js = async_nats::jetstream::new(client.nats().clone());
        let mut streams = Vec::new();
        for (name, consumer) in [
            (STREAM_TASKS, Some(CONSUMER_SUBMIT)),
            (STREAM_JOBS, Some(CONSUMER_WORKERS)),
            (STREAM_RESULTS, Some(CONSUMER_SCHEDULER)),
            (STREAM_EVENTS, None),
            (STREAM_PARKED, None),
        ] {
            let mut entry = json!({"stream": name});
            match js.get_stream(name).await {
                Ok(mut stream) => {
                    if let Ok(info) = stream.info().await {
                        entry["messages"] = json!(info.state.messages);
                        entry["bytes"] = json!(info.state.bytes);
                        entry["replicas"] = json!(info.config.num_replicas.max(1));
                        if let Some(cluster) = &info.cluster {
                            entry["leader"] = json!(cluster.leader);
                            // The leader and every follower that has caught up.
                            let current = usize::from(cluster.leader.is_some())
                                + cluster.replicas.iter().filter(|r| r.current).count();
                            entry["current_replicas"] = json!(current);
                        }
                    }
                    if let Some(c) = consumer
                        && let Some(sum) = consumer_sum(&stream, c).await
                    {
                        entry["consumer"] = json!(c);
                        entry["pending"] = json!(sum.pending);
                        entry["in_flight"] = json!(sum.in_flight);
                        entry["redelivered"] = json!(sum.redelivered);
                        entry["waiting_pulls"] = json!(sum.waiting);
                        if sum.consumers > 1 {
                            // The jobs' partitions (flow-workers-<n>) are
                            // summed under flow-workers.
                            entry["consumers"] = json!(sum.consumers);
                        }
                    }
                }
                Err(_) => entry["missing"] = json!(true),
            }
            streams.push(entry);
        }
        let tasks = client
            .call::<endpoint::TaskCounts>(&TaskCountsRequest {})
            .await?;
        let parked = streams
            .iter()
            .find(|s| s["stream"] == STREAM_PARKED)
            .and_then(|s| s["messages"].as_u64())
            .unwrap_or(0);
        Ok::<_, ClientError>(json!({"streams": streams, "tasks": tasks, "parked": parked}))
    }
    .await;
    match result {
        Ok(v) if out.json => {
            outln!("{}", serde_json::to_string_pretty(&v).unwrap_or_default());
            Outcome::Valid
        }
        Ok(v) => {
            let mut t = crate::remote::table(&[
                "STREAM",
                "MESSAGES",
                "REPLICAS",
                "LEADER",
                "CONSUMER",
                "PENDING",
                "IN FLIGHT",
                "REDELIVERED",
                "WAITING PULLS",
            ]);
            for s in v["streams"].as_array().cloned().unwrap_or_default() {
                if s["missing"] == true {
                    t.add_row(vec![str_of(&s["stream"]), "missing".to_owned()]);
                    continue;
                }
                let replicas = match s["current_replicas"].as_u64() {
                    Some(current) => format!("{} ({current} current)", str_of(&s["replicas"])),
                    None => str_of(&s["replicas"]),
                };
                t.add_row(vec![
                    str_of(&s["stream"]),
                    str_of(&s["messages"]),
                    replicas,
                    str_of(&s["leader"]),
                    str_of(&s["consumer"]),
                    str_of(&s["pending"]),
                    str_of(&s["in_flight"]),
                    str_of(&s["redelivered"]),
                    str_of(&s["waiting_pulls"]),
                ]);
            }
            outln!("{t}");
            let counts: Vec<String> = v["tasks"]
                .as_object()
                .map(|m| m.iter().map(|(k, n)| format!("{k} {n}")).collect())
                .unwrap_or_default();
            outln!(
                "Tasks: {}",
                if counts.is_empty() {
                    "none".to_owned()
                } else {
                    counts.join(", ")
                }
            );
            if v["parked"].as_u64().unwrap_or(0) > 0 {
                outln!(
                    "Parked: {} refused messages kept on {STREAM_PARKED} (headers say where from and why; `nats stream view {STREAM_PARKED}`)",
                    v["parked"]
                );
            }
            outln!("(waiting pulls ≈ idle worker slots; in flight = jobs a worker holds)");
            Outcome::Valid
        }
        Err(e) => fail(e),
    }
}
