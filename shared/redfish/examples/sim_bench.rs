//! Benchmark: the rack simulator's sustained request rate, and the Redfish
//! managers' calls per second against it, on this machine.
//!
//! ```sh
//! cargo run --release -p flow-hardware --example sim_bench -- [SECONDS] [RACKS] [CONCURRENCY]
//! ```
//!
//! Prints one line per measurement: requests or calls, rate, and latency
//! percentiles. Loopback only; every loop is bounded by SECONDS.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use flow_hardware::{ComponentManager, ComponentTarget};
use flow_rack_sim::{InitialPower, SimConfig};
use flow_redfish::CredentialStore;
use flow_redfish::{RedfishManager, RedfishSettings};
use flow_rules::ComponentType;

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i]
}

fn report(what: &str, mut latencies: Vec<Duration>, errors: usize, elapsed: Duration) {
    latencies.sort();
    let n = latencies.len();
    println!(
        "{what}: {n} ok, {errors} errors in {:.1} s = {:.0}/s; latency p50 {:.2} ms, p99 {:.2} ms, max {:.2} ms",
        elapsed.as_secs_f64(),
        n as f64 / elapsed.as_secs_f64(),
        percentile(&latencies, 0.5).as_secs_f64() * 1e3,
        percentile(&latencies, 0.99).as_secs_f64() * 1e3,
        latencies.last().copied().unwrap_or_default().as_secs_f64() * 1e3,
    );
}

/// Runs `work` from `concurrency` tasks for `seconds`, round-robin over
/// `targets`; returns latencies, errors and elapsed time.
async fn drive<F, Fut>(
    targets: Arc<Vec<ComponentTarget>>,
    concurrency: usize,
    seconds: u64,
    work: F,
) -> (Vec<Duration>, usize, Duration)
where
    F: Fn(ComponentTarget) -> Fut + Send + Sync + 'static,
    Fut: std::future::Future<Output = bool> + Send,
{
    let work = Arc::new(work);
    let stop = Arc::new(AtomicBool::new(false));
    let start = Instant::now();
    let mut tasks = Vec::new();
    for worker in 0..concurrency {
        let (targets, work, stop) = (Arc::clone(&targets), Arc::clone(&work), Arc::clone(&stop));
        tasks.push(tokio::spawn(async move {
            let mut latencies = Vec::new();
            let mut errors = 0;
            let mut i = worker;
            while !stop.load(Ordering::Relaxed) {
                let target = targets[i % targets.len()].clone();
                i += concurrency;
                let t = Instant::now();
                if work(target).await {
                    latencies.push(t.elapsed());
                } else {
                    errors += 1;
                }
            }
            (latencies, errors)
        }));
    }
    tokio::time::sleep(Duration::from_secs(seconds)).await;
    stop.store(true, Ordering::Relaxed);
    let mut all = Vec::new();
    let mut errors = 0;
    for t in tasks {
        let (l, e) = t.await.expect("bench task");
        all.extend(l);
        errors += e;
    }
    (all, errors, start.elapsed())
}

#[tokio::main]
async fn main() {
    let args: Vec<u64> = std::env::args()
        .skip(1)
        .filter_map(|a| a.parse().ok())
        .collect();
    let seconds = args.first().copied().unwrap_or(10);
    let racks = args.get(1).copied().unwrap_or(1) as usize;
    let concurrency = args.get(2).copied().unwrap_or(32) as usize;
    let sim = flow_rack_sim::start(SimConfig {
        admin_port: 0,
        racks,
        initial_power: InitialPower::On,
        ..SimConfig::default()
    })
    .await
    .expect("simulator");
    let targets: Vec<ComponentTarget> = sim
        .inventory()
        .into_iter()
        .flat_map(|rack| {
            let name = rack.name.clone();
            rack.components.into_iter().map(move |c| ComponentTarget {
                rack: name.clone(),
                name: c.name,
                component_type: c.component_type.parse().expect("type"),
                bmc_url: c.bmc_url,
                credential_ref: c.credential_ref,
                resource_id: None,
            })
        })
        .filter(|t| t.component_type != ComponentType::PowerShelf)
        .collect();
    let targets = Arc::new(targets);
    println!(
        "flow-rack-sim benchmark: {racks} rack(s), {} tray BMCs, {concurrency} concurrent, {seconds} s per measurement",
        targets.len()
    );

    let http = reqwest::Client::new();
    let (lat, err, el) = drive(Arc::clone(&targets), concurrency, seconds, move |t| {
        let http = http.clone();
        async move {
            http.get(format!("{}/redfish/v1/Systems/System_0", t.bmc_url))
                .basic_auth("root", Some("0penBmc"))
                .send()
                .await
                .is_ok_and(|r| r.status().is_success())
        }
    })
    .await;
    report("simulator GET System_0 (raw HTTP)", lat, err, el);

    let credentials = Arc::new(CredentialStore::single("sim-bmc", "root", "0penBmc"));
    let settings = RedfishSettings::default();
    let compute = Arc::new(
        RedfishManager::new(
            ComponentType::Compute,
            &settings,
            Arc::clone(&credentials),
            None,
        )
        .unwrap(),
    );
    let switch = Arc::new(
        RedfishManager::new(ComponentType::NVSwitch, &settings, credentials, None).unwrap(),
    );
    let (lat, err, el) = drive(Arc::clone(&targets), concurrency, seconds, move |t| {
        let manager: Arc<dyn ComponentManager> = if t.component_type == ComponentType::Compute {
            compute.clone()
        } else {
            switch.clone()
        };
        async move { manager.power_status(&t).await.is_ok() }
    })
    .await;
    report("manager power_status calls", lat, err, el);
    sim.shutdown().await;
}
