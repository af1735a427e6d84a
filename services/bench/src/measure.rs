//! What a run measures from the outside: every step result the workers
//! publish (a plain NATS subscription beside the scheduler's durable
//! consumer), the stage-advance latencies derived from them, and the raw
//! JetStream publish → consume → ack rate of the same server.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use async_nats::jetstream::{self, consumer, stream};
use flow_protocol::ids::TaskId;
use flow_protocol::jobs::ResultMessage;
use futures::StreamExt;
use serde::Serialize;

/// Collects every `ResultMessage` published while it lives.
pub struct Results {
    seen: Arc<Mutex<Vec<ResultMessage>>>,
    task: tokio::task::JoinHandle<()>,
}

impl Results {
    /// Subscribes to `flow.results.>`.
    pub async fn subscribe(nats: &async_nats::Client) -> anyhow::Result<Results> {
        let mut sub = nats.subscribe("flow.results.>").await?;
        let seen = Arc::new(Mutex::new(Vec::new()));
        let into = Arc::clone(&seen);
        let task = tokio::spawn(async move {
            while let Some(m) = sub.next().await {
                if let Ok(r) = serde_json::from_slice::<ResultMessage>(&m.payload) {
                    into.lock().unwrap_or_else(|e| e.into_inner()).push(r);
                }
            }
        });
        Ok(Results { seen, task })
    }

    /// Everything so far.
    pub fn snapshot(&self) -> Vec<ResultMessage> {
        self.seen.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }
}

impl Drop for Results {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// p50 / p99 / max of a sample, milliseconds.
#[derive(Debug, Clone, Copy, Default, Serialize)]
pub struct Spread {
    /// Samples.
    pub count: usize,
    /// Median.
    pub p50_ms: f64,
    /// 99th percentile.
    pub p99_ms: f64,
    /// Largest.
    pub max_ms: f64,
}

impl Spread {
    /// Of these samples (milliseconds).
    pub fn of(mut v: Vec<f64>) -> Spread {
        if v.is_empty() {
            return Spread::default();
        }
        v.sort_by(f64::total_cmp);
        let at = |q: f64| {
            let i = ((v.len() as f64 - 1.0) * q).round() as usize;
            v[i.min(v.len() - 1)]
        };
        Spread {
            count: v.len(),
            p50_ms: at(0.5),
            p99_ms: at(0.99),
            max_ms: v[v.len() - 1],
        }
    }
}

/// Stage-advance latency per task and stage boundary: the last step result
/// of a stage (the worker's finish time) → the first job of the next stage
/// starting on a worker. `stage_of` maps a step index to its stage.
pub fn stage_advance(results: &[ResultMessage], stage_of: &dyn Fn(usize) -> u32) -> Spread {
    // (task, stage) → (latest finish, earliest start), over the last result
    // of each step.
    let mut last: BTreeMap<(TaskId, u32), &ResultMessage> = BTreeMap::new();
    for r in results {
        let key = (r.id.task, r.id.step_index);
        match last.get(&key) {
            Some(prev) if prev.finished_ms >= r.finished_ms => {}
            _ => {
                last.insert(key, r);
            }
        }
    }
    let mut stages: BTreeMap<TaskId, BTreeMap<u32, (u64, u64)>> = BTreeMap::new();
    for ((task, step), r) in &last {
        let e = stages
            .entry(*task)
            .or_default()
            .entry(stage_of(*step as usize))
            .or_insert((0, u64::MAX));
        e.0 = e.0.max(r.finished_ms);
        e.1 = e.1.min(r.started_ms);
    }
    let mut gaps = Vec::new();
    for per_stage in stages.values() {
        let v: Vec<&(u64, u64)> = per_stage.values().collect();
        for pair in v.windows(2) {
            let (finished, _) = pair[0];
            let (_, started) = pair[1];
            gaps.push(started.saturating_sub(*finished) as f64);
        }
    }
    Spread::of(gaps)
}

/// The raw rate of the same JetStream server: publish `n` messages of
/// `size` bytes to a file-backed work-queue stream while one pull consumer
/// fetches and acks them.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct RawRate {
    /// Messages.
    pub messages: usize,
    /// Bytes each.
    pub size: usize,
    /// From the first publish to the last ack, messages per second.
    pub per_second: f64,
}

/// Measures [`RawRate`] on a throw-away stream.
pub async fn raw_jetstream(
    nats: &async_nats::Client,
    n: usize,
    size: usize,
) -> anyhow::Result<RawRate> {
    let js = jetstream::new(nats.clone());
    let id = uuid::Uuid::new_v4().simple().to_string();
    let name = format!("BENCH_RAW_{id}");
    let subject = format!("bench.raw.{id}");
    let s = js
        .create_stream(stream::Config {
            name: name.clone(),
            subjects: vec![subject.clone()],
            retention: stream::RetentionPolicy::WorkQueue,
            storage: stream::StorageType::File,
            ..Default::default()
        })
        .await?;
    let c: consumer::PullConsumer = s
        .create_consumer(consumer::pull::Config {
            durable_name: Some("raw".into()),
            ack_policy: consumer::AckPolicy::Explicit,
            ..Default::default()
        })
        .await?;
    let body = bytes::Bytes::from(vec![b'x'; size]);
    let start = Instant::now();
    let publisher = {
        let js = js.clone();
        let subject = subject.clone();
        tokio::spawn(async move {
            let mut pending = futures::stream::FuturesUnordered::new();
            for _ in 0..n {
                let ack = js.publish(subject.clone(), body.clone()).await?;
                pending.push(async move { ack.await });
                if pending.len() >= 256
                    && let Some(ack) = pending.next().await
                {
                    ack?;
                }
            }
            while let Some(ack) = pending.next().await {
                ack?;
            }
            Ok::<_, anyhow::Error>(())
        })
    };
    let mut acked = 0;
    let deadline = Instant::now() + Duration::from_secs(120);
    while acked < n {
        if Instant::now() > deadline {
            anyhow::bail!("raw JetStream run: only {acked} of {n} messages came back in 120 s");
        }
        let mut batch = c
            .fetch()
            .max_messages(256)
            .expires(Duration::from_millis(500))
            .messages()
            .await?;
        while let Some(m) = batch.next().await {
            m.map_err(|e| anyhow::anyhow!(e))?
                .ack()
                .await
                .map_err(|e| anyhow::anyhow!(e))?;
            acked += 1;
        }
    }
    publisher.await??;
    let elapsed = start.elapsed();
    let _ = js.delete_stream(&name).await;
    Ok(RawRate {
        messages: n,
        size,
        per_second: n as f64 / elapsed.as_secs_f64(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spreads_pick_ranks() {
        let s = Spread::of((1..=100).map(f64::from).collect());
        assert_eq!(
            (s.count, s.p50_ms, s.p99_ms, s.max_ms),
            (100, 51.0, 99.0, 100.0)
        );
        assert_eq!(Spread::of(Vec::new()).count, 0);
    }
}
