//! Hardware watchers divide the racks among themselves: three
//! `flow-worker --watch` processes against a simulator of eight racks,
//! started before the scheduler (they wait for its membership bucket). In
//! steady state each compute tray's BMC has exactly one event stream open
//! (its EventService's `Subscriptions`, the simulator's own record) and the
//! watchers' `flow_watch_bmcs` add up to every BMC once, none holding all.
//! The watcher with the most racks is killed (SIGKILL); a leak is raised at once
//! on a tray of every rack, the dead watcher's included: each is recorded
//! as exactly one event, the survivors take every BMC and partition, and
//! each stream is open once again.

use std::collections::BTreeMap;
use std::time::Duration;

use flow_rack_sim::{InitialPower, SimConfig};
use flow_testenv::Stack;
use serde_json::{Value, json};
use support::{Worker, call, start_worker_with};

mod support;

const BMC_PASSWORD_ENV: &str = "FLOW_WATCHERS_TEST_BMC_PASSWORD";
const RACKS: usize = 8;
const WAIT: Duration = Duration::from_secs(60);
const POLL: Duration = Duration::from_millis(200);

/// The value of an unlabelled sample in a text exposition page.
fn sample(page: &str, name: &str) -> Option<f64> {
    page.lines()
        .filter(|l| !l.starts_with('#'))
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.parse().ok())
}

/// `name` on each watcher's `/metrics` (None: a page not read or no
/// sample).
async fn gauges(watchers: &[Worker], name: &str) -> Vec<Option<f64>> {
    let mut out = Vec::new();
    for w in watchers {
        let page = match reqwest::get(format!("http://{}/metrics", w.metrics_addr)).await {
            Ok(r) => r.text().await.ok(),
            Err(_) => None,
        };
        out.push(page.and_then(|p| sample(&p, name)));
    }
    out
}

/// The sum of `name` over `watchers` when every page had it.
async fn total(watchers: &[Worker], name: &str) -> Option<f64> {
    gauges(watchers, name).await.into_iter().sum()
}

/// Open event streams of each compute tray's BMC, by (rack, tray), as the
/// BMC lists them.
async fn subscriptions(http: &reqwest::Client, trays: &[(String, String, String)]) -> Vec<u64> {
    let mut out = Vec::new();
    for (_, _, url) in trays {
        let listed: Value = http
            .get(format!("{url}/redfish/v1/EventService/Subscriptions"))
            .basic_auth(
                flow_rack_sim::DEFAULT_USER,
                Some(flow_rack_sim::DEFAULT_PASSWORD),
            )
            .send()
            .await
            .expect("GET Subscriptions")
            .json()
            .await
            .expect("Subscriptions JSON");
        out.push(listed["Members@odata.count"].as_u64().unwrap_or(u64::MAX));
    }
    out
}

