//! Listening before speaking, against the rack simulator over HTTP: a power
//! command goes only once its BMC's event feed is open (or has had its
//! short chance to open), so the verification after it needs no read of a
//! state still moving — the event wakes its one confirming read. A BMC
//! whose stream stays silent costs time (the rule's poll interval), never
//! a wrong result. The waits are held the way the worker holds them
//! (`services/worker/src/job.rs`, `wait_for_events`).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use flow_executor::gate::Ungated;
use flow_executor::wake::{Listening, Woken, poll_now, wake_for};
use flow_executor::{
    Checkpoint, Clock, Effects, MemoryJournal, Progress, StepJob, SystemClock, advance,
};
use flow_hardware::{ComponentManager, ComponentTarget, ManagerRegistry};
use flow_rack_sim::{EventChoice, InitialPower, SimConfig};
use flow_redfish::{CredentialStore, RedfishManager, RedfishSettings};
use flow_rules::{ComponentType, OperationCode, RuleDefinition};
use serde_json::json;

const VERIFY: &str = "post_operation[0] (VerifyPowerStatus)";
/// Far longer than the simulated graceful shutdown (at 5 % of real time):
/// a verification that ends well before it was woken by an event.
const POLL: Duration = Duration::from_secs(3);

struct Rack {
    sim: flow_rack_sim::Simulator,
    registry: ManagerRegistry,
    trays: Vec<ComponentTarget>,
}

async fn rack(events: &str) -> Rack {
    let sim = flow_rack_sim::start(SimConfig {
        admin_port: 0,
        time_scale: 0.05,
        initial_power: InitialPower::On,
        compute: 4,
        nvswitch: 1,
        powershelf: 1,
        events: vec![events.parse::<EventChoice>().expect("an event profile")],
        ..SimConfig::default()
    })
    .await
    .expect("simulator");
    let credentials = Arc::new(CredentialStore::single("sim-bmc", "root", "0penBmc"));
    let manager: Arc<dyn ComponentManager> = Arc::new(
        RedfishManager::new(
            ComponentType::Compute,
            &RedfishSettings::default(),
            credentials,
            None,
        )
        .expect("a manager"),
    );
    let mut registry = ManagerRegistry::new();
    registry.register(manager);
    let inventory = sim.inventory().remove(0);
    let trays = inventory
        .components
        .iter()
        .filter(|c| c.component_type.parse() == Ok(ComponentType::Compute))
        .map(|c| ComponentTarget {
            rack: inventory.name.clone(),
            name: c.name.clone(),
            component_type: ComponentType::Compute,
            bmc_url: c.bmc_url.clone(),
            credential_ref: c.credential_ref.clone(),
            resource_id: None,
        })
        .collect::<Vec<_>>();
    assert_eq!(trays.len(), 4, "the rack's compute trays");
    Rack {
        sim,
        registry,
        trays,
    }
}

fn power_off(trays: &[ComponentTarget]) -> StepJob {
    let rule = RuleDefinition::from_value(&json!({"steps": [{
        "component_type": "compute", "stage": 1,
        "main_operation": {"name": "PowerControl"},
        "post_operation": [{"name": "VerifyPowerStatus", "timeout": "20s",
                            "poll_interval": format!("{}s", POLL.as_secs()),
                            "parameters": {"expected_status": "off"}}]}]}))
    .expect("a rule");
    StepJob {
        operation: "power_off".parse::<OperationCode>().expect("an operation"),
        components: trays.to_vec(),
        step: rule.steps[0].clone(),
        all_components: BTreeMap::from([(ComponentType::Compute, trays.to_vec())]),
        firmware: BTreeMap::new(),
        power_domains: Vec::new(),
        emergency: false,
    }
}

