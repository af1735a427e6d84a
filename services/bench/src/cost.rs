//! What an operation costs the machine, independent of how fast the run
//! was: CPU seconds of the control plane (schedulers, nats-server,
//! Postgres) and of the workers per component operated and per step job,
//! beside the simulator's CPU per Redfish request (the work a real BMC
//! would do) and a raw HTTP client's CPU per request against the same
//! simulator in the same run (the least a worker could spend per request).
//! The CPU figures come from `/proc` (`services/bench/src/cpu.rs`).

use std::time::Instant;

use serde::Serialize;

use crate::cluster::Cluster;
use crate::cpu::CpuWindow;
use crate::procs::usage_of;

/// Requests of the raw client's measurement.
const RAW_REQUESTS: usize = 4_000;

/// Requests the raw client keeps in flight.
const RAW_CONCURRENCY: usize = 32;

/// The goals of issue 31, printed beside the figures: control plane per
/// component (ms), JetStream writes per step job, worker CPU per request
/// against the raw client's.
pub const GOAL_CONTROL_MS_PER_COMPONENT: f64 = 0.25;
/// JetStream writes per step job.
pub const GOAL_JS_WRITES_PER_JOB: f64 = 3.0;
/// Worker CPU per Redfish request, as a multiple of the raw client's.
pub const GOAL_WORKER_VS_RAW: f64 = 2.0;

/// A raw HTTP client's cost against the simulator.
#[derive(Debug, Clone, Copy, Default, Serialize)]
pub struct RawHttp {
    /// Requests made.
    pub requests: usize,
    /// Its CPU per request (this process), µs.
    pub client_us_per_request: f64,
    /// The simulator's CPU per request meanwhile, µs.
    pub simulator_us_per_request: f64,
    /// Requests per second.
    pub per_second: f64,
}

/// One scenario's costs.
#[derive(Debug, Clone, Copy, Default, Serialize)]
pub struct Costs {
    /// Components the run's step jobs reported on.
    pub components: usize,
    /// Step jobs.
    pub step_jobs: usize,
    /// Redfish requests the simulator served during the run.
    pub redfish_requests: u64,
    /// Schedulers + nats-server + Postgres, CPU seconds.
    pub control_plane_s: f64,
    /// Of that, per component operated, ms.
    pub control_ms_per_component: f64,
    /// Per step job, ms.
    pub control_ms_per_job: f64,
    /// nats-server alone per step job, ms.
    pub nats_ms_per_job: f64,
    /// Workers, CPU seconds.
    pub workers_s: f64,
    /// Per component, ms.
    pub worker_ms_per_component: f64,
    /// Per Redfish request, µs (everything a worker does, over its
    /// requests).
    pub worker_us_per_request: f64,
    /// The simulator's CPU per request during the run, µs.
    pub simulator_us_per_request: f64,
    /// The raw client's measurement, after the run.
    pub raw: RawHttp,
    /// worker_us_per_request / the raw client's.
    pub worker_vs_raw: f64,
}

impl Costs {
    /// The costs of a run with this CPU window.
    pub fn of(
        cpu: &CpuWindow,
        components: usize,
        step_jobs: usize,
        redfish_requests: u64,
        raw: RawHttp,
    ) -> Costs {
        let control = cpu.scheduler_s + cpu.nats_server_s + cpu.postgres_s;
        let per = |s: f64, n: f64| if n > 0.0 { s / n } else { 0.0 };
        let n = components as f64;
        let jobs = step_jobs as f64;
        let requests = redfish_requests as f64;
        let worker_us = per(cpu.workers_s, requests) * 1e6;
        Costs {
            components,
            step_jobs,
            redfish_requests,
            control_plane_s: control,
            control_ms_per_component: per(control, n) * 1e3,
            control_ms_per_job: per(control, jobs) * 1e3,
            nats_ms_per_job: per(cpu.nats_server_s, jobs) * 1e3,
            workers_s: cpu.workers_s,
            worker_ms_per_component: per(cpu.workers_s, n) * 1e3,
            worker_us_per_request: worker_us,
            simulator_us_per_request: per(cpu.simulator_s, requests) * 1e6,
            raw,
            worker_vs_raw: per(worker_us, raw.client_us_per_request),
        }
    }
}

/// A plain `reqwest` client's CPU per authenticated Redfish GET against
/// the cluster's first BMC, and the simulator's meanwhile.
pub async fn raw_http(cluster: &Cluster) -> anyhow::Result<RawHttp> {
    let Some(bmc) = cluster
        .racks
        .first()
        .and_then(|r| r.components.first())
        .map(|c| c.bmc_url.clone())
    else {
        return Ok(RawHttp::default());
    };
    let url = format!("{}/redfish/v1/Chassis", bmc.trim_end_matches('/'));
    let http = reqwest::Client::new();
    // One request first: a connection, and a check that it answers.
    let first = http
        .get(&url)
        .basic_auth("root", Some("0penBmc"))
        .send()
        .await?;
    anyhow::ensure!(
        first.status().is_success(),
        "the raw client's {url} answered {}",
        first.status()
    );
    let me = std::process::id();
    let client_before = usage_of(me).cpu_seconds;
    let sim_before = cluster.usage().simulator.cpu_seconds;
    let started = Instant::now();
    let next = std::sync::atomic::AtomicUsize::new(0);
    let one = || async {
        while next.fetch_add(1, std::sync::atomic::Ordering::Relaxed) < RAW_REQUESTS {
            let r = http
                .get(&url)
                .basic_auth("root", Some("0penBmc"))
                .send()
                .await?;
            r.bytes().await?;
        }
        Ok::<_, reqwest::Error>(())
    };
    let results = futures::future::join_all((0..RAW_CONCURRENCY).map(|_| one())).await;
    for r in results {
        r?;
    }
    let wall = started.elapsed().as_secs_f64();
    let client = usage_of(me).cpu_seconds - client_before;
    let sim = cluster.usage().simulator.cpu_seconds - sim_before;
    let n = RAW_REQUESTS as f64;
    Ok(RawHttp {
        requests: RAW_REQUESTS,
        client_us_per_request: client / n * 1e6,
        simulator_us_per_request: sim / n * 1e6,
        per_second: n / wall.max(f64::EPSILON),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn costs_divide_the_parts_cpu_by_what_they_did() {
        let cpu = CpuWindow {
            scheduler_s: 1.0,
            nats_server_s: 2.0,
            postgres_s: 0.5,
            workers_s: 4.0,
            simulator_s: 2.0,
            ..CpuWindow::default()
        };
        let raw = RawHttp {
            requests: 10,
            client_us_per_request: 50.0,
            simulator_us_per_request: 40.0,
            per_second: 1.0,
        };
        let c = Costs::of(&cpu, 35_000, 1_000, 40_000, raw);
        assert!((c.control_ms_per_component - 0.1).abs() < 1e-9, "{c:?}");
        assert!((c.control_ms_per_job - 3.5).abs() < 1e-9);
        assert!((c.nats_ms_per_job - 2.0).abs() < 1e-9);
        assert!((c.worker_us_per_request - 100.0).abs() < 1e-9);
        assert!((c.simulator_us_per_request - 50.0).abs() < 1e-9);
        assert!((c.worker_vs_raw - 2.0).abs() < 1e-9);
        // Nothing done: no division by zero.
        let none = Costs::of(&CpuWindow::default(), 0, 0, 0, RawHttp::default());
        assert_eq!(none.control_ms_per_component, 0.0);
        assert_eq!(none.worker_vs_raw, 0.0);
    }
}