/// Leak events recorded, by (rack, component).
async fn leaks(client: &async_nats::Client) -> BTreeMap<(String, String), usize> {
    let listed = call(client, "event.list", json!({"limit": 1000})).await;
    let mut out = BTreeMap::new();
    for e in listed["events"].as_array().into_iter().flatten() {
        if e["event"]["event_type"] == "hardware.leak.detected" {
            let key = (
                e["event"]["rack"].as_str().unwrap_or_default().to_owned(),
                e["event"]["component"]
                    .as_str()
                    .unwrap_or_default()
                    .to_owned(),
            );
            *out.entry(key).or_default() += 1;
        }
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn watchers_divide_the_bmcs_and_a_dead_watchers_racks_are_taken_over_without_a_lost_leak() {
    let mut stack = Stack::builder()
        .simulator(SimConfig {
            racks: RACKS,
            compute: 2,
            nvswitch: 1,
            powershelf: 1,
            initial_power: InitialPower::On,
            ..SimConfig::default()
        })
        .workers(0)
        .without_scheduler()
        .start()
        .await;
    let inventory = stack.sim().inventory();
    let bmcs = inventory.iter().map(|r| r.components.len()).sum::<usize>() as f64;
    // One compute tray per rack: the one that leaks; the other's stream is
    // counted too.
    let mut trays = Vec::new();
    for rack in &inventory {
        for c in rack
            .components
            .iter()
            .filter(|c| c.component_type.eq_ignore_ascii_case("compute"))
        {
            let url = stack.sim().bmc_url(&rack.name, &c.name).expect("a BMC");
            trays.push((rack.name.clone(), c.name.clone(), url));
        }
    }
    let dir = std::env::temp_dir().join(format!("flow-watchers-{}", std::process::id()));
    let args = [
        "--watch",
        "--watch-poll-seconds",
        "2",
        "--watch-inventory-seconds",
        "1",
    ];
    let mut watchers = Vec::new();
    for i in 0..3 {
        watchers.push(
            start_worker_with(
                &stack.nats.url(),
                &dir.join(format!("w{i}")),
                BMC_PASSWORD_ENV,
                &args,
            )
            .await,
        );
    }
    // The scheduler (and the buckets it creates) after the watchers.
    stack.start_scheduler().await;
    for rack in &inventory {
        let rack = serde_json::to_value(rack).unwrap();
        call(&stack.client, "rack.create", json!({ "rack": rack })).await;
    }
    let http = reqwest::Client::new();

    // Steady state: the three see each other, every BMC and partition is
    // held once, each stream open once.
    let divided = flow_tests::eventually(WAIT, POLL, || async {
        let each = gauges(&watchers, "flow_watch_bmcs").await;
        let ok = gauges(&watchers, "flow_watchers_seen")
            .await
            .iter()
            .all(|n| *n == Some(3.0))
            && total(&watchers, "flow_watch_bmcs").await == Some(bmcs)
            && total(&watchers, "flow_watch_partitions").await == Some(32.0)
            && subscriptions(&http, &trays).await.iter().all(|n| *n == 1);
        ok.then_some(each)
    })
    .await
    .unwrap_or_else(|e| panic!("the watchers never divided the BMCs: {e}"));
    // The one to kill is the one with the most racks (eight racks over 32
    // partitions may leave a watcher none).
    let victim = (0..divided.len())
        .max_by(|a, b| {
            divided[*a]
                .unwrap_or(0.0)
                .total_cmp(&divided[*b].unwrap_or(0.0))
        })
        .expect("three watchers");
    assert!(
        divided[victim].is_some_and(|n| n > 0.0) && divided[victim] < Some(bmcs),
        "the BMCs are divided: {divided:?}"
    );

    let mut dead = watchers.remove(victim);
    dead.child.start_kill().expect("SIGKILL");
    dead.child.wait().await.expect("the watcher exited");
    // At once, before anyone took its racks: a leak on the first compute
    // tray of every rack.
    let leaking: Vec<_> = inventory
        .iter()
        .map(|rack| {
            trays
                .iter()
                .find(|(r, _, _)| *r == rack.name)
                .map(|(r, c, _)| (r.clone(), c.clone()))
                .expect("a compute tray")
        })
        .collect();
    for (rack, tray) in &leaking {
        let response = http
            .post(format!(
                "{}/admin/v1/racks/{rack}/components/{tray}/conditions",
                stack.sim().admin_url()
            ))
            .json(&json!({"kind": "leak"}))
            .send()
            .await
            .expect("the admin API");
        assert!(response.status().is_success(), "{}", response.status());
    }
    let recorded = flow_tests::eventually(WAIT, POLL, || async {
        let seen = leaks(&stack.client).await;
        leaking.iter().all(|k| seen.contains_key(k)).then_some(seen)
    })
    .await
    .unwrap_or_else(|e| panic!("a leak was lost after the watcher's death: {e}"));
    assert_eq!(recorded.len(), RACKS, "only the raised leaks: {recorded:?}");
    assert!(
        recorded.values().all(|n| *n == 1),
        "each leak is one event: {recorded:?}"
    );

    // The survivors hold every BMC and partition, each stream once.
    flow_tests::eventually(WAIT, POLL, || async {
        let ok = total(&watchers, "flow_watch_bmcs").await == Some(bmcs)
            && total(&watchers, "flow_watch_partitions").await == Some(32.0)
            && subscriptions(&http, &trays).await.iter().all(|n| *n == 1);
        ok.then_some(())
    })
    .await
    .unwrap_or_else(|e| panic!("the survivors never held every BMC once: {e}"));
    // A poll later the leaks are still one event each (repeats dropped).
    assert_eq!(leaks(&stack.client).await, recorded);
    stack.stop().await;
}