/// Runs the step as one worker does: one listening for the whole run, its
/// waits held on the components' signals.
async fn run(rack: &Rack, job: &StepJob) -> (Checkpoint, Duration) {
    let listening = Listening::default();
    let journal = MemoryJournal::default();
    let fx = Effects {
        hardware: &rack.registry,
        clock: &SystemClock,
        gate: &Ungated,
        images: &flow_executor::images::OriginUnverified,
        journal: &journal,
        observer: &flow_executor::Unobserved,
        cancelled: &|| false,
        listening: &listening,
    };
    let mut cp = Checkpoint::default();
    let mut kept = None;
    let started = Instant::now();
    loop {
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "never finished"
        );
        match advance(job, &mut cp, &fx).await {
            Progress::Done => return (cp, started.elapsed()),
            Progress::WaitUntil(at) => {
                let delay = Duration::from_millis(at.saturating_sub(SystemClock.now_ms()));
                match wake_for(job, &cp, &rack.registry, &listening, kept.take()) {
                    Some(mut wake) => {
                        if let Woken::Poll(names) = wake.wait(delay).await {
                            poll_now(&mut cp, &names, SystemClock.now_ms());
                        }
                        kept = Some(wake);
                    }
                    None => tokio::time::sleep(delay).await,
                }
            }
            other => panic!("the step ended {other:?}: {cp:?}"),
        }
    }
}

fn reads(cp: &Checkpoint, tray: &str) -> u32 {
    cp.history[tray]
        .iter()
        .filter(|a| a.action == VERIFY)
        .map(|a| a.attempts)
        .sum()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_command_heard_by_an_open_feed_is_verified_by_one_read_when_its_event_comes() {
    let rack = rack("standard").await;
    let (cp, took) = run(&rack, &power_off(&rack.trays)).await;
    for tray in &rack.trays {
        assert_eq!(cp.results[&tray.name], "Off", "{tray:?}");
        assert_eq!(
            reads(&cp, &tray.name),
            1,
            "{}: one confirming read, none of the moving state: {:?}",
            tray.name,
            cp.history[&tray.name]
        );
    }
    assert!(
        took < POLL,
        "the events woke the reads before the {POLL:?} poll: {took:?}"
    );
    rack.sim.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_silent_stream_costs_the_poll_interval_and_still_one_read() {
    // The stream opens and says nothing (an image that sends no events).
    let rack = rack("none").await;
    let (cp, took) = run(&rack, &power_off(&rack.trays)).await;
    for tray in &rack.trays {
        assert_eq!(cp.results[&tray.name], "Off", "{tray:?}");
        assert_eq!(reads(&cp, &tray.name), 1, "{:?}", cp.history[&tray.name]);
    }
    assert!(
        took >= POLL,
        "no event, so the read waited for the poll: {took:?}"
    );
    rack.sim.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_that_heard_nothing_before_the_commands_reads_at_once() {
    let rack = rack("standard").await;
    let job = power_off(&rack.trays);
    // The commands go in one run; the verification is another's (a
    // redelivery elsewhere), which listened to nothing before them.
    let sent_only = StepJob {
        step: flow_rules::Step {
            post_operation: Vec::new(),
            ..job.step.clone()
        },
        ..job.clone()
    };
    run(&rack, &sent_only).await;
    let verify_only = StepJob {
        step: flow_rules::Step {
            main_operation: job.step.post_operation[0].clone(),
            post_operation: Vec::new(),
            ..job.step.clone()
        },
        ..job.clone()
    };
    let began = SystemClock.now_ms();
    let (cp, _) = run(&rack, &verify_only).await;
    for tray in &rack.trays {
        assert_eq!(cp.results[&tray.name], "Off", "{tray:?}");
        let first = cp.history[&tray.name]
            .iter()
            .find(|a| a.action == "main_operation (VerifyPowerStatus)")
            .and_then(|a| a.at_ms.first().copied())
            .expect("a verification read");
        assert!(
            first.saturating_sub(began) < 1_000,
            "{}: read at once, not at the poll ({} ms after the start)",
            tray.name,
            first.saturating_sub(began)
        );
    }
    rack.sim.shutdown().await;
}
